//! Each pod's startup timeline, and upstream's pod startup latency tracker
//! (`pkg/kubelet/util/pod_startup_latency_tracker.go`) behind
//! `kubelet_pod_start_sli_duration_seconds` and
//! `kubelet_pod_start_total_duration_seconds`.
//!
//! The managers record what they do to a pod as it happens: the kubelet
//! first seeing it on its watch, admission, volumes ready, the sandbox and
//! its network, every Event the kubelet emits for it (`Pulling`, `Pulled`
//! with the image's size and time, `Created`, `Started`, `Unhealthy`, …),
//! each probe's first success, init containers done, each status write
//! until the pod's start is observed, Ready, and its watch showing every
//! container started. `GET /timeline/{namespace}/{pod}` on
//! the kubelet API serves one pod's list (authorized as `nodes/proxy`);
//! `rkube timeline` prints it through the API server's node proxy.
//!
//! The SLI follows upstream's tracker: a pod is tracked from the first
//! watch event that shows it without `status.startTime`; once a status
//! write shows all its containers running ("observed running"), the next
//! watch event that shows the same gives the pod's startup from its
//! `creationTimestamp`, less the time spent pulling images (overlapping
//! pulls counted once) and running init containers. Pods with volumes
//! other than Secret, ConfigMap, downward API, emptyDir and projected
//! ("stateful") count in the total only.
//!
//! Bounded: at most [`MAX_PODS`] timelines (the oldest dropped first) of
//! at most [`MAX_STAGES`] stages each.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use serde::{Deserialize, Serialize};

use crate::histogram::{Histogram, POD_START_BUCKETS};

mod sli;
#[cfg(test)]
mod tests;

use sli::{all_started, pulling_time};

/// Timelines kept (pods of the node, and recently deleted ones).
pub const MAX_PODS: usize = 1024;
/// Stages kept per pod; later ones are counted, not kept.
pub const MAX_STAGES: usize = 128;
/// Longest detail kept per stage, bytes.
const MAX_DETAIL: usize = 512;

/// One step of a pod's start (the JSON the kubelet API serves and
/// `rkube timeline` reads).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stage {
    /// When (the kubelet's clock; `PodCreated` is the API server's).
    pub at: Timestamp,
    /// What: `PodCreated` (its `creationTimestamp`), `Seen`, `Admitted`
    /// (or `Rejected`), `VolumesReady`, `SandboxCreated`, `NetworkReady`,
    /// an Event's reason (`Pulling`, `Pulled`, `Created`, `Started`, …),
    /// `InitContainerDone`, `ProbeSucceeded` (each probe's first success),
    /// `StatusWritten`, `Ready`, `ObservedRunning`.
    pub stage: String,
    /// The container it concerns, if one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// Detail (an Event's message, a sandbox id, the pod IPs, …).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

/// One pod's timeline as served.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Timeline {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
    /// The stages in the order they happened.
    pub stages: Vec<Stage>,
    /// Stages past [`MAX_STAGES`], not kept.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dropped: usize,
    /// The pod's startup as the SLI counts it (seconds), once observed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sli_seconds: Option<f64>,
    /// Creation to observed running (seconds), once observed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e2e_seconds: Option<f64>,
    /// Time spent pulling images (seconds; overlapping pulls once).
    pub image_pull_seconds: f64,
    /// Time spent running init containers (seconds).
    pub init_container_seconds: f64,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

#[derive(Debug, Default)]
struct PodRecord {
    namespace: String,
    name: String,
    stages: Vec<Stage>,
    dropped: usize,
    /// Tracked by the SLI (seen without a start time).
    tracked: bool,
    pull_starts: VecDeque<Timestamp>,
    pull_sessions: Vec<(Timestamp, Timestamp)>,
    init_runtime: Duration,
    init_counted: HashSet<String>,
    observed_running: Option<Timestamp>,
    /// The last watch event showing every container started: its
    /// resourceVersion and when it came (a status write's own watch event
    /// may arrive before the write's answer).
    watched_started: Option<(String, Timestamp)>,
    sli_recorded: bool,
    ready: bool,
    sli_seconds: Option<f64>,
    e2e_seconds: Option<f64>,
}

impl PodRecord {
    fn push(&mut self, stage: Stage) {
        if self.stages.len() < MAX_STAGES {
            self.stages.push(stage);
        } else {
            self.dropped += 1;
        }
    }
}

