//! Pod spec → CRI configs: labels, directories, image pull policy, the
//! sandbox config (security context, sysctls, the QoS cgroup parent) and
//! the container config of [`super::cri::CriRuntime`]: the environment
//! ([`super::env`]), command and args with `$(VAR)` expanded, mounts, the
//! security context ([`super::security`], `runAsNonRoot` checked against
//! the image's user) and resources ([`super::resources`]).
//!
//! Volumes mounted: `emptyDir` (a directory under the kubelet root;
//! `medium: Memory` a tmpfs, sized by `sizeLimit`), `hostPath`
//! (`DirectoryOrCreate`/`FileOrCreate` create the path; other types are
//! used as they are), and ConfigMap, Secret, downwardAPI and projected
//! volumes (written by [`crate::volumes::manager`], always read-only, as
//! upstream), and PersistentVolumeClaim and generic ephemeral volumes as
//! [`crate::volumes::manager::VolumeManager::claims`] set them up
//! (read-only when the claim is; the PersistentVolume's GID annotation
//! becomes a supplemental group). `subPath` is resolved beneath the volume without leaving it
//! ([`crate::volumes::subpath`]). Any other volume type is refused: the
//! container fails with `CreateContainerConfigError` naming it, instead of
//! running without its volume.

pub mod etc_hosts;
pub mod go_json;
pub mod hash;
pub mod ports;
pub mod resize;
pub mod resources;
pub mod security;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, Pod, Volume};
use kube::ResourceExt;
use rkube_cri::{v1, ContainerSpec, SandboxSpec};
use rkube_model::quantity::Quantity;

use self::resources::ResourceOptions;
use self::security::{ImageUser, SecurityOptions};
use super::termination;
use crate::network::dns;
use crate::pod::env::{self, EnvSources};
use crate::pod::{host_network, pod_hostname, pod_namespace, Dirs};
use crate::volumes::host_path::check_host_path_type;
use crate::volumes::manager::Claims;
use crate::volumes::{empty_dir, payload, subpath};

/// Label with the pod's UID on sandboxes and containers (as upstream's).
pub const LABEL_POD_UID: &str = "io.kubernetes.pod.uid";
/// Label with the pod's name.
pub const LABEL_POD_NAME: &str = "io.kubernetes.pod.name";
/// Label with the pod's namespace.
pub const LABEL_POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
/// Label with the container's name.
pub const LABEL_CONTAINER_NAME: &str = "io.kubernetes.container.name";
/// Annotation with the image a container was created for (a new one in
/// the spec restarts it, as upstream's container hash does).
pub const ANNOTATION_IMAGE: &str = "io.rkube.container.image";
/// Marks sandboxes and containers rkube's kubelet made.
pub const LABEL_MANAGED: &str = "io.rkube.kubelet";
/// Marks sandboxes of static pods (run from files, not from the API).
pub const LABEL_STATIC: &str = "io.rkube.static-pod";
/// The labels of a pod's sandbox: the pod's own plus the kubelet's.
pub fn sandbox_labels(pod: &Pod, is_static: bool) -> HashMap<String, String> {
    let mut l: HashMap<String, String> = pod
        .labels()
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    l.insert(LABEL_POD_UID.into(), pod.uid().unwrap_or_default());
    l.insert(LABEL_POD_NAME.into(), pod.name_any());
    l.insert(LABEL_POD_NAMESPACE.into(), pod_namespace(pod));
    l.insert(LABEL_MANAGED.into(), "true".into());
    if is_static {
        l.insert(LABEL_STATIC.into(), "true".into());
    }
    l
}

/// The sandbox config of `pod` (attempt `attempt`): its hostname (none on
/// the host network: the node's), security context and sysctls, and the
/// QoS cgroup parent. `Err` when the pod asks for something the node cannot
/// enforce (see [`super::security`]). The resolver configuration is added
/// when the sandbox is made ([`crate::network::dns`]).
pub fn sandbox_config(
    pod: &Pod,
    dirs: &Dirs,
    attempt: u32,
    is_static: bool,
    security: &SecurityOptions,
    cluster_domain: &str,
) -> Result<v1::PodSandboxConfig, String> {
    let ns = pod_namespace(pod);
    let name = pod.name_any();
    let uid = pod.uid().unwrap_or_default();
    let hostname = match host_network(pod) {
        true => String::new(),
        false => dns::kernel_hostname(
            pod,
            &pod_hostname(pod),
            &dns::pod_domain(pod, cluster_domain),
        )?,
    };
    let mut config = SandboxSpec {
        log_directory: dirs.pod_logs(&ns, &name, &uid).display().to_string(),
        name,
        namespace: ns,
        uid,
        attempt,
        hostname,
        host_network: host_network(pod),
        cgroup_parent: resources::pod_cgroup_parent(pod, ""),
        labels: sandbox_labels(pod, is_static),
        // Upstream's newPodAnnotations: the pod's own.
        annotations: pod
            .annotations()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    }
    .to_config();
    config.port_mappings = ports::port_mappings(pod);
    let (sc, sysctls) = security::sandbox_security(pod, security)?;
    if let Some(linux) = config.linux.as_mut() {
        linux.security_context = Some(sc);
        linux.sysctls = sysctls;
    }
    Ok(config)
}

