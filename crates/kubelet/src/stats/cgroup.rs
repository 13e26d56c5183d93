//! Reading a cgroup's usage and settings, on either hierarchy: cgroup v2
//! (one tree, `cpu.stat`, `memory.current`, `memory.stat`,
//! `memory.events`, `pids.current`, `cpu.max`, `cpu.weight`,
//! `memory.max`) and cgroup v1 (one tree per controller: `cpuacct.usage`,
//! `cpuacct.stat`, `cpu.stat`, `cpu.shares`, `cpu.cfs_*`,
//! `memory.usage_in_bytes`, `memory.stat`, `memory.failcnt`,
//! `memory.max_usage_in_bytes`, `memory.oom_control`, `pids.current`,
//! `blkio.throttle.io_service{_bytes,d}_recursive`); block I/O per device
//! from v2's `io.stat`.
//!
//! The figures are cAdvisor's (what upstream's kubelet reports through
//! it): working set = usage − inactive file pages (never below 0); RSS is
//! `anon` (v2) or `total_rss` (v1); page faults are the cgroup's own
//! `pgfault`/`pgmajfault`. The root cgroup on v2 has no `memory.current`:
//! its usage is MemTotal − MemFree, as runc reads it. A file that is
//! missing or unreadable leaves its figure out (`None`); nothing is
//! guessed.
//!
//! The files are flat `key value` lines or single numbers: a parser of a
//! dozen lines each, tested against fixture trees below, where a cgroup
//! library would bring a crate tree of its own for the same reads.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Files larger than this are not cgroup files (read no further).
const MAX_FILE: u64 = 256 * 1024;

/// Where the controllers are mounted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hierarchy {
    /// cgroup v2: one tree.
    V2(PathBuf),
    /// cgroup v1: one tree per controller (`None`: not mounted).
    V1 {
        /// The `cpu` controller.
        cpu: Option<PathBuf>,
        /// The `cpuacct` controller.
        cpuacct: Option<PathBuf>,
        /// The `memory` controller.
        memory: Option<PathBuf>,
        /// The `pids` controller.
        pids: Option<PathBuf>,
        /// The `blkio` controller.
        blkio: Option<PathBuf>,
    },
}

impl Hierarchy {
    /// The hierarchy mounted under `base` (`/sys/fs/cgroup`): v2 when
    /// `base/cgroup.controllers` exists, else the v1 controllers found
    /// (`cpu,cpuacct` co-mounted or apart).
    pub fn detect(base: &Path) -> Hierarchy {
        if base.join("cgroup.controllers").is_file() {
            return Hierarchy::V2(base.to_path_buf());
        }
        let find = |names: &[&str], file: &str| {
            names
                .iter()
                .map(|n| base.join(n))
                .find(|p| p.join(file).exists())
        };
        Hierarchy::V1 {
            cpu: find(&["cpu", "cpu,cpuacct", "cpuacct,cpu"], "cpu.shares"),
            cpuacct: find(&["cpuacct", "cpu,cpuacct", "cpuacct,cpu"], "cpuacct.usage"),
            memory: find(&["memory"], "memory.usage_in_bytes"),
            pids: find(&["pids"], "cgroup.procs"),
            blkio: find(&["blkio"], "blkio.throttle.io_serviced_recursive"),
        }
    }

    /// True on cgroup v2.
    pub fn is_v2(&self) -> bool {
        matches!(self, Hierarchy::V2(_))
    }

    /// Reads cgroup `name` (`/kubepods/burstable/pod…`, `/` for the
    /// root). `meminfo` is `/proc/meminfo`'s text (the v2 root's usage).
    pub fn read(&self, name: &str, meminfo: &str) -> CgroupStats {
        self.read_with(name, meminfo, true)
    }

