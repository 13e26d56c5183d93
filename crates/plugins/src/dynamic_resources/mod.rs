//! DynamicResources: a pod's ResourceClaims must be allocatable on the
//! node, as v1.37's plugin decides (`pkg/scheduler/framework/plugins/
//! dynamicresources`, default gates).
//!
//! - PreEnqueue keeps a pod out while a claim is missing, being deleted, or
//!   not yet generated from its template.
//! - PreFilter finds the claims, checks that every request's DeviceClass
//!   exists, and, when some claim is unallocated, prepares the structured
//!   allocator over what other claims already hold.
//! - Filter rejects a node where an allocated claim is not available, or
//!   where the unallocated claims cannot all be allocated; the allocations
//!   for each feasible node are kept for Score, Reserve and PreBind.
//! - PostFilter deallocates one claim that was allocated for nodes the pod
//!   cannot use and that no other pod reserves (the host clears its
//!   allocation; the claim's update lets the pod be retried), before
//!   preemption is tried.
//! - Score prefers nodes where `firstAvailable` requests got an earlier
//!   choice (8 − index per choice, normalized to 0–100).
//! - Reserve puts the chosen node's allocations in the host's cache (later
//!   pods see the devices as taken); Unreserve restores the claims.
//! - PreBind writes each allocation, the delete-protection finalizer and
//!   the pod's `reservedFor` entry to the claim.
//!
//! Both hosts give the plugin the DRA objects: the simulator from the
//! cluster file, the live scheduler from its informers (with Reserve's
//! allocations assumed until the API server confirms them). A host
//! without them would have a pod with claims refused with an explicit
//! reason rather than placed as if its claims did not exist.
//!
//! Extended resources backed by DRA (a DeviceClass's
//! `extendedResourceName`) are allocated through a claim the plugin makes
//! for the pod: see [`extended`].
//!
//! Devices with binding conditions are waited for in PreBind, and claims
//! whose devices failed or timed out are unavailable in Filter: see
//! [`binding_conditions`].

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use rkube_dra::allocator::{AllocatedState, Allocator, Exhausted, Failure, SelectorMemo};
use rkube_dra::cel::Cache;
use rkube_dra::pools::SliceIndex;
use rkube_framework::{
    ActionType, AssumeCache, ClusterApi, ClusterEventWithHint, Code, CycleState, EventResource,
    FilterPlugin, NodeInfo, NodeScore, NodeToStatus, Plugin, PostFilterHandle, PostFilterPlugin,
    PostFilterResult, PreBindPlugin, PreEnqueuePlugin, PreFilterPlugin, PreFilterResult,
    ReservePlugin, ScorePlugin, Snapshot, Status,
};
use rkube_model::dra::{
    Allocation, ClaimKey, Consumer, Dra, RequestMapping, ResourceClaim, ResourceSlice,
};
use rkube_model::Pod;

pub mod binding_conditions;
pub mod extended;
pub mod pod_group;
use extended::OnNode;

use crate::helper::FastMap;

pub use rkube_dra::resourceclaim::pod_claims;

/// Upstream name.
pub const NAME: &str = "DynamicResources";
/// The unallocated claims cannot all be allocated on the node.
pub const ERR_CANNOT_ALLOCATE: &str = "cannot allocate all claims";
/// An allocated claim's node selector excludes the node.
pub const ERR_NOT_AVAILABLE: &str = "resourceclaim not available on the node";
/// PostFilter's reason after deallocating an idle claim.
pub const DEALLOCATED: &str = "deallocation of ResourceClaim completed";
/// The most `firstAvailable` subrequests (`FirstAvailableDeviceRequestMaxSize`).
const FIRST_AVAILABLE_MAX: i64 = 8;
/// Why a pod with claims is refused by a host without DRA objects.
pub const NOT_WATCHED: &str =
    "this host does not provide DynamicResourceAllocation objects (ResourceClaims, ResourceSlices, DeviceClasses)";

/// The plugin.
pub struct DynamicResources {
    cache: Arc<Cache>,
    /// `bindingTimeout`.
    binding_timeout: std::time::Duration,
    /// The slice index of the last slice list seen (slices are shared
    /// between snapshots until one changes).
    index: Mutex<Option<SliceCache>>,
    /// What the claims of the last DRA view seen hold; the next view's is
    /// derived from it when claims were only allocated in between (one
    /// pod's Reserve), as upstream's DRA manager tracks allocated devices
    /// from claim events instead of recounting them per pod.
    allocated: Mutex<Option<(SeenClaims, Arc<AllocatedState>)>>,
}

