//! NodeName: a pod with `spec.nodeName` fits only that node.

use std::collections::BTreeSet;

use rkube_framework::{
    ActionType, ClusterEventWithHint, Code, CycleState, EventResource, FilterPlugin, NodeInfo,
    Plugin, PreFilterPlugin, PreFilterResult, Snapshot, Status,
};
use rkube_model::Pod;

/// Upstream name.
pub const NAME: &str = "NodeName";
/// Upstream's reason.
pub const ERR_REASON: &str = "node(s) didn't match the requested node name";

/// The plugin.
pub struct NodeName;

impl Plugin for NodeName {
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
    /// Only a new node can be the named one; no hint (always retried).
    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        Some(vec![ClusterEventWithHint::always(
            EventResource::Node,
            ActionType::ADD,
        )])
    }
}

impl PreFilterPlugin for NodeName {
    fn pre_filter(&self, _: &mut CycleState, pod: &Pod, _: &Snapshot) -> (PreFilterResult, Status) {
        if pod.node_name.is_empty() {
            return (None, Status::success());
        }
        (
            Some(BTreeSet::from([pod.node_name.clone()])),
            Status::success(),
        )
    }
}

impl FilterPlugin for NodeName {
    fn filter(&self, _: &CycleState, pod: &Pod, node: &NodeInfo) -> Status {
        if pod.node_name.is_empty() || pod.node_name == node.name() {
            Status::success()
        } else {
            Status::new(Code::UnschedulableAndUnresolvable, ERR_REASON)
        }
    }
}

/// The batching signature of this plugin (OpportunisticBatching).
impl rkube_framework::SignPlugin for NodeName {
    fn sign(
        &self,
        pod: &rkube_model::Pod,
        _: &rkube_framework::Snapshot,
    ) -> rkube_framework::Signed {
        crate::signers::fragments([crate::signers::node_name(pod)])
    }
}
