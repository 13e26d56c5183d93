//! PodDisruptionBudgets as the Eviction API checks them during a drain.
//!
//! Which budgets cover a pod is the API's rule (`getPodDisruptionBudgets`):
//! same namespace, and a selector that is set, non-empty and matches the
//! pod's labels. How many disruptions a budget allows:
//!
//! - with `status.disruptionsAllowed` in the cluster file, that number, moved
//!   by what the drain changes: one less per covered pod that leaves
//!   (eviction, preemption), one more per covered replacement that is
//!   placed (it becomes healthy), never below zero;
//! - without a status, as the disruption controller computes it:
//!   `currentHealthy − desiredHealthy` (0 when negative or when no pod is
//!   expected), with `expectedPods` the pods the selector matches
//!   (upstream sums the controllers' scales for `maxUnavailable` and
//!   percentages — the same number when every replica exists) and
//!   percentages rounded up as `GetScaledValueFromIntOrPercent(…, true)`
//!   does. A budget with neither `minAvailable` nor `maxUnavailable`
//!   expects no pod and so allows nothing, as in the controller.
//!
//! Simplifications: every pod bound to a node counts as healthy (Running and
//! Ready) unless it is being deleted; `status.disruptedPods` is not
//! subtracted again (the controller already did when it wrote the status).

use std::collections::HashMap;

use rkube_model::workloads::PodDisruptionBudget;
use rkube_model::Pod;

/// The Eviction API's 429 message.
pub const VIOLATES_BUDGET: &str =
    "Cannot evict pod as it would violate the pod's disruption budget.";

/// The Eviction API's 500 message for a pod two or more budgets cover.
pub const MORE_THAN_ONE_BUDGET: &str =
    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.";

/// One budget and the healthy pods it covers now (counts in `i64`: a
/// status from the file may hold any `i32`).
#[derive(Debug, Clone)]
struct Budget {
    pdb: PodDisruptionBudget,
    /// Covered pods that are bound and not being deleted, now.
    healthy: i64,
    /// `healthy` when the drain started.
    healthy_at_start: i64,
    /// `expectedPods` (computed budgets).
    expected: i64,
    /// `desiredHealthy` (computed budgets).
    desired: i64,
}

impl Budget {
    fn disruptions_allowed(&self) -> i64 {
        if self.pdb.status_present {
            let given = i64::from(self.pdb.disruptions_allowed);
            if given < 0 {
                return given;
            }
            return (given + self.healthy - self.healthy_at_start).max(0);
        }
        if self.expected <= 0 {
            return 0;
        }
        (self.healthy - self.desired).max(0)
    }

    fn current_and_desired(&self) -> (i64, i64) {
        if self.pdb.status_present {
            let current =
                i64::from(self.pdb.current_healthy) + self.healthy - self.healthy_at_start;
            (current, i64::from(self.pdb.desired_healthy))
        } else {
            (self.healthy, self.desired)
        }
    }
}

/// The Eviction API's answer for one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The eviction goes through (no budget, or one with room: its
    /// allowance is now one lower).
    Allowed,
    /// 429: the budget allows no disruption now; kubectl retries.
    Blocked {
        /// The budget's name.
        pdb: String,
        /// The status cause: how many healthy pods it needs and has.
        cause: String,
    },
    /// An error kubectl does not retry (500: two or more budgets; 403: a
    /// negative allowance).
    Refused {
        /// The API's message.
        message: String,
        /// The budgets involved.
        pdbs: Vec<String>,
    },
}

/// Every budget that can block an eviction, with its healthy count.
#[derive(Debug, Clone, Default)]
pub struct Budgets {
    budgets: Vec<Budget>,
}

/// Does the Eviction API count this budget for this pod?
fn covers(pdb: &PodDisruptionBudget, pod: &Pod) -> bool {
    pdb.namespace == pod.namespace
        && pdb
            .selector
            .as_ref()
            .is_some_and(|s| !s.is_empty() && s.matches(&pod.labels))
}

fn healthy(pod: &Pod) -> bool {
    !pod.node_name.is_empty() && !pod.terminated && !pod.terminating
}

