//! The in-tree registry: upstream plugin names → constructors.

use std::sync::Arc;

use rkube_framework::{Plugin, Registry};

use crate::*;

fn simple(p: Arc<dyn Plugin>) -> Result<Arc<dyn Plugin>, String> {
    Ok(p)
}

/// Every plugin rkube implements, under its upstream name.
pub fn in_tree() -> Registry {
    let mut r = Registry::new();
    r.register(scheduling_gates::NAME, |_, _| {
        simple(Arc::new(scheduling_gates::SchedulingGates))
    });
    r.register(queue_sort::NAME, |_, _| {
        simple(Arc::new(queue_sort::PrioritySort))
    });
    r.register(node_name::NAME, |_, _| {
        simple(Arc::new(node_name::NodeName))
    });
    r.register(node_unschedulable::NAME, |_, _| {
        simple(Arc::new(node_unschedulable::NodeUnschedulable))
    });
    r.register(taint_toleration::NAME, |_, _| {
        simple(Arc::new(taint_toleration::TaintToleration))
    });
    r.register(node_affinity::NAME, node_affinity::new);
    r.register(node_ports::NAME, |_, _| {
        simple(Arc::new(node_ports::NodePorts))
    });
    r.register(noderesources::fit::NAME, noderesources::fit::new);
    r.register(
        noderesources::balanced_allocation::NAME,
        noderesources::balanced_allocation::new,
    );
    r.register(image_locality::NAME, |_, _| {
        simple(Arc::new(image_locality::ImageLocality))
    });
    r.register(default_binder::NAME, |_, _| {
        simple(Arc::new(default_binder::DefaultBinder))
    });
    r.register(default_preemption::NAME, default_preemption::new);
    r.register(volume_restrictions::NAME, |_, _| {
        simple(Arc::new(volume_restrictions::VolumeRestrictions))
    });
    r.register(node_volume_limits::NAME, |_, _| {
        simple(Arc::new(node_volume_limits::NodeVolumeLimits))
    });
    r.register(volume_binding::NAME, volume_binding::new);
    r.register(volume_zone::NAME, |_, _| {
        simple(Arc::new(volume_zone::VolumeZone))
    });
    r.register(pod_topology_spread::NAME, pod_topology_spread::new);
    r.register(inter_pod_affinity::NAME, inter_pod_affinity::new);
    r.register(dynamic_resources::NAME, dynamic_resources::new);
    r.register(node_declared_features::NAME, |_, _| {
        simple(Arc::new(node_declared_features::NodeDeclaredFeatures))
    });
    r.register(gang_scheduling::NAME, |_, _| simple(gang_scheduling::new()));
    r
}

#[cfg(test)]
mod tests {
    use rkube_framework::events::{
        ActionType as A, ClusterEvent, EventResource as R, QueueingHintMap,
    };

