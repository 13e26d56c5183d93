//! Ports of upstream's InterPodAffinity table tests (filtering_test.go and
//! scoring_test.go, v1.37, with InterPodAffinityHostnameFastPath on), named
//! after the upstream cases, plus a whole-profile scenario.

mod support;

use rkube_model::{Node, Pod};
use rkube_plugins::inter_pod_affinity::{
    InterPodAffinity, ERR_REASON_AFFINITY as AFF, ERR_REASON_ANTI_AFFINITY as ANTI,
    ERR_REASON_EXISTING_ANTI_AFFINITY as EXISTING,
};
use support::roomy_node as node;
use support::*;

struct FilterCase {
    name: &'static str,
    pod: Pod,
    pods: Vec<Pod>,
    nodes: Vec<Node>,
    want_pre: St,
    want: Vec<St>,
}

fn run_filter_cases(cases: Vec<FilterCase>, namespaces: &[(&str, &[(&str, &str)])]) {
    let pl = InterPodAffinity::default();
    let mut f = Failures::new();
    for c in cases {
        let snap = snapshot_ns(c.nodes, c.pods, namespaces);
        let (pre, got) = run_filter(&pl, &snap, &c.pod);
        f.check(c.name, "PreFilter", pre.clone(), c.want_pre);
        if pre.0 == "Success" {
            f.check(c.name, "Filter", got, c.want);
        }
    }
    f.finish();
}

fn node1() -> Node {
    node("node1")
        .labels(&[("region", "r1"), ("zone", "z11")])
        .obj()
}

fn svc_in(vals: &[&str]) -> rkube_model::LabelSelector {
    sel().is("service", vals).obj()
}

