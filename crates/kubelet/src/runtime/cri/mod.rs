//! [`CriRuntime`]: the [`Runtime`] over a CRI runtime (containerd) with
//! [`rkube_cri::CriClient`], following the mapping in the [module
//! docs](super). Upstream's `pkg/kubelet/kuberuntime`, one concern a file:
//!
//! | file | what it does |
//! |---|---|
//! | [`plan`] | the pure decisions of a sync (`computePodActions`): sandbox, kills, starts, in order |
//! | `sync.rs` | a sync: gather what the runtime holds, plan, execute (back-off at execution), observe |
//! | `observe.rs` | a pod's status as the runtime shows it, with the prober's verdicts |
//! | `kill.rs` | stopping a pod (sidecars last) and removing it with its directories |
//! | [`spec`] | pod spec → CRI sandbox and container configs (env, mounts, security, resources) |
//! | [`hooks`], [`termination`] | lifecycle hooks; termination messages |
//! | this file | the runtime itself: construction, starting a container, the [`Runtime`] methods |
//!
//! Images are pulled by the image manager ([`crate::images::puller`]),
//! volumes are set up by the volume manager ([`crate::volumes`]), probes
//! run in the [`ProbeManager`].
//!
//! * One sandbox per pod, labelled with the pod's uid/name/namespace
//!   ([`spec::sandbox_labels`]); a sync finds it by the uid label, so a
//!   restarted kubelet adopts its sandboxes and containers (restart counts
//!   are the containers' CRI `attempt`, so they survive too).
//! * Lifecycle hooks: `postStart` right after `StartContainer` (a failure
//!   kills the container: `PostStartHookError`), `preStop` before every
//!   stop, within the grace.
//! * Termination messages, the kubelet-managed `/etc/hosts`
//!   ([`spec::etc_hosts`]), `lastState` from the previous instance, and
//!   Events ([`crate::events`]) with upstream's reasons.
//! * Exited containers restart per `restartPolicy` with upstream's
//!   crash-loop back-off ([`crate::backoff`]: at once, then 10 s doubling
//!   to 300 s), reported as `Waiting`/`CrashLoopBackOff` meanwhile.
//! * Container logs go to `Dirs::logs` in `/var/log/pods` layout
//!   (`<ns>_<name>_<uid>/<container>/<attempt>.log`).
//! * Probes run as tasks of a [`ProbeManager`]; `ready` follows readiness,
//!   a liveness/startup failure kills the container: a new verdict wakes
//!   the pod's worker. So does a container's change of state, seen by
//!   [`crate::pleg`] within a second of [`Runtime::relist`]; a pod with
//!   nothing pending is otherwise synced at its worker's periodic resync.
//! * Mirror pods (annotation `kubernetes.io/config.mirror`) are never run:
//!   `sync_pod` only observes the static pod they mirror (whose uid is the
//!   annotation's value), so the pod worker reports its status on the
//!   mirror; `kill_pod`/`remove_pod` of a mirror leave the static pod alone.
//!   [`CriRuntime::list_pods`] leaves out static pods (the static pod source
//!   cleans up its own, see [`CriRuntime::list_static_pods`]).

pub mod hooks;
mod kill;
mod observe;
pub mod plan;
mod pod_cgroups;
pub mod spec;
mod sync;
pub mod termination;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use rkube_cri::{v1, CriClient};
use rkube_model::Quantity;

use self::hooks::{Hook, HookTarget};
use self::spec::resources::ResourceOptions;
use self::spec::security::{ImageUser, SecurityOptions};
use self::spec::{ContainerInputs, LABEL_POD_UID, LABEL_STATIC};
use super::{BoxFuture, ContainerState, PodObservation, Runtime, RuntimeError, RuntimeVersion};
use crate::backoff::Backoff;
use crate::events::Recorder;
use crate::images::pull_records::{PullRecords, VerifyPolicy};
use crate::images::puller::{ImageError, ImageManager};
use crate::pod::downward::DownwardContext;
use crate::pod::env::EnvSources;
use crate::pod::{mirror_of, pod_namespace, termination_grace as pod_grace, Dirs};
use crate::prober::ProbeManager;
use crate::volumes::manager::{EnvInputs, VolumeManager};

/// How soon a pod being stopped (or a mirror pod, every 5 s at most) is
/// looked at again.
pub const RELIST: Duration = Duration::from_secs(2);

/// The runtime's name and version (`Version`), an error unless `Status`
/// says it is ready.
pub async fn version(cri: &CriClient) -> Result<RuntimeVersion, RuntimeError> {
    let v = cri.version().await.map_err(err)?;
    let status = cri.status().await.map_err(err)?;
    if let Some(c) = rkube_cri::condition(&status, "RuntimeReady").filter(|c| !c.status) {
        return Err(err(format!(
            "container runtime not ready: {} {}",
            c.reason, c.message
        )));
    }
    Ok(RuntimeVersion {
        runtime_name: v.runtime_name,
        runtime_version: v.runtime_version,
    })
}

