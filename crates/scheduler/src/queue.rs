//! The scheduling queue (upstream's `PriorityQueue`): an active queue
//! ordered by the profiles' QueueSort plugin, a backoff queue ordered by the
//! end of each pod's backoff, and an unschedulable pool that cluster events
//! leave through queueing hints ([`rkube_framework::events`]).
//!
//! * A pod rejected by a PreEnqueue plugin (e.g. SchedulingGates) waits in
//!   the unschedulable pool, marked gated ([`Gate::Plugin`]); only an
//!   update of the pod that lets it pass ([`crate::state`] runs PreEnqueue)
//!   lets it in. Cluster events do not look at these pods: scheduling
//!   gates are lifted by the pod's own update, as upstream's
//!   `UpdatePodSchedulingGatesEliminated` hint says.
//! * DefaultPreemption's PreEnqueue (upstream's `SchedulerAsyncPreemption`,
//!   beta, on by default): while a pod's preemption is still deleting its
//!   victims ([`Queue::set_running_preemption`]), every move of it to the
//!   active or backoff queue parks it gated instead ([`Gate::Preemption`]),
//!   with DefaultPreemption among its rejectors. Such a pod is re-checked
//!   only by the events DefaultPreemption registers (an assigned pod's
//!   deletion) and by wildcard events, and then moves only if its
//!   rejectors' hints say so, as upstream's gating plugin events.
//! * A pod that did not fit goes to the unschedulable pool with the plugins
//!   that rejected it and a backoff of `podInitialBackoffSeconds ·
//!   2^(attempts-1)`, capped at `podMaxBackoffSeconds`. A cluster event
//!   ([`Queue::move_pods`]) moves it only when one of its rejector plugins
//!   registered the event and that plugin's hint says `Queue`: to the
//!   active queue, or to the backoff queue while its backoff lasts. A pod
//!   without rejector plugins (an error, or no node at all) is moved by
//!   every event and goes straight to backoff after its attempt, as
//!   upstream.
//! * An update of an unschedulable pod itself is a `TargetPod` event (its
//!   labels, tolerations, requests or gates changed) and goes through the
//!   same hints.
//! * Events that happen while pods are in flight (popped, not yet back or
//!   done) are recorded; when such a pod comes back rejected, the events
//!   since its pop are checked against its rejectors (upstream's in-flight
//!   events): one that may help sends it to backoff instead of the pool. A
//!   `TargetPod` event only counts for its own pod (upstream checks every
//!   in-flight event against every returning pod).
//! * Pods left in the pool for 5 minutes are moved anyway (upstream's
//!   `UnschedulableTimeout`, a wildcard event).
//! * `scheduler_queue_incoming_pods_total{queue,event}` counts every pod
//!   entering a queue, by the event that sent it there.
//!
//! * Backoff (upstream's `SchedulerPopFromBackoffQ`, beta, on by default):
//!   a backoff ends at a whole second of the wall clock (its end rounded
//!   down), and a pod still backs off while that second has not passed.
//!   Pods that failed with an error wait in a heap of their own, by the
//!   end of their backoff; the others by the end of their backoff, then
//!   in QueueSort order. When the active queue is empty the first of the
//!   others is popped even if it still backs off (incoming event
//!   `PopFromBackoffQ`).
//!
//! Kept from rkube's earlier queue rather than upstream: the backoff
//! counts attempts (upstream counts rejections and errors separately); a
//! pod's queue timestamp is renewed whenever it enters the active queue
//! from elsewhere. Pending plugins (`queueImmediately`) do not exist: no
//! rkube plugin returns Pending.
//!
//! No I/O and no clock of its own: callers pass `now`.

mod heap;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rkube_framework::events::{
    self, pod_scheduling_properties_change, ClusterEvent, EventObject, HintContext,
    QueueingHintMap, Requeue,
};
use rkube_framework::{Profiles, QueuedPodRef};
use rkube_model::workloads::WorkloadSelectors;
use rkube_model::Pod;

use crate::metrics::Metrics;
pub use heap::Less;
use heap::PodHeap;

/// How long a pod may stay in the unschedulable pool before it is retried
/// anyway (upstream's `podMaxInUnschedulablePodsDuration`).
pub const MAX_IN_UNSCHEDULABLE: Duration = Duration::from_secs(5 * 60);

