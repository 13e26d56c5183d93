//! NodeUnschedulable: `spec.unschedulable` nodes only take pods that tolerate
//! `node.kubernetes.io/unschedulable:NoSchedule`.

use rkube_framework::{Code, CycleState, FilterPlugin, NodeInfo, Plugin, Status};
use rkube_model::{Pod, Taint, TaintEffect};

use crate::helper::tolerations_tolerate;

/// Upstream name.
pub const NAME: &str = "NodeUnschedulable";
/// Upstream's reason.
pub const ERR_REASON_UNSCHEDULABLE: &str = "node(s) were unschedulable";

/// The plugin.
pub struct NodeUnschedulable;

impl Plugin for NodeUnschedulable {
    fn name(&self) -> &'static str {
        NAME
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
}

impl FilterPlugin for NodeUnschedulable {
    fn filter(&self, _: &CycleState, pod: &Pod, node: &NodeInfo) -> Status {
        if !node.node.unschedulable {
            return Status::success();
        }
        let taint = Taint {
            key: "node.kubernetes.io/unschedulable".into(),
            value: String::new(),
            effect: TaintEffect::NoSchedule,
        };
        if tolerations_tolerate(&pod.tolerations, &taint) {
            Status::success()
        } else {
            Status::new(Code::UnschedulableAndUnresolvable, ERR_REASON_UNSCHEDULABLE)
        }
    }
}
