//! InterPodAffinity's queueing hints (upstream's `EventsToRegister` and
//! `isSchedulableAfter*`): scheduled pods that start (or stop) matching the
//! pod's required terms, and nodes that gain, lose or change a term's
//! topology key.

use rkube_framework::events::objects_as;
use rkube_framework::{
    ActionType, ClusterEventWithHint, EventObject, EventResource, HintContext, HintResult,
    QueueingHint,
};
use rkube_model::{Labels, Node, Pod, PodAffinityTerm};

use super::existing_term_matches;

/// The registrations.
pub(super) fn events() -> Vec<ClusterEventWithHint> {
    use ActionType as A;
    use EventResource as R;
    vec![
        // Add (affinity may be satisfied), label updates and deletes (an
        // existing pod's anti-affinity may stop applying).
        ClusterEventWithHint::with_hint(
            R::AssignedPod,
            A::ADD | A::UPDATE_POD_LABEL | A::DELETE,
            is_schedulable_after_assigned_pod_change,
        ),
        ClusterEventWithHint::with_hint(R::TargetPod, A::UPDATE_POD_LABEL, |_, _, _, _| {
            // Another pod's anti-affinity may reject the old labels only.
            Ok(QueueingHint::Queue)
        }),
        ClusterEventWithHint::with_hint(
            R::Node,
            A::ADD | A::UPDATE_NODE_LABEL,
            is_schedulable_after_node_change,
        ),
    ]
}

fn required(a: &Option<rkube_model::PodAffinity>) -> &[PodAffinityTerm] {
    a.as_ref().map_or(&[], |a| a.required.as_slice())
}

/// Upstream's `AffinityTerm.Matches(target, nil)` for a term of `owner`:
/// namespaces as listed (or the owner's), a namespace selector evaluated on
/// no labels, `matchLabelKeys` merged from the owner's labels.
fn term_matches(owner: &Pod, term: &PodAffinityTerm, target: &Pod) -> bool {
    existing_term_matches(term, owner, target, &Labels::new())
}

fn matches_all(owner: &Pod, terms: &[PodAffinityTerm], target: &Pod) -> bool {
    !terms.is_empty() && terms.iter().all(|t| term_matches(owner, t, target))
}

fn matches_any(owner: &Pod, terms: &[PodAffinityTerm], target: &Pod) -> bool {
    terms.iter().any(|t| term_matches(owner, t, target))
}

fn unplaced(p: &Pod) -> bool {
    p.node_name.is_empty() && p.nominated_node_name.is_empty()
}

/// A scheduled pod was added, relabelled or deleted.
pub fn is_schedulable_after_assigned_pod_change(
    pod: &Pod,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
    _: &HintContext<'_>,
) -> HintResult {
    let (original, modified) = objects_as::<Pod>(old, new)?;
    if modified.is_some_and(unplaced) || original.is_some_and(unplaced) {
        return Ok(QueueingHint::QueueSkip);
    }
    let terms = required(&pod.pod_affinity);
    let anti = required(&pod.pod_anti_affinity);
    let queue = |yes: bool| {
        Ok(if yes {
            QueueingHint::Queue
        } else {
            QueueingHint::QueueSkip
        })
    };
    match (original, modified) {
        // Updated: now matches all affinity terms, or no longer matches an
        // anti-affinity term.
        (Some(o), Some(m)) => queue(
            (!matches_all(pod, terms, o) && matches_all(pod, terms, m))
                || (matches_any(pod, anti, o) && !matches_any(pod, anti, m)),
        ),
        // Added: matches all affinity terms.
        (None, Some(m)) => queue(matches_all(pod, terms, m)),
        // Deleted: it matched the pod's anti-affinity, or the pod matched
        // its anti-affinity.
        (Some(o), None) => {
            queue(matches_any(pod, anti, o) || matches_any(o, required(&o.pod_anti_affinity), pod))
        }
        (None, None) => Err("no pod in the event".into()),
    }
}

