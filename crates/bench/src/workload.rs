//! scheduler_perf-style workloads as cluster files.
//!
//! Each workload is `Kind/Size`, e.g. `SchedulingBasic/5000Nodes_10000Pods`.
//! Sizes are upstream's named ones (`5000Nodes`, `500Nodes`, ...; see
//! [`Kind::upstream_sizes`]) or generic: `{N}Nodes_{M}Pods` (initial pods from
//! the workload's upstream ratio) or `{N}Nodes_{I}Init_{M}Pods`.
//!
//! Differences from scheduler_perf, all deliberate:
//! * initial pods (`initPods`) are written **bound** (round-robin over the
//!   nodes, phase Running) instead of being scheduled first; only the
//!   measured pods are pending. Both schedulers see the same bound pods.
//! * pod priorities come from PriorityClasses (`priorityClassName`), because
//!   the admission emulation of the oracle (like a real apiserver) rejects a
//!   literal `spec.priority` without its class.
//! * `Unschedulable` injects its never-fitting high-priority pods up front
//!   (one per [`UNSCHEDULABLE_EVERY`] measured pods) instead of by a 5/s churn.
//! * `SchedulingWithMixedChurn`'s file is its nodes and measured pods; the
//!   churn (a node, a high-priority 9-CPU pod and a Service created and
//!   deleted in turn every second) is API traffic over time, so only the
//!   live benchmark runs it ([`Workload::churn`]).
//! * `SchedulingWithResourceClaimTemplate` (scheduler_perf's `dra` config):
//!   the initial claims (`initClaims`, counted as the size's initial pods)
//!   are written allocated, ten to a node in node order as the
//!   `allocResourceClaims` op leaves them; each measured pod's claim is
//!   written as the resource-claim controller would have generated it from
//!   the template, and the pod names it (`resourceClaimName`), because the
//!   oracle's bulk mode runs no controller: neither side times claim
//!   creation.

use std::fmt;

use serde_json::{json, Value};

mod dra;
mod gang;

/// The workload families.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// misc: SchedulingBasic (pod-default on node-default).
    SchedulingBasic,
    /// affinity: required anti-affinity on hostname.
    SchedulingPodAntiAffinity,
    /// affinity: required affinity on zone (all nodes in zone1).
    SchedulingPodAffinity,
    /// affinity: preferred affinity on hostname.
    SchedulingPreferredPodAffinity,
    /// topology_spreading: DoNotSchedule, maxSkew 5 over 3 zones.
    TopologySpreading,
    /// topology_spreading: ScheduleAnyway, maxSkew 5 over 3 zones.
    PreferredTopologySpreading,
    /// affinity: required node affinity zone In [zone1, zone2].
    SchedulingNodeAffinity,
    /// default_preemption: default pods interleaved with pods that fit nowhere.
    Unschedulable,
    /// default_preemption: high-priority pods that must preempt low-priority ones.
    PreemptionBasic,
    /// misc: pod-default pods while a node, a large high-priority pod and a
    /// Service are recreated every second (live only).
    SchedulingWithMixedChurn,
    /// dra: pods with one claim for a device of `test-class`, nodes with a
    /// ResourceSlice of 10 devices each.
    SchedulingWithResourceClaimTemplate,
    /// misc: daemonset-style pods (required node affinity on
    /// `metadata.name` of the one `scheduler-perf-node`, no requests): the
    /// other nodes are filtered out by NodeAffinity's PreFilter result.
    SchedulingDaemonset,
    /// podgroup/gangscheduling: gangs of 3 or 1000 pods of 100m CPU
    /// (GenericWorkload on).
    GangScheduling,
}

/// One measured high-priority large-cpu pod per this many measured pods in
/// `Unschedulable`.
pub const UNSCHEDULABLE_EVERY: usize = 20;

const ALL: [Kind; 13] = [
    Kind::SchedulingBasic,
    Kind::SchedulingPodAntiAffinity,
    Kind::SchedulingPodAffinity,
    Kind::SchedulingPreferredPodAffinity,
    Kind::TopologySpreading,
    Kind::PreferredTopologySpreading,
    Kind::SchedulingNodeAffinity,
    Kind::Unschedulable,
    Kind::PreemptionBasic,
    Kind::SchedulingWithMixedChurn,
    Kind::SchedulingWithResourceClaimTemplate,
    Kind::SchedulingDaemonset,
    Kind::GangScheduling,
];

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?}")
    }
}

