//! Dynamic Resource Allocation against a genuine control plane
//! (kube-apiserver with resource.k8s.io/v1, kube-controller-manager's
//! resource-claim controller), rkube scheduler and upstream kube-scheduler
//! side by side, two `rkube kubelet --runtime sim` nodes publishing 4 GPUs
//! each as ResourceSlices, driven with the real `kubectl`:
//!
//! - a Deployment whose pods ask for 2 GPUs each through a
//!   ResourceClaimTemplate: every replica runs, each claim is allocated
//!   (devices of the pod's node, none shared) and reserved for its pod;
//! - a pod asking for more GPUs than any node has stays Pending with the
//!   message upstream's scheduler gives an identical pod;
//! - scaling the Deployment to zero frees the devices: a second one that
//!   needs every GPU of the cluster then runs;
//! - a claim left allocated on one node and reserved by nobody, for a pod
//!   that may only run on the other: PostFilter deallocates it (the
//!   FailedScheduling message says so, as upstream's for an identical
//!   pod), and the pod then runs with a new allocation;
//! - a pod asking for `example.com/gpu: 2`, an extended resource a
//!   DeviceClass serves, under each scheduler: each runs, with a claim the
//!   scheduler made for it (`<pod>-extended-resources-…`, the same device
//!   requests from both), allocated, reserved, and named in the pod's
//!   `status.extendedResourceClaimStatus`;
//! - a claim for a device with binding conditions, under each scheduler:
//!   the claim is allocated and reserved but the pod stays unbound until
//!   the "driver" (kubectl) reports the condition true, then it binds.
//!
//! Needs hack/build-k8s; run by hack/test (`--ignored`).

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rkube_testcp::ControlPlane;
use serde_json::Value;

mod common;
use common::live::*;

fn get_json(cp: &ControlPlane, args: &[&str]) -> Value {
    let mut a = vec!["get"];
    a.extend_from_slice(args);
    a.extend_from_slice(&["-o", "json"]);
    serde_json::from_str(&kubectl(cp, &a)).unwrap()
}

fn wait_until<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(300));
    }
}

const GPUS: &str = r#"apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: template}
spec:
  driver: gpu.example.com
  pool: {name: template, generation: 1, resourceSliceCount: 1}
  nodeName: template
  devices:
  - {name: gpu-0, attributes: {model: {string: h100}}, capacity: {memory: {value: 80Gi}}}
  - {name: gpu-1, attributes: {model: {string: h100}}, capacity: {memory: {value: 80Gi}}}
  - {name: gpu-2, attributes: {model: {string: h100}}, capacity: {memory: {value: 80Gi}}}
  - {name: gpu-3, attributes: {model: {string: h100}}, capacity: {memory: {value: 80Gi}}}
"#;

/// A class and a slice on `gpu-00000` of two devices that must be
/// attached (a binding condition) before a pod using them may bind.
const FABRIC: &str = r#"apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: fabric}
spec:
  selectors:
  - cel: {expression: 'device.driver == "fabric.example.com"'}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: gpu-00000-fabric}
spec:
  driver: fabric.example.com
  pool: {name: gpu-00000-fabric, generation: 1, resourceSliceCount: 1}
  nodeName: gpu-00000
  devices:
  - {name: attach-0, bindingConditions: [Attached], bindingFailureConditions: [AttachFailed]}
  - {name: attach-1, bindingConditions: [Attached], bindingFailureConditions: [AttachFailed]}
"#;

/// Two sim nodes (`gpu-00000`, `gpu-00001`) with the 4 GPUs of [`GPUS`].
fn gpu_nodes(cp: &ControlPlane) -> Killed {
    let dir = cp.dir();
    let cfg = dir.join("dra-kubelet.yaml");
    std::fs::write(
        &cfg,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nhealthzPort: 0\n",
    )
    .unwrap();
    let slice = dir.join("dra-gpus.yaml");
    std::fs::write(&slice, GPUS).unwrap();
    let log = std::fs::File::create(dir.join("logs/rkube-kubelet-dra.log")).unwrap();
    Command::new(env!("CARGO_BIN_EXE_rkube"))
        .args(["kubelet", "--runtime=sim", "--nodes=2"])
        .arg("--node-name-pattern=gpu-{}")
        .arg(format!("--kubeconfig={}", cp.kubeconfig().display()))
        .arg(format!("--config={}", cfg.display()))
        .arg(format!("--sim-resource-slice={}", slice.display()))
        .arg(format!("--root-dir={}", dir.join("kubelet-dra").display()))
        .args(["--pod-start-delay=200ms", "--pod-run-time=0"])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map(Killed)
        .expect("start the sim kubelet")
}

