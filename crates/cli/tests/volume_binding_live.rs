//! The binding cycle's volume binding against a genuine control plane
//! (kube-apiserver, kube-controller-manager's PV and StatefulSet
//! controllers), rkube scheduler and upstream kube-scheduler side by side
//! on the same cluster, driven with the real `kubectl`:
//!
//! - a StatefulSet whose claims use a `WaitForFirstConsumer` local-volume
//!   StorageClass, with the PersistentVolumes pre-created on two of three
//!   nodes: every replica is bound to a node that has a volume and its
//!   claim to the volume on that node (PreBind wrote the claimRef, the PV
//!   controller completed the binding) — the same bindings upstream's
//!   scheduler makes for an identical StatefulSet;
//! - dynamic provisioning: the scheduler writes the claim's selected node
//!   (and, as upstream's NominatedNodeNameForExpectation does, the pod's
//!   nominated node) and waits in PreBind until the claim is bound; the
//!   test plays the provisioner and creates the volume; then the pod binds.
//!
//! Needs hack/build-k8s; run by hack/test (`--ignored`).

use std::collections::BTreeSet;
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

/// The class and two local volumes (on node-00 and node-01) for `tag`.
fn local_volumes(tag: &str) -> String {
    let mut y = format!(
        "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {{name: local-{tag}}}\nprovisioner: kubernetes.io/no-provisioner\nvolumeBindingMode: WaitForFirstConsumer\n---\n"
    );
    for n in ["00", "01"] {
        y.push_str(&format!(
            r#"apiVersion: v1
kind: PersistentVolume
metadata: {{name: pv-{tag}-{n}}}
spec:
  capacity: {{storage: 1Gi}}
  accessModes: [ReadWriteOnce]
  storageClassName: local-{tag}
  local: {{path: /mnt/disk-{tag}}}
  nodeAffinity:
    required:
      nodeSelectorTerms: [{{matchExpressions: [{{key: kubernetes.io/hostname, operator: In, values: [node-{n}]}}]}}]
---
"#
        ));
    }
    y
}

fn stateful_set(tag: &str, scheduler: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Namespace
metadata: {{name: {tag}}}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: db, namespace: {tag}}}
spec:
  serviceName: db
  replicas: 2
  podManagementPolicy: Parallel
  selector: {{matchLabels: {{app: db}}}}
  template:
    metadata: {{labels: {{app: db}}}}
    spec:
      schedulerName: {scheduler}
      automountServiceAccountToken: false
      tolerations: [{{operator: Exists}}]
      containers: [{{name: c, image: registry.k8s.io/pause:3.10, resources: {{requests: {{cpu: 100m}}}}}}]
  volumeClaimTemplates:
  - metadata: {{name: data}}
    spec:
      accessModes: [ReadWriteOnce]
      storageClassName: local-{tag}
      resources: {{requests: {{storage: 1Gi}}}}
"#
    )
}

/// Waits until both replicas of `tag`'s StatefulSet are bound and both
/// claims are bound; checks every claim's volume is the one on its pod's
/// node and returns {(node, volume without the tag)}.
fn statefulset_bindings(cp: &ControlPlane, tag: &str) -> BTreeSet<(String, String)> {
    let pods = wait_until(
        "the StatefulSet's pods to be bound",
        Duration::from_secs(90),
        || {
            let v = get_json(cp, &["pods", "-n", tag]);
            let items = v["items"].as_array()?.clone();
            (items.len() == 2
                && items.iter().all(|p| {
                    p["spec"]["nodeName"]
                        .as_str()
                        .is_some_and(|n| !n.is_empty())
                }))
            .then_some(items)
        },
    );
    let mut out = BTreeSet::new();
    for p in &pods {
        let name = p["metadata"]["name"].as_str().unwrap();
        let node = p["spec"]["nodeName"].as_str().unwrap().to_string();
        let claim = format!("data-{name}");
        let pvc = get_json(cp, &["pvc", "-n", tag, &claim]);
        assert_eq!(pvc["status"]["phase"], "Bound", "{claim}: {pvc}");
        assert!(
            pvc["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"].is_string(),
            "{claim}: {pvc}"
        );
        let volume = pvc["spec"]["volumeName"].as_str().unwrap().to_string();
        let suffix = node.trim_start_matches("node-");
        assert_eq!(
            volume,
            format!("pv-{tag}-{suffix}"),
            "{claim} of {name} on {node} is bound to the volume on that node"
        );
        let pv = get_json(cp, &["pv", &volume]);
        assert_eq!(pv["spec"]["claimRef"]["name"], claim.as_str(), "{pv}");
        assert_eq!(pv["spec"]["claimRef"]["namespace"], tag, "{pv}");
        assert_eq!(
            pv["spec"]["claimRef"]["uid"], pvc["metadata"]["uid"],
            "claimRef names the claim's UID"
        );
        assert_eq!(pv["status"]["phase"], "Bound", "{pv}");
        out.insert((node, volume.replace(&format!("-{tag}-"), "-")));
    }
    out
}

