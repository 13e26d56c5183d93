//! The scheduler's view of the cluster (upstream's scheduler cache and the
//! informer event handlers): every watched object converted into the model,
//! the assumed pods, the scheduling queue and the nominator, behind one lock.
//!
//! The framework [`Snapshot`] the cycles run on is kept up to date pod by
//! pod (assume, forget, bind, delete) and shared copy-on-write, so a cycle
//! never holds the lock. Updates that change nothing the scheduler reads (a
//! binding confirmed by the watch, a node heartbeat) leave it alone; it is
//! rebuilt from the cache ([`State::snapshot`]) only after node, namespace,
//! workload or volume changes and relists.
//!
//! The handlers are also the queue's event producers, as upstream's
//! `eventhandlers.go`: each change becomes the [`ClusterEvent`]s upstream
//! fires (`NodeAdd`, `NodeUpdateNodeLabel`, `AssignedPodDelete`,
//! `PersistentVolumeClaimUpdate`, ...), with the old and new objects, and
//! the queue moves only the pods the rejecting plugins' hints admit. A
//! relist is replayed as the additions, updates and deletions it implies.
//! Namespaces, Services, ReplicaSets, StatefulSets and PodDisruptionBudgets
//! are not event resources upstream and move no pod.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::apps::v1 as apps;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::policy::v1 as policy;
use k8s_openapi::api::storage::v1 as storage;
use kube::ResourceExt;
use rkube_framework::events::{
    self, node_scheduling_properties_change, pod_scheduling_properties_change, ActionType,
    ClusterEvent, CsiDriver, CsiNode, EventObject, EventResource,
};
use rkube_framework::{AssumeCache, Nominator, Profiles, Snapshot, WaitingPods};
use rkube_model::convert::{self, PriorityClasses};
use rkube_model::decision::DecisionMark;
use rkube_model::volumes::{PodVolumes, Pv, Pvc, StorageCapacity, StorageClass, Volumes};
use rkube_model::workloads::{PodDisruptionBudget, WorkloadSelectors};
use rkube_model::{LabelSelector, Labels, Node, Pod, RawObject};

use crate::queue::Queue;

/// An object's previous and new version (`None`: absent).
type OldNew<T> = (Option<T>, Option<T>);

/// A watch event, after the watcher's initial (re)list has been buffered.
#[derive(Debug)]
pub enum Change<K> {
    /// Added or modified.
    Apply(K),
    /// Deleted.
    Delete(K),
    /// A complete (re)list: everything else of this kind is gone.
    Replace(Vec<K>),
}

/// A pod as cached: the API object and its model.
#[derive(Debug, Clone)]
pub struct PodEntry {
    /// As the API server sent it.
    pub raw: Arc<core::Pod>,
    /// Converted.
    pub model: Arc<Pod>,
}

/// Cluster cache, queue and nominator.
pub struct State {
    /// Nodes by name (the snapshot's node order is name order).
    pub nodes: BTreeMap<String, Arc<Node>>,
    /// Pods by UID.
    pub pods: HashMap<String, PodEntry>,
    /// Pods this scheduler placed and is binding or has bound, not yet seen
    /// bound by the watch (by UID; `node_name` set).
    pub assumed: HashMap<String, Arc<Pod>>,
    namespaces: BTreeMap<String, Labels>,
    /// Built-in classes only: pods from the API server carry `spec.priority`
    /// (the Priority admission plugin resolves it), so kube-scheduler does not
    /// watch PriorityClasses and its RBAC role cannot list them.
    classes: PriorityClasses,
    services: BTreeMap<(String, String), Labels>,
    replica_sets: BTreeMap<(String, String), LabelSelector>,
    stateful_sets: BTreeMap<(String, String), LabelSelector>,
    pdbs: BTreeMap<(String, String), PodDisruptionBudget>,
    /// Volumes, claims and classes as the informers last sent them.
    volumes: Volumes,
    /// Volume bindings assumed by pods in their binding cycle (upstream's
    /// assume caches), by pod UID: the node and the bindings. They count in
    /// every snapshot while the objects are at the versions they were
    /// assumed from; a newer version from the informer wins.
    assumed_volumes: HashMap<String, (String, PodVolumes)>,
    /// CSINodes as the hints read them, by name.
    csi_nodes: BTreeMap<String, Arc<CsiNode>>,
    csi_drivers: BTreeMap<String, Arc<CsiDriver>>,
    /// DeviceClasses, ResourceSlices and ResourceClaims (and the claims
    /// assumed by pods in their binding cycle).
    dra: dra::DraCache,
    /// Asynchronous preemptions still deleting victims.
    preemptions: preemption::Preemptions,
    /// PodGroups and their members (GenericWorkload; `None` without it).
    pod_groups: Option<pod_groups::PodGroupCache>,
    /// The workloads the queue's hints read; `false` after a workload
    /// change, until they are handed to the queue again.
    workloads_synced: bool,
    /// Pods waiting on Permit (shared with the binding cycles).
    pub waiting: WaitingPods,
    /// The scheduling queue.
    pub queue: Queue,
    /// Nominated pods.
    pub nominator: Nominator,
    seq: u64,
    /// Per kind, the resourceVersion of the last change its informer
    /// applied (what a decision mark records).
    seen: BTreeMap<String, u64>,
    /// The leadership term (ms since the Unix epoch the scheduling loop
    /// started) and the cycles started in it.
    term_ms: u64,
    cycles: u64,
    /// The snapshot, kept up to date pod by pod; `None` after a change that
    /// needs a rebuild (nodes, namespaces, workloads, volumes, a relist).
    snap: Option<Arc<Snapshot>>,
    /// What the snapshot holds per pod UID: its node index and the pod.
    in_snap: HashMap<String, (usize, Arc<Pod>)>,
}

