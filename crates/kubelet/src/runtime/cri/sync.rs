//! The executing half of a pod sync (upstream's `SyncPod`): gather what
//! the runtime holds for the pod ([`CriRuntime::gather`]), ask
//! [`plan::compute`] what to do, do it in order, then observe. Every
//! decision is the plan's; this file only calls the runtime, applies the
//! crash-loop back-off to restarts (as upstream's `doBackOff`) and records
//! what failed as the container's waiting reason.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use rkube_cri::v1;

use super::plan::{
    self, Finished, Grace, InstanceSeen, InstanceState, Observed, ProbeKill, ProbeSeen, Resize,
    Role, SandboxAction, SandboxSeen, Step,
};
use super::spec::{self, resize};
use super::{err, latest, lock, CriRuntime, Override, Sandbox, RELIST};
use crate::network::dns;
use crate::pod::{ephemeral_containers, termination_grace};
use crate::runtime::{PodObservation, RuntimeError};

/// How soon a pod that cannot start is looked at again.
const BLOCKED_RESYNC: Duration = Duration::from_secs(2);

/// The most plans one sync makes while init containers make progress (a
/// pod with more init containers goes on at its next sync): a spec with
/// many sidecars costs one round of runtime calls per plan.
const MAX_ROUNDS: usize = 8;

/// The sandbox's attempt as the runtime reports it.
fn sandbox_attempt(s: &v1::PodSandbox) -> u32 {
    s.metadata.as_ref().map(|m| m.attempt).unwrap_or(0)
}

/// A CRI container status as the plan sees it.
fn instance_state(st: &v1::ContainerStatus) -> InstanceState {
    match v1::ContainerState::try_from(st.state) {
        Ok(v1::ContainerState::ContainerCreated) => InstanceState::Created,
        Ok(v1::ContainerState::ContainerRunning) => InstanceState::Running,
        Ok(v1::ContainerState::ContainerExited) => InstanceState::Exited {
            exit_code: st.exit_code,
            finished_at: st.finished_at as i128,
        },
        _ => InstanceState::Unknown,
    }
}

/// What one sync did besides the plan's steps: the waiting reasons to
/// report and the soonest back-off to wake for.
#[derive(Default)]
struct Outcome {
    overrides: HashMap<String, Override>,
    wake: Option<Duration>,
    resize_error: Option<String>,
}

impl Outcome {
    fn wait(&mut self, name: &str, reason: String, message: String) {
        self.overrides
            .insert(name.to_string(), Override::Waiting(reason, message));
    }

    fn soon(&mut self, d: Duration) {
        self.wake = Some(self.wake.map_or(d, |w| w.min(d)));
    }
}

impl CriRuntime {
    /// What the runtime holds for the pod: its sandboxes, and the newest
    /// instance of every container name with its status and the prober's
    /// verdict.
    pub(super) async fn gather(&self, pod: &Pod) -> Result<Observed, RuntimeError> {
        let uid = pod.uid().unwrap_or_default();
        let sandboxes = self
            .sandboxes(&uid)
            .await?
            .iter()
            .map(|s| SandboxSeen {
                id: s.id.clone(),
                ready: s.state == v1::PodSandboxState::SandboxReady as i32,
                attempt: sandbox_attempt(s),
                created_at: s.created_at,
            })
            .collect();
        let spec = pod.spec.clone().unwrap_or_default();
        let specs: HashMap<&str, &Container> = spec
            .init_containers
            .iter()
            .flatten()
            .chain(&spec.containers)
            .map(|c| (c.name.as_str(), c))
            .collect();
        let mut containers = HashMap::new();
        let latest = latest(self.containers(&uid).await?);
        for (name, x) in latest {
            let state = match self.cri.container_status(&x.id).await {
                Ok(st) => instance_state(&st),
                Err(e) if e.is_not_found() => InstanceState::Unknown,
                Err(e) => return Err(err(e)),
            };
            let probe = self.probes.state(&uid, &name, &x.id).map(|s| ProbeSeen {
                started: s.started,
                kill: s.kill.map(|_| ProbeKill {
                    probe: s.kill_probe.clone().unwrap_or_else(|| "liveness".into()),
                    grace_seconds: s.kill_grace,
                }),
            });
            let definition_changed = specs
                .get(name.as_str())
                .is_some_and(|c| spec::definition_changed(c, &x));
            let resize = match (state, specs.get(name.as_str())) {
                (InstanceState::Running, Some(c)) => self.resize_of(pod, c),
                _ => Resize::None,
            };
            let seen = InstanceSeen {
                id: x.id.clone(),
                sandbox_id: x.pod_sandbox_id.clone(),
                attempt: super::attempt(&x),
                state,
                definition_changed,
                probe,
                resize,
            };
            containers.insert(name, seen);
        }
        Ok(Observed {
            sandboxes,
            containers,
        })
    }

