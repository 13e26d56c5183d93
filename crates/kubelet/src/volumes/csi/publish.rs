//! A CSI PersistentVolume staged and published for a pod, and unpublished
//! and unstaged once the pod is gone, as upstream's CSI attacher
//! (`MountDevice`, `UnmountDevice`) and mounter (`SetUpAt`, `TearDownAt`).
//!
//! The driver's `CSIDriver` object is read for its options:
//! `attachRequired` (true without a CSIDriver: the volume is waited for
//! until attached, [`super::attach`]), `podInfoOnMount` (the pod's name,
//! namespace, uid and ServiceAccount in the volume context),
//! `fsGroupPolicy` (`ReadWriteOnceWithFSType` when absent, `File`, `None`)
//! and `volumeLifecycleModes`. What rkube cannot do yet is refused, never
//! skipped: `tokenRequests`, `requiresRepublish`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::storage::v1::{CSIDriver, VolumeAttachment};
use kube::{Api, Client, ResourceExt};

use super::attach;
use super::driver::{call, Drivers};
use super::paths::{self, VolData};
use super::v1::volume_capability::access_mode::Mode;
use super::v1::{self, node_service_capability};
use crate::volumes::ownership;
use crate::volumes::persistent::CsiSource;
use crate::volumes::subpath::is_mount_point;

/// Stages and publishes CSI volumes for the node's pods.
pub struct Csi {
    client: Client,
    drivers: Arc<Drivers>,
    root: PathBuf,
    node_name: String,
    /// Volumes that must be attached, wanted by pods not yet published
    /// (their unique names, by pod uid).
    wanted: Mutex<HashMap<String, BTreeSet<String>>>,
    /// Whether each driver's volumes must be attached, as last read.
    attach_required: Mutex<HashMap<String, bool>>,
    /// [`Csi::volumes_in_use`] as last computed (the Node's status reads it).
    in_use: Mutex<Vec<String>>,
    /// The volumes the Node's status last reported in use.
    reported: Mutex<BTreeSet<String>>,
    /// The volumes published on disk as last read (`None`: to be read
    /// again; a set-up or tear-down makes it so, and so does a restart),
    /// with a generation that each of those raises, so that a read which
    /// raced one is not kept.
    on_disk: Mutex<(u64, Option<Vec<VolData>>)>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The CSIDriver options that matter on the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverOptions {
    /// `attachRequired`.
    pub attach: bool,
    /// `podInfoOnMount`.
    pub pod_info: bool,
    /// `fsGroupPolicy`.
    pub fs_group_policy: String,
}

/// The options of `d` (`None`: no CSIDriver object), or why rkube cannot
/// use the driver.
pub fn driver_options(name: &str, d: Option<&CSIDriver>) -> Result<DriverOptions, String> {
    let Some(d) = d else {
        return Ok(DriverOptions {
            attach: true,
            pod_info: false,
            fs_group_policy: "ReadWriteOnceWithFSType".into(),
        });
    };
    let s = &d.spec;
    if s.token_requests.as_ref().is_some_and(|t| !t.is_empty()) {
        return Err(format!(
            "CSIDriver {name}: tokenRequests are not supported by rkube"
        ));
    }
    if s.requires_republish == Some(true) {
        return Err(format!(
            "CSIDriver {name}: requiresRepublish is not supported by rkube"
        ));
    }
    let modes = s.volume_lifecycle_modes.clone().unwrap_or_default();
    if !modes.is_empty() && !modes.iter().any(|m| m == "Persistent") {
        return Err(format!(
            "volume mode \"Persistent\" not supported by driver {name} (only supports {modes:?})"
        ));
    }
    Ok(DriverOptions {
        attach: s.attach_required.unwrap_or(true),
        pod_info: s.pod_info_on_mount.unwrap_or(false),
        fs_group_policy: s
            .fs_group_policy
            .clone()
            .unwrap_or_else(|| "ReadWriteOnceWithFSType".into()),
    })
}

/// Whether the kubelet gives the volume to the pod's `fsGroup` (upstream's
/// `supportsFSGroup`).
pub fn applies_fs_group(
    policy: &str,
    fs_type: &str,
    read_only: bool,
    access_modes: &[String],
) -> bool {
    if policy == "None" || read_only {
        return false;
    }
    if policy == "File" {
        return true;
    }
    !fs_type.is_empty() && access_modes.iter().any(|m| m == "ReadWriteOnce")
}

/// The CSI access mode of a PersistentVolume access mode (upstream's
/// mapping, with or without `SINGLE_NODE_MULTI_WRITER`).
pub fn access_mode(mode: &str, multi_writer: bool) -> Mode {
    match (mode, multi_writer) {
        ("ReadWriteOnce", false) | ("ReadWriteOncePod", false) => Mode::SingleNodeWriter,
        ("ReadWriteOnce", true) => Mode::SingleNodeMultiWriter,
        ("ReadWriteOncePod", true) => Mode::SingleNodeSingleWriter,
        ("ReadOnlyMany", _) => Mode::MultiNodeReaderOnly,
        ("ReadWriteMany", _) => Mode::MultiNodeMultiWriter,
        _ => Mode::Unknown,
    }
}

/// A CSI volume to publish for a pod.
pub struct Publish<'a> {
    /// The pod.
    pub pod: &'a Pod,
    /// The PersistentVolume's name.
    pub pv: &'a str,
    /// Its `csi` source.
    pub source: &'a CsiSource,
    /// The claim's `readOnly`.
    pub claim_read_only: bool,
    /// The PV's `mountOptions`.
    pub mount_options: &'a [String],
    /// The pod's `fsGroup`, and whether its policy is `OnRootMismatch`.
    pub fs_group: Option<(u32, bool)>,
}

