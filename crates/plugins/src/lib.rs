//! kube-scheduler v1.37's default plugins, one module per upstream plugin,
//! with upstream's names, reasons and scores, and the registry that maps
//! names to constructors.

pub mod default_binder;
pub mod default_preemption;
pub mod helper;
pub mod image_locality;
pub mod node_affinity;
pub mod node_name;
pub mod node_ports;
pub mod node_unschedulable;
pub mod noderesources;
pub mod queue_sort;
pub mod registry;
pub mod scheduling_gates;
pub mod skip_unless;
pub mod taint_toleration;

pub use registry::in_tree;
