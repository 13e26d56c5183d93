//! NodeDeclaredFeatures (GA in v1.37, locked on): a pod that needs node
//! features (inferred from its spec, `rkube_model::convert::required_node_features`)
//! only fits nodes whose `status.declaredFeatures` list them all.

use rkube_framework::events::objects_as;
use rkube_framework::{
    ActionType, ClusterEventWithHint, Code, CycleState, EventObject, EventResource, FilterPlugin,
    HintContext, HintResult, NodeInfo, Plugin, PreFilterPlugin, PreFilterResult, QueueingHint,
    Snapshot, Status,
};
use rkube_model::{Node, Pod};

/// Upstream name.
pub const NAME: &str = "NodeDeclaredFeatures";
/// Upstream's reason.
pub const ERR_REASON_UNSATISFIED_REQUIREMENTS: &str =
    "node(s) didn't match Pod's required features";

/// The plugin.
pub struct NodeDeclaredFeatures;

impl Plugin for NodeDeclaredFeatures {
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
    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        Some(vec![
            ClusterEventWithHint::with_hint(
                EventResource::Node,
                ActionType::ADD | ActionType::UPDATE_NODE_DECLARED_FEATURE,
                is_schedulable_after_node_change,
            ),
            ClusterEventWithHint::with_hint(
                EventResource::TargetPod,
                ActionType::UPDATE,
                is_schedulable_after_target_pod_update,
            ),
        ])
    }
}

/// A node was added, or its declared features changed.
pub fn is_schedulable_after_node_change(
    _pod: &Pod,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
    _: &HintContext<'_>,
) -> HintResult {
    let (old, new) = objects_as::<Node>(old, new)?;
    let new = new.ok_or("no modified node")?;
    Ok(match old {
        Some(old) if old.declared_features == new.declared_features => QueueingHint::QueueSkip,
        _ => QueueingHint::Queue,
    })
}

/// The pod's own update changed the features it needs.
pub fn is_schedulable_after_target_pod_update(
    _pod: &Pod,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
    _: &HintContext<'_>,
) -> HintResult {
    let (old, new) = objects_as::<Pod>(old, new)?;
    let (Some(old), Some(new)) = (old, new) else {
        return Err("no original or modified pod".into());
    };
    Ok(if old.required_features == new.required_features {
        QueueingHint::QueueSkip
    } else {
        QueueingHint::Queue
    })
}

impl PreFilterPlugin for NodeDeclaredFeatures {
    fn pre_filter(&self, _: &mut CycleState, pod: &Pod, _: &Snapshot) -> (PreFilterResult, Status) {
        if pod.required_features.is_empty() {
            (None, Status::skip())
        } else {
            (None, Status::success())
        }
    }
}

impl FilterPlugin for NodeDeclaredFeatures {
    fn filter(&self, _: &CycleState, pod: &Pod, node: &NodeInfo) -> Status {
        let declared = &node.node.declared_features;
        if pod
            .required_features
            .iter()
            .all(|f| declared.iter().any(|d| d == f))
        {
            Status::success()
        } else {
            Status::new(
                Code::UnschedulableAndUnresolvable,
                ERR_REASON_UNSATISFIED_REQUIREMENTS,
            )
        }
    }
}

/// The batching signature of this plugin (OpportunisticBatching): the
/// features the pod needs.
impl rkube_framework::SignPlugin for NodeDeclaredFeatures {
    fn sign(&self, pod: &Pod, _: &Snapshot) -> rkube_framework::Signed {
        crate::signers::fragments([(
            crate::signers::FEATURES,
            serde_json::json!(pod.required_features.join(",")),
        )])
    }
}

#[cfg(test)]
mod tests {
    //! The hints, as upstream's `TestIsSchedulableAfterNodeChange` and
    //! `TestIsSchedulableAfterTargetPodUpdate` decide them.

    use super::*;
    use crate::helper::testing::*;

    fn declaring(features: &[&str]) -> Node {
        let mut n = node("n", &[]);
        n.declared_features = features.iter().map(|f| f.to_string()).collect();
        n
    }

    fn needing(features: &[&'static str]) -> Pod {
        let mut p = pod("p");
        p.required_features = features.to_vec();
        p
    }

    #[test]
    fn node_change() {
        let p = needing(&["VolumeBindMountOptions"]);
        let h = |old: Option<Node>, new: Node| {
            run(
                is_schedulable_after_node_change,
                &p,
                old.map(node_obj),
                Some(node_obj(new)),
            )
        };
        assert_eq!(h(None, declaring(&[])), Queue, "a new node");
        assert_eq!(
            h(Some(declaring(&["A"])), declaring(&["A"])),
            QueueSkip,
            "features unchanged"
        );
        assert_eq!(
            h(
                Some(declaring(&["A"])),
                declaring(&["A", "VolumeBindMountOptions"])
            ),
            Queue,
            "a feature declared"
        );
    }

    #[test]
    fn target_pod_update() {
        let p = needing(&[]);
        let h = |old: Pod, new: Pod| {
            run(
                is_schedulable_after_target_pod_update,
                &p,
                Some(pod_obj(old)),
                Some(pod_obj(new)),
            )
        };
        assert_eq!(
            h(
                needing(&["VolumeBindMountOptions"]),
                needing(&["VolumeBindMountOptions"])
            ),
            QueueSkip
        );
        assert_eq!(h(needing(&["VolumeBindMountOptions"]), needing(&[])), Queue);
    }
}
