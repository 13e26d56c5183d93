//! `rkube replay`: re-run the scheduler over a cluster's recorded history
//! (`rkube snapshot --watch`) and compare where each pod would have gone
//! under a configuration with where it went.
//!
//! The recording is replayed in resourceVersion order (etcd's order of
//! writes). Every pod that arrives pending for a profile of the
//! configuration is decided by rkube at the moment its binding was
//! written in the recording (the state the live scheduler saw then, bar
//! bindings still in flight), or at its arrival when it was never bound.
//! Everything else — nodes, other schedulers' pods, deletions, phase
//! changes — is applied as recorded. rkube's own decisions replace the
//! recorded ones in the state later pods see, so a configuration change
//! plays out over the rest of the history.
//!
//! Decision marks: a recording of `rkube scheduler --record-decisions`
//! has each binding annotated with the decision's place (leadership term,
//! cycle) and, per kind, how far the scheduler's cache had seen
//! ([`rkube_model::decision`]). Those pods are decided in the marks' order,
//! each once the changes its scheduler had seen are applied (kind by kind),
//! with all earlier decisions in place: the state the live scheduler
//! decided on. A mark that does not fit the recording (the pod arrived
//! after what it says was seen, or was bound before) is ignored. Without
//! marks (kube-scheduler, or rkube without the flag) the binding order
//! stands in for the decision order, corrected by a window for bindings
//! still in flight; that is a heuristic. What a mark cannot show: a
//! nomination the scheduler held in memory before writing it, and a pod
//! it had assumed whose binding then failed.
//!
//! Ties: when the recorded node is among the nodes rkube scores highest,
//! rkube takes it (the live scheduler broke the tie at random; replaying
//! it keeps the rest of the history comparable). A pod rkube cannot place
//! is retried after each change that can make room (a node added or
//! changed, a pod deleted or finished) and once at the end.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use rkube_model::decision::{self, DecisionMark};
use rkube_model::load::{build_owned, RawObject};
use rkube_model::Cluster;
use serde::Serialize;
use serde_json::Value;

use crate::{explain_with_profiles, Profiles, SimError};

/// A change in a recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeType {
    /// The object was created.
    Added,
    /// The object was updated.
    Modified,
    /// The object was deleted.
    Deleted,
}

/// One recorded change.
#[derive(Debug, Clone)]
pub struct Change {
    /// What happened.
    pub change: ChangeType,
    /// The object after the change (before it, for a deletion).
    pub object: Value,
}

/// A recording: the objects at the start, then the changes in
/// resourceVersion order.
#[derive(Debug, Clone, Default)]
pub struct Recording {
    /// How messages name the recording.
    pub label: String,
    /// Objects at the start.
    pub base: Vec<Value>,
    /// Changes after that.
    pub changes: Vec<Change>,
}

fn input(file: &Path, what: impl std::fmt::Display) -> SimError {
    SimError::Input(format!("{}: {what}", file.display()))
}

fn resource_version(object: &Value) -> Option<u64> {
    object["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
}

fn check_object(file: &Path, at: &str, object: &Value) -> Result<(), SimError> {
    if !object["kind"].is_string() || !object["metadata"]["name"].is_string() {
        return Err(input(
            file,
            format!("{at}: an object needs a kind and metadata.name"),
        ));
    }
    Ok(())
}

impl Recording {
    /// Reads `DIR/base.json` and `DIR/events.jsonl` as `rkube snapshot
    /// --watch` writes them.
    pub fn read(dir: &Path) -> Result<Recording, SimError> {
        let base_file = dir.join("base.json");
        let text = crate::load::read_input(&base_file)?;
        let base: Value = serde_json::from_str(&text)
            .map_err(|e| input(&base_file, format!("invalid JSON: {e}")))?;
        let items = match base["items"].as_array() {
            Some(items) if base["kind"] == "List" => items.clone(),
            _ => return Err(input(&base_file, "not a List (kind: List with items)")),
        };
        for (i, o) in items.iter().enumerate() {
            check_object(&base_file, &format!("items[{i}]"), o)?;
        }
        let events_file = dir.join("events.jsonl");
        let text = crate::load::read_input(&events_file)?;
        // (resourceVersion, line) for a stable sort; a line without a
        // resourceVersion (a deletion noticed on relist) keeps its place
        // after the line before it.
        let mut changes: Vec<(u64, usize, Change)> = Vec::new();
        let mut last_rv = 0;
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let at = format!("line {}", i + 1);
            let v: Value = serde_json::from_str(line)
                .map_err(|e| input(&events_file, format!("{at}: invalid JSON: {e}")))?;
            let change = match v["type"].as_str() {
                Some("ADDED") => ChangeType::Added,
                Some("MODIFIED") => ChangeType::Modified,
                Some("DELETED") => ChangeType::Deleted,
                _ => {
                    return Err(input(
                        &events_file,
                        format!("{at}: type: must be ADDED, MODIFIED or DELETED"),
                    ))
                }
            };
            let object = v["object"].clone();
            check_object(&events_file, &at, &object)?;
            let rv = match resource_version(&object) {
                Some(rv) => rv,
                None if change == ChangeType::Deleted => last_rv,
                None => {
                    return Err(input(
                        &events_file,
                        format!(
                        "{at}: object.metadata.resourceVersion: must be a number (etcd's revision)"
                    ),
                    ))
                }
            };
            last_rv = rv;
            changes.push((rv, i, Change { change, object }));
        }
        changes.sort_by_key(|(rv, i, _)| (*rv, *i));
        Ok(Recording {
            label: dir.display().to_string(),
            base: items,
            changes: changes.into_iter().map(|(_, _, c)| c).collect(),
        })
    }
}

