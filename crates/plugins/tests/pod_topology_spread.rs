//! Ports of upstream's PodTopologySpread table tests (filtering_test.go and
//! scoring_test.go, v1.37), named after the upstream cases, plus a
//! whole-profile scenario with system default spreading.

mod support;

use rkube_config::args::PodTopologySpreadArgs;
use rkube_model::{LabelSelector, Node, Pod, TaintEffect};
use rkube_plugins::pod_topology_spread::{
    from_args, PodTopologySpread, ERR_REASON_CONSTRAINTS_NOT_MATCH as SKEW,
    ERR_REASON_NODE_LABEL_NOT_MATCH as MISSING,
};
use support::roomy_node as node;
use support::*;

fn list_plugin() -> PodTopologySpread {
    from_args(
        &PodTopologySpreadArgs {
            defaulting_type: "List".into(),
            ..Default::default()
        },
        "args",
    )
    .unwrap()
}

fn foo() -> Option<LabelSelector> {
    Some(sel().exists("foo").obj())
}
fn bar() -> Option<LabelSelector> {
    Some(sel().exists("bar").obj())
}

/// `(name, node, labels)` pods in the default namespace.
fn pods(list: &[(&str, &str)]) -> Vec<Pod> {
    list.iter()
        .map(|(n, node)| pod().name(n).node(node).label("foo", "").obj())
        .collect()
}

fn zone_nodes() -> Vec<Node> {
    [
        ("node-a", "zone1"),
        ("node-b", "zone1"),
        ("node-x", "zone2"),
        ("node-y", "zone2"),
    ]
    .iter()
    .map(|(n, z)| node(n).label("zone", z).label("node", n).obj())
    .collect()
}

fn plain_nodes(names: &[&str]) -> Vec<Node> {
    names
        .iter()
        .map(|n| node(n).label("node", n).obj())
        .collect()
}

fn foo_nodes_y_plain() -> Vec<Node> {
    vec![
        node("node-a")
            .label("node", "node-a")
            .label("foo", "")
            .obj(),
        node("node-b")
            .label("node", "node-b")
            .label("foo", "")
            .obj(),
        node("node-x")
            .label("node", "node-x")
            .label("foo", "")
            .obj(),
        node("node-y").label("node", "node-y").obj(),
    ]
}

fn foo_nodes_y_tainted() -> Vec<Node> {
    vec![
        node("node-a")
            .label("node", "node-a")
            .label("foo", "")
            .obj(),
        node("node-b")
            .label("node", "node-b")
            .label("foo", "")
            .obj(),
        node("node-x")
            .label("node", "node-x")
            .label("foo", "")
            .obj(),
        node("node-y")
            .label("node", "node-y")
            .taint("taint", "", TaintEffect::NoSchedule)
            .obj(),
    ]
}

const OK: &str = "Success";
const U: &str = "Unschedulable";
const UR: &str = "UnschedulableAndUnresolvable";

struct CodeCase {
    name: &'static str,
    pod: Pod,
    nodes: Vec<Node>,
    pods: Vec<Pod>,
    want: Vec<&'static str>,
}

fn run_code_cases(cases: Vec<CodeCase>) {
    let pl = list_plugin();
    let mut f = Failures::new();
    for c in cases {
        let snap = snapshot(c.nodes, c.pods);
        let (pre, got) = run_filter(&pl, &snap, &c.pod);
        f.check(c.name, "PreFilter", pre.0.as_str(), OK);
        let codes: Vec<&str> = got.iter().map(|s| s.0.as_str()).collect();
        f.check(c.name, "Filter codes", codes, c.want.clone());
        // Reasons are upstream's constants.
        for s in &got {
            match s.0.as_str() {
                U => f.check(c.name, "reason", s.1.clone(), vec![SKEW.to_string()]),
                UR => f.check(c.name, "reason", s.1.clone(), vec![MISSING.to_string()]),
                _ => {}
            }
        }
    }
    f.finish();
}

fn p_foo() -> PodBuilder {
    pod().name("p").label("foo", "")
}

