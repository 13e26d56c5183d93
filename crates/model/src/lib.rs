//! rkube's object model: Kubernetes quantities, label and node selectors,
//! and compact node and pod structs built once from k8s-openapi objects.
//! Everything here is pure (no I/O) so the offline simulator and the live
//! scheduler share it.

pub mod cluster;
pub mod convert;
pub mod decision;
pub mod dra;
pub mod dra_api;
mod expand;
pub mod load;
mod names;
pub mod objects;
pub mod pod_groups;
pub mod quantity;
pub mod raw;
pub mod requests;
pub mod resources;
pub mod selector;
pub mod version;
pub mod volumes;
pub mod workloads;

pub use cluster::{Cluster, Namespace};
pub use names::generated_name;
pub use objects::*;
pub use quantity::Quantity;
pub use raw::{LoadError, RawObject};
pub use resources::Resources;
pub use selector::{LabelSelector, Labels, NodeSelector, NodeSelectorTerm};
