//! Prometheus histograms with fixed buckets, written as Go's client
//! writes them, and the bucket sets upstream's kubelet uses.

use std::sync::Mutex;
use std::time::Duration;

/// Upstream's `podStartupDurationBuckets` (seconds).
pub const POD_START_BUCKETS: [f64; 25] = [
    0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 20.0, 30.0, 45.0, 60.0, 120.0, 180.0, 240.0,
    300.0, 360.0, 480.0, 600.0, 900.0, 1200.0, 1800.0, 2700.0, 3600.0,
];

/// Prometheus' `DefBuckets` (seconds).
pub const DEFAULT_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// A histogram with fixed buckets: per-bucket counts (not cumulative),
/// the sum and the count.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    inner: Mutex<(Vec<u64>, f64, u64)>,
}

impl Histogram {
    /// An empty histogram with these bucket bounds.
    pub fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            inner: Mutex::new((vec![0; bounds.len()], 0.0, 0)),
        }
    }

    /// Records one observation.
    pub fn observe(&self, d: Duration) {
        let v = d.as_secs_f64();
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = self.bounds.iter().position(|b| v <= *b) {
            g.0[i] += 1;
        }
        g.1 += v;
        g.2 += 1;
    }

    /// The number of observations.
    pub fn count(&self) -> u64 {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).2
    }

    /// Its `_bucket`, `_sum` and `_count` lines, with `labels` (e.g.
    /// `operation_type="create",`) before `le`.
    pub fn render(&self, name: &str, labels: &str, out: &mut String) {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let mut cumulative = 0;
        for (b, n) in self.bounds.iter().zip(&g.0) {
            cumulative += n;
            out.push_str(&format!(
                "{name}_bucket{{{labels}le=\"{b}\"}} {cumulative}\n"
            ));
        }
        out.push_str(&format!("{name}_bucket{{{labels}le=\"+Inf\"}} {}\n", g.2));
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{}}}", labels.trim_end_matches(','))
        };
        out.push_str(&format!("{name}_sum{braces} {}\n", g.1));
        out.push_str(&format!("{name}_count{braces} {}\n", g.2));
    }
}
