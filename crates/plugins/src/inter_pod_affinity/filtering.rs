//! PreFilter, PreFilter extensions and Filter of InterPodAffinity.
//!
//! Upstream v1.37 has an alpha gate, `InterPodAffinityHostnameFastPath`
//! (off by default), that checks `kubernetes.io/hostname` terms against the
//! candidate node's own pods instead of cluster-wide topology counts. The
//! gate's results differ (e.g. PreFilter skips differently), so rkube follows
//! the default: [`FAST_PATH`] is off; the fast-path code is kept for when the
//! gate graduates.

use std::sync::Arc;

use rkube_framework::{
    Code, CycleState, FilterPlugin, NodeInfo, PreFilterPlugin, PreFilterResult, Snapshot, Status,
};
use rkube_model::{Labels, Node, Pod};

use super::{
    existing_term_matches, namespace_labels, pod_matches_all_terms, AffinityTerm, InterPodAffinity,
    NodePairs, TopologyCounts, ERR_REASON_AFFINITY, ERR_REASON_ANTI_AFFINITY,
    ERR_REASON_EXISTING_ANTI_AFFINITY, LABEL_HOSTNAME,
};
use crate::helper::update_pre_filter_state;
use crate::node_memo::Fold;
use crate::parallel::map_nodes;

/// Whether the `InterPodAffinityHostnameFastPath` behaviour is on (upstream
/// v1.37 default: off).
pub(crate) const FAST_PATH: bool = false;

/// Is this topology key handled by the fast path?
fn host_scoped(key: &str) -> bool {
    FAST_PATH && key == LABEL_HOSTNAME
}

/// Computed in PreFilter, read in Filter.
#[derive(Debug, Clone, Default)]
pub(crate) struct PreFilterState {
    /// Pairs where existing pods' non-hostname required anti-affinity terms
    /// match the incoming pod (shared with the memo until a PreFilter
    /// extension changes them).
    existing_anti: Arc<TopologyCounts>,
    /// Pairs with existing pods matching all cluster-wide affinity terms.
    affinity: Arc<TopologyCounts>,
    /// Pairs with existing pods matching a cluster-wide anti-affinity term.
    anti_affinity: Arc<TopologyCounts>,
    /// Labels of the incoming pod's namespace.
    ns_labels: Labels,
    /// All required affinity terms of the incoming pod.
    required_affinity: Vec<AffinityTerm>,
    /// Affinity terms checked on the node's own pods (all of them, when every
    /// affinity term is hostname-scoped).
    host_affinity: Vec<AffinityTerm>,
    /// Hostname-scoped anti-affinity terms.
    host_anti_affinity: Vec<AffinityTerm>,
    /// Affinity terms checked through `affinity` (all of them, when any term
    /// is not hostname-scoped).
    cluster_affinity: Vec<AffinityTerm>,
    /// Anti-affinity terms that are not hostname-scoped.
    cluster_anti_affinity: Vec<AffinityTerm>,
    /// Pods in the cluster matching all `host_affinity` terms.
    matching_host_affinity_pods: i64,
}

/// Counts one match at the node's value for `key`, if the node has it.
fn record<'a>(list: &mut NodePairs<'a>, node: &'a Node, key: &'a str) {
    if let Some(v) = node.labels.get(key) {
        list.add(key, v, 1);
    }
}

/// The incoming pod as existing pods' terms see it: its namespace, its
/// labels and its namespace's labels.
pub(crate) type IncomingKey = (String, Labels, Labels);

/// Existing pods' required anti-affinity terms matching the incoming pod,
/// over every node.
#[derive(Debug, Clone, Default)]
pub(crate) struct ExistingAnti {
    counts: Arc<TopologyCounts>,
    /// Nodes with a hostname-scoped term (only with [`FAST_PATH`]).
    host_scoped_nodes: i64,
}

