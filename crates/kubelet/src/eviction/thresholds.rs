//! Thresholds and the pressure they put on a node: `evictionHard`,
//! `evictionSoft` with `evictionSoftGracePeriod` and
//! `evictionMinimumReclaim` parsed ([`all_thresholds`]), compared with the
//! observations ([`thresholds_met`], `quantity > available`), tracked
//! across rounds (a soft threshold acts once met for its grace period; a
//! threshold acted on stays met until its minimum reclaim is free:
//! [`ThresholdState`]), the signal to reclaim first ([`to_reclaim`]), and
//! the node conditions with
//! `evictionPressureTransitionPeriod` ([`NodePressure`]) published for the
//! heartbeat ([`PressureBoard`]).
//!
//! Upstream: `pkg/kubelet/eviction/helpers.go` (`parseThresholdConfig`,
//! `thresholdsMet`, `thresholdsFirstObservedAt`, `thresholdsMetGracePeriod`,
//! `mergeThresholds`, `byEvictionPriority`, `nodeConditions`,
//! `nodeConditionsLastObservedAt`, `nodeConditionsObservedSince`) and the
//! condition bookkeeping of `eviction_manager.go`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::signals::{Condition, Observations, Resource, Signal};
use crate::config::{parse_min_reclaim, parse_threshold, KubeletConfiguration, Threshold};
use crate::node::pressure::Pressure;

/// One threshold of `evictionHard` or `evictionSoft`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EvictionThreshold {
    /// The signal.
    pub signal: Signal,
    /// Eviction when available < this.
    pub value: Threshold,
    /// How long it must be met before pods are evicted (0 for hard ones).
    pub grace: Duration,
    /// `evictionMinimumReclaim`: once met, it counts as met until this much
    /// more than the threshold is available.
    pub min_reclaim: Option<Threshold>,
    /// From `evictionHard` (pods get 1 s to stop), else `evictionSoft`.
    pub hard: bool,
}

/// The thresholds of `evictionHard` (validated by [`crate::config`]).
pub fn hard_thresholds(eviction_hard: &BTreeMap<String, String>) -> Vec<EvictionThreshold> {
    eviction_hard
        .iter()
        .filter_map(|(k, v)| {
            Some(EvictionThreshold {
                signal: Signal::parse(k)?,
                value: parse_threshold(v)?,
                grace: Duration::ZERO,
                min_reclaim: None,
                hard: true,
            })
        })
        .collect()
}

/// Every threshold of the configuration (upstream's
/// `ParseThresholdConfig`): the hard ones, the soft ones with their grace
/// periods, each with its minimum reclaim.
pub fn all_thresholds(c: &KubeletConfiguration) -> Vec<EvictionThreshold> {
    let mut out = hard_thresholds(&c.eviction_hard);
    for (k, v) in &c.eviction_soft {
        let (Some(signal), Some(value)) = (Signal::parse(k), parse_threshold(v)) else {
            continue;
        };
        let grace = c
            .eviction_soft_grace_period
            .get(k)
            .and_then(|g| rkube_util::duration::parse(g).ok())
            .unwrap_or_default();
        out.push(EvictionThreshold {
            signal,
            value,
            grace,
            min_reclaim: None,
            hard: false,
        });
    }
    for t in &mut out {
        t.min_reclaim = c
            .eviction_minimum_reclaim
            .get(t.signal.name())
            .and_then(|v| parse_min_reclaim(v));
    }
    // Node allocatable enforced on the pods: each hard memory.available
    // threshold also holds for the pods' cgroup (upstream's
    // `addAllocatableThresholds`).
    if c.enforce_node_allocatable.iter().any(|e| e == "pods") {
        let copies: Vec<EvictionThreshold> = out
            .iter()
            .filter(|t| t.signal == Signal::MemoryAvailable && t.hard)
            .map(|t| EvictionThreshold {
                signal: Signal::AllocatableMemoryAvailable,
                ..*t
            })
            .collect();
        out.extend(copies);
    }
    out
}