/// The claims the allocated state was counted from: shared, not copied,
/// and not the cluster's `Dra` itself, which the host can then change in
/// place when Reserve assumes a claim instead of copying its claim map.
type SeenClaims = Vec<(ClaimKey, Arc<ResourceClaim>)>;

fn seen_claims(dra: &Dra) -> SeenClaims {
    dra.claims
        .iter()
        .map(|(k, c)| (k.clone(), c.clone()))
        .collect()
}

/// What the plugin keeps per slice list: its index and the selector
/// results on its devices (the list is held, so devices stay put).
type SliceCache = (
    Arc<Vec<ResourceSlice>>,
    Arc<SliceIndex>,
    Arc<SelectorMemo>,
    Arc<Exhausted>,
);

/// Allocations kept as a layer over the counted state before recounting.
const LAYER_MAX: usize = 256;

/// The allocations `new` holds beyond `old`'s, or `None` when some claim
/// lost or changed its allocation (the state must be recounted).
fn added_allocations<'a>(old: &SeenClaims, new: &'a Dra) -> Option<Vec<&'a Allocation>> {
    use std::cmp::Ordering;
    let mut added = Vec::new();
    let mut o = old.iter().map(|(k, c)| (k, c)).peekable();
    let mut n = new.claims.iter().peekable();
    loop {
        let order = match (o.peek(), n.peek()) {
            (None, None) => return Some(added),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            // A claim both maps still share keeps its key: no strings to
            // compare (a copied map shares all but the changed entries).
            (Some((ok, _)), Some((nk, _))) if Arc::ptr_eq(ok, nk) => Ordering::Equal,
            (Some((ok, _)), Some((nk, _))) => ok.cmp(nk),
        };
        match order {
            Ordering::Less => {
                let (_, gone) = o.next()?;
                if gone.allocation.is_some() {
                    return None;
                }
            }
            Ordering::Greater => {
                let (_, c) = n.next()?;
                added.extend(c.allocation.as_ref());
            }
            Ordering::Equal => {
                let ((_, was), (_, now)) = (o.next()?, n.next()?);
                if Arc::ptr_eq(was, now) || was.allocation == now.allocation {
                    continue;
                }
                if was.allocation.is_some() {
                    return None;
                }
                added.extend(now.allocation.as_ref());
            }
        }
    }
}

impl DynamicResources {
    fn allocated_state(&self, dra: &Dra) -> Arc<AllocatedState> {
        let mut last = self.allocated.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((seen, state)) = last.as_mut() {
            if let Some(added) = added_allocations(seen, dra) {
                // A layer over the last base; recounted when it grows.
                // Cycles done with the state have let go of it, so it is
                // usually changed in place, not copied.
                if state.layer_len() > LAYER_MAX {
                    *state = Arc::new(AllocatedState::on_top(state));
                }
                if added.is_empty() {
                    return state.clone();
                }
                let next = Arc::make_mut(state);
                for a in added {
                    next.add(a);
                }
                if next.layer_len() <= LAYER_MAX {
                    *seen = seen_claims(dra);
                    return state.clone();
                }
            }
        }
        let state = Arc::new(AllocatedState::of(dra));
        *last = Some((seen_claims(dra), state.clone()));
        state
    }

    fn slice_index(&self, dra: &Dra) -> (Arc<SliceIndex>, Arc<SelectorMemo>, Arc<Exhausted>) {
        let mut last = self.index.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((slices, ix, memo, exhausted)) = last.as_ref() {
            if Arc::ptr_eq(slices, &dra.slices) {
                return (ix.clone(), memo.clone(), exhausted.clone());
            }
        }
        let ix = Arc::new(SliceIndex::new(&dra.slices));
        let memo = Arc::new(SelectorMemo::default());
        let exhausted = Arc::new(Exhausted::default());
        *last = Some((
            dra.slices.clone(),
            ix.clone(),
            memo.clone(),
            exhausted.clone(),
        ));
        (ix, memo, exhausted)
    }
}

