//! NodeResourcesFit: the pod's requests must fit the node's free allocatable
//! (Filter), and nodes are ranked by a scoring strategy: LeastAllocated,
//! MostAllocated or RequestedToCapacityRatio (Score).

use std::collections::HashSet;
use std::sync::Arc;

use rkube_config::args::{decode, NodeResourcesFitArgs, ResourceSpec};
use rkube_config::validate::validate_fit_args;
use rkube_framework::{
    Code, CycleState, FilterPlugin, NodeInfo, Plugin, PreFilterPlugin, PreFilterResult,
    PreScorePlugin, ScorePlugin, Snapshot, Status, MAX_NODE_SCORE,
};
use rkube_model::resources::is_extended_resource_name;
use rkube_model::Pod;

use super::resource_allocation::{pod_request_list, with_node_vectors, ResourceKind};

/// Upstream name.
pub const NAME: &str = "NodeResourcesFit";

/// A scoring strategy.
#[derive(Debug, Clone)]
pub enum Strategy {
    /// Prefer nodes with more free resources.
    LeastAllocated,
    /// Prefer nodes with fewer free resources.
    MostAllocated,
    /// A broken-linear function of utilization, with `(utilization, score×10)` points.
    RequestedToCapacityRatio(Vec<(i64, i64)>),
}

/// The plugin.
pub struct Fit {
    ignored_resources: HashSet<String>,
    ignored_resource_groups: HashSet<String>,
    strategy: Strategy,
    resources: Vec<ResourceSpec>,
    kinds: Vec<ResourceKind>,
}

/// One resource the node lacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InsufficientResource {
    /// Resource name.
    pub name: String,
    /// `Insufficient cpu`, `Too many pods`, ...
    pub reason: String,
    /// The pod asks for more than the node's whole allocatable.
    pub unresolvable: bool,
}

struct PodRequests(Vec<i64>);

/// Builds the plugin from `NodeResourcesFitArgs` (validated as upstream's `NewFit`).
pub fn new(args: &serde_json::Value, path: &str) -> Result<Arc<dyn Plugin>, String> {
    let a: NodeResourcesFitArgs = decode(args, path).map_err(|e| e.to_string())?;
    validate_fit_args(&a, path).map_err(|e| e.to_string())?;
    let s = a.scoring_strategy.clone().expect("validated");
    let strategy = match s.type_.as_str() {
        "LeastAllocated" => Strategy::LeastAllocated,
        "MostAllocated" => Strategy::MostAllocated,
        _ => Strategy::RequestedToCapacityRatio(
            s.requested_to_capacity_ratio
                .map(|r| r.shape)
                .unwrap_or_default()
                .into_iter()
                .map(|p| (p.utilization as i64, p.score as i64 * (MAX_NODE_SCORE / 10)))
                .collect(),
        ),
    };
    Ok(Arc::new(Fit {
        ignored_resources: a.ignored_resources.into_iter().collect(),
        ignored_resource_groups: a.ignored_resource_groups.into_iter().collect(),
        strategy,
        kinds: ResourceKind::of_specs(&s.resources),
        resources: s.resources,
    }))
}

/// True when [`fits_request`] would find nothing lacking (the filter's
/// common case, decided without building reasons).
fn fits(
    pod: &Pod,
    node: &NodeInfo,
    ignored: &HashSet<String>,
    ignored_groups: &HashSet<String>,
) -> bool {
    let req = &pod.requests;
    let alloc = &node.allocatable;
    let used = &node.requested;
    if node.pods.len() as i64 + 1 > alloc.allowed_pod_number {
        return false;
    }
    let ok = |want: i64, alloc: i64, used: i64| !(want > 0 && want > alloc - used);
    ok(req.milli_cpu, alloc.milli_cpu, used.milli_cpu)
        && ok(req.memory, alloc.memory, used.memory)
        && ok(
            req.ephemeral_storage,
            alloc.ephemeral_storage,
            used.ephemeral_storage,
        )
        && req.scalar.iter().all(|(name, &want)| {
            if want == 0 {
                return true;
            }
            if is_extended_resource_name(name) {
                let prefix = name.split('/').next().unwrap_or("");
                if ignored.contains(name) || ignored_groups.contains(prefix) {
                    return true;
                }
            }
            ok(want, alloc.scalar(name), used.scalar(name))
        })
}