#[test]
fn single_constraint() {
    let spread_2_2_1 = || {
        pods(&[
            ("p-a1", "node-a"),
            ("p-a2", "node-a"),
            ("p-b1", "node-b"),
            ("p-b2", "node-b"),
            ("p-c1", "node-c"),
        ])
    };
    let a2_b1_y3 = || {
        pods(&[
            ("p-a1", "node-a"),
            ("p-a2", "node-a"),
            ("p-b1", "node-b"),
            ("p-y1", "node-y"),
            ("p-y2", "node-y"),
            ("p-y3", "node-y"),
        ])
    };
    let ab_y = || pods(&[("p-b1", "node-a"), ("p-b2", "node-b"), ("p-y1", "node-y")]);
    let c = |name, pod: Pod, nodes: Vec<Node>, pods: Vec<Pod>, want: Vec<&'static str>| CodeCase {
        name,
        pod,
        nodes,
        pods,
        want,
    };
    let cases = vec![
        c("no existing pods", p_foo().spread_simple(1, "zone", DO_NOT_SCHEDULE, foo()).obj(), zone_nodes(), vec![], vec![OK, OK, OK, OK]),
        c("no existing pods, incoming pod doesn't match itself", p_foo().spread_simple(1, "zone", DO_NOT_SCHEDULE, bar()).obj(), zone_nodes(), vec![], vec![OK, OK, OK, OK]),
        c("existing pods in a different namespace do not count", p_foo().spread_simple(1, "zone", DO_NOT_SCHEDULE, foo()).obj(), zone_nodes(),
            vec![
                pod().name("p-a1").ns("ns1").node("node-a").label("foo", "").obj(),
                pod().name("p-b1").ns("ns2").node("node-a").label("foo", "").obj(),
                pod().name("p-x1").node("node-x").label("foo", "").obj(),
                pod().name("p-y1").node("node-y").label("foo", "").obj(),
            ], vec![OK, OK, U, U]),
        c("existing pods do not match null selector", p_foo().spread_simple(1, "zone", DO_NOT_SCHEDULE, None).obj(), zone_nodes(),
            pods(&[("p-x1", "node-x"), ("p-y1", "node-y")]), vec![OK, OK, OK, OK]),
        c("pods spread across zones as 3/3, all nodes fit", p_foo().spread_simple(1, "zone", DO_NOT_SCHEDULE, foo()).obj(), zone_nodes(),
            a2_b1_y3(), vec![OK, OK, OK, OK]),
        c("pods spread across zones as 1/2 due to absence of label 'zone' on node-b", p_foo().spread_simple(1, "zone", DO_NOT_SCHEDULE, foo()).obj(),
            vec![
                node("node-a").label("zone", "zone1").label("node", "node-a").obj(),
                node("node-b").label("zon", "zone1").label("node", "node-b").obj(),
                node("node-x").label("zone", "zone2").label("node", "node-x").obj(),
                node("node-y").label("zone", "zone2").label("node", "node-y").obj(),
            ],
            pods(&[("p-a1", "node-a"), ("p-b1", "node-b"), ("p-x1", "node-x"), ("p-y1", "node-y")]), vec![OK, UR, U, U]),
        c("pod cannot be scheduled as all nodes don't have label 'rack'", p_foo().spread_simple(1, "rack", DO_NOT_SCHEDULE, foo()).obj(),
            vec![node("node-a").label("zone", "zone1").label("node", "node-a").obj(), node("node-x").label("zone", "zone2").label("node", "node-x").obj()],
            vec![], vec![UR, UR]),
        c("pods spread across nodes as 2/1/0/3, only node-x fits", p_foo().spread_simple(1, "node", DO_NOT_SCHEDULE, foo()).obj(), zone_nodes(),
            a2_b1_y3(), vec![U, U, OK, U]),
        c("pods spread across nodes as 2/1/0/3, maxSkew is 2, node-b and node-x fit", p_foo().spread_simple(2, "node", DO_NOT_SCHEDULE, foo()).obj(), zone_nodes(),
            a2_b1_y3(), vec![U, OK, OK, U]),
        c("pods spread across nodes as 2/1/0/3, but pod doesn't match itself", pod().name("p").label("bar", "").spread_simple(1, "node", DO_NOT_SCHEDULE, foo()).obj(), zone_nodes(),
            a2_b1_y3(), vec![U, OK, OK, U]),
        c("incoming pod has nodeAffinity, pods spread as 2/~1~/~0~/3, hence node-a fits",
            p_foo().node_affinity_in("node", &["node-a", "node-y"]).spread_simple(1, "node", DO_NOT_SCHEDULE, foo()).obj(), zone_nodes(),
            a2_b1_y3(), vec![OK, OK, OK, U]),
        c("terminating Pods should be excluded", p_foo().spread_simple(1, "node", DO_NOT_SCHEDULE, foo()).obj(), plain_nodes(&["node-a", "node-b"]),
            vec![
                pod().name("p-a").node("node-a").label("foo", "").terminating().obj(),
                pod().name("p-b").node("node-b").label("foo", "").obj(),
            ], vec![OK, U]),
        c("incoming pod has nodeAffinity, pods spread as 0/~2~/0/1, hence node-a fits",
            p_foo().node_affinity_not_in("node", &["node-b"]).spread_simple(1, "zone", DO_NOT_SCHEDULE, foo()).obj(), zone_nodes(),
            pods(&[("p-b1", "node-b"), ("p-b2", "node-b"), ("p-y1", "node-y")]), vec![OK, OK, U, U]),
        c("pods spread across nodes as 2/2/1, maxSkew is 2, and the number of domains < minDomains, then the third node fits",
            p_foo().spread(2, "node", DO_NOT_SCHEDULE, foo(), Some(4), None, None, &[]).obj(), plain_nodes(&["node-a", "node-b", "node-c"]),
            spread_2_2_1(), vec![U, U, OK]),
        c("pods spread across nodes as 2/2/1, maxSkew is 2, and the number of domains > minDomains, then the all nodes fit",
            p_foo().spread(2, "node", DO_NOT_SCHEDULE, foo(), Some(2), None, None, &[]).obj(), plain_nodes(&["node-a", "node-b", "node-c"]),
            spread_2_2_1(), vec![OK, OK, OK]),
        c("pods spread across zone as 2/1, maxSkew is 2 and the number of domains < minDomains, then the third and fourth nodes fit",
            p_foo().spread(2, "zone", DO_NOT_SCHEDULE, foo(), Some(3), None, None, &[]).obj(), zone_nodes(),
            ab_y(), vec![U, U, OK, OK]),
        c("pods spread across zone as 2/1, maxSkew is 2 and the number of domains > minDomains, then the all nodes fit",
            p_foo().spread(2, "zone", DO_NOT_SCHEDULE, foo(), Some(1), None, None, &[]).obj(), zone_nodes(),
            ab_y(), vec![OK, OK, OK, OK]),
        c("NodeAffinityPolicy honored with labelSelectors",
            p_foo().node_selector(&[("foo", "")]).spread_simple(1, "node", DO_NOT_SCHEDULE, foo()).obj(), foo_nodes_y_plain(),
            ab_y(), vec![U, U, OK, OK]),
        c("NodeAffinityPolicy ignored with labelSelectors",
            p_foo().node_selector(&[("foo", "")]).spread(1, "node", DO_NOT_SCHEDULE, foo(), None, Some(false), None, &[]).obj(), foo_nodes_y_plain(),
            ab_y(), vec![U, U, OK, U]),
        c("NodeAffinityPolicy honored with nodeAffinity",
            p_foo().node_affinity_in("foo", &[""]).spread_simple(1, "node", DO_NOT_SCHEDULE, foo()).obj(), foo_nodes_y_plain(),
            ab_y(), vec![U, U, OK, OK]),
        c("NodeAffinityPolicy ignored with labelSelectors (nodeAffinity)",
            p_foo().node_affinity_in("foo", &[""]).spread(1, "node", DO_NOT_SCHEDULE, foo(), None, Some(false), None, &[]).obj(), foo_nodes_y_plain(),
            ab_y(), vec![U, U, OK, U]),
        c("NodeTaintsPolicy honored",
            p_foo().spread(1, "node", DO_NOT_SCHEDULE, foo(), None, None, Some(true), &[]).obj(), foo_nodes_y_tainted(),
            ab_y(), vec![U, U, OK, OK]),
        c("NodeTaintsPolicy ignored",
            p_foo().spread_simple(1, "node", DO_NOT_SCHEDULE, foo()).obj(), foo_nodes_y_tainted(),
            ab_y(), vec![U, U, OK, U]),
    ];
    run_code_cases(cases);
}

