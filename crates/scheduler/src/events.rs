//! Events, recorded as client-go's `events.k8s.io/v1` broadcaster does for
//! kube-scheduler: recording never waits. An event goes into a queue of
//! 1,000 (upstream's `maxQueuedEvents`) and is dropped when the queue is
//! full (`watch.DropIfChannelFull`). One task takes events out as they
//! come, decides what to write ([`series`]: a repeat becomes the first
//! Event's `series`) and writes each in a task of its own, which waits for
//! the event client's rate limit (a token bucket of its own, as upstream's
//! separate event client has) and retries what the API server did not
//! answer, as upstream's goroutine per event does. `reportingController` is
//! the profile's schedulerName, `reportingInstance`
//! `<schedulerName>-<hostname>`.
//!
//! Before, a binding cycle waited on its thread for the event's token and
//! for the POST: under a burst of bindings hundreds of threads sat there.
//! Later, at most 32 events were written at once and the rate limit was
//! waited for before taking the next one out: at 1,000 bindings a second
//! the queue filled and most `Scheduled` events were dropped, where
//! upstream drops none.

mod series;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::events::v1 as ev1;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use tokio::sync::{mpsc, Semaphore};

use rkube_daemon::ratelimit::RateLimiter;
use series::Write;

/// Upstream's `maxQueuedEvents`.
pub const MAX_QUEUED: usize = 1000;

/// Most events being written (or waiting for their token, or to retry) at
/// once, so that a hung API server holds a bounded number. Upstream has no
/// bound; this one is far above what 5,000 QPS keeps in flight.
const PUBLISHING: usize = 8192;

/// Upstream's `maxTriesPerEvent`.
const MAX_TRIES: usize = 12;

/// Upstream's `defaultSleepDuration` between tries (jittered by up to 25 %).
const RETRY_AFTER: Duration = Duration::from_secs(10);

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

/// The `events.k8s.io/v1` Event upstream's recorder makes of `ev` at `now`.
fn make_event(ev: Pending, hostname: &str, now: Timestamp) -> ev1::Event {
    let namespace = ev
        .regarding
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".into());
    ev1::Event {
        metadata: ObjectMeta {
            name: Some(format!(
                "{}.{:x}",
                ev.regarding.name.as_deref().unwrap_or(""),
                now.as_nanosecond()
            )),
            namespace: Some(namespace),
            ..Default::default()
        },
        event_time: Some(MicroTime(now)),
        reporting_instance: Some(format!("{}-{hostname}", ev.scheduler_name)),
        reporting_controller: Some(ev.scheduler_name),
        action: Some(ev.action),
        reason: Some(ev.reason),
        regarding: Some(ev.regarding),
        related: ev.related,
        note: Some(ev.note),
        type_: Some(if ev.warning { "Warning" } else { "Normal" }.into()),
        ..Default::default()
    }
}

/// Publishes queued events until every sender is gone, and writes the
/// series again every [`series::REFRESH_EVERY`] and a last time when they
/// end ([`series::FINISH_EVERY`]).
pub async fn run(
    client: Client,
    hostname: String,
    limiter: Arc<RateLimiter>,
    mut rx: mpsc::Receiver<Pending>,
) {
    let cache = Mutex::new(series::Cache::default());
    let cache = || cache.lock().unwrap_or_else(|p| p.into_inner());
    let writer = Writer {
        client,
        limiter,
        slots: Arc::new(Semaphore::new(PUBLISHING)),
    };
    let mut finish = tokio::time::interval(series::FINISH_EVERY);
    let mut refresh = tokio::time::interval(series::REFRESH_EVERY);
    finish.tick().await;
    refresh.tick().await;
    loop {
        let writes: Vec<Write> = tokio::select! {
            ev = rx.recv() => {
                let Some(ev) = ev else { return };
                let now = Timestamp::now();
                cache().record(make_event(ev, &hostname, now), now).into_iter().collect()
            }
            _ = finish.tick() => cache().finish(Timestamp::now()).into_iter().map(Write::Series).collect(),
            _ = refresh.tick() => cache().refresh().into_iter().map(Write::Series).collect(),
        };
        for w in writes {
            if !writer.spawn(w).await {
                return;
            }
        }
    }
}

/// Creates the Event a new `ev` is, at once, after a token of `limiter`
/// (no queue, no series): what [`run`] writes for an event it has not seen.
/// For `rkube-bench bind --events`, which writes each pod's `Scheduled`
/// Event beside its binding.
pub async fn create_now(
    client: Client,
    hostname: &str,
    limiter: &RateLimiter,
    ev: Pending,
) -> kube::Result<()> {
    let event = make_event(ev, hostname, Timestamp::now());
    let ns = event.namespace().unwrap_or_else(|| "default".into());
    limiter.acquire().await;
    write_once(&Api::namespaced(client, &ns), &event, false)
        .await
        .map_err(|f| match f {
            Failed::Retry(e) | Failed::GiveUp(e) => e,
        })
}

