//! Pod spec → CRI configs (pure): labels, directories, image pull policy,
//! environment, mounts and the sandbox/container configs of
//! [`super::cri::CriRuntime`].
//!
//! Supported: `command`/`args`, `workingDir`, `env` with `value` and the
//! `fieldRef`s of the downward API that need no lookup (`metadata.name`,
//! `metadata.namespace`, `metadata.uid`, `metadata.labels['k']`,
//! `metadata.annotations['k']`, `spec.nodeName`, `spec.serviceAccountName`,
//! `status.podIP`, `status.hostIP`), and volume mounts of `emptyDir`
//! (a directory under the kubelet root; `medium: Memory` is a plain
//! directory too) and `hostPath` (`DirectoryOrCreate`/`FileOrCreate`
//! create the path; other types are used as they are).
//!
//! Not supported (documented gaps): `envFrom`, `valueFrom` of ConfigMaps,
//! Secrets and resource fields (the container fails with
//! `CreateContainerConfigError`), `$(VAR)` expansion, and other volume
//! types (ConfigMap, Secret, projected service-account tokens, PVCs: the
//! mount is skipped with a warning, so pods should set
//! `automountServiceAccountToken: false`), resources/cgroup limits,
//! security contexts, port mappings (`hostPort`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, EnvVar, Pod};
use kube::ResourceExt;
use rkube_cri::{v1, ContainerSpec, SandboxSpec};

/// Label with the pod's UID on sandboxes and containers (as upstream's).
pub const LABEL_POD_UID: &str = "io.kubernetes.pod.uid";
/// Label with the pod's name.
pub const LABEL_POD_NAME: &str = "io.kubernetes.pod.name";
/// Label with the pod's namespace.
pub const LABEL_POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
/// Label with the container's name.
pub const LABEL_CONTAINER_NAME: &str = "io.kubernetes.container.name";
/// Marks sandboxes and containers rkube's kubelet made.
pub const LABEL_MANAGED: &str = "io.rkube.kubelet";
/// Marks sandboxes of static pods (run from files, not from the API).
pub const LABEL_STATIC: &str = "io.rkube.static-pod";
/// The annotation naming the static pod a mirror pod mirrors (its value is
/// the static pod's UID, the config hash).
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// Where a pod's things live on the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dirs {
    /// The kubelet root (`--root-dir`, `/var/lib/kubelet` upstream):
    /// `pods/<uid>/volumes/kubernetes.io~empty-dir/<name>`.
    pub root: PathBuf,
    /// Container logs, laid out as upstream's `/var/log/pods`:
    /// `<ns>_<name>_<uid>/<container>/<restart>.log`.
    pub logs: PathBuf,
}

impl Dirs {
    /// `root` and `root/pod-logs`.
    pub fn under(root: &Path) -> Dirs {
        Dirs {
            root: root.to_path_buf(),
            logs: root.join("pod-logs"),
        }
    }

    /// The log directory of a pod.
    pub fn pod_logs(&self, namespace: &str, name: &str, uid: &str) -> PathBuf {
        self.logs.join(format!("{namespace}_{name}_{uid}"))
    }

    /// The directory of a pod's own data (volumes).
    pub fn pod_dir(&self, uid: &str) -> PathBuf {
        self.root.join("pods").join(uid)
    }

    /// The host directory of emptyDir `volume` of pod `uid`.
    pub fn empty_dir(&self, uid: &str, volume: &str) -> PathBuf {
        self.pod_dir(uid)
            .join("volumes/kubernetes.io~empty-dir")
            .join(volume)
    }
}

/// `imagePullPolicy`, defaulted as the API server does (`Always` for
/// `:latest` or an untagged image, else `IfNotPresent`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullPolicy {
    /// Pull every time a container is created (falls back to a present image).
    Always,
    /// Pull only if the runtime lacks the image.
    IfNotPresent,
    /// Never pull.
    Never,
}