/// A pod in the queue.
#[derive(Debug, Clone)]
pub struct QueuedPod {
    /// The pod (latest version seen).
    pub pod: Arc<Pod>,
    /// Queue time, for QueueSort (lower is earlier).
    pub timestamp: u64,
    /// Scheduling attempts so far (incremented on pop).
    pub attempts: u32,
    /// End of the current backoff, rounded down to its whole second of
    /// the wall clock (`None`: no backoff).
    pub backoff_until: Option<Instant>,
    /// When it entered the unschedulable pool.
    pub unschedulable_since: Instant,
    /// Rejected by a PreEnqueue plugin (`None`: not gated).
    pub gate: Option<Gate>,
    /// The plugins that rejected it in its last attempt (upstream's
    /// `UnschedulablePlugins`); empty after an error.
    pub unschedulable_plugins: BTreeSet<&'static str>,
}

/// Why a pod waits gated (upstream's `GatingPlugin`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// A PreEnqueue plugin of its profile (SchedulingGates,
    /// DynamicResources): its own update, or a re-check after an event its
    /// plugin waits for, lets it in.
    Plugin,
    /// DefaultPreemption: its asynchronous preemption was still deleting
    /// victims when it was last checked.
    Preemption,
}

/// Upstream name of the plugin that gates a pod whose preemption runs.
const DEFAULT_PREEMPTION: &str = "DefaultPreemption";

/// Where a pod is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// Active queue.
    Active,
    /// Backoff queue.
    Backoff,
    /// Unschedulable pool (or gated).
    Unschedulable,
    /// Popped and being scheduled or bound.
    InFlight,
}

/// Where a pod goes, as the metric labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Active,
    Backoff,
    Unschedulable,
}

impl Target {
    fn label(self) -> &'static str {
        match self {
            Target::Active => "active",
            Target::Backoff => "backoff",
            Target::Unschedulable => "unschedulable",
        }
    }
}

/// A popped pod and the number of events recorded before its pop.
#[derive(Debug)]
struct InFlight {
    qp: QueuedPod,
    seen: u64,
}

/// A cluster event recorded while pods were in flight.
#[derive(Debug)]
struct Recorded {
    seq: u64,
    event: ClusterEvent,
    old: Option<EventObject>,
    new: Option<EventObject>,
    /// For `TargetPod` events: the pod they are about.
    target: Option<String>,
}

/// The queue. Pods are keyed by UID.
pub struct Queue {
    active: PodHeap,
    /// Pods rejected by plugins, backing off.
    backoff: PodHeap,
    /// Pods that failed with an error (no rejector plugins), backing off.
    backoff_errors: PodHeap,
    /// An instant and the fraction of its wall-clock second, to round
    /// backoffs to whole seconds.
    window_start: Instant,
    window_offset: Duration,
    unschedulable: HashMap<String, QueuedPod>,
    /// Pods of the pool not gated by a plugin, by the time they entered it
    /// (for the 5-minute flush).
    pool_since: BTreeSet<(Instant, String)>,
    in_flight: HashMap<String, InFlight>,
    in_flight_events: VecDeque<Recorded>,
    event_seq: u64,
    next_ts: u64,
    initial_backoff: Duration,
    max_backoff: Duration,
    /// Each profile's hints by scheduler name; empty: every event is of
    /// interest and moves every pod (no profiles known).
    hints: HashMap<String, QueueingHintMap>,
    workloads: Arc<WorkloadSelectors>,
    /// The DRA objects hints may read (NodeResourcesFit: which extended
    /// resources a DeviceClass serves).
    dra: Option<Arc<rkube_model::dra::Dra>>,
    metrics: Option<Arc<Metrics>>,
    /// Pods whose asynchronous preemption still runs, by UID (what
    /// DefaultPreemption's PreEnqueue rejects).
    running_preemption: HashSet<String>,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("active", &self.active.len())
            .field("backoff", &self.backoff.len())
            .field("unschedulable", &self.unschedulable.len())
            .field("in_flight", &self.in_flight.len())
            .finish()
    }
}

/// PrioritySort's order: higher priority first, then earlier.
fn priority_then_time(a: &QueuedPod, b: &QueuedPod) -> bool {
    (std::cmp::Reverse(a.pod.priority), a.timestamp)
        < (std::cmp::Reverse(b.pod.priority), b.timestamp)
}

/// Earlier end of backoff first, then earlier.
fn backoff_order(a: &QueuedPod, b: &QueuedPod) -> bool {
    (a.backoff_until, a.timestamp) < (b.backoff_until, b.timestamp)
}

