//! What the stats read from `/proc`: network interfaces of a network
//! namespace (`/proc/<pid>/net/dev`), the boot time (`btime` of
//! `/proc/stat`), swap (`/proc/meminfo`), and disk usage of a directory
//! tree (`du`: allocated blocks and inodes, symlinks not followed, other
//! filesystems not entered).

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// One interface's counters (`/proc/net/dev`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetDev {
    /// The interface.
    pub name: String,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Packets received.
    pub rx_packets: u64,
    /// Receive errors.
    pub rx_errors: u64,
    /// Received packets dropped.
    pub rx_dropped: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Send errors.
    pub tx_errors: u64,
    /// Sent packets dropped.
    pub tx_dropped: u64,
}

/// Interfaces cAdvisor leaves out: loopback, veth ends of other
/// namespaces, docker's and nerdctl's bridges.
pub fn ignored_interface(name: &str) -> bool {
    name == "lo"
        || name.starts_with("veth")
        || name.starts_with("docker")
        || name.starts_with("nerdctl")
}

/// Parses `/proc/net/dev` (two header lines, then `name: 16 counters`),
/// without the ignored interfaces.
pub fn parse_net_dev(text: &str) -> Vec<NetDev> {
    text.lines()
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            let name = name.trim();
            if name.is_empty() || ignored_interface(name) {
                return None;
            }
            let v: Vec<u64> = rest
                .split_whitespace()
                .map(|x| x.parse().ok())
                .collect::<Option<_>>()?;
            if v.len() < 16 {
                return None;
            }
            Some(NetDev {
                name: name.to_string(),
                rx_bytes: v[0],
                rx_packets: v[1],
                rx_errors: v[2],
                rx_dropped: v[3],
                tx_bytes: v[8],
                tx_packets: v[9],
                tx_errors: v[10],
                tx_dropped: v[11],
            })
        })
        .collect()
}

/// The interfaces of process `pid`'s network namespace (`None`: gone or
/// unreadable).
pub fn net_dev_of(pid: u32) -> Option<Vec<NetDev>> {
    let text = read_small(&Path::new("/proc").join(pid.to_string()).join("net/dev"))?;
    Some(parse_net_dev(&text))
}

/// True when `pid` shares this process's network namespace.
pub fn in_own_netns(pid: u32) -> bool {
    let a = std::fs::read_link(format!("/proc/{pid}/ns/net"));
    let b = std::fs::read_link("/proc/self/ns/net");
    matches!((a, b), (Ok(a), Ok(b)) if a == b)
}

/// (the most processes the node may run, tasks running):
/// min(`pid_max`, `threads-max`) and the total of `/proc/loadavg`, as
/// upstream's `pkg/kubelet/stats/pidlimit`.
pub fn rlimit() -> Option<(i64, i64)> {
    let num = |p: &str| -> Option<i64> { read_small(Path::new(p))?.trim().parse().ok() };
    let max = match (
        num("/proc/sys/kernel/pid_max"),
        num("/proc/sys/kernel/threads-max"),
    ) {
        (Some(a), Some(b)) => a.min(b),
        (a, b) => a.or(b)?,
    };
    let loadavg = read_small(Path::new("/proc/loadavg"))?;
    let tasks: i64 = loadavg
        .split_whitespace()
        .nth(3)?
        .split('/')
        .nth(1)?
        .parse()
        .ok()?;
    Some((max, tasks))
}

/// The machine's logical CPUs online (`/sys/devices/system/cpu/online`,
/// `0-3,6`), as cAdvisor counts them: not this process's affinity or
/// quota.
pub fn cpus_online() -> Option<usize> {
    parse_cpu_list(&read_small(Path::new("/sys/devices/system/cpu/online"))?)
}

/// The number of CPUs in a kernel CPU list (`0-3,6`).
pub fn parse_cpu_list(text: &str) -> Option<usize> {
    let mut n = 0usize;
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.parse::<usize>().ok()?, b.parse::<usize>().ok()?),
            None => {
                let a = part.parse::<usize>().ok()?;
                (a, a)
            }
        };
        n = n.checked_add(b.checked_sub(a)?.checked_add(1)?)?;
    }
    (n > 0).then_some(n)
}

/// The boot time, Unix seconds (`btime` of `/proc/stat`).
pub fn boot_time() -> Option<i64> {
    let text = read_small(Path::new("/proc/stat"))?;
    text.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// `DEVNAME` of a sysfs `uevent` file (`MAJOR=8\nMINOR=0\nDEVNAME=sda`).
pub fn devname(uevent: &str) -> Option<String> {
    uevent
        .lines()
        .find_map(|l| l.strip_prefix("DEVNAME="))
        .filter(|n| !n.is_empty() && !n.contains(".."))
        .map(|n| format!("/dev/{n}"))
}

/// The block device `major:minor` as `/dev/NAME` (sysfs), as cAdvisor
/// names devices.
pub fn block_device(major: u32, minor: u32) -> Option<String> {
    devname(&read_small(Path::new(&format!(
        "/sys/dev/block/{major}:{minor}/uevent"
    )))?)
}

/// When this process started, Unix seconds (`starttime` of
/// `/proc/self/stat`, in clock ticks of 1/100 s after boot).
pub fn process_start() -> Option<f64> {
    let stat = read_small(Path::new("/proc/self/stat"))?;
    // fields after the command (which may hold spaces) in parentheses
    let rest = stat.rsplit_once(')')?.1;
    let ticks: u64 = rest.split_whitespace().nth(19)?.parse().ok()?;
    Some(boot_time()? as f64 + ticks as f64 / 100.0)
}

pub(crate) fn read_small(path: &Path) -> Option<String> {
    use std::io::Read;
    let mut s = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(4 << 20)
        .read_to_string(&mut s)
        .ok()?;
    Some(s)
}

/// Disk usage of a tree.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskUsage {
    /// Bytes allocated (blocks × 512), each inode once.
    pub bytes: u64,
    /// Inodes (files, directories, links), each once.
    pub inodes: u64,
}

