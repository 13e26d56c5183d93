//! Upstream's parallelizer for PreFilter/PreScore scans: maps every node in
//! parallel (above a small threshold), keeping the input order.

use rayon::prelude::*;
use rkube_framework::NodeInfo;

/// Below this many nodes the scan runs on the calling thread (the
/// framework's threshold: waking the pool costs more than a few hundred
/// nodes' work).
const PARALLEL_THRESHOLD: usize = 1024;

/// `f` over every node, results in node order.
pub fn map_nodes<'a, T, F>(nodes: &[&'a NodeInfo], f: F) -> Vec<T>
where
    T: Send,
    F: Fn(&'a NodeInfo) -> T + Sync + Send,
{
    if nodes.len() >= PARALLEL_THRESHOLD {
        nodes.par_iter().map(|n| f(n)).collect()
    } else {
        nodes.iter().map(|n| f(n)).collect()
    }
}
