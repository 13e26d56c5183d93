//! Shared helpers (upstream's `plugins/helper`).

use rkube_framework::{CycleState, NodeScore, Status};
use rkube_model::{Pod, Taint, TaintEffect, Toleration};

/// Upstream's `DefaultNormalizeScore`: scale to `0..=max` by the highest
/// score; `reverse` flips it (lower raw is better).
pub fn default_normalize_score(max: i64, reverse: bool, scores: &mut [NodeScore]) -> Status {
    let max_count = scores.iter().map(|s| s.score).max().unwrap_or(0).max(0);
    if max_count == 0 {
        if reverse {
            for s in scores.iter_mut() {
                s.score = max;
            }
        }
        return Status::success();
    }
    for s in scores.iter_mut() {
        let mut v = max * s.score / max_count;
        if reverse {
            v = max - v;
        }
        s.score = v;
    }
    Status::success()
}

/// True when any toleration tolerates the taint.
pub fn tolerations_tolerate(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| t.tolerates(taint))
}

/// First taint with a NoSchedule/NoExecute effect that no toleration tolerates.
pub fn find_untolerated_do_not_schedule<'a>(
    taints: &'a [Taint],
    tolerations: &[Toleration],
) -> Option<&'a Taint> {
    taints.iter().find(|t| {
        matches!(t.effect, TaintEffect::NoSchedule | TaintEffect::NoExecute)
            && !tolerations_tolerate(tolerations, t)
    })
}

/// Does the pod's `nodeSelector` and required node affinity match the node?
/// (component-helpers' `GetRequiredNodeAffinity(pod).Match(node)`)
pub fn required_node_affinity_matches(pod: &Pod, node: &rkube_model::Node) -> bool {
    if !pod
        .node_selector
        .iter()
        .all(|(k, v)| node.labels.get(k) == Some(v))
    {
        return false;
    }
    match pod.node_affinity.as_ref().and_then(|a| a.required.as_ref()) {
        Some(sel) => sel.matches(&node.name, &node.labels),
        None => true,
    }
}

/// A PreFilter extension (AddPod/RemovePod) update of a plugin's state,
/// copy-on-write; `None` when PreFilter stored no state under `key`.
pub fn update_pre_filter_state<T: std::any::Any + Send + Sync + Clone>(
    state: &mut CycleState,
    key: &'static str,
    update: impl FnOnce(&mut T),
) -> Option<()> {
    state.read_mut::<T>(key).map(update)
}

pub use rkube_framework::fast_hash::{FastMap, FastSet};

/// Builders for the hint tests (upstream's `st.MakePod()`/`st.MakeNode()`,
/// reduced to what the hints read).
#[cfg(test)]
pub(crate) mod testing {
    use std::sync::Arc;

    use rkube_framework::{EventObject, HintContext, HintResult, QueueingHint};
    use rkube_model::selector::{Operator, Requirement};
    use rkube_model::{Labels, Node, Pod};

    /// Labels from pairs.
    pub fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// `key In (values)`.
    pub fn in_req(key: &str, values: &[&str]) -> Requirement {
        Requirement {
            key: key.into(),
            op: Operator::In,
            values: values.iter().map(|v| v.to_string()).collect(),
        }
    }

    /// A node with labels.
    pub fn node(name: &str, l: &[(&str, &str)]) -> Node {
        Node {
            name: name.into(),
            labels: labels(l),
            ..Default::default()
        }
    }

    /// As an event object.
    pub fn node_obj(n: Node) -> EventObject {
        EventObject::Node(Arc::new(n))
    }

    /// As an event object.
    pub fn pod_obj(p: Pod) -> EventObject {
        EventObject::Pod(Arc::new(p))
    }

    /// A pod in `default`.
    pub fn pod(name: &str) -> Pod {
        Pod {
            name: name.into(),
            namespace: "default".into(),
            uid: name.into(),
            ..Default::default()
        }
    }

    /// Runs a hint without context and unwraps it (errors as `Queue`).
    pub fn run(
        f: impl Fn(&Pod, Option<&EventObject>, Option<&EventObject>, &HintContext<'_>) -> HintResult,
        pod: &Pod,
        old: Option<EventObject>,
        new: Option<EventObject>,
    ) -> QueueingHint {
        f(pod, old.as_ref(), new.as_ref(), &HintContext::empty()).unwrap_or(QueueingHint::Queue)
    }

    pub use QueueingHint::{Queue, QueueSkip};
}
