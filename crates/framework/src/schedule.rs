//! The scheduling algorithm (upstream's `schedulePod`): PreFilter, Filter over
//! a rotating window of nodes sized by `percentageOfNodesToScore`, PreScore,
//! Score, NormalizeScore, weighted sum, and host selection with a seeded
//! tie-break. Also the "explain" evaluation, which runs every filter and score
//! plugin on every node and keeps each verdict.

use std::collections::BTreeSet;
use std::sync::Arc;

use rayon::prelude::*;
use rkube_model::Pod;

use crate::cycle_state::CycleState;
use crate::diagnosis::{fit_error_message, go_list, Diagnosis};
use crate::metrics;
use crate::node_info::NodeInfo;
use crate::nominator::Nominator;
use crate::plugin::{
    FilterPlugin, NodeScore, PostFilterHandle, PreFilterResult, ScorePlugin, MAX_NODE_SCORE,
};
use crate::runtime::{Framework, Point};
use crate::snapshot::Snapshot;
use crate::status::{Code, Status};

const MIN_FEASIBLE_NODES_TO_FIND: usize = 100;
const MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND: i64 = 5;
/// Below this many nodes, filtering runs on one thread (the overhead is not worth it).
const PARALLEL_THRESHOLD: usize = 64;

/// Upstream's `numFeasibleNodesToFind`.
pub fn num_feasible_nodes_to_find(percentage: i32, num_all_nodes: usize) -> usize {
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND {
        return num_all_nodes;
    }
    let mut pct = percentage as i64;
    if pct == 0 {
        pct = 50 - num_all_nodes as i64 / 125;
        if pct < MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND {
            pct = MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND;
        }
    }
    let n = (num_all_nodes as i64 * pct / 100) as usize;
    n.max(MIN_FEASIBLE_NODES_TO_FIND)
}

/// One plugin's score for one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginScore {
    /// Plugin name.
    pub plugin: &'static str,
    /// Score() result.
    pub raw: i64,
    /// After NormalizeScore.
    pub normalized: i64,
    /// Profile weight.
    pub weight: i64,
    /// normalized × weight.
    pub weighted: i64,
}

/// A node's scores.
#[derive(Debug, Clone)]
pub struct NodeScores {
    /// Index in the snapshot.
    pub node: usize,
    /// Per-plugin scores in profile order (skipped plugins absent).
    pub scores: Vec<PluginScore>,
    /// Sum of weighted scores.
    pub total: i64,
}

/// Result of one scheduling attempt.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// The pod fits; `node` is the chosen node's index.
    Scheduled {
        /// Chosen node.
        node: usize,
        /// Nodes evaluated by filters.
        evaluated: usize,
        /// Feasible nodes found.
        feasible: usize,
    },
    /// No node fits.
    Unschedulable {
        /// Why, per node.
        diagnosis: Diagnosis,
        /// Upstream's FailedScheduling message.
        message: String,
        /// The pod's nomination after this cycle: `None` leaves it as it
        /// was, `Some("")` clears it, `Some(node)` nominates `node`
        /// (preemption chose it; `victims` are to be evicted from it).
        nominated_node: Option<String>,
        /// Pods PostFilter (preemption) chose to evict.
        victims: Vec<Arc<Pod>>,
    },
    /// An internal error from a plugin.
    Error(Status),
}

/// Mutable scheduler state carried between cycles.
#[derive(Debug, Clone)]
pub struct Scheduler {
    /// Where the next filter pass starts (upstream's `nextStartNodeIndex`).
    pub next_start_node_index: usize,
    /// Global percentage of nodes to score.
    pub percentage_of_nodes_to_score: i32,
    /// Seed for the tie-break.
    pub seed: u64,
    /// Number of cycles run (mixed into the tie-break).
    pub cycle: u64,
}

impl Scheduler {
    /// A scheduler with a tie-break seed.
    pub fn new(seed: u64, percentage_of_nodes_to_score: i32) -> Self {
        Scheduler {
            next_start_node_index: 0,
            percentage_of_nodes_to_score,
            seed,
            cycle: 0,
        }
    }
}

/// The nodes a filter pass walks: every snapshot node, or PreFilter's
/// restriction (snapshot indices).
#[derive(Clone, Copy)]
enum NodeList<'a> {
    All(usize),
    Some(&'a [usize]),
}

impl NodeList<'_> {
    fn len(&self) -> usize {
        match self {
            NodeList::All(n) => *n,
            NodeList::Some(v) => v.len(),
        }
    }

    fn get(&self, i: usize) -> usize {
        match self {
            NodeList::All(_) => i,
            NodeList::Some(v) => v[i],
        }
    }
}

