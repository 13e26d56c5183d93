//! Events, recorded as client-go's events broadcaster does for
//! kube-scheduler: recording never waits. An event goes into a queue of
//! 1,000 (upstream's `maxQueuedEvents`) and is dropped when the queue is
//! full (`watch.DropIfChannelFull`); one task takes them out, waits for
//! the event client's rate limit and publishes them through kube-runtime's
//! recorder, one per profile (`reportingController` is the profile's
//! schedulerName, `reportingInstance` `<schedulerName>-<hostname>`), which
//! turns a repeat into the first Event's `series`.
//!
//! Before, a binding cycle waited on its thread for the event's token and
//! for the POST: under a burst of bindings hundreds of threads sat there.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, ResourceExt};
use tokio::sync::{mpsc, Semaphore};

use crate::ratelimit::RateLimiter;

/// Upstream's `maxQueuedEvents`.
pub const MAX_QUEUED: usize = 1000;

/// Most events being published at once (after their token).
const PUBLISHING: usize = 32;

/// One event to record.
#[derive(Debug)]
pub struct Pending {
    /// The profile's schedulerName.
    pub scheduler_name: String,
    /// The object the event is about.
    pub regarding: core::ObjectReference,
    /// The related object, if any (the preemptor of a victim).
    pub related: Option<core::ObjectReference>,
    /// `Normal` or `Warning`.
    pub warning: bool,
    /// Reason.
    pub reason: String,
    /// Action.
    pub action: String,
    /// Note.
    pub note: String,
}

/// The sending side, cheap to clone.
#[derive(Clone, Debug)]
pub struct EventQueue {
    tx: mpsc::Sender<Pending>,
    dropped: Arc<AtomicU64>,
}

impl EventQueue {
    /// A queue of `capacity` and its receiving end.
    pub fn new(capacity: usize) -> (Self, mpsc::Receiver<Pending>) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        (
            EventQueue {
                tx,
                dropped: Arc::default(),
            },
            rx,
        )
    }

    /// Queues an event; drops it when the queue is full (as upstream's
    /// broadcaster) or the recording task is gone.
    pub fn record(&self, ev: Pending) {
        if let Err(e) = self.tx.try_send(ev) {
            let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            let ev = match e {
                mpsc::error::TrySendError::Full(ev) | mpsc::error::TrySendError::Closed(ev) => ev,
            };
            // The first drop and then one in a thousand, not a flood.
            if n == 1 || n.is_multiple_of(1000) {
                tracing::warn!(
                    reason = %ev.reason,
                    object = %name_of(&ev.regarding),
                    dropped = n,
                    "unable to record event: too many queued events, dropped event"
                );
            }
        }
    }

    /// Events dropped so far.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

fn name_of(r: &core::ObjectReference) -> String {
    format!(
        "{}/{}",
        r.namespace.as_deref().unwrap_or(""),
        r.name.as_deref().unwrap_or("")
    )
}

/// The object reference an event about `pod` carries.
pub fn reference(pod: &core::Pod) -> core::ObjectReference {
    core::ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: pod.namespace(),
        name: Some(pod.name_any()),
        uid: pod.metadata.uid.clone(),
        resource_version: pod.metadata.resource_version.clone(),
        field_path: None,
    }
}

/// Publishes queued events until every sender is gone: each waits for a
/// token of `limiter`, then is published in a task of its own (at most
/// [`PUBLISHING`] at once, so a hung API server holds a bounded number).
pub async fn run(
    client: Client,
    hostname: String,
    limiter: Arc<RateLimiter>,
    mut rx: mpsc::Receiver<Pending>,
) {
    let mut recorders: HashMap<String, Recorder> = HashMap::new();
    let slots = Arc::new(Semaphore::new(PUBLISHING));
    while let Some(ev) = rx.recv().await {
        limiter.acquire().await;
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let recorder = recorders
            .entry(ev.scheduler_name.clone())
            .or_insert_with(|| {
                Recorder::new(
                    client.clone(),
                    Reporter {
                        controller: ev.scheduler_name.clone(),
                        instance: Some(format!("{}-{hostname}", ev.scheduler_name)),
                    },
                )
            })
            .clone();
        tokio::spawn(async move {
            let _slot = slot;
            let event = Event {
                type_: if ev.warning {
                    EventType::Warning
                } else {
                    EventType::Normal
                },
                reason: ev.reason.clone(),
                note: Some(ev.note),
                action: ev.action,
                secondary: ev.related,
            };
            if let Err(e) = recorder.publish(&event, &ev.regarding).await {
                tracing::warn!(pod = %name_of(&ev.regarding), reason = %ev.reason, error = %e, "could not record event");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(reason: &str) -> Pending {
        Pending {
            scheduler_name: "default-scheduler".into(),
            regarding: core::ObjectReference {
                namespace: Some("ns".into()),
                name: Some("p".into()),
                ..Default::default()
            },
            related: None,
            warning: false,
            reason: reason.into(),
            action: "Binding".into(),
            note: String::new(),
        }
    }

    #[test]
    fn recording_never_waits_and_drops_past_the_queue() {
        let (q, mut rx) = EventQueue::new(3);
        for i in 0..5 {
            q.record(pending(&format!("r{i}")));
        }
        assert_eq!(q.dropped(), 2);
        let kept: Vec<String> = std::iter::from_fn(|| rx.try_recv().ok())
            .map(|p| p.reason)
            .collect();
        assert_eq!(
            kept,
            ["r0", "r1", "r2"],
            "the first ones are kept, in order"
        );
        // Room again once taken out.
        q.record(pending("r5"));
        assert_eq!(rx.try_recv().unwrap().reason, "r5");
        assert_eq!(q.dropped(), 2);
    }

    #[test]
    fn a_closed_queue_drops() {
        let (q, rx) = EventQueue::new(3);
        drop(rx);
        q.record(pending("late"));
        assert_eq!(q.dropped(), 1);
    }
}