impl Fold for ExistingAnti {
    /// The node's (topology key, value, count) entries, and whether it has
    /// a hostname-scoped term.
    type Part = (Vec<(String, String, i64)>, bool);
    fn fold(&mut self, (pairs, host_scoped): &Self::Part, sign: i64) {
        if !pairs.is_empty() {
            let counts = Arc::make_mut(&mut self.counts);
            for (k, v, c) in pairs {
                counts.add(k, v, sign * c);
            }
        }
        if *host_scoped {
            self.host_scoped_nodes += sign;
        }
    }
}

/// One node's part of [`ExistingAnti`].
fn existing_anti_part(pod: &Pod, ns_labels: &Labels, n: &NodeInfo) -> <ExistingAnti as Fold>::Part {
    if n.pods_with_required_anti_affinity.is_empty() {
        return Default::default();
    }
    let mut list = NodePairs::default();
    let mut has_host_scoped = false;
    for existing in &n.pods_with_required_anti_affinity {
        for t in existing
            .pod_anti_affinity
            .iter()
            .flat_map(|a| a.required.iter())
        {
            if host_scoped(&t.topology_key) {
                has_host_scoped = true;
            } else if existing_term_matches(t, existing, pod, ns_labels) {
                record(&mut list, &n.node, &t.topology_key);
            }
        }
    }
    (list.to_owned_vec(), has_host_scoped)
}

/// The incoming pod's cluster-wide (affinity, anti-affinity) terms.
pub(crate) type ClusterKey = (Vec<AffinityTerm>, Vec<AffinityTerm>);

/// Existing pods matching the incoming pod's cluster-wide terms, over every
/// node.
#[derive(Debug, Clone, Default)]
pub(crate) struct ClusterCounts {
    /// Pods matching all affinity terms, at each term's pair.
    affinity: Arc<TopologyCounts>,
    /// Pods matching each anti-affinity term, at its pair.
    anti: Arc<TopologyCounts>,
}

impl Fold for ClusterCounts {
    /// (anti-affinity?, topology key, value, count).
    type Part = Vec<(bool, String, String, i64)>;
    fn fold(&mut self, part: &Self::Part, sign: i64) {
        for (anti, k, v, c) in part {
            let counts = if *anti {
                &mut self.anti
            } else {
                &mut self.affinity
            };
            Arc::make_mut(counts).add(k, v, sign * c);
        }
    }
}

/// One node's part of [`ClusterCounts`].
fn cluster_part(
    aff: &[AffinityTerm],
    anti: &[AffinityTerm],
    n: &NodeInfo,
) -> Vec<(bool, String, String, i64)> {
    if n.pods.is_empty() {
        return Vec::new();
    }
    let mut matching_all = 0i64;
    let mut per_anti = vec![0i64; anti.len()];
    for existing in &n.pods {
        if pod_matches_all_terms(aff, existing) {
            matching_all += 1;
        }
        for (t, c) in anti.iter().zip(&mut per_anti) {
            if t.matches(existing) {
                *c += 1;
            }
        }
    }
    let mut out = Vec::new();
    let mut push = |anti: bool, key: &str, c: i64| {
        if let Some(v) = n.node.labels.get(key) {
            out.push((anti, key.to_string(), v.clone(), c));
        }
    };
    if matching_all > 0 {
        for t in aff {
            push(false, &t.topology_key, matching_all);
        }
    }
    for (t, &c) in anti.iter().zip(&per_anti) {
        if c > 0 {
            push(true, &t.topology_key, c);
        }
    }
    out
}

impl PreFilterState {
    fn update_with_pod(&mut self, pod: &Pod, existing: &Pod, node: &Node, delta: i64) {
        for t in existing
            .pod_anti_affinity
            .iter()
            .flat_map(|a| a.required.iter())
        {
            if !host_scoped(&t.topology_key)
                && existing_term_matches(t, existing, pod, &self.ns_labels)
            {
                Arc::make_mut(&mut self.existing_anti).update(&node.labels, &t.topology_key, delta);
            }
        }
        if pod_matches_all_terms(&self.cluster_affinity, existing) {
            for t in &self.cluster_affinity {
                Arc::make_mut(&mut self.affinity).update(&node.labels, &t.topology_key, delta);
            }
        }
        for t in &self.cluster_anti_affinity {
            if t.matches(existing) {
                Arc::make_mut(&mut self.anti_affinity).update(&node.labels, &t.topology_key, delta);
            }
        }
        if !self.host_affinity.is_empty() && pod_matches_all_terms(&self.host_affinity, existing) {
            self.matching_host_affinity_pods += delta;
        }
    }