/// SplitMix64: a small, well-mixed, seedable generator for tie-breaks.
fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Runs PreFilter plugins; returns the merged node restriction and the
/// plugins that restricted nodes, or the rejecting status.
pub fn run_pre_filter(
    fw: &Framework,
    state: &mut CycleState,
    pod: &Pod,
    snapshot: &Snapshot,
) -> Result<(PreFilterResult, BTreeSet<&'static str>), Status> {
    let t0 = metrics::start(&fw.recorder);
    let out = pre_filter_plugins(fw, state, pod, snapshot);
    if fw.recorder.is_some() {
        let status = match &out {
            Ok(_) => Status::success(),
            Err(s) => s.clone(),
        };
        metrics::point_done(&fw.recorder, t0, &fw.profile_name, "PreFilter", &status);
    }
    out
}

fn pre_filter_plugins(
    fw: &Framework,
    state: &mut CycleState,
    pod: &Pod,
    snapshot: &Snapshot,
) -> Result<(PreFilterResult, BTreeSet<&'static str>), Status> {
    let mut result: PreFilterResult = None;
    let mut with_nodes = BTreeSet::new();
    let mut unschedulable: Option<Status> = None;
    let sampled = state.record_plugin_metrics;
    for p in fw.plugins(Point::PreFilter) {
        let pf = p.as_pre_filter().expect("framework checked");
        let (r, s) = metrics::time_plugin(
            &fw.recorder,
            sampled,
            p.name(),
            "PreFilter",
            |(_, s): &(PreFilterResult, Status)| s.clone(),
            || pf.pre_filter(state, pod, snapshot),
        );
        if s.code == Code::Skip {
            state.skip_filter.insert(p.name());
            continue;
        }
        if !s.is_success() {
            let s = s.with_plugin(p.name());
            match s.code {
                Code::UnschedulableAndUnresolvable => return Err(s),
                Code::Unschedulable => {
                    unschedulable = Some(s);
                    continue;
                }
                _ => {
                    return Err(Status::error(format!(
                        "running PreFilter plugin {:?}: {}",
                        p.name(),
                        s.message()
                    ))
                    .with_plugin(p.name()))
                }
            }
        }
        if let Some(names) = r {
            with_nodes.insert(p.name());
            result = Some(match result {
                None => names,
                Some(prev) => prev.intersection(&names).cloned().collect(),
            });
            if result.as_ref().is_some_and(|r| r.is_empty()) {
                let msg = if with_nodes.len() == 1 {
                    format!(
                        "node(s) didn't satisfy plugin {}",
                        with_nodes.iter().next().expect("one")
                    )
                } else {
                    format!(
                        "node(s) didn't satisfy plugin(s) {} simultaneously",
                        go_list(&with_nodes)
                    )
                };
                return Err(
                    Status::new(Code::UnschedulableAndUnresolvable, msg).with_plugin(p.name())
                );
            }
        }
    }
    match unschedulable {
        Some(s) => Err(s),
        None => Ok((result, with_nodes)),
    }
}

/// Runs Filter plugins on one node, stopping at the first rejection (upstream's `RunFilterPlugins`).
pub fn run_filters(fw: &Framework, state: &CycleState, pod: &Pod, node: &NodeInfo) -> Status {
    run_filter_list(fw, active_filters(fw, state), state, pod, node)
}

/// A Filter plugin that runs in this cycle, with its name.
type ActiveFilter<'a> = (&'static str, &'a dyn FilterPlugin);

/// The Filter plugins whose PreFilter did not skip, in profile order.
fn active_filters<'a>(
    fw: &'a Framework,
    state: &'a CycleState,
) -> impl Iterator<Item = ActiveFilter<'a>> + Clone + 'a {
    fw.plugins(Point::Filter).iter().filter_map(move |p| {
        let name = p.name();
        if state.skip_filter.contains(name) {
            return None;
        }
        Some((name, p.as_filter().expect("framework checked")))
    })
}

/// [`run_filters`] over a list of plugins resolved once per cycle (the
/// skip set is not consulted per node).
fn run_filter_list<'a>(
    fw: &Framework,
    filters: impl IntoIterator<Item = ActiveFilter<'a>>,
    state: &CycleState,
    pod: &Pod,
    node: &NodeInfo,
) -> Status {
    for (name, f) in filters {
        let s = metrics::time_plugin(
            &fw.recorder,
            state.record_plugin_metrics,
            name,
            "Filter",
            Status::clone,
            || f.filter(state, pod, node),
        );
        if !s.is_success() {
            if !s.is_rejected() {
                return Status::error(format!("running {name:?} filter plugin: {}", s.message()))
                    .with_plugin(name);
            }
            return s.with_plugin(name);
        }
    }
    Status::success()
}

/// Which PreFilter extension to run.
#[derive(Clone, Copy)]
enum Extension {
    AddPod,
    RemovePod,
}

