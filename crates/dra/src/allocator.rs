//! The structured allocator, as v1.37's "incubating" implementation (the
//! one the default feature gates select) decides: for one node, find
//! devices for every request of every claim, first fit, depth first with
//! backtracking. Claims in order, requests in order, devices in pool order
//! (see [`crate::pools`]); within one request devices are tried as
//! combinations in pool order, never permutations. The first complete
//! solution wins; there is no scoring.
//!
//! The outcome is upstream's three-way contract: the allocations (one per
//! claim), `None` (cannot allocate on this node), or an error. Errors are
//! fatal to the scheduling attempt ([`Failure::Error`]) except "invalid
//! resource pools were encountered", a rejection of the node only
//! ([`Failure::Node`]).
//!
//! Upstream bounds the search with the Filter timeout (10 s). rkube bounds
//! it by work instead, so that results do not depend on the machine: past
//! [`STEP_BUDGET`] search steps on one node the allocation fails as a
//! timeout would.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use rkube_model::dra::{
    AllocatedConfig, Allocation, AllocationMode, AttrValue, Device, DeviceClass, DeviceResult, Dra,
    ExactRequest, ResourceClaim, ResourceSlice,
};
use rkube_model::selector::{NodeSelector, NodeSelectorTerm, Operator, Requirement};
use rkube_model::{Node, Quantity};
use rkube_util::fast_hash::{FastMap, FastSet};

use crate::capacity;
use crate::cel::{Cache, DeviceView};
use crate::pools::{self, Pool};

/// The most devices one claim's allocation may hold
/// (`AllocationResultsMaxSize`).
pub const MAX_RESULTS: usize = 32;

/// Search steps allowed on one node before the allocation counts as timed
/// out (upstream: the 10 s `filterTimeout`).
pub const STEP_BUDGET: u64 = 2_000_000;

/// `driver/pool/device`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct DeviceId {
    /// Driver.
    pub driver: String,
    /// Pool.
    pub pool: String,
    /// Device.
    pub device: String,
}

/// A device named by borrowed parts: maps keyed by [`DeviceId`] are
/// looked up with it, without building (allocating) an ID per check.
trait DeviceKey {
    fn parts(&self) -> (&str, &str, &str);
    /// [`pools::device_hash`] of the parts.
    fn id_hash(&self) -> u64;
}

impl DeviceKey for DeviceId {
    fn parts(&self) -> (&str, &str, &str) {
        (&self.driver, &self.pool, &self.device)
    }
    fn id_hash(&self) -> u64 {
        pools::device_hash(&self.driver, &self.pool, &self.device)
    }
}

/// Driver, pool and device, borrowed, with their hash.
#[derive(Clone, Copy)]
struct DeviceName<'a> {
    parts: (&'a str, &'a str, &'a str),
    hash: u64,
}

impl<'a> DeviceName<'a> {
    fn new(driver: &'a str, pool: &'a str, device: &'a str) -> Self {
        DeviceName {
            parts: (driver, pool, device),
            hash: pools::device_hash(driver, pool, device),
        }
    }
}

impl DeviceKey for DeviceName<'_> {
    fn parts(&self) -> (&str, &str, &str) {
        self.parts
    }
    fn id_hash(&self) -> u64 {
        self.hash
    }
}

impl std::hash::Hash for dyn DeviceKey + '_ {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        h.write_u64(self.id_hash());
    }
}

impl PartialEq for dyn DeviceKey + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for dyn DeviceKey + '_ {}

// Hashes exactly as `dyn DeviceKey` does, which `Borrow` requires.
impl std::hash::Hash for DeviceId {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        (self as &dyn DeviceKey).hash(h);
    }
}

impl<'a> std::borrow::Borrow<dyn DeviceKey + 'a> for DeviceId {
    fn borrow(&self) -> &(dyn DeviceKey + 'a) {
        self
    }
}

impl std::fmt::Display for DeviceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{}", self.driver, self.pool, self.device)
    }
}

/// What existing claims already hold (upstream's `AllocatedState`),
/// possibly as a few allocations on top of a shared base (what a sequence
/// of scheduling cycles adds, one pod at a time, without recounting every
/// claim of the cluster).
#[derive(Debug, Clone)]
pub struct AllocatedState {
    /// Devices held exclusively.
    devices: FastSet<DeviceId>,
    /// Shares of devices allowing multiple allocations (device, shareID).
    shared: FastSet<(DeviceId, String)>,
    /// Capacity held by shares, summed per device.
    capacity: FastMap<DeviceId, BTreeMap<String, Quantity>>,
    /// What is held besides (itself without a base).
    base: Option<Arc<AllocatedState>>,
    /// Which counted state this one grew from (only [`AllocatedState::add`]
    /// changes a state after it is made: what it holds only grows), and
    /// how many times it grew since.
    lineage: Lineage,
}

/// A state's lineage: the same `epoch` and at least the same `grown`
/// means at least as much held. (A copy that grows is the lineage's
/// newest; what was copied is never grown again by its owner, the
/// DynamicResources plugin, which grows only its newest state.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lineage {
    epoch: u64,
    grown: u64,
}

impl Lineage {
    fn new() -> Self {
        use std::sync::atomic::{AtomicU64, Ordering};
        static EPOCHS: AtomicU64 = AtomicU64::new(1);
        Lineage {
            epoch: EPOCHS.fetch_add(1, Ordering::Relaxed),
            grown: 0,
        }
    }

    /// A state of this lineage holds at least what `earlier` did.
    fn includes(&self, earlier: &Lineage) -> bool {
        self.epoch == earlier.epoch && self.grown >= earlier.grown
    }
}

impl Default for AllocatedState {
    fn default() -> Self {
        AllocatedState {
            devices: FastSet::default(),
            shared: FastSet::default(),
            capacity: FastMap::default(),
            base: None,
            lineage: Lineage::new(),
        }
    }
}

impl AllocatedState {
    /// An empty layer over `base` (flattened: the base's own base is
    /// merged into the new base first).
    pub fn on_top(base: &Arc<AllocatedState>) -> Self {
        let lineage = base.lineage;
        let base = match &base.base {
            None => base.clone(),
            Some(_) => Arc::new(base.flattened()),
        };
        AllocatedState {
            devices: FastSet::default(),
            shared: FastSet::default(),
            capacity: FastMap::default(),
            base: Some(base),
            lineage,
        }
    }

    /// Entries in this layer (not counting the base).
    pub fn layer_len(&self) -> usize {
        self.devices.len() + self.shared.len()
    }

