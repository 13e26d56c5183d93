//! TaintToleration: NoSchedule/NoExecute taints must be tolerated (Filter);
//! fewer untolerated PreferNoSchedule taints score higher (Score, reversed).

use rkube_framework::{
    Code, CycleState, FilterPlugin, NodeInfo, NodeScore, Plugin, PreScorePlugin, ScorePlugin,
    Snapshot, Status, MAX_NODE_SCORE,
};
use rkube_model::{Pod, TaintEffect, Toleration};

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