/// Whether the volume is one [`mounts`] can mount.
pub fn supported_volume(v: &Volume) -> bool {
    v.empty_dir.is_some()
        || v.host_path.is_some()
        || v.persistent_volume_claim.is_some()
        || v.ephemeral.is_some()
        || payload::plugin_dir(v).is_some()
}

/// The volume's type as the API names it (for refusals).
pub fn volume_type(v: &Volume) -> &'static str {
    let j = serde_json::to_value(v).unwrap_or_default();
    const KNOWN: &[&str] = &[
        "awsElasticBlockStore",
        "azureDisk",
        "azureFile",
        "cephfs",
        "cinder",
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "fc",
        "flexVolume",
        "flocker",
        "gcePersistentDisk",
        "gitRepo",
        "glusterfs",
        "hostPath",
        "image",
        "iscsi",
        "nfs",
        "persistentVolumeClaim",
        "photonPersistentDisk",
        "portworxVolume",
        "projected",
        "quobyte",
        "rbd",
        "scaleIO",
        "secret",
        "storageos",
        "vsphereVolume",
    ];
    KNOWN
        .iter()
        .find(|k| j.get(**k).is_some())
        .copied()
        .unwrap_or("unknown")
}

/// An emptyDir is writable by every user (upstream's `setupDir`: 0777, so
/// non-root containers can write to it); with an fsGroup it belongs to that
/// group and is setgid, so what containers create there does too
/// (upstream's `SetVolumeOwnership` on the fresh directory).
fn empty_dir_ownership(dir: &Path, fs_group: Option<i64>) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    // rwx for all, as upstream's setupDir; a sticky bit (a tmpfs root's)
    // is kept, as upstream's chmod of only the permission bits keeps it.
    let sticky = std::fs::metadata(dir)
        .map(|m| m.permissions().mode() & 0o1000)
        .unwrap_or(0);
    let mut mode = 0o777 | sticky;
    if let Some(g) = fs_group {
        let gid = u32::try_from(g).map_err(|_| format!("invalid fsGroup {g}"))?;
        std::os::unix::fs::lchown(dir, None, Some(gid))
            .map_err(|e| format!("chown emptyDir {}: {e}", dir.display()))?;
        mode |= 0o2000;
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("chmod emptyDir {}: {e}", dir.display()))
}

/// The host directory of volume `v` of pod `uid`, creating emptyDir and
/// `*OrCreate` hostPath paths (a `medium: Memory` emptyDir is a tmpfs).
fn volume_host_path(
    uid: &str,
    v: &Volume,
    dirs: &Dirs,
    fs_group: Option<i64>,
    claims: &Claims,
) -> Result<PathBuf, String> {
    if v.persistent_volume_claim.is_some() || v.ephemeral.is_some() {
        return claims
            .get(&v.name)
            .map(|c| c.host_path.clone())
            .ok_or_else(|| format!("volume {:?}: its claim is not set up", v.name));
    }
    if let Some(e) = &v.empty_dir {
        let d = dirs.empty_dir(uid, &v.name);
        std::fs::create_dir_all(&d)
            .map_err(|e| format!("creating emptyDir {}: {e}", d.display()))?;
        match e.medium.as_deref() {
            None | Some("") => {}
            Some("Memory") => {
                let size = e
                    .size_limit
                    .as_ref()
                    .map(|q| Quantity::parse(&q.0).map(|q| q.value()))
                    .transpose()
                    .map_err(|err| format!("emptyDir {}: sizeLimit: {err}", v.name))?;
                empty_dir::mount_tmpfs(&d, size)?;
            }
            Some(other) => {
                return Err(format!(
                    "emptyDir {}: medium {other:?} is not supported by rkube",
                    v.name
                ))
            }
        }
        empty_dir_ownership(&d, fs_group)?;
        return Ok(d);
    }
    if let Some(h) = &v.host_path {
        let p = PathBuf::from(&h.path);
        check_host_path_type(&p, h.type_.as_deref().unwrap_or(""))?;
        return Ok(p);
    }
    if let Some(plugin) = payload::plugin_dir(v) {
        return Ok(dirs.volume_dir(uid, plugin, &v.name));
    }
    Err(format!(
        "volume {:?}: volumes of type {} are not supported by rkube",
        v.name,
        volume_type(v)
    ))
}

