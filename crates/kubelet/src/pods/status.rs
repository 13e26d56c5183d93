//! Pod status from a runtime observation (pure): phase as upstream's
//! `getPhase`, the kubelet-owned conditions (PodReadyToStartContainers,
//! Initialized, ContainersReady, Ready, and PodScheduled=True as upstream's
//! `generateAPIPodStatus` adds it), container statuses, IPs, start time and
//! observedGeneration — and the status PATCH body.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerState as KState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus,
    ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::pod::is_sidecar;
use crate::runtime::{ContainerObservation, ContainerState, PodObservation};

/// True for `Succeeded` and `Failed`.
pub fn is_terminal(phase: Option<&str>) -> bool {
    matches!(phase, Some("Succeeded") | Some("Failed"))
}

/// The init containers of `pod` with their observations, marked sidecar
/// or not (the observation is in spec order).
fn init_pairs<'a>(pod: &'a Pod, obs: &'a PodObservation) -> Vec<(bool, &'a ContainerObservation)> {
    let specs = pod
        .spec
        .as_ref()
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or_default();
    obs.init_containers
        .iter()
        .map(|o| {
            let sidecar = specs.iter().any(|c| c.name == o.name && is_sidecar(c));
            (sidecar, o)
        })
        .collect()
}

fn last_terminated(c: &ContainerObservation) -> Option<i32> {
    match c.last_state {
        Some(ContainerState::Terminated { exit_code, .. }) => Some(exit_code),
        _ => None,
    }
}

/// The pod phase for an observation (upstream's `getPhase`, with its
/// sidecar rules: a sidecar neither keeps the pod Pending once it has
/// started nor counts toward Succeeded/Failed; and its container restart
/// rules: a stopped container that its own policy or rules, or the pod's
/// policy, start again keeps the pod Running). `initialized`: the pod
/// was Initialized before (restarting sidecars then keep it Running).
pub fn phase(pod: &Pod, obs: &PodObservation, initialized: bool) -> &'static str {
    phase_of(pod, obs, initialized, false)
}

/// [`phase`], and for a pod the kubelet is terminating (`terminal`):
/// once every container has stopped, Succeeded or Failed by their exit
/// codes whatever would restart them (upstream's `podIsTerminal`; not for
/// static pods, as upstream).
fn phase_of(pod: &Pod, obs: &PodObservation, initialized: bool, terminal: bool) -> &'static str {
    let restart = crate::pod::restart_policy(pod);
    let spec_of = |name: &str| {
        pod.spec.as_ref().and_then(|s| {
            s.init_containers
                .iter()
                .flatten()
                .chain(&s.containers)
                .find(|c| c.name == name)
        })
    };
    // Started again after exiting with `code`.
    let restarts = |name: &str, code: i32| match spec_of(name) {
        Some(c) => crate::pod::container_should_restart(c, restart, code),
        // Not in the spec: the pod's policy.
        None => crate::pod::container_should_restart(&Container::default(), restart, code),
    };
    let (mut pending_init, mut pending_sidecars, mut failed_init) = (0, 0, 0);
    let (mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0);
    let mut stopped_for_good = 0;
    for (sidecar, c) in init_pairs(pod, obs) {
        match (&c.state, sidecar) {
            (ContainerState::Running { .. }, false) => pending_init += 1,
            (ContainerState::Terminated { exit_code, .. }, false) => {
                if *exit_code != 0 && !restarts(&c.name, *exit_code) {
                    failed_init += 1;
                }
            }
            (ContainerState::Waiting { .. }, false) => match last_terminated(c) {
                Some(code) if code != 0 && !restarts(&c.name, code) => failed_init += 1,
                Some(_) => {}
                None => pending_init += 1,
            },
            (ContainerState::Running { .. }, true) => {
                if !c.started {
                    pending_sidecars += 1;
                }
                running += 1;
            }
            (ContainerState::Terminated { .. }, true) => {}
            (ContainerState::Waiting { .. }, true) => {
                if last_terminated(c).is_none() {
                    pending_sidecars += 1;
                    waiting += 1;
                }
            }
        }
    }
    for c in &obs.containers {
        match c.state {
            ContainerState::Running { .. } => running += 1,
            ContainerState::Terminated { exit_code, .. } => {
                stopped += 1;
                if exit_code == 0 {
                    succeeded += 1;
                }
                if !restarts(&c.name, exit_code) {
                    stopped_for_good += 1;
                }
            }
            ContainerState::Waiting { .. } => match last_terminated(c) {
                Some(code) => {
                    stopped += 1;
                    if !restarts(&c.name, code) {
                        stopped_for_good += 1;
                    }
                }
                None => waiting += 1,
            },
        }
    }
    // An init container failed and will not run again.
    if failed_init > 0 {
        return "Failed";
    }
    if pending_init > 0 || (pending_sidecars > 0 && !initialized) || waiting > 0 {
        return "Pending";
    }
    if obs.containers.is_empty() {
        return "Pending";
    }
    if running > 0 {
        return "Running";
    }
    if stopped == 0 {
        return "Pending";
    }
    if terminal && !crate::pod::is_static(pod) {
        return if stopped == succeeded {
            "Succeeded"
        } else {
            "Failed"
        };
    }
    if stopped != stopped_for_good {
        "Running"
    } else if stopped == succeeded {
        "Succeeded"
    } else {
        "Failed"
    }
}