#[test]
fn required_affinity_single_node() {
    let pod_label = &[("service", "securityscan")];
    let pod_label2 = &[("security", "S1")];
    let existing = || pod().labels(pod_label).node("node1").obj();
    let team1 = || sel().is("team", &["team1"]).obj();
    let c = |name, pod: Pod, pods: Vec<Pod>, want_pre: St, want: St| FilterCase {
        name,
        pod,
        pods,
        nodes: vec![node1()],
        want_pre,
        want: vec![want],
    };
    let cases = vec![
        c("A pod that has no required pod affinity scheduling rules can schedule onto a node with no existing pods",
            pod().obj(), vec![], skip(), ok()),
        c("satisfies with requiredDuringSchedulingIgnoredDuringExecution in PodAffinity using In operator that matches the existing pod",
            pod().labels(pod_label2).pod_affinity_in("service", "region", &["securityscan", "value2"], Required).obj(),
            vec![existing()], ok(), ok()),
        c("satisfies the pod with requiredDuringSchedulingIgnoredDuringExecution in PodAffinity using not in operator in labelSelector that matches the existing pod",
            pod().labels(pod_label2).pod_affinity_not_in("service", "region", &["securityscan3", "value3"], Required).obj(),
            vec![existing()], ok(), ok()),
        c("Does not satisfy the PodAffinity with labelSelector because of diff Namespace",
            pod().labels(pod_label2).empty_affinities()
                .affinity(term(Some(svc_in(&["securityscan", "value2"])), "").namespaces(&["DiffNameSpace"]).obj(), Required).obj(),
            vec![pod().ns("ns").label("service", "securityscan").node("node1").obj()],
            ok(), unresolvable(AFF)),
        c("Doesn't satisfy the PodAffinity because of unmatching labelSelector with the existing pod",
            pod().labels(pod_label).pod_affinity_in("service", "", &["antivirusscan", "value2"], Required).obj(),
            vec![existing()], ok(), unresolvable(AFF)),
        c("satisfies the PodAffinity with different label Operators in multiple RequiredDuringSchedulingIgnoredDuringExecution ",
            pod().labels(pod_label2).empty_affinities()
                .affinity(term(Some(sel().exists("service").not_exists("wrongkey").obj()), "region").obj(), Required)
                .affinity(term(Some(sel().is("service", &["securityscan"]).not_in("service", &["WrongValue"]).obj()), "region").obj(), Required)
                .obj(),
            vec![existing()], ok(), ok()),
        c("The labelSelector requirements(items of matchExpressions) are ANDed, the pod cannot schedule onto the node because one of the matchExpression item don't match.",
            pod().labels(pod_label2).empty_affinities()
                .affinity(term(Some(sel().exists("service").not_exists("wrongkey").obj()), "region").obj(), Required)
                .affinity(term(Some(sel().is("service", &["securityscan2"]).not_in("service", &["WrongValue"]).obj()), "region").obj(), Required)
                .obj(),
            vec![existing()], ok(), unresolvable(AFF)),
        c("satisfies the PodAffinity and PodAntiAffinity with the existing pod",
            pod().labels(pod_label2)
                .pod_affinity_in("service", "region", &["securityscan", "value2"], Required)
                .pod_anti_affinity_in("service", "node", &["antivirusscan", "value2"], Required).obj(),
            vec![existing()], ok(), ok()),
        c("satisfies the PodAffinity and PodAntiAffinity and PodAntiAffinity symmetry with the existing pod",
            pod().labels(pod_label2)
                .pod_affinity_in("service", "region", &["securityscan", "value2"], Required)
                .pod_anti_affinity_in("service", "node", &["antivirusscan", "value2"], Required).obj(),
            vec![pod().node("node1").labels(pod_label)
                .pod_anti_affinity_in("service", "node", &["antivirusscan", "value2"], Required).obj()],
            ok(), ok()),
        c("satisfies the PodAffinity but doesn't satisfy the PodAntiAffinity with the existing pod",
            pod().labels(pod_label2)
                .pod_affinity_in("service", "region", &["securityscan", "value2"], Required)
                .pod_anti_affinity_in("service", "zone", &["securityscan", "value2"], Required).obj(),
            vec![existing()], ok(), unsched(ANTI)),
        c("satisfies the PodAffinity and PodAntiAffinity but doesn't satisfy PodAntiAffinity symmetry with the existing pod",
            pod().labels(pod_label)
                .pod_affinity_in("service", "region", &["securityscan", "value2"], Required)
                .pod_anti_affinity_in("service", "node", &["antivirusscan", "value2"], Required).obj(),
            vec![pod().labels(pod_label).node("node1")
                .pod_anti_affinity_in("service", "zone", &["securityscan", "value2"], Required).obj()],
            ok(), unsched(EXISTING)),
        c("pod matches its own Label in PodAffinity and that matches the existing pod Labels",
            pod().labels(pod_label).pod_affinity_not_in("service", "region", &["securityscan", "value2"], Required).obj(),
            vec![pod().label("service", "securityscan").node("node2").obj()],
            ok(), unresolvable(AFF)),
        c("verify that PodAntiAffinity from existing pod is respected when pod has no AntiAffinity constraints. doesn't satisfy PodAntiAffinity symmetry with the existing pod",
            pod().labels(pod_label).obj(),
            vec![pod().node("node1").labels(pod_label)
                .pod_anti_affinity_in("service", "zone", &["securityscan", "value2"], Required).obj()],
            ok(), unsched(EXISTING)),
        c("verify that PodAntiAffinity from existing pod is respected when pod has no AntiAffinity constraints. satisfy PodAntiAffinity symmetry with the existing pod",
            pod().labels(pod_label).obj(),
            vec![pod().node("node1").labels(pod_label)
                .pod_anti_affinity_not_in("service", "zone", &["securityscan", "value2"], Required).obj()],
            skip(), ok()),
        c("satisfies the PodAntiAffinity with existing pod but doesn't satisfy PodAntiAffinity symmetry with incoming pod",
            pod().labels(pod_label)
                .pod_anti_affinity_exists("service", "region", Required)
                .pod_anti_affinity_exists("security", "region", Required).obj(),
            vec![pod().node("node1").labels(pod_label2).pod_anti_affinity_exists("security", "zone", Required).obj()],
            ok(), unsched(ANTI)),
        c("PodAntiAffinity symmetry check a1: incoming pod and existing pod partially match each other on AffinityTerms",
            pod().labels(pod_label)
                .pod_anti_affinity_exists("service", "zone", Required)
                .pod_anti_affinity_exists("security", "zone", Required).obj(),
            vec![pod().node("node1").labels(pod_label2).pod_anti_affinity_exists("security", "zone", Required).obj()],
            ok(), unsched(ANTI)),
        c("PodAntiAffinity symmetry check a2: incoming pod and existing pod partially match each other on AffinityTerms",
            pod().labels(pod_label2).pod_anti_affinity_exists("security", "zone", Required).obj(),
            vec![pod().node("node1").labels(pod_label)
                .pod_anti_affinity_exists("service", "zone", Required)
                .pod_anti_affinity_exists("security", "zone", Required).obj()],
            ok(), unsched(EXISTING)),
        c("PodAntiAffinity symmetry check b1: incoming pod and existing pod partially match each other on AffinityTerms",
            pod().labels(&[("abc", ""), ("xyz", "")])
                .pod_anti_affinity_exists("abc", "zone", Required)
                .pod_anti_affinity_exists("def", "zone", Required).obj(),
            vec![pod().node("node1").labels(&[("def", ""), ("xyz", "")])
                .pod_anti_affinity_exists("abc", "zone", Required)
                .pod_anti_affinity_exists("def", "zone", Required).obj()],
            ok(), unsched(ANTI)),
        c("PodAntiAffinity symmetry check b2: incoming pod and existing pod partially match each other on AffinityTerms",
            pod().labels(&[("def", ""), ("xyz", "")])
                .pod_anti_affinity_exists("abc", "zone", Required)
                .pod_anti_affinity_exists("def", "zone", Required).obj(),
            vec![pod().node("node1").labels(&[("abc", ""), ("xyz", "")])
                .pod_anti_affinity_exists("abc", "zone", Required)
                .pod_anti_affinity_exists("def", "zone", Required).obj()],
            ok(), unsched(ANTI)),
        c("affinity with NamespaceSelector",
            pod().labels(pod_label2).empty_affinities()
                .affinity(term(Some(svc_in(&["securityscan", "value2"])), "region").ns_selector(team1()).obj(), Required).obj(),
            vec![pod().ns("subteam1.team1").labels(pod_label).node("node1").obj()],
            ok(), ok()),
        c("affinity with non-matching NamespaceSelector",
            pod().labels(pod_label2).empty_affinities()
                .affinity(term(Some(svc_in(&["securityscan", "value2"])), "region").ns_selector(team1()).obj(), Required).obj(),
            vec![pod().ns("subteam1.team2").labels(pod_label).node("node1").obj()],
            ok(), unresolvable(AFF)),
        c("anti-affinity with matching NamespaceSelector",
            pod().ns("subteam1.team1").labels(pod_label2).empty_affinities()
                .anti_affinity(term(Some(svc_in(&["securityscan", "value2"])), "zone").ns_selector(team1()).obj(), Required).obj(),
            vec![pod().ns("subteam2.team1").labels(pod_label).node("node1").obj()],
            ok(), unsched(ANTI)),
        c("anti-affinity with matching all NamespaceSelector",
            pod().ns("subteam1.team1").labels(pod_label2).empty_affinities()
                .anti_affinity(term(Some(svc_in(&["securityscan", "value2"])), "zone").ns_selector(sel().obj()).obj(), Required).obj(),
            vec![pod().ns("subteam2.team1").labels(pod_label).node("node1").obj()],
            ok(), unsched(ANTI)),
        c("anti-affinity with non-matching NamespaceSelector",
            pod().ns("subteam1.team1").labels(pod_label2).empty_affinities()
                .anti_affinity(term(Some(svc_in(&["securityscan", "value2"])), "zone").ns_selector(team1()).obj(), Required).obj(),
            vec![pod().ns("subteam1.team2").labels(pod_label).node("node1").obj()],
            ok(), ok()),
    ];
    run_filter_cases(cases, TEAM_NAMESPACES);
}

