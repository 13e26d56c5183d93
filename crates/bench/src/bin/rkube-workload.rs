//! Writes a scheduler_perf-style workload as a cluster file (JSON `List`).
//!
//!   rkube-workload WORKLOAD [-o FILE]     e.g. SchedulingBasic/5000Nodes_10000Pods
//!   rkube-workload --list

use std::io::Write;

use anyhow::{bail, Context, Result};
use rkube_bench::workload::Workload;

const USAGE: &str = "usage: rkube-workload WORKLOAD [-o FILE] | --list
  WORKLOAD = Kind/Size: a named size (--list) or {N}Nodes_{M}Pods or {N}Nodes_{I}Init_{M}Pods
  prints one line on stderr: nodes, initial (bound) pods, pending pods";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut workload = None;
    let mut out = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--list" => {
                for w in Workload::catalog() {
                    println!("{w}");
                }
                return Ok(());
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            "-o" | "--output" => out = Some(it.next().context("-o needs a file")?.clone()),
            w if workload.is_none() && !w.starts_with('-') => workload = Some(w.to_string()),
            other => bail!("unexpected argument {other:?}\n{USAGE}"),
        }
    }
    let Some(name) = workload else {
        bail!("{USAGE}");
    };
    let w = Workload::parse(&name).map_err(anyhow::Error::msg)?;
    let text = serde_json::to_string(&w.generate())?;
    match out {
        Some(path) => std::fs::write(&path, text).with_context(|| path.clone())?,
        None => std::io::stdout().write_all(text.as_bytes())?,
    }
    eprintln!(
        "{w}: {} nodes, {} bound pods, {} pending pods ({} expected unschedulable)",
        w.nodes,
        w.init_pods,
        w.pending_pods(),
        w.extra_unschedulable()
    );
    Ok(())
}
