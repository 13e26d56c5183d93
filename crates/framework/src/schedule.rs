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
use crate::plugin::{NodeScore, PostFilterHandle, PreFilterResult, MAX_NODE_SCORE};
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
    for p in fw.plugins(Point::Filter) {
        if state.skip_filter.contains(p.name()) {
            continue;
        }
        let f = p.as_filter().expect("framework checked");
        let s = metrics::time_plugin(
            &fw.recorder,
            state.record_plugin_metrics,
            p.name(),
            "Filter",
            Status::clone,
            || f.filter(state, pod, node),
        );
        if !s.is_success() {
            if !s.is_rejected() {
                return Status::error(format!(
                    "running {:?} filter plugin: {}",
                    p.name(),
                    s.message()
                ))
                .with_plugin(p.name());
            }
            return s.with_plugin(p.name());
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
    let added = match add_ge_nominated_pods(fw, state, pod, node, nominated) {
        Ok(a) => a,
        Err(s) => return s,
    };
    let status = match &added {
        Some((st, ni)) => run_filters(fw, st, pod, ni),
        None => run_filters(fw, state, pod, node),
    };
    if added.is_none() || !status.is_success() {
        return status;
    }
    run_filters(fw, state, pod, node)
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
    let out = score_plugins(fw, state, pod, &infos, feasible);
    if fw.recorder.is_some() {
        let status = match &out {
            Ok(_) => Status::success(),
            Err(s) => s.clone(),
        };
        metrics::point_done(&fw.recorder, t0, &fw.profile_name, "Score", &status);
    }
    out
}

/// Score and NormalizeScore of every Score plugin over `infos`.
fn score_plugins(
    fw: &Framework,
    state: &CycleState,
    pod: &Pod,
    infos: &[&NodeInfo],
    feasible: &[usize],
) -> Result<Vec<NodeScores>, Status> {
    let mut out: Vec<NodeScores> = feasible
        .iter()
        .map(|&node| NodeScores {
            node,
            scores: Vec::new(),
            total: 0,
        })
        .collect();
    for p in fw.plugins(Point::Score) {
        if state.skip_score.contains(p.name()) {
            continue;
        }
        let sp = p.as_score().expect("framework checked");
        let raw: Vec<Result<i64, Status>> = metrics::time_plugin(
            &fw.recorder,
            state.record_plugin_metrics,
            p.name(),
            "Score",
            |r: &Vec<Result<i64, Status>>| match r.iter().find_map(|x| x.as_ref().err()) {
                Some(s) => s.clone(),
                None => Status::success(),
            },
            || {
                if infos.len() >= PARALLEL_THRESHOLD {
                    infos.par_iter().map(|n| sp.score(state, pod, n)).collect()
                } else {
                    infos.iter().map(|n| sp.score(state, pod, n)).collect()
                }
            },
        );
        let mut scores = Vec::with_capacity(raw.len());
        for (i, r) in raw.into_iter().enumerate() {
            let score = r.map_err(|s| {
                Status::error(format!(
                    "plugin {:?} failed with: {}",
                    p.name(),
                    s.message()
                ))
            })?;
            scores.push(NodeScore {
                name: infos[i].name_shared(),
                score,
            });
        }
        let raw_scores: Vec<i64> = scores.iter().map(|s| s.score).collect();
        if sp.has_normalize() {
            let s = sp.normalize(state, pod, &mut scores);
            if !s.is_success() {
                return Err(Status::error(format!(
                    "running Normalize on Score plugins: plugin {:?} failed with: {}",
                    p.name(),
                    s.message()
                )));
            }
        }
        let weight = fw.weight(p.name());
        for (i, ns) in scores.iter().enumerate() {
            if ns.score > MAX_NODE_SCORE || ns.score < 0 {
                return Err(Status::error(format!(
                    "plugin {:?} returns an invalid score {}, it should in the range of [0, {}] after normalizing",
                    p.name(),
                    ns.score,
                    MAX_NODE_SCORE
                )));
            }
            let weighted = ns.score * weight;
            out[i].scores.push(PluginScore {
                plugin: p.name(),
                raw: raw_scores[i],
                normalized: ns.score,
                weight,
                weighted,
            });
            out[i].total += weighted;
        }
    }
    Ok(out)
}

impl Scheduler {
    /// Tie-break key of a node in the current cycle.
    fn randomizer(&self, node: usize) -> u64 {
        splitmix(self.seed ^ splitmix(self.cycle.wrapping_mul(0x1000_0001) ^ node as u64))
    }

    /// Picks the highest total; ties go to the highest seeded random key.
    pub fn select_host(&self, scores: &[NodeScores]) -> Option<usize> {
        scores
            .iter()
            .max_by_key(|s| (s.total, self.randomizer(s.node)))
            .map(|s| s.node)
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
        state.record_plugin_metrics = fw.recorder.is_some() && splitmix(self.cycle ^ self.seed) % 100 < 10;
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
                    &[idx],
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
        let nodes: Vec<usize> = match &restrict {
            None => (0..num_all).collect(),
            Some(names) => {
                diagnosis.node_to_status.absent = Status::new(
                    Code::UnschedulableAndUnresolvable,
                    format!("node(s) didn't satisfy plugin(s) {}", go_list(&with_nodes)),
                );
                names.iter().filter_map(|n| snapshot.index_of(n)).collect()
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
            &nodes,
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
        let scores = if has_scoring {
            match run_score(fw, &mut state, pod, snapshot, &feasible) {
                Ok(s) => s,
                Err(s) => return Outcome::Error(s),
            }
        } else {
            feasible
                .iter()
                .map(|&node| NodeScores {
                    node,
                    scores: Vec::new(),
                    total: 1,
                })
                .collect()
        };
        let node = self.select_host(&scores).expect("non-empty");
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
        nodes: &[usize],
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
        let mut offset = 0;
        while offset < n && feasible.len() < to_find {
            let end = (offset + chunk).min(n);
            let check = |i: usize| {
                let idx = nodes[(self.next_start_node_index + i) % n];
                let info = &snapshot.nodes[idx];
                let nominated = nominator.pods_for_node(info.name());
                (
                    idx,
                    run_filters_with_nominated_pods(fw, state, pod, info, nominated),
                )
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
                Outcome::Unschedulable { nominated_node: Some(n), .. } if !n.is_empty() => {
                    Status::success()
                }
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
