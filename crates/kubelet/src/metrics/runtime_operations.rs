//! Upstream's `kubelet_runtime_operations_total`,
//! `kubelet_runtime_operations_duration_seconds` and
//! `kubelet_runtime_operations_errors_total`: every CRI call the kubelet
//! makes, by `operation_type` (upstream's names, from
//! [`rkube_cri::observe`]).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use crate::histogram::Histogram;

/// Upstream's `ExponentialBuckets(.005, 2.5, 14)`, computed as Go's client
/// computes them (each the one before times 2.5).
const BUCKETS: [f64; 14] = {
    let mut b = [0.0; 14];
    let mut v = 0.005;
    let mut i = 0;
    while i < b.len() {
        b[i] = v;
        v *= 2.5;
        i += 1;
    }
    b
};

/// One operation's counts.
#[derive(Debug)]
struct Operation {
    errors: u64,
    duration: Histogram,
}

/// The calls seen so far, by operation.
#[derive(Debug, Default)]
pub struct RuntimeOperations {
    by_operation: Mutex<BTreeMap<&'static str, Operation>>,
}

impl rkube_cri::observe::Observer for RuntimeOperations {
    fn observe(&self, operation: &'static str, elapsed: Duration, failed: bool) {
        let mut g = self.by_operation.lock().unwrap_or_else(|e| e.into_inner());
        let op = g.entry(operation).or_insert_with(|| Operation {
            errors: 0,
            duration: Histogram::new(&BUCKETS),
        });
        op.duration.observe(elapsed);
        op.errors += u64::from(failed);
    }
}

impl RuntimeOperations {
    /// Calls of `operation` so far.
    pub fn count(&self, operation: &str) -> u64 {
        let g = self.by_operation.lock().unwrap_or_else(|e| e.into_inner());
        g.get(operation).map_or(0, |op| op.duration.count())
    }

    /// The three families as Go's client writes them (nothing before the
    /// first call; an error counter only for operations that failed).
    pub fn render(&self, out: &mut String) {
        let g = self.by_operation.lock().unwrap_or_else(|e| e.into_inner());
        if g.is_empty() {
            return;
        }
        let name = "kubelet_runtime_operations_duration_seconds";
        out.push_str(&format!("# HELP {name} [ALPHA] Duration in seconds of runtime operations. Broken down by operation type.\n# TYPE {name} histogram\n"));
        for (op, o) in g.iter() {
            o.duration
                .render(name, &format!("operation_type=\"{op}\","), out);
        }
        if g.values().any(|o| o.errors > 0) {
            let name = "kubelet_runtime_operations_errors_total";
            out.push_str(&format!("# HELP {name} [ALPHA] Cumulative number of runtime operation errors by operation type.\n# TYPE {name} counter\n"));
            for (op, o) in g.iter().filter(|(_, o)| o.errors > 0) {
                out.push_str(&format!("{name}{{operation_type=\"{op}\"}} {}\n", o.errors));
            }
        }
        let name = "kubelet_runtime_operations_total";
        out.push_str(&format!("# HELP {name} [ALPHA] Cumulative number of runtime operations by operation type.\n# TYPE {name} counter\n"));
        for (op, o) in g.iter() {
            out.push_str(&format!(
                "{name}{{operation_type=\"{op}\"}} {}\n",
                o.duration.count()
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rkube_cri::observe::Observer;

    #[test]
    fn buckets_are_upstreams() {
        assert_eq!(BUCKETS[0], 0.005);
        assert_eq!(BUCKETS[1], 0.0125);
        assert_eq!(BUCKETS[13], 745.0580596923828);
    }

    #[test]
    fn calls_errors_and_durations_by_operation() {
        let ops = RuntimeOperations::default();
        let mut empty = String::new();
        ops.render(&mut empty);
        assert_eq!(empty, "");
        ops.observe("run_podsandbox", Duration::from_millis(300), false);
        ops.observe("container_status", Duration::from_millis(2), false);
        ops.observe("container_status", Duration::from_millis(20), true);
        assert_eq!(ops.count("container_status"), 2);
        assert_eq!(ops.count("pull_image"), 0);
        let mut text = String::new();
        ops.render(&mut text);
        for want in [
            "kubelet_runtime_operations_total{operation_type=\"container_status\"} 2\n",
            "kubelet_runtime_operations_total{operation_type=\"run_podsandbox\"} 1\n",
            "kubelet_runtime_operations_errors_total{operation_type=\"container_status\"} 1\n",
            "kubelet_runtime_operations_duration_seconds_bucket{operation_type=\"container_status\",le=\"0.005\"} 1\n",
            "kubelet_runtime_operations_duration_seconds_bucket{operation_type=\"container_status\",le=\"0.03125\"} 2\n",
            "kubelet_runtime_operations_duration_seconds_bucket{operation_type=\"run_podsandbox\",le=\"0.1953125\"} 0\n",
            "kubelet_runtime_operations_duration_seconds_bucket{operation_type=\"run_podsandbox\",le=\"0.48828125\"} 1\n",
            "kubelet_runtime_operations_duration_seconds_count{operation_type=\"run_podsandbox\"} 1\n",
        ] {
            assert!(text.contains(want), "{want:?} missing from:\n{text}");
        }
        assert!(!text.contains("errors_total{operation_type=\"run_podsandbox\"}"));
        // Families in name order, as Go's client writes them.
        let d = text
            .find("# TYPE kubelet_runtime_operations_duration_seconds")
            .unwrap();
        let e = text
            .find("# TYPE kubelet_runtime_operations_errors_total")
            .unwrap();
        let t = text
            .find("# TYPE kubelet_runtime_operations_total")
            .unwrap();
        assert!(d < e && e < t, "{text}");
    }
}
