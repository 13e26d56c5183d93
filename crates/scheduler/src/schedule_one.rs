//! One scheduling attempt as the live scheduler drives it (upstream's
//! `schedule_one.go`). The framework does the scheduling work; this module
//! supplies the cache, the API and the threads, and writes what users see.
//!
//! ```text
//! schedule_loop ── next_pod (queue) ── scheduling_cycle
//!     Scheduler::schedule_with        (PreFilter … Score, PostFilter)   framework
//!     assume_reserve_permit           State::assume, binding::reserve/permit (State is the AssumeCache)
//!     └─ task: Writer::prepaid (the rate-limit token), then
//!        spawn_blocking binding_cycle binding::pre_bind_pre_flight → Writer::nominate
//!                                     binding::binding_cycle (ApiHost is the ClusterApi:
//!                                       WaitOnPermit, PreBind → Writer::bind_pv/select_node,
//!                                       Bind → Writer::bind, PostBind)
//!        on failure                   binding::unreserve, State::forget, queue move
//!     handle_failure                  Nominator::record_failure, the preemption gate
//!                                     (State::preemption_started), requeue,
//!                                     FailedScheduling event (queued, crate::events),
//!                                     PodScheduled
//!     └─ task: preempt                nominations cleared, victims deleted,
//!                                     State::preemption_finished
//!     or, for a member of a PodGroup  pod_group::pod_group_cycle: the group's queued
//!     (GenericWorkload)               members taken along, the framework's pod-group
//!                                     algorithm, then assume_reserve_permit and a
//!                                     binding cycle per member that fits, or
//!                                     handle_failure per member
//! ```

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1 as core;
use kube::ResourceExt;
use rkube_framework::{
    binding, Binder, ClaimApi, Code, CycleState, Failure, Framework, HostClock, Listers, Outcome,
    Point, Scheduler, VolumeApi,
};
use rkube_model::decision::DecisionMark;
use rkube_model::volumes::{Pv, Pvc, Volumes};
use rkube_model::{Node, Pod, RawObject};

use crate::api::{api_message, truncate_message, Preemptor, Writer};
use crate::queue::QueuedPod;
use crate::state::PodEntry;
use crate::{log_explanation, Decision, Shared};

mod pod_group;

