//! NodeResourcesFit: the pod's requests must fit the node's free allocatable
//! (Filter), and nodes are ranked by a scoring strategy: LeastAllocated,
//! MostAllocated or RequestedToCapacityRatio (Score).

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use rkube_config::args::{decode, NodeResourcesFitArgs, ResourceSpec};
use rkube_config::validate::validate_fit_args;
use rkube_framework::events::objects_as;
use rkube_framework::{
    ActionType, ClusterEventWithHint, Code, CycleState, EventObject, EventResource, FilterPlugin,
    HintContext, HintResult, NodeInfo, Plugin, PreFilterPlugin, PreFilterResult, PreScorePlugin,
    QueueingHint, ScorePlugin, Snapshot, Status, MAX_NODE_SCORE,
};
use rkube_model::dra::{is_dra_extended_resource_name, Dra};
use rkube_model::resources::{is_extended_resource_name, Resources};
use rkube_model::{Node, Pod};

use super::resource_allocation::{pod_request_list, with_node_vectors, DraScoring, ResourceKind};

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

/// PreScore's: the pod's requests of the scored resources, and the DRA
/// side of scoring when a class serves one of them.
struct PodRequests(Vec<i64>, Option<DraScoring>);

/// The pod's extended resources that a DeviceClass serves (upstream's
/// `shouldDelegateResourceToDRA`): on a node that offers none of one as
/// allocatable, DynamicResources allocates devices for it instead, so this
/// plugin does not count it.
pub struct DraBacked(BTreeSet<String>);

impl DraBacked {
    /// Of `pod`'s requests, those a class in `dra` serves; `None` if none.
    pub fn of(pod: &Pod, dra: Option<&Dra>) -> Option<DraBacked> {
        let names: BTreeSet<String> = dra?
            .served_requests(pod.fit_requests())
            .into_keys()
            .collect();
        (!names.is_empty()).then_some(DraBacked(names))
    }

    /// Left to DynamicResources on `node`.
    pub fn delegates(&self, name: &str, node: &NodeInfo) -> bool {
        self.0.contains(name) && node.allocatable.scalar(name) <= 0
    }
}

