//! What the scheduler reads from a cluster: the [`Cluster`] a cluster file is
//! turned into (by [`crate::load::build`]).

use std::collections::BTreeMap;

use crate::objects::{Node, Pod};
use crate::selector::Labels;

/// A namespace (only labels matter to scheduling).
#[derive(Debug, Clone, Default)]
pub struct Namespace {
    /// Name.
    pub name: String,
    /// Labels.
    pub labels: Labels,
}

/// Everything the scheduler reads from a cluster file.
#[derive(Debug, Clone, Default)]
pub struct Cluster {
    /// Nodes, in input order.
    pub nodes: Vec<Node>,
    /// Pods, in input order (bound and pending).
    pub pods: Vec<Pod>,
    /// Namespaces by name.
    pub namespaces: BTreeMap<String, Namespace>,
    /// Selectors of Services and pod controllers (for default spreading).
    pub workloads: crate::workloads::WorkloadSelectors,
    /// PersistentVolumes, claims, StorageClasses and CSINode limits.
    pub volumes: crate::volumes::Volumes,
    /// DeviceClasses, ResourceSlices, ResourceClaims and templates.
    pub dra: crate::dra::Dra,
    /// PodGroups (GenericWorkload).
    pub pod_groups: crate::pod_groups::PodGroups,
    /// Notes about objects that were read but not used.
    pub warnings: Vec<String>,
}
