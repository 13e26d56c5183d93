//! DefaultPreemption's PodGroupPostFilter: workload-aware preemption of
//! upstream v1.37's `podgrouppreemption.go` (GenericWorkload), for a
//! PodGroup without a composite parent and PodGroupPreemptionPolicy off.
//!
//! The domain is the whole cluster:
//! 1. A group with a member whose policy is `Never` does not preempt.
//! 2. When a member's nominated node still has a lower-priority pod
//!    terminating by preemption, the earlier preemption is still under way:
//!    the members keep their nominations.
//! 3. Every unit of lower priority than the group (a pod, or all of a
//!    `disruptionMode: all` group's scheduled pods) is taken off the
//!    snapshot and the group's pass runs once more. If the group still does
//!    not fit, its status is the answer.
//! 4. Units are then reprieved one at a time, most important first (those
//!    whose eviction violates a PodDisruptionBudget first): a unit comes
//!    back, and it stays when every member the pass placed still passes its
//!    filters on its node with the members before it assumed there.
//! 5. The members the pass placed are nominated to their nodes; the units
//!    not reprieved are the victims.

use std::sync::Arc;

use rkube_framework::{
    Code, PodGroupPostFilterHandle, PodGroupPostFilterPlugin, PodGroupPostFilterResult,
    ProposedAssignment, Status,
};
use rkube_model::pod_groups::PodGroup;
use rkube_model::Pod;

use super::victims::{
    filter_victims_with_pdb_violation, more_important, pod_priority, victims_on_nodes, Victim,
};
use super::DefaultPreemption;

const NO_VICTIMS: &str = "No preemption victims found for incoming preemptor";

impl PodGroupPostFilterPlugin for DefaultPreemption {
    fn pod_group_post_filter(
        &self,
        group: &PodGroup,
        members: &[&Pod],
        handle: &mut dyn PodGroupPostFilterHandle,
    ) -> PodGroupPostFilterResult {
        let mut r = preempt(group, members, handle);
        let msg = r.status.message();
        if !msg.is_empty() {
            r.status = Status::new(r.status.code, format!("pod group preemption: {msg}"));
        }
        r
    }
}

/// Upstream's `PodGroupEvaluator.Preempt`.
fn preempt(
    group: &PodGroup,
    members: &[&Pod],
    handle: &mut dyn PodGroupPostFilterHandle,
) -> PodGroupPostFilterResult {
    // PodGroupPreemptionPolicy (alpha) off: a member's `Never` decides.
    if members.iter().any(|p| p.preemption_never) {
        return PodGroupPostFilterResult::status(Status::new(
            Code::Unschedulable,
            "not eligible due to preemptionPolicy=Never.",
        ));
    }
    if ongoing_preemption(group, members, handle) {
        return PodGroupPostFilterResult {
            status: Status::new(Code::Success, "ongoing preemption on nominated nodes"),
            nominations: members
                .iter()
                .enumerate()
                .map(|(i, p)| (i, p.nominated_node_name.clone()))
                .collect(),
            victims: Vec::new(),
            not_modelled: None,
        };
    }
    match select_victims_on_domain(group, handle) {
        Ok((victims, assignments)) => {
            let nominations = assignments
                .iter()
                .map(|a| {
                    let node = handle.snapshot().nodes[a.node].name().to_string();
                    (a.member, node)
                })
                .collect();
            PodGroupPostFilterResult {
                status: Status::new(
                    Code::Success,
                    format!(
                        "found a placement for podgroup, preempting {} victims",
                        victims.len()
                    ),
                ),
                nominations,
                victims,
                not_modelled: None,
            }
        }
        Err(s) => PodGroupPostFilterResult::status(s),
    }
}

/// Upstream's `isOngoingPreemption`: a member's nominated node holds a pod
/// of lower priority than the group that is terminating by preemption.
fn ongoing_preemption(
    group: &PodGroup,
    members: &[&Pod],
    handle: &dyn PodGroupPostFilterHandle,
) -> bool {
    let snapshot = handle.snapshot();
    let groups = snapshot.pod_groups.as_deref();
    members
        .iter()
        .filter(|p| !p.nominated_node_name.is_empty())
        .filter_map(|p| snapshot.get(&p.nominated_node_name))
        .any(|n| {
            n.pods
                .iter()
                .any(|p| pod_priority(p, groups) < group.priority && p.terminating_by_preemption)
        })
}

