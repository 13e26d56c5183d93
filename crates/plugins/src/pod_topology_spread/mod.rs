//! PodTopologySpread: `DoNotSchedule` constraints (PreFilter, Filter, with
//! PreFilter extensions) and `ScheduleAnyway` constraints (PreScore, Score,
//! NormalizeScore), with `minDomains`, node inclusion policies,
//! `matchLabelKeys`, and the cluster default constraints (`System` or
//! `List`) applied to pods without constraints of their own.
//!
//! The per-node counts of matching pods that PreFilter and PreScore fold
//! into domain totals are kept across cycles ([`crate::node_memo`]): a
//! cycle recounts only the nodes that changed since the last pod with the
//! same constraints, namespace and node-inclusion fields.

mod filtering;
pub mod hints;
mod scoring;

use std::sync::Arc;

use rkube_config::args::{decode, PodTopologySpreadArgs};
use rkube_framework::{
    ClusterEventWithHint, FilterPlugin, NodeInfo, Plugin, PreFilterPlugin, PreScorePlugin,
    ScorePlugin, Snapshot,
};
use rkube_model::convert;
use rkube_model::selector::NodeSelector;
use rkube_model::selector::{Operator, Requirement};
use rkube_model::workloads::WorkloadSelectors;
use rkube_model::{LabelSelector, Labels, Node, Pod, Toleration, TopologySpreadConstraint};

use crate::helper::{find_untolerated_do_not_schedule, required_node_affinity_matches, FastMap};
use crate::node_memo::{fold_counted, Fold, SharedMemo};

/// Upstream name.
pub const NAME: &str = "PodTopologySpread";
/// A constraint's skew would be exceeded.
pub const ERR_REASON_CONSTRAINTS_NOT_MATCH: &str =
    "node(s) didn't match pod topology spread constraints";
/// The node lacks a constraint's topology key.
pub const ERR_REASON_NODE_LABEL_NOT_MATCH: &str =
    "node(s) didn't match pod topology spread constraints (missing required label)";

pub(crate) const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";
pub(crate) const LABEL_ZONE: &str = "topology.kubernetes.io/zone";

/// The plugin.
#[derive(Debug, Clone)]
pub struct PodTopologySpread {
    /// Constraints for pods without their own.
    default_constraints: Vec<TopologySpreadConstraint>,
    /// `defaultingType: System`.
    system_defaulted: bool,
    /// The per-node counts of earlier cycles.
    memo: Arc<Memos>,
}

/// The counts kept across cycles: PreFilter's and PreScore's.
#[derive(Debug)]
pub(crate) struct Memos {
    filter: SharedMemo<CountKey, DomainTotals>,
    score: SharedMemo<CountKey, DomainTotals>,
}

/// Keys (constraint sets with their pods' namespaces and inclusion fields)
/// kept per memo.
const MEMO_KEYS: usize = 8;

impl Default for Memos {
    fn default() -> Self {
        Memos {
            filter: SharedMemo::new(MEMO_KEYS),
            score: SharedMemo::new(MEMO_KEYS),
        }
    }
}

impl Default for PodTopologySpread {
    fn default() -> Self {
        PodTopologySpread {
            default_constraints: system_default_constraints(),
            system_defaulted: true,
            memo: Arc::default(),
        }
    }
}

/// What a node's part of the domain totals depends on besides the node:
/// the constraints, the incoming pod's namespace (pods are counted in it),
/// its node selector and required node affinity (`nodeAffinityPolicy:
/// Honor`), its tolerations when a constraint honours taints, whether nodes
/// must have every topology key, and whether hostname constraints are left
/// out (PreScore counts them in Score).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CountKey {
    constraints: Vec<Constraint>,
    namespace: String,
    node_selector: Labels,
    required_affinity: Option<NodeSelector>,
    tolerations: Vec<Toleration>,
    require_all: bool,
    skip_hostname: bool,
}

/// The walk both PreFilter and PreScore make, with its key's parameters.
pub(crate) struct CountWalk<'a> {
    pub pod: &'a Pod,
    pub constraints: &'a [Constraint],
    pub require_all: bool,
    pub skip_hostname: bool,
}

