//! Times rkube's scheduling loop on a cluster file, in process, and compares
//! it with upstream's (`hack/bench` calls this).
//!
//!   rkube-bench simulate --cluster FILE [--config FILE] [--seed N] [--latencies] [--verify] [--feature-gates GenericWorkload=true]
//!   rkube-bench inprocess --workload W --oracle PATH [--runs K] [--config FILE] [--keep FILE] [--no-verify] [--exact]
//!   rkube-bench live --workload W --rkube PATH [--runs K] [--qps Q] [--burst B] [--timeout SECONDS] [--ceiling] [--logs DIR]
//!   rkube-bench bind --kubeconfig FILE --placements FILE [--qps Q] [--burst B] [--events]
//!   rkube-bench kubelet order|start|delete|churn|floor|report … (see `rkube_bench::kubelet::cli`)
//!
//! Prints one JSON line with the same fields as `oracle simulate`:
//! {"scheduled","unschedulable","pending","attempts","seconds","podsPerSecond",
//!  "latencyP50Ms","latencyP99Ms","peakRssBytes"[,"latenciesMs"]}.
//! Only the loop is timed (not loading the file or building the snapshot).
//! `--verify` also runs `rkube_sim::simulate` (what `rkube simulate` runs)
//! and fails unless it placed every pod on the same node.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use rkube_bench::compare;
use rkube_bench::run::run;

const USAGE: &str = "usage:
  rkube-bench simulate --cluster FILE [--config FILE] [--seed N] [--latencies] [--verify] [--feature-gates GenericWorkload=true]
  rkube-bench inprocess --workload W --oracle PATH [--runs K] [--config FILE] [--keep FILE] [--no-verify] [--exact]
  rkube-bench live --workload W --rkube PATH [--runs K] [--qps Q] [--burst B] [--timeout SECONDS] [--ceiling] [--logs DIR]
  rkube-bench bind --kubeconfig FILE --placements FILE [--qps Q] [--burst B] [--events]
  rkube-bench kubelet order|start|delete|churn|floor|report … (rkube-bench kubelet --help)";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("simulate") => simulate(&args[1..]),
        Some("inprocess") => {
            if !inprocess(&args[1..])? {
                std::process::exit(1);
            }
            Ok(())
        }
        Some("live") => {
            if !live(&args[1..])? {
                std::process::exit(1);
            }
            Ok(())
        }
        Some("bind") => bind(&args[1..]),
        Some("kubelet") => rkube_bench::kubelet::cli::main(&args[1..]),
        Some("-h" | "--help") => {
            println!("{USAGE}");
            Ok(())
        }
        _ => bail!("{USAGE}"),
    }
}

fn inprocess(args: &[String]) -> Result<bool> {
    let mut o = compare::Options {
        workload: String::new(),
        runs: 3,
        oracle: PathBuf::new(),
        config: None,
        keep: None,
        verify: true,
        exact: false,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--workload" => o.workload = val()?.clone(),
            "--runs" => o.runs = val()?.parse()?,
            "--oracle" => o.oracle = PathBuf::from(val()?),
            "--config" => o.config = Some(PathBuf::from(val()?)),
            "--keep" => o.keep = Some(PathBuf::from(val()?)),
            "--no-verify" => o.verify = false,
            "--exact" => o.exact = true,
            other => bail!("unexpected argument {other:?}\n{USAGE}"),
        }
    }
    if o.workload.is_empty() || o.oracle.as_os_str().is_empty() {
        bail!("inprocess needs --workload and --oracle\n{USAGE}");
    }
    compare::inprocess(&o)
}

fn live(args: &[String]) -> Result<bool> {
    let mut o = rkube_bench::live::Options {
        workload: String::new(),
        runs: 1,
        rkube: PathBuf::new(),
        qps: 50.0,
        burst: 100,
        timeout: std::time::Duration::from_secs(600),
        ceiling: false,
        logs: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--workload" => o.workload = val()?.clone(),
            "--runs" => o.runs = val()?.parse()?,
            "--rkube" => o.rkube = PathBuf::from(val()?),
            "--qps" => o.qps = val()?.parse()?,
            "--burst" => o.burst = val()?.parse()?,
            "--timeout" => o.timeout = std::time::Duration::from_secs(val()?.parse()?),
            "--ceiling" => o.ceiling = true,
            "--logs" => o.logs = Some(PathBuf::from(val()?)),
            other => bail!("unexpected argument {other:?}\n{USAGE}"),
        }
    }
    if o.workload.is_empty() || o.rkube.as_os_str().is_empty() {
        bail!("live needs --workload and --rkube\n{USAGE}");
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(rkube_bench::live::live(&o))
}

