//! Volume plugins (VolumeBinding, VolumeZone, VolumeRestrictions,
//! NodeVolumeLimits) through the default profile, with upstream's reasons.

use rkube_framework::explain;
use rkube_framework::{Framework, Nominator, Outcome, Scheduler, Snapshot};
use rkube_model::load::{build, parse_documents};
use rkube_model::Cluster;

fn cluster(yaml: &str) -> Cluster {
    let objs = parse_documents("test.yaml", yaml).unwrap();
    build(&objs, &mut |_| Ok(false)).unwrap()
}

fn framework() -> Framework {
    let cfg = rkube_config::default_config();
    Framework::new(&cfg.profiles[0], 0, &rkube_plugins::in_tree()).unwrap()
}

/// One rejecting filter verdict: (node, plugin, code, reasons).
type Verdict = (String, String, String, Vec<String>);

/// Every non-success filter verdict, and the FailedScheduling message.
fn verdicts(c: &Cluster, pod: &str) -> (Vec<Verdict>, String) {
    let snap = Snapshot::from_cluster(c);
    let p = c.pods.iter().find(|p| p.key() == pod).unwrap();
    let e = explain(&framework(), &snap, p).unwrap();
    let mut out = Vec::new();
    for n in &e.nodes {
        for f in &n.filters {
            if f.code.as_str() != "Success" && f.code.as_str() != "Skip" {
                out.push((
                    snap.nodes[n.node].name().to_string(),
                    f.plugin.to_string(),
                    f.code.as_str().to_string(),
                    f.reasons.clone(),
                ));
            }
        }
    }
    (out, e.message)
}

const NODES: &str = r#"
- {apiVersion: v1, kind: Node, metadata: {name: a, labels: {kubernetes.io/hostname: a, topology.kubernetes.io/zone: z1}}, status: {allocatable: {cpu: "4", memory: 8Gi, pods: "10"}}}
- {apiVersion: v1, kind: Node, metadata: {name: b, labels: {kubernetes.io/hostname: b, topology.kubernetes.io/zone: z2}}, status: {allocatable: {cpu: "4", memory: 8Gi, pods: "10"}}}
"#;

fn with_nodes(items: &str) -> String {
    format!("apiVersion: v1\nkind: List\nitems:{NODES}{items}")
}

#[test]
fn zonal_bound_volume_admits_only_its_zone() {
    let c = cluster(&with_nodes(
        r#"
- {apiVersion: v1, kind: PersistentVolume, metadata: {name: pv1, labels: {topology.kubernetes.io/zone: z2}}, spec: {capacity: {storage: 1Gi}, accessModes: [ReadWriteOnce], claimRef: {namespace: ns, name: c1}}}
- {apiVersion: v1, kind: PersistentVolumeClaim, metadata: {name: c1, namespace: ns, annotations: {pv.kubernetes.io/bind-completed: "yes"}}, spec: {volumeName: pv1, accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}}
- {apiVersion: v1, kind: Pod, metadata: {name: p, namespace: ns}, spec: {containers: [{name: c}], volumes: [{name: v, persistentVolumeClaim: {claimName: c1}}]}}
"#,
    ));
    let (v, msg) = verdicts(&c, "ns/p");
    assert_eq!(
        v,
        [(
            "a".to_string(),
            "VolumeZone".to_string(),
            "UnschedulableAndUnresolvable".to_string(),
            vec!["node(s) had no available volume zone".to_string()]
        )]
    );
    assert_eq!(msg, "");
}

