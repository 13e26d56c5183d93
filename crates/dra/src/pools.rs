//! Which devices a node can use: ResourceSlices gathered into pools as the
//! incubating allocator's `GatherPools` does. A pool is one driver's named
//! pool; only its newest generation counts; it is incomplete while fewer
//! slices than `resourceSliceCount` are published, invalid when device
//! names repeat or counters are inconsistent. Pools are ordered by driver
//! and name (pools with binding conditions last), slices by name; devices
//! keep their slice's order. That order decides which devices are picked.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};

use rkube_model::dra::{NodeScope, ResourceSlice};
use rkube_model::{Node, Quantity};
use rkube_util::fast_hash::{FastMap, FastSet};

/// Whether a node scope admits `node`.
pub fn scope_matches(scope: &NodeScope, node: &Node) -> bool {
    match scope {
        NodeScope::Name(n) => *n == node.name,
        NodeScope::All => true,
        NodeScope::Selector(s) => s.matches(&node.name, &node.labels),
        NodeScope::PerDevice => false,
    }
}

/// A pool as one node sees it.
#[derive(Debug, Clone)]
pub struct Pool<'a> {
    /// Driver.
    pub driver: &'a str,
    /// Pool name.
    pub name: &'a str,
    /// Fewer slices than announced are published.
    pub incomplete: bool,
    /// Why the pool is unusable, if it is.
    pub invalid: Option<String>,
    /// Slices with devices that target the node, by name.
    pub slices: Vec<&'a ResourceSlice>,
    /// The pool's other device slices (their devices consume the same
    /// counters).
    pub other_slices: Vec<&'a ResourceSlice>,
    /// Counter sets: name → counter → amount.
    pub counter_sets: BTreeMap<&'a str, &'a BTreeMap<String, Quantity>>,
    /// [`device_hash`] of each device of each of `slices`.
    pub hashes: Vec<Arc<[u64]>>,
}

/// The hash of a device's `driver/pool/device` name, computed once per
/// device and slice list instead of per lookup.
pub fn device_hash(driver: &str, pool: &str, device: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = rkube_util::fast_hash::FxHasher::default();
    driver.hash(&mut h);
    pool.hash(&mut h);
    device.hash(&mut h);
    h.finish()
}

fn slice_hashes(s: &ResourceSlice) -> Arc<[u64]> {
    s.devices
        .iter()
        .map(|d| device_hash(&s.driver, &s.pool, &d.name))
        .collect()
}

fn relevant(slice: &ResourceSlice, node: &Node) -> bool {
    match &slice.node {
        NodeScope::PerDevice => slice
            .devices
            .iter()
            .any(|d| d.node.as_ref().is_some_and(|s| scope_matches(s, node))),
        scope => scope_matches(scope, node),
    }
}

/// Which slices may concern a node, found without looking at every slice:
/// those published for one node by name, and the others (all nodes, node
/// selectors, per-device selection), as indices into the slice list.
///
/// It also keeps each node's pools once gathered, when no slice selects
/// nodes by label: then which slices concern a node depends on its name
/// only, and the pools stay as they are while the slices do.
#[derive(Debug, Default)]
pub struct SliceIndex {
    by_node: FastMap<String, Vec<usize>>,
    general: Vec<usize>,
    /// No slice selects nodes by label (or per device).
    by_name_only: bool,
    gathered: RwLock<FastMap<String, Arc<[PoolIx]>>>,
    /// [`device_hash`] of every device, by slice.
    hashes: Vec<Arc<[u64]>>,
}

impl SliceIndex {
    /// Indexes `all`.
    pub fn new(all: &[ResourceSlice]) -> Self {
        let mut ix = SliceIndex {
            by_name_only: true,
            ..Default::default()
        };
        for (i, s) in all.iter().enumerate() {
            ix.hashes.push(slice_hashes(s));
            match &s.node {
                NodeScope::Name(n) => ix.by_node.entry(n.clone()).or_default().push(i),
                NodeScope::All => ix.general.push(i),
                _ => {
                    ix.general.push(i);
                    ix.by_name_only = false;
                }
            }
        }
        ix
    }