fn key_of<K: kube::Resource>(o: &K) -> (String, String) {
    (o.namespace().unwrap_or_default(), o.name_any())
}

fn raw_object<K: serde::Serialize>(kind: &str, o: &K, name: &str) -> Option<RawObject> {
    let value = serde_json::to_value(o).ok()?;
    Some(RawObject {
        file: "api".into(),
        kind: kind.into(),
        display_name: name.into(),
        value,
    })
}

impl State {
    /// An empty cache with a queue using the configured backoffs.
    pub fn new(queue: Queue) -> Self {
        State {
            nodes: BTreeMap::new(),
            pods: HashMap::new(),
            assumed: HashMap::new(),
            namespaces: BTreeMap::new(),
            classes: PriorityClasses::with_builtins(),
            services: BTreeMap::new(),
            replica_sets: BTreeMap::new(),
            stateful_sets: BTreeMap::new(),
            pdbs: BTreeMap::new(),
            volumes: Volumes::default(),
            assumed_volumes: HashMap::new(),
            csi_nodes: BTreeMap::new(),
            csi_drivers: BTreeMap::new(),
            dra: dra::DraCache::default(),
            preemptions: preemption::Preemptions::default(),
            pod_groups: None,
            workloads_synced: false,
            waiting: WaitingPods::new(),
            queue,
            nominator: Nominator::new(),
            seq: 0,
            seen: BTreeMap::new(),
            term_ms: 0,
            cycles: 0,
            snap: None,
            in_snap: HashMap::new(),
        }
    }

    /// Marks the snapshot for a rebuild.
    fn invalidate(&mut self) {
        self.snap = None;
        self.in_snap.clear();
    }

    /// Where a pod belongs in the snapshot: bound and not terminated, or
    /// assumed and not yet seen bound.
    fn placement(&self, uid: &str) -> Option<Arc<Pod>> {
        match self.pods.get(uid) {
            Some(e) if !e.model.node_name.is_empty() => {
                (!e.model.terminated).then(|| e.model.clone())
            }
            _ => self.assumed.get(uid).cloned(),
        }
    }

    /// Brings one pod's place in the snapshot up to date.
    fn resync_pod(&mut self, uid: &str) {
        if self.snap.is_none() {
            return;
        }
        let want = self.placement(uid);
        if let (Some(w), Some((_, have))) = (&want, self.in_snap.get(uid)) {
            // The same pod, or an equal one: the watch confirming an assumed
            // pod's binding, a status update that changes nothing the
            // scheduler reads. The snapshot keeps what it has.
            if Arc::ptr_eq(w, have) || w == have {
                return;
            }
        }
        if want.is_none() && !self.in_snap.contains_key(uid) {
            // A pending pod: not in the snapshot, and not to be.
            return;
        }
        // Copy-on-write: a cycle still running on the previous version keeps it.
        let snap = Arc::make_mut(self.snap.as_mut().expect("checked"));
        if let Some((i, _)) = self.in_snap.remove(uid) {
            snap.remove(i, uid);
        }
        if let Some(p) = want {
            if let Some(i) = snap.index_of(&p.node_name) {
                snap.assume(i, p.clone());
                self.in_snap.insert(uid.to_string(), (i, p));
            }
        }
    }

    /// The queue's and the cache's sizes for `/metrics` (upstream's cache
    /// counts assigned and assumed pods, not pending ones, nor finished
    /// ones, which its informer never sees).
    pub fn gauges(&self) -> crate::metrics::Gauges {
        let assigned = self
            .pods
            .iter()
            .filter(|(uid, e)| {
                !e.model.node_name.is_empty()
                    && !e.model.terminated
                    && !self.assumed.contains_key(*uid)
            })
            .count();
        crate::metrics::Gauges {
            pending: self.queue.pending(),
            nodes: self.nodes.len(),
            pods: assigned + self.assumed.len(),
            assumed_pods: self.assumed.len(),
            inflight_events: self.queue.inflight_events(),
            binding: 0,
        }
    }

    /// Counts a pod on its node before its binding is confirmed.
    pub fn assume(&mut self, uid: String, pod: Arc<Pod>) {
        self.pod_group_member_assumed(&pod, true);
        self.assumed.insert(uid.clone(), pod);
        self.resync_pod(&uid);
    }

    /// Forgets an assumed pod (its binding failed).
    pub fn forget(&mut self, uid: &str) {
        if let Some(pod) = self.assumed.remove(uid) {
            self.pod_group_member_assumed(&pod, false);
        }
        self.resync_pod(uid);
    }

