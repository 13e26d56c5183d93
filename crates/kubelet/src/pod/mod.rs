//! Pod-level facts every manager reads: identity (namespace, static and
//! mirror pods, criticality), the directories of a pod on the node, its
//! hostname, restart policy and grace period, its sidecars and ephemeral
//! containers, and the downward API values and environment
//! ([`downward`], [`env`]) computed from the spec alone.
//!
//! Pure and at the bottom of the kubelet: it imports no other manager, so
//! the runtime, the volume manager, the image manager and eviction all
//! read the same rules from here (upstream keeps these in
//! `pkg/kubelet/types`, `pkg/kubelet/container` and
//! `component-helpers/resource`).

pub mod downward;
pub mod env;

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};
use kube::ResourceExt;

/// The annotation naming where a pod came from (`api`, `file`, `http`).
pub const CONFIG_SOURCE_ANNOTATION: &str = "kubernetes.io/config.source";
/// Upstream's `SystemCriticalPriority` (`scheduling.SystemCriticalPriority`).
pub const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;

/// The annotation naming the static pod a mirror pod mirrors (its value is
/// the static pod's UID, the config hash); the scheduler's model reads the
/// same constant.
pub use rkube_model::convert::MIRROR_POD_ANNOTATION as MIRROR_ANNOTATION;

/// The uid of the static pod `pod` mirrors, if it is a mirror pod.
pub fn mirror_of(pod: &Pod) -> Option<String> {
    pod.annotations().get(MIRROR_ANNOTATION).cloned()
}

/// A pod run from a file (`staticPodPath`), not from the API server.
pub fn is_static(pod: &Pod) -> bool {
    pod.annotations()
        .get(CONFIG_SOURCE_ANNOTATION)
        .is_some_and(|s| s == "file")
}

/// Upstream's `IsCriticalPod`: a static pod (any source but the API
/// server), a mirror pod, or a priority of at least system-critical.
/// Critical pods are never evicted and get the lowest OOM score.
pub fn is_critical(pod: &Pod) -> bool {
    let a = pod.annotations();
    let not_from_api = a.get(CONFIG_SOURCE_ANNOTATION).is_some_and(|s| s != "api");
    let is_mirror = a.contains_key(MIRROR_ANNOTATION);
    let priority = pod.spec.as_ref().and_then(|s| s.priority);
    not_from_api || is_mirror || priority.is_some_and(|p| p >= SYSTEM_CRITICAL_PRIORITY)
}

/// Upstream's `IsNodeCriticalPod`: critical and of the
/// `system-node-critical` priority class.
pub fn is_node_critical(pod: &Pod) -> bool {
    is_critical(pod)
        && pod
            .spec
            .as_ref()
            .and_then(|s| s.priority_class_name.as_deref())
            == Some("system-node-critical")
}

/// Where a pod's things live on the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dirs {
    /// The kubelet root (`--root-dir`, `/var/lib/kubelet` upstream):
    /// `pods/<uid>/volumes/kubernetes.io~empty-dir/<name>`.
    pub root: PathBuf,
    /// Container logs, laid out as upstream's `/var/log/pods`:
    /// `<ns>_<name>_<uid>/<container>/<restart>.log`.
    pub logs: PathBuf,
    /// The links log agents read (`/var/log/containers`,
    /// [`crate::logs::legacy`]).
    pub legacy_links: PathBuf,
}

