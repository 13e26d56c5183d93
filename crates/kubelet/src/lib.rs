//! `rkube kubelet`: a node agent. It registers its Node(s), keeps the node
//! Lease in `kube-node-lease` renewed, reports node status, and runs the
//! pods bound to its node(s) through a [`runtime::Runtime`]. Organised as
//! upstream's `pkg/kubelet` managers, one room each (CONTRIBUTING.md,
//! "The kubelet's rooms", has the floors and what each may call):
//!
//! * [`options`], [`config`]: flags and KubeletConfiguration v1beta1;
//!   [`metrics`], [`events`], [`logs`], [`backoff`]: shared by the rooms.
//! * [`pod`]: pod-level facts every manager reads.
//! * [`node`]: the Node object, registration, the status setters and the
//!   heartbeat (leases and node status, spread over the interval).
//! * [`pods`]: one watch, one worker per pod, one batched status writer,
//!   static pods with mirror pods.
//! * [`runtime`]: the trait, the sim runtime (`--runtime sim`, thousands of
//!   fake nodes in one process) and [`runtime::cri`] (`--runtime cri`,
//!   containerd): a pure plan per sync and its execution.
//! * [`images`], [`volumes`], [`prober`]: pulling images, setting up
//!   ConfigMap/Secret/downwardAPI/projected volumes and emptyDirs, probes.
//! * [`gc`]: dead containers and sandboxes (every minute) and unused
//!   images (every five minutes, by disk usage and age) removed;
//!   [`logs::manager`]: container logs rotated by size.
//! * [`eviction`]: hard- and soft-threshold eviction, signals from the machine (CRI)
//!   or a `--sim-signals` file (sim).
//! * [`stats`]: the node's figures (Summary API, resource and cAdvisor
//!   metrics, the eviction signals), from one provider.
//! * [`timeline`]: each pod's startup timeline (`/timeline/{ns}/{pod}`)
//!   and the pod startup SLI histograms.
//! * [`server`]: the HTTPS kubelet API on `port`, and `/healthz` +
//!   `/metrics` in plain HTTP; [`podresources`]: the pod-resources gRPC
//!   API on `<root-dir>/pod-resources/kubelet.sock`.
//!
//! * [`certificates`]: TLS bootstrap and client certificate rotation.
//! * [`allocation`]: the resources pods were admitted and started with,
//!   checkpointed in upstream's files.
//! * [`shutdown`]: graceful node shutdown through logind's inhibitor lock.
//!
//! Not yet: CSI inline ephemeral volumes, volume expansion, block volumes
//! and PersistentVolumes other than `local`, `hostPath` and `csi` (refused,
//! not skipped).

// A daemon reports errors; it does not panic on them (tests may unwrap).
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

pub mod allocation;
pub mod backoff;
pub mod certificates;
pub mod checkpoint;
pub mod cm;
pub mod config;
pub mod devices;
pub mod dra;
pub mod events;
pub mod eviction;
pub mod gc;
pub mod histogram;
pub mod images;
pub mod informer;
pub mod logs;
pub mod metrics;
pub mod network;
pub mod node;
pub mod objects;
pub mod options;
pub mod pleg;
pub mod pluginmanager;
pub mod pod;
pub mod podresources;
pub mod pods;
pub mod prober;
pub mod runtime;
#[cfg(test)]
pub(crate) mod scratch;
pub mod server;
pub mod shutdown;
pub mod socket;
pub mod stats;
pub mod timeline;
pub mod volumes;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use kube::Client;
use rkube_daemon::ratelimit::RateLimiter;

use crate::config::KubeletConfiguration;
use crate::metrics::Metrics;
use crate::node::status::Health;
use crate::node::NodeDesc;
use crate::options::{Options, RuntimeKind};
use crate::runtime::cri::CriRuntime;
use crate::runtime::sim::{SimRuntime, SimTimings};
use crate::runtime::Runtime;

/// A boxed, sendable future (keeps [`Runtime`] object-safe without the
/// async-trait crate).
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Everything loaded before the agent starts (errors here are exit code 2).
pub struct Prepared {
    /// The configuration.
    pub config: KubeletConfiguration,
    /// The sim node template.
    pub template: node::descs::Template,
    /// The sim nodes' ResourceSlices (`--sim-resource-slice`).
    pub slices: Vec<node::resource_slices::SliceTemplate>,
    /// Warnings (ignored fields).
    pub warnings: Vec<String>,
    /// The kubelet API's settings, from the configuration in effect
    /// (`--config` with the flags' fields).
    pub api: server::ApiSettings,
}

/// Loads `--config` (with the fields flags set) and `--node-template`.
pub fn prepare(opts: &Options) -> Result<Prepared, String> {
    let effective =
        config::load(opts.config.as_deref(), &opts.config_flags).map_err(|e| e.to_string())?;
    // The kubelet API's settings (authentication, authorization, TLS files)
    // are checked now, bad ones being bad configuration (exit 2).
    let api = server::ApiSettings::from_document(&effective.document).map_err(|e| {
        let source = match &opts.config {
            Some(p) => format!("{} (with the flags laid over it)", p.display()),
            None => "the kubelet's flags".into(),
        };
        format!("{source}: {e:#}")
    })?;
    let config = effective.loaded.config;
    let warnings = effective.loaded.warnings;
    let template = match &opts.node_template {
        Some(p) => {
            let file = p.display().to_string();
            let text = rkube_util::file::read_text(p, rkube_util::file::CONFIG_MAX_BYTES)
                .map_err(|e| format!("{file}: reading: {e}"))?;
            node::descs::Template::parse(&file, &text, config.max_pods)?
        }
        None => node::descs::Template::default_shape(config.max_pods),
    };
    let slices = opts
        .sim_resource_slices
        .iter()
        .map(|p| node::resource_slices::SliceTemplate::load(p))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Prepared {
        config,
        template,
        slices,
        warnings,
        api,
    })
}

