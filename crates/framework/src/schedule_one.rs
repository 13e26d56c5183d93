//! The scheduling algorithm, as upstream's `pkg/scheduler/schedule_one.go`
//! (`schedulePod`, `findNodesThatFitPod`, `findNodesThatPassFilters`,
//! `numFeasibleNodesToFind`, `selectHost`): PreFilter, Filter over a rotating
//! window of nodes sized by `percentageOfNodesToScore` (the window starts
//! where the previous cycle stopped, upstream's `nextStartNodeIndex`), a
//! nominated node tried first, PreScore, Score, NormalizeScore, weighted
//! sum, host selection as the top of upstream's max-heap of scores (no random
//! tie-break: upstream draws none without extenders), and the hand-off to
//! PostFilter (preemption) when no node fits.
//!
//! The extension points themselves run in [`crate::extension_points`].

use std::collections::HashMap;
use std::sync::Arc;

use rayon::prelude::*;
use rkube_model::Pod;

use crate::batch::{Batch, BatchClock, BatchCycle, CycleResult};
use crate::cycle_state::CycleState;
use crate::diagnosis::{fit_error_message, go_list, Diagnosis};
use crate::extension_points::splitmix;
pub use crate::extension_points::PARALLEL_THRESHOLD;
use crate::extension_points::{
    active_filters, filters_with_nominated_pods, pre_score_and_score, run_filter_list,
    run_pre_filter, ActiveFilter, FrameworkHandle, NodeScores,
};
use crate::framework::{Framework, Point};
use crate::metrics;
use crate::nominator::Nominator;
use crate::snapshot::Snapshot;
use crate::sorted_nodes;
use crate::status::{Code, Status};

const MIN_FEASIBLE_NODES_TO_FIND: usize = 100;
const MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND: i64 = 5;
/// The smallest run of nodes a filter pass takes at once.
const MIN_CHUNK: usize = 64;

/// Upstream's `numFeasibleNodesToFind`.
pub fn num_feasible_nodes_to_find(percentage: i32, num_all_nodes: usize) -> usize {
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND {
        return num_all_nodes;
    }
    let mut pct = percentage as i64;
    if pct == 0 {
        pct = 50 - num_all_nodes as i64 / 125;
        if pct < MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND {
            pct = MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND;
        }
    }
    let n = (num_all_nodes as i64 * pct / 100) as usize;
    n.max(MIN_FEASIBLE_NODES_TO_FIND)
}

/// Result of one scheduling attempt.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// The pod fits; `node` is the chosen node's index.
    Scheduled {
        /// Chosen node.
        node: usize,
        /// The cycle's state, for Reserve, Permit and the binding cycle.
        state: CycleState,
        /// Nodes evaluated by filters.
        evaluated: usize,
        /// Feasible nodes found.
        feasible: usize,
    },
    /// No node fits.
    Unschedulable {
        /// Why, per node.
        diagnosis: Diagnosis,
        /// Upstream's FailedScheduling message.
        message: String,
        /// The pod's nomination after this cycle: `None` leaves it as it
        /// was, `Some("")` clears it, `Some(node)` nominates `node`
        /// (preemption chose it; `victims` are to be evicted from it).
        nominated_node: Option<String>,
        /// Pods PostFilter (preemption) chose to evict.
        victims: Vec<Arc<Pod>>,
    },
    /// An internal error from a plugin.
    Error(Status),
}

/// Mutable scheduler state carried between cycles.
#[derive(Debug, Clone)]
pub struct Scheduler {
    /// Where the next filter pass starts (upstream's `nextStartNodeIndex`).
    pub next_start_node_index: usize,
    /// Global percentage of nodes to score.
    pub percentage_of_nodes_to_score: i32,
    /// Seed for preemption's random candidate offset and metrics sampling.
    pub seed: u64,
    /// Number of cycles run (upstream's scheduling cycle count).
    pub cycle: u64,
    /// OpportunisticBatching (upstream's feature gate, on by default).
    pub opportunistic_batching: bool,
    /// The clock batching reads (frozen unless the host sets wall time).
    pub batch_clock: BatchClock,
    /// Each profile's batch, by profile name.
    pub batches: HashMap<String, Batch>,
    /// Cycles run inside a pod-group cycle (upstream's
    /// `IsPodGroupSchedulingCycle`): PostFilter is not run for a pod that
    /// does not fit (the group's PodGroupPostFilter runs instead) and its
    /// nomination is left as it was.
    pub pod_group_cycle: bool,
}

impl Scheduler {
    /// A scheduler with a seed (preemption's random draws).
    pub fn new(seed: u64, percentage_of_nodes_to_score: i32) -> Self {
        Scheduler {
            next_start_node_index: 0,
            percentage_of_nodes_to_score,
            seed,
            cycle: 0,
            opportunistic_batching: true,
            batch_clock: BatchClock::Frozen,
            batches: HashMap::new(),
            pod_group_cycle: false,
        }
    }
}

/// The nodes a filter pass walks, as snapshot indices: the snapshot's scan
/// order, PreFilter's restriction, or one nominated or hinted node.
type NodeList<'a> = &'a [usize];

impl Scheduler {
    /// Picks the host as upstream does: the top of a max-heap by total
    /// built over the nodes in the order given (see [`crate::sorted_nodes`]).
    pub fn select_host(&self, scores: &[NodeScores]) -> Option<usize> {
        crate::sorted_nodes::top(scores.iter().map(|s| (s.node, s.total)))
    }

    /// Schedules one pod against the snapshot (does not modify it), with no
    /// nominated pods.
    pub fn schedule(&mut self, fw: &Framework, snapshot: &Snapshot, pod: &Pod) -> Outcome {
        self.schedule_with(fw, snapshot, pod, &Nominator::new())
    }