/// Writes Events, each in a task of its own.
struct Writer {
    client: Client,
    limiter: Arc<RateLimiter>,
    slots: Arc<Semaphore>,
}

/// Why a write failed.
enum Failed {
    /// Worth another try later (the API server was not reached, or a
    /// series' Event was being created at the same moment).
    Retry(kube::Error),
    /// The API server refused it.
    GiveUp(kube::Error),
}

impl Writer {
    /// Starts writing `w` once a slot is free; false when the slots are
    /// gone (never, while the writer lives).
    async fn spawn(&self, w: Write) -> bool {
        let Ok(slot) = self.slots.clone().acquire_owned().await else {
            return false;
        };
        let (client, limiter) = (self.client.clone(), self.limiter.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let (event, is_series) = match w {
                Write::Create(e) => (e, false),
                Write::Series(e) => (e, true),
            };
            let ns = event.namespace().unwrap_or_else(|| "default".into());
            let api: Api<ev1::Event> = Api::namespaced(client, &ns);
            for attempt in 1..=MAX_TRIES {
                limiter.acquire().await;
                let e = match write_once(&api, &event, is_series).await {
                    Ok(()) => return,
                    Err(Failed::GiveUp(e)) => {
                        tracing::warn!(event = %event.name_any(), error = %e, "server rejected event (will not retry)");
                        return;
                    }
                    Err(Failed::Retry(e)) => e,
                };
                if attempt == MAX_TRIES {
                    tracing::warn!(event = %event.name_any(), error = %e, "unable to write event (retry limit exceeded)");
                    return;
                }
                tracing::warn!(event = %event.name_any(), error = %e, "unable to write event (may retry after sleeping)");
                tokio::time::sleep(jittered(RETRY_AFTER)).await;
            }
        });
        true
    }
}

/// `d` plus up to a quarter of it, from the clock's nanoseconds.
fn jittered(d: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|t| t.subsec_nanos())
        .unwrap_or(0);
    d + d.mul_f64(0.25 * f64::from(nanos % 1000) / 1000.0)
}