/// A client for `--kubeconfig` (in-cluster or `$KUBECONFIG` without it),
/// each request waiting for a token of `limiter`.
pub async fn client(opts: &Options, limiter: Option<Arc<RateLimiter>>) -> Result<Client> {
    Ok(rkube_daemon::client::limited_from_kubeconfig(opts.kubeconfig.as_deref(), limiter).await?)
}

/// Which of the kubelet's API clients: upstream's kubelet has three.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientKind {
    /// Everything but heartbeats and Events: `kubeAPIQPS`/`kubeAPIBurst`
    /// (a QPS of 0 is client-go's default, 5).
    Main,
    /// Node status and Lease renewals: not limited.
    Heartbeat,
    /// Events: `eventRecordQPS`/`eventBurst` (a QPS of 0: no limit).
    Events,
}

/// The rate limiter of a kubelet client (also of the image pulls: see
/// [`pull_limiter`]). One process hosting `nodes` sim nodes gets the rate
/// of that many kubelets.
pub fn client_limiter(
    cfg: &KubeletConfiguration,
    kind: ClientKind,
    nodes: usize,
) -> Option<Arc<RateLimiter>> {
    let (qps, burst) = match kind {
        ClientKind::Heartbeat => return None,
        ClientKind::Main if cfg.kube_api_qps == 0 => (5, cfg.kube_api_burst),
        ClientKind::Main => (cfg.kube_api_qps, cfg.kube_api_burst),
        ClientKind::Events if cfg.event_record_qps == 0 => return None,
        ClientKind::Events => (cfg.event_record_qps, cfg.event_burst),
    };
    Some(scaled(qps, burst, nodes))
}

/// `registryPullQPS`/`registryBurst` (a QPS of 0: no limit).
pub fn pull_limiter(cfg: &KubeletConfiguration) -> Option<Arc<RateLimiter>> {
    (cfg.registry_pull_qps != 0).then(|| scaled(cfg.registry_pull_qps, cfg.registry_burst, 1))
}

fn scaled(qps: i32, burst: i32, nodes: usize) -> Arc<RateLimiter> {
    let n = i32::try_from(nodes.max(1)).unwrap_or(i32::MAX);
    Arc::new(RateLimiter::new(
        qps as f32 * n as f32,
        burst.saturating_mul(n),
    ))
}

/// The runtime for the options.
pub fn make_runtime(opts: &Options, names: &[String]) -> Result<Arc<dyn Runtime>> {
    match opts.runtime {
        RuntimeKind::Sim => Ok(Arc::new(SimRuntime::new(
            SimTimings {
                start_delay: opts.pod_start_delay,
                run_time: opts.pod_run_time,
            },
            names,
        ))),
        RuntimeKind::Cri => bail!("the CRI runtime is made by run_with_metrics (make_cri)"),
    }
}

/// What the CRI runtime shares with the rest of the kubelet: the managers
/// that hand devices to containers, and the pods' startup timelines.
struct Shared {
    /// The device plugins' devices.
    devices: Option<Arc<devices::Manager>>,
    /// The ResourceClaims' devices.
    dra: Option<Arc<dra::Manager>>,
    /// The startup timelines (its Events and stages go there).
    timeline: Arc<timeline::Tracker>,
    /// CSI volumes of the drivers registered on the node.
    csi: Arc<volumes::csi::publish::Csi>,
}

/// Makes the CRI runtime for the one node `desc`: connected at
/// `containerRuntimeEndpoint`, data under `--root-dir`, complete with its
/// pull records, events and volume manager. The Event writer task is
/// added to `tasks`.
async fn make_cri(
    opts: &Options,
    cfg: &KubeletConfiguration,
    cri: rkube_cri::CriClient,
    desc: &NodeDesc,
    client: &Client,
    shared: Shared,
    tasks: &mut tokio::task::JoinSet<()>,
) -> Result<Arc<CriRuntime>> {
    // The runtime's cgroup driver when it says (upstream's
    // KubeletCgroupDriverFromCRI), else the configuration's.
    let driver = match cri.cgroup_driver().await {
        Ok(Some(d)) => d.as_str_name().to_lowercase(),
        Ok(None) => {
            tracing::info!(driver = %cfg.cgroup_driver, "the runtime does not report its cgroup driver (no RuntimeConfig); using cgroupDriver from the configuration");
            cfg.cgroup_driver.clone()
        }
        Err(e) => bail!("getting the cgroup driver from the runtime: {e}"),
    };
    if driver != "cgroupfs" {
        bail!(
            "cgroup driver {driver}: rkube kubelet implements the cgroupfs driver only (set cgroupDriver: cgroupfs, and SystemdCgroup = false in containerd's runc options)"
        );
    }
    runtime::cri::spec::security::validate_allowed_unsafe_sysctls(&cfg.allowed_unsafe_sysctls)
        .map_err(|e| anyhow::anyhow!("allowedUnsafeSysctls: {e}"))?;
    if cfg.single_process_oom_kill == Some(false)
        && !runtime::cri::spec::resources::detect_cgroup_v2()
    {
        bail!("invalid configuration: singleProcessOOMKill must not be explicitly set to false when using cgroup v1");
    }
    // The kubelet process itself, as upstream's: last to be OOM-killed,
    // and its open file limit (failures are logged, as upstream's).
    if let Err(e) = node::machine::set_oom_score_adj(cfg.oom_score_adj) {
        tracing::warn!(error = %e, value = cfg.oom_score_adj, "Failed to ApplyOOMScoreAdj");
    }
    if let Err(e) = node::machine::set_max_open_files(cfg.max_open_files as u64) {
        tracing::warn!(error = %e, "Failed to set rlimit on max file handles");
    }
    let mut dirs = pod::Dirs::under(&opts.root_dir);
    dirs.logs = cfg.pod_logs_dir.clone();
    let pulls = images::pull_records::PullRecords::open(
        &opts.root_dir,
        cfg.image_pull_credentials_verification_policy,
    )
    .with_context(|| format!("image pull records under {}", opts.root_dir.display()))?;
    let (recorder, queued) = events::Recorder::new(events::MAX_QUEUED);
    let recorder = recorder.with_timeline(shared.timeline.clone());
    let events_client = self::client(opts, client_limiter(cfg, ClientKind::Events, 1)).await?;
    tasks.spawn(events::run(events_client, desc.name.clone(), queued));
    let volumes = Arc::new(
        volumes::manager::VolumeManager::new(client.clone(), dirs.clone(), desc.name.clone())
            .with_csi(shared.csi.clone()),
    );
    let parts = runtime::cri::CriParts {
        dirs,
        node: runtime::cri::NodeFacts {
            host_ip: desc.ip.clone(),
            capacity: desc.capacity.clone(),
            allocatable: desc.allocatable.clone(),
            dns: network::dns::Settings {
                cluster_dns: cfg.cluster_dns.clone(),
                cluster_domain: cfg.cluster_domain.clone(),
                resolv_conf: (!cfg.resolv_conf.is_empty())
                    .then(|| std::path::PathBuf::from(&cfg.resolv_conf)),
                node_ips: desc.ip.parse().ok().into_iter().collect(),
            },
            limited_swap: cfg.memory_swap_behavior == "LimitedSwap",
            cgroup_root: cfg.cgroup_root.clone(),
            cpu_cfs_quota: cfg.cpu_cfs_quota,
            cpu_cfs_quota_period_us: cfg.cpu_cfs_quota_period.as_micros() as i64,
            single_process_oom_kill: cfg.single_process_oom_kill,
            memory_throttling_factor: cfg.memory_throttling_factor,
            tiered_memory_reservation: cfg.memory_reservation_policy == "TieredReservation",
            allowed_unsafe_sysctls: cfg.allowed_unsafe_sysctls.clone(),
            memory_qos: cfg.feature_gates.enabled("MemoryQoS"),
        },
        pulls,
        cgroups: Some(container_manager(cfg, desc, &recorder, tasks)?),
        events: Some(recorder),
        volumes: Some(volumes),
        pull_limiter: pull_limiter(cfg),
        actuated: Arc::new(allocation::State::open(
            &opts.root_dir,
            allocation::ACTUATED_FILE,
        )?),
        devices: shared.devices,
        dra: shared.dra,
    };
    let cri = Arc::new(CriRuntime::new(cri, parts)?);
    // The QoS cgroups brought up to date every minute, as upstream.
    let qos = Arc::downgrade(&cri);
    tasks.spawn(async move {
        loop {
            tokio::time::sleep(cm::QOS_UPDATE_PERIOD).await;
            match qos.upgrade() {
                Some(c) => c.update_qos_cgroups(),
                None => return std::future::pending().await,
            }
        }
    });
    Ok(cri)
}

