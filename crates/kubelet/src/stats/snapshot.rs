//! One collection of everything the node's figures are made of
//! ([`Snapshot`]), read by [`super::StatsProvider::collect`], and turned
//! into the Summary ([`Snapshot::summary`]) and cAdvisor's metrics
//! ([`super::cadvisor`]) by pure functions.

use super::cgroup::CgroupStats;
use super::procfs::{DiskUsage, NetDev};
use super::statvfs::FsInfo;
use super::summary::{
    ContainerStats, CpuStats, FsStats, InterfaceStats, MemoryStats, NetworkStats, NodeStats,
    PodReference, PodStats, ProcessStats, RlimitStats, RuntimeStats, Summary, SwapStats, Time,
    VolumeStats,
};

/// A cgroup read, with its CPU rate since the previous read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CgroupSample {
    /// The cgroup's name (`/kubepods/burstable/pod…`).
    pub name: String,
    /// What was read.
    pub stats: CgroupStats,
    /// Nanocores since the previous read of this cgroup.
    pub rate: Option<u64>,
}

/// What the runtime reports of a container (CRI `ContainerStats`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeFigures {
    /// When CPU was read, Unix ns.
    pub cpu_time: i64,
    /// Cumulative CPU, core-ns.
    pub cpu_usage: Option<u64>,
    /// Nanocores (the runtime's, or the provider's from two reads).
    pub cpu_rate: Option<u64>,
    /// When memory was read, Unix ns.
    pub memory_time: i64,
    /// Working set.
    pub working_set: Option<u64>,
    /// Available.
    pub available: Option<u64>,
    /// Usage.
    pub usage: Option<u64>,
    /// RSS.
    pub rss: Option<u64>,
    /// Page faults.
    pub page_faults: Option<u64>,
    /// Major page faults.
    pub major_page_faults: Option<u64>,
    /// Writable layer bytes.
    pub rootfs_used: Option<u64>,
    /// Writable layer inodes.
    pub rootfs_inodes: Option<u64>,
    /// Writable layer read time, Unix ns.
    pub rootfs_time: i64,
    /// Swap used.
    pub swap_usage: Option<u64>,
    /// Swap left.
    pub swap_available: Option<u64>,
}

/// A running container.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContainerSample {
    /// The runtime's id.
    pub id: String,
    /// The container's name in the pod.
    pub name: String,
    /// The image it runs.
    pub image: String,
    /// When it was created.
    pub created: Time,
    /// The runtime's figures.
    pub runtime: Option<RuntimeFigures>,
    /// Its cgroup.
    pub cgroup: Option<CgroupSample>,
    /// Its log directory's usage.
    pub logs: Option<DiskUsage>,
}

/// A volume's directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VolumeSample {
    /// The volume's name.
    pub name: String,
    /// What it holds.
    pub usage: DiskUsage,
    /// The filesystem it is on.
    pub fs: Option<FsInfo>,
    /// Counts as ephemeral storage (a local, disk-backed volume:
    /// emptyDir, configMap, downwardAPI on the node's filesystem).
    pub ephemeral: bool,
}

/// A pod (its ready sandbox).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodSample {
    /// Which pod.
    pub pod_ref: PodReference,
    /// When its sandbox was created.
    pub created: Time,
    /// The pod cgroup.
    pub cgroup: Option<CgroupSample>,
    /// The pod's network namespace.
    pub net: Option<Vec<NetDev>>,
    /// Running containers.
    pub containers: Vec<ContainerSample>,
    /// Volumes.
    pub volumes: Vec<VolumeSample>,
    /// The pod's log directory, all of it.
    pub logs: Option<DiskUsage>,
    /// The pod's own files (`etc-hosts`).
    pub etc_hosts: Option<DiskUsage>,
}

/// The runtime's filesystem and how much of it images use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImageFs {
    /// The filesystem.
    pub fs: Option<FsInfo>,
    /// Bytes the runtime uses there.
    pub used: Option<u64>,
    /// Inodes the runtime uses there.
    pub inodes_used: Option<u64>,
    /// When the runtime read it, Unix ns.
    pub time: i64,
}