    /// What the running instance of `c` needs to have the resources the
    /// pod's spec (its allocation) gives it: the resources it was last
    /// given (`actuated_pods_state`; none recorded counts as zero, as
    /// upstream) against the spec's.
    fn resize_of(&self, pod: &Pod, c: &Container) -> Resize {
        let uid = pod.uid().unwrap_or_default();
        let recorded = self.actuated.container(&uid, &c.name).unwrap_or_default();
        let pod_level = self.actuated.pod_level(&uid);
        let current = resize::Actuated::with_pod(pod_level.as_ref(), &recorded);
        resize::decide(c, resize::Actuated::desired(pod, c), current)
    }

    /// Gives running instance `id` of `c` the resources of the pod's spec
    /// (an in-place resize).
    async fn update_resources(&self, pod: &Pod, c: &Container, id: &str) -> Result<(), String> {
        let linux = spec::resources::container_resources(pod, c, &self.resources);
        self.cri
            .update_container_resources(id, linux)
            .await
            .map_err(|e| format!("resizing container {}: {e}", c.name))?;
        self.actuated
            .set_container(
                &pod.uid().unwrap_or_default(),
                &c.name,
                resize::record(pod, c),
            )
            .map_err(|e| format!("resizing container {}: {e}", c.name))?;
        tracing::info!(pod = %pod.name_any(), container = %id, name = %c.name, "resized in place");
        Ok(())
    }

    /// Why the pod cannot start, if it cannot: a field the node cannot
    /// enforce, volumes it cannot set up or claims not prepared (fail
    /// closed): the containers' waiting reason and message.
    async fn blocked(&self, pod: &Pod, is_static: bool) -> Option<(&'static str, String)> {
        if let Err(m) = self.sandbox_config(pod, 0, is_static) {
            return Some(("CreateContainerConfigError", m));
        }
        // Volumes not set up: the containers keep upstream's default
        // waiting reason (PodInitializing in a pod with init containers).
        let reason = match pod
            .spec
            .as_ref()
            .and_then(|s| s.init_containers.as_ref())
            .is_some_and(|i| !i.is_empty())
        {
            true => "PodInitializing",
            false => "ContainerCreating",
        };
        if let Err(m) = self.prepare_volumes(pod).await {
            // Upstream's FailedMount (the recorder folds repeats into one);
            // waiting for the node's status to report a volume in use is
            // only logged, as upstream does.
            if !m.starts_with(crate::volumes::csi::attach::NOT_REPORTED_IN_USE) {
                self.event(pod, None, true, "FailedMount", m.clone());
            }
            return Some((reason, m));
        }
        if let Some(r) = &self.events {
            r.stage_once(pod, "VolumesReady");
        }
        // The pod's ResourceClaims, prepared by their drivers before the
        // sandbox starts (upstream's PrepareDynamicResources): a pod whose
        // claims cannot be prepared does not start, and is tried again.
        if let Some(d) = self
            .dra
            .as_ref()
            .filter(|_| crate::dra::claims::uses_claims(pod))
        {
            if let Err(m) = d.prepare(pod).await {
                self.event(
                    pod,
                    None,
                    true,
                    "FailedPrepareDynamicResources",
                    format!("Failed to prepare dynamic resources: {m}"),
                );
                return Some((reason, m));
            }
        }
        None
    }

