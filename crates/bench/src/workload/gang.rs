//! `GangScheduling` (scheduler_perf's `podgroup/gangscheduling`, run with
//! GenericWorkload on): `node-default` nodes, namespace `gang-ns-0`,
//! PodGroups `gang-0` … `gang-(n-1)` with the gang policy and `minCount`
//! equal to the pods per group, and pods `test-gang-scheduling-{i}` of
//! 100m CPU and 100Mi in group `gang-{i / podsPerGroup}` (`gang-pod.yaml`).
//! Every gang fits: the workload measures the pod-group cycle's cost.
//!
//! The index in a pod's name is zero-padded (`-00012`): scheduler_perf
//! creates the pods one by one, and the oracle's bulk mode, which creates
//! them all before its loop starts, queues them in name order.

use serde_json::{json, Value};

/// The sizes whose names end so have 1000 pods per group; the others 3.
const PER_GROUP_1000: &str = "_1000PerGroup";

/// Pods per group of a size.
pub(super) fn pods_per_group(size: &str) -> usize {
    if size.ends_with(PER_GROUP_1000) {
        1000
    } else {
        3
    }
}

/// The cluster file.
pub(super) fn generate(nodes: usize, pods: usize, per_group: usize) -> Value {
    let mut items = vec![json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "gang-ns-0", "labels": {"kubernetes.io/metadata.name": "gang-ns-0"}},
    })];
    for i in 0..nodes {
        let name = format!("scheduler-perf-{i:05}");
        let mut labels = serde_json::Map::new();
        labels.insert("kubernetes.io/hostname".into(), json!(name));
        items.push(super::node(&name, labels));
    }
    for g in 0..pods.div_ceil(per_group) {
        items.push(json!({
            "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": format!("gang-{g}"), "namespace": "gang-ns-0"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": per_group}}},
        }));
    }
    for i in 0..pods {
        items.push(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": format!("test-gang-scheduling-{i:05}"), "namespace": "gang-ns-0",
                "creationTimestamp": super::timestamp(i),
            },
            "spec": {
                "schedulingGroup": {"podGroupName": format!("gang-{}", i / per_group)},
                "containers": [{
                    "name": "pause", "image": "registry.k8s.io/pause:3.10.1",
                    "resources": {"requests": {"cpu": "100m", "memory": "100Mi"}},
                }],
            },
            "status": {"phase": "Pending"},
        }));
    }
    json!({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items})
}
