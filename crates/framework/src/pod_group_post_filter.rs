//! The PodGroupPostFilter extension point (GenericWorkload): after a pod
//! group's pass failed, its plugins (DefaultPreemption's workload-aware
//! preemption) may change a working copy of the snapshot, rerun the
//! group's pass on it and pick victims. As upstream's snapshot mutations,
//! every node they touch is restored when the point returns.
//!
//! The drivers then apply the outcome to the group's verdict
//! ([`PodGroupPostFilterResult::verdict`]): its message is appended to the group's
//! reasons, and on success the members are nominated and the victims
//! evicted by the driver (plugins do no I/O).

use std::collections::HashMap;
use std::sync::Arc;

use rkube_model::pod_groups::PodGroup;
use rkube_model::Pod;

use crate::binding;
use crate::extension_points::{
    run_filters_with_nominated_pods, run_pre_filter_extension_add_pod,
    run_pre_filter_extension_remove_pod,
};
use crate::in_memory::SnapshotHost;
use crate::node_info::NodeInfo;
use crate::pod_group_cycle::{GroupCycle, Pass, Tried, Verdict};
use crate::{
    Code, PodGroupPostFilterHandle, PodGroupPostFilterResult, Point, ProposedAssignment, Snapshot,
    Status,
};

impl PodGroupPostFilterResult {
    /// The group's failed verdict with this outcome applied, as upstream's
    /// `applyPodGroupPostFilterResult`: an error replaces it, anything
    /// else is appended to its reasons (an empty status too, which leaves a
    /// trailing ", ").
    pub fn verdict(&self, group_message: &str) -> Verdict {
        if self.status.code == Code::Error {
            return Verdict::Error(self.status.message());
        }
        Verdict::Unschedulable(format!("{group_message}, {}", self.status.message()))
    }
}

/// Member `i`'s nomination after a failed group cycle, as upstream's
/// failure handler sets it: workload-aware preemption nominates the members
/// it placed (`Some(node)`); a failed group without it clears the
/// nominations of the members that fit (`Some("")`); the others keep
/// theirs (`None`).
pub fn member_nomination(
    pass: &Pass,
    preemption: Option<&PodGroupPostFilterResult>,
    i: usize,
) -> Option<String> {
    match preemption {
        Some(pf) => pf
            .nominations
            .iter()
            .find(|(m, _)| *m == i)
            .map(|(_, n)| n.clone()),
        None => matches!(pass.tried.get(i), Some(Tried::Fits(..))).then(String::new),
    }
}

impl GroupCycle<'_> {
    /// Runs the PodGroupPostFilter plugins of the profile for the failed
    /// pass over `members` of `group` (upstream's
    /// `RunPodGroupPostFilterPlugins`): the first success or
    /// UnschedulableAndUnresolvable decides; Unschedulable reasons are
    /// gathered; any other code is an error. `snapshot` is as it was when
    /// this returns.
    pub fn post_filter(
        &mut self,
        snapshot: &mut Snapshot,
        group: &PodGroup,
        members: &[&Pod],
    ) -> PodGroupPostFilterResult {
        let plugins = self.fw.plugins(Point::PodGroupPostFilter);
        let mut reasons: Vec<String> = Vec::new();
        let latencies = self.latencies.take();
        let mut out = None;
        let mut not_modelled = None;
        for p in plugins {
            let plugin = p
                .as_pod_group_post_filter()
                .expect("the framework checked the point");
            let mut handle = Handle {
                cycle: self,
                snapshot,
                group,
                members,
                saved: HashMap::new(),
            };
            let mut r = plugin.pod_group_post_filter(group, members, &mut handle);
            handle.restore();
            if not_modelled.is_none() {
                not_modelled = r.not_modelled.take();
            }
            match r.status.code {
                Code::Success | Code::UnschedulableAndUnresolvable => {
                    out = Some(r);
                    break;
                }
                Code::Unschedulable => {
                    reasons.extend(r.status.reasons.iter().map(|r| r.to_string()));
                }
                _ => {
                    out = Some(PodGroupPostFilterResult {
                        status: Status::error(format!(
                            "error in {:?} PodGroupPostFilter plugins: {}",
                            p.name(),
                            r.status.message()
                        )),
                        nominations: Vec::new(),
                        victims: Vec::new(),
                        not_modelled: None,
                    });
                    break;
                }
            }
        }
        self.latencies = latencies;
        let mut out = out.unwrap_or_else(|| PodGroupPostFilterResult {
            status: Status::with_reasons(Code::Unschedulable, reasons),
            nominations: Vec::new(),
            victims: Vec::new(),
            not_modelled: None,
        });
        out.not_modelled = not_modelled;
        out
    }
}