    /// As [`Hierarchy::read`]; without `all`, only CPU usage, memory usage
    /// and the memory limit (a third of the files: what the Summary's CPU
    /// and memory need).
    pub fn read_with(&self, name: &str, meminfo: &str, all: bool) -> CgroupStats {
        let rel = name.trim_start_matches('/');
        let at = |base: &Option<PathBuf>| base.as_ref().map(|b| b.join(rel));
        match self {
            Hierarchy::V2(base) => read_v2(&base.join(rel), rel.is_empty(), meminfo, all),
            Hierarchy::V1 {
                cpu,
                cpuacct,
                memory,
                pids,
                blkio,
            } => {
                let mut s = read_v1(
                    at(cpu).as_deref(),
                    at(cpuacct).as_deref(),
                    at(memory).as_deref(),
                    at(pids).as_deref(),
                    all,
                );
                if all {
                    s.io = at(blkio).map(|d| io_v1(&d)).unwrap_or_default();
                }
                s
            }
        }
    }

    /// Whether cgroup `name` exists (in the memory controller on v1).
    pub fn exists(&self, name: &str) -> bool {
        let rel = name.trim_start_matches('/');
        match self {
            Hierarchy::V2(base) => base.join(rel).is_dir(),
            Hierarchy::V1 {
                memory, cpuacct, ..
            } => memory
                .as_ref()
                .or(cpuacct.as_ref())
                .is_some_and(|b| b.join(rel).is_dir()),
        }
    }

    /// The processes of cgroup `name` (its own, not its children's).
    pub fn procs(&self, name: &str) -> Vec<u32> {
        let rel = name.trim_start_matches('/');
        let dir = match self {
            Hierarchy::V2(base) => Some(base.join(rel)),
            Hierarchy::V1 {
                memory, cpuacct, ..
            } => memory.as_ref().or(cpuacct.as_ref()).map(|b| b.join(rel)),
        };
        dir.and_then(|d| read(&d.join("cgroup.procs")))
            .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }
}

/// CPU usage of a cgroup.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuStats {
    /// Total CPU time, nanoseconds.
    pub usage_ns: u64,
    /// User time, nanoseconds.
    pub user_ns: Option<u64>,
    /// System time, nanoseconds.
    pub system_ns: Option<u64>,
    /// CFS enforcement periods elapsed.
    pub periods: Option<u64>,
    /// Periods in which the cgroup was throttled.
    pub throttled_periods: Option<u64>,
    /// Time throttled, nanoseconds.
    pub throttled_ns: Option<u64>,
}

/// Memory usage of a cgroup.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Usage, bytes (v1 `memory.usage_in_bytes`, v2 `memory.current`).
    pub usage: u64,
    /// Usage − inactive file pages.
    pub working_set: u64,
    /// Anonymous memory (v2 `anon`, v1 `total_rss`).
    pub rss: Option<u64>,
    /// Page cache (v2 `file`, v1 `total_cache`).
    pub cache: Option<u64>,
    /// Memory-mapped files.
    pub mapped_file: Option<u64>,
    /// Inactive file pages.
    pub inactive_file: Option<u64>,
    /// Active file pages.
    pub active_file: Option<u64>,
    /// Kernel memory (v2 `kernel`, v1 `memory.kmem.usage_in_bytes`).
    pub kernel: Option<u64>,
    /// Dirty file pages.
    pub dirty: Option<u64>,
    /// File pages under writeback.
    pub writeback: Option<u64>,
    /// Swap used (v2 `memory.swap.current`, v1 `total_swap`).
    pub swap: Option<u64>,
    /// Page faults of the cgroup itself.
    pub pgfault: Option<u64>,
    /// Major page faults of the cgroup itself.
    pub pgmajfault: Option<u64>,
    /// Times the limit was hit (v1 `memory.failcnt`, v2 `max` events).
    pub failcnt: Option<u64>,
    /// Peak usage (v1 `memory.max_usage_in_bytes`, v2 `memory.peak`).
    pub max_usage: Option<u64>,
    /// OOM kills in the cgroup (v2 `oom_kill`, v1 `oom_kill` of
    /// `memory.oom_control`).
    pub oom_kills: Option<u64>,
}

