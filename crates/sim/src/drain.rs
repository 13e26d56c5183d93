//! `rkube drain`: what `kubectl drain` followed by rescheduling would do,
//! or (`delete`) what removing the nodes would do.
//!
//! The steps, each as upstream does it:
//!
//! 1. **Steady state.** The cluster's pending pods are scheduled first, as
//!    `simulate` would: the "before" state is the simulated steady state,
//!    not the file as given, so pods that were only waiting for a node do
//!    not compete with the replacements.
//! 2. **Cordon** every node (kubectl cordons them all before draining the
//!    first): `spec.unschedulable = true` (NodeUnschedulable then rejects
//!    pods that do not tolerate `node.kubernetes.io/unschedulable:NoSchedule`)
//!    and the cluster autoscaler's `ToBeDeletedByClusterAutoscaler:NoSchedule`
//!    taint. A cordoned node stays in the cluster, so it is still a topology
//!    domain (PodTopologySpread counts its zone with 0 pods).
//! 3. **Filter** each node's pods with kubectl's filters, in kubectl's order
//!    (`k8s.io/kubectl/pkg/drain/filters.go`): DaemonSet-managed pods are
//!    ignored (rkube always behaves as `--ignore-daemonsets`; kubectl's check
//!    that the DaemonSet still exists is not made), mirror pods skipped,
//!    finished pods (Succeeded, Failed) deleted without further checks, pods
//!    with `emptyDir` volumes refused without `--delete-emptydir-data`, pods
//!    without a controller refused without `--force`. When any pod of a node
//!    is refused, nothing on that node is evicted (kubectl reports the errors,
//!    leaves the node cordoned and goes on with the next node).
//! 4. **Evict** through the Eviction API's rules ([`budget`]): a pod two
//!    budgets cover is refused (500), a budget with no disruption left
//!    blocks (429) and the eviction is retried after the replacements of the
//!    evictions that went through are scheduled — kubectl retries every 5 s
//!    — until a round evicts nothing. What is still blocked is reported with
//!    its budget (kubectl would keep retrying until `--timeout`; rkube then
//!    goes on with the next node, as kubectl does after a timeout).
//! 5. **Recreate**: a pod whose controller is a ReplicaSet,
//!    ReplicationController, StatefulSet or Job gets a pending replacement:
//!    the same spec without `nodeName`/`nominatedNodeName`, a new uid, the
//!    StatefulSet's pod keeps its name, the others get a generated name
//!    (`<controller>-xxxxx`, as `generateName`), queued after every existing
//!    pod. Pods without a controller (`--force`) and finished pods are deleted
//!    and not recreated; so are pods of controllers rkube does not know.
//! 6. **Schedule** the replacements with the same framework, queue and
//!    preemption as `simulate` (one scheduler for the whole run; a pending
//!    replacement keeps its nomination for the next pass). Pods the steady
//!    state left pending stay pending: a drain frees no room on the nodes
//!    they could use. Pods a replacement preempts are deleted, not
//!    recreated, as in `simulate`; a placed replacement that is preempted
//!    later is reported pending with its preemptor.
//! 7. With `delete`, every node whose drain finished is then removed with
//!    whatever it still runs (DaemonSet and mirror pods simply disappear),
//!    so it is no longer a topology domain, and the replacements still
//!    pending are scheduled once more.
//!
//! The result is plain data ([`DrainReport`]); printing is the CLI's job.

mod budget;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use rkube_config::KubeSchedulerConfiguration;
use rkube_framework::Snapshot;
use rkube_model::{Cluster, Pod, Taint, TaintEffect};
use serde::Serialize;

use budget::{Budgets, Verdict};
pub use budget::{MORE_THAN_ONE_BUDGET, VIOLATES_BUDGET};

use crate::compare::NodeUsage;
use crate::queue::{Pass, Queue};
use crate::{node_summaries, pending_pods, queue_order, SimError, SimulateOptions};

/// kubectl's error for pods with `emptyDir` volumes (`localStorageFatal`,
/// with the "cannot delete" kubectl puts in front).
pub const LOCAL_STORAGE_REFUSED: &str =
    "cannot delete Pods with local storage (use --delete-emptydir-data to override)";
/// kubectl's error for pods without a controller (`unmanagedFatal`).
pub const NO_CONTROLLER_REFUSED: &str =
    "cannot delete Pods that declare no controller (use --force to override)";
/// Why DaemonSet-managed pods stay (kubectl with `--ignore-daemonsets`).
pub const DAEMONSET_IGNORED: &str = "ignored: DaemonSet-managed";
/// Why mirror pods stay.
pub const MIRROR_SKIPPED: &str =
    "skipped: mirror pod (the kubelet's static pod; the API server cannot delete it)";
/// The taint the cluster autoscaler puts on nodes it is removing.
pub const TO_BE_DELETED_TAINT: &str = "ToBeDeletedByClusterAutoscaler";