/// The pull policy of a container.
pub fn pull_policy(c: &Container) -> PullPolicy {
    match c.image_pull_policy.as_deref() {
        Some("Always") => PullPolicy::Always,
        Some("Never") => PullPolicy::Never,
        Some("IfNotPresent") => PullPolicy::IfNotPresent,
        _ => {
            let image = c.image.as_deref().unwrap_or("");
            let last = image.rsplit('/').next().unwrap_or("");
            let name = last.split('@').next().unwrap_or("");
            match name.split_once(':') {
                _ if image.contains('@') => PullPolicy::IfNotPresent,
                Some((_, "latest")) | None => PullPolicy::Always,
                Some(_) => PullPolicy::IfNotPresent,
            }
        }
    }
}

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

/// The pod's namespace (`default` when unset, as for static pod files).
pub fn pod_namespace(pod: &Pod) -> String {
    pod.namespace().unwrap_or_else(|| "default".into())
}

/// `spec.hostNetwork`.
pub fn host_network(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false)
}

/// The sandbox config of `pod` (attempt `attempt`).
pub fn sandbox_config(
    pod: &Pod,
    dirs: &Dirs,
    attempt: u32,
    is_static: bool,
) -> v1::PodSandboxConfig {
    let ns = pod_namespace(pod);
    let name = pod.name_any();
    let uid = pod.uid().unwrap_or_default();
    let hostname = pod
        .spec
        .as_ref()
        .and_then(|s| s.hostname.clone())
        .unwrap_or_else(|| name.clone());
    SandboxSpec {
        log_directory: dirs.pod_logs(&ns, &name, &uid).display().to_string(),
        name,
        namespace: ns,
        uid,
        attempt,
        hostname: truncate_hostname(&hostname),
        host_network: host_network(pod),
        labels: sandbox_labels(pod, is_static),
        ..Default::default()
    }
    .to_config()
}

/// Hostnames are at most 63 bytes (upstream truncates too).
fn truncate_hostname(h: &str) -> String {
    let h = if h.len() > 63 { &h[..63] } else { h };
    h.trim_end_matches(['-', '.']).to_string()
}

/// What the downward API resolves against.
#[derive(Debug, Clone, Default)]
pub struct EnvContext {
    /// The pod IP (empty with none yet).
    pub pod_ip: String,
    /// The node's IP.
    pub host_ip: String,
}

fn field_ref(pod: &Pod, path: &str, ctx: &EnvContext) -> Option<String> {
    let spec = pod.spec.as_ref();
    let quoted = |prefix: &str| {
        path.strip_prefix(prefix)?
            .strip_suffix("']")
            .map(str::to_string)
    };
    Some(match path {
        "metadata.name" => pod.name_any(),
        "metadata.namespace" => pod_namespace(pod),
        "metadata.uid" => pod.uid().unwrap_or_default(),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        "status.podIP" => ctx.pod_ip.clone(),
        "status.hostIP" => ctx.host_ip.clone(),
        _ => {
            if let Some(k) = quoted("metadata.labels['") {
                pod.labels().get(&k).cloned().unwrap_or_default()
            } else if let Some(k) = quoted("metadata.annotations['") {
                pod.annotations().get(&k).cloned().unwrap_or_default()
            } else {
                return None;
            }
        }
    })
}

fn env_value(pod: &Pod, e: &EnvVar, ctx: &EnvContext) -> Result<String, String> {
    let Some(from) = &e.value_from else {
        return Ok(e.value.clone().unwrap_or_default());
    };
    if let Some(f) = &from.field_ref {
        return field_ref(pod, &f.field_path, ctx).ok_or_else(|| {
            format!(
                "env {}: fieldRef {:?} is not supported by rkube",
                e.name, f.field_path
            )
        });
    }
    Err(format!(
        "env {}: only value and fieldRef are supported by rkube (not ConfigMap, Secret or resource references)",
        e.name
    ))
}

