//! rkube's offline simulator: a cluster file and a KubeSchedulerConfiguration
//! in; placements and per-plugin explanations out. It drives the same
//! framework and plugins as the live scheduler, one pod at a time, each
//! placement updating the snapshot the next pod sees.
//!
//! The results are plain data ([`report`]); printing is the CLI's job.

pub mod capacity;
pub mod check;
pub mod compare;
pub mod drain;
mod explain_group;
pub mod live;
pub mod load;
mod queue;
pub mod replay;
pub mod report;
pub mod stats;
pub mod text;

use std::collections::HashMap;
use std::sync::Arc;

use rkube_config::KubeSchedulerConfiguration;
use rkube_framework::{explain as explain_pod, Outcome};
use rkube_framework::{Framework, Nominator, QueuedPodRef, Scheduler, Snapshot};
use rkube_model::{Cluster, LoadError, Pod};

pub use report::*;
pub use rkube_framework::Profiles;

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

impl From<rkube_framework::FrameworkError> for SimError {
    fn from(e: rkube_framework::FrameworkError) -> Self {
        SimError::Framework(e.0)
    }
}

impl SimError {
    /// True for errors caused by the input (exit code 2).
    pub fn is_input(&self) -> bool {
        !matches!(self, SimError::Runtime(_))
    }
}

/// Every profile of `cfg` with the in-tree plugins.
pub fn profiles(cfg: &KubeSchedulerConfiguration) -> Result<Profiles, SimError> {
    Ok(rkube_plugins::profiles(cfg)?)
}

/// Pending pods this configuration schedules, in queue order (the first
/// profile's QueueSort; queue time = creation timestamp, then input order).
pub fn pending_pods<'a>(cluster: &'a Cluster, profiles: &Profiles) -> Vec<&'a Pod> {
    let pending: Vec<&Pod> = cluster
        .pods
        .iter()
        .filter(|p| p.node_name.is_empty() && !p.terminated && profiles.for_pod(p).is_some())
        .collect();
    queue_order(pending, profiles)
}

/// Sorts pods as the scheduling queue pops them: the first profile's
/// QueueSort, with the queue time given by creation timestamp, then input
/// order (`seq`).
pub fn queue_order<'a>(mut pods: Vec<&'a Pod>, profiles: &Profiles) -> Vec<&'a Pod> {
    let mut arrival: Vec<(&str, u64)> = pods
        .iter()
        .map(|p| (p.creation_timestamp.as_str(), p.seq))
        .collect();
    arrival.sort();
    let rank: HashMap<u64, u64> = arrival
        .iter()
        .enumerate()
        .map(|(i, (_, seq))| (*seq, i as u64))
        .collect();
    let Some(qs) = profiles
        .frameworks()
        .first()
        .and_then(|fw| fw.queue_sort().as_queue_sort())
    else {
        return pods;
    };
    let queued = |p: &'a Pod| QueuedPodRef {
        pod: p,
        timestamp: rank.get(&p.seq).copied().unwrap_or(u64::MAX),
    };
    pods.sort_by(|a, b| {
        if qs.less(queued(a), queued(b)) {
            std::cmp::Ordering::Less
        } else if qs.less(queued(b), queued(a)) {
            std::cmp::Ordering::Greater
        } else {
            std::cmp::Ordering::Equal
        }
    });
    pods
}

/// The cluster's pod groups and their members, when GenericWorkload is on.
/// The snapshot of a cluster as the profiles' scheduler sees it: with
/// GenericWorkload on, its PodGroups too (preemption reads them).
pub(crate) fn snapshot_of(cluster: &Cluster, profiles: &Profiles) -> Snapshot {
    let mut s = Snapshot::from_cluster(cluster);
    if profiles.generic_workload {
        s.pod_groups = Some(std::sync::Arc::new(cluster.pod_groups.clone()));
    }
    s
}

fn pod_group_states(
    cluster: &Cluster,
    profiles: &Profiles,
) -> Option<rkube_framework::PodGroupStates> {
    profiles
        .generic_workload
        .then(|| rkube_framework::PodGroupStates::new(&cluster.pod_groups, &cluster.pods))
}

