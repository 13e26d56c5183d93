//! `rkube-bench live`: upstream kube-scheduler and `rkube scheduler`
//! against the same genuine API server (rkube-testcp), on one workload.
//!
//! Nodes (fake: no kubelets) and the workload's initial pods are created
//! once. Then, alternately for each scheduler and run: every pending pod of
//! the workload is created while no scheduler runs, the scheduler is started
//! with the same KubeSchedulerConfiguration (client QPS/burst from the
//! options, reported), and a pod watch records when each pod gets its node.
//! The pending pods are deleted again before the next run. Throughput is
//! pods bound ÷ wall time, from starting the scheduler process to the last
//! binding seen on the watch: start-up and cache sync count for both (the
//! first binding alone is not a fair start: a burst of bindings lands in
//! one watch batch).
//!
//! Each run is also profiled where it matters on a machine whose cores
//! the API server shares with the scheduler: the CPU time of every process
//! from the scheduler's start to the last binding ([`crate::cpu`]), the
//! machine's idle share and the time to the first binding.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{
    DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::{Api, Client, ResourceExt};
use rkube_testcp::ControlPlane;
use serde_json::{json, Value};

use crate::workload::Workload;

/// Options of `live`.
#[derive(Debug, Clone)]
pub struct Options {
    /// Workload name.
    pub workload: String,
    /// Runs per scheduler.
    pub runs: usize,
    /// The `rkube` binary.
    pub rkube: PathBuf,
    /// Client QPS for both schedulers (kube-scheduler's default 50).
    pub qps: f32,
    /// Client burst for both (default 100).
    pub burst: i32,
    /// Give up on a run after this long.
    pub timeout: Duration,
    /// Also run the ceiling: bindings to precomputed nodes with no
    /// scheduler ([`crate::ceiling`]).
    pub ceiling: bool,
    /// Keep each run's scheduler log here (`RUN-SCHEDULER.log`).
    pub logs: Option<PathBuf>,
}

/// One run's result.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Pods bound.
    pub bound: usize,
    /// Pods bound per second of wall time.
    pub pods_per_second: f64,
    /// Scheduler start → last binding.
    pub wall: Duration,
    /// Churn objects created and deleted during the run (churn workloads).
    pub churn: Option<(usize, usize)>,
    /// Scheduler start → first binding (start-up and cache sync).
    pub first: Option<Duration>,
    /// CPU time of each process from the scheduler's start to the last
    /// binding, and the machine's idle share ([`crate::cpu`]).
    pub cpu: crate::cpu::Usage,
}

const LABEL: &str = "rkube-bench";
/// The ceiling that also writes a `Scheduled` Event per binding.
const CEILING_EVENTS: &str = "ceiling+ev";
/// Label on the churn's objects.
const CHURN_LABEL: &str = "rkube-bench-churn";

async fn client(path: &Path) -> Result<Client> {
    let kc = kube::config::Kubeconfig::read_from(path)?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    Ok(Client::try_from(cfg)?)
}

fn split(cluster: &Value) -> (Vec<Value>, Vec<Value>, Vec<Value>, Vec<Value>) {
    let (mut setup, mut nodes, mut bound, mut pending) = (vec![], vec![], vec![], vec![]);
    for item in cluster["items"].as_array().into_iter().flatten() {
        match item["kind"].as_str() {
            Some("Node") => nodes.push(item.clone()),
            Some("Pod") if item["spec"]["nodeName"].is_string() => bound.push(item.clone()),
            Some("Pod") => pending.push(item.clone()),
            _ => setup.push(item.clone()),
        }
    }
    (setup, nodes, bound, pending)
}

async fn create_nodes(c: &Client, nodes: &[Value]) -> Result<()> {
    let api: Api<Node> = Api::all(c.clone());
    futures::stream::iter(nodes.iter().cloned())
        .map(|n| {
            let api = api.clone();
            async move {
                let mut obj = n.clone();
                let status = obj["status"].take();
                let node: Node = serde_json::from_value(obj)?;
                let name = node.name_any();
                api.create(&PostParams::default(), &node).await?;
                let mut status = status;
                status["conditions"] = json!([{"type": "Ready", "status": "True",
                    "reason": "KubeletReady", "message": "rkube-bench fake node"}]);
                api.patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "status": status })),
                )
                .await?;
                Ok::<_, anyhow::Error>(())
            }
        })
        .buffer_unordered(32)
        .try_for_each(|_| async { Ok(()) })
        .await
}

