//! kube-scheduler v1.37's default plugins, one module per upstream plugin,
//! with upstream's names, reasons and scores, and the registry that maps
//! names to constructors.

pub mod default_binder;
pub mod default_preemption;
pub mod dynamic_resources;
pub mod gang_scheduling;
pub mod helper;
pub mod image_locality;
pub mod inter_pod_affinity;
pub mod node_affinity;
pub mod node_declared_features;
mod node_memo;
pub mod node_name;
pub mod node_ports;
pub mod node_unschedulable;
pub mod node_volume_limits;
pub mod noderesources;
pub mod parallel;
pub mod pod_topology_spread;
pub mod queue_sort;
pub mod registry;
pub mod scheduling_gates;
mod signers;
pub mod taint_toleration;
pub mod volume_binding;
pub mod volume_restrictions;
pub mod volume_zone;

pub use registry::in_tree;

/// Every profile of `cfg` built with the in-tree plugins (what
/// kube-scheduler runs; the live scheduler and the simulator both start here).
pub fn profiles(
    cfg: &rkube_config::KubeSchedulerConfiguration,
) -> Result<rkube_framework::Profiles, rkube_framework::FrameworkError> {
    rkube_framework::Profiles::new(cfg, &in_tree())
}
