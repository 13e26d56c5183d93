//! (n) A CSI driver on the node: `hack/csi`'s host-path driver registers
//! through `plugins_registry` (its CSINode entry, topology label and node
//! id annotation appear), a PersistentVolume of it is staged and
//! published for a pod (the pod's `fsGroup` given by the `File` policy),
//! kept across the kubelet's restart, and unpublished and unstaged once
//! the pod is gone, its data left on the disk.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::storage::v1::CSINode;
use kube::api::DeleteParams;
use kube::{Api, ResourceExt};
use rkube_testcp::support::{client, wait_for};
use rkube_testcp::ControlPlane;

use super::common::{mount_points_under, Process};
use super::{apply, container_ids, phase};

const DRIVER: &str = "hostpath.csi.rkube.dev";
const TOPOLOGY: &str = "topology.hostpath.csi.rkube.dev/node";

/// The driver running, and where its volumes are.
pub struct Driver {
    _process: Process,
    volume: PathBuf,
    root: PathBuf,
}

fn build(work: &Path) -> PathBuf {
    let out = work.join("rkube-csi-hostpath");
    let hack = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../hack/csi");
    let o = Command::new("go")
        .args(["build", "-trimpath", "-o"])
        .arg(&out)
        .arg("./hostpath")
        .current_dir(hack)
        .output()
        .expect("run go build");
    assert!(
        o.status.success(),
        "building hack/csi: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

fn manifests(node: &str) -> String {
    format!(
        r#"apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata: {{name: {DRIVER}}}
spec: {{attachRequired: false, podInfoOnMount: true, fsGroupPolicy: File}}
---
apiVersion: v1
kind: PersistentVolume
metadata: {{name: csi-static}}
spec:
  capacity: {{storage: 1Gi}}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: csi-static
  csi: {{driver: {DRIVER}, volumeHandle: vol-static}}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{{key: {TOPOLOGY}, operator: In, values: [{node}]}}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: csi-static, namespace: default}}
spec:
  storageClassName: csi-static
  accessModes: [ReadWriteOnce]
  resources: {{requests: {{storage: 1Gi}}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: csi-user, namespace: default}}
spec:
  terminationGracePeriodSeconds: 1
  securityContext: {{runAsUser: 1000, fsGroup: 3456}}
  containers:
  - name: app
    image: rkube.local/busybox:1
    imagePullPolicy: Never
    command: ["sh", "-c", "cat /data/seed && echo from-pod > /data/written && sleep 3600"]
    volumeMounts: [{{name: data, mountPath: /data}}]
  volumes:
  - name: data
    persistentVolumeClaim: {{claimName: csi-static}}
"#
    )
}

/// Starts the driver (registered with the kubelet under `root`) and makes
/// the volume, its claim and the pod.
pub fn start(cp: &ControlPlane, work: &Path, node: &str, root: &Path) -> Driver {
    let bin = build(work);
    let state = work.join("csi-state");
    let volume = state.join(node).join("vol-static");
    std::fs::create_dir_all(&volume).unwrap();
    std::fs::write(volume.join("seed"), "seeded\n").unwrap();
    let args: Vec<String> = [
        "--endpoint",
        &work.join("csi/csi.sock").display().to_string(),
        "--registration-dir",
        &root.join("plugins_registry").display().to_string(),
        "--node-id",
        node,
        "--state-dir",
        &state.display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let process = Process::start(bin.to_str().unwrap(), &args, &work.join("csi-driver.log"));
    apply(cp, work, "csi", &manifests(node));
    Driver {
        _process: process,
        volume,
        root: root.to_path_buf(),
    }
}

/// The driver registered, the pod Running on its volume; its containers.
pub async fn check_running(
    cp: &ControlPlane,
    pods: &Api<Pod>,
    node: &str,
    d: &Driver,
) -> Vec<String> {
    let admin = client(cp.kubeconfig()).await;
    let csinode = wait_for(
        "the CSINode lists the driver",
        Duration::from_secs(60),
        || async {
            let c = Api::<CSINode>::all(admin.clone()).get(node).await.ok()?;
            c.spec.drivers.iter().any(|x| x.name == DRIVER).then_some(c)
        },
    )
    .await;
    let entry = csinode
        .spec
        .drivers
        .iter()
        .find(|x| x.name == DRIVER)
        .unwrap();
    assert_eq!(entry.node_id, node);
    assert_eq!(entry.topology_keys, Some(vec![TOPOLOGY.to_string()]));
    assert_eq!(csinode.owner_references()[0].kind, "Node");
    let n = Api::<Node>::all(admin.clone()).get(node).await.unwrap();
    assert_eq!(n.labels().get(TOPOLOGY).map(String::as_str), Some(node));
    let ids: serde_json::Value = serde_json::from_str(
        n.annotations()
            .get("csi.volume.kubernetes.io/nodeid")
            .expect("the node id annotation"),
    )
    .unwrap();
    assert_eq!(ids[DRIVER], node);
    let p = wait_for("csi-user Running", Duration::from_secs(90), || async {
        let p = pods.get("csi-user").await.ok()?;
        (phase(&p) == "Running").then_some(p)
    })
    .await;
    wait_for(
        "the pod wrote to the volume",
        Duration::from_secs(30),
        || async {
            std::fs::read_to_string(d.volume.join("written"))
                .ok()
                .filter(|s| s == "from-pod\n")
        },
    )
    .await;
    let logs = super::kubectl(cp, &["logs", "csi-user"]);
    assert_eq!(logs, "seeded\n");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::metadata(&d.volume).unwrap().gid(),
        3456,
        "fsGroup applied (File policy)"
    );
    let uid = p.uid().unwrap();
    let staged = mount_points_under(&d.root.join("plugins/kubernetes.io/csi").join(DRIVER));
    assert_eq!(staged.len(), 1, "staged once: {staged:?}");
    assert!(staged[0].ends_with("/globalmount"), "{staged:?}");
    let published = mount_points_under(
        &d.root
            .join("pods")
            .join(&uid)
            .join("volumes/kubernetes.io~csi"),
    );
    assert_eq!(
        published,
        vec![d
            .root
            .join("pods")
            .join(&uid)
            .join("volumes/kubernetes.io~csi/csi-static/mount")
            .display()
            .to_string()]
    );
    container_ids(&p)
}

/// After the kubelet's restart: the same container; then the pod deleted,
/// its volume unpublished and unstaged, the data kept.
pub async fn check_after_restart(pods: &Api<Pod>, d: &Driver, before: &[String]) {
    let p = pods.get("csi-user").await.unwrap();
    assert_eq!(phase(&p), "Running");
    assert_eq!(container_ids(&p), before, "the container kept");
    pods.delete("csi-user", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("csi-user gone", Duration::from_secs(90), || async {
        pods.get_opt("csi-user").await.ok()?.is_none().then_some(())
    })
    .await;
    let left = mount_points_under(&d.root.join("plugins/kubernetes.io/csi"));
    assert!(left.is_empty(), "unstaged: {left:?}");
    assert!(mount_points_under(&d.root.join("pods"))
        .iter()
        .all(|m| !m.contains("kubernetes.io~csi")));
    assert_eq!(
        std::fs::read_to_string(d.volume.join("written")).unwrap(),
        "from-pod\n"
    );
}
