//! The scheduling queue (upstream's `PriorityQueue`, simplified): an active
//! queue ordered by the profile's QueueSort plugin, a backoff queue and an
//! unschedulable pool.
//!
//! * A pod rejected by a PreEnqueue plugin (e.g. SchedulingGates) waits in
//!   the unschedulable pool, marked gated, until an update lets it in.
//! * A pod that did not fit goes to the unschedulable pool with a backoff of
//!   `podInitialBackoffSeconds · 2^(attempts-1)`, capped at
//!   `podMaxBackoffSeconds`. A cluster event that may make it fit moves it to
//!   the active queue (or to the backoff queue while its backoff lasts); a
//!   move that happened while the pod was being scheduled sends it straight
//!   to the backoff queue (upstream's `moveRequestCycle`). Pods left in the
//!   pool for 5 minutes are flushed back.
//! * The active queue is a plain map scanned for the minimum on each pop
//!   (O(n) per pop): simple and correct; a heap keyed by QueueSort comes later.
//!
//! No I/O and no clock of its own: callers pass `now`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rkube_model::Pod;

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
    /// End of the current backoff.
    pub backoff_until: Option<Instant>,
    /// When it entered the unschedulable pool.
    pub unschedulable_since: Instant,
    /// Rejected by a PreEnqueue plugin: only an update of the pod lets it in.
    pub gated: bool,
}

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

/// The queue. Pods are keyed by UID.
#[derive(Debug)]
pub struct Queue {
    active: HashMap<String, QueuedPod>,
    backoff: HashMap<String, QueuedPod>,
    unschedulable: HashMap<String, QueuedPod>,
    in_flight: HashMap<String, (QueuedPod, u64)>,
    move_seq: u64,
    next_ts: u64,
    initial_backoff: Duration,
    max_backoff: Duration,
}

impl Queue {
    /// An empty queue with the configured backoffs (each capped at Go's
    /// largest duration, so `now + backoff` cannot overflow).
    pub fn new(initial_backoff: Duration, max_backoff: Duration) -> Self {
        let initial_backoff = initial_backoff.min(rkube_util::duration::MAX);
        let max_backoff = max_backoff.min(rkube_util::duration::MAX);
        Queue {
            active: HashMap::new(),
            backoff: HashMap::new(),
            unschedulable: HashMap::new(),
            in_flight: HashMap::new(),
            move_seq: 0,
            next_ts: 0,
            initial_backoff,
            max_backoff,
        }
    }

    fn stamp(&mut self) -> u64 {
        self.next_ts += 1;
        self.next_ts
    }

    /// Where a pod is, if queued.
    pub fn place(&self, uid: &str) -> Option<Place> {
        if self.active.contains_key(uid) {
            Some(Place::Active)
        } else if self.backoff.contains_key(uid) {
            Some(Place::Backoff)
        } else if self.unschedulable.contains_key(uid) {
            Some(Place::Unschedulable)
        } else if self.in_flight.contains_key(uid) {
            Some(Place::InFlight)
        } else {
            None
        }
    }

    /// Number of pods waiting (active, backoff, unschedulable), not in flight.
    pub fn len(&self) -> usize {
        self.active.len() + self.backoff.len() + self.unschedulable.len()
    }

    /// Sizes for `scheduler_pending_pods`.
    pub fn pending(&self) -> crate::metrics::Pending {
        let gated = self.unschedulable.values().filter(|q| q.gated).count();
        crate::metrics::Pending {
            active: self.active.len(),
            backoff: self.backoff.len(),
            unschedulable: self.unschedulable.len() - gated,
            gated,
        }
    }

    /// True when no pod waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds or updates a pending pod. `gated`: a PreEnqueue plugin rejects
    /// it. `changed`: the update may change its scheduling (spec, labels,
    /// annotations), so an unschedulable pod is retried. Pods in flight are
    /// left alone (the failure handler re-reads the latest version).
    pub fn upsert(&mut self, pod: Arc<Pod>, gated: bool, changed: bool, now: Instant) {
        let uid = pod.uid.clone();
        if self.in_flight.contains_key(&uid) {
            return;
        }
        if let Some(mut qp) = self
            .active
            .remove(&uid)
            .or_else(|| self.backoff.remove(&uid))
        {
            let was_backoff = qp.backoff_until.is_some_and(|t| t > now);
            qp.pod = pod;
            qp.gated = gated;
            if gated {
                qp.unschedulable_since = now;
                self.unschedulable.insert(uid, qp);
            } else if was_backoff {
                self.backoff.insert(uid, qp);
            } else {
                self.active.insert(uid, qp);
            }
            return;
        }
        if let Some(mut qp) = self.unschedulable.remove(&uid) {
            let was_gated = qp.gated;
            qp.pod = pod;
            qp.gated = gated;
            if gated || !(changed || was_gated) {
                self.unschedulable.insert(uid, qp);
            } else {
                self.activate(qp, now);
            }
            return;
        }
        let qp = QueuedPod {
            pod,
            timestamp: self.stamp(),
            attempts: 0,
            backoff_until: None,
            unschedulable_since: now,
            gated,
        };
        if gated {
            self.unschedulable.insert(uid, qp);
        } else {
            self.active.insert(uid, qp);
        }
    }

