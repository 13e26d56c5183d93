//! The pod status writer: one task PATCHes `pods/NAME/status` for all pod
//! workers. Workers *set* the latest desired status of a pod (a map keyed
//! by uid), so a burst of changes to one pod becomes one write; failed
//! writes are put back unless a newer status arrived meanwhile, and the
//! writer backs off while the apiserver is unavailable. The latest status
//! is never dropped except for pods that are gone (404) or replaced (UID
//! precondition, 409).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};

use crate::metrics::Metrics;

/// One pending status write.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusUpdate {
    /// Pod namespace.
    pub namespace: String,
    /// Pod name.
    pub name: String,
    /// Pod uid.
    pub uid: String,
    /// The strategic-merge patch body.
    pub patch: serde_json::Value,
}

/// The coalescing map (pure; the writer task drives it).
#[derive(Debug, Default)]
pub struct Batch {
    pending: HashMap<String, (u64, StatusUpdate)>,
    seq: u64,
}

impl Batch {
    /// Sets the latest status of a pod, replacing a pending one.
    pub fn push(&mut self, u: StatusUpdate) {
        self.seq += 1;
        self.pending.insert(u.uid.clone(), (self.seq, u));
    }

    /// Takes everything pending, each with its sequence number.
    pub fn take(&mut self) -> Vec<(u64, StatusUpdate)> {
        self.pending.drain().map(|(_, v)| v).collect()
    }

    /// Puts a failed write back unless a newer one is pending.
    pub fn requeue(&mut self, seq: u64, u: StatusUpdate) {
        self.pending.entry(u.uid.clone()).or_insert((seq, u));
    }

    /// Drops a pod's pending write.
    pub fn forget(&mut self, uid: &str) {
        self.pending.remove(uid);
    }

    /// Number of pods with a pending write.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// True when nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

/// The shared writer handle.
#[derive(Default)]
pub struct StatusWriter {
    batch: Mutex<Batch>,
    wake: tokio::sync::Notify,
}

/// What a write attempt came to.
enum Outcome {
    /// Written: the pod as the API server returned it.
    Done(Box<Pod>),
    Gone,
    Retry,
}

impl StatusWriter {
    fn lock(&self) -> std::sync::MutexGuard<'_, Batch> {
        self.batch.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the latest status of a pod.
    pub fn push(&self, u: StatusUpdate) {
        self.lock().push(u);
        self.wake.notify_one();
    }

    /// Drops a pod's pending write (the pod is being deleted).
    pub fn forget(&self, uid: &str) {
        self.lock().forget(uid);
    }

    /// Pending writes.
    pub fn pending(&self) -> usize {
        self.lock().len()
    }

    /// Writes a pod's final status now, in place of any pending one (the
    /// pod is about to be deleted); false when it was not written.
    pub async fn write_final(&self, client: Client, metrics: &Metrics, u: StatusUpdate) -> bool {
        self.forget(&u.uid);
        match write_one(client, &u).await {
            Outcome::Done(p) => {
                metrics.startup.status_written(&p);
                metrics
                    .pod_status_patches
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                true
            }
            Outcome::Gone | Outcome::Retry => false,
        }
    }

    /// Writes statuses forever, at most `concurrency` at a time.
    pub async fn run(self: Arc<Self>, client: Client, metrics: Arc<Metrics>, concurrency: usize) {
        let mut backoff = Duration::ZERO;
        loop {
            if self.lock().is_empty() {
                self.wake.notified().await;
            }
            let items = self.lock().take();
            let results: Vec<(u64, StatusUpdate, Outcome)> = futures::stream::iter(items)
                .map(|(seq, u)| {
                    let client = client.clone();
                    async move {
                        let outcome = write_one(client, &u).await;
                        (seq, u, outcome)
                    }
                })
                .buffer_unordered(concurrency)
                .collect()
                .await;
            let mut failed = false;
            {
                let mut batch = self.lock();
                for (seq, u, outcome) in results {
                    match outcome {
                        Outcome::Done(p) => {
                            metrics.startup.status_written(&p);
                            metrics
                                .pod_status_patches
                                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        Outcome::Gone => {}
                        Outcome::Retry => {
                            metrics
                                .pod_status_errors
                                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            batch.requeue(seq, u);
                            failed = true;
                        }
                    }
                }
            }
            if failed {
                backoff = (backoff * 2).clamp(Duration::from_millis(200), Duration::from_secs(10));
                tokio::time::sleep(backoff).await;
            } else {
                backoff = Duration::ZERO;
            }
        }
    }
}

/// PATCHes one pod's status.
async fn write_one(client: Client, u: &StatusUpdate) -> Outcome {
    let api: Api<Pod> = Api::namespaced(client, &u.namespace);
    let r = api
        .patch_status(
            &u.name,
            &PatchParams::default(),
            &Patch::Strategic(&u.patch),
        )
        .await;
    match r {
        Ok(p) => Outcome::Done(Box::new(p)),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {
            tracing::debug!(pod = %u.name, code = s.code, "pod gone or replaced; status dropped");
            Outcome::Gone
        }
        Err(e) => {
            tracing::warn!(pod = %format!("{}/{}", u.namespace, u.name), error = %e, "status update failed; will retry");
            Outcome::Retry
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(uid: &str, phase: &str) -> StatusUpdate {
        StatusUpdate {
            namespace: "default".into(),
            name: format!("p-{uid}"),
            uid: uid.into(),
            patch: serde_json::json!({"status": {"phase": phase}}),
        }
    }

    #[test]
    fn coalesces_to_latest() {
        let mut b = Batch::default();
        b.push(u("a", "Pending"));
        b.push(u("a", "Running"));
        b.push(u("b", "Running"));
        let mut items = b.take();
        items.sort_by(|x, y| x.1.uid.cmp(&y.1.uid));
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].1.patch["status"]["phase"], "Running");
        assert!(b.is_empty());
    }

    #[test]
    fn failed_write_never_overrides_newer() {
        let mut b = Batch::default();
        b.push(u("a", "Pending"));
        let (seq, old) = b.take().pop().unwrap();
        // While the write was in flight, a newer status arrived.
        b.push(u("a", "Running"));
        b.requeue(seq, old.clone());
        assert_eq!(b.take()[0].1.patch["status"]["phase"], "Running");
        // Nothing newer: the failed one comes back.
        b.requeue(seq, old);
        assert_eq!(b.len(), 1);
        b.forget("a");
        assert!(b.is_empty());
    }
}