/// The mounts of container `c`. ConfigMap, Secret, downwardAPI and
/// projected volumes are mounted read-only whatever the mount says; a
/// `subPath` (or `subPathExpr` expanded from the container's final
/// environment `env`) is bind-mounted from beneath its volume.
pub fn mounts(
    pod: &Pod,
    c: &Container,
    dirs: &Dirs,
    env: &[(String, String)],
    claims: &Claims,
) -> Result<Vec<v1::Mount>, String> {
    let uid = pod.uid().unwrap_or_default();
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
    let mut out = Vec::new();
    for (index, m) in c.volume_mounts.iter().flatten().enumerate() {
        let Some(v) = volumes.and_then(|vs| vs.iter().find(|v| v.name == m.name)) else {
            return Err(format!("volume mount {}: no volume of that name", m.name));
        };
        let fs_group = pod
            .spec
            .as_ref()
            .and_then(|s| s.security_context.as_ref())
            .and_then(|s| s.fs_group);
        let host = volume_host_path(&uid, v, dirs, fs_group, claims)?;
        let sub = match m.sub_path_expr.as_deref().filter(|s| !s.is_empty()) {
            Some(expr) => Some(expand_sub_path_expr(expr, env)?),
            None => m.sub_path.clone().filter(|s| !s.is_empty()),
        };
        let host = match sub {
            Some(sub) => {
                let target = subpath::target_path(&dirs.pod_dir(&uid), &v.name, &c.name, index);
                subpath::prepare(&host, &sub, &target).map_err(|e| e.to_string())?
            }
            None => host,
        };
        // `IfPossible` may fall back to a plain read-only mount, as upstream
        // does on a runtime without recursive read-only mounts; `Enabled`
        // may not (submounts would stay writable).
        if m.recursive_read_only.as_deref() == Some("Enabled") {
            return Err(format!(
                "volume mount {}: recursiveReadOnly: Enabled is not supported by rkube (submounts would stay writable)",
                m.name
            ));
        }
        // Upstream's mounter attributes: API data volumes and read-only
        // claims are mounted read-only whatever the mount says.
        let api_data = payload::plugin_dir(v).is_some();
        let read_only_claim = claims.get(&v.name).is_some_and(|c| c.read_only);
        out.push(v1::Mount {
            container_path: m.mount_path.clone(),
            host_path: host.display().to_string(),
            readonly: m.read_only.unwrap_or(false) || api_data || read_only_claim,
            propagation: propagation(m.mount_propagation.as_deref())? as i32,
            ..Default::default()
        });
    }
    Ok(out)
}

/// The longest `subPathExpr` expansion accepted (a path: `PATH_MAX`).
const MAX_SUB_PATH: usize = 4096;

/// upstream's `ExpandContainerVolumeMounts`: `$(NAME)` replaced from `env`
/// (the last definition of a name wins); a name undefined or empty is an
/// error naming every such name, sorted.
fn expand_sub_path_expr(expr: &str, env: &[(String, String)]) -> Result<String, String> {
    let map: HashMap<&str, &str> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let missing = std::cell::RefCell::new(std::collections::BTreeSet::new());
    let expanded = crate::pod::env::expand(
        expr,
        |name| {
            let v = map.get(name).copied().unwrap_or("");
            if v.is_empty() {
                missing.borrow_mut().insert(name.to_string());
            }
            Some(v.to_string())
        },
        MAX_SUB_PATH,
    )
    .ok_or_else(|| format!("subPathExpr {expr:?} expands to more than {MAX_SUB_PATH} bytes"))?;
    let missing = missing.into_inner();
    if !missing.is_empty() {
        let names: Vec<String> = missing.into_iter().collect();
        return Err(format!("missing value for {}", names.join(", ")));
    }
    Ok(expanded)
}

/// `mountPropagation` → CRI.
fn propagation(p: Option<&str>) -> Result<v1::MountPropagation, String> {
    Ok(match p {
        None | Some("") | Some("None") => v1::MountPropagation::PropagationPrivate,
        Some("HostToContainer") => v1::MountPropagation::PropagationHostToContainer,
        Some("Bidirectional") => v1::MountPropagation::PropagationBidirectional,
        Some(other) => return Err(format!("invalid mountPropagation {other:?}")),
    })
}

/// The log path (relative to the sandbox log dir) of attempt `attempt`.
pub fn log_path(container: &str, attempt: u32) -> String {
    format!("{container}/{attempt}.log")
}

/// What a container config is made from besides the pod and the
/// container: what its environment reads, its image's user, and the node's
/// side of security contexts and resources.
pub struct ContainerInputs<'a> {
    /// ConfigMaps, Secrets, Services, downward API context.
    pub env: EnvSources<'a>,
    /// The image's user (`ImageStatus`).
    pub image: ImageUser,
    /// Seccomp root, AppArmor, sysctls.
    pub security: &'a SecurityOptions,
    /// Node memory, cgroup version, CFS quota.
    pub resources: &'a ResourceOptions,
    /// The node's `clusterDomain` (the pod's FQDN in `/etc/hosts`).
    pub cluster_domain: &'a str,
    /// What the container runs with for its device plugin devices.
    pub devices: Option<&'a crate::devices::RunOptions>,
    /// The CDI devices of its ResourceClaims.
    pub claim_cdi: &'a [String],
    /// The pod's PersistentVolumeClaim volumes, set up.
    pub claims: &'a Claims,
}