    /// The incoming pod matches its own affinity terms and the node has all
    /// their topology keys, and no other pod matches (the first pod of a
    /// self-affine group).
    fn satisfies_self_affinity(&self, pod: &Pod, node: &Node) -> bool {
        self.matching_host_affinity_pods <= 0
            && pod_matches_all_terms(&self.required_affinity, pod)
            && self
                .required_affinity
                .iter()
                .all(|t| node.labels.contains_key(&t.topology_key))
    }

    fn node_pods_satisfy_affinity(&self, pod: &Pod, node: &NodeInfo) -> bool {
        if self.host_affinity.is_empty() {
            return true;
        }
        if !node.node.labels.contains_key(LABEL_HOSTNAME) {
            return false;
        }
        node.pods
            .iter()
            .any(|p| pod_matches_all_terms(&self.host_affinity, p))
            || self.satisfies_self_affinity(pod, &node.node)
    }

    fn node_topology_matches_affinity(&self, pod: &Pod, node: &Node) -> bool {
        if self.cluster_affinity.is_empty() {
            return true;
        }
        let mut pods_exist = true;
        for t in &self.cluster_affinity {
            let Some(v) = node.labels.get(&t.topology_key) else {
                return false;
            };
            if self.affinity.get(&t.topology_key, v) <= 0 {
                pods_exist = false;
            }
        }
        pods_exist || (self.affinity.is_empty() && self.satisfies_self_affinity(pod, node))
    }

    fn node_topology_conflicts_with_anti_affinity(&self, node: &Node) -> bool {
        !self.anti_affinity.is_empty()
            && self.cluster_anti_affinity.iter().any(|t| {
                node.labels
                    .get(&t.topology_key)
                    .is_some_and(|v| self.anti_affinity.get(&t.topology_key, v) > 0)
            })
    }

    fn node_pods_conflict_with_anti_affinity(&self, node: &NodeInfo) -> bool {
        if self.host_anti_affinity.is_empty() || !node.node.labels.contains_key(LABEL_HOSTNAME) {
            return false;
        }
        node.pods
            .iter()
            .any(|p| self.host_anti_affinity.iter().any(|t| t.matches(p)))
    }

    fn satisfies_existing_pods_anti_affinity(&self, pod: &Pod, node: &NodeInfo) -> bool {
        if !self.existing_anti.is_empty()
            && self.existing_anti.any_label_positive(&node.node.labels)
        {
            return false;
        }
        if FAST_PATH && node.node.labels.contains_key(LABEL_HOSTNAME) {
            for existing in &node.pods_with_required_anti_affinity {
                for t in existing
                    .pod_anti_affinity
                    .iter()
                    .flat_map(|a| a.required.iter())
                {
                    if t.topology_key == LABEL_HOSTNAME
                        && existing_term_matches(t, existing, pod, &self.ns_labels)
                    {
                        return false;
                    }
                }
            }
        }
        true
    }
}

const PRE_FILTER_KEY: &str = "PreFilterInterPodAffinity";

fn state_error() -> Status {
    Status::error(format!(
        "error reading {PRE_FILTER_KEY:?} from cycleState: not found"
    ))
}

fn terms(pod: &Pod, anti: bool, snapshot: &Snapshot) -> Vec<AffinityTerm> {
    let a = if anti {
        &pod.pod_anti_affinity
    } else {
        &pod.pod_affinity
    };
    a.iter()
        .flat_map(|a| a.required.iter())
        .map(|t| AffinityTerm::new(pod, t, 0, snapshot))
        .collect()
}

