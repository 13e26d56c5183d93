//! Builders and drivers shared by the InterPodAffinity and PodTopologySpread
//! ports of upstream's table tests (in the spirit of upstream's
//! `st.MakePod()` / `st.MakeNode()`).

#![allow(dead_code)]

use std::sync::Arc;

use rkube_framework::{CycleState, NodeInfo, NodeScore, Plugin, Snapshot, Status};
use rkube_model::selector::{Operator, Requirement};
use rkube_model::{
    LabelSelector, Labels, Node, NodeAffinity, NodeSelector, NodeSelectorTerm, Pod, PodAffinity,
    PodAffinityTerm, Taint, TaintEffect, Toleration, TopologySpreadConstraint,
    WeightedPodAffinityTerm,
};

pub fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A label selector builder.
#[derive(Default, Clone)]
pub struct Sel(LabelSelector);

pub fn sel() -> Sel {
    Sel::default()
}

fn req(key: &str, op: Operator, vals: &[&str]) -> Requirement {
    let mut values: Vec<String> = vals.iter().map(|s| s.to_string()).collect();
    values.sort();
    Requirement {
        key: key.into(),
        op,
        values,
    }
}

impl Sel {
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.0.requirements.push(req(k, Operator::In, &[v]));
        self
    }
    pub fn is(mut self, k: &str, vals: &[&str]) -> Self {
        self.0.requirements.push(req(k, Operator::In, vals));
        self
    }
    pub fn not_in(mut self, k: &str, vals: &[&str]) -> Self {
        self.0.requirements.push(req(k, Operator::NotIn, vals));
        self
    }
    pub fn exists(mut self, k: &str) -> Self {
        self.0.requirements.push(req(k, Operator::Exists, &[]));
        self
    }
    pub fn not_exists(mut self, k: &str) -> Self {
        self.0
            .requirements
            .push(req(k, Operator::DoesNotExist, &[]));
        self
    }
    pub fn obj(self) -> LabelSelector {
        self.0
    }
}

/// A pod affinity term builder.
pub struct TermB(PodAffinityTerm);

pub fn term(selector: Option<LabelSelector>, topology_key: &str) -> TermB {
    TermB(PodAffinityTerm {
        selector,
        topology_key: topology_key.into(),
        ..Default::default()
    })
}

impl TermB {
    pub fn namespaces(mut self, ns: &[&str]) -> Self {
        self.0.namespaces = ns.iter().map(|s| s.to_string()).collect();
        self
    }
    pub fn ns_selector(mut self, s: LabelSelector) -> Self {
        self.0.namespace_selector = Some(s);
        self
    }
    pub fn match_label_keys(mut self, keys: &[&str]) -> Self {
        self.0.match_label_keys = keys.iter().map(|s| s.to_string()).collect();
        self
    }
    pub fn mismatch_label_keys(mut self, keys: &[&str]) -> Self {
        self.0.mismatch_label_keys = keys.iter().map(|s| s.to_string()).collect();
        self
    }
    pub fn obj(self) -> PodAffinityTerm {
        self.0
    }
}

/// `st.PodAffinityKind`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Required,
    Preferred,
    RequiredPreferred,
}
pub use Kind::*;

/// A pod builder.
pub struct PodB(Pod);

pub fn pod() -> PodB {
    PodB(Pod {
        scheduler_name: "default-scheduler".into(),
        ..Default::default()
    })
}