impl Kind {
    /// Every workload family.
    pub fn all() -> &'static [Kind] {
        &ALL
    }

    fn parse(s: &str) -> Option<Kind> {
        ALL.iter().copied().find(|k| k.to_string() == s)
    }

    /// Upstream's sizes (name, initNodes, initPods, measurePods) from the
    /// scheduler_perf performance-config.yaml files of v1.37, plus a small
    /// CI size.
    pub fn upstream_sizes(self) -> &'static [(&'static str, usize, usize, usize)] {
        match self {
            Kind::SchedulingBasic => &[
                ("5Nodes", 5, 5, 10),
                ("100Nodes_200Pods", 100, 20, 200),
                ("500Nodes", 500, 500, 1000),
                ("5000Nodes", 5000, 1000, 1000),
                ("5000Nodes_10000Pods", 5000, 1000, 10000),
                ("5000Nodes_50000Pods", 5000, 5000, 50000),
            ],
            Kind::SchedulingPodAntiAffinity => &[
                ("5Nodes", 5, 1, 4),
                ("500Nodes", 500, 100, 400),
                ("5000Nodes", 5000, 1000, 1000),
                ("5000Nodes_2000Pods", 5000, 1000, 2000),
            ],
            Kind::SchedulingPodAffinity
            | Kind::SchedulingPreferredPodAffinity
            | Kind::SchedulingNodeAffinity => &[
                ("5Nodes", 5, 5, 10),
                ("500Nodes", 500, 500, 1000),
                ("5000Nodes", 5000, 5000, 1000),
                ("5000Nodes_5000Pods", 5000, 5000, 5000),
                ("5000Nodes_10000Pods", 5000, 5000, 10000),
            ],
            Kind::TopologySpreading | Kind::PreferredTopologySpreading => &[
                ("5Nodes", 5, 10, 10),
                ("500Nodes", 500, 1000, 1000),
                ("5000Nodes", 5000, 5000, 2000),
                ("5000Nodes_5000Pods", 5000, 5000, 5000),
            ],
            Kind::Unschedulable => &[
                ("5Nodes", 5, 1, 10),
                ("500Nodes", 500, 10, 1000),
                ("5000Nodes", 5000, 100, 1000),
                ("5000Nodes_10000Pods", 5000, 200, 10000),
            ],
            Kind::PreemptionBasic => &[
                ("5Nodes", 5, 20, 5),
                ("500Nodes", 500, 2000, 500),
                ("1000Nodes", 1000, 4000, 1000),
            ],
            Kind::SchedulingWithMixedChurn => &[
                ("5Nodes", 5, 0, 10),
                ("10Nodes", 10, 0, 100),
                ("1000Nodes", 1000, 0, 1000),
                ("5000Nodes", 5000, 0, 2000),
                ("5000Nodes_10000Pods", 5000, 0, 10000),
            ],
            // (nodes, initClaims, measurePods) of dra/performance-config.yaml.
            Kind::SchedulingDaemonset => &[("5Nodes", 5, 0, 10), ("15000Nodes", 15000, 0, 30000)],
            Kind::SchedulingWithResourceClaimTemplate => &[
                ("5Nodes", 5, 10, 10),
                ("2000pods_200nodes", 200, 1000, 1000),
                ("5000pods_500nodes", 500, 2500, 2500),
            ],
            // (nodes, 0, groups × podsPerGroup) of podgroup/gangscheduling.
            Kind::GangScheduling => &[
                ("5Nodes", 5, 0, 6),
                ("10Nodes_3Gangs", 10, 0, 9),
                ("100Nodes_10Gangs", 100, 0, 30),
                ("5000Nodes_1000Gangs_3000Pods", 5000, 0, 3000),
                ("5000Nodes_2000Gangs_6000Pods", 5000, 0, 6000),
                ("5000Nodes_3000Gangs_9000Pods", 5000, 0, 9000),
                ("5000Nodes_3Gangs_3000Pods_1000PerGroup", 5000, 0, 3000),
                ("5000Nodes_6Gangs_6000Pods_1000PerGroup", 5000, 0, 6000),
                ("5000Nodes_9Gangs_9000Pods_1000PerGroup", 5000, 0, 9000),
            ],
        }
    }

    /// initPods for a generic `{N}Nodes_{M}Pods` size (upstream's ratios).
    fn default_init_pods(self, nodes: usize) -> usize {
        match self {
            Kind::SchedulingBasic | Kind::SchedulingPodAntiAffinity => nodes / 5,
            Kind::SchedulingPodAffinity
            | Kind::SchedulingPreferredPodAffinity
            | Kind::SchedulingNodeAffinity => nodes,
            Kind::TopologySpreading | Kind::PreferredTopologySpreading => nodes * 2,
            Kind::Unschedulable => nodes / 50,
            Kind::PreemptionBasic => nodes * 4,
            Kind::SchedulingWithMixedChurn | Kind::SchedulingDaemonset | Kind::GangScheduling => 0,
            Kind::SchedulingWithResourceClaimTemplate => nodes * 5,
        }
    }
}

