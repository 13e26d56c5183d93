//! GangScheduling (upstream's `framework/plugins/gangscheduling`, enabled
//! with the GenericWorkload gate): a pod of a gang PodGroup enters the
//! active queue only once the scheduler knows `minCount` members, waits at
//! Permit until `minCount` members are assumed or bound, and a pod-group
//! cycle stops as soon as `minCount` can no longer be met
//! (PlacementFeasible). Pods without a group, and groups with the basic
//! policy, pass. CompositePodGroup hierarchies (an alpha gate) are not
//! modelled.

use std::sync::Arc;
use std::time::Duration;

use rkube_framework::events::objects_as;
use rkube_framework::{
    ActionType, ClusterEventWithHint, Code, CycleState, EnqueueContext, EventObject, EventResource,
    GangPermit, HintContext, HintResult, PermitPlugin, PlacementFeasiblePlugin, PlacementProgress,
    Plugin, PreEnqueuePlugin, QueueingHint, Status,
};
use rkube_model::pod_groups::PodGroup;
use rkube_model::Pod;

/// Upstream name.
pub const NAME: &str = "GangScheduling";

/// How long a gang member waits at Permit (upstream's
/// `permitTimeoutDuration`).
pub const PERMIT_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// The plugin.
pub struct GangScheduling;

/// A new plugin.
pub fn new() -> Arc<dyn Plugin> {
    Arc::new(GangScheduling)
}

impl Plugin for GangScheduling {
    fn name(&self) -> &'static str {
        NAME
    }
    fn as_pre_enqueue(&self) -> Option<&dyn PreEnqueuePlugin> {
        Some(self)
    }
    fn as_permit(&self) -> Option<&dyn PermitPlugin> {
        Some(self)
    }
    fn as_placement_feasible(&self) -> Option<&dyn PlacementFeasiblePlugin> {
        Some(self)
    }
    fn as_sign(&self) -> Option<&dyn rkube_framework::SignPlugin> {
        Some(self)
    }
    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        use ActionType as A;
        use EventResource as R;
        Some(vec![
            ClusterEventWithHint::with_hint(
                R::UnscheduledPod,
                A::ADD,
                is_schedulable_after_pod_added,
            ),
            ClusterEventWithHint::with_hint(R::AssignedPod, A::ADD, is_schedulable_after_pod_added),
            ClusterEventWithHint::with_hint(
                R::PodGroup,
                A::ADD,
                is_schedulable_after_pod_group_added,
            ),
            ClusterEventWithHint::with_hint(
                R::PodGroup,
                A::UPDATE,
                is_schedulable_after_pod_group_updated,
            ),
        ])
    }
}

/// A pod joined the pod's group (upstream's `isSchedulableAfterPodAdded`).
pub fn is_schedulable_after_pod_added(
    pod: &Pod,
    _old: Option<&EventObject>,
    new: Option<&EventObject>,
    _: &HintContext<'_>,
) -> HintResult {
    let (_, added) = objects_as::<Pod>(None, new)?;
    let added = added.ok_or("no added pod")?;
    match (&pod.pod_group, &added.pod_group) {
        (Some(a), Some(b)) if a == b && pod.namespace == added.namespace => Ok(QueueingHint::Queue),
        _ => Ok(QueueingHint::QueueSkip),
    }
}

/// The pod's group appeared.
pub fn is_schedulable_after_pod_group_added(
    pod: &Pod,
    _old: Option<&EventObject>,
    new: Option<&EventObject>,
    _: &HintContext<'_>,
) -> HintResult {
    let (_, added) = objects_as::<PodGroup>(None, new)?;
    let added = added.ok_or("no added pod group")?;
    Ok(same_group(pod, added))
}