/// The node's cgroups set up as upstream's container manager sets them:
/// `<cgroupRoot>/kubepods` (limited to node allocatable with
/// `enforceNodeAllocatable: [pods]`), the QoS cgroups, and the system and
/// kube reservations on their cgroups when asked.
fn container_manager(
    cfg: &KubeletConfiguration,
    desc: &NodeDesc,
    events: &events::Recorder,
    tasks: &mut tokio::task::JoinSet<()>,
) -> Result<Arc<cm::ContainerManager>> {
    use rkube_model::Quantity;
    node::status::validate_allocatable(&desc.capacity, cfg).map_err(anyhow::Error::msg)?;
    let manager = cm::ContainerManager::new(cm::Cgroups::detect(), &cfg.cgroup_root)
        .map_err(anyhow::Error::msg)?;
    let parse = |m: &std::collections::BTreeMap<String, String>, field: &str| {
        m.iter()
            .map(|(k, v)| {
                Quantity::parse(v)
                    .map(|q| (k.clone(), q))
                    .map_err(|e| anyhow::anyhow!("{field}[{k}]: {e}"))
            })
            .collect::<Result<std::collections::BTreeMap<_, _>>>()
    };
    let system = parse(&cfg.system_reserved, "systemReserved")?;
    let kube = parse(&cfg.kube_reserved, "kubeReserved")?;
    // Upstream's internal capacity: the node's, and its PIDs.
    let mut capacity = desc.capacity.clone();
    if let Some((max, _)) = stats::procfs::rlimit() {
        capacity.insert("pid".into(), Quantity::from_units(max));
    }
    let enforce = cm::Enforcement::of(&cfg.enforce_node_allocatable);
    let limits = if enforce.pods {
        cm::allocatable_absolute(&capacity, &system, &kube)
    } else {
        capacity
    };
    let kubepods = cm::cgroup_config(&limits, false);
    manager
        .setup_node(&kubepods)
        .map_err(|e| anyhow::anyhow!("Failed to start ContainerManager: {e}"))?;
    let manager = Arc::new(manager);
    // Enforced now, or retried every minute with a Warning, as upstream's.
    let (m, ev, node) = (manager.clone(), events.clone(), desc.name.clone());
    let apply = move || match m.enforce_node_allocatable(&kubepods) {
        Ok(()) => {
            ev.record_node(
                &node,
                false,
                "NodeAllocatableEnforced",
                "Updated Node Allocatable limit across pods",
            );
            true
        }
        Err(e) => {
            let msg = format!(
                "Failed to update Node Allocatable Limits {:?}: {e}",
                m.kubepods()
            );
            tracing::warn!("{msg}");
            ev.record_node(&node, true, "FailedNodeAllocatableEnforcement", msg);
            false
        }
    };
    if !apply() {
        tasks.spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(60)).await;
                if apply() {
                    return std::future::pending().await;
                }
            }
        });
    }
    for (what, compressible, cgroup, reserved) in [
        (
            "System",
            enforce.system_reserved,
            &cfg.system_reserved_cgroup,
            &system,
        ),
        (
            "Kube",
            enforce.kube_reserved,
            &cfg.kube_reserved_cgroup,
            &kube,
        ),
    ] {
        let Some(compressible) = compressible else {
            continue;
        };
        manager
            .enforce_existing(cgroup, &cm::cgroup_config(reserved, compressible))
            .map_err(|e| {
                anyhow::anyhow!(
                    "Failed to enforce {what} Reserved Cgroup Limits on {cgroup:?}: {e}"
                )
            })?;
        events.record_node(
            &desc.name,
            false,
            "NodeAllocatableEnforced",
            format!(
                "Updated limits on {} reserved cgroup {cgroup}",
                what.to_lowercase()
            ),
        );
    }
    Ok(manager)
}

