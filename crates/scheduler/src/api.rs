//! Writes to the API server, as kube-scheduler v1.37 makes them: the
//! `pods/binding` subresource, events.k8s.io/v1 Events (upstream's
//! `events.NewEventBroadcasterAdapter` recorder: `reportingController` is
//! the profile's schedulerName, `reportingInstance` `<schedulerName>-<hostname>`),
//! the `PodScheduled` condition and `nominatedNodeName` (strategic merge
//! patch of `pods/status`), and preemption (a `DisruptionTarget` condition,
//! then delete).

use std::collections::HashMap;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Api, Client, ResourceExt};
use rkube_model::decision::{self, DecisionMark};
use rkube_model::volumes::{Pv, Pvc, ANN_BOUND_BY_CONTROLLER, ANN_SELECTED_NODE};
use serde_json::json;

/// Upstream's `validation.NoteLengthLimit`.
const NOTE_LENGTH_LIMIT: usize = 1024;

/// Upstream's `truncateMessage`.
pub fn truncate_message(message: &str) -> String {
    if message.len() <= NOTE_LENGTH_LIMIT {
        return message.to_string();
    }
    let suffix = " ...";
    let mut end = NOTE_LENGTH_LIMIT - suffix.len();
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{suffix}", &message[..end])
}

/// The hostname (for `reportingInstance`).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".into())
}

/// The API client and who we are.
#[derive(Clone)]
pub struct Writer {
    /// The client.
    pub client: Client,
    /// Host name for `reportingInstance`.
    pub hostname: String,
    /// Client-side QPS/burst limit of API writes (bindings, status).
    pub limiter: std::sync::Arc<crate::ratelimit::RateLimiter>,
    /// Events have their own (kube-scheduler makes a second client for
    /// its event broadcaster, with its own QPS/burst).
    pub event_limiter: std::sync::Arc<crate::ratelimit::RateLimiter>,
    /// One event recorder per profile (they aggregate repeats).
    pub recorders: std::sync::Arc<std::sync::Mutex<HashMap<String, Recorder>>>,
}

fn reference(pod: &core::Pod) -> core::ObjectReference {
    core::ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: pod.namespace(),
        name: Some(pod.name_any()),
        uid: pod.metadata.uid.clone(),
        resource_version: pod.metadata.resource_version.clone(),
        field_path: None,
    }
}

impl Writer {
    fn pods(&self, ns: &str) -> Api<core::Pod> {
        Api::namespaced(self.client.clone(), ns)
    }

    /// POSTs a v1 Binding of the pod to the node; with a decision mark
    /// (`--record-decisions`), the Binding carries it as an annotation.
    pub async fn bind(
        &self,
        pod: &core::Pod,
        node: &str,
        mark: Option<&DecisionMark>,
    ) -> kube::Result<()> {
        let ns = pod.namespace().unwrap_or_else(|| "default".into());
        // The API server copies a Binding's annotations onto the pod.
        let annotations = mark.map(|d| {
            [(decision::ANNOTATION.to_string(), d.value())]
                .into_iter()
                .collect()
        });
        let binding = core::Binding {
            metadata: meta::ObjectMeta {
                name: Some(pod.name_any()),
                namespace: Some(ns.clone()),
                uid: pod.metadata.uid.clone(),
                annotations,
                ..Default::default()
            },
            target: core::ObjectReference {
                kind: Some("Node".into()),
                name: Some(node.into()),
                ..Default::default()
            },
        };
        self.limiter.acquire().await;
        let _: serde_json::Value = self
            .pods(&ns)
            .create_subresource("binding", &pod.name_any(), &PostParams::default(), &binding)
            .await?;
        Ok(())
    }

