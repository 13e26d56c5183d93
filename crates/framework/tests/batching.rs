//! OpportunisticBatching driven through the public framework with fake
//! plugins, in the scenarios of upstream's `batch_test.go` (unit) and
//! `test/integration/scheduler/batch` (ScheduleOne): which pods get a hint,
//! which hints are taken, when the kept list is flushed and why.

use std::sync::Arc;
use std::time::Duration;

use rkube_config::{Plugin as PluginRef, PluginConfig, PluginSet, Plugins, Profile};
use rkube_framework::{
    BatchClock, BindPlugin, ClusterApi, Code, CycleState, FilterPlugin, Framework, NodeInfo,
    NodeScore, Outcome, Plugin, QueueSortPlugin, QueuedPodRef, Registry, Scheduler, ScorePlugin,
    SignPlugin, Signed, Snapshot, Status,
};
use rkube_model::{Node, Pod};
use serde_json::json;

struct Required;

impl Plugin for Required {
    fn name(&self) -> &'static str {
        "Required"
    }
    fn as_queue_sort(&self) -> Option<&dyn QueueSortPlugin> {
        Some(self)
    }
    fn as_bind(&self) -> Option<&dyn BindPlugin> {
        Some(self)
    }
}

impl QueueSortPlugin for Required {
    fn less(&self, _: QueuedPodRef<'_>, _: QueuedPodRef<'_>) -> bool {
        false
    }
}

impl BindPlugin for Required {
    fn bind(&self, _: &mut CycleState, _: &Pod, _: &str, _: &mut dyn ClusterApi) -> Status {
        Status::success()
    }
}

/// Upstream's fake: a "blocking" pod (label `block`) does not fit a node
/// that already has one. Signs the pod's `sig` label; `sig=refuse`
/// refuses. Without `signs`, it is a filter that cannot sign.
struct BlockFilter {
    signs: bool,
}

impl Plugin for BlockFilter {
    fn name(&self) -> &'static str {
        "BlockFilter"
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn as_sign(&self) -> Option<&dyn SignPlugin> {
        self.signs.then_some(self as &dyn SignPlugin)
    }
}

impl FilterPlugin for BlockFilter {
    fn filter(&self, _: &CycleState, pod: &Pod, node: &NodeInfo) -> Status {
        let blocking = |p: &Pod| p.labels.contains_key("block");
        if blocking(pod) && node.pods.iter().any(|p| blocking(p)) {
            Status::new(Code::Unschedulable, "node has a blocking pod")
        } else {
            Status::success()
        }
    }
}

impl SignPlugin for BlockFilter {
    fn sign(&self, pod: &Pod, _: &Snapshot) -> Signed {
        match pod.labels.get("sig").map(String::as_str) {
            Some("refuse") => Signed::Refused,
            sig => Signed::Fragments(vec![("test", json!(sig))]),
        }
    }
}

/// Score = the node's `score` label, minus `per_pod` for every pod on it
/// (so a node that took a pod may fall behind: the rescore path).
struct LabelScore {
    per_pod: i64,
    /// NormalizeScore fails when a node scores this (0: never).
    fail_normalize_at: i64,
}

impl Plugin for LabelScore {
    fn name(&self) -> &'static str {
        "LabelScore"
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
    fn as_sign(&self) -> Option<&dyn SignPlugin> {
        Some(self)
    }
}

impl ScorePlugin for LabelScore {
    fn score(&self, _: &CycleState, _: &Pod, node: &NodeInfo) -> Result<i64, Status> {
        let base: i64 = node.node.labels["score"].parse().unwrap();
        Ok((base - self.per_pod * node.pods.len() as i64).max(0))
    }
    fn has_normalize(&self) -> bool {
        self.fail_normalize_at != 0
    }
    fn normalize(&self, _: &CycleState, _: &Pod, scores: &mut [NodeScore]) -> Status {
        if scores.iter().any(|s| s.score == self.fail_normalize_at) {
            Status::error("normalize failed")
        } else {
            Status::success()
        }
    }
}

impl SignPlugin for LabelScore {
    fn sign(&self, _: &Pod, _: &Snapshot) -> Signed {
        Signed::Fragments(Vec::new())
    }
}

