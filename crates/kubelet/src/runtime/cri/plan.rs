//! The pure half of a pod sync: given the pod and what the runtime holds
//! for it (its sandboxes, the newest instance of every container with its
//! state, and the probe verdicts), what to do — upstream's
//! `computePodActions` (`pkg/kubelet/kuberuntime/kuberuntime_manager.go`).
//! [`super::sync`] gathers the inputs, calls [`compute`] and executes the
//! [`PodActions`] in order. Nothing here does I/O or reads a clock, so the
//! decisions are table-tested without containerd.
//!
//! The rules, as upstream's:
//! * one sandbox per pod: the newest ready one is used; without one, every
//!   old sandbox is stopped and a new one made (attempt + 1), unless a
//!   `restartPolicy: Never` pod has run all its containers (then nothing
//!   is started again);
//! * ephemeral containers start once and are never restarted;
//! * init containers run one at a time in spec order: a regular one must
//!   exit 0 (a failed one is restarted per the pod's policy) before the
//!   next starts; a sidecar (`restartPolicy: Always`) only has to have
//!   started (past its startup probe) and is kept running;
//! * once initialised, each container is kept: started when it has no
//!   instance, restarted when it exited (per the policy) or belongs to an
//!   old sandbox, killed and restarted when its image changed (whatever the
//!   policy) or its liveness/startup probe failed (unless the policy is
//!   `Never`), a created one started;
//! * when every container has exited for good, the sidecars are stopped,
//!   last first, so the pod can reach Succeeded/Failed.
//!
//! Restarts carry when the previous instance finished, so the executor can
//! apply the crash-loop back-off (as upstream's `doBackOff`, at execution).
//! A start that the next decisions depend on (a sidecar that has no startup
//! probe, so counts as started once running) is a *gate*: if it does not
//! leave the container running, the executor stops there, as upstream
//! waits for the next sync.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::pod::{ephemeral_containers, is_sidecar, restart_policy};

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
        /// If it does not leave the container running, stop here.
        gate: bool,
    },
    /// Start the created instance `id` of container `name`.
    StartCreated {
        /// The container.
        name: String,
        /// The instance.
        id: String,
        /// If it fails, stop here.
        gate: bool,
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
    /// What to do in it, in order.
    pub steps: Vec<Step>,
    /// Containers to report as waiting with `(reason, message)`.
    pub waiting: Vec<(String, String, String)>,
}

impl PodActions {
    fn observe_only(sandbox: SandboxAction) -> PodActions {
        PodActions {
            sandbox,
            steps: Vec::new(),
            waiting: Vec::new(),
        }
    }
}

/// The restart decision for an exited container (upstream's
/// `ShouldContainerBeRestarted`).
pub fn should_restart(policy: &str, exit_code: i32) -> bool {
    match policy {
        "Never" => false,
        "OnFailure" => exit_code != 0,
        _ => true,
    }
}

/// Whether the pod still needs a sandbox. Not a `restartPolicy: Never` pod
/// every container of which has exited (in any sandbox), nor, as
/// upstream's `computePodActions`, a `Never` pod whose sandbox is gone
/// after something ran in it: such a pod is not run again.
pub fn needs_sandbox(pod: &Pod, seen: &Observed) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return true;
    };
    if restart_policy(pod) != "Never" {
        return true;
    }
    let all_exited = !spec.containers.is_empty()
        && spec.containers.iter().all(|c| {
            seen.containers
                .get(&c.name)
                .is_some_and(|x| matches!(x.state, InstanceState::Exited { .. }))
        });
    let sandbox_lost = !seen.sandboxes.is_empty()
        && !seen.sandboxes.iter().any(|s| s.ready)
        && !seen.containers.is_empty();
    !(all_exited || sandbox_lost)
}

