//! `rkube compare`: the same cluster simulated under two configurations —
//! which pods land elsewhere, and how pods, requests and the replicas of each
//! workload are spread over the nodes under each.
//!
//! The result is plain data ([`Comparison`]); printing is the CLI's job.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use rkube_config::KubeSchedulerConfiguration;
use rkube_model::{Cluster, Pod};
use serde::Serialize;

use crate::stats::{ratio, Stats};
use crate::{simulate, NodeSummary, SimError, SimulateOptions, SimulationReport};

/// A pod whose final node differs between the two configurations.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct MovedPod {
    /// `namespace/name`.
    pub pod: String,
    /// Node under configuration A (null: pending or evicted).
    pub node_a: Option<String>,
    /// Node under configuration B (null: pending or evicted).
    pub node_b: Option<String>,
}

/// One node's load after a simulation.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeUsage {
    /// Node name.
    pub name: String,
    /// Pods on the node.
    pub pods: usize,
    /// Requested milli-CPU.
    pub cpu_requested_milli: i64,
    /// Allocatable milli-CPU.
    pub cpu_allocatable_milli: i64,
    /// Requested / allocatable CPU (0..1).
    pub cpu_utilization: f64,
    /// Requested memory bytes.
    pub memory_requested_bytes: i64,
    /// Allocatable memory bytes.
    pub memory_allocatable_bytes: i64,
    /// Requested / allocatable memory (0..1).
    pub memory_utilization: f64,
}

impl From<&NodeSummary> for NodeUsage {
    fn from(n: &NodeSummary) -> Self {
        NodeUsage {
            name: n.name.clone(),
            pods: n.pods,
            cpu_requested_milli: n.requested_milli_cpu,
            cpu_allocatable_milli: n.allocatable_milli_cpu,
            cpu_utilization: ratio(n.requested_milli_cpu, n.allocatable_milli_cpu),
            memory_requested_bytes: n.requested_memory,
            memory_allocatable_bytes: n.allocatable_memory,
            memory_utilization: ratio(n.requested_memory, n.allocatable_memory),
        }
    }
}

/// How the running replicas of one workload are spread over nodes.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadSpread {
    /// `namespace/Kind/name` of the controlling owner, else `namespace/app=<label>`.
    pub workload: String,
    /// Running pods of the workload.
    pub pods: usize,
    /// Nodes running at least one of them.
    pub nodes_used: usize,
    /// Most replicas on a single node.
    pub max_per_node: usize,
    /// Replicas per node (nodes with none omitted).
    pub per_node: BTreeMap<String, usize>,
}

/// One configuration's outcome.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigOutcome {
    /// The configuration (its file name, or `<defaults>`).
    pub config: String,
    /// Pods placed by the simulation (and not evicted later in the run).
    pub scheduled: usize,
    /// Pods left pending.
    pub unschedulable: usize,
    /// Pods evicted by preemption.
    pub evicted: usize,
    /// Preemptions.
    pub preemptions: usize,
    /// Load per node, in node order.
    pub nodes: Vec<NodeUsage>,
    /// Pods per node.
    pub pods_per_node: Stats,
    /// CPU utilization (requested / allocatable) over nodes.
    pub cpu_utilization: Stats,
    /// Memory utilization over nodes.
    pub memory_utilization: Stats,
    /// Replica spread per workload, by workload name.
    pub workloads: Vec<WorkloadSpread>,
    /// The underlying simulation.
    #[serde(skip)]
    pub report: SimulationReport,
}

/// `rkube compare -o json`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Comparison {
    /// Tie-break seed used for both runs.
    pub seed: u64,
    /// Outcome under configuration A.
    pub a: ConfigOutcome,
    /// Outcome under configuration B.
    pub b: ConfigOutcome,
    /// Pods whose final node differs, by pod name.
    pub moved: Vec<MovedPod>,
}

/// The workload a pod belongs to: its controlling owner reference, else its
/// `app` (or `app.kubernetes.io/name`) label.
pub fn workload_of(pod: &Pod) -> Option<String> {
    if let Some(o) = pod.owners.iter().find(|o| o.controller) {
        return Some(format!("{}/{}/{}", pod.namespace, o.kind, o.name));
    }
    ["app", "app.kubernetes.io/name"].iter().find_map(|k| {
        pod.labels
            .get(*k)
            .map(|v| format!("{}/{k}={v}", pod.namespace))
    })
}

/// Final node of every pod known to the run: pods bound before it that were
/// not preempted, and pods it placed that were not evicted later.
fn final_nodes(cluster: &Cluster, r: &SimulationReport) -> BTreeMap<String, Option<String>> {
    let victims: HashSet<&str> = r
        .preemptions
        .iter()
        .flat_map(|p| p.victims.iter().map(String::as_str))
        .collect();
    let mut out = BTreeMap::new();
    for p in cluster.pods.iter().filter(|p| !p.terminated) {
        let key = p.key();
        let node = (!p.node_name.is_empty() && !victims.contains(key.as_str()))
            .then(|| p.node_name.clone());
        out.insert(key, node);
    }
    for p in &r.placements {
        let node = if p.evicted { None } else { p.node.clone() };
        out.insert(p.pod.clone(), node);
    }
    out
}

