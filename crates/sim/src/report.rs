//! Result data of `simulate` and `explain`, in the JSON shapes other tools
//! rely on (field names camelCase; fields may be added, never renamed).

use std::collections::BTreeMap;

use rkube_framework::Snapshot;
use serde::Serialize;

pub use rkube_report::{
    FilterResult, GroupExplanation, GroupNode, GroupPreemption, MemberRejection, MemberVerdict,
    NodeExplanation, NodesToAdd, Nomination, PodExplanation, ScoreResult,
};

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
    /// The devices allocated to the pod's claims (DRA), when placed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<AllocatedDevice>,
}

/// A device allocated to one of a placed pod's ResourceClaims.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct AllocatedDevice {
    /// `namespace/name` of the claim.
    pub claim: String,
    /// The request (`request` or `request/subrequest`).
    pub request: String,
    /// Driver.
    pub driver: String,
    /// Pool.
    pub pool: String,
    /// Device.
    pub device: String,
}

impl AllocatedDevice {
    /// The devices of `pod`'s allocated claims in `dra`, the claim made
    /// for its extended resources backed by DRA last.
    pub fn of(pod: &rkube_model::Pod, dra: Option<&rkube_model::dra::Dra>) -> Vec<Self> {
        let Some(dra) = dra else {
            return Vec::new();
        };
        let Ok(mut claims) = rkube_dra::resourceclaim::pod_claims(pod, dra) else {
            return Vec::new();
        };
        claims.extend(
            dra.claims
                .range((pod.namespace.clone(), String::new())..)
                .take_while(|(k, _)| k.0 == pod.namespace)
                .map(|(_, c)| c.as_ref())
                .filter(|c| {
                    c.extended_resource_claim && c.owner_pod_uid.as_deref() == Some(&pod.uid)
                }),
        );
        claims
            .iter()
            .flat_map(|c| {
                c.allocation
                    .iter()
                    .flat_map(|a| a.devices.iter())
                    .map(|d| AllocatedDevice {
                        claim: format!("{}/{}", c.namespace, c.name),
                        request: d.request.clone(),
                        driver: d.driver.clone(),
                        pool: d.pool.clone(),
                        device: d.device.clone(),
                    })
            })
            .collect()
    }
}

/// One preemption: a pending pod evicted lower-priority pods from a node,
/// or a PodGroup (GenericWorkload's workload-aware preemption) evicted them
/// from the cluster.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Preemption {
    /// `namespace/name` of the preempting pod, or of the PodGroup.
    pub preemptor: String,
    /// The preemptor is a PodGroup.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub pod_group: bool,
    /// The node it was nominated to; for a PodGroup, the nodes its members
    /// were nominated to, comma-separated in name order.
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
    /// Pods OpportunisticBatching placed on a hint (for the sequence
    /// comparison with upstream; not part of the report's JSON).
    #[serde(skip)]
    pub batched_pods: u64,
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
