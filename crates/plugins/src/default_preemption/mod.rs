//! DefaultPreemption (PostFilter): when no node fits, find a node where
//! evicting lower-priority pods lets the pod fit, pick the victims, and
//! nominate the node — upstream v1.37's `defaultpreemption` plugin and the
//! `preemption.Evaluator` it drives, for individual pods.
//!
//! Steps, as upstream:
//! 1. Eligibility: `preemptionPolicy: Never` pods never preempt; a pod whose
//!    nominated node still has lower-priority pods terminating by preemption
//!    waits for them.
//! 2. Potential nodes: nodes whose filter status is `Unschedulable` (not
//!    `UnschedulableAndUnresolvable`), in snapshot order.
//! 3. Dry run from an offset: on each node, remove every lower-priority pod,
//!    check that the pod fits (filters with nominated pods, PreFilter
//!    `add_pod`/`remove_pod` keeping plugin state right), then reprieve
//!    victims most important first (PDB-violating ones before the others).
//!    The search stops once it has a non-PDB-violating candidate and
//!    `numCandidates` candidates in all.
//! 4. Pick one candidate: fewest PDB violations, lowest highest victim
//!    priority, lowest priority sum, fewest victims, latest start time of the
//!    highest-priority victims, then the first.
//!
//! Determinism: upstream picks the dry-run offset with `rand.Int31n` and runs
//! the dry run on 16 goroutines; rkube takes the offset from the scheduler's
//! seeded generator ([`PostFilterHandle::random_below`], seed and cycle
//! number) and checks nodes one at a time in offset order, so the same seed
//! gives the same candidates. Start times are `status.startTime`, else
//! `metadata.creationTimestamp`, else "now" (later than any other).
//!
//! Asynchronous preemption (`SchedulerAsyncPreemption`, beta, on by
//! default) is the live scheduler's: it deletes the victims after the
//! cycle and its queue runs this plugin's PreEnqueue gate, which holds the
//! preemptor back while the deletions are being sent
//! (`rkube_scheduler::queue`). The simulator removes victims at once, so
//! nothing waits there.
//!
//! With GenericWorkload on, victims are upstream's units ([`victims`]): a
//! member of a PodGroup counts at its group's priority, and a group with
//! disruption mode `all` is evicted whole or not at all; a failed pod
//! group's cycle runs [`pod_group`]'s workload-aware preemption.
//!
//! Not implemented: scheduler extenders.

use std::sync::Arc;

use rkube_config::args::DefaultPreemptionArgs;
use rkube_framework::{
    fit_error_message, ActionType, ClusterEventWithHint, Code, CycleState, Diagnosis,
    EventResource, NodeInfo, NodeToStatus, Plugin, PostFilterHandle, PostFilterPlugin,
    PostFilterResult, QueueingHint, Snapshot, Status,
};
use rkube_model::workloads::PodDisruptionBudget;
use rkube_model::Pod;

pub mod pod_group;
pub mod victims;

use victims::{filter_victims_with_pdb_violation, more_important, pod_priority, Victim};
pub use victims::{parse_rfc3339_nanos, start_time};

/// Upstream name.
pub const NAME: &str = "DefaultPreemption";

const NO_VICTIMS: &str = "No preemption victims found for incoming pod";
const NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";

/// The plugin, with its `DefaultPreemptionArgs`.
#[derive(Debug, Clone)]
pub struct DefaultPreemption {
    /// `minCandidateNodesPercentage` (default 10).
    pub min_candidate_nodes_percentage: i32,
    /// `minCandidateNodesAbsolute` (default 100).
    pub min_candidate_nodes_absolute: i32,
}

impl Default for DefaultPreemption {
    fn default() -> Self {
        DefaultPreemption {
            min_candidate_nodes_percentage: 10,
            min_candidate_nodes_absolute: 100,
        }
    }
}

