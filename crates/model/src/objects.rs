//! The compact node and pod model the scheduler works on. Built once from
//! k8s-openapi objects (see [`crate::convert`]); plugins read only these.

use std::sync::Arc;

use crate::resources::{ResourceList, Resources};
use crate::selector::{LabelSelector, Labels, NodeSelector, NodeSelectorTerm};

/// Taint effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaintEffect {
    /// `NoSchedule`
    NoSchedule,
    /// `PreferNoSchedule`
    PreferNoSchedule,
    /// `NoExecute`
    NoExecute,
}

impl TaintEffect {
    /// Parses the API string.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "NoSchedule" => Some(Self::NoSchedule),
            "PreferNoSchedule" => Some(Self::PreferNoSchedule),
            "NoExecute" => Some(Self::NoExecute),
            _ => None,
        }
    }

    /// The API string.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::NoSchedule => "NoSchedule",
            Self::PreferNoSchedule => "PreferNoSchedule",
            Self::NoExecute => "NoExecute",
        }
    }
}

/// A node taint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taint {
    /// Key.
    pub key: String,
    /// Value (may be empty).
    pub value: String,
    /// Effect.
    pub effect: TaintEffect,
}

/// A pod toleration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Toleration {
    /// Key; empty with `Exists` tolerates every key.
    pub key: String,
    /// `Exists` (true) or `Equal` (false, the default).
    pub exists: bool,
    /// Value for `Equal`.
    pub value: String,
    /// Effect; `None` tolerates every effect.
    pub effect: Option<TaintEffect>,
}

impl Toleration {
    /// Upstream's `Toleration.ToleratesTaint`.
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if let Some(effect) = self.effect {
            if effect != taint.effect {
                return false;
            }
        }
        if !self.key.is_empty() && self.key != taint.key {
            return false;
        }
        if self.exists {
            true
        } else {
            self.value == taint.value
        }
    }
}

/// An image present on a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerImage {
    /// All names of the image (tags and digests).
    pub names: Vec<String>,
    /// Size in bytes.
    pub size_bytes: i64,
}

/// A node as the scheduler sees it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Node {
    /// Name.
    pub name: String,
    /// Labels.
    pub labels: Labels,
    /// Taints.
    pub taints: Vec<Taint>,
    /// `spec.unschedulable`.
    pub unschedulable: bool,
    /// `status.allocatable`.
    pub allocatable: Resources,
    /// `status.images`.
    pub images: Vec<ContainerImage>,
    /// `status.declaredFeatures`, as the node lists them.
    pub declared_features: Vec<String>,
}

/// Protocol of a host port.
pub type Protocol = String;

/// A host port a container asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPort {
    /// Host IP (`0.0.0.0` when unset, as upstream defaults it).
    pub host_ip: String,
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: Protocol,
    /// Port number.
    pub port: i32,
}

/// A container (or init container).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Container {
    /// Name.
    pub name: String,
    /// Image reference as written.
    pub image: String,
    /// `resources.requests`.
    pub requests: ResourceList,
    /// An init container with `restartPolicy: Always` (a sidecar).
    pub restartable: bool,
    /// Host ports (only ports with `hostPort > 0`).
    pub host_ports: Vec<HostPort>,
}

/// A weighted preferred node-selector term.
#[derive(Debug, Clone, PartialEq)]
pub struct PreferredSchedulingTerm {
    /// Weight 1..100.
    pub weight: i32,
    /// The term.
    pub term: NodeSelectorTerm,
}

/// Node affinity of a pod.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NodeAffinity {
    /// `requiredDuringSchedulingIgnoredDuringExecution`.
    pub required: Option<NodeSelector>,
    /// `preferredDuringSchedulingIgnoredDuringExecution`.
    pub preferred: Vec<PreferredSchedulingTerm>,
}

/// A pod (anti-)affinity term.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PodAffinityTerm {
    /// `labelSelector`; `None` matches no pod.
    pub selector: Option<LabelSelector>,
    /// `namespaces`.
    pub namespaces: Vec<String>,
    /// `namespaceSelector`; `None` means "only `namespaces`".
    pub namespace_selector: Option<LabelSelector>,
    /// `topologyKey`.
    pub topology_key: String,
    /// `matchLabelKeys`.
    pub match_label_keys: Vec<String>,
    /// `mismatchLabelKeys`.
    pub mismatch_label_keys: Vec<String>,
}