/// Options for [`drain`].
#[derive(Debug, Clone, Default)]
pub struct DrainOptions {
    /// Nodes to drain, in order (duplicates are drained once).
    pub nodes: Vec<String>,
    /// Remove the nodes once drained.
    pub delete: bool,
    /// kubectl's `--force`: delete pods without a controller.
    pub force: bool,
    /// kubectl's `--delete-emptydir-data`: delete pods with `emptyDir` volumes.
    pub delete_emptydir_data: bool,
    /// Tie-break seed.
    pub seed: u64,
}

/// An evicted pod and its replacement.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct EvictedPod {
    /// The evicted pod, `namespace/name`.
    pub pod: String,
    /// The drained node it ran on.
    pub from_node: String,
    /// The replacement its controller creates, `namespace/name`.
    pub replacement: String,
    /// Where the replacement was placed, or null (pending).
    pub node: Option<String>,
    /// Why the replacement is pending (FailedScheduling), else empty.
    pub message: String,
    /// Which eviction request went through: 1 for the first, more when a
    /// disruption budget made kubectl retry.
    pub attempt: usize,
}

/// A pod the drain leaves where it is.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SkippedPod {
    /// `namespace/name`.
    pub pod: String,
    /// Its node.
    pub node: String,
    /// Why ([`DAEMONSET_IGNORED`], [`MIRROR_SKIPPED`]).
    pub reason: String,
    /// The node was deleted (`delete`), and the pod with it.
    pub removed_with_node: bool,
}

/// A pod the drain refuses to remove.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RefusedPod {
    /// `namespace/name`.
    pub pod: String,
    /// Its node.
    pub node: String,
    /// kubectl's error (filters), or the Eviction API's (500, 403).
    pub message: String,
    /// The disruption budgets involved (empty for kubectl's filters).
    pub pdbs: Vec<String>,
}

/// A pod whose eviction a disruption budget still blocks.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct BlockedPod {
    /// `namespace/name`.
    pub pod: String,
    /// Its node.
    pub node: String,
    /// The PodDisruptionBudget's name.
    pub pdb: String,
    /// The Eviction API's 429 message ([`VIOLATES_BUDGET`]).
    pub message: String,
    /// The status cause: how many healthy pods the budget needs and has.
    pub cause: String,
    /// Eviction requests made.
    pub attempts: usize,
}

/// A pod deleted and not recreated.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct DeletedPod {
    /// `namespace/name`.
    pub pod: String,
    /// The drained node it ran on.
    pub from_node: String,
    /// Why nothing recreates it.
    pub reason: String,
}

/// What happened to one node.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct DrainedNode {
    /// Node name.
    pub name: String,
    /// Every pod to remove was removed (kubectl drain would succeed).
    pub drained: bool,
    /// kubectl's filters refused pods here, so nothing was evicted: the
    /// node is only cordoned.
    pub cordoned_only: bool,
    /// The node was removed from the cluster (`delete`).
    pub deleted: bool,
    /// What happened, in words.
    pub message: String,
}

/// Counts.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct DrainSummary {
    /// Pods evicted and recreated by their controllers.
    pub evicted: usize,
    /// Replacements placed.
    pub rescheduled: usize,
    /// Replacements left pending.
    pub pending: usize,
    /// Evictions still blocked by a disruption budget.
    pub blocked: usize,
    /// Pods refused (kubectl's filters, the Eviction API's errors).
    pub refused: usize,
    /// Pods deleted and not recreated.
    pub deleted_not_recreated: usize,
    /// Pods left in place (DaemonSet, mirror).
    pub skipped: usize,
}

/// `rkube drain -o json`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DrainReport {
    /// `drain` or `delete`.
    pub mode: String,
    /// Every node drained and what happened to it, in the order given.
    pub drained_nodes: Vec<DrainedNode>,
    /// Evicted pods and their replacements, in eviction order.
    pub evicted: Vec<EvictedPod>,
    /// Pods left in place.
    pub skipped: Vec<SkippedPod>,
    /// Pods the drain refuses to remove.
    pub refused: Vec<RefusedPod>,
    /// Evictions still blocked by a disruption budget.
    pub blocked: Vec<BlockedPod>,
    /// Pods deleted and not recreated.
    pub deleted_not_recreated: Vec<DeletedPod>,
    /// Node usage in the steady state, before the drain.
    pub nodes_before: Vec<NodeUsage>,
    /// Node usage after the drain (deleted nodes absent).
    pub nodes_after: Vec<NodeUsage>,
    /// Counts.
    pub summary: DrainSummary,
    /// Every node drained (and deleted with `delete`).
    pub complete: bool,
}

