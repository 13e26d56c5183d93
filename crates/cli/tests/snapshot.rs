//! `rkube snapshot` against a genuine kube-apiserver (rkube-testcp): a node
//! and pods created with `kubectl apply` come back as a cluster file without
//! managedFields, resourceVersion or last-applied-configuration, and
//! `rkube simulate` reads it and places the pending pod.
//!
//! Needs the binaries from hack/build-k8s, so it is ignored by default;
//! hack/test runs it.

use std::path::Path;
use std::process::{Command, Output};

use rkube_testcp::ControlPlane;
use serde_json::Value;

fn ok(o: Output) -> String {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

fn rkube(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rkube"))
        .args(args)
        .output()
        .expect("run rkube")
}

const OBJECTS: &str = r#"
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {kubernetes.io/hostname: n1}}
---
apiVersion: v1
kind: Namespace
metadata: {name: snap}
---
apiVersion: v1
kind: Pod
metadata: {name: bound, namespace: snap, labels: {app: web}, annotations: {keep: me}}
spec:
  nodeName: n1
  automountServiceAccountToken: false
  tolerations: [{operator: Exists}]
  containers: [{name: c, image: registry.k8s.io/pause:3.10, resources: {requests: {cpu: "1", memory: 1Gi}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: pending, namespace: snap, labels: {app: web}}
spec:
  automountServiceAccountToken: false
  tolerations: [{operator: Exists}]
  containers: [{name: c, image: registry.k8s.io/pause:3.10, resources: {requests: {cpu: "2", memory: 2Gi}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: too-big, namespace: snap}
spec:
  automountServiceAccountToken: false
  tolerations: [{operator: Exists}]
  containers: [{name: c, image: registry.k8s.io/pause:3.10, resources: {requests: {cpu: "8"}}}]
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu}
spec: {selectors: [{cel: {expression: 'device.driver == "gpu.example.com"'}}]}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: n1-gpus}
spec: {driver: gpu.example.com, nodeName: n1, pool: {name: n1, generation: 1, resourceSliceCount: 1}, devices: [{name: gpu-0}, {name: gpu-1}]}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: two-gpus, namespace: snap}
spec: {devices: {requests: [{name: gpus, exactly: {deviceClassName: gpu, count: 2}}]}}
---
apiVersion: v1
kind: Pod
metadata: {name: gpu, namespace: snap}
spec:
  automountServiceAccountToken: false
  tolerations: [{operator: Exists}]
  resourceClaims: [{name: gpus, resourceClaimName: two-gpus}]
  containers: [{name: c, image: registry.k8s.io/pause:3.10, resources: {claims: [{name: gpus}]}}]
"#;

fn items(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    for noise in [
        "managedFields",
        "resourceVersion",
        "kubectl.kubernetes.io/last-applied-configuration",
    ] {
        assert!(!text.contains(noise), "{noise} left in the snapshot");
    }
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["kind"], "List");
    v["items"].as_array().unwrap().clone()
}

#[test]
#[ignore = "needs hack/build-k8s; run by hack/test"]
fn snapshot_of_a_live_cluster_simulates() {
    let cp = ControlPlane::start().expect("control plane starts");
    let objects = cp.dir().join("objects.yaml");
    std::fs::write(&objects, OBJECTS).unwrap();
    ok(cp
        .kubectl(&["apply", "-f", objects.to_str().unwrap()])
        .unwrap());
    ok(cp
        .kubectl(&[
            "patch",
            "node",
            "n1",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"capacity":{"cpu":"4","memory":"8Gi","pods":"110"},"allocatable":{"cpu":"4","memory":"8Gi","pods":"110"}}}"#,
        ])
        .unwrap());

    let file = cp.dir().join("snapshot.json");
    let kubeconfig = cp.kubeconfig().to_str().unwrap().to_string();
    ok(rkube(&[
        "snapshot",
        "--kubeconfig",
        &kubeconfig,
        "-o",
        file.to_str().unwrap(),
        "--qps",
        "50",
    ]));
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "a snapshot can hold secrets: owner-only");
    }
    let items = items(&file);
    let find = |kind: &str, ns: &str, name: &str| {
        items
            .iter()
            .find(|o| {
                o["kind"] == kind
                    && o["metadata"]["name"] == name
                    && o["metadata"]["namespace"].as_str().unwrap_or("") == ns
            })
            .unwrap_or_else(|| panic!("{kind} {ns}/{name} missing from the snapshot"))
    };
    let node = find("Node", "", "n1");
    assert_eq!(node["apiVersion"], "v1");
    assert_eq!(node["status"]["allocatable"]["cpu"], "4");
    assert!(node["metadata"]["uid"].is_string(), "uid is kept");
    let bound = find("Pod", "snap", "bound");
    assert_eq!(bound["spec"]["nodeName"], "n1");
    assert_eq!(bound["metadata"]["annotations"]["keep"], "me");
    find("Pod", "snap", "pending");
    find("Namespace", "", "snap");
    find("Namespace", "", "kube-system");
    find("Service", "default", "kubernetes");
    find("PriorityClass", "", "system-node-critical");
    // DRA objects, as resource.k8s.io/v1.
    assert_eq!(
        find("DeviceClass", "", "gpu")["apiVersion"],
        "resource.k8s.io/v1"
    );
    find("ResourceSlice", "", "n1-gpus");
    find("ResourceClaim", "snap", "two-gpus");

    // The snapshot is a cluster file: the pending pod fits next to the bound one.
    let report: Value = serde_json::from_str(&ok(rkube(&[
        "simulate",
        "--cluster",
        file.to_str().unwrap(),
        "-o",
        "json",
    ])))
    .unwrap();
    let placements = report["placements"].as_array().unwrap();
    let node_of = |pod: &str| {
        placements
            .iter()
            .find(|p| p["pod"] == pod)
            .unwrap_or_else(|| panic!("{pod} not simulated: {report}"))["node"]
            .clone()
    };
    assert_eq!(node_of("snap/pending"), "n1");
    assert!(node_of("snap/too-big").is_null());
    // Its claim is allocated from n1's slice.
    assert_eq!(node_of("snap/gpu"), "n1");
    let n1 = &report["nodes"].as_array().unwrap()[0];
    assert_eq!(n1["requestedMilliCpu"], 3000, "bound 1 CPU + pending 2 CPU");

    // YAML when the file name says so.
    let yaml = cp.dir().join("snapshot.yaml");
    ok(rkube(&[
        "snapshot",
        "--kubeconfig",
        &kubeconfig,
        "-o",
        yaml.to_str().unwrap(),
    ]));
    let text = std::fs::read_to_string(&yaml).unwrap();
    assert!(text.starts_with("apiVersion: v1\nkind: List\n"), "{text}");
    ok(rkube(&["simulate", "--cluster", yaml.to_str().unwrap()]));
}
