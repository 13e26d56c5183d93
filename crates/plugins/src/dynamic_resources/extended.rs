//! Extended resources backed by DRA (v1.37's `DRAExtendedResource`, GA):
//! a pod that asks for `example.com/gpu: 2` — a name some DeviceClass
//! declares as its `extendedResourceName`, or a class's implicit
//! `deviceclass.resource.kubernetes.io/<class>` — gets, on a node that
//! offers none of it as allocatable (no device plugin), devices allocated
//! through one ResourceClaim the scheduler makes for the pod.
//!
//! - PreFilter: the pod's claim from an earlier cycle (annotation
//!   `resource.kubernetes.io/extended-resource-claim: "true"`, the pod as
//!   controlling owner), else one in memory without requests, named
//!   `<extended-resources>` until PreBind creates it.
//! - Filter: per node, the resources no device plugin there offers become
//!   the claim's requests (one per container and resource, named
//!   `container-<i>-request-<j>`); a node offering a resource that no class
//!   serves neither is refused. A claim left from an earlier cycle with
//!   requests is refused everywhere, and PostFilter deletes it so the pod
//!   starts afresh.
//! - PreBind creates the claim (`<pod>-extended-resources-` and five
//!   characters), writes its allocation and reservation, and records in
//!   the pod's `status.extendedResourceClaimStatus` which container's
//!   request each device request serves.

use std::collections::{BTreeMap, BTreeSet};

use rkube_model::dra::{
    is_dra_extended_resource_name, AllocationMode, ClaimSpec, DeviceRequest, Dra, ExactRequest,
    RequestMapping, ResourceClaim,
};
use rkube_model::objects::Container;
use rkube_model::{Node, Pod};

/// The name of the claim before PreBind creates it, followed by the pod's
/// UID (not a valid object name, so it cannot clash with one).
pub const IN_MEMORY_NAME: &str = "<extended-resources>";

/// Filter's reason for a claim left from an earlier cycle.
pub const ERR_STALE: &str = "cannot schedule extended resource claim";
/// Filter's reason for a resource neither offered nor served by a class.
pub const ERR_CANNOT_FIT: &str = "cannot fit resource";
/// PostFilter's reason after deleting a claim left from an earlier cycle.
pub const DELETED: &str = "deletion of ResourceClaim completed";

/// True for the claim PreBind has yet to create.
pub fn is_in_memory(claim: &ResourceClaim) -> bool {
    claim.name.starts_with(IN_MEMORY_NAME)
}

/// The pod's claim for its extended resources: the one made in an earlier
/// cycle, else a new one in memory.
pub fn claim_for(pod: &Pod, dra: &Dra) -> ResourceClaim {
    let ns = &pod.namespace;
    let existing = dra
        .claims
        .range((ns.clone(), String::new())..)
        .take_while(|(k, _)| k.0 == *ns)
        .map(|(_, c)| c)
        .find(|c| {
            c.extended_resource_claim
                && c.owner_pod_uid.as_deref() == Some(pod.uid.as_str())
                && c.owner_pod_name.as_deref() == Some(pod.name.as_str())
        });
    if let Some(c) = existing {
        return (**c).clone();
    }
    ResourceClaim {
        namespace: pod.namespace.clone(),
        // Unique per pod: the host's cache holds Reserve's allocation under
        // this name until PreBind swaps in the created claim.
        name: format!("{IN_MEMORY_NAME}{}", pod.uid),
        uid: format!("extended-resources:{}", pod.uid),
        generate_name: format!("{}-extended-resources-", pod.name),
        owner_pod_uid: Some(pod.uid.clone()),
        owner_pod_name: Some(pod.name.clone()),
        extended_resource_claim: true,
        ..Default::default()
    }
}

/// What Filter decides for the claim on one node.
pub enum OnNode {
    /// Nothing to allocate here (device plugins serve it all, or the
    /// claim is allocated already).
    Nothing,
    /// The claim as this node needs it, with the request mappings.
    Allocate(Box<ResourceClaim>, Vec<RequestMapping>),
}

/// Filter's part for `claim` on `node` (`Err`: the reason the node is
/// unsuitable).
pub fn on_node(
    claim: &ResourceClaim,
    pod: &Pod,
    node: &Node,
    dra: &Dra,
) -> Result<OnNode, &'static str> {
    if !claim.spec.requests.is_empty() {
        return Err(ERR_STALE);
    }
    let mut needed = BTreeMap::new();
    for (name, &want) in &pod.fit_requests().scalar {
        if want == 0 || !is_dra_extended_resource_name(name) {
            continue;
        }
        let offered = node.allocatable.scalar.get(name);
        let served = dra.extended_resource_class(name).is_some();
        if served && offered.copied().unwrap_or(0) == 0 {
            needed.insert(name.clone(), want);
        } else if offered.is_none() {
            return Err(ERR_CANNOT_FIT);
        }
    }
    if needed.is_empty() || claim.allocation.is_some() {
        return Ok(OnNode::Nothing);
    }
    let (requests, mappings) = requests_and_mappings(pod, &needed, dra);
    let mut c = claim.clone();
    c.spec = ClaimSpec {
        requests,
        ..Default::default()
    };
    Ok(OnNode::Allocate(Box::new(c), mappings))
}

