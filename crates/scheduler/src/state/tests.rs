//! The snapshot is copied only when what the scheduler reads changes, and
//! the handlers fire upstream's cluster events: each moves only the
//! rejected pods its hints admit.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1 as core;
use rkube_framework::Profiles;
use serde_json::json;

use super::{Change, State};
use crate::queue::{Place, Queue};

fn state() -> (State, Profiles) {
    let profiles =
        rkube_plugins::profiles(&rkube_config::default_config()).expect("default profiles");
    let queue =
        Queue::new(Duration::from_secs(1), Duration::from_secs(10)).with_profiles(&profiles);
    (State::new(queue), profiles)
}

fn node(labels: serde_json::Value, heartbeat: &str) -> core::Node {
    serde_json::from_value(json!({
        "metadata": {"name": "n1", "labels": labels},
        "status": {
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": heartbeat}]
        }
    }))
    .expect("node")
}

fn pod(node: Option<&str>, labels: serde_json::Value, phase_note: &str) -> core::Pod {
    let mut spec = json!({"containers": [{"name": "c", "image": "busybox",
        "resources": {"requests": {"cpu": "100m"}}}]});
    if let Some(n) = node {
        spec["nodeName"] = json!(n);
    }
    serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "default", "uid": "u1", "labels": labels},
        "spec": spec,
        "status": {"phase": "Pending", "message": phase_note}
    }))
    .expect("pod")
}

fn snapshot(s: &mut State) -> Arc<rkube_framework::Snapshot> {
    s.ensure_snapshot();
    s.cached_snapshot().expect("built")
}

#[test]
fn node_heartbeat_keeps_the_snapshot_and_a_label_change_rebuilds_it() {
    let (mut s, _) = state();
    let now = Instant::now();
    s.nodes_changed(Change::Apply(node(json!({}), "2026-01-01T00:00:00Z")), now);
    let held = snapshot(&mut s);
    s.nodes_changed(Change::Apply(node(json!({}), "2026-01-01T00:00:10Z")), now);
    let after = s.cached_snapshot().expect("heartbeat must not invalidate");
    assert!(Arc::ptr_eq(&held, &after));

    s.nodes_changed(
        Change::Apply(node(json!({"zone": "a"}), "2026-01-01T00:00:20Z")),
        now,
    );
    assert!(s.cached_snapshot().is_none(), "a label change rebuilds");
    let rebuilt = snapshot(&mut s);
    assert_eq!(
        rebuilt.nodes[0].node.labels.get("zone").map(String::as_str),
        Some("a")
    );
}

#[test]
fn binding_confirmation_does_not_copy_the_snapshot() {
    let (mut s, profiles) = state();
    let now = Instant::now();
    s.nodes_changed(Change::Apply(node(json!({}), "2026-01-01T00:00:00Z")), now);
    s.pods_changed(
        &profiles,
        Change::Apply(pod(None, json!({"app": "x"}), "")),
        now,
    );
    let held = snapshot(&mut s);
    // A pending pod's status update: not in the snapshot, nothing copied.
    s.pods_changed(
        &profiles,
        Change::Apply(pod(None, json!({"app": "x"}), "w")),
        now,
    );
    assert!(Arc::ptr_eq(&held, &s.cached_snapshot().expect("kept")));

    // Assuming while a cycle still holds the snapshot copies it.
    let mut assumed = (*s.pods["u1"].model).clone();
    assumed.node_name = "n1".into();
    s.assume("u1".into(), Arc::new(assumed));
    let with_assumed = s.cached_snapshot().expect("kept");
    assert!(!Arc::ptr_eq(&held, &with_assumed));
    assert_eq!(held.nodes[0].pods.len(), 0);
    assert_eq!(with_assumed.nodes[0].pods.len(), 1);

    // The watch confirms the binding: an equal pod, no copy.
    s.pods_changed(
        &profiles,
        Change::Apply(pod(Some("n1"), json!({"app": "x"}), "w")),
        now,
    );
    let confirmed = s.cached_snapshot().expect("kept");
    assert!(Arc::ptr_eq(&with_assumed, &confirmed));
    assert!(s.assumed.is_empty());

    // A label change on the bound pod is seen by the next cycle.
    s.pods_changed(
        &profiles,
        Change::Apply(pod(Some("n1"), json!({"app": "y"}), "w")),
        now,
    );
    let relabelled = s.cached_snapshot().expect("kept");
    assert!(!Arc::ptr_eq(&confirmed, &relabelled));
    assert_eq!(relabelled.nodes[0].pods.len(), 1);
    assert_eq!(
        relabelled.nodes[0].pods[0]
            .labels
            .get("app")
            .map(String::as_str),
        Some("y")
    );
}