/// Builds the plugin from its args (validated by the config crate).
pub fn new(args: &serde_json::Value, path: &str) -> Result<Arc<dyn Plugin>, String> {
    let a: DefaultPreemptionArgs =
        rkube_config::args::decode(args, path).map_err(|e| e.to_string())?;
    Ok(Arc::new(DefaultPreemption {
        min_candidate_nodes_percentage: a.min_candidate_nodes_percentage.unwrap_or(10),
        min_candidate_nodes_absolute: a.min_candidate_nodes_absolute.unwrap_or(100),
    }))
}

impl Plugin for DefaultPreemption {
    fn name(&self) -> &'static str {
        NAME
    }
    fn as_post_filter(&self) -> Option<&dyn PostFilterPlugin> {
        Some(self)
    }
    fn as_pod_group_post_filter(&self) -> Option<&dyn rkube_framework::PodGroupPostFilterPlugin> {
        Some(self)
    }
    /// Upstream's list with async preemption (beta, on by default): a
    /// victim's deletion re-checks a pod this plugin's PreEnqueue gated,
    /// but never requeues it by this plugin's say; the plugins whose
    /// rejections preemption resolves decide.
    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        Some(vec![ClusterEventWithHint::with_hint(
            EventResource::AssignedPod,
            ActionType::DELETE,
            |_, _, _, _| Ok(QueueingHint::QueueSkip),
        )])
    }
}

/// A node where preemption would let the pod fit, with its victims (most
/// important first).
#[derive(Debug, Clone)]
pub struct Candidate {
    /// Node name.
    pub node: String,
    /// Pods to evict.
    pub victims: Vec<Arc<Pod>>,
    /// Victims whose eviction violates a PodDisruptionBudget.
    pub num_pdb_violations: i64,
}

/// What the dry run found.
#[derive(Debug, Clone, Default)]
pub struct DryRun {
    /// Candidates: non-PDB-violating first, then violating, each in search order.
    pub candidates: Vec<Candidate>,
    /// Why each rejected node was rejected.
    pub statuses: NodeToStatus,
    /// Error messages met on the way.
    pub errors: Vec<String>,
}

fn status_of<'a>(m: &'a NodeToStatus, node: &str) -> &'a Status {
    m.nodes.get(node).unwrap_or(&m.absent)
}

/// Upstream's `pickOneNodeForPreemption`: the index of the chosen candidate.
pub fn pick_one_node_for_preemption(candidates: &[Candidate]) -> Option<usize> {
    if candidates.is_empty() {
        return None;
    }
    type ScoreFn = fn(&Candidate) -> i128;
    let score_fns: [ScoreFn; 5] = [
        |c| -(c.num_pdb_violations as i128),
        |c| -(c.victims.first().map_or(0, |p| p.priority) as i128),
        |c| {
            -c.victims
                .iter()
                .map(|p| p.priority as i128 + (i32::MAX as i128 + 1))
                .sum::<i128>()
        },
        |c| -(c.victims.len() as i128),
        |c| {
            // Earliest start time among the highest-priority victims.
            let Some(first) = c.victims.first() else {
                return i128::MIN;
            };
            let mut max_prio = first.priority;
            let mut earliest = start_time(first);
            for p in &c.victims {
                if p.priority == max_prio {
                    earliest = earliest.min(start_time(p));
                } else if p.priority > max_prio {
                    max_prio = p.priority;
                    earliest = start_time(p);
                }
            }
            earliest
        },
    ];
    let mut all: Vec<usize> = (0..candidates.len()).collect();
    for f in score_fns {
        let mut best = i128::MIN;
        let mut selected: Vec<usize> = Vec::new();
        for &i in &all {
            let s = f(&candidates[i]);
            if s > best {
                best = s;
                selected.clear();
            }
            if s == best {
                selected.push(i);
            }
        }
        if selected.len() == 1 {
            return Some(selected[0]);
        }
        all = selected;
    }
    all.first().copied()
}

