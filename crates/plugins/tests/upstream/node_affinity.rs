//! `plugins/nodeaffinity/node_affinity_test.go`.

use std::sync::Arc;

use rkube_framework::{
    Code, CycleState, Plugin, PreFilterResult, Snapshot, Status, MAX_NODE_SCORE,
};
use rkube_model::selector::{Operator, Requirement};
use rkube_model::{NodeAffinity, NodeSelector, NodeSelectorTerm, Pod, PreferredSchedulingTerm};
use rkube_plugins::node_affinity::{ERR_REASON_CONFLICT, ERR_REASON_ENFORCED, ERR_REASON_POD};
use serde_json::{json, Value};

use crate::common::*;

fn name_in(node: &str) -> Requirement {
    req("metadata.name", Operator::In, &[node])
}

fn term(exprs: Vec<Requirement>, fields: Vec<Requirement>) -> NodeSelectorTerm {
    NodeSelectorTerm {
        match_expressions: exprs,
        match_fields: fields,
        invalid: false,
    }
}

fn required(terms: Vec<NodeSelectorTerm>) -> NodeAffinity {
    NodeAffinity {
        required: Some(NodeSelector { terms }),
        preferred: vec![],
    }
}

fn plugin(args: Value) -> Arc<dyn Plugin> {
    rkube_plugins::node_affinity::new(&args, "NodeAffinityArgs").expect("plugin builds")
}

fn reason_pod() -> Status {
    status(Code::UnschedulableAndUnresolvable, &[ERR_REASON_POD])
}

struct FilterCase {
    name: &'static str,
    pod: Pod,
    labels: &'static [(&'static str, &'static str)],
    node_name: &'static str,
    want_status: Status,
    want_pre_filter_status: Status,
    want_pre_filter_result: PreFilterResult,
    args: Value,
    run_pre_filter: bool,
}

impl Default for FilterCase {
    fn default() -> Self {
        FilterCase {
            name: "",
            pod: pod().obj(),
            labels: &[],
            node_name: "",
            want_status: success(),
            want_pre_filter_status: success(),
            want_pre_filter_result: None,
            args: Value::Null,
            run_pre_filter: true,
        }
    }
}