    /// One state holding this layer and its base.
    pub fn flattened(&self) -> AllocatedState {
        let mut out = match &self.base {
            Some(b) => b.flattened(),
            None => AllocatedState::default(),
        };
        out.devices.extend(self.devices.iter().cloned());
        out.shared.extend(self.shared.iter().cloned());
        for (id, held) in &self.capacity {
            let e = out.capacity.entry(id.clone()).or_default();
            for (k, q) in held {
                let v = e.entry(k.clone()).or_default();
                *v = v.checked_add(q);
            }
        }
        out.lineage = self.lineage;
        out
    }

    /// Held exclusively by some claim.
    pub fn holds(&self, id: &DeviceId) -> bool {
        self.holds_key(id)
    }

    fn holds_key(&self, id: &dyn DeviceKey) -> bool {
        self.devices.contains(id) || self.base.as_ref().is_some_and(|b| b.holds_key(id))
    }

    /// Some share of the device is held (every share adds a capacity
    /// entry, if only an empty one, in its layer).
    fn has_shares(&self, id: &dyn DeviceKey) -> bool {
        self.capacity.contains_key(id) || self.base.as_ref().is_some_and(|b| b.has_shares(id))
    }

    /// Capacity held by the device's shares, summed over the layers.
    fn capacity_held(&self, id: &dyn DeviceKey) -> Option<BTreeMap<String, Quantity>> {
        let below = self.base.as_ref().and_then(|b| b.capacity_held(id));
        match (self.capacity.get(id), below) {
            (None, b) => b,
            (Some(c), None) => Some(c.clone()),
            (Some(c), Some(mut b)) => {
                for (k, q) in c {
                    let v = b.entry(k.clone()).or_default();
                    *v = v.checked_add(q);
                }
                Some(b)
            }
        }
    }

    /// Adds an allocation's devices (admin-access results hold nothing).
    pub fn add(&mut self, a: &Allocation) {
        self.lineage.grown += 1;
        for r in &a.devices {
            if r.admin_access {
                continue;
            }
            let id = DeviceId {
                driver: r.driver.clone(),
                pool: r.pool.clone(),
                device: r.device.clone(),
            };
            match &r.share_id {
                Some(share) => {
                    let held = self.capacity.entry(id.clone()).or_default();
                    for (k, q) in &r.consumed_capacity {
                        let e = held.entry(k.clone()).or_default();
                        *e = e.checked_add(q);
                    }
                    self.shared.insert((id, share.clone()));
                }
                None => {
                    self.devices.insert(id);
                }
            }
        }
    }

    /// The state of every allocated claim of a cluster.
    pub fn of(dra: &Dra) -> Self {
        let mut s = AllocatedState::default();
        for c in dra.claims.values() {
            if let Some(a) = &c.allocation {
                s.add(a);
            }
        }
        s
    }

    /// Held in any way (exclusively, shared, or with capacity): upstream's
    /// `IsDeviceAllocated`.
    pub fn is_allocated(&self, id: &DeviceId) -> bool {
        self.is_allocated_key(id)
    }

    fn is_allocated_key(&self, id: &dyn DeviceKey) -> bool {
        self.holds_key(id) || self.has_shares(id)
    }
}

/// Why an allocation could not be computed.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// A fatal error (upstream: the Filter returns Error).
    Error(String),
    /// The node cannot be used (invalid pools).
    Node(String),
    /// The search ran past [`STEP_BUDGET`].
    Timeout,
}

/// CEL selector results by (compiled selector, device), shared by the
/// scheduling cycles that see the same slices: a device's attributes do
/// not change while its slice does not.
#[derive(Debug, Default)]
pub struct SelectorMemo {
    results: std::sync::RwLock<FastMap<(usize, usize), bool>>,
}

impl SelectorMemo {
    fn get(&self, key: (usize, usize)) -> Option<bool> {
        self.results
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .copied()
    }

    fn put(&self, key: (usize, usize), matched: bool) {
        self.results
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, matched);
    }
}

/// Nodes found with every device held, and in which state: while the
/// allocated state only grows (same lineage) and the slices stay (this is
/// kept beside their index), such a node has no device for a request
/// that needs one of its own.
#[derive(Debug, Default)]
pub struct Exhausted {
    nodes: std::sync::RwLock<FastMap<String, Lineage>>,
}

/// Nodes recorded in [`Exhausted`] before it starts over.
const EXHAUSTED_MAX: usize = 1 << 17;

/// The allocator for one scheduling attempt.
pub struct Allocator<'a> {
    dra: &'a Dra,
    state: &'a AllocatedState,
    cache: &'a Cache,
    index: Option<&'a pools::SliceIndex>,
    exhausted: Option<&'a Exhausted>,
    memo: Option<&'a SelectorMemo>,
    /// Shares get deterministic IDs (upstream draws random UUIDs).
    share_seed: String,
}

/// `ns/name`, or `name` without a namespace (klog's `KObj`).
fn kobj(c: &ResourceClaim) -> String {
    if c.namespace.is_empty() {
        c.name.clone()
    } else {
        format!("{}/{}", c.namespace, c.name)
    }
}

/// One request, or one subrequest of a `firstAvailable` list.
struct RequestData<'a> {
    req: &'a ExactRequest,
    /// The parent request's name, for subrequests.
    parent: Option<&'a str>,
    class: &'a DeviceClass,
    num_devices: usize,
    /// All mode: the selectable devices.
    all_devices: Vec<DevRef<'a>>,
}

impl RequestData<'_> {
    fn own_name<'n>(&'n self, base: &'n str) -> &'n str {
        if self.parent.is_some() {
            &self.req.name
        } else {
            base
        }
    }
}

#[derive(Clone, Copy)]
struct DevRef<'a> {
    pool: usize,
    slice: &'a ResourceSlice,
    index: usize,
    /// [`pools::device_hash`] of the device.
    hash: u64,
}

impl<'a> DevRef<'a> {
    fn device(&self) -> &'a Device {
        &self.slice.devices[self.index]
    }
    /// Which nodes can use the device: its slice's, or its own for
    /// per-device selection.
    fn node_scope(&self) -> Option<&'a rkube_model::dra::NodeScope> {
        if self.slice.node == rkube_model::dra::NodeScope::PerDevice {
            self.device().node.as_ref()
        } else {
            Some(&self.slice.node)
        }
    }
    /// The device's ID, for messages and results.
    fn id(&self) -> DeviceId {
        DeviceId {
            driver: self.slice.driver.clone(),
            pool: self.slice.pool.clone(),
            device: self.device().name.clone(),
        }
    }
    /// The device's name, to look it up in the allocated state.
    fn name(&self) -> DeviceName<'a> {
        DeviceName {
            parts: (&self.slice.driver, &self.slice.pool, &self.device().name),
            hash: self.hash,
        }
    }
    /// The device within one search: its slice (which the search holds)
    /// and its place there. A valid pool names each device once.
    fn local(&self) -> LocalDev {
        (self.slice as *const ResourceSlice as usize, self.index)
    }
}

