//! Extension-point traits. A plugin implements [`Plugin`] and returns itself
//! from the `as_*` accessor of each extension point it supports, the way an
//! upstream plugin implements one small interface per extension point.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use rkube_model::Pod;
use serde_json::Value;

use crate::cycle_state::CycleState;
use crate::events::ClusterEventWithHint;
pub use crate::host::{AssumeCache, Binder, ClaimApi, ClusterApi, HostClock, Listers, VolumeApi};
use crate::node_info::NodeInfo;
use crate::snapshot::Snapshot;
use crate::status::Status;

/// Largest score a plugin may return after normalization.
pub const MAX_NODE_SCORE: i64 = 100;

/// A scheduling plugin.
pub trait Plugin: Send + Sync {
    /// Upstream's name for the plugin (e.g. `NodeResourcesFit`).
    fn name(&self) -> &'static str;
    /// QueueSort, if implemented.
    fn as_queue_sort(&self) -> Option<&dyn QueueSortPlugin> {
        None
    }
    /// PreEnqueue, if implemented.
    fn as_pre_enqueue(&self) -> Option<&dyn PreEnqueuePlugin> {
        None
    }
    /// PreFilter, if implemented.
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        None
    }
    /// Filter, if implemented.
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        None
    }
    /// PostFilter, if implemented.
    fn as_post_filter(&self) -> Option<&dyn PostFilterPlugin> {
        None
    }
    /// PodGroupPostFilter (GenericWorkload), if implemented.
    fn as_pod_group_post_filter(&self) -> Option<&dyn PodGroupPostFilterPlugin> {
        None
    }
    /// PreScore, if implemented.
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        None
    }
    /// Score, if implemented.
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        None
    }
    /// Reserve, if implemented.
    fn as_reserve(&self) -> Option<&dyn ReservePlugin> {
        None
    }
    /// PlacementFeasible (pod-group cycles), if implemented.
    fn as_placement_feasible(&self) -> Option<&dyn PlacementFeasiblePlugin> {
        None
    }
    /// Permit, if implemented.
    fn as_permit(&self) -> Option<&dyn PermitPlugin> {
        None
    }
    /// PreBind, if implemented.
    fn as_pre_bind(&self) -> Option<&dyn PreBindPlugin> {
        None
    }
    /// Bind, if implemented.
    fn as_bind(&self) -> Option<&dyn BindPlugin> {
        None
    }
    /// PostBind, if implemented.
    fn as_post_bind(&self) -> Option<&dyn PostBindPlugin> {
        None
    }
    /// SignPod (OpportunisticBatching), if implemented. A profile with a
    /// PreFilter, Filter, PreScore or Score plugin without it batches no
    /// pod, as upstream's.
    fn as_sign(&self) -> Option<&dyn SignPlugin> {
        None
    }
    /// The cluster events that may make a pod this plugin rejected
    /// schedulable, each with an optional hint (upstream's
    /// `EnqueueExtensions.EventsToRegister`; see [`crate::events`]). Only
    /// plugins at PreEnqueue, PreFilter, Filter, Reserve and Permit are
    /// asked. `None` (the default) means the plugin does not say, and every
    /// event of every resource may help (upstream's default); `Some` of an
    /// empty list means no event does.
    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        None
    }
}

/// A pod waiting in the queue, with the time it was queued.
#[derive(Debug, Clone, Copy)]
pub struct QueuedPodRef<'a> {
    /// The pod.
    pub pod: &'a Pod,
    /// When it entered the queue (monotonic units; lower is earlier).
    pub timestamp: u64,
}

/// Orders the scheduling queue.
pub trait QueueSortPlugin: Plugin {
    /// True when `a` should be scheduled before `b`.
    fn less(&self, a: QueuedPodRef<'_>, b: QueuedPodRef<'_>) -> bool;
}

/// Gates a pod before it enters the active queue.
pub trait PreEnqueuePlugin: Plugin {
    /// Success lets the pod in; UnschedulableAndUnresolvable keeps it out.
    /// `ctx` holds what the host knows besides the pod (DRA objects, pod
    /// groups).
    fn pre_enqueue(&self, pod: &Pod, ctx: &crate::pod_group::EnqueueContext<'_>) -> Status;
}

/// Node names a PreFilter plugin restricts the pod to (`None`: all nodes).
pub type PreFilterResult = Option<BTreeSet<String>>;

/// Runs once per pod before filtering.
pub trait PreFilterPlugin: Plugin {
    /// Computes per-cycle data; may restrict nodes or reject the pod.
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status);