/// Earlier end of backoff first, then the active queue's order
/// (upstream's backoff order with `SchedulerPopFromBackoffQ`).
fn backoff_then(active: Less) -> Less {
    Arc::new(
        move |a: &QueuedPod, b: &QueuedPod| match a.backoff_until.cmp(&b.backoff_until) {
            std::cmp::Ordering::Equal => active(a, b),
            o => o.is_lt(),
        },
    )
}

impl Queue {
    /// An empty queue with the configured backoffs (each capped at Go's
    /// largest duration, so `now + backoff` cannot overflow), ordered by
    /// priority then queue time, without hints (every event moves every
    /// unschedulable pod) until [`Queue::with_profiles`].
    pub fn new(initial_backoff: Duration, max_backoff: Duration) -> Self {
        let initial_backoff = initial_backoff.min(rkube_util::duration::MAX);
        let max_backoff = max_backoff.min(rkube_util::duration::MAX);
        let window_offset = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(Duration::ZERO, |d| {
                Duration::from_nanos(d.subsec_nanos().into())
            });
        Queue {
            active: PodHeap::new(Arc::new(priority_then_time)),
            backoff: PodHeap::new(backoff_then(Arc::new(priority_then_time))),
            backoff_errors: PodHeap::new(Arc::new(backoff_order)),
            window_start: Instant::now(),
            window_offset,
            unschedulable: HashMap::new(),
            pool_since: BTreeSet::new(),
            in_flight: HashMap::new(),
            in_flight_events: VecDeque::new(),
            event_seq: 0,
            next_ts: 0,
            initial_backoff,
            max_backoff,
            hints: HashMap::new(),
            workloads: Arc::new(WorkloadSelectors::default()),
            dra: None,
            metrics: None,
            running_preemption: HashSet::new(),
        }
    }

    /// Orders the active queue by the profiles' QueueSort plugin (they all
    /// share one, as the configuration validation requires) and takes each
    /// profile's queueing hints. Call on an empty queue.
    pub fn with_profiles(mut self, profiles: &Profiles) -> Self {
        if let Some(fw) = profiles.frameworks().first() {
            let qs = fw.queue_sort().clone();
            let less: Less = Arc::new(move |a: &QueuedPod, b: &QueuedPod| {
                qs.as_queue_sort().is_some_and(|qs| {
                    qs.less(
                        QueuedPodRef {
                            pod: &a.pod,
                            timestamp: a.timestamp,
                        },
                        QueuedPodRef {
                            pod: &b.pod,
                            timestamp: b.timestamp,
                        },
                    )
                })
            });
            self.active = PodHeap::new(less.clone());
            self.backoff = PodHeap::new(backoff_then(less));
        }
        self.hints = profiles
            .frameworks()
            .iter()
            .map(|fw| (fw.profile_name.clone(), QueueingHintMap::for_framework(fw)))
            .collect();
        self
    }

    /// Counts incoming pods in `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// The DRA objects hints may read.
    pub fn set_dra(&mut self, dra: Arc<rkube_model::dra::Dra>) {
        self.dra = Some(dra);
    }

    /// The workloads hints may read (PodTopologySpread's default selector).
    pub fn set_workloads(&mut self, workloads: Arc<WorkloadSelectors>) {
        self.workloads = workloads;
    }

    fn stamp(&mut self) -> u64 {
        self.next_ts += 1;
        self.next_ts
    }

    fn incoming(&self, target: Target, event: &str) {
        if let Some(m) = &self.metrics {
            m.incoming_pods(target.label(), event);
        }
    }

    /// Where a pod is, if queued.
    pub fn place(&self, uid: &str) -> Option<Place> {
        if self.active.contains(uid) {
            Some(Place::Active)
        } else if self.backoff.contains(uid) || self.backoff_errors.contains(uid) {
            Some(Place::Backoff)
        } else if self.unschedulable.contains_key(uid) {
            Some(Place::Unschedulable)
        } else if self.in_flight.contains_key(uid) {
            Some(Place::InFlight)
        } else {
            None
        }
    }

    /// A queued (not in flight) pod's entry.
    pub fn get(&self, uid: &str) -> Option<&QueuedPod> {
        self.unschedulable.get(uid).or_else(|| {
            self.active
                .iter()
                .chain(self.backoff.iter())
                .chain(self.backoff_errors.iter())
                .find(|q| q.pod.uid == uid)
        })
    }

    /// Number of pods waiting (active, backoff, unschedulable), not in flight.
    pub fn len(&self) -> usize {
        self.active.len()
            + self.backoff.len()
            + self.backoff_errors.len()
            + self.unschedulable.len()
    }