fn time(t: Timestamp) -> Option<Time> {
    Some(Time(t))
}

fn kstate(s: &ContainerState, container_id: &str) -> KState {
    match s {
        ContainerState::Waiting { reason, message } => KState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(reason.clone()),
                message: (!message.is_empty()).then(|| message.clone()),
            }),
            ..Default::default()
        },
        ContainerState::Running { started_at } => KState {
            running: Some(ContainerStateRunning {
                started_at: time(*started_at),
            }),
            ..Default::default()
        },
        ContainerState::Terminated {
            exit_code,
            reason,
            started_at,
            finished_at,
            message,
        } => KState {
            terminated: Some(ContainerStateTerminated {
                exit_code: *exit_code,
                reason: Some(reason.clone()),
                message: (!message.is_empty()).then(|| message.clone()),
                started_at: time(*started_at),
                finished_at: time(*finished_at),
                container_id: (!container_id.is_empty()).then(|| container_id.to_string()),
                ..Default::default()
            }),
            ..Default::default()
        },
    }
}

/// A cpu amount in millicores as upstream writes it
/// (`NewMilliQuantity(m, DecimalSI)`: `250m`, `1`).
fn millicores(m: i64) -> Quantity {
    Quantity(rkube_model::quantity::format_milli(m))
}

/// upstream's `convertContainerStatusResources` (without carrying a value
/// the runtime stopped reporting over from the previous status): the
/// allocated resources, with what the runtime reports a running container
/// has in place of the cpu limit (unless both are at or below the 10m a
/// CFS quota can express), the cpu request (unless both are at or below
/// two shares) and the memory limit.
fn status_resources(spec: &Container, c: &ContainerObservation) -> ResourceRequirements {
    let mut r = spec.resources.clone().unwrap_or_default();
    let (ContainerState::Running { .. }, Some(seen)) = (&c.state, c.resources) else {
        return r;
    };
    let milli_of = |m: Option<&BTreeMap<String, Quantity>>, k: &str| {
        m.and_then(|m| m.get(k))
            .and_then(|q| rkube_model::quantity::Quantity::parse(&q.0).ok())
            .map_or(0, |q| q.milli_value())
    };
    let allocated_cpu_limit = milli_of(r.limits.as_ref(), "cpu");
    let allocated_cpu_request = milli_of(r.requests.as_ref(), "cpu");
    if let Some(limits) = r.limits.as_mut() {
        if let Some(cpu) = seen
            .cpu_limit
            .filter(|m| *m > 10 || allocated_cpu_limit > 10)
        {
            limits.insert("cpu".into(), millicores(cpu));
        }
        if let Some(mem) = seen.memory_limit {
            // As upstream writes it (`NewQuantity(bytes, BinarySI)`: `96Mi`).
            limits.insert(
                "memory".into(),
                Quantity(rkube_model::quantity::format_bytes(mem)),
            );
        }
    }
    if let Some(requests) = r.requests.as_mut() {
        if let Some(cpu) = seen
            .cpu_request
            .filter(|m| *m > 2 || allocated_cpu_request > 2)
        {
            requests.insert("cpu".into(), millicores(cpu));
        }
    }
    r
}

/// The status of container `c`; with its (allocated) spec, its
/// `resources` and `allocatedResources` as upstream reports them.
fn container_status_of(spec: Option<&Container>, c: &ContainerObservation) -> ContainerStatus {
    let mut st = container_status(c);
    if let Some(spec) = spec {
        st.resources = Some(status_resources(spec, c));
        st.allocated_resources = spec.resources.as_ref().and_then(|r| r.requests.clone());
    }
    st
}

fn container_status(c: &ContainerObservation) -> ContainerStatus {
    ContainerStatus {
        name: c.name.clone(),
        image: c.image.clone(),
        image_id: c.image_id.clone(),
        container_id: (!c.container_id.is_empty()).then(|| c.container_id.clone()),
        ready: c.ready,
        started: Some(c.started),
        restart_count: c.restart_count,
        state: Some(kstate(&c.state, &c.container_id)),
        // The previous instance's id is not kept; upstream reports it.
        last_state: c.last_state.as_ref().map(|s| kstate(s, "")),
        ..Default::default()
    }
}

fn condition(
    previous: Option<&PodStatus>,
    type_: &str,
    ok: bool,
    reason: Option<&str>,
    message: Option<String>,
    now: Timestamp,
) -> PodCondition {
    let status = if ok { "True" } else { "False" };
    let transition = previous
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == type_))
        .filter(|c| c.status == status)
        .and_then(|c| c.last_transition_time.clone())
        .or(time(now));
    PodCondition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.map(str::to_string),
        message,
        last_transition_time: transition,
        ..Default::default()
    }
}

fn names(cs: &[ContainerObservation], pred: impl Fn(&ContainerObservation) -> bool) -> Vec<String> {
    cs.iter()
        .filter(|c| pred(c))
        .map(|c| c.name.clone())
        .collect()
}

/// Why the pod's readiness gates are not met (upstream's messages), from
/// the conditions others set in the pod's status; empty when they are.
fn readiness_gates_unready(pod: &Pod) -> Vec<String> {
    let conditions = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    pod.spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_deref())
        .unwrap_or_default()
        .iter()
        .filter_map(
            |g| match conditions.iter().find(|c| c.type_ == g.condition_type) {
                None => Some(format!(
                    "corresponding condition of pod readiness gate {:?} does not exist.",
                    g.condition_type
                )),
                Some(c) if c.status != "True" => Some(format!(
                    "the status of pod readiness gate {:?} is not \"True\", but {}",
                    g.condition_type, c.status
                )),
                Some(_) => None,
            },
        )
        .collect()
}