/// A device within one search ([`DevRef::local`]).
type LocalDev = (usize, usize);

#[derive(Clone)]
enum Constraint {
    Match {
        requests: Vec<String>,
        attribute: String,
        reference: Option<AttrValue>,
        count: usize,
    },
    Distinct {
        requests: Vec<String>,
        attribute: String,
        values: Vec<AttrValue>,
    },
}

fn in_scope(requests: &[String], base: &str, sub: Option<&str>) -> bool {
    requests.is_empty()
        || requests.iter().any(|r| r == base)
        || sub.is_some_and(|s| requests.iter().any(|r| *r == format!("{base}/{s}")))
}

fn same_kind_equal(a: &AttrValue, b: &AttrValue) -> bool {
    match (a, b) {
        (AttrValue::String(x), AttrValue::String(y)) => x == y,
        (AttrValue::Int(x), AttrValue::Int(y)) => x == y,
        (AttrValue::Bool(x), AttrValue::Bool(y)) => x == y,
        (AttrValue::Version(x), AttrValue::Version(y)) => x == y,
        _ => false,
    }
}

impl Constraint {
    fn add(&mut self, base: &str, sub: Option<&str>, device: &Device) -> bool {
        match self {
            Constraint::Match {
                requests,
                attribute,
                reference,
                count,
            } => {
                if !in_scope(requests, base, sub) {
                    return true;
                }
                let Some(v) = device.attributes.get(attribute.as_str()) else {
                    return false;
                };
                if *count == 0 {
                    *reference = Some(v.clone());
                    *count = 1;
                    return true;
                }
                if !reference.as_ref().is_some_and(|r| same_kind_equal(v, r)) {
                    return false;
                }
                *count += 1;
                true
            }
            Constraint::Distinct {
                requests,
                attribute,
                values,
            } => {
                if !in_scope(requests, base, sub) {
                    return true;
                }
                let Some(v) = device.attributes.get(attribute.as_str()) else {
                    return false;
                };
                if values.iter().any(|x| same_kind_equal(v, x)) {
                    return false;
                }
                values.push(v.clone());
                true
            }
        }
    }

    fn remove(&mut self, base: &str, sub: Option<&str>) {
        match self {
            Constraint::Match {
                requests, count, ..
            } => {
                if in_scope(requests, base, sub) {
                    *count -= 1;
                }
            }
            Constraint::Distinct {
                requests, values, ..
            } => {
                if in_scope(requests, base, sub) {
                    values.pop();
                }
            }
        }
    }
}

/// One device picked during the search.
struct Picked<'a> {
    request: &'a str,
    parent: Option<&'a str>,
    dev: DevRef<'a>,
    admin_access: bool,
    share_id: Option<String>,
    consumed: BTreeMap<String, Quantity>,
}

/// Key of a request (or subrequest) in a search: claim, request, sub.
type ReqKey = (usize, usize, usize);

/// A search's requests by key: a handful per pod (validation bounds them),
/// so a list, which costs no table per node searched.
struct Requests<'a>(Vec<(ReqKey, RequestData<'a>)>);

impl<'a> Requests<'a> {
    fn insert(&mut self, key: ReqKey, data: RequestData<'a>) {
        match self.0.iter_mut().find(|(k, _)| *k == key) {
            Some(e) => e.1 = data,
            None => self.0.push((key, data)),
        }
    }

    fn remove(&mut self, key: &ReqKey) -> Option<RequestData<'a>> {
        let i = self.0.iter().position(|(k, _)| k == key)?;
        Some(self.0.swap_remove(i).1)
    }
}

impl<'a> std::ops::Index<&ReqKey> for Requests<'a> {
    type Output = RequestData<'a>;

    fn index(&self, key: &ReqKey) -> &RequestData<'a> {
        match self.0.iter().find(|(k, _)| k == key) {
            Some((_, d)) => d,
            None => panic!("no request data for {key:?}"),
        }
    }
}

/// How to undo one picked device.
#[derive(Default)]
struct Undo {
    counters: bool,
    constraints: usize,
    marked: bool,
    capacity_existed: bool,
    capacity: Option<BTreeMap<String, Quantity>>,
    result: bool,
}

struct Search<'a, 'b> {
    alloc: &'b Allocator<'a>,
    node: &'b Node,
    claims: &'b [&'a ResourceClaim],
    pools: Vec<Pool<'a>>,
    requests: Requests<'a>,
    selected_sub: FastMap<(usize, usize), usize>,
    constraints: Vec<Vec<Constraint>>,
    matches: FastMap<(LocalDev, ReqKey), bool>,
    /// Claims (by index) this search gave each device to.
    allocating: FastMap<LocalDev, Vec<usize>>,
    allocating_capacity: FastMap<LocalDev, BTreeMap<String, Quantity>>,
    available_counters: FastMap<usize, BTreeMap<String, BTreeMap<String, Quantity>>>,
    consumed_counters: FastMap<usize, BTreeMap<String, BTreeMap<String, Quantity>>>,
    results: Vec<Vec<Picked<'a>>>,
    steps: u64,
    shares: u64,
}

/// Internal outcome of a search step.
enum Stop {
    MaxSize,
    Fail(Failure),
}

type Step = Result<bool, Stop>;

fn fatal(msg: String) -> Stop {
    Stop::Fail(Failure::Error(msg))
}

impl<'a> Allocator<'a> {
    /// An allocator over a cluster's classes and slices, with what is
    /// already allocated.
    pub fn new(dra: &'a Dra, state: &'a AllocatedState, cache: &'a Cache) -> Self {
        Allocator {
            dra,
            state,
            cache,
            index: None,
            exhausted: None,
            memo: None,
            share_seed: String::new(),
        }
    }

    /// Remembers selector results per device in `memo`, which must only
    /// be used with the slices (and cache) it was first used with.
    pub fn with_memo(mut self, memo: &'a SelectorMemo) -> Self {
        self.memo = Some(memo);
        self
    }

    /// Finds each node's slices through `index` (built from the same
    /// `dra.slices`) instead of scanning them all.
    pub fn with_index(mut self, index: &'a pools::SliceIndex) -> Self {
        self.index = Some(index);
        self
    }

    /// Remembers in `exhausted` (kept with the slice list) the nodes found
    /// with every device held; see [`Allocator::known_exhausted`].
    pub fn with_exhausted(mut self, exhausted: &'a Exhausted) -> Self {
        self.exhausted = Some(exhausted);
        self
    }

