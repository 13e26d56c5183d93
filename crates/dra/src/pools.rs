//! Which devices a node can use: ResourceSlices gathered into pools as the
//! incubating allocator's `GatherPools` does. A pool is one driver's named
//! pool; only its newest generation counts; it is incomplete while fewer
//! slices than `resourceSliceCount` are published, invalid when device
//! names repeat or counters are inconsistent. Pools are ordered by driver
//! and name (pools with binding conditions last), slices by name; devices
//! keep their slice's order. That order decides which devices are picked.

use std::collections::{BTreeMap, BTreeSet};

use rkube_model::dra::{NodeScope, ResourceSlice};
use rkube_model::{Node, Quantity};
use rkube_util::fast_hash::FastMap;

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
#[derive(Debug, Default)]
pub struct SliceIndex {
    by_node: FastMap<String, Vec<usize>>,
    general: Vec<usize>,
}

impl SliceIndex {
    /// Indexes `all`.
    pub fn new(all: &[ResourceSlice]) -> Self {
        let mut ix = SliceIndex::default();
        for (i, s) in all.iter().enumerate() {
            match &s.node {
                NodeScope::Name(n) => ix.by_node.entry(n.clone()).or_default().push(i),
                _ => ix.general.push(i),
            }
        }
        ix
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
    let candidates: Box<dyn Iterator<Item = &'a ResourceSlice>> = match index {
        Some(ix) => Box::new(ix.candidates(&node.name).into_iter().map(move |i| &all[i])),
        None => Box::new(all.iter()),
    };
    // Newest generation of each pool among the node's slices.
    let mut by_pool: BTreeMap<(&str, &str), Vec<&ResourceSlice>> = BTreeMap::new();
    for s in candidates.filter(|s| relevant(s, node)) {
        let e = by_pool
            .entry((s.driver.as_str(), s.pool.as_str()))
            .or_default();
        match e.first().map(|f| f.generation) {
            Some(g) if s.generation < g => {}
            Some(g) if s.generation > g => *e = vec![s],
            _ => e.push(s),
        }
    }
    let mut pools = Vec::new();
    let mut binding = Vec::new();
    for ((driver, name), slices) in by_pool {
        let generation = slices[0].generation;
        let count = slices[0].slice_count;
        let all_for_pool: Vec<&ResourceSlice> = if slices.len() as i64 == count {
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
            all.iter()
                .filter(|s| s.driver == driver && s.pool == name && s.generation == generation)
                .collect()
        };
        if all_for_pool.len() as i64 != count {
            pools.push(Pool {
                driver,
                name,
                incomplete: true,
                invalid: None,
                slices: Vec::new(),
                other_slices: Vec::new(),
                counter_sets: BTreeMap::new(),
            });
            continue;
        }
        let pool = build(driver, name, slices, &all_for_pool);
        let has_binding = pool
            .slices
            .iter()
            .any(|s| s.devices.iter().any(|d| !d.binding_conditions.is_empty()));
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

fn build<'a>(
    driver: &'a str,
    name: &'a str,
    mut slices: Vec<&'a ResourceSlice>,
    all_for_pool: &[&'a ResourceSlice],
) -> Pool<'a> {
    slices.sort_by(|a, b| a.name.cmp(&b.name));
    let mut device_slices = Vec::new();
    let mut counter_slices = Vec::new();
    for s in &slices {
        if s.shared_counters.is_empty() {
            device_slices.push(*s);
        } else {
            counter_slices.push(*s);
        }
    }
    let mut other = Vec::new();
    if slices.len() < all_for_pool.len() {
        let names: BTreeSet<&str> = slices.iter().map(|s| s.name.as_str()).collect();
        for s in all_for_pool {
            if names.contains(s.name.as_str()) {
                continue;
            }
            if s.shared_counters.is_empty() {
                other.push(*s);
            } else {
                counter_slices.push(*s);
            }
        }
    }
    let invalid = |reason: String| Pool {
        driver,
        name,
        incomplete: false,
        invalid: Some(reason),
        slices: Vec::new(),
        other_slices: Vec::new(),
        counter_sets: BTreeMap::new(),
    };
    let mut seen = BTreeSet::new();
    for s in &device_slices {
        for d in &s.devices {
            if !seen.insert(d.name.as_str()) {
                return invalid(format!("duplicate device name {}", d.name));
            }
        }
    }
    let mut counter_sets = BTreeMap::new();
    for s in &counter_slices {
        for (set, counters) in &s.shared_counters {
            if counter_sets.insert(set.as_str(), counters).is_some() {
                return invalid(format!("duplicate counter set name {set}"));
            }
        }
    }
    for s in device_slices.iter().chain(other.iter()) {
        for d in &s.devices {
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
    Pool {
        driver,
        name,
        incomplete: false,
        invalid: None,
        slices: device_slices,
        other_slices: other,
        counter_sets,
    }
}