fn framework(signs: bool, per_pod: i64) -> Framework {
    framework_with(signs, json!({ "perPod": per_pod }))
}

fn framework_with(signs: bool, score_args: serde_json::Value) -> Framework {
    let mut r = Registry::new();
    r.register("Required", |_, _| Ok(Arc::new(Required)));
    r.register("BlockFilter", |a, _| {
        Ok(Arc::new(BlockFilter {
            signs: a["signs"].as_bool().unwrap_or(false),
        }))
    });
    r.register("LabelScore", |a, _| {
        Ok(Arc::new(LabelScore {
            per_pod: a["perPod"].as_i64().unwrap_or(0),
            fail_normalize_at: a["failNormalizeAt"].as_i64().unwrap_or(0),
        }))
    });
    let set = |names: &[&str]| PluginSet {
        enabled: names
            .iter()
            .map(|n| PluginRef {
                name: n.to_string(),
                weight: Some(1),
            })
            .collect(),
        disabled: Vec::new(),
    };
    let profile = Profile {
        scheduler_name: Some("test-scheduler".into()),
        percentage_of_nodes_to_score: None,
        plugins: Some(Plugins {
            queue_sort: set(&["Required"]),
            filter: set(&["BlockFilter"]),
            score: set(&["LabelScore"]),
            bind: set(&["Required"]),
            ..Default::default()
        }),
        plugin_config: vec![
            PluginConfig {
                name: "BlockFilter".into(),
                args: json!({ "signs": signs }),
            },
            PluginConfig {
                name: "LabelScore".into(),
                args: score_args,
            },
        ],
    };
    Framework::new(&profile, 0, &r).expect("framework")
}

/// Nodes `n1..` with descending scores: n1 is preferred most.
fn snapshot(scores: &[i64]) -> Snapshot {
    Snapshot::new(
        scores
            .iter()
            .enumerate()
            .map(|(i, s)| {
                Arc::new(Node {
                    name: format!("n{}", i + 1),
                    labels: [("score".to_string(), s.to_string())].into(),
                    ..Default::default()
                })
            })
            .collect(),
    )
}

fn pod(name: &str, labels: &[(&str, &str)]) -> Pod {
    Pod {
        namespace: "default".into(),
        name: name.into(),
        uid: format!("{name}-uid"),
        scheduler_name: "test-scheduler".into(),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    }
}

/// Schedules `p` and assumes it onto its node; the node's name.
fn place(s: &mut Scheduler, fw: &Framework, snap: &mut Snapshot, p: &Pod) -> Option<String> {
    match s.schedule(fw, snap, p) {
        Outcome::Scheduled { node, .. } => {
            let mut placed = p.clone();
            placed.node_name = snap.nodes[node].name().to_string();
            snap.assume(node, Arc::new(placed));
            Some(snap.nodes[node].name().to_string())
        }
        _ => None,
    }
}

fn flushed(s: &Scheduler, reason: &str) -> u64 {
    s.batches["test-scheduler"]
        .stats
        .flushed
        .get(reason)
        .copied()
        .unwrap_or(0)
}

fn hints_used(s: &Scheduler) -> u64 {
    s.batches["test-scheduler"].stats.hint_used
}

const BLOCK: (&str, &str) = ("block", "1");

/// "three pod batch": one pod per node; the second and third pods take
/// the kept list's next nodes without a Score pass.
#[test]
fn three_pod_batch() {
    let fw = framework(true, 0);
    let mut snap = snapshot(&[30, 20, 10]);
    let mut s = Scheduler::new(1, 0);
    let got: Vec<_> = (1..=3)
        .map(|i| place(&mut s, &fw, &mut snap, &pod(&format!("p{i}"), &[BLOCK])))
        .collect();
    assert_eq!(
        got,
        [Some("n1".into()), Some("n2".into()), Some("n3".into())]
    );
    assert_eq!(hints_used(&s), 2);
    // The hint of the third pod used the list up.
    assert!(s.batches["test-scheduler"].kept().is_empty());
}

