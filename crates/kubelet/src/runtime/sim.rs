//! The sim runtime: nothing runs. A pod's sandbox is ready at once, its
//! containers wait (`ContainerCreating`) for the start delay, then run; with
//! `restartPolicy: Never` or `OnFailure` and a non-zero run time they exit 0
//! (`Completed`) that long after starting, so the pod goes `Succeeded`.
//! Init containers complete (exit 0) at the moment the containers start.
//!
//! Pod IPs come from a per-node fake /24: node index `i` owns
//! `10.<i / 256 % 256>.<i % 256>.0/24` (pods get `.2`–`.254`); the node
//! itself gets [`node_ip`]. Container ids are `sim://<16 hex>`, derived from
//! the pod uid and container name, so a restarted kubelet *adopts* the
//! containers a pod's status already shows (same ids, same start time, the
//! remaining run time) instead of starting them again.

use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::{
    BoxFuture, ContainerObservation, ContainerState, PodObservation, Runtime, RuntimeError,
    RuntimeVersion,
};

/// Timers of the sim runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimTimings {
    /// Pending → Running (`--pod-start-delay`).
    pub start_delay: Duration,
    /// Running → exited 0 for `restartPolicy: Never|OnFailure`
    /// (`--pod-run-time`; zero: run until deleted).
    pub run_time: Duration,
}

/// The InternalIP of sim node `index`: `172.16.0.0/12` + index + 1.
pub fn node_ip(index: usize) -> String {
    let n = (index as u32 + 1) & 0x000f_ffff;
    format!("172.{}.{}.{}", 16 + (n >> 16), (n >> 8) & 255, n & 255)
}

/// The pod CIDR of sim node `index`.
pub fn pod_cidr(index: usize) -> String {
    format!("10.{}.{}.0/24", (index / 256) % 256, index % 256)
}

/// One simulated pod.
#[derive(Debug, Clone)]
struct SimPod {
    node: String,
    ip: String,
    /// When containers start (monotonic) and the wall time shown for it.
    start_at: Instant,
    start_wall: Timestamp,
    /// When containers exit 0, if they do.
    end_at: Option<Instant>,
    /// Set by `kill_pod`: when it was killed.
    killed: Option<(Instant, Timestamp)>,
}

/// The sim runtime.
pub struct SimRuntime {
    timings: SimTimings,
    nodes: HashMap<String, usize>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    pods: HashMap<String, SimPod>,
    used_ips: HashMap<String, BTreeSet<u8>>,
}

fn hex_id(parts: &[&str]) -> String {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    parts.hash(&mut h);
    format!("{:016x}", h.finish())
}

/// `sim://<hex>` id of container `name` of pod `uid`.
pub fn container_id(uid: &str, name: &str) -> String {
    format!("sim://{}", hex_id(&[uid, name]))
}

/// A digest-style image id for `image`.
pub fn image_id(image: &str) -> String {
    let repo = image
        .rsplit_once(':')
        .filter(|(_, tag)| !tag.contains('/'))
        .map(|(r, _)| r)
        .unwrap_or(image);
    let repo = repo.split('@').next().unwrap_or(repo);
    let d = hex_id(&[image]);
    format!("{repo}@sha256:{d}{d}{d}{d}")
}

fn wall_plus(t: Timestamp, d: Duration) -> Timestamp {
    t.checked_add(SignedDuration::try_from(d).unwrap_or(SignedDuration::ZERO))
        .unwrap_or(t)
}

fn runs_to_completion(pod: &Pod) -> bool {
    matches!(
        pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()),
        Some("Never") | Some("OnFailure")
    )
}

