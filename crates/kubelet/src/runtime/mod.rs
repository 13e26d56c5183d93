//! The container runtime seen by the kubelet: one object-safe trait,
//! [`Runtime`], at the level of a *pod* ("make this pod run as its spec
//! says, and tell me what you see"), so the pod workers stay independent of
//! how containers are made.
//!
//! Two implementations: [`sim::SimRuntime`] (nothing runs; pods go Pending →
//! Running → Succeeded on timers) and, in `crates/cri`, a CRI client over
//! containerd.
//!
//! # Implementing it over CRI
//!
//! | method | CRI calls |
//! |---|---|
//! | [`Runtime::version`] | `RuntimeService.Version` (+ `Status` for readiness) |
//! | [`Runtime::sync_pod`] | `ListPodSandbox(label uid)`; if none ready: `RunPodSandbox` (hostname, log dir, DNS, port mappings from the spec); `ListContainers(sandbox)`; for each spec container not running whose restart policy says to (re)start it: `PullImage` if `ImageStatus` has none, `CreateContainer`, `StartContainer`; then `PodSandboxStatus` (IPs) and `ContainerStatus` per container → [`PodObservation`] |
//! | [`Runtime::kill_pod`] | `StopContainer(id, grace)` for each container, then `StopPodSandbox` |
//! | [`Runtime::remove_pod`] | `RemoveContainer` for each, then `RemovePodSandbox` |
//! | [`Runtime::list_pods`] | `ListPodSandbox` → the `io.kubernetes.pod.uid` labels |
//!
//! Rules the pod workers rely on:
//! * every method may be called concurrently for *different* pods, never
//!   concurrently for the same pod uid;
//! * `sync_pod` is idempotent and is called again after
//!   [`PodObservation::resync_after`] (or the worker's periodic resync when
//!   `None`), whenever the pod object changes and whenever the runtime
//!   wakes the pod's worker ([`Runtime::wakeups`]); it must adopt what already exists (a kubelet
//!   restart must not duplicate sandboxes/containers);
//! * `sync_pod` returns statuses in spec order, one per spec container
//!   (a container not created yet is `Waiting` with reason
//!   `ContainerCreating`);
//! * `kill_pod` returns once every container is stopped (or the grace
//!   period forced it); `remove_pod` of an unknown pod is `Ok`.

pub mod cri;
pub mod features;
pub mod sim;
pub mod wake;

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

pub use crate::BoxFuture;

/// A runtime failure (the pod worker logs it and retries).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RuntimeError(pub String);

/// `RuntimeService.Version`: shown in `node.status.nodeInfo.containerRuntimeVersion`
/// as `<runtime_name>://<runtime_version>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeVersion {
    /// e.g. `containerd` or `sim`.
    pub runtime_name: String,
    /// e.g. `2.1.4`.
    pub runtime_version: String,
}

/// One relist: by pod uid, the ids of its sandboxes and containers with
/// their states (CRI's enum values), sorted.
pub type Relisted = std::collections::HashMap<String, Vec<(String, i32)>>;

/// What a container is doing, as CRI's `ContainerStatus` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContainerState {
    /// Not running yet (or between restarts).
    Waiting {
        /// e.g. `ContainerCreating`, `ErrImagePull`.
        reason: String,
        /// Human-readable detail (may be empty).
        message: String,
    },
    /// Running since `started_at`.
    Running {
        /// When the container started.
        started_at: Timestamp,
    },
    /// Exited.
    Terminated {
        /// Process exit code.
        exit_code: i32,
        /// e.g. `Completed`, `Error`, `OOMKilled`.
        reason: String,
        /// When it started.
        started_at: Timestamp,
        /// When it exited.
        finished_at: Timestamp,
        /// The termination message (the file at `terminationMessagePath`,
        /// or the log's tail with `FallbackToLogsOnError`); may be empty.
        message: String,
    },
}

