//! `rkube scheduler`: rkube as a cluster's scheduler. It watches the API
//! server (kube-runtime watchers, relisting on 410 Gone), keeps the cluster
//! in a cache ([`state`]), queues the pending pods of its profiles
//! ([`queue`]), schedules them one at a time with the same framework and
//! plugins as `rkube simulate`, and binds them through `pods/binding` off the
//! scheduling loop ([`api`], rate-limited by [`ratelimit`]).
//!
//! What users see is what kube-scheduler v1.37 shows: `Scheduled` and
//! `FailedScheduling` events (events.k8s.io/v1), the pod's `PodScheduled`
//! condition, and Prometheus metrics under upstream's names ([`metrics`])
//! next to `/healthz`, `/livez` and `/readyz` on the HTTPS secure port
//! ([`serve`]). Replicas elect a leader on a Lease ([`leader`]); only the
//! leader schedules.
//!
//! Not yet: PVC binding for WaitForFirstConsumer claims (PreBind writes),
//! queueing hints per plugin.

// A daemon reports errors; it does not panic on them (tests may unwrap).
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

pub mod api;
pub mod leader;
pub mod metrics;
pub mod options;
pub mod queue;
pub mod ratelimit;
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
use k8s_openapi::api::storage::v1 as storage;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client, ResourceExt};
use rkube_config::KubeSchedulerConfiguration;
use rkube_framework::schedule::Outcome;
use rkube_framework::{Point, QueuedPodRef, Scheduler};
use rkube_sim::Profiles;
use serde::de::DeserializeOwned;

use crate::api::{truncate_message, Writer};
use crate::leader::{Elector, LeaderConfig};
use crate::metrics::Metrics;
use crate::options::Options;
use crate::queue::{Queue, QueuedPod};
use crate::state::{Change, State};

/// Number of kinds watched (see [`spawn_informers`]).
const WATCHED_KINDS: usize = 11;

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
    explain_scores: bool,
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

    /// The queue's sizes.
    pub fn pending(&self) -> metrics::Pending {
        self.lock().queue.pending()
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
        None => Ok(rkube_config::default_config()),
        Some(path) => {
            let text = rkube_util::file::read_text(path, rkube_util::file::CONFIG_MAX_BYTES)
                .with_context(|| format!("reading {}", path.display()))?;
            Ok(rkube_config::load_str(&path.display().to_string(), &text)?)
        }
    }
}