/// Builds the plugin (its arguments are validated by the config layer;
/// rkube bounds allocation by work, not by `filterTimeout`).
pub fn new(args: &serde_json::Value, _: &str) -> Result<Arc<dyn Plugin>, String> {
    let binding_timeout = args
        .get("bindingTimeout")
        .and_then(|v| v.as_str())
        .map(|v| {
            rkube_util::duration::parse_duration(v)
                .ok_or_else(|| format!("bindingTimeout: invalid duration {v:?}"))
        })
        .transpose()?
        .unwrap_or(binding_conditions::DEFAULT_TIMEOUT);
    Ok(Arc::new(DynamicResources {
        binding_timeout,
        cache: Arc::new(Cache::default()),
        index: Mutex::new(None),
        allocated: Mutex::new(None),
    }))
}

/// A claim of the pod and, when allocated, where it can be used.
struct ClaimInfo {
    claim: ResourceClaim,
}

/// The cycle's view of the pod's claims.
struct State {
    claims: Vec<ClaimInfo>,
    /// Indices (into `claims`) of the unallocated claims.
    to_allocate: Vec<usize>,
    /// Index (into `claims`, the last one) of the claim for the pod's
    /// extended resources backed by DRA.
    extended: Option<usize>,
    /// The cluster's classes and slices (its claims are in `claims`; not
    /// holding the cluster's own `Dra` lets Reserve's host change it in
    /// place).
    dra: Arc<Dra>,
    index: Arc<SliceIndex>,
    memo: Arc<SelectorMemo>,
    /// Nodes found with every device held (kept per slice list).
    exhausted: Arc<Exhausted>,
    allocated: Arc<AllocatedState>,
    /// What Filter allocated, per feasible node.
    by_node: Mutex<FastMap<String, NodeAllocation>>,
    /// Claims found unavailable on some node.
    unavailable: Mutex<BTreeSet<usize>>,
    /// Allocated claims whose devices failed their binding conditions or
    /// waited too long for them: unavailable on every node.
    binding_failed: Vec<usize>,
}

/// Filter's allocation on one node.
#[derive(Clone)]
struct NodeAllocation {
    /// Allocations of `to_allocate`, in order; the extended-resource
    /// claim's only when the node needs one (`extended`). `Later` when
    /// Filter only found that they exist: Reserve allocates again on the
    /// chosen node, with the same inputs, instead of every feasible node
    /// keeping allocations no one reads.
    allocations: Allocations,
    /// The extended-resource claim as this node needs it, and which
    /// container request each of its device requests serves.
    extended: Option<(ResourceClaim, Vec<RequestMapping>)>,
}

impl State {
    /// The claims to allocate on a node, the extended-resource claim
    /// replaced by the node's version of it (left out when the node needs
    /// none).
    fn to_allocate_on<'a>(
        &'a self,
        node_claim: Option<&'a ResourceClaim>,
    ) -> impl Iterator<Item = (usize, &'a ResourceClaim)> {
        self.to_allocate.iter().filter_map(move |&i| {
            if Some(i) == self.extended {
                node_claim.map(|c| (i, c))
            } else {
                Some((i, &self.claims[i].claim))
            }
        })
    }
}

/// A node's allocations, or what Reserve needs to make them again.
#[derive(Clone)]
enum Allocations {
    Built(Vec<Allocation>),
    Later(Arc<rkube_model::Node>),
}

impl State {
    /// Allocates the claims on `node` as Filter did.
    fn allocate(
        &self,
        cache: &Cache,
        pod: &Pod,
        node: &rkube_model::Node,
        claims: &[&ResourceClaim],
        build: bool,
    ) -> Result<Option<Vec<Allocation>>, Failure> {
        let allocator = Allocator::new(&self.dra, &self.allocated, cache)
            .with_index(&self.index)
            .with_memo(&self.memo)
            .with_exhausted(&self.exhausted)
            .with_share_seed(&pod.uid);
        if build {
            return allocator.allocate(node, claims);
        }
        // A node found with every device held stays so while the state
        // only grows: claims that need devices of their own fail there
        // without a search, as the search would.
        let own_devices = Allocator::needs_free_devices(claims);
        if own_devices && allocator.known_exhausted(node) {
            return Ok(None);
        }
        let found = allocator.feasible(node, claims)?;
        if !found && own_devices {
            allocator.note_if_exhausted(node);
        }
        Ok(found.then(Vec::new))
    }
}

