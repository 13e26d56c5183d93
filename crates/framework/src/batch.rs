//! OpportunisticBatching (KEP-5598; beta and on by default since v1.35),
//! as v1.37.2 implements it in `framework/runtime/batch.go` and
//! `schedule_one.go`: after a full cycle, the scored feasible nodes other
//! than the chosen one are kept; the next pod, if it has the same
//! signature and comes in the very next cycle within 500 ms, is offered
//! the best of them as a hint, which is filtered (with nominated pods) and
//! taken without a Score pass when it fits.
//!
//! Rules, each upstream's:
//! - A pod's signature is the JSON of every fragment the profile's
//!   PreFilter, Filter, PreScore and Score plugins sign it with, plus its
//!   `schedulerName`. A profile with such a plugin that cannot sign, or
//!   with scheduler extenders, signs no pod; a plugin that refuses a pod
//!   (PodTopologySpread with constraints or default constraints,
//!   InterPodAffinity with pod (anti-)affinity, DynamicResources with
//!   claims) makes it unbatchable. Under the default profile
//!   PodTopologySpread's system default constraints refuse every pod, so
//!   batching never hints there.
//! - One kept list per profile, replaced after every full cycle (or
//!   dropped when the pod was unbatchable or no other node was feasible),
//!   kept as it is when the hint was taken.
//! - A hint needs: a kept list that is not used up; this cycle to follow
//!   the cycle that stored it; no nominated node; an equal signature; the
//!   list not older than 500 ms (from when it was stored).
//! - If the node chosen last still passes the Filter plugins (without
//!   nominated pods), it is scored again and put back among the kept nodes
//!   (PreScore over them all on a copy of the cycle state, its raw scores,
//!   then NormalizeScore over the kept raw scores and its own); a
//!   rejection keeps the list as it is; an error drops the hint.
//! - A flush only counts and logs; the list is replaced or dropped by the
//!   pod's own result.
//!
//! The clock is the host's: the live scheduler passes wall time, the
//! simulator a clock that never advances (it has no wall time, so a kept
//! list never expires by age there; every other rule applies).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rkube_model::Pod;
use serde_json::Value;

use crate::cycle_state::CycleState;
use crate::extension_points::{self, ActiveScore, ScoreTable};
use crate::framework::Framework;
use crate::node_info::NodeInfo;
pub use crate::plugin::{SignPlugin, Signature, Signed};
use crate::snapshot::Snapshot;
use crate::sorted_nodes;
use crate::status::Code;

/// How long a kept list is offered (upstream's `maxBatchAge`).
pub const MAX_BATCH_AGE: Duration = Duration::from_millis(500);

/// The fragment key of the `schedulerName` the framework adds.
const SCHEDULER_NAME_KEY: &str = "v1.Pod.Spec.SchedulerName";

/// Upstream's `frameworkImpl.SignPod`: `None` when the pod cannot be
/// batched. A repeated key keeps the last plugin's value, as upstream's map
/// does.
pub fn sign_pod(fw: &Framework, pod: &Pod, snapshot: &Snapshot) -> Option<Signature> {
    let signers = fw.signers()?;
    let mut map: BTreeMap<&'static str, Value> = BTreeMap::new();
    map.insert(
        SCHEDULER_NAME_KEY,
        Value::String(pod.scheduler_name.clone()),
    );
    for p in signers {
        match p.as_sign()?.sign(pod, snapshot) {
            Signed::Fragments(f) => map.extend(f),
            Signed::Refused | Signed::Error(_) => return None,
        }
    }
    serde_json::to_string(&map).ok().map(Signature)
}

