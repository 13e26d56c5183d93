//! Default plugins whose work does not arise for the objects rkube models
//! (GangScheduling). Each behaves as upstream does for a pod that does not
//! use the feature: GangScheduling admits pods without a pod group.

use std::sync::Arc;

use rkube_framework::{
    ActionType, ClusterEventWithHint, Code, CycleState, EventResource, FilterPlugin, NodeInfo,
    PermitPlugin, Plugin, PreEnqueuePlugin, PreFilterPlugin, PreFilterResult, PreScorePlugin,
    ScorePlugin, Snapshot, Status,
};
use rkube_model::Pod;

/// A plugin that skips unless the pod uses a feature.
pub struct SkipUnless {
    name: &'static str,
    uses: fn(&Pod) -> bool,
    reason: &'static str,
    score: bool,
    /// PreScore skips (no score entry) instead of scoring 0.
    skip_score: bool,
    pre_enqueue: bool,
    permit: bool,
    /// Upstream's event registrations, without hints (see each constructor).
    events: fn() -> Vec<ClusterEventWithHint>,
}

fn never(_: &Pod) -> bool {
    false
}

fn plugin(name: &'static str, uses: fn(&Pod) -> bool, reason: &'static str) -> SkipUnless {
    SkipUnless {
        name,
        uses,
        reason,
        score: false,
        skip_score: false,
        pre_enqueue: false,
        permit: false,
        events: Vec::new,
    }
}

/// GangScheduling: only pods of a workload's pod group are gated.
pub fn gang_scheduling() -> Arc<dyn Plugin> {
    Arc::new(SkipUnless {
        pre_enqueue: true,
        permit: true,
        // Upstream's registrations, unhinted: rkube has no pod groups, so
        // the plugin never gates a pod.
        events: || {
            use ActionType as A;
            use EventResource as R;
            vec![
                ClusterEventWithHint::always(R::UnscheduledPod, A::ADD),
                ClusterEventWithHint::always(R::AssignedPod, A::ADD),
                ClusterEventWithHint::always(R::PodGroup, A::ADD | A::UPDATE),
            ]
        },
        ..plugin("GangScheduling", never, "")
    })
}

impl Plugin for SkipUnless {
    fn as_sign(&self) -> Option<&dyn rkube_framework::SignPlugin> {
        Some(self)
    }
    fn name(&self) -> &'static str {
        self.name
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        (!self.pre_enqueue).then_some(self as &dyn PreFilterPlugin)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        (!self.pre_enqueue).then_some(self as &dyn FilterPlugin)
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        self.score.then_some(self as &dyn ScorePlugin)
    }
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        self.skip_score.then_some(self as &dyn PreScorePlugin)
    }
    fn as_pre_enqueue(&self) -> Option<&dyn PreEnqueuePlugin> {
        self.pre_enqueue.then_some(self as &dyn PreEnqueuePlugin)
    }
    fn as_permit(&self) -> Option<&dyn PermitPlugin> {
        self.permit.then_some(self as &dyn PermitPlugin)
    }
    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        Some((self.events)())
    }
}

impl PreFilterPlugin for SkipUnless {
    fn pre_filter(&self, _: &mut CycleState, pod: &Pod, _: &Snapshot) -> (PreFilterResult, Status) {
        if (self.uses)(pod) {
            (
                None,
                Status::new(Code::UnschedulableAndUnresolvable, self.reason),
            )
        } else {
            (None, Status::skip())
        }
    }
}

impl FilterPlugin for SkipUnless {
    fn filter(&self, _: &CycleState, _: &Pod, _: &NodeInfo) -> Status {
        Status::success()
    }
}

impl ScorePlugin for SkipUnless {
    fn score(&self, _: &CycleState, _: &Pod, _: &NodeInfo) -> Result<i64, Status> {
        Ok(0)
    }
}

impl PreScorePlugin for SkipUnless {
    fn pre_score(&self, _: &mut CycleState, _: &Pod, _: &[&NodeInfo], _: &Snapshot) -> Status {
        Status::skip()
    }
}

impl PreEnqueuePlugin for SkipUnless {
    fn pre_enqueue(&self, _: &Pod, _: Option<&rkube_model::dra::Dra>) -> Status {
        Status::success()
    }
}

impl PermitPlugin for SkipUnless {
    fn permit(&self, _: &mut CycleState, _: &Pod, _: &str) -> (Status, std::time::Duration) {
        (Status::success(), std::time::Duration::ZERO)
    }
}

/// Placeholder for a default plugin not implemented yet: it skips every pod,
/// so rkube's decisions ignore it (listed in the project's closing notes).
pub fn pending_plugin(name: &'static str) -> Arc<dyn Plugin> {
    Arc::new(SkipUnless {
        score: true,
        skip_score: true,
        ..plugin(name, never, "")
    })
}

/// These plugins read nothing of a pod that could tell two pods apart.
impl rkube_framework::SignPlugin for SkipUnless {
    fn sign(&self, _: &rkube_model::Pod, _: &rkube_framework::Snapshot) -> rkube_framework::Signed {
        crate::signers::fragments([])
    }
}