/// Reserve's result: the claims as they were, to restore.
struct Reserved {
    originals: Vec<ResourceClaim>,
    allocated: Vec<(usize, Allocation)>,
    /// The in-memory extended-resource claim as Reserve assumed it (with
    /// its allocation), and its request mappings.
    extended: Option<(ResourceClaim, Vec<RequestMapping>)>,
}

const RESERVED: &str = "DynamicResources/reserved";

fn unresolvable(msg: impl Into<std::borrow::Cow<'static, str>>) -> Status {
    Status::new(Code::UnschedulableAndUnresolvable, msg)
}

impl Plugin for DynamicResources {
    fn as_sign(&self) -> Option<&dyn rkube_framework::SignPlugin> {
        Some(self)
    }
    fn name(&self) -> &'static str {
        NAME
    }
    fn as_pre_enqueue(&self) -> Option<&dyn PreEnqueuePlugin> {
        Some(self)
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn as_post_filter(&self) -> Option<&dyn PostFilterPlugin> {
        Some(self)
    }
    fn as_pod_group_post_filter(&self) -> Option<&dyn rkube_framework::PodGroupPostFilterPlugin> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
    fn as_reserve(&self) -> Option<&dyn ReservePlugin> {
        Some(self)
    }
    fn as_pre_bind(&self) -> Option<&dyn PreBindPlugin> {
        Some(self)
    }
    /// Upstream's registrations, without their hints (rkube re-queues on
    /// every such event).
    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        use ActionType as A;
        use EventResource as R;
        Some(vec![
            ClusterEventWithHint::always(
                R::Node,
                A::ADD | A::UPDATE_NODE_LABEL | A::UPDATE_NODE_ALLOCATABLE,
            ),
            ClusterEventWithHint::always(R::ResourceClaim, A::ADD | A::UPDATE | A::DELETE),
            ClusterEventWithHint::always(R::TargetPod, A::UPDATE_POD_GENERATED_RESOURCE_CLAIM),
            ClusterEventWithHint::always(R::DeviceClass, A::ADD | A::UPDATE),
            ClusterEventWithHint::always(R::ResourceSlice, A::ADD | A::UPDATE),
        ])
    }
}

impl PreEnqueuePlugin for DynamicResources {
    fn pre_enqueue(&self, pod: &Pod, ctx: &rkube_framework::EnqueueContext<'_>) -> Status {
        let dra: Option<&Dra> = ctx.dra;
        if !pod.has_resource_claims() {
            return Status::success();
        }
        let Some(dra) = dra else {
            return unresolvable(NOT_WATCHED);
        };
        match pod_claims(pod, dra) {
            Ok(_) => Status::success(),
            Err(e) => unresolvable(e),
        }
    }
}

/// PreFilter's check of one request's class.
fn check_class(dra: &Dra, request: &str, class: &str) -> Result<(), Status> {
    if class.is_empty() {
        return Err(Status::error(format!(
            "request {request}: unsupported request type"
        )));
    }
    if !dra.classes.contains_key(class) {
        return Err(unresolvable(format!(
            "request {request}: device class {class} does not exist"
        )));
    }
    Ok(())
}