    /// Gathers, plans and executes one sync of `pod`, then observes it.
    /// Upstream syncs a pod again on the runtime's events (an init
    /// container started); rkube plans again at once while starting init
    /// containers makes progress, at most once per init container (and
    /// [`MAX_ROUNDS`] plans in all), and never tries a container twice in
    /// one sync.
    pub(super) async fn sync(&self, pod: &Pod) -> Result<PodObservation, RuntimeError> {
        self.track_pod_cgroup(pod);
        // A pod this kubelet finds running with no record (started before
        // it, by another kubelet): its containers have what the pod was
        // allocated (upstream's InitializeActuatedPod).
        if let Err(e) = self.actuated.init_pod(&pod.uid().unwrap_or_default(), || {
            crate::allocation::info_for_pod(pod)
        }) {
            tracing::error!(pod = %pod.name_any(), error = %e, "Failed to initialize actuated pod resource info checkpoint");
        }
        let is_static = crate::pod::is_static(pod);
        let spec = pod.spec.clone().unwrap_or_default();
        let inits = spec.init_containers.as_ref().map_or(0, Vec::len);
        let rounds = (inits + 1).min(MAX_ROUNDS);
        let mut out = Outcome::default();
        let mut tried: HashSet<String> = HashSet::new();
        let mut round = 0;
        loop {
            round += 1;
            let seen = self.gather(pod).await?;
            // Volumes are set up once a sync: a later round follows a start
            // in a sandbox that was not blocked.
            let blocked = match round == 1 && plan::needs_sandbox(pod, &seen) {
                true => self.blocked(pod, is_static).await,
                false => None,
            };
            let actions =
                plan::compute(pod, &seen, blocked.as_ref().map(|(r, m)| (*r, m.as_str())));
            for (name, reason, message) in actions.waiting {
                out.wait(&name, reason, message);
            }
            let attempt_of = |id: &str| {
                seen.sandboxes
                    .iter()
                    .find(|s| s.id == id)
                    .map_or(0, |s| s.attempt)
            };
            let sb = match actions.sandbox {
                SandboxAction::Blocked => {
                    if let Some((_, message)) = &blocked {
                        tracing::warn!(pod = %pod.name_any(), %message, "pod cannot start");
                    }
                    let wake = Some(BLOCKED_RESYNC);
                    return self.observe(pod, &out.overrides, None, wake).await;
                }
                SandboxAction::Finished(_) if actions.kill_pod => {
                    let mut obs = self.kill(pod, termination_grace(pod)).await?;
                    obs.resync_after = Some(RELIST);
                    return Ok(obs);
                }
                SandboxAction::Finished(id) => {
                    let sb = match id {
                        Some(id) => Some(
                            self.existing_sandbox(pod, &id, attempt_of(&id), false, is_static)
                                .await?,
                        ),
                        None => None,
                    };
                    return self.observe(pod, &out.overrides, sb.as_ref(), None).await;
                }
                // Nothing more will run (the containers are done, or an
                // init container failed under `Never`): everything stops,
                // the sandbox too.
                SandboxAction::Use(_) if actions.kill_pod => {
                    tracing::info!(pod = %pod.name_any(), "nothing more will run; stopping the pod");
                    let mut obs = self.kill(pod, termination_grace(pod)).await?;
                    obs.resync_after = Some(RELIST);
                    return Ok(obs);
                }
                SandboxAction::Use(id) => {
                    self.existing_sandbox(pod, &id, attempt_of(&id), true, is_static)
                        .await?
                }
                SandboxAction::Create { attempt, stop } => {
                    self.create_sandbox(pod, attempt, &stop, is_static).await?
                }
            };
            let progress = self
                .execute(pod, &actions.steps, &sb, &mut tried, &mut out)
                .await?;
            if !progress || round >= rounds {
                let mut obs = self
                    .observe(pod, &out.overrides, Some(&sb), out.wake)
                    .await?;
                obs.resize_error = out.resize_error;
                return Ok(obs);
            }
        }
    }