fn deployment(name: &str, replicas: usize, gpus: usize) -> String {
    format!(
        r#"apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: {name}-gpus, namespace: ml}}
spec:
  spec:
    devices:
      requests:
      - name: gpus
        exactly: {{deviceClassName: gpu, count: {gpus}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: ml}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      schedulerName: rkube
      automountServiceAccountToken: false
      resourceClaims: [{{name: gpus, resourceClaimTemplateName: {name}-gpus}}]
      containers:
      - name: c
        image: registry.k8s.io/pause:3.10
        resources: {{claims: [{{name: gpus}}]}}
"#
    )
}

/// A pod with its own claim for `gpus` GPUs, under `scheduler`.
fn greedy_pod(name: &str, scheduler: &str, gpus: usize) -> String {
    format!(
        r#"apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {{name: {name}, namespace: ml}}
spec:
  devices:
    requests:
    - name: gpus
      exactly: {{deviceClassName: gpu, count: {gpus}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: ml}}
spec:
  schedulerName: {scheduler}
  automountServiceAccountToken: false
  resourceClaims: [{{name: gpus, resourceClaimName: {name}}}]
  containers:
  - name: c
    image: registry.k8s.io/pause:3.10
    resources: {{claims: [{{name: gpus}}]}}
"#
    )
}

/// Waits for `n` Running pods of `app` and checks their claims: allocated
/// on the pod's node, reserved for the pod, no device twice. Returns the
/// devices by node.
fn running_with_devices(
    cp: &ControlPlane,
    app: &str,
    n: usize,
) -> BTreeMap<String, BTreeSet<String>> {
    let pods = wait_until(
        &format!("{n} Running {app} pods"),
        Duration::from_secs(120),
        || {
            let v = get_json(cp, &["pods", "-n", "ml", "-l", &format!("app={app}")]);
            let items = v["items"].as_array()?.clone();
            let running = items
                .iter()
                .filter(|p| p["status"]["phase"] == "Running")
                .count();
            (items.len() == n && running == n).then_some(items)
        },
    );
    let mut by_node: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for p in &pods {
        let pod = p["metadata"]["name"].as_str().unwrap();
        let node = p["spec"]["nodeName"].as_str().unwrap();
        let statuses = p["status"]["resourceClaimStatuses"].as_array().unwrap();
        let claim_name = statuses[0]["resourceClaimName"].as_str().unwrap();
        let claim = get_json(cp, &["resourceclaims", "-n", "ml", claim_name]);
        let status = &claim["status"];
        let reserved = status["reservedFor"].as_array().unwrap();
        assert_eq!(reserved.len(), 1, "{claim}");
        assert_eq!(reserved[0]["name"], pod, "{claim}");
        assert_eq!(reserved[0]["uid"], p["metadata"]["uid"], "{claim}");
        assert!(
            status["allocation"]["allocationTimestamp"].is_string(),
            "{claim}"
        );
        assert!(
            claim["metadata"]["finalizers"].as_array().is_some_and(|f| f
                .iter()
                .any(|f| f == "resource.kubernetes.io/delete-protection")),
            "{claim}"
        );
        let selector = &status["allocation"]["nodeSelector"]["nodeSelectorTerms"][0];
        assert_eq!(
            selector["matchFields"][0]["values"][0], node,
            "the allocation is usable on the pod's node: {claim}"
        );
        for r in status["allocation"]["devices"]["results"]
            .as_array()
            .unwrap()
        {
            assert_eq!(r["driver"], "gpu.example.com");
            assert_eq!(r["pool"], node, "devices of the pod's node: {claim}");
            let device = format!("{node}/{}", r["device"].as_str().unwrap());
            assert!(
                by_node.entry(node.to_string()).or_default().insert(device),
                "a device allocated twice: {claim}"
            );
        }
    }
    by_node
}

/// A claim for one GPU, allocated to device `device` of node `on` and
/// reserved by nobody, and a pod under `scheduler` that uses it but may
/// only run on node `runs_on`.
fn idle_claim_pod(cp: &ControlPlane, name: &str, scheduler: &str, device: &str) {
    let (on, runs_on) = ("gpu-00000", "gpu-00001");
    apply(
        cp,
        &format!("dra-{name}-claim"),
        &format!(
            "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {{name: {name}, namespace: ml}}\nspec:\n  devices:\n    requests:\n    - name: gpus\n      exactly: {{deviceClassName: gpu}}\n"
        ),
    );
    let status = serde_json::json!({"status": {"allocation": {
        "devices": {"results": [{"request": "gpus", "driver": "gpu.example.com", "pool": on, "device": device}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [on]}]}]},
    }}});
    kubectl(
        cp,
        &[
            "patch",
            "resourceclaim",
            name,
            "-n",
            "ml",
            "--subresource=status",
            "--type=merge",
            "-p",
            &status.to_string(),
        ],
    );
    apply(
        cp,
        &format!("dra-{name}-pod"),
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: ml}}
spec:
  schedulerName: {scheduler}
  automountServiceAccountToken: false
  nodeSelector: {{kubernetes.io/hostname: {runs_on}}}
  resourceClaims: [{{name: gpus, resourceClaimName: {name}}}]
  containers:
  - name: c
    image: registry.k8s.io/pause:3.10
    resources: {{claims: [{{name: gpus}}]}}