#[test]
fn required_affinity_multiple_nodes() {
    let china = &[("region", "China")][..];
    let china_az1 = &[("region", "China"), ("az", "az1")][..];
    let india = &[("region", "India")][..];
    let rzh = |n: &str, zone: &str| {
        node(n)
            .labels(&[("region", "r1"), ("zone", zone), ("hostname", n)])
            .obj()
    };
    let abc = || {
        vec![
            node("nodeA").labels(china).obj(),
            node("nodeB").labels(china_az1).obj(),
            node("nodeC").labels(india).obj(),
        ]
    };
    let c = |name, pod: Pod, pods: Vec<Pod>, nodes: Vec<Node>, want_pre: St, want: Vec<St>| {
        FilterCase {
            name,
            pod,
            pods,
            nodes,
            want_pre,
            want,
        }
    };
    let cases = vec![
        c("A pod can be scheduled onto all the nodes that have the same topology key & label value with one of them has an existing pod that matches the affinity rules",
            pod().pod_affinity_in("foo", "region", &["bar"], Required).obj(),
            vec![pod().name("p1").node("node1").labels(&[("foo", "bar")]).obj()],
            vec![node("node1").labels(china).obj(), node("node2").labels(china_az1).obj(), node("node3").labels(india).obj()],
            ok(), vec![ok(), ok(), unresolvable(AFF)]),
        c("The affinity rule is to schedule all of the pods of this collection to the same zone. The first pod of the collection should not be blocked from being scheduled onto any node, even there's no existing pod that matches the rule anywhere.",
            pod().labels(&[("foo", "bar"), ("service", "securityscan")])
                .pod_affinity_in("foo", "zone", &["bar"], Required)
                .pod_affinity_in("service", "zone", &["securityscan"], Required).obj(),
            vec![pod().name("p1").node("nodeA").labels(&[("foo", "bar")]).obj()],
            vec![node("nodeA").labels(&[("zone", "az1"), ("hostname", "h1")]).obj(), node("nodeB").labels(&[("zone", "az2"), ("hostname", "h2")]).obj()],
            ok(), vec![ok(), ok()]),
        c("The first pod of the collection can only be scheduled on nodes labelled with the requested topology keys",
            pod().labels(&[("foo", "bar"), ("service", "securityscan")])
                .pod_affinity_in("foo", "zone", &["bar"], Required)
                .pod_affinity_in("service", "zone", &["securityscan"], Required).obj(),
            vec![pod().name("p1").node("nodeA").labels(&[("foo", "bar")]).obj()],
            vec![node("nodeA").labels(&[("zoneLabel", "az1"), ("hostname", "h1")]).obj(), node("nodeB").labels(&[("zoneLabel", "az2"), ("hostname", "h2")]).obj()],
            ok(), vec![unresolvable(AFF), unresolvable(AFF)]),
        c("NodeA and nodeB have same topologyKey and label value. NodeA has an existing pod that matches the inter pod affinity rule. The pod can not be scheduled onto nodeA and nodeB.",
            pod().pod_anti_affinity_in("foo", "region", &["abc"], Required).obj(),
            vec![pod().node("nodeA").labels(&[("foo", "abc")]).obj()],
            vec![node("nodeA").labels(&[("region", "r1"), ("hostname", "nodeA")]).obj(), node("nodeB").labels(&[("region", "r1"), ("hostname", "nodeB")]).obj()],
            ok(), vec![unsched(ANTI), unsched(ANTI)]),
        c("This test ensures that anti-affinity matches a pod when any term of the anti-affinity rule matches a pod.",
            pod().pod_anti_affinity_in("foo", "region", &["abc"], Required)
                .pod_anti_affinity_in("service", "zone", &["securityscan"], Required).obj(),
            vec![pod().node("nodeA").labels(&[("foo", "abc"), ("service", "securityscan")]).obj()],
            vec![node("nodeA").labels(&[("region", "r1"), ("zone", "z1"), ("hostname", "nodeA")]).obj(), node("nodeB").labels(&[("region", "r1"), ("zone", "z2"), ("hostname", "nodeB")]).obj()],
            ok(), vec![unsched(ANTI), unsched(ANTI)]),
        c("NodeA and nodeB have same topologyKey and label value. NodeA has an existing pod that matches the inter pod affinity rule. The pod can not be scheduled onto nodeA and nodeB but can be scheduled onto nodeC",
            pod().pod_anti_affinity_in("foo", "region", &["abc"], Required).obj(),
            vec![pod().node("nodeA").labels(&[("foo", "abc")]).obj()],
            abc(), ok(), vec![unsched(ANTI), unsched(ANTI), ok()]),
        c("NodeA and nodeB have same topologyKey and label value. NodeA has an existing pod that matches the inter pod affinity rule. The pod can not be scheduled onto nodeA, nodeB, but can be scheduled onto nodeC (NodeC has an existing pod that match the inter pod affinity rule but in different namespace)",
            pod().ns("NS1").labels(&[("foo", "123")]).pod_anti_affinity_in("foo", "region", &["bar"], Required).obj(),
            vec![
                pod().node("nodeA").ns("NS1").labels(&[("foo", "bar")]).obj(),
                pod().node("nodeC").ns("NS2").pod_anti_affinity_in("foo", "region", &["123"], Required).obj(),
            ],
            abc(), ok(), vec![unsched(ANTI), unsched(ANTI), ok()]),
        c("Test existing pod's anti-affinity: if an existing pod has a term with invalid topologyKey, labelSelector of the term is firstly checked, and then topologyKey of the term is also checked",
            pod().label("foo", "").obj(),
            vec![pod().node("nodeA").pod_anti_affinity_exists("foo", "invalid-node-label", Required).obj()],
            vec![rzh("nodeA", "z1"), rzh("nodeB", "z1")],
            skip(), vec![ok(), ok()]),
        c("Test incoming pod's anti-affinity: even if labelSelector matches, we still check if topologyKey matches",
            pod().node("nodeA").pod_anti_affinity_exists("foo", "invalid-node-label", Required).obj(),
            vec![pod().node("nodeA").labels(&[("foo", "")]).obj()],
            vec![rzh("nodeA", "z1"), rzh("nodeB", "z1")],
            ok(), vec![ok(), ok()]),
        c("Test existing pod's anti-affinity: incoming pod wouldn't considered as a fit as it violates each existingPod's terms on all nodes",
            pod().label("foo", "").label("bar", "").obj(),
            vec![
                pod().node("nodeA").pod_anti_affinity_exists("foo", "zone", Required).obj(),
                pod().node("nodeA").pod_anti_affinity_exists("bar", "region", Required).obj(),
            ],
            vec![rzh("nodeA", "z1"), rzh("nodeB", "z2")],
            ok(), vec![unsched(EXISTING), unsched(EXISTING)]),
        c("Test incoming pod's anti-affinity: incoming pod wouldn't considered as a fit as it at least violates one anti-affinity rule of existingPod",
            pod().pod_anti_affinity_exists("foo", "zone", Required).pod_anti_affinity_exists("bar", "region", Required).obj(),
            vec![
                pod().node("nodeA").labels(&[("foo", "")]).obj(),
                pod().node("nodeB").labels(&[("bar", "")]).obj(),
            ],
            vec![rzh("nodeA", "z1"), rzh("nodeB", "z2")],
            ok(), vec![unsched(ANTI), unsched(ANTI)]),
        c("Test existing pod's anti-affinity: only when labelSelector and topologyKey both match, it's counted as a single term match - case when one term has invalid topologyKey",
            pod().label("foo", "").label("bar", "").obj(),
            vec![pod().node("nodeA")
                .pod_anti_affinity_exists("foo", "invalid-node-label", Required)
                .pod_anti_affinity_exists("bar", "zone", Required).obj()],
            vec![rzh("nodeA", "z1"), rzh("nodeB", "z2")],
            ok(), vec![unsched(EXISTING), ok()]),
        c("Test incoming pod's anti-affinity: only when labelSelector and topologyKey both match, it's counted as a single term match - case when one term has invalid topologyKey",
            pod().pod_anti_affinity_exists("foo", "invalid-node-label", Required)
                .pod_anti_affinity_exists("bar", "zone", Required).obj(),
            vec![pod().name("podA").node("nodeA").labels(&[("foo", ""), ("bar", "")]).obj()],
            vec![rzh("nodeA", "z1"), rzh("nodeB", "z2")],
            ok(), vec![unsched(ANTI), ok()]),
        c("Test existing pod's anti-affinity: only when labelSelector and topologyKey both match, it's counted as a single term match - case when all terms have valid topologyKey",
            pod().label("foo", "").label("bar", "").obj(),
            vec![pod().node("nodeA")
                .pod_anti_affinity_exists("foo", "region", Required)
                .pod_anti_affinity_exists("bar", "zone", Required).obj()],
            vec![rzh("nodeA", "z1"), rzh("nodeB", "z2")],
            ok(), vec![unsched(EXISTING), unsched(EXISTING)]),
        c("Test incoming pod's anti-affinity: only when labelSelector and topologyKey both match, it's counted as a single term match - case when all terms have valid topologyKey",
            pod().pod_anti_affinity_exists("foo", "region", Required)
                .pod_anti_affinity_exists("bar", "zone", Required).obj(),
            vec![pod().node("nodeA").labels(&[("foo", ""), ("bar", "")]).obj()],
            vec![rzh("nodeA", "z1"), rzh("nodeB", "z2")],
            ok(), vec![unsched(ANTI), unsched(ANTI)]),
        c("Test existing pod's anti-affinity: existingPod on nodeA and nodeB has at least one anti-affinity term matches incoming pod, so incoming pod can only be scheduled to nodeC",
            pod().label("foo", "").label("bar", "").obj(),
            vec![
                pod().node("nodeA").pod_anti_affinity_exists("foo", "zone", Required).pod_anti_affinity_exists("labelA", "zone", Required).obj(),
                pod().node("nodeB").pod_anti_affinity_exists("bar", "zone", Required).pod_anti_affinity_exists("labelB", "zone", Required).obj(),
            ],
            vec![rzh("nodeA", "z1"), rzh("nodeB", "z2"), rzh("nodeC", "z3")],
            ok(), vec![unsched(EXISTING), unsched(EXISTING), ok()]),
        c("Test incoming pod's affinity: firstly check if all affinityTerms match, and then check if all topologyKeys match",
            pod().pod_affinity_exists("foo", "region", Required).pod_affinity_exists("bar", "zone", Required).obj(),
            vec![pod().name("pod1").labels(&[("foo", ""), ("bar", "")]).node("nodeA").obj()],
            vec![rzh("nodeA", "z1"), rzh("nodeB", "z1")],
            ok(), vec![ok(), ok()]),
        c("Test incoming pod's affinity: firstly check if all affinityTerms match, and then check if all topologyKeys match, and the match logic should be satisfied on the same pod",
            pod().pod_affinity_exists("foo", "region", Required).pod_affinity_exists("bar", "zone", Required).obj(),
            vec![
                pod().node("nodeA").name("pod1").labels(&[("foo", "")]).obj(),
                pod().node("nodeB").name("pod2").labels(&[("bar", "")]).obj(),
            ],
            vec![rzh("nodeA", "z1"), rzh("nodeB", "z2")],
            ok(), vec![unresolvable(AFF), unresolvable(AFF)]),
        c("Test incoming pod's host-scoped affinity (fast path)",
            pod().pod_affinity_exists("foo", "kubernetes.io/hostname", Required).obj(),
            vec![pod().name("pod1").labels(&[("foo", "")]).node("nodeA").obj()],
            vec![node("nodeA").label("kubernetes.io/hostname", "nodeA").obj(), node("nodeB").label("kubernetes.io/hostname", "nodeB").obj()],
            ok(), vec![ok(), unresolvable(AFF)]),
        c("Test incoming pod's host-scoped anti-affinity (fast path)",
            pod().pod_anti_affinity_exists("foo", "kubernetes.io/hostname", Required).obj(),
            vec![pod().name("pod1").labels(&[("foo", "")]).node("nodeA").obj()],
            vec![node("nodeA").label("kubernetes.io/hostname", "nodeA").obj(), node("nodeB").label("kubernetes.io/hostname", "nodeB").obj()],
            ok(), vec![unsched(ANTI), ok()]),
    ];
    run_filter_cases(cases, &[("NS1", &[])]);
}