fn outcome(
    cluster: &Cluster,
    label: &str,
    report: SimulationReport,
    nodes_of: &BTreeMap<String, Option<String>>,
) -> ConfigOutcome {
    let nodes: Vec<NodeUsage> = report.nodes.iter().map(NodeUsage::from).collect();
    let col = |f: fn(&NodeUsage) -> f64| nodes.iter().map(f).collect::<Vec<f64>>();
    let pods_per_node = Stats::of(&col(|n| n.pods as f64));
    let cpu_utilization = Stats::of(&col(|n| n.cpu_utilization));
    let memory_utilization = Stats::of(&col(|n| n.memory_utilization));
    let mut per_workload: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    let mut seen = HashSet::new();
    for p in cluster.pods.iter().filter(|p| !p.terminated) {
        let key = p.key();
        if !seen.insert(key.clone()) {
            continue;
        }
        let (Some(w), Some(Some(node))) = (workload_of(p), nodes_of.get(&key)) else {
            continue;
        };
        *per_workload
            .entry(w)
            .or_default()
            .entry(node.clone())
            .or_default() += 1;
    }
    let workloads = per_workload
        .into_iter()
        .map(|(workload, per_node)| WorkloadSpread {
            workload,
            pods: per_node.values().sum(),
            nodes_used: per_node.len(),
            max_per_node: per_node.values().copied().max().unwrap_or(0),
            per_node,
        })
        .collect();
    ConfigOutcome {
        config: label.to_string(),
        scheduled: report.summary.scheduled,
        unschedulable: report.summary.unschedulable,
        evicted: report.summary.evicted,
        preemptions: report.summary.preemptions,
        nodes,
        pods_per_node,
        cpu_utilization,
        memory_utilization,
        workloads,
        report,
    }
}

/// Simulates `cluster` under configurations `a` and `b` (each with a label
/// for the report) with the same seed, and compares the outcomes.
pub fn compare(
    cluster: &Cluster,
    a: (&str, &KubeSchedulerConfiguration),
    b: (&str, &KubeSchedulerConfiguration),
    seed: u64,
) -> Result<Comparison, SimError> {
    let opts = SimulateOptions {
        seed,
        explain: false,
        ..Default::default()
    };
    let ra = simulate(cluster, a.1, &opts)?;
    let rb = simulate(cluster, b.1, &opts)?;
    let na = final_nodes(cluster, &ra);
    let nb = final_nodes(cluster, &rb);
    let keys: BTreeSet<&String> = na.keys().chain(nb.keys()).collect();
    let moved = keys
        .into_iter()
        .filter_map(|k| {
            let node_a = na.get(k).cloned().flatten();
            let node_b = nb.get(k).cloned().flatten();
            (node_a != node_b).then(|| MovedPod {
                pod: k.clone(),
                node_a,
                node_b,
            })
        })
        .collect();
    Ok(Comparison {
        seed,
        a: outcome(cluster, a.0, ra, &na),
        b: outcome(cluster, b.0, rb, &nb),
        moved,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(yaml: &str) -> Cluster {
        let objects = rkube_model::load::parse_documents("c.yaml", yaml).unwrap();
        rkube_model::load::build(&objects, &mut |_| Ok(false)).unwrap()
    }

    const CLUSTER: &str = r#"
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Node, metadata: {name: a}, status: {allocatable: {cpu: "4", memory: 4Gi, pods: "10"}}}
- {apiVersion: v1, kind: Node, metadata: {name: b}, status: {allocatable: {cpu: "4", memory: 4Gi, pods: "10"}}}
- {apiVersion: v1, kind: Pod, metadata: {name: old, namespace: d, labels: {app: web}}, spec: {nodeName: a, containers: [{name: x, resources: {requests: {cpu: "1", memory: 1Gi}}}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: new, namespace: d, labels: {app: web}}, spec: {containers: [{name: x, resources: {requests: {cpu: "1", memory: 1Gi}}}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: loner, namespace: d}, spec: {containers: [{name: x, resources: {requests: {cpu: "2500m"}}}]}}
"#;

    #[test]
    fn same_config_moves_nothing_and_counts_bound_pods() {
        let c = cluster(CLUSTER);
        let cfg = rkube_config::default_config();
        let r = compare(&c, ("x", &cfg), ("y", &cfg), 0).unwrap();
        assert!(r.moved.is_empty());
        assert_eq!(r.a.config, "x");
        assert_eq!(r.b.config, "y");
        assert_eq!(r.a.scheduled, 2);
        assert_eq!(r.a.unschedulable, 0);
        let pods: usize = r.a.nodes.iter().map(|n| n.pods).sum();
        assert_eq!(pods, 3);
        let cpu: i64 = r.a.nodes.iter().map(|n| n.cpu_requested_milli).sum();
        assert_eq!(cpu, 4500);
        assert!(r.a.nodes.iter().all(|n| n.cpu_allocatable_milli == 4000));
        let web = &r.a.workloads;
        assert_eq!(web.len(), 1, "loner has no workload: {web:?}");
        assert_eq!(web[0].workload, "d/app=web");
        assert_eq!(web[0].pods, 2, "the bound replica counts too");
        assert_eq!(
            web[0].nodes_used, 2,
            "LeastAllocated spreads the new replica"
        );
        assert_eq!(web[0].max_per_node, 1);
        assert!((r.a.pods_per_node.mean - 1.5).abs() < 1e-9);
    }

    #[test]
    fn unschedulable_pod_counts_and_moves() {
        let c = cluster(CLUSTER);
        let default = rkube_config::default_config();
        // A profile nobody's pods select: every pending pod stays pending.
        let other = rkube_config::load_str(
            "o.yaml",
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: other\n",
        )
        .unwrap();
        let r = compare(&c, ("default", &default), ("other", &other), 0).unwrap();
        assert_eq!(r.b.scheduled, 0);
        let moved: Vec<&str> = r.moved.iter().map(|m| m.pod.as_str()).collect();
        assert_eq!(moved, ["d/loner", "d/new"]);
        assert!(r
            .moved
            .iter()
            .all(|m| m.node_a.is_some() && m.node_b.is_none()));
        assert_eq!(r.b.workloads[0].pods, 1);
    }
}
