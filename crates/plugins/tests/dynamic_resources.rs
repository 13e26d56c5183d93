//! DynamicResources through the framework: PreEnqueue and PreFilter
//! messages, Filter verdicts, and the binding cycle on a snapshot (Reserve
//! makes later pods see the devices taken, PreBind writes the allocation
//! and `reservedFor`). Messages are upstream's (v1.37.2's plugin).

use rkube_framework::schedule::explain;
use rkube_framework::{pre_enqueue_rejection, Framework, Nominator, Outcome, Scheduler, Snapshot};
use rkube_model::load::{build, parse_documents};
use rkube_model::Cluster;

const BASE: &str = r#"
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Node, metadata: {name: n1}, status: {allocatable: {cpu: "4", memory: 8Gi, pods: "10"}}}
- {apiVersion: v1, kind: Node, metadata: {name: n2}, status: {allocatable: {cpu: "4", memory: 8Gi, pods: "10"}}}
- apiVersion: resource.k8s.io/v1
  kind: DeviceClass
  metadata: {name: gpu}
  spec: {selectors: [{cel: {expression: 'device.driver == "gpu.example.com"'}}]}
- apiVersion: resource.k8s.io/v1
  kind: ResourceSlice
  metadata: {name: n1-gpus}
  spec: {driver: gpu.example.com, nodeName: n1, pool: {name: n1, generation: 1, resourceSliceCount: 1}, devices: [{name: gpu-0}, {name: gpu-1}]}
- apiVersion: resource.k8s.io/v1
  kind: ResourceSlice
  metadata: {name: n2-gpus}
  spec: {driver: gpu.example.com, nodeName: n2, pool: {name: n2, generation: 1, resourceSliceCount: 1}, devices: [{name: gpu-0}]}
"#;

fn cluster(extra: &str) -> Cluster {
    let text = format!("{BASE}{extra}");
    build(&parse_documents("t.yaml", &text).unwrap(), &mut |_| {
        Ok(false)
    })
    .unwrap()
}

fn framework() -> Framework {
    let cfg = rkube_config::default_config();
    Framework::new(&cfg.profiles[0], 0, &rkube_plugins::in_tree()).unwrap()
}

fn claim(name: &str, count: u32) -> String {
    format!(
        r#"
- apiVersion: resource.k8s.io/v1
  kind: ResourceClaim
  metadata: {{name: {name}, namespace: d}}
  spec: {{devices: {{requests: [{{name: req, exactly: {{deviceClassName: gpu, count: {count}}}}}]}}}}
"#
    )
}

fn pod(name: &str, claim: &str) -> String {
    format!(
        "- {{apiVersion: v1, kind: Pod, metadata: {{name: {name}, namespace: d, uid: uid-{name}}}, spec: {{containers: [{{name: c}}], resourceClaims: [{{name: g, resourceClaimName: {claim}}}]}}}}\n"
    )
}

#[test]
fn a_host_without_dra_objects_refuses_pods_with_claims() {
    let c = cluster(&pod("p", "missing"));
    let fw = framework();
    let mut snap = Snapshot::from_cluster(&c);
    snap.dra = None;
    let e = explain(&fw, &snap, &c.pods[0]).unwrap();
    assert!(
        e.message.starts_with(&format!(
            "0/2 nodes are available: {}.",
            rkube_plugins::dynamic_resources::NOT_WATCHED
        )),
        "{}",
        e.message
    );
    assert_eq!(
        pre_enqueue_rejection(&fw, &c.pods[0], None).as_deref(),
        Some(rkube_plugins::dynamic_resources::NOT_WATCHED)
    );
}

#[test]
fn missing_claims_keep_the_pod_out_with_upstreams_messages() {
    let c = cluster(&format!(
        "{}- {{apiVersion: v1, kind: Pod, metadata: {{name: t, namespace: d}}, spec: {{containers: [{{name: c}}], resourceClaims: [{{name: g, resourceClaimTemplateName: nope}}]}}}}\n- {{apiVersion: v1, kind: Pod, metadata: {{name: plain, namespace: d}}, spec: {{containers: [{{name: c}}]}}}}\n",
        pod("p", "gpu-claim")
    ));
    let fw = framework();
    let dra = c.dra.clone();
    assert_eq!(
        pre_enqueue_rejection(&fw, &c.pods[0], Some(&dra)).as_deref(),
        Some("could not find ResourceClaim \"d/gpu-claim\"")
    );
    // A template whose claim the controller could not create (no template).
    assert_eq!(
        pre_enqueue_rejection(&fw, &c.pods[1], Some(&dra)).as_deref(),
        Some("pod \"d/t\": ResourceClaim not created yet")
    );
    // Pods without claims: the plugin skips.
    let snap = Snapshot::from_cluster(&c);
    let e = explain(&fw, &snap, &c.pods[2]).unwrap();
    let f = e.nodes[0]
        .filters
        .iter()
        .find(|f| f.plugin == "DynamicResources")
        .unwrap();
    assert_eq!(f.code.as_str(), "Skip");
}