type Aff = fn(PodBuilder) -> PodBuilder;

fn sec_in(v: &str) -> Option<rkube_model::LabelSelector> {
    Some(sel().is("security", &[v]).obj())
}
fn stay_with_s1_in_region(p: PodBuilder) -> PodBuilder {
    p.affinity_w(term(sec_in("S1"), "region").obj(), 5)
}
fn stay_with_s2_in_region(p: PodBuilder) -> PodBuilder {
    p.affinity_w(term(sec_in("S2"), "region").obj(), 6)
}
fn affinity3(p: PodBuilder) -> PodBuilder {
    p.affinity_w(
        term(
            Some(
                sel()
                    .not_in("security", &["S1"])
                    .is("security", &["S2"])
                    .obj(),
            ),
            "region",
        )
        .obj(),
        8,
    )
    .affinity_w(
        term(
            Some(sel().exists("security").not_exists("wrongkey").obj()),
            "region",
        )
        .obj(),
        2,
    )
}
fn hard_affinity(p: PodBuilder) -> PodBuilder {
    p.affinity(
        term(
            Some(sel().is("security", &["S1", "value2"]).obj()),
            "region",
        )
        .obj(),
        Required,
    )
    .affinity(
        term(
            Some(sel().exists("security").not_exists("wrongkey").obj()),
            "region",
        )
        .obj(),
        Required,
    )
}
fn away_from_s1_in_az(p: PodBuilder) -> PodBuilder {
    p.anti_affinity_w(term(sec_in("S1"), "az").obj(), 5)
}
fn away_from_s2_in_az(p: PodBuilder) -> PodBuilder {
    p.anti_affinity_w(term(sec_in("S2"), "az").obj(), 5)
}
fn stay_s1_region_away_s2_az(p: PodBuilder) -> PodBuilder {
    p.affinity_w(term(sec_in("S1"), "region").obj(), 8)
        .anti_affinity_w(term(sec_in("S2"), "az").obj(), 5)
}
fn team1() -> rkube_model::LabelSelector {
    sel().is("team", &["team1"]).obj()
}
fn affinity_ns_selector(p: PodBuilder) -> PodBuilder {
    p.affinity_w(
        term(sec_in("S1"), "region")
            .namespaces(&["subteam2.team2"])
            .ns_selector(team1())
            .obj(),
        5,
    )
}
fn anti_affinity_ns_selector(p: PodBuilder) -> PodBuilder {
    p.anti_affinity_w(
        term(sec_in("S1"), "region")
            .namespaces(&["subteam2.team2"])
            .ns_selector(team1())
            .obj(),
        5,
    )
}
fn affinity_negative_ns_selector(p: PodBuilder) -> PodBuilder {
    p.affinity_w(
        term(sec_in("S1"), "region")
            .ns_selector(sel().not_in("team", &["team1"]).obj())
            .obj(),
        5,
    )
}
fn anti_affinity_negative_ns_selector(p: PodBuilder) -> PodBuilder {
    p.anti_affinity_w(
        term(sec_in("S1"), "region")
            .ns_selector(sel().not_in("team", &["team1"]).obj())
            .obj(),
        5,
    )
}
fn none(p: PodBuilder) -> PodBuilder {
    p
}

