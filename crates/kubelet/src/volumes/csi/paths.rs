//! Where CSI volumes live on the node, as upstream's `pkg/volume/csi`
//! lays them out (pure):
//!
//! * staged (`NodeStageVolume`):
//!   `<root>/plugins/kubernetes.io/csi/<driver>/<sha256(volumeHandle)>/globalmount`,
//!   with `vol_data.json` beside `globalmount`;
//! * published for a pod (`NodePublishVolume`):
//!   `<root>/pods/<uid>/volumes/kubernetes.io~csi/<pv>/mount`, with
//!   `vol_data.json` beside `mount` (what a restarted kubelet unpublishes
//!   by).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The plugin directory under a pod's `volumes/`.
pub const POD_PLUGIN_DIR: &str = "kubernetes.io~csi";
/// The data file beside a mount.
pub const VOL_DATA: &str = "vol_data.json";
/// The largest `vol_data.json` read.
pub const MAX_VOL_DATA: u64 = 64 * 1024;

fn sha256_hex(s: &str) -> String {
    ring::digest::digest(&ring::digest::SHA256, s.as_bytes())
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Whether `name` is a CSI driver name as the API validates it (63
/// characters at most: alphanumerics, '-', '_' or '.', starting and ending
/// alphanumeric), so it can name a directory and never leave it.
pub fn check_driver_name(name: &str) -> Result<(), String> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    let ends = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if name.len() > 63
        || !name.chars().all(ok_char)
        || !ends(name.chars().next())
        || !ends(name.chars().last())
    {
        return Err(format!(
            "invalid CSI driver name {name:?}: must be at most 63 characters of alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric character"
        ));
    }
    Ok(())
}

/// The staging path of `handle` of `driver` (upstream's
/// `makeDeviceMountPath`).
pub fn staging_path(root: &Path, driver: &str, handle: &str) -> PathBuf {
    root.join("plugins/kubernetes.io/csi")
        .join(driver)
        .join(sha256_hex(handle))
        .join("globalmount")
}

/// The pod's directory of volume `pv` (its target is `mount` beneath).
pub fn pod_volume_dir(root: &Path, uid: &str, pv: &str) -> PathBuf {
    // Upstream escapes a qualified name's '/' as '~'; a PV name has none.
    root.join("pods")
        .join(uid)
        .join("volumes")
        .join(POD_PLUGIN_DIR)
        .join(pv.replace('/', "~"))
}

/// The VolumeAttachment name of `handle` of `driver` on `node` (upstream's
/// `getAttachmentName`).
pub fn attachment_name(handle: &str, driver: &str, node: &str) -> String {
    format!("csi-{}", sha256_hex(&format!("{handle}{driver}{node}")))
}

/// `vol_data.json`, with upstream's keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct VolData {
    #[serde(
        rename = "specVolID",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    /// The PersistentVolume's name.
    pub spec_vol_id: String,
    #[serde(rename = "volumeHandle")]
    /// The driver's volume id.
    pub volume_handle: String,
    #[serde(rename = "driverName")]
    /// The driver.
    pub driver_name: String,
    #[serde(rename = "nodeName", default, skip_serializing_if = "String::is_empty")]
    /// This node.
    pub node_name: String,
    #[serde(
        rename = "volumeLifecycleMode",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    /// `Persistent` (or `Ephemeral`).
    pub lifecycle_mode: String,
    #[serde(
        rename = "attachmentID",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    /// The VolumeAttachment name ([`attachment_name`]).
    pub attachment_id: String,
}

/// Writes `vol_data.json` in `dir` (0640: it names the volume, nothing
/// secret, but only the kubelet reads it).
pub fn save(dir: &Path, data: &VolData) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(VOL_DATA);
    let body = serde_json::to_vec(data).map_err(|e| e.to_string())?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o640)
        .open(&path)
        .map_err(|e| format!("failed to save volume info data: {}: {e}", path.display()))?;
    f.write_all(&body)
        .map_err(|e| format!("failed to save volume info data: {}: {e}", path.display()))
}

