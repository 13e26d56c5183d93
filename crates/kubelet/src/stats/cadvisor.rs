//! `/metrics/cadvisor`: cAdvisor's container metrics, under cAdvisor's
//! names, help texts and label set (`container`, `id`, `image`, `name`,
//! `namespace`, `pod`, plus `cpu`, `interface`, `device`,
//! `failure_type`, `scope` where cAdvisor adds them), for every cgroup the
//! node's figures come from: the root (`id="/"`), `kubepods` and its QoS
//! cgroups, each pod cgroup (`pod`, `namespace` set) and each running
//! container (`container`, `image`, `name` = the runtime's id as well).
//! Figures a cgroup does not have are not written; `machine_cpu_cores`
//! and `machine_memory_bytes` describe the machine.

use super::cgroup::CgroupStats;
use super::procfs::NetDev;
use super::prom::{Families, Kind};
use super::snapshot::{CgroupSample, Snapshot};
use super::statvfs::FsInfo;

use Kind::{Counter, Gauge};

const FAMILIES: &[(&str, Kind, &str)] = &[
    (
        "container_cpu_usage_seconds_total",
        Counter,
        "Cumulative cpu time consumed in seconds.",
    ),
    (
        "container_cpu_user_seconds_total",
        Counter,
        "Cumulative user cpu time consumed in seconds.",
    ),
    (
        "container_cpu_system_seconds_total",
        Counter,
        "Cumulative system cpu time consumed in seconds.",
    ),
    (
        "container_cpu_cfs_periods_total",
        Counter,
        "Number of elapsed enforcement period intervals.",
    ),
    (
        "container_cpu_cfs_throttled_periods_total",
        Counter,
        "Number of throttled period intervals.",
    ),
    (
        "container_cpu_cfs_throttled_seconds_total",
        Counter,
        "Total time duration the container has been throttled.",
    ),
    (
        "container_memory_usage_bytes",
        Gauge,
        "Current memory usage in bytes, including all memory regardless of when it was accessed",
    ),
    (
        "container_memory_working_set_bytes",
        Gauge,
        "Current working set in bytes.",
    ),
    ("container_memory_rss", Gauge, "Size of RSS in bytes."),
    (
        "container_memory_cache",
        Gauge,
        "Number of bytes of page cache memory.",
    ),
    (
        "container_memory_mapped_file",
        Gauge,
        "Size of memory mapped files in bytes.",
    ),
    (
        "container_memory_swap",
        Gauge,
        "Container swap usage in bytes.",
    ),
    (
        "container_memory_kernel_usage",
        Gauge,
        "Size of kernel memory allocated in bytes.",
    ),
    (
        "container_memory_failcnt",
        Counter,
        "Number of memory usage hits limits",
    ),
    (
        "container_memory_max_usage_bytes",
        Gauge,
        "Maximum memory usage recorded in bytes",
    ),
    (
        "container_memory_total_active_file_bytes",
        Gauge,
        "Current total active file in bytes.",
    ),
    (
        "container_memory_total_inactive_file_bytes",
        Gauge,
        "Current total inactive file in bytes.",
    ),
    (
        "container_memory_file_dirty_bytes",
        Gauge,
        "Number of bytes of file cache that has been modified but not yet written back to disk.",
    ),
    (
        "container_memory_file_writeback_bytes",
        Gauge,
        "Number of bytes of file cache that is currently being written back to disk.",
    ),
    (
        "container_memory_failures_total",
        Counter,
        "Cumulative count of memory allocation failures.",
    ),
    (
        "container_oom_events_total",
        Counter,
        "Count of out of memory events observed for the container",
    ),
    (
        "container_threads",
        Gauge,
        "Number of threads running inside the container",
    ),
    (
        "container_network_receive_bytes_total",
        Counter,
        "Cumulative count of bytes received",
    ),
    (
        "container_network_receive_packets_total",
        Counter,
        "Cumulative count of packets received",
    ),
    (
        "container_network_receive_packets_dropped_total",
        Counter,
        "Cumulative count of packets dropped while receiving",
    ),
    (
        "container_network_receive_errors_total",
        Counter,
        "Cumulative count of errors encountered while receiving",
    ),
    (
        "container_network_transmit_bytes_total",
        Counter,
        "Cumulative count of bytes transmitted",
    ),
    (
        "container_network_transmit_packets_total",
        Counter,
        "Cumulative count of packets transmitted",
    ),
    (
        "container_network_transmit_packets_dropped_total",
        Counter,
        "Cumulative count of packets dropped while transmitting",
    ),
    (
        "container_network_transmit_errors_total",
        Counter,
        "Cumulative count of errors encountered while transmitting",
    ),
    (
        "container_fs_reads_bytes_total",
        Counter,
        "Cumulative count of bytes read",
    ),
    (
        "container_fs_writes_bytes_total",
        Counter,
        "Cumulative count of bytes written",
    ),
    (
        "container_fs_reads_total",
        Counter,
        "Cumulative count of reads completed",
    ),
    (
        "container_fs_writes_total",
        Counter,
        "Cumulative count of writes completed",
    ),
    (
        "container_fs_usage_bytes",
        Gauge,
        "Number of bytes that are consumed by the container on this filesystem.",
    ),
    (
        "container_fs_limit_bytes",
        Gauge,
        "Number of bytes that can be consumed by the container on this filesystem.",
    ),
    (
        "container_fs_inodes_free",
        Gauge,
        "Number of available Inodes",
    ),
    ("container_fs_inodes_total", Gauge, "Number of Inodes"),
    (
        "container_spec_cpu_shares",
        Gauge,
        "CPU share of the container.",
    ),
    (
        "container_spec_cpu_period",
        Gauge,
        "CPU period of the container.",
    ),
    (
        "container_spec_cpu_quota",
        Gauge,
        "CPU quota of the container.",
    ),
    (
        "container_spec_memory_limit_bytes",
        Gauge,
        "Memory limit for the container.",
    ),
    (
        "container_spec_memory_reservation_limit_bytes",
        Gauge,
        "Memory reservation limit for the container.",
    ),
    (
        "container_spec_memory_swap_limit_bytes",
        Gauge,
        "Memory swap limit for the container.",
    ),
    (
        "container_start_time_seconds",
        Gauge,
        "Start time of the container since unix epoch in seconds.",
    ),
    (
        "container_last_seen",
        Gauge,
        "Last time a container was seen by the exporter",
    ),
    ("machine_cpu_cores", Gauge, "Number of logical CPU cores."),
    (
        "machine_memory_bytes",
        Gauge,
        "Amount of memory installed on the machine.",
    ),
];

