//! Prometheus metrics under kube-scheduler's names and labels (v1.37's
//! `pkg/scheduler/metrics`), served on `/metrics` ([`crate::serve`]).
//!
//! Covered: `scheduler_schedule_attempts_total`,
//! `scheduler_scheduling_attempt_duration_seconds`,
//! `scheduler_scheduling_algorithm_duration_seconds`,
//! `scheduler_pending_pods`, `scheduler_queue_incoming_pods_total`,
//! `scheduler_pod_scheduling_attempts`,
//! `scheduler_framework_extension_point_duration_seconds`,
//! `scheduler_plugin_execution_duration_seconds` (10% of cycles sampled, as
//! upstream), `scheduler_preemption_attempts_total`,
//! `scheduler_preemption_victims`,
//! `scheduler_preemption_goroutines_duration_seconds`,
//! `scheduler_preemption_goroutines_execution_total`,
//! `scheduler_preemption_execution_duration_seconds`, `scheduler_cache_size`,
//! `scheduler_inflight_events`, `scheduler_goroutines{operation="binding"}`,
//! `scheduler_batch_attempts_total`, `scheduler_batch_cache_flushed_total`
//! and `leader_election_master_status`.

use std::sync::Mutex;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use rkube_framework::{MetricsRecorder, Status};

type Labels = Vec<(&'static str, String)>;

/// Builds histograms with fixed exponential buckets.
#[derive(Clone)]
pub struct Buckets {
    start: f64,
    factor: f64,
    count: u16,
}

impl MetricConstructor<Histogram> for Buckets {
    fn new_metric(&self) -> Histogram {
        Histogram::new(exponential_buckets(self.start, self.factor, self.count))
    }
}

const fn buckets(start: f64, factor: f64, count: u16) -> Buckets {
    Buckets {
        start,
        factor,
        count,
    }
}

type Histograms = Family<Labels, Histogram, Buckets>;

/// Where the queue's pods are, for `scheduler_pending_pods`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pending {
    /// activeQ.
    pub active: usize,
    /// backoffQ.
    pub backoff: usize,
    /// Unschedulable pool (not gated).
    pub unschedulable: usize,
    /// Rejected by PreEnqueue (scheduling gates).
    pub gated: usize,
}

/// The sizes sampled at each scrape: the queue's, the cache's and the
/// work in flight.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Gauges {
    /// `scheduler_pending_pods`.
    pub pending: Pending,
    /// `scheduler_cache_size{type="nodes"}`.
    pub nodes: usize,
    /// `scheduler_cache_size{type="pods"}`: pods the cache holds, assumed
    /// ones included.
    pub pods: usize,
    /// `scheduler_cache_size{type="assumed_pods"}`.
    pub assumed_pods: usize,
    /// `scheduler_inflight_events{event}`: the queue's recorded events by
    /// label, and `PodPopped` for the pods in flight.
    pub inflight_events: Vec<(String, usize)>,
    /// `scheduler_goroutines{operation="binding"}`: binding cycles running.
    pub binding: usize,
}