    /// Builds the snapshot if a change invalidated it.
    pub fn ensure_snapshot(&mut self) {
        if self.snap.is_some() {
            return;
        }
        let snap = self.snapshot();
        let mut in_snap = HashMap::new();
        for (i, n) in snap.nodes.iter().enumerate() {
            for p in &n.pods {
                in_snap.insert(p.uid.clone(), (i, p.clone()));
            }
        }
        self.in_snap = in_snap;
        self.snap = Some(Arc::new(snap));
    }

    /// The snapshot kept by [`State::ensure_snapshot`] (shared: a cycle
    /// runs on it without the lock; later changes copy it first).
    pub fn cached_snapshot(&self) -> Option<Arc<Snapshot>> {
        self.snap.clone()
    }

    /// The framework snapshot of the cache: nodes in name order, every
    /// bound non-terminated pod and every assumed pod on its node.
    pub fn snapshot(&self) -> Snapshot {
        let mut snap = Snapshot::new(self.nodes.values().cloned().collect());
        snap.workloads = Arc::new(self.workloads());
        let mut volumes = self.volumes.clone();
        for (node, v) in self.assumed_volumes.values() {
            volumes.assume_bindings(v, node);
        }
        snap.volumes = Arc::new(volumes);
        snap.dra = Some(self.dra_view());
        snap.pod_groups = self.pod_groups_view();
        snap.namespaces = self.namespaces.clone();
        let mut placed: Vec<&Arc<Pod>> = self
            .pods
            .values()
            .map(|e| &e.model)
            .filter(|p| !p.node_name.is_empty() && !p.terminated)
            .chain(self.assumed.values().filter(|p| {
                self.pods
                    .get(&p.uid)
                    .is_none_or(|e| e.model.node_name.is_empty())
            }))
            .collect();
        placed.sort_by_key(|p| p.seq);
        for p in placed {
            if let Some(i) = snap.index_of(&p.node_name) {
                snap.assume(i, p.clone());
            }
        }
        snap
    }

    /// Services, ReplicaSets, StatefulSets and budgets as the framework
    /// reads them.
    fn workloads(&self) -> WorkloadSelectors {
        let mut workloads = WorkloadSelectors::default();
        for ((ns, _), sel) in &self.services {
            workloads
                .services
                .entry(ns.clone())
                .or_default()
                .push(sel.clone());
        }
        workloads.replica_sets = self.replica_sets.clone().into_iter().collect();
        workloads.stateful_sets = self.stateful_sets.clone().into_iter().collect();
        workloads.pdbs = self.pdbs.values().cloned().collect();
        workloads
    }

    /// Hands the current workloads to the queue's hints if they changed.
    fn sync_queue_workloads(&mut self) {
        if !self.workloads_synced {
            let w = Arc::new(self.workloads());
            self.queue.set_workloads(w);
            self.workloads_synced = true;
        }
    }

    /// A cluster event for the queue (upstream's
    /// `MoveAllToActiveOrBackoffQueue`).
    fn move_pods(
        &mut self,
        event: &ClusterEvent,
        old: Option<EventObject>,
        new: Option<EventObject>,
        pre_check: Option<&dyn Fn(&Pod) -> bool>,
        now: Instant,
    ) {
        self.sync_queue_workloads();
        let moved = self
            .queue
            .move_pods(event, old.as_ref(), new.as_ref(), pre_check, now);
        if moved > 0 {
            tracing::debug!(event = %event.label(), moved, "cluster event moved unschedulable pods");
        }
    }

    /// A popped pod was rejected by `rejectors` (see
    /// [`Queue::requeue_unschedulable`]).
    pub fn requeue_unschedulable(
        &mut self,
        pod: Arc<Pod>,
        rejectors: BTreeSet<&'static str>,
        now: Instant,
    ) {
        self.sync_queue_workloads();
        self.queue.requeue_unschedulable(pod, rejectors, now);
    }

    /// The binding cycle of `assumed` failed and it was forgotten: its
    /// resources are free again (upstream's `handleBindingCycleError`
    /// fires `AssignedPodDelete`; after a rejection the pod itself is not
    /// moved, it goes back by its own failure).
    pub fn assumed_pod_forgotten(&mut self, assumed: &Arc<Pod>, rejected: bool, now: Instant) {
        let uid = assumed.uid.clone();
        let not_itself = move |p: &Pod| p.uid != uid;
        let pre_check: Option<&dyn Fn(&Pod) -> bool> =
            if rejected { Some(&not_itself) } else { None };
        self.move_pods(
            &events::ASSIGNED_POD_DELETE,
            Some(EventObject::Pod(assumed.clone())),
            None,
            pre_check,
            now,
        );
    }

    /// The PreEnqueue rejection of a pod, if any.
    pub fn pre_enqueue_rejection(&self, profiles: &Profiles, pod: &Pod) -> Option<String> {
        let dra = pod.has_resource_claims().then(|| self.dra_view());
        let ctx = rkube_framework::EnqueueContext {
            dra: dra.as_deref(),
            pod_groups: self.pod_group_states(),
        };
        rkube_framework::pre_enqueue_rejection_in(profiles.for_pod(pod)?, pod, &ctx)
    }

