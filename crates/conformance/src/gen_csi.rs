//! Random CSI volumes for a generated case without DRA objects: CSIDrivers (with and without
//! `preventPodSchedulingIfMissing`), CSINodes listing some drivers with or
//! without attach limits (and nodes with no CSINode), bound CSI volumes
//! held by running pods, claims not yet provisioned, and the incoming pod's
//! claims, some shared with a running pod.
//!
//! It draws from its own generator, so cases without CSI volumes are the
//! same as before it existed.

use serde_json::{json, Value};

use crate::rng::Rng;

/// The driver whose CSIDriver may ask for `preventPodSchedulingIfMissing`.
/// Only this one may: with two such drivers missing from a node, upstream
/// names whichever its map iteration meets first.
const BLOCK: &str = "block.csi.example.com";
/// A driver that never asks for it.
const FILE: &str = "file.csi.example.com";

fn pv(name: &str, driver: &str, claim: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
        "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"],
            "csi": {"driver": driver, "volumeHandle": format!("handle-{name}")},
            "claimRef": {"namespace": "default", "name": claim}},
        "status": {"phase": "Bound"}})
}

fn bound_claim(name: &str, volume: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": "default", "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
        "spec": {"volumeName": volume, "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        "status": {"phase": "Bound"}})
}

fn claim_volume(i: usize, claim: &str) -> Value {
    json!({"name": format!("csi-{i}"), "persistentVolumeClaim": {"claimName": claim}})
}

fn push_volume(pod: &mut Value, v: Value) {
    let spec = pod["spec"].as_object_mut().expect("pod spec");
    spec.entry("volumes")
        .or_insert_with(|| json!([]))
        .as_array_mut()
        .expect("volumes")
        .push(v);
}

/// Adds CSI objects to about a third of the cases it is given.
pub fn add(seed: u64, items: &mut Vec<Value>, nodes: usize, incoming: &mut Value) {
    let r = &mut Rng::new(seed ^ 0xC51D_5EED_0000_0002);
    if !r.chance(30) {
        return;
    }
    // CSIDrivers: absent, without the field, false or true.
    match r.below(4) {
        0 => {}
        1 => items.push(json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": BLOCK}, "spec": {}})),
        k => items.push(json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": BLOCK}, "spec": {"preventPodSchedulingIfMissing": k == 3}})),
    }
    if r.chance(50) {
        items.push(json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": FILE}, "spec": {"preventPodSchedulingIfMissing": false, "storageCapacity": true}}));
        // Published capacity for the file driver's class: at most one
        // object per node (upstream takes the first its lister returns),
        // some with a maximum volume size, some nodes with none.
        for n in 0..nodes {
            if !r.chance(70) {
                continue;
            }
            let mut c = json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIStorageCapacity",
                "metadata": {"name": format!("file-node-{n}"), "namespace": "kube-system"},
                "storageClassName": FILE,
                "nodeTopology": {"matchLabels": {"kubernetes.io/hostname": format!("node-{n}")}},
                "capacity": *r.pick(&["512Mi", "2Gi", "20Gi", "100Gi"])});
            if r.chance(30) {
                c["maximumVolumeSize"] = json!(*r.pick(&["512Mi", "4Gi"]));
            }
            items.push(c);
        }
    }
    // CSINodes: most nodes have one, listing each driver or not, with or
    // without an attach limit.
    for n in 0..nodes {
        if !r.chance(75) {
            continue;
        }
        let mut drivers = Vec::new();
        for d in [BLOCK, FILE] {
            if !r.chance(60) {
                continue;
            }
            let mut e = json!({"name": d, "nodeID": format!("{d}-node-{n}")});
            if r.chance(60) {
                e["allocatable"] = json!({"count": 1 + r.below(3)});
            }
            drivers.push(e);
        }
        items.push(json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": {"name": format!("node-{n}")}, "spec": {"drivers": drivers}}));
    }
    // A class of each driver, for claims not yet provisioned.
    for d in [BLOCK, FILE] {
        items.push(json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": d},
            "provisioner": d, "volumeBindingMode": "WaitForFirstConsumer"}));
    }
    // Bound volumes, some held by running pods in the default namespace.
    let mut claims = Vec::new();
    for i in 0..(2 + r.below(5)) {
        let driver = if r.chance(60) { BLOCK } else { FILE };
        let (volume, claim) = (format!("csi-pv-{i}"), format!("csi-claim-{i}"));
        items.push(pv(&volume, driver, &claim));
        items.push(bound_claim(&claim, &volume));
        claims.push(claim);
    }
    let holders: Vec<usize> = (0..items.len())
        .filter(|&i| {
            items[i]["kind"] == "Pod"
                && items[i]["spec"]["nodeName"].is_string()
                && items[i]["metadata"]["namespace"] == "default"
        })
        .collect();
    for (k, claim) in claims.iter().enumerate() {
        if holders.is_empty() || !r.chance(60) {
            continue;
        }
        let holder = holders[r.below(holders.len())];
        push_volume(&mut items[holder], claim_volume(k, claim));
    }
    // The incoming pod: one to three claims, bound (perhaps one a running
    // pod holds) or waiting for their first consumer.
    let mut used = Vec::new();
    for k in 0..(1 + r.below(3)) {
        let claim = if r.chance(70) {
            r.pick(&claims).clone()
        } else {
            let name = format!("csi-new-{k}");
            let class = if r.chance(60) { BLOCK } else { FILE };
            items.push(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"storageClassName": class, "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
                "status": {"phase": "Pending"}}));
            name
        };
        if used.contains(&claim) {
            continue;
        }
        push_volume(incoming, claim_volume(k, &claim));
        used.push(claim);
    }
}