/// The plan for `pod` given what the runtime holds. `blocked`, when the
/// pod needs a sandbox, is why it cannot start (a field the node cannot
/// enforce, a volume it cannot set up): `(reason, message)`.
pub fn compute(pod: &Pod, seen: &Observed, blocked: Option<(&str, &str)>) -> PodActions {
    let spec = pod.spec.clone().unwrap_or_default();
    let policy = restart_policy(pod);
    let needed = needs_sandbox(pod, seen);
    if needed {
        if let Some((reason, message)) = blocked {
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
                steps: Vec::new(),
                waiting,
            };
        }
    }
    let ready = seen
        .sandboxes
        .iter()
        .filter(|s| s.ready)
        .max_by_key(|s| s.created_at);
    let sandbox = match ready {
        Some(s) => SandboxAction::Use(s.id.clone()),
        None if !needed => {
            let newest = seen.sandboxes.iter().max_by_key(|s| s.created_at);
            return PodActions::observe_only(SandboxAction::Finished(newest.map(|s| s.id.clone())));
        }
        None => SandboxAction::Create {
            attempt: seen
                .sandboxes
                .iter()
                .map(|s| s.attempt + 1)
                .max()
                .unwrap_or(0),
            stop: seen.sandboxes.iter().map(|s| s.id.clone()).collect(),
        },
    };
    // Instances in another sandbox than the one in use are of the past.
    let current = ready.map(|s| s.id.as_str());
    let mut p = Planner {
        seen,
        current,
        steps: Vec::new(),
    };
    // Ephemeral containers start in a running sandbox, never in one made
    // by this sync (as upstream: the next sync starts them).
    for c in ephemeral_containers(pod)
        .iter()
        .filter(|_| current.is_some())
    {
        if !seen.containers.contains_key(&c.name) {
            p.start(&c.name, Role::Ephemeral, 0, None, false);
        }
    }
    let all_done = p.finished_for_good(&spec.containers, policy);
    let mut initialised = true;
    for c in spec.init_containers.iter().flatten() {
        if is_sidecar(c) {
            if all_done {
                // Not restarted once the containers are done.
                continue;
            }
            let outcome = p.keep(c, Role::Sidecar, "Always");
            if outcome.up {
                continue;
            }
            initialised = false;
            break;
        }
        if !p.init_container(c, policy) {
            initialised = false;
            break;
        }
    }
    if initialised {
        let mut live = 0;
        for c in &spec.containers {
            if p.keep(c, Role::Container, policy).live {
                live += 1;
            }
        }
        // Every container has exited for good: stop the sidecars too,
        // last first.
        if live == 0 {
            for c in spec.init_containers.iter().flatten().rev() {
                let running = seen
                    .containers
                    .get(&c.name)
                    .filter(|x| x.state == InstanceState::Running);
                if let (true, Some(x)) = (is_sidecar(c), running) {
                    p.steps.push(Step::Kill {
                        name: c.name.clone(),
                        id: x.id.clone(),
                        message: None,
                        grace: Grace::Pod,
                    });
                }
            }
        }
    }
    PodActions {
        sandbox,
        steps: p.steps,
        waiting: Vec::new(),
    }
}

/// What keeping one long-running container leads to.
struct Kept {
    /// It runs, is starting, or waits to restart (not done for good).
    live: bool,
    /// It is running and started (for a sidecar: the next init container
    /// may start), assuming its gated steps succeed.
    up: bool,
}

struct Planner<'a> {
    seen: &'a Observed,
    current: Option<&'a str>,
    steps: Vec<Step>,
}

