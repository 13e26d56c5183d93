//! Kubelet Events: core/v1 Events about pods and their containers, with
//! upstream's reasons and messages (`Pulled`, `Created`, `Started`,
//! `Killing`, `Failed`, `BackOff`, `Unhealthy`, `FailedPostStartHook`,
//! `FailedPreStopHook`, admission rejections), `source` `{component:
//! kubelet, host: <node>}` and the container's `fieldPath`
//! (`spec.containers{name}`, `spec.initContainers{name}`,
//! `spec.ephemeralContainers{name}`).
//!
//! Recording never waits: an event goes into a queue of 1,000 and is
//! dropped when it is full, as client-go's broadcaster does. One task
//! publishes them. A repeat of the same event (object, field, type,
//! reason, message) within ten minutes raises the first one's `count` and
//! `lastTimestamp` instead of making another, as client-go's correlator
//! does, so a crash loop's `BackOff` stays one Event.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use tokio::sync::mpsc;

use crate::timeline::Tracker;

/// The queue's capacity (client-go's `maxQueuedEvents`).
pub const MAX_QUEUED: usize = 1000;
/// How long a repeat is folded into its first Event.
const CORRELATE: Duration = Duration::from_secs(600);

/// One event to record.
#[derive(Debug, Clone, PartialEq)]
pub struct KubeletEvent {
    /// The pod (with a container's `fieldPath`).
    pub object: ObjectReference,
    /// `Warning` (else `Normal`).
    pub warning: bool,
    /// e.g. `Started`.
    pub reason: String,
    /// e.g. `Container started`.
    pub message: String,
}

/// The recording side, cheap to clone. With a [`Tracker`], each pod's
/// events are also stages of its startup timeline.
#[derive(Clone, Debug)]
pub struct Recorder {
    tx: mpsc::Sender<KubeletEvent>,
    timeline: Option<Arc<Tracker>>,
}

/// The `fieldPath` of container `name` of `pod`.
pub fn field_path(pod: &Pod, name: &str) -> String {
    let spec = pod.spec.as_ref();
    let init = spec
        .and_then(|s| s.init_containers.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.name == name));
    let ephemeral = spec
        .and_then(|s| s.ephemeral_containers.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.name == name));
    let list = if init {
        "initContainers"
    } else if ephemeral {
        "ephemeralContainers"
    } else {
        "containers"
    };
    format!("spec.{list}{{{name}}}")
}

/// A reference to `pod`, or to its container `container`.
pub fn reference(pod: &Pod, container: Option<&str>) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some(pod.name_any()),
        namespace: pod.namespace(),
        uid: pod.uid(),
        resource_version: pod.resource_version(),
        field_path: container.map(|c| field_path(pod, c)),
    }
}

impl Recorder {
    /// A recorder and the receiving end for [`run`].
    pub fn new(capacity: usize) -> (Recorder, mpsc::Receiver<KubeletEvent>) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        (Recorder { tx, timeline: None }, rx)
    }

    /// The same recorder, also adding each pod event to `timeline`.
    pub fn with_timeline(mut self, timeline: Arc<Tracker>) -> Recorder {
        self.timeline = Some(timeline);
        self
    }

    /// Records a stage of `pod`'s startup timeline (no Event).
    pub fn stage(
        &self,
        pod: &Pod,
        stage: &str,
        container: Option<&str>,
        detail: impl Into<String>,
    ) {
        if let Some(t) = &self.timeline {
            t.stage(pod, stage, container, detail);
        }
    }

    /// Records a stage of `pod`'s startup timeline once (no Event).
    pub fn stage_once(&self, pod: &Pod, stage: &str) {
        if let Some(t) = &self.timeline {
            t.stage_once(pod, stage);
        }
    }

    /// The timeline tracker, if any.
    pub fn timeline(&self) -> Option<&Arc<Tracker>> {
        self.timeline.as_ref()
    }

    /// Records an event about `pod` (its container `container`); never
    /// waits, drops it when the queue is full.
    pub fn record(
        &self,
        pod: &Pod,
        container: Option<&str>,
        warning: bool,
        reason: &str,
        message: impl Into<String>,
    ) {
        let message = message.into();
        if let Some(t) = &self.timeline {
            t.stage(pod, reason, container, message.clone());
        }
        let _ = self.tx.try_send(KubeletEvent {
            object: reference(pod, container),
            warning,
            reason: reason.into(),
            message,
        });
    }
}

impl Recorder {
    /// Records an event about Node `node` (upstream's `nodeRef`).
    pub fn record_node(&self, node: &str, warning: bool, reason: &str, message: impl Into<String>) {
        let _ = self.tx.try_send(KubeletEvent {
            object: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(node.into()),
                ..Default::default()
            },
            warning,
            reason: reason.into(),
            message: message.into(),
        });
    }
}