struct ScoreCase {
    name: &'static str,
    pod: Pod,
    pods: Vec<Pod>,
    nodes: Vec<Node>,
    want_pre: St,
    want: Vec<i64>,
}

/// `(node, labels of the node)` list.
fn nodes(list: &[(&str, &[(&str, &str)])]) -> Vec<Node> {
    list.iter().map(|(n, l)| node(n).labels(l).obj()).collect()
}

/// A pod on `node` with `labels`, in `ns`, with affinity `aff`.
fn on(node_name: &str, ns: &str, l: &[(&str, &str)], aff: Aff) -> Pod {
    aff(pod().ns(ns).node(node_name).labels(l)).obj()
}

fn run_score_cases(pl: &InterPodAffinity, cases: Vec<ScoreCase>) {
    let mut f = Failures::new();
    for c in cases {
        let snap = snapshot_ns(c.nodes, c.pods, TEAM_NAMESPACES);
        let (pre, _raw, normalized) = run_score(pl, &snap, &c.pod, None);
        f.check(c.name, "PreScore", pre.clone(), c.want_pre);
        if pre.0 == "Success" {
            f.check(c.name, "scores", normalized, c.want);
        }
    }
    f.finish();
}

const CHINA: &[(&str, &str)] = &[("region", "China")];
const INDIA: &[(&str, &str)] = &[("region", "India")];
const AZ1: &[(&str, &str)] = &[("az", "az1")];
const AZ2: &[(&str, &str)] = &[("az", "az2")];
const CHINA_AZ1: &[(&str, &str)] = &[("region", "China"), ("az", "az1")];
const S1: &[(&str, &str)] = &[("security", "S1")];
const S2: &[(&str, &str)] = &[("security", "S2")];

