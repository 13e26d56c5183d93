//! NodeAffinity: `nodeSelector` and required node affinity (Filter, with a
//! PreFilter node restriction from `metadata.name` field selectors), preferred
//! terms (Score, normalized), and the profile's `addedAffinity`.

use std::collections::BTreeSet;
use std::sync::Arc;

use rkube_config::args::{decode, NodeAffinityArgs};
use rkube_framework::events::objects_as;
use rkube_framework::{
    ActionType, ClusterEventWithHint, Code, CycleState, EventObject, EventResource, FilterPlugin,
    HintResult, NodeInfo, NodeScore, Plugin, PreFilterPlugin, PreFilterResult, PreScorePlugin,
    QueueingHint, ScorePlugin, Snapshot, Status, MAX_NODE_SCORE,
};
use rkube_model::convert;
use rkube_model::selector::Operator;
use rkube_model::{NodeSelector, Pod, PreferredSchedulingTerm};

use crate::helper::{default_normalize_score, required_node_affinity_matches};

/// Upstream name.
pub const NAME: &str = "NodeAffinity";
/// Upstream's reason for the pod's own affinity/selector.
pub const ERR_REASON_POD: &str = "node(s) didn't match Pod's node affinity/selector";
/// Upstream's reason for the profile's `addedAffinity`.
pub const ERR_REASON_ENFORCED: &str = "node(s) didn't match scheduler-enforced node affinity";
/// Upstream's reason for contradicting `metadata.name` field selectors.
pub const ERR_REASON_CONFLICT: &str = "pod affinity terms conflict";

/// The plugin.
#[derive(Default)]
pub struct NodeAffinity {
    added_node_selector: Option<NodeSelector>,
    added_pref_terms: Vec<PreferredSchedulingTerm>,
}

/// Builds the plugin from `NodeAffinityArgs`.
pub fn new(args: &serde_json::Value, path: &str) -> Result<Arc<dyn Plugin>, String> {
    let a: NodeAffinityArgs = decode(args, path).map_err(|e| e.to_string())?;
    let mut pl = NodeAffinity::default();
    if let Some(added) = a.added_affinity {
        let p = format!("{path}.addedAffinity");
        if let Some(req) = &added.required_during_scheduling_ignored_during_execution {
            pl.added_node_selector = Some(
                convert::node_selector(
                    req,
                    &format!("{p}.requiredDuringSchedulingIgnoredDuringExecution"),
                )
                .map_err(|e| e.to_string())?,
            );
        }
        for (i, t) in added
            .preferred_during_scheduling_ignored_during_execution
            .iter()
            .flatten()
            .enumerate()
        {
            let sel = convert::node_selector(
                &k8s_node_selector(t.preference.clone()),
                &format!("{p}.preferredDuringSchedulingIgnoredDuringExecution[{i}]"),
            )
            .map_err(|e| e.to_string())?;
            pl.added_pref_terms.push(PreferredSchedulingTerm {
                weight: t.weight,
                term: sel.terms.into_iter().next().unwrap_or_default(),
            });
        }
    }
    Ok(Arc::new(pl))
}

fn k8s_node_selector(
    term: k8s_openapi::api::core::v1::NodeSelectorTerm,
) -> k8s_openapi::api::core::v1::NodeSelector {
    k8s_openapi::api::core::v1::NodeSelector {
        node_selector_terms: vec![term],
    }
}

fn preferred_score(terms: &[PreferredSchedulingTerm], node: &rkube_model::Node) -> i64 {
    terms
        .iter()
        .filter(|t| t.weight != 0 && t.term.matches(&node.name, &node.labels))
        .map(|t| t.weight as i64)
        .sum()
}

impl Plugin for NodeAffinity {
    fn as_sign(&self) -> Option<&dyn rkube_framework::SignPlugin> {
        Some(self)
    }
    fn name(&self) -> &'static str {
        NAME
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        let added = self.added_node_selector.clone();
        Some(vec![ClusterEventWithHint::with_hint(
            EventResource::Node,
            ActionType::ADD | ActionType::UPDATE_NODE_LABEL,
            move |pod, old, new, _| is_schedulable_after_node_change(added.as_ref(), pod, old, new),
        )])
    }
}