/// The scheduler's metrics.
pub struct Metrics {
    registry: Registry,
    schedule_attempts: Family<Labels, Counter>,
    attempt_duration: Histograms,
    algorithm_duration: Histogram,
    pending_pods: Family<Labels, Gauge>,
    incoming_pods: Family<Labels, Counter>,
    pod_scheduling_attempts: Histogram,
    extension_point: Histograms,
    plugin_execution: Histograms,
    preemption_attempts: Counter,
    preemption_victims: Histogram,
    preemption_goroutines_duration: Histograms,
    preemption_goroutines_total: Family<Labels, Counter>,
    preemption_execution_duration: Histograms,
    leader: Family<Labels, Gauge>,
    cache_size: Family<Labels, Gauge>,
    inflight_events: Family<Labels, Gauge>,
    goroutines: Family<Labels, Gauge>,
    batch_attempts: Family<Labels, Counter>,
    batch_flushed: Family<Labels, Counter>,
    // Registry encoding takes `&self`; the lock keeps scrapes whole.
    encode_lock: Mutex<()>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// All metrics registered, at zero.
    pub fn new() -> Self {
        let mut root = Registry::default();
        let reg = root.sub_registry_with_prefix("scheduler");
        let schedule_attempts = Family::<Labels, Counter>::default();
        reg.register(
            "schedule_attempts",
            "Number of attempts to schedule pods, by the result. 'unschedulable' means a pod could not be scheduled, while 'error' means an internal scheduler problem.",
            schedule_attempts.clone(),
        );
        let attempt_duration = Histograms::new_with_constructor(buckets(0.001, 2.0, 15));
        reg.register(
            "scheduling_attempt_duration_seconds",
            "Scheduling attempt latency in seconds (scheduling algorithm + binding)",
            attempt_duration.clone(),
        );
        let algorithm_duration = Histogram::new(exponential_buckets(0.001, 2.0, 15));
        reg.register(
            "scheduling_algorithm_duration_seconds",
            "Scheduling algorithm latency in seconds",
            algorithm_duration.clone(),
        );
        let pending_pods = Family::<Labels, Gauge>::default();
        reg.register(
            "pending_pods",
            "Number of pending pods, by the queue type. 'active' means number of pods in activeQ; 'backoff' means number of pods in backoffQ; 'unschedulable' means number of pods in unschedulablePods that the scheduler attempted to schedule and failed; 'gated' is the number of unschedulable pods that the scheduler never attempted to schedule because they are gated.",
            pending_pods.clone(),
        );
        let incoming_pods = Family::<Labels, Counter>::default();
        reg.register(
            "queue_incoming_pods",
            "Number of pods added to scheduling queues by event and queue type.",
            incoming_pods.clone(),
        );
        let pod_scheduling_attempts = Histogram::new(exponential_buckets(1.0, 2.0, 5));
        reg.register(
            "pod_scheduling_attempts",
            "Number of attempts to successfully schedule a pod.",
            pod_scheduling_attempts.clone(),
        );
        let extension_point = Histograms::new_with_constructor(buckets(0.0001, 2.0, 12));
        reg.register(
            "framework_extension_point_duration_seconds",
            "Latency for running all plugins of a specific extension point.",
            extension_point.clone(),
        );
        let plugin_execution = Histograms::new_with_constructor(buckets(0.00001, 1.5, 20));
        reg.register(
            "plugin_execution_duration_seconds",
            "Duration for running a plugin at a specific extension point.",
            plugin_execution.clone(),
        );
        let preemption_attempts = Counter::default();
        reg.register(
            "preemption_attempts",
            "Total preemption attempts in the cluster till now",
            preemption_attempts.clone(),
        );
        let preemption_victims = Histogram::new(exponential_buckets(1.0, 2.0, 7));
        reg.register(
            "preemption_victims",
            "Number of selected preemption victims",
            preemption_victims.clone(),
        );
        let preemption_goroutines_duration =
            Histograms::new_with_constructor(buckets(0.01, 2.0, 20));
        reg.register(
            "preemption_goroutines_duration_seconds",
            "Duration in seconds for running goroutines for the preemption.",
            preemption_goroutines_duration.clone(),
        );
        let preemption_goroutines_total = Family::<Labels, Counter>::default();
        reg.register(
            "preemption_goroutines_execution",
            "Number of preemption goroutines executed.",
            preemption_goroutines_total.clone(),
        );
        let preemption_execution_duration =
            Histograms::new_with_constructor(buckets(0.001, 2.0, 16));
        reg.register(
            "preemption_execution_duration_seconds",
            "Duration in seconds for preempting the target preemption victims. With async preemption enabled, preemption execution does not block the scheduling of other pods.",
            preemption_execution_duration.clone(),
        );
        let cache_size = Family::<Labels, Gauge>::default();
        reg.register(
            "cache_size",
            "Number of nodes, pods, and assumed (bound) pods in the scheduler cache.",
            cache_size.clone(),
        );
        let inflight_events = Family::<Labels, Gauge>::default();
        reg.register(
            "inflight_events",
            "Number of events currently tracked in the scheduling queue.",
            inflight_events.clone(),
        );
        let goroutines = Family::<Labels, Gauge>::default();
        reg.register(
            "goroutines",
            "Number of running goroutines split by the work they do such as binding.",
            goroutines.clone(),
        );
        let batch_attempts = Family::<Labels, Counter>::default();
        reg.register(
            "batch_attempts",
            "Counts of results when we try to batch a pod.",
            batch_attempts.clone(),
        );
        let batch_flushed = Family::<Labels, Counter>::default();
        reg.register(
            "batch_cache_flushed",
            "Counts of cache flushes by reason.",
            batch_flushed.clone(),
        );
        let leader = Family::<Labels, Gauge>::default();
        root.register(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease.",
            leader.clone(),
        );
        Metrics {
            registry: root,
            schedule_attempts,
            attempt_duration,
            algorithm_duration,
            pending_pods,
            incoming_pods,
            pod_scheduling_attempts,
            extension_point,
            plugin_execution,
            preemption_attempts,
            preemption_victims,
            preemption_goroutines_duration,
            preemption_goroutines_total,
            preemption_execution_duration,
            leader,
            cache_size,
            inflight_events,
            goroutines,
            batch_attempts,
            batch_flushed,
            encode_lock: Mutex::new(()),
        }
    }