/// What kubectl's filters decide for one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Filtered {
    Delete,
    Skip(&'static str),
    Refuse(&'static str),
}

/// kubectl's `makeFilters` chain (daemonSet, mirrorPod, localStorage,
/// unreplicated), stopping at the first filter that does not delete.
fn kubectl_filter(pod: &Pod, opts: &DrainOptions) -> Filtered {
    let controller = pod.controller();
    if controller.is_some_and(|c| c.kind == "DaemonSet") && !pod.terminated {
        return Filtered::Skip(DAEMONSET_IGNORED);
    }
    if pod.mirror {
        return Filtered::Skip(MIRROR_SKIPPED);
    }
    if pod.terminated {
        return Filtered::Delete;
    }
    if pod.has_local_storage() && !opts.delete_emptydir_data {
        return Filtered::Refuse(LOCAL_STORAGE_REFUSED);
    }
    if controller.is_none() && !opts.force {
        return Filtered::Refuse(NO_CONTROLLER_REFUSED);
    }
    Filtered::Delete
}

/// Why a removed pod is not recreated, or `None` when its controller
/// creates a replacement.
fn not_recreated(pod: &Pod) -> Option<String> {
    if pod.terminated {
        return Some("finished (Succeeded or Failed): deleted, nothing recreates it".into());
    }
    let Some(c) = pod.controller() else {
        return Some("no controller: deleted (--force), not recreated".into());
    };
    match c.kind.as_str() {
        "StatefulSet" => None,
        "ReplicaSet" | "ReplicationController" | "Job" if pod.terminating => Some(format!(
            "already being deleted: its {} has replaced it",
            c.kind
        )),
        "ReplicaSet" | "ReplicationController" | "Job" => None,
        other => Some(format!(
            "controller kind {other}: rkube does not know whether it recreates the pod"
        )),
    }
}

/// Marks a node cordoned: unschedulable, with the autoscaler's taint.
fn cordon(snapshot: &mut Snapshot, idx: usize) {
    let mut node = (*snapshot.nodes[idx].node).clone();
    node.unschedulable = true;
    if !node.taints.iter().any(|t| t.key == TO_BE_DELETED_TAINT) {
        node.taints.push(Taint {
            key: TO_BE_DELETED_TAINT.into(),
            value: String::new(),
            effect: TaintEffect::NoSchedule,
        });
    }
    snapshot.set_node(idx, Arc::new(node));
}

/// The snapshot without the `gone` nodes (and the pods on them).
fn without_nodes(snapshot: &Snapshot, gone: &BTreeSet<String>) -> Snapshot {
    let kept: Vec<_> = snapshot
        .nodes
        .iter()
        .filter(|n| !gone.contains(n.name()))
        .collect();
    let mut out = Snapshot::new(kept.iter().map(|n| n.node.clone()).collect());
    out.namespaces = snapshot.namespaces.clone();
    out.workloads = snapshot.workloads.clone();
    out.volumes = snapshot.volumes.clone();
    for (i, old) in kept.iter().enumerate() {
        for p in &old.pods {
            out.assume(i, p.clone());
        }
    }
    out
}

fn usage(snapshot: &Snapshot) -> Vec<NodeUsage> {
    node_summaries(snapshot)
        .iter()
        .map(NodeUsage::from)
        .collect()
}

/// A replacement pod and its entry in the report.
struct Replacement {
    pod: Pod,
    /// Index in [`DrainReport::evicted`].
    entry: usize,
    placed: bool,
    /// Preempted after it was placed: gone for good.
    preempted: bool,
}

/// The state of one drain run.
struct Drainer<'a> {
    opts: &'a DrainOptions,
    queue: Queue<'a>,
    snapshot: Snapshot,
    budgets: Budgets,
    replacements: Vec<Replacement>,
    /// Every pod name in use, `(namespace, name)`.
    names: HashSet<(String, String)>,
    next_seq: u64,
    /// Creation timestamp of replacements: the latest in the cluster.
    created: String,
    /// Finished pods bound to a node (not in the snapshot, still listed).
    finished: Vec<Pod>,
    report: DrainReport,
}

/// Drains `opts.nodes` (see the module doc).
pub fn drain(
    cluster: &Cluster,
    cfg: &KubeSchedulerConfiguration,
    opts: &DrainOptions,
) -> Result<DrainReport, SimError> {
    let mut nodes: Vec<&str> = Vec::new();
    for n in &opts.nodes {
        if !cluster.nodes.iter().any(|x| &x.name == n) {
            return Err(SimError::Input(format!(
                "--node {}: no such node in the cluster",
                rkube_util::quote(n)
            )));
        }
        if !nodes.contains(&n.as_str()) {
            nodes.push(n);
        }
    }
    let profiles = rkube_plugins::profiles(cfg)?;
    let pending = pending_pods(cluster, &profiles);
    let mut snapshot = crate::snapshot_of(cluster, &profiles);
    let mut queue = Queue::new(&profiles, opts.seed, &pending);
    if let Some(groups) = crate::pod_group_states(cluster, &profiles) {
        queue.set_pod_groups(groups);
    }
    let steady = queue.run(&mut snapshot, &pending, &SimulateOptions::default())?;
    let mut d = Drainer::new(cluster, opts, queue, snapshot, &steady);
    for &n in &nodes {
        if let Some(i) = d.snapshot.index_of(n) {
            cordon(&mut d.snapshot, i);
        }
    }
    for &n in &nodes {
        let outcome = d.drain_node(n)?;
        d.report.drained_nodes.push(outcome);
    }
    if opts.delete {
        d.delete_drained_nodes()?;
    }
    Ok(d.finish())
}

