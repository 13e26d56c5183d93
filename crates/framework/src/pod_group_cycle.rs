//! The pod-group cycle's algorithm (GenericWorkload), as upstream's
//! `schedule_one_podgroup.go` runs it for a PodGroup without a composite
//! parent and without topology constraints (both behind alpha gates):
//! the members' validation, the simulation pass with its revert, and the
//! group's verdict with upstream's messages. No queue and no binding: the
//! simulator and the live scheduler call [`GroupCycle::pass`], then assume,
//! Reserve, Permit and bind the members that fit, each on its own host.
//!
//! The pass schedules the members in queue order, each assumed and
//! reserved for the next, with PostFilter skipped
//! ([`Scheduler::pod_group_cycle`]); PlacementFeasible (GangScheduling)
//! stops it as soon as `minCount` can no longer be met. Every assumption
//! is then reverted (Unreserve and forget, in reverse order), as upstream
//! reverts its own.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rkube_model::pod_groups::PodGroup;
use rkube_model::Pod;

use crate::binding;
use crate::extension_points::run_placement_feasible;
use crate::in_memory::SnapshotHost;
use crate::{
    Code, CycleState, Failure, Framework, Nominator, Outcome, PlacementProgress, PodGroupStates,
    Scheduler, Snapshot, Status,
};

/// Upstream's `errPodGroupUnschedulable`, the first reason of a failed
/// group's status.
pub const GROUP_UNSCHEDULABLE: &str = "pod group is unschedulable";

/// One member's result in the simulation pass.
#[derive(Debug, Clone)]
pub enum Tried {
    /// Fits on this node (snapshot index), with its cycle state.
    Fits(usize, CycleState),
    /// Does not fit: its own FailedScheduling message and the plugins that
    /// rejected it.
    Failed {
        /// The message.
        message: String,
        /// The rejecting plugins (none after an error, and none when no
        /// plugin rejected it, e.g. on a cluster without nodes).
        rejectors: BTreeSet<&'static str>,
        /// A plugin failed (SchedulerError), rather than rejected it.
        error: bool,
    },
}

/// The group's verdict after the simulation pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Enough members fit.
    Success,
    /// Unschedulable: the group's message (reasons joined).
    Unschedulable(String),
    /// An error: its message.
    Error(String),
}

/// What the simulation pass found.
#[derive(Debug, Clone)]
pub struct Pass {
    /// Each member's result, in order; members after the point where the
    /// group became infeasible are missing.
    pub tried: Vec<Tried>,
    /// The verdict (before PodGroupPostFilter).
    pub verdict: Verdict,
    /// The message the untried members get: the group's status where the
    /// pass stopped.
    pub stopped_at: String,
}

/// Called for each member the pass tries, with the snapshot it is tried on
/// (the members before it assumed) and the node the scheduling algorithm
/// picks for it (`None`: no node fits).
pub type Observer<'o> = &'o mut dyn FnMut(&Snapshot, &Pod, Option<&str>);

/// What one pod-group cycle runs with.
pub struct GroupCycle<'a> {
    /// The scheduler (cycle count, start index).
    pub scheduler: &'a mut Scheduler,
    /// The members' profile.
    pub fw: &'a Framework,
    /// Nominated pods: a member assumed in the pass loses its nomination,
    /// as upstream's assume drops it (the driver sets every member's
    /// nomination after the cycle).
    pub nominator: &'a mut Nominator,
    /// Every group's members: assumed during the pass, then forgotten.
    pub groups: &'a mut PodGroupStates,
    /// Each member's scheduling time, when kept.
    pub latencies: Option<&'a mut Vec<Duration>>,
}

