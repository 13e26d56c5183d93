//! `explain --kubeconfig`: rkube's verdict for a pod next to what the
//! cluster's scheduler last reported for it (the pod's `PodScheduled`
//! condition, or the node it is bound to).

pub use rkube_report::{Condition, LiveVerdict, Observed};

use crate::PodExplanation;

/// Compares an explanation computed from the cluster's current state with
/// what the cluster's scheduler reported:
///
/// - bound to a node: they agree when that node is among rkube's best
///   (equally top-scored) nodes now; the pod is explained as if pending;
/// - `PodScheduled=False`: they agree when rkube finds no node either and
///   its FailedScheduling message is the same text;
/// - no condition yet: no verdict to compare.
///
/// The cluster may have changed since the scheduler's last attempt (a pod
/// deleted, a node added); the note says so when that can explain a
/// difference.
pub fn compare(e: &PodExplanation, observed: Observed) -> LiveVerdict {
    let (agrees, note) = match (&observed.node, &observed.condition) {
        (Some(node), _) => {
            if e.top_nodes.iter().any(|n| n == node) {
                (
                    Some(true),
                    format!("bound to {node}, one of the nodes rkube scores highest now"),
                )
            } else {
                let best = if e.top_nodes.is_empty() {
                    format!("no node fits it now: {}", e.message)
                } else {
                    format!("rkube's best nodes now: {}", e.top_nodes.join(", "))
                };
                (
                    Some(false),
                    format!("bound to {node}; {best} (the cluster may have changed since it was bound)"),
                )
            }
        }
        (None, Some(c)) if c.status == "False" => match &e.selected_node {
            None if e.message == c.message => (
                Some(true),
                "pending with the same message the scheduler reported".to_string(),
            ),
            None => (
                Some(false),
                "pending in both, but the messages differ (the cluster may have changed since the scheduler's last attempt)".to_string(),
            ),
            Some(n) => (
                Some(false),
                format!("the scheduler reported {}, but rkube would bind it to {n} now (the cluster may have changed since the last attempt)", c.reason),
            ),
        },
        _ => (
            None,
            "the scheduler has not reported on this pod yet".to_string(),
        ),
    };
    LiveVerdict {
        observed,
        agrees,
        note,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn explanation(selected: Option<&str>, top: &[&str], message: &str) -> PodExplanation {
        PodExplanation {
            pod: "d/p".into(),
            profile: "default-scheduler".into(),
            nodes: Vec::new(),
            selected_node: selected.map(str::to_string),
            top_nodes: top.iter().map(|s| s.to_string()).collect(),
            message: message.into(),
            error: None,
            live: None,
            pod_group: None,
        }
    }

    const MSG: &str = "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.";

    fn pending(message: &str) -> Observed {
        Observed::from_pod(&json!({"spec": {}, "status": {"conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}]}}))
    }

    #[test]
    fn reads_the_condition_and_node() {
        let o = pending(MSG);
        assert_eq!(o.node, None);
        let c = o.condition.unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "Unschedulable")
        );
        assert_eq!(c.message, MSG);
        let o = Observed::from_pod(&json!({"spec": {"nodeName": "n1"}, "status": {}}));
        assert_eq!((o.node.as_deref(), o.condition), (Some("n1"), None));
    }

    #[test]
    fn same_message_agrees_and_a_different_one_does_not() {
        let e = explanation(None, &[], MSG);
        assert_eq!(compare(&e, pending(MSG)).agrees, Some(true));
        let v = compare(&e, pending("0/1 nodes are available: 1 Too many pods."));
        assert_eq!(v.agrees, Some(false));
        assert!(v.note.contains("messages differ"), "{}", v.note);
    }

    #[test]
    fn a_feasible_node_disagrees_with_unschedulable() {
        let v = compare(&explanation(Some("n2"), &["n2"], ""), pending(MSG));
        assert_eq!(v.agrees, Some(false));
        assert!(v.note.contains("bind it to n2"), "{}", v.note);
    }

    #[test]
    fn bound_pods_agree_when_their_node_is_among_the_best() {
        let bound = |n: &str| Observed {
            node: Some(n.into()),
            condition: None,
        };
        let e = explanation(Some("a"), &["a", "b"], "");
        assert_eq!(compare(&e, bound("b")).agrees, Some(true));
        assert_eq!(compare(&e, bound("c")).agrees, Some(false));
    }

    #[test]
    fn no_condition_is_no_verdict() {
        let v = compare(&explanation(None, &[], MSG), Observed::default());
        assert_eq!(v.agrees, None);
    }
}