/// Block device names by `(major, minor)`.
type Devices = std::collections::BTreeMap<(u32, u32), String>;

/// cAdvisor's identifying labels of one cgroup.
struct Ids<'a> {
    container: &'a str,
    id: &'a str,
    image: &'a str,
    name: &'a str,
    namespace: &'a str,
    pod: &'a str,
}

impl Ids<'_> {
    fn with<'b>(&'b self, extra: &[(&'b str, &'b str)]) -> Vec<(&'b str, &'b str)> {
        let mut v = vec![
            ("container", self.container),
            ("id", self.id),
            ("image", self.image),
            ("name", self.name),
            ("namespace", self.namespace),
            ("pod", self.pod),
        ];
        v.extend_from_slice(extra);
        v
    }
}

fn cgroup(f: &mut Families, ids: &Ids, s: &CgroupStats, ts: i64, devices: &Devices) {
    let l = ids.with(&[]);
    for d in &s.io {
        let Some(dev) = devices.get(&(d.major, d.minor)) else {
            continue;
        };
        let l = ids.with(&[("device", dev.as_str())]);
        for (name, v) in [
            ("container_fs_reads_bytes_total", d.read_bytes),
            ("container_fs_writes_bytes_total", d.write_bytes),
            ("container_fs_reads_total", d.reads),
            ("container_fs_writes_total", d.writes),
        ] {
            f.add(name, &l, v as f64, Some(ts));
        }
    }
    let t = Some(ts);
    let secs = |ns: u64| ns as f64 / 1e9;
    if let Some(c) = s.cpu {
        f.add(
            "container_cpu_usage_seconds_total",
            &ids.with(&[("cpu", "total")]),
            secs(c.usage_ns),
            t,
        );
        if let Some(u) = c.user_ns {
            f.add("container_cpu_user_seconds_total", &l, secs(u), t);
        }
        if let Some(u) = c.system_ns {
            f.add("container_cpu_system_seconds_total", &l, secs(u), t);
        }
        if s.spec.cpu_quota.is_some() {
            for (name, v) in [
                (
                    "container_cpu_cfs_periods_total",
                    c.periods.map(|v| v as f64),
                ),
                (
                    "container_cpu_cfs_throttled_periods_total",
                    c.throttled_periods.map(|v| v as f64),
                ),
                (
                    "container_cpu_cfs_throttled_seconds_total",
                    c.throttled_ns.map(secs),
                ),
            ] {
                if let Some(v) = v {
                    f.add(name, &l, v, t);
                }
            }
        }
    }
    if let Some(m) = s.memory {
        f.add("container_memory_usage_bytes", &l, m.usage as f64, t);
        f.add(
            "container_memory_working_set_bytes",
            &l,
            m.working_set as f64,
            t,
        );
        for (name, v) in [
            ("container_memory_rss", m.rss),
            ("container_memory_cache", m.cache),
            ("container_memory_mapped_file", m.mapped_file),
            ("container_memory_swap", m.swap),
            ("container_memory_kernel_usage", m.kernel),
            ("container_memory_failcnt", m.failcnt),
            ("container_memory_max_usage_bytes", m.max_usage),
            ("container_memory_total_active_file_bytes", m.active_file),
            (
                "container_memory_total_inactive_file_bytes",
                m.inactive_file,
            ),
            ("container_memory_file_dirty_bytes", m.dirty),
            ("container_memory_file_writeback_bytes", m.writeback),
            ("container_oom_events_total", m.oom_kills),
        ] {
            if let Some(v) = v {
                f.add(name, &l, v as f64, t);
            }
        }
        for (kind, v) in [("pgfault", m.pgfault), ("pgmajfault", m.pgmajfault)] {
            if let Some(v) = v {
                f.add(
                    "container_memory_failures_total",
                    &ids.with(&[("failure_type", kind), ("scope", "container")]),
                    v as f64,
                    t,
                );
            }
        }
    }
    if let Some(p) = s.pids {
        f.add("container_threads", &l, p as f64, t);
    }
    let spec = &s.spec;
    if let Some(v) = spec.cpu_shares {
        f.add("container_spec_cpu_shares", &l, v as f64, None);
    }
    if let Some(v) = spec.cpu_period {
        f.add("container_spec_cpu_period", &l, v as f64, None);
    }
    if let Some(v) = spec.cpu_quota {
        f.add("container_spec_cpu_quota", &l, v as f64, None);
    }
    if s.memory.is_some() {
        // cAdvisor writes 0 for "no limit"
        let or0 = |v: Option<u64>| v.unwrap_or(0) as f64;
        f.add(
            "container_spec_memory_limit_bytes",
            &l,
            or0(spec.memory_limit),
            None,
        );
        f.add(
            "container_spec_memory_reservation_limit_bytes",
            &l,
            or0(spec.memory_reservation),
            None,
        );
        f.add(
            "container_spec_memory_swap_limit_bytes",
            &l,
            or0(spec.swap_limit),
            None,
        );
    }
}

