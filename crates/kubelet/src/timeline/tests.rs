//! The tracker against hand-made pods and times.

use super::sli::pulling_time;
use super::*;
use serde_json::json;

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn pod_created(status: serde_json::Value, created: Timestamp) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default", "uid": "u1",
                     "creationTimestamp": created.to_string()},
        "spec": {"containers": [{"name": "main"}]},
        "status": status,
    }))
    .unwrap()
}

fn pod(status: serde_json::Value) -> Pod {
    pod_created(status, ts("2026-01-01T00:00:00Z"))
}

fn running() -> serde_json::Value {
    json!({"phase": "Running", "startTime": "2026-01-01T00:00:01Z",
           "conditions": [{"type": "Ready", "status": "True"}],
           "containerStatuses": [{"name": "main", "image": "i", "imageID": "", "ready": true,
               "restartCount": 0, "state": {"running": {"startedAt": "2026-01-01T00:00:03Z"}}}]})
}

#[test]
fn overlapping_pulls_count_once() {
    let s = |a: &str, b: &str| (ts(a), ts(b));
    let sessions = [
        s("2026-01-01T00:00:00Z", "2026-01-01T00:00:04Z"),
        s("2026-01-01T00:00:02Z", "2026-01-01T00:00:06Z"),
        s("2026-01-01T00:00:10Z", "2026-01-01T00:00:11Z"),
    ];
    assert_eq!(pulling_time(&sessions), Duration::from_secs(7));
    assert_eq!(pulling_time(&[]), Duration::ZERO);
}

#[test]
fn the_sli_needs_a_status_write_then_a_watch_event() {
    let t = Tracker::default();
    // Created 5 s ago (the API server's clock; stages are the kubelet's).
    let created = Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(5);
    let p = |status| pod_created(status, created);
    t.observed_on_watch(&p(json!({"phase": "Pending"})), Timestamp::now());
    t.stage(&p(json!({})), "Admitted", None, "");
    t.pull_started(&p(json!({})));
    t.pull_finished(&p(json!({})));
    // A watch event showing it running before any status write of
    // ours: not yet.
    t.observed_on_watch(&p(running()), Timestamp::now());
    assert_eq!(t.sli.count(), 0);
    t.status_written(&p(running()));
    t.observed_on_watch(&p(running()), Timestamp::now());
    assert_eq!((t.sli.count(), t.total.count()), (1, 1));
    // Once per pod.
    t.observed_on_watch(&p(running()), Timestamp::now());
    assert_eq!(t.sli.count(), 1);
    let tl = t.timeline("default", "web").unwrap();
    let e2e = tl.e2e_seconds.unwrap();
    assert!((5.0..6.0).contains(&e2e), "{e2e}");
    // Durations subtract exactly; their f64 forms may differ in the last
    // bit, so compare with a nanosecond's slack.
    let sli = tl.sli_seconds.unwrap();
    assert!(sli <= e2e - tl.image_pull_seconds + 1e-9, "{sli} {e2e}");
    // No init containers: the SLI is exactly end-to-end less pulling.
    assert!(sli + 1e-9 >= e2e - tl.image_pull_seconds, "{sli} {e2e}");
    let names: Vec<&str> = tl.stages.iter().map(|s| s.stage.as_str()).collect();
    assert_eq!(names[..3], ["PodCreated", "Seen", "Admitted"]);
    assert!(names.contains(&"Ready"));
    assert_eq!(names.last(), Some(&"ObservedRunning"));
    let mut out = String::new();
    t.render_gauge(&mut out);
    t.render(&mut out);
    assert!(
        out.contains("kubelet_pod_start_sli_duration_seconds_bucket{le=\"6\"} 1\n"),
        "{out}"
    );
    assert!(
        out.contains("kubelet_pod_start_sli_duration_seconds_bucket{le=\"4\"} 0\n"),
        "{out}"
    );
    assert!(
        out.contains("kubelet_pod_start_total_duration_seconds_count 1\n"),
        "{out}"
    );
    assert!(
        out.contains("kubelet_first_network_pod_start_sli_duration_seconds 5."),
        "{out}"
    );
}

#[test]
fn a_watch_event_ahead_of_the_write_answer_counts() {
    let t = Tracker::default();
    let created = Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(2);
    let mut p = pod_created(json!({"phase": "Pending"}), created);
    t.observed_on_watch(&p, Timestamp::now());
    p.status = pod(running()).status;
    p.metadata.resource_version = Some("7".into());
    // The write's own event first, then its answer: observed then.
    t.observed_on_watch(&p, Timestamp::now());
    t.status_written(&p);
    assert_eq!(t.sli.count(), 1);
    let tl = t.timeline("default", "web").unwrap();
    assert!(tl.e2e_seconds.unwrap() < 3.0);
}

#[test]
fn a_pod_seen_already_started_is_not_counted() {
    let t = Tracker::default();
    t.observed_on_watch(&pod(running()), ts("2026-01-01T00:10:00Z"));
    t.status_written(&pod(running()));
    t.observed_on_watch(&pod(running()), ts("2026-01-01T00:10:01Z"));
    assert_eq!(t.total.count(), 0);
    let mut out = String::new();
    t.render_gauge(&mut out);
    t.render(&mut out);
    assert!(out.is_empty());
}

#[test]
fn bounded() {
    let t = Tracker::default();
    let p = pod(json!({}));
    for i in 0..(MAX_STAGES + 10) {
        t.stage(&p, "X", None, "d".repeat(i * 10));
    }
    let tl = t.timeline("default", "web").unwrap();
    assert_eq!((tl.stages.len(), tl.dropped), (MAX_STAGES, 10));
    assert!(tl
        .stages
        .iter()
        .all(|s| s.detail.len() <= MAX_DETAIL + '…'.len_utf8()));
    for i in 0..(MAX_PODS + 5) {
        let mut q = p.clone();
        q.metadata.uid = Some(format!("u-{i}"));
        q.metadata.name = Some(format!("p-{i}"));
        t.stage(&q, "Seen", None, "");
    }
    assert!(t.lock().pods.len() <= MAX_PODS);
    assert!(t.timeline("default", "p-0").is_none());
    assert!(t
        .timeline("default", &format!("p-{}", MAX_PODS + 4))
        .is_some());
}
