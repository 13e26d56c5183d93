//! The pod lifecycle event generator (upstream's `pkg/kubelet/pleg`,
//! its generic PLEG): once a second the runtime lists everything it holds
//! in one call per kind ([`Runtime::relist`]), and the worker of every pod
//! whose sandboxes or containers appeared, disappeared or changed state is
//! woken to sync at once.
//!
//! So a container that exits is seen within a second whatever the number
//! of pods, and a pod whose containers run undisturbed costs nothing
//! between its workers' periodic resyncs: the node's runtime load is two
//! list calls a second, not a sync of every pod.
//!
//! Upstream's metrics: `kubelet_pleg_relist_duration_seconds`,
//! `kubelet_pleg_relist_interval_seconds` and
//! `kubelet_pleg_last_seen_seconds` (see [`crate::metrics`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::metrics::Metrics;
use crate::runtime::{Relisted, Runtime};

/// Upstream's `genericPlegRelistPeriod`.
pub const RELIST_PERIOD: Duration = Duration::from_secs(1);

/// Upstream's `genericPlegRelistThreshold`: a relist older than this makes
/// the node not ready.
pub const RELIST_THRESHOLD: Duration = Duration::from_secs(180);

/// Why the relist is not healthy, in upstream's words (the node's Ready
/// condition says `PLEG is not healthy: …`), or `None`. `last_seen`: when
/// the last relist completed, if one has; `running_for`: how long the
/// kubelet has run (before a first relist, the node is given the
/// threshold, where upstream's is not ready until then).
pub fn unhealthy(
    last_seen: Option<std::time::SystemTime>,
    running_for: Duration,
    now: std::time::SystemTime,
) -> Option<String> {
    let why = match last_seen {
        None if running_for > RELIST_THRESHOLD => "pleg has yet to be successful".to_string(),
        None => return None,
        Some(t) => {
            let elapsed = now.duration_since(t).unwrap_or_default();
            if elapsed <= RELIST_THRESHOLD {
                return None;
            }
            format!(
                "pleg was last seen active {} ago; threshold is {}",
                rkube_util::duration::format(elapsed),
                rkube_util::duration::format(RELIST_THRESHOLD)
            )
        }
    };
    Some(format!("PLEG is not healthy: {why}"))
}

/// The pods whose listing differs between two relists (appeared,
/// disappeared, or a sandbox or container added, removed or in another
/// state), sorted.
pub fn changed(old: &Relisted, new: &Relisted) -> Vec<String> {
    let mut out: Vec<String> = new
        .iter()
        .filter(|(uid, now)| old.get(*uid) != Some(*now))
        .map(|(uid, _)| uid.clone())
        .chain(old.keys().filter(|uid| !new.contains_key(*uid)).cloned())
        .collect();
    out.sort_unstable();
    out
}

/// Relists every [`RELIST_PERIOD`] until the kubelet stops. Returns at once
/// for a runtime that is not relisted or wakes no worker (the sim: the
/// kubelet does not start it there).
pub async fn run(runtime: Arc<dyn Runtime>, metrics: Arc<Metrics>) {
    relist_every(runtime, metrics, RELIST_PERIOD).await
}