/// Why a container did not start (upstream's container start errors; the
/// reason is the container's waiting reason).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StartError {
    /// Its image cannot be used.
    #[error(transparent)]
    Image(#[from] ImageError),
    /// Its config could not be made (a ConfigMap, Secret or field the node
    /// cannot honour).
    #[error("{0}")]
    CreateConfig(String),
    /// `CreateContainer` failed.
    #[error("{0}")]
    Create(String),
    /// `StartContainer` failed.
    #[error("{0}")]
    Run(String),
    /// Its `postStart` hook failed (the container was killed).
    #[error("{0}")]
    PostStartHook(String),
}

impl StartError {
    /// The waiting reason upstream reports.
    pub fn reason(&self) -> &'static str {
        match self {
            StartError::Image(e) => e.reason(),
            StartError::CreateConfig(_) => "CreateContainerConfigError",
            StartError::Create(_) => "CreateContainerError",
            StartError::Run(_) => "RunContainerError",
            StartError::PostStartHook(_) => "PostStartHookError",
        }
    }
}

/// A [`Runtime`] over CRI.
pub struct CriRuntime {
    cri: CriClient,
    dirs: Dirs,
    node: NodeFacts,
    resources: ResourceOptions,
    security: SecurityOptions,
    volumes: Option<Arc<VolumeManager>>,
    backoff: Mutex<Backoff>,
    probes: ProbeManager,
    /// The pod workers' wake-ups: a probe verdict that changes syncs the
    /// pod at once.
    wakeups: Arc<crate::runtime::wake::Wakeups>,
    events: Option<Recorder>,
    images: ImageManager,
    /// The resources each pod's containers were created or last resized
    /// with (`actuated_pods_state`).
    actuated: Arc<crate::allocation::State>,
    /// The device plugins' devices (none: no device plugins).
    devices: Option<Arc<crate::devices::Manager>>,
    /// The DRA manager (none: pods with ResourceClaims are refused).
    dra: Option<Arc<crate::dra::Manager>>,
    /// The node's cgroups (none: the runtime makes no pod cgroups).
    cgroups: Option<Arc<crate::cm::ContainerManager>>,
    /// The pods' cgroups, by uid.
    pod_cgroups: Mutex<pod_cgroups::PodCgroups>,
}

/// What containers are made against from the node: its IP (the pod IP of
/// host-network pods, `status.hostIP` in the downward API), allocatable
/// (unset limits in the downward API) and memory (Burstable OOM scores).
#[derive(Debug, Clone)]
pub struct NodeFacts {
    /// The node's IP (empty when unknown).
    pub host_ip: String,
    /// The node's capacity.
    pub capacity: BTreeMap<String, Quantity>,
    /// The node's allocatable.
    pub allocatable: BTreeMap<String, Quantity>,
    /// Cluster DNS, domain and resolver file.
    pub dns: crate::network::dns::Settings,
    /// `memorySwap.swapBehavior: LimitedSwap`.
    pub limited_swap: bool,
    /// `cgroupRoot`.
    pub cgroup_root: String,
    /// `cpuCFSQuota`.
    pub cpu_cfs_quota: bool,
    /// `cpuCFSQuotaPeriod`, µs.
    pub cpu_cfs_quota_period_us: i64,
    /// `singleProcessOOMKill`.
    pub single_process_oom_kill: Option<bool>,
    /// `memoryThrottlingFactor`.
    pub memory_throttling_factor: Option<f64>,
    /// `memoryReservationPolicy: TieredReservation`.
    pub tiered_memory_reservation: bool,
    /// `allowedUnsafeSysctls`.
    pub allowed_unsafe_sysctls: Vec<String>,
    /// The MemoryQoS feature gate.
    pub memory_qos: bool,
}

impl Default for NodeFacts {
    fn default() -> Self {
        NodeFacts {
            host_ip: String::new(),
            capacity: BTreeMap::new(),
            allocatable: BTreeMap::new(),
            dns: Default::default(),
            limited_swap: false,
            cgroup_root: "/".into(),
            cpu_cfs_quota: true,
            cpu_cfs_quota_period_us: 100_000,
            single_process_oom_kill: None,
            memory_throttling_factor: None,
            tiered_memory_reservation: false,
            allowed_unsafe_sysctls: Vec::new(),
            // Upstream's default: MemoryQoS is on in v1.37.
            memory_qos: true,
        }
    }
}

/// Everything a [`CriRuntime`] is made with besides its connection.
pub struct CriParts {
    /// Where pods' data and logs live.
    pub dirs: Dirs,
    /// The node's side of containers.
    pub node: NodeFacts,
    /// The image pull records ([`crate::images::pull_records`]).
    pub pulls: PullRecords,
    /// Events are recorded through this (none without it).
    pub events: Option<Recorder>,
    /// Fetches and writes ConfigMap, Secret, downwardAPI and projected
    /// volumes (without one, pods using them fail to start: static pods
    /// with no API server).
    pub volumes: Option<Arc<VolumeManager>>,
    /// The node's cgroups: pods get cgroups of their own with their limits
    /// (none: the runtime leaves them to the container runtime).
    pub cgroups: Option<Arc<crate::cm::ContainerManager>>,
    /// `registryPullQPS`/`registryBurst`: a pull over the rate fails (none:
    /// no limit).
    pub pull_limiter: Option<Arc<rkube_daemon::ratelimit::RateLimiter>>,
    /// The actuated resources ([`crate::allocation`]).
    pub actuated: Arc<crate::allocation::State>,
    /// The device manager (none: no device plugins).
    pub devices: Option<Arc<crate::devices::Manager>>,
    /// The DRA manager (none: pods with ResourceClaims are refused).
    pub dra: Option<Arc<crate::dra::Manager>>,
}