#[derive(Debug, Default)]
struct State {
    pods: HashMap<String, PodRecord>,
    /// Uids, oldest first.
    order: VecDeque<String>,
    first_network_pod_seen: bool,
}

impl State {
    fn entry(&mut self, pod: &Pod) -> Option<&mut PodRecord> {
        let uid = pod.uid()?;
        if !self.pods.contains_key(&uid) {
            while self.pods.len() >= MAX_PODS {
                match self.order.pop_front() {
                    Some(old) => {
                        self.pods.remove(&old);
                    }
                    None => break,
                }
            }
            self.order.push_back(uid.clone());
            self.pods.insert(
                uid.clone(),
                PodRecord {
                    namespace: pod.namespace().unwrap_or_default(),
                    name: pod.name_any(),
                    ..Default::default()
                },
            );
        }
        self.pods.get_mut(&uid)
    }
}

/// The tracker: every pod's timeline and the startup histograms.
#[derive(Debug)]
pub struct Tracker {
    state: Mutex<State>,
    /// `kubelet_pod_start_sli_duration_seconds`.
    pub sli: Histogram,
    /// `kubelet_pod_start_total_duration_seconds`.
    pub total: Histogram,
    /// `kubelet_first_network_pod_start_sli_duration_seconds`.
    first_network: Mutex<Option<f64>>,
}

impl Default for Tracker {
    fn default() -> Self {
        Tracker {
            state: Mutex::default(),
            sli: Histogram::new(&POD_START_BUCKETS),
            total: Histogram::new(&POD_START_BUCKETS),
            first_network: Mutex::new(None),
        }
    }
}

fn truncate(mut s: String) -> String {
    if s.len() > MAX_DETAIL {
        let mut cut = MAX_DETAIL;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push('…');
    }
    s
}

fn seconds_between(a: Timestamp, b: Timestamp) -> f64 {
    b.duration_since(a).as_secs_f64()
}

impl Tracker {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records `stage` for `pod` now.
    pub fn stage(
        &self,
        pod: &Pod,
        stage: &str,
        container: Option<&str>,
        detail: impl Into<String>,
    ) {
        self.stage_at(pod, Timestamp::now(), stage, container, detail);
    }

    fn stage_at(
        &self,
        pod: &Pod,
        at: Timestamp,
        stage: &str,
        container: Option<&str>,
        detail: impl Into<String>,
    ) {
        let mut st = self.lock();
        if let Some(r) = st.entry(pod) {
            r.push(Stage {
                at,
                stage: stage.into(),
                container: container.map(String::from),
                detail: truncate(detail.into()),
            });
        }
    }

    /// Init container `name` of `pod` ran from `started` to `finished` and
    /// succeeded, as the runtime reports it (upstream's
    /// `RecordInitContainerStarted`/`Finished`): its run time counts once.
    pub fn init_container_done(
        &self,
        pod: &Pod,
        name: &str,
        started: Timestamp,
        finished: Timestamp,
    ) {
        let mut st = self.lock();
        let Some(r) = st.entry(pod) else { return };
        if r.sli_recorded || r.init_counted.len() >= MAX_STAGES || r.init_counted.contains(name) {
            return;
        }
        r.init_counted.insert(name.to_string());
        r.init_runtime += Duration::try_from(finished.duration_since(started)).unwrap_or_default();
        r.push(Stage {
            at: finished,
            stage: "InitContainerDone".into(),
            container: Some(name.to_string()),
            detail: format!("ran {:.3}s", seconds_between(started, finished)),
        });
    }

    /// Records `stage` for `pod` now, unless it has it already.
    pub fn stage_once(&self, pod: &Pod, stage: &str) {
        let mut st = self.lock();
        if let Some(r) = st.entry(pod) {
            if !r.stages.iter().any(|s| s.stage == stage) {
                r.push(Stage {
                    at: Timestamp::now(),
                    stage: stage.into(),
                    container: None,
                    detail: String::new(),
                });
            }
        }
    }

    /// An image pull for `pod` begins.
    pub fn pull_started(&self, pod: &Pod) {
        let mut st = self.lock();
        if let Some(r) = st.entry(pod) {
            r.pull_starts.push_back(Timestamp::now());
        }
    }

