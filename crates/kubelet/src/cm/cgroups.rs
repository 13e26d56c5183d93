//! Cgroups under the `cgroupfs` driver, as upstream's cgroup manager
//! (`pkg/kubelet/cm/cgroup_manager_linux.go` over libcontainer's fs
//! managers): a cgroup is named by its path from the hierarchy's root
//! (`/kubepods/burstable/pod<uid>`), made in each controller it limits —
//! `cpu` (with `cpuacct`), `memory`, `pids`, `hugetlb` on cgroup v1, the
//! unified tree on v2 (its parents' `cgroup.subtree_control` enabling the
//! controllers) — and given a [`ResourceConfig`]. Never follows a symlink
//! out of the mount: names are checked to be plain relative paths.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The limits of one cgroup; `None` leaves a value as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceConfig {
    /// `cpu.shares` (v1); `cpu.weight` from it on v2.
    pub cpu_shares: Option<u64>,
    /// CFS quota in µs, `-1` unlimited.
    pub cpu_quota: Option<i64>,
    /// CFS period in µs.
    pub cpu_period: Option<u64>,
    /// Memory limit in bytes.
    pub memory: Option<i64>,
    /// Most tasks, `-1` unlimited.
    pub pids_limit: Option<i64>,
    /// Huge page size in bytes → limit in bytes.
    pub hugepage_limits: BTreeMap<i64, i64>,
    /// cgroup v2 files written as they are (`memory.min`, …).
    pub unified: BTreeMap<String, String>,
}

/// Why a cgroup could not be made, changed or removed.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// A name that is not a plain path below the root.
    #[error("invalid cgroup name {0:?}")]
    Name(String),
    /// A file or directory operation failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// The v1 controllers rkube makes cgroups in.
const V1_CONTROLLERS: &[&str] = &["cpu", "memory", "pids", "hugetlb"];
/// The v2 controllers enabled for the children of each parent.
const V2_CONTROLLERS: &[&str] = &["cpu", "memory", "pids", "hugetlb"];

/// Upstream's conversion of `cpu.shares` to `cpu.weight` (cgroup v2).
pub fn shares_to_weight(shares: u64) -> u64 {
    if shares == 0 {
        return 0;
    }
    1 + (shares.saturating_sub(2) * 9999) / 262_142
}

/// `2MB`, `1GB`, … for a huge page size in bytes (the kernel's names).
pub fn hugepage_name(size: i64) -> String {
    const KB: i64 = 1024;
    let units = [(KB * KB * KB, "GB"), (KB * KB, "MB"), (KB, "KB")];
    for (unit, name) in units {
        if size >= unit && size % unit == 0 {
            return format!("{}{name}", size / unit);
        }
    }
    format!("{size}B")
}

/// The cgroup mount and its version.
#[derive(Debug, Clone)]
pub struct Cgroups {
    mount: PathBuf,
    v2: bool,
}

impl Cgroups {
    /// The machine's cgroups (`/sys/fs/cgroup`; v2 when it is the unified
    /// hierarchy).
    pub fn detect() -> Cgroups {
        let mount = PathBuf::from("/sys/fs/cgroup");
        let v2 = mount.join("cgroup.controllers").exists();
        Cgroups { mount, v2 }
    }

    /// Cgroups under another mount (tests).
    pub fn at(mount: &Path, v2: bool) -> Cgroups {
        Cgroups {
            mount: mount.to_path_buf(),
            v2,
        }
    }

    /// The unified hierarchy?
    pub fn v2(&self) -> bool {
        self.v2
    }

    fn relative(name: &str) -> Result<PathBuf, CgroupError> {
        let mut out = PathBuf::new();
        for part in name.split('/').filter(|p| !p.is_empty()) {
            if part == "." || part == ".." || part.contains('\0') {
                return Err(CgroupError::Name(name.to_string()));
            }
            out.push(part);
        }
        Ok(out)
    }

    /// The directories of `name`: one per v1 controller mounted, or the
    /// unified one.
    pub fn dirs(&self, name: &str) -> Result<Vec<(&'static str, PathBuf)>, CgroupError> {
        let rel = Self::relative(name)?;
        if self.v2 {
            return Ok(vec![("unified", self.mount.join(rel))]);
        }
        Ok(V1_CONTROLLERS
            .iter()
            .filter(|c| self.mount.join(c).join("cgroup.procs").exists())
            .map(|c| (*c, self.mount.join(c).join(&rel)))
            .collect())
    }