#[test]
fn preferred_affinity() {
    let n3 = || nodes(&[("node1", CHINA), ("node2", INDIA), ("node3", AZ1)]);
    let n2 = || nodes(&[("node1", CHINA), ("node2", INDIA)]);
    let c = |name, pod: Pod, pods: Vec<Pod>, nodes: Vec<Node>, want_pre: St, want: Vec<i64>| {
        ScoreCase {
            name,
            pod,
            pods,
            nodes,
            want_pre,
            want,
        }
    };
    let cases = vec![
        c("all nodes are same priority as Affinity is nil",
            on("", "", S1, none), vec![], n3(), skip(), vec![]),
        c("Affinity: pod that matches topology key & pods in nodes will get high score comparing to otherswhich doesn't match either pods in nodes or in topology key",
            on("", "", S1, stay_with_s1_in_region),
            vec![on("node1", "", S1, none), on("node2", "", S2, none), on("node3", "", S1, none)],
            n3(), ok(), vec![100, 0, 0]),
        c("All the nodes that have the same topology key & label value with one of them has an existing pod that match the affinity rules, have the same score",
            on("", "", &[], stay_with_s1_in_region),
            vec![on("node1", "", S1, none)],
            nodes(&[("node1", CHINA), ("node2", CHINA_AZ1), ("node3", INDIA)]), ok(), vec![100, 100, 0]),
        c("Affinity: nodes in one region has more matching pods comparing to other region, so the region which has more matches will get high score",
            on("", "", S1, stay_with_s2_in_region),
            vec![on("node1", "", S2, none), on("node1", "", S2, none), on("node2", "", S2, none),
                 on("node3", "", S2, none), on("node4", "", S2, none), on("node5", "", S2, none)],
            nodes(&[("node1", CHINA), ("node2", INDIA), ("node3", CHINA), ("node4", CHINA), ("node5", INDIA)]),
            ok(), vec![100, 0, 100, 100, 0]),
        c("Affinity: different Label operators and values for pod affinity scheduling preference, including some match failures ",
            on("", "", S1, affinity3),
            vec![on("node1", "", S1, none), on("node2", "", S2, none), on("node3", "", S1, none)],
            n3(), ok(), vec![20, 100, 0]),
        c("Affinity symmetry: considered only the preferredDuringSchedulingIgnoredDuringExecution in pod affinity symmetry",
            on("", "", S2, none),
            vec![on("node1", "", S1, stay_with_s1_in_region), on("node2", "", S2, stay_with_s2_in_region)],
            n3(), ok(), vec![0, 100, 0]),
        c("Affinity symmetry with namespace selector",
            on("", "subteam1.team1", S1, none),
            vec![on("node1", "", S1, affinity_ns_selector), on("node2", "", S2, stay_with_s2_in_region)],
            n3(), ok(), vec![100, 0, 0]),
        c("AntiAffinity symmetry with namespace selector",
            on("", "subteam1.team1", S1, none),
            vec![on("node1", "", S1, anti_affinity_ns_selector), on("node2", "", S2, stay_with_s2_in_region)],
            n3(), ok(), vec![0, 100, 100]),
        c("Affinity symmetry: considered RequiredDuringSchedulingIgnoredDuringExecution in pod affinity symmetry",
            on("", "", S1, none),
            vec![on("node1", "", S1, hard_affinity), on("node2", "", S2, hard_affinity)],
            n3(), ok(), vec![100, 100, 0]),
        c("Anti Affinity: pod that does not match existing pods in node will get high score ",
            on("", "", S1, away_from_s1_in_az),
            vec![on("node1", "", S1, none), on("node2", "", S2, none)],
            nodes(&[("node1", AZ1), ("node2", CHINA)]), ok(), vec![0, 100]),
        c("Anti Affinity: pod that does not match topology key & match the pods in nodes will get higher score comparing to others ",
            on("", "", S1, away_from_s1_in_az),
            vec![on("node1", "", S1, none), on("node2", "", S1, none)],
            nodes(&[("node1", AZ1), ("node2", CHINA)]), ok(), vec![0, 100]),
        c("Anti Affinity: one node has more matching pods comparing to other node, so the node which has more unmatches will get high score",
            on("", "", S1, away_from_s1_in_az),
            vec![on("node1", "", S1, none), on("node1", "", S1, none), on("node2", "", S2, none)],
            nodes(&[("node1", AZ1), ("node2", INDIA)]), ok(), vec![0, 100]),
        c("Anti Affinity symmetry: the existing pods in node which has anti affinity match will get high score",
            on("", "", S2, none),
            vec![on("node1", "", S1, away_from_s2_in_az), on("node2", "", S2, away_from_s1_in_az)],
            nodes(&[("node1", AZ1), ("node2", AZ2)]), ok(), vec![0, 100]),
        c("Affinity and Anti Affinity: considered only preferredDuringSchedulingIgnoredDuringExecution in both pod affinity & anti affinity",
            on("", "", S1, stay_s1_region_away_s2_az),
            vec![on("node1", "", S1, none), on("node2", "", S1, none)],
            nodes(&[("node1", CHINA), ("node2", AZ1)]), ok(), vec![100, 0]),
        c("Affinity and Anti Affinity: considering both affinity and anti-affinity, the pod to schedule and existing pods have the same labels",
            on("", "", S1, stay_s1_region_away_s2_az),
            vec![on("node1", "", S1, none), on("node1", "", S1, none), on("node2", "", S1, none),
                 on("node3", "", S1, none), on("node3", "", S1, none), on("node4", "", S1, none), on("node5", "", S1, none)],
            nodes(&[("node1", CHINA_AZ1), ("node2", INDIA), ("node3", CHINA), ("node4", CHINA), ("node5", INDIA)]),
            ok(), vec![100, 0, 100, 100, 0]),
        c("Affinity and Anti Affinity and symmetry: considered only preferredDuringSchedulingIgnoredDuringExecution in both pod affinity & anti affinity & symmetry",
            on("", "", S1, stay_s1_region_away_s2_az),
            vec![on("node1", "", S1, none), on("node2", "", S2, none),
                 on("node3", "", &[], stay_s1_region_away_s2_az), on("node4", "", &[], away_from_s1_in_az)],
            nodes(&[("node1", CHINA), ("node2", AZ1), ("node3", INDIA), ("node4", AZ2)]),
            ok(), vec![100, 0, 100, 0]),
        c("Avoid panic when partial nodes in a topology don't have pods with affinity",
            on("", "", S1, none),
            vec![on("node1", "", S1, none), on("node2", "", &[], stay_s1_region_away_s2_az)],
            nodes(&[("node1", CHINA), ("node2", CHINA)]), ok(), vec![0, 0]),
        c("Affinity with pods matching NamespaceSelector",
            on("", "subteam1.team1", S1, affinity_ns_selector),
            vec![on("node1", "subteam1.team1", S1, none), on("node1", "subteam1.team1", S1, none),
                 on("node1", "subteam1.team2", S1, none), on("node2", "subteam2.team1", S1, none)],
            n2(), ok(), vec![100, 0]),
        c("Affinity with pods matching both NamespaceSelector and Namespaces fields",
            on("", "subteam1.team1", S1, affinity_ns_selector),
            vec![on("node1", "subteam1.team1", S1, none), on("node1", "subteam1.team1", S1, none),
                 on("node1", "subteam2.team2", S1, none), on("node2", "subteam2.team1", S1, none)],
            n2(), ok(), vec![100, 0]),
        c("Affinity with pods matching NamespaceSelector (anti-affinity)",
            on("", "subteam1.team1", S1, anti_affinity_ns_selector),
            vec![on("node1", "subteam1.team1", S1, none), on("node1", "subteam1.team1", S1, none),
                 on("node1", "subteam1.team2", S1, none), on("node2", "subteam2.team1", S1, none)],
            n2(), ok(), vec![0, 100]),
        c("Affinity with pods matching both NamespaceSelector and Namespaces fields (anti-affinity)",
            on("", "subteam1.team1", S1, anti_affinity_ns_selector),
            vec![on("node1", "subteam1.team1", S1, none), on("node1", "subteam1.team1", S1, none),
                 on("node1", "subteam2.team2", S1, none), on("node2", "subteam2.team1", S1, none)],
            n2(), ok(), vec![0, 100]),
        c("Affinity with pods correctly enforcing negative NamespaceSelector",
            on("", "subteam1.team1", S1, affinity_negative_ns_selector),
            vec![on("node1", "subteam1.team1", S1, none), on("node1", "subteam1.team1", S1, none),
                 on("node2", "subteam1.team2", S1, none)],
            n2(), ok(), vec![0, 100]),
        c("AntiAffinity with pods correctly enforcing negative NamespaceSelector",
            on("", "subteam1.team1", S1, anti_affinity_negative_ns_selector),
            vec![on("node1", "subteam1.team1", S1, none), on("node1", "subteam1.team1", S1, none),
                 on("node2", "subteam1.team2", S1, none)],
            n2(), ok(), vec![100, 0]),
        c("Do not ignore preferred terms of existing pods",
            on("", "", S2, none),
            vec![on("node1", "", S1, stay_s1_region_away_s2_az), on("node2", "", S2, stay_with_s2_in_region)],
            n2(), ok(), vec![0, 100]),
        c("No nodes to score", on("", "", S2, none), vec![], vec![], skip(), vec![]),
    ];
    run_score_cases(&InterPodAffinity::default(), cases);

    let ignore = InterPodAffinity::with_args(1, true);
    run_score_cases(
        &ignore,
        vec![c(
            "Ignore preferred terms of existing pods",
            on("", "", S2, none),
            vec![
                on("node1", "", S1, stay_s1_region_away_s2_az),
                on("node2", "", S2, stay_with_s2_in_region),
            ],
            n2(),
            skip(),
            vec![],
        )],
    );
}