/// A pending pod `name` (uid = name) asking for `cpu`, optionally with a
/// required `zone` node affinity, a claim and a nominated node.
fn pending(name: &str, cpu: &str, extra: serde_json::Value) -> core::Pod {
    let mut spec = json!({"containers": [{"name": "c", "image": "busybox",
        "resources": {"requests": {"cpu": cpu}}}]});
    let mut status = json!({"phase": "Pending"});
    if let Some(zone) = extra.get("zone") {
        spec["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
            {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": [zone]}]}]}}});
    }
    if let Some(claim) = extra.get("claim") {
        spec["volumes"] = json!([{"name": "v", "persistentVolumeClaim": {"claimName": claim}}]);
    }
    if let Some(n) = extra.get("nominated") {
        status["nominatedNodeName"] = n.clone();
    }
    if let Some(p) = extra.get("priority") {
        spec["priority"] = p.clone();
    }
    if let Some(n) = extra.get("node") {
        spec["nodeName"] = n.clone();
        status["phase"] = json!("Running");
    }
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "uid": name},
        "spec": spec,
        "status": status
    }))
    .expect("pod")
}

fn sized_node(name: &str, cpu: &str, labels: serde_json::Value) -> core::Node {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"}}
    }))
    .expect("node")
}

/// Adds the pod, pops it and rejects it with `rejectors`.
fn reject(
    s: &mut State,
    profiles: &Profiles,
    p: core::Pod,
    rejectors: &[&'static str],
    now: Instant,
) {
    let uid = p.metadata.uid.clone().expect("uid");
    s.pods_changed(profiles, Change::Apply(p), now);
    let popped = s.queue.pop(now).expect("active");
    assert_eq!(popped.pod.uid, uid);
    let latest = s.pending_pod(profiles, &uid).expect("pending");
    s.requeue_unschedulable(latest, rejectors.iter().copied().collect(), now);
    assert_eq!(s.queue.place(&uid), Some(Place::Unschedulable));
}

#[test]
fn node_events_move_only_the_pods_they_help() {
    let (mut s, profiles) = state();
    let t0 = Instant::now();
    let later = t0 + Duration::from_secs(30);
    s.nodes_changed(Change::Apply(sized_node("n1", "1", json!({}))), t0);
    reject(
        &mut s,
        &profiles,
        pending("big", "4", json!({})),
        &["NodeResourcesFit"],
        t0,
    );
    reject(
        &mut s,
        &profiles,
        pending("zoned", "100m", json!({"zone": "b"})),
        &["NodeAffinity"],
        t0,
    );
    // A heartbeat, a relist of the same nodes, an unrelated label: nothing.
    s.nodes_changed(Change::Apply(sized_node("n1", "1", json!({}))), later);
    s.nodes_changed(
        Change::Replace(vec![sized_node("n1", "1", json!({}))]),
        later,
    );
    s.nodes_changed(
        Change::Apply(sized_node("n1", "1", json!({"zone": "a"}))),
        later,
    );
    assert_eq!(s.queue.place("big"), Some(Place::Unschedulable));
    assert_eq!(s.queue.place("zoned"), Some(Place::Unschedulable));
    // The label the affinity selects: only "zoned".
    s.nodes_changed(
        Change::Apply(sized_node("n1", "1", json!({"zone": "b"}))),
        later,
    );
    assert_eq!(s.queue.place("zoned"), Some(Place::Active));
    assert_eq!(s.queue.place("big"), Some(Place::Unschedulable));
    // More allocatable on the node (relisted): now "big" fits.
    s.nodes_changed(
        Change::Replace(vec![sized_node("n1", "8", json!({"zone": "b"}))]),
        later,
    );
    assert_eq!(s.queue.place("big"), Some(Place::Active));
}

#[test]
fn pod_events_move_only_the_pods_they_help() {
    let (mut s, profiles) = state();
    let t0 = Instant::now();
    let later = t0 + Duration::from_secs(30);
    s.nodes_changed(Change::Apply(sized_node("n1", "1", json!({}))), t0);
    reject(
        &mut s,
        &profiles,
        pending("big", "4", json!({})),
        &["NodeResourcesFit"],
        t0,
    );
    // A pod bound to the node: an AssignedPodAdd, which Fit ignores.
    s.pods_changed(
        &profiles,
        Change::Apply(pending("running", "500m", json!({"node": "n1"}))),
        later,
    );
    assert_eq!(s.queue.place("big"), Some(Place::Unschedulable));
    // It goes away: AssignedPodDelete, which may free room.
    s.pods_changed(
        &profiles,
        Change::Delete(pending("running", "500m", json!({"node": "n1"}))),
        later,
    );
    assert_eq!(s.queue.place("big"), Some(Place::Active));

    // A pending pod without a nomination leaves: nothing; a nominated one
    // of priority 10 frees its room for pods of priority <= 10 only.
    reject(
        &mut s,
        &profiles,
        pending("low", "4", json!({"priority": 5})),
        &["NodeResourcesFit"],
        later,
    );
    reject(
        &mut s,
        &profiles,
        pending("high", "4", json!({"priority": 50})),
        &["NodeResourcesFit"],
        later,
    );
    s.pods_changed(
        &profiles,
        Change::Apply(pending("plain", "1", json!({}))),
        later,
    );
    s.pods_changed(
        &profiles,
        Change::Delete(pending("plain", "1", json!({}))),
        later,
    );
    assert_eq!(s.queue.place("low"), Some(Place::Unschedulable));
    let nominated = pending("nominated", "1", json!({"nominated": "n1", "priority": 10}));
    s.pods_changed(&profiles, Change::Apply(nominated.clone()), later);
    s.pods_changed(
        &profiles,
        Change::Delete(nominated),
        later + Duration::from_secs(30),
    );
    assert_eq!(s.queue.place("low"), Some(Place::Active));
    assert_eq!(s.queue.place("high"), Some(Place::Unschedulable));

    // A binding that failed: the assumed pod's room is free for the others.
    for gone in ["big", "low", "high"] {
        s.pods_changed(
            &profiles,
            Change::Delete(pending(gone, "4", json!({}))),
            later,
        );
    }
    reject(
        &mut s,
        &profiles,
        pending("fit", "4", json!({})),
        &["NodeResourcesFit"],
        later,
    );
    let assumed = {
        let mut p = (*s.pods["fit"].model).clone();
        p.node_name = "n1".into();
        Arc::new(p)
    };
    reject(
        &mut s,
        &profiles,
        pending("other", "4", json!({})),
        &["NodeResourcesFit"],
        later,
    );
    s.assumed_pod_forgotten(&assumed, true, later + Duration::from_secs(60));
    assert_eq!(s.queue.place("other"), Some(Place::Active));
    assert_eq!(
        s.queue.place("fit"),
        Some(Place::Unschedulable),
        "not the pod itself"
    );
}

#[test]
fn claim_events_move_the_pods_that_use_the_claim() {
    let (mut s, profiles) = state();
    let t0 = Instant::now();
    let later = t0 + Duration::from_secs(30);
    let uses = pending("uses", "100m", json!({"claim": "data"}));
    reject(&mut s, &profiles, uses, &["VolumeBinding"], t0);
    reject(
        &mut s,
        &profiles,
        pending("fit", "4", json!({})),
        &["NodeResourcesFit"],
        t0,
    );
    let pvc = |name: &str| -> core::PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "uid": name},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
        }))
        .expect("pvc")
    };
    s.pvcs_changed(Change::Apply(pvc("other")), later);
    assert_eq!(s.queue.place("uses"), Some(Place::Unschedulable));
    s.pvcs_changed(Change::Apply(pvc("data")), later);
    assert_eq!(s.queue.place("uses"), Some(Place::Active));
    assert_eq!(s.queue.place("fit"), Some(Place::Unschedulable));
}

