//! Storage objects as the volume plugins read them: PersistentVolumes,
//! PersistentVolumeClaims, StorageClasses and CSINodes, plus the binding
//! state the simulator updates as pods are placed (upstream's volume binder
//! assumes bindings the same way).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::storage::v1 as storage;

use crate::convert;
use crate::objects::Node;
use crate::quantity::Quantity;
use crate::raw::{LoadError, RawObject};
use crate::selector::{LabelSelector, Labels, NodeSelector};

/// `kubernetes.io/no-provisioner`: static local volumes only.
pub const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";
/// The claim annotation naming the node the scheduler chose for
/// provisioning a WaitForFirstConsumer claim.
pub const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// The claim annotation the PV controller sets once it bound the claim.
pub const ANN_BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// The volume annotation saying the PV controller (not a user) bound it.
pub const ANN_BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";

/// A PersistentVolumeClaim.
#[derive(Debug, Clone, Default)]
pub struct Pvc {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
    /// `spec.storageClassName` (empty when unset).
    pub storage_class: String,
    /// `spec.volumeName` (empty when unbound).
    pub volume_name: String,
    /// The `pv.kubernetes.io/bind-completed` annotation is set: with a
    /// volume name, the claim is fully bound (upstream's `isPVCFullyBound`).
    pub bind_completed: bool,
    /// `spec.accessModes`.
    pub access_modes: Vec<String>,
    /// `spec.resources.requests.storage` in bytes.
    pub request: i64,
    /// `spec.selector`.
    pub selector: Option<LabelSelector>,
    /// `spec.volumeMode` (`Filesystem` default).
    pub volume_mode: String,
    /// Being deleted.
    pub deleting: bool,
    /// The `volume.kubernetes.io/selected-node` annotation (the node the
    /// scheduler chose for provisioning; empty when unset).
    pub selected_node: String,
    /// `metadata.resourceVersion` (empty in cluster files).
    pub resource_version: String,
}

impl Pvc {
    /// `namespace/name`.
    pub fn key(&self) -> (String, String) {
        (self.namespace.clone(), self.name.clone())
    }

    /// Fully bound: a volume name and the bind-completed annotation.
    pub fn is_bound(&self) -> bool {
        !self.volume_name.is_empty() && self.bind_completed
    }
}

/// A PersistentVolume.
#[derive(Debug, Clone, Default)]
pub struct Pv {
    /// Name.
    pub name: String,
    /// Labels (zone/region topology).
    pub labels: Labels,
    /// `spec.storageClassName`.
    pub storage_class: String,
    /// `spec.capacity.storage` in bytes.
    pub capacity: i64,
    /// `spec.accessModes`.
    pub access_modes: Vec<String>,
    /// `spec.nodeAffinity.required`.
    pub node_affinity: Option<NodeSelector>,
    /// `spec.claimRef` as (namespace, name).
    pub claim_ref: Option<(String, String)>,
    /// `spec.volumeMode`.
    pub volume_mode: String,
    /// `status.phase` (`Available` when unset, as the PV controller would set it).
    pub phase: String,
    /// CSI driver and volume handle, for CSI volumes.
    pub csi: Option<(String, String)>,
    /// Being deleted.
    pub deleting: bool,
    /// `metadata.resourceVersion` (empty in cluster files).
    pub resource_version: String,
}

/// A StorageClass.
#[derive(Debug, Clone, Default)]
pub struct StorageClass {
    /// Name.
    pub name: String,
    /// `provisioner`.
    pub provisioner: String,
    /// `volumeBindingMode` (None when unset).
    pub binding_mode: Option<String>,
    /// `allowedTopologies` as a node selector (terms ORed).
    pub allowed_topologies: Option<NodeSelector>,
}

impl StorageClass {
    /// `volumeBindingMode: WaitForFirstConsumer`.
    pub fn wait_for_first_consumer(&self) -> bool {
        self.binding_mode.as_deref() == Some("WaitForFirstConsumer")
    }
}