/// A cgroup's limits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Spec {
    /// CPU shares (v2: `cpu.weight` converted back, as cAdvisor does).
    pub cpu_shares: Option<u64>,
    /// CFS quota, microseconds (`None`: unlimited).
    pub cpu_quota: Option<u64>,
    /// CFS period, microseconds.
    pub cpu_period: Option<u64>,
    /// Memory limit, bytes (`None`: unlimited).
    pub memory_limit: Option<u64>,
    /// Soft limit / `memory.low`, bytes (`None`: none).
    pub memory_reservation: Option<u64>,
    /// Swap limit, bytes (`None`: unlimited or unknown).
    pub swap_limit: Option<u64>,
}

/// Block I/O of a cgroup on one device.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoDevice {
    /// The device's major number.
    pub major: u32,
    /// The device's minor number.
    pub minor: u32,
    /// Bytes read.
    pub read_bytes: u64,
    /// Bytes written.
    pub write_bytes: u64,
    /// Reads completed.
    pub reads: u64,
    /// Writes completed.
    pub writes: u64,
}

/// v2's `io.stat`: `MAJ:MIN rbytes=… wbytes=… rios=… wios=… …` per device.
pub fn parse_io_stat(text: &str) -> Vec<IoDevice> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let (major, minor) = it.next()?.split_once(':')?;
            let mut d = IoDevice {
                major: major.parse().ok()?,
                minor: minor.parse().ok()?,
                ..Default::default()
            };
            for kv in it {
                let Some((k, v)) = kv.split_once('=') else {
                    continue;
                };
                let v: u64 = v.parse().unwrap_or(0);
                match k {
                    "rbytes" => d.read_bytes = v,
                    "wbytes" => d.write_bytes = v,
                    "rios" => d.reads = v,
                    "wios" => d.writes = v,
                    _ => {}
                }
            }
            Some(d)
        })
        .collect()
}

/// v1's `blkio.throttle.*_recursive`: `MAJ:MIN Read|Write|… N` lines,
/// `Total N` last. Adds `bytes` (true) or counts to `out`.
pub fn parse_blkio(text: &str, bytes: bool, out: &mut Vec<IoDevice>) {
    for l in text.lines() {
        let mut it = l.split_whitespace();
        let (Some(dev), Some(op), Some(v)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        let Some((major, minor)) = dev.split_once(':') else {
            continue;
        };
        let (Ok(major), Ok(minor), Ok(v)) = (major.parse(), minor.parse(), v.parse::<u64>()) else {
            continue;
        };
        let i = match out
            .iter()
            .position(|d| (d.major, d.minor) == (major, minor))
        {
            Some(i) => i,
            None => {
                out.push(IoDevice {
                    major,
                    minor,
                    ..Default::default()
                });
                out.len() - 1
            }
        };
        let d = &mut out[i];
        match (op, bytes) {
            ("Read", true) => d.read_bytes = v,
            ("Write", true) => d.write_bytes = v,
            ("Read", false) => d.reads = v,
            ("Write", false) => d.writes = v,
            _ => {}
        }
    }
}

fn io_v1(dir: &Path) -> Vec<IoDevice> {
    let mut out = Vec::new();
    if let Some(t) = read(&dir.join("blkio.throttle.io_service_bytes_recursive")) {
        parse_blkio(&t, true, &mut out);
    }
    if let Some(t) = read(&dir.join("blkio.throttle.io_serviced_recursive")) {
        parse_blkio(&t, false, &mut out);
    }
    out
}

/// One read of a cgroup.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupStats {
    /// CPU usage (absent when unreadable).
    pub cpu: Option<CpuStats>,
    /// Memory usage (absent when unreadable).
    pub memory: Option<MemoryStats>,
    /// Tasks (`pids.current`).
    pub pids: Option<u64>,
    /// Block I/O per device.
    pub io: Vec<IoDevice>,
    /// Limits.
    pub spec: Spec,
}

