//! Writes to the API server, as kube-scheduler v1.37 makes them: the
//! `pods/binding` subresource, events.k8s.io/v1 Events (upstream's
//! `events.NewEventBroadcasterAdapter` recorder: `reportingController` is
//! the profile's schedulerName, `reportingInstance` `<schedulerName>-<hostname>`),
//! the `PodScheduled` condition and `nominatedNodeName` (strategic merge
//! patch of `pods/status`), and preemption (a `DisruptionTarget` condition,
//! then delete).

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::resource::v1 as resource;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use rkube_model::decision::{self, DecisionMark};
use rkube_model::volumes::{Pv, Pvc, ANN_BOUND_BY_CONTROLLER, ANN_SELECTED_NODE};
use serde_json::json;

use crate::events::{reference, EventQueue, Pending};

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
    /// Client-side QPS/burst limit of API writes (bindings, status).
    pub limiter: std::sync::Arc<rkube_daemon::ratelimit::RateLimiter>,
    /// Events, published by their own task with their own QPS/burst
    /// (kube-scheduler makes a second client for its event broadcaster).
    pub events: EventQueue,
    /// A token of `limiter` taken ahead, for the next write (see
    /// [`Writer::prepaid`]).
    pub prepaid: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

impl Writer {
    /// A copy of this writer holding one rate-limit token, taken now: its
    /// first write does not wait again. The binding cycle's writer is
    /// prepaid before its thread is taken, so a burst of bindings waits
    /// for the rate limit as tasks, not as hundreds of blocked threads.
    pub async fn prepaid(&self) -> Writer {
        self.limiter.acquire().await;
        Writer {
            prepaid: Some(std::sync::Arc::new(std::sync::atomic::AtomicBool::new(
                true,
            ))),
            ..self.clone()
        }
    }