impl CriParts {
    /// Parts with only the directories: no node facts, in-memory pull
    /// records with upstream's default policy, no events, no volumes.
    pub fn bare(dirs: Dirs) -> CriParts {
        CriParts {
            dirs,
            node: NodeFacts::default(),
            pulls: PullRecords::in_memory(VerifyPolicy::default()),
            events: None,
            volumes: None,
            cgroups: None,
            pull_limiter: None,
            actuated: Arc::new(crate::allocation::State::in_memory()),
            devices: None,
            dra: None,
        }
    }
}

/// The node's side of container resources, from this host.
fn node_resources(
    node: &NodeFacts,
    capacity_memory: i64,
    allocatable_memory: i64,
) -> ResourceOptions {
    use self::spec::resources;
    let mut r = ResourceOptions::new(capacity_memory.max(1));
    r.limited_swap = node.limited_swap;
    r.cgroup_root = node.cgroup_root.clone();
    r.cpu_cfs_quota = node.cpu_cfs_quota;
    r.cpu_cfs_quota_period_us = node.cpu_cfs_quota_period_us;
    r.single_process_oom_kill = node.single_process_oom_kill;
    r.memory_throttling_factor = node.memory_throttling_factor;
    r.tiered_memory_reservation = node.tiered_memory_reservation;
    r.memory_qos = node.memory_qos;
    r.swap_capacity = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| crate::stats::procfs::meminfo_bytes(&m, "SwapTotal"))
        .unwrap_or(0);
    r.node_allocatable_memory = allocatable_memory.max(1);
    r.cgroup_v2 = resources::detect_cgroup_v2();
    r.swap_controller_available = resources::detect_swap_controller(r.cgroup_v2);
    r.hugepage_sizes = resources::detect_hugepage_sizes();
    r
}

