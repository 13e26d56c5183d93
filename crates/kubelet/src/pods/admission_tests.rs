use super::*;
use serde_json::{json, Value};

fn node(alloc: Value, labels: Value, taints: Value) -> MNode {
    let n: Node = serde_json::from_value(json!({
        "metadata": {"name": "n1", "labels": labels},
        "spec": {"taints": taints},
        "status": {"allocatable": alloc, "capacity": alloc},
    }))
    .unwrap();
    convert::node(&n).unwrap()
}

fn small_node() -> MNode {
    node(
        json!({"cpu": "2", "memory": "1Gi", "pods": "3", "example.com/gpu": "1"}),
        json!({"disk": "ssd"}),
        json!([]),
    )
}

fn pod(name: &str, spec: Value) -> MPod {
    let mut spec = spec;
    spec["nodeName"] = json!("n1");
    let p: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": name},
        "spec": spec,
    }))
    .unwrap();
    convert::pod(&p, 0, &PriorityClasses::default()).unwrap()
}

fn asking(name: &str, requests: Value) -> MPod {
    pod(
        name,
        json!({"containers": [{"name": "c", "image": "i", "resources": {"requests": requests}}]}),
    )
}

fn first(pod: &MPod, node: &MNode, others: &[&MPod]) -> Option<Rejection> {
    general_filter(pod, node, others, false)
        .first()
        .map(Failure::rejection)
}

#[test]
fn resources_are_checked_against_the_pods_admitted_before() {
    let n = small_node();
    let one_core = asking("a", json!({"cpu": "1", "memory": "256Mi"}));
    assert_eq!(
        first(&asking("b", json!({"cpu": "500m"})), &n, &[&one_core]),
        None
    );
    let r = first(&asking("b", json!({"cpu": "1500m"})), &n, &[&one_core]).unwrap();
    assert_eq!(r.reason, "OutOfcpu");
    assert_eq!(
        r.message,
        "Node didn't have enough resource: cpu, requested: 1500, used: 1000, capacity: 2000"
    );
    let r = first(&asking("b", json!({"memory": "800Mi"})), &n, &[&one_core]).unwrap();
    assert_eq!(r.reason, "OutOfmemory");
    assert_eq!(
        r.message,
        format!(
            "Node didn't have enough resource: memory, requested: {}, used: {}, capacity: {}",
            800 << 20,
            256 << 20,
            1 << 30
        )
    );
    // A pod without requests always fits the resources.
    assert_eq!(first(&asking("b", json!({})), &n, &[&one_core]), None);
}

#[test]
fn too_many_pods_comes_first() {
    let n = small_node();
    let big = asking("a", json!({"cpu": "2"}));
    let others = [&big, &big, &big];
    let failures = general_filter(&asking("b", json!({"cpu": "1"})), &n, &others, false);
    assert_eq!(failures.len(), 2);
    let r = failures[0].rejection();
    assert_eq!(r.reason, "OutOfpods");
    assert_eq!(
        r.message,
        "Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3"
    );
    assert_eq!(failures[1].rejection().reason, "OutOfcpu");
}

#[test]
fn extended_resources_the_node_lacks_are_not_the_kubelets_to_check() {
    let n = small_node();
    assert_eq!(
        first(&asking("b", json!({"example.org/fpga": "4"})), &n, &[]),
        None
    );
    let gpu = asking("a", json!({"example.com/gpu": "1"}));
    let r = first(&asking("b", json!({"example.com/gpu": "1"})), &n, &[&gpu]).unwrap();
    assert_eq!(r.reason, "OutOfexample.com/gpu");
    assert_eq!(
        r.message,
        "Node didn't have enough resource: example.com/gpu, requested: 1, used: 1, capacity: 1"
    );
}

