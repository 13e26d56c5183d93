//! The eviction signals and what they observe: the signal names of
//! `evictionHard` with the node condition and resource each maps to
//! ([`Signal`], [`Condition`], [`Resource`]), one round's observations of
//! the nodes and the pods' usage ([`Observation`], [`PodUsage`],
//! [`Snapshot`]), and the [`SignalSource`] they are read through (the
//! sources are in `machine_signals` and `sim_signals`).
//!
//! Upstream: `pkg/kubelet/eviction/api/types.go` (the signals),
//! `pkg/kubelet/eviction/types.go` (`signalObservation`, `statsFunc`) and
//! `helpers.go` (`signalToNodeCondition`, `signalToResource`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use crate::node::NodeDesc;
use crate::BoxFuture;

/// An eviction signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Signal {
    /// `memory.available`.
    MemoryAvailable,
    /// `allocatableMemory.available` (the pods' cgroup).
    AllocatableMemoryAvailable,
    /// `nodefs.available`.
    NodeFsAvailable,
    /// `nodefs.inodesFree`.
    NodeFsInodesFree,
    /// `imagefs.available`.
    ImageFsAvailable,
    /// `imagefs.inodesFree`.
    ImageFsInodesFree,
    /// `containerfs.available` (not observed: no split image filesystem).
    ContainerFsAvailable,
    /// `containerfs.inodesFree` (not observed).
    ContainerFsInodesFree,
    /// `pid.available`.
    PidAvailable,
}

/// A node condition eviction reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Condition {
    /// `MemoryPressure`.
    Memory,
    /// `DiskPressure`.
    Disk,
    /// `PIDPressure`.
    Pid,
}

impl Signal {
    /// Every signal, in upstream's names.
    pub const ALL: [Signal; 9] = [
        Signal::MemoryAvailable,
        Signal::AllocatableMemoryAvailable,
        Signal::NodeFsAvailable,
        Signal::NodeFsInodesFree,
        Signal::ImageFsAvailable,
        Signal::ImageFsInodesFree,
        Signal::ContainerFsAvailable,
        Signal::ContainerFsInodesFree,
        Signal::PidAvailable,
    ];

    /// The name used in `evictionHard`.
    pub fn name(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory.available",
            Signal::AllocatableMemoryAvailable => "allocatableMemory.available",
            Signal::NodeFsAvailable => "nodefs.available",
            Signal::NodeFsInodesFree => "nodefs.inodesFree",
            Signal::ImageFsAvailable => "imagefs.available",
            Signal::ImageFsInodesFree => "imagefs.inodesFree",
            Signal::ContainerFsAvailable => "containerfs.available",
            Signal::ContainerFsInodesFree => "containerfs.inodesFree",
            Signal::PidAvailable => "pid.available",
        }
    }

    /// The signal called `name`.
    pub fn parse(name: &str) -> Option<Signal> {
        Signal::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The node condition the signal drives (upstream's `signalToNodeCondition`).
    pub fn condition(self) -> Condition {
        match self {
            Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable => Condition::Memory,
            Signal::PidAvailable => Condition::Pid,
            _ => Condition::Disk,
        }
    }

    /// The resource reclaimed (upstream's `signalToResource`).
    pub fn resource(self) -> Resource {
        match self {
            Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable => Resource::Memory,
            Signal::NodeFsAvailable | Signal::ImageFsAvailable | Signal::ContainerFsAvailable => {
                Resource::EphemeralStorage
            }
            Signal::NodeFsInodesFree
            | Signal::ImageFsInodesFree
            | Signal::ContainerFsInodesFree => Resource::Inodes,
            Signal::PidAvailable => Resource::Pids,
        }
    }
}

/// A resource to reclaim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    /// `memory`.
    Memory,
    /// `ephemeral-storage`.
    EphemeralStorage,
    /// `inodes`.
    Inodes,
    /// `pids`.
    Pids,
}

impl Resource {
    /// The name in messages (`The node was low on resource: memory.`).
    pub fn name(self) -> &'static str {
        match self {
            Resource::Memory => "memory",
            Resource::EphemeralStorage => "ephemeral-storage",
            Resource::Inodes => "inodes",
            Resource::Pids => "pids",
        }
    }
}

/// What a signal observed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observation {
    /// Available amount (bytes, inodes or pids).
    pub available: i64,
    /// Capacity (percentages are of this).
    pub capacity: i64,
}

/// The observations of one node.
pub type Observations = BTreeMap<Signal, Observation>;

/// What a pod uses, by container (the pod total is the sum).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodUsage {
    /// Container name → working-set bytes.
    pub memory: BTreeMap<String, i64>,
    /// Container name → bytes of its writable layer and logs.
    pub ephemeral_storage: BTreeMap<String, i64>,
    /// Processes of the pod, if known.
    pub pids: Option<i64>,
    /// What its local storage limits are held against (CRI nodes).
    pub local: Option<LocalStorage>,
}

/// A pod's local storage as upstream's `localStorageEviction` reads it
/// from the Summary.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LocalStorage {
    /// Volume name → bytes used (the volumes the stats measured).
    pub volumes: BTreeMap<String, u64>,
    /// The pod's ephemeral storage in all (its containers' writable layers
    /// and logs, its local volumes, etc-hosts), if measured.
    pub total: Option<u64>,
    /// Container name → (bytes of its logs, bytes of its writable layer).
    pub containers: BTreeMap<String, (u64, u64)>,
}

impl PodUsage {
    /// The pod's total of `r` (`None` when not measured).
    pub fn total(&self, r: Resource) -> Option<i64> {
        match r {
            Resource::Memory => Some(self.memory.values().sum()),
            Resource::EphemeralStorage => Some(self.ephemeral_storage.values().sum()),
            Resource::Inodes => None,
            Resource::Pids => self.pids,
        }
    }
}

/// One round's observations of every node, and pod usage by
/// `namespace/name`.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Node name → observations.
    pub nodes: HashMap<String, Observations>,
    /// `namespace/name` → usage.
    pub pods: HashMap<String, PodUsage>,
}

/// Where signals come from.
pub trait SignalSource: Send + Sync + 'static {
    /// Observes the signals of `nodes` and the pods' usage.
    fn observe<'a>(&'a self, nodes: &'a [Arc<NodeDesc>]) -> BoxFuture<'a, Snapshot>;
}

/// The key of `pod` in [`Snapshot::pods`]: `namespace/name`.
pub(super) fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or(""),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}
