//! Container and pod resources → CRI and cgroups (pure), as upstream's
//! kubelet computes them: `generateLinuxContainerResources` and
//! `calculateLinuxResources` (`kuberuntime_container_linux.go`), the CPU
//! conversions of `pkg/kubelet/cm/helpers_linux.go`, `ResourceConfigForPod`
//! for the pod cgroup, the OOM score of `pkg/kubelet/qos`, the QoS class of
//! `pkg/apis/core/v1/helper/qos` and the cgroupfs names of the pod
//! container manager.
//!
//! # Container resources ([`container_resources`])
//!
//! * `cpu_shares` from the CPU request (`milli × 1024 / 1000`, at least 2,
//!   at most 262144; a container without a request uses its limit);
//! * with CFS quota enforced (the kubelet's `cpuCFSQuota`, default on):
//!   `cpu_period` (the kubelet's `cpuCFSQuotaPeriod`, 100000 µs) and
//!   `cpu_quota = limit_milli × period / 1000`, at least 1000, 0 without a
//!   limit;
//! * `memory_limit_in_bytes` from the memory limit;
//! * pod-level resources (`spec.resources`, PodLevelResources on by
//!   default): a container without a cpu / memory limit takes the pod's;
//!   pod-level hugepage limits apply to every container unless it sets its
//!   own;
//! * `oom_score_adj` from the QoS class ([`container_oom_score_adj`]);
//! * `hugepage_limits`: one entry per page size of the host, the limit from
//!   `limits.hugepages-<size>` (0 otherwise);
//! * cgroup v2: `memory.oom.group=1` unless `singleProcessOOMKill`; with
//!   MemoryQoS (beta, on by default in v1.37) `memory.min`/`memory.low`
//!   (`0` under the default `memoryReservationPolicy: None`, the request
//!   under `TieredReservation`) and `memory.high` when a
//!   `memoryThrottlingFactor` is configured (default: none); without
//!   MemoryQoS `memory.high=max`;
//! * swap (`memorySwapBehavior: NoSwap`, the default) where the swap
//!   controller exists: cgroup v1 `memory_swap_limit_in_bytes` = the memory
//!   limit, cgroup v2 `memory.swap.max=0`; with `LimitedSwap` on cgroup v2
//!   a Burstable container's share of the host's swap ([`limited_swap`]).
//!
//! # Not mapped
//!
//! * DRA node-allocatable resources (alpha, off by default) and exclusive
//!   CPUs of the static CPU manager (rkube has no CPU manager: quota is
//!   never disabled for exclusive CPUs);
//! * the QoS-level cgroups (`/kubepods/burstable` and `/besteffort` shares
//!   and `qosReserved`), which upstream's QoS container manager keeps:
//!   [`pod_cgroup_config`] gives what the *pod* cgroup gets, the caller
//!   writes it (containerd 1.x does not take pod-level resources).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
use kube::ResourceExt;
use rkube_cri::v1;
use rkube_model::quantity::Quantity;
use rkube_model::resources::{add_resource_list, ResourceList};

/// Fewest CPU shares a cgroup gets.
pub const MIN_SHARES: i64 = 2;
/// Most CPU shares a cgroup gets.
pub const MAX_SHARES: i64 = 262_144;
/// Shares of one CPU.
pub const SHARES_PER_CPU: i64 = 1024;
/// The default CFS period, in microseconds.
pub const QUOTA_PERIOD: i64 = 100_000;
/// The smallest CFS quota the kubelet sets, in microseconds.
pub const MIN_QUOTA_PERIOD: i64 = 1000;

const GUARANTEED_OOM_SCORE_ADJ: i64 = -997;
const BESTEFFORT_OOM_SCORE_ADJ: i64 = 1000;
use crate::pod::is_node_critical;

/// A pod's quality-of-service class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QosClass {
    /// Requests equal limits for cpu and memory everywhere.
    Guaranteed,
    /// Anything between.
    Burstable,
    /// No cpu or memory requests or limits at all.
    BestEffort,
}

impl QosClass {
    /// The API's spelling (`status.qosClass`).
    pub fn as_str(self) -> &'static str {
        match self {
            QosClass::Guaranteed => "Guaranteed",
            QosClass::Burstable => "Burstable",
            QosClass::BestEffort => "BestEffort",
        }
    }
}

/// The node's and the kubelet's side of resources.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceOptions {
    /// The machine's memory capacity in bytes (cAdvisor's
    /// `MemoryCapacity`), the denominator of Burstable OOM scores; > 0.
    pub node_memory_capacity: i64,
    /// The node's allocatable memory in bytes (for `memory.high` of a
    /// container without a limit, with a throttling factor).
    pub node_allocatable_memory: i64,
    /// The host runs the unified cgroup v2 hierarchy ([`detect_cgroup_v2`]).
    pub cgroup_v2: bool,
    /// The kubelet's `cpuCFSQuota` (default true).
    pub cpu_cfs_quota: bool,
    /// The kubelet's `cpuCFSQuotaPeriod` in µs (default 100000).
    pub cpu_cfs_quota_period_us: i64,
    /// The kubelet's `singleProcessOOMKill`; `None` = upstream's default
    /// (true on cgroup v1, false on v2).
    pub single_process_oom_kill: Option<bool>,
    /// The memory controller accounts swap ([`detect_swap_controller`]).
    pub swap_controller_available: bool,
    /// The host's huge page sizes, e.g. `["2MB", "1GB"]`
    /// ([`detect_hugepage_sizes`]).
    pub hugepage_sizes: Vec<String>,
    /// The MemoryQoS feature gate (beta, default true in v1.37); applies on
    /// cgroup v2 only.
    pub memory_qos: bool,
    /// The kubelet's `memoryThrottlingFactor` (default none: no `memory.high`).
    pub memory_throttling_factor: Option<f64>,
    /// `memoryReservationPolicy: TieredReservation` (default `None`).
    pub tiered_memory_reservation: bool,
    /// The host's page size in bytes (4096).
    pub page_size: i64,
    /// The kubelet's `cgroupRoot` (default `/`).
    pub cgroup_root: String,
    /// `memorySwap.swapBehavior: LimitedSwap` (default `NoSwap`).
    pub limited_swap: bool,
    /// The host's swap in bytes (cAdvisor's `SwapCapacity`, `SwapTotal`).
    pub swap_capacity: i64,
}

impl ResourceOptions {
    /// Upstream's kubelet defaults on a cgroup v1 host with
    /// `node_memory_capacity` bytes; set the host fields from the `detect_*`
    /// functions.
    pub fn new(node_memory_capacity: i64) -> Self {
        ResourceOptions {
            node_memory_capacity,
            node_allocatable_memory: node_memory_capacity,
            cgroup_v2: false,
            cpu_cfs_quota: true,
            cpu_cfs_quota_period_us: QUOTA_PERIOD,
            single_process_oom_kill: None,
            swap_controller_available: false,
            hugepage_sizes: Vec::new(),
            memory_qos: true,
            memory_throttling_factor: None,
            tiered_memory_reservation: false,
            page_size: 4096,
            cgroup_root: "/".into(),
            limited_swap: false,
            swap_capacity: 0,
        }
    }

    fn single_process_oom_kill(&self) -> bool {
        self.single_process_oom_kill.unwrap_or(!self.cgroup_v2)
    }

    fn memory_qos_enforced(&self) -> bool {
        self.memory_qos && self.cgroup_v2
    }
}

/// Whether the host runs the unified cgroup v2 hierarchy (reads
/// `/sys/fs/cgroup/cgroup.controllers`).
pub fn detect_cgroup_v2() -> bool {
    std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists()
}

/// Whether the memory controller accounts swap, checked as upstream: cgroup
/// v1 `memory.memsw.limit_in_bytes`, cgroup v2 `memory.swap.max` in the
/// kubelet's own cgroup (reads the host).
pub fn detect_swap_controller(cgroup_v2: bool) -> bool {
    if !cgroup_v2 {
        return std::path::Path::new("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes").exists();
    }
    let own = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("0::").map(|p| p.trim().to_string()))
        });
    own.is_some_and(|p| {
        std::path::Path::new("/sys/fs/cgroup")
            .join(p.trim_start_matches('/'))
            .join("memory.swap.max")
            .exists()
    })
}

