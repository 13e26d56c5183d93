//! What a failed scheduling attempt leads to, decided once for the
//! simulator and the live scheduler (upstream's `schedulingCycle` results
//! and `handleSchedulingFailure`): the condition's reason and message,
//! the pod's nomination afterwards, the victims preemption chose, whether
//! the pod waits for an event or backs off, and the claims PostFilter
//! freed. Each driver executes it against its own host (the snapshot, or
//! the API server); nothing here does I/O.

use std::collections::BTreeSet;
use std::sync::Arc;

use rkube_model::Pod;

use crate::binding::failure_reason;
use crate::diagnosis::Diagnosis;
use crate::nominator::Nominator;
use crate::schedule_one::Outcome;
use crate::status::{Code, Status};

/// A failed attempt.
#[derive(Debug, Clone)]
pub struct Failure {
    /// `Unschedulable` or `SchedulerError` (the PodScheduled condition's
    /// reason).
    pub reason: &'static str,
    /// The FailedScheduling message.
    pub message: String,
    /// The pod's nomination afterwards: a node, cleared (`Some("")`), or
    /// left as it is (`None`); see [`Nominator::record_failure`].
    pub nominated_node: Option<String>,
    /// Pods preemption chose to evict from the nominated node.
    pub victims: Vec<Arc<Pod>>,
    /// Back to the unschedulable pool (a plugin rejected the pod) rather
    /// than to back-off.
    pub unschedulable: bool,
    /// The plugins that rejected the pod (their events requeue it).
    pub rejectors: BTreeSet<&'static str>,
    /// Write the Event and the condition (upstream writes neither when
    /// every Bind plugin skipped).
    pub report: bool,
    /// Claims PostFilter deallocated (namespace, name).
    pub deallocated_claims: Vec<(String, String)>,
    /// Claims PostFilter deleted (namespace, name).
    pub deleted_claims: Vec<(String, String)>,
}

impl Failure {
    /// The failure a scheduling cycle's outcome is, if it is one.
    pub fn from_outcome(outcome: Outcome) -> Option<Failure> {
        match outcome {
            Outcome::Scheduled { .. } => None,
            Outcome::Unschedulable {
                message,
                diagnosis,
                nominated_node,
                victims,
            } => Some(Failure::unschedulable(
                message,
                diagnosis,
                nominated_node,
                victims,
            )),
            Outcome::Error(s) => Some(Failure::error(&s)),
        }
    }

    /// A rejection, with PostFilter's nomination, victims and claims.
    pub fn unschedulable(
        message: String,
        diagnosis: Diagnosis,
        nominated_node: Option<String>,
        victims: Vec<Arc<Pod>>,
    ) -> Failure {
        Failure {
            reason: "Unschedulable",
            message,
            nominated_node,
            victims,
            unschedulable: true,
            rejectors: diagnosis.unschedulable_plugins,
            report: true,
            deallocated_claims: diagnosis.deallocated_claims,
            deleted_claims: diagnosis.deleted_claims,
        }
    }

    /// An error: the pod backs off, its nomination cleared as upstream's
    /// `clearNominatedNode` does.
    pub fn error(s: &Status) -> Failure {
        Failure {
            reason: "SchedulerError",
            message: s.message(),
            nominated_node: Some(String::new()),
            victims: Vec::new(),
            unschedulable: false,
            rejectors: BTreeSet::new(),
            report: true,
            deallocated_claims: Vec::new(),
            deleted_claims: Vec::new(),
        }
    }

    /// A failed status from Reserve, Permit or the binding cycle (its
    /// message already final): the nomination is cleared.
    pub fn from_status(s: &Status, unschedulable: bool) -> Failure {
        Failure {
            reason: failure_reason(s),
            message: s.message(),
            nominated_node: Some(String::new()),
            victims: Vec::new(),
            unschedulable: unschedulable && s.is_rejected(),
            rejectors: BTreeSet::from_iter(
                (s.is_rejected() && !s.plugin.is_empty()).then_some(s.plugin),
            ),
            report: s.code != Code::Skip,
            deallocated_claims: Vec::new(),
            deleted_claims: Vec::new(),
        }
    }

    /// The node whose victims are to be evicted, when preemption chose
    /// some.
    pub fn preemption_target(&self) -> Option<&str> {
        let target = self.nominated_node.as_deref().filter(|n| !n.is_empty())?;
        (!self.victims.is_empty()).then_some(target)
    }

    /// Records the failure in the nominations: returns the lower-priority
    /// pods that lost their nomination to this pod's preemption.
    pub fn record(&self, nominator: &mut Nominator, pod: &Pod) -> Vec<Arc<Pod>> {
        let preempting = self.preemption_target().is_some();
        nominator.record_failure(pod, self.nominated_node.as_deref(), preempting)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str) -> Arc<Pod> {
        Arc::new(Pod {
            name: name.into(),
            uid: name.into(),
            ..Default::default()
        })
    }

    #[test]
    fn an_error_clears_the_nomination_and_backs_off() {
        let f = Failure::from_outcome(Outcome::Error(Status::error("boom"))).unwrap();
        assert_eq!(f.reason, "SchedulerError");
        assert_eq!(f.nominated_node.as_deref(), Some(""));
        assert!(!f.unschedulable && f.report && f.preemption_target().is_none());
    }

    #[test]
    fn a_rejection_keeps_postfilter_s_nomination_victims_and_claims() {
        let diagnosis = Diagnosis {
            deallocated_claims: vec![("ns".into(), "c".into())],
            ..Default::default()
        };
        let f = Failure::from_outcome(Outcome::Unschedulable {
            message: "0/1 nodes are available".into(),
            diagnosis,
            nominated_node: Some("n1".into()),
            victims: vec![pod("v")],
        })
        .unwrap();
        assert_eq!(f.reason, "Unschedulable");
        assert!(f.unschedulable);
        assert_eq!(f.preemption_target(), Some("n1"));
        assert_eq!(f.deallocated_claims, [("ns".to_string(), "c".to_string())]);
        // A nomination without victims preempts nothing.
        let mut none = f.clone();
        none.victims.clear();
        assert_eq!(none.preemption_target(), None);
    }

    #[test]
    fn a_skipped_bind_is_not_reported() {
        let f = Failure::from_status(&Status::new(Code::Skip, "every Bind plugin skipped"), true);
        assert!(!f.report && !f.unschedulable);
        assert_eq!(f.nominated_node.as_deref(), Some(""));
    }
}
