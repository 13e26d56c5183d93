//! One pod worker per pod: syncs the pod through the runtime when the pod
//! changes or the runtime asks for a resync, hands each new status to the
//! writer, and on deletion stops the containers within the grace period and
//! confirms the deletion (grace 0, UID precondition), as the kubelet does.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodStatus};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Preconditions};
use kube::{Api, Client, ResourceExt};
use tokio::sync::{mpsc, oneshot, watch};

use super::admission::Admission;
use super::status::{
    add_resize_conditions, evicted_status, final_pod_status, is_terminal, pod_status,
    rejected_status, status_patch,
};
use super::writer::{StatusUpdate, StatusWriter};
use crate::metrics::{Metrics, SyncKind};
use crate::pod::{grace_period, pod_key};
use crate::runtime::{Rejection, Runtime};

/// The periodic resync of pod `uid` when the runtime gives no sooner hint:
/// `every` (`syncFrequency`) plus up to half of it, the share fixed by the
/// uid, so that pods started together do not resync together (upstream
/// jitters its resync interval by up to half too).
pub fn resync_of(uid: &str, every: Duration) -> Duration {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    uid.hash(&mut h);
    every + every.mul_f64((h.finish() % 1000) as f64 / 2000.0)
}

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
    /// The pods that run (the eviction manager's candidates).
    pub active: Arc<ActivePods>,
    /// The kubelet's own admission of the pods bound to its nodes.
    pub admission: Admission,
    /// Which pods are terminated or evicted (the garbage collector asks).
    pub states: Arc<PodStates>,
    /// The resources each pod was admitted or resized with
    /// (`allocated_pods_state`).
    pub allocated: Arc<crate::allocation::State>,
    /// The device plugins' devices (none on simulated nodes).
    pub devices: Option<Arc<crate::devices::Manager>>,
    /// The DRA manager (none on simulated nodes): claims of pods that are
    /// gone are unprepared once the pods are listed.
    pub dra: Option<Arc<crate::dra::Manager>>,
    /// `staticPodPath`, if set: its pods' uids are never swept as orphans.
    pub static_pod_path: Option<std::path::PathBuf>,
    /// `syncFrequency`: each pod's periodic resync ([`resync_of`]).
    pub sync_frequency: Duration,
}

/// What the garbage collector asks the pod workers (upstream's
/// `podStateProvider`): which pods' containers may all go.
#[derive(Debug, Default)]
pub struct PodStates {
    /// uid → (terminated, evicted).
    pods: Mutex<HashMap<String, (bool, bool)>>,
}

impl PodStates {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (bool, bool)>> {
        self.pods.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records pod `uid`'s state (by its worker).
    pub fn set(&self, uid: &str, terminated: bool, evicted: bool) {
        self.lock().insert(uid.to_string(), (terminated, evicted));
    }

    fn forget(&self, uid: &str) {
        self.lock().remove(uid);
    }

    /// Upstream's `ShouldPodContentBeRemoved` for a pod with a worker: it
    /// was evicted.
    pub fn content_removable(&self, uid: &str) -> bool {
        self.lock().get(uid).is_some_and(|s| s.1)
    }

    /// Whether pod `uid` has a worker and is not terminated (upstream's
    /// active pods).
    pub fn active(&self, uid: &str) -> bool {
        self.lock().get(uid).is_some_and(|s| !s.0)
    }