    /// What a scheduling cycle for the pod `uid` runs on: its latest
    /// version, the snapshot (built if a change invalidated it) and the
    /// nominations; `None` (and the pod is done in the queue) when it is
    /// no longer one of ours to schedule.
    pub fn take_for_cycle(
        &mut self,
        profiles: &Profiles,
        uid: &str,
        record: bool,
    ) -> Option<(PodEntry, Arc<Snapshot>, Nominator, Option<DecisionMark>)> {
        let entry = self
            .pods
            .get(uid)
            .filter(|e| Self::is_ours_pending(profiles, &e.model))
            .cloned();
        let Some(entry) = entry else {
            self.queue.done(uid);
            return None;
        };
        self.ensure_snapshot();
        let snapshot = self.snap.clone()?;
        self.cycles += 1;
        let mark = record.then(|| DecisionMark {
            term_ms: self.term_ms,
            cycle: self.cycles,
            seen: self.seen.clone(),
        });
        Some((entry, snapshot, self.nominator.clone(), mark))
    }

    /// Notes that the informer of `kind` applied a change at
    /// resourceVersion `rv`.
    pub fn observe(&mut self, kind: &str, rv: u64) {
        match self.seen.get_mut(kind) {
            Some(seen) => *seen = (*seen).max(rv),
            None => {
                self.seen.insert(kind.to_string(), rv);
            }
        }
    }

    /// A new leadership term starts: cycles count from 1 again under the
    /// term's start time.
    pub fn start_term(&mut self, now: std::time::SystemTime) {
        self.term_ms = now
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        self.cycles = 0;
    }

    /// The latest version of a pod that is still ours to schedule.
    pub fn pending_pod(&self, profiles: &Profiles, uid: &str) -> Option<Arc<Pod>> {
        self.pods
            .get(uid)
            .filter(|e| Self::is_ours_pending(profiles, &e.model))
            .map(|e| e.model.clone())
    }

    /// A claim as the informer last sent it.
    pub fn informer_pvc(&self, namespace: &str, name: &str) -> Option<Pvc> {
        self.volumes.pvc(namespace, name).cloned()
    }

    /// A volume as the informer last sent it.
    pub fn informer_pv(&self, name: &str) -> Option<Pv> {
        self.volumes.pvs.get(name).cloned()
    }

    /// The pod's binding cycle is over (bound, or failed and unreserved):
    /// its assumed volume bindings no longer count.
    pub fn drop_assumed_volumes(&mut self, uid: &str) {
        if self.assumed_volumes.remove(uid).is_some() {
            self.invalidate();
        }
    }

    /// True when the pod is pending and one of our profiles schedules it.
    pub fn is_ours_pending(profiles: &Profiles, pod: &Pod) -> bool {
        pod.node_name.is_empty()
            && !pod.terminated
            && !pod.terminating
            && profiles.for_pod(pod).is_some()
    }

    fn apply_pod(&mut self, profiles: &Profiles, raw: core::Pod, now: Instant) {
        let Some(uid) = raw.metadata.uid.clone() else {
            return;
        };
        self.apply_pod_inner(profiles, &uid, raw, now);
        self.resync_pod(&uid);
    }

