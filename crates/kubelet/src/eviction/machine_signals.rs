//! Signals of the real machine for `--runtime cri` ([`MachineSignals`]),
//! made from the node's Summary ([`crate::stats`]) as upstream's
//! `makeSignalObservations` (`pkg/kubelet/eviction/helpers.go`) makes
//! them, so the node evicts on what it reports:
//!
//! * `memory.available`: the node's `availableBytes` (MemTotal − working
//!   set of the root cgroup), capacity available + working set;
//! * `allocatableMemory.available`: the same of the `pods` system
//!   container (the `kubepods` cgroup, whose limit is the node's
//!   allocatable memory);
//! * `nodefs.*`: the node's `fs`; `imagefs.*`: the runtime's `imageFs`
//!   (nodefs when the runtime does not name one);
//! * `pid.available`: `rlimit.maxpid − rlimit.curproc`;
//! * pod usage: containers' working sets, writable layers + logs, and
//!   the pod's process count.

use std::sync::Arc;

use super::signals::{
    LocalStorage, Observation, Observations, PodUsage, Signal, SignalSource, Snapshot,
};
use crate::node::NodeDesc;
use crate::stats::summary::{FsStats, MemoryStats, Summary};
use crate::stats::StatsProvider;
use crate::BoxFuture;

fn fs_observations(obs: &mut Observations, fs: &FsStats, bytes: Signal, inodes: Signal) {
    if let (Some(a), Some(c)) = (fs.available_bytes, fs.capacity_bytes) {
        obs.insert(
            bytes,
            Observation {
                available: a as i64,
                capacity: c as i64,
            },
        );
    }
    if let (Some(f), Some(t)) = (fs.inodes_free, fs.inodes) {
        if t > 0 {
            obs.insert(
                inodes,
                Observation {
                    available: f as i64,
                    capacity: t as i64,
                },
            );
        }
    }
}

/// Available memory (capacity: available + working set), when both are
/// known.
fn memory_observation(m: Option<&MemoryStats>) -> Option<Observation> {
    let (a, ws) = m.and_then(|m| Some((m.available_bytes?, m.working_set_bytes?)))?;
    Some(Observation {
        available: i64::try_from(a).unwrap_or(i64::MAX),
        capacity: i64::try_from(a.saturating_add(ws)).unwrap_or(i64::MAX),
    })
}

