//! NodeResourcesFit and NodeResourcesBalancedAllocation, sharing the
//! resource-allocation scorer (upstream's `plugins/noderesources`).

pub mod balanced_allocation;
pub mod fit;
pub mod resource_allocation;

/// The pod's effective requests (containers, init containers, overhead),
/// refused when a DeviceClass serves one of its extended resources.
pub(crate) fn signature(
    pod: &rkube_model::Pod,
    snapshot: &rkube_framework::Snapshot,
) -> rkube_framework::Signed {
    if crate::noderesources::fit::DraBacked::of(pod, snapshot.dra.as_deref()).is_some() {
        return rkube_framework::Signed::Refused;
    }
    rkube_framework::Signed::Fragments(vec![(
        crate::signers::RESOURCES,
        serde_json::json!(format!("{:?}", pod.fit_requests())),
    )])
}