    /// The default profile's registrations are upstream v1.37's lists (the
    /// `Pod` resource unrolled): every plugin that can reject a pod is
    /// asked, DefaultPreemption too (its PreEnqueue gates a pod whose
    /// asynchronous preemption runs); score-only (ImageLocality,
    /// NodeResourcesBalancedAllocation), QueueSort and Bind plugins are
    /// not.
    #[test]
    fn default_profile_registrations() {
        let profiles = crate::profiles(&rkube_config::default_config()).expect("defaults");
        let map = QueueingHintMap::for_framework(&profiles.frameworks()[0]);
        let plugins: Vec<&str> = map.plugins().into_iter().collect();
        assert_eq!(
            plugins,
            [
                "DefaultPreemption",
                "DynamicResources",
                "InterPodAffinity",
                "NodeAffinity",
                "NodeDeclaredFeatures",
                "NodeName",
                "NodePorts",
                "NodeResourcesFit",
                "NodeUnschedulable",
                "NodeVolumeLimits",
                "PodTopologySpread",
                "SchedulingGates",
                "TaintToleration",
                "VolumeBinding",
                "VolumeRestrictions",
                "VolumeZone",
            ]
        );
        let ev = ClusterEvent::new;
        let node_add = ev(R::Node, A::ADD);
        let assigned_delete = ev(R::AssignedPod, A::DELETE);
        let want: [(&str, Vec<ClusterEvent>); 15] = [
            ("DefaultPreemption", vec![assigned_delete]),
            (
                "NodeResourcesFit",
                vec![
                    assigned_delete,
                    ev(R::Node, A::ADD | A::UPDATE_NODE_ALLOCATABLE),
                    ev(R::AssignedPod, A::UPDATE_POD_SCALE_DOWN),
                    ev(R::TargetPod, A::UPDATE_POD_SCALE_DOWN),
                    ev(R::DeviceClass, A::ADD | A::UPDATE),
                ],
            ),
            (
                "NodeAffinity",
                vec![ev(R::Node, A::ADD | A::UPDATE_NODE_LABEL)],
            ),
            ("NodeName", vec![node_add]),
            ("NodePorts", vec![assigned_delete, node_add]),
            (
                "NodeUnschedulable",
                vec![
                    ev(R::Node, A::ADD | A::UPDATE_NODE_TAINT),
                    ev(R::TargetPod, A::UPDATE_POD_TOLERATION),
                ],
            ),
            (
                "TaintToleration",
                vec![
                    ev(R::Node, A::ADD | A::UPDATE_NODE_TAINT),
                    ev(R::TargetPod, A::UPDATE_POD_TOLERATION),
                ],
            ),
            (
                "InterPodAffinity",
                vec![
                    ev(R::AssignedPod, A::ADD | A::UPDATE_POD_LABEL | A::DELETE),
                    ev(R::TargetPod, A::UPDATE_POD_LABEL),
                    ev(R::Node, A::ADD | A::UPDATE_NODE_LABEL),
                ],
            ),
            (
                "PodTopologySpread",
                vec![
                    ev(R::AssignedPod, A::ADD | A::UPDATE_POD_LABEL | A::DELETE),
                    ev(R::TargetPod, A::UPDATE_POD_TOLERATION | A::UPDATE_POD_LABEL),
                    ev(
                        R::Node,
                        A::ADD | A::DELETE | A::UPDATE_NODE_LABEL | A::UPDATE_NODE_TAINT,
                    ),
                ],
            ),
            (
                "SchedulingGates",
                vec![ev(R::TargetPod, A::UPDATE_POD_SCHEDULING_GATES_ELIMINATED)],
            ),
            (
                "VolumeBinding",
                vec![
                    ev(R::StorageClass, A::ADD | A::UPDATE),
                    ev(R::PersistentVolumeClaim, A::ADD | A::UPDATE),
                    ev(R::PersistentVolume, A::ADD | A::UPDATE),
                    ev(R::Node, A::ADD | A::UPDATE_NODE_LABEL),
                    ev(R::CsiNode, A::ADD | A::UPDATE),
                    ev(R::CsiDriver, A::UPDATE),
                    ev(R::CsiStorageCapacity, A::ADD | A::UPDATE),
                ],
            ),
            (
                "VolumeZone",
                vec![
                    ev(R::StorageClass, A::ADD),
                    ev(R::Node, A::ADD | A::UPDATE_NODE_LABEL),
                    ev(R::PersistentVolumeClaim, A::ADD | A::UPDATE),
                    ev(R::PersistentVolume, A::ADD | A::UPDATE),
                ],
            ),
            (
                "VolumeRestrictions",
                vec![
                    assigned_delete,
                    node_add,
                    ev(R::PersistentVolumeClaim, A::ADD),
                ],
            ),
            (
                "NodeVolumeLimits",
                vec![
                    ev(R::CsiNode, A::ADD),
                    ev(R::CsiNode, A::UPDATE),
                    assigned_delete,
                    ev(R::PersistentVolumeClaim, A::ADD),
                    ev(R::VolumeAttachment, A::DELETE),
                ],
            ),
            (
                "NodeDeclaredFeatures",
                vec![
                    ev(R::Node, A::ADD | A::UPDATE_NODE_DECLARED_FEATURE),
                    ev(R::TargetPod, A::UPDATE),
                ],
            ),
        ];
        for (plugin, mut events) in want {
            let mut got = map.events_of(plugin);
            got.sort();
            events.sort();
            assert_eq!(got, events, "{plugin}");
        }
    }
}