fn err(e: impl std::fmt::Display) -> RuntimeError {
    RuntimeError(e.to_string())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn ts(ns: i64) -> Timestamp {
    Timestamp::from_nanosecond(ns as i128).unwrap_or(Timestamp::UNIX_EPOCH)
}

fn uid_filter(uid: &str) -> HashMap<String, String> {
    [(LABEL_POD_UID.to_string(), uid.to_string())].into()
}

fn attempt(c: &v1::Container) -> u32 {
    c.metadata.as_ref().map(|m| m.attempt).unwrap_or(0)
}

fn container_name(c: &v1::Container) -> &str {
    c.metadata.as_ref().map(|m| m.name.as_str()).unwrap_or("")
}

/// The newest instance of every container name (highest attempt, then
/// newest creation).
fn latest(containers: Vec<v1::Container>) -> HashMap<String, v1::Container> {
    let mut out: HashMap<String, v1::Container> = HashMap::new();
    for c in containers {
        let name = container_name(&c).to_string();
        let newer = out
            .get(&name)
            .is_none_or(|o| (attempt(&c), c.created_at) > (attempt(o), o.created_at));
        if newer {
            out.insert(name, c);
        }
    }
    out
}

fn waiting(reason: &str, message: impl Into<String>) -> ContainerState {
    ContainerState::Waiting {
        reason: reason.into(),
        message: message.into(),
    }
}

/// The observed state of a CRI container status.
pub fn state_of(s: &v1::ContainerStatus) -> ContainerState {
    match v1::ContainerState::try_from(s.state) {
        Ok(v1::ContainerState::ContainerRunning) => ContainerState::Running {
            started_at: ts(s.started_at),
        },
        Ok(v1::ContainerState::ContainerExited) => ContainerState::Terminated {
            exit_code: s.exit_code,
            reason: if !s.reason.is_empty() {
                s.reason.clone()
            } else if s.exit_code == 0 {
                "Completed".into()
            } else {
                "Error".into()
            },
            started_at: ts(s.started_at),
            finished_at: ts(s.finished_at),
            message: String::new(),
        },
        Ok(v1::ContainerState::ContainerCreated) => waiting("ContainerCreating", ""),
        _ => waiting("Unknown", s.message.clone()),
    }
}

/// The instance before the newest of every container name (its state is
/// `lastState`).
fn previous_instances(containers: &[v1::Container]) -> HashMap<String, v1::Container> {
    let newest = latest(containers.to_vec());
    let older: Vec<v1::Container> = containers
        .iter()
        .filter(|c| newest.get(container_name(c)).is_none_or(|n| n.id != c.id))
        .cloned()
        .collect();
    latest(older)
}

/// What one sync decided for a container besides its CRI state.
enum Override {
    /// Report Waiting with this reason/message instead of the CRI state.
    Waiting(String, String),
}

/// The sandbox in use for a pod.
struct Sandbox {
    id: String,
    config: v1::PodSandboxConfig,
    ready: bool,
    ips: Vec<String>,
}

impl CriRuntime {
    /// Connects to the CRI endpoint (`unix:///...`); `observer` is told of
    /// every call.
    pub async fn connect_client(
        endpoint: &str,
        observer: Arc<dyn rkube_cri::observe::Observer>,
    ) -> Result<CriClient, RuntimeError> {
        let options = rkube_cri::ConnectOptions {
            observer: Some(observer),
            ..Default::default()
        };
        CriClient::connect_with(endpoint, options)
            .await
            .map_err(err)
    }

    /// A runtime over a connected client, made complete from `parts`.
    pub fn new(cri: CriClient, parts: CriParts) -> Result<CriRuntime, RuntimeError> {
        let CriParts {
            dirs,
            node,
            pulls,
            events,
            volumes,
            cgroups,
            pull_limiter,
            actuated,
            devices,
            dra,
        } = parts;
        std::fs::create_dir_all(&dirs.logs)
            .map_err(|e| err(format!("creating {}: {e}", dirs.logs.display())))?;
        let mut security = SecurityOptions::for_root(&dirs.root);
        security.apparmor_enabled = spec::security::detect_apparmor();
        security.selinux_enabled = spec::security::detect_selinux();
        security.thermal_throttle_paths = spec::security::host_thermal_throttle_paths();
        security.allowed_unsafe_sysctls = node.allowed_unsafe_sysctls.clone();
        let mem = |m: &BTreeMap<String, Quantity>| m.get("memory").map(|q| q.value()).unwrap_or(0);
        let resources = node_resources(&node, mem(&node.capacity), mem(&node.allocatable));
        let images = ImageManager::new(
            cri.clone(),
            pulls,
            events.clone(),
            volumes.clone(),
            pull_limiter,
        );
        Ok(CriRuntime {
            dirs,
            node,
            resources,
            security,
            volumes,
            backoff: Mutex::new(Backoff::default()),
            probes: ProbeManager::default(),
            wakeups: Arc::default(),
            images,
            cri,
            events,
            actuated,
            devices,
            dra,
            cgroups,
            pod_cgroups: Mutex::new(HashMap::new()),
        })
    }

    /// A stage of `pod`'s startup timeline ([`crate::timeline`]).
    fn stage(&self, pod: &Pod, stage: &str, c: Option<&str>, detail: impl Into<String>) {
        if let Some(r) = &self.events {
            r.stage(pod, stage, c, detail);
        }
    }

    fn event(&self, pod: &Pod, c: Option<&str>, warning: bool, reason: &str, msg: String) {
        if let Some(r) = &self.events {
            r.record(pod, c, warning, reason, msg);
        }
    }

    fn host_ip(&self) -> String {
        self.node.host_ip.clone()
    }

    fn downward(&self, pod_ips: &[String]) -> DownwardContext {
        DownwardContext {
            pod_ips: pod_ips.to_vec(),
            host_ips: if self.node.host_ip.is_empty() {
                vec![]
            } else {
                vec![self.node.host_ip.clone()]
            },
            node_allocatable: self.node.allocatable.clone(),
        }
    }

    /// The directories in use.
    pub fn dirs(&self) -> &Dirs {
        &self.dirs
    }

    /// The probe counters (`/metrics/probes`).
    pub fn probe_metrics(&self) -> &Arc<crate::prober::metrics::ProbeMetrics> {
        self.probes.metrics()
    }

    /// Where the runtime's Events go (also the node's).
    pub fn events(&self) -> Option<&Recorder> {
        self.events.as_ref()
    }

    /// The CRI connection.
    pub fn client(&self) -> &CriClient {
        &self.cri
    }

    async fn sandboxes(&self, uid: &str) -> Result<Vec<v1::PodSandbox>, RuntimeError> {
        self.cri
            .list_pod_sandboxes(Some(v1::PodSandboxFilter {
                label_selector: uid_filter(uid),
                ..Default::default()
            }))
            .await
            .map_err(err)
    }

    async fn containers(&self, uid: &str) -> Result<Vec<v1::Container>, RuntimeError> {
        self.cri
            .list_containers(Some(v1::ContainerFilter {
                label_selector: uid_filter(uid),
                ..Default::default()
            }))
            .await
            .map_err(err)
    }

    async fn sandbox_ips(&self, id: &str, host_network: bool) -> Vec<String> {
        if host_network {
            let ip = self.host_ip();
            return if ip.is_empty() { vec![] } else { vec![ip] };
        }
        match self.cri.pod_sandbox_status(id).await {
            Ok(s) => {
                let mut ips: Vec<String> = rkube_cri::pod_ip(&s)
                    .map(str::to_string)
                    .into_iter()
                    .collect();
                if let Some(n) = &s.network {
                    ips.extend(n.additional_ips.iter().map(|p| p.ip.clone()));
                }
                ips
            }
            Err(_) => vec![],
        }
    }

    /// Creates and starts attempt `attempt` of `c`; its id.
    async fn start(
        &self,
        pod: &Pod,
        c: &Container,
        attempt: u32,
        sb: &Sandbox,
    ) -> Result<String, StartError> {
        let key = spec::backoff_key(pod, c);
        self.images.ensure_image(pod, &key, c, &sb.config).await?;
        let name = Some(c.name.as_str());
        let failed = |e: StartError| {
            self.event(pod, name, true, "Failed", format!("Error: {e}"));
            e
        };
        let config = self
            .container_config(pod, c, attempt, sb)
            .await
            .map_err(|m| failed(StartError::CreateConfig(m)))?;
        let log_file = Path::new(&sb.config.log_directory).join(&config.log_path);
        // When creating a container, its resources are actuated: recorded
        // first, and no container without the record (upstream's order).
        self.actuated
            .set_container(
                &pod.uid().unwrap_or_default(),
                &c.name,
                spec::resize::record(pod, c),
            )
            .map_err(|e| failed(StartError::CreateConfig(e.to_string())))?;
        let id = self
            .cri
            .create_container(&sb.id, config, sb.config.clone())
            .await
            .map_err(|e| failed(StartError::Create(e.to_string())))?;
        self.event(pod, name, false, "Created", "Container created".into());
        self.cri
            .start_container(&id)
            .await
            .map_err(|e| failed(StartError::Run(e.to_string())))?;
        self.event(pod, name, false, "Started", "Container started".into());
        tracing::info!(pod = %pod.name_any(), container = %c.name, attempt, id = %id, "container started");
        // The link log agents read, as upstream's.
        crate::logs::legacy::create(
            &self.dirs.legacy_links,
            &crate::logs::legacy::link_name(&pod.name_any(), &pod_namespace(pod), &c.name, &id),
            &log_file,
        );
        if let Some(h) = Hook::PostStart.of(c) {
            let target = HookTarget {
                cri: &self.cri,
                container_id: &id,
                pod_ip: sb.ips.first().map(String::as_str).unwrap_or(""),
            };
            if let Err(m) = hooks::run(&target, pod, c, h, hooks::POST_START_LIMIT).await {
                // As upstream: the container is killed (preStop included)
                // and restarted per the restart policy.
                tracing::warn!(pod = %pod.name_any(), container = %c.name, message = %m, "postStart hook failed; killing the container");
                self.event(
                    pod,
                    name,
                    true,
                    "FailedPostStartHook",
                    "PostStartHook failed".into(),
                );
                let grace = pod_grace(pod);
                let _ = self.stop_one(pod, c, &id, &sb.ips, grace, None).await;
                return Err(StartError::PostStartHook(m));
            }
        }
        Ok(id)
    }

    /// The container config, with what it reads fetched: the env's
    /// ConfigMaps, Secrets and Services (through the volume manager) and
    /// the image's user.
    async fn container_config(
        &self,
        pod: &Pod,
        c: &Container,
        attempt: u32,
        sb: &Sandbox,
    ) -> Result<v1::ContainerConfig, String> {
        // Without a DRA manager, a pod admitted by another kubelet (a
        // handover) is not admitted again: its claims are refused here.
        if self.dra.is_none() {
            super::features::admit_without_claims(pod).map_err(|r| r.message)?;
        }
        let env = match self.volumes.as_ref() {
            Some(vm) => vm.env_inputs(pod).await?,
            None => EnvInputs::default(),
        };
        let claims = match self.volumes.as_ref() {
            Some(vm) => vm.claims(pod).await?.claims,
            None => Default::default(),
        };
        let image = c.image.clone().unwrap_or_default();
        let status = self
            .cri
            .image_status(&image)
            .await
            .map_err(|e| format!("image status of {image}: {e}"))?
            .ok_or_else(|| format!("image {image} is not present"))?;
        let image_user = ImageUser::from_status(status.uid.map(|u| u.value), &status.username);
        let downward = self.downward(&sb.ips);
        let resources = self.resources.clone();
        let devices = match &self.devices {
            Some(m) => m.run_options(pod, c).await?,
            None => None,
        };
        // The claims' CDI devices (upstream's order: before the device
        // plugins').
        let claim_cdi = match &self.dra {
            Some(d) if crate::dra::claims::uses_claims(pod) => d.cdi_devices(pod, c)?,
            _ => vec![],
        };
        // A runtime without CDI would start the container without them.
        let cdi: Vec<String> = claim_cdi
            .iter()
            .chain(devices.iter().flat_map(|d| &d.cdi_devices))
            .cloned()
            .collect();
        if !cdi.is_empty() {
            let v = self.cri.version().await.map_err(|e| e.to_string())?;
            spec::cdi_supported(&v.runtime_name, &v.runtime_version, &cdi)?;
        }
        let inputs = ContainerInputs {
            env: EnvSources {
                config_maps: &env.config_maps,
                secrets: &env.secrets,
                services: &env.services,
                master_service: env.master_service.as_ref(),
                downward: &downward,
            },
            image: image_user,
            security: &self.security,
            resources: &resources,
            cluster_domain: &self.node.dns.cluster_domain,
            devices: devices.as_ref(),
            claim_cdi: &claim_cdi,
            claims: &claims,
        };
        spec::container_config(pod, c, attempt, &self.dirs, &inputs)
    }

    /// Sets up the pod's claim volumes and writes its ConfigMap, Secret,
    /// downwardAPI and projected volumes (again at every sync: updates
    /// reach running containers); refuses volume types rkube cannot mount.
    async fn prepare_volumes(&self, pod: &Pod) -> Result<(), String> {
        let volumes = pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_deref())
            .unwrap_or_default();
        if let Some(v) = volumes.iter().find(|v| !spec::supported_volume(v)) {
            return Err(crate::volumes::manager::setup_failed(
                &v.name,
                &format!(
                    "volumes of type {} are not supported by rkube",
                    spec::volume_type(v)
                ),
            ));
        }
        let claims = volumes
            .iter()
            .any(|v| v.persistent_volume_claim.is_some() || v.ephemeral.is_some());
        let api_data = volumes
            .iter()
            .any(|v| crate::volumes::payload::plugin_dir(v).is_some());
        if !claims && !api_data {
            return Ok(());
        }
        let Some(vm) = self.volumes.as_ref() else {
            return Err("ConfigMap, Secret, downwardAPI, projected and PersistentVolumeClaim volumes need the API server (static pods cannot use them)".into());
        };
        if claims {
            let ready = vm.claims(pod).await?;
            for (reason, message) in ready.warnings {
                self.event(pod, None, true, reason, message);
            }
        }
        match api_data {
            true => vm.prepare(pod, &self.downward(&[])).await,
            false => Ok(()),
        }
    }

    /// Stops one running container within `grace`, its `preStop` hook
    /// first (which uses up part of the grace).
    async fn stop_one(
        &self,
        pod: &Pod,
        c: &Container,
        id: &str,
        pod_ips: &[String],
        grace: Duration,
        why: Option<&str>,
    ) -> Result<(), RuntimeError> {
        let name = Some(c.name.as_str());
        self.event(
            pod,
            name,
            false,
            "Killing",
            why.map_or_else(|| format!("Stopping container {}", c.name), str::to_string),
        );
        let mut stop_grace = grace;
        if let Some(h) = Hook::PreStop.of(c).filter(|_| !grace.is_zero()) {
            let t = std::time::Instant::now();
            let target = HookTarget {
                cri: &self.cri,
                container_id: id,
                pod_ip: pod_ips.first().map(String::as_str).unwrap_or(""),
            };
            if let Err(m) = hooks::run(&target, pod, c, h, grace).await {
                tracing::warn!(pod = %pod.name_any(), container = %c.name, message = %m, "preStop hook failed");
                self.event(
                    pod,
                    name,
                    true,
                    "FailedPreStopHook",
                    "PreStopHook failed".into(),
                );
            }
            stop_grace = hooks::stop_grace_after(grace, t.elapsed());
        }
        match self.cri.stop_container(id, stop_grace).await {
            Err(e) if !e.is_not_found() => Err(err(e)),
            _ => Ok(()),
        }
    }

    async fn uids(&self, want_static: bool) -> Result<Vec<String>, RuntimeError> {
        // Every kubelet's sandboxes (rkube's, and upstream's on a node it
        // took over): the pod uid label; static pods by rkube's label or
        // upstream's `kubernetes.io/config.source: file` annotation.
        let mut uids: Vec<String> = self
            .cri
            .list_pod_sandboxes(None)
            .await
            .map_err(err)?
            .into_iter()
            .filter(|s| {
                let is_static = s.labels.contains_key(LABEL_STATIC)
                    || s.annotations
                        .get(crate::pod::CONFIG_SOURCE_ANNOTATION)
                        .is_some_and(|v| v == "file");
                is_static == want_static
            })
            .filter_map(|s| s.labels.get(LABEL_POD_UID).cloned())
            .collect();
        uids.sort();
        uids.dedup();
        Ok(uids)
    }

    /// Uids of the static pods the runtime holds.
    pub async fn list_static_pods(&self) -> Result<Vec<String>, RuntimeError> {
        self.uids(true).await
    }

    /// The CRI id of the newest instance of container `name` of pod `uid`
    /// and whether it runs (for `/containerLogs?follow`).
    pub async fn container_running(&self, uid: &str, name: &str) -> Option<bool> {
        let cs = self.containers(uid).await.ok()?;
        let l = latest(cs);
        l.get(name)
            .map(|c| c.state == v1::ContainerState::ContainerRunning as i32)
    }

    /// The CRI id of the newest running instance of container `name` of
    /// pod `uid` (for `/exec` and `/attach`; `None` when none runs).
    pub async fn running_container_id(
        &self,
        uid: &str,
        name: &str,
    ) -> Result<Option<String>, RuntimeError> {
        let running = self
            .containers(uid)
            .await?
            .into_iter()
            .filter(|c| c.state == v1::ContainerState::ContainerRunning as i32)
            .collect();
        Ok(latest(running).remove(name).map(|c| c.id))
    }

    /// The id of the newest ready sandbox of pod `uid` (for
    /// `/portForward`; `None` when none is ready).
    pub async fn ready_sandbox_id(&self, uid: &str) -> Result<Option<String>, RuntimeError> {
        Ok(self
            .sandboxes(uid)
            .await?
            .into_iter()
            .filter(|s| s.state == v1::PodSandboxState::SandboxReady as i32)
            .max_by_key(|s| s.created_at)
            .map(|s| s.id))
    }

    /// A pod as observed: the mirror's static pod has the mirror uid
    /// replaced by the static uid.
    fn as_static(pod: &Pod, uid: String) -> Pod {
        let mut p = pod.clone();
        p.metadata.uid = Some(uid);
        p
    }
}

