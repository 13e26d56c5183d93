//! Benchmarks side by side with upstream kube-scheduler.
//!
//! * [`workload`]: named workloads modelled on upstream's
//!   `test/integration/scheduler_perf` (same node and pod templates), written
//!   as one cluster file (a JSON `List`) that both `rkube` and the oracle
//!   (`hack/k8s/cmd/oracle`, upstream's real scheduler) read.
//! * [`run`]: rkube's scheduling loop, timed (the same loop as
//!   `rkube_sim::simulate`, with a clock around each attempt).
//!
//! * [`live`]: upstream kube-scheduler and `rkube scheduler` against the
//!   same genuine API server; [`ceiling`]: the same bindings with no
//!   scheduler, the most that API server takes.
//!
//! * [`kubelet`]: rkube's kubelet beside upstream's on one node (`hack/bench kubelet`).
//!
//! `hack/bench inprocess --workload W` drives both and compares them;
//! `hack/bench live --workload W` does the same against a real API server.

pub mod ceiling;
pub mod compare;
pub mod cpu;
pub mod kubelet;
pub mod live;
pub mod run;
pub mod workload;
