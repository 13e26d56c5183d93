//! NodeResourcesBalancedAllocation (v1.37 formula): favours placements that
//! make the node's resource fractions more even. The score compares the
//! spread of fractions with and without the pod:
//! `50 + (50 + score(with pod) − score(without pod)) / 2`, using actual
//! requests (no non-zero defaults); best-effort pods skip it.

use std::sync::Arc;

use rkube_config::args::{decode, NodeResourcesBalancedAllocationArgs, ResourceSpec};
use rkube_config::validate::validate_plugin_args;
use rkube_framework::{
    CycleState, NodeInfo, Plugin, PreScorePlugin, ScorePlugin, Snapshot, Status, MAX_NODE_SCORE,
};
use rkube_model::Pod;

use super::resource_allocation::{
    pod_request_list, with_node_vectors, with_scratch, DraScoring, ResourceKind,
};

/// Upstream name.
pub const NAME: &str = "NodeResourcesBalancedAllocation";

/// The plugin.
pub struct BalancedAllocation {
    resources: Vec<ResourceSpec>,
    kinds: Vec<ResourceKind>,
}

/// PreScore's: the pod's requests of the scored resources, and the DRA
/// side of scoring when a class serves one of them.
struct PodRequests(Vec<i64>, Option<DraScoring>);

/// Builds the plugin from `NodeResourcesBalancedAllocationArgs`.
pub fn new(args: &serde_json::Value, path: &str) -> Result<Arc<dyn Plugin>, String> {
    let errs = validate_plugin_args(NAME, args, path);
    if !errs.is_empty() {
        return Err(errs.to_string());
    }
    let a: NodeResourcesBalancedAllocationArgs = decode(args, path).map_err(|e| e.to_string())?;
    Ok(Arc::new(BalancedAllocation {
        kinds: ResourceKind::of_specs(&a.resources),
        resources: a.resources,
    }))
}

/// `(1 − std) × 100` of the capped fractions `requested/allocatable`.
pub fn balanced_resource_score(requested: &[i64], allocatable: &[i64]) -> i64 {
    with_scratch(requested.len(), |buf: &mut [f64]| {
        balanced_resource_score_in(requested, allocatable, buf)
    })
}

/// [`balanced_resource_score`] with scratch space for the fractions.
fn balanced_resource_score_in(requested: &[i64], allocatable: &[i64], buf: &mut [f64]) -> i64 {
    let mut len = 0;
    let mut total = 0.0;
    for i in 0..requested.len() {
        if allocatable[i] == 0 {
            continue;
        }
        let f = (requested[i] as f64 / allocatable[i] as f64).min(1.0);
        total += f;
        buf[len] = f;
        len += 1;
    }
    let fractions = &buf[..len];
    let std = match fractions.len() {
        0 | 1 => 0.0,
        2 => ((fractions[0] - fractions[1]) / 2.0).abs(),
        n => {
            let mean = total / n as f64;
            let sum: f64 = fractions.iter().map(|f| (f - mean) * (f - mean)).sum();
            (sum / n as f64).sqrt()
        }
    };
    ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
}

/// The v1.37 scorer: relative improvement in balance.
pub fn balanced_resource_scorer(requested: &[i64], allocated: &[i64], allocatable: &[i64]) -> i64 {
    let with_pod = balanced_resource_score(requested, allocatable);
    let without_pod = balanced_resource_score(allocated, allocatable);
    // Wrapping as Go's int64: a node whose bound pods' requests summed past
    // 2^63 has negative fractions, and scores far outside [0, 100] (which
    // the framework then refuses, as upstream's does).
    let diff = (MAX_NODE_SCORE / 2)
        .wrapping_add(with_pod)
        .wrapping_sub(without_pod);
    (MAX_NODE_SCORE / 2).wrapping_add(diff / 2)
}

impl Plugin for BalancedAllocation {
    fn as_sign(&self) -> Option<&dyn rkube_framework::SignPlugin> {
        Some(self)
    }
    fn name(&self) -> &'static str {
        NAME
    }
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}

impl PreScorePlugin for BalancedAllocation {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        _: &[&NodeInfo],
        snapshot: &Snapshot,
    ) -> Status {
        let reqs = pod_request_list(pod, &self.resources, true);
        if reqs.iter().all(|&r| r == 0) {
            return Status::skip();
        }
        let dra = DraScoring::of(&self.resources, snapshot.dra.as_ref());
        state.write(NAME, PodRequests(reqs, dra));
        Status::success()
    }
}

impl ScorePlugin for BalancedAllocation {
    /// The pod's requests: the score reads only them and the node info
    /// (none when DRA serves a scored resource, which reads the claims).
    fn score_key(&self, state: &CycleState, _: &Pod) -> Option<Vec<i64>> {
        let r = state.read::<PodRequests>(NAME)?;
        r.1.is_none().then(|| r.0.clone())
    }

    fn score(&self, state: &CycleState, pod: &Pod, node: &NodeInfo) -> Result<i64, Status> {
        let owned;
        let (reqs, dra) = match state.read::<PodRequests>(NAME) {
            Some(r) => (&r.0, r.1.as_ref()),
            None => {
                owned = pod_request_list(pod, &self.resources, true);
                if owned.iter().all(|&r| r == 0) {
                    return Ok(0);
                }
                (&owned, None)
            }
        };
        Ok(with_node_vectors(
            node,
            &self.kinds,
            reqs,
            true,
            dra,
            balanced_resource_scorer,
        ))
    }
}

/// The batching signature of this plugin (OpportunisticBatching).
impl rkube_framework::SignPlugin for BalancedAllocation {
    fn sign(
        &self,
        pod: &rkube_model::Pod,
        snapshot: &rkube_framework::Snapshot,
    ) -> rkube_framework::Signed {
        crate::noderesources::signature(pod, snapshot)
    }
}
