//! NodeVolumeLimits (upstream's CSILimits): the CSI volumes a pod adds to a
//! node must stay within each driver's `CSINode` attach limit.

use std::collections::{BTreeMap, BTreeSet};

use rkube_framework::{
    Code, CycleState, FilterPlugin, NodeInfo, Plugin, PreFilterPlugin, PreFilterResult, Snapshot,
    Status,
};
use rkube_model::volumes::Volumes;
use rkube_model::Pod;

/// Upstream name.
pub const NAME: &str = "NodeVolumeLimits";
/// Upstream's reason.
pub const ERR_REASON_MAX_VOLUME_COUNT: &str = "node(s) exceed max volume count";

/// The plugin.
pub struct NodeVolumeLimits;

/// The volume state the filter needs (limits and claim → driver/handle).
struct State {
    volumes: std::sync::Arc<Volumes>,
}

impl Plugin for NodeVolumeLimits {
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

/// Unique CSI volumes (handle → driver) a pod's claims use.
fn csi_volumes(pod: &Pod, vols: &Volumes, out: &mut BTreeMap<String, String>) {
    for claim in pod.claim_names() {
        let Some(pvc) = vols.pvc(&pod.namespace, claim) else {
            continue;
        };
        if !pvc.volume_name.is_empty() {
            if let Some((driver, handle)) =
                vols.pvs.get(&pvc.volume_name).and_then(|pv| pv.csi.clone())
            {
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
        let Some(limits) = s
            .volumes
            .csi_limits
            .get(node.name())
            .filter(|l| !l.is_empty())
        else {
            return Status::success();
        };
        let mut new = BTreeMap::new();
        csi_volumes(pod, &s.volumes, &mut new);
        if new.is_empty() {
            return Status::success();
        }
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