"#
        ),
    );
}

/// Waits for `pod` to run with its claim allocated on its node, and
/// returns the message of its FailedScheduling event that reports the
/// deallocation.
fn ran_after_deallocation(cp: &ControlPlane, pod: &str) -> String {
    let node = wait_until(&format!("{pod} Running"), Duration::from_secs(90), || {
        let p = get_json(cp, &["pod", "-n", "ml", pod]);
        (p["status"]["phase"] == "Running")
            .then(|| p["spec"]["nodeName"].as_str().map(str::to_string))?
    });
    assert_eq!(node, "gpu-00001");
    let claim = get_json(cp, &["resourceclaims", "-n", "ml", pod]);
    let status = &claim["status"];
    assert_eq!(
        status["allocation"]["devices"]["results"][0]["pool"], "gpu-00001",
        "allocated anew on the pod's node: {claim}"
    );
    assert_eq!(status["reservedFor"][0]["name"], pod, "{claim}");
    wait_until(
        &format!("{pod}'s FailedScheduling event"),
        Duration::from_secs(30),
        || {
            let v = get_json(
                cp,
                &[
                    "events",
                    "-n",
                    "ml",
                    "--field-selector",
                    &format!("involvedObject.name={pod},reason=FailedScheduling"),
                ],
            );
            v["items"]
                .as_array()?
                .iter()
                .filter_map(|e| e["message"].as_str())
                .find(|m| m.contains("deallocation of ResourceClaim completed"))
                .map(str::to_string)
        },
    )
}