#[test]
fn pre_filter_skip_without_constraints() {
    // A pod without constraints and without default constraints (List,
    // empty) skips PreFilter; with System defaults only ScheduleAnyway
    // constraints exist, so PreFilter skips too.
    let snap = snapshot(zone_nodes(), vec![]);
    let p = pod().name("p").label("foo", "").obj();
    let (pre, _) = run_filter(&list_plugin(), &snap, &p);
    assert_eq!(pre, skip());
    let (pre, _) = run_filter(&PodTopologySpread::default(), &snap, &p);
    assert_eq!(pre, skip());
    // ScheduleAnyway-only constraints: PreFilter skips.
    let p = p_foo()
        .spread_simple(1, "zone", SCHEDULE_ANYWAY, foo())
        .obj();
    let (pre, _) = run_filter(&list_plugin(), &snap, &p);
    assert_eq!(pre, skip());
}

#[test]
fn match_label_keys_filter() {
    // matchLabelKeys narrows the selector to pods sharing the incoming pod's
    // value of the key: only the two "v1" pods on node-a count.
    let snap = snapshot(
        zone_nodes(),
        vec![
            pod()
                .name("a1")
                .node("node-a")
                .labels(&[("foo", ""), ("ver", "v1")])
                .obj(),
            pod()
                .name("a2")
                .node("node-a")
                .labels(&[("foo", ""), ("ver", "v1")])
                .obj(),
            pod()
                .name("x1")
                .node("node-x")
                .labels(&[("foo", ""), ("ver", "v2")])
                .obj(),
            pod()
                .name("x2")
                .node("node-x")
                .labels(&[("foo", ""), ("ver", "v2")])
                .obj(),
            pod()
                .name("x3")
                .node("node-x")
                .labels(&[("foo", ""), ("ver", "v2")])
                .obj(),
        ],
    );
    let p = pod()
        .name("p")
        .labels(&[("foo", ""), ("ver", "v1")])
        .spread(
            1,
            "zone",
            DO_NOT_SCHEDULE,
            foo(),
            None,
            None,
            None,
            &["ver"],
        )
        .obj();
    let (_, got) = run_filter(&list_plugin(), &snap, &p);
    assert_eq!(got, vec![unsched(SKEW), unsched(SKEW), ok(), ok()]);
}