    /// Sizes for `scheduler_pending_pods`.
    pub fn pending(&self) -> crate::metrics::Pending {
        let gated = self
            .unschedulable
            .values()
            .filter(|q| q.gate.is_some())
            .count();
        crate::metrics::Pending {
            active: self.active.len(),
            backoff: self.backoff.len() + self.backoff_errors.len(),
            unschedulable: self.unschedulable.len() - gated,
            gated,
        }
    }

    /// The events recorded for pods in flight, counted by label, and
    /// `PodPopped` for the pods in flight (`scheduler_inflight_events`).
    pub fn inflight_events(&self) -> Vec<(String, usize)> {
        let mut by_label: BTreeMap<String, usize> = BTreeMap::new();
        for e in &self.in_flight_events {
            *by_label.entry(e.event.label()).or_default() += 1;
        }
        by_label.insert("PodPopped".to_string(), self.in_flight.len());
        by_label.into_iter().collect()
    }

    /// True when no pod waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True when a pod can be popped now (from the active queue, or the
    /// backoff queue when the active one is empty).
    pub fn has_active(&self) -> bool {
        !self.active.is_empty() || !self.backoff.is_empty()
    }

    /// Makes `start` the beginning of a wall-clock second for rounding
    /// backoffs (tests pin it; the queue takes the clock's own).
    pub fn with_window_start(mut self, start: Instant) -> Self {
        self.window_start = start;
        self.window_offset = Duration::ZERO;
        self
    }

    /// `t` rounded down to its whole second of the wall clock (upstream's
    /// `alignToWindow`).
    fn align(&self, t: Instant) -> Instant {
        const SECOND: u32 = 1_000_000_000;
        let offset = self.window_offset.subsec_nanos();
        let into_second = match t.checked_duration_since(self.window_start) {
            Some(d) => (d.subsec_nanos() + offset) % SECOND,
            None => {
                let back = self.window_start.duration_since(t).subsec_nanos();
                (offset + SECOND - back) % SECOND
            }
        };
        t.checked_sub(Duration::from_nanos(into_second.into()))
            .unwrap_or(t)
    }

    /// Still backing off at `now`: its backoff's second has not passed
    /// (upstream's `isPodBackingoff`).
    fn backing_off(&self, qp: &QueuedPod, now: Instant) -> bool {
        qp.backoff_until.is_some_and(|t| t >= self.align(now))
    }

    fn push_backoff(&mut self, qp: QueuedPod) {
        if qp.unschedulable_plugins.is_empty() {
            self.backoff_errors.push(qp);
        } else {
            self.backoff.push(qp);
        }
    }

    fn park(&mut self, qp: QueuedPod) {
        if qp.gate != Some(Gate::Plugin) {
            self.pool_since
                .insert((qp.unschedulable_since, qp.pod.uid.clone()));
        }
        self.unschedulable.insert(qp.pod.uid.clone(), qp);
    }

    fn unpark(&mut self, uid: &str) -> Option<QueuedPod> {
        let qp = self.unschedulable.remove(uid)?;
        self.pool_since
            .remove(&(qp.unschedulable_since, qp.pod.uid.clone()));
        Some(qp)
    }

    /// Marks whether the asynchronous preemption of the pod `uid` still
    /// runs. Nothing moves now: a gated pod is re-checked by the next event
    /// that may help it, as upstream's.
    pub fn set_running_preemption(&mut self, uid: &str, running: bool) {
        if running {
            self.running_preemption.insert(uid.to_string());
        } else {
            self.running_preemption.remove(uid);
        }
    }

    /// DefaultPreemption's PreEnqueue: parks the pod gated (and returns
    /// `None`) while its preemption runs; its time in the pool starts
    /// again, so the 5-minute flush looks at it again 5 minutes later.
    fn pre_enqueue(&mut self, mut qp: QueuedPod, event: &str, now: Instant) -> Option<QueuedPod> {
        if !self.running_preemption.contains(&qp.pod.uid) {
            qp.gate = None;
            return Some(qp);
        }
        qp.gate = Some(Gate::Preemption);
        qp.unschedulable_since = now;
        qp.unschedulable_plugins.insert(DEFAULT_PREEMPTION);
        // Callers have taken it out of every queue: it enters the pool.
        self.incoming(Target::Unschedulable, event);
        self.park(qp);
        None
    }