/// The status the kubelet reports for `pod` given `obs`. `previous` (the
/// last status computed, else the pod's) keeps transition and start times.
pub fn pod_status(
    pod: &Pod,
    previous: Option<&PodStatus>,
    obs: &PodObservation,
    host_ip: &str,
    now: Timestamp,
) -> PodStatus {
    status_of(pod, previous, obs, host_ip, now, false)
}

/// [`pod_status`] of a pod the kubelet has terminated (deleted): its
/// phase terminal once its containers have stopped (upstream's
/// `podIsTerminal`).
pub fn final_pod_status(
    pod: &Pod,
    previous: Option<&PodStatus>,
    obs: &PodObservation,
    host_ip: &str,
    now: Timestamp,
) -> PodStatus {
    status_of(pod, previous, obs, host_ip, now, true)
}

fn status_of(
    pod: &Pod,
    previous: Option<&PodStatus>,
    obs: &PodObservation,
    host_ip: &str,
    now: Timestamp,
    terminal: bool,
) -> PodStatus {
    let initialized_before = previous
        .or(pod.status.as_ref())
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Initialized"))
        .is_some_and(|c| c.status == "True");
    let phase = phase_of(pod, obs, initialized_before, terminal);
    let completed = is_terminal(Some(phase));
    let inits = init_pairs(pod, obs);
    // A sidecar is initialized once started, an init container once it
    // exited 0 (its `ready`).
    let uninit: Vec<String> = inits
        .iter()
        .filter(|(sidecar, c)| if *sidecar { !c.started } else { !c.ready })
        .map(|(_, c)| c.name.clone())
        .collect();
    let regular_started = obs.containers.iter().any(|c| c.started);
    let unready: Vec<String> = inits
        .iter()
        .filter(|(sidecar, c)| *sidecar && !c.ready)
        .map(|(_, c)| c.name.clone())
        .chain(names(&obs.containers, |c| !c.ready))
        .collect();
    let initialized = if completed && phase == "Succeeded" {
        condition(
            previous,
            "Initialized",
            true,
            Some("PodCompleted"),
            None,
            now,
        )
    } else if uninit.is_empty() || regular_started {
        condition(previous, "Initialized", true, None, None, now)
    } else {
        condition(
            previous,
            "Initialized",
            false,
            Some("ContainersNotInitialized"),
            Some(format!(
                "containers with incomplete status: [{}]",
                uninit.join(" ")
            )),
            now,
        )
    };
    let containers_ready = if completed {
        condition(
            previous,
            "ContainersReady",
            false,
            Some("PodCompleted"),
            None,
            now,
        )
    } else if unready.is_empty() && !obs.containers.is_empty() {
        condition(previous, "ContainersReady", true, None, None, now)
    } else {
        condition(
            previous,
            "ContainersReady",
            false,
            Some("ContainersNotReady"),
            Some(format!(
                "containers with unready status: [{}]",
                unready.join(" ")
            )),
            now,
        )
    };
    let gates = readiness_gates_unready(pod);
    let ready = if containers_ready.status != "True" || gates.is_empty() {
        let mut r = containers_ready.clone();
        r.type_ = "Ready".into();
        r.last_transition_time =
            condition(previous, "Ready", r.status == "True", None, None, now).last_transition_time;
        r
    } else {
        condition(
            previous,
            "Ready",
            false,
            Some("ReadinessGatesNotReady"),
            Some(gates.join(", ")),
            now,
        )
    };
    let conditions = vec![
        condition(
            previous,
            "PodReadyToStartContainers",
            obs.sandbox_ready,
            None,
            None,
            now,
        ),
        initialized,
        containers_ready,
        ready,
        // Bound to this node: scheduled, whoever bound it.
        condition(previous, "PodScheduled", true, None, None, now),
    ];
    let generation = pod.metadata.generation;
    let conditions = conditions
        .into_iter()
        .map(|mut c| {
            c.observed_generation = generation;
            c
        })
        .collect();
    let start_time = previous
        .and_then(|s| s.start_time.clone())
        .or_else(|| pod.status.as_ref().and_then(|s| s.start_time.clone()))
        .or(time(now));
    PodStatus {
        phase: Some(phase.into()),
        conditions: Some(conditions),
        host_ip: Some(host_ip.into()),
        host_ips: Some(vec![HostIP { ip: host_ip.into() }]),
        pod_ip: obs.pod_ips.first().cloned(),
        pod_ips: (!obs.pod_ips.is_empty()).then(|| {
            obs.pod_ips
                .iter()
                .map(|ip| PodIP { ip: ip.clone() })
                .collect()
        }),
        start_time,
        init_container_statuses: (!obs.init_containers.is_empty()).then(|| {
            obs.init_containers
                .iter()
                .map(|c| container_status_of(spec_of(pod, &c.name, true), c))
                .collect()
        }),
        container_statuses: Some(
            obs.containers
                .iter()
                .map(|c| container_status_of(spec_of(pod, &c.name, false), c))
                .collect(),
        ),
        ephemeral_container_statuses: (!obs.ephemeral_containers.is_empty()).then(|| {
            obs.ephemeral_containers
                .iter()
                .map(container_status)
                .collect()
        }),
        observed_generation: generation,
        ..Default::default()
    }
}