/// The environment of container `c`, in order.
pub fn env(pod: &Pod, c: &Container, ctx: &EnvContext) -> Result<Vec<(String, String)>, String> {
    if c.env_from.as_ref().is_some_and(|v| !v.is_empty()) {
        return Err("envFrom is not supported by rkube".into());
    }
    c.env
        .iter()
        .flatten()
        .map(|e| Ok((e.name.clone(), env_value(pod, e, ctx)?)))
        .collect()
}

/// The mounts of container `c`; creates emptyDir and `*OrCreate` hostPath
/// paths. Unsupported volume types are skipped (returned as warnings).
pub fn mounts(
    pod: &Pod,
    c: &Container,
    dirs: &Dirs,
) -> Result<(Vec<v1::Mount>, Vec<String>), String> {
    let uid = pod.uid().unwrap_or_default();
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
    let mut out = Vec::new();
    let mut warnings = Vec::new();
    for m in c.volume_mounts.iter().flatten() {
        let Some(v) = volumes.and_then(|vs| vs.iter().find(|v| v.name == m.name)) else {
            return Err(format!("volume mount {}: no volume of that name", m.name));
        };
        let host: PathBuf = if v.empty_dir.is_some() {
            let d = dirs.empty_dir(&uid, &v.name);
            std::fs::create_dir_all(&d)
                .map_err(|e| format!("creating emptyDir {}: {e}", d.display()))?;
            d
        } else if let Some(h) = &v.host_path {
            let p = PathBuf::from(&h.path);
            match h.type_.as_deref() {
                Some("DirectoryOrCreate") => std::fs::create_dir_all(&p)
                    .map_err(|e| format!("creating hostPath {}: {e}", p.display()))?,
                Some("FileOrCreate") if !p.exists() => {
                    if let Some(parent) = p.parent() {
                        let _ = std::fs::create_dir_all(parent);
                    }
                    std::fs::write(&p, b"")
                        .map_err(|e| format!("creating hostPath {}: {e}", p.display()))?
                }
                _ => {}
            }
            p
        } else {
            warnings.push(format!(
                "volume {} of container {}: only emptyDir and hostPath are supported by rkube; not mounted",
                v.name, c.name
            ));
            continue;
        };
        let host = match m.sub_path.as_deref().filter(|s| !s.is_empty()) {
            Some(sub) if !sub.split('/').any(|p| p == "..") && !sub.starts_with('/') => {
                let p = host.join(sub);
                let _ = std::fs::create_dir_all(&p);
                p
            }
            Some(sub) => return Err(format!("volume mount {}: invalid subPath {sub:?}", m.name)),
            None => host,
        };
        out.push(v1::Mount {
            container_path: m.mount_path.clone(),
            host_path: host.display().to_string(),
            readonly: m.read_only.unwrap_or(false),
            ..Default::default()
        });
    }
    Ok((out, warnings))
}

/// The log path (relative to the sandbox log dir) of attempt `attempt`.
pub fn log_path(container: &str, attempt: u32) -> String {
    format!("{container}/{attempt}.log")
}