/// Called with (pods done, pods in the queue) as the simulation goes, e.g.
/// to drive a progress bar.
pub type Progress = std::sync::Arc<dyn Fn(usize, usize) + Send + Sync>;

/// Options for [`simulate`].
#[derive(Clone, Default)]
pub struct SimulateOptions {
    /// Tie-break seed.
    pub seed: u64,
    /// Attach an explanation to each placement.
    pub explain: bool,
    /// Progress callback.
    pub progress: Option<Progress>,
}

impl std::fmt::Debug for SimulateOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimulateOptions")
            .field("seed", &self.seed)
            .field("explain", &self.explain)
            .field("progress", &self.progress.is_some())
            .finish()
    }
}

/// The nominator as upstream's queue starts it: every pending pod that
/// carries `status.nominatedNodeName`.
fn initial_nominator(pending: &[&Pod]) -> Nominator {
    let mut n = Nominator::new();
    for p in pending {
        if !p.nominated_node_name.is_empty() {
            n.add(Arc::new((*p).clone()), &p.nominated_node_name);
        }
    }
    n
}

/// Schedules every pending pod in queue order.
///
/// Preemption: when PostFilter (DefaultPreemption) nominates a node, the
/// victims are evicted from the snapshot at once, lower-priority pods
/// nominated to that node lose their nomination (as upstream's preemption
/// executor does), the preemptor is nominated to the node and is retried
/// right away, before the next pod in the queue. Upstream retries it after
/// backoff once the victims are gone; every pod still in the queue has equal
/// or lower priority (PrioritySort), and filtering counts the nominated
/// preemptor on its node for exactly those pods, so none of them can take
/// the freed room in between: the immediate retry lands where kube-scheduler
/// converges. Evicted pods are deleted, not recreated by their controllers.
pub fn simulate(
    cluster: &Cluster,
    cfg: &KubeSchedulerConfiguration,
    opts: &SimulateOptions,
) -> Result<SimulationReport, SimError> {
    let profiles = rkube_plugins::profiles(cfg)?;
    let mut snapshot = snapshot_of(cluster, &profiles);
    let before = node_summaries(&snapshot);
    let pending = pending_pods(cluster, &profiles);
    let mut queue = queue::Queue::new(&profiles, opts.seed, &pending);
    if let Some(groups) = pod_group_states(cluster, &profiles) {
        queue.set_pod_groups(groups);
    }
    let pass = queue.run(&mut snapshot, &pending, opts)?;
    let placements = pass.placements;
    let evicted = placements.iter().filter(|p| p.evicted).count();
    let scheduled = placements.iter().filter(|p| p.node.is_some()).count() - evicted;
    let unschedulable = placements.iter().filter(|p| p.node.is_none()).count();
    Ok(SimulationReport {
        summary: Summary {
            scheduled,
            unschedulable,
            evicted,
            preemptions: pass.preemptions.len(),
        },
        placements,
        preemptions: pass.preemptions,
        nodes: node_summaries(&snapshot),
        nodes_before: before,
        batched_pods: queue.batched_pods(),
    })
}

/// What [`schedule_pending`] did.
#[derive(Debug, Clone)]
pub struct Scheduled {
    /// (pod, node) per pending pod in the order the queue decided them;
    /// `None`: left pending (or placed and then evicted by a preemptor).
    pub placements: Vec<(String, Option<String>)>,
    /// Each scheduling attempt's duration (a pod-group cycle's members
    /// each count one).
    pub latencies: Vec<std::time::Duration>,
}

/// The scheduling [`simulate`] does, on a snapshot the caller built, without
/// the report (`rkube-bench` times this loop alone).
pub fn schedule_pending(
    cluster: &Cluster,
    profiles: &Profiles,
    snapshot: &mut Snapshot,
    seed: u64,
) -> Result<Scheduled, SimError> {
    let pending = pending_pods(cluster, profiles);
    let mut queue = queue::Queue::new(profiles, seed, &pending);
    if let Some(groups) = pod_group_states(cluster, profiles) {
        queue.set_pod_groups(groups);
    }
    queue.latencies = Some(Vec::with_capacity(pending.len()));
    let pass = queue.run(snapshot, &pending, &SimulateOptions::default())?;
    let placements = pass
        .placements
        .into_iter()
        .map(|p| (p.pod, if p.evicted { None } else { p.node }))
        .collect();
    Ok(Scheduled {
        placements,
        latencies: queue.latencies.take().unwrap_or_default(),
    })
}