    /// Schedules one pod against the snapshot (does not modify it). Pods in
    /// `nominator` count on their nominated nodes for pods of lower or equal
    /// priority; a pod with `nominated_node_name` tries that node first.
    pub fn schedule_with(
        &mut self,
        fw: &Framework,
        snapshot: &Snapshot,
        pod: &Pod,
        nominator: &Nominator,
    ) -> Outcome {
        self.cycle += 1;
        let num_all = snapshot.len();
        let mut diagnosis = Diagnosis::default();
        if num_all == 0 {
            return Outcome::Unschedulable {
                message: "no nodes available to schedule pods".to_string(),
                diagnosis,
                nominated_node: Some(String::new()),
                victims: Vec::new(),
            };
        }
        let mut state = CycleState::new();
        // Upstream times every plugin call in a random 10% of cycles.
        state.record_plugin_metrics =
            fw.recorder.is_some() && splitmix(self.cycle ^ self.seed) % 100 < 10;
        let (restrict, with_nodes) = match run_pre_filter(fw, &mut state, pod, snapshot) {
            Ok(r) => r,
            Err(s) if s.is_rejected() => {
                diagnosis.pre_filter_msg = s.message();
                diagnosis.add_plugin_status(&s);
                diagnosis.node_to_status.absent = s;
                return self.post_filter(fw, &state, pod, snapshot, diagnosis, nominator);
            }
            Err(s) => return Outcome::Error(s),
        };
        // Plugins whose PreFilter result restricted the nodes count as
        // rejectors (upstream's `diagnosis.UnschedulablePlugins =
        // unscheduledPlugins`), so their events requeue the pod.
        diagnosis
            .unschedulable_plugins
            .extend(with_nodes.iter().copied());
        let pct = fw
            .percentage_of_nodes_to_score
            .unwrap_or(self.percentage_of_nodes_to_score);
        let has_scoring = !fw.plugins(Point::Score).is_empty();
        let batch = match self.opportunistic_batching {
            true => {
                let (cycle, clock) = (self.cycle, self.batch_clock);
                let b = self.batch(fw);
                Some(BatchCycle::begin(
                    b, fw, &state, pod, snapshot, cycle, clock,
                ))
            }
            false => None,
        };
        // A node nominated in an earlier cycle (preemption), or else the
        // batch's hint, is tried first.
        let first = if pod.nominated_node_name.is_empty() {
            batch.as_ref().and_then(BatchCycle::hint)
        } else {
            Some(pod.nominated_node_name.as_str())
        };
        if let Some(idx) = first.and_then(|n| snapshot.index_of(n)) {
            let to_find = if has_scoring {
                num_feasible_nodes_to_find(pct, 1)
            } else {
                1
            };
            // Errors are logged upstream and the full pass goes on.
            if let Ok((feasible, _)) = self.find_feasible(
                fw,
                &state,
                pod,
                snapshot,
                &[idx],
                to_find,
                &mut diagnosis,
                nominator,
            ) {
                if let Some(&node) = feasible.first() {
                    if let Some(b) = batch {
                        self.store(fw, b.single(snapshot.nodes[node].name_shared()));
                    }
                    return Outcome::Scheduled {
                        node,
                        state,
                        evaluated: 1 + diagnosis.node_to_status.nodes.len(),
                        feasible: 1,
                    };
                }
            }
        }
        let restricted: Vec<usize>;
        let nodes = match &restrict {
            None => snapshot.scan_order(),
            Some(names) => {
                diagnosis.node_to_status.absent = Status::new(
                    Code::UnschedulableAndUnresolvable,
                    format!("node(s) didn't satisfy plugin(s) {}", go_list(&with_nodes)),
                );
                restricted = names.iter().filter_map(|n| snapshot.index_of(n)).collect();
                &restricted
            }
        };
        let to_find = if has_scoring {
            num_feasible_nodes_to_find(pct, nodes.len())
        } else {
            1
        };
        let result = self.find_feasible(
            fw,
            &state,
            pod,
            snapshot,
            nodes,
            to_find,
            &mut diagnosis,
            nominator,
        );
        // Upstream advances the start index by the nodes processed, which
        // it counts as feasible nodes plus recorded statuses.
        let processed = match &result {
            Ok((feasible, _)) => feasible.len() + diagnosis.node_to_status.nodes.len(),
            Err(_) => diagnosis.node_to_status.nodes.len(),
        };
        self.next_start_node_index = (self.next_start_node_index + processed) % num_all;
        let feasible = match result {
            Ok((f, _)) => f,
            Err(s) => return Outcome::Error(s),
        };
        if feasible.is_empty() {
            return self.post_filter(fw, &state, pod, snapshot, diagnosis, nominator);
        }
        let evaluated = feasible.len() + diagnosis.node_to_status.nodes.len();
        if feasible.len() == 1 {
            if let Some(b) = batch {
                self.store(fw, b.single(snapshot.nodes[feasible[0]].name_shared()));
            }
            return Outcome::Scheduled {
                node: feasible[0],
                state,
                evaluated,
                feasible: 1,
            };
        }
        let node = if has_scoring {
            match pre_score_and_score(fw, &mut state, pod, snapshot, &feasible, false) {
                Ok(table) => match batch {
                    Some(b) => {
                        let (node, result) = b.scored(snapshot, &feasible, &table);
                        self.store(fw, result);
                        node
                    }
                    None => sorted_nodes::top(feasible.iter().copied().zip(table.totals))
                        .expect("non-empty"),
                },
                Err(s) => return Outcome::Error(s),
            }
        } else {
            sorted_nodes::top(feasible.iter().map(|&node| (node, 1))).expect("non-empty")
        };
        Outcome::Scheduled {
            node,
            state,
            evaluated,
            feasible: feasible.len(),
        }
    }

    /// This profile's batch.
    fn batch(&mut self, fw: &Framework) -> &mut Batch {
        if !self.batches.contains_key(&fw.profile_name) {
            self.batches
                .insert(fw.profile_name.clone(), Batch::default());
        }
        self.batches.get_mut(&fw.profile_name).expect("inserted")
    }

    /// Upstream's `StoreScheduleResults` for this cycle.
    fn store(&mut self, fw: &Framework, r: CycleResult) {
        let (cycle, clock) = (self.cycle, self.batch_clock);
        self.batch(fw).store(fw, r, cycle, clock);
    }

