//! Upstream's structured-allocator test table (`allocatortesting`), the
//! cases rkube's incubating-equivalent allocator must agree with, under
//! their upstream names. Inputs are written as cluster-file YAML; expected
//! devices, errors and (where upstream pins them) search-step counts are
//! upstream's.

use rkube_dra::allocator::{AllocatedState, Allocator, Exhausted, Failure};
use rkube_dra::cel::Cache;
use rkube_dra::pools::SliceIndex;
use rkube_model::dra::Allocation;
use rkube_model::load::{build, parse_documents};
use rkube_model::Cluster;

const NODES: &str = r#"
- {apiVersion: v1, kind: Node, metadata: {name: node-1, labels: {region: region-1, planet: earth}}}
- {apiVersion: v1, kind: Node, metadata: {name: node-2, labels: {region: region-2, planet: earth}}}
"#;

const CLASS_A: &str = r#"
- apiVersion: resource.k8s.io/v1
  kind: DeviceClass
  metadata: {name: class-a}
  spec: {selectors: [{cel: {expression: 'device.driver == "driver-a"'}}]}
"#;

/// A claim "old" holding driver-a/pool-1/device-1.
const OLD_ON_DEVICE_1: &str = r#"
- apiVersion: resource.k8s.io/v1
  kind: ResourceClaim
  metadata: {name: old, namespace: default}
  spec: {devices: {requests: [{name: req-0, exactly: {deviceClassName: class-a}}]}}
  status: {allocation: {devices: {results: [{request: req-0, driver: driver-a, pool: pool-1, device: device-1}]}}}
"#;

fn cluster(docs: &str) -> Cluster {
    let text = format!("apiVersion: v1\nkind: List\nitems:\n{NODES}{docs}");
    let objects = parse_documents("test.yaml", &text).expect("parse");
    build(&objects, &mut |_| Ok(false)).expect("build")
}

/// A slice on `node` (or `allNodes` for "") with devices `(name, attrs)`.
fn slice(name: &str, node: &str, pool: &str, devices: &[(&str, &str)]) -> String {
    let scope = if node.is_empty() {
        "allNodes: true".to_string()
    } else {
        format!("nodeName: {node}")
    };
    let devs: Vec<String> = devices
        .iter()
        .map(|(n, attrs)| format!("{{name: {n}, attributes: {{{attrs}}}}}"))
        .collect();
    format!(
        r#"
- apiVersion: resource.k8s.io/v1
  kind: ResourceSlice
  metadata: {{name: {name}}}
  spec: {{driver: driver-a, {scope}, pool: {{name: {pool}, generation: 1, resourceSliceCount: 1}}, devices: [{}]}}
"#,
        devs.join(", ")
    )
}

fn claim(name: &str, devices: &str) -> String {
    format!(
        r#"
- apiVersion: resource.k8s.io/v1
  kind: ResourceClaim
  metadata: {{name: {name}, namespace: default}}
  spec: {{devices: {devices}}}
"#
    )
}

fn run(
    c: &Cluster,
    node: &str,
    claims: &[&str],
) -> (Result<Option<Vec<Allocation>>, Failure>, u64) {
    let state = AllocatedState::of(&c.dra);
    let cache = Cache::default();
    let node = c.nodes.iter().find(|n| n.name == node).unwrap();
    let claims: Vec<_> = claims
        .iter()
        .map(|n| c.dra.claim("default", n).unwrap())
        .collect();
    let a = Allocator::new(&c.dra, &state, &cache);
    let plain = a.allocate_counted(node, &claims);
    // Asked only whether allocations exist, it answers as the search did.
    let exists = plain.0.as_ref().map(|found| found.is_some());
    assert_eq!(
        format!("{:?}", a.feasible(node, &claims)),
        format!("{exists:?}"),
        "feasible"
    );
    // Through a slice index, whose first search gathers the node's pools
    // and whose second may reuse them: the same outcome every time.
    let index = SliceIndex::new(&c.dra.slices);
    let indexed = Allocator::new(&c.dra, &state, &cache).with_index(&index);
    for round in ["first", "second"] {
        let again = indexed.allocate_counted(node, &claims);
        assert_eq!(
            format!("{again:?}"),
            format!("{plain:?}"),
            "{round} indexed search"
        );
    }
    plain
}