impl CountWalk<'_> {
    fn required_affinity(&self) -> Option<&NodeSelector> {
        self.pod
            .node_affinity
            .as_ref()
            .and_then(|a| a.required.as_ref())
    }

    fn tolerations(&self) -> &[Toleration] {
        if self.constraints.iter().any(|c| c.node_taints_honor) {
            &self.pod.tolerations
        } else {
            &[]
        }
    }

    fn is_key(&self, k: &CountKey) -> bool {
        k.require_all == self.require_all
            && k.skip_hostname == self.skip_hostname
            && k.namespace == self.pod.namespace
            && k.constraints == self.constraints
            && k.node_selector == self.pod.node_selector
            && k.required_affinity.as_ref() == self.required_affinity()
            && k.tolerations == self.tolerations()
    }

    fn key(&self) -> CountKey {
        CountKey {
            constraints: self.constraints.to_vec(),
            namespace: self.pod.namespace.clone(),
            node_selector: self.pod.node_selector.clone(),
            required_affinity: self.required_affinity().cloned(),
            tolerations: self.tolerations().to_vec(),
            require_all: self.require_all,
            skip_hostname: self.skip_hostname,
        }
    }

    /// One node's (constraint, topology value, matching pods) entries: one
    /// per constraint the node counts for (a node without the key has value
    /// "" unless every key is required).
    fn part(&self, n: &NodeInfo) -> Vec<(usize, String, i64)> {
        let node = &n.node;
        if self.require_all && !node_has_all_keys(node, self.constraints) {
            return Vec::new();
        }
        let affinity = node_affinity_matches(self.pod, node);
        let mut out = Vec::new();
        for (i, c) in self.constraints.iter().enumerate() {
            if (self.skip_hostname && c.topology_key == LABEL_HOSTNAME)
                || !c.includes(self.pod, node, affinity)
            {
                continue;
            }
            let value = node.labels.get(&c.topology_key).map_or("", |v| v.as_str());
            out.push((i, value.to_string(), c.count_pods(n, &self.pod.namespace)));
        }
        out
    }

    /// The totals over every node of `snapshot`, from `memo`.
    pub(crate) fn totals(
        &self,
        memo: &SharedMemo<CountKey, DomainTotals>,
        snapshot: &Snapshot,
    ) -> DomainTotals {
        memo.lock().total(
            |k| self.is_key(k),
            || self.key(),
            snapshot,
            |n| self.part(n),
        )
    }
}

/// Per constraint: topology value → (matching pods, nodes counted). A value
/// is a domain while some node counts for it, even with no matching pod.
#[derive(Debug, Clone, Default)]
pub(crate) struct DomainTotals(Arc<Vec<FastMap<String, (i64, u32)>>>);

impl DomainTotals {
    /// Matching pods in the domain (0 when it is none).
    pub(crate) fn get(&self, i: usize, value: &str) -> Option<i64> {
        self.0.get(i).and_then(|m| m.get(value)).map(|e| e.0)
    }

    /// The domains of constraint `i` with their counts.
    pub(crate) fn domains(&self, i: usize) -> impl Iterator<Item = (&str, i64)> {
        self.0
            .get(i)
            .into_iter()
            .flat_map(|m| m.iter().map(|(v, e)| (v.as_str(), e.0)))
    }

    /// Number of domains of constraint `i`.
    pub(crate) fn len(&self, i: usize) -> usize {
        self.0.get(i).map_or(0, |m| m.len())
    }
}

impl Fold for DomainTotals {
    type Part = Vec<(usize, String, i64)>;
    fn fold(&mut self, part: &Self::Part, sign: i64) {
        if part.is_empty() {
            return;
        }
        let all = Arc::make_mut(&mut self.0);
        for (i, v, c) in part {
            if all.len() <= *i {
                all.resize_with(i + 1, FastMap::default);
            }
            fold_counted(&mut all[*i], v, *c, sign);
        }
    }
}

/// Upstream's `systemDefaultConstraints`: hostname (maxSkew 3) then zone
/// (maxSkew 5), both `ScheduleAnyway`.
pub fn system_default_constraints() -> Vec<TopologySpreadConstraint> {
    [(LABEL_HOSTNAME, 3), (LABEL_ZONE, 5)]
        .into_iter()
        .map(|(key, skew)| TopologySpreadConstraint {
            max_skew: skew,
            topology_key: key.to_string(),
            do_not_schedule: false,
            selector: None,
            min_domains: None,
            node_affinity_honor: true,
            node_taints_honor: false,
            match_label_keys: Vec::new(),
        })
        .collect()
}