    /// Updates the cycle state as if `added` were on `node` (nominated pods,
    /// preemption). Default: nothing to update.
    fn add_pod(
        &self,
        _state: &mut CycleState,
        _pod: &Pod,
        _added: &Pod,
        _node: &NodeInfo,
    ) -> Status {
        Status::success()
    }

    /// Updates the cycle state as if `removed` were gone from `node`.
    fn remove_pod(
        &self,
        _state: &mut CycleState,
        _pod: &Pod,
        _removed: &Pod,
        _node: &NodeInfo,
    ) -> Status {
        Status::success()
    }
}

/// Decides whether a pod fits a node.
pub trait FilterPlugin: Plugin {
    /// Success, or a rejection with reasons.
    fn filter(&self, state: &CycleState, pod: &Pod, node: &NodeInfo) -> Status;
}

/// Outcome of PostFilter.
#[derive(Debug, Clone)]
pub struct PostFilterResult {
    /// What to do with the pod's nominated node: `None` leaves it as it is
    /// (upstream's nil result), `Some("")` clears it, `Some(node)` nominates.
    pub nominated_node: Option<String>,
    /// Pods to evict from the nominated node.
    pub victims: Vec<Arc<Pod>>,
    /// Status; its message becomes the FailedScheduling text's PostFilter part.
    pub status: Status,
    /// ResourceClaims (namespace, name) whose allocation the host must
    /// clear (DynamicResources' deallocation of idle claims).
    pub deallocate_claims: Vec<(String, String)>,
    /// ResourceClaims (namespace, name) the host must delete
    /// (DynamicResources' stale claim for a pod's extended resources).
    pub delete_claims: Vec<(String, String)>,
}

impl PostFilterResult {
    /// A result that leaves the nomination unchanged.
    pub fn keep(status: Status) -> Self {
        PostFilterResult {
            nominated_node: None,
            victims: Vec::new(),
            status,
            deallocate_claims: Vec::new(),
            delete_claims: Vec::new(),
        }
    }
}

/// What a PostFilter plugin may ask of the framework (upstream's
/// `fwk.Handle` as preemption uses it).
pub trait PostFilterHandle: Sync {
    /// The cycle's snapshot.
    fn snapshot(&self) -> &Snapshot;
    /// Pods nominated to a node, in nomination order.
    fn nominated_pods_for_node(&self, node: &str) -> Vec<Arc<Pod>>;
    /// Runs every PreFilter plugin's `add_pod` (upstream's
    /// `RunPreFilterExtensionAddPod`): `added` is now on `node`.
    fn run_pre_filter_extension_add_pod(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        added: &Pod,
        node: &NodeInfo,
    ) -> Status;
    /// Runs every PreFilter plugin's `remove_pod`: `removed` left `node`.
    fn run_pre_filter_extension_remove_pod(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        removed: &Pod,
        node: &NodeInfo,
    ) -> Status;
    /// Runs the Filter plugins with the node's nominated pods of equal or
    /// higher priority added, then without them (upstream's
    /// `RunFilterPluginsWithNominatedPods`).
    fn run_filter_plugins_with_nominated_pods(
        &self,
        state: &CycleState,
        pod: &Pod,
        node: &NodeInfo,
    ) -> Status;
    /// A deterministic pseudo-random integer in `0..n` (`n > 0`), seeded
    /// by the scheduler's seed and cycle (upstream: `rand.Int31n`).
    fn random_below(&self, n: usize) -> usize;
}

/// A member's placement in a pod-group pass run for PodGroupPostFilter
/// (upstream's `ProposedAssignment`).
#[derive(Debug, Clone)]
pub struct ProposedAssignment {
    /// The member's index in the cycle's member list.
    pub member: usize,
    /// Its node (snapshot index).
    pub node: usize,
    /// Its cycle state: PreFilter ran with the members before it assumed.
    pub state: CycleState,
}