/// A scored node kept for later pods: its raw scores by plugin and its
/// weighted total.
#[derive(Debug, Clone)]
pub(crate) struct Kept {
    pub name: Arc<str>,
    pub raw: Vec<(&'static str, i64)>,
    pub total: i64,
}

/// What a successful cycle hands to [`Batch::store`].
pub(crate) struct CycleResult {
    /// The pod's signature (`None`: not batchable).
    pub signature: Option<Signature>,
    /// The hint this cycle was given.
    pub hint: Option<Arc<str>>,
    /// The node chosen.
    pub chosen: Arc<str>,
    /// The rest of the heap of scored nodes when the pod was signed.
    pub others: Vec<Kept>,
    /// How many nodes that rest had, signed or not.
    pub others_count: usize,
}

impl CycleResult {
    /// A cycle with one feasible node (a nominated or hinted node that
    /// fit, or a pass that found one): nothing to keep.
    pub(crate) fn single(
        signature: Option<Signature>,
        hint: Option<Arc<str>>,
        chosen: Arc<str>,
    ) -> Self {
        CycleResult {
            signature,
            hint,
            chosen,
            others: Vec::new(),
            others_count: 0,
        }
    }
}

/// The kept list (upstream's `batchState`).
#[derive(Debug, Clone)]
struct BatchState {
    signature: Signature,
    /// A max-heap by total, in Go's `container/heap` layout.
    heap: Vec<Kept>,
    created: Duration,
}

/// The last successful cycle (upstream's `schedulingCycle`).
#[derive(Debug, Clone)]
struct LastCycle {
    cycle: u64,
    chosen: Arc<str>,
}

/// Counts of what batching did (upstream's `scheduler_batch_*` metrics and
/// `TotalBatchedPods`), per profile.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchStats {
    /// Pods placed on their hint.
    pub hint_used: u64,
    /// Hints given but not taken (the node no longer fit).
    pub hint_not_used: u64,
    /// Cycles that got no hint.
    pub no_hint: u64,
    /// Kept lists found unusable, by upstream's reason label.
    pub flushed: BTreeMap<&'static str, u64>,
    /// Times the last chosen node was scored again.
    pub rescores: u64,
}

/// One profile's OpportunisticBatch.
#[derive(Debug, Clone, Default)]
pub struct Batch {
    state: Option<BatchState>,
    last: Option<LastCycle>,
    /// What it did so far.
    pub stats: BatchStats,
}

/// The time a [`Batch`] reads.
#[derive(Debug, Clone, Copy)]
pub enum BatchClock {
    /// Never advances: kept lists do not expire by age (the simulator).
    Frozen,
    /// Wall time since the given instant (the live scheduler).
    Wall(Instant),
    /// A set time (tests: a list stored at one time, read at another).
    Fixed(Duration),
}

impl BatchClock {
    fn now(&self) -> Duration {
        match self {
            BatchClock::Frozen => Duration::ZERO,
            BatchClock::Wall(start) => start.elapsed(),
            BatchClock::Fixed(t) => *t,
        }
    }
}

/// What [`Batch::hint`] needs of the cycle.
pub(crate) struct HintCycle<'a> {
    pub fw: &'a Framework,
    pub state: &'a CycleState,
    pub pod: &'a Pod,
    pub snapshot: &'a Snapshot,
    pub signature: Option<&'a Signature>,
    pub cycle: u64,
    pub clock: BatchClock,
}

/// One scheduling cycle's part in batching: the pod's signature and the
/// node hinted to it, and what the cycle leaves for the next pods
/// (upstream's `GetNodeHint` at the start of a cycle and
/// `StoreScheduleResults` at its end, kept out of the algorithm).
pub(crate) struct BatchCycle {
    signature: Option<Signature>,
    hint: Option<Arc<str>>,
}

impl BatchCycle {
    /// Signs `pod` and asks `batch` for a hint.
    pub(crate) fn begin(
        batch: &mut Batch,
        fw: &Framework,
        state: &CycleState,
        pod: &Pod,
        snapshot: &Snapshot,
        cycle: u64,
        clock: BatchClock,
    ) -> BatchCycle {
        let signature = sign_pod(fw, pod, snapshot);
        let c = HintCycle {
            fw,
            state,
            pod,
            snapshot,
            signature: signature.as_ref(),
            cycle,
            clock,
        };
        let hint = batch.hint(&c);
        BatchCycle { signature, hint }
    }

    /// The node hinted to this pod, to try first.
    pub(crate) fn hint(&self) -> Option<&str> {
        self.hint.as_deref()
    }