/// A workload: family and size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workload {
    /// Family.
    pub kind: Kind,
    /// Size name as given.
    pub size: String,
    /// Nodes.
    pub nodes: usize,
    /// Initial pods (bound).
    pub init_pods: usize,
    /// Measured pods (pending); `Unschedulable` adds its extra pods.
    pub measure_pods: usize,
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.kind, self.size)
    }
}

fn parse_count(s: &str, suffix: &str) -> Option<usize> {
    let n = s.strip_suffix(suffix)?;
    let (n, mult) = match n.strip_suffix('k') {
        Some(n) => (n, 1000),
        None => (n, 1),
    };
    n.parse::<usize>().ok().map(|v| v * mult)
}

impl Workload {
    /// Parses `Kind/Size`.
    pub fn parse(name: &str) -> Result<Workload, String> {
        let (k, size) = name.split_once('/').ok_or_else(|| {
            format!(
                "workload {name:?}: expected Kind/Size, e.g. SchedulingBasic/5000Nodes_10000Pods"
            )
        })?;
        let kind = Kind::parse(k).ok_or_else(|| {
            format!(
                "workload {name:?}: unknown kind {k:?} (one of: {})",
                ALL.map(|k| k.to_string()).join(", ")
            )
        })?;
        if let Some(&(_, n, i, m)) = kind.upstream_sizes().iter().find(|s| s.0 == size) {
            return Ok(Workload {
                kind,
                size: size.to_string(),
                nodes: n,
                init_pods: i,
                measure_pods: m,
            });
        }
        let parts: Vec<&str> = size.split('_').collect();
        let parsed = match parts.as_slice() {
            [n, m] => parse_count(n, "Nodes")
                .and_then(|n| parse_count(m, "Pods").map(|m| (n, kind.default_init_pods(n), m))),
            [n, i, m] => match (
                parse_count(n, "Nodes"),
                parse_count(i, "Init"),
                parse_count(m, "Pods"),
            ) {
                (Some(n), Some(i), Some(m)) => Some((n, i, m)),
                _ => None,
            },
            _ => None,
        };
        let (nodes, init_pods, measure_pods) = parsed.ok_or_else(|| {
            format!(
                "workload {name:?}: size {size:?} is not one of {} nor {{N}}Nodes_{{M}}Pods / {{N}}Nodes_{{I}}Init_{{M}}Pods",
                kind.upstream_sizes().iter().map(|s| s.0).collect::<Vec<_>>().join(", ")
            )
        })?;
        if nodes == 0 {
            return Err(format!("workload {name:?}: needs at least one node"));
        }
        Ok(Workload {
            kind,
            size: size.to_string(),
            nodes,
            init_pods,
            measure_pods,
        })
    }

    /// Every named workload (for `--list`).
    pub fn catalog() -> Vec<String> {
        ALL.iter()
            .flat_map(|k| {
                k.upstream_sizes()
                    .iter()
                    .map(move |s| format!("{k}/{}", s.0))
            })
            .collect()
    }

    /// Pending pods both schedulers should see.
    pub fn pending_pods(&self) -> usize {
        self.measure_pods + self.extra_unschedulable()
    }