impl PodB {
    pub fn name(mut self, n: &str) -> Self {
        self.0.name = n.into();
        self.0.uid = n.into();
        self
    }
    pub fn ns(mut self, n: &str) -> Self {
        self.0.namespace = n.into();
        self
    }
    pub fn node(mut self, n: &str) -> Self {
        self.0.node_name = n.into();
        self
    }
    pub fn labels(mut self, l: &[(&str, &str)]) -> Self {
        self.0.labels = labels(l);
        self
    }
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.0.labels.insert(k.into(), v.into());
        self
    }
    pub fn terminating(mut self) -> Self {
        self.0.terminating = true;
        self
    }
    pub fn node_selector(mut self, l: &[(&str, &str)]) -> Self {
        self.0.node_selector = labels(l);
        self
    }
    /// `NodeAffinityIn(key, vals, NodeSelectorTypeMatchExpressions)`.
    pub fn node_affinity_in(mut self, key: &str, vals: &[&str]) -> Self {
        let a = self
            .0
            .node_affinity
            .get_or_insert_with(NodeAffinity::default);
        let sel = a.required.get_or_insert_with(NodeSelector::default);
        if sel.terms.is_empty() {
            sel.terms.push(NodeSelectorTerm::default());
        }
        sel.terms[0]
            .match_expressions
            .push(req(key, Operator::In, vals));
        self
    }
    pub fn node_affinity_not_in(mut self, key: &str, vals: &[&str]) -> Self {
        let a = self
            .0
            .node_affinity
            .get_or_insert_with(NodeAffinity::default);
        let sel = a.required.get_or_insert_with(NodeSelector::default);
        if sel.terms.is_empty() {
            sel.terms.push(NodeSelectorTerm::default());
        }
        sel.terms[0]
            .match_expressions
            .push(req(key, Operator::NotIn, vals));
        self
    }
    /// `Toleration(key)`: `key Exists`, any effect.
    pub fn toleration(mut self, key: &str) -> Self {
        self.0.tolerations.push(Toleration {
            key: key.into(),
            exists: true,
            value: String::new(),
            effect: None,
        });
        self
    }

    fn add_term(mut self, anti: bool, t: PodAffinityTerm, kind: Kind, weight: i32) -> Self {
        let a = if anti {
            self.0
                .pod_anti_affinity
                .get_or_insert_with(PodAffinity::default)
        } else {
            self.0.pod_affinity.get_or_insert_with(PodAffinity::default)
        };
        if kind != Preferred {
            a.required.push(t.clone());
        }
        if kind != Required {
            a.preferred
                .push(WeightedPodAffinityTerm { weight, term: t });
        }
        self
    }
    /// A required term (or weighted preferred term with `weight`).
    pub fn affinity(self, t: PodAffinityTerm, kind: Kind) -> Self {
        self.add_term(false, t, kind, 1)
    }
    pub fn anti_affinity(self, t: PodAffinityTerm, kind: Kind) -> Self {
        self.add_term(true, t, kind, 1)
    }
    pub fn affinity_w(self, t: PodAffinityTerm, weight: i32) -> Self {
        self.add_term(false, t, Preferred, weight)
    }
    pub fn anti_affinity_w(self, t: PodAffinityTerm, weight: i32) -> Self {
        self.add_term(true, t, Preferred, weight)
    }
    /// Sets empty pod affinity and anti-affinity (like
    /// `createPodWithAffinityTerms` with nil terms).
    pub fn empty_affinities(mut self) -> Self {
        self.0.pod_affinity.get_or_insert_with(PodAffinity::default);
        self.0
            .pod_anti_affinity
            .get_or_insert_with(PodAffinity::default);
        self
    }
    pub fn pod_affinity_in(self, key: &str, topo: &str, vals: &[&str], kind: Kind) -> Self {
        self.affinity(term(Some(sel().is(key, vals).obj()), topo).obj(), kind)
    }
    pub fn pod_affinity_not_in(self, key: &str, topo: &str, vals: &[&str], kind: Kind) -> Self {
        self.affinity(term(Some(sel().not_in(key, vals).obj()), topo).obj(), kind)
    }
    pub fn pod_affinity_exists(self, key: &str, topo: &str, kind: Kind) -> Self {
        self.affinity(term(Some(sel().exists(key).obj()), topo).obj(), kind)
    }
    pub fn pod_anti_affinity_in(self, key: &str, topo: &str, vals: &[&str], kind: Kind) -> Self {
        self.anti_affinity(term(Some(sel().is(key, vals).obj()), topo).obj(), kind)
    }
    pub fn pod_anti_affinity_not_in(
        self,
        key: &str,
        topo: &str,
        vals: &[&str],
        kind: Kind,
    ) -> Self {
        self.anti_affinity(term(Some(sel().not_in(key, vals).obj()), topo).obj(), kind)
    }
    pub fn pod_anti_affinity_exists(self, key: &str, topo: &str, kind: Kind) -> Self {
        self.anti_affinity(term(Some(sel().exists(key).obj()), topo).obj(), kind)
    }
    /// `SpreadConstraint(maxSkew, key, mode, selector, minDomains, nodeAffinityPolicy, nodeTaintsPolicy, matchLabelKeys)`;
    /// policies: `Some(true)` Honor, `Some(false)` Ignore.
    #[allow(clippy::too_many_arguments)]
    pub fn spread(
        mut self,
        max_skew: i32,
        key: &str,
        do_not_schedule: bool,
        selector: Option<LabelSelector>,
        min_domains: Option<i32>,
        affinity_policy: Option<bool>,
        taints_policy: Option<bool>,
        match_label_keys: &[&str],
    ) -> Self {
        self.0
            .topology_spread_constraints
            .push(TopologySpreadConstraint {
                max_skew,
                topology_key: key.into(),
                do_not_schedule,
                selector,
                min_domains,
                node_affinity_honor: affinity_policy.unwrap_or(true),
                node_taints_honor: taints_policy.unwrap_or(false),
                match_label_keys: match_label_keys.iter().map(|s| s.to_string()).collect(),
            });
        self
    }
    /// A plain constraint (no minDomains, default policies, no label keys).
    pub fn spread_simple(
        self,
        max_skew: i32,
        key: &str,
        do_not_schedule: bool,
        selector: Option<LabelSelector>,
    ) -> Self {
        self.spread(
            max_skew,
            key,
            do_not_schedule,
            selector,
            None,
            None,
            None,
            &[],
        )
    }
    pub fn obj(mut self) -> Pod {
        if self.0.uid.is_empty() {
            self.0.uid = format!("{}/{}", self.0.namespace, self.0.name);
        }
        rkube_model::requests::compute(&mut self.0);
        self.0
    }
}

