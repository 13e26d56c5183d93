//! Node-pressure eviction with hard thresholds (`evictionHard`), as
//! upstream kubelet v1.37's eviction manager (`pkg/kubelet/eviction`):
//!
//! * every [`MONITORING_PERIOD`] (10 s, upstream's `evictionMonitoringPeriod`)
//!   the signals are observed ([`SignalSource`]) and compared with the
//!   thresholds: a threshold is met when `quantity > available`, the
//!   quantity being the configured amount or the percentage of the signal's
//!   capacity ([`thresholds_met`]);
//! * each met signal's node condition (`MemoryPressure`, `DiskPressure`,
//!   `PIDPressure`) is True while it was last met less than
//!   `evictionPressureTransitionPeriod` ago ([`NodePressure::update`]); the
//!   heartbeat reports it with upstream's reasons
//!   (`KubeletHasInsufficientMemory`, ...). The kubelet sets only the
//!   condition: the `node.kubernetes.io/memory-pressure:NoSchedule` (etc.)
//!   taint is added and removed by kube-controller-manager's node lifecycle
//!   controller (TaintNodesByCondition), as upstream;
//! * while a threshold is met, at most ONE pod per node and round is
//!   evicted: the signal to reclaim is chosen memory first, the node's
//!   running pods are ranked ([`rank`]: memory — usage above requests
//!   first, then lower priority, then the largest usage above requests; disk
//!   the same with ephemeral-storage; PIDs — lower priority, then most
//!   processes; pods without usage stats first), critical pods are skipped,
//!   and the pod's worker kills it (grace 1 s, upstream's
//!   `immediateEvictionGracePeriodSeconds` for hard thresholds) and reports
//!   it `Failed`, reason `Evicted`, with upstream's message ([`message`])
//!   and a `DisruptionTarget` condition (`TerminationByKubelet`).
//!
//! Signals:
//! * `--runtime cri` ([`MachineSignals`]): `memory.available` from
//!   `/proc/meminfo` (MemAvailable of MemTotal); `nodefs.*` from `statvfs`
//!   of `--root-dir`; `imagefs.*` from `statvfs` of the image filesystem
//!   CRI's `ImageFsInfo` names (else nodefs); `pid.available` =
//!   min(pid_max, threads-max) − tasks running (`/proc/loadavg`); pod usage
//!   from CRI `ListContainerStats` (working set, writable layer).
//! * `--runtime sim --sim-signals FILE` ([`SimSignals`]): a JSON file read
//!   every round, so tests can drive pressure:
//!
//! ```json
//! {"signals": {"memory.available": "50Mi",
//!              "nodefs.available": {"available": "1Gi", "capacity": "100Gi"}},
//!  "nodes":   {"sim-node-00003": {"pid.available": "10"}},
//!  "pods":    {"default/web": {"memory": "300Mi", "ephemeral-storage": "1Gi", "pids": 12}}}
//! ```
//!
//!   `signals` apply to every node of the process, `nodes` override them
//!   per node. A bare quantity is the available amount; the capacity (for
//!   percentage thresholds) is then the node's capacity of the resource
//!   (`memory`, `ephemeral-storage`), else the available amount itself.
//!   `pods` gives usage by `namespace/name`, attributed to the pod's first
//!   container; pods not listed use nothing. A missing file means no
//!   signals (no pressure). Without `--sim-signals` the sim has no eviction.
//!
//! Not implemented: soft thresholds, minimum reclaim, node-level reclaim
//! (image/container GC) before evicting, admission of new pods under
//! pressure, the eviction Events, local-storage (emptyDir) limits.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use rkube_model::Quantity;
use serde_json::Value;

use crate::config::{parse_threshold, KubeletConfiguration, Threshold};
use crate::node::NodeDesc;
use crate::pods::worker::{ActivePod, ActivePods, EvictRequest};
use crate::runtime::BoxFuture;

/// How often signals are observed (upstream's `evictionMonitoringPeriod`).
pub const MONITORING_PERIOD: Duration = Duration::from_secs(10);

/// Grace period of a hard-threshold eviction (upstream's
/// `immediateEvictionGracePeriodSeconds`).
pub const IMMEDIATE_GRACE: Duration = Duration::from_secs(1);

/// Pods at or above this priority are critical and never evicted
/// (`system-cluster-critical`, `system-node-critical`).
pub const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;

/// An eviction signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Signal {
    /// `memory.available`.
    MemoryAvailable,
    /// `allocatableMemory.available` (not observed by rkube).
    AllocatableMemoryAvailable,
    /// `nodefs.available`.
    NodeFsAvailable,
    /// `nodefs.inodesFree`.
    NodeFsInodesFree,
    /// `imagefs.available`.
    ImageFsAvailable,
    /// `imagefs.inodesFree`.
    ImageFsInodesFree,
    /// `containerfs.available` (not observed: no split image filesystem).
    ContainerFsAvailable,
    /// `containerfs.inodesFree` (not observed).
    ContainerFsInodesFree,
    /// `pid.available`.
    PidAvailable,
}

/// A node condition eviction reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Condition {
    /// `MemoryPressure`.
    Memory,
    /// `DiskPressure`.
    Disk,
    /// `PIDPressure`.
    Pid,
}

impl Signal {
    /// Every signal, in upstream's names.
    pub const ALL: [Signal; 9] = [
        Signal::MemoryAvailable,
        Signal::AllocatableMemoryAvailable,
        Signal::NodeFsAvailable,
        Signal::NodeFsInodesFree,
        Signal::ImageFsAvailable,
        Signal::ImageFsInodesFree,
        Signal::ContainerFsAvailable,
        Signal::ContainerFsInodesFree,
        Signal::PidAvailable,
    ];