/// Volume state of a cluster.
#[derive(Debug, Clone, Default)]
pub struct Volumes {
    /// Claims by (namespace, name).
    pub pvcs: BTreeMap<(String, String), Pvc>,
    /// Volumes by name.
    pub pvs: BTreeMap<String, Pv>,
    /// Classes by name.
    pub classes: BTreeMap<String, StorageClass>,
    /// CSINode attach limits: node → driver → `allocatable.count`.
    pub csi_limits: BTreeMap<String, BTreeMap<String, i32>>,
    /// The drivers each node's CSINode lists (a node without a CSINode has
    /// no entry).
    pub csi_node_drivers: BTreeMap<String, BTreeSet<String>>,
    /// The CSIDrivers with `preventPodSchedulingIfMissing: true`.
    pub csi_drivers_required_on_node: BTreeSet<String>,
    /// The CSIDrivers with `storageCapacity: true` (their provisioning is
    /// checked against CSIStorageCapacity objects).
    pub csi_drivers_with_capacity: BTreeSet<String>,
    /// CSIStorageCapacity objects by (namespace, name).
    pub storage_capacities: BTreeMap<(String, String), StorageCapacity>,
}

/// A CSIStorageCapacity: what a driver can still provision for a class,
/// from the nodes its topology selects.
#[derive(Debug, Clone, Default)]
pub struct StorageCapacity {
    /// `storageClassName`.
    pub class: String,
    /// `nodeTopology` (None: no node has access).
    pub topology: Option<LabelSelector>,
    /// `capacity` in bytes.
    pub capacity: Option<i64>,
    /// `maximumVolumeSize` in bytes.
    pub maximum_volume_size: Option<i64>,
}

/// Upstream's `hasEnoughCapacity` for one claim to provision on a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProvisionCapacity {
    /// The driver does not publish capacity (or the claim asks for no
    /// storage): nothing to check.
    Unchecked,
    /// A CSIStorageCapacity the node reaches holds the claim: its
    /// `capacity` (for StorageCapacityScoring; 0 when unset).
    Enough(i64),
    /// No CSIStorageCapacity the node reaches holds the claim.
    NotEnough,
}

fn err(o: &RawObject, e: convert::FieldError) -> LoadError {
    LoadError {
        file: o.file.clone(),
        object: Some(o.describe()),
        field: Some(e.path),
        message: e.message,
    }
}

fn storage_bytes(
    list: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
    path: &str,
    o: &RawObject,
) -> Result<i64, LoadError> {
    let parsed = convert::resource_list(list, path).map_err(|e| err(o, e))?;
    Ok(parsed.get("storage").map_or(0, Quantity::value))
}

