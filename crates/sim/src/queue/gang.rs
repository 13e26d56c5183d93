//! The pod-group cycle (GenericWorkload), as upstream's
//! `schedule_one_podgroup.go` runs it for a PodGroup without a composite
//! parent and without topology constraints (both behind alpha gates):
//!
//! 1. PreEnqueue runs for every member; one gated member keeps the whole
//!    group out of the queue.
//! 2. The members must share the group's priority, one scheduler name and
//!    one preemption policy (a SchedulerError otherwise).
//! 3. A simulation pass schedules the members in queue order, each assumed
//!    (and reserved) for the next, with PostFilter skipped;
//!    PlacementFeasible (GangScheduling) stops it as soon as `minCount` can
//!    no longer be met. Then every assumption is reverted (upstream's
//!    revert: Unreserve and forget, in reverse order).
//! 4. When the group failed, PodGroupPostFilter (workload-aware preemption)
//!    runs; rkube models its outcome when nothing may be preempted and
//!    refuses the cluster otherwise.
//! 5. When the group succeeded, the members that fit are assumed for real,
//!    Reserve and Permit run again (GangScheduling makes each wait until
//!    `minCount` members are assumed, then allows them all) and each is
//!    bound.

use std::sync::Arc;

use rkube_framework::binding;
use rkube_framework::extension_points::run_placement_feasible;
use rkube_framework::in_memory::SnapshotHost;
use rkube_framework::{
    Code, CycleState, EnqueueContext, Framework, GangPermit, Outcome, PlacementProgress, Point,
    Snapshot, Status, WaitingPods,
};
use rkube_model::pod_groups::PodGroup;
use rkube_model::Pod;

use super::{pending, Queue};
use crate::{Placement, SimError};

/// Upstream's `errPodGroupUnschedulable`, the first reason of a failed
/// group's status.
const GROUP_UNSCHEDULABLE: &str = "pod group is unschedulable";

/// One member's result in the simulation pass.
enum Tried {
    /// Fits on this node (snapshot index), with its cycle state.
    Fits(usize, CycleState),
    /// Does not fit: its own FailedScheduling message.
    Failed(String),
}

/// The group's verdict after the simulation pass.
enum Verdict {
    Success,
    /// Unschedulable: the group's message (reasons joined).
    Unschedulable(String),
    /// An error: its message.
    Error(String),
}

/// Called for each member the simulation pass tries, with the snapshot it
/// is tried on (the members before it assumed) and the node the scheduling
/// algorithm picks for it (`None`: no node fits).
pub(crate) type Observer<'o> = &'o mut dyn FnMut(&Snapshot, &Pod, Option<&str>);