    /// One scheduling attempt ended with `result` (`scheduled`,
    /// `unschedulable` or `error`) after `seconds`.
    pub fn attempt(&self, profile: &str, result: &str, seconds: f64) {
        let labels = vec![
            ("result", result.to_string()),
            ("profile", profile.to_string()),
        ];
        self.schedule_attempts.get_or_create(&labels).inc();
        self.attempt_duration
            .get_or_create(&labels)
            .observe(seconds);
    }

    /// A pod entered `queue` (`active`, `backoff` or `unschedulable`)
    /// because of `event` (a cluster event's label, `ScheduleAttemptFailure`,
    /// `BackoffComplete`, `UnschedulableTimeout`, ...).
    pub fn incoming_pods(&self, queue: &str, event: &str) {
        self.incoming_pods
            .get_or_create(&vec![
                ("queue", queue.to_string()),
                ("event", event.to_string()),
            ])
            .inc();
    }

    /// How many pods entered `queue` because of `event` so far.
    pub fn incoming_pods_count(&self, queue: &str, event: &str) -> u64 {
        self.incoming_pods
            .get_or_create(&vec![
                ("queue", queue.to_string()),
                ("event", event.to_string()),
            ])
            .get()
    }

    /// The scheduling algorithm (filter + score) took `seconds`.
    pub fn algorithm(&self, seconds: f64) {
        self.algorithm_duration.observe(seconds);
    }

    /// A pod was bound after `attempts` attempts.
    pub fn scheduled_after(&self, attempts: u32) {
        self.pod_scheduling_attempts.observe(f64::from(attempts));
    }

    /// A preemption attempt choosing `victims` victims.
    pub fn preemption(&self, victims: usize) {
        self.preemption_attempts.inc();
        if victims > 0 {
            self.preemption_victims.observe(victims as f64);
        }
    }

    /// An asynchronous preemption ended (`result`: `success` or `error`)
    /// after `seconds`.
    pub fn preemption_executed(&self, result: &str, seconds: f64) {
        let result = vec![("result", result.to_string())];
        self.preemption_goroutines_duration
            .get_or_create(&result)
            .observe(seconds);
        self.preemption_goroutines_total
            .get_or_create(&result)
            .inc();
        let mut labels = vec![("preemptor", "pod".to_string())];
        labels.extend(result);
        self.preemption_execution_duration
            .get_or_create(&labels)
            .observe(seconds);
    }

    /// An extension point run by the live scheduler itself (Reserve,
    /// Permit, PreBind, Bind, PostBind).
    pub fn point(&self, profile: &str, point: &'static str, status: &str, seconds: f64) {
        self.extension_point
            .get_or_create(&vec![
                ("extension_point", point.to_string()),
                ("status", status.to_string()),
                ("profile", profile.to_string()),
            ])
            .observe(seconds);
    }

    /// Sets `leader_election_master_status{name}`.
    pub fn set_leader(&self, name: &str, leading: bool) {
        self.leader
            .get_or_create(&vec![("name", name.to_string())])
            .set(i64::from(leading));
    }

    /// The Prometheus text exposition of every metric, with the current
    /// sizes.
    pub fn render(&self, g: &Gauges) -> String {
        let _guard = self.encode_lock.lock().unwrap_or_else(|e| e.into_inner());
        let set = |family: &Family<Labels, Gauge>, label: &'static str, value: &str, n: usize| {
            family
                .get_or_create(&vec![(label, value.to_string())])
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        };
        let p = &g.pending;
        for (queue, n) in [
            ("active", p.active),
            ("backoff", p.backoff),
            ("unschedulable", p.unschedulable),
            ("gated", p.gated),
        ] {
            set(&self.pending_pods, "queue", queue, n);
        }
        for (kind, n) in [
            ("nodes", g.nodes),
            ("pods", g.pods),
            ("assumed_pods", g.assumed_pods),
        ] {
            set(&self.cache_size, "type", kind, n);
        }
        // Only the labels tracked now (the queue always reports
        // `PodPopped`, zero or not).
        self.inflight_events.clear();
        for (event, n) in &g.inflight_events {
            set(&self.inflight_events, "event", event, *n);
        }
        set(&self.goroutines, "operation", "binding", g.binding);
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

impl MetricsRecorder for Metrics {
    fn extension_point(&self, profile: &str, point: &'static str, status: &Status, seconds: f64) {
        self.point(profile, point, status.code.as_str(), seconds);
    }