/// Runs one PreFilter extension of every plugin whose PreFilter did not skip.
fn run_pre_filter_extension(
    fw: &Framework,
    state: &mut CycleState,
    pod: &Pod,
    other: &Pod,
    node: &NodeInfo,
    ext: Extension,
) -> Status {
    for p in fw.plugins(Point::PreFilter) {
        if state.skip_filter.contains(p.name()) {
            continue;
        }
        let pf = p.as_pre_filter().expect("framework checked");
        let (s, what) = match ext {
            Extension::AddPod => (pf.add_pod(state, pod, other, node), "AddPod"),
            Extension::RemovePod => (pf.remove_pod(state, pod, other, node), "RemovePod"),
        };
        if !s.is_success() {
            return Status::error(format!(
                "running {what} on PreFilter plugin {:?}: {}",
                p.name(),
                s.message()
            ));
        }
    }
    Status::success()
}

/// Upstream's `RunPreFilterExtensionAddPod`: every PreFilter plugin's
/// `add_pod`; plugins whose PreFilter skipped are left out.
pub fn run_pre_filter_extension_add_pod(
    fw: &Framework,
    state: &mut CycleState,
    pod: &Pod,
    added: &Pod,
    node: &NodeInfo,
) -> Status {
    run_pre_filter_extension(fw, state, pod, added, node, Extension::AddPod)
}

/// Upstream's `RunPreFilterExtensionRemovePod`.
pub fn run_pre_filter_extension_remove_pod(
    fw: &Framework,
    state: &mut CycleState,
    pod: &Pod,
    removed: &Pod,
    node: &NodeInfo,
) -> Status {
    run_pre_filter_extension(fw, state, pod, removed, node, Extension::RemovePod)
}

/// Upstream's `addGENominatedPods`: a copy of the state and node with the
/// nominated pods of equal or higher priority (other than `pod`) added, or
/// `None` when there is none.
fn add_ge_nominated_pods(
    fw: &Framework,
    state: &CycleState,
    pod: &Pod,
    node: &NodeInfo,
    nominated: &[Arc<Pod>],
) -> Result<Option<(CycleState, NodeInfo)>, Status> {
    if nominated.is_empty() {
        return Ok(None);
    }
    let mut out: Option<(CycleState, NodeInfo)> = None;
    for np in nominated {
        if np.priority >= pod.priority && np.uid != pod.uid {
            let (st, ni) = out.get_or_insert_with(|| (state.clone(), node.clone()));
            ni.add_pod(np.clone());
            let s = run_pre_filter_extension_add_pod(fw, st, pod, np, ni);
            if !s.is_success() {
                return Err(s);
            }
        }
    }
    Ok(out)
}

/// Upstream's `RunFilterPluginsWithNominatedPods`: when the node has
/// nominated pods of equal or higher priority, the filters run once with
/// them added and, if that passes, once more without them; the pod must
/// fit both ways.
pub fn run_filters_with_nominated_pods(
    fw: &Framework,
    state: &CycleState,
    pod: &Pod,
    node: &NodeInfo,
    nominated: &[Arc<Pod>],
) -> Status {
    let filters: Vec<ActiveFilter<'_>> = active_filters(fw, state).collect();
    filters_with_nominated_pods(fw, &filters, state, pod, node, nominated)
}

/// [`run_filters_with_nominated_pods`] with the cycle's active filters
/// resolved by the caller. A clone of the state made for nominated pods has
/// the same skip set, so the same list serves both runs.
fn filters_with_nominated_pods(
    fw: &Framework,
    filters: &[ActiveFilter<'_>],
    state: &CycleState,
    pod: &Pod,
    node: &NodeInfo,
    nominated: &[Arc<Pod>],
) -> Status {
    let added = match add_ge_nominated_pods(fw, state, pod, node, nominated) {
        Ok(a) => a,
        Err(s) => return s,
    };
    let status = match &added {
        Some((st, ni)) => run_filter_list(fw, filters.iter().copied(), st, pod, ni),
        None => run_filter_list(fw, filters.iter().copied(), state, pod, node),
    };
    if added.is_none() || !status.is_success() {
        return status;
    }
    run_filter_list(fw, filters.iter().copied(), state, pod, node)
}

/// The framework as a PostFilter plugin sees it: one profile, the cycle's
/// snapshot and the nominated pods.
pub struct FrameworkHandle<'a> {
    /// The profile.
    pub fw: &'a Framework,
    /// The cycle's snapshot.
    pub snapshot: &'a Snapshot,
    /// Nominated pods.
    pub nominator: &'a Nominator,
    /// Seed of [`PostFilterHandle::random_below`].
    pub seed: u64,
}