impl Queue<'_> {
    /// Schedules one pod group's queued members (in queue order); one
    /// placement per member, in that order. `observe` sees each member the
    /// simulation pass tries (`explain` uses it).
    pub(crate) fn schedule_group(
        &mut self,
        snapshot: &mut Snapshot,
        members: &[&Pod],
        observe: Observer<'_>,
    ) -> Result<Vec<Placement>, SimError> {
        let all_pending = |msg: &str| {
            members
                .iter()
                .map(|p| pending(p, msg.to_string()))
                .collect()
        };
        let Some(fw) = self.profiles.for_pod(members[0]) else {
            return Ok(all_pending(&format!(
                "spec.schedulerName {:?} is not a profile of this configuration (another scheduler places this pod)",
                members[0].scheduler_name
            )));
        };
        let ctx = EnqueueContext {
            dra: snapshot.dra.as_deref(),
            pod_groups: Some(&self.groups),
        };
        if let Some(gate) = members
            .iter()
            .find_map(|p| rkube_framework::pre_enqueue_rejection_in(fw, p, &ctx))
        {
            return Ok(all_pending(&gate));
        }
        let group = self
            .groups
            .of(members[0])
            .and_then(|s| s.group.clone())
            .expect("PreEnqueue let the group in, so it exists");
        if let Err(msg) = validate(&group, members) {
            return Ok(all_pending(&msg));
        }
        let (tried, verdict, stopped_at) =
            self.simulation_pass(fw, snapshot, &group, members, observe);
        let verdict = match verdict {
            Verdict::Unschedulable(msg) => Verdict::Unschedulable(
                self.pod_group_post_filter(fw, snapshot, &group, members, msg)?,
            ),
            v => v,
        };
        let mut out = Vec::with_capacity(members.len());
        let waiting = WaitingPods::new();
        let mut admitted: Vec<(usize, Arc<Pod>, usize, CycleState)> = Vec::new();
        for (i, pod) in members.iter().enumerate() {
            let placement = match (&verdict, tried.get(i)) {
                (Verdict::Error(msg), _) => pending(pod, msg.clone()),
                (_, Some(Tried::Failed(msg))) => pending(pod, msg.clone()),
                // Not tried: the pass stopped before this member, with the
                // group's status at that point (no PostFilter reasons).
                (_, None) => pending(pod, stopped_at.clone()),
                (Verdict::Unschedulable(msg), Some(Tried::Fits(..))) => {
                    pending(pod, format!("{GROUP_UNSCHEDULABLE}, {msg}"))
                }
                (Verdict::Success, Some(Tried::Fits(node, state))) => {
                    match self.reserve_and_permit(
                        fw,
                        snapshot,
                        &group,
                        pod,
                        *node,
                        state.clone(),
                        &waiting,
                    ) {
                        Ok((placed, state)) => {
                            admitted.push((i, placed, *node, state));
                            out.push(None);
                            continue;
                        }
                        Err(msg) => pending(pod, msg),
                    }
                }
            };
            out.push(Some(placement));
        }
        // The binding cycles, once every admitted member has passed Permit.
        for (i, placed, node, mut state) in admitted {
            let name = snapshot.nodes[node].name().to_string();
            let mut host = SnapshotHost::new(snapshot);
            let s = binding::binding_cycle(fw, &mut state, &placed, &name, &waiting, &mut host);
            let placement = if s.is_success() {
                self.groups.bind(&placed);
                self.nominator.delete(&placed.uid);
                Placement {
                    node: Some(name),
                    devices: crate::report::AllocatedDevice::of(&placed, snapshot.dra.as_deref()),
                    ..pending(members[i], String::new())
                }
            } else {
                binding::unreserve(fw, &mut state, &placed, &name, &mut host);
                snapshot.remove(node, &placed.uid);
                self.groups.forget(&placed);
                pending(members[i], s.message())
            };
            out[i] = Some(placement);
        }
        Ok(out
            .into_iter()
            .map(|p| p.expect("every member has a placement"))
            .collect())
    }

    /// The simulation pass, reverted before it returns: each member's result
    /// (members after the point where the group became infeasible are
    /// missing), the group's verdict, and the message the untried members
    /// get (the group's status where the pass stopped).
    fn simulation_pass(
        &mut self,
        fw: &Framework,
        snapshot: &mut Snapshot,
        group: &PodGroup,
        members: &[&Pod],
        observe: Observer<'_>,
    ) -> (Vec<Tried>, Verdict, String) {
        // Assumed on the snapshot itself and reverted at the end (as
        // upstream reverts its assumptions): a copy per group would cost a
        // copy of every node, and the caches keyed on the snapshot's change
        // log would start over.
        let sim = snapshot;
        let scheduled = self
            .groups
            .of(members[0])
            .map_or(0, |s| s.scheduled_pods());
        let mut progress = PlacementProgress {
            remaining: members.len(),
            scheduled,
        };
        let mut tried = Vec::new();
        let mut status = run_placement_feasible(fw, group, progress);
        if status.code == Code::Error {
            let msg = format!(
                "failed to evaluate placement feasibility: {}",
                status.message()
            );
            return (tried, Verdict::Error(msg.clone()), msg);
        }
        if status.code == Code::Unschedulable {
            // Upstream wraps the early verdict in its error: the untried
            // members get "pod group is unschedulable, <reasons>".
            let msg = format!("{GROUP_UNSCHEDULABLE}, {}", status.message());
            return (tried, Verdict::Unschedulable(msg.clone()), msg);
        }
        let mut any = false;
        let mut reserved: Vec<(Arc<Pod>, usize, String, CycleState)> = Vec::new();
        for pod in members {
            self.scheduler.pod_group_cycle = true;
            let started = self.latencies.is_some().then(std::time::Instant::now);
            let outcome = self.scheduler.schedule_with(fw, sim, pod, &self.nominator);
            if let (Some(l), Some(t)) = (self.latencies.as_mut(), started) {
                l.push(t.elapsed());
            }
            self.scheduler.pod_group_cycle = false;
            let picked = match &outcome {
                Outcome::Scheduled { node, .. } => Some(sim.nodes[*node].name()),
                _ => None,
            };
            observe(sim, pod, picked);
            let result = match outcome {
                Outcome::Scheduled {
                    node, mut state, ..
                } => {
                    let name = sim.nodes[node].name().to_string();
                    let placed = binding::assumed_pod(pod, &name);
                    sim.assume(node, placed.clone());
                    let mut host = SnapshotHost::new(sim);
                    let s = binding::reserve(fw, &mut state, &placed, &name, &mut host);
                    if s.is_success() {
                        self.groups.assume(pod);
                        reserved.push((placed, node, name, state.clone()));
                        Ok(Tried::Fits(node, state))
                    } else {
                        sim.remove(node, &placed.uid);
                        match s.is_rejected() {
                            true => Ok(Tried::Failed(binding::fit_error(&name, &s).1)),
                            false => Err(s.message()),
                        }
                    }
                }
                Outcome::Unschedulable { message, .. } => Ok(Tried::Failed(message)),
                Outcome::Error(s) => Err(s.message()),
            };
            let fits = matches!(result, Ok(Tried::Fits(..)));
            match result {
                Ok(t) => tried.push(t),
                Err(msg) => {
                    tried.push(Tried::Failed(msg.clone()));
                    status = Status::error(format!(
                        "failed to schedule other pod from a pod group: {msg}"
                    ));
                    break;
                }
            }
            progress.remaining -= 1;
            if fits {
                progress.scheduled += 1;
            }
            let s = run_placement_feasible(fw, group, progress);
            if s.code == Code::Error {
                status = Status::error(format!(
                    "failed to evaluate placement feasibility: {}",
                    s.message()
                ));
                break;
            }
            status = s;
            if status.code == Code::Unschedulable {
                break;
            }
            any |= fits;
        }
        // Upstream's revert: Unreserve and forget, in reverse order (each
        // node's pods are then in their order before the pass).
        for (placed, node, name, mut state) in reserved.into_iter().rev() {
            let mut host = SnapshotHost::new(sim);
            binding::unreserve(fw, &mut state, &placed, &name, &mut host);
            sim.remove(node, &placed.uid);
            self.groups.forget(&placed);
        }
        let verdict = match status.code {
            Code::Error => Verdict::Error(status.message()),
            Code::Success if any => Verdict::Success,
            Code::Success => Verdict::Unschedulable(GROUP_UNSCHEDULABLE.to_string()),
            Code::Wait => {
                Verdict::Unschedulable(format!("{GROUP_UNSCHEDULABLE}, {}", status.message()))
            }
            _ => Verdict::Unschedulable(status.message()),
        };
        let stopped_at = match &verdict {
            Verdict::Unschedulable(m) | Verdict::Error(m) => m.clone(),
            Verdict::Success => String::new(),
        };
        (tried, verdict, stopped_at)
    }

    /// Upstream's PodGroupPostFilter (DefaultPreemption's workload-aware
    /// preemption) after a failed pass: the group's message with its
    /// status appended. Refuses a group that could preempt, which rkube
    /// does not model.
    fn pod_group_post_filter(
        &self,
        fw: &Framework,
        snapshot: &Snapshot,
        group: &PodGroup,
        members: &[&Pod],
        msg: String,
    ) -> Result<String, SimError> {
        if !fw
            .plugins(Point::PostFilter)
            .iter()
            .any(|p| p.name() == "DefaultPreemption")
        {
            return Ok(msg);
        }
        let status = if members.iter().any(|p| p.preemption_never) {
            "not eligible due to preemptionPolicy=Never."
        } else {
            let priority_of = |p: &Pod| {
                self.groups
                    .of(p)
                    .and_then(|s| s.group.as_ref())
                    .map_or(p.priority, |g| g.priority)
            };
            let victim = snapshot
                .nodes
                .iter()
                .flat_map(|n| n.pods.iter())
                .find(|p| priority_of(p) < group.priority);
            if let Some(v) = victim {
                return Err(SimError::Runtime(format!(
                    "pod group {} does not fit and could preempt lower-priority pods (e.g. {}): workload-aware preemption (DefaultPreemption's PodGroupPostFilter) is not implemented by rkube",
                    group.key(),
                    v.key()
                )));
            }
            "No preemption victims found for incoming preemptor"
        };
        Ok(format!("{msg}, pod group preemption: {status}"))
    }

    /// Assumes a member that fit on the real snapshot and runs Reserve and
    /// Permit; GangScheduling's Permit reads the group's state with this
    /// member assumed.
    #[allow(clippy::too_many_arguments)]
    fn reserve_and_permit(
        &mut self,
        fw: &Framework,
        snapshot: &mut Snapshot,
        group: &Arc<PodGroup>,
        pod: &Pod,
        node: usize,
        mut state: CycleState,
        waiting: &WaitingPods,
    ) -> Result<(Arc<Pod>, CycleState), String> {
        let name = snapshot.nodes[node].name().to_string();
        let placed = binding::assumed_pod(pod, &name);
        snapshot.assume(node, placed.clone());
        self.groups.assume(pod);
        let gs = self.groups.of(pod).expect("member of a known group");
        state.write(
            GangPermit::KEY,
            GangPermit {
                group: group.clone(),
                scheduled: gs.scheduled_pods(),
                assumed: gs.assumed(),
                waiting: waiting.clone(),
            },
        );
        let mut host = SnapshotHost::new(snapshot);
        match binding::reserve_and_permit(fw, &mut state, &placed, &name, &mut host, waiting) {
            Ok(_) => Ok((placed, state)),
            Err(s) => {
                snapshot.remove(node, &placed.uid);
                self.groups.forget(pod);
                Err(binding::fit_error(&name, &s).1)
            }
        }
    }
}

/// Upstream's `validatePodGroup` for the queued members (PodGroupPreemptionPolicy
/// off): one scheduler name, the group's priority, one preemption policy.
fn validate(group: &PodGroup, members: &[&Pod]) -> Result<(), String> {
    let first = members[0];
    let policy = |p: &Pod| {
        if p.preemption_never {
            "Never"
        } else {
            "PreemptLowerPriority"
        }
    };
    for p in members {
        if p.scheduler_name != first.scheduler_name {
            return Err(format!(
                "all pods in a single pod group should have the same .spec.schedulerName set, got: {:?} and {:?}",
                p.scheduler_name, first.scheduler_name
            ));
        }
        if p.priority != group.priority {
            return Err(format!(
                "all pods in a single pod group should have the same priority as the pod group's priority, got {} and {}",
                p.priority, group.priority
            ));
        }
        if policy(p) != policy(first) {
            return Err(format!(
                "all pods in a single pod group should have the same preemption policy, got {} and {}",
                policy(p),
                policy(first)
            ));
        }
    }
    Ok(())
}