    /// To the active queue, or the backoff queue while its backoff lasts
    /// (upstream's `requeueEntityWithQueueingStrategy(queueAfterBackoff)`),
    /// through the PreEnqueue gate of a running preemption unless it comes
    /// straight from the backoff queue (`from_backoff`). Returns `false`
    /// when the gate parked it.
    fn activate(&mut self, qp: QueuedPod, now: Instant, event: &str, from_backoff: bool) -> bool {
        let mut qp = if from_backoff {
            qp
        } else {
            match self.pre_enqueue(qp, event, now) {
                Some(qp) => qp,
                None => return false,
            }
        };
        if self.backing_off(&qp, now) {
            self.incoming(Target::Backoff, event);
            self.push_backoff(qp);
        } else {
            qp.timestamp = self.stamp();
            self.incoming(Target::Active, event);
            self.active.push(qp);
        }
        true
    }

    /// Adds or updates a pending pod. `old` is its previous version (`None`
    /// for a new pod); `gated`: a PreEnqueue plugin rejects it. An
    /// unschedulable pod's update is checked against its rejectors' hints;
    /// an update of a pod in flight is recorded for when it comes back.
    pub fn upsert(&mut self, old: Option<&Pod>, pod: Arc<Pod>, gated: bool, now: Instant) {
        let uid = pod.uid.clone();
        let events = old.map(|o| pod_scheduling_properties_change(&pod, o, true));
        if self.in_flight.contains_key(&uid) {
            // The failure handler re-reads the latest version; the update's
            // events count when the attempt ends.
            if let Some(old) = old {
                for e in events.into_iter().flatten() {
                    self.record(
                        e,
                        Some(EventObject::Pod(Arc::new(old.clone()))),
                        Some(EventObject::Pod(pod.clone())),
                        Some(uid.clone()),
                    );
                }
            }
            return;
        }
        if let Some(mut qp) = self
            .active
            .remove(&uid)
            .or_else(|| self.backoff.remove(&uid))
            .or_else(|| self.backoff_errors.remove(&uid))
        {
            let was_backoff = self.backing_off(&qp, now);
            qp.pod = pod;
            qp.gate = gated.then_some(Gate::Plugin);
            if gated {
                qp.unschedulable_since = now;
                self.park(qp);
            } else if was_backoff {
                self.push_backoff(qp);
            } else {
                self.active.push(qp);
            }
            return;
        }
        if let Some(mut qp) = self.unpark(&uid) {
            let was_gated = qp.gate == Some(Gate::Plugin);
            qp.pod = pod;
            if gated {
                qp.gate = Some(Gate::Plugin);
                self.park(qp);
                return;
            }
            if was_gated {
                qp.gate = None;
                // PreEnqueue lets it in now (its gates are gone).
                let label = events
                    .iter()
                    .flatten()
                    .find(|e| {
                        e.action == events::ActionType::UPDATE_POD_SCHEDULING_GATES_ELIMINATED
                    })
                    .or(events.iter().flatten().next())
                    .map_or_else(|| "UnscheduledPodUpdate".to_string(), ClusterEvent::label);
                self.activate(qp, now, &label, false);
                return;
            }
            // Not gated, or gated by a running preemption: the update's
            // events go through the rejectors' hints.
            let old_obj = old.map(|o| EventObject::Pod(Arc::new(o.clone())));
            let new_obj = EventObject::Pod(qp.pod.clone());
            for e in events.iter().flatten() {
                if self.requeue(&qp, e, old_obj.as_ref(), Some(&new_obj)) == Requeue::AfterBackoff {
                    self.activate(qp, now, &e.label(), false);
                    return;
                }
            }
            self.park(qp);
            return;
        }
        let qp = QueuedPod {
            pod,
            timestamp: self.stamp(),
            attempts: 0,
            backoff_until: None,
            unschedulable_since: now,
            gate: gated.then_some(Gate::Plugin),
            unschedulable_plugins: BTreeSet::new(),
        };
        let label = events::UNSCHEDULED_POD_ADD.label();
        if gated {
            self.incoming(Target::Unschedulable, &label);
            self.park(qp);
        } else {
            self.incoming(Target::Active, &label);
            self.active.push(qp);
        }
    }