/// A weighted pod (anti-)affinity term.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct WeightedPodAffinityTerm {
    /// Weight 1..100.
    pub weight: i32,
    /// The term.
    pub term: PodAffinityTerm,
}

/// Pod affinity or anti-affinity.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PodAffinity {
    /// Required terms.
    pub required: Vec<PodAffinityTerm>,
    /// Preferred terms.
    pub preferred: Vec<WeightedPodAffinityTerm>,
}

/// A topology spread constraint.
#[derive(Debug, Clone, PartialEq)]
pub struct TopologySpreadConstraint {
    /// `maxSkew`.
    pub max_skew: i32,
    /// `topologyKey`.
    pub topology_key: String,
    /// `whenUnsatisfiable: DoNotSchedule` (true) or `ScheduleAnyway`.
    pub do_not_schedule: bool,
    /// `labelSelector`; `None` matches nothing.
    pub selector: Option<LabelSelector>,
    /// `minDomains`.
    pub min_domains: Option<i32>,
    /// `nodeAffinityPolicy: Ignore` (false) or `Honor` (true, the default).
    pub node_affinity_honor: bool,
    /// `nodeTaintsPolicy: Honor` (true) or `Ignore` (false, the default).
    pub node_taints_honor: bool,
    /// `matchLabelKeys`.
    pub match_label_keys: Vec<String>,
}

/// An owner reference.
#[derive(Debug, Clone, PartialEq)]
pub struct OwnerRef {
    /// `apiVersion` of the owner (e.g. `apps/v1`).
    pub api_version: String,
    /// Kind of the owner.
    pub kind: String,
    /// Name of the owner.
    pub name: String,
    /// UID of the owner.
    pub uid: String,
    /// It is the managing controller.
    pub controller: bool,
}

/// An in-tree disk source VolumeRestrictions checks for conflicts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disk {
    /// GCE persistent disk.
    Gce {
        /// `pdName`.
        pd_name: String,
        /// `readOnly`.
        read_only: bool,
    },
    /// AWS EBS volume.
    Aws {
        /// `volumeID`.
        volume_id: String,
    },
    /// iSCSI target.
    Iscsi {
        /// `iqn`.
        iqn: String,
        /// `readOnly`.
        read_only: bool,
    },
    /// Ceph RBD image.
    Rbd {
        /// `monitors`.
        monitors: Vec<String>,
        /// `pool` (default `rbd`).
        pool: String,
        /// `image`.
        image: String,
        /// `readOnly`.
        read_only: bool,
    },
}

impl Disk {
    /// Upstream's `isVolumeConflict` for two disks.
    pub fn conflicts(&self, other: &Disk) -> bool {
        match (self, other) {
            (
                Disk::Gce {
                    pd_name: a,
                    read_only: ra,
                },
                Disk::Gce {
                    pd_name: b,
                    read_only: rb,
                },
            ) => a == b && !(*ra && *rb),
            (Disk::Aws { volume_id: a }, Disk::Aws { volume_id: b }) => a == b,
            (
                Disk::Iscsi {
                    iqn: a,
                    read_only: ra,
                },
                Disk::Iscsi {
                    iqn: b,
                    read_only: rb,
                },
            ) => a == b && !(*ra && *rb),
            (
                Disk::Rbd {
                    monitors: m1,
                    pool: p1,
                    image: i1,
                    read_only: r1,
                },
                Disk::Rbd {
                    monitors: m2,
                    pool: p2,
                    image: i2,
                    read_only: r2,
                },
            ) => m1.iter().any(|m| m2.contains(m)) && p1 == p2 && i1 == i2 && !(*r1 && *r2),
            _ => false,
        }
    }
}