/// A driver's node capabilities that change what is called.
#[derive(Debug, Default, Clone, Copy)]
struct NodeCaps {
    stage: bool,
    multi_writer: bool,
    mount_group: bool,
}

async fn node_caps(
    node: &mut v1::node_client::NodeClient<tonic::transport::Channel>,
) -> Result<NodeCaps, String> {
    use node_service_capability::rpc::Type as T;
    let r = call(node.node_get_capabilities(v1::NodeGetCapabilitiesRequest {})).await?;
    let mut caps = NodeCaps::default();
    for c in r.capabilities {
        if let Some(node_service_capability::Type::Rpc(rpc)) = c.r#type {
            match T::try_from(rpc.r#type) {
                Ok(T::StageUnstageVolume) => caps.stage = true,
                Ok(T::SingleNodeMultiWriter) => caps.multi_writer = true,
                Ok(T::VolumeMountGroup) => caps.mount_group = true,
                _ => {}
            }
        }
    }
    Ok(caps)
}

fn mkdir_0750(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o750)
        .create(dir)
        .map_err(|e| format!("failed to create dir {}: {e}", dir.display()))
}

impl Csi {
    /// Publishing through `drivers` under the kubelet root `root`.
    pub fn new(client: Client, drivers: Arc<Drivers>, root: PathBuf, node_name: String) -> Csi {
        Csi {
            client,
            drivers,
            root,
            node_name,
            wanted: Mutex::new(HashMap::new()),
            attach_required: Mutex::new(HashMap::new()),
            in_use: Mutex::new(Vec::new()),
            on_disk: Mutex::new((0, None)),
            reported: Mutex::new(BTreeSet::new()),
        }
    }

    async fn secrets(
        &self,
        r: &Option<(String, String)>,
    ) -> Result<HashMap<String, String>, String> {
        let Some((ns, name)) = r else {
            return Ok(HashMap::new());
        };
        let s = Api::<Secret>::namespaced(self.client.clone(), ns)
            .get(name)
            .await
            .map_err(|e| {
                format!(
                    "fetching secret {ns}/{name} failed: {}",
                    rkube_daemon::client::api_message(&e)
                )
            })?;
        Ok(s.data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
            .collect())
    }

    /// Stages (when the driver stages) and publishes the volume for the pod;
    /// the directory the containers mount. A volume published already (a
    /// restarted kubelet) is left as it is. `Err` is in upstream's event
    /// words (`MountVolume.MountDevice failed …`, `MountVolume.SetUp failed …`).
    pub async fn set_up(&self, p: &Publish<'_>) -> Result<PathBuf, String> {
        let r = self.set_up_volume(p).await;
        self.disk_changed();
        r
    }

