//! The runtime's own floor: the same pods started straight through CRI,
//! with no kubelet — for each pod, `RunPodSandbox`, `CreateContainer` and
//! `StartContainer` on the same containerd and image, all pods at once
//! (a kubelet starts a node's pods in parallel too). A kubelet cannot
//! start a pod faster than this; each kubelet's startup latency is shown
//! against it. Then the same for taking them down, all at once:
//! `StopContainer` (1 s grace, as the benchmark's pods have),
//! `StopPodSandbox` and `RemovePodSandbox` per pod.
//!
//! The kubelet of that containerd must not run meanwhile (a kubelet
//! removes sandboxes that are not its pods'): `hack/bench kubelet` stops
//! it (SIGSTOP) around this.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rkube_cri::{ContainerSpec, CriClient, SandboxSpec};

use super::pods::{Timed, NAMESPACE};

/// What the floor starts.
#[derive(Debug, Clone)]
pub struct Options {
    /// `unix:///…/containerd.sock`.
    pub endpoint: String,
    /// Pods (each a sandbox and one container).
    pub pods: usize,
    /// The container's image (already in the runtime).
    pub image: String,
    /// Its command, if not the image's own.
    pub command: Vec<String>,
    /// Where the containers' logs go (a directory per pod).
    pub log_dir: String,
    /// If set, the pods stay up after they started until this file exists
    /// (at most [`HOLD_LIMIT`]), so that the caller can read what the
    /// start cost the node before the pods are taken down.
    pub hold: Option<std::path::PathBuf>,
}

/// The longest a started floor waits for its hold file.
pub const HOLD_LIMIT: Duration = Duration::from_secs(300);

/// A started pod: its sandbox and container.
struct Started {
    sandbox: String,
    container: String,
}

async fn one(cri: &CriClient, o: &Options, i: usize) -> Result<(Started, f64)> {
    let name = format!("floor-{i}");
    let uid = format!("rkube-bench-floor-{}-{i}", std::process::id());
    let sandbox = SandboxSpec {
        name: name.clone(),
        namespace: "bench-floor".into(),
        uid: uid.clone(),
        hostname: name.clone(),
        log_directory: format!("{}/{uid}", o.log_dir),
        labels: HashMap::from([("rkube-bench-floor".to_string(), "1".to_string())]),
        ..Default::default()
    }
    .to_config();
    let container = ContainerSpec {
        name: "main".into(),
        image: o.image.clone(),
        command: o.command.clone(),
        log_path: "main/0.log".into(),
        ..Default::default()
    }
    .to_config();
    let t = Instant::now();
    let id = cri
        .run_pod_sandbox(sandbox.clone(), "")
        .await
        .with_context(|| format!("RunPodSandbox {name}"))?;
    let c = cri
        .create_container(&id, container, sandbox)
        .await
        .with_context(|| format!("CreateContainer in {name}"))?;
    cri.start_container(&c)
        .await
        .with_context(|| format!("StartContainer in {name}"))?;
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    let started = Started {
        sandbox: id,
        container: c,
    };
    Ok((started, ms))
}

/// Takes a started pod down as a kubelet does; milliseconds. A container
/// that does not stop is killed with its sandbox, as a kubelet's
/// `StopPodSandbox` does (containerd 1.6 under this load sometimes loses
/// a shim's connection).
async fn down(cri: &CriClient, p: &Started) -> Result<f64> {
    let t = Instant::now();
    if let Err(e) = cri
        .stop_container(&p.container, Duration::from_secs(1))
        .await
    {
        eprintln!("floor: StopContainer {}: {e:#}", p.container);
    }
    cri.stop_pod_sandbox(&p.sandbox)
        .await
        .context("StopPodSandbox")?;
    cri.remove_pod_sandbox(&p.sandbox)
        .await
        .context("RemovePodSandbox")?;
    Ok(t.elapsed().as_secs_f64() * 1000.0)
}