#[test]
fn a_missing_class_is_named() {
    let c = cluster(&format!(
        "{}{}",
        claim("c", 1).replace("deviceClassName: gpu", "deviceClassName: tpu"),
        pod("p", "c")
    ));
    let e = explain(&framework(), &Snapshot::from_cluster(&c), &c.pods[0]).unwrap();
    assert_eq!(
        e.message,
        "0/2 nodes are available: request req: device class tpu does not exist. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    );
}

#[test]
fn claims_are_allocated_reserved_and_seen_by_later_pods() {
    let c = cluster(&format!(
        "{}{}{}{}{}",
        claim("two", 2),
        claim("one", 1),
        pod("a", "two"),
        pod("b", "one"),
        pod("c", "two")
    ));
    let fw = framework();
    let mut snap = Snapshot::from_cluster(&c);
    let mut s = Scheduler::new(0, 100);
    let nominator = Nominator::new();
    // a: two GPUs fit only n1.
    let node = match s.schedule_one(&fw, &mut snap, &c.pods[0], &nominator) {
        Outcome::Scheduled { node, .. } => snap.nodes[node].name().to_string(),
        other => panic!("{other:?}"),
    };
    assert_eq!(node, "n1");
    let dra = snap.dra.clone().unwrap();
    let two = dra.claim("d", "two").unwrap();
    let a = two.allocation.as_ref().expect("allocated by PreBind");
    let devices: Vec<_> = a.devices.iter().map(|d| d.device.as_str()).collect();
    assert_eq!(devices, ["gpu-0", "gpu-1"]);
    assert_eq!(
        a.node_selector.as_ref().unwrap().terms[0].match_fields[0].values,
        ["n1"]
    );
    assert!(two.is_reserved_for("uid-a") && two.protected);
    // b: n1's GPUs are taken now; only n2 has one left.
    match s.schedule_one(&fw, &mut snap, &c.pods[1], &nominator) {
        Outcome::Scheduled { node, .. } => assert_eq!(snap.nodes[node].name(), "n2"),
        other => panic!("{other:?}"),
    }
    // c shares the claim "two": it is allocated on n1, so only n1 fits,
    // and n2 says why.
    let e = explain(&fw, &snap, &c.pods[2]).unwrap();
    let i2 = snap.index_of("n2").unwrap();
    let n2 = e.nodes.iter().find(|n| n.node == i2).unwrap();
    let f = n2
        .filters
        .iter()
        .find(|f| f.plugin == "DynamicResources")
        .unwrap();
    assert_eq!(f.reasons, ["resourceclaim not available on the node"]);
    match s.schedule_one(&fw, &mut snap, &c.pods[2], &nominator) {
        Outcome::Scheduled { node, .. } => assert_eq!(snap.nodes[node].name(), "n1"),
        other => panic!("{other:?}"),
    }
    let two = snap
        .dra
        .as_ref()
        .unwrap()
        .claim("d", "two")
        .unwrap()
        .clone();
    assert!(two.is_reserved_for("uid-a") && two.is_reserved_for("uid-c"));
}

#[test]
fn too_many_devices_cannot_be_allocated_anywhere() {
    let c = cluster(&format!("{}{}", claim("four", 4), pod("p", "four")));
    let e = explain(&framework(), &Snapshot::from_cluster(&c), &c.pods[0]).unwrap();
    assert_eq!(
        e.message,
        "0/2 nodes are available: 2 cannot allocate all claims. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    );
}

/// An allocated claim whose allocation `pod` cannot use, as a cluster file
/// line; `reserved` is its `reservedFor` (YAML flow list).
fn allocated_on(name: &str, node: &str, reserved: &str) -> String {
    format!(
        r#"
- apiVersion: resource.k8s.io/v1
  kind: ResourceClaim
  metadata: {{name: {name}, namespace: d}}
  spec: {{devices: {{requests: [{{name: req, exactly: {{deviceClassName: gpu}}}}]}}}}
  status:
    allocation:
      devices: {{results: [{{request: req, driver: gpu.example.com, pool: {node}, device: gpu-0}}]}}
      nodeSelector: {{nodeSelectorTerms: [{{matchFields: [{{key: metadata.name, operator: In, values: [{node}]}}]}}]}}
    reservedFor: {reserved}
"#
    )
}

/// Upstream's "wrong-topology": a claim allocated for a node the pod
/// cannot use and reserved by nobody is deallocated in PostFilter (before
/// preemption), and the host is told to clear it.
#[test]
fn wrong_topology_claim_is_deallocated_in_post_filter() {
    let c = cluster(&format!(
        "{}{}",
        allocated_on("idle", "gone", "[]"),
        pod("p", "idle")
    ));
    let fw = framework();
    let mut snap = Snapshot::from_cluster(&c);
    let mut s = Scheduler::new(0, 100);
    match s.schedule_one(&fw, &mut snap, &c.pods[0], &Nominator::new()) {
        Outcome::Unschedulable {
            message, diagnosis, ..
        } => {
            assert_eq!(
                message,
                "0/2 nodes are available: 2 resourceclaim not available on the node. deallocation of ResourceClaim completed, preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
            );
            assert_eq!(
                diagnosis.deallocated_claims,
                [("d".to_string(), "idle".to_string())]
            );
        }
        other => panic!("{other:?}"),
    }
    // Once the host cleared the allocation, the pod gets a new one.
    let mut dra = snap.dra.clone().unwrap();
    assert!(std::sync::Arc::make_mut(&mut dra).deallocate("d", "idle"));
    snap.dra = Some(dra);
    match s.schedule_one(&fw, &mut snap, &c.pods[0], &Nominator::new()) {
        Outcome::Scheduled { .. } => {}
        other => panic!("{other:?}"),
    }
}

/// A claim another pod has reserved is not deallocated: PostFilter adds no
/// reason and asks for nothing.
#[test]
fn a_claim_reserved_by_another_pod_is_kept() {
    let c = cluster(&format!(
        "{}{}",
        allocated_on(
            "held",
            "gone",
            "[{resource: pods, name: other, uid: uid-other}]"
        ),
        pod("p", "held")
    ));
    let mut s = Scheduler::new(0, 100);
    let mut snap = Snapshot::from_cluster(&c);
    match s.schedule_one(&framework(), &mut snap, &c.pods[0], &Nominator::new()) {
        Outcome::Unschedulable {
            message, diagnosis, ..
        } => {
            assert_eq!(
                message,
                "0/2 nodes are available: 2 resourceclaim not available on the node. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
            );
            assert!(diagnosis.deallocated_claims.is_empty());
        }
        other => panic!("{other:?}"),
    }
}

/// A pod asking for an extended resource a DeviceClass backs (explicitly
/// or by its implicit name) on nodes without it as allocatable: upstream
/// would allocate devices for it; rkube does not model that yet and says so
/// instead of "Insufficient example.com/gpu". Where every node offers the
/// resource (a device plugin), nothing is delegated and Fit decides.
#[test]
fn dra_backed_extended_resources_are_refused_with_a_reason() {
    let class = "- {apiVersion: resource.k8s.io/v1, kind: DeviceClass, metadata: {name: big}, spec: {extendedResourceName: example.com/gpu}}\n";
    let wants = |res: &str| {
        format!("- {{apiVersion: v1, kind: Pod, metadata: {{name: p, namespace: d}}, spec: {{containers: [{{name: c, resources: {{requests: {{{res}: \"1\"}}, limits: {{{res}: \"1\"}}}}}}]}}}}\n")
    };
    for res in ["example.com/gpu", "deviceclass.resource.kubernetes.io/big"] {
        let c = cluster(&format!("{class}{}", wants(res)));
        let e = explain(&framework(), &Snapshot::from_cluster(&c), &c.pods[0]).unwrap();
        assert_eq!(
            e.message,
            format!("0/2 nodes are available: extended resource {res} is backed by DeviceClass big (DRA extended resources): rkube does not allocate devices for it yet, so it cannot judge this pod. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."),
        );
    }
    // Every node offers it: not delegated, NodeResourcesFit places the pod.
    let mut c = cluster(&format!("{class}{}", wants("example.com/gpu")));
    for n in &mut c.nodes {
        n.allocatable.scalar.insert("example.com/gpu".into(), 2);
    }
    let e = explain(&framework(), &Snapshot::from_cluster(&c), &c.pods[0]).unwrap();
    assert_eq!(e.message, "");
    assert_eq!(e.nodes.iter().filter(|n| n.feasible).count(), 2);
}
