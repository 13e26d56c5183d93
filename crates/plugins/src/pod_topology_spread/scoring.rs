//! PreScore, Score and NormalizeScore of PodTopologySpread.

use rkube_framework::{
    CycleState, NodeInfo, NodeScore, PreScorePlugin, ScorePlugin, Snapshot, Status, MAX_NODE_SCORE,
};
use rkube_model::Pod;

use super::{Constraint, CountWalk, PodTopologySpread, LABEL_HOSTNAME};
use crate::helper::{FastMap, FastSet};

const PRE_SCORE_KEY: &str = "PreScorePodTopologySpread";
const INVALID_SCORE: i64 = -1;

/// Computed in PreScore, read in Score and NormalizeScore.
#[derive(Debug, Clone, Default)]
pub(crate) struct PreScoreState {
    constraints: Vec<Constraint>,
    /// Filtered nodes missing a constraint's topology key.
    ignored_nodes: FastSet<String>,
    /// Per constraint (hostname constraints stay empty: counted in Score):
    /// topology value → matching pods.
    counts: Vec<FastMap<String, i64>>,
    /// `ln(domains + 2)` per constraint.
    weights: Vec<f64>,
    /// The raw score of each filtered node by position, with the
    /// generation it was computed at (0 for an ignored node: never a
    /// generation). Score reads it; a node info of another content is
    /// scored from `counts`.
    by_position: Vec<(u64, i64)>,
}

/// A filtered node's domain of a constraint: its index in the constraint's
/// domains, or one of these.
const NO_LABEL: u32 = u32::MAX;
const HOSTNAME: u32 = u32::MAX - 1;

/// The raw score of a node: per constraint with a domain on the node, its
/// matching pods weighted, plus `maxSkew - 1` (upstream's float sum, in
/// constraint order).
fn raw_score(
    constraints: &[Constraint],
    weights: &[f64],
    count: impl Fn(usize) -> Option<i64>,
) -> i64 {
    let mut score = 0f64;
    for (i, c) in constraints.iter().enumerate() {
        if let Some(n) = count(i) {
            score += n as f64 * weights[i] + (c.max_skew - 1) as f64;
        }
    }
    score.round() as i64
}

fn state_error() -> Status {
    Status::error(format!(
        "error reading {PRE_SCORE_KEY:?} from cycleState: not found"
    ))
}