/// A node was added or relabelled: does it now match the profile's
/// `addedAffinity` and the pod's required node affinity, where it did not
/// match the pod before?
pub fn is_schedulable_after_node_change(
    added: Option<&NodeSelector>,
    pod: &Pod,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> HintResult {
    let (original, modified) = objects_as::<rkube_model::Node>(old, new)?;
    let modified = modified.ok_or("no modified node")?;
    if added.is_some_and(|a| !a.matches(&modified.name, &modified.labels)) {
        return Ok(QueueingHint::QueueSkip);
    }
    if !required_node_affinity_matches(pod, modified) {
        return Ok(QueueingHint::QueueSkip);
    }
    match original {
        Some(o) if required_node_affinity_matches(pod, o) => Ok(QueueingHint::QueueSkip),
        _ => Ok(QueueingHint::Queue),
    }
}

impl PreFilterPlugin for NodeAffinity {
    fn pre_filter(&self, _: &mut CycleState, pod: &Pod, _: &Snapshot) -> (PreFilterResult, Status) {
        let required = pod.node_affinity.as_ref().and_then(|a| a.required.as_ref());
        // k8s-openapi cannot tell an absent nodeSelector from an empty one; an
        // empty selector matches every node either way.
        if required.is_none() && self.added_node_selector.is_none() && pod.node_selector.is_empty()
        {
            return (None, Status::skip());
        }
        let Some(required) = required.filter(|r| !r.terms.is_empty()) else {
            return (None, Status::success());
        };
        let mut names: Option<BTreeSet<String>> = None;
        for t in &required.terms {
            let mut term_names: Option<BTreeSet<String>> = None;
            for r in &t.match_fields {
                if r.key == "metadata.name" && r.op == Operator::In {
                    let s: BTreeSet<String> = r.values.iter().cloned().collect();
                    term_names = Some(match term_names {
                        None => s,
                        Some(prev) => prev.intersection(&s).cloned().collect(),
                    });
                }
            }
            let Some(term_names) = term_names else {
                return (None, Status::success());
            };
            names.get_or_insert_with(BTreeSet::new).extend(term_names);
        }
        match names {
            Some(n) if n.is_empty() => (
                None,
                Status::new(Code::UnschedulableAndUnresolvable, ERR_REASON_CONFLICT),
            ),
            Some(n) => (Some(n), Status::success()),
            None => (None, Status::success()),
        }
    }
}

impl FilterPlugin for NodeAffinity {
    fn filter(&self, _: &CycleState, pod: &Pod, node: &NodeInfo) -> Status {
        if let Some(sel) = &self.added_node_selector {
            if !sel.matches(&node.node.name, &node.node.labels) {
                return Status::new(Code::UnschedulableAndUnresolvable, ERR_REASON_ENFORCED);
            }
        }
        if required_node_affinity_matches(pod, &node.node) {
            Status::success()
        } else {
            Status::new(Code::UnschedulableAndUnresolvable, ERR_REASON_POD)
        }
    }
}

impl PreScorePlugin for NodeAffinity {
    fn pre_score(&self, _: &mut CycleState, pod: &Pod, _: &[&NodeInfo], _: &Snapshot) -> Status {
        let has_pref = pod
            .node_affinity
            .as_ref()
            .is_some_and(|a| !a.preferred.is_empty());
        if !has_pref && self.added_pref_terms.is_empty() {
            return Status::skip();
        }
        Status::success()
    }
}

impl ScorePlugin for NodeAffinity {
    fn score(&self, _: &CycleState, pod: &Pod, node: &NodeInfo) -> Result<i64, Status> {
        let mut count = preferred_score(&self.added_pref_terms, &node.node);
        if let Some(a) = &pod.node_affinity {
            count += preferred_score(&a.preferred, &node.node);
        }
        Ok(count)
    }
    fn has_normalize(&self) -> bool {
        true
    }
    fn normalize(&self, _: &CycleState, _: &Pod, scores: &mut [NodeScore]) -> Status {
        default_normalize_score(MAX_NODE_SCORE, false, scores)
    }
}

/// The batching signature of this plugin (OpportunisticBatching).
impl rkube_framework::SignPlugin for NodeAffinity {
    fn sign(
        &self,
        pod: &rkube_model::Pod,
        _: &rkube_framework::Snapshot,
    ) -> rkube_framework::Signed {
        crate::signers::fragments(crate::signers::node_affinity(pod))
    }
}

#[cfg(test)]
mod tests {
    //! The hint, with upstream's `Test_isSchedulableAfterNodeChange` cases.

    use super::*;
    use crate::helper::testing::*;
    use rkube_model::{NodeAffinity as Affinity, NodeSelectorTerm};

    fn selector(key: &str, value: &str) -> NodeSelector {
        NodeSelector {
            terms: vec![NodeSelectorTerm {
                match_expressions: vec![in_req(key, &[value])],
                ..Default::default()
            }],
        }
    }

    #[test]
    fn node_change() {
        // st.MakePod().NodeAffinityIn("foo", ["bar"])
        let mut p = pod("p");
        p.node_affinity = Some(Affinity {
            required: Some(selector("foo", "bar")),
            preferred: Vec::new(),
        });
        let hint = |added: Option<NodeSelector>, old: Option<rkube_model::Node>, new| {
            run(
                |p, o, n, _| is_schedulable_after_node_change(added.as_ref(), p, o, n),
                &p,
                old.map(node_obj),
                Some(node_obj(new)),
            )
        };
        let plain = || node("n", &[]);
        let foo = || node("n", &[("foo", "bar")]);
        let mut bigger = plain();
        bigger.allocatable.milli_cpu = 1000;
        let mut bigger_foo = foo();
        bigger_foo.allocatable.milli_cpu = 1000;
        let wrong = pod_obj(pod("x"));
        assert!(is_schedulable_after_node_change(None, &p, None, Some(&wrong)).is_err());
        assert!(
            is_schedulable_after_node_change(None, &p, Some(&wrong), Some(&node_obj(plain())))
                .is_err()
        );
        assert_eq!(hint(None, None, plain()), QueueSkip, "skip-queue-on-add");
        assert_eq!(hint(None, None, foo()), Queue, "queue-on-add");
        assert_eq!(
            hint(None, Some(plain()), bigger),
            QueueSkip,
            "skip-unrelated-changes"
        );
        assert_eq!(
            hint(None, Some(plain()), node("n", &[("k", "v")])),
            QueueSkip,
            "skip-unrelated-changes-on-labels"
        );
        assert_eq!(
            hint(None, Some(foo()), node("n", &[("k", "v")])),
            QueueSkip,
            "skip-labels-changes-on-node-from-suitable-to-unsuitable"
        );
        assert_eq!(
            hint(None, Some(plain()), foo()),
            Queue,
            "queue-on-labels-change-makes-pod-schedulable"
        );
        assert_eq!(
            hint(None, Some(foo()), bigger_foo),
            QueueSkip,
            "skip-unrelated-change-that-keeps-pod-schedulable"
        );
        assert_eq!(
            hint(Some(selector("foo", "bar")), None, plain()),
            QueueSkip,
            "skip-queue-on-add-scheduler-enforced-node-affinity"
        );
        assert_eq!(
            hint(Some(selector("foo", "bar")), None, foo()),
            Queue,
            "queue-on-add-scheduler-enforced-node-affinity"
        );
        // Registered for node additions and label updates only.
        let events = NodeAffinity::default().events_to_register().unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(
            events[0].event.action,
            ActionType::ADD | ActionType::UPDATE_NODE_LABEL
        );
    }
}