/// Upstream's `fitsRequest`: what the node lacks for the pod.
pub fn fits_request(
    pod: &Pod,
    node: &NodeInfo,
    ignored: &HashSet<String>,
    ignored_groups: &HashSet<String>,
) -> Vec<InsufficientResource> {
    let mut out = Vec::new();
    let req = &pod.requests;
    let alloc = &node.allocatable;
    let used = &node.requested;
    if node.pods.len() as i64 + 1 > alloc.allowed_pod_number {
        out.push(InsufficientResource {
            name: "pods".into(),
            reason: "Too many pods".into(),
            unresolvable: false,
        });
    }
    if req.milli_cpu == 0 && req.memory == 0 && req.ephemeral_storage == 0 && req.scalar.is_empty()
    {
        return out;
    }
    let mut check = |name: &str, want: i64, alloc: i64, used: i64| {
        if want > 0 && want > alloc - used {
            out.push(InsufficientResource {
                name: name.to_string(),
                reason: format!("Insufficient {name}"),
                unresolvable: want > alloc,
            });
        }
    };
    check("cpu", req.milli_cpu, alloc.milli_cpu, used.milli_cpu);
    check("memory", req.memory, alloc.memory, used.memory);
    check(
        "ephemeral-storage",
        req.ephemeral_storage,
        alloc.ephemeral_storage,
        used.ephemeral_storage,
    );
    for (name, &want) in &req.scalar {
        if want == 0 {
            continue;
        }
        if is_extended_resource_name(name) {
            let prefix = name.split('/').next().unwrap_or("");
            if ignored.contains(name) || ignored_groups.contains(prefix) {
                continue;
            }
        }
        check(name, want, alloc.scalar(name), used.scalar(name));
    }
    out
}

fn least_requested_score(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 || requested > capacity {
        return 0;
    }
    // Go's int64 arithmetic wraps on absurd capacities; so does this.
    (capacity - requested).wrapping_mul(MAX_NODE_SCORE) / capacity
}

fn most_requested_score(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 {
        return 0;
    }
    requested.min(capacity).wrapping_mul(MAX_NODE_SCORE) / capacity
}

/// Upstream's `BuildBrokenLinearFunction`.
pub fn broken_linear(shape: &[(i64, i64)], p: i64) -> i64 {
    for i in 0..shape.len() {
        if p <= shape[i].0 {
            if i == 0 {
                return shape[0].1;
            }
            let (u0, s0) = shape[i - 1];
            let (u1, s1) = shape[i];
            return s0 + (s1 - s0) * (p - u0) / (u1 - u0);
        }
    }
    shape.last().map_or(0, |s| s.1)
}

impl Fit {
    /// The strategy's score for requested/allocatable vectors.
    pub fn strategy_score(&self, requested: &[i64], allocatable: &[i64]) -> i64 {
        let (mut node_score, mut weight_sum) = (0i64, 0i64);
        for i in 0..requested.len() {
            if allocatable[i] == 0 {
                continue;
            }
            let w = self.resources[i].weight;
            let s = match &self.strategy {
                Strategy::LeastAllocated => least_requested_score(requested[i], allocatable[i]),
                Strategy::MostAllocated => most_requested_score(requested[i], allocatable[i]),
                Strategy::RequestedToCapacityRatio(shape) => {
                    let s = if requested[i] > allocatable[i] {
                        broken_linear(shape, 100)
                    } else {
                        broken_linear(shape, requested[i].wrapping_mul(100) / allocatable[i])
                    };
                    if s <= 0 {
                        continue;
                    }
                    s
                }
            };
            node_score += s * w;
            weight_sum += w;
        }
        if weight_sum == 0 {
            return 0;
        }
        match self.strategy {
            Strategy::RequestedToCapacityRatio(_) => {
                (node_score as f64 / weight_sum as f64).round() as i64
            }
            _ => node_score / weight_sum,
        }
    }
}

impl Plugin for Fit {
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
}

impl PreFilterPlugin for Fit {
    fn pre_filter(&self, _: &mut CycleState, _: &Pod, _: &Snapshot) -> (PreFilterResult, Status) {
        // The pod's requests are computed once, when the pod is loaded.
        (None, Status::success())
    }
}

impl FilterPlugin for Fit {
    fn filter(&self, _: &CycleState, pod: &Pod, node: &NodeInfo) -> Status {
        if fits(
            pod,
            node,
            &self.ignored_resources,
            &self.ignored_resource_groups,
        ) {
            return Status::success();
        }
        let lacks = fits_request(
            pod,
            node,
            &self.ignored_resources,
            &self.ignored_resource_groups,
        );
        if lacks.is_empty() {
            return Status::success();
        }
        let code = if lacks.iter().any(|r| r.unresolvable) {
            Code::UnschedulableAndUnresolvable
        } else {
            Code::Unschedulable
        };
        Status::with_reasons(code, lacks.into_iter().map(|r| r.reason).collect())
    }
}

impl PreScorePlugin for Fit {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        _: &[&NodeInfo],
        _: &Snapshot,
    ) -> Status {
        state.write(
            NAME,
            PodRequests(pod_request_list(pod, &self.resources, false)),
        );
        Status::success()
    }
}

impl ScorePlugin for Fit {
    fn score(&self, state: &CycleState, pod: &Pod, node: &NodeInfo) -> Result<i64, Status> {
        // Upstream's resourceAllocationScorer.score: no resources to score on.
        if self.resources.is_empty() {
            return Err(Status::error("resources not found"));
        }
        let owned;
        let reqs = match state.read::<PodRequests>(NAME) {
            Some(r) => &r.0,
            None => {
                owned = pod_request_list(pod, &self.resources, false);
                &owned
            }
        };
        Ok(with_node_vectors(
            node,
            &self.kinds,
            reqs,
            false,
            |requested, _, allocatable| self.strategy_score(requested, allocatable),
        ))
    }
}
