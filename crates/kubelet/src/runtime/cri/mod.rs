//! [`CriRuntime`]: the [`Runtime`] over a CRI runtime (containerd) with
//! [`rkube_cri::CriClient`], following the mapping in the [module
//! docs](super).
//!
//! * One sandbox per pod, labelled with the pod's uid/name/namespace
//!   ([`spec::sandbox_labels`]); `sync_pod` finds it by the uid label,
//!   so a restarted kubelet adopts its sandboxes and containers (restart
//!   counts are the containers' CRI `attempt`, so they survive too). A
//!   sandbox that is no longer ready is stopped and a new one (attempt + 1)
//!   is made, unless a `restartPolicy: Never` pod has nothing left to run.
//! * Ephemeral containers (`kubectl debug`) start once, never restart.
//! * Init containers run one at a time in spec order; the containers start
//!   once every init container exited 0. A sidecar (an init container with
//!   `restartPolicy: Always`) only has to have started (past its startup
//!   probe) for the next one to start; it keeps running (restarted with
//!   back-off whatever the pod's policy), has probes like a container,
//!   counts toward readiness but not toward the phase, and is stopped once
//!   every container has exited for good, and on termination after the
//!   containers, last first.
//! * Lifecycle hooks ([`super::hooks`]): `postStart` right after
//!   `StartContainer` (a failure kills the container:
//!   `PostStartHookError`), `preStop` before every stop, within the grace.
//! * Termination messages ([`super::termination`]), the kubelet-managed
//!   `/etc/hosts` ([`super::etc_hosts`]), `lastState` from the previous
//!   instance, and Events ([`crate::events`]) with upstream's reasons.
//! * Exited containers restart per `restartPolicy` with upstream's
//!   crash-loop back-off ([`super::backoff`]: at once, then 10 s doubling
//!   to 300 s), reported as `Waiting`/`CrashLoopBackOff` meanwhile.
//! * `imagePullPolicy`: `Never` and `IfNotPresent` use an image the runtime
//!   has (`ImageStatus`) and fail with `ErrImageNeverPull` / pull; `Always`
//!   pulls, and a failed pull is `ErrImagePull` even when the image is
//!   present (as upstream: `Always` is how a pod proves it may read a
//!   private image). Pulls use the pod's `imagePullSecrets`
//!   ([`super::credentials`]: each matching login in turn, else
//!   anonymously; unreadable Secrets give a `FailedToRetrieveImagePullSecret`
//!   event). Pull failures back off like crash loops (`ImagePullBackOff`).
//! * Container logs go to `Dirs::logs` in `/var/log/pods` layout
//!   (`<ns>_<name>_<uid>/<container>/<attempt>.log`).
//! * Probes run as tasks of a [`ProbeManager`]; `ready` follows readiness,
//!   a liveness/startup failure kills the container on the next sync.
//!   `resync_after` is the shortest probe period, at most 2 s (a PLEG-like
//!   relist: exits are noticed within 2 s).
//! * Mirror pods (annotation `kubernetes.io/config.mirror`) are never run:
//!   `sync_pod` only observes the static pod they mirror (whose uid is the
//!   annotation's value), so the pod worker reports its status on the
//!   mirror; `kill_pod`/`remove_pod` of a mirror leave the static pod alone.
//!   [`CriRuntime::list_pods`] leaves out static pods (the static pod source
//!   cleans up its own, see [`CriRuntime::list_static_pods`]).

pub mod hooks;
pub mod plan;
pub mod spec;
mod sync;
pub mod termination;

use std::collections::{BTreeMap, HashMap};
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
use self::spec::{ContainerInputs, PullPolicy, LABEL_MANAGED, LABEL_POD_UID, LABEL_STATIC};
use super::backoff::Backoff;
use super::{
    BoxFuture, ContainerObservation, ContainerState, PodObservation, Runtime, RuntimeError,
    RuntimeVersion,
};
use crate::events::Recorder;
use crate::images::credentials::{Credential, Keyring};
use crate::images::pull_records::{PullRecords, SecretId, Verdict, VerifyPolicy};
use crate::pod::downward::DownwardContext;
use crate::pod::env::EnvSources;
use crate::pod::{
    ephemeral_containers, is_sidecar, mirror_of, termination_grace as pod_grace, Dirs,
};
use crate::prober::{ProbeManager, ProbeSpec, Target};
use crate::volumes::manager::{EnvInputs, VolumeManager};
use crate::volumes::{empty_dir, subpath};

