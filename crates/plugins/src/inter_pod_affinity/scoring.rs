//! PreScore, Score and NormalizeScore of InterPodAffinity.

use rkube_framework::{
    CycleState, NodeInfo, NodeScore, PreScorePlugin, ScorePlugin, Snapshot, Status, MAX_NODE_SCORE,
};
use rkube_model::{Labels, Pod, PodAffinityTerm};

use std::sync::Arc;

use super::{existing_term_matches, namespace_labels, AffinityTerm, InterPodAffinity, NodePairs};
use crate::helper::FastMap;
use crate::node_memo::{fold_counted, Fold};

const PRE_SCORE_KEY: &str = "PreScoreInterPodAffinity";

/// Topology key → topology value → (score, nodes that added to it). A pair
/// exists while some node adds to it, even when its score is 0, as in the
/// map upstream builds.
type ScoreMap = FastMap<String, FastMap<String, (i64, u32)>>;

/// What the PreScore walk depends on besides the nodes: the incoming pod's
/// namespace, labels and namespace labels, its preferred affinity and
/// anti-affinity terms, and whether it has any (then every pod is walked,
/// else only pods with affinity).
pub(crate) type ScoreKey = (
    String,
    Labels,
    Labels,
    Vec<AffinityTerm>,
    Vec<AffinityTerm>,
    bool,
);

/// The PreScore walk's topology scores over every node.
#[derive(Debug, Clone, Default)]
pub(crate) struct ScoreTotals(Arc<ScoreMap>);

impl Fold for ScoreTotals {
    /// The node's (topology key, value, score) entries.
    type Part = Vec<(String, String, i64)>;
    fn fold(&mut self, part: &Self::Part, sign: i64) {
        if part.is_empty() {
            return;
        }
        let map = Arc::make_mut(&mut self.0);
        for (k, v, c) in part {
            if sign > 0 && !map.contains_key(k) {
                map.insert(k.clone(), FastMap::default());
            }
            if let Some(values) = map.get_mut(k) {
                fold_counted(values, v, *c, sign);
                if values.is_empty() {
                    map.remove(k);
                }
            }
        }
    }
}

/// One node's contributions, borrowed from the snapshot and the terms (an
/// entry exists once any term added to it, even when its sum is 0, as in
/// the map upstream builds).
type NodeScores<'a> = NodePairs<'a>;

/// Computed in PreScore, read in Score.
#[derive(Debug, Clone, Default)]
pub(crate) struct PreScoreState {
    topology_score: Arc<ScoreMap>,
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

impl Ctx<'_> {
    fn process_existing_pod<'b>(
        &'b self,
        existing: &'b Pod,
        node_labels: &'b Labels,
        m: &mut NodeScores<'b>,
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
        let mut process = |t: &'b PodAffinityTerm, weight: i32| {
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
        let totals = self.memo.score.lock().total(
            |k| {
                k.0 == pod.namespace
                    && k.1 == pod.labels
                    && k.2 == ns_labels
                    && k.3 == preferred_affinity
                    && k.4 == preferred_anti_affinity
                    && k.5 == has_constraints
            },
            || {
                (
                    pod.namespace.clone(),
                    pod.labels.clone(),
                    ns_labels.clone(),
                    preferred_affinity.clone(),
                    preferred_anti_affinity.clone(),
                    has_constraints,
                )
            },
            snapshot,
            |n| {
                let pods = if has_constraints {
                    &n.pods
                } else {
                    &n.pods_with_affinity
                };
                let mut m = NodeScores::default();
                for existing in pods {
                    ctx.process_existing_pod(existing, &n.node.labels, &mut m);
                }
                m.to_owned_vec()
            },
        );
        // No node added to any pair: nothing to score.
        if totals.0.is_empty() {
            return Status::skip();
        }
        let topology_score = totals.0;
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
        for (key, values) in s.topology_score.iter() {
            if let Some(v) = node.node.labels.get(key) {
                score += values.get(v).map_or(0, |e| e.0);
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
