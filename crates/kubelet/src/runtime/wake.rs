//! Waking a pod's worker from outside its own timers: the prober, when a
//! probe's verdict changes (upstream's readiness, liveness and startup
//! managers' updates start a sync of the pod at once).
//!
//! Each worker registers its pod's uid while it runs; a wake for a pod
//! without a worker is dropped. A wake while the worker is busy is kept
//! (one permit), so the worker syncs once more when it is done.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// The registry of running workers' wake-ups.
#[derive(Debug, Default)]
pub struct Wakeups {
    workers: Mutex<HashMap<String, Arc<Notify>>>,
}

impl Wakeups {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Notify>>> {
        self.workers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The wake-up of pod `uid`'s worker, registered until
    /// [`Wakeups::unregister`].
    pub fn register(&self, uid: &str) -> Arc<Notify> {
        self.lock().entry(uid.to_string()).or_default().clone()
    }

    /// The worker of `uid` ended.
    pub fn unregister(&self, uid: &str) {
        self.lock().remove(uid);
    }

    /// The wake-up of `uid`'s worker, if one runs.
    pub fn get(&self, uid: &str) -> Option<Arc<Notify>> {
        self.lock().get(uid).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_wake_reaches_the_registered_worker_once() {
        let w = Wakeups::default();
        assert!(w.get("a").is_none());
        let n = w.register("a");
        // Woken while busy: the permit waits for the worker.
        w.get("a").unwrap().notify_one();
        tokio::time::timeout(Duration::from_secs(1), n.notified())
            .await
            .expect("the kept wake-up");
        assert!(
            tokio::time::timeout(Duration::from_millis(50), n.notified())
                .await
                .is_err()
        );
        w.unregister("a");
        assert!(w.get("a").is_none());
    }
}
