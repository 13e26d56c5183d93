//! A few of the ported upstream cases run through the whole default
//! profile (`rkube_framework::explain`), checking that the per-plugin
//! verdicts and scores survive the framework unchanged, with v1.37's
//! default score weights (NodeResourcesFit 1, BalancedAllocation 1,
//! TaintToleration 3).

use rkube_framework::explain;
use rkube_framework::{Code, Explanation, Snapshot};
use rkube_model::resources::ResourceList;
use rkube_model::{Pod, Quantity, TaintEffect};

use crate::common::*;

fn run(snap: &Snapshot, pod: &Pod) -> Explanation {
    explain(&default_framework(), snap, pod).expect("explain")
}

/// `(raw, normalized, weight, weighted)` of a plugin on every node.
fn plugin_scores(e: &Explanation, plugin: &str) -> Vec<(i64, i64, i64, i64)> {
    e.nodes
        .iter()
        .map(|n| {
            let s = n
                .scores
                .iter()
                .find(|s| s.plugin == plugin)
                .unwrap_or_else(|| panic!("{plugin} did not score node {}", n.node));
            (s.raw, s.normalized, s.weight, s.weighted)
        })
        .collect()
}

#[test]
fn fit_score_least_allocated_through_default_profile() {
    // TestFitScore "test case for ScoringStrategy LeastAllocated".
    let snap = snapshot(
        vec![
            node("node1")
                .capacity(&[("cpu", "4000"), ("memory", "10000")])
                .obj(),
            node("node2")
                .capacity(&[("cpu", "6000"), ("memory", "10000")])
                .obj(),
        ],
        vec![
            pod()
                .name("e1")
                .node("node1")
                .req(&[("cpu", "2000"), ("memory", "4000")])
                .obj(),
            pod()
                .name("e2")
                .node("node2")
                .req(&[("cpu", "1000"), ("memory", "2000")])
                .obj(),
        ],
    );
    let p = pod()
        .name("p")
        .req(&[("cpu", "1000"), ("memory", "2000")])
        .obj();
    let e = run(&snap, &p);
    assert!(e.nodes.iter().all(|n| n.feasible), "{e:?}");
    assert_eq!(
        plugin_scores(&e, "NodeResourcesFit"),
        vec![(32, 32, 1, 32), (63, 63, 1, 63)]
    );
}

#[test]
fn balanced_allocation_through_default_profile() {
    // TestNodeResourcesBalancedAllocation "nothing scheduled, resources
    // requested, differently sized nodes" (nodes given a pod count so that
    // NodeResourcesFit admits the pod).
    let mk = |name: &str, milli: i64| {
        let mut l = ResourceList::new();
        l.insert("cpu".into(), Quantity::from_milli(milli));
        l.insert("memory".into(), Quantity::from_units(10000));
        l.insert("pods".into(), Quantity::from_units(32));
        node(name).allocatable(l).obj()
    };
    let snap = snapshot(vec![mk("node1", 4000), mk("node2", 6000)], vec![]);
    let p = pod()
        .name("p")
        .req(&[("cpu", "1000m"), ("memory", "2000")])
        .req(&[("cpu", "2000m"), ("memory", "3000")])
        .obj();
    let e = run(&snap, &p);
    assert_eq!(
        plugin_scores(&e, "NodeResourcesBalancedAllocation"),
        vec![(68, 68, 1, 68), (75, 75, 1, 75)]
    );
}

#[test]
fn taint_toleration_through_default_profile() {
    // TestTaintTolerationScore "the more intolerable taints a node has, the
    // lower score it gets."
    use TaintEffect::PreferNoSchedule;
    let snap = snapshot(
        vec![
            node("nodeA").capacity(&[]).obj(),
            node("nodeB")
                .capacity(&[])
                .taints(vec![taint("cpu-type", "arm64", PreferNoSchedule)])
                .obj(),
            node("nodeC")
                .capacity(&[])
                .taints(vec![
                    taint("cpu-type", "arm64", PreferNoSchedule),
                    taint("disk-type", "ssd", PreferNoSchedule),
                ])
                .obj(),
        ],
        vec![],
    );
    let p = pod()
        .name("pod1")
        .tolerations(vec![tol_equal("foo", "bar", Some(PreferNoSchedule))])
        .obj();
    let e = run(&snap, &p);
    assert_eq!(
        plugin_scores(&e, "TaintToleration"),
        vec![(0, 100, 3, 300), (1, 50, 3, 150), (2, 0, 3, 0)]
    );
}

#[test]
fn enough_requests_filter_through_default_profile() {
    // TestEnoughRequests "too many resources fails": the node's verdict.
    let mut alloc = ResourceList::new();
    for (k, v) in [("cpu", "10m"), ("memory", "20"), ("pods", "32")] {
        alloc.insert(k.into(), Quantity::parse(v).unwrap());
    }
    let snap = snapshot(
        vec![node("node1").allocatable(alloc).obj()],
        vec![pod()
            .name("e")
            .node("node1")
            .req(&[("cpu", "10m"), ("memory", "20")])
            .obj()],
    );
    let p = pod().name("p").req(&[("cpu", "1m"), ("memory", "1")]).obj();
    let e = run(&snap, &p);
    let n = &e.nodes[0];
    assert!(!n.feasible);
    let fit = n
        .filters
        .iter()
        .find(|f| f.plugin == "NodeResourcesFit")
        .expect("fit ran");
    assert_eq!(fit.code, Code::Unschedulable);
    assert_eq!(fit.reasons, vec!["Insufficient cpu", "Insufficient memory"]);
    for f in n.filters.iter().filter(|f| f.plugin != "NodeResourcesFit") {
        assert!(matches!(f.code, Code::Success | Code::Skip), "{f:?}");
    }
    assert!(
        e.message.contains("Insufficient cpu") && e.message.contains("Insufficient memory"),
        "{}",
        e.message
    );
}
