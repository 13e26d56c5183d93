//! The "explain" evaluation: runs every filter and score plugin on every
//! node and keeps each verdict (rkube's own; upstream has no counterpart —
//! it is built from the steps of `pkg/scheduler/schedule_one.go` and
//! `pkg/scheduler/framework/runtime/framework.go`, with the FailedScheduling
//! message of `FitError.Error()` when no node fits).

use rayon::prelude::*;
use rkube_model::Pod;

use crate::cycle_state::CycleState;
use crate::extension_points::{run_pre_filter, run_score, PluginScore};
use crate::framework::{Framework, Point};
use crate::schedule_one::{Outcome, Scheduler};
use crate::snapshot::Snapshot;
use crate::status::{Code, Status};

/// One filter plugin's verdict on one node, for `explain`.
#[derive(Debug, Clone)]
pub struct FilterVerdict {
    /// Plugin name.
    pub plugin: &'static str,
    /// Code (Skip when the plugin's PreFilter skipped).
    pub code: Code,
    /// Reasons.
    pub reasons: Vec<String>,
}

/// Everything `explain` shows for one node.
#[derive(Debug, Clone)]
pub struct NodeExplanation {
    /// Node index.
    pub node: usize,
    /// Feasible: every filter passed (and PreFilter did not exclude it).
    pub feasible: bool,
    /// Every filter plugin's verdict, in profile order.
    pub filters: Vec<FilterVerdict>,
    /// Scores (feasible nodes only).
    pub scores: Vec<PluginScore>,
    /// Total.
    pub total: i64,
}

/// The full explanation of one pod's placement.
#[derive(Debug, Clone)]
pub struct Explanation {
    /// Per node, in snapshot order.
    pub nodes: Vec<NodeExplanation>,
    /// Indices of the feasible nodes with the highest total.
    pub top_nodes: Vec<usize>,
    /// FailedScheduling message when no node is feasible, else empty.
    pub message: String,
}

/// Evaluates every filter and score plugin on every node.
pub fn explain(fw: &Framework, snapshot: &Snapshot, pod: &Pod) -> Result<Explanation, Status> {
    let mut state = CycleState::new();
    let pre = run_pre_filter(fw, &mut state, pod, snapshot);
    let mut nodes: Vec<NodeExplanation> = Vec::with_capacity(snapshot.len());
    let restrict = match &pre {
        Ok((r, _)) => r.clone(),
        Err(s) if s.is_rejected() => None,
        Err(s) => return Err(s.clone()),
    };
    // PreFilter rejected the pod: every PreFilter plugin's own verdict, as
    // if none stopped the others; a rejection stands for every node.
    let mut rejected_by: Vec<(&'static str, Status)> = Vec::new();
    let mut skipped_each = std::collections::BTreeSet::new();
    if pre.is_err() {
        let mut each = CycleState::new();
        for p in fw.plugins(Point::PreFilter) {
            let (_, s) = p
                .as_pre_filter()
                .expect("framework checked")
                .pre_filter(&mut each, pod, snapshot);
            if s.is_rejected() {
                rejected_by.push((p.name(), s));
            } else if s.code == Code::Skip {
                skipped_each.insert(p.name());
            }
        }
    }
    let rejected_by = &rejected_by;
    let skipped_each = &skipped_each;
    let state_ref = &state;
    let per_node: Vec<NodeExplanation> = (0..snapshot.len())
        .into_par_iter()
        .map(|i| {
            let info = &snapshot.nodes[i];
            let mut filters = Vec::new();
            let mut feasible = pre.is_ok()
                && restrict
                    .as_ref()
                    .is_none_or(|names| names.contains(info.name()));
            for p in fw.plugins(Point::Filter) {
                if let Some((_, s)) = rejected_by.iter().find(|(n, _)| *n == p.name()) {
                    filters.push(FilterVerdict {
                        plugin: p.name(),
                        code: s.code,
                        reasons: s.reason_strings(),
                    });
                    continue;
                }
                if state_ref.skip_filter.contains(p.name()) || skipped_each.contains(p.name()) {
                    filters.push(FilterVerdict {
                        plugin: p.name(),
                        code: Code::Skip,
                        reasons: Vec::new(),
                    });
                    continue;
                }
                let s = p.as_filter().expect("checked").filter(state_ref, pod, info);
                if !s.is_success() {
                    feasible = false;
                }
                filters.push(FilterVerdict {
                    plugin: p.name(),
                    code: s.code,
                    reasons: s.reason_strings(),
                });
            }
            for (name, s) in rejected_by {
                if fw.plugins(Point::Filter).iter().all(|p| p.name() != *name) {
                    filters.push(FilterVerdict {
                        plugin: name,
                        code: s.code,
                        reasons: s.reason_strings(),
                    });
                }
            }
            NodeExplanation {
                node: i,
                feasible,
                filters,
                scores: Vec::new(),
                total: 0,
            }
        })
        .collect();
    nodes.extend(per_node);
    let feasible: Vec<usize> = nodes
        .iter()
        .filter(|n| n.feasible)
        .map(|n| n.node)
        .collect();
    let mut message = String::new();
    let mut top_nodes = Vec::new();
    if feasible.is_empty() {
        // Reproduce the scheduler's own diagnosis for the message.
        let mut sched = Scheduler::new(0, 0);
        sched.percentage_of_nodes_to_score = 100;
        if let Outcome::Unschedulable { message: m, .. } = sched.schedule(fw, snapshot, pod) {
            message = m;
        }
    } else {
        let scores = run_score(fw, &mut state, pod, snapshot, &feasible)?;
        let best = scores.iter().map(|s| s.total).max().unwrap_or(0);
        for s in scores {
            if s.total == best {
                top_nodes.push(s.node);
            }
            let n = &mut nodes[s.node];
            n.total = s.total;
            n.scores = s.scores;
        }
    }
    Ok(Explanation {
        nodes,
        top_nodes,
        message,
    })
}