    /// Re-runs PreEnqueue on the gated pods `affected` selects after a
    /// cluster event (`event`): those `still_gated` no longer rejects go
    /// to the active queue (upstream's PreEnqueue plugins with event
    /// registrations, e.g. DynamicResources waiting for a claim).
    pub fn recheck_gated(
        &mut self,
        event: &ClusterEvent,
        affected: impl Fn(&Pod) -> bool,
        still_gated: impl Fn(&Pod) -> bool,
        now: Instant,
    ) -> usize {
        let passing: Vec<String> = self
            .unschedulable
            .values()
            .filter(|qp| {
                qp.gate == Some(Gate::Plugin) && affected(&qp.pod) && !still_gated(&qp.pod)
            })
            .map(|qp| qp.pod.uid.clone())
            .collect();
        let label = event.label();
        let mut moved = 0;
        for uid in &passing {
            if let Some(mut qp) = self.unpark(uid) {
                qp.gate = None;
                moved += usize::from(self.activate(qp, now, &label, false));
            }
        }
        moved
    }

    /// Removes a pod (deleted, bound by someone else, no longer ours).
    pub fn delete(&mut self, uid: &str) {
        self.active.remove(uid);
        self.backoff.remove(uid);
        self.backoff_errors.remove(uid);
        self.unpark(uid);
    }

    /// Moves expired backoffs to the active queue and pods that waited too
    /// long in the unschedulable pool onwards.
    pub fn flush(&mut self, now: Instant) {
        let window = self.align(now);
        let done = |qp: &QueuedPod| qp.backoff_until.is_none_or(|t| t < window);
        while self.backoff.peek().is_some_and(done) {
            if let Some(qp) = self.backoff.pop() {
                self.activate(qp, now, events::BACKOFF_COMPLETE, true);
            }
        }
        while self.backoff_errors.peek().is_some_and(done) {
            if let Some(qp) = self.backoff_errors.pop() {
                self.activate(qp, now, events::BACKOFF_COMPLETE, true);
            }
        }
        let label = events::UNSCHEDULABLE_TIMEOUT.label();
        // Collected first: a pod the preemption gate parks again re-enters
        // the pool (from `now`).
        let due: Vec<String> = self
            .pool_since
            .iter()
            .take_while(|(since, _)| now >= *since + MAX_IN_UNSCHEDULABLE)
            .map(|(_, uid)| uid.clone())
            .collect();
        for uid in due {
            if let Some(qp) = self.unpark(&uid) {
                self.activate(qp, now, &label, false);
            }
        }
    }

    /// Pops the first pod of the active queue (QueueSort order), or when it
    /// is empty the first pod backing off after a rejection, and marks it
    /// in flight.
    pub fn pop(&mut self, now: Instant) -> Option<QueuedPod> {
        self.flush(now);
        let mut qp = match self.active.pop() {
            Some(qp) => qp,
            None => {
                let qp = self.backoff.pop()?;
                self.incoming(Target::Active, events::POP_FROM_BACKOFF_Q);
                qp
            }
        };
        self.start_attempt(&mut qp);
        Some(qp)
    }

    /// A popped pod's attempt starts: counted, and in flight from the
    /// current event on.
    fn start_attempt(&mut self, qp: &mut QueuedPod) {
        qp.attempts += 1;
        self.in_flight.insert(
            qp.pod.uid.clone(),
            InFlight {
                qp: qp.clone(),
                seen: self.event_seq,
            },
        );
    }

    /// GenericWorkload: takes the other members of `pod`'s pod group that
    /// wait in the active or backoff queue or, not gated, in the
    /// unschedulable pool, and marks them in flight as [`Queue::pop`]
    /// does; returned in queue order (queue time). The group is scheduled
    /// in one cycle, as upstream's queue pops a group as one entity.
    pub fn take_group_members(&mut self, pod: &Pod) -> Vec<QueuedPod> {
        let Some(group) = pod.pod_group.as_deref() else {
            return Vec::new();
        };
        let member = |qp: &QueuedPod| {
            qp.pod.uid != pod.uid
                && qp.pod.namespace == pod.namespace
                && qp.pod.pod_group.as_deref() == Some(group)
        };
        let mut uids: Vec<String> = self
            .active
            .iter()
            .chain(self.backoff.iter())
            .chain(self.backoff_errors.iter())
            .chain(self.unschedulable.values().filter(|qp| qp.gate.is_none()))
            .filter(|qp| member(qp))
            .map(|qp| qp.pod.uid.clone())
            .collect();
        uids.sort();
        uids.dedup();
        let mut taken: Vec<QueuedPod> = uids
            .iter()
            .filter_map(|uid| self.active.remove(uid).or_else(|| self.take_waiting(uid)))
            .collect();
        taken.sort_by_key(|qp| qp.timestamp);
        for qp in &mut taken {
            self.start_attempt(qp);
        }
        taken
    }