async fn create_pods(c: &Client, pods: &[Value]) -> Result<()> {
    futures::stream::iter(pods.iter().cloned())
        .map(|p| {
            let c = c.clone();
            async move {
                let mut p = p;
                p["metadata"]["labels"][LABEL] = json!("1");
                // No kubelets: nothing would mount a service account token.
                p["spec"]["automountServiceAccountToken"] = json!(false);
                // Fake nodes get the unreachable taints after ~50 s.
                let tol = p["spec"]["tolerations"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                let mut tol = tol;
                tol.push(json!({"key": "node.kubernetes.io/unreachable", "operator": "Exists"}));
                tol.push(json!({"key": "node.kubernetes.io/not-ready", "operator": "Exists"}));
                p["spec"]["tolerations"] = json!(tol);
                p["status"] = json!({});
                let pod: Pod = serde_json::from_value(p)?;
                let ns = pod.namespace().unwrap_or_else(|| "default".into());
                Api::<Pod>::namespaced(c, &ns)
                    .create(&PostParams::default(), &pod)
                    .await?;
                Ok::<_, anyhow::Error>(())
            }
        })
        .buffer_unordered(64)
        .try_for_each(|_| async { Ok(()) })
        .await
}

async fn delete_pending(c: &Client, namespaces: &[String], keep: &HashSet<String>) -> Result<()> {
    for ns in namespaces {
        let api: Api<Pod> = Api::namespaced(c.clone(), ns);
        let pods = api
            .list(&ListParams::default().labels(&format!("{LABEL}=1")))
            .await?;
        futures::stream::iter(pods.items)
            .filter(|p| futures::future::ready(!keep.contains(&p.name_any())))
            .map(|p| {
                let api = api.clone();
                async move {
                    let _ = api
                        .delete(&p.name_any(), &DeleteParams::default().grace_period(0))
                        .await;
                }
            })
            .buffer_unordered(64)
            .collect::<Vec<_>>()
            .await;
    }
    Ok(())
}

fn config_file(dir: &Path, o: &Options) -> Result<PathBuf> {
    let path = dir.join("bench-scheduler.yaml");
    std::fs::write(
        &path,
        format!(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nleaderElection:\n  leaderElect: false\nclientConnection:\n  qps: {}\n  burst: {}\n",
            o.qps, o.burst
        ),
    )?;
    Ok(path)
}

enum Running {
    Upstream,
    Process(Child),
}

/// The control plane's processes, and the bench itself (its watch and the
/// churn), whose CPU time a run counts.
fn counted(cp: &ControlPlane) -> Vec<(String, u32)> {
    let mut v: Vec<(String, u32)> = ["kube-apiserver", "etcd", "kube-controller-manager"]
        .iter()
        .filter_map(|n| {
            crate::cpu::pid_file(&cp.dir().join(format!("run/{n}.pid"))).map(|p| (n.to_string(), p))
        })
        .collect();
    v.push(("bench".into(), std::process::id()));
    v
}

/// The pid of the running scheduler (or binder).
fn pid_of(cp: &ControlPlane, r: &Running) -> Option<u32> {
    match r {
        Running::Upstream => crate::cpu::pid_file(&cp.dir().join("run/kube-scheduler.pid")),
        Running::Process(c) => Some(c.id()),
    }
}

/// The placements file of the ceiling runs, in the control plane's folder.
fn placements_file(cp: &ControlPlane) -> PathBuf {
    cp.dir().join("ceiling-placements.json")
}

fn start(cp: &ControlPlane, which: &str, o: &Options, cfg: &Path) -> Result<Running> {
    if which == "upstream" {
        cp.start_upstream_scheduler(Some(cfg), &[])?;
        return Ok(Running::Upstream);
    }
    if which.starts_with("ceiling") {
        let log = std::fs::File::create(cp.dir().join("logs/rkube-bench-bind.log"))?;
        let me = std::env::current_exe().context("finding rkube-bench itself")?;
        let mut cmd = Command::new(me);
        cmd.arg("bind");
        if which == CEILING_EVENTS {
            cmd.arg("--events");
        }
        let child = cmd
            .arg("--kubeconfig")
            .arg(cp.scheduler_kubeconfig())
            .arg("--placements")
            .arg(placements_file(cp))
            .args(["--qps", &o.qps.to_string()])
            .args(["--burst", &o.burst.to_string()])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting rkube-bench bind")?;
        return Ok(Running::Process(child));
    }
    let log = std::fs::File::create(cp.dir().join("logs/rkube-bench.log"))?;
    let child = Command::new(&o.rkube)
        .arg("scheduler")
        .arg("--kubeconfig")
        .arg(cp.scheduler_kubeconfig())
        .arg("--config")
        .arg(cfg)
        .arg("--secure-port=0")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting {}", o.rkube.display()))?;
    Ok(Running::Process(child))
}

fn stop(cp: &ControlPlane, r: Running) -> Result<()> {
    match r {
        Running::Upstream => cp.stop_upstream_scheduler(),
        Running::Process(mut c) => {
            let _ = Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status();
            let _ = c.wait();
            Ok(())
        }
    }
}

/// What one run schedules.
struct Measured<'a> {
    /// The pending pods to create.
    pending: &'a [Value],
    /// How many of them can be bound.
    expect: usize,
    /// Churn while the scheduler runs ([`churn`]).
    churn: bool,
}