/// The pod's gang lowered its `minCount`.
pub fn is_schedulable_after_pod_group_updated(
    pod: &Pod,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
    _: &HintContext<'_>,
) -> HintResult {
    let (old, new) = objects_as::<PodGroup>(old, new)?;
    let (old, new) = (
        old.ok_or("no old pod group")?,
        new.ok_or("no new pod group")?,
    );
    if same_group(pod, new) == QueueingHint::QueueSkip {
        return Ok(QueueingHint::QueueSkip);
    }
    match (old.min_count, new.min_count) {
        (Some(o), Some(n)) if n < o => Ok(QueueingHint::Queue),
        _ => Ok(QueueingHint::QueueSkip),
    }
}

fn same_group(pod: &Pod, group: &PodGroup) -> QueueingHint {
    if pod.pod_group.as_deref() == Some(group.name.as_str()) && pod.namespace == group.namespace {
        QueueingHint::Queue
    } else {
        QueueingHint::QueueSkip
    }
}

impl PreEnqueuePlugin for GangScheduling {
    /// Upstream's `PreEnqueue` without hierarchies.
    fn pre_enqueue(&self, pod: &Pod, ctx: &EnqueueContext<'_>) -> Status {
        let Some(name) = &pod.pod_group else {
            return Status::success();
        };
        let state = ctx.pod_groups.and_then(|g| g.get(&pod.namespace, name));
        let Some(group) = state.and_then(|s| s.group.as_ref()) else {
            return Status::new(
                Code::UnschedulableAndUnresolvable,
                format!("waiting for pods's pod group {name:?} to appear in scheduling queue"),
            );
        };
        let Some(min) = group.min_count else {
            return Status::success();
        };
        if state.map_or(0, |s| s.all_pods()) < min.max(0) as usize {
            return Status::new(
                Code::UnschedulableAndUnresolvable,
                "waiting for minCount pods from a gang to appear in scheduling queue",
            );
        }
        Status::success()
    }
}

impl PermitPlugin for GangScheduling {
    /// Upstream's `Permit`: below `minCount` scheduled members the pod
    /// waits; at `minCount` every assumed member waiting is allowed.
    fn permit(&self, state: &mut CycleState, pod: &Pod, _node: &str) -> (Status, Duration) {
        if pod.pod_group.is_none() {
            return (Status::success(), Duration::ZERO);
        }
        let Some(gang) = state.read::<GangPermit>(GangPermit::KEY) else {
            return (
                Status::error(format!(
                    "failed to get podGroup {}/{}: not in this cycle",
                    pod.namespace,
                    pod.pod_group.as_deref().unwrap_or("")
                )),
                Duration::ZERO,
            );
        };
        let Some(min) = gang.group.min_count else {
            return (Status::success(), Duration::ZERO);
        };
        if gang.scheduled < min.max(0) as usize {
            return (
                Status::new(
                    Code::Wait,
                    "waiting for minCount pods from a gang to be scheduled",
                ),
                PERMIT_TIMEOUT,
            );
        }
        for uid in &gang.assumed {
            if let Some(w) = gang.waiting.get(uid) {
                w.allow(NAME);
            }
        }
        (Status::success(), Duration::ZERO)
    }
}

impl PlacementFeasiblePlugin for GangScheduling {
    /// Upstream's `PlacementFeasible`.
    fn placement_feasible(&self, group: &PodGroup, p: PlacementProgress) -> Status {
        let min = group.needed();
        if p.remaining + p.scheduled < min {
            return Status::new(
                Code::Unschedulable,
                format!(
                    "minCount ({min}) cannot be satisfied: {} scheduled, {} remaining",
                    p.scheduled, p.remaining
                ),
            );
        }
        if p.scheduled < min {
            return Status::new(
                Code::Wait,
                format!(
                    "minCount ({min}) is not yet satisfied: {} scheduled, {} remaining",
                    p.scheduled, p.remaining
                ),
            );
        }
        Status::success()
    }
}

/// GangScheduling reads nothing of a pod that could tell two pods apart in
/// Filter or Score (it has neither).
impl rkube_framework::SignPlugin for GangScheduling {
    fn sign(&self, _: &Pod, _: &rkube_framework::Snapshot) -> rkube_framework::Signed {
        crate::signers::fragments([])
    }
}