pub const DO_NOT_SCHEDULE: bool = true;
pub const SCHEDULE_ANYWAY: bool = false;

/// A node builder.
pub struct NodeB(Node);

pub fn node(name: &str) -> NodeB {
    NodeB(Node {
        name: name.into(),
        allocatable: rkube_model::Resources {
            milli_cpu: 4000,
            memory: 16 << 30,
            allowed_pod_number: 110,
            ..Default::default()
        },
        ..Default::default()
    })
}

impl NodeB {
    pub fn labels(mut self, l: &[(&str, &str)]) -> Self {
        self.0.labels = labels(l);
        self
    }
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.0.labels.insert(k.into(), v.into());
        self
    }
    pub fn taint(mut self, key: &str, value: &str, effect: TaintEffect) -> Self {
        self.0.taints.push(Taint {
            key: key.into(),
            value: value.into(),
            effect,
        });
        self
    }
    pub fn obj(self) -> Node {
        self.0
    }
}

/// A snapshot with the pods placed on their nodes (pods whose node is not
/// in the list are dropped, as in upstream's `cache.NewSnapshot`), with
/// namespace labels.
pub fn snapshot(
    nodes: Vec<Node>,
    pods: Vec<Pod>,
    namespaces: &[(&str, &[(&str, &str)])],
) -> Snapshot {
    let mut snap = Snapshot::new(nodes.into_iter().map(Arc::new).collect());
    for (i, p) in pods.into_iter().enumerate() {
        let mut p = p;
        if p.uid.is_empty() || p.uid == format!("{}/{}", p.namespace, p.name) {
            p.uid = format!("pod-{i}");
        }
        if let Some(idx) = snap.index_of(&p.node_name) {
            snap.assume(idx, Arc::new(p));
        }
    }
    for (ns, l) in namespaces {
        snap.namespaces.insert(ns.to_string(), labels(l));
    }
    snap
}

