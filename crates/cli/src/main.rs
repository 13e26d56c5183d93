//! The `rkube` command line: thin — it parses flags, calls the libraries and
//! renders their results. Exit codes: 0 success, 1 runtime failure, 2 invalid
//! input or usage.

mod render;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use rkube_sim::{SimError, SimulateOptions};

/// rkube: the Kubernetes scheduler that explains itself.
///
/// Exit codes: 0 success, 1 runtime failure, 2 invalid input or usage.
#[derive(Parser)]
#[command(name = "rkube", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum Output {
    Table,
    Json,
    Yaml,
}

#[derive(Subcommand)]
enum Command {
    /// Schedule every pending pod of a cluster file, in queue order, as kube-scheduler v1.37 would.
    Simulate {
        /// Cluster file or directory (what `kubectl get nodes,pods -A -o yaml` prints).
        #[arg(long)]
        cluster: PathBuf,
        /// KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1); defaults when omitted.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Seed for breaking ties between equally scored nodes.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Attach each pod's per-node filter and score explanation.
        #[arg(long)]
        explain: bool,
        /// Output format.
        #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// Show every node's filter verdicts and every score plugin's scores for one pending pod.
    Explain {
        /// Cluster file or directory.
        #[arg(long)]
        cluster: PathBuf,
        /// The pod, as namespace/name.
        #[arg(long)]
        pod: String,
        /// KubeSchedulerConfiguration; defaults when omitted.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Seed for breaking ties.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Output format.
        #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Table)]
        output: Output,
    },
}

fn emit<T: serde::Serialize>(
    output: Output,
    value: &T,
    table: impl FnOnce() -> String,
) -> anyhow::Result<String> {
    Ok(match output {
        Output::Json => {
            let mut s = serde_json::to_string_pretty(value)?;
            s.push('\n');
            s
        }
        Output::Yaml => serde_yaml_ng::to_string(value)?,
        Output::Table => table(),
    })
}

fn run(cli: Cli) -> Result<String, SimError> {
    let wrap = |e: anyhow::Error| SimError::Runtime(e.to_string());
    match cli.command {
        Command::Simulate {
            cluster,
            config,
            seed,
            explain,
            output,
        } => {
            let cfg = rkube_sim::load::load_config(config.as_deref())?;
            let cluster = rkube_sim::load::load_cluster(&cluster)?;
            for w in &cluster.warnings {
                eprintln!("warning: {w}");
            }
            let report = rkube_sim::simulate(&cluster, &cfg, &SimulateOptions { seed, explain })?;
            emit(output, &report, || render::simulation(&report)).map_err(wrap)
        }
        Command::Explain {
            cluster,
            pod,
            config,
            seed,
            output,
        } => {
            let cfg = rkube_sim::load::load_config(config.as_deref())?;
            let cluster = rkube_sim::load::load_cluster(&cluster)?;
            for w in &cluster.warnings {
                eprintln!("warning: {w}");
            }
            let e = rkube_sim::explain(&cluster, &cfg, &pod, seed)?;
            emit(output, &e, || render::explanation(&e)).map_err(wrap)
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(out) => {
            let mut stdout = std::io::stdout().lock();
            if let Err(e) = stdout
                .write_all(out.as_bytes())
                .and_then(|_| stdout.flush())
            {
                if e.kind() == std::io::ErrorKind::BrokenPipe {
                    return ExitCode::SUCCESS;
                }
                eprintln!("error: writing output: {e}");
                return ExitCode::from(1);
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(if e.is_input() { 2 } else { 1 })
        }
    }
}
