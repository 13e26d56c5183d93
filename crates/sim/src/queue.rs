//! The scheduling queue the simulator drives: pods in queue order, each
//! scheduled with the framework (preemption included) and placed on the
//! snapshot the next pod sees. `simulate` runs one pass over the pending
//! pods; `drain` runs a first pass the same way and then more passes over
//! the replacement pods it creates, with the same scheduler (cycle count,
//! start index and OpportunisticBatching state) and nominations carried
//! from pass to pass.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

pub(crate) mod gang;

use rkube_framework::{Failure, Outcome};
use rkube_framework::{Framework, Nominator, PodGroupStates, Scheduler, Snapshot};
use rkube_model::Pod;

use crate::{
    explain_with, initial_nominator, pre_enqueue_rejection, Placement, Preemption, Profiles,
    SimError, SimulateOptions,
};

/// Most preemptions one pod may make in a row before it is left pending
/// (each evicts at least one pod, so this only bounds pathological inputs).
const MAX_PREEMPTIONS_PER_POD: usize = 16;

/// What one pass over the queue did.
#[derive(Debug, Default)]
pub(crate) struct Pass {
    /// One entry per pod, in queue order (placed or left pending).
    pub placements: Vec<Placement>,
    /// Preemptions, in order.
    pub preemptions: Vec<Preemption>,
    /// Every pod preemption evicted from the snapshot, in order.
    pub victims: Vec<Arc<Pod>>,
}

/// The scheduler, its nominations and the nominations cleared by
/// preemptors, kept across passes.
pub(crate) struct Queue<'p> {
    profiles: &'p Profiles,
    scheduler: Scheduler,
    nominator: Nominator,
    /// Nominations cleared by a preemptor before the pod's turn (by UID).
    cleared: HashSet<String>,
    /// Pod groups and their members (GenericWorkload).
    groups: PodGroupStates,
    /// Each scheduling attempt's duration, when kept (`rkube-bench`).
    pub(crate) latencies: Option<Vec<std::time::Duration>>,
}

