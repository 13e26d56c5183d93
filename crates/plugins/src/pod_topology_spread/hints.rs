//! PodTopologySpread's queueing hints (upstream's `EventsToRegister` and
//! `isSchedulableAfter*`): scheduled pods of the namespace that start or
//! stop matching a hard constraint's selector, the pod's own label or
//! toleration changes, and nodes that gain, lose or change the topology keys.

use rkube_framework::events::objects_as;
use rkube_framework::{
    ActionType, ClusterEventWithHint, EventObject, EventResource, HintContext, HintResult,
    QueueingHint,
};
use rkube_model::{Labels, Node, Pod};

use super::{node_has_all_keys, Constraint, PodTopologySpread};

impl PodTopologySpread {
    /// The registrations.
    pub(super) fn events(&self) -> Vec<ClusterEventWithHint> {
        use ActionType as A;
        use EventResource as R;
        let (a, b, c) = (self.clone(), self.clone(), self.clone());
        vec![
            ClusterEventWithHint::with_hint(
                R::AssignedPod,
                A::ADD | A::UPDATE_POD_LABEL | A::DELETE,
                move |p, o, n, cx| a.is_schedulable_after_assigned_pod_change(p, o, n, cx),
            ),
            ClusterEventWithHint::with_hint(
                R::TargetPod,
                A::UPDATE_POD_TOLERATION | A::UPDATE_POD_LABEL,
                move |p, o, n, cx| b.is_schedulable_after_target_pod_change(p, o, n, cx),
            ),
            ClusterEventWithHint::with_hint(
                R::Node,
                A::ADD | A::DELETE | A::UPDATE_NODE_LABEL | A::UPDATE_NODE_TAINT,
                move |p, o, n, cx| c.is_schedulable_after_node_change(p, o, n, cx),
            ),
        ]
    }

    /// Upstream's `getConstraints`: the pod's `DoNotSchedule` constraints,
    /// or the hard default constraints with the pod's default selector.
    fn hard_constraints(&self, pod: &Pod, cx: &HintContext<'_>) -> Vec<Constraint> {
        self.constraints_with(pod, cx.workloads, true)
    }

    /// The pod itself was relabelled or got a toleration.
    pub fn is_schedulable_after_target_pod_change(
        &self,
        pod: &Pod,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
        cx: &HintContext<'_>,
    ) -> HintResult {
        let (original, modified) = objects_as::<Pod>(old, new)?;
        let (original, modified) = (
            original.ok_or("no original pod")?,
            modified.ok_or("no modified pod")?,
        );
        let constraints = self.hard_constraints(pod, cx);
        if modified.tolerations != original.tolerations
            && constraints.iter().any(|c| c.node_taints_honor)
        {
            return Ok(QueueingHint::Queue);
        }
        Ok(label_change(
            &original.labels,
            &modified.labels,
            &constraints,
        ))
    }

    /// A scheduled pod of the namespace was added, relabelled or deleted.
    pub fn is_schedulable_after_assigned_pod_change(
        &self,
        pod: &Pod,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
        cx: &HintContext<'_>,
    ) -> HintResult {
        let (original, modified) = objects_as::<Pod>(old, new)?;
        let involved = |p: &Pod| {
            !(p.node_name.is_empty() && p.nominated_node_name.is_empty())
                && p.namespace == pod.namespace
        };
        if modified.is_some_and(|p| !involved(p)) || original.is_some_and(|p| !involved(p)) {
            return Ok(QueueingHint::QueueSkip);
        }
        let constraints = self.hard_constraints(pod, cx);
        let any_match = |l: &Labels| constraints.iter().any(|c| c.matches(l));
        let queue_if = |yes: bool| {
            if yes {
                QueueingHint::Queue
            } else {
                QueueingHint::QueueSkip
            }
        };
        match (original, modified) {
            (Some(o), Some(m)) => Ok(label_change(&o.labels, &m.labels, &constraints)),
            (None, Some(m)) => Ok(queue_if(any_match(&m.labels))),
            (Some(o), None) => Ok(queue_if(any_match(&o.labels))),
            (None, None) => Err("no pod in the event".into()),
        }
    }

    /// A node was added, deleted, relabelled or retainted.
    pub fn is_schedulable_after_node_change(
        &self,
        pod: &Pod,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
        cx: &HintContext<'_>,
    ) -> HintResult {
        let (original, modified) = objects_as::<Node>(old, new)?;
        let constraints = self.hard_constraints(pod, cx);
        let has_keys = |n: Option<&Node>| n.is_some_and(|n| node_has_all_keys(n, &constraints));
        let (was, is) = (has_keys(original), has_keys(modified));
        let queue = match (original, modified) {
            (Some(o), Some(m)) => {
                was != is
                    || is
                        && (constraints.iter().any(|c| {
                            o.labels.get(&c.topology_key) != m.labels.get(&c.topology_key)
                        }) || o.taints != m.taints)
            }
            (None, Some(_)) => is,
            (Some(_), None) => was,
            (None, None) => return Err("no node in the event".into()),
        };
        Ok(if queue {
            QueueingHint::Queue
        } else {
            QueueingHint::QueueSkip
        })
    }
}