/// Everything read in one collection.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// When.
    pub time: Time,
    /// The node's name.
    pub node_name: String,
    /// Boot time, Unix seconds.
    pub boot: Option<i64>,
    /// Logical CPUs.
    pub cpus: usize,
    /// MemTotal, bytes.
    pub memory_total: Option<u64>,
    /// Swap (used, free), bytes.
    pub swap: Option<(u64, u64)>,
    /// The root cgroup.
    pub root: CgroupSample,
    /// `kubepods`.
    pub pods_cgroup: Option<CgroupSample>,
    /// `kubepods/burstable`, `kubepods/besteffort`.
    pub qos: Vec<CgroupSample>,
    /// The node's interfaces.
    pub net: Option<Vec<NetDev>>,
    /// The root directory's filesystem.
    pub nodefs: Option<FsInfo>,
    /// The runtime's image filesystem.
    pub imagefs: ImageFs,
    /// The runtime's container filesystem (the image one unless split).
    pub containerfs: ImageFs,
    /// (max PIDs, processes running).
    pub rlimit: (Option<i64>, Option<i64>),
    /// The node's pods.
    pub pods: Vec<PodSample>,
    /// Names of the block devices cgroups did I/O on (`major:minor` →
    /// `/dev/NAME`).
    pub block_devices: std::collections::BTreeMap<(u32, u32), String>,
}

/// The default interface summaries name (cAdvisor's).
pub const DEFAULT_INTERFACE: &str = "eth0";

fn network(time: Time, devs: &[NetDev]) -> Option<NetworkStats> {
    if devs.is_empty() {
        return None;
    }
    let iface = |d: &NetDev| InterfaceStats {
        name: d.name.clone(),
        rx_bytes: Some(d.rx_bytes),
        rx_errors: Some(d.rx_errors),
        tx_bytes: Some(d.tx_bytes),
        tx_errors: Some(d.tx_errors),
    };
    let default = devs
        .iter()
        .find(|d| d.name == DEFAULT_INTERFACE)
        .map(iface)
        .unwrap_or_default();
    Some(NetworkStats {
        time,
        default,
        interfaces: devs.iter().map(iface).collect(),
    })
}

fn cgroup_cpu(time: Time, c: &CgroupSample) -> Option<CpuStats> {
    let cpu = c.stats.cpu?;
    Some(CpuStats {
        time,
        usage_nano_cores: c.rate,
        usage_core_nano_seconds: Some(cpu.usage_ns),
    })
}

/// Memory of a cgroup; available = (limit, else `total`) − working set.
fn cgroup_memory(time: Time, c: &CgroupSample, total: Option<u64>) -> Option<MemoryStats> {
    let m = c.stats.memory?;
    let limit = c.stats.spec.memory_limit.or(total);
    Some(MemoryStats {
        time,
        available_bytes: limit.map(|l| l.saturating_sub(m.working_set)),
        usage_bytes: Some(m.usage),
        working_set_bytes: Some(m.working_set),
        rss_bytes: m.rss,
        page_faults: m.pgfault,
        major_page_faults: m.pgmajfault,
    })
}

fn fs_of(time: Time, fs: Option<&FsInfo>) -> FsStats {
    FsStats {
        time,
        available_bytes: fs.map(|f| f.available),
        capacity_bytes: fs.map(|f| f.capacity),
        inodes_free: fs.map(|f| f.inodes_free),
        inodes: fs.map(|f| f.inodes),
        ..Default::default()
    }
}

fn used(fs: FsStats, usage: DiskUsage) -> FsStats {
    FsStats {
        used_bytes: Some(usage.bytes),
        inodes_used: Some(usage.inodes),
        ..fs
    }
}

fn add(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.saturating_add(b)),
        (a, b) => a.or(b),
    }
}

impl ImageFs {
    fn stats(&self, fallback: Time) -> Option<FsStats> {
        if self.fs.is_none() && self.used.is_none() {
            return None;
        }
        let time = if self.time > 0 {
            Time(self.time)
        } else {
            fallback
        };
        Some(FsStats {
            used_bytes: self.used,
            inodes_used: self.inodes_used,
            ..fs_of(time, self.fs.as_ref())
        })
    }
}