impl PreFilterPlugin for DynamicResources {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let has_claims = pod.has_resource_claims();
        if !has_claims && pod.fit_requests().scalar.is_empty() {
            return (None, Status::skip());
        }
        let Some(dra) = snapshot.dra.as_ref() else {
            if has_claims {
                return (None, unresolvable(NOT_WATCHED));
            }
            return (None, Status::skip());
        };
        let mut found: Vec<ResourceClaim> = if has_claims {
            match pod_claims(pod, dra) {
                Ok(c) => c.into_iter().cloned().collect(),
                Err(e) => return (None, unresolvable(e)),
            }
        } else {
            Vec::new()
        };
        let mut extended = None;
        if !dra.served_requests(pod.fit_requests()).is_empty() {
            extended = Some(found.len());
            found.push(extended::claim_for(pod, dra));
        }
        if found.is_empty() {
            return (None, Status::skip());
        }
        let mut to_allocate = Vec::new();
        for (i, claim) in found.iter().enumerate() {
            if claim.allocation.is_some() {
                continue;
            }
            to_allocate.push(i);
            if Some(i) == extended {
                // Its requests are the node's to decide (Filter).
                continue;
            }
            for r in &claim.spec.requests {
                if let Some(e) = &r.exactly {
                    if let Err(s) = check_class(dra, &r.name, &e.device_class_name) {
                        return (None, s);
                    }
                } else if !r.first_available.is_empty() {
                    for sub in &r.first_available {
                        let name = format!("{}/{}", r.name, sub.name);
                        if let Err(s) = check_class(dra, &name, &sub.device_class_name) {
                            return (None, s);
                        }
                    }
                } else {
                    return (
                        None,
                        unresolvable(format!(
                            "resource claim {}/{}, request {}: unknown request type",
                            claim.namespace, claim.name, r.name
                        )),
                    );
                }
            }
        }
        let now = binding_conditions::now();
        let binding_failed = found
            .iter()
            .enumerate()
            .filter(|(_, c)| {
                c.allocation.is_some()
                    && match binding_conditions::ready(c) {
                        Err(_) => true,
                        Ok(ready) => {
                            !ready && binding_conditions::timed_out(c, self.binding_timeout, now)
                        }
                    }
            })
            .map(|(i, _)| i)
            .collect();
        let claims = found.into_iter().map(|claim| ClaimInfo { claim }).collect();
        let allocated = if to_allocate.is_empty() {
            Arc::default()
        } else {
            self.allocated_state(dra)
        };
        let (index, memo, exhausted) = self.slice_index(dra);
        let classes_and_slices = Arc::new(Dra {
            classes: dra.classes.clone(),
            slices: dra.slices.clone(),
            ..Dra::default()
        });
        state.write(
            NAME,
            State {
                claims,
                to_allocate,
                extended,
                dra: classes_and_slices,
                index,
                memo,
                exhausted,
                allocated,
                by_node: Mutex::new(FastMap::default()),
                unavailable: Mutex::new(BTreeSet::new()),
                binding_failed,
            },
        );
        (None, Status::success())
    }
}

impl FilterPlugin for DynamicResources {
    fn filter(&self, state: &CycleState, pod: &Pod, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<State>(NAME) else {
            return Status::success();
        };
        let n = &node.node;
        let mut node_extended = None;
        if let Some(e) = s.extended {
            match extended::on_node(&s.claims[e].claim, pod, n, &s.dra) {
                Err(why) => return unresolvable(why),
                // Device plugins serve it all here, and no claim of the
                // pod's own needs checking.
                Ok(OnNode::Nothing) if s.claims.len() == 1 => return Status::success(),
                Ok(OnNode::Nothing) => {}
                Ok(OnNode::Allocate(c, m)) => node_extended = Some((*c, m)),
            }
        }
        let mut unavailable = Vec::new();
        for (i, c) in s.claims.iter().enumerate() {
            if let Some(sel) = c
                .claim
                .allocation
                .as_ref()
                .and_then(|a| a.node_selector.as_ref())
            {
                if !sel.matches(&n.name, &n.labels) {
                    unavailable.push(i);
                    continue;
                }
            }
            if s.binding_failed.contains(&i) {
                unavailable.push(i);
            }
        }
        let claims: Vec<&ResourceClaim> = s
            .to_allocate_on(node_extended.as_ref().map(|(c, _)| c))
            .map(|(_, c)| c)
            .collect();
        if !claims.is_empty() {
            // Score reads the allocations only to weigh `firstAvailable`
            // choices; without any, Reserve builds the chosen node's.
            let build = claims.iter().any(|c| {
                c.spec
                    .requests
                    .iter()
                    .any(|r| !r.first_available.is_empty())
            });
            match s.allocate(&self.cache, pod, n, &claims, build) {
                Err(Failure::Timeout) => {
                    return Status::error(format!(
                        "node {}: timed out trying to allocate devices",
                        n.name
                    ))
                }
                Err(Failure::Node(m)) => return unresolvable(m),
                Err(Failure::Error(m)) => return Status::error(m),
                Ok(None) => return unresolvable(ERR_CANNOT_ALLOCATE),
                Ok(Some(allocations)) => {
                    if unavailable.is_empty() {
                        let allocations = if build {
                            Allocations::Built(allocations)
                        } else {
                            Allocations::Later(node.node.clone())
                        };
                        s.by_node.lock().unwrap_or_else(|e| e.into_inner()).insert(
                            n.name.clone(),
                            NodeAllocation {
                                allocations,
                                extended: node_extended,
                            },
                        );
                    }
                }
            }
        }
        if !unavailable.is_empty() {
            s.unavailable
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend(unavailable);
            return unresolvable(ERR_NOT_AVAILABLE);
        }
        Status::success()
    }
}