#[test]
fn missing_claim_is_rejected_at_prefilter() {
    let c = cluster(&with_nodes(
        r#"
- {apiVersion: v1, kind: Pod, metadata: {name: p, namespace: ns}, spec: {containers: [{name: c}], volumes: [{name: v, persistentVolumeClaim: {claimName: data}}]}}
"#,
    ));
    let (_, msg) = verdicts(&c, "ns/p");
    assert_eq!(
        msg,
        "0/2 nodes are available: persistentvolumeclaim \"data\" not found. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    );
}

#[test]
fn unbound_immediate_claim() {
    let c = cluster(&with_nodes(
        r#"
- {apiVersion: storage.k8s.io/v1, kind: StorageClass, metadata: {name: now}, provisioner: example.com/csi, volumeBindingMode: Immediate}
- {apiVersion: v1, kind: PersistentVolumeClaim, metadata: {name: c1, namespace: ns}, spec: {storageClassName: now, accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}}
- {apiVersion: v1, kind: Pod, metadata: {name: p, namespace: ns}, spec: {containers: [{name: c}], volumes: [{name: v, persistentVolumeClaim: {claimName: c1}}]}}
"#,
    ));
    let (_, msg) = verdicts(&c, "ns/p");
    assert!(
        msg.starts_with(
            "0/2 nodes are available: pod has unbound immediate PersistentVolumeClaims."
        ),
        "{msg}"
    );
}

const LOCAL: &str = r#"
- {apiVersion: storage.k8s.io/v1, kind: StorageClass, metadata: {name: local}, provisioner: kubernetes.io/no-provisioner, volumeBindingMode: WaitForFirstConsumer}
- {apiVersion: v1, kind: PersistentVolume, metadata: {name: l1}, spec: {storageClassName: local, capacity: {storage: 10Gi}, accessModes: [ReadWriteOnce], local: {path: /d1}, nodeAffinity: {required: {nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [b]}]}]}}}}
- {apiVersion: v1, kind: PersistentVolumeClaim, metadata: {name: c1, namespace: ns}, spec: {storageClassName: local, accessModes: [ReadWriteOnce], resources: {requests: {storage: 5Gi}}}}
- {apiVersion: v1, kind: PersistentVolumeClaim, metadata: {name: c2, namespace: ns}, spec: {storageClassName: local, accessModes: [ReadWriteOnce], resources: {requests: {storage: 5Gi}}}}
- {apiVersion: v1, kind: Pod, metadata: {name: p1, namespace: ns}, spec: {containers: [{name: c}], volumes: [{name: v, persistentVolumeClaim: {claimName: c1}}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: p2, namespace: ns}, spec: {containers: [{name: c}], volumes: [{name: v, persistentVolumeClaim: {claimName: c2}}]}}
"#;

#[test]
fn wait_for_first_consumer_binds_static_local_volume() {
    let c = cluster(&with_nodes(LOCAL));
    let (v, _) = verdicts(&c, "ns/p1");
    assert_eq!(
        v,
        [(
            "a".to_string(),
            "VolumeBinding".to_string(),
            "UnschedulableAndUnresolvable".to_string(),
            vec!["node(s) didn't find available persistent volumes to bind".to_string()]
        )]
    );
    // After p1 takes the only local volume on b, p2 fits nowhere.
    let mut snap = Snapshot::from_cluster(&c);
    let p1 = c.pods.iter().find(|p| p.name == "p1").unwrap().clone();
    // The whole attempt: Reserve assumes l1 for c1, PreBind binds it.
    let fw = framework();
    let placed = Scheduler::new(0, 0).schedule_one(&fw, &mut snap, &p1, &Nominator::new());
    assert!(
        matches!(placed, Outcome::Scheduled { node, .. } if snap.nodes[node].name() == "b"),
        "{placed:?}"
    );
    assert_eq!(snap.volumes.pvc("ns", "c1").unwrap().volume_name, "l1");
    assert!(snap.volumes.pvc("ns", "c1").unwrap().is_bound());
    assert_eq!(snap.volumes.pvs["l1"].phase, "Bound");
    let p2 = c.pods.iter().find(|p| p.name == "p2").unwrap();
    let e = explain(&framework(), &snap, p2).unwrap();
    assert!(e.nodes.iter().all(|n| !n.feasible));
    assert_eq!(
        e.message,
        "0/2 nodes are available: 2 node(s) didn't find available persistent volumes to bind. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    );
}

#[test]
fn bound_local_volume_node_affinity() {
    let c = cluster(&with_nodes(
        r#"
- {apiVersion: v1, kind: PersistentVolume, metadata: {name: l1}, spec: {capacity: {storage: 10Gi}, accessModes: [ReadWriteOnce], local: {path: /d1}, claimRef: {namespace: ns, name: c1}, nodeAffinity: {required: {nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [a]}]}]}}}}
- {apiVersion: v1, kind: PersistentVolumeClaim, metadata: {name: c1, namespace: ns, annotations: {pv.kubernetes.io/bind-completed: "yes"}}, spec: {volumeName: l1, accessModes: [ReadWriteOnce], resources: {requests: {storage: 5Gi}}}}
- {apiVersion: v1, kind: Pod, metadata: {name: p, namespace: ns}, spec: {containers: [{name: c}], volumes: [{name: v, persistentVolumeClaim: {claimName: c1}}]}}
"#,
    ));
    let (v, _) = verdicts(&c, "ns/p");
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].0, "b");
    assert_eq!(v[0].1, "VolumeBinding");
    assert_eq!(
        v[0].3,
        ["node(s) didn't match PersistentVolume's node affinity"]
    );
}

