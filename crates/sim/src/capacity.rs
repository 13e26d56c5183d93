//! `rkube capacity`: how many more pods of given shapes fit, with
//! cluster-capacity's semantics — clone the pod and schedule the clones one
//! by one on the cluster as given, each placement updating what the next
//! clone sees, until one does not fit (its FailedScheduling message is the
//! answer to "why not one more").
//!
//! Several shapes are placed in order, or interleaved by ratios (`a.yaml:3`
//! and `b.yaml:1`: three of a, one of b, again). A shape is finished at its
//! first failure; the others go on. Pending pods of the cluster are not
//! scheduled, and a clone never preempts: a clone that would fit only by
//! evicting pods counts as not fitting.

use std::collections::BTreeMap;

use rkube_config::KubeSchedulerConfiguration;
use rkube_framework::{explain as explain_pod, Outcome};
use rkube_framework::{Nominator, Scheduler};
use rkube_model::{Cluster, Pod};
use serde::Serialize;

use crate::{node_summaries, NodeSummary, PodExplanation, SimError};

/// One pod shape to clone.
#[derive(Debug, Clone)]
pub struct Shape {
    /// Where it came from (the file), for the report.
    pub source: String,
    /// The pod to clone (its name is the clones' prefix).
    pub pod: Pod,
    /// Clones per round when shapes are interleaved (at least 1).
    pub ratio: u32,
}

/// Options for [`capacity`].
#[derive(Debug, Clone)]
pub struct CapacityOptions {
    /// Tie-break seed.
    pub seed: u64,
    /// Most clones in all (a bound for shapes nothing stops, e.g. a pod
    /// without requests on nodes that allow millions of pods).
    pub max: usize,
    /// Interleave the shapes by their ratios; otherwise each shape is
    /// filled until it stops before the next one starts.
    pub interleave: bool,
}

/// Why a shape stopped on one node: the filter that rejected its last clone.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct NodeStop {
    /// Node name.
    pub name: String,
    /// The first filter plugin that rejected the clone there.
    pub plugin: String,
    /// Its reasons.
    pub reasons: Vec<String>,
}

/// The clone that did not fit.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Stop {
    /// The clone, `namespace/name`.
    pub pod: String,
    /// Upstream's FailedScheduling message for it.
    pub message: String,
    /// Per node, why it did not fit (nodes that passed every filter are
    /// absent: there the clone lost only to preemption's rules or scores).
    pub nodes: Vec<NodeStop>,
}

/// One shape's answer.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ShapeCapacity {
    /// Where the shape came from.
    pub shape: String,
    /// The shape's pod, `namespace/name`.
    pub pod: String,
    /// Clones placed.
    pub count: usize,
    /// Clones placed per node (nodes with none are absent).
    pub per_node: BTreeMap<String, usize>,
    /// The first clone that did not fit, or null when `max` ended the run
    /// first.
    pub stopped: Option<Stop>,
}

/// `rkube capacity -o json`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CapacityReport {
    /// One entry per shape, in the order given.
    pub shapes: Vec<ShapeCapacity>,
    /// Clones placed in all.
    pub total: usize,
    /// True when the run ended at `max` with shapes still fitting.
    pub max_reached: bool,
    /// Nodes after the clones were placed.
    pub nodes: Vec<NodeSummary>,
}