    /// The feature gates both schedulers run the workload with.
    pub fn feature_gates(&self) -> Option<&'static str> {
        (self.kind == Kind::GangScheduling).then_some("GenericWorkload=true")
    }

    /// True when the workload churns API objects while it runs (live only).
    pub fn churn(&self) -> bool {
        self.kind == Kind::SchedulingWithMixedChurn
    }

    /// Pods expected to stay pending (`Unschedulable`'s injected pods).
    pub fn extra_unschedulable(&self) -> usize {
        if self.kind == Kind::Unschedulable {
            self.measure_pods.div_ceil(UNSCHEDULABLE_EVERY)
        } else {
            0
        }
    }

    /// The cluster file: a `v1` `List` of Namespaces, PriorityClasses, Nodes
    /// and Pods.
    pub fn generate(&self) -> Value {
        if self.kind == Kind::SchedulingWithResourceClaimTemplate {
            return dra::generate(self.nodes, self.init_pods, self.measure_pods);
        }
        if self.kind == Kind::GangScheduling {
            let per_group = gang::pods_per_group(&self.size);
            return gang::generate(self.nodes, self.measure_pods, per_group);
        }
        let mut items = Vec::new();
        let namespaces: &[&str] = match self.kind {
            Kind::SchedulingPodAntiAffinity
            | Kind::SchedulingPodAffinity
            | Kind::SchedulingPreferredPodAffinity => &["sched-0", "sched-1"],
            _ => &[],
        };
        for ns in namespaces {
            items.push(json!({
                "apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns}},
            }));
        }
        match self.kind {
            Kind::PreemptionBasic => items.push(priority_class("bench-high", 9_999_999)),
            // The churn's pod-high-priority-large-cpu has priority 10.
            Kind::Unschedulable | Kind::SchedulingWithMixedChurn => {
                items.push(priority_class("bench-high", 10))
            }
            _ => {}
        }
        let zones: &[&str] = match self.kind {
            Kind::SchedulingPodAffinity | Kind::SchedulingNodeAffinity => &["zone1"],
            Kind::TopologySpreading | Kind::PreferredTopologySpreading => {
                &["moon-1", "moon-2", "moon-3"]
            }
            _ => &[],
        };
        let node_names: Vec<String> = (0..self.nodes)
            .map(|i| format!("scheduler-perf-{i:05}"))
            .collect();
        if self.kind == Kind::SchedulingDaemonset {
            // templates/node-with-name.yaml
            let name = "scheduler-perf-node";
            let mut labels = serde_json::Map::new();
            labels.insert("kubernetes.io/hostname".into(), json!(name));
            let mut n = node(name, labels);
            n["status"]["capacity"]["pods"] = json!("90000");
            n["status"]["allocatable"]["pods"] = json!("90000");
            items.push(n);
        }
        for (i, name) in node_names.iter().enumerate() {
            let mut labels = serde_json::Map::new();
            labels.insert("kubernetes.io/hostname".into(), json!(name));
            if !zones.is_empty() {
                labels.insert(
                    "topology.kubernetes.io/zone".into(),
                    json!(zones[i % zones.len()]),
                );
            }
            items.push(node(name, labels));
        }
        let mut seq = 0usize;
        // Initial pods: bound round-robin, Running.
        let init_ns = namespaces.first().copied().unwrap_or("default");
        for i in 0..self.init_pods {
            // scheduler_perf's template for the initial pods.
            let shape = match self.kind {
                Kind::TopologySpreading
                | Kind::PreferredTopologySpreading
                | Kind::Unschedulable => Shape::Default,
                Kind::PreemptionBasic => Shape::LowPriority,
                _ => self.measured_shape(),
            };
            let node = &node_names[i % node_names.len()];
            items.push(pod(
                &format!("init-pod-{i:05}"),
                init_ns,
                shape,
                Some(node),
                seq,
            ));
            seq += 1;
        }
        // Measured pods: pending.
        let measure_ns = namespaces.get(1).copied().unwrap_or("default");
        let extra = self.extra_unschedulable();
        let mut unsched = 0;
        for i in 0..self.measure_pods {
            if extra > 0 && i % UNSCHEDULABLE_EVERY == 0 && unsched < extra {
                items.push(pod(
                    &format!("pod-h-{unsched:05}"),
                    measure_ns,
                    Shape::HighPriorityLargeCpu,
                    None,
                    seq,
                ));
                unsched += 1;
                seq += 1;
            }
            items.push(pod(
                &format!("pod-{i:05}"),
                measure_ns,
                self.measured_shape(),
                None,
                seq,
            ));
            seq += 1;
        }
        json!({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items})
    }

    fn measured_shape(&self) -> Shape {
        match self.kind {
            Kind::SchedulingBasic | Kind::Unschedulable | Kind::SchedulingWithMixedChurn => {
                Shape::Default
            }
            Kind::SchedulingPodAntiAffinity => Shape::AntiAffinity,
            Kind::SchedulingPodAffinity => Shape::Affinity,
            Kind::SchedulingPreferredPodAffinity => Shape::PreferredAffinity,
            Kind::TopologySpreading => Shape::Spread,
            Kind::PreferredTopologySpreading => Shape::PreferredSpread,
            Kind::SchedulingNodeAffinity => Shape::NodeAffinity,
            Kind::PreemptionBasic => Shape::HighPriority,
            Kind::SchedulingWithResourceClaimTemplate | Kind::GangScheduling => Shape::Default,
            Kind::SchedulingDaemonset => Shape::Daemonset,
        }
    }
}

