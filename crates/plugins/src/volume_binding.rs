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
use rkube_framework::events::{objects_as, CsiDriver, CsiNode};
use rkube_framework::{
    ActionType, AssumeCache, ClusterApi, ClusterEventWithHint, Code, CycleState, EventObject,
    EventResource, FilterPlugin, HintContext, HintResult, NodeInfo, Plugin, PreBindPlugin,
    PreFilterPlugin, PreFilterResult, PreScorePlugin, QueueingHint, ReservePlugin, ScorePlugin,
    Snapshot, Status, MAX_NODE_SCORE,
};
use rkube_model::volumes::{
    can_provision, find_matching_volume, pv_fits_node, PodVolumes, ProvisionCapacity, Pv, Pvc,
    StorageCapacity, StorageClass,
};
use rkube_model::{Node, Pod, Volume};

use crate::noderesources::fit::broken_linear;

/// Upstream name.
pub const NAME: &str = "VolumeBinding";
/// No CSIStorageCapacity the node reaches holds a claim to provision.
pub const ERR_REASON_NOT_ENOUGH_SPACE: &str = "node(s) did not have enough free storage";
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
    fn as_sign(&self) -> Option<&dyn rkube_framework::SignPlugin> {
        Some(self)
    }
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
    /// Upstream's list. rkube watches no CSIDrivers or CSIStorageCapacities
    /// yet, so those two registrations never fire; they carry no hint.
    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        use ActionType as A;
        use EventResource as R;
        Some(vec![
            // A missing or misconfigured class (allowedTopologies).
            ClusterEventWithHint::with_hint(
                R::StorageClass,
                A::ADD | A::UPDATE,
                is_schedulable_after_storage_class_change,
            ),
            // Claims get bound to volumes; any change may help.
            ClusterEventWithHint::with_hint(
                R::PersistentVolumeClaim,
                A::ADD | A::UPDATE,
                is_schedulable_after_pvc_change,
            ),
            ClusterEventWithHint::always(R::PersistentVolume, A::ADD | A::UPDATE),
            // Labels matched by volumes' node affinity or allowedTopologies.
            ClusterEventWithHint::always(R::Node, A::ADD | A::UPDATE_NODE_LABEL),
            ClusterEventWithHint::with_hint(
                R::CsiNode,
                A::ADD | A::UPDATE,
                is_schedulable_after_csi_node_change,
            ),
            ClusterEventWithHint::with_hint(
                R::CsiDriver,
                A::UPDATE,
                is_schedulable_after_csi_driver_change,
            ),
            ClusterEventWithHint::with_hint(
                R::CsiStorageCapacity,
                A::ADD | A::UPDATE,
                is_schedulable_after_csi_storage_capacity_change,
            ),
        ])
    }
}

fn queue_if(yes: bool) -> HintResult {
    Ok(if yes {
        QueueingHint::Queue
    } else {
        QueueingHint::QueueSkip
    })
}

/// A CSINode was added, or its migrated-plugins annotation changed (which
/// in-tree volumes are translated to CSI).
pub fn is_schedulable_after_csi_node_change(
    _pod: &Pod,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
    _: &HintContext<'_>,
) -> HintResult {
    let (old, new) = objects_as::<CsiNode>(old, new)?;
    match (old, new) {
        (None, _) => Ok(QueueingHint::Queue),
        (Some(o), Some(n)) => queue_if(o.migrated_plugins != n.migrated_plugins),
        (Some(_), None) => Err("no modified CSINode".into()),
    }
}

/// A CSIDriver stopped publishing storage capacity (`storageCapacity`
/// true → false) and the pod has an inline volume of it.
pub fn is_schedulable_after_csi_driver_change(
    pod: &Pod,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
    _: &HintContext<'_>,
) -> HintResult {
    let (old, new) = objects_as::<CsiDriver>(old, new)?;
    let (Some(old), Some(new)) = (old, new) else {
        return Err("no original or modified CSIDriver".into());
    };
    let inline = pod
        .volumes
        .iter()
        .any(|v| matches!(v, Volume::Csi { driver } if *driver == new.name));
    queue_if(inline && old.storage_capacity && !new.storage_capacity)
}

