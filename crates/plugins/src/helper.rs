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