impl Volumes {
    /// Takes a storage object; false for other kinds.
    pub fn take(&mut self, o: &RawObject) -> Result<bool, LoadError> {
        match o.kind.as_str() {
            "PersistentVolumeClaim" => {
                let c: core::PersistentVolumeClaim = o.decode()?;
                let spec = c.spec.clone().unwrap_or_default();
                let namespace = crate::dra::namespace_of(&c.metadata);
                let name = c.metadata.name.clone().unwrap_or_default();
                convert::validate_subdomain_name(&name, "metadata.name").map_err(|e| err(o, e))?;
                let pvc = Pvc {
                    uid: c
                        .metadata
                        .uid
                        .clone()
                        .unwrap_or_else(|| format!("{namespace}/{name}")),
                    namespace,
                    name,
                    storage_class: spec.storage_class_name.clone().unwrap_or_default(),
                    volume_name: spec.volume_name.clone().unwrap_or_default(),
                    bind_completed: c
                        .metadata
                        .annotations
                        .as_ref()
                        .is_some_and(|a| a.contains_key(ANN_BIND_COMPLETED)),
                    access_modes: spec.access_modes.clone().unwrap_or_default(),
                    request: storage_bytes(
                        spec.resources.as_ref().and_then(|r| r.requests.as_ref()),
                        "spec.resources.requests",
                        o,
                    )?,
                    selector: spec
                        .selector
                        .as_ref()
                        .map(|s| convert::label_selector(s, "spec.selector"))
                        .transpose()
                        .map_err(|e| err(o, e))?,
                    volume_mode: spec.volume_mode.unwrap_or_else(|| "Filesystem".into()),
                    deleting: c.metadata.deletion_timestamp.is_some(),
                    selected_node: c
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(ANN_SELECTED_NODE))
                        .cloned()
                        .unwrap_or_default(),
                    resource_version: c.metadata.resource_version.clone().unwrap_or_default(),
                };
                self.pvcs
                    .insert((pvc.namespace.clone(), pvc.name.clone()), pvc);
            }
            "PersistentVolume" => {
                let v: core::PersistentVolume = o.decode()?;
                let spec = v.spec.clone().unwrap_or_default();
                let name = v.metadata.name.clone().unwrap_or_default();
                convert::validate_subdomain_name(&name, "metadata.name").map_err(|e| err(o, e))?;
                let pv = Pv {
                    name,
                    labels: v.metadata.labels.clone().unwrap_or_default(),
                    storage_class: spec.storage_class_name.clone().unwrap_or_default(),
                    capacity: storage_bytes(spec.capacity.as_ref(), "spec.capacity", o)?,
                    access_modes: spec.access_modes.clone().unwrap_or_default(),
                    node_affinity: spec
                        .node_affinity
                        .as_ref()
                        .and_then(|a| a.required.as_ref())
                        .map(|s| convert::node_selector(s, "spec.nodeAffinity.required"))
                        .transpose()
                        .map_err(|e| err(o, e))?,
                    claim_ref: spec.claim_ref.as_ref().map(|r| {
                        (
                            r.namespace.clone().unwrap_or_default(),
                            r.name.clone().unwrap_or_default(),
                        )
                    }),
                    volume_mode: spec.volume_mode.unwrap_or_else(|| "Filesystem".into()),
                    phase: v
                        .status
                        .as_ref()
                        .and_then(|s| s.phase.clone())
                        .unwrap_or_else(|| "Available".into()),
                    csi: spec
                        .csi
                        .as_ref()
                        .map(|c| (c.driver.clone(), c.volume_handle.clone())),
                    deleting: v.metadata.deletion_timestamp.is_some(),
                    resource_version: v.metadata.resource_version.clone().unwrap_or_default(),
                };
                self.pvs.insert(pv.name.clone(), pv);
            }
            "StorageClass" => {
                let s: storage::StorageClass = o.decode()?;
                convert::validate_subdomain_name(
                    s.metadata.name.as_deref().unwrap_or(""),
                    "metadata.name",
                )
                .map_err(|e| err(o, e))?;
                let allowed = match &s.allowed_topologies {
                    Some(terms) if !terms.is_empty() => {
                        let sel = core::NodeSelector {
                            node_selector_terms: terms
                                .iter()
                                .map(|t| core::NodeSelectorTerm {
                                    match_expressions: Some(
                                        t.match_label_expressions
                                            .iter()
                                            .flatten()
                                            .map(|e| core::NodeSelectorRequirement {
                                                key: e.key.clone(),
                                                operator: "In".into(),
                                                values: Some(e.values.clone()),
                                            })
                                            .collect(),
                                    ),
                                    match_fields: None,
                                })
                                .collect(),
                        };
                        Some(
                            convert::node_selector(&sel, "allowedTopologies")
                                .map_err(|e| err(o, e))?,
                        )
                    }
                    _ => None,
                };
                let class = StorageClass {
                    name: s.metadata.name.clone().unwrap_or_default(),
                    provisioner: s.provisioner.clone(),
                    binding_mode: s.volume_binding_mode.clone(),
                    allowed_topologies: allowed,
                };
                self.classes.insert(class.name.clone(), class);
            }
            "CSINode" => {
                let n: storage::CSINode = o.decode()?;
                let name = n.metadata.name.clone().unwrap_or_default();
                let limits = self.csi_limits.entry(name.clone()).or_default();
                for d in &n.spec.drivers {
                    if let Some(count) = d.allocatable.as_ref().and_then(|a| a.count) {
                        limits.insert(d.name.clone(), count);
                    }
                }
                self.csi_node_drivers.insert(
                    name,
                    n.spec.drivers.iter().map(|d| d.name.clone()).collect(),
                );
            }
            "CSIDriver" => {
                let d: storage::CSIDriver = o.decode()?;
                let name = d.metadata.name.clone().unwrap_or_default();
                if d.spec.storage_capacity == Some(true) {
                    self.csi_drivers_with_capacity.insert(name.clone());
                } else {
                    self.csi_drivers_with_capacity.remove(&name);
                }
                if d.spec.prevent_pod_scheduling_if_missing == Some(true) {
                    self.csi_drivers_required_on_node.insert(name);
                } else {
                    self.csi_drivers_required_on_node.remove(&name);
                }
            }
            "CSIStorageCapacity" => {
                let c: storage::CSIStorageCapacity = o.decode()?;
                let namespace = crate::dra::namespace_of(&c.metadata);
                let name = c.metadata.name.clone().unwrap_or_default();
                let bytes = |q: Option<&_>, path: &str| {
                    q.map(|q| crate::dra::quantity(q, path).map(|q| q.value()))
                        .transpose()
                        .map_err(|e| err(o, e))
                };
                let topology = c
                    .node_topology
                    .as_ref()
                    .map(|t| convert::label_selector(t, "nodeTopology"))
                    .transpose()
                    .map_err(|e| err(o, e))?;
                let capacity = StorageCapacity {
                    class: c.storage_class_name.clone(),
                    topology,
                    capacity: bytes(c.capacity.as_ref(), "capacity")?,
                    maximum_volume_size: bytes(
                        c.maximum_volume_size.as_ref(),
                        "maximumVolumeSize",
                    )?,
                };
                self.storage_capacities.insert((namespace, name), capacity);
            }
            "VolumeAttachment" => {}
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Upstream's `hasEnoughCapacity`: may `class` provision `pvc` on
    /// `node` as far as its driver's published capacity goes? The first
    /// CSIStorageCapacity (by namespace and name) of the class that the
    /// node's labels select and whose `maximumVolumeSize` (else
    /// `capacity`) holds the request answers.
    pub fn provision_capacity(
        &self,
        pvc: &Pvc,
        class: &StorageClass,
        node: &Node,
    ) -> ProvisionCapacity {
        if pvc.request == 0 || !self.csi_drivers_with_capacity.contains(&class.provisioner) {
            return ProvisionCapacity::Unchecked;
        }
        self.storage_capacities
            .values()
            .find(|c| {
                c.class == class.name
                    && c.maximum_volume_size
                        .or(c.capacity)
                        .is_some_and(|limit| limit >= pvc.request)
                    && c.topology.as_ref().is_some_and(|t| t.matches(&node.labels))
            })
            .map_or(ProvisionCapacity::NotEnough, |c| {
                ProvisionCapacity::Enough(c.capacity.unwrap_or(0))
            })
    }

    /// Forgets what a CSINode said (before it is taken again, or deleted).
    pub fn forget_csi_node(&mut self, node: &str) {
        self.csi_limits.remove(node);
        self.csi_node_drivers.remove(node);
    }

    /// Is `driver` installed on `node` as far as scheduling is concerned?
    /// Upstream's `checkCSIDriverOnNode`: only a CSIDriver that sets
    /// `preventPodSchedulingIfMissing` must be listed in the node's CSINode.
    pub fn csi_driver_installed(&self, driver: &str, node: &str) -> bool {
        !self.csi_drivers_required_on_node.contains(driver)
            || self
                .csi_node_drivers
                .get(node)
                .is_some_and(|d| d.contains(driver))
    }

    /// A claim by namespace and name.
    pub fn pvc(&self, ns: &str, name: &str) -> Option<&Pvc> {
        self.pvcs.get(&(ns.to_string(), name.to_string()))
    }
}

/// Does the PV's node affinity admit the node?
pub fn pv_fits_node(pv: &Pv, node: &Node) -> bool {
    pv.node_affinity
        .as_ref()
        .is_none_or(|s| s.matches(&node.name, &node.labels))
}

fn bound_to(pv: &Pv, pvc: &Pvc) -> bool {
    pv.claim_ref
        .as_ref()
        .is_some_and(|(ns, n)| ns == &pvc.namespace && n == &pvc.name)
}

/// component-helpers' `FindMatchingVolume` for a delayed-binding claim on a
/// node: the smallest available PV of the claim's class that fits, not in
/// `excluded`.
pub fn find_matching_volume<'a>(
    pvc: &Pvc,
    volumes: &'a Volumes,
    node: &Node,
    excluded: &[String],
) -> Option<&'a Pv> {
    let mut best: Option<&Pv> = None;
    for pv in volumes.pvs.values() {
        if excluded.contains(&pv.name) {
            continue;
        }
        if pv.claim_ref.is_some() && !bound_to(pv, pvc) {
            continue;
        }
        if pv.capacity < pvc.request || pv.volume_mode != pvc.volume_mode || pv.deleting {
            continue;
        }
        let affinity_ok = pv_fits_node(pv, node);
        if bound_to(pv, pvc) {
            return affinity_ok.then_some(pv);
        }
        if pv.phase != "Available" {
            continue;
        }
        if let Some(sel) = &pvc.selector {
            if !sel.matches(&pv.labels) {
                continue;
            }
        }
        if pv.storage_class != pvc.storage_class || !affinity_ok {
            continue;
        }
        if !pvc.access_modes.iter().all(|m| pv.access_modes.contains(m)) {
            continue;
        }
        if best.is_none_or(|b| b.capacity > pv.capacity) {
            best = Some(pv);
        }
    }
    best
}