    /// Upstream's `ShouldPodRuntimeBeRemoved`: the pod is terminated.
    pub fn runtime_removable(&self, uid: &str) -> bool {
        self.lock().get(uid).is_some_and(|s| s.0)
    }
}

pub use super::status::Disruption;

/// A request of the eviction or shutdown manager to a pod worker: kill the
/// pod within `grace`, then report it ended with `message`.
#[derive(Debug)]
pub struct EvictRequest {
    /// Which manager asks.
    pub reason: Disruption,
    /// The status message (upstream's "The node was low on resource: ...").
    pub message: String,
    /// Grace period for the kill (1 s for hard thresholds, as upstream).
    pub grace: Duration,
    /// Answered once the pod is killed and its status queued (`true`), or
    /// `false` when the worker could not evict it (already terminal, kill
    /// failed).
    pub done: oneshot::Sender<bool>,
}

/// A pod whose worker runs it (not terminal, not being deleted).
#[derive(Debug, Clone)]
pub struct ActivePod {
    /// The latest pod object.
    pub pod: Arc<Pod>,
    /// Whether its containers were seen running (upstream only evicts pods
    /// that had anything running).
    pub running: bool,
    /// Where to send an eviction.
    pub evict: mpsc::Sender<EvictRequest>,
}

/// The active pods of the process, keyed by uid; kept by the workers.
#[derive(Debug, Default)]
pub struct ActivePods {
    pods: Mutex<HashMap<String, ActivePod>>,
}

impl ActivePods {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, ActivePod>> {
        self.pods.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set(&self, uid: &str, pod: ActivePod) {
        self.lock().insert(uid.to_string(), pod);
    }

    fn remove(&self, uid: &str) {
        self.lock().remove(uid);
    }

    /// The active pods bound to `node`.
    pub fn on_node(&self, node: &str) -> Vec<ActivePod> {
        self.lock()
            .values()
            .filter(|a| {
                a.pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_deref())
                    .is_some_and(|n| n == node)
            })
            .cloned()
            .collect()
    }

    /// Number of active pods.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// True when no pod is active.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}

/// The pod-resources API reports the active pods.
impl crate::podresources::PodsSource for ActivePods {
    fn active_pods(&self) -> Vec<Arc<Pod>> {
        self.lock().values().map(|a| a.pod.clone()).collect()
    }
}

/// Removes the pod from [`ActivePods`] and from the admitted pods when the
/// worker ends.
struct Deregister<'a>(&'a WorkerContext, String);

impl Drop for Deregister<'_> {
    fn drop(&mut self) {
        release(self.0, &self.1);
        self.0.states.forget(&self.1);
        self.0.allocated.remove_pod(&self.1);
        if let Some(w) = self.0.runtime.wakeups() {
            w.unregister(&self.1);
        }
    }
}

/// The pod `uid` can run no container any more: it leaves the active pods,
/// the admitted pods and its devices (upstream's kubelet admits and
/// allocates against pods that could still run containers).
fn release(ctx: &WorkerContext, uid: &str) {
    ctx.active.remove(uid);
    let retry = ctx.admission.release(uid);
    if let Some(d) = &ctx.devices {
        d.release(uid);
    }
    // Deferred resizes are tried again at once, not at their pods' next
    // periodic resync.
    if let Some(w) = ctx.runtime.wakeups() {
        for other in retry {
            if let Some(n) = w.get(&other) {
                n.notify_one();
            }
        }
    }
}

/// The latest pod object, or `None` once it is gone from the API.
pub type PodUpdates = watch::Receiver<Option<Arc<Pod>>>;

