//! The snapshot is copied only when what the scheduler reads changes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1 as core;
use rkube_framework::Profiles;
use serde_json::json;

use super::{Change, State};
use crate::queue::Queue;

fn state() -> (State, Profiles) {
    let profiles =
        rkube_plugins::profiles(&rkube_config::default_config()).expect("default profiles");
    let queue = Queue::new(Duration::from_secs(1), Duration::from_secs(10));
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
