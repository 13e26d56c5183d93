//! PersistentVolumeClaim volumes, as upstream's desired-state populator
//! resolves them (`createVolumeSpec`, `getPVCExtractPV`, `getPVSpec`) and
//! its mount operation checks them (`checkNodeAffinity`,
//! `checkMountOptionSupport`): pure, objects in, what to mount out.
//!
//! A generic ephemeral volume is a claim named `<pod>-<volume>` that the
//! pod must control (upstream's `ephemeral.VolumeIsForPod`).
//!
//! The PersistentVolume types a node can mount: `local` (a directory
//! bind-mounted under the pod, upstream's `kubernetes.io/local-volume`),
//! `hostPath` (the path itself, upstream's `kubernetes.io/host-path`) and
//! `csi` (staged and published by the driver's node plugin,
//! [`super::csi`]). Any other type, and `volumeMode: Block`, is refused
//! (fail closed).

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod, Volume};
use kube::ResourceExt;

/// The plugin directory of local volumes under a pod's `volumes/`.
pub const LOCAL_PLUGIN_DIR: &str = "kubernetes.io~local-volume";

/// Upstream's `pvc-protection` finalizer: a claim being deleted that still
/// carries it is in use and may be mounted.
const PVC_PROTECTION: &str = "kubernetes.io/pvc-protection";

/// The PV annotation whose GID becomes a supplemental group of the pod
/// (`pv.beta.kubernetes.io/gid`).
pub const GID_ANNOTATION: &str = "pv.beta.kubernetes.io/gid";

/// The claim a pod volume names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRef {
    /// The claim's name in the pod's namespace.
    pub name: String,
    /// The volume source's `readOnly`.
    pub read_only: bool,
    /// A generic ephemeral volume (the pod must own the claim).
    pub ephemeral: bool,
}

/// The claim of `v`: a `persistentVolumeClaim` source's, or a generic
/// ephemeral volume's `<pod>-<volume>`; `None` for other volumes.
pub fn claim_of(pod: &Pod, v: &Volume) -> Option<ClaimRef> {
    if let Some(c) = &v.persistent_volume_claim {
        return Some(ClaimRef {
            name: c.claim_name.clone(),
            read_only: c.read_only.unwrap_or(false),
            ephemeral: false,
        });
    }
    v.ephemeral.as_ref().map(|_| ClaimRef {
        name: format!("{}-{}", pod.name_any(), v.name),
        read_only: false,
        ephemeral: true,
    })
}

/// The bound volume's name, or why the claim cannot be used yet (upstream's
/// `getPVCExtractPV` checks, in its order and words).
pub fn bound_volume(pvc: &PersistentVolumeClaim) -> Result<&str, String> {
    let protected = pvc.finalizers().iter().any(|f| f == PVC_PROTECTION);
    if pvc.metadata.deletion_timestamp.is_some() && !protected {
        return Err("PVC is being deleted".into());
    }
    let phase = pvc.status.as_ref().and_then(|s| s.phase.as_deref());
    if phase != Some("Bound") {
        return Err("PVC is not bound".into());
    }
    match pvc.spec.as_ref().and_then(|s| s.volume_name.as_deref()) {
        Some(v) if !v.is_empty() => Ok(v),
        _ => Err("PVC has empty pvc.Spec.VolumeName".into()),
    }
}

/// Upstream's `VolumeIsForPod`: a generic ephemeral volume's claim must be
/// controlled by the pod.
pub fn claim_is_for_pod(pod: &Pod, pvc: &PersistentVolumeClaim) -> Result<(), String> {
    let uid = pod.uid().unwrap_or_default();
    let controlled = pvc
        .owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && o.uid == uid && !uid.is_empty());
    if pvc.namespace() != pod.namespace() || !controlled {
        return Err(format!(
            "PVC {}/{} was not created for pod {}/{} (pod is not owner)",
            pvc.namespace().unwrap_or_default(),
            pvc.name_any(),
            pod.namespace().unwrap_or_default(),
            pod.name_any()
        ));
    }
    Ok(())
}

/// Upstream's `getPVSpec` checks: the volume is bound to this very claim.
pub fn check_claim_ref(pv: &PersistentVolume, claim_uid: &str) -> Result<(), String> {
    let name = pv.name_any();
    let Some(r) = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
        return Err(format!(
            "found PV object {name} but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim"
        ));
    };
    let uid = r.uid.as_deref().unwrap_or_default();
    if uid != claim_uid {
        return Err(format!(
            "found PV object {name} but its pv.Spec.ClaimRef.UID {uid} does not point to claim.UID {claim_uid}"
        ));
    }
    Ok(())
}