/// A CRI runtime handler as the node reports it (upstream's
/// `RuntimeHandlers` setter: the name, and both features, set or not).
fn node_runtime_handler(h: &v1::RuntimeHandler) -> k8s_openapi::api::core::v1::NodeRuntimeHandler {
    let f = h.features.unwrap_or_default();
    k8s_openapi::api::core::v1::NodeRuntimeHandler {
        name: Some(h.name.clone()),
        features: Some(k8s_openapi::api::core::v1::NodeRuntimeHandlerFeatures {
            recursive_read_only_mounts: Some(f.recursive_read_only_mounts),
            user_namespaces: Some(f.user_namespaces),
        }),
    }
}

impl Runtime for CriRuntime {
    fn version(&self) -> BoxFuture<'_, Result<RuntimeVersion, RuntimeError>> {
        Box::pin(version(&self.cri))
    }

    fn update_pod_cidr<'a>(&'a self, cidr: &'a str) -> BoxFuture<'a, Result<(), RuntimeError>> {
        Box::pin(async move { self.cri.update_pod_cidr(cidr).await.map_err(err) })
    }

    fn runtime_status(&self) -> BoxFuture<'_, super::RuntimeStatus> {
        Box::pin(async {
            let Ok(resp) = self.cri.status_response().await else {
                return super::RuntimeStatus::default();
            };
            let network_error = resp.status.as_ref().and_then(|status| {
                let c = rkube_cri::condition(status, "NetworkReady").filter(|c| !c.status)?;
                Some(format!(
                    "container runtime network not ready: NetworkReady=false reason:{} message:{}",
                    c.reason, c.message
                ))
            });
            let handlers = resp
                .runtime_handlers
                .iter()
                .map(node_runtime_handler)
                .collect();
            super::RuntimeStatus {
                network_error,
                handlers,
            }
        })
    }

    fn sync_pod<'a>(&'a self, pod: &'a Pod) -> BoxFuture<'a, Result<PodObservation, RuntimeError>> {
        Box::pin(async move {
            if let Some(static_uid) = mirror_of(pod) {
                let p = Self::as_static(pod, static_uid);
                let sb = self.current_sandbox(&p, true).await?;
                let mut obs = self.observe(&p, &HashMap::new(), sb.as_ref(), None).await?;
                obs.resync_after = Some(RELIST.max(Duration::from_secs(5)));
                return Ok(obs);
            }
            self.sync(pod).await
        })
    }

    fn kill_pod<'a>(
        &'a self,
        pod: &'a Pod,
        grace: Duration,
    ) -> BoxFuture<'a, Result<PodObservation, RuntimeError>> {
        Box::pin(async move {
            if let Some(static_uid) = mirror_of(pod) {
                let p = Self::as_static(pod, static_uid);
                let sb = self.current_sandbox(&p, true).await?;
                return self.observe(&p, &HashMap::new(), sb.as_ref(), None).await;
            }
            // A terminated pod's requests no longer count for its QoS class.
            self.untrack_pod_cgroup(&pod.uid().unwrap_or_default());
            self.kill(pod, grace).await
        })
    }

    fn remove_pod<'a>(&'a self, uid: &'a str) -> BoxFuture<'a, Result<(), RuntimeError>> {
        Box::pin(async move {
            // A mirror pod's uid labels nothing: removing it is a no-op.
            self.actuated.remove_pod(uid);
            // (its cgroup too, before its directory)
            self.remove(uid).await
        })
    }

    fn reclaim_pod<'a>(&'a self, uid: &'a str) -> BoxFuture<'a, Result<(), RuntimeError>> {
        Box::pin(self.reclaim(uid))
    }

    fn wakeups(&self) -> Option<Arc<crate::runtime::wake::Wakeups>> {
        Some(self.wakeups.clone())
    }

    fn relist(&self) -> BoxFuture<'_, Result<Option<super::Relisted>, RuntimeError>> {
        Box::pin(async move {
            // Two calls for the whole node, whatever its pods.
            let sandboxes = self.cri.list_pod_sandboxes(None).await.map_err(err)?;
            let containers = self.cri.list_containers(None).await.map_err(err)?;
            let mut out = super::Relisted::new();
            let sandboxes = sandboxes.into_iter().map(|s| (s.labels, s.id, s.state));
            let containers = containers.into_iter().map(|c| (c.labels, c.id, c.state));
            for (mut labels, id, state) in sandboxes.chain(containers) {
                if let Some(uid) = labels.remove(LABEL_POD_UID) {
                    out.entry(uid).or_default().push((id, state));
                }
            }
            for v in out.values_mut() {
                v.sort_unstable();
            }
            Ok(Some(out))
        })
    }

    fn forget_others(&self, held: &[String]) {
        self.actuated
            .remove_orphans(&|uid| held.iter().any(|h| h == uid));
    }

    fn list_pods(&self) -> BoxFuture<'_, Result<Vec<String>, RuntimeError>> {
        Box::pin(self.uids(false))
    }

    fn leftovers(&self) -> BoxFuture<'_, Vec<String>> {
        Box::pin(async move {
            // What is on disk first, then what the runtime holds: a pod
            // started meanwhile has its sandbox listed, not taken for an
            // orphan.
            let mut found: Vec<String> = std::fs::read_dir(self.dirs.root.join("pods"))
                .into_iter()
                .flatten()
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .filter_map(|e| e.file_name().to_str().map(str::to_string))
                .collect();
            let (Ok(mut held), Ok(statics)) = (self.uids(false).await, self.uids(true).await)
            else {
                return Vec::new();
            };
            held.extend(statics);
            found.retain(|uid| !held.contains(uid));
            found.sort();
            found.dedup();
            found
        })
    }

    fn admit(&self, pod: &Pod) -> Result<(), super::Rejection> {
        let r = super::admit_os(pod)
            .and_then(|()| super::features::admit(pod))
            .and_then(|()| match self.dra {
                Some(_) => Ok(()),
                None => super::features::admit_without_claims(pod),
            })
            .and_then(|()| {
                spec::security::admit_sysctls(pod, &self.security.allowed_unsafe_sysctls).map_err(
                    |message| super::Rejection {
                        reason: spec::security::SYSCTL_FORBIDDEN_REASON.into(),
                        message,
                    },
                )
            });
        if let Err(rej) = &r {
            self.event(pod, None, true, &rej.reason, rej.message.clone());
        }
        r
    }
}