impl SimRuntime {
    /// A sim runtime for the nodes `names` (node index = position).
    pub fn new(timings: SimTimings, names: &[String]) -> Self {
        SimRuntime {
            timings,
            nodes: names
                .iter()
                .enumerate()
                .map(|(i, n)| (n.clone(), i))
                .collect(),
            state: Mutex::new(State::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Number of pods the runtime holds.
    pub fn pod_count(&self) -> usize {
        self.lock().pods.len()
    }

    /// The sync logic with an explicit clock (the trait method uses now).
    pub fn sync_at(&self, pod: &Pod, now: Instant, wall: Timestamp) -> PodObservation {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let mut st = self.lock();
        if !st.pods.contains_key(&uid) {
            let created = self.create(&mut st, pod, now, wall);
            st.pods.insert(uid.clone(), created);
        }
        let sp = st.pods[&uid].clone();
        drop(st);
        observe(&sp, pod, &uid, now)
    }

    fn create(&self, st: &mut State, pod: &Pod, now: Instant, wall: Timestamp) -> SimPod {
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        let index = self.nodes.get(&node).copied();
        let status = pod.status.as_ref();
        // Adopt an IP and running containers the status already shows.
        let old_ip = status.and_then(|s| s.pod_ip.clone());
        let used = st.used_ips.entry(node.clone()).or_default();
        let prefix = match index {
            Some(i) => format!("10.{}.{}.", (i / 256) % 256, i % 256),
            None => "10.255.255.".to_string(),
        };
        let ip = match old_ip.filter(|ip| ip.starts_with(&prefix)) {
            Some(ip) => {
                if let Some(last) = ip.rsplit('.').next().and_then(|s| s.parse().ok()) {
                    used.insert(last);
                }
                ip
            }
            None => {
                let last = (2u8..=254).find(|x| !used.contains(x)).unwrap_or(254);
                used.insert(last);
                format!("{prefix}{last}")
            }
        };
        let adopted_start = status
            .and_then(|s| s.container_statuses.as_ref())
            .filter(|cs| !cs.is_empty())
            .and_then(|cs| {
                let mut start = None;
                for c in cs {
                    let running = c.state.as_ref()?.running.as_ref()?;
                    if !c.container_id.as_deref()?.starts_with("sim://") {
                        return None;
                    }
                    start = running.started_at.as_ref().map(|t| t.0);
                }
                start
            });
        let (start_at, start_wall) = match adopted_start {
            Some(t) => (now, t),
            None => (
                now + self.timings.start_delay,
                wall_plus(wall, self.timings.start_delay),
            ),
        };
        let end_at = (runs_to_completion(pod) && !self.timings.run_time.is_zero()).then(|| {
            // Remaining run time, measured from the (possibly adopted) start.
            let ran = wall
                .duration_since(start_wall)
                .max(SignedDuration::ZERO)
                .unsigned_abs();
            start_at + self.timings.run_time.saturating_sub(ran)
        });
        SimPod {
            node,
            ip,
            start_at,
            start_wall,
            end_at,
            killed: None,
        }
    }
}

/// The observation of `sp` at `now`.
fn observe(sp: &SimPod, pod: &Pod, uid: &str, now: Instant) -> PodObservation {
    let spec = pod.spec.as_ref();
    let to_wall = |at: Instant| -> Timestamp {
        if at >= sp.start_at {
            wall_plus(sp.start_wall, at - sp.start_at)
        } else {
            sp.start_wall
        }
    };
    let started = now >= sp.start_at;
    // The moment containers stop: natural end or kill, whichever first.
    let stop = match (sp.end_at, sp.killed) {
        (Some(e), Some((k, kw))) if k < e => Some((k, kw, true)),
        (Some(e), _) => Some((e, to_wall(e), false)),
        (None, Some((k, kw))) => Some((k, kw, true)),
        (None, None) => None,
    };
    let stopped = stop.filter(|(at, _, _)| now >= *at);
    let mut obs = PodObservation {
        sandbox_ready: stopped.is_none(),
        pod_ips: vec![sp.ip.clone()],
        ..Default::default()
    };
    let container = |name: &str, image: &str, init: bool| -> ContainerObservation {
        let mut c = ContainerObservation {
            name: name.to_string(),
            image: image.to_string(),
            image_id: String::new(),
            container_id: String::new(),
            state: ContainerState::Waiting {
                reason: if init {
                    "PodInitializing".into()
                } else {
                    "ContainerCreating".into()
                },
                message: String::new(),
            },
            restart_count: 0,
            ready: false,
            started: false,
            last_state: None,
            resources: None,
        };
        let started_here = started && stopped.is_none_or(|(at, _, _)| at > sp.start_at);
        if !started_here {
            if stopped.is_some() {
                // Killed before it ever started.
                c.state = ContainerState::Terminated {
                    exit_code: 137,
                    reason: "ContainerStatusUnknown".into(),
                    started_at: sp.start_wall,
                    finished_at: sp.start_wall,
                    message: String::new(),
                };
            }
            return c;
        }
        c.image_id = image_id(image);
        c.container_id = container_id(uid, name);
        c.state = if init {
            ContainerState::Terminated {
                exit_code: 0,
                reason: "Completed".into(),
                started_at: sp.start_wall,
                finished_at: sp.start_wall,
                message: String::new(),
            }
        } else {
            match stopped {
                Some((_, finished_at, killed)) => ContainerState::Terminated {
                    exit_code: if killed { 143 } else { 0 },
                    reason: if killed { "Error" } else { "Completed" }.into(),
                    started_at: sp.start_wall,
                    finished_at,
                    message: String::new(),
                },
                None => ContainerState::Running {
                    started_at: sp.start_wall,
                },
            }
        };
        // As upstream: an init container that exited 0 is ready.
        c.started = matches!(c.state, ContainerState::Running { .. });
        c.ready = if init {
            matches!(c.state, ContainerState::Terminated { exit_code: 0, .. })
        } else {
            c.started
        };
        c
    };
    if let Some(spec) = spec {
        for c in spec.init_containers.iter().flatten() {
            obs.init_containers
                .push(container(&c.name, c.image.as_deref().unwrap_or(""), true));
        }
        for c in &spec.containers {
            obs.containers
                .push(container(&c.name, c.image.as_deref().unwrap_or(""), false));
        }
    }
    obs.resync_after = if !started {
        Some(sp.start_at - now)
    } else {
        match stop {
            Some((at, _, _)) if at > now => Some(at - now),
            _ => None,
        }
    };
    obs
}

impl Runtime for SimRuntime {
    fn version(&self) -> BoxFuture<'_, Result<RuntimeVersion, RuntimeError>> {
        Box::pin(async {
            Ok(RuntimeVersion {
                runtime_name: "sim".into(),
                runtime_version: env!("CARGO_PKG_VERSION").into(),
            })
        })
    }

    fn sync_pod<'a>(&'a self, pod: &'a Pod) -> BoxFuture<'a, Result<PodObservation, RuntimeError>> {
        Box::pin(async move { Ok(self.sync_at(pod, Instant::now(), Timestamp::now())) })
    }

    fn kill_pod<'a>(
        &'a self,
        pod: &'a Pod,
        _grace: Duration,
    ) -> BoxFuture<'a, Result<PodObservation, RuntimeError>> {
        Box::pin(async move {
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            let now = Instant::now();
            let sp = {
                let mut st = self.lock();
                if !st.pods.contains_key(&uid) {
                    let sp = self.create(&mut st, pod, now, Timestamp::now());
                    st.pods.insert(uid.clone(), sp);
                }
                let sp = st.pods.get_mut(&uid).expect("inserted above");
                if sp.killed.is_none() {
                    sp.killed = Some((now, Timestamp::now()));
                }
                sp.clone()
            };
            // Sim containers honour SIGTERM at once: no need to wait out the grace period.
            Ok(observe(&sp, pod, &uid, now))
        })
    }

