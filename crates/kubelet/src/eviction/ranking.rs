//! Which pod to evict and what it is told: pod requests
//! ([`pod_request`]), critical pods that are never evicted
//! ([`is_critical`]), the ranking of candidates for a resource ([`rank`]),
//! and the `Evicted` status message ([`message`], with Go's quantity
//! formatting, [`format_quantity`]).
//!
//! Upstream: `pkg/kubelet/eviction/helpers.go` (`rankMemoryPressure`,
//! `rankDiskPressureFunc`, `rankPIDPressure`, `exceedMemoryRequests`,
//! `priority`, `evictionMessage`), `pkg/kubelet/types` (`IsCriticalPod`)
//! and `k8s.io/component-helpers/resource` (`PodRequests`).

use k8s_openapi::api::core::v1::Pod;
use rkube_model::Quantity;

use super::signals::{PodUsage, Resource};
use super::thresholds::Met;

/// A pod's request of `r` as upstream's `PodRequests` counts it (sidecars
/// included, pod-level requests overriding, plus overhead): the same
/// requests the pod's cgroups are made from.
pub fn pod_request(pod: &Pod, r: Resource) -> i64 {
    crate::runtime::cri::spec::resources::pod_requests(pod)
        .get(r.name())
        .map(|q| q.value())
        .unwrap_or(0)
}

/// A pod as the ranking sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The caller's index of the pod.
    pub index: usize,
    /// `spec.priority` (0 if unset).
    pub priority: i32,
    /// Its request of the resource to reclaim.
    pub request: i64,
    /// Its usage, `None` without stats.
    pub usage: Option<i64>,
}

/// Orders `cands` for eviction of `r`, first to evict first (upstream's
/// `rankMemoryPressure`, `rankDiskPressureFunc`, `rankPIDPressure`). Pods
/// without stats come first in every usage comparison.
pub fn rank(r: Resource, cands: &mut [Candidate]) {
    use std::cmp::Ordering;
    // true sorts first.
    let first = |a: bool, b: bool| b.cmp(&a);
    let exceeds = |a: &Candidate, b: &Candidate| match (a.usage, b.usage) {
        (Some(ua), Some(ub)) => first(ua > a.request, ub > b.request),
        (ua, ub) => first(ua.is_none(), ub.is_none()),
    };
    let priority = |a: &Candidate, b: &Candidate| a.priority.cmp(&b.priority);
    let above_request = |a: &Candidate, b: &Candidate| match (a.usage, b.usage) {
        (Some(ua), Some(ub)) => (ub - b.request).cmp(&(ua - a.request)),
        (ua, ub) => first(ua.is_none(), ub.is_none()),
    };
    let most = |a: &Candidate, b: &Candidate| match (a.usage, b.usage) {
        (Some(ua), Some(ub)) => ub.cmp(&ua),
        (ua, ub) => first(ua.is_none(), ub.is_none()),
    };
    cands.sort_by(|a, b| -> Ordering {
        match r {
            Resource::Pids => priority(a, b).then_with(|| most(a, b)),
            _ => exceeds(a, b)
                .then_with(|| priority(a, b))
                .then_with(|| above_request(a, b)),
        }
    });
}

/// Formats an amount as Go's `resource.Quantity` with `BinarySI` prints
/// it: exact binary suffixes (`100Mi`), else exact decimal ones (`1500k`),
/// else the plain number.
pub fn format_quantity(v: i64) -> String {
    if v.unsigned_abs() < 1024 {
        return v.to_string();
    }
    let binary = rkube_model::quantity::format_bytes(v);
    if binary.ends_with('i') {
        return binary;
    }
    format_decimal(v)
}