/// The longest `sync_pod` waits before looking again (exit detection).
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
    events: Option<Recorder>,
    pulls: PullRecords,
}

/// What containers are made against from the node: its IP (the pod IP of
/// host-network pods, `status.hostIP` in the downward API), allocatable
/// (unset limits in the downward API) and memory (Burstable OOM scores).
#[derive(Debug, Clone, Default)]
pub struct NodeFacts {
    /// The node's IP (empty when unknown).
    pub host_ip: String,
    /// The node's capacity.
    pub capacity: BTreeMap<String, Quantity>,
    /// The node's allocatable.
    pub allocatable: BTreeMap<String, Quantity>,
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
        }
    }
}

/// The node's side of container resources, from this host.
fn node_resources(capacity_memory: i64, allocatable_memory: i64) -> ResourceOptions {
    use self::spec::resources;
    let mut r = ResourceOptions::new(capacity_memory.max(1));
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
    /// Connects to the CRI endpoint (`unix:///...`).
    pub async fn connect_client(endpoint: &str) -> Result<CriClient, RuntimeError> {
        CriClient::connect(endpoint).await.map_err(err)
    }

    /// A runtime over a connected client, made complete from `parts`.
    pub fn new(cri: CriClient, parts: CriParts) -> Result<CriRuntime, RuntimeError> {
        let CriParts {
            dirs,
            node,
            pulls,
            events,
            volumes,
        } = parts;
        std::fs::create_dir_all(&dirs.logs)
            .map_err(|e| err(format!("creating {}: {e}", dirs.logs.display())))?;
        let mut security = SecurityOptions::for_root(&dirs.root);
        security.apparmor_enabled = spec::security::detect_apparmor();
        security.selinux_enabled = spec::security::detect_selinux();
        security.thermal_throttle_paths = spec::security::host_thermal_throttle_paths();
        let mem = |m: &BTreeMap<String, Quantity>| m.get("memory").map(|q| q.value()).unwrap_or(0);
        let resources = node_resources(mem(&node.capacity), mem(&node.allocatable));
        Ok(CriRuntime {
            cri,
            dirs,
            node,
            resources,
            security,
            volumes,
            backoff: Mutex::new(Backoff::default()),
            probes: ProbeManager::default(),
            events,
            pulls,
        })
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

    /// The CRI client.
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

    /// `Ok(image ref)` or `Err((reason, message))` for the container.
    async fn ensure_image(
        &self,
        pod: &Pod,
        key: &str,
        c: &Container,
        sandbox: &v1::PodSandboxConfig,
    ) -> Result<String, (String, String)> {
        let image = c.image.clone().unwrap_or_default();
        let present = self.cri.image_status(&image).await.ok().flatten();
        let policy = spec::pull_policy(c);
        let name = Some(c.name.as_str());
        // The pod's logins for the image, looked up at most once.
        let mut creds: Option<Vec<Credential>> = None;
        if let (PullPolicy::Never | PullPolicy::IfNotPresent, Some(img)) = (policy, &present) {
            // An image the kubelet pulled with a Secret is the pod's only
            // with that Secret (or the same login); else it pulls.
            let mut verdict = self.pulls.must_pull(&image, &img.id, None);
            if verdict == Verdict::AskSecrets {
                let mine = self
                    .pull_credentials(pod, &image)
                    .await
                    .map_err(|e| ("ErrImagePull".to_string(), e))?;
                let ids: Vec<SecretId> = mine.iter().map(|c| c.secret.clone()).collect();
                verdict = self.pulls.must_pull(&image, &img.id, Some(&ids));
                creds = Some(mine);
            }
            if verdict == Verdict::Use {
                self.event(
                    pod,
                    name,
                    false,
                    "Pulled",
                    format!(
                        "Container image \"{image}\" already present on machine and can be accessed by the pod"
                    ),
                );
                return Ok(img.id.clone());
            }
        }
        if policy == PullPolicy::Never {
            let msg =
                format!("Container image \"{image}\" is not present with pull policy of Never");
            self.event(pod, name, true, "ErrImageNeverPull", msg.clone());
            return Err(("ErrImageNeverPull".into(), msg));
        }
        let pull_key = format!("{key}/pull");
        let now = Timestamp::now().as_nanosecond();
        if lock(&self.backoff).remaining(&pull_key, now, now).is_some() {
            let msg = format!("Back-off pulling image \"{image}\"");
            self.event(pod, name, false, "BackOff", msg.clone());
            return Err(("ImagePullBackOff".into(), msg));
        }
        self.event(
            pod,
            name,
            false,
            "Pulling",
            format!("Pulling image \"{image}\""),
        );
        let t = std::time::Instant::now();
        let creds = match creds {
            Some(c) => Ok(c),
            None => self.pull_credentials(pod, &image).await,
        };
        self.pulls.pull_started(&image);
        let pulled = match creds {
            Ok(creds) => self.pull(&image, &creds, sandbox).await,
            Err(e) => Err(e),
        };
        match &pulled {
            Ok((r, secret)) => self.pulls.pull_ended(&image, Some(r), secret.clone()),
            Err(_) => self.pulls.pull_ended(&image, None, None),
        }
        match pulled {
            Ok((r, _)) => {
                self.event(
                    pod,
                    name,
                    false,
                    "Pulled",
                    format!("Successfully pulled image \"{image}\" in {:?}", t.elapsed()),
                );
                Ok(r)
            }
            Err(e) => {
                lock(&self.backoff).next(&pull_key, now);
                self.event(
                    pod,
                    name,
                    true,
                    "Failed",
                    format!("Failed to pull image \"{image}\": {e}"),
                );
                self.event(pod, name, true, "Failed", "Error: ErrImagePull".into());
                Err(("ErrImagePull".into(), e))
            }
        }
    }

    /// The logins of the pod's pull Secrets for `image`, in the order to
    /// try them; Secrets that cannot be read are reported in an event.
    async fn pull_credentials(&self, pod: &Pod, image: &str) -> Result<Vec<Credential>, String> {
        let Some(vm) = self.volumes.as_ref() else {
            return Ok(Vec::new());
        };
        let (secrets, missing) = vm.pull_secrets(pod).await;
        if !missing.is_empty() {
            self.event(
                pod,
                None,
                true,
                "FailedToRetrieveImagePullSecret",
                format!(
                    "Unable to retrieve some image pull secrets ({}); attempting to pull the image may not succeed.",
                    missing.join(", ")
                ),
            );
        }
        Ok(Keyring::from_secrets(&secrets)?.lookup(image))
    }

    /// `PullImage` anonymously, or with each login in turn until one
    /// works (the image ref and the Secret that worked); the errors of all
    /// attempts otherwise.
    async fn pull(
        &self,
        image: &str,
        creds: &[Credential],
        sandbox: &v1::PodSandboxConfig,
    ) -> Result<(String, Option<SecretId>), String> {
        if creds.is_empty() {
            return self
                .cri
                .pull_image(image, None, Some(sandbox.clone()))
                .await
                .map(|r| (r, None))
                .map_err(|e| e.to_string());
        }
        let mut errors = Vec::new();
        for c in creds {
            let auth = v1::AuthConfig {
                username: c.username.clone(),
                password: c.password.clone(),
                ..Default::default()
            };
            match self
                .cri
                .pull_image(image, Some(auth), Some(sandbox.clone()))
                .await
            {
                Ok(r) => return Ok((r, Some(c.secret.clone()))),
                Err(e) => errors.push(e.to_string()),
            }
        }
        Err(if errors.len() == 1 {
            errors.remove(0)
        } else {
            format!("[{}]", errors.join(", "))
        })
    }

    /// Creates and starts attempt `attempt` of `c`; `Err((reason, msg))`.
    async fn start(
        &self,
        pod: &Pod,
        c: &Container,
        attempt: u32,
        sb: &Sandbox,
    ) -> Result<String, (String, String)> {
        let key = spec::backoff_key(pod, c);
        self.ensure_image(pod, &key, c, &sb.config).await?;
        let name = Some(c.name.as_str());
        let failed = |reason: &str, m: String| {
            self.event(pod, name, true, "Failed", format!("Error: {m}"));
            (reason.to_string(), m)
        };
        let config = self
            .container_config(pod, c, attempt, sb)
            .await
            .map_err(|m| failed("CreateContainerConfigError", m))?;
        let id = self
            .cri
            .create_container(&sb.id, config, sb.config.clone())
            .await
            .map_err(|e| failed("CreateContainerError", e.to_string()))?;
        self.event(pod, name, false, "Created", "Container created".into());
        self.cri
            .start_container(&id)
            .await
            .map_err(|e| failed("RunContainerError", e.to_string()))?;
        self.event(pod, name, false, "Started", "Container started".into());
        tracing::info!(pod = %pod.name_any(), container = %c.name, attempt, id = %id, "container started");
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
                return Err(("PostStartHookError".to_string(), m));
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
        let env = match self.volumes.as_ref() {
            Some(vm) => vm.env_inputs(pod).await?,
            None => EnvInputs::default(),
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
        };
        spec::container_config(pod, c, attempt, &self.dirs, &inputs)
    }

    /// Writes the pod's ConfigMap, Secret, downwardAPI and projected
    /// volumes (again at every sync: updates reach running containers);
    /// refuses volume types rkube cannot mount.
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
        if volumes
            .iter()
            .all(|v| crate::volumes::payload::plugin_dir(v).is_none())
        {
            return Ok(());
        }
        match self.volumes.as_ref() {
            Some(vm) => vm.prepare(pod, &self.downward(&[])).await,
            None => Err("ConfigMap, Secret, downwardAPI and projected volumes need the API server (static pods cannot use them)".into()),
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

    /// Observes a pod without acting (also for kill_pod and mirror pods).
    async fn observe(
        &self,
        pod: &Pod,
        overrides: &HashMap<String, Override>,
        sb: Option<&Sandbox>,
        wake: Option<Duration>,
    ) -> Result<PodObservation, RuntimeError> {
        let uid = pod.uid().unwrap_or_default();
        let spec = pod.spec.clone().unwrap_or_default();
        let all = self.containers(&uid).await?;
        let previous = previous_instances(&all);
        let now = latest(all);
        let sandbox_id = sb.map(|s| s.id.as_str()).unwrap_or("");
        let pod_ip = sb.and_then(|s| s.ips.first().cloned()).unwrap_or_default();
        let sandbox_ready = sb.is_some_and(|s| s.ready);
        // Upstream's default waiting reason: PodInitializing for every
        // container of a pod with init containers.
        let default_reason = if spec.init_containers.as_ref().is_some_and(|i| !i.is_empty()) {
            "PodInitializing"
        } else {
            "ContainerCreating"
        };
        let mut resync = RELIST;
        let mut init = Vec::new();
        let mut containers = Vec::new();
        let inits = spec.init_containers.iter().flatten().map(|c| (c, true));
        for (c, is_init) in inits.chain(spec.containers.iter().map(|c| (c, false))) {
            let long_running = !is_init || is_sidecar(c);
            let (mut o, started_at) = self
                .observe_container(
                    c,
                    now.get(&c.name),
                    previous.get(&c.name),
                    overrides,
                    default_reason,
                    long_running,
                )
                .await?;
            if long_running {
                match (started_at, now.get(&c.name)) {
                    (Some(started_at), Some(x)) => {
                        let specs = ProbeSpec::of_container(c);
                        if let Some(p) = specs.iter().map(|s| s.period).min() {
                            resync = resync.min(p);
                        }
                        if !specs.is_empty() && sandbox_ready && x.pod_sandbox_id == sandbox_id {
                            self.probes.ensure(
                                &uid,
                                &c.name,
                                specs,
                                Target {
                                    cri: self.cri.clone(),
                                    container_id: x.id.clone(),
                                    pod_ip: pod_ip.clone(),
                                    started_at,
                                    events: self.events.as_ref().map(|r| {
                                        (r.clone(), Arc::new(pod.clone()), c.name.clone())
                                    }),
                                },
                            );
                        }
                        if let Some(ps) = self.probes.state(&uid, &c.name, &x.id) {
                            o.started = ps.started;
                            o.ready = ps.ready && ps.started;
                        } else if c.startup_probe.is_some() || c.readiness_probe.is_some() {
                            // Probes not running yet: not started/ready yet.
                            o.started = c.startup_probe.is_none();
                            o.ready = false;
                        }
                    }
                    _ => self.probes.remove(&uid, &c.name),
                }
            }
            if is_init {
                init.push(o);
            } else {
                containers.push(o);
            }
        }
        let mut ephemeral = Vec::new();
        for c in ephemeral_containers(pod) {
            let (mut o, _) = self
                .observe_container(
                    &c,
                    now.get(&c.name),
                    None,
                    overrides,
                    "ContainerCreating",
                    true,
                )
                .await?;
            o.ready = false;
            ephemeral.push(o);
        }
        if let Some(w) = wake {
            resync = resync.min(w + Duration::from_millis(100));
        }
        Ok(PodObservation {
            ephemeral_containers: ephemeral,
            sandbox_ready,
            pod_ips: if sandbox_ready {
                sb.map(|s| s.ips.clone()).unwrap_or_default()
            } else {
                vec![]
            },
            init_containers: init,
            containers,
            resync_after: Some(resync),
        })
    }

    /// The state of one CRI container instance, its termination message
    /// read when it has exited.
    async fn instance_state(
        &self,
        c: &Container,
        x: &v1::Container,
    ) -> Result<Option<(ContainerState, v1::ContainerStatus)>, RuntimeError> {
        match self.cri.container_status(&x.id).await {
            Ok(st) => {
                let mut state = state_of(&st);
                if let ContainerState::Terminated { message, .. } = &mut state {
                    *message = termination::message(&st, c);
                }
                Ok(Some((state, st)))
            }
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(err(e)),
        }
    }

    /// One container's observation, and its start time if running.
    /// `long_running`: a regular container or a sidecar (an init
    /// container is ready once it exited 0).
    async fn observe_container(
        &self,
        c: &Container,
        latest: Option<&v1::Container>,
        previous: Option<&v1::Container>,
        overrides: &HashMap<String, Override>,
        default_reason: &str,
        long_running: bool,
    ) -> Result<(ContainerObservation, Option<Timestamp>), RuntimeError> {
        let mut o = ContainerObservation {
            name: c.name.clone(),
            image: c.image.clone().unwrap_or_default(),
            image_id: String::new(),
            container_id: String::new(),
            state: waiting(default_reason, ""),
            restart_count: latest.map(|x| attempt(x) as i32).unwrap_or(0),
            ready: false,
            started: false,
            last_state: None,
        };
        let mut started = None;
        if let Some(x) = latest {
            if let Some((state, st)) = self.instance_state(c, x).await? {
                o.image_id = st.image_ref.clone();
                o.container_id = format!("containerd://{}", x.id);
                o.state = state;
            }
        }
        if let Some((state @ ContainerState::Terminated { .. }, _)) = match previous {
            Some(x) => self.instance_state(c, x).await?,
            None => None,
        } {
            o.last_state = Some(state);
        }
        match o.state {
            ContainerState::Running { started_at } => {
                o.started = true;
                o.ready = long_running;
                started = Some(started_at);
            }
            ContainerState::Terminated { exit_code: 0, .. } if !long_running => o.ready = true,
            _ => {}
        }
        if let Some(Override::Waiting(r, m)) = overrides.get(&c.name) {
            // As upstream: a terminated container waiting to restart shows
            // that termination as its last state.
            if matches!(o.state, ContainerState::Terminated { .. }) {
                o.last_state = Some(o.state.clone());
            }
            o.state = waiting(r, m.clone());
            o.ready = false;
            o.started = false;
            started = None;
        }
        Ok((o, started))
    }

    async fn kill(&self, pod: &Pod, grace: Duration) -> Result<PodObservation, RuntimeError> {
        let uid = pod.uid().unwrap_or_default();
        self.probes.forget_pod(&uid);
        let spec = pod.spec.clone().unwrap_or_default();
        let running: HashMap<String, v1::Container> = latest(
            self.containers(&uid)
                .await?
                .into_iter()
                .filter(|c| c.state == v1::ContainerState::ContainerRunning as i32)
                .collect(),
        );
        let ips = match self.sandboxes(&uid).await?.into_iter().next() {
            Some(s) => self.sandbox_ips(&s.id, false).await,
            None => vec![],
        };
        let started = std::time::Instant::now();
        // Regular containers (and a running init container) first, all at
        // once; then the sidecars, last first, with the grace left (as
        // upstream's termination ordering).
        let (sidecars, others): (Vec<&Container>, Vec<&Container>) = spec
            .init_containers
            .iter()
            .flatten()
            .chain(&spec.containers)
            .partition(|c| is_sidecar(c));
        let stops = others.iter().filter_map(|c| {
            let x = running.get(&c.name)?;
            Some(self.stop_one(pod, c, &x.id, &ips, grace, None))
        });
        for r in futures::future::join_all(stops).await {
            r?;
        }
        for c in sidecars.iter().rev() {
            if let Some(x) = running.get(&c.name) {
                let left = hooks::stop_grace_after(grace, started.elapsed()).min(grace);
                self.stop_one(pod, c, &x.id, &ips, left, None).await?;
            }
        }
        // Anything else still running (not in the spec any more).
        let known: Vec<&str> = sidecars
            .iter()
            .chain(&others)
            .map(|c| c.name.as_str())
            .collect();
        for (name, x) in &running {
            if !known.contains(&name.as_str()) {
                match self.cri.stop_container(&x.id, grace).await {
                    Err(e) if !e.is_not_found() => return Err(err(e)),
                    _ => {}
                }
            }
        }
        for s in self.sandboxes(&uid).await? {
            self.cri.stop_pod_sandbox(&s.id).await.map_err(err)?;
        }
        let mut obs = self.observe(pod, &HashMap::new(), None, None).await?;
        obs.resync_after = None;
        Ok(obs)
    }

    async fn remove(&self, uid: &str) -> Result<(), RuntimeError> {
        self.probes.forget_pod(uid);
        lock(&self.backoff).forget_prefix(&format!("{uid}/"));
        for c in self.containers(uid).await? {
            match self.cri.remove_container(&c.id).await {
                Err(e) if !e.is_not_found() => return Err(err(e)),
                _ => {}
            }
        }
        for s in self.sandboxes(uid).await? {
            match self.cri.remove_pod_sandbox(&s.id).await {
                Err(e) if !e.is_not_found() => return Err(err(e)),
                _ => {}
            }
        }
        if let Some(vm) = self.volumes.as_ref() {
            vm.forget(uid);
        }
        // Mounts first: removing the directory through a subPath bind mount
        // of a hostPath would delete host files.
        let pod_dir = self.dirs.pod_dir(uid);
        subpath::cleanup(&pod_dir).map_err(err)?;
        empty_dir::cleanup(&pod_dir).map_err(err)?;
        let _ = std::fs::remove_dir_all(&pod_dir);
        if let Ok(rd) = std::fs::read_dir(&self.dirs.logs) {
            for e in rd.flatten() {
                if e.file_name()
                    .to_string_lossy()
                    .ends_with(&format!("_{uid}"))
                {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        Ok(())
    }

    async fn uids(&self, want_static: bool) -> Result<Vec<String>, RuntimeError> {
        let mut uids: Vec<String> = self
            .cri
            .list_pod_sandboxes(Some(v1::PodSandboxFilter {
                label_selector: [(LABEL_MANAGED.to_string(), "true".to_string())].into(),
                ..Default::default()
            }))
            .await
            .map_err(err)?
            .into_iter()
            .filter(|s| s.labels.contains_key(LABEL_STATIC) == want_static)
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

impl Runtime for CriRuntime {
    fn version(&self) -> BoxFuture<'_, Result<RuntimeVersion, RuntimeError>> {
        Box::pin(version(&self.cri))
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
            self.kill(pod, grace).await
        })
    }

    fn remove_pod<'a>(&'a self, uid: &'a str) -> BoxFuture<'a, Result<(), RuntimeError>> {
        Box::pin(async move {
            // A mirror pod's uid labels nothing: removing it is a no-op.
            self.remove(uid).await
        })
    }

    fn list_pods(&self) -> BoxFuture<'_, Result<Vec<String>, RuntimeError>> {
        Box::pin(self.uids(false))
    }

    fn admit(&self, pod: &Pod) -> Result<(), super::Rejection> {
        let r = super::admit_os(pod).and_then(|()| {
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
