//! DynamicResources through the framework: PreEnqueue and PreFilter
//! messages, Filter verdicts, and the binding cycle on a snapshot (Reserve
//! makes later pods see the devices taken, PreBind writes the allocation
//! and `reservedFor`). Messages are upstream's (v1.37.2's plugin).

use rkube_framework::explain;
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

/// One attempt for `pod` on `snap`, which must be rejected: the
/// FailedScheduling message and the diagnosis.
fn rejected(
    s: &mut Scheduler,
    fw: &Framework,
    snap: &mut Snapshot,
    pod: &rkube_model::Pod,
) -> (String, rkube_framework::Diagnosis) {
    match s.schedule_one(fw, snap, pod, &Nominator::new()) {
        Outcome::Unschedulable {
            message, diagnosis, ..
        } => (message, diagnosis),
        other => panic!("{other:?}"),
    }
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
    let (message, diagnosis) = rejected(&mut s, &fw, &mut snap, &c.pods[0]);
    assert_eq!(
        message,
        "0/2 nodes are available: 2 resourceclaim not available on the node. deallocation of ResourceClaim completed, preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    );
    assert_eq!(
        diagnosis.deallocated_claims,
        [("d".to_string(), "idle".to_string())]
    );
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
    let (message, diagnosis) = rejected(&mut s, &framework(), &mut snap, &c.pods[0]);
    assert_eq!(
        message,
        "0/2 nodes are available: 2 resourceclaim not available on the node. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    );
    assert!(diagnosis.deallocated_claims.is_empty());
}

const BIG: &str = "- {apiVersion: resource.k8s.io/v1, kind: DeviceClass, metadata: {name: big}, spec: {extendedResourceName: example.com/gpu, selectors: [{cel: {expression: 'device.driver == \"gpu.example.com\"'}}]}}\n";

fn wants(name: &str, res: &str, n: u32) -> String {
    format!("- {{apiVersion: v1, kind: Pod, metadata: {{name: {name}, namespace: d, uid: uid-{name}}}, spec: {{containers: [{{name: c, resources: {{requests: {{{res}: \"{n}\"}}, limits: {{{res}: \"{n}\"}}}}}}]}}}}\n")
}

/// The claim made for a pod's extended resources, from the snapshot.
fn extended_claim(snap: &Snapshot, pod: &str) -> rkube_model::dra::ResourceClaim {
    let dra = snap.dra.as_ref().unwrap();
    let found: Vec<_> = dra
        .claims
        .values()
        .filter(|c| c.extended_resource_claim && c.owner_pod_name.as_deref() == Some(pod))
        .collect();
    assert_eq!(found.len(), 1, "{pod}: {found:?}");
    found[0].as_ref().clone()
}

/// A pod asking for an extended resource a DeviceClass serves (by its
/// `extendedResourceName` or its implicit name) on nodes that offer none
/// as allocatable: DynamicResources allocates devices through a claim it
/// makes for the pod, and later pods see them taken.
#[test]
fn dra_backed_extended_resources_are_allocated_through_a_claim() {
    for res in ["example.com/gpu", "deviceclass.resource.kubernetes.io/big"] {
        let c = cluster(&format!(
            "{BIG}{}{}",
            wants("a", res, 2),
            wants("b", res, 1)
        ));
        let fw = framework();
        let mut snap = Snapshot::from_cluster(&c);
        let mut s = Scheduler::new(0, 100);
        let nominator = Nominator::new();
        // Two devices: only n1 has them; n2 says why.
        let e = explain(&fw, &snap, &c.pods[0]).unwrap();
        let i2 = snap.index_of("n2").unwrap();
        let n2 = e.nodes.iter().find(|n| n.node == i2).unwrap();
        assert!(!n2.feasible);
        match s.schedule_one(&fw, &mut snap, &c.pods[0], &nominator) {
            Outcome::Scheduled { node, .. } => assert_eq!(snap.nodes[node].name(), "n1"),
            other => panic!("{res}: {other:?}"),
        }
        let claim = extended_claim(&snap, "a");
        assert!(
            claim.name.starts_with("a-extended-resources-"),
            "{}",
            claim.name
        );
        assert_eq!(claim.name.len(), "a-extended-resources-".len() + 5);
        assert_eq!(claim.owner_pod_uid.as_deref(), Some("uid-a"));
        assert_eq!(claim.spec.requests[0].name, "container-0-request-0");
        let a = claim.allocation.as_ref().expect("allocated by PreBind");
        assert_eq!(a.devices.len(), 2);
        assert!(a
            .devices
            .iter()
            .all(|d| d.request == "container-0-request-0"));
        assert!(claim.is_reserved_for("uid-a") && claim.protected);
        // n1's devices are taken: b goes to n2.
        match s.schedule_one(&fw, &mut snap, &c.pods[1], &nominator) {
            Outcome::Scheduled { node, .. } => assert_eq!(snap.nodes[node].name(), "n2"),
            other => panic!("{res}: {other:?}"),
        }
        assert_eq!(
            extended_claim(&snap, "b").allocation.unwrap().devices.len(),
            1
        );
        // No in-memory claim is left behind.
        assert!(snap
            .dra
            .as_ref()
            .unwrap()
            .claims
            .keys()
            .all(|k| !k.1.starts_with('<')));
    }
}

/// Three devices wanted, two at most on a node: upstream's message.
#[test]
fn too_many_dra_backed_devices_fit_nowhere() {
    let c = cluster(&format!("{BIG}{}", wants("p", "example.com/gpu", 3)));
    let e = explain(&framework(), &Snapshot::from_cluster(&c), &c.pods[0]).unwrap();
    assert_eq!(
        e.message,
        "0/2 nodes are available: 2 cannot allocate all claims. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    );
}

/// A node whose device plugin offers the resource is judged by
/// NodeResourcesFit alone (no claim); one without it gets devices.
#[test]
fn a_device_plugin_node_serves_the_resource_itself() {
    let mut c = cluster(&format!("{BIG}{}", wants("p", "example.com/gpu", 2)));
    c.nodes[1]
        .allocatable
        .scalar
        .insert("example.com/gpu".into(), 1);
    let fw = framework();
    let snap = Snapshot::from_cluster(&c);
    let e = explain(&fw, &snap, &c.pods[0]).unwrap();
    let reasons = |node: &str| {
        let i = snap.index_of(node).unwrap();
        let n = e.nodes.iter().find(|n| n.node == i).unwrap();
        (
            n.feasible,
            n.filters
                .iter()
                .flat_map(|f| f.reasons.clone())
                .collect::<Vec<_>>(),
        )
    };
    assert_eq!(reasons("n1"), (true, vec![]));
    // n2 has one from its device plugin: not delegated, Fit says it lacks.
    assert_eq!(
        reasons("n2"),
        (false, vec!["Insufficient example.com/gpu".to_string()])
    );
    // With two from its plugin, n2 fits without a claim.
    c.nodes[1]
        .allocatable
        .scalar
        .insert("example.com/gpu".into(), 2);
    let mut s = Scheduler::new(0, 100);
    let mut snap = Snapshot::from_cluster(&Cluster {
        nodes: vec![c.nodes[1].clone()],
        ..c.clone()
    });
    match s.schedule_one(&fw, &mut snap, &c.pods[0], &Nominator::new()) {
        Outcome::Scheduled { node, .. } => assert_eq!(snap.nodes[node].name(), "n2"),
        other => panic!("{other:?}"),
    }
    assert!(snap
        .dra
        .as_ref()
        .unwrap()
        .claims
        .values()
        .all(|c| !c.extended_resource_claim));
}

/// The claim left from an earlier cycle (it has requests): every node
/// refuses it, PostFilter deletes it, and the pod starts afresh.
#[test]
fn a_stale_extended_resource_claim_is_deleted_in_post_filter() {
    let stale = r#"
- apiVersion: resource.k8s.io/v1
  kind: ResourceClaim
  metadata:
    name: p-extended-resources-old
    namespace: d
    annotations: {resource.kubernetes.io/extended-resource-claim: "true"}
    ownerReferences: [{apiVersion: v1, kind: Pod, name: p, uid: uid-p, controller: true}]
  spec: {devices: {requests: [{name: container-0-request-0, exactly: {deviceClassName: big, count: 1}}]}}
"#;
    let c = cluster(&format!("{BIG}{stale}{}", wants("p", "example.com/gpu", 1)));
    let fw = framework();
    let mut snap = Snapshot::from_cluster(&c);
    let mut s = Scheduler::new(0, 100);
    let (message, diagnosis) = rejected(&mut s, &fw, &mut snap, &c.pods[0]);
    assert_eq!(
        message,
        "0/2 nodes are available: 2 cannot schedule extended resource claim. deletion of ResourceClaim completed, preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    );
    assert_eq!(
        diagnosis.deleted_claims,
        [("d".to_string(), "p-extended-resources-old".to_string())]
    );
}

const FABRIC: &str = r#"
- apiVersion: resource.k8s.io/v1
  kind: DeviceClass
  metadata: {name: fabric}
  spec: {selectors: [{cel: {expression: 'device.driver == "fabric.example.com"'}}]}
- apiVersion: resource.k8s.io/v1
  kind: ResourceSlice
  metadata: {name: n1-fabric}
  spec: {driver: fabric.example.com, nodeName: n1, pool: {name: n1-fabric, generation: 1, resourceSliceCount: 1}, devices: [{name: attach-0, bindingConditions: [Attached], bindingFailureConditions: [AttachFailed]}]}
- apiVersion: resource.k8s.io/v1
  kind: ResourceClaim
  metadata: {name: f, namespace: d}
  spec: {devices: {requests: [{name: req, exactly: {deviceClassName: fabric}}]}}
"#;

/// A device with binding conditions: PreBind writes the allocation, then
/// waits for the driver to report them; nothing does in memory, so the
/// wait ends at `bindingTimeout` with upstream's error and the pod is not
/// bound.
#[test]
fn pre_bind_waits_for_binding_conditions() {
    let c = cluster(&format!("{FABRIC}{}", pod("p", "f")));
    let fw = framework();
    let mut snap = Snapshot::from_cluster(&c);
    let mut s = Scheduler::new(0, 100);
    match s.schedule_one(&fw, &mut snap, &c.pods[0], &Nominator::new()) {
        Outcome::Error(status) => assert_eq!(
            status.message(),
            "running PreBind plugin \"DynamicResources\": device binding timeout: context deadline exceeded"
        ),
        other => panic!("{other:?}"),
    }
}

/// An allocated claim whose device reports a binding failure is unavailable
/// on every node, and PostFilter deallocates it (it is reserved by no one).
#[test]
fn a_failed_binding_condition_makes_the_claim_unavailable() {
    let failed = FABRIC.replace(
        "  spec: {devices: {requests: [{name: req, exactly: {deviceClassName: fabric}}]}}\n",
        r#"  spec: {devices: {requests: [{name: req, exactly: {deviceClassName: fabric}}]}}
  status:
    allocation:
      allocationTimestamp: "2026-01-01T00:00:00Z"
      devices: {results: [{request: req, driver: fabric.example.com, pool: n1-fabric, device: attach-0, bindingConditions: [Attached], bindingFailureConditions: [AttachFailed]}]}
      nodeSelector: {nodeSelectorTerms: [{matchFields: [{key: metadata.name, operator: In, values: [n1]}]}]}
    devices: [{driver: fabric.example.com, pool: n1-fabric, device: attach-0, conditions: [{type: AttachFailed, status: "True", reason: NoPath, message: no fabric path, lastTransitionTime: "2026-01-01T00:00:00Z"}]}]
"#,
    );
    let c = cluster(&format!("{failed}{}", pod("p", "f")));
    let fw = framework();
    let mut snap = Snapshot::from_cluster(&c);
    let mut s = Scheduler::new(0, 100);
    let (message, diagnosis) = rejected(&mut s, &fw, &mut snap, &c.pods[0]);
    assert!(
        message.starts_with("0/2 nodes are available: 2 resourceclaim not available on the node. deallocation of ResourceClaim completed"),
        "{message}"
    );
    assert_eq!(
        diagnosis.deallocated_claims,
        [("d".to_string(), "f".to_string())]
    );
}

/// Scoring a DRA-backed extended resource (a configuration that lists it):
/// on a node without a device plugin, NodeResourcesFit's allocatable is
/// the node's devices of the class and its allocated those claims hold.
/// n1 has 2 GPUs, one taken by a claim; n2 has 1, free. MostAllocated
/// over the resource alone: n1 (1+1)/2 → 100, n2 (0+1)/1 → 100; with two
/// GPUs free on n1 and the pod asking for one, n1 would score 50.
#[test]
fn dra_backed_extended_resources_are_scored_by_their_devices() {
    let cfg = rkube_config::load_str(
        "c.yaml",
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: default-scheduler\n  pluginConfig:\n  - name: NodeResourcesFit\n    args: {scoringStrategy: {type: MostAllocated, resources: [{name: example.com/gpu, weight: 1}]}}\n",
    )
    .unwrap();
    let fw = Framework::new(&cfg.profiles[0], 0, &rkube_plugins::in_tree()).unwrap();
    let held = r#"
- apiVersion: resource.k8s.io/v1
  kind: ResourceClaim
  metadata: {name: held, namespace: d}
  spec: {devices: {requests: [{name: req, exactly: {deviceClassName: big}}]}}
  status: {allocation: {devices: {results: [{request: req, driver: gpu.example.com, pool: n1, device: gpu-0}]}, nodeSelector: {nodeSelectorTerms: [{matchFields: [{key: metadata.name, operator: In, values: [n1]}]}]}}}
"#;
    let fit = |extra: &str| {
        let c = cluster(&format!("{BIG}{extra}{}", wants("p", "example.com/gpu", 1)));
        let snap = Snapshot::from_cluster(&c);
        let e = explain(&fw, &snap, &c.pods[0]).unwrap();
        ["n1", "n2"].map(|name| {
            let i = snap.index_of(name).unwrap();
            let n = e.nodes.iter().find(|n| n.node == i).unwrap();
            n.scores
                .iter()
                .find(|s| s.plugin == "NodeResourcesFit")
                .map(|s| s.raw)
                .unwrap()
        })
    };
    assert_eq!(fit(held), [100, 100]);
    assert_eq!(fit(""), [50, 100]);
}

/// DRADeviceTaintRules (GA, on by default in v1.37): a rule's taint is
/// added to the devices its selector matches, as upstream's ResourceSlice
/// tracker adds it, and keeps them from claims that do not tolerate it.
/// n1 has gpu-0 and gpu-1, n2 has gpu-0; a claim for one device.
#[test]
fn device_taint_rules_taint_the_devices_they_select() {
    let rule = |selector: &str, effect: &str| {
        format!(
            "- {{apiVersion: resource.k8s.io/v1, kind: DeviceTaintRule, metadata: {{name: r}}, spec: {{{selector}taint: {{key: broken, value: 'yes', effect: {effect}}}}}}}\n"
        )
    };
    let feasible = |rules: &str| -> Vec<String> {
        let c = cluster(&format!("{}{rules}{}", claim("one", 1), pod("p", "one")));
        let snap = Snapshot::from_cluster(&c);
        let e = explain(&framework(), &snap, &c.pods[0]).unwrap();
        e.nodes
            .iter()
            .filter(|n| n.feasible)
            .map(|n| snap.nodes[n.node].name().to_string())
            .collect()
    };
    let both = vec!["n1".to_string(), "n2".to_string()];
    let cases = [
        ("no rule", String::new(), both.clone()),
        (
            "no selector matches nothing",
            rule("", "NoSchedule"),
            both.clone(),
        ),
        (
            "the empty selector matches every device",
            rule("deviceSelector: {}, ", "NoSchedule"),
            vec![],
        ),
        (
            "a pool",
            rule("deviceSelector: {pool: n2}, ", "NoSchedule"),
            vec!["n1".into()],
        ),
        (
            "another driver",
            rule(
                "deviceSelector: {driver: other.example.com}, ",
                "NoSchedule",
            ),
            both.clone(),
        ),
        (
            "a device name, in every pool",
            rule("deviceSelector: {device: gpu-0}, ", "NoExecute"),
            vec!["n1".into()],
        ),
        (
            "driver, pool and device: n1 keeps gpu-1",
            rule(
                "deviceSelector: {driver: gpu.example.com, pool: n1, device: gpu-0}, ",
                "NoSchedule",
            ),
            both.clone(),
        ),
        (
            "effect None does not keep a device",
            rule("deviceSelector: {}, ", "None"),
            both.clone(),
        ),
    ];
    for (name, rules, want) in cases {
        assert_eq!(feasible(&rules), want, "{name}");
    }
    // A claim that tolerates the taint gets the device anyway.
    let tolerant = r#"
- apiVersion: resource.k8s.io/v1
  kind: ResourceClaim
  metadata: {name: one, namespace: d}
  spec: {devices: {requests: [{name: req, exactly: {deviceClassName: gpu, count: 1, tolerations: [{key: broken, operator: Exists}]}}]}}
"#;
    let c = cluster(&format!(
        "{tolerant}{}{}",
        rule("deviceSelector: {}, ", "NoSchedule"),
        pod("p", "one")
    ));
    let e = explain(&framework(), &Snapshot::from_cluster(&c), &c.pods[0]).unwrap();
    assert_eq!(e.nodes.iter().filter(|n| n.feasible).count(), 2);
}
