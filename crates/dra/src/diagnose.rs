//! Why claims cannot be allocated on a node, request by request: how many
//! of the node's devices the request's class and selectors match, how many
//! of those are free, and how many of the free ones carry a taint the
//! request does not tolerate. Upstream only says "cannot allocate all
//! claims"; this is rkube's explanation of it. Each request is counted on
//! its own: constraints between requests, shared counters and capacity
//! are not part of the counts.

use rkube_model::dra::{AllocationMode, Dra, ExactRequest, NodeScope, ResourceClaim};
use rkube_model::Node;
use serde::Serialize;

use crate::allocator::{AllocatedState, DeviceId};
use crate::cel::{Cache, DeviceView};
use crate::pools;

/// One request (or subrequest) of one claim on one node.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RequestDiagnosis {
    /// `namespace/name` of the claim.
    pub claim: String,
    /// `request` or `request/subrequest`.
    pub request: String,
    /// The DeviceClass.
    pub class: String,
    /// How many devices it wants (`all` for allocationMode All).
    pub wants: String,
    /// Devices of the node's usable pools.
    pub devices: usize,
    /// Devices the class and the request's selectors match.
    pub matching: usize,
    /// Matching devices no other claim holds.
    pub free: usize,
    /// Free matching devices with a taint the request does not tolerate.
    pub tainted: usize,
    /// A selector's error, if one failed to evaluate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

fn matches(cache: &Cache, selectors: &[String], view: &DeviceView<'_>) -> Result<bool, String> {
    for s in selectors {
        match cache.get(s).as_ref() {
            Ok(sel) => {
                if !sel.matches(view)? {
                    return Ok(false);
                }
            }
            Err(e) => return Err(e.clone()),
        }
    }
    Ok(true)
}

fn one(
    dra: &Dra,
    state: &AllocatedState,
    cache: &Cache,
    node: &Node,
    claim: &ResourceClaim,
    name: String,
    req: &ExactRequest,
) -> RequestDiagnosis {
    let mut d = RequestDiagnosis {
        claim: format!("{}/{}", claim.namespace, claim.name),
        request: name,
        class: req.device_class_name.clone(),
        wants: match req.mode {
            AllocationMode::All => "all".into(),
            AllocationMode::ExactCount(n) => n.to_string(),
        },
        devices: 0,
        matching: 0,
        free: 0,
        tainted: 0,
        error: None,
    };
    let Some(class) = dra.classes.get(&req.device_class_name) else {
        d.error = Some(format!(
            "device class {} does not exist",
            req.device_class_name
        ));
        return d;
    };
    for pool in pools::gather(&dra.slices, node) {
        if pool.incomplete || pool.invalid.is_some() {
            continue;
        }
        for slice in &pool.slices {
            for dev in &slice.devices {
                if slice.node == NodeScope::PerDevice
                    && !dev
                        .node
                        .as_ref()
                        .is_some_and(|s| pools::scope_matches(s, node))
                {
                    continue;
                }
                d.devices += 1;
                let view = DeviceView {
                    driver: &slice.driver,
                    attributes: &dev.attributes,
                    capacity: &dev.capacity,
                    allow_multiple_allocations: dev.allow_multiple_allocations,
                };
                let ok = matches(cache, &class.selectors, &view)
                    .and_then(|ok| Ok(ok && matches(cache, &req.selectors, &view)?));
                match ok {
                    Ok(true) => {}
                    Ok(false) => continue,
                    Err(e) => {
                        d.error.get_or_insert(e);
                        continue;
                    }
                }
                d.matching += 1;
                let id = DeviceId {
                    driver: slice.driver.clone(),
                    pool: slice.pool.clone(),
                    device: dev.name.clone(),
                };
                if !req.admin_access && state.holds(&id) {
                    continue;
                }
                d.free += 1;
                let untolerated = dev.taints.iter().any(|t| {
                    matches!(t.effect.as_str(), "NoSchedule" | "NoExecute")
                        && !req.tolerations.iter().any(|tol| tol.tolerates(t))
                });
                if untolerated {
                    d.tainted += 1;
                }
            }
        }
    }
    d
}

/// Every request of every claim in `claims` on `node`.
pub fn diagnose(
    dra: &Dra,
    state: &AllocatedState,
    cache: &Cache,
    node: &Node,
    claims: &[&ResourceClaim],
) -> Vec<RequestDiagnosis> {
    let mut out = Vec::new();
    for claim in claims {
        for r in &claim.spec.requests {
            if let Some(e) = &r.exactly {
                out.push(one(dra, state, cache, node, claim, r.name.clone(), e));
            }
            for sub in &r.first_available {
                out.push(one(
                    dra,
                    state,
                    cache,
                    node,
                    claim,
                    format!("{}/{}", r.name, sub.name),
                    sub,
                ));
            }
        }
    }
    out
}
