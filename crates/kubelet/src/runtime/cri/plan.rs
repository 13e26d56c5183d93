//! The pure half of a pod sync: given the pod and what the runtime holds
//! for it (its sandboxes, the newest instance of every container with its
//! state, and the probe verdicts), what to do — upstream's
//! `computePodActions` (`pkg/kubelet/kuberuntime/kuberuntime_manager.go`).
//! [`super::sync`] gathers the inputs, calls [`compute`] and executes the
//! [`PodActions`] in order. Nothing here does I/O or reads a clock, so the
//! decisions are table-tested without containerd.
//!
//! The rules are upstream's, in its order:
//! * the sandbox: the newest ready one is used; without one a new one is
//!   made (attempt + 1, the old ones stopped) unless nothing would run in
//!   it (a `restartPolicy: Never` pod that ran, or an initialised pod with
//!   no container left to start), and a new sandbox starts from the first
//!   init container;
//! * ephemeral containers start once, in a running sandbox, never again;
//! * init containers are walked from the last one that ran back to the
//!   first: a regular one must exit 0 before the next starts (a failed one
//!   is restarted, or under `Never` the pod is killed), a sidecar must have
//!   started (past its startup probe) and is kept running, restarted when
//!   it exits, its liveness probe fails or its image changes; once a
//!   container was made the pod is initialised and only sidecars are kept;
//! * then each container: started when it has no instance, restarted per
//!   `restartPolicy` when it exited (an unknown one killed first), killed
//!   and restarted when its image changed (whatever the policy) or its
//!   liveness/startup probe failed (not restarted under `Never`);
//! * a running container whose actuated resources differ from the pod's
//!   allocated ones is updated in place, or restarted when its
//!   `resizePolicy` says `RestartContainer` for a changed resource
//!   (upstream's `computePodResizeAction`, for regular containers);
//! * when nothing runs and nothing will, the pod is killed (sidecars and
//!   sandbox stopped).
//!
//! Where rkube differs by design: a created container that never started
//! is started rather than replaced by a new one (rkube has no container
//! GC yet to collect the one left behind); instances of an older sandbox
//! count as gone; a ready sandbox is kept whatever its IP. Restarts carry
//! when the previous instance finished, so the executor applies the
//! crash-loop back-off (as upstream's `doBackOff`, at execution).

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{Container, Pod};

pub use super::spec::resize::Resize;
use crate::pod::{
    container_restart_policy, container_should_restart, ephemeral_containers, is_sidecar,
    restart_policy,
};

/// A sandbox of the pod, as `ListPodSandbox` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxSeen {
    /// Its id.
    pub id: String,
    /// `SANDBOX_READY`.
    pub ready: bool,
    /// Its metadata's attempt.
    pub attempt: u32,
    /// When it was made (nanoseconds).
    pub created_at: i64,
}

/// The state of a container instance, as `ContainerStatus` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstanceState {
    /// Created, not started.
    Created,
    /// Running.
    Running,
    /// Exited with `exit_code` at `finished_at` (nanoseconds).
    Exited {
        /// The process's exit code.
        exit_code: i32,
        /// When it exited.
        finished_at: i128,
    },
    /// Anything else (the runtime does not know).
    Unknown,
}

/// What the prober says of a running instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeSeen {
    /// Past its startup probe (or has none).
    pub started: bool,
    /// A liveness or startup probe failed: kill it.
    pub kill: Option<ProbeKill>,
}

/// A failed probe that kills its container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeKill {
    /// `liveness` or `startup`.
    pub probe: String,
    /// The probe's own `terminationGracePeriodSeconds`, if set.
    pub grace_seconds: Option<i64>,
}

/// The newest instance of one container name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceSeen {
    /// Its CRI id.
    pub id: String,
    /// The sandbox it was made in.
    pub sandbox_id: String,
    /// Its attempt (the restart count).
    pub attempt: u32,
    /// Its state.
    pub state: InstanceState,
    /// The spec asks for another definition than this instance was made
    /// from (a new image).
    pub definition_changed: bool,
    /// The prober's verdict for this instance (`None`: no probe worker).
    pub probe: Option<ProbeSeen>,
    /// What a running instance needs for the pod's allocated resources
    /// (an in-place resize).
    pub resize: Resize,
}