/// A CSIStorageCapacity was added, or its volume limit (its
/// `maximumVolumeSize`, else its `capacity`) appeared or grew.
pub fn is_schedulable_after_csi_storage_capacity_change(
    _pod: &Pod,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
    _: &HintContext<'_>,
) -> HintResult {
    let (old, new) = objects_as::<StorageCapacity>(old, new)?;
    let Some(old) = old else {
        return Ok(QueueingHint::Queue);
    };
    let new = new.ok_or("no modified CSIStorageCapacity")?;
    let limit = |c: &StorageCapacity| c.maximum_volume_size.or(c.capacity);
    queue_if(match (limit(old), limit(new)) {
        (_, None) => false,
        (None, Some(_)) => true,
        (Some(o), Some(n)) => n > o,
    })
}

/// A claim of the pod (by name, ephemeral ones included) was added or updated.
pub fn is_schedulable_after_pvc_change(
    pod: &Pod,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
    _: &HintContext<'_>,
) -> HintResult {
    let (_, pvc) = objects_as::<Pvc>(old, new)?;
    let pvc = pvc.ok_or("no modified claim")?;
    queue_if(pod.namespace == pvc.namespace && pod.claim_names().any(|c| c == pvc.name))
}

/// A class was added, or its allowedTopologies changed (its binding mode
/// cannot change).
pub fn is_schedulable_after_storage_class_change(
    _pod: &Pod,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
    _: &HintContext<'_>,
) -> HintResult {
    let (old, new) = objects_as::<StorageClass>(old, new)?;
    let new = new.ok_or("no modified class")?;
    match old {
        None => Ok(QueueingHint::Queue),
        Some(o) => queue_if(o.allowed_topologies != new.allowed_topologies),
    }
}

