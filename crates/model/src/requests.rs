//! Effective pod requests, computed as upstream's `resourcehelper.PodRequests`:
//! max(each init container, counting restartable sidecars that started before
//! it) against sum(app containers + sidecars), pod-level requests for cpu,
//! memory and hugepages overriding, plus overhead. The scoring ("non-zero")
//! variant substitutes 100m CPU / 200Mi memory only for a container that does
//! not set the request at all — an explicit zero stays zero.

use crate::objects::{Container, Pod};
use crate::quantity::Quantity;
use crate::resources::{
    add_resource_list, max_resource_list, names, ResourceList, Resources, DEFAULT_MEMORY_REQUEST,
    DEFAULT_MILLI_CPU_REQUEST,
};

fn is_pod_level_resource(name: &str) -> bool {
    name == names::CPU || name == names::MEMORY || name.starts_with("hugepages-")
}

fn container_requests(c: &Container, non_missing: &ResourceList) -> ResourceList {
    let mut r = c.requests.clone();
    for (k, v) in non_missing {
        r.entry(k.clone()).or_insert(*v);
    }
    r
}

/// Upstream's aggregation of container resources with sidecars (the rule
/// of `resourcehelper.PodRequests` and `PodLimits`, the one place rkube
/// computes it: the scheduler's model, the kubelet's cgroups and QoS, and
/// the eviction ranking all call it): the sum of the containers and the
/// restartable init containers (sidecars), against the largest of each
/// init container plus the sidecars started before it. `init` yields each
/// init container with whether it is restartable; `of` reads one
/// container's resources.
pub fn aggregate_containers<'a, C: 'a>(
    containers: impl IntoIterator<Item = &'a C>,
    init: impl IntoIterator<Item = (&'a C, bool)>,
    of: impl Fn(&C) -> ResourceList,
) -> ResourceList {
    let mut result = ResourceList::new();
    for c in containers {
        add_resource_list(&mut result, &of(c));
    }
    let mut sidecars = ResourceList::new();
    let mut init_max = ResourceList::new();
    for (c, restartable) in init {
        let reqs = of(c);
        let effective = if restartable {
            add_resource_list(&mut result, &reqs);
            add_resource_list(&mut sidecars, &reqs);
            sidecars.clone()
        } else {
            let mut combined = reqs;
            add_resource_list(&mut combined, &sidecars);
            combined
        };
        max_resource_list(&mut init_max, &effective);
    }
    max_resource_list(&mut result, &init_max);
    result
}

fn aggregate(pod: &Pod, non_missing: &ResourceList) -> ResourceList {
    aggregate_containers(
        &pod.containers,
        pod.init_containers.iter().map(|c| (c, c.restartable)),
        |c| container_requests(c, non_missing),
    )
}

fn pod_requests(pod: &Pod, non_missing: &ResourceList) -> ResourceList {
    let mut reqs = aggregate(pod, non_missing);
    for (k, v) in &pod.pod_requests {
        if is_pod_level_resource(k) {
            reqs.insert(k.clone(), *v);
        }
    }
    add_resource_list(&mut reqs, &pod.overhead);
    reqs
}

/// Requests as NodeResources scoring computes them: with `defaults`, every
/// container missing a cpu/memory request counts 100m/200Mi (pod-level
/// requests still override), as upstream's `calculatePodResourceRequest`.
pub fn scoring_requests(pod: &Pod, defaults: bool) -> Resources {
    let mut non_missing = ResourceList::new();
    if defaults {
        non_missing.insert(
            names::CPU.into(),
            Quantity::from_milli(DEFAULT_MILLI_CPU_REQUEST),
        );
        non_missing.insert(
            names::MEMORY.into(),
            Quantity::from_units(DEFAULT_MEMORY_REQUEST),
        );
    }
    Resources::from_list(&pod_requests(pod, &non_missing))
}

/// Computes `requests`, `non_zero_milli_cpu` and `non_zero_memory` of a pod.
pub fn compute(pod: &mut Pod) {
    let empty = ResourceList::new();
    let requests = pod_requests(pod, &empty);
    let pod_level_set = pod.pod_requests.keys().any(|k| is_pod_level_resource(k));
    let mut non_missing = ResourceList::new();
    if !pod_level_set || !requests.contains_key(names::CPU) {
        non_missing.insert(
            names::CPU.into(),
            Quantity::from_milli(DEFAULT_MILLI_CPU_REQUEST),
        );
    }
    if !pod_level_set || !requests.contains_key(names::MEMORY) {
        non_missing.insert(
            names::MEMORY.into(),
            Quantity::from_units(DEFAULT_MEMORY_REQUEST),
        );
    }
    let non_zero = if non_missing.is_empty() {
        requests.clone()
    } else {
        pod_requests(pod, &non_missing)
    };
    pod.requests = Resources::from_list(&requests);
    pod.non_zero_milli_cpu = non_zero.get(names::CPU).map_or(0, |q| q.milli_value());
    pod.non_zero_memory = non_zero.get(names::MEMORY).map_or(0, |q| q.value());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rl(pairs: &[(&str, &str)]) -> ResourceList {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), Quantity::parse(v).unwrap()))
            .collect()
    }

    fn container(reqs: &[(&str, &str)], restartable: bool) -> Container {
        Container {
            requests: rl(reqs),
            restartable,
            ..Default::default()
        }
    }

    #[test]
    fn sum_of_containers_vs_max_of_init() {
        let mut pod = Pod {
            containers: vec![
                container(&[("cpu", "1"), ("memory", "1Gi")], false),
                container(&[("cpu", "500m")], false),
            ],
            init_containers: vec![container(&[("cpu", "2"), ("memory", "512Mi")], false)],
            ..Default::default()
        };
        compute(&mut pod);
        assert_eq!(pod.requests.milli_cpu, 2000);
        assert_eq!(pod.requests.memory, 1 << 30);
        // Second container has no memory request: non-zero default applies to it.
        assert_eq!(pod.non_zero_memory, (1 << 30) + DEFAULT_MEMORY_REQUEST);
        assert_eq!(pod.non_zero_milli_cpu, 2000);
    }

    #[test]
    fn sidecars_count_towards_both() {
        // Upstream helpers_test: sidecar 1 cpu, then init 2 cpu, app 1 cpu.
        let mut pod = Pod {
            containers: vec![container(&[("cpu", "1")], false)],
            init_containers: vec![
                container(&[("cpu", "1")], true),
                container(&[("cpu", "2")], false),
            ],
            ..Default::default()
        };
        compute(&mut pod);
        // max(app+sidecar = 2, init(2)+sidecar(1) = 3)
        assert_eq!(pod.requests.milli_cpu, 3000);
    }

    #[test]
    fn explicit_zero_is_not_defaulted() {
        let mut pod = Pod {
            containers: vec![container(&[("cpu", "0"), ("memory", "0")], false)],
            ..Default::default()
        };
        compute(&mut pod);
        assert_eq!(pod.non_zero_milli_cpu, 0);
        assert_eq!(pod.non_zero_memory, 0);
        let mut missing = Pod {
            containers: vec![container(&[], false)],
            ..Default::default()
        };
        compute(&mut missing);
        assert_eq!(missing.non_zero_milli_cpu, DEFAULT_MILLI_CPU_REQUEST);
        assert_eq!(missing.non_zero_memory, DEFAULT_MEMORY_REQUEST);
        assert_eq!(missing.requests.milli_cpu, 0);
    }

    #[test]
    fn overhead_and_pod_level() {
        let mut pod = Pod {
            containers: vec![container(&[("cpu", "1")], false)],
            overhead: rl(&[("cpu", "250m"), ("memory", "120Mi")]),
            pod_requests: rl(&[("cpu", "3")]),
            ..Default::default()
        };
        compute(&mut pod);
        assert_eq!(pod.requests.milli_cpu, 3250);
        assert_eq!(pod.requests.memory, 120 << 20);
        // Pod-level requests are set and memory is present (from overhead):
        // upstream adds no default.
        assert_eq!(pod.non_zero_memory, 120 << 20);
        assert_eq!(pod.non_zero_milli_cpu, 3250);
    }
}