    /// Does `name` exist (in every controller)?
    pub fn exists(&self, name: &str) -> bool {
        self.dirs(name)
            .is_ok_and(|d| !d.is_empty() && d.iter().all(|(_, p)| p.is_dir()))
    }

    /// Does `name` exist in at least one hierarchy?
    pub fn exists_anywhere(&self, name: &str) -> bool {
        self.all_dirs(name)
            .is_ok_and(|d| d.iter().any(|p| p.is_dir()))
    }

    /// Makes `name` (and its parents) and gives it `config`.
    pub fn create(&self, name: &str, config: &ResourceConfig) -> Result<(), CgroupError> {
        if self.v2 {
            self.enable_controllers(name)?;
        }
        for (_, dir) in self.dirs(name)? {
            std::fs::create_dir_all(&dir).map_err(|source| CgroupError::Io {
                action: "creating",
                path: dir.clone(),
                source,
            })?;
        }
        self.update(name, config)
    }

    /// On v2, each ancestor of `name` enables the controllers for its
    /// children (as libcontainer does), so that the limits can be written.
    fn enable_controllers(&self, name: &str) -> Result<(), CgroupError> {
        let rel = Self::relative(name)?;
        let mut dir = self.mount.clone();
        let available =
            std::fs::read_to_string(self.mount.join("cgroup.controllers")).unwrap_or_default();
        let wanted: Vec<String> = V2_CONTROLLERS
            .iter()
            .filter(|c| available.split_whitespace().any(|a| a == **c))
            .map(|c| format!("+{c}"))
            .collect();
        for part in rel.iter() {
            let control = dir.join("cgroup.subtree_control");
            if control.exists() && !wanted.is_empty() {
                write(&control, &wanted.join(" "))?;
            }
            dir.push(part);
            std::fs::create_dir_all(&dir).map_err(|source| CgroupError::Io {
                action: "creating",
                path: dir.clone(),
                source,
            })?;
        }
        Ok(())
    }

    /// Writes `config` to `name`'s files (the period before the quota, as
    /// the kernel wants it).
    pub fn update(&self, name: &str, config: &ResourceConfig) -> Result<(), CgroupError> {
        for (controller, dir) in self.dirs(name)? {
            for (file, value) in files(controller, config) {
                let path = dir.join(&file);
                // Huge page sizes (and, on v2, the controller) the host
                // lacks: nothing to limit.
                if file.starts_with("hugetlb.") && !path.exists() {
                    continue;
                }
                write(&path, &value)?;
            }
        }
        Ok(())
    }

    /// The CPU quota, period and memory limit `name` holds now (`-1`:
    /// unlimited), as upstream's `GetPodCgroupConfig` reads them.
    pub fn read_limits(&self, name: &str) -> Option<ResourceConfig> {
        let read = |dir: &Path, f: &str| std::fs::read_to_string(dir.join(f)).ok();
        let mut rc = ResourceConfig::default();
        if self.v2 {
            let dir = self.mount.join(Self::relative(name).ok()?);
            let max = read(&dir, "cpu.max")?;
            let mut it = max.split_whitespace();
            rc.cpu_quota = Some(match it.next()? {
                "max" => -1,
                q => q.parse().ok()?,
            });
            rc.cpu_period = it.next().and_then(|p| p.parse().ok());
            rc.memory = Some(match read(&dir, "memory.max")?.trim() {
                "max" => -1,
                m => m.parse().ok()?,
            });
            return Some(rc);
        }
        let dirs = self.dirs(name).ok()?;
        let dir_of = |c: &str| dirs.iter().find(|(k, _)| *k == c).map(|(_, d)| d.clone());
        let cpu = dir_of("cpu")?;
        rc.cpu_quota = read(&cpu, "cpu.cfs_quota_us")?.trim().parse().ok();
        rc.cpu_period = read(&cpu, "cpu.cfs_period_us")?.trim().parse().ok();
        rc.cpu_shares = read(&cpu, "cpu.shares").and_then(|v| v.trim().parse().ok());
        let memory: i64 = read(&dir_of("memory")?, "memory.limit_in_bytes")?
            .trim()
            .parse()
            .unwrap_or(i64::MAX);
        // The kernel's "no limit" is a page-rounded huge number.
        rc.memory = Some(if memory >= 1 << 62 { -1 } else { memory });
        Some(rc)
    }