/// Waits for the next pod to schedule.
async fn next_pod(shared: &Shared) -> QueuedPod {
    loop {
        let wait = {
            if shared.is_synced() {
                let mut state = shared.lock();
                let now = Instant::now();
                if let Some(qp) = state.queue.pop(now) {
                    return qp;
                }
                state
                    .queue
                    .next_wakeup()
                    .map(|t| t.saturating_duration_since(now))
                    .unwrap_or(Duration::from_secs(1))
                    .min(Duration::from_secs(1))
            } else {
                Duration::from_millis(100)
            }
        };
        tokio::select! {
            _ = shared.wake.notified() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// The scheduling loop: one scheduling cycle at a time; binding cycles
/// run on threads of their own.
pub(crate) async fn schedule_loop(shared: Arc<Shared>, writer: Writer, mut scheduler: Scheduler) {
    // Test hook, debug builds only: panic after this many pods, so tests can
    // show that a dead loop ends the process.
    #[cfg(debug_assertions)]
    let mut panic_after = std::env::var("RKUBE_TEST_PANIC_SCHEDULE_LOOP_AFTER")
        .ok()
        .and_then(|v| v.parse::<u64>().ok());
    shared.lock().start_term(std::time::SystemTime::now());
    loop {
        let qp = next_pod(&shared).await;
        #[cfg(debug_assertions)]
        if let Some(n) = panic_after.as_mut() {
            if *n == 0 {
                panic!(
                    "RKUBE_TEST_PANIC_SCHEDULE_LOOP_AFTER: injected panic in the scheduling loop"
                );
            }
            *n -= 1;
        }
        scheduling_cycle(&shared, &writer, &mut scheduler, qp);
    }
}

/// What an attempt started with, for metrics and the failure handler.
struct Attempt {
    entry: PodEntry,
    /// Written with the binding under `--record-decisions`.
    mark: Option<DecisionMark>,
    profile: String,
    started: Instant,
    attempts: u32,
}

/// The scheduling cycle of one pod (upstream's `schedulingCycle`).
fn scheduling_cycle(
    shared: &Arc<Shared>,
    writer: &Writer,
    scheduler: &mut Scheduler,
    qp: QueuedPod,
) {
    let uid = qp.pod.uid.clone();
    // The latest version of the pod; the cycle runs on the cache's
    // snapshot (kept up to date incrementally, shared copy-on-write) and
    // the nominations, without holding the lock.
    let taken = shared
        .lock()
        .take_for_cycle(&shared.profiles, &uid, shared.record_decisions);
    // A pod popped but not scheduled still takes a cycle number, as in
    // upstream's queue (OpportunisticBatching sees the gap).
    let Some((entry, snapshot, nominator, mark)) = taken else {
        scheduler.cycle += 1;
        return;
    };
    let pod = entry.model.clone();
    let Some(fw) = shared.profiles.for_pod(&pod) else {
        scheduler.cycle += 1;
        shared.lock().queue.done(&uid);
        return;
    };
    let attempt = Attempt {
        entry,
        mark,
        profile: fw.profile_name.clone(),
        started: Instant::now(),
        attempts: qp.attempts,
    };
    if shared.profiles.generic_workload && pod.pod_group.is_some() {
        // A member of a pod group: the group's cycle, with the other
        // members waiting in the queue.
        pod_group::pod_group_cycle(
            shared,
            writer,
            scheduler,
            fw,
            attempt,
            snapshot,
            nominator,
            qp.timestamp,
        );
        return;
    }
    let outcome =
        tokio::task::block_in_place(|| scheduler.schedule_with(fw, &snapshot, &pod, &nominator));
    if shared.explain_scores {
        log_explanation(fw, &snapshot, &pod, &outcome);
    }
    shared
        .metrics
        .algorithm(attempt.started.elapsed().as_secs_f64());
    match outcome {
        Outcome::Scheduled {
            node,
            state,
            evaluated,
            feasible,
        } => {
            let node = snapshot.nodes[node].name().to_string();
            drop(snapshot);
            if let Some(f) = &shared.hooks.on_decision {
                f(&Decision {
                    pod: pod.key(),
                    node: node.clone(),
                });
            }
            tracing::debug!(pod = %pod.key(), %node, evaluated, feasible, took = ?attempt.started.elapsed(), "assuming pod on node");
            match assume_reserve_permit(shared, fw, &pod, &node, state, None) {
                Ok((state, assumed)) => {
                    spawn_binding_cycle(shared, writer, attempt, assumed, node, state)
                }
                Err(failure) => handle_failure(shared, writer, &attempt, *failure),
            }
        }
        failed => {
            let Some(failure) = Failure::from_outcome(failed) else {
                return;
            };
            if failure.unschedulable {
                tracing::debug!(pod = %pod.key(), message = %failure.message, "unable to schedule pod; waiting");
                let preemption = fw
                    .plugins(Point::PostFilter)
                    .iter()
                    .any(|p| p.name() == "DefaultPreemption");
                if preemption {
                    shared.metrics.preemption(failure.victims.len());
                }
            } else {
                tracing::warn!(pod = %pod.key(), message = %failure.message, "error scheduling pod; retrying");
            }
            deallocate_claims(writer, failure.deallocated_claims.clone(), &pod.uid);
            delete_claims(writer, failure.deleted_claims.clone());
            handle_failure(shared, writer, &attempt, failure);
        }
    }
}

/// Starts the binding cycle of an assumed pod on a thread of its own.
fn spawn_binding_cycle(
    shared: &Arc<Shared>,
    writer: &Writer,
    attempt: Attempt,
    assumed: Arc<Pod>,
    node: String,
    state: CycleState,
) {
    shared.in_flight.fetch_add(1, Ordering::SeqCst);
    let (shared, writer) = (shared.clone(), writer.clone());
    // The binding's first rate-limit token is taken here, before a thread
    // is: threads are held only by bindings that can write.
    tokio::spawn(async move {
        let writer = writer.prepaid().await;
        tokio::task::spawn_blocking(move || {
            binding_cycle(shared, writer, attempt, assumed, node, state)
        });
    });
}

/// The end of the scheduling cycle: the pod is assumed on `node`, then
/// Reserve and Permit run (upstream's `prepareForBindingCycle`). On a
/// failure everything is undone and the failure returned. A member of a
/// pod group (`group`) gives GangScheduling's Permit its group's state
/// with the pod assumed.
fn assume_reserve_permit(
    shared: &Shared,
    fw: &Framework,
    pod: &Pod,
    node: &str,
    mut state: CycleState,
    group: Option<&Arc<rkube_model::pod_groups::PodGroup>>,
) -> Result<(CycleState, Arc<Pod>), Box<Failure>> {
    let assumed = binding::assumed_pod(pod, node);
    let uid = pod.uid.clone();
    let mut st = shared.lock();
    st.assume(uid.clone(), assumed.clone());
    st.nominator.delete(&uid);
    let waiting = st.waiting.clone();
    if let (Some(group), Some(gs)) = (group, st.pod_group_states().and_then(|g| g.of(pod))) {
        state.write(
            rkube_framework::GangPermit::KEY,
            rkube_framework::GangPermit {
                group: group.clone(),
                scheduled: gs.scheduled_pods(),
                assumed: gs.assumed(),
                waiting: waiting.clone(),
            },
        );
    }
    let s = match binding::reserve_and_permit(fw, &mut state, &assumed, node, &mut *st, &waiting) {
        Ok(_) => return Ok((state, assumed)),
        Err(s) => s,
    };
    st.forget(&uid);
    let s = if s.is_rejected() {
        binding::rejection_as_fit_error(node, s)
    } else {
        s
    };
    Err(Box::new(Failure::from_status(&s, true)))
}

/// The binding cycle (upstream's `bindingCycle`), on a blocking thread:
/// the pre-flight (and the nominated node it writes), then the framework's
/// WaitOnPermit, PreBind, Bind and PostBind against the API server.
fn binding_cycle(
    shared: Arc<Shared>,
    writer: Writer,
    attempt: Attempt,
    assumed: Arc<Pod>,
    node: String,
    mut state: CycleState,
) {
    let _in_flight = InFlight(shared.clone());
    #[cfg(debug_assertions)]
    if binding_panic_due() {
        panic!("RKUBE_TEST_PANIC_BINDING_AFTER: injected panic in a binding cycle");
    }
    let handle = tokio::runtime::Handle::current();
    let uid = assumed.uid.clone();
    let key = assumed.key();
    let Some(fw) = shared.profiles.for_pod(&assumed) else {
        // Its profile was found in the scheduling cycle; should it ever
        // be gone, the pod must not stay assumed and in flight.
        let mut st = shared.lock();
        st.forget(&uid);
        st.queue.done(&uid);
        return;
    };
    let raw = attempt.entry.raw.clone();
    let waiting = shared.lock().waiting.clone();
    let pre = binding::pre_bind_pre_flight(fw, &mut state, &assumed, &node);
    let status = if pre.code == Code::Error {
        pre
    } else {
        if pre.is_success() || waiting.get(&uid).is_some() {
            if let Err(e) = handle.block_on(writer.nominate(&raw, &node)) {
                tracing::warn!(pod = %key, error = %e, "could not write the nominated node in the binding cycle");
            }
        }
        let mut host = ApiHost {
            shared: &shared,
            writer: &writer,
            handle: &handle,
            raw: &raw,
            mark: attempt.mark.as_ref(),
            started: Instant::now(),
        };
        binding::binding_cycle(fw, &mut state, &assumed, &node, &waiting, &mut host)
    };
    if status.is_success() {
        // Upstream logs this at V(2).
        tracing::debug!(pod = %key, %node, "successfully bound pod to node");
        {
            let mut st = shared.lock();
            st.queue.done(&uid);
            st.drop_assumed_volumes(&uid);
        }
        shared.metrics.attempt(
            &attempt.profile,
            "scheduled",
            attempt.started.elapsed().as_secs_f64(),
        );
        shared.metrics.scheduled_after(attempt.attempts.max(1));
        writer.event(
            &attempt.profile,
            &raw,
            None,
            "Normal",
            "Scheduled",
            "Binding",
            &format!("Successfully assigned {key} to {node}"),
        );
        return;
    }
    tracing::warn!(pod = %key, %node, message = %status.message(), "binding cycle failed");
    // upstream's handleBindingCycleError: Unreserve, forget the assumed
    // pod, and move the pods its resources may help.
    {
        let mut st = shared.lock();
        binding::unreserve(fw, &mut state, &assumed, &node, &mut *st);
        st.forget(&uid);
        st.assumed_pod_forgotten(&assumed, status.is_rejected(), Instant::now());
    }
    shared.wake.notify_one();
    let _guard = handle.enter();
    handle_failure(
        &shared,
        &writer,
        &attempt,
        Failure::from_status(&status, false),
    );
}

/// Upstream's `handleSchedulingFailure` for any failed attempt: the
/// nominations (preemption's and the pod's own), the queue (the
/// unschedulable pool after a rejection, backoff after an error), then in
/// the background the preemption ([`preempt`]), the FailedScheduling
/// event and the PodScheduled condition.
fn handle_failure(shared: &Arc<Shared>, writer: &Writer, attempt: &Attempt, f: Failure) {
    let result = if f.reason == "Unschedulable" {
        "unschedulable"
    } else {
        "error"
    };
    shared.metrics.attempt(
        &attempt.profile,
        result,
        attempt.started.elapsed().as_secs_f64(),
    );
    let uid = attempt.entry.model.uid.clone();
    let target = f.preemption_target().unwrap_or_default().to_string();
    let preempting = f.preemption_target().is_some();
    let (victims, cleared) = {
        let mut st = shared.lock();
        let Some(latest) = st.pending_pod(&shared.profiles, &uid) else {
            // Deleted, or bound meanwhile: not requeued (upstream only logs).
            st.queue.done(&uid);
            return;
        };
        // Victims already being deleted need no call (upstream skips them).
        let victims: Vec<Arc<core::Pod>> = if preempting {
            f.victims
                .iter()
                .filter_map(|v| st.pods.get(&v.uid).map(|e| e.raw.clone()))
                .filter(|v| v.metadata.deletion_timestamp.is_none())
                .collect()
        } else {
            Vec::new()
        };
        // Upstream's asynchronous preemption clears the lower-priority
        // nominations on the node only when it has victims to delete.
        let cleared: Vec<Arc<core::Pod>> = st
            .nominator
            .record_failure(&latest, f.nominated_node.as_deref(), !victims.is_empty())
            .iter()
            .filter_map(|p| st.pods.get(&p.uid).map(|e| e.raw.clone()))
            .collect();
        if !victims.is_empty() {
            // Before the pod is back in the queue: DefaultPreemption's
            // PreEnqueue holds it until its victims' deletions are sent.
            st.preemption_started(&uid);
        }
        let now = Instant::now();
        if f.unschedulable {
            st.requeue_unschedulable(latest, f.rejectors.clone(), now);
        } else {
            st.queue.requeue_backoff(latest, now);
        }
        (victims, cleared)
    };
    let raw = attempt.entry.raw.clone();
    let profile = attempt.profile.clone();
    if !victims.is_empty() {
        tokio::spawn(preempt(
            shared.clone(),
            writer.clone(),
            Preemption {
                preemptor: Preemptor::pod(&raw),
                waiters: vec![uid.clone()],
                profile: profile.clone(),
                node: target,
                victims,
                cleared,
            },
        ));
    }
    if !f.report {
        return;
    }
    let writer = writer.clone();
    tokio::spawn(async move {
        writer.event(
            &profile,
            &raw,
            None,
            "Warning",
            "FailedScheduling",
            "Scheduling",
            &truncate_message(&f.message),
        );
        if let Err(e) = writer
            .update_pod_status(&raw, f.reason, &f.message, f.nominated_node.as_deref())
            .await
        {
            tracing::warn!(pod = %raw.name_any(), error = %e, "updating pod status failed");
        }
    });
}

/// What one preemption does after its cycle.
pub(crate) struct Preemption {
    pub(crate) preemptor: Preemptor,
    /// The pods held back until the deletions are sent: the preemptor, or
    /// a PodGroup's members.
    pub(crate) waiters: Vec<String>,
    pub(crate) profile: String,
    pub(crate) node: String,
    /// Victims to delete (none already being deleted), in the candidate's
    /// order.
    pub(crate) victims: Vec<Arc<core::Pod>>,
    /// Lower-priority pods nominated to the node, to clear.
    pub(crate) cleared: Vec<Arc<core::Pod>>,
}

/// Upstream's asynchronous preemption (`prepareCandidateAsync`): clears
/// the lower-priority nominations on the node, deletes every victim but
/// the last in parallel, then — if those all went well — the last one,
/// registered first so that the queue lets the preemptor in as soon as
/// that victim is seen terminating. A victim waiting on Permit is rejected
/// in memory instead of deleted. The preemptor is activated at the end if
/// a call failed or the last victim emits no deletion event.
pub(crate) async fn preempt(shared: Arc<Shared>, writer: Writer, p: Preemption) {
    let started = Instant::now();
    let mut failed = false;
    for pod in &p.cleared {
        if let Err(e) = writer.clear_nomination(pod).await {
            tracing::warn!(pod = %pod.name_any(), error = %e, "clearing nomination failed");
            failed = true;
        }
    }
    let waiting = shared.lock().waiting.clone();
    let evict = |victim: Arc<core::Pod>| {
        let (writer, waiting, p) = (writer.clone(), waiting.clone(), &p);
        async move {
            let victim_uid = victim.metadata.uid.clone().unwrap_or_default();
            if waiting
                .get(&victim_uid)
                .is_some_and(|w| w.preempt("DefaultPreemption", "preempted"))
            {
                writer.preempted(&p.profile, &victim, &p.preemptor, &p.node, true);
                return Ok(true);
            }
            writer
                .preempt(&p.profile, &victim, &p.preemptor, &p.node)
                .await
                .map(|()| false)
                .map_err(|e| {
                    tracing::warn!(victim = %victim.name_any(), error = %e, "preemption failed");
                })
        }
    };
    let mut activate = false;
    if let Some((last, rest)) = p.victims.split_last() {
        let results = futures::future::join_all(rest.iter().cloned().map(&evict)).await;
        if results.iter().any(Result::is_err) {
            failed = true;
        } else {
            let last_uid = last.metadata.uid.clone().unwrap_or_default();
            {
                let mut st = shared.lock();
                for uid in &p.waiters {
                    st.preemption_last_victim(uid, &last_uid);
                }
            }
            match evict(last.clone()).await {
                Ok(in_memory) => activate = in_memory,
                Err(()) => failed = true,
            }
        }
    }
    {
        let mut st = shared.lock();
        let mut woke = false;
        for uid in &p.waiters {
            st.preemption_finished(uid);
            woke |= (failed || activate) && st.queue.force_activate(uid);
        }
        if woke {
            shared.wake.notify_one();
        }
    }
    let result = if failed { "error" } else { "success" };
    shared
        .metrics
        .preemption_executed(result, started.elapsed().as_secs_f64());
}

/// Writes PostFilter's deallocations (DynamicResources: idle claims
/// allocated for nodes the pod cannot use). The claims' updates requeue
/// the pod, as upstream's synchronous UpdateStatus does.
fn deallocate_claims(writer: &Writer, claims: Vec<(String, String)>, pod_uid: &str) {
    if claims.is_empty() {
        return;
    }
    let (writer, uid) = (writer.clone(), pod_uid.to_string());
    tokio::spawn(async move {
        for (ns, name) in &claims {
            if let Err(e) = writer.deallocate_claim(ns, name, &uid).await {
                tracing::warn!(claim = %format!("{ns}/{name}"), error = %e, "deallocating claim failed");
            }
        }
    });
}

/// Deletes what PostFilter asked to (DynamicResources: a pod's stale claim
/// for its extended resources); the deletion requeues the pod.
fn delete_claims(writer: &Writer, claims: Vec<(String, String)>) {
    if claims.is_empty() {
        return;
    }
    let writer = writer.clone();
    tokio::spawn(async move {
        for (ns, name) in &claims {
            if let Err(e) = writer.delete_claim(ns, name).await {
                tracing::warn!(claim = %format!("{ns}/{name}"), error = %e, "deleting claim failed");
            }
        }
    });
}

/// Test hook, debug builds only: the binding cycle after
/// `RKUBE_TEST_PANIC_BINDING_AFTER` of them panics.
#[cfg(debug_assertions)]
fn binding_panic_due() -> bool {
    static LEFT: std::sync::LazyLock<Option<std::sync::atomic::AtomicU64>> =
        std::sync::LazyLock::new(|| {
            std::env::var("RKUBE_TEST_PANIC_BINDING_AFTER")
                .ok()
                .and_then(|v| v.parse().ok())
                .map(std::sync::atomic::AtomicU64::new)
        });
    LEFT.as_ref().is_some_and(|left| {
        left.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_err()
    })
}

/// Counts a binding as finished when dropped. Dropped by a panic, it ends
/// the process (as a goroutine's panic ends kube-scheduler): the pod would
/// otherwise stay assumed and in flight, pinning the queue's event list.
struct InFlight(Arc<Shared>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
        self.0.bound_or_failed.notify_waiters();
        if std::thread::panicking() {
            self.0.binding_panicked.notify_one();
        }
    }
}

/// The API server as the binding cycle's plugins reach it: writes through
/// the rate-limited [`Writer`] (blocking this thread), reads from the
/// informers' cache.
struct ApiHost<'a> {
    shared: &'a Shared,
    writer: &'a Writer,
    handle: &'a tokio::runtime::Handle,
    raw: &'a Arc<core::Pod>,
    mark: Option<&'a DecisionMark>,
    started: Instant,
}

/// Converts the API server's answer to an update back into the model.
fn converted<K: serde::Serialize>(kind: &str, o: &K) -> Result<(Option<Pv>, Option<Pvc>), String> {
    let value = serde_json::to_value(o).map_err(|e| e.to_string())?;
    let raw = RawObject {
        file: "api".into(),
        kind: kind.into(),
        display_name: String::new(),
        value,
    };
    Volumes::convert_one(&raw).ok_or_else(|| format!("the API server's {kind} does not convert"))
}

impl Binder for ApiHost<'_> {
    fn bind(&mut self, _: &Pod, node: &str) -> Result<(), String> {
        self.handle
            .block_on(self.writer.bind(self.raw, node, self.mark))
            .map_err(|e| api_message(&e))
    }

    fn event(&mut self, reason: &str, action: &str, note: &str) {
        let scheduler = self
            .raw
            .spec
            .as_ref()
            .and_then(|s| s.scheduler_name.clone())
            .unwrap_or_else(|| "default-scheduler".into());
        self.writer
            .event(&scheduler, self.raw, None, "Normal", reason, action, note);
    }
}