/// What the churn did in one run.
#[derive(Debug, Default)]
struct ChurnCount {
    created: std::sync::atomic::AtomicUsize,
    deleted: std::sync::atomic::AtomicUsize,
}

/// `recreate` for one object: deletes it when it exists, else creates it.
async fn recreate<K>(
    api: &Api<K>,
    current: Option<String>,
    object: Value,
    count: &ChurnCount,
) -> Option<String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    match current {
        Some(name) => {
            if api
                .delete(&name, &DeleteParams::default().grace_period(0))
                .await
                .is_ok()
            {
                count.deleted.fetch_add(1, Ordering::Relaxed);
            }
            None
        }
        None => {
            let obj: K = serde_json::from_value(object).ok()?;
            let name = api
                .create(&PostParams::default(), &obj)
                .await
                .ok()
                .map(|o| o.name_any());
            if name.is_some() {
                count.created.fetch_add(1, Ordering::Relaxed);
            }
            name
        }
    }
}

/// scheduler_perf's `churn` op as SchedulingWithMixedChurn runs it (mode
/// `recreate`, `number: 1`, every 1000 ms): a node that fits no pod
/// (templates/churn/node-default.yaml), a priority-10 9-CPU pod that fits
/// no node (pod-high-priority-large-cpu.yaml) and a Service
/// (churn/service-default.yaml), each created on one tick and deleted on
/// the next, until the task is aborted.
async fn churn(c: Client, count: Arc<ChurnCount>) {
    let nodes: Api<Node> = Api::all(c.clone());
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    let services: Api<Service> = Api::namespaced(c, "default");
    let labels = json!({ CHURN_LABEL: "1" });
    let node = json!({
        "metadata": {"generateName": "node-churn-", "labels": labels},
        "status": {"capacity": {"pods": "0"},
                   "conditions": [{"type": "Ready", "status": "True"}], "phase": "Running"}
    });
    let pod = json!({
        "metadata": {"generateName": "pod-h-", "namespace": "default", "labels": labels},
        "spec": {"priorityClassName": "bench-high", "automountServiceAccountToken": false,
                 "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10.1",
                                 "ports": [{"containerPort": 80}],
                                 "resources": {"requests": {"cpu": "9", "memory": "500Mi"}}}]}
    });
    let service = json!({
        "metadata": {"generateName": "service-churn-", "namespace": "default", "labels": labels},
        "spec": {"selector": {"app": "foo"},
                 "ports": [{"protocol": "TCP", "port": 8080, "targetPort": 8080}]}
    });
    let (mut n, mut p, mut s) = (None, None, None);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await; // a Go ticker's first tick comes after one interval
    loop {
        tick.tick().await;
        n = recreate(&nodes, n, node.clone(), &count).await;
        p = recreate(&pods, p, pod.clone(), &count).await;
        s = recreate(&services, s, service.clone(), &count).await;
    }
}