/// Where a provisioned volume is reachable from: the class's allowed
/// topologies if any, else the chosen node's zone (what zonal provisioners
/// do), else anywhere.
fn provisioned_affinity(class: &StorageClass, node: &Node) -> Option<NodeSelector> {
    if class.allowed_topologies.is_some() {
        return class.allowed_topologies.clone();
    }
    let zone = node.labels.get("topology.kubernetes.io/zone")?;
    Some(NodeSelector {
        terms: vec![crate::selector::NodeSelectorTerm {
            match_expressions: vec![crate::selector::Requirement {
                key: "topology.kubernetes.io/zone".into(),
                op: crate::selector::Operator::In,
                values: vec![zone.clone()],
            }],
            ..Default::default()
        }],
    })
}

/// Can the claim's class provision a volume reachable from the node?
pub fn can_provision(pvc: &Pvc, volumes: &Volumes, node: &Node) -> bool {
    let Some(class) = volumes.classes.get(&pvc.storage_class) else {
        return false;
    };
    if class.provisioner == NO_PROVISIONER {
        return false;
    }
    class
        .allowed_topologies
        .as_ref()
        .is_none_or(|t| t.matches(&node.name, &node.labels))
}

/// What a pod's delayed (WaitForFirstConsumer) claims get on the node the
/// scheduler chose (upstream's `PodVolumes`): the claims matched to an
/// existing volume, and the claims to be provisioned for the node. Each
/// entry keeps the object as it was before the binding was assumed, so it
/// can be restored.
#[derive(Debug, Clone, Default)]
pub struct PodVolumes {
    /// Claims bound to an existing volume: (claim, volume).
    pub static_bindings: Vec<(Pvc, Pv)>,
    /// Claims to be provisioned on the chosen node.
    pub provisions: Vec<Pvc>,
    /// For each of `provisions`, the `capacity` of the CSIStorageCapacity
    /// that holds it (None when its driver publishes no capacity).
    pub provision_capacities: Vec<Option<i64>>,
}

