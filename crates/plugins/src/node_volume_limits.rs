//! NodeVolumeLimits (upstream's CSILimits): the CSI volumes a pod adds to a
//! node must stay within each driver's `CSINode` attach limit.

use std::collections::{BTreeMap, BTreeSet};

use rkube_framework::events::{objects_as, CsiNode};

// A claim of the pod was added: the same hint as VolumeBinding's.
pub use crate::volume_binding::is_schedulable_after_pvc_change;
use rkube_framework::{
    ActionType, ClusterEventWithHint, Code, CycleState, EventObject, EventResource, FilterPlugin,
    HintContext, HintResult, NodeInfo, Plugin, PreFilterPlugin, PreFilterResult, QueueingHint,
    Snapshot, Status,
};
use rkube_model::volumes::Volumes;
use rkube_model::{Disk, Pod, Volume};

/// Upstream name.
pub const NAME: &str = "NodeVolumeLimits";
/// Upstream's reason.
pub const ERR_REASON_MAX_VOLUME_COUNT: &str = "node(s) exceed max volume count";
/// Upstream's reason after the driver's name (VolumeLimitScaling).
pub const ERR_REASON_DRIVER_NOT_INSTALLED: &str = "CSI driver is not installed on the node";

/// The plugin.
pub struct NodeVolumeLimits;

/// The volume state the filter needs (limits and claim → driver/handle).
struct State {
    volumes: std::sync::Arc<Volumes>,
}

