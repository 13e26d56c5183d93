//! `/metrics/probes`: upstream's prober metrics
//! (`pkg/kubelet/prober/prober_manager.go`): `prober_probe_total`
//! (counter by `probe_type`, `result` = `successful` | `failed` |
//! `unknown`, `container`, `pod`, `namespace`, `pod_uid`) and
//! `prober_probe_duration_seconds` (histogram by `probe_type`,
//! `container`, `pod`, `namespace`, of probes that succeeded or were
//! unknown; written as upstream's kubelet writes it, with only the
//! `+Inf` bucket). A container's series go when its probe workers stop.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::stats::prom::{Families, Kind};

/// Which container a probe belongs to.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct ProbeLabels {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub pod: String,
    /// The pod's UID.
    pub uid: String,
    /// The container's name.
    pub container: String,
}

/// A probe's result as the metric counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ProbeResult {
    /// Succeeded (or warned).
    Successful,
    /// Failed.
    Failed,
    /// Could not be run.
    Unknown,
}

impl ProbeResult {
    fn as_str(self) -> &'static str {
        match self {
            ProbeResult::Successful => "successful",
            ProbeResult::Failed => "failed",
            ProbeResult::Unknown => "unknown",
        }
    }
}

type Key = (ProbeLabels, &'static str);

/// The counters.
#[derive(Debug, Default)]
pub struct ProbeMetrics {
    results: Mutex<BTreeMap<(Key, ProbeResult), u64>>,
    durations: Mutex<BTreeMap<Key, (u64, f64)>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl ProbeMetrics {
    /// Records one probe of `kind` (`Liveness`, `Readiness`, `Startup`).
    pub fn observe(&self, labels: &ProbeLabels, kind: &'static str, r: ProbeResult, secs: f64) {
        let key = (labels.clone(), kind);
        *lock(&self.results).entry((key.clone(), r)).or_default() += 1;
        if r != ProbeResult::Failed {
            let mut d = lock(&self.durations);
            let e = d.entry(key).or_default();
            e.0 += 1;
            e.1 += secs;
        }
    }

    /// Drops the series of one container's probe of `kind`.
    pub fn forget(&self, labels: &ProbeLabels, kind: &'static str) {
        let key = (labels.clone(), kind);
        lock(&self.results).retain(|(k, _), _| *k != key);
        lock(&self.durations).remove(&key);
    }

    /// The exposition text (with `process_start_time_seconds`, as
    /// upstream's endpoint has it).
    pub fn render(&self, process_start: Option<f64>) -> String {
        let mut f = Families::default();
        f.family(
            "prober_probe_total",
            Kind::Counter,
            "[BETA] Cumulative number of a liveness, readiness or startup probe for a container by result.",
        );
        f.family(
            "prober_probe_duration_seconds",
            Kind::Histogram,
            "[ALPHA] Duration in seconds for a probe response.",
        );
        f.family(
            "process_start_time_seconds",
            Kind::Gauge,
            "[ALPHA] Start time of the process since unix epoch in seconds.",
        );
        for (((l, kind), r), n) in lock(&self.results).iter() {
            f.add(
                "prober_probe_total",
                &[
                    ("container", &l.container),
                    ("namespace", &l.namespace),
                    ("pod", &l.pod),
                    ("pod_uid", &l.uid),
                    ("probe_type", kind),
                    ("result", r.as_str()),
                ],
                *n as f64,
                None,
            );
        }
        for ((l, kind), (count, sum)) in lock(&self.durations).iter() {
            let labels = [
                ("container", l.container.as_str()),
                ("namespace", l.namespace.as_str()),
                ("pod", l.pod.as_str()),
                ("probe_type", kind),
            ];
            let mut bucket = labels.to_vec();
            bucket.push(("le", "+Inf"));
            let name = "prober_probe_duration_seconds";
            f.add_suffixed(name, "_bucket", &bucket, *count as f64, None);
            f.add_suffixed(name, "_sum", &labels, *sum, None);
            f.add_suffixed(name, "_count", &labels, *count as f64, None);
        }
        if let Some(t) = process_start {
            f.add("process_start_time_seconds", &[], t, None);
        }
        f.render()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_durations_as_upstream_writes_them() {
        let m = ProbeMetrics::default();
        let l = ProbeLabels {
            namespace: "kube-system".into(),
            pod: "coredns-1".into(),
            uid: "u-1".into(),
            container: "coredns".into(),
        };
        for _ in 0..3 {
            m.observe(&l, "Readiness", ProbeResult::Successful, 0.25);
        }
        m.observe(&l, "Readiness", ProbeResult::Failed, 9.0);
        m.observe(&l, "Liveness", ProbeResult::Successful, 0.5);
        let text = m.render(Some(1.5e9));
        let body: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            body,
            [
                "prober_probe_duration_seconds_bucket{container=\"coredns\",namespace=\"kube-system\",pod=\"coredns-1\",probe_type=\"Liveness\",le=\"+Inf\"} 1",
                "prober_probe_duration_seconds_sum{container=\"coredns\",namespace=\"kube-system\",pod=\"coredns-1\",probe_type=\"Liveness\"} 0.5",
                "prober_probe_duration_seconds_count{container=\"coredns\",namespace=\"kube-system\",pod=\"coredns-1\",probe_type=\"Liveness\"} 1",
                "prober_probe_duration_seconds_bucket{container=\"coredns\",namespace=\"kube-system\",pod=\"coredns-1\",probe_type=\"Readiness\",le=\"+Inf\"} 3",
                "prober_probe_duration_seconds_sum{container=\"coredns\",namespace=\"kube-system\",pod=\"coredns-1\",probe_type=\"Readiness\"} 0.75",
                "prober_probe_duration_seconds_count{container=\"coredns\",namespace=\"kube-system\",pod=\"coredns-1\",probe_type=\"Readiness\"} 3",
                "prober_probe_total{container=\"coredns\",namespace=\"kube-system\",pod=\"coredns-1\",pod_uid=\"u-1\",probe_type=\"Liveness\",result=\"successful\"} 1",
                "prober_probe_total{container=\"coredns\",namespace=\"kube-system\",pod=\"coredns-1\",pod_uid=\"u-1\",probe_type=\"Readiness\",result=\"failed\"} 1",
                "prober_probe_total{container=\"coredns\",namespace=\"kube-system\",pod=\"coredns-1\",pod_uid=\"u-1\",probe_type=\"Readiness\",result=\"successful\"} 3",
                "process_start_time_seconds 1.5e+09",
            ]
        );
        assert!(text.contains("# TYPE prober_probe_duration_seconds histogram\n"));
        m.forget(&l, "Readiness");
        let text = m.render(None);
        assert!(!text.contains("Readiness") && text.contains("Liveness"));
    }
}