    /// Records an events.k8s.io/v1 Event about a pod through kube-runtime's
    /// recorder, one per profile: a repeat of the same event (same pod
    /// version, reason, action, related object) within six minutes updates
    /// the first one's `series` (count, last observed time) instead of
    /// creating another object, as client-go's event recorder aggregates.
    /// Failures are logged.
    #[allow(clippy::too_many_arguments)]
    pub async fn event(
        &self,
        scheduler_name: &str,
        regarding: &core::Pod,
        related: Option<&core::Pod>,
        type_: &str,
        reason: &str,
        action: &str,
        note: &str,
    ) {
        let recorder = self.recorder(scheduler_name);
        let ev = Event {
            type_: if type_ == "Warning" {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.into(),
            note: Some(note.into()),
            action: action.into(),
            secondary: related.map(reference),
        };
        self.event_limiter.acquire().await;
        if let Err(e) = recorder.publish(&ev, &reference(regarding)).await {
            let ns = regarding.namespace().unwrap_or_default();
            tracing::warn!(pod = %format!("{ns}/{}", regarding.name_any()), reason, error = %e, "could not record event");
        }
    }

    /// The profile's event recorder (`reportingController` is the
    /// schedulerName, `reportingInstance` `<schedulerName>-<hostname>`).
    fn recorder(&self, scheduler_name: &str) -> Recorder {
        let mut map = self.recorders.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(scheduler_name.to_string())
            .or_insert_with(|| {
                Recorder::new(
                    self.client.clone(),
                    Reporter {
                        controller: scheduler_name.into(),
                        instance: Some(format!("{scheduler_name}-{}", self.hostname)),
                    },
                )
            })
            .clone()
    }

    /// Sets `PodScheduled` to False with `reason` and `message`, and the
    /// nomination (`Some("")` clears it), unless nothing would change
    /// (upstream's `updatePod`).
    pub async fn update_pod_status(
        &self,
        pod: &core::Pod,
        reason: &str,
        message: &str,
        nominated: Option<&str>,
    ) -> kube::Result<()> {
        let status = pod.status.clone().unwrap_or_default();
        let current = status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "PodScheduled");
        let condition_changed = current.is_none_or(|c| {
            c.status != "False"
                || c.reason.as_deref() != Some(reason)
                || c.message.as_deref() != Some(message)
        });
        let nnn_changed =
            nominated.is_some_and(|n| status.nominated_node_name.as_deref().unwrap_or("") != n);
        if !condition_changed && !nnn_changed {
            return Ok(());
        }
        let mut st = serde_json::Map::new();
        if condition_changed {
            let transition = match current {
                Some(c) if c.status == "False" => c
                    .last_transition_time
                    .as_ref()
                    .map(|t| json!(t))
                    .unwrap_or_else(|| json!(meta::Time(Timestamp::now()))),
                _ => json!(meta::Time(Timestamp::now())),
            };
            let mut cond = json!({
                "type": "PodScheduled",
                "status": "False",
                "reason": reason,
                "message": message,
                "lastProbeTime": null,
                "lastTransitionTime": transition,
            });
            if let Some(g) = pod.metadata.generation {
                cond["observedGeneration"] = json!(g);
            }
            st.insert("conditions".into(), json!([cond]));
        }
        if nnn_changed {
            let n = nominated.unwrap_or_default();
            st.insert(
                "nominatedNodeName".into(),
                if n.is_empty() { json!(null) } else { json!(n) },
            );
        }
        let patch = json!({ "status": st });
        self.limiter.acquire().await;
        self.pods(&pod.namespace().unwrap_or_else(|| "default".into()))
            .patch_status(
                &pod.name_any(),
                &PatchParams::default(),
                &Patch::Strategic(patch),
            )
            .await?;
        Ok(())
    }

    /// Writes `node` as the pod's `nominatedNodeName` unless it is already
    /// (the binding cycle's pre-flight, upstream's
    /// NominatedNodeNameForExpectation: the node is claimed while PreBind
    /// or Permit wait).
    pub async fn nominate(&self, pod: &core::Pod, node: &str) -> kube::Result<()> {
        let current = pod
            .status
            .as_ref()
            .and_then(|s| s.nominated_node_name.as_deref());
        if current == Some(node) {
            return Ok(());
        }
        let patch = json!({ "status": { "nominatedNodeName": node } });
        self.limiter.acquire().await;
        self.pods(&pod.namespace().unwrap_or_else(|| "default".into()))
            .patch_status(
                &pod.name_any(),
                &PatchParams::default(),
                &Patch::Strategic(patch),
            )
            .await?;
        Ok(())
    }