    /// `name` in every hierarchy mounted (on v1 the runtime makes a pod's
    /// cgroup in each, not only in those rkube limits).
    fn all_dirs(&self, name: &str) -> Result<Vec<PathBuf>, CgroupError> {
        let rel = Self::relative(name)?;
        if self.v2 {
            return Ok(vec![self.mount.join(rel)]);
        }
        let mut out = Vec::new();
        if let Ok(rd) = std::fs::read_dir(&self.mount) {
            for e in rd.flatten() {
                // Real hierarchies only, not the cpu -> cpu,cpuacct links.
                let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
                if is_dir && e.path().join("cgroup.procs").exists() {
                    out.push(e.path().join(&rel));
                }
            }
        }
        Ok(out)
    }

    /// The processes in `name` and below.
    pub fn pids(&self, name: &str) -> Vec<i32> {
        let mut out = Vec::new();
        if let Ok(dirs) = self.all_dirs(name) {
            for dir in dirs {
                collect_pids(&dir, &mut out, 0);
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Kills what still runs in `name` and removes it, deepest first, in
    /// every controller (upstream's pod cgroup removal).
    pub fn destroy(&self, name: &str) -> Result<(), CgroupError> {
        for _ in 0..5 {
            let pids = self.pids(name);
            if pids.is_empty() {
                break;
            }
            for pid in pids {
                kill(pid);
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        for dir in self.all_dirs(name)? {
            remove_tree(&dir)?;
        }
        Ok(())
    }
}

/// SIGKILL to process `pid` (never to a group, init or ourselves).
#[allow(unsafe_code)]
fn kill(pid: i32) {
    if pid <= 1 || pid == std::process::id() as i32 {
        return;
    }
    // SAFETY: kill(2) takes two integers and touches no memory of ours.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
}

fn collect_pids(dir: &Path, out: &mut Vec<i32>, depth: usize) {
    if depth > 16 {
        return;
    }
    if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) {
        out.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
    }
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                collect_pids(&e.path(), out, depth + 1);
            }
        }
    }
}

fn remove_tree(dir: &Path) -> Result<(), CgroupError> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for e in rd.flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            remove_tree(&e.path())?;
        }
    }
    match std::fs::remove_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(CgroupError::Io {
            action: "removing",
            path: dir.to_path_buf(),
            source,
        }),
    }
}

fn write(path: &Path, value: &str) -> Result<(), CgroupError> {
    std::fs::write(path, value).map_err(|source| CgroupError::Io {
        action: "writing",
        path: path.to_path_buf(),
        source,
    })
}