    /// Waits for a rate-limit token, unless one was taken ahead.
    async fn token(&self) {
        let ahead = self
            .prepaid
            .as_ref()
            .is_some_and(|p| p.swap(false, std::sync::atomic::Ordering::SeqCst));
        if !ahead {
            self.limiter.acquire().await;
        }
    }

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
        self.token().await;
        let _: serde_json::Value = self
            .pods(&ns)
            .create_subresource("binding", &pod.name_any(), &PostParams::default(), &binding)
            .await?;
        Ok(())
    }

    /// Records an events.k8s.io/v1 Event about a pod: queued, never
    /// waited for (see [`crate::events`]).
    #[allow(clippy::too_many_arguments)]
    pub fn event(
        &self,
        scheduler_name: &str,
        regarding: &core::Pod,
        related: Option<&core::Pod>,
        type_: &str,
        reason: &str,
        action: &str,
        note: &str,
    ) {
        self.events.record(Pending {
            scheduler_name: scheduler_name.into(),
            regarding: reference(regarding),
            related: related.map(reference),
            warning: type_ == "Warning",
            reason: reason.into(),
            action: action.into(),
            note: note.into(),
        });
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
        self.token().await;
        self.pods(&pod.namespace().unwrap_or_else(|| "default".into()))
            .patch_status(
                &pod.name_any(),
                &PatchParams::default(),
                &Patch::Strategic(patch),
            )
            .await?;
        Ok(())
    }

    /// Sets the PodGroup's `PodGroupInitiallyScheduled` condition to
    /// `status` with `reason` and `message` (upstream's
    /// `updatePodGroupCondition`): never back from True, nothing written
    /// when nothing would change, the transition time kept while the status
    /// does not change, the other conditions left as they are (a
    /// strategic merge patch, as upstream's `PatchPodGroupStatus`).
    pub async fn pod_group_condition(
        &self,
        group: &k8s_openapi::api::scheduling::v1beta1::PodGroup,
        status: &str,
        reason: &str,
        message: &str,
    ) -> kube::Result<()> {
        const TYPE: &str = "PodGroupInitiallyScheduled";
        let conditions = group
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        let current = conditions.iter().find(|c| c.type_ == TYPE);
        if current.is_some_and(|c| c.status == "True" && status != "True") {
            return Ok(());
        }
        let generation = group.metadata.generation;
        if current.is_some_and(|c| {
            c.status == status
                && c.reason == reason
                && c.message == message
                && c.observed_generation == generation
        }) {
            return Ok(());
        }
        let transition = match current {
            Some(c) if c.status == status => json!(c.last_transition_time),
            _ => json!(meta::Time(Timestamp::now())),
        };
        let mut cond = json!({
            "type": TYPE,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": transition,
        });
        if let Some(g) = generation {
            cond["observedGeneration"] = json!(g);
        }
        // A strategic merge patch: conditions merge by type, the others'
        // stay as the API server has them.
        let patch = json!({ "status": { "conditions": [cond] } });
        self.token().await;
        let api: Api<k8s_openapi::api::scheduling::v1beta1::PodGroup> = Api::namespaced(
            self.client.clone(),
            &group.namespace().unwrap_or_else(|| "default".into()),
        );
        api.patch_status(
            &group.name_any(),
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
        self.token().await;
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
        self.token().await;
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
        self.token().await;
        api.patch(&pvc.name, &PatchParams::default(), &Patch::Merge(patch))
            .await
    }

    /// Clears an idle claim's allocation, `reservedFor` and device status
    /// (DynamicResources' PostFilter, upstream's `deallocateOrDeletePodClaims`)
    /// when it is still allocated and reserved by nobody or only by the
    /// pod `pod_uid`; a claim changed meanwhile is left alone (its update
    /// requeues the pod anyway).
    pub async fn deallocate_claim(
        &self,
        namespace: &str,
        name: &str,
        pod_uid: &str,
    ) -> Result<(), String> {
        let api: Api<resource::ResourceClaim> = Api::namespaced(self.client.clone(), namespace);
        self.token().await;
        let mut claim = api.get(name).await.map_err(|e| api_message(&e))?;
        let Some(status) = claim.status.as_mut() else {
            return Ok(());
        };
        let idle = match status.reserved_for.as_deref().unwrap_or_default() {
            [] => true,
            [only] => only.uid == pod_uid,
            _ => false,
        };
        if status.allocation.is_none() || !idle {
            return Ok(());
        }
        status.allocation = None;
        status.reserved_for = None;
        status.devices = None;
        self.token().await;
        api.replace_status(name, &PostParams::default(), &claim)
            .await
            .map(|_| ())
            .map_err(|e| api_message(&e))
    }

    /// PreBind's write of a ResourceClaim, as upstream's `bindClaim`: with
    /// a new `allocation`, the delete-protection finalizer first (a normal
    /// update), then the status with the allocation, its timestamp and the
    /// pod in `reservedFor`. Each write carries the resourceVersion read;
    /// a conflict re-reads the claim and tries again (client-go's
    /// `retry.DefaultRetry`: 5 attempts).
    pub async fn write_claim(
        &self,
        namespace: &str,
        name: &str,
        allocation: Option<&rkube_model::dra::Allocation>,
        consumer: &rkube_model::dra::Consumer,
    ) -> Result<resource::ResourceClaim, String> {
        let api: Api<resource::ResourceClaim> = Api::namespaced(self.client.clone(), namespace);
        let conflict = |e: &kube::Error| matches!(e, kube::Error::Api(s) if s.code == 409);
        let mut last = String::new();
        for _ in 0..5 {
            self.token().await;
            let mut claim = match api.get(name).await {
                Ok(c) => c,
                Err(e) => {
                    return Err(format!(
                        "get updated claim {namespace}/{name} after conflict: {}",
                        api_message(&e)
                    ))
                }
            };
            if claim.metadata.deletion_timestamp.is_some() {
                return Err(format!(
                    "claim {namespace}/{name} got deleted in the meantime"
                ));
            }
            let mut status = claim.status.clone().unwrap_or_default();
            if let Some(a) = allocation {
                if status.allocation.is_some() {
                    return Err(format!(
                        "claim {namespace}/{name} got allocated elsewhere in the meantime"
                    ));
                }
                let finalizers = claim.metadata.finalizers.get_or_insert_with(Vec::new);
                if !finalizers
                    .iter()
                    .any(|f| f == rkube_model::dra::DELETE_PROTECTION_FINALIZER)
                {
                    finalizers.push(rkube_model::dra::DELETE_PROTECTION_FINALIZER.into());
                    self.token().await;
                    match api.replace(name, &PostParams::default(), &claim).await {
                        Ok(c) => claim = c,
                        Err(e) if conflict(&e) => {
                            last = api_message(&e);
                            continue;
                        }
                        Err(e) => {
                            return Err(format!(
                                "add finalizer to claim {namespace}/{name}: {}",
                                api_message(&e)
                            ))
                        }
                    }
                }
                status.allocation = Some(rkube_model::dra_api::allocation(a));
            }
            let Some(alloc) = status.allocation.as_mut() else {
                return Err(format!(
                    "claim {namespace}/{name} got deallocated elsewhere in the meantime"
                ));
            };
            if alloc.allocation_timestamp.is_none() {
                alloc.allocation_timestamp = Some(meta::Time(Timestamp::now()));
            }
            status
                .reserved_for
                .get_or_insert_with(Vec::new)
                .push(rkube_model::dra_api::consumer(consumer));
            claim.status = Some(status);
            self.token().await;
            match api
                .replace_status(name, &PostParams::default(), &claim)
                .await
            {
                Ok(c) => return Ok(c),
                Err(e) if conflict(&e) => last = api_message(&e),
                Err(e) => return Err(api_message(&e)),
            }
        }
        Err(last)
    }

    /// Creates the claim for a pod's extended resources backed by DRA, as
    /// upstream's PreBind does: its device requests, the pod as
    /// controlling owner, the `extended-resource-claim` annotation, named
    /// from `generateName`; no status.
    pub async fn create_claim(
        &self,
        claim: &rkube_model::dra::ResourceClaim,
    ) -> Result<resource::ResourceClaim, String> {
        let requests: Vec<serde_json::Value> = claim
            .spec
            .requests
            .iter()
            .filter_map(|r| {
                let e = r.exactly.as_ref()?;
                let rkube_model::dra::AllocationMode::ExactCount(count) = e.mode else {
                    return None;
                };
                Some(json!({
                    "name": r.name,
                    "exactly": {
                        "deviceClassName": e.device_class_name,
                        "allocationMode": "ExactCount",
                        "count": count,
                    }
                }))
            })
            .collect();
        let object = json!({
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {
                "namespace": claim.namespace,
                "generateName": claim.generate_name,
                "annotations": {
                    rkube_model::dra::EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"
                },
                "ownerReferences": [{
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": claim.owner_pod_name.clone().unwrap_or_default(),
                    "uid": claim.owner_pod_uid.clone().unwrap_or_default(),
                    "controller": true,
                }],
            },
            "spec": { "devices": { "requests": requests } },
        });
        let object: resource::ResourceClaim =
            serde_json::from_value(object).map_err(|e| e.to_string())?;
        let api: Api<resource::ResourceClaim> =
            Api::namespaced(self.client.clone(), &claim.namespace);
        self.token().await;
        api.create(&PostParams::default(), &object)
            .await
            .map_err(|e| {
                format!(
                    "create claim for extended resources {}/{}: {}",
                    claim.namespace,
                    claim.name,
                    api_message(&e)
                )
            })
    }

    /// Deletes a claim as upstream's `deleteClaim`: the delete-protection
    /// finalizer removed first (conflicts re-read and retried), then
    /// delete; a claim already gone is fine.
    pub async fn delete_claim(&self, namespace: &str, name: &str) -> Result<(), String> {
        let api: Api<resource::ResourceClaim> = Api::namespaced(self.client.clone(), namespace);
        let mut last = String::new();
        let mut updated = false;
        for _ in 0..5 {
            self.token().await;
            let mut claim = match api.get(name).await {
                Ok(c) => c,
                Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
                Err(e) => {
                    return Err(format!(
                        "get resourceclaim {namespace}/{name}: {}",
                        api_message(&e)
                    ))
                }
            };
            let finalizers = claim.metadata.finalizers.get_or_insert_with(Vec::new);
            finalizers.retain(|f| f != rkube_model::dra::DELETE_PROTECTION_FINALIZER);
            self.token().await;
            match api.replace(name, &PostParams::default(), &claim).await {
                Ok(_) => {
                    updated = true;
                    break;
                }
                Err(kube::Error::Api(s)) if s.code == 409 => last = s.message,
                Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
                Err(e) => {
                    return Err(format!(
                        "update resourceclaim {namespace}/{name}: {}",
                        api_message(&e)
                    ))
                }
            }
        }
        if !updated {
            return Err(format!("update resourceclaim {namespace}/{name}: {last}"));
        }
        self.token().await;
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(api_message(&e)),
        }
    }

    /// Writes the pod's `status.extendedResourceClaimStatus`.
    pub async fn set_extended_resource_claim_status(
        &self,
        namespace: &str,
        pod: &str,
        claim_name: &str,
        mappings: &[rkube_model::dra::RequestMapping],
    ) -> Result<(), String> {
        let mappings: Vec<serde_json::Value> = mappings
            .iter()
            .map(|m| {
                json!({
                    "containerName": m.container_name,
                    "resourceName": m.resource_name,
                    "requestName": m.request_name,
                })
            })
            .collect();
        let patch = json!({ "status": { "extendedResourceClaimStatus": {
            "requestMappings": mappings,
            "resourceClaimName": claim_name,
        }}});
        self.token().await;
        self.pods(namespace)
            .patch_status(pod, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map(|_| ())
            .map_err(|e| {
                format!(
                    "update pod {namespace}/{pod} ExtendedResourceClaimStatus: {}",
                    api_message(&e)
                )
            })
    }

    /// Clears a pod's `nominatedNodeName`.
    pub async fn clear_nomination(&self, pod: &core::Pod) -> kube::Result<()> {
        let patch = json!({ "status": { "nominatedNodeName": null } });
        self.token().await;
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
        preemptor: &Preemptor,
        node: &str,
    ) -> kube::Result<()> {
        let ns = victim.namespace().unwrap_or_else(|| "default".into());
        let patch = json!({ "status": { "conditions": [{
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": format!("{scheduler_name}: preempting to accommodate a higher priority {}", preemptor.kind),
            "lastTransitionTime": meta::Time(Timestamp::now()),
        }]}});
        let api = self.pods(&ns);
        self.token().await;
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
        self.token().await;
        match api
            .delete(&victim.name_any(), &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(e) => return Err(e),
        }
        self.preempted(scheduler_name, victim, preemptor, node, false);
        Ok(())
    }

    /// The `Preempted` Event of a victim; `in_memory`: it was waiting on
    /// Permit and was rejected there, without a deletion.
    pub fn preempted(
        &self,
        scheduler_name: &str,
        victim: &core::Pod,
        preemptor: &Preemptor,
        node: &str,
        in_memory: bool,
    ) {
        let uid = preemptor.object.uid.as_deref().unwrap_or("");
        let mut note = format!("Preempted by {} {uid} on node {node}", preemptor.kind);
        if in_memory {
            note.push_str(" (in kube-scheduler memory).");
        }
        self.events.record(Pending {
            scheduler_name: scheduler_name.into(),
            regarding: reference(victim),
            related: Some(preemptor.object.clone()),
            warning: false,
            reason: "Preempted".into(),
            action: "Preempting".into(),
            note,
        });
    }
}