/// One try: a series is patched (created when it is gone), a new Event
/// created.
async fn write_once(
    api: &Api<ev1::Event>,
    event: &ev1::Event,
    is_series: bool,
) -> Result<(), Failed> {
    // A series' Event being created at the same moment: try again.
    let classify = |e: kube::Error| match &e {
        kube::Error::Api(s) if is_series && s.code == 409 => Failed::Retry(e),
        kube::Error::Api(_) => Failed::GiveUp(e),
        _ => Failed::Retry(e),
    };
    if is_series {
        let patch = serde_json::json!({ "series": event.series });
        match api
            .patch(
                &event.name_any(),
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(classify(e)),
        }
    }
    let mut fresh = event.clone();
    fresh.metadata.resource_version = None;
    match api.create(&PostParams::default(), &fresh).await {
        Ok(_) => Ok(()),
        // A new Event that already exists: an earlier try reached the API
        // server after all (upstream drops it quietly, at V(5)).
        Err(kube::Error::Api(s)) if !is_series && s.code == 409 => {
            tracing::debug!(event = %event.name_any(), "event already written");
            Ok(())
        }
        Err(e) => Err(classify(e)),
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
    fn an_event_is_made_as_upstreams_recorder_makes_it() {
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let mut p = pending("Scheduled");
        p.note = "Successfully assigned ns/p to n1".into();
        let e = make_event(p, "host", now);
        assert_eq!(
            e.metadata.name.as_deref(),
            Some(format!("p.{:x}", now.as_nanosecond()).as_str())
        );
        assert_eq!(e.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(e.reporting_controller.as_deref(), Some("default-scheduler"));
        assert_eq!(
            e.reporting_instance.as_deref(),
            Some("default-scheduler-host")
        );
        assert_eq!(e.type_.as_deref(), Some("Normal"));
        assert_eq!(e.reason.as_deref(), Some("Scheduled"));
        assert_eq!(e.action.as_deref(), Some("Binding"));
        assert_eq!(e.note.as_deref(), Some("Successfully assigned ns/p to n1"));
        assert_eq!(e.event_time, Some(MicroTime(now)));
        assert!(e.series.is_none());
        // An object without a namespace: the Event goes to default.
        let mut w = pending("FailedScheduling");
        w.regarding.namespace = None;
        w.warning = true;
        let e = make_event(w, "host", now);
        assert_eq!(e.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(e.type_.as_deref(), Some("Warning"));
    }

    #[test]
    fn retries_wait_ten_seconds_and_up_to_a_quarter_more() {
        for _ in 0..100 {
            let d = jittered(RETRY_AFTER);
            assert!(d >= RETRY_AFTER && d <= RETRY_AFTER.mul_f64(1.25), "{d:?}");
        }
    }

    /// A fake API server answering each request with the next scripted
    /// status code; it keeps the methods it saw.
    struct Scripted {
        codes: Mutex<Vec<u16>>,
        seen: Mutex<Vec<String>>,
        paths: Mutex<Vec<String>>,
    }

    impl rkube_daemon::server::Handler for Scripted {
        async fn handle(
            &self,
            req: rkube_daemon::server::Request,
        ) -> rkube_daemon::server::Response {
            self.seen.lock().unwrap().push(req.method.to_string());
            self.paths.lock().unwrap().push(req.path.clone());
            let code = {
                let mut codes = self.codes.lock().unwrap();
                if codes.is_empty() {
                    500
                } else {
                    codes.remove(0)
                }
            };
            let body = if code < 300 {
                serde_json::json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
                                   "metadata": {"name": "p.1", "namespace": "ns"}})
            } else {
                serde_json::json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
                                   "message": "scripted", "reason": "Scripted", "code": code})
            };
            rkube_daemon::server::respond(
                rkube_daemon::server::StatusCode::from_u16(code).unwrap(),
                "application/json",
                rkube_daemon::server::Body::whole(body.to_string()),
            )
        }
    }

    /// Runs one `write_once` against answers `codes`: its outcome
    /// ("ok", "retry", "give up") and the methods sent.
    async fn write_against(codes: &[u16], is_series: bool) -> (&'static str, Vec<String>) {
        let handler = Arc::new(Scripted {
            codes: Mutex::new(codes.to_vec()),
            seen: Mutex::new(vec![]),
            paths: Mutex::new(vec![]),
        });
        let addr = rkube_daemon::testing::start(None, Default::default(), handler.clone()).await;
        let cfg = kube::Config::new(format!("http://{addr}").parse().unwrap());
        let client = Client::try_from(cfg).unwrap();
        let api: Api<ev1::Event> = Api::namespaced(client, "ns");
        let mut e = make_event(pending("FailedScheduling"), "h", Timestamp::now());
        if is_series {
            e.series = Some(ev1::EventSeries {
                count: 2,
                last_observed_time: MicroTime(Timestamp::now()),
            });
        }
        let outcome = match write_once(&api, &e, is_series).await {
            Ok(()) => "ok",
            Err(Failed::Retry(_)) => "retry",
            Err(Failed::GiveUp(_)) => "give up",
        };
        let seen = handler.seen.lock().unwrap().clone();
        (outcome, seen)
    }

    #[tokio::test]
    async fn writes_are_retried_or_given_up_as_upstream_does() {
        // A new Event: created; already there means an earlier try landed.
        assert_eq!(
            write_against(&[201], false).await,
            ("ok", vec!["POST".to_string()])
        );
        assert_eq!(write_against(&[409], false).await.0, "ok");
        // Any other answer of the API server is final, as upstream's
        // status errors are (only unanswered writes are tried again).
        assert_eq!(write_against(&[422], false).await.0, "give up");
        assert_eq!(write_against(&[403], false).await.0, "give up");
        // A series: patched; created when the Event is gone; being created
        // at the same moment: retried.
        assert_eq!(
            write_against(&[200], true).await,
            ("ok", vec!["PATCH".to_string()])
        );
        assert_eq!(
            write_against(&[404, 201], true).await,
            ("ok", vec!["PATCH".to_string(), "POST".to_string()])
        );
        assert_eq!(write_against(&[404, 409], true).await.0, "retry");
    }

    #[tokio::test]
    async fn create_now_posts_the_event_to_its_namespace() {
        let handler = Arc::new(Scripted {
            codes: Mutex::new(vec![201, 422]),
            seen: Mutex::new(vec![]),
            paths: Mutex::new(vec![]),
        });
        let addr = rkube_daemon::testing::start(None, Default::default(), handler.clone()).await;
        let client =
            Client::try_from(kube::Config::new(format!("http://{addr}").parse().unwrap())).unwrap();
        let limiter = RateLimiter::new(100.0, 10);
        create_now(client.clone(), "h", &limiter, pending("Scheduled"))
            .await
            .unwrap();
        // Refused: the error comes back.
        assert!(create_now(client, "h", &limiter, pending("Scheduled"))
            .await
            .is_err());
        let paths = handler.paths.lock().unwrap().clone();
        assert_eq!(paths, ["/apis/events.k8s.io/v1/namespaces/ns/events"; 2]);
    }

    #[test]
    fn a_closed_queue_drops() {
        let (q, rx) = EventQueue::new(3);
        drop(rx);
        q.record(pending("late"));
        assert_eq!(q.dropped(), 1);
    }
}