impl ContainerSample {
    fn stats(&self, time: Time, imagefs: &ImageFs, nodefs: Option<&FsInfo>) -> ContainerStats {
        let rt = self.runtime.as_ref();
        let cg = self.cgroup.as_ref();
        let t = |ns: i64| if ns > 0 { Time(ns) } else { time };
        let cpu = match rt.filter(|r| r.cpu_usage.is_some()) {
            Some(r) => Some(CpuStats {
                time: t(r.cpu_time),
                usage_nano_cores: r.cpu_rate,
                usage_core_nano_seconds: r.cpu_usage,
            }),
            None => cg.and_then(|c| cgroup_cpu(time, c)),
        };
        let memory = match rt.filter(|r| r.working_set.is_some()) {
            Some(r) => Some(MemoryStats {
                time: t(r.memory_time),
                available_bytes: r.available,
                usage_bytes: r.usage,
                working_set_bytes: r.working_set,
                rss_bytes: r.rss,
                page_faults: r.page_faults,
                major_page_faults: r.major_page_faults,
            }),
            None => cg.and_then(|c| cgroup_memory(time, c, None)),
        };
        let rootfs = rt.filter(|r| r.rootfs_used.is_some()).map(|r| FsStats {
            used_bytes: r.rootfs_used,
            inodes_used: r.rootfs_inodes,
            ..fs_of(t(r.rootfs_time), imagefs.fs.as_ref())
        });
        let swap = rt
            .filter(|r| r.swap_usage.is_some() || r.swap_available.is_some())
            .map(|r| SwapStats {
                time: t(r.memory_time),
                swap_available_bytes: r.swap_available,
                swap_usage_bytes: r.swap_usage,
            });
        ContainerStats {
            name: self.name.clone(),
            start_time: self.created,
            cpu,
            memory,
            rootfs,
            logs: self.logs.map(|u| used(fs_of(time, nodefs), u)),
            swap,
        }
    }
}

impl PodSample {
    fn stats(&self, s: &Snapshot) -> PodStats {
        let time = s.time;
        let containers: Vec<ContainerStats> = self
            .containers
            .iter()
            .map(|c| c.stats(time, &s.containerfs, s.nodefs.as_ref()))
            .collect();
        let volume_stats: Vec<VolumeStats> = self
            .volumes
            .iter()
            .map(|v| VolumeStats {
                name: v.name.clone(),
                fs: used(fs_of(time, v.fs.as_ref()), v.usage),
            })
            .collect();
        // containers' writable layers, local volumes, the pod's logs and
        // etc-hosts: upstream's calcEphemeralStorage
        let mut eph = fs_of(time, s.nodefs.as_ref());
        for c in &containers {
            if let Some(r) = &c.rootfs {
                eph.used_bytes = add(eph.used_bytes, r.used_bytes);
                eph.inodes_used = add(eph.inodes_used, r.inodes_used);
            }
        }
        let local = self.volumes.iter().filter(|v| v.ephemeral).map(|v| v.usage);
        for u in local.chain(self.logs).chain(self.etc_hosts) {
            eph.used_bytes = add(eph.used_bytes, Some(u.bytes));
            eph.inodes_used = add(eph.inodes_used, Some(u.inodes));
        }
        let cg = self.cgroup.as_ref();
        let swap = cg
            .and_then(|c| c.stats.memory)
            .and_then(|m| m.swap)
            .map(|u| SwapStats {
                time,
                swap_available_bytes: None,
                swap_usage_bytes: Some(u),
            });
        PodStats {
            pod_ref: self.pod_ref.clone(),
            start_time: self.created,
            containers,
            cpu: cg.and_then(|c| cgroup_cpu(time, c)),
            memory: cg.and_then(|c| cgroup_memory(time, c, s.memory_total)),
            network: self.net.as_deref().and_then(|n| network(time, n)),
            volume_stats,
            ephemeral_storage: Some(eph),
            process_stats: cg.and_then(|c| c.stats.pids).map(|n| ProcessStats {
                process_count: Some(n),
            }),
            swap,
        }
    }
}