    fn remove_pod<'a>(&'a self, uid: &'a str) -> BoxFuture<'a, Result<(), RuntimeError>> {
        Box::pin(async move {
            let mut st = self.lock();
            if let Some(sp) = st.pods.remove(uid) {
                if let Some(last) = sp.ip.rsplit('.').next().and_then(|s| s.parse::<u8>().ok()) {
                    if let Some(used) = st.used_ips.get_mut(&sp.node) {
                        used.remove(&last);
                    }
                }
            }
            Ok(())
        })
    }

    fn list_pods(&self) -> BoxFuture<'_, Result<Vec<String>, RuntimeError>> {
        Box::pin(async move { Ok(self.lock().pods.keys().cloned().collect()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(uid: &str, restart: &str, status: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "default", "uid": uid},
            "spec": {"nodeName": "n1", "restartPolicy": restart,
                     "initContainers": [{"name": "init", "image": "busybox"}],
                     "containers": [{"name": "c", "image": "nginx:1.27"}]},
            "status": status,
        }))
        .unwrap()
    }

    fn rt() -> SimRuntime {
        SimRuntime::new(
            SimTimings {
                start_delay: Duration::from_secs(2),
                run_time: Duration::from_secs(5),
            },
            &["n0".to_string(), "n1".to_string()],
        )
    }

    #[test]
    fn pending_running_succeeded() {
        let rt = rt();
        let t0 = Instant::now();
        let w0 = Timestamp::now();
        let p = pod("u1", "Never", json!({}));
        let o = rt.sync_at(&p, t0, w0);
        assert!(o.sandbox_ready);
        assert_eq!(o.pod_ips, vec!["10.0.1.2"]);
        assert!(
            matches!(&o.containers[0].state, ContainerState::Waiting { reason, .. } if reason == "ContainerCreating")
        );
        assert!(o.containers[0].container_id.is_empty());
        assert_eq!(o.resync_after, Some(Duration::from_secs(2)));

        let o = rt.sync_at(&p, t0 + Duration::from_secs(3), w0);
        assert!(
            matches!(o.containers[0].state, ContainerState::Running { started_at } if started_at == wall_plus(w0, Duration::from_secs(2)))
        );
        assert!(o.containers[0].ready);
        assert!(o.containers[0].container_id.starts_with("sim://"));
        assert_eq!(o.containers[0].image_id, image_id("nginx:1.27"));
        assert!(o.containers[0].image_id.starts_with("nginx@sha256:"));
        assert!(matches!(
            o.init_containers[0].state,
            ContainerState::Terminated { exit_code: 0, .. }
        ));
        assert_eq!(o.resync_after, Some(Duration::from_secs(4)));

        let o = rt.sync_at(&p, t0 + Duration::from_secs(8), w0);
        match &o.containers[0].state {
            ContainerState::Terminated {
                exit_code,
                reason,
                finished_at,
                ..
            } => {
                assert_eq!(*exit_code, 0);
                assert_eq!(reason, "Completed");
                assert_eq!(*finished_at, wall_plus(w0, Duration::from_secs(7)));
            }
            s => panic!("not terminated: {s:?}"),
        }
        assert!(!o.sandbox_ready);
        assert!(!o.containers[0].ready);
        assert_eq!(o.resync_after, None);
    }

    #[test]
    fn always_runs_forever_and_ips_are_distinct() {
        let rt = rt();
        let t0 = Instant::now();
        let w0 = Timestamp::now();
        let a = rt.sync_at(&pod("a", "Always", json!({})), t0, w0);
        let b = rt.sync_at(&pod("b", "Always", json!({})), t0, w0);
        assert_ne!(a.pod_ips, b.pod_ips);
        let o = rt.sync_at(
            &pod("a", "Always", json!({})),
            t0 + Duration::from_secs(3600),
            w0,
        );
        assert!(matches!(
            o.containers[0].state,
            ContainerState::Running { .. }
        ));
        assert_eq!(o.resync_after, None);
    }

    #[tokio::test]
    async fn kill_terminates_and_remove_frees_ip() {
        let rt = rt();
        let p = pod("k", "Always", json!({}));
        let t0 = Instant::now() - Duration::from_secs(10);
        rt.sync_at(&p, t0, Timestamp::now() - SignedDuration::from_secs(10));
        let o = rt.kill_pod(&p, Duration::from_secs(30)).await.unwrap();
        assert!(matches!(
            o.containers[0].state,
            ContainerState::Terminated { exit_code: 143, .. }
        ));
        assert_eq!(rt.list_pods().await.unwrap(), vec!["k".to_string()]);
        rt.remove_pod("k").await.unwrap();
        assert_eq!(rt.pod_count(), 0);
        let o = rt.sync_at(
            &pod("z", "Always", json!({})),
            Instant::now(),
            Timestamp::now(),
        );
        assert_eq!(o.pod_ips, vec!["10.0.1.2"], "the IP was freed");
    }

    #[test]
    fn adopts_running_containers_after_restart() {
        let rt = rt();
        let started = Timestamp::now() - SignedDuration::from_secs(3);
        let cid = container_id("r", "c");
        let p = pod(
            "r",
            "Never",
            json!({"podIP": "10.0.1.77", "containerStatuses": [{
                "name": "c", "image": "nginx:1.27", "imageID": "x", "containerID": cid,
                "ready": true, "restartCount": 0,
                "state": {"running": {"startedAt": started.to_string()}}}]}),
        );
        let now = Instant::now();
        let o = rt.sync_at(&p, now, Timestamp::now());
        assert_eq!(o.pod_ips, vec!["10.0.1.77"]);
        assert_eq!(o.containers[0].container_id, cid);
        match o.containers[0].state {
            ContainerState::Running { started_at } => {
                assert_eq!(started_at.as_second(), started.as_second())
            }
            ref s => panic!("{s:?}"),
        }
        // 5 s run time, 3 already done: about 2 s left.
        let left = o.resync_after.unwrap();
        assert!(
            left <= Duration::from_secs(2) && left > Duration::from_millis(1500),
            "{left:?}"
        );
    }

    #[test]
    fn addresses() {
        assert_eq!(node_ip(0), "172.16.0.1");
        assert_eq!(node_ip(9999), "172.16.39.16");
        assert_eq!(pod_cidr(257), "10.1.1.0/24");
    }
}