/// Runs one pod's worker until the pod is gone (or the sender is dropped).
pub async fn run(ctx: Arc<WorkerContext>, mut rx: PodUpdates) {
    let mut last: Option<PodStatus> = None;
    let mut current: Option<Arc<Pod>> = None;
    let mut error_backoff = Duration::from_millis(500);
    let mut admitted = false;
    // The pod as admitted: its containers' allocated resources (an
    // in-place resize changes the spec first, the allocation once the node
    // accepts it).
    let mut allocated: Option<Arc<Pod>> = None;
    let (evict_tx, mut evict_rx) = mpsc::channel::<EvictRequest>(1);
    let uid = rx
        .borrow()
        .as_ref()
        .and_then(|p| p.metadata.uid.clone())
        .unwrap_or_default();
    let _deregister = Deregister(&ctx, uid.clone());
    // The runtime's wake-ups of this pod (its probes' new verdicts).
    let wake = ctx.runtime.wakeups().map(|w| w.register(&uid));
    let woken = || async {
        match &wake {
            Some(n) => n.notified().await,
            None => std::future::pending().await,
        }
    };
    // Upstream's pod worker metrics: when the kubelet first saw the pod,
    // whether it has synced it (its status manager has a status), and what
    // starts each sync.
    let first_seen = std::time::Instant::now();
    let mut synced = false;
    let mut kind = SyncKind::Create;
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
            ctx.active.remove(&uid);
            terminate(&ctx, &pod, last.as_ref()).await;
            return;
        }
        let mut resync = None;
        if !admitted && !is_terminal(last.as_ref().and_then(|s| s.phase.as_deref())) {
            admitted = true;
            let running_already = last
                .as_ref()
                .is_some_and(|s| s.phase.as_deref() == Some("Running"));
            // After a restart (of this kubelet or upstream's), the
            // resources the pod was admitted or last resized with are the
            // checkpoint's, not the spec's (a resize may be pending).
            let as_allocated = match ctx.allocated.pod(&uid) {
                Some(info) => Arc::new(crate::allocation::with_info(&pod, &info)),
                None => pod.clone(),
            };
            let verdict = match running_already {
                true => {
                    ctx.admission.count(&as_allocated);
                    Ok(())
                }
                false => match ctx.runtime.admit(&as_allocated) {
                    Ok(()) => match allocate_devices(&ctx, &as_allocated).await {
                        Ok(()) => ctx.admission.admit(&as_allocated).await,
                        Err(r) => Err(r),
                    },
                    Err(r) => Err(r),
                },
            };
            match verdict {
                Ok(()) => {
                    ctx.metrics.startup.stage(&pod, "Admitted", None, "");
                    let info = crate::allocation::info_for_pod(&as_allocated);
                    if let Err(e) = ctx.allocated.set_pod(&uid, info) {
                        tracing::error!(pod = %pod_key(&pod), error = %e, "SetPodAllocation failed");
                    }
                    allocated = Some(as_allocated);
                }
                Err(r) => {
                    tracing::warn!(pod = %pod_key(&pod), reason = %r.reason, message = %r.message, "pod rejected");
                    let detail = format!("{}: {}", r.reason, r.message);
                    ctx.metrics.startup.stage(&pod, "Rejected", None, detail);
                    let status = rejected_status(&pod, &r);
                    push_status(&ctx, &pod, &status);
                    last = Some(status);
                }
            }
        }
        // An in-place resize: accepted when it fits, else pending; one
        // rkube cannot apply is infeasible (fail closed).
        let mut resize_pending: Option<(&str, String)> = None;
        if let Some(a) = allocated.as_ref().filter(|a| !same_resources(a, &pod)) {
            if let Some(why) = unsupported_resize(a, &pod) {
                resize_pending = Some(("Infeasible", why));
            } else {
                match ctx.admission.resize(&pod).await {
                    Ok(()) => match ctx
                        .allocated
                        .set_pod(&uid, crate::allocation::info_for_pod(&pod))
                    {
                        Ok(()) => {
                            tracing::info!(pod = %pod_key(&pod), "in-place resize accepted");
                            allocated = Some(pod.clone());
                        }
                        // Not accepted until it is checkpointed (tried
                        // again with the next sync), as upstream.
                        Err(e) => {
                            tracing::error!(pod = %pod_key(&pod), error = %e, "in-place resize not accepted");
                            ctx.admission.count(a);
                        }
                    },
                    Err(r) => {
                        tracing::info!(pod = %pod_key(&pod), message = %r.message, "in-place resize deferred");
                        resize_pending = Some(("Deferred", r.message));
                    }
                }
            }
        }
        let pod = match &allocated {
            Some(a) if !same_resources(a, &pod) => Arc::new(with_allocation(&pod, a)),
            _ => pod,
        };
        let mut deadline_wake = None;
        if !is_terminal(last.as_ref().and_then(|s| s.phase.as_deref())) {
            match deadline_left(&pod, last.as_ref(), Timestamp::now()) {
                Some(left) if left.is_zero() => deadline_exceeded(&ctx, &pod, &mut last).await,
                left => deadline_wake = left,
            }
        }
        let terminal = is_terminal(last.as_ref().and_then(|s| s.phase.as_deref()));
        let evicted = terminal
            && last
                .as_ref()
                .is_some_and(|s| s.reason.as_deref() == Some("Evicted"));
        ctx.states.set(&uid, terminal, evicted);
        if terminal {
            release(&ctx, &uid);
        } else {
            let started = std::time::Instant::now();
            match ctx.runtime.sync_pod(&pod).await {
                Ok(obs) => {
                    error_backoff = Duration::from_millis(500);
                    for c in &obs.init_containers {
                        if let crate::runtime::ContainerState::Terminated {
                            exit_code: 0,
                            started_at,
                            finished_at,
                            ..
                        } = &c.state
                        {
                            ctx.metrics.startup.init_container_done(
                                &pod,
                                &c.name,
                                *started_at,
                                *finished_at,
                            );
                        }
                    }
                    let running =
                        obs.containers.iter().chain(&obs.init_containers).any(|c| {
                            matches!(c.state, crate::runtime::ContainerState::Running { .. })
                        });
                    ctx.active.set(
                        &uid,
                        ActivePod {
                            pod: pod.clone(),
                            running,
                            evict: evict_tx.clone(),
                        },
                    );
                    let host_ip = node_ip(&ctx, &pod);
                    let now = Timestamp::now();
                    let mut status = pod_status(&pod, last.as_ref(), &obs, &host_ip, now);
                    // Device plugins' devices, then DRA's (upstream's
                    // order): each keeps the other's entries.
                    if let Some(d) = &ctx.devices {
                        d.set_allocated_resources_status(&uid, &mut status);
                    }
                    if let Some(d) = &ctx.dra {
                        d.set_allocated_resources_status(&pod, &mut status);
                    }
                    add_resize_conditions(
                        &mut status,
                        &pod,
                        last.as_ref(),
                        resize_pending.as_ref().map(|(r, m)| (*r, m.as_str())),
                        obs.resize_error.as_deref(),
                        now,
                    );
                    // Also when the API shows something else than what was
                    // written last: kube-controller-manager sets Ready=False on
                    // the pods of a node it marks Unknown (MarkPodsNotReady).
                    // Upstream observes the time since the pod was first
                    // seen at its first sync, and when it turns Running.
                    let was_pending = last
                        .as_ref()
                        .is_some_and(|s| s.phase.as_deref() == Some("Pending"));
                    if !synced || (was_pending && status.phase.as_deref() == Some("Running")) {
                        ctx.metrics.pod_start_duration.observe(first_seen.elapsed());
                    }
                    synced = true;
                    if last.as_ref() != Some(&status) || !api_agrees(&pod, &status) {
                        tracing::debug!(pod = %pod_key(&pod), phase = ?status.phase, "pod status changed");
                        push_status(&ctx, &pod, &status);
                        last = Some(status);
                    }
                    resync = Some(
                        obs.resync_after
                            .unwrap_or_else(|| resync_of(&uid, ctx.sync_frequency)),
                    );
                }
                Err(e) => {
                    tracing::warn!(pod = %pod_key(&pod), error = %e, "syncing pod failed; retrying");
                    resync = Some(error_backoff);
                    error_backoff = (error_backoff * 2).min(Duration::from_secs(30));
                }
            }
            ctx.metrics
                .pod_worker_duration(kind)
                .observe(started.elapsed());
        }
        if let Some(d) = deadline_wake {
            resync = Some(resync.map_or(d, |r: Duration| r.min(d)));
        }
        let sleep = async {
            match resync {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        kind = SyncKind::Sync;
        tokio::select! {
            r = rx.changed() => {
                if r.is_err() {
                    return;
                }
                // A change of the pod itself, not only of its status (the
                // kubelet's own writes come back too): upstream's update.
                let next = rx.borrow();
                if next.as_ref().is_some_and(|n| pod_changed(&pod, n)) {
                    kind = SyncKind::Update;
                }
            }
            _ = sleep => {}
            _ = woken() => {}
            Some(req) = evict_rx.recv() => {
                let ok = !terminal && evict(&ctx, &pod, &mut last, &req).await;
                if ok {
                    ctx.active.remove(&uid);
                }
                let _ = req.done.send(ok);
            }
        }
    }
}