    /// Executes a plan's steps in order; true when an init container or
    /// sidecar started (the next plan may go further).
    async fn execute(
        &self,
        pod: &Pod,
        steps: &[Step],
        sb: &Sandbox,
        tried: &mut HashSet<String>,
        out: &mut Outcome,
    ) -> Result<bool, RuntimeError> {
        let ephemeral = ephemeral_containers(pod);
        let spec = pod.spec.clone().unwrap_or_default();
        let container = |name: &str| {
            spec.init_containers
                .iter()
                .flatten()
                .chain(&spec.containers)
                .chain(&ephemeral)
                .find(|c| c.name == name)
        };
        let mut progress = false;
        // An in-place resize, as upstream's doPodResizeAction: the pod's
        // cgroup widened to hold old and new limits before any container
        // changes, set to the new ones only once every container did.
        let resizes = steps
            .iter()
            .any(|s| matches!(s, Step::UpdateResources { .. }));
        if resizes {
            self.resize_pod_cgroup(pod, true);
        }
        let mut resize_failed = false;
        for step in steps {
            match step {
                Step::Start {
                    name,
                    role,
                    attempt,
                    restart,
                } => {
                    let Some(c) = container(name) else { continue };
                    if !tried.insert(name.clone()) {
                        continue;
                    }
                    let started = self.start_step(pod, c, *attempt, *restart, sb, out).await;
                    progress |= started && matches!(role, Role::Init | Role::Sidecar);
                }
                Step::StartCreated { name, id } => {
                    if !tried.insert(name.clone()) {
                        continue;
                    }
                    match self.cri.start_container(id).await {
                        Ok(()) => {
                            let init = spec.init_containers.iter().flatten();
                            progress |= init.into_iter().any(|c| &c.name == name);
                        }
                        Err(e) => out.wait(name, "RunContainerError".into(), e.to_string()),
                    }
                }
                Step::UpdateResources { name, id } => {
                    let Some(c) = container(name) else { continue };
                    if let Err(e) = self.update_resources(pod, c, id).await {
                        tracing::warn!(pod = %pod.name_any(), error = %e, "in-place resize failed");
                        out.resize_error = Some(e);
                        resize_failed = true;
                    }
                }
                Step::Kill {
                    name,
                    id,
                    message,
                    grace,
                } => {
                    let uid = pod.uid().unwrap_or_default();
                    let grace = match grace {
                        Grace::Pod => termination_grace(pod),
                        Grace::Seconds(s) => Duration::from_secs((*s).max(0) as u64),
                    };
                    if let Some(c) = container(name) {
                        if let Some(m) = message {
                            tracing::info!(pod = %pod.name_any(), container = %name, why = %m, "killing container");
                        }
                        self.stop_one(pod, c, id, &sb.ips, grace, message.as_deref())
                            .await?;
                    }
                    self.probes.remove(&uid, name);
                }
            }
        }
        if resizes && !resize_failed {
            self.resize_pod_cgroup(pod, false);
        }
        Ok(progress)
    }

    /// Starts attempt `attempt` of `c`; a restart waits out its back-off
    /// (reported as `CrashLoopBackOff`). True when the container runs.
    async fn start_step(
        &self,
        pod: &Pod,
        c: &Container,
        attempt: u32,
        restart: Option<Finished>,
        sb: &Sandbox,
        out: &mut Outcome,
    ) -> bool {
        if let Some(from) = restart {
            let uid = pod.uid().unwrap_or_default();
            let key = spec::backoff_key(pod, c);
            let now = Timestamp::now().as_nanosecond();
            let finished = match from {
                Finished::At(t) => t,
                Finished::Now => now,
            };
            // The guard must not outlive this statement: the window is read
            // under the same lock below.
            let left = lock(&self.backoff).remaining(&key, finished, now);
            if let Some(left) = left {
                let window = lock(&self.backoff).window(&key).unwrap_or_default();
                let (name, ns) = (pod.name_any(), crate::pod::pod_namespace(pod));
                self.event(
                    pod,
                    Some(&c.name),
                    true,
                    "BackOff",
                    format!(
                        "Back-off restarting failed container {} in pod {name}_{ns}({uid})",
                        c.name
                    ),
                );
                let msg = format!(
                    "back-off {}s restarting failed container={} pod={name}_{ns}({uid})",
                    window.as_secs(),
                    c.name
                );
                out.wait(&c.name, "CrashLoopBackOff".into(), msg);
                out.soon(left);
                return false;
            }
            lock(&self.backoff).next(&key, finished);
        }
        match self.start(pod, c, attempt, sb).await {
            Ok(_) => true,
            Err(e) => {
                out.wait(&c.name, e.reason().to_string(), e.to_string());
                false
            }
        }
    }

