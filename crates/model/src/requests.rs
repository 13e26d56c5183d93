//! Effective pod requests, computed as upstream's `resourcehelper.PodRequests`:
//! max(each init container, counting restartable sidecars that started before
//! it) against sum(app containers + sidecars), pod-level requests for cpu,
//! memory and hugepages overriding, plus overhead. The scoring ("non-zero")
//! variant substitutes 100m CPU / 200Mi memory only for a container that does
//! not set the request at all — an explicit zero stays zero.

use crate::objects::{Container, Pod, StatusResources};
use crate::quantity::Quantity;
use crate::resources::{
    add_resource_list, max_resource_list, names, ResourceList, Resources, DEFAULT_MEMORY_REQUEST,
    DEFAULT_MILLI_CPU_REQUEST,
};

fn is_pod_level_resource(name: &str) -> bool {
    name == names::CPU || name == names::MEMORY || name.starts_with("hugepages-")
}

fn container_requests(list: &ResourceList, non_missing: &ResourceList) -> ResourceList {
    let mut r = list.clone();
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

/// Which of a container's lists [`aggregate`] reads (upstream's
/// `containerSpecRequests`, `containerAllocatedRequests`,
/// `containerActuatedRequests`).
#[derive(Clone, Copy)]
enum Source<'a> {
    Spec,
    Allocated(&'a StatusResources),
    Actuated(&'a StatusResources),
}

fn container_list<'a>(c: &'a Container, source: Source<'a>) -> Option<&'a ResourceList> {
    let (st, actuated) = match source {
        Source::Spec => return Some(&c.requests),
        Source::Allocated(st) => (st, false),
        Source::Actuated(st) => (st, true),
    };
    let cs = st.containers.iter().find(|s| s.name == c.name);
    if let Some(r) = cs.and_then(|s| s.actuated.as_ref()).filter(|_| actuated) {
        return Some(r);
    }
    if let Some(r) = cs.and_then(|s| s.allocated.as_ref()) {
        return Some(r);
    }
    // With the resize infeasible, a container the status says nothing of
    // counts nothing.
    (!st.resize_infeasible).then_some(&c.requests)
}

fn aggregate(pod: &Pod, non_missing: &ResourceList, source: Source<'_>) -> ResourceList {
    let empty = ResourceList::new();
    aggregate_containers(
        &pod.containers,
        pod.init_containers.iter().map(|c| (c, c.restartable)),
        |c| container_requests(container_list(c, source).unwrap_or(&empty), non_missing),
    )
}

/// Upstream's `max(a, b...)` of resource lists.
fn max_of(lists: &[&ResourceList]) -> ResourceList {
    let mut out = ResourceList::new();
    for l in lists {
        max_resource_list(&mut out, l);
    }
    out
}

/// Upstream's `AggregateContainerRequests`: with `status`, the larger of
/// the spec's, the allocated and the actuated requests (the spec's left
/// out when the resize is infeasible), from the pod-level status when it
/// has both, else from the containers'.
fn container_requests_of(pod: &Pod, non_missing: &ResourceList, status: bool) -> ResourceList {
    let spec = aggregate(pod, non_missing, Source::Spec);
    let Some(st) = pod.status_resources.as_deref().filter(|_| status) else {
        return spec;
    };
    let (allocated, actuated) = match (&st.pod_allocated, &st.pod_actuated) {
        (Some(a), Some(r)) => (a.clone(), r.clone()),
        _ => (
            aggregate(pod, non_missing, Source::Allocated(st)),
            aggregate(pod, non_missing, Source::Actuated(st)),
        ),
    };
    if st.resize_infeasible {
        max_of(&[&actuated, &allocated])
    } else {
        max_of(&[&spec, &actuated, &allocated])
    }
}

/// Upstream's `PodRequests`: `status` is its `UseStatusResources` (and
/// `InPlacePodLevelResourcesVerticalScalingEnabled`), on for every pod the
/// scheduler counts and off for NodeResourcesFit's pod.
fn pod_requests(pod: &Pod, non_missing: &ResourceList, status: bool) -> ResourceList {
    pod_requests_with(pod, non_missing, status, true)
}

/// [`pod_requests`], with pod-level requests left out unless `pod_level`
/// (upstream's `SkipPodLevelResources`).
fn pod_requests_with(
    pod: &Pod,
    non_missing: &ResourceList,
    status: bool,
    pod_level: bool,
) -> ResourceList {
    let mut reqs = container_requests_of(pod, non_missing, status);
    if pod_level && pod.pod_requests.keys().any(|k| is_pod_level_resource(k)) {
        let from_status = pod
            .status_resources
            .as_deref()
            .filter(|st| status && st.pod_resources_set);
        let effective = match from_status {
            Some(st) => {
                let empty = ResourceList::new();
                let spec = if st.resize_infeasible {
                    &empty
                } else {
                    &pod.pod_requests
                };
                let actuated = st.pod_actuated.as_ref().unwrap_or(&empty);
                let allocated = st.pod_allocated.as_ref().unwrap_or(&empty);
                max_of(&[spec, actuated, allocated])
            }
            None => pod.pod_requests.clone(),
        };
        for (k, v) in effective {
            if is_pod_level_resource(&k) {
                reqs.insert(k, v);
            }
        }
    }
    add_resource_list(&mut reqs, &pod.overhead);
    reqs
}

/// Requests as a NodeResources scorer computes them. NodeResourcesFit's
/// scorer (`fit`) counts every container missing a cpu/memory request as
/// 100m/200Mi and reads neither the pod's status nor its pod-level
/// requests (upstream builds it without those features);
/// NodeResourcesBalancedAllocation's reads both and adds no defaults.
pub fn scoring_requests(pod: &Pod, fit: bool) -> Resources {
    let mut non_missing = ResourceList::new();
    if fit {
        non_missing.insert(
            names::CPU.into(),
            Quantity::from_milli(DEFAULT_MILLI_CPU_REQUEST),
        );
        non_missing.insert(
            names::MEMORY.into(),
            Quantity::from_units(DEFAULT_MEMORY_REQUEST),
        );
    }
    Resources::from_list(&pod_requests_with(pod, &non_missing, !fit, !fit))
}

/// Computes `requests`, `non_zero_milli_cpu` and `non_zero_memory` of a pod.
pub fn compute(pod: &mut Pod) {
    let empty = ResourceList::new();
    let requests = pod_requests(pod, &empty, true);
    pod.spec_requests = pod
        .status_resources
        .is_some()
        .then(|| Resources::from_list(&pod_requests(pod, &empty, false)))
        .filter(|spec| Resources::from_list(&requests) != *spec);
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
        pod_requests(pod, &non_missing, true)
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

    /// A pod from its JSON, through the API conversion.
    fn from_json(v: serde_json::Value) -> Pod {
        let raw: k8s_openapi::api::core::v1::Pod = serde_json::from_value(v).unwrap();
        crate::convert::pod(&raw, 0, &Default::default()).unwrap()
    }

    /// One container (or sidecar) asking for `spec` cpu, with
    /// `allocated`/`actuated` cpu in its status, and the pod's resize
    /// `Infeasible` or not.
    fn resized(
        spec: &str,
        allocated: Option<&str>,
        actuated: Option<&str>,
        infeasible: bool,
        sidecar: bool,
    ) -> Pod {
        let c = serde_json::json!({"name": "c", "image": "i",
            "restartPolicy": if sidecar { Some("Always") } else { None },
            "resources": {"requests": {"cpu": spec}}});
        let mut cs = serde_json::json!({"name": "c", "image": "i", "imageID": "", "ready": true, "restartCount": 0});
        if let Some(a) = allocated {
            cs["allocatedResources"] = serde_json::json!({"cpu": a});
        }
        if let Some(a) = actuated {
            cs["resources"] = serde_json::json!({"requests": {"cpu": a}});
        }
        let (spec, status) = if sidecar {
            (
                serde_json::json!({"containers": [{"name": "main", "image": "i"}], "initContainers": [c]}),
                serde_json::json!({"initContainerStatuses": [cs]}),
            )
        } else {
            (
                serde_json::json!({"containers": [c]}),
                serde_json::json!({"containerStatuses": [cs]}),
            )
        };
        let mut pod =
            serde_json::json!({"metadata": {"name": "p"}, "spec": spec, "status": status});
        if infeasible {
            pod["status"]["conditions"] = serde_json::json!([{"type": "PodResizePending", "status": "True", "reason": "Infeasible"}]);
        }
        from_json(pod)
    }

    /// Upstream's `TestPodResourceRequests` cases for resizes
    /// (component-helpers v0.37.2): the scheduler counts the status
    /// (`UseStatusResources`), NodeResourcesFit reads the spec alone.
    #[test]
    fn upstream_resize_cases() {
        // (description, pod, counted cpu, fit cpu)
        let cases = [
            (
                "resized, infeasible",
                resized("4", None, Some("2"), true, false),
                2000,
                4000,
            ),
            (
                "resized, infeasible & in-progress",
                resized("6", Some("4"), Some("2"), true, false),
                4000,
                6000,
            ),
            (
                "resized, no resize status",
                resized("4", None, Some("2"), false, false),
                4000,
                4000,
            ),
            (
                "resized, restartable init container, infeasible",
                resized("4", None, Some("2"), true, true),
                2000,
                4000,
            ),
            (
                "resized, restartable init container, no resize status",
                resized("4", None, Some("2"), false, true),
                4000,
                4000,
            ),
            // rkube's own: nothing in the status and the resize infeasible
            // counts the container as asking nothing.
            (
                "infeasible, no container status",
                resized("4", None, None, true, false),
                0,
                4000,
            ),
            (
                "growing, allocated above spec",
                resized("1", Some("3"), Some("2"), false, false),
                3000,
                1000,
            ),
        ];
        for (name, pod, counted, fit) in cases {
            assert_eq!(pod.requests.milli_cpu, counted, "{name}: counted");
            assert_eq!(pod.fit_requests().milli_cpu, fit, "{name}: fit");
        }
    }

    /// Upstream's "resized: per-resource 3-way maximum".
    #[test]
    fn per_resource_three_way_maximum() {
        let pod = from_json(serde_json::json!({"metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "30m", "memory": "20M", "ephemeral-storage": "10G"}}}]},
            "status": {"containerStatuses": [{"name": "c", "image": "i", "imageID": "", "ready": true, "restartCount": 0,
                "allocatedResources": {"cpu": "20m", "memory": "10M", "ephemeral-storage": "30G"},
                "resources": {"requests": {"cpu": "10m", "memory": "30M", "ephemeral-storage": "20G"}}}]}}));
        assert_eq!(pod.requests.milli_cpu, 30);
        assert_eq!(pod.requests.memory, 30_000_000);
        assert_eq!(pod.requests.ephemeral_storage, 30_000_000_000);
        assert_eq!(pod.fit_requests().memory, 20_000_000);
    }

    /// Pod-level resources: with `status.resources` set, the larger of the
    /// spec's, the actuated and the allocated pod-level requests; the
    /// spec's left out when the resize is infeasible.
    #[test]
    fn pod_level_status_resources() {
        let pod = |infeasible: bool| {
            let mut v = serde_json::json!({"metadata": {"name": "p"},
                "spec": {"resources": {"requests": {"cpu": "4", "memory": "1Gi"}}, "containers": [{"name": "c", "image": "i"}]},
                "status": {"allocatedResources": {"cpu": "2"}, "resources": {"requests": {"cpu": "3", "memory": "512Mi"}}}});
            if infeasible {
                v["status"]["conditions"] = serde_json::json!([{"type": "PodResizePending", "status": "True", "reason": "Infeasible"}]);
            }
            from_json(v)
        };
        let p = pod(false);
        assert_eq!((p.requests.milli_cpu, p.requests.memory), (4000, 1 << 30));
        let p = pod(true);
        assert_eq!((p.requests.milli_cpu, p.requests.memory), (3000, 512 << 20));
        assert_eq!(p.fit_requests().milli_cpu, 4000);
        // NodeResourcesFit's scorer reads neither the status nor pod-level
        // requests: the container's defaults (100m, 200Mi); Balanced
        // Allocation's reads both.
        let fit = scoring_requests(&p, true);
        assert_eq!((fit.milli_cpu, fit.memory), (100, 200 << 20));
        let balanced = scoring_requests(&p, false);
        assert_eq!((balanced.milli_cpu, balanced.memory), (3000, 512 << 20));
    }
}