/// Whether the pod changed other than in its status (upstream's config
/// source sends such changes as updates; status-only ones reconcile).
fn pod_changed(old: &Pod, new: &Pod) -> bool {
    old.spec != new.spec
        || old.metadata.labels != new.metadata.labels
        || old.metadata.annotations != new.metadata.annotations
        || old.metadata.deletion_timestamp != new.metadata.deletion_timestamp
}

/// Devices for `pod`'s containers from the device plugins, before the
/// predicates (upstream's resource allocation admit handler).
async fn allocate_devices(ctx: &WorkerContext, pod: &Pod) -> Result<(), Rejection> {
    let Some(d) = ctx.devices.as_ref().filter(|d| d.wants_devices(pod)) else {
        return Ok(());
    };
    d.allocate_pod(pod).await.map_err(|e| Rejection {
        reason: "UnexpectedAdmissionError".into(),
        message: format!("Allocate failed due to {e}, which is unexpected"),
    })
}

/// The containers' resources of `a` and `b` are the same.
fn same_resources(a: &Pod, b: &Pod) -> bool {
    let of = |p: &Pod| {
        let spec = p.spec.as_ref();
        spec.into_iter()
            .flat_map(|s| s.init_containers.iter().flatten().chain(&s.containers))
            .map(|c| (c.name.clone(), c.resources.clone()))
            .collect::<Vec<_>>()
    };
    of(a) == of(b)
}

