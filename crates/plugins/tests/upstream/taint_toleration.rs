//! `plugins/tainttoleration/taint_toleration_test.go`.

use rkube_framework::{Code, CycleState, MAX_NODE_SCORE};
use rkube_model::TaintEffect::{NoSchedule, PreferNoSchedule};
use rkube_model::{Node, Taint, Toleration};
use rkube_plugins::taint_toleration::{TaintToleration, ERR_REASON_UNTOLERATED};

use crate::common::*;

fn node_with_taints(name: &str, taints: Vec<Taint>) -> Node {
    node(name).taints(taints).obj()
}

fn untolerated() -> rkube_framework::Status {
    status(
        Code::UnschedulableAndUnresolvable,
        &[ERR_REASON_UNTOLERATED],
    )
}

#[test]
fn test_taint_toleration_score() {
    // (name, pod tolerations, nodes, normalized scores)
    type Case = (&'static str, Vec<Toleration>, Vec<Node>, Vec<i64>);
    let cases: Vec<Case> = vec![
        (
            "node with taints tolerated by the pod, gets a higher score than those node with intolerable taints",
            vec![tol_equal("foo", "bar", Some(PreferNoSchedule))],
            vec![
                node_with_taints("nodeA", vec![taint("foo", "bar", PreferNoSchedule)]),
                node_with_taints("nodeB", vec![taint("foo", "blah", PreferNoSchedule)]),
            ],
            vec![MAX_NODE_SCORE, 0],
        ),
        (
            "the nodes that all of their taints are tolerated by the pod, get the same score, no matter how many tolerable taints a node has",
            vec![
                tol_equal("cpu-type", "arm64", Some(PreferNoSchedule)),
                tol_equal("disk-type", "ssd", Some(PreferNoSchedule)),
            ],
            vec![
                node_with_taints("nodeA", vec![]),
                node_with_taints("nodeB", vec![taint("cpu-type", "arm64", PreferNoSchedule)]),
                node_with_taints(
                    "nodeC",
                    vec![
                        taint("cpu-type", "arm64", PreferNoSchedule),
                        taint("disk-type", "ssd", PreferNoSchedule),
                    ],
                ),
            ],
            vec![MAX_NODE_SCORE, MAX_NODE_SCORE, MAX_NODE_SCORE],
        ),
        (
            "the more intolerable taints a node has, the lower score it gets.",
            vec![tol_equal("foo", "bar", Some(PreferNoSchedule))],
            vec![
                node_with_taints("nodeA", vec![]),
                node_with_taints("nodeB", vec![taint("cpu-type", "arm64", PreferNoSchedule)]),
                node_with_taints(
                    "nodeC",
                    vec![
                        taint("cpu-type", "arm64", PreferNoSchedule),
                        taint("disk-type", "ssd", PreferNoSchedule),
                    ],
                ),
            ],
            vec![MAX_NODE_SCORE, 50, 0],
        ),
        (
            "only taints and tolerations that have effect PreferNoSchedule are checked by taints-tolerations priority function",
            vec![
                tol_equal("cpu-type", "arm64", Some(NoSchedule)),
                tol_equal("disk-type", "ssd", Some(NoSchedule)),
            ],
            vec![
                node_with_taints("nodeA", vec![]),
                node_with_taints("nodeB", vec![taint("cpu-type", "arm64", NoSchedule)]),
                node_with_taints(
                    "nodeC",
                    vec![
                        taint("cpu-type", "arm64", PreferNoSchedule),
                        taint("disk-type", "ssd", PreferNoSchedule),
                    ],
                ),
            ],
            vec![MAX_NODE_SCORE, MAX_NODE_SCORE, 0],
        ),
        (
            "Default behaviour No taints and tolerations, lands on node with no taints",
            vec![],
            vec![
                node_with_taints("nodeA", vec![]),
                node_with_taints("nodeB", vec![taint("cpu-type", "arm64", PreferNoSchedule)]),
            ],
            vec![MAX_NODE_SCORE, 0],
        ),
        // Skipped: "Numeric Gt operator: ..." and "Numeric Lt operator: ..."
        // need the alpha TaintTolerationComparisonOperators gate (off by
        // default in v1.37); rkube rejects Gt/Lt tolerations at load time.
    ];
    let mut f = Failures::new();
    for (name, tols, nodes, want) in cases {
        let p = pod().name("pod1").tolerations(tols).obj();
        let snap = snapshot(nodes, vec![]);
        let run = score(&TaintToleration, &p, &snap, None, true);
        f.check(name, "prescore status", run.pre_score.clone(), success());
        f.check(name, "normalized scores", run.normalized, want);
    }
    f.finish();
}

#[test]
fn test_taint_toleration_filter() {
    let cases: Vec<(&str, Vec<Toleration>, Vec<Taint>, _)> = vec![
        (
            "A pod having no tolerations can't be scheduled onto a node with nonempty taints",
            vec![],
            vec![taint("dedicated", "user1", NoSchedule)],
            untolerated(),
        ),
        (
            "A pod which can be scheduled on a dedicated node assigned to user1 with effect NoSchedule",
            vec![tol_equal("dedicated", "user1", Some(NoSchedule))],
            vec![taint("dedicated", "user1", NoSchedule)],
            success(),
        ),
        (
            "A pod which can't be scheduled on a dedicated node assigned to user2 with effect NoSchedule",
            vec![tol_equal("dedicated", "user2", Some(NoSchedule))],
            vec![taint("dedicated", "user1", NoSchedule)],
            untolerated(),
        ),
        (
            "A pod can be scheduled onto the node, with a toleration uses operator Exists that tolerates the taints on the node",
            vec![tol_exists("foo", Some(NoSchedule))],
            vec![taint("foo", "bar", NoSchedule)],
            success(),
        ),
        (
            "A pod has multiple tolerations, node has multiple taints, all the taints are tolerated, pod can be scheduled onto the node",
            vec![
                tol_equal("dedicated", "user2", Some(NoSchedule)),
                tol_exists("foo", Some(NoSchedule)),
            ],
            vec![
                taint("dedicated", "user2", NoSchedule),
                taint("foo", "bar", NoSchedule),
            ],
            success(),
        ),
        (
            "A pod has a toleration that keys and values match the taint on the node, but (non-empty) effect doesn't match, can't be scheduled onto the node",
            vec![tol_equal("foo", "bar", Some(PreferNoSchedule))],
            vec![taint("foo", "bar", NoSchedule)],
            untolerated(),
        ),
        (
            "The pod has a toleration that keys and values match the taint on the node, the effect of toleration is empty, and the effect of taint is NoSchedule. Pod can be scheduled onto the node",
            vec![tol_equal("foo", "bar", None)],
            vec![taint("foo", "bar", NoSchedule)],
            success(),
        ),
        (
            "The pod has a toleration that key and value don't match the taint on the node, but the effect of taint on node is PreferNoSchedule. Pod can be scheduled onto the node",
            vec![tol_equal("dedicated", "user2", Some(NoSchedule))],
            vec![taint("dedicated", "user1", PreferNoSchedule)],
            success(),
        ),
        (
            "The pod has no toleration, but the effect of taint on node is PreferNoSchedule. Pod can be scheduled onto the node",
            vec![],
            vec![taint("dedicated", "user1", PreferNoSchedule)],
            success(),
        ),
        // Skipped: the five Gt/Lt cases (alpha TaintTolerationComparisonOperators).
    ];
    let mut f = Failures::new();
    for (name, tols, taints, want) in cases {
        let p = pod().name("pod1").tolerations(tols).obj();
        let ni = node_info(node_with_taints("nodeA", taints), vec![]);
        f.check(
            name,
            "filter status",
            filter(&TaintToleration, &CycleState::new(), &p, &ni),
            want,
        );
    }
    f.finish();
}
