//! The node's one stats provider ([`StatsProvider`]): the Summary API,
//! `/metrics/resource`, `/metrics/cadvisor` and the eviction manager all
//! read what [`StatsProvider::collect`] reads, as upstream's CRI stats
//! provider with cAdvisor does (`pkg/kubelet/stats`):
//!
//! * pods and containers: the runtime's ready sandboxes and running
//!   containers (CRI `ListPodSandbox`, `ListContainers`); per container
//!   the runtime's `ListContainerStats` (CPU, memory, writable layer,
//!   swap), and its cgroup where the runtime gives nothing;
//! * pod, `kubepods` and node (root) figures: their cgroups
//!   ([`super::cgroup`]), the pod cgroup found under
//!   `kubepods[/burstable|/besteffort]/pod<uid>`, containers' cgroups
//!   `<pod cgroup>/<container id>` (the cgroupfs driver);
//! * CPU rates (`usageNanoCores`): from two reads of the same figure, the
//!   first read has none;
//! * network: `/proc/<pid>/net/dev` of a process of the pod's sandbox (a
//!   host-network pod has none of its own), and of this process for the
//!   node;
//! * filesystems: `statvfs` of the root directory (nodefs) and of the
//!   runtime's image filesystem (CRI `ImageFsInfo` gives what images
//!   use); volumes' and logs' usage by walking them (`du`; volumes at
//!   most once a minute, upstream's `volumeStatsAggPeriod`).
//!
//! One collection runs at a time; the callers that come within [`REUSE`]
//! of it (scrapers, the eviction manager) share its snapshot.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rkube_cri::v1 as cri;
use rkube_cri::CriClient;

use super::cgroup::Hierarchy;
use super::procfs::{self, DiskUsage};
use super::snapshot::{
    CgroupSample, ContainerSample, ImageFs, PodSample, RuntimeFigures, Snapshot, VolumeSample,
};
use super::statvfs::statvfs;
use super::summary::{PodReference, Summary, Time};
use crate::pod::Dirs;

/// The shortest window a CPU rate is computed over: reads closer together
/// (concurrent scrapes, the eviction manager's) do not make a rate over
/// milliseconds.
pub const RATE_WINDOW: Duration = Duration::from_secs(5);

/// How long a volume's measured usage is kept by default (upstream's
/// `volumeStatsAggPeriod` default).
pub const VOLUME_STATS_PERIOD: Duration = Duration::from_secs(60);

/// The runtime's pod sandboxes and containers (CRI `ListPodSandbox`,
/// `ListContainers`), all states.
pub async fn runtime_pods(
    cri: &CriClient,
) -> anyhow::Result<(Vec<cri::PodSandbox>, Vec<cri::Container>)> {
    let mut rt = cri.runtime_service();
    let sandboxes = rt
        .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None })
        .await
        .map_err(|e| anyhow::anyhow!("listing pod sandboxes: {}", e.message()))?
        .into_inner()
        .items;
    let containers = rt
        .list_containers(cri::ListContainersRequest { filter: None })
        .await
        .map_err(|e| anyhow::anyhow!("listing containers: {}", e.message()))?
        .into_inner()
        .containers;
    Ok((sandboxes, containers))
}

/// The node's stats.
pub struct StatsProvider {
    cri: CriClient,
    hierarchy: Hierarchy,
    cgroup_root: String,
    dirs: Dirs,
    node_name: String,
    /// key → (Unix ns, cumulative CPU ns) of earlier reads, newest last,
    /// at least [`RATE_WINDOW`] apart.
    rates: Mutex<HashMap<String, Vec<(i64, u64)>>>,
    /// volume directory → when measured, what it held.
    volumes: Mutex<HashMap<PathBuf, (Instant, Option<DiskUsage>)>>,
    /// The image filesystem's mount point, as the runtime last named it.
    image_path: Mutex<Option<PathBuf>>,
    /// `volumeStatsAggPeriod`: how long a volume's usage is kept; zero: no
    /// volume stats, as upstream ("Volume stats collection disabled").
    volume_period: Duration,
    /// The last collection: when, whether full. Held while collecting, so
    /// one collection runs at a time and callers within [`REUSE`] of the
    /// last one share it.
    last: tokio::sync::Mutex<Option<(Instant, bool, Arc<Snapshot>)>>,
}