    #[allow(clippy::too_many_arguments)]
    fn find_feasible(
        &self,
        fw: &Framework,
        state: &CycleState,
        pod: &Pod,
        snapshot: &Snapshot,
        nodes: NodeList<'_>,
        to_find: usize,
        diagnosis: &mut Diagnosis,
        nominator: &Nominator,
    ) -> Result<(Vec<usize>, usize), Status> {
        let n = nodes.len();
        let mut feasible = Vec::with_capacity(to_find.min(n));
        let mut processed = 0;
        let chunk = if n >= MIN_CHUNK {
            to_find.max(MIN_CHUNK).min(n)
        } else {
            n.max(1)
        };
        let filters: Vec<ActiveFilter<'_>> = active_filters(fw, state).collect();
        let no_nominations = nominator.is_empty();
        let check = |i: usize| {
            let idx = nodes[(self.next_start_node_index + i) % n];
            let info = &snapshot.nodes[idx];
            let status = if no_nominations {
                run_filter_list(fw, filters.iter().copied(), state, pod, info)
            } else {
                let nominated = nominator.pods_for_node(info.name());
                filters_with_nominated_pods(fw, &filters, state, pod, info, nominated)
            };
            (idx, status)
        };
        // Upstream stops its filter workers when a node beyond the ones it
        // needs passes: nodes rejected before that one still count as
        // processed (their statuses are recorded, and the next cycle's
        // start index moves past them). This is upstream's pass with one
        // worker, the deterministic case of its parallel one; once enough
        // nodes are found the rest of the walk is sequential, as it
        // usually ends at the next node.
        let mut offset = 0;
        let mut done = false;
        let mut last_rejector: &'static str = "";
        while offset < n && !done {
            let end = if feasible.len() >= to_find {
                offset + 1
            } else {
                (offset + chunk).min(n)
            };
            let results: Vec<(usize, Status)> = if end - offset >= PARALLEL_THRESHOLD {
                (offset..end).into_par_iter().map(check).collect()
            } else {
                (offset..end).map(check).collect()
            };
            // One map growth per chunk, not a rehash every few rejections.
            let rejected = results.iter().filter(|(_, s)| !s.is_success()).count();
            diagnosis.node_to_status.nodes.reserve(rejected);
            for (idx, status) in results {
                if status.code == Code::Error {
                    return Err(status);
                }
                if status.is_success() {
                    if feasible.len() >= to_find {
                        done = true;
                        break;
                    }
                    feasible.push(idx);
                } else {
                    // Most rejections in a pass come from one plugin: its
                    // name is added to the set once.
                    if !std::ptr::eq(status.plugin, last_rejector) {
                        diagnosis.add_plugin_status(&status);
                        last_rejector = status.plugin;
                    }
                    diagnosis
                        .node_to_status
                        .nodes
                        .insert(snapshot.nodes[idx].name_shared(), status);
                }
                processed += 1;
            }
            offset = end;
        }
        Ok((feasible, processed))
    }

    /// Runs PostFilter (upstream's `RunPostFilterPlugins`) and builds the
    /// FailedScheduling outcome.
    fn post_filter(
        &self,
        fw: &Framework,
        state: &CycleState,
        pod: &Pod,
        snapshot: &Snapshot,
        diagnosis: Diagnosis,
        nominator: &Nominator,
    ) -> Outcome {
        if self.pod_group_cycle {
            let message = fit_error_message(snapshot.len(), &diagnosis);
            return Outcome::Unschedulable {
                diagnosis,
                message,
                nominated_node: None,
                victims: Vec::new(),
            };
        }
        let t0 = metrics::start(&fw.recorder);
        let out = self.post_filter_plugins(fw, state, pod, snapshot, diagnosis, nominator);
        if fw.recorder.is_some() {
            let status = match &out {
                Outcome::Unschedulable {
                    nominated_node: Some(n),
                    ..
                } if !n.is_empty() => Status::success(),
                Outcome::Error(s) => s.clone(),
                _ => Status::new(Code::Unschedulable, ""),
            };
            metrics::point_done(&fw.recorder, t0, &fw.profile_name, "PostFilter", &status);
        }
        out
    }

    fn post_filter_plugins(
        &self,
        fw: &Framework,
        state: &CycleState,
        pod: &Pod,
        snapshot: &Snapshot,
        mut diagnosis: Diagnosis,
        nominator: &Nominator,
    ) -> Outcome {
        let plugins = fw.plugins(Point::PostFilter);
        if plugins.is_empty() {
            let message = fit_error_message(snapshot.len(), &diagnosis);
            return Outcome::Unschedulable {
                diagnosis,
                message,
                nominated_node: Some(String::new()),
                victims: Vec::new(),
            };
        }
        let handle = FrameworkHandle {
            fw,
            snapshot,
            nominator,
            seed: splitmix(self.seed ^ splitmix(self.cycle ^ 0x5052_4545_4d50_5400)),
        };
        let mut kept: Option<crate::plugin::PostFilterResult> = None;
        let mut reasons: Vec<String> = Vec::new();
        let mut decided: Option<crate::plugin::PostFilterResult> = None;
        for p in plugins {
            let mut r = p.as_post_filter().expect("framework checked").post_filter(
                state,
                pod,
                &diagnosis.node_to_status,
                &handle,
            );
            // Upstream's plugin has written the deallocation when it
            // returns, whatever the later plugins decide.
            diagnosis
                .deallocated_claims
                .append(&mut r.deallocate_claims);
            diagnosis.deleted_claims.append(&mut r.delete_claims);
            match r.status.code {
                Code::Success | Code::UnschedulableAndUnresolvable => {
                    decided = Some(r);
                    break;
                }
                Code::Unschedulable => {
                    reasons.extend(r.status.reasons.iter().map(|r| r.to_string()));
                    if r.nominated_node.is_some() {
                        kept = Some(r);
                    }
                }
                _ => {
                    // Any other code is an error: no result, its message only.
                    decided = Some(crate::plugin::PostFilterResult::keep(r.status));
                    break;
                }
            }
        }
        let result = match decided {
            Some(r) => r,
            None => {
                let mut r = kept
                    .unwrap_or_else(|| crate::plugin::PostFilterResult::keep(Status::success()));
                r.status = Status::with_reasons(Code::Unschedulable, reasons);
                r
            }
        };
        diagnosis.post_filter_msg = result.status.message();
        let message = fit_error_message(snapshot.len(), &diagnosis);
        Outcome::Unschedulable {
            diagnosis,
            message,
            nominated_node: result.nominated_node,
            victims: result.victims,
        }
    }
}

#[cfg(test)]
mod tests {
    //! The algorithm driven by fake plugins: each fake is configured through
    //! its `pluginConfig` args, so a plain [`Framework::new`] builds it.

    use std::collections::BTreeSet;

    use rkube_config::{PluginConfig, PluginSet, Plugins, Profile};
    use rkube_model::Node;
    use serde_json::{json, Value};

    use super::*;
    use crate::diagnosis::NodeToStatus;
    use crate::extension_points::run_score;
    use crate::framework::Registry;
    use crate::node_info::NodeInfo;
    use crate::plugin::{
        BindPlugin, ClusterApi, FilterPlugin, NodeScore, Plugin, PostFilterHandle,
        PostFilterPlugin, PostFilterResult, PreFilterPlugin, PreFilterResult, QueueSortPlugin,
        QueuedPodRef, ScorePlugin, MAX_NODE_SCORE,
    };

    /// The QueueSort and Bind plugins every profile needs; never called here.
    struct Required;