/// One container as the runtime sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerObservation {
    /// The container's name in the pod spec.
    pub name: String,
    /// The image as written in the spec.
    pub image: String,
    /// The resolved image (digest), empty if not pulled yet.
    pub image_id: String,
    /// `<runtime>://<id>`, empty if not created yet.
    pub container_id: String,
    /// Current state.
    pub state: ContainerState,
    /// Restarts so far.
    pub restart_count: i32,
    /// Readiness (no probes: running ⇒ ready; an init container that
    /// exited 0 is ready).
    pub ready: bool,
    /// `status.started`: running and past its startup probe.
    pub started: bool,
    /// The state of the previous instance (`lastState`), if any.
    pub last_state: Option<ContainerState>,
    /// The resources the runtime reports the running instance has.
    pub resources: Option<ResourcesSeen>,
}

/// The cpu and memory a running container has, as the runtime reports
/// them (upstream's `kubecontainer.ContainerResources`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ResourcesSeen {
    /// From the cpu shares, millicores.
    pub cpu_request: Option<i64>,
    /// From the CFS quota, millicores.
    pub cpu_limit: Option<i64>,
    /// The memory limit, bytes.
    pub memory_limit: Option<i64>,
}

/// What `sync_pod` observed after acting.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodObservation {
    /// The sandbox exists and has its network (PodReadyToStartContainers).
    pub sandbox_ready: bool,
    /// Pod IPs (first is `status.podIP`).
    pub pod_ips: Vec<String>,
    /// Init containers, spec order.
    pub init_containers: Vec<ContainerObservation>,
    /// Containers, spec order.
    pub containers: Vec<ContainerObservation>,
    /// Ephemeral containers (`kubectl debug`), spec order.
    pub ephemeral_containers: Vec<ContainerObservation>,
    /// Call `sync_pod` again after this long (a timer of the runtime, e.g.
    /// the sim's start delay); `None` means the worker's periodic resync.
    pub resync_after: Option<Duration>,
    /// An in-place resize that could not be applied (upstream's
    /// `PodResizeInProgress` with reason `Error`).
    pub resize_error: Option<String>,
}

/// The runtime's own status, as the node reports it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuntimeStatus {
    /// `Some(error)` while the runtime's pod network is not ready.
    pub network_error: Option<String>,
    /// The runtime handlers and their features (upstream's
    /// `RuntimeHandlers` node status setter).
    pub handlers: Vec<k8s_openapi::api::core::v1::NodeRuntimeHandler>,
}

/// Why the node refuses to run a pod (upstream's kubelet admission): the
/// pod goes `Failed` with this reason and the message "Pod was rejected:
/// <message>", and nothing of it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// e.g. `PodOSNotSupported`, `SysctlForbidden`.
    pub reason: String,
    /// Upstream's message.
    pub message: String,
}

/// The admission checks every runtime makes (upstream's predicate
/// admit handler): the pod's `kubernetes.io/os` label and `spec.os` must
/// name this node's OS (linux).
pub fn admit_os(pod: &Pod) -> Result<(), Rejection> {
    let label = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("kubernetes.io/os"));
    if label.is_some_and(|os| os != "linux") {
        return Err(Rejection {
            reason: "PodOSSelectorNodeLabelDoesNotMatch".into(),
            message: "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"
                .into(),
        });
    }
    let os = pod.spec.as_ref().and_then(|s| s.os.as_ref());
    if os.is_some_and(|o| o.name != "linux") {
        return Err(Rejection {
            reason: "PodOSNotSupported".into(),
            message: "Failed to admit pod as the OS field doesn't match node OS".into(),
        });
    }
    Ok(())
}