/// Upstream's `isSchedulableAfterPodLabelChange`: the change makes the pod
/// match or stop matching some constraint's selector.
fn label_change(original: &Labels, modified: &Labels, constraints: &[Constraint]) -> QueueingHint {
    if original == modified {
        return QueueingHint::QueueSkip;
    }
    if constraints
        .iter()
        .any(|c| c.matches(original) != c.matches(modified))
    {
        QueueingHint::Queue
    } else {
        QueueingHint::QueueSkip
    }
}

#[cfg(test)]
mod tests {
    //! Upstream's `Test_isSchedulableAfterNodeChange`,
    //! `Test_isSchedulableAfterAssignedPodChange` and
    //! `Test_isSchedulableAfterTargetPodChange` cases (List defaulting, so
    //! pods without constraints have none).

    use super::*;
    use crate::helper::testing::*;
    use rkube_model::selector::{Operator, Requirement};
    use rkube_model::{LabelSelector, Taint, TaintEffect, Toleration, TopologySpreadConstraint};

    fn exists(key: &str) -> LabelSelector {
        LabelSelector {
            requirements: vec![Requirement {
                key: key.into(),
                op: Operator::Exists,
                values: Vec::new(),
            }],
        }
    }

    /// `SpreadConstraint(1, key, DoNotSchedule, selector, …, taints policy)`.
    fn spread(key: &str, selector: &str, taints_honor: bool) -> TopologySpreadConstraint {
        TopologySpreadConstraint {
            max_skew: 1,
            topology_key: key.into(),
            do_not_schedule: true,
            selector: Some(exists(selector)),
            min_domains: None,
            node_affinity_honor: true,
            node_taints_honor: taints_honor,
            match_label_keys: Vec::new(),
        }
    }

    fn plugin() -> PodTopologySpread {
        PodTopologySpread {
            default_constraints: Vec::new(),
            system_defaulted: false,
            memo: Default::default(),
        }
    }

    fn target(constraints: Vec<TopologySpreadConstraint>) -> Pod {
        let mut p = pod("p");
        p.labels = labels(&[("foo", "")]);
        p.topology_spread_constraints = constraints;
        p
    }

    #[test]
    fn node_change() {
        let pl = plugin();
        let zone = target(vec![spread("zone", "foo", false)]);
        let both = target(vec![
            spread("zone", "foo", false),
            spread("node", "foo", false),
        ]);
        let h = |p: &Pod, old: Option<Node>, new: Option<Node>| {
            run(
                |p, o, n, cx| pl.is_schedulable_after_node_change(p, o, n, cx),
                p,
                old.map(node_obj),
                new.map(node_obj),
            )
        };
        let n = |l: &[(&str, &str)]| node("node-a", l);
        let tainted = |l: &[(&str, &str)], key: &str| {
            let mut n = n(l);
            n.taints = vec![Taint {
                key: key.into(),
                value: "bbb".into(),
                effect: TaintEffect::NoSchedule,
            }];
            n
        };
        let cases = [
            (
                "node updates label which matches topologyKey",
                &zone,
                Some(n(&[("zone", "zone1")])),
                Some(n(&[("zone", "zone2")])),
                Queue,
            ),
            (
                "node that doesn't match topologySpreadConstraints updates non-related label",
                &zone,
                Some(n(&[("foo", "bar1")])),
                Some(n(&[("foo", "bar2")])),
                QueueSkip,
            ),
            (
                "node that match topologySpreadConstraints adds non-related label",
                &both,
                Some(n(&[("zone", "zone1"), ("node", "node1"), ("foo", "bar")])),
                Some(n(&[("zone", "zone1"), ("node", "node1")])),
                QueueSkip,
            ),
            (
                "create node with non-related labels",
                &zone,
                None,
                Some(n(&[("foo", "bar")])),
                QueueSkip,
            ),
            (
                "create node with related labels",
                &zone,
                None,
                Some(n(&[("zone", "zone1")])),
                Queue,
            ),
            (
                "delete node with non-related labels",
                &zone,
                Some(n(&[("foo", "bar")])),
                None,
                QueueSkip,
            ),
            (
                "delete node with related labels",
                &zone,
                Some(n(&[("zone", "zone1")])),
                None,
                Queue,
            ),
            (
                "add node with related labels that only match one of topologySpreadConstraints",
                &both,
                None,
                Some(n(&[("zone", "zone1")])),
                QueueSkip,
            ),
            (
                "add node with related labels that match all topologySpreadConstraints",
                &both,
                None,
                Some(n(&[("zone", "zone1"), ("node", "node1")])),
                Queue,
            ),
            (
                "update node with related labels that only match one of topologySpreadConstraints",
                &both,
                Some(n(&[("zone", "zone1")])),
                Some(n(&[("zone", "zone1")])),
                QueueSkip,
            ),
            (
                "update node with different taints that match all topologySpreadConstraints",
                &both,
                Some(tainted(&[("zone", "zone1"), ("node", "node1")], "aaa")),
                Some(tainted(&[("zone", "zone1"), ("node", "node1")], "ccc")),
                Queue,
            ),
            (
                "update node with different taints that only match one of topologySpreadConstraints",
                &both,
                Some(tainted(&[("node", "node1")], "aaa")),
                Some(tainted(&[("node", "node1")], "ccc")),
                QueueSkip,
            ),
        ];
        for (name, p, old, new, want) in cases {
            assert_eq!(h(p, old, new), want, "{name}");
        }
    }