impl<'a> Drainer<'a> {
    fn new(
        cluster: &Cluster,
        opts: &'a DrainOptions,
        queue: Queue<'a>,
        snapshot: Snapshot,
        steady: &Pass,
    ) -> Self {
        // Budgets count every pod they select: the bound ones of the steady
        // state, and those still waiting (for this profile or another
        // scheduler); pods placed and then preempted are gone.
        let placed: HashSet<&str> = steady
            .placements
            .iter()
            .filter(|p| p.node.is_some())
            .map(|p| p.pod.as_str())
            .collect();
        let bound = snapshot
            .nodes
            .iter()
            .flat_map(|n| n.pods.iter().map(|p| &**p));
        let waiting = cluster
            .pods
            .iter()
            .filter(|p| p.node_name.is_empty() && !placed.contains(p.key().as_str()));
        let budgets = Budgets::new(&cluster.workloads.pdbs, bound.chain(waiting));
        let nodes_before = usage(&snapshot);
        Drainer {
            opts,
            queue,
            budgets,
            replacements: Vec::new(),
            names: cluster
                .pods
                .iter()
                .map(|p| (p.namespace.clone(), p.name.clone()))
                .collect(),
            next_seq: cluster
                .pods
                .iter()
                .map(|p| p.seq.saturating_add(1))
                .max()
                .unwrap_or(0),
            created: cluster
                .pods
                .iter()
                .map(|p| p.creation_timestamp.clone())
                .max()
                .unwrap_or_default(),
            finished: cluster
                .pods
                .iter()
                .filter(|p| p.terminated && !p.node_name.is_empty())
                .cloned()
                .collect(),
            report: DrainReport {
                mode: if opts.delete { "delete" } else { "drain" }.into(),
                drained_nodes: Vec::new(),
                evicted: Vec::new(),
                skipped: Vec::new(),
                refused: Vec::new(),
                blocked: Vec::new(),
                deleted_not_recreated: Vec::new(),
                nodes_before,
                nodes_after: Vec::new(),
                summary: DrainSummary::default(),
                complete: false,
            },
            snapshot,
        }
    }

    /// The pods kubectl lists on a node (`spec.nodeName`), sorted as the API
    /// lists them (namespace, name).
    fn pods_on(&self, node: &str) -> Vec<Pod> {
        let mut pods: Vec<Pod> = self
            .snapshot
            .get(node)
            .map(|n| n.pods.iter().map(|p| (**p).clone()).collect())
            .unwrap_or_default();
        pods.extend(
            self.finished
                .iter()
                .filter(|p| p.node_name == node)
                .cloned(),
        );
        pods.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        pods
    }

    /// Filters and evicts one node's pods.
    fn drain_node(&mut self, node: &str) -> Result<DrainedNode, SimError> {
        let mut deletable = Vec::new();
        let mut refused = Vec::new();
        for pod in self.pods_on(node) {
            match kubectl_filter(&pod, self.opts) {
                Filtered::Delete => deletable.push(pod),
                Filtered::Skip(reason) => self.report.skipped.push(SkippedPod {
                    pod: pod.key(),
                    node: node.into(),
                    reason: reason.into(),
                    removed_with_node: false,
                }),
                Filtered::Refuse(message) => refused.push(RefusedPod {
                    pod: pod.key(),
                    node: node.into(),
                    message: message.into(),
                    pdbs: Vec::new(),
                }),
            }
        }
        if !refused.is_empty() {
            let n = refused.len();
            self.report.refused.extend(refused);
            return Ok(DrainedNode {
                name: node.into(),
                drained: false,
                cordoned_only: true,
                deleted: false,
                message: format!(
                    "cordoned only: kubectl drain refuses {n} pod(s) here, so it evicts none of this node's pods"
                ),
            });
        }
        self.evict_all(node, deletable)
    }

    /// Evicts `pods` in rounds until every one is gone or a round evicts
    /// nothing, scheduling the replacements after each round.
    fn evict_all(&mut self, node: &str, mut waiting: Vec<Pod>) -> Result<DrainedNode, SimError> {
        let refused_before = self.report.refused.len();
        let mut attempt = 0;
        let mut blocked: Vec<(Pod, String, String)> = Vec::new();
        while !waiting.is_empty() {
            attempt += 1;
            blocked.clear();
            let mut progress = false;
            for pod in std::mem::take(&mut waiting) {
                match self.evict(node, &pod, attempt) {
                    Some(Verdict::Blocked { pdb, cause }) => {
                        blocked.push((pod.clone(), pdb, cause));
                        waiting.push(pod);
                    }
                    Some(Verdict::Refused { message, pdbs }) => {
                        self.report.refused.push(RefusedPod {
                            pod: pod.key(),
                            node: node.into(),
                            message,
                            pdbs,
                        });
                    }
                    Some(Verdict::Allowed) | None => progress = true,
                }
            }
            if !progress {
                break;
            }
            self.schedule_replacements()?;
        }
        let refused = self.report.refused.len() - refused_before;
        for (pod, pdb, cause) in &blocked {
            self.report.blocked.push(BlockedPod {
                pod: pod.key(),
                node: node.into(),
                pdb: pdb.clone(),
                message: VIOLATES_BUDGET.into(),
                cause: cause.clone(),
                attempts: attempt,
            });
        }
        Ok(node_outcome(node, waiting.len(), refused))
    }