/// A container's whole-number request of `resource` (0: none, or not a
/// whole number).
fn container_request(c: &Container, resource: &str) -> i64 {
    match c.requests.get(resource) {
        Some(q) if q.milli_value() % 1000 == 0 => q.value(),
        _ => 0,
    }
}

/// One container's request for `resource` of class `class`: the devices it
/// needs beyond those of `reusable` (later long-lived containers' requests,
/// which a plain init container, done before they start, may use), and
/// the mappings of the container onto the requests it uses.
fn container_request_and_mappings(
    index: usize,
    c: &Container,
    resource: &str,
    class: &str,
    reusable: &[Option<DeviceRequest>],
) -> (Option<DeviceRequest>, Vec<RequestMapping>) {
    let want = container_request(c, resource);
    if want <= 0 {
        return (None, Vec::new());
    }
    let mapping = |request: &str| RequestMapping {
        container_name: c.name.clone(),
        resource_name: resource.to_string(),
        request_name: request.to_string(),
    };
    let mut mappings = Vec::new();
    let mut have = 0;
    for r in reusable.iter().flatten() {
        have += count(r);
        mappings.push(mapping(&r.name));
        if have >= want {
            return (None, mappings);
        }
    }
    // The resource's position among the container's requests, by name.
    let position = c.requests.keys().position(|k| k == resource).unwrap_or(0);
    let name = format!("container-{index}-request-{position}");
    mappings.push(mapping(&name));
    let request = DeviceRequest {
        name,
        exactly: Some(ExactRequest {
            name: String::new(),
            device_class_name: class.to_string(),
            selectors: Vec::new(),
            mode: AllocationMode::ExactCount(want - have),
            admin_access: false,
            tolerations: Vec::new(),
            capacity: BTreeMap::new(),
        }),
        first_available: Vec::new(),
    };
    (Some(request), mappings)
}

fn count(r: &DeviceRequest) -> i64 {
    match r.exactly.as_ref().map(|e| &e.mode) {
        Some(AllocationMode::ExactCount(n)) => *n,
        _ => 0,
    }
}

/// The claim's device requests for the `needed` resources, and which
/// container request each serves (upstream's `createRequestsAndMappings`):
/// long-lived containers (app containers and sidecars) each get their own
/// request; plain init containers, which run one at a time, first reuse the
/// requests of the long-lived containers after them, and share one request
/// as large as the largest of theirs.
pub fn requests_and_mappings(
    pod: &Pod,
    needed: &BTreeMap<String, i64>,
    dra: &Dra,
) -> (Vec<DeviceRequest>, Vec<RequestMapping>) {
    let containers: Vec<&Container> = pod.init_containers.iter().chain(&pod.containers).collect();
    let n_init = pod.init_containers.len();
    let short_lived = |i: usize| i < n_init && !containers[i].restartable;
    let mut requests = Vec::new();
    let mut mappings = Vec::new();
    for resource in needed.keys() {
        let Some(class) = dra.extended_resource_class(resource) else {
            continue;
        };
        let mut long: Vec<Option<DeviceRequest>> = vec![None; containers.len()];
        let mut long_mappings = Vec::new();
        for (i, c) in containers
            .iter()
            .enumerate()
            .filter(|(i, _)| !short_lived(*i))
        {
            let (r, m) = container_request_and_mappings(i, c, resource, &class.name, &[]);
            long[i] = r;
            long_mappings.extend(m);
        }
        let mut largest: Option<DeviceRequest> = None;
        let mut short_names = BTreeSet::new();
        let mut short_mappings = Vec::new();
        for (i, c) in containers
            .iter()
            .enumerate()
            .filter(|(i, _)| short_lived(*i))
        {
            let (r, m) = container_request_and_mappings(i, c, resource, &class.name, &long[i..]);
            if let Some(r) = r {
                short_names.insert(r.name.clone());
                if largest.as_ref().is_none_or(|l| count(l) < count(&r)) {
                    largest = Some(r);
                }
            }
            short_mappings.extend(m);
        }
        if let Some(l) = &largest {
            if short_names.len() > 1 {
                for m in &mut short_mappings {
                    if short_names.contains(&m.request_name) {
                        m.request_name = l.name.clone();
                    }
                }
            }
        }
        requests.extend(largest);
        requests.extend(long.into_iter().flatten());
        mappings.extend(long_mappings);
        mappings.extend(short_mappings);
    }
    requests.sort_by(|a, b| a.name.cmp(&b.name));
    (requests, mappings)
}