fn network(f: &mut Families, ids: &Ids, devs: &[NetDev], ts: i64) {
    for d in devs {
        let l = ids.with(&[("interface", d.name.as_str())]);
        for (name, v) in [
            ("container_network_receive_bytes_total", d.rx_bytes),
            ("container_network_receive_packets_total", d.rx_packets),
            (
                "container_network_receive_packets_dropped_total",
                d.rx_dropped,
            ),
            ("container_network_receive_errors_total", d.rx_errors),
            ("container_network_transmit_bytes_total", d.tx_bytes),
            ("container_network_transmit_packets_total", d.tx_packets),
            (
                "container_network_transmit_packets_dropped_total",
                d.tx_dropped,
            ),
            ("container_network_transmit_errors_total", d.tx_errors),
        ] {
            f.add(name, &l, v as f64, Some(ts));
        }
    }
}

fn filesystem(f: &mut Families, ids: &Ids, device: &str, fs: &FsInfo, used: u64, ts: i64) {
    let l = ids.with(&[("device", device)]);
    f.add("container_fs_usage_bytes", &l, used as f64, Some(ts));
    f.add("container_fs_limit_bytes", &l, fs.capacity as f64, Some(ts));
    f.add(
        "container_fs_inodes_free",
        &l,
        fs.inodes_free as f64,
        Some(ts),
    );
    f.add("container_fs_inodes_total", &l, fs.inodes as f64, Some(ts));
}