/// Upstream's aggregate error text: one message as is, several deduplicated
/// in brackets.
fn aggregate(errors: &[String]) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for e in errors {
        if !seen.contains(&e.as_str()) {
            seen.push(e);
        }
    }
    if seen.len() == 1 {
        seen[0].to_string()
    } else {
        format!("[{}]", seen.join(", "))
    }
}

impl DefaultPreemption {
    /// The plugin with explicit args.
    pub fn with_args(
        min_candidate_nodes_percentage: i32,
        min_candidate_nodes_absolute: i32,
    ) -> Self {
        DefaultPreemption {
            min_candidate_nodes_percentage,
            min_candidate_nodes_absolute,
        }
    }

    /// Upstream's `calculateNumCandidates`.
    pub fn calculate_num_candidates(&self, num_nodes: usize) -> usize {
        let n = num_nodes as i64 * self.min_candidate_nodes_percentage as i64 / 100;
        let n = n.max(self.min_candidate_nodes_absolute as i64);
        n.min(num_nodes as i64).max(0) as usize
    }

    /// Upstream's `PodEligibleToPreemptOthers`: `Err(reason)` when the pod
    /// should not preempt.
    pub fn pod_eligible_to_preempt_others(
        &self,
        pod: &Pod,
        snapshot: &Snapshot,
        nominated_node_status: &Status,
    ) -> Result<(), String> {
        if pod.preemption_never {
            return Err("not eligible due to preemptionPolicy=Never.".into());
        }
        let nnn = &pod.nominated_node_name;
        if !nnn.is_empty() {
            if nominated_node_status.code == Code::UnschedulableAndUnresolvable {
                return Ok(());
            }
            if let Some(ni) = snapshot.get(nnn) {
                let groups = snapshot.pod_groups.as_deref();
                if ni
                    .pods
                    .iter()
                    .any(|p| pod_priority(p, groups) < pod.priority && p.terminating_by_preemption)
                {
                    return Err(
                        "not eligible due to a terminating pod on the nominated node.".into(),
                    );
                }
            }
        }
        Ok(())
    }

