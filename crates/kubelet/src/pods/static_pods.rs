//! Static pods: pods defined by files in `staticPodPath`, run by the
//! kubelet without the API server, and shown in the API as *mirror pods*.
//!
//! * Every `*.yaml`, `*.yml` and `*.json` file (hidden files skipped)
//!   holds one Pod. Its name becomes `<name>-<nodeName>`, its namespace
//!   `default` when unset, `spec.nodeName` this node; its uid is a hash of
//!   the file's pod and the node (`kubernetes.io/config.hash`), so an edit
//!   restarts it and a kubelet restart adopts it (same uid → same sandbox).
//! * The directory is read every 2 s (upstream: `fileCheckFrequency`, 20 s,
//!   plus inotify); each static pod is synced through the runtime on the
//!   same tick.
//! * For each static pod a mirror pod is created in the API server:
//!   annotations `kubernetes.io/config.mirror: <hash>`,
//!   `kubernetes.io/config.source: file`, `kubernetes.io/config.hash`, an
//!   owner reference (controller) to the Node, as NodeRestriction requires
//!   of a node identity. A mirror deleted by someone is recreated; one with
//!   a stale hash is replaced. The pod workers report the static pod's
//!   status on the mirror ([`crate::runtime::cri`] observes the static pod
//!   for a mirror).
//! * A removed file: the pod is killed and removed, the mirror deleted.
//!   At start, static pods the runtime holds without a file are removed.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, PostParams, Preconditions};
use kube::{Api, Client, ResourceExt};

use crate::pod::{CONFIG_SOURCE_ANNOTATION, MIRROR_ANNOTATION};
use crate::runtime::cri::CriRuntime;
use crate::runtime::Runtime;

/// `kubernetes.io/config.hash`.
pub const HASH_ANNOTATION: &str = "kubernetes.io/config.hash";
/// How often the directory is read and static pods are synced.
pub const TICK: Duration = Duration::from_secs(2);

/// FNV-1a, 128 bit: a stable hash (the uid must not change across builds).
fn fnv128(data: &[u8]) -> u128 {
    let mut h: u128 = 0x6c62272e07bb014262b821756295c58d;
    for b in data {
        h ^= *b as u128;
        h = h.wrapping_mul(0x0000000001000000000000000000013B);
    }
    h
}

/// The static pod uid for a pod (as JSON) on `node`: 32 hex digits.
pub fn static_uid(pod_json: &str, node: &str) -> String {
    format!("{:032x}", fnv128(format!("{node}\n{pod_json}").as_bytes()))
}

/// The name of a static pod (and its mirror): `<name>-<node>`.
pub fn mirror_name(name: &str, node: &str) -> String {
    format!("{name}-{node}")
}

/// Parses one static pod file into the pod the kubelet runs.
pub fn parse_file(file: &str, text: &str, node: &str) -> Result<Pod, String> {
    let v: serde_json::Value = serde_yaml_ng::from_str(text).map_err(|e| format!("{file}: {e}"))?;
    match v.get("kind").and_then(|k| k.as_str()) {
        Some("Pod") => {}
        other => return Err(format!("{file}: kind {other:?}: want Pod")),
    }
    let mut pod: Pod = serde_json::from_value(v.clone()).map_err(|e| format!("{file}: {e}"))?;
    let name = pod
        .metadata
        .name
        .clone()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| format!("{file}: metadata.name is required"))?;
    let canonical = serde_json::to_string(&v).unwrap_or_default();
    let uid = static_uid(&canonical, node);
    pod.metadata.name = Some(mirror_name(&name, node));
    if pod.metadata.namespace.as_deref().unwrap_or("").is_empty() {
        pod.metadata.namespace = Some("default".into());
    }
    pod.metadata.uid = Some(uid.clone());
    let ann = pod.metadata.annotations.get_or_insert_with(BTreeMap::new);
    ann.insert(HASH_ANNOTATION.into(), uid);
    ann.insert(CONFIG_SOURCE_ANNOTATION.into(), "file".into());
    let spec = pod.spec.get_or_insert_with(Default::default);
    spec.node_name = Some(node.into());
    if spec.restart_policy.is_none() {
        spec.restart_policy = Some("Always".into());
    }
    pod.status = None;
    Ok(pod)
}

/// The mirror pod of static pod `pod` (owned by Node `node_uid`).
pub fn mirror_pod(pod: &Pod, node: &str, node_uid: &str) -> Pod {
    let mut m = pod.clone();
    let uid = m.metadata.uid.take().unwrap_or_default();
    m.metadata.resource_version = None;
    m.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(MIRROR_ANNOTATION.into(), uid);
    m.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: node.into(),
        uid: node_uid.into(),
        controller: Some(true),
        ..Default::default()
    }]);
    m.status = None;
    m
}