fn seen(f: &mut Families, ids: &Ids, start: Option<f64>, now: f64, ts: i64) {
    let l = ids.with(&[]);
    if let Some(s) = start {
        f.add("container_start_time_seconds", &l, s, None);
    }
    f.add("container_last_seen", &l, now.trunc(), Some(ts));
}

/// The `/metrics/cadvisor` text of `s`; `devices` are the mount sources
/// of the root directory's and the image filesystems (cAdvisor's
/// `device` label).
pub fn render(s: &Snapshot, nodefs_device: &str, imagefs_device: &str) -> String {
    let mut f = Families::default();
    for (name, kind, help) in FAMILIES {
        f.family(name, *kind, help);
    }
    let ts = s.time.millis();
    let now = s.time.seconds();
    fn bare(id: &str) -> Ids<'_> {
        Ids {
            container: "",
            id,
            image: "",
            name: "",
            namespace: "",
            pod: "",
        }
    }
    // the root
    let root = bare("/");
    cgroup(&mut f, &root, &s.root.stats, ts, &s.block_devices);
    seen(&mut f, &root, s.boot.map(|b| b as f64), now, ts);
    if let Some(n) = &s.net {
        network(&mut f, &root, n, ts);
    }
    if let Some(fs) = &s.nodefs {
        filesystem(&mut f, &root, nodefs_device, fs, fs.used, ts);
    }
    if let Some(fs) = s.imagefs.fs.filter(|_| imagefs_device != nodefs_device) {
        filesystem(&mut f, &root, imagefs_device, &fs, fs.used, ts);
    }
    let system: Vec<&CgroupSample> = s.pods_cgroup.iter().chain(&s.qos).collect();
    for c in system {
        let ids = bare(&c.name);
        cgroup(&mut f, &ids, &c.stats, ts, &s.block_devices);
        seen(&mut f, &ids, None, now, ts);
    }
    for p in &s.pods {
        let (ns, pod) = (p.pod_ref.namespace.as_str(), p.pod_ref.name.as_str());
        if let Some(c) = &p.cgroup {
            let ids = Ids {
                namespace: ns,
                pod,
                ..bare(&c.name)
            };
            cgroup(&mut f, &ids, &c.stats, ts, &s.block_devices);
            seen(&mut f, &ids, Some(p.created.seconds()), now, ts);
            if let Some(n) = &p.net {
                network(&mut f, &ids, n, ts);
            }
        }
        for c in &p.containers {
            let id = c
                .cgroup
                .as_ref()
                .map(|g| g.name.clone())
                .unwrap_or_else(|| format!("/{}", c.id));
            let ids = Ids {
                container: &c.name,
                id: &id,
                image: &c.image,
                name: &c.id,
                namespace: ns,
                pod,
            };
            match &c.cgroup {
                Some(g) => cgroup(&mut f, &ids, &g.stats, ts, &s.block_devices),
                None => {
                    // the runtime's figures only
                    if let Some(r) = &c.runtime {
                        if let Some(u) = r.cpu_usage {
                            f.add(
                                "container_cpu_usage_seconds_total",
                                &ids.with(&[("cpu", "total")]),
                                u as f64 / 1e9,
                                Some(ts),
                            );
                        }
                        if let Some(w) = r.working_set {
                            f.add(
                                "container_memory_working_set_bytes",
                                &ids.with(&[]),
                                w as f64,
                                Some(ts),
                            );
                        }
                    }
                }
            }
            seen(&mut f, &ids, Some(c.created.seconds()), now, ts);
            if let (Some(r), Some(fs)) = (&c.runtime, &s.containerfs.fs) {
                if let Some(u) = r.rootfs_used {
                    filesystem(&mut f, &ids, imagefs_device, fs, u, ts);
                }
            }
        }
    }
    if s.cpus > 0 {
        f.add("machine_cpu_cores", &[], s.cpus as f64, None);
    }
    if let Some(m) = s.memory_total {
        f.add("machine_memory_bytes", &[], m as f64, None);
    }
    f.render()
}