    /// The name used in `evictionHard`.
    pub fn name(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory.available",
            Signal::AllocatableMemoryAvailable => "allocatableMemory.available",
            Signal::NodeFsAvailable => "nodefs.available",
            Signal::NodeFsInodesFree => "nodefs.inodesFree",
            Signal::ImageFsAvailable => "imagefs.available",
            Signal::ImageFsInodesFree => "imagefs.inodesFree",
            Signal::ContainerFsAvailable => "containerfs.available",
            Signal::ContainerFsInodesFree => "containerfs.inodesFree",
            Signal::PidAvailable => "pid.available",
        }
    }

    /// The signal called `name`.
    pub fn parse(name: &str) -> Option<Signal> {
        Signal::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The node condition the signal drives (upstream's `signalToNodeCondition`).
    pub fn condition(self) -> Condition {
        match self {
            Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable => Condition::Memory,
            Signal::PidAvailable => Condition::Pid,
            _ => Condition::Disk,
        }
    }

    /// The resource reclaimed (upstream's `signalToResource`).
    pub fn resource(self) -> Resource {
        match self {
            Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable => Resource::Memory,
            Signal::NodeFsAvailable | Signal::ImageFsAvailable | Signal::ContainerFsAvailable => {
                Resource::EphemeralStorage
            }
            Signal::NodeFsInodesFree
            | Signal::ImageFsInodesFree
            | Signal::ContainerFsInodesFree => Resource::Inodes,
            Signal::PidAvailable => Resource::Pids,
        }
    }
}

/// A resource to reclaim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    /// `memory`.
    Memory,
    /// `ephemeral-storage`.
    EphemeralStorage,
    /// `inodes`.
    Inodes,
    /// `pids`.
    Pids,
}

impl Resource {
    /// The name in messages (`The node was low on resource: memory.`).
    pub fn name(self) -> &'static str {
        match self {
            Resource::Memory => "memory",
            Resource::EphemeralStorage => "ephemeral-storage",
            Resource::Inodes => "inodes",
            Resource::Pids => "pids",
        }
    }
}

/// One `evictionHard` entry.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HardThreshold {
    /// The signal.
    pub signal: Signal,
    /// Eviction when available < this.
    pub value: Threshold,
}

/// The thresholds of `evictionHard` (validated by [`crate::config`]).
pub fn hard_thresholds(eviction_hard: &BTreeMap<String, String>) -> Vec<HardThreshold> {
    eviction_hard
        .iter()
        .filter_map(|(k, v)| {
            Some(HardThreshold {
                signal: Signal::parse(k)?,
                value: parse_threshold(v)?,
            })
        })
        .collect()
}

/// What a signal observed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observation {
    /// Available amount (bytes, inodes or pids).
    pub available: i64,
    /// Capacity (percentages are of this).
    pub capacity: i64,
}

/// The observations of one node.
pub type Observations = BTreeMap<Signal, Observation>;

/// A threshold met: `quantity > available`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Met {
    /// The signal.
    pub signal: Signal,
    /// The threshold's quantity for the observed capacity.
    pub quantity: i64,
    /// What was available.
    pub available: i64,
}

/// The thresholds met by `obs` (upstream's `thresholdsMet`; a signal not
/// observed is never met).
pub fn thresholds_met(thresholds: &[HardThreshold], obs: &Observations) -> Vec<Met> {
    thresholds
        .iter()
        .filter_map(|t| {
            let o = obs.get(&t.signal)?;
            let quantity = t.value.amount(o.capacity);
            (quantity > o.available).then_some(Met {
                signal: t.signal,
                quantity,
                available: o.available,
            })
        })
        .collect()
}

/// The met threshold to reclaim first: memory before every other
/// resource (upstream's `byEvictionPriority`), else the first by signal.
pub fn to_reclaim(met: &[Met]) -> Option<Met> {
    met.iter()
        .copied()
        .min_by_key(|m| (m.signal.resource() != Resource::Memory, m.signal))
}

/// The pressure conditions of a node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pressure {
    /// `MemoryPressure=True`.
    pub memory: bool,
    /// `DiskPressure=True`.
    pub disk: bool,
    /// `PIDPressure=True`.
    pub pid: bool,
}

/// Per-node condition bookkeeping: when each condition was last observed.
#[derive(Debug, Clone, Default)]
pub struct NodePressure {
    last_observed: BTreeMap<Condition, Instant>,
}

impl NodePressure {
    /// Records the thresholds met at `now` and returns the conditions to
    /// report: those observed less than `transition` ago (upstream's
    /// `nodeConditionsObservedSince`), so a condition clears only after
    /// the signal has stayed good for the whole transition period.
    pub fn update(&mut self, met: &[Met], transition: Duration, now: Instant) -> Pressure {
        for m in met {
            self.last_observed.insert(m.signal.condition(), now);
        }
        let on = |c: Condition| {
            self.last_observed
                .get(&c)
                .is_some_and(|at| now.saturating_duration_since(*at) < transition)
        };
        Pressure {
            memory: on(Condition::Memory),
            disk: on(Condition::Disk),
            pid: on(Condition::Pid),
        }
    }
}

/// The pressure of every node, read by the heartbeat.
#[derive(Debug, Default)]
pub struct PressureBoard {
    nodes: RwLock<HashMap<String, Pressure>>,
}

impl PressureBoard {
    /// The pressure of `node` (none if never observed).
    pub fn get(&self, node: &str) -> Pressure {
        self.nodes
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(node)
            .copied()
            .unwrap_or_default()
    }

    /// Sets the pressure of `node`.
    pub fn set(&self, node: &str, p: Pressure) {
        let mut m = self.nodes.write().unwrap_or_else(|e| e.into_inner());
        if p == Pressure::default() {
            m.remove(node);
        } else {
            m.insert(node.to_string(), p);
        }
    }
}

