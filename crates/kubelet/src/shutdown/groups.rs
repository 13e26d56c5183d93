//! Which pods go first at a node shutdown, and for how long: upstream's
//! `migrateConfig`, `groupByPriority` and `periodRequested`
//! (`pkg/kubelet/nodeshutdown/nodeshutdown_manager.go`). Pure.

use std::time::Duration;

use crate::config::ShutdownGracePeriodByPodPriority as Period;

/// Upstream's `DefaultPriorityWhenNoDefaultClassExists`.
pub const DEFAULT_PRIORITY: i32 = 0;
/// Upstream's `SystemCriticalPriority` (2 × 10⁹).
pub const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;

/// `shutdownGracePeriod` and `shutdownGracePeriodCriticalPods` as two
/// classes: ordinary pods get the difference, critical ones the rest;
/// nothing when the period is zero or shorter than the critical part.
pub fn migrate_config(period: Duration, critical: Duration) -> Vec<Period> {
    if period.is_zero() {
        return Vec::new();
    }
    let Some(ordinary) = period.checked_sub(critical) else {
        return Vec::new();
    };
    let critical = period - ordinary;
    vec![
        Period {
            priority: DEFAULT_PRIORITY,
            shutdown_grace_period_seconds: ordinary.as_secs() as i64,
        },
        Period {
            priority: SYSTEM_CRITICAL_PRIORITY,
            shutdown_grace_period_seconds: critical.as_secs() as i64,
        },
    ]
}

/// The classes in force, sorted by priority (lowest first): the
/// configured `shutdownGracePeriodByPodPriority`, else the two of
/// [`migrate_config`]. Empty: no graceful node shutdown.
pub fn classes(
    by_priority: &[Period],
    period: Duration,
    critical: Duration,
    by_priority_gate: bool,
) -> Vec<Period> {
    let mut v = if by_priority_gate && !by_priority.is_empty() {
        by_priority.to_vec()
    } else {
        migrate_config(period, critical)
    };
    v.sort_by_key(|p| p.priority);
    v
}

/// How long logind must delay the shutdown: the sum of the classes'
/// periods.
pub fn period_requested(classes: &[Period]) -> Duration {
    Duration::from_secs(
        classes
            .iter()
            .map(|p| p.shutdown_grace_period_seconds.max(0) as u64)
            .fold(0u64, u64::saturating_add),
    )
}

/// Puts each pod (by its priority) in its class: the highest class whose
/// priority is at most the pod's, the lowest class for pods below all.
/// Returns, per class in order, the indexes of its pods.
pub fn group_by_priority(classes: &[Period], priorities: &[i32]) -> Vec<Vec<usize>> {
    let mut groups = vec![Vec::new(); classes.len()];
    if classes.is_empty() {
        return groups;
    }
    for (i, &p) in priorities.iter().enumerate() {
        // The first class with priority >= the pod's, as upstream's
        // sort.Search; one down when it is above the pod's.
        let mut index = classes.partition_point(|c| c.priority < p);
        if index == classes.len() {
            index = classes.len() - 1;
        } else if index > 0 && classes[index].priority > p {
            index -= 1;
        }
        groups[index].push(i);
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    fn period(priority: i32, secs: i64) -> Period {
        Period {
            priority,
            shutdown_grace_period_seconds: secs,
        }
    }

    #[test]
    fn migrate_config_as_upstream() {
        // Upstream's Test_migrateConfig.
        let s = Duration::from_secs;
        assert_eq!(
            migrate_config(s(300), s(120)),
            vec![period(0, 180), period(SYSTEM_CRITICAL_PRIORITY, 120)]
        );
        assert_eq!(
            migrate_config(s(100), s(0)),
            vec![period(0, 100), period(SYSTEM_CRITICAL_PRIORITY, 0)]
        );
        assert_eq!(migrate_config(s(0), s(0)), vec![]);
        assert_eq!(migrate_config(s(1), s(100)), vec![]);
        assert_eq!(period_requested(&migrate_config(s(300), s(120))), s(300));
    }

    #[test]
    fn group_by_priority_as_upstream() {
        // Upstream's Test_groupByPriority, "migrate config": a normal pod
        // and one of the highest user-definable priority (10⁹) share the
        // first class; the system-critical one has the second.
        let classes = migrate_config(Duration::from_secs(300), Duration::from_secs(120));
        assert_eq!(
            group_by_priority(&classes, &[0, 1_000_000_000, SYSTEM_CRITICAL_PRIORITY]),
            vec![vec![0, 1], vec![2]]
        );
        // "pod priority": pods 0..=5 over classes 1..=4.
        let classes = [period(1, 10), period(2, 20), period(3, 30), period(4, 40)];
        assert_eq!(
            group_by_priority(&classes, &[0, 1, 2, 3, 4, 5]),
            vec![vec![0, 1], vec![2], vec![3], vec![4, 5]]
        );
        // Between two classes: the lower one.
        let classes = [period(0, 10), period(100, 20)];
        assert_eq!(
            group_by_priority(&classes, &[50, -5, 100]),
            vec![vec![0, 1], vec![2]]
        );
        assert_eq!(group_by_priority(&[], &[1]), Vec::<Vec<usize>>::new());
    }

    #[test]
    fn classes_sorted_and_chosen_as_upstream() {
        let by = [period(100, 5), period(0, 10)];
        let s = Duration::from_secs;
        assert_eq!(
            classes(&by, s(0), s(0), true),
            vec![period(0, 10), period(100, 5)]
        );
        // Gate off: the two-class migration of the plain settings.
        assert_eq!(classes(&by, s(30), s(10), false).len(), 2);
        assert!(classes(&[], s(0), s(0), true).is_empty());
        assert_eq!(period_requested(&[period(0, -5), period(1, 7)]), s(7));
    }
}