/// `request/driver/pool/device` of each result of each claim.
fn picked(r: &Result<Option<Vec<Allocation>>, Failure>) -> Option<Vec<Vec<String>>> {
    r.as_ref().expect("no error").as_ref().map(|all| {
        all.iter()
            .map(|a| {
                a.devices
                    .iter()
                    .map(|d| format!("{}:{}/{}/{}", d.request, d.driver, d.pool, d.device))
                    .collect()
            })
            .collect()
    })
}

fn error(r: &Result<Option<Vec<Allocation>>, Failure>) -> String {
    match r {
        Err(Failure::Error(e)) | Err(Failure::Node(e)) => e.clone(),
        other => panic!("expected an error, got {other:?}"),
    }
}

#[test]
fn simple() {
    let c = cluster(&format!(
        "{CLASS_A}{}{}",
        slice("slice-1", "node-1", "pool-1", &[("device-1", "")]),
        claim(
            "claim-0",
            "{requests: [{name: req-0, exactly: {deviceClassName: class-a}}]}"
        )
    ));
    let (r, _) = run(&c, "node-1", &["claim-0"]);
    assert_eq!(
        picked(&r),
        Some(vec![vec!["req-0:driver-a/pool-1/device-1".to_string()]])
    );
    // A device on a named node: the allocation is pinned to it.
    let sel = r.unwrap().unwrap()[0].node_selector.clone().unwrap();
    assert_eq!(sel.terms[0].match_fields[0].key, "metadata.name");
    assert_eq!(
        sel.terms[0].match_fields[0].values,
        vec!["node-1".to_string()]
    );
}

#[test]
fn other_node_and_not_enough_devices() {
    let c = cluster(&format!(
        "{CLASS_A}{}{}{}",
        slice("slice-1", "node-2", "pool-1", &[("device-1", "")]),
        claim(
            "claim-0",
            "{requests: [{name: req-0, exactly: {deviceClassName: class-a}}]}"
        ),
        claim(
            "claim-1",
            "{requests: [{name: req-0, exactly: {deviceClassName: class-a}}]}"
        )
    ));
    assert_eq!(picked(&run(&c, "node-1", &["claim-0"]).0), None);
    assert!(picked(&run(&c, "node-2", &["claim-0"]).0).is_some());
    // not-enough-suitable-devices: two claims, one device.
    assert_eq!(picked(&run(&c, "node-2", &["claim-0", "claim-1"]).0), None);
}

#[test]
fn unknown_class_is_an_error() {
    let c = cluster(&format!(
        "{}{}",
        slice("slice-1", "node-1", "pool-1", &[("device-1", "")]),
        claim(
            "claim-0",
            "{requests: [{name: req-0, exactly: {deviceClassName: class-a}}]}"
        )
    ));
    let e = error(&run(&c, "node-1", &["claim-0"]).0);
    assert!(
        e.starts_with(
            "claim default/claim-0, request req-0: could not retrieve device class class-a"
        ),
        "{e}"
    );
}

#[test]
fn check_combinations_within_single_request_single_pool_single_slice() {
    let c = cluster(&format!(
        "{CLASS_A}{}{}",
        slice(
            "slice-1",
            "node-1",
            "pool-1",
            &[
                ("device-1", ""),
                ("device-2", ""),
                ("device-3", ""),
                ("device-4", "")
            ]
        ),
        claim(
            "claim-0",
            "{requests: [{name: req-0, exactly: {deviceClassName: class-a, count: 5}}]}"
        )
    ));
    let (r, steps) = run(&c, "node-1", &["claim-0"]);
    assert_eq!(picked(&r), None);
    assert_eq!(steps, 16, "upstream's incubating allocator takes 16 steps");
}

