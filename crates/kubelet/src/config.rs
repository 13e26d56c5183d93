//! `KubeletConfiguration` (`kubelet.config.k8s.io/v1beta1`): strict
//! decoding, the kubelet v1.37 defaults of the fields rkube uses, and
//! validation.
//!
//! Fields rkube models are decoded and validated; other *upstream* fields
//! (cgroupDriver, cpuManagerPolicy, ...) are accepted with a
//! warning, as they configure parts rkube does not have — except the
//! security-relevant ones (`enableServer: false`, `tlsMinVersion`,
//! `tlsCipherSuites`, `seccompDefault`, ...): a value rkube cannot honour
//! is refused at start, never ignored (fail closed). Anything else is an
//! error naming the file and the field, like the kubelet's strict decoder.
//!
//! Defaults are upstream's except `address`: the HTTPS kubelet API binds to
//! 127.0.0.1 unless configured (upstream: 0.0.0.0), so nothing listens
//! beyond loopback by default; a node the API server reaches over the
//! network sets `address` (every request is authenticated either way).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Taint;
use rkube_model::Quantity;
use serde::de::DeserializeOwned;
use serde_yaml_ng::{Mapping, Value};

/// The apiVersion rkube reads.
pub const API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";

/// Signals valid in `evictionHard`.
pub const EVICTION_SIGNALS: &[&str] = &[
    "memory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "containerfs.available",
    "containerfs.inodesFree",
    "allocatableMemory.available",
    "pid.available",
];

/// The fields rkube uses, defaulted.
#[derive(Debug, Clone, PartialEq)]
pub struct KubeletConfiguration {
    /// `address` of the HTTPS kubelet API (default `127.0.0.1`; upstream's is `0.0.0.0`).
    pub address: String,
    /// `port` of the HTTPS kubelet API (default 10250).
    pub port: u16,
    /// `healthzPort` (default 10248; 0 disables).
    pub healthz_port: u16,
    /// `healthzBindAddress` (default `127.0.0.1`).
    pub healthz_bind_address: String,
    /// `staticPodPath` (default empty: none).
    pub static_pod_path: String,
    /// `syncFrequency` (default 1m): the longest a pod goes without a sync
    /// (each worker's periodic resync, jittered up to half of it more, as
    /// upstream's); its volumes' ConfigMaps, Secrets and tokens reach the
    /// files at these syncs.
    pub sync_frequency: Duration,
    /// `nodeStatusUpdateFrequency` (default 10s): how often status is computed.
    pub node_status_update_frequency: Duration,
    /// `nodeStatusReportFrequency` (default 5m, or nodeStatusUpdateFrequency
    /// when only that is set): unchanged status is still posted this often.
    pub node_status_report_frequency: Duration,
    /// `nodeLeaseDurationSeconds` (default 40; renewed every quarter of it).
    pub node_lease_duration_seconds: i32,
    /// `maxPods` (default 110).
    pub max_pods: i32,
    /// `podsPerCore` (default 0: no limit).
    pub pods_per_core: i32,
    /// `evictionHard` (default memory.available<100Mi, nodefs.available<10%,
    /// nodefs.inodesFree<5%, imagefs.available<15%, imagefs.inodesFree<5%;
    /// a given map replaces the defaults unless mergeDefaultEvictionSettings).
    pub eviction_hard: BTreeMap<String, String>,
    /// `evictionPressureTransitionPeriod` (default 5m): how long a pressure
    /// condition stays True after its threshold was last met.
    pub eviction_pressure_transition_period: Duration,
    /// `serializeImagePulls` (default true).
    pub serialize_image_pulls: bool,
    /// `registerNode` (default true).
    pub register_node: bool,
    /// `registerWithTaints`.
    pub register_with_taints: Vec<Taint>,
    /// `containerRuntimeEndpoint` (default `unix:///run/containerd/containerd.sock`).
    pub container_runtime_endpoint: String,
    /// `systemReserved`.
    pub system_reserved: BTreeMap<String, String>,
    /// `kubeReserved`.
    pub kube_reserved: BTreeMap<String, String>,
    /// `podCIDR`.
    pub pod_cidr: String,
    /// `providerID`.
    pub provider_id: String,
    /// `imagePullCredentialsVerificationPolicy` (default
    /// `NeverVerifyPreloadedImages`).
    pub image_pull_credentials_verification_policy: VerifyPolicy,
    /// `nodeStatusMaxImages`: at most this many images in `status.images`
    /// (-1: all; default 50).
    pub node_status_max_images: i32,
    /// `clusterDNS`: the cluster DNS servers of `ClusterFirst` pods.
    pub cluster_dns: Vec<std::net::IpAddr>,
    /// `clusterDomain` (empty: none).
    pub cluster_domain: String,
    /// `resolvConf`: the resolver file `Default` pods start from (empty:
    /// none; default `/etc/resolv.conf`).
    pub resolv_conf: String,
    /// `imageGCHighThresholdPercent`: image GC starts at this disk usage.
    pub image_gc_high_threshold_percent: i32,
    /// `imageGCLowThresholdPercent`: image GC frees down to this usage.
    pub image_gc_low_threshold_percent: i32,
    /// `imageMinimumGCAge`: images seen less long ago are kept.
    pub image_minimum_gc_age: Duration,
    /// `imageMaximumGCAge`: unused this long, an image goes (0: never).
    pub image_maximum_gc_age: Duration,
    /// `failSwapOn`: refuse to start on a host with swap on.
    pub fail_swap_on: bool,
    /// `makeIPTablesUtilChains`: the kubelet's own iptables chains and
    /// rules ([`crate::network::iptables`]).
    pub make_iptables_util_chains: bool,
    /// `failCgroupV1`: refuse to start on a host using cgroup v1.
    pub fail_cgroup_v1: bool,
    /// `logging.verbosity` (`-v` overrides it).
    pub logging_verbosity: u32,
    /// `kubeAPIQPS`/`kubeAPIBurst`: the main API client's rate (0: client-go's
    /// 5 QPS).
    pub kube_api_qps: i32,
    /// See `kube_api_qps`.
    pub kube_api_burst: i32,
    /// `eventRecordQPS`/`eventBurst`: the Event client's rate (0: no limit).
    pub event_record_qps: i32,
    /// See `event_record_qps`.
    pub event_burst: i32,
    /// `registryPullQPS`/`registryBurst`: image pulls a second; a pull over
    /// the rate fails (0: no limit).
    pub registry_pull_qps: i32,
    /// See `registry_pull_qps`.
    pub registry_burst: i32,
    /// `enableSystemLogHandler`: `/logs/` serves `/var/log`.
    pub enable_system_log_handler: bool,
    /// `volumeStatsAggPeriod`: how long a volume's measured usage is kept
    /// (0s in the file is upstream's default, a minute; a negative period,
    /// upstream's "disabled", is not accepted by rkube's duration parser).
    pub volume_stats_agg_period: Duration,
    /// `memorySwap.swapBehavior`: `NoSwap` (also for "") or `LimitedSwap`.
    pub memory_swap_behavior: String,
    /// `containerLogMaxSize` in bytes (negative: no rotation).
    pub container_log_max_size: i64,
    /// `containerLogMaxFiles`.
    pub container_log_max_files: i32,
    /// `containerLogMaxWorkers`.
    pub container_log_max_workers: i32,
    /// `containerLogMonitorInterval`.
    pub container_log_monitor_interval: Duration,
    /// `rotateCertificates`: renew the client certificate before it expires.
    pub rotate_certificates: bool,
    /// `serverTLSBootstrap`: the serving certificate requested from the
    /// cluster (`kubernetes.io/kubelet-serving`) and rotated.
    pub server_tls_bootstrap: bool,
    /// `evictionSoft`: signal → threshold, met for its grace period.
    pub eviction_soft: BTreeMap<String, String>,
    /// `evictionSoftGracePeriod`: signal → Go duration.
    pub eviction_soft_grace_period: BTreeMap<String, String>,
    /// `evictionMaxPodGracePeriod` (seconds): the most a soft eviction
    /// gives a pod to terminate.
    pub eviction_max_pod_grace_period: i64,
    /// `evictionMinimumReclaim`: signal → what must be free beyond the
    /// threshold before a met threshold counts as resolved.
    pub eviction_minimum_reclaim: BTreeMap<String, String>,
    /// `featureGates`, checked against upstream's gates ([`GATES_HONOURED`]).
    pub feature_gates: rkube_util::feature_gates::FeatureGates,
    /// `cpuCFSQuota`: containers' CPU limits enforced with CFS quota.
    pub cpu_cfs_quota: bool,
    /// `cpuCFSQuotaPeriod` (100ms).
    pub cpu_cfs_quota_period: Duration,
    /// `singleProcessOOMKill` (unset: true on cgroup v1, false on v2).
    pub single_process_oom_kill: Option<bool>,
    /// `memoryThrottlingFactor` (unset: no `memory.high`).
    pub memory_throttling_factor: Option<f64>,
    /// `memoryReservationPolicy`: `None` or `TieredReservation`.
    pub memory_reservation_policy: String,
    /// `allowedUnsafeSysctls`: names or `prefix*` patterns.
    pub allowed_unsafe_sysctls: Vec<String>,
    /// `oomScoreAdj`: the kubelet's own OOM score adjustment (-999).
    pub oom_score_adj: i32,
    /// `maxOpenFiles`: the kubelet's open file limit (1000000).
    pub max_open_files: i64,
    /// `podLogsDir`: where container logs go (upstream's default
    /// `/var/log/pods`, where log agents look).
    pub pod_logs_dir: std::path::PathBuf,
    /// `cgroupDriver` (`cgroupfs`), used when the runtime does not say.
    pub cgroup_driver: String,
    /// `cgroupRoot`: where the pods' cgroups go (`/`).
    pub cgroup_root: String,
    /// `enforceNodeAllocatable` (`[pods]`).
    pub enforce_node_allocatable: Vec<String>,
    /// `systemReservedCgroup`.
    pub system_reserved_cgroup: String,
    /// `kubeReservedCgroup`.
    pub kube_reserved_cgroup: String,
    /// `shutdownGracePeriod`: how long a node shutdown is delayed for the
    /// pods to terminate (0: no graceful node shutdown).
    pub shutdown_grace_period: Duration,
    /// `shutdownGracePeriodCriticalPods`: the part of it kept for critical
    /// pods.
    pub shutdown_grace_period_critical_pods: Duration,
    /// `shutdownGracePeriodByPodPriority`: (priority, seconds) per class.
    pub shutdown_grace_period_by_pod_priority: Vec<ShutdownGracePeriodByPodPriority>,
}

/// One `shutdownGracePeriodByPodPriority` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ShutdownGracePeriodByPodPriority {
    /// Pods with this priority or more (up to the next entry's).
    pub priority: i32,
    /// Their grace period, seconds.
    pub shutdown_grace_period_seconds: i64,
}

/// The gates rkube kubelet honours away from their default: `MemoryQoS`
/// (`memory.min`/`memory.low`/`memory.high` on cgroup v2),
/// `RotateKubeletServerCertificate` (off: `serverTLSBootstrap` has no
/// effect) and `ReloadKubeletServerCertificateFile` (off: `tlsCertFile` is
/// read once), `GracefulNodeShutdown` and
/// `GracefulNodeShutdownBasedOnPodPriority` (off: their settings refused,
/// as upstream's validation). Every other gate is accepted only at its
/// default.
pub const GATES_HONOURED: &[&str] = &[
    "GracefulNodeShutdown",
    "GracefulNodeShutdownBasedOnPodPriority",
    "MemoryQoS",
    "RotateKubeletServerCertificate",
    "ReloadKubeletServerCertificateFile",
];

