//! Running plugins: snapshots and node infos, statuses, drivers for the
//! extension points, the default framework, and a failure collector.

use std::fmt::Debug;
use std::sync::Arc;

use rkube_framework::{
    Code, CycleState, Explanation, Framework, NodeInfo, NodeScore, Plugin, PreFilterResult,
    Snapshot, Status,
};
use rkube_model::{Node, Pod};

use super::selectors::labels;

/// A node info with these pods on it (upstream's `framework.NewNodeInfo(pods...)`
/// followed by `SetNode`).
pub fn node_info(node: Node, pods: Vec<Pod>) -> NodeInfo {
    let mut ni = NodeInfo::new(Arc::new(node));
    for p in pods {
        ni.add_pod(Arc::new(p));
    }
    ni
}

/// A snapshot of nodes with the pods whose `nodeName` names one of them;
/// the others are dropped (upstream's `cache.NewSnapshot(pods, nodes)`).
pub fn snapshot(nodes: Vec<Node>, pods: Vec<Pod>) -> Snapshot {
    let mut snap = Snapshot::new(nodes.into_iter().map(Arc::new).collect());
    for p in pods {
        if let Some(i) = snap.index_of(&p.node_name) {
            snap.assume(i, Arc::new(p));
        }
    }
    snap
}

/// [`snapshot`] with these namespaces and their labels (for namespace
/// selectors).
pub fn snapshot_ns(
    nodes: Vec<Node>,
    pods: Vec<Pod>,
    namespaces: &[(&str, &[(&str, &str)])],
) -> Snapshot {
    let mut snap = snapshot(nodes, pods);
    for (ns, l) in namespaces {
        snap.namespaces.insert(ns.to_string(), labels(l));
    }
    snap
}

/// The default profile of the default configuration, with the in-tree
/// plugins.
pub fn default_framework() -> Framework {
    let cfg = rkube_config::default_config();
    Framework::new(&cfg.profiles[0], 0, &rkube_plugins::in_tree()).expect("default profile")
}

/// `(code, reasons)` of `plugin`'s Filter verdict on node `i` of an
/// explanation.
pub fn filter_verdict(e: &Explanation, i: usize, plugin: &str) -> (&'static str, Vec<String>) {
    e.nodes[i]
        .filters
        .iter()
        .find(|f| f.plugin == plugin)
        .map(|f| (f.code.as_str(), f.reasons.clone()))
        .unwrap_or_else(|| panic!("{plugin} did not filter node {i}"))
}

/// A status as upstream's `fwk.NewStatus(code, reasons...)`.
pub fn status(code: Code, reasons: &[&str]) -> Status {
    Status::with_reasons(code, reasons.iter().map(|s| s.to_string()).collect())
}

/// Success (upstream's nil status).
pub fn success() -> Status {
    Status::success()
}

/// `(code, reasons)` of a status: what the InterPodAffinity and
/// PodTopologySpread tests compare.
pub type St = (String, Vec<String>);

/// `(code, reasons)` of a status, `Success` for upstream's nil.
pub fn sc(s: &Status) -> St {
    (s.code.as_str().to_string(), s.reason_strings())
}

/// `(code, reasons)` of success.
pub fn ok() -> St {
    sc(&success())
}
/// `(code, reasons)` of Skip.
pub fn skip() -> St {
    sc(&status(Code::Skip, &[]))
}
/// `(code, reasons)` of Unschedulable with one reason.
pub fn unsched(reason: &str) -> St {
    sc(&status(Code::Unschedulable, &[reason]))
}
/// `(code, reasons)` of UnschedulableAndUnresolvable with one reason.
pub fn unresolvable(reason: &str) -> St {
    sc(&status(Code::UnschedulableAndUnresolvable, &[reason]))
}

/// Runs a plugin's PreFilter.
pub fn pre_filter(
    p: &dyn Plugin,
    state: &mut CycleState,
    pod: &Pod,
    snap: &Snapshot,
) -> (PreFilterResult, Status) {
    p.as_pre_filter()
        .expect("plugin has PreFilter")
        .pre_filter(state, pod, snap)
}

/// Runs a plugin's Filter.
pub fn filter(p: &dyn Plugin, state: &CycleState, pod: &Pod, ni: &NodeInfo) -> Status {
    p.as_filter()
        .expect("plugin has Filter")
        .filter(state, pod, ni)
}

/// PreFilter then Filter on every node. Returns the PreFilter status and,
/// when it succeeded, every node's Filter status.
pub fn run_filter(p: &dyn Plugin, snap: &Snapshot, pod: &Pod) -> (St, Vec<St>) {
    let mut state = CycleState::new();
    let (_, s) = pre_filter(p, &mut state, pod, snap);
    if !s.is_success() {
        return (sc(&s), vec![]);
    }
    let out = snap
        .nodes
        .iter()
        .map(|n| sc(&filter(p, &state, pod, n)))
        .collect();
    (sc(&s), out)
}

/// What a score run produced.
#[derive(Debug)]
pub struct ScoreRun {
    /// PreScore's status (Success when PreScore was not run).
    pub pre_score: Status,
    /// Per node: `Ok(raw)` or the Score status.
    pub raw: Vec<Result<i64, Status>>,
    /// Per node after NormalizeScore (raw when the plugin has none; 0 for errors).
    pub normalized: Vec<i64>,
}

