//! Why a pod did not fit: per-node statuses and upstream's FailedScheduling
//! message (`FitError.Error()`), byte for byte.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::fast_hash::FastMap;
use crate::status::{Code, Status};

/// Statuses of rejected nodes, plus the status of nodes not evaluated.
#[derive(Debug, Clone)]
pub struct NodeToStatus {
    /// Explicit statuses by node name (a filter pass records one per
    /// rejected node, so the key is the snapshot's shared name: no copy).
    pub nodes: FastMap<Arc<str>, Status>,
    /// Status of every node absent from `nodes`.
    pub absent: Status,
}

impl Default for NodeToStatus {
    fn default() -> Self {
        NodeToStatus {
            nodes: FastMap::default(),
            absent: Status::with_reasons(Code::UnschedulableAndUnresolvable, Vec::new()),
        }
    }
}

/// Everything needed to explain a scheduling failure.
#[derive(Debug, Clone, Default)]
pub struct Diagnosis {
    /// Per-node statuses.
    pub node_to_status: NodeToStatus,
    /// Plugins that rejected the pod somewhere.
    pub unschedulable_plugins: BTreeSet<&'static str>,
    /// Message of a rejecting PreFilter.
    pub pre_filter_msg: String,
    /// Message of PostFilter (preemption).
    pub post_filter_msg: String,
    /// ResourceClaims (namespace, name) PostFilter deallocated: allocated
    /// for nodes the pod cannot use and reserved by no other pod
    /// (DynamicResources). The host clears their allocation and
    /// `reservedFor`; the claim's change makes the pod schedulable again.
    pub deallocated_claims: Vec<(String, String)>,
    /// ResourceClaims (namespace, name) PostFilter deleted: the claim made
    /// for the pod's extended resources in an earlier cycle, which can no
    /// longer be used (DynamicResources). The host deletes them; the pod is
    /// tried again afresh.
    pub deleted_claims: Vec<(String, String)>,
}

impl Diagnosis {
    /// Records a rejecting status.
    pub fn add_plugin_status(&mut self, s: &Status) {
        if s.is_rejected() && !s.plugin.is_empty() {
            self.unschedulable_plugins.insert(s.plugin);
        }
    }
}

/// Upstream's `FitError.Error()`:
/// `0/3 nodes are available: 1 Insufficient cpu, 2 node(s) had untolerated taint(s). <postfilter>`.
pub fn fit_error_message(num_all_nodes: usize, d: &Diagnosis) -> String {
    let mut msg = format!("0/{num_all_nodes} nodes are available:");
    if !d.pre_filter_msg.is_empty() {
        msg.push_str(&format!(" {}.", d.pre_filter_msg));
    } else {
        let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
        for s in d.node_to_status.nodes.values() {
            for r in &s.reasons {
                *reasons.entry(r.as_ref()).or_default() += 1;
            }
        }
        let explicit = d.node_to_status.nodes.len();
        if explicit < num_all_nodes {
            for r in &d.node_to_status.absent.reasons {
                *reasons.entry(r.as_ref()).or_default() += num_all_nodes - explicit;
            }
        }
        let mut parts: Vec<String> = reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
        parts.sort();
        if !parts.is_empty() {
            msg.push_str(&format!(" {}.", parts.join(", ")));
        }
    }
    if !d.post_filter_msg.is_empty() {
        msg.push_str(&format!(" {}", d.post_filter_msg));
    }
    msg
}

/// Go's `fmt.Sprint` of a string slice: `[A B]`.
pub fn go_list(items: &BTreeSet<&str>) -> String {
    format!("[{}]", items.iter().copied().collect::<Vec<_>>().join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_sorts_reason_counts_as_strings() {
        // From upstream's TestFitError cases: counts are sorted as strings.
        let mut d = Diagnosis::default();
        for (n, r) in [
            ("n1", "Insufficient cpu"),
            ("n2", "node(s) had untolerated taint(s)"),
            ("n3", "node(s) had untolerated taint(s)"),
        ] {
            d.node_to_status
                .nodes
                .insert(n.into(), Status::new(Code::Unschedulable, r));
        }
        assert_eq!(
            fit_error_message(3, &d),
            "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) had untolerated taint(s)."
        );
        d.post_filter_msg =
            "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
                .into();
        assert!(fit_error_message(3, &d).ends_with("taint(s). preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."));
    }

    #[test]
    fn prefilter_message_and_absent_nodes() {
        let d = Diagnosis {
            pre_filter_msg: "node(s) didn't satisfy plugin NodeAffinity".into(),
            ..Default::default()
        };
        assert_eq!(
            fit_error_message(2, &d),
            "0/2 nodes are available: node(s) didn't satisfy plugin NodeAffinity."
        );
        let mut d = Diagnosis::default();
        d.node_to_status.absent = Status::new(
            Code::UnschedulableAndUnresolvable,
            "node(s) didn't satisfy plugin(s) [NodeAffinity]",
        );
        d.node_to_status.nodes.insert(
            "n1".into(),
            Status::new(Code::Unschedulable, "Insufficient cpu"),
        );
        assert_eq!(
            fit_error_message(3, &d),
            "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't satisfy plugin(s) [NodeAffinity]."
        );
    }
}