/// What the runtime holds for a pod.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    /// Every sandbox of the pod.
    pub sandboxes: Vec<SandboxSeen>,
    /// The newest instance of every container name, in any sandbox.
    pub containers: HashMap<String, InstanceSeen>,
}

/// What to do about the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SandboxAction {
    /// Use this ready sandbox.
    Use(String),
    /// Stop these sandboxes (none ready), then make a new one.
    Create {
        /// Its attempt.
        attempt: u32,
        /// The old sandboxes to stop first.
        stop: Vec<String>,
    },
    /// Start nothing: a `restartPolicy: Never` pod whose containers all
    /// ran. Observe the newest sandbox, if any.
    Finished(Option<String>),
    /// Start nothing: the pod cannot start (its containers without an
    /// instance wait with the reason in [`PodActions::waiting`]).
    Blocked,
}

/// How long a kill may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grace {
    /// The pod's `terminationGracePeriodSeconds`.
    Pod,
    /// A probe's own grace, in seconds.
    Seconds(i64),
}

/// When the instance a restart replaces finished (the back-off is counted
/// from it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finished {
    /// It exited at this time (nanoseconds).
    At(i128),
    /// It is killed by this plan (or belongs to an old sandbox): now.
    Now,
}

/// Which list of the spec a container is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `spec.ephemeralContainers`.
    Ephemeral,
    /// `spec.initContainers`, not a sidecar.
    Init,
    /// `spec.initContainers` with `restartPolicy: Always`.
    Sidecar,
    /// `spec.containers`.
    Container,
}

/// One step of a plan, executed in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Create and start attempt `attempt` of container `name`.
    Start {
        /// The container.
        name: String,
        /// Its list.
        role: Role,
        /// The attempt to make.
        attempt: u32,
        /// A restart: the back-off applies, counted from this.
        restart: Option<Finished>,
    },
    /// Start the created instance `id` of container `name`.
    StartCreated {
        /// The container.
        name: String,
        /// The instance.
        id: String,
    },
    /// Give the running instance `id` of container `name` the pod's
    /// allocated resources (`UpdateContainerResources`).
    UpdateResources {
        /// The container.
        name: String,
        /// The instance.
        id: String,
    },
    /// Stop instance `id` of container `name` (its `preStop` hook first).
    Kill {
        /// The container.
        name: String,
        /// The instance.
        id: String,
        /// The Event's message (`Stopping container <name>` when `None`).
        message: Option<String>,
        /// How long it may take.
        grace: Grace,
    },
}

/// A pod sync's plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodActions {
    /// The sandbox.
    pub sandbox: SandboxAction,
    /// Stop every container and the sandbox first (upstream's `KillPod`):
    /// the pod is done, or its sandbox is replaced (the old ones stopped).
    pub kill_pod: bool,
    /// What to do in it, in order.
    pub steps: Vec<Step>,
    /// Containers to report as waiting with `(reason, message)`.
    pub waiting: Vec<(String, String, String)>,
}

impl PodActions {
    fn observe_only(sandbox: SandboxAction, kill_pod: bool) -> PodActions {
        PodActions {
            sandbox,
            kill_pod,
            steps: Vec::new(),
            waiting: Vec::new(),
        }
    }
}