fn convert_default(
    c: &k8s_openapi::api::core::v1::TopologySpreadConstraint,
    path: &str,
) -> Result<TopologySpreadConstraint, String> {
    let do_not_schedule = match c.when_unsatisfiable.as_str() {
        "DoNotSchedule" => true,
        "ScheduleAnyway" => false,
        other => {
            return Err(format!(
                "{path}.whenUnsatisfiable: Unsupported value: {other:?}: supported values: \"DoNotSchedule\", \"ScheduleAnyway\""
            ))
        }
    };
    let policy = |v: &Option<String>, field: &str, default: bool| match v.as_deref() {
        None => Ok(default),
        Some("Honor") => Ok(true),
        Some("Ignore") => Ok(false),
        Some(other) => Err(format!(
            "{path}.{field}: Unsupported value: {other:?}: supported values: \"Honor\", \"Ignore\""
        )),
    };
    Ok(TopologySpreadConstraint {
        max_skew: c.max_skew,
        topology_key: c.topology_key.clone(),
        do_not_schedule,
        selector: c
            .label_selector
            .as_ref()
            .map(|s| convert::label_selector(s, &format!("{path}.labelSelector")))
            .transpose()
            .map_err(|e| e.to_string())?,
        min_domains: c.min_domains,
        node_affinity_honor: policy(&c.node_affinity_policy, "nodeAffinityPolicy", true)?,
        node_taints_honor: policy(&c.node_taints_policy, "nodeTaintsPolicy", false)?,
        match_label_keys: c.match_label_keys.clone().unwrap_or_default(),
    })
}

/// Builds the plugin from `PodTopologySpreadArgs`.
pub fn new(args: &serde_json::Value, path: &str) -> Result<Arc<dyn Plugin>, String> {
    let a: PodTopologySpreadArgs = decode(args, path).map_err(|e| e.to_string())?;
    Ok(Arc::new(from_args(&a, path)?))
}

/// Builds the plugin from decoded args.
pub fn from_args(a: &PodTopologySpreadArgs, path: &str) -> Result<PodTopologySpread, String> {
    match a.defaulting_type.as_str() {
        "" | "System" => {
            if !a.default_constraints.is_empty() {
                return Err(format!(
                    "{path}.defaultConstraints: Invalid value: \"...\": when .defaultingType is \"System\", .defaultConstraints must be empty"
                ));
            }
            Ok(PodTopologySpread::default())
        }
        "List" => {
            let default_constraints = a
                .default_constraints
                .iter()
                .enumerate()
                .map(|(i, c)| convert_default(c, &format!("{path}.defaultConstraints[{i}]")))
                .collect::<Result<_, _>>()?;
            Ok(PodTopologySpread {
                default_constraints,
                system_defaulted: false,
                memo: Arc::default(),
            })
        }
        other => Err(format!(
            "{path}.defaultingType: Unsupported value: {other:?}: supported values: \"List\", \"System\""
        )),
    }
}

impl PodTopologySpread {
    /// True when default constraints apply to pods without their own
    /// (`defaultingType: System`, or a non-empty `List`).
    pub fn has_default_constraints(&self) -> bool {
        !self.default_constraints.is_empty()
    }
}

impl Plugin for PodTopologySpread {
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
        Some(self.events())
    }
}

/// A constraint with its selector resolved (upstream's internal
/// `topologySpreadConstraint`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Constraint {
    pub max_skew: i32,
    pub topology_key: String,
    /// `None` matches nothing.
    pub selector: Option<LabelSelector>,
    pub min_domains: i32,
    pub node_affinity_honor: bool,
    pub node_taints_honor: bool,
}

impl Constraint {
    pub(crate) fn matches(&self, labels: &Labels) -> bool {
        self.selector.as_ref().is_some_and(|s| s.matches(labels))
    }

    /// Does the node count for this constraint under its inclusion policies?
    /// `affinity_match` is the pod's required node affinity verdict.
    pub(crate) fn includes(&self, pod: &Pod, node: &Node, affinity_match: bool) -> bool {
        if self.node_affinity_honor && !affinity_match {
            return false;
        }
        if self.node_taints_honor
            && find_untolerated_do_not_schedule(&node.taints, &pod.tolerations).is_some()
        {
            return false;
        }
        true
    }