/// Why rkube cannot apply the resize from `allocated` to `desired`: it
/// resizes regular containers only, not init containers (sidecars
/// included) nor pod-level `resources`.
fn unsupported_resize(allocated: &Pod, desired: &Pod) -> Option<String> {
    let inits = |p: &Pod| {
        let spec = p.spec.as_ref();
        let list = spec
            .and_then(|s| s.init_containers.clone())
            .unwrap_or_default();
        let pod_level = spec.and_then(|s| s.resources.clone());
        (
            list.into_iter()
                .map(|c| (c.name, c.resources))
                .collect::<Vec<_>>(),
            pod_level,
        )
    };
    let (a, a_pod) = inits(allocated);
    let (d, d_pod) = inits(desired);
    if a != d {
        return Some("in-place resize of init containers is not supported by rkube".into());
    }
    (a_pod != d_pod)
        .then(|| "in-place resize of pod-level resources is not supported by rkube".into())
}

/// `pod` with the containers' resources of `allocated` (what the runtime
/// is to apply while a resize waits).
fn with_allocation(pod: &Pod, allocated: &Pod) -> Pod {
    let mut out = pod.clone();
    let from = allocated.spec.as_ref();
    let find = |name: &str| {
        from.into_iter()
            .flat_map(|s| s.init_containers.iter().flatten().chain(&s.containers))
            .find(|c| c.name == name)
            .map(|c| c.resources.clone())
    };
    if let Some(spec) = out.spec.as_mut() {
        for c in spec
            .init_containers
            .iter_mut()
            .flatten()
            .chain(spec.containers.iter_mut())
        {
            if let Some(r) = find(&c.name) {
                c.resources = r;
            }
        }
    }
    out
}

/// Kills the pod for the eviction or shutdown manager and queues its final
/// status: [`evicted_status`], as upstream's `evictPod` and node shutdown
/// manager.
async fn evict(
    ctx: &WorkerContext,
    pod: &Pod,
    last: &mut Option<PodStatus>,
    req: &EvictRequest,
) -> bool {
    tracing::info!(pod = %pod_key(pod), message = %req.message, "evicting pod");
    let obs = match kill_within(ctx, pod, req.grace).await {
        Ok(obs) => obs,
        Err(e) => {
            tracing::warn!(pod = %pod_key(pod), error = %e, "evicting pod: kill failed");
            return false;
        }
    };
    let status = evicted_status(
        pod,
        last.as_ref(),
        &obs,
        &node_ip(ctx, pod),
        req.reason,
        &req.message,
        Timestamp::now(),
    );
    push_status(ctx, pod, &status);
    if req.reason != Disruption::NodeShutdown {
        ctx.metrics.pods_evicted.fetch_add(1, Ordering::Relaxed);
    }
    *last = Some(status);
    true
}

