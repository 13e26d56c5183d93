//! Hard thresholds and the pressure they put on a node: `evictionHard`
//! parsed ([`hard_thresholds`]), compared with the observations
//! ([`thresholds_met`], `quantity > available`), the signal to reclaim
//! first ([`to_reclaim`]), and the node conditions with
//! `evictionPressureTransitionPeriod` ([`NodePressure`]) published for the
//! heartbeat ([`PressureBoard`]).
//!
//! Upstream: `pkg/kubelet/eviction/helpers.go` (`parseThresholdConfig`,
//! `thresholdsMet`, `byEvictionPriority`, `nodeConditions`,
//! `nodeConditionsLastObservedAt`, `nodeConditionsObservedSince`) and the
//! condition bookkeeping of `eviction_manager.go`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::signals::{Condition, Observations, Resource, Signal};
use crate::config::{parse_threshold, Threshold};
use crate::node::pressure::Pressure;

/// One `evictionHard` entry.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HardThreshold {
    /// The signal.
    pub signal: Signal,
    /// Eviction when available < this.
    pub value: Threshold,
}

/// The thresholds of `evictionHard` (validated by [`crate::config`]).
pub fn hard_thresholds(eviction_hard: &BTreeMap<String, String>) -> Vec<HardThreshold> {
    eviction_hard
        .iter()
        .filter_map(|(k, v)| {
            Some(HardThreshold {
                signal: Signal::parse(k)?,
                value: parse_threshold(v)?,
            })
        })
        .collect()
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
}

/// The thresholds met by `obs` (upstream's `thresholdsMet`; a signal not
/// observed is never met).
pub fn thresholds_met(thresholds: &[HardThreshold], obs: &Observations) -> Vec<Met> {
    thresholds
        .iter()
        .filter_map(|t| {
            let o = obs.get(&t.signal)?;
            let quantity = t.value.amount(o.capacity);
            (quantity > o.available).then_some(Met {
                signal: t.signal,
                quantity,
                available: o.available,
            })
        })
        .collect()
}

/// The met threshold to reclaim first: memory before every other
/// resource (upstream's `byEvictionPriority`), else the first by signal.
pub fn to_reclaim(met: &[Met]) -> Option<Met> {
    met.iter()
        .copied()
        .min_by_key(|m| (m.signal.resource() != Resource::Memory, m.signal))
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

    fn th(map: &[(&str, &str)]) -> Vec<HardThreshold> {
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
