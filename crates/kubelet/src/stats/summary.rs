//! The Summary API's document, field for field as upstream's
//! `k8s.io/kubelet/pkg/apis/stats/v1alpha1` (`/stats/summary`): every
//! figure is optional and left out when it was not read.

use serde::{Deserialize, Serialize};

/// A point in time: Unix nanoseconds, written as RFC 3339 in whole
/// seconds (as `metav1.Time`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Time(pub i64);

impl Time {
    /// Now.
    pub fn now() -> Time {
        Time(k8s_openapi::jiff::Timestamp::now().as_nanosecond() as i64)
    }

    /// Milliseconds since the epoch (Prometheus timestamps).
    pub fn millis(self) -> i64 {
        self.0.div_euclid(1_000_000)
    }

    /// Seconds since the epoch.
    pub fn seconds(self) -> f64 {
        self.0 as f64 / 1e9
    }
}

impl Serialize for Time {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let secs = self.0.div_euclid(1_000_000_000);
        match k8s_openapi::jiff::Timestamp::from_second(secs) {
            Ok(t) => s.collect_str(&t),
            Err(_) => s.serialize_none(),
        }
    }
}

impl<'de> Deserialize<'de> for Time {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Time, D::Error> {
        let s = String::deserialize(d)?;
        let t: k8s_openapi::jiff::Timestamp = s.parse().map_err(serde::de::Error::custom)?;
        Ok(Time(t.as_nanosecond() as i64))
    }
}

/// The whole summary.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// The node.
    pub node: NodeStats,
    /// The node's pods.
    pub pods: Vec<PodStats>,
}

/// The node.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStats {
    /// The node's name.
    pub node_name: String,
    /// `pods` (and `kubelet`, `runtime`, `misc` where they are known).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub system_containers: Vec<ContainerStats>,
    /// When the node's figures started (boot).
    pub start_time: Time,
    /// CPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    /// Memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    /// Network.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkStats>,
    /// The root directory's filesystem (nodefs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fs: Option<FsStats>,
    /// The runtime's filesystems.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<RuntimeStats>,
    /// Process limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rlimit: Option<RlimitStats>,
    /// Swap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swap: Option<SwapStats>,
}

/// Process limits of the node.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RlimitStats {
    /// When read.
    pub time: Time,
    /// The most processes the node may run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maxpid: Option<i64>,
    /// Processes running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub curproc: Option<i64>,
}

/// The runtime's filesystems.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeStats {
    /// Where images are stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_fs: Option<FsStats>,
    /// Where containers' writable layers are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_fs: Option<FsStats>,
}

/// A pod.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStats {
    /// Which pod.
    pub pod_ref: PodReference,
    /// When the pod (its sandbox) was created.
    pub start_time: Time,
    /// Its containers.
    pub containers: Vec<ContainerStats>,
    /// The pod cgroup's CPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    /// The pod cgroup's memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    /// The pod's network.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkStats>,
    /// Its volumes.
    #[serde(rename = "volume", default, skip_serializing_if = "Vec::is_empty")]
    pub volume_stats: Vec<VolumeStats>,
    /// Containers' writable layers and logs plus local volumes.
    #[serde(
        rename = "ephemeral-storage",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub ephemeral_storage: Option<FsStats>,
    /// Processes.
    #[serde(
        rename = "process_stats",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub process_stats: Option<ProcessStats>,
    /// Swap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swap: Option<SwapStats>,
}

/// Which pod.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodReference {
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// UID.
    pub uid: String,
}

/// Processes of a pod.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessStats {
    /// How many.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_count: Option<u64>,
}

/// A container (or a system container).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStats {
    /// The container's name.
    pub name: String,
    /// When it was created.
    pub start_time: Time,
    /// CPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    /// Memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    /// Its writable layer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rootfs: Option<FsStats>,
    /// Its logs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logs: Option<FsStats>,
    /// Swap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swap: Option<SwapStats>,
}

/// Network of a node or pod: the default interface's figures, then all.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NetworkStats {
    /// When read.
    pub time: Time,
    /// The default interface (`eth0`), inline.
    #[serde(flatten)]
    pub default: InterfaceStats,
    /// Every interface.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<InterfaceStats>,
}

/// One network interface.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InterfaceStats {
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// Bytes received.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_bytes: Option<u64>,
    /// Receive errors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_errors: Option<u64>,
    /// Bytes sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_bytes: Option<u64>,
    /// Send errors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_errors: Option<u64>,
}

