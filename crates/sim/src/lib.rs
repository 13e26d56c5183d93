//! rkube's offline simulator: a cluster file and a KubeSchedulerConfiguration
//! in; placements and per-plugin explanations out. It drives the same
//! framework and plugins as the live scheduler, one pod at a time, each
//! placement updating the snapshot the next pod sees.
//!
//! The results are plain data ([`report`]); printing is the CLI's job.

pub mod load;
pub mod report;

use std::collections::HashMap;
use std::sync::Arc;

use rkube_config::KubeSchedulerConfiguration;
use rkube_framework::schedule::{explain as explain_pod, Outcome};
use rkube_framework::{Framework, Point, QueuedPodRef, Scheduler, Snapshot};
use rkube_model::{Cluster, LoadError, Pod};

pub use report::*;

/// Why a simulation could not run.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// Malformed or unreadable input (exit code 2).
    #[error("{0}")]
    Input(String),
    /// A cluster file was rejected (exit code 2).
    #[error(transparent)]
    Load(LoadError),
    /// The configuration was rejected (exit code 2).
    #[error(transparent)]
    Config(rkube_config::ConfigError),
    /// A profile could not be built (exit code 2).
    #[error("{0}")]
    Framework(String),
    /// A plugin failed at run time (exit code 1).
    #[error("{0}")]
    Runtime(String),
}

impl SimError {
    /// True for errors caused by the input (exit code 2).
    pub fn is_input(&self) -> bool {
        !matches!(self, SimError::Runtime(_))
    }
}

/// The frameworks of every profile, by scheduler name.
pub struct Profiles {
    frameworks: Vec<Framework>,
    by_name: HashMap<String, usize>,
    /// Global percentageOfNodesToScore.
    pub percentage_of_nodes_to_score: i32,
}

impl Profiles {
    /// Builds every profile of a configuration with the in-tree registry.
    pub fn new(cfg: &KubeSchedulerConfiguration) -> Result<Self, SimError> {
        let registry = rkube_plugins::in_tree();
        let mut frameworks = Vec::new();
        let mut by_name = HashMap::new();
        for (i, p) in cfg.profiles.iter().enumerate() {
            let fw = Framework::new(p, i, &registry).map_err(|e| SimError::Framework(e.0))?;
            by_name.insert(fw.profile_name.clone(), i);
            frameworks.push(fw);
        }
        Ok(Profiles {
            frameworks,
            by_name,
            percentage_of_nodes_to_score: cfg.percentage_of_nodes_to_score.unwrap_or(0),
        })
    }

    /// The framework for a pod's `schedulerName`.
    pub fn for_pod(&self, pod: &Pod) -> Option<&Framework> {
        self.by_name
            .get(&pod.scheduler_name)
            .map(|&i| &self.frameworks[i])
    }
}

/// Pending pods this configuration schedules, in queue order (the first
/// profile's QueueSort; queue time = creation timestamp, then input order).
pub fn pending_pods<'a>(cluster: &'a Cluster, profiles: &Profiles) -> Vec<&'a Pod> {
    let mut pending: Vec<&Pod> = cluster
        .pods
        .iter()
        .filter(|p| p.node_name.is_empty() && !p.terminated && profiles.for_pod(p).is_some())
        .collect();
    let mut arrival: Vec<(&str, u64)> = pending
        .iter()
        .map(|p| (p.creation_timestamp.as_str(), p.seq))
        .collect();
    arrival.sort();
    let rank: HashMap<u64, u64> = arrival
        .iter()
        .enumerate()
        .map(|(i, (_, seq))| (*seq, i as u64))
        .collect();
    if let Some(fw) = profiles.frameworks.first() {
        let qs = fw.queue_sort().as_queue_sort().expect("framework checked");
        pending.sort_by(|a, b| {
            let ra = QueuedPodRef {
                pod: a,
                timestamp: rank[&a.seq],
            };
            let rb = QueuedPodRef {
                pod: b,
                timestamp: rank[&b.seq],
            };
            if qs.less(ra, rb) {
                std::cmp::Ordering::Less
            } else if qs.less(rb, ra) {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        });
    }
    pending
}

/// Options for [`simulate`].
#[derive(Debug, Clone, Default)]
pub struct SimulateOptions {
    /// Tie-break seed.
    pub seed: u64,
    /// Attach an explanation to each placement.
    pub explain: bool,
}

