//! The pod-group cycle as the simulator drives it: the queue's side of
//! upstream's `schedule_one_podgroup.go` around the framework's algorithm
//! ([`rkube_framework::pod_group_cycle`]):
//!
//! 1. PreEnqueue runs for every member; one gated member keeps the whole
//!    group out of the queue.
//! 2. The members are validated, and the framework's simulation pass runs
//!    on the snapshot (reverted before it returns).
//! 3. When the group failed, PodGroupPostFilter (workload-aware preemption)
//!    runs; when it found victims, the caller evicts them and nominates the
//!    members ([`GroupAttempt::preemption`]).
//! 4. When the group succeeded, the members that fit are assumed for real,
//!    Reserve and Permit run again (GangScheduling makes each wait until
//!    `minCount` members are assumed, then allows them all) and each is
//!    bound.

use std::sync::Arc;

use rkube_framework::binding;
use rkube_framework::in_memory::SnapshotHost;
use rkube_framework::pod_group_cycle::{self, GroupCycle, Tried, Verdict};
use rkube_framework::pod_group_post_filter::member_nomination;
use rkube_framework::{CycleState, EnqueueContext, Framework, GangPermit, Snapshot, WaitingPods};
use rkube_model::pod_groups::PodGroup;
use rkube_model::Pod;

use super::{pending, Queue};
use crate::{Placement, SimError};

pub(crate) use pod_group_cycle::Observer;

/// What one pod-group cycle decided.
pub(crate) struct GroupAttempt {
    /// One placement per member, in order.
    pub placements: Vec<Placement>,
    /// PodGroupPostFilter found victims: the members to nominate and the
    /// pods to evict (the caller does both).
    pub preemption: Option<rkube_framework::PodGroupPostFilterResult>,
}

impl GroupAttempt {
    fn all(members: &[&Pod], msg: &str) -> Self {
        GroupAttempt {
            placements: members
                .iter()
                .map(|p| pending(p, msg.to_string()))
                .collect(),
            preemption: None,
        }
    }
}

impl Queue<'_> {
    /// Schedules one pod group's queued members (in queue order); one
    /// placement per member, in that order. `observe` sees each member the
    /// simulation pass tries (`explain` uses it).
    pub(crate) fn schedule_group(
        &mut self,
        snapshot: &mut Snapshot,
        members: &[&Pod],
        observe: Observer<'_>,
    ) -> Result<GroupAttempt, SimError> {
        let all_pending = |msg: &str| GroupAttempt::all(members, msg);
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
        let Some(group) = self.groups.of(members[0]).and_then(|s| s.group.clone()) else {
            // No such group, and no GangScheduling (disabled in the
            // configuration) to say so at PreEnqueue: upstream's queue keeps
            // the members aside until the group appears.
            return Ok(all_pending(&format!(
                "waiting for pods's pod group {:?} to appear in scheduling queue",
                members[0].pod_group.as_deref().unwrap_or_default()
            )));
        };
        if let Err(msg) = pod_group_cycle::validate(&group, members) {
            return Ok(all_pending(&msg));
        }
        let mut cycle = GroupCycle {
            scheduler: &mut self.scheduler,
            fw,
            nominator: &mut self.nominator,
            groups: &mut self.groups,
            latencies: self.latencies.as_mut(),
        };
        let pass = cycle.pass(snapshot, &group, members, observe);
        let (verdict, preemption) = match &pass.verdict {
            Verdict::Unschedulable(msg) => {
                let pf = cycle.post_filter(snapshot, &group, members);
                if let Some(why) = pf.not_modelled {
                    return Err(SimError::Runtime(why));
                }
                (pf.verdict(msg), pf.status.is_success().then_some(pf))
            }
            v => (v.clone(), None),
        };
        if matches!(verdict, Verdict::Unschedulable(_)) {
            for (i, p) in members.iter().enumerate() {
                match member_nomination(&pass, preemption.as_ref(), i) {
                    Some(node) if !node.is_empty() => {
                        let mut n = (*p).clone();
                        n.nominated_node_name = node.clone();
                        self.nominator.add(Arc::new(n), &node);
                    }
                    Some(_) => self.nominator.delete(&p.uid),
                    None => {}
                }
            }
        }
        let mut out = Vec::with_capacity(members.len());
        let waiting = WaitingPods::new();
        let mut admitted: Vec<(usize, Arc<Pod>, usize, CycleState)> = Vec::new();
        for (i, pod) in members.iter().enumerate() {
            let placement = match pod_group_cycle::member_message(&pass, &verdict, i) {
                Some(msg) => pending(pod, msg),
                None => {
                    let Some(Tried::Fits(node, state)) = pass.tried.get(i) else {
                        unreachable!("a member without a message fit");
                    };
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
        Ok(GroupAttempt {
            placements: out
                .into_iter()
                .map(|p| p.expect("every member has a placement"))
                .collect(),
            preemption,
        })
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