/// Deletes whatever the churn left.
async fn delete_churn(c: &Client) -> Result<()> {
    let lp = ListParams::default().labels(&format!("{CHURN_LABEL}=1"));
    let dp = DeleteParams::default().grace_period(0);
    let nodes: Api<Node> = Api::all(c.clone());
    for n in nodes.list(&lp).await? {
        let _ = nodes.delete(&n.name_any(), &dp).await;
    }
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    for p in pods.list(&lp).await? {
        let _ = pods.delete(&p.name_any(), &dp).await;
    }
    let services: Api<Service> = Api::namespaced(c.clone(), "default");
    for s in services.list(&lp).await? {
        let _ = services.delete(&s.name_any(), &dp).await;
    }
    Ok(())
}

/// One run: creates the pending pods, starts the scheduler (and the churn),
/// waits for `expect` bindings.
async fn one_run(
    cp: &ControlPlane,
    c: &Client,
    which: &str,
    o: &Options,
    cfg: &Path,
    m: &Measured<'_>,
) -> Result<Sample> {
    let (pending, expect) = (m.pending, m.expect);
    create_pods(c, pending).await?;
    let names: HashSet<String> = pending
        .iter()
        .filter_map(|p| p["metadata"]["name"].as_str().map(String::from))
        .collect();
    let api: Api<Pod> = Api::all(c.clone());
    let list = api
        .list(&ListParams::default().labels(&format!("{LABEL}=1")))
        .await?;
    let mut stream = api
        .watch(
            &WatchParams::default()
                .labels(&format!("{LABEL}=1"))
                .timeout(290),
            &list.metadata.resource_version.unwrap_or_default(),
        )
        .await?
        .boxed();
    let t0 = Instant::now();
    let interval = crate::cpu::Interval::start(&counted(cp));
    let running = start(cp, which, o, cfg)?;
    let churned = Arc::new(ChurnCount::default());
    let churner = m
        .churn
        .then(|| tokio::spawn(churn(c.clone(), churned.clone())));
    // The watch may fail; the churn and the scheduler are stopped either way.
    let watched = async {
        let mut bound: HashSet<String> = HashSet::new();
        let (mut first, mut last): (Option<Instant>, Option<Instant>) = (None, None);
        let deadline = t0 + o.timeout;
        while bound.len() < expect {
            let left = deadline.saturating_duration_since(Instant::now());
            let ev = match tokio::time::timeout(left, stream.try_next()).await {
                Err(_) => break,
                Ok(Ok(Some(ev))) => ev,
                Ok(Ok(None)) => {
                    stream = api
                        .watch(&WatchParams::default().labels(&format!("{LABEL}=1")), "0")
                        .await?
                        .boxed();
                    continue;
                }
                Ok(Err(e)) => bail!("watching pods: {e}"),
            };
            if let WatchEvent::Modified(p) | WatchEvent::Added(p) = ev {
                let name = p.name_any();
                if names.contains(&name)
                    && p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
                    && bound.insert(name)
                {
                    last = Some(Instant::now());
                    first = first.or(last);
                }
            }
        }
        Ok::<_, anyhow::Error>((bound, first, last))
    }
    .await;
    // Counted up to here: the last binding, or the timeout.
    let scheduler = pid_of(cp, &running).map(|p| ("scheduler".to_string(), p));
    let cpu = interval.end(scheduler.as_slice());
    if let Some(h) = churner {
        h.abort();
        let _ = h.await;
        if let Err(e) = delete_churn(c).await {
            eprintln!("warning: deleting the churn's objects: {e:#}");
        }
    }
    stop(cp, running)?;
    let (bound, first, last) = watched?;
    let last = last.unwrap_or(t0);
    let wall = last.duration_since(t0);
    Ok(Sample {
        bound: bound.len(),
        pods_per_second: bound.len() as f64 / wall.as_secs_f64().max(1e-6),
        wall,
        churn: m.churn.then(|| {
            (
                churned.created.load(Ordering::Relaxed),
                churned.deleted.load(Ordering::Relaxed),
            )
        }),
        first: first.map(|f| f.duration_since(t0)),
        cpu,
    })
}

/// Copies the log of the scheduler (or binder) that just ran to `dir`.
fn keep_log(cp: &ControlPlane, dir: &Path, run: usize, which: &str) -> Result<()> {
    let from = match which {
        "upstream" => "kube-scheduler.log",
        "ceiling" | CEILING_EVENTS => "rkube-bench-bind.log",
        _ => "rkube-bench.log",
    };
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let to = dir.join(format!("{run}-{which}.log"));
    std::fs::copy(cp.dir().join("logs").join(from), &to)
        .with_context(|| format!("keeping the log as {}", to.display()))?;
    Ok(())
}

