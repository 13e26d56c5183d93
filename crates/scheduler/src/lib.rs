//! `rkube scheduler`: rkube as a cluster's scheduler. It watches the API
//! server (kube-runtime watchers, relisting on 410 Gone), keeps the cluster
//! in a cache ([`state`]), queues the pending pods of its profiles
//! ([`queue`]), schedules them one at a time with the same framework and
//! plugins as `rkube simulate`, and binds them through `pods/binding` off the
//! scheduling loop ([`api`], rate-limited by `rkube_daemon::ratelimit`).
//!
//! What users see is what kube-scheduler v1.37 shows: `Scheduled` and
//! `FailedScheduling` events (events.k8s.io/v1), the pod's `PodScheduled`
//! condition, and Prometheus metrics under upstream's names ([`metrics`])
//! next to `/healthz`, `/livez` and `/readyz` on the HTTPS secure port
//! ([`serve`]). Replicas elect a leader on a Lease ([`leader`]); only the
//! leader schedules.
//!
//! Each attempt is [`schedule_one`]'s: the scheduling cycle on the loop,
//! the binding cycle (PreBind, Bind) on a thread of its own.
//!
//! The queue moves a rejected pod back only on the cluster events its
//! rejecting plugins' queueing hints admit ([`queue`], [`state`]).

// A daemon reports errors; it does not panic on them (tests may unwrap).
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

pub mod api;
pub mod events;
pub mod leader;
pub mod metrics;
pub mod options;
pub mod queue;

mod schedule_one;
pub mod serve;
pub mod state;

use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures::StreamExt;
use k8s_openapi::api::apps::v1 as apps;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::policy::v1 as policy;
use k8s_openapi::api::resource::v1 as resource;
use k8s_openapi::api::storage::v1 as storage;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client};
use rkube_config::KubeSchedulerConfiguration;
use rkube_framework::Outcome;
use rkube_framework::{Profiles, Scheduler};
use serde::de::DeserializeOwned;

use crate::api::Writer;
use crate::leader::{Elector, LeaderConfig};
use crate::metrics::Metrics;
use crate::options::Options;
use crate::queue::Queue;
use crate::state::{Change, State};

/// Number of kinds watched (see [`spawn_informers`]).
const WATCHED_KINDS: usize = 14;

/// What the informers, the scheduling loop, the binders and the health
/// endpoints share.
pub struct Shared {
    /// Cache, queue and nominator.
    pub state: Mutex<State>,
    /// The profiles.
    pub profiles: Profiles,
    /// Prometheus metrics.
    pub metrics: Arc<Metrics>,
    wake: tokio::sync::Notify,
    synced_kinds: AtomicUsize,
    synced: AtomicBool,
    in_flight: AtomicUsize,
    bound_or_failed: tokio::sync::Notify,
    /// A binding cycle panicked: the process ends.
    binding_panicked: tokio::sync::Notify,
    explain_scores: bool,
    /// `--record-decisions`: bindings carry the decision mark
    /// ([`rkube_model::decision`]).
    record_decisions: bool,
    /// `--feature-gates OpportunisticBatching=...`.
    opportunistic_batching: bool,
    hooks: Hooks,
}

/// A decision observer.
pub type DecisionHook = Box<dyn Fn(&Decision) + Send + Sync>;

/// Observers for tools and tests.
#[derive(Default)]
pub struct Hooks {
    /// Called for every placement decision, in decision order, before the
    /// pod is bound (e.g. to replay the sequence against another scheduler).
    pub on_decision: Option<DecisionHook>,
}

/// One placement decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// `namespace/name`.
    pub pod: String,
    /// The chosen node.
    pub node: String,
}

