//! `rkube-bench kubelet …`: the pieces `hack/bench kubelet` (the script
//! `hack/bench-kubelet`) drives to measure rkube's kubelet beside
//! upstream's on the same node and containerd.
//!
//! * [`pods`]: pods bound to the node, created at once and watched until
//!   Running, deleted at once and watched until gone, and churn waves;
//! * [`floor`]: the same pods started straight through CRI (the runtime's
//!   limit);
//! * [`stages`]: where rkube's kubelet spent each pod's startup, from
//!   its timelines;
//! * [`report`]: the table and the `SUMMARY kubelet` lines, from the
//!   measurements as JSON lines;
//! * [`stats`]: percentiles, medians and the alternation of the kubelets.

pub mod cli;
pub mod floor;
pub mod pods;
pub mod report;
pub mod stages;
pub mod stats;