    fn apply_pod_inner(&mut self, profiles: &Profiles, uid: &str, raw: core::Pod, now: Instant) {
        let uid = uid.to_string();
        let old = self.pods.get(&uid).cloned();
        let seq = match &old {
            Some(o) => o.model.seq,
            None => {
                self.seq += 1;
                self.seq
            }
        };
        let model = match convert::pod(&raw, seq, &self.classes) {
            Ok(m) => Arc::new(m),
            Err(e) => {
                tracing::warn!(pod = %format!("{}/{}", raw.namespace().unwrap_or_default(), raw.name_any()), error = %e, "ignoring pod that cannot be converted");
                return;
            }
        };
        let raw = Arc::new(raw);
        self.pod_group_member_changed(profiles, old.as_ref().map(|o| &*o.model), &model, now);
        let terminating = raw.metadata.deletion_timestamp.is_some();
        self.pods.insert(
            uid.clone(),
            PodEntry {
                raw: raw.clone(),
                model: model.clone(),
            },
        );
        if terminating {
            self.victim_changed(&uid);
        }
        let old_model = old.as_ref().map(|o| o.model.clone());
        if !model.node_name.is_empty() {
            // Assigned: it counts on its node from now on.
            self.queue.delete(&uid);
            self.nominator.delete(&uid);
            self.assumed.remove(&uid);
            let was_assigned = old_model.as_ref().filter(|o| !o.node_name.is_empty());
            let was_terminated = old_model.as_ref().is_some_and(|o| o.terminated);
            if model.terminated {
                // Finished: upstream's informer drops terminal pods, a
                // deletion; its resources are free again.
                if !was_terminated {
                    let gone = was_assigned.cloned().unwrap_or_else(|| model.clone());
                    self.move_pods(
                        &events::ASSIGNED_POD_DELETE,
                        Some(EventObject::Pod(gone)),
                        None,
                        None,
                        now,
                    );
                }
            } else if let Some(o) = was_assigned.filter(|_| !was_terminated) {
                let o = o.clone();
                for e in pod_scheduling_properties_change(&model, &o, false) {
                    self.move_pods(
                        &e,
                        Some(EventObject::Pod(o.clone())),
                        Some(EventObject::Pod(model.clone())),
                        None,
                        now,
                    );
                }
            } else {
                // Bound (by us or anyone), or seen for the first time.
                self.move_pods(
                    &events::ASSIGNED_POD_ADD,
                    None,
                    Some(EventObject::Pod(model.clone())),
                    None,
                    now,
                );
            }
            return;
        }
        if !Self::is_ours_pending(profiles, &model) {
            self.queue.delete(&uid);
            self.nominator.delete(&uid);
            return;
        }
        if !model.nominated_node_name.is_empty() {
            self.nominator
                .add(model.clone(), &model.nominated_node_name.clone());
        }
        let gated = self.pre_enqueue_rejection(profiles, &model).is_some();
        self.sync_queue_workloads();
        self.queue
            .upsert(old_model.as_deref(), model.clone(), gated, now);
        if let Some(o) = old_model.filter(|o| {
            !o.nominated_node_name.is_empty() && o.nominated_node_name != model.nominated_node_name
        }) {
            // A nominated pod counts on its node for pods of lower or equal
            // priority; leaving it frees that room.
            let priority = o.priority;
            self.move_pods(
                &events::ASSIGNED_POD_DELETE,
                Some(EventObject::Pod(o)),
                None,
                Some(&move |p: &Pod| p.priority <= priority),
                now,
            );
        }
    }

    fn delete_pod(&mut self, uid: &str, now: Instant) {
        // A pod waiting on Permit is rejected (upstream's RejectWaitingPod).
        self.waiting.reject(uid, "", "removed");
        let old = self.pods.remove(uid).map(|o| o.model);
        if let Some(o) = &old {
            self.pod_group_member_deleted(o);
        }
        self.victim_changed(uid);
        self.queue.delete(uid);
        self.nominator.delete(uid);
        let assumed = self.assumed.remove(uid);
        self.resync_pod(uid);
        let delete = events::ASSIGNED_POD_DELETE;
        if let Some(a) = assumed {
            // Upstream's handleAssumedPodDeletion: its room is free.
            self.move_pods(&delete, Some(EventObject::Pod(a)), None, None, now);
        } else if let Some(o) = old {
            if !o.node_name.is_empty() {
                if !o.terminated {
                    self.move_pods(&delete, Some(EventObject::Pod(o)), None, None, now);
                }
            } else if !o.nominated_node_name.is_empty() {
                // A nominated pod held room for pods of lower or equal priority.
                let priority = o.priority;
                self.move_pods(
                    &delete,
                    Some(EventObject::Pod(o)),
                    None,
                    Some(&move |p: &Pod| p.priority <= priority),
                    now,
                );
            }
        }
    }

    /// Applies a pod watch event.
    pub fn pods_changed(&mut self, profiles: &Profiles, change: Change<core::Pod>, now: Instant) {
        match change {
            Change::Apply(p) => self.apply_pod(profiles, p, now),
            Change::Delete(p) => {
                if let Some(uid) = p.metadata.uid {
                    self.delete_pod(&uid, now);
                }
            }
            Change::Replace(list) => {
                self.invalidate();
                let keep: HashSet<String> =
                    list.iter().filter_map(|p| p.metadata.uid.clone()).collect();
                let gone: Vec<String> = self
                    .pods
                    .keys()
                    .filter(|k| !keep.contains(*k))
                    .cloned()
                    .collect();
                for uid in gone {
                    self.delete_pod(&uid, now);
                }
                for p in list {
                    self.apply_pod(profiles, p, now);
                }
            }
        }
    }

    /// Applies a node watch event.
    pub fn nodes_changed(&mut self, change: Change<core::Node>, now: Instant) {
        let convert = |n: &core::Node| {
            convert::node(n)
                .map_err(|e| tracing::warn!(node = %n.name_any(), error = %e, "ignoring node that cannot be converted"))
                .ok()
        };
        // (old, new) pairs, as upstream's informer reports them.
        let mut changes: Vec<OldNew<Arc<Node>>> = Vec::new();
        match change {
            Change::Apply(n) => {
                let m = convert(&n);
                if let Some(m) = &m {
                    if self.nodes.get(&m.name).is_some_and(|old| **old == *m) {
                        // A heartbeat or a condition: nothing the scheduler
                        // reads changed (upstream moves no pods for it either).
                        return;
                    }
                }
                self.invalidate();
                if let Some(m) = m {
                    let m = Arc::new(m);
                    let old = self.nodes.insert(m.name.clone(), m.clone());
                    changes.push((old, Some(m)));
                }
            }
            Change::Delete(n) => {
                self.invalidate();
                if let Some(old) = self.nodes.remove(&n.name_any()) {
                    changes.push((Some(old), None));
                }
            }
            Change::Replace(list) => {
                self.invalidate();
                let mut old = std::mem::take(&mut self.nodes);
                for m in list.iter().filter_map(convert) {
                    let m = Arc::new(m);
                    self.nodes.insert(m.name.clone(), m.clone());
                    changes.push((old.remove(&m.name), Some(m)));
                }
                changes.extend(old.into_values().map(|o| (Some(o), None)));
            }
        }
        for (old, new) in changes {
            let evs = match (&old, &new) {
                (None, Some(_)) => vec![events::NODE_ADD],
                (Some(_), None) => vec![events::NODE_DELETE],
                (Some(o), Some(n)) => node_scheduling_properties_change(n, o),
                (None, None) => Vec::new(),
            };
            let old = old.map(EventObject::Node);
            let new = new.map(EventObject::Node);
            for e in &evs {
                self.move_pods(e, old.clone(), new.clone(), None, now);
            }
        }
    }

