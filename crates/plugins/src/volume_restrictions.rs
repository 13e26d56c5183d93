//! VolumeRestrictions: in-tree disks that cannot be shared (GCE PD, AWS EBS,
//! RBD, iSCSI) must not already be used on the node, and a
//! `ReadWriteOncePod` claim must not be in use by any other pod.

use rkube_framework::{
    Code, CycleState, FilterPlugin, NodeInfo, Plugin, PreFilterPlugin, PreFilterResult, Snapshot,
    Status,
};
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