const HOST: &str = "kubernetes.io/hostname";

fn host_nodes(names: &[&str]) -> Vec<Node> {
    names.iter().map(|n| node(n).label(HOST, n).obj()).collect()
}
fn zone_host_nodes(list: &[(&str, &str)]) -> Vec<Node> {
    list.iter()
        .map(|(n, z)| node(n).label("zone", z).label(HOST, n).obj())
        .collect()
}

struct ScoreCase {
    name: &'static str,
    pod: Pod,
    pods: Vec<Pod>,
    nodes: Vec<Node>,
    failed: Vec<Node>,
    service: bool,
    want: Vec<i64>,
}

fn run_score_cases(cases: Vec<ScoreCase>) {
    let pl = PodTopologySpread::default();
    let mut f = Failures::new();
    for c in cases {
        let n = c.nodes.len();
        let mut all = c.nodes;
        all.extend(c.failed);
        let mut snap = snapshot(all, c.pods);
        if c.service {
            let mut ws = rkube_model::workloads::WorkloadSelectors::default();
            ws.services
                .insert(String::new(), vec![labels(&[("foo", "")])]);
            snap.workloads = std::sync::Arc::new(ws);
        }
        let filtered: Vec<usize> = (0..n).collect();
        let (pre, _raw, normalized) = run_score(&pl, &snap, &c.pod, Some(&filtered));
        f.check(c.name, "PreScore", pre.0.as_str(), "Success");
        f.check(c.name, "scores", normalized, c.want);
    }
    f.finish();
}

