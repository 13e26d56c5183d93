//! VolumeZone: a pod's bound volumes labelled with a zone or region only
//! admit nodes in that zone or region.

use std::collections::BTreeSet;

use rkube_framework::events::objects_as;
use rkube_framework::{
    ActionType, ClusterEventWithHint, Code, CycleState, EventObject, EventResource, FilterPlugin,
    HintContext, HintResult, NodeInfo, Plugin, PreFilterPlugin, PreFilterResult, QueueingHint,
    Snapshot, Status,
};
use rkube_model::volumes::{Pv, Pvc, StorageClass};
use rkube_model::{Pod, Volume};

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
    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        use ActionType as A;
        use EventResource as R;
        Some(vec![
            // A binding mode cannot change: only new classes matter.
            ClusterEventWithHint::with_hint(
                R::StorageClass,
                A::ADD,
                is_schedulable_after_storage_class_added,
            ),
            ClusterEventWithHint::always(R::Node, A::ADD | A::UPDATE_NODE_LABEL),
            ClusterEventWithHint::with_hint(
                R::PersistentVolumeClaim,
                A::ADD | A::UPDATE,
                is_schedulable_after_pvc_change,
            ),
            ClusterEventWithHint::with_hint(
                R::PersistentVolume,
                A::ADD | A::UPDATE,
                is_schedulable_after_pv_change,
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

/// A claim the pod names in a `persistentVolumeClaim` volume was added or
/// updated.
pub fn is_schedulable_after_pvc_change(
    pod: &Pod,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
    _: &HintContext<'_>,
) -> HintResult {
    let (_, pvc) = objects_as::<Pvc>(old, new)?;
    let pvc = pvc.ok_or("no modified claim")?;
    queue_if(
        pod.namespace == pvc.namespace
            && pod.volumes.iter().any(|v| {
                matches!(v, Volume::Claim { claim, ephemeral: false, .. } if *claim == pvc.name)
            }),
    )
}

/// A `WaitForFirstConsumer` class was added.
pub fn is_schedulable_after_storage_class_added(
    _pod: &Pod,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
    _: &HintContext<'_>,
) -> HintResult {
    let (_, sc) = objects_as::<StorageClass>(old, new)?;
    queue_if(sc.ok_or("no added class")?.wait_for_first_consumer())
}

/// A volume's zone/region labels, parsed as upstream's `getPVTopologies`.
fn pv_topologies(pv: &Pv) -> Vec<(&'static str, BTreeSet<&str>)> {
    TOPOLOGY_LABELS
        .iter()
        .filter_map(|k| Some((*k, pv.labels.get(*k)?.split("__").collect())))
        .collect()
}

/// A volume was added, or its zone/region labels changed.
pub fn is_schedulable_after_pv_change(
    _pod: &Pod,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
    _: &HintContext<'_>,
) -> HintResult {
    let (old, new) = objects_as::<Pv>(old, new)?;
    let new = new.ok_or("no modified volume")?;
    match old {
        None => Ok(QueueingHint::Queue),
        Some(o) => queue_if(pv_topologies(o) != pv_topologies(new)),
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

/// The batching signature of this plugin (OpportunisticBatching).
impl rkube_framework::SignPlugin for VolumeZone {
    fn sign(
        &self,
        pod: &rkube_model::Pod,
        _: &rkube_framework::Snapshot,
    ) -> rkube_framework::Signed {
        crate::signers::fragments([crate::signers::volumes(pod)])
    }
}

#[cfg(test)]
mod tests {
    //! Upstream's `TestIsSchedulableAfterPersistentVolumeClaimAdded`,
    //! `TestIsSchedulableAfterStorageClassAdded` and
    //! `TestIsSchedulableAfterPersistentVolumeChange` cases.

    use std::sync::Arc;

    use super::*;
    use crate::helper::testing::*;

    fn claim(name: &str) -> Volume {
        Volume::Claim {
            claim: name.into(),
            read_only: false,
            ephemeral: false,
        }
    }

    fn pvc(ns: &str, volume: &str) -> EventObject {
        EventObject::PersistentVolumeClaim(Arc::new(Pvc {
            namespace: ns.into(),
            name: "PVC_1".into(),
            volume_name: volume.into(),
            ..Default::default()
        }))
    }

    #[test]
    fn pvc_change() {
        let mut uses = pod("pod_1");
        uses.volumes = vec![claim("PVC_1")];
        let mut other = pod("pod_1");
        other.volumes = vec![claim("PVC_2")];
        let h = |p: &Pod, old: Option<EventObject>, new| {
            run(is_schedulable_after_pvc_change, p, old, Some(new))
        };
        assert_eq!(
            h(&uses, None, pod_obj(pod("x"))),
            Queue,
            "error-wrong-new-object"
        );
        assert_eq!(
            h(&pod("pod_1"), None, pvc("default", "Vol_1")),
            QueueSkip,
            "pod without volumes"
        );
        assert_eq!(
            h(&other, None, pvc("default", "Vol_1")),
            QueueSkip,
            "another claim"
        );
        assert_eq!(
            h(&uses, None, pvc("ns1", "Vol_1")),
            QueueSkip,
            "another namespace"
        );
        assert_eq!(
            h(&uses, None, pvc("default", "Vol_1")),
            Queue,
            "the pod's claim added"
        );
        assert_eq!(
            h(&uses, Some(pvc("default", "")), pvc("default", "Vol_1")),
            Queue,
            "the pod's claim got its volume"
        );
        assert_eq!(
            h(&other, Some(pvc("default", "")), pvc("default", "Vol_1")),
            QueueSkip,
            "another claim got its volume"
        );
    }

    #[test]
    fn storage_class_added() {
        let sc = |mode: Option<&str>| {
            EventObject::StorageClass(Arc::new(StorageClass {
                name: "SC_1".into(),
                binding_mode: mode.map(str::to_string),
                ..Default::default()
            }))
        };
        let p = pod("p");
        let h = |new| {
            run(
                is_schedulable_after_storage_class_added,
                &p,
                None,
                Some(new),
            )
        };
        assert_eq!(h(sc(None)), QueueSkip, "no binding mode");
        assert_eq!(h(sc(Some("Immediate"))), QueueSkip, "Immediate");
        assert_eq!(
            h(sc(Some("WaitForFirstConsumer"))),
            Queue,
            "WaitForFirstConsumer"
        );
    }

    #[test]
    fn pv_change() {
        let pv = |l: &[(&str, &str)]| {
            EventObject::PersistentVolume(Arc::new(Pv {
                name: "Vol_1".into(),
                labels: labels(l),
                ..Default::default()
            }))
        };
        const BETA: &str = "failure-domain.beta.kubernetes.io/zone";
        const GA: &str = "topology.kubernetes.io/zone";
        let p = pod("p");
        let h =
            |old: Option<EventObject>, new| run(is_schedulable_after_pv_change, &p, old, Some(new));
        assert_eq!(h(None, pv(&[(BETA, "us-west1-b")])), Queue, "new pv");
        assert_eq!(
            h(
                Some(pv(&[(BETA, "us-west1-a")])),
                pv(&[(BETA, "us-west1-b")])
            ),
            Queue,
            "zone changed"
        );
        assert_eq!(
            h(
                Some(pv(&[(BETA, "us-west1-a")])),
                pv(&[(BETA, "us-west1-a"), (GA, "zone")])
            ),
            Queue,
            "zone label added"
        );
        assert_eq!(
            h(
                Some(pv(&[(BETA, "us-west1-a"), (GA, "zone")])),
                pv(&[(BETA, "us-west1-a"), (GA, "zone"), ("other", "x")])
            ),
            QueueSkip,
            "unrelated label"
        );
    }
}