/// What a PodGroupPostFilter plugin may do: change the snapshot, run the
/// group's pass on it, and run framework steps for a member. The framework
/// restores the snapshot afterwards.
pub trait PodGroupPostFilterHandle {
    /// The snapshot as changed so far.
    fn snapshot(&self) -> &Snapshot;
    /// Takes a running pod off its node (`spec.nodeName`).
    fn remove_pod(&mut self, pod: &Pod);
    /// Puts a running pod back on its node.
    fn add_pod(&mut self, pod: Arc<Pod>);
    /// Upstream's `PodGroupSchedulingFunc`: the group's pass on the
    /// snapshot as it is, with new cycle states, reverted before it
    /// returns. The members it placed, in order, and the pass's status
    /// (success, or the group's verdict).
    fn schedule_group(&mut self) -> (Vec<ProposedAssignment>, Status);
    /// The member `member` of the cycle.
    fn member(&self, member: usize) -> &Pod;
    /// PreFilter extensions' `add_pod` for `a`'s member: `added` is now on
    /// snapshot node `node`.
    fn run_pre_filter_extension_add_pod(
        &self,
        a: &mut ProposedAssignment,
        added: &Pod,
        node: usize,
    ) -> Status;
    /// PreFilter extensions' `remove_pod` for `a`'s member.
    fn run_pre_filter_extension_remove_pod(
        &self,
        a: &mut ProposedAssignment,
        removed: &Pod,
        node: usize,
    ) -> Status;
    /// Filters `a`'s member on its node with nominated pods.
    fn run_filter_plugins_with_nominated_pods(&self, a: &ProposedAssignment) -> Status;
    /// Puts `a`'s member on its node and runs Reserve; undone by
    /// [`PodGroupPostFilterHandle::unreserve_and_remove`].
    fn assume_and_reserve(&mut self, a: &mut ProposedAssignment) -> Arc<Pod>;
    /// Unreserve, and the member off its node again.
    fn unreserve_and_remove(&mut self, a: &mut ProposedAssignment, placed: &Arc<Pod>);
}

/// Outcome of PodGroupPostFilter.
#[derive(Debug, Clone)]
pub struct PodGroupPostFilterResult {
    /// Success (victims found), or why not.
    pub status: Status,
    /// Members to nominate: (member index, node name).
    pub nominations: Vec<(usize, String)>,
    /// Pods to evict, most important unit first.
    pub victims: Vec<Arc<Pod>>,
    /// What upstream would do here that rkube does not model, and why:
    /// the simulator refuses the cluster, the live scheduler logs it.
    pub not_modelled: Option<String>,
}

impl PodGroupPostFilterResult {
    /// A result with only a status.
    pub fn status(status: Status) -> Self {
        PodGroupPostFilterResult {
            status,
            nominations: Vec::new(),
            victims: Vec::new(),
            not_modelled: None,
        }
    }
}

/// Runs when a pod group's cycle failed (GenericWorkload): workload-aware
/// preemption.
pub trait PodGroupPostFilterPlugin: Plugin {
    /// Tries to make `group` (with the cycle's unscheduled `members`, in
    /// order) schedulable in a later cycle.
    fn pod_group_post_filter(
        &self,
        group: &rkube_model::pod_groups::PodGroup,
        members: &[&Pod],
        handle: &mut dyn PodGroupPostFilterHandle,
    ) -> PodGroupPostFilterResult;
}

/// Runs when no node fits (preemption).
pub trait PostFilterPlugin: Plugin {
    /// Tries to make the pod schedulable in a later cycle. `statuses` is
    /// the diagnosis of the failed filter pass; `handle` runs framework
    /// steps on modified state and node copies.
    fn post_filter(
        &self,
        state: &CycleState,
        pod: &Pod,
        statuses: &crate::diagnosis::NodeToStatus,
        handle: &dyn PostFilterHandle,
    ) -> PostFilterResult;
}

/// Runs once per pod before scoring, over the feasible nodes.
pub trait PreScorePlugin: Plugin {
    /// Computes per-cycle scoring data; Skip disables this plugin's Score.
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        nodes: &[&NodeInfo],
        snapshot: &Snapshot,
    ) -> Status;
}

/// Ranks feasible nodes.
pub trait ScorePlugin: Plugin {
    /// Raw score of a node.
    fn score(&self, state: &CycleState, pod: &Pod, node: &NodeInfo) -> Result<i64, Status>;

    /// Everything besides the node info that this cycle's [`score`] reads,
    /// as integers, when the score of a node is a function of that and of
    /// the node info's content alone (no other node, no cluster-wide
    /// state). The framework then keeps each node's score under the node
    /// info's generation and reuses it while the key is the same. `None`
    /// (the default): every node is scored every cycle.
    ///
    /// [`score`]: ScorePlugin::score
    fn score_key(&self, _state: &CycleState, _pod: &Pod) -> Option<Vec<i64>> {
        None
    }

