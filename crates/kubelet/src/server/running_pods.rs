//! `/runningpods/`: the pods the runtime runs, as upstream's kubelet
//! lists them from its runtime cache — a `PodList` whose items carry only
//! the name, namespace and UID, and each running container's name and
//! image (the image's id), from the runtime's ready sandboxes and running
//! containers.

use std::collections::BTreeMap;

use rkube_cri::v1 as cri;
use rkube_cri::CriClient;
use serde_json::{json, Value};

/// The `PodList` of running pods.
pub async fn list(c: &CriClient) -> anyhow::Result<Value> {
    let (sandboxes, containers) = crate::stats::runtime_pods(c).await?;
    Ok(assemble(&sandboxes, &containers))
}

/// The list from the runtime's answers: a pod is running while its
/// sandbox is ready or one of its containers runs.
pub fn assemble(sandboxes: &[cri::PodSandbox], containers: &[cri::Container]) -> Value {
    // uid → (name, namespace, containers)
    let mut pods: BTreeMap<String, (String, String, Vec<Value>)> = BTreeMap::new();
    let mut sandbox_uid: BTreeMap<&str, &str> = BTreeMap::new();
    for s in sandboxes {
        let Some(m) = &s.metadata else { continue };
        sandbox_uid.insert(&s.id, &m.uid);
        if s.state == cri::PodSandboxState::SandboxReady as i32 {
            pods.entry(m.uid.clone())
                .or_insert_with(|| (m.name.clone(), m.namespace.clone(), Vec::new()));
        }
    }
    for c in containers {
        if c.state != cri::ContainerState::ContainerRunning as i32 {
            continue;
        }
        let Some(uid) = sandbox_uid.get(c.pod_sandbox_id.as_str()) else {
            continue;
        };
        let Some(m) = sandboxes
            .iter()
            .find(|s| s.id == c.pod_sandbox_id)
            .and_then(|s| s.metadata.as_ref())
        else {
            continue;
        };
        let entry = pods
            .entry(uid.to_string())
            .or_insert_with(|| (m.name.clone(), m.namespace.clone(), Vec::new()));
        entry.2.push(json!({
            "name": c.metadata.as_ref().map(|m| m.name.clone()).unwrap_or_default(),
            "image": c.image_ref,
            "resources": {},
        }));
    }
    let items: Vec<Value> = pods
        .into_iter()
        .map(|(uid, (name, namespace, containers))| {
            json!({
                "metadata": {"name": name, "namespace": namespace, "uid": uid},
                "spec": {"containers": containers},
                "status": {},
            })
        })
        .collect();
    json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sandbox(id: &str, uid: &str, ready: bool) -> cri::PodSandbox {
        cri::PodSandbox {
            id: id.into(),
            metadata: Some(cri::PodSandboxMetadata {
                name: format!("pod-{uid}"),
                uid: uid.into(),
                namespace: "ns".into(),
                attempt: 0,
            }),
            state: if ready {
                cri::PodSandboxState::SandboxReady as i32
            } else {
                cri::PodSandboxState::SandboxNotready as i32
            },
            ..Default::default()
        }
    }

    fn container(sandbox: &str, name: &str, running: bool) -> cri::Container {
        cri::Container {
            id: format!("{sandbox}-{name}"),
            pod_sandbox_id: sandbox.into(),
            metadata: Some(cri::ContainerMetadata {
                name: name.into(),
                attempt: 0,
            }),
            image_ref: "sha256:abc".into(),
            state: if running {
                cri::ContainerState::ContainerRunning as i32
            } else {
                cri::ContainerState::ContainerExited as i32
            },
            ..Default::default()
        }
    }

    #[test]
    fn running_pods_and_their_running_containers() {
        let v = assemble(
            &[
                sandbox("s1", "u1", true),
                sandbox("s2", "u2", false),
                sandbox("s3", "u3", false),
            ],
            &[
                container("s1", "app", true),
                container("s1", "done", false),
                container("s2", "still", true),
            ],
        );
        let items = v["items"].as_array().unwrap();
        assert_eq!(items.len(), 2, "u3 runs nothing: {v}");
        assert_eq!(items[0]["metadata"]["uid"], "u1");
        assert_eq!(
            items[0]["spec"]["containers"],
            json!([{"name": "app", "image": "sha256:abc", "resources": {}}])
        );
        assert_eq!(items[1]["metadata"]["name"], "pod-u2");
        assert_eq!(v["kind"], "PodList");
    }
}