    fn backoff_duration(&self, attempts: u32) -> Duration {
        let mut d = self.initial_backoff;
        for _ in 1..attempts {
            d = d.saturating_mul(2);
            if d >= self.max_backoff {
                return self.max_backoff;
            }
        }
        d.min(self.max_backoff)
    }

    /// Upstream's `isPodWorthRequeuing` with the pod's profile's hints (no
    /// hints known: always).
    fn requeue(
        &self,
        qp: &QueuedPod,
        event: &ClusterEvent,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
    ) -> Requeue {
        match self.hints.get(&qp.pod.scheduler_name) {
            Some(map) => map.requeue(
                &qp.pod,
                &qp.unschedulable_plugins,
                event,
                old,
                new,
                &HintContext {
                    workloads: &self.workloads,
                    dra: self.dra.as_deref(),
                },
            ),
            None => Requeue::AfterBackoff,
        }
    }

    fn is_event_of_interest(&self, event: &ClusterEvent) -> bool {
        self.hints.is_empty() || self.hints.values().any(|m| m.is_event_of_interest(event))
    }

    /// Removes a pod from the in-flight set, dropping the recorded events
    /// no pod in flight needs any more.
    fn take_in_flight(&mut self, uid: &str) -> Option<InFlight> {
        let f = self.in_flight.remove(uid)?;
        match self.in_flight.values().map(|f| f.seen).min() {
            None => self.in_flight_events.clear(),
            Some(oldest) => {
                while self
                    .in_flight_events
                    .front()
                    .is_some_and(|e| e.seq <= oldest)
                {
                    self.in_flight_events.pop_front();
                }
            }
        }
        Some(f)
    }

    /// A popped pod did not fit: `rejectors` are the plugins that rejected
    /// it (the diagnosis' unschedulable plugins); `pod` is its latest
    /// version. Back to the unschedulable pool, unless it has no rejectors
    /// or an event recorded while it was in flight may help it: then to
    /// the backoff queue (upstream's `AddUnschedulablePodIfNotPresent`).
    pub fn requeue_unschedulable(
        &mut self,
        pod: Arc<Pod>,
        rejectors: BTreeSet<&'static str>,
        now: Instant,
    ) {
        let Some(f) = self.in_flight.get(&pod.uid) else {
            return;
        };
        let mut qp = f.qp.clone();
        let seen = f.seen;
        qp.pod = pod;
        qp.unschedulable_plugins = rejectors;
        let backoff = self.backoff_duration(qp.attempts);
        qp.backoff_until = (!backoff.is_zero()).then(|| self.align(now + backoff));
        qp.unschedulable_since = now;
        qp.gate = None;
        let strategy = if qp.unschedulable_plugins.is_empty() {
            Requeue::AfterBackoff
        } else {
            let helps = self
                .in_flight_events
                .iter()
                .filter(|e| e.seq > seen)
                .filter(|e| e.target.as_ref().is_none_or(|t| *t == qp.pod.uid))
                .any(|e| {
                    self.requeue(&qp, &e.event, e.old.as_ref(), e.new.as_ref())
                        == Requeue::AfterBackoff
                });
            if helps {
                Requeue::AfterBackoff
            } else {
                Requeue::Skip
            }
        };
        self.take_in_flight(&qp.pod.uid);
        match strategy {
            Requeue::AfterBackoff => {
                self.activate(qp, now, events::SCHEDULE_ATTEMPT_FAILURE, false);
            }
            Requeue::Skip => {
                self.incoming(Target::Unschedulable, events::SCHEDULE_ATTEMPT_FAILURE);
                self.park(qp);
            }
        }
    }

    /// A popped pod hit an error (or its binding failed): to the backoff
    /// queue (no rejector plugins).
    pub fn requeue_backoff(&mut self, pod: Arc<Pod>, now: Instant) {
        self.requeue_unschedulable(pod, BTreeSet::new(), now);
    }

    /// A popped pod is done (bound, or gone).
    pub fn done(&mut self, uid: &str) {
        self.take_in_flight(uid);
    }

    fn record(
        &mut self,
        event: ClusterEvent,
        old: Option<EventObject>,
        new: Option<EventObject>,
        target: Option<String>,
    ) {
        if self.in_flight.is_empty() {
            return;
        }
        self.event_seq += 1;
        self.in_flight_events.push_back(Recorded {
            seq: self.event_seq,
            event,
            old,
            new,
            target,
        });
    }

