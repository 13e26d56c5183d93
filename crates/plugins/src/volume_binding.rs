//! VolumeBinding: a pod's PersistentVolumeClaims must be bound, or bindable
//! on the node: bound claims' volumes must admit the node; delayed
//! (`WaitForFirstConsumer`) claims need a matching available volume there, or
//! a class that can provision for the node. Immediate unbound claims reject
//! the pod. Scoring ranks static bindings by the class utilization shape.
//!
//! The binding cycle is upstream's volume binder: Filter records what each
//! feasible node would give the pod's delayed claims ([`PodVolumes`]);
//! Reserve assumes the chosen node's bindings in the host's cache (a
//! matched volume's claimRef, a claim's selected node) so later pods do not
//! take them; PreBind writes them (every volume, then every claim) and
//! polls once a second, up to `bindTimeoutSeconds`, until the PV controller
//! (or provisioner) has bound every claim; Unreserve restores the cache.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rkube_config::args::{decode, VolumeBindingArgs};
use rkube_framework::{
    AssumeCache, ClusterApi, Code, CycleState, FilterPlugin, NodeInfo, Plugin, PreBindPlugin,
    PreFilterPlugin, PreFilterResult, PreScorePlugin, ReservePlugin, ScorePlugin, Snapshot, Status,
    MAX_NODE_SCORE,
};
use rkube_model::volumes::{
    can_provision, find_matching_volume, pv_fits_node, PodVolumes, Pv, Pvc,
};
use rkube_model::{Node, Pod};

use crate::noderesources::fit::broken_linear;

/// Upstream name.
pub const NAME: &str = "VolumeBinding";
/// No matching volume and no way to provision one.
pub const ERR_REASON_BIND_CONFLICT: &str =
    "node(s) didn't find available persistent volumes to bind";
/// A bound volume's node affinity excludes the node.
pub const ERR_REASON_NODE_CONFLICT: &str = "node(s) didn't match PersistentVolume's node affinity";
/// A bound claim names a volume that does not exist.
pub const ERR_REASON_PV_NOT_EXIST: &str =
    "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)";

/// The plugin.
pub struct VolumeBinding {
    shape: Vec<(i64, i64)>,
    bind_timeout: Duration,
}

/// How often PreBind checks whether the claims are bound (upstream: 1 s).
const BIND_POLL_INTERVAL: Duration = Duration::from_secs(1);

/// Builds the plugin from `VolumeBindingArgs`.
pub fn new(args: &serde_json::Value, path: &str) -> Result<Arc<dyn Plugin>, String> {
    let a: VolumeBindingArgs = decode(args, path).map_err(|e| e.to_string())?;
    let shape = a
        .shape
        .iter()
        .map(|p| (p.utilization as i64, p.score as i64 * (MAX_NODE_SCORE / 10)))
        .collect();
    // Validation refuses a negative timeout; 0 times out at once.
    let secs = a.bind_timeout_seconds.unwrap_or(600).max(0);
    let bind_timeout =
        rkube_util::duration::from_secs_checked(secs).unwrap_or(rkube_util::duration::MAX);
    Ok(Arc::new(VolumeBinding {
        shape,
        bind_timeout,
    }))
}

/// The pod's claims, sorted into bound and delayed, with their volumes,
/// and what Filter found for each feasible node (upstream's
/// `podVolumesByNode`, shared by every copy of the cycle state).
struct State {
    bound: Vec<(Pvc, Option<Pv>)>,
    /// Unbound WaitForFirstConsumer claims, smallest request first.
    delayed: Vec<Pvc>,
    volumes: Arc<rkube_model::volumes::Volumes>,
    by_node: Mutex<HashMap<String, PodVolumes>>,
}

/// Reserve's result: nothing to bind, or the chosen node's bindings as
/// assumed.
struct Reserved {
    all_bound: bool,
    volumes: PodVolumes,
}

/// Cycle-state key of [`Reserved`].
const RESERVED: &str = "VolumeBinding/reserved";

