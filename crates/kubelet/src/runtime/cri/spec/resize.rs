//! In-place pod resize on the runtime side (upstream's
//! `computePodResizeAction` and `toKubeContainerResources`): what a running
//! container was last given (its *actuated* resources, kept in a CRI
//! annotation at creation and by the runtime after each
//! `UpdateContainerResources`), whether the allocated resources differ and
//! how to apply them (update in place, or restart when the container's
//! `resizePolicy` asks), and what the runtime reports back.

use k8s_openapi::api::core::v1::Container;
use rkube_cri::v1;
use rkube_model::quantity::Quantity;

use crate::runtime::ResourcesSeen;

/// The annotation holding a container's resources at creation.
pub const ANNOTATION_RESOURCES: &str = "io.rkube.container.resources";

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

fn get(
    m: Option<
        &std::collections::BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        >,
    >,
    k: &str,
) -> Option<Quantity> {
    m.and_then(|m| m.get(k))
        .and_then(|q| Quantity::parse(&q.0).ok())
}

impl Actuated {
    /// What `c`'s spec asks for.
    pub fn of(c: &Container) -> Actuated {
        let r = c.resources.as_ref();
        let req = r.and_then(|r| r.requests.as_ref());
        let lim = r.and_then(|r| r.limits.as_ref());
        Actuated {
            cpu_request: get(req, "cpu").map_or(0, |q| q.milli_value()),
            cpu_limit: get(lim, "cpu").map_or(0, |q| q.milli_value()),
            memory_request: get(req, "memory").map_or(0, |q| q.value()),
            memory_limit: get(lim, "memory").map_or(0, |q| q.value()),
        }
    }

    /// The annotation's value.
    pub fn annotation(&self) -> String {
        format!(
            "{},{},{},{}",
            self.cpu_request, self.cpu_limit, self.memory_request, self.memory_limit
        )
    }

    /// Reads [`Actuated::annotation`]'s form back.
    pub fn parse(s: &str) -> Option<Actuated> {
        let v: Vec<i64> = s
            .split(',')
            .map(|x| x.parse().ok())
            .collect::<Option<_>>()?;
        match v[..] {
            [cpu_request, cpu_limit, memory_request, memory_limit] => Some(Actuated {
                cpu_request,
                cpu_limit,
                memory_request,
                memory_limit,
            }),
            _ => None,
        }
    }
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
    fn actuated_resources_round_trip_through_the_annotation() {
        let a = Actuated::of(&container(
            &[("cpu", "100m"), ("memory", "64Mi")],
            &[("cpu", "1")],
            &[],
        ));
        assert_eq!(
            a,
            Actuated {
                cpu_request: 100,
                cpu_limit: 1000,
                memory_request: 64 << 20,
                memory_limit: 0
            }
        );
        assert_eq!(Actuated::parse(&a.annotation()), Some(a));
        assert_eq!(Actuated::parse("1,2,3"), None);
        assert_eq!(Actuated::parse("1,x,3,4"), None);
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
