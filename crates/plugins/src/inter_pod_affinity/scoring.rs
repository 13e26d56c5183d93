//! PreScore, Score and NormalizeScore of InterPodAffinity.

use rkube_framework::{
    CycleState, NodeInfo, NodeScore, PreScorePlugin, ScorePlugin, Snapshot, Status, MAX_NODE_SCORE,
};
use rkube_model::{Labels, Pod, PodAffinityTerm};

use super::{existing_term_matches, namespace_labels, AffinityTerm, InterPodAffinity, NodePairs};
use crate::helper::FastMap;
use crate::parallel::map_nodes;

const PRE_SCORE_KEY: &str = "PreScoreInterPodAffinity";

/// Topology key → topology value → score.
type ScoreMap = FastMap<String, FastMap<String, i64>>;

/// One node's contributions, borrowed from the snapshot and the terms (an
/// entry exists once any term added to it, even when its sum is 0, as in
/// the map upstream builds).
type NodeScores<'a> = NodePairs<'a>;

/// Computed in PreScore, read in Score.
#[derive(Debug, Clone, Default)]
pub(crate) struct PreScoreState {
    topology_score: ScoreMap,
}

fn add<'a>(m: &mut NodeScores<'a>, key: &'a str, value: &'a str, delta: i64) {
    m.add(key, value, delta);
}

struct Ctx<'a> {
    pod: &'a Pod,
    ns_labels: &'a Labels,
    preferred_affinity: &'a [AffinityTerm],
    preferred_anti_affinity: &'a [AffinityTerm],
    hard_weight: i32,
}

fn existing_terms(
    a: &Option<rkube_model::PodAffinity>,
) -> impl Iterator<Item = (&PodAffinityTerm, i32)> + '_ {
    a.iter()
        .flat_map(|a| a.preferred.iter())
        .map(|w| (&w.term, w.weight))
}

impl<'a> Ctx<'a> {
    fn process_existing_pod(
        &self,
        existing: &'a Pod,
        node_labels: &'a Labels,
        m: &mut NodeScores<'a>,
    ) {
        if node_labels.is_empty() {
            return;
        }
        for (terms, sign) in [
            (self.preferred_affinity, 1),
            (self.preferred_anti_affinity, -1),
        ] {
            for t in terms {
                if t.matches(existing) {
                    if let Some(v) = node_labels.get(&t.topology_key) {
                        add(m, &t.topology_key, v, (t.weight * sign) as i64);
                    }
                }
            }
        }
        let mut process = |t: &'a PodAffinityTerm, weight: i32| {
            if existing_term_matches(t, existing, self.pod, self.ns_labels) {
                if let Some(v) = node_labels.get(&t.topology_key) {
                    add(m, &t.topology_key, v, weight as i64);
                }
            }
        };
        if self.hard_weight > 0 {
            for t in existing.pod_affinity.iter().flat_map(|a| a.required.iter()) {
                process(t, self.hard_weight);
            }
        }
        for (t, w) in existing_terms(&existing.pod_affinity) {
            process(t, w);
        }
        for (t, w) in existing_terms(&existing.pod_anti_affinity) {
            process(t, -w);
        }
    }
}

fn preferred(
    a: &Option<rkube_model::PodAffinity>,
    pod: &Pod,
    snapshot: &Snapshot,
) -> Vec<AffinityTerm> {
    a.iter()
        .flat_map(|a| a.preferred.iter())
        .map(|w| AffinityTerm::new(pod, &w.term, w.weight, snapshot))
        .collect()
}

impl PreScorePlugin for InterPodAffinity {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        _nodes: &[&NodeInfo],
        snapshot: &Snapshot,
    ) -> Status {
        let has_constraints = pod
            .pod_affinity
            .as_ref()
            .is_some_and(|a| !a.preferred.is_empty())
            || pod
                .pod_anti_affinity
                .as_ref()
                .is_some_and(|a| !a.preferred.is_empty());
        if self.ignore_preferred_terms_of_existing_pods && !has_constraints {
            return Status::skip();
        }
        // Unless the incoming pod has preferred terms, only pods with
        // affinity can contribute.
        let nodes: Vec<&NodeInfo> = snapshot
            .nodes
            .iter()
            .filter(|n| has_constraints || !n.pods_with_affinity.is_empty())
            .collect();
        let preferred_affinity = preferred(&pod.pod_affinity, pod, snapshot);
        let preferred_anti_affinity = preferred(&pod.pod_anti_affinity, pod, snapshot);
        let ns_labels = namespace_labels(snapshot, &pod.namespace);
        let ctx = Ctx {
            pod,
            ns_labels: &ns_labels,
            preferred_affinity: &preferred_affinity,
            preferred_anti_affinity: &preferred_anti_affinity,
            hard_weight: self.hard_pod_affinity_weight,
        };
        let per_node = map_nodes(&nodes, |n| {
            let pods = if has_constraints {
                &n.pods
            } else {
                &n.pods_with_affinity
            };
            let mut m = NodeScores::default();
            for existing in pods {
                ctx.process_existing_pod(existing, &n.node.labels, &mut m);
            }
            m
        });
        let mut topology_score = ScoreMap::default();
        let mut any = false;
        // Room for one value per contributing node (hostname-like keys).
        let hint = per_node.iter().filter(|m| !m.is_empty()).count();
        for m in per_node {
            if m.is_empty() {
                continue;
            }
            any = true;
            for &(k, v, c) in m.as_slices().into_iter().flatten() {
                if !topology_score.contains_key(k) {
                    topology_score.insert(
                        k.to_string(),
                        FastMap::with_capacity_and_hasher(hint, Default::default()),
                    );
                }
                let scores = topology_score.get_mut(k).expect("inserted above");
                match scores.get_mut(v) {
                    Some(x) => *x += c,
                    None => {
                        scores.insert(v.to_string(), c);
                    }
                }
            }
        }
        if !any {
            return Status::skip();
        }
        state.write(PRE_SCORE_KEY, PreScoreState { topology_score });
        Status::success()
    }
}

impl ScorePlugin for InterPodAffinity {
    fn score(&self, state: &CycleState, _pod: &Pod, node: &NodeInfo) -> Result<i64, Status> {
        let s = state.read::<PreScoreState>(PRE_SCORE_KEY).ok_or_else(|| {
            Status::error(format!(
                "failed to read {PRE_SCORE_KEY:?} from cycleState: not found"
            ))
        })?;
        let mut score = 0;
        for (key, values) in &s.topology_score {
            if let Some(v) = node.node.labels.get(key) {
                score += values.get(v).copied().unwrap_or(0);
            }
        }
        Ok(score)
    }

    fn has_normalize(&self) -> bool {
        true
    }

    fn normalize(&self, state: &CycleState, _pod: &Pod, scores: &mut [NodeScore]) -> Status {
        let Some(s) = state.read::<PreScoreState>(PRE_SCORE_KEY) else {
            return Status::error(format!(
                "failed to read {PRE_SCORE_KEY:?} from cycleState: not found"
            ));
        };
        if s.topology_score.is_empty() {
            return Status::success();
        }
        let min = scores.iter().map(|s| s.score).min().unwrap_or(i64::MAX);
        let max = scores.iter().map(|s| s.score).max().unwrap_or(i64::MIN);
        let diff = max.wrapping_sub(min);
        for s in scores.iter_mut() {
            let f = if diff > 0 {
                MAX_NODE_SCORE as f64 * ((s.score - min) as f64 / diff as f64)
            } else {
                0.0
            };
            s.score = f as i64;
        }
        Status::success()
    }
}
