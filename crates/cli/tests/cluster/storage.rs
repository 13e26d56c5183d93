//! StatefulSets with real volumes on the two rkube nodes, placed by rkube
//! scheduler:
//!
//! * dynamically provisioned CSI volumes that must be attached, with
//!   `hack/csi-stack`: `hack/csi`'s host-path driver on each node
//!   (registered with that node's kubelet) and as the controller, upstream's
//!   external-provisioner v6 (`--strict-topology`) and external-attacher v4
//!   built from the Go module proxy (`hack/csi-sidecars`), a
//!   WaitForFirstConsumer StorageClass, a CSIDriver with
//!   `attachRequired: true`; each claim is
//!   provisioned on the node its pod was placed on and attached there (the
//!   controller-manager's VolumeAttachment, marked attached by the
//!   attacher; the node reports it in `volumesInUse`), each pod writes to
//!   its volume, a deleted pod's replacement finds what it wrote, a kubelet
//!   restarted under running pods keeps their containers and mounts, and
//!   deleting the claims detaches and deletes the volumes;
//! * local PersistentVolumes (no provisioner, WaitForFirstConsumer): every
//!   pod Running on the node of its volume, its data kept across a pod's
//!   deletion and both kubelets' restarts (the same containers, nothing
//!   unmounted).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::common::mount_points_under;
use super::{hack, text, Cluster};

const DRIVER: &str = "hostpath.csi.rkube.dev";

/// A StatefulSet of `replicas` busybox pods, each appending its name to
/// `/data/lives` on its claim of class `class`.
fn statefulset(name: &str, replicas: u32, class: &str, security: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: {name}, namespace: default}}
spec:
  serviceName: {name}
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      terminationGracePeriodSeconds: 1
      {security}
      containers:
      - name: app
        image: rkube.local/busybox:1
        imagePullPolicy: Never
        command: ["sh", "-c", "echo $(hostname) >> /data/lives && sleep 3600"]
        volumeMounts: [{{name: data, mountPath: /data}}]
  volumeClaimTemplates:
  - metadata: {{name: data}}
    spec:
      storageClassName: {class}
      accessModes: [ReadWriteOnce]
      resources: {{requests: {{storage: 1Gi}}}}
"#
    )
}

fn local_objects(dir: &Path) -> String {
    let mut y = String::from(
        "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: local-wffc}\n\
         provisioner: kubernetes.io/no-provisioner\nvolumeBindingMode: WaitForFirstConsumer\n---\n",
    );
    for n in 1..=2 {
        let path = dir.join(format!("local-disks/node-{n}"));
        std::fs::create_dir_all(&path).unwrap();
        y += &format!(
            r#"apiVersion: v1
kind: PersistentVolume
metadata: {{name: local-node-{n}}}
spec:
  capacity: {{storage: 1Gi}}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: local-wffc
  local: {{path: {}}}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{{key: kubernetes.io/hostname, operator: In, values: [node-{n}]}}]
---
"#,
            path.display()
        );
    }
    y + &statefulset("db", 2, "local-wffc", "")
}

fn jsonpath(c: &Cluster, args: &[&str], path: &str) -> String {
    let mut a: Vec<&str> = args.to_vec();
    let p = format!("jsonpath={path}");
    a.extend(["-o", &p]);
    c.ok(&a)
}

/// (pod, its node, its container id) of the StatefulSet's pods.
fn pods_of(c: &Cluster, app: &str) -> Vec<(String, String, String)> {
    let out = jsonpath(
        c,
        &["get", "pods", "-l", &format!("app={app}")],
        "{range .items[*]}{.metadata.name} {.spec.nodeName} {.status.containerStatuses[0].containerID}{\"\\n\"}{end}",
    );
    out.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f.len() == 3).then(|| (f[0].to_string(), f[1].to_string(), f[2].to_string()))
        })
        .collect()
}

fn all_running(c: &Cluster, app: &str, n: usize) {
    c.until(
        &format!("{n} {app} pods Running"),
        Duration::from_secs(240),
        || {
            let out = jsonpath(
                c,
                &["get", "pods", "-l", &format!("app={app}")],
                "{.items[*].status.phase}",
            );
            (out.split(' ').filter(|p| *p == "Running").count() == n).then_some(())
        },
    );
}