#[test]
fn cache_size_counts_assigned_and_assumed_pods_not_pending_or_finished_ones() {
    let (mut s, profiles) = state();
    let now = Instant::now();
    s.nodes_changed(Change::Apply(node(json!({}), "2026-01-01T00:00:00Z")), now);
    let make = |uid: &str, node: Option<&str>, phase: &str| {
        let mut p = pod(node, json!({}), "");
        p.metadata.uid = Some(uid.into());
        p.metadata.name = Some(uid.into());
        p.status.get_or_insert_with(Default::default).phase = Some(phase.into());
        p
    };
    for (uid, node, phase) in [
        ("waiting", None, "Pending"),
        ("to-assume", None, "Pending"),
        ("running", Some("n1"), "Running"),
        ("finished", Some("n1"), "Succeeded"),
    ] {
        s.pods_changed(&profiles, Change::Apply(make(uid, node, phase)), now);
    }
    let mut assumed = (*s.pods["to-assume"].model).clone();
    assumed.node_name = "n1".into();
    s.assume("to-assume".into(), Arc::new(assumed));
    let g = s.gauges();
    assert_eq!((g.nodes, g.pods, g.assumed_pods), (1, 2, 1), "{g:?}");
}

/// Upstream's asynchronous preemption, as the informer sees it: the
/// preemptor is held back while its victims' deletions are being sent —
/// the first victim's deletion finds it gated — and let in once the last
/// victim is seen terminating, by the next victim deletion.
#[test]
fn a_preemptor_waits_until_its_last_victim_is_terminating() {
    let (mut s, profiles) = state();
    let t0 = Instant::now();
    let later = t0 + Duration::from_secs(30);
    s.nodes_changed(Change::Apply(sized_node("n1", "1", json!({}))), t0);
    for v in ["v1", "v2"] {
        let p = pending(v, "500m", json!({"node": "n1"}));
        s.pods_changed(&profiles, Change::Apply(p), t0);
    }
    let vip = pending("vip", "1", json!({"priority": 100}));
    s.pods_changed(&profiles, Change::Apply(vip), t0);
    s.queue.pop(t0).expect("active");
    s.preemption_started("vip");
    let latest = s.pending_pod(&profiles, "vip").expect("pending");
    s.requeue_unschedulable(latest, ["NodeResourcesFit"].into_iter().collect(), t0);
    assert!(s.is_running_preemption("vip"));

    // The first victim is gone while the deletions are still being sent.
    let v1 = pending("v1", "500m", json!({"node": "n1"}));
    s.pods_changed(&profiles, Change::Delete(v1), later);
    assert_eq!(s.queue.place("vip"), Some(Place::Unschedulable));
    assert_eq!(s.queue.pending().gated, 1);

    // The last victim's deletion is sent; until the informer shows it
    // terminating, the preemption runs.
    s.preemption_last_victim("vip", "v2");
    assert!(s.is_running_preemption("vip"));
    let mut v2 = pending("v2", "500m", json!({"node": "n1"}));
    v2.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        "2026-01-01T00:00:00Z".parse().expect("time"),
    ));
    s.pods_changed(&profiles, Change::Apply(v2.clone()), later);
    assert!(!s.is_running_preemption("vip"));
    // An update is not a deletion: the pod waits for one.
    assert_eq!(s.queue.place("vip"), Some(Place::Unschedulable));
    s.pods_changed(&profiles, Change::Delete(v2), later);
    assert_eq!(s.queue.place("vip"), Some(Place::Active));
    assert_eq!(s.queue.pending().gated, 0);
    s.preemption_finished("vip");
    assert!(!s.is_running_preemption("vip"));
}