fn unresolvable(msg: impl Into<std::borrow::Cow<'static, str>>) -> (PreFilterResult, Status) {
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
        let mut not_enough_space = false;
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
            // Upstream's `checkVolumeProvisions`: the first claim that
            // cannot be provisioned here ends the check.
            for pvc in &found.provisions {
                let class = s.volumes.classes.get(&pvc.storage_class);
                let Some(class) = class.filter(|_| can_provision(pvc, &s.volumes, &node.node))
                else {
                    bind_conflict = true;
                    break;
                };
                match s.volumes.provision_capacity(pvc, class, &node.node) {
                    ProvisionCapacity::NotEnough => {
                        not_enough_space = true;
                        break;
                    }
                    ProvisionCapacity::Enough(c) => found.provision_capacities.push(Some(c)),
                    ProvisionCapacity::Unchecked => found.provision_capacities.push(None),
                }
            }
        }
        if bind_conflict {
            reasons.push(ERR_REASON_BIND_CONFLICT);
        }
        if not_enough_space {
            reasons.push(ERR_REASON_NOT_ENOUGH_SPACE);
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
        // Static bindings: requested vs capacity per class. Without them
        // (StorageCapacityScoring), claims to provision: requested vs the
        // capacity of the CSIStorageCapacity that holds them (set, not
        // added: two claims of one class share it).
        let mut classes: std::collections::BTreeMap<&str, (i64, i64)> = Default::default();
        for (pvc, pv) in &found.static_bindings {
            let e = classes.entry(pv.storage_class.as_str()).or_default();
            e.0 += pvc.request;
            e.1 += pv.capacity;
        }
        if found.static_bindings.is_empty() {
            for (pvc, cap) in found.provisions.iter().zip(&found.provision_capacities) {
                let Some(cap) = cap else { continue };
                let e = classes.entry(pvc.storage_class.as_str()).or_default();
                e.0 += pvc.request;
                e.1 = *cap;
            }
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

/// The batching signature of this plugin (OpportunisticBatching).
impl rkube_framework::SignPlugin for VolumeBinding {
    fn sign(
        &self,
        pod: &rkube_model::Pod,
        _: &rkube_framework::Snapshot,
    ) -> rkube_framework::Signed {
        crate::signers::fragments([crate::signers::volumes(pod)])
    }
}

#[cfg(test)]
mod hint_tests {
    //! Upstream's `TestIsSchedulableAfterCSINodeChange`,
    //! `TestIsSchedulableAfterPersistentVolumeClaimChange` and
    //! `TestIsSchedulableAfterStorageClassChange` cases.

    use super::*;
    use crate::helper::testing::*;
    use rkube_model::{NodeSelector, NodeSelectorTerm, Volume};

    fn csi(annotation: &str) -> EventObject {
        EventObject::CsiNode(Arc::new(CsiNode {
            name: "csinode-a".into(),
            migrated_plugins: annotation.into(),
            ..Default::default()
        }))
    }

    #[test]
    fn csi_node_change() {
        let p = pod("p");
        let h = |old, new| run(is_schedulable_after_csi_node_change, &p, old, new);
        assert_eq!(
            h(Some(pod_obj(pod("x"))), Some(pod_obj(pod("x")))),
            Queue,
            "unexpected objects are passed"
        );
        assert_eq!(h(None, Some(csi(""))), Queue, "CSINode is newly created");
        assert_eq!(
            h(Some(csi("test1")), Some(csi("test1, test2"))),
            Queue,
            "CSINode's migrated-plugins annotations is added"
        );
        assert_eq!(
            h(Some(csi("test1")), Some(csi("test2"))),
            Queue,
            "CSINode's migrated-plugins annotation is updated"
        );
        assert_eq!(
            h(Some(csi("test1")), Some(csi("test1"))),
            QueueSkip,
            "CSINode is updated but migrated-plugins annotation gets unchanged"
        );
    }

    #[test]
    fn csi_storage_capacity_change() {
        // Upstream's `TestIsSchedulableAfterCSIStorageCapacityChange`.
        let cap = |capacity: Option<i64>, max: Option<i64>| {
            Some(EventObject::CsiStorageCapacity(Arc::new(StorageCapacity {
                class: "test-sc".into(),
                capacity,
                maximum_volume_size: max,
                ..Default::default()
            })))
        };
        let p = pod("pod-a");
        let h = |old, new| {
            run(
                is_schedulable_after_csi_storage_capacity_change,
                &p,
                old,
                new,
            )
        };
        let cases = [
            (
                "When a new CSIStorageCapacity is created, it returns Queue",
                None,
                cap(None, None),
                Queue,
            ),
            (
                "When the volume limit is increase(Capacity set), it returns Queue",
                cap(None, None),
                cap(Some(100), None),
                Queue,
            ),
            (
                "When the volume limit is increase(MaximumVolumeSize set), it returns Queue",
                cap(None, None),
                cap(None, Some(100)),
                Queue,
            ),
            (
                "When the volume limit is increase(Capacity increase), it returns Queue",
                cap(Some(50), None),
                cap(Some(100), None),
                Queue,
            ),
            (
                "When the volume limit is increase(MaximumVolumeSize unset), it returns Queue",
                cap(Some(100), Some(50)),
                cap(Some(100), None),
                Queue,
            ),
            (
                "When the volume limit is increase(MaximumVolumeSize increase), it returns Queue",
                cap(Some(100), Some(50)),
                cap(Some(100), Some(60)),
                Queue,
            ),
            (
                "When there are no changes to the CSIStorageCapacity, it returns QueueSkip",
                cap(Some(100), Some(50)),
                cap(Some(100), Some(50)),
                QueueSkip,
            ),
            (
                "When the volume limit is equal(Capacity), it returns QueueSkip",
                cap(Some(100), None),
                cap(Some(100), None),
                QueueSkip,
            ),
            (
                "When the volume limit is equal(MaximumVolumeSize unset), it returns QueueSkip",
                cap(Some(100), Some(50)),
                cap(Some(50), None),
                QueueSkip,
            ),
            (
                "When the volume limit is decrease(Capacity), it returns QueueSkip",
                cap(Some(100), None),
                cap(Some(90), None),
                QueueSkip,
            ),
            (
                "When the volume limit is decrease(MaximumVolumeSize), it returns QueueSkip",
                cap(None, Some(100)),
                cap(None, Some(90)),
                QueueSkip,
            ),
        ];
        for (name, old, new, want) in cases {
            assert_eq!(h(old, new), want, "{name}");
        }
        // "type conversion error": another kind of object queues (an error).
        assert_eq!(
            h(Some(pod_obj(pod("x"))), Some(pod_obj(pod("x")))),
            Queue,
            "type conversion error"
        );
    }

    #[test]
    fn csi_driver_change() {
        // Upstream's `TestIsSchedulableAfterCSIDriverChange`: a nil
        // `storageCapacity` reads as false.
        let driver = |name: &str, capacity: bool| {
            Some(EventObject::CsiDriver(Arc::new(CsiDriver {
                name: name.into(),
                storage_capacity: capacity,
            })))
        };
        let mut inline = pod("pod-a");
        inline.volumes.push(Volume::Csi {
            driver: "test1".into(),
        });
        let h = |p: &Pod, old, new| run(is_schedulable_after_csi_driver_change, p, old, new);
        let cases = [
            (
                "pod has no CSIDriver",
                pod("pod-a"),
                "test1",
                true,
                false,
                QueueSkip,
            ),
            (
                "driver name in pod and csidriver name are different",
                inline.clone(),
                "test2",
                true,
                false,
                QueueSkip,
            ),
            (
                "original StorageCapacity is nil",
                inline.clone(),
                "test1",
                false,
                false,
                QueueSkip,
            ),
            (
                "original StorageCapacity is false",
                inline.clone(),
                "test1",
                false,
                false,
                QueueSkip,
            ),
            (
                "modified StorageCapacity is nil",
                inline.clone(),
                "test1",
                true,
                false,
                Queue,
            ),
            (
                "modified StorageCapacity is true",
                inline.clone(),
                "test1",
                true,
                true,
                QueueSkip,
            ),
            (
                "modified StorageCapacity is false",
                inline.clone(),
                "test1",
                true,
                false,
                Queue,
            ),
        ];
        for (name, p, d, old, new, want) in cases {
            assert_eq!(h(&p, driver(d, old), driver(d, new)), want, "{name}");
        }
        assert_eq!(
            h(&inline, Some(pod_obj(pod("x"))), Some(pod_obj(pod("x")))),
            Queue,
            "unexpected objects are passed"
        );
    }

    fn pvc(ns: &str, name: &str) -> EventObject {
        EventObject::PersistentVolumeClaim(Arc::new(Pvc {
            namespace: ns.into(),
            name: name.into(),
            ..Default::default()
        }))
    }

    fn claim(name: &str, ephemeral: bool) -> Volume {
        Volume::Claim {
            claim: name.into(),
            read_only: false,
            ephemeral,
        }
    }

    #[test]
    fn pvc_change() {
        let h = |p: &Pod, new| run(is_schedulable_after_pvc_change, p, None, Some(new));
        let mut with_pvc = pod("pod-a");
        with_pvc.volumes = vec![claim("pvc-a", false)];
        let mut with_ephemeral = pod("pod-a");
        // An ephemeral volume "ephemeral" of pod "pod-a" is claim "pod-a-ephemeral".
        with_ephemeral.volumes = vec![claim("pod-a-ephemeral", true)];
        assert_eq!(
            h(&pod("pod-a"), pvc("default", "pvc-a")),
            QueueSkip,
            "pod has no pvc or ephemeral volumes"
        );
        assert_eq!(
            h(&with_pvc, pvc("ns-b", "pvc-a")),
            QueueSkip,
            "pvc with the same name as the one used by the pod in a different namespace is modified"
        );
        assert_eq!(
            h(&with_pvc, pvc("default", "pvc-b")),
            QueueSkip,
            "pod has no pvc that is being modified"
        );
        assert_eq!(
            h(&with_ephemeral, pvc("default", "pod-a-other")),
            QueueSkip,
            "pod has no generic ephemeral volume that is being modified"
        );
        assert_eq!(
            h(&with_pvc, pvc("default", "pvc-a")),
            Queue,
            "pod has the pvc that is being modified"
        );
        assert_eq!(
            h(&with_ephemeral, pvc("default", "pod-a-ephemeral")),
            Queue,
            "pod has the generic ephemeral volume that is being modified"
        );
        assert_eq!(
            h(&with_pvc, pod_obj(pod("x"))),
            Queue,
            "type conversion error"
        );
    }

    #[test]
    fn storage_class_change() {
        let sc = |zones: Option<&[&str]>| {
            EventObject::StorageClass(Arc::new(StorageClass {
                name: "sc-a".into(),
                allowed_topologies: zones.map(|z| NodeSelector {
                    terms: vec![NodeSelectorTerm {
                        match_expressions: vec![in_req("topology.kubernetes.io/zone", z)],
                        ..Default::default()
                    }],
                }),
                ..Default::default()
            }))
        };
        let p = pod("p");
        let h = |old, new| {
            run(
                is_schedulable_after_storage_class_change,
                &p,
                old,
                Some(new),
            )
        };
        assert_eq!(
            h(None, sc(None)),
            Queue,
            "When a new StorageClass is created, it returns Queue"
        );
        assert_eq!(
            h(Some(sc(None)), sc(Some(&["a"]))),
            Queue,
            "When the AllowedTopologies are changed, it returns Queue"
        );
        assert_eq!(
            h(Some(sc(Some(&["a"]))), sc(Some(&["a"]))),
            QueueSkip,
            "When there are no changes to the StorageClass, it returns QueueSkip"
        );
    }
}