/// The container config of `c` (attempt `attempt`). `Err` is the message
/// of `CreateContainerConfigError`.
pub fn container_config(
    pod: &Pod,
    c: &Container,
    attempt: u32,
    dirs: &Dirs,
    inputs: &ContainerInputs,
) -> Result<v1::ContainerConfig, String> {
    security::verify_run_as_non_root(pod, c, inputs.image.uid, &inputs.image.username)?;
    let own_env = env::container_env(pod, c, &inputs.env)?;
    // Device plugins' environment first, the container's own after it (as
    // upstream's run options); both expand in the command.
    let mut env: Vec<(String, String)> = inputs.devices.map(|d| d.envs.clone()).unwrap_or_default();
    env.extend(own_env.iter().cloned());
    let (command, args) = env::expand_command_and_args(c, &env)?;
    let mut mounts = inputs.devices.map(device_mounts).unwrap_or_default();
    mounts.extend(self::mounts(pod, c, dirs, &own_env, inputs.claims)?);
    mounts.extend(etc_hosts::prepare(
        pod,
        c,
        dirs,
        &inputs.env.downward.pod_ips,
        inputs.cluster_domain,
    )?);
    let message_file =
        termination::host_file(dirs, &pod.uid().unwrap_or_default(), &c.name, attempt);
    mounts.extend(termination::prepare(c, &message_file)?);
    let mut security_context =
        security::container_security(pod, c, &inputs.image, inputs.security)?;
    // The GIDs the pod's PersistentVolumes ask for, after the pod's own
    // groups (upstream's GetExtraSupplementalGroupsForPod).
    let mut extra: Vec<i64> = inputs.claims.values().filter_map(|c| c.gid).collect();
    extra.sort_unstable();
    extra.dedup();
    for g in extra {
        if !security_context.supplemental_groups.contains(&g) {
            security_context.supplemental_groups.push(g);
        }
    }
    let labels: HashMap<String, String> = [
        (LABEL_POD_UID, pod.uid().unwrap_or_default()),
        (LABEL_POD_NAME, pod.name_any()),
        (LABEL_POD_NAMESPACE, pod_namespace(pod)),
        (LABEL_CONTAINER_NAME, c.name.clone()),
        (LABEL_MANAGED, "true".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let mut config = ContainerSpec {
        name: c.name.clone(),
        attempt,
        image: c.image.clone().unwrap_or_default(),
        command,
        args,
        working_dir: c.working_dir.clone().unwrap_or_default(),
        env,
        log_path: log_path(&c.name, attempt),
        labels,
        annotations: with_device_annotations(
            container_annotations(pod, c, attempt),
            inputs.devices,
        ),
    }
    .to_config();
    config.mounts = mounts;
    if let Some(d) = inputs.devices {
        config.devices = d
            .devices
            .iter()
            .map(|d| v1::Device {
                container_path: d.container_path.clone(),
                host_path: d.host_path.clone(),
                permissions: d.permissions.clone(),
            })
            .collect();
    }
    // The claims' CDI devices, then the device plugins' (upstream's order).
    config.cdi_devices = inputs
        .claim_cdi
        .iter()
        .chain(inputs.devices.iter().flat_map(|d| &d.cdi_devices))
        .map(|name| v1::CdiDevice { name: name.clone() })
        .collect();
    config.stdin = c.stdin.unwrap_or(false);
    config.stdin_once = c.stdin_once.unwrap_or(false);
    config.tty = c.tty.unwrap_or(false);
    config.linux = Some(v1::LinuxContainerConfig {
        resources: Some(resources::container_resources(pod, c, inputs.resources)),
        security_context: Some(security_context),
    });
    Ok(config)
}

/// Whether the runtime `name` at `version` injects CDI devices (`names`, a
/// device plugin's or a claim's): containerd before 1.7 ignores CRI's `CDIDevices`, and
/// the container would start without them. Other runtimes are trusted.
pub fn cdi_supported(name: &str, version: &str, names: &[String]) -> Result<(), String> {
    if name != "containerd" {
        return Ok(());
    }
    let mut parts = version
        .trim_start_matches('v')
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    if (major, minor) >= (1, 7) {
        return Ok(());
    }
    Err(format!(
        "the container runtime (containerd {version}) does not support CDI devices, which this container is given (by a device plugin or a ResourceClaim): {}",
        names.join(", ")
    ))
}

/// A device plugin's bind mounts as CRI mounts (private propagation, no
/// relabelling), before the container's volumes.
fn device_mounts(d: &crate::devices::RunOptions) -> Vec<v1::Mount> {
    d.mounts
        .iter()
        .map(|m| v1::Mount {
            container_path: m.container_path.clone(),
            host_path: m.host_path.clone(),
            readonly: m.read_only,
            propagation: v1::MountPropagation::PropagationPrivate as i32,
            ..Default::default()
        })
        .collect()
}

/// The kubelet's annotations over the device plugins' (upstream's
/// `newContainerAnnotations`: the kubelet's win a conflict).
fn with_device_annotations(
    own: HashMap<String, String>,
    devices: Option<&crate::devices::RunOptions>,
) -> HashMap<String, String> {
    let mut out: HashMap<String, String> = devices
        .map(|d| d.annotations.iter().cloned().collect())
        .unwrap_or_default();
    out.extend(own);
    out
}

/// Upstream's `io.kubernetes.container.hash`.
pub const ANNOTATION_HASH: &str = "io.kubernetes.container.hash";
/// Upstream's `io.kubernetes.container.restartCount`.
pub const ANNOTATION_RESTART_COUNT: &str = "io.kubernetes.container.restartCount";

/// The annotations of a container, upstream's (`newContainerAnnotations`:
/// hash, restart count, termination message path and policy, the pod's
/// grace periods, the preStop handler and ports as Go's JSON writes them)
/// and rkube's own (the resources it was given, for in-place resizes; the
/// image, read by rkube before the hash).
pub fn container_annotations(pod: &Pod, c: &Container, attempt: u32) -> HashMap<String, String> {
    let mut a = HashMap::from([
        (ANNOTATION_HASH.to_string(), hash::container_hash_hex(c)),
        (ANNOTATION_RESTART_COUNT.to_string(), attempt.to_string()),
        (
            "io.kubernetes.container.terminationMessagePath".to_string(),
            c.termination_message_path.clone().unwrap_or_default(),
        ),
        (
            "io.kubernetes.container.terminationMessagePolicy".to_string(),
            c.termination_message_policy.clone().unwrap_or_default(),
        ),
        (
            ANNOTATION_IMAGE.to_string(),
            c.image.clone().unwrap_or_default(),
        ),
    ]);
    if let Some(g) = pod.metadata.deletion_grace_period_seconds {
        a.insert(
            "io.kubernetes.pod.deletionGracePeriod".into(),
            g.to_string(),
        );
    }
    if let Some(g) = pod
        .spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
    {
        a.insert(
            "io.kubernetes.pod.terminationGracePeriod".into(),
            g.to_string(),
        );
    }
    if let Some(pre_stop) = c.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref()) {
        a.insert(
            "io.kubernetes.container.preStopHandler".into(),
            go_json::lifecycle_handler(pre_stop),
        );
    }
    if let Some(ports) = c.ports.as_ref().filter(|p| !p.is_empty()) {
        a.insert(
            "io.kubernetes.container.ports".into(),
            go_json::container_ports(ports),
        );
    }
    a
}

/// Whether the spec asks `c` to run another definition than the instance
/// `running` was made for: upstream's container hash against the one it
/// carries (`io.kubernetes.container.hash`, written by either kubelet);
/// instances with neither the hash nor rkube's image annotation never
/// differ.
pub fn definition_changed(c: &Container, running: &v1::Container) -> bool {
    if let Some(h) = running.annotations.get(ANNOTATION_HASH) {
        return *h != hash::container_hash_hex(c);
    }
    running
        .annotations
        .get(ANNOTATION_IMAGE)
        .is_some_and(|i| Some(i) != c.image.as_ref())
}

/// The crash-loop (and image pull) back-off key of a container, as
/// upstream's `GetBackoffKey`: the pod and container, and what resets the
/// back-off when it changes (the image, the resources).
pub fn backoff_key(pod: &Pod, c: &Container) -> String {
    format!(
        "{}/{}/{}/{}",
        pod.uid().unwrap_or_default(),
        c.name,
        c.image.as_deref().unwrap_or_default(),
        serde_json::to_string(&c.resources).unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cdi_needs_containerd_1_7() {
        let names = ["example.com/resource=CDI-Dev-1".to_string()];
        let e = cdi_supported("containerd", "1.6.20~ds1", &names).unwrap_err();
        assert!(
            e.contains("containerd 1.6.20~ds1") && e.ends_with("CDI-Dev-1"),
            "{e}"
        );
        assert!(cdi_supported("containerd", "v1.6.38", &names).is_err());
        for ok in ["1.7.0", "v2.1.4", "1.10.1"] {
            assert_eq!(cdi_supported("containerd", ok, &names), Ok(()), "{ok}");
        }
        assert_eq!(cdi_supported("cri-o", "1.20.0", &names), Ok(()));
    }

    #[test]
    fn sub_path_expr_expands_from_the_final_environment() {
        let env = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let e = env(&[
            ("POD_NAME", "foo"),
            ("ANNOTATION", "mypath"),
            ("POD_NAME", "bar"),
        ]);
        assert_eq!(
            expand_sub_path_expr("$(ANNOTATION)/$(POD_NAME)", &e).unwrap(),
            "mypath/bar"
        );
        assert_eq!(expand_sub_path_expr("a/$$(X)", &e).unwrap(), "a/$(X)");
        // An undefined or empty name is an error, as upstream's (sorted).
        let e = env(&[("EMPTY", ""), ("POD_NAME", "foo")]);
        assert_eq!(
            expand_sub_path_expr("$(ZED)/$(EMPTY)/$(POD_NAME)", &e).unwrap_err(),
            "missing value for EMPTY, ZED"
        );
        let big = env(&[("X", &"x".repeat(5000))]);
        assert!(expand_sub_path_expr("$(X)", &big)
            .unwrap_err()
            .contains("more than 4096 bytes"));
    }

    #[test]
    fn containers_carry_upstreams_annotations() {
        let tmp = crate::scratch::Scratch::new("cri-spec-annotations");
        let dirs = Dirs::under(tmp.path());
        let mut p = pod();
        p.metadata.deletion_grace_period_seconds = Some(7);
        p.spec.as_mut().unwrap().termination_grace_period_seconds = Some(30);
        let c = &mut p.spec.as_mut().unwrap().containers[0];
        c.termination_message_path = Some("/dev/termination-log".into());
        c.termination_message_policy = Some("File".into());
        c.ports = Some(vec![serde_json::from_value(
            json!({"containerPort": 80, "protocol": "TCP"}),
        )
        .unwrap()]);
        c.lifecycle =
            Some(serde_json::from_value(json!({"preStop": {"sleep": {"seconds": 3}}})).unwrap());
        let c = c.clone();
        let a = container_annotations(&p, &c, 2);
        assert_eq!(a[ANNOTATION_HASH], hash::container_hash_hex(&c));
        assert_eq!(a[ANNOTATION_RESTART_COUNT], "2");
        assert_eq!(
            a["io.kubernetes.container.terminationMessagePath"],
            "/dev/termination-log"
        );
        assert_eq!(
            a["io.kubernetes.container.terminationMessagePolicy"],
            "File"
        );
        assert_eq!(a["io.kubernetes.pod.deletionGracePeriod"], "7");
        assert_eq!(a["io.kubernetes.pod.terminationGracePeriod"], "30");
        assert_eq!(
            a["io.kubernetes.container.preStopHandler"],
            r#"{"sleep":{"seconds":3}}"#
        );
        assert_eq!(
            a["io.kubernetes.container.ports"],
            r#"[{"containerPort":80,"protocol":"TCP"}]"#
        );
        // A container upstream's kubelet made: only its hash decides.
        let upstream = v1::Container {
            annotations: [(ANNOTATION_HASH.to_string(), hash::container_hash_hex(&c))].into(),
            ..Default::default()
        };
        assert!(!definition_changed(&c, &upstream));
        let mut moved = c.clone();
        moved.image = Some("busybox:2".into());
        assert!(definition_changed(&moved, &upstream));
        let mut other = c.clone();
        other.command = Some(vec!["true".into()]);
        assert!(!definition_changed(&other, &upstream), "not a hashed field");
        // The sandbox carries the pod's annotations, as upstream's.
        let sb = sandbox_config(
            &p,
            &dirs,
            0,
            false,
            &SecurityOptions::for_root(tmp.path()),
            "",
        )
        .unwrap();
        assert_eq!(sb.annotations.get("a").map(String::as_str), Some("b"));
    }

    #[test]
    fn a_new_image_changes_the_definition_and_the_back_off_key() {
        let tmp = crate::scratch::Scratch::new("cri-spec-definition");
        let dirs = Dirs::under(tmp.path());
        let p = pod();
        let cfg = config_of(&p, &dirs, 0).unwrap();
        let instance = v1::Container {
            annotations: cfg.annotations.clone(),
            ..Default::default()
        };
        let mut c = p.spec.as_ref().unwrap().containers[0].clone();
        assert!(!definition_changed(&c, &instance));
        let key = backoff_key(&p, &c);
        assert_eq!(backoff_key(&p, &c), key);
        c.image = Some("other:2".into());
        assert!(definition_changed(&c, &instance));
        assert_ne!(backoff_key(&p, &c), key);
        // instances made before the annotation never count as changed
        assert!(!definition_changed(&c, &v1::Container::default()));
    }

    #[test]
    fn the_hostname_is_the_override_else_the_hostname_else_the_name() {
        let p = |spec: serde_json::Value| -> Pod {
            serde_json::from_value(serde_json::json!({"metadata": {"name": "web-0"}, "spec": spec}))
                .unwrap()
        };
        assert_eq!(
            pod_hostname(&p(serde_json::json!({"containers": []}))),
            "web-0"
        );
        assert_eq!(
            pod_hostname(&p(serde_json::json!({"containers": [], "hostname": "h"}))),
            "h"
        );
        assert_eq!(
            pod_hostname(&p(
                serde_json::json!({"containers": [], "hostname": "h", "hostnameOverride": "o.example"})
            )),
            "o.example"
        );
    }
    use serde_json::json;

    fn pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "u1",
                         "labels": {"app": "web"}, "annotations": {"a": "b"}},
            "spec": {"nodeName": "n1",
                "securityContext": {"runAsNonRoot": true, "runAsUser": 1000,
                                    "sysctls": [{"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"}]},
                "containers": [{"name": "c", "image": "busybox:1",
                "command": ["sh", "-c", "echo $(GREETING)"], "args": ["$(GREETING)", "$$(GREETING)"],
                "env": [{"name": "GREETING", "value": "hi"}],
                "resources": {"requests": {"cpu": "250m"}, "limits": {"memory": "64Mi"}},
                "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                                    "capabilities": {"drop": ["ALL"]}},
                "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"},
                                 {"name": "cfg", "mountPath": "/cfg"}]}],
                "volumes": [{"name": "scratch", "emptyDir": {}},
                            {"name": "cfg", "configMap": {"name": "x"}}]}
        }))
        .unwrap()
    }

    fn config_of(p: &Pod, dirs: &Dirs, image_uid: i64) -> Result<v1::ContainerConfig, String> {
        config_with(p, dirs, image_uid, &Claims::new())
    }

    fn config_with(
        p: &Pod,
        dirs: &Dirs,
        image_uid: i64,
        claims: &Claims,
    ) -> Result<v1::ContainerConfig, String> {
        let none = HashMap::new();
        let no_secrets = HashMap::new();
        let downward = crate::pod::downward::DownwardContext::default();
        let security = SecurityOptions::for_root(&dirs.root);
        let resources = ResourceOptions::new(8 << 30);
        let inputs = ContainerInputs {
            env: EnvSources {
                config_maps: &none,
                secrets: &no_secrets,
                services: &[],
                master_service: None,
                downward: &downward,
            },
            image: ImageUser::from_status(Some(image_uid), ""),
            security: &security,
            resources: &resources,
            cluster_domain: "cluster.local",
            devices: None,
            claim_cdi: &[],
            claims,
        };
        container_config(p, &p.spec.as_ref().unwrap().containers[0], 3, dirs, &inputs)
    }

    #[test]
    fn claims_mount_their_volume_read_only_when_claimed_so_with_its_group() {
        let tmp = std::env::temp_dir().join(format!("rkube-cri-claims-{}", std::process::id()));
        let dirs = Dirs::under(&tmp);
        let mut p = pod();
        p.spec.as_mut().unwrap().volumes.as_mut().unwrap()[1] = serde_json::from_value(
            json!({"name": "cfg", "persistentVolumeClaim": {"claimName": "data", "readOnly": true}}),
        )
        .unwrap();
        let claims: Claims = [(
            "cfg".to_string(),
            crate::volumes::manager::ClaimMount {
                host_path: PathBuf::from("/mnt/disks/a"),
                read_only: true,
                gid: Some(5555),
            },
        )]
        .into();
        let cfg = config_with(&p, &dirs, 1000, &claims).unwrap();
        let m = cfg
            .mounts
            .iter()
            .find(|m| m.container_path == "/cfg")
            .unwrap();
        assert_eq!(m.host_path, "/mnt/disks/a");
        assert!(m.readonly, "a read-only claim mounts read-only");
        let groups = &cfg
            .linux
            .as_ref()
            .unwrap()
            .security_context
            .as_ref()
            .unwrap()
            .supplemental_groups;
        assert_eq!(groups.last(), Some(&5555), "{groups:?}");
        let _ = std::fs::remove_dir_all(&tmp);
    }

    #[test]
    fn container_config_carries_env_mounts_security_and_resources() {
        let tmp = std::env::temp_dir().join(format!("rkube-cri-spec-{}", std::process::id()));
        let dirs = Dirs::under(&tmp);
        let p = pod();
        let cfg = config_of(&p, &dirs, 0).unwrap();
        assert_eq!(cfg.log_path, "c/3.log");
        assert_eq!(cfg.metadata.as_ref().unwrap().attempt, 3);
        assert_eq!(cfg.command, vec!["sh", "-c", "echo hi"], "$(VAR) expanded");
        assert_eq!(cfg.args, vec!["hi", "$(GREETING)"], "$$ escapes");
        assert_eq!(cfg.mounts.len(), 2);
        assert_eq!(cfg.mounts[0].container_path, "/scratch");
        let host = PathBuf::from(&cfg.mounts[0].host_path);
        assert_eq!(host, dirs.empty_dir("u1", "scratch"));
        assert!(host.is_dir(), "emptyDir created");
        {
            use std::os::unix::fs::{MetadataExt, PermissionsExt};
            let m = std::fs::metadata(&host).unwrap();
            assert_eq!(
                m.permissions().mode() & 0o7777,
                0o777,
                "writable by non-root users"
            );
            // With an fsGroup: the group's, setgid (chown needs root).
            let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
            let mut p = pod();
            p.spec
                .as_mut()
                .unwrap()
                .security_context
                .as_mut()
                .unwrap()
                .fs_group = Some(4321);
            if root {
                config_of(&p, &dirs, 0).unwrap();
                let m = std::fs::metadata(&host).unwrap();
                assert_eq!((m.gid(), m.permissions().mode() & 0o7777), (4321, 0o2777));
            }
        }
        assert!(!cfg.mounts[0].readonly);
        assert_eq!(
            PathBuf::from(&cfg.mounts[1].host_path),
            dirs.volume_dir("u1", "kubernetes.io~configmap", "cfg")
        );
        assert!(cfg.mounts[1].readonly, "API data volumes are read-only");
        let linux = cfg.linux.as_ref().unwrap();
        let sc = linux.security_context.as_ref().unwrap();
        assert_eq!(sc.run_as_user.as_ref().map(|u| u.value), Some(1000));
        assert!(sc.no_new_privs && sc.readonly_rootfs);
        assert_eq!(
            sc.capabilities.as_ref().unwrap().drop_capabilities,
            vec!["ALL"]
        );
        let r = linux.resources.as_ref().unwrap();
        assert_eq!(r.memory_limit_in_bytes, 64 << 20);
        assert_eq!(r.cpu_shares, 256);
        assert_eq!(cfg.labels[LABEL_CONTAINER_NAME], "c");
        assert_eq!(cfg.labels[LABEL_POD_UID], "u1");
        let sb = sandbox_config(&p, &dirs, 0, false, &SecurityOptions::for_root(&tmp), "").unwrap();
        assert_eq!(sb.labels["app"], "web");
        assert_eq!(sb.labels[LABEL_POD_NAMESPACE], "ns");
        assert!(!sb.labels.contains_key(LABEL_STATIC));
        let linux = sb.linux.as_ref().unwrap();
        assert_eq!(linux.cgroup_parent, "/kubepods/burstable/podu1");
        assert_eq!(linux.sysctls["net.ipv4.ip_unprivileged_port_start"], "0");
        assert_eq!(
            sb.log_directory,
            tmp.join("pod-logs/ns_web_u1").display().to_string()
        );
        let _ = std::fs::remove_dir_all(&tmp);
    }

    #[test]
    fn what_the_node_cannot_honour_is_refused() {
        let tmp = std::env::temp_dir().join(format!("rkube-cri-refuse-{}", std::process::id()));
        let dirs = Dirs::under(&tmp);
        // runAsNonRoot against an image that runs as root, without runAsUser.
        let mut p = pod();
        p.spec
            .as_mut()
            .unwrap()
            .security_context
            .as_mut()
            .unwrap()
            .run_as_user = None;
        let e = config_of(&p, &dirs, 0).unwrap_err();
        assert!(e.contains("image will run as root"), "{e}");
        // A volume type rkube does not mount is an error, not a skipped mount.
        let mut p = pod();
        p.spec.as_mut().unwrap().volumes.as_mut().unwrap()[1] = serde_json::from_value(
            json!({"name": "cfg", "nfs": {"server": "s", "path": "/export"}}),
        )
        .unwrap();
        let e = config_of(&p, &dirs, 1000).unwrap_err();
        assert!(e.contains("nfs are not supported"), "{e}");
        // A claim not set up by the volume manager is not mounted.
        let mut p = pod();
        p.spec.as_mut().unwrap().volumes.as_mut().unwrap()[1] = serde_json::from_value(
            json!({"name": "cfg", "persistentVolumeClaim": {"claimName": "data"}}),
        )
        .unwrap();
        let e = config_of(&p, &dirs, 1000).unwrap_err();
        assert!(e.contains("its claim is not set up"), "{e}");
        // An unsafe sysctl fails the sandbox.
        let mut p = pod();
        p.spec
            .as_mut()
            .unwrap()
            .security_context
            .as_mut()
            .unwrap()
            .sysctls = Some(vec![serde_json::from_value(
            json!({"name": "kernel.msgmax", "value": "1"}),
        )
        .unwrap()]);
        let e =
            sandbox_config(&p, &dirs, 0, false, &SecurityOptions::for_root(&tmp), "").unwrap_err();
        assert!(e.contains("kernel.msgmax"), "{e}");
        // Pod-level limits are the pod cgroup's (crate::cm): accepted.
        let mut p = pod();
        p.spec.as_mut().unwrap().resources =
            Some(serde_json::from_value(json!({"limits": {"memory": "1Gi"}})).unwrap());
        assert!(sandbox_config(&p, &dirs, 0, false, &SecurityOptions::for_root(&tmp), "").is_ok());
        // A recursive read-only mount rkube cannot make is refused;
        // IfPossible falls back to a plain read-only mount.
        for (rro, refused) in [
            ("Enabled", true),
            ("IfPossible", false),
            ("Disabled", false),
        ] {
            let mut p = pod();
            let m = &mut p.spec.as_mut().unwrap().containers[0]
                .volume_mounts
                .as_mut()
                .unwrap()[0];
            m.read_only = Some(true);
            m.recursive_read_only = Some(rro.into());
            match config_of(&p, &dirs, 1000) {
                Err(e) if refused => assert!(e.contains("recursiveReadOnly: Enabled"), "{e}"),
                Ok(cfg) if !refused => assert!(cfg.mounts[0].readonly),
                other => panic!("{rro}: {other:?}"),
            }
        }
        let _ = std::fs::remove_dir_all(&tmp);
    }

    #[test]
    fn a_sub_path_symlinked_out_of_its_volume_is_refused() {
        let root = std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
        });
        if !root {
            eprintln!("not root: skipping the subPath mount test");
            return;
        }
        let tmp = std::env::temp_dir().join(format!("rkube-cri-subpath-{}", std::process::id()));
        let dirs = Dirs::under(&tmp);
        let mut p = pod();
        p.spec.as_mut().unwrap().containers[0]
            .volume_mounts
            .as_mut()
            .unwrap()[0]
            .sub_path = Some("escape".into());
        let scratch = dirs.empty_dir("u1", "scratch");
        std::fs::create_dir_all(&scratch).unwrap();
        std::os::unix::fs::symlink("/", scratch.join("escape")).unwrap();
        let e = config_of(&p, &dirs, 1000).unwrap_err();
        assert!(e.contains("escape") && e.contains("symlink"), "{e}");
        // A plain subdirectory is bind-mounted from a kubelet-owned target.
        std::fs::remove_file(scratch.join("escape")).unwrap();
        let cfg = config_of(&p, &dirs, 1000).unwrap();
        let target = subpath::target_path(&dirs.pod_dir("u1"), "scratch", "c", 0);
        assert_eq!(PathBuf::from(&cfg.mounts[0].host_path), target);
        assert!(
            scratch.join("escape").is_dir(),
            "created beneath the volume"
        );
        subpath::cleanup(&dirs.pod_dir("u1")).unwrap();
        let _ = std::fs::remove_dir_all(&tmp);
    }
}