use rkube_framework::pre_enqueue_rejection;

fn explain_with(
    fw: &Framework,
    snapshot: &Snapshot,
    pod: &Pod,
    scheduler: &Scheduler,
    nominator: &Nominator,
) -> Result<PodExplanation, SimError> {
    let e = explain_pod(fw, snapshot, pod)
        .map_err(|s| SimError::Runtime(format!("explaining {}: {}", pod.key(), s.message())))?;
    // The node the scheduler itself would pick from this state.
    let mut probe = scheduler.clone();
    let (selected, error) = match probe.schedule_with(fw, snapshot, pod, nominator) {
        Outcome::Scheduled { node, .. } => (Some(snapshot.nodes[node].name().to_string()), None),
        Outcome::Error(s) => (None, Some(s.message())),
        Outcome::Unschedulable { .. } => (None, None),
    };
    let mut explanation = PodExplanation::from_framework(pod, fw, snapshot, &e, selected);
    if error.is_some() {
        // Upstream stops the cycle at the error: no FailedScheduling
        // message, the error is what the pod's condition and event carry.
        explanation.message.clear();
        explanation.top_nodes.clear();
        explanation.error = error;
    }
    Ok(explanation)
}

/// Summaries of every node of the cluster as given (what `explain` sees,
/// for tools that show utilization next to an explanation).
pub fn cluster_nodes(cluster: &Cluster) -> Vec<NodeSummary> {
    node_summaries(&Snapshot::from_cluster(cluster))
}

/// Explains one pending pod against the cluster as given.
pub fn explain(
    cluster: &Cluster,
    cfg: &KubeSchedulerConfiguration,
    pod_key: &str,
    seed: u64,
) -> Result<PodExplanation, SimError> {
    explain_with_profiles(cluster, &rkube_plugins::profiles(cfg)?, pod_key, seed)
}

/// [`explain`] with the profiles already built (for callers that explain
/// many pods under one configuration).
pub fn explain_with_profiles(
    cluster: &Cluster,
    profiles: &Profiles,
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
    let fw = profiles.for_pod(pod).ok_or_else(|| {
        SimError::Input(format!(
            "pod {pod_key}: spec.schedulerName {:?} matches no profile of the configuration",
            pod.scheduler_name
        ))
    })?;
    let mut unbound = pod.clone();
    let snapshot = if pod.node_name.is_empty() {
        snapshot_of(cluster, profiles)
    } else {
        // Explain a bound pod as if it were pending: take it off its node.
        unbound.node_name.clear();
        let mut c = cluster.clone();
        c.pods.retain(|p| p.key() != pod_key);
        snapshot_of(&c, profiles)
    };
    let scheduler = Scheduler::new(seed, profiles.percentage_of_nodes_to_score);
    let nominator = initial_nominator(&pending_pods(cluster, profiles));
    let groups = pod_group_states(cluster, profiles);
    let ctx = rkube_framework::EnqueueContext {
        dra: snapshot.dra.as_deref(),
        pod_groups: groups.as_ref(),
    };
    if let Some(gate) = rkube_framework::pre_enqueue_rejection_in(fw, &unbound, &ctx) {
        return Ok(PodExplanation {
            pod: pod_key.to_string(),
            profile: fw.profile_name.clone(),
            nodes: Vec::new(),
            selected_node: None,
            top_nodes: Vec::new(),
            message: gate,
            error: None,
            live: None,
            pod_group: None,
        });
    }
    if let Some(groups) = &groups {
        if let Some(e) = explain_group::explain_group(cluster, profiles, fw, groups, pod, seed)? {
            return Ok(e);
        }
    }
    explain_with(fw, &snapshot, &unbound, &scheduler, &nominator)
}
