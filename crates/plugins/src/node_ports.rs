//! NodePorts: host ports the pod asks for must be free on the node.

use rkube_framework::{
    Code, CycleState, FilterPlugin, NodeInfo, Plugin, PreFilterPlugin, PreFilterResult, Snapshot,
    Status,
};
use rkube_model::{HostPort, Pod};

/// Upstream name.
pub const NAME: &str = "NodePorts";
/// Upstream's reason.
pub const ERR_REASON: &str = "node(s) didn't have free ports for the requested pod ports";

/// The plugin.
pub struct NodePorts;

struct WantPorts(Vec<HostPort>);

impl Plugin for NodePorts {
    fn name(&self) -> &'static str {
        NAME
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
}

impl PreFilterPlugin for NodePorts {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        _: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let ports: Vec<HostPort> = pod.host_ports().cloned().collect();
        if ports.is_empty() {
            return (None, Status::skip());
        }
        state.write(NAME, WantPorts(ports));
        (None, Status::success())
    }
}

impl FilterPlugin for NodePorts {
    fn filter(&self, state: &CycleState, pod: &Pod, node: &NodeInfo) -> Status {
        let owned;
        let want = match state.read::<WantPorts>(NAME) {
            Some(w) => &w.0,
            None => {
                owned = pod.host_ports().cloned().collect::<Vec<_>>();
                &owned
            }
        };
        if want.iter().any(|p| node.used_ports.conflicts(p)) {
            Status::new(Code::Unschedulable, ERR_REASON)
        } else {
            Status::success()
        }
    }
}