/// Refreshes node health every `every`: is the runtime up, is its network
/// ready (pressure conditions come from the [`eviction`] manager). Once
/// Node `node` has pod CIDRs (from the node watch, `board`), hands them to
/// the runtime, again when they change (upstream's `updatePodCIDR`).
async fn probe_health(
    runtime: Arc<dyn Runtime>,
    health: Arc<RwLock<Health>>,
    every: Duration,
    board: Arc<node::capacity::NodeBoard>,
    node: Option<String>,
    pleg: Option<Arc<Metrics>>,
) {
    let started = std::time::Instant::now();
    let mut was_down = false;
    let mut pleg_was_unhealthy = false;
    let mut pod_cidr_sent = String::new();
    loop {
        let cidr = node
            .as_deref()
            .and_then(|n| board.get(n))
            .and_then(|n| n.spec.as_ref().and_then(|s| s.pod_cidrs.clone()))
            .map(|c| c.join(","))
            .unwrap_or_default();
        if !cidr.is_empty() && cidr != pod_cidr_sent {
            match runtime.update_pod_cidr(&cidr).await {
                Ok(()) => {
                    tracing::info!(pod_cidr = %cidr, "pod CIDR handed to the runtime");
                    pod_cidr_sent = cidr;
                }
                Err(e) => tracing::warn!(error = %e.0, "handing the pod CIDR to the runtime"),
            }
        }
        let runtime_error = runtime.version().await.err().map(|e| e.0);
        match (&runtime_error, was_down) {
            (Some(e), false) => tracing::warn!(error = %e, "container runtime is down"),
            (None, true) => tracing::info!("container runtime is up again"),
            _ => {}
        }
        was_down = runtime_error.is_some();
        let status = match runtime_error {
            None => runtime.runtime_status().await,
            Some(_) => runtime::RuntimeStatus::default(),
        };
        let mut h = Health::checked(runtime_error.as_deref(), status.network_error);
        h.runtime_handlers = status.handlers;
        // A relist that stopped completing makes the node not ready too
        // (upstream's PLEG health check).
        let pleg_error = pleg.as_ref().and_then(|m| {
            pleg::unhealthy(
                m.pleg_last_seen(),
                started.elapsed(),
                std::time::SystemTime::now(),
            )
        });
        match (&pleg_error, pleg_was_unhealthy) {
            (Some(e), false) => tracing::error!(error = %e, "the node is not ready"),
            (None, true) => tracing::info!("PLEG is healthy again"),
            _ => {}
        }
        pleg_was_unhealthy = pleg_error.is_some();
        if h.runtime_error.is_none() {
            h.runtime_error = pleg_error;
        }
        *health.write().unwrap_or_else(|e| e.into_inner()) = h;
        tokio::time::sleep(every).await;
    }
}

/// Logs the lease counters every minute.
async fn log_metrics(metrics: Arc<Metrics>) {
    loop {
        tokio::time::sleep(Duration::from_secs(60)).await;
        tracing::info!(
            renewals = Metrics::get(&metrics.lease_renewals),
            missed = Metrics::get(&metrics.lease_renewals_missed),
            late = Metrics::get(&metrics.lease_renewals_late),
            errors = Metrics::get(&metrics.lease_renewal_errors),
            max_gap_ms = Metrics::get(&metrics.lease_max_gap_ms),
            node_status_patches = Metrics::get(&metrics.node_status_patches),
            pod_status_patches = Metrics::get(&metrics.pod_status_patches),
            "lease renewals"
        );
    }
}