/// How long `pod` may still run under `activeDeadlineSeconds` (counted
/// from its start time), `None` without a deadline or before it started.
pub fn deadline_left(pod: &Pod, last: Option<&PodStatus>, now: Timestamp) -> Option<Duration> {
    let secs = pod.spec.as_ref()?.active_deadline_seconds?;
    let start = last
        .and_then(|s| s.start_time.as_ref())
        .or_else(|| pod.status.as_ref()?.start_time.as_ref())?
        .0;
    let ran = now.duration_since(start).as_secs().max(0);
    Some(Duration::from_secs((secs - ran).max(0) as u64))
}

/// Kills a pod past its `activeDeadlineSeconds` and queues its final
/// status: `Failed`, reason `DeadlineExceeded`, upstream's message.
async fn deadline_exceeded(ctx: &WorkerContext, pod: &Pod, last: &mut Option<PodStatus>) {
    const MESSAGE: &str = "Pod was active on the node longer than the specified deadline";
    tracing::info!(pod = %pod_key(pod), "active deadline exceeded; killing the pod");
    let obs = match kill_within(ctx, pod, grace_period(pod)).await {
        Ok(obs) => obs,
        Err(e) => {
            tracing::warn!(pod = %pod_key(pod), error = %e, "killing a pod past its deadline failed; retrying");
            return;
        }
    };
    let mut status = pod_status(
        pod,
        last.as_ref(),
        &obs,
        &node_ip(ctx, pod),
        Timestamp::now(),
    );
    status.phase = Some("Failed".into());
    status.reason = Some("DeadlineExceeded".into());
    status.message = Some(MESSAGE.into());
    push_status(ctx, pod, &status);
    *last = Some(status);
}

/// How long past its grace a kill may take before it is given up.
const KILL_SLACK: Duration = Duration::from_secs(10);