    #[test]
    fn assigned_pod_change() {
        let pl = plugin();
        let t = target(vec![spread("zone", "foo", false)]);
        let h = |old: Option<Pod>, new: Option<Pod>| {
            run(
                |p, o, n, cx| pl.is_schedulable_after_assigned_pod_change(p, o, n, cx),
                &t,
                old.map(pod_obj),
                new.map(pod_obj),
            )
        };
        let p2 = |node: &str, nominated: &str, l: &[(&str, &str)]| {
            let mut p = pod("p2");
            p.node_name = node.into();
            p.nominated_node_name = nominated.into();
            p.labels = labels(l);
            p
        };
        let foo: &[(&str, &str)] = &[("foo", "")];
        let bar: &[(&str, &str)] = &[("bar", "")];
        let mut other_ns = p2("fake-node", "", foo);
        other_ns.namespace = "fake-namespace".into();
        let cases = [
            (
                "add pod with labels match topologySpreadConstraints selector",
                None,
                Some(p2("fake-node", "", foo)),
                Queue,
            ),
            ("add un-scheduled pod", None, Some(p2("", "", foo)), QueueSkip),
            (
                "update un-scheduled pod",
                Some(p2("", "", bar)),
                Some(p2("", "", foo)),
                QueueSkip,
            ),
            ("delete un-scheduled pod", Some(p2("", "", foo)), None, QueueSkip),
            ("add pod with different namespace", None, Some(other_ns), QueueSkip),
            (
                "add pod with labels don't match topologySpreadConstraints selector",
                None,
                Some(p2("fake-node", "", bar)),
                QueueSkip,
            ),
            (
                "delete pod with labels that match topologySpreadConstraints selector",
                Some(p2("fake-node", "", foo)),
                None,
                Queue,
            ),
            (
                "delete nominated pod with labels that don't match topologySpreadConstraints selector",
                Some(p2("", "fake-node", bar)),
                None,
                QueueSkip,
            ),
            (
                "delete nominated pod with labels that match topologySpreadConstraints selector",
                Some(p2("", "fake-node", foo)),
                None,
                Queue,
            ),
            (
                "delete pod with labels that don't match topologySpreadConstraints selector",
                Some(p2("fake-node", "", bar)),
                None,
                QueueSkip,
            ),
            (
                "update pod's non-related label",
                Some(p2("fake-node", "", &[("foo", ""), ("bar", "bar1")])),
                Some(p2("fake-node", "", &[("foo", ""), ("bar", "bar2")])),
                QueueSkip,
            ),
            (
                "add pod's label that matches topologySpreadConstraints selector",
                Some(p2("fake-node", "", &[])),
                Some(p2("fake-node", "", foo)),
                Queue,
            ),
        ];
        for (name, old, new, want) in cases {
            assert_eq!(h(old, new), want, "{name}");
        }
    }

    #[test]
    fn target_pod_change() {
        let pl = plugin();
        let h = |t: &Pod, old: Pod, new: Pod| {
            run(
                |p, o, n, cx| pl.is_schedulable_after_target_pod_change(p, o, n, cx),
                t,
                Some(pod_obj(old)),
                Some(pod_obj(new)),
            )
        };
        let honor = target(vec![
            spread("zone", "foo", true),
            spread("node", "bar", false),
        ]);
        let ignore = target(vec![
            spread("zone", "foo", false),
            spread("node", "bar", false),
        ]);
        let with = |l: &[(&str, &str)], tolerate: bool| {
            let mut p = pod("p");
            p.labels = labels(l);
            if tolerate {
                p.tolerations = vec![Toleration {
                    key: "node.kubernetes.io/unschedulable".into(),
                    exists: true,
                    value: String::new(),
                    effect: None,
                }];
            }
            p
        };
        let foo: &[(&str, &str)] = &[("foo", "")];
        assert_eq!(
            h(&honor, with(foo, false), with(foo, true)),
            Queue,
            "the unschedulable Pod has topologySpreadConstraint with NodeTaintsPolicy:Honor and has got a new toleration"
        );
        assert_eq!(
            h(&ignore, with(foo, false), with(foo, true)),
            QueueSkip,
            "the unschedulable Pod has topologySpreadConstraint without NodeTaintsPolicy:Honor and has got a new toleration"
        );
        assert_eq!(
            h(&ignore, with(&[], false), with(foo, false)),
            Queue,
            "the unschedulable Pod has topologySpreadConstraint and has got a new label matching the selector of the constraint"
        );
        assert_eq!(
            h(&ignore, with(&[], false), with(&[("unrelated", "")], false)),
            QueueSkip,
            "the unschedulable Pod has topologySpreadConstraint and has got a new unrelated label"
        );
    }
}
