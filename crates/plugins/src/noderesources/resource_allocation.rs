//! The shared resource-allocation scorer: per configured resource, the node's
//! allocatable, what is already requested on it, and that plus the pod.

use std::sync::Arc;

use rkube_config::args::ResourceSpec;
use rkube_dra::allocator::AllocatedState;
use rkube_dra::cel::Cache;
use rkube_framework::NodeInfo;
use rkube_model::dra::{is_dra_extended_resource_name, DeviceClass, Dra};
use rkube_model::resources::{is_scalar_resource_name, names};
use rkube_model::{Pod, Resources};

/// The DRA side of scoring (upstream's `draPreScoreState`): for each
/// configured resource a DeviceClass serves, its class; on a node without
/// a device plugin for it, its allocatable is the node's devices of the
/// class and its allocated those held by claims.
pub struct DraScoring {
    classes: Vec<Option<DeviceClass>>,
    dra: Arc<Dra>,
    state: AllocatedState,
    cache: Cache,
}

impl DraScoring {
    /// `None` when no configured resource is served by a class.
    pub fn of(resources: &[ResourceSpec], dra: Option<&Arc<Dra>>) -> Option<DraScoring> {
        let dra = dra?;
        let classes: Vec<Option<DeviceClass>> = resources
            .iter()
            .map(|r| {
                is_dra_extended_resource_name(&r.name)
                    .then(|| dra.extended_resource_class(&r.name).cloned())
                    .flatten()
            })
            .collect();
        if classes.iter().all(Option::is_none) {
            return None;
        }
        Some(DraScoring {
            classes,
            state: AllocatedState::of(dra),
            dra: dra.clone(),
            cache: Cache::default(),
        })
    }

    /// `(allocatable, allocated)` of resource `i` on `node` through DRA
    /// (zeros when no class serves it, or a selector fails, as upstream
    /// logs and ignores).
    fn totals(&self, i: usize, node: &NodeInfo) -> (i64, i64) {
        let Some(Some(class)) = self.classes.get(i) else {
            return (0, 0);
        };
        rkube_dra::totals::class_totals(
            &self.dra.slices,
            class,
            &self.state,
            &self.cache,
            &node.node,
        )
        .unwrap_or((0, 0))
    }
}

/// The pod's request for each configured resource: as NodeResourcesFit's
/// scorer computes it without `use_requested`, as BalancedAllocation's
/// with it ([`rkube_model::requests::scoring_requests`]).
pub fn pod_request_list(pod: &Pod, resources: &[ResourceSpec], use_requested: bool) -> Vec<i64> {
    let r = rkube_model::requests::scoring_requests(pod, !use_requested);
    resources.iter().map(|spec| r.get(&spec.name)).collect()
}

/// Resources a scorer handles without a heap allocation (the default
/// configurations list two).
const INLINE: usize = 8;

/// Runs `f` on a zeroed scratch slice of `n` values: on the stack for up to
/// [`INLINE`] values, on the heap beyond.
pub fn with_scratch<T: Copy + Default, R>(n: usize, f: impl FnOnce(&mut [T]) -> R) -> R {
    if n <= INLINE {
        let mut buf = [T::default(); INLINE];
        f(&mut buf[..n])
    } else {
        f(&mut vec![T::default(); n])
    }
}

/// A configured resource, resolved once when the plugin is built (the
/// per-node code does not compare resource names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResourceKind {
    /// `cpu` (milli-units).
    Cpu,
    /// `memory`.
    Memory,
    /// `ephemeral-storage`.
    EphemeralStorage,
    /// Any other resource, by name.
    Other {
        /// Resource name.
        name: String,
        /// `is_scalar_resource_name(name)`: ignored when the pod does not request it.
        scalar: bool,
    },
}

impl ResourceKind {
    /// The kind of a resource name.
    pub fn of(name: &str) -> Self {
        match name {
            names::CPU => ResourceKind::Cpu,
            names::MEMORY => ResourceKind::Memory,
            names::EPHEMERAL_STORAGE => ResourceKind::EphemeralStorage,
            other => ResourceKind::Other {
                name: other.to_string(),
                scalar: is_scalar_resource_name(other),
            },
        }
    }

    /// The kinds of configured resources, in order.
    pub fn of_specs(resources: &[ResourceSpec]) -> Vec<Self> {
        resources.iter().map(|r| Self::of(&r.name)).collect()
    }
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
    fill_node_vectors(
        node,
        &ResourceKind::of_specs(resources),
        pod_requests,
        use_requested,
        None,
        [&mut requested, &mut allocated, &mut allocatable],
    );
    (requested, allocated, allocatable)
}

/// [`node_vectors`] of resolved resources, without allocating: calls
/// `f(requested-with-pod, allocated, allocatable)` with the vectors in
/// scratch space.
pub fn with_node_vectors<R>(
    node: &NodeInfo,
    resources: &[ResourceKind],
    pod_requests: &[i64],
    use_requested: bool,
    dra: Option<&DraScoring>,
    f: impl FnOnce(&[i64], &[i64], &[i64]) -> R,
) -> R {
    let n = resources.len();
    with_scratch(3 * n, |buf: &mut [i64]| {
        let (requested, rest) = buf.split_at_mut(n);
        let (allocated, allocatable) = rest.split_at_mut(n);
        fill_node_vectors(
            node,
            resources,
            pod_requests,
            use_requested,
            dra,
            [&mut *requested, &mut *allocated, &mut *allocatable],
        );
        f(requested, allocated, allocatable)
    })
}

/// Fills zeroed `[requested, allocated, allocatable]` slices.
fn fill_node_vectors(
    node: &NodeInfo,
    resources: &[ResourceKind],
    pod_requests: &[i64],
    use_requested: bool,
    dra: Option<&DraScoring>,
    [requested, allocated, allocatable]: [&mut [i64]; 3],
) {
    let base: &Resources = if use_requested {
        &node.requested
    } else {
        &node.non_zero_requested
    };
    for (i, kind) in resources.iter().enumerate() {
        let (alloc, used) = match kind {
            ResourceKind::Cpu => (node.allocatable.milli_cpu, base.milli_cpu),
            ResourceKind::Memory => (node.allocatable.memory, base.memory),
            ResourceKind::EphemeralStorage => (
                node.allocatable.ephemeral_storage,
                node.requested.ephemeral_storage,
            ),
            ResourceKind::Other { name, scalar } => {
                if pod_requests[i] == 0 && *scalar {
                    continue;
                }
                match node.allocatable.scalar.get(name) {
                    Some(&a) if a != 0 => (a, node.requested.scalar(name)),
                    _ => dra.map_or((0, 0), |d| d.totals(i, node)),
                }
            }
        };
        if alloc == 0 {
            continue;
        }
        allocatable[i] = alloc;
        allocated[i] = used;
        requested[i] = used.wrapping_add(pod_requests[i]);
    }
}