#[test]
fn test_node_affinity() {
    use Operator::*;
    let added_name_node2 = json!({"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node2"]}]}]
    }}});
    let cases = vec![
        FilterCase {
            name: "missing labels",
            pod: pod().node_selector(&[("foo", "bar")]).obj(),
            want_status: reason_pod(),
            ..Default::default()
        },
        FilterCase {
            name: "same labels",
            pod: pod().node_selector(&[("foo", "bar")]).obj(),
            labels: &[("foo", "bar")],
            ..Default::default()
        },
        FilterCase {
            name: "node labels are superset",
            pod: pod().node_selector(&[("foo", "bar")]).obj(),
            labels: &[("foo", "bar"), ("baz", "blah")],
            ..Default::default()
        },
        FilterCase {
            name: "node labels are subset",
            pod: pod().node_selector(&[("foo", "bar"), ("baz", "blah")]).obj(),
            labels: &[("foo", "bar")],
            want_status: reason_pod(),
            ..Default::default()
        },
        FilterCase {
            name: "Pod with matchExpressions using In operator that matches the existing node",
            pod: pod()
                .node_affinity(required(vec![term(vec![req("foo", In, &["bar", "value2"])], vec![])]))
                .obj(),
            labels: &[("foo", "bar")],
            ..Default::default()
        },
        FilterCase {
            name: "Pod with matchExpressions using Gt operator that matches the existing node",
            pod: pod()
                .node_affinity(required(vec![term(vec![req("kernel-version", Gt, &["0204"])], vec![])]))
                .obj(),
            labels: &[("kernel-version", "0206")],
            ..Default::default()
        },
        FilterCase {
            name: "Pod with matchExpressions using NotIn operator that matches the existing node",
            pod: pod()
                .node_affinity(required(vec![term(vec![req("mem-type", NotIn, &["DDR", "DDR2"])], vec![])]))
                .obj(),
            labels: &[("mem-type", "DDR3")],
            ..Default::default()
        },
        FilterCase {
            name: "Pod with matchExpressions using Exists operator that matches the existing node",
            pod: pod()
                .node_affinity(required(vec![term(vec![req("GPU", Exists, &[])], vec![])]))
                .obj(),
            labels: &[("GPU", "NVIDIA-GRID-K1")],
            ..Default::default()
        },
        FilterCase {
            name: "Pod with affinity that don't match node's labels won't schedule onto the node",
            pod: pod()
                .node_affinity(required(vec![term(vec![req("foo", In, &["value1", "value2"])], vec![])]))
                .obj(),
            labels: &[("foo", "bar")],
            want_status: reason_pod(),
            ..Default::default()
        },
        FilterCase {
            name: "Pod with empty MatchExpressions is not a valid value will match no objects and won't schedule onto the node",
            pod: pod().node_affinity(required(vec![term(vec![], vec![])])).obj(),
            labels: &[("foo", "bar")],
            want_status: reason_pod(),
            ..Default::default()
        },
        FilterCase {
            name: "Pod with no Affinity will schedule onto a node",
            pod: pod().obj(),
            labels: &[("foo", "bar")],
            want_pre_filter_status: status(Code::Skip, &[]),
            ..Default::default()
        },
        FilterCase {
            name: "Pod with Affinity but nil NodeSelector will schedule onto a node",
            pod: pod().node_affinity(NodeAffinity::default()).obj(),
            labels: &[("foo", "bar")],
            want_pre_filter_status: status(Code::Skip, &[]),
            ..Default::default()
        },
        FilterCase {
            name: "Pod with multiple matchExpressions ANDed that matches the existing node",
            pod: pod()
                .node_affinity(required(vec![term(
                    vec![req("GPU", Exists, &[]), req("GPU", NotIn, &["AMD", "INTER"])],
                    vec![],
                )]))
                .obj(),
            labels: &[("GPU", "NVIDIA-GRID-K1")],
            ..Default::default()
        },
        FilterCase {
            name: "Pod with multiple matchExpressions ANDed that doesn't match the existing node",
            pod: pod()
                .node_affinity(required(vec![term(
                    vec![req("GPU", Exists, &[]), req("GPU", In, &["AMD", "INTER"])],
                    vec![],
                )]))
                .obj(),
            labels: &[("GPU", "NVIDIA-GRID-K1")],
            want_status: reason_pod(),
            ..Default::default()
        },
        FilterCase {
            name: "Pod with multiple NodeSelectorTerms ORed in affinity, matches the node's labels and will schedule onto the node",
            pod: pod()
                .node_affinity(required(vec![
                    term(vec![req("foo", In, &["bar", "value2"])], vec![]),
                    term(vec![req("diffkey", In, &["wrong", "value2"])], vec![]),
                ]))
                .obj(),
            labels: &[("foo", "bar")],
            ..Default::default()
        },
        FilterCase {
            name: "Pod with an Affinity and a PodSpec.NodeSelector(the old thing that we are deprecating) both are satisfied, will schedule onto the node",
            pod: pod()
                .node_selector(&[("foo", "bar")])
                .node_affinity(required(vec![term(vec![req("foo", Exists, &[])], vec![])]))
                .obj(),
            labels: &[("foo", "bar")],
            ..Default::default()
        },
        FilterCase {
            name: "Pod with an Affinity matches node's labels but the PodSpec.NodeSelector(the old thing that we are deprecating) is not satisfied, won't schedule onto the node",
            pod: pod()
                .node_selector(&[("foo", "bar")])
                .node_affinity(required(vec![term(vec![req("foo", Exists, &[])], vec![])]))
                .obj(),
            labels: &[("foo", "barrrrrr")],
            want_status: reason_pod(),
            ..Default::default()
        },
        FilterCase {
            // Upstream's term fails to parse (invalid label value); rkube's
            // model marks such a term `invalid`, and it matches nothing.
            name: "Pod with an invalid value in Affinity term won't be scheduled onto the node",
            pod: pod()
                .node_affinity(required(vec![NodeSelectorTerm {
                    match_expressions: vec![req("foo", NotIn, &["invalid value: ___@#$%^"])],
                    match_fields: vec![],
                    invalid: true,
                }]))
                .obj(),
            labels: &[("foo", "bar")],
            want_status: reason_pod(),
            ..Default::default()
        },
        FilterCase {
            name: "Pod with matchFields using In operator that matches the existing node",
            pod: pod().node_affinity(required(vec![term(vec![], vec![name_in("node1")])])).obj(),
            node_name: "node1",
            want_pre_filter_result: Some(names(&["node1"])),
            ..Default::default()
        },
        FilterCase {
            name: "Pod with matchFields using In operator that does not match the existing node",
            pod: pod().node_affinity(required(vec![term(vec![], vec![name_in("node1")])])).obj(),
            node_name: "node2",
            want_status: reason_pod(),
            want_pre_filter_result: Some(names(&["node1"])),
            ..Default::default()
        },
        FilterCase {
            name: "Pod with two terms: matchFields does not match, but matchExpressions matches",
            pod: pod()
                .node_affinity(required(vec![
                    term(vec![], vec![name_in("node1"), name_in("node2")]),
                    term(vec![req("foo", In, &["bar"])], vec![]),
                ]))
                .obj(),
            node_name: "node2",
            labels: &[("foo", "bar")],
            ..Default::default()
        },
        FilterCase {
            name: "Pod with one term: matchFields does not match, but matchExpressions matches",
            pod: pod()
                .node_affinity(required(vec![term(vec![req("foo", In, &["bar"])], vec![name_in("node1")])]))
                .obj(),
            node_name: "node2",
            labels: &[("foo", "bar")],
            want_pre_filter_result: Some(names(&["node1"])),
            want_status: reason_pod(),
            ..Default::default()
        },
        FilterCase {
            name: "Pod with one term: both matchFields and matchExpressions match",
            pod: pod()
                .node_affinity(required(vec![term(vec![req("foo", In, &["bar"])], vec![name_in("node1")])]))
                .obj(),
            node_name: "node1",
            labels: &[("foo", "bar")],
            want_pre_filter_result: Some(names(&["node1"])),
            ..Default::default()
        },
        FilterCase {
            name: "Pod with two terms: both matchFields and matchExpressions do not match",
            pod: pod()
                .node_affinity(required(vec![
                    term(vec![], vec![name_in("node1")]),
                    term(vec![req("foo", In, &["not-match-to-bar"])], vec![]),
                ]))
                .obj(),
            node_name: "node2",
            labels: &[("foo", "bar")],
            want_status: reason_pod(),
            ..Default::default()
        },
        FilterCase {
            name: "Pod with two terms of node.Name affinity",
            pod: pod()
                .node_affinity(required(vec![
                    term(vec![], vec![name_in("node1")]),
                    term(vec![], vec![name_in("node2")]),
                ]))
                .obj(),
            node_name: "node2",
            want_pre_filter_result: Some(names(&["node1", "node2"])),
            ..Default::default()
        },
        FilterCase {
            name: "Pod with two conflicting mach field requirements",
            pod: pod()
                .node_affinity(required(vec![term(vec![], vec![name_in("node1"), name_in("node2")])]))
                .obj(),
            node_name: "node2",
            labels: &[("foo", "bar")],
            want_pre_filter_status: status(Code::UnschedulableAndUnresolvable, &[ERR_REASON_CONFLICT]),
            want_status: reason_pod(),
            ..Default::default()
        },
        FilterCase {
            name: "Matches added affinity and Pod's node affinity",
            pod: pod()
                .node_affinity(required(vec![term(vec![req("zone", In, &["foo"])], vec![])]))
                .obj(),
            node_name: "node2",
            labels: &[("zone", "foo")],
            args: added_name_node2.clone(),
            ..Default::default()
        },
        FilterCase {
            name: "Matches added affinity but not Pod's node affinity",
            pod: pod()
                .node_affinity(required(vec![term(vec![req("zone", In, &["bar"])], vec![])]))
                .obj(),
            node_name: "node2",
            labels: &[("zone", "foo")],
            args: added_name_node2,
            want_status: reason_pod(),
            ..Default::default()
        },
        FilterCase {
            name: "Doesn't match added affinity",
            pod: pod().obj(),
            node_name: "node2",
            labels: &[("zone", "foo")],
            args: json!({"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["bar"]}]}]
            }}}),
            want_status: status(Code::UnschedulableAndUnresolvable, &[ERR_REASON_ENFORCED]),
            ..Default::default()
        },
        FilterCase {
            name: "Matches node selector correctly even if PreFilter is not called",
            pod: pod().node_selector(&[("foo", "bar")]).obj(),
            labels: &[("foo", "bar"), ("baz", "blah")],
            run_pre_filter: false,
            ..Default::default()
        },
        FilterCase {
            name: "Matches node affinity correctly even if PreFilter is not called",
            pod: pod()
                .node_affinity(required(vec![term(
                    vec![req("GPU", Exists, &[]), req("GPU", NotIn, &["AMD", "INTER"])],
                    vec![],
                )]))
                .obj(),
            labels: &[("GPU", "NVIDIA-GRID-K1")],
            run_pre_filter: false,
            ..Default::default()
        },
    ];
    assert_eq!(cases.len(), 31);
    let mut f = Failures::new();
    for c in cases {
        let p = plugin(c.args.clone());
        let ni = node_info(node(c.node_name).labels(c.labels).obj(), vec![]);
        let mut state = CycleState::new();
        if c.run_pre_filter {
            let (res, st) = pre_filter(p.as_ref(), &mut state, &c.pod, &Snapshot::default());
            f.check(c.name, "prefilter status", st, c.want_pre_filter_status);
            f.check(c.name, "prefilter result", res, c.want_pre_filter_result);
        }
        f.check(
            c.name,
            "filter status",
            filter(p.as_ref(), &state, &c.pod, &ni),
            c.want_status,
        );
    }
    f.finish();
}

