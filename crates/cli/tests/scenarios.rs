//! Operator scenarios from `examples/`: zone spreading, one-per-node
//! anti-affinity, and a claim bound to a zonal volume.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn simulate(example: &str) -> Value {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new(env!("CARGO_BIN_EXE_rkube"))
        .args(["simulate", "--cluster", example, "-o", "json"])
        .current_dir(root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn placements(v: &Value) -> Vec<(String, Option<String>, String)> {
    v["placements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["pod"].as_str().unwrap().to_string(),
                p["node"].as_str().map(str::to_string),
                p["message"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn zone_spread_max_skew_one() {
    let v = simulate("examples/zone-spread/cluster.yaml");
    let p = placements(&v);
    assert_eq!(p.len(), 6, "the Deployment expands into 6 pods");
    let mut per_zone: BTreeMap<char, usize> = BTreeMap::new();
    for (pod, node, _) in &p {
        assert!(pod.starts_with("shop/checkout-"), "{pod}");
        let node = node.as_ref().expect("all placed");
        *per_zone.entry(node.chars().next().unwrap()).or_default() += 1;
    }
    assert_eq!(per_zone, BTreeMap::from([('a', 2), ('b', 2), ('c', 2)]));
}

#[test]
fn anti_affinity_one_per_node() {
    let v = simulate("examples/anti-affinity/cluster.yaml");
    let p = placements(&v);
    let names: Vec<&str> = p.iter().map(|x| x.0.as_str()).collect();
    assert_eq!(
        names,
        [
            "infra/etcd-0",
            "infra/etcd-1",
            "infra/etcd-2",
            "infra/etcd-3"
        ]
    );
    let nodes: std::collections::BTreeSet<_> =
        p[..3].iter().map(|x| x.1.clone().unwrap()).collect();
    assert_eq!(nodes.len(), 3, "one member per node: {p:?}");
    assert_eq!(p[3].1, None);
    assert_eq!(
        p[3].2,
        "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."
    );
}

#[test]
fn claim_bound_to_zonal_volume() {
    let v = simulate("examples/volume-zone/cluster.yaml");
    let p = placements(&v);
    assert_eq!(
        p[0],
        ("shop/db-0".into(), Some("node-b1".into()), String::new())
    );
    // The WaitForFirstConsumer claim binds to the local volume on node-a2.
    assert_eq!(
        p[1],
        ("shop/cache-0".into(), Some("node-a2".into()), String::new())
    );
}

/// `examples/gpu`: the inference replicas land on the only node with free
/// GPUs, each with its own device; the 8-GPU job stays Pending with
/// upstream's message and `explain` names the failing request per node.
#[test]
fn gpu_pod_pending_is_explained_per_request() {
    let v = simulate("examples/gpu/cluster.yaml");
    let p = placements(&v);
    assert_eq!(p.len(), 4, "{p:?}");
    let mut taken = std::collections::BTreeSet::new();
    for (i, placement) in v["placements"].as_array().unwrap()[..3].iter().enumerate() {
        assert!(p[i].0.starts_with("ml/inference-"), "{p:?}");
        assert_eq!(p[i].1.as_deref(), Some("gpu-3"), "{p:?}");
        let devices = placement["devices"].as_array().unwrap();
        assert_eq!(devices.len(), 1, "{placement}");
        assert_eq!(devices[0]["request"], "gpu");
        assert_eq!(devices[0]["pool"], "gpu-3");
        assert!(
            taken.insert(devices[0]["device"].as_str().unwrap().to_string()),
            "a later pod sees earlier pods' devices as taken: {v}"
        );
    }
    assert_eq!(p[3].0, "ml/finetune-gnmrx");
    assert_eq!(p[3].1, None);
    assert_eq!(
        p[3].2,
        "0/4 nodes are available: 4 cannot allocate all claims. preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling."
    );

    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let gpu = root.join("examples/gpu/cluster.yaml");
    let explain = |output: &str| explain_pod(&gpu, "ml/finetune-gnmrx", output);
    let e: Value = serde_json::from_str(&explain("json")).unwrap();
    let per_node: BTreeMap<String, (u64, u64, u64)> = e["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            let d = &n["devices"][0];
            assert_eq!(d["request"], "gpus", "{n}");
            assert_eq!(d["class"], "large-gpu", "{n}");
            assert_eq!(d["wants"], "8", "{n}");
            let num = |k: &str| d[k].as_u64().unwrap();
            (
                n["name"].as_str().unwrap().to_string(),
                (num("devices"), num("matching"), num("free")),
            )
        })
        .collect();
    assert_eq!(
        per_node,
        BTreeMap::from([
            ("cpu-1".into(), (0, 0, 0)),
            ("gpu-1".into(), (8, 8, 0)),
            ("gpu-2".into(), (8, 8, 0)),
            ("gpu-3".into(), (8, 0, 0)),
        ]),
        "gpu-1/2: every large GPU is held by the training workers; gpu-3's GPUs are too small"
    );
    let text = explain("table");
    assert!(text.contains("Devices (why DynamicResources"), "{text}");
    assert!(
        text.contains("gpu-3  no        DynamicResources: cannot allocate all claims"),
        "{text}"
    );
}

/// Writes a cluster file into a fresh directory of its own.
fn write_cluster(tag: &str, text: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("rkube-scenario-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("cluster.yaml");
    std::fs::write(&file, text).unwrap();
    (dir, file)
}

/// `rkube explain` of `pod` in `file`, printed as `output`.
fn explain_pod(file: &std::path::Path, pod: &str, output: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_rkube"))
        .args(["explain", "--cluster"])
        .arg(file)
        .args(["--pod", pod, "-o", output])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A claim asking for all devices while the node's pool is incomplete (two
/// slices announced, one published): upstream's allocator fails with an
/// error rather than a verdict, the cycle stops, and the pod is retried.
/// `explain` reports that error instead of a FailedScheduling message.
#[test]
fn dra_pool_being_updated_is_a_scheduling_error() {
    let cluster = r#"
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Node, metadata: {name: n1}, status: {allocatable: {cpu: "4", memory: 4Gi, pods: "10"}}}
- {apiVersion: v1, kind: Node, metadata: {name: n2}, status: {allocatable: {cpu: "4", memory: 4Gi, pods: "10"}}}
- {apiVersion: resource.k8s.io/v1, kind: DeviceClass, metadata: {name: gpu}, spec: {selectors: [{cel: {expression: 'device.driver == "gpu.example.com"'}}]}}
- apiVersion: resource.k8s.io/v1
  kind: ResourceSlice
  metadata: {name: n1-gpus-0}
  spec:
    driver: gpu.example.com
    nodeName: n1
    pool: {name: n1-gpus, generation: 1, resourceSliceCount: 2}
    devices: [{name: gpu-0}]
- apiVersion: resource.k8s.io/v1
  kind: ResourceClaim
  metadata: {name: all-gpus, namespace: default}
  spec: {devices: {requests: [{name: r0, exactly: {deviceClassName: gpu, allocationMode: All}}]}}
- apiVersion: v1
  kind: Pod
  metadata: {name: p, namespace: default}
  spec:
    containers: [{name: c, image: busybox}]
    resourceClaims: [{name: gpus, resourceClaimName: all-gpus}]
"#;
    let (dir, file) = write_cluster("error", cluster);
    let run = |output: &str| explain_pod(&file, "default/p", output);
    let want = "running \"DynamicResources\" filter plugin: claim default/all-gpus, request r0: asks for all devices, but resource pool gpu.example.com/n1-gpus is currently being updated";
    let e: Value = serde_json::from_str(&run("json")).unwrap();
    assert_eq!(e["error"], want, "{e}");
    assert_eq!(e["message"], "", "{e}");
    assert_eq!(e["selectedNode"], Value::Null, "{e}");
    let n1 = e["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "n1")
        .unwrap();
    let dra = n1["filters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["plugin"] == "DynamicResources")
        .unwrap();
    assert_eq!(dra["code"], "Error", "{n1}");
    let text = run("table");
    assert!(
        text.contains("No node selected: scheduling failed with an error") && text.contains(want),
        "{text}"
    );
    // simulate keeps the pod pending with the error as its message (the
    // condition upstream writes, reason SchedulerError) instead of failing.
    let v = simulate(file.to_str().unwrap());
    assert_eq!(
        placements(&v),
        [("default/p".to_string(), None, want.to_string())]
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A claim left allocated on a node the pod cannot use (too little CPU
/// there) and reserved by nobody: PostFilter deallocates it and the pod is
/// placed on the other node with a fresh allocation.
#[test]
fn idle_claim_on_a_full_node_is_deallocated_and_the_pod_placed_elsewhere() {
    let cluster = r#"
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Node, metadata: {name: n1}, status: {allocatable: {cpu: "1", memory: 4Gi, pods: "10"}}}
- {apiVersion: v1, kind: Node, metadata: {name: n2}, status: {allocatable: {cpu: "4", memory: 4Gi, pods: "10"}}}
- {apiVersion: resource.k8s.io/v1, kind: DeviceClass, metadata: {name: gpu}, spec: {selectors: [{cel: {expression: 'device.driver == "gpu.example.com"'}}]}}
- {apiVersion: resource.k8s.io/v1, kind: ResourceSlice, metadata: {name: n1-gpus}, spec: {driver: gpu.example.com, nodeName: n1, pool: {name: n1, generation: 1, resourceSliceCount: 1}, devices: [{name: gpu-0}]}}
- {apiVersion: resource.k8s.io/v1, kind: ResourceSlice, metadata: {name: n2-gpus}, spec: {driver: gpu.example.com, nodeName: n2, pool: {name: n2, generation: 1, resourceSliceCount: 1}, devices: [{name: gpu-0}]}}
- apiVersion: resource.k8s.io/v1
  kind: ResourceClaim
  metadata: {name: idle, namespace: default}
  spec: {devices: {requests: [{name: gpu, exactly: {deviceClassName: gpu}}]}}
  status:
    allocation:
      devices: {results: [{request: gpu, driver: gpu.example.com, pool: n1, device: gpu-0}]}
      nodeSelector: {nodeSelectorTerms: [{matchFields: [{key: metadata.name, operator: In, values: [n1]}]}]}
- apiVersion: v1
  kind: Pod
  metadata: {name: p, namespace: default}
  spec:
    containers: [{name: c, image: busybox, resources: {requests: {cpu: "2"}}}]
    resourceClaims: [{name: gpu, resourceClaimName: idle}]
"#;
    let (dir, file) = write_cluster("idle", cluster);
    let v = simulate(file.to_str().unwrap());
    assert_eq!(
        placements(&v),
        [(
            "default/p".to_string(),
            Some("n2".to_string()),
            String::new()
        )]
    );
    let devices = v["placements"][0]["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 1, "{v}");
    assert_eq!(devices[0]["pool"], "n2", "{v}");
    // explain shows the first cycle: both nodes refuse, the claim is freed.
    let e: Value = serde_json::from_str(&explain_pod(&file, "default/p", "json")).unwrap();
    assert_eq!(
        e["message"],
        "0/2 nodes are available: 1 Insufficient cpu, 1 resourceclaim not available on the node. deallocation of ResourceClaim completed, preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.",
        "{e}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// Extended resources backed by DRA: pods asking for `example.com/gpu`
/// (a DeviceClass's `extendedResourceName`) on nodes without a device
/// plugin get devices through the claim the scheduler makes for each pod
/// (`<pod>-extended-resources-…`); the third pod finds both nodes' devices
/// taken and stays Pending with upstream's reason.
#[test]
fn dra_backed_extended_resources_in_simulate() {
    let (dir, file) = write_cluster(
        "ext-dra",
        r#"
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Node, metadata: {name: n1}, status: {allocatable: {cpu: "8", memory: 16Gi, pods: "10"}}}
- {apiVersion: v1, kind: Node, metadata: {name: n2}, status: {allocatable: {cpu: "8", memory: 16Gi, pods: "10"}}}
- apiVersion: resource.k8s.io/v1
  kind: DeviceClass
  metadata: {name: gpu}
  spec: {extendedResourceName: example.com/gpu, selectors: [{cel: {expression: 'device.driver == "gpu.example.com"'}}]}
- apiVersion: resource.k8s.io/v1
  kind: ResourceSlice
  metadata: {name: n1}
  spec: {driver: gpu.example.com, nodeName: n1, pool: {name: n1, generation: 1, resourceSliceCount: 1}, devices: [{name: gpu-0}, {name: gpu-1}]}
- apiVersion: resource.k8s.io/v1
  kind: ResourceSlice
  metadata: {name: n2}
  spec: {driver: gpu.example.com, nodeName: n2, pool: {name: n2, generation: 1, resourceSliceCount: 1}, devices: [{name: gpu-0}, {name: gpu-1}]}
- {apiVersion: v1, kind: Pod, metadata: {name: a, namespace: ml}, spec: {containers: [{name: c, resources: {limits: {example.com/gpu: "2"}}}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: b, namespace: ml}, spec: {containers: [{name: c, resources: {limits: {example.com/gpu: "2"}}}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: c, namespace: ml}, spec: {containers: [{name: c, resources: {limits: {example.com/gpu: "1"}}}]}}
"#,
    );
    let v = simulate(file.to_str().unwrap());
    let p = placements(&v);
    let placed: Vec<_> = p
        .iter()
        .map(|(pod, node, _)| (pod.as_str(), node.as_deref()))
        .collect();
    assert_eq!(placed[2], ("ml/c", None), "{p:?}");
    let mut nodes: Vec<_> = placed[..2].iter().map(|(_, n)| n.unwrap()).collect();
    nodes.sort();
    assert_eq!(nodes, ["n1", "n2"], "{p:?}");
    assert_eq!(
        p[2].2,
        "0/2 nodes are available: 2 cannot allocate all claims. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    );
    for (i, pod) in ["a", "b"].iter().enumerate() {
        let devices = v["placements"][i]["devices"].as_array().unwrap();
        assert_eq!(devices.len(), 2, "{v}");
        for d in devices {
            let claim = d["claim"].as_str().unwrap();
            assert!(
                claim.starts_with(&format!("ml/{pod}-extended-resources-")),
                "{claim}"
            );
            assert_eq!(d["request"], "container-0-request-0");
            assert_eq!(d["pool"], placed[i].1.unwrap());
        }
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// A claim asking for part of a device's consumable capacity by the name
/// the slice gives it (`memory`), as upstream's `[DRA]` "must allow
/// multiple allocations and consume capacity" does: the device fits, as
/// the oracle (upstream's scheduler) finds the node feasible. rkube keeps
/// a device's capacity names qualified with its driver's domain; a claim's
/// are compared with the names the slice wrote, as upstream's.
#[test]
fn a_claim_consumes_part_of_a_shared_device_by_its_capacity_name() {
    let cluster = r#"apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Namespace, metadata: {name: t}}
- {apiVersion: v1, kind: Node, metadata: {name: vm, labels: {kubernetes.io/hostname: vm}}, status: {allocatable: {cpu: "2", memory: 20Gi, pods: "110"}}}
- apiVersion: resource.k8s.io/v1
  kind: DeviceClass
  metadata: {name: cls}
  spec:
    selectors:
    - cel: {expression: 'device.driver == "d.k8s.io"'}
- apiVersion: resource.k8s.io/v1
  kind: ResourceSlice
  metadata: {name: s}
  spec:
    driver: d.k8s.io
    nodeName: vm
    pool: {name: vm, generation: 1, resourceSliceCount: 1}
    devices:
    - name: consumable-device-1
      allowMultipleAllocations: true
      capacity:
        memory:
          value: 8Gi
          requestPolicy:
            default: 1Gi
            validRange: {min: 1Gi}
- apiVersion: resource.k8s.io/v1
  kind: ResourceClaim
  metadata: {name: c1, namespace: t}
  spec:
    devices:
      requests:
      - name: my-request
        exactly:
          deviceClassName: cls
          capacity: {requests: {memory: 4Gi}}
- apiVersion: v1
  kind: Pod
  metadata: {name: p1, namespace: t}
  spec:
    resourceClaims: [{name: resource-claim, resourceClaimName: c1}]
    containers: [{name: c, image: i, resources: {claims: [{name: resource-claim}]}}]
"#;
    let (dir, file) = write_cluster("consumable", cluster);
    let e: Value = serde_json::from_str(&explain_pod(&file, "t/p1", "json")).unwrap();
    assert_eq!(e["selectedNode"], "vm", "{e}");
    // Named with the driver's domain, which the slice did not use: no
    // device has that capacity (the oracle agrees).
    let qualified = cluster.replace("{memory: 4Gi}", "{d.k8s.io/memory: 4Gi}");
    let (dir2, file2) = write_cluster("consumable-qualified", &qualified);
    let e: Value = serde_json::from_str(&explain_pod(&file2, "t/p1", "json")).unwrap();
    assert_eq!(e["selectedNode"], Value::Null, "{e}");
    assert_eq!(
        e["message"],
        "0/1 nodes are available: 1 cannot allocate all claims. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.",
        "{e}"
    );
    let _ = std::fs::remove_dir_all(dir);
    let _ = std::fs::remove_dir_all(dir2);
}
