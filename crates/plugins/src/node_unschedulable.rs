//! NodeUnschedulable: `spec.unschedulable` nodes only take pods that tolerate
//! `node.kubernetes.io/unschedulable:NoSchedule`.

use rkube_framework::events::objects_as;
use rkube_framework::{
    ActionType, ClusterEventWithHint, Code, CycleState, EventObject, EventResource, FilterPlugin,
    HintContext, HintResult, NodeInfo, Plugin, QueueingHint, Status,
};
use rkube_model::{Node, Pod, Taint, TaintEffect};

use crate::helper::tolerations_tolerate;

/// Upstream name.
pub const NAME: &str = "NodeUnschedulable";
/// Upstream's reason.
pub const ERR_REASON_UNSCHEDULABLE: &str = "node(s) were unschedulable";

/// The plugin.
pub struct NodeUnschedulable;

impl Plugin for NodeUnschedulable {
    fn as_sign(&self) -> Option<&dyn rkube_framework::SignPlugin> {
        Some(self)
    }
    fn name(&self) -> &'static str {
        NAME
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        Some(vec![
            ClusterEventWithHint::with_hint(
                EventResource::Node,
                ActionType::ADD | ActionType::UPDATE_NODE_TAINT,
                is_schedulable_after_node_change,
            ),
            ClusterEventWithHint::with_hint(
                EventResource::TargetPod,
                ActionType::UPDATE_POD_TOLERATION,
                is_schedulable_after_target_pod_toleration_change,
            ),
        ])
    }
}

fn unschedulable_taint() -> Taint {
    Taint {
        key: "node.kubernetes.io/unschedulable".into(),
        value: String::new(),
        effect: TaintEffect::NoSchedule,
    }
}

/// A schedulable node was added, or a node became schedulable.
pub fn is_schedulable_after_node_change(
    _pod: &Pod,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
    _: &HintContext<'_>,
) -> HintResult {
    let (original, modified) = objects_as::<Node>(old, new)?;
    let modified = modified.ok_or("no modified node")?;
    let now_schedulable = match original {
        Some(o) => o.unschedulable && !modified.unschedulable,
        None => !modified.unschedulable,
    };
    Ok(if now_schedulable {
        QueueingHint::Queue
    } else {
        QueueingHint::QueueSkip
    })
}

/// The pod got a toleration: is it one for the unschedulable taint?
/// (Tolerations can only be added, and the pod was rejected, so it did not
/// tolerate the taint before.)
pub fn is_schedulable_after_target_pod_toleration_change(
    _pod: &Pod,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
    _: &HintContext<'_>,
) -> HintResult {
    let (_, modified) = objects_as::<Pod>(old, new)?;
    let modified = modified.ok_or("no modified pod")?;
    Ok(
        if tolerations_tolerate(&modified.tolerations, &unschedulable_taint()) {
            QueueingHint::Queue
        } else {
            QueueingHint::QueueSkip
        },
    )
}

impl FilterPlugin for NodeUnschedulable {
    fn filter(&self, _: &CycleState, pod: &Pod, node: &NodeInfo) -> Status {
        if !node.node.unschedulable {
            return Status::success();
        }
        if tolerations_tolerate(&pod.tolerations, &unschedulable_taint()) {
            Status::success()
        } else {
            Status::new(Code::UnschedulableAndUnresolvable, ERR_REASON_UNSCHEDULABLE)
        }
    }
}

/// The batching signature of this plugin (OpportunisticBatching).
impl rkube_framework::SignPlugin for NodeUnschedulable {
    fn sign(
        &self,
        pod: &rkube_model::Pod,
        _: &rkube_framework::Snapshot,
    ) -> rkube_framework::Signed {
        crate::signers::fragments([crate::signers::tolerations(pod)])
    }
}

#[cfg(test)]
mod tests {
    //! The hints, with upstream's `TestIsSchedulableAfterNodeChange` and
    //! `TestIsSchedulableAfterPodTolerationChange` cases.

    use super::*;
    use crate::helper::testing::*;
    use rkube_model::Toleration;

    fn n(unschedulable: bool, labels: &[(&str, &str)]) -> Node {
        let mut n = node("n", labels);
        n.unschedulable = unschedulable;
        n
    }

    #[test]
    fn node_change() {
        let p = pod("p");
        let h = |old: Option<Node>, new: Node| {
            run(
                is_schedulable_after_node_change,
                &p,
                old.map(node_obj),
                Some(node_obj(new)),
            )
        };
        assert!(is_schedulable_after_node_change(
            &p,
            None,
            Some(&pod_obj(pod("x"))),
            &HintContext::empty()
        )
        .is_err());
        assert_eq!(
            h(None, n(true, &[])),
            QueueSkip,
            "skip-queue-on-unschedulable-node-added"
        );
        assert_eq!(
            h(None, n(false, &[])),
            Queue,
            "queue-on-schedulable-node-added"
        );
        assert_eq!(
            h(Some(n(true, &[])), n(true, &[("foo", "bar")])),
            QueueSkip,
            "skip-unrelated-change-unschedulable-true"
        );
        assert_eq!(
            h(Some(n(false, &[])), n(false, &[("foo", "bar")])),
            QueueSkip,
            "skip-unrelated-change-unschedulable-false"
        );
        assert_eq!(
            h(Some(n(true, &[])), n(false, &[])),
            Queue,
            "queue-on-unschedulable-field-change"
        );
        assert_eq!(
            h(Some(n(false, &[])), n(true, &[])),
            QueueSkip,
            "skip-queue-on-unschedulable-field-change"
        );
    }

    #[test]
    fn toleration_change() {
        let before = pod("p");
        let with = |key: &str| {
            let mut p = pod("p");
            p.tolerations = vec![Toleration {
                key: key.into(),
                exists: true,
                value: String::new(),
                effect: Some(TaintEffect::NoSchedule),
            }];
            p
        };
        let h = |after: Pod| {
            run(
                is_schedulable_after_target_pod_toleration_change,
                &before,
                Some(pod_obj(before.clone())),
                Some(pod_obj(after)),
            )
        };
        assert_eq!(h(with("node.kubernetes.io/unschedulable")), Queue);
        assert_eq!(h(with("foo")), QueueSkip);
    }
}