    /// The sandbox config of `pod` on this node (without its resolver).
    fn sandbox_config(
        &self,
        pod: &Pod,
        attempt: u32,
        is_static: bool,
    ) -> Result<v1::PodSandboxConfig, String> {
        let domain = &self.node.dns.cluster_domain;
        let mut config =
            spec::sandbox_config(pod, &self.dirs, attempt, is_static, &self.security, domain)?;
        // Under `cgroupRoot`.
        if let Some(linux) = config.linux.as_mut() {
            linux.cgroup_parent =
                spec::resources::pod_cgroup_parent(pod, &self.resources.cgroup_root);
        }
        Ok(config)
    }

    /// The pod's resolver configuration; its warnings become Events.
    fn dns_config(&self, pod: &Pod) -> Result<v1::DnsConfig, String> {
        let settings = &self.node.dns;
        let host = dns::host_config(settings)?;
        let (config, warnings) = dns::pod_dns(settings, host, pod);
        for (reason, message) in warnings {
            self.event(pod, None, true, reason, message);
        }
        Ok(v1::DnsConfig {
            servers: config.servers,
            searches: config.searches,
            options: config.options,
        })
    }

    /// The sandbox `id` as made for `pod` (its config, and its IPs when
    /// ready).
    pub(super) async fn existing_sandbox(
        &self,
        pod: &Pod,
        id: &str,
        attempt: u32,
        ready: bool,
        is_static: bool,
    ) -> Result<Sandbox, RuntimeError> {
        let config = self.sandbox_config(pod, attempt, is_static).map_err(err)?;
        let ips = match ready {
            true => self.sandbox_ips(id, crate::pod::host_network(pod)).await,
            false => vec![],
        };
        Ok(Sandbox {
            id: id.to_string(),
            config,
            ready,
            ips,
        })
    }

    /// Stops the old sandboxes `stop` and runs a new one (`attempt`).
    async fn create_sandbox(
        &self,
        pod: &Pod,
        attempt: u32,
        stop: &[String],
        is_static: bool,
    ) -> Result<Sandbox, RuntimeError> {
        for id in stop {
            tracing::info!(pod = %pod.name_any(), sandbox = %id, "sandbox not ready; stopping it and making a new one");
            let _ = self.cri.stop_pod_sandbox(id).await;
        }
        let mut config = self.sandbox_config(pod, attempt, is_static).map_err(err)?;
        config.dns_config = Some(self.dns_config(pod).map_err(err)?);
        self.ensure_pod_cgroup(pod)?;
        std::fs::create_dir_all(&config.log_directory)
            .map_err(|e| err(format!("creating {}: {e}", config.log_directory)))?;
        let id = self
            .cri
            .run_pod_sandbox(config.clone(), "")
            .await
            .map_err(err)?;
        tracing::info!(pod = %pod.name_any(), sandbox = %id, attempt, "sandbox started");
        self.stage(
            pod,
            "SandboxCreated",
            None,
            format!("sandbox {id}, attempt {attempt}"),
        );
        let ips = self.sandbox_ips(&id, crate::pod::host_network(pod)).await;
        let network = match crate::pod::host_network(pod) {
            true => "host network".to_string(),
            false => ips.join(", "),
        };
        self.stage(pod, "NetworkReady", None, network);
        Ok(Sandbox {
            ips,
            id,
            config,
            ready: true,
        })
    }

    /// The sandbox to observe a pod in without acting: the newest ready
    /// one, else the newest (`None` when it has none).
    pub(super) async fn current_sandbox(
        &self,
        pod: &Pod,
        is_static: bool,
    ) -> Result<Option<Sandbox>, RuntimeError> {
        let uid = pod.uid().unwrap_or_default();
        let all = self.sandboxes(&uid).await?;
        let ready = all
            .iter()
            .filter(|s| s.state == v1::PodSandboxState::SandboxReady as i32)
            .max_by_key(|s| s.created_at);
        let (s, is_ready) = match ready {
            Some(s) => (s, true),
            None => match all.iter().max_by_key(|s| s.created_at) {
                Some(s) => (s, false),
                None => return Ok(None),
            },
        };
        let sb = self
            .existing_sandbox(pod, &s.id, sandbox_attempt(s), is_ready, is_static)
            .await?;
        Ok(Some(sb))
    }
}