/// The spec of container `name` (an init container when `init`).
fn spec_of<'a>(pod: &'a Pod, name: &str, init: bool) -> Option<&'a Container> {
    let spec = pod.spec.as_ref()?;
    let list = match init {
        true => spec.init_containers.as_deref().unwrap_or_default(),
        false => &spec.containers,
    };
    list.iter().find(|c| c.name == name)
}

/// The conditions of an in-place resize (upstream's status manager):
/// `PodResizePending` while the kubelet cannot accept the new resources
/// (`reason` `Deferred` or `Infeasible`, and why), `PodResizeInProgress`
/// with reason `Error` while applying them failed. Both carry the pod's
/// generation; the status patch deletes them once gone.
pub fn add_resize_conditions(
    status: &mut PodStatus,
    pod: &Pod,
    previous: Option<&PodStatus>,
    pending: Option<(&str, &str)>,
    error: Option<&str>,
    now: Timestamp,
) {
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    let mut add = |type_: &str, reason: &str, message: &str| {
        let mut c = condition(
            previous,
            type_,
            true,
            Some(reason),
            Some(message.to_string()),
            now,
        );
        c.observed_generation = pod.metadata.generation;
        conditions.push(c);
    };
    if let Some((reason, message)) = pending {
        add(RESIZE_PENDING, reason, message);
    }
    if let Some(message) = error {
        add(RESIZE_IN_PROGRESS, "Error", message);
    }
}

/// Condition types of an in-place resize.
pub const RESIZE_PENDING: &str = "PodResizePending";
/// See [`RESIZE_PENDING`].
pub const RESIZE_IN_PROGRESS: &str = "PodResizeInProgress";

/// Why the kubelet itself ends a pod (the status reason it reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disruption {
    /// The eviction manager: `Failed`, reason `Evicted`.
    Evicted,
    /// The eviction manager, for a pod over its own local storage limits:
    /// the same without the `DisruptionTarget` condition (upstream's
    /// `localStorageEviction` gives none).
    EvictedOverLimit,
    /// Graceful node shutdown: reason `Terminated`, `Failed` unless the
    /// pod had succeeded.
    NodeShutdown,
}

/// The status of a pod the eviction or shutdown manager killed: what `obs`
/// shows (containers terminated), phase `Failed` (a succeeded pod stays
/// `Succeeded` at a node shutdown), reason `Evicted` or `Terminated`,
/// `message`, and the condition `DisruptionTarget=True` (reason
/// `TerminationByKubelet`, same message; none for
/// [`Disruption::EvictedOverLimit`]), as upstream's `evictPod` and node
/// shutdown manager.
pub fn evicted_status(
    pod: &Pod,
    previous: Option<&PodStatus>,
    obs: &PodObservation,
    host_ip: &str,
    why: Disruption,
    message: &str,
    now: Timestamp,
) -> PodStatus {
    let mut s = pod_status(pod, previous, obs, host_ip, now);
    let succeeded = s.phase.as_deref() == Some("Succeeded");
    if why != Disruption::NodeShutdown || !succeeded {
        s.phase = Some("Failed".into());
    }
    s.reason = Some(
        match why {
            Disruption::Evicted | Disruption::EvictedOverLimit => "Evicted",
            Disruption::NodeShutdown => "Terminated",
        }
        .into(),
    );
    s.message = Some(message.into());
    if why == Disruption::EvictedOverLimit {
        return s;
    }
    let mut target = condition(
        previous,
        "DisruptionTarget",
        true,
        Some("TerminationByKubelet"),
        Some(message.into()),
        now,
    );
    target.observed_generation = pod.metadata.generation;
    s.conditions.get_or_insert_with(Vec::new).push(target);
    s
}

/// The status of a pod the node refused (upstream's `rejectPod`): phase
/// `Failed`, the rejection's reason, "Pod was rejected: <message>".
pub fn rejected_status(pod: &Pod, r: &crate::runtime::Rejection) -> PodStatus {
    PodStatus {
        phase: Some("Failed".into()),
        reason: Some(r.reason.clone()),
        message: Some(format!("Pod was rejected: {}", r.message)),
        qos_class: pod.status.as_ref().and_then(|s| s.qos_class.clone()),
        ..Default::default()
    }
}