/// The container runtime behind the pod workers (see the module docs for
/// the contract and the CRI mapping).
pub trait Runtime: Send + Sync + 'static {
    /// Runtime name and version; an error means the runtime is down (the
    /// node then reports `Ready=False`).
    fn version(&self) -> BoxFuture<'_, Result<RuntimeVersion, RuntimeError>>;

    /// Brings the pod to its spec (sandbox, then containers) and returns
    /// what is observed afterwards. The pod carries its last known status,
    /// which an implementation may use to adopt existing containers.
    fn sync_pod<'a>(&'a self, pod: &'a Pod) -> BoxFuture<'a, Result<PodObservation, RuntimeError>>;

    /// Stops every container of pod `uid` within `grace`, then its sandbox;
    /// returns the final observation (containers terminated).
    fn kill_pod<'a>(
        &'a self,
        pod: &'a Pod,
        grace: Duration,
    ) -> BoxFuture<'a, Result<PodObservation, RuntimeError>>;

    /// Removes everything of pod `uid` (after `kill_pod`).
    fn remove_pod<'a>(&'a self, uid: &'a str) -> BoxFuture<'a, Result<(), RuntimeError>>;

    /// Frees what must be gone before a killed pod's deletion is confirmed
    /// to the API server (upstream's `PodResourcesAreReclaimed`): its
    /// cgroup and its volumes' mounts. Its stopped containers and sandbox
    /// stay for [`Runtime::remove_pod`] afterwards, as upstream leaves them
    /// to its garbage collector.
    fn reclaim_pod<'a>(&'a self, _uid: &'a str) -> BoxFuture<'a, Result<(), RuntimeError>> {
        Box::pin(async { Ok(()) })
    }

    /// Uids of the pods the runtime holds (to clean up pods deleted while
    /// the kubelet was down).
    fn list_pods(&self) -> BoxFuture<'_, Result<Vec<String>, RuntimeError>>;

    /// Uids of pods whose directory is still on the node while the runtime
    /// holds none of their sandboxes: what a kubelet killed between
    /// removing a pod's sandbox and its directory leaves (its volumes
    /// mounted, and its cgroup, which goes before the directory; upstream's
    /// `cleanupOrphanedPodDirs` and `cleanupOrphanedPodCgroups` find them).
    /// [`Runtime::remove_pod`] ends what is left. Empty when the runtime
    /// cannot be listed.
    fn leftovers(&self) -> BoxFuture<'_, Vec<String>> {
        Box::pin(async { Vec::new() })
    }

    /// Where the runtime wakes a pod's worker (its prober's verdicts);
    /// `None`: it never does.
    fn wakeups(&self) -> Option<std::sync::Arc<crate::runtime::wake::Wakeups>> {
        None
    }

    /// Everything the runtime holds, in one listing (upstream's PLEG
    /// relist; [`crate::pleg`] compares two and wakes the workers of the
    /// pods that changed). `None`: the runtime keeps its own timers and is
    /// not relisted (the sim).
    fn relist(&self) -> BoxFuture<'_, Result<Option<Relisted>, RuntimeError>> {
        Box::pin(async { Ok(None) })
    }

    /// Forgets what the runtime recorded of pods it no longer holds
    /// (`held`: [`Runtime::list_pods`]'s answer), e.g. the actuated
    /// resources of pods deleted while the kubelet was down.
    fn forget_others(&self, _held: &[String]) {}

    /// Hands the runtime the node's pod CIDRs (comma-separated), as
    /// upstream's `UpdatePodCIDR` (CRI `UpdateRuntimeConfig`).
    fn update_pod_cidr<'a>(&'a self, _cidr: &'a str) -> BoxFuture<'a, Result<(), RuntimeError>> {
        Box::pin(async { Ok(()) })
    }

    /// What the runtime says of itself: whether its pod network is ready
    /// (upstream's `NetworkReady` condition, folded into the node's
    /// `Ready`) and its runtime handlers (`status.runtimeHandlers`).
    fn runtime_status(&self) -> BoxFuture<'_, RuntimeStatus> {
        Box::pin(async { RuntimeStatus::default() })
    }

    /// Whether this node may run `pod` at all (checked once, before its
    /// first sync).
    fn admit(&self, pod: &Pod) -> Result<(), Rejection> {
        admit_os(pod)
    }
}