/// A client for the kubeconfig (`clientConnection.kubeconfig` wins over
/// `--kubeconfig`, as in kube-scheduler); in-cluster or `$KUBECONFIG`
/// without either.
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
    let mut profiles = Profiles::new(&cfg).map_err(|e| anyhow::anyhow!("{e}"))?;
    let metrics = Arc::new(Metrics::new());
    profiles.set_recorder(metrics.clone());
    let client = client(&opts, &cfg).await?;
    let queue = Queue::new(
        backoff_seconds(cfg.pod_initial_backoff_seconds, 1),
        backoff_seconds(cfg.pod_max_backoff_seconds, 10),
    );
    let shared = Arc::new(Shared {
        state: Mutex::new(State::new(queue)),
        profiles,
        metrics,
        wake: tokio::sync::Notify::new(),
        synced_kinds: AtomicUsize::new(0),
        synced: AtomicBool::new(false),
        in_flight: AtomicUsize::new(0),
        bound_or_failed: tokio::sync::Notify::new(),
        explain_scores: opts.explain_scores || opts.verbosity >= 10,
        hooks,
    });
    let writer = Writer {
        client: client.clone(),
        hostname: api::hostname(),
        limiter: Arc::new(ratelimit::RateLimiter::new(settings.qps, settings.burst)),
        event_limiter: Arc::new(ratelimit::RateLimiter::new(settings.qps, settings.burst)),
    };
    tracing::info!(
        qps = settings.qps,
        burst = settings.burst,
        "client rate limit for API writes"
    );
    let mut tasks = tokio::task::JoinSet::new();
    if opts.secure_port != 0 {
        let tls = serve::tls_config(
            opts.tls_cert_file.as_deref(),
            opts.tls_private_key_file.as_deref(),
            opts.cert_dir.as_deref(),
        )?;
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
    if let Some(lc) = &settings.leader {
        shared.metrics.set_leader(&lc.name, false);
        let mut elector = Elector::new(client.clone(), lc.clone());
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
    let mut scheduling = tokio::spawn(schedule_loop(
        shared.clone(),
        writer,
        Scheduler::new(seed, shared.profiles.percentage_of_nodes_to_score),
    ));
    let lost = async {
        match holding.as_mut() {
            Some(h) => {
                let _ = h.await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    let outcome = tokio::select! {
        _ = &mut shutdown => {
            tracing::info!("shutting down: no new pods are taken; finishing bindings in flight");
            Ok(())
        }
        _ = lost => Err(anyhow::anyhow!("leader election lost")),
        r = &mut scheduling => match r {
            Ok(()) => Err(anyhow::anyhow!("the scheduling loop ended unexpectedly")),
            Err(e) => Err(anyhow::anyhow!("the scheduling loop failed: {e}")),
        },
        Some(r) = tasks.join_next() => task_failed(r),
    };
    scheduling.abort();
    if let Some(h) = &holding {
        h.abort();
    }
    if outcome.is_ok() {
        shared.drain_bindings(Duration::from_secs(10)).await;
        if let Some(lc) = &settings.leader {
            let mut elector = Elector::new(client.clone(), lc.clone());
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
}

/// One informer: a kube-runtime watcher (list, then watch; relists after
/// 410 Gone or errors, with backoff) feeding the cache. A (re)list is
/// buffered and applied at once, so objects deleted while the watch was
/// down disappear from the cache.
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
    let mut stream = watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut buffer: Vec<K> = Vec::new();
    let mut synced = false;
    while let Some(ev) = stream.next().await {
        let change = match ev {
            Ok(Event::Init) => {
                buffer.clear();
                continue;
            }
            Ok(Event::InitApply(o)) => {
                buffer.push(o);
                continue;
            }
            Ok(Event::InitDone) => Change::Replace(std::mem::take(&mut buffer)),
            Ok(Event::Apply(o)) => Change::Apply(o),
            Ok(Event::Delete(o)) => Change::Delete(o),
            Err(e) => {
                tracing::warn!(%kind, error = %e, "watch failed; retrying");
                continue;
            }
        };
        let full = matches!(change, Change::Replace(_));
        {
            let mut state = shared.lock();
            handler(&mut state, &shared.profiles, change, Instant::now());
        }
        if full && synced {
            tracing::info!(%kind, "informer relisted");
        }
        if full && !synced {
            synced = true;
            tracing::debug!(%kind, "informer synced");
            if shared.synced_kinds.fetch_add(1, Ordering::SeqCst) + 1 == WATCHED_KINDS {
                shared.synced.store(true, Ordering::SeqCst);
                tracing::info!("caches synced; scheduling");
            }
        }
        shared.wake.notify_one();
    }
}

fn queue_less(profiles: &Profiles) -> impl Fn(&QueuedPod, &QueuedPod) -> bool + '_ {
    move |a, b| {
        let Some(fw) = profiles.for_pod(&a.pod) else {
            return false;
        };
        let qs = fw.queue_sort().as_queue_sort().expect("framework checked");
        qs.less(
            QueuedPodRef {
                pod: &a.pod,
                timestamp: a.timestamp,
            },
            QueuedPodRef {
                pod: &b.pod,
                timestamp: b.timestamp,
            },
        )
    }
}

/// Waits for the next pod to schedule.
async fn next_pod(shared: &Shared) -> QueuedPod {
    loop {
        let wait = {
            if shared.is_synced() {
                let mut state = shared.lock();
                let now = Instant::now();
                if let Some(qp) = state.queue.pop(now, queue_less(&shared.profiles)) {
                    return qp;
                }
                state
                    .queue
                    .next_wakeup()
                    .map(|t| t.saturating_duration_since(now))
                    .unwrap_or(Duration::from_secs(1))
                    .min(Duration::from_secs(1))
            } else {
                Duration::from_millis(100)
            }
        };
        tokio::select! {
            _ = shared.wake.notified() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// The scheduling loop (upstream's `ScheduleOne`, scheduling cycle only;
/// binding runs in its own task).
async fn schedule_loop(shared: Arc<Shared>, writer: Writer, mut scheduler: Scheduler) {
    // Test hook, debug builds only: panic after this many pods, so tests can
    // show that a dead loop ends the process.
    #[cfg(debug_assertions)]
    let mut panic_after = std::env::var("RKUBE_TEST_PANIC_SCHEDULE_LOOP_AFTER")
        .ok()
        .and_then(|v| v.parse::<u64>().ok());
    loop {
        let qp = next_pod(&shared).await;
        #[cfg(debug_assertions)]
        if let Some(n) = panic_after.as_mut() {
            if *n == 0 {
                panic!(
                    "RKUBE_TEST_PANIC_SCHEDULE_LOOP_AFTER: injected panic in the scheduling loop"
                );
            }
            *n -= 1;
        }
        let uid = qp.pod.uid.clone();
        // The latest version of the pod; the cycle runs on the cache's
        // snapshot (kept up to date incrementally, shared copy-on-write) and
        // the nominations, without holding the lock.
        let taken = {
            let mut state = shared.lock();
            let entry = state
                .pods
                .get(&uid)
                .filter(|e| State::is_ours_pending(&shared.profiles, &e.model))
                .cloned();
            match entry {
                Some(e) => {
                    state.ensure_snapshot();
                    let snapshot = state.cached_snapshot().expect("just built");
                    Some((e, snapshot, state.nominator.clone()))
                }
                None => {
                    state.queue.done(&uid);
                    None
                }
            }
        };
        let Some((entry, snapshot, nominator)) = taken else {
            continue;
        };
        let pod = entry.model.clone();
        let Some(fw) = shared.profiles.for_pod(&pod) else {
            shared.lock().queue.done(&uid);
            continue;
        };
        let started = Instant::now();
        let outcome = tokio::task::block_in_place(|| {
            scheduler.schedule_with(fw, &snapshot, &pod, &nominator)
        });
        if shared.explain_scores {
            log_explanation(fw, &snapshot, &pod, &outcome);
        }
        let chosen = match &outcome {
            Outcome::Scheduled { node, .. } => Some(snapshot.nodes[*node].name().to_string()),
            _ => None,
        };
        drop(snapshot);
        shared.metrics.algorithm(started.elapsed().as_secs_f64());
        let profile = fw.profile_name.clone();
        let preemption = fw
            .plugins(Point::PostFilter)
            .iter()
            .any(|p| p.name() == "DefaultPreemption");
        match outcome {
            Outcome::Scheduled {
                evaluated,
                feasible,
                ..
            } => {
                let node = chosen.unwrap_or_default();
                if let Some(f) = &shared.hooks.on_decision {
                    f(&Decision {
                        pod: pod.key(),
                        node: node.clone(),
                    });
                }
                {
                    let mut state = shared.lock();
                    let mut assumed = (*pod).clone();
                    assumed.node_name = node.clone();
                    assumed.nominated_node_name.clear();
                    state.assume(uid.clone(), Arc::new(assumed));
                    state.nominator.delete(&uid);
                }
                tracing::debug!(pod = %pod.key(), %node, evaluated, feasible, took = ?started.elapsed(), "assumed pod on node; binding");
                shared.in_flight.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(bind(
                    shared.clone(),
                    writer.clone(),
                    entry.raw.clone(),
                    node,
                    profile,
                    (started, qp.attempts),
                ));
            }
            Outcome::Unschedulable {
                message,
                nominated_node,
                victims,
                ..
            } => {
                tracing::debug!(pod = %pod.key(), %message, "unable to schedule pod; waiting");
                shared
                    .metrics
                    .attempt(&profile, "unschedulable", started.elapsed().as_secs_f64());
                if preemption {
                    shared.metrics.preemption(victims.len());
                }
                let target = nominated_node.clone().unwrap_or_default();
                let preempting = !victims.is_empty() && !target.is_empty();
                let (victim_pods, lower) = {
                    let mut state = shared.lock();
                    let latest = state
                        .pods
                        .get(&uid)
                        .map(|e| e.model.clone())
                        .unwrap_or_else(|| pod.clone());
                    let mut lower = Vec::new();
                    let mut victim_pods = Vec::new();
                    if preempting {
                        for v in &victims {
                            if let Some(e) = state.pods.get(&v.uid) {
                                victim_pods.push(e.raw.clone());
                            }
                        }
                        let lower_uids: Vec<String> = state
                            .nominator
                            .pods_for_node(&target)
                            .iter()
                            .filter(|p| p.priority < pod.priority && p.uid != uid)
                            .map(|p| p.uid.clone())
                            .collect();
                        for u in lower_uids {
                            state.nominator.delete(&u);
                            if let Some(e) = state.pods.get(&u) {
                                lower.push(e.raw.clone());
                            }
                        }
                    }
                    match &nominated_node {
                        Some(n) if n.is_empty() => state.nominator.delete(&uid),
                        Some(n) => {
                            let mut p = (*latest).clone();
                            p.nominated_node_name = n.clone();
                            state.nominator.add(Arc::new(p), n);
                        }
                        None => {}
                    }
                    state.queue.requeue_unschedulable(latest, Instant::now());
                    (victim_pods, lower)
                };
                let writer = writer.clone();
                let raw = entry.raw.clone();
                tokio::spawn(async move {
                    for v in &victim_pods {
                        if let Err(e) = writer.preempt(&profile, v, &raw, &target).await {
                            tracing::warn!(victim = %v.name_any(), error = %e, "preemption failed");
                        }
                    }
                    for p in &lower {
                        if let Err(e) = writer.clear_nomination(p).await {
                            tracing::warn!(pod = %p.name_any(), error = %e, "clearing nomination failed");
                        }
                    }
                    writer
                        .event(
                            &profile,
                            &raw,
                            None,
                            "Warning",
                            "FailedScheduling",
                            "Scheduling",
                            &truncate_message(&message),
                        )
                        .await;
                    if let Err(e) = writer
                        .update_pod_status(
                            &raw,
                            "Unschedulable",
                            &message,
                            nominated_node.as_deref(),
                        )
                        .await
                    {
                        tracing::warn!(pod = %raw.name_any(), error = %e, "updating pod status failed");
                    }
                });
            }
            Outcome::Error(s) => {
                let message = s.message();
                tracing::warn!(pod = %pod.key(), %message, "error scheduling pod; retrying");
                shared
                    .metrics
                    .attempt(&profile, "error", started.elapsed().as_secs_f64());
                {
                    let mut state = shared.lock();
                    let latest = state
                        .pods
                        .get(&uid)
                        .map(|e| e.model.clone())
                        .unwrap_or_else(|| pod.clone());
                    state.queue.requeue_backoff(latest, Instant::now());
                }
                tokio::spawn(report_error(
                    writer.clone(),
                    entry.raw.clone(),
                    profile,
                    message,
                ));
            }
        }
    }
}

async fn report_error(writer: Writer, raw: Arc<core::Pod>, profile: String, message: String) {
    writer
        .event(
            &profile,
            &raw,
            None,
            "Warning",
            "FailedScheduling",
            "Scheduling",
            &truncate_message(&message),
        )
        .await;
    if let Err(e) = writer
        .update_pod_status(&raw, "SchedulerError", &message, None)
        .await
    {
        tracing::warn!(pod = %raw.name_any(), error = %e, "updating pod status failed");
    }
}

/// Counts a binding as finished when dropped.
struct InFlight(Arc<Shared>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
        self.0.bound_or_failed.notify_waiters();
    }
}

/// The binding cycle: POST the Binding; on success a `Scheduled` event, on
/// failure forget the assumed pod and retry it after backoff. `attempt`:
/// when the scheduling attempt started and how many attempts the pod took.
async fn bind(
    shared: Arc<Shared>,
    writer: Writer,
    raw: Arc<core::Pod>,
    node: String,
    profile: String,
    attempt: (Instant, u32),
) {
    let _in_flight = InFlight(shared.clone());
    let uid = raw.metadata.uid.clone().unwrap_or_default();
    let key = format!("{}/{}", raw.namespace().unwrap_or_default(), raw.name_any());
    let t0 = Instant::now();
    let result = writer.bind(&raw, &node).await;
    let bind_status = if result.is_ok() { "Success" } else { "Error" };
    shared
        .metrics
        .point(&profile, "Bind", bind_status, t0.elapsed().as_secs_f64());
    match result {
        Ok(()) => {
            tracing::info!(pod = %key, %node, "successfully bound pod to node");
            shared.lock().queue.done(&uid);
            shared
                .metrics
                .attempt(&profile, "scheduled", attempt.0.elapsed().as_secs_f64());
            shared.metrics.scheduled_after(attempt.1.max(1));
            writer
                .event(
                    &profile,
                    &raw,
                    None,
                    "Normal",
                    "Scheduled",
                    "Binding",
                    &format!("Successfully assigned {key} to {node}"),
                )
                .await;
        }
        Err(e) => {
            let message = format!("running Bind plugin \"DefaultBinder\": {e}");
            tracing::warn!(pod = %key, %node, error = %e, "binding failed");
            shared
                .metrics
                .attempt(&profile, "error", attempt.0.elapsed().as_secs_f64());
            let retry = {
                let mut state = shared.lock();
                let now = Instant::now();
                state.forget(&uid);
                state.queue.move_pods(now, |_| true);
                match state
                    .pods
                    .get(&uid)
                    .filter(|e| State::is_ours_pending(&shared.profiles, &e.model))
                    .map(|e| e.model.clone())
                {
                    Some(p) => {
                        state.queue.requeue_backoff(p, now);
                        true
                    }
                    None => {
                        state.queue.done(&uid);
                        false
                    }
                }
            };
            shared.wake.notify_one();
            if retry {
                report_error(writer, raw, profile, message).await;
            }
        }
    }
}

/// Logs the per-plugin table `rkube explain` prints (`-v=10` or
/// `--explain-scores`).
fn log_explanation(
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
            let report = rkube_sim::PodExplanation::from_framework(pod, fw, snapshot, &e, selected);
            tracing::info!(pod = %pod.key(), "scores\n{}", rkube_sim::text::explanation(&report));
        }
        Err(s) => tracing::info!(pod = %pod.key(), status = %s.message(), "no score table"),
    }
}

/// `rkube scheduler ARGS...`: parses the flags, runs until SIGINT/SIGTERM.
/// Returns the process exit code (0 clean stop, 1 failure, 2 bad flags or
/// configuration).
pub fn main(args: Vec<String>) -> i32 {
    let opts = match options::parse(args) {
        Ok(o) => o,
        Err(options::ParseError::Help) => {
            print!("{}", options::USAGE);
            return 0;
        }
        Err(options::ParseError::Invalid(m)) => {
            eprintln!("error: {m}\n\n{}", options::USAGE);
            return 2;
        }
    };
    rkube_daemon::logging::init_tracing(opts.verbosity, &["rkube_scheduler", "rkube_framework"]);
    for w in &opts.warnings {
        tracing::warn!("{w}");
    }
    if let Err(e) = load_config(&opts).and_then(|cfg| settings(&opts, &cfg)) {
        eprintln!("error: {e:#}");
        return 2;
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the runtime: {e}");
            return 1;
        }
    };
    let result = rt.block_on(run(opts, rkube_daemon::signal::shutdown_signal()));
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e:#}");
            // Do not wait for blocking tasks (a dead scheduler must let go
            // at once: a standby is waiting for the lease).
            rt.shutdown_background();
            1
        }
    }
}