/// Rescoring: the node chosen last still fits and still scores best, so
/// it goes back into the list and is hinted again.
#[test]
fn rescoring_hints_the_same_node_again() {
    let fw = framework(true, 0);
    let mut snap = snapshot(&[30, 20, 10]);
    let mut s = Scheduler::new(1, 0);
    for i in 1..=3 {
        let got = place(&mut s, &fw, &mut snap, &pod(&format!("p{i}"), &[]));
        assert_eq!(got.as_deref(), Some("n1"));
    }
    assert_eq!(hints_used(&s), 2);
    assert_eq!(s.batches["test-scheduler"].stats.rescores, 2);
    let mut kept = s.batches["test-scheduler"].kept();
    kept.sort();
    assert_eq!(kept, ["n2", "n3"]);
}

/// Rescoring falls back to the next kept node: n1 lost 15 points with its
/// pod, so n2 (20) beats it (15).
#[test]
fn rescoring_falls_back_to_the_next_kept_node() {
    let fw = framework(true, 15);
    let mut snap = snapshot(&[30, 20, 10]);
    let mut s = Scheduler::new(1, 0);
    let a = place(&mut s, &fw, &mut snap, &pod("p1", &[]));
    let b = place(&mut s, &fw, &mut snap, &pod("p2", &[]));
    assert_eq!((a.as_deref(), b.as_deref()), (Some("n1"), Some("n2")));
    assert_eq!(hints_used(&s), 1);
}

/// A different signature gets no hint (pod_incompatible) and starts a new
/// list; a refused pod is not batchable.
#[test]
fn different_signatures_do_not_batch() {
    let fw = framework(true, 0);
    let mut snap = snapshot(&[30, 20, 10, 5]);
    let mut s = Scheduler::new(1, 0);
    place(&mut s, &fw, &mut snap, &pod("p1", &[BLOCK, ("sig", "a")]));
    place(&mut s, &fw, &mut snap, &pod("p2", &[BLOCK, ("sig", "b")]));
    assert_eq!(hints_used(&s), 0);
    assert_eq!(flushed(&s, "pod_incompatible"), 1);
    place(
        &mut s,
        &fw,
        &mut snap,
        &pod("p3", &[BLOCK, ("sig", "refuse")]),
    );
    assert_eq!(flushed(&s, "pod_incompatible"), 2);
    assert_eq!(flushed(&s, "pod_not_batchable"), 1);
    assert!(s.batches["test-scheduler"].kept().is_empty());
}

/// The next pod must come in the very next cycle: a cycle in between
/// (here a pod that fits nowhere) flushes with pod_skipped.
#[test]
fn a_cycle_in_between_flushes() {
    let fw = framework(true, 0);
    let mut snap = snapshot(&[30, 20]);
    let mut s = Scheduler::new(1, 0);
    place(&mut s, &fw, &mut snap, &pod("p1", &[BLOCK]));
    place(&mut s, &fw, &mut snap, &pod("p2", &[BLOCK]));
    assert_eq!(hints_used(&s), 1);
    // Both nodes are taken: p3 fails, its cycle stores nothing.
    assert_eq!(place(&mut s, &fw, &mut snap, &pod("p3", &[BLOCK])), None);
    let mut snap2 = snapshot(&[30, 20, 10]);
    place(&mut s, &fw, &mut snap2, &pod("p4", &[BLOCK]));
    // p4 (the cycle after p3's failure) found the list from p1's cycle
    // used up: no flush, no hint. Store a fresh list, then skip a cycle.
    s.cycle += 1;
    place(&mut s, &fw, &mut snap2, &pod("p5", &[BLOCK]));
    assert_eq!(flushed(&s, "pod_skipped"), 1);
    assert_eq!(hints_used(&s), 1);
}

/// A pod with a nominated node is never hinted (pod_nominated).
#[test]
fn a_nominated_pod_is_not_hinted() {
    let fw = framework(true, 0);
    let mut snap = snapshot(&[30, 20, 10]);
    let mut s = Scheduler::new(1, 0);
    place(&mut s, &fw, &mut snap, &pod("p1", &[BLOCK]));
    let mut p2 = pod("p2", &[BLOCK]);
    p2.nominated_node_name = "n3".into();
    assert_eq!(place(&mut s, &fw, &mut snap, &p2).as_deref(), Some("n3"));
    assert_eq!(flushed(&s, "pod_nominated"), 1);
    assert_eq!(hints_used(&s), 0);
    // Its single-node result dropped the list (empty_list).
    assert!(s.batches["test-scheduler"].kept().is_empty());
    assert_eq!(flushed(&s, "empty_list"), 1);
}

