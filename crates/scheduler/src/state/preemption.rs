//! Asynchronous preemptions in progress (upstream's preemption `Executor`
//! bookkeeping with `SchedulerAsyncPreemption`, beta and on by default):
//! which preemptors are still deleting their victims, and for each the
//! last victim once its deletion has begun.
//!
//! A preemption runs from the failed cycle that chose its victims until
//! the task deleting them returns. Once the last victim is registered, it
//! is over as soon as that victim is gone or has a `deletionTimestamp`,
//! even before the task returns — so a pod whose victims' deletions have
//! already reached the informer is never held back. The queue's gate
//! ([`crate::queue::Queue::set_running_preemption`]) follows this state
//! eagerly: every change here that can end a preemption updates it.

use std::collections::HashMap;

use super::State;

/// Preemptor UID → the last victim's UID, once registered.
#[derive(Debug, Default)]
pub(crate) struct Preemptions {
    running: HashMap<String, Option<String>>,
}

impl State {
    /// A preemption for the pod `preemptor` starts (synchronously, before
    /// the pod goes back to the queue, as upstream's PostFilter).
    pub fn preemption_started(&mut self, preemptor: &str) {
        self.preemptions.running.insert(preemptor.to_string(), None);
        self.queue.set_running_preemption(preemptor, true);
    }

    /// The deletion of the last victim `victim` begins.
    pub fn preemption_last_victim(&mut self, preemptor: &str, victim: &str) {
        let Some(last) = self.preemptions.running.get_mut(preemptor) else {
            return;
        };
        *last = Some(victim.to_string());
        if !self.victim_pending(victim) {
            self.queue.set_running_preemption(preemptor, false);
        }
    }

    /// The task preempting for `preemptor` returned.
    pub fn preemption_finished(&mut self, preemptor: &str) {
        self.preemptions.running.remove(preemptor);
        self.queue.set_running_preemption(preemptor, false);
    }

    /// Whether the pod `preemptor`'s preemption still holds it back
    /// (upstream's `IsPodRunningPreemption`).
    pub fn is_running_preemption(&self, preemptor: &str) -> bool {
        match self.preemptions.running.get(preemptor) {
            None => false,
            Some(None) => true,
            Some(Some(victim)) => self.victim_pending(victim),
        }
    }

    /// A victim still exists without a `deletionTimestamp`.
    fn victim_pending(&self, victim: &str) -> bool {
        self.pods
            .get(victim)
            .is_some_and(|e| e.raw.metadata.deletion_timestamp.is_none())
    }

    /// The informer changed or removed the pod `uid`: a preemption whose
    /// last victim it is may be over.
    pub(super) fn victim_changed(&mut self, uid: &str) {
        if self.preemptions.running.is_empty() || self.victim_pending(uid) {
            return;
        }
        let done: Vec<String> = self
            .preemptions
            .running
            .iter()
            .filter(|(_, last)| last.as_deref() == Some(uid))
            .map(|(p, _)| p.clone())
            .collect();
        for p in done {
            self.queue.set_running_preemption(&p, false);
        }
    }
}