/// Upstream's "not found" error text for a claim.
pub fn pvc_not_found(name: &str) -> String {
    format!("persistentvolumeclaim \"{name}\" not found")
}

impl Plugin for VolumeBinding {
    fn name(&self) -> &'static str {
        NAME
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
    fn as_reserve(&self) -> Option<&dyn ReservePlugin> {
        Some(self)
    }
    fn as_pre_bind(&self) -> Option<&dyn PreBindPlugin> {
        Some(self)
    }
}

fn unresolvable(msg: impl Into<String>) -> (PreFilterResult, Status) {
    (None, Status::new(Code::UnschedulableAndUnresolvable, msg))
}

impl PreFilterPlugin for VolumeBinding {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let vols = &snapshot.volumes;
        let mut bound = Vec::new();
        let mut delayed = Vec::new();
        let mut immediate = false;
        let mut any = false;
        for claim in pod.claim_names() {
            any = true;
            let Some(pvc) = vols.pvc(&pod.namespace, claim) else {
                return unresolvable(pvc_not_found(claim));
            };
            if pvc.deleting {
                return unresolvable(format!("persistentvolumeclaim {claim:?} is being deleted"));
            }
            if pvc.is_bound() {
                bound.push((pvc.clone(), vols.pvs.get(&pvc.volume_name).cloned()));
                continue;
            }
            if pvc.storage_class.is_empty() {
                immediate = true;
                continue;
            }
            match vols.classes.get(&pvc.storage_class) {
                None => {
                    return unresolvable(format!(
                        "storageclass.storage.k8s.io {:?} not found",
                        pvc.storage_class
                    ))
                }
                Some(c) if c.wait_for_first_consumer() && pvc.volume_name.is_empty() => {
                    delayed.push(pvc.clone())
                }
                Some(_) => immediate = true,
            }
        }
        if !any {
            return (None, Status::skip());
        }
        if immediate {
            return unresolvable("pod has unbound immediate PersistentVolumeClaims");
        }
        // Upstream matches the smallest claims first.
        delayed.sort_by_key(|c| c.request);
        state.write(
            NAME,
            State {
                bound,
                delayed,
                volumes: vols.clone(),
                by_node: Mutex::new(HashMap::new()),
            },
        );
        (None, Status::success())
    }
}

impl VolumeBinding {
    /// Reasons the node cannot host the pod's volumes, and what its delayed
    /// claims would get there (upstream's `FindPodVolumes`).
    fn check(&self, s: &State, node: &NodeInfo) -> (Vec<&'static str>, PodVolumes) {
        let mut reasons = Vec::new();
        for (_, pv) in &s.bound {
            let reason = match pv {
                None => ERR_REASON_PV_NOT_EXIST,
                Some(pv) if !pv_fits_node(pv, &node.node) => ERR_REASON_NODE_CONFLICT,
                Some(_) => continue,
            };
            if !reasons.contains(&reason) {
                reasons.push(reason);
            }
        }
        let mut found = PodVolumes::default();
        let mut taken: Vec<String> = Vec::new();
        let mut bind_conflict = false;
        // A claim whose provisioning already chose a node fits only there.
        let selected_elsewhere = s
            .delayed
            .iter()
            .any(|c| !c.selected_node.is_empty() && c.selected_node != node.name());
        if selected_elsewhere {
            bind_conflict = true;
        } else {
            for pvc in &s.delayed {
                if !pvc.selected_node.is_empty() {
                    found.provisions.push(pvc.clone());
                    continue;
                }
                match find_matching_volume(pvc, &s.volumes, &node.node, &taken) {
                    Some(pv) => {
                        taken.push(pv.name.clone());
                        found.static_bindings.push((pvc.clone(), pv.clone()));
                    }
                    None => found.provisions.push(pvc.clone()),
                }
            }
            if found
                .provisions
                .iter()
                .any(|pvc| !can_provision(pvc, &s.volumes, &node.node))
            {
                bind_conflict = true;
            }
        }
        if bind_conflict {
            reasons.push(ERR_REASON_BIND_CONFLICT);
        }
        (reasons, found)
    }

