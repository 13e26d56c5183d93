//! PreFilter, PreFilter extensions and Filter of PodTopologySpread.

use rkube_framework::{
    Code, CycleState, FilterPlugin, NodeInfo, PreFilterPlugin, PreFilterResult, Snapshot, Status,
};
use rkube_model::{Node, Pod};

use super::{
    node_affinity_matches, node_has_all_keys, Constraint, PodTopologySpread,
    ERR_REASON_CONSTRAINTS_NOT_MATCH, ERR_REASON_NODE_LABEL_NOT_MATCH,
};
use crate::helper::{fill_nodes, update_pre_filter_state, FastMap};

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

/// Matching pods per topology value of one constraint, remembering the
/// order in which values were first seen (node order) so that critical
/// paths are computed deterministically.
#[derive(Debug, Clone, Default)]
pub(crate) struct Domains {
    index: FastMap<String, usize>,
    values: Vec<(String, i64)>,
}

impl Domains {
    fn add(&mut self, value: &str, delta: i64) -> i64 {
        match self.index.get(value) {
            Some(&i) => {
                self.values[i].1 += delta;
                self.values[i].1
            }
            None => {
                self.index.insert(value.to_string(), self.values.len());
                self.values.push((value.to_string(), delta));
                delta
            }
        }
    }

    fn get(&self, value: &str) -> i64 {
        self.index.get(value).map_or(0, |&i| self.values[i].1)
    }

    fn len(&self) -> usize {
        self.values.len()
    }
}

/// Computed in PreFilter, read in Filter.
#[derive(Debug, Clone, Default)]
pub(crate) struct PreFilterState {
    constraints: Vec<Constraint>,
    critical_paths: Vec<CriticalPaths>,
    counts: Vec<Domains>,
}

impl PreFilterState {
    /// The global minimum for the skew, 0 when fewer than `minDomains`
    /// domains are eligible.
    fn min_match_num(&self, i: usize) -> i64 {
        if (self.counts[i].len() as i64) < self.constraints[i].min_domains as i64 {
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
            let n = self.counts[i].add(v, delta);
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
        let all: Vec<&NodeInfo> = snapshot.nodes.iter().collect();
        // Per node and constraint: matching pods, or -1 when the node does
        // not count for the constraint.
        let width = constraints.len();
        let per_node = fill_nodes(&all, width, -1i64, |n, row| {
            let node = &n.node;
            if !node_has_all_keys(node, &constraints) {
                return;
            }
            let affinity = node_affinity_matches(pod, node);
            for (c, slot) in constraints.iter().zip(row.iter_mut()) {
                if c.includes(pod, node, affinity) {
                    *slot = c.count_pods(n, &pod.namespace);
                }
            }
        });
        let mut counts = vec![Domains::default(); width];
        for (n, row) in all.iter().zip(per_node.chunks(width)) {
            for (i, &count) in row.iter().enumerate() {
                if count >= 0 {
                    counts[i].add(&n.node.labels[&constraints[i].topology_key], count);
                }
            }
        }
        let critical_paths = counts
            .iter()
            .map(|d| {
                let mut p = CriticalPaths::new();
                for (v, n) in &d.values {
                    p.update(v, *n);
                }
                p
            })
            .collect();
        state.write(
            PRE_FILTER_KEY,
            PreFilterState {
                constraints,
                critical_paths,
                counts,
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
            let skew = s.counts[i].get(value) + self_match - s.min_match_num(i);
            if skew > c.max_skew as i64 {
                return Status::new(Code::Unschedulable, ERR_REASON_CONSTRAINTS_NOT_MATCH);
            }
        }
        Status::success()
    }
}