#[test]
fn check_combinations_with_backtracking() {
    let c = cluster(&format!(
        "{CLASS_A}{}{}",
        slice(
            "slice-1",
            "node-1",
            "pool-1",
            &[
                ("device-1", "type: {string: X}"),
                ("device-2", "type: {string: Y}"),
                ("device-3", "type: {string: Y}")
            ]
        ),
        claim(
            "claim-0",
            r#"{requests: [{name: req-1, exactly: {deviceClassName: class-a, count: 2}}, {name: req-2, exactly: {deviceClassName: class-a, selectors: [{cel: {expression: 'device.attributes["driver-a"].type == "X"'}}]}}]}"#
        )
    ));
    let (r, steps) = run(&c, "node-1", &["claim-0"]);
    assert_eq!(
        picked(&r),
        Some(vec![vec![
            "req-1:driver-a/pool-1/device-2".to_string(),
            "req-1:driver-a/pool-1/device-3".to_string(),
            "req-2:driver-a/pool-1/device-1".to_string(),
        ]])
    );
    assert_eq!(steps, 12, "upstream's incubating allocator takes 12 steps");
}

#[test]
fn small_and_large_backtrack_requests() {
    let cap = |s: &str| format!("capacity: {{memory: {{value: {s}}}}}");
    let c = cluster(&format!(
        r#"{CLASS_A}
- apiVersion: resource.k8s.io/v1
  kind: ResourceSlice
  metadata: {{name: slice-1}}
  spec: {{driver: driver-a, nodeName: node-1, pool: {{name: pool-1, generation: 1, resourceSliceCount: 1}}, devices: [{{name: device-2, {}}}, {{name: device-1, {}}}]}}
{}"#,
        cap("2Gi"),
        cap("1Gi"),
        claim(
            "claim-0",
            r#"{requests: [
              {name: req-0, exactly: {deviceClassName: class-a, selectors: [{cel: {expression: 'device.capacity["driver-a"].memory.compareTo(quantity("1Gi")) >= 0'}}]}},
              {name: req-1, exactly: {deviceClassName: class-a, selectors: [{cel: {expression: 'device.capacity["driver-a"].memory.compareTo(quantity("2Gi")) >= 0'}}]}}]}"#
        )
    ));
    let (r, _) = run(&c, "node-1", &["claim-0"]);
    assert_eq!(
        picked(&r),
        Some(vec![vec![
            "req-0:driver-a/pool-1/device-1".to_string(),
            "req-1:driver-a/pool-1/device-2".to_string(),
        ]])
    );
}

#[test]
fn all_devices_and_incomplete_pools() {
    let c = cluster(&format!(
        "{CLASS_A}{}{}",
        slice(
            "slice-1",
            "node-1",
            "pool-1",
            &[("device-1", ""), ("device-2", "")]
        ),
        claim(
            "claim-0",
            "{requests: [{name: req-0, exactly: {deviceClassName: class-a, allocationMode: All}}]}"
        )
    ));
    assert_eq!(
        picked(&run(&c, "node-1", &["claim-0"]).0),
        Some(vec![vec![
            "req-0:driver-a/pool-1/device-1".to_string(),
            "req-0:driver-a/pool-1/device-2".to_string()
        ]])
    );
    // all-devices-of-the-incomplete-pool
    let text = slice("slice-1", "node-1", "pool-1", &[("device-1", "")])
        .replace("resourceSliceCount: 1", "resourceSliceCount: 2");
    let c = cluster(&format!(
        "{CLASS_A}{text}{}",
        claim(
            "claim-0",
            "{requests: [{name: req-0, exactly: {deviceClassName: class-a, allocationMode: All}}]}"
        )
    ));
    assert_eq!(
        error(&run(&c, "node-1", &["claim-0"]).0),
        "claim default/claim-0, request req-0: asks for all devices, but resource pool driver-a/pool-1 is currently being updated"
    );
}