/// Schedules every pending pod in queue order.
pub fn simulate(
    cluster: &Cluster,
    cfg: &KubeSchedulerConfiguration,
    opts: &SimulateOptions,
) -> Result<SimulationReport, SimError> {
    let profiles = Profiles::new(cfg)?;
    let mut snapshot = Snapshot::from_cluster(cluster);
    let before = node_summaries(&snapshot);
    let mut scheduler = Scheduler::new(opts.seed, profiles.percentage_of_nodes_to_score);
    let mut placements = Vec::new();
    for pod in pending_pods(cluster, &profiles) {
        let fw = profiles.for_pod(pod).expect("filtered");
        if let Some(gate) = pre_enqueue_rejection(fw, pod) {
            placements.push(Placement {
                pod: pod.key(),
                node: None,
                message: gate,
                explain: None,
            });
            continue;
        }
        let explanation = if opts.explain {
            Some(explain_with(fw, &snapshot, pod, &scheduler)?)
        } else {
            None
        };
        match scheduler.schedule(fw, &snapshot, pod) {
            Outcome::Scheduled { node, .. } => {
                let mut placed = pod.clone();
                placed.node_name = snapshot.nodes[node].name().to_string();
                let name = placed.node_name.clone();
                snapshot.assume(node, Arc::new(placed));
                placements.push(Placement {
                    pod: pod.key(),
                    node: Some(name),
                    message: String::new(),
                    explain: explanation,
                });
            }
            Outcome::Unschedulable { message, .. } => placements.push(Placement {
                pod: pod.key(),
                node: None,
                message,
                explain: explanation,
            }),
            Outcome::Error(s) => {
                return Err(SimError::Runtime(format!(
                    "scheduling {}: {}",
                    pod.key(),
                    s.message()
                )))
            }
        }
    }
    let scheduled = placements.iter().filter(|p| p.node.is_some()).count();
    let unschedulable = placements.len() - scheduled;
    Ok(SimulationReport {
        placements,
        nodes: node_summaries(&snapshot),
        nodes_before: before,
        summary: Summary {
            scheduled,
            unschedulable,
        },
    })
}

fn pre_enqueue_rejection(fw: &Framework, pod: &Pod) -> Option<String> {
    fw.plugins(Point::PreEnqueue).iter().find_map(|p| {
        let s = p
            .as_pre_enqueue()
            .expect("framework checked")
            .pre_enqueue(pod);
        (!s.is_success()).then(|| s.message())
    })
}

fn explain_with(
    fw: &Framework,
    snapshot: &Snapshot,
    pod: &Pod,
    scheduler: &Scheduler,
) -> Result<PodExplanation, SimError> {
    let e = explain_pod(fw, snapshot, pod)
        .map_err(|s| SimError::Runtime(format!("explaining {}: {}", pod.key(), s.message())))?;
    // The node the scheduler itself would pick from this state.
    let mut probe = scheduler.clone();
    let selected = match probe.schedule(fw, snapshot, pod) {
        Outcome::Scheduled { node, .. } => Some(snapshot.nodes[node].name().to_string()),
        _ => None,
    };
    Ok(PodExplanation::from_framework(
        pod, fw, snapshot, &e, selected,
    ))
}

/// Explains one pending pod against the cluster as given.
pub fn explain(
    cluster: &Cluster,
    cfg: &KubeSchedulerConfiguration,
    pod_key: &str,
    seed: u64,
) -> Result<PodExplanation, SimError> {
    let pod = cluster
        .pods
        .iter()
        .find(|p| p.key() == pod_key)
        .ok_or_else(|| {
            SimError::Input(format!(
                "pod {pod_key}: not found in the cluster file (give it as namespace/name)"
            ))
        })?;
    let profiles = Profiles::new(cfg)?;
    let fw = profiles.for_pod(pod).ok_or_else(|| {
        SimError::Input(format!(
            "pod {pod_key}: spec.schedulerName {:?} matches no profile of the configuration",
            pod.scheduler_name
        ))
    })?;
    let mut unbound = pod.clone();
    let snapshot = if pod.node_name.is_empty() {
        Snapshot::from_cluster(cluster)
    } else {
        // Explain a bound pod as if it were pending: take it off its node.
        unbound.node_name.clear();
        let mut c = cluster.clone();
        c.pods.retain(|p| p.key() != pod_key);
        Snapshot::from_cluster(&c)
    };
    let scheduler = Scheduler::new(seed, profiles.percentage_of_nodes_to_score);
    if let Some(gate) = pre_enqueue_rejection(fw, &unbound) {
        return Ok(PodExplanation {
            pod: pod_key.to_string(),
            profile: fw.profile_name.clone(),
            nodes: Vec::new(),
            selected_node: None,
            top_nodes: Vec::new(),
            message: gate,
        });
    }
    explain_with(fw, &snapshot, &unbound, &scheduler)
}