/// Upstream's `namespaces` fixture of the InterPodAffinity tests.
pub const TEAM_NAMESPACES: &[(&str, &[(&str, &str)])] = &[
    ("subteam1.team1", &[("team", "team1")]),
    ("subteam2.team1", &[("team", "team1")]),
    ("subteam1.team2", &[("team", "team2")]),
    ("subteam2.team2", &[("team", "team2")]),
];

/// `(code, reasons)` of a status.
pub type St = (String, Vec<String>);

/// `(code, reasons)` of a status, `Success` for upstream's nil.
pub fn sc(s: &Status) -> St {
    (s.code.as_str().to_string(), s.reasons.clone())
}

pub fn ok() -> (String, Vec<String>) {
    ("Success".into(), vec![])
}
pub fn skip() -> (String, Vec<String>) {
    ("Skip".into(), vec![])
}
pub fn unsched(reason: &str) -> (String, Vec<String>) {
    ("Unschedulable".into(), vec![reason.into()])
}
pub fn unresolvable(reason: &str) -> (String, Vec<String>) {
    ("UnschedulableAndUnresolvable".into(), vec![reason.into()])
}

/// PreFilter then Filter on every node. Returns the PreFilter status and,
/// when it succeeded, every node's Filter status.
pub fn run_filter(pl: &dyn Plugin, snap: &Snapshot, pod: &Pod) -> (St, Vec<St>) {
    let mut state = CycleState::new();
    let (_, s) = pl
        .as_pre_filter()
        .unwrap()
        .pre_filter(&mut state, pod, snap);
    if !s.is_success() {
        return (sc(&s), vec![]);
    }
    let f = pl.as_filter().unwrap();
    let out = snap
        .nodes
        .iter()
        .map(|n| sc(&f.filter(&state, pod, n)))
        .collect();
    (sc(&s), out)
}

/// PreScore over `filtered` (indices into the snapshot; all when `None`),
/// then Score and NormalizeScore. Returns the PreScore status and the raw
/// and normalized scores.
pub fn run_score(
    pl: &dyn Plugin,
    snap: &Snapshot,
    pod: &Pod,
    filtered: Option<&[usize]>,
) -> (St, Vec<i64>, Vec<i64>) {
    let mut state = CycleState::new();
    let nodes: Vec<&NodeInfo> = match filtered {
        Some(idx) => idx.iter().map(|&i| &snap.nodes[i]).collect(),
        None => snap.nodes.iter().collect(),
    };
    let s = pl
        .as_pre_score()
        .unwrap()
        .pre_score(&mut state, pod, &nodes, snap);
    if !s.is_success() {
        return (sc(&s), vec![], vec![]);
    }
    let sp = pl.as_score().unwrap();
    let mut scores: Vec<NodeScore> = nodes
        .iter()
        .map(|n| NodeScore {
            name: n.name().into(),
            score: sp.score(&state, pod, n).expect("score"),
        })
        .collect();
    let raw = scores.iter().map(|s| s.score).collect();
    assert!(sp.normalize(&state, pod, &mut scores).is_success());
    (sc(&s), raw, scores.iter().map(|s| s.score).collect())
}

/// Collects failures so every case is reported.
#[derive(Default)]
pub struct Check(Vec<String>);

impl Check {
    pub fn eq<T: PartialEq + std::fmt::Debug>(&mut self, case: &str, what: &str, got: T, want: T) {
        if got != want {
            self.0
                .push(format!("{case}: {what}:\n   got {got:?}\n  want {want:?}"));
        }
    }
    pub fn finish(self) {
        if !self.0.is_empty() {
            panic!("{} failure(s):\n{}", self.0.len(), self.0.join("\n"));
        }
    }
}