/// The handle a PodGroupPostFilter plugin works through.
struct Handle<'h, 'a> {
    cycle: &'h mut GroupCycle<'a>,
    snapshot: &'h mut Snapshot,
    group: &'h PodGroup,
    members: &'h [&'h Pod],
    /// Each touched node as it was before.
    saved: HashMap<usize, NodeInfo>,
}

impl Handle<'_, '_> {
    fn touch(&mut self, node: usize) {
        self.saved
            .entry(node)
            .or_insert_with(|| self.snapshot.nodes[node].clone());
    }

    fn restore(self) {
        for (node, info) in self.saved {
            self.snapshot.restore_node(node, info);
        }
    }
}

impl PodGroupPostFilterHandle for Handle<'_, '_> {
    fn snapshot(&self) -> &Snapshot {
        self.snapshot
    }

    fn remove_pod(&mut self, pod: &Pod) {
        if let Some(i) = self.snapshot.index_of(&pod.node_name) {
            self.touch(i);
            self.snapshot.remove(i, &pod.uid);
        }
    }

    fn add_pod(&mut self, pod: Arc<Pod>) {
        if let Some(i) = self.snapshot.index_of(&pod.node_name) {
            self.touch(i);
            self.snapshot.assume(i, pod);
        }
    }

    fn schedule_group(&mut self) -> (Vec<ProposedAssignment>, Status) {
        let pass = self
            .cycle
            .pass(self.snapshot, self.group, self.members, &mut |_, _, _| {});
        let assignments = pass
            .tried
            .into_iter()
            .enumerate()
            .filter_map(|(member, t)| match t {
                Tried::Fits(node, state) => Some(ProposedAssignment {
                    member,
                    node,
                    state,
                }),
                Tried::Failed { .. } => None,
            })
            .collect();
        let status = match pass.verdict {
            Verdict::Success => Status::success(),
            Verdict::Unschedulable(m) => Status::new(Code::Unschedulable, m),
            Verdict::Error(m) => Status::error(m),
        };
        (assignments, status)
    }

    fn member(&self, member: usize) -> &Pod {
        self.members[member]
    }

    fn run_pre_filter_extension_add_pod(
        &self,
        a: &mut ProposedAssignment,
        added: &Pod,
        node: usize,
    ) -> Status {
        run_pre_filter_extension_add_pod(
            self.cycle.fw,
            &mut a.state,
            self.members[a.member],
            added,
            &self.snapshot.nodes[node],
        )
    }

    fn run_pre_filter_extension_remove_pod(
        &self,
        a: &mut ProposedAssignment,
        removed: &Pod,
        node: usize,
    ) -> Status {
        run_pre_filter_extension_remove_pod(
            self.cycle.fw,
            &mut a.state,
            self.members[a.member],
            removed,
            &self.snapshot.nodes[node],
        )
    }

    fn run_filter_plugins_with_nominated_pods(&self, a: &ProposedAssignment) -> Status {
        let node = &self.snapshot.nodes[a.node];
        run_filters_with_nominated_pods(
            self.cycle.fw,
            &a.state,
            self.members[a.member],
            node,
            self.cycle.nominator.pods_for_node(node.name()),
        )
    }

    fn assume_and_reserve(&mut self, a: &mut ProposedAssignment) -> Arc<Pod> {
        self.touch(a.node);
        let name = self.snapshot.nodes[a.node].name().to_string();
        let placed = binding::assumed_pod(self.members[a.member], &name);
        self.snapshot.assume(a.node, placed.clone());
        let mut host = SnapshotHost::new(self.snapshot);
        // Upstream ignores Reserve's status here.
        let _ = binding::reserve(self.cycle.fw, &mut a.state, &placed, &name, &mut host);
        placed
    }

    fn unreserve_and_remove(&mut self, a: &mut ProposedAssignment, placed: &Arc<Pod>) {
        let name = self.snapshot.nodes[a.node].name().to_string();
        let mut host = SnapshotHost::new(self.snapshot);
        binding::unreserve(self.cycle.fw, &mut a.state, placed, &name, &mut host);
        self.snapshot.remove(a.node, &placed.uid);
    }
}
