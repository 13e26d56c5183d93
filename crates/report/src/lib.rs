//! What rkube shows about a scheduling decision, in the shapes other tools
//! read: a pod's explanation as `rkube explain -o json` prints it (filter
//! verdicts and per-plugin scores per node, the selected node, upstream's
//! FailedScheduling message, and with `--kubeconfig` the cluster's own
//! verdict), and the plain-text tables the CLI prints and the live
//! scheduler logs at `-v=10`. Data and rendering only; no I/O.

pub mod text;

use rkube_framework::Explanation;
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
    /// When DynamicResources could not allocate the pod's claims here: per
    /// request, the node's devices that match it and are free.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<rkube_dra::diagnose::RequestDiagnosis>,
}

/// Upstream's Filter reason when the claims cannot be allocated on a node.
const CANNOT_ALLOCATE: &str = "cannot allocate all claims";

/// Per node that DynamicResources rejected with "cannot allocate all
/// claims", why, request by request.
fn device_diagnoses(pod: &Pod, snapshot: &Snapshot, nodes: &mut [NodeExplanation]) {
    let Some(dra) = snapshot.dra.as_deref() else {
        return;
    };
    if !pod.has_resource_claims() {
        return;
    }
    let Ok(claims) = rkube_dra::resourceclaim::pod_claims(pod, dra) else {
        return;
    };
    let unallocated: Vec<_> = claims
        .into_iter()
        .filter(|c| c.allocation.is_none())
        .collect();
    if unallocated.is_empty() {
        return;
    }
    let state = rkube_dra::allocator::AllocatedState::of(dra);
    let cache = rkube_dra::cel::Cache::default();
    for n in nodes {
        let rejected = n.filters.iter().any(|f| {
            f.plugin == "DynamicResources" && f.reasons.iter().any(|r| r == CANNOT_ALLOCATE)
        });
        if !rejected {
            continue;
        }
        if let Some(info) = snapshot.get(&n.name) {
            n.devices =
                rkube_dra::diagnose::diagnose(dra, &state, &cache, &info.node, &unallocated);
        }
    }
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
    /// The scheduler's error when a plugin failed internally (upstream's
    /// `SchedulerError`: the pod is retried with back-off, not marked
    /// unschedulable), else absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// With `--kubeconfig`: what the cluster's scheduler reported, and
    /// whether rkube agrees.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub live: Option<LiveVerdict>,
    /// With GenericWorkload on, for a member of a pod group: the pod-group
    /// cycle the pod is scheduled in. The node table above is then the
    /// pod's own turn in that cycle (earlier members assumed).
    #[serde(rename = "podGroup", skip_serializing_if = "Option::is_none")]
    pub pod_group: Option<GroupExplanation>,
}

/// The pod-group cycle of an explained pod's group (GenericWorkload): each
/// pending member's turn, the verdict, why per node, and the smallest
/// addition of nodes that makes the group fit.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct GroupExplanation {
    /// `namespace/name` of the PodGroup.
    pub group: String,
    /// The gang's `minCount`; absent for the basic policy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_count: Option<i32>,
    /// Members already bound before this cycle.
    pub scheduled_before: usize,
    /// The group's members are bound by this cycle.
    pub scheduled: bool,
    /// The pending members in the order the cycle tries them.
    pub members: Vec<MemberVerdict>,
    /// Per node (by name): the members the simulation pass placed there and
    /// why each member that fit nowhere (the first 16 of them) was
    /// rejected there.
    pub nodes: Vec<GroupNode>,
    /// When the group does not fit: the fewest copies of one existing node
    /// that make it fit, if any (see `rkube explain` in docs/what-ifs.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fits_with: Option<NodesToAdd>,
    /// The search for nodes to add stopped at its limits (a huge gang or
    /// many node shapes): `fitsWith`, when present, may not be the fewest,
    /// and when absent, more nodes may still help.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub search_limited: bool,
    /// When the group does not fit but workload-aware preemption
    /// (DefaultPreemption's PodGroupPostFilter) makes room for it: the pods
    /// it evicts and the nodes the members are nominated to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preemption: Option<GroupPreemption>,
}

/// What workload-aware preemption would do for a group.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct GroupPreemption {
    /// `namespace/name` of each pod evicted, most important first.
    pub victims: Vec<String>,
    /// The members nominated, in the cycle's order.
    pub nominated: Vec<Nomination>,
}

/// A member nominated to a node.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Nomination {
    /// `namespace/name`.
    pub pod: String,
    /// The node.
    pub node: String,
}

/// One member's turn in the pod-group cycle.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct MemberVerdict {
    /// `namespace/name`.
    pub pod: String,
    /// The simulation pass reached this member (it stops as soon as the
    /// group can no longer reach `minCount`).
    pub tried: bool,
    /// The node the scheduling algorithm picked in the simulation pass.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fits_on: Option<String>,
    /// The node it is bound to when the group succeeds.
    pub node: Option<String>,
    /// Its FailedScheduling message when it stays pending.
    pub message: String,
}

/// One node as the pod-group cycle saw it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct GroupNode {
    /// Node name.
    pub name: String,
    /// Members the simulation pass placed here.
    pub placed: Vec<String>,
    /// Members that fit on no node, and why this node rejected each.
    pub rejected: Vec<MemberRejection>,
}

/// Why a node rejected a member.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct MemberRejection {
    /// `namespace/name`.
    pub pod: String,
    /// The filter plugin that rejected it.
    pub plugin: String,
    /// Its reasons.
    pub reasons: Vec<String>,
}

/// Nodes to add for a group to fit.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct NodesToAdd {
    /// How many copies.
    pub count: usize,
    /// The existing node copied (its labels, taints and allocatable).
    pub like: String,
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
                devices: Vec::new(),
            })
            .collect();
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        device_diagnoses(pod, snapshot, &mut nodes);
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
            error: None,
            live: None,
            pod_group: None,
        }
    }
}

/// The pod's `PodScheduled` condition as the API server holds it.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// `True` or `False`.
    pub status: String,
    /// E.g. `Unschedulable`, `SchedulingGated`.
    pub reason: String,
    /// The scheduler's message (FailedScheduling's text).
    pub message: String,
}

/// What the cluster says about a pod's scheduling.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Observed {
    /// `spec.nodeName`, when the pod is bound.
    pub node: Option<String>,
    /// The `PodScheduled` condition, when the scheduler has set one.
    pub condition: Option<Condition>,
}

impl Observed {
    /// Reads `spec.nodeName` and the `PodScheduled` condition of a Pod as
    /// the API server returns it.
    pub fn from_pod(pod: &serde_json::Value) -> Self {
        let node = pod["spec"]["nodeName"]
            .as_str()
            .filter(|n| !n.is_empty())
            .map(str::to_string);
        let condition = pod["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "PodScheduled")
            .map(|c| {
                let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
                Condition {
                    status: s("status"),
                    reason: s("reason"),
                    message: s("message"),
                }
            });
        Observed { node, condition }
    }
}

/// rkube's verdict set against the cluster's.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct LiveVerdict {
    /// What the cluster says.
    pub observed: Observed,
    /// `true` when rkube reaches the same verdict, `false` when it does not,
    /// `null` when the cluster's scheduler has not decided yet.
    pub agrees: Option<bool>,
    /// One sentence saying why.
    pub note: String,
}