    /// Applies a namespace watch event (not an event resource upstream:
    /// no pod moves; a namespace selector's new match is seen on the next
    /// attempt or the 5-minute flush).
    pub fn namespaces_changed(&mut self, change: Change<core::Namespace>, _now: Instant) {
        self.invalidate();
        let labels = |n: &core::Namespace| n.metadata.labels.clone().unwrap_or_default();
        match change {
            Change::Apply(n) => {
                self.namespaces.insert(n.name_any(), labels(&n));
            }
            Change::Delete(n) => {
                self.namespaces.remove(&n.name_any());
            }
            Change::Replace(list) => {
                self.namespaces = list.iter().map(|n| (n.name_any(), labels(n))).collect();
            }
        }
    }

    /// Applies a Service watch event.
    pub fn services_changed(&mut self, change: Change<core::Service>) {
        self.invalidate();
        self.workloads_synced = false;
        let sel = |s: &core::Service| s.spec.as_ref().and_then(|s| s.selector.clone());
        replace_map(&mut self.services, change, |s| Some((key_of(s), sel(s)?)));
    }

    /// Applies a ReplicaSet watch event.
    pub fn replica_sets_changed(&mut self, change: Change<apps::ReplicaSet>) {
        self.invalidate();
        self.workloads_synced = false;
        replace_map(&mut self.replica_sets, change, |rs| {
            let sel = convert::label_selector(&rs.spec.selector, "spec.selector").ok()?;
            Some((key_of(rs), sel))
        });
    }

    /// Applies a StatefulSet watch event.
    pub fn stateful_sets_changed(&mut self, change: Change<apps::StatefulSet>) {
        self.invalidate();
        self.workloads_synced = false;
        replace_map(&mut self.stateful_sets, change, |ss| {
            let sel = convert::label_selector(&ss.spec.selector, "spec.selector").ok()?;
            Some((key_of(ss), sel))
        });
    }

    /// Applies a PodDisruptionBudget watch event.
    pub fn pdbs_changed(&mut self, change: Change<policy::PodDisruptionBudget>) {
        self.invalidate();
        self.workloads_synced = false;
        replace_map(&mut self.pdbs, change, |pdb| {
            let converted = convert::pdb(pdb).ok()?;
            Some((key_of(pdb), converted))
        });
    }

    fn take_volume_object<K: serde::Serialize + kube::Resource>(&mut self, kind: &str, o: &K) {
        let (ns, name) = key_of(o);
        let shown = if ns.is_empty() {
            name
        } else {
            format!("{ns}/{name}")
        };
        if let Some(raw) = raw_object(kind, o, &shown) {
            if let Err(e) = self.volumes.take(&raw) {
                tracing::warn!(object = %shown, kind, error = %e, "ignoring object that cannot be converted");
            }
        }
    }

    /// Applies a PersistentVolume watch event.
    pub fn pvs_changed(&mut self, change: Change<core::PersistentVolume>, now: Instant) {
        self.invalidate();
        let obj = |v: &Pv| EventObject::PersistentVolume(Arc::new(v.clone()));
        let mut changes = Vec::new();
        match change {
            Change::Apply(o) => {
                let name = o.name_any();
                let old = self.volumes.pvs.get(&name).map(obj);
                self.take_volume_object("PersistentVolume", &o);
                changes.push((old, self.volumes.pvs.get(&name).map(obj)));
            }
            Change::Delete(o) => {
                changes.push((
                    self.volumes.pvs.remove(&o.name_any()).map(|v| obj(&v)),
                    None,
                ));
            }
            Change::Replace(list) => {
                let mut old = std::mem::take(&mut self.volumes.pvs);
                for o in &list {
                    self.take_volume_object("PersistentVolume", o);
                    let name = o.name_any();
                    changes.push((
                        old.remove(&name).map(|v| obj(&v)),
                        self.volumes.pvs.get(&name).map(obj),
                    ));
                }
                changes.extend(old.values().map(|v| (Some(obj(v)), None)));
            }
        }
        self.volume_events(EventResource::PersistentVolume, changes, now);
    }

