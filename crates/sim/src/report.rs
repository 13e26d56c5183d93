//! Result data of `simulate` and `explain`, in the JSON shapes other tools
//! rely on (field names camelCase; fields may be added, never renamed).

use std::collections::BTreeMap;

use rkube_framework::schedule::Explanation;
use rkube_framework::{Framework, Snapshot};
use rkube_model::Pod;
use serde::Serialize;

/// One filter plugin's verdict on a node.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct FilterResult {
    /// Plugin name.
    pub plugin: String,
    /// `Success`, `Unschedulable`, `UnschedulableAndUnresolvable` or `Skip`.
    pub code: String,
    /// Reasons (empty on success).
    pub reasons: Vec<String>,
}

/// One score plugin's result on a node.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ScoreResult {
    /// Plugin name.
    pub plugin: String,
    /// Score().
    pub raw: i64,
    /// After NormalizeScore.
    pub normalized: i64,
    /// Profile weight.
    pub weight: i64,
    /// normalized × weight.
    pub weighted: i64,
}

/// Everything explained for one node.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct NodeExplanation {
    /// Node name.
    pub name: String,
    /// Passed every filter.
    pub feasible: bool,
    /// Filter verdicts in profile order.
    pub filters: Vec<FilterResult>,
    /// Scores (feasible nodes; plugins that skipped at PreScore are absent).
    pub scores: Vec<ScoreResult>,
    /// Sum of weighted scores.
    pub total: i64,
}

/// `rkube explain -o json`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PodExplanation {
    /// `namespace/name`.
    pub pod: String,
    /// Profile (`schedulerName`).
    pub profile: String,
    /// Nodes sorted by name.
    pub nodes: Vec<NodeExplanation>,
    /// The node the scheduler picks, or null.
    pub selected_node: Option<String>,
    /// Feasible nodes sharing the highest total.
    pub top_nodes: Vec<String>,
    /// Upstream's FailedScheduling message when no node fits, else empty.
    pub message: String,
    /// With `--kubeconfig`: what the cluster's scheduler reported, and
    /// whether rkube agrees.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub live: Option<crate::live::LiveVerdict>,
}

impl PodExplanation {
    /// Converts the framework's explanation.
    pub fn from_framework(
        pod: &Pod,
        fw: &Framework,
        snapshot: &Snapshot,
        e: &Explanation,
        selected_node: Option<String>,
    ) -> Self {
        let mut nodes: Vec<NodeExplanation> = e
            .nodes
            .iter()
            .map(|n| NodeExplanation {
                name: snapshot.nodes[n.node].name().to_string(),
                feasible: n.feasible,
                filters: n
                    .filters
                    .iter()
                    .map(|f| FilterResult {
                        plugin: f.plugin.to_string(),
                        code: f.code.as_str().to_string(),
                        reasons: f.reasons.clone(),
                    })
                    .collect(),
                scores: n
                    .scores
                    .iter()
                    .map(|s| ScoreResult {
                        plugin: s.plugin.to_string(),
                        raw: s.raw,
                        normalized: s.normalized,
                        weight: s.weight,
                        weighted: s.weighted,
                    })
                    .collect(),
                total: n.total,
            })
            .collect();
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        let mut top_nodes: Vec<String> = e
            .top_nodes
            .iter()
            .map(|&i| snapshot.nodes[i].name().to_string())
            .collect();
        top_nodes.sort();
        PodExplanation {
            pod: pod.key(),
            profile: fw.profile_name.clone(),
            nodes,
            selected_node,
            top_nodes,
            message: e.message.clone(),
            live: None,
        }
    }
}

/// One pod's outcome in a simulation.
#[derive(Debug, Clone, Serialize)]
pub struct Placement {
    /// `namespace/name`.
    pub pod: String,
    /// Chosen node, or null.
    pub node: Option<String>,
    /// FailedScheduling message when `node` is null.
    pub message: String,
    /// Node the pod is nominated to while it stays pending (preemption
    /// chose it but the pod still does not fit), else absent.
    #[serde(rename = "nominatedNode", skip_serializing_if = "Option::is_none")]
    pub nominated_node: Option<String>,
    /// The pod was placed earlier in the run and then evicted by a
    /// preemptor; `node` is where it ran.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub evicted: bool,
    /// `namespace/name` of the pod whose preemption evicted this one.
    #[serde(rename = "preemptedBy", skip_serializing_if = "Option::is_none")]
    pub preempted_by: Option<String>,
    /// Explanation (with `--explain`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explain: Option<PodExplanation>,
}

/// One preemption: a pending pod evicted lower-priority pods from a node.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Preemption {
    /// `namespace/name` of the preempting pod.
    pub preemptor: String,
    /// The node it was nominated to.
    pub node: String,
    /// `namespace/name` of each evicted pod, most important first.
    pub victims: Vec<String>,
}

/// A node after the simulation.
#[derive(Debug, Clone, Serialize)]
pub struct NodeSummary {
    /// Name.
    pub name: String,
    /// Number of pods on it.
    pub pods: usize,
    /// Requested resources.
    pub requested: BTreeMap<String, String>,
    /// Allocatable resources.
    pub allocatable: BTreeMap<String, String>,
    /// Requested milli-CPU (for tools that compute utilization).
    #[serde(rename = "requestedMilliCpu")]
    pub requested_milli_cpu: i64,
    /// Requested memory bytes.
    #[serde(rename = "requestedMemoryBytes")]
    pub requested_memory: i64,
    /// Allocatable milli-CPU.
    #[serde(rename = "allocatableMilliCpu")]
    pub allocatable_milli_cpu: i64,
    /// Allocatable memory bytes.
    #[serde(rename = "allocatableMemoryBytes")]
    pub allocatable_memory: i64,
}

/// Counts.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Pods placed (and not evicted later in the run).
    pub scheduled: usize,
    /// Pods left pending.
    pub unschedulable: usize,
    /// Pods placed in this run and then evicted by preemption.
    pub evicted: usize,
    /// Preemptions (each evicting one or more pods).
    pub preemptions: usize,
}

/// `rkube simulate -o json`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SimulationReport {
    /// Outcomes in queue order.
    pub placements: Vec<Placement>,
    /// Preemptions in the order they happened.
    pub preemptions: Vec<Preemption>,
    /// Nodes after the simulation.
    pub nodes: Vec<NodeSummary>,
    /// Nodes before the simulation.
    #[serde(skip)]
    pub nodes_before: Vec<NodeSummary>,
    /// Counts.
    pub summary: Summary,
}

/// Summaries of every node of a snapshot.
pub fn node_summaries(snapshot: &Snapshot) -> Vec<NodeSummary> {
    snapshot
        .nodes
        .iter()
        .map(|n| {
            let mut allocatable = n.allocatable.to_display_map();
            allocatable.insert("pods".into(), n.allocatable.allowed_pod_number.to_string());
            NodeSummary {
                name: n.name().to_string(),
                pods: n.pods.len(),
                requested: n.requested.to_display_map(),
                allocatable,
                requested_milli_cpu: n.requested.milli_cpu,
                requested_memory: n.requested.memory,
                allocatable_milli_cpu: n.allocatable.milli_cpu,
                allocatable_memory: n.allocatable.memory,
            }
        })
        .collect()
}