type Key = (Option<String>, Option<String>, bool, String, String);

fn key(e: &KubeletEvent) -> Key {
    (
        e.object.uid.clone(),
        e.object.field_path.clone(),
        e.warning,
        e.reason.clone(),
        e.message.clone(),
    )
}

/// Events about cluster-scoped objects (the Node) go to `default`, as
/// client-go's recorder puts them.
fn event_namespace(e: &KubeletEvent) -> String {
    e.object
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".into())
}

/// The Event object for `e` first seen at `now` on `node`.
pub fn event_object(e: &KubeletEvent, node: &str, now: Timestamp) -> Event {
    let name = format!(
        "{}.{:x}",
        e.object.name.clone().unwrap_or_default(),
        now.as_nanosecond()
    );
    Event {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(event_namespace(e)),
            ..Default::default()
        },
        involved_object: e.object.clone(),
        reason: Some(e.reason.clone()),
        message: Some(e.message.clone()),
        type_: Some(if e.warning { "Warning" } else { "Normal" }.into()),
        source: Some(EventSource {
            component: Some("kubelet".into()),
            host: Some(node.into()),
        }),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        count: Some(1),
        event_time: None::<MicroTime>,
        reporting_component: Some("kubelet".into()),
        reporting_instance: Some(node.into()),
        ..Default::default()
    }
}

/// Publishes the queued events until the recorder is dropped.
pub async fn run(client: Client, node: String, mut rx: mpsc::Receiver<KubeletEvent>) {
    let mut seen: HashMap<Key, (String, i32, Instant)> = HashMap::new();
    while let Some(e) = rx.recv().await {
        let ns = event_namespace(&e);
        let api: Api<Event> = Api::namespaced(client.clone(), &ns);
        let now = Timestamp::now();
        let k = key(&e);
        if seen.len() > 4096 {
            seen.retain(|_, (_, _, at)| at.elapsed() < CORRELATE);
        }
        if let Some((name, count, at)) = seen.get_mut(&k) {
            if at.elapsed() < CORRELATE {
                *count += 1;
                *at = Instant::now();
                let patch = serde_json::json!({"count": *count, "lastTimestamp": Time(now)});
                match api
                    .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => continue,
                    Err(err) => {
                        tracing::debug!(event = %name, error = %err, "updating event failed; recording a new one");
                    }
                }
            }
        }
        let obj = event_object(&e, &node, now);
        let name = obj.metadata.name.clone().unwrap_or_default();
        match api.create(&PostParams::default(), &obj).await {
            Ok(_) => {
                seen.insert(k, (name, 1, Instant::now()));
            }
            Err(err) => {
                tracing::debug!(reason = %e.reason, error = %err, "recording event failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "7"},
            "spec": {
                "initContainers": [{"name": "i"}],
                "containers": [{"name": "c"}],
                "ephemeralContainers": [{"name": "e"}],
            },
        }))
        .unwrap()
    }

    #[test]
    fn container_references_carry_upstreams_field_paths() {
        let p = pod();
        assert_eq!(field_path(&p, "c"), "spec.containers{c}");
        assert_eq!(field_path(&p, "i"), "spec.initContainers{i}");
        assert_eq!(field_path(&p, "e"), "spec.ephemeralContainers{e}");
        let r = reference(&p, Some("c"));
        assert_eq!(r.kind.as_deref(), Some("Pod"));
        assert_eq!(r.uid.as_deref(), Some("u"));
        assert_eq!(reference(&p, None).field_path, None);
    }

    #[test]
    fn the_event_object_is_a_kubelet_event() {
        let (rec, mut rx) = Recorder::new(1);
        rec.record(&pod(), Some("c"), false, "Started", "Container started");
        // Full: dropped, never waits.
        rec.record(&pod(), Some("c"), true, "BackOff", "x");
        let e = rx.try_recv().unwrap();
        assert!(rx.try_recv().is_err());
        let t = Timestamp::from_second(1_700_000_000).unwrap();
        let obj = event_object(&e, "node-1", t);
        assert_eq!(obj.metadata.namespace.as_deref(), Some("ns"));
        assert!(obj.metadata.name.unwrap().starts_with("p."));
        assert_eq!(obj.reason.as_deref(), Some("Started"));
        assert_eq!(obj.type_.as_deref(), Some("Normal"));
        assert_eq!(obj.count, Some(1));
        let src = obj.source.unwrap();
        assert_eq!(src.component.as_deref(), Some("kubelet"));
        assert_eq!(src.host.as_deref(), Some("node-1"));
        assert_eq!(
            obj.involved_object.field_path.as_deref(),
            Some("spec.containers{c}")
        );
    }
}