/// The files and values `config` sets in `controller` (`unified`: v2).
pub fn files(controller: &str, c: &ResourceConfig) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut put = |f: &str, v: String| out.push((f.to_string(), v));
    match controller {
        "cpu" => {
            if let Some(s) = c.cpu_shares {
                put("cpu.shares", s.to_string());
            }
            if let Some(p) = c.cpu_period {
                put("cpu.cfs_period_us", p.to_string());
            }
            if let Some(q) = c.cpu_quota {
                put("cpu.cfs_quota_us", q.to_string());
            }
        }
        "memory" => {
            if let Some(m) = c.memory {
                put("memory.limit_in_bytes", m.to_string());
            }
        }
        "pids" => {
            if let Some(p) = c.pids_limit {
                put("pids.max", if p < 0 { "max".into() } else { p.to_string() });
            }
        }
        "hugetlb" => {
            for (size, limit) in &c.hugepage_limits {
                put(
                    &format!("hugetlb.{}.limit_in_bytes", hugepage_name(*size)),
                    limit.to_string(),
                );
            }
        }
        "unified" => {
            if let Some(s) = c.cpu_shares {
                put("cpu.weight", shares_to_weight(s).to_string());
            }
            if c.cpu_quota.is_some() || c.cpu_period.is_some() {
                let quota = match c.cpu_quota {
                    Some(q) if q > 0 => q.to_string(),
                    _ => "max".into(),
                };
                let period = c.cpu_period.unwrap_or(100_000);
                put("cpu.max", format!("{quota} {period}"));
            }
            if let Some(m) = c.memory {
                put(
                    "memory.max",
                    if m <= 0 { "max".into() } else { m.to_string() },
                );
            }
            if let Some(p) = c.pids_limit {
                put("pids.max", if p < 0 { "max".into() } else { p.to_string() });
            }
            for (size, limit) in &c.hugepage_limits {
                put(
                    &format!("hugetlb.{}.max", hugepage_name(*size)),
                    limit.to_string(),
                );
            }
            for (k, v) in &c.unified {
                put(k, v.clone());
            }
        }
        _ => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_and_names_as_upstream() {
        assert_eq!(shares_to_weight(2), 1);
        assert_eq!(shares_to_weight(1024), 39);
        assert_eq!(shares_to_weight(262_144), 10_000);
        assert_eq!(hugepage_name(2 * 1024 * 1024), "2MB");
        assert_eq!(hugepage_name(1024 * 1024 * 1024), "1GB");
        assert_eq!(hugepage_name(64 * 1024), "64KB");
    }

    #[test]
    fn names_stay_below_the_root() {
        let c = Cgroups::at(Path::new("/nonexistent"), true);
        assert!(c.dirs("/kubepods/../../etc").is_err());
        assert!(c.dirs("/kubepods/./x").is_err());
        assert_eq!(
            c.dirs("/r//kubepods/burstable/").unwrap()[0].1,
            Path::new("/nonexistent/r/kubepods/burstable")
        );
    }

    #[test]
    fn v1_files_in_their_controllers() {
        let c = ResourceConfig {
            cpu_shares: Some(512),
            cpu_quota: Some(50_000),
            cpu_period: Some(100_000),
            memory: Some(1 << 30),
            pids_limit: Some(-1),
            hugepage_limits: [(2 * 1024 * 1024, 0)].into(),
            unified: BTreeMap::new(),
        };
        assert_eq!(
            files("cpu", &c),
            vec![
                ("cpu.shares".into(), "512".into()),
                ("cpu.cfs_period_us".into(), "100000".into()),
                ("cpu.cfs_quota_us".into(), "50000".into()),
            ]
        );
        assert_eq!(
            files("memory", &c),
            vec![("memory.limit_in_bytes".into(), "1073741824".into())]
        );
        assert_eq!(files("pids", &c), vec![("pids.max".into(), "max".into())]);
        assert_eq!(
            files("hugetlb", &c),
            vec![("hugetlb.2MB.limit_in_bytes".into(), "0".into())]
        );
        let v2 = files("unified", &c);
        assert!(v2.contains(&("cpu.weight".into(), "20".into())));
        assert!(v2.contains(&("cpu.max".into(), "50000 100000".into())));
        assert!(v2.contains(&("memory.max".into(), "1073741824".into())));
        let unlimited = ResourceConfig {
            cpu_quota: Some(-1),
            cpu_period: Some(100_000),
            ..Default::default()
        };
        assert_eq!(
            files("unified", &unlimited),
            vec![("cpu.max".into(), "max 100000".into())]
        );
    }

    #[test]
    fn made_updated_and_removed_on_a_v2_tree() {
        // A directory standing in for the unified mount: the files are
        // plain files here, so what is written can be read back.
        let root = std::env::temp_dir().join(format!("rkube-cg-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("cgroup.controllers"), "cpuset cpu io memory pids").unwrap();
        std::fs::write(root.join("cgroup.subtree_control"), "").unwrap();
        let cg = Cgroups::at(&root, true);
        let cfg = ResourceConfig {
            memory: Some(4096),
            ..Default::default()
        };
        cg.create("/kubepods/burstable", &cfg).unwrap();
        assert!(cg.exists("/kubepods/burstable"));
        assert_eq!(
            std::fs::read_to_string(root.join("cgroup.subtree_control")).unwrap(),
            "+cpu +memory +pids"
        );
        assert_eq!(
            std::fs::read_to_string(root.join("kubepods/burstable/memory.max")).unwrap(),
            "4096"
        );
        std::fs::write(root.join("kubepods/burstable/cgroup.procs"), "").unwrap();
        assert!(cg.pids("/kubepods").is_empty());
        std::fs::write(root.join("kubepods/burstable/cpu.max"), "max 100000\n").unwrap();
        let now = cg.read_limits("/kubepods/burstable").unwrap();
        assert_eq!(
            (now.cpu_quota, now.cpu_period, now.memory),
            (Some(-1), Some(100_000), Some(4096))
        );
        std::fs::remove_file(root.join("kubepods/burstable/cpu.max")).unwrap();
        // Plain files stand in for the kernel's here: removed by hand.
        for f in ["memory.max", "cgroup.procs"] {
            std::fs::remove_file(root.join("kubepods/burstable").join(f)).unwrap();
        }
        cg.destroy("/kubepods/burstable").unwrap();
        assert!(!cg.exists("/kubepods/burstable"));
        let _ = std::fs::remove_dir_all(&root);
    }
}
