//! PreScore, Score and NormalizeScore of PodTopologySpread.

use rkube_framework::{
    CycleState, NodeInfo, NodeScore, PreScorePlugin, ScorePlugin, Snapshot, Status, MAX_NODE_SCORE,
};
use rkube_model::Pod;

use super::{node_has_all_keys, Constraint, CountWalk, PodTopologySpread, LABEL_HOSTNAME};
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
        let mut ignored_nodes = FastSet::default();
        let mut counts: Vec<FastMap<String, i64>> = vec![FastMap::default(); constraints.len()];
        let mut sizes = vec![0usize; constraints.len()];
        for n in filtered {
            if require_all && !node_has_all_keys(&n.node, &constraints) {
                ignored_nodes.insert(n.name().to_string());
                continue;
            }
            for (i, c) in constraints.iter().enumerate() {
                if c.topology_key == LABEL_HOSTNAME {
                    continue;
                }
                let value = n
                    .node
                    .labels
                    .get(&c.topology_key)
                    .map_or("", |v| v.as_str());
                if !counts[i].contains_key(value) {
                    counts[i].insert(value.to_string(), 0);
                    sizes[i] += 1;
                }
            }
        }
        let weights = constraints
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let size = if c.topology_key == LABEL_HOSTNAME {
                    filtered.len() - ignored_nodes.len()
                } else {
                    sizes[i]
                };
                ((size + 2) as f64).ln()
            })
            .collect();
        // Matching pods per domain of the filtered nodes, over every node
        // that counts (hostname constraints are counted in Score).
        let totals = CountWalk {
            pod,
            constraints: &constraints,
            require_all,
            skip_hostname: true,
        }
        .totals(&self.memo.score, snapshot);
        for (i, domains) in counts.iter_mut().enumerate() {
            for (value, c) in domains.iter_mut() {
                *c = totals.get(i, value).unwrap_or(0);
            }
        }
        state.write(
            PRE_SCORE_KEY,
            PreScoreState {
                constraints,
                ignored_nodes,
                counts,
                weights,
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
        let mut score = 0f64;
        for (i, c) in s.constraints.iter().enumerate() {
            let Some(value) = node.node.labels.get(&c.topology_key) else {
                continue;
            };
            let count = if c.topology_key == LABEL_HOSTNAME {
                c.count_pods(node, &pod.namespace)
            } else {
                s.counts[i].get(value).copied().unwrap_or(0)
            };
            score += count as f64 * s.weights[i] + (c.max_skew - 1) as f64;
        }
        Ok(score.round() as i64)
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
