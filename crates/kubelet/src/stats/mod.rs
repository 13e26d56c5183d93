//! The node's figures, as upstream's stats manager (`pkg/kubelet/stats`,
//! `pkg/kubelet/server/stats`, cAdvisor): one [`StatsProvider`] reads the
//! runtime, the cgroups and `/proc` into a [`Snapshot`]; the Summary API
//! (`/stats/summary`), `/metrics/resource`, `/metrics/cadvisor` and the
//! eviction manager's signals are made from it, so what the node evicts
//! on is what it reports.
//!
//! Layout:
//! * `cgroup`: cgroup v1 and v2 files;
//! * `procfs`: `/proc/<pid>/net/dev`, boot time, swap, `du`;
//! * `statvfs`: the one `unsafe` call ([`statvfs()`]);
//! * `summary`: the Summary API's types (`stats/v1alpha1`);
//! * `snapshot`: one collection, and the Summary made from it;
//! * `provider`: [`StatsProvider`], the reads;
//! * `prom`: Prometheus text as Go's client writes it;
//! * `resource_metrics`: `/metrics/resource`;
//! * `cadvisor`: `/metrics/cadvisor`.

pub mod cadvisor;
pub mod cgroup;
pub mod procfs;
pub mod prom;
mod provider;
pub mod resource_metrics;
mod snapshot;
// The one audited libc::statvfs call.
#[allow(unsafe_code)]
pub(crate) mod statvfs;
pub mod summary;

pub use provider::{runtime_pods, StatsProvider, RATE_WINDOW, REUSE, VOLUME_STATS_PERIOD};
pub use snapshot::{
    CgroupSample, ContainerSample, ImageFs, PodSample, RuntimeFigures, Snapshot, VolumeSample,
};
pub use statvfs::{statvfs, FsInfo};
pub use summary::Summary;