impl PreFilterPlugin for InterPodAffinity {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let mut s = PreFilterState {
            ns_labels: namespace_labels(snapshot, &pod.namespace),
            required_affinity: terms(pod, false, snapshot),
            ..Default::default()
        };
        let required_anti = terms(pod, true, snapshot);
        // Classify the incoming pod's terms by scope.
        if !s.required_affinity.is_empty()
            && s.required_affinity
                .iter()
                .all(|t| host_scoped(&t.topology_key))
        {
            s.host_affinity = s.required_affinity.clone();
        } else {
            s.cluster_affinity = s.required_affinity.clone();
        }
        let incoming_has_no_terms = s.required_affinity.is_empty() && required_anti.is_empty();
        for t in required_anti {
            if host_scoped(&t.topology_key) {
                s.host_anti_affinity.push(t);
            } else {
                s.cluster_anti_affinity.push(t);
            }
        }

        // Existing pods' required anti-affinity against the incoming pod.
        let ns_labels = &s.ns_labels;
        let existing = self.memo.existing_anti.lock().total(
            |k| k.0 == pod.namespace && k.1 == pod.labels && k.2 == *ns_labels,
            || (pod.namespace.clone(), pod.labels.clone(), ns_labels.clone()),
            snapshot,
            |n| existing_anti_part(pod, ns_labels, n),
        );
        s.existing_anti = existing.counts;
        let must_evaluate_host_scoped_anti = existing.host_scoped_nodes > 0;

        // Existing pods against the incoming pod's cluster-wide terms.
        if !s.cluster_affinity.is_empty() || !s.cluster_anti_affinity.is_empty() {
            let (aff, anti) = (&s.cluster_affinity, &s.cluster_anti_affinity);
            let counts = self.memo.cluster.lock().total(
                |k| k.0 == *aff && k.1 == *anti,
                || (aff.clone(), anti.clone()),
                snapshot,
                |n| cluster_part(aff, anti, n),
            );
            s.affinity = counts.affinity;
            s.anti_affinity = counts.anti;
        }

        if !s.host_affinity.is_empty() {
            let all: Vec<&NodeInfo> = snapshot.nodes.iter().collect();
            let host = &s.host_affinity;
            s.matching_host_affinity_pods = map_nodes(&all, |n| {
                n.pods
                    .iter()
                    .filter(|p| pod_matches_all_terms(host, p))
                    .count() as i64
            })
            .iter()
            .sum();
        }

        if s.existing_anti.is_empty() && incoming_has_no_terms && !must_evaluate_host_scoped_anti {
            return (None, Status::skip());
        }
        state.write(PRE_FILTER_KEY, s);
        (None, Status::success())
    }

    fn add_pod(&self, state: &mut CycleState, pod: &Pod, added: &Pod, node: &NodeInfo) -> Status {
        update_pre_filter_state(state, PRE_FILTER_KEY, |s: &mut PreFilterState| {
            s.update_with_pod(pod, added, &node.node, 1)
        })
        .map_or_else(state_error, |()| Status::success())
    }

    fn remove_pod(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        removed: &Pod,
        node: &NodeInfo,
    ) -> Status {
        update_pre_filter_state(state, PRE_FILTER_KEY, |s: &mut PreFilterState| {
            s.update_with_pod(pod, removed, &node.node, -1)
        })
        .map_or_else(state_error, |()| Status::success())
    }
}

impl FilterPlugin for InterPodAffinity {
    fn filter(&self, state: &CycleState, pod: &Pod, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<PreFilterState>(PRE_FILTER_KEY) else {
            return state_error();
        };
        let affinity_ok = if !s.host_affinity.is_empty() {
            s.node_pods_satisfy_affinity(pod, node)
        } else {
            s.node_topology_matches_affinity(pod, &node.node)
        };
        if !affinity_ok {
            return Status::new(Code::UnschedulableAndUnresolvable, ERR_REASON_AFFINITY);
        }
        if s.node_topology_conflicts_with_anti_affinity(&node.node)
            || s.node_pods_conflict_with_anti_affinity(node)
        {
            return Status::new(Code::Unschedulable, ERR_REASON_ANTI_AFFINITY);
        }
        if !s.satisfies_existing_pods_anti_affinity(pod, node) {
            return Status::new(Code::Unschedulable, ERR_REASON_EXISTING_ANTI_AFFINITY);
        }
        Status::success()
    }
}
