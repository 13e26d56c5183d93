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