impl Planner<'_> {
    fn start(
        &mut self,
        name: &str,
        role: Role,
        attempt: u32,
        restart: Option<Finished>,
        gate: bool,
    ) {
        self.steps.push(Step::Start {
            name: name.to_string(),
            role,
            attempt,
            restart,
            gate,
        });
    }

    /// The instance of `name` in the sandbox in use.
    fn current_instance(&self, name: &str) -> Option<&InstanceSeen> {
        let x = self.seen.containers.get(name)?;
        (Some(x.sandbox_id.as_str()) == self.current).then_some(x)
    }

    /// Every container has exited in the sandbox in use and none is to be
    /// restarted under `policy` (nothing keeps the pod alive).
    fn finished_for_good(&self, containers: &[Container], policy: &str) -> bool {
        if containers.is_empty() || policy == "Always" {
            return false;
        }
        containers.iter().all(|c| {
            matches!(
                self.current_instance(&c.name).map(|x| x.state),
                Some(InstanceState::Exited { exit_code, .. }) if !should_restart(policy, exit_code)
            )
        })
    }

    /// A regular init container: true when it has completed (exited 0 in
    /// the sandbox in use), else plans what it needs and returns false.
    fn init_container(&mut self, c: &Container, policy: &str) -> bool {
        match self.current_instance(&c.name).map(|x| (x.attempt, x.state)) {
            Some((_, InstanceState::Exited { exit_code: 0, .. })) => return true,
            Some((
                attempt,
                InstanceState::Exited {
                    exit_code,
                    finished_at,
                },
            )) => {
                if should_restart(policy, exit_code) {
                    let restart = Some(Finished::At(finished_at));
                    self.start(&c.name, Role::Init, attempt + 1, restart, false);
                }
            }
            // Running or created: wait for it.
            Some(_) => {}
            None => {
                let attempt = self
                    .seen
                    .containers
                    .get(&c.name)
                    .map_or(0, |x| x.attempt + 1);
                self.start(&c.name, Role::Init, attempt, None, false);
            }
        }
        false
    }

    /// Keeps a long-running container (a regular one under the pod's
    /// `policy`, or a sidecar under `Always`).
    fn keep(&mut self, c: &Container, role: Role, policy: &str) -> Kept {
        // A sidecar counts as started once running only without a startup
        // probe; with one, the next sync sees what its probe says.
        let gate = role == Role::Sidecar && c.startup_probe.is_none();
        let fresh = Kept {
            live: true,
            up: gate,
        };
        let Some(x) = self.seen.containers.get(&c.name) else {
            self.start(&c.name, role, 0, None, gate);
            return fresh;
        };
        let same = Some(x.sandbox_id.as_str()) == self.current;
        let running = x.state == InstanceState::Running;
        if running && same && x.definition_changed {
            // A new image: killed and started again whatever the policy.
            self.steps.push(Step::Kill {
                name: c.name.clone(),
                id: x.id.clone(),
                message: Some(format!(
                    "Container {} definition changed, will be restarted",
                    c.name
                )),
                grace: Grace::Pod,
            });
            self.start(&c.name, role, x.attempt + 1, Some(Finished::Now), gate);
            return fresh;
        }
        if running && same {
            let probe = x.probe.as_ref();
            let Some(kill) = probe.and_then(|p| p.kill.as_ref()) else {
                let started = probe.map_or(c.startup_probe.is_none(), |p| p.started);
                return Kept {
                    live: true,
                    up: started,
                };
            };
            let restart = policy != "Never";
            self.steps.push(Step::Kill {
                name: c.name.clone(),
                id: x.id.clone(),
                message: Some(format!(
                    "Container {} failed {} probe{}",
                    c.name,
                    kill.probe,
                    if restart { ", will be restarted" } else { "" }
                )),
                grace: kill.grace_seconds.map_or(Grace::Pod, Grace::Seconds),
            });
            if !restart {
                return Kept {
                    live: false,
                    up: false,
                };
            }
            self.start(&c.name, role, x.attempt + 1, Some(Finished::Now), gate);
            return fresh;
        }
        if x.state == InstanceState::Unknown && same {
            // As upstream: killed first, then started again whatever the
            // policy (`ShouldContainerBeRestarted` restarts unknown ones).
            self.steps.push(Step::Kill {
                name: c.name.clone(),
                id: x.id.clone(),
                message: Some(format!(
                    "Container {} is in unknown state, try killing it before restart",
                    c.name
                )),
                grace: Grace::Pod,
            });
            self.start(&c.name, role, x.attempt + 1, Some(Finished::Now), gate);
            return fresh;
        }
        let exited = match x.state {
            InstanceState::Exited {
                exit_code,
                finished_at,
            } => Some((exit_code, finished_at)),
            _ => None,
        };
        if exited.is_some() || !same {
            let code = exited.map_or(1, |(code, _)| code);
            if should_restart(policy, code) {
                let from = exited.map_or(Finished::Now, |(_, at)| Finished::At(at));
                self.start(&c.name, role, x.attempt + 1, Some(from), gate);
                return fresh;
            }
        }
        if x.state == InstanceState::Created {
            self.steps.push(Step::StartCreated {
                name: c.name.clone(),
                id: x.id.clone(),
                gate,
            });
            return fresh;
        }
        Kept {
            live: false,
            up: false,
        }
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
