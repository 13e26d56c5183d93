//! Running one extension point over a profile's plugins, as upstream's
//! `pkg/scheduler/framework/runtime/framework.go` (`RunPreFilterPlugins`,
//! `RunFilterPlugins`, `RunFilterPluginsWithNominatedPods`,
//! `RunPreFilterExtensionAddPod`/`RemovePod`, `RunPreScorePlugins`,
//! `RunScorePlugins` with NormalizeScore and the weights), and the
//! framework handle PostFilter plugins receive.

use std::collections::BTreeSet;
use std::sync::Arc;

use rayon::prelude::*;
use rkube_model::Pod;

use crate::cycle_state::CycleState;
use crate::diagnosis::go_list;
use crate::framework::{Framework, Point};
use crate::metrics;
use crate::node_info::NodeInfo;
use crate::nominator::Nominator;
use crate::plugin::{
    FilterPlugin, NodeScore, PostFilterHandle, PreFilterResult, ScorePlugin, MAX_NODE_SCORE,
};
use crate::snapshot::Snapshot;
use crate::status::{Code, Status};

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
pub(crate) type ActiveFilter<'a> = (&'static str, &'a dyn FilterPlugin);

/// The Filter plugins whose PreFilter did not skip, in profile order.
pub(crate) fn active_filters<'a>(
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
pub(crate) fn run_filter_list<'a>(
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
pub(crate) fn filters_with_nominated_pods(
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
pub(crate) fn pre_score_and_score(
    fw: &Framework,
    state: &mut CycleState,
    pod: &Pod,
    snapshot: &Snapshot,
    feasible: &[usize],
    detail: bool,
) -> Result<ScoreTable, Status> {
    let infos: Vec<&NodeInfo> = feasible.iter().map(|&i| &snapshot.nodes[i]).collect();
    pre_score(fw, state, pod, &infos, snapshot)?;
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

/// Runs every PreScore plugin over `infos` (upstream's
/// `RunPreScorePlugins`); a Skip marks the plugin's Score skipped.
pub(crate) fn pre_score(
    fw: &Framework,
    state: &mut CycleState,
    pod: &Pod,
    infos: &[&NodeInfo],
    snapshot: &Snapshot,
) -> Result<(), Status> {
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
            || ps.pre_score(state, pod, infos, snapshot),
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
    Ok(())
}

/// A Score plugin that runs in this cycle.
pub(crate) struct ActiveScore<'a> {
    pub name: &'static str,
    pub plugin: &'a dyn ScorePlugin,
    pub weight: i64,
}

/// The Score plugins PreScore did not skip, in profile order.
pub(crate) fn active_scores<'a>(fw: &'a Framework, state: &CycleState) -> Vec<ActiveScore<'a>> {
    fw.plugins(Point::Score)
        .iter()
        .filter(|p| !state.skip_score.contains(p.name()))
        .map(|p| ActiveScore {
            name: p.name(),
            plugin: p.as_score().expect("framework checked"),
            weight: fw.weight(p.name()),
        })
        .collect()
}

/// Nodes scored per parallel task (each task runs every Score plugin on
/// its nodes).
const SCORE_CHUNK: usize = 16;

/// A plugin's Score error on one node: (plugin position, node position, status).
pub(crate) type ScoreError = (usize, usize, Status);