/// Upstream's `selectVictimsOnDomain` over the whole cluster: the victims'
/// pods (most important unit first) and the members' assignments.
fn select_victims_on_domain(
    group: &PodGroup,
    handle: &mut dyn PodGroupPostFilterHandle,
) -> Result<(Vec<Arc<Pod>>, Vec<ProposedAssignment>), Status> {
    let snapshot = handle.snapshot();
    let mut potential: Vec<Victim> = victims_on_nodes(snapshot, snapshot.scan_order())
        .into_iter()
        .filter(|v| v.priority < group.priority)
        .collect();
    if potential.is_empty() {
        return Err(Status::new(Code::UnschedulableAndUnresolvable, NO_VICTIMS));
    }
    let pdbs = snapshot.workloads.pdbs.clone();
    for v in &potential {
        for p in &v.pods {
            handle.remove_pod(p);
        }
    }
    let (mut assignments, status) = handle.schedule_group();
    if !status.is_success() {
        return Err(status);
    }
    potential.sort_by(more_important);
    let (violating, non_violating) = filter_victims_with_pdb_violation(&potential, &pdbs);
    let mut to_preempt: Vec<usize> = Vec::new();
    for i in violating.iter().map(|(i, _)| *i).chain(non_violating) {
        if !reprieve(&potential[i], &mut assignments, handle)? {
            to_preempt.push(i);
        }
    }
    to_preempt.sort_by(|&a, &b| more_important(&potential[a], &potential[b]));
    let pods = to_preempt
        .into_iter()
        .flat_map(|i| potential[i].pods.iter().cloned())
        .collect();
    Ok((pods, assignments))
}

/// Upstream's `reprieveVictim`: puts the unit back (with the members'
/// PreFilter extensions told), then checks each placed member on its node
/// in order, assuming and reserving it for the next. `Ok(true)`: every
/// member still fits and the unit stays; otherwise it is taken off again.
/// The members assumed here are always undone.
fn reprieve(
    v: &Victim,
    assignments: &mut [ProposedAssignment],
    handle: &mut dyn PodGroupPostFilterHandle,
) -> Result<bool, Status> {
    for p in &v.pods {
        handle.add_pod(p.clone());
        let node = handle.snapshot().index_of(&p.node_name);
        if let Some(node) = node {
            for a in assignments.iter_mut() {
                let s = handle.run_pre_filter_extension_add_pod(a, p, node);
                if !s.is_success() {
                    return Err(as_error(s));
                }
            }
        }
    }
    let mut assumed: Vec<(usize, Arc<Pod>)> = Vec::new();
    let mut result = Ok(true);
    for i in 0..assignments.len() {
        if !handle
            .run_filter_plugins_with_nominated_pods(&assignments[i])
            .is_success()
        {
            result = take_back(v, assignments, handle).map(|_| false);
            break;
        }
        let placed = handle.assume_and_reserve(&mut assignments[i]);
        assumed.push((i, placed));
    }
    for (i, placed) in assumed.into_iter().rev() {
        handle.unreserve_and_remove(&mut assignments[i], &placed);
    }
    result
}

/// Takes a unit off the snapshot again, telling the members' PreFilter
/// extensions.
fn take_back(
    v: &Victim,
    assignments: &mut [ProposedAssignment],
    handle: &mut dyn PodGroupPostFilterHandle,
) -> Result<(), Status> {
    for p in &v.pods {
        let node = handle.snapshot().index_of(&p.node_name);
        handle.remove_pod(p);
        if let Some(node) = node {
            for a in assignments.iter_mut() {
                let s = handle.run_pre_filter_extension_remove_pod(a, p, node);
                if !s.is_success() {
                    return Err(as_error(s));
                }
            }
        }
    }
    Ok(())
}

/// A failed PreFilter extension ends preemption with an error.
fn as_error(s: Status) -> Status {
    Status::error(s.message())
}