/// Reads `vol_data.json` of `dir` (at most [`MAX_VOL_DATA`] bytes).
pub fn load(dir: &Path) -> Result<VolData, String> {
    use std::io::Read;
    let path = dir.join(VOL_DATA);
    let f = std::fs::File::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut body = Vec::new();
    f.take(MAX_VOL_DATA + 1)
        .read_to_end(&mut body)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if body.len() as u64 > MAX_VOL_DATA {
        return Err(format!(
            "{}: longer than {MAX_VOL_DATA} bytes",
            path.display()
        ));
    }
    serde_json::from_slice(&body).map_err(|e| format!("{}: {e}", path.display()))
}

/// The pod information a driver with `podInfoOnMount` gets in its volume
/// context (upstream's `getPodInfoAttrs`).
pub fn pod_info(
    name: &str,
    namespace: &str,
    uid: &str,
    service_account: &str,
    ephemeral: bool,
) -> BTreeMap<String, String> {
    [
        ("csi.storage.k8s.io/pod.name", name),
        ("csi.storage.k8s.io/pod.namespace", namespace),
        ("csi.storage.k8s.io/pod.uid", uid),
        ("csi.storage.k8s.io/serviceAccount.name", service_account),
        (
            "csi.storage.k8s.io/ephemeral",
            if ephemeral { "true" } else { "false" },
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_names_cannot_leave_their_directory() {
        assert!(check_driver_name("hostpath.csi.k8s.io").is_ok());
        for bad in ["", "..", "a/b", "-a", "a.", &"a".repeat(64)] {
            assert!(check_driver_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn paths_are_upstreams() {
        let root = Path::new("/var/lib/kubelet");
        assert_eq!(
            staging_path(root, "hostpath.csi.k8s.io", "vol-1"),
            PathBuf::from(format!(
                "/var/lib/kubelet/plugins/kubernetes.io/csi/hostpath.csi.k8s.io/{}/globalmount",
                sha256_hex("vol-1")
            ))
        );
        // sha256("abc"), a known vector.
        assert_eq!(
            sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            pod_volume_dir(root, "u1", "pvc-9"),
            PathBuf::from("/var/lib/kubelet/pods/u1/volumes/kubernetes.io~csi/pvc-9")
        );
        assert_eq!(
            attachment_name("vol-1", "d", "n1"),
            format!("csi-{}", sha256_hex("vol-1dn1"))
        );
    }

    #[test]
    fn vol_data_round_trips_with_upstreams_keys_and_is_bounded() {
        let dir = std::env::temp_dir().join(format!("rkube-voldata-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let d = VolData {
            spec_vol_id: "pvc-9".into(),
            volume_handle: "vol-1".into(),
            driver_name: "d".into(),
            node_name: "n1".into(),
            lifecycle_mode: "Persistent".into(),
            attachment_id: attachment_name("vol-1", "d", "n1"),
        };
        save(&dir, &d).unwrap();
        let raw: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join(VOL_DATA)).unwrap()).unwrap();
        assert_eq!(raw["specVolID"], "pvc-9");
        assert_eq!(raw["volumeHandle"], "vol-1");
        assert_eq!(raw["volumeLifecycleMode"], "Persistent");
        assert_eq!(load(&dir).unwrap(), d);
        std::fs::write(dir.join(VOL_DATA), vec![b' '; MAX_VOL_DATA as usize + 10]).unwrap();
        assert!(load(&dir).unwrap_err().contains("longer than"));
        std::fs::write(dir.join(VOL_DATA), "{").unwrap();
        assert!(load(&dir).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn pod_information_keys_are_upstreams() {
        let m = pod_info("web-0", "ns", "u1", "default", false);
        assert_eq!(m["csi.storage.k8s.io/pod.name"], "web-0");
        assert_eq!(m["csi.storage.k8s.io/ephemeral"], "false");
        assert_eq!(m.len(), 5);
    }
}