fn on(list: &[(&str, &str)]) -> Vec<Pod> {
    pods(list)
}

#[test]
fn pod_topology_spread_score() {
    let host1 = || p_foo().spread_simple(1, HOST, SCHEDULE_ANYWAY, foo());
    let a2_b1_d3 = || {
        on(&[
            ("p-a1", "node-a"),
            ("p-a2", "node-a"),
            ("p-b1", "node-b"),
            ("p-d1", "node-d"),
            ("p-d2", "node-d"),
            ("p-d3", "node-d"),
        ])
    };
    let a4_b3_c2_d1 = || {
        on(&[
            ("p-a1", "node-a"),
            ("p-a2", "node-a"),
            ("p-a3", "node-a"),
            ("p-a4", "node-a"),
            ("p-b1", "node-b"),
            ("p-b2", "node-b"),
            ("p-b3", "node-b"),
            ("p-c1", "node-c"),
            ("p-c2", "node-c"),
            ("p-d1", "node-d"),
        ])
    };
    let a4_b2_x1_y3 = || {
        on(&[
            ("p-a1", "node-a"),
            ("p-a2", "node-a"),
            ("p-a3", "node-a"),
            ("p-a4", "node-a"),
            ("p-b1", "node-b"),
            ("p-b2", "node-b"),
            ("p-x1", "node-x"),
            ("p-y1", "node-y"),
            ("p-y2", "node-y"),
            ("p-y3", "node-y"),
        ])
    };
    let abcd = || host_nodes(&["node-a", "node-b", "node-c", "node-d"]);
    let c =
        |name, pod: Pod, pods: Vec<Pod>, nodes: Vec<Node>, failed: Vec<Node>, want: Vec<i64>| {
            ScoreCase {
                name,
                pod,
                pods,
                nodes,
                failed,
                service: false,
                want,
            }
        };
    let mut cases = vec![
        c("one constraint on node, no existing pods", host1().obj(), vec![], host_nodes(&["node-a", "node-b"]), vec![], vec![100, 100]),
        c("one constraint on node, only one node is candidate", host1().obj(),
            on(&[("p-a1", "node-a"), ("p-a2", "node-a"), ("p-b1", "node-b")]),
            host_nodes(&["node-a"]), host_nodes(&["node-b"]), vec![100]),
        c("one constraint on node, all nodes have the same number of matching pods", host1().obj(),
            on(&[("p-a1", "node-a"), ("p-b1", "node-b")]), host_nodes(&["node-a", "node-b"]), vec![], vec![100, 100]),
        c("one constraint on node, all 4 nodes are candidates", host1().obj(), a2_b1_d3(), abcd(), vec![], vec![20, 60, 100, 0]),
        c("one constraint on node, null selector", p_foo().spread_simple(1, HOST, SCHEDULE_ANYWAY, None).obj(), a2_b1_d3(), abcd(), vec![], vec![100, 100, 100, 100]),
        c("one constraint on node, all 4 nodes are candidates, maxSkew=2", p_foo().spread_simple(2, HOST, SCHEDULE_ANYWAY, foo()).obj(), a2_b1_d3(), abcd(), vec![], vec![33, 66, 100, 16]),
        c("one constraint on node, all 4 nodes are candidates, maxSkew=3", p_foo().spread_simple(3, HOST, SCHEDULE_ANYWAY, foo()).obj(), a4_b3_c2_d1(), abcd(), vec![], vec![44, 66, 77, 100]),
        c("one constraint on node, 3 out of 4 nodes are candidates", host1().obj(), a4_b2_x1_y3(),
            host_nodes(&["node-a", "node-b", "node-x"]), host_nodes(&["node-y"]), vec![33, 83, 100]),
        c("one constraint on node, 3 out of 4 nodes are candidates, one node doesn't match topology key", host1().obj(), a4_b2_x1_y3(),
            vec![node("node-a").label(HOST, "node-a").obj(), node("node-b").label("n", "node-b").obj(), node("node-x").label(HOST, "node-x").obj()],
            host_nodes(&["node-y"]), vec![16, 0, 100]),
        c("one constraint on zone, 3 out of 4 nodes are candidates", p_foo().spread_simple(1, "zone", SCHEDULE_ANYWAY, foo()).obj(), a4_b2_x1_y3(),
            zone_host_nodes(&[("node-a", "zone1"), ("node-b", "zone1"), ("node-x", "zone2")]), zone_host_nodes(&[("node-y", "zone2")]), vec![75, 75, 100]),
        c("two Constraints on zone and node, 2 out of 4 nodes are candidates",
            p_foo().spread_simple(1, "zone", SCHEDULE_ANYWAY, foo()).spread_simple(1, HOST, SCHEDULE_ANYWAY, foo()).obj(),
            on(&[("p-a1", "node-a"), ("p-a2", "node-a"), ("p-b1", "node-b"), ("p-x1", "node-x"), ("p-x2", "node-x"), ("p-y1", "node-y"), ("p-y2", "node-y"), ("p-y3", "node-y"), ("p-y4", "node-y")]),
            zone_host_nodes(&[("node-a", "zone1"), ("node-x", "zone2")]), zone_host_nodes(&[("node-b", "zone1"), ("node-y", "zone2")]), vec![100, 63]),
        c("two Constraints on zone, 2 out of 4 nodes are candidates",
            p_foo().label("bar", "").spread_simple(1, "zone", SCHEDULE_ANYWAY, foo()).spread_simple(1, "zone", SCHEDULE_ANYWAY, bar()).obj(),
            vec![
                pod().name("p-a1").node("node-a").labels(&[("foo", ""), ("bar", "")]).obj(),
                pod().name("p-a2").node("node-a").labels(&[("foo", "")]).obj(),
                pod().name("p-b1").node("node-b").labels(&[("foo", ""), ("bar", "")]).obj(),
                pod().name("p-y1").node("node-y").labels(&[("foo", "")]).obj(),
                pod().name("p-y2").node("node-y").labels(&[("foo", ""), ("bar", "")]).obj(),
                pod().name("p-y3").node("node-y").labels(&[("foo", "")]).obj(),
            ],
            vec![node("node-a").label("zone", "zone1").obj(), node("node-x").label("zone", "zone2").obj()],
            vec![node("node-b").label("zone", "zone1").obj(), node("node-y").label("zone", "zone2").obj()],
            vec![85, 100]),
    ];
    cases.push(ScoreCase {
        name: "system defaulting, nodes don't have zone, pods match service",
        pod: p_foo().obj(),
        pods: a4_b3_c2_d1(),
        nodes: abcd(),
        failed: vec![],
        service: true,
        want: vec![44, 66, 77, 100],
    });
    run_score_cases(cases);
}