impl PreScorePlugin for PodTopologySpread {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        filtered: &[&NodeInfo],
        snapshot: &Snapshot,
    ) -> Status {
        if snapshot.nodes.is_empty() {
            return Status::skip();
        }
        // Only non-system-default rules require every topology key, so that
        // nodes without a zone label still get hostname spreading.
        let require_all = !pod.topology_spread_constraints.is_empty() || !self.system_defaulted;
        let constraints = self.constraints(pod, snapshot, false);
        if constraints.is_empty() {
            return Status::skip();
        }
        let hostname: Vec<bool> = constraints
            .iter()
            .map(|c| c.topology_key == LABEL_HOSTNAME)
            .collect();
        let mut ignored_nodes = FastSet::default();
        // Per constraint: its domains among the filtered nodes (value →
        // index), and each counted node's domain per constraint.
        let mut domains: Vec<FastMap<&str, u32>> = vec![FastMap::default(); constraints.len()];
        let mut counted: Vec<(usize, usize)> = Vec::with_capacity(filtered.len());
        let mut node_domains: Vec<u32> = Vec::with_capacity(filtered.len() * constraints.len());
        // The node's label of each constraint's key, looked up once.
        let mut labels: Vec<Option<&str>> = Vec::with_capacity(constraints.len());
        for (p, n) in filtered.iter().enumerate() {
            labels.clear();
            labels.extend(
                constraints
                    .iter()
                    .map(|c| n.node.labels.get(&c.topology_key).map(String::as_str)),
            );
            if require_all && labels.iter().any(Option::is_none) {
                ignored_nodes.insert(n.name().to_string());
                continue;
            }
            counted.push((p, node_domains.len()));
            for (i, &label) in labels.iter().enumerate() {
                if hostname[i] {
                    node_domains.push(if label.is_some() { HOSTNAME } else { NO_LABEL });
                    continue;
                }
                // A node without the key still makes the "" domain count
                // (upstream's map of the filtered nodes' values).
                let next = domains[i].len() as u32;
                let d = *domains[i].entry(label.unwrap_or("")).or_insert(next);
                node_domains.push(if label.is_some() { d } else { NO_LABEL });
            }
        }
        let weights: Vec<f64> = (0..constraints.len())
            .map(|i| {
                let size = if hostname[i] {
                    filtered.len() - ignored_nodes.len()
                } else {
                    domains[i].len()
                };
                ((size + 2) as f64).ln()
            })
            .collect();
        // Matching pods per domain of the filtered nodes, over every node
        // that counts (hostname constraints are counted per node).
        let totals = CountWalk {
            pod,
            constraints: &constraints,
            require_all,
            skip_hostname: true,
        }
        .totals(&self.memo.score, snapshot);
        let mut counts: Vec<FastMap<String, i64>> = vec![FastMap::default(); constraints.len()];
        let mut domain_counts: Vec<Vec<i64>> = Vec::with_capacity(constraints.len());
        for (i, values) in domains.iter().enumerate() {
            let mut per_domain = vec![0i64; values.len()];
            for (value, &d) in values {
                let c = totals.get(i, value).unwrap_or(0);
                per_domain[d as usize] = c;
                counts[i].insert(value.to_string(), c);
            }
            domain_counts.push(per_domain);
        }
        let mut by_position = vec![(0, 0); filtered.len()];
        for &(p, at) in &counted {
            let n = filtered[p];
            let doms = &node_domains[at..at + constraints.len()];
            let score = raw_score(&constraints, &weights, |i| match doms[i] {
                NO_LABEL => None,
                HOSTNAME => Some(constraints[i].count_pods(n, &pod.namespace)),
                d => Some(domain_counts[i][d as usize]),
            });
            by_position[p] = (n.generation(), score);
        }
        state.write(
            PRE_SCORE_KEY,
            PreScoreState {
                constraints,
                ignored_nodes,
                counts,
                weights,
                by_position,
            },
        );
        Status::success()
    }
}

impl ScorePlugin for PodTopologySpread {
    fn score(&self, state: &CycleState, pod: &Pod, node: &NodeInfo) -> Result<i64, Status> {
        let s = state
            .read::<PreScoreState>(PRE_SCORE_KEY)
            .ok_or_else(state_error)?;
        if !s.ignored_nodes.is_empty() && s.ignored_nodes.contains(node.name()) {
            return Ok(0);
        }
        Ok(raw_score(&s.constraints, &s.weights, |i| {
            let c = &s.constraints[i];
            let value = node.node.labels.get(&c.topology_key)?;
            Some(if c.topology_key == LABEL_HOSTNAME {
                c.count_pods(node, &pod.namespace)
            } else {
                s.counts[i].get(value).copied().unwrap_or(0)
            })
        }))
    }

    fn score_at(
        &self,
        state: &CycleState,
        pod: &Pod,
        node: &NodeInfo,
        position: usize,
    ) -> Result<i64, Status> {
        let s = state
            .read::<PreScoreState>(PRE_SCORE_KEY)
            .ok_or_else(state_error)?;
        match s.by_position.get(position) {
            Some(&(generation, score)) if generation == node.generation() => Ok(score),
            _ => self.score(state, pod, node),
        }
    }

    fn has_normalize(&self) -> bool {
        true
    }

    fn normalize(&self, state: &CycleState, _pod: &Pod, scores: &mut [NodeScore]) -> Status {
        let Some(s) = state.read::<PreScoreState>(PRE_SCORE_KEY) else {
            return state_error();
        };
        let mut min = i64::MAX;
        let mut max = 0i64;
        for sc in scores.iter_mut() {
            if !s.ignored_nodes.is_empty() && s.ignored_nodes.contains(&*sc.name) {
                sc.score = INVALID_SCORE;
                continue;
            }
            min = min.min(sc.score);
            max = max.max(sc.score);
        }
        for sc in scores.iter_mut() {
            if sc.score == INVALID_SCORE {
                sc.score = 0;
            } else if max == 0 {
                sc.score = MAX_NODE_SCORE;
            } else {
                sc.score = MAX_NODE_SCORE * (max + min - sc.score) / max;
            }
        }
        Status::success()
    }
}