    /// Applies a PersistentVolumeClaim watch event.
    pub fn pvcs_changed(&mut self, change: Change<core::PersistentVolumeClaim>, now: Instant) {
        self.invalidate();
        let obj = |v: &Pvc| EventObject::PersistentVolumeClaim(Arc::new(v.clone()));
        let mut changes = Vec::new();
        match change {
            Change::Apply(o) => {
                let key = key_of(&o);
                let old = self.volumes.pvcs.get(&key).map(obj);
                self.take_volume_object("PersistentVolumeClaim", &o);
                changes.push((old, self.volumes.pvcs.get(&key).map(obj)));
            }
            Change::Delete(o) => {
                changes.push((self.volumes.pvcs.remove(&key_of(&o)).map(|v| obj(&v)), None));
            }
            Change::Replace(list) => {
                let mut old = std::mem::take(&mut self.volumes.pvcs);
                for o in &list {
                    self.take_volume_object("PersistentVolumeClaim", o);
                    let key = key_of(o);
                    changes.push((
                        old.remove(&key).map(|v| obj(&v)),
                        self.volumes.pvcs.get(&key).map(obj),
                    ));
                }
                changes.extend(old.values().map(|v| (Some(obj(v)), None)));
            }
        }
        self.volume_events(EventResource::PersistentVolumeClaim, changes, now);
    }

    /// Applies a StorageClass watch event.
    pub fn storage_classes_changed(&mut self, change: Change<storage::StorageClass>, now: Instant) {
        self.invalidate();
        let obj = |v: &StorageClass| EventObject::StorageClass(Arc::new(v.clone()));
        let mut changes = Vec::new();
        match change {
            Change::Apply(o) => {
                let name = o.name_any();
                let old = self.volumes.classes.get(&name).map(obj);
                self.take_volume_object("StorageClass", &o);
                changes.push((old, self.volumes.classes.get(&name).map(obj)));
            }
            Change::Delete(o) => {
                changes.push((
                    self.volumes.classes.remove(&o.name_any()).map(|v| obj(&v)),
                    None,
                ));
            }
            Change::Replace(list) => {
                let mut old = std::mem::take(&mut self.volumes.classes);
                for o in &list {
                    self.take_volume_object("StorageClass", o);
                    let name = o.name_any();
                    changes.push((
                        old.remove(&name).map(|v| obj(&v)),
                        self.volumes.classes.get(&name).map(obj),
                    ));
                }
                changes.extend(old.values().map(|v| (Some(obj(v)), None)));
            }
        }
        self.volume_events(EventResource::StorageClass, changes, now);
    }

    /// Applies a CSINode watch event.
    pub fn csi_nodes_changed(&mut self, change: Change<storage::CSINode>, now: Instant) {
        self.invalidate();
        let mut changes = Vec::new();
        match change {
            Change::Apply(o) => {
                let name = o.name_any();
                self.volumes.forget_csi_node(&name);
                self.take_volume_object("CSINode", &o);
                let new = Arc::new(csi_node(&o));
                let old = self.csi_nodes.insert(name, new.clone());
                changes.push((old, Some(new)));
            }
            Change::Delete(o) => {
                let name = o.name_any();
                self.volumes.forget_csi_node(&name);
                changes.push((self.csi_nodes.remove(&name), None));
            }
            Change::Replace(list) => {
                self.volumes.csi_limits.clear();
                self.volumes.csi_node_drivers.clear();
                let mut old = std::mem::take(&mut self.csi_nodes);
                for o in &list {
                    self.take_volume_object("CSINode", o);
                    let new = Arc::new(csi_node(o));
                    self.csi_nodes.insert(new.name.clone(), new.clone());
                    changes.push((old.remove(&new.name), Some(new)));
                }
                changes.extend(old.into_values().map(|o| (Some(o), None)));
            }
        }
        let changes = changes
            .into_iter()
            .map(|(o, n)| (o.map(EventObject::CsiNode), n.map(EventObject::CsiNode)))
            .collect();
        self.volume_events(EventResource::CsiNode, changes, now);
    }

    /// Applies a CSIDriver watch event.
    pub fn csi_drivers_changed(&mut self, change: Change<storage::CSIDriver>, now: Instant) {
        self.invalidate();
        let mut changes = Vec::new();
        match change {
            Change::Apply(o) => {
                self.take_volume_object("CSIDriver", &o);
                let new = Arc::new(csi_driver(&o));
                let old = self.csi_drivers.insert(new.name.clone(), new.clone());
                changes.push((old, Some(new)));
            }
            Change::Delete(o) => {
                let name = o.name_any();
                self.volumes.csi_drivers_required_on_node.remove(&name);
                self.volumes.csi_drivers_with_capacity.remove(&name);
                changes.push((self.csi_drivers.remove(&name), None));
            }
            Change::Replace(list) => {
                self.volumes.csi_drivers_required_on_node.clear();
                self.volumes.csi_drivers_with_capacity.clear();
                let mut old = std::mem::take(&mut self.csi_drivers);
                for o in &list {
                    self.take_volume_object("CSIDriver", o);
                    let new = Arc::new(csi_driver(o));
                    self.csi_drivers.insert(new.name.clone(), new.clone());
                    changes.push((old.remove(&new.name), Some(new)));
                }
                changes.extend(old.into_values().map(|o| (Some(o), None)));
            }
        }
        let changes = changes
            .into_iter()
            .map(|(o, n)| (o.map(EventObject::CsiDriver), n.map(EventObject::CsiDriver)))
            .collect();
        self.volume_events(EventResource::CsiDriver, changes, now);
    }