/// Counts the floor's CRI calls by operation.
#[derive(Debug, Default)]
pub struct Calls(std::sync::Mutex<std::collections::BTreeMap<&'static str, u64>>);

impl rkube_cri::observe::Observer for Calls {
    fn observe(&self, operation: &'static str, _: Duration, _: bool) {
        *self
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(operation)
            .or_default() += 1;
    }
}

impl Calls {
    /// The calls so far, by operation.
    pub fn snapshot(&self) -> std::collections::BTreeMap<&'static str, u64> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Starts the pods and times them, tells `on_started` the startup timings
/// and the CRI calls that took (when every pod started), waits for the
/// hold file if there is one, then takes them down and times that
/// (startup, delete); every sandbox it made is removed, also when a start
/// failed.
pub async fn run(
    o: &Options,
    on_started: impl FnOnce(&Timed, &std::collections::BTreeMap<&'static str, u64>),
) -> Result<(Timed, Timed)> {
    let calls = std::sync::Arc::new(Calls::default());
    let options = rkube_cri::ConnectOptions {
        observer: Some(calls.clone()),
        ..Default::default()
    };
    let cri = CriClient::connect_with(&o.endpoint, options)
        .await
        .with_context(|| format!("connecting to {}", o.endpoint))?;
    let t0 = Instant::now();
    let results = futures::future::join_all((0..o.pods).map(|i| one(&cri, o, i))).await;
    let total_ms = t0.elapsed().as_secs_f64() * 1000.0;
    if results.iter().all(|r| r.is_ok()) {
        let up = Timed {
            latencies_ms: results.iter().flatten().map(|(_, ms)| *ms).collect(),
            total_ms,
        };
        on_started(&up, &calls.snapshot());
        if let Some(hold) = &o.hold {
            wait_for(hold).await;
        }
    }
    let started: Vec<&Started> = results.iter().flatten().map(|(s, _)| s).collect();
    let t1 = Instant::now();
    let downs = futures::future::join_all(started.iter().map(|p| down(&cri, p))).await;
    let none_started = started.is_empty();
    let down_total_ms = t1.elapsed().as_secs_f64() * 1000.0;
    // Clean up every sandbox labelled ours, started or half-started.
    let filter = rkube_cri::v1::PodSandboxFilter {
        label_selector: HashMap::from([("rkube-bench-floor".to_string(), "1".to_string())]),
        ..Default::default()
    };
    let ours = cri
        .list_pod_sandboxes(Some(filter))
        .await
        .unwrap_or_default();
    futures::future::join_all(ours.iter().map(|s| async {
        let _ = cri.stop_pod_sandbox(&s.id).await;
        let _ = cri.remove_pod_sandbox(&s.id).await;
    }))
    .await;
    let mut latencies_ms = Vec::with_capacity(o.pods);
    for r in results {
        latencies_ms.push(r?.1);
    }
    let startup = Timed {
        latencies_ms,
        total_ms,
    };
    // A pod that could not be taken down (its sandbox is removed by the
    // clean-up above) is left out of the delete timings, and said.
    let mut down_ms = Vec::with_capacity(downs.len());
    for d in downs {
        match d {
            Ok(ms) => down_ms.push(ms),
            Err(e) => eprintln!("floor: taking a pod down: {e:#}"),
        }
    }
    anyhow::ensure!(
        !down_ms.is_empty() || none_started,
        "floor: no pod could be taken down"
    );
    let delete = Timed {
        latencies_ms: down_ms,
        total_ms: down_total_ms,
    };
    Ok((startup, delete))
}

/// Waits until `path` exists, polling every 50 ms for at most
/// [`HOLD_LIMIT`].
async fn wait_for(path: &std::path::Path) {
    let t = Instant::now();
    while !path.exists() && t.elapsed() < HOLD_LIMIT {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the runtime at `endpoint` holds no sandbox of the
/// benchmark's pods (namespace [`NAMESPACE`]; a kubelet removes a deleted
/// pod's sandbox after the API has forgotten the pod: rkube's at once,
/// upstream's at its next container GC; the node's add-ons keep theirs),
/// polling every 200 ms for at most `timeout`. Returns the seconds waited
/// and the sandboxes left (0 unless the timeout passed), so that the next
/// measurement starts on a runtime with nothing to clean up.
pub async fn empty(endpoint: &str, timeout: Duration) -> Result<(f64, usize)> {
    let cri = CriClient::connect(endpoint)
        .await
        .with_context(|| format!("connecting to {endpoint}"))?;
    let t = Instant::now();
    loop {
        let left = cri
            .list_pod_sandboxes(None)
            .await?
            .iter()
            .filter(|s| {
                s.metadata
                    .as_ref()
                    .is_some_and(|m| m.namespace == NAMESPACE)
            })
            .count();
        if left == 0 || t.elapsed() >= timeout {
            return Ok((t.elapsed().as_secs_f64(), left));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