/// Who preempts: a pod, or a PodGroup (workload-aware preemption), as
/// upstream's executor names them in conditions and events.
#[derive(Debug, Clone)]
pub struct Preemptor {
    /// `pod` or `podgroup` (upstream's entity key types).
    pub kind: &'static str,
    /// The object, for the Event's `related`.
    pub object: core::ObjectReference,
}

impl Preemptor {
    /// A pod.
    pub fn pod(p: &core::Pod) -> Self {
        Preemptor {
            kind: "pod",
            object: reference(p),
        }
    }

    /// A PodGroup.
    pub fn pod_group(g: &k8s_openapi::api::scheduling::v1beta1::PodGroup) -> Self {
        Preemptor {
            kind: "podgroup",
            object: core::ObjectReference {
                api_version: Some("scheduling.k8s.io/v1beta1".into()),
                kind: Some("PodGroup".into()),
                namespace: g.namespace(),
                name: Some(g.name_any()),
                uid: g.metadata.uid.clone(),
                resource_version: g.metadata.resource_version.clone(),
                field_path: None,
            },
        }
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

    /// A limiter of `burst` tokens that refills once in ~17 minutes: a
    /// wait for one more never ends within a test.
    fn writer(burst: i32) -> Writer {
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        Writer {
            client: Client::try_from(config).unwrap(),
            limiter: std::sync::Arc::new(rkube_daemon::ratelimit::RateLimiter::new(0.001, burst)),
            events: EventQueue::new(1).0,
            prepaid: None,
        }
    }

    async fn completes(f: impl std::future::Future<Output = ()>) -> bool {
        tokio::time::timeout(std::time::Duration::from_millis(200), f)
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn a_prepaid_writer_spends_its_token_once() {
        let w = writer(2);
        let paid = w.prepaid().await; // the first of two tokens
        assert!(completes(paid.token()).await, "the token taken ahead");
        assert!(completes(w.token()).await, "the second token");
        // Both are spent: neither writer gets another, the prepaid one's
        // clone included (the token travels with the cycle, once).
        assert!(!completes(paid.clone().token()).await);
        assert!(!completes(w.token()).await);
    }
}