    /// One eviction request. `Some(Blocked | Refused)` when the API says
    /// no; otherwise the pod is gone (and recreated or reported deleted).
    fn evict(&mut self, node: &str, pod: &Pod, attempt: usize) -> Option<Verdict> {
        // canIgnorePDB: finished or terminating pods are deleted at once.
        if !pod.terminated && !pod.terminating {
            match self.budgets.check(pod) {
                Verdict::Allowed => {}
                other => return Some(other),
            }
        }
        if let Some(i) = self.snapshot.index_of(node) {
            self.snapshot.remove(i, &pod.uid);
        }
        if !pod.terminated && !pod.terminating {
            self.budgets.left(pod);
        }
        self.queue.pod_deleted(pod);
        match not_recreated(pod) {
            Some(reason) => self.report.deleted_not_recreated.push(DeletedPod {
                pod: pod.key(),
                from_node: node.into(),
                reason,
            }),
            None => self.recreate(node, pod, attempt),
        }
        None
    }

    /// Queues the controller's replacement of an evicted pod.
    fn recreate(&mut self, node: &str, pod: &Pod, attempt: usize) {
        let name = self.replacement_name(pod);
        let mut r = pod.clone();
        r.name = name;
        r.uid = format!("rkube-drain-{}", self.replacements.len());
        r.seq = self.next_seq;
        self.next_seq += 1;
        r.creation_timestamp = self.created.clone();
        r.node_name.clear();
        r.nominated_node_name.clear();
        r.start_time.clear();
        r.terminating = false;
        r.terminating_by_preemption = false;
        self.names.insert((r.namespace.clone(), r.name.clone()));
        self.queue.pod_added(&r);
        self.report.evicted.push(EvictedPod {
            pod: pod.key(),
            from_node: node.into(),
            replacement: r.key(),
            node: None,
            message: String::new(),
            attempt,
        });
        self.replacements.push(Replacement {
            pod: r,
            entry: self.report.evicted.len() - 1,
            placed: false,
            preempted: false,
        });
    }

    /// A StatefulSet's pod keeps its name; other controllers generate one
    /// (`<controller>-xxxxx`) that no pod uses.
    fn replacement_name(&self, pod: &Pod) -> String {
        let Some(c) = pod.controller().filter(|c| c.kind != "StatefulSet") else {
            return pod.name.clone();
        };
        let seed = if c.uid.is_empty() {
            format!("{}/{}", pod.namespace, c.name)
        } else {
            c.uid.clone()
        };
        (0..)
            .map(|i| rkube_model::generated_name(&c.name, &seed, i))
            .find(|n| !self.names.contains(&(pod.namespace.clone(), n.clone())))
            .unwrap_or_else(|| pod.name.clone())
    }

    /// Schedules every replacement not placed yet, in queue order.
    fn schedule_replacements(&mut self) -> Result<(), SimError> {
        let waiting: Vec<Pod> = self
            .replacements
            .iter()
            .filter(|r| !r.placed && !r.preempted)
            .map(|r| r.pod.clone())
            .collect();
        if waiting.is_empty() {
            return Ok(());
        }
        let ordered = queue_order(waiting.iter().collect(), self.queue.profiles());
        let pass = self
            .queue
            .run(&mut self.snapshot, &ordered, &SimulateOptions::default())?;
        let by_uid: HashMap<&str, usize> = self
            .replacements
            .iter()
            .enumerate()
            .map(|(i, r)| (r.pod.uid.as_str(), i))
            .collect();
        let mut arrived = Vec::new();
        // The next pass tries a pending pod's nominated node first, as the
        // queue would.
        let mut nominated = Vec::new();
        // The pass's order is the queue's entities' (a pod group's members
        // together): placements are matched by pod, not by position.
        let by_key: HashMap<String, &str> =
            ordered.iter().map(|p| (p.key(), p.uid.as_str())).collect();
        for placement in &pass.placements {
            let Some(&i) = by_key.get(&placement.pod).and_then(|uid| by_uid.get(uid)) else {
                continue;
            };
            let entry = &mut self.report.evicted[self.replacements[i].entry];
            entry.node = placement.node.clone();
            entry.message = placement.message.clone();
            if placement.node.is_some() {
                arrived.push(i);
            } else {
                nominated.push((i, placement.nominated_node.clone().unwrap_or_default()));
            }
        }
        for (i, node) in nominated {
            self.replacements[i].pod.nominated_node_name = node;
        }
        for i in arrived {
            self.replacements[i].placed = true;
            self.budgets.arrived(&self.replacements[i].pod);
        }
        self.account_preemptions(&pass);
        Ok(())
    }

