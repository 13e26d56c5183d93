//! CSI volumes that must be attached before they are staged (a CSIDriver
//! with `attachRequired: true`, or none), as upstream's kubelet in its
//! default controller-managed mode handles them: the attach/detach
//! controller makes the VolumeAttachment named after the volume, driver and
//! node ([`super::paths::attachment_name`]) and the driver's attacher marks
//! it attached; the kubelet waits for that (`WaitForAttach`), passes the
//! attachment's metadata to the driver as the publish context, and reports
//! the volume in the Node's `status.volumesInUse` from the moment it wants
//! it until it is unpublished, so the controller never detaches a volume in
//! use.

use std::collections::HashMap;

use k8s_openapi::api::storage::v1::VolumeAttachment;

/// The Node annotation that hands attach and detach to the controller
/// (upstream's kubelet sets it with `enableControllerAttachDetach`, its
/// default).
pub const CONTROLLER_MANAGED: &str = "volumes.kubernetes.io/controller-managed-attach-detach";

/// Why an attachable volume waits before it is set up (upstream's words;
/// upstream logs it and records no Event).
pub const NOT_REPORTED_IN_USE: &str =
    "Volume has not been added to the list of VolumesInUse in the node's volume status";

/// A CSI volume's unique name, as `volumesInUse` and `volumesAttached`
/// name it.
pub fn unique_name(driver: &str, handle: &str) -> String {
    format!("kubernetes.io/csi/{driver}^{handle}")
}

/// Upstream's `WaitForAttach` check of the VolumeAttachment `name` of
/// volume `handle` (`None`: not found): its attachment metadata once
/// attached, else why not (in upstream's words).
pub fn attached(
    va: Option<&VolumeAttachment>,
    handle: &str,
    name: &str,
) -> Result<HashMap<String, String>, String> {
    let Some(va) = va else {
        return Err(format!(
            "volume {handle} has GET error for volume attachment {name}: volumeattachments.storage.k8s.io {name:?} not found"
        ));
    };
    if va.metadata.deletion_timestamp.is_some() {
        return Err("volume attachment is being deleted".into());
    }
    let status = va.status.clone().unwrap_or_default();
    if status.attached {
        return Ok(status
            .attachment_metadata
            .unwrap_or_default()
            .into_iter()
            .collect());
    }
    if let Some(e) = status.attach_error.and_then(|e| e.message) {
        return Err(e);
    }
    Err(format!(
        "volume {handle} is not attached for volume attachment {name}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn va(status: serde_json::Value) -> VolumeAttachment {
        serde_json::from_value(json!({
            "metadata": {"name": "csi-x"},
            "spec": {"attacher": "d", "nodeName": "n1", "source": {"persistentVolumeName": "pv"}},
            "status": status
        }))
        .unwrap()
    }

    #[test]
    fn an_attachment_is_waited_for_in_upstreams_words() {
        assert_eq!(
            attached(None, "v1", "csi-x").unwrap_err(),
            "volume v1 has GET error for volume attachment csi-x: volumeattachments.storage.k8s.io \"csi-x\" not found"
        );
        assert_eq!(
            attached(Some(&va(json!({"attached": false}))), "v1", "csi-x").unwrap_err(),
            "volume v1 is not attached for volume attachment csi-x"
        );
        assert_eq!(
            attached(
                Some(&va(
                    json!({"attached": false, "attachError": {"message": "no such disk"}})
                )),
                "v1",
                "csi-x"
            )
            .unwrap_err(),
            "no such disk"
        );
        let ok = attached(
            Some(&va(
                json!({"attached": true, "attachmentMetadata": {"lun": "3"}}),
            )),
            "v1",
            "csi-x",
        )
        .unwrap();
        assert_eq!(ok.get("lun").map(String::as_str), Some("3"));
        assert_eq!(unique_name("d", "v1"), "kubernetes.io/csi/d^v1");
    }
}
