//! Counters of the node agent, served as Prometheus text on `/metrics`
//! and logged periodically, and upstream's pod worker histograms under
//! their names and buckets: `kubelet_pod_start_duration_seconds` (from the
//! kubelet first seeing a pod to its first sync, and to its turning
//! Running) and `kubelet_pod_worker_duration_seconds` (one sync of a pod,
//! by `operation_type` create, update or sync), and the CRI calls
//! ([`runtime_operations`]).

pub mod runtime_operations;

use std::sync::atomic::{AtomicU64, Ordering};

pub use crate::histogram::Histogram;
use crate::histogram::{DEFAULT_BUCKETS, POD_START_BUCKETS};

/// What started one sync of a pod's worker (upstream's `SyncPodType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncKind {
    /// The pod's first sync.
    Create,
    /// After the pod object changed.
    Update,
    /// A timer or another event.
    Sync,
}

impl SyncKind {
    const ALL: [SyncKind; 3] = [SyncKind::Create, SyncKind::Sync, SyncKind::Update];

    fn as_str(self) -> &'static str {
        match self {
            SyncKind::Create => "create",
            SyncKind::Update => "update",
            SyncKind::Sync => "sync",
        }
    }
}

/// Process-wide counters.
#[derive(Debug)]
pub struct Metrics {
    /// Nodes registered.
    pub nodes_registered: AtomicU64,
    /// Successful lease renewals.
    pub lease_renewals: AtomicU64,
    /// Failed lease renewal requests (retried).
    pub lease_renewal_errors: AtomicU64,
    /// Renewals that came after the previous renewTime + leaseDuration: the
    /// lease had expired (the node would look dead).
    pub lease_renewals_missed: AtomicU64,
    /// Renewals that came later than the renew interval + a quarter of it.
    pub lease_renewals_late: AtomicU64,
    /// Largest gap between two renewals of one node, milliseconds.
    pub lease_max_gap_ms: AtomicU64,
    /// Node status PATCHes.
    pub node_status_patches: AtomicU64,
    /// Failed node status PATCHes.
    pub node_status_errors: AtomicU64,
    /// Pod status PATCHes.
    pub pod_status_patches: AtomicU64,
    /// Failed pod status PATCHes (retried).
    pub pod_status_errors: AtomicU64,
    /// Pods whose deletion was confirmed.
    pub pods_deleted: AtomicU64,
    /// Pods evicted by the eviction manager.
    pub pods_evicted: AtomicU64,
    /// `kubelet_pod_start_duration_seconds`.
    pub pod_start_duration: Histogram,
    /// `kubelet_pod_worker_duration_seconds` by [`SyncKind`].
    pod_worker_duration: [Histogram; 3],
    /// Every pod's startup timeline and the startup SLI histograms
    /// ([`crate::timeline`]).
    pub startup: std::sync::Arc<crate::timeline::Tracker>,
    /// `kubelet_pleg_relist_duration_seconds` ([`crate::pleg`]).
    pub pleg_relist_duration: Histogram,
    /// `kubelet_pleg_relist_interval_seconds`.
    pub pleg_relist_interval: Histogram,
    /// `kubelet_pleg_last_seen_seconds`: Unix time of the last relist, ms
    /// (0: never).
    pleg_last_seen_ms: AtomicU64,
    /// `kubelet_runtime_operations_*`: the CRI calls (the CRI client's
    /// observer).
    pub runtime_operations: std::sync::Arc<runtime_operations::RuntimeOperations>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            nodes_registered: AtomicU64::default(),
            lease_renewals: AtomicU64::default(),
            lease_renewal_errors: AtomicU64::default(),
            lease_renewals_missed: AtomicU64::default(),
            lease_renewals_late: AtomicU64::default(),
            lease_max_gap_ms: AtomicU64::default(),
            node_status_patches: AtomicU64::default(),
            node_status_errors: AtomicU64::default(),
            pod_status_patches: AtomicU64::default(),
            pod_status_errors: AtomicU64::default(),
            pods_deleted: AtomicU64::default(),
            pods_evicted: AtomicU64::default(),
            pod_start_duration: Histogram::new(&POD_START_BUCKETS),
            pod_worker_duration: SyncKind::ALL.map(|_| Histogram::new(&DEFAULT_BUCKETS)),
            startup: std::sync::Arc::default(),
            pleg_relist_duration: Histogram::new(&DEFAULT_BUCKETS),
            pleg_relist_interval: Histogram::new(&DEFAULT_BUCKETS),
            pleg_last_seen_ms: AtomicU64::default(),
            runtime_operations: std::sync::Arc::default(),
        }
    }
}