impl PodVolumes {
    /// True when there is nothing to bind.
    pub fn is_empty(&self) -> bool {
        self.static_bindings.is_empty() && self.provisions.is_empty()
    }
}

impl Volumes {
    /// Assumes the bindings (upstream's `AssumePodVolumes` on the assume
    /// cache): each matched volume's claimRef names its claim, so no other
    /// claim matches it; each claim to provision carries the selected node.
    /// Only objects still at the version they were assumed from change: a
    /// newer one (the informer's) wins, as in upstream's assume cache.
    pub fn assume_bindings(&mut self, v: &PodVolumes, node: &str) {
        for (pvc, pv) in &v.static_bindings {
            if let Some(p) = self.pvs.get_mut(&pv.name) {
                if p.resource_version == pv.resource_version {
                    p.claim_ref = Some(pvc.key());
                }
            }
        }
        for pvc in &v.provisions {
            if let Some(c) = self.pvcs.get_mut(&pvc.key()) {
                if c.resource_version == pvc.resource_version {
                    c.selected_node = node.to_string();
                }
            }
        }
    }

    /// One converted PersistentVolume or PersistentVolumeClaim object
    /// (e.g. an API server's answer to an update); `None` for other kinds
    /// or objects that do not convert.
    pub fn convert_one(o: &RawObject) -> Option<(Option<Pv>, Option<Pvc>)> {
        let mut v = Volumes::default();
        v.take(o).ok()?;
        Some((v.pvs.into_values().next(), v.pvcs.into_values().next()))
    }