    /// [`score`] of the node at `position` in the nodes this cycle's
    /// PreScore was given: the framework scores through this, so a plugin
    /// may keep per-node results of PreScore by position (checked against
    /// the node info's generation). The default scores the node.
    ///
    /// [`score`]: ScorePlugin::score
    fn score_at(
        &self,
        state: &CycleState,
        pod: &Pod,
        node: &NodeInfo,
        _position: usize,
    ) -> Result<i64, Status> {
        self.score(state, pod, node)
    }

    /// True when the plugin normalizes its scores (has ScoreExtensions).
    fn has_normalize(&self) -> bool {
        false
    }

    /// Normalizes raw scores in place into `0..=100`.
    fn normalize(&self, _state: &CycleState, _pod: &Pod, _scores: &mut [NodeScore]) -> Status {
        Status::success()
    }
}

/// A node's score for one plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeScore {
    /// Node name (shared with the node, no copy per plugin).
    pub name: std::sync::Arc<str>,
    /// Score.
    pub score: i64,
}

/// Reserves resources for a pod on a node (the end of the scheduling
/// cycle; the pod is already assumed on the node).
pub trait ReservePlugin: Plugin {
    /// Reserve: update the host's cache for the pod on `node`.
    fn reserve(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        node: &str,
        cache: &mut dyn AssumeCache,
    ) -> Status;
    /// Undo a reservation (after any later failure; must be idempotent).
    fn unreserve(&self, state: &mut CycleState, pod: &Pod, node: &str, cache: &mut dyn AssumeCache);
}

/// Whether a pod group can still meet its constraints as a pod-group cycle
/// goes (upstream's `PlacementFeasiblePlugin`; GangScheduling is the only
/// one upstream runs).
pub trait PlacementFeasiblePlugin: Plugin {
    /// Success, Wait (not yet) or Unschedulable (never in this cycle).
    fn placement_feasible(
        &self,
        group: &rkube_model::pod_groups::PodGroup,
        progress: crate::pod_group::PlacementProgress,
    ) -> Status;
}

/// Approves, denies or delays binding.
pub trait PermitPlugin: Plugin {
    /// Success, a rejection, or Wait with how long to wait at most.
    fn permit(&self, state: &mut CycleState, pod: &Pod, node: &str) -> (Status, Duration);
}

/// Work before binding (the binding cycle; may block on the API).
pub trait PreBindPlugin: Plugin {
    /// Whether PreBind has work for the pod: Success, Skip (PreBind is not
    /// run) or Error. Default: Success.
    fn pre_bind_pre_flight(&self, _state: &mut CycleState, _pod: &Pod, _node: &str) -> Status {
        Status::success()
    }
    /// PreBind; Skip when there is nothing to do for the pod.
    fn pre_bind(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        node: &str,
        api: &mut dyn ClusterApi,
    ) -> Status;
}

/// Binds a pod to a node.
pub trait BindPlugin: Plugin {
    /// Bind through the host's API; Skip passes to the next bind plugin.
    fn bind(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        node: &str,
        api: &mut dyn ClusterApi,
    ) -> Status;
}

/// Informational, after a successful bind.
pub trait PostBindPlugin: Plugin {
    /// PostBind.
    fn post_bind(&self, state: &mut CycleState, pod: &Pod, node: &str);
}

/// A plugin's answer to upstream's `SignPod`.
pub enum Signed {
    /// The pod's fragments under this plugin (key, value); none is fine.
    Fragments(Vec<(&'static str, Value)>),
    /// The pod cannot be batched (upstream's Unschedulable status).
    Refused,
    /// Signing failed (upstream's Error status; the pod is unbatchable).
    Error(String),
}

/// Upstream's `SignPlugin`: what a pod looks like to a plugin, so that two
/// pods with equal fragments fit and score alike on every node.
pub trait SignPlugin: Send + Sync {
    /// The pod's fragments; `snapshot` is the cluster the plugin knows
    /// (NodeResourcesFit asks whether a DeviceClass serves a request).
    fn sign(&self, pod: &Pod, snapshot: &Snapshot) -> Signed;
    /// True when this plugin, as configured, refuses every pod (e.g.
    /// PodTopologySpread with default constraints): the profile then never
    /// signs, and is spared asking the others.
    fn refuses_every_pod(&self) -> bool {
        false
    }
}

/// A pod's signature: canonical JSON of its fragments, compared whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature(pub String);