/// Whether the pod still needs a sandbox. With a ready one: unless a
/// `restartPolicy: Never` pod has run all its containers and none is to
/// run again (by its own policy or rules). Without one, as
/// upstream's `computePodActions` decides whether to make a new one: not
/// for a `Never` pod whose sandbox is gone after something ran in it, nor
/// for a pod that was initialised (a container was made) and has no
/// container left to start (under its own or the pod's `OnFailure`, those
/// that succeeded).
pub fn needs_sandbox(pod: &Pod, seen: &Observed) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return true;
    };
    let policy = restart_policy(pod);
    let exited = |c: &Container| {
        let state = seen.containers.get(&c.name).map(|x| x.state);
        match state {
            Some(InstanceState::Exited { exit_code, .. }) => Some(exit_code),
            _ => None,
        }
    };
    if seen.sandboxes.iter().any(|s| s.ready) {
        // All exited, and none to start again (a container's own policy
        // or rules may restart it in a `Never` pod).
        let done = !spec.containers.is_empty()
            && spec
                .containers
                .iter()
                .all(|c| exited(c).is_some_and(|code| !container_should_restart(c, policy, code)));
        return !(policy == "Never" && done);
    }
    if policy == "Never" && !seen.sandboxes.is_empty() && !seen.containers.is_empty() {
        return false;
    }
    let initialised = spec
        .containers
        .iter()
        .any(|c| seen.containers.contains_key(&c.name));
    let to_start = spec
        .containers
        .iter()
        .filter(|c| !(container_restart_policy(c, policy) == "OnFailure" && exited(c) == Some(0)))
        .count();
    !(initialised && to_start == 0)
}

/// The plan for `pod` given what the runtime holds. `blocked`, when the
/// pod needs a sandbox, is why it cannot start (a field the node cannot
/// enforce, a volume it cannot set up): `(reason, message)`.
pub fn compute(pod: &Pod, seen: &Observed, blocked: Option<(&str, &str)>) -> PodActions {
    let spec = pod.spec.clone().unwrap_or_default();
    let policy = restart_policy(pod);
    let needed = needs_sandbox(pod, seen);
    if let (true, Some((reason, message))) = (needed, blocked) {
        let waiting = spec
            .init_containers
            .iter()
            .flatten()
            .chain(&spec.containers)
            .filter(|c| !seen.containers.contains_key(&c.name))
            .map(|c| (c.name.clone(), reason.to_string(), message.to_string()))
            .collect();
        return PodActions {
            sandbox: SandboxAction::Blocked,
            kill_pod: false,
            steps: Vec::new(),
            waiting,
        };
    }
    let ready = seen
        .sandboxes
        .iter()
        .filter(|s| s.ready)
        .max_by_key(|s| s.created_at);
    let mut p = Planner {
        seen,
        current: ready.map(|s| s.id.as_str()),
        policy,
        steps: Vec::new(),
    };
    let Some(ready) = ready else {
        if !needed {
            // Nothing will run again: whatever still runs is stopped.
            let newest = seen.sandboxes.iter().max_by_key(|s| s.created_at);
            let id = newest.map(|s| s.id.clone());
            let running = seen
                .containers
                .values()
                .any(|x| x.state == InstanceState::Running);
            return PodActions::observe_only(SandboxAction::Finished(id), running);
        }
        // A new sandbox starts from the beginning: the first init
        // container, else every container that is to run again.
        match spec.init_containers.iter().flatten().next() {
            Some(first) => {
                let role = if is_sidecar(first) {
                    Role::Sidecar
                } else {
                    Role::Init
                };
                p.start_again(first, role);
            }
            None => {
                for c in &spec.containers {
                    if !(container_restart_policy(c, policy) == "OnFailure" && p.succeeded(c)) {
                        p.start_again(c, Role::Container);
                    }
                }
            }
        }
        return PodActions {
            sandbox: SandboxAction::Create {
                attempt: seen
                    .sandboxes
                    .iter()
                    .map(|s| s.attempt + 1)
                    .max()
                    .unwrap_or(0),
                stop: seen.sandboxes.iter().map(|s| s.id.clone()).collect(),
            },
            kill_pod: !seen.sandboxes.is_empty(),
            steps: p.steps,
            waiting: Vec::new(),
        };
    };
    let sandbox = SandboxAction::Use(ready.id.clone());
    // Ephemeral containers may start before initialisation completes, and
    // are never restarted.
    for c in ephemeral_containers(pod) {
        if !seen.containers.contains_key(&c.name) {
            p.start(&c.name, Role::Ephemeral, 0, None);
        }
    }
    let init = p.init_containers(&spec);
    if init.kill_pod || !init.initialised {
        // Initialisation failed for good, or is still in progress.
        return PodActions {
            sandbox,
            kill_pod: init.kill_pod,
            steps: if init.kill_pod { Vec::new() } else { p.steps },
            waiting: Vec::new(),
        };
    }
    let mut keep = 0;
    let mut to_start = 0;
    for c in &spec.containers {
        match p.container(c) {
            Kept::Running => keep += 1,
            Kept::Starting => to_start += 1,
            Kept::Done => {}
        }
    }
    if keep == 0 && to_start == 0 {
        // Nothing runs and nothing will: the pod is done (its sidecars
        // are stopped with it, not restarted).
        return PodActions {
            sandbox,
            kill_pod: true,
            steps: Vec::new(),
            waiting: Vec::new(),
        };
    }
    PodActions {
        sandbox,
        kill_pod: false,
        steps: p.steps,
        waiting: Vec::new(),
    }
}

