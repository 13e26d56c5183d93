//! VolumeRestrictions: in-tree disks that cannot be shared (GCE PD, AWS EBS,
//! RBD, iSCSI) must not already be used on the node, and a
//! `ReadWriteOncePod` claim must not be in use by any other pod.

use rkube_framework::events::objects_as;
use rkube_framework::{
    ActionType, ClusterEventWithHint, Code, CycleState, EventObject, EventResource, FilterPlugin,
    HintContext, HintResult, NodeInfo, Plugin, PreFilterPlugin, PreFilterResult, QueueingHint,
    Snapshot, Status,
};
use rkube_model::volumes::Pvc;
use rkube_model::{Pod, Volume};

use crate::volume_binding::pvc_not_found;

/// Upstream name.
pub const NAME: &str = "VolumeRestrictions";
/// A disk is already in use on the node.
pub const ERR_REASON_DISK_CONFLICT: &str = "node(s) had no available disk";
/// A ReadWriteOncePod claim is in use.
pub const ERR_REASON_RWOP_CONFLICT: &str =
    "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod";

/// The plugin.
pub struct VolumeRestrictions;

struct State {
    conflicting_rwop: usize,
}

impl Plugin for VolumeRestrictions {
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
    /// `spec.volumes` is immutable, so pod updates are not registered.
    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        use ActionType as A;
        use EventResource as R;
        Some(vec![
            ClusterEventWithHint::with_hint(
                R::AssignedPod,
                A::DELETE,
                is_schedulable_after_assigned_pod_deleted,
            ),
            ClusterEventWithHint::always(R::Node, A::ADD),
            // The claim must exist for its access modes to be checked.
            ClusterEventWithHint::with_hint(
                R::PersistentVolumeClaim,
                A::ADD,
                is_schedulable_after_pvc_added,
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

/// Names of the pod's `persistentVolumeClaim` volumes (not ephemeral ones).
fn claims(pod: &Pod) -> impl Iterator<Item = &str> {
    pod.volumes.iter().filter_map(|v| match v {
        Volume::Claim {
            claim,
            ephemeral: false,
            ..
        } => Some(claim.as_str()),
        _ => None,
    })
}

/// A claim the pod names was created.
pub fn is_schedulable_after_pvc_added(
    pod: &Pod,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
    _: &HintContext<'_>,
) -> HintResult {
    let (_, pvc) = objects_as::<Pvc>(old, new)?;
    let pvc = pvc.ok_or("no added claim")?;
    queue_if(pvc.namespace == pod.namespace && claims(pod).any(|c| c == pvc.name))
}

/// A pod of the namespace was deleted: it held a disk that conflicts with
/// the pod's, or a claim the pod also uses (a ReadWriteOncePod claim may be
/// free now; the access mode is not looked up, as upstream).
pub fn is_schedulable_after_assigned_pod_deleted(
    pod: &Pod,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
    _: &HintContext<'_>,
) -> HintResult {
    let (deleted, _) = objects_as::<Pod>(old, new)?;
    let deleted = deleted.ok_or("no deleted pod")?;
    if deleted.namespace != pod.namespace {
        return Ok(QueueingHint::QueueSkip);
    }
    let disk_conflict = pod.volumes.iter().any(|v| {
        let Volume::Disk(d) = v else { return false };
        deleted
            .volumes
            .iter()
            .any(|e| matches!(e, Volume::Disk(other) if d.conflicts(other)))
    });
    let shared_claim = claims(deleted).any(|c| claims(pod).any(|mine| mine == c));
    queue_if(disk_conflict || shared_claim)
}

impl PreFilterPlugin for VolumeRestrictions {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let needs_check = pod.volumes.iter().any(|v| matches!(v, Volume::Disk(_)));
        let mut conflicting = 0;
        for v in &pod.volumes {
            let Volume::Claim {
                claim,
                ephemeral: false,
                ..
            } = v
            else {
                continue;
            };
            let Some(pvc) = snapshot.volumes.pvc(&pod.namespace, claim) else {
                return (
                    None,
                    Status::new(Code::UnschedulableAndUnresolvable, pvc_not_found(claim)),
                );
            };
            if pvc.access_modes.iter().any(|m| m == "ReadWriteOncePod")
                && snapshot.pvc_users(&format!("{}/{}", pod.namespace, claim)) > 0
            {
                conflicting += 1;
            }
        }
        if !needs_check && conflicting == 0 {
            return (None, Status::skip());
        }
        state.write(
            NAME,
            State {
                conflicting_rwop: conflicting,
            },
        );
        (None, Status::success())
    }

    fn add_pod(&self, _: &mut CycleState, _: &Pod, _: &Pod, _: &NodeInfo) -> Status {
        Status::success()
    }
}

impl FilterPlugin for VolumeRestrictions {
    fn filter(&self, state: &CycleState, pod: &Pod, node: &NodeInfo) -> Status {
        for v in &pod.volumes {
            let Volume::Disk(disk) = v else { continue };
            for existing in &node.pods {
                let clash = existing.volumes.iter().any(|ev| match ev {
                    Volume::Disk(other) => disk.conflicts(other),
                    _ => false,
                });
                if clash {
                    return Status::new(Code::Unschedulable, ERR_REASON_DISK_CONFLICT);
                }
            }
        }
        if state
            .read::<State>(NAME)
            .is_some_and(|s| s.conflicting_rwop > 0)
        {
            return Status::new(Code::Unschedulable, ERR_REASON_RWOP_CONFLICT);
        }
        Status::success()
    }
}

/// The batching signature of this plugin (OpportunisticBatching).
impl rkube_framework::SignPlugin for VolumeRestrictions {
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
    //! Upstream's `Test_isSchedulableAfterAssignedPodDeleted` and
    //! `Test_isSchedulableAfterPersistentVolumeClaimChange` cases.

    use std::sync::Arc;

    use super::*;
    use crate::helper::testing::*;
    use rkube_model::Disk;

    fn with(ns: &str, vols: Vec<Volume>) -> Pod {
        let mut p = pod("p");
        p.namespace = ns.into();
        p.node_name = "n".into();
        p.volumes = vols;
        p
    }

    fn gce(name: &str) -> Volume {
        Volume::Disk(Disk::Gce {
            pd_name: name.into(),
            read_only: false,
        })
    }

    fn claim(name: &str) -> Volume {
        Volume::Claim {
            claim: name.into(),
            read_only: false,
            ephemeral: false,
        }
    }

    #[test]
    fn assigned_pod_deleted() {
        let h = |target: &Pod, deleted: Pod| {
            run(
                is_schedulable_after_assigned_pod_deleted,
                target,
                Some(pod_obj(deleted)),
                None,
            )
        };
        let target = with("default", vec![gce("pd"), claim("pvc")]);
        assert_eq!(
            h(&target, with("other", vec![gce("pd")])),
            QueueSkip,
            "a pod of another namespace"
        );
        assert_eq!(
            h(&target, with("default", vec![gce("pd")])),
            Queue,
            "the conflicting disk is released"
        );
        assert_eq!(
            h(&target, with("default", vec![gce("other")])),
            QueueSkip,
            "another disk"
        );
        assert_eq!(
            h(&target, with("default", vec![claim("pvc")])),
            Queue,
            "the same claim is released"
        );
        assert_eq!(
            h(&target, with("default", vec![claim("other")])),
            QueueSkip,
            "another claim"
        );
    }

    #[test]
    fn pvc_added() {
        let target = with("default", vec![claim("pvc1")]);
        let pvc = |ns: &str, name: &str| {
            EventObject::PersistentVolumeClaim(Arc::new(Pvc {
                namespace: ns.into(),
                name: name.into(),
                ..Default::default()
            }))
        };
        let h = |new| run(is_schedulable_after_pvc_added, &target, None, Some(new));
        assert_eq!(h(pvc("default", "pvc1")), Queue, "the pod's claim");
        assert_eq!(h(pvc("default", "pvc2")), QueueSkip, "another claim");
        assert_eq!(h(pvc("other", "pvc1")), QueueSkip, "another namespace");
    }
}
