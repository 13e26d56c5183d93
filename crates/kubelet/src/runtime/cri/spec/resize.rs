//! In-place pod resize on the runtime side (upstream's
//! `computePodResizeAction` and `toKubeContainerResources`): what a running
//! container was last given (its *actuated* resources, recorded in
//! `actuated_pods_state` at creation and after each
//! `UpdateContainerResources`), whether the allocated resources differ and
//! how to apply them (update in place, or restart when the container's
//! `resizePolicy` asks), and what the runtime reports back.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use rkube_cri::v1;
use rkube_model::quantity::Quantity;

use crate::allocation::Requirements;
use crate::runtime::ResourcesSeen;

/// The cpu and memory a container asks for (upstream's
/// `containerResources`): millicores and bytes, 0 when unset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Actuated {
    /// `requests.cpu`, millicores.
    pub cpu_request: i64,
    /// `limits.cpu`, millicores.
    pub cpu_limit: i64,
    /// `requests.memory`, bytes.
    pub memory_request: i64,
    /// `limits.memory`, bytes.
    pub memory_limit: i64,
}

fn of_lists(
    requests: Option<&BTreeMap<String, Quantity>>,
    limits: &BTreeMap<String, Quantity>,
) -> Actuated {
    let req = |k: &str| requests.and_then(|m| m.get(k));
    Actuated {
        cpu_request: req("cpu").map_or(0, Quantity::milli_value),
        cpu_limit: limits.get("cpu").map_or(0, Quantity::milli_value),
        memory_request: req("memory").map_or(0, Quantity::value),
        memory_limit: limits.get("memory").map_or(0, Quantity::value),
    }
}

fn parsed(m: Option<&BTreeMap<String, String>>) -> BTreeMap<String, Quantity> {
    m.into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), Quantity::parse(v).ok()?)))
        .collect()
}

/// upstream's `GetLimits`: the container's limits, with the pod-level cpu
/// and memory limits where the container sets none.
fn limits_with_pod(pod: Option<&Requirements>, c: &Requirements) -> BTreeMap<String, Quantity> {
    let mut limits = parsed(Some(&c.limits));
    let pod = parsed(pod.map(|p| &p.limits));
    for k in ["cpu", "memory"] {
        let unset = limits.get(k).is_none_or(Quantity::is_zero);
        if let Some(q) = pod.get(k).filter(|q| unset && !q.is_zero()) {
            limits.insert(k.to_string(), *q);
        }
    }
    limits
}

impl Actuated {
    /// What `c`'s spec asks for, without pod-level resources.
    pub fn of(c: &Container) -> Actuated {
        let r = c.resources.as_ref();
        let limits = r
            .and_then(|r| r.limits.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.clone(), Quantity::parse(&v.0).ok()?)))
            .collect();
        let requests = r.and_then(|r| r.requests.as_ref()).map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), Quantity::parse(&v.0).ok()?)))
                .collect()
        });
        of_lists(requests.as_ref(), &limits)
    }

    /// upstream's `containerResourcesFromRequirements`: a container's
    /// resources with the pod-level limits where it sets none.
    pub fn with_pod(pod: Option<&Requirements>, c: &Requirements) -> Actuated {
        of_lists(Some(&parsed(Some(&c.requests))), &limits_with_pod(pod, c))
    }

    /// What `c` of `pod` is to run with (the pod as allocated).
    pub fn desired(pod: &Pod, c: &Container) -> Actuated {
        let p = pod_level(pod);
        Actuated::with_pod(p.as_ref(), &Requirements::of(c.resources.as_ref()))
    }
}

fn pod_level(pod: &Pod) -> Option<Requirements> {
    pod.spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .map(|r| Requirements::of(Some(r)))
}

/// What upstream records as actuated for `c` of `pod` when it creates or
/// resizes it (`setActuatedContainerResources`): the container's
/// resources, its cpu and memory limits taken from the pod-level ones
/// where it sets none.
pub fn record(pod: &Pod, c: &Container) -> Requirements {
    let mut r = Requirements::of(c.resources.as_ref());
    let Some(pod_limits) = pod_level(pod).map(|p| p.limits) else {
        return r;
    };
    let zero = |v: Option<&String>| v.is_none_or(|v| Quantity::parse(v).is_ok_and(|q| q.is_zero()));
    for k in ["cpu", "memory"] {
        if zero(r.limits.get(k)) && !zero(pod_limits.get(k)) {
            r.limits.insert(k.to_string(), pod_limits[k].clone());
        }
    }
    r
}

/// What a running container needs for its allocated resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Resize {
    /// Nothing: it has them.
    #[default]
    None,
    /// `UpdateContainerResources`.
    Update,
    /// Restart it (its `resizePolicy` says `RestartContainer` for a
    /// changed resource).
    Restart,
}

/// upstream's `determineContainerResize` over cpu and memory, requests and
/// limits: a changed resource resizes, and restarts the container when
/// its policy for that resource is `RestartContainer` (default
/// `NotRequired`).
pub fn decide(c: &Container, desired: Actuated, current: Actuated) -> Resize {
    if desired == current {
        return Resize::None;
    }
    let restarts = |resource: &str| {
        c.resize_policy
            .iter()
            .flatten()
            .find(|p| p.resource_name == resource)
            .is_some_and(|p| p.restart_policy == "RestartContainer")
    };
    let cpu = desired.cpu_request != current.cpu_request || desired.cpu_limit != current.cpu_limit;
    let memory = desired.memory_request != current.memory_request
        || desired.memory_limit != current.memory_limit;
    if (cpu && restarts("cpu")) || (memory && restarts("memory")) {
        Resize::Restart
    } else {
        Resize::Update
    }
}

