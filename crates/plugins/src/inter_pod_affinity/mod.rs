//! InterPodAffinity: required pod affinity and anti-affinity (PreFilter,
//! Filter, with PreFilter extensions), existing pods' required anti-affinity
//! against the incoming pod, and preferred terms of both sides (PreScore,
//! Score, NormalizeScore). Behaves as upstream v1.37 with its defaults (the
//! `InterPodAffinityHostnameFastPath` gate off, see `filtering`).
//!
//! The walks over every node's pods that PreFilter and PreScore make are
//! kept across cycles per node ([`crate::node_memo`]): a cycle recomputes
//! only the nodes that changed since the last pod with the same labels and
//! terms.

mod filtering;
pub mod hints;
mod scoring;

use std::sync::Arc;

use rkube_config::args::{decode, InterPodAffinityArgs};
use rkube_framework::{
    ClusterEventWithHint, FilterPlugin, Plugin, PreFilterPlugin, PreScorePlugin, ScorePlugin,
    Snapshot,
};
use rkube_model::selector::{Operator, Requirement};
use rkube_model::{LabelSelector, Labels, Pod, PodAffinityTerm};

use crate::helper::{FastMap, FastSet};
use crate::node_memo::SharedMemo;

/// Upstream name.
pub const NAME: &str = "InterPodAffinity";
/// Existing pods' required anti-affinity rejects the incoming pod.
pub const ERR_REASON_EXISTING_ANTI_AFFINITY: &str =
    "node(s) didn't satisfy existing pods anti-affinity rules";
/// The incoming pod's required affinity is not satisfied.
pub const ERR_REASON_AFFINITY: &str = "node(s) didn't match pod affinity rules";
/// The incoming pod's required anti-affinity is not satisfied.
pub const ERR_REASON_ANTI_AFFINITY: &str = "node(s) didn't match pod anti-affinity rules";

/// `kubernetes.io/hostname`, the topology key of the fast path.
pub(crate) const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";

/// The plugin.
#[derive(Debug, Clone)]
pub struct InterPodAffinity {
    /// Weight of existing pods' required affinity terms in scoring.
    pub hard_pod_affinity_weight: i32,
    /// Skip scoring when the incoming pod has no preferred terms.
    pub ignore_preferred_terms_of_existing_pods: bool,
    /// The per-node walks of earlier cycles.
    memo: Arc<Memos>,
}

/// The walks kept across cycles, one memo per walk.
#[derive(Debug)]
struct Memos {
    existing_anti: SharedMemo<filtering::IncomingKey, filtering::ExistingAnti>,
    cluster: SharedMemo<filtering::ClusterKey, filtering::ClusterCounts>,
    score: SharedMemo<scoring::ScoreKey, scoring::ScoreTotals>,
}

/// Keys (pod label sets, term sets) kept per walk: a Deployment's replicas
/// share one; a few Deployments scheduled interleaved keep theirs.
const MEMO_KEYS: usize = 8;

impl Default for Memos {
    fn default() -> Self {
        Memos {
            existing_anti: SharedMemo::new(MEMO_KEYS),
            cluster: SharedMemo::new(MEMO_KEYS),
            score: SharedMemo::new(MEMO_KEYS),
        }
    }
}

impl InterPodAffinity {
    /// The plugin with these arguments.
    pub fn with_args(
        hard_pod_affinity_weight: i32,
        ignore_preferred_terms_of_existing_pods: bool,
    ) -> Self {
        InterPodAffinity {
            hard_pod_affinity_weight,
            ignore_preferred_terms_of_existing_pods,
            memo: Arc::default(),
        }
    }
}

impl Default for InterPodAffinity {
    fn default() -> Self {
        InterPodAffinity::with_args(1, false)
    }
}

/// Builds the plugin from `InterPodAffinityArgs`.
pub fn new(args: &serde_json::Value, path: &str) -> Result<Arc<dyn Plugin>, String> {
    let a: InterPodAffinityArgs = decode(args, path).map_err(|e| e.to_string())?;
    let weight = a.hard_pod_affinity_weight.unwrap_or(1);
    if !(0..=100).contains(&weight) {
        return Err(format!(
            "{path}.hardPodAffinityWeight: Invalid value: {weight}: not in valid range [0-100]"
        ));
    }
    Ok(Arc::new(InterPodAffinity::with_args(
        weight,
        a.ignore_preferred_terms_of_existing_pods,
    )))
}

impl Plugin for InterPodAffinity {
    fn as_sign(&self) -> Option<&dyn rkube_framework::SignPlugin> {
        Some(self)
    }
    fn name(&self) -> &'static str {
        NAME
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        Some(hints::events())
    }
}