/// What a pod uses, by container (the pod total is the sum).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodUsage {
    /// Container name → working-set bytes.
    pub memory: BTreeMap<String, i64>,
    /// Container name → bytes of its writable layer and logs.
    pub ephemeral_storage: BTreeMap<String, i64>,
    /// Processes of the pod, if known.
    pub pids: Option<i64>,
}

impl PodUsage {
    /// The pod's total of `r` (`None` when not measured).
    pub fn total(&self, r: Resource) -> Option<i64> {
        match r {
            Resource::Memory => Some(self.memory.values().sum()),
            Resource::EphemeralStorage => Some(self.ephemeral_storage.values().sum()),
            Resource::Inodes => None,
            Resource::Pids => self.pids,
        }
    }
}

/// One round's observations of every node, and pod usage by
/// `namespace/name`.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Node name → observations.
    pub nodes: HashMap<String, Observations>,
    /// `namespace/name` → usage.
    pub pods: HashMap<String, PodUsage>,
}

/// Where signals come from.
pub trait SignalSource: Send + Sync + 'static {
    /// Observes the signals of `nodes` and the pods' usage.
    fn observe<'a>(&'a self, nodes: &'a [Arc<NodeDesc>]) -> BoxFuture<'a, Snapshot>;
}

/// A pod's request of `r`: the sum over containers, or the largest init
/// container if more, plus overhead (upstream's `GetResourceRequestQuantity`).
pub fn pod_request(pod: &Pod, r: Resource) -> i64 {
    let name = r.name();
    let Some(spec) = pod.spec.as_ref() else {
        return 0;
    };
    let req = |res: Option<&k8s_openapi::api::core::v1::ResourceRequirements>| -> i64 {
        res.and_then(|r| r.requests.as_ref())
            .and_then(|m| m.get(name))
            .and_then(|q| Quantity::parse(&q.0).ok())
            .map(|q| q.value())
            .unwrap_or(0)
    };
    if let Some(pod_level) = spec.resources.as_ref() {
        let v = req(Some(pod_level));
        if v > 0 {
            return v;
        }
    }
    let sum: i64 = spec
        .containers
        .iter()
        .map(|c| req(c.resources.as_ref()))
        .sum();
    let init = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| req(c.resources.as_ref()))
        .max()
        .unwrap_or(0);
    let overhead = spec
        .overhead
        .as_ref()
        .and_then(|m| m.get(name))
        .and_then(|q| Quantity::parse(&q.0).ok())
        .map(|q| q.value())
        .unwrap_or(0);
    sum.max(init) + overhead
}

/// Critical pods are never evicted: static and mirror pods, and pods at
/// system-critical priority (upstream's `IsCriticalPod`).
pub fn is_critical(pod: &Pod) -> bool {
    let ann = pod.metadata.annotations.as_ref();
    let is_static = ann.is_some_and(|a| {
        a.contains_key("kubernetes.io/config.mirror")
            || a.get("kubernetes.io/config.source")
                .is_some_and(|s| s != "api")
    });
    let priority = pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
    is_static || priority >= SYSTEM_CRITICAL_PRIORITY
}

/// A pod as the ranking sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The caller's index of the pod.
    pub index: usize,
    /// `spec.priority` (0 if unset).
    pub priority: i32,
    /// Its request of the resource to reclaim.
    pub request: i64,
    /// Its usage, `None` without stats.
    pub usage: Option<i64>,
}

/// Orders `cands` for eviction of `r`, first to evict first (upstream's
/// `rankMemoryPressure`, `rankDiskPressureFunc`, `rankPIDPressure`). Pods
/// without stats come first in every usage comparison.
pub fn rank(r: Resource, cands: &mut [Candidate]) {
    use std::cmp::Ordering;
    // true sorts first.
    let first = |a: bool, b: bool| b.cmp(&a);
    let exceeds = |a: &Candidate, b: &Candidate| match (a.usage, b.usage) {
        (Some(ua), Some(ub)) => first(ua > a.request, ub > b.request),
        (ua, ub) => first(ua.is_none(), ub.is_none()),
    };
    let priority = |a: &Candidate, b: &Candidate| a.priority.cmp(&b.priority);
    let above_request = |a: &Candidate, b: &Candidate| match (a.usage, b.usage) {
        (Some(ua), Some(ub)) => (ub - b.request).cmp(&(ua - a.request)),
        (ua, ub) => first(ua.is_none(), ub.is_none()),
    };
    let most = |a: &Candidate, b: &Candidate| match (a.usage, b.usage) {
        (Some(ua), Some(ub)) => ub.cmp(&ua),
        (ua, ub) => first(ua.is_none(), ub.is_none()),
    };
    cands.sort_by(|a, b| -> Ordering {
        match r {
            Resource::Pids => priority(a, b).then_with(|| most(a, b)),
            _ => exceeds(a, b)
                .then_with(|| priority(a, b))
                .then_with(|| above_request(a, b)),
        }
    });
}

/// Formats an amount as Go's `resource.Quantity` with `BinarySI` prints
/// it: exact binary suffixes (`100Mi`), else exact decimal ones (`1500k`),
/// else the plain number.
pub fn format_quantity(v: i64) -> String {
    if v.unsigned_abs() < 1024 {
        return v.to_string();
    }
    for (s, shift) in [
        ("Ei", 60),
        ("Pi", 50),
        ("Ti", 40),
        ("Gi", 30),
        ("Mi", 20),
        ("Ki", 10),
    ] {
        if v % (1i64 << shift) == 0 {
            return format!("{}{s}", v >> shift);
        }
    }
    for (s, p) in [
        ("E", 1_000_000_000_000_000_000i64),
        ("P", 1_000_000_000_000_000),
        ("T", 1_000_000_000_000),
        ("G", 1_000_000_000),
        ("M", 1_000_000),
        ("k", 1_000),
    ] {
        if v % p == 0 {
            return format!("{}{s}", v / p);
        }
    }
    v.to_string()
}

