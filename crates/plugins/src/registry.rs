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
    r.register("DynamicResources", |_, _| {
        simple(skip_unless::dynamic_resources())
    });
    r.register("NodeDeclaredFeatures", |_, _| {
        simple(skip_unless::node_declared_features())
    });
    r.register("GangScheduling", |_, _| {
        simple(skip_unless::gang_scheduling())
    });
    r
}
