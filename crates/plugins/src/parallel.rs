//! Upstream's parallelizer for PreFilter/PreScore scans: maps every node in
//! parallel (from the framework's threshold on), keeping the input order.

use rayon::prelude::*;
use rkube_framework::schedule_one::PARALLEL_THRESHOLD;
use rkube_framework::NodeInfo;

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