impl Shared {
    /// True once every informer has listed its kind.
    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::SeqCst)
    }

    /// The sizes `/metrics` reports.
    pub fn gauges(&self) -> metrics::Gauges {
        let mut g = self.lock().gauges();
        g.binding = self.in_flight.load(Ordering::SeqCst);
        g
    }

    /// Waits until no binding is in flight, at most `limit`.
    async fn drain_bindings(&self, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        while self.in_flight.load(Ordering::SeqCst) > 0 {
            if tokio::time::timeout_at(deadline, self.bound_or_failed.notified())
                .await
                .is_err()
            {
                tracing::warn!(
                    in_flight = self.in_flight.load(Ordering::SeqCst),
                    "bindings still in flight at shutdown"
                );
                return;
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Reads and loads the `--config` file (upstream defaults without it).
pub fn load_config(opts: &Options) -> Result<KubeSchedulerConfiguration> {
    match &opts.config {
        None => Ok(rkube_config::default_config_gated(opts.generic_workload)),
        Some(path) => {
            let text = rkube_util::file::read_text(path, rkube_util::file::CONFIG_MAX_BYTES)
                .with_context(|| format!("reading {}", path.display()))?;
            Ok(rkube_config::load_str_gated(
                &path.display().to_string(),
                &text,
                opts.generic_workload,
            )?)
        }
    }
}

/// A client for the kubeconfig (`clientConnection.kubeconfig` wins over
/// `--kubeconfig`, as in kube-scheduler); in-cluster or `$KUBECONFIG`
/// without either. Each call makes a client with a connection of its own.
pub async fn client(opts: &Options, cfg: &KubeSchedulerConfiguration) -> Result<Client> {
    let path = if !cfg.client_connection.kubeconfig.is_empty() {
        Some(Path::new(&cfg.client_connection.kubeconfig).to_path_buf())
    } else {
        opts.kubeconfig.clone()
    };
    Ok(rkube_daemon::from_kubeconfig(path.as_deref()).await?)
}

/// The effective settings: `--config` (defaulted) with explicitly given
/// flags winning, as kube-scheduler applies them.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Leader election, when enabled.
    pub leader: Option<LeaderConfig>,
    /// Client QPS.
    pub qps: f32,
    /// Client burst.
    pub burst: i32,
}

/// A backoff setting as a [`Duration`]. Validation has refused values ≤ 0;
/// kube-scheduler accepts any larger value (Go's `time.Duration` wraps past
/// ~292 years), so a value too large for a duration is capped there instead
/// of overflowing the queue's clock arithmetic.
fn backoff_seconds(secs: Option<i64>, default: i64) -> Duration {
    rkube_util::duration::from_secs_checked(secs.unwrap_or(default).max(0))
        .unwrap_or(rkube_util::duration::MAX)
}

/// Combines the flags with the configuration; errors are bad input.
pub fn settings(opts: &Options, cfg: &KubeSchedulerConfiguration) -> Result<Settings> {
    let le = &cfg.leader_election;
    let dur = |flag: Option<Duration>, field: &Option<String>, name: &str, default: u64| match (
        flag, field,
    ) {
        (Some(d), _) => Ok(d),
        (None, Some(s)) => rkube_util::duration::parse(s)
            .map_err(|e| anyhow::anyhow!("leaderElection.{name}: {e}")),
        (None, None) => Ok(Duration::from_secs(default)),
    };
    let lease_duration = dur(opts.lease_duration, &le.lease_duration, "leaseDuration", 15)?;
    let renew_deadline = dur(opts.renew_deadline, &le.renew_deadline, "renewDeadline", 10)?;
    let retry_period = dur(opts.retry_period, &le.retry_period, "retryPeriod", 2)?;
    let enabled = opts.leader_elect.or(le.leader_elect).unwrap_or(true);
    let lock = opts
        .resource_lock
        .clone()
        .unwrap_or_else(|| le.resource_lock.clone());
    if enabled {
        if lease_duration <= renew_deadline {
            bail!("leaderElection.leaseDuration: must be greater than renewDeadline ({lease_duration:?} <= {renew_deadline:?})");
        }
        if retry_period.is_zero()
            || renew_deadline.as_secs_f64() <= 1.2 * retry_period.as_secs_f64()
        {
            bail!("leaderElection.renewDeadline: must be greater than retryPeriod*1.2 ({renew_deadline:?}, retryPeriod {retry_period:?})");
        }
        if !lock.is_empty() && lock != "leases" {
            bail!("leaderElection.resourceLock: {lock:?} is not supported (only \"leases\")");
        }
    }
    let or = |flag: &Option<String>, field: &str, default: &str| {
        flag.clone().filter(|s| !s.is_empty()).unwrap_or_else(|| {
            if field.is_empty() {
                default.to_string()
            } else {
                field.to_string()
            }
        })
    };
    let leader = enabled.then(|| LeaderConfig {
        namespace: or(
            &opts.resource_namespace,
            &le.resource_namespace,
            "kube-system",
        ),
        name: or(&opts.resource_name, &le.resource_name, "kube-scheduler"),
        identity: leader::identity(&api::hostname()),
        lease_duration,
        renew_deadline,
        retry_period,
    });
    let cc = &cfg.client_connection;
    Ok(Settings {
        leader,
        qps: opts
            .qps
            .unwrap_or(if cc.qps == 0.0 { 50.0 } else { cc.qps }),
        burst: opts
            .burst
            .unwrap_or(if cc.burst == 0 { 100 } else { cc.burst }),
    })
}

/// Runs the scheduler until `shutdown` completes.
pub async fn run(opts: Options, shutdown: impl Future<Output = ()>) -> Result<()> {
    run_with(opts, shutdown, Hooks::default()).await
}

/// [`run`] with observers.
pub async fn run_with(
    opts: Options,
    shutdown: impl Future<Output = ()>,
    hooks: Hooks,
) -> Result<()> {
    let cfg = load_config(&opts)?;
    let settings = settings(&opts, &cfg)?;
    let mut profiles = rkube_plugins::profiles(&cfg).map_err(|e| anyhow::anyhow!("{e}"))?;
    let metrics = Arc::new(Metrics::new());
    profiles.set_recorder(metrics.clone());
    // Three clients, as kube-scheduler's three clientsets (informers and
    // reads, writes and events, leader election), each on a connection of
    // its own: one HTTP/2 connection queues requests past the server's
    // stream limit (Go's transport would open another), so bindings piling
    // up behind the QPS limit must not delay a lease renewal or a watch.
    let client = client(&opts, &cfg).await?;
    let write_client = self::client(&opts, &cfg).await?;
    let queue = Queue::new(
        backoff_seconds(cfg.pod_initial_backoff_seconds, 1),
        backoff_seconds(cfg.pod_max_backoff_seconds, 10),
    )
    .with_profiles(&profiles)
    .with_metrics(metrics.clone());
    let mut state = State::new(queue);
    if opts.generic_workload {
        state.enable_pod_groups();
    }
    let shared = Arc::new(Shared {
        state: Mutex::new(state),
        profiles,
        metrics,
        wake: tokio::sync::Notify::new(),
        synced_kinds: AtomicUsize::new(0),
        synced: AtomicBool::new(false),
        in_flight: AtomicUsize::new(0),
        bound_or_failed: tokio::sync::Notify::new(),
        binding_panicked: tokio::sync::Notify::new(),
        explain_scores: opts.explain_scores || opts.verbosity >= 10,
        record_decisions: opts.record_decisions,
        opportunistic_batching: opts.opportunistic_batching,
        hooks,
    });
    let (events, queued_events) = events::EventQueue::new(events::MAX_QUEUED);
    let writer = Writer {
        client: write_client.clone(),
        limiter: Arc::new(rkube_daemon::ratelimit::RateLimiter::new(
            settings.qps,
            settings.burst,
        )),
        events,
        prepaid: None,
    };
    tracing::info!(
        qps = settings.qps,
        burst = settings.burst,
        "client rate limit for API writes"
    );
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(events::run(
        write_client,
        api::hostname(),
        Arc::new(rkube_daemon::ratelimit::RateLimiter::new(
            settings.qps,
            settings.burst,
        )),
        queued_events,
    ));
    if opts.secure_port != 0 {
        let tls = serve::tls_config(
            opts.tls_cert_file.as_deref(),
            opts.tls_private_key_file.as_deref(),
            opts.cert_dir.as_deref(),
        )?;
        let tls = serve::with_client_ca(tls, opts.client_ca_file.as_deref())?;
        let auth_client = match opts
            .authorization_kubeconfig
            .as_ref()
            .or(opts.authentication_kubeconfig.as_ref())
        {
            Some(p) => rkube_daemon::from_kubeconfig(Some(p)).await?,
            None => client.clone(),
        };
        let addr = format!("{}:{}", opts.bind_address, opts.secure_port);
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .with_context(|| format!("listening on {addr}"))?;
        tracing::info!(%addr, "serving /healthz, /livez, /readyz and /metrics over HTTPS");
        tasks.spawn(serve::serve(
            listener,
            tls,
            shared.clone(),
            serve::ServeConfig {
                always_allow: opts.always_allow_paths.clone(),
                auth_client,
            },
        ));
    }
    spawn_informers(&mut tasks, &client, &shared);
    tokio::pin!(shutdown);

    // Only the leader schedules; standbys keep their caches warm.
    let mut holding: Option<tokio::task::JoinHandle<()>> = None;
    let election = match &settings.leader {
        Some(lc) => Some((lc, self::client(&opts, &cfg).await?)),
        None => None,
    };
    if let Some((lc, election_client)) = &election {
        shared.metrics.set_leader(&lc.name, false);
        let mut elector = Elector::new(election_client.clone(), (*lc).clone());
        tracing::info!(lease = %format!("{}/{}", lc.namespace, lc.name), identity = %lc.identity, "attempting to acquire the leader lease");
        tokio::select! {
            _ = &mut shutdown => {
                tracing::info!("shutting down before becoming the leader");
                tasks.abort_all();
                return Ok(());
            }
            Some(r) = tasks.join_next() => {
                tasks.abort_all();
                return task_failed(r);
            }
            _ = elector.acquire() => {}
        }
        shared.metrics.set_leader(&lc.name, true);
        holding = Some(tokio::spawn(async move { elector.hold().await }));
    }
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    // Supervised like the other tasks: a scheduling loop that ends or
    // panics ends the process (exit 1) instead of leaving a leader that
    // holds the lease, reports healthy and schedules nothing. The lease is
    // not released then: a standby takes it when it expires.
    let mut scheduler = Scheduler::new(seed, shared.profiles.percentage_of_nodes_to_score);
    // OpportunisticBatching's kept lists age in wall time here.
    scheduler.opportunistic_batching = shared.opportunistic_batching;
    scheduler.batch_clock = rkube_framework::BatchClock::Wall(std::time::Instant::now());
    let mut scheduling = tokio::spawn(schedule_one::schedule_loop(
        shared.clone(),
        writer,
        scheduler,
    ));
    let lost = async {
        match holding.as_mut() {
            Some(h) => {
                let _ = h.await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    let loop_ended = |r: Result<(), tokio::task::JoinError>| match r {
        Ok(()) => Err(anyhow::anyhow!("the scheduling loop ended unexpectedly")),
        Err(e) => Err(anyhow::anyhow!("the scheduling loop failed: {e}")),
    };
    // Biased, the loop first: a task that ends because the loop died (its
    // channel closed) must not be reported as the cause.
    let outcome = tokio::select! {
        biased;
        _ = &mut shutdown => {
            tracing::info!("shutting down: no new pods are taken; finishing bindings in flight");
            Ok(())
        }
        _ = lost => Err(anyhow::anyhow!("leader election lost")),
        _ = shared.binding_panicked.notified() => Err(anyhow::anyhow!("a binding cycle panicked")),
        r = &mut scheduling => loop_ended(r),
        Some(r) = tasks.join_next() => {
            // The loop may have died a moment before and taken this task
            // with it: then the loop is the cause.
            if scheduling.is_finished() {
                loop_ended((&mut scheduling).await)
            } else {
                task_failed(r)
            }
        }
    };
    scheduling.abort();
    if let Some(h) = &holding {
        h.abort();
    }
    if outcome.is_ok() {
        shared.drain_bindings(Duration::from_secs(10)).await;
        if let Some((lc, election_client)) = &election {
            let mut elector = Elector::new(election_client.clone(), (*lc).clone());
            if let Err(e) = elector.release().await {
                tracing::warn!(error = %e, "could not release the lease");
            }
            shared.metrics.set_leader(&lc.name, false);
        }
    }
    tasks.abort_all();
    outcome
}

fn task_failed(r: Result<(), tokio::task::JoinError>) -> Result<()> {
    match r {
        Ok(()) => bail!("a scheduler task ended unexpectedly"),
        Err(e) => bail!("a scheduler task failed: {e}"),
    }
}

type Handler<K> = fn(&mut State, &Profiles, Change<K>, Instant);

fn spawn_informers(tasks: &mut tokio::task::JoinSet<()>, client: &Client, shared: &Arc<Shared>) {
    fn spawn<K>(
        tasks: &mut tokio::task::JoinSet<()>,
        client: &Client,
        shared: &Arc<Shared>,
        handler: Handler<K>,
    ) where
        K: kube::Resource<DynamicType = ()>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug
            + Send
            + Sync
            + 'static,
    {
        tasks.spawn(inform(
            Api::<K>::all(client.clone()),
            shared.clone(),
            handler,
        ));
    }
    spawn::<core::Pod>(tasks, client, shared, |s, p, c, now| {
        s.pods_changed(p, c, now)
    });
    spawn::<core::Node>(tasks, client, shared, |s, _, c, now| {
        s.nodes_changed(c, now)
    });
    spawn::<core::Namespace>(tasks, client, shared, |s, _, c, now| {
        s.namespaces_changed(c, now)
    });
    spawn::<core::Service>(tasks, client, shared, |s, _, c, _| s.services_changed(c));
    spawn::<apps::ReplicaSet>(tasks, client, shared, |s, _, c, _| {
        s.replica_sets_changed(c)
    });
    spawn::<apps::StatefulSet>(tasks, client, shared, |s, _, c, _| {
        s.stateful_sets_changed(c)
    });
    spawn::<policy::PodDisruptionBudget>(tasks, client, shared, |s, _, c, _| s.pdbs_changed(c));
    spawn::<core::PersistentVolume>(tasks, client, shared, |s, _, c, now| s.pvs_changed(c, now));
    spawn::<core::PersistentVolumeClaim>(tasks, client, shared, |s, _, c, now| {
        s.pvcs_changed(c, now)
    });
    spawn::<storage::StorageClass>(tasks, client, shared, |s, _, c, now| {
        s.storage_classes_changed(c, now)
    });
    spawn::<storage::CSINode>(tasks, client, shared, |s, _, c, now| {
        s.csi_nodes_changed(c, now)
    });
    spawn::<storage::CSIDriver>(tasks, client, shared, |s, _, c, now| {
        s.csi_drivers_changed(c, now)
    });
    spawn::<storage::CSIStorageCapacity>(tasks, client, shared, |s, _, c, now| {
        s.storage_capacities_changed(c, now)
    });
    spawn::<resource::DeviceClass>(tasks, client, shared, |s, p, c, now| {
        s.device_classes_changed(p, c, now)
    });
    spawn::<resource::ResourceSlice>(tasks, client, shared, |s, p, c, now| {
        s.resource_slices_changed(p, c, now)
    });
    spawn::<resource::ResourceClaim>(tasks, client, shared, |s, p, c, now| {
        s.resource_claims_changed(p, c, now)
    });
    // DRADeviceTaintRules (GA, on by default in v1.37).
    spawn::<resource::DeviceTaintRule>(tasks, client, shared, |s, p, c, now| {
        s.device_taint_rules_changed(p, c, now)
    });
    if shared.profiles.generic_workload {
        spawn::<k8s_openapi::api::scheduling::v1beta1::PodGroup>(
            tasks,
            client,
            shared,
            |s, p, c, now| s.pod_groups_changed(p, c, now),
        );
    }
}

/// Number of kinds the informers watch: PodGroups too under GenericWorkload.
fn watched_kinds(profiles: &rkube_framework::Profiles) -> usize {
    WATCHED_KINDS + usize::from(profiles.generic_workload)
}

/// The object without `metadata.managedFields`, which nothing here reads
/// (kube-scheduler's pod informer drops them too, to save memory: they
/// are often the larger part of a pod).
fn trimmed<K: kube::Resource>(mut o: K) -> K {
    o.meta_mut().managed_fields = None;
    o
}

/// One informer: a kube-runtime watcher feeding the cache. Like
/// client-go's reflector at v1.37 (`WatchListClient`, on by default since
/// v1.35) it starts with a streaming list: one watch that sends every
/// object and then a bookmark, served from the API server's watch cache,
/// instead of a paginated list and a watch. An API server that refuses
/// streaming lists (older than v1.27, or with `WatchList` off) gets a list
/// and a watch instead, as client-go falls back. Relists after 410 Gone or
/// errors, with backoff. A (re)list is buffered and applied at once, so
/// objects deleted while the watch was down disappear from the cache.
async fn inform<K>(api: Api<K>, shared: Arc<Shared>, handler: Handler<K>)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    let kind = K::kind(&());
    let mut config = watcher::Config::default().streaming_lists();
    let mut buffer: Vec<K> = Vec::new();
    let mut synced = false;
    'watch: loop {
        let mut stream = watcher::watcher(api.clone(), config.clone())
            .default_backoff()
            .boxed();
        while let Some(ev) = stream.next().await {
            let change = match ev {
                Ok(Event::Init) => {
                    buffer.clear();
                    continue;
                }
                Ok(Event::InitApply(o)) => {
                    buffer.push(trimmed(o));
                    continue;
                }
                Ok(Event::InitDone) => Change::Replace(std::mem::take(&mut buffer)),
                Ok(Event::Apply(o)) => Change::Apply(trimmed(o)),
                Ok(Event::Delete(o)) => Change::Delete(o),
                Err(e) if streaming_list_refused(&config, &e) => {
                    tracing::warn!(%kind, error = %e, "the API server refuses streaming lists; listing and watching instead");
                    config = watcher::Config::default();
                    continue 'watch;
                }
                Err(e) => {
                    tracing::warn!(%kind, error = %e, "watch failed; retrying");
                    continue;
                }
            };
            let full = matches!(change, Change::Replace(_));
            let rv = change_rv(&change);
            {
                let mut state = shared.lock();
                state.observe(&kind, rv);
                handler(&mut state, &shared.profiles, change, Instant::now());
            }
            if full && synced {
                tracing::info!(%kind, "informer relisted");
            }
            if full && !synced {
                synced = true;
                tracing::debug!(%kind, "informer synced");
                if shared.synced_kinds.fetch_add(1, Ordering::SeqCst) + 1
                    == watched_kinds(&shared.profiles)
                {
                    shared.synced.store(true, Ordering::SeqCst);
                    tracing::info!("caches synced; scheduling");
                }
            }
            shared.wake.notify_one();
        }
        return;
    }
}

/// Whether `e` says the API server does not take a streaming list (a
/// watch with `sendInitialEvents`): it answered the watch with 400 Bad
/// Request or 422 Invalid (`resourceVersionMatch is forbidden for watch`,
/// `sendInitialEvents is forbidden ... unless the WatchList feature gate is
/// enabled`).
fn streaming_list_refused(config: &watcher::Config, e: &watcher::Error) -> bool {
    config.initial_list_strategy == watcher::InitialListStrategy::StreamingList
        && matches!(e, watcher::Error::WatchStartFailed(kube::Error::Api(s)) if s.code == 400 || s.code == 422)
}

/// The highest resourceVersion in a change (0 where none parses).
fn change_rv<K: kube::Resource>(change: &Change<K>) -> u64 {
    let rv = |o: &K| {
        o.meta()
            .resource_version
            .as_deref()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    match change {
        Change::Apply(o) | Change::Delete(o) => rv(o),
        Change::Replace(list) => list.iter().map(rv).max().unwrap_or(0),
    }
}

/// Logs the per-plugin table `rkube explain` prints (`-v=10` or
/// `--explain-scores`).
pub(crate) fn log_explanation(
    fw: &rkube_framework::Framework,
    snapshot: &rkube_framework::Snapshot,
    pod: &rkube_model::Pod,
    outcome: &Outcome,
) {
    let selected = match outcome {
        Outcome::Scheduled { node, .. } => Some(snapshot.nodes[*node].name().to_string()),
        _ => None,
    };
    match rkube_framework::explain(fw, snapshot, pod) {
        Ok(e) => {
            let report =
                rkube_report::PodExplanation::from_framework(pod, fw, snapshot, &e, selected);
            tracing::info!(pod = %pod.key(), "scores\n{}", rkube_report::text::explanation(&report));
        }
        Err(s) => tracing::info!(pod = %pod.key(), status = %s.message(), "no score table"),
    }
}

/// `rkube scheduler ARGS...`: parses the flags, runs until SIGINT/SIGTERM.
/// Returns the process exit code (0 clean stop, 1 failure, 2 bad flags or
/// configuration).
pub fn main(args: Vec<String>) -> i32 {
    let after_error = format!("\n{}", options::USAGE);
    let opts = match rkube_daemon::flags::parsed(options::parse(args), options::USAGE, &after_error)
    {
        Ok(o) => o,
        Err(code) => return code,
    };
    rkube_daemon::logging::init_tracing(opts.verbosity, &["rkube_scheduler", "rkube_framework"]);
    for w in &opts.warnings {
        tracing::warn!("{w}");
    }
    if let Err(e) = load_config(&opts).and_then(|cfg| settings(&opts, &cfg)) {
        eprintln!("error: {e:#}");
        return 2;
    }
    rkube_daemon::bootstrap::run(|shutdown| run(opts, shutdown))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_refused_streaming_list_falls_back_to_list_and_watch() {
        let status = |code: u16| {
            watcher::Error::WatchStartFailed(kube::Error::Api(
                kube::core::Status::failure("refused", "Invalid")
                    .with_code(code)
                    .boxed(),
            ))
        };
        let streaming = watcher::Config::default().streaming_lists();
        assert!(streaming_list_refused(&streaming, &status(422)));
        assert!(streaming_list_refused(&streaming, &status(400)));
        // Not a refusal of the request's form: retried as it is.
        assert!(!streaming_list_refused(&streaming, &status(403)));
        assert!(!streaming_list_refused(&streaming, &status(500)));
        assert!(!streaming_list_refused(&streaming, &status(410)));
        // Already listing and watching: nothing to fall back to.
        assert!(!streaming_list_refused(
            &watcher::Config::default(),
            &status(422)
        ));
    }

    #[test]
    fn informed_objects_lose_their_managed_fields_only() {
        let mut p = core::Pod::default();
        p.metadata.name = Some("a".into());
        p.metadata.labels = Some([("app".to_string(), "x".to_string())].into());
        p.metadata.managed_fields = Some(vec![Default::default()]);
        let t = trimmed(p);
        assert!(t.metadata.managed_fields.is_none());
        assert_eq!(t.metadata.name.as_deref(), Some("a"));
        assert_eq!(t.metadata.labels.map(|l| l.len()), Some(1));
    }
}