/// How long a collection answers the scrapes that come after it (several
/// scrapers at once, the eviction manager beside them).
pub const REUSE: Duration = Duration::from_secs(1);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Volume plugin directories whose contents are local, disk-backed
/// ephemeral storage (when not a mount of their own).
const LOCAL_VOLUME_PLUGINS: [&str; 3] = [
    "kubernetes.io~empty-dir",
    "kubernetes.io~configmap",
    "kubernetes.io~downward-api",
];

/// What the runtime answered, before the files are read.
struct RuntimeLists {
    sandboxes: Vec<cri::PodSandbox>,
    containers: Vec<cri::Container>,
    stats: HashMap<String, cri::ContainerStats>,
    imagefs: ImageFs,
    containerfs: ImageFs,
    image_path: Option<PathBuf>,
}

impl StatsProvider {
    /// Stats of node `node_name` from runtime `cri`, pods' files under
    /// `dirs`, cgroups under `/sys/fs/cgroup` (pods in
    /// `<cgroup_root>/kubepods`).
    pub fn new(cri: CriClient, dirs: Dirs, node_name: &str, cgroup_root: &str) -> StatsProvider {
        StatsProvider::with_hierarchy(
            cri,
            dirs,
            node_name,
            cgroup_root,
            Hierarchy::detect(Path::new("/sys/fs/cgroup")),
        )
    }

    /// As [`StatsProvider::new`] with the cgroups mounted as `hierarchy`.
    pub fn with_hierarchy(
        cri: CriClient,
        dirs: Dirs,
        node_name: &str,
        cgroup_root: &str,
        hierarchy: Hierarchy,
    ) -> StatsProvider {
        StatsProvider {
            cri,
            hierarchy,
            cgroup_root: cgroup_root.trim_end_matches('/').to_string(),
            dirs,
            node_name: node_name.to_string(),
            rates: Mutex::new(HashMap::new()),
            volumes: Mutex::new(HashMap::new()),
            image_path: Mutex::new(None),
            last: tokio::sync::Mutex::new(None),
            volume_period: VOLUME_STATS_PERIOD,
        }
    }

    /// This provider with `volumeStatsAggPeriod` `period` (zero: volumes
    /// are not measured).
    pub fn with_volume_stats_period(mut self, period: Duration) -> StatsProvider {
        self.volume_period = period;
        self
    }

    /// The node's directories.
    pub fn dirs(&self) -> &Dirs {
        &self.dirs
    }

    /// The cgroup hierarchy read.
    pub fn hierarchy(&self) -> &Hierarchy {
        &self.hierarchy
    }

    /// The Summary (`only_cpu_and_memory`: CPU and memory only).
    pub async fn summary(self: &Arc<Self>, only_cpu_and_memory: bool) -> anyhow::Result<Summary> {
        let s = self.collect(!only_cpu_and_memory).await?.summary();
        Ok(if only_cpu_and_memory {
            s.cpu_and_memory()
        } else {
            s
        })
    }

    async fn runtime_lists(&self) -> anyhow::Result<RuntimeLists> {
        let (sandboxes, containers) = runtime_pods(&self.cri).await?;
        let mut rt = self.cri.runtime_service();
        let stats = match rt
            .list_container_stats(cri::ListContainerStatsRequest { filter: None })
            .await
        {
            Ok(r) => r
                .into_inner()
                .stats
                .into_iter()
                .filter_map(|s| Some((s.attributes.as_ref()?.id.clone(), s)))
                .collect(),
            Err(e) => {
                tracing::debug!(error = %e.message(), "container stats");
                HashMap::new()
            }
        };
        let fs = self
            .cri
            .image_service()
            .image_fs_info(cri::ImageFsInfoRequest {})
            .await
            .ok()
            .map(|r| r.into_inner());
        let usage = |u: Option<&cri::FilesystemUsage>| {
            u.map(|u| ImageFs {
                fs: None,
                used: u.used_bytes.as_ref().map(|v| v.value),
                inodes_used: u.inodes_used.as_ref().map(|v| v.value),
                time: u.timestamp,
            })
            .unwrap_or_default()
        };
        let image = fs.as_ref().and_then(|f| f.image_filesystems.first());
        let container = fs
            .as_ref()
            .and_then(|f| f.container_filesystems.first())
            .or(image);
        let mount = |u: Option<&cri::FilesystemUsage>| {
            u.and_then(|u| u.fs_id.as_ref())
                .map(|i| PathBuf::from(&i.mountpoint))
                .filter(|p| !p.as_os_str().is_empty())
        };
        let image_path = mount(image).or_else(|| mount(container));
        lock(&self.image_path).clone_from(&image_path);
        Ok(RuntimeLists {
            imagefs: usage(image),
            containerfs: usage(container),
            image_path,
            sandboxes,
            containers,
            stats,
        })
    }