/// What the queue pops: a pod, or a pod group's pending members.
pub(crate) enum Entity<'a> {
    Pod(&'a Pod),
    Group(Vec<&'a Pod>),
}

/// The verdict of one scheduling attempt, once preemption has run.
enum Attempt {
    Placed(Placement),
    Pending(Placement),
    Retry,
}

impl<'p> Queue<'p> {
    /// A queue whose nominator starts with the `status.nominatedNodeName` of
    /// the given pending pods, as upstream's queue starts.
    pub fn new(profiles: &'p Profiles, seed: u64, pending: &[&Pod]) -> Self {
        Queue {
            profiles,
            scheduler: {
                let mut s = Scheduler::new(seed, profiles.percentage_of_nodes_to_score);
                s.opportunistic_batching = profiles.opportunistic_batching;
                s
            },
            nominator: initial_nominator(pending),
            cleared: HashSet::new(),
            groups: PodGroupStates::default(),
            latencies: None,
        }
    }

    /// Pod groups and their members, as the cluster holds them: with the
    /// GenericWorkload gate on, the members of a group are scheduled
    /// together (see [`Queue::run`]).
    pub fn set_pod_groups(&mut self, groups: PodGroupStates) {
        self.groups = groups;
    }

    /// A pod left the cluster (evicted or deleted): its group no longer
    /// counts it.
    pub fn pod_deleted(&mut self, pod: &Pod) {
        self.groups.delete(pod);
    }

    /// A pod was created (a controller's replacement): its group counts it.
    pub fn pod_added(&mut self, pod: &Pod) {
        self.groups.add(pod);
    }

    /// Pods placed on an OpportunisticBatching hint so far, all profiles.
    pub fn batched_pods(&self) -> u64 {
        self.scheduler
            .batches
            .values()
            .map(|b| b.stats.hint_used)
            .sum()
    }

    /// The profiles pods are scheduled with.
    pub fn profiles(&self) -> &'p Profiles {
        self.profiles
    }

    /// Schedules `pods` in the order given (callers sort them with
    /// [`crate::queue_order`]).
    ///
    /// Preemption: when PostFilter (DefaultPreemption) nominates a node, the
    /// victims are evicted from the snapshot at once, lower-priority pods
    /// nominated to that node lose their nomination (as upstream's
    /// preemption executor does), the preemptor is nominated to the node and
    /// is retried right away, before the next pod in the queue. Victims are
    /// deleted, not recreated by their controllers.
    pub fn run(
        &mut self,
        snapshot: &mut Snapshot,
        pods: &[&Pod],
        opts: &SimulateOptions,
    ) -> Result<Pass, SimError> {
        let mut pass = Pass::default();
        // Placement index of each pod placed in this pass (by UID).
        let mut placed_at: HashMap<String, usize> = HashMap::new();
        let mut done = 0;
        for entity in self.entities(pods) {
            if let Some(progress) = &opts.progress {
                progress(done, pods.len());
            }
            let (members, placements) = match entity {
                Entity::Pod(pod) => (
                    vec![pod],
                    vec![self.schedule_one(snapshot, pod, opts.explain, &mut pass, &placed_at)?],
                ),
                Entity::Group(members) => {
                    let placements = self
                        .schedule_group_until_settled(snapshot, &members, &mut pass, &placed_at)?;
                    (members, placements)
                }
            };
            for (pod, placement) in members.into_iter().zip(placements) {
                done += 1;
                if placement.node.is_some() {
                    placed_at.insert(pod.uid.clone(), pass.placements.len());
                }
                pass.placements.push(placement);
            }
        }
        Ok(pass)
    }

    /// A pod group's cycle, then again for the members left pending as
    /// long as the last cycle placed some: upstream requeues a group that
    /// succeeded with members left straight to the active queue, keeping
    /// its place (`AddAttemptedPodGroupIfNeeded`), so they are tried again
    /// at once, now beside the members just placed. Each try is a cycle
    /// (it moves where the next filter pass starts).
    ///
    /// When PodGroupPostFilter found victims (in the first cycle or in one
    /// for the members left), they are evicted at once and the members left
    /// are tried again with their nominations, as a single preemptor is. A
    /// member keeps the message of its first failure that nominated it
    /// nowhere unless a later cycle places it.
    fn schedule_group_until_settled(
        &mut self,
        snapshot: &mut Snapshot,
        members: &[&Pod],
        pass: &mut Pass,
        placed_at: &HashMap<String, usize>,
    ) -> Result<Vec<Placement>, SimError> {
        let mut current: Vec<Pod> = members.iter().map(|p| (*p).clone()).collect();
        let mut placed: Vec<Option<Placement>> = vec![None; members.len()];
        let mut first: Vec<Option<Placement>> = vec![None; members.len()];
        let mut todo: Vec<usize> = (0..members.len()).collect();
        let mut preempted = 0;
        loop {
            let refs: Vec<&Pod> = todo.iter().map(|&i| &current[i]).collect();
            let attempt = self.schedule_group(snapshot, &refs, &mut |_, _, _| {})?;
            // A preemption already under way (victims terminating in the
            // cluster file) evicts nothing more: the members wait as they are.
            let preemption = attempt
                .preemption
                .filter(|pf| preempted < MAX_PREEMPTIONS_PER_POD && !pf.victims.is_empty());
            let nominated = |k: usize| {
                preemption
                    .as_ref()
                    .and_then(|pf| pf.nominations.iter().find(|(m, _)| *m == k))
                    .map(|(_, n)| n.clone())
            };
            let mut placed_now = false;
            for (k, p) in attempt.placements.into_iter().enumerate() {
                let i = todo[k];
                if p.node.is_some() {
                    placed[i] = Some(p);
                    placed_now = true;
                } else if let Some(node) = nominated(k) {
                    current[i].nominated_node_name = node;
                } else if first[i].is_none() {
                    first[i] = Some(p);
                }
            }
            todo.retain(|&i| placed[i].is_none());
            if let Some(pf) = &preemption {
                preempted += 1;
                let key = members[0]
                    .pod_group
                    .as_deref()
                    .map(|g| format!("{}/{g}", members[0].namespace))
                    .unwrap_or_default();
                self.evict(snapshot, &key, &pf.victims, pass, placed_at);
                let nodes: std::collections::BTreeSet<&str> =
                    pf.nominations.iter().map(|(_, n)| n.as_str()).collect();
                pass.preemptions.push(Preemption {
                    preemptor: key.clone(),
                    pod_group: true,
                    node: nodes.into_iter().collect::<Vec<_>>().join(","),
                    victims: pf.victims.iter().map(|v| v.key()).collect(),
                });
            } else if !placed_now {
                break;
            }
            if todo.is_empty() {
                break;
            }
        }
        Ok(placed
            .into_iter()
            .zip(first)
            .enumerate()
            .map(|(i, (p, f))| {
                p.or(f).unwrap_or_else(|| {
                    pending(members[i], "pod group preemption: the simulation's limit of preemptions in a row was reached".into())
                })
            })
            .collect())
    }

    /// The queue's entities in the order it pops them: with GenericWorkload
    /// on, the pending members of each pod group form one entity, sorted as
    /// upstream's queue sorts it (the group's priority, and the queue time of
    /// its first member) among the single pods; its members keep their
    /// queue order. Without the gate every pod is its own entity.
    pub(crate) fn entities<'a>(&self, pods: &[&'a Pod]) -> Vec<Entity<'a>> {
        if !self.profiles.generic_workload || pods.iter().all(|p| p.pod_group.is_none()) {
            return pods.iter().map(|p| Entity::Pod(p)).collect();
        }
        // Arrival rank: creation timestamp, then input order.
        let mut arrival: Vec<(&str, u64)> = pods
            .iter()
            .map(|p| (p.creation_timestamp.as_str(), p.seq))
            .collect();
        arrival.sort();
        let rank: HashMap<u64, usize> = arrival
            .iter()
            .enumerate()
            .map(|(i, (_, seq))| (*seq, i))
            .collect();
        let mut groups: HashMap<(&str, &str), Vec<&'a Pod>> = HashMap::new();
        let mut heads: Vec<Pod> = Vec::new();
        let mut entities: Vec<Entity<'a>> = Vec::new();
        for p in pods {
            match &p.pod_group {
                Some(g) => groups.entry((&p.namespace, g)).or_default().push(p),
                None => entities.push(Entity::Pod(p)),
            }
        }
        // Each group is represented in the sort by its earliest member
        // carrying the group's priority.
        let mut group_list: Vec<Vec<&'a Pod>> = groups.into_values().collect();
        for members in &mut group_list {
            members.sort_by_key(|p| rank.get(&p.seq).copied().unwrap_or(usize::MAX));
            let mut head = members[0].clone();
            if let Some(g) = self.groups.of(members[0]).and_then(|s| s.group.as_ref()) {
                head.priority = g.priority;
            }
            heads.push(head);
        }
        let mut keyed: Vec<&Pod> = entities
            .iter()
            .map(|e| match e {
                Entity::Pod(p) => *p,
                Entity::Group(_) => unreachable!("only pods so far"),
            })
            .collect();
        keyed.extend(heads.iter());
        let order = crate::queue_order(keyed, self.profiles);
        let mut by_head: HashMap<u64, Vec<&'a Pod>> =
            group_list.into_iter().map(|m| (m[0].seq, m)).collect();
        let by_seq: HashMap<u64, &'a Pod> = pods.iter().map(|p| (p.seq, *p)).collect();
        order
            .into_iter()
            .filter_map(|p| match by_head.remove(&p.seq) {
                Some(members) => Some(Entity::Group(members)),
                None => by_seq.get(&p.seq).map(|p| Entity::Pod(p)),
            })
            .collect()
    }

    /// Schedules one pod, preempting as needed; the placement to record.
    fn schedule_one(
        &mut self,
        snapshot: &mut Snapshot,
        pod: &Pod,
        explain: bool,
        pass: &mut Pass,
        placed_at: &HashMap<String, usize>,
    ) -> Result<Placement, SimError> {
        let Some(fw) = self.profiles.for_pod(pod) else {
            return Ok(pending(
                pod,
                format!(
                    "spec.schedulerName {:?} is not a profile of this configuration (another scheduler places this pod)",
                    pod.scheduler_name
                ),
            ));
        };
        if let Some(gate) = pre_enqueue_rejection(fw, pod, snapshot.dra.as_deref()) {
            return Ok(pending(pod, gate));
        }
        let mut current = pod.clone();
        if self.cleared.contains(&current.uid) {
            current.nominated_node_name.clear();
        }
        let mut preempted = 0;
        loop {
            let retry_allowed = preempted < MAX_PREEMPTIONS_PER_POD;
            match self.attempt(
                fw,
                snapshot,
                &mut current,
                explain,
                retry_allowed,
                pass,
                placed_at,
            )? {
                Attempt::Placed(p) | Attempt::Pending(p) => return Ok(p),
                Attempt::Retry => preempted += 1,
            }
        }
    }

    /// One scheduling cycle for `current`; on a preemption the victims are
    /// evicted and the pod nominated (and, if allowed, retried).
    #[allow(clippy::too_many_arguments)]
    fn attempt(
        &mut self,
        fw: &Framework,
        snapshot: &mut Snapshot,
        current: &mut Pod,
        explain: bool,
        retry_allowed: bool,
        pass: &mut Pass,
        placed_at: &HashMap<String, usize>,
    ) -> Result<Attempt, SimError> {
        let explanation = if explain {
            Some(explain_with(
                fw,
                snapshot,
                current,
                &self.scheduler,
                &self.nominator,
            )?)
        } else {
            None
        };
        // The whole attempt: scheduling cycle, Reserve, Permit and the
        // binding cycle on the snapshot (the pod ends up on its node).
        let started = self.latencies.is_some().then(std::time::Instant::now);
        let outcome = self
            .scheduler
            .schedule_one(fw, snapshot, current, &self.nominator);
        if let (Some(l), Some(t)) = (self.latencies.as_mut(), started) {
            l.push(t.elapsed());
        }
        let failure = match outcome {
            Outcome::Scheduled { node, .. } => {
                self.nominator.delete(&current.uid);
                let name = snapshot.nodes[node].name().to_string();
                return Ok(Attempt::Placed(Placement {
                    node: Some(name),
                    explain: explanation,
                    devices: crate::report::AllocatedDevice::of(current, snapshot.dra.as_deref()),
                    ..pending(current, String::new())
                }));
            }
            Outcome::Unschedulable {
                message,
                diagnosis,
                nominated_node,
                victims,
            } => Failure::unschedulable(message, diagnosis, nominated_node, victims),
            // A plugin's internal error (e.g. a device pool being updated)
            // ends upstream's cycle: the pod stays pending with the error
            // as its condition's message (reason SchedulerError) and its
            // nomination cleared.
            Outcome::Error(s) => Failure::error(&s),
        };
        self.failed(
            snapshot,
            current,
            failure,
            explanation,
            retry_allowed,
            pass,
            placed_at,
        )
    }

    /// Executes a failed attempt: PostFilter's claims freed, preemption's
    /// victims evicted, the nominations recorded; the pod retried at once
    /// when that changed the cluster for it.
    #[allow(clippy::too_many_arguments)]
    fn failed(
        &mut self,
        snapshot: &mut Snapshot,
        current: &mut Pod,
        f: Failure,
        explanation: Option<rkube_report::PodExplanation>,
        retry_allowed: bool,
        pass: &mut Pass,
        placed_at: &HashMap<String, usize>,
    ) -> Result<Attempt, SimError> {
        // PostFilter deallocated idle claims: the claims' update
        // makes the pod schedulable again, so it is retried.
        let deallocated = deallocate_claims(snapshot, &f.deallocated_claims)
            | delete_claims(snapshot, &f.deleted_claims);
        let preempting = f.preemption_target().is_some();
        if let Some(target) = f.preemption_target() {
            let target = target.to_string();
            let victims = f.victims.clone();
            self.execute_preemption(snapshot, current, &target, victims, pass, placed_at)?;
        }
        let cleared = f.record(&mut self.nominator, current);
        self.cleared.extend(cleared.iter().map(|p| p.uid.clone()));
        if let Some(n) = &f.nominated_node {
            current.nominated_node_name = n.clone();
        }
        if (preempting || deallocated) && retry_allowed {
            return Ok(Attempt::Retry);
        }
        Ok(Attempt::Pending(Placement {
            nominated_node: (!current.nominated_node_name.is_empty())
                .then(|| current.nominated_node_name.clone()),
            explain: explanation,
            ..pending(current, f.message)
        }))
    }

    /// The preemption executor: evicts the victims (the nominations of
    /// lower-priority pods on the target node are cleared by
    /// [`Nominator::record_failure`]).
    fn execute_preemption(
        &mut self,
        snapshot: &mut Snapshot,
        preemptor: &Pod,
        target: &str,
        victims: Vec<Arc<Pod>>,
        pass: &mut Pass,
        placed_at: &HashMap<String, usize>,
    ) -> Result<(), SimError> {
        if snapshot.index_of(target).is_none() {
            return Err(SimError::Runtime(format!(
                "preemption by {} nominated unknown node {target}",
                preemptor.key()
            )));
        }
        self.evict(snapshot, &preemptor.key(), &victims, pass, placed_at);
        pass.preemptions.push(Preemption {
            preemptor: preemptor.key(),
            node: target.to_string(),
            victims: victims.iter().map(|v| v.key()).collect(),
            pod_group: false,
        });
        Ok(())
    }

    /// Evicts victims from their nodes (a group with disruption mode `all`
    /// may span several); `by` is the preemptor's key.
    fn evict(
        &mut self,
        snapshot: &mut Snapshot,
        by: &str,
        victims: &[Arc<Pod>],
        pass: &mut Pass,
        placed_at: &HashMap<String, usize>,
    ) {
        for v in victims {
            if let Some(i) = snapshot.index_of(&v.node_name) {
                snapshot.remove(i, &v.uid);
            }
            self.groups.delete(v);
            if let Some(&i) = placed_at.get(&v.uid) {
                pass.placements[i].evicted = true;
                pass.placements[i].preempted_by = Some(by.to_string());
            }
        }
        pass.victims.extend(victims.iter().cloned());
    }
}