impl Metrics {
    /// The histogram of one kind of pod sync.
    pub fn pod_worker_duration(&self, kind: SyncKind) -> &Histogram {
        let i = SyncKind::ALL
            .iter()
            .position(|k| *k == kind)
            .expect("every kind is listed");
        &self.pod_worker_duration[i]
    }

    /// A relist completed now.
    pub fn pleg_seen(&self) {
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        self.pleg_last_seen_ms.store(ms, Ordering::Relaxed);
    }

    /// When the last relist completed, if one has.
    pub fn pleg_last_seen(&self) -> Option<std::time::SystemTime> {
        match self.pleg_last_seen_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms)),
        }
    }

    /// Records a successful renewal `gap` after the previous one.
    pub fn record_renewal(
        &self,
        gap: Option<std::time::Duration>,
        interval: std::time::Duration,
        lease: std::time::Duration,
    ) {
        self.lease_renewals.fetch_add(1, Ordering::Relaxed);
        if let Some(gap) = gap {
            self.lease_max_gap_ms
                .fetch_max(gap.as_millis() as u64, Ordering::Relaxed);
            if gap > lease {
                self.lease_renewals_missed.fetch_add(1, Ordering::Relaxed);
            }
            if gap > interval + interval / 4 {
                self.lease_renewals_late.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Prometheus text exposition.
    pub fn render(&self) -> String {
        let rows: [(&str, &str, &AtomicU64, &str); 12] = [
            (
                "rkube_kubelet_nodes_registered",
                "gauge",
                &self.nodes_registered,
                "Nodes registered by this process.",
            ),
            (
                "rkube_kubelet_lease_renewals_total",
                "counter",
                &self.lease_renewals,
                "Successful node lease renewals.",
            ),
            (
                "rkube_kubelet_lease_renewal_errors_total",
                "counter",
                &self.lease_renewal_errors,
                "Failed lease renewal requests.",
            ),
            (
                "rkube_kubelet_lease_renewals_missed_total",
                "counter",
                &self.lease_renewals_missed,
                "Renewals later than the previous renewal plus the lease duration.",
            ),
            (
                "rkube_kubelet_lease_renewals_late_total",
                "counter",
                &self.lease_renewals_late,
                "Renewals later than 1.25 renew intervals after the previous one.",
            ),
            (
                "rkube_kubelet_lease_renewal_max_gap_milliseconds",
                "gauge",
                &self.lease_max_gap_ms,
                "Largest gap between two renewals of one node.",
            ),
            (
                "rkube_kubelet_node_status_patches_total",
                "counter",
                &self.node_status_patches,
                "Node status PATCHes.",
            ),
            (
                "rkube_kubelet_node_status_errors_total",
                "counter",
                &self.node_status_errors,
                "Failed node status PATCHes.",
            ),
            (
                "rkube_kubelet_pod_status_patches_total",
                "counter",
                &self.pod_status_patches,
                "Pod status PATCHes.",
            ),
            (
                "rkube_kubelet_pod_status_errors_total",
                "counter",
                &self.pod_status_errors,
                "Failed pod status PATCHes.",
            ),
            (
                "rkube_kubelet_pods_deleted_total",
                "counter",
                &self.pods_deleted,
                "Pod deletions confirmed.",
            ),
            (
                "rkube_kubelet_evictions_total",
                "counter",
                &self.pods_evicted,
                "Pods evicted under node pressure.",
            ),
        ];
        let mut out = String::new();
        for (name, kind, v, help) in rows {
            out.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {}\n",
                v.load(Ordering::Relaxed)
            ));
        }
        // Upstream's families, as its component-base writes them (families
        // in name order, `[ALPHA]` in the help).
        self.startup.render_gauge(&mut out);
        self.render_pleg(&mut out);
        let name = "kubelet_pod_start_duration_seconds";
        out.push_str(&format!("# HELP {name} [ALPHA] Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run\n# TYPE {name} histogram\n"));
        self.pod_start_duration.render(name, "", &mut out);
        self.startup.render(&mut out);
        // A vector without series is not written (Go's client writes none).
        let name = "kubelet_pod_worker_duration_seconds";
        if self.pod_worker_duration.iter().any(|h| h.count() > 0) {
            out.push_str(&format!("# HELP {name} [ALPHA] Duration in seconds to sync a single pod. Broken down by operation type: create, update, or sync\n# TYPE {name} histogram\n"));
        }
        for (kind, h) in SyncKind::ALL.iter().zip(&self.pod_worker_duration) {
            if h.count() > 0 {
                h.render(
                    name,
                    &format!("operation_type=\"{}\",", kind.as_str()),
                    &mut out,
                );
            }
        }
        self.runtime_operations.render(&mut out);
        out
    }

    /// The PLEG's families (none before its first relist: the sim is not
    /// relisted).
    fn render_pleg(&self, out: &mut String) {
        let seen = self.pleg_last_seen_ms.load(Ordering::Relaxed);
        if seen == 0 {
            return;
        }
        let name = "kubelet_pleg_last_seen_seconds";
        out.push_str(&format!("# HELP {name} [ALPHA] Timestamp in seconds when PLEG was last seen active.\n# TYPE {name} gauge\n{name} {}\n", seen as f64 / 1000.0));
        let name = "kubelet_pleg_relist_duration_seconds";
        out.push_str(&format!("# HELP {name} [ALPHA] Duration in seconds for relisting pods in PLEG.\n# TYPE {name} histogram\n"));
        self.pleg_relist_duration.render(name, "", out);
        let name = "kubelet_pleg_relist_interval_seconds";
        out.push_str(&format!("# HELP {name} [ALPHA] Interval in seconds between relisting in PLEG.\n# TYPE {name} histogram\n"));
        self.pleg_relist_interval.render(name, "", out);
    }

    /// Reads a counter.
    pub fn get(v: &AtomicU64) -> u64 {
        v.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn missed_and_late() {
        let m = Metrics::default();
        let i = Duration::from_secs(10);
        let l = Duration::from_secs(40);
        m.record_renewal(None, i, l);
        m.record_renewal(Some(Duration::from_secs(11)), i, l);
        m.record_renewal(Some(Duration::from_secs(13)), i, l);
        m.record_renewal(Some(Duration::from_secs(41)), i, l);
        assert_eq!(Metrics::get(&m.lease_renewals), 4);
        assert_eq!(Metrics::get(&m.lease_renewals_late), 2);
        assert_eq!(Metrics::get(&m.lease_renewals_missed), 1);
        assert_eq!(Metrics::get(&m.lease_max_gap_ms), 41_000);
        assert!(m
            .render()
            .contains("rkube_kubelet_lease_renewals_missed_total 1\n"));
    }

    /// The histograms as Prometheus' Go client writes them: cumulative
    /// buckets with Go's number format, `+Inf`, `_sum`, `_count`, the
    /// worker's series by operation type once observed.
    #[test]
    fn pod_histograms() {
        let m = Metrics::default();
        m.pod_start_duration.observe(Duration::from_millis(200));
        m.pod_start_duration.observe(Duration::from_millis(1500));
        m.pod_start_duration.observe(Duration::from_secs(5000));
        m.pod_worker_duration(SyncKind::Create)
            .observe(Duration::from_millis(30));
        let text = m.render();
        for want in [
            "# TYPE kubelet_pod_start_duration_seconds histogram\n",
            "kubelet_pod_start_duration_seconds_bucket{le=\"0.5\"} 1\n",
            "kubelet_pod_start_duration_seconds_bucket{le=\"1\"} 1\n",
            "kubelet_pod_start_duration_seconds_bucket{le=\"2\"} 2\n",
            "kubelet_pod_start_duration_seconds_bucket{le=\"3600\"} 2\n",
            "kubelet_pod_start_duration_seconds_bucket{le=\"+Inf\"} 3\n",
            "kubelet_pod_start_duration_seconds_sum 5001.7\n",
            "kubelet_pod_start_duration_seconds_count 3\n",
            "kubelet_pod_worker_duration_seconds_bucket{operation_type=\"create\",le=\"0.025\"} 0\n",
            "kubelet_pod_worker_duration_seconds_bucket{operation_type=\"create\",le=\"0.05\"} 1\n",
            "kubelet_pod_worker_duration_seconds_count{operation_type=\"create\"} 1\n",
        ] {
            assert!(text.contains(want), "{want:?} missing from:\n{text}");
        }
        assert!(!text.contains("operation_type=\"sync\""), "{text}");
        let empty = Metrics::default().render();
        assert!(empty.contains("kubelet_pod_start_duration_seconds_count 0\n"));
        assert!(
            !empty.contains("kubelet_pod_worker_duration_seconds"),
            "{empty}"
        );
    }
}
