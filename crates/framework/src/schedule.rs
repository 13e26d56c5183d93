//! The scheduling algorithm (upstream's `schedulePod`): PreFilter, Filter over
//! a rotating window of nodes sized by `percentageOfNodesToScore`, PreScore,
//! Score, NormalizeScore, weighted sum, and host selection with a seeded
//! tie-break. Also the "explain" evaluation, which runs every filter and score
//! plugin on every node and keeps each verdict.

use std::collections::BTreeSet;

use rayon::prelude::*;
use rkube_model::Pod;

use crate::cycle_state::CycleState;
use crate::diagnosis::{fit_error_message, go_list, Diagnosis};
use crate::node_info::NodeInfo;
use crate::plugin::{NodeScore, PreFilterResult, MAX_NODE_SCORE};
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
    let mut result: PreFilterResult = None;
    let mut with_nodes = BTreeSet::new();
    let mut unschedulable: Option<Status> = None;
    for p in fw.plugins(Point::PreFilter) {
        let pf = p.as_pre_filter().expect("framework checked");
        let (r, s) = pf.pre_filter(state, pod, snapshot);
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
        let s = p
            .as_filter()
            .expect("framework checked")
            .filter(state, pod, node);
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

/// Runs PreScore, Score and NormalizeScore over `feasible` nodes.
pub fn run_score(
    fw: &Framework,
    state: &mut CycleState,
    pod: &Pod,
    snapshot: &Snapshot,
    feasible: &[usize],
) -> Result<Vec<NodeScores>, Status> {
    let infos: Vec<&NodeInfo> = feasible.iter().map(|&i| &snapshot.nodes[i]).collect();
    for p in fw.plugins(Point::PreScore) {
        let s = p
            .as_pre_score()
            .expect("framework checked")
            .pre_score(state, pod, &infos, snapshot);
        if s.code == Code::Skip {
            state.skip_score.insert(p.name());
            continue;
        }
        if !s.is_success() {
            return Err(Status::error(format!(
                "running PreScore plugin {:?}: {}",
                p.name(),
                s.message()
            )));
        }
    }
    let mut out: Vec<NodeScores> = feasible
        .iter()
        .map(|&node| NodeScores {
            node,
            scores: Vec::new(),
            total: 0,
        })
        .collect();
    let state: &CycleState = state;
    for p in fw.plugins(Point::Score) {
        if state.skip_score.contains(p.name()) {
            continue;
        }
        let sp = p.as_score().expect("framework checked");
        let raw: Vec<Result<i64, Status>> = if infos.len() >= PARALLEL_THRESHOLD {
            infos.par_iter().map(|n| sp.score(state, pod, n)).collect()
        } else {
            infos.iter().map(|n| sp.score(state, pod, n)).collect()
        };
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
                name: infos[i].name().to_string(),
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

    /// Schedules one pod against the snapshot (does not modify it).
    pub fn schedule(&mut self, fw: &Framework, snapshot: &Snapshot, pod: &Pod) -> Outcome {
        self.cycle += 1;
        let num_all = snapshot.len();
        let mut diagnosis = Diagnosis::default();
        if num_all == 0 {
            return Outcome::Unschedulable {
                message: "no nodes available to schedule pods".to_string(),
                diagnosis,
            };
        }
        let mut state = CycleState::new();
        let (restrict, with_nodes) = match run_pre_filter(fw, &mut state, pod, snapshot) {
            Ok(r) => r,
            Err(s) if s.is_rejected() => {
                diagnosis.pre_filter_msg = s.message();
                diagnosis.add_plugin_status(&s);
                diagnosis.node_to_status.absent = s;
                let message = self.post_filter(fw, &state, pod, snapshot, &mut diagnosis);
                return Outcome::Unschedulable { diagnosis, message };
            }
            Err(s) => return Outcome::Error(s),
        };
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
        let pct = fw
            .percentage_of_nodes_to_score
            .unwrap_or(self.percentage_of_nodes_to_score);
        let has_scoring = !fw.plugins(Point::Score).is_empty();
        let to_find = if has_scoring {
            num_feasible_nodes_to_find(pct, nodes.len())
        } else {
            1
        };
        let (feasible, processed) =
            match self.find_feasible(fw, &state, pod, snapshot, &nodes, to_find, &mut diagnosis) {
                Ok(v) => v,
                Err(s) => return Outcome::Error(s),
            };
        self.next_start_node_index = (self.next_start_node_index + processed) % num_all;
        if feasible.is_empty() {
            let message = self.post_filter(fw, &state, pod, snapshot, &mut diagnosis);
            return Outcome::Unschedulable { diagnosis, message };
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
                (idx, run_filters(fw, state, pod, &snapshot.nodes[idx]))
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

    fn post_filter(
        &self,
        fw: &Framework,
        state: &CycleState,
        pod: &Pod,
        snapshot: &Snapshot,
        diagnosis: &mut Diagnosis,
    ) -> String {
        let filters = |node: &NodeInfo| run_filters(fw, state, pod, node);
        for p in fw.plugins(Point::PostFilter) {
            let r = p.as_post_filter().expect("framework checked").post_filter(
                state,
                pod,
                snapshot,
                &diagnosis.node_to_status,
                &filters,
            );
            if r.status.is_success()
                || r.status.code == Code::Unschedulable
                || r.status.code == Code::UnschedulableAndUnresolvable
            {
                if !r.status.reasons.is_empty() {
                    diagnosis.post_filter_msg = r.status.message();
                }
                if r.status.is_success() {
                    break;
                }
            }
        }
        fit_error_message(snapshot.len(), diagnosis)
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