/// Upstream's eviction message: `The node was low on resource: memory.
/// Threshold quantity: 100Mi, available: 50Mi. Container app was using
/// 20Mi, request is 0, has larger consumption of memory. `
pub fn message(met: &Met, pod: &Pod, usage: Option<&PodUsage>) -> String {
    let r = met.signal.resource();
    let mut m = format!(
        "The node was low on resource: {}. Threshold quantity: {}, available: {}. ",
        r.name(),
        format_quantity(met.quantity),
        format_quantity(met.available)
    );
    let Some(usage) = usage else {
        return m;
    };
    let per_container = match r {
        Resource::Memory => &usage.memory,
        Resource::EphemeralStorage => &usage.ephemeral_storage,
        _ => return m,
    };
    let Some(spec) = pod.spec.as_ref() else {
        return m;
    };
    for c in spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
    {
        let Some(&used) = per_container.get(&c.name) else {
            continue;
        };
        let request = c
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|m| m.get(r.name()))
            .map(|q| q.0.clone())
            .unwrap_or_else(|| "0".into());
        let request_value = Quantity::parse(&request).map(|q| q.value()).unwrap_or(0);
        if used > request_value {
            m.push_str(&format!(
                "Container {} was using {}, request is {}, has larger consumption of {}. ",
                c.name,
                format_quantity(used),
                request,
                r.name()
            ));
        }
    }
    m
}

fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or(""),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

/// The eviction loop of the process.
pub struct EvictionManager {
    /// The configuration (`evictionHard`, `evictionPressureTransitionPeriod`).
    pub config: Arc<KubeletConfiguration>,
    /// The nodes of the process.
    pub nodes: Vec<Arc<NodeDesc>>,
    /// Where signals come from.
    pub source: Arc<dyn SignalSource>,
    /// The pods the workers run.
    pub active: Arc<ActivePods>,
    /// Where the pressure conditions go (read by the heartbeat).
    pub pressure: Arc<PressureBoard>,
    /// Time between rounds ([`MONITORING_PERIOD`]).
    pub period: Duration,
}

impl EvictionManager {
    /// Runs forever: one round every `period`.
    pub async fn run(self) {
        let thresholds = hard_thresholds(&self.config.eviction_hard);
        if thresholds.is_empty() {
            tracing::info!("no eviction thresholds: eviction manager not started");
            return std::future::pending().await;
        }
        tracing::info!(thresholds = ?self.config.eviction_hard, "eviction manager: starting control loop");
        let mut state: HashMap<String, NodePressure> = HashMap::new();
        let mut tick = tokio::time::interval(self.period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let snap = self.source.observe(&self.nodes).await;
            let now = Instant::now();
            let mut evictions = Vec::new();
            for desc in &self.nodes {
                let empty = Observations::new();
                let obs = snap.nodes.get(&desc.name).unwrap_or(&empty);
                let met = thresholds_met(&thresholds, obs);
                let p = state.entry(desc.name.clone()).or_default().update(
                    &met,
                    self.config.eviction_pressure_transition_period,
                    now,
                );
                let before = self.pressure.get(&desc.name);
                if before != p {
                    tracing::info!(node = %desc.name, pressure = ?p, "eviction manager: node conditions changed");
                }
                self.pressure.set(&desc.name, p);
                if let Some(m) = to_reclaim(&met) {
                    evictions.push(self.evict_one(&desc.name, m, &snap));
                }
            }
            futures::future::join_all(evictions).await;
        }
    }

    /// Ranks the node's running pods for `met` and evicts the first that
    /// can be evicted (one pod per round, as upstream).
    async fn evict_one(&self, node: &str, met: Met, snap: &Snapshot) {
        let r = met.signal.resource();
        tracing::info!(%node, resource = r.name(), signal = met.signal.name(), quantity = met.quantity, available = met.available, "eviction manager: attempting to reclaim");
        let pods: Vec<ActivePod> = self
            .active
            .on_node(node)
            .into_iter()
            .filter(|a| a.running)
            .collect();
        if pods.is_empty() {
            tracing::warn!(%node, "eviction manager: thresholds met, but no pods are active to evict");
            return;
        }
        let mut cands: Vec<Candidate> = pods
            .iter()
            .enumerate()
            .map(|(index, a)| Candidate {
                index,
                priority: a.pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0),
                request: match r {
                    Resource::Memory | Resource::EphemeralStorage => pod_request(&a.pod, r),
                    _ => 0,
                },
                usage: snap.pods.get(&pod_key(&a.pod)).and_then(|u| u.total(r)),
            })
            .collect();
        rank(r, &mut cands);
        let order: Vec<String> = cands.iter().map(|c| pod_key(&pods[c.index].pod)).collect();
        tracing::info!(%node, pods = ?order, "eviction manager: pods ranked for eviction");
        for c in &cands {
            let a = &pods[c.index];
            if is_critical(&a.pod) {
                tracing::warn!(pod = %pod_key(&a.pod), "eviction manager: cannot evict a critical pod");
                continue;
            }
            let msg = message(&met, &a.pod, snap.pods.get(&pod_key(&a.pod)));
            let (tx, rx) = tokio::sync::oneshot::channel();
            let req = EvictRequest {
                message: msg,
                grace: IMMEDIATE_GRACE,
                done: tx,
            };
            if a.evict.send(req).await.is_err() {
                continue;
            }
            match tokio::time::timeout(IMMEDIATE_GRACE + Duration::from_secs(30), rx).await {
                Ok(Ok(true)) => {
                    tracing::info!(pod = %pod_key(&a.pod), "eviction manager: pod is evicted successfully");
                    return;
                }
                _ => {
                    tracing::warn!(pod = %pod_key(&a.pod), "eviction manager: pod failed to evict");
                    // Upstream counts a failed kill as this round's eviction too.
                    return;
                }
            }
        }
        tracing::warn!(%node, "eviction manager: unable to evict any pods from the node");
    }
}