    async fn set_up_volume(&self, p: &Publish<'_>) -> Result<PathBuf, String> {
        let uid = p.pod.uid().unwrap_or_default();
        let vol_dir = paths::pod_volume_dir(&self.root, &uid, p.pv);
        let target = vol_dir.join("mount");
        let setup_failed =
            |e: String| format!("MountVolume.SetUp failed for volume {:?} : {e}", p.pv);
        if is_mount_point(&target).unwrap_or(false) {
            return Ok(target);
        }
        let src = p.source;
        paths::check_driver_name(&src.driver).map_err(setup_failed)?;
        let csidriver = match Api::<CSIDriver>::all(self.client.clone())
            .get_opt(&src.driver)
            .await
        {
            Ok(d) => d,
            Err(e) => {
                return Err(setup_failed(format!(
                    "reading CSIDriver {}: {}",
                    src.driver,
                    rkube_daemon::client::api_message(&e)
                )))
            }
        };
        let options = driver_options(&src.driver, csidriver.as_ref()).map_err(setup_failed)?;
        lock(&self.attach_required).insert(src.driver.clone(), options.attach);
        let mut publish_context = HashMap::new();
        if options.attach {
            // Wanted from now on: reported in use before it is attached,
            // and, as upstream, not set up before the Node reports it in
            // use, so that the controller cannot detach it under the pod.
            let unique = attach::unique_name(&src.driver, &src.volume_handle);
            lock(&self.wanted)
                .entry(uid.clone())
                .or_default()
                .insert(unique.clone());
            if !lock(&self.reported).contains(&unique) {
                return Err(format!(
                    "{} for volume {:?} ",
                    attach::NOT_REPORTED_IN_USE,
                    p.pv
                ));
            }
            let name = paths::attachment_name(&src.volume_handle, &src.driver, &self.node_name);
            let va = Api::<VolumeAttachment>::all(self.client.clone())
                .get_opt(&name)
                .await
                .map_err(|e| {
                    format!(
                        "MountVolume.WaitForAttach failed for volume {:?} : volume {} has GET error for volume attachment {name}: {}",
                        p.pv,
                        src.volume_handle,
                        rkube_daemon::client::api_message(&e)
                    )
                })?;
            publish_context =
                attach::attached(va.as_ref(), &src.volume_handle, &name).map_err(|e| {
                    format!(
                        "MountVolume.WaitForAttach failed for volume {:?} : {e}",
                        p.pv
                    )
                })?;
        }
        let channel = self.drivers.channel(&src.driver).map_err(|e| {
            format!(
                "MountVolume.MountDevice failed for volume {:?} : kubernetes.io/csi: attacher.MountDevice failed to create newCsiDriverClient: {e}",
                p.pv
            )
        })?;
        let mut node = v1::node_client::NodeClient::new(channel);
        let caps = node_caps(&mut node).await.map_err(setup_failed)?;
        let capability = |group: Option<u32>| v1::VolumeCapability {
            access_mode: Some(v1::volume_capability::AccessMode {
                mode: access_mode(&src.access_mode, caps.multi_writer) as i32,
            }),
            access_type: Some(v1::volume_capability::AccessType::Mount(
                v1::volume_capability::MountVolume {
                    fs_type: src.fs_type.clone(),
                    mount_flags: p.mount_options.to_vec(),
                    volume_mount_group: group.map(|g| g.to_string()).unwrap_or_default(),
                },
            )),
        };
        let group = p.fs_group.map(|(g, _)| g).filter(|_| caps.mount_group);
        let attributes: HashMap<String, String> = src.attributes.clone().into_iter().collect();
        let mut staging = String::new();
        if caps.stage {
            let path = paths::staging_path(&self.root, &src.driver, &src.volume_handle);
            let data_dir = path.parent().unwrap_or(&path).to_path_buf();
            let device_failed =
                |e: String| format!("MountVolume.MountDevice failed for volume {:?} : {e}", p.pv);
            mkdir_0750(&data_dir).map_err(device_failed)?;
            paths::save(
                &data_dir,
                &VolData {
                    driver_name: src.driver.clone(),
                    volume_handle: src.volume_handle.clone(),
                    ..Default::default()
                },
            )
            .map_err(device_failed)?;
            let secrets = self
                .secrets(&src.stage_secret)
                .await
                .map_err(device_failed)?;
            call(node.node_stage_volume(v1::NodeStageVolumeRequest {
                volume_id: src.volume_handle.clone(),
                publish_context: publish_context.clone(),
                staging_target_path: path.display().to_string(),
                volume_capability: Some(capability(group)),
                secrets,
                volume_context: attributes.clone(),
            }))
            .await
            .map_err(device_failed)?;
            staging = path.display().to_string();
        }
        mkdir_0750(&vol_dir).map_err(setup_failed)?;
        paths::save(
            &vol_dir,
            &VolData {
                spec_vol_id: p.pv.to_string(),
                volume_handle: src.volume_handle.clone(),
                driver_name: src.driver.clone(),
                node_name: self.node_name.clone(),
                lifecycle_mode: "Persistent".into(),
                attachment_id: paths::attachment_name(
                    &src.volume_handle,
                    &src.driver,
                    &self.node_name,
                ),
            },
        )
        .map_err(setup_failed)?;
        let mut context: BTreeMap<String, String> = src.attributes.clone();
        if options.pod_info {
            let sa = p
                .pod
                .spec
                .as_ref()
                .and_then(|s| s.service_account_name.clone())
                .unwrap_or_default();
            context.extend(paths::pod_info(
                &p.pod.name_any(),
                &p.pod.namespace().unwrap_or_default(),
                &uid,
                &sa,
                false,
            ));
        }
        let read_only = p.claim_read_only || src.read_only;
        let secrets = self
            .secrets(&src.publish_secret)
            .await
            .map_err(setup_failed)?;
        call(node.node_publish_volume(v1::NodePublishVolumeRequest {
            volume_id: src.volume_handle.clone(),
            publish_context,
            staging_target_path: staging,
            target_path: target.display().to_string(),
            volume_capability: Some(capability(group)),
            readonly: read_only,
            secrets,
            volume_context: context.into_iter().collect(),
        }))
        .await
        .map_err(setup_failed)?;
        if let (Some((gid, on_root_mismatch)), false) = (p.fs_group, caps.mount_group) {
            if applies_fs_group(
                &options.fs_group_policy,
                &src.fs_type,
                read_only,
                &src.access_modes,
            ) {
                ownership::change(&target, gid, false, on_root_mismatch).map_err(|e| {
                    setup_failed(format!(
                        "applyFSGroup failed for vol {}: {e}",
                        src.volume_handle
                    ))
                })?;
            }
        }
        Ok(target)
    }