/// The mount source of the filesystem holding `path` (the longest mount
/// point of `/proc/self/mountinfo` above it), as cAdvisor's `device`.
pub fn mount_source(mountinfo: &str, path: &std::path::Path) -> Option<String> {
    let mut best: Option<(usize, String)> = None;
    for line in mountinfo.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let (Some(point), Some(dash)) = (fields.get(4), fields.iter().position(|f| *f == "-"))
        else {
            continue;
        };
        let Some(source) = fields.get(dash + 2) else {
            continue;
        };
        let point = point.replace("\\040", " ");
        if path.starts_with(&point) && best.as_ref().is_none_or(|(l, _)| point.len() >= *l) {
            best = Some((point.len(), source.to_string()));
        }
    }
    best.map(|(_, s)| s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::snapshot::tests::fixture;

    #[test]
    fn the_fixture_nodes_cadvisor_metrics() {
        let mut s = fixture();
        s.pods[0].containers[0].cgroup = Some(CgroupSample {
            name: "/kubepods/burstable/podu1/id-app".into(),
            stats: s.pods[0].cgroup.as_ref().unwrap().stats.clone(),
            rate: None,
        });
        s.pods[0].containers[0].cgroup.as_mut().unwrap().stats.io =
            vec![crate::stats::cgroup::IoDevice {
                major: 253,
                minor: 0,
                read_bytes: 4096,
                write_bytes: 512,
                reads: 3,
                writes: 1,
            }];
        s.block_devices.insert((253, 0), "/dev/vda".into());
        let text = render(&s, "/dev/vda", "/dev/vda");
        assert!(text.lines().any(|l| l == "container_fs_writes_bytes_total{container=\"app\",device=\"/dev/vda\",id=\"/kubepods/burstable/podu1/id-app\",image=\"img\",name=\"id-app\",namespace=\"default\",pod=\"web\"} 512 8000"), "{text}");
        let has = |l: &str| text.lines().any(|x| x == l);
        assert!(has("container_cpu_usage_seconds_total{container=\"\",cpu=\"total\",id=\"/\",image=\"\",name=\"\",namespace=\"\",pod=\"\"} 9e-06 8000"), "{text}");
        assert!(has("container_memory_working_set_bytes{container=\"app\",id=\"/kubepods/burstable/podu1/id-app\",image=\"img\",name=\"id-app\",namespace=\"default\",pod=\"web\"} 1100 8000"));
        assert!(has("container_memory_working_set_bytes{container=\"\",id=\"/kubepods/burstable/podu1\",image=\"\",name=\"\",namespace=\"default\",pod=\"web\"} 1100 8000"));
        // a container without a cgroup read: the runtime's figures
        assert!(has("container_memory_working_set_bytes{container=\"side\",id=\"/id-side\",image=\"img\",name=\"id-side\",namespace=\"default\",pod=\"web\"} 90 8000"));
        assert!(has("container_network_transmit_bytes_total{container=\"\",id=\"/kubepods/burstable/podu1\",image=\"\",interface=\"eth0\",name=\"\",namespace=\"default\",pod=\"web\"} 20 8000"));
        assert!(has("container_fs_usage_bytes{container=\"app\",device=\"/dev/vda\",id=\"/kubepods/burstable/podu1/id-app\",image=\"img\",name=\"id-app\",namespace=\"default\",pod=\"web\"} 8192 8000"));
        assert!(has("container_spec_memory_limit_bytes{container=\"\",id=\"/\",image=\"\",name=\"\",namespace=\"\",pod=\"\"} 0"));
        assert!(has("machine_cpu_cores 2"));
        assert!(text.contains("# TYPE container_cpu_usage_seconds_total counter\n"));
        // no series twice
        let series: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.rsplit_once('}').map_or(l, |(a, _)| a))
            .collect();
        let unique: std::collections::HashSet<&&str> = series.iter().collect();
        assert_eq!(unique.len(), series.len());
    }

    #[test]
    fn mount_sources() {
        let mi = "22 1 253:1 / / rw,relatime - ext4 /dev/vda rw\n\
                  30 22 0:5 / /dev/shm rw - tmpfs shm rw\n\
                  31 22 253:2 / /var/lib/kubelet rw - xfs /dev/vdb rw\n";
        let p = std::path::Path::new;
        assert_eq!(
            mount_source(mi, p("/var/lib/kubelet/pods")).as_deref(),
            Some("/dev/vdb")
        );
        assert_eq!(mount_source(mi, p("/var/lib")).as_deref(), Some("/dev/vda"));
        assert_eq!(mount_source("garbage", p("/")), None);
    }
}