    /// Undoes [`Volumes::assume_bindings`] (upstream's
    /// `RevertAssumedPodVolumes`): every object still at the version it was
    /// assumed from is restored; a newer one (the informer's) stays.
    pub fn revert_bindings(&mut self, v: &PodVolumes) {
        for (_, pv) in &v.static_bindings {
            if let Some(p) = self.pvs.get_mut(&pv.name) {
                if p.resource_version == pv.resource_version {
                    *p = pv.clone();
                }
            }
        }
        for pvc in &v.provisions {
            if let Some(c) = self.pvcs.get_mut(&pvc.key()) {
                if c.resource_version == pvc.resource_version {
                    *c = pvc.clone();
                }
            }
        }
    }

    /// The simulator's PV controller binding `pvc` to the volume `pv_name`
    /// at once: the volume is Bound with the claim's claimRef, the claim
    /// has the volume name and the bind-completed annotation.
    pub fn complete_static_binding(&mut self, pvc: &Pvc, pv_name: &str) {
        if let Some(pv) = self.pvs.get_mut(pv_name) {
            pv.claim_ref = Some(pvc.key());
            pv.phase = "Bound".into();
        }
        if let Some(c) = self.pvcs.get_mut(&pvc.key()) {
            c.volume_name = pv_name.to_string();
            c.bind_completed = true;
        }
    }

    /// The simulator's provisioner and PV controller for a claim whose
    /// selected node is `node`: a volume `pvc-<uid>` of the claim's size,
    /// reachable as the class allows, bound to the claim at once.
    pub fn complete_provisioning(&mut self, pvc: &Pvc, node: &Node) {
        let Some(class) = self.classes.get(&pvc.storage_class) else {
            return;
        };
        let name = format!("pvc-{}", pvc.uid.replace('/', "-"));
        let pv = Pv {
            name: name.clone(),
            storage_class: pvc.storage_class.clone(),
            capacity: pvc.request,
            access_modes: pvc.access_modes.clone(),
            node_affinity: provisioned_affinity(class, node),
            volume_mode: pvc.volume_mode.clone(),
            phase: "Bound".into(),
            ..Default::default()
        };
        self.pvs.insert(name.clone(), pv);
        self.complete_static_binding(pvc, &name);
    }
}