/// The live ceiling's binder (started by `live --ceiling`): exit 1 when a
/// binding failed.
fn bind(args: &[String]) -> Result<()> {
    let mut o = rkube_bench::ceiling::BindOptions {
        kubeconfig: PathBuf::new(),
        placements: PathBuf::new(),
        qps: 50.0,
        burst: 100,
        events: false,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--kubeconfig" => o.kubeconfig = PathBuf::from(val()?),
            "--placements" => o.placements = PathBuf::from(val()?),
            "--events" => o.events = true,
            "--qps" => o.qps = val()?.parse()?,
            "--burst" => o.burst = val()?.parse()?,
            other => bail!("unexpected argument {other:?}\n{USAGE}"),
        }
    }
    if o.kubeconfig.as_os_str().is_empty() || o.placements.as_os_str().is_empty() {
        bail!("bind needs --kubeconfig and --placements\n{USAGE}");
    }
    // The event writer's warnings (refused or failed writes) go to the log.
    rkube_daemon::logging::init_tracing(0, &["rkube_scheduler", "rkube_bench"]);
    let (ok, failed) = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(rkube_bench::ceiling::bind(&o))?;
    eprintln!("{ok} bound, {failed} failed");
    if failed > 0 {
        std::process::exit(1);
    }
    Ok(())
}

fn simulate(args: &[String]) -> Result<()> {
    let (mut cluster, mut config, mut seed) = (None, None, 0u64);
    let (mut latencies, mut verify) = (false, false);
    let mut generic_workload = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--cluster" => {
                cluster = Some(PathBuf::from(it.next().context("--cluster needs a path")?))
            }
            "--config" => config = Some(PathBuf::from(it.next().context("--config needs a path")?)),
            "--seed" => seed = it.next().context("--seed needs a number")?.parse()?,
            "--latencies" => latencies = true,
            "--verify" => verify = true,
            // The one gate a workload sets (GangScheduling).
            "--feature-gates" => match it.next().map(String::as_str) {
                Some("GenericWorkload=true") => generic_workload = true,
                Some("GenericWorkload=false") => generic_workload = false,
                other => bail!(
                    "--feature-gates: only GenericWorkload=true|false is taken here, got {other:?}"
                ),
            },
            other => bail!("unexpected argument {other:?}\n{USAGE}"),
        }
    }
    let cluster_path = cluster.context(USAGE)?;
    let cluster = rkube_sim::load::load_cluster(&cluster_path)?;
    let cfg = rkube_sim::load::load_config_gated(config.as_deref(), generic_workload)?;
    let result = run(&cluster, &cfg, seed, latencies)?;
    if verify {
        let sim = rkube_sim::simulate(
            &cluster,
            &cfg,
            &rkube_sim::SimulateOptions {
                seed,
                explain: false,
                ..Default::default()
            },
        )?;
        let want: Vec<(String, Option<String>)> = sim
            .placements
            .iter()
            .map(|p| (p.pod.clone(), if p.evicted { None } else { p.node.clone() }))
            .collect();
        if want != result.placements || sim.summary.scheduled != result.scheduled {
            let diff = want
                .iter()
                .zip(&result.placements)
                .find(|(a, b)| a != b)
                .map(|(a, b)| format!("first difference: simulate {a:?}, bench loop {b:?}"))
                .unwrap_or_else(|| {
                    format!("{} vs {} placements", want.len(), result.placements.len())
                });
            bail!("--verify: the timed loop differs from rkube_sim::simulate: {diff}");
        }
    }
    println!("{}", serde_json::to_string(&result)?);
    Ok(())
}