impl Dirs {
    /// `root` and `root/pod-logs`.
    pub fn under(root: &Path) -> Dirs {
        Dirs {
            root: root.to_path_buf(),
            logs: root.join("pod-logs"),
            legacy_links: PathBuf::from(crate::logs::legacy::DIR),
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

    /// The host directory of volume `name` of pod `uid` written by the
    /// volume plugin directory `plugin` (`kubernetes.io~configmap`, ...).
    pub fn volume_dir(&self, uid: &str, plugin: &str, name: &str) -> PathBuf {
        self.pod_dir(uid).join("volumes").join(plugin).join(name)
    }

    /// The host directory of emptyDir `volume` of pod `uid`.
    pub fn empty_dir(&self, uid: &str, volume: &str) -> PathBuf {
        self.pod_dir(uid)
            .join("volumes/kubernetes.io~empty-dir")
            .join(volume)
    }
}

/// `namespace/name`, as the kubelet's logs name a pod.
pub fn pod_key(pod: &Pod) -> String {
    format!("{}/{}", pod_namespace(pod), pod.name_any())
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

/// The pod's hostname as upstream's `GeneratePodHostNameAndDomain`:
/// `spec.hostnameOverride`, else `spec.hostname`, else its name, truncated
/// to 63 characters.
pub fn pod_hostname(pod: &Pod) -> String {
    let spec = pod.spec.as_ref();
    let h = spec
        .and_then(|s| s.hostname_override.clone())
        .or_else(|| spec.and_then(|s| s.hostname.clone()))
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| pod.name_any());
    truncate_hostname(&h)
}

/// Hostnames are at most 63 bytes (upstream truncates too).
fn truncate_hostname(h: &str) -> String {
    let h = if h.len() > 63 { &h[..63] } else { h };
    h.trim_end_matches(['-', '.']).to_string()
}

/// The pod's `restartPolicy` (`Always` when unset, as the API server
/// defaults it).
pub fn restart_policy(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always")
}

/// A container's own `restartPolicy`, else the pod's (what decides a
/// restart without an exit code: after a failed probe, in an unknown
/// state, whether a container runs once).
pub fn container_restart_policy<'a>(c: &'a Container, pod_policy: &'a str) -> &'a str {
    c.restart_policy.as_deref().unwrap_or(pod_policy)
}

/// Whether `c`, exited with `exit_code`, is started again (upstream's
/// `ContainerShouldRestart`, with its v1.37 default gates): with a
/// `restartPolicy` of its own, the first of its `restartPolicyRules` whose
/// exit codes match restarts it (`Restart`, or `RestartAllContainers`,
/// whose pods this kubelet refuses at admission), else its policy decides;
/// without one, the pod's `restartPolicy`.
pub fn container_should_restart(c: &Container, pod_policy: &str, exit_code: i32) -> bool {
    let matches = |r: &k8s_openapi::api::core::v1::ContainerRestartRule| {
        r.exit_codes.as_ref().is_some_and(|e| {
            let listed = e.values.iter().flatten().any(|v| *v == exit_code);
            match e.operator.as_str() {
                "In" => listed,
                "NotIn" => !listed,
                _ => false,
            }
        })
    };
    if c.restart_policy.is_some() {
        let rule = c.restart_policy_rules.iter().flatten().find(|r| matches(r));
        if rule.is_some_and(|r| r.action == "Restart" || r.action == "RestartAllContainers") {
            return true;
        }
    }
    match container_restart_policy(c, pod_policy) {
        "Never" => false,
        "OnFailure" => exit_code != 0,
        _ => true,
    }
}

/// `spec.terminationGracePeriodSeconds` (30 s when unset, never negative).
pub fn termination_grace(pod: &Pod) -> Duration {
    Duration::from_secs(
        pod.spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
            .unwrap_or(30)
            .max(0) as u64,
    )
}

/// The grace period of a pod being deleted: the deletion's, else the
/// spec's `terminationGracePeriodSeconds`, else 30 s.
pub fn grace_period(pod: &Pod) -> Duration {
    let secs = pod
        .metadata
        .deletion_grace_period_seconds
        .or_else(|| {
            pod.spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds)
        })
        .unwrap_or(30);
    Duration::from_secs(secs.max(0) as u64)
}

/// True for an init container with `restartPolicy: Always`: a sidecar,
/// which keeps running next to the containers.
pub fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// The ephemeral containers of `pod` as containers (the same fields; an
/// ephemeral container is started once and never restarted).
pub fn ephemeral_containers(pod: &Pod) -> Vec<Container> {
    pod.spec
        .as_ref()
        .and_then(|s| s.ephemeral_containers.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let mut v = serde_json::to_value(e).ok()?;
            v.as_object_mut()?.remove("targetContainerName");
            serde_json::from_value(v).ok()
        })
        .collect()
}