    /// The pod no longer wants its volumes (it is gone).
    pub fn forget(&self, uid: &str) {
        lock(&self.wanted).remove(uid);
    }

    /// The volumes that must be attached which the node's pods want or
    /// have published (upstream's `GetVolumesInUse`: the desired and the
    /// actual state), by unique name, sorted: what the Node reports in
    /// `status.volumesInUse`. Published volumes are read from their
    /// `vol_data.json`, so a restarted kubelet reports them at once; a
    /// driver whose CSIDriver cannot be read counts as needing attachment.
    pub async fn volumes_in_use(&self) -> Vec<String> {
        let mut out: BTreeSet<String> = lock(&self.wanted).values().flatten().cloned().collect();
        let (generation, cached) = lock(&self.on_disk).clone();
        let on_disk = match cached {
            Some(v) => v,
            None => {
                let v = self.published(None);
                let mut c = lock(&self.on_disk);
                if c.0 == generation {
                    c.1 = Some(v.clone());
                }
                v
            }
        };
        for d in on_disk {
            let known = lock(&self.attach_required).get(&d.driver_name).copied();
            let attach = match known {
                Some(a) => a,
                None => match Api::<CSIDriver>::all(self.client.clone())
                    .get_opt(&d.driver_name)
                    .await
                {
                    // Unreadable: in use until a set-up reads it (never a
                    // request a second).
                    Ok(c) => {
                        let a =
                            driver_options(&d.driver_name, c.as_ref()).map_or(true, |o| o.attach);
                        lock(&self.attach_required).insert(d.driver_name.clone(), a);
                        a
                    }
                    Err(_) => {
                        lock(&self.attach_required).insert(d.driver_name.clone(), true);
                        true
                    }
                },
            };
            if attach {
                out.insert(attach::unique_name(&d.driver_name, &d.volume_handle));
            }
        }
        out.into_iter().collect()
    }