// ------------------------------------------------------------- sim signals

/// Signals for `--runtime sim` from a JSON file read every round (format
/// in the module docs).
pub struct SimSignals {
    /// The file (`--sim-signals`).
    pub path: PathBuf,
}

fn quantity_of(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => Quantity::parse(s).ok().map(|q| q.value()),
        _ => None,
    }
}

fn node_capacity(desc: &NodeDesc, s: Signal) -> Option<i64> {
    let key = match s.resource() {
        Resource::Memory => "memory",
        Resource::EphemeralStorage => "ephemeral-storage",
        _ => return None,
    };
    desc.capacity.get(key).map(|q| q.value())
}

/// Parses a sim signals document for `nodes` (errors name the field).
pub fn parse_sim_signals(doc: &Value, nodes: &[Arc<NodeDesc>]) -> Result<Snapshot, String> {
    let obj = doc.as_object().ok_or("not a JSON object")?;
    let signals = |v: Option<&Value>, what: &str| -> Result<Vec<(Signal, Value)>, String> {
        let Some(v) = v else { return Ok(Vec::new()) };
        let m = v.as_object().ok_or(format!("{what}: not an object"))?;
        m.iter()
            .map(|(k, v)| {
                Signal::parse(k)
                    .map(|s| (s, v.clone()))
                    .ok_or(format!("{what}: unknown signal {k:?}"))
            })
            .collect()
    };
    let common = signals(obj.get("signals"), "signals")?;
    let per_node: HashMap<String, Vec<(Signal, Value)>> = match obj.get("nodes") {
        None => HashMap::new(),
        Some(v) => v
            .as_object()
            .ok_or("nodes: not an object")?
            .iter()
            .map(|(n, v)| Ok((n.clone(), signals(Some(v), &format!("nodes.{n}"))?)))
            .collect::<Result<_, String>>()?,
    };
    let mut snap = Snapshot::default();
    for desc in nodes {
        let mut obs = Observations::new();
        let own = per_node.get(&desc.name).map(Vec::as_slice).unwrap_or(&[]);
        for (s, v) in common.iter().chain(own) {
            let (available, capacity) = match v {
                Value::Object(o) => (
                    o.get("available").and_then(quantity_of),
                    o.get("capacity").and_then(quantity_of),
                ),
                v => (quantity_of(v), None),
            };
            let available =
                available.ok_or(format!("{}: invalid available amount {v}", s.name()))?;
            let capacity = capacity
                .or_else(|| node_capacity(desc, *s))
                .unwrap_or(available);
            obs.insert(
                *s,
                Observation {
                    available,
                    capacity,
                },
            );
        }
        snap.nodes.insert(desc.name.clone(), obs);
    }
    if let Some(pods) = obj.get("pods") {
        for (key, v) in pods.as_object().ok_or("pods: not an object")? {
            let o = v.as_object().ok_or(format!("pods.{key}: not an object"))?;
            let amount = |k: &str| -> Result<Option<i64>, String> {
                o.get(k)
                    .map(|v| quantity_of(v).ok_or(format!("pods.{key}.{k}: invalid amount {v}")))
                    .transpose()
            };
            // Attributed to the first container; the container name is
            // filled in when the pod is known (see `attribute`).
            let mut u = PodUsage::default();
            if let Some(m) = amount("memory")? {
                u.memory.insert(String::new(), m);
            }
            if let Some(d) = amount("ephemeral-storage")? {
                u.ephemeral_storage.insert(String::new(), d);
            }
            u.pids = amount("pids")?;
            snap.pods.insert(key.clone(), u);
        }
    }
    Ok(snap)
}

/// Gives the pod-level sim usage (key `""`) to the pod's first container.
fn attribute(snap: &mut Snapshot, active: &ActivePods, nodes: &[Arc<NodeDesc>]) {
    for desc in nodes {
        for a in active.on_node(&desc.name) {
            let Some(u) = snap.pods.get_mut(&pod_key(&a.pod)) else {
                continue;
            };
            let Some(first) = a.pod.spec.as_ref().and_then(|s| s.containers.first()) else {
                continue;
            };
            for m in [&mut u.memory, &mut u.ephemeral_storage] {
                if let Some(v) = m.remove("") {
                    m.insert(first.name.clone(), v);
                }
            }
        }
    }
}

/// [`SimSignals`] with the active pods (to name containers in messages).
pub struct SimSource {
    /// The file.
    pub signals: SimSignals,
    /// The active pods.
    pub active: Arc<ActivePods>,
}

impl SignalSource for SimSource {
    fn observe<'a>(&'a self, nodes: &'a [Arc<NodeDesc>]) -> BoxFuture<'a, Snapshot> {
        Box::pin(async move {
            let path = &self.signals.path;
            let text = match tokio::fs::read_to_string(path).await {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Snapshot::default(),
                Err(e) => {
                    tracing::warn!(file = %path.display(), error = %e, "reading sim signals");
                    return Snapshot::default();
                }
            };
            let parsed = serde_json::from_str::<Value>(&text)
                .map_err(|e| e.to_string())
                .and_then(|doc| parse_sim_signals(&doc, nodes));
            match parsed {
                Ok(mut snap) => {
                    attribute(&mut snap, &self.active, nodes);
                    snap
                }
                Err(e) => {
                    tracing::warn!(file = %path.display(), error = %e, "invalid sim signals; ignored");
                    Snapshot::default()
                }
            }
        })
    }
}

// --------------------------------------------------------- machine signals

