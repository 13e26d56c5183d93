//! The pod-group cycle as the live scheduler drives it (GenericWorkload;
//! upstream's `scheduleOnePodGroup`): when the queue pops a member of a
//! PodGroup, the group's other members waiting in the queue are taken with
//! it and the framework's algorithm ([`rkube_framework::pod_group_cycle`])
//! decides for all of them on a copy of the snapshot:
//!
//! * the members are validated (one scheduler name, the group's priority,
//!   one preemption policy); a failure is every member's SchedulerError;
//! * the simulation pass tries them in queue order, each assumed for the
//!   next, and stops as soon as `minCount` is out of reach;
//! * when the group fits, each member that fit is assumed, reserved and
//!   permitted for real — GangScheduling's Permit holds each one until
//!   `minCount` are assumed, then allows them all — and bound on a thread
//!   of its own;
//! * otherwise every member fails with upstream's message ("pod group is
//!   unschedulable, …" for the members that fit, their own FailedScheduling
//!   message for the others) and waits in the queue for the events that
//!   may help any of them; members left pending by a group that succeeded
//!   go straight back to the active queue, keeping their queue time, as
//!   upstream requeues such a group;
//! * the PodGroup's `PodGroupInitiallyScheduled` condition says so (True
//!   `Scheduled`, or False `Unschedulable` / `SchedulerError`), never going
//!   back from True.
//!
//! * when the group does not fit, PodGroupPostFilter (DefaultPreemption's
//!   workload-aware preemption) looks for victims across the cluster; when
//!   it finds some, the members it placed are nominated to their nodes,
//!   held back (as upstream's asynchronous preemption holds them) until
//!   the victims' deletions are sent, and the victims are deleted as a
//!   single preemptor's are, in the PodGroup's name.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use rkube_framework::pod_group_cycle::{self, GroupCycle, Tried, Verdict, GROUP_UNSCHEDULABLE};
use rkube_framework::pod_group_post_filter::member_nomination;
use rkube_framework::{Failure, Framework, Nominator, Scheduler, Snapshot, Status};
use rkube_model::Pod;

use k8s_openapi::api::core::v1 as core;

use crate::api::{Preemptor, Writer};
use crate::schedule_one::{
    assume_reserve_permit, handle_failure, spawn_binding_cycle, Attempt, Preemption,
};
use crate::state::State;
use crate::Shared;

/// GangScheduling: its PlacementFeasible decides a group's failure, and its
/// hints (a member or the group appearing) may let the group in again.
const GANG_SCHEDULING: &str = "GangScheduling";