    /// To the active queue, or the backoff queue while its backoff lasts.
    fn activate(&mut self, mut qp: QueuedPod, now: Instant) {
        let uid = qp.pod.uid.clone();
        if qp.backoff_until.is_some_and(|t| t > now) {
            self.backoff.insert(uid, qp);
        } else {
            qp.timestamp = self.stamp();
            self.active.insert(uid, qp);
        }
    }

    /// Removes a pod (deleted, bound by someone else, no longer ours).
    pub fn delete(&mut self, uid: &str) {
        self.active.remove(uid);
        self.backoff.remove(uid);
        self.unschedulable.remove(uid);
    }

    /// Moves expired backoffs to the active queue and flushes pods that
    /// waited too long in the unschedulable pool.
    pub fn flush(&mut self, now: Instant) {
        let expired: Vec<String> = self
            .backoff
            .iter()
            .filter(|(_, qp)| qp.backoff_until.is_none_or(|t| t <= now))
            .map(|(k, _)| k.clone())
            .collect();
        for uid in expired {
            if let Some(qp) = self.backoff.remove(&uid) {
                self.activate(qp, now);
            }
        }
        let stale: Vec<String> = self
            .unschedulable
            .iter()
            .filter(|(_, qp)| !qp.gated && now >= qp.unschedulable_since + MAX_IN_UNSCHEDULABLE)
            .map(|(k, _)| k.clone())
            .collect();
        for uid in stale {
            if let Some(qp) = self.unschedulable.remove(&uid) {
                self.activate(qp, now);
            }
        }
    }

    /// Pops the first pod of the active queue by `less` (QueueSort) and
    /// marks it in flight.
    pub fn pop(
        &mut self,
        now: Instant,
        less: impl Fn(&QueuedPod, &QueuedPod) -> bool,
    ) -> Option<QueuedPod> {
        self.flush(now);
        let mut best: Option<&QueuedPod> = None;
        for qp in self.active.values() {
            if best.is_none_or(|b| less(qp, b)) {
                best = Some(qp);
            }
        }
        let uid = best?.pod.uid.clone();
        let mut qp = self.active.remove(&uid).expect("present");
        qp.attempts += 1;
        self.in_flight.insert(uid, (qp.clone(), self.move_seq));
        Some(qp)
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

    /// A popped pod did not fit: back to the unschedulable pool with backoff
    /// (to the backoff queue when a move happened since it was popped).
    /// `pod` is its latest version.
    pub fn requeue_unschedulable(&mut self, pod: Arc<Pod>, now: Instant) {
        let Some((mut qp, seq)) = self.in_flight.remove(&pod.uid) else {
            return;
        };
        qp.pod = pod;
        qp.backoff_until = Some(now + self.backoff_duration(qp.attempts));
        qp.unschedulable_since = now;
        if self.move_seq > seq {
            self.backoff.insert(qp.pod.uid.clone(), qp);
        } else {
            self.unschedulable.insert(qp.pod.uid.clone(), qp);
        }
    }

    /// A popped pod hit an error (or its binding failed): to the backoff queue.
    pub fn requeue_backoff(&mut self, pod: Arc<Pod>, now: Instant) {
        let Some((mut qp, _)) = self.in_flight.remove(&pod.uid) else {
            return;
        };
        qp.pod = pod;
        qp.backoff_until = Some(now + self.backoff_duration(qp.attempts));
        self.backoff.insert(qp.pod.uid.clone(), qp);
    }

    /// A popped pod is done (bound, or gone).
    pub fn done(&mut self, uid: &str) {
        self.in_flight.remove(uid);
    }

    /// A cluster event: moves the unschedulable (not gated) pods that
    /// `affected` selects to the active queue, or the backoff queue while
    /// their backoff lasts.
    pub fn move_pods(&mut self, now: Instant, affected: impl Fn(&Pod) -> bool) {
        self.move_seq += 1;
        let uids: Vec<String> = self
            .unschedulable
            .iter()
            .filter(|(_, qp)| !qp.gated && affected(&qp.pod))
            .map(|(k, _)| k.clone())
            .collect();
        for uid in uids {
            if let Some(qp) = self.unschedulable.remove(&uid) {
                self.activate(qp, now);
            }
        }
    }

    /// When the next backoff ends or the next unschedulable pod is flushed.
    pub fn next_wakeup(&self) -> Option<Instant> {
        let b = self.backoff.values().filter_map(|qp| qp.backoff_until);
        let u = self
            .unschedulable
            .values()
            .filter(|qp| !qp.gated)
            .map(|qp| qp.unschedulable_since + MAX_IN_UNSCHEDULABLE);
        b.chain(u).min()
    }

    /// True when a pod can be popped now.
    pub fn has_active(&self) -> bool {
        !self.active.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str, priority: i32) -> Arc<Pod> {
        Arc::new(Pod {
            uid: uid.into(),
            name: uid.into(),
            namespace: "default".into(),
            priority,
            ..Default::default()
        })
    }

    fn by_priority(a: &QueuedPod, b: &QueuedPod) -> bool {
        (std::cmp::Reverse(a.pod.priority), a.timestamp)
            < (std::cmp::Reverse(b.pod.priority), b.timestamp)
    }

    fn q() -> Queue {
        Queue::new(Duration::from_secs(1), Duration::from_secs(10))
    }

    #[test]
    fn pops_by_priority_then_time() {
        let now = Instant::now();
        let mut q = q();
        q.upsert(pod("a", 0), false, true, now);
        q.upsert(pod("b", 10), false, true, now);
        q.upsert(pod("c", 0), false, true, now);
        let order: Vec<String> = std::iter::from_fn(|| q.pop(now, by_priority))
            .map(|p| p.pod.uid.clone())
            .collect();
        assert_eq!(order, ["b", "a", "c"]);
        assert_eq!(q.place("a"), Some(Place::InFlight));
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let q = q();
        let secs: Vec<u64> = (1..=6).map(|a| q.backoff_duration(a).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 10, 10]);
    }