fn read(path: &Path) -> Option<String> {
    use std::io::Read;
    let f = std::fs::File::open(path).ok()?;
    let mut s = String::new();
    f.take(MAX_FILE).read_to_string(&mut s).ok()?;
    Some(s)
}

fn read_u64(path: &Path) -> Option<u64> {
    read(path)?.trim().parse().ok()
}

/// `key value` lines (`memory.stat`, `cpu.stat`, `memory.events`).
pub fn flat_keyed(text: &str) -> HashMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let (k, v) = (it.next()?, it.next()?);
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

fn keyed(path: &Path) -> Option<HashMap<String, u64>> {
    Some(flat_keyed(&read(path)?))
}

/// `meminfo`'s field in bytes.
fn meminfo(text: &str, key: &str) -> Option<u64> {
    super::procfs::meminfo_bytes(text, key).and_then(|v| u64::try_from(v).ok())
}

/// cgroup v2's `max` or a number.
fn max_or(text: &str) -> Option<u64> {
    match text.trim() {
        "max" => None,
        v => v.parse().ok(),
    }
}

/// cAdvisor's inverse of the shares → weight mapping.
fn weight_to_shares(weight: u64) -> u64 {
    2 + (weight.saturating_sub(1) * 262_142) / 9_999
}

fn read_v2(dir: &Path, root: bool, meminfo_text: &str, all: bool) -> CgroupStats {
    // a file only read for everything
    let extra = |f: &str| all.then(|| read(&dir.join(f))).flatten();
    let cpu = keyed(&dir.join("cpu.stat")).and_then(|s| {
        let us = |k: &str| s.get(k).map(|v| v.saturating_mul(1000));
        Some(CpuStats {
            usage_ns: us("usage_usec")?,
            user_ns: us("user_usec"),
            system_ns: us("system_usec"),
            periods: s.get("nr_periods").copied(),
            throttled_periods: s.get("nr_throttled").copied(),
            throttled_ns: us("throttled_usec"),
        })
    });
    let stat = keyed(&dir.join("memory.stat"));
    let usage = if root {
        meminfo(meminfo_text, "MemTotal")
            .zip(meminfo(meminfo_text, "MemFree"))
            .map(|(t, f)| t.saturating_sub(f))
    } else {
        read_u64(&dir.join("memory.current"))
    };
    let events = extra("memory.events").map(|t| flat_keyed(&t));
    let num = |f: &str| extra(f).and_then(|t| t.trim().parse().ok());
    let memory = usage.map(|usage| {
        let get = |k: &str| stat.as_ref().and_then(|s| s.get(k).copied());
        let inactive = get("inactive_file");
        MemoryStats {
            usage,
            working_set: usage.saturating_sub(inactive.unwrap_or(0)),
            rss: get("anon"),
            cache: get("file"),
            mapped_file: get("file_mapped"),
            inactive_file: inactive,
            active_file: get("active_file"),
            kernel: get("kernel"),
            dirty: get("file_dirty"),
            writeback: get("file_writeback"),
            swap: num("memory.swap.current"),
            pgfault: get("pgfault"),
            pgmajfault: get("pgmajfault"),
            failcnt: events.as_ref().and_then(|e| e.get("max").copied()),
            max_usage: num("memory.peak"),
            oom_kills: events.as_ref().and_then(|e| e.get("oom_kill").copied()),
        }
    });
    let (quota, period) = extra("cpu.max")
        .map(|t| {
            let mut it = t.split_whitespace();
            let q = it.next().and_then(max_or);
            let p = it.next().and_then(|p| p.parse().ok());
            (q, p)
        })
        .unwrap_or((None, None));
    let low = extra("memory.low").and_then(|t| max_or(&t));
    CgroupStats {
        cpu,
        memory,
        pids: num("pids.current"),
        io: extra("io.stat")
            .map(|t| parse_io_stat(&t))
            .unwrap_or_default(),
        spec: Spec {
            cpu_shares: num("cpu.weight").map(weight_to_shares),
            cpu_quota: quota,
            cpu_period: period,
            memory_limit: read(&dir.join("memory.max")).and_then(|t| max_or(&t)),
            memory_reservation: low.filter(|v| *v > 0),
            swap_limit: extra("memory.swap.max").and_then(|t| max_or(&t)),
        },
    }
}