/// A placement that leaves the pod pending with `message`.
fn pending(pod: &Pod, message: String) -> Placement {
    Placement {
        pod: pod.key(),
        node: None,
        message,
        nominated_node: None,
        evicted: false,
        preempted_by: None,
        explain: None,
        devices: Vec::new(),
    }
}

/// Deletes the claims PostFilter deleted; true when some existed.
fn delete_claims(snapshot: &mut Snapshot, claims: &[(String, String)]) -> bool {
    let Some(dra) = snapshot.dra.as_mut().filter(|_| !claims.is_empty()) else {
        return false;
    };
    let dra = Arc::make_mut(dra);
    let mut changed = false;
    for key in claims {
        changed |= dra.claims.remove(key).is_some();
    }
    changed
}

/// Clears the allocation and `reservedFor` of the claims PostFilter
/// deallocated; true when some claim changed.
fn deallocate_claims(snapshot: &mut Snapshot, claims: &[(String, String)]) -> bool {
    if claims.is_empty() {
        return false;
    }
    let Some(dra) = snapshot.dra.as_mut() else {
        return false;
    };
    let dra = Arc::make_mut(dra);
    let mut changed = false;
    for (namespace, name) in claims {
        changed |= dra.deallocate(namespace, name);
    }
    changed
}