/// Schedules the pod group of the popped member `first` (queue time
/// `first_ts`) in one cycle.
#[allow(clippy::too_many_arguments)]
pub(crate) fn pod_group_cycle(
    shared: &Arc<Shared>,
    writer: &Writer,
    scheduler: &mut Scheduler,
    fw: &Framework,
    first: Attempt,
    snapshot: Arc<Snapshot>,
    mut nominator: Nominator,
    first_ts: u64,
) {
    let pod = first.entry.model.clone();
    let (attempts, group, mut groups) = {
        let mut st = shared.lock();
        let others = st.queue.take_group_members(&pod);
        let mut attempts: Vec<(u64, Attempt)> = Vec::with_capacity(others.len() + 1);
        for qp in others {
            let entry = st
                .pods
                .get(&qp.pod.uid)
                .filter(|e| State::is_ours_pending(&shared.profiles, &e.model))
                .cloned();
            match entry {
                Some(entry) => attempts.push((
                    qp.timestamp,
                    Attempt {
                        entry,
                        mark: first.mark.clone(),
                        profile: first.profile.clone(),
                        started: Instant::now(),
                        attempts: qp.attempts,
                    },
                )),
                None => st.queue.done(&qp.pod.uid),
            }
        }
        attempts.push((first_ts, first));
        attempts.sort_by_key(|(ts, a)| (*ts, a.entry.model.seq));
        let group = st
            .pod_group_states()
            .and_then(|g| g.of(&pod))
            .and_then(|s| s.group.clone());
        // The pass reads and writes this group's members only.
        let groups = match (st.pod_group_states(), &pod.pod_group) {
            (Some(g), Some(name)) => g.only(&pod.namespace, name),
            _ => Default::default(),
        };
        (attempts, group, groups)
    };
    let attempts: Vec<Attempt> = attempts.into_iter().map(|(_, a)| a).collect();
    let Some(group) = group else {
        // The group went (deleted, or an object rkube cannot read) since
        // PreEnqueue let the members in: they wait gated for it again, as
        // upstream's queue keeps members of an unknown group aside.
        let mut st = shared.lock();
        let now = Instant::now();
        for a in &attempts {
            let pod = a.entry.model.clone();
            st.queue.done(&pod.uid);
            st.queue.upsert(None, pod, true, now);
        }
        return;
    };
    let members: Vec<Arc<Pod>> = attempts.iter().map(|a| a.entry.model.clone()).collect();
    let first_profile = attempts[0].profile.clone();
    let refs: Vec<&Pod> = members.iter().map(|p| &**p).collect();
    if let Err(msg) = pod_group_cycle::validate(&group, &refs) {
        tracing::warn!(pod_group = %group.key(), error = %msg, "pod group fails validation");
        for a in &attempts {
            handle_failure(
                shared,
                writer,
                a,
                Failure::error(&Status::error(msg.clone())),
            );
        }
        set_condition(shared, writer, &group, "False", "SchedulerError", &msg);
        return;
    }
    let mut snap = (*snapshot).clone();
    drop(snapshot);
    let (pass, verdict, preemption) = tokio::task::block_in_place(|| {
        let mut cycle = GroupCycle {
            scheduler,
            fw,
            nominator: &mut nominator,
            groups: &mut groups,
            latencies: None,
        };
        let pass = cycle.pass(&mut snap, &group, &refs, &mut |_, _, _| {});
        let (verdict, preemption) = match &pass.verdict {
            Verdict::Unschedulable(msg) => {
                let pf = cycle.post_filter(&mut snap, &group, &refs);
                if let Some(why) = &pf.not_modelled {
                    tracing::warn!(pod_group = %group.key(), "{why}");
                }
                (pf.verdict(msg), pf.status.is_success().then_some(pf))
            }
            v => (v.clone(), None),
        };
        (pass, verdict, preemption)
    });
    if let Some(pf) = &preemption {
        start_preemption(shared, writer, &group, &refs, &pf.victims, &first_profile);
    }
    // The plugins whose events may help any member: the group waits as one.
    let mut rejectors: BTreeSet<&'static str> = pass
        .tried
        .iter()
        .filter_map(|t| match t {
            Tried::Failed { rejectors, .. } => Some(rejectors.iter().copied()),
            Tried::Fits(..) => None,
        })
        .flatten()
        .collect();
    rejectors.insert(GANG_SCHEDULING);
    let (mut placed, mut failed) = (0usize, 0usize);
    let mut leftovers: Vec<String> = Vec::new();
    for (i, attempt) in attempts.into_iter().enumerate() {
        let failure = match pod_group_cycle::member_message(&pass, &verdict, i) {
            Some(msg) => {
                let error = matches!(verdict, Verdict::Error(_))
                    || matches!(pass.tried.get(i), Some(Tried::Failed { error: true, .. }));
                if error {
                    Failure::error(&Status::error(msg))
                } else {
                    let nominated = member_nomination(&pass, preemption.as_ref(), i);
                    unschedulable(msg, rejectors.clone(), nominated)
                }
            }
            None => {
                let Some(Tried::Fits(node, state)) = pass.tried.get(i) else {
                    unreachable!("a member without a message fit");
                };
                let node = snap.nodes[*node].name().to_string();
                let model = attempt.entry.model.clone();
                match assume_reserve_permit(shared, fw, &model, &node, state.clone(), Some(&group))
                {
                    Ok((state, assumed)) => {
                        placed += 1;
                        spawn_binding_cycle(shared, writer, attempt, assumed, node, state);
                        continue;
                    }
                    Err(f) => *f,
                }
            }
        };
        failed += 1;
        if verdict == Verdict::Success {
            leftovers.push(attempt.entry.model.uid.clone());
        }
        handle_failure(shared, writer, &attempt, failure);
    }
    if placed > 0 && !leftovers.is_empty() {
        // The group succeeded with members left: they are tried again at
        // once, beside the members just placed.
        let mut st = shared.lock();
        for uid in &leftovers {
            st.queue.requeue_group_leftover(uid);
        }
        drop(st);
        shared.wake.notify_one();
    }
    match &verdict {
        Verdict::Success => {
            tracing::debug!(pod_group = %group.key(), placed, failed, "scheduled a pod group");
            set_condition(shared, writer, &group, "True", "Scheduled", "");
        }
        Verdict::Unschedulable(msg) => {
            tracing::debug!(pod_group = %group.key(), message = %msg, "unable to schedule a pod group");
            let msg = if msg.starts_with(GROUP_UNSCHEDULABLE) {
                msg.clone()
            } else {
                format!("{GROUP_UNSCHEDULABLE}, {msg}")
            };
            set_condition(shared, writer, &group, "False", "Unschedulable", &msg);
        }
        Verdict::Error(msg) => {
            tracing::warn!(pod_group = %group.key(), error = %msg, "error scheduling a pod group");
            set_condition(shared, writer, &group, "False", "SchedulerError", msg);
        }
    }
}