    /// An image pull for `pod` ended (successfully or not).
    pub fn pull_finished(&self, pod: &Pod) {
        let mut st = self.lock();
        if let Some(r) = st.entry(pod) {
            if let Some(s) = r.pull_starts.pop_front() {
                if r.pull_sessions.len() < MAX_STAGES {
                    r.pull_sessions.push((s, Timestamp::now()));
                }
            }
        }
    }

    /// The pod's status as just written to the API server (upstream's
    /// `RecordStatusUpdated`): the first write with every container
    /// running marks the pod observed running; the first Ready is a stage.
    pub fn status_written(&self, pod: &Pod) {
        let now = Timestamp::now();
        let mut st = self.lock();
        let Some(r) = st.entry(pod) else { return };
        let none = Default::default();
        let status: &k8s_openapi::api::core::v1::PodStatus = pod.status.as_ref().unwrap_or(&none);
        let ready = status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        let started = status
            .container_statuses
            .iter()
            .flatten()
            .filter(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
            .count();
        let total = status.container_statuses.as_ref().map_or(0, Vec::len);
        if !r.sli_recorded {
            r.push(Stage {
                at: now,
                stage: "StatusWritten".into(),
                container: None,
                detail: format!(
                    "phase {}, {started}/{total} containers running{}",
                    status.phase.as_deref().unwrap_or("?"),
                    if ready { ", Ready" } else { "" }
                ),
            });
        }
        if ready && !r.ready {
            r.ready = true;
            r.push(Stage {
                at: now,
                stage: "Ready".into(),
                container: None,
                detail: String::new(),
            });
        }
        if r.tracked && !r.sli_recorded && r.observed_running.is_none() && all_started(pod) {
            r.observed_running = Some(now);
            // The watch already delivered this very version: that was the
            // observation.
            let seen = r
                .watched_started
                .as_ref()
                .filter(|(v, _)| Some(v) == pod.metadata.resource_version.as_ref())
                .map(|(_, at)| *at);
            if let Some(at) = seen {
                let first = st.first_network_pod_seen;
                self.finish(&mut st, pod, &pod.uid().unwrap_or_default(), at, first);
            }
        }
    }

    /// The timeline of `namespace/name` (the most recent pod of that name).
    pub fn timeline(&self, namespace: &str, name: &str) -> Option<Timeline> {
        let st = self.lock();
        let uid = st
            .order
            .iter()
            .rev()
            .find(|u| {
                st.pods
                    .get(*u)
                    .is_some_and(|r| r.namespace == namespace && r.name == name)
            })?
            .clone();
        let r = st.pods.get(&uid)?;
        let mut stages = r.stages.clone();
        // Stable: stages of the same instant keep their recorded order.
        stages.sort_by_key(|s| s.at);
        Some(Timeline {
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            uid,
            stages,
            dropped: r.dropped,
            sli_seconds: r.sli_seconds,
            e2e_seconds: r.e2e_seconds,
            image_pull_seconds: pulling_time(&r.pull_sessions).as_secs_f64(),
            init_container_seconds: r.init_runtime.as_secs_f64(),
        })
    }

    /// `kubelet_first_network_pod_start_sli_duration_seconds` (nothing
    /// before a pod was observed; families go in name order, so this comes
    /// before `kubelet_pod_start_duration_seconds`).
    pub fn render_gauge(&self, out: &mut String) {
        if let Some(v) = *self.first_network.lock().unwrap_or_else(|e| e.into_inner()) {
            let name = "kubelet_first_network_pod_start_sli_duration_seconds";
            out.push_str(&format!("# HELP {name} [INTERNAL] Duration in seconds to start the first network pod, excluding time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch\n# TYPE {name} gauge\n{name} {v}\n"));
        }
    }

    /// The SLI and total histograms (none before a pod was observed).
    pub fn render(&self, out: &mut String) {
        if self.sli.count() > 0 {
            let name = "kubelet_pod_start_sli_duration_seconds";
            out.push_str(&format!("# HELP {name} [ALPHA] Duration in seconds to start a pod, excluding time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch\n# TYPE {name} histogram\n"));
            self.sli.render(name, "", out);
        }
        if self.total.count() > 0 {
            let name = "kubelet_pod_start_total_duration_seconds";
            out.push_str(&format!("# HELP {name} [ALPHA] Duration in seconds to start a pod since creation, including time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch\n# TYPE {name} histogram\n"));
            self.total.render(name, "", out);
        }
    }
}