/// Does a label selector, with the owner's `matchLabelKeys` (`key In
/// (value)`) and `mismatchLabelKeys` (`key NotIn (value)`) merged in as the
/// API server does at pod creation, match `target`? A missing selector
/// matches nothing (and nothing is merged into it).
pub(crate) fn term_selector_matches(
    term: &PodAffinityTerm,
    owner: &Labels,
    target: &Labels,
) -> bool {
    let Some(sel) = &term.selector else {
        return false;
    };
    sel.matches(target)
        && term
            .match_label_keys
            .iter()
            .all(|k| owner.get(k).is_none_or(|v| target.get(k) == Some(v)))
        && term
            .mismatch_label_keys
            .iter()
            .all(|k| owner.get(k).is_none_or(|v| target.get(k) != Some(v)))
}

/// Upstream's `AffinityTerm.Matches` for a term of an existing pod `owner`
/// (its namespace selector is evaluated against `ns_labels`, the labels of
/// the target pod's namespace).
pub(crate) fn existing_term_matches(
    term: &PodAffinityTerm,
    owner: &Pod,
    target: &Pod,
    ns_labels: &Labels,
) -> bool {
    let ns_ok = if term.namespaces.is_empty() && term.namespace_selector.is_none() {
        target.namespace == owner.namespace
    } else {
        term.namespaces.contains(&target.namespace)
            || term
                .namespace_selector
                .as_ref()
                .is_some_and(|s| s.matches(ns_labels))
    };
    ns_ok && term_selector_matches(term, &owner.labels, &target.labels)
}

/// A term of the incoming pod, processed once per cycle: label keys merged
/// into the selector and a non-empty namespace selector resolved against the
/// known namespaces (upstream's `mergeAffinityTermNamespacesIfNotEmpty`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AffinityTerm {
    /// `None` matches nothing.
    pub selector: Option<LabelSelector>,
    /// Namespaces the term applies to.
    pub namespaces: FastSet<String>,
    /// An empty namespace selector: every namespace.
    pub all_namespaces: bool,
    /// Topology key.
    pub topology_key: String,
    /// Weight (preferred terms only).
    pub weight: i32,
}

impl AffinityTerm {
    pub(crate) fn new(pod: &Pod, term: &PodAffinityTerm, weight: i32, snapshot: &Snapshot) -> Self {
        let selector = term.selector.as_ref().map(|s| {
            let mut s = s.clone();
            for (keys, op) in [
                (&term.match_label_keys, Operator::In),
                (&term.mismatch_label_keys, Operator::NotIn),
            ] {
                for k in keys {
                    if let Some(v) = pod.labels.get(k) {
                        s.requirements.push(Requirement {
                            key: k.clone(),
                            op,
                            values: vec![v.clone()],
                        });
                    }
                }
            }
            s
        });
        let mut namespaces: FastSet<String> = FastSet::default();
        let mut all_namespaces = false;
        if term.namespaces.is_empty() && term.namespace_selector.is_none() {
            namespaces.insert(pod.namespace.clone());
        } else {
            namespaces.extend(term.namespaces.iter().cloned());
        }
        if let Some(ns_sel) = &term.namespace_selector {
            if ns_sel.is_empty() {
                all_namespaces = true;
            } else {
                for (name, labels) in &snapshot.namespaces {
                    if ns_sel.matches(labels) {
                        namespaces.insert(name.clone());
                    }
                }
            }
        }
        AffinityTerm {
            selector,
            namespaces,
            all_namespaces,
            topology_key: term.topology_key.clone(),
            weight,
        }
    }

    /// Upstream's `Matches(pod, nil)` for a processed incoming-pod term.
    pub(crate) fn matches(&self, pod: &Pod) -> bool {
        (self.all_namespaces || self.namespaces.contains(&pod.namespace))
            && self
                .selector
                .as_ref()
                .is_some_and(|s| s.matches(&pod.labels))
    }
}

/// True when `terms` is non-empty and `pod` matches every term.
pub(crate) fn pod_matches_all_terms(terms: &[AffinityTerm], pod: &Pod) -> bool {
    !terms.is_empty() && terms.iter().all(|t| t.matches(pod))
}

/// Counts per topology pair (`key`, `value`); an entry that drops to zero is
/// removed, as upstream's `topologyToMatchedTermCount.update`. A cycle
/// sees a handful of topology keys, so the keys are a short list (compared
/// by length first) and only values are hashed.
#[derive(Debug, Clone, Default)]
pub(crate) struct TopologyCounts {
    map: Vec<(String, FastMap<String, i64>)>,
    pairs: usize,
}