/// A member's rejection, waiting for the events of `rejectors`, with its
/// nomination (`None` keeps it, `Some("")` clears it).
fn unschedulable(
    message: String,
    rejectors: BTreeSet<&'static str>,
    nominated_node: Option<String>,
) -> Failure {
    Failure {
        reason: "Unschedulable",
        message,
        nominated_node,
        victims: Vec::new(),
        unschedulable: true,
        rejectors,
        report: true,
        deallocated_claims: Vec::new(),
        deleted_claims: Vec::new(),
    }
}

/// Workload-aware preemption found victims: the members are held back
/// (DefaultPreemption's PreEnqueue) before they return to the queue, and
/// the victims are deleted in the background in the PodGroup's name.
fn start_preemption(
    shared: &Arc<Shared>,
    writer: &Writer,
    group: &rkube_model::pod_groups::PodGroup,
    members: &[&Pod],
    victims: &[Arc<Pod>],
    profile: &str,
) {
    let (object, victims) = {
        let mut st = shared.lock();
        // Victims already being deleted need no call (upstream skips them).
        let victims: Vec<Arc<core::Pod>> = victims
            .iter()
            .filter_map(|v| st.pods.get(&v.uid).map(|e| e.raw.clone()))
            .filter(|v| v.metadata.deletion_timestamp.is_none())
            .collect();
        let object = st
            .pod_group_object(&group.namespace, &group.name)
            .filter(|_| !victims.is_empty());
        if object.is_some() {
            for m in members {
                st.preemption_started(&m.uid);
            }
        }
        (object, victims)
    };
    let Some(object) = object else {
        return;
    };
    tracing::debug!(pod_group = %group.key(), victims = victims.len(), "preempting for a pod group");
    tokio::spawn(crate::schedule_one::preempt(
        shared.clone(),
        writer.clone(),
        Preemption {
            preemptor: Preemptor::pod_group(&object),
            waiters: members.iter().map(|m| m.uid.clone()).collect(),
            profile: profile.to_string(),
            node: "cluster".into(),
            victims,
            cleared: Vec::new(),
        },
    ));
}

/// Writes the group's `PodGroupInitiallyScheduled` condition in the
/// background.
fn set_condition(
    shared: &Shared,
    writer: &Writer,
    group: &rkube_model::pod_groups::PodGroup,
    status: &'static str,
    reason: &'static str,
    message: &str,
) {
    let object = {
        let mut st = shared.lock();
        if !st.pod_group_condition_allowed(&group.namespace, &group.name, status) {
            return;
        }
        st.pod_group_object(&group.namespace, &group.name)
    };
    let Some(object) = object else {
        return;
    };
    let (writer, message) = (writer.clone(), message.to_string());
    tokio::spawn(async move {
        if let Err(e) = writer
            .pod_group_condition(&object, status, reason, &message)
            .await
        {
            tracing::warn!(pod_group = %object.metadata.name.as_deref().unwrap_or_default(), error = %e, "updating the pod group's condition failed");
        }
    });
}
