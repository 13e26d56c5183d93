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

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::apps::v1 as apps;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::policy::v1 as policy;
use k8s_openapi::api::storage::v1 as storage;
use kube::ResourceExt;
use rkube_framework::{AssumeCache, Nominator, Profiles, Snapshot, WaitingPods};
use rkube_model::convert::{self, PriorityClasses};
use rkube_model::volumes::{PodVolumes, Pv, Pvc, Volumes};
use rkube_model::workloads::{PodDisruptionBudget, WorkloadSelectors};
use rkube_model::{LabelSelector, Labels, Node, Pod, RawObject};

use crate::queue::Queue;

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
    /// Pods waiting on Permit (shared with the binding cycles).
    pub waiting: WaitingPods,
    /// The scheduling queue.
    pub queue: Queue,
    /// Nominated pods.
    pub nominator: Nominator,
    seq: u64,
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

/// True when a pod's update may change how it schedules (status-only
/// updates, such as our own condition patches, do not).
fn scheduling_relevant_change(old: &core::Pod, new: &core::Pod) -> bool {
    old.spec != new.spec
        || old.metadata.labels != new.metadata.labels
        || old.metadata.annotations != new.metadata.annotations
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
            waiting: WaitingPods::new(),
            queue,
            nominator: Nominator::new(),
            seq: 0,
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
                snap.nodes[i].add_pod(p.clone());
                self.in_snap.insert(uid.to_string(), (i, p));
            }
        }
    }

    /// Counts a pod on its node before its binding is confirmed.
    pub fn assume(&mut self, uid: String, pod: Arc<Pod>) {
        self.assumed.insert(uid.clone(), pod);
        self.resync_pod(&uid);
    }

    /// Forgets an assumed pod (its binding failed).
    pub fn forget(&mut self, uid: &str) {
        self.assumed.remove(uid);
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
        snap.workloads = Arc::new(workloads);
        let mut volumes = self.volumes.clone();
        for (node, v) in self.assumed_volumes.values() {
            volumes.assume_bindings(v, node);
        }
        snap.volumes = Arc::new(volumes);
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
                snap.nodes[i].add_pod(p.clone());
            }
        }
        snap
    }

    /// The PreEnqueue rejection of a pod, if any.
    pub fn pre_enqueue_rejection(profiles: &Profiles, pod: &Pod) -> Option<String> {
        rkube_framework::pre_enqueue_rejection(profiles.for_pod(pod)?, pod)
    }

    /// What a scheduling cycle for the pod `uid` runs on: its latest
    /// version, the snapshot (built if a change invalidated it) and the
    /// nominations; `None` (and the pod is done in the queue) when it is
    /// no longer one of ours to schedule.
    pub fn take_for_cycle(
        &mut self,
        profiles: &Profiles,
        uid: &str,
    ) -> Option<(PodEntry, Arc<Snapshot>, Nominator)> {
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
        Some((entry, snapshot, self.nominator.clone()))
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
        self.pods.insert(
            uid.clone(),
            PodEntry {
                raw: raw.clone(),
                model: model.clone(),
            },
        );
        if !model.node_name.is_empty() {
            // Assigned: it counts on its node from now on.
            self.queue.delete(&uid);
            self.nominator.delete(&uid);
            self.assumed.remove(&uid);
            let was_assigned = old.as_ref().is_some_and(|o| !o.model.node_name.is_empty());
            let was_terminated = old.as_ref().is_some_and(|o| o.model.terminated);
            if model.terminated && !was_terminated {
                // Its resources are free again.
                self.queue.move_pods(now, |_| true);
            } else if !was_assigned
                || old
                    .as_ref()
                    .is_some_and(|o| o.raw.metadata.labels != raw.metadata.labels)
            {
                // Another pod may now satisfy affinity or change spreading.
                self.queue.move_pods(now, |p| {
                    p.pod_affinity.is_some() || !p.topology_spread_constraints.is_empty()
                });
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
        let gated = Self::pre_enqueue_rejection(profiles, &model).is_some();
        let changed = old
            .as_ref()
            .is_none_or(|o| scheduling_relevant_change(&o.raw, &raw));
        self.queue.upsert(model, gated, changed, now);
    }

    fn delete_pod(&mut self, uid: &str, now: Instant) {
        // A pod waiting on Permit is rejected (upstream's RejectWaitingPod).
        self.waiting.reject(uid, "", "removed");
        let old = self.pods.remove(uid);
        self.queue.delete(uid);
        self.nominator.delete(uid);
        let was_assumed = self.assumed.remove(uid).is_some();
        self.resync_pod(uid);
        if was_assumed || old.is_some_and(|o| !o.model.node_name.is_empty()) {
            self.queue.move_pods(now, |_| true);
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
                    self.nodes.insert(m.name.clone(), Arc::new(m));
                }
            }
            Change::Delete(n) => {
                self.invalidate();
                self.nodes.remove(&n.name_any());
            }
            Change::Replace(list) => {
                self.invalidate();
                self.nodes.clear();
                for m in list.iter().filter_map(convert) {
                    self.nodes.insert(m.name.clone(), Arc::new(m));
                }
            }
        }
        // Node added or updated (upstream's NodeAdd/NodeUpdate events).
        self.queue.move_pods(now, |_| true);
    }

    /// Applies a namespace watch event.
    pub fn namespaces_changed(&mut self, change: Change<core::Namespace>, now: Instant) {
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
        self.queue.move_pods(now, |p| {
            p.pod_affinity.is_some() || p.pod_anti_affinity.is_some()
        });
    }

    /// Applies a Service watch event.
    pub fn services_changed(&mut self, change: Change<core::Service>) {
        self.invalidate();
        let sel = |s: &core::Service| s.spec.as_ref().and_then(|s| s.selector.clone());
        replace_map(&mut self.services, change, |s| Some((key_of(s), sel(s)?)));
    }

    /// Applies a ReplicaSet watch event.
    pub fn replica_sets_changed(&mut self, change: Change<apps::ReplicaSet>) {
        self.invalidate();
        replace_map(&mut self.replica_sets, change, |rs| {
            let sel = convert::label_selector(&rs.spec.selector, "spec.selector").ok()?;
            Some((key_of(rs), sel))
        });
    }

    /// Applies a StatefulSet watch event.
    pub fn stateful_sets_changed(&mut self, change: Change<apps::StatefulSet>) {
        self.invalidate();
        replace_map(&mut self.stateful_sets, change, |ss| {
            let sel = convert::label_selector(&ss.spec.selector, "spec.selector").ok()?;
            Some((key_of(ss), sel))
        });
    }

    /// Applies a PodDisruptionBudget watch event.
    pub fn pdbs_changed(&mut self, change: Change<policy::PodDisruptionBudget>) {
        self.invalidate();
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
        match change {
            Change::Apply(o) => self.take_volume_object("PersistentVolume", &o),
            Change::Delete(o) => {
                self.volumes.pvs.remove(&o.name_any());
            }
            Change::Replace(list) => {
                self.volumes.pvs.clear();
                for o in &list {
                    self.take_volume_object("PersistentVolume", o);
                }
            }
        }
        self.queue.move_pods(now, |p| !p.volumes.is_empty());
    }

    /// Applies a PersistentVolumeClaim watch event.
    pub fn pvcs_changed(&mut self, change: Change<core::PersistentVolumeClaim>, now: Instant) {
        self.invalidate();
        match change {
            Change::Apply(o) => self.take_volume_object("PersistentVolumeClaim", &o),
            Change::Delete(o) => {
                self.volumes.pvcs.remove(&key_of(&o));
            }
            Change::Replace(list) => {
                self.volumes.pvcs.clear();
                for o in &list {
                    self.take_volume_object("PersistentVolumeClaim", o);
                }
            }
        }
        self.queue.move_pods(now, |p| !p.volumes.is_empty());
    }

    /// Applies a StorageClass watch event.
    pub fn storage_classes_changed(&mut self, change: Change<storage::StorageClass>, now: Instant) {
        self.invalidate();
        match change {
            Change::Apply(o) => self.take_volume_object("StorageClass", &o),
            Change::Delete(o) => {
                self.volumes.classes.remove(&o.name_any());
            }
            Change::Replace(list) => {
                self.volumes.classes.clear();
                for o in &list {
                    self.take_volume_object("StorageClass", o);
                }
            }
        }
        self.queue.move_pods(now, |p| !p.volumes.is_empty());
    }

    /// Applies a CSINode watch event.
    pub fn csi_nodes_changed(&mut self, change: Change<storage::CSINode>, now: Instant) {
        self.invalidate();
        match change {
            Change::Apply(o) => {
                self.volumes.csi_limits.remove(&o.name_any());
                self.take_volume_object("CSINode", &o);
            }
            Change::Delete(o) => {
                self.volumes.csi_limits.remove(&o.name_any());
            }
            Change::Replace(list) => {
                self.volumes.csi_limits.clear();
                for o in &list {
                    self.take_volume_object("CSINode", o);
                }
            }
        }
        self.queue.move_pods(now, |p| !p.volumes.is_empty());
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

#[cfg(test)]
mod tests;
