//! The startup SLI (upstream's `ObservedPodOnWatch` and what it counts):
//! a pod's start observed on the kubelet's watch, less image pulls and
//! init containers.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use super::{Stage, State, Tracker};

pub(super) fn all_started(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .is_some_and(|cs| {
            !cs.is_empty()
                && cs.iter().all(|c| {
                    c.state
                        .as_ref()
                        .and_then(|s| s.running.as_ref())
                        .is_some_and(|r| r.started_at.is_some())
                })
        })
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn stateful(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .is_some_and(|vs| {
            vs.iter().any(|v| {
                v.secret.is_none()
                    && v.config_map.is_none()
                    && v.downward_api.is_none()
                    && v.empty_dir.is_none()
                    && v.projected.is_none()
            })
        })
}

/// Pulling time: sessions in start order, overlaps counted once
/// (upstream's `calculateImagePullingTime`).
pub(super) fn pulling_time(sessions: &[(Timestamp, Timestamp)]) -> Duration {
    let mut total = Duration::ZERO;
    let mut end: Option<Timestamp> = None;
    for (s, e) in sessions {
        let span = |a: Timestamp, b: Timestamp| {
            Duration::try_from(b.duration_since(a)).unwrap_or(Duration::ZERO)
        };
        match end {
            Some(cur) if *s <= cur => {
                if *e > cur {
                    total += span(cur, *e);
                    end = Some(*e);
                }
            }
            _ => {
                total += span(*s, *e);
                end = Some(*e);
            }
        }
    }
    total
}

impl Tracker {
    /// The pod as the kubelet's watch delivered it, at `now` (upstream's
    /// `ObservedPodOnWatch`).
    pub fn observed_on_watch(&self, pod: &Pod, now: Timestamp) {
        let Some(uid) = pod.uid() else { return };
        let mut st = self.lock();
        if matches!(phase(pod), "Failed" | "Succeeded") {
            if let Some(r) = st.pods.get_mut(&uid) {
                r.tracked = false;
            }
            return;
        }
        let fresh = !st.pods.contains_key(&uid);
        let first_network = st.first_network_pod_seen;
        let Some(r) = st.entry(pod) else { return };
        if fresh {
            if let Some(c) = pod.metadata.creation_timestamp.as_ref() {
                r.push(Stage {
                    at: c.0,
                    stage: "PodCreated".into(),
                    container: None,
                    detail: String::new(),
                });
            }
            r.push(Stage {
                at: now,
                stage: "Seen".into(),
                container: None,
                detail: String::new(),
            });
            r.tracked = pod
                .status
                .as_ref()
                .and_then(|s| s.start_time.as_ref())
                .is_none();
            return;
        }
        if !all_started(pod) {
            return;
        }
        if let Some(v) = pod.resource_version() {
            r.watched_started = Some((v, now));
        }
        if r.tracked && !r.sli_recorded && r.observed_running.is_some() {
            self.finish(&mut st, pod, &uid, now, first_network);
        }
    }

    /// The pod's start observed on the watch at `now`: the histograms and
    /// the `ObservedRunning` stage.
    pub(super) fn finish(
        &self,
        st: &mut State,
        pod: &Pod,
        uid: &str,
        now: Timestamp,
        first_network: bool,
    ) {
        let Some(r) = st.pods.get_mut(uid) else {
            return;
        };
        let Some(created) = pod.metadata.creation_timestamp.as_ref().map(|c| c.0) else {
            return;
        };
        let e2e = Duration::try_from(now.duration_since(created)).unwrap_or(Duration::ZERO);
        let pulls = pulling_time(&r.pull_sessions);
        let sli = e2e.saturating_sub(pulls).saturating_sub(r.init_runtime);
        r.sli_recorded = true;
        r.sli_seconds = Some(sli.as_secs_f64());
        r.e2e_seconds = Some(e2e.as_secs_f64());
        r.push(Stage {
            at: now,
            stage: "ObservedRunning".into(),
            container: None,
            detail: format!(
                "every container started, seen on the watch ({:.3}s after creation)",
                e2e.as_secs_f64()
            ),
        });
        tracing::info!(
            pod = %format!("{}/{}", r.namespace, r.name),
            podStartSLOduration = sli.as_secs_f64(),
            podStartE2EDuration = ?e2e,
            totalImagesPullingTime = ?pulls,
            totalInitContainerRuntime = ?r.init_runtime,
            "Observed pod startup duration"
        );
        self.total.observe(e2e);
        if !stateful(pod) {
            self.sli.observe(sli);
            let host_network = pod
                .spec
                .as_ref()
                .and_then(|s| s.host_network)
                .unwrap_or(false);
            if !host_network && !first_network {
                st.first_network_pod_seen = true;
                *self.first_network.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some(sli.as_secs_f64());
            }
        }
    }
}