/// The hard eviction defaults of kubelet v1.37 on Linux.
pub fn default_eviction_hard() -> BTreeMap<String, String> {
    [
        ("memory.available", "100Mi"),
        ("nodefs.available", "10%"),
        ("nodefs.inodesFree", "5%"),
        ("imagefs.available", "15%"),
        ("imagefs.inodesFree", "5%"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

impl Default for KubeletConfiguration {
    fn default() -> Self {
        KubeletConfiguration {
            address: "127.0.0.1".into(),
            port: 10250,
            healthz_port: 10248,
            healthz_bind_address: "127.0.0.1".into(),
            static_pod_path: String::new(),
            sync_frequency: Duration::from_secs(60),
            node_status_update_frequency: Duration::from_secs(10),
            node_status_report_frequency: Duration::from_secs(300),
            node_lease_duration_seconds: 40,
            max_pods: 110,
            pods_per_core: 0,
            eviction_hard: default_eviction_hard(),
            eviction_pressure_transition_period: Duration::from_secs(300),
            serialize_image_pulls: true,
            register_node: true,
            register_with_taints: Vec::new(),
            container_runtime_endpoint: "unix:///run/containerd/containerd.sock".into(),
            system_reserved: BTreeMap::new(),
            kube_reserved: BTreeMap::new(),
            pod_cidr: String::new(),
            provider_id: String::new(),
            image_pull_credentials_verification_policy: VerifyPolicy::default(),
            node_status_max_images: 50,
            cluster_dns: Vec::new(),
            cluster_domain: String::new(),
            resolv_conf: "/etc/resolv.conf".into(),
            image_gc_high_threshold_percent: 85,
            image_gc_low_threshold_percent: 80,
            image_minimum_gc_age: Duration::from_secs(120),
            image_maximum_gc_age: Duration::ZERO,
            fail_swap_on: true,
            make_iptables_util_chains: true,
            fail_cgroup_v1: true,
            logging_verbosity: 0,
            kube_api_qps: 50,
            kube_api_burst: 100,
            event_record_qps: 50,
            event_burst: 100,
            registry_pull_qps: 5,
            registry_burst: 10,
            volume_stats_agg_period: Duration::from_secs(60),
            enable_system_log_handler: true,
            memory_swap_behavior: String::new(),
            container_log_max_size: 10 << 20,
            container_log_max_files: 5,
            container_log_max_workers: 1,
            container_log_monitor_interval: Duration::from_secs(10),
            rotate_certificates: false,
            server_tls_bootstrap: false,
            eviction_soft: BTreeMap::new(),
            eviction_soft_grace_period: BTreeMap::new(),
            eviction_max_pod_grace_period: 0,
            eviction_minimum_reclaim: BTreeMap::new(),
            feature_gates: Default::default(),
            pod_logs_dir: DEFAULT_POD_LOGS_DIR.into(),
            cgroup_driver: "cgroupfs".into(),
            cpu_cfs_quota: true,
            cpu_cfs_quota_period: Duration::from_millis(100),
            single_process_oom_kill: None,
            memory_throttling_factor: None,
            memory_reservation_policy: "None".into(),
            allowed_unsafe_sysctls: Vec::new(),
            oom_score_adj: -999,
            max_open_files: 1_000_000,
            cgroup_root: "/".into(),
            enforce_node_allocatable: vec!["pods".into()],
            system_reserved_cgroup: String::new(),
            kube_reserved_cgroup: String::new(),
            shutdown_grace_period: Duration::ZERO,
            shutdown_grace_period_critical_pods: Duration::ZERO,
            shutdown_grace_period_by_pod_priority: Vec::new(),
        }
    }
}

/// Upstream's default `podLogsDir`.
pub const DEFAULT_POD_LOGS_DIR: &str = "/var/log/pods";

/// A configuration the kubelet would refuse (exit code 2).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {message}")]
pub struct ConfigError {
    /// The file.
    pub file: String,
    /// What is wrong, naming the field.
    pub message: String,
}

/// Upstream v1beta1 fields rkube accepts and ignores (with a warning), each
/// with why ignoring it changes nothing a pod or an operator relies on on
/// Linux. Fields whose other values rkube cannot honour are refused
/// ([`security_setting`], [`default_only`]).
const IGNORED: &[(&str, &str)] = &[
    // Timing of work rkube does on events and watches instead.
    ("fileCheckFrequency", "static pod files are watched"),
    ("httpCheckFrequency", "only with staticPodURL, which is refused"),
    ("staticPodURLHeader", "only with staticPodURL, which is refused"),
    // Client-side rate limits and transport details.
    ("contentType", "the API is spoken in JSON"),
    ("preloadedImagesVerificationAllowlist", "only with imagePullCredentialsVerificationPolicy NeverVerifyAllowlistedImages, which is refused"),
    ("streamingConnectionIdleTimeout", "upstream's kubelet does not use it either: with a CRI runtime, the runtime's streaming server times idle streams out"),
    // Go-runtime and debugging facilities rkube does not have.
    ("enableContentionProfiling", "no Go profiler"),
    ("enableProfilingHandler", "no /debug/pprof endpoints"),
    ("enableDebugFlagsHandler", "no /debug/flags endpoints"),
    ("showHiddenMetricsForVersion", "no hidden metrics"),
    // No effect with the managers and plugins rkube has.
    ("cpuManagerReconcilePeriod", "only with cpuManagerPolicy static, which is refused"),
    ("topologyManagerScope", "only with a topologyManagerPolicy other than none, which is refused"),
    // Validated as upstream validates them; upstream's kubelet does
    // nothing else with them either.
    ("hairpinMode", "hairpin traffic is the CNI plugin's (no kubenet)"),
    ("iptablesMasqueradeBit", "kube-proxy marks its own packets"),
    ("iptablesDropBit", "kube-proxy marks its own packets"),
    ("volumePluginDir", "FlexVolume drivers are refused"),
    ("defaultPodSysctls", "only with the DefaultPodSysctls feature gate (alpha), which is refused"),
];

/// String fields upstream's v1beta1 defaulting sets when they are empty
/// (kubeadm writes `containerRuntimeEndpoint: ""`): "" is their default.
const EMPTY_IS_DEFAULT: &[&str] = &[
    "address",
    "healthzBindAddress",
    "cgroupDriver",
    "cpuManagerPolicy",
    "memoryManagerPolicy",
    "topologyManagerPolicy",
    "topologyManagerScope",
    "hairpinMode",
    "contentType",
    "containerLogMaxSize",
    "configMapAndSecretChangeDetectionStrategy",
    "volumePluginDir",
    "memoryReservationPolicy",
    "containerRuntimeEndpoint",
    "podLogsDir",
    "imagePullCredentialsVerificationPolicy",
];

/// Upstream fields rkube honours only at upstream's default (or at a value
/// that asks for nothing): another value is refused ([`default_only`]).
const DEFAULT_ONLY: &[&str] = &[
    "staticPodURL",
    "readOnlyPort",
    "kubeletCgroups",
    "systemCgroups",
    "cpuManagerPolicy",
    "cpuManagerPolicyOptions",
    "memoryManagerPolicy",
    "topologyManagerPolicy",
    "topologyManagerPolicyOptions",
    "reservedSystemCPUs",
    "reservedMemory",
    "qosReserved",
    "runOnce",
    "enableControllerAttachDetach",
    "localStorageCapacityIsolation",
    "imageServiceEndpoint",
    "maxParallelImagePulls",
    "crashLoopBackOff",
    "userNamespaces",
    "kernelMemcgNotification",
    "runtimeRequestTimeout",
    "tracing",
    "enableSystemLogQuery",
];

/// `Some(reason)` when a [`DEFAULT_ONLY`] field asks for what rkube does
/// not do.
fn default_only(file: &str, key: &str, v: &Value) -> Result<Option<String>, ConfigError> {
    let text = |v: &Value| -> Result<String, ConfigError> {
        Ok(if v.is_null() {
            String::new()
        } else {
            field(file, key, v)?
        })
    };
    let empty = |v: &Value| match v {
        Value::Null => true,
        Value::Sequence(s) => s.is_empty(),
        Value::Mapping(m) => m.is_empty(),
        Value::String(s) => s.is_empty(),
        _ => false,
    };
    let not_impl = |what: &str| Some(format!("{what} is not implemented"));
    Ok(match key {
        "staticPodURL" => (!empty(v)).then(|| "static pods from a URL are not implemented".into()),
        "tracing" => (!empty(v)).then(|| "OpenTelemetry tracing is not implemented".into()),
        "enableSystemLogQuery" => field::<bool>(file, key, v)?
            .then(|| "the node log query (journal and file queries on /logs) is not implemented".into()),
        "readOnlyPort" => (field::<i64>(file, key, v)? != 0)
            .then(|| "the unauthenticated read-only port is not served".into()),
        "kubeletCgroups" | "systemCgroups" => {
            (!empty(v)).then(|| "moving processes into that cgroup is not implemented".into())
        }
        "cpuManagerPolicy" => match text(v)?.as_str() {
            "" | "none" => None,
            _ => not_impl("the static CPU manager"),
        },
        "memoryManagerPolicy" => match text(v)?.as_str() {
            "" | "None" => None,
            _ => not_impl("the Static memory manager"),
        },
        "topologyManagerPolicy" => match text(v)?.as_str() {
            "" | "none" => None,
            _ => not_impl("the topology manager"),
        },
        "cpuManagerPolicyOptions" | "topologyManagerPolicyOptions" | "reservedMemory"
        | "qosReserved" | "crashLoopBackOff" => (!empty(v)).then(|| "a non-empty value is not implemented".into()),
        "reservedSystemCPUs" => (!empty(v)).then(|| "reserving CPUs is not implemented".into()),
        "runOnce" => field::<bool>(file, key, v)?.then(|| "run-once mode is not implemented".into()),
        "enableControllerAttachDetach" => (!field::<bool>(file, key, v)?)
            .then(|| "false (volumes attached by the kubelet) is not implemented".into()),
        "localStorageCapacityIsolation" => (!field::<bool>(file, key, v)?)
            .then(|| "false (no ephemeral-storage accounting) is not implemented".into()),
        "imageServiceEndpoint" => (!empty(v))
            .then(|| "a separate image service is not implemented (images go through containerRuntimeEndpoint)".into()),
        "maxParallelImagePulls" => (!v.is_null())
            .then(|| "a limit on parallel image pulls is not implemented".into()),
        "userNamespaces" => {
            let m: BTreeMap<String, i64> = if v.is_null() { BTreeMap::new() } else { field(file, key, v)? };
            m.iter()
                .any(|(k, n)| k != "idsPerPod" || *n != 65536)
                .then(|| "userNamespaces other than idsPerPod 65536 is not implemented".into())
        }
        "kernelMemcgNotification" => field::<bool>(file, key, v)?
            .then(|| "true (memory cgroup notifications for eviction) is not implemented".into()),
        "runtimeRequestTimeout" => {
            let d = duration(file, key, v)?;
            (!d.is_zero() && d != Duration::from_secs(120))
                .then(|| "a runtime request timeout other than upstream's 2m0s is not implemented".into())
        }
        _ => None,
    })
}

/// Upstream fields that make a node less safe when ignored: each value
/// rkube does not honour is refused ([`security_setting`]).
const SECURITY_FIELDS: &[&str] = &[
    "enableServer",
    "enableDebuggingHandlers",
    "tlsMinVersion",
    "tlsCipherSuites",
    "tlsCurvePreferences",
    "seccompDefault",
    "protectKernelDefaults",
    "podPidsLimit",
];

/// `Some(reason)` when a security-relevant field asks for something rkube
/// does not do; `None` when rkube's behaviour already is what it asks.
fn security_setting(file: &str, key: &str, v: &Value) -> Result<Option<String>, ConfigError> {
    Ok(match key {
        // rkube always serves the authenticated kubelet API (logs, pods).
        "enableServer" | "enableDebuggingHandlers" => (!field::<bool>(file, key, v)?)
            .then(|| "false would turn off the kubelet API, which rkube always serves".into()),
        // rustls never negotiates below TLS 1.2, so a floor of 1.0–1.2 holds.
        "tlsMinVersion" => {
            let s: String = field(file, key, v)?;
            match s.as_str() {
                "" | "VersionTLS10" | "VersionTLS11" | "VersionTLS12" => None,
                "VersionTLS13" => Some("a TLS 1.3 floor is not implemented".into()),
                other => Some(format!(
                    "unknown TLS version {} (want VersionTLS10..VersionTLS13)",
                    rkube_util::quote(other)
                )),
            }
        }
        "tlsCipherSuites" | "tlsCurvePreferences" => {
            let list: Vec<serde_yaml_ng::Value> = field(file, key, v)?;
            (!list.is_empty())
                .then(|| "restricting the TLS suites or curves is not implemented".into())
        }
        "seccompDefault" => field::<bool>(file, key, v)?
            .then(|| "true (RuntimeDefault seccomp for every pod) is not implemented".into()),
        "protectKernelDefaults" => field::<bool>(file, key, v)?.then(|| {
            "true (refusing kernel tunables that differ from the kubelet's) is not implemented"
                .into()
        }),
        "podPidsLimit" => (field::<i64>(file, key, v)? > 0)
            .then(|| "a per-pod PID limit is not implemented".into()),
        _ => None,
    })
}

/// A decoded configuration and the warnings about ignored fields.
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
    /// The defaulted, validated configuration.
    pub config: KubeletConfiguration,
    /// One line per ignored upstream field.
    pub warnings: Vec<String>,
}

fn field<T: DeserializeOwned>(file: &str, key: &str, v: &Value) -> Result<T, ConfigError> {
    serde_yaml_ng::from_value(v.clone()).map_err(|e| ConfigError {
        file: file.into(),
        message: format!("field {key}: {e}"),
    })
}

fn duration(file: &str, key: &str, v: &Value) -> Result<Duration, ConfigError> {
    let s: String = field(file, key, v)?;
    rkube_util::duration::parse(&s).map_err(|e| ConfigError {
        file: file.into(),
        message: format!("field {key}: {e} (e.g. 10s, 5m0s)"),
    })
}

/// Upstream's validation of the [`IGNORED`] fields it checks: a value
/// upstream's kubelet refuses at start is refused here too, even though
/// rkube does nothing with the field.
fn validate_ignored(file: &str, key: &str, v: &Value) -> Result<(), ConfigError> {
    let refuse = |message: String| {
        Err(ConfigError {
            file: file.into(),
            message,
        })
    };
    if v.is_null() {
        return Ok(());
    }
    match key {
        "hairpinMode" => {
            let mode: String = field(file, key, v)?;
            if !["none", "hairpin-veth", "promiscuous-bridge"].contains(&mode.as_str()) {
                return refuse(format!(
                    "invalid configuration: option {mode:?} specified for hairpinMode (--hairpin-mode). Valid options are \"none\", \"hairpin-veth\" or \"promiscuous-bridge\""
                ));
            }
        }
        "iptablesMasqueradeBit" | "iptablesDropBit" => {
            let bit: i64 = field(file, key, v)?;
            if !(0..=31).contains(&bit) {
                let flag = if key == "iptablesDropBit" {
                    "iptables-drop-bit"
                } else {
                    "iptables-masquerade-bit"
                };
                return refuse(format!(
                    "invalid configuration: {key} (--{flag}) {bit} must be between 0 and 31, inclusive"
                ));
            }
        }
        _ => {}
    }
    Ok(())
}

/// Decodes, defaults and validates a KubeletConfiguration document.
pub fn load_str(file: &str, text: &str) -> Result<Loaded, ConfigError> {
    decode(file, &parse_document(file, text)?, &BTreeMap::new())
}

fn parse_document(file: &str, text: &str) -> Result<Mapping, ConfigError> {
    let err = |message: String| ConfigError {
        file: file.into(),
        message,
    };
    let doc: Value = serde_yaml_ng::from_str(text).map_err(|e| err(format!("not YAML: {e}")))?;
    match doc {
        Value::Mapping(map) => Ok(map),
        _ => Err(err("not a KubeletConfiguration object".into())),
    }
}

/// The configuration in effect: `--config` (upstream's defaults without
/// one) with the fields set by flags laid over it.
#[derive(Debug, Clone, PartialEq)]
pub struct Effective {
    /// The decoded configuration.
    pub loaded: Loaded,
    /// The document it was decoded from (the file with the flags' fields).
    pub document: Value,
}

/// Loads `config` (if any) with `flags` laid over it; an error about a
/// field a flag set names that flag.
pub fn load(
    config: Option<&std::path::Path>,
    flags: &[crate::options::ConfigFlag],
) -> Result<Effective, ConfigError> {
    let (file, mut map) = match config {
        Some(path) => {
            let file = path.display().to_string();
            let text = rkube_util::file::read_text(path, rkube_util::file::CONFIG_MAX_BYTES)
                .map_err(|e| ConfigError {
                    file: file.clone(),
                    message: format!("reading: {e}"),
                })?;
            let map = parse_document(&file, &text)?;
            (file, map)
        }
        None => {
            let mut map = Mapping::new();
            map.insert("apiVersion".into(), API_VERSION.into());
            map.insert("kind".into(), "KubeletConfiguration".into());
            ("the kubelet's flags".to_string(), map)
        }
    };
    crate::options::overlay(&mut map, flags);
    let mut sources = BTreeMap::new();
    for f in flags {
        let label = match config {
            Some(_) => format!("{file} (field {} set by {})", f.path.join("."), f.flag),
            None => format!("flag {}", f.flag),
        };
        sources.entry(f.path[0].to_string()).or_insert(label);
    }
    let loaded = decode(&file, &map, &sources)?;
    Ok(Effective {
        loaded,
        document: Value::Mapping(map),
    })
}

/// Decodes `map`; `sources` names, per top-level field, the flag that set
/// it (used in place of the file's name in that field's errors).
fn decode(
    file: &str,
    map: &Mapping,
    sources: &BTreeMap<String, String>,
) -> Result<Loaded, ConfigError> {
    let err = |message: String| ConfigError {
        file: file.into(),
        message,
    };
    let get_str = |k: &str| map.get(k).and_then(Value::as_str).unwrap_or("");
    if get_str("kind") != "KubeletConfiguration" {
        return Err(err(format!(
            "kind {:?} is not KubeletConfiguration",
            get_str("kind")
        )));
    }
    if get_str("apiVersion") != API_VERSION {
        return Err(err(format!(
            "apiVersion {:?} is not supported (want {API_VERSION})",
            get_str("apiVersion")
        )));
    }
    let mut c = KubeletConfiguration::default();
    let mut warnings = Vec::new();
    let mut report_set = false;
    let mut update_set = false;
    let mut merge_eviction = false;
    let mut eviction: Option<BTreeMap<String, String>> = None;
    for (k, v) in map {
        let Some(key) = k.as_str() else {
            return Err(err(format!("non-string field name {k:?}")));
        };
        if EMPTY_IS_DEFAULT.contains(&key) && v.as_str() == Some("") {
            // Upstream's defaulting gives "" the default value.
            continue;
        }
        let file = sources.get(key).map(String::as_str).unwrap_or(file);
        let err = |message: String| ConfigError {
            file: file.into(),
            message,
        };
        match key {
            "apiVersion" | "kind" => {}
            "address" => c.address = field(file, key, v)?,
            "port" => c.port = field(file, key, v)?,
            "healthzPort" => c.healthz_port = field(file, key, v)?,
            "healthzBindAddress" => c.healthz_bind_address = field(file, key, v)?,
            "staticPodPath" => c.static_pod_path = field(file, key, v)?,
            "syncFrequency" => c.sync_frequency = duration(file, key, v)?,
            "nodeStatusUpdateFrequency" => {
                c.node_status_update_frequency = duration(file, key, v)?;
                update_set = !c.node_status_update_frequency.is_zero();
            }
            "nodeStatusReportFrequency" => {
                c.node_status_report_frequency = duration(file, key, v)?;
                report_set = !c.node_status_report_frequency.is_zero();
            }
            "nodeLeaseDurationSeconds" => c.node_lease_duration_seconds = field(file, key, v)?,
            "maxPods" => c.max_pods = field(file, key, v)?,
            "podsPerCore" => c.pods_per_core = field(file, key, v)?,
            "evictionHard" => eviction = Some(field(file, key, v)?),
            "mergeDefaultEvictionSettings" => merge_eviction = field(file, key, v)?,
            "evictionPressureTransitionPeriod" => {
                c.eviction_pressure_transition_period = duration(file, key, v)?;
            }
            "serializeImagePulls" => c.serialize_image_pulls = field(file, key, v)?,
            "registerNode" => c.register_node = field(file, key, v)?,
            "registerWithTaints" => {
                let json: serde_json::Value = field(file, key, v)?;
                c.register_with_taints =
                    serde_json::from_value(json).map_err(|e| err(format!("field {key}: {e}")))?;
            }
            "containerRuntimeEndpoint" => c.container_runtime_endpoint = field(file, key, v)?,
            "systemReserved" => c.system_reserved = field(file, key, v)?,
            "kubeReserved" => c.kube_reserved = field(file, key, v)?,
            "podCIDR" => c.pod_cidr = field(file, key, v)?,
            "providerID" => c.provider_id = field(file, key, v)?,
            "imagePullCredentialsVerificationPolicy" => {
                let s: String = field(file, key, v)?;
                c.image_pull_credentials_verification_policy = match VerifyPolicy::parse(&s) {
                    Some(p) => p,
                    None if s == "NeverVerifyAllowlistedImages" => return Err(err(format!(
                        "field {key}: NeverVerifyAllowlistedImages (an allowlist of preloaded images) is not implemented; rkube kubelet cannot honour this setting and refuses to start rather than run without it (use NeverVerifyPreloadedImages, AlwaysVerify or NeverVerify)"
                    ))),
                    None => return Err(err(format!(
                        "field {key}: unknown policy {} (want NeverVerify, NeverVerifyPreloadedImages, NeverVerifyAllowlistedImages or AlwaysVerify)",
                        rkube_util::quote(&s)
                    ))),
                };
            }
            "clusterDNS" => {
                let list: Vec<String> = field(file, key, v)?;
                c.cluster_dns = list
                    .iter()
                    .map(|ip| {
                        ip.parse().map_err(|_| {
                            err(format!(
                                "field {key}: {} is not an IP address",
                                rkube_util::quote(ip)
                            ))
                        })
                    })
                    .collect::<Result<_, _>>()?;
            }
            "nodeStatusMaxImages" => c.node_status_max_images = field(file, key, v)?,
            "clusterDomain" => c.cluster_domain = field(file, key, v)?,
            "resolvConf" => c.resolv_conf = field(file, key, v)?,
            "imageGCHighThresholdPercent" => {
                c.image_gc_high_threshold_percent = field(file, key, v)?
            }
            "imageGCLowThresholdPercent" => c.image_gc_low_threshold_percent = field(file, key, v)?,
            "imageMinimumGCAge" => c.image_minimum_gc_age = duration(file, key, v)?,
            "imageMaximumGCAge" => c.image_maximum_gc_age = duration(file, key, v)?,
            "failSwapOn" => c.fail_swap_on = field(file, key, v)?,
            "makeIPTablesUtilChains" => c.make_iptables_util_chains = field(file, key, v)?,
            "failCgroupV1" => c.fail_cgroup_v1 = field(file, key, v)?,
            "logging" => c.logging_verbosity = logging(file, v)?,
            "kubeAPIQPS" => c.kube_api_qps = field(file, key, v)?,
            "volumeStatsAggPeriod" => c.volume_stats_agg_period = duration(file, key, v)?,
            "enableSystemLogHandler" => c.enable_system_log_handler = field(file, key, v)?,
            "eventRecordQPS" => c.event_record_qps = field(file, key, v)?,
            "registryPullQPS" => c.registry_pull_qps = field(file, key, v)?,
            // Upstream's defaulting: a zero burst is the default burst.
            "kubeAPIBurst" | "eventBurst" | "registryBurst" => {
                let b: i32 = field(file, key, v)?;
                let (slot, default) = match key {
                    "kubeAPIBurst" => (&mut c.kube_api_burst, 100),
                    "eventBurst" => (&mut c.event_burst, 100),
                    _ => (&mut c.registry_burst, 10),
                };
                *slot = if b == 0 { default } else { b };
            }
            "rotateCertificates" => c.rotate_certificates = field(file, key, v)?,
            "serverTLSBootstrap" => c.server_tls_bootstrap = field(file, key, v)?,
            "shutdownGracePeriod" => c.shutdown_grace_period = duration(file, key, v)?,
            "podLogsDir" => {
                let d: String = field(file, key, v)?;
                let clean = std::path::Path::new(&d)
                    .components()
                    .collect::<std::path::PathBuf>();
                // ("" is upstream's default, skipped above.)
                let problem = if !d.starts_with('/') {
                    Some(format!("pod logs path {d:?} must be absolute path"))
                } else if clean.as_os_str() != d.as_str() || d.split('/').any(|p| p == "..") {
                    Some(format!("pod logs path {d:?} must be normalized"))
                } else if !d.is_ascii() {
                    Some(format!(
                        "pod logs path {d:?} mut contains ASCII characters only"
                    ))
                } else {
                    None
                };
                if let Some(p) = problem {
                    return Err(err(format!("invalid configuration: {p}")));
                }
                c.pod_logs_dir = clean;
            }
            "cpuCFSQuota" => c.cpu_cfs_quota = field(file, key, v)?,
            "cpuCFSQuotaPeriod" => c.cpu_cfs_quota_period = duration(file, key, v)?,
            "singleProcessOOMKill" => c.single_process_oom_kill = field(file, key, v)?,
            "memoryThrottlingFactor" => c.memory_throttling_factor = field(file, key, v)?,
            "memoryReservationPolicy" => {
                let p: String = field(file, key, v)?;
                if !p.is_empty() {
                    c.memory_reservation_policy = p;
                }
            }
            "allowedUnsafeSysctls" => c.allowed_unsafe_sysctls = field(file, key, v)?,
            "oomScoreAdj" => c.oom_score_adj = field(file, key, v)?,
            "maxOpenFiles" => {
                let n: i64 = field(file, key, v)?;
                // 0: upstream's default.
                if n != 0 {
                    c.max_open_files = n;
                }
            }
            "cgroupRoot" => {
                let r: String = field(file, key, v)?;
                c.cgroup_root = if r.is_empty() { "/".into() } else { r };
            }
            // rkube's pods are always in QoS cgroups.
            "cgroupsPerQOS" => {
                if !field::<bool>(file, key, v)? {
                    return Err(err(format!(
                        "field {key}: false (pods without QoS cgroups) is not implemented by rkube"
                    )));
                }
            }
            // The runtime's own driver wins when it reports one (CRI
            // RuntimeConfig), as upstream's; systemd is refused at start.
            "cgroupDriver" => {
                let d: String = field(file, key, v)?;
                match d.as_str() {
                    "cgroupfs" | "systemd" => c.cgroup_driver = d,
                    other => {
                        return Err(err(format!(
                            "field {key}: invalid cgroup driver {}: want cgroupfs or systemd",
                            rkube_util::quote(other)
                        )))
                    }
                }
            }
            "enforceNodeAllocatable" => c.enforce_node_allocatable = field(file, key, v)?,
            "systemReservedCgroup" => c.system_reserved_cgroup = field(file, key, v)?,
            "kubeReservedCgroup" => c.kube_reserved_cgroup = field(file, key, v)?,
            "shutdownGracePeriodCriticalPods" => {
                c.shutdown_grace_period_critical_pods = duration(file, key, v)?;
            }
            "shutdownGracePeriodByPodPriority" => {
                c.shutdown_grace_period_by_pod_priority = field(file, key, v)?;
            }
            "evictionSoft" => c.eviction_soft = field(file, key, v)?,
            "evictionSoftGracePeriod" => c.eviction_soft_grace_period = field(file, key, v)?,
            "evictionMaxPodGracePeriod" => c.eviction_max_pod_grace_period = field(file, key, v)?,
            "evictionMinimumReclaim" => c.eviction_minimum_reclaim = field(file, key, v)?,
            "featureGates" => {
                let requested: BTreeMap<String, bool> = field(file, key, v)?;
                let (gates, warn) = rkube_util::feature_gates::FeatureGates::new(
                    &requested,
                    &|name, _| GATES_HONOURED.contains(&name),
                    "rkube kubelet",
                )
                .map_err(|e| err(format!("field {key}: {e}")))?;
                c.feature_gates = gates;
                warnings.extend(warn.into_iter().map(|w| format!("{file}: {w}")));
            }
            "memorySwap" => {
                let m: BTreeMap<String, String> = field(file, key, v)?;
                for (k, b) in m {
                    if k != "swapBehavior" {
                        return Err(err(format!("field {key}: unknown field \"{k}\"")));
                    }
                    c.memory_swap_behavior = b;
                }
            }
            "containerLogMaxSize" => {
                let q: String = field(file, key, v)?;
                c.container_log_max_size = Quantity::parse(&q)
                    .ok()
                    // Negative: no rotation, as upstream.
                    .map(|q| q.value())
                    .ok_or_else(|| {
                        err(format!(
                            "field {key}: {} is not a quantity",
                            rkube_util::quote(&q)
                        ))
                    })?;
            }
            "containerLogMaxFiles" => c.container_log_max_files = field(file, key, v)?,
            "containerLogMaxWorkers" => c.container_log_max_workers = field(file, key, v)?,
            "containerLogMonitorInterval" => {
                c.container_log_monitor_interval = duration(file, key, v)?;
            }
            // ConfigMaps and Secrets are always watched (crate::objects).
            "configMapAndSecretChangeDetectionStrategy" => {
                let s: String = field(file, key, v)?;
                if s != "Watch" {
                    return Err(err(format!(
                        "field {key}: {} is not implemented (rkube kubelet always watches the ConfigMaps and Secrets pods use); use Watch",
                        rkube_util::quote(&s)
                    )));
                }
            }
            // Read by the kubelet API server (crate::server::ApiSettings).
            "tlsCertFile" | "tlsPrivateKeyFile" | "authentication" | "authorization" => {}
            k if SECURITY_FIELDS.contains(&k) => {
                if let Some(why) = security_setting(file, k, v)? {
                    return Err(err(format!(
                        "field {k}: {why}; rkube kubelet cannot honour this setting and refuses to start rather than run without it (remove the field to run with its behaviour)"
                    )));
                }
            }
            k if DEFAULT_ONLY.contains(&k) => {
                if let Some(why) = default_only(file, k, v)? {
                    return Err(err(format!(
                        "field {k}: {why}; rkube kubelet refuses to start rather than run without it (remove the field to run with upstream's default)"
                    )));
                }
            }
            k if IGNORED.iter().any(|(f, _)| *f == k) => {
                validate_ignored(file, k, v)?;
                warnings.push(format!(
                    "{file}: field {k} is accepted and has no effect on rkube kubelet ({})",
                    IGNORED
                        .iter()
                        .find(|(f, _)| *f == k)
                        .map(|(_, w)| *w)
                        .unwrap_or("")
                ))
            }
            k => return Err(err(format!("unknown field \"{k}\""))),
        }
    }
    // Upstream defaulting: zero durations mean "default".
    if c.node_status_update_frequency.is_zero() {
        c.node_status_update_frequency = Duration::from_secs(10);
    }
    if c.sync_frequency.is_zero() {
        c.sync_frequency = Duration::from_secs(60);
    }
    if c.eviction_pressure_transition_period.is_zero() {
        c.eviction_pressure_transition_period = Duration::from_secs(300);
    }
    if c.image_minimum_gc_age.is_zero() {
        c.image_minimum_gc_age = Duration::from_secs(120);
    }
    if c.volume_stats_agg_period.is_zero() {
        c.volume_stats_agg_period = Duration::from_secs(60);
    }
    if !report_set {
        c.node_status_report_frequency = if update_set {
            c.node_status_update_frequency
        } else {
            Duration::from_secs(300)
        };
    }
    if let Some(e) = eviction {
        c.eviction_hard = if merge_eviction {
            let mut d = default_eviction_hard();
            d.extend(e);
            d
        } else {
            e
        };
    }
    validate(&c).map_err(err)?;
    Ok(Loaded {
        config: c,
        warnings,
    })
}

/// Reads and loads a configuration file.
pub fn load_file(path: &std::path::Path) -> Result<Loaded, ConfigError> {
    load(Some(path), &[]).map(|e| e.loaded)
}

/// `logging` (upstream's LoggingConfiguration): its verbosity. rkube
/// writes each line unbuffered in klog's text format, so the flush
/// frequency and buffer sizes are met; JSON, per-file verbosity and split
/// streams are refused.
fn logging(file: &str, v: &Value) -> Result<u32, ConfigError> {
    let refuse = |what: &str| {
        ConfigError {
        file: file.into(),
        message: format!(
            "field logging.{what} is not implemented; rkube kubelet cannot honour this setting and refuses to start rather than run without it"
        ),
    }
    };
    let unknown = |k: &str| ConfigError {
        file: file.into(),
        message: format!("unknown field \"logging.{k}\""),
    };
    let map: BTreeMap<String, Value> = field(file, "logging", v)?;
    let mut verbosity = 0;
    for (k, v) in &map {
        let key = format!("logging.{k}");
        match k.as_str() {
            "format" => {
                let f: String = field(file, &key, v)?;
                if !matches!(f.as_str(), "" | "text") {
                    return Err(refuse(&format!("format {}", rkube_util::quote(&f))));
                }
            }
            "verbosity" => verbosity = field(file, &key, v)?,
            "flushFrequency" => {
                // Upstream takes a duration or nanoseconds.
                if !matches!(v, Value::Number(_)) {
                    duration(file, &key, v)?;
                }
            }
            "vmodule" => {
                let list: Vec<Value> = field(file, &key, v)?;
                if !list.is_empty() {
                    return Err(refuse("vmodule"));
                }
            }
            "options" => {
                let opts: BTreeMap<String, BTreeMap<String, Value>> = field(file, &key, v)?;
                for (stream, o) in &opts {
                    if !matches!(stream.as_str(), "json" | "text") {
                        return Err(unknown(&format!("options.{stream}")));
                    }
                    for (name, val) in o {
                        let at = format!("{key}.{stream}.{name}");
                        match name.as_str() {
                            "infoBufferSize" => {}
                            "splitStream" => {
                                if field::<bool>(file, &at, val)? && stream == "text" {
                                    return Err(refuse("options.text.splitStream true"));
                                }
                            }
                            _ => return Err(unknown(&format!("options.{stream}.{name}"))),
                        }
                    }
                }
            }
            _ => return Err(unknown(k)),
        }
    }
    Ok(verbosity)
}

/// Parses an eviction threshold value: a quantity or a percentage.
pub fn parse_threshold(v: &str) -> Option<Threshold> {
    if let Some(p) = v.strip_suffix('%') {
        let p: f64 = p.trim().parse().ok()?;
        return (0.0..=100.0).contains(&p).then_some(Threshold::Percent(p));
    }
    let q = Quantity::parse(v).ok()?;
    (!q.is_negative()).then_some(Threshold::Quantity(q.value()))
}

/// An `evictionMinimumReclaim` value: a non-negative quantity or a
/// positive percentage (upstream's `parseMinimumReclaims`).
pub fn parse_min_reclaim(v: &str) -> Option<Threshold> {
    match parse_threshold(v)? {
        Threshold::Percent(p) if p <= 0.0 => None,
        t => Some(t),
    }
}

/// An eviction threshold.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Threshold {
    /// An absolute amount (bytes, or a count for inodes/pids).
    Quantity(i64),
    /// A percentage of capacity.
    Percent(f64),
}

impl Threshold {
    /// The amount for a capacity of `capacity`.
    pub fn amount(&self, capacity: i64) -> i64 {
        match *self {
            Threshold::Quantity(q) => q,
            Threshold::Percent(p) => (capacity as f64 * p / 100.0) as i64,
        }
    }
}

fn validate(c: &KubeletConfiguration) -> Result<(), String> {
    let mut errs = Vec::new();
    for (value, field, flag) in [
        (c.event_burst, "eventBurst", "event-burst"),
        (c.event_record_qps, "eventRecordQPS", "event-qps"),
        (c.kube_api_burst, "kubeAPIBurst", "kube-api-burst"),
        (c.kube_api_qps, "kubeAPIQPS", "kube-api-qps"),
        (c.registry_burst, "registryBurst", "registry-burst"),
        (c.registry_pull_qps, "registryPullQPS", "registry-qps"),
    ] {
        if value < 0 {
            errs.push(format!(
                "invalid configuration: {field} (--{flag}) {value} must not be a negative number"
            ));
        }
    }
    let gates = &c.feature_gates;
    let period = c.cpu_cfs_quota_period;
    if !gates.enabled("CustomCPUCFSQuotaPeriod") && period != Duration::from_millis(100) {
        errs.push(format!("invalid configuration: cpuCFSQuotaPeriod (--cpu-cfs-quota-period) {period:?} requires feature gate CustomCPUCFSQuotaPeriod"));
    }
    if gates.enabled("CustomCPUCFSQuotaPeriod")
        && !(Duration::from_millis(1)..=Duration::from_secs(1)).contains(&period)
    {
        errs.push(format!("invalid configuration: cpuCFSQuotaPeriod (--cpu-cfs-quota-period) {period:?} must be between 1ms and 1sec, inclusive"));
    }
    if let Some(f) = c.memory_throttling_factor {
        if !gates.enabled("MemoryQoS") && f != 0.9 {
            errs.push("invalid configuration: memoryThrottlingFactor must not be set when MemoryQoS feature gate is disabled".into());
        }
        if f <= 0.0 || f > 1.0 || f.is_nan() {
            errs.push(format!("invalid configuration: memoryThrottlingFactor {f} must be greater than 0 and less than or equal to 1.0"));
        }
    }
    match c.memory_reservation_policy.as_str() {
        "None" => {}
        "TieredReservation" if !gates.enabled("MemoryQoS") => errs.push("invalid configuration: memoryReservationPolicy \"TieredReservation\" requires MemoryQoS feature gate to be enabled".into()),
        // The containers' memory.min/low are written, but not the QoS
        // cgroups' upstream keeps in step with them.
        "TieredReservation" => errs.push("invalid configuration: memoryReservationPolicy \"TieredReservation\" is not implemented by rkube kubelet (the QoS cgroups' memory protection)".into()),
        other => errs.push(format!("invalid configuration: option {other:?} specified for memoryReservationPolicy. Valid options are \"None\" or \"TieredReservation\"")),
    }
    if !(-1000..=1000).contains(&c.oom_score_adj) {
        errs.push(format!("invalid configuration: oomScoreAdj (--oom-score-adj) {} must be between -1000 and 1000, inclusive", c.oom_score_adj));
    }
    if c.max_open_files < 0 {
        errs.push(format!("invalid configuration: maxOpenFiles (--max-open-files) {} must not be a negative number", c.max_open_files));
    }
    // enforceNodeAllocatable, as upstream validates it.
    for (full, compressible) in [
        ("system-reserved", "system-reserved-compressible"),
        ("kube-reserved", "kube-reserved-compressible"),
    ] {
        let has = |k: &str| c.enforce_node_allocatable.iter().any(|v| v == k);
        if has(full) && has(compressible) {
            errs.push(format!("invalid configuration: both {full:?} and {compressible:?} cannot be specified together in enforceNodeAllocatable (--enforce-node-allocatable)"));
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    for val in &c.enforce_node_allocatable {
        if !seen.insert(val.as_str()) {
            errs.push(format!("invalid configuration: duplicated enforcements {val:?} in enforceNodeAllocatable (--enforce-node-allocatable)"));
            continue;
        }
        match val.as_str() {
            "pods" => {}
            "system-reserved" | "system-reserved-compressible" => {
                if c.system_reserved_cgroup.is_empty() {
                    errs.push("invalid configuration: systemReservedCgroup (--system-reserved-cgroup) must be specified when \"system-reserved\" or \"system-reserved-compressible\" included in enforceNodeAllocatable (--enforce-node-allocatable)".into());
                }
            }
            "kube-reserved" | "kube-reserved-compressible" => {
                if c.kube_reserved_cgroup.is_empty() {
                    errs.push("invalid configuration: kubeReservedCgroup (--kube-reserved-cgroup) must be specified when \"kube-reserved\" or \"kube-reserved-compressible\" included in enforceNodeAllocatable (--enforce-node-allocatable)".into());
                }
            }
            "none" => {
                if c.enforce_node_allocatable.len() > 1 {
                    errs.push("invalid configuration: enforceNodeAllocatable (--enforce-node-allocatable) may not contain additional enforcements when \"none\" is specified".into());
                }
            }
            other => errs.push(format!("invalid configuration: option {other:?} specified for enforceNodeAllocatable (--enforce-node-allocatable). Valid options are \"pods\", \"system-reserved\", \"system-reserved-compressible\", \"kube-reserved\", \"kube-reserved-compressible\" or \"none\"")),
        }
    }
    // Graceful node shutdown, as upstream validates it.
    let (period, critical) = (
        c.shutdown_grace_period,
        c.shutdown_grace_period_critical_pods,
    );
    if gates.enabled("GracefulNodeShutdown") {
        if critical > period {
            errs.push(format!("invalid configuration: shutdownGracePeriodCriticalPods {critical:?} must be <= shutdownGracePeriod {period:?}"));
        }
        if !period.is_zero() && period < Duration::from_secs(1) {
            errs.push(format!("invalid configuration: shutdownGracePeriod {period:?} must be either zero or otherwise >= 1 sec"));
        }
        if !critical.is_zero() && critical < Duration::from_secs(1) {
            errs.push(format!("invalid configuration: shutdownGracePeriodCriticalPods {critical:?} must be either zero or otherwise >= 1 sec"));
        }
    } else if !period.is_zero() || !critical.is_zero() {
        errs.push("invalid configuration: specifying shutdownGracePeriod or shutdownGracePeriodCriticalPods requires feature gate GracefulNodeShutdown".into());
    }
    let by_priority = !c.shutdown_grace_period_by_pod_priority.is_empty();
    if gates.enabled("GracefulNodeShutdownBasedOnPodPriority") {
        if by_priority && (!period.is_zero() || !critical.is_zero()) {
            errs.push("invalid configuration: Cannot specify both shutdownGracePeriodByPodPriority and shutdownGracePeriod at the same time".into());
        }
    } else if by_priority {
        errs.push("invalid configuration: Specifying shutdownGracePeriodByPodPriority requires feature gate GracefulNodeShutdownBasedOnPodPriority".into());
    }
    if c.shutdown_grace_period_by_pod_priority
        .iter()
        .any(|p| p.shutdown_grace_period_seconds < 0)
    {
        errs.push("invalid configuration: shutdownGracePeriodByPodPriority: shutdownGracePeriodSeconds must not be negative".into());
    }
    if c.node_lease_duration_seconds <= 0 {
        errs.push(
            "invalid configuration: nodeLeaseDurationSeconds must be greater than 0".to_string(),
        );
    }
    if c.port == 0 {
        errs.push(
            "invalid configuration: port (--port) 0 must be between 1 and 65535, inclusive".into(),
        );
    }
    if c.max_pods < 0 {
        errs.push(format!(
            "invalid configuration: maxPods (--max-pods) {} must not be a negative number",
            c.max_pods
        ));
    }
    if c.pods_per_core < 0 {
        errs.push(format!(
            "invalid configuration: podsPerCore (--pods-per-core) {} must not be a negative number",
            c.pods_per_core
        ));
    }
    if c.node_status_max_images < -1 {
        errs.push(format!(
            "invalid configuration: nodeStatusMaxImages (--node-status-max-images) {} must be -1 or greater",
            c.node_status_max_images
        ));
    }
    if c.healthz_bind_address.parse::<std::net::IpAddr>().is_err() {
        errs.push(format!(
            "invalid configuration: healthzBindAddress {:?} is not an IP address",
            c.healthz_bind_address
        ));
    }
    for (k, v) in &c.eviction_hard {
        if !EVICTION_SIGNALS.contains(&k.as_str()) {
            errs.push(format!(
                "invalid configuration: evictionHard: unsupported eviction signal {k}"
            ));
        } else if parse_threshold(v).is_none() {
            errs.push(format!(
                "invalid configuration: evictionHard[{k}]: invalid threshold {v:?}"
            ));
        }
    }
    for (k, v) in &c.eviction_soft {
        if !EVICTION_SIGNALS.contains(&k.as_str()) {
            errs.push(format!(
                "invalid configuration: evictionSoft: unsupported eviction signal {k}"
            ));
        } else if parse_threshold(v).is_none() {
            errs.push(format!(
                "invalid configuration: evictionSoft[{k}]: invalid threshold {v:?}"
            ));
        } else if !c.eviction_soft_grace_period.contains_key(k) {
            errs.push(format!(
                "invalid configuration: grace period must be specified for the soft eviction threshold {k}"
            ));
        }
    }
    for (k, v) in &c.eviction_soft_grace_period {
        if !EVICTION_SIGNALS.contains(&k.as_str()) {
            errs.push(format!(
                "invalid configuration: evictionSoftGracePeriod: unsupported eviction signal {k}"
            ));
        } else if rkube_util::duration::parse(v).is_err() {
            errs.push(format!(
                "invalid configuration: evictionSoftGracePeriod[{k}]: invalid eviction grace period specified: {v}, must be a positive value"
            ));
        }
    }
    for (k, v) in &c.eviction_minimum_reclaim {
        if !EVICTION_SIGNALS.contains(&k.as_str()) {
            errs.push(format!(
                "invalid configuration: evictionMinimumReclaim: unsupported eviction signal {k}"
            ));
        } else if parse_min_reclaim(v).is_none() {
            errs.push(format!(
                "invalid configuration: evictionMinimumReclaim[{k}]: {v:?} must be a non-negative quantity or a positive percentage"
            ));
        }
    }
    if c.eviction_max_pod_grace_period < 0 {
        errs.push(format!(
            "invalid configuration: evictionMaxPodGracePeriod {} must not be negative",
            c.eviction_max_pod_grace_period
        ));
    }
    for (field, map) in [
        ("systemReserved", &c.system_reserved),
        ("kubeReserved", &c.kube_reserved),
    ] {
        for (k, v) in map {
            match Quantity::parse(v) {
                Ok(q) if !q.is_negative() => {}
                _ => errs.push(format!(
                    "invalid configuration: {field}[{k}]: invalid quantity {v:?}"
                )),
            }
        }
    }
    for (i, t) in c.register_with_taints.iter().enumerate() {
        if !matches!(
            t.effect.as_str(),
            "NoSchedule" | "PreferNoSchedule" | "NoExecute"
        ) {
            errs.push(format!(
                "invalid configuration: registerWithTaints[{i}].effect: unsupported value {:?}",
                t.effect
            ));
        }
        if t.key.is_empty() {
            errs.push(format!(
                "invalid configuration: registerWithTaints[{i}].key: required"
            ));
        }
    }
    let (high, low) = (
        c.image_gc_high_threshold_percent,
        c.image_gc_low_threshold_percent,
    );
    if !(0..=100).contains(&high) {
        errs.push(format!("invalid configuration: imageGCHighThresholdPercent (--image-gc-high-threshold) {high} must be between 0 and 100, inclusive"));
    }
    if !(0..=100).contains(&low) {
        errs.push(format!("invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) {low} must be between 0 and 100, inclusive"));
    }
    if low >= high {
        errs.push(format!("invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) {low} must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) {high}"));
    }
    if !c.image_maximum_gc_age.is_zero() && c.image_maximum_gc_age <= c.image_minimum_gc_age {
        errs.push(format!(
            "invalid configuration: imageMaximumGCAge {} must be greater than imageMinimumGCAge {}",
            rkube_util::duration::format(c.image_maximum_gc_age),
            rkube_util::duration::format(c.image_minimum_gc_age)
        ));
    }
    if !matches!(
        c.memory_swap_behavior.as_str(),
        "" | "NoSwap" | "LimitedSwap"
    ) {
        errs.push(format!(
            "invalid configuration: memorySwap.swapBehavior {:?} must be one of: \"\", \"LimitedSwap\" or \"NoSwap\"",
            c.memory_swap_behavior
        ));
    }
    if c.container_log_max_workers < 1 {
        errs.push(
            "invalid configuration: containerLogMaxWorkers must be greater than or equal to 1"
                .into(),
        );
    }
    if c.container_log_monitor_interval < Duration::from_secs(3) {
        errs.push("invalid configuration: containerLogMonitorInterval must be a positive time duration greater than or equal to 3s".into());
    }
    if c.container_log_max_files <= 1 {
        errs.push("invalid configuration: containerLogMaxFiles must be greater than 1".into());
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs.join("; "))
    }
}

/// `imagePullCredentialsVerificationPolicy` (without the allowlist one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum VerifyPolicy {
    /// Never make a pod pull an image that is present.
    NeverVerify,
    /// Verify the images the kubelet pulled (upstream's default).
    #[default]
    NeverVerifyPreloadedImages,
    /// Verify every image.
    AlwaysVerify,
}

impl VerifyPolicy {
    /// The policy named `s`; `None` for a name rkube does not implement.
    pub fn parse(s: &str) -> Option<VerifyPolicy> {
        Some(match s {
            "NeverVerify" => VerifyPolicy::NeverVerify,
            "" | "NeverVerifyPreloadedImages" => VerifyPolicy::NeverVerifyPreloadedImages,
            "AlwaysVerify" => VerifyPolicy::AlwaysVerify,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

    #[test]
    fn cgroup_settings_honoured_or_refused() {
        let c = load("cgroupRoot: /rk\ncgroupDriver: cgroupfs\ncgroupsPerQOS: true\n\
             enforceNodeAllocatable: [pods, system-reserved]\nsystemReservedCgroup: /system.slice\n")
            .unwrap()
            .config;
        assert_eq!(c.cgroup_root, "/rk");
        assert_eq!(c.enforce_node_allocatable, ["pods", "system-reserved"]);
        assert_eq!(c.system_reserved_cgroup, "/system.slice");
        assert_eq!(load("").unwrap().config.enforce_node_allocatable, ["pods"]);
        assert_eq!(
            load("cgroupDriver: systemd\n")
                .unwrap()
                .config
                .cgroup_driver,
            "systemd"
        );
        for (body, needle) in [
            ("cgroupDriver: nope\n", "invalid cgroup driver"),
            ("cgroupsPerQOS: false\n", "cgroupsPerQOS: false"),
            (
                "enforceNodeAllocatable: [kube-reserved]\n",
                "kubeReservedCgroup (--kube-reserved-cgroup) must be specified",
            ),
            (
                "enforceNodeAllocatable: [none, pods]\n",
                "may not contain additional enforcements",
            ),
            (
                "enforceNodeAllocatable: [pods, pods]\n",
                "duplicated enforcements",
            ),
            (
                "enforceNodeAllocatable: [bogus]\n",
                "option \"bogus\" specified",
            ),
            (
                "enforceNodeAllocatable: [system-reserved, system-reserved-compressible]\nsystemReservedCgroup: /s\n",
                "cannot be specified together",
            ),
        ] {
            let e = load(body).unwrap_err().to_string();
            assert!(e.contains(needle), "{body}: {e}");
        }
    }

    #[test]
    fn fields_honoured_only_at_their_default() {
        // Upstream's defaults (and values asking for nothing) are accepted
        // without a warning.
        let ok = "readOnlyPort: 0\ncpuManagerPolicy: none\nmemoryManagerPolicy: None\n\
             topologyManagerPolicy: none\nreservedSystemCPUs: \"\"\nqosReserved: {}\nrunOnce: false\n\
             enableControllerAttachDetach: true\nlocalStorageCapacityIsolation: true\n\
             runtimeRequestTimeout: 0s\nkernelMemcgNotification: false\nstaticPodURL: \"\"\n\
             userNamespaces: {idsPerPod: 65536}\nmaxParallelImagePulls: null\n";
        let l = load(ok).unwrap();
        assert!(l.warnings.is_empty(), "{:?}", l.warnings);
        for body in [
            "readOnlyPort: 10255\n",
            "kubeletCgroups: /kubelet\n",
            "systemCgroups: /system\n",
            "cpuManagerPolicy: static\n",
            "cpuManagerPolicyOptions: {full-pcpus-only: \"true\"}\n",
            "memoryManagerPolicy: Static\n",
            "topologyManagerPolicy: single-numa-node\n",
            "reservedSystemCPUs: \"0-1\"\n",
            "reservedMemory: [{numaNode: 0, limits: {memory: 1Gi}}]\n",
            "qosReserved: {memory: 50%}\n",
            "runOnce: true\n",
            "enableControllerAttachDetach: false\n",
            "localStorageCapacityIsolation: false\n",
            "imageServiceEndpoint: unix:///run/other.sock\n",
            "maxParallelImagePulls: 2\n",
            "crashLoopBackOff: {maxContainerRestartPeriod: 30s}\n",
            "userNamespaces: {idsPerPod: 131072}\n",
            "kernelMemcgNotification: true\n",
            "runtimeRequestTimeout: 5m\n",
            "tracing: {endpoint: localhost:4317}\n",
            "enableSystemLogQuery: true\n",
            "staticPodURL: http://x/pods\n",
        ] {
            let e = load(body).unwrap_err().to_string();
            let key = body.split(':').next().unwrap();
            assert!(
                e.contains(&format!("field {key}:")) && e.contains("refuses to start"),
                "{body}: {e}"
            );
        }
        assert_eq!(
            load("podLogsDir: /srv/logs\n").unwrap().config.pod_logs_dir,
            std::path::PathBuf::from("/srv/logs")
        );
        assert_eq!(
            load("").unwrap().config.pod_logs_dir,
            std::path::PathBuf::from("/var/log/pods"),
            "upstream's default"
        );
        for (body, needle) in [
            ("podLogsDir: var/log\n", "must be absolute path"),
            ("podLogsDir: /var/log/\n", "must be normalized"),
            ("podLogsDir: /var/../log\n", "must be normalized"),
            ("podLogsDir: /var/lög\n", "ASCII"),
        ] {
            let e = load(body).unwrap_err().to_string();
            assert!(e.contains(needle), "{body}: {e}");
        }
        // Honoured now: read into the configuration.
        let c = load("cpuCFSQuota: false\ncpuCFSQuotaPeriod: 50ms\noomScoreAdj: -500\nmaxOpenFiles: 4096\n\
             allowedUnsafeSysctls: [net.core.somaxconn]\nmemoryThrottlingFactor: 0.8\nmemoryReservationPolicy: None\n")
            .unwrap()
            .config;
        assert!(!c.cpu_cfs_quota);
        assert_eq!(c.cpu_cfs_quota_period, Duration::from_millis(50));
        assert_eq!((c.oom_score_adj, c.max_open_files), (-500, 4096));
        assert_eq!(c.allowed_unsafe_sysctls, ["net.core.somaxconn"]);
        assert_eq!(c.memory_throttling_factor, Some(0.8));
        assert_eq!(c.memory_reservation_policy, "None");
        for (body, needle) in [
            ("cpuCFSQuotaPeriod: 2s\n", "must be between 1ms and 1sec"),
            (
                "memoryReservationPolicy: TieredReservation\n",
                "is not implemented by rkube kubelet",
            ),
            (
                "memoryThrottlingFactor: 1.5\n",
                "must be greater than 0 and less than or equal to 1.0",
            ),
            (
                "memoryReservationPolicy: Some\n",
                "option \"Some\" specified for memoryReservationPolicy",
            ),
            ("oomScoreAdj: -1001\n", "must be between -1000 and 1000"),
            ("maxOpenFiles: -1\n", "must not be a negative number"),
            (
                "hairpinMode: bridge\n",
                "invalid configuration: option \"bridge\" specified for hairpinMode (--hairpin-mode). Valid options are \"none\", \"hairpin-veth\" or \"promiscuous-bridge\"",
            ),
            (
                "iptablesDropBit: 32\n",
                "invalid configuration: iptablesDropBit (--iptables-drop-bit) 32 must be between 0 and 31, inclusive",
            ),
            (
                "iptablesMasqueradeBit: -1\n",
                "invalid configuration: iptablesMasqueradeBit (--iptables-masquerade-bit) -1 must be between 0 and 31, inclusive",
            ),
        ] {
            let e = load(body).unwrap_err().to_string();
            assert!(e.contains(needle), "{body}: {e}");
        }
    }

    #[test]
    fn graceful_shutdown_settings_validated_as_upstream() {
        let c = load("shutdownGracePeriod: 30s\nshutdownGracePeriodCriticalPods: 10s\n")
            .unwrap()
            .config;
        assert_eq!(c.shutdown_grace_period, Duration::from_secs(30));
        assert_eq!(
            c.shutdown_grace_period_critical_pods,
            Duration::from_secs(10)
        );
        let e =
            load("shutdownGracePeriod: 10s\nshutdownGracePeriodCriticalPods: 30s\n").unwrap_err();
        assert!(
            e.to_string()
                .contains("shutdownGracePeriodCriticalPods 30s must be <= shutdownGracePeriod 10s"),
            "{e}"
        );
        let e = load("shutdownGracePeriod: 500ms\n").unwrap_err();
        assert!(
            e.to_string()
                .contains("must be either zero or otherwise >= 1 sec"),
            "{e}"
        );
        let by = "shutdownGracePeriodByPodPriority: [{priority: 0, shutdownGracePeriodSeconds: 10}, {priority: 100000, shutdownGracePeriodSeconds: 5}]\n";
        let c = load(by).unwrap().config;
        assert_eq!(c.shutdown_grace_period_by_pod_priority.len(), 2);
        let e = load(&format!("{by}shutdownGracePeriod: 30s\n")).unwrap_err();
        assert!(
            e.to_string().contains(
                "Cannot specify both shutdownGracePeriodByPodPriority and shutdownGracePeriod"
            ),
            "{e}"
        );
        let e = load(&format!(
            "{by}featureGates: {{GracefulNodeShutdownBasedOnPodPriority: false}}\n"
        ))
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("requires feature gate GracefulNodeShutdownBasedOnPodPriority"),
            "{e}"
        );
        let e = load("shutdownGracePeriod: 30s\nfeatureGates: {GracefulNodeShutdown: false}\n")
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("requires feature gate GracefulNodeShutdown"),
            "{e}"
        );
        let e = load("shutdownGracePeriodByPodPriority: [{priority: 0, bogus: 1}]\n").unwrap_err();
        assert!(
            e.to_string().contains("shutdownGracePeriodByPodPriority"),
            "{e}"
        );
        assert!(load(
            "shutdownGracePeriodByPodPriority: [{priority: 0, shutdownGracePeriodSeconds: -1}]\n"
        )
        .is_err());
    }

    fn load(body: &str) -> Result<Loaded, ConfigError> {
        load_str("k.yaml", &format!("{HEAD}{body}"))
    }

    #[test]
    fn security_settings_rkube_cannot_honour_are_refused() {
        for (body, needle) in [
            (
                "enableServer: false\n",
                "field enableServer: false would turn off",
            ),
            (
                "enableDebuggingHandlers: false\n",
                "field enableDebuggingHandlers",
            ),
            (
                "tlsMinVersion: VersionTLS13\n",
                "a TLS 1.3 floor is not implemented",
            ),
            ("tlsMinVersion: VersionTLS99\n", "unknown TLS version"),
            (
                "tlsCipherSuites: [TLS_AES_128_GCM_SHA256]\n",
                "field tlsCipherSuites",
            ),
            (
                "tlsCurvePreferences: [X25519]\n",
                "field tlsCurvePreferences",
            ),
            ("seccompDefault: true\n", "field seccompDefault"),
            (
                "protectKernelDefaults: true\n",
                "field protectKernelDefaults",
            ),
            ("podPidsLimit: 100\n", "a per-pod PID limit"),
            (
                "imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\n",
                "allowlist of preloaded images",
            ),
        ] {
            let e = load(body).unwrap_err().to_string();
            assert!(e.contains(needle), "{body}: {e}");
            assert!(e.contains("refuses to start"), "{body}: {e}");
        }
        // Strict decoding: a field written twice is an error.
        assert!(load("maxPods: 1\nmaxPods: 2\n").is_err());
        // What rkube already does is accepted, without a warning.
        for body in [
            "enableServer: true\n",
            "tlsMinVersion: VersionTLS12\n",
            "tlsCipherSuites: []\n",
            "seccompDefault: false\n",
            "podPidsLimit: -1\n",
            "imagePullCredentialsVerificationPolicy: NeverVerify\n",
            "imagePullCredentialsVerificationPolicy: AlwaysVerify\n",
            "imagePullCredentialsVerificationPolicy: NeverVerifyPreloadedImages\n",
        ] {
            let l = load(body).unwrap_or_else(|e| panic!("{body}: {e}"));
            assert!(l.warnings.is_empty(), "{body}: {:?}", l.warnings);
        }
    }

    #[test]
    fn image_pull_credentials_verification_policy_is_kept_and_unknown_ones_refused() {
        assert_eq!(
            load("")
                .unwrap()
                .config
                .image_pull_credentials_verification_policy,
            VerifyPolicy::NeverVerifyPreloadedImages
        );
        let l = load("imagePullCredentialsVerificationPolicy: AlwaysVerify\n").unwrap();
        assert_eq!(
            l.config.image_pull_credentials_verification_policy,
            VerifyPolicy::AlwaysVerify
        );
        let e = load("imagePullCredentialsVerificationPolicy: Sometimes\n").unwrap_err();
        assert!(
            e.to_string().contains("unknown policy \"Sometimes\""),
            "{e}"
        );
    }

    #[test]
    fn defaults() {
        let l = load("").unwrap();
        let c = l.config;
        assert_eq!(c, KubeletConfiguration::default());
        assert_eq!(c.port, 10250);
        assert_eq!(c.healthz_port, 10248);
        assert_eq!(c.healthz_bind_address, "127.0.0.1");
        assert_eq!(c.address, "127.0.0.1");
        assert_eq!(c.node_status_update_frequency, Duration::from_secs(10));
        assert_eq!(c.node_status_report_frequency, Duration::from_secs(300));
        assert_eq!(c.sync_frequency, Duration::from_secs(60));
        assert_eq!(c.node_lease_duration_seconds, 40);
        assert_eq!(c.max_pods, 110);
        assert_eq!(c.eviction_hard["memory.available"], "100Mi");
        assert_eq!(c.eviction_hard["imagefs.available"], "15%");
        assert_eq!(
            c.eviction_pressure_transition_period,
            Duration::from_secs(300)
        );
        assert!(c.serialize_image_pulls);
        assert_eq!(
            c.container_runtime_endpoint,
            "unix:///run/containerd/containerd.sock"
        );
    }

    #[test]
    fn values_and_upstream_defaulting_rules() {
        let l = load(
            "nodeStatusUpdateFrequency: 4s\nmaxPods: 50\nhealthzPort: 0\nsyncFrequency: 20s\n\
             evictionHard: {memory.available: 1Gi}\nsystemReserved: {cpu: 500m, memory: 1Gi}\n\
             registerWithTaints: [{key: a, value: b, effect: NoSchedule}]\n\
             hairpinMode: promiscuous-bridge\nclusterDNS: [10.96.0.10]\nclusterDomain: cluster.local\n",
        )
        .unwrap();
        let c = &l.config;
        assert_eq!(c.node_status_update_frequency, Duration::from_secs(4));
        // Only the update frequency set: the report frequency follows it.
        assert_eq!(c.node_status_report_frequency, Duration::from_secs(4));
        assert_eq!(c.sync_frequency, Duration::from_secs(20));
        assert_eq!(c.max_pods, 50);
        assert_eq!(c.healthz_port, 0);
        // A given evictionHard replaces the defaults.
        assert_eq!(c.eviction_hard.len(), 1);
        assert_eq!(c.system_reserved["cpu"], "500m");
        assert_eq!(c.register_with_taints[0].key, "a");
        assert_eq!(
            c.cluster_dns,
            vec!["10.96.0.10".parse::<std::net::IpAddr>().unwrap()]
        );
        assert_eq!(c.cluster_domain, "cluster.local");
        assert_eq!(c.resolv_conf, "/etc/resolv.conf");
        assert_eq!(l.warnings.len(), 1, "{:?}", l.warnings);
        assert!(l.warnings[0].contains("hairpinMode"));
        let e = load("clusterDNS: [10.96.0.10, not-an-ip]\n").unwrap_err();
        assert!(
            e.message
                .contains("field clusterDNS: \"not-an-ip\" is not an IP address"),
            "{e}"
        );
        let e = load("configMapAndSecretChangeDetectionStrategy: Get\n").unwrap_err();
        assert!(e.message.contains("use Watch"), "{e}");
        assert!(
            load("configMapAndSecretChangeDetectionStrategy: Watch\nresolvConf: \"\"\n").is_ok()
        );
        let merged =
            load("evictionHard: {memory.available: 1Gi}\nmergeDefaultEvictionSettings: true\n")
                .unwrap();
        assert_eq!(merged.config.eviction_hard.len(), 5);
        assert_eq!(merged.config.eviction_hard["memory.available"], "1Gi");
        let short = load("evictionPressureTransitionPeriod: 15s\n").unwrap();
        assert_eq!(
            short.config.eviction_pressure_transition_period,
            Duration::from_secs(15)
        );
        assert!(short.warnings.is_empty());
    }

    #[test]
    fn errors_name_file_and_field() {
        let e = load("maxPod: 3\n").unwrap_err();
        assert_eq!(e.to_string(), "k.yaml: unknown field \"maxPod\"");
        let e = load("maxPods: many\n").unwrap_err();
        assert!(e.to_string().starts_with("k.yaml: field maxPods:"), "{e}");
        let e = load("nodeStatusUpdateFrequency: soon\n").unwrap_err();
        assert!(e.to_string().contains("nodeStatusUpdateFrequency"), "{e}");
        let e = load("nodeLeaseDurationSeconds: 0\n").unwrap_err();
        assert!(e
            .to_string()
            .contains("nodeLeaseDurationSeconds must be greater than 0"));
        let e = load("evictionHard: {memory.free: 1Gi}\n").unwrap_err();
        assert!(e
            .to_string()
            .contains("unsupported eviction signal memory.free"));
        let e = load("evictionHard: {memory.available: 150%}\n").unwrap_err();
        assert!(e.to_string().contains("evictionHard[memory.available]"));
        let e = load("kubeReserved: {memory: lots}\n").unwrap_err();
        assert!(e.to_string().contains("kubeReserved[memory]"));
        let e = load("registerWithTaints: [{key: a, effect: Sometimes}]\n").unwrap_err();
        assert!(e.to_string().contains("registerWithTaints[0].effect"));
        let e = load_str(
            "k.yaml",
            "apiVersion: kubelet.config.k8s.io/v1\nkind: KubeletConfiguration\n",
        )
        .unwrap_err();
        assert!(e
            .to_string()
            .contains("apiVersion \"kubelet.config.k8s.io/v1\""));
        let e = load_str(
            "k.yaml",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeProxyConfiguration\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("kind \"KubeProxyConfiguration\""));
    }

    #[test]
    fn garbage_collection_logs_and_swap_settings() {
        let d = load("").unwrap().config;
        assert_eq!(
            (
                d.image_gc_high_threshold_percent,
                d.image_gc_low_threshold_percent
            ),
            (85, 80)
        );
        assert_eq!(d.image_minimum_gc_age, Duration::from_secs(120));
        assert_eq!(d.image_maximum_gc_age, Duration::ZERO);
        assert!(d.fail_swap_on);
        assert!(d.fail_cgroup_v1);
        assert_eq!(d.container_log_max_size, 10 << 20);
        assert_eq!(
            (d.container_log_max_files, d.container_log_max_workers),
            (5, 1)
        );
        assert_eq!(d.container_log_monitor_interval, Duration::from_secs(10));
        let c = load(
            "imageGCHighThresholdPercent: 60\nimageGCLowThresholdPercent: 40\nimageMinimumGCAge: 0s\n\
             imageMaximumGCAge: 1h\nfailSwapOn: false\nfailCgroupV1: false\nmemorySwap: {swapBehavior: LimitedSwap}\n\
             containerLogMaxSize: 1Mi\ncontainerLogMaxFiles: 3\ncontainerLogMonitorInterval: 3s\n",
        )
        .unwrap();
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        let c = c.config;
        // A zero imageMinimumGCAge is upstream's default, 2m.
        assert_eq!(c.image_minimum_gc_age, Duration::from_secs(120));
        assert_eq!(c.image_maximum_gc_age, Duration::from_secs(3600));
        assert!(!c.fail_swap_on);
        assert!(!c.fail_cgroup_v1);
        assert_eq!(c.memory_swap_behavior, "LimitedSwap");
        assert_eq!(
            (c.container_log_max_size, c.container_log_max_files),
            (1 << 20, 3)
        );
        // Upstream's validation messages.
        for (body, want) in [
            ("imageGCHighThresholdPercent: 101\n", "imageGCHighThresholdPercent (--image-gc-high-threshold) 101 must be between 0 and 100, inclusive"),
            ("imageGCLowThresholdPercent: 90\n", "imageGCLowThresholdPercent (--image-gc-low-threshold) 90 must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) 85"),
            ("imageMaximumGCAge: 1m\n", "imageMaximumGCAge 1m0s must be greater than imageMinimumGCAge 2m0s"),
            ("memorySwap: {swapBehavior: UnlimitedSwap}\n", "memorySwap.swapBehavior \"UnlimitedSwap\" must be one of"),
            ("memorySwap: {swapLimit: \"1\"}\n", "field memorySwap: unknown field \"swapLimit\""),
            ("containerLogMaxFiles: 1\n", "containerLogMaxFiles must be greater than 1"),
            ("containerLogMaxWorkers: 0\n", "containerLogMaxWorkers must be greater than or equal to 1"),
            ("containerLogMonitorInterval: 2s\n", "containerLogMonitorInterval must be a positive time duration greater than or equal to 3s"),
            ("containerLogMaxSize: huge\n", "field containerLogMaxSize: \"huge\" is not a quantity"),
            ("evictionSoft: {memory.available: 1Gi}\n", "grace period must be specified for the soft eviction threshold memory.available"),
            ("evictionSoft: {memory.free: 1Gi}\nevictionSoftGracePeriod: {memory.free: 1m}\n", "evictionSoft: unsupported eviction signal memory.free"),
            ("evictionSoft: {memory.available: 1Gi}\nevictionSoftGracePeriod: {memory.available: soon}\n", "invalid eviction grace period specified: soon"),
            ("evictionMinimumReclaim: {memory.available: 0%}\n", "must be a non-negative quantity or a positive percentage"),
            ("evictionMinimumReclaim: {memory.available: -1Gi}\n", "must be a non-negative quantity or a positive percentage"),
            ("evictionMaxPodGracePeriod: -1\n", "evictionMaxPodGracePeriod -1 must not be negative"),
            ("featureGates: {NoSuchGate: true}\n", "field featureGates: unrecognized feature gate: NoSuchGate"),
            ("featureGates: {NodeSwap: false}\n", "cannot set feature gate NodeSwap to false, feature is locked to true"),
            ("featureGates: {KubeletSeparateDiskGC: false}\n", "feature gate KubeletSeparateDiskGC=false is not implemented by rkube kubelet"),
        ] {
            let e = load(body).unwrap_err();
            assert!(e.message.contains(want), "{body}: {e}");
        }
    }

    #[test]
    fn thresholds() {
        assert_eq!(
            parse_threshold("100Mi"),
            Some(Threshold::Quantity(100 << 20))
        );
        assert_eq!(parse_threshold("10%").unwrap().amount(1000), 100);
        assert_eq!(parse_threshold("x"), None);
    }

    fn flags(list: &[&str]) -> Vec<crate::options::ConfigFlag> {
        crate::options::parse(list.iter().map(|s| s.to_string()))
            .unwrap()
            .config_flags
    }

    #[test]
    fn flags_override_the_file_field_by_field() {
        let dir = std::env::temp_dir().join(format!("rkube-config-flags-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("config.yaml");
        std::fs::write(
            &file,
            format!("{HEAD}maxPods: 10\nclusterDNS: [10.0.0.10]\nauthentication: {{anonymous: {{enabled: false}}, x509: {{clientCAFile: /ca.crt}}}}\nlogging: {{verbosity: 3}}\n"),
        )
        .unwrap();
        let e = super::load(
            Some(&file),
            &flags(&[
                "--max-pods=20",
                "--anonymous-auth",
                "--register-with-taints=a=b:NoSchedule",
            ]),
        )
        .unwrap();
        let c = &e.loaded.config;
        assert_eq!(c.max_pods, 20);
        assert_eq!(
            c.cluster_dns,
            vec!["10.0.0.10".parse::<std::net::IpAddr>().unwrap()]
        );
        assert_eq!(c.logging_verbosity, 3);
        assert_eq!(c.register_with_taints.len(), 1);
        assert_eq!(c.register_with_taints[0].effect, "NoSchedule");
        let api = crate::server::ApiSettings::from_document(&e.document).unwrap();
        assert!(api.auth.anonymous, "--anonymous-auth overrides the file");
        assert_eq!(
            api.client_ca_file.as_deref(),
            Some(std::path::Path::new("/ca.crt")),
            "the file's sibling field stays"
        );
        // A bad value a flag set is reported against the flag.
        let err = super::load(Some(&file), &flags(&["--pod-max-pids=10"])).unwrap_err();
        assert!(
            err.to_string()
                .contains("(field podPidsLimit set by --pod-max-pids)"),
            "{err}"
        );
        let err = super::load(None, &flags(&["--node-status-update-frequency=soon"])).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("flag --node-status-update-frequency: "),
            "{err}"
        );
        // Without --config: upstream's defaults with the flags' fields.
        let e = super::load(None, &flags(&["--cluster-domain=cluster.local"])).unwrap();
        assert_eq!(e.loaded.config.cluster_domain, "cluster.local");
        assert_eq!(
            e.loaded.config.max_pods,
            KubeletConfiguration::default().max_pods
        );
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn logging_honoured_or_refused() {
        let c = load("logging: {format: text, verbosity: 4, flushFrequency: 5s, options: {text: {infoBufferSize: '0'}, json: {splitStream: true}}}\n")
            .unwrap()
            .config;
        assert_eq!(c.logging_verbosity, 4);
        assert!(load("logging: {flushFrequency: 5000000000}\n").is_ok());
        for (body, needle) in [
            (
                "logging: {format: json}\n",
                "logging.format \"json\" is not implemented",
            ),
            (
                "logging: {vmodule: [{filePattern: a, verbosity: 3}]}\n",
                "logging.vmodule",
            ),
            (
                "logging: {options: {text: {splitStream: true}}}\n",
                "splitStream",
            ),
            (
                "logging: {colour: true}\n",
                "unknown field \"logging.colour\"",
            ),
            ("logging: {verbosity: -1}\n", "logging.verbosity"),
        ] {
            let e = load(body).unwrap_err().to_string();
            assert!(e.contains(needle), "{body}: {e}");
        }
    }

    #[test]
    fn empty_strings_take_upstreams_defaults() {
        let body: String = EMPTY_IS_DEFAULT
            .iter()
            .map(|k| format!("{k}: \"\"\n"))
            .collect();
        let c = load(&body).unwrap().config;
        let d = KubeletConfiguration::default();
        assert_eq!(c, d);
        assert_eq!(
            c.container_runtime_endpoint,
            "unix:///run/containerd/containerd.sock"
        );
    }

    /// kubeadm's own KubeletConfiguration (`kubeadm config print
    /// init-defaults --component-configs KubeletConfiguration`, v1.37.2),
    /// with the cgroupfs driver, loads, and means upstream's defaults
    /// where it writes zero values.
    #[test]
    fn kubeadms_kubelet_configuration_loads() {
        let c = load_str("kubeadm.yaml", KUBEADM_KUBELET_CONFIG)
            .unwrap()
            .config;
        assert_eq!(
            c.container_runtime_endpoint,
            "unix:///run/containerd/containerd.sock"
        );
        assert_eq!(c.cluster_domain, "cluster.local");
        assert!(c.rotate_certificates);
        assert_eq!(c.node_status_update_frequency, Duration::from_secs(10));
        // kubeadm's `syncFrequency: 0s` is upstream's default.
        assert_eq!(c.sync_frequency, Duration::from_secs(60));
        assert_eq!(c.image_minimum_gc_age, Duration::from_secs(120));
        assert_eq!(
            c.volume_stats_agg_period,
            Duration::from_secs(60),
            "0s is the default"
        );
        assert!(c.enable_system_log_handler);
        assert!(
            !load("enableSystemLogHandler: false\n")
                .unwrap()
                .config
                .enable_system_log_handler
        );
        assert_eq!(
            load("volumeStatsAggPeriod: 2m\n")
                .unwrap()
                .config
                .volume_stats_agg_period,
            Duration::from_secs(120)
        );
        let api = crate::server::ApiSettings::parse(KUBEADM_KUBELET_CONFIG).unwrap();
        assert!(api.auth.webhook_authz && api.auth.webhook_authn && !api.auth.anonymous);
    }

    #[test]
    fn client_rates_honoured_and_validated() {
        let d = load("").unwrap().config;
        assert_eq!(
            (
                d.kube_api_qps,
                d.kube_api_burst,
                d.event_record_qps,
                d.event_burst,
                d.registry_pull_qps,
                d.registry_burst
            ),
            (50, 100, 50, 100, 5, 10)
        );
        let c = load("kubeAPIQPS: 0\nkubeAPIBurst: 0\neventRecordQPS: 7\neventBurst: 3\nregistryPullQPS: 0\nregistryBurst: 0\n")
            .unwrap()
            .config;
        assert_eq!(
            (
                c.kube_api_qps,
                c.kube_api_burst,
                c.event_record_qps,
                c.event_burst,
                c.registry_pull_qps,
                c.registry_burst
            ),
            (0, 100, 7, 3, 0, 10),
            "a zero burst is the default, a zero QPS stays"
        );
        let e = load("kubeAPIQPS: -1\n").unwrap_err().to_string();
        assert!(e.contains("invalid configuration: kubeAPIQPS (--kube-api-qps) -1 must not be a negative number"), "{e}");
        let e = load("registryBurst: -2\n").unwrap_err().to_string();
        assert!(e.contains("registryBurst (--registry-burst) -2"), "{e}");
    }

    const KUBEADM_KUBELET_CONFIG: &str = "apiVersion: kubelet.config.k8s.io/v1beta1
authentication:
  anonymous:
    enabled: false
  webhook:
    cacheTTL: 0s
    enabled: true
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
authorization:
  mode: Webhook
  webhook:
    cacheAuthorizedTTL: 0s
    cacheUnauthorizedTTL: 0s
cgroupDriver: cgroupfs
clusterDNS:
- 10.96.0.10
clusterDomain: cluster.local
containerRuntimeEndpoint: \"\"
cpuManagerReconcilePeriod: 0s
crashLoopBackOff: {}
evictionPressureTransitionPeriod: 0s
fileCheckFrequency: 0s
healthzBindAddress: 127.0.0.1
healthzPort: 10248
httpCheckFrequency: 0s
imageMaximumGCAge: 0s
imageMinimumGCAge: 0s
kind: KubeletConfiguration
logging:
  flushFrequency: 0
  options:
    json:
      infoBufferSize: \"0\"
    text:
      infoBufferSize: \"0\"
  verbosity: 0
memorySwap: {}
nodeStatusReportFrequency: 0s
nodeStatusUpdateFrequency: 0s
rotateCertificates: true
runtimeRequestTimeout: 0s
shutdownGracePeriod: 0s
shutdownGracePeriodCriticalPods: 0s
staticPodPath: /etc/kubernetes/manifests
streamingConnectionIdleTimeout: 0s
syncFrequency: 0s
volumeStatsAggPeriod: 0s
";
}
