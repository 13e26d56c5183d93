//! Counters of the node agent, served as Prometheus text on `/metrics`
//! and logged periodically.

use std::sync::atomic::{AtomicU64, Ordering};

/// Process-wide counters.
#[derive(Debug, Default)]
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
}

impl Metrics {
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
        out
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
}
