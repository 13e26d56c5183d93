//! The host as the binding cycle's plugins see it: [`AssumeCache`], the
//! host's cache as Reserve and Unreserve change it (upstream's assume
//! caches over the informers), and [`ClusterApi`], the API server as
//! PreBind and Bind write to it (upstream's clientset), split into the
//! small traits its users need. The live scheduler implements them over
//! the API server, the simulator over its snapshot
//! ([`crate::in_memory`]).

use std::sync::Arc;
use std::time::Duration;

use rkube_model::dra::{RequestMapping, ResourceClaim};
use rkube_model::volumes::{PodVolumes, Pv, Pvc};
use rkube_model::{Node, Pod};

/// The host's cache as Reserve and Unreserve change it.
pub trait AssumeCache {
    /// Counts the pod's volume bindings on `node` for later cycles
    /// (upstream's `AssumePodVolumes`).
    fn assume_volumes(&mut self, pod: &Pod, node: &str, volumes: &PodVolumes);
    /// Restores what [`AssumeCache::assume_volumes`] changed
    /// (`RevertAssumedPodVolumes`).
    fn revert_volumes(&mut self, pod: &Pod, volumes: &PodVolumes);
    /// Puts `claim` in the cache as the scheduler now sees it: Reserve
    /// passes the claim with its new allocation (later pods see its
    /// devices as taken), Unreserve the claim as it was (upstream's
    /// DRA manager's in-flight claims and `AssumedClaimRestore`).
    fn assume_claim(&mut self, claim: &ResourceClaim);
    /// Drops a claim that exists only in the scheduler's memory (the
    /// in-memory claim for a pod's DRA-backed extended resources, which
    /// Unreserve gives up).
    fn forget_claim(&mut self, namespace: &str, name: &str);
}

/// The API server as the binding cycle's plugins write to and read from
/// it, in the small traits its users need: [`Binder`], [`VolumeApi`],
/// [`ClaimApi`], [`Listers`] and [`HostClock`]. Every call may block (the
/// live scheduler runs the binding cycle on a thread of its own); errors
/// are the API's message. A host implements each; `ClusterApi` is all of
/// them, which is what the extension points hand to plugins.
pub trait ClusterApi: Binder + VolumeApi + ClaimApi + Listers + HostClock {}

impl<T: Binder + VolumeApi + ClaimApi + Listers + HostClock + ?Sized> ClusterApi for T {}

/// Binding a pod and telling of it (DefaultBinder).
pub trait Binder {
    /// `POST pods/NAME/binding` (DefaultBinder).
    fn bind(&mut self, pod: &Pod, node: &str) -> Result<(), String>;
    /// Records a Normal Event about the pod being bound (upstream's
    /// plugins use the framework handle's recorder).
    fn event(&mut self, reason: &str, action: &str, note: &str);
}

/// PersistentVolumes and their claims (VolumeBinding's PreBind).
pub trait VolumeApi {
    /// Writes `pv`'s claimRef to name `pvc` and marks it bound by the
    /// controller (a static binding; `pv` is the volume as it was read, for
    /// the update's optimistic concurrency). Returns the volume as written.
    fn bind_pv(&mut self, pv: &Pv, pvc: &Pvc) -> Result<Pv, String>;
    /// Sets the claim's `volume.kubernetes.io/selected-node` annotation to
    /// `node` (asks the provisioner for a volume reachable from it; `pvc` as
    /// it was read). Returns the claim as written.
    fn select_node(&mut self, pvc: &Pvc, node: &str) -> Result<Pvc, String>;
    /// The claim as the host last saw it (informer cache); `None` if gone.
    fn pvc(&self, namespace: &str, name: &str) -> Option<Pvc>;
    /// The volume as the host last saw it; `None` if gone.
    fn pv(&self, name: &str) -> Option<Pv>;
}

/// ResourceClaims (DynamicResources' PreBind and Unreserve).
pub trait ClaimApi {
    /// Writes a ResourceClaim's status (allocation and `reservedFor`) and,
    /// when it lacks it, the delete-protection finalizer (`claim` as it was
    /// read, for the update's optimistic concurrency). Returns the claim as
    /// written.
    fn update_claim_status(&mut self, claim: &ResourceClaim) -> Result<ResourceClaim, String>;
    /// The ResourceClaim as the host last saw it; `None` if gone.
    fn resource_claim(&self, namespace: &str, name: &str) -> Option<ResourceClaim>;
    /// Creates `claim` (its spec, owner and annotation; named from its
    /// `generate_name`; no status) and returns it as created. `claim` is
    /// the in-memory claim as Reserve assumed it: the host's cache puts
    /// the created claim in its place, still holding that allocation.
    fn create_claim(&mut self, claim: &ResourceClaim) -> Result<ResourceClaim, String>;
    /// Deletes a claim (its delete-protection finalizer removed first),
    /// and forgets what the host's cache assumed for it.
    fn delete_claim(&mut self, namespace: &str, name: &str) -> Result<(), String>;
    /// Writes the pod's `status.extendedResourceClaimStatus`.
    fn set_extended_resource_claim_status(
        &mut self,
        pod: &Pod,
        claim_name: &str,
        mappings: &[RequestMapping],
    ) -> Result<(), String>;
}

/// What the host last saw of nodes and pods.
pub trait Listers {
    /// The node as the host last saw it; `None` if gone.
    fn node(&self, name: &str) -> Option<Arc<Node>>;
    /// True while the pod (by namespace, name and UID) still exists.
    fn pod_exists(&self, pod: &Pod) -> bool;
}

/// The host's clock (the simulator's only moves on).
pub trait HostClock {
    /// Waits (the simulator's clock only moves on).
    fn sleep(&mut self, d: Duration);
    /// Time since the binding cycle started, on the host's clock.
    fn elapsed(&self) -> Duration;
}