    /// Upstream's `checkBindings`: true once every claim is fully bound as
    /// the host's API view shows it; an error when the binding cannot
    /// succeed any more.
    fn check_bindings(
        &self,
        pod: &Pod,
        node: &str,
        written: &PodVolumes,
        api: &dyn ClusterApi,
    ) -> Result<bool, String> {
        if !api.pod_exists(pod) {
            return Err(format!(
                "pod does not exist any more: pod {:?} not found",
                pod.name
            ));
        }
        let n: Arc<Node> = api
            .node(node)
            .ok_or_else(|| format!("failed to get node {node:?}: node {node:?} not found"))?;
        let affinity = |pv: &Pv| -> Result<(), String> {
            if pv_fits_node(pv, &n) {
                Ok(())
            } else {
                Err(format!(
                    "pv {:?} node affinity doesn't match node {node:?}: no matching NodeSelectorTerms",
                    pv.name
                ))
            }
        };
        for (pvc, pv) in &written.static_bindings {
            let latest_pv = api.pv(&pv.name).ok_or_else(|| {
                format!(
                    "failed to check binding: persistentvolumes {:?} not found",
                    pv.name
                )
            })?;
            let latest_pvc = api.pvc(&pvc.namespace, &pvc.name).ok_or_else(|| {
                format!(
                    "failed to check binding: persistentvolumeclaims \"{}/{}\" not found",
                    pvc.namespace, pvc.name
                )
            })?;
            if newer(&pv.resource_version, &latest_pv.resource_version) {
                return Ok(false);
            }
            affinity(&latest_pv)?;
            if latest_pv.claim_ref.is_none() {
                return Err(format!("ClaimRef got reset for pv {:?}", pv.name));
            }
            if !latest_pvc.is_bound() {
                return Ok(false);
            }
        }
        for pvc in &written.provisions {
            let latest = api.pvc(&pvc.namespace, &pvc.name).ok_or_else(|| {
                format!(
                    "failed to check provisioning pvc: persistentvolumeclaims \"{}/{}\" not found",
                    pvc.namespace, pvc.name
                )
            })?;
            if newer(&pvc.resource_version, &latest.resource_version) {
                return Ok(false);
            }
            if latest.selected_node != node {
                // The provisioner removes the annotation to ask for another node.
                return Err(format!("provisioning failed for PVC {:?}", pvc.name));
            }
            if !latest.volume_name.is_empty() {
                match api.pv(&latest.volume_name) {
                    // Not seen yet: check again next time.
                    None => return Ok(false),
                    Some(pv) => affinity(&pv)?,
                }
            }
            if !latest.is_bound() {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// True when resource version `a` is newer than `b` (both integers, as
/// the API server's versioner compares them; anything else is not newer).
fn newer(a: &str, b: &str) -> bool {
    match (a.parse::<u64>(), b.parse::<u64>()) {
        (Ok(a), Ok(b)) => a > b,
        _ => false,
    }
}

impl FilterPlugin for VolumeBinding {
    fn filter(&self, state: &CycleState, _: &Pod, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<State>(NAME) else {
            return Status::success();
        };
        let (reasons, found) = self.check(s, node);
        if reasons.is_empty() {
            s.by_node
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(node.name().to_string(), found);
            Status::success()
        } else {
            Status::with_reasons(
                Code::UnschedulableAndUnresolvable,
                reasons.into_iter().map(str::to_string).collect(),
            )
        }
    }
}

impl PreScorePlugin for VolumeBinding {
    fn pre_score(&self, _: &mut CycleState, _: &Pod, _: &[&NodeInfo], _: &Snapshot) -> Status {
        // StorageCapacityScoring is on by default in v1.37, so upstream never
        // skips here: every pod is scored (0 without static bindings).
        Status::success()
    }
}

impl ScorePlugin for VolumeBinding {
    fn score(&self, state: &CycleState, _: &Pod, node: &NodeInfo) -> Result<i64, Status> {
        let Some(s) = state.read::<State>(NAME) else {
            return Ok(0);
        };
        let (_, found) = self.check(s, node);
        // Static bindings: requested vs capacity per class. Dynamic
        // provisioning scores by CSIStorageCapacity, which rkube does not model (0).
        let mut classes: std::collections::BTreeMap<&str, (i64, i64)> = Default::default();
        for (pvc, pv) in &found.static_bindings {
            let e = classes.entry(pv.storage_class.as_str()).or_default();
            e.0 += pvc.request;
            e.1 += pv.capacity;
        }
        if classes.is_empty() {
            return Ok(0);
        }
        let total: i64 = classes
            .values()
            .map(|&(req, cap)| {
                if cap == 0 || req > cap {
                    broken_linear(&self.shape, 100)
                } else {
                    broken_linear(&self.shape, req * 100 / cap)
                }
            })
            .sum();
        Ok((total as f64 / classes.len() as f64).round() as i64)
    }
}

impl ReservePlugin for VolumeBinding {
    fn reserve(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        node: &str,
        cache: &mut dyn AssumeCache,
    ) -> Status {
        let found = state.read::<State>(NAME).and_then(|s| {
            if s.delayed.is_empty() {
                return None;
            }
            s.by_node
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(node)
                .cloned()
        });
        let reserved = match found {
            // No claims, every claim bound, or no entry for the node.
            None => Reserved {
                all_bound: true,
                volumes: PodVolumes::default(),
            },
            Some(volumes) => {
                cache.assume_volumes(pod, node, &volumes);
                Reserved {
                    all_bound: false,
                    volumes,
                }
            }
        };
        state.write(RESERVED, reserved);
        Status::success()
    }

    fn unreserve(&self, state: &mut CycleState, pod: &Pod, _: &str, cache: &mut dyn AssumeCache) {
        if let Some(r) = state.read::<Reserved>(RESERVED) {
            if !r.all_bound {
                cache.revert_volumes(pod, &r.volumes);
            }
        }
    }
}

impl PreBindPlugin for VolumeBinding {
    fn pre_bind_pre_flight(&self, state: &mut CycleState, _: &Pod, _: &str) -> Status {
        match state.read::<Reserved>(RESERVED) {
            Some(r) if !r.all_bound => Status::success(),
            _ => Status::skip(),
        }
    }

    fn pre_bind(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        node: &str,
        api: &mut dyn ClusterApi,
    ) -> Status {
        let Some(r) = state.read::<Reserved>(RESERVED) else {
            return Status::success();
        };
        if r.all_bound {
            return Status::success();
        }
        // Every volume, then every claim; the first error as the API gave it.
        let mut written = PodVolumes::default();
        for (pvc, pv) in &r.volumes.static_bindings {
            match api.bind_pv(pv, pvc) {
                Ok(new) => written.static_bindings.push((pvc.clone(), new)),
                Err(e) => return Status::error(e),
            }
        }
        for pvc in &r.volumes.provisions {
            match api.select_node(pvc, node) {
                Ok(new) => written.provisions.push(new),
                Err(e) => return Status::error(e),
            }
        }
        let start = api.elapsed();
        loop {
            let waited = api.elapsed().saturating_sub(start);
            if waited >= self.bind_timeout {
                return Status::error("binding volumes: context deadline exceeded");
            }
            api.sleep(BIND_POLL_INTERVAL.min(self.bind_timeout - waited));
            if api.elapsed().saturating_sub(start) >= self.bind_timeout {
                return Status::error("binding volumes: context deadline exceeded");
            }
            match self.check_bindings(pod, node, &written, api) {
                Ok(true) => return Status::success(),
                Ok(false) => {}
                Err(e) => return Status::error(format!("binding volumes: {e}")),
            }
        }
    }
}
