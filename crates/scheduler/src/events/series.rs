//! Which Events are written, as client-go's `events.k8s.io/v1`
//! broadcaster decides for kube-scheduler.
//!
//! Every event is kept by its key (type, action, reason, reporting
//! controller and instance, regarding and related object). A new key is
//! created. The first repeat of a key turns the kept Event into a series of
//! 2 and is written (a patch of its `series`); later repeats only count, in
//! memory. Every [`REFRESH_EVERY`] the series are written again with their
//! counts, and every [`FINISH_EVERY`] a series unseen for that long is
//! written a last time and forgotten, as is a single Event that old.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// Upstream's `finishTime`.
pub const FINISH_EVERY: Duration = Duration::from_secs(6 * 60);
/// Upstream's `refreshTime`.
pub const REFRESH_EVERY: Duration = Duration::from_secs(30 * 60);

/// What to write for one recorded event.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// A new Event.
    Create(Event),
    /// The `series` of an Event written before (created again if it is
    /// gone).
    Series(Event),
}

/// The kept Events, by key.
#[derive(Debug, Default)]
pub struct Cache {
    events: HashMap<String, Event>,
}

fn push_ref(key: &mut String, r: &ObjectReference) {
    for part in [
        &r.api_version,
        &r.kind,
        &r.namespace,
        &r.name,
        &r.uid,
        &r.resource_version,
        &r.field_path,
    ] {
        key.push_str(part.as_deref().unwrap_or(""));
        key.push('\0');
    }
}

/// The key upstream's `getKey` builds, as one string.
fn key(e: &Event) -> String {
    let mut key = String::with_capacity(256);
    for part in [
        &e.type_,
        &e.action,
        &e.reason,
        &e.reporting_controller,
        &e.reporting_instance,
    ] {
        key.push_str(part.as_deref().unwrap_or(""));
        key.push('\0');
    }
    let none = ObjectReference::default();
    push_ref(&mut key, e.regarding.as_ref().unwrap_or(&none));
    push_ref(&mut key, e.related.as_ref().unwrap_or(&none));
    key
}

fn older_than(t: Option<&MicroTime>, limit: Timestamp) -> bool {
    t.is_some_and(|t| t.0 < limit)
}

impl Cache {
    /// Records `event` at `now`: what to write, if anything.
    pub fn record(&mut self, event: Event, now: Timestamp) -> Option<Write> {
        let k = key(&event);
        match self.events.get_mut(&k) {
            None => {
                self.events.insert(k, event.clone());
                Some(Write::Create(event))
            }
            Some(kept) => match kept.series.as_mut() {
                Some(series) => {
                    series.count += 1;
                    series.last_observed_time = MicroTime(now);
                    None
                }
                None => {
                    kept.series = Some(EventSeries {
                        count: 2,
                        last_observed_time: MicroTime(now),
                    });
                    Some(Write::Series(kept.clone()))
                }
            },
        }
    }

    /// Every [`FINISH_EVERY`]: the series unseen since `now` minus that,
    /// to be written a last time; they and the single Events that old are
    /// forgotten.
    pub fn finish(&mut self, now: Timestamp) -> Vec<Event> {
        let limit = now
            .checked_sub(SignedDuration::try_from(FINISH_EVERY).unwrap_or(SignedDuration::ZERO))
            .unwrap_or(now);
        let mut last = Vec::new();
        self.events.retain(|_, e| match &e.series {
            Some(s) if s.last_observed_time.0 < limit => {
                last.push(e.clone());
                false
            }
            Some(_) => true,
            None => !older_than(e.event_time.as_ref(), limit),
        });
        last
    }

    /// Every [`REFRESH_EVERY`]: the series, to be written again.
    pub fn refresh(&self) -> Vec<Event> {
        self.events
            .values()
            .filter(|e| e.series.is_some())
            .cloned()
            .collect()
    }