/// Most entries one walk looks at: a tree larger than this is not
/// measured (a hostile pod can make a scrape neither hang nor hold much
/// memory, and a partial figure would understate its usage).
const DU_MAX_ENTRIES: usize = 250_000;

/// `du` of `root`: symlinks are counted, not followed; directories on
/// another filesystem (mounts) are not entered. `None` when `root` is
/// not there or holds more than [`DU_MAX_ENTRIES`] entries.
pub fn disk_usage(root: &Path) -> Option<DiskUsage> {
    let meta = std::fs::symlink_metadata(root).ok()?;
    let dev = meta.dev();
    let mut seen = HashSet::new();
    let mut usage = DiskUsage::default();
    let mut stack = vec![(root.to_path_buf(), meta)];
    let mut entries = 0usize;
    while let Some((path, meta)) = stack.pop() {
        if seen.insert((meta.dev(), meta.ino())) {
            usage.bytes += meta.blocks() * 512;
            usage.inodes += 1;
        }
        if !meta.is_dir() || meta.dev() != dev {
            continue;
        }
        let Ok(dir) = std::fs::read_dir(&path) else {
            continue;
        };
        for e in dir.flatten() {
            entries += 1;
            if entries > DU_MAX_ENTRIES {
                return None;
            }
            if let Ok(m) = e.metadata() {
                stack.push((e.path(), m));
            }
        }
    }
    Some(usage)
}

/// A `/proc/meminfo` field in bytes (`MemTotal`, `MemAvailable`).
pub fn meminfo_bytes(text: &str, key: &str) -> Option<i64> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(key)?.strip_prefix(':')?;
        let kb: i64 = rest.split_whitespace().next()?.parse().ok()?;
        Some(kb * 1024)
    })
}

/// `SwapTotal − SwapFree` and `SwapFree` of `/proc/meminfo`, bytes.
pub fn swap(meminfo: &str) -> Option<(u64, u64)> {
    let get = |k| meminfo_bytes(meminfo, k).and_then(|v| u64::try_from(v).ok());
    let (total, free) = (get("SwapTotal")?, get("SwapFree")?);
    Some((total.saturating_sub(free), free))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NET_DEV: &str = "Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:     100       2    0    0    0     0          0         0      100       2    0    0    0     0       0          0
  eth0: 966817649 700000 1 2 0 0 0 0 5226423 40000 3 4 0 0 0 0
vethab12: 5 1 0 0 0 0 0 0 5 1 0 0 0 0 0 0
 rkc77: 99745 10 0 0 0 0 0 0 329692 20 0 0 0 0 0 0
";

    #[test]
    fn net_dev_counters_without_loopback_and_veths() {
        let d = parse_net_dev(NET_DEV);
        assert_eq!(
            d.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(),
            ["eth0", "rkc77"]
        );
        assert_eq!(
            (
                d[0].rx_bytes,
                d[0].rx_packets,
                d[0].rx_errors,
                d[0].rx_dropped
            ),
            (966817649, 700000, 1, 2)
        );
        assert_eq!(
            (
                d[0].tx_bytes,
                d[0].tx_packets,
                d[0].tx_errors,
                d[0].tx_dropped
            ),
            (5226423, 40000, 3, 4)
        );
        assert!(parse_net_dev("garbage\n x: 1 2\n").is_empty());
    }

    #[test]
    fn this_machine() {
        assert!(boot_time().unwrap() > 1_500_000_000);
        let start = process_start().unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(
            start <= now + 1.0 && start > now - 86_400.0 * 365.0,
            "{start}"
        );
        let (max, tasks) = rlimit().unwrap();
        assert!(tasks > 0 && tasks < max);
        assert!(in_own_netns(std::process::id()));
        let me = net_dev_of(std::process::id()).unwrap();
        assert!(me.iter().all(|d| d.name != "lo"));
    }

    #[test]
    fn du_counts_blocks_and_inodes_once_and_does_not_follow_links() {
        let d = std::env::temp_dir().join(format!("rkube-du-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("a")).unwrap();
        std::fs::write(d.join("a/f"), vec![1u8; 10_000]).unwrap();
        std::fs::hard_link(d.join("a/f"), d.join("a/g")).unwrap();
        std::os::unix::fs::symlink("/usr", d.join("l")).unwrap();
        let u = disk_usage(&d).unwrap();
        // d, a, f (g is f), l
        assert_eq!(u.inodes, 4);
        assert!(u.bytes >= 10_000 && u.bytes < 1_000_000, "{u:?}");
        assert_eq!(disk_usage(&d.join("nope")), None);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-3,6\n"), Some(5));
        assert_eq!(parse_cpu_list("0\n"), Some(1));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
        assert!(cpus_online().unwrap() >= 1);
    }

    #[test]
    fn device_names_from_uevent() {
        assert_eq!(
            devname("MAJOR=253\nMINOR=0\nDEVNAME=vda\nDEVTYPE=disk\n").as_deref(),
            Some("/dev/vda")
        );
        assert_eq!(devname("MAJOR=1\n"), None);
        assert_eq!(devname("DEVNAME=../etc\n"), None);
    }

    #[test]
    fn swap_from_meminfo() {
        assert_eq!(
            swap("SwapTotal: 100 kB\nSwapFree: 40 kB\n"),
            Some((60 * 1024, 40 * 1024))
        );
        assert_eq!(swap("MemTotal: 1 kB\n"), None);
    }
}