/// One pod the configuration schedules: where it went and where rkube
/// puts it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    /// `namespace/name`.
    pub pod: String,
    /// The node the recording bound it to (null: never bound while recorded).
    pub recorded_node: Option<String>,
    /// The node rkube binds it to (null: rkube leaves it pending).
    pub replay_node: Option<String>,
    /// rkube's FailedScheduling message when it leaves the pod pending.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// The two agree (both on the same node, or both pending).
    pub same: bool,
}

/// Totals of a replay.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ReplaySummary {
    /// Pods decided.
    pub decisions: usize,
    /// Decisions equal to the recording's.
    pub same: usize,
    /// Bound to another node than recorded.
    pub moved: usize,
    /// Bound in the recording, pending in the replay.
    pub pending_only_in_replay: usize,
    /// Pending in the recording, bound in the replay.
    pub bound_only_in_replay: usize,
}

/// `rkube replay -o json`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ReplayReport {
    /// The recording.
    pub recording: String,
    /// The configuration.
    pub config: String,
    /// Changes replayed.
    pub changes: usize,
    /// Every pod decided, in the order of their first decision.
    pub decisions: Vec<Decision>,
    /// Totals.
    pub summary: ReplaySummary,
}

/// How many changes after a pod's binding the binding of a pod queued
/// before it may come and still count as in flight (decided first, written
/// later). A pod bound later than that was waiting — unschedulable or
/// backing off — when the later pod was decided. Concurrent binding tasks
/// reorder writes by a few changes; backoff delays them by seconds. A
/// heuristic, measured on `whatif_live`'s recordings: 4 to 8 reproduced
/// every binding there, 2 missed reorders, 16 pulled backed-off pods ahead.
const IN_FLIGHT_WINDOW: usize = 6;

/// The kinds a recording holds, in the order the cluster is built from and
/// `rkube snapshot` lists them (priority classes first, pods last).
pub const KIND_ORDER: [&str; 19] = [
    "Namespace",
    "PriorityClass",
    "StorageClass",
    "DeviceClass",
    "ResourceSlice",
    "ResourceClaimTemplate",
    "ResourceClaim",
    "DeviceTaintRule",
    "CSIDriver",
    "CSIStorageCapacity",
    "CSINode",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "Service",
    "PodDisruptionBudget",
    "ReplicaSet",
    "StatefulSet",
    "Node",
    "Pod",
];

fn object_key(o: &Value) -> (String, String) {
    let m = &o["metadata"];
    let name = m["name"].as_str().unwrap_or_default();
    let key = match m["namespace"].as_str().filter(|s| !s.is_empty()) {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    };
    (o["kind"].as_str().unwrap_or_default().to_string(), key)
}