    /// Events kept.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.events.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn event(pod: &str, reason: &str, at: Timestamp) -> Event {
        Event {
            metadata: ObjectMeta {
                name: Some(format!("{pod}.{reason}")),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            event_time: Some(MicroTime(at)),
            type_: Some("Warning".into()),
            action: Some("Scheduling".into()),
            reason: Some(reason.into()),
            note: Some(format!("a note that is not part of the key {at}")),
            reporting_controller: Some("default-scheduler".into()),
            reporting_instance: Some("default-scheduler-h".into()),
            regarding: Some(ObjectReference {
                kind: Some("Pod".into()),
                namespace: Some("ns".into()),
                name: Some(pod.into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    #[test]
    fn repeats_become_one_series_written_once_then_counted() {
        let mut c = Cache::default();
        let first = event("p", "FailedScheduling", at(0));
        assert_eq!(
            c.record(first.clone(), at(0)),
            Some(Write::Create(first.clone()))
        );
        // Another pod, another reason: new Events.
        assert!(matches!(
            c.record(event("q", "FailedScheduling", at(1)), at(1)),
            Some(Write::Create(_))
        ));
        assert!(matches!(
            c.record(event("p", "Scheduled", at(1)), at(1)),
            Some(Write::Create(_))
        ));
        // The first repeat (whatever its note) writes the first Event's
        // series: its name, count 2.
        let Some(Write::Series(s)) = c.record(event("p", "FailedScheduling", at(5)), at(5)) else {
            panic!("the first repeat writes a series");
        };
        assert_eq!(s.metadata.name, first.metadata.name);
        assert_eq!(s.note, first.note);
        assert_eq!(s.series.as_ref().map(|s| s.count), Some(2));
        // Later repeats only count.
        for t in 6..10 {
            assert_eq!(c.record(event("p", "FailedScheduling", at(t)), at(t)), None);
        }
        let refreshed = c.refresh();
        assert_eq!(refreshed.len(), 1);
        let series = refreshed[0].series.as_ref().unwrap();
        assert_eq!(series.count, 6);
        assert_eq!(series.last_observed_time.0, at(9));
        assert_eq!(c.len(), 3);
    }

    #[test]
    fn finished_series_are_written_last_and_old_events_forgotten() {
        let mut c = Cache::default();
        c.record(event("old", "Scheduled", at(0)), at(0));
        c.record(event("young", "Scheduled", at(300)), at(300));
        c.record(event("s", "FailedScheduling", at(0)), at(0));
        c.record(event("s", "FailedScheduling", at(10)), at(10));
        c.record(event("t", "FailedScheduling", at(0)), at(0));
        c.record(event("t", "FailedScheduling", at(200)), at(200));
        // Six minutes after 10 s: the single Event of 0 s and the series
        // last seen at 10 s are done; the rest stays.
        let last = c.finish(at(10 + 361));
        assert_eq!(last.len(), 1);
        assert_eq!(last[0].metadata.name.as_deref(), Some("s.FailedScheduling"));
        assert_eq!(c.len(), 2);
        // Forgotten: the same event is new again.
        assert!(matches!(
            c.record(event("old", "Scheduled", at(400)), at(400)),
            Some(Write::Create(_))
        ));
        assert!(matches!(
            c.record(event("s", "FailedScheduling", at(400)), at(400)),
            Some(Write::Create(_))
        ));
        assert_eq!(
            c.record(event("t", "FailedScheduling", at(401)), at(401)),
            None
        );
    }

    #[test]
    fn the_key_keeps_fields_apart() {
        // "ab" + "c" and "a" + "bc" are different keys.
        let mut a = event("p", "R", at(0));
        a.action = Some("ab".into());
        a.reason = Some("c".into());
        let mut b = a.clone();
        b.action = Some("a".into());
        b.reason = Some("bc".into());
        assert_ne!(key(&a), key(&b));
        let mut related = a.clone();
        related.related = Some(ObjectReference {
            name: Some("preemptor".into()),
            ..Default::default()
        });
        assert_ne!(key(&a), key(&related));
    }
}
