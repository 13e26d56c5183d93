//! Pod status from a runtime observation (pure): phase as upstream's
//! `getPhase`, the kubelet-owned conditions (PodReadyToStartContainers,
//! Initialized, ContainersReady, Ready, and PodScheduled=True as upstream's
//! `generateAPIPodStatus` adds it), container statuses, IPs, start time and
//! observedGeneration — and the status PATCH body.

use k8s_openapi::api::core::v1::{
    ContainerState as KState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::runtime::{ContainerObservation, ContainerState, PodObservation};

/// True for `Succeeded` and `Failed`.
pub fn is_terminal(phase: Option<&str>) -> bool {
    matches!(phase, Some("Succeeded") | Some("Failed"))
}

/// The pod phase for an observation (upstream's `getPhase`).
pub fn phase(pod: &Pod, obs: &PodObservation) -> &'static str {
    let restart = pod
        .spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always");
    let init_done = obs
        .init_containers
        .iter()
        .all(|c| matches!(c.state, ContainerState::Terminated { exit_code: 0, .. }));
    if !init_done {
        let init_failed = obs.init_containers.iter().any(
            |c| matches!(c.state, ContainerState::Terminated { exit_code, .. } if exit_code != 0),
        );
        return if init_failed && restart == "Never" {
            "Failed"
        } else {
            "Pending"
        };
    }
    let (mut running, mut waiting, mut succeeded, mut failed) = (0, 0, 0, 0);
    for c in &obs.containers {
        match c.state {
            ContainerState::Running { .. } => running += 1,
            ContainerState::Waiting { .. } => waiting += 1,
            ContainerState::Terminated { exit_code: 0, .. } => succeeded += 1,
            ContainerState::Terminated { .. } => failed += 1,
        }
    }
    if waiting > 0 || obs.containers.is_empty() {
        return "Pending";
    }
    if running > 0 {
        return "Running";
    }
    match restart {
        "Always" => "Running",
        "OnFailure" if failed > 0 => "Running",
        "OnFailure" => "Succeeded",
        _ if failed > 0 => "Failed",
        _ => {
            let _ = succeeded;
            "Succeeded"
        }
    }
}

fn time(t: Timestamp) -> Option<Time> {
    Some(Time(t))
}

fn container_status(c: &ContainerObservation) -> ContainerStatus {
    let state = match &c.state {
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
        } => KState {
            terminated: Some(ContainerStateTerminated {
                exit_code: *exit_code,
                reason: Some(reason.clone()),
                started_at: time(*started_at),
                finished_at: time(*finished_at),
                container_id: (!c.container_id.is_empty()).then(|| c.container_id.clone()),
                ..Default::default()
            }),
            ..Default::default()
        },
    };
    ContainerStatus {
        name: c.name.clone(),
        image: c.image.clone(),
        image_id: c.image_id.clone(),
        container_id: (!c.container_id.is_empty()).then(|| c.container_id.clone()),
        ready: c.ready,
        started: Some(matches!(c.state, ContainerState::Running { .. })),
        restart_count: c.restart_count,
        state: Some(state),
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

/// The status the kubelet reports for `pod` given `obs`. `previous` (the
/// last status computed, else the pod's) keeps transition and start times.
pub fn pod_status(
    pod: &Pod,
    previous: Option<&PodStatus>,
    obs: &PodObservation,
    host_ip: &str,
    now: Timestamp,
) -> PodStatus {
    let phase = phase(pod, obs);
    let completed = is_terminal(Some(phase));
    let uninit = names(&obs.init_containers, |c| {
        !matches!(c.state, ContainerState::Terminated { exit_code: 0, .. })
    });
    let unready = names(&obs.containers, |c| !c.ready);
    let initialized = if completed && phase == "Succeeded" {
        condition(
            previous,
            "Initialized",
            true,
            Some("PodCompleted"),
            None,
            now,
        )
    } else if uninit.is_empty() {
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
    let ready = |type_: &str| {
        if completed {
            condition(previous, type_, false, Some("PodCompleted"), None, now)
        } else if unready.is_empty() && !obs.containers.is_empty() {
            condition(previous, type_, true, None, None, now)
        } else {
            condition(
                previous,
                type_,
                false,
                Some("ContainersNotReady"),
                Some(format!(
                    "containers with unready status: [{}]",
                    unready.join(" ")
                )),
                now,
            )
        }
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
        ready("ContainersReady"),
        ready("Ready"),
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
        init_container_statuses: (!obs.init_containers.is_empty())
            .then(|| obs.init_containers.iter().map(container_status).collect()),
        container_statuses: Some(obs.containers.iter().map(container_status).collect()),
        observed_generation: generation,
        ..Default::default()
    }
}

/// The status of a pod the eviction manager killed: what `obs` shows
/// (containers terminated), phase `Failed`, reason `Evicted`, `message`,
/// and the condition `DisruptionTarget=True` (reason
/// `TerminationByKubelet`, same message), as upstream's `evictPod`.
pub fn evicted_status(
    pod: &Pod,
    previous: Option<&PodStatus>,
    obs: &PodObservation,
    host_ip: &str,
    message: &str,
    now: Timestamp,
) -> PodStatus {
    let mut s = pod_status(pod, previous, obs, host_ip, now);
    s.phase = Some("Failed".into());
    s.reason = Some("Evicted".into());
    s.message = Some(message.into());
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

/// The strategic-merge PATCH body for a status: `metadata.uid` makes the
/// apiserver refuse it for a recreated pod of the same name, and
/// conditions carry explicit `null` reason/message so stale ones are
/// cleared (conditions merge by type).
pub fn status_patch(uid: &str, status: &PodStatus) -> serde_json::Value {
    let mut s = serde_json::to_value(status).unwrap_or_default();
    if let Some(cs) = s.get_mut("conditions").and_then(|c| c.as_array_mut()) {
        for c in cs {
            for k in ["reason", "message"] {
                if c.get(k).is_none() {
                    c[k] = serde_json::Value::Null;
                }
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
            state,
            restart_count: 0,
        }
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
            assert_eq!(phase(&pod(restart), &o), want, "{restart}");
        }
        let mut o = obs(vec![c("a", running())]);
        o.init_containers = vec![c("i", waiting())];
        assert_eq!(phase(&pod("Always"), &o), "Pending");
        o.init_containers = vec![c("i", exited(2))];
        assert_eq!(phase(&pod("Never"), &o), "Failed");
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
    }
}