/// What the runtime reports a container runs with (upstream's
/// `toKubeContainerResources`): the cpu limit from the CFS quota, the cpu
/// request from the shares, the memory limit.
pub fn seen(l: &v1::LinuxContainerResources) -> Option<ResourcesSeen> {
    const MIN_SHARES: i64 = 2;
    let cpu_limit = (l.cpu_period > 0 && l.cpu_quota != -1)
        .then(|| l.cpu_quota * 1000 / l.cpu_period)
        .filter(|m| *m > 0);
    let cpu_request = (l.cpu_shares >= MIN_SHARES)
        .then(|| (l.cpu_shares * 1000 + 1023) / 1024)
        .filter(|m| *m > 0);
    let memory_limit = (l.memory_limit_in_bytes > 0).then_some(l.memory_limit_in_bytes);
    (cpu_limit.is_some() || cpu_request.is_some() || memory_limit.is_some()).then_some(
        ResourcesSeen {
            cpu_request,
            cpu_limit,
            memory_limit,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::api::core::v1::{ContainerResizePolicy, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity as Q;

    fn container(req: &[(&str, &str)], lim: &[(&str, &str)], policy: &[(&str, &str)]) -> Container {
        let list = |l: &[(&str, &str)]| {
            (!l.is_empty()).then(|| {
                l.iter()
                    .map(|(k, v)| (k.to_string(), Q(v.to_string())))
                    .collect()
            })
        };
        Container {
            name: "c".into(),
            resources: Some(ResourceRequirements {
                requests: list(req),
                limits: list(lim),
                ..Default::default()
            }),
            resize_policy: (!policy.is_empty()).then(|| {
                policy
                    .iter()
                    .map(|(r, p)| ContainerResizePolicy {
                        resource_name: r.to_string(),
                        restart_policy: p.to_string(),
                    })
                    .collect()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn actuated_resources_with_pod_level_limits_as_upstream() {
        let c = container(&[("cpu", "100m"), ("memory", "64Mi")], &[("cpu", "1")], &[]);
        let a = Actuated::of(&c);
        assert_eq!(
            a,
            Actuated {
                cpu_request: 100,
                cpu_limit: 1000,
                memory_request: 64 << 20,
                memory_limit: 0
            }
        );
        let mut pod = Pod {
            spec: Some(k8s_openapi::api::core::v1::PodSpec {
                containers: vec![c.clone()],
                ..Default::default()
            }),
            ..Default::default()
        };
        // No pod-level resources: the container's own.
        assert_eq!(Actuated::desired(&pod, &c), a);
        assert_eq!(record(&pod, &c), Requirements::of(c.resources.as_ref()));
        // Pod-level limits fill the memory limit the container lacks, not
        // the cpu limit it sets.
        pod.spec.as_mut().unwrap().resources = Some(ResourceRequirements {
            limits: Some(
                [
                    ("cpu".to_string(), Q("2".into())),
                    ("memory".to_string(), Q("1Gi".into())),
                ]
                .into(),
            ),
            ..Default::default()
        });
        let d = Actuated::desired(&pod, &c);
        assert_eq!((d.cpu_limit, d.memory_limit), (1000, 1 << 30));
        let r = record(&pod, &c);
        assert_eq!(r.limits["memory"], "1Gi");
        assert_eq!(r.limits["cpu"], "1");
        // What is recorded reads back as what was desired.
        let p = Requirements::of(pod.spec.as_ref().unwrap().resources.as_ref());
        assert_eq!(Actuated::with_pod(Some(&p), &r), d);
        assert_eq!(Actuated::with_pod(None, &r), d);
        // Nothing recorded: zeros, as upstream proceeds.
        assert_eq!(
            Actuated::with_pod(None, &Requirements::default()),
            Actuated::default()
        );
    }

    #[test]
    fn resize_policy_decides_update_or_restart() {
        let old = Actuated::of(&container(&[("cpu", "100m"), ("memory", "64Mi")], &[], &[]));
        let c = container(
            &[("cpu", "200m"), ("memory", "64Mi")],
            &[],
            &[("memory", "RestartContainer")],
        );
        assert_eq!(decide(&c, Actuated::of(&c), old), Resize::Update);
        let c = container(
            &[("cpu", "100m"), ("memory", "32Mi")],
            &[],
            &[("memory", "RestartContainer")],
        );
        assert_eq!(decide(&c, Actuated::of(&c), old), Resize::Restart);
        let c = container(
            &[("cpu", "200m"), ("memory", "64Mi")],
            &[],
            &[("cpu", "RestartContainer")],
        );
        assert_eq!(decide(&c, Actuated::of(&c), old), Resize::Restart);
        assert_eq!(decide(&c, old, old), Resize::None);
    }

    #[test]
    fn reported_resources_as_upstream_reads_them() {
        // 100m: 102 shares → ceil(102000 / 1024) = 100m; 10m of quota.
        let l = v1::LinuxContainerResources {
            cpu_shares: 102,
            cpu_quota: 1000,
            cpu_period: 100_000,
            memory_limit_in_bytes: 200 << 20,
            ..Default::default()
        };
        assert_eq!(
            seen(&l),
            Some(ResourcesSeen {
                cpu_request: Some(100),
                cpu_limit: Some(10),
                memory_limit: Some(200 << 20)
            })
        );
        let unlimited = v1::LinuxContainerResources {
            cpu_shares: 2,
            cpu_quota: -1,
            cpu_period: 100_000,
            ..Default::default()
        };
        assert_eq!(
            seen(&unlimited),
            Some(ResourcesSeen {
                cpu_request: Some(2),
                cpu_limit: None,
                memory_limit: None
            })
        );
        assert_eq!(seen(&v1::LinuxContainerResources::default()), None);
    }
}
