//! Facts about the real machine: CPU count, memory, host name, an IP
//! address, OS details for `nodeInfo`, and free memory for MemoryPressure.

use std::collections::BTreeMap;

use rkube_model::Quantity;

/// The kubelet version reported in `nodeInfo.kubeletVersion`.
pub fn kubelet_version() -> String {
    format!("v{}-rkube", rkube_model::version::KUBERNETES_VERSION)
}

/// The Go-style architecture name (`amd64`, `arm64`, ...).
pub fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        "s390x" => "s390x",
        "arm" => "arm",
        other => other,
    }
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The host name, lower-cased (the default node name).
pub fn hostname() -> String {
    let h = read("/proc/sys/kernel/hostname");
    if h.is_empty() {
        std::env::var("HOSTNAME").unwrap_or_else(|_| "localhost".into())
    } else {
        h.to_lowercase()
    }
}

pub use crate::stats::procfs::meminfo_bytes;

/// Capacity of this machine: cpu (cores), memory (MemTotal), pods and
/// ephemeral-storage (the filesystem of the kubelet's root directory).
pub fn capacity(max_pods: i32, root_dir: &std::path::Path) -> BTreeMap<String, Quantity> {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get() as i64)
        .unwrap_or(1);
    let mem = meminfo_bytes(&read("/proc/meminfo"), "MemTotal").unwrap_or(0);
    let mut c: BTreeMap<String, Quantity> = [
        ("cpu".to_string(), Quantity::from_units(cpus)),
        ("memory".to_string(), Quantity::from_units(mem)),
        ("pods".to_string(), Quantity::from_units(max_pods as i64)),
    ]
    .into();
    // The root directory's filesystem, as upstream's container manager
    // reads it (cadvisor's RootFsInfo); left out when it cannot be read.
    if let Some(fs) = crate::stats::statvfs(root_dir) {
        c.insert(
            "ephemeral-storage".into(),
            Quantity::from_units(i64::try_from(fs.capacity).unwrap_or(i64::MAX)),
        );
    }
    c
}

/// Free memory (MemAvailable), for the memory.available signal.
pub fn memory_available() -> Option<i64> {
    meminfo_bytes(&read("/proc/meminfo"), "MemAvailable")
}

/// The address of the interface of the default route (no packet is sent),
/// else 127.0.0.1.
pub fn detect_ip() -> String {
    std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| {
            s.connect("192.0.2.1:9")?;
            s.local_addr()
        })
        .map(|a| a.ip().to_string())
        .unwrap_or_else(|_| "127.0.0.1".into())
}

/// OS facts for `nodeInfo`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OsInfo {
    /// /etc/machine-id.
    pub machine_id: String,
    /// /sys/class/dmi/id/product_uuid (often root-only).
    pub system_uuid: String,
    /// /proc/sys/kernel/random/boot_id.
    pub boot_id: String,
    /// /proc/sys/kernel/osrelease.
    pub kernel_version: String,
    /// PRETTY_NAME of /etc/os-release.
    pub os_image: String,
}

/// Reads the OS facts.
pub fn os_info() -> OsInfo {
    let os_release = read("/etc/os-release");
    let os_image = os_release
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_string())
        .unwrap_or_else(|| "Linux".into());
    OsInfo {
        machine_id: read("/etc/machine-id"),
        system_uuid: read("/sys/class/dmi/id/product_uuid"),
        boot_id: read("/proc/sys/kernel/random/boot_id"),
        kernel_version: read("/proc/sys/kernel/osrelease"),
        os_image,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo() {
        let t = "MemTotal:       16309340 kB\nMemFree:  100 kB\nMemAvailable:   8000000 kB\n";
        assert_eq!(meminfo_bytes(t, "MemTotal"), Some(16309340 * 1024));
        assert_eq!(meminfo_bytes(t, "MemAvailable"), Some(8_000_000 * 1024));
        assert_eq!(meminfo_bytes(t, "Mem"), None);
    }

    #[test]
    fn this_machine() {
        let c = capacity(110, std::path::Path::new("/"));
        assert!(c["cpu"].value() >= 1);
        assert_eq!(c["pods"].value(), 110);
        // The root filesystem's size; none for a directory that is not there.
        let root = crate::stats::statvfs(std::path::Path::new("/")).unwrap();
        assert_eq!(c["ephemeral-storage"].value() as u64, root.capacity);
        assert!(!capacity(110, std::path::Path::new("/nonexistent/rkube"))
            .contains_key("ephemeral-storage"));
        assert!(kubelet_version().starts_with("v1.37."));
        assert!(detect_ip().parse::<std::net::IpAddr>().is_ok());
    }
}

/// Whether swap is on, read as upstream's `IsSwapOn`: `/proc/swaps` has
/// more lines than its header (a missing file: no swap).
pub fn swap_is_on() -> std::io::Result<bool> {
    match std::fs::read_to_string("/proc/swaps") {
        Ok(s) => Ok(swaps_listed(&s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

fn swaps_listed(proc_swaps: &str) -> bool {
    proc_swaps.trim().lines().count() > 1
}

/// Upstream's refusal when `failSwapOn` is set on a host with swap on.
pub const SWAP_ON_REFUSAL: &str =
    "running with swap on is not supported, please disable swap or set --fail-swap-on flag to false";

/// Upstream's refusal of a host using cgroup v1 (`failCgroupV1`, default
/// true).
pub const CGROUP_V1_REFUSAL: &str = "kubelet is configured to not run on a host using cgroup v1. cgroup v1 support is unsupported and will be removed in a future release";

#[cfg(test)]
mod swap_tests {
    use super::*;

    #[test]
    fn proc_swaps_as_upstream_reads_it() {
        assert!(!swaps_listed("Filename\tType\tSize\tUsed\tPriority\n"));
        assert!(!swaps_listed(""));
        assert!(swaps_listed(
            "Filename\tType\tSize\tUsed\tPriority\n/swapfile file 1048572 0 -2\n"
        ));
    }
}

/// Upstream's `oomScoreAdj` for the kubelet's own process (-999 by
/// default: the kernel kills it last).
pub fn set_oom_score_adj(value: i32) -> std::io::Result<()> {
    std::fs::write("/proc/self/oom_score_adj", value.to_string())
}

/// Upstream's `maxOpenFiles`: the process's soft and hard `RLIMIT_NOFILE`.
#[allow(unsafe_code)]
pub fn set_max_open_files(n: u64) -> std::io::Result<()> {
    let limit = libc::rlimit {
        rlim_cur: n as libc::rlim_t,
        rlim_max: n as libc::rlim_t,
    };
    // SAFETY: setrlimit(2) reads the one struct passed by reference, which
    // lives across the call.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