    /// Upstream's `SelectVictimsOnNode`: the fewest, least important units
    /// to evict from `node` (a copy of snapshot node `index`) for `pod` to
    /// fit, as pods (most important first), and how many of their pods
    /// violate a PDB. Only the main node's copy changes; a unit's pods on
    /// other nodes (a group with disruption mode `all`) reach the
    /// PreFilter extensions with their own node as it is, as upstream.
    pub fn select_victims_on_node(
        &self,
        handle: &dyn PostFilterHandle,
        mut state: CycleState,
        pod: &Pod,
        mut node: NodeInfo,
        pdbs: &[PodDisruptionBudget],
    ) -> (Vec<Arc<Pod>>, i64, Status) {
        let snapshot = handle.snapshot();
        let all = match snapshot.index_of(node.name()) {
            Some(i) => victims::victims_on_nodes(snapshot, &[i]),
            None => node
                .pods
                .iter()
                .map(|p| victims::pod_victim(p, snapshot.pod_groups.as_deref()))
                .collect(),
        };
        let mut potential: Vec<Victim> = all
            .into_iter()
            .filter(|v| v.priority < pod.priority)
            .collect();
        if potential.is_empty() {
            return (
                Vec::new(),
                0,
                Status::new(Code::UnschedulableAndUnresolvable, NO_VICTIMS),
            );
        }
        let main = node.name_shared();
        // A unit's pods leave (or rejoin) the main node's copy; each goes
        // through the PreFilter extensions with its own node.
        let shift = |v: &Victim, state: &mut CycleState, node: &mut NodeInfo, back: bool| {
            for p in &v.pods {
                let on_main = *p.node_name == *main;
                if on_main && back {
                    node.add_pod(p.clone());
                } else if on_main {
                    node.remove_pod(&p.uid);
                }
                let at = match on_main {
                    true => &*node,
                    false => match snapshot.get(&p.node_name) {
                        Some(remote) => remote,
                        None => continue,
                    },
                };
                let s = match back {
                    true => handle.run_pre_filter_extension_add_pod(state, pod, p, at),
                    false => handle.run_pre_filter_extension_remove_pod(state, pod, p, at),
                };
                if !s.is_success() {
                    return s;
                }
            }
            Status::success()
        };
        let remove =
            |v: &Victim, state: &mut CycleState, node: &mut NodeInfo| shift(v, state, node, false);
        let add =
            |v: &Victim, state: &mut CycleState, node: &mut NodeInfo| shift(v, state, node, true);
        for v in &potential {
            let s = remove(v, &mut state, &mut node);
            if !s.is_success() {
                return (Vec::new(), 0, s);
            }
        }
        let s = handle.run_filter_plugins_with_nominated_pods(&state, pod, &node);
        if !s.is_success() {
            return (Vec::new(), 0, s);
        }
        potential.sort_by(more_important);
        let (violating, non_violating) = filter_victims_with_pdb_violation(&potential, pdbs);
        let mut chosen: Vec<usize> = Vec::new();
        let mut reprieve =
            |i: usize, state: &mut CycleState, node: &mut NodeInfo| -> Result<bool, Status> {
                let v = &potential[i];
                let s = add(v, state, node);
                if !s.is_success() {
                    return Err(s);
                }
                let fits = handle
                    .run_filter_plugins_with_nominated_pods(state, pod, node)
                    .is_success();
                if !fits {
                    let s = remove(v, state, node);
                    if !s.is_success() {
                        return Err(s);
                    }
                    chosen.push(i);
                }
                Ok(fits)
            };
        let mut num_violating = 0;
        for &(i, count) in &violating {
            match reprieve(i, &mut state, &mut node) {
                Err(s) => return (Vec::new(), 0, s),
                Ok(false) => num_violating += count,
                Ok(true) => {}
            }
        }
        for &i in &non_violating {
            if let Err(s) = reprieve(i, &mut state, &mut node) {
                return (Vec::new(), 0, s);
            }
        }
        if !violating.is_empty() && !non_violating.is_empty() {
            chosen.sort_by(|&a, &b| more_important(&potential[a], &potential[b]));
        }
        let pods = chosen
            .into_iter()
            .flat_map(|i| potential[i].pods.iter().cloned())
            .collect();
        (pods, num_violating, Status::success())
    }

    /// Upstream's `DryRunPreemption`, one node at a time from `offset`:
    /// stops once there is a non-violating candidate and `num_candidates`
    /// candidates in all; each list keeps at most `num_candidates`.
    #[allow(clippy::too_many_arguments)]
    pub fn dry_run_preemption(
        &self,
        handle: &dyn PostFilterHandle,
        state: &CycleState,
        pod: &Pod,
        potential: &[&NodeInfo],
        pdbs: &[PodDisruptionBudget],
        offset: usize,
        num_candidates: usize,
    ) -> DryRun {
        let mut non_violating: Vec<Candidate> = Vec::new();
        let mut violating: Vec<Candidate> = Vec::new();
        let mut out = DryRun::default();
        let n = potential.len();
        for i in 0..n {
            let ni = potential[(offset + i) % n];
            let (victims, num_pdb, mut status) =
                self.select_victims_on_node(handle, state.clone(), pod, ni.clone(), pdbs);
            if status.is_success() && !victims.is_empty() {
                let c = Candidate {
                    node: ni.name().to_string(),
                    victims,
                    num_pdb_violations: num_pdb,
                };
                let list = if num_pdb == 0 {
                    &mut non_violating
                } else {
                    &mut violating
                };
                if list.len() < num_candidates {
                    list.push(c);
                }
                if !non_violating.is_empty()
                    && non_violating.len() + violating.len() >= num_candidates
                {
                    break;
                }
                continue;
            }
            if status.is_success() {
                status = Status::error(format!(
                    "expected at least one victim pod on node {:?}",
                    ni.name()
                ));
            }
            if status.code == Code::Error {
                out.errors.push(status.message());
            }
            out.statuses.nodes.insert(ni.name_shared(), status);
        }
        out.candidates = non_violating;
        out.candidates.extend(violating);
        out
    }