impl GroupCycle<'_> {
    /// The simulation pass over `members` (in queue order) of `group` on
    /// `snapshot`, reverted before it returns.
    pub fn pass(
        &mut self,
        snapshot: &mut Snapshot,
        group: &PodGroup,
        members: &[&Pod],
        observe: Observer<'_>,
    ) -> Pass {
        let fw = self.fw;
        let scheduled = self.groups.of(members[0]).map_or(0, |s| s.scheduled_pods());
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
            return Pass {
                tried,
                verdict: Verdict::Error(msg.clone()),
                stopped_at: msg,
            };
        }
        if status.code == Code::Unschedulable {
            // Upstream wraps the early verdict in its error: the untried
            // members get "pod group is unschedulable, <reasons>".
            let msg = format!("{GROUP_UNSCHEDULABLE}, {}", status.message());
            return Pass {
                tried,
                verdict: Verdict::Unschedulable(msg.clone()),
                stopped_at: msg,
            };
        }
        let mut any = false;
        let mut reserved: Vec<(Arc<Pod>, usize, String, CycleState)> = Vec::new();
        for pod in members {
            let started = self.latencies.is_some().then(Instant::now);
            self.scheduler.pod_group_cycle = true;
            let outcome = self
                .scheduler
                .schedule_with(fw, snapshot, pod, &*self.nominator);
            self.scheduler.pod_group_cycle = false;
            if let (Some(l), Some(t)) = (self.latencies.as_mut(), started) {
                l.push(t.elapsed());
            }
            let picked = match &outcome {
                Outcome::Scheduled { node, .. } => Some(snapshot.nodes[*node].name()),
                _ => None,
            };
            observe(snapshot, pod, picked);
            let result = match outcome {
                Outcome::Scheduled {
                    node, mut state, ..
                } => {
                    let name = snapshot.nodes[node].name().to_string();
                    let placed = binding::assumed_pod(pod, &name);
                    snapshot.assume(node, placed.clone());
                    let mut host = SnapshotHost::new(snapshot);
                    let s = binding::reserve(fw, &mut state, &placed, &name, &mut host);
                    if s.is_success() {
                        self.groups.assume(pod);
                        self.nominator.delete(&pod.uid);
                        reserved.push((placed, node, name, state.clone()));
                        Ok(Tried::Fits(node, state))
                    } else {
                        snapshot.remove(node, &placed.uid);
                        match s.is_rejected() {
                            true => {
                                let (diagnosis, message) = binding::fit_error(&name, &s);
                                Ok(Tried::Failed {
                                    message,
                                    rejectors: diagnosis.unschedulable_plugins,
                                    error: false,
                                })
                            }
                            false => Err(s.message()),
                        }
                    }
                }
                Outcome::Error(s) => Err(s.message()),
                unschedulable => {
                    let f = Failure::from_outcome(unschedulable)
                        .expect("an unschedulable outcome is a failure");
                    Ok(Tried::Failed {
                        message: f.message,
                        rejectors: f.rejectors,
                        error: false,
                    })
                }
            };
            let fits = matches!(result, Ok(Tried::Fits(..)));
            match result {
                Ok(t) => tried.push(t),
                Err(msg) => {
                    tried.push(Tried::Failed {
                        message: msg.clone(),
                        rejectors: BTreeSet::new(),
                        error: true,
                    });
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
            let mut host = SnapshotHost::new(snapshot);
            binding::unreserve(fw, &mut state, &placed, &name, &mut host);
            snapshot.remove(node, &placed.uid);
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
        Pass {
            tried,
            verdict,
            stopped_at,
        }
    }
}

/// Upstream's `validatePodGroup` for the queued members
/// (PodGroupPreemptionPolicy off): one scheduler name, the group's
/// priority, one preemption policy.
pub fn validate(group: &PodGroup, members: &[&Pod]) -> Result<(), String> {
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

/// The message a member gets: its own when it did not fit, the group's
/// where the pass stopped when it was not tried, the group's verdict when
/// it fit but the group did not; `None` when it fit and the group
/// succeeded (it is to be assumed and bound).
pub fn member_message(pass: &Pass, verdict: &Verdict, i: usize) -> Option<String> {
    match (verdict, pass.tried.get(i)) {
        (Verdict::Error(msg), _) => Some(msg.clone()),
        (_, Some(Tried::Failed { message, .. })) => Some(message.clone()),
        (_, None) => Some(pass.stopped_at.clone()),
        (Verdict::Unschedulable(msg), Some(Tried::Fits(..))) => {
            Some(format!("{GROUP_UNSCHEDULABLE}, {msg}"))
        }
        (Verdict::Success, Some(Tried::Fits(..))) => None,
    }
}