const DRA_BACKED: &str = "NodeResourcesFit/draBacked";

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
    delegated: Option<&DraBacked>,
) -> bool {
    let req = pod.fit_requests();
    let alloc = &node.allocatable;
    let used = &node.requested;
    if node.pods.len() as i64 + 1 > alloc.allowed_pod_number {
        return false;
    }
    let ok = |want: i64, alloc: i64, used: i64| !(want > 0 && want > alloc.wrapping_sub(used));
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
            if delegated.is_some_and(|d| d.delegates(name, node)) {
                return true;
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
    delegated: Option<&DraBacked>,
) -> Vec<InsufficientResource> {
    let mut out = Vec::new();
    let req = pod.fit_requests();
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
        if want > 0 && want > alloc.wrapping_sub(used) {
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
        if delegated.is_some_and(|d| d.delegates(name, node)) {
            continue;
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
    capacity
        .wrapping_sub(requested)
        .wrapping_mul(MAX_NODE_SCORE)
        / capacity
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
    /// Upstream's list with InPlacePodVerticalScaling (GA, so the scale-down
    /// events) and without the DeviceClass event of DRA extended resources
    /// (rkube watches no DeviceClasses) or the alpha scale-up events.
    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        use ActionType as A;
        use EventResource as R;
        Some(vec![
            ClusterEventWithHint::with_hint(
                R::AssignedPod,
                A::DELETE,
                is_schedulable_after_assigned_pod_delete,
            ),
            ClusterEventWithHint::with_hint(
                R::Node,
                A::ADD | A::UPDATE_NODE_ALLOCATABLE,
                is_schedulable_after_node_change,
            ),
            // A class may start serving an extended resource the pod asks
            // for (upstream hints on the class's names; rkube re-queues).
            ClusterEventWithHint::always(R::DeviceClass, A::ADD | A::UPDATE),
            ClusterEventWithHint::with_hint(
                R::AssignedPod,
                A::UPDATE_POD_SCALE_DOWN,
                is_schedulable_after_assigned_pod_scale_down,
            ),
            ClusterEventWithHint::with_hint(
                R::TargetPod,
                A::UPDATE_POD_SCALE_DOWN,
                |_, _, _, _| Ok(QueueingHint::Queue),
            ),
        ])
    }
}

/// A scheduled (or nominated) pod was deleted: its resources may be free.
pub fn is_schedulable_after_assigned_pod_delete(
    _pod: &Pod,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
    _: &HintContext<'_>,
) -> HintResult {
    let (deleted, _) = objects_as::<Pod>(old, new)?;
    let deleted = deleted.ok_or("no deleted pod")?;
    if deleted.node_name.is_empty() && deleted.nominated_node_name.is_empty() {
        return Ok(QueueingHint::QueueSkip);
    }
    Ok(QueueingHint::Queue)
}

/// A scheduled pod's requests went down: does it free a resource the pod
/// asks for? (upstream's `haveEnoughRelevantResourcesDecreased`)
pub fn is_schedulable_after_assigned_pod_scale_down(
    pod: &Pod,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
    _: &HintContext<'_>,
) -> HintResult {
    let (original, modified) = objects_as::<Pod>(old, new)?;
    let (original, modified) = (
        original.ok_or("no original pod")?,
        modified.ok_or("no modified pod")?,
    );
    if modified.node_name.is_empty() {
        return Ok(QueueingHint::QueueSkip);
    }
    let (o, m, want) = (&original.requests, &modified.requests, &pod.requests);
    let decreased = (want.milli_cpu != 0 && o.milli_cpu > m.milli_cpu)
        || (want.memory != 0 && o.memory > m.memory)
        || (want.ephemeral_storage != 0 && o.ephemeral_storage > m.ephemeral_storage)
        || want
            .scalar
            .iter()
            .any(|(k, &v)| v != 0 && o.scalar(k) > m.scalar(k));
    Ok(if decreased {
        QueueingHint::Queue
    } else {
        QueueingHint::QueueSkip
    })
}

/// Upstream's `isFit`: the pod fits the node when it is empty (its
/// `fitsRequest` on a node without pods, no resource ignored, resources
/// left to DRA on that node not counted).
pub fn is_fit(pod: &Pod, node: &Node, dra: Option<&Dra>) -> bool {
    let (want, have) = (pod.fit_requests(), &node.allocatable);
    let ok = |w: i64, h: i64| w <= 0 || w <= h;
    have.allowed_pod_number >= 1
        && ok(want.milli_cpu, have.milli_cpu)
        && ok(want.memory, have.memory)
        && ok(want.ephemeral_storage, have.ephemeral_storage)
        && want.scalar.iter().all(|(k, &w)| {
            let h = have.scalar(k);
            ok(w, h)
                || (h <= 0
                    && is_dra_extended_resource_name(k)
                    && dra.is_some_and(|d| d.extended_resource_class(k).is_some()))
        })
}

/// Upstream's `haveAnyRequestedResourcesIncreased`: more pods allowed, or
/// more of a resource the pod asks for.
pub fn have_any_requested_resources_increased(pod: &Pod, original: &Node, modified: &Node) -> bool {
    let (o, m): (&Resources, &Resources) = (&original.allocatable, &modified.allocatable);
    if m.allowed_pod_number > o.allowed_pod_number {
        return true;
    }
    let r = pod.fit_requests();
    if r.milli_cpu == 0 && r.memory == 0 && r.ephemeral_storage == 0 && r.scalar.is_empty() {
        return false;
    }
    (r.milli_cpu > 0 && m.milli_cpu > o.milli_cpu)
        || (r.memory > 0 && m.memory > o.memory)
        || (r.ephemeral_storage > 0 && m.ephemeral_storage > o.ephemeral_storage)
        || r.scalar
            .iter()
            .any(|(k, &v)| v != 0 && m.scalar(k) > o.scalar(k))
}

/// A node was added, or its allocatable changed: does the pod fit it now,
/// where it did not have enough before?
pub fn is_schedulable_after_node_change(
    pod: &Pod,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
    cx: &HintContext<'_>,
) -> HintResult {
    let (original, modified) = objects_as::<Node>(old, new)?;
    let Some(modified) = modified.filter(|n| is_fit(pod, n, cx.dra)) else {
        return Ok(QueueingHint::QueueSkip);
    };
    match original {
        None => Ok(QueueingHint::Queue),
        Some(o) if have_any_requested_resources_increased(pod, o, modified) => {
            Ok(QueueingHint::Queue)
        }
        Some(_) => Ok(QueueingHint::QueueSkip),
    }
}

impl PreFilterPlugin for Fit {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        // The pod's requests are computed once, when the pod is loaded;
        // what is left is which of them DRA may serve.
        if let Some(d) = DraBacked::of(pod, snapshot.dra.as_deref()) {
            state.write(DRA_BACKED, d);
        }
        (None, Status::success())
    }
}

impl FilterPlugin for Fit {
    fn filter(&self, state: &CycleState, pod: &Pod, node: &NodeInfo) -> Status {
        let delegated = state.read::<DraBacked>(DRA_BACKED);
        if fits(
            pod,
            node,
            &self.ignored_resources,
            &self.ignored_resource_groups,
            delegated,
        ) {
            return Status::success();
        }
        let lacks = fits_request(
            pod,
            node,
            &self.ignored_resources,
            &self.ignored_resource_groups,
            delegated,
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
        snapshot: &Snapshot,
    ) -> Status {
        state.write(
            NAME,
            PodRequests(
                pod_request_list(pod, &self.resources, false),
                DraScoring::of(&self.resources, snapshot.dra.as_ref()),
            ),
        );
        Status::success()
    }
}

impl ScorePlugin for Fit {
    /// The pod's requests: the score reads only them and the node info
    /// (none when DRA serves a scored resource, which reads the claims).
    fn score_key(&self, state: &CycleState, _: &Pod) -> Option<Vec<i64>> {
        let r = state.read::<PodRequests>(NAME)?;
        (r.1.is_none() && !self.resources.is_empty()).then(|| r.0.clone())
    }

    fn score(&self, state: &CycleState, pod: &Pod, node: &NodeInfo) -> Result<i64, Status> {
        // Upstream's resourceAllocationScorer.score: no resources to score on.
        if self.resources.is_empty() {
            return Err(Status::error("resources not found"));
        }
        let owned;
        let (reqs, dra) = match state.read::<PodRequests>(NAME) {
            Some(r) => (&r.0, r.1.as_ref()),
            None => {
                owned = pod_request_list(pod, &self.resources, false);
                (&owned, None)
            }
        };
        Ok(with_node_vectors(
            node,
            &self.kinds,
            reqs,
            false,
            dra,
            |requested, _, allocatable| self.strategy_score(requested, allocatable),
        ))
    }
}

/// The batching signature of this plugin (OpportunisticBatching).
impl rkube_framework::SignPlugin for Fit {
    fn sign(
        &self,
        pod: &rkube_model::Pod,
        snapshot: &rkube_framework::Snapshot,
    ) -> rkube_framework::Signed {
        crate::noderesources::signature(pod, snapshot)
    }
}

#[cfg(test)]
mod tests {
    //! The hints, with upstream's `Test_isSchedulableAfter*` and
    //! `TestHaveAnyRequestedResourcesIncreased` cases.

    use super::*;
    use rkube_framework::HintContext;

    const EXT_A: &str = "example.com/aaa";
    const EXT_B: &str = "example.com/bbb";

    fn pod(milli_cpu: i64, memory: i64, scalar: &[(&str, i64)]) -> Pod {
        let mut p = Pod::default();
        p.requests.milli_cpu = milli_cpu;
        p.requests.memory = memory;
        p.requests.scalar = scalar.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        p
    }

    /// `st.MakeNode().Capacity(...)`: allocatable as given, 32 pods.
    fn node(milli_cpu: i64, memory: i64, scalar: &[(&str, i64)]) -> EventObject {
        let mut n = Node::default();
        n.allocatable.allowed_pod_number = 32;
        n.allocatable.milli_cpu = milli_cpu;
        n.allocatable.memory = memory;
        n.allocatable.scalar = scalar.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        EventObject::Node(Arc::new(n))
    }

    fn hint(p: &Pod, old: Option<&EventObject>, new: Option<&EventObject>) -> HintResult {
        is_schedulable_after_node_change(p, old, new, &HintContext::empty())
    }

    use QueueingHint::{Queue, QueueSkip};

    #[test]
    fn node_change() {
        let not_a_node = EventObject::Pod(Arc::new(Pod::default()));
        assert!(hint(&Pod::default(), None, Some(&not_a_node)).is_err());
        assert!(hint(&Pod::default(), Some(&not_a_node), Some(&node(0, 0, &[]))).is_err());
        let cases: [(&str, Pod, Option<EventObject>, EventObject, QueueingHint); 7] = [
            (
                "skip-queue-on-node-add-without-sufficient-resources",
                pod(0, 2, &[]),
                None,
                node(0, 1, &[]),
                QueueSkip,
            ),
            (
                "skip-queue-on-node-add-without-required-resource-type",
                pod(0, 0, &[(EXT_A, 1)]),
                None,
                node(0, 0, &[(EXT_B, 1)]),
                QueueSkip,
            ),
            (
                "queue-on-node-add-with-sufficient-resources",
                pod(0, 2, &[(EXT_A, 1)]),
                None,
                node(0, 4, &[(EXT_A, 2)]),
                Queue,
            ),
            (
                "skip-queue-on-node-unrelated-changes",
                pod(0, 2, &[(EXT_A, 1)]),
                Some(node(0, 2, &[(EXT_A, 2)])),
                node(0, 2, &[(EXT_A, 1), (EXT_B, 2)]),
                QueueSkip,
            ),
            (
                "queue-on-pod-requested-resources-increase",
                pod(0, 2, &[(EXT_A, 1)]),
                Some(node(0, 2, &[(EXT_A, 1)])),
                node(0, 2, &[(EXT_A, 2)]),
                Queue,
            ),
            (
                "skip-queue-on-node-changes-from-suitable-to-unsuitable",
                pod(0, 2, &[(EXT_A, 1)]),
                Some(node(0, 4, &[(EXT_A, 2)])),
                node(0, 1, &[(EXT_A, 2)]),
                QueueSkip,
            ),
            (
                "queue-on-node-changes-from-unsuitable-to-suitable",
                pod(0, 2, &[(EXT_A, 1)]),
                Some(node(0, 1, &[(EXT_A, 2)])),
                node(0, 4, &[(EXT_A, 2)]),
                Queue,
            ),
        ];
        for (name, p, old, new, want) in cases {
            assert_eq!(hint(&p, old.as_ref(), Some(&new)), Ok(want), "{name}");
        }
        // With a DeviceClass serving the resource, a node offering none of
        // it may still take the pod (DynamicResources allocates devices).
        let mut dra = Dra::default();
        Arc::make_mut(&mut dra.classes).insert(
            "gpu".into(),
            rkube_model::dra::DeviceClass {
                name: "gpu".into(),
                extended_resource_name: Some(EXT_A.into()),
                ..Default::default()
            },
        );
        let cx = HintContext {
            dra: Some(&dra),
            ..HintContext::empty()
        };
        let (p, n) = (pod(0, 0, &[(EXT_A, 1)]), node(0, 0, &[(EXT_B, 1)]));
        assert_eq!(
            is_schedulable_after_node_change(&p, None, Some(&n), &cx),
            Ok(Queue)
        );
        let p = pod(0, 0, &[(EXT_B, 2)]);
        assert_eq!(
            is_schedulable_after_node_change(&p, None, Some(&n), &cx),
            Ok(QueueSkip)
        );
    }

    #[test]
    fn is_fit_is_fits_request_on_an_empty_node() {
        let nodes = [
            node(1000, 4, &[(EXT_A, 2)]),
            node(0, 0, &[]),
            node(500, 1, &[(EXT_B, 1)]),
        ];
        let pods = [
            pod(0, 0, &[]),
            pod(1000, 4, &[(EXT_A, 2)]),
            pod(1001, 0, &[]),
            pod(0, 0, &[(EXT_B, 1)]),
            pod(0, 5, &[]),
        ];
        let mut no_pods = Node::default();
        no_pods.allocatable.milli_cpu = 1000;
        for n in nodes
            .iter()
            .filter_map(|n| match n {
                EventObject::Node(n) => Some(n.as_ref()),
                _ => None,
            })
            .chain([&no_pods])
        {
            let info = NodeInfo::new(Arc::new(n.clone()));
            for p in &pods {
                let want =
                    fits_request(p, &info, &HashSet::new(), &HashSet::new(), None).is_empty();
                assert_eq!(is_fit(p, n, None), want, "{p:?} on {n:?}");
            }
        }
    }

    #[test]
    fn requested_resources_increased() {
        // (pods, milli cpu, memory, ephemeral storage, example.com/aaa)
        let n = |(pods, cpu, mem, eph, a): (i64, i64, i64, i64, i64)| {
            let mut n = Node::default();
            n.allocatable.allowed_pod_number = pods;
            n.allocatable.milli_cpu = cpu;
            n.allocatable.memory = mem;
            n.allocatable.ephemeral_storage = eph;
            if a > 0 {
                n.allocatable.scalar.insert(EXT_A.into(), a);
            }
            n
        };
        let mut big = pod(2, 2, &[(EXT_A, 2)]);
        big.requests.ephemeral_storage = 2;
        // Upstream's TestHaveAnyRequestedResourcesIncreased cases (without DRA).
        let cases = [
            (
                "no-requested-resources",
                pod(0, 0, &[]),
                (1, 1000, 1, 1, 1),
                (1, 2000, 2, 2, 2),
                false,
            ),
            (
                "no-requested-resources-pods-increased",
                pod(0, 0, &[]),
                (1, 1000, 1, 1, 1),
                (2, 1000, 1, 1, 1),
                true,
            ),
            (
                "scalar-resources-not-in-node",
                big,
                (32, 1000, 2, 3, 0),
                (32, 1000, 2, 1, 0),
                false,
            ),
        ];
        for (name, p, o, m, want) in cases {
            assert_eq!(
                have_any_requested_resources_increased(&p, &n(o), &n(m)),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn assigned_pod_delete_and_scale_down() {
        let cx = HintContext::empty();
        let p = pod(1000, 0, &[]);
        let unscheduled = EventObject::Pod(Arc::new(pod(1000, 0, &[])));
        assert_eq!(
            is_schedulable_after_assigned_pod_delete(&p, Some(&unscheduled), None, &cx),
            Ok(QueueSkip)
        );
        let mut nominated = pod(1000, 0, &[]);
        nominated.nominated_node_name = "n".into();
        let nominated = EventObject::Pod(Arc::new(nominated));
        assert_eq!(
            is_schedulable_after_assigned_pod_delete(&p, Some(&nominated), None, &cx),
            Ok(Queue)
        );
        let bound = |cpu, mem| {
            let mut b = pod(cpu, mem, &[]);
            b.node_name = "n".into();
            EventObject::Pod(Arc::new(b))
        };
        // Upstream's Test_isSchedulableAfterAssignedPodScaleDown cases.
        assert_eq!(
            is_schedulable_after_assigned_pod_scale_down(
                &p,
                Some(&bound(1000, 0)),
                Some(&bound(500, 0)),
                &cx
            ),
            Ok(Queue),
            "the requested cpu went down"
        );
        assert_eq!(
            is_schedulable_after_assigned_pod_scale_down(
                &p,
                Some(&bound(1000, 2)),
                Some(&bound(1000, 1)),
                &cx
            ),
            Ok(QueueSkip),
            "only memory, which the pod does not request, went down"
        );
        assert_eq!(
            is_schedulable_after_assigned_pod_scale_down(
                &p,
                Some(&unscheduled),
                Some(&EventObject::Pod(Arc::new(pod(500, 0, &[])))),
                &cx
            ),
            Ok(QueueSkip),
            "an unscheduled pod frees nothing"
        );
    }
}