/// The host's huge page sizes as the hugetlb controller names them
/// (`2MB`, `1GB`), from `/sys/kernel/mm/hugepages/hugepages-<n>kB`.
pub fn detect_hugepage_sizes() -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/sys/kernel/mm/hugepages") else {
        return Vec::new();
    };
    let mut kbs: Vec<u64> = dir
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_prefix("hugepages-")?
                .strip_suffix("kB")?
                .parse()
                .ok()
        })
        .collect();
    kbs.sort_unstable();
    kbs.into_iter().map(hugetlb_size_from_kb).collect()
}

/// `2048` kB → `2MB`, `1048576` → `1GB` (the kernel's hugetlb names).
fn hugetlb_size_from_kb(kb: u64) -> String {
    if kb >= 1 << 20 {
        format!("{}GB", kb >> 20)
    } else if kb >= 1 << 10 {
        format!("{}MB", kb >> 10)
    } else {
        format!("{kb}KB")
    }
}

// ---- quantities ----

fn parse_list(m: Option<&BTreeMap<String, ApiQuantity>>) -> ResourceList {
    m.into_iter()
        .flatten()
        .filter_map(|(k, v)| Quantity::parse(&v.0).ok().map(|q| (k.clone(), q)))
        .collect()
}

fn requests_of(r: Option<&ResourceRequirements>) -> ResourceList {
    parse_list(r.and_then(|r| r.requests.as_ref()))
}

fn limits_of(r: Option<&ResourceRequirements>) -> ResourceList {
    parse_list(r.and_then(|r| r.limits.as_ref()))
}

fn milli(list: &ResourceList, name: &str) -> i64 {
    list.get(name).map_or(0, |q| q.milli_value())
}

fn value(list: &ResourceList, name: &str) -> i64 {
    list.get(name).map_or(0, |q| q.value())
}

fn is_pod_level_resource(name: &str) -> bool {
    name == "cpu" || name == "memory" || name.starts_with("hugepages-")
}

fn pod_resources(pod: &Pod) -> Option<&ResourceRequirements> {
    pod.spec.as_ref().and_then(|s| s.resources.as_ref())
}

/// upstream's `IsPodLevelResourcesSet`: `spec.resources` names cpu, memory
/// or hugepages.
fn pod_level_set(pod: &Pod) -> bool {
    pod_resources(pod).is_some_and(|r| {
        r.requests
            .iter()
            .chain(r.limits.iter())
            .flat_map(|m| m.keys())
            .any(|k| is_pod_level_resource(k))
    })
}

fn pod_level_requests_set(pod: &Pod) -> bool {
    pod_resources(pod)
        .and_then(|r| r.requests.as_ref())
        .is_some_and(|m| m.keys().any(|k| is_pod_level_resource(k)))
}

/// upstream's aggregation of container resources with sidecars
/// ([`rkube_model::requests::aggregate_containers`]).
fn aggregate(pod: &Pod, of: impl Fn(&Container) -> ResourceList) -> ResourceList {
    let Some(spec) = pod.spec.as_ref() else {
        return ResourceList::new();
    };
    let init = spec.init_containers.iter().flatten();
    rkube_model::requests::aggregate_containers(
        &spec.containers,
        init.map(|c| (c, crate::pod::is_sidecar(c))),
        of,
    )
}

fn overhead(pod: &Pod) -> ResourceList {
    parse_list(pod.spec.as_ref().and_then(|s| s.overhead.as_ref()))
}

/// upstream's `PodRequests` (spec only): aggregated container requests,
/// pod-level requests overriding, plus overhead. The eviction ranking
/// reads a pod's requests from here too.
pub fn pod_requests(pod: &Pod) -> ResourceList {
    let mut reqs = aggregate(pod, |c| requests_of(c.resources.as_ref()));
    if pod_level_requests_set(pod) {
        for (k, v) in requests_of(pod_resources(pod)) {
            if is_pod_level_resource(&k) {
                reqs.insert(k, v);
            }
        }
    }
    add_resource_list(&mut reqs, &overhead(pod));
    reqs
}

/// upstream's `PodLimits` (spec only): aggregated container limits,
/// pod-level limits overriding, overhead added to non-zero limits.
pub fn pod_limits(pod: &Pod) -> ResourceList {
    let mut limits = aggregate(pod, |c| limits_of(c.resources.as_ref()));
    if pod_level_set(pod) {
        for (k, v) in limits_of(pod_resources(pod)) {
            if is_pod_level_resource(&k) {
                limits.insert(k, v);
            }
        }
    }
    for (k, v) in overhead(pod) {
        if let Some(l) = limits.get_mut(&k) {
            if !l.is_zero() {
                *l = l.checked_add(&v);
            }
        }
    }
    limits
}

// ---- QoS ----

/// QoS of one requirements block (upstream's `requirementsQOS`).
fn requirements_qos(r: Option<&ResourceRequirements>) -> QosClass {
    let raw_empty = r.is_none_or(|r| {
        r.requests.as_ref().is_none_or(|m| m.is_empty())
            && r.limits.as_ref().is_none_or(|m| m.is_empty())
    });
    if raw_empty {
        return QosClass::BestEffort;
    }
    let (req, lim) = (requests_of(r), limits_of(r));
    let mut qos = None;
    for name in ["cpu", "memory"] {
        let zero = Quantity::default();
        let rq = req.get(name).unwrap_or(&zero);
        let lq = lim.get(name).unwrap_or(&zero);
        let this = if rq != lq {
            return QosClass::Burstable;
        } else if rq.is_zero() {
            QosClass::BestEffort
        } else {
            QosClass::Guaranteed
        };
        match qos {
            None => qos = Some(this),
            Some(q) if q != this => return QosClass::Burstable,
            Some(_) => {}
        }
    }
    qos.unwrap_or(QosClass::BestEffort)
}

/// The pod's QoS class as the kubelet reads it (upstream's `GetPodQOS`):
/// `status.qosClass` when set, else computed — from pod-level resources
/// when the pod sets cpu/memory/hugepages there, else from its containers
/// (init and regular): any Burstable container, or a mix of Guaranteed and
/// BestEffort, makes the pod Burstable.
pub fn qos_class(pod: &Pod) -> QosClass {
    match pod.status.as_ref().and_then(|s| s.qos_class.as_deref()) {
        Some("Guaranteed") => return QosClass::Guaranteed,
        Some("Burstable") => return QosClass::Burstable,
        Some("BestEffort") => return QosClass::BestEffort,
        _ => {}
    }
    compute_qos_class(pod)
}

/// upstream's `ComputePodQOS` (ignores `status.qosClass`).
pub fn compute_qos_class(pod: &Pod) -> QosClass {
    if pod_level_set(pod) {
        return requirements_qos(pod_resources(pod));
    }
    let Some(spec) = pod.spec.as_ref() else {
        return QosClass::BestEffort;
    };
    let mut qos = None;
    for c in spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
    {
        let this = requirements_qos(c.resources.as_ref());
        if this == QosClass::Burstable {
            return QosClass::Burstable;
        }
        match qos {
            None => qos = Some(this),
            Some(q) if q != this => return QosClass::Burstable,
            Some(_) => {}
        }
    }
    qos.unwrap_or(QosClass::BestEffort)
}

// ---- OOM score ----

fn memory_request(c: &Container) -> i64 {
    value(&requests_of(c.resources.as_ref()), "memory")
}