/// What backs a mountable PersistentVolume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A `local` volume: this directory is bind-mounted under the pod.
    Local {
        /// `local.path`.
        path: String,
    },
    /// A `hostPath` volume: the containers mount the path itself, after
    /// upstream's type check.
    HostPath {
        /// `hostPath.path`.
        path: String,
        /// `hostPath.type` (empty: unset).
        type_: String,
    },
    /// A `csi` volume: staged and published by its driver.
    Csi(CsiSource),
}

/// A PersistentVolume's `csi` source.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CsiSource {
    /// The driver's name.
    pub driver: String,
    /// The volume's id for the driver.
    pub volume_handle: String,
    /// `fsType` (empty: the driver's choice).
    pub fs_type: String,
    /// The volume source's own `readOnly`.
    pub read_only: bool,
    /// `volumeAttributes`: the volume context.
    pub attributes: std::collections::BTreeMap<String, String>,
    /// `nodeStageSecretRef` (namespace, name).
    pub stage_secret: Option<(String, String)>,
    /// `nodePublishSecretRef` (namespace, name).
    pub publish_secret: Option<(String, String)>,
    /// The PV's first access mode (what the volume capability says).
    pub access_mode: String,
    /// Every access mode of the PV (fsGroup policy reads them).
    pub access_modes: Vec<String>,
}

/// A PersistentVolume resolved for one pod volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The PersistentVolume's name (upstream names the mount and its
    /// messages by it).
    pub pv: String,
    /// What backs it.
    pub source: Source,
    /// The claim's `readOnly` (the containers' mounts become read-only).
    pub read_only: bool,
    /// The PV's `mountOptions` (for `local` volumes).
    pub mount_options: Vec<String>,
    /// A supplemental group from the PV's GID annotation.
    pub gid: Option<i64>,
}

/// One step of a resolution that failed, with the prefix upstream's mount
/// operation gives it (`MountVolume.NodeAffinity check failed`, …).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountCheck {
    /// The operation's words (empty: a processing error, not wrapped).
    pub prefix: &'static str,
    /// Why.
    pub message: String,
}

/// What `pv` mounts for a pod volume used by `mounts`/`devices` (whether a
/// container mounts it or uses it as a block device), on a node labelled
/// `node_labels`. Errors in the order upstream meets them.
pub fn resolve(
    volume: &str,
    pv: &PersistentVolume,
    claim_read_only: bool,
    used_as_mount: bool,
    used_as_device: bool,
    node_labels: &rkube_model::selector::Labels,
) -> Result<Resolved, MountCheck> {
    let spec = pv.spec.clone().unwrap_or_default();
    let mode = spec.volume_mode.as_deref().unwrap_or("Filesystem");
    let refuse = |prefix: &'static str, message: String| MountCheck { prefix, message };
    if used_as_mount && mode != "Filesystem" {
        return Err(refuse(
            "",
            format!("volume {volume} has volumeMode {mode}, but is specified in volumeMounts"),
        ));
    }
    if used_as_device && mode != "Block" {
        return Err(refuse(
            "",
            format!("volume {volume} has volumeMode {mode}, but is specified in volumeDevices"),
        ));
    }
    if mode == "Block" {
        return Err(refuse(
            "MapVolume.SetUpDevice failed",
            "volumeMode Block is not supported by rkube".into(),
        ));
    }
    let (source, options_allowed) = if let Some(l) = &spec.local {
        (
            Source::Local {
                path: l.path.clone(),
            },
            true,
        )
    } else if let Some(h) = &spec.host_path {
        let source = Source::HostPath {
            path: h.path.clone(),
            type_: h.type_.clone().unwrap_or_default(),
        };
        (source, false)
    } else if let Some(c) = &spec.csi {
        let secret = |r: &Option<k8s_openapi::api::core::v1::SecretReference>| {
            r.as_ref().map(|r| {
                (
                    r.namespace.clone().unwrap_or_default(),
                    r.name.clone().unwrap_or_default(),
                )
            })
        };
        let modes = spec.access_modes.clone().unwrap_or_default();
        let source = CsiSource {
            driver: c.driver.clone(),
            volume_handle: c.volume_handle.clone(),
            fs_type: c.fs_type.clone().unwrap_or_default(),
            read_only: c.read_only.unwrap_or(false),
            attributes: c
                .volume_attributes
                .clone()
                .unwrap_or_default()
                .into_iter()
                .collect(),
            stage_secret: secret(&c.node_stage_secret_ref),
            publish_secret: secret(&c.node_publish_secret_ref),
            access_mode: modes
                .first()
                .cloned()
                .unwrap_or_else(|| "ReadWriteOnce".into()),
            access_modes: modes,
        };
        (Source::Csi(source), true)
    } else {
        return Err(refuse(
            "MountVolume.FindPluginBySpec failed",
            format!(
                "PersistentVolumes of type {} are not supported by rkube",
                pv_type(pv)
            ),
        ));
    };
    if let Some(required) = spec
        .node_affinity
        .as_ref()
        .and_then(|a| a.required.as_ref())
    {
        let selector = rkube_model::convert::node_selector(required, "spec.nodeAffinity.required")
            .map_err(|e| refuse("MountVolume.NodeAffinity check failed", e.to_string()))?;
        // Upstream matches a node that has only labels: matchFields on
        // metadata.name never match here.
        if !selector.matches("", node_labels) {
            return Err(refuse(
                "MountVolume.NodeAffinity check failed",
                "no matching NodeSelectorTerms".into(),
            ));
        }
    }
    let mount_options = spec.mount_options.clone().unwrap_or_default();
    if !options_allowed && !mount_options.is_empty() {
        return Err(refuse(
            "MountVolume.MountOptionSupport check failed",
            "Mount options are not supported for this volume type".into(),
        ));
    }
    if let Source::Local { path } | Source::HostPath { path, .. } = &source {
        if let Err(e) = no_backsteps(path) {
            return Err(refuse("MountVolume.SetUp failed", e));
        }
    }
    let gid = pv
        .annotations()
        .get(GID_ANNOTATION)
        .and_then(|g| g.parse::<i64>().ok());
    Ok(Resolved {
        pv: pv.name_any(),
        source,
        read_only: claim_read_only,
        mount_options,
        gid,
    })
}