/// CPU.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CpuStats {
    /// When read.
    pub time: Time,
    /// Usage rate since the previous read, nanocores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_nano_cores: Option<u64>,
    /// Cumulative usage, core-nanoseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_core_nano_seconds: Option<u64>,
}

/// Memory.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryStats {
    /// When read.
    pub time: Time,
    /// Limit (or node memory) − working set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    /// Usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_bytes: Option<u64>,
    /// Working set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_set_bytes: Option<u64>,
    /// Anonymous memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_bytes: Option<u64>,
    /// Page faults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_faults: Option<u64>,
    /// Major page faults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub major_page_faults: Option<u64>,
}

/// Swap.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SwapStats {
    /// When read.
    pub time: Time,
    /// Swap left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swap_available_bytes: Option<u64>,
    /// Swap used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swap_usage_bytes: Option<u64>,
}

/// A filesystem (or the part of one something uses).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FsStats {
    /// When read.
    pub time: Time,
    /// Bytes available to unprivileged users.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    /// Size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_bytes: Option<u64>,
    /// Bytes used (by the filesystem, or by what is measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_bytes: Option<u64>,
    /// Free inodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inodes_free: Option<u64>,
    /// Inodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inodes: Option<u64>,
    /// Inodes used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inodes_used: Option<u64>,
}

/// A volume.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeStats {
    /// Its usage.
    #[serde(flatten)]
    pub fs: FsStats,
    /// The volume's name in the pod.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
}

impl Summary {
    /// Only CPU and memory (`?only_cpu_and_memory=true`, and what
    /// `/metrics/resource` reads), as upstream's `GetCPUAndMemoryStats`.
    pub fn cpu_and_memory(&self) -> Summary {
        let strip = |c: &ContainerStats| ContainerStats {
            name: c.name.clone(),
            start_time: c.start_time,
            cpu: c.cpu.clone(),
            memory: c.memory.clone(),
            swap: c.swap.clone(),
            ..Default::default()
        };
        Summary {
            node: NodeStats {
                node_name: self.node.node_name.clone(),
                system_containers: self.node.system_containers.iter().map(strip).collect(),
                start_time: self.node.start_time,
                cpu: self.node.cpu.clone(),
                memory: self.node.memory.clone(),
                swap: self.node.swap.clone(),
                ..Default::default()
            },
            pods: self
                .pods
                .iter()
                .map(|p| PodStats {
                    pod_ref: p.pod_ref.clone(),
                    start_time: p.start_time,
                    containers: p.containers.iter().map(strip).collect(),
                    cpu: p.cpu.clone(),
                    memory: p.memory.clone(),
                    swap: p.swap.clone(),
                    ..Default::default()
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_json_shape_is_upstreams() {
        let s = Summary {
            node: NodeStats {
                node_name: "n".into(),
                start_time: Time(1_796_475_508_388_000_000),
                network: Some(NetworkStats {
                    time: Time(0),
                    default: InterfaceStats {
                        name: "eth0".into(),
                        rx_bytes: Some(5),
                        ..Default::default()
                    },
                    interfaces: vec![],
                }),
                ..Default::default()
            },
            pods: vec![PodStats {
                volume_stats: vec![VolumeStats {
                    name: "d".into(),
                    fs: FsStats {
                        used_bytes: Some(4096),
                        ..Default::default()
                    },
                }],
                ephemeral_storage: Some(FsStats::default()),
                ..Default::default()
            }],
        };
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["node"]["startTime"], "2026-12-05T12:58:28Z");
        assert_eq!(v["node"]["network"]["name"], "eth0");
        assert_eq!(v["node"]["network"]["rxBytes"], 5);
        assert!(v["node"].get("cpu").is_none(), "absent, not zero");
        assert_eq!(v["pods"][0]["volume"][0]["usedBytes"], 4096);
        assert_eq!(v["pods"][0]["volume"][0]["name"], "d");
        assert!(v["pods"][0].get("ephemeral-storage").is_some());
        assert_eq!(v["pods"][0]["containers"], serde_json::json!([]));
        let back: Summary = serde_json::from_value(v).unwrap();
        assert_eq!(back.node.start_time.0, 1_796_475_508_000_000_000);
        assert_eq!(back.pods[0].volume_stats[0].fs.used_bytes, Some(4096));
    }
}
