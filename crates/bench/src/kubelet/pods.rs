//! Pods for the kubelet under test, through the API server: bound to its
//! node at creation (`spec.nodeName`, as upstream's density tests bind
//! them, so no scheduler is timed), created all at once and watched until
//! `Running`, deleted all at once and watched until gone, and waves of
//! both (churn).
//!
//! A pod's startup latency is the time from just before its create call
//! to the watch event that shows it `Running`; its delete latency, from
//! just before its delete call to the watch event of its removal. Both
//! are taken on this process's clock, so no clock skew enters.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

/// The label every benchmark pod carries.
pub const LABEL: &str = "rkube-bench-kubelet";
/// Their namespace (created when missing).
pub const NAMESPACE: &str = "bench-kubelet";

/// What each pod runs.
#[derive(Debug, Clone)]
pub struct Spec {
    /// The node the pods are bound to.
    pub node: String,
    /// The image (already on the node: `imagePullPolicy: Never`).
    pub image: String,
    /// Its command, if not the image's own.
    pub command: Vec<String>,
    /// `terminationGracePeriodSeconds`.
    pub grace_seconds: i64,
}

/// Per-pod latencies of one batch and the batch's wall time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Timed {
    /// One per pod, milliseconds.
    pub latencies_ms: Vec<f64>,
    /// First call → last pod done, milliseconds.
    pub total_ms: f64,
}

fn pod(spec: &Spec, name: &str) -> Result<Pod> {
    let mut container = json!({
        "name": "main",
        "image": spec.image,
        "imagePullPolicy": "Never",
        "resources": {"requests": {"cpu": "1m", "memory": "1Mi"}},
    });
    if !spec.command.is_empty() {
        container["command"] = json!(spec.command);
    }
    Ok(serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {LABEL: "1"}},
        "spec": {
            "nodeName": spec.node,
            "automountServiceAccountToken": false,
            "enableServiceLinks": false,
            "terminationGracePeriodSeconds": spec.grace_seconds,
            "containers": [container],
        },
    }))?)
}

/// Creates the namespace unless it exists.
pub async fn ensure_namespace(c: &Client) -> Result<()> {
    let api: Api<Namespace> = Api::all(c.clone());
    if api.get_opt(NAMESPACE).await?.is_none() {
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))?;
        api.create(&PostParams::default(), &ns)
            .await
            .context("creating the benchmark namespace")?;
    }
    Ok(())
}