/// A volume of a pod, reduced to what scheduling plugins look at.
#[derive(Debug, Clone, PartialEq)]
pub enum Volume {
    /// A PersistentVolumeClaim by name (also ephemeral volumes, named `<pod>-<volume>`).
    Claim {
        /// Claim name.
        claim: String,
        /// Mounted read-only.
        read_only: bool,
        /// Generated from an ephemeral volume template.
        ephemeral: bool,
    },
    /// An in-tree disk with conflict rules.
    Disk(Disk),
    /// An `emptyDir` volume: local storage on the node (`kubectl drain`
    /// refuses such pods without `--delete-emptydir-data`).
    EmptyDir,
    /// An inline (ephemeral) CSI volume of this driver.
    Csi {
        /// `csi.driver`.
        driver: String,
    },
    /// A volume with no scheduling meaning (configMap, secret, ...).
    Other,
}

impl Pod {
    /// Names of the PVCs the pod uses (including ephemeral ones).
    pub fn claim_names(&self) -> impl Iterator<Item = &str> {
        self.volumes.iter().filter_map(|v| match v {
            Volume::Claim { claim, .. } => Some(claim.as_str()),
            _ => None,
        })
    }
}

/// An entry of `spec.resourceClaims`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PodResourceClaim {
    /// `name` (what containers refer to).
    pub name: String,
    /// `resourceClaimName`.
    pub claim_name: Option<String>,
    /// `resourceClaimTemplateName`.
    pub template_name: Option<String>,
}

/// A pod as the scheduler sees it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Pod {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID (generated when missing).
    pub uid: String,
    /// Labels.
    pub labels: Labels,
    /// Owner references.
    pub owners: Vec<OwnerRef>,
    /// `metadata.creationTimestamp` as RFC 3339 (empty when unset).
    pub creation_timestamp: String,
    /// Position in the input, to keep queue order stable.
    pub seq: u64,
    /// `spec.nodeName` (empty when unscheduled).
    pub node_name: String,
    /// `status.nominatedNodeName`.
    pub nominated_node_name: String,
    /// `spec.schedulerName` (defaulted to `default-scheduler`).
    pub scheduler_name: String,
    /// Resolved priority.
    pub priority: i32,
    /// `preemptionPolicy: Never`.
    pub preemption_never: bool,
    /// `spec.nodeSelector`.
    pub node_selector: Labels,
    /// Node affinity.
    pub node_affinity: Option<NodeAffinity>,
    /// Pod affinity.
    pub pod_affinity: Option<PodAffinity>,
    /// Pod anti-affinity.
    pub pod_anti_affinity: Option<PodAffinity>,
    /// Tolerations.
    pub tolerations: Vec<Toleration>,
    /// App containers.
    pub containers: Vec<Container>,
    /// Init containers.
    pub init_containers: Vec<Container>,
    /// `spec.overhead`.
    pub overhead: ResourceList,
    /// Pod-level `spec.resources.requests`.
    pub pod_requests: ResourceList,
    /// Names of `spec.schedulingGates`.
    pub scheduling_gates: Vec<String>,
    /// `spec.schedulingGroup.podGroupName`: the PodGroup the pod belongs to.
    pub pod_group: Option<String>,
    /// Topology spread constraints.
    pub topology_spread_constraints: Vec<TopologySpreadConstraint>,
    /// Volumes.
    pub volumes: Vec<Volume>,
    /// References of `image` volumes (ImageLocality counts them).
    pub image_volumes: Vec<String>,
    /// The sources of every volume but configMap and secret ones, each as
    /// JSON without the volume's name, sorted: what upstream's
    /// OpportunisticBatching signs pods' volumes by.
    pub volume_sources: Vec<String>,
    /// `spec.resourceClaims`.
    pub resource_claims: Vec<PodResourceClaim>,
    /// The node features the pod needs (upstream's node declared features
    /// framework, `InferForPodScheduling`), by name, sorted.
    pub required_features: Vec<&'static str>,
    /// `status.resourceClaimStatuses`: pod claim name → generated claim's
    /// name (None: the controller decided no claim is needed).
    pub claim_statuses: Vec<(String, Option<String>)>,
    /// Terminated (Succeeded or Failed): does not occupy its node.
    pub terminated: bool,
    /// A static pod's mirror (annotation `kubernetes.io/config.mirror`):
    /// the API server cannot delete it for good, so `kubectl drain` skips it.
    pub mirror: bool,
    /// Being deleted (`metadata.deletionTimestamp` set).
    pub terminating: bool,
    /// Being deleted by scheduler preemption: `deletionTimestamp` set and a
    /// `DisruptionTarget=True` condition with reason `PreemptionByScheduler`.
    pub terminating_by_preemption: bool,
    /// `status.startTime` as RFC 3339 (empty when unset).
    pub start_time: String,
    /// What the pod's status says of its resources during an in-place
    /// resize (`None` when it says nothing).
    pub status_resources: Option<Box<StatusResources>>,
    /// Computed requests (see [`crate::requests`]): the larger of the
    /// spec's and the status's while a resize is under way, as upstream
    /// counts a pod on its node.
    pub requests: Resources,
    /// The spec's requests alone, when the status changes them: what
    /// NodeResourcesFit asks of a node for the pod (see
    /// [`Pod::fit_requests`]).
    pub spec_requests: Option<Resources>,
    /// Computed non-zero CPU request used for scoring.
    pub non_zero_milli_cpu: i64,
    /// Computed non-zero memory request used for scoring.
    pub non_zero_memory: i64,
}

