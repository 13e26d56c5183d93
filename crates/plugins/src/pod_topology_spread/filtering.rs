//! PreFilter, PreFilter extensions and Filter of PodTopologySpread.

use rkube_framework::{
    Code, CycleState, FilterPlugin, NodeInfo, PreFilterPlugin, PreFilterResult, Snapshot, Status,
};
use rkube_model::{Node, Pod};

use super::{
    node_affinity_matches, node_has_all_keys, Constraint, CountWalk, DomainTotals,
    PodTopologySpread, ERR_REASON_CONSTRAINTS_NOT_MATCH, ERR_REASON_NODE_LABEL_NOT_MATCH,
};
use crate::helper::{update_pre_filter_state, FastMap};

const PRE_FILTER_KEY: &str = "PreFilterPodTopologySpread";

/// Upstream's `criticalPaths`: two (value, count) entries, the first always
/// holding the minimum count.
#[derive(Debug, Clone)]
pub(crate) struct CriticalPaths([(String, i64); 2]);

impl CriticalPaths {
    fn new() -> Self {
        CriticalPaths([
            (String::new(), i32::MAX as i64),
            (String::new(), i32::MAX as i64),
        ])
    }

    fn update(&mut self, value: &str, num: i64) {
        let p = &mut self.0;
        let i = if value == p[0].0 {
            Some(0)
        } else if value == p[1].0 {
            Some(1)
        } else {
            None
        };
        match i {
            Some(i) => {
                p[i].1 = num;
                if p[0].1 > p[1].1 {
                    p.swap(0, 1);
                }
            }
            None => {
                if num < p[0].1 {
                    p[1] = p[0].clone();
                    p[0] = (value.to_string(), num);
                } else if num < p[1].1 {
                    p[1] = (value.to_string(), num);
                }
            }
        }
    }
}

impl CriticalPaths {
    /// The paths of a constraint's domains as upstream builds them, walking
    /// its map of domains: upstream's walk is in Go's map order, i.e. any
    /// order, and this is the walk in the order of the values, so that the
    /// second path does not depend on how the totals were built. (Only the
    /// minimum is read before a PreFilter extension updates the paths.)
    fn of<'a>(domains: impl Iterator<Item = (&'a str, i64)>) -> Self {
        let mut best: [Option<(i64, &str)>; 2] = [None, None];
        for (v, n) in domains {
            let e = Some((n, v));
            if best[0].is_none_or(|b| (n, v) < b) {
                best[1] = best[0];
                best[0] = e;
            } else if best[1].is_none_or(|b| (n, v) < b) {
                best[1] = e;
            }
        }
        let mut p = CriticalPaths::new();
        for (n, v) in best.into_iter().flatten() {
            p.update(v, n);
        }
        p
    }
}

/// Computed in PreFilter, read in Filter.
#[derive(Debug, Clone, Default)]
pub(crate) struct PreFilterState {
    constraints: Vec<Constraint>,
    critical_paths: Vec<CriticalPaths>,
    /// Per constraint: matching pods per domain, over every node (shared
    /// with the memo).
    totals: DomainTotals,
    /// Per constraint: what PreFilter extensions added to `totals`.
    changes: Vec<FastMap<String, i64>>,
    /// Per constraint: domains the extensions added.
    new_domains: Vec<usize>,
}

impl PreFilterState {
    /// Matching pods in a domain of constraint `i`.
    fn count(&self, i: usize, value: &str) -> i64 {
        self.totals.get(i, value).unwrap_or(0) + self.changes[i].get(value).copied().unwrap_or(0)
    }

    /// Adds `delta` to a domain of constraint `i` (making it one); returns
    /// its new count.
    fn add(&mut self, i: usize, value: &str, delta: i64) -> i64 {
        match self.changes[i].get_mut(value) {
            Some(c) => *c += delta,
            None => {
                if self.totals.get(i, value).is_none() {
                    self.new_domains[i] += 1;
                }
                self.changes[i].insert(value.to_string(), delta);
            }
        }
        self.count(i, value)
    }

    /// The global minimum for the skew, 0 when fewer than `minDomains`
    /// domains are eligible.
    fn min_match_num(&self, i: usize) -> i64 {
        let domains = self.totals.len(i) + self.new_domains[i];
        if (domains as i64) < self.constraints[i].min_domains as i64 {
            0
        } else {
            self.critical_paths[i].0[0].1
        }
    }

    fn update_with_pod(&mut self, pod: &Pod, updated: &Pod, node: &Node, delta: i64) {
        if updated.namespace != pod.namespace || !node_has_all_keys(node, &self.constraints) {
            return;
        }
        let affinity = node_affinity_matches(pod, node);
        for i in 0..self.constraints.len() {
            let c = &self.constraints[i];
            if !c.matches(&updated.labels) || !c.includes(pod, node, affinity) {
                continue;
            }
            let v = &node.labels[&c.topology_key];
            let n = self.add(i, v, delta);
            self.critical_paths[i].update(v, n);
        }
    }
}

fn state_error() -> Status {
    Status::error(format!(
        "reading {PRE_FILTER_KEY:?} from cycleState: not found"
    ))
}

impl PreFilterPlugin for PodTopologySpread {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let constraints = self.constraints(pod, snapshot, true);
        if constraints.is_empty() {
            return (None, Status::skip());
        }
        let width = constraints.len();
        let totals = CountWalk {
            pod,
            constraints: &constraints,
            require_all: true,
            skip_hostname: false,
        }
        .totals(&self.memo.filter, snapshot);
        let critical_paths = (0..width)
            .map(|i| CriticalPaths::of(totals.domains(i)))
            .collect();
        state.write(
            PRE_FILTER_KEY,
            PreFilterState {
                constraints,
                critical_paths,
                totals,
                changes: vec![FastMap::default(); width],
                new_domains: vec![0; width],
            },
        );
        (None, Status::success())
    }

    fn add_pod(&self, state: &mut CycleState, pod: &Pod, added: &Pod, node: &NodeInfo) -> Status {
        update_pre_filter_state(state, PRE_FILTER_KEY, |s: &mut PreFilterState| {
            s.update_with_pod(pod, added, &node.node, 1)
        })
        .map_or_else(state_error, |()| Status::success())
    }

    fn remove_pod(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        removed: &Pod,
        node: &NodeInfo,
    ) -> Status {
        update_pre_filter_state(state, PRE_FILTER_KEY, |s: &mut PreFilterState| {
            s.update_with_pod(pod, removed, &node.node, -1)
        })
        .map_or_else(state_error, |()| Status::success())
    }
}

impl FilterPlugin for PodTopologySpread {
    fn filter(&self, state: &CycleState, pod: &Pod, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<PreFilterState>(PRE_FILTER_KEY) else {
            return state_error();
        };
        for (i, c) in s.constraints.iter().enumerate() {
            let Some(value) = node.node.labels.get(&c.topology_key) else {
                return Status::new(
                    Code::UnschedulableAndUnresolvable,
                    ERR_REASON_NODE_LABEL_NOT_MATCH,
                );
            };
            let self_match = i64::from(c.matches(&pod.labels));
            let skew = s.count(i, value) + self_match - s.min_match_num(i);
            if skew > c.max_skew as i64 {
                return Status::new(Code::Unschedulable, ERR_REASON_CONSTRAINTS_NOT_MATCH);
            }
        }
        Status::success()
    }
}
