//! (m) PersistentVolumeClaims on the node: a local PersistentVolume bound
//! by the controller-manager's binder (the pod's `fsGroup` owns it), a
//! read-only claim on a hostPath volume, a generic ephemeral volume whose
//! claim the ephemeral volume controller makes, and a claim that never
//! binds (upstream's `FailedMount` words). After the kubelet restarts the
//! pod keeps its container and its mount; deleted, its mount goes and its
//! data stays, and the pod made again reads it.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::DeleteParams;
use kube::{Api, ResourceExt};
use rkube_testcp::support::wait_for;
use rkube_testcp::ControlPlane;

use super::{apply, container_ids, kubectl, phase};

fn volumes_yaml(node: &str, disk: &Path, host: &Path, eph: &Path) -> String {
    let pv = |name: &str, class: &str, source: String| {
        format!(
            r#"apiVersion: v1
kind: PersistentVolume
metadata: {{name: {name}}}
spec:
  capacity: {{storage: 1Gi}}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: {class}
  {source}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{{key: kubernetes.io/hostname, operator: In, values: [{node}]}}]
---
"#
        )
    };
    let claim = |name: &str, class: &str| {
        format!(
            r#"apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: {name}, namespace: default}}
spec:
  storageClassName: {class}
  accessModes: [ReadWriteOnce]
  resources: {{requests: {{storage: 1Gi}}}}
---
"#
        )
    };
    [
        pv(
            "claims-local",
            "claims-local",
            format!("local: {{path: {}}}", disk.display()),
        ),
        pv(
            "claims-host",
            "claims-host",
            format!(
                "hostPath: {{path: {}, type: DirectoryOrCreate}}",
                host.display()
            ),
        ),
        pv(
            "claims-eph",
            "claims-eph",
            format!("local: {{path: {}}}", eph.display()),
        ),
        claim("claims-local", "claims-local"),
        claim("claims-host", "claims-host"),
        // No volume of its class: never bound.
        claim("claims-unbound", "claims-none"),
    ]
    .concat()
}

/// The pod of the claims; made again, without its generic ephemeral
/// volume (that claim went with the first pod, its Retain volume stays
/// Released).
fn user(again: bool) -> String {
    let pod = USER.replace(
        "name: claims-user,",
        if again {
            "name: claims-again,"
        } else {
            "name: claims-user,"
        },
    );
    match again {
        false => pod,
        true => pod.split("    - {name: host").next().unwrap().to_string()
            + "  volumes:\n  - name: data\n    persistentVolumeClaim: {claimName: claims-local}\n",
    }
}

const USER: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: claims-user, namespace: default}
spec:
  terminationGracePeriodSeconds: 1
  securityContext: {runAsUser: 1000, fsGroup: 2345}
  containers:
  - name: app
    image: rkube.local/busybox:1
    imagePullPolicy: Never
    command: ["sh", "-c", "date >> /data/starts && sleep 3600"]
    volumeMounts:
    - {name: data, mountPath: /data}
    - {name: host, mountPath: /host}
    - {name: scratch, mountPath: /scratch}
  volumes:
  - name: data
    persistentVolumeClaim: {claimName: claims-local}
  - name: host
    persistentVolumeClaim: {claimName: claims-host, readOnly: true}
  - name: scratch
    ephemeral:
      volumeClaimTemplate:
        spec:
          storageClassName: claims-eph
          accessModes: [ReadWriteOnce]
          resources: {requests: {storage: 1Gi}}
"#;

fn unbound_yaml(node: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: claims-waiting, namespace: default}}
spec:
  nodeName: {node}
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: rkube.local/busybox:1
    imagePullPolicy: Never
    command: ["sleep", "3600"]
    volumeMounts: [{{name: data, mountPath: /data}}]
  volumes:
  - name: data
    persistentVolumeClaim: {{claimName: claims-unbound}}
"#
    )
}

/// The directories the volumes live in, under `work`.
pub struct Disks {
    disk: std::path::PathBuf,
    host: std::path::PathBuf,
}