/// Shared handle type used by the kubelet (the API server and the static
/// pod source need the concrete runtime).
pub type SharedCri = Arc<CriRuntime>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_handlers_as_the_node_reports_them() {
        let h = node_runtime_handler(&v1::RuntimeHandler {
            name: "runc".into(),
            features: Some(v1::RuntimeHandlerFeatures {
                recursive_read_only_mounts: true,
                user_namespaces: false,
            }),
        });
        let json = serde_json::to_value(&h).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"name": "runc", "features": {"recursiveReadOnlyMounts": true, "userNamespaces": false}})
        );
        // No features reported: both false, as upstream's zero values.
        let d = node_runtime_handler(&v1::RuntimeHandler::default());
        assert_eq!(
            serde_json::to_value(&d).unwrap()["features"]["userNamespaces"],
            false
        );
    }

    fn ctr(name: &str, attempt: u32, created: i64) -> v1::Container {
        v1::Container {
            id: format!("{name}-{attempt}"),
            metadata: Some(v1::ContainerMetadata {
                name: name.into(),
                attempt,
            }),
            created_at: created,
            ..Default::default()
        }
    }

    #[test]
    fn the_memory_qos_gate_and_swap_behaviour_reach_the_container_resources() {
        let off = NodeFacts {
            memory_qos: false,
            limited_swap: true,
            ..NodeFacts::default()
        };
        let r = node_resources(&off, 1 << 30, 1 << 30);
        assert!(!r.memory_qos && r.limited_swap);
        let r = node_resources(&NodeFacts::default(), 1 << 30, 1 << 30);
        assert!(r.memory_qos && !r.limited_swap);
    }

    #[test]
    fn latest_picks_the_highest_attempt() {
        let l = latest(vec![
            ctr("a", 0, 5),
            ctr("a", 2, 1),
            ctr("a", 1, 9),
            ctr("b", 0, 1),
        ]);
        assert_eq!(l["a"].id, "a-2");
        assert_eq!(l["b"].id, "b-0");
    }

    #[test]
    fn cri_states_map_to_container_states() {
        let mut s = v1::ContainerStatus {
            state: v1::ContainerState::ContainerExited as i32,
            exit_code: 2,
            started_at: 1_000_000_000,
            finished_at: 2_000_000_000,
            ..Default::default()
        };
        match state_of(&s) {
            ContainerState::Terminated {
                exit_code, reason, ..
            } => {
                assert_eq!(exit_code, 2);
                assert_eq!(reason, "Error");
            }
            o => panic!("{o:?}"),
        }
        s.exit_code = 0;
        assert!(
            matches!(state_of(&s), ContainerState::Terminated { ref reason, .. } if reason == "Completed")
        );
        s.reason = "OOMKilled".into();
        assert!(
            matches!(state_of(&s), ContainerState::Terminated { ref reason, .. } if reason == "OOMKilled")
        );
        s.state = v1::ContainerState::ContainerRunning as i32;
        assert!(
            matches!(state_of(&s), ContainerState::Running { started_at } if started_at.as_second() == 1)
        );
        s.state = v1::ContainerState::ContainerCreated as i32;
        assert!(
            matches!(state_of(&s), ContainerState::Waiting { ref reason, .. } if reason == "ContainerCreating")
        );
    }
}
