//! Observing a pod without acting (upstream's `GetPodStatus` and
//! `convertToAPIContainerStatuses`): every container's newest instance and
//! the one before it (`lastState`), termination messages, and the prober's
//! readiness and startup verdicts, with the probes kept running for the
//! running instances.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use rkube_cri::v1;

use super::termination;
use super::{
    attempt, err, latest, previous_instances, state_of, waiting, CriRuntime, Override, Sandbox,
};
use crate::pod::{ephemeral_containers, is_sidecar};
use crate::prober::{ProbeSpec, Target};
use crate::runtime::{ContainerObservation, ContainerState, PodObservation, RuntimeError};

impl CriRuntime {
    /// Observes a pod without acting (also for kill_pod and mirror pods).
    pub(super) async fn observe(
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
                                    wake: self.wakeups.get(&uid),
                                    labels: crate::prober::metrics::ProbeLabels {
                                        namespace: crate::pod::pod_namespace(pod),
                                        pod: pod.metadata.name.clone().unwrap_or_default(),
                                        uid: uid.clone(),
                                        container: c.name.clone(),
                                    },
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
        // The PLEG wakes the worker when a container changes state, the
        // prober when a verdict changes; `wake` is a back-off's end.
        // Otherwise the worker's periodic resync.
        let resync = wake.map(|w| w + Duration::from_millis(100));
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
            resync_after: resync,
            resize_error: None,
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
            resources: None,
        };
        let mut started = None;
        if let Some(x) = latest {
            if let Some((state, st)) = self.instance_state(c, x).await? {
                o.image_id = st.image_ref.clone();
                o.container_id = format!("containerd://{}", x.id);
                o.state = state;
                o.resources = st
                    .resources
                    .as_ref()
                    .and_then(|r| r.linux.as_ref())
                    .and_then(super::spec::resize::seen);
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
}