    /// The result of a cycle that found one feasible node: nothing to keep.
    pub(crate) fn single(self, chosen: Arc<str>) -> CycleResult {
        CycleResult::single(self.signature, self.hint, chosen)
    }

    /// The host among the scored `feasible` nodes (the top of a max-heap
    /// by total in node order, as upstream) and the result: the rest of
    /// the heap is kept for the next pods when the pod was signed.
    pub(crate) fn scored(
        self,
        snapshot: &Snapshot,
        feasible: &[usize],
        table: &ScoreTable,
    ) -> (usize, CycleResult) {
        let others_count = feasible.len().saturating_sub(1);
        if self.signature.is_none() {
            let node =
                sorted_nodes::top(feasible.iter().copied().zip(table.totals.iter().copied()))
                    .expect("non-empty");
            let chosen = snapshot.nodes[node].name_shared();
            let result = CycleResult {
                signature: None,
                hint: self.hint,
                chosen,
                others: Vec::new(),
                others_count,
            };
            return (node, result);
        }
        let p = table.plugins.len();
        let mut heap: Vec<Kept> = feasible
            .iter()
            .enumerate()
            .map(|(i, &n)| Kept {
                name: snapshot.nodes[n].name_shared(),
                raw: table
                    .plugins
                    .iter()
                    .zip(&table.raw[i * p..(i + 1) * p])
                    .map(|(&(name, _), &v)| (name, v))
                    .collect(),
                total: table.totals[i],
            })
            .collect();
        let less = sorted_nodes::higher_total(|k: &Kept| k.total);
        sorted_nodes::init(&mut heap, &less);
        let top = sorted_nodes::pop(&mut heap, &less).expect("two or more nodes");
        let node = snapshot.index_of(&top.name).expect("a snapshot node");
        let others_count = heap.len();
        let result = CycleResult {
            signature: self.signature,
            hint: self.hint,
            chosen: top.name,
            others: heap,
            others_count,
        };
        (node, result)
    }
}

fn by_total(a: &Kept, b: &Kept) -> bool {
    a.total > b.total
}

impl Batch {
    fn flush(&mut self, fw: &Framework, reason: &'static str) {
        *self.stats.flushed.entry(reason).or_default() += 1;
        if let Some(r) = &fw.recorder {
            r.batch_flushed(&fw.profile_name, reason);
        }
    }

    fn attempt(&mut self, fw: &Framework, result: &'static str) {
        match result {
            "hint_used" => self.stats.hint_used += 1,
            "hint_not_used" => self.stats.hint_not_used += 1,
            _ => self.stats.no_hint += 1,
        }
        if let Some(r) = &fw.recorder {
            r.batch_attempt(&fw.profile_name, result);
        }
    }

    /// Upstream's `GetNodeHint`: the node to try first, if any.
    pub(crate) fn hint(&mut self, c: &HintCycle<'_>) -> Option<Arc<str>> {
        let hint = self.find_hint(c);
        if hint.is_none() {
            self.attempt(c.fw, "no_hint");
        }
        hint
    }

    fn find_hint(&mut self, c: &HintCycle<'_>) -> Option<Arc<str>> {
        let (state, last) = match (&self.state, &self.last) {
            (Some(s), Some(l)) if !s.heap.is_empty() => (s, l),
            _ => return None,
        };
        let reason = if c.cycle != last.cycle + 1 {
            Some("pod_skipped")
        } else if !c.pod.nominated_node_name.is_empty() {
            Some("pod_nominated")
        } else if c.signature != Some(&state.signature) {
            Some("pod_incompatible")
        } else if c.clock.now() > state.created + MAX_BATCH_AGE {
            Some("expired")
        } else {
            None
        };
        if let Some(reason) = reason {
            self.flush(c.fw, reason);
            return None;
        }
        let chosen = last.chosen.clone();
        let Some(chosen_info) = c.snapshot.get(&chosen) else {
            self.flush(c.fw, "node_missing");
            return None;
        };
        let status = extension_points::run_filters(c.fw, c.state, c.pod, chosen_info);
        if status.is_success() {
            if let Err(reason) = self.rescore(c, chosen_info) {
                self.flush(c.fw, reason);
                return None;
            }
        } else if !matches!(
            status.code,
            Code::Unschedulable | Code::UnschedulableAndUnresolvable
        ) {
            self.flush(c.fw, "filter_error");
            return None;
        }
        let state = self.state.as_mut()?;
        sorted_nodes::pop(&mut state.heap, &by_total).map(|k| k.name)
    }

