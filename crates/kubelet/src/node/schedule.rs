//! A timetable of per-node periodic jobs (lease renewals, status updates):
//! one heap, one task, no timer per node. Initial due times are spread
//! evenly over the interval so N nodes make a steady N/interval request
//! rate instead of bursts.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

/// Which job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Job {
    /// Renew the node's lease.
    Lease,
    /// Compute (and maybe post) the node's status.
    Status,
    /// Register the node (create or reconcile the Node object).
    Register,
}

/// Due jobs by time.
#[derive(Debug, Default)]
pub struct Timetable {
    heap: BinaryHeap<Reverse<(Instant, usize, Job)>>,
}

impl Timetable {
    /// An empty timetable.
    pub fn new() -> Self {
        Self::default()
    }

    /// Schedules `job` for nodes `0..n`, node `i` first due at
    /// `start + interval * i / n`.
    pub fn spread(&mut self, job: Job, n: usize, start: Instant, interval: Duration) {
        for i in 0..n {
            let offset = interval.mul_f64(i as f64 / n.max(1) as f64);
            self.push(start + offset, i, job);
        }
    }

    /// Schedules `job` of node `node` at `at`.
    pub fn push(&mut self, at: Instant, node: usize, job: Job) {
        self.heap.push(Reverse((at, node, job)));
    }

    /// When the earliest job is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((t, _, _))| *t)
    }

    /// Pops a job due at or before `now`: (due time, node, job).
    pub fn pop_due(&mut self, now: Instant) -> Option<(Instant, usize, Job)> {
        match self.heap.peek() {
            Some(Reverse((t, _, _))) if *t <= now => self.heap.pop().map(|Reverse(e)| e),
            _ => None,
        }
    }

    /// Number of scheduled jobs.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// True when nothing is scheduled.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreads_and_pops_in_order() {
        let t0 = Instant::now();
        let mut t = Timetable::new();
        t.spread(Job::Lease, 4, t0, Duration::from_secs(8));
        t.spread(Job::Status, 2, t0, Duration::from_secs(10));
        assert_eq!(t.len(), 6);
        assert_eq!(t.next_due(), Some(t0));
        let mut due = Vec::new();
        while let Some(e) = t.pop_due(t0 + Duration::from_secs(5)) {
            due.push((e.0 - t0, e.1, e.2));
        }
        assert_eq!(
            due,
            vec![
                (Duration::ZERO, 0, Job::Lease),
                (Duration::ZERO, 0, Job::Status),
                (Duration::from_secs(2), 1, Job::Lease),
                (Duration::from_secs(4), 2, Job::Lease),
                (Duration::from_secs(5), 1, Job::Status),
            ]
        );
        assert_eq!(t.next_due(), Some(t0 + Duration::from_secs(6)));
        assert!(t.pop_due(t0 + Duration::from_secs(5)).is_none());
    }
}