#[test]
fn with_constraint_not_matching_int_attribute_all_devices() {
    let c = cluster(&format!(
        "{CLASS_A}{}{}",
        slice("slice-1", "node-1", "pool-1", &[("device-1", "numa: {int: 1}"), ("device-2", "numa: {int: 2}")]),
        claim(
            "claim-0",
            "{requests: [{name: req-0, exactly: {deviceClassName: class-a, allocationMode: All}}], constraints: [{matchAttribute: driver-a/numa}]}"
        )
    ));
    assert_eq!(
        error(&run(&c, "node-1", &["claim-0"]).0),
        "claim default/claim-0, request req-0: cannot add device driver-a/pool-1/device-2 because a claim constraint would not be satisfied"
    );
}

#[test]
fn prioritized_list_first_unavailable() {
    let c = cluster(&format!(
        r#"{CLASS_A}
- apiVersion: resource.k8s.io/v1
  kind: DeviceClass
  metadata: {{name: class-b}}
  spec: {{selectors: [{{cel: {{expression: 'device.driver == "driver-b"'}}}}]}}
{}{}"#,
        slice("slice-1", "node-1", "pool-1", &[("device-1", "")]),
        claim(
            "claim-0",
            "{requests: [{name: req-0, firstAvailable: [{name: subReq-0, deviceClassName: class-b}, {name: subReq-1, deviceClassName: class-a}]}]}"
        )
    ));
    assert_eq!(
        picked(&run(&c, "node-1", &["claim-0"]).0),
        Some(vec![vec![
            "req-0/subReq-1:driver-a/pool-1/device-1".to_string()
        ]])
    );
}

#[test]
fn tainted_devices_need_tolerations() {
    let tainted = r#"
- apiVersion: resource.k8s.io/v1
  kind: ResourceSlice
  metadata: {name: slice-1}
  spec: {driver: driver-a, nodeName: node-1, pool: {name: pool-1, generation: 1, resourceSliceCount: 1}, devices: [
    {name: device-1, taints: [{key: example.com/taint, value: tainted, effect: NoSchedule}]},
    {name: device-2, taints: [{key: example.com/taint, value: tainted, effect: NoExecute}]}]}
"#;
    let c = cluster(&format!(
        "{CLASS_A}{tainted}{}{}",
        claim("claim-0", "{requests: [{name: req-0, exactly: {deviceClassName: class-a}}]}"),
        claim(
            "claim-1",
            "{requests: [{name: req-0, exactly: {deviceClassName: class-a, tolerations: [{key: example.com/taint, operator: Exists, effect: NoExecute}]}}]}"
        )
    ));
    assert_eq!(picked(&run(&c, "node-1", &["claim-0"]).0), None);
    let (r, _) = run(&c, "node-1", &["claim-1"]);
    assert_eq!(
        picked(&r),
        Some(vec![vec!["req-0:driver-a/pool-1/device-2".to_string()]])
    );
    assert_eq!(
        r.unwrap().unwrap()[0].devices[0].tolerations.len(),
        1,
        "tolerations copied"
    );
}

#[test]
fn partitionable_devices_multiple_devices() {
    let c = cluster(&format!(
        r#"{CLASS_A}
- apiVersion: resource.k8s.io/v1
  kind: ResourceSlice
  metadata: {{name: counters}}
  spec: {{driver: driver-a, nodeName: node-1, pool: {{name: pool-1, generation: 1, resourceSliceCount: 2}}, sharedCounters: [{{name: gpu-0, counters: {{memory: {{value: 8Gi}}}}}}]}}
- apiVersion: resource.k8s.io/v1
  kind: ResourceSlice
  metadata: {{name: devices}}
  spec: {{driver: driver-a, nodeName: node-1, pool: {{name: pool-1, generation: 1, resourceSliceCount: 2}}, devices: [
    {{name: device-1, consumesCounters: [{{counterSet: gpu-0, counters: {{memory: {{value: 4Gi}}}}}}]}},
    {{name: device-2, consumesCounters: [{{counterSet: gpu-0, counters: {{memory: {{value: 6Gi}}}}}}]}},
    {{name: device-3, consumesCounters: [{{counterSet: gpu-0, counters: {{memory: {{value: 4Gi}}}}}}]}}]}}
{}"#,
        claim(
            "claim-0",
            "{requests: [{name: req-0, exactly: {deviceClassName: class-a}}, {name: req-1, exactly: {deviceClassName: class-a}}]}"
        )
    ));
    assert_eq!(
        picked(&run(&c, "node-1", &["claim-0"]).0),
        Some(vec![vec![
            "req-0:driver-a/pool-1/device-1".to_string(),
            "req-1:driver-a/pool-1/device-3".to_string()
        ]])
    );
}

