//! PodTopologySpread: `DoNotSchedule` constraints (PreFilter, Filter, with
//! PreFilter extensions) and `ScheduleAnyway` constraints (PreScore, Score,
//! NormalizeScore), with `minDomains`, node inclusion policies,
//! `matchLabelKeys`, and the cluster default constraints (`System` or
//! `List`) applied to pods without constraints of their own.

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
use rkube_model::selector::{Operator, Requirement};
use rkube_model::workloads::WorkloadSelectors;
use rkube_model::{LabelSelector, Labels, Node, Pod, TopologySpreadConstraint};

use crate::helper::{find_untolerated_do_not_schedule, required_node_affinity_matches};

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
}

impl Default for PodTopologySpread {
    fn default() -> Self {
        PodTopologySpread {
            default_constraints: system_default_constraints(),
            system_defaulted: true,
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
        crate::signers::signer(self)
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
#[derive(Debug, Clone)]
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