    /// Upstream's `rescoreHintedNode`: the last chosen node, which still
    /// fits, scored again and put back among the kept nodes.
    fn rescore(&mut self, c: &HintCycle<'_>, chosen: &NodeInfo) -> Result<(), &'static str> {
        self.stats.rescores += 1;
        let state = self.state.as_mut().expect("checked by the caller");
        let mut infos: Vec<&NodeInfo> = Vec::with_capacity(state.heap.len() + 1);
        for k in &state.heap {
            infos.push(c.snapshot.get(&k.name).ok_or("node_missing")?);
        }
        infos.push(chosen);
        let mut rescore_state = c.state.clone();
        extension_points::pre_score(c.fw, &mut rescore_state, c.pod, &infos, c.snapshot)
            .map_err(|_| "prescore_error")?;
        let plugins: Vec<ActiveScore<'_>> = extension_points::active_scores(c.fw, &rescore_state);
        let mut fresh = Vec::with_capacity(plugins.len());
        for a in &plugins {
            let v = a
                .plugin
                .score(&rescore_state, c.pod, chosen)
                .map_err(|_| "rescore_error")?;
            fresh.push((a.name, v));
        }
        let mut rows: Vec<Kept> = std::mem::take(&mut state.heap);
        rows.push(Kept {
            name: chosen.name_shared(),
            raw: fresh,
            total: 0,
        });
        // The kept raw scores by this cycle's plugins (a plugin a node was
        // not scored by counts 0, as upstream's name lookup leaves it).
        let p = plugins.len();
        let mut raw = vec![0i64; rows.len() * p];
        for (i, row) in rows.iter().enumerate() {
            for (k, a) in plugins.iter().enumerate() {
                if let Some(&(_, v)) = row.raw.iter().find(|(n, _)| *n == a.name) {
                    raw[i * p + k] = v;
                }
            }
        }
        let table = match extension_points::normalize_scores(
            &rescore_state,
            c.pod,
            &infos,
            &plugins,
            raw,
            Vec::new(),
            false,
        ) {
            Ok(t) => t,
            Err(_) => {
                // The kept list stays as it was (a flush only counts).
                rows.pop();
                state.heap = rows;
                return Err("normalize_error");
            }
        };
        for (row, total) in rows.iter_mut().zip(table.totals) {
            row.total = total;
        }
        sorted_nodes::init(&mut rows, &by_total);
        state.heap = rows;
        Ok(())
    }

    /// Upstream's `StoreScheduleResults` for a cycle that chose a node.
    pub(crate) fn store(&mut self, fw: &Framework, r: CycleResult, cycle: u64, clock: BatchClock) {
        let CycleResult {
            signature,
            hint,
            chosen,
            others,
            others_count,
        } = r;
        let hint = hint.as_deref();
        let hint_used = hint == Some(&*chosen);
        self.last = Some(LastCycle { cycle, chosen });
        if hint_used {
            self.attempt(fw, "hint_used");
            return;
        }
        if hint.is_some() {
            self.attempt(fw, "hint_not_used");
        }
        match signature {
            Some(signature) if !others.is_empty() => {
                self.state = Some(BatchState {
                    signature,
                    heap: others,
                    created: clock.now(),
                });
            }
            _ => {
                let reason = if others_count == 0 {
                    "empty_list"
                } else {
                    "pod_not_batchable"
                };
                self.flush(fw, reason);
                self.state = None;
            }
        }
    }

    /// Nodes still kept (for tests and explanations).
    pub fn kept(&self) -> Vec<&str> {
        self.state
            .iter()
            .flat_map(|s| s.heap.iter().map(|k| &*k.name))
            .collect()
    }
}