#[test]
fn duplicate_device_names_make_an_invalid_pool() {
    let dup = slice("slice-1", "node-1", "pool-1", &[("device-1", "")])
        .replace("resourceSliceCount: 1", "resourceSliceCount: 2")
        + &slice("slice-2", "node-1", "pool-1", &[("device-1", "")])
            .replace("resourceSliceCount: 1", "resourceSliceCount: 2");
    let c = cluster(&format!(
        "{CLASS_A}{dup}{}",
        claim(
            "claim-0",
            "{requests: [{name: req-0, exactly: {deviceClassName: class-a}}]}"
        )
    ));
    assert_eq!(
        run(&c, "node-1", &["claim-0"]).0,
        Err(Failure::Node(
            "invalid resource pools were encountered".into()
        ))
    );
}

#[test]
fn already_allocated_devices_are_skipped() {
    let c = cluster(&format!(
        "{CLASS_A}{}{}{OLD_ON_DEVICE_1}",
        slice(
            "slice-1",
            "node-1",
            "pool-1",
            &[("device-1", ""), ("device-2", "")]
        ),
        claim(
            "claim-0",
            "{requests: [{name: req-0, exactly: {deviceClassName: class-a}}]}"
        )
    ));
    assert_eq!(
        picked(&run(&c, "node-1", &["claim-0"]).0),
        Some(vec![vec!["req-0:driver-a/pool-1/device-2".to_string()]])
    );
}

#[test]
fn cel_runtime_errors_are_fatal() {
    let c = cluster(&format!(
        "{CLASS_A}{}{}",
        slice("slice-1", "node-1", "pool-1", &[("device-1", "")]),
        claim(
            "claim-0",
            r#"{requests: [{name: req-0, exactly: {deviceClassName: class-a, selectors: [{cel: {expression: 'device.attributes["driver-a"].model == "x"'}}]}}]}"#
        )
    ));
    let e = error(&run(&c, "node-1", &["claim-0"]).0);
    assert!(
        e.starts_with("claim default/claim-0: selector #0 on device driver-a/pool-1/device-1: CEL runtime error: "),
        "{e}"
    );
}

/// A slice that selects nodes by label concerns a node only while the
/// node has the label: pools gathered for the node earlier are not reused
/// after its labels change.
#[test]
fn pools_of_label_selected_slices_follow_the_node_labels() {
    let docs = format!(
        "{CLASS_A}{}",
        r#"
- apiVersion: resource.k8s.io/v1
  kind: ResourceSlice
  metadata: {name: by-label}
  spec: {driver: driver-a, nodeSelector: {nodeSelectorTerms: [{matchExpressions: [{key: region, operator: In, values: [region-1]}]}]}, pool: {name: p, generation: 1, resourceSliceCount: 1}, devices: [{name: dev-1}]}
"#
    );
    let c = cluster(&format!(
        "{docs}{}",
        claim(
            "c",
            "{requests: [{name: r, exactly: {deviceClassName: class-a}}]}"
        )
    ));
    let state = AllocatedState::of(&c.dra);
    let cache = Cache::default();
    let index = SliceIndex::new(&c.dra.slices);
    let a = Allocator::new(&c.dra, &state, &cache).with_index(&index);
    let claims = [c.dra.claim("default", "c").unwrap()];
    let mut node = c.nodes.iter().find(|n| n.name == "node-1").unwrap().clone();
    let before = picked(&a.allocate(&node, &claims));
    assert_eq!(before, Some(vec![vec!["r:driver-a/p/dev-1".to_string()]]));
    node.labels.insert("region".into(), "region-2".into());
    assert_eq!(picked(&a.allocate(&node, &claims)), None);
}