/// Upstream's `ValidatePathNoBacksteps`: no `..` element.
fn no_backsteps(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("the volume's path is empty".into());
    }
    if path.split('/').any(|p| p == "..") {
        return Err(format!("invalid path: {path} must not contain '..'"));
    }
    Ok(())
}

/// The PersistentVolume's type as the API names it (for refusals).
fn pv_type(pv: &PersistentVolume) -> String {
    let j = serde_json::to_value(pv.spec.clone().unwrap_or_default()).unwrap_or_default();
    const NOT_TYPES: &[&str] = &[
        "accessModes",
        "capacity",
        "claimRef",
        "mountOptions",
        "nodeAffinity",
        "persistentVolumeReclaimPolicy",
        "storageClassName",
        "volumeAttributesClassName",
        "volumeMode",
    ];
    j.as_object()
        .and_then(|o| o.keys().find(|k| !NOT_TYPES.contains(&k.as_str())).cloned())
        .unwrap_or_else(|| "unknown".into())
}

/// The names of the pod's volumes its containers (of every kind) mount and
/// use as block devices (upstream's `GetPodVolumeNames`).
pub fn used_volumes(pod: &Pod) -> (Vec<String>, Vec<String>) {
    let mut mounts = Vec::new();
    let mut devices = Vec::new();
    let Some(spec) = &pod.spec else {
        return (mounts, devices);
    };
    let containers = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten());
    for c in containers {
        mounts.extend(c.volume_mounts.iter().flatten().map(|m| m.name.clone()));
        devices.extend(c.volume_devices.iter().flatten().map(|d| d.name.clone()));
    }
    for c in spec.ephemeral_containers.iter().flatten() {
        mounts.extend(c.volume_mounts.iter().flatten().map(|m| m.name.clone()));
        devices.extend(c.volume_devices.iter().flatten().map(|d| d.name.clone()));
    }
    for v in [&mut mounts, &mut devices] {
        v.sort();
        v.dedup();
    }
    (mounts, devices)
}

