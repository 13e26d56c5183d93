//! Node-pressure eviction with hard and soft thresholds (`evictionHard`,
//! `evictionSoft`), as
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
//!   `immediateEvictionGracePeriodSeconds`, for hard thresholds; for soft
//!   ones, met for their `evictionSoftGracePeriod`, the pod's
//!   `terminationGracePeriodSeconds` up to `evictionMaxPodGracePeriod`;
//!   a threshold acted on stays met until `evictionMinimumReclaim` more
//!   than it is free) and reports
//!   it `Failed`, reason `Evicted`, with upstream's message ([`message`])
//!   and a `DisruptionTarget` condition (`TerminationByKubelet`).
//!
//! Signals:
//! * `--runtime cri` ([`MachineSignals`]): from the node's Summary
//!   ([`crate::stats`], the figures `/stats/summary` reports):
//!   `memory.available` = MemTotal − the root cgroup's working set;
//!   `nodefs.*` the root directory's filesystem; `imagefs.*` the
//!   runtime's image filesystem (else nodefs); `pid.available` =
//!   min(pid_max, threads-max) − tasks running; pod usage from the
//!   containers' working sets, writable layers and logs.
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
//! Before the thresholds, every round, a CRI node's pods are held to their
//! own local storage limits (`emptyDir` `sizeLimit`, `ephemeral-storage`
//! limits: [`local_storage`]). Each eviction is a Warning `Evicted` Event
//! on the pod with its message. New pods are refused under pressure by
//! the pod admission ([`crate::pods::admission::under_pressure`]).
//!
//! Layout (as upstream's `pkg/kubelet/eviction`; everything is re-exported
//! here):
//! * `signals`: the signals, observations, pod usage, [`SignalSource`];
//! * `thresholds`: `evictionHard`, thresholds met, pressure conditions;
//! * `ranking`: pod requests, critical pods, ranking, the `Evicted` message;
//! * [`local_storage`]: a pod over its own local storage limits;
//! * `manager`: the [`EvictionManager`] loop;
//! * `sim_signals`: [`SimSignals`] (`--sim-signals`);
//! * `machine_signals`: [`MachineSignals`] (`--runtime cri`).

pub mod local_storage;
mod machine_signals;
mod manager;
mod ranking;
mod signals;
mod sim_signals;
mod thresholds;

pub use machine_signals::{observations, pod_usage, MachineSignals};
pub use manager::{
    reclaims_node_level, soft_grace, EvictionManager, Reclaim, IMMEDIATE_GRACE, MONITORING_PERIOD,
};
pub use ranking::{format_quantity, message, pod_request, rank, Candidate};
pub use signals::{
    Condition, LocalStorage, Observation, Observations, PodUsage, Resource, Signal, SignalSource,
    Snapshot,
};
pub use sim_signals::{parse_sim_signals, SimSignals, SimSource};
pub use thresholds::{
    all_thresholds, hard_thresholds, thresholds_met, thresholds_met_with, to_reclaim,
    EvictionThreshold, Met, NodePressure, Round, ThresholdState,
};