/// What the init containers came to (upstream's
/// `computeInitContainerActions`).
struct InitOutcome {
    /// Every init container has done its part: the containers may run.
    initialised: bool,
    /// A regular init container failed under `restartPolicy: Never`.
    kill_pod: bool,
}

/// What a regular container came to.
enum Kept {
    /// Running, left alone.
    Running,
    /// To be started (again), killed first if need be.
    Starting,
    /// Exited for good (or killed without a restart).
    Done,
}

struct Planner<'a> {
    seen: &'a Observed,
    current: Option<&'a str>,
    policy: &'a str,
    steps: Vec<Step>,
}

impl Planner<'_> {
    fn start(&mut self, name: &str, role: Role, attempt: u32, restart: Option<Finished>) {
        self.steps.push(Step::Start {
            name: name.to_string(),
            role,
            attempt,
            restart,
        });
    }

    fn kill(&mut self, c: &Container, x: &InstanceSeen, message: String, grace: Grace) {
        self.steps.push(Step::Kill {
            name: c.name.clone(),
            id: x.id.clone(),
            message: Some(message),
            grace,
        });
    }

    /// Starts `c` again after its newest instance (in any sandbox): the
    /// next attempt, the back-off counted from when that instance
    /// finished.
    fn start_again(&mut self, c: &Container, role: Role) {
        let (attempt, from) = match self.seen.containers.get(&c.name) {
            None => (0, None),
            Some(x) => {
                let from = match x.state {
                    InstanceState::Exited { finished_at, .. } => Finished::At(finished_at),
                    _ => Finished::Now,
                };
                (x.attempt + 1, Some(from))
            }
        };
        self.start(&c.name, role, attempt, from);
    }

    /// The instance of `name` in the sandbox in use (instances of an older
    /// sandbox are of the past).
    fn current_instance(&self, name: &str) -> Option<&InstanceSeen> {
        let x = self.seen.containers.get(name)?;
        (Some(x.sandbox_id.as_str()) == self.current).then_some(x)
    }

    /// The newest instance of `c` exited 0.
    fn succeeded(&self, c: &Container) -> bool {
        let x = self.seen.containers.get(&c.name);
        matches!(
            x.map(|x| x.state),
            Some(InstanceState::Exited { exit_code: 0, .. })
        )
    }

    /// The init containers, walked from the last one that ran back to the
    /// first (those before the newest one with an instance have done
    /// their part even if their instances are gone): which to start, kill
    /// or wait for. Sidecars are kept running once they have started.
    fn init_containers(&mut self, spec: &k8s_openapi::api::core::v1::PodSpec) -> InitOutcome {
        let inits: Vec<&Container> = spec.init_containers.iter().flatten().collect();
        // A container made in this sandbox and not exited: the pod was
        // initialised (its init containers' instances may be gone).
        let mut initialised = spec.containers.iter().any(|c| {
            let state = self.current_instance(&c.name).map(|x| x.state);
            matches!(state, Some(InstanceState::Created | InstanceState::Running))
        });
        let mut previously = initialised;
        let mut starts: Vec<Step> = Vec::new();
        let mut kills: Vec<Step> = Vec::new();
        for (i, c) in inits.iter().enumerate().rev() {
            let sidecar = is_sidecar(c);
            let start = |attempt: u32, restart: Option<Finished>| Step::Start {
                name: c.name.clone(),
                role: if sidecar { Role::Sidecar } else { Role::Init },
                attempt,
                restart,
            };
            let next_start = |me: &Self| {
                let n = inits[i + 1];
                let attempt = me.seen.containers.get(&n.name).map_or(0, |x| x.attempt + 1);
                Step::Start {
                    name: n.name.clone(),
                    role: if is_sidecar(n) {
                        Role::Sidecar
                    } else {
                        Role::Init
                    },
                    attempt,
                    restart: None,
                }
            };
            let Some(x) = self.current_instance(&c.name).cloned() else {
                // Its instance is gone: a sidecar of an initialised pod is
                // started again.
                if previously && sidecar {
                    let attempt = self
                        .seen
                        .containers
                        .get(&c.name)
                        .map_or(0, |x| x.attempt + 1);
                    starts.push(start(attempt, None));
                }
                continue;
            };
            if previously && !sidecar {
                // After initialisation only sidecars are kept running.
                continue;
            }
            let kill = |message: String| Step::Kill {
                name: c.name.clone(),
                id: x.id.clone(),
                message: Some(message),
                grace: Grace::Pod,
            };
            match x.state {
                InstanceState::Created => starts.push(Step::StartCreated {
                    name: c.name.clone(),
                    id: x.id.clone(),
                }),
                InstanceState::Running if sidecar => 'running: {
                    let probe = x.probe.as_ref();
                    if c.startup_probe.is_some() {
                        match probe {
                            // Its startup probe has not passed yet: wait.
                            None => break 'running,
                            Some(pr) if !pr.started => {
                                if let Some(k) = pr.kill.as_ref().filter(|k| k.probe == "startup") {
                                    kills.push(Step::Kill {
                                        name: c.name.clone(),
                                        id: x.id.clone(),
                                        message: Some(format!(
                                            "Init container {} failed startup probe",
                                            c.name
                                        )),
                                        grace: k.grace_seconds.map_or(Grace::Pod, Grace::Seconds),
                                    });
                                    starts.push(start(x.attempt + 1, Some(Finished::Now)));
                                }
                                break 'running;
                            }
                            Some(_) => {}
                        }
                    }
                    // Started: the next one may start.
                    if i + 1 == inits.len() {
                        initialised = true;
                    } else if !previously {
                        starts.push(next_start(self));
                    }
                    if x.definition_changed {
                        kills.push(kill(format!(
                            "Init container {} definition changed",
                            c.name
                        )));
                        starts.push(start(x.attempt + 1, Some(Finished::Now)));
                    } else if let Some(k) = probe.and_then(|p| p.kill.as_ref()) {
                        kills.push(Step::Kill {
                            name: c.name.clone(),
                            id: x.id.clone(),
                            message: Some(format!(
                                "Init container {} failed {} probe",
                                c.name, k.probe
                            )),
                            grace: k.grace_seconds.map_or(Grace::Pod, Grace::Seconds),
                        });
                        starts.push(start(x.attempt + 1, Some(Finished::Now)));
                    }
                }
                // A regular init container runs: wait for it.
                InstanceState::Running => {}
                InstanceState::Exited {
                    exit_code,
                    finished_at,
                } => {
                    if sidecar {
                        starts.push(start(x.attempt + 1, Some(Finished::At(finished_at))));
                    } else if exit_code != 0 {
                        if !container_should_restart(c, self.policy, exit_code) {
                            return InitOutcome {
                                initialised: false,
                                kill_pod: true,
                            };
                        }
                        starts.push(start(x.attempt + 1, Some(Finished::At(finished_at))));
                    } else if i + 1 == inits.len() {
                        initialised = true;
                    } else {
                        starts.push(next_start(self));
                    }
                }
                InstanceState::Unknown => {
                    if !sidecar && container_restart_policy(c, self.policy) == "Never" {
                        return InitOutcome {
                            initialised: false,
                            kill_pod: true,
                        };
                    }
                    kills.push(kill(format!(
                        "Init container {} is in unknown state, try killing it before restart",
                        c.name
                    )));
                    starts.push(start(x.attempt + 1, Some(Finished::Now)));
                }
            }
            previously = true;
        }
        if let (false, Some(&first)) = (previously, inits.first()) {
            // No init container has run yet: the first one starts.
            let attempt = self
                .seen
                .containers
                .get(&first.name)
                .map_or(0, |x| x.attempt + 1);
            starts.push(Step::Start {
                name: first.name.clone(),
                role: if is_sidecar(first) {
                    Role::Sidecar
                } else {
                    Role::Init
                },
                attempt,
                restart: None,
            });
        }
        // Walked backwards: start them in spec order, after the kills.
        starts.reverse();
        self.steps.extend(kills);
        self.steps.extend(starts);
        InitOutcome {
            initialised: initialised || inits.is_empty(),
            kill_pod: false,
        }
    }

    /// One regular container once the pod is initialised (upstream's
    /// loop over `spec.containers`).
    fn container(&mut self, c: &Container) -> Kept {
        // After a failed probe there is no exit code: the container's
        // policy (or the pod's) alone decides.
        let restart_on_failure = container_restart_policy(c, self.policy) != "Never";
        let Some(x) = self.seen.containers.get(&c.name).cloned() else {
            self.start(&c.name, Role::Container, 0, None);
            return Kept::Starting;
        };
        let same = Some(x.sandbox_id.as_str()) == self.current;
        if !(same && x.state == InstanceState::Running) {
            // Not running (here): started again as upstream's
            // `ShouldContainerBeRestarted` says.
            let restart = match x.state {
                // Upstream makes a new one; rkube starts the one made.
                InstanceState::Created if same => {
                    self.steps.push(Step::StartCreated {
                        name: c.name.clone(),
                        id: x.id.clone(),
                    });
                    return Kept::Starting;
                }
                InstanceState::Unknown if same => {
                    self.kill(
                        c,
                        &x,
                        format!(
                            "Container {} is in unknown state, try killing it before restart",
                            c.name
                        ),
                        Grace::Pod,
                    );
                    true
                }
                InstanceState::Exited { exit_code, .. } => {
                    container_should_restart(c, self.policy, exit_code)
                }
                // Running, created or unknown in an older sandbox.
                _ => container_should_restart(c, self.policy, 1),
            };
            if !restart {
                return Kept::Done;
            }
            self.start_again(c, Role::Container);
            return Kept::Starting;
        }
        let (message, grace, restart) = if x.definition_changed {
            // Restarted whatever the policy: the spec changed.
            (
                format!("Container {} definition changed", c.name),
                Grace::Pod,
                true,
            )
        } else if let Some(k) = x.probe.as_ref().and_then(|p| p.kill.as_ref()) {
            let grace = k.grace_seconds.map_or(Grace::Pod, Grace::Seconds);
            let message = format!("Container {} failed {} probe", c.name, k.probe);
            (message, grace, restart_on_failure)
        } else {
            match x.resize {
                Resize::None => {}
                Resize::Update => self.steps.push(Step::UpdateResources {
                    name: c.name.clone(),
                    id: x.id.clone(),
                }),
                Resize::Restart => {
                    // Restarted at once (no back-off: it did not fail).
                    let message = format!("Container {} resize requires restart", c.name);
                    self.kill(c, &x, message, Grace::Pod);
                    self.start(&c.name, Role::Container, x.attempt + 1, None);
                    return Kept::Starting;
                }
            }
            return Kept::Running;
        };
        let message = match restart {
            true => format!("{message}, will be restarted"),
            false => message,
        };
        self.kill(c, &x, message, grace);
        if !restart {
            return Kept::Done;
        }
        self.start(&c.name, Role::Container, x.attempt + 1, Some(Finished::Now));
        Kept::Starting
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