    /// Every request of every claim needs devices of its own: at least
    /// one request per claim, each an exact count of at least one device
    /// of a named class, without admin access or alternatives, and no
    /// claim over [`MAX_RESULTS`] (so the search cannot fail before it
    /// looks at devices). On a node whose every device is held such
    /// claims cannot be allocated, and the search finds so.
    pub fn needs_free_devices(claims: &[&ResourceClaim]) -> bool {
        claims.iter().all(|c| {
            let mut total = 0u64;
            !c.spec.requests.is_empty()
                && c.spec.requests.iter().all(|r| match &r.exactly {
                    Some(e) if r.first_available.is_empty() => {
                        let AllocationMode::ExactCount(n) = e.mode else {
                            return false;
                        };
                        total = total.saturating_add(u64::try_from(n).unwrap_or(u64::MAX));
                        n >= 1 && !e.admin_access && !e.device_class_name.is_empty()
                    }
                    _ => false,
                })
                && total <= MAX_RESULTS as u64
        })
    }

    /// The exhausted-node record, usable only when a node's pools follow
    /// from its name (no slice selects nodes by label).
    fn exhausted_by_name(&self) -> Option<&'a Exhausted> {
        match self.index {
            Some(ix) if ix.by_name_only() => self.exhausted,
            _ => None,
        }
    }

    /// `node` was found with every device held in an earlier state of
    /// this allocator's state's lineage, which holds at least as much.
    pub fn known_exhausted(&self, node: &Node) -> bool {
        let Some(ex) = self.exhausted_by_name() else {
            return false;
        };
        ex.nodes
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&node.name)
            .is_some_and(|seen| self.state.lineage.includes(seen))
    }

    /// Records `node` when every device of its pools is held and none of
    /// its pools is invalid (an invalid pool changes the outcome's reason).
    pub fn note_if_exhausted(&self, node: &Node) {
        let Some(ex) = self.exhausted_by_name() else {
            return;
        };
        let pools = pools::gather_indexed(&self.dra.slices, self.index, node);
        let all_held = pools.iter().all(|p| {
            p.invalid.is_none()
                && p.slices.iter().zip(&p.hashes).all(|(slice, hashes)| {
                    slice.devices.iter().zip(hashes.iter()).all(|(d, &hash)| {
                        let name = DeviceName {
                            parts: (&slice.driver, &slice.pool, &d.name),
                            hash,
                        };
                        self.state.holds_key(&name)
                    })
                })
        });
        if !all_held {
            return;
        }
        let mut nodes = ex.nodes.write().unwrap_or_else(|e| e.into_inner());
        if nodes.len() >= EXHAUSTED_MAX {
            nodes.clear();
        }
        nodes.insert(node.name.clone(), self.state.lineage);
    }

    /// Seeds the share IDs of devices allowing multiple allocations (the
    /// pod's UID: one pod's shares are distinct and reproducible).
    pub fn with_share_seed(mut self, seed: &str) -> Self {
        self.share_seed = seed.to_string();
        self
    }

    /// Allocates every claim on `node`: the allocations, or `None` when
    /// they cannot all be satisfied there.
    pub fn allocate(
        &self,
        node: &Node,
        claims: &[&'a ResourceClaim],
    ) -> Result<Option<Vec<Allocation>>, Failure> {
        self.allocate_counted(node, claims).0
    }

    /// [`Allocator::allocate`], with the number of search steps it took
    /// (upstream's `allocateOne` invocations).
    pub fn allocate_counted(
        &self,
        node: &Node,
        claims: &[&'a ResourceClaim],
    ) -> (Result<Option<Vec<Allocation>>, Failure>, u64) {
        self.search(node, claims, true)
    }

    /// Whether [`Allocator::allocate`] would find allocations on `node`
    /// (`Ok(true)`), none (`Ok(false)`) or fail the same way, without
    /// building them: a caller that needs one node's allocations out of
    /// many asks `allocate` for that node only.
    pub fn feasible(&self, node: &Node, claims: &[&'a ResourceClaim]) -> Result<bool, Failure> {
        self.search(node, claims, false)
            .0
            .map(|found| found.is_some())
    }

    /// The search; the allocations are built only with `build` (otherwise
    /// a success is `Some` of nothing).
    fn search(
        &self,
        node: &Node,
        claims: &[&'a ResourceClaim],
        build: bool,
    ) -> (Result<Option<Vec<Allocation>>, Failure>, u64) {
        let mut s = Search {
            alloc: self,
            node,
            claims,
            pools: pools::gather_indexed(&self.dra.slices, self.index, node),
            requests: Requests(Vec::new()),
            selected_sub: FastMap::default(),
            constraints: Vec::new(),
            matches: FastMap::default(),
            allocating: FastMap::default(),
            allocating_capacity: FastMap::default(),
            available_counters: FastMap::default(),
            consumed_counters: FastMap::default(),
            results: (0..claims.len()).map(|_| Vec::new()).collect(),
            steps: 0,
            shares: 0,
        };
        if let Err(e) = s.preflight() {
            let f = match e {
                Stop::Fail(f) => f,
                Stop::MaxSize => Failure::Error("internal error: size limit in preflight".into()),
            };
            return (Err(f), 0);
        }
        let out = match s.allocate_one((0, 0, 0, 0), false, (0, 0, 0)) {
            Ok(true) if build => s.finish().map(Some),
            Ok(true) => s.check_node_selectors().map(|()| Some(Vec::new())),
            Ok(false) | Err(Stop::MaxSize) => {
                if s.pools.iter().any(|p| p.invalid.is_some()) {
                    Err(Failure::Node(
                        "invalid resource pools were encountered".into(),
                    ))
                } else {
                    Ok(None)
                }
            }
            Err(Stop::Fail(f)) => Err(f),
        };
        (out, s.steps)
    }
}

impl<'a> Search<'a, '_> {
    fn preflight(&mut self) -> Result<(), Stop> {
        let claims = self.claims;
        for (ci, claim) in claims.iter().enumerate() {
            let mut min_claim = 0usize;
            for (ri, request) in claim.spec.requests.iter().enumerate() {
                let min_req = if request.first_available.is_empty() {
                    let Some(e) = &request.exactly else {
                        return Err(fatal(format!(
                            "claim {}, request {}: missing device class name (unsupported request type?)",
                            kobj(claim),
                            request.name
                        )));
                    };
                    let d = self.validate(ci, ri, 0, e, None)?;
                    let n = d.num_devices;
                    self.requests.insert((ci, ri, 0), d);
                    n
                } else {
                    let mut min = usize::MAX;
                    for (si, sub) in request.first_available.iter().enumerate() {
                        let d = self.validate(ci, ri, si, sub, Some(request.name.as_str()))?;
                        min = min.min(d.num_devices);
                        self.requests.insert((ci, ri, si), d);
                    }
                    min
                };
                if min_req > MAX_RESULTS.saturating_sub(min_claim) {
                    return Err(fatal(format!(
                        "claim {}, request {}: adding {min_req} devices exceeds the claim limit of {MAX_RESULTS}, with {min_claim} already accounted for",
                        kobj(claim),
                        request.name
                    )));
                }
                min_claim += min_req;
            }
            let mut cs = Vec::new();
            for (i, c) in claim.spec.constraints.iter().enumerate() {
                if let Some(a) = &c.match_attribute {
                    cs.push(Constraint::Match {
                        requests: c.requests.clone(),
                        attribute: a.clone(),
                        reference: None,
                        count: 0,
                    });
                } else if let Some(a) = &c.distinct_attribute {
                    cs.push(Constraint::Distinct {
                        requests: c.requests.clone(),
                        attribute: a.clone(),
                        values: Vec::new(),
                    });
                } else {
                    return Err(fatal(format!(
                        "claim {}, constraint #{i}: empty constraint (unsupported constraint type?)",
                        kobj(claim)
                    )));
                }
            }
            self.constraints.push(cs);
        }
        Ok(())
    }

    fn validate(
        &mut self,
        ci: usize,
        ri: usize,
        si: usize,
        req: &'a ExactRequest,
        parent: Option<&'a str>,
    ) -> Result<RequestData<'a>, Stop> {
        let claim = self.claims[ci];
        let name = if parent.is_some() {
            req.name.as_str()
        } else {
            claim.spec.requests[ri].name.as_str()
        };
        if req.device_class_name.is_empty() {
            return Err(fatal(format!(
                "claim {}, request {name}: missing device class name (unsupported request type?)",
                kobj(claim)
            )));
        }
        let Some(class) = self.alloc.dra.classes.get(&req.device_class_name) else {
            return Err(fatal(format!(
                "claim {}, request {name}: could not retrieve device class {}: deviceclass.resource.k8s.io {:?} not found",
                kobj(claim),
                req.device_class_name,
                req.device_class_name
            )));
        };
        let mut data = RequestData {
            req,
            parent,
            class,
            num_devices: 0,
            all_devices: Vec::new(),
        };
        match req.mode {
            AllocationMode::ExactCount(n) => {
                data.num_devices = usize::try_from(n).unwrap_or(usize::MAX);
            }
            AllocationMode::All => {
                for pi in 0..self.pools.len() {
                    let pool = &self.pools[pi];
                    if pool.incomplete {
                        return Err(fatal(format!(
                            "claim {}, request {name}: asks for all devices, but resource pool {}/{} is currently being updated",
                            kobj(claim),
                            pool.driver,
                            pool.name
                        )));
                    }
                    if pool.invalid.is_some() {
                        return Err(fatal(format!(
                            "claim {}, request {name}: asks for all devices, but resource pool {}/{} is currently invalid",
                            kobj(claim),
                            pool.driver,
                            pool.name
                        )));
                    }
                    for sx in 0..pool.slices.len() {
                        let slice = self.pools[pi].slices[sx];
                        for index in 0..slice.devices.len() {
                            let dev = DevRef {
                                pool: pi,
                                slice,
                                index,
                                hash: self.pools[pi].hashes[sx][index],
                            };
                            if !self.selectable((ci, ri, si), &data, dev)? {
                                continue;
                            }
                            let d = dev.device();
                            let ok = capacity::fits(&req.capacity, &d.capacity, None, None)
                                .map_err(|e| {
                                    fatal(format!(
                                        "claim {}, request {name}: checking capacity for device {}: {e}",
                                        kobj(claim),
                                        d.name
                                    ))
                                })?;
                            if ok {
                                data.all_devices.push(dev);
                            }
                        }
                    }
                }
                data.num_devices = data.all_devices.len();
            }
        }
        Ok(data)
    }

    /// Upstream's `isSelectable`: class selectors, then the request's,
    /// then per-device node selection; definite answers are cached.
    fn selectable(
        &mut self,
        key: ReqKey,
        data: &RequestData<'a>,
        dev: DevRef<'a>,
    ) -> Result<bool, Stop> {
        let device = dev.device();
        if let Some(m) = self.matches.get(&(dev.local(), key)) {
            return Ok(*m);
        }
        let view = DeviceView {
            driver: &dev.slice.driver,
            attributes: &device.attributes,
            capacity: &device.capacity,
            allow_multiple_allocations: device.allow_multiple_allocations,
        };
        let claim = self.claims[key.0];
        let mut ok = self.selectors_match(
            &view,
            dev,
            &data.class.selectors,
            Some(&data.class.name),
            claim,
        )?;
        if ok {
            ok = self.selectors_match(&view, dev, &data.req.selectors, None, claim)?;
        }
        if ok && dev.slice.node == rkube_model::dra::NodeScope::PerDevice {
            ok = device
                .node
                .as_ref()
                .is_some_and(|s| pools::scope_matches(s, self.node));
        }
        self.matches.insert((dev.local(), key), ok);
        Ok(ok)
    }

    fn selectors_match(
        &self,
        view: &DeviceView<'_>,
        dev: DevRef<'a>,
        selectors: &[String],
        class: Option<&str>,
        claim: &ResourceClaim,
    ) -> Result<bool, Stop> {
        let owner = || match class {
            Some(c) => format!("class {c}"),
            None => format!("claim {}", kobj(claim)),
        };
        for (i, src) in selectors.iter().enumerate() {
            let compiled = self.alloc.cache.get(src);
            let sel = match compiled.as_ref() {
                Ok(s) => s,
                Err(e) => {
                    return Err(fatal(format!(
                        "{}: selector #{i}: CEL compile error: {e}",
                        owner()
                    )))
                }
            };
            // The compiled selector lives as long as the cache, the device
            // as long as the slices the memo was made for.
            let key = (
                Arc::as_ptr(&compiled) as usize,
                view.attributes as *const _ as usize,
            );
            let known = self.alloc.memo.and_then(|m| m.get(key));
            let matched = match known {
                Some(b) => Ok(b),
                None => sel.matches(view),
            };
            match matched {
                Ok(b) => {
                    if known.is_none() {
                        if let Some(m) = self.alloc.memo {
                            m.put(key, b);
                        }
                    }
                    if !b {
                        return Ok(false);
                    }
                }
                Err(e) => {
                    return Err(fatal(format!(
                        "{}: selector #{i} on device {}: CEL runtime error: {e}",
                        owner(),
                        dev.id()
                    )))
                }
            }
        }
        Ok(true)
    }

    fn in_use(&self, dev: DevRef<'a>) -> bool {
        self.alloc.state.holds_key(&dev.name())
            || self
                .allocating
                .get(&dev.local())
                .is_some_and(|s| !s.is_empty())
    }

    /// This search gave the device to claim `ci`.
    fn allocating_for(&self, dev: DevRef<'a>, ci: usize) -> bool {
        self.allocating
            .get(&dev.local())
            .is_some_and(|c| c.contains(&ci))
    }

    fn capacity_in_use(&self, dev: DevRef<'a>) -> bool {
        self.alloc.state.has_shares(&dev.name())
            || self.allocating_capacity.contains_key(&dev.local())
    }

    fn capacity_fits(&self, req: &ExactRequest, dev: DevRef<'a>) -> Result<bool, String> {
        capacity::fits(
            &req.capacity,
            &dev.device().capacity,
            self.alloc.state.capacity_held(&dev.name()).as_ref(),
            self.allocating_capacity.get(&dev.local()),
        )
    }

    /// The search (upstream's `allocateOne`): `r` is (claim, request,
    /// subrequest, device number), `start` the (pool, slice, device) to
    /// continue from within the current request.
    fn allocate_one(
        &mut self,
        r: (usize, usize, usize, usize),
        in_sub: bool,
        start: (usize, usize, usize),
    ) -> Step {
        self.steps += 1;
        if self.steps > STEP_BUDGET {
            return Err(Stop::Fail(Failure::Timeout));
        }
        let (ci, ri, si, di) = r;
        if ci >= self.claims.len() {
            return Ok(true);
        }
        let claim = self.claims[ci];
        if ri >= claim.spec.requests.len() {
            return match self.allocate_one((ci + 1, 0, 0, 0), false, (0, 0, 0)) {
                Err(Stop::MaxSize) => Ok(false),
                other => other,
            };
        }
        let request = &claim.spec.requests[ri];
        if !in_sub && !request.first_available.is_empty() {
            let mut all_exceeded = true;
            for sub in 0..request.first_available.len() {
                match self.allocate_one((ci, ri, sub, di), true, (0, 0, 0)) {
                    Err(Stop::MaxSize) => continue,
                    Err(e) => return Err(e),
                    Ok(true) => {
                        self.selected_sub.insert((ci, ri), sub);
                        return Ok(true);
                    }
                    Ok(false) => all_exceeded = false,
                }
            }
            return if all_exceeded {
                Err(Stop::MaxSize)
            } else {
                Ok(false)
            };
        }
        let key = (ci, ri, si);
        let (num, all, admin) = {
            let d = &self.requests[&key];
            (
                d.num_devices,
                matches!(d.req.mode, AllocationMode::All),
                d.req.admin_access,
            )
        };
        if all && num == 0 {
            return Ok(false);
        }
        if di >= num {
            return self.allocate_one((ci, ri + 1, 0, 0), false, (0, 0, 0));
        }
        if num - di > MAX_RESULTS.saturating_sub(self.results[ci].len()) {
            return Err(Stop::MaxSize);
        }
        if all {
            let dev = self.requests[&key].all_devices[di];
            let Some(undo) = self.allocate_device(r, dev, true)? else {
                return Ok(false);
            };
            let done = self.allocate_one((ci, ri, si, di + 1), in_sub, (0, 0, 0));
            if !matches!(done, Ok(true)) {
                self.rollback(r, dev, undo);
            }
            return done;
        }
        for pi in start.0..self.pools.len() {
            if self.pools[pi].incomplete || self.pools[pi].invalid.is_some() {
                continue;
            }
            let slice_start = if pi == start.0 { start.1 } else { 0 };
            for sx in slice_start..self.pools[pi].slices.len() {
                let slice = self.pools[pi].slices[sx];
                let dev_start = if pi == start.0 && sx == start.1 {
                    start.2
                } else {
                    0
                };
                for dx in dev_start..slice.devices.len() {
                    let dev = DevRef {
                        pool: pi,
                        slice,
                        index: dx,
                        hash: self.pools[pi].hashes[sx][dx],
                    };
                    if admin && self.allocating_for(dev, ci) {
                        continue;
                    }
                    if !admin && self.in_use(dev) {
                        continue;
                    }
                    // `selectable` needs the request data and `&mut self`
                    // (its cache): the data is lent out meanwhile.
                    let d = self.requests.remove(&key).expect("request data");
                    let req = d.req;
                    let sel = self.selectable(key, &d, dev);
                    self.requests.insert(key, d);
                    if !sel? {
                        continue;
                    }
                    let fits = self.capacity_fits(req, dev).map_err(|e| {
                        fatal(format!(
                            "claim {}, request {}: checking capacity for device {}: {e}",
                            kobj(claim),
                            self.requests[&key].own_name(&request.name),
                            dev.id()
                        ))
                    })?;
                    if !fits {
                        continue;
                    }
                    let Some(undo) = self.allocate_device(r, dev, false)? else {
                        continue;
                    };
                    match self.allocate_one((ci, ri, si, di + 1), in_sub, (pi, sx, dx + 1)) {
                        Ok(true) => return Ok(true),
                        Ok(false) => self.rollback(r, dev, undo),
                        Err(e) => {
                            self.rollback(r, dev, undo);
                            return Err(e);
                        }
                    }
                }
            }
        }
        Ok(false)
    }

    /// The request's name and, for a subrequest, its own.
    fn names(&self, r: (usize, usize, usize, usize)) -> (&'a str, Option<&'a str>) {
        let claim: &'a ResourceClaim = self.claims[r.0];
        let request = &claim.spec.requests[r.1];
        let d = &self.requests[&(r.0, r.1, r.2)];
        match d.parent {
            Some(p) => (p, Some(d.req.name.as_str())),
            None => (request.name.as_str(), None),
        }
    }

    /// Upstream's `allocateDevice`: `Some(undo)` when the device was taken.
    fn allocate_device(
        &mut self,
        r: (usize, usize, usize, usize),
        dev: DevRef<'a>,
        must: bool,
    ) -> Result<Option<Undo>, Stop> {
        let (ci, ri, si, _) = r;
        let claim = self.claims[ci];
        let key = (ci, ri, si);
        let req = self.requests[&key].req;
        let device = dev.device();
        let multi = device.allow_multiple_allocations;
        if !multi && req.admin_access && self.allocating_for(dev, ci) {
            return Ok(None);
        }
        if !req.admin_access && self.in_use(dev) {
            return Ok(None);
        }
        let mut undo = Undo::default();
        let skip_counters = multi && self.capacity_in_use(dev);
        if !skip_counters && !device.consumes_counters.is_empty() {
            if !self.take_counters(dev) {
                return Ok(None);
            }
            undo.counters = true;
        }
        let (base, sub) = self.names(r);
        if taint_prevents(device, req) {
            self.rollback(r, dev, undo);
            return Ok(None);
        }
        for i in 0..self.constraints[ci].len() {
            if !self.constraints[ci][i].add(base, sub, device) {
                self.rollback(r, dev, undo);
                if must {
                    return Err(fatal(format!(
                        "claim {}, request {}: cannot add device {} because a claim constraint would not be satisfied",
                        kobj(claim),
                        self.requests[&key].own_name(base),
                        dev.id()
                    )));
                }
                return Ok(None);
            }
            undo.constraints += 1;
        }
        if !multi {
            let held = self.allocating.entry(dev.local()).or_default();
            if !held.contains(&ci) {
                held.push(ci);
            }
            undo.marked = true;
        }
        let own = sub.unwrap_or(base);
        match self.capacity_fits(req, dev) {
            Ok(true) => {}
            Ok(false) => {
                self.rollback(r, dev, undo);
                return Ok(None);
            }
            Err(e) => {
                self.rollback(r, dev, undo);
                return Err(fatal(format!(
                    "claim {}, request {own}: rechecking capacity for device {}: {e}",
                    kobj(claim),
                    dev.id()
                )));
            }
        }
        let mut consumed = BTreeMap::new();
        let mut share_id = None;
        if multi {
            consumed = match capacity::consumed_all(&req.capacity, &device.capacity) {
                Ok(c) => c,
                Err(e) => {
                    self.rollback(r, dev, undo);
                    return Err(fatal(format!(
                        "claim {}, request {own}: computing consumed capacity for device {}: {e}",
                        kobj(claim),
                        dev.id()
                    )));
                }
            };
            self.shares += 1;
            share_id = Some(share_uid(&self.alloc.share_seed, self.shares));
            undo.capacity_existed = self.allocating_capacity.contains_key(&dev.local());
            let e = self.allocating_capacity.entry(dev.local()).or_default();
            for (k, q) in &consumed {
                let v = e.entry(k.clone()).or_default();
                *v = v.checked_add(q);
            }
            undo.capacity = Some(consumed.clone());
        }
        self.results[ci].push(Picked {
            request: own,
            parent: sub.map(|_| base),
            dev,
            admin_access: req.admin_access,
            share_id,
            consumed,
        });
        undo.result = true;
        Ok(Some(undo))
    }

    fn rollback(&mut self, r: (usize, usize, usize, usize), dev: DevRef<'a>, undo: Undo) {
        let ci = r.0;
        let id = dev.local();
        if undo.result {
            self.results[ci].pop();
        }
        if let Some(consumed) = undo.capacity {
            if let Some(e) = self.allocating_capacity.get_mut(&id) {
                for (k, q) in &consumed {
                    if let Some(v) = e.get_mut(k) {
                        *v = v.checked_add(&neg(q));
                    }
                }
                if !undo.capacity_existed {
                    self.allocating_capacity.remove(&id);
                }
            }
        }
        if undo.marked {
            if let Some(s) = self.allocating.get_mut(&id) {
                s.retain(|&c| c != ci);
            }
        }
        if undo.constraints > 0 {
            let (base, sub) = self.names(r);
            for i in 0..undo.constraints {
                self.constraints[ci][i].remove(base, sub);
            }
        }
        if undo.counters {
            self.release_counters(dev);
        }
    }

    /// Shared counters: the pool's available counters (what allocated
    /// devices left), then whether this device's consumption fits beside
    /// what this attempt took. Takes the counters when it does.
    fn take_counters(&mut self, dev: DevRef<'a>) -> bool {
        let pi = dev.pool;
        if !self.available_counters.contains_key(&pi) {
            let pool = &self.pools[pi];
            let mut avail: BTreeMap<String, BTreeMap<String, Quantity>> = pool
                .counter_sets
                .iter()
                .map(|(k, v)| (k.to_string(), (*v).clone()))
                .collect();
            for slice in pool.slices.iter().chain(pool.other_slices.iter()) {
                for d in &slice.devices {
                    let id = DeviceName::new(&slice.driver, &slice.pool, &d.name);
                    if !self.alloc.state.is_allocated_key(&id) {
                        continue;
                    }
                    for c in &d.consumes_counters {
                        if let Some(set) = avail.get_mut(&c.counter_set) {
                            for (name, q) in &c.counters {
                                if let Some(v) = set.get_mut(name) {
                                    *v = v.checked_add(&neg(q));
                                }
                            }
                        }
                    }
                }
            }
            self.available_counters.insert(pi, avail);
        }
        let device = dev.device();
        let consumed = self.consumed_counters.entry(pi).or_default();
        for c in &device.consumes_counters {
            let set = consumed.entry(c.counter_set.clone()).or_default();
            for (name, q) in &c.counters {
                let v = set.entry(name.clone()).or_default();
                *v = v.checked_add(q);
            }
        }
        let avail = &self.available_counters[&pi];
        let consumed = &self.consumed_counters[&pi];
        let fits = avail.iter().all(|(set, counters)| {
            counters.iter().all(|(name, a)| {
                let used = consumed
                    .get(set)
                    .and_then(|s| s.get(name))
                    .copied()
                    .unwrap_or_default();
                *a >= used
            })
        });
        if !fits {
            self.release_counters(dev);
        }
        fits
    }

    fn release_counters(&mut self, dev: DevRef<'a>) {
        if let Some(consumed) = self.consumed_counters.get_mut(&dev.pool) {
            for c in &dev.device().consumes_counters {
                if let Some(set) = consumed.get_mut(&c.counter_set) {
                    for (name, q) in &c.counters {
                        if let Some(v) = set.get_mut(name) {
                            *v = v.checked_add(&neg(q));
                        }
                    }
                }
            }
        }
    }

    /// The allocation results (upstream's result building).
    fn finish(&self) -> Result<Vec<Allocation>, Failure> {
        let mut out = Vec::with_capacity(self.claims.len());
        for (ci, claim) in self.claims.iter().enumerate() {
            let picked = &self.results[ci];
            let devices = picked
                .iter()
                .map(|p| {
                    let d = p.dev.device();
                    let tolerations = match &p.parent {
                        None => claim
                            .spec
                            .requests
                            .iter()
                            .find(|r| r.name == p.request)
                            .and_then(|r| r.exactly.as_ref())
                            .map(|e| e.tolerations.clone()),
                        Some(parent) => claim
                            .spec
                            .requests
                            .iter()
                            .find(|r| r.name == *parent)
                            .and_then(|r| r.first_available.iter().find(|s| s.name == p.request))
                            .map(|s| s.tolerations.clone()),
                    }
                    .unwrap_or_default();
                    DeviceResult {
                        request: match &p.parent {
                            Some(parent) => format!("{parent}/{}", p.request),
                            None => p.request.to_string(),
                        },
                        driver: p.dev.slice.driver.clone(),
                        pool: p.dev.slice.pool.clone(),
                        device: d.name.clone(),
                        admin_access: p.admin_access,
                        tolerations,
                        share_id: p.share_id.clone(),
                        consumed_capacity: p.consumed.clone(),
                        binding_conditions: d.binding_conditions.clone(),
                        binding_failure_conditions: d.binding_failure_conditions.clone(),
                    }
                })
                .collect();
            let config = self.configs(ci, claim);
            let node_selector = self.node_selector(picked).map_err(|e| {
                Failure::Error(format!("create NodeSelector for claim {}: {e}", claim.name))
            })?;
            out.push(Allocation {
                devices,
                config,
                node_selector,
            });
        }
        Ok(out)
    }

    /// The selected request name of request `ri`: `req` or `req/sub`.
    fn selected_name(&self, ci: usize, ri: usize, claim: &ResourceClaim) -> (String, usize) {
        let request = &claim.spec.requests[ri];
        if request.first_available.is_empty() {
            return (request.name.clone(), 0);
        }
        let si = self.selected_sub.get(&(ci, ri)).copied().unwrap_or(0);
        (
            format!("{}/{}", request.name, request.first_available[si].name),
            si,
        )
    }

    fn configs(&self, ci: usize, claim: &ResourceClaim) -> Vec<AllocatedConfig> {
        let mut out: Vec<AllocatedConfig> = Vec::new();
        let mut by_class: FastMap<&str, (usize, usize)> = FastMap::default();
        for ri in 0..claim.spec.requests.len() {
            let (name, si) = self.selected_name(ci, ri, claim);
            let class = self.requests[&(ci, ri, si)].class;
            if let Some(&(start, end)) = by_class.get(class.name.as_str()) {
                for c in &mut out[start..end] {
                    c.config.requests.push(name.clone());
                }
                continue;
            }
            let start = out.len();
            for c in &class.config {
                let mut cfg = c.clone();
                cfg.requests = vec![name.clone()];
                out.push(AllocatedConfig {
                    source: "FromClass".into(),
                    config: cfg,
                });
            }
            by_class.insert(class.name.as_str(), (start, out.len()));
        }
        let selected: Vec<(String, String)> = (0..claim.spec.requests.len())
            .map(|ri| {
                (
                    claim.spec.requests[ri].name.clone(),
                    self.selected_name(ci, ri, claim).0,
                )
            })
            .collect();
        for c in &claim.spec.config {
            let keep = c.requests.is_empty()
                || selected.iter().any(|(plain, chosen)| {
                    c.requests.contains(plain) || (chosen != plain && c.requests.contains(chosen))
                });
            if keep {
                out.push(AllocatedConfig {
                    source: "FromClaim".into(),
                    config: c.clone(),
                });
            }
        }
        for c in &mut out {
            let rs = &c.config.requests;
            if rs.is_empty() {
                continue;
            }
            let covers_all = selected
                .iter()
                .all(|(plain, chosen)| rs.contains(plain) || rs.contains(chosen));
            if covers_all {
                c.config.requests.clear();
            }
        }
        out
    }

    /// What [`Search::finish`] would fail with, if anything, without
    /// building the allocations: only node selectors can fail.
    fn check_node_selectors(&self) -> Result<(), Failure> {
        use rkube_model::dra::NodeScope;
        for (claim, picked) in self.claims.iter().zip(&self.results) {
            for p in picked {
                let (d, scope) = (p.dev.device(), p.dev.node_scope());
                if matches!(scope, Some(NodeScope::Name(_))) || d.binds_to_node {
                    break;
                }
                if let Some(NodeScope::Selector(sel)) = scope {
                    if sel.terms.len() > 1 {
                        return Err(Failure::Error(format!(
                            "create NodeSelector for claim {}: unsupported ResourceSlice.NodeSelector with {} terms",
                            claim.name,
                            sel.terms.len()
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    /// Upstream's `createNodeSelector`.
    fn node_selector(&self, picked: &[Picked<'a>]) -> Result<Option<NodeSelector>, String> {
        use rkube_model::dra::NodeScope;
        let mut term = NodeSelectorTerm::default();
        for p in picked {
            let (d, scope) = (p.dev.device(), p.dev.node_scope());
            if matches!(scope, Some(NodeScope::Name(_))) || d.binds_to_node {
                return Ok(Some(NodeSelector {
                    terms: vec![NodeSelectorTerm {
                        match_fields: vec![Requirement {
                            key: "metadata.name".into(),
                            op: Operator::In,
                            values: vec![self.node.name.clone()],
                        }],
                        ..Default::default()
                    }],
                }));
            }
            if let Some(NodeScope::Selector(s)) = scope {
                match s.terms.len() {
                    0 => {}
                    1 => {
                        merge(&s.terms[0].match_fields, &mut term.match_fields);
                        merge(&s.terms[0].match_expressions, &mut term.match_expressions);
                    }
                    n => {
                        return Err(format!(
                            "unsupported ResourceSlice.NodeSelector with {n} terms"
                        ))
                    }
                }
            }
        }
        if term.match_fields.is_empty() && term.match_expressions.is_empty() {
            return Ok(None);
        }
        Ok(Some(NodeSelector { terms: vec![term] }))
    }
}

fn merge(from: &[Requirement], to: &mut Vec<Requirement>) {
    for r in from {
        let dup = to.iter().any(|t| {
            t.key == r.key && t.op == r.op && {
                let a: BTreeSet<&String> = t.values.iter().collect();
                let b: BTreeSet<&String> = r.values.iter().collect();
                a == b
            }
        });
        if !dup {
            to.push(r.clone());
        }
    }
}

fn neg(q: &Quantity) -> Quantity {
    q.negated()
}

fn taint_prevents(device: &Device, req: &ExactRequest) -> bool {
    device.taints.iter().any(|t| {
        matches!(t.effect.as_str(), "NoSchedule" | "NoExecute")
            && !req.tolerations.iter().any(|tol| tol.tolerates(t))
    })
}

/// A deterministic UUID-shaped share ID.
fn share_uid(seed: &str, n: u64) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in seed.bytes().chain(n.to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    let l = h.rotate_left(29) ^ n;
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        h >> 32,
        (h >> 16) & 0xffff,
        h & 0xfff,
        l & 0xfff,
        l >> 16
    )
}