/// upstream's `remainingPodMemReqPerContainer`: the pod-level memory request
/// not requested by any container, shared equally by all containers.
fn remaining_pod_memory_per_container(pod: &Pod) -> i64 {
    let pod_req = value(&requests_of(pod_resources(pod)), "memory");
    if pod_req == 0 {
        return 0;
    }
    let spec = pod.spec.as_ref().expect("pod-level requests imply a spec");
    let n = (spec.containers.len() + spec.init_containers.as_ref().map_or(0, |v| v.len())) as i64;
    let containers = value(
        &aggregate(pod, |c| requests_of(c.resources.as_ref())),
        "memory",
    );
    (pod_req - containers).max(0) / n.max(1)
}

/// The `oom_score_adj` of container `c` (upstream's
/// `GetContainerOOMScoreAdjust`): -997 for Guaranteed and node-critical
/// pods, 1000 for BestEffort, else `1000 - 1000 × request / capacity`
/// (with the pod-level request's unassigned share added, and a sidecar no
/// higher than the smallest regular container), kept within 3..=999.
pub fn container_oom_score_adj(pod: &Pod, c: &Container, memory_capacity: i64) -> i64 {
    if is_node_critical(pod) {
        return GUARANTEED_OOM_SCORE_ADJ;
    }
    match qos_class(pod) {
        QosClass::Guaranteed => return GUARANTEED_OOM_SCORE_ADJ,
        QosClass::BestEffort => return BESTEFFORT_OOM_SCORE_ADJ,
        QosClass::Burstable => {}
    }
    let cap = memory_capacity.max(1);
    let remaining = if pod_level_requests_set(pod) {
        remaining_pod_memory_per_container(pod)
    } else {
        0
    };
    // In i128: requests and capacity are i64 quantities (a pod bound by
    // nodeName skips the scheduler's fit check), 1000 × them is not.
    let score = |request: i64| {
        1000 - (1000 * (i128::from(request) + i128::from(remaining))) / i128::from(cap)
    };
    let mut adj = score(memory_request(c));
    let spec = pod.spec.as_ref();
    let is_sidecar = crate::pod::is_sidecar(c)
        && spec
            .and_then(|s| s.init_containers.as_ref())
            .is_some_and(|ics| ics.iter().any(|i| i.name == c.name));
    if is_sidecar {
        if let Some(min) = spec.and_then(|s| s.containers.iter().map(memory_request).min()) {
            adj = adj.min(score(min));
        }
    }
    if adj < i128::from(1000 + GUARANTEED_OOM_SCORE_ADJ) {
        return 1000 + GUARANTEED_OOM_SCORE_ADJ;
    }
    if adj >= i128::from(BESTEFFORT_OOM_SCORE_ADJ) {
        return BESTEFFORT_OOM_SCORE_ADJ - 1;
    }
    adj as i64
}

// ---- CPU conversions (pkg/kubelet/cm/helpers_linux.go) ----

/// upstream's `MilliCPUToShares`.
pub fn milli_cpu_to_shares(milli_cpu: i64) -> i64 {
    if milli_cpu == 0 {
        return MIN_SHARES;
    }
    let shares = i128::from(milli_cpu) * i128::from(SHARES_PER_CPU) / 1000;
    shares.clamp(i128::from(MIN_SHARES), i128::from(MAX_SHARES)) as i64
}

/// upstream's `MilliCPUToQuota`: 0 without a limit, else at least 1000 µs.
pub fn milli_cpu_to_quota(milli_cpu: i64, period: i64) -> i64 {
    if milli_cpu == 0 {
        return 0;
    }
    // Saturated: a limit of 100G CPUs must not wrap to a tiny quota.
    let quota = i128::from(milli_cpu) * i128::from(period) / 1000;
    quota.clamp(i128::from(MIN_QUOTA_PERIOD), i128::from(i64::MAX)) as i64
}

/// upstream's `SharesToMilliCPU`.
pub fn shares_to_milli_cpu(shares: i64) -> i64 {
    if shares < MIN_SHARES {
        return 0;
    }
    ((i128::from(shares) * 1000 + i128::from(SHARES_PER_CPU) - 1) / i128::from(SHARES_PER_CPU))
        .min(i128::from(i64::MAX)) as i64
}

// ---- container resources ----

/// A container limit, or the pod-level one when the pod sets pod-level
/// resources and the container has none (upstream's `getCPULimit` /
/// `getMemoryLimit`).
fn effective_limit(pod: &Pod, c: &Container, name: &str) -> Quantity {
    let own = limits_of(c.resources.as_ref())
        .get(name)
        .copied()
        .unwrap_or_default();
    if own.is_zero() && pod_level_set(pod) {
        return limits_of(pod_resources(pod))
            .get(name)
            .copied()
            .unwrap_or_default();
    }
    own
}

/// upstream's `calculateLinuxResources`.
fn calculate(
    cpu_request: Quantity,
    cpu_limit: Quantity,
    memory_limit: Quantity,
    opts: &ResourceOptions,
) -> v1::LinuxContainerResources {
    let mut r = v1::LinuxContainerResources {
        cpu_shares: milli_cpu_to_shares(cpu_request.milli_value()),
        memory_limit_in_bytes: memory_limit.value(),
        ..Default::default()
    };
    if opts.cpu_cfs_quota {
        let period = opts.cpu_cfs_quota_period_us;
        r.cpu_quota = milli_cpu_to_quota(cpu_limit.milli_value(), period);
        r.cpu_period = period;
    }
    if opts.cgroup_v2 && !opts.single_process_oom_kill() {
        r.unified.insert("memory.oom.group".into(), "1".into());
    }
    r
}

/// `2Mi` → `2MB` (upstream's `HugePageUnitSizeFromByteSize`).
fn hugepage_unit_size(mut size: i64) -> Option<String> {
    const UNITS: [&str; 6] = ["B", "KB", "MB", "GB", "TB", "PB"];
    let mut i = 0;
    while size != 0 && size % 1024 == 0 && i < UNITS.len() - 1 {
        size /= 1024;
        i += 1;
    }
    if size > 1024 && i < UNITS.len() - 1 {
        return None;
    }
    Some(format!("{size}{}", UNITS[i]))
}

/// `hugepages-2Mi` → `2MB`.
fn hugepage_size_of(resource: &str) -> Option<String> {
    let size = Quantity::parse(resource.strip_prefix("hugepages-")?).ok()?;
    hugepage_unit_size(size.value())
}

/// upstream's `GetHugepageLimitsFromResources`: one entry per host page
/// size; pod-level hugepage limits first, the container's own replacing.
fn hugepage_limits(pod: &Pod, c: &Container, opts: &ResourceOptions) -> Vec<v1::HugepageLimit> {
    let mut required: BTreeMap<String, u64> = BTreeMap::new();
    let mut define = |list: ResourceList| {
        for (name, q) in list {
            if let Some(size) = hugepage_size_of(&name) {
                required.insert(size, q.value().max(0) as u64);
            }
        }
    };
    if pod_level_set(pod) {
        define(limits_of(pod_resources(pod)));
    }
    define(limits_of(c.resources.as_ref()));
    opts.hugepage_sizes
        .iter()
        .map(|size| v1::HugepageLimit {
            page_size: size.clone(),
            limit: required.get(size).copied().unwrap_or(0),
        })
        .collect()
}

/// `memory.high` for a request and a limit: `request + (limit - request) ×
/// factor`, rounded down to pages.
fn memory_high(request: i64, limit: i64, factor: f64, page_size: i64) -> i64 {
    let page = page_size.max(1) as f64;
    ((request as f64 + (limit as f64 - request as f64) * factor) / page).floor() as i64
        * page_size.max(1)
}

/// The swap a container may use under `LimitedSwap`, as upstream's
/// `GetContainerSwapBehavior` and `calcSwapForBurstablePods`: only on
/// cgroup v2, only for containers of Burstable pods that are not critical,
/// with a memory request different from their limit: the request's share
/// of the node's memory, of the host's swap. `None`: no swap.
pub fn limited_swap(pod: &Pod, c: &Container, opts: &ResourceOptions) -> Option<i64> {
    if !opts.limited_swap || !opts.cgroup_v2 || !opts.swap_controller_available {
        return None;
    }
    if crate::pod::is_critical(pod) || qos_class(pod) != QosClass::Burstable {
        return None;
    }
    let request = value(&requests_of(c.resources.as_ref()), "memory");
    let limit = value(&limits_of(c.resources.as_ref()), "memory");
    if (request == 0 && limit == 0) || request == limit {
        return None;
    }
    let total = opts.node_memory_capacity;
    if total <= 0 || request > total {
        return None;
    }
    Some((request as f64 / total as f64 * opts.swap_capacity as f64) as i64)
}