    impl Plugin for Required {
        fn name(&self) -> &'static str {
            "FakeRequired"
        }
        fn as_queue_sort(&self) -> Option<&dyn QueueSortPlugin> {
            Some(self)
        }
        fn as_bind(&self) -> Option<&dyn BindPlugin> {
            Some(self)
        }
    }

    impl QueueSortPlugin for Required {
        fn less(&self, _: QueuedPodRef<'_>, _: QueuedPodRef<'_>) -> bool {
            false
        }
    }

    impl BindPlugin for Required {
        fn bind(&self, _: &mut CycleState, _: &Pod, _: &str, _: &mut dyn ClusterApi) -> Status {
            Status::success()
        }
    }

    fn strings(args: &Value, key: &str) -> Vec<String> {
        args[key]
            .as_array()
            .map(|a| a.iter().map(|v| v.as_str().unwrap().to_string()).collect())
            .unwrap_or_default()
    }

    /// A Filter plugin that rejects the nodes named in `args.reject` with
    /// `args.reason` (Unschedulable) and passes every other node.
    struct RejectFilter {
        name: &'static str,
        reject: BTreeSet<String>,
        reason: String,
    }

    impl RejectFilter {
        fn from_args(name: &'static str, args: &Value) -> Arc<dyn Plugin> {
            Arc::new(RejectFilter {
                name,
                reject: strings(args, "reject").into_iter().collect(),
                reason: args["reason"].as_str().unwrap_or("rejected").to_string(),
            })
        }
    }

    impl Plugin for RejectFilter {
        fn name(&self) -> &'static str {
            self.name
        }
        fn as_filter(&self) -> Option<&dyn FilterPlugin> {
            Some(self)
        }
    }

    impl FilterPlugin for RejectFilter {
        fn filter(&self, _: &CycleState, _: &Pod, node: &NodeInfo) -> Status {
            if self.reject.contains(node.name()) {
                Status::new(Code::Unschedulable, self.reason.clone())
            } else {
                Status::success()
            }
        }
    }

    /// A PreFilter plugin that restricts the pod to the nodes in `args.nodes`.
    struct RestrictPreFilter(BTreeSet<String>);

    impl Plugin for RestrictPreFilter {
        fn name(&self) -> &'static str {
            "FakeRestrict"
        }
        fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
            Some(self)
        }
    }

    impl PreFilterPlugin for RestrictPreFilter {
        fn pre_filter(
            &self,
            _: &mut CycleState,
            _: &Pod,
            _: &Snapshot,
        ) -> (PreFilterResult, Status) {
            (Some(self.0.clone()), Status::success())
        }
    }

    /// A Score plugin whose raw score of a node is the node's label named
    /// after the plugin; `args.normalize` is `"max"` (scaled so the highest
    /// is 100, upstream's `DefaultNormalizeScore`), `"reverse"` (100 minus
    /// that) or absent (no NormalizeScore).
    struct LabelScore {
        name: &'static str,
        normalize: Option<String>,
    }

    impl LabelScore {
        fn from_args(name: &'static str, args: &Value) -> Arc<dyn Plugin> {
            Arc::new(LabelScore {
                name,
                normalize: args["normalize"].as_str().map(str::to_string),
            })
        }
    }

    impl Plugin for LabelScore {
        fn name(&self) -> &'static str {
            self.name
        }
        fn as_score(&self) -> Option<&dyn ScorePlugin> {
            Some(self)
        }
    }

    impl ScorePlugin for LabelScore {
        fn score(&self, _: &CycleState, _: &Pod, node: &NodeInfo) -> Result<i64, Status> {
            Ok(node
                .node
                .labels
                .get(self.name)
                .map_or(0, |v| v.parse().unwrap()))
        }
        fn has_normalize(&self) -> bool {
            self.normalize.is_some()
        }
        fn normalize(&self, _: &CycleState, _: &Pod, scores: &mut [NodeScore]) -> Status {
            let max = scores.iter().map(|s| s.score).max().unwrap_or(0).max(1);
            let reverse = self.normalize.as_deref() == Some("reverse");
            for s in scores {
                s.score = s.score * MAX_NODE_SCORE / max;
                if reverse {
                    s.score = MAX_NODE_SCORE - s.score;
                }
            }
            Status::success()
        }
    }

    /// A PostFilter plugin: nominates `args.nominate` if set, else reports
    /// Unschedulable with how many node statuses it was handed.
    struct FakePostFilter(Option<String>);

    impl Plugin for FakePostFilter {
        fn name(&self) -> &'static str {
            "FakePostFilter"
        }
        fn as_post_filter(&self) -> Option<&dyn PostFilterPlugin> {
            Some(self)
        }
    }

    impl PostFilterPlugin for FakePostFilter {
        fn post_filter(
            &self,
            _: &CycleState,
            _: &Pod,
            statuses: &NodeToStatus,
            _: &dyn PostFilterHandle,
        ) -> PostFilterResult {
            match &self.0 {
                Some(node) => PostFilterResult {
                    nominated_node: Some(node.clone()),
                    victims: Vec::new(),
                    status: Status::success(),
                    deallocate_claims: Vec::new(),
                    delete_claims: Vec::new(),
                },
                None => PostFilterResult::keep(Status::new(
                    Code::Unschedulable,
                    format!("fake preemption saw {} node statuses", statuses.nodes.len()),
                )),
            }
        }
    }

    /// Scores computed so far by [`KeyedScore`], per counter (each test
    /// that counts has its own: tests run in parallel).
    static KEYED_SCORE_CALLS: [std::sync::atomic::AtomicUsize; 2] = [
        std::sync::atomic::AtomicUsize::new(0),
        std::sync::atomic::AtomicUsize::new(0),
    ];

    /// Label `ScoreA` modulo 50 plus the pod's priority, with the priority
    /// as its score key: the framework may keep its scores across cycles.
    /// Counts its calls in `KEYED_SCORE_CALLS[args.counter]`.
    struct KeyedScore(usize);

    impl Plugin for KeyedScore {
        fn name(&self) -> &'static str {
            "KeyedScore"
        }
        fn as_score(&self) -> Option<&dyn ScorePlugin> {
            Some(self)
        }
    }

    impl ScorePlugin for KeyedScore {
        fn score_key(&self, _: &CycleState, pod: &Pod) -> Option<Vec<i64>> {
            Some(vec![i64::from(pod.priority)])
        }
        fn score(&self, _: &CycleState, pod: &Pod, node: &NodeInfo) -> Result<i64, Status> {
            KEYED_SCORE_CALLS[self.0].fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let v: i64 = node
                .node
                .labels
                .get("ScoreA")
                .map_or(0, |v| v.parse().unwrap());
            Ok(v % 50 + i64::from(pod.priority))
        }
    }

    fn registry() -> Registry {
        let mut r = Registry::new();
        r.register("KeyedScore", |a, _| {
            Ok(Arc::new(KeyedScore(
                a["counter"].as_u64().unwrap_or(0) as usize
            )))
        });
        r.register("FakeRequired", |_, _| Ok(Arc::new(Required)));
        r.register("FilterA", |a, _| Ok(RejectFilter::from_args("FilterA", a)));
        r.register("FilterB", |a, _| Ok(RejectFilter::from_args("FilterB", a)));
        r.register("FakeRestrict", |a, _| {
            Ok(Arc::new(RestrictPreFilter(
                strings(a, "nodes").into_iter().collect(),
            )))
        });
        r.register("ScoreA", |a, _| Ok(LabelScore::from_args("ScoreA", a)));
        r.register("ScoreB", |a, _| Ok(LabelScore::from_args("ScoreB", a)));
        r.register("FakePostFilter", |a, _| {
            Ok(Arc::new(FakePostFilter(
                a["nominate"].as_str().map(str::to_string),
            )))
        });
        r
    }

    /// The plugins of one test profile, with each plugin's args.
    #[derive(Default)]
    struct Setup {
        pre_filter: Vec<&'static str>,
        filter: Vec<&'static str>,
        post_filter: Vec<&'static str>,
        /// (plugin, weight).
        score: Vec<(&'static str, i32)>,
        args: Vec<(&'static str, Value)>,
        percentage: Option<i32>,
    }

    fn set(names: &[&str]) -> PluginSet {
        PluginSet {
            enabled: names
                .iter()
                .map(|n| rkube_config::Plugin {
                    name: n.to_string(),
                    weight: None,
                })
                .collect(),
            disabled: Vec::new(),
        }
    }

    impl Setup {
        fn build(self) -> Framework {
            let profile = Profile {
                scheduler_name: Some("fake-scheduler".into()),
                percentage_of_nodes_to_score: self.percentage,
                plugins: Some(Plugins {
                    queue_sort: set(&["FakeRequired"]),
                    pre_filter: set(&self.pre_filter),
                    filter: set(&self.filter),
                    post_filter: set(&self.post_filter),
                    score: PluginSet {
                        enabled: self
                            .score
                            .iter()
                            .map(|&(n, w)| rkube_config::Plugin {
                                name: n.to_string(),
                                weight: Some(w),
                            })
                            .collect(),
                        disabled: Vec::new(),
                    },
                    bind: set(&["FakeRequired"]),
                    ..Default::default()
                }),
                plugin_config: self
                    .args
                    .into_iter()
                    .map(|(n, args)| PluginConfig {
                        name: n.to_string(),
                        args,
                    })
                    .collect(),
            };
            Framework::new(&profile, 0, &registry()).expect("fake framework")
        }
    }

    /// A node with the given labels (the score plugins read them).
    fn node(name: &str, labels: &[(&str, i64)]) -> Arc<Node> {
        Arc::new(Node {
            name: name.to_string(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        })
    }

    /// `n` nodes named `n0`, `n1`, ... with label `ScoreA` = their index.
    fn indexed_nodes(n: usize) -> Snapshot {
        Snapshot::new(
            (0..n)
                .map(|i| node(&format!("n{i:03}"), &[("ScoreA", i as i64)]))
                .collect(),
        )
    }

    fn pod() -> Pod {
        Pod {
            namespace: "default".into(),
            name: "p".into(),
            uid: "p-uid".into(),
            ..Default::default()
        }
    }

    fn names(n: std::ops::Range<usize>) -> Vec<String> {
        n.map(|i| format!("n{i:03}")).collect()
    }

    /// (node, evaluated, feasible) of a Scheduled outcome.
    fn scheduled(o: &Outcome) -> (usize, usize, usize) {
        match o {
            Outcome::Scheduled {
                node,
                evaluated,
                feasible,
                ..
            } => (*node, *evaluated, *feasible),
            other => panic!("expected Scheduled, got {other:?}"),
        }
    }

    #[test]
    fn num_feasible_nodes_to_find_follows_upstream() {
        // (percentageOfNodesToScore, nodes, want): upstream's
        // TestNumFeasibleNodesToFind rows, then the adaptive rule
        // max(n × max(50 − n/125, 5) / 100, 100) at a few more points.
        let cases = [
            (0, 10, 10),
            (40, 10, 10),
            (0, 1000, 420),
            (40, 1000, 400),
            (0, 6000, 300),
            (40, 6000, 2400),
            // Below 100 nodes every node, whatever the percentage.
            (0, 99, 99),
            (5, 99, 99),
            // 100 nodes: 50% is 50, raised to the 100 minimum.
            (0, 100, 100),
            // 200 nodes: 49% is 98, raised to 100.
            (0, 200, 100),
            // 50 − 5000/125 = 10%.
            (0, 5000, 500),
            // 50 − 6250/125 = 0%, floored at 5%.
            (0, 6250, 312),
            // 50 − 20000/125 < 0, floored at 5%.
            (0, 20000, 1000),
            // An explicit 100% is every node.
            (100, 1000, 1000),
            (100, 6000, 6000),
            // An explicit percentage still has the 100 minimum.
            (10, 500, 100),
        ];
        for (pct, n, want) in cases {
            assert_eq!(
                num_feasible_nodes_to_find(pct, n),
                want,
                "percentage {pct}, {n} nodes"
            );
        }
    }

    #[test]
    fn filter_rejections_are_recorded_per_node_and_plugin() {
        let fw = Setup {
            filter: vec!["FilterA", "FilterB"],
            args: vec![
                (
                    "FilterA",
                    json!({"reject": ["n001"], "reason": "node(s) had fake taint"}),
                ),
                (
                    "FilterB",
                    json!({"reject": ["n001", "n003"], "reason": "Insufficient fake"}),
                ),
            ],
            ..Default::default()
        }
        .build();
        let snap = indexed_nodes(5);
        let mut diagnosis = Diagnosis::default();
        let sched = Scheduler::new(1, 0);
        let mut state = CycleState::new();
        run_pre_filter(&fw, &mut state, &pod(), &snap).unwrap();
        let (feasible, processed) = sched
            .find_feasible(
                &fw,
                &state,
                &pod(),
                &snap,
                snap.scan_order(),
                5,
                &mut diagnosis,
                &Nominator::new(),
            )
            .unwrap();
        assert_eq!(feasible, vec![0, 2, 4]);
        assert_eq!(processed, 5);
        let mut rejected: Vec<(&str, &str, String)> = diagnosis
            .node_to_status
            .nodes
            .iter()
            .map(|(n, s)| (&**n, s.plugin, s.message()))
            .collect();
        rejected.sort();
        // The first rejecting filter decides: FilterB never sees n1.
        assert_eq!(
            rejected,
            vec![
                ("n001", "FilterA", "node(s) had fake taint".to_string()),
                ("n003", "FilterB", "Insufficient fake".to_string()),
            ]
        );
        assert_eq!(
            diagnosis.unschedulable_plugins,
            BTreeSet::from(["FilterA", "FilterB"])
        );
    }

    #[test]
    fn no_feasible_node_gives_upstreams_fit_error() {
        let fw = Setup {
            filter: vec!["FilterA", "FilterB"],
            args: vec![
                (
                    "FilterA",
                    json!({"reject": ["n001"], "reason": "node(s) had fake taint"}),
                ),
                (
                    "FilterB",
                    json!({"reject": ["n000", "n002"], "reason": "Insufficient fake"}),
                ),
            ],
            ..Default::default()
        }
        .build();
        let out = Scheduler::new(1, 0).schedule(&fw, &indexed_nodes(3), &pod());
        let Outcome::Unschedulable {
            diagnosis,
            message,
            nominated_node,
            victims,
        } = out
        else {
            panic!("expected Unschedulable, got {out:?}");
        };
        assert_eq!(
            message,
            "0/3 nodes are available: 1 node(s) had fake taint, 2 Insufficient fake."
        );
        assert_eq!(diagnosis.node_to_status.nodes.len(), 3);
        assert_eq!(diagnosis.node_to_status.nodes["n001"].plugin, "FilterA");
        assert_eq!(diagnosis.node_to_status.nodes["n000"].plugin, "FilterB");
        // No PostFilter plugin: the nomination is cleared.
        assert_eq!(nominated_node, Some(String::new()));
        assert!(victims.is_empty());
    }

    #[test]
    fn pre_filter_restriction_counts_the_other_nodes_as_absent() {
        let fw = Setup {
            pre_filter: vec!["FakeRestrict"],
            filter: vec!["FilterA"],
            args: vec![
                (
                    "FakeRestrict",
                    json!({"nodes": ["n000", "n001", "missing"]}),
                ),
                (
                    "FilterA",
                    json!({"reject": ["n000", "n001"], "reason": "node(s) had fake taint"}),
                ),
            ],
            ..Default::default()
        }
        .build();
        let out = Scheduler::new(1, 0).schedule(&fw, &indexed_nodes(4), &pod());
        let Outcome::Unschedulable { message, .. } = out else {
            panic!("expected Unschedulable, got {out:?}");
        };
        assert_eq!(
            message,
            "0/4 nodes are available: 2 node(s) didn't satisfy plugin(s) [FakeRestrict], 2 node(s) had fake taint."
        );
        // Only n0 rejected: n1 is taken; only the restricted nodes are
        // walked, and the start index moves by the two processed.
        let fw = Setup {
            pre_filter: vec!["FakeRestrict"],
            filter: vec!["FilterA"],
            args: vec![
                ("FakeRestrict", json!({"nodes": ["n000", "n001"]})),
                ("FilterA", json!({"reject": ["n000"]})),
            ],
            ..Default::default()
        }
        .build();
        let mut sched = Scheduler::new(1, 0);
        let out = sched.schedule(&fw, &indexed_nodes(4), &pod());
        assert_eq!(scheduled(&out), (1, 2, 1));
        assert_eq!(sched.next_start_node_index, 2);
    }

    #[test]
    fn post_filter_gets_the_diagnosis_and_its_result_is_the_outcome() {
        let snap = indexed_nodes(3);
        let reject_all = (
            "FilterA",
            json!({"reject": ["n000", "n001", "n002"], "reason": "no"}),
        );
        let fw = Setup {
            filter: vec!["FilterA"],
            post_filter: vec!["FakePostFilter"],
            args: vec![reject_all.clone()],
            ..Default::default()
        }
        .build();
        let out = Scheduler::new(1, 0).schedule(&fw, &snap, &pod());
        let Outcome::Unschedulable {
            message,
            nominated_node,
            ..
        } = out
        else {
            panic!("expected Unschedulable, got {out:?}");
        };
        assert_eq!(
            message,
            "0/3 nodes are available: 3 no. fake preemption saw 3 node statuses"
        );
        // An Unschedulable PostFilter without a result leaves the nomination.
        assert_eq!(nominated_node, None);

        let fw = Setup {
            filter: vec!["FilterA"],
            post_filter: vec!["FakePostFilter"],
            args: vec![reject_all, ("FakePostFilter", json!({"nominate": "n002"}))],
            ..Default::default()
        }
        .build();
        let out = Scheduler::new(1, 0).schedule(&fw, &snap, &pod());
        let Outcome::Unschedulable {
            message,
            nominated_node,
            ..
        } = out
        else {
            panic!("expected Unschedulable, got {out:?}");
        };
        assert_eq!(nominated_node.as_deref(), Some("n002"));
        assert_eq!(message, "0/3 nodes are available: 3 no.");
    }

    #[test]
    fn highest_weighted_total_wins() {
        // ScoreA weight 1, ScoreB weight 3: n0 = 100, n1 = 150, n2 = 60 + 120 = 180.
        // With both weights 1, n0 and n2 would tie at 100.
        let snap = Snapshot::new(vec![
            node("n000", &[("ScoreA", 100), ("ScoreB", 0)]),
            node("n001", &[("ScoreA", 0), ("ScoreB", 50)]),
            node("n002", &[("ScoreA", 60), ("ScoreB", 40)]),
        ]);
        let fw = Setup {
            score: vec![("ScoreA", 1), ("ScoreB", 3)],
            ..Default::default()
        }
        .build();
        let mut state = CycleState::new();
        let scores = run_score(&fw, &mut state, &pod(), &snap, &[0, 1, 2]).unwrap();
        let totals: Vec<i64> = scores.iter().map(|s| s.total).collect();
        assert_eq!(totals, vec![100, 150, 180]);
        let b = &scores[2].scores[1];
        assert_eq!(
            (b.plugin, b.raw, b.normalized, b.weight, b.weighted),
            ("ScoreB", 40, 40, 3, 120)
        );
        for seed in 0..20 {
            let mut sched = Scheduler::new(seed, 0);
            assert_eq!(sched.select_host(&scores), Some(2));
            assert_eq!(scheduled(&sched.schedule(&fw, &snap, &pod())), (2, 3, 3));
        }
    }

    #[test]
    fn kept_scores_are_reused_per_generation_and_key() {
        use std::sync::atomic::Ordering::SeqCst;
        let calls = || KEYED_SCORE_CALLS[0].load(SeqCst);
        // More nodes than PARALLEL_THRESHOLD: the pool scores them.
        const N: usize = PARALLEL_THRESHOLD + 76;
        let mut snap = indexed_nodes(N);
        let all: Vec<usize> = (0..N).collect();
        let fw = Setup {
            score: vec![("KeyedScore", 1)],
            ..Default::default()
        }
        .build();
        let with_priority = |p: i32| Pod {
            priority: p,
            ..pod()
        };
        let raw = |fw: &Framework, snap: &Snapshot, p: i32| -> Vec<i64> {
            let mut state = CycleState::new();
            let scores = run_score(fw, &mut state, &with_priority(p), snap, &all).unwrap();
            scores.iter().map(|s| s.scores[0].raw).collect()
        };
        let expected = |snap: &Snapshot, p: i32| -> Vec<i64> {
            snap.nodes
                .iter()
                .map(|n| n.node.labels["ScoreA"].parse::<i64>().unwrap() % 50 + i64::from(p))
                .collect()
        };
        let before = calls();
        assert_eq!(raw(&fw, &snap, 1), expected(&snap, 1));
        assert_eq!(calls() - before, N, "first cycle scores every node");
        // Same key, same contents: nothing is scored again.
        let before = calls();
        assert_eq!(raw(&fw, &snap, 1), expected(&snap, 1));
        assert_eq!(calls() - before, 0);
        // One node changes: only it is scored again, with its new label.
        snap.set_node(5, node("n005", &[("ScoreA", 33)]));
        let before = calls();
        assert_eq!(raw(&fw, &snap, 1), expected(&snap, 1));
        assert_eq!(calls() - before, 1);
        assert_eq!(raw(&fw, &snap, 1)[5], 34);
        assert_eq!(raw(&fw, &snap, 1)[1005], 6);
        // Another key scores everything, and the first key's table stays.
        let before = calls();
        assert_eq!(raw(&fw, &snap, 2), expected(&snap, 2));
        assert_eq!(calls() - before, N);
        let before = calls();
        assert_eq!(raw(&fw, &snap, 1), expected(&snap, 1));
        assert_eq!(calls() - before, 0);
        // A pod added to a node is a new content too.
        let mut bound = with_priority(9);
        bound.uid = "bound".into();
        snap.assume(7, Arc::new(bound));
        let before = calls();
        assert_eq!(raw(&fw, &snap, 1), expected(&snap, 1));
        assert_eq!(calls() - before, 1);
    }

    #[test]
    fn normalized_scores_not_raw_ones_decide() {
        // Raw ScoreA 50, 200, 400 (above MAX_NODE_SCORE: only valid once
        // normalized); "reverse" makes the lowest raw score the best.
        let snap = Snapshot::new(vec![
            node("n000", &[("ScoreA", 50)]),
            node("n001", &[("ScoreA", 200)]),
            node("n002", &[("ScoreA", 400)]),
        ]);
        for (normalize, want_normalized, want_node) in
            [("max", [12, 50, 100], 2), ("reverse", [88, 50, 0], 0)]
        {
            let fw = Setup {
                score: vec![("ScoreA", 2)],
                args: vec![("ScoreA", json!({ "normalize": normalize }))],
                ..Default::default()
            }
            .build();
            let mut state = CycleState::new();
            let scores = run_score(&fw, &mut state, &pod(), &snap, &[0, 1, 2]).unwrap();
            let raw: Vec<i64> = scores.iter().map(|s| s.scores[0].raw).collect();
            let normalized: Vec<i64> = scores.iter().map(|s| s.scores[0].normalized).collect();
            let totals: Vec<i64> = scores.iter().map(|s| s.total).collect();
            assert_eq!(raw, vec![50, 200, 400]);
            assert_eq!(normalized, want_normalized);
            assert_eq!(
                totals,
                want_normalized.iter().map(|s| s * 2).collect::<Vec<_>>()
            );
            let out = Scheduler::new(7, 0).schedule(&fw, &snap, &pod());
            assert_eq!(scheduled(&out).0, want_node, "normalize {normalize}");
        }
        // Without NormalizeScore a raw score above 100 is an error.
        let fw = Setup {
            score: vec![("ScoreA", 1)],
            ..Default::default()
        }
        .build();
        match Scheduler::new(7, 0).schedule(&fw, &snap, &pod()) {
            Outcome::Error(s) => assert_eq!(
                s.message(),
                "plugin \"ScoreA\" returns an invalid score 200, it should in the range of [0, 100] after normalizing"
            ),
            other => panic!("expected Error, got {other:?}"),
        }
    }

    #[test]
    fn search_stops_at_enough_feasible_nodes_and_next_cycle_resumes() {
        // 200 nodes, adaptive percentage: 100 feasible nodes are enough.
        // ScoreA = index, max-normalized, so the last node of each window wins.
        let snap = indexed_nodes(200);
        let fw = Setup {
            score: vec![("ScoreA", 1)],
            args: vec![("ScoreA", json!({"normalize": "max"}))],
            ..Default::default()
        }
        .build();
        let mut sched = Scheduler::new(3, 0);
        assert_eq!(
            scheduled(&sched.schedule(&fw, &snap, &pod())),
            (99, 100, 100)
        );
        assert_eq!(sched.next_start_node_index, 100);
        assert_eq!(
            scheduled(&sched.schedule(&fw, &snap, &pod())),
            (199, 100, 100)
        );
        assert_eq!(sched.next_start_node_index, 0);
        assert_eq!(scheduled(&sched.schedule(&fw, &snap, &pod())).0, 99);

        // Rejected nodes count as processed: 10 rejected + 100 feasible.
        let rejecting = |r: std::ops::Range<usize>| {
            Setup {
                filter: vec!["FilterA"],
                score: vec![("ScoreA", 1)],
                args: vec![
                    ("FilterA", json!({ "reject": names(r) })),
                    ("ScoreA", json!({"normalize": "max"})),
                ],
                ..Default::default()
            }
            .build()
        };
        let fw = rejecting(0..10);
        let mut sched = Scheduler::new(3, 0);
        assert_eq!(
            scheduled(&sched.schedule(&fw, &snap, &pod())),
            (109, 110, 100)
        );
        assert_eq!(sched.next_start_node_index, 110);

        // Nodes rejected after the 100th feasible one, before the next
        // feasible one, count too: upstream's workers stop only when a
        // 101st node passes.
        let fw = rejecting(100..105);
        let mut sched = Scheduler::new(3, 0);
        assert_eq!(
            scheduled(&sched.schedule(&fw, &snap, &pod())),
            (99, 105, 100)
        );
        assert_eq!(sched.next_start_node_index, 105);
    }

    #[test]
    fn scan_follows_upstream_node_tree() {
        // Zones interleave in the order their first node (by name) comes.
        let zoned = |name: &str, zone: &str| {
            let mut n = (*node(name, &[])).clone();
            n.labels
                .insert("topology.kubernetes.io/zone".into(), zone.into());
            Arc::new(n)
        };
        let snap = Snapshot::new(vec![
            zoned("c", "b"),
            zoned("a", "b"),
            zoned("b", "a"),
            zoned("d", "b"),
            node("e", &[]),
        ]);
        let order: Vec<&str> = snap
            .scan_order()
            .iter()
            .map(|&i| snap.nodes[i].name())
            .collect();
        assert_eq!(order, vec!["a", "b", "e", "c", "d"]);
    }

    #[test]
    fn profile_percentage_overrides_the_global_one() {
        let snap = indexed_nodes(200);
        let fw = Setup {
            score: vec![("ScoreA", 1)],
            args: vec![("ScoreA", json!({"normalize": "max"}))],
            percentage: Some(100),
            ..Default::default()
        }
        .build();
        let mut sched = Scheduler::new(3, 10);
        assert_eq!(
            scheduled(&sched.schedule(&fw, &snap, &pod())),
            (199, 200, 200)
        );
        assert_eq!(sched.next_start_node_index, 0);
    }

    #[test]
    fn scores_are_kept_in_large_clusters_too() {
        // 20,000 nodes (once no scores were kept past 16,384): the second
        // cycle with the same key asks the plugin about no node.
        use std::sync::atomic::Ordering::SeqCst;
        let n = 20_000;
        let snap = indexed_nodes(n);
        let all: Vec<usize> = (0..n).collect();
        let fw = Setup {
            score: vec![("KeyedScore", 1)],
            args: vec![("KeyedScore", json!({"counter": 1}))],
            ..Default::default()
        }
        .build();
        let before = KEYED_SCORE_CALLS[1].load(SeqCst);
        for _ in 0..2 {
            let mut state = CycleState::new();
            run_score(&fw, &mut state, &pod(), &snap, &all).unwrap();
        }
        assert_eq!(KEYED_SCORE_CALLS[1].load(SeqCst) - before, n);
    }

    #[test]
    fn a_pass_run_by_the_pool_matches_one_on_this_thread() {
        // Enough nodes that filtering and scoring run in the thread pool;
        // the outcome and the diagnosis are the single-threaded ones.
        let n = PARALLEL_THRESHOLD + 476;
        let snap = indexed_nodes(n);
        let rejected = [3, 700, n - 1, n - 2];
        let fw = Setup {
            filter: vec!["FilterA"],
            score: vec![("ScoreA", 1)],
            args: vec![
                (
                    "FilterA",
                    json!({ "reject": rejected.iter().map(|i| format!("n{i:03}")).collect::<Vec<_>>() }),
                ),
                ("ScoreA", json!({"normalize": "max"})),
            ],
            percentage: Some(100),
            ..Default::default()
        }
        .build();
        let mut sched = Scheduler::new(3, 0);
        assert_eq!(
            scheduled(&sched.schedule(&fw, &snap, &pod())),
            (n - 3, n, n - rejected.len())
        );
        // Everything rejected: every node's status is kept.
        let all = Setup {
            filter: vec!["FilterA"],
            args: vec![("FilterA", json!({ "reject": names(0..n) }))],
            percentage: Some(100),
            ..Default::default()
        }
        .build();
        match Scheduler::new(3, 0).schedule(&all, &snap, &pod()) {
            Outcome::Unschedulable { diagnosis, .. } => {
                assert_eq!(diagnosis.node_to_status.nodes.len(), n);
                assert_eq!(diagnosis.unschedulable_plugins, BTreeSet::from(["FilterA"]));
            }
            other => panic!("expected Unschedulable, got {other:?}"),
        }
    }

    #[test]
    fn without_score_plugins_the_first_feasible_node_is_taken() {
        let snap = indexed_nodes(200);
        let fw = Setup {
            filter: vec!["FilterA"],
            args: vec![(
                "FilterA",
                json!({"reject": ["n000", "n001", "n002", "n199"]}),
            )],
            ..Default::default()
        }
        .build();
        let mut sched = Scheduler::new(3, 0);
        assert_eq!(scheduled(&sched.schedule(&fw, &snap, &pod())), (3, 4, 1));
        assert_eq!(sched.next_start_node_index, 4);
        assert_eq!(scheduled(&sched.schedule(&fw, &snap, &pod())), (4, 1, 1));
        assert_eq!(sched.next_start_node_index, 5);
        // Wrapping around: the pass starting at n199 goes on at n0..n3.
        sched.next_start_node_index = 199;
        assert_eq!(scheduled(&sched.schedule(&fw, &snap, &pod())), (3, 5, 1));
        assert_eq!(sched.next_start_node_index, 4);
    }

    #[test]
    fn nominated_node_is_tried_first() {
        let snap = indexed_nodes(200);
        let fw = Setup {
            filter: vec!["FilterA"],
            score: vec![("ScoreA", 1)],
            args: vec![
                ("FilterA", json!({"reject": ["n007"]})),
                ("ScoreA", json!({"normalize": "max"})),
            ],
            ..Default::default()
        }
        .build();
        let mut p = pod();
        p.nominated_node_name = "n005".into();
        let mut sched = Scheduler::new(3, 0);
        // n5 fits: taken without a full pass (the start index stays).
        assert_eq!(scheduled(&sched.schedule(&fw, &snap, &p)), (5, 1, 1));
        assert_eq!(sched.next_start_node_index, 0);
        // n7 does not: the full pass runs from the start index, over
        // n0..n100 (n7 rejected again), and the start index moves.
        p.nominated_node_name = "n007".into();
        assert_eq!(scheduled(&sched.schedule(&fw, &snap, &p)), (100, 101, 100));
        assert_eq!(sched.next_start_node_index, 101);
    }

    #[test]
    fn no_nodes() {
        let fw = Setup::default().build();
        match Scheduler::new(0, 0).schedule(&fw, &Snapshot::default(), &pod()) {
            Outcome::Unschedulable {
                message,
                nominated_node,
                ..
            } => {
                assert_eq!(message, "no nodes available to schedule pods");
                assert_eq!(nominated_node, Some(String::new()));
            }
            other => panic!("expected Unschedulable, got {other:?}"),
        }
    }
}