/// A pod's status during an in-place resize (upstream's
/// InPlacePodVerticalScaling and InPlacePodLevelResourcesVerticalScaling,
/// both on in v1.37): what the kubelet allocated and what the runtime
/// applied, per container and for the pod.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StatusResources {
    /// The `PodResizePending` condition says `Infeasible`: the spec's new
    /// requests will never be applied, so they do not count.
    pub resize_infeasible: bool,
    /// Per container status (`containerStatuses`, then
    /// `initContainerStatuses`), by name.
    pub containers: Vec<ContainerStatusResources>,
    /// `status.allocatedResources`.
    pub pod_allocated: Option<ResourceList>,
    /// `status.resources` is set.
    pub pod_resources_set: bool,
    /// `status.resources.requests`.
    pub pod_actuated: Option<ResourceList>,
}

/// One container's status resources.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ContainerStatusResources {
    /// The container's name.
    pub name: String,
    /// `allocatedResources`.
    pub allocated: Option<ResourceList>,
    /// `resources.requests`.
    pub actuated: Option<ResourceList>,
}

impl Pod {
    /// The requests NodeResourcesFit checks against a node: the spec's
    /// (upstream's Fit does not read the status of the pod it places).
    pub fn fit_requests(&self) -> &Resources {
        self.spec_requests.as_ref().unwrap_or(&self.requests)
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Host ports of containers and restartable init containers.
    pub fn host_ports(&self) -> impl Iterator<Item = &HostPort> {
        self.init_containers
            .iter()
            .filter(|c| c.restartable)
            .chain(self.containers.iter())
            .flat_map(|c| c.host_ports.iter())
    }

    /// The pod has an `emptyDir` volume (kubectl drain's `hasLocalStorage`).
    pub fn has_local_storage(&self) -> bool {
        self.volumes.iter().any(|v| matches!(v, Volume::EmptyDir))
    }

    /// The owner reference with `controller: true`, if any
    /// (`metav1.GetControllerOf`).
    pub fn controller(&self) -> Option<&OwnerRef> {
        self.owners.iter().find(|o| o.controller)
    }

    /// The pod uses DynamicResourceAllocation (`spec.resourceClaims`).
    pub fn has_resource_claims(&self) -> bool {
        !self.resource_claims.is_empty()
    }

    /// The pod has pod affinity or anti-affinity.
    pub fn has_pod_affinity(&self) -> bool {
        self.pod_affinity.is_some() || self.pod_anti_affinity.is_some()
    }

    /// The pod has required anti-affinity terms.
    pub fn has_required_anti_affinity(&self) -> bool {
        self.pod_anti_affinity
            .as_ref()
            .is_some_and(|a| !a.required.is_empty())
    }
}

/// Shared handle to an immutable pod.
pub type PodRef = Arc<Pod>;
/// Shared handle to an immutable node.
pub type NodeRef = Arc<Node>;