fn hard_pod_affinity(p: PodBuilder) -> PodBuilder {
    p.affinity(
        term(Some(sel().is("service", &["S1"]).obj()), "region")
            .namespaces(&["", "subteam2.team2"])
            .ns_selector(team1())
            .obj(),
        Required,
    )
}

#[test]
fn preferred_affinity_with_hard_pod_affinity_symmetric_weight() {
    let svc = &[("service", "S1")][..];
    let n3 = || nodes(&[("node1", CHINA), ("node2", INDIA), ("node3", AZ1)]);
    let existing = || {
        vec![
            on("node1", "", &[], hard_pod_affinity),
            on("node2", "", &[], hard_pod_affinity),
        ]
    };
    let with = |w: i32| InterPodAffinity::with_args(w, false);
    let case = |name, ns, want_pre: St, want: Vec<i64>| ScoreCase {
        name,
        pod: on("", ns, svc, none),
        pods: existing(),
        nodes: n3(),
        want_pre,
        want,
    };
    run_score_cases(
        &with(1),
        vec![case("with default weight", "", ok(), vec![100, 100, 0])],
    );
    run_score_cases(&with(0), vec![case("with zero weight", "", skip(), vec![])]);
    run_score_cases(
        &with(1),
        vec![
            case(
                "with no matching namespace",
                "subteam1.team2",
                skip(),
                vec![],
            ),
            case(
                "with matching NamespaceSelector",
                "subteam1.team1",
                ok(),
                vec![100, 100, 0],
            ),
            case(
                "with matching Namespaces",
                "subteam2.team2",
                ok(),
                vec![100, 100, 0],
            ),
        ],
    );
}