    /// Victims of preemption leave their budgets; replacements among them
    /// are gone (preempted pods are not recreated, as in `simulate`).
    fn account_preemptions(&mut self, pass: &Pass) {
        for v in &pass.victims {
            self.budgets.left(v);
            let Some(r) = self.replacements.iter_mut().find(|r| r.pod.uid == v.uid) else {
                continue;
            };
            r.placed = false;
            r.preempted = true;
            let by = pass
                .preemptions
                .iter()
                .find(|p| p.victims.contains(&v.key()))
                .map(|p| p.preemptor.clone())
                .unwrap_or_default();
            let entry = &mut self.report.evicted[r.entry];
            entry.node = None;
            entry.message = format!("preempted by {by} after it was placed");
        }
    }

    /// `delete`: removes every node whose drain finished, then schedules the
    /// replacements still pending.
    fn delete_drained_nodes(&mut self) -> Result<(), SimError> {
        let gone: BTreeSet<String> = self
            .report
            .drained_nodes
            .iter()
            .filter(|n| n.drained)
            .map(|n| n.name.clone())
            .collect();
        if gone.is_empty() {
            return Ok(());
        }
        self.snapshot = without_nodes(&self.snapshot, &gone);
        for n in self.report.drained_nodes.iter_mut().filter(|n| n.drained) {
            n.deleted = true;
            n.message = "cordoned, drained and deleted".into();
        }
        for s in self
            .report
            .skipped
            .iter_mut()
            .filter(|s| gone.contains(&s.node))
        {
            s.removed_with_node = true;
        }
        self.schedule_replacements()
    }

    fn finish(mut self) -> DrainReport {
        let r = &mut self.report;
        r.nodes_after = usage(&self.snapshot);
        let rescheduled = r.evicted.iter().filter(|e| e.node.is_some()).count();
        r.summary = DrainSummary {
            evicted: r.evicted.len(),
            rescheduled,
            pending: r.evicted.len() - rescheduled,
            blocked: r.blocked.len(),
            refused: r.refused.len(),
            deleted_not_recreated: r.deleted_not_recreated.len(),
            skipped: r.skipped.len(),
        };
        r.complete = r
            .drained_nodes
            .iter()
            .all(|n| n.drained && (n.deleted || !self.opts.delete));
        self.report
    }
}