impl PostFilterPlugin for DynamicResources {
    /// Upstream picks one of the claims found unavailable at random (map
    /// order); rkube takes the first, one of upstream's possible choices.
    fn post_filter(
        &self,
        state: &CycleState,
        pod: &Pod,
        _: &NodeToStatus,
        _: &dyn PostFilterHandle,
    ) -> PostFilterResult {
        let nothing =
            || PostFilterResult::keep(Status::with_reasons(Code::Unschedulable, Vec::new()));
        let Some(s) = state.read::<State>(NAME) else {
            return nothing();
        };
        let unavailable = s.unavailable.lock().unwrap_or_else(|e| e.into_inner());
        let stale_extended = s
            .extended
            .map(|e| &s.claims[e].claim)
            .filter(|c| !extended::is_in_memory(c));
        for &i in unavailable.iter() {
            if Some(i) == s.extended {
                if stale_extended.is_some() {
                    break;
                }
                continue;
            }
            let c = &s.claims[i].claim;
            let idle = match c.reserved_for.as_slice() {
                [] => true,
                [only] => only.uid == pod.uid,
                _ => false,
            };
            if idle {
                let mut r = PostFilterResult::keep(Status::new(Code::Unschedulable, DEALLOCATED));
                r.deallocate_claims.push(c.key());
                return r;
            }
        }
        if let Some(c) = stale_extended {
            let mut r = PostFilterResult::keep(Status::new(Code::Unschedulable, extended::DELETED));
            r.delete_claims.push(c.key());
            return r;
        }
        nothing()
    }
}

impl ScorePlugin for DynamicResources {
    fn score(&self, state: &CycleState, _: &Pod, node: &NodeInfo) -> Result<i64, Status> {
        let Some(s) = state.read::<State>(NAME) else {
            return Ok(0);
        };
        let by_node = s.by_node.lock().unwrap_or_else(|e| e.into_inner());
        let Some(NodeAllocation {
            allocations: Allocations::Built(built),
            ..
        }) = by_node.get(node.name())
        else {
            // Not built: no claim has `firstAvailable` requests.
            return Ok(0);
        };
        let mut next = built.iter();
        let mut score = 0;
        // The extended-resource claim (last) has no `firstAvailable`.
        for c in &s.claims[..s.extended.unwrap_or(s.claims.len())] {
            let allocation = match &c.claim.allocation {
                Some(a) => a,
                None => match next.next() {
                    Some(a) => a,
                    None => break,
                },
            };
            let chosen: BTreeSet<&str> = allocation
                .devices
                .iter()
                .map(|d| d.request.as_str())
                .filter(|r| r.matches('/').count() == 1)
                .collect();
            for r in &c.claim.spec.requests {
                for (i, sub) in r.first_available.iter().enumerate() {
                    if chosen.contains(format!("{}/{}", r.name, sub.name).as_str()) {
                        score += FIRST_AVAILABLE_MAX - i as i64;
                    }
                }
            }
        }
        Ok(score)
    }

    fn has_normalize(&self) -> bool {
        true
    }

    fn normalize(&self, _: &CycleState, _: &Pod, scores: &mut [NodeScore]) -> Status {
        crate::helper::default_normalize_score(rkube_framework::MAX_NODE_SCORE, false, scores)
    }
}