/// The whole default profile: required anti-affinity (hostname fast path and
/// zone) and existing pods' anti-affinity, with InterPodAffinity's verdicts
/// and scores through `explain`.
#[test]
fn default_profile_scenario() {
    let fw = default_framework();
    let host = "kubernetes.io/hostname";
    let nodes = vec![
        node("n1").labels(&[(host, "n1"), ("zone", "z1")]).obj(),
        node("n2").labels(&[(host, "n2"), ("zone", "z1")]).obj(),
        node("n3").labels(&[(host, "n3"), ("zone", "z2")]).obj(),
        node("n4").labels(&[(host, "n4"), ("zone", "z3")]).obj(),
    ];
    let existing = vec![
        pod()
            .name("web-1")
            .ns("default")
            .node("n1")
            .label("app", "web")
            .obj(),
        // Rejects any "web" pod in zone z2.
        pod()
            .name("guard")
            .ns("default")
            .node("n3")
            .label("app", "guard")
            .pod_anti_affinity_in("app", "zone", &["web"], Required)
            .obj(),
        pod()
            .name("cache")
            .ns("default")
            .node("n4")
            .label("app", "cache")
            .obj(),
    ];
    let snap = snapshot_ns(nodes, existing, &[("default", &[])]);
    let p = pod()
        .name("web-2")
        .ns("default")
        .label("app", "web")
        .pod_anti_affinity_in("app", host, &["web"], Required)
        .affinity_w(
            term(Some(sel().is("app", &["cache"]).obj()), "zone").obj(),
            10,
        )
        .obj();
    let ex = rkube_framework::explain(&fw, &snap, &p).unwrap();
    let verdict = |i: usize| filter_verdict(&ex, i, "InterPodAffinity");
    assert_eq!(verdict(0), ("Unschedulable", vec![ANTI.to_string()]));
    assert_eq!(verdict(1), ("Success", vec![]));
    assert_eq!(verdict(2), ("Unschedulable", vec![EXISTING.to_string()]));
    assert_eq!(verdict(3), ("Success", vec![]));
    let score = |i: usize| {
        ex.nodes[i]
            .scores
            .iter()
            .find(|s| s.plugin == "InterPodAffinity")
            .map(|s| (s.raw, s.normalized))
            .unwrap()
    };
    assert_eq!(score(1), (0, 0));
    assert_eq!(score(3), (10, 100));
    assert_eq!(ex.top_nodes, vec![3]);
}

/// PreFilter extensions: removing the pod that anti-affinity conflicts with
/// (as preemption does) clears the rejection; adding it back restores it.
#[test]
fn pre_filter_state_add_remove_pod() {
    use rkube_framework::{CycleState, Plugin};
    let pl = InterPodAffinity::default();
    let victim = pod().name("v").node("nodeA").labels(&[("foo", "")]).obj();
    let snap = snapshot(
        vec![
            node("nodeA").labels(&[("zone", "z1")]).obj(),
            node("nodeB").labels(&[("zone", "z1")]).obj(),
        ],
        vec![victim.clone()],
    );
    let p = pod()
        .pod_anti_affinity_exists("foo", "zone", Required)
        .obj();
    let pf = pl.as_pre_filter().unwrap();
    let f = pl.as_filter().unwrap();
    let mut state = CycleState::new();
    assert!(pf.pre_filter(&mut state, &p, &snap).1.is_success());
    assert_eq!(sc(&f.filter(&state, &p, &snap.nodes[1])), unsched(ANTI));
    assert!(pf
        .remove_pod(&mut state, &p, &victim, &snap.nodes[0])
        .is_success());
    assert_eq!(sc(&f.filter(&state, &p, &snap.nodes[1])), ok());
    assert!(pf
        .add_pod(&mut state, &p, &victim, &snap.nodes[0])
        .is_success());
    assert_eq!(sc(&f.filter(&state, &p, &snap.nodes[1])), unsched(ANTI));
}

/// One plugin kept across cycles (its per-node memo reused) decides as a
/// fresh plugin on every cycle, while pods are assumed on and removed from
/// the snapshot between cycles and pods of different label sets and terms
/// take turns.
#[test]
fn kept_plugin_decides_as_a_fresh_one_while_the_snapshot_changes() {
    use rkube_framework::Snapshot;
    let nodes: Vec<Node> = (0..12)
        .map(|i| {
            let z = format!("z{}", i % 3);
            let h = format!("n{i:02}");
            node(&h)
                .labels(&[("zone", z.as_str()), ("kubernetes.io/hostname", h.as_str())])
                .obj()
        })
        .collect();
    let mut snap: Snapshot = snapshot_ns(nodes, vec![], TEAM_NAMESPACES);
    // Four kinds of pod, chosen in turn.
    let make = |kind: usize, i: usize| -> Pod {
        let name = format!("p{i:03}");
        let b = pod().name(&name).ns("team1");
        match kind {
            0 => b.labels(&[("app", "web")]).pod_anti_affinity_in(
                "app",
                "kubernetes.io/hostname",
                &["web"],
                Required,
            ),
            1 => b
                .labels(&[("app", "db")])
                .pod_affinity_in("app", "zone", &["db"], Required)
                .pod_anti_affinity_in("app", "zone", &["web"], Preferred),
            2 => b
                .labels(&[("app", "cache")])
                .pod_affinity_in("app", "kubernetes.io/hostname", &["web"], Preferred)
                .pod_anti_affinity_in("app", "zone", &["cache"], RequiredPreferred),
            _ => b.labels(&[("app", "web")]),
        }
        .obj()
    };
    let placed = kept_agrees_with_fresh(
        &InterPodAffinity::default(),
        InterPodAffinity::default,
        &mut snap,
        (0..60).map(|i| make((i * 7 + i / 5) % 4, i)),
    );
    assert!(placed > 10, "pods placed: {placed}");
}