/// A node was added or relabelled: a term's topology key appears or
/// changes (affinity), or disappears or changes (anti-affinity; any new
/// node may help).
pub fn is_schedulable_after_node_change(
    pod: &Pod,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
    _: &HintContext<'_>,
) -> HintResult {
    let (original, modified) = objects_as::<Node>(old, new)?;
    let modified = modified.ok_or("no modified node")?;
    for term in required(&pod.pod_affinity) {
        let key = &term.topology_key;
        let Some(o) = original else {
            if modified.labels.contains_key(key) {
                return Ok(QueueingHint::Queue);
            }
            continue;
        };
        match (o.labels.get(key), modified.labels.get(key)) {
            (None, Some(_)) => return Ok(QueueingHint::Queue),
            (Some(a), Some(b)) if a != b => return Ok(QueueingHint::Queue),
            _ => {}
        }
    }
    for term in required(&pod.pod_anti_affinity) {
        let Some(o) = original else {
            return Ok(QueueingHint::Queue);
        };
        let key = &term.topology_key;
        match (o.labels.get(key), modified.labels.get(key)) {
            (Some(_), None) => return Ok(QueueingHint::Queue),
            (Some(a), Some(b)) if a != b => return Ok(QueueingHint::Queue),
            _ => {}
        }
    }
    Ok(QueueingHint::QueueSkip)
}

#[cfg(test)]
mod tests {
    //! Upstream's `Test_isSchedulableAfterAssignedPodChange` and
    //! `Test_isSchedulableAfterNodeChange` cases.

    use super::*;
    use crate::helper::testing::*;
    use rkube_model::selector::{Operator, Requirement};
    use rkube_model::{LabelSelector, PodAffinity};

    fn term(key: &str, op: Operator, values: &[&str], topology: &str) -> PodAffinityTerm {
        PodAffinityTerm {
            selector: Some(LabelSelector {
                requirements: vec![Requirement {
                    key: key.into(),
                    op,
                    values: values.iter().map(|v| v.to_string()).collect(),
                }],
            }),
            topology_key: topology.into(),
            ..Default::default()
        }
    }

    fn affinity(terms: Vec<PodAffinityTerm>) -> Option<PodAffinity> {
        Some(PodAffinity {
            required: terms,
            preferred: Vec::new(),
        })
    }

    /// `PodAffinityIn("service", topology, ["securityscan", "value2"])`.
    fn service_in(topology: &str) -> PodAffinityTerm {
        term(
            "service",
            Operator::In,
            &["securityscan", "value2"],
            topology,
        )
    }

    fn with_affinity(terms: Vec<PodAffinityTerm>) -> Pod {
        let mut p = pod("p");
        p.pod_affinity = affinity(terms);
        p
    }

    fn with_anti(terms: Vec<PodAffinityTerm>) -> Pod {
        let mut p = pod("p");
        p.pod_anti_affinity = affinity(terms);
        p
    }

    fn other(node: &str, l: &[(&str, &str)]) -> Pod {
        let mut p = pod("other");
        p.node_name = node.into();
        p.labels = labels(l);
        p
    }