    /// Upstream's `Evaluator.Preempt` without the "preemption: " prefix.
    fn preempt(
        &self,
        state: &CycleState,
        pod: &Pod,
        statuses: &NodeToStatus,
        handle: &dyn PostFilterHandle,
    ) -> PostFilterResult {
        let snapshot = handle.snapshot();
        let nominated_status = status_of(statuses, &pod.nominated_node_name);
        if let Err(msg) = self.pod_eligible_to_preempt_others(pod, snapshot, nominated_status) {
            return PostFilterResult::keep(Status::new(Code::Unschedulable, msg));
        }
        if snapshot.is_empty() {
            return PostFilterResult::keep(Status::error("no nodes available"));
        }
        let potential: Vec<&NodeInfo> = snapshot
            .nodes
            .iter()
            .filter(|n| status_of(statuses, n.name()).code == Code::Unschedulable)
            .collect();
        let dry = if potential.is_empty() {
            DryRun::default()
        } else {
            let offset = handle.random_below(potential.len());
            let num = self.calculate_num_candidates(potential.len());
            self.dry_run_preemption(
                handle,
                state,
                pod,
                &potential,
                &snapshot.workloads.pdbs,
                offset,
                num,
            )
        };
        if dry.candidates.is_empty() {
            if !dry.errors.is_empty() {
                return PostFilterResult::keep(Status::error(aggregate(&dry.errors)));
            }
            let mut d = Diagnosis {
                node_to_status: dry.statuses,
                ..Default::default()
            };
            d.node_to_status.absent = Status::new(Code::UnschedulableAndUnresolvable, NOT_HELPFUL);
            return PostFilterResult {
                nominated_node: Some(String::new()),
                victims: Vec::new(),
                status: Status::new(Code::Unschedulable, fit_error_message(snapshot.len(), &d)),
                deallocate_claims: Vec::new(),
                delete_claims: Vec::new(),
            };
        }
        let best = pick_one_node_for_preemption(&dry.candidates).unwrap_or(0);
        let c = &dry.candidates[best];
        PostFilterResult {
            nominated_node: Some(c.node.clone()),
            victims: c.victims.clone(),
            status: Status::new(
                Code::Success,
                format!(
                    "found a potential placement for pod on node {}, preempting {} victims",
                    c.node,
                    c.victims.len()
                ),
            ),
            deallocate_claims: Vec::new(),
            delete_claims: Vec::new(),
        }
    }
}

impl PostFilterPlugin for DefaultPreemption {
    fn post_filter(
        &self,
        state: &CycleState,
        pod: &Pod,
        statuses: &NodeToStatus,
        handle: &dyn PostFilterHandle,
    ) -> PostFilterResult {
        let mut r = self.preempt(state, pod, statuses, handle);
        let msg = r.status.message();
        if !msg.is_empty() {
            r.status.reasons =
                rkube_framework::Reasons::from([format!("preemption: {msg}").into()]);
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn num_candidates() {
        let p = DefaultPreemption::default();
        assert_eq!(p.calculate_num_candidates(5), 5);
        assert_eq!(p.calculate_num_candidates(5000), 500);
        let p = DefaultPreemption::with_args(40, 1);
        assert_eq!(p.calculate_num_candidates(5), 2);
    }

    #[test]
    fn aggregate_errors() {
        assert_eq!(aggregate(&["a".into()]), "a");
        assert_eq!(aggregate(&["a".into(), "b".into(), "a".into()]), "[a, b]");
    }
}