/// A threshold met: `quantity > available`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Met {
    /// The signal.
    pub signal: Signal,
    /// The threshold's quantity for the observed capacity.
    pub quantity: i64,
    /// What was available.
    pub available: i64,
    /// Which threshold (its index in the list).
    pub index: usize,
    /// A hard threshold.
    pub hard: bool,
}

/// The thresholds met by `obs` (upstream's `thresholdsMet`; a signal not
/// observed is never met); with `enforce_min_reclaim`, a threshold with a
/// minimum reclaim is compared with its quantity plus that.
pub fn thresholds_met_with(
    thresholds: &[EvictionThreshold],
    obs: &Observations,
    enforce_min_reclaim: bool,
) -> Vec<Met> {
    thresholds
        .iter()
        .enumerate()
        .filter_map(|(index, t)| {
            let o = obs.get(&t.signal)?;
            let quantity = t.value.amount(o.capacity);
            let extra = match (enforce_min_reclaim, t.min_reclaim) {
                (true, Some(m)) => m.amount(o.capacity),
                _ => 0,
            };
            (quantity.saturating_add(extra) > o.available).then_some(Met {
                signal: t.signal,
                quantity,
                available: o.available,
                index,
                hard: t.hard,
            })
        })
        .collect()
}

/// [`thresholds_met_with`] without minimum reclaims.
pub fn thresholds_met(thresholds: &[EvictionThreshold], obs: &Observations) -> Vec<Met> {
    thresholds_met_with(thresholds, obs, false)
}

/// A node's threshold bookkeeping across rounds: when each threshold was
/// first met, and which were met for their grace period last round (those
/// stay met until their minimum reclaim is free).
#[derive(Debug, Clone, Default)]
pub struct ThresholdState {
    first_observed: BTreeMap<usize, Instant>,
    met_last: Vec<usize>,
}

/// One round's verdict.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Round {
    /// Every threshold met (grace periods ignored): the node conditions.
    pub met: Vec<Met>,
    /// Those met for their grace period: what eviction acts on.
    pub actionable: Vec<Met>,
}

impl ThresholdState {
    /// Upstream's `synchronize` bookkeeping for the observations `obs` at
    /// `now`.
    pub fn round(
        &mut self,
        thresholds: &[EvictionThreshold],
        obs: &Observations,
        now: Instant,
    ) -> Round {
        let mut met = thresholds_met_with(thresholds, obs, false);
        if !self.met_last.is_empty() {
            let last: Vec<EvictionThreshold> = self
                .met_last
                .iter()
                .filter_map(|i| thresholds.get(*i).copied())
                .collect();
            for mut m in thresholds_met_with(&last, obs, true) {
                m.index = self.met_last[m.index];
                if !met.iter().any(|x| x.index == m.index) {
                    met.push(m);
                }
            }
        }
        let first: BTreeMap<usize, Instant> = met
            .iter()
            .map(|m| {
                (
                    m.index,
                    self.first_observed.get(&m.index).copied().unwrap_or(now),
                )
            })
            .collect();
        let actionable: Vec<Met> = met
            .iter()
            .copied()
            .filter(|m| {
                let since = now.saturating_duration_since(first[&m.index]);
                since >= thresholds[m.index].grace
            })
            .collect();
        self.first_observed = first;
        self.met_last = actionable.iter().map(|m| m.index).collect();
        Round { met, actionable }
    }
}

/// The met threshold to reclaim first: memory before every other
/// resource (upstream's `byEvictionPriority`), else the first by signal;
/// of two thresholds of one signal, the hard one.
pub fn to_reclaim(met: &[Met]) -> Option<Met> {
    met.iter()
        .copied()
        .min_by_key(|m| (m.signal.resource() != Resource::Memory, m.signal, !m.hard))
}