async fn relist_every(runtime: Arc<dyn Runtime>, metrics: Arc<Metrics>, period: Duration) {
    let Some(wakeups) = runtime.wakeups() else {
        return;
    };
    let mut last: Option<Relisted> = None;
    let mut failing = false;
    let mut previous_start: Option<Instant> = None;
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let start = Instant::now();
        if let Some(p) = previous_start.replace(start) {
            metrics.pleg_relist_interval.observe(start - p);
        }
        let now = match runtime.relist().await {
            Ok(Some(now)) => now,
            Ok(None) => return,
            Err(e) => {
                // Upstream logs every failed relist; once per outage here.
                if !failing {
                    tracing::error!(error = %e, "GenericPLEG: Unable to retrieve pods");
                }
                failing = true;
                continue;
            }
        };
        if std::mem::take(&mut failing) {
            tracing::info!("GenericPLEG: relisting the runtime again");
        }
        metrics.pleg_relist_duration.observe(start.elapsed());
        metrics.pleg_seen();
        // The first listing only sets the baseline: every worker syncs
        // when it starts.
        if let Some(old) = &last {
            for uid in changed(old, &now) {
                if let Some(w) = wakeups.get(&uid) {
                    w.notify_one();
                }
            }
        }
        last = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listing(pods: &[(&str, &[(&str, i32)])]) -> Relisted {
        pods.iter()
            .map(|(uid, xs)| {
                let xs = xs.iter().map(|(id, s)| (id.to_string(), *s)).collect();
                (uid.to_string(), xs)
            })
            .collect()
    }

    #[test]
    fn the_relist_is_unhealthy_past_three_minutes_in_upstreams_words() {
        let t0 = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let at = |s: f64| t0 + Duration::from_secs_f64(s);
        assert_eq!(
            unhealthy(Some(t0), Duration::from_secs(500), at(180.0)),
            None
        );
        assert_eq!(
            unhealthy(Some(t0), Duration::from_secs(500), at(181.5)).as_deref(),
            Some("PLEG is not healthy: pleg was last seen active 3m1.5s ago; threshold is 3m0s")
        );
        assert_eq!(unhealthy(None, Duration::from_secs(10), t0), None);
        assert_eq!(
            unhealthy(None, Duration::from_secs(181), t0).as_deref(),
            Some("PLEG is not healthy: pleg has yet to be successful")
        );
    }

    #[test]
    fn only_pods_whose_listing_differs_are_woken() {
        let old = listing(&[
            ("same", &[("sb1", 0), ("c1", 1)]),
            ("exited", &[("sb2", 0), ("c2", 1)]),
            ("restarted", &[("sb3", 0), ("c3", 2)]),
            ("gone", &[("sb4", 1)]),
        ]);
        let new = listing(&[
            ("same", &[("sb1", 0), ("c1", 1)]),
            ("exited", &[("sb2", 0), ("c2", 2)]),
            ("restarted", &[("sb3", 0), ("c3", 2), ("c3b", 1)]),
            ("new", &[("sb5", 0)]),
        ]);
        assert_eq!(changed(&old, &new), ["exited", "gone", "new", "restarted"]);
        assert!(changed(&new, &new).is_empty());
        assert!(changed(&Relisted::new(), &Relisted::new()).is_empty());
    }

    use crate::runtime::{PodObservation, RuntimeError, RuntimeVersion};
    use crate::BoxFuture;
    use k8s_openapi::api::core::v1::Pod;

    /// A runtime whose listing a test sets, with wake-ups; it runs no pod.
    struct Listed {
        now: std::sync::Mutex<Result<Relisted, String>>,
        wakeups: Arc<crate::runtime::wake::Wakeups>,
    }

    fn none<'a, T: Send + 'a>() -> BoxFuture<'a, Result<T, RuntimeError>> {
        Box::pin(async { Err(RuntimeError("runs no pod".into())) })
    }

    impl Runtime for Listed {
        fn version(&self) -> BoxFuture<'_, Result<RuntimeVersion, RuntimeError>> {
            none()
        }
        fn sync_pod<'a>(
            &'a self,
            _: &'a Pod,
        ) -> BoxFuture<'a, Result<PodObservation, RuntimeError>> {
            none()
        }
        fn kill_pod<'a>(
            &'a self,
            _: &'a Pod,
            _: Duration,
        ) -> BoxFuture<'a, Result<PodObservation, RuntimeError>> {
            none()
        }
        fn remove_pod<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<(), RuntimeError>> {
            none()
        }
        fn list_pods(&self) -> BoxFuture<'_, Result<Vec<String>, RuntimeError>> {
            none()
        }
        fn wakeups(&self) -> Option<Arc<crate::runtime::wake::Wakeups>> {
            Some(self.wakeups.clone())
        }
        fn relist(&self) -> BoxFuture<'_, Result<Option<Relisted>, RuntimeError>> {
            let now = self.now.lock().unwrap().clone();
            Box::pin(async move { now.map(Some).map_err(RuntimeError) })
        }
    }

    #[tokio::test]
    async fn a_change_wakes_its_worker_within_a_period_and_a_failure_skips_a_relist() {
        let wakeups = Arc::new(crate::runtime::wake::Wakeups::default());
        let rt = Arc::new(Listed {
            now: std::sync::Mutex::new(Ok(listing(&[("a", &[("c", 1)]), ("b", &[("d", 1)])]))),
            wakeups: wakeups.clone(),
        });
        let (a, b) = (wakeups.register("a"), wakeups.register("b"));
        let metrics = Arc::new(Metrics::default());
        const PERIOD: Duration = Duration::from_millis(20);
        tokio::spawn(relist_every(rt.clone(), metrics.clone(), PERIOD));
        let quiet = |n: Arc<tokio::sync::Notify>| async move {
            tokio::time::timeout(PERIOD * 5, n.notified())
                .await
                .is_err()
        };
        // Nothing changes: nobody is woken.
        assert!(quiet(a.clone()).await);
        // The runtime fails, then shows a's container exited: a is woken
        // once the listing works again, b never.
        *rt.now.lock().unwrap() = Err("down".into());
        tokio::time::sleep(PERIOD * 3).await;
        *rt.now.lock().unwrap() = Ok(listing(&[("a", &[("c", 2)]), ("b", &[("d", 1)])]));
        tokio::time::timeout(Duration::from_secs(10), a.notified())
            .await
            .expect("a woken");
        assert!(quiet(b).await);
        let text = metrics.render();
        assert!(
            text.contains("kubelet_pleg_relist_duration_seconds_count "),
            "{text}"
        );
        assert!(
            text.contains("# TYPE kubelet_pleg_last_seen_seconds gauge\n"),
            "{text}"
        );
    }
}
