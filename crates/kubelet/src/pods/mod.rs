//! Pod workers: ONE watch per process over the pods bound to this
//! process's nodes (`spec.nodeName=<node>` for one node; for many sim nodes
//! `spec.nodeName!=` filtered by the node set), dispatching each pod's
//! latest object to its worker ([`worker`]). Statuses flow one way:
//! runtime → worker → [`writer`] → `pods/NAME/status`. Before its first
//! sync a worker has its pod admitted ([`admission`]).

pub mod admission;
pub mod static_pods;

pub mod status;
pub mod worker;
pub mod writer;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, ResourceExt};
use tokio::sync::watch;

use worker::WorkerContext;

/// The field selector of the pod watch for these nodes.
pub fn field_selector(nodes: &HashSet<String>) -> String {
    if nodes.len() == 1 {
        format!("spec.nodeName={}", nodes.iter().next().expect("one node"))
    } else {
        "spec.nodeName!=".to_string()
    }
}

/// Routes pod events to workers (pure bookkeeping + spawning).
pub struct Dispatcher {
    ctx: Arc<WorkerContext>,
    nodes: HashSet<String>,
    workers: HashMap<String, watch::Sender<Option<Arc<Pod>>>>,
}

impl Dispatcher {
    /// A dispatcher for `nodes`.
    pub fn new(ctx: Arc<WorkerContext>, nodes: HashSet<String>) -> Self {
        Dispatcher {
            ctx,
            nodes,
            workers: HashMap::new(),
        }
    }

    fn ours(&self, pod: &Pod) -> bool {
        pod.spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .is_some_and(|n| self.nodes.contains(n))
    }

    /// A pod was added or changed.
    pub fn apply(&mut self, pod: Pod) {
        let uid = pod.uid().unwrap_or_default();
        if !self.ours(&pod) {
            self.gone(&uid);
            return;
        }
        let pod = Arc::new(pod);
        if let Some(tx) = self.workers.get(&uid) {
            if !tx.is_closed() {
                tx.send_replace(Some(pod));
                return;
            }
            // The worker finished (deletion confirmed); the pod is still
            // listed until the delete event arrives.
            if pod.metadata.deletion_timestamp.is_some() {
                return;
            }
        }
        let (tx, rx) = watch::channel(Some(pod));
        tokio::spawn(worker::run(self.ctx.clone(), rx));
        self.workers.insert(uid, tx);
    }

    /// A pod is gone from the API.
    pub fn gone(&mut self, uid: &str) {
        if let Some(tx) = self.workers.remove(uid) {
            tx.send_replace(None);
        }
    }

    /// After a relist: every pod not in `seen` is gone.
    pub fn retain(&mut self, seen: &HashSet<String>) {
        let stale: Vec<String> = self
            .workers
            .keys()
            .filter(|u| !seen.contains(*u))
            .cloned()
            .collect();
        for uid in stale {
            self.gone(&uid);
        }
    }

    /// Number of pods with a worker.
    pub fn len(&self) -> usize {
        self.workers.len()
    }

    /// True when no pod has a worker.
    pub fn is_empty(&self) -> bool {
        self.workers.is_empty()
    }
}

/// Watches the pods of `nodes` forever, dispatching to workers; pods the
/// runtime holds but the API no longer has are removed after the first list.
pub async fn run(ctx: Arc<WorkerContext>, nodes: HashSet<String>) {
    let api: Api<Pod> = Api::all(ctx.client.clone());
    let cfg = watcher::Config::default().fields(&field_selector(&nodes));
    let mut stream = watcher::watcher(api, cfg).default_backoff().boxed();
    let mut d = Dispatcher::new(ctx.clone(), nodes);
    let mut seen = HashSet::new();
    let mut first_list = true;
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(Event::Init) => seen.clear(),
            Ok(Event::InitApply(p)) => {
                if let Some(uid) = p.metadata.uid.clone() {
                    seen.insert(uid);
                }
                // A mirror pod stands for its static pod, whose directory
                // and cgroup go by the static pod's uid.
                if let Some(uid) = crate::pod::mirror_of(&p) {
                    seen.insert(uid);
                }
                ctx.metrics
                    .startup
                    .observed_on_watch(&p, k8s_openapi::jiff::Timestamp::now());
                d.apply(p);
            }
            Ok(Event::InitDone) => {
                d.retain(&seen);
                ctx.allocated.remove_orphans(&|uid| seen.contains(uid));
                if let Some(d) = &ctx.devices {
                    d.retain(&|uid| seen.contains(uid));
                }
                tracing::info!(pods = d.len(), "pods listed");
                if first_list {
                    first_list = false;
                    // A period after the first list, not at once: the
                    // workers of the pods just listed record themselves
                    // as they start, and a claim of a pod whose worker has
                    // not yet must not look abandoned.
                    if let Some(dra) = ctx.dra.clone() {
                        let states = ctx.states.clone();
                        tokio::spawn(async move {
                            loop {
                                tokio::time::sleep(crate::dra::RECONCILE_PERIOD).await;
                                dra.reconcile(&|uid| states.active(uid)).await;
                            }
                        });
                    }
                    if let Ok(uids) = ctx.runtime.list_pods().await {
                        ctx.runtime.forget_others(&uids);
                        for uid in uids.into_iter().filter(|u| !seen.contains(u)) {
                            tracing::info!(%uid, "removing a pod the API no longer has");
                            let _ = ctx.runtime.remove_pod(&uid).await;
                        }
                    }
                    remove_orphans(&ctx, &d.nodes, &seen).await;
                }
            }
            Ok(Event::Apply(p)) => {
                ctx.metrics
                    .startup
                    .observed_on_watch(&p, k8s_openapi::jiff::Timestamp::now());
                d.apply(p)
            }
            Ok(Event::Delete(p)) => d.gone(&p.uid().unwrap_or_default()),
            Err(e) => tracing::warn!(error = %e, "pod watch failed; retrying"),
        }
    }
}

/// Removes what is left of pods the kubelet no longer knows of (their
/// directories; [`Runtime::leftovers`](crate::runtime::Runtime::leftovers)):
/// not in the API (`seen`, with the static pods its mirror pods stand for),
/// not in `staticPodPath`, not active.
async fn remove_orphans(ctx: &WorkerContext, nodes: &HashSet<String>, seen: &HashSet<String>) {
    // The static pods' files read after what is left: one started
    // meanwhile is known by then.
    let leftovers = ctx.runtime.leftovers().await;
    let statics: HashSet<String> = ctx
        .static_pod_path
        .iter()
        .flat_map(|dir| {
            nodes
                .iter()
                .flat_map(|n| static_pods::read_dir(dir, n).into_keys())
        })
        .collect();
    for uid in leftovers {
        if seen.contains(&uid) || statics.contains(&uid) || ctx.states.active(&uid) {
            continue;
        }
        tracing::info!(%uid, "orphaned pod found, removing its directory and cgroup");
        if let Err(e) = ctx.runtime.remove_pod(&uid).await {
            tracing::warn!(%uid, error = %e, "orphaned pod found, but it could not be cleaned up");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors() {
        let one: HashSet<String> = ["n1".to_string()].into();
        assert_eq!(field_selector(&one), "spec.nodeName=n1");
        let two: HashSet<String> = ["a".to_string(), "b".to_string()].into();
        assert_eq!(field_selector(&two), "spec.nodeName!=");
    }
}