    fn plugin(&self, plugin: &'static str, point: &'static str, status: &Status, seconds: f64) {
        self.plugin_execution
            .get_or_create(&vec![
                ("plugin", plugin.to_string()),
                ("extension_point", point.to_string()),
                ("status", status.code.as_str().to_string()),
            ])
            .observe(seconds);
    }

    fn batch_attempt(&self, profile: &str, result: &'static str) {
        self.batch_attempts
            .get_or_create(&vec![
                ("profile", profile.to_string()),
                ("result", result.to_string()),
            ])
            .inc();
    }

    fn batch_flushed(&self, profile: &str, reason: &'static str) {
        self.batch_flushed
            .get_or_create(&vec![
                ("profile", profile.to_string()),
                ("reason", reason.to_string()),
            ])
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_upstream_names_and_labels() {
        let m = Metrics::new();
        m.attempt("default-scheduler", "scheduled", 0.002);
        m.attempt("default-scheduler", "scheduled", 0.003);
        m.attempt("default-scheduler", "unschedulable", 0.004);
        m.scheduled_after(1);
        m.preemption(2);
        m.set_leader("kube-scheduler", true);
        m.extension_point("default-scheduler", "PreFilter", &Status::success(), 0.0001);
        m.plugin("NodeResourcesFit", "Filter", &Status::success(), 0.00002);
        m.incoming_pods("active", "NodeAdd");
        m.incoming_pods("active", "NodeAdd");
        m.incoming_pods("unschedulable", "ScheduleAttemptFailure");
        m.batch_attempt("default-scheduler", "no_hint");
        m.batch_flushed("default-scheduler", "pod_not_batchable");
        let text = m.render(&Gauges {
            pending: Pending {
                active: 3,
                backoff: 1,
                unschedulable: 2,
                gated: 0,
            },
            nodes: 5,
            pods: 7,
            assumed_pods: 1,
            inflight_events: vec![("PodPopped".into(), 2), ("NodeAdd".into(), 3)],
            binding: 4,
        });
        for line in [
            "scheduler_schedule_attempts_total{result=\"scheduled\",profile=\"default-scheduler\"} 2",
            "scheduler_schedule_attempts_total{result=\"unschedulable\",profile=\"default-scheduler\"} 1",
            "scheduler_scheduling_attempt_duration_seconds_count{result=\"scheduled\",profile=\"default-scheduler\"} 2",
            "scheduler_pending_pods{queue=\"active\"} 3",
            "scheduler_pending_pods{queue=\"unschedulable\"} 2",
            "scheduler_queue_incoming_pods_total{queue=\"active\",event=\"NodeAdd\"} 2",
            "scheduler_queue_incoming_pods_total{queue=\"unschedulable\",event=\"ScheduleAttemptFailure\"} 1",
            "scheduler_pod_scheduling_attempts_count 1",
            "scheduler_preemption_attempts_total 1",
            "scheduler_preemption_victims_sum 2.0",
            "leader_election_master_status{name=\"kube-scheduler\"} 1",
            "scheduler_cache_size{type=\"nodes\"} 5",
            "scheduler_cache_size{type=\"pods\"} 7",
            "scheduler_cache_size{type=\"assumed_pods\"} 1",
            "scheduler_inflight_events{event=\"PodPopped\"} 2",
            "scheduler_inflight_events{event=\"NodeAdd\"} 3",
            "scheduler_goroutines{operation=\"binding\"} 4",
            "scheduler_batch_attempts_total{profile=\"default-scheduler\",result=\"no_hint\"} 1",
            "scheduler_batch_cache_flushed_total{profile=\"default-scheduler\",reason=\"pod_not_batchable\"} 1",
            "scheduler_framework_extension_point_duration_seconds_count{extension_point=\"PreFilter\",status=\"Success\",profile=\"default-scheduler\"} 1",
            "scheduler_plugin_execution_duration_seconds_count{plugin=\"NodeResourcesFit\",extension_point=\"Filter\",status=\"Success\"} 1",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
        // The smallest attempt-duration bucket is upstream's 1 ms.
        assert!(text.contains("scheduler_scheduling_attempt_duration_seconds_bucket{le=\"0.001\",result=\"scheduled\",profile=\"default-scheduler\"} 0"), "{text}");
    }
}
