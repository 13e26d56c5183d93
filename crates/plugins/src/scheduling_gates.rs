//! SchedulingGates: keeps pods with `spec.schedulingGates` out of the active queue.

use rkube_framework::{
    ActionType, ClusterEventWithHint, Code, EventResource, Plugin, PreEnqueuePlugin, QueueingHint,
    Status,
};
use rkube_model::Pod;

/// Upstream name.
pub const NAME: &str = "SchedulingGates";

/// The plugin.
pub struct SchedulingGates;

impl Plugin for SchedulingGates {
    fn name(&self) -> &'static str {
        NAME
    }
    fn as_pre_enqueue(&self) -> Option<&dyn PreEnqueuePlugin> {
        Some(self)
    }
    /// Only removing the last gate lets the pod in.
    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        Some(vec![ClusterEventWithHint::with_hint(
            EventResource::TargetPod,
            ActionType::UPDATE_POD_SCHEDULING_GATES_ELIMINATED,
            |_, _, _, _| Ok(QueueingHint::Queue),
        )])
    }
}

impl PreEnqueuePlugin for SchedulingGates {
    fn pre_enqueue(&self, pod: &Pod, _: &rkube_framework::EnqueueContext<'_>) -> Status {
        if pod.scheduling_gates.is_empty() {
            return Status::success();
        }
        Status::new(
            Code::UnschedulableAndUnresolvable,
            format!(
                "waiting for scheduling gates: [{}]",
                pod.scheduling_gates.join(" ")
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gates() {
        assert!(SchedulingGates
            .pre_enqueue(&Pod::default(), &Default::default())
            .is_success());
        let pod = Pod {
            scheduling_gates: vec!["foo".into(), "bar".into()],
            ..Default::default()
        };
        let s = SchedulingGates.pre_enqueue(&pod, &Default::default());
        assert_eq!(s.code, Code::UnschedulableAndUnresolvable);
        assert_eq!(s.message(), "waiting for scheduling gates: [foo bar]");
    }
}