/// The container config of `c` (attempt `attempt`), with its warnings.
pub fn container_config(
    pod: &Pod,
    c: &Container,
    attempt: u32,
    dirs: &Dirs,
    ctx: &EnvContext,
) -> Result<(v1::ContainerConfig, Vec<String>), String> {
    let env = env(pod, c, ctx)?;
    let (mounts, warnings) = mounts(pod, c, dirs)?;
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
        command: c.command.clone().unwrap_or_default(),
        args: c.args.clone().unwrap_or_default(),
        working_dir: c.working_dir.clone().unwrap_or_default(),
        env,
        log_path: log_path(&c.name, attempt),
        labels,
        ..Default::default()
    }
    .to_config();
    config.mounts = mounts;
    config.stdin = c.stdin.unwrap_or(false);
    config.tty = c.tty.unwrap_or(false);
    Ok((config, warnings))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "u1",
                         "labels": {"app": "web"}, "annotations": {"a": "b"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox:1",
                "command": ["sh"], "args": ["-c", "true"],
                "env": [{"name": "A", "value": "1"},
                        {"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                        {"name": "L", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}}],
                "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"},
                                 {"name": "cfg", "mountPath": "/cfg"}]}],
                "volumes": [{"name": "scratch", "emptyDir": {}},
                            {"name": "cfg", "configMap": {"name": "x"}}]}
        }))
        .unwrap()
    }

    fn container(image: &str, policy: Option<&str>) -> Container {
        Container {
            name: "c".into(),
            image: Some(image.into()),
            image_pull_policy: policy.map(str::to_string),
            ..Default::default()
        }
    }

    #[test]
    fn pull_policy_defaults_like_the_api_server() {
        for (image, want) in [
            ("busybox", PullPolicy::Always),
            ("busybox:latest", PullPolicy::Always),
            ("busybox:1", PullPolicy::IfNotPresent),
            ("localhost:5000/busybox", PullPolicy::Always),
            ("localhost:5000/busybox:1", PullPolicy::IfNotPresent),
            ("busybox@sha256:abcd", PullPolicy::IfNotPresent),
        ] {
            assert_eq!(pull_policy(&container(image, None)), want, "{image}");
        }
        assert_eq!(
            pull_policy(&container("busybox", Some("Never"))),
            PullPolicy::Never
        );
    }

    #[test]
    fn env_resolves_values_and_field_refs() {
        let p = pod();
        let c = &p.spec.as_ref().unwrap().containers[0];
        let ctx = EnvContext {
            pod_ip: "10.0.0.5".into(),
            host_ip: "192.168.1.1".into(),
        };
        let e = env(&p, c, &ctx).unwrap();
        assert_eq!(
            e,
            vec![
                ("A".into(), "1".into()),
                ("N".into(), "web".into()),
                ("IP".into(), "10.0.0.5".into()),
                ("L".into(), "web".into()),
            ]
        );
        let mut c2 = c.clone();
        c2.env = Some(vec![serde_json::from_value(json!(
            {"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}
        ))
        .unwrap()]);
        assert!(env(&p, &c2, &ctx).unwrap_err().contains("not ConfigMap"));
    }

    #[test]
    fn container_config_mounts_empty_dir_and_skips_unsupported() {
        let tmp = std::env::temp_dir().join(format!("rkube-cri-spec-{}", std::process::id()));
        let dirs = Dirs::under(&tmp);
        let p = pod();
        let c = &p.spec.as_ref().unwrap().containers[0];
        let (cfg, warnings) = container_config(&p, c, 3, &dirs, &EnvContext::default()).unwrap();
        assert_eq!(cfg.log_path, "c/3.log");
        assert_eq!(cfg.metadata.as_ref().unwrap().attempt, 3);
        assert_eq!(cfg.command, vec!["sh"]);
        assert_eq!(cfg.mounts.len(), 1);
        assert_eq!(cfg.mounts[0].container_path, "/scratch");
        let host = PathBuf::from(&cfg.mounts[0].host_path);
        assert_eq!(host, dirs.empty_dir("u1", "scratch"));
        assert!(host.is_dir(), "emptyDir created");
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert_eq!(cfg.labels[LABEL_CONTAINER_NAME], "c");
        assert_eq!(cfg.labels[LABEL_POD_UID], "u1");
        let sb = sandbox_config(&p, &dirs, 0, false);
        assert_eq!(sb.labels["app"], "web");
        assert_eq!(sb.labels[LABEL_POD_NAMESPACE], "ns");
        assert!(!sb.labels.contains_key(LABEL_STATIC));
        assert_eq!(
            sb.log_directory,
            tmp.join("pod-logs/ns_web_u1").display().to_string()
        );
        let _ = std::fs::remove_dir_all(&tmp);
    }

    #[test]
    fn hostnames_are_truncated() {
        let long = "a".repeat(62) + "-b";
        assert_eq!(truncate_hostname(&long), "a".repeat(62));
    }
}