/// VolumeBinding's CSIStorageCapacity hint: a new capacity object, or a
/// larger volume limit, moves a pod it rejected; a smaller one, or a
/// relist of the same objects, does not.
#[test]
fn storage_capacity_events_move_pods_only_when_the_limit_grows() {
    let (mut s, profiles) = state();
    let t0 = Instant::now();
    let later = t0 + Duration::from_secs(30);
    let cap = |capacity: &str| -> k8s_openapi::api::storage::v1::CSIStorageCapacity {
        serde_json::from_value(json!({
            "metadata": {"name": "cap", "namespace": "kube-system"},
            "storageClassName": "fast",
            "capacity": capacity,
        }))
        .expect("capacity")
    };
    reject(
        &mut s,
        &profiles,
        pending("a", "100m", json!({})),
        &["VolumeBinding"],
        t0,
    );
    s.storage_capacities_changed(Change::Apply(cap("10Gi")), later);
    assert_eq!(s.queue.place("a"), Some(Place::Active), "a new object");

    s.queue.pop(later).expect("a");
    s.queue.done("a");
    reject(
        &mut s,
        &profiles,
        pending("b", "100m", json!({})),
        &["VolumeBinding"],
        later,
    );
    s.storage_capacities_changed(Change::Apply(cap("5Gi")), later);
    s.storage_capacities_changed(Change::Replace(vec![cap("5Gi")]), later);
    assert_eq!(s.queue.place("b"), Some(Place::Unschedulable));
    s.storage_capacities_changed(Change::Apply(cap("20Gi")), later + Duration::from_secs(30));
    assert_eq!(s.queue.place("b"), Some(Place::Active), "a larger limit");
}