impl Budgets {
    /// The budgets of `pdbs` that can cover a pod, counted over `pods`
    /// (every pod of the cluster, bound or pending; finished ones are left
    /// out).
    pub fn new<'a>(pdbs: &[PodDisruptionBudget], pods: impl IntoIterator<Item = &'a Pod>) -> Self {
        let mut by_namespace: HashMap<&str, Vec<&Pod>> = HashMap::new();
        for p in pods.into_iter().filter(|p| !p.terminated) {
            by_namespace
                .entry(p.namespace.as_str())
                .or_default()
                .push(p);
        }
        let budgets = pdbs
            .iter()
            .filter(|p| p.selector.as_ref().is_some_and(|s| !s.is_empty()))
            .map(|pdb| {
                let covered: Vec<&Pod> = by_namespace
                    .get(pdb.namespace.as_str())
                    .into_iter()
                    .flatten()
                    .copied()
                    .filter(|p| covers(pdb, p))
                    .collect();
                let expected = covered.len() as i64;
                let healthy = covered.iter().filter(|p| healthy(p)).count() as i64;
                let specified = pdb.min_available.is_some() || pdb.max_unavailable.is_some();
                Budget {
                    desired: desired_healthy(pdb, expected),
                    // Neither field: the controller expects no pod.
                    expected: if specified { expected } else { 0 },
                    healthy,
                    healthy_at_start: healthy,
                    pdb: pdb.clone(),
                }
            })
            .collect();
        Budgets { budgets }
    }

    fn covering(&self, pod: &Pod) -> Vec<usize> {
        self.budgets
            .iter()
            .enumerate()
            .filter(|(_, b)| covers(&b.pdb, pod))
            .map(|(i, _)| i)
            .collect()
    }

    /// Asks the Eviction API to evict a running pod: the verdict of
    /// `checkAndDecrement`. An allowed eviction is not counted here; the
    /// caller reports the pod gone with [`Budgets::left`].
    pub fn check(&self, pod: &Pod) -> Verdict {
        let covering = self.covering(pod);
        let names = || -> Vec<String> {
            covering
                .iter()
                .map(|&i| self.budgets[i].pdb.name.clone())
                .collect()
        };
        let [only] = covering.as_slice() else {
            if covering.is_empty() {
                return Verdict::Allowed;
            }
            return Verdict::Refused {
                message: MORE_THAN_ONE_BUDGET.into(),
                pdbs: names(),
            };
        };
        let b = &self.budgets[*only];
        match b.disruptions_allowed() {
            n if n < 0 => Verdict::Refused {
                message: format!(
                    "poddisruptionbudget.policy {:?} is forbidden: pdb disruptions allowed is negative",
                    b.pdb.name
                ),
                pdbs: names(),
            },
            0 => {
                let (current, desired) = b.current_and_desired();
                Verdict::Blocked {
                    pdb: b.pdb.name.clone(),
                    cause: format!(
                        "The disruption budget {} needs {desired} healthy pods and has {current} currently",
                        b.pdb.name
                    ),
                }
            }
            _ => Verdict::Allowed,
        }
    }

    /// A covered pod stopped being healthy (evicted, preempted).
    pub fn left(&mut self, pod: &Pod) {
        self.adjust(pod, -1);
    }

    /// A covered pod became healthy (a replacement was placed).
    pub fn arrived(&mut self, pod: &Pod) {
        self.adjust(pod, 1);
    }

    fn adjust(&mut self, pod: &Pod, by: i64) {
        for i in self.covering(pod) {
            self.budgets[i].healthy += by;
        }
    }
}