/// `statvfs` of `path`: (available bytes, capacity bytes, free inodes, inodes).
pub fn statvfs(path: &Path) -> Option<(i64, i64, i64, i64)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path and `s` a writable statvfs.
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut s) };
    if rc != 0 {
        return None;
    }
    let frsize = s.f_frsize as i64;
    Some((
        s.f_bavail as i64 * frsize,
        s.f_blocks as i64 * frsize,
        s.f_favail as i64,
        s.f_files as i64,
    ))
}

/// `pid.available`: min(pid_max, threads-max) − tasks (the total of
/// `/proc/loadavg`), capacity min(pid_max, threads-max).
pub fn pid_observation() -> Option<Observation> {
    let num = |p: &str| -> Option<i64> { std::fs::read_to_string(p).ok()?.trim().parse().ok() };
    let max = match (
        num("/proc/sys/kernel/pid_max"),
        num("/proc/sys/kernel/threads-max"),
    ) {
        (Some(a), Some(b)) => a.min(b),
        (a, b) => a.or(b)?,
    };
    let loadavg = std::fs::read_to_string("/proc/loadavg").ok()?;
    let tasks: i64 = loadavg
        .split_whitespace()
        .nth(3)?
        .split('/')
        .nth(1)?
        .parse()
        .ok()?;
    Some(Observation {
        available: max - tasks,
        capacity: max,
    })
}

fn fs_observations(obs: &mut Observations, path: &Path, bytes: Signal, inodes: Signal) {
    if let Some((avail, cap, ifree, itotal)) = statvfs(path) {
        obs.insert(
            bytes,
            Observation {
                available: avail,
                capacity: cap,
            },
        );
        if itotal > 0 {
            obs.insert(
                inodes,
                Observation {
                    available: ifree,
                    capacity: itotal,
                },
            );
        }
    }
}

/// The machine's signals (`--runtime cri`): one real node.
pub struct MachineSignals {
    /// `--root-dir` (nodefs).
    pub root_dir: PathBuf,
    /// The CRI runtime (image filesystem, container stats).
    pub cri: Option<rkube_cri::CriClient>,
}

impl MachineSignals {
    async fn image_fs(&self) -> Option<PathBuf> {
        let cri = self.cri.as_ref()?;
        let r = cri
            .image_service()
            .image_fs_info(rkube_cri::v1::ImageFsInfoRequest {})
            .await
            .ok()?
            .into_inner();
        r.image_filesystems
            .into_iter()
            .find_map(|f| f.fs_id.map(|id| PathBuf::from(id.mountpoint)))
            .filter(|p| !p.as_os_str().is_empty())
    }

    async fn pod_usage(&self) -> HashMap<String, PodUsage> {
        let mut out: HashMap<String, PodUsage> = HashMap::new();
        let Some(cri) = self.cri.as_ref() else {
            return out;
        };
        let Ok(r) = cri
            .runtime_service()
            .list_container_stats(rkube_cri::v1::ListContainerStatsRequest { filter: None })
            .await
        else {
            return out;
        };
        for s in r.into_inner().stats {
            let Some(attrs) = s.attributes else { continue };
            let l = &attrs.labels;
            let (Some(ns), Some(name), Some(container)) = (
                l.get("io.kubernetes.pod.namespace"),
                l.get("io.kubernetes.pod.name"),
                l.get("io.kubernetes.container.name"),
            ) else {
                continue;
            };
            let u = out.entry(format!("{ns}/{name}")).or_default();
            if let Some(ws) = s.memory.and_then(|m| m.working_set_bytes) {
                u.memory.insert(container.clone(), ws.value as i64);
            }
            if let Some(used) = s.writable_layer.and_then(|w| w.used_bytes) {
                u.ephemeral_storage
                    .insert(container.clone(), used.value as i64);
            }
        }
        out
    }
}