    /// Upstream's `countPodsMatchSelector`: matching, non-terminating pods
    /// of namespace `ns`; an empty selector counts nothing.
    pub(crate) fn count_pods(&self, node: &NodeInfo, ns: &str) -> i64 {
        let Some(sel) = &self.selector else {
            return 0;
        };
        if sel.is_empty() {
            return 0;
        }
        node.pods
            .iter()
            .filter(|p| !p.terminating && p.namespace == ns && sel.matches(&p.labels))
            .count() as i64
    }
}

/// Does the node have every constraint's topology key?
pub(crate) fn node_has_all_keys(node: &Node, constraints: &[Constraint]) -> bool {
    constraints
        .iter()
        .all(|c| node.labels.contains_key(&c.topology_key))
}

pub(crate) fn node_affinity_matches(pod: &Pod, node: &Node) -> bool {
    required_node_affinity_matches(pod, node)
}

impl PodTopologySpread {
    /// Upstream's `filterTopologySpreadConstraints`: the constraints with the
    /// given action, `matchLabelKeys` merged into their selectors.
    fn filter_constraints(
        constraints: &[TopologySpreadConstraint],
        labels: &Labels,
        do_not_schedule: bool,
    ) -> Vec<Constraint> {
        constraints
            .iter()
            .filter(|c| c.do_not_schedule == do_not_schedule)
            .map(|c| {
                let selector = c.selector.as_ref().map(|s| {
                    let mut merged: Vec<Requirement> = Vec::new();
                    let mut seen: Vec<&str> = Vec::new();
                    for k in &c.match_label_keys {
                        if let Some(v) = labels.get(k) {
                            if !seen.contains(&k.as_str()) {
                                seen.push(k);
                                merged.push(Requirement {
                                    key: k.clone(),
                                    op: Operator::In,
                                    values: vec![v.clone()],
                                });
                            }
                        }
                    }
                    merged.extend(s.requirements.iter().cloned());
                    LabelSelector {
                        requirements: merged,
                    }
                });
                Constraint {
                    max_skew: c.max_skew,
                    topology_key: c.topology_key.clone(),
                    selector,
                    min_domains: c.min_domains.unwrap_or(1),
                    node_affinity_honor: c.node_affinity_honor,
                    node_taints_honor: c.node_taints_honor,
                }
            })
            .collect()
    }

    /// The pod's constraints with the given action, or the default
    /// constraints (with the pod's default selector) when it has none.
    pub(crate) fn constraints(
        &self,
        pod: &Pod,
        snapshot: &Snapshot,
        do_not_schedule: bool,
    ) -> Vec<Constraint> {
        self.constraints_with(pod, &snapshot.workloads, do_not_schedule)
    }

    /// [`PodTopologySpread::constraints`] with the workloads that give a
    /// pod its default selector.
    pub(crate) fn constraints_with(
        &self,
        pod: &Pod,
        workloads: &WorkloadSelectors,
        do_not_schedule: bool,
    ) -> Vec<Constraint> {
        if !pod.topology_spread_constraints.is_empty() {
            return Self::filter_constraints(
                &pod.topology_spread_constraints,
                &pod.labels,
                do_not_schedule,
            );
        }
        let mut constraints =
            Self::filter_constraints(&self.default_constraints, &pod.labels, do_not_schedule);
        if constraints.is_empty() {
            return constraints;
        }
        let selector = workloads.default_selector(pod);
        if selector.is_empty() {
            return Vec::new();
        }
        for c in &mut constraints {
            c.selector = Some(selector.clone());
        }
        constraints
    }
}

/// Spreading depends on where other pods are: a pod with constraints, or
/// any pod when default constraints apply, is not batchable.
impl rkube_framework::SignPlugin for PodTopologySpread {
    fn sign(
        &self,
        pod: &rkube_model::Pod,
        _: &rkube_framework::Snapshot,
    ) -> rkube_framework::Signed {
        if !pod.topology_spread_constraints.is_empty() || self.refuses_every_pod() {
            return rkube_framework::Signed::Refused;
        }
        rkube_framework::Signed::Fragments(Vec::new())
    }
    fn refuses_every_pod(&self) -> bool {
        self.has_default_constraints()
    }
}
