//! Timing hooks for the live scheduler's Prometheus metrics
//! (`scheduler_framework_extension_point_duration_seconds`,
//! `scheduler_plugin_execution_duration_seconds`). The framework only
//! measures; what is done with a measurement is the recorder's business, so
//! the core stays free of I/O. With no recorder set, nothing is measured.

use std::sync::Arc;
use std::time::Instant;

use crate::status::Status;

/// Receives durations measured during scheduling cycles.
pub trait MetricsRecorder: Send + Sync {
    /// One run of an extension point (all its plugins) for a profile.
    fn extension_point(&self, profile: &str, point: &'static str, status: &Status, seconds: f64);
    /// One plugin call. Only made in sampled cycles (see
    /// [`crate::CycleState::record_plugin_metrics`]), as upstream samples
    /// 10% of cycles.
    fn plugin(&self, plugin: &'static str, point: &'static str, status: &Status, seconds: f64);
    /// One OpportunisticBatching attempt (`scheduler_batch_attempts_total`:
    /// `hint_used`, `hint_not_used`, `no_hint`).
    fn batch_attempt(&self, _profile: &str, _result: &'static str) {}
    /// A kept list found unusable (`scheduler_batch_cache_flushed_total`,
    /// by upstream's reason label).
    fn batch_flushed(&self, _profile: &str, _reason: &'static str) {}
}

/// A shared recorder.
pub type Recorder = Arc<dyn MetricsRecorder>;

/// Starts a timer when a recorder is present.
pub(crate) fn start(recorder: &Option<Recorder>) -> Option<Instant> {
    recorder.as_ref().map(|_| Instant::now())
}

/// Reports an extension point run started at `t0`.
pub(crate) fn point_done(
    recorder: &Option<Recorder>,
    t0: Option<Instant>,
    profile: &str,
    point: &'static str,
    status: &Status,
) {
    if let (Some(r), Some(t0)) = (recorder, t0) {
        r.extension_point(profile, point, status, t0.elapsed().as_secs_f64());
    }
}

/// Times one plugin call when the cycle is sampled.
pub(crate) fn time_plugin<T>(
    recorder: &Option<Recorder>,
    sampled: bool,
    plugin: &'static str,
    point: &'static str,
    status_of: impl Fn(&T) -> Status,
    f: impl FnOnce() -> T,
) -> T {
    match recorder {
        Some(r) if sampled => {
            let t0 = Instant::now();
            let out = f();
            r.plugin(plugin, point, &status_of(&out), t0.elapsed().as_secs_f64());
            out
        }
        _ => f(),
    }
}