/// The strategic-merge PATCH body for a status: `metadata.uid` makes the
/// apiserver refuse it for a recreated pod of the same name, conditions
/// carry explicit `null` reason/message so stale ones are cleared
/// (conditions merge by type), and `podIPs` and `hostIPs` replace the
/// stored lists (merged by IP, a new sandbox's address would be added
/// beside the old one, which the API server refuses).
pub fn status_patch(uid: &str, status: &PodStatus) -> serde_json::Value {
    let mut s = serde_json::to_value(status).unwrap_or_default();
    for k in ["podIPs", "hostIPs"] {
        if let Some(list) = s.get_mut(k).and_then(|l| l.as_array_mut()) {
            list.insert(0, serde_json::json!({"$patch": "replace"}));
        }
    }
    if let Some(cs) = s.get_mut("conditions").and_then(|c| c.as_array_mut()) {
        for c in cs.iter_mut() {
            for k in ["reason", "message"] {
                if c.get(k).is_none() {
                    c[k] = serde_json::Value::Null;
                }
            }
        }
        // A resize condition no longer set is deleted (the list merges
        // by type).
        for t in [RESIZE_PENDING, RESIZE_IN_PROGRESS] {
            if !cs.iter().any(|c| c["type"] == t) {
                cs.push(serde_json::json!({"type": t, "$patch": "delete"}));
            }
        }
    }
    serde_json::json!({"metadata": {"uid": uid}, "status": s})
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(restart: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "uid": "u"},
            "spec": {"restartPolicy": restart, "containers": [{"name": "a"}, {"name": "b"}]},
        }))
        .unwrap()
    }

    fn c(name: &str, state: ContainerState) -> ContainerObservation {
        ContainerObservation {
            name: name.into(),
            image: "img".into(),
            image_id: "img@sha256:x".into(),
            container_id: "sim://1".into(),
            ready: matches!(state, ContainerState::Running { .. }),
            started: matches!(state, ContainerState::Running { .. }),
            state,
            restart_count: 0,
            last_state: None,
            resources: None,
        }
    }

    #[test]
    fn resize_status_resources_and_conditions() {
        use k8s_openapi::apimachinery::pkg::api::resource::Quantity as Q;
        let list = |l: &[(&str, &str)]| -> Option<BTreeMap<String, Q>> {
            Some(
                l.iter()
                    .map(|(k, v)| (k.to_string(), Q(v.to_string())))
                    .collect(),
            )
        };
        let spec = Container {
            name: "c".into(),
            resources: Some(ResourceRequirements {
                requests: list(&[("cpu", "100m"), ("memory", "64Mi")]),
                limits: list(&[("cpu", "5m")]),
                ..Default::default()
            }),
            ..Default::default()
        };
        // Not running: the allocated resources.
        let waiting = c("c", waiting());
        assert_eq!(
            status_resources(&spec, &waiting),
            spec.resources.clone().unwrap()
        );
        // Running: the runtime's cpu request; a cpu limit at or below 10m
        // stays as allocated; no memory limit is added where none is set.
        let mut run = c("c", running());
        run.resources = Some(crate::runtime::ResourcesSeen {
            cpu_request: Some(101),
            cpu_limit: Some(10),
            memory_limit: Some(1 << 30),
        });
        let r = status_resources(&spec, &run);
        assert_eq!(r.requests, list(&[("cpu", "101m"), ("memory", "64Mi")]));
        // Written as upstream's quantities write them.
        assert_eq!(r.limits, list(&[("cpu", "5m"), ("memory", "1Gi")]));
        run.resources = Some(crate::runtime::ResourcesSeen {
            cpu_request: Some(1000),
            cpu_limit: Some(2000),
            memory_limit: Some(1536),
        });
        let r = status_resources(&spec, &run);
        assert_eq!(r.requests, list(&[("cpu", "1"), ("memory", "64Mi")]));
        assert_eq!(r.limits, list(&[("cpu", "2"), ("memory", "1536")]));
        let st = container_status_of(Some(&spec), &run);
        assert_eq!(
            st.allocated_resources,
            list(&[("cpu", "100m"), ("memory", "64Mi")])
        );

        // Conditions: pending with its reason, and deleted from the API
        // once gone.
        let mut p = pod("Always");
        p.metadata.generation = Some(3);
        let mut status = PodStatus::default();
        let now = Timestamp::now();
        add_resize_conditions(
            &mut status,
            &p,
            None,
            Some(("Deferred", "no room")),
            None,
            now,
        );
        let cs = status.conditions.clone().unwrap();
        assert_eq!(cs.len(), 1);
        assert_eq!(
            (
                cs[0].type_.as_str(),
                cs[0].reason.as_deref(),
                cs[0].observed_generation
            ),
            ("PodResizePending", Some("Deferred"), Some(3))
        );
        let body = status_patch("u", &status);
        let types: Vec<_> = body["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["type"].as_str().unwrap().to_string(),
                    c.get("$patch").is_some(),
                )
            })
            .collect();
        assert_eq!(
            types,
            vec![
                ("PodResizePending".to_string(), false),
                ("PodResizeInProgress".to_string(), true)
            ]
        );
    }

    fn running() -> ContainerState {
        ContainerState::Running {
            started_at: Timestamp::from_second(1_700_000_000).unwrap(),
        }
    }

    fn exited(code: i32) -> ContainerState {
        let t = Timestamp::from_second(1_700_000_000).unwrap();
        ContainerState::Terminated {
            exit_code: code,
            reason: if code == 0 { "Completed" } else { "Error" }.into(),
            started_at: t,
            finished_at: t,
            message: String::new(),
        }
    }

    fn waiting() -> ContainerState {
        ContainerState::Waiting {
            reason: "ContainerCreating".into(),
            message: String::new(),
        }
    }

    fn obs(cs: Vec<ContainerObservation>) -> PodObservation {
        PodObservation {
            sandbox_ready: true,
            pod_ips: vec!["10.0.0.2".into()],
            containers: cs,
            ..Default::default()
        }
    }

    #[test]
    fn phases() {
        let cases = [
            ("Always", vec![waiting(), running()], "Pending"),
            ("Always", vec![running(), running()], "Running"),
            ("Always", vec![exited(0), exited(0)], "Running"),
            ("Never", vec![exited(0), running()], "Running"),
            ("Never", vec![exited(0), exited(0)], "Succeeded"),
            ("Never", vec![exited(0), exited(1)], "Failed"),
            ("OnFailure", vec![exited(0), exited(1)], "Running"),
            ("OnFailure", vec![exited(0), exited(0)], "Succeeded"),
        ];
        for (restart, states, want) in cases {
            let o = obs(states
                .into_iter()
                .enumerate()
                .map(|(i, s)| c(&i.to_string(), s))
                .collect());
            assert_eq!(phase(&pod(restart), &o, false), want, "{restart}");
        }
        let mut o = obs(vec![c("a", running())]);
        o.init_containers = vec![c("i", waiting())];
        assert_eq!(phase(&pod("Always"), &o, false), "Pending");
        o.init_containers = vec![c("i", exited(2))];
        assert_eq!(phase(&pod("Never"), &o, false), "Failed");
        // A container crash-looping (Waiting with a last termination) is
        // stopped, not waiting: the pod stays Running.
        let mut looping = c(
            "b",
            ContainerState::Waiting {
                reason: "CrashLoopBackOff".into(),
                message: String::new(),
            },
        );
        looping.last_state = Some(exited(1));
        let o = obs(vec![c("a", exited(1)), looping]);
        assert_eq!(phase(&pod("Always"), &o, true), "Running");
        assert_eq!(phase(&pod("Never"), &o, true), "Failed");
    }

    /// Container restart policies and rules in the phase, as upstream's
    /// `getPhase` with ContainerRestartRules: a stopped container started
    /// again keeps the pod Running, whatever the pod's policy.
    #[test]
    fn phases_with_container_restart_policies() {
        let p = |pod_policy: &str, a: serde_json::Value| -> Pod {
            serde_json::from_value(json!({
                "metadata": {"name": "p", "uid": "u"},
                "spec": {"restartPolicy": pod_policy,
                         "initContainers": [{"name": "i", "restartPolicy": "OnFailure"}],
                         "containers": [a, {"name": "b"}]},
            }))
            .unwrap()
        };
        let rule = json!({"name": "a", "restartPolicy": "Never",
            "restartPolicyRules": [{"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}]});
        let always = json!({"name": "a", "restartPolicy": "Always"});
        let never = json!({"name": "a", "restartPolicy": "Never"});
        let cases = [
            // A Never pod whose container's rule restarts it on 42.
            (p("Never", rule.clone()), exited(42), exited(0), "Running"),
            (p("Never", rule.clone()), exited(1), exited(0), "Failed"),
            (p("Never", rule), exited(0), exited(0), "Succeeded"),
            // A Never pod with an Always container.
            (p("Never", always.clone()), exited(0), exited(0), "Running"),
            // An Always pod whose containers stop for good.
            (p("Always", never.clone()), exited(1), exited(0), "Running"),
            (p("OnFailure", never), exited(1), exited(0), "Failed"),
        ];
        for (pod, a, b, want) in cases {
            let o = obs(vec![c("a", a), c("b", b)]);
            assert_eq!(phase(&pod, &o, true), want, "{:?}", o.containers);
        }
        // Terminated by the kubelet (deleted): terminal by the exit codes,
        // whatever would restart the containers; a static pod is not.
        let always_pod = pod("Always");
        let o = obs(vec![c("0", exited(0)), c("1", exited(137))]);
        assert_eq!(phase_of(&always_pod, &o, true, false), "Running");
        assert_eq!(phase_of(&always_pod, &o, true, true), "Failed");
        let o = obs(vec![c("0", exited(0)), c("1", exited(0))]);
        assert_eq!(phase_of(&always_pod, &o, true, true), "Succeeded");
        let o = obs(vec![c("0", running()), c("1", exited(0))]);
        assert_eq!(phase_of(&always_pod, &o, true, true), "Running");
        let mut static_pod = pod("Always");
        static_pod.metadata.annotations = Some(
            [(
                "kubernetes.io/config.source".to_string(),
                "file".to_string(),
            )]
            .into(),
        );
        let o = obs(vec![c("0", exited(1))]);
        assert!(crate::pod::is_static(&static_pod));
        assert_eq!(phase_of(&static_pod, &o, true, true), "Running");
        // An init container failing under its own OnFailure policy is
        // retried in a Never pod: not Failed.
        let mut o = obs(vec![c("a", waiting())]);
        o.init_containers = vec![c("i", exited(1))];
        assert_eq!(phase(&p("Never", always), &o, false), "Pending");
    }

    fn with_sidecar(restart: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "uid": "u"},
            "spec": {
                "restartPolicy": restart,
                "initContainers": [{"name": "side", "restartPolicy": "Always"}, {"name": "init"}],
                "containers": [{"name": "a"}],
            },
        }))
        .unwrap()
    }

    #[test]
    fn sidecars_count_for_initialization_and_readiness_but_not_for_the_phase() {
        let t = Timestamp::from_second(1_700_000_300).unwrap();
        let p = with_sidecar("Never");
        // The sidecar runs but has not started (startup probe): Pending,
        // not initialized.
        let mut side = c("side", running());
        side.started = false;
        side.ready = false;
        let mut o = obs(vec![c("a", waiting())]);
        o.init_containers = vec![side.clone(), c("init", waiting())];
        assert_eq!(phase(&p, &o, false), "Pending");
        let st = pod_status(&p, None, &o, "10.0.0.1", t);
        let cond = |s: &PodStatus, t: &str| {
            s.conditions
                .as_ref()
                .unwrap()
                .iter()
                .find(|c| c.type_ == t)
                .cloned()
                .unwrap()
        };
        assert_eq!(
            cond(&st, "Initialized").message.as_deref(),
            Some("containers with incomplete status: [side init]")
        );
        // Started, the init container done, the app running: Running,
        // initialized; the unready sidecar keeps the pod unready.
        side.started = true;
        let mut init = c("init", exited(0));
        init.ready = true;
        o.init_containers = vec![side.clone(), init.clone()];
        o.containers = vec![c("a", running())];
        assert_eq!(phase(&p, &o, false), "Running");
        let st = pod_status(&p, None, &o, "10.0.0.1", t);
        assert_eq!(cond(&st, "Initialized").status, "True");
        assert_eq!(
            cond(&st, "ContainersReady").message.as_deref(),
            Some("containers with unready status: [side]")
        );
        assert_eq!(cond(&st, "Ready").status, "False");
        // The app exits 0 while the sidecar still runs: still Running, as
        // upstream's getPhase (the runtime then stops the sidecar)...
        side.ready = true;
        o.init_containers = vec![side, init.clone()];
        o.containers = vec![c("a", exited(0))];
        assert_eq!(phase(&p, &o, true), "Running");
        // ... and once it has stopped (whatever its exit code), Succeeded:
        // a sidecar never counts toward Succeeded/Failed.
        o.init_containers = vec![c("side", exited(137)), init];
        assert_eq!(phase(&p, &o, true), "Succeeded");
    }

    #[test]
    fn readiness_gates_hold_ready_back_with_upstreams_messages() {
        let t = Timestamp::from_second(1_700_000_400).unwrap();
        let mut p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "uid": "u"},
            "spec": {
                "containers": [{"name": "a"}],
                "readinessGates": [{"conditionType": "example.com/one"}, {"conditionType": "example.com/two"}],
            },
            "status": {"conditions": [{"type": "example.com/two", "status": "False"}]},
        }))
        .unwrap();
        let o = obs(vec![c("a", running())]);
        let st = pod_status(&p, None, &o, "10.0.0.1", t);
        let ready = |s: &PodStatus| {
            s.conditions
                .as_ref()
                .unwrap()
                .iter()
                .find(|c| c.type_ == "Ready")
                .cloned()
                .unwrap()
        };
        let r = ready(&st);
        assert_eq!(r.status, "False");
        assert_eq!(r.reason.as_deref(), Some("ReadinessGatesNotReady"));
        assert_eq!(
            r.message.as_deref(),
            Some("corresponding condition of pod readiness gate \"example.com/one\" does not exist., the status of pod readiness gate \"example.com/two\" is not \"True\", but False")
        );
        p.status = serde_json::from_value(json!({"conditions": [
            {"type": "example.com/one", "status": "True"},
            {"type": "example.com/two", "status": "True"},
        ]}))
        .unwrap();
        assert_eq!(
            ready(&pod_status(&p, None, &o, "10.0.0.1", t)).status,
            "True"
        );
    }

    #[test]
    fn last_state_and_termination_messages_are_reported() {
        let mut a = c("a", running());
        a.last_state = Some(ContainerState::Terminated {
            exit_code: 1,
            reason: "Error".into(),
            started_at: Timestamp::from_second(1_700_000_000).unwrap(),
            finished_at: Timestamp::from_second(1_700_000_001).unwrap(),
            message: "boom".into(),
        });
        let s = container_status(&a);
        let last = s.last_state.unwrap().terminated.unwrap();
        assert_eq!(last.exit_code, 1);
        assert_eq!(last.message.as_deref(), Some("boom"));
        assert_eq!(s.started, Some(true));
    }

    #[test]
    fn status_fields_and_conditions() {
        let t0 = Timestamp::from_second(1_700_000_100).unwrap();
        let t1 = Timestamp::from_second(1_700_000_200).unwrap();
        let p = pod("Always");
        let s0 = pod_status(
            &p,
            None,
            &obs(vec![c("a", running()), c("b", waiting())]),
            "172.16.0.1",
            t0,
        );
        assert_eq!(s0.phase.as_deref(), Some("Pending"));
        assert_eq!(s0.pod_ip.as_deref(), Some("10.0.0.2"));
        assert_eq!(s0.host_ips.as_ref().unwrap()[0].ip, "172.16.0.1");
        assert_eq!(s0.start_time, Some(Time(t0)));
        let cond = |s: &PodStatus, t: &str| {
            s.conditions
                .as_ref()
                .unwrap()
                .iter()
                .find(|c| c.type_ == t)
                .unwrap()
                .clone()
        };
        assert_eq!(cond(&s0, "Ready").status, "False");
        assert_eq!(
            cond(&s0, "Ready").message.as_deref(),
            Some("containers with unready status: [b]")
        );
        assert_eq!(cond(&s0, "PodReadyToStartContainers").status, "True");
        assert_eq!(cond(&s0, "Initialized").status, "True");
        assert_eq!(cond(&s0, "PodScheduled").status, "True");
        let cs = &s0.container_statuses.as_ref().unwrap()[0];
        assert_eq!(cs.container_id.as_deref(), Some("sim://1"));
        assert_eq!(cs.started, Some(true));
        assert!(cs.state.as_ref().unwrap().running.is_some());

        let s1 = pod_status(
            &p,
            Some(&s0),
            &obs(vec![c("a", running()), c("b", running())]),
            "172.16.0.1",
            t1,
        );
        assert_eq!(s1.phase.as_deref(), Some("Running"));
        assert_eq!(cond(&s1, "Ready").status, "True");
        assert_eq!(cond(&s1, "Ready").last_transition_time, Some(Time(t1)));
        assert_eq!(
            cond(&s1, "Initialized").last_transition_time,
            Some(Time(t0))
        );
        assert_eq!(s1.start_time, Some(Time(t0)));

        let s2 = pod_status(
            &pod("Never"),
            Some(&s1),
            &obs(vec![c("a", exited(0)), c("b", exited(0))]),
            "172.16.0.1",
            t1,
        );
        assert_eq!(s2.phase.as_deref(), Some("Succeeded"));
        assert_eq!(cond(&s2, "Ready").reason.as_deref(), Some("PodCompleted"));
        let t = s2.container_statuses.as_ref().unwrap()[0]
            .state
            .clone()
            .unwrap()
            .terminated
            .unwrap();
        assert_eq!((t.exit_code, t.reason.as_deref()), (0, Some("Completed")));
    }

    #[test]
    fn patch_body() {
        let s = pod_status(
            &pod("Always"),
            None,
            &obs(vec![c("a", running()), c("b", running())]),
            "1.2.3.4",
            Timestamp::now(),
        );
        let p = status_patch("u", &s);
        assert_eq!(p["metadata"]["uid"], "u");
        // The address lists replace what is stored.
        assert_eq!(
            p["status"]["podIPs"],
            json!([{"$patch": "replace"}, {"ip": "10.0.0.2"}])
        );
        assert_eq!(p["status"]["hostIPs"][0], json!({"$patch": "replace"}));
        assert_eq!(p["status"]["phase"], "Running");
        let ready = p["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap();
        assert!(ready.get("reason").unwrap().is_null());
        assert!(ready.get("message").unwrap().is_null());
    }

    #[test]
    fn evicted() {
        let msg = "The node was low on resource: memory. ";
        let s = evicted_status(
            &pod("Always"),
            None,
            &obs(vec![c("a", exited(137)), c("b", exited(137))]),
            "1.2.3.4",
            Disruption::Evicted,
            msg,
            Timestamp::now(),
        );
        assert_eq!(s.phase.as_deref(), Some("Failed"));
        assert_eq!(s.reason.as_deref(), Some("Evicted"));
        assert_eq!(s.message.as_deref(), Some(msg));
        let d = s
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == "DisruptionTarget")
            .unwrap();
        assert_eq!(d.status, "True");
        assert_eq!(d.reason.as_deref(), Some("TerminationByKubelet"));
        assert_eq!(d.message.as_deref(), Some(msg));
        assert!(is_terminal(s.phase.as_deref()));
        // Over its own local storage limit: no DisruptionTarget.
        let msg = "Usage of EmptyDir volume \"data\" exceeds the limit \"1Mi\". ";
        let s = evicted_status(
            &pod("Always"),
            None,
            &obs(vec![c("a", exited(137)), c("b", exited(137))]),
            "1.2.3.4",
            Disruption::EvictedOverLimit,
            msg,
            Timestamp::now(),
        );
        assert_eq!(s.phase.as_deref(), Some("Failed"));
        assert_eq!(s.reason.as_deref(), Some("Evicted"));
        assert_eq!(s.message.as_deref(), Some(msg));
        assert!(
            !s.conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "DisruptionTarget"),
            "{s:?}"
        );
    }

    #[test]
    fn terminated_by_node_shutdown() {
        let msg = "Pod was terminated in response to imminent node shutdown.";
        let killed = evicted_status(
            &pod("Always"),
            None,
            &obs(vec![c("a", exited(137)), c("b", exited(137))]),
            "1.2.3.4",
            Disruption::NodeShutdown,
            msg,
            Timestamp::now(),
        );
        assert_eq!(killed.phase.as_deref(), Some("Failed"));
        assert_eq!(killed.reason.as_deref(), Some("Terminated"));
        assert_eq!(killed.message.as_deref(), Some(msg));
        let d = killed.conditions.as_ref().unwrap();
        assert!(d.iter().any(|c| c.type_ == "DisruptionTarget"
            && c.reason.as_deref() == Some("TerminationByKubelet")));
        // A pod that had already succeeded stays Succeeded (upstream keeps
        // PodSucceeded); eviction makes it Failed.
        let done = obs(vec![c("a", exited(0)), c("b", exited(0))]);
        let s = evicted_status(
            &pod("Never"),
            None,
            &done,
            "1.2.3.4",
            Disruption::NodeShutdown,
            msg,
            Timestamp::now(),
        );
        assert_eq!(s.phase.as_deref(), Some("Succeeded"));
        assert_eq!(s.reason.as_deref(), Some("Terminated"));
        let e = evicted_status(
            &pod("Never"),
            None,
            &done,
            "1.2.3.4",
            Disruption::Evicted,
            msg,
            Timestamp::now(),
        );
        assert_eq!(e.phase.as_deref(), Some("Failed"));
    }
}