/// Reads every static pod file of `dir` (errors logged and skipped).
pub fn read_dir(dir: &Path, node: &str) -> HashMap<String, (PathBuf, Pod)> {
    let mut out = HashMap::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let path = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        let ok_ext = [".yaml", ".yml", ".json"].iter().any(|x| name.ends_with(x));
        if name.starts_with('.') || !ok_ext || !path.is_file() {
            continue;
        }
        let text = match rkube_util::file::read_text(&path, rkube_util::file::CONFIG_MAX_BYTES) {
            Ok(text) => text,
            Err(e) => {
                tracing::warn!("static pod ignored: {}: {e}", path.display());
                continue;
            }
        };
        match parse_file(&path.display().to_string(), &text, node) {
            Ok(p) => {
                out.insert(p.uid().unwrap_or_default(), (path, p));
            }
            Err(e) => tracing::warn!("static pod ignored: {e}"),
        }
    }
    out
}

/// The static pod source of one node.
pub struct StaticPods {
    /// `staticPodPath`.
    pub dir: PathBuf,
    /// The node.
    pub node: String,
    /// API client (the node identity).
    pub client: Client,
    /// The runtime.
    pub runtime: Arc<CriRuntime>,
}

impl StaticPods {
    async fn node_uid(&self) -> Option<String> {
        Api::<Node>::all(self.client.clone())
            .get_opt(&self.node)
            .await
            .ok()
            .flatten()
            .and_then(|n| n.metadata.uid)
    }

    /// The mirror pod named like `pod`, if any. A node may not GET a pod
    /// that is not bound to it (nor a missing one), but may list its own.
    async fn find_mirror(&self, pod: &Pod) -> Result<Option<Pod>, kube::Error> {
        let api: Api<Pod> =
            Api::namespaced(self.client.clone(), &pod.namespace().unwrap_or_default());
        let fields = format!(
            "metadata.name={},spec.nodeName={}",
            pod.name_any(),
            self.node
        );
        Ok(api
            .list(&kube::api::ListParams::default().fields(&fields))
            .await?
            .items
            .into_iter()
            .next())
    }

    /// Creates or replaces the mirror of `pod` as needed.
    async fn ensure_mirror(&self, pod: &Pod, node_uid: &str) {
        let ns = pod.namespace().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        let name = pod.name_any();
        let uid = pod.uid().unwrap_or_default();
        match self.find_mirror(pod).await {
            Ok(Some(m)) => {
                let hash = m.annotations().get(MIRROR_ANNOTATION).cloned();
                if hash.as_deref() == Some(uid.as_str()) || m.metadata.deletion_timestamp.is_some()
                {
                    return;
                }
                tracing::info!(pod = %name, "replacing a stale mirror pod");
                self.delete_mirror(&m).await;
            }
            Ok(None) => {}
            Err(e) => {
                tracing::debug!(pod = %name, error = %e, "getting the mirror pod failed");
                return;
            }
        }
        match api
            .create(
                &PostParams::default(),
                &mirror_pod(pod, &self.node, node_uid),
            )
            .await
        {
            Ok(_) => tracing::info!(pod = %format!("{ns}/{name}"), "mirror pod created"),
            Err(e) => tracing::warn!(pod = %name, error = %e, "creating the mirror pod failed"),
        }
    }