/// Clones each shape until it no longer fits (see the module doc).
pub fn capacity(
    cluster: &Cluster,
    cfg: &KubeSchedulerConfiguration,
    shapes: &[Shape],
    opts: &CapacityOptions,
) -> Result<CapacityReport, SimError> {
    let profiles = rkube_plugins::profiles(cfg)?;
    let mut frameworks = Vec::with_capacity(shapes.len());
    for s in shapes {
        let fw = profiles.for_pod(&s.pod).ok_or_else(|| {
            SimError::Input(format!(
                "{}: pod {}: spec.schedulerName {:?} is not a profile of this configuration",
                s.source,
                s.pod.key(),
                s.pod.scheduler_name
            ))
        })?;
        if let (true, Some(group)) = (profiles.generic_workload, &s.pod.pod_group) {
            // Under GenericWorkload a member is only ever scheduled with its
            // group; clones one by one would answer another question.
            return Err(SimError::Input(format!(
                "{}: pod {}: spec.schedulingGroup.podGroupName {group:?}: capacity clones pods one at a time, and a pod group's members are scheduled together; `rkube explain` on a member of the group says whether it fits and how many nodes it would need",
                s.source,
                s.pod.key(),
            )));
        }
        frameworks.push(fw);
    }
    let mut snapshot = crate::snapshot_of(cluster, &profiles);
    let groups = crate::pod_group_states(cluster, &profiles);
    let mut scheduler = Scheduler::new(opts.seed, profiles.percentage_of_nodes_to_score);
    scheduler.opportunistic_batching = profiles.opportunistic_batching;
    let nominator = Nominator::new();
    let mut results: Vec<ShapeCapacity> = shapes
        .iter()
        .map(|s| ShapeCapacity {
            shape: s.source.clone(),
            pod: s.pod.key(),
            count: 0,
            per_node: BTreeMap::new(),
            stopped: None,
        })
        .collect();
    let mut done = vec![false; shapes.len()];
    let mut total = 0usize;
    let mut max_reached = false;
    'rounds: while done.iter().any(|d| !d) {
        for (i, shape) in shapes.iter().enumerate() {
            let fw = frameworks[i];
            // Filled in order: this shape's "round" lasts until it stops.
            let per_round = if opts.interleave {
                shape.ratio.max(1) as usize
            } else {
                usize::MAX
            };
            for _ in 0..per_round {
                if done[i] {
                    break;
                }
                if total >= opts.max {
                    max_reached = true;
                    break 'rounds;
                }
                let clone = clone_of(&shape.pod, i, results[i].count);
                let ctx = rkube_framework::EnqueueContext {
                    dra: snapshot.dra.as_deref(),
                    pod_groups: groups.as_ref(),
                };
                if let Some(gate) = rkube_framework::pre_enqueue_rejection_in(fw, &clone, &ctx) {
                    results[i].stopped = Some(Stop {
                        pod: clone.key(),
                        message: gate,
                        nodes: Vec::new(),
                    });
                    done[i] = true;
                    break;
                }
                match scheduler.schedule_one(fw, &mut snapshot, &clone, &nominator) {
                    Outcome::Scheduled { node, .. } => {
                        let name = snapshot.nodes[node].name().to_string();
                        results[i].count += 1;
                        *results[i].per_node.entry(name).or_default() += 1;
                        total += 1;
                    }
                    Outcome::Unschedulable { message, .. } => {
                        let e = explain_pod(fw, &snapshot, &clone).map_err(|s| {
                            SimError::Runtime(format!(
                                "explaining {}: {}",
                                clone.key(),
                                s.message()
                            ))
                        })?;
                        let explained =
                            PodExplanation::from_framework(&clone, fw, &snapshot, &e, None);
                        results[i].stopped = Some(Stop {
                            pod: clone.key(),
                            message,
                            nodes: node_stops(&explained),
                        });
                        done[i] = true;
                    }
                    Outcome::Error(s) => {
                        return Err(SimError::Runtime(format!(
                            "scheduling {}: {}",
                            clone.key(),
                            s.message()
                        )))
                    }
                }
            }
        }
    }
    Ok(CapacityReport {
        shapes: results,
        total,
        max_reached,
        nodes: node_summaries(&snapshot),
    })
}

/// The `n`th clone of shape `i`: the shape's pod under a new name and uid,
/// pending, with no nomination.
fn clone_of(pod: &Pod, i: usize, n: usize) -> Pod {
    let mut c = pod.clone();
    c.name = format!("{}-{n}", pod.name);
    c.uid = format!("rkube-capacity-{i}-{n}");
    c.node_name.clear();
    c.nominated_node_name.clear();
    c
}

/// The first rejecting filter of every infeasible node.
fn node_stops(e: &PodExplanation) -> Vec<NodeStop> {
    e.nodes
        .iter()
        .filter(|n| !n.feasible)
        .filter_map(|n| {
            n.filters
                .iter()
                .find(|f| f.code != "Success" && f.code != "Skip")
                .map(|f| NodeStop {
                    name: n.name.clone(),
                    plugin: f.plugin.clone(),
                    reasons: f.reasons.clone(),
                })
        })
        .collect()
}