impl PostFilterHandle for FrameworkHandle<'_> {
    fn snapshot(&self) -> &Snapshot {
        self.snapshot
    }
    fn nominated_pods_for_node(&self, node: &str) -> Vec<Arc<Pod>> {
        self.nominator.pods_for_node(node).to_vec()
    }
    fn run_pre_filter_extension_add_pod(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        added: &Pod,
        node: &NodeInfo,
    ) -> Status {
        run_pre_filter_extension_add_pod(self.fw, state, pod, added, node)
    }
    fn run_pre_filter_extension_remove_pod(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        removed: &Pod,
        node: &NodeInfo,
    ) -> Status {
        run_pre_filter_extension_remove_pod(self.fw, state, pod, removed, node)
    }
    fn run_filter_plugins_with_nominated_pods(
        &self,
        state: &CycleState,
        pod: &Pod,
        node: &NodeInfo,
    ) -> Status {
        run_filters_with_nominated_pods(
            self.fw,
            state,
            pod,
            node,
            self.nominator.pods_for_node(node.name()),
        )
    }
    fn random_below(&self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        (splitmix(self.seed) % n as u64) as usize
    }
}

/// Runs PreScore, Score and NormalizeScore over `feasible` nodes.
pub fn run_score(
    fw: &Framework,
    state: &mut CycleState,
    pod: &Pod,
    snapshot: &Snapshot,
    feasible: &[usize],
) -> Result<Vec<NodeScores>, Status> {
    let table = pre_score_and_score(fw, state, pod, snapshot, feasible, true)?;
    Ok(table.into_node_scores(feasible))
}

/// PreScore, then Score and NormalizeScore; `detail` keeps every plugin's
/// raw and normalized score (for [`run_score`]), otherwise only totals.
fn pre_score_and_score(
    fw: &Framework,
    state: &mut CycleState,
    pod: &Pod,
    snapshot: &Snapshot,
    feasible: &[usize],
    detail: bool,
) -> Result<ScoreTable, Status> {
    let infos: Vec<&NodeInfo> = feasible.iter().map(|&i| &snapshot.nodes[i]).collect();
    let t0 = metrics::start(&fw.recorder);
    let sampled = state.record_plugin_metrics;
    for p in fw.plugins(Point::PreScore) {
        let ps = p.as_pre_score().expect("framework checked");
        let s = metrics::time_plugin(
            &fw.recorder,
            sampled,
            p.name(),
            "PreScore",
            Status::clone,
            || ps.pre_score(state, pod, &infos, snapshot),
        );
        if s.code == Code::Skip {
            state.skip_score.insert(p.name());
            continue;
        }
        if !s.is_success() {
            let err = Status::error(format!(
                "running PreScore plugin {:?}: {}",
                p.name(),
                s.message()
            ));
            metrics::point_done(&fw.recorder, t0, &fw.profile_name, "PreScore", &err);
            return Err(err);
        }
    }
    metrics::point_done(
        &fw.recorder,
        t0,
        &fw.profile_name,
        "PreScore",
        &Status::success(),
    );
    let t0 = metrics::start(&fw.recorder);
    let out = score_plugins(fw, state, pod, &infos, detail);
    if fw.recorder.is_some() {
        let status = match &out {
            Ok(_) => Status::success(),
            Err(s) => s.clone(),
        };
        metrics::point_done(&fw.recorder, t0, &fw.profile_name, "Score", &status);
    }
    out
}

/// A Score plugin that runs in this cycle.
struct ActiveScore<'a> {
    name: &'static str,
    plugin: &'a dyn ScorePlugin,
    weight: i64,
}

/// Nodes scored per parallel task (each task runs every Score plugin on
/// its nodes).
const SCORE_CHUNK: usize = 16;

/// A plugin's Score error on one node: (plugin position, node position, status).
type ScoreError = (usize, usize, Status);