    /// Applies a CSIStorageCapacity watch event: the Add, Update or Delete
    /// event of each object, with its old and new versions for
    /// VolumeBinding's hint.
    pub fn storage_capacities_changed(
        &mut self,
        change: Change<storage::CSIStorageCapacity>,
        now: Instant,
    ) {
        self.invalidate();
        let key =
            |o: &storage::CSIStorageCapacity| (o.namespace().unwrap_or_default(), o.name_any());
        let as_object = |c: StorageCapacity| EventObject::CsiStorageCapacity(Arc::new(c));
        let mut changes = Vec::new();
        match change {
            Change::Apply(o) => {
                let k = key(&o);
                let old = self.volumes.storage_capacities.remove(&k);
                self.take_volume_object("CSIStorageCapacity", &o);
                let new = self.volumes.storage_capacities.get(&k).cloned();
                changes.push((old.map(as_object), new.map(as_object)));
            }
            Change::Delete(o) => {
                if let Some(old) = self.volumes.storage_capacities.remove(&key(&o)) {
                    changes.push((Some(as_object(old)), None));
                }
            }
            Change::Replace(list) => {
                let mut old = std::mem::take(&mut self.volumes.storage_capacities);
                for o in &list {
                    let k = key(o);
                    self.take_volume_object("CSIStorageCapacity", o);
                    let new = self.volumes.storage_capacities.get(&k).cloned();
                    changes.push((old.remove(&k).map(as_object), new.map(as_object)));
                }
                changes.extend(old.into_values().map(|o| (Some(as_object(o)), None)));
            }
        }
        self.volume_events(EventResource::CsiStorageCapacity, changes, now);
    }

    /// The Add, Update or Delete event of each (old, new) pair.
    fn volume_events(
        &mut self,
        resource: EventResource,
        changes: Vec<OldNew<EventObject>>,
        now: Instant,
    ) {
        for (old, new) in changes {
            let action = match (&old, &new) {
                (None, Some(_)) => ActionType::ADD,
                (Some(_), Some(_)) => ActionType::UPDATE,
                (Some(_), None) => ActionType::DELETE,
                (None, None) => continue,
            };
            self.move_pods(&ClusterEvent::new(resource, action), old, new, None, now);
        }
    }
}

/// A CSIDriver as the hints read it.
fn csi_driver(o: &storage::CSIDriver) -> CsiDriver {
    CsiDriver {
        name: o.name_any(),
        storage_capacity: o.spec.storage_capacity == Some(true),
    }
}

/// A CSINode as the hints read it: its drivers' `allocatable.count` and
/// the migrated-plugins annotation.
fn csi_node(o: &storage::CSINode) -> CsiNode {
    CsiNode {
        name: o.name_any(),
        drivers: o
            .spec
            .drivers
            .iter()
            .map(|d| {
                let count = d.allocatable.as_ref().and_then(|a| a.count).unwrap_or(0);
                (d.name.clone(), count)
            })
            .collect(),
        migrated_plugins: o
            .annotations()
            .get("storage.alpha.kubernetes.io/migrated-plugins")
            .cloned()
            .unwrap_or_default(),
    }
}

impl AssumeCache for State {
    fn assume_volumes(&mut self, pod: &Pod, node: &str, volumes: &PodVolumes) {
        self.assumed_volumes
            .insert(pod.uid.clone(), (node.to_string(), volumes.clone()));
        self.invalidate();
    }

    fn revert_volumes(&mut self, pod: &Pod, _: &PodVolumes) {
        self.drop_assumed_volumes(&pod.uid);
    }

    fn assume_claim(&mut self, claim: &rkube_model::dra::ResourceClaim) {
        self.assume_dra_claim(claim);
    }

    fn forget_claim(&mut self, namespace: &str, name: &str) {
        self.forget_dra_claim(namespace, name);
    }
}

/// Applies a change to a map of converted objects; `convert` returns `None`
/// for objects that do not contribute (they are removed).
fn replace_map<K: kube::Resource, V>(
    map: &mut BTreeMap<(String, String), V>,
    change: Change<K>,
    convert: impl Fn(&K) -> Option<((String, String), V)>,
) {
    match change {
        Change::Apply(o) => match convert(&o) {
            Some((k, v)) => {
                map.insert(k, v);
            }
            None => {
                map.remove(&key_of(&o));
            }
        },
        Change::Delete(o) => {
            map.remove(&key_of(&o));
        }
        Change::Replace(list) => {
            map.clear();
            map.extend(list.iter().filter_map(convert));
        }
    }
}

mod dra;
mod pod_groups;
mod preemption;
#[cfg(test)]
mod tests;