    /// Reads everything once (`full`: also network, filesystems, volumes
    /// and logs).
    pub async fn collect(self: &Arc<Self>, full: bool) -> anyhow::Result<Arc<Snapshot>> {
        let mut last = self.last.lock().await;
        if let Some((at, was_full, s)) = last.as_ref() {
            if at.elapsed() < REUSE && (*was_full || !full) {
                return Ok(s.clone());
            }
        }
        let lists = self.runtime_lists().await?;
        let s = Arc::new(self.read_files_blocking(lists, full).await?);
        *last = Some((Instant::now(), full, s.clone()));
        Ok(s)
    }

    /// The Summary the eviction manager reads: everything, or, when the
    /// runtime cannot be asked, the node's own figures without pods (the
    /// node's signals must not depend on a runtime that may be the one
    /// starved).
    pub async fn summary_for_eviction(self: &Arc<Self>) -> anyhow::Result<Summary> {
        let e = match self.collect(true).await {
            Ok(s) => return Ok(s.summary()),
            Err(e) => e,
        };
        tracing::warn!(error = %e, "the runtime's pods could not be read; the node's own figures only");
        let lists = RuntimeLists {
            sandboxes: Vec::new(),
            containers: Vec::new(),
            stats: HashMap::new(),
            imagefs: ImageFs::default(),
            containerfs: ImageFs::default(),
            image_path: lock(&self.image_path).clone(),
        };
        Ok(self.read_files_blocking(lists, true).await?.summary())
    }

    async fn read_files_blocking(
        self: &Arc<Self>,
        lists: RuntimeLists,
        full: bool,
    ) -> Result<Snapshot, tokio::task::JoinError> {
        // the files: on a blocking thread (walking volumes takes a while)
        let me = self.clone();
        tokio::task::spawn_blocking(move || {
            let s = me.read_files(lists, full);
            me.prune(&s);
            s
        })
        .await
    }

    /// cAdvisor's `device` of the root directory's and of the image
    /// filesystem (their mount sources; empty when unknown).
    pub fn devices(&self) -> (String, String) {
        let mi = procfs::read_small(Path::new("/proc/self/mountinfo")).unwrap_or_default();
        let of = |p: &Path| super::cadvisor::mount_source(&mi, p).unwrap_or_default();
        let nodefs = of(&self.dirs.root);
        let imagefs = match lock(&self.image_path).as_deref() {
            Some(p) => of(p),
            None => nodefs.clone(),
        };
        (nodefs, imagefs)
    }

    fn rate(&self, key: &str, time: i64, usage: u64) -> Option<u64> {
        let window = RATE_WINDOW.as_nanos() as i64;
        let mut rates = lock(&self.rates);
        let samples = rates.entry(key.to_string()).or_default();
        // against the newest earlier read at least a window old
        let rate = samples
            .iter()
            .rev()
            .find(|(t, _)| time.saturating_sub(*t) >= window)
            .and_then(|(t0, u0)| {
                let dt = time.checked_sub(*t0).filter(|d| *d > 0)?;
                let du = usage.checked_sub(*u0)?;
                u64::try_from(du as u128 * 1_000_000_000 / dt as u128).ok()
            });
        if samples
            .last()
            .is_none_or(|(t, _)| time.saturating_sub(*t) >= window)
        {
            samples.push((time, usage));
            if samples.len() > 3 {
                samples.remove(0);
            }
        }
        rate
    }

