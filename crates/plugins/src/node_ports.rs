//! NodePorts: host ports the pod asks for must be free on the node.

use rkube_framework::events::objects_as;
use rkube_framework::{
    ActionType, ClusterEventWithHint, Code, CycleState, EventObject, EventResource, FilterPlugin,
    HintContext, HintResult, HostPortInfo, NodeInfo, Plugin, PreFilterPlugin, PreFilterResult,
    QueueingHint, Snapshot, Status,
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
    /// Container ports are immutable, so pod updates are not registered.
    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        Some(vec![
            ClusterEventWithHint::with_hint(
                EventResource::AssignedPod,
                ActionType::DELETE,
                is_schedulable_after_assigned_pod_deleted,
            ),
            ClusterEventWithHint::always(EventResource::Node, ActionType::ADD),
        ])
    }
}

/// A scheduled pod was deleted: did it hold a host port the pod wants?
pub fn is_schedulable_after_assigned_pod_deleted(
    pod: &Pod,
    old: Option<&EventObject>,
    _new: Option<&EventObject>,
    _: &HintContext<'_>,
) -> HintResult {
    let (deleted, _) = objects_as::<Pod>(old, None)?;
    let deleted = deleted.ok_or("no deleted pod")?;
    if deleted.node_name.is_empty() && deleted.nominated_node_name.is_empty() {
        return Ok(QueueingHint::QueueSkip);
    }
    let mut in_use = HostPortInfo::default();
    for p in deleted.host_ports() {
        in_use.add(p);
    }
    if in_use.is_empty() || !pod.host_ports().any(|p| in_use.conflicts(p)) {
        return Ok(QueueingHint::QueueSkip);
    }
    Ok(QueueingHint::Queue)
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

/// The batching signature of this plugin (OpportunisticBatching).
impl rkube_framework::SignPlugin for NodePorts {
    fn sign(
        &self,
        pod: &rkube_model::Pod,
        _: &rkube_framework::Snapshot,
    ) -> rkube_framework::Signed {
        crate::signers::fragments([crate::signers::host_ports(pod)])
    }
}

#[cfg(test)]
mod tests {
    //! The hint, with upstream's `TestNodePortsIsSchedulableAfterAssignedPodDeleted` cases.

    use super::*;
    use crate::helper::testing::*;
    use rkube_model::Container;

    /// `st.MakePod().HostPort(port)` (TCP, any IP), bound to `node`.
    fn with_port(node: &str, port: Option<i32>) -> Pod {
        let mut p = pod("p");
        p.node_name = node.into();
        p.containers = vec![Container {
            host_ports: port
                .into_iter()
                .map(|port| HostPort {
                    host_ip: "0.0.0.0".into(),
                    protocol: "TCP".into(),
                    port,
                })
                .collect(),
            ..Default::default()
        }];
        p
    }

    #[test]
    fn assigned_pod_deleted() {
        let target = with_port("", Some(8080));
        let h = |deleted: Pod| {
            run(
                is_schedulable_after_assigned_pod_deleted,
                &target,
                Some(pod_obj(deleted)),
                None,
            )
        };
        assert!(is_schedulable_after_assigned_pod_deleted(
            &target,
            Some(&node_obj(rkube_model::Node::default())),
            None,
            &HintContext::empty()
        )
        .is_err());
        assert_eq!(h(pod("x")), QueueSkip, "skip-queue-on-unscheduled");
        assert_eq!(
            h(with_port("fake-node", None)),
            QueueSkip,
            "skip-queue-on-non-hostport"
        );
        assert_eq!(
            h(with_port("fake-node", Some(8081))),
            QueueSkip,
            "skip-queue-on-unrelated-hostport"
        );
        assert_eq!(
            h(with_port("fake-node", Some(8080))),
            Queue,
            "queue-on-released-hostport"
        );
    }
}