fn pref(weight: i32, exprs: Vec<Requirement>) -> PreferredSchedulingTerm {
    PreferredSchedulingTerm {
        weight,
        term: term(exprs, vec![]),
    }
}

#[test]
fn test_node_affinity_priority() {
    use Operator::In;
    let label1: &[(&str, &str)] = &[("foo", "bar")];
    let label2: &[(&str, &str)] = &[("key", "value")];
    let label3: &[(&str, &str)] = &[("az", "az1")];
    let label4: &[(&str, &str)] = &[("abc", "az11"), ("def", "az22")];
    let label5: &[(&str, &str)] = &[("foo", "bar"), ("key", "value"), ("az", "az1")];
    let affinity1 = NodeAffinity {
        required: None,
        preferred: vec![pref(2, vec![req("foo", In, &["bar"])])],
    };
    let affinity2 = NodeAffinity {
        required: None,
        preferred: vec![
            pref(2, vec![req("foo", In, &["bar"])]),
            pref(4, vec![req("key", In, &["value"])]),
            pref(
                5,
                vec![
                    req("foo", In, &["bar"]),
                    req("key", In, &["value"]),
                    req("az", In, &["az1"]),
                ],
            ),
        ],
    };
    let affinity1_args = json!({"addedAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 2, "preference": {"matchExpressions": [{"key": "foo", "operator": "In", "values": ["bar"]}]}}
    ]}});
    let with = |a: &NodeAffinity| pod().node_affinity(a.clone()).obj();
    // (name, pod, nodes, expected normalized scores, args, run PreScore, want PreScore)
    type Case<'a> = (
        &'a str,
        Pod,
        Vec<(&'a str, &'a [(&'a str, &'a str)])>,
        Vec<i64>,
        Value,
        bool,
        Status,
    );
    let cases: Vec<Case> = vec![
        (
            "all nodes are same priority as NodeAffinity is nil",
            pod().obj(),
            vec![("node1", label1), ("node2", label2), ("node3", label3)],
            vec![0, 0, 0],
            Value::Null,
            false,
            success(),
        ),
        (
            "Skip is returned in PreScore when NodeAffinity is nil",
            pod().obj(),
            vec![("node1", label1)],
            vec![],
            Value::Null,
            true,
            status(Code::Skip, &[]),
        ),
        // Skipped: "PreScore returns error when an incoming Pod has a broken
        // affinity" (an invalid label key; rkube's loader, like the API
        // server, does not admit such a pod).
        (
            "no node matches preferred scheduling requirements in NodeAffinity of pod so all nodes' priority is zero",
            with(&affinity1),
            vec![("node1", label4), ("node2", label2), ("node3", label3)],
            vec![0, 0, 0],
            Value::Null,
            true,
            success(),
        ),
        (
            "only node1 matches the preferred scheduling requirements of pod",
            with(&affinity1),
            vec![("node1", label1), ("node2", label2), ("node3", label3)],
            vec![MAX_NODE_SCORE, 0, 0],
            Value::Null,
            true,
            success(),
        ),
        (
            "all nodes matches the preferred scheduling requirements of pod but with different priorities ",
            with(&affinity2),
            vec![("node1", label1), ("node5", label5), ("node2", label2)],
            vec![18, MAX_NODE_SCORE, 36],
            Value::Null,
            true,
            success(),
        ),
        (
            "added affinity",
            pod().obj(),
            vec![("node1", label1), ("node2", label2)],
            vec![MAX_NODE_SCORE, 0],
            affinity1_args,
            true,
            success(),
        ),
        (
            "added affinity and pod has default affinity",
            with(&affinity1),
            vec![("node1", label1), ("node2", label2), ("node3", label5)],
            vec![40, 60, MAX_NODE_SCORE],
            json!({"addedAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 3, "preference": {"matchExpressions": [{"key": "key", "operator": "In", "values": ["value"]}]}}
            ]}}),
            true,
            success(),
        ),
        (
            "calculate the priorities correctly even if PreScore is not called",
            with(&affinity2),
            vec![("node1", label1), ("node5", label5), ("node2", label2)],
            vec![18, MAX_NODE_SCORE, 36],
            Value::Null,
            false,
            success(),
        ),
    ];
    let mut f = Failures::new();
    for (name, p, nodes, want, args, run_pre_score, want_pre) in cases {
        let pl = plugin(args);
        let snap = snapshot(
            nodes.iter().map(|(n, l)| node(n).labels(l).obj()).collect(),
            vec![],
        );
        let run = score(pl.as_ref(), &p, &snap, None, run_pre_score);
        f.check(name, "prescore status", run.pre_score.clone(), want_pre);
        if !run.pre_score.is_success() {
            continue;
        }
        f.check(name, "normalized scores", run.normalized, want);
    }
    f.finish();
}