#[test]
fn node_selector_and_required_affinity() {
    let n = small_node();
    let c = json!([{"name": "c", "image": "i"}]);
    let ok = pod(
        "a",
        json!({"containers": c, "nodeSelector": {"disk": "ssd"}}),
    );
    assert_eq!(first(&ok, &n, &[]), None);
    let bad = pod(
        "a",
        json!({"containers": c, "nodeSelector": {"disk": "hdd"}}),
    );
    let r = first(&bad, &n, &[]).unwrap();
    assert_eq!(r.reason, "NodeAffinity");
    assert_eq!(
        r.message,
        "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"
    );
    let by_field = |name: &str| {
        pod(
            "a",
            json!({"containers": c, "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [name]}]}]
            }}}}),
        )
    };
    assert_eq!(first(&by_field("n1"), &n, &[]), None);
    assert_eq!(
        first(&by_field("n2"), &n, &[]).unwrap().reason,
        "NodeAffinity"
    );
}

#[test]
fn host_ports_conflict_by_port_protocol_and_ip() {
    let n = small_node();
    let port = |name: &str, p: i32, proto: &str, ip: &str| {
        let mut port = json!({"containerPort": 80, "hostPort": p, "protocol": proto});
        if !ip.is_empty() {
            port["hostIP"] = json!(ip);
        }
        pod(
            name,
            json!({"containers": [{"name": "c", "image": "i", "ports": [port]}]}),
        )
    };
    let taken = port("a", 8080, "TCP", "10.0.0.1");
    let r = first(&port("b", 8080, "TCP", ""), &n, &[&taken]).unwrap();
    assert_eq!(r.reason, "NodePorts");
    assert_eq!(
        r.message,
        "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"
    );
    assert_eq!(first(&port("b", 8080, "UDP", ""), &n, &[&taken]), None);
    assert_eq!(
        first(&port("b", 8080, "TCP", "10.0.0.2"), &n, &[&taken]),
        None
    );
    assert_eq!(first(&port("b", 8081, "TCP", ""), &n, &[&taken]), None);
}

#[test]
fn only_untolerated_no_execute_taints_refuse_and_not_static_pods() {
    let tainted = |effect: &str| {
        node(
            json!({"cpu": "2", "pods": "10"}),
            json!({}),
            json!([{"key": "k", "value": "v", "effect": effect}]),
        )
    };
    let c = json!([{"name": "c", "image": "i"}]);
    let plain = pod("a", json!({"containers": c}));
    let r = first(&plain, &tainted("NoExecute"), &[]).unwrap();
    assert_eq!(r.reason, "TaintToleration");
    assert_eq!(
        r.message,
        "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate"
    );
    assert_eq!(first(&plain, &tainted("NoSchedule"), &[]), None);
    assert!(general_filter(&plain, &tainted("NoExecute"), &[], true).is_empty());
    let tolerating = pod(
        "a",
        json!({"containers": c, "tolerations": [{"key": "k", "operator": "Equal", "value": "v", "effect": "NoExecute"}]}),
    );
    assert_eq!(first(&tolerating, &tainted("NoExecute"), &[]), None);
}

#[test]
fn a_pod_for_another_node_is_refused() {
    let mut p = asking("a", json!({}));
    p.node_name = "n2".into();
    let r = first(&p, &small_node(), &[]).unwrap();
    assert_eq!(r.reason, "NodeName");
}

