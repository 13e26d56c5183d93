//! VolumeBinding: a pod's PersistentVolumeClaims must be bound, or bindable
//! on the node: bound claims' volumes must admit the node; delayed
//! (`WaitForFirstConsumer`) claims need a matching available volume there, or
//! a class that can provision for the node. Immediate unbound claims reject
//! the pod. Scoring ranks static bindings by the class utilization shape.

use std::sync::Arc;

use rkube_config::args::{decode, VolumeBindingArgs};
use rkube_framework::{
    Code, CycleState, FilterPlugin, NodeInfo, Plugin, PreFilterPlugin, PreFilterResult,
    PreScorePlugin, ScorePlugin, Snapshot, Status, MAX_NODE_SCORE,
};
use rkube_model::volumes::{can_provision, find_matching_volume, pv_fits_node, Pv, Pvc};
use rkube_model::Pod;

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
}

/// Builds the plugin from `VolumeBindingArgs`.
pub fn new(args: &serde_json::Value, path: &str) -> Result<Arc<dyn Plugin>, String> {
    let a: VolumeBindingArgs = decode(args, path).map_err(|e| e.to_string())?;
    let shape = a
        .shape
        .iter()
        .map(|p| (p.utilization as i64, p.score as i64 * (MAX_NODE_SCORE / 10)))
        .collect();
    Ok(Arc::new(VolumeBinding { shape }))
}

/// The pod's claims, sorted into bound and delayed, with their volumes.
struct State {
    bound: Vec<(Pvc, Option<Pv>)>,
    delayed: Vec<Pvc>,
    volumes: Arc<rkube_model::volumes::Volumes>,
}

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
        state.write(
            NAME,
            State {
                bound,
                delayed,
                volumes: vols.clone(),
            },
        );
        (None, Status::success())
    }
}

impl VolumeBinding {
    /// Reasons the node cannot host the pod's volumes, and the static
    /// bindings it would get there.
    fn check(&self, s: &State, node: &NodeInfo) -> (Vec<&'static str>, Vec<(i64, Pv)>) {
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
        let mut statics = Vec::new();
        let mut taken: Vec<String> = Vec::new();
        let mut bind_conflict = false;
        for pvc in &s.delayed {
            match find_matching_volume(pvc, &s.volumes, &node.node, &taken) {
                Some(pv) => {
                    taken.push(pv.name.clone());
                    statics.push((pvc.request, pv.clone()));
                }
                None => {
                    if !can_provision(pvc, &s.volumes, &node.node) {
                        bind_conflict = true;
                    }
                }
            }
        }
        if bind_conflict {
            reasons.push(ERR_REASON_BIND_CONFLICT);
        }
        (reasons, statics)
    }
}

impl FilterPlugin for VolumeBinding {
    fn filter(&self, state: &CycleState, _: &Pod, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<State>(NAME) else {
            return Status::success();
        };
        let (reasons, _) = self.check(s, node);
        if reasons.is_empty() {
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
        let (_, statics) = self.check(s, node);
        // Static bindings: requested vs capacity per class. Dynamic
        // provisioning scores by CSIStorageCapacity, which rkube does not model (0).
        let mut classes: std::collections::BTreeMap<&str, (i64, i64)> = Default::default();
        for (request, pv) in &statics {
            let e = classes.entry(pv.storage_class.as_str()).or_default();
            e.0 += request;
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