/// Pod templates of scheduler_perf (templates/*.yaml).
#[derive(Debug, Clone, Copy)]
enum Shape {
    /// pod-default.yaml
    Default,
    /// pod-with-pod-anti-affinity.yaml
    AntiAffinity,
    /// pod-with-pod-affinity.yaml
    Affinity,
    /// pod-with-preferred-pod-affinity.yaml
    PreferredAffinity,
    /// pod-with-topology-spreading.yaml
    Spread,
    /// pod-with-preferred-topology-spreading.yaml
    PreferredSpread,
    /// pod-with-node-affinity.yaml
    NodeAffinity,
    /// pod-low-priority.yaml
    LowPriority,
    /// default_preemption/templates/pod-high-priority.yaml
    HighPriority,
    /// pod-high-priority-large-cpu.yaml
    HighPriorityLargeCpu,
    /// daemonset-pod.yaml
    Daemonset,
}

fn priority_class(name: &str, value: i64) -> Value {
    json!({
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": name}, "value": value,
    })
}

/// templates/node-default.yaml (allocatable spelled out = capacity).
fn node(name: &str, labels: serde_json::Map<String, Value>) -> Value {
    let res = json!({"pods": "110", "cpu": "4", "memory": "32Gi"});
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {},
        "status": {
            "capacity": res, "allocatable": res,
            "conditions": [{"type": "Ready", "status": "True"}],
            "phase": "Running",
        },
    })
}

fn pod(name: &str, ns: &str, shape: Shape, node: Option<&str>, seq: usize) -> Value {
    let (cpu, with_limits) = match shape {
        Shape::LowPriority => ("900m", true),
        Shape::HighPriority => ("3970m", true),
        Shape::HighPriorityLargeCpu => ("9", false),
        _ => ("100m", true),
    };
    let requests = json!({"cpu": cpu, "memory": "500Mi"});
    let mut resources = json!({"requests": requests});
    if with_limits {
        resources["limits"] = requests.clone();
    }
    let mut container = json!({
        "name": "pause", "image": "registry.k8s.io/pause:3.10.2", "resources": resources,
    });
    if matches!(shape, Shape::Daemonset) {
        container = json!({"name": "pause", "image": "registry.k8s.io/pause:3.10.1"});
    }
    if !matches!(shape, Shape::HighPriority | Shape::Daemonset) {
        container["ports"] = json!([{"containerPort": 80}]);
    }
    let namespaces = json!(["sched-1", "sched-0"]);
    let term = |color: &str, key: &str| {
        json!({
            "labelSelector": {"matchLabels": {"color": color}},
            "topologyKey": key, "namespaces": namespaces,
        })
    };
    let spread = |when: &str| {
        json!([{
            "maxSkew": 5, "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": when,
            "labelSelector": {"matchLabels": {"color": "blue"}},
        }])
    };
    let mut spec = json!({"containers": [container]});
    let mut labels = json!({});
    match shape {
        Shape::AntiAffinity => {
            labels = json!({"color": "green"});
            spec["affinity"] = json!({"podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [term("green", "kubernetes.io/hostname")],
            }});
        }
        Shape::Affinity => {
            labels = json!({"color": "blue"});
            spec["affinity"] = json!({"podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [term("blue", "topology.kubernetes.io/zone")],
            }});
        }
        Shape::PreferredAffinity => {
            labels = json!({"color": "red"});
            spec["affinity"] = json!({"podAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"podAffinityTerm": term("red", "kubernetes.io/hostname"), "weight": 1},
                ],
            }});
        }
        Shape::Spread => {
            labels = json!({"color": "blue"});
            spec["topologySpreadConstraints"] = spread("DoNotSchedule");
        }
        Shape::PreferredSpread => {
            labels = json!({"color": "blue"});
            spec["topologySpreadConstraints"] = spread("ScheduleAnyway");
        }
        Shape::NodeAffinity => {
            spec["affinity"] = json!({"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone1", "zone2"]}]},
                ]},
            }});
        }
        Shape::LowPriority => {
            spec["terminationGracePeriodSeconds"] = json!(0);
        }
        Shape::HighPriority => {
            spec["terminationGracePeriodSeconds"] = json!(0);
            spec["priorityClassName"] = json!("bench-high");
        }
        Shape::HighPriorityLargeCpu => {
            spec["priorityClassName"] = json!("bench-high");
        }
        Shape::Daemonset => {
            spec["affinity"] = json!({"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["scheduler-perf-node"]}]},
                ]},
            }});
        }
        Shape::Default => {}
    }
    let mut status = json!({"phase": "Pending"});
    if let Some(n) = node {
        spec["nodeName"] = json!(n);
        status = json!({"phase": "Running"});
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels, "creationTimestamp": timestamp(seq)},
        "spec": spec,
        "status": status,
    })
}