impl ReservePlugin for DynamicResources {
    fn reserve(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        node: &str,
        cache: &mut dyn AssumeCache,
    ) -> Status {
        let Some(s) = state.read::<State>(NAME) else {
            return Status::success();
        };
        if s.to_allocate.is_empty() {
            return Status::success();
        }
        let found = s
            .by_node
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(node)
            .cloned();
        let Some(found) = found else {
            // Only the extended-resource claim was to be allocated, and
            // device plugins serve it all on this node.
            if s.to_allocate.iter().all(|&i| Some(i) == s.extended) {
                return Status::success();
            }
            return Status::error("claim allocation not found for node");
        };
        let node_claim = found.extended.as_ref().map(|(c, _)| c);
        let allocations = match found.allocations {
            Allocations::Built(a) => a,
            Allocations::Later(n) => {
                let claims: Vec<&ResourceClaim> =
                    s.to_allocate_on(node_claim).map(|(_, c)| c).collect();
                match s.allocate(&self.cache, pod, &n, &claims, true) {
                    Ok(Some(a)) => a,
                    Ok(None) => {
                        return Status::error(format!(
                            "internal error: node {node}: the claims Filter allocated no longer fit"
                        ))
                    }
                    Err(Failure::Node(m) | Failure::Error(m)) => return Status::error(m),
                    Err(Failure::Timeout) => {
                        return Status::error(format!(
                            "node {node}: timed out trying to allocate devices"
                        ))
                    }
                }
            }
        };
        let want = s.to_allocate_on(node_claim).count();
        if allocations.len() != want {
            return Status::error(format!(
                "internal error, have {} allocations, {want} claims to allocate, want {want} claims",
                allocations.len(),
            ));
        }
        let mut reserved = Reserved {
            originals: Vec::new(),
            allocated: Vec::new(),
            extended: None,
        };
        for ((i, claim), a) in s.to_allocate_on(node_claim).zip(allocations) {
            let mut c = claim.clone();
            c.protected = true;
            c.allocation = Some(a.clone());
            cache.assume_claim(&c);
            if Some(i) == s.extended && extended::is_in_memory(claim) {
                let mappings = found.extended.as_ref().map(|(_, m)| m.clone());
                reserved.extended = Some((c, mappings.unwrap_or_default()));
            } else {
                reserved.originals.push(s.claims[i].claim.clone());
            }
            reserved.allocated.push((i, a));
        }
        state.write(RESERVED, reserved);
        Status::success()
    }

    /// Restores the claims as they were; an in-memory extended-resource
    /// claim is forgotten. (A claim PreBind created and that a later step
    /// failed to use is found by the next cycle, refused and deleted in
    /// PostFilter: upstream deletes it here.)
    fn unreserve(&self, state: &mut CycleState, _: &Pod, _: &str, cache: &mut dyn AssumeCache) {
        if let Some(r) = state.read::<Reserved>(RESERVED) {
            for c in &r.originals {
                cache.assume_claim(c);
            }
            if let Some((c, _)) = &r.extended {
                cache.forget_claim(&c.namespace, &c.name);
            }
        }
    }
}

/// `reservedFor`'s entry for the pod.
fn consumer(pod: &Pod) -> Consumer {
    Consumer {
        api_group: String::new(),
        resource: "pods".into(),
        name: pod.name.clone(),
        uid: pod.uid.clone(),
    }
}

/// PreBind for the in-memory extended-resource claim: creates it, writes
/// its allocation and the pod's reservation, then the pod's request
/// mappings. A claim created but not completed is deleted again.
fn bind_extended_claim(
    api: &mut dyn ClusterApi,
    pod: &Pod,
    assumed: &ResourceClaim,
    mappings: &[RequestMapping],
) -> Result<ResourceClaim, Status> {
    let created = api.create_claim(assumed).map_err(Status::error)?;
    let (ns, name) = (&created.namespace, &created.name);
    let mut claim = created.clone();
    claim.allocation = assumed.allocation.clone();
    claim.reserved_for.push(consumer(pod));
    let mut result = api
        .update_claim_status(&claim)
        .map_err(|e| format!("add allocation and reservation to claim {ns}/{name}: {e}"));
    if let Ok(written) = result {
        result = if mappings.is_empty() {
            Err(format!(
                "nil or empty request mappings, no update of pod {}/{} ExtendedResourceClaimStatus",
                pod.namespace, pod.name
            ))
        } else {
            api.set_extended_resource_claim_status(pod, name, mappings)
                .map(|()| written)
        };
    }
    result.map_err(|e| {
        // Upstream's Unreserve deletes it; rkube's cannot reach the API.
        let _ = api.delete_claim(ns, name);
        Status::error(e)
    })
}

impl PreBindPlugin for DynamicResources {
    fn pre_bind_pre_flight(&self, state: &mut CycleState, _: &Pod, _: &str) -> Status {
        if state.read::<State>(NAME).is_some() {
            Status::success()
        } else {
            Status::skip()
        }
    }