fn unschedulable_message(cp: &ControlPlane, pod: &str) -> String {
    wait_until(
        &format!("{pod}'s PodScheduled=False"),
        Duration::from_secs(60),
        || {
            let p = get_json(cp, &["pod", "-n", "ml", pod]);
            p["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "PodScheduled" && c["status"] == "False")
                .and_then(|c| c["message"].as_str().map(str::to_string))
        },
    )
}

#[test]
#[ignore = "needs hack/build-k8s; run by hack/test"]
fn gpu_pods_get_devices_through_resource_claims() {
    let cp = ControlPlane::start().expect("control plane");
    let _nodes = gpu_nodes(&cp);
    wait_nodes_ready(&cp, 2, Duration::from_secs(60));
    let r = rkube_beside_upstream(&cp, "dra", &[]);
    apply(
        &cp,
        "dra-class",
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: ml}\n---\napiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: gpu}\nspec:\n  selectors:\n  - cel: {expression: 'device.driver == \"gpu.example.com\" && device.capacity[\"gpu.example.com\"].memory.compareTo(quantity(\"40Gi\")) >= 0'}\n",
    );
    wait_until("both nodes' slices", Duration::from_secs(60), || {
        let v = get_json(&cp, &["resourceslices"]);
        (v["items"].as_array()?.len() == 2).then_some(())
    });

    // Three replicas of 2 GPUs on 8 GPUs.
    apply(&cp, "dra-train", &deployment("train", 3, 2));
    let used = running_with_devices(&cp, "train", 3);
    assert_eq!(
        used.values().map(BTreeSet::len).sum::<usize>(),
        6,
        "{used:?}"
    );

    // More GPUs than any node has: Pending, as upstream says.
    apply(&cp, "dra-greedy-rk", &greedy_pod("greedy-rk", "rkube", 5));
    apply(
        &cp,
        "dra-greedy-up",
        &greedy_pod("greedy-up", "default-scheduler", 5),
    );
    let upstream = unschedulable_message(&cp, "greedy-up");
    let rkube = unschedulable_message(&cp, "greedy-rk");
    assert_eq!(
        rkube, upstream,
        "rkube's FailedScheduling message is upstream's"
    );
    assert!(rkube.contains("cannot allocate all claims"), "{rkube}");

    // Freed devices go to the next pods: 4 × 2 needs every GPU.
    kubectl(
        &cp,
        &["scale", "deployment/train", "-n", "ml", "--replicas=0"],
    );
    apply(&cp, "dra-serve", &deployment("serve", 4, 2));
    let used = running_with_devices(&cp, "serve", 4);
    assert_eq!(
        used.values().map(BTreeSet::len).collect::<Vec<_>>(),
        [4, 4],
        "every GPU of both nodes: {used:?}"
    );

    // An idle claim allocated on the wrong node is deallocated, then the
    // pod runs; rkube says so as upstream does.
    kubectl(
        &cp,
        &["scale", "deployment/serve", "-n", "ml", "--replicas=0"],
    );
    wait_until("serve's claims gone", Duration::from_secs(90), || {
        let v = get_json(&cp, &["resourceclaims", "-n", "ml"]);
        let left = v["items"].as_array()?.iter().any(|c| {
            c["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("serve-"))
        });
        (!left).then_some(())
    });
    idle_claim_pod(&cp, "idle-rk", "rkube", "gpu-0");
    idle_claim_pod(&cp, "idle-up", "default-scheduler", "gpu-1");
    let rkube = ran_after_deallocation(&cp, "idle-rk");
    let upstream = ran_after_deallocation(&cp, "idle-up");
    assert_eq!(
        rkube, upstream,
        "rkube's FailedScheduling message is upstream's"
    );

    // Extended resources backed by DRA: the scheduler makes the claim.
    apply(
        &cp,
        "dra-ext-class",
        "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: xgpu}\nspec:\n  extendedResourceName: example.com/gpu\n  selectors:\n  - cel: {expression: 'device.driver == \"gpu.example.com\"'}\n",
    );
    let ext_pod = |name: &str, scheduler: &str| {
        format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: ml}}\nspec:\n  schedulerName: {scheduler}\n  automountServiceAccountToken: false\n  containers:\n  - name: c\n    image: registry.k8s.io/pause:3.10\n    resources: {{limits: {{example.com/gpu: \"2\"}}}}\n")
    };
    apply(&cp, "dra-ext-rk", &ext_pod("ext-rk", "rkube"));
    apply(&cp, "dra-ext-up", &ext_pod("ext-up", "default-scheduler"));
    let mut requests = Vec::new();
    for pod in ["ext-rk", "ext-up"] {
        let claim_name = wait_until(
            &format!("{pod} Running with its extended-resource claim"),
            Duration::from_secs(90),
            || {
                let p = get_json(&cp, &["pod", "-n", "ml", pod]);
                (p["status"]["phase"] == "Running").then_some(())?;
                let st = &p["status"]["extendedResourceClaimStatus"];
                assert_eq!(
                    st["requestMappings"],
                    serde_json::json!([{"containerName": "c", "resourceName": "example.com/gpu", "requestName": "container-0-request-0"}]),
                    "{pod}: {p}"
                );
                st["resourceClaimName"].as_str().map(str::to_string)
            },
        );
        assert!(
            claim_name.starts_with(&format!("{pod}-extended-resources-")),
            "{claim_name}"
        );
        let c = get_json(&cp, &["resourceclaim", "-n", "ml", &claim_name]);
        assert_eq!(
            c["metadata"]["annotations"]["resource.kubernetes.io/extended-resource-claim"],
            "true"
        );
        assert_eq!(c["metadata"]["ownerReferences"][0]["name"], pod);
        let results = c["status"]["allocation"]["devices"]["results"]
            .as_array()
            .unwrap_or_else(|| panic!("{pod}'s claim is allocated: {c}"));
        assert_eq!(results.len(), 2, "{c}");
        assert_eq!(c["status"]["reservedFor"][0]["name"], pod, "{c}");
        requests.push(c["spec"]["devices"]["requests"].clone());
    }
    assert_eq!(
        requests[0], requests[1],
        "the same claim spec as upstream's"
    );

    // Binding conditions: PreBind waits for the device to be attached.
    apply(&cp, "dra-fabric", FABRIC);
    for pod in ["fab-rk", "fab-up"] {
        let scheduler = if pod == "fab-rk" {
            "rkube"
        } else {
            "default-scheduler"
        };
        apply(
            &cp,
            &format!("dra-{pod}"),
            &format!("apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {{name: {pod}, namespace: ml}}\nspec:\n  devices:\n    requests:\n    - {{name: req, exactly: {{deviceClassName: fabric}}}}\n---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {pod}, namespace: ml}}\nspec:\n  schedulerName: {scheduler}\n  automountServiceAccountToken: false\n  resourceClaims: [{{name: f, resourceClaimName: {pod}}}]\n  containers:\n  - name: c\n    image: registry.k8s.io/pause:3.10\n    resources: {{claims: [{{name: f}}]}}\n"),
        );
    }
    let mut devices = BTreeMap::new();
    for pod in ["fab-rk", "fab-up"] {
        let device = wait_until(
            &format!("{pod}'s claim allocated and reserved"),
            Duration::from_secs(60),
            || {
                let c = get_json(&cp, &["resourceclaim", "-n", "ml", pod]);
                (c["status"]["reservedFor"][0]["name"] == pod).then_some(())?;
                let r = &c["status"]["allocation"]["devices"]["results"][0];
                assert_eq!(
                    r["bindingConditions"],
                    serde_json::json!(["Attached"]),
                    "{c}"
                );
                r["device"].as_str().map(str::to_string)
            },
        );
        devices.insert(pod, device);
    }
    // Past one poll (5 s) and still unbound: both wait.
    std::thread::sleep(Duration::from_secs(7));
    for pod in ["fab-rk", "fab-up"] {
        let p = get_json(&cp, &["pod", "-n", "ml", pod]);
        assert!(
            p["spec"]["nodeName"].is_null(),
            "{pod} bound before its device was attached: {p}"
        );
    }
    // Both say why they wait, as upstream's plugin does.
    for pod in ["fab-rk", "fab-up"] {
        let note = wait_until(
            &format!("{pod}'s BindingConditionsPending event"),
            Duration::from_secs(30),
            || {
                let v = get_json(
                    &cp,
                    &[
                        "events",
                        "-n",
                        "ml",
                        "--field-selector",
                        &format!("involvedObject.name={pod},reason=BindingConditionsPending"),
                    ],
                );
                v["items"][0]["message"].as_str().map(str::to_string)
            },
        );
        assert_eq!(
            note,
            "waiting for binding conditions for device on node gpu-00000"
        );
    }
    for (pod, device) in &devices {
        let patch = serde_json::json!({"status": {"devices": [{
            "driver": "fabric.example.com", "pool": "gpu-00000-fabric", "device": device,
            "conditions": [{"type": "Attached", "status": "True", "reason": "Attached",
                "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}]}});
        kubectl(
            &cp,
            &[
                "patch",
                "resourceclaim",
                "-n",
                "ml",
                pod,
                "--subresource=status",
                "--type=merge",
                "-p",
                &patch.to_string(),
            ],
        );
    }
    for pod in ["fab-rk", "fab-up"] {
        wait_until(
            &format!("{pod} bound after attachment"),
            Duration::from_secs(60),
            || {
                let p = get_json(&cp, &["pod", "-n", "ml", pod]);
                (p["spec"]["nodeName"] == "gpu-00000").then_some(())
            },
        );
    }

    // DeviceTaintRules: a rule tainting every GPU keeps a one-GPU pod
    // Pending under both schedulers (two GPUs are free); deleting it lets
    // both pods run.
    apply(
        &cp,
        "dra-rule",
        "apiVersion: resource.k8s.io/v1\nkind: DeviceTaintRule\nmetadata: {name: maintenance}\nspec:\n  deviceSelector: {driver: gpu.example.com}\n  taint: {key: example.com/maintenance, effect: NoSchedule}\n",
    );
    // Nothing here can wait on the schedulers' watches; a quiet API server
    // delivers the rule well within this.
    std::thread::sleep(Duration::from_secs(2));
    apply(&cp, "dra-taint-rk", &greedy_pod("taint-rk", "rkube", 1));
    apply(
        &cp,
        "dra-taint-up",
        &greedy_pod("taint-up", "default-scheduler", 1),
    );
    let upstream = unschedulable_message(&cp, "taint-up");
    let rkube = unschedulable_message(&cp, "taint-rk");
    assert_eq!(
        rkube, upstream,
        "rkube's FailedScheduling message is upstream's"
    );
    assert!(rkube.contains("cannot allocate all claims"), "{rkube}");
    kubectl(&cp, &["delete", "devicetaintrule", "maintenance"]);
    for pod in ["taint-rk", "taint-up"] {
        wait_until(
            &format!("{pod} bound once the rule is gone"),
            Duration::from_secs(60),
            || {
                let p = get_json(&cp, &["pod", "-n", "ml", pod]);
                p["spec"]["nodeName"].as_str().map(|_| ())
            },
        );
    }

    let log = r.log_text();
    assert!(!log.contains("panicked"), "{log}");
    let m = r.metrics().expect("metrics");
    assert!(
        m.contains("extension_point=\"PreBind\",status=\"Success\",profile=\"rkube\""),
        "PreBind ran and is measured: {m}"
    );
}