/// A kept list is offered for 500 ms from when it was stored.
#[test]
fn a_list_expires_after_500ms() {
    let fw = framework(true, 0);
    let mut snap = snapshot(&[30, 20, 10]);
    let mut s = Scheduler::new(1, 0);
    s.batch_clock = BatchClock::Fixed(Duration::from_millis(1000));
    place(&mut s, &fw, &mut snap, &pod("p1", &[BLOCK]));
    s.batch_clock = BatchClock::Fixed(Duration::from_millis(1500));
    place(&mut s, &fw, &mut snap, &pod("p2", &[BLOCK]));
    assert_eq!(hints_used(&s), 1, "exactly 500 ms is not past the age");
    s.batch_clock = BatchClock::Fixed(Duration::from_millis(1501));
    place(&mut s, &fw, &mut snap, &pod("p3", &[BLOCK]));
    assert_eq!(flushed(&s, "expired"), 1);
    assert_eq!(hints_used(&s), 1);
}

/// A Filter plugin that cannot sign turns batching off for the profile;
/// so does the gate.
#[test]
fn a_plugin_without_signatures_or_the_gate_turns_batching_off() {
    let fw = framework(false, 0);
    assert!(fw.signers().is_none());
    let mut snap = snapshot(&[30, 20, 10]);
    let mut s = Scheduler::new(1, 0);
    for i in 1..=3 {
        place(&mut s, &fw, &mut snap, &pod(&format!("p{i}"), &[BLOCK]));
    }
    assert_eq!(hints_used(&s), 0);
    assert_eq!(flushed(&s, "pod_not_batchable"), 2);

    let fw = framework(true, 0);
    let mut snap = snapshot(&[30, 20, 10]);
    let mut s = Scheduler::new(1, 0);
    s.opportunistic_batching = false;
    for i in 1..=3 {
        place(&mut s, &fw, &mut snap, &pod(&format!("p{i}"), &[BLOCK]));
    }
    assert!(s.batches.is_empty());
}

/// Signatures: `schedulerName` plus every fragment, keys sorted, equal
/// fragments from two plugins kept once (upstream's TestSignatures).
#[test]
fn signature_bytes() {
    let fw = framework(true, 0);
    let sig =
        rkube_framework::batch::sign_pod(&fw, &pod("p", &[("sig", "x")]), &Snapshot::default())
            .unwrap();
    assert_eq!(
        sig.0,
        r#"{"test":"x","v1.Pod.Spec.SchedulerName":"test-scheduler"}"#
    );
    assert!(rkube_framework::batch::sign_pod(
        &fw,
        &pod("p", &[("sig", "refuse")]),
        &Snapshot::default()
    )
    .is_none());
}

/// A rescore that fails (here NormalizeScore) gives no hint and leaves the
/// kept list as it was (upstream's TestBatchRescore error cases).
#[test]
fn a_failed_rescore_keeps_the_list() {
    // n1 scores 35, then 25 with one pod: normalizing a 25 fails.
    let fw = framework_with(true, json!({"perPod": 10, "failNormalizeAt": 25}));
    let mut snap = snapshot(&[35, 20, 10]);
    let mut s = Scheduler::new(1, 0);
    assert_eq!(
        place(&mut s, &fw, &mut snap, &pod("p1", &[])).as_deref(),
        Some("n1")
    );
    // p2: the rescore of n1 fails; so does p2's full cycle (n1 scores 25).
    assert!(matches!(
        s.schedule(&fw, &snap, &pod("p2", &[])),
        Outcome::Error(_)
    ));
    assert_eq!(flushed(&s, "normalize_error"), 1);
    let mut kept = s.batches["test-scheduler"].kept();
    kept.sort();
    assert_eq!(kept, ["n2", "n3"]);
}