#[test]
fn pre_score_skip() {
    // Upstream TestPreScoreSkip: no soft constraints and no default selector.
    let snap = snapshot(zone_nodes(), vec![]);
    let p = pod().name("p").label("foo", "").obj();
    let (pre, _, _) = run_score(&PodTopologySpread::default(), &snap, &p, None);
    assert_eq!(
        pre,
        skip(),
        "the pod doesn't have soft topology spread Constraints"
    );
    let p = p_foo()
        .spread_simple(1, "zone", DO_NOT_SCHEDULE, foo())
        .obj();
    let (pre, _, _) = run_score(&list_plugin(), &snap, &p, None);
    assert_eq!(pre, skip(), "only hard constraints");
}

/// The whole default profile: PodTopologySpread rejects the skewed zone and
/// scores the others.
#[test]
fn default_profile_scenario() {
    let fw = default_framework();
    let snap = snapshot(
        zone_nodes(),
        pods(&[("p-a1", "node-a"), ("p-a2", "node-a"), ("p-b1", "node-b")]),
    );
    let p = p_foo()
        .spread_simple(1, "zone", DO_NOT_SCHEDULE, foo())
        .obj();
    let ex = rkube_framework::explain(&fw, &snap, &p).unwrap();
    let verdict = |i: usize| filter_verdict(&ex, i, "PodTopologySpread");
    assert_eq!(verdict(0), ("Unschedulable", vec![SKEW.to_string()]));
    assert_eq!(verdict(1), ("Unschedulable", vec![SKEW.to_string()]));
    assert_eq!(verdict(2), ("Success", vec![]));
    assert_eq!(verdict(3), ("Success", vec![]));
    let feasible: Vec<usize> = ex
        .nodes
        .iter()
        .filter(|n| n.feasible)
        .map(|n| n.node)
        .collect();
    assert_eq!(feasible, vec![2, 3]);
}