impl VolumeApi for ApiHost<'_> {
    fn bind_pv(&mut self, pv: &Pv, pvc: &Pvc) -> Result<Pv, String> {
        let written = self
            .handle
            .block_on(self.writer.bind_pv(pv, pvc))
            .map_err(|e| api_message(&e))?;
        converted("PersistentVolume", &written)?
            .0
            .ok_or_else(|| format!("persistentvolumes {:?} not found", pv.name))
    }

    fn select_node(&mut self, pvc: &Pvc, node: &str) -> Result<Pvc, String> {
        let written = self
            .handle
            .block_on(self.writer.select_node(pvc, node))
            .map_err(|e| api_message(&e))?;
        converted("PersistentVolumeClaim", &written)?
            .1
            .ok_or_else(|| format!("persistentvolumeclaims {:?} not found", pvc.name))
    }

    fn pvc(&self, namespace: &str, name: &str) -> Option<Pvc> {
        self.shared.lock().informer_pvc(namespace, name)
    }

    fn pv(&self, name: &str) -> Option<Pv> {
        self.shared.lock().informer_pv(name)
    }
}

impl ClaimApi for ApiHost<'_> {
    /// Writes what PreBind decided: the allocation when the informer's
    /// claim had none (Reserve's), and the pod's `reservedFor` entry (the
    /// last one of `claim`).
    fn update_claim_status(
        &mut self,
        claim: &rkube_model::dra::ResourceClaim,
    ) -> Result<rkube_model::dra::ResourceClaim, String> {
        let (ns, name) = (&claim.namespace, &claim.name);
        let informer = self.shared.lock().informer_claim(ns, name);
        let ours = claim
            .allocation
            .as_ref()
            .filter(|_| informer.is_none_or(|c| c.allocation.is_none()));
        let consumer = claim
            .reserved_for
            .last()
            .ok_or_else(|| format!("claim {ns}/{name}: no consumer to reserve for"))?;
        let written = self
            .handle
            .block_on(self.writer.write_claim(ns, name, ours, consumer))?;
        rkube_model::dra::resource_claim(&written).map_err(|e| {
            format!(
                "the API server's claim {ns}/{name}: {}: {}",
                e.path, e.message
            )
        })
    }

    fn resource_claim(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<rkube_model::dra::ResourceClaim> {
        self.shared.lock().informer_claim(namespace, name)
    }

    /// Creates the claim; the cache holds the created claim with the
    /// in-memory claim's allocation until the informer's version has one.
    fn create_claim(
        &mut self,
        claim: &rkube_model::dra::ResourceClaim,
    ) -> Result<rkube_model::dra::ResourceClaim, String> {
        let written = self.handle.block_on(self.writer.create_claim(claim))?;
        let created = rkube_model::dra::resource_claim(&written).map_err(|e| {
            format!(
                "the API server's claim {}/{}: {}: {}",
                claim.namespace, claim.name, e.path, e.message
            )
        })?;
        self.shared.lock().swap_assumed_claim(claim, &created);
        Ok(created)
    }

    fn delete_claim(&mut self, namespace: &str, name: &str) -> Result<(), String> {
        let r = self
            .handle
            .block_on(self.writer.delete_claim(namespace, name));
        self.shared.lock().forget_dra_claim(namespace, name);
        r
    }

    fn set_extended_resource_claim_status(
        &mut self,
        pod: &Pod,
        claim_name: &str,
        mappings: &[rkube_model::dra::RequestMapping],
    ) -> Result<(), String> {
        self.handle
            .block_on(self.writer.set_extended_resource_claim_status(
                &pod.namespace,
                &pod.name,
                claim_name,
                mappings,
            ))
    }
}

impl Listers for ApiHost<'_> {
    fn node(&self, name: &str) -> Option<Arc<Node>> {
        self.shared.lock().nodes.get(name).cloned()
    }

    fn pod_exists(&self, pod: &Pod) -> bool {
        self.shared.lock().pods.contains_key(&pod.uid)
    }
}

impl HostClock for ApiHost<'_> {
    fn sleep(&mut self, d: Duration) {
        std::thread::sleep(d);
    }

    fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}
