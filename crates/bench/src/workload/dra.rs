//! `SchedulingWithResourceClaimTemplate` (scheduler_perf's
//! `dra/performance-config.yaml`): every node publishes a ResourceSlice of
//! 10 devices of `test-driver.cdi.k8s.io` with the attributes of
//! `resourceslice-basic-devices.yaml`; DeviceClass `test-class` selects
//! the driver; `init` claims are allocated (ten to a node, in node order)
//! and reserved for nothing; each measured pod in `test` has its own claim
//! for one device of the class.

use serde_json::{json, Value};

const DRIVER: &str = "test-driver.cdi.k8s.io";
/// Devices per node (`numDevices`).
const DEVICES: usize = 10;
/// `numPCIRoots`.
const PCI_ROOTS: usize = 2;

fn node_name(i: usize) -> String {
    format!("scheduler-perf-dra-{i:05}")
}

fn device(k: usize) -> Value {
    let root = k % PCI_ROOTS;
    json!({
        "name": format!("basic-device-{k}"),
        "attributes": {
            "driver": {"string": "xe"},
            "driverVersion": {"version": "1.2.3"},
            "resource.k8s.io/pciRoot": {"string": root.to_string()},
            "family": {"string": "Arc Pro B-Series"},
            "health": {"string": "Healthy"},
            "model": {"string": "B60"},
            "pciAddress": {"string": format!("0000:0{k}:00.0")},
            "pciId": {"string": "0xe211"},
            "pciRoot": {"string": format!("0{root}")},
            "resource.kubernetes.io/pciBusID": {"string": format!("0000:0{k}:00.0")},
            "resource.kubernetes.io/pciRoot": {"string": format!("pci0000:0{root}")},
            "sriov": {"bool": true},
            "type": {"string": "gpu"},
        },
        "capacity": {"memory": {"value": "24480Mi"}, "millicores": {"value": "1k"}},
    })
}

fn claim(ns: &str, name: &str, allocation: Option<(usize, usize)>) -> Value {
    let mut c = json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{ns}-{name}")},
        "spec": {"devices": {"requests": [
            {"name": "req-0", "exactly": {"deviceClassName": "test-class"}},
        ]}},
    });
    if let Some((node, k)) = allocation {
        let node = node_name(node);
        c["metadata"]["finalizers"] = json!(["resource.kubernetes.io/delete-protection"]);
        c["status"] = json!({"allocation": {
            "devices": {"results": [{
                "request": "req-0", "driver": DRIVER, "pool": node,
                "device": format!("basic-device-{k}"),
            }]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node]},
            ]}]},
        }});
    }
    c
}

/// The cluster file of `nodes` nodes, `init` allocated claims and
/// `measure` pending pods.
pub(super) fn generate(nodes: usize, init: usize, measure: usize) -> Value {
    let mut items = vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "init"}}),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "test"}}),
        json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": "test-class"},
            "spec": {"selectors": [{"cel": {"expression": format!("device.driver == \"{DRIVER}\"")}}]},
        }),
    ];
    for i in 0..nodes {
        let name = node_name(i);
        let res = json!({"pods": "110", "cpu": "4", "memory": "32Gi"});
        items.push(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "node-with-dra": "true"}},
            "spec": {},
            "status": {"capacity": res, "allocatable": res,
                       "conditions": [{"type": "Ready", "status": "True"}], "phase": "Running"},
        }));
        items.push(json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": format!("resourceslice-{i}")},
            "spec": {
                "driver": DRIVER, "nodeName": name,
                "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                "devices": (0..DEVICES).map(device).collect::<Vec<_>>(),
            },
        }));
    }
    for i in 0..init.min(nodes * DEVICES) {
        items.push(claim(
            "init",
            &format!("test-claim-{i}"),
            Some((i / DEVICES, i % DEVICES)),
        ));
    }
    for i in 0..measure {
        let pod = format!("test-dra-{i:05}");
        let claim_name = format!("{pod}-resource");
        items.push(claim("test", &claim_name, None));
        let ts = format!(
            "2025-01-01T{:02}:{:02}:{:02}Z",
            (i / 3600) % 24,
            (i / 60) % 60,
            i % 60
        );
        items.push(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod, "namespace": "test", "uid": format!("uid-{pod}"), "creationTimestamp": ts},
            "spec": {
                "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10.1",
                                "resources": {"claims": [{"name": "resource"}]}}],
                "resourceClaims": [{"name": "resource", "resourceClaimName": claim_name}],
            },
            "status": {"phase": "Pending"},
        }));
    }
    json!({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items})
}