/// PreFilter extensions: removing the matching pods of node-a's zone (as
/// preemption does) makes zone1 fit; adding them back restores the verdict.
#[test]
fn pre_filter_state_add_remove_pod() {
    use rkube_framework::CycleState;
    let pl = list_plugin();
    let existing = pods(&[("p-a1", "node-a"), ("p-a2", "node-a")]);
    let snap = snapshot(zone_nodes(), existing.clone());
    let p = p_foo()
        .spread_simple(1, "zone", DO_NOT_SCHEDULE, foo())
        .obj();
    let pf = rkube_framework::Plugin::as_pre_filter(&pl).unwrap();
    let f = rkube_framework::Plugin::as_filter(&pl).unwrap();
    let mut state = CycleState::new();
    assert!(pf.pre_filter(&mut state, &p, &snap).1.is_success());
    assert_eq!(sc(&f.filter(&state, &p, &snap.nodes[0])), unsched(SKEW));
    for e in &existing {
        assert!(pf
            .remove_pod(&mut state, &p, e, &snap.nodes[0])
            .is_success());
    }
    assert_eq!(sc(&f.filter(&state, &p, &snap.nodes[0])), ok());
    for e in &existing {
        assert!(pf.add_pod(&mut state, &p, e, &snap.nodes[0]).is_success());
    }
    assert_eq!(sc(&f.filter(&state, &p, &snap.nodes[0])), unsched(SKEW));
}

/// One plugin kept across cycles (its per-node counts reused) decides and
/// scores as a fresh plugin on every cycle, while pods are assumed on and
/// removed from the snapshot and pods of different constraints, namespaces
/// and node selectors take turns.
#[test]
fn kept_plugin_decides_as_a_fresh_one_while_the_snapshot_changes() {
    let nodes: Vec<Node> = (0..12)
        .map(|i| {
            let n = format!("n{i:02}");
            let b = node(&n)
                .label("node", &n)
                .label("zone", &format!("z{}", i % 3));
            if i % 4 == 3 {
                b.label("disk", "ssd").obj()
            } else {
                b.obj()
            }
        })
        .collect();
    let mut snap = snapshot(nodes, vec![]);
    let make = |kind: usize, i: usize| -> Pod {
        let name = format!("p{i:03}");
        let b = pod().name(&name).label("foo", "");
        match kind {
            0 => b.spread_simple(1, "zone", DO_NOT_SCHEDULE, foo()),
            1 => b
                .spread_simple(2, "node", DO_NOT_SCHEDULE, foo())
                .spread_simple(1, "zone", SCHEDULE_ANYWAY, foo()),
            2 => b
                .ns("other")
                .spread(1, "zone", DO_NOT_SCHEDULE, foo(), Some(3), None, None, &[]),
            3 => b
                .node_affinity_in("disk", &["ssd"])
                .spread_simple(1, "zone", SCHEDULE_ANYWAY, foo())
                .spread_simple(1, "node", SCHEDULE_ANYWAY, foo()),
            _ => b,
        }
        .obj()
    };
    let placed = kept_agrees_with_fresh(
        &PodTopologySpread::default(),
        PodTopologySpread::default,
        &mut snap,
        (0..80).map(|i| make((i * 7 + i / 5) % 5, i)),
    );
    assert!(placed > 20, "pods placed: {placed}");
}
