//! One pod worker per pod: syncs the pod through the runtime when the pod
//! changes or the runtime asks for a resync, hands each new status to the
//! writer, and on deletion stops the containers within the grace period and
//! confirms the deletion (grace 0, UID precondition), as the kubelet does.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodStatus};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Api, Client, ResourceExt};
use tokio::sync::watch;

use super::status::{is_terminal, pod_status, status_patch};
use super::writer::{StatusUpdate, StatusWriter};
use crate::metrics::Metrics;
use crate::runtime::Runtime;

/// Default resync when the runtime gives no hint.
pub const RESYNC: Duration = Duration::from_secs(10);

/// What every worker shares.
pub struct WorkerContext {
    /// API client.
    pub client: Client,
    /// The runtime.
    pub runtime: Arc<dyn Runtime>,
    /// The status writer.
    pub writer: Arc<StatusWriter>,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// Node name → InternalIP (the pods' hostIP).
    pub host_ips: HashMap<String, String>,
}

/// The latest pod object, or `None` once it is gone from the API.
pub type PodUpdates = watch::Receiver<Option<Arc<Pod>>>;

fn key(pod: &Pod) -> String {
    format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any())
}

/// Runs one pod's worker until the pod is gone (or the sender is dropped).
pub async fn run(ctx: Arc<WorkerContext>, mut rx: PodUpdates) {
    let mut last: Option<PodStatus> = None;
    let mut current: Option<Arc<Pod>> = None;
    let mut error_backoff = Duration::from_millis(500);
    loop {
        let latest = rx.borrow_and_update().clone();
        let Some(pod) = latest else {
            // Deleted from the API without our confirmation (force delete).
            if let Some(p) = current {
                let uid = p.uid().unwrap_or_default();
                ctx.writer.forget(&uid);
                let _ = ctx.runtime.kill_pod(&p, Duration::ZERO).await;
                let _ = ctx.runtime.remove_pod(&uid).await;
            }
            return;
        };
        current = Some(pod.clone());
        if last.is_none() {
            last = pod.status.clone();
        }
        if pod.metadata.deletion_timestamp.is_some() {
            terminate(&ctx, &pod, last.as_ref()).await;
            return;
        }
        let mut resync = None;
        let terminal = is_terminal(last.as_ref().and_then(|s| s.phase.as_deref()));
        if !terminal {
            match ctx.runtime.sync_pod(&pod).await {
                Ok(obs) => {
                    error_backoff = Duration::from_millis(500);
                    let host_ip = node_ip(&ctx, &pod);
                    let status = pod_status(&pod, last.as_ref(), &obs, &host_ip, Timestamp::now());
                    if last.as_ref() != Some(&status) {
                        tracing::debug!(pod = %key(&pod), phase = ?status.phase, "pod status changed");
                        ctx.writer.push(StatusUpdate {
                            namespace: pod.namespace().unwrap_or_default(),
                            name: pod.name_any(),
                            uid: pod.uid().unwrap_or_default(),
                            patch: status_patch(&pod.uid().unwrap_or_default(), &status),
                        });
                        last = Some(status);
                    }
                    resync = Some(obs.resync_after.unwrap_or(RESYNC));
                }
                Err(e) => {
                    tracing::warn!(pod = %key(&pod), error = %e, "syncing pod failed; retrying");
                    resync = Some(error_backoff);
                    error_backoff = (error_backoff * 2).min(Duration::from_secs(30));
                }
            }
        }
        match resync {
            Some(d) => {
                tokio::select! {
                    r = rx.changed() => if r.is_err() { return },
                    _ = tokio::time::sleep(d) => {}
                }
            }
            None => {
                if rx.changed().await.is_err() {
                    return;
                }
            }
        }
    }
}

fn node_ip(ctx: &WorkerContext, pod: &Pod) -> String {
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("");
    ctx.host_ips.get(node).cloned().unwrap_or_default()
}

/// The grace period: the deletion's, else the spec's, else 30 s.
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

async fn terminate(ctx: &WorkerContext, pod: &Pod, last: Option<&PodStatus>) {
    let uid = pod.uid().unwrap_or_default();
    let ns = pod.namespace().unwrap_or_default();
    let name = pod.name_any();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    ctx.writer.forget(&uid);
    let grace = grace_period(pod);
    tracing::info!(pod = %key(pod), ?grace, "killing pod");
    let mut backoff = Duration::from_millis(200);
    let obs = loop {
        match tokio::time::timeout(
            grace + Duration::from_secs(10),
            ctx.runtime.kill_pod(pod, grace),
        )
        .await
        {
            Ok(Ok(obs)) => break Some(obs),
            Ok(Err(e)) => {
                tracing::warn!(pod = %key(pod), error = %e, "killing pod failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
            Err(_) => {
                tracing::warn!(pod = %key(pod), "killing pod timed out");
                break None;
            }
        }
    };
    // The final status (containers terminated), written before the delete.
    if let Some(obs) = obs {
        let status = pod_status(pod, last, &obs, &node_ip(ctx, pod), Timestamp::now());
        if let Err(e) = api
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Strategic(&status_patch(&uid, &status)),
            )
            .await
        {
            tracing::debug!(pod = %key(pod), error = %e, "final status not written");
        }
    }
    if let Err(e) = ctx.runtime.remove_pod(&uid).await {
        tracing::warn!(pod = %key(pod), error = %e, "removing pod from the runtime failed");
    }
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some(uid.clone()),
            resource_version: None,
        }),
        ..Default::default()
    };
    let mut backoff = Duration::from_millis(200);
    for _ in 0..20 {
        match api.delete(&name, &params).await {
            Ok(_) => {
                ctx.metrics.pods_deleted.fetch_add(1, Ordering::Relaxed);
                tracing::info!(pod = %key(pod), "pod deletion confirmed");
                return;
            }
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => return,
            Err(e) => {
                tracing::warn!(pod = %key(pod), error = %e, "confirming pod deletion failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(10));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grace() {
        let p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "deletionGracePeriodSeconds": 5},
            "spec": {"terminationGracePeriodSeconds": 60, "containers": []}}))
        .unwrap();
        assert_eq!(grace_period(&p), Duration::from_secs(5));
        let p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"}, "spec": {"containers": []}}))
        .unwrap();
        assert_eq!(grace_period(&p), Duration::from_secs(30));
    }
}