/// v1 "unlimited" is a huge page-aligned number (≥ 2^62 here).
fn v1_limit(v: u64) -> Option<u64> {
    (v < (1 << 62)).then_some(v)
}

/// USER_HZ ticks of `cpuacct.stat` (100 on every Linux ABI rkube runs on).
const USER_HZ_NS: u64 = 10_000_000;

fn read_v1(
    cpu: Option<&Path>,
    cpuacct: Option<&Path>,
    memory: Option<&Path>,
    pids: Option<&Path>,
    all: bool,
) -> CgroupStats {
    // a file only read for everything
    let extra = |d: Option<&Path>, f: &str| d.filter(|_| all).and_then(|d| read(&d.join(f)));
    let num = |d: Option<&Path>, f: &str| extra(d, f).and_then(|t| t.trim().parse::<u64>().ok());
    let kv = |d: Option<&Path>, f: &str| extra(d, f).map(|t| flat_keyed(&t));
    let cpu_stat = kv(cpu, "cpu.stat");
    let cpu_usage = cpuacct.and_then(|d| {
        let usage = read_u64(&d.join("cpuacct.usage"))?;
        let st = kv(Some(d), "cpuacct.stat");
        let ticks = |k: &str| {
            st.as_ref()
                .and_then(|s| s.get(k))
                .map(|t| t.saturating_mul(USER_HZ_NS))
        };
        Some(CpuStats {
            usage_ns: usage,
            user_ns: ticks("user"),
            system_ns: ticks("system"),
            periods: cpu_stat.as_ref().and_then(|s| s.get("nr_periods").copied()),
            throttled_periods: cpu_stat
                .as_ref()
                .and_then(|s| s.get("nr_throttled").copied()),
            throttled_ns: cpu_stat
                .as_ref()
                .and_then(|s| s.get("throttled_time").copied()),
        })
    });
    let mem = memory.and_then(|d| {
        let usage = read_u64(&d.join("memory.usage_in_bytes"))?;
        let stat = keyed(&d.join("memory.stat"));
        let get = |k: &str| stat.as_ref().and_then(|s| s.get(k).copied());
        let inactive = get("total_inactive_file");
        let oom = kv(Some(d), "memory.oom_control");
        Some(MemoryStats {
            usage,
            working_set: usage.saturating_sub(inactive.unwrap_or(0)),
            rss: get("total_rss"),
            cache: get("total_cache"),
            mapped_file: get("total_mapped_file"),
            inactive_file: inactive,
            active_file: get("total_active_file"),
            kernel: num(Some(d), "memory.kmem.usage_in_bytes"),
            dirty: get("total_dirty"),
            writeback: get("total_writeback"),
            swap: get("total_swap"),
            pgfault: get("pgfault"),
            pgmajfault: get("pgmajfault"),
            failcnt: num(Some(d), "memory.failcnt"),
            max_usage: num(Some(d), "memory.max_usage_in_bytes"),
            oom_kills: oom.as_ref().and_then(|o| o.get("oom_kill").copied()),
        })
    });
    let quota = extra(cpu, "cpu.cfs_quota_us")
        .and_then(|t| t.trim().parse::<i64>().ok())
        .and_then(|q| u64::try_from(q).ok());
    CgroupStats {
        cpu: cpu_usage,
        memory: mem,
        pids: num(pids, "pids.current"),
        io: Vec::new(),
        spec: Spec {
            cpu_shares: num(cpu, "cpu.shares"),
            cpu_quota: quota,
            cpu_period: num(cpu, "cpu.cfs_period_us"),
            memory_limit: memory
                .and_then(|d| read_u64(&d.join("memory.limit_in_bytes")))
                .and_then(v1_limit),
            memory_reservation: num(memory, "memory.soft_limit_in_bytes").and_then(v1_limit),
            swap_limit: num(memory, "memory.memsw.limit_in_bytes").and_then(v1_limit),
        },
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Writes `files` (path → content) under a fresh directory.
    pub(crate) fn tree(name: &str, files: &[(&str, &str)]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("rkube-cg-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (p, c) in files {
            let p = dir.join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, c).unwrap();
        }
        dir
    }

    pub(crate) const MEMINFO: &str = "MemTotal:       1000 kB\nMemFree:         400 kB\n";

    #[test]
    fn cgroup_v2_files() {
        let d = tree(
            "v2",
            &[
                ("cgroup.controllers", "cpu memory pids\n"),
                ("cpu.stat", "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\nnr_periods 10\nnr_throttled 2\nthrottled_usec 30\n"),
                ("memory.stat", "anon 4096\nfile 8192\nfile_mapped 100\ninactive_file 3000\nactive_file 5192\npgfault 77\npgmajfault 1\n"),
                ("k/p/memory.current", "10000\n"),
                ("k/p/memory.stat", "anon 6000\nfile 4000\ninactive_file 12000\npgfault 5\npgmajfault 0\n"),
                ("k/p/memory.events", "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n"),
                ("k/p/memory.max", "max\n"),
                ("k/p/cpu.max", "50000 100000\n"),
                ("k/p/cpu.weight", "4\n"),
                ("k/p/pids.current", "7\n"),
                ("k/p/cpu.stat", "usage_usec 20\n"),
                ("k/p/io.stat", "8:0 rbytes=4096 wbytes=8192 rios=1 wios=2 dbytes=0 dios=0\n253:1 rbytes=1 wbytes=0 rios=1 wios=0\n"),
            ],
        );
        let h = Hierarchy::detect(&d);
        assert!(h.is_v2());
        // the root: usage from meminfo (1000 kB − 400 kB)
        let root = h.read("/", MEMINFO);
        let m = root.memory.unwrap();
        assert_eq!(m.usage, 600 * 1024);
        assert_eq!(m.working_set, 600 * 1024 - 3000);
        assert_eq!((m.rss, m.pgfault), (Some(4096), Some(77)));
        let c = root.cpu.unwrap();
        assert_eq!(c.usage_ns, 1_500_000);
        assert_eq!((c.periods, c.throttled_ns), (Some(10), Some(30_000)));
        let p = h.read("/k/p", MEMINFO);
        let m = p.memory.unwrap();
        // inactive_file above usage: the working set stops at 0
        assert_eq!((m.usage, m.working_set), (10000, 0));
        assert_eq!((m.failcnt, m.oom_kills), (Some(3), Some(1)));
        assert_eq!(p.pids, Some(7));
        assert_eq!(
            p.io,
            [
                IoDevice {
                    major: 8,
                    minor: 0,
                    read_bytes: 4096,
                    write_bytes: 8192,
                    reads: 1,
                    writes: 2
                },
                IoDevice {
                    major: 253,
                    minor: 1,
                    read_bytes: 1,
                    write_bytes: 0,
                    reads: 1,
                    writes: 0
                },
            ]
        );
        assert_eq!(p.spec.memory_limit, None);
        assert_eq!(
            (p.spec.cpu_quota, p.spec.cpu_period),
            (Some(50000), Some(100000))
        );
        // weight 4 (what cpu shares 102 become) reads back as cAdvisor's 80
        assert_eq!(p.spec.cpu_shares, Some(80));
        // CPU and memory only: no limits but the memory one, no events
        let u = h.read_with("/k/p", MEMINFO, false);
        assert_eq!(u.memory.unwrap().usage, 10000);
        assert_eq!(u.memory.unwrap().failcnt, None);
        assert_eq!((u.pids, u.spec.cpu_quota), (None, None));
        assert!(u.io.is_empty());
        // a missing cgroup reads as nothing
        assert_eq!(h.read("/k/gone", MEMINFO), CgroupStats::default());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn cgroup_v1_files() {
        let d = tree(
            "v1",
            &[
                ("cpu/cpu.shares", "1024\n"),
                ("cpu/k/cpu.shares", "102\n"),
                ("cpu/k/cpu.cfs_quota_us", "-1\n"),
                ("cpu/k/cpu.cfs_period_us", "100000\n"),
                ("cpu/k/cpu.stat", "nr_periods 4\nnr_throttled 1\nthrottled_time 900\n"),
                ("cpuacct/cpuacct.usage", "5\n"),
                ("cpuacct/k/cpuacct.usage", "123456789\n"),
                ("cpuacct/k/cpuacct.stat", "user 10\nsystem 2\n"),
                ("memory/memory.usage_in_bytes", "1\n"),
                ("memory/k/memory.usage_in_bytes", "50000\n"),
                ("memory/k/memory.stat", "cache 1\nrss 2\npgfault 9\npgmajfault 1\ntotal_cache 30000\ntotal_rss 20000\ntotal_inactive_file 8000\ntotal_pgfault 99\n"),
                ("memory/k/memory.limit_in_bytes", "9223372036854771712\n"),
                ("memory/k/memory.failcnt", "0\n"),
                ("memory/k/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n"),
                ("pids/cgroup.procs", "1\n"),
                ("pids/k/pids.current", "3\n"),
                ("blkio/blkio.throttle.io_serviced_recursive", "Total 0\n"),
                ("blkio/k/blkio.throttle.io_service_bytes_recursive", "8:0 Read 4096\n8:0 Write 512\n8:0 Sync 0\n8:0 Total 4608\nTotal 4608\n"),
                ("blkio/k/blkio.throttle.io_serviced_recursive", "8:0 Read 3\n8:0 Write 1\nTotal 4\n"),
            ],
        );
        let h = Hierarchy::detect(&d);
        assert!(!h.is_v2());
        let k = h.read("/k", MEMINFO);
        let c = k.cpu.unwrap();
        assert_eq!(c.usage_ns, 123456789);
        assert_eq!(
            (c.user_ns, c.system_ns),
            (Some(100_000_000), Some(20_000_000))
        );
        assert_eq!(c.throttled_ns, Some(900));
        let m = k.memory.unwrap();
        assert_eq!((m.usage, m.working_set), (50000, 42000));
        assert_eq!(
            (m.rss, m.cache, m.pgfault),
            (Some(20000), Some(30000), Some(9))
        );
        assert_eq!(m.oom_kills, Some(2));
        assert_eq!(k.spec.memory_limit, None, "v1's unlimited");
        assert_eq!((k.spec.cpu_shares, k.spec.cpu_quota), (Some(102), None));
        assert_eq!(k.pids, Some(3));
        assert_eq!(
            k.io,
            [IoDevice {
                major: 8,
                minor: 0,
                read_bytes: 4096,
                write_bytes: 512,
                reads: 3,
                writes: 1
            }]
        );
        assert!(h.exists("/k") && !h.exists("/nope"));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn keyed_lines_skip_what_is_not_a_number() {
        let m = flat_keyed("a 1\nb x\n\nc 3 extra\nd\n");
        assert_eq!(m.get("a"), Some(&1));
        assert_eq!(m.get("b"), None);
        assert_eq!(m.get("c"), Some(&3));
        assert_eq!(m.len(), 2);
    }
}
