//! How many devices of a class a node has, and how many of them are
//! allocated: NodeResourcesFit's and NodeResourcesBalancedAllocation's
//! allocatable and allocated for an extended resource backed by DRA on a
//! node without a device plugin for it (upstream's
//! `calculateDRAResourceTotals`). Every slice counts, whatever its pool's
//! generation or completeness, as upstream lists them.

use rkube_model::dra::{DeviceClass, NodeScope, ResourceSlice};
use rkube_model::Node;

use crate::allocator::{AllocatedState, DeviceId};
use crate::cel::{Cache, DeviceView};
use crate::pools::scope_matches;

/// `(devices of `class` usable on `node`, those allocated)`; `Err` when a
/// class selector fails to compile or evaluate.
pub fn class_totals(
    slices: &[ResourceSlice],
    class: &DeviceClass,
    state: &AllocatedState,
    cache: &Cache,
    node: &Node,
) -> Result<(i64, i64), String> {
    let (mut capacity, mut allocated) = (0, 0);
    for slice in slices {
        let per_device = matches!(slice.node, NodeScope::PerDevice);
        if !per_device && !scope_matches(&slice.node, node) {
            continue;
        }
        for d in &slice.devices {
            if per_device && !d.node.as_ref().is_some_and(|s| scope_matches(s, node)) {
                continue;
            }
            let view = DeviceView {
                driver: &slice.driver,
                attributes: &d.attributes,
                capacity: &d.capacity,
                allow_multiple_allocations: d.allow_multiple_allocations,
            };
            if !class_selects(class, cache, &view)? {
                continue;
            }
            capacity += 1;
            let id = DeviceId {
                driver: slice.driver.clone(),
                pool: slice.pool.clone(),
                device: d.name.clone(),
            };
            if state.is_allocated(&id) {
                allocated += 1;
            }
        }
    }
    Ok((capacity, allocated))
}

/// Every selector of the class is true for the device.
fn class_selects(
    class: &DeviceClass,
    cache: &Cache,
    view: &DeviceView<'_>,
) -> Result<bool, String> {
    for source in &class.selectors {
        let compiled = cache.get(source);
        let selector = compiled.as_ref().as_ref().map_err(Clone::clone)?;
        if !selector.matches(view)? {
            return Ok(false);
        }
    }
    Ok(true)
}