impl ScoreRun {
    /// Raw scores, with errors as 0 (upstream's score on error).
    pub fn raw_scores(&self) -> Vec<i64> {
        self.raw.iter().map(|r| *r.as_ref().unwrap_or(&0)).collect()
    }
    /// Codes of the Score calls.
    pub fn codes(&self) -> Vec<Code> {
        self.raw
            .iter()
            .map(|r| match r {
                Ok(_) => Code::Success,
                Err(s) => s.code,
            })
            .collect()
    }
}

/// Over the `filtered` nodes (indices into the snapshot; all when `None`),
/// in that order: PreScore when `run_pre_score`, then Score on each node,
/// then NormalizeScore when the plugin has it. Score is not run when
/// PreScore does not succeed.
pub fn score(
    p: &dyn Plugin,
    pod: &Pod,
    snap: &Snapshot,
    filtered: Option<&[usize]>,
    run_pre_score: bool,
) -> ScoreRun {
    let nodes: Vec<&NodeInfo> = match filtered {
        Some(idx) => idx.iter().map(|&i| &snap.nodes[i]).collect(),
        None => snap.nodes.iter().collect(),
    };
    let mut state = CycleState::new();
    let pre_score = if run_pre_score {
        p.as_pre_score()
            .expect("plugin has PreScore")
            .pre_score(&mut state, pod, &nodes, snap)
    } else {
        Status::success()
    };
    if !pre_score.is_success() {
        return ScoreRun {
            pre_score,
            raw: Vec::new(),
            normalized: Vec::new(),
        };
    }
    let sp = p.as_score().expect("plugin has Score");
    // The framework scores through `score_at` (a plugin may answer from
    // what its PreScore kept by position); it must agree with `score`.
    let raw: Vec<Result<i64, Status>> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let at = sp.score_at(&state, pod, n, i);
            let direct = sp.score(&state, pod, n);
            assert_eq!(
                at.as_ref().ok(),
                direct.as_ref().ok(),
                "{}: score_at and score differ on node {}",
                p.name(),
                n.name()
            );
            at
        })
        .collect();
    let mut list: Vec<NodeScore> = nodes
        .iter()
        .zip(&raw)
        .map(|(n, r)| NodeScore {
            name: n.name().into(),
            score: *r.as_ref().unwrap_or(&0),
        })
        .collect();
    if sp.has_normalize() {
        let s = sp.normalize(&state, pod, &mut list);
        assert!(s.is_success(), "normalize failed: {s}");
    }
    ScoreRun {
        pre_score,
        raw,
        normalized: list.into_iter().map(|s| s.score).collect(),
    }
}

/// [`score`] with PreScore, as `(PreScore's (code, reasons), raw scores,
/// normalized scores)`; panics when Score fails on a node.
pub fn run_score(
    p: &dyn Plugin,
    snap: &Snapshot,
    pod: &Pod,
    filtered: Option<&[usize]>,
) -> (St, Vec<i64>, Vec<i64>) {
    let run = score(p, pod, snap, filtered, true);
    let raw = run.raw.into_iter().map(|r| r.expect("score")).collect();
    (sc(&run.pre_score), raw, run.normalized)
}

/// Collects mismatches per case and reports them all at the end.
#[derive(Default)]
pub struct Failures(Vec<String>);

impl Failures {
    /// New collector.
    pub fn new() -> Self {
        Self::default()
    }
    /// Records a mismatch of `what` in `case` unless `got == want`.
    pub fn check<T: PartialEq + Debug>(&mut self, case: &str, what: &str, got: T, want: T) {
        if got != want {
            self.0.push(format!(
                "[{case}] {what}:\n    got:  {got:?}\n    want: {want:?}"
            ));
        }
    }
    /// Records a free-form failure.
    pub fn fail(&mut self, case: &str, msg: impl Into<String>) {
        self.0.push(format!("[{case}] {}", msg.into()));
    }
    /// Panics listing every mismatch.
    pub fn finish(self) {
        if !self.0.is_empty() {
            panic!("{} mismatch(es):\n{}", self.0.len(), self.0.join("\n"));
        }
    }
}

/// Runs `pods` through a plugin `kept` across cycles and a `fresh` one per
/// cycle on a changing snapshot, checking that PreFilter/Filter and
/// PreScore/Score agree. Each pod is assumed on the first node it fits, as
/// a cycle would, and every fifth cycle takes back an earlier pod. Returns
/// how many pods stay placed.
pub fn kept_agrees_with_fresh<P: Plugin>(
    kept: &P,
    fresh: impl Fn() -> P,
    snap: &mut Snapshot,
    pods: impl Iterator<Item = Pod>,
) -> usize {
    let mut placed: Vec<(usize, String)> = Vec::new();
    let mut f = Failures::new();
    for (i, p) in pods.enumerate() {
        let want = run_filter(&fresh(), snap, &p);
        let got = run_filter(kept, snap, &p);
        f.check(&p.name, "Filter", got.clone(), want);
        let want = run_score(&fresh(), snap, &p, None);
        f.check(&p.name, "Score", run_score(kept, snap, &p, None), want);
        if let Some(n) = got.1.iter().position(|s| s.0 == "Success") {
            let mut p = p;
            p.node_name = snap.nodes[n].name().to_string();
            placed.push((n, p.uid.clone()));
            snap.assume(n, Arc::new(p));
        }
        if i % 5 == 4 && !placed.is_empty() {
            let (n, uid) = placed.remove(i % placed.len());
            assert!(snap.remove(n, &uid).is_some());
        }
    }
    f.finish();
    placed.len()
}