#[test]
fn extended_resources_backed_by_dra_are_not_checked_against_the_node() {
    let p: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "ns", "uid": "p"},
        "spec": {"nodeName": "n1", "containers": [
            {"name": "dra", "image": "i", "resources": {
                "requests": {"deviceclass.resource.kubernetes.io/gpu-class": "1", "cpu": "1"},
                "limits": {"deviceclass.resource.kubernetes.io/gpu-class": "1"}}},
            {"name": "plugin", "image": "i", "resources": {
                "requests": {"example.com/gpu": "2"}, "limits": {"example.com/gpu": "2"}}}]},
        "status": {"extendedResourceClaimStatus": {"resourceClaimName": "p-extended-resources-x",
            "requestMappings": [
                {"containerName": "dra", "resourceName": "deviceclass.resource.kubernetes.io/gpu-class", "requestName": "container-0-request-0"},
                {"containerName": "dra", "resourceName": "example.com/gpu", "requestName": "container-0-request-1"}]}},
    }))
    .unwrap();
    let checked = without_dra_extended_resources(&p);
    let c = &checked.spec.as_ref().unwrap().containers;
    let req = |i: usize| c[i].resources.as_ref().unwrap().requests.clone().unwrap();
    assert_eq!(req(0).keys().collect::<Vec<_>>(), ["cpu"]);
    // Mapped for another container only: still the node's to check.
    assert!(req(1).contains_key("example.com/gpu"));
    let m = convert::pod(&checked, 0, &PriorityClasses::default()).unwrap();
    let r = first(&m, &small_node(), &[]).unwrap();
    assert_eq!(r.reason, "OutOfexample.com/gpu");
    // Without the claim's status the pod is what it asks.
    let mut plain = p.clone();
    plain.status = None;
    assert!(matches!(
        without_dra_extended_resources(&plain),
        std::borrow::Cow::Borrowed(_)
    ));
}

#[test]
fn deferred_resizes_are_tried_again_when_a_pod_frees_its_resources() {
    let mut d = Deferred::default();
    d.set("b", true);
    d.set("c", true);
    d.set("c", false);
    // A pod that held nothing frees nothing.
    assert!(d.released("x", false).is_empty());
    assert_eq!(d.released("a", true), ["b"]);
    // Still deferred until its resize fits; gone with its pod.
    assert_eq!(d.released("z", true), ["b"]);
    assert!(d.released("b", true).is_empty());
}

/// Upstream's eviction admission (eviction_manager_test.go's
/// TestAdmitUnderNodeConditions): nothing under no pressure; under memory
/// pressure alone BestEffort pods only, unless they tolerate the taint;
/// under any other pressure every pod; critical pods always admitted.
#[test]
fn pressure_refuses_as_the_eviction_manager() {
    use crate::node::pressure::Pressure;
    let api = |spec: Value, annotations: Value| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "p", "annotations": annotations},
            "spec": spec,
        }))
        .unwrap()
    };
    let best_effort = api(
        json!({"containers": [{"name": "c", "image": "i"}]}),
        json!({}),
    );
    let burstable = api(
        json!({"containers": [{"name": "c", "image": "i", "resources": {"requests": {"memory": "1Mi"}}}]}),
        json!({}),
    );
    let tolerant = api(
        json!({"containers": [{"name": "c", "image": "i"}],
               "tolerations": [{"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"}]}),
        json!({}),
    );
    let critical = api(
        json!({"containers": [{"name": "c", "image": "i"}], "priority": 2000001000,
               "priorityClassName": "system-node-critical"}),
        json!({}),
    );
    let refused = |p: &Pod, pressure: Pressure| {
        let m = convert::pod(p, 0, &PriorityClasses::default()).unwrap();
        under_pressure(p, &m, pressure).map(|r| (r.reason, r.message))
    };
    let memory = Pressure {
        memory: true,
        ..Default::default()
    };
    let disk = Pressure {
        disk: true,
        ..Default::default()
    };
    let both = Pressure {
        memory: true,
        disk: true,
        pid: false,
    };
    assert_eq!(refused(&best_effort, Pressure::default()), None);
    assert_eq!(
        refused(&best_effort, memory),
        Some((
            "Evicted".into(),
            "The node had condition: [MemoryPressure]. ".into()
        ))
    );
    assert_eq!(refused(&burstable, memory), None);
    assert_eq!(refused(&tolerant, memory), None);
    assert_eq!(
        refused(&burstable, disk),
        Some((
            "Evicted".into(),
            "The node had condition: [DiskPressure]. ".into()
        ))
    );
    // A toleration of memory pressure does not help under another one.
    assert_eq!(
        refused(&tolerant, both),
        Some((
            "Evicted".into(),
            "The node had condition: [MemoryPressure DiskPressure]. ".into()
        ))
    );
    assert_eq!(refused(&critical, both), None);
}