/// A node whose every device is held is remembered per state lineage:
/// the same state and any state grown from it know the node is
/// exhausted; a recounted state, or one before the growth, does not.
#[test]
fn exhausted_nodes_are_known_while_the_state_only_grows() {
    let c = cluster(&format!(
        "{CLASS_A}{}{}{}{OLD_ON_DEVICE_1}",
        slice("slice-1", "node-1", "pool-1", &[("device-1", "")]),
        claim(
            "claim-0",
            "{requests: [{name: req-0, exactly: {deviceClassName: class-a}}]}"
        ),
        claim(
            "admin",
            "{requests: [{name: req-0, exactly: {deviceClassName: class-a, adminAccess: true}}]}"
        )
    ));
    let node = c.nodes.iter().find(|n| n.name == "node-1").unwrap();
    let claims = [c.dra.claim("default", "claim-0").unwrap()];
    assert!(Allocator::needs_free_devices(&claims));
    let admin = [c.dra.claim("default", "admin").unwrap()];
    assert!(!Allocator::needs_free_devices(&admin));

    let cache = Cache::default();
    let index = SliceIndex::new(&c.dra.slices);
    let exhausted = Exhausted::default();
    let before = AllocatedState::of(&c.dra);
    let at = |state: &AllocatedState| {
        Allocator::new(&c.dra, state, &cache)
            .with_index(&index)
            .with_exhausted(&exhausted)
            .known_exhausted(node)
    };
    let a = Allocator::new(&c.dra, &before, &cache)
        .with_index(&index)
        .with_exhausted(&exhausted);
    assert_eq!(a.feasible(node, &claims), Ok(false));
    assert!(!at(&before), "nothing noted yet");
    a.note_if_exhausted(node);
    assert!(at(&before));

    // Grown (an allocation elsewhere added): still exhausted.
    let mut grown = before.clone();
    let other = c.dra.claim("default", "old").unwrap();
    grown.add(other.allocation.as_ref().unwrap());
    assert!(at(&grown));
    // Noted in the grown state: the state before it does not know.
    exhausted_reset_and_note(&c, &grown, &index, &exhausted, node);
    assert!(at(&grown) && !at(&before));
    // A recount starts a new lineage.
    assert!(!at(&AllocatedState::of(&c.dra)));
}

fn exhausted_reset_and_note(
    c: &Cluster,
    state: &AllocatedState,
    index: &SliceIndex,
    exhausted: &Exhausted,
    node: &rkube_model::Node,
) {
    let cache = Cache::default();
    Allocator::new(&c.dra, state, &cache)
        .with_index(index)
        .with_exhausted(exhausted)
        .note_if_exhausted(node);
}

/// A node with a free device is not noted as exhausted.
#[test]
fn a_node_with_a_free_device_is_not_exhausted() {
    let c = cluster(&format!(
        "{CLASS_A}{}",
        slice("slice-1", "node-1", "pool-1", &[("device-1", "")])
    ));
    let node = c.nodes.iter().find(|n| n.name == "node-1").unwrap();
    let cache = Cache::default();
    let index = SliceIndex::new(&c.dra.slices);
    let exhausted = Exhausted::default();
    let state = AllocatedState::of(&c.dra);
    let a = Allocator::new(&c.dra, &state, &cache)
        .with_index(&index)
        .with_exhausted(&exhausted);
    a.note_if_exhausted(node);
    assert!(!a.known_exhausted(node));
}