/// Scores of the feasible nodes: per node, the weighted total and, when
/// kept, every plugin's raw and normalized score (node-major, one row of
/// `plugins.len()` per node).
pub(crate) struct ScoreTable {
    pub(crate) plugins: Vec<(&'static str, i64)>,
    /// Every plugin's raw score (kept for OpportunisticBatching).
    pub(crate) raw: Vec<i64>,
    normalized: Vec<i64>,
    pub(crate) totals: Vec<i64>,
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
                            .enumerate()
                            .map(|(i, nd)| a.plugin.score_at(state, pod, nd, i))
                            .collect()
                    } else {
                        infos
                            .iter()
                            .enumerate()
                            .map(|(i, nd)| a.plugin.score_at(state, pod, nd, i))
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
    // Scores kept in the node infos, under an id per (plugin, key).
    let ids: Vec<Option<u64>> = plugins
        .iter()
        .map(|a| {
            a.plugin
                .score_key(state, pod)
                .and_then(|key| fw.score_memo.id(a.name, key))
        })
        .collect();
    let score_rows = |first: usize, rows: &mut [i64]| -> Vec<ScoreError> {
        let mut errs = Vec::new();
        for (j, row) in rows.chunks_exact_mut(p).enumerate() {
            let node = infos[first + j];
            for (k, a) in plugins.iter().enumerate() {
                let id = ids[k];
                if let Some(v) = id.and_then(|id| node.kept_score(id)) {
                    row[k] = v;
                    continue;
                }
                match a.plugin.score_at(state, pod, node, first + j) {
                    Ok(v) => {
                        row[k] = v;
                        if let Some(id) = id {
                            node.keep_score(id, v);
                        }
                    }
                    Err(s) => errs.push((k, first + j, s)),
                }
            }
        }
        errs
    };
    if n >= PARALLEL_THRESHOLD {
        let chunks: Vec<Vec<ScoreError>> = raw
            .par_chunks_mut(p * SCORE_CHUNK)
            .enumerate()
            .map(|(c, rows)| score_rows(c * SCORE_CHUNK, rows))
            .collect();
        errors = chunks.into_iter().flatten().collect();
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
    let plugins = active_scores(fw, state);
    let (raw, errors) = raw_scores(fw, state, pod, infos, &plugins);
    normalize_scores(state, pod, infos, &plugins, raw, errors, detail)
}

/// NormalizeScore and the weighted sum over raw scores (node-major, one
/// row of `plugins.len()` per node): plugin by plugin in profile order, its
/// errors, NormalizeScore, the range check and the weighted sum.
#[allow(clippy::too_many_arguments)]
pub(crate) fn normalize_scores(
    state: &CycleState,
    pod: &Pod,
    infos: &[&NodeInfo],
    plugins: &[ActiveScore<'_>],
    raw: Vec<i64>,
    errors: Vec<ScoreError>,
    detail: bool,
) -> Result<ScoreTable, Status> {
    let (n, p) = (infos.len(), plugins.len());
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
        raw,
        normalized,
        totals,
    })
}

/// Below this many nodes a filter or score pass runs on the calling
/// thread: handing a pass to the thread pool and waking its workers costs
/// more than a few hundred nodes' plugins (measured in BENCHMARKS.md,
/// "Issue #18, third round"). Plugins' own node walks use it too.
pub const PARALLEL_THRESHOLD: usize = 1024;

/// SplitMix64: a small, well-mixed, seedable generator (metrics sampling,
/// preemption's random draws).
pub(crate) fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Upstream's `RunPlacementFeasiblePlugins`: a Wait is remembered and the
/// next plugin asked, an Unschedulable ends the run, anything else is an
/// error. Success when no plugin objects (or none is configured).
pub fn run_placement_feasible(
    fw: &crate::Framework,
    group: &rkube_model::pod_groups::PodGroup,
    progress: crate::pod_group::PlacementProgress,
) -> crate::Status {
    use crate::{Code, Point, Status};
    let mut seen = std::collections::HashSet::new();
    let mut result = Status::success();
    for p in [Point::PreEnqueue, Point::Permit]
        .into_iter()
        .flat_map(|pt| fw.plugins(pt).iter())
    {
        let Some(pf) = p.as_placement_feasible() else {
            continue;
        };
        if !seen.insert(p.name()) {
            continue;
        }
        let s = pf.placement_feasible(group, progress);
        match s.code {
            Code::Success => {}
            Code::Wait => result = s.with_plugin(p.name()),
            Code::Unschedulable => return s.with_plugin(p.name()),
            Code::Error => {
                return Status::error(format!("running PlacementFeasible plugin: {}", s.message()))
                    .with_plugin(p.name())
            }
            other => {
                return Status::error(format!(
                    "unexpected status from PlacementFeasible plugin: {other:?}"
                ))
                .with_plugin(p.name())
            }
        }
    }
    result
}