    /// No slice selects nodes by label: a node's pools follow from its
    /// name alone while the slices stay.
    pub fn by_name_only(&self) -> bool {
        self.by_name_only
    }

    /// Indices of the slices that may concern `node`, in list order.
    fn candidates(&self, node: &str) -> Vec<usize> {
        let own = self.by_node.get(node).map_or(&[][..], |v| v.as_slice());
        let mut out = Vec::with_capacity(own.len() + self.general.len());
        let (mut a, mut b) = (0, 0);
        while a < own.len() || b < self.general.len() {
            if b == self.general.len() || (a < own.len() && own[a] < self.general[b]) {
                out.push(own[a]);
                a += 1;
            } else {
                out.push(self.general[b]);
                b += 1;
            }
        }
        out
    }

    /// The node's pools, gathered once per node when that is safe.
    fn pools(&self, all: &[ResourceSlice], node: &Node) -> Arc<[PoolIx]> {
        if !self.by_name_only {
            return gather_ix(all, self.candidates(&node.name), node).into();
        }
        let known = self
            .gathered
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&node.name)
            .cloned();
        if let Some(p) = known {
            return p;
        }
        let p: Arc<[PoolIx]> = gather_ix(all, self.candidates(&node.name), node).into();
        let mut kept = self.gathered.write().unwrap_or_else(|e| e.into_inner());
        // Bounded: nodes that come and go while the slices stay do not
        // pile up.
        if kept.len() >= 2 * self.by_node.len() + 1024 {
            kept.clear();
        }
        kept.insert(node.name.clone(), p.clone());
        p
    }
}

/// A pool as one node sees it, its slices as indices into the slice list.
#[derive(Debug, Clone)]
pub struct PoolIx {
    /// One of the pool's slices (driver and pool name).
    first: usize,
    incomplete: bool,
    invalid: Option<String>,
    slices: Vec<usize>,
    other_slices: Vec<usize>,
    counter_slices: Vec<usize>,
}

impl PoolIx {
    fn pool<'a>(&self, all: &'a [ResourceSlice], index: Option<&SliceIndex>) -> Pool<'a> {
        let first = &all[self.first];
        let mut counter_sets = BTreeMap::new();
        for &i in &self.counter_slices {
            for (set, counters) in &all[i].shared_counters {
                counter_sets.insert(set.as_str(), counters);
            }
        }
        Pool {
            driver: &first.driver,
            name: &first.pool,
            incomplete: self.incomplete,
            invalid: self.invalid.clone(),
            slices: self.slices.iter().map(|&i| &all[i]).collect(),
            other_slices: self.other_slices.iter().map(|&i| &all[i]).collect(),
            counter_sets,
            hashes: self
                .slices
                .iter()
                .map(|&i| match index {
                    Some(ix) => ix.hashes[i].clone(),
                    None => slice_hashes(&all[i]),
                })
                .collect(),
        }
    }
}

/// Gathers the pools of `all` slices relevant to `node`.
pub fn gather<'a>(all: &'a [ResourceSlice], node: &Node) -> Vec<Pool<'a>> {
    gather_indexed(all, None, node)
}

/// [`gather`], looking only at the slices `index` (of `all`) names for the
/// node.
pub fn gather_indexed<'a>(
    all: &'a [ResourceSlice],
    index: Option<&SliceIndex>,
    node: &Node,
) -> Vec<Pool<'a>> {
    match index {
        Some(ix) => ix
            .pools(all, node)
            .iter()
            .map(|p| p.pool(all, index))
            .collect(),
        None => gather_ix(all, (0..all.len()).collect(), node)
            .iter()
            .map(|p| p.pool(all, None))
            .collect(),
    }
}