    /// Whether an event may move a pod of the pool at all: not gated, or
    /// gated by a running preemption and the event is a wildcard or one
    /// DefaultPreemption registers (upstream's gating plugin events).
    fn gate_listens(&self, qp: &QueuedPod, event: &ClusterEvent) -> bool {
        match qp.gate {
            None => true,
            Some(Gate::Plugin) => false,
            Some(Gate::Preemption) => {
                event.is_wildcard()
                    || self.hints.get(&qp.pod.scheduler_name).is_none_or(|m| {
                        m.events_of(DEFAULT_PREEMPTION)
                            .iter()
                            .any(|r| r.matches(event))
                    })
            }
        }
    }

    /// Takes a pod out of the unschedulable pool or the backoff queues.
    fn take_waiting(&mut self, uid: &str) -> Option<QueuedPod> {
        self.unpark(uid)
            .or_else(|| self.backoff.remove(uid))
            .or_else(|| self.backoff_errors.remove(uid))
    }

    /// GenericWorkload: a member left pending by a pod-group cycle that
    /// succeeded goes back to the active queue at once, keeping its queue
    /// time (upstream's `AddAttemptedPodGroupIfNeeded` requeues such a
    /// group without backoff and with its timestamp), so the group's
    /// leftovers are tried again before later pods.
    pub fn requeue_group_leftover(&mut self, uid: &str) -> bool {
        let Some(mut qp) = self.take_waiting(uid) else {
            return false;
        };
        qp.gate = None;
        self.incoming(Target::Active, "ScheduleAttemptFailure");
        self.active.push(qp);
        true
    }

    /// Upstream's `Activate` of one pod: from the unschedulable pool or the
    /// backoff queue straight to the active queue; a pod of the pool whose
    /// preemption still runs stays there, gated. Returns whether it moved.
    pub fn force_activate(&mut self, uid: &str) -> bool {
        let label = events::FORCE_ACTIVATE.label();
        if self.running_preemption.contains(uid) {
            // Gated where it is (upstream's entity stays in the pool).
            if let Some(qp) = self.unschedulable.get_mut(uid) {
                qp.gate = Some(Gate::Preemption);
                qp.unschedulable_plugins.insert(DEFAULT_PREEMPTION);
                return false;
            }
        }
        let Some(mut qp) = self.take_waiting(uid) else {
            return false;
        };
        qp.gate = None;
        qp.timestamp = self.stamp();
        self.incoming(Target::Active, &label);
        self.active.push(qp);
        true
    }

    /// A cluster event (upstream's `MoveAllToActiveOrBackoffQueue`): moves
    /// the unschedulable pods (not gated, or gated by a preemption the
    /// event may have ended) that `pre_check` admits (all when
    /// `None`) and that the event may help (by their rejectors' hints) to
    /// the active queue, or the backoff queue while their backoff lasts.
    /// Returns how many moved. The event is recorded for pods in flight.
    pub fn move_pods(
        &mut self,
        event: &ClusterEvent,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
        pre_check: Option<&dyn Fn(&Pod) -> bool>,
        now: Instant,
    ) -> usize {
        if !self.is_event_of_interest(event) {
            return 0;
        }
        let moving: Vec<String> = self
            .unschedulable
            .values()
            .filter(|qp| self.gate_listens(qp, event) && pre_check.is_none_or(|f| f(&qp.pod)))
            .filter(|qp| self.requeue(qp, event, old, new) == Requeue::AfterBackoff)
            .map(|qp| qp.pod.uid.clone())
            .collect();
        let label = event.label();
        let mut moved = 0;
        for uid in &moving {
            if let Some(qp) = self.unpark(uid) {
                moved += usize::from(self.activate(qp, now, &label, false));
            }
        }
        self.record(*event, old.cloned(), new.cloned(), None);
        moved
    }

    /// When the next backoff ends (the second after its own) or the next
    /// unschedulable pod is flushed.
    pub fn next_wakeup(&self) -> Option<Instant> {
        let b = [&self.backoff, &self.backoff_errors]
            .into_iter()
            .filter_map(|h| h.peek().and_then(|qp| qp.backoff_until))
            .min()
            .map(|t| t + Duration::from_secs(1));
        let u = self
            .pool_since
            .first()
            .map(|(since, _)| *since + MAX_IN_UNSCHEDULABLE);
        b.into_iter().chain(u).min()
    }
}

#[cfg(test)]
mod tests;