impl Snapshot {
    /// The Summary API's document for this snapshot.
    pub fn summary(&self) -> Summary {
        let time = self.time;
        let system_containers = self
            .pods_cgroup
            .iter()
            .map(|c| ContainerStats {
                name: "pods".into(),
                start_time: Time(self.boot.unwrap_or(0) * 1_000_000_000),
                cpu: cgroup_cpu(time, c),
                memory: cgroup_memory(time, c, self.memory_total),
                swap: c.stats.memory.and_then(|m| m.swap).map(|u| SwapStats {
                    time,
                    swap_available_bytes: None,
                    swap_usage_bytes: Some(u),
                }),
                ..Default::default()
            })
            .collect();
        let node = NodeStats {
            node_name: self.node_name.clone(),
            system_containers,
            start_time: Time(self.boot.unwrap_or(0) * 1_000_000_000),
            cpu: cgroup_cpu(time, &self.root),
            memory: cgroup_memory(time, &self.root, self.memory_total),
            network: self.net.as_deref().and_then(|n| network(time, n)),
            fs: self.nodefs.as_ref().map(|f| FsStats {
                used_bytes: Some(f.used),
                inodes_used: Some(f.inodes.saturating_sub(f.inodes_free)),
                ..fs_of(time, Some(f))
            }),
            runtime: {
                let r = RuntimeStats {
                    image_fs: self.imagefs.stats(time),
                    container_fs: self.containerfs.stats(time),
                };
                (r.image_fs.is_some() || r.container_fs.is_some()).then_some(r)
            },
            rlimit: match self.rlimit {
                (None, None) => None,
                (maxpid, curproc) => Some(RlimitStats {
                    time,
                    maxpid,
                    curproc,
                }),
            },
            swap: self.swap.map(|(usage, free)| SwapStats {
                time,
                swap_available_bytes: Some(free),
                swap_usage_bytes: Some(usage),
            }),
        };
        Summary {
            node,
            pods: self.pods.iter().map(|p| p.stats(self)).collect(),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::stats::cgroup::{CpuStats as Cpu, MemoryStats as Mem, Spec};

    fn cg(name: &str, cpu_ns: u64, ws: u64, rate: u64) -> CgroupSample {
        CgroupSample {
            name: name.into(),
            stats: CgroupStats {
                cpu: Some(Cpu {
                    usage_ns: cpu_ns,
                    ..Default::default()
                }),
                memory: Some(Mem {
                    usage: ws + 100,
                    working_set: ws,
                    rss: Some(ws / 2),
                    inactive_file: Some(100),
                    ..Default::default()
                }),
                pids: Some(3),
                io: vec![],
                spec: Spec::default(),
            },
            rate: Some(rate),
        }
    }

    fn container(name: &str, cpu: u64, ws: u64, rootfs: u64) -> ContainerSample {
        ContainerSample {
            id: format!("id-{name}"),
            name: name.into(),
            image: "img".into(),
            created: Time(5_000_000_000),
            runtime: Some(RuntimeFigures {
                cpu_time: 7_000_000_000,
                cpu_usage: Some(cpu),
                cpu_rate: Some(cpu / 10),
                memory_time: 7_000_000_000,
                working_set: Some(ws),
                usage: Some(ws),
                rootfs_used: Some(rootfs),
                rootfs_inodes: Some(2),
                ..Default::default()
            }),
            cgroup: None,
            logs: Some(DiskUsage {
                bytes: 4096,
                inodes: 2,
            }),
        }
    }

    /// A node with one pod of two containers; the pod cgroup holds the
    /// containers plus the sandbox.
    pub(crate) fn fixture() -> Snapshot {
        let fs = FsInfo {
            available: 1000,
            capacity: 5000,
            used: 4000,
            inodes_free: 10,
            inodes: 50,
            flags: 0,
        };
        Snapshot {
            time: Time(8_000_000_000),
            node_name: "n".into(),
            boot: Some(1),
            cpus: 2,
            memory_total: Some(10_000),
            swap: Some((0, 0)),
            root: cg("/", 9_000, 6_000, 1_500),
            pods_cgroup: Some(cg("/kubepods", 700, 1_200, 300)),
            qos: vec![],
            net: Some(vec![NetDev {
                name: "eth0".into(),
                rx_bytes: 1,
                ..Default::default()
            }]),
            nodefs: Some(fs),
            imagefs: ImageFs {
                fs: Some(fs),
                used: Some(300),
                inodes_used: Some(7),
                time: 6_000_000_000,
            },
            containerfs: ImageFs {
                fs: Some(fs),
                used: Some(300),
                inodes_used: Some(7),
                time: 6_000_000_000,
            },
            rlimit: (Some(100), Some(20)),
            block_devices: Default::default(),
            pods: vec![PodSample {
                pod_ref: PodReference {
                    name: "web".into(),
                    namespace: "default".into(),
                    uid: "u1".into(),
                },
                created: Time(4_000_000_000),
                cgroup: Some(cg("/kubepods/burstable/podu1", 650, 1_100, 290)),
                net: Some(vec![NetDev {
                    name: "eth0".into(),
                    rx_bytes: 10,
                    tx_bytes: 20,
                    ..Default::default()
                }]),
                containers: vec![
                    container("app", 600, 1_000, 8192),
                    container("side", 40, 90, 4096),
                ],
                volumes: vec![
                    VolumeSample {
                        name: "scratch".into(),
                        usage: DiskUsage {
                            bytes: 4096,
                            inodes: 2,
                        },
                        fs: Some(fs),
                        ephemeral: true,
                    },
                    VolumeSample {
                        name: "token".into(),
                        usage: DiskUsage {
                            bytes: 8192,
                            inodes: 5,
                        },
                        fs: None,
                        ephemeral: false,
                    },
                ],
                logs: Some(DiskUsage {
                    bytes: 8192,
                    inodes: 3,
                }),
                etc_hosts: Some(DiskUsage {
                    bytes: 4096,
                    inodes: 1,
                }),
            }],
        }
    }

    #[test]
    fn summary_of_a_fixture_node() {
        let s = fixture().summary();
        let n = &s.node;
        assert_eq!(n.cpu.as_ref().unwrap().usage_core_nano_seconds, Some(9_000));
        assert_eq!(n.cpu.as_ref().unwrap().usage_nano_cores, Some(1_500));
        let m = n.memory.as_ref().unwrap();
        assert_eq!(
            (m.working_set_bytes, m.available_bytes),
            (Some(6_000), Some(4_000))
        );
        assert_eq!(n.system_containers[0].name, "pods");
        assert_eq!(n.fs.as_ref().unwrap().used_bytes, Some(4000));
        assert_eq!(n.fs.as_ref().unwrap().inodes_used, Some(40));
        assert_eq!(n.network.as_ref().unwrap().default.rx_bytes, Some(1));
        let p = &s.pods[0];
        assert_eq!(p.containers.len(), 2);
        // the pod's figures hold its containers' (the cgroup also holds the sandbox)
        let sum_cpu: u64 = p
            .containers
            .iter()
            .map(|c| c.cpu.as_ref().unwrap().usage_core_nano_seconds.unwrap())
            .sum();
        let sum_ws: u64 = p
            .containers
            .iter()
            .map(|c| c.memory.as_ref().unwrap().working_set_bytes.unwrap())
            .sum();
        let pod_cpu = p.cpu.as_ref().unwrap().usage_core_nano_seconds.unwrap();
        let pod_ws = p.memory.as_ref().unwrap().working_set_bytes.unwrap();
        assert!(
            sum_cpu <= pod_cpu && sum_ws <= pod_ws,
            "{sum_cpu} {pod_cpu} {sum_ws} {pod_ws}"
        );
        // and the pods' fit in the node's `pods` cgroup and the node
        let pods = n.system_containers[0].memory.as_ref().unwrap();
        assert!(pod_ws <= pods.working_set_bytes.unwrap());
        assert!(pods.working_set_bytes <= m.working_set_bytes);
        // ephemeral storage: rootfs 8192 + 4096, the local volume 4096,
        // logs 8192, etc-hosts 4096 (not the memory-backed token volume)
        let e = p.ephemeral_storage.as_ref().unwrap();
        assert_eq!(e.used_bytes, Some(8192 + 4096 + 4096 + 8192 + 4096));
        assert_eq!(e.inodes_used, Some(2 + 2 + 2 + 3 + 1));
        assert_eq!(e.capacity_bytes, Some(5000));
        assert_eq!(p.volume_stats.len(), 2);
        assert_eq!(p.volume_stats[1].fs.used_bytes, Some(8192));
        assert_eq!(
            p.volume_stats[1].fs.capacity_bytes, None,
            "its fs was not read"
        );
        assert_eq!(p.process_stats.as_ref().unwrap().process_count, Some(3));
        let c = &p.containers[0];
        assert_eq!(c.rootfs.as_ref().unwrap().used_bytes, Some(8192));
        assert_eq!(c.logs.as_ref().unwrap().used_bytes, Some(4096));
        assert_eq!(c.start_time, Time(5_000_000_000));
        assert_eq!(p.network.as_ref().unwrap().default.tx_bytes, Some(20));
        let img = n.runtime.as_ref().unwrap().image_fs.as_ref().unwrap();
        assert_eq!(
            (img.used_bytes, img.capacity_bytes),
            (Some(300), Some(5000))
        );
        assert_eq!(n.rlimit.as_ref().unwrap().curproc, Some(20));
    }

    #[test]
    fn unread_figures_are_left_out() {
        let mut f = fixture();
        f.root = CgroupSample::default();
        f.pods[0].cgroup = None;
        f.pods[0].containers[0].runtime = None;
        f.nodefs = None;
        let s = f.summary();
        assert!(s.node.cpu.is_none() && s.node.memory.is_none() && s.node.fs.is_none());
        let p = &s.pods[0];
        assert!(p.cpu.is_none() && p.memory.is_none() && p.process_stats.is_none());
        assert!(p.containers[0].cpu.is_none() && p.containers[0].rootfs.is_none());
        let v = serde_json::to_value(&s).unwrap();
        assert!(v["pods"][0]["containers"][0].get("memory").is_none());
    }
}