    fn cgroup(&self, name: &str, meminfo: &str, time: i64, all: bool) -> CgroupSample {
        let stats = self.hierarchy.read_with(name, meminfo, all);
        let rate = stats
            .cpu
            .and_then(|c| self.rate(&format!("cg:{name}"), time, c.usage_ns));
        CgroupSample {
            name: name.to_string(),
            stats,
            rate,
        }
    }

    fn pod_cgroup(&self, uid: &str) -> Option<String> {
        let base = format!("{}/kubepods", self.cgroup_root);
        [
            format!("{base}/pod{uid}"),
            format!("{base}/burstable/pod{uid}"),
            format!("{base}/besteffort/pod{uid}"),
        ]
        .into_iter()
        .find(|c| self.hierarchy.exists(c))
    }

    fn volume_usage(&self, dir: &Path) -> Option<DiskUsage> {
        if let Some((at, u)) = lock(&self.volumes).get(dir) {
            if at.elapsed() < self.volume_period {
                return *u;
            }
        }
        let u = procfs::disk_usage(dir);
        lock(&self.volumes).insert(dir.to_path_buf(), (Instant::now(), u));
        u
    }

    fn volumes(&self, uid: &str, pod_dev: Option<u64>) -> Vec<VolumeSample> {
        use std::os::unix::fs::MetadataExt;
        let mut out = Vec::new();
        if self.volume_period.is_zero() {
            return out;
        }
        let Ok(plugins) = std::fs::read_dir(self.dirs.pod_dir(uid).join("volumes")) else {
            return out;
        };
        for plugin in plugins.flatten() {
            let pname = plugin.file_name().to_string_lossy().into_owned();
            let Ok(vols) = std::fs::read_dir(plugin.path()) else {
                continue;
            };
            for v in vols.flatten() {
                let path = v.path();
                let Ok(meta) = std::fs::symlink_metadata(&path) else {
                    continue;
                };
                if !meta.is_dir() {
                    continue;
                }
                let on_nodefs = pod_dev == Some(meta.dev());
                let fs = statvfs(&path);
                // A volume that is a filesystem of its own (tmpfs, a
                // network or block volume) is measured by that filesystem,
                // never walked; a local one by walking it.
                let usage = if on_nodefs {
                    self.volume_usage(&path)
                } else {
                    fs.map(|f| DiskUsage {
                        bytes: f.used,
                        inodes: f.inodes.saturating_sub(f.inodes_free),
                    })
                };
                let Some(usage) = usage else {
                    continue;
                };
                out.push(VolumeSample {
                    name: v.file_name().to_string_lossy().into_owned(),
                    usage,
                    fs,
                    ephemeral: on_nodefs && LOCAL_VOLUME_PLUGINS.contains(&pname.as_str()),
                });
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    fn read_files(&self, lists: RuntimeLists, full: bool) -> Snapshot {
        let now = Time::now();
        let meminfo = procfs::read_small(Path::new("/proc/meminfo")).unwrap_or_default();
        let mem = |k| super::procfs::meminfo_bytes(&meminfo, k).and_then(|v| u64::try_from(v).ok());
        let pods_name = format!("{}/kubepods", self.cgroup_root);
        let root = self.cgroup("/", &meminfo, now.0, full);
        let pods_cgroup = self
            .hierarchy
            .exists(&pods_name)
            .then(|| self.cgroup(&pods_name, &meminfo, now.0, full));
        let qos = ["burstable", "besteffort"]
            .iter()
            .filter(|_| full)
            .map(|q| format!("{pods_name}/{q}"))
            .filter(|n| self.hierarchy.exists(n))
            .map(|n| self.cgroup(&n, &meminfo, now.0, true))
            .collect();
        let nodefs = full.then(|| statvfs(&self.dirs.root)).flatten();
        let image_info = lists
            .image_path
            .as_deref()
            .and_then(statvfs)
            .or(nodefs.filter(|_| full));
        let with_fs = |f: ImageFs| ImageFs {
            fs: image_info,
            ..f
        };
        // ready sandboxes, the newest per pod
        let mut sandboxes: HashMap<String, &cri::PodSandbox> = HashMap::new();
        for s in &lists.sandboxes {
            let Some(m) = &s.metadata else { continue };
            if s.state != cri::PodSandboxState::SandboxReady as i32 {
                continue;
            }
            let newer = sandboxes
                .get(&m.uid)
                .is_none_or(|o| o.created_at < s.created_at);
            if newer {
                sandboxes.insert(m.uid.clone(), s);
            }
        }
        let mut pods: Vec<PodSample> = sandboxes
            .values()
            .map(|s| self.pod(s, &lists, &meminfo, now, full))
            .collect();
        pods.sort_by(|a, b| {
            (&a.pod_ref.namespace, &a.pod_ref.name).cmp(&(&b.pod_ref.namespace, &b.pod_ref.name))
        });
        let mut block_devices = std::collections::BTreeMap::new();
        {
            let cgroups =
                std::iter::once(&root)
                    .chain(pods_cgroup.iter())
                    .chain(pods.iter().flat_map(|p| {
                        p.cgroup
                            .iter()
                            .chain(p.containers.iter().filter_map(|c| c.cgroup.as_ref()))
                    }));
            for c in cgroups {
                for d in &c.stats.io {
                    block_devices.entry((d.major, d.minor)).or_insert_with(|| {
                        procfs::block_device(d.major, d.minor).unwrap_or_default()
                    });
                }
            }
        }
        block_devices.retain(|_, v: &mut String| !v.is_empty());
        Snapshot {
            block_devices,
            time: now,
            node_name: self.node_name.clone(),
            boot: procfs::boot_time(),
            cpus: procfs::cpus_online().unwrap_or(0),
            memory_total: mem("MemTotal"),
            swap: procfs::swap(&meminfo),
            root,
            pods_cgroup,
            qos,
            net: full
                .then(|| procfs::net_dev_of(std::process::id()))
                .flatten(),
            nodefs,
            imagefs: with_fs(lists.imagefs),
            containerfs: with_fs(lists.containerfs),
            rlimit: procfs::rlimit().map_or((None, None), |(max, tasks)| (Some(max), Some(tasks))),
            pods,
        }
    }

    fn pod(
        &self,
        sandbox: &cri::PodSandbox,
        lists: &RuntimeLists,
        meminfo: &str,
        now: Time,
        full: bool,
    ) -> PodSample {
        use std::os::unix::fs::MetadataExt;
        let m = sandbox.metadata.clone().unwrap_or_default();
        let cgroup_name = self.pod_cgroup(&m.uid);
        let cgroup = cgroup_name
            .as_deref()
            .map(|n| self.cgroup(n, meminfo, now.0, full));
        let logs_dir = self.dirs.pod_logs(&m.namespace, &m.name, &m.uid);
        let mut running: Vec<&cri::Container> = lists
            .containers
            .iter()
            .filter(|c| {
                c.pod_sandbox_id == sandbox.id
                    && c.state == cri::ContainerState::ContainerRunning as i32
            })
            .collect();
        running.sort_by(|a, b| {
            let name = |c: &cri::Container| c.metadata.as_ref().map(|m| m.name.clone());
            name(a).cmp(&name(b))
        });
        let containers = running
            .into_iter()
            .map(|c| {
                let name = c
                    .metadata
                    .as_ref()
                    .map(|m| m.name.clone())
                    .unwrap_or_default();
                let runtime = lists.stats.get(&c.id).map(|s| self.figures(&c.id, s));
                // the container's cgroup: for cAdvisor's metrics, or where
                // the runtime reports no usage
                let reported = runtime
                    .as_ref()
                    .is_some_and(|r| r.cpu_usage.is_some() && r.working_set.is_some());
                let cg = cgroup_name
                    .as_deref()
                    .filter(|_| full || !reported)
                    .map(|p| format!("{p}/{}", c.id))
                    .filter(|n| self.hierarchy.exists(n))
                    .map(|n| self.cgroup(&n, meminfo, now.0, full));
                ContainerSample {
                    id: c.id.clone(),
                    image: c
                        .image
                        .as_ref()
                        .map(|i| i.image.clone())
                        .filter(|i| !i.is_empty())
                        .unwrap_or_else(|| c.image_ref.clone()),
                    created: Time(c.created_at),
                    runtime,
                    cgroup: cg,
                    logs: full
                        .then(|| procfs::disk_usage(&logs_dir.join(&name)))
                        .flatten(),
                    name,
                }
            })
            .collect();
        let net = if full {
            cgroup_name.as_deref().and_then(|p| {
                let pid = self
                    .hierarchy
                    .procs(&format!("{p}/{}", sandbox.id))
                    .into_iter()
                    .next()?;
                if procfs::in_own_netns(pid) {
                    return None;
                }
                procfs::net_dev_of(pid)
            })
        } else {
            None
        };
        let pod_dir = self.dirs.pod_dir(&m.uid);
        let pod_dev = std::fs::metadata(&pod_dir).ok().map(|m| m.dev());
        PodSample {
            pod_ref: PodReference {
                name: m.name.clone(),
                namespace: m.namespace.clone(),
                uid: m.uid.clone(),
            },
            created: Time(sandbox.created_at),
            cgroup,
            net,
            containers,
            volumes: if full {
                self.volumes(&m.uid, pod_dev)
            } else {
                Vec::new()
            },
            logs: full.then(|| procfs::disk_usage(&logs_dir)).flatten(),
            etc_hosts: full
                .then(|| procfs::disk_usage(&pod_dir.join("etc-hosts")))
                .flatten(),
        }
    }

    fn figures(&self, id: &str, s: &cri::ContainerStats) -> RuntimeFigures {
        let v = |x: &Option<cri::UInt64Value>| x.as_ref().map(|v| v.value);
        let cpu = s.cpu.as_ref();
        let mem = s.memory.as_ref();
        let fs = s.writable_layer.as_ref();
        let swap = s.swap.as_ref();
        let cpu_usage = cpu.and_then(|c| v(&c.usage_core_nano_seconds));
        let cpu_time = cpu.map_or(0, |c| c.timestamp);
        let own_rate = cpu_usage.and_then(|u| self.rate(&format!("c:{id}"), cpu_time, u));
        RuntimeFigures {
            cpu_time,
            cpu_usage,
            cpu_rate: cpu.and_then(|c| v(&c.usage_nano_cores)).or(own_rate),
            memory_time: mem.map_or(0, |m| m.timestamp),
            working_set: mem.and_then(|m| v(&m.working_set_bytes)),
            available: mem.and_then(|m| v(&m.available_bytes)),
            usage: mem.and_then(|m| v(&m.usage_bytes)),
            rss: mem.and_then(|m| v(&m.rss_bytes)),
            page_faults: mem.and_then(|m| v(&m.page_faults)),
            major_page_faults: mem.and_then(|m| v(&m.major_page_faults)),
            rootfs_used: fs.and_then(|f| v(&f.used_bytes)),
            rootfs_inodes: fs.and_then(|f| v(&f.inodes_used)),
            rootfs_time: fs.map_or(0, |f| f.timestamp),
            swap_usage: swap.and_then(|s| v(&s.swap_usage_bytes)),
            swap_available: swap.and_then(|s| v(&s.swap_available_bytes)),
        }
    }

    /// Forgets the rates and volume figures of what no longer exists.
    fn prune(&self, snapshot: &Snapshot) {
        let mut live: std::collections::HashSet<String> = std::collections::HashSet::new();
        let cg = |c: &CgroupSample| format!("cg:{}", c.name);
        live.insert(cg(&snapshot.root));
        live.extend(snapshot.pods_cgroup.iter().chain(&snapshot.qos).map(cg));
        for p in &snapshot.pods {
            live.extend(p.cgroup.iter().map(cg));
            for c in &p.containers {
                live.insert(format!("c:{}", c.id));
                live.extend(c.cgroup.iter().map(cg));
            }
        }
        lock(&self.rates).retain(|k, _| live.contains(k));
        let uids: std::collections::HashSet<PathBuf> = snapshot
            .pods
            .iter()
            .map(|p| self.dirs.pod_dir(&p.pod_ref.uid))
            .collect();
        lock(&self.volumes).retain(|path, _| uids.iter().any(|d| path.starts_with(d)));
    }
}