fn node_of(pod: &Value) -> Option<String> {
    pod["spec"]["nodeName"]
        .as_str()
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

fn uid(o: &Value) -> String {
    o["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn finished(pod: &Value) -> bool {
    matches!(
        pod["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    )
}

/// The replayed cluster: the recorded objects, with rkube's decisions in
/// place of the recorded bindings of the pods it decides.
struct State<'a> {
    label: &'a str,
    /// Objects by (kind, key), with the order they first appeared.
    objects: HashMap<(String, String), (u64, Value)>,
    next: u64,
    /// rkube's node per decided pod key (None: pending), for pods it decides.
    overrides: HashMap<String, Option<String>>,
    /// The cluster built from `objects`, while nothing changed.
    cached: Option<Cluster>,
}

impl<'a> State<'a> {
    fn upsert(&mut self, o: Value) {
        let k = object_key(&o);
        let seq = match self.objects.get(&k) {
            Some((seq, _)) => *seq,
            None => {
                self.next += 1;
                self.next
            }
        };
        self.objects.insert(k, (seq, o));
        self.cached = None;
    }

    fn remove(&mut self, o: &Value) {
        let k = object_key(o);
        self.overrides.remove(&k.1);
        self.objects.remove(&k);
        self.cached = None;
    }

    fn build(&self) -> Result<Cluster, SimError> {
        let rank = |kind: &str| KIND_ORDER.iter().position(|k| *k == kind).unwrap_or(0);
        let mut all: Vec<_> = self.objects.iter().collect();
        all.sort_by_key(|((kind, _), (seq, _))| (rank(kind), *seq));
        let objects: Vec<RawObject> = all
            .into_iter()
            .map(|((kind, key), (_, value))| {
                let mut value = value.clone();
                if kind == "Pod" {
                    if let Some(node) = self.overrides.get(key) {
                        value["spec"]["nodeName"] = node.clone().map_or(Value::Null, Value::String);
                    }
                }
                RawObject {
                    file: self.label.to_string(),
                    kind: kind.clone(),
                    display_name: key.clone(),
                    value,
                }
            })
            .collect();
        build_owned(objects, &mut |_| Ok(false)).map_err(SimError::Load)
    }

    fn pod_by_uid(&self, u: &str) -> Option<Value> {
        self.objects
            .iter()
            .find(|((kind, _), (_, o))| kind == "Pod" && uid(o) == u)
            .map(|(_, (_, o))| o.clone())
    }

    fn cluster(&mut self) -> Result<&mut Cluster, SimError> {
        if self.cached.is_none() {
            self.cached = Some(self.build()?);
        }
        self.cached
            .as_mut()
            .ok_or_else(|| SimError::Runtime("replay: cluster not built".into()))
    }
}

/// Replays a recording under a configuration's profiles.
pub fn replay(
    rec: &Recording,
    profiles: &Profiles,
    config_label: &str,
    seed: u64,
) -> Result<ReplayReport, SimError> {
    let ours = |pod: &Value| {
        pod["kind"] == "Pod"
            && profiles.has_profile(
                pod["spec"]["schedulerName"]
                    .as_str()
                    .unwrap_or("default-scheduler"),
            )
    };
    // The pods that arrived pending (by uid, with the resourceVersion they
    // arrived at), where the recording bound each and the change at which
    // it did.
    let mut arrived_rv: HashMap<String, u64> = rec
        .base
        .iter()
        .filter(|o| ours(o) && node_of(o).is_none())
        .map(|o| (uid(o), resource_version(o).unwrap_or(0)))
        .collect();
    let mut bound_at: HashMap<String, (usize, String)> = HashMap::new();
    for (i, c) in rec.changes.iter().enumerate() {
        let o = &c.object;
        if !ours(o) {
            continue;
        }
        match (c.change, node_of(o)) {
            (ChangeType::Added, None) => {
                arrived_rv.insert(uid(o), resource_version(o).unwrap_or(0));
            }
            (ChangeType::Modified, Some(node)) if arrived_rv.contains_key(&uid(o)) => {
                bound_at.entry(uid(o)).or_insert((i, node));
            }
            _ => {}
        }
    }

    // Decision marks on the recorded bindings, trusted only when they fit
    // the recording: the pod had arrived by what the mark says its
    // scheduler had seen of pods, and its binding came after that (a mark
    // copied onto a recreated pod, or from another cluster, does not).
    let rvs = change_rvs(rec);
    let mut marks: HashMap<String, DecisionMark> = HashMap::new();
    for (u, (at, _)) in &bound_at {
        let mark = rec.changes[*at].object["metadata"]["annotations"][decision::ANNOTATION]
            .as_str()
            .and_then(DecisionMark::parse);
        let Some(m) = mark else { continue };
        let arrival = arrived_rv.get(u).copied().unwrap_or(0);
        if m.seen("Pod")
            .is_some_and(|pods| arrival <= pods && pods < rvs[*at])
        {
            marks.insert(u.clone(), m);
        }
    }

    let mut state = State {
        label: &rec.label,
        objects: HashMap::new(),
        next: 0,
        overrides: HashMap::new(),
        cached: None,
    };
    let mut decisions: Vec<Decision> = Vec::new();
    // Decision index by pod uid; pods rkube left pending, in arrival order.
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut waiting: Vec<String> = Vec::new();
    let mut start: Vec<Value> = Vec::new();
    for o in &rec.base {
        if ours(o) && node_of(o).is_none() {
            start.push(o.clone());
        }
        state.upsert(o.clone());
    }
    let mut decide = |state: &mut State, pod: &Value, decisions: &mut Vec<Decision>| {
        let key = object_key(pod).1;
        state.overrides.insert(key.clone(), None);
        if let Some(c) = state.cached.as_mut() {
            if let Some(p) = c.pods.iter_mut().find(|p| p.key() == key) {
                p.node_name.clear();
            }
        }
        let recorded = bound_at.get(&uid(pod)).map(|(_, n)| n.clone());
        let e = explain_with_profiles(state.cluster()?, profiles, &key, seed)?;
        let node = match &recorded {
            Some(r) if e.top_nodes.contains(r) => Some(r.clone()),
            _ => e.selected_node.clone(),
        };
        if let Some(n) = &node {
            state.overrides.insert(key.clone(), Some(n.clone()));
            if let Some(p) = state.cluster()?.pods.iter_mut().find(|p| p.key() == key) {
                p.node_name = n.clone();
            }
        }
        let d = Decision {
            pod: key,
            same: recorded == node,
            recorded_node: recorded,
            message: if node.is_none() {
                e.message
            } else {
                String::new()
            },
            replay_node: node,
        };
        match index.get(&uid(pod)) {
            Some(&i) => decisions[i] = d,
            None => {
                index.insert(uid(pod), decisions.len());
                decisions.push(d);
            }
        }
        Ok::<bool, SimError>(decisions[index[&uid(pod)]].replay_node.is_none())
    };
    // Pods that arrived pending and that the recording binds later, in
    // arrival order: the live scheduler decided them in queue order, so
    // when one's binding appears, the ones that arrived before it and whose
    // bindings follow within IN_FLIGHT_WINDOW changes had been decided too
    // (their bindings were still in flight).
    //
    // Pods whose recorded binding carries a decision mark are decided at
    // their place in the marks' order instead (see [`steps`]), with every
    // earlier decision in place (assumed, whether or not its binding was
    // written yet).
    let mut undecided: Vec<String> = Vec::new();
    let mut kept: Vec<String> = Vec::new();
    for pod in start {
        if marks.contains_key(&uid(&pod)) {
            continue;
        }
        if bound_at.contains_key(&uid(&pod)) {
            undecided.push(uid(&pod));
        } else if decide(&mut state, &pod, &mut decisions)? {
            waiting.push(uid(&pod));
        }
    }
    for step in steps(rec, &rvs, &marks) {
        let i = match step {
            Step::Change(i) => i,
            Step::Decide(w) => {
                match state.pod_by_uid(&w) {
                    Some(pod) => {
                        waiting.retain(|x| *x != w);
                        if decide(&mut state, &pod, &mut decisions)? {
                            waiting.push(w);
                        }
                    }
                    // Deleted before: nothing to decide.
                    None => {
                        marks.remove(&w);
                    }
                }
                continue;
            }
        };
        let c = &rec.changes[i];
        let o = &c.object;
        let u = uid(o);
        let moment =
            ours(o) && !marks.contains_key(&u) && bound_at.get(&u).is_some_and(|(at, _)| *at == i);
        // Can this change let a pod rkube left pending fit now?
        let room = match c.change {
            ChangeType::Deleted => {
                waiting.retain(|w| *w != u);
                undecided.retain(|w| *w != u);
                state.remove(o);
                true
            }
            _ if o["kind"] != "Pod" => {
                state.upsert(o.clone());
                true
            }
            _ => {
                let key = object_key(o).1;
                let was_finished = state
                    .objects
                    .get(&("Pod".to_string(), key))
                    .is_some_and(|(_, old)| finished(old));
                state.upsert(o.clone());
                (finished(o) && !was_finished) || waiting.contains(&u)
            }
        };
        let arrived_pending = c.change == ChangeType::Added && ours(o) && node_of(o).is_none();
        if arrived_pending && bound_at.contains_key(&u) && !marks.contains_key(&u) {
            undecided.push(u.clone());
        }
        let arrival = arrived_pending && !bound_at.contains_key(&u);
        if moment {
            // Decide the ones queued before it first, then it.
            let upto = undecided.iter().position(|w| *w == u);
            let mut ahead: Vec<String> = Vec::new();
            if let Some(k) = upto {
                let before: Vec<String> = undecided.drain(..=k).collect();
                for w in before {
                    let soon = bound_at
                        .get(&w)
                        .is_some_and(|(at, _)| *at <= i + IN_FLIGHT_WINDOW);
                    if soon || w == u {
                        ahead.push(w);
                    } else {
                        // Bound much later: it was waiting (unschedulable or
                        // backing off) when this pod was decided.
                        kept.push(w);
                    }
                }
                kept.append(&mut undecided);
                undecided = std::mem::take(&mut kept);
            }
            for w in ahead {
                let Some(pod) = state.pod_by_uid(&w) else {
                    continue;
                };
                waiting.retain(|x| *x != w);
                if decide(&mut state, &pod, &mut decisions)? {
                    waiting.push(w);
                }
            }
        } else if arrival {
            waiting.retain(|w| *w != u);
            if decide(&mut state, o, &mut decisions)? {
                waiting.push(u);
            }
        }
        if room {
            retry(&mut state, &mut waiting, &mut decide, &mut decisions)?;
        }
    }
    // Pods whose recorded binding never came (deleted first) were dropped;
    // any left were bound after the recording's last change: decide them.
    for w in std::mem::take(&mut undecided) {
        if let Some(pod) = state.pod_by_uid(&w) {
            if decide(&mut state, &pod, &mut decisions)? {
                waiting.push(w);
            }
        }
    }
    retry(&mut state, &mut waiting, &mut decide, &mut decisions)?;
    let mut summary = ReplaySummary {
        decisions: decisions.len(),
        ..Default::default()
    };
    for d in &decisions {
        match (&d.recorded_node, &d.replay_node) {
            _ if d.same => summary.same += 1,
            (Some(_), Some(_)) => summary.moved += 1,
            (Some(_), None) => summary.pending_only_in_replay += 1,
            (None, Some(_)) => summary.bound_only_in_replay += 1,
            (None, None) => {}
        }
    }
    Ok(ReplayReport {
        recording: rec.label.clone(),
        config: config_label.to_string(),
        changes: rec.changes.len(),
        decisions,
        summary,
    })
}

/// Each change's resourceVersion (a deletion noticed on relist has none:
/// the one before it).
fn change_rvs(rec: &Recording) -> Vec<u64> {
    let mut last = 0;
    rec.changes
        .iter()
        .map(|c| {
            last = resource_version(&c.object).unwrap_or(last);
            last
        })
        .collect()
}

/// One step of a replay: apply a recorded change, or decide a pod whose
/// binding carries a decision mark.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Change(usize),
    Decide(String),
}

/// The order of a replay. Without marks, the changes as recorded. With
/// them, each marked pod is decided in the marks' order (term, cycle),
/// right after the changes its scheduler had seen: a change of kind K at
/// resourceVersion r goes before the first decision whose mark had seen K
/// up to r or beyond (for a kind the marks do not speak of, up to their
/// highest resourceVersion); changes no decision had seen follow them.
/// The informers are independent streams, so this can apply a node added
/// at r 300 after a decision that had seen pods up to 301.
fn steps(rec: &Recording, rvs: &[u64], marks: &HashMap<String, DecisionMark>) -> Vec<Step> {
    let mut ordered: Vec<(&DecisionMark, &String)> = marks.iter().map(|(u, m)| (m, u)).collect();
    ordered.sort_by(|a, b| (a.0.order(), a.1).cmp(&(b.0.order(), b.1)));
    // Prefix maxima per kind (and of every kind), so "the first decision
    // that had seen it" is a binary search.
    let mut kinds: HashMap<&str, Vec<u64>> = HashMap::new();
    for c in &rec.changes {
        let kind = c.object["kind"].as_str().unwrap_or_default();
        kinds
            .entry(kind)
            .or_insert_with(|| Vec::with_capacity(ordered.len()));
    }
    let mut any: Vec<u64> = Vec::with_capacity(ordered.len());
    for (d, (m, _)) in ordered.iter().enumerate() {
        let prev_any = if d == 0 { 0 } else { any[d - 1] };
        any.push(prev_any.max(m.seen.values().copied().max().unwrap_or(0)));
        for (kind, prefix) in kinds.iter_mut() {
            let prev = prefix.last().copied().unwrap_or(0);
            prefix.push(prev.max(m.seen(kind).unwrap_or(0)));
        }
    }
    let spoken: HashSet<&str> = ordered
        .iter()
        .flat_map(|(m, _)| m.seen.keys().map(String::as_str))
        .collect();
    let mut before: Vec<Vec<usize>> = vec![Vec::new(); ordered.len()];
    let mut after: Vec<usize> = Vec::new();
    for (i, c) in rec.changes.iter().enumerate() {
        let kind = c.object["kind"].as_str().unwrap_or_default();
        let prefix = match spoken.contains(kind) {
            true => &kinds[kind],
            false => &any,
        };
        match prefix.partition_point(|&seen| seen < rvs[i]) {
            d if d < ordered.len() => before[d].push(i),
            _ => after.push(i),
        }
    }
    let mut out = Vec::with_capacity(rec.changes.len() + ordered.len());
    for (changes, (_, u)) in before.into_iter().zip(&ordered) {
        out.extend(changes.into_iter().map(Step::Change));
        out.push(Step::Decide((*u).clone()));
    }
    out.extend(after.into_iter().map(Step::Change));
    out
}

/// Retries the pods rkube left pending, in arrival order.
fn retry<F>(
    state: &mut State,
    waiting: &mut Vec<String>,
    decide: &mut F,
    decisions: &mut Vec<Decision>,
) -> Result<(), SimError>
where
    F: FnMut(&mut State, &Value, &mut Vec<Decision>) -> Result<bool, SimError>,
{
    let mut still = Vec::new();
    for u in std::mem::take(waiting) {
        let Some(pod) = state.pod_by_uid(&u) else {
            continue;
        };
        if decide(state, &pod, decisions)? {
            still.push(u);
        }
    }
    *waiting = still;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, cpu: &str, rv: u64) -> Value {
        json!({"apiVersion": "v1", "kind": "Node",
               "metadata": {"name": name, "resourceVersion": rv.to_string(),
                            "labels": {"kubernetes.io/hostname": name}},
               "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"}}})
    }

    fn pod(name: &str, cpu: &str, node: Option<&str>, rv: u64) -> Value {
        let mut p = json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": "d", "uid": format!("uid-{name}"),
                            "resourceVersion": rv.to_string()},
               "spec": {"containers": [{"name": "c", "image": "i",
                        "resources": {"requests": {"cpu": cpu}}}]}});
        if let Some(n) = node {
            p["spec"]["nodeName"] = json!(n);
        }
        p
    }

    fn change(change: ChangeType, object: Value) -> Change {
        Change { change, object }
    }

    fn run(rec: &Recording) -> ReplayReport {
        let profiles = rkube_plugins::profiles(&rkube_config::default_config()).unwrap();
        replay(rec, &profiles, "<defaults>", 0).unwrap()
    }

    fn decision<'a>(r: &'a ReplayReport, pod: &str) -> &'a Decision {
        r.decisions.iter().find(|d| d.pod == pod).unwrap()
    }

    #[test]
    fn a_tie_is_resolved_as_recorded_and_later_pods_see_it() {
        use ChangeType::*;
        let rec = Recording {
            label: "rec".into(),
            base: vec![node("n1", "2", 1), node("n2", "2", 2)],
            changes: vec![
                change(Added, pod("a", "1", None, 3)),
                change(Modified, pod("a", "1", Some("n2"), 4)),
                change(Added, pod("b", "1500m", None, 5)),
                change(Modified, pod("b", "1500m", Some("n1"), 6)),
            ],
        };
        let r = run(&rec);
        assert_eq!(decision(&r, "d/a").replay_node.as_deref(), Some("n2"));
        // b fits only on n1 once a sits on n2.
        assert_eq!(decision(&r, "d/b").replay_node.as_deref(), Some("n1"));
        assert_eq!(r.summary.same, 2);
        assert_eq!(r.summary.decisions, 2);
    }

    #[test]
    fn a_binding_rkube_would_not_make_is_reported_as_moved() {
        use ChangeType::*;
        // n1 is nearly full: LeastAllocated prefers n2, so the recorded n1
        // is not among rkube's best.
        let rec = Recording {
            label: "rec".into(),
            base: vec![
                node("n1", "4", 1),
                node("n2", "4", 2),
                pod("busy", "3", Some("n1"), 3),
            ],
            changes: vec![
                change(Added, pod("a", "500m", None, 4)),
                change(Modified, pod("a", "500m", Some("n1"), 5)),
            ],
        };
        let r = run(&rec);
        let d = decision(&r, "d/a");
        assert_eq!(
            (d.recorded_node.as_deref(), d.replay_node.as_deref()),
            (Some("n1"), Some("n2"))
        );
        assert!(!d.same);
        assert_eq!(r.summary.moved, 1);
    }

    #[test]
    fn a_pending_pod_is_retried_when_a_node_arrives() {
        use ChangeType::*;
        let rec = Recording {
            label: "rec".into(),
            base: vec![node("n1", "1", 1)],
            changes: vec![
                change(Added, pod("big", "4", None, 2)),
                change(Added, node("n2", "8", 3)),
            ],
        };
        let r = run(&rec);
        let d = decision(&r, "d/big");
        assert_eq!(d.recorded_node, None);
        assert_eq!(d.replay_node.as_deref(), Some("n2"));
        assert_eq!(r.summary.bound_only_in_replay, 1);
        // Without the node it stays pending with upstream's message.
        let rec = Recording {
            changes: rec.changes[..1].to_vec(),
            ..rec
        };
        let r = run(&rec);
        let d = decision(&r, "d/big");
        assert_eq!(d.replay_node, None);
        assert!(
            d.message
                .starts_with("0/1 nodes are available: 1 Insufficient cpu."),
            "{}",
            d.message
        );
        assert!(d.same);
    }

    #[test]
    fn bindings_written_out_of_order_are_decided_in_queue_order() {
        use ChangeType::*;
        // The live scheduler put a on n1 and then b on n2 (n1 was fuller),
        // but b's binding reached the API server first.
        let rec = Recording {
            label: "rec".into(),
            base: vec![node("n1", "4", 1), node("n2", "3", 2)],
            changes: vec![
                change(Added, pod("a", "2", None, 3)),
                change(Added, pod("b", "1", None, 4)),
                change(Modified, pod("b", "1", Some("n2"), 5)),
                change(Modified, pod("a", "2", Some("n1"), 6)),
            ],
        };
        let r = run(&rec);
        assert_eq!(decision(&r, "d/a").replay_node.as_deref(), Some("n1"));
        assert_eq!(decision(&r, "d/b").replay_node.as_deref(), Some("n2"));
        assert_eq!(r.summary.same, 2, "{r:?}");
        // Decided in queue order: a first.
        assert_eq!(r.decisions[0].pod, "d/a");
    }

    fn marked(mut pod: Value, mark: &str) -> Value {
        pod["metadata"]["annotations"] = json!({ decision::ANNOTATION: mark });
        pod
    }

    fn namespace(name: &str, rv: u64) -> Value {
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": name, "resourceVersion": rv.to_string()}})
    }

    #[test]
    fn marked_decisions_are_replayed_in_decision_order_on_the_state_they_saw() {
        use ChangeType::*;
        // The live scheduler decided b first (only n2 fits it), then a
        // (only n1 left), both on what it had seen at rv 2; a's binding was
        // written first, b's many changes later.
        let mut changes = vec![change(
            Modified,
            marked(pod("a", "600m", Some("n1"), 3), "7/2/Node=1,Pod=2"),
        )];
        for k in 0..8 {
            changes.push(change(Added, namespace(&format!("ns{k}"), 4 + k)));
        }
        changes.push(change(
            Modified,
            marked(pod("b", "1500m", Some("n2"), 12), "7/1/Node=1,Pod=2"),
        ));
        let rec = Recording {
            label: "rec".into(),
            base: vec![
                node("n1", "1", 1),
                node("n2", "2", 1),
                pod("a", "600m", None, 2),
                pod("b", "1500m", None, 2),
            ],
            changes,
        };
        let r = run(&rec);
        assert_eq!(r.summary.same, 2, "{r:#?}");
        assert_eq!(r.decisions[0].pod, "d/b", "decided in the marks' order");
        // Without the marks, the binding order misleads: a alone first
        // takes the emptier n2, and b no longer fits anywhere.
        let mut plain = rec.clone();
        for c in &mut plain.changes {
            if let Some(m) = c.object["metadata"].as_object_mut() {
                m.remove("annotations");
            }
        }
        let r = run(&plain);
        assert_eq!(decision(&r, "d/a").replay_node.as_deref(), Some("n2"));
        assert_eq!(decision(&r, "d/b").replay_node, None);
    }

    /// n1 is small, n2 big (LeastAllocated prefers n2); a is bound to
    /// `bound_to` with `mark` after n2 arrived at rv 3.
    fn node_arrives_before_the_binding(bound_to: &str, mark: &str) -> Recording {
        use ChangeType::*;
        Recording {
            label: "rec".into(),
            base: vec![node("n1", "1", 1), pod("a", "600m", None, 2)],
            changes: vec![
                change(Added, node("n2", "8", 3)),
                change(Added, namespace("other", 4)),
                change(Modified, marked(pod("a", "600m", Some(bound_to), 5), mark)),
            ],
        }
    }

    #[test]
    fn a_marked_decision_sees_the_changes_its_scheduler_had_seen_and_no_others() {
        // Decided when only n1 existed: n2 is not applied before it.
        let r = run(&node_arrives_before_the_binding("n1", "1/1/Node=1,Pod=2"));
        assert!(decision(&r, "d/a").same, "{r:#?}");
        // Decided after the scheduler had seen n2: it is applied first.
        let r = run(&node_arrives_before_the_binding("n2", "1/1/Node=3,Pod=2"));
        assert!(decision(&r, "d/a").same, "{r:#?}");
        // Unmarked, a is decided at its binding, where n2 scores higher.
        let mut plain = node_arrives_before_the_binding("n1", "");
        plain.changes[2].object = pod("a", "600m", Some("n1"), 5);
        let r = run(&plain);
        assert_eq!(decision(&r, "d/a").replay_node.as_deref(), Some("n2"));
    }

    #[test]
    fn kinds_are_applied_as_far_as_their_own_informer_had_seen() {
        use ChangeType::*;
        // n2 (rv 3) came before a (rv 4), but the node informer lagged:
        // the scheduler had seen pods up to 4 and nodes only up to 1.
        let rec = Recording {
            label: "rec".into(),
            base: vec![node("n1", "1", 1)],
            changes: vec![
                change(Added, node("n2", "8", 3)),
                change(Added, pod("a", "600m", None, 4)),
                change(
                    Modified,
                    marked(pod("a", "600m", Some("n1"), 6), "1/1/Node=1,Pod=4"),
                ),
            ],
        };
        let r = run(&rec);
        assert!(decision(&r, "d/a").same, "{r:#?}");
    }

    #[test]
    fn marks_that_do_not_fit_the_recording_are_ignored() {
        // It says its scheduler had seen pods only up to rv 1, before a
        // arrived (a mark copied onto a recreated pod): a is decided at its
        // binding, as without a mark.
        let r = run(&node_arrives_before_the_binding("n1", "1/1/Node=1,Pod=1"));
        assert_eq!(decision(&r, "d/a").replay_node.as_deref(), Some("n2"));
        // Malformed: the same.
        let r = run(&node_arrives_before_the_binding("n1", "1/1/Node=1,Pod=x"));
        assert_eq!(decision(&r, "d/a").replay_node.as_deref(), Some("n2"));
    }

    #[test]
    fn deleted_pods_free_their_node() {
        use ChangeType::*;
        let rec = Recording {
            label: "rec".into(),
            base: vec![node("n1", "2", 1), pod("old", "2", Some("n1"), 2)],
            changes: vec![
                change(Added, pod("new", "2", None, 3)),
                change(Deleted, pod("old", "2", Some("n1"), 4)),
                change(Modified, pod("new", "2", Some("n1"), 5)),
            ],
        };
        let r = run(&rec);
        assert_eq!(decision(&r, "d/new").replay_node.as_deref(), Some("n1"));
        assert_eq!(r.summary.same, 1);
    }

    fn dir(name: &str, base: &str, events: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("rkube-replay-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("base.json"), base).unwrap();
        std::fs::write(d.join("events.jsonl"), events).unwrap();
        d
    }

    #[test]
    fn recordings_are_read_in_resource_version_order_and_bad_lines_name_file_and_line() {
        let base = r#"{"apiVersion":"v1","kind":"List","items":[]}"#;
        let line = |ty: &str, name: &str, rv: &str| {
            format!(
                r#"{{"type":"{ty}","object":{{"kind":"Node","metadata":{{"name":"{name}","resourceVersion":"{rv}"}}}}}}"#
            )
        };
        let d = dir(
            "order",
            base,
            &format!(
                "{}\n{}\n",
                line("ADDED", "late", "20"),
                line("ADDED", "early", "9")
            ),
        );
        let rec = Recording::read(&d).unwrap();
        let names: Vec<&str> = rec
            .changes
            .iter()
            .map(|c| c.object["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["early", "late"]);
        let d = dir(
            "bad",
            base,
            &format!("{}\n{}\n", line("ADDED", "a", "1"), line("BOGUS", "b", "2")),
        );
        let e = Recording::read(&d).unwrap_err().to_string();
        assert!(e.contains("events.jsonl: line 2: type"), "{e}");
        let d = dir("norv", base, &line("ADDED", "a", "x"));
        let e = Recording::read(&d).unwrap_err().to_string();
        assert!(e.contains("line 1: object.metadata.resourceVersion"), "{e}");
        let d = dir("notlist", "{}", "");
        assert!(Recording::read(&d)
            .unwrap_err()
            .to_string()
            .contains("not a List"));
        let _ = std::fs::remove_dir_all(
            std::env::temp_dir().join(format!("rkube-replay-{}-order", std::process::id())),
        );
    }
}