#[cfg(test)]
mod tests {
    //! Upstream's `Test_createRequestsAndMappings_requests` cases with init
    //! containers and sidecars (v1.37.2), and the mappings they imply.

    use std::sync::Arc;

    use rkube_model::dra::DeviceClass;
    use rkube_model::quantity::Quantity;

    use super::*;

    const GPU: &str = "example.com/gpu";
    const INIT: &str = "example.com/gpuinit";

    fn container(name: &str, res: &str, n: i64, restartable: bool) -> Container {
        Container {
            name: name.into(),
            requests: [(res.to_string(), Quantity::from_units(n))].into(),
            restartable,
            ..Default::default()
        }
    }

    fn dra() -> Dra {
        let mut d = Dra::default();
        let classes = Arc::make_mut(&mut d.classes);
        for (class, res) in [("class", GPU), ("classInit", INIT)] {
            classes.insert(
                class.into(),
                DeviceClass {
                    name: class.into(),
                    extended_resource_name: Some(res.into()),
                    ..Default::default()
                },
            );
        }
        d
    }

    /// (request, class, count) and (container, resource, request).
    type Requests = (Vec<(String, String, i64)>, Vec<(String, String, String)>);

    fn requests(pod: &Pod) -> Requests {
        let needed = [(GPU.to_string(), 1), (INIT.to_string(), 2)].into();
        let (r, m) = requests_and_mappings(pod, &needed, &dra());
        (
            r.iter()
                .map(|r| {
                    let e = r.exactly.as_ref().unwrap();
                    (r.name.clone(), e.device_class_name.clone(), count(r))
                })
                .collect(),
            m.into_iter()
                .map(|m| (m.container_name, m.resource_name, m.request_name))
                .collect(),
        )
    }

    fn s(a: &str, b: &str, n: i64) -> (String, String, i64) {
        (a.into(), b.into(), n)
    }

    fn m(c: &str, r: &str, q: &str) -> (String, String, String) {
        (c.into(), r.into(), q.into())
    }

    #[test]
    fn two_init_containers_share_the_largest_request() {
        let pod = Pod {
            init_containers: vec![
                container("i0", INIT, 1, false),
                container("i1", INIT, 2, false),
            ],
            containers: vec![container("c", GPU, 1, false)],
            ..Default::default()
        };
        let (r, mappings) = requests(&pod);
        assert_eq!(
            r,
            [
                s("container-1-request-0", "classInit", 2),
                s("container-2-request-0", "class", 1)
            ]
        );
        assert_eq!(
            mappings,
            [
                m("c", GPU, "container-2-request-0"),
                m("i0", INIT, "container-1-request-0"),
                m("i1", INIT, "container-1-request-0"),
            ]
        );
    }

    #[test]
    fn an_init_container_reuses_a_later_sidecars_devices() {
        let pod = Pod {
            init_containers: vec![
                container("i0", INIT, 1, false),
                container("side", INIT, 1, true),
                container("i2", INIT, 2, false),
            ],
            containers: vec![container("c", GPU, 1, false)],
            ..Default::default()
        };
        let (r, mappings) = requests(&pod);
        assert_eq!(
            r,
            [
                s("container-1-request-0", "classInit", 1),
                s("container-2-request-0", "classInit", 2),
                s("container-3-request-0", "class", 1),
            ]
        );
        assert_eq!(
            mappings,
            [
                m("c", GPU, "container-3-request-0"),
                m("side", INIT, "container-1-request-0"),
                m("i0", INIT, "container-1-request-0"),
                m("i2", INIT, "container-2-request-0"),
            ]
        );
    }

    #[test]
    fn the_newest_class_serves_a_shared_name() {
        let mut d = Dra::default();
        let classes = Arc::make_mut(&mut d.classes);
        for (name, ts) in [
            ("a", "2026-01-01T00:00:00Z"),
            ("b", "2026-02-01T00:00:00Z"),
            ("c", "2026-02-01T00:00:00Z"),
        ] {
            classes.insert(
                name.into(),
                DeviceClass {
                    name: name.into(),
                    extended_resource_name: Some(GPU.into()),
                    creation_timestamp: ts.into(),
                    ..Default::default()
                },
            );
        }
        assert_eq!(d.extended_resource_class(GPU).unwrap().name, "b");
        // "a" came first and lost nothing; "c" lost the tie to "b", listed
        // before it, and has no implicit name either.
        let implicit = |c: &str| {
            d.extended_resource_class(&format!("deviceclass.resource.kubernetes.io/{c}"))
                .map(|c| c.name.clone())
        };
        assert_eq!(implicit("a").as_deref(), Some("a"));
        assert_eq!(implicit("b").as_deref(), Some("b"));
        assert_eq!(implicit("c"), None);
        assert_eq!(implicit("zzz"), None);
    }
}