    #[test]
    fn huge_backoffs_do_not_overflow_the_clock() {
        let t0 = Instant::now();
        let mut q = Queue::new(Duration::MAX, Duration::MAX);
        q.upsert(pod("a", 0), false, true, t0);
        let p = q.pop(t0, by_priority).unwrap();
        q.requeue_unschedulable(p.pod.clone(), t0);
        q.move_pods(t0, |_| true);
        assert!(q.pop(t0 + Duration::from_secs(3600), by_priority).is_none());
        assert_eq!(q.backoff_duration(200), rkube_util::duration::MAX);
    }

    #[test]
    fn unschedulable_moves_on_events_and_respects_backoff() {
        let t0 = Instant::now();
        let mut q = q();
        q.upsert(pod("a", 0), false, true, t0);
        let p = q.pop(t0, by_priority).unwrap();
        q.requeue_unschedulable(p.pod.clone(), t0);
        assert_eq!(q.place("a"), Some(Place::Unschedulable));
        // Nothing happens by itself before the flush interval.
        assert!(q.pop(t0 + Duration::from_secs(30), by_priority).is_none());
        // An event while still backing off: to the backoff queue.
        q.move_pods(t0 + Duration::from_millis(100), |_| true);
        assert_eq!(q.place("a"), Some(Place::Backoff));
        assert!(q
            .pop(t0 + Duration::from_millis(500), by_priority)
            .is_none());
        let p = q.pop(t0 + Duration::from_secs(1), by_priority).unwrap();
        assert_eq!(p.attempts, 2);
        // A move during the attempt: straight to backoff, not the pool.
        q.move_pods(t0 + Duration::from_secs(1), |_| true);
        q.requeue_unschedulable(p.pod.clone(), t0 + Duration::from_secs(1));
        assert_eq!(q.place("a"), Some(Place::Backoff));
        assert!(q.pop(t0 + Duration::from_secs(2), by_priority).is_none());
        assert!(q.pop(t0 + Duration::from_secs(3), by_priority).is_some());
    }

    #[test]
    fn flushed_after_five_minutes_and_gates() {
        let t0 = Instant::now();
        let mut q = q();
        q.upsert(pod("a", 0), false, true, t0);
        let p = q.pop(t0, by_priority).unwrap();
        q.requeue_unschedulable(p.pod.clone(), t0);
        assert!(q.pop(t0 + Duration::from_secs(299), by_priority).is_none());
        assert!(q.pop(t0 + MAX_IN_UNSCHEDULABLE, by_priority).is_some());

        q.upsert(pod("g", 0), true, true, t0);
        assert_eq!(q.place("g"), Some(Place::Unschedulable));
        q.move_pods(t0, |_| true);
        assert!(q.pop(t0 + Duration::from_secs(600), by_priority).is_none());
        // A status-only update keeps it gated; removing the gate lets it in.
        q.upsert(pod("g", 0), true, false, t0);
        q.upsert(pod("g", 0), false, true, t0);
        assert_eq!(q.place("g"), Some(Place::Active));
    }

    #[test]
    fn status_only_updates_do_not_retry() {
        let t0 = Instant::now();
        let mut q = q();
        q.upsert(pod("a", 0), false, true, t0);
        let p = q.pop(t0, by_priority).unwrap();
        q.requeue_unschedulable(p.pod.clone(), t0);
        q.upsert(pod("a", 0), false, false, t0 + Duration::from_secs(5));
        assert_eq!(q.place("a"), Some(Place::Unschedulable));
        q.upsert(pod("a", 0), false, true, t0 + Duration::from_secs(5));
        assert_eq!(q.place("a"), Some(Place::Active));
        q.delete("a");
        assert!(q.is_empty());
    }
}