/// The pod's pull Secret names, in order, empty names skipped (the API
/// server let them through once), each once.
pub fn pull_secret_names(pod: &Pod) -> Vec<String> {
    let mut seen = std::collections::BTreeSet::new();
    pod.spec
        .iter()
        .flat_map(|s| s.image_pull_secrets.iter().flatten())
        .map(|r| r.name.clone())
        .filter(|n| !n.is_empty() && seen.insert(n.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn critical_pods_are_static_mirror_or_system_critical() {
        let plain = pod(json!({"metadata": {"name": "web"}, "spec": {"containers": []}}));
        assert!(!is_critical(&plain));
        assert!(is_critical(&pod(json!({
            "metadata": {"name": "c"}, "spec": {"containers": [], "priority": 2_000_001_000}}))));
        assert!(!is_critical(&pod(json!({
            "metadata": {"name": "c"}, "spec": {"containers": [], "priority": 1_999_999_999}}))));
        assert!(is_critical(&pod(json!({
            "metadata": {"name": "m", "annotations": {"kubernetes.io/config.mirror": "x"}},
            "spec": {"containers": []}}))));
        let from_file = pod(json!({
            "metadata": {"name": "s", "annotations": {"kubernetes.io/config.source": "file"}},
            "spec": {"containers": []}}));
        assert!(is_critical(&from_file) && is_static(&from_file));
        let from_api = pod(json!({
            "metadata": {"name": "a", "annotations": {"kubernetes.io/config.source": "api"}},
            "spec": {"containers": []}}));
        assert!(!is_critical(&from_api) && !is_static(&from_api));
        let node_critical = pod(json!({"metadata": {"name": "n"}, "spec": {"containers": [],
            "priority": 2_000_001_000, "priorityClassName": "system-node-critical"}}));
        assert!(is_node_critical(&node_critical));
        let cluster_critical = pod(json!({"metadata": {"name": "n"}, "spec": {"containers": [],
            "priority": 2_000_000_000, "priorityClassName": "system-cluster-critical"}}));
        assert!(is_critical(&cluster_critical) && !is_node_critical(&cluster_critical));
    }

    #[test]
    fn pull_secret_names_skip_empty_and_repeated_names() {
        let p = pod(json!({"spec": {
            "containers": [],
            "imagePullSecrets": [{"name": "a"}, {"name": ""}, {"name": "b"}, {"name": "a"}]}}));
        assert_eq!(pull_secret_names(&p), ["a", "b"]);
    }

    #[test]
    fn hostnames_are_truncated() {
        let long = "a".repeat(62) + "-b";
        assert_eq!(truncate_hostname(&long), "a".repeat(62));
    }

    #[test]
    fn mirror_pods_are_recognised() {
        let p = pod(json!({
            "metadata": {"name": "x", "annotations": {MIRROR_ANNOTATION: "abc"}}}));
        assert_eq!(mirror_of(&p).as_deref(), Some("abc"));
        assert_eq!(mirror_of(&Pod::default()), None);
    }

    /// Upstream's `TestContainerShouldRestart` table (pkg/api/v1/pod).
    #[test]
    fn container_should_restart_as_upstream() {
        let rule = |action: &str, op: &str, values: &[i32]| serde_json::json!({"action": action, "exitCodes": {"operator": op, "values": values}});
        let c = |policy: Option<&str>, rules: Vec<serde_json::Value>| -> Container {
            serde_json::from_value(serde_json::json!({
                "name": "c", "restartPolicy": policy, "restartPolicyRules": rules
            }))
            .unwrap()
        };
        let never = Some("Never");
        let cases: Vec<(&str, Container, &str, i32, bool)> = vec![
            (
                "Rule: 'In' operator matches with 'Restart' action",
                c(never, vec![rule("Restart", "In", &[42, 50, 60])]),
                "Always",
                42,
                true,
            ),
            (
                "Rule: 'NotIn' operator matches with 'Restart' action",
                c(never, vec![rule("Restart", "NotIn", &[0, 1, 2])]),
                "Always",
                99,
                true,
            ),
            (
                "Rule: 'In' operator matches with 'RestartAllContainers' action",
                c(
                    never,
                    vec![rule("RestartAllContainers", "In", &[42, 50, 60])],
                ),
                "Always",
                42,
                true,
            ),
            (
                "Rule: 'In' operator does not match, should fall back to container policy",
                c(never, vec![rule("Restart", "In", &[10, 20])]),
                "Always",
                30,
                false,
            ),
            (
                "Rule: 'NotIn' operator does not match, should fall back to container policy",
                c(never, vec![rule("Restart", "NotIn", &[10, 20])]),
                "Always",
                10,
                false,
            ),
            (
                "Container Policy: 'Always'",
                c(Some("Always"), vec![]),
                "Never",
                0,
                true,
            ),
            (
                "Container Policy: 'OnFailure' with exit code 0",
                c(Some("OnFailure"), vec![]),
                "Never",
                0,
                false,
            ),
            (
                "Container Policy: 'OnFailure' with non-zero exit code",
                c(Some("OnFailure"), vec![]),
                "Never",
                1,
                true,
            ),
            (
                "Container Policy: 'Never' should return false",
                c(never, vec![]),
                "Always",
                1,
                false,
            ),
            (
                "Pod Policy: Fallback to pod 'Always'",
                c(None, vec![]),
                "Always",
                0,
                true,
            ),
            (
                "Pod Policy: Fallback to pod 'OnFailure' with non-zero exit code",
                c(None, vec![]),
                "OnFailure",
                1,
                true,
            ),
            (
                "Pod Policy: Fallback to pod 'Never'",
                c(None, vec![]),
                "Never",
                1,
                false,
            ),
            // The first matching rule decides; rules without a container
            // policy are not read.
            (
                "first rule wins",
                c(
                    Some("OnFailure"),
                    vec![rule("Restart", "In", &[3]), rule("Restart", "NotIn", &[3])],
                ),
                "Never",
                0,
                true,
            ),
            (
                "rules need a container policy",
                c(None, vec![rule("Restart", "In", &[1])]),
                "Never",
                1,
                false,
            ),
        ];
        for (name, container, pod_policy, code, want) in cases {
            assert_eq!(
                container_should_restart(&container, pod_policy, code),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn restart_policy_and_grace_default_as_the_api_server() {
        let p = pod(json!({"metadata": {"name": "p"}, "spec": {"containers": []}}));
        assert_eq!(restart_policy(&p), "Always");
        assert_eq!(termination_grace(&p), Duration::from_secs(30));
        let p = pod(json!({"metadata": {"name": "p"}, "spec": {"containers": [],
            "restartPolicy": "Never", "terminationGracePeriodSeconds": -5}}));
        assert_eq!(restart_policy(&p), "Never");
        assert_eq!(termination_grace(&p), Duration::ZERO);
    }
}
