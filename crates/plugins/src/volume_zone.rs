//! VolumeZone: a pod's bound volumes labelled with a zone or region only
//! admit nodes in that zone or region.

use std::collections::BTreeSet;

use rkube_framework::{
    Code, CycleState, FilterPlugin, NodeInfo, Plugin, PreFilterPlugin, PreFilterResult, Snapshot,
    Status,
};
use rkube_model::Pod;

use crate::volume_binding::pvc_not_found;

/// Upstream name.
pub const NAME: &str = "VolumeZone";
/// Upstream's reason.
pub const ERR_REASON_CONFLICT: &str = "node(s) had no available volume zone";

const TOPOLOGY_LABELS: [&str; 4] = [
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
];

fn ga_label(label: &str) -> &str {
    match label {
        "failure-domain.beta.kubernetes.io/zone" => "topology.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/region" => "topology.kubernetes.io/region",
        other => other,
    }
}

/// The plugin.
pub struct VolumeZone;

struct Topologies(Vec<(String, BTreeSet<String>)>);

impl Plugin for VolumeZone {
    fn name(&self) -> &'static str {
        NAME
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
}

fn reject(msg: String) -> (PreFilterResult, Status) {
    (None, Status::new(Code::UnschedulableAndUnresolvable, msg))
}

impl PreFilterPlugin for VolumeZone {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let vols = &snapshot.volumes;
        let mut topologies = Vec::new();
        for claim in pod.claim_names() {
            let Some(pvc) = vols.pvc(&pod.namespace, claim) else {
                return reject(pvc_not_found(claim));
            };
            if pvc.volume_name.is_empty() {
                if pvc.storage_class.is_empty() {
                    return reject(
                        "PersistentVolumeClaim had no pv name and storageClass name".into(),
                    );
                }
                let Some(class) = vols.classes.get(&pvc.storage_class) else {
                    return reject(format!(
                        "storageclass.storage.k8s.io {:?} not found",
                        pvc.storage_class
                    ));
                };
                if class.binding_mode.is_none() {
                    return reject(format!(
                        "VolumeBindingMode not set for StorageClass {:?}",
                        pvc.storage_class
                    ));
                }
                if class.wait_for_first_consumer() {
                    continue;
                }
                return reject("PersistentVolume had no name".into());
            }
            let Some(pv) = vols.pvs.get(&pvc.volume_name) else {
                return reject(format!("persistentvolume {:?} not found", pvc.volume_name));
            };
            for key in TOPOLOGY_LABELS {
                if let Some(v) = pv.labels.get(key) {
                    topologies.push((key.to_string(), v.split("__").map(str::to_string).collect()));
                }
            }
        }
        if topologies.is_empty() {
            return (None, Status::skip());
        }
        state.write(NAME, Topologies(topologies));
        (None, Status::success())
    }
}

impl FilterPlugin for VolumeZone {
    fn filter(&self, state: &CycleState, pod: &Pod, node: &NodeInfo) -> Status {
        if pod.volumes.is_empty() {
            return Status::success();
        }
        let Some(t) = state.read::<Topologies>(NAME) else {
            return Status::success();
        };
        let labels = &node.node.labels;
        if !TOPOLOGY_LABELS.iter().any(|k| labels.contains_key(*k)) {
            return Status::success();
        }
        for (key, values) in &t.0 {
            let v = labels.get(key).or_else(|| labels.get(ga_label(key)));
            if !v.is_some_and(|v| values.contains(v)) {
                return Status::new(Code::UnschedulableAndUnresolvable, ERR_REASON_CONFLICT);
            }
        }
        Status::success()
    }
}