/// The observations a summary gives.
pub fn observations(s: &Summary) -> Observations {
    let mut obs = Observations::new();
    let n = &s.node;
    if let Some(o) = memory_observation(n.memory.as_ref()) {
        obs.insert(Signal::MemoryAvailable, o);
    }
    // allocatableMemory.available: the pods' cgroup (`kubepods`), as
    // upstream reads it from the `pods` system container.
    let pods = n.system_containers.iter().find(|c| c.name == "pods");
    if let Some(o) = memory_observation(pods.and_then(|c| c.memory.as_ref())) {
        obs.insert(Signal::AllocatableMemoryAvailable, o);
    }
    if let Some(fs) = &n.fs {
        fs_observations(
            &mut obs,
            fs,
            Signal::NodeFsAvailable,
            Signal::NodeFsInodesFree,
        );
    }
    match n.runtime.as_ref().and_then(|r| r.image_fs.as_ref()) {
        Some(fs) => fs_observations(
            &mut obs,
            fs,
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
    if let Some((max, cur)) = n
        .rlimit
        .as_ref()
        .and_then(|r| Some((r.maxpid?, r.curproc?)))
    {
        obs.insert(
            Signal::PidAvailable,
            Observation {
                available: max - cur,
                capacity: max,
            },
        );
    }
    obs
}

/// Pod usage by `namespace/name`.
pub fn pod_usage(s: &Summary) -> std::collections::HashMap<String, PodUsage> {
    s.pods
        .iter()
        .map(|p| {
            let mut u = PodUsage::default();
            for c in &p.containers {
                if let Some(ws) = c.memory.as_ref().and_then(|m| m.working_set_bytes) {
                    u.memory.insert(c.name.clone(), ws as i64);
                }
                let disk = [&c.rootfs, &c.logs]
                    .into_iter()
                    .filter_map(|f| f.as_ref().and_then(|f| f.used_bytes))
                    .sum::<u64>();
                if c.rootfs.is_some() || c.logs.is_some() {
                    u.ephemeral_storage.insert(c.name.clone(), disk as i64);
                }
            }
            // the rest of the pod's ephemeral storage: its local volumes
            // (emptyDir, …), its other logs and etc-hosts, as upstream
            // ranks pods on nodefs
            let containers: u64 = u.ephemeral_storage.values().map(|v| *v as u64).sum();
            if let Some(total) = p.ephemeral_storage.as_ref().and_then(|e| e.used_bytes) {
                let rest = total.saturating_sub(containers);
                if rest > 0 {
                    u.ephemeral_storage
                        .insert(String::new(), i64::try_from(rest).unwrap_or(i64::MAX));
                }
            }
            let used = |f: &Option<FsStats>| f.as_ref().and_then(|f| f.used_bytes).unwrap_or(0);
            u.local = Some(LocalStorage {
                volumes: p
                    .volume_stats
                    .iter()
                    .filter_map(|v| Some((v.name.clone(), v.fs.used_bytes?)))
                    .collect(),
                total: p.ephemeral_storage.as_ref().and_then(|e| e.used_bytes),
                containers: p
                    .containers
                    .iter()
                    .map(|c| (c.name.clone(), (used(&c.logs), used(&c.rootfs))))
                    .collect(),
            });
            u.pids = p
                .process_stats
                .as_ref()
                .and_then(|ps| ps.process_count)
                .map(|n| n as i64);
            (format!("{}/{}", p.pod_ref.namespace, p.pod_ref.name), u)
        })
        .collect()
}

/// The machine's signals (`--runtime cri`): one real node.
pub struct MachineSignals {
    /// The node's stats.
    pub stats: Arc<StatsProvider>,
}

impl SignalSource for MachineSignals {
    fn observe<'a>(&'a self, nodes: &'a [Arc<NodeDesc>]) -> BoxFuture<'a, Snapshot> {
        Box::pin(async move {
            let summary = match self.stats.summary_for_eviction().await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "eviction: the node's stats could not be read");
                    return Snapshot::default();
                }
            };
            let obs = observations(&summary);
            Snapshot {
                nodes: nodes
                    .iter()
                    .map(|d| (d.name.clone(), obs.clone()))
                    .collect(),
                pods: pod_usage(&summary),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::pressure::{Pressure, PressureBoard};
    use crate::stats::summary::{
        ContainerStats, MemoryStats, NodeStats, PodReference, PodStats, RlimitStats,
    };

    #[test]
    fn signals_from_a_summary() {
        let s = Summary {
            node: NodeStats {
                memory: Some(MemoryStats {
                    available_bytes: Some(300),
                    working_set_bytes: Some(700),
                    ..Default::default()
                }),
                fs: Some(FsStats {
                    available_bytes: Some(10),
                    capacity_bytes: Some(100),
                    inodes_free: Some(5),
                    inodes: Some(50),
                    ..Default::default()
                }),
                rlimit: Some(RlimitStats {
                    maxpid: Some(1000),
                    curproc: Some(250),
                    ..Default::default()
                }),
                ..Default::default()
            },
            pods: vec![PodStats {
                pod_ref: PodReference {
                    name: "p".into(),
                    namespace: "ns".into(),
                    uid: "u".into(),
                },
                containers: vec![ContainerStats {
                    name: "c".into(),
                    memory: Some(MemoryStats {
                        working_set_bytes: Some(42),
                        ..Default::default()
                    }),
                    rootfs: Some(FsStats {
                        used_bytes: Some(4096),
                        ..Default::default()
                    }),
                    logs: Some(FsStats {
                        used_bytes: Some(100),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ephemeral_storage: Some(FsStats {
                    used_bytes: Some(4196 + 10_000),
                    ..Default::default()
                }),
                ..Default::default()
            }],
        };
        let o = observations(&s);
        let get = |sig| o.get(&sig).map(|o| (o.available, o.capacity));
        assert_eq!(get(Signal::MemoryAvailable), Some((300, 1000)));
        assert_eq!(
            get(Signal::AllocatableMemoryAvailable),
            None,
            "no pods cgroup"
        );
        let mut with_pods = s.clone();
        with_pods.node.system_containers = vec![ContainerStats {
            name: "pods".into(),
            memory: Some(MemoryStats {
                available_bytes: Some(200),
                working_set_bytes: Some(600),
                ..Default::default()
            }),
            ..Default::default()
        }];
        let o2 = observations(&with_pods);
        assert_eq!(
            o2.get(&Signal::AllocatableMemoryAvailable)
                .map(|o| (o.available, o.capacity)),
            Some((200, 800))
        );
        assert_eq!(get(Signal::NodeFsAvailable), Some((10, 100)));
        assert_eq!(
            get(Signal::ImageFsAvailable),
            Some((10, 100)),
            "nodefs stands in"
        );
        assert_eq!(get(Signal::NodeFsInodesFree), Some((5, 50)));
        assert_eq!(get(Signal::PidAvailable), Some((750, 1000)));
        let u = &pod_usage(&s)["ns/p"];
        assert_eq!(u.memory["c"], 42);
        assert_eq!(u.ephemeral_storage["c"], 4196);
        // an emptyDir's 10,000 bytes count for the pod
        assert_eq!(u.ephemeral_storage[""], 10_000);
        assert_eq!(u.pids, None);
        let board = PressureBoard::default();
        board.set(
            "n",
            Pressure {
                memory: true,
                ..Default::default()
            },
        );
        assert!(board.get("n").memory);
    }
}