    #[test]
    fn assigned_pod_change() {
        let h = |target: &Pod, old: Option<Pod>, new: Option<Pod>| {
            run(
                is_schedulable_after_assigned_pod_change,
                target,
                old.map(pod_obj),
                new.map(pod_obj),
            )
        };
        let aff = with_affinity(vec![service_in("region")]);
        let scan = || other("fake-node", &[("service", "securityscan")]);
        let aaa = || other("fake-node", &[("aaa", "a")]);
        let cases: Vec<(&str, &Pod, Option<Pod>, Option<Pod>, _)> = vec![
            ("add a pod which matches the pod affinity", &aff, None, Some(scan()), Queue),
            (
                "add an un-scheduled pod",
                &aff,
                None,
                Some(other("", &[("service", "securityscan")])),
                QueueSkip,
            ),
            ("add a pod which doesn't match the pod affinity", &aff, None, Some(aaa()), QueueSkip),
            ("update a pod from non-match to match pod affinity", &aff, Some(aaa()), Some(scan()), Queue),
            (
                "the updating pod matches target pod's affinity both before and after label changes",
                &aff,
                Some(other("fake-node", &[("service", "value2")])),
                Some(scan()),
                QueueSkip,
            ),
            (
                "update an un-scheduled pod",
                &aff,
                Some(other("", &[("aaa", "a")])),
                Some(other("", &[("service", "securityscan")])),
                QueueSkip,
            ),
            ("update a pod from match to non-match the pod affinity", &aff, Some(scan()), Some(aaa()), QueueSkip),
        ];
        for (name, target, old, new, want) in cases {
            assert_eq!(h(target, old, new), want, "{name}");
        }
        let two = with_affinity(vec![
            term("aaa", Operator::Exists, &[], "hostname"),
            term("bbb", Operator::Exists, &[], "hostname"),
        ]);
        assert_eq!(
            h(&two, Some(aaa()), Some(scan())),
            QueueSkip,
            "update a pod from match to non-match pod's affinity - multiple terms case"
        );
        assert_eq!(
            h(
                &two,
                Some(aaa()),
                Some(other("fake-node", &[("aaa", ""), ("bbb", "")]))
            ),
            Queue,
            "update a pod from non-match to match pod's affinity - multiple terms case"
        );
        let anti = with_anti(vec![service_in("region")]);
        assert_eq!(
            h(&anti, Some(scan()), Some(other("fake-node", &[("service", "aaaa")]))),
            Queue,
            "modify pod label to change it from satisfying pod anti-affinity to not satisfying anti-affinity"
        );
        assert_eq!(
            h(&anti, Some(other("fake-node", &[("service", "bbb")])), Some(scan())),
            QueueSkip,
            "modify pod label to change it from not satisfying pod anti-affinity to satisfying anti-affinity"
        );
        assert_eq!(
            h(&anti, Some(aaa()), None),
            QueueSkip,
            "delete a pod which doesn't match pod's anti-affinity"
        );
        assert_eq!(
            h(&anti, Some(scan()), None),
            Queue,
            "delete a pod which matches pod's anti-affinity"
        );
        let mut deleted = other("fake-node", &[]);
        deleted.pod_anti_affinity = affinity(vec![service_in("region")]);
        let mut pending = pod("p");
        pending.labels = labels(&[("service", "securityscan")]);
        assert_eq!(
            h(&pending, Some(deleted.clone()), None),
            Queue,
            "delete a pod with anti-affinity that matches pending pod"
        );
        pending.labels = labels(&[("service", "foo")]);
        assert_eq!(
            h(&pending, Some(deleted), None),
            QueueSkip,
            "delete a pod with anti-affinity that doesn't match pending pod"
        );
    }

    #[test]
    fn node_change() {
        let h = |target: &Pod, old: Option<&[(&str, &str)]>, new: &[(&str, &str)]| {
            run(
                is_schedulable_after_node_change,
                target,
                old.map(|l| node_obj(node("node-a", l))),
                Some(node_obj(node("node-a", new))),
            )
        };
        let zone = with_affinity(vec![service_in("zone")]);
        let region = with_affinity(vec![service_in("region")]);
        let z1: &[(&str, &str)] = &[("zone", "zone1")];
        assert_eq!(
            h(&zone, None, z1),
            Queue,
            "add a new node with matched pod affinity topologyKey"
        );
        assert_eq!(
            h(&region, None, z1),
            QueueSkip,
            "add a new node without matched topologyKey"
        );
        assert_eq!(
            h(&zone, Some(&[("aaa", "a")]), &[("aaa", "b")]),
            QueueSkip,
            "update node label but not topologyKey"
        );
        assert_eq!(
            h(
                &zone,
                Some(z1),
                &[("zone", "zone1"), ("unrelated-label", "unrelated")]
            ),
            QueueSkip,
            "update node label that isn't related to the pod affinity"
        );
        assert_eq!(
            h(&zone, Some(z1), &[("zone", "zone2")]),
            Queue,
            "update node with different affinity topologyKey value"
        );
        assert_eq!(
            h(&zone, Some(&[("aaa", "a")]), z1),
            Queue,
            "update node to have the affinity topology label"
        );
        let anti = with_anti(vec![term("another", Operator::In, &["label"], "zone")]);
        assert_eq!(
            h(&anti, None, z1),
            Queue,
            "add a new node with matched pod anti-affinity topologyKey"
        );
        assert_eq!(
            h(&anti, None, &[]),
            Queue,
            "add a new node without matched pod anti-affinity topologyKey"
        );
        assert_eq!(
            h(
                &anti,
                Some(z1),
                &[("zone", "zone1"), ("unrelated-label", "unrelated")]
            ),
            QueueSkip,
            "update node label that isn't related to the pod anti-affinity"
        );
        assert_eq!(
            h(&anti, Some(z1), &[("zone", "zone2")]),
            Queue,
            "update node with different anti-affinity topologyKey value"
        );
        assert_eq!(
            h(&anti, Some(&[("aaa", "a")]), z1),
            QueueSkip,
            "update node to have the anti-affinity topology label"
        );
        assert_eq!(
            h(&anti, Some(z1), &[("aaa", "a")]),
            Queue,
            "update node label not to have anti-affinity topology label"
        );
    }
}