    async fn delete_mirror(&self, m: &Pod) {
        let api: Api<Pod> =
            Api::namespaced(self.client.clone(), &m.namespace().unwrap_or_default());
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: m.metadata.uid.clone(),
                resource_version: None,
            }),
            ..Default::default()
        };
        if let Err(e) = api.delete(&m.name_any(), &params).await {
            tracing::warn!(pod = %m.name_any(), error = %e, "deleting the mirror pod failed");
        }
    }

    async fn stop(&self, pod: &Pod) {
        let grace = crate::pod::grace_period(pod);
        let uid = pod.uid().unwrap_or_default();
        if let Err(e) = self.runtime.kill_pod(pod, grace).await {
            tracing::warn!(pod = %pod.name_any(), error = %e, "killing static pod failed");
        }
        if let Err(e) = self.runtime.remove_pod(&uid).await {
            tracing::warn!(pod = %pod.name_any(), error = %e, "removing static pod failed");
        }
        if let Ok(Some(m)) = self.find_mirror(pod).await {
            if m.annotations().get(MIRROR_ANNOTATION) == Some(&uid) {
                self.delete_mirror(&m).await;
            }
        }
        tracing::info!(pod = %pod.name_any(), "static pod stopped");
    }

    /// Runs forever.
    pub async fn run(self) {
        let mut running: HashMap<String, Pod> = HashMap::new();
        let mut node_uid: Option<String> = None;
        let mut first = true;
        loop {
            let desired = read_dir(&self.dir, &self.node);
            if first {
                first = false;
                if let Ok(held) = self.runtime.list_static_pods().await {
                    for uid in held.into_iter().filter(|u| !desired.contains_key(u)) {
                        tracing::info!(%uid, "removing a static pod whose file is gone");
                        let _ = self.runtime.remove_pod(&uid).await;
                    }
                }
            }
            let gone: Vec<String> = running
                .keys()
                .filter(|u| !desired.contains_key(*u))
                .cloned()
                .collect();
            for uid in gone {
                if let Some(p) = running.remove(&uid) {
                    self.stop(&p).await;
                }
            }
            if node_uid.is_none() {
                node_uid = self.node_uid().await;
            }
            for (uid, (path, pod)) in &desired {
                if !running.contains_key(uid) {
                    tracing::info!(pod = %pod.name_any(), file = %path.display(), "static pod added");
                }
                if let Err(e) = self.runtime.sync_pod(pod).await {
                    tracing::warn!(pod = %pod.name_any(), error = %e, "syncing static pod failed");
                }
                if let Some(n) = &node_uid {
                    self.ensure_mirror(pod, n).await;
                }
                running.insert(uid.clone(), pod.clone());
            }
            tokio::time::sleep(TICK).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  labels: {app: web}\n\
spec:\n  containers:\n  - name: c\n    image: rkube.local/busybox:1\n";

    #[test]
    fn parses_and_names_like_upstream() {
        let p = parse_file("web.yaml", FILE, "node-a").unwrap();
        assert_eq!(p.name_any(), "web-node-a");
        assert_eq!(p.namespace().as_deref(), Some("default"));
        assert_eq!(
            p.spec.as_ref().unwrap().node_name.as_deref(),
            Some("node-a")
        );
        let uid = p.uid().unwrap();
        assert_eq!(uid.len(), 32);
        assert_eq!(p.annotations()[HASH_ANNOTATION], uid);
        assert_eq!(p.annotations()[CONFIG_SOURCE_ANNOTATION], "file");
        // stable, and different per node and per content
        assert_eq!(parse_file("x", FILE, "node-a").unwrap().uid().unwrap(), uid);
        assert_ne!(parse_file("x", FILE, "node-b").unwrap().uid().unwrap(), uid);
        let edited = FILE.replace("busybox:1", "busybox:2");
        assert_ne!(
            parse_file("x", &edited, "node-a").unwrap().uid().unwrap(),
            uid
        );
    }

    #[test]
    fn rejects_bad_files() {
        assert!(
            parse_file("x", "kind: Deployment\nmetadata: {name: a}\n", "n")
                .unwrap_err()
                .contains("want Pod")
        );
        assert!(parse_file("x", "kind: Pod\nmetadata: {}\n", "n")
            .unwrap_err()
            .contains("metadata.name"));
        assert!(parse_file("x", "kind: [", "n").is_err());
    }

    #[test]
    fn mirror_pods_point_at_the_node() {
        let p = parse_file("web.yaml", FILE, "node-a").unwrap();
        let m = mirror_pod(&p, "node-a", "node-uid");
        assert_eq!(
            m.metadata.uid, None,
            "the API server assigns the mirror's uid"
        );
        assert_eq!(m.annotations()[MIRROR_ANNOTATION], p.uid().unwrap());
        assert_eq!(m.annotations()[CONFIG_SOURCE_ANNOTATION], "file");
        let o = &m.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (o.kind.as_str(), o.name.as_str(), o.uid.as_str()),
            ("Node", "node-a", "node-uid")
        );
        assert_eq!(o.controller, Some(true));
        assert_eq!(m.name_any(), "web-node-a");
    }

    #[test]
    fn reads_a_directory() {
        let dir = std::env::temp_dir().join(format!("rkube-static-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("web.yaml"), FILE).unwrap();
        std::fs::write(dir.join(".hidden.yaml"), FILE).unwrap();
        std::fs::write(dir.join("notes.txt"), "x").unwrap();
        std::fs::write(dir.join("bad.yaml"), "kind: Service\n").unwrap();
        let pods = read_dir(&dir, "n");
        assert_eq!(pods.len(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
