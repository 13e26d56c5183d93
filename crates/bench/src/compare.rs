//! `rkube-bench inprocess`: one workload, rkube and upstream side by side.
//!
//! Writes the workload's cluster file, then runs `rkube-bench simulate`
//! (this binary, a fresh process each run) and `oracle simulate` (upstream's
//! scheduler) on it, alternating, `runs` times each; prints every run, the
//! medians, the ratio and one `SUMMARY` line. Fails when the two did not place
//! the same number of pods (or a run timed out).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde::Deserialize;

use crate::workload::Workload;

/// Options of `inprocess`.
#[derive(Debug, Clone)]
pub struct Options {
    /// Workload name.
    pub workload: String,
    /// Runs per implementation.
    pub runs: usize,
    /// `oracle` binary.
    pub oracle: PathBuf,
    /// KubeSchedulerConfiguration for both.
    pub config: Option<PathBuf>,
    /// Where to write the cluster file (default: a temp file, removed).
    pub keep: Option<PathBuf>,
    /// Check on the first run that the timed loop equals `rkube simulate`.
    pub verify: bool,
    /// Also compare every pod's node with upstream's loop run with one
    /// filter worker (`parallelism: 1`, where upstream is deterministic).
    pub exact: bool,
}

/// One run's JSON (both implementations print these fields).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Sample {
    scheduled: usize,
    unschedulable: usize,
    attempts: usize,
    seconds: f64,
    pods_per_second: f64,
    latency_p50_ms: f64,
    latency_p99_ms: f64,
    peak_rss_bytes: u64,
    #[serde(default)]
    timed_out: bool,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        0.0
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn run_json(mut cmd: Command, what: &str) -> Result<Sample> {
    let out = cmd.output().with_context(|| format!("running {what}"))?;
    if !out.status.success() {
        bail!(
            "{what} failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line).with_context(|| format!("{what} printed {line:?}"))
}

fn mib(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

fn row(run: &str, name: &str, s: &Sample) {
    println!(
        "{run:<7} {name:<9} {:>9} {:>7} {:>8} {:>9.3} {:>10.1} {:>8.3} {:>8.3} {:>8.0} MiB",
        s.scheduled,
        s.unschedulable,
        s.attempts,
        s.seconds,
        s.pods_per_second,
        s.latency_p50_ms,
        s.latency_p99_ms,
        mib(s.peak_rss_bytes)
    );
}

fn med(samples: &[Sample]) -> Sample {
    let f = |g: fn(&Sample) -> f64| median(samples.iter().map(g).collect());
    Sample {
        scheduled: samples[0].scheduled,
        unschedulable: samples[0].unschedulable,
        attempts: f(|s| s.attempts as f64) as usize,
        seconds: f(|s| s.seconds),
        pods_per_second: f(|s| s.pods_per_second),
        latency_p50_ms: f(|s| s.latency_p50_ms),
        latency_p99_ms: f(|s| s.latency_p99_ms),
        peak_rss_bytes: f(|s| s.peak_rss_bytes as f64) as u64,
        timed_out: samples.iter().any(|s| s.timed_out),
    }
}

/// Runs the comparison; `Ok(false)` when the placements disagree.
pub fn inprocess(o: &Options) -> Result<bool> {
    let w = Workload::parse(&o.workload).map_err(anyhow::Error::msg)?;
    if w.churn() {
        bail!("{w}: its churn is API traffic over time; it runs only live (hack/bench live)");
    }
    let runs = o.runs.max(1);
    let (file, temp) = match &o.keep {
        Some(p) => (p.clone(), false),
        None => (
            std::env::temp_dir().join(format!("rkube-bench-{}.json", std::process::id())),
            true,
        ),
    };
    std::fs::write(&file, serde_json::to_string(&w.generate())?)
        .with_context(|| file.display().to_string())?;
    let result = compare(o, &w, runs, &file);
    if temp {
        let _ = std::fs::remove_file(&file);
    }
    result
}

fn compare(o: &Options, w: &Workload, runs: usize, file: &Path) -> Result<bool> {
    let me = std::env::current_exe()?;
    println!(
        "workload {w}: {} nodes, {} bound pods, {} pending pods ({} meant to stay pending); {runs} run(s) each, alternating",
        w.nodes,
        w.init_pods,
        w.pending_pods(),
        w.extra_unschedulable()
    );
    println!(
        "{:<7} {:<9} {:>9} {:>7} {:>8} {:>9} {:>10} {:>8} {:>8} {:>12}",
        "run",
        "impl",
        "scheduled",
        "unsched",
        "attempts",
        "seconds",
        "pods/s",
        "p50 ms",
        "p99 ms",
        "peak RSS"
    );
    let mut rk = Vec::new();
    let mut up = Vec::new();
    for i in 0..runs {
        let mut cmd = Command::new(&me);
        cmd.arg("simulate").arg("--cluster").arg(file);
        if let Some(c) = &o.config {
            cmd.arg("--config").arg(c);
        }
        if let Some(g) = w.feature_gates() {
            cmd.args(["--feature-gates", g]);
        }
        if o.verify && i == 0 {
            cmd.arg("--verify");
        }
        let s = run_json(cmd, "rkube-bench simulate")?;
        row(&format!("{}", i + 1), "rkube", &s);
        rk.push(s);

        let mut cmd = Command::new(&o.oracle);
        cmd.arg("simulate").arg("--cluster").arg(file);
        if let Some(c) = &o.config {
            cmd.arg("--config").arg(c);
        }
        if let Some(g) = w.feature_gates() {
            cmd.args(["--feature-gates", g]);
        }
        let s = run_json(cmd, "oracle simulate")?;
        row(&format!("{}", i + 1), "upstream", &s);
        up.push(s);
    }
    let (r, u) = (med(&rk), med(&up));
    row("median", "rkube", &r);
    row("median", "upstream", &u);
    let ratio = if u.pods_per_second > 0.0 {
        r.pods_per_second / u.pods_per_second
    } else {
        f64::INFINITY
    };
    let counts = |v: &[Sample]| -> Vec<(usize, usize)> {
        v.iter().map(|s| (s.scheduled, s.unschedulable)).collect()
    };
    let same = rk
        .iter()
        .chain(&up)
        .all(|s| s.scheduled == rk[0].scheduled && !s.timed_out);
    if !same {
        println!(
            "MISMATCH: (scheduled, unschedulable) per run: rkube {:?}, upstream {:?}",
            counts(&rk),
            counts(&up)
        );
    }
    println!(
        "SUMMARY {w}: rkube {:.0} pods/s, upstream {:.0} pods/s, ratio {:.1}x; p50 {:.3}/{:.3} ms, p99 {:.3}/{:.3} ms, peak RSS {:.0}/{:.0} MiB (rkube/upstream); placed {}/{} pods: {}",
        r.pods_per_second,
        u.pods_per_second,
        ratio,
        r.latency_p50_ms,
        u.latency_p50_ms,
        r.latency_p99_ms,
        u.latency_p99_ms,
        mib(r.peak_rss_bytes),
        mib(u.peak_rss_bytes),
        rk[0].scheduled,
        up[0].scheduled,
        if same { "same, OK" } else { "DIFFERENT, FAIL" }
    );
    if o.exact {
        return Ok(exact(o, w, file)? && same);
    }
    Ok(same)
}

/// `--exact`: `rkube simulate`'s node for every pod against upstream's
/// ScheduleOne loop with `parallelism: 1` (its filter pass is then
/// deterministic; with more workers it may take another of the equally
/// scored nodes). Untimed. Prints one `EXACT ...` line.
fn exact(o: &Options, w: &Workload, file: &Path) -> Result<bool> {
    let base = match &o.config {
        Some(p) => std::fs::read_to_string(p).with_context(|| p.display().to_string())?,
        None => "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
            .to_string(),
    };
    if base.lines().any(|l| l.starts_with("parallelism:")) {
        bail!("--exact sets parallelism: 1 itself; leave it out of --config");
    }
    let cfg_path = file.with_extension("exact-config.yaml");
    std::fs::write(&cfg_path, format!("{base}\nparallelism: 1\n"))?;
    let cluster = rkube_sim::load::load_cluster(file)?;
    let gates = w.feature_gates();
    let cfg = rkube_sim::load::load_config_gated(Some(&cfg_path), gates.is_some())?;
    let report = rkube_sim::simulate(&cluster, &cfg, &rkube_sim::SimulateOptions::default())?;
    let out = Command::new(&o.oracle)
        .args(["simulate", "--placements", "--cluster"])
        .arg(file)
        .arg("--config")
        .arg(&cfg_path)
        .args(gates.map(|g| ["--feature-gates", g]).into_iter().flatten())
        .output()
        .context("oracle simulate --placements")?;
    let _ = std::fs::remove_file(&cfg_path);
    if !out.status.success() {
        bail!(
            "oracle simulate --placements: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let u: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let theirs: std::collections::HashMap<&str, &str> = u["placements"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| Some((p["pod"].as_str()?, p["node"].as_str()?)))
        .collect();
    let mut differ = Vec::new();
    for p in &report.placements {
        let ours = p.node.as_deref().unwrap_or("");
        if theirs.get(p.pod.as_str()) != Some(&ours) {
            differ.push(format!(
                "{}: rkube {ours:?}, upstream {:?}",
                p.pod,
                theirs.get(p.pod.as_str())
            ));
        }
    }
    let total = report.placements.len();
    println!(
        "EXACT (parallelism 1): {} of {total} pods on the same node as upstream's loop; pods placed on OpportunisticBatching hints: rkube {}, upstream {}; {}",
        total - differ.len(),
        report.batched_pods,
        u["batchedPods"].as_u64().unwrap_or(0),
        if differ.is_empty() { "OK" } else { "DIFFERENT, FAIL" }
    );
    for d in differ.iter().take(10) {
        println!("  {d}");
    }
    Ok(differ.is_empty())
}