/// A node's outcome once its evictions are done.
fn node_outcome(node: &str, blocked: usize, refused: usize) -> DrainedNode {
    let message = match (blocked, refused) {
        (0, 0) => "cordoned and drained".to_string(),
        (b, 0) => format!(
            "cordoned, not drained: {b} eviction(s) still blocked by a PodDisruptionBudget (kubectl would retry until --timeout)"
        ),
        (0, r) => format!("cordoned, not drained: the Eviction API refused {r} pod(s)"),
        (b, r) => format!(
            "cordoned, not drained: {b} eviction(s) blocked by a PodDisruptionBudget, {r} refused by the Eviction API"
        ),
    };
    DrainedNode {
        name: node.into(),
        drained: blocked == 0 && refused == 0,
        cordoned_only: false,
        deleted: false,
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rkube_model::OwnerRef;

    fn owned(kind: &str) -> Pod {
        Pod {
            namespace: "d".into(),
            name: "p".into(),
            owners: vec![OwnerRef {
                api_version: "apps/v1".into(),
                kind: kind.into(),
                name: "owner".into(),
                uid: "uid-owner".into(),
                controller: true,
            }],
            ..Default::default()
        }
    }

    fn bare() -> Pod {
        Pod {
            owners: Vec::new(),
            ..owned("")
        }
    }

    /// kubectl's filter chain, case by case (filters.go: daemonSet, mirror,
    /// localStorage, unreplicated; finished pods pass the last three).
    #[test]
    fn kubectl_filters_in_kubectl_order() {
        let with = |mut p: Pod, f: fn(&mut Pod)| {
            f(&mut p);
            p
        };
        let empty_dir = |p: &mut Pod| p.volumes.push(rkube_model::Volume::EmptyDir);
        let mirror = |p: &mut Pod| p.mirror = true;
        let finished = |p: &mut Pod| p.terminated = true;
        let none = DrainOptions::default();
        let force = DrainOptions {
            force: true,
            ..Default::default()
        };
        let emptydir = DrainOptions {
            delete_emptydir_data: true,
            ..Default::default()
        };
        let cases: Vec<(&str, Pod, &DrainOptions, Filtered)> = vec![
            ("replicaset", owned("ReplicaSet"), &none, Filtered::Delete),
            (
                "daemonset",
                owned("DaemonSet"),
                &force,
                Filtered::Skip(DAEMONSET_IGNORED),
            ),
            (
                "finished daemonset",
                with(owned("DaemonSet"), finished),
                &none,
                Filtered::Delete,
            ),
            (
                "daemonset before mirror",
                with(owned("DaemonSet"), mirror),
                &none,
                Filtered::Skip(DAEMONSET_IGNORED),
            ),
            (
                "mirror",
                with(bare(), mirror),
                &none,
                Filtered::Skip(MIRROR_SKIPPED),
            ),
            (
                "finished mirror",
                with(with(bare(), mirror), finished),
                &none,
                Filtered::Skip(MIRROR_SKIPPED),
            ),
            (
                "finished bare",
                with(bare(), finished),
                &none,
                Filtered::Delete,
            ),
            (
                "finished emptyDir",
                with(with(bare(), empty_dir), finished),
                &none,
                Filtered::Delete,
            ),
            (
                "emptyDir",
                with(owned("Job"), empty_dir),
                &force,
                Filtered::Refuse(LOCAL_STORAGE_REFUSED),
            ),
            (
                "emptyDir before controller",
                with(bare(), empty_dir),
                &emptydir,
                Filtered::Refuse(NO_CONTROLLER_REFUSED),
            ),
            (
                "emptyDir allowed",
                with(owned("Job"), empty_dir),
                &emptydir,
                Filtered::Delete,
            ),
            (
                "bare",
                bare(),
                &none,
                Filtered::Refuse(NO_CONTROLLER_REFUSED),
            ),
            ("bare forced", bare(), &force, Filtered::Delete),
        ];
        for (name, pod, opts, want) in cases {
            assert_eq!(kubectl_filter(&pod, opts), want, "{name}");
        }
    }

    #[test]
    fn controllers_that_recreate() {
        let terminating = |mut p: Pod| {
            p.terminating = true;
            p
        };
        for kind in ["ReplicaSet", "ReplicationController", "StatefulSet", "Job"] {
            assert_eq!(not_recreated(&owned(kind)), None, "{kind}");
        }
        // A StatefulSet recreates the name once the old pod is gone; the
        // others replaced a terminating pod already.
        assert_eq!(not_recreated(&terminating(owned("StatefulSet"))), None);
        assert!(not_recreated(&terminating(owned("ReplicaSet"))).is_some());
        assert!(not_recreated(&bare()).is_some());
        assert!(
            not_recreated(&owned("Rollout")).is_some_and(|r| r.contains("controller kind Rollout"))
        );
    }

    fn cluster(items: &[&str]) -> Cluster {
        let yaml = format!(
            "apiVersion: v1\nkind: List\nitems:\n- {}\n",
            items.join("\n- ")
        );
        let objects = rkube_model::load::parse_documents("c.yaml", &yaml).unwrap();
        rkube_model::load::build(&objects, &mut |_| Ok(false)).unwrap()
    }

    const N1: &str = "{apiVersion: v1, kind: Node, metadata: {name: n1}, status: {allocatable: {cpu: '4', pods: '10'}}}";
    const N2: &str = "{apiVersion: v1, kind: Node, metadata: {name: n2}, status: {allocatable: {cpu: '4', pods: '10'}}}";

    fn run(c: &Cluster, nodes: &[&str], f: impl FnOnce(&mut DrainOptions)) -> DrainReport {
        let mut opts = DrainOptions {
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
            ..Default::default()
        };
        f(&mut opts);
        drain(c, &rkube_config::default_config(), &opts).unwrap()
    }

    /// Two budgets over one pod: the API's 500, the pod stays, the other
    /// pods of the node are still evicted, the node is not drained.
    #[test]
    fn two_budgets_refuse_one_pod_not_the_node() {
        let c = cluster(&[
            N1,
            N2,
            "{apiVersion: v1, kind: Pod, metadata: {name: a, namespace: d, labels: {app: a}, ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: rs-a, uid: u1, controller: true}]}, spec: {nodeName: n1, containers: [{name: c}]}}",
            "{apiVersion: v1, kind: Pod, metadata: {name: b, namespace: d, labels: {app: b}, ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: rs-b, uid: u2, controller: true}]}, spec: {nodeName: n1, containers: [{name: c}]}}",
            "{apiVersion: policy/v1, kind: PodDisruptionBudget, metadata: {name: one, namespace: d}, spec: {maxUnavailable: 5, selector: {matchLabels: {app: a}}}}",
            "{apiVersion: policy/v1, kind: PodDisruptionBudget, metadata: {name: two, namespace: d}, spec: {maxUnavailable: '50%', selector: {matchLabels: {app: a}}}}",
        ]);
        let r = run(&c, &["n1"], |_| {});
        assert_eq!(r.refused.len(), 1, "{r:#?}");
        assert_eq!(r.refused[0].pod, "d/a");
        assert_eq!(r.refused[0].message, MORE_THAN_ONE_BUDGET);
        assert_eq!(r.refused[0].pdbs, ["one", "two"]);
        assert_eq!(r.evicted.len(), 1);
        assert_eq!(r.evicted[0].pod, "d/b");
        assert_eq!(r.evicted[0].node.as_deref(), Some("n2"));
        assert!(!r.drained_nodes[0].drained && !r.drained_nodes[0].cordoned_only);
        assert!(!r.complete);
    }

    /// Finished pods are deleted (not recreated), mirror pods stay, a taken
    /// generated name is skipped, and a refused node does not stop the next.
    #[test]
    fn finished_mirror_names_and_several_nodes() {
        let taken = rkube_model::generated_name("rs", "u1", 0);
        let web = format!("{{apiVersion: v1, kind: Pod, metadata: {{name: {taken}, namespace: d, ownerReferences: [{{apiVersion: apps/v1, kind: ReplicaSet, name: rs, uid: u1, controller: true}}]}}, spec: {{nodeName: n2, containers: [{{name: c}}]}}}}");
        let c = cluster(&[
            N1,
            N2,
            "{apiVersion: v1, kind: Node, metadata: {name: n3}, status: {allocatable: {cpu: '4', pods: '10'}}}",
            "{apiVersion: v1, kind: Pod, metadata: {name: done, namespace: d}, spec: {nodeName: n1, containers: [{name: c}]}, status: {phase: Succeeded}}",
            "{apiVersion: v1, kind: Pod, metadata: {name: static, namespace: d, annotations: {kubernetes.io/config.mirror: x}}, spec: {nodeName: n1, containers: [{name: c}]}}",
            "{apiVersion: v1, kind: Pod, metadata: {name: bare, namespace: d}, spec: {nodeName: n3, containers: [{name: c}]}}",
            &web,
        ]);
        let r = run(&c, &["n3", "n1", "n2", "n1"], |_| {});
        let nodes: Vec<(&str, bool, bool)> = r
            .drained_nodes
            .iter()
            .map(|n| (n.name.as_str(), n.drained, n.cordoned_only))
            .collect();
        assert_eq!(
            nodes,
            [
                ("n3", false, true),
                ("n1", true, false),
                ("n2", true, false)
            ]
        );
        assert_eq!(r.refused[0].pod, "d/bare");
        assert_eq!(r.deleted_not_recreated[0].pod, "d/done");
        assert_eq!(r.skipped[0].pod, "d/static");
        assert_eq!(r.skipped[0].reason, MIRROR_SKIPPED);
        // Every node is cordoned, so the replacement stays pending, under a
        // name no pod has.
        let e = &r.evicted[0];
        assert_eq!(e.pod, format!("d/{taken}"));
        assert_eq!(
            e.replacement,
            format!("d/{}", rkube_model::generated_name("rs", "u1", 1))
        );
        assert_eq!(e.node, None);
        assert!(
            e.message.contains("3 node(s) were unschedulable"),
            "{}",
            e.message
        );
    }

    /// The steady state first: a pending pod of the file is placed before
    /// the drain and counts in "before".
    #[test]
    fn pending_pods_are_placed_before_the_drain() {
        let c = cluster(&[
            N1,
            "{apiVersion: v1, kind: Pod, metadata: {name: waiting, namespace: d}, spec: {containers: [{name: c}]}}",
        ]);
        let r = run(&c, &["n1"], |o| o.force = true);
        assert_eq!(r.nodes_before[0].pods, 1);
        assert_eq!(r.deleted_not_recreated[0].pod, "d/waiting");
        assert_eq!(r.nodes_after[0].pods, 0);
    }

    /// A Deployment in the file: its replicas are pending until the steady
    /// state places them, and the budget counts them there (3 healthy, 3
    /// wanted: nothing may go).
    #[test]
    fn budgets_count_the_steady_state() {
        let c = cluster(&[
            N1,
            N2,
            "{apiVersion: apps/v1, kind: Deployment, metadata: {name: web, namespace: d}, spec: {replicas: 3, selector: {matchLabels: {app: web}}, template: {metadata: {labels: {app: web}}, spec: {containers: [{name: c, resources: {requests: {cpu: '1'}}}]}}}}",
            "{apiVersion: policy/v1, kind: PodDisruptionBudget, metadata: {name: web, namespace: d}, spec: {minAvailable: '100%', selector: {matchLabels: {app: web}}}}",
        ]);
        let r = run(&c, &["n1", "n2"], |_| {});
        assert!(r.evicted.is_empty(), "{r:#?}");
        assert_eq!(r.blocked.len(), 3);
        assert!(r.blocked.iter().all(
            |b| b.cause == "The disruption budget web needs 3 healthy pods and has 3 currently"
        ));
        let before: usize = r.nodes_before.iter().map(|n| n.pods).sum();
        assert_eq!(before, 3);
    }

    #[test]
    fn unknown_node_is_an_input_error() {
        let c = cluster(&[N1]);
        let opts = DrainOptions {
            nodes: vec!["n9".into()],
            ..Default::default()
        };
        let err = drain(&c, &rkube_config::default_config(), &opts).unwrap_err();
        assert!(err.is_input());
        assert!(err.to_string().contains("n9"), "{err}");
    }
}