/// Per-node condition bookkeeping: when each condition was last observed.
#[derive(Debug, Clone, Default)]
pub struct NodePressure {
    last_observed: BTreeMap<Condition, Instant>,
}

impl NodePressure {
    /// Records the thresholds met at `now` and returns the conditions to
    /// report: those observed less than `transition` ago (upstream's
    /// `nodeConditionsObservedSince`), so a condition clears only after
    /// the signal has stayed good for the whole transition period.
    pub fn update(&mut self, met: &[Met], transition: Duration, now: Instant) -> Pressure {
        for m in met {
            self.last_observed.insert(m.signal.condition(), now);
        }
        let on = |c: Condition| {
            self.last_observed
                .get(&c)
                .is_some_and(|at| now.saturating_duration_since(*at) < transition)
        };
        Pressure {
            memory: on(Condition::Memory),
            disk: on(Condition::Disk),
            pid: on(Condition::Pid),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction::signals::Observation;

    fn th(map: &[(&str, &str)]) -> Vec<EvictionThreshold> {
        hard_thresholds(
            &map.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    fn obs(list: &[(Signal, i64, i64)]) -> Observations {
        list.iter()
            .map(|(s, a, c)| {
                (
                    *s,
                    Observation {
                        available: *a,
                        capacity: *c,
                    },
                )
            })
            .collect()
    }

    const MI: i64 = 1 << 20;
    const GI: i64 = 1 << 30;

    #[test]
    fn thresholds_parse_and_compare() {
        let t = th(&[
            ("memory.available", "100Mi"),
            ("nodefs.available", "10%"),
            ("pid.available", "1000"),
            ("imagefs.available", "15%"),
        ]);
        assert_eq!(t.len(), 4);
        // Defaults parse too.
        assert_eq!(
            hard_thresholds(&crate::config::default_eviction_hard()).len(),
            5
        );
        // Nothing observed: nothing met.
        assert!(thresholds_met(&t, &Observations::new()).is_empty());
        // Exactly at the threshold is not met (quantity > available).
        let o = obs(&[(Signal::MemoryAvailable, 100 * MI, 8 * GI)]);
        assert!(thresholds_met(&t, &o).is_empty());
        let o = obs(&[
            (Signal::MemoryAvailable, 100 * MI - 1, 8 * GI),
            // 10% of 100Gi = 10Gi > 9Gi: met.
            (Signal::NodeFsAvailable, 9 * GI, 100 * GI),
            // 15% of 100Gi = 15Gi ≤ 20Gi: not met.
            (Signal::ImageFsAvailable, 20 * GI, 100 * GI),
            (Signal::PidAvailable, 999, 4_194_304),
        ]);
        let met = thresholds_met(&t, &o);
        let signals: Vec<Signal> = met.iter().map(|m| m.signal).collect();
        assert_eq!(
            signals,
            [
                Signal::MemoryAvailable,
                Signal::NodeFsAvailable,
                Signal::PidAvailable
            ]
        );
        let nodefs = met
            .iter()
            .find(|m| m.signal == Signal::NodeFsAvailable)
            .unwrap();
        assert_eq!(nodefs.quantity, 10 * GI);
        // Memory is reclaimed first, whatever the order.
        assert_eq!(to_reclaim(&met).unwrap().signal, Signal::MemoryAvailable);
        assert_eq!(
            to_reclaim(&met[1..]).unwrap().signal,
            Signal::NodeFsAvailable
        );
        assert_eq!(to_reclaim(&[]), None);
        assert_eq!(Signal::PidAvailable.condition(), Condition::Pid);
        assert_eq!(Signal::ImageFsInodesFree.condition(), Condition::Disk);
        for s in Signal::ALL {
            assert_eq!(Signal::parse(s.name()), Some(s));
            assert!(crate::config::EVICTION_SIGNALS.contains(&s.name()));
        }
    }

    fn config(body: &str) -> KubeletConfiguration {
        crate::config::load_str(
            "k.yaml",
            &format!(
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n{body}"
            ),
        )
        .unwrap()
        .config
    }

    #[test]
    fn soft_thresholds_act_after_their_grace_period() {
        let c = config(
            "evictionHard: {memory.available: 100Mi}\n\
             evictionSoft: {memory.available: 500Mi, nodefs.available: 20%}\n\
             evictionSoftGracePeriod: {memory.available: 30s, nodefs.available: 1m30s}\n",
        );
        let t = all_thresholds(&c);
        // (the hard memory threshold also for the pods' cgroup)
        assert_eq!(t.len(), 4);
        let soft_mem = t
            .iter()
            .find(|x| !x.hard && x.signal == Signal::MemoryAvailable)
            .unwrap();
        assert_eq!(soft_mem.grace, Duration::from_secs(30));
        let t0 = Instant::now();
        let s = |secs| t0 + Duration::from_secs(secs);
        let mut st = ThresholdState::default();
        let low = obs(&[(Signal::MemoryAvailable, 300 * MI, GI)]);
        // Met at once (the node condition), not yet actionable.
        let r = st.round(&t, &low, s(0));
        assert_eq!(r.met.len(), 1);
        assert!(r.actionable.is_empty());
        assert!(st.round(&t, &low, s(29)).actionable.is_empty());
        let r = st.round(&t, &low, s(30));
        assert_eq!(r.actionable.len(), 1);
        assert!(!r.actionable[0].hard);
        // Resolved: the clock restarts.
        let ok = obs(&[(Signal::MemoryAvailable, 900 * MI, GI)]);
        assert!(st.round(&t, &ok, s(40)).met.is_empty());
        assert!(st.round(&t, &low, s(50)).actionable.is_empty());
        // Below the hard threshold: both met; the hard one acts at once and
        // is the one reclaimed.
        let mut st = ThresholdState::default();
        let very_low = obs(&[(Signal::MemoryAvailable, 50 * MI, GI)]);
        let r = st.round(&t, &very_low, s(0));
        assert_eq!(r.met.len(), 2);
        assert_eq!(r.actionable.len(), 1);
        assert!(to_reclaim(&r.met).unwrap().hard);
    }

    #[test]
    fn hard_memory_thresholds_also_hold_for_the_pods_cgroup() {
        // Upstream's addAllocatableThresholds: with enforceNodeAllocatable
        // [pods] (the default) each hard memory.available threshold gets a
        // copy for allocatableMemory.available, its minimum reclaim with
        // it; soft ones do not.
        let c = config(
            "evictionHard: {memory.available: 150Mi, nodefs.available: 10%}\n\
             evictionSoft: {memory.available: 300Mi}\n\
             evictionSoftGracePeriod: {memory.available: 30s}\n\
             evictionMinimumReclaim: {memory.available: 0.5Gi}\n",
        );
        let t = all_thresholds(&c);
        let alloc: Vec<_> = t
            .iter()
            .filter(|x| x.signal == Signal::AllocatableMemoryAvailable)
            .collect();
        assert_eq!(alloc.len(), 1, "{t:?}");
        let hard = t
            .iter()
            .find(|x| x.signal == Signal::MemoryAvailable && x.hard)
            .unwrap();
        assert_eq!(
            (alloc[0].value, alloc[0].min_reclaim, alloc[0].hard),
            (hard.value, hard.min_reclaim, true)
        );
        assert!(alloc[0].min_reclaim.is_some());
        // The pods' cgroup short of memory: memory pressure, evicting.
        let mut st = ThresholdState::default();
        let o = obs(&[
            (Signal::MemoryAvailable, 900 * MI, GI),
            (Signal::AllocatableMemoryAvailable, 100 * MI, GI),
        ]);
        let r = st.round(&t, &o, Instant::now());
        assert_eq!(r.actionable.len(), 1);
        assert_eq!(r.actionable[0].signal, Signal::AllocatableMemoryAvailable);
        assert_eq!(
            to_reclaim(&r.met).unwrap().signal.condition(),
            Condition::Memory
        );
        // Not enforced on the pods: no copy.
        let none =
            config("evictionHard: {memory.available: 150Mi}\nenforceNodeAllocatable: [none]\n");
        assert!(all_thresholds(&none)
            .iter()
            .all(|x| x.signal != Signal::AllocatableMemoryAvailable));
    }

    #[test]
    fn minimum_reclaim_keeps_a_threshold_met_until_freed() {
        // Upstream's TestMinReclaim: 1Gi hard with 500Mi minimum reclaim.
        let c = config(
            "evictionHard: {memory.available: 1Gi}\nevictionMinimumReclaim: {memory.available: 500Mi}\n",
        );
        let t = all_thresholds(&c);
        assert_eq!(t[0].min_reclaim, Some(Threshold::Quantity(500 * MI)));
        let mut st = ThresholdState::default();
        let now = Instant::now();
        assert_eq!(
            st.round(
                &t,
                &obs(&[(Signal::MemoryAvailable, 500 * MI, 2 * GI)]),
                now
            )
            .actionable
            .len(),
            1
        );
        // Above the threshold but below threshold + reclaim: still met.
        let r = st.round(
            &t,
            &obs(&[(Signal::MemoryAvailable, 1200 * MI, 2 * GI)]),
            now,
        );
        assert_eq!(r.actionable.len(), 1);
        assert_eq!(
            r.actionable[0].quantity, GI,
            "the message names the threshold itself"
        );
        // Threshold + reclaim free: resolved.
        assert!(st
            .round(
                &t,
                &obs(&[(Signal::MemoryAvailable, 1600 * MI, 2 * GI)]),
                now
            )
            .met
            .is_empty());
        // Never acted on: the minimum reclaim does not apply.
        let mut fresh = ThresholdState::default();
        assert!(fresh
            .round(
                &t,
                &obs(&[(Signal::MemoryAvailable, 1200 * MI, 2 * GI)]),
                now
            )
            .met
            .is_empty());
    }

    #[test]
    fn condition_transitions_honour_the_period() {
        let t = th(&[("memory.available", "100Mi")]);
        let period = Duration::from_secs(30);
        let t0 = Instant::now();
        let mut p = NodePressure::default();
        let low = obs(&[(Signal::MemoryAvailable, 50 * MI, GI)]);
        let high = obs(&[(Signal::MemoryAvailable, 500 * MI, GI)]);
        assert_eq!(
            p.update(&thresholds_met(&t, &high), period, t0),
            Pressure::default()
        );
        let on = p.update(
            &thresholds_met(&t, &low),
            period,
            t0 + Duration::from_secs(10),
        );
        assert!(on.memory && !on.disk && !on.pid);
        // Good again, but within the period: still True.
        let s = |secs| t0 + Duration::from_secs(secs);
        assert!(p.update(&thresholds_met(&t, &high), period, s(20)).memory);
        assert!(p.update(&thresholds_met(&t, &high), period, s(39)).memory);
        // The period since the last time it was met has passed: False.
        assert!(!p.update(&thresholds_met(&t, &high), period, s(40)).memory);
        // Met again: True at once, and the period restarts.
        assert!(p.update(&thresholds_met(&t, &low), period, s(50)).memory);
        assert!(p.update(&thresholds_met(&t, &high), period, s(79)).memory);
        assert!(!p.update(&thresholds_met(&t, &high), period, s(80)).memory);
        // Disk and PID signals drive their own conditions.
        let t = th(&[("nodefs.available", "1Gi"), ("pid.available", "100")]);
        let o = obs(&[
            (Signal::NodeFsAvailable, MI, 10 * GI),
            (Signal::PidAvailable, 50, 1000),
        ]);
        let d = NodePressure::default().update(&thresholds_met(&t, &o), period, t0);
        assert_eq!(
            d,
            Pressure {
                memory: false,
                disk: true,
                pid: true
            }
        );
    }
}
