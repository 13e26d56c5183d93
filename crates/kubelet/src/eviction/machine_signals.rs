//! Signals of the real machine for `--runtime cri` ([`MachineSignals`]):
//! `memory.available` from `/proc/meminfo`, `nodefs.*` and `imagefs.*`
//! from [`statvfs()`], `pid.available` from `/proc`
//! ([`pid_observation`]), and pod usage from CRI `ListContainerStats`.
//!
//! Upstream: `pkg/kubelet/eviction/helpers.go` (`makeSignalObservations`)
//! over the summary provider (`pkg/kubelet/server/stats`), and
//! `pkg/kubelet/stats/pidlimit` for `pid.available`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::signals::{Observation, Observations, PodUsage, Signal, SignalSource, Snapshot};
use super::statvfs::statvfs;
use crate::node::NodeDesc;
use crate::BoxFuture;

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
                crate::node::machine::meminfo_bytes(&meminfo, "MemAvailable"),
                crate::node::machine::meminfo_bytes(&meminfo, "MemTotal"),
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
    use crate::node::pressure::{Pressure, PressureBoard};

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