/// Upstream's `Unable to attach or mount volumes` message for a pod whose
/// volumes `failed` (by pod volume name) could not be processed: each
/// volume the containers use that is not set up is unmounted.
pub fn unable_to_mount(unmounted: &[String], failed: &[String], why: &str) -> String {
    format!(
        "Unable to attach or mount volumes: unmounted volumes=[{}], unattached volumes=[], failed to process volumes=[{}]: {why}",
        unmounted.join(" "),
        failed.join(" ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pvc(v: serde_json::Value) -> PersistentVolumeClaim {
        serde_json::from_value(v).unwrap()
    }

    fn pv(v: serde_json::Value) -> PersistentVolume {
        serde_json::from_value(v).unwrap()
    }

    fn labels(pairs: &[(&str, &str)]) -> rkube_model::selector::Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn claims_are_checked_in_upstreams_order_and_words() {
        let bound = json!({"metadata": {"name": "data", "uid": "c1"},
            "spec": {"volumeName": "pv1"}, "status": {"phase": "Bound"}});
        assert_eq!(bound_volume(&pvc(bound.clone())), Ok("pv1"));
        let mut pending = bound.clone();
        pending["status"]["phase"] = json!("Pending");
        assert_eq!(bound_volume(&pvc(pending)), Err("PVC is not bound".into()));
        let mut empty = bound.clone();
        empty["spec"]["volumeName"] = json!("");
        assert_eq!(
            bound_volume(&pvc(empty)),
            Err("PVC has empty pvc.Spec.VolumeName".into())
        );
        // Deleted and unprotected: refused before the phase is looked at.
        let mut deleted = bound.clone();
        deleted["metadata"]["deletionTimestamp"] = json!("2026-12-08T00:00:00Z");
        deleted["status"]["phase"] = json!("Pending");
        assert_eq!(
            bound_volume(&pvc(deleted.clone())),
            Err("PVC is being deleted".into())
        );
        // Still protected (in use): usable while bound.
        deleted["metadata"]["finalizers"] = json!(["kubernetes.io/pvc-protection"]);
        deleted["status"]["phase"] = json!("Bound");
        assert_eq!(bound_volume(&pvc(deleted)), Ok("pv1"));
    }

    #[test]
    fn the_volume_must_point_back_to_the_claim() {
        let unbound = pv(json!({"metadata": {"name": "pv1"}, "spec": {}}));
        assert_eq!(
            check_claim_ref(&unbound, "c1").unwrap_err(),
            "found PV object pv1 but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim"
        );
        let other = pv(json!({"metadata": {"name": "pv1"},
            "spec": {"claimRef": {"name": "data", "uid": "c2"}}}));
        assert_eq!(
            check_claim_ref(&other, "c1").unwrap_err(),
            "found PV object pv1 but its pv.Spec.ClaimRef.UID c2 does not point to claim.UID c1"
        );
        let ours = pv(json!({"metadata": {"name": "pv1"},
            "spec": {"claimRef": {"name": "data", "uid": "c1"}}}));
        assert!(check_claim_ref(&ours, "c1").is_ok());
    }

    #[test]
    fn ephemeral_claims_are_named_for_the_pod_and_must_be_its_own() {
        let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "ns", "uid": "p1"},
        "spec": {"containers": [], "volumes": [
            {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
            {"name": "data", "persistentVolumeClaim": {"claimName": "d", "readOnly": true}}
        ]}}))
        .unwrap();
        let vols = pod.spec.as_ref().unwrap().volumes.clone().unwrap();
        assert_eq!(
            claim_of(&pod, &vols[0]),
            Some(ClaimRef {
                name: "web-scratch".into(),
                read_only: false,
                ephemeral: true
            })
        );
        assert_eq!(
            claim_of(&pod, &vols[1]),
            Some(ClaimRef {
                name: "d".into(),
                read_only: true,
                ephemeral: false
            })
        );
        let owned = pvc(
            json!({"metadata": {"name": "web-scratch", "namespace": "ns",
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "web",
                "uid": "p1", "controller": true}]}}),
        );
        assert!(claim_is_for_pod(&pod, &owned).is_ok());
        let stranger = pvc(
            json!({"metadata": {"name": "web-scratch", "namespace": "ns",
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "web",
                "uid": "p0", "controller": true}]}}),
        );
        assert_eq!(
            claim_is_for_pod(&pod, &stranger).unwrap_err(),
            "PVC ns/web-scratch was not created for pod ns/web (pod is not owner)"
        );
    }

    #[test]
    fn local_and_host_path_volumes_resolve_others_are_refused() {
        let node = labels(&[("kubernetes.io/hostname", "n1")]);
        let local = pv(json!({"metadata": {"name": "pv1",
                "annotations": {"pv.beta.kubernetes.io/gid": "1234"}},
            "spec": {"local": {"path": "/mnt/disks/a"}, "mountOptions": ["noatime"],
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]}]}}}}));
        let r = resolve("data", &local, true, true, false, &node).unwrap();
        assert_eq!(
            r,
            Resolved {
                pv: "pv1".into(),
                source: Source::Local {
                    path: "/mnt/disks/a".into()
                },
                read_only: true,
                mount_options: vec!["noatime".into()],
                gid: Some(1234),
            }
        );
        // Another node: upstream's affinity failure.
        let elsewhere = labels(&[("kubernetes.io/hostname", "n2")]);
        let e = resolve("data", &local, false, true, false, &elsewhere).unwrap_err();
        assert_eq!(e.prefix, "MountVolume.NodeAffinity check failed");
        assert_eq!(e.message, "no matching NodeSelectorTerms");
        let host = pv(json!({"metadata": {"name": "pv2"},
            "spec": {"hostPath": {"path": "/srv/x", "type": "DirectoryOrCreate"}}}));
        assert_eq!(
            resolve("data", &host, false, true, false, &node)
                .unwrap()
                .source,
            Source::HostPath {
                path: "/srv/x".into(),
                type_: "DirectoryOrCreate".into()
            }
        );
        let mut with_options = host.clone();
        with_options.spec.as_mut().unwrap().mount_options = Some(vec!["ro".into()]);
        assert_eq!(
            resolve("data", &with_options, false, true, false, &node)
                .unwrap_err()
                .message,
            "Mount options are not supported for this volume type"
        );
        let nfs = pv(json!({"metadata": {"name": "pv3"},
            "spec": {"accessModes": ["ReadWriteMany"], "capacity": {"storage": "1Gi"},
                "nfs": {"server": "s", "path": "/e"}}}));
        let e = resolve("data", &nfs, false, true, false, &node).unwrap_err();
        assert_eq!(
            e.message,
            "PersistentVolumes of type nfs are not supported by rkube"
        );
        let backstep = pv(json!({"metadata": {"name": "pv4"},
            "spec": {"local": {"path": "/mnt/../etc"}}}));
        assert!(resolve("data", &backstep, false, true, false, &node)
            .unwrap_err()
            .message
            .contains("must not contain '..'"));
    }

    #[test]
    fn csi_volumes_carry_what_the_driver_is_called_with() {
        let node = labels(&[]);
        let v = pv(json!({"metadata": {"name": "pvc-1"},
            "spec": {"accessModes": ["ReadWriteOnce", "ReadOnlyMany"], "mountOptions": ["noatime"],
                "csi": {"driver": "hostpath.csi.rkube.dev", "volumeHandle": "v1", "fsType": "ext4",
                    "volumeAttributes": {"k": "v"},
                    "nodePublishSecretRef": {"namespace": "ns", "name": "s"}}}}));
        let r = resolve("data", &v, false, true, false, &node).unwrap();
        assert_eq!(r.mount_options, vec!["noatime".to_string()]);
        let Source::Csi(c) = r.source else {
            panic!("{:?}", r.source)
        };
        assert_eq!(c.driver, "hostpath.csi.rkube.dev");
        assert_eq!(c.volume_handle, "v1");
        assert_eq!(c.fs_type, "ext4");
        assert_eq!(c.access_mode, "ReadWriteOnce");
        assert_eq!(c.publish_secret, Some(("ns".into(), "s".into())));
        assert_eq!(c.stage_secret, None);
        assert_eq!(c.attributes.get("k").map(String::as_str), Some("v"));
    }

    #[test]
    fn volume_modes_must_match_their_use() {
        let node = labels(&[]);
        let block = pv(json!({"metadata": {"name": "pv1"},
            "spec": {"local": {"path": "/dev/sdb"}, "volumeMode": "Block"}}));
        assert_eq!(
            resolve("data", &block, false, true, false, &node)
                .unwrap_err()
                .message,
            "volume data has volumeMode Block, but is specified in volumeMounts"
        );
        let fs = pv(json!({"metadata": {"name": "pv1"}, "spec": {"local": {"path": "/d"}}}));
        assert_eq!(
            resolve("data", &fs, false, false, true, &node)
                .unwrap_err()
                .message,
            "volume data has volumeMode Filesystem, but is specified in volumeDevices"
        );
        // Block devices themselves are refused, not ignored.
        assert!(resolve("data", &block, false, false, true, &node)
            .unwrap_err()
            .message
            .contains("not supported by rkube"));
    }

    #[test]
    fn the_failure_message_lists_volumes_as_upstream() {
        assert_eq!(
            unable_to_mount(
                &["data".into(), "logs".into()],
                &["data".into()],
                "error processing PVC ns/data: PVC is not bound"
            ),
            "Unable to attach or mount volumes: unmounted volumes=[data logs], unattached volumes=[], failed to process volumes=[data]: error processing PVC ns/data: PVC is not bound"
        );
    }
}