/// Why a kill did not finish.
#[derive(Debug, thiserror::Error)]
enum KillError {
    /// The runtime failed (worth retrying).
    #[error("{0}")]
    Runtime(#[from] crate::runtime::RuntimeError),
    /// The runtime did not answer within the grace and the slack.
    #[error("no answer within {0:?}")]
    TimedOut(Duration),
}

/// Kills `pod` with `grace`, giving up [`KILL_SLACK`] past it.
async fn kill_within(
    ctx: &WorkerContext,
    pod: &Pod,
    grace: Duration,
) -> Result<crate::runtime::PodObservation, KillError> {
    let limit = grace + KILL_SLACK;
    match tokio::time::timeout(limit, ctx.runtime.kill_pod(pod, grace)).await {
        Ok(r) => Ok(r?),
        Err(_) => Err(KillError::TimedOut(limit)),
    }
}

/// Queues `status` as `pod`'s status PATCH.
fn push_status(ctx: &WorkerContext, pod: &Pod, status: &PodStatus) {
    ctx.writer.push(status_update(pod, status));
}

/// `status` as `pod`'s status PATCH.
fn status_update(pod: &Pod, status: &PodStatus) -> StatusUpdate {
    StatusUpdate {
        namespace: pod.namespace().unwrap_or_default(),
        name: pod.name_any(),
        uid: pod.uid().unwrap_or_default(),
        patch: status_patch(&pod.uid().unwrap_or_default(), status),
    }
}

/// True when the pod's status in the API shows `status`'s phase and the
/// status of each of its conditions.
pub fn api_agrees(pod: &Pod, status: &PodStatus) -> bool {
    let Some(api) = pod.status.as_ref() else {
        return false;
    };
    if api.phase != status.phase {
        return false;
    }
    let api_conds = api.conditions.as_deref().unwrap_or_default();
    status.conditions.iter().flatten().all(|c| {
        api_conds
            .iter()
            .any(|a| a.type_ == c.type_ && a.status == c.status)
    })
}

fn node_ip(ctx: &WorkerContext, pod: &Pod) -> String {
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("");
    ctx.host_ips.get(node).cloned().unwrap_or_default()
}

async fn terminate(ctx: &WorkerContext, pod: &Pod, last: Option<&PodStatus>) {
    let uid = pod.uid().unwrap_or_default();
    let ns = pod.namespace().unwrap_or_default();
    let name = pod.name_any();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    ctx.writer.forget(&uid);
    let grace = grace_period(pod);
    tracing::info!(pod = %pod_key(pod), ?grace, "killing pod");
    let mut backoff = Duration::from_millis(200);
    let obs = loop {
        match kill_within(ctx, pod, grace).await {
            Ok(obs) => break Some(obs),
            Err(KillError::Runtime(e)) => {
                tracing::warn!(pod = %pod_key(pod), error = %e, "killing pod failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
            Err(e @ KillError::TimedOut(_)) => {
                tracing::warn!(pod = %pod_key(pod), error = %e, "killing pod timed out");
                break None;
            }
        }
    };
    // The final status (containers terminated), written before the delete;
    // a terminal phase (Succeeded, Failed/Evicted) is never rewritten.
    let terminal = is_terminal(last.and_then(|s| s.phase.as_deref()));
    let killed = obs.is_some();
    if let Some(obs) = obs.filter(|_| !terminal) {
        let status = final_pod_status(pod, last, &obs, &node_ip(ctx, pod), Timestamp::now());
        let update = status_update(pod, &status);
        if !ctx
            .writer
            .write_final(ctx.client.clone(), &ctx.metrics, update)
            .await
        {
            tracing::debug!(pod = %pod_key(pod), "final status not written");
        }
    }
    // Its cgroup and mounts go before the deletion is confirmed; its
    // stopped containers and sandbox after (upstream confirms once the
    // pod's resources are reclaimed and leaves the rest to its garbage
    // collector), so that removing them does not hold up the deletion.
    let reclaimed = match ctx.runtime.reclaim_pod(&uid).await {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(pod = %pod_key(pod), error = %e, "reclaiming the pod's resources failed");
            false
        }
    };
    // A kill that did not finish (or a reclaim that failed): the pod is
    // taken out of the runtime first, its containers with it, so that the
    // API never shows a pod gone whose containers may still run or whose
    // resources the node still counts.
    let removed = !(killed && reclaimed) && remove_logged(ctx, pod, &uid).await;
    // No container of it can run any more: it leaves the active pods now,
    // before the API confirms the deletion (upstream's kubelet admits
    // against pods that could still have running containers; the scheduler
    // already dropped this one when its terminal status came).
    release(ctx, &uid);
    confirm_deletion(ctx, pod, &api, &name, &uid).await;
    if !removed {
        remove_logged(ctx, pod, &uid).await;
    }
}

/// Removes the pod `uid` from the runtime; false (logged) when it fails.
async fn remove_logged(ctx: &WorkerContext, pod: &Pod, uid: &str) -> bool {
    match ctx.runtime.remove_pod(uid).await {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(pod = %pod_key(pod), error = %e, "removing pod from the runtime failed");
            false
        }
    }
}

/// The API delete with grace 0 that ends the pod's deletion, retried.
async fn confirm_deletion(ctx: &WorkerContext, pod: &Pod, api: &Api<Pod>, name: &str, uid: &str) {
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some(uid.to_string()),
            resource_version: None,
        }),
        ..Default::default()
    };
    let mut backoff = Duration::from_millis(200);
    for _ in 0..20 {
        match api.delete(name, &params).await {
            Ok(_) => {
                ctx.metrics.pods_deleted.fetch_add(1, Ordering::Relaxed);
                tracing::info!(pod = %pod_key(pod), "pod deletion confirmed");
                return;
            }
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => return,
            Err(e) => {
                tracing::warn!(pod = %pod_key(pod), error = %e, "confirming pod deletion failed; retrying");
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
    fn pod_states_answer_the_garbage_collector() {
        let st = PodStates::default();
        assert!(
            !st.content_removable("u") && !st.runtime_removable("u"),
            "unknown pods stay"
        );
        st.set("u", true, false);
        assert!(st.runtime_removable("u") && !st.content_removable("u"));
        st.set("u", true, true);
        assert!(st.content_removable("u"));
        st.forget("u");
        assert!(!st.runtime_removable("u"));
    }

    #[test]
    fn a_pending_resize_runs_with_the_allocated_resources() {
        let pod = |cpu: &str, image: &str| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p", "uid": "u", "generation": 2},
                "spec": {
                    "initContainers": [{"name": "side", "image": "i", "restartPolicy": "Always",
                        "resources": {"requests": {"cpu": cpu}}}],
                    "containers": [{"name": "c", "image": image, "resources": {"requests": {"cpu": cpu}}}],
                },
            }))
            .unwrap()
        };
        let allocated = pod("100m", "old");
        let desired = pod("300m", "new");
        assert!(same_resources(&allocated, &pod("100m", "new")));
        assert!(!same_resources(&allocated, &desired));
        let run = with_allocation(&desired, &allocated);
        // The allocated resources, everything else as desired.
        assert!(same_resources(&run, &allocated));
        let spec = run.spec.unwrap();
        assert_eq!(spec.containers[0].image.as_deref(), Some("new"));
        assert_eq!(run.metadata.generation, Some(2));
        // The sidecar's resources changed with the container's: infeasible.
        assert_eq!(
            unsupported_resize(&allocated, &desired).as_deref(),
            Some("in-place resize of init containers is not supported by rkube")
        );
        let mut only_c = allocated.clone();
        only_c.spec.as_mut().unwrap().containers = desired.spec.clone().unwrap().containers;
        assert_eq!(unsupported_resize(&allocated, &only_c), None);
    }

    #[test]
    fn the_active_deadline_counts_from_the_start_time() {
        let pod = |deadline: Option<i64>| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p"},
                "spec": {"containers": [], "activeDeadlineSeconds": deadline},
                "status": {"startTime": "2026-12-03T10:00:00Z"}}))
            .unwrap()
        };
        let at = |s: &str| s.parse::<Timestamp>().unwrap();
        assert_eq!(
            deadline_left(&pod(None), None, at("2026-12-03T11:00:00Z")),
            None
        );
        assert_eq!(
            deadline_left(&pod(Some(30)), None, at("2026-12-03T10:00:10Z")),
            Some(Duration::from_secs(20))
        );
        assert_eq!(
            deadline_left(&pod(Some(30)), None, at("2026-12-03T10:05:00Z")),
            Some(Duration::ZERO)
        );
        // Not started: no clock yet.
        let mut p = pod(Some(5));
        p.status = None;
        assert_eq!(deadline_left(&p, None, at("2026-12-03T10:05:00Z")), None);
    }

    #[test]
    fn api_agreement() {
        let status: PodStatus = serde_json::from_value(serde_json::json!({
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}]}))
        .unwrap();
        let with = |api: serde_json::Value| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p"}, "spec": {"containers": []}, "status": api}))
            .unwrap()
        };
        assert!(api_agrees(
            &with(
                serde_json::json!({"phase": "Running", "qosClass": "BestEffort",
                "conditions": [{"type": "Ready", "status": "True"},
                               {"type": "Other", "status": "False"}]})
            ),
            &status
        ));
        // kube-controller-manager's MarkPodsNotReady.
        assert!(!api_agrees(
            &with(serde_json::json!({"phase": "Running",
                "conditions": [{"type": "Ready", "status": "False"}]})),
            &status
        ));
        assert!(!api_agrees(
            &with(serde_json::json!({"phase": "Pending"})),
            &status
        ));
    }

    #[test]
    fn resyncs_spread_over_half_a_period() {
        let every = Duration::from_secs(60);
        let all: Vec<Duration> = (0..200)
            .map(|i| resync_of(&format!("uid-{i}"), every))
            .collect();
        assert!(all.iter().all(|d| (every..every * 3 / 2).contains(d)));
        assert_eq!(resync_of("a", every), resync_of("a", every));
        let short = resync_of("a", every / 6).as_secs_f64();
        assert!((short - resync_of("a", every).as_secs_f64() / 6.0).abs() < 1e-6);
        let early = all.iter().filter(|d| **d < every * 5 / 4).count();
        assert!((60..140).contains(&early), "{early}");
    }

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