/// The CRI resources of container `c` (see the module docs).
pub fn container_resources(
    pod: &Pod,
    c: &Container,
    opts: &ResourceOptions,
) -> v1::LinuxContainerResources {
    let requests = requests_of(c.resources.as_ref());
    let memory_limit = effective_limit(pod, c, "memory");
    let cpu_limit = effective_limit(pod, c, "cpu");
    let cpu_request = requests.get("cpu").copied().unwrap_or(cpu_limit);
    let mut r = calculate(cpu_request, cpu_limit, memory_limit, opts);
    r.oom_score_adj = container_oom_score_adj(pod, c, opts.node_memory_capacity);
    r.hugepage_limits = hugepage_limits(pod, c, opts);

    // memorySwap.swapBehavior: NoSwap, or LimitedSwap where it applies
    if opts.swap_controller_available {
        if opts.cgroup_v2 {
            let swap = limited_swap(pod, c, opts).unwrap_or(0);
            r.unified.insert("memory.swap.max".into(), swap.to_string());
        } else {
            r.memory_swap_limit_in_bytes = r.memory_limit_in_bytes;
        }
    }

    if opts.memory_qos_enforced() {
        let request = value(&requests, "memory");
        let limit_spec = value(&limits_of(c.resources.as_ref()), "memory");
        if request != 0 && opts.tiered_memory_reservation {
            let key = if qos_class(pod) == QosClass::Guaranteed {
                "memory.min"
            } else {
                "memory.low"
            };
            r.unified.insert(key.into(), request.to_string());
        } else {
            r.unified.insert("memory.min".into(), "0".into());
            r.unified.insert("memory.low".into(), "0".into());
        }
        let skip_high = limit_spec == 0
            && pod_level_set(pod)
            && !limits_of(pod_resources(pod))
                .get("memory")
                .is_none_or(|q| q.is_zero());
        if let Some(factor) = opts.memory_throttling_factor {
            if !skip_high && (request != limit_spec || request == 0) {
                let high = if limit_spec != 0 {
                    memory_high(request, limit_spec, factor, opts.page_size)
                } else if opts.node_allocatable_memory > 0 {
                    memory_high(
                        request,
                        opts.node_allocatable_memory,
                        factor,
                        opts.page_size,
                    )
                } else {
                    0
                };
                if high != 0 && high > request {
                    r.unified.insert("memory.high".into(), high.to_string());
                }
            }
        }
    } else if opts.cgroup_v2 {
        r.unified.insert("memory.high".into(), "max".into());
    }
    r
}

// ---- pod cgroup ----

/// What the pod's own cgroup gets (upstream's `ResourceConfigForPod`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodCgroupConfig {
    /// `cpu.shares` (v1) / the weight it converts to (v2).
    pub cpu_shares: i64,
    /// CFS quota in µs (`-1` = unlimited when quota is not enforced).
    pub cpu_quota: Option<i64>,
    /// CFS period in µs.
    pub cpu_period: Option<i64>,
    /// Memory limit in bytes.
    pub memory: Option<i64>,
    /// Hugepage limits: page size in bytes → bytes (from the requests).
    pub hugepage_limits: BTreeMap<i64, i64>,
    /// cgroup v2 files (`memory.min`/`memory.low`/`memory.high`).
    pub unified: BTreeMap<String, String>,
}

/// What upstream's pod container manager writes to the pod's cgroup:
/// shares from the pod's requests; quota, period and memory limit only for
/// Guaranteed pods and for Burstable pods whose every container (or the pod
/// level) sets that limit; BestEffort pods get 2 shares.
pub fn pod_cgroup_config(pod: &Pod, opts: &ResourceOptions) -> PodCgroupConfig {
    let reqs = pod_requests(pod);
    let limits = pod_limits(pod);
    let mut cpu_declared = true;
    let mut memory_declared = true;
    if let Some(spec) = pod.spec.as_ref() {
        for c in spec
            .init_containers
            .iter()
            .flatten()
            .chain(&spec.containers)
        {
            let l = limits_of(c.resources.as_ref());
            cpu_declared &= l.get("cpu").is_some_and(|q| !q.is_zero());
            memory_declared &= l.get("memory").is_some_and(|q| !q.is_zero());
        }
    }
    if pod_level_set(pod) {
        let pl = limits_of(pod_resources(pod));
        cpu_declared |= pl.get("cpu").is_some_and(|q| !q.is_zero());
        memory_declared |= pl.get("memory").is_some_and(|q| !q.is_zero());
    }
    let mut hugepage_limits = BTreeMap::new();
    for (name, q) in &reqs {
        if let Some(size) = name
            .strip_prefix("hugepages-")
            .and_then(|s| Quantity::parse(s).ok())
        {
            *hugepage_limits.entry(size.value()).or_insert(0) += q.value();
        }
    }
    let period = opts.cpu_cfs_quota_period_us;
    let shares = milli_cpu_to_shares(milli(&reqs, "cpu"));
    let quota = if opts.cpu_cfs_quota {
        milli_cpu_to_quota(milli(&limits, "cpu"), period)
    } else {
        -1
    };
    let memory = value(&limits, "memory");
    let qos = qos_class(pod);
    let mut out = PodCgroupConfig {
        hugepage_limits,
        ..Default::default()
    };
    match qos {
        QosClass::Guaranteed => {
            out.cpu_shares = shares;
            out.cpu_quota = Some(quota);
            out.cpu_period = Some(period);
            out.memory = Some(memory);
        }
        QosClass::Burstable => {
            out.cpu_shares = shares;
            if cpu_declared {
                out.cpu_quota = Some(quota);
                out.cpu_period = Some(period);
            }
            if memory_declared {
                out.memory = Some(memory);
            }
        }
        QosClass::BestEffort => out.cpu_shares = MIN_SHARES,
    }
    if opts.memory_qos_enforced() {
        let request = value(&reqs, "memory");
        if opts.tiered_memory_reservation && request > 0 {
            let key = if qos == QosClass::Guaranteed {
                "memory.min"
            } else {
                "memory.low"
            };
            out.unified.insert(key.into(), request.to_string());
        }
        if let Some(factor) = opts.memory_throttling_factor {
            if pod_level_set(pod) {
                let all_limited = pod
                    .spec
                    .iter()
                    .flat_map(|s| s.init_containers.iter().flatten().chain(&s.containers))
                    .all(|c| {
                        limits_of(c.resources.as_ref())
                            .get("memory")
                            .is_some_and(|q| !q.is_zero())
                    });
                let pod_limit = limits_of(pod_resources(pod))
                    .get("memory")
                    .is_some_and(|q| !q.is_zero());
                let (req, lim) = (request, memory);
                if (all_limited || pod_limit) && !((req == lim && req != 0) || lim == 0) {
                    let high = memory_high(req, lim, factor, opts.page_size);
                    if high > 0 && high > req {
                        out.unified.insert("memory.high".into(), high.to_string());
                    }
                }
            }
        }
    }
    out
}

/// The pod's CPU request in millicores (upstream's `PodRequests`: the
/// larger of the init containers' and the sum of the others', plus
/// overhead; the pod level when set).
pub fn pod_cpu_request_milli(pod: &Pod) -> i64 {
    milli(&pod_requests(pod), "cpu")
}