fn gather_ix(all: &[ResourceSlice], candidates: Vec<usize>, node: &Node) -> Vec<PoolIx> {
    // Newest generation of each pool among the node's slices.
    let mut by_pool: BTreeMap<(&str, &str), Vec<usize>> = BTreeMap::new();
    for i in candidates {
        let s = &all[i];
        if !relevant(s, node) {
            continue;
        }
        let e = by_pool
            .entry((s.driver.as_str(), s.pool.as_str()))
            .or_default();
        match e.first().map(|&f| all[f].generation) {
            Some(g) if s.generation < g => {}
            Some(g) if s.generation > g => *e = vec![i],
            _ => e.push(i),
        }
    }
    let mut pools = Vec::new();
    let mut binding = Vec::new();
    for ((driver, name), slices) in by_pool {
        let generation = all[slices[0]].generation;
        let count = all[slices[0]].slice_count;
        let all_for_pool: Vec<usize> = if slices.len() as i64 == count {
            slices.clone()
        } else {
            // Incomplete for the node: obsolete when a newer generation
            // exists anywhere, else complete if all of it is published.
            let mut newest = generation;
            for s in all.iter().filter(|s| s.driver == driver && s.pool == name) {
                newest = newest.max(s.generation);
            }
            if newest > generation {
                continue;
            }
            (0..all.len())
                .filter(|&i| {
                    let s = &all[i];
                    s.driver == driver && s.pool == name && s.generation == generation
                })
                .collect()
        };
        if all_for_pool.len() as i64 != count {
            pools.push(PoolIx {
                first: slices[0],
                incomplete: true,
                invalid: None,
                slices: Vec::new(),
                other_slices: Vec::new(),
                counter_slices: Vec::new(),
            });
            continue;
        }
        let pool = build(all, slices, &all_for_pool);
        let has_binding = pool.slices.iter().any(|&i| {
            all[i]
                .devices
                .iter()
                .any(|d| !d.binding_conditions.is_empty())
        });
        if has_binding {
            binding.push(pool);
        } else {
            pools.push(pool);
        }
    }
    // BTreeMap order is (driver, pool) already; binding-condition pools last.
    pools.extend(binding);
    pools
}

fn build(all: &[ResourceSlice], mut slices: Vec<usize>, all_for_pool: &[usize]) -> PoolIx {
    let first = slices[0];
    slices.sort_by(|&a, &b| all[a].name.cmp(&all[b].name));
    let mut device_slices = Vec::new();
    let mut counter_slices = Vec::new();
    for &i in &slices {
        if all[i].shared_counters.is_empty() {
            device_slices.push(i);
        } else {
            counter_slices.push(i);
        }
    }
    let mut other = Vec::new();
    if slices.len() < all_for_pool.len() {
        let names: BTreeSet<&str> = slices.iter().map(|&i| all[i].name.as_str()).collect();
        for &i in all_for_pool {
            if names.contains(all[i].name.as_str()) {
                continue;
            }
            if all[i].shared_counters.is_empty() {
                other.push(i);
            } else {
                counter_slices.push(i);
            }
        }
    }
    let invalid = |reason: String| PoolIx {
        first,
        incomplete: false,
        invalid: Some(reason),
        slices: Vec::new(),
        other_slices: Vec::new(),
        counter_slices: Vec::new(),
    };
    let mut seen = FastSet::default();
    for &i in &device_slices {
        for d in &all[i].devices {
            if !seen.insert(d.name.as_str()) {
                return invalid(format!("duplicate device name {}", d.name));
            }
        }
    }
    let mut counter_sets = BTreeMap::new();
    for &i in &counter_slices {
        for (set, counters) in &all[i].shared_counters {
            if counter_sets.insert(set.as_str(), counters).is_some() {
                return invalid(format!("duplicate counter set name {set}"));
            }
        }
    }
    for &i in device_slices.iter().chain(other.iter()) {
        for d in &all[i].devices {
            for c in &d.consumes_counters {
                let Some(set) = counter_sets.get(c.counter_set.as_str()) else {
                    return invalid(format!(
                        "counter set {} not found for device {}",
                        c.counter_set, d.name
                    ));
                };
                for counter in c.counters.keys() {
                    if !set.contains_key(counter) {
                        return invalid(format!(
                            "counter {counter} not found in counter set {} for device {}",
                            c.counter_set, d.name
                        ));
                    }
                }
            }
        }
    }
    PoolIx {
        first,
        incomplete: false,
        invalid: None,
        slices: device_slices,
        other_slices: other,
        counter_slices,
    }
}