fn running(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

/// A watch of the benchmark pods from now on, restarted (from the last
/// version seen) when the server ends it.
struct Watch {
    api: Api<Pod>,
    version: String,
    stream: Option<futures::stream::BoxStream<'static, kube::Result<WatchEvent<Pod>>>>,
}

impl Watch {
    async fn start(api: &Api<Pod>) -> Result<(Self, Vec<Pod>)> {
        let list = api
            .list(&ListParams::default().labels(&format!("{LABEL}=1")))
            .await?;
        let version = list.metadata.resource_version.clone().unwrap_or_default();
        let w = Watch {
            api: api.clone(),
            version,
            stream: None,
        };
        Ok((w, list.items))
    }

    /// The next event before `deadline`; `None` when it passed.
    async fn next(&mut self, deadline: Instant) -> Result<Option<WatchEvent<Pod>>> {
        loop {
            if self.stream.is_none() {
                let params = WatchParams::default()
                    .labels(&format!("{LABEL}=1"))
                    .timeout(290);
                self.stream = Some(self.api.watch(&params, &self.version).await?.boxed());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let stream = self.stream.as_mut().expect("set above");
            match tokio::time::timeout(left, stream.try_next()).await {
                Err(_) => return Ok(None),
                Ok(Ok(Some(WatchEvent::Error(e)))) => bail!("watching pods: {}", e.message),
                Ok(Ok(Some(ev))) => {
                    if let WatchEvent::Added(p) | WatchEvent::Modified(p) | WatchEvent::Deleted(p) =
                        &ev
                    {
                        if let Some(v) = p.resource_version() {
                            self.version = v;
                        }
                    }
                    return Ok(Some(ev));
                }
                Ok(Ok(None)) => self.stream = None,
                Ok(Err(e)) => bail!("watching pods: {e}"),
            }
        }
    }
}

type Clock = Arc<Mutex<HashMap<String, Instant>>>;

fn latencies(started: &Clock, done: &HashMap<String, Instant>) -> Timed {
    let started = started.lock().expect("not poisoned");
    let first = started.values().min().copied();
    let last = done.values().max().copied();
    let latencies_ms = done
        .iter()
        .filter_map(|(n, t)| started.get(n).map(|s| ms(t.duration_since(*s))))
        .collect();
    let total_ms = match (first, last) {
        (Some(f), Some(l)) => ms(l.duration_since(f)),
        _ => 0.0,
    };
    Timed {
        latencies_ms,
        total_ms,
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Creates `n` pods named `<prefix>-<i>` at once and waits until every one
/// is `Running`. Fails when one is not by `timeout`.
pub async fn start(
    c: &Client,
    spec: &Spec,
    n: usize,
    prefix: &str,
    timeout: Duration,
) -> Result<Timed> {
    let api: Api<Pod> = Api::namespaced(c.clone(), NAMESPACE);
    let (mut watch, _) = Watch::start(&api).await?;
    let names: Vec<String> = (0..n).map(|i| format!("{prefix}-{i}")).collect();
    let pods = names
        .iter()
        .map(|name| pod(spec, name))
        .collect::<Result<Vec<_>>>()?;
    let started: Clock = Arc::new(Mutex::new(HashMap::new()));
    let creator = {
        let (api, started) = (api.clone(), started.clone());
        tokio::spawn(async move {
            let calls = pods.into_iter().map(|p| {
                let (api, started) = (api.clone(), started.clone());
                async move {
                    let name = p.name_any();
                    started
                        .lock()
                        .expect("not poisoned")
                        .insert(name.clone(), Instant::now());
                    api.create(&PostParams::default(), &p)
                        .await
                        .with_context(|| format!("creating pod {name}"))
                }
            });
            futures::future::try_join_all(calls).await.map(|_| ())
        })
    };
    let deadline = Instant::now() + timeout;
    let mut done: HashMap<String, Instant> = HashMap::new();
    let wanted: std::collections::HashSet<&str> = names.iter().map(String::as_str).collect();
    while done.len() < n {
        match watch.next(deadline).await? {
            None => bail!(
                "{} of {n} pods Running after {}s",
                done.len(),
                timeout.as_secs()
            ),
            Some(WatchEvent::Added(p) | WatchEvent::Modified(p)) => {
                let name = p.name_any();
                if running(&p) && wanted.contains(name.as_str()) && !done.contains_key(&name) {
                    done.insert(name, Instant::now());
                }
            }
            Some(WatchEvent::Deleted(p)) if wanted.contains(p.name_any().as_str()) => {
                bail!("pod {} deleted while starting", p.name_any())
            }
            Some(_) => {}
        }
    }
    creator.await.context("the pod creator")??;
    Ok(latencies(&started, &done))
}

/// Deletes every benchmark pod at once and waits until they are gone.
pub async fn delete_all(c: &Client, timeout: Duration) -> Result<Timed> {
    let api: Api<Pod> = Api::namespaced(c.clone(), NAMESPACE);
    let (mut watch, listed) = Watch::start(&api).await?;
    let mut left: std::collections::HashSet<String> =
        listed.iter().map(ResourceExt::name_any).collect();
    let n = left.len();
    let started: Clock = Arc::new(Mutex::new(HashMap::new()));
    let deleter = {
        let (api, started) = (api.clone(), started.clone());
        let names: Vec<String> = left.iter().cloned().collect();
        tokio::spawn(async move {
            let calls = names.into_iter().map(|name| {
                let (api, started) = (api.clone(), started.clone());
                async move {
                    started
                        .lock()
                        .expect("not poisoned")
                        .insert(name.clone(), Instant::now());
                    match api.delete(&name, &DeleteParams::default()).await {
                        Ok(_) => Ok(()),
                        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                        Err(e) => {
                            Err(anyhow::Error::new(e).context(format!("deleting pod {name}")))
                        }
                    }
                }
            });
            futures::future::try_join_all(calls).await.map(|_| ())
        })
    };
    let deadline = Instant::now() + timeout;
    let mut done: HashMap<String, Instant> = HashMap::new();
    while !left.is_empty() {
        match watch.next(deadline).await? {
            None => bail!(
                "{} of {n} pods still there after {}s",
                left.len(),
                timeout.as_secs()
            ),
            Some(WatchEvent::Deleted(p)) => {
                let name = p.name_any();
                if left.remove(&name) {
                    done.insert(name, Instant::now());
                }
            }
            Some(_) => {}
        }
    }
    deleter.await.context("the pod deleter")??;
    Ok(latencies(&started, &done))
}

/// Churn: waves of `wave` pods created (until Running) and deleted (until
/// gone) for at least `seconds`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Churn {
    /// Pods created and deleted.
    pub pods: usize,
    /// Wall time of the waves, seconds.
    pub seconds: f64,
    /// Each pod's startup latency, milliseconds.
    pub startup_ms: Vec<f64>,
    /// Each pod's delete latency, milliseconds.
    pub delete_ms: Vec<f64>,
}

/// Runs waves until `seconds` have passed (the wave under way finishes).
pub async fn churn(
    c: &Client,
    spec: &Spec,
    seconds: u64,
    wave: usize,
    timeout: Duration,
) -> Result<Churn> {
    let t0 = Instant::now();
    let mut out = Churn::default();
    let mut i = 0;
    while t0.elapsed() < Duration::from_secs(seconds) {
        let up = start(c, spec, wave, &format!("churn{i}"), timeout).await?;
        let down = delete_all(c, timeout).await?;
        out.pods += wave;
        out.startup_ms.extend(up.latencies_ms);
        out.delete_ms.extend(down.latencies_ms);
        i += 1;
    }
    out.seconds = t0.elapsed().as_secs_f64();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_are_bound_and_labelled() {
        let spec = Spec {
            node: "node-1".into(),
            image: "rkube.local/pause:1".into(),
            command: vec![],
            grace_seconds: 1,
        };
        let p = pod(&spec, "p-0").unwrap();
        let s = p.spec.as_ref().unwrap();
        assert_eq!(s.node_name.as_deref(), Some("node-1"));
        assert_eq!(s.containers[0].command, None);
        assert_eq!(p.labels()[LABEL], "1");
        assert_eq!(p.namespace().as_deref(), Some(NAMESPACE));
    }

    #[test]
    fn latencies_pair_calls_with_events() {
        let t = Instant::now();
        let started: Clock = Arc::new(Mutex::new(HashMap::from([
            ("a".to_string(), t),
            ("b".to_string(), t + Duration::from_millis(10)),
        ])));
        let done = HashMap::from([
            ("a".to_string(), t + Duration::from_millis(100)),
            ("b".to_string(), t + Duration::from_millis(250)),
        ]);
        let mut l = latencies(&started, &done);
        l.latencies_ms.sort_by(f64::total_cmp);
        assert_eq!(l.latencies_ms.len(), 2);
        assert!((l.latencies_ms[0] - 100.0).abs() < 1e-6);
        assert!((l.latencies_ms[1] - 240.0).abs() < 1e-6);
        assert!((l.total_ms - 250.0).abs() < 1e-6);
    }
}