impl TopologyCounts {
    fn key_index(&self, key: &str) -> Option<usize> {
        self.map
            .iter()
            .position(|(k, _)| k.len() == key.len() && k == key)
    }

    /// Adds `delta` to the pair (`key`, `value`).
    pub(crate) fn add(&mut self, key: &str, value: &str, delta: i64) {
        let ki = match self.key_index(key) {
            Some(i) => i,
            None => {
                self.map.push((key.to_string(), FastMap::default()));
                self.map.len() - 1
            }
        };
        let inner = &mut self.map[ki].1;
        match inner.get_mut(value) {
            Some(c) => {
                *c += delta;
                if *c == 0 {
                    inner.remove(value);
                    self.pairs -= 1;
                    if inner.is_empty() {
                        self.map.swap_remove(ki);
                    }
                }
            }
            None => {
                if delta != 0 {
                    inner.insert(value.to_string(), delta);
                    self.pairs += 1;
                } else if inner.is_empty() {
                    self.map.swap_remove(ki);
                }
            }
        }
    }

    /// Adds `delta` at the node's value for `key`, if the node has the label.
    pub(crate) fn update(&mut self, labels: &Labels, key: &str, delta: i64) {
        if let Some(v) = labels.get(key) {
            self.add(key, v, delta);
        }
    }

    pub(crate) fn get(&self, key: &str, value: &str) -> i64 {
        self.key_index(key)
            .and_then(|i| self.map[i].1.get(value))
            .copied()
            .unwrap_or(0)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.pairs == 0
    }

    /// True when any of the node's labels is a pair with a positive count.
    pub(crate) fn any_label_positive(&self, labels: &Labels) -> bool {
        self.map.iter().any(|(k, values)| {
            labels
                .get(k)
                .is_some_and(|v| values.get(v).is_some_and(|c| *c > 0))
        })
    }
}

/// Up to two (topology key, value, count) entries of one node inline, more
/// on the heap: per-node results of the PreFilter / PreScore walks without
/// an allocation per node. A node has one value per key, so entries are
/// keyed by topology key; an entry exists once anything was added to it
/// (even when its sum is 0).
#[derive(Debug, Default)]
pub(crate) struct NodePairs<'a> {
    inline: [(&'a str, &'a str, i64); 2],
    len: usize,
    spill: Vec<(&'a str, &'a str, i64)>,
}

impl<'a> NodePairs<'a> {
    /// Adds `delta` to the entry of `key` (whose value on this node is
    /// `value`), creating it.
    pub(crate) fn add(&mut self, key: &'a str, value: &'a str, delta: i64) {
        let n = self.len.min(2);
        if let Some(e) = self.inline[..n].iter_mut().find(|e| e.0 == key) {
            e.2 += delta;
            return;
        }
        if let Some(e) = self.spill.iter_mut().find(|e| e.0 == key) {
            e.2 += delta;
            return;
        }
        if self.len < 2 {
            self.inline[self.len] = (key, value, delta);
        } else {
            self.spill.push((key, value, delta));
        }
        self.len += 1;
    }

    /// The entries, owned.
    pub(crate) fn to_owned_vec(&self) -> Vec<(String, String, i64)> {
        self.as_slices()
            .into_iter()
            .flatten()
            .map(|&(k, v, c)| (k.to_string(), v.to_string(), c))
            .collect()
    }

    /// The entries, in the order their keys were first added.
    pub(crate) fn as_slices(&self) -> [&[(&'a str, &'a str, i64)]; 2] {
        [&self.inline[..self.len.min(2)], &self.spill]
    }
}

/// The namespace labels of the incoming pod (empty when unknown).
pub(crate) fn namespace_labels(snapshot: &Snapshot, ns: &str) -> Labels {
    snapshot.namespace_labels(ns).cloned().unwrap_or_default()
}

/// A pod with pod (anti-)affinity is not batchable; otherwise its labels
/// matter (existing pods' terms may select it) unless
/// `ignorePreferredTermsOfExistingPods` is set.
impl rkube_framework::SignPlugin for InterPodAffinity {
    fn sign(
        &self,
        pod: &rkube_model::Pod,
        _: &rkube_framework::Snapshot,
    ) -> rkube_framework::Signed {
        if pod.pod_affinity.is_some() || pod.pod_anti_affinity.is_some() {
            return rkube_framework::Signed::Refused;
        }
        if self.ignore_preferred_terms_of_existing_pods {
            return rkube_framework::Signed::Fragments(Vec::new());
        }
        crate::signers::fragments([(crate::signers::LABELS, serde_json::json!(pod.labels))])
    }
}
