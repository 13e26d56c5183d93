//! Ports of upstream kube-scheduler v1.37's table-driven unit tests for the
//! in-tree plugins rkube implements. Case names are upstream's; expected
//! codes, reasons and scores are upstream's expectations. One test binary,
//! one module per upstream plugin package.

#[path = "../support/mod.rs"]
mod support;

/// The shared test support as these ports use it: their pods start in
/// namespace "default".
mod common {
    pub use crate::support::default_ns_pod as pod;
    pub use crate::support::*;
}

mod balanced_allocation;
mod end_to_end;
mod image_locality;
mod node_affinity;
mod node_name;
mod node_ports;
mod node_unschedulable;
mod noderesources_fit;
mod taint_toleration;