/// Formats an amount as Go's `resource.Quantity` with `DecimalSI` prints
/// it: the largest exact decimal suffix (`2G`, `1500k`), else the plain
/// number.
pub fn format_decimal(v: i64) -> String {
    if v == 0 {
        return "0".into();
    }
    for (s, p) in [
        ("E", 1_000_000_000_000_000_000i64),
        ("P", 1_000_000_000_000_000),
        ("T", 1_000_000_000_000),
        ("G", 1_000_000_000),
        ("M", 1_000_000),
        ("k", 1_000),
    ] {
        if v % p == 0 {
            return format!("{}{s}", v / p);
        }
    }
    v.to_string()
}

/// Upstream's eviction message: `The node was low on resource: memory.
/// Threshold quantity: 100Mi, available: 50Mi. Container app was using
/// 20Mi, request is 0, has larger consumption of memory. `
pub fn message(met: &Met, pod: &Pod, usage: Option<&PodUsage>) -> String {
    let r = met.signal.resource();
    let mut m = format!(
        "The node was low on resource: {}. Threshold quantity: {}, available: {}. ",
        r.name(),
        format_quantity(met.quantity),
        format_quantity(met.available)
    );
    let Some(usage) = usage else {
        return m;
    };
    let per_container = match r {
        Resource::Memory => &usage.memory,
        Resource::EphemeralStorage => &usage.ephemeral_storage,
        _ => return m,
    };
    let Some(spec) = pod.spec.as_ref() else {
        return m;
    };
    for c in spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
    {
        let Some(&used) = per_container.get(&c.name) else {
            continue;
        };
        let request = c
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|m| m.get(r.name()))
            .map(|q| q.0.clone())
            .unwrap_or_else(|| "0".into());
        let request_value = Quantity::parse(&request).map(|q| q.value()).unwrap_or(0);
        if used > request_value {
            m.push_str(&format!(
                "Container {} was using {}, request is {}, has larger consumption of {}. ",
                c.name,
                format_quantity(used),
                request,
                r.name()
            ));
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction::signals::Signal;
    use serde_json::json;

    const MI: i64 = 1 << 20;
    const GI: i64 = 1 << 30;

    fn c(index: usize, priority: i32, request: i64, usage: Option<i64>) -> Candidate {
        Candidate {
            index,
            priority,
            request,
            usage,
        }
    }

    fn order(r: Resource, mut cands: Vec<Candidate>) -> Vec<usize> {
        rank(r, &mut cands);
        cands.iter().map(|c| c.index).collect()
    }

    #[test]
    fn ranking_as_upstream() {
        // Upstream's TestOrderedByExceedsRequestMemory / ...ByPriority
        // shapes: best-effort (request 0) using anything exceeds its
        // request; burstable under its request does not.
        let best_effort = c(0, 0, 0, Some(10 * MI));
        let burstable_under = c(1, 0, 100 * MI, Some(50 * MI));
        let burstable_over = c(2, 0, 100 * MI, Some(150 * MI));
        assert_eq!(
            order(
                Resource::Memory,
                vec![
                    burstable_under.clone(),
                    burstable_over.clone(),
                    best_effort.clone()
                ]
            ),
            // Both exceeding first; among them the larger usage above
            // request (50Mi over vs 10Mi over).
            [2, 0, 1]
        );
        // Exceeding requests beats priority; then lower priority first.
        assert_eq!(
            order(
                Resource::Memory,
                vec![
                    c(0, 100, 0, Some(MI)),
                    c(1, -10, 100 * MI, Some(MI)),
                    c(2, 1000, 0, Some(MI)),
                    c(3, 5, 100 * MI, Some(MI)),
                ]
            ),
            [0, 2, 1, 3]
        );
        // No stats: first.
        assert_eq!(
            order(
                Resource::Memory,
                vec![c(0, 0, 0, Some(GI)), c(1, 1000, 0, None)]
            ),
            [1, 0]
        );
        // Same everything but usage: the largest above request first.
        assert_eq!(
            order(
                Resource::EphemeralStorage,
                vec![
                    c(0, 0, GI, Some(2 * GI)),
                    c(1, 0, 0, Some(3 * GI)),
                    c(2, 0, 0, Some(GI))
                ]
            ),
            [1, 0, 2]
        );
        // PIDs: priority, then the most processes.
        assert_eq!(
            order(
                Resource::Pids,
                vec![
                    c(0, 10, 0, Some(500)),
                    c(1, 0, 0, Some(5)),
                    c(2, 0, 0, Some(50))
                ]
            ),
            [2, 1, 0]
        );
    }

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_sidecar_counts_toward_the_request_as_upstream_counts_it() {
        // Upstream's PodRequests: containers + sidecars (100 + 100 Mi)
        // against the init container plus the sidecars started before it
        // (200 + 100 Mi): 300 Mi. A max of the sum and the largest init
        // container would say 200 Mi.
        let with_sidecar = pod(json!({
            "metadata": {"name": "s"},
            "spec": {"containers": [
                {"name": "app", "resources": {"requests": {"memory": "100Mi"}}}],
                "initContainers": [
                    {"name": "proxy", "restartPolicy": "Always",
                     "resources": {"requests": {"memory": "100Mi"}}},
                    {"name": "migrate", "resources": {"requests": {"memory": "200Mi"}}}]}
        }));
        assert_eq!(pod_request(&with_sidecar, Resource::Memory), 300 * MI);
        // So a pod using 250 Mi is under its request and ranked after a
        // pod of the same priority that exceeds its own.
        let plain = pod(json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [
                {"name": "app", "resources": {"requests": {"memory": "200Mi"}}}]}
        }));
        let mut cands: Vec<Candidate> = [(&with_sidecar, 250 * MI), (&plain, 210 * MI)]
            .iter()
            .enumerate()
            .map(|(index, (p, usage))| Candidate {
                index,
                priority: 0,
                request: pod_request(p, Resource::Memory),
                usage: Some(*usage),
            })
            .collect();
        rank(Resource::Memory, &mut cands);
        let order: Vec<usize> = cands.iter().map(|c| c.index).collect();
        assert_eq!(
            order,
            [1, 0],
            "the plain pod exceeds its request, the sidecar pod does not"
        );
    }

    #[test]
    fn requests_critical_and_message() {
        let p = pod(json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"containers": [
                {"name": "app", "resources": {"requests": {"memory": "100Mi"}}},
                {"name": "side", "resources": {"requests": {"memory": "20Mi"}}}],
                "initContainers": [{"name": "init", "resources": {"requests": {"memory": "200Mi"}}}],
                "overhead": {"memory": "1Mi"}}
        }));
        assert_eq!(pod_request(&p, Resource::Memory), 201 * MI);
        assert_eq!(pod_request(&p, Resource::EphemeralStorage), 0);

        let met = Met {
            signal: Signal::MemoryAvailable,
            quantity: 100 * MI,
            available: 50 * MI,
            index: 0,
            hard: true,
        };
        let usage = PodUsage {
            memory: [("app".to_string(), 150 * MI), ("side".to_string(), 10 * MI)].into(),
            ..Default::default()
        };
        assert_eq!(
            message(&met, &p, Some(&usage)),
            "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. \
             Container app was using 150Mi, request is 100Mi, has larger consumption of memory. "
        );
        assert_eq!(
            message(&met, &p, None),
            "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. "
        );
        let be =
            pod(json!({"metadata": {"name": "be"}, "spec": {"containers": [{"name": "app"}]}}));
        let u = PodUsage {
            memory: [("app".to_string(), 20 * MI)].into(),
            ..Default::default()
        };
        assert!(message(&met, &be, Some(&u)).ends_with(
            "Container app was using 20Mi, request is 0, has larger consumption of memory. "
        ));
        assert_eq!(format_quantity(1500), "1500");
        assert_eq!(format_quantity(1_500_000), "1500k");
        assert_eq!(format_quantity(3 * GI), "3Gi");
        assert_eq!(format_quantity(999), "999");
    }
}