    fn pre_bind(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        node: &str,
        api: &mut dyn ClusterApi,
    ) -> Status {
        let Some(s) = state.read::<State>(NAME) else {
            return Status::success();
        };
        let reserved_state = state.read::<Reserved>(RESERVED);
        let reserved: FastMap<usize, &Allocation> = reserved_state
            .map(|r| r.allocated.iter().map(|(i, a)| (*i, a)).collect())
            .unwrap_or_default();
        // The pod's claims as PreBind leaves them, for binding conditions.
        let mut bound: Vec<ResourceClaim> = Vec::new();
        for (i, info) in s.claims.iter().enumerate() {
            if info.claim.is_reserved_for(&pod.uid) {
                bound.push(info.claim.clone());
                continue;
            }
            let ours = reserved.get(&i);
            if Some(i) == s.extended {
                if ours.is_none() && info.claim.spec.requests.is_empty() {
                    // Device plugins serve the pod's extended resources.
                    continue;
                }
                if let Some((assumed, mappings)) = reserved_state.and_then(|r| r.extended.as_ref())
                {
                    match bind_extended_claim(api, pod, assumed, mappings) {
                        Ok(c) => bound.push(c),
                        Err(status) => return status,
                    }
                    continue;
                }
            }
            let (ns, name) = (&info.claim.namespace, &info.claim.name);
            let Some(mut claim) = api.resource_claim(ns, name) else {
                return Status::error(format!("claim {ns}/{name} got deleted in the meantime"));
            };
            if claim.deleting {
                return Status::error(format!("claim {ns}/{name} got deleted in the meantime"));
            }
            if let Some(a) = ours {
                // The host's own cache may already hold this allocation
                // (Reserve put it there); any other one is a conflict.
                if claim.allocation.as_ref().is_some_and(|have| have != *a) {
                    return Status::error(format!(
                        "claim {ns}/{name} got allocated elsewhere in the meantime"
                    ));
                }
                claim.allocation = Some((*a).clone());
            } else if claim.allocation.is_none() {
                return Status::error(format!(
                    "claim {ns}/{name} got deallocated elsewhere in the meantime"
                ));
            }
            claim.reserved_for.push(consumer(pod));
            match api.update_claim_status(&claim) {
                Ok(written) => bound.push(written),
                Err(e) => {
                    let what = if ours.is_some() {
                        "add allocation and reservation to claim"
                    } else {
                        "add reservation to claim"
                    };
                    return Status::error(format!("{what} {ns}/{name}: {e}"));
                }
            }
        }
        if bound.iter().any(binding_conditions::has_any) {
            api.event(
                "BindingConditionsPending",
                "Scheduling",
                &format!("waiting for binding conditions for device on node {node}"),
            );
            return self.wait_for_binding_conditions(api, &bound);
        }
        Status::success()
    }
}

impl DynamicResources {
    /// PreBind's wait (upstream polls every 5 s up to `bindingTimeout`):
    /// success once every device's binding conditions are true.
    fn wait_for_binding_conditions(
        &self,
        api: &mut dyn ClusterApi,
        claims: &[ResourceClaim],
    ) -> Status {
        let start = api.elapsed();
        loop {
            let mut all_ready = true;
            for c in claims {
                let Some(now) = api.resource_claim(&c.namespace, &c.name) else {
                    return Status::error(format!(
                        "resourceclaim.resource.k8s.io {:?} not found",
                        c.name
                    ));
                };
                match binding_conditions::ready(&now) {
                    Err(e) => return Status::error(e),
                    Ok(true) => {}
                    Ok(false) => {
                        if binding_conditions::timed_out(
                            &now,
                            self.binding_timeout,
                            binding_conditions::now(),
                        ) {
                            return Status::error(format!(
                                "device binding timeout: claim={}",
                                now.name
                            ));
                        }
                        all_ready = false;
                        break;
                    }
                }
            }
            if all_ready {
                return Status::success();
            }
            if api.elapsed().saturating_sub(start) >= self.binding_timeout {
                return Status::error("device binding timeout: context deadline exceeded");
            }
            api.sleep(binding_conditions::POLL);
        }
    }
}

/// A pod with resource claims is not batchable.
impl rkube_framework::SignPlugin for DynamicResources {
    fn sign(
        &self,
        pod: &rkube_model::Pod,
        _: &rkube_framework::Snapshot,
    ) -> rkube_framework::Signed {
        if pod.resource_claims.is_empty() {
            rkube_framework::Signed::Fragments(Vec::new())
        } else {
            rkube_framework::Signed::Refused
        }
    }
}
