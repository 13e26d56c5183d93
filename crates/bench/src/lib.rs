//! Benchmarks side by side with upstream kube-scheduler.
//!
//! * [`workload`]: named workloads modelled on upstream's
//!   `test/integration/scheduler_perf` (same node and pod templates), written
//!   as one cluster file (a JSON `List`) that both `rkube` and the oracle
//!   (`hack/k8s/cmd/oracle`, upstream's real scheduler) read.
//! * [`run`]: rkube's scheduling loop, timed (the same loop as
//!   `rkube_sim::simulate`, with a clock around each attempt).
//!
//! `hack/bench inprocess --workload W` drives both and compares them.

pub mod compare;
pub mod run;
pub mod workload;
