//! TaintToleration: NoSchedule/NoExecute taints must be tolerated (Filter);
//! fewer untolerated PreferNoSchedule taints score higher (Score, reversed).

use rkube_framework::events::objects_as;
use rkube_framework::{
    ActionType, ClusterEventWithHint, Code, CycleState, EventObject, EventResource, FilterPlugin,
    HintContext, HintResult, NodeInfo, NodeScore, Plugin, PreScorePlugin, QueueingHint,
    ScorePlugin, Snapshot, Status, MAX_NODE_SCORE,
};
use rkube_model::{Node, Pod, TaintEffect, Toleration};

use crate::helper::{
    default_normalize_score, find_untolerated_do_not_schedule, tolerations_tolerate,
};

/// Upstream name.
pub const NAME: &str = "TaintToleration";
/// Upstream's filter reason.
pub const ERR_REASON_UNTOLERATED: &str = "node(s) had untolerated taint(s)";

/// The plugin.
pub struct TaintToleration;

struct PreScoreState(Vec<Toleration>);

impl Plugin for TaintToleration {
    fn as_sign(&self) -> Option<&dyn rkube_framework::SignPlugin> {
        Some(self)
    }
    fn name(&self) -> &'static str {
        NAME
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
        Some(vec![
            ClusterEventWithHint::with_hint(
                EventResource::Node,
                ActionType::ADD | ActionType::UPDATE_NODE_TAINT,
                is_schedulable_after_node_change,
            ),
            // The pod got a toleration: it may tolerate the taint now.
            ClusterEventWithHint::with_hint(
                EventResource::TargetPod,
                ActionType::UPDATE_POD_TOLERATION,
                |_, _, _, _| Ok(QueueingHint::Queue),
            ),
        ])
    }
}

/// A node was added or its taints changed: does the pod tolerate it now,
/// where it did not before (an added node counts as not tolerated before)?
pub fn is_schedulable_after_node_change(
    pod: &Pod,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
    _: &HintContext<'_>,
) -> HintResult {
    let (original, modified) = objects_as::<Node>(old, new)?;
    let modified = modified.ok_or("no modified node")?;
    let untolerated =
        |n: &Node| find_untolerated_do_not_schedule(&n.taints, &pod.tolerations).is_some();
    let was_untolerated = original.is_none_or(untolerated);
    if was_untolerated && !untolerated(modified) {
        Ok(QueueingHint::Queue)
    } else {
        Ok(QueueingHint::QueueSkip)
    }
}

impl FilterPlugin for TaintToleration {
    fn filter(&self, _: &CycleState, pod: &Pod, node: &NodeInfo) -> Status {
        match find_untolerated_do_not_schedule(&node.node.taints, &pod.tolerations) {
            None => Status::success(),
            Some(_) => Status::new(Code::UnschedulableAndUnresolvable, ERR_REASON_UNTOLERATED),
        }
    }
}

fn prefer_no_schedule_tolerations(pod: &Pod) -> Vec<Toleration> {
    pod.tolerations
        .iter()
        .filter(|t| t.effect.is_none() || t.effect == Some(TaintEffect::PreferNoSchedule))
        .cloned()
        .collect()
}

impl PreScorePlugin for TaintToleration {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        _: &[&NodeInfo],
        _: &Snapshot,
    ) -> Status {
        state.write(NAME, PreScoreState(prefer_no_schedule_tolerations(pod)));
        Status::success()
    }
}

impl ScorePlugin for TaintToleration {
    fn score(&self, state: &CycleState, pod: &Pod, node: &NodeInfo) -> Result<i64, Status> {
        let owned;
        let tolerations = match state.read::<PreScoreState>(NAME) {
            Some(s) => &s.0,
            None => {
                owned = prefer_no_schedule_tolerations(pod);
                &owned
            }
        };
        Ok(node
            .node
            .taints
            .iter()
            .filter(|t| {
                t.effect == TaintEffect::PreferNoSchedule && !tolerations_tolerate(tolerations, t)
            })
            .count() as i64)
    }
    fn has_normalize(&self) -> bool {
        true
    }
    fn normalize(&self, _: &CycleState, _: &Pod, scores: &mut [NodeScore]) -> Status {
        default_normalize_score(MAX_NODE_SCORE, true, scores)
    }
}

/// The batching signature of this plugin (OpportunisticBatching).
impl rkube_framework::SignPlugin for TaintToleration {
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
    //! The hint, with upstream's `Test_isSchedulableAfterNodeChange` cases.

    use super::*;
    use crate::helper::testing::*;
    use rkube_model::Taint;

    fn tainted(values: &[&str]) -> Node {
        let mut n = node("nodeA", &[]);
        n.taints = values
            .iter()
            .map(|v| Taint {
                key: "dedicated".into(),
                value: v.to_string(),
                effect: TaintEffect::NoSchedule,
            })
            .collect();
        n
    }

    #[test]
    fn node_change() {
        let mut p = pod("pod1");
        p.tolerations = vec![Toleration {
            key: "dedicated".into(),
            exists: false,
            value: "user2".into(),
            effect: Some(TaintEffect::NoSchedule),
        }];
        let h = |old: Option<Node>, new: Node| {
            run(
                is_schedulable_after_node_change,
                &p,
                old.map(node_obj),
                Some(node_obj(new)),
            )
        };
        let wrong = pod_obj(pod("x"));
        assert!(is_schedulable_after_node_change(
            &p,
            Some(&wrong),
            Some(&node_obj(tainted(&["user1"]))),
            &HintContext::empty()
        )
        .is_err());
        assert_eq!(
            h(None, tainted(&["user1"])),
            QueueSkip,
            "skip-queue-on-untoleratedtaint-node-added"
        );
        assert_eq!(
            h(None, tainted(&["user2"])),
            Queue,
            "queue-on-toleratedtaint-node-added"
        );
        assert_eq!(
            h(Some(tainted(&["user1"])), tainted(&["user1", "user3"])),
            QueueSkip,
            "skip-unrelated-change"
        );
        assert_eq!(
            h(Some(tainted(&["user1"])), tainted(&["user2"])),
            Queue,
            "queue-on-taint-change"
        );
    }
}