/// The file a pod of `app` wrote on its volume, read through the pod.
fn lives(c: &Cluster, pod: &str) -> Vec<String> {
    c.ok(&["exec", pod, "--", "cat", "/data/lives"])
        .lines()
        .map(str::to_string)
        .collect()
}

/// hack/csi-stack down when dropped.
struct Stack<'a>(&'a Path);

impl Drop for Stack<'_> {
    fn drop(&mut self) {
        let _ = Command::new(hack("csi-stack"))
            .args(["down", "--dir"])
            .arg(self.0)
            .status();
    }
}

pub fn check(c: &Cluster, dir: &Path) {
    let o = Command::new(hack("csi-stack"))
        .args(["up", "--dir"])
        .arg(dir)
        .output()
        .expect("run hack/csi-stack");
    assert!(o.status.success(), "hack/csi-stack up: {}", text(&o));
    let stack = Stack(dir);
    let state = dir.join("csi/state");
    c.apply(&statefulset(
        "web",
        3,
        "hostpath-csi",
        "securityContext: {runAsUser: 1000, fsGroup: 2000}",
    ));
    all_running(c, "web", 3);
    // Waiting for the node's status to report a volume in use is only
    // logged, as upstream does: no FailedMount Event says it.
    let failed = jsonpath(
        c,
        &["get", "events", "--field-selector", "reason=FailedMount"],
        "{.items[*].message}",
    );
    assert!(!failed.contains("VolumesInUse"), "{failed}");
    let first = pods_of(c, "web");
    for (pod, node, _) in &first {
        let pv = jsonpath(
            c,
            &["get", "pvc", &format!("data-{pod}")],
            "{.spec.volumeName}",
        );
        let pinned = jsonpath(
            c,
            &["get", "pv", &pv],
            "{.spec.nodeAffinity.required.nodeSelectorTerms[0].matchExpressions[0].values[0]}",
        );
        assert_eq!(&pinned, node, "{pod}'s volume {pv} provisioned on its node");
        let handle = jsonpath(c, &["get", "pv", &pv], "{.spec.csi.volumeHandle}");
        // Attached to its node, and in use there.
        let attached = jsonpath(
            c,
            &["get", "volumeattachments"],
            "{range .items[*]}{.spec.source.persistentVolumeName} {.spec.nodeName} {.status.attached}{\"\\n\"}{end}",
        );
        assert!(
            attached.lines().any(|l| l == format!("{pv} {node} true")),
            "{pod}'s volume attached to {node}: {attached}"
        );
        let in_use = jsonpath(c, &["get", "node", node], "{.status.volumesInUse}");
        assert!(
            in_use.contains(&format!("kubernetes.io/csi/{DRIVER}^{handle}")),
            "{node} reports {handle} in use (before it mounted it): {in_use}"
        );
        let on_disk = state.join(node).join(&handle).join("lives");
        c.until(
            &format!("{pod} wrote to its volume"),
            Duration::from_secs(30),
            || {
                std::fs::read_to_string(&on_disk)
                    .ok()
                    .filter(|s| s == &format!("{pod}\n"))
            },
        );
    }
    // A pod deleted: its replacement (maybe on the same node: the volume
    // pins it there) reads what the first one wrote.
    c.ok(&["delete", "pod", "web-1", "--wait=true"]);
    all_running(c, "web", 3);
    c.until("web-1 made again", Duration::from_secs(60), || {
        let l = lives(c, "web-1");
        (l == ["web-1", "web-1"]).then_some(())
    });
    // node-1's kubelet restarted under its pods: same containers, volumes
    // still mounted.
    let before = pods_of(c, "web");
    let on_node_1: Vec<&(String, String, String)> =
        before.iter().filter(|(_, n, _)| n == "node-1").collect();
    let mounts = mount_points_under(&dir.join("n1/kubelet/pods"));
    c.cluster(&["kubelet", "stop", "node-1"]);
    std::thread::sleep(Duration::from_secs(2));
    c.cluster(&["kubelet", "start", "node-1"]);
    std::thread::sleep(Duration::from_secs(15));
    all_running(c, "web", 3);
    let after = pods_of(c, "web");
    for p in &on_node_1 {
        assert!(
            after.contains(p),
            "{p:?} kept across the kubelet's restart: {after:?}"
        );
    }
    assert_eq!(
        mount_points_under(&dir.join("n1/kubelet/pods")),
        mounts,
        "nothing unmounted"
    );
    // Reported in use again at once (from the volumes' files), so nothing
    // was detached meanwhile.
    let attached = jsonpath(
        c,
        &["get", "volumeattachments"],
        "{.items[*].status.attached}",
    );
    assert_eq!(
        attached.split(' ').filter(|a| *a == "true").count(),
        3,
        "{attached}"
    );
    // The StatefulSet and its claims deleted: the volumes unpublished,
    // unstaged and deleted by the provisioner.
    c.ok(&["delete", "statefulset", "web", "--wait=true"]);
    c.until("web's pods gone", Duration::from_secs(90), || {
        pods_of(c, "web").is_empty().then_some(())
    });
    c.ok(&[
        "delete",
        "pvc",
        "data-web-0",
        "data-web-1",
        "data-web-2",
        "--wait=true",
    ]);
    c.until(
        "the provisioned volumes deleted",
        Duration::from_secs(90),
        || {
            let pvs = jsonpath(c, &["get", "pv"], "{.items[*].spec.storageClassName}");
            let left: Vec<PathBuf> = ["node-1", "node-2"]
                .iter()
                .filter_map(|n| std::fs::read_dir(state.join(n)).ok())
                .flat_map(|rd| rd.flatten().map(|e| e.path()))
                .collect();
            (!pvs.contains("hostpath-csi") && left.is_empty()).then_some(())
        },
    );
    for n in 1..=2 {
        let staged =
            mount_points_under(&dir.join(format!("n{n}/kubelet/plugins/kubernetes.io/csi")));
        assert!(staged.is_empty(), "node-{n} unstaged: {staged:?}");
    }

    // Local PersistentVolumes.
    c.apply(&local_objects(dir));
    all_running(c, "db", 2);
    for (pod, node, _) in pods_of(c, "db") {
        let pv = jsonpath(
            c,
            &["get", "pvc", &format!("data-{pod}")],
            "{.spec.volumeName}",
        );
        assert_eq!(
            pv,
            format!("local-{node}"),
            "{pod} on the node of its volume"
        );
    }
    c.ok(&["delete", "pod", "db-0", "--wait=true"]);
    all_running(c, "db", 2);
    c.until("db-0 made again", Duration::from_secs(60), || {
        (lives(c, "db-0") == ["db-0", "db-0"]).then_some(())
    });
    // Both kubelets restarted under the db pods: the same containers, their
    // local volumes still mounted, their data there.
    let before = pods_of(c, "db");
    let mounts: Vec<Vec<String>> = (1..=2)
        .map(|n| mount_points_under(&dir.join(format!("n{n}/kubelet/pods"))))
        .collect();
    for n in ["node-1", "node-2"] {
        c.cluster(&["kubelet", "stop", n]);
        c.cluster(&["kubelet", "start", n]);
    }
    std::thread::sleep(Duration::from_secs(15));
    all_running(c, "db", 2);
    assert_eq!(
        pods_of(c, "db"),
        before,
        "the db containers kept across the restarts"
    );
    for n in 1..=2 {
        assert_eq!(
            mount_points_under(&dir.join(format!("n{n}/kubelet/pods"))),
            mounts[n - 1],
            "node-{n}: nothing unmounted"
        );
    }
    assert_eq!(lives(c, "db-0"), ["db-0", "db-0"]);
    assert_eq!(lives(c, "db-1"), ["db-1"]);
    c.ok(&["delete", "statefulset", "db", "--wait=true"]);
    c.until("db's pods gone", Duration::from_secs(90), || {
        pods_of(c, "db").is_empty().then_some(())
    });
    for n in 1..=2 {
        let left = mount_points_under(&dir.join(format!("n{n}/kubelet/pods")))
            .into_iter()
            .filter(|m| m.contains("local-volume") || m.contains("kubernetes.io~csi"))
            .collect::<Vec<_>>();
        assert!(left.is_empty(), "node-{n}: {left:?}");
    }
    drop(stack);
}