#[test]
fn read_write_once_pod_and_disk_conflicts() {
    let c = cluster(&with_nodes(
        r#"
- {apiVersion: v1, kind: PersistentVolume, metadata: {name: pv1}, spec: {capacity: {storage: 1Gi}, accessModes: [ReadWriteOncePod], claimRef: {namespace: ns, name: c1}}}
- {apiVersion: v1, kind: PersistentVolumeClaim, metadata: {name: c1, namespace: ns, annotations: {pv.kubernetes.io/bind-completed: "yes"}}, spec: {volumeName: pv1, accessModes: [ReadWriteOncePod], resources: {requests: {storage: 1Gi}}}}
- {apiVersion: v1, kind: Pod, metadata: {name: user, namespace: ns}, spec: {nodeName: a, containers: [{name: c}], volumes: [{name: v, persistentVolumeClaim: {claimName: c1}}, {name: d, gcePersistentDisk: {pdName: disk1}}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: p, namespace: ns}, spec: {containers: [{name: c}], volumes: [{name: v, persistentVolumeClaim: {claimName: c1}}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: q, namespace: ns}, spec: {containers: [{name: c}], volumes: [{name: d, gcePersistentDisk: {pdName: disk1, readOnly: true}}]}}
"#,
    ));
    let (v, _) = verdicts(&c, "ns/p");
    assert_eq!(v.len(), 2, "{v:?}");
    assert!(v
        .iter()
        .all(|(_, plugin, code, reasons)| plugin == "VolumeRestrictions"
            && code == "Unschedulable"
            && reasons[0].starts_with(
                "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod"
            )));
    // A read-only mount still conflicts with a read-write one on the same node.
    let (v, _) = verdicts(&c, "ns/q");
    assert_eq!(
        v,
        [(
            "a".to_string(),
            "VolumeRestrictions".to_string(),
            "Unschedulable".to_string(),
            vec!["node(s) had no available disk".to_string()]
        )]
    );
}

#[test]
fn csi_attach_limits() {
    let c = cluster(&with_nodes(
        r#"
- {apiVersion: storage.k8s.io/v1, kind: CSINode, metadata: {name: a}, spec: {drivers: [{name: ebs.csi.aws.com, nodeID: i-1, allocatable: {count: 1}}]}}
- {apiVersion: v1, kind: PersistentVolume, metadata: {name: pv1}, spec: {capacity: {storage: 1Gi}, accessModes: [ReadWriteOnce], csi: {driver: ebs.csi.aws.com, volumeHandle: vol-1}, claimRef: {namespace: ns, name: c1}}}
- {apiVersion: v1, kind: PersistentVolume, metadata: {name: pv2}, spec: {capacity: {storage: 1Gi}, accessModes: [ReadWriteOnce], csi: {driver: ebs.csi.aws.com, volumeHandle: vol-2}, claimRef: {namespace: ns, name: c2}}}
- {apiVersion: v1, kind: PersistentVolumeClaim, metadata: {name: c1, namespace: ns, annotations: {pv.kubernetes.io/bind-completed: "yes"}}, spec: {volumeName: pv1, accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}}
- {apiVersion: v1, kind: PersistentVolumeClaim, metadata: {name: c2, namespace: ns, annotations: {pv.kubernetes.io/bind-completed: "yes"}}, spec: {volumeName: pv2, accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}}
- {apiVersion: v1, kind: Pod, metadata: {name: user, namespace: ns}, spec: {nodeName: a, containers: [{name: c}], volumes: [{name: v, persistentVolumeClaim: {claimName: c1}}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: p, namespace: ns}, spec: {containers: [{name: c}], volumes: [{name: v, persistentVolumeClaim: {claimName: c2}}]}}
"#,
    ));
    let (v, _) = verdicts(&c, "ns/p");
    assert_eq!(
        v,
        [(
            "a".to_string(),
            "NodeVolumeLimits".to_string(),
            "Unschedulable".to_string(),
            vec!["node(s) exceed max volume count".to_string()]
        )]
    );
}

/// Upstream's `TestVolumeLimitScalingGate` with the gate on (its default):
/// a CSIDriver with `preventPodSchedulingIfMissing` keeps a pod off nodes
/// whose CSINode does not list the driver; without the field, or without a
/// CSIDriver object, the driver is taken as installed.
#[test]
fn csi_driver_must_be_installed_when_its_csidriver_says_so() {
    let volume = r#"
- {apiVersion: v1, kind: PersistentVolume, metadata: {name: pv1}, spec: {capacity: {storage: 1Gi}, accessModes: [ReadWriteOnce], csi: {driver: ebs.csi.aws.com, volumeHandle: vol-1}, claimRef: {namespace: ns, name: c1}}}
- {apiVersion: v1, kind: PersistentVolumeClaim, metadata: {name: c1, namespace: ns, annotations: {pv.kubernetes.io/bind-completed: "yes"}}, spec: {volumeName: pv1, accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}}
- {apiVersion: v1, kind: Pod, metadata: {name: p, namespace: ns}, spec: {containers: [{name: c}], volumes: [{name: v, persistentVolumeClaim: {claimName: c1}}]}}
"#;
    // Node a's CSINode lists the driver with a limit of 2; node b has a
    // CSINode without it.
    let csi_nodes = r#"
- {apiVersion: storage.k8s.io/v1, kind: CSINode, metadata: {name: a}, spec: {drivers: [{name: ebs.csi.aws.com, nodeID: i-1, allocatable: {count: 2}}]}}
- {apiVersion: storage.k8s.io/v1, kind: CSINode, metadata: {name: b}, spec: {drivers: []}}
"#;
    let driver = |prevent: &str| {
        format!("\n- {{apiVersion: storage.k8s.io/v1, kind: CSIDriver, metadata: {{name: ebs.csi.aws.com}}, spec: {{{prevent}}}}}\n")
    };
    let not_installed = |node: &str| {
        (
            node.to_string(),
            "NodeVolumeLimits".to_string(),
            "Unschedulable".to_string(),
            vec!["ebs.csi.aws.com CSI driver is not installed on the node".to_string()],
        )
    };
    let cases = [
        ("CSIDriver exists but PreventPodSchedulingIfMissing is not set", driver(""), vec![]),
        ("PreventPodSchedulingIfMissing false", driver("preventPodSchedulingIfMissing: false"), vec![]),
        (
            "driver not installed and PreventPodSchedulingIfMissing is true (a: installed within limit)",
            driver("preventPodSchedulingIfMissing: true"),
            vec![not_installed("b")],
        ),
        ("CSIDriver object missing", String::new(), vec![]),
    ];
    for (name, d, want) in cases {
        let c = cluster(&with_nodes(&format!("{csi_nodes}{d}{volume}")));
        assert_eq!(verdicts(&c, "ns/p").0, want, "{name}");
    }
    // A node without any CSINode: the driver is missing there too.
    let c = cluster(&with_nodes(&format!(
        "{}{}{volume}",
        &csi_nodes[..csi_nodes
            .find("\n- {apiVersion: storage.k8s.io/v1, kind: CSINode, metadata: {name: b}")
            .unwrap()],
        driver("preventPodSchedulingIfMissing: true")
    )));
    assert_eq!(
        verdicts(&c, "ns/p").0,
        vec![not_installed("b")],
        "no CSINode"
    );
}

/// Upstream's `hasEnoughCapacity` and StorageCapacityScoring (beta, on by
/// default): a CSIDriver with `storageCapacity: true` provisions only from
/// nodes a CSIStorageCapacity of the class reaches with room for the claim
/// (`maximumVolumeSize` first), and the node is scored by the claim's
/// share of that capacity. Checked against upstream v1.37.2's scheduler
/// (`hack/k8s` oracle): a scores 90, b 50, c is refused.
#[test]
fn provisioning_follows_published_storage_capacity() {
    let items = r#"
- {apiVersion: v1, kind: Node, metadata: {name: c, labels: {kubernetes.io/hostname: c, topology.kubernetes.io/zone: z2}}, status: {allocatable: {cpu: "4", memory: 8Gi, pods: "10"}}}
- {apiVersion: storage.k8s.io/v1, kind: CSIDriver, metadata: {name: block.csi.example.com}, spec: {storageCapacity: true}}
- {apiVersion: storage.k8s.io/v1, kind: StorageClass, metadata: {name: fast}, provisioner: block.csi.example.com, volumeBindingMode: WaitForFirstConsumer}
- {apiVersion: storage.k8s.io/v1, kind: CSIStorageCapacity, metadata: {name: cap-a, namespace: kube-system}, storageClassName: fast, nodeTopology: {matchLabels: {kubernetes.io/hostname: a}}, capacity: 100Gi}
- {apiVersion: storage.k8s.io/v1, kind: CSIStorageCapacity, metadata: {name: cap-b, namespace: kube-system}, storageClassName: fast, nodeTopology: {matchLabels: {kubernetes.io/hostname: b}}, capacity: 20Gi}
- {apiVersion: storage.k8s.io/v1, kind: CSIStorageCapacity, metadata: {name: cap-c, namespace: kube-system}, storageClassName: fast, nodeTopology: {matchLabels: {kubernetes.io/hostname: c}}, capacity: 100Gi, maximumVolumeSize: 5Gi}
- {apiVersion: v1, kind: PersistentVolumeClaim, metadata: {name: data, namespace: ns}, spec: {storageClassName: fast, accessModes: [ReadWriteOnce], resources: {requests: {storage: 10Gi}}}}
- {apiVersion: v1, kind: Pod, metadata: {name: p, namespace: ns}, spec: {containers: [{name: c}], volumes: [{name: v, persistentVolumeClaim: {claimName: data}}]}}
"#;
    let c = cluster(&with_nodes(items));
    let (v, _) = verdicts(&c, "ns/p");
    assert_eq!(
        v,
        [(
            "c".to_string(),
            "VolumeBinding".to_string(),
            "UnschedulableAndUnresolvable".to_string(),
            vec!["node(s) did not have enough free storage".to_string()]
        )]
    );
    let snap = Snapshot::from_cluster(&c);
    let p = c.pods.iter().find(|p| p.key() == "ns/p").unwrap();
    let e = explain(&framework(), &snap, p).unwrap();
    let score = |node: &str| {
        let n = e
            .nodes
            .iter()
            .find(|n| snap.nodes[n.node].name() == node)
            .unwrap();
        n.scores
            .iter()
            .find(|s| s.plugin == "VolumeBinding")
            .map(|s| s.raw)
    };
    assert_eq!((score("a"), score("b")), (Some(90), Some(50)));
    // Without `storageCapacity` on the driver, nothing is checked.
    let c = cluster(&with_nodes(
        &items.replace("storageCapacity: true", "storageCapacity: false"),
    ));
    assert!(verdicts(&c, "ns/p").0.is_empty());
}