/// A pod's creation time: one second apart, in creation order (the queue's
/// tie-break).
fn timestamp(seq: usize) -> String {
    format!(
        "2025-01-01T{:02}:{:02}:{:02}Z",
        (seq / 3600) % 24,
        (seq / 60) % 60,
        seq % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_named_and_generic_sizes() {
        let w = Workload::parse("SchedulingBasic/5000Nodes_10000Pods").unwrap();
        assert_eq!((w.nodes, w.init_pods, w.measure_pods), (5000, 1000, 10000));
        let w = Workload::parse("TopologySpreading/300Nodes_600Pods").unwrap();
        assert_eq!((w.nodes, w.init_pods, w.measure_pods), (300, 600, 600));
        let w = Workload::parse("PreemptionBasic/10Nodes_7Init_3Pods").unwrap();
        assert_eq!((w.nodes, w.init_pods, w.measure_pods), (10, 7, 3));
        let w = Workload::parse("SchedulingBasic/1kNodes_2kPods").unwrap();
        assert_eq!((w.nodes, w.measure_pods), (1000, 2000));
        assert!(Workload::parse("Nope/5Nodes").is_err());
        assert!(Workload::parse("SchedulingBasic/lots").is_err());
        assert_eq!(Workload::catalog().len(), 59);
        let w = Workload::parse("GangScheduling/5000Nodes_9Gangs_9000Pods_1000PerGroup").unwrap();
        assert_eq!((w.nodes, w.measure_pods), (5000, 9000));
        assert_eq!(gang::pods_per_group(&w.size), 1000);
        assert_eq!(w.feature_gates(), Some("GenericWorkload=true"));
        assert!(Workload::parse("SchedulingWithMixedChurn/1000Nodes")
            .unwrap()
            .churn());
    }

    #[test]
    fn every_small_workload_loads_in_rkube() {
        for k in Kind::all() {
            let w = Workload::parse(&format!("{k}/5Nodes")).unwrap();
            let text = serde_json::to_string(&w.generate()).unwrap();
            let objs = rkube_model::load::parse_documents("w.json", &text).unwrap();
            let cluster = rkube_model::load::build(&objs, &mut |_| Ok(false)).unwrap();
            // SchedulingDaemonset adds its scheduler-perf-node, as upstream's.
            let extra = usize::from(*k == Kind::SchedulingDaemonset);
            assert_eq!(cluster.nodes.len(), 5 + extra, "{w}");
            let pending = cluster
                .pods
                .iter()
                .filter(|p| p.node_name.is_empty())
                .count();
            assert_eq!(pending, w.pending_pods(), "{w}");
        }
    }
}