/// One run's CPU profile: seconds per process, idle share, first binding.
fn cpu_line(s: &Sample) -> String {
    let procs: Vec<String> = s
        .cpu
        .seconds
        .iter()
        .map(|(n, t)| format!("{n} {t:.2}"))
        .collect();
    format!(
        "cpu s: {}; idle {}; first binding {}",
        procs.join(", "),
        s.cpu
            .idle
            .map_or("?".into(), |i| format!("{:.0} %", 100.0 * i)),
        s.first
            .map_or("none".into(), |f| format!("{:.2} s", f.as_secs_f64()))
    )
}

/// Medians over runs of each process's CPU milliseconds per bound pod.
fn cpu_per_pod(samples: &[Sample]) -> Vec<(String, f64)> {
    let Some(first) = samples.first() else {
        return vec![];
    };
    first
        .cpu
        .seconds
        .iter()
        .map(|(name, _)| {
            let per_pod = samples
                .iter()
                .map(|s| {
                    let t = s
                        .cpu
                        .seconds
                        .iter()
                        .find(|(n, _)| n == name)
                        .map_or(0.0, |x| x.1);
                    1000.0 * t / s.bound.max(1) as f64
                })
                .collect();
            (name.clone(), median(per_pod))
        })
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Runs the comparison; `Ok(false)` when a scheduler did not bind every
/// schedulable pod in time.
pub async fn live(o: &Options) -> Result<bool> {
    let w = Workload::parse(&o.workload).map_err(anyhow::Error::msg)?;
    if w.feature_gates().is_some() {
        bail!("{w}: needs pod groups, which rkube scheduler does not schedule yet; it runs in process only (hack/bench inprocess)");
    }
    let cluster = w.generate();
    let (setup, nodes, bound, pending) = split(&cluster);
    let expect = pending.len() - w.extra_unschedulable();
    eprintln!("starting a control plane (hack/control-plane)...");
    let cp = ControlPlane::start()?;
    let c = client(cp.kubeconfig()).await?;
    for item in &setup {
        match item["kind"].as_str() {
            Some("Namespace") => {
                let ns: Namespace = serde_json::from_value(item.clone())?;
                Api::<Namespace>::all(c.clone())
                    .create(&PostParams::default(), &ns)
                    .await?;
            }
            Some("PriorityClass") => {
                let pc: PriorityClass = serde_json::from_value(item.clone())?;
                Api::<PriorityClass>::all(c.clone())
                    .create(&PostParams::default(), &pc)
                    .await?;
            }
            _ => {}
        }
    }
    let t = Instant::now();
    create_nodes(&c, &nodes).await?;
    create_pods(&c, &bound).await?;
    eprintln!(
        "{} nodes and {} initial pods created in {:.1?}; {} pending pods per run ({expect} schedulable)",
        nodes.len(),
        bound.len(),
        t.elapsed(),
        pending.len()
    );
    let keep: HashSet<String> = bound
        .iter()
        .filter_map(|p| p["metadata"]["name"].as_str().map(String::from))
        .collect();
    let mut namespaces: Vec<String> = pending
        .iter()
        .map(|p| {
            p["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_string()
        })
        .collect();
    namespaces.sort();
    namespaces.dedup();
    let cfg = config_file(cp.dir(), o)?;
    println!(
        "workload {}  client qps {} burst {} (both schedulers){}",
        o.workload,
        o.qps,
        o.burst,
        if w.churn() {
            "  churn: a node, a pod and a Service recreated every second"
        } else {
            ""
        }
    );
    let placed = if o.ceiling {
        let p = crate::ceiling::placements(&cluster)?;
        crate::ceiling::write_placements(&placements_file(&cp), &p)?;
        println!(
            "ceiling: {} bindings to the nodes rkube's simulator chose, no scheduler",
            p.len()
        );
        p.len()
    } else {
        0
    };
    let which: &[&str] = if o.ceiling {
        &["upstream", "rkube", "ceiling", CEILING_EVENTS]
    } else {
        &["upstream", "rkube"]
    };
    println!(
        "{:<7} {:<10} {:>7} {:>10} {:>9}",
        "RUN", "SCHEDULER", "BOUND", "PODS/S", "WALL S"
    );
    let mut results: Vec<Vec<Sample>> = vec![Vec::new(); which.len()];
    let mut ok = true;
    for run in 0..o.runs {
        for (i, which) in which.iter().enumerate() {
            let expect = if which.starts_with("ceiling") {
                placed
            } else {
                expect
            };
            let measured = Measured {
                pending: &pending,
                expect,
                churn: w.churn(),
            };
            let s = one_run(&cp, &c, which, o, &cfg, &measured).await?;
            println!(
                "{:<7} {:<10} {:>7} {:>10.1} {:>9.2}",
                run + 1,
                which,
                s.bound,
                s.pods_per_second,
                s.wall.as_secs_f64()
            );
            println!("        {}", cpu_line(&s));
            if let Some((created, deleted)) = s.churn {
                println!(
                    "        churn during the run: {created} objects created, {deleted} deleted"
                );
            }
            if s.bound < expect {
                eprintln!(
                    "{which}: only {} of {expect} pods bound in {:?}",
                    s.bound, o.timeout
                );
                ok = false;
            }
            if let Some(dir) = &o.logs {
                keep_log(&cp, dir, run + 1, which)?;
            }
            results[i].push(s);
            delete_pending(&c, &namespaces, &keep).await?;
            // Wait for the deletions to land before the next run.
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }
    println!("median CPU ms per bound pod (start to last binding):");
    for (i, which) in which.iter().enumerate() {
        let per: Vec<String> = cpu_per_pod(&results[i])
            .iter()
            .map(|(n, ms)| format!("{n} {ms:.3}"))
            .collect();
        let idle = median(results[i].iter().filter_map(|s| s.cpu.idle).collect());
        let first = median(
            results[i]
                .iter()
                .filter_map(|s| s.first.map(|f| f.as_secs_f64()))
                .collect(),
        );
        println!(
            "        {which:<10} {}; idle {:.0} %; first binding {first:.2} s",
            per.join(", "),
            100.0 * idle
        );
    }
    let rate = |i: usize| median(results[i].iter().map(|s| s.pods_per_second).collect());
    let wall = |i: usize| median(results[i].iter().map(|s| s.wall.as_secs_f64()).collect());
    let (up, rk, up_wall, rk_wall) = (rate(0), rate(1), wall(0), wall(1));
    println!("median  upstream   {up:>17.1} {up_wall:>9.2}");
    println!("median  rkube      {rk:>17.1} {rk_wall:>9.2}");
    let mut summary = format!(
        "SUMMARY live workload={} qps={} burst={} upstream_pods_per_s={up:.1} rkube_pods_per_s={rk:.1} ratio={:.2} upstream_wall_s={up_wall:.2} rkube_wall_s={rk_wall:.2}",
        o.workload,
        o.qps,
        o.burst,
        if up > 0.0 { rk / up } else { 0.0 }
    );
    if o.ceiling {
        let (ce, ce_wall, cev, cev_wall) = (rate(2), wall(2), rate(3), wall(3));
        let pct = |x: f64, of: f64| if of > 0.0 { 100.0 * x / of } else { 0.0 };
        println!("median  ceiling    {ce:>17.1} {ce_wall:>9.2}");
        println!("median  ceiling+ev {cev:>17.1} {cev_wall:>9.2}");
        println!(
            "of the ceiling (bindings only): upstream {:.0} %, rkube {:.0} %",
            pct(up, ce),
            pct(rk, ce)
        );
        println!(
            "of the ceiling with an Event per binding: upstream {:.0} %, rkube {:.0} %",
            pct(up, cev),
            pct(rk, cev)
        );
        summary.push_str(&format!(
            " ceiling_pods_per_s={ce:.1} upstream_pct_of_ceiling={:.1} rkube_pct_of_ceiling={:.1} ceiling_events_pods_per_s={cev:.1} upstream_pct_of_ceiling_events={:.1} rkube_pct_of_ceiling_events={:.1}",
            pct(up, ce),
            pct(rk, ce),
            pct(up, cev),
            pct(rk, cev)
        ));
    }
    println!("{summary}");
    Ok(ok)
}