impl SignalSource for MachineSignals {
    fn observe<'a>(&'a self, nodes: &'a [Arc<NodeDesc>]) -> BoxFuture<'a, Snapshot> {
        Box::pin(async move {
            let mut obs = Observations::new();
            let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
            if let (Some(avail), Some(total)) = (
                crate::machine::meminfo_bytes(&meminfo, "MemAvailable"),
                crate::machine::meminfo_bytes(&meminfo, "MemTotal"),
            ) {
                obs.insert(
                    Signal::MemoryAvailable,
                    Observation {
                        available: avail,
                        capacity: total,
                    },
                );
            }
            fs_observations(
                &mut obs,
                &self.root_dir,
                Signal::NodeFsAvailable,
                Signal::NodeFsInodesFree,
            );
            let image_fs = self.image_fs().await;
            match image_fs {
                Some(p) => fs_observations(
                    &mut obs,
                    &p,
                    Signal::ImageFsAvailable,
                    Signal::ImageFsInodesFree,
                ),
                None => {
                    for (from, to) in [
                        (Signal::NodeFsAvailable, Signal::ImageFsAvailable),
                        (Signal::NodeFsInodesFree, Signal::ImageFsInodesFree),
                    ] {
                        if let Some(o) = obs.get(&from).copied() {
                            obs.insert(to, o);
                        }
                    }
                }
            }
            if let Some(p) = pid_observation() {
                obs.insert(Signal::PidAvailable, p);
            }
            Snapshot {
                nodes: nodes
                    .iter()
                    .map(|d| (d.name.clone(), obs.clone()))
                    .collect(),
                pods: self.pod_usage().await,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn th(map: &[(&str, &str)]) -> Vec<HardThreshold> {
        hard_thresholds(
            &map.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    fn obs(list: &[(Signal, i64, i64)]) -> Observations {
        list.iter()
            .map(|(s, a, c)| {
                (
                    *s,
                    Observation {
                        available: *a,
                        capacity: *c,
                    },
                )
            })
            .collect()
    }

    const MI: i64 = 1 << 20;
    const GI: i64 = 1 << 30;

    #[test]
    fn thresholds_parse_and_compare() {
        let t = th(&[
            ("memory.available", "100Mi"),
            ("nodefs.available", "10%"),
            ("pid.available", "1000"),
            ("imagefs.available", "15%"),
        ]);
        assert_eq!(t.len(), 4);
        // Defaults parse too.
        assert_eq!(
            hard_thresholds(&crate::config::default_eviction_hard()).len(),
            5
        );
        // Nothing observed: nothing met.
        assert!(thresholds_met(&t, &Observations::new()).is_empty());
        // Exactly at the threshold is not met (quantity > available).
        let o = obs(&[(Signal::MemoryAvailable, 100 * MI, 8 * GI)]);
        assert!(thresholds_met(&t, &o).is_empty());
        let o = obs(&[
            (Signal::MemoryAvailable, 100 * MI - 1, 8 * GI),
            // 10% of 100Gi = 10Gi > 9Gi: met.
            (Signal::NodeFsAvailable, 9 * GI, 100 * GI),
            // 15% of 100Gi = 15Gi ≤ 20Gi: not met.
            (Signal::ImageFsAvailable, 20 * GI, 100 * GI),
            (Signal::PidAvailable, 999, 4_194_304),
        ]);
        let met = thresholds_met(&t, &o);
        let signals: Vec<Signal> = met.iter().map(|m| m.signal).collect();
        assert_eq!(
            signals,
            [
                Signal::MemoryAvailable,
                Signal::NodeFsAvailable,
                Signal::PidAvailable
            ]
        );
        let nodefs = met
            .iter()
            .find(|m| m.signal == Signal::NodeFsAvailable)
            .unwrap();
        assert_eq!(nodefs.quantity, 10 * GI);
        // Memory is reclaimed first, whatever the order.
        assert_eq!(to_reclaim(&met).unwrap().signal, Signal::MemoryAvailable);
        assert_eq!(
            to_reclaim(&met[1..]).unwrap().signal,
            Signal::NodeFsAvailable
        );
        assert_eq!(to_reclaim(&[]), None);
        assert_eq!(Signal::PidAvailable.condition(), Condition::Pid);
        assert_eq!(Signal::ImageFsInodesFree.condition(), Condition::Disk);
        for s in Signal::ALL {
            assert_eq!(Signal::parse(s.name()), Some(s));
            assert!(crate::config::EVICTION_SIGNALS.contains(&s.name()));
        }
    }

    #[test]
    fn condition_transitions_honour_the_period() {
        let t = th(&[("memory.available", "100Mi")]);
        let period = Duration::from_secs(30);
        let t0 = Instant::now();
        let mut p = NodePressure::default();
        let low = obs(&[(Signal::MemoryAvailable, 50 * MI, GI)]);
        let high = obs(&[(Signal::MemoryAvailable, 500 * MI, GI)]);
        assert_eq!(
            p.update(&thresholds_met(&t, &high), period, t0),
            Pressure::default()
        );
        let on = p.update(
            &thresholds_met(&t, &low),
            period,
            t0 + Duration::from_secs(10),
        );
        assert!(on.memory && !on.disk && !on.pid);
        // Good again, but within the period: still True.
        let s = |secs| t0 + Duration::from_secs(secs);
        assert!(p.update(&thresholds_met(&t, &high), period, s(20)).memory);
        assert!(p.update(&thresholds_met(&t, &high), period, s(39)).memory);
        // The period since the last time it was met has passed: False.
        assert!(!p.update(&thresholds_met(&t, &high), period, s(40)).memory);
        // Met again: True at once, and the period restarts.
        assert!(p.update(&thresholds_met(&t, &low), period, s(50)).memory);
        assert!(p.update(&thresholds_met(&t, &high), period, s(79)).memory);
        assert!(!p.update(&thresholds_met(&t, &high), period, s(80)).memory);
        // Disk and PID signals drive their own conditions.
        let t = th(&[("nodefs.available", "1Gi"), ("pid.available", "100")]);
        let o = obs(&[
            (Signal::NodeFsAvailable, MI, 10 * GI),
            (Signal::PidAvailable, 50, 1000),
        ]);
        let d = NodePressure::default().update(&thresholds_met(&t, &o), period, t0);
        assert_eq!(
            d,
            Pressure {
                memory: false,
                disk: true,
                pid: true
            }
        );
    }

    fn c(index: usize, priority: i32, request: i64, usage: Option<i64>) -> Candidate {
        Candidate {
            index,
            priority,
            request,
            usage,
        }
    }

    fn order(r: Resource, mut cands: Vec<Candidate>) -> Vec<usize> {
        rank(r, &mut cands);
        cands.iter().map(|c| c.index).collect()
    }

    #[test]
    fn ranking_as_upstream() {
        // Upstream's TestOrderedByExceedsRequestMemory / ...ByPriority
        // shapes: best-effort (request 0) using anything exceeds its
        // request; burstable under its request does not.
        let best_effort = c(0, 0, 0, Some(10 * MI));
        let burstable_under = c(1, 0, 100 * MI, Some(50 * MI));
        let burstable_over = c(2, 0, 100 * MI, Some(150 * MI));
        assert_eq!(
            order(
                Resource::Memory,
                vec![
                    burstable_under.clone(),
                    burstable_over.clone(),
                    best_effort.clone()
                ]
            ),
            // Both exceeding first; among them the larger usage above
            // request (50Mi over vs 10Mi over).
            [2, 0, 1]
        );
        // Exceeding requests beats priority; then lower priority first.
        assert_eq!(
            order(
                Resource::Memory,
                vec![
                    c(0, 100, 0, Some(MI)),
                    c(1, -10, 100 * MI, Some(MI)),
                    c(2, 1000, 0, Some(MI)),
                    c(3, 5, 100 * MI, Some(MI)),
                ]
            ),
            [0, 2, 1, 3]
        );
        // No stats: first.
        assert_eq!(
            order(
                Resource::Memory,
                vec![c(0, 0, 0, Some(GI)), c(1, 1000, 0, None)]
            ),
            [1, 0]
        );
        // Same everything but usage: the largest above request first.
        assert_eq!(
            order(
                Resource::EphemeralStorage,
                vec![
                    c(0, 0, GI, Some(2 * GI)),
                    c(1, 0, 0, Some(3 * GI)),
                    c(2, 0, 0, Some(GI))
                ]
            ),
            [1, 0, 2]
        );
        // PIDs: priority, then the most processes.
        assert_eq!(
            order(
                Resource::Pids,
                vec![
                    c(0, 10, 0, Some(500)),
                    c(1, 0, 0, Some(5)),
                    c(2, 0, 0, Some(50))
                ]
            ),
            [2, 1, 0]
        );
    }

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn requests_critical_and_message() {
        let p = pod(json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"containers": [
                {"name": "app", "resources": {"requests": {"memory": "100Mi"}}},
                {"name": "side", "resources": {"requests": {"memory": "20Mi"}}}],
                "initContainers": [{"name": "init", "resources": {"requests": {"memory": "200Mi"}}}],
                "overhead": {"memory": "1Mi"}}
        }));
        assert_eq!(pod_request(&p, Resource::Memory), 201 * MI);
        assert_eq!(pod_request(&p, Resource::EphemeralStorage), 0);
        assert!(!is_critical(&p));
        assert!(is_critical(&pod(json!({
            "metadata": {"name": "c"}, "spec": {"containers": [], "priority": 2_000_001_000}}))));
        assert!(is_critical(&pod(json!({
            "metadata": {"name": "m", "annotations": {"kubernetes.io/config.mirror": "x"}},
            "spec": {"containers": []}}))));

        let met = Met {
            signal: Signal::MemoryAvailable,
            quantity: 100 * MI,
            available: 50 * MI,
        };
        let usage = PodUsage {
            memory: [("app".to_string(), 150 * MI), ("side".to_string(), 10 * MI)].into(),
            ..Default::default()
        };
        assert_eq!(
            message(&met, &p, Some(&usage)),
            "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. \
             Container app was using 150Mi, request is 100Mi, has larger consumption of memory. "
        );
        assert_eq!(
            message(&met, &p, None),
            "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. "
        );
        let be =
            pod(json!({"metadata": {"name": "be"}, "spec": {"containers": [{"name": "app"}]}}));
        let u = PodUsage {
            memory: [("app".to_string(), 20 * MI)].into(),
            ..Default::default()
        };
        assert!(message(&met, &be, Some(&u)).ends_with(
            "Container app was using 20Mi, request is 0, has larger consumption of memory. "
        ));
        assert_eq!(format_quantity(1500), "1500");
        assert_eq!(format_quantity(1_500_000), "1500k");
        assert_eq!(format_quantity(3 * GI), "3Gi");
        assert_eq!(format_quantity(999), "999");
    }

    fn desc(name: &str) -> Arc<NodeDesc> {
        Arc::new(NodeDesc {
            name: name.into(),
            labels: Default::default(),
            taints: Vec::new(),
            capacity: [("memory".to_string(), Quantity::from_units(GI))].into(),
            allocatable: Default::default(),
            ip: "10.0.0.1".into(),
            pod_cidr: String::new(),
            provider_id: String::new(),
            node_info: Default::default(),
            port: 10250,
        })
    }

    #[test]
    fn sim_signals_file() {
        let nodes = [desc("a"), desc("b")];
        let doc = json!({
            "signals": {"memory.available": "50Mi",
                        "nodefs.available": {"available": "1Gi", "capacity": "100Gi"}},
            "nodes": {"b": {"memory.available": "2Gi", "pid.available": 10}},
            "pods": {"default/web": {"memory": "300Mi", "pids": 12}}
        });
        let s = parse_sim_signals(&doc, &nodes).unwrap();
        let a = &s.nodes["a"];
        assert_eq!(
            a[&Signal::MemoryAvailable],
            Observation {
                available: 50 * MI,
                capacity: GI
            }
        );
        assert_eq!(a[&Signal::NodeFsAvailable].capacity, 100 * GI);
        assert!(!a.contains_key(&Signal::PidAvailable));
        let b = &s.nodes["b"];
        assert_eq!(b[&Signal::MemoryAvailable].available, 2 * GI);
        assert_eq!(
            b[&Signal::PidAvailable],
            Observation {
                available: 10,
                capacity: 10
            }
        );
        let web = &s.pods["default/web"];
        assert_eq!(web.total(Resource::Memory), Some(300 * MI));
        assert_eq!(web.total(Resource::Pids), Some(12));
        for bad in [
            json!([]),
            json!({"signals": {"memory.free": "1Gi"}}),
            json!({"signals": {"memory.available": "lots"}}),
            json!({"pods": {"default/x": {"memory": "?"}}}),
        ] {
            assert!(parse_sim_signals(&bad, &nodes).is_err(), "{bad}");
        }
    }

    #[test]
    fn machine_signals_on_this_machine() {
        let (avail, cap, _, _) = statvfs(Path::new("/")).unwrap();
        assert!(cap > 0 && avail <= cap);
        let p = pid_observation().unwrap();
        assert!(p.available > 0 && p.available < p.capacity);
        let board = PressureBoard::default();
        board.set(
            "n",
            Pressure {
                memory: true,
                ..Default::default()
            },
        );
        assert!(board.get("n").memory);
        board.set("n", Pressure::default());
        assert_eq!(board.get("n"), Pressure::default());
    }
}