/// A claim of a class whose provisioner nothing runs, and a pod using it:
/// the scheduler selects a node and waits; the test provisions; the pod
/// binds there. Returns the node.
fn provisioned_by_the_test(cp: &ControlPlane, tag: &str, scheduler: &str) -> String {
    apply(
        cp,
        &format!("dyn-{tag}"),
        &format!(
            r#"apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {{name: fake-{tag}}}
provisioner: example.com/fake-{tag}
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: scratch, namespace: {tag}}}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: fake-{tag}
  resources: {{requests: {{storage: 2Gi}}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: worker, namespace: {tag}}}
spec:
  schedulerName: {scheduler}
  automountServiceAccountToken: false
  tolerations: [{{operator: Exists}}]
  containers: [{{name: c, image: registry.k8s.io/pause:3.10}}]
  volumes: [{{name: v, persistentVolumeClaim: {{claimName: scratch}}}}]
"#
        ),
    );
    let node = wait_until(
        "the selected-node annotation",
        Duration::from_secs(60),
        || {
            let pvc = get_json(cp, &["pvc", "-n", tag, "scratch"]);
            pvc["metadata"]["annotations"]["volume.kubernetes.io/selected-node"]
                .as_str()
                .map(str::to_string)
        },
    );
    // PreBind waits for the claim: the pod is not bound yet, and its
    // nominated node is the selected one.
    let pod = get_json(cp, &["pod", "-n", tag, "worker"]);
    assert!(
        pod["spec"]["nodeName"].is_null(),
        "bound before its claim: {pod}"
    );
    let nominated = wait_until("the nominated node", Duration::from_secs(10), || {
        let pod = get_json(cp, &["pod", "-n", tag, "worker"]);
        pod["status"]["nominatedNodeName"]
            .as_str()
            .map(str::to_string)
    });
    assert_eq!(
        nominated, node,
        "nominated to the node chosen for the volume"
    );
    let pvc = get_json(cp, &["pvc", "-n", tag, "scratch"]);
    let uid = pvc["metadata"]["uid"].as_str().unwrap();
    apply(
        cp,
        &format!("provisioned-{tag}"),
        &format!(
            r#"apiVersion: v1
kind: PersistentVolume
metadata: {{name: provisioned-{tag}}}
spec:
  capacity: {{storage: 2Gi}}
  accessModes: [ReadWriteOnce]
  storageClassName: fake-{tag}
  claimRef: {{namespace: {tag}, name: scratch, uid: {uid}}}
  local: {{path: /mnt/provisioned}}
  nodeAffinity:
    required:
      nodeSelectorTerms: [{{matchExpressions: [{{key: kubernetes.io/hostname, operator: In, values: [{node}]}}]}}]
"#
        ),
    );
    let bound = wait_until("the pod to be bound", Duration::from_secs(60), || {
        let pod = get_json(cp, &["pod", "-n", tag, "worker"]);
        pod["spec"]["nodeName"].as_str().map(str::to_string)
    });
    assert_eq!(
        bound, node,
        "bound to the node its volume was provisioned for"
    );
    let pvc = get_json(cp, &["pvc", "-n", tag, "scratch"]);
    assert_eq!(
        pvc["spec"]["volumeName"],
        format!("provisioned-{tag}").as_str()
    );
    node
}

#[test]
#[ignore = "needs hack/build-k8s; run by hack/test"]
fn wait_for_first_consumer_claims_bound_as_upstream_binds_them() {
    let cp = ControlPlane::start().expect("control plane");
    create_nodes(&cp, 3, "8");
    let r = rkube_beside_upstream(&cp, "volumes", &[]);
    apply(&cp, "volumes-up", &local_volumes("up"));
    apply(&cp, "volumes-rk", &local_volumes("rk"));
    apply(&cp, "sts-up", &stateful_set("up", "default-scheduler"));
    apply(&cp, "sts-rk", &stateful_set("rk", "rkube"));
    let upstream = statefulset_bindings(&cp, "up");
    let rkube = statefulset_bindings(&cp, "rk");
    let expected: BTreeSet<(String, String)> = [
        ("node-00".to_string(), "pv-00".to_string()),
        ("node-01".to_string(), "pv-01".to_string()),
    ]
    .into();
    assert_eq!(upstream, expected, "upstream kube-scheduler");
    assert_eq!(rkube, upstream, "rkube binds as upstream does");

    // Dynamic provisioning: the same steps under both schedulers.
    let up_node = provisioned_by_the_test(&cp, "up", "default-scheduler");
    let rk_node = provisioned_by_the_test(&cp, "rk", "rkube");
    for n in [&up_node, &rk_node] {
        assert!(n.starts_with("node-"), "{n}");
    }
    let log = r.log_text();
    assert!(!log.contains("panicked"), "{log}");
    let m = r.metrics().expect("metrics");
    assert!(
        m.contains("extension_point=\"PreBind\",status=\"Success\",profile=\"rkube\""),
        "PreBind ran and is measured: {m}"
    );
}