/// Runs the agent until `shutdown` completes. `metrics` is shared with the
/// caller (tests read it).
pub async fn run_with_metrics(
    opts: Options,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()>,
) -> Result<()> {
    let prepared = prepare(&opts).map_err(anyhow::Error::msg)?;
    let cfg = Arc::new(prepared.config);
    let names = opts.node_names(&node::machine::hostname());
    let unknown = runtime::RuntimeVersion {
        runtime_name: "unknown".into(),
        runtime_version: "unknown".into(),
    };
    let mut swap_on = false;
    // The sim's nodes keep their allocations in memory.
    let mut allocated = allocation::State::in_memory();
    let mut device_manager = None;
    let (cri_client, sim) = match opts.runtime {
        RuntimeKind::Cri => {
            // Upstream's validation refuses a host using cgroup v1 unless
            // failCgroupV1 is false (simulated nodes run no containers).
            if cfg.fail_cgroup_v1 && !runtime::cri::spec::resources::detect_cgroup_v2() {
                bail!(node::machine::CGROUP_V1_REFUSAL);
            }
            // Upstream's container manager refuses a host with swap on
            // unless failSwapOn is false.
            swap_on = node::machine::swap_is_on()
                .context("failed to determine if swap is on (reading /proc/swaps)")?;
            if swap_on && cfg.fail_swap_on {
                bail!(node::machine::SWAP_ON_REFUSAL);
            }
            // The allocations upstream's kubelet (or this one)
            // checkpointed: an unreadable file stops the kubelet before it
            // starts anything, as upstream's.
            allocated = allocation::State::open(&opts.root_dir, allocation::ALLOCATED_FILE)?;
            // What containers hold of the device plugins' devices
            // (upstream's checkpoint, if any).
            device_manager = Some(Arc::new(devices::Manager::open(
                &opts.root_dir.join(devices::DIR),
            )));
            let endpoint = &cfg.container_runtime_endpoint;
            let c = CriRuntime::connect_client(endpoint, metrics.runtime_operations.clone())
                .await
                .with_context(|| format!("connecting to the CRI runtime at {endpoint}"))?;
            (Some(c), None)
        }
        RuntimeKind::Sim => (None, Some(make_runtime(&opts, &names)?)),
    };
    let version = match (&cri_client, &sim) {
        (Some(c), _) => runtime::cri::version(c).await,
        (None, Some(s)) => s.version().await,
        (None, None) => Ok(unknown.clone()),
    }
    .unwrap_or(unknown);
    // TLS bootstrap: a client certificate from the bootstrap token when
    // --kubeconfig holds no valid one.
    if let (Some(boot), Some(kc), [node]) = (
        &opts.bootstrap_kubeconfig,
        &opts.kubeconfig,
        names.as_slice(),
    ) {
        certificates::bootstrap::load_client_cert(kc, boot, &opts.cert_dir(), node)
            .await
            .context("failed to run Kubelet: TLS bootstrap")?;
    }
    let client = client(&opts, client_limiter(&cfg, ClientKind::Main, names.len())).await?;
    let descs: Vec<Arc<NodeDesc>> = node::descs::build(&opts, &cfg, &prepared.template, &version)
        .into_iter()
        .map(Arc::new)
        .collect();
    let mut tasks = tokio::task::JoinSet::new();
    if cfg.rotate_certificates {
        // The store's current pair is what the clients present and re-read
        // (TLS bootstrap writes the kubeconfig that way).
        let cert_dir = std::path::absolute(opts.cert_dir())
            .with_context(|| format!("--cert-dir {}", opts.cert_dir().display()))?;
        let store = certificates::store::FileStore::new(&cert_dir, "kubelet-client");
        let uses_store = opts
            .kubeconfig
            .as_deref()
            .and_then(certificates::bootstrap::client_certificate_path)
            .is_some_and(|p| p == store.current_path());
        if !uses_store {
            bail!(
                "rotateCertificates: true needs --kubeconfig to use the client certificate {} (as TLS bootstrap with --bootstrap-kubeconfig writes it)",
                store.current_path().display()
            );
        }
        let [node] = names.as_slice() else {
            bail!("rotateCertificates: true rotates one node's certificate; it cannot be used with --nodes");
        };
        tasks.spawn(
            certificates::rotation::Rotation {
                client: client.clone(),
                store,
                node: node.clone(),
                role: certificates::rotation::Role::Client,
            }
            .run(),
        );
    }
    // The claims prepared on the node (upstream's checkpoint: an
    // unreadable file stops the kubelet, as upstream's) and the drivers'
    // plugins; the node's ResourceSlices of drivers that do not run are
    // deleted.
    let dra_manager = match (&cri_client, descs.as_slice()) {
        (Some(_), [desc]) => {
            let slices = dra::plugins::Slices {
                client: client.clone(),
                node: desc.name.clone(),
            };
            let health = dra::health::HealthCache::open(&opts.root_dir);
            let plugins = dra::Plugins::new(Some(slices.clone()), health);
            let m = dra::Manager::open(&opts.root_dir, Some(client.clone()), plugins)
                .map_err(anyhow::Error::msg)?;
            // Not one of `tasks` (each runs for the kubelet's life).
            tokio::spawn(async move { slices.wipe(None).await });
            Some(Arc::new(m))
        }
        _ => None,
    };
    let csi_drivers = Arc::new(volumes::csi::driver::Drivers::default());
    let csi = match (&cri_client, descs.as_slice()) {
        (Some(_), [desc]) => Some(Arc::new(volumes::csi::publish::Csi::new(
            client.clone(),
            csi_drivers.clone(),
            opts.root_dir.clone(),
            desc.name.clone(),
        ))),
        _ => None,
    };
    if let Some(c) = &csi {
        tasks.spawn(c.clone().refresh_in_use());
    }
    let cri = match (cri_client, descs.as_slice()) {
        (Some(c), [desc]) => Some(
            make_cri(
                &opts,
                &cfg,
                c,
                desc,
                &client,
                Shared {
                    devices: device_manager.clone(),
                    dra: dra_manager.clone(),
                    timeline: metrics.startup.clone(),
                    csi: csi.clone().context("the CSI volumes of the CRI node")?,
                },
                &mut tasks,
            )
            .await?,
        ),
        (Some(_), _) => bail!("the CRI runtime runs exactly one node"),
        (None, _) => None,
    };
    if let (true, Some(c), [desc]) = (swap_on, &cri, descs.as_slice()) {
        // rkube mounts memory-backed volumes without tmpfs's noswap.
        tracing::warn!("swap is on: memory-backed volumes (Secrets, emptyDir with medium Memory) may be swapped to disk");
        if let Some(e) = c.events() {
            e.record_node(
                &desc.name,
                true,
                "PossibleMemoryBackedVolumesOnDisk",
                "The tmpfs noswap option is not supported. Memory-backed volumes (e.g. secrets, emptyDirs, etc.) might be swapped to disk and should no longer be considered secure.",
            );
        }
    }
    let runtime: Arc<dyn Runtime> = match (&cri, sim) {
        (Some(c), _) => c.clone(),
        (None, Some(s)) => s,
        (None, None) => bail!("no runtime"),
    };
    if !prepared.slices.is_empty() {
        let slices = descs
            .iter()
            .flat_map(|d| prepared.slices.iter().map(|t| t.for_node(&d.name)))
            .collect();
        tasks.spawn(node::resource_slices::publish(
            client.clone(),
            slices,
            opts.api_concurrency,
        ));
    }
    if cfg.healthz_port != 0 {
        let addr = format!("{}:{}", cfg.healthz_bind_address, cfg.healthz_port);
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .with_context(|| format!("listening on {addr}"))?;
        tracing::info!(%addr, "serving /healthz and /metrics");
        tasks.spawn(server::healthz::serve(listener, metrics.clone()));
    }
    // The node's figures: the Summary API, the resource and cAdvisor
    // metrics and the eviction manager read the same provider.
    let stats = match (&cri, descs.as_slice()) {
        (Some(c), [desc]) => Some(Arc::new(
            stats::StatsProvider::new(
                c.client().clone(),
                c.dirs().clone(),
                &desc.name,
                &cfg.cgroup_root,
            )
            .with_volume_stats_period(cfg.volume_stats_agg_period),
        )),
        _ => None,
    };
    if let (Some(cri), true) = (&cri, cfg.container_log_max_size >= 0) {
        // Container logs rotated by size (a negative size: never, as upstream).
        tasks.spawn(logs::manager::run(
            cri.client().clone(),
            logs::manager::Policy {
                max_size: u64::try_from(cfg.container_log_max_size).unwrap_or(0),
                max_files: cfg.container_log_max_files,
                workers: usize::try_from(cfg.container_log_max_workers).unwrap_or(1),
                interval: cfg.container_log_monitor_interval,
            },
        ));
    }
    let pod_states = Arc::new(pods::worker::PodStates::default());
    // Dead containers, sandboxes and unused images; the eviction manager
    // asks it too before evicting for disk pressure.
    let collector = match (&cri, &stats, descs.as_slice()) {
        (Some(cri), Some(stats), [desc]) => {
            let gc = Arc::new(gc::GarbageCollector::new(
                cri.client().clone(),
                stats.clone(),
                desc.name.clone(),
                cri.events().cloned(),
                gc::containers::Policy {
                    min_age: opts.container_gc.min_age,
                    max_per_pod_container: opts.container_gc.max_per_pod_container,
                    max_containers: opts.container_gc.max_containers,
                },
                gc::images::Policy {
                    high_threshold_percent: cfg.image_gc_high_threshold_percent,
                    low_threshold_percent: cfg.image_gc_low_threshold_percent,
                    min_age: cfg.image_minimum_gc_age,
                    max_age: cfg.image_maximum_gc_age,
                },
                pod_states.clone(),
            ));
            tasks.spawn(gc.clone().run());
            Some(gc)
        }
        _ => None,
    };
    if let (Some(cri), [desc]) = (&cri, descs.as_slice()) {
        if cfg.port != 0 {
            let settings = prepared.api.clone();
            let names = [
                desc.name.clone(),
                node::machine::hostname(),
                desc.ip.clone(),
            ];
            let gates = &cfg.feature_gates;
            let bootstrap =
                cfg.server_tls_bootstrap && gates.enabled("RotateKubeletServerCertificate");
            let store = if bootstrap {
                let dir = std::path::absolute(opts.cert_dir())
                    .with_context(|| format!("--cert-dir {}", opts.cert_dir().display()))?;
                let store = certificates::store::FileStore::new(&dir, "kubelet-server");
                if let (Some(c), Some(k)) =
                    (&settings.tls_cert_file, &settings.tls_private_key_file)
                {
                    store.adopt(c, k).map_err(|e| {
                        anyhow::anyhow!("failed to initialize server certificate store: {e}")
                    })?;
                }
                Some(store)
            } else {
                None
            };
            let current = store.as_ref().map(|s| s.current_path());
            let serving = match &current {
                Some(c) => server::Serving::Store(c),
                None => server::Serving::Files {
                    reload: gates.enabled("ReloadKubeletServerCertificateFile"),
                },
            };
            let tls = server::tls_config(&settings, &opts.cert_dir(), &names, serving)?;
            if let Some(store) = store {
                let addresses = [
                    ("InternalIP", desc.ip.as_str()),
                    ("Hostname", desc.name.as_str()),
                ];
                tasks.spawn(
                    certificates::rotation::Rotation {
                        client: client.clone(),
                        store,
                        node: desc.name.clone(),
                        role: certificates::rotation::Role::Serving(
                            certificates::csr::Subject::node_serving(&desc.name, &addresses),
                        ),
                    }
                    .run(),
                );
            }
            let addr = format!("{}:{}", cfg.address, cfg.port);
            let listener = tokio::net::TcpListener::bind(&addr)
                .await
                .with_context(|| format!("listening on {addr}"))?;
            tracing::info!(%addr, "serving the kubelet API");
            let ctx = server::ApiContext {
                node: desc.name.clone(),
                client: client.clone(),
                metrics: metrics.clone(),
                runtime: Some(cri.clone()),
                stats: stats.clone(),
                config: cfg.clone(),
                auth: settings.auth,
            };
            tasks.spawn(server::serve(listener, tls, Arc::new(ctx)));
        }
        // The node's own iptables rules, as upstream's kubelet makes them.
        if cfg.make_iptables_util_chains {
            tasks.spawn(async {
                let families = tokio::task::spawn_blocking(network::iptables::Iptables::available)
                    .await
                    .unwrap_or_default();
                network::iptables::run(families).await;
                // Nothing to keep (no iptables here, or it refused): not
                // the end of the kubelet.
                std::future::pending::<()>().await;
            });
        }
        if !cfg.static_pod_path.is_empty() {
            tasks.spawn(
                pods::static_pods::StaticPods {
                    dir: cfg.static_pod_path.clone().into(),
                    node: desc.name.clone(),
                    client: client.clone(),
                    runtime: cri.clone(),
                }
                .run(),
            );
        }
    }
    // status.images: the CRI runtime's images (the sim has none).
    let images = cri.as_ref().map(|c| {
        let list = Arc::new(images::list::ImageList::default());
        tasks.spawn(images::list::refresh(
            c.client().clone(),
            list.clone(),
            cfg.node_status_max_images,
        ));
        list
    });
    let health = Arc::new(RwLock::new(Health::unchecked()));
    let node_board = Arc::new(node::capacity::NodeBoard::default());
    tasks.spawn(probe_health(
        runtime.clone(),
        health.clone(),
        cfg.node_status_update_frequency,
        node_board.clone(),
        cri.as_ref()
            .and_then(|_| descs.first())
            .map(|d| d.name.clone()),
        cri.as_ref().map(|_| metrics.clone()),
    ));
    let active = Arc::new(pods::worker::ActivePods::default());
    if cri.is_some() {
        // The pod-resources API on <root-dir>/pod-resources/kubelet.sock:
        // monitoring agents list the pods' containers and their devices.
        let socket = podresources::socket_path(&opts.root_dir);
        let mut resources: Arc<dyn podresources::ResourcesSource> = match &device_manager {
            Some(d) => d.clone(),
            None => Arc::new(podresources::NoResources),
        };
        if let Some(d) = &dra_manager {
            resources = Arc::new(dra::pod_resources::WithClaims {
                inner: resources,
                dra: d.clone(),
            });
        }
        let server = podresources::serve_with(&socket, active.clone(), resources)
            .await
            .with_context(|| format!("serving the pod-resources API on {}", socket.display()))?;
        tasks.spawn(async move {
            if let Err(e) = server.await {
                tracing::error!(error = %e, "the pod-resources API");
            }
        });
        // Device plugins register on <root-dir>/device-plugins/kubelet.sock,
        // or through <root-dir>/plugins_registry; DRA drivers through the
        // latter.
        let mut plugins = pluginmanager::PluginManager::new(&opts.root_dir);
        if let Some(d) = &device_manager {
            let server = devices::serve(d.clone()).await?;
            tasks.spawn(async move {
                if let Err(e) = server.await {
                    tracing::error!(error = %e, "device plugin registration");
                }
            });
            plugins.add_handler(
                pluginmanager::DEVICE_PLUGIN,
                Arc::new(devices::registration::WatcherHandler(d.clone())),
            );
        }
        if let Some(d) = &dra_manager {
            plugins.add_handler(
                dra::PLUGIN_TYPE,
                Arc::new(dra::plugins::Handler(d.plugins().clone())),
            );
        }
        if let Some(desc) = descs.first() {
            plugins.add_handler(
                volumes::csi::PLUGIN_TYPE,
                Arc::new(volumes::csi::driver::Handler {
                    drivers: csi_drivers.clone(),
                    client: client.clone(),
                    node_name: desc.name.clone(),
                }),
            );
        }
        tasks.spawn(plugins.run());
    }
    let pressure = Arc::new(node::pressure::PressureBoard::default());
    let source: Option<Arc<dyn eviction::SignalSource>> = match (&cri, &opts.sim_signals) {
        (Some(_), _) => stats.clone().map(|stats| {
            Arc::new(eviction::MachineSignals { stats }) as Arc<dyn eviction::SignalSource>
        }),
        (None, Some(path)) => Some(Arc::new(eviction::SimSource {
            signals: eviction::SimSignals { path: path.clone() },
            active: active.clone(),
        })),
        (None, None) => None,
    };
    if let Some(source) = source {
        tasks.spawn(
            eviction::EvictionManager {
                config: cfg.clone(),
                nodes: descs.clone(),
                source,
                active: active.clone(),
                pressure: pressure.clone(),
                period: eviction::MONITORING_PERIOD,
                reclaim: collector.clone().zip(stats.clone()).map(|(gc, stats)| {
                    eviction::Reclaim {
                        gc,
                        dedicated_imagefs: Arc::new(move || {
                            let (nodefs, imagefs) = stats.devices();
                            nodefs != imagefs
                        }),
                    }
                }),
                events: cri.as_ref().and_then(|c| c.events().cloned()),
                local_storage: cri.is_some(),
            }
            .run(),
        );
    }
    // Graceful node shutdown: logind's lock taken before any pod runs; a
    // node that asks for it and cannot have it does not start.
    let classes = shutdown::groups::classes(
        &cfg.shutdown_grace_period_by_pod_priority,
        cfg.shutdown_grace_period,
        cfg.shutdown_grace_period_critical_pods,
        cfg.feature_gates
            .enabled("GracefulNodeShutdownBasedOnPodPriority"),
    );
    if !classes.is_empty() && cfg.feature_gates.enabled("GracefulNodeShutdown") {
        let [desc] = descs.as_slice() else {
            bail!("shutdownGracePeriod: graceful node shutdown is for one node; it cannot be used with --nodes");
        };
        let manager = shutdown::ShutdownManager {
            node: desc.name.clone(),
            classes,
            active: active.clone(),
            board: pressure.clone(),
            events: cri.as_ref().and_then(|c| c.events().cloned()),
            logind_conf_dir: shutdown::logind::LOGIND_CONF_DIR.into(),
        };
        let session = manager.start().await.context(
            "failed to start node shutdown manager (shutdownGracePeriod needs systemd-logind on the system bus)",
        )?;
        tasks.spawn(manager.run(session));
    }
    let host_ips: HashMap<String, String> = descs
        .iter()
        .map(|d| (d.name.clone(), d.ip.clone()))
        .collect();
    let node_set: HashSet<String> = descs.iter().map(|d| d.name.clone()).collect();
    // Registration happens in the heartbeat loop, node by node, so each
    // node's lease renewals start as soon as it is registered.
    let states: Vec<node::heartbeat::NodeState> = descs
        .iter()
        .map(|d| {
            if cfg.register_node {
                node::heartbeat::NodeState::unregistered(d.clone())
            } else {
                node::heartbeat::NodeState::new(d.clone(), node::Registered::default())
            }
        })
        .collect();
    tokio::pin!(shutdown);
    let writer = Arc::new(pods::writer::StatusWriter::default());
    tasks.spawn(writer.clone().run(client.clone(), metrics.clone(), 16));
    // Node status and leases on a connection of their own, as the
    // kubelet's heartbeat client: pod status writes queued on the main
    // HTTP/2 connection must not delay a lease renewal.
    let heartbeat_client = self::client(&opts, None).await?;
    tasks.spawn(
        node::heartbeat::Heartbeat {
            client: heartbeat_client,
            config: cfg.clone(),
            metrics: metrics.clone(),
            health,
            pressure: pressure.clone(),
            nodes: node_board.clone(),
            images,
            concurrency: opts.api_concurrency,
            devices: device_manager.clone(),
            volumes_in_use: csi.clone(),
        }
        .run(states),
    );
    let admission =
        pods::admission::Admission::new(client.clone(), node_board, pressure.clone(), &descs);
    let ctx = Arc::new(pods::worker::WorkerContext {
        client: client.clone(),
        runtime,
        writer,
        metrics: metrics.clone(),
        host_ips,
        active,
        admission,
        states: pod_states,
        allocated: Arc::new(allocated),
        devices: device_manager,
        dra: dra_manager,
        static_pod_path: (!cfg.static_pod_path.is_empty())
            .then(|| cfg.static_pod_path.clone().into()),
        sync_frequency: cfg.sync_frequency,
    });
    // Relisting the runtime wakes the workers of the pods that changed
    // (the sim keeps its own timers; a task of the set must not end).
    if cri.is_some() {
        tasks.spawn(pleg::run(ctx.runtime.clone(), metrics.clone()));
    }
    tasks.spawn(pods::run(ctx, node_set));
    tasks.spawn(log_metrics(metrics.clone()));
    // Every manager is started: tell systemd, as upstream's kubelet does.
    if let Err(e) = rkube_daemon::systemd::notify("READY=1") {
        tracing::warn!("notifying systemd of readiness: {e}");
    }
    tokio::select! {
        _ = &mut shutdown => tracing::info!("shutting down"),
        Some(r) = tasks.join_next() => {
            tasks.abort_all();
            match r {
                Ok(()) => bail!("a kubelet task ended unexpectedly"),
                Err(e) => bail!("a kubelet task failed: {e}"),
            }
        }
    }
    tasks.abort_all();
    Ok(())
}