/// `desiredHealthy` as the disruption controller's `getExpectedPodCount`
/// computes it, with `expected` pods.
fn desired_healthy(pdb: &PodDisruptionBudget, expected: i64) -> i64 {
    let total = i32::try_from(expected).unwrap_or(i32::MAX);
    if let Some(max) = pdb.max_unavailable {
        return (expected - i64::from(max.scaled(total, true))).max(0);
    }
    pdb.min_available
        .map_or(0, |min| i64::from(min.scaled(total, true)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rkube_model::selector::{LabelSelector, Labels, Operator, Requirement};
    use rkube_model::workloads::IntOrPercent;

    fn pod(name: &str, app: &str, node: &str) -> Pod {
        Pod {
            namespace: "d".into(),
            name: name.into(),
            labels: Labels::from([("app".to_string(), app.to_string())]),
            node_name: node.into(),
            ..Default::default()
        }
    }

    fn pdb(name: &str, app: &str) -> PodDisruptionBudget {
        PodDisruptionBudget {
            namespace: "d".into(),
            name: name.into(),
            selector: Some(LabelSelector {
                requirements: vec![Requirement {
                    key: "app".into(),
                    op: Operator::In,
                    values: vec![app.into()],
                }],
            }),
            ..Default::default()
        }
    }

    fn allowed(b: &Budgets) -> i64 {
        b.budgets[0].disruptions_allowed()
    }

    #[test]
    fn computed_budgets_follow_the_disruption_controller() {
        let pods = [
            pod("a", "web", "n1"),
            pod("b", "web", "n1"),
            pod("c", "web", "n2"),
            pod("d", "web", ""),
        ];
        let cases = [
            // (minAvailable, maxUnavailable, expected disruptionsAllowed)
            (None, Some(IntOrPercent::Int(1)), 0), // 4 expected, 3 desired, 3 healthy
            (None, Some(IntOrPercent::Int(2)), 1),
            (None, Some(IntOrPercent::Percent(50)), 1), // 50% of 4 = 2 → desired 2
            (None, Some(IntOrPercent::Percent(30)), 1), // 1.2 rounds up to 2 → desired 2
            (Some(IntOrPercent::Int(1)), None, 2),
            (Some(IntOrPercent::Percent(30)), None, 1), // 1.2 rounds up to 2
            (None, None, 0),                            // nothing expected: nothing allowed
            (None, Some(IntOrPercent::Int(0)), 0),
        ];
        for (i, (min, max, want)) in cases.into_iter().enumerate() {
            let mut p = pdb("web", "web");
            p.min_available = min;
            p.max_unavailable = max;
            let b = Budgets::new(&[p], pods.iter());
            assert_eq!(allowed(&b), want, "case {i}: {min:?} {max:?}");
        }
    }

    #[test]
    fn evictions_and_arrivals_move_the_allowance() {
        let pods = [
            pod("a", "web", "n1"),
            pod("b", "web", "n1"),
            pod("c", "web", "n1"),
        ];
        let mut p = pdb("web", "web");
        p.max_unavailable = Some(IntOrPercent::Int(1));
        let mut b = Budgets::new(&[p], pods.iter());
        assert_eq!(b.check(&pods[0]), Verdict::Allowed);
        b.left(&pods[0]);
        assert_eq!(
            b.check(&pods[1]),
            Verdict::Blocked {
                pdb: "web".into(),
                cause: "The disruption budget web needs 2 healthy pods and has 2 currently".into()
            }
        );
        b.arrived(&pod("a2", "web", "n2"));
        assert_eq!(b.check(&pods[1]), Verdict::Allowed);
    }

    #[test]
    fn a_given_status_is_the_starting_point() {
        let pods = [pod("a", "web", "n1"), pod("b", "web", "n1")];
        let mut p = pdb("web", "web");
        p.min_available = Some(IntOrPercent::Int(0));
        p.status_present = true;
        p.disruptions_allowed = 0;
        p.current_healthy = 2;
        p.desired_healthy = 2;
        let mut b = Budgets::new(&[p.clone()], pods.iter());
        assert!(matches!(b.check(&pods[0]), Verdict::Blocked { .. }));
        b.arrived(&pod("c", "web", "n2"));
        assert_eq!(b.check(&pods[0]), Verdict::Allowed);
        // Any i32 from the file: no overflow when replacements arrive.
        p.disruptions_allowed = i32::MAX;
        p.current_healthy = i32::MAX;
        let mut b = Budgets::new(&[p.clone()], pods.iter());
        b.arrived(&pod("d", "web", "n2"));
        assert_eq!(b.check(&pods[0]), Verdict::Allowed);
        p.disruptions_allowed = -1;
        let b = Budgets::new(&[p], pods.iter());
        let Verdict::Refused { message, .. } = b.check(&pods[0]) else {
            panic!("negative allowance must be refused");
        };
        assert_eq!(
            message,
            "poddisruptionbudget.policy \"web\" is forbidden: pdb disruptions allowed is negative"
        );
    }

    #[test]
    fn two_budgets_or_none() {
        let pods = [pod("a", "web", "n1")];
        let mut one = pdb("one", "web");
        one.max_unavailable = Some(IntOrPercent::Int(1));
        let mut two = pdb("two", "web");
        two.max_unavailable = Some(IntOrPercent::Int(1));
        let b = Budgets::new(&[one.clone(), two], pods.iter());
        assert_eq!(
            b.check(&pods[0]),
            Verdict::Refused {
                message: MORE_THAN_ONE_BUDGET.into(),
                pdbs: vec!["one".into(), "two".into()]
            }
        );
        // Another namespace, another app, an empty selector: not covered.
        let mut empty = one.clone();
        empty.selector = Some(LabelSelector::everything());
        let mut other_ns = one.clone();
        other_ns.namespace = "e".into();
        let b = Budgets::new(&[empty, other_ns, pdb("x", "db")], pods.iter());
        assert_eq!(b.check(&pods[0]), Verdict::Allowed);
    }
}