    /// What is published on disk changed (or may have): read it again.
    fn disk_changed(&self) {
        let mut c = lock(&self.on_disk);
        c.0 += 1;
        c.1 = None;
    }

    /// The volumes in use as last computed.
    pub fn in_use(&self) -> Vec<String> {
        lock(&self.in_use).clone()
    }

    /// The Node's status now reports `volumes` in use.
    pub fn mark_reported(&self, volumes: &[String]) {
        *lock(&self.reported) = volumes.iter().cloned().collect();
    }

    /// Computes the volumes in use once a second, for the Node's status
    /// (the disk is read again only after a set-up or a tear-down).
    pub async fn refresh_in_use(self: Arc<Self>) {
        loop {
            let v = self.volumes_in_use().await;
            *lock(&self.in_use) = v;
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
    }

    /// Every CSI volume published for a pod of the node (but the pod of
    /// directory `except`).
    fn published(&self, except: Option<&Path>) -> Vec<VolData> {
        let Ok(pods) = std::fs::read_dir(self.root.join("pods")) else {
            return Vec::new();
        };
        pods.flatten()
            .filter(|p| except != Some(p.path().as_path()))
            .filter_map(|p| {
                std::fs::read_dir(p.path().join("volumes").join(paths::POD_PLUGIN_DIR)).ok()
            })
            .flat_map(|rd| rd.flatten())
            .filter_map(|v| paths::load(&v.path()).ok())
            .collect()
    }

    /// Unpublishes every CSI volume of the pod directory `pod_dir` (by
    /// their `vol_data.json`, so a restarted kubelet finds them too) and
    /// unstages a volume no other pod of the node still has published.
    pub async fn tear_down(&self, pod_dir: &Path) -> Result<(), String> {
        let r = self.tear_down_volumes(pod_dir).await;
        self.disk_changed();
        r
    }

    async fn tear_down_volumes(&self, pod_dir: &Path) -> Result<(), String> {
        let Ok(rd) = std::fs::read_dir(pod_dir.join("volumes").join(paths::POD_PLUGIN_DIR)) else {
            return Ok(());
        };
        for e in rd.flatten() {
            let vol_dir = e.path();
            let data = match paths::load(&vol_dir) {
                Ok(d) => d,
                // No data: nothing was published here (a failed set-up).
                Err(_) if !is_mount_point(&vol_dir.join("mount")).unwrap_or(false) => {
                    let _ = std::fs::remove_dir(vol_dir.join("mount"));
                    let _ = std::fs::remove_file(vol_dir.join(paths::VOL_DATA));
                    let _ = std::fs::remove_dir(&vol_dir);
                    continue;
                }
                Err(e) => return Err(e),
            };
            paths::check_driver_name(&data.driver_name)?;
            let channel = self.drivers.channel(&data.driver_name)?;
            let mut node = v1::node_client::NodeClient::new(channel);
            let target = vol_dir.join("mount");
            call(node.node_unpublish_volume(v1::NodeUnpublishVolumeRequest {
                volume_id: data.volume_handle.clone(),
                target_path: target.display().to_string(),
            }))
            .await
            .map_err(|e| {
                format!(
                    "UnmountVolume.TearDown failed for volume {:?}: {e}",
                    data.spec_vol_id
                )
            })?;
            if is_mount_point(&target).unwrap_or(true) {
                return Err(format!(
                    "{} is still mounted after NodeUnpublishVolume",
                    target.display()
                ));
            }
            let _ = std::fs::remove_dir(&target);
            let _ = std::fs::remove_file(vol_dir.join(paths::VOL_DATA));
            let _ = std::fs::remove_dir(&vol_dir);
            if !self.published_elsewhere(&data, pod_dir) {
                self.unstage(&mut node, &data).await?;
            }
        }
        Ok(())
    }

    /// Whether another pod of the node has the volume published.
    fn published_elsewhere(&self, data: &VolData, pod_dir: &Path) -> bool {
        self.published(Some(pod_dir))
            .iter()
            .any(|d| d.driver_name == data.driver_name && d.volume_handle == data.volume_handle)
    }

    async fn unstage(
        &self,
        node: &mut v1::node_client::NodeClient<tonic::transport::Channel>,
        data: &VolData,
    ) -> Result<(), String> {
        let caps = node_caps(node).await?;
        if !caps.stage {
            return Ok(());
        }
        let path = paths::staging_path(&self.root, &data.driver_name, &data.volume_handle);
        if !path.exists() && !path.parent().is_some_and(|p| p.exists()) {
            return Ok(());
        }
        call(node.node_unstage_volume(v1::NodeUnstageVolumeRequest {
            volume_id: data.volume_handle.clone(),
            staging_target_path: path.display().to_string(),
        }))
        .await
        .map_err(|e| {
            format!(
                "UnmountDevice failed for volume {:?}: {e}",
                data.volume_handle
            )
        })?;
        if is_mount_point(&path).unwrap_or(true) {
            return Err(format!(
                "{} is still mounted after NodeUnstageVolume",
                path.display()
            ));
        }
        let _ = std::fs::remove_dir(&path);
        if let Some(dir) = path.parent() {
            let _ = std::fs::remove_file(dir.join(paths::VOL_DATA));
            let _ = std::fs::remove_dir(dir);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn driver(spec: serde_json::Value) -> CSIDriver {
        serde_json::from_value(json!({"metadata": {"name": "d"}, "spec": spec})).unwrap()
    }

    #[test]
    fn driver_options_are_read_and_what_rkube_cannot_do_is_refused() {
        // No CSIDriver, or attachRequired left out: attached first.
        assert!(driver_options("d", None).unwrap().attach);
        assert!(
            driver_options("d", Some(&driver(json!({}))))
                .unwrap()
                .attach
        );
        let ok = driver_options(
            "d",
            Some(&driver(
                json!({"attachRequired": false, "podInfoOnMount": true}),
            )),
        )
        .unwrap();
        assert_eq!(
            ok,
            DriverOptions {
                attach: false,
                pod_info: true,
                fs_group_policy: "ReadWriteOnceWithFSType".into()
            }
        );
        assert!(driver_options(
            "d",
            Some(&driver(
                json!({"attachRequired": false, "tokenRequests": [{"audience": "a"}]})
            ))
        )
        .unwrap_err()
        .contains("tokenRequests"));
        assert!(driver_options(
            "d",
            Some(&driver(
                json!({"attachRequired": false, "requiresRepublish": true})
            ))
        )
        .unwrap_err()
        .contains("requiresRepublish"));
        assert_eq!(
            driver_options(
                "d",
                Some(&driver(
                    json!({"attachRequired": false, "volumeLifecycleModes": ["Ephemeral"]})
                ))
            )
            .unwrap_err(),
            "volume mode \"Persistent\" not supported by driver d (only supports [\"Ephemeral\"])"
        );
    }

    #[test]
    fn fs_group_is_applied_as_upstreams_policy_says() {
        let rwo = vec!["ReadWriteOnce".to_string()];
        let rwx = vec!["ReadWriteMany".to_string()];
        assert!(applies_fs_group(
            "ReadWriteOnceWithFSType",
            "ext4",
            false,
            &rwo
        ));
        assert!(!applies_fs_group(
            "ReadWriteOnceWithFSType",
            "",
            false,
            &rwo
        ));
        assert!(!applies_fs_group(
            "ReadWriteOnceWithFSType",
            "ext4",
            false,
            &rwx
        ));
        assert!(applies_fs_group("File", "", false, &rwx));
        assert!(!applies_fs_group("File", "", true, &rwx));
        assert!(!applies_fs_group("None", "ext4", false, &rwo));
    }

    #[test]
    fn access_modes_map_as_upstream() {
        assert_eq!(access_mode("ReadWriteOnce", false), Mode::SingleNodeWriter);
        assert_eq!(
            access_mode("ReadWriteOnce", true),
            Mode::SingleNodeMultiWriter
        );
        assert_eq!(
            access_mode("ReadWriteOncePod", false),
            Mode::SingleNodeWriter
        );
        assert_eq!(
            access_mode("ReadWriteOncePod", true),
            Mode::SingleNodeSingleWriter
        );
        assert_eq!(
            access_mode("ReadOnlyMany", false),
            Mode::MultiNodeReaderOnly
        );
        assert_eq!(
            access_mode("ReadWriteMany", true),
            Mode::MultiNodeMultiWriter
        );
    }
}