impl Plugin for NodeVolumeLimits {
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
    /// Upstream's list. rkube watches no VolumeAttachments yet, so that
    /// registration never fires; it carries no hint.
    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        use ActionType as A;
        use EventResource as R;
        Some(vec![
            // Any new CSINode may hold the limits that admit the pod.
            ClusterEventWithHint::always(R::CsiNode, A::ADD),
            ClusterEventWithHint::with_hint(
                R::CsiNode,
                A::UPDATE,
                is_schedulable_after_csi_node_updated,
            ),
            ClusterEventWithHint::with_hint(
                R::AssignedPod,
                A::DELETE,
                is_schedulable_after_assigned_pod_deleted,
            ),
            ClusterEventWithHint::with_hint(
                R::PersistentVolumeClaim,
                A::ADD,
                is_schedulable_after_pvc_change,
            ),
            ClusterEventWithHint::always(R::VolumeAttachment, A::DELETE),
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

/// A scheduled pod with a claim or a CSI-migratable in-tree volume (GCE PD,
/// AWS EBS) was deleted: an attachment may be free.
pub fn is_schedulable_after_assigned_pod_deleted(
    _pod: &Pod,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
    _: &HintContext<'_>,
) -> HintResult {
    let (deleted, _) = objects_as::<Pod>(old, new)?;
    let deleted = deleted.ok_or("no deleted pod")?;
    if deleted.node_name.is_empty() && deleted.nominated_node_name.is_empty() {
        return Ok(QueueingHint::QueueSkip);
    }
    queue_if(deleted.volumes.iter().any(|v| {
        matches!(
            v,
            Volume::Claim { .. } | Volume::Disk(Disk::Gce { .. } | Disk::Aws { .. })
        )
    }))
}

/// A CSINode's limit for some driver went up.
pub fn is_schedulable_after_csi_node_updated(
    _pod: &Pod,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
    _: &HintContext<'_>,
) -> HintResult {
    let (old, new) = objects_as::<CsiNode>(old, new)?;
    let (old, new) = (old.ok_or("no old CSINode")?, new.ok_or("no new CSINode")?);
    queue_if(
        new.drivers
            .iter()
            .any(|(d, &limit)| limit > old.drivers.get(d).copied().unwrap_or(0)),
    )
}

/// Unique CSI volumes (handle → driver) a pod's claims use.
fn csi_volumes(pod: &Pod, vols: &Volumes, out: &mut BTreeMap<String, String>) {
    for claim in pod.claim_names() {
        let Some(pvc) = vols.pvc(&pod.namespace, claim) else {
            continue;
        };
        let pv = Some(&pvc.volume_name)
            .filter(|v| !v.is_empty())
            .and_then(|v| vols.pvs.get(v));
        if let Some(pv) = pv {
            if let Some((driver, handle)) = pv.csi.clone() {
                out.insert(format!("{driver}/{handle}"), driver);
            }
        } else if let Some(class) = vols.classes.get(&pvc.storage_class) {
            // Not yet provisioned: counts against the class's provisioner.
            out.insert(
                format!("{}/{}", class.provisioner, pvc.uid),
                class.provisioner.clone(),
            );
        }
    }
}

impl PreFilterPlugin for NodeVolumeLimits {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        if pod.claim_names().next().is_none() {
            return (None, Status::skip());
        }
        state.write(
            NAME,
            State {
                volumes: snapshot.volumes.clone(),
            },
        );
        (None, Status::success())
    }
}

impl FilterPlugin for NodeVolumeLimits {
    fn filter(&self, state: &CycleState, pod: &Pod, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<State>(NAME) else {
            return Status::success();
        };
        let mut new = BTreeMap::new();
        csi_volumes(pod, &s.volumes, &mut new);
        if new.is_empty() {
            return Status::success();
        }
        // VolumeLimitScaling (beta, on by default): a driver whose CSIDriver
        // asks for it must be installed on the node.
        if let Some(driver) = new
            .values()
            .find(|d| !s.volumes.csi_driver_installed(d, node.name()))
        {
            return Status::new(
                Code::Unschedulable,
                format!("{driver} {ERR_REASON_DRIVER_NOT_INSTALLED}"),
            );
        }
        let Some(limits) = s
            .volumes
            .csi_limits
            .get(node.name())
            .filter(|l| !l.is_empty())
        else {
            return Status::success();
        };
        let mut attached = BTreeMap::new();
        for p in &node.pods {
            csi_volumes(p, &s.volumes, &mut attached);
        }
        let mut attached_count: BTreeMap<&str, usize> = BTreeMap::new();
        for (handle, driver) in &attached {
            new.remove(handle);
            *attached_count.entry(driver).or_default() += 1;
        }
        let mut new_count: BTreeMap<&str, usize> = BTreeMap::new();
        for driver in new.values() {
            *new_count.entry(driver).or_default() += 1;
        }
        let drivers: BTreeSet<&str> = new_count.keys().copied().collect();
        for d in drivers {
            if let Some(&limit) = limits.get(d) {
                if attached_count.get(d).copied().unwrap_or(0) + new_count[d]
                    > limit.max(0) as usize
                {
                    return Status::new(Code::Unschedulable, ERR_REASON_MAX_VOLUME_COUNT);
                }
            }
        }
        Status::success()
    }
}

/// The batching signature of this plugin (OpportunisticBatching).
impl rkube_framework::SignPlugin for NodeVolumeLimits {
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
    //! The hints (upstream's `TestCSILimitsQHint`,
    //! `TestCSILimitsAddedPVCQHint` and `TestCSILimitsDeletedPodQHint`
    //! facts).

    use std::sync::Arc;

    use rkube_model::volumes::Pvc;

    use super::*;
    use crate::helper::testing::*;

    fn csi(drivers: &[(&str, i32)]) -> EventObject {
        EventObject::CsiNode(Arc::new(CsiNode {
            name: "n".into(),
            drivers: drivers.iter().map(|(d, c)| (d.to_string(), *c)).collect(),
            migrated_plugins: String::new(),
        }))
    }

    #[test]
    fn csi_node_updated() {
        let p = pod("p");
        let h = |old, new| {
            run(
                is_schedulable_after_csi_node_updated,
                &p,
                Some(old),
                Some(new),
            )
        };
        assert_eq!(
            h(csi(&[("a", 1)]), csi(&[("a", 2)])),
            Queue,
            "limit increased"
        );
        assert_eq!(
            h(csi(&[("a", 2)]), csi(&[("a", 1)])),
            QueueSkip,
            "limit decreased"
        );
        assert_eq!(
            h(csi(&[("a", 1)]), csi(&[("a", 1)])),
            QueueSkip,
            "unchanged"
        );
        assert_eq!(h(csi(&[]), csi(&[("b", 1)])), Queue, "a new driver");
    }

    #[test]
    fn assigned_pod_deleted_and_pvc_added() {
        let p = pod("p");
        let deleted = |node: &str, v: Vec<Volume>| {
            let mut d = pod("d");
            d.node_name = node.into();
            d.volumes = v;
            d
        };
        let claim = || Volume::Claim {
            claim: "pvc".into(),
            read_only: false,
            ephemeral: false,
        };
        let h = |d: Pod| {
            run(
                is_schedulable_after_assigned_pod_deleted,
                &p,
                Some(pod_obj(d)),
                None,
            )
        };
        assert_eq!(h(deleted("n", vec![])), QueueSkip, "no volumes");
        assert_eq!(h(deleted("", vec![claim()])), QueueSkip, "unscheduled");
        assert_eq!(h(deleted("n", vec![claim()])), Queue, "a claim");
        assert_eq!(
            h(deleted("n", vec![Volume::Other])),
            QueueSkip,
            "a configMap"
        );
        let mut target = pod("p");
        target.volumes = vec![claim()];
        let pvc = |ns: &str, name: &str| {
            EventObject::PersistentVolumeClaim(Arc::new(Pvc {
                namespace: ns.into(),
                name: name.into(),
                ..Default::default()
            }))
        };
        let h = |new| run(is_schedulable_after_pvc_change, &target, None, Some(new));
        assert_eq!(h(pvc("default", "pvc")), Queue);
        assert_eq!(h(pvc("default", "other")), QueueSkip);
        assert_eq!(h(pvc("other", "pvc")), QueueSkip);
    }
}