    /// Binds a PersistentVolume to a claim as the volume binder does: its
    /// `spec.claimRef` names the claim (with its UID and resourceVersion)
    /// and, unless the volume already named the claim, it is marked
    /// `pv.kubernetes.io/bound-by-controller`. The update carries the
    /// volume's resourceVersion, so a concurrent change is a conflict.
    pub async fn bind_pv(&self, pv: &Pv, pvc: &Pvc) -> kube::Result<core::PersistentVolume> {
        let mut metadata = json!({ "resourceVersion": pv.resource_version });
        let already = pv
            .claim_ref
            .as_ref()
            .is_some_and(|(ns, n)| ns == &pvc.namespace && n == &pvc.name);
        if !already {
            let mut a = serde_json::Map::new();
            a.insert(ANN_BOUND_BY_CONTROLLER.into(), json!("yes"));
            metadata["annotations"] = serde_json::Value::Object(a);
        }
        let patch = json!({
            "metadata": metadata,
            "spec": { "claimRef": {
                "kind": "PersistentVolumeClaim",
                "apiVersion": "v1",
                "namespace": pvc.namespace,
                "name": pvc.name,
                "uid": pvc.uid,
                "resourceVersion": pvc.resource_version,
            }},
        });
        let api: Api<core::PersistentVolume> = Api::all(self.client.clone());
        self.limiter.acquire().await;
        api.patch(&pv.name, &PatchParams::default(), &Patch::Merge(patch))
            .await
    }

    /// Sets a claim's `volume.kubernetes.io/selected-node` (provisioning
    /// for a WaitForFirstConsumer claim), at the claim's resourceVersion.
    pub async fn select_node(
        &self,
        pvc: &Pvc,
        node: &str,
    ) -> kube::Result<core::PersistentVolumeClaim> {
        let mut a = serde_json::Map::new();
        a.insert(ANN_SELECTED_NODE.into(), json!(node));
        let patch = json!({ "metadata": {
            "resourceVersion": pvc.resource_version,
            "annotations": a,
        }});
        let api: Api<core::PersistentVolumeClaim> =
            Api::namespaced(self.client.clone(), &pvc.namespace);
        self.limiter.acquire().await;
        api.patch(&pvc.name, &PatchParams::default(), &Patch::Merge(patch))
            .await
    }

    /// Clears a pod's `nominatedNodeName`.
    pub async fn clear_nomination(&self, pod: &core::Pod) -> kube::Result<()> {
        let patch = json!({ "status": { "nominatedNodeName": null } });
        self.limiter.acquire().await;
        self.pods(&pod.namespace().unwrap_or_else(|| "default".into()))
            .patch_status(
                &pod.name_any(),
                &PatchParams::default(),
                &Patch::Strategic(patch),
            )
            .await?;
        Ok(())
    }

    /// Preempts a victim as upstream's preemption executor does: a
    /// `DisruptionTarget` condition, a `Preempted` event, then delete.
    pub async fn preempt(
        &self,
        scheduler_name: &str,
        victim: &core::Pod,
        preemptor: &core::Pod,
        node: &str,
    ) -> kube::Result<()> {
        let ns = victim.namespace().unwrap_or_else(|| "default".into());
        let patch = json!({ "status": { "conditions": [{
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": format!("{scheduler_name}: preempting to accommodate a higher priority pod"),
            "lastTransitionTime": meta::Time(Timestamp::now()),
        }]}});
        let api = self.pods(&ns);
        self.limiter.acquire().await;
        match api
            .patch_status(
                &victim.name_any(),
                &PatchParams::default(),
                &Patch::Strategic(patch),
            )
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(e) => return Err(e),
        }
        self.limiter.acquire().await;
        match api
            .delete(&victim.name_any(), &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(e) => return Err(e),
        }
        self.event(
            scheduler_name,
            victim,
            Some(preemptor),
            "Normal",
            "Preempted",
            "Preempting",
            &format!(
                "Preempted by pod {} on node {node}",
                preemptor.metadata.uid.as_deref().unwrap_or("")
            ),
        )
        .await;
        Ok(())
    }
}

/// The API server's own message for an API error (what upstream prints,
/// e.g. `pods "p" not found`), else the client's error text.
pub fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        e => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncates_like_upstream() {
        assert_eq!(truncate_message("short"), "short");
        let long = "x".repeat(2000);
        let t = truncate_message(&long);
        assert_eq!(t.len(), NOTE_LENGTH_LIMIT);
        assert!(t.ends_with(" ..."));
    }
}
