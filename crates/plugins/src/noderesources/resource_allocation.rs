//! The shared resource-allocation scorer: per configured resource, the node's
//! allocatable, what is already requested on it, and that plus the pod.

use rkube_config::args::ResourceSpec;
use rkube_framework::NodeInfo;
use rkube_model::resources::{is_scalar_resource_name, names};
use rkube_model::{Pod, Resources};

/// The pod's request for each configured resource.
pub fn pod_request_list(pod: &Pod, resources: &[ResourceSpec], use_requested: bool) -> Vec<i64> {
    let r = rkube_model::requests::scoring_requests(pod, !use_requested);
    resources.iter().map(|spec| r.get(&spec.name)).collect()
}

/// `(requested-with-pod, allocated, allocatable)` per resource, as upstream's
/// `calculateNodeAllocatableRequest`.
pub fn node_vectors(
    node: &NodeInfo,
    resources: &[ResourceSpec],
    pod_requests: &[i64],
    use_requested: bool,
) -> (Vec<i64>, Vec<i64>, Vec<i64>) {
    let n = resources.len();
    let (mut requested, mut allocated, mut allocatable) = (vec![0; n], vec![0; n], vec![0; n]);
    let base: &Resources = if use_requested {
        &node.requested
    } else {
        &node.non_zero_requested
    };
    for (i, spec) in resources.iter().enumerate() {
        let name = spec.name.as_str();
        if pod_requests[i] == 0 && is_scalar_resource_name(name) {
            continue;
        }
        let (alloc, used) = match name {
            names::CPU => (node.allocatable.milli_cpu, base.milli_cpu),
            names::MEMORY => (node.allocatable.memory, base.memory),
            names::EPHEMERAL_STORAGE => (
                node.allocatable.ephemeral_storage,
                node.requested.ephemeral_storage,
            ),
            other => match node.allocatable.scalar.get(other) {
                Some(&a) => (a, node.requested.scalar(other)),
                None => (0, 0),
            },
        };
        if alloc == 0 {
            continue;
        }
        allocatable[i] = alloc;
        allocated[i] = used;
        requested[i] = used.wrapping_add(pod_requests[i]);
    }
    (requested, allocated, allocatable)
}