/// The pod's cgroup under the cgroupfs driver, which is the sandbox's
/// `cgroup_parent`: `<cgroupRoot>/kubepods/pod<uid>` for Guaranteed pods,
/// `…/kubepods/burstable/pod<uid>` and `…/kubepods/besteffort/pod<uid>`
/// for the others.
pub fn pod_cgroup_parent(pod: &Pod, cgroup_root: &str) -> String {
    let mut parts: Vec<String> = cgroup_root
        .split('/')
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect();
    parts.push("kubepods".into());
    match qos_class(pod) {
        QosClass::Guaranteed => {}
        QosClass::Burstable => parts.push("burstable".into()),
        QosClass::BestEffort => parts.push("besteffort".into()),
    }
    parts.push(format!("pod{}", pod.uid().unwrap_or_default()));
    format!("/{}", parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap()
    }

    fn pod_of(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "bar", "namespace": "new", "uid": "12345678"}, "spec": spec}))
            .unwrap()
    }

    fn one(resources: serde_json::Value) -> Pod {
        pod_of(json!({"containers": [{"name": "foo", "image": "busybox", "resources": resources}]}))
    }

    fn with_pod_level(mut p: Pod, resources: serde_json::Value) -> Pod {
        p.spec.as_mut().unwrap().resources = Some(serde_json::from_value(resources).unwrap());
        p
    }

    fn v1_opts() -> ResourceOptions {
        ResourceOptions::new(17179860387)
    }

    fn v2_opts() -> ResourceOptions {
        ResourceOptions {
            cgroup_v2: true,
            ..v1_opts()
        }
    }

    // ---- kuberuntime_container_linux_test.go TestCalculateLinuxResources ----

    #[test]
    fn calculate_linux_resources_cases() {
        let unified = |pairs: &[(&str, &str)]| -> std::collections::HashMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        // (name, cpuReq (None = unset), cpuLim, memLim, cgroup v2, singleProcessOOMKill, want)
        type Case = (
            &'static str,
            Option<&'static str>,
            &'static str,
            &'static str,
            bool,
            bool,
            (i64, i64, i64, i64),
            bool,
        );
        let cases: Vec<Case> = vec![
            (
                "Request128MBLimit256MB",
                Some("1"),
                "2",
                "128Mi",
                false,
                true,
                (100000, 200000, 1024, 134217728),
                false,
            ),
            (
                "RequestNoMemory",
                Some("2"),
                "8",
                "0",
                false,
                true,
                (100000, 800000, 2048, 0),
                false,
            ),
            (
                "RequestNilCPU",
                None,
                "2",
                "0",
                false,
                true,
                (100000, 200000, 2048, 0),
                false,
            ),
            (
                "RequestZeroCPU",
                Some("0"),
                "2",
                "0",
                false,
                true,
                (100000, 200000, 2, 0),
                false,
            ),
            (
                "Request128MBLimit256MB v2",
                Some("1"),
                "2",
                "128Mi",
                true,
                false,
                (100000, 200000, 1024, 134217728),
                true,
            ),
            (
                "Request128MBLimit256MBSingleProcess",
                Some("1"),
                "2",
                "128Mi",
                true,
                true,
                (100000, 200000, 1024, 134217728),
                false,
            ),
            (
                "RequestNoMemory v2",
                Some("2"),
                "8",
                "0",
                true,
                false,
                (100000, 800000, 2048, 0),
                true,
            ),
            (
                "RequestNilCPU v2",
                None,
                "2",
                "0",
                true,
                false,
                (100000, 200000, 2048, 0),
                true,
            ),
            (
                "RequestZeroCPU v2",
                Some("0"),
                "2",
                "0",
                true,
                false,
                (100000, 200000, 2, 0),
                true,
            ),
        ];
        for (name, req, lim, mem, v2, single, (period, quota, shares, memory), oom_group) in cases {
            let opts = ResourceOptions {
                cgroup_v2: v2,
                single_process_oom_kill: Some(single),
                ..v1_opts()
            };
            // upstream passes the limit as the request when none is set
            let req = req.map_or(q(lim), q);
            let r = calculate(req, q(lim), q(mem), &opts);
            assert_eq!(
                (
                    r.cpu_period,
                    r.cpu_quota,
                    r.cpu_shares,
                    r.memory_limit_in_bytes
                ),
                (period, quota, shares, memory),
                "{name}"
            );
            let want = if oom_group {
                unified(&[("memory.oom.group", "1")])
            } else {
                unified(&[])
            };
            assert_eq!(r.unified, want, "{name}");
        }
    }

    // ---- TestGenerateLinuxContainerConfigResources ----

    #[test]
    fn generate_linux_container_config_resources_cases() {
        let opts = ResourceOptions {
            memory_qos: false,
            ..v1_opts()
        };
        let t = |p: &Pod| {
            let r = container_resources(p, &p.spec.as_ref().unwrap().containers[0], &opts);
            (
                r.cpu_period,
                r.cpu_quota,
                r.cpu_shares,
                r.memory_limit_in_bytes,
            )
        };
        assert_eq!(
            t(&one(
                json!({"requests": {"memory": "128Mi", "cpu": "1"}, "limits": {"memory": "256Mi", "cpu": "3"}})
            )),
            (100000, 300000, 1024, 256 * 1024 * 1024),
            "Request 128M/1C, Limit 256M/3C"
        );
        assert_eq!(
            t(&one(json!({"requests": {"memory": "128Mi", "cpu": "2"}}))),
            (100000, 0, 2048, 0),
            "Request 128M/2C, No Limit"
        );
        assert_eq!(
            t(&with_pod_level(
                one(json!({"requests": {"memory": "128Mi", "cpu": "1"}})),
                json!({"limits": {"memory": "256Mi", "cpu": "3"}})
            )),
            (100000, 300000, 1024, 256 * 1024 * 1024),
            "Container Level Request 128M/1C, Pod Level Limit 256M/3C"
        );
        assert_eq!(
            t(&one(
                json!({"requests": {"cpu": "1"}, "limits": {"cpu": "1"}})
            )),
            (100000, 100000, 1024, 0),
            "No exclusive CPUs, cpu quota enabled"
        );
        assert_eq!(
            t(&with_pod_level(
                one(
                    json!({"requests": {"cpu": "1", "memory": "100Mi"}, "limits": {"cpu": "1", "memory": "100Mi"}})
                ),
                json!({"requests": {"cpu": "2"}, "limits": {"cpu": "2"}})
            )),
            (100000, 100000, 1024, 100 * 1024 * 1024),
            "pod-level resources, container limits kept"
        );
        assert_eq!(
            t(&with_pod_level(
                one(json!({})),
                json!({"requests": {"cpu": "2"}, "limits": {"cpu": "2"}})
            )),
            (100000, 200000, 2048, 0),
            "pod-level resources, container without any: the pod's limit"
        );
        // quota not enforced
        let no_quota = ResourceOptions {
            cpu_cfs_quota: false,
            ..opts.clone()
        };
        let p = one(json!({"limits": {"cpu": "1"}}));
        let r = container_resources(&p, &p.spec.as_ref().unwrap().containers[0], &no_quota);
        assert_eq!((r.cpu_period, r.cpu_quota, r.cpu_shares), (0, 0, 1024));
        // tiny limits: quota at least 1000 µs
        let p = one(json!({"limits": {"cpu": "5m"}}));
        assert_eq!(t(&p), (100000, 1000, 5, 0));
    }

    // ---- TestGenerateLinuxContainerResources (cpuCFSQuota off, 16 GB) ----

    #[test]
    fn generate_linux_container_resources_cases() {
        let base = ResourceOptions {
            cpu_cfs_quota: false,
            memory_qos: false,
            ..v1_opts()
        };
        let cases: Vec<(&str, serde_json::Value, bool, bool, i64, i64, i64)> = vec![
            (
                "requests & limits, cpu & memory, guaranteed qos",
                json!({"limits": {"cpu": "250m", "memory": "500Mi"}, "requests": {"cpu": "250m", "memory": "500Mi"}}),
                true,
                false,
                256,
                524288000,
                -997,
            ),
            (
                "requests & limits, cpu & memory, burstable qos",
                json!({"limits": {"cpu": "500m", "memory": "750Mi"}, "requests": {"cpu": "250m", "memory": "500Mi"}}),
                true,
                false,
                256,
                786432000,
                970,
            ),
            ("best-effort qos", json!({}), true, false, 2, 0, 1000),
            (
                "requests & limits, cpu & memory, guaranteed qos (v2)",
                json!({"limits": {"cpu": "250m", "memory": "500Mi"}, "requests": {"cpu": "250m", "memory": "500Mi"}}),
                false,
                true,
                256,
                524288000,
                -997,
            ),
            (
                "requests & limits, cpu & memory, burstable qos (v2)",
                json!({"limits": {"cpu": "500m", "memory": "750Mi"}, "requests": {"cpu": "250m", "memory": "500Mi"}}),
                false,
                true,
                256,
                786432000,
                970,
            ),
            ("best-effort qos (v2)", json!({}), false, true, 2, 0, 1000),
        ];
        for (name, res, single, v2, shares, mem, oom) in cases {
            let opts = ResourceOptions {
                cgroup_v2: v2,
                single_process_oom_kill: Some(single),
                ..base.clone()
            };
            let p = one(res);
            let r = container_resources(&p, &p.spec.as_ref().unwrap().containers[0], &opts);
            assert_eq!(
                (r.cpu_shares, r.memory_limit_in_bytes, r.oom_score_adj),
                (shares, mem, oom),
                "{name}"
            );
            let mut want = std::collections::HashMap::new();
            if v2 {
                want.insert("memory.oom.group".to_string(), "1".to_string());
                want.insert("memory.high".to_string(), "max".to_string());
            }
            assert_eq!(r.unified, want, "{name}");
            assert_eq!((r.cpu_period, r.cpu_quota), (0, 0));
        }
    }

    #[test]
    fn memory_qos_and_swap_on_cgroup_v2() {
        let p = one(json!({"requests": {"memory": "128Mi"}, "limits": {"memory": "256Mi"}}));
        let c = &p.spec.as_ref().unwrap().containers[0];
        // defaults: MemoryQoS on, policy None, no throttling factor
        let r = container_resources(&p, c, &v2_opts());
        let get = |r: &v1::LinuxContainerResources, k: &str| r.unified.get(k).cloned();
        assert_eq!(get(&r, "memory.min").as_deref(), Some("0"));
        assert_eq!(get(&r, "memory.low").as_deref(), Some("0"));
        assert_eq!(get(&r, "memory.high"), None);
        assert_eq!(get(&r, "memory.oom.group").as_deref(), Some("1"));
        // TieredReservation + factor 0.9 (TestGenerateContainerConfigWithMemoryQoSEnforced)
        let tiered = ResourceOptions {
            tiered_memory_reservation: true,
            memory_throttling_factor: Some(0.9),
            ..v2_opts()
        };
        let r = container_resources(&p, c, &tiered);
        let (req, lim) = (128 * 1024 * 1024_i64, 256 * 1024 * 1024_i64);
        let high = ((req as f64 + (lim - req) as f64 * 0.9) / 4096.0).floor() as i64 * 4096;
        assert_eq!(get(&r, "memory.low"), Some(req.to_string()));
        assert_eq!(get(&r, "memory.min"), None);
        assert_eq!(get(&r, "memory.high"), Some(high.to_string()));
        // swap controller: v2 memory.swap.max=0, v1 swap limit = memory limit
        let r = container_resources(
            &p,
            c,
            &ResourceOptions {
                swap_controller_available: true,
                ..v2_opts()
            },
        );
        assert_eq!(get(&r, "memory.swap.max").as_deref(), Some("0"));
        let r = container_resources(
            &p,
            c,
            &ResourceOptions {
                swap_controller_available: true,
                ..v1_opts()
            },
        );
        assert_eq!(r.memory_swap_limit_in_bytes, lim);
        assert!(r.unified.is_empty(), "cgroup v1: no unified files");
    }

    #[test]
    fn limited_swap_as_upstream_computes_it() {
        let limited = |v2: bool| ResourceOptions {
            swap_controller_available: true,
            limited_swap: true,
            node_memory_capacity: 8 << 30,
            swap_capacity: 2 << 30,
            ..if v2 { v2_opts() } else { v1_opts() }
        };
        let swap_max = |res: serde_json::Value, opts: &ResourceOptions| {
            let p = one(res);
            let c = &p.spec.as_ref().unwrap().containers[0];
            let r = container_resources(&p, c, opts);
            (
                r.unified.get("memory.swap.max").cloned(),
                r.memory_swap_limit_in_bytes,
            )
        };
        // Burstable, request 1Gi of 8Gi: an eighth of the 2Gi of swap.
        let burstable = json!({"requests": {"memory": "1Gi"}, "limits": {"memory": "2Gi"}});
        assert_eq!(
            swap_max(burstable.clone(), &limited(true)).0.as_deref(),
            Some((256_i64 << 20).to_string().as_str())
        );
        // Burstable without a limit also gets its share.
        assert_eq!(
            swap_max(json!({"requests": {"memory": "2Gi"}}), &limited(true))
                .0
                .as_deref(),
            Some((512_i64 << 20).to_string().as_str())
        );
        // Guaranteed (request = limit), BestEffort, a request above the
        // node's memory: no swap.
        for res in [
            json!({"requests": {"memory": "1Gi", "cpu": "1"}, "limits": {"memory": "1Gi", "cpu": "1"}}),
            json!({}),
            json!({"requests": {"memory": "9Gi"}}),
        ] {
            assert_eq!(swap_max(res, &limited(true)).0.as_deref(), Some("0"));
        }
        // cgroup v1: LimitedSwap is NoSwap (swap limit = memory limit).
        let (unified, memsw) = swap_max(burstable.clone(), &limited(false));
        assert_eq!((unified, memsw), (None, 2 << 30));
        // NoSwap on cgroup v2: zero.
        let no = ResourceOptions {
            limited_swap: false,
            ..limited(true)
        };
        assert_eq!(swap_max(burstable, &no).0.as_deref(), Some("0"));
    }

    // ---- TestGetHugepageLimitsFromResources ----

    #[test]
    fn hugepage_limit_cases() {
        let opts = ResourceOptions {
            hugepage_sizes: vec!["2MB".into(), "1GB".into()],
            ..v1_opts()
        };
        let t = |pod_limits: Option<serde_json::Value>, limits: serde_json::Value| {
            let mut p = one(json!({"limits": limits}));
            if let Some(pl) = pod_limits {
                p = with_pod_level(p, json!({"limits": pl}));
            }
            let c = p.spec.as_ref().unwrap().containers[0].clone();
            hugepage_limits(&p, &c, &opts)
                .into_iter()
                .map(|h| (h.page_size, h.limit))
                .collect::<Vec<_>>()
        };
        let hp = |two: u64, one_g: u64| vec![("2MB".to_string(), two), ("1GB".to_string(), one_g)];
        assert_eq!(
            t(None, json!({"hugepages-2Mi": "2Mi"})),
            hp(2097152, 0),
            "Success2MB"
        );
        assert_eq!(
            t(None, json!({"hugepages-1Gi": "2Gi"})),
            hp(0, 2147483648),
            "Success1GB"
        );
        assert_eq!(
            t(None, json!({"hugepages-2MB": "2Mi"})),
            hp(0, 0),
            "Skip2MB"
        );
        assert_eq!(
            t(None, json!({"hugepages-1GB": "2Gi"})),
            hp(0, 0),
            "Skip1GB"
        );
        assert_eq!(
            t(
                None,
                json!({"hugepages-2Mi": "2Mi", "hugepages-1Gi": "2Gi"})
            ),
            hp(2097152, 2147483648),
            "Success2MBand1GB"
        );
        assert_eq!(
            t(
                None,
                json!({"hugepages-2MB": "2Mi", "hugepages-1GB": "2Gi"})
            ),
            hp(0, 0),
            "Skip2MBand1GB"
        );
        assert_eq!(
            t(Some(json!({"hugepages-2Mi": "2Mi"})), json!({})),
            hp(2097152, 0),
            "PodLevel2MB"
        );
        assert_eq!(
            t(Some(json!({"hugepages-1Gi": "2Gi"})), json!({})),
            hp(0, 2147483648),
            "PodLevel1GB"
        );
        assert_eq!(
            t(
                Some(json!({"hugepages-2Mi": "4Mi"})),
                json!({"hugepages-2Mi": "2Mi"})
            ),
            hp(2097152, 0),
            "PodLevel2MBContainerLevel2MB"
        );
        assert_eq!(
            t(
                Some(json!({"hugepages-2Mi": "4Mi", "hugepages-1Gi": "4Gi"})),
                json!({"hugepages-2Mi": "2Mi", "hugepages-1Gi": "2Gi"})
            ),
            hp(2097152, 2147483648),
            "PodLevel2MBand1GBContainerLevel2MBand1GB"
        );
        assert_eq!(hugetlb_size_from_kb(2048), "2MB");
        assert_eq!(hugetlb_size_from_kb(1048576), "1GB");
    }

    // ---- pkg/kubelet/qos/policy_test.go TestGetContainerOOMScoreAdjust ----

    const STD: i64 = 8_000_000_000;

    fn mem_c(name: &str, req: Option<i64>, lim: Option<i64>, sidecar: bool) -> serde_json::Value {
        let mut r = json!({});
        if let Some(v) = req {
            r["requests"] = json!({"memory": v.to_string()});
        }
        if let Some(v) = lim {
            r["limits"] = json!({"memory": v.to_string()});
        }
        let mut c = json!({"name": name, "resources": r});
        if sidecar {
            c["restartPolicy"] = json!("Always");
        }
        c
    }

    fn oom(p: &Pod, name: &str, cap: i64) -> i64 {
        let s = p.spec.as_ref().unwrap();
        let c = s
            .containers
            .iter()
            .chain(s.init_containers.iter().flatten())
            .find(|c| c.name == name)
            .unwrap();
        container_oom_score_adj(p, c, cap)
    }

    #[test]
    fn absurd_quantities_saturate_instead_of_wrapping() {
        // A pod bound by nodeName skips the scheduler's fit check.
        let p = pod_of(
            json!({"containers": [{"name": "m", "resources": {"requests": {"memory": "8E"}, "limits": {"memory": "9E"}}}]}),
        );
        assert_eq!(
            oom(&p, "m", STD),
            3,
            "a huge request is the lowest Burstable score"
        );
        assert_eq!(milli_cpu_to_quota(i64::MAX, 100_000), i64::MAX);
        assert_eq!(milli_cpu_to_quota(i64::MAX / 10, 100_000), i64::MAX);
        assert_eq!(
            milli_cpu_to_quota(100_000_000_000_000, 100_000),
            10_000_000_000_000_000
        );
        assert_eq!(milli_cpu_to_shares(i64::MAX), MAX_SHARES);
        assert_eq!(shares_to_milli_cpu(i64::MAX), 9_007_199_254_740_992_000);
        assert_eq!(shares_to_milli_cpu(1024), 1000);
    }

    #[test]
    fn oom_score_adj_container_level_cases() {
        let p = pod_of(
            json!({"containers": [{"name": "cpu-limit", "resources": {"limits": {"cpu": "10"}}}]}),
        );
        assert_eq!(oom(&p, "cpu-limit", 4_000_000_000), 999);
        let p = pod_of(
            json!({"containers": [{"name": "m", "resources": {"requests": {"cpu": "0"}, "limits": {"memory": "10G"}}}]}),
        );
        assert_eq!(oom(&p, "m", STD), 999, "memory-limit-cpu-request");
        let p = pod_of(
            json!({"containers": [{"name": "z", "resources": {"limits": {"memory": "0"}}}]}),
        );
        assert_eq!(oom(&p, "z", 7230457451), 1000, "zero-memory-limit");
        let p = pod_of(json!({"containers": [{"name": "n", "resources": {}}]}));
        assert_eq!(oom(&p, "n", 4_000_000_000), 1000, "no-request-limit");
        let p = pod_of(json!({"containers": [{"name": "e", "resources": {
            "requests": {"memory": "10G", "cpu": "5m"}, "limits": {"cpu": "5m", "memory": "10G"}}}]}));
        assert_eq!(
            oom(&p, "e", 123456789),
            -997,
            "equal-request-limit-cpu-memory"
        );
        let p = pod_of(json!({"containers": [{"name": "u", "resources": {
            "requests": {"memory": (STD / 2).to_string(), "cpu": "5m"}, "limits": {"memory": "10G"}}}]}));
        let v = oom(&p, "u", STD);
        assert!(
            (495..=505).contains(&v),
            "cpu-unlimited-memory-limited-with-requests: {v}"
        );
        let p = pod_of(json!({"containers": [{"name": "r", "resources": {
            "requests": {"memory": (STD - 1).to_string(), "cpu": "5m"}}}]}));
        assert_eq!(oom(&p, "r", STD), 3, "request-no-limit");
        let p = pod_of(
            json!({"priorityClassName": "system-cluster-critical", "priority": crate::pod::SYSTEM_CRITICAL_PRIORITY,
            "containers": [{"name": "cc", "resources": {}}]}),
        );
        assert_eq!(oom(&p, "cc", 4_000_000_000), 1000, "cluster-critical");
        let p = pod_of(
            json!({"priorityClassName": "system-node-critical", "priority": crate::pod::SYSTEM_CRITICAL_PRIORITY + 1000,
            "containers": [{"name": "nc", "resources": {}}]}),
        );
        assert_eq!(oom(&p, "nc", 4_000_000_000), -997, "node-critical");

        let req = STD / 8;
        let lim = 1000 + STD / 8;
        let p = pod_of(
            json!({"containers": [mem_c("burstable-unique-container", Some(req), Some(lim), false)]}),
        );
        let v = oom(&p, "burstable-unique-container", STD);
        assert!((875..=880).contains(&v), "{v}");
        let p = pod_of(
            json!({"initContainers": [mem_c("init-container", Some(req), Some(lim), false)],
                              "containers": [mem_c("main-1", Some(req), Some(lim), false)]}),
        );
        assert!((875..=880).contains(&oom(&p, "init-container", STD)));
        assert!((875..=880).contains(&oom(&p, "main-1", STD)));
        for (sidecar, sreq, want) in [
            ("sidecar-container", req, 875),
            ("sidecar-small-container", STD / 20, 875),
            ("sidecar-big-container", STD / 2, 500),
        ] {
            let p = pod_of(
                json!({"initContainers": [mem_c("init-container", Some(req), Some(lim), false),
                                                     mem_c(sidecar, Some(sreq), Some(lim), true)],
                                  "containers": [mem_c("main-1", Some(req), Some(lim), false)]}),
            );
            assert_eq!(oom(&p, sidecar, STD), want, "{sidecar}");
            assert_eq!(oom(&p, "main-1", STD), 875);
            assert!((875..=880).contains(&oom(&p, "init-container", STD)));
        }
    }

    #[test]
    fn oom_score_adj_pod_level_cases() {
        let cap = 4_000_000_000;
        let pod_req = (STD / 4).to_string();
        let pod_lim = (1000 + STD / 4).to_string();
        let c_req = (STD / 8).to_string();
        let c_lim = (1000 + STD / 8).to_string();
        let pl = |lim: &str| json!({"requests": {"cpu": "5m", "memory": pod_req}, "limits": {"cpu": "5m", "memory": lim}});
        let guaranteed_c = |n: &str| {
            json!({"name": n, "resources": {
            "requests": {"cpu": "5m", "memory": c_req}, "limits": {"cpu": "5m", "memory": c_req}}})
        };
        let burstable_c = |n: &str, lim: &str| {
            json!({"name": n, "resources": {
            "requests": {"cpu": "3m", "memory": c_req}, "limits": {"cpu": "5m", "memory": lim}}})
        };
        let empty = |n: &str| json!({"name": n, "resources": {}});

        // guaranteed-pod-resources-*: -997 whatever the containers say
        for containers in [
            json!([empty("a"), empty("b")]),
            json!([guaranteed_c("a"), guaranteed_c("b")]),
            json!([burstable_c("a", &c_lim), empty("b")]),
        ] {
            let p = pod_of(json!({"resources": pl(&pod_req), "containers": containers}));
            assert_eq!((oom(&p, "a", cap), oom(&p, "b", cap)), (-997, -997));
        }
        // burstable-pod-resources-no-container-resources / -equal-container-requests
        for containers in [
            json!([empty("a"), empty("b")]),
            json!([guaranteed_c("a"), guaranteed_c("b")]),
        ] {
            let p = pod_of(json!({"resources": pl(&pod_lim), "containers": containers}));
            assert_eq!((oom(&p, "a", cap), oom(&p, "b", cap)), (750, 750));
        }
        // burstable-pod-resources-unequal-container-requests
        let p = pod_of(
            json!({"resources": pl(&pod_lim), "containers": [burstable_c("a", &c_req), empty("b")]}),
        );
        assert_eq!((oom(&p, "a", cap), oom(&p, "b", cap)), (625, 875));
        // ...-no-container-resources-with-sidecar
        let mut side = empty("s");
        side["restartPolicy"] = json!("Always");
        let p = pod_of(
            json!({"resources": pl(&pod_lim), "containers": [empty("a")], "initContainers": [side]}),
        );
        assert_eq!((oom(&p, "a", cap), oom(&p, "s", cap)), (750, 750));
        // ...-equal-container-requests-with-sidecar
        let bc = json!({"name": "a", "resources": {"requests": {"cpu": "5m", "memory": c_req}, "limits": {"cpu": "5m", "memory": c_lim}}});
        let mut bs = bc.clone();
        bs["name"] = json!("s");
        bs["restartPolicy"] = json!("Always");
        let p =
            pod_of(json!({"resources": pl(&pod_lim), "containers": [bc], "initContainers": [bs]}));
        assert_eq!((oom(&p, "a", cap), oom(&p, "s", cap)), (750, 750));
        // ...-unequal-container-requests-with-sidecar
        let c = |n: &str, m: &str| json!({"name": n, "resources": {"requests": {"cpu": "5m", "memory": m}, "limits": {"cpu": "5m", "memory": pod_lim}}});
        let mut s = c("s", "200000000");
        s["restartPolicy"] = json!("Always");
        let p = pod_of(json!({
            "resources": {"requests": {"cpu": "5m", "memory": "2000000000"}, "limits": {"cpu": "5m", "memory": pod_lim}},
            "containers": [c("c1", "1000000000"), c("c2", "500000000")], "initContainers": [s]}));
        assert_eq!(
            (oom(&p, "c1", cap), oom(&p, "c2", cap), oom(&p, "s", cap)),
            (725, 850, 850)
        );
    }

    #[test]
    fn qos_classes() {
        let qos = |spec: serde_json::Value| compute_qos_class(&pod_of(spec));
        let c = |r: serde_json::Value| json!({"name": "c", "resources": r});
        assert_eq!(
            qos(json!({"containers": [c(json!({}))]})),
            QosClass::BestEffort
        );
        assert_eq!(
            qos(json!({"containers": [c(json!({"requests": {"ephemeral-storage": "1Gi"}}))]})),
            QosClass::BestEffort,
            "only cpu and memory count"
        );
        assert_eq!(
            qos(
                json!({"containers": [c(json!({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1000m", "memory": "1Gi"}}))]})
            ),
            QosClass::Guaranteed
        );
        assert_eq!(
            qos(
                json!({"containers": [c(json!({"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}))]})
            ),
            QosClass::Burstable,
            "cpu guaranteed, memory best effort"
        );
        assert_eq!(
            qos(
                json!({"containers": [c(json!({"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1", "memory": "1Gi"}})),
                                      {"name": "d"}]})
            ),
            QosClass::Burstable,
            "guaranteed + best effort"
        );
        assert_eq!(
            qos(
                json!({"resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
                       "containers": [c(json!({}))]})
            ),
            QosClass::Guaranteed,
            "pod-level resources decide"
        );
        let mut p = pod_of(json!({"containers": [c(json!({}))]}));
        p.status = Some(serde_json::from_value(json!({"qosClass": "Burstable"})).unwrap());
        assert_eq!(qos_class(&p), QosClass::Burstable, "status.qosClass wins");
    }

    #[test]
    fn cpu_conversions() {
        // helpers_linux_test.go TestSharesToMilliCPU / MilliCPUToShares
        assert_eq!(milli_cpu_to_shares(0), 2);
        assert_eq!(milli_cpu_to_shares(1), 2);
        assert_eq!(milli_cpu_to_shares(1000), 1024);
        assert_eq!(milli_cpu_to_shares(1_000_000), MAX_SHARES);
        assert_eq!(shares_to_milli_cpu(2), 2);
        assert_eq!(shares_to_milli_cpu(1024), 1000);
        assert_eq!(shares_to_milli_cpu(1), 0);
        assert_eq!(milli_cpu_to_quota(0, 100000), 0);
        assert_eq!(milli_cpu_to_quota(5, 100000), 1000);
        assert_eq!(milli_cpu_to_quota(1500, 100000), 150000);
        assert_eq!(milli_cpu_to_quota(1500, 50000), 75000);
    }

    #[test]
    fn pod_cgroup_parents_and_config() {
        let g = one(
            json!({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}),
        );
        let b = one(json!({"requests": {"cpu": "500m"}}));
        let be = one(json!({}));
        assert_eq!(pod_cgroup_parent(&g, "/"), "/kubepods/pod12345678");
        assert_eq!(
            pod_cgroup_parent(&b, "/"),
            "/kubepods/burstable/pod12345678"
        );
        assert_eq!(
            pod_cgroup_parent(&be, ""),
            "/kubepods/besteffort/pod12345678"
        );
        assert_eq!(
            pod_cgroup_parent(&be, "/custom/"),
            "/custom/kubepods/besteffort/pod12345678"
        );

        let o = v1_opts();
        let gc = pod_cgroup_config(&g, &o);
        assert_eq!(
            (gc.cpu_shares, gc.cpu_quota, gc.cpu_period, gc.memory),
            (1024, Some(100000), Some(100000), Some(1 << 30))
        );
        let bc = pod_cgroup_config(&b, &o);
        assert_eq!(
            (bc.cpu_shares, bc.cpu_quota, bc.memory),
            (512, None, None),
            "no limits declared"
        );
        let bec = pod_cgroup_config(&be, &o);
        assert_eq!((bec.cpu_shares, bec.cpu_quota, bec.memory), (2, None, None));
        // overhead adds to requests and to non-zero limits
        let mut go = g.clone();
        go.spec.as_mut().unwrap().overhead = Some(
            [
                ("cpu".to_string(), ApiQuantity("250m".into())),
                ("memory".to_string(), ApiQuantity("120Mi".into())),
            ]
            .into_iter()
            .collect(),
        );
        let c = pod_cgroup_config(&go, &o);
        assert_eq!(
            (c.cpu_shares, c.cpu_quota, c.memory),
            (1280, Some(125000), Some((1 << 30) + 120 * (1 << 20)))
        );
        // hugepages come from the requests
        let h = one(
            json!({"requests": {"hugepages-2Mi": "4Mi", "memory": "1Gi", "cpu": "1"},
                           "limits": {"hugepages-2Mi": "4Mi", "memory": "1Gi", "cpu": "1"}}),
        );
        assert_eq!(
            pod_cgroup_config(&h, &o).hugepage_limits,
            [(2 << 20, 4 << 20)].into_iter().collect()
        );
        // init containers: the max of each init container against the sum
        let p = pod_of(json!({
            "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "2"}}}],
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "1"}}},
                           {"name": "b", "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "1"}}}]}));
        let c = pod_cgroup_config(&p, &o);
        assert_eq!((c.cpu_shares, c.cpu_quota), (2048, Some(200000)));
    }
}