/// Makes the volumes and claims and starts the pods (while other steps
/// run).
pub fn start(cp: &ControlPlane, work: &Path, node: &str) -> Disks {
    let disk = work.join("disks/local");
    let host = work.join("disks/host");
    let eph = work.join("disks/eph");
    for d in [&disk, &eph] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::create_dir_all(&host).unwrap();
    std::fs::write(host.join("seed"), "from the host\n").unwrap();
    apply(
        cp,
        work,
        "claims-volumes",
        &volumes_yaml(node, &disk, &host, &eph),
    );
    apply(cp, work, "claims-user", &user(false));
    apply(cp, work, "claims-waiting", &unbound_yaml(node));
    Disks { disk, host }
}

/// Whether something is mounted at a path ending in `suffix`.
fn mounted(suffix: &str) -> bool {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4).is_some_and(|m| m.ends_with(suffix)))
}

async fn running(pods: &Api<Pod>, name: &str) -> Pod {
    wait_for(
        &format!("{name} Running"),
        Duration::from_secs(90),
        || async {
            let p = pods.get(name).await.ok()?;
            (phase(&p) == "Running").then_some(p)
        },
    )
    .await
}

/// The pod's volumes as its container sees them.
pub async fn check_running(cp: &ControlPlane, pods: &Api<Pod>, d: &Disks) -> Vec<String> {
    let p = running(pods, "claims-user").await;
    let exec = |cmd: &str| {
        let out = cp
            .kubectl(&["exec", "claims-user", "--", "sh", "-c", cmd])
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    // The local volume is the pod's group's, writable by its user.
    let (ok, out) = exec("stat -c %g /data && id -G && touch /data/by-pod && echo wrote");
    assert!(ok, "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "2345", "{out}");
    assert!(lines[1].split(' ').any(|g| g == "2345"), "{out}");
    assert!(
        d.disk.join("by-pod").exists(),
        "written through to the disk"
    );
    // The read-only claim: readable, not writable.
    let (ok, out) = exec("cat /host/seed");
    assert!(ok && out == "from the host\n", "{out}");
    let (ok, out) = exec("touch /host/x");
    assert!(!ok && out.contains("Read-only file system"), "{out}");
    assert!(!d.host.join("x").exists());
    // The generic ephemeral volume: its claim made for the pod and bound.
    let (ok, out) = exec("touch /scratch/f && echo ok");
    assert!(ok, "{out}");
    assert!(mounted("/volumes/kubernetes.io~local-volume/claims-local"));
    assert!(mounted("/volumes/kubernetes.io~local-volume/claims-eph"));
    // A claim never bound: the pod waits with upstream's FailedMount.
    let e = super::event_of(cp, "claims-waiting", "FailedMount", Duration::from_secs(60)).await;
    assert_eq!(e.type_.as_deref(), Some("Warning"));
    assert_eq!(
        e.message.as_deref(),
        Some(
            "Unable to attach or mount volumes: unmounted volumes=[data], unattached volumes=[], \
             failed to process volumes=[data]: error processing PVC default/claims-unbound: PVC is not bound"
        )
    );
    let w = pods.get("claims-waiting").await.unwrap();
    assert_eq!(phase(&w), "Pending");
    container_ids(&p)
}

/// After the kubelet's restart: the same container, the mount in place;
/// then the pod deleted (its mounts go, its data stays) and made again.
pub async fn check_after_restart(
    cp: &ControlPlane,
    pods: &Api<Pod>,
    work: &Path,
    d: &Disks,
    before: &[String],
) {
    let p = running(pods, "claims-user").await;
    assert_eq!(container_ids(&p), before, "the container kept");
    assert!(mounted("/volumes/kubernetes.io~local-volume/claims-local"));
    let uid = p.uid().unwrap();
    pods.delete("claims-user", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("claims-user gone", Duration::from_secs(60), || async {
        pods.get_opt("claims-user")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    assert!(
        !mounted(&format!(
            "{uid}/volumes/kubernetes.io~local-volume/claims-local"
        )),
        "unmounted with the pod"
    );
    assert!(d.disk.join("by-pod").exists(), "the data stays");
    assert_eq!(
        std::fs::read_to_string(d.host.join("seed")).unwrap(),
        "from the host\n"
    );
    // Made again, the pod finds what the first one wrote.
    apply(cp, work, "claims-again", &user(true));
    running(pods, "claims-again").await;
    let starts = kubectl(cp, &["exec", "claims-again", "--", "cat", "/data/starts"]);
    assert_eq!(starts.lines().count(), 2, "{starts}");
    for name in ["claims-again", "claims-waiting"] {
        let _ = pods.delete(name, &DeleteParams::default()).await;
    }
}