/// Runs the agent until `shutdown` completes.
pub async fn run(opts: Options, shutdown: impl Future<Output = ()>) -> Result<()> {
    run_with_metrics(opts, Arc::new(Metrics::default()), shutdown).await
}

/// `rkube kubelet ARGS...`: parses the flags, runs until SIGINT/SIGTERM.
/// Returns the exit code (0 clean stop, 1 failure, 2 bad flags or
/// configuration).
pub fn main(args: Vec<String>) -> i32 {
    let after_error = "Run 'rkube kubelet --help' for usage.";
    let opts = match rkube_daemon::flags::parsed(options::parse(args), options::USAGE, after_error)
    {
        Ok(o) => o,
        Err(code) => return code,
    };
    if let Some(format) = opts.version {
        let version = node::machine::kubelet_version();
        match format {
            options::VersionFormat::Plain => println!("Kubernetes {version}"),
            options::VersionFormat::Raw => println!(
                "version.Info{{GitVersion:{version:?}, GoVersion:\"none (rkube {})\", Platform:\"linux/{}\"}}",
                env!("CARGO_PKG_VERSION"),
                node::machine::go_arch()
            ),
        }
        return 0;
    }
    let prepared = match prepare(&opts) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    let verbosity = opts.verbosity.unwrap_or(prepared.config.logging_verbosity);
    rkube_daemon::logging::init_tracing(verbosity, &["rkube_kubelet"]);
    for w in opts.warnings.iter().chain(&prepared.warnings) {
        tracing::warn!("{w}");
    }
    rkube_daemon::bootstrap::run(|shutdown| run(opts, shutdown))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_limits_as_upstreams_three_clients() {
        let mut cfg = KubeletConfiguration::default();
        assert!(client_limiter(&cfg, ClientKind::Heartbeat, 1).is_none());
        let main = client_limiter(&cfg, ClientKind::Main, 1).unwrap();
        assert!((0..100).all(|_| main.try_acquire()), "a burst of 100");
        assert!(!main.try_acquire());
        // 3 sim nodes: three kubelets' worth.
        let sim = client_limiter(&cfg, ClientKind::Main, 3).unwrap();
        assert!((0..300).all(|_| sim.try_acquire()) && !sim.try_acquire());
        cfg.event_record_qps = 0;
        assert!(
            client_limiter(&cfg, ClientKind::Events, 1).is_none(),
            "0: no limit"
        );
        cfg.kube_api_qps = 0;
        cfg.kube_api_burst = 2;
        let main = client_limiter(&cfg, ClientKind::Main, 1).unwrap();
        assert!(main.try_acquire() && main.try_acquire() && !main.try_acquire());
        let pulls = pull_limiter(&KubeletConfiguration::default()).unwrap();
        assert!((0..10).all(|_| pulls.try_acquire()) && !pulls.try_acquire());
        cfg.registry_pull_qps = 0;
        assert!(pull_limiter(&cfg).is_none());
    }

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn exit_codes() {
        assert_eq!(main(args(&["--help"])), 0);
        assert_eq!(main(args(&["--runtime=docker"])), 2);
        // The kubelet API's settings are configuration too.
        assert_eq!(main(args(&["--authorization-mode=RBAC"])), 2);
        assert_eq!(
            main(args(&["--authentication-token-webhook-cache-ttl=soon"])),
            2
        );
        assert_eq!(
            main(args(&["--nodes=3"])),
            2,
            "--nodes without --runtime sim"
        );
        let dir = std::env::temp_dir().join(format!("rkube-kubelet-exit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bad = dir.join("bad.yaml");
        std::fs::write(
            &bad,
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPodz: 3\n",
        )
        .unwrap();
        assert_eq!(main(args(&["--config", bad.to_str().unwrap()])), 2);
        assert_eq!(
            main(args(&[
                "--runtime=sim",
                "--node-template",
                "/nonexistent/t.yaml"
            ])),
            2
        );
        // Valid flags, but the kubeconfig cannot be read: a runtime failure.
        assert_eq!(
            main(args(&[
                "--runtime=sim",
                "--kubeconfig=/nonexistent/kubeconfig"
            ])),
            1
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn prepare_reads_template_and_config() {
        let dir = std::env::temp_dir().join(format!("rkube-kubelet-prep-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = dir.join("c.yaml");
        std::fs::write(
            &cfg,
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 20\nhairpinMode: hairpin-veth\n",
        )
        .unwrap();
        let opts =
            options::parse(args(&["--runtime=sim", "--config", cfg.to_str().unwrap()])).unwrap();
        let p = prepare(&opts).unwrap();
        assert_eq!(p.config.max_pods, 20);
        assert_eq!(p.template.capacity["pods"].value(), 20);
        assert_eq!(p.warnings.len(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