/// Scores of the feasible nodes: per node, the weighted total and, when
/// kept, every plugin's raw and normalized score (node-major, one row of
/// `plugins.len()` per node).
struct ScoreTable {
    plugins: Vec<(&'static str, i64)>,
    raw: Vec<i64>,
    normalized: Vec<i64>,
    totals: Vec<i64>,
}

impl ScoreTable {
    /// Per-node scores with plugin names, as `explain` shows them.
    fn into_node_scores(self, feasible: &[usize]) -> Vec<NodeScores> {
        let p = self.plugins.len();
        feasible
            .iter()
            .enumerate()
            .map(|(i, &node)| NodeScores {
                node,
                scores: self
                    .plugins
                    .iter()
                    .enumerate()
                    .map(|(k, &(plugin, weight))| {
                        let normalized = self.normalized[i * p + k];
                        PluginScore {
                            plugin,
                            raw: self.raw[i * p + k],
                            normalized,
                            weight,
                            weighted: normalized * weight,
                        }
                    })
                    .collect(),
                total: self.totals[i],
            })
            .collect()
    }
}

/// Every active plugin's raw score of every node, node-major, with the
/// errors in (node, plugin) order. One pass per chunk of nodes runs all
/// plugins; in cycles sampled for plugin metrics each plugin runs on its
/// own, so that it can be timed.
fn raw_scores(
    fw: &Framework,
    state: &CycleState,
    pod: &Pod,
    infos: &[&NodeInfo],
    plugins: &[ActiveScore<'_>],
) -> (Vec<i64>, Vec<ScoreError>) {
    let (n, p) = (infos.len(), plugins.len());
    let mut raw = vec![0i64; n * p];
    let mut errors: Vec<ScoreError> = Vec::new();
    if p == 0 {
        return (raw, errors);
    }
    if fw.recorder.is_some() && state.record_plugin_metrics {
        for (k, a) in plugins.iter().enumerate() {
            let column: Vec<Result<i64, Status>> = metrics::time_plugin(
                &fw.recorder,
                true,
                a.name,
                "Score",
                |r: &Vec<Result<i64, Status>>| match r.iter().find_map(|x| x.as_ref().err()) {
                    Some(s) => s.clone(),
                    None => Status::success(),
                },
                || {
                    if n >= PARALLEL_THRESHOLD {
                        infos
                            .par_iter()
                            .map(|nd| a.plugin.score(state, pod, nd))
                            .collect()
                    } else {
                        infos
                            .iter()
                            .map(|nd| a.plugin.score(state, pod, nd))
                            .collect()
                    }
                },
            );
            for (i, r) in column.into_iter().enumerate() {
                match r {
                    Ok(v) => raw[i * p + k] = v,
                    Err(s) => errors.push((k, i, s)),
                }
            }
        }
        return (raw, errors);
    }
    let score_rows = |first: usize, rows: &mut [i64]| -> Vec<ScoreError> {
        let mut errs = Vec::new();
        for (j, row) in rows.chunks_exact_mut(p).enumerate() {
            let node = infos[first + j];
            for (k, a) in plugins.iter().enumerate() {
                match a.plugin.score(state, pod, node) {
                    Ok(v) => row[k] = v,
                    Err(s) => errs.push((k, first + j, s)),
                }
            }
        }
        errs
    };
    if n >= PARALLEL_THRESHOLD {
        errors = raw
            .par_chunks_mut(p * SCORE_CHUNK)
            .enumerate()
            .flat_map_iter(|(c, rows)| score_rows(c * SCORE_CHUNK, rows))
            .collect();
    } else {
        errors = score_rows(0, &mut raw);
    }
    (raw, errors)
}

/// Score and NormalizeScore of every Score plugin over `infos`: the
/// plugins' scores first, then, plugin by plugin in profile order, its
/// errors, NormalizeScore, the range check and the weighted sum (so the
/// error reported is the one upstream's plugin-by-plugin run reports).
fn score_plugins(
    fw: &Framework,
    state: &CycleState,
    pod: &Pod,
    infos: &[&NodeInfo],
    detail: bool,
) -> Result<ScoreTable, Status> {
    let plugins: Vec<ActiveScore<'_>> = fw
        .plugins(Point::Score)
        .iter()
        .filter(|p| !state.skip_score.contains(p.name()))
        .map(|p| ActiveScore {
            name: p.name(),
            plugin: p.as_score().expect("framework checked"),
            weight: fw.weight(p.name()),
        })
        .collect();
    let (n, p) = (infos.len(), plugins.len());
    let (raw, errors) = raw_scores(fw, state, pod, infos, &plugins);
    let mut totals = vec![0i64; n];
    let mut normalized = if detail {
        vec![0i64; n * p]
    } else {
        Vec::new()
    };
    // Built once, reused by every plugin that normalizes.
    let mut column: Option<Vec<NodeScore>> = None;
    for (k, a) in plugins.iter().enumerate() {
        if let Some((_, _, s)) = errors.iter().filter(|e| e.0 == k).min_by_key(|e| e.1) {
            return Err(Status::error(format!(
                "plugin {:?} failed with: {}",
                a.name,
                s.message()
            )));
        }
        let normalized_column = if a.plugin.has_normalize() {
            let col = column.get_or_insert_with(|| {
                infos
                    .iter()
                    .map(|i| NodeScore {
                        name: i.name_shared(),
                        score: 0,
                    })
                    .collect()
            });
            for (i, ns) in col.iter_mut().enumerate() {
                ns.score = raw[i * p + k];
            }
            let s = a.plugin.normalize(state, pod, col);
            if !s.is_success() {
                return Err(Status::error(format!(
                    "running Normalize on Score plugins: plugin {:?} failed with: {}",
                    a.name,
                    s.message()
                )));
            }
            Some(col.as_slice())
        } else {
            None
        };
        for i in 0..n {
            let score = match normalized_column {
                Some(col) => col[i].score,
                None => raw[i * p + k],
            };
            if !(0..=MAX_NODE_SCORE).contains(&score) {
                return Err(Status::error(format!(
                    "plugin {:?} returns an invalid score {}, it should in the range of [0, {}] after normalizing",
                    a.name,
                    score,
                    MAX_NODE_SCORE
                )));
            }
            totals[i] += score * a.weight;
            if detail {
                normalized[i * p + k] = score;
            }
        }
    }
    Ok(ScoreTable {
        plugins: plugins.iter().map(|a| (a.name, a.weight)).collect(),
        raw: if detail { raw } else { Vec::new() },
        normalized,
        totals,
    })
}

impl Scheduler {
    /// Tie-break key of a node in the current cycle.
    fn randomizer(&self, node: usize) -> u64 {
        splitmix(self.seed ^ splitmix(self.cycle.wrapping_mul(0x1000_0001) ^ node as u64))
    }

    /// Picks the highest total; ties go to the highest seeded random key.
    pub fn select_host(&self, scores: &[NodeScores]) -> Option<usize> {
        self.select_best(scores.iter().map(|s| (s.node, s.total)))
    }

    /// [`Self::select_host`] over `(node, total)` pairs.
    fn select_best(&self, scores: impl Iterator<Item = (usize, i64)>) -> Option<usize> {
        scores
            .max_by_key(|&(node, total)| (total, self.randomizer(node)))
            .map(|(node, _)| node)
    }

    /// Schedules one pod against the snapshot (does not modify it), with no
    /// nominated pods.
    pub fn schedule(&mut self, fw: &Framework, snapshot: &Snapshot, pod: &Pod) -> Outcome {
        self.schedule_with(fw, snapshot, pod, &Nominator::new())
    }

    /// Schedules one pod against the snapshot (does not modify it). Pods in
    /// `nominator` count on their nominated nodes for pods of lower or equal
    /// priority; a pod with `nominated_node_name` tries that node first.
    pub fn schedule_with(
        &mut self,
        fw: &Framework,
        snapshot: &Snapshot,
        pod: &Pod,
        nominator: &Nominator,
    ) -> Outcome {
        self.cycle += 1;
        let num_all = snapshot.len();
        let mut diagnosis = Diagnosis::default();
        if num_all == 0 {
            return Outcome::Unschedulable {
                message: "no nodes available to schedule pods".to_string(),
                diagnosis,
                nominated_node: Some(String::new()),
                victims: Vec::new(),
            };
        }
        let mut state = CycleState::new();
        // Upstream times every plugin call in a random 10% of cycles.
        state.record_plugin_metrics =
            fw.recorder.is_some() && splitmix(self.cycle ^ self.seed) % 100 < 10;
        let (restrict, with_nodes) = match run_pre_filter(fw, &mut state, pod, snapshot) {
            Ok(r) => r,
            Err(s) if s.is_rejected() => {
                diagnosis.pre_filter_msg = s.message();
                diagnosis.add_plugin_status(&s);
                diagnosis.node_to_status.absent = s;
                return self.post_filter(fw, &state, pod, snapshot, diagnosis, nominator);
            }
            Err(s) => return Outcome::Error(s),
        };
        let pct = fw
            .percentage_of_nodes_to_score
            .unwrap_or(self.percentage_of_nodes_to_score);
        let has_scoring = !fw.plugins(Point::Score).is_empty();
        // A node nominated in an earlier cycle (preemption) is tried first.
        if !pod.nominated_node_name.is_empty() {
            if let Some(idx) = snapshot.index_of(&pod.nominated_node_name) {
                let to_find = if has_scoring {
                    num_feasible_nodes_to_find(pct, 1)
                } else {
                    1
                };
                // Errors are logged upstream and the full pass goes on.
                if let Ok((feasible, _)) = self.find_feasible(
                    fw,
                    &state,
                    pod,
                    snapshot,
                    NodeList::Some(&[idx]),
                    to_find,
                    &mut diagnosis,
                    nominator,
                ) {
                    if let Some(&node) = feasible.first() {
                        return Outcome::Scheduled {
                            node,
                            evaluated: 1 + diagnosis.node_to_status.nodes.len(),
                            feasible: 1,
                        };
                    }
                }
            }
        }
        let restricted: Vec<usize>;
        let nodes = match &restrict {
            None => NodeList::All(num_all),
            Some(names) => {
                diagnosis.node_to_status.absent = Status::new(
                    Code::UnschedulableAndUnresolvable,
                    format!("node(s) didn't satisfy plugin(s) {}", go_list(&with_nodes)),
                );
                restricted = names.iter().filter_map(|n| snapshot.index_of(n)).collect();
                NodeList::Some(&restricted)
            }
        };
        let to_find = if has_scoring {
            num_feasible_nodes_to_find(pct, nodes.len())
        } else {
            1
        };
        let result = self.find_feasible(
            fw,
            &state,
            pod,
            snapshot,
            nodes,
            to_find,
            &mut diagnosis,
            nominator,
        );
        // Upstream advances the start index by the nodes processed, which
        // it counts as feasible nodes plus recorded statuses.
        let processed = match &result {
            Ok((feasible, _)) => feasible.len() + diagnosis.node_to_status.nodes.len(),
            Err(_) => diagnosis.node_to_status.nodes.len(),
        };
        self.next_start_node_index = (self.next_start_node_index + processed) % num_all;
        let feasible = match result {
            Ok((f, _)) => f,
            Err(s) => return Outcome::Error(s),
        };
        if feasible.is_empty() {
            return self.post_filter(fw, &state, pod, snapshot, diagnosis, nominator);
        }
        let evaluated = feasible.len() + diagnosis.node_to_status.nodes.len();
        if feasible.len() == 1 {
            return Outcome::Scheduled {
                node: feasible[0],
                evaluated,
                feasible: 1,
            };
        }
        let node = if has_scoring {
            match pre_score_and_score(fw, &mut state, pod, snapshot, &feasible, false) {
                Ok(table) => self.select_best(feasible.iter().copied().zip(table.totals)),
                Err(s) => return Outcome::Error(s),
            }
        } else {
            self.select_best(feasible.iter().map(|&node| (node, 1)))
        }
        .expect("non-empty");
        Outcome::Scheduled {
            node,
            evaluated,
            feasible: feasible.len(),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn find_feasible(
        &self,
        fw: &Framework,
        state: &CycleState,
        pod: &Pod,
        snapshot: &Snapshot,
        nodes: NodeList<'_>,
        to_find: usize,
        diagnosis: &mut Diagnosis,
        nominator: &Nominator,
    ) -> Result<(Vec<usize>, usize), Status> {
        let n = nodes.len();
        let mut feasible = Vec::with_capacity(to_find.min(n));
        let mut processed = 0;
        let chunk = if n >= PARALLEL_THRESHOLD {
            (to_find.max(PARALLEL_THRESHOLD)).min(n)
        } else {
            n.max(1)
        };
        let filters: Vec<ActiveFilter<'_>> = active_filters(fw, state).collect();
        let no_nominations = nominator.is_empty();
        let mut offset = 0;
        while offset < n && feasible.len() < to_find {
            let end = (offset + chunk).min(n);
            let check = |i: usize| {
                let idx = nodes.get((self.next_start_node_index + i) % n);
                let info = &snapshot.nodes[idx];
                let status = if no_nominations {
                    run_filter_list(fw, filters.iter().copied(), state, pod, info)
                } else {
                    let nominated = nominator.pods_for_node(info.name());
                    filters_with_nominated_pods(fw, &filters, state, pod, info, nominated)
                };
                (idx, status)
            };
            let results: Vec<(usize, Status)> = if end - offset >= PARALLEL_THRESHOLD {
                (offset..end).into_par_iter().map(check).collect()
            } else {
                (offset..end).map(check).collect()
            };
            for (idx, status) in results {
                if feasible.len() >= to_find {
                    break;
                }
                processed += 1;
                if status.code == Code::Error {
                    return Err(status);
                }
                if status.is_success() {
                    feasible.push(idx);
                } else {
                    diagnosis.add_plugin_status(&status);
                    diagnosis
                        .node_to_status
                        .nodes
                        .insert(snapshot.nodes[idx].name().to_string(), status);
                }
            }
            offset = end;
        }
        Ok((feasible, processed))
    }

    /// Runs PostFilter (upstream's `RunPostFilterPlugins`) and builds the
    /// FailedScheduling outcome.
    fn post_filter(
        &self,
        fw: &Framework,
        state: &CycleState,
        pod: &Pod,
        snapshot: &Snapshot,
        diagnosis: Diagnosis,
        nominator: &Nominator,
    ) -> Outcome {
        let t0 = metrics::start(&fw.recorder);
        let out = self.post_filter_plugins(fw, state, pod, snapshot, diagnosis, nominator);
        if fw.recorder.is_some() {
            let status = match &out {
                Outcome::Unschedulable {
                    nominated_node: Some(n),
                    ..
                } if !n.is_empty() => Status::success(),
                Outcome::Error(s) => s.clone(),
                _ => Status::new(Code::Unschedulable, ""),
            };
            metrics::point_done(&fw.recorder, t0, &fw.profile_name, "PostFilter", &status);
        }
        out
    }

    fn post_filter_plugins(
        &self,
        fw: &Framework,
        state: &CycleState,
        pod: &Pod,
        snapshot: &Snapshot,
        mut diagnosis: Diagnosis,
        nominator: &Nominator,
    ) -> Outcome {
        let plugins = fw.plugins(Point::PostFilter);
        if plugins.is_empty() {
            let message = fit_error_message(snapshot.len(), &diagnosis);
            return Outcome::Unschedulable {
                diagnosis,
                message,
                nominated_node: Some(String::new()),
                victims: Vec::new(),
            };
        }
        let handle = FrameworkHandle {
            fw,
            snapshot,
            nominator,
            seed: splitmix(self.seed ^ splitmix(self.cycle ^ 0x5052_4545_4d50_5400)),
        };
        let mut kept: Option<crate::plugin::PostFilterResult> = None;
        let mut reasons: Vec<String> = Vec::new();
        let mut decided: Option<crate::plugin::PostFilterResult> = None;
        for p in plugins {
            let r = p.as_post_filter().expect("framework checked").post_filter(
                state,
                pod,
                &diagnosis.node_to_status,
                &handle,
            );
            match r.status.code {
                Code::Success | Code::UnschedulableAndUnresolvable => {
                    decided = Some(r);
                    break;
                }
                Code::Unschedulable => {
                    reasons.extend(r.status.reasons.iter().cloned());
                    if r.nominated_node.is_some() {
                        kept = Some(r);
                    }
                }
                _ => {
                    // Any other code is an error: no result, its message only.
                    decided = Some(crate::plugin::PostFilterResult::keep(r.status));
                    break;
                }
            }
        }
        let result = match decided {
            Some(r) => r,
            None => {
                let mut r = kept
                    .unwrap_or_else(|| crate::plugin::PostFilterResult::keep(Status::success()));
                r.status = Status::with_reasons(Code::Unschedulable, reasons);
                r
            }
        };
        diagnosis.post_filter_msg = result.status.message();
        let message = fit_error_message(snapshot.len(), &diagnosis);
        Outcome::Unschedulable {
            diagnosis,
            message,
            nominated_node: result.nominated_node,
            victims: result.victims,
        }
    }
}

/// One filter plugin's verdict on one node, for `explain`.
#[derive(Debug, Clone)]
pub struct FilterVerdict {
    /// Plugin name.
    pub plugin: &'static str,
    /// Code (Skip when the plugin's PreFilter skipped).
    pub code: Code,
    /// Reasons.
    pub reasons: Vec<String>,
}

/// Everything `explain` shows for one node.
#[derive(Debug, Clone)]
pub struct NodeExplanation {
    /// Node index.
    pub node: usize,
    /// Feasible: every filter passed (and PreFilter did not exclude it).
    pub feasible: bool,
    /// Every filter plugin's verdict, in profile order.
    pub filters: Vec<FilterVerdict>,
    /// Scores (feasible nodes only).
    pub scores: Vec<PluginScore>,
    /// Total.
    pub total: i64,
}

/// The full explanation of one pod's placement.
#[derive(Debug, Clone)]
pub struct Explanation {
    /// Per node, in snapshot order.
    pub nodes: Vec<NodeExplanation>,
    /// Indices of the feasible nodes with the highest total.
    pub top_nodes: Vec<usize>,
    /// FailedScheduling message when no node is feasible, else empty.
    pub message: String,
}

/// Evaluates every filter and score plugin on every node.
pub fn explain(fw: &Framework, snapshot: &Snapshot, pod: &Pod) -> Result<Explanation, Status> {
    let mut state = CycleState::new();
    let pre = run_pre_filter(fw, &mut state, pod, snapshot);
    let mut nodes: Vec<NodeExplanation> = Vec::with_capacity(snapshot.len());
    let restrict = match &pre {
        Ok((r, _)) => r.clone(),
        Err(s) if s.is_rejected() => None,
        Err(s) => return Err(s.clone()),
    };
    let state_ref = &state;
    let per_node: Vec<NodeExplanation> = (0..snapshot.len())
        .into_par_iter()
        .map(|i| {
            let info = &snapshot.nodes[i];
            let mut filters = Vec::new();
            let mut feasible = pre.is_ok()
                && restrict
                    .as_ref()
                    .is_none_or(|names| names.contains(info.name()));
            for p in fw.plugins(Point::Filter) {
                if state_ref.skip_filter.contains(p.name()) {
                    filters.push(FilterVerdict {
                        plugin: p.name(),
                        code: Code::Skip,
                        reasons: Vec::new(),
                    });
                    continue;
                }
                let s = p.as_filter().expect("checked").filter(state_ref, pod, info);
                if !s.is_success() {
                    feasible = false;
                }
                filters.push(FilterVerdict {
                    plugin: p.name(),
                    code: s.code,
                    reasons: s.reasons,
                });
            }
            NodeExplanation {
                node: i,
                feasible,
                filters,
                scores: Vec::new(),
                total: 0,
            }
        })
        .collect();
    nodes.extend(per_node);
    let feasible: Vec<usize> = nodes
        .iter()
        .filter(|n| n.feasible)
        .map(|n| n.node)
        .collect();
    let mut message = String::new();
    let mut top_nodes = Vec::new();
    if feasible.is_empty() {
        // Reproduce the scheduler's own diagnosis for the message.
        let mut sched = Scheduler::new(0, 0);
        sched.percentage_of_nodes_to_score = 100;
        if let Outcome::Unschedulable { message: m, .. } = sched.schedule(fw, snapshot, pod) {
            message = m;
        }
    } else {
        let scores = run_score(fw, &mut state, pod, snapshot, &feasible)?;
        let best = scores.iter().map(|s| s.total).max().unwrap_or(0);
        for s in scores {
            if s.total == best {
                top_nodes.push(s.node);
            }
            let n = &mut nodes[s.node];
            n.total = s.total;
            n.scores = s.scores;
        }
    }
    Ok(Explanation {
        nodes,
        top_nodes,
        message,
    })
}
