//! The `rkube` command line: thin — it parses flags, calls the libraries and
//! renders their results. Exit codes: 0 success, 1 runtime failure, 2 invalid
//! input or usage.

mod html;
mod progress;
mod record;
mod render;
mod snapshot;
mod timeline;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use rkube_sim::{SimError, SimulateOptions};

const EXIT_STATUS: &str = "Exit status:
  0  success (`config check`: the configuration is valid; warnings allowed)
  1  runtime failure (a plugin failed, output could not be written)
  2  invalid input or usage (unreadable or malformed cluster or configuration
     file, a configuration kube-scheduler would refuse, bad flags)";

/// What `rkube --version` and `rkube version` print: rkube's version, the
/// commit it was built from and the Kubernetes release it follows (as
/// `kube-scheduler --version` prints "Kubernetes vX.Y.Z").
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("RKUBE_GIT_COMMIT"),
    ", Kubernetes v",
    env!("RKUBE_KUBERNETES_VERSION"),
    ")"
);

/// rkube: the Kubernetes scheduler that explains itself.
#[derive(Parser)]
#[command(name = "rkube", version = VERSION, about, long_about = None, after_help = EXIT_STATUS)]
struct Cli {
    /// Do not print warnings (cluster-file notes, configuration warnings) on stderr.
    #[arg(short, long, global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum Output {
    Table,
    Json,
    Yaml,
    /// One self-contained HTML page (charts, score heatmap) on stdout.
    Html,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum CheckOutput {
    Text,
    Json,
}

/// Where a command reads the cluster: a file (or directory), or a live API server.
#[derive(clap::Args)]
#[group(required = true, multiple = false)]
struct Source {
    /// Cluster file or directory (what `kubectl get nodes,pods -A -o yaml` prints).
    #[arg(long)]
    cluster: Option<PathBuf>,
    /// Read the cluster from this kubeconfig's API server instead, in memory
    /// (the objects `rkube snapshot` would write; nothing is written).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Command {
    /// Schedule every pending pod of a cluster file, in queue order, as kube-scheduler v1.37 would.
    #[command(after_help = EXIT_STATUS)]
    Simulate {
        #[command(flatten)]
        source: Source,
        /// KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1); defaults when omitted.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Seed for upstream's random draws (preemption's candidate offset).
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Feature gates (`K=V,...`), as `rkube scheduler --feature-gates` takes them.
        #[arg(long = "feature-gates", value_name = "K=V,...")]
        feature_gates: Option<String>,
        /// Attach each pod's per-node filter and score explanation.
        #[arg(long)]
        explain: bool,
        /// Output format.
        #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// Show every node's filter verdicts and every score plugin's scores for one pending pod.
    /// With --kubeconfig, also what the cluster's scheduler reported for it and whether
    /// rkube agrees.
    #[command(after_help = EXIT_STATUS)]
    Explain {
        #[command(flatten)]
        source: Source,
        /// The pod, as namespace/name.
        #[arg(long)]
        pod: String,
        /// KubeSchedulerConfiguration; defaults when omitted.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Seed for upstream's random draws (preemption's candidate offset).
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Feature gates (`K=V,...`), as `rkube scheduler --feature-gates` takes them.
        #[arg(long = "feature-gates", value_name = "K=V,...")]
        feature_gates: Option<String>,
        /// Output format.
        #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// Simulate one cluster under two configurations: pods that land elsewhere,
    /// pods and requests per node, replicas of each workload per node.
    #[command(after_help = EXIT_STATUS)]
    Compare {
        #[command(flatten)]
        source: Source,
        /// Configuration A, then configuration B. Given once, A is kube-scheduler's
        /// defaults (no --config) and B the file.
        #[arg(long = "config", required = true, action = clap::ArgAction::Append)]
        configs: Vec<PathBuf>,
        /// Seed for upstream's random draws (the same for both runs).
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Feature gates (`K=V,...`), as `rkube scheduler --feature-gates` takes them.
        #[arg(long = "feature-gates", value_name = "K=V,...")]
        feature_gates: Option<String>,
        /// Output format.
        #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// Run as the cluster's scheduler (kube-scheduler's flags: --kubeconfig, --config,
    /// --leader-elect=false, -v, --bind-address, --secure-port; `rkube scheduler --help`).
    #[command(disable_help_flag = true)]
    Scheduler {
        /// kube-scheduler flags (other kube-scheduler flags are accepted and ignored with a warning).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        args: Vec<String>,
    },
    /// Run as a node agent (kubelet flags: --config, --kubeconfig, --hostname-override,
    /// --node-labels, --node-ip, --runtime cri|sim, and for the sim --nodes N ...;
    /// `rkube kubelet --help`).
    #[command(disable_help_flag = true)]
    Kubelet {
        /// kubelet flags (other kubelet flags are accepted and ignored with a warning).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        args: Vec<String>,
    },
    /// Read a live cluster's Nodes, Pods (all namespaces), Namespaces, PriorityClasses,
    /// Services, ReplicaSets, StatefulSets, PodDisruptionBudgets, PersistentVolumes,
    /// PersistentVolumeClaims, StorageClasses, CSIDrivers, CSIStorageCapacities and CSINodes into a cluster file (a `List`;
    /// managedFields, resourceVersion and kubectl's last-applied-configuration dropped).
    #[command(after_help = EXIT_STATUS)]
    Snapshot {
        /// Kubeconfig; without it, in-cluster or $KUBECONFIG / ~/.kube/config.
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// The file to write (YAML when it ends in .yaml/.yml, else JSON; `-`: stdout, JSON).
        #[arg(
            short = 'o',
            long = "output",
            required_unless_present = "watch",
            conflicts_with = "watch"
        )]
        output: Option<PathBuf>,
        /// Record the cluster's changes into --out DIR for `rkube replay` (base.json, then
        /// events.jsonl) until SIGINT/SIGTERM or --for has passed.
        #[arg(long, requires = "out")]
        watch: bool,
        /// With --watch: the recording's directory (created owner-only).
        #[arg(long, requires = "watch")]
        out: Option<PathBuf>,
        /// With --watch: stop after this long (a Go duration such as 10m).
        #[arg(long = "for", requires = "watch", value_parser = go_duration)]
        for_: Option<std::time::Duration>,
        /// Client-side rate limit: API requests per second.
        #[arg(long, default_value_t = 5.0)]
        qps: f64,
    },
    /// A pod's startup timeline, from its node's kubelet through the API server's node
    /// proxy (needs `nodes/proxy`), one line per stage with its time.
    #[command(after_help = EXIT_STATUS)]
    Timeline {
        /// The pod, as namespace/name (a bare name is in `default`).
        pod: String,
        /// Kubeconfig; without it, in-cluster or $KUBECONFIG / ~/.kube/config.
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Output format: the table, or the kubelet's JSON.
        #[arg(short = 'o', long = "output", value_enum, default_value_t = CheckOutput::Text)]
        output: CheckOutput,
    },
    /// Configuration tools.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Print a shell completion script (e.g. `rkube completions bash > /etc/bash_completion.d/rkube`).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// How many more pods of one or more shapes fit: clone each pod until a clone does not fit
    /// (cluster-capacity's semantics), with the count per node and why each node stopped.
    #[command(after_help = EXIT_STATUS)]
    Capacity {
        #[command(flatten)]
        source: Source,
        /// A file holding one pending Pod, optionally `:N` to interleave shapes by ratio
        /// (`--pod a.yaml:3 --pod b.yaml:1`: three of a, then one of b, again). Without
        /// ratios the shapes are filled in the order given.
        #[arg(long = "pod", required = true, action = clap::ArgAction::Append)]
        pods: Vec<String>,
        /// KubeSchedulerConfiguration; defaults when omitted.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Most clones in all (a bound for shapes nothing stops).
        #[arg(long, default_value_t = 100_000)]
        max: usize,
        /// Seed for upstream's random draws (preemption's candidate offset).
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Feature gates (`K=V,...`), as `rkube scheduler --feature-gates` takes them.
        #[arg(long = "feature-gates", value_name = "K=V,...")]
        feature_gates: Option<String>,
        /// Output format (table, json or yaml).
        #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// What `kubectl drain` followed by rescheduling would do (or, with --delete, what removing
    /// the nodes would do): kubectl's pod filters, PodDisruptionBudgets as the Eviction API
    /// checks them, controllers' replacement pods scheduled as kube-scheduler would.
    /// rkube always behaves as `kubectl drain --ignore-daemonsets`.
    #[command(after_help = EXIT_STATUS)]
    Drain {
        #[command(flatten)]
        source: Source,
        /// A node to drain (repeat for several; drained in the order given, all cordoned first).
        #[arg(long = "node", required = true, action = clap::ArgAction::Append)]
        nodes: Vec<String>,
        /// KubeSchedulerConfiguration; defaults when omitted.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Remove the nodes once drained (they stop being topology domains).
        #[arg(long)]
        delete: bool,
        /// Delete pods that declare no controller (kubectl drain --force).
        #[arg(long)]
        force: bool,
        /// Delete pods with emptyDir volumes (kubectl drain --delete-emptydir-data).
        #[arg(long)]
        delete_emptydir_data: bool,
        /// Seed for upstream's random draws (preemption's candidate offset).
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Feature gates (`K=V,...`), as `rkube scheduler --feature-gates` takes them.
        #[arg(long = "feature-gates", value_name = "K=V,...")]
        feature_gates: Option<String>,
        /// Output format.
        #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// Re-run the scheduler over a recorded history (`rkube snapshot --watch --out DIR`):
    /// where each pod would have gone under a configuration, next to where it went.
    #[command(after_help = EXIT_STATUS)]
    Replay {
        /// The recording's directory (base.json and events.jsonl).
        #[arg(long)]
        from: PathBuf,
        /// KubeSchedulerConfiguration; defaults when omitted.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Seed for upstream's random draws (preemption's candidate offset).
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Feature gates (`K=V,...`), as `rkube scheduler --feature-gates` takes them.
        #[arg(long = "feature-gates", value_name = "K=V,...")]
        feature_gates: Option<String>,
        /// Output format (table, json or yaml).
        #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// Print rkube's version, the git commit it was built from and the Kubernetes version it follows.
    Version,
    /// Print the rkube(1) manual page (roff), or write one page per command to a directory.
    Man {
        /// Write rkube.1, rkube-simulate.1, ... into this directory instead.
        #[arg(long)]
        out_dir: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Check a KubeSchedulerConfiguration as kube-scheduler v1.37 would load it (decoding,
    /// defaults, validation, building every profile), and warn about settings that are
    /// accepted but do not do what they look like.
    ///
    /// Errors and warnings go to stderr (or into the JSON); exits 0 when kube-scheduler
    /// would accept the file (even with warnings), 2 when it would refuse it.
    #[command(after_help = EXIT_STATUS)]
    Check {
        /// The configuration file; without it, kube-scheduler's defaults.
        file: Option<PathBuf>,
        /// Print the fully defaulted configuration (what kube-scheduler runs) as YAML.
        #[arg(long)]
        print_defaults: bool,
        /// Output format: text (verdict on stdout, findings on stderr) or json.
        #[arg(short = 'o', long = "output", value_enum, default_value_t = CheckOutput::Text)]
        output: CheckOutput,
    },
}

/// What a command prints on stdout, and its exit status.
struct Done {
    stdout: String,
    code: u8,
}

impl From<String> for Done {
    fn from(stdout: String) -> Self {
        Done { stdout, code: 0 }
    }
}

fn emit<T: serde::Serialize>(
    output: Output,
    value: &T,
    table: impl FnOnce() -> String,
    html: impl FnOnce() -> String,
) -> anyhow::Result<String> {
    Ok(match output {
        Output::Json => {
            let mut s = serde_json::to_string_pretty(value)?;
            s.push('\n');
            s
        }
        Output::Yaml => serde_yaml_ng::to_string(value)?,
        Output::Table => table(),
        Output::Html => html(),
    })
}

fn warn(quiet: bool, cluster: &rkube_model::Cluster) {
    if !quiet {
        for w in &cluster.warnings {
            eprintln!("warning: {w}");
        }
    }
}

/// `SHAPE.yaml[:N]`: the file and its ratio, if one is given.
fn shape_arg(s: &str) -> Result<(PathBuf, Option<u32>), SimError> {
    if let Some((path, n)) = s.rsplit_once(':') {
        if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) {
            return match n.parse::<u32>() {
                Ok(r) if r >= 1 => Ok((PathBuf::from(path), Some(r))),
                _ => Err(SimError::Input(format!(
                    "--pod {}: the ratio after ':' must be a whole number from 1 to {}",
                    rkube_util::quote(s),
                    u32::MAX
                ))),
            };
        }
    }
    Ok((PathBuf::from(s), None))
}

/// A [`Source`] ready to load: a path, or a live cluster's objects read now.
struct Input {
    label: String,
    path: Option<PathBuf>,
    /// A live cluster's objects, as one `List` text.
    text: String,
    /// A live cluster's objects (for the pods' conditions).
    items: Vec<serde_json::Value>,
}

/// Requests per second when reading a live cluster in memory.
const LIVE_QPS: f64 = 20.0;

impl Input {
    fn read(source: Source, quiet: bool) -> Result<Input, SimError> {
        let Some(kubeconfig) = source.kubeconfig else {
            let path = source.cluster.unwrap_or_default();
            return Ok(Input {
                label: path.display().to_string(),
                path: Some(path),
                text: String::new(),
                items: Vec::new(),
            });
        };
        let label = format!("kubeconfig {}", kubeconfig.display());
        let bar = progress::spinner(quiet);
        let items = snapshot::read_live(&kubeconfig, LIVE_QPS, bar.as_ref())
            .map_err(|e| SimError::Runtime(format!("reading the cluster ({label}): {e:#}")))?;
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        let text = snapshot::list_text(items.clone())
            .map_err(|e| SimError::Runtime(format!("{label}: {e:#}")))?;
        Ok(Input {
            label,
            path: None,
            text,
            items,
        })
    }

    /// Reads the source and loads its cluster, printing its warnings.
    fn load(source: Source, quiet: bool) -> Result<(Input, rkube_model::Cluster), SimError> {
        let input = Input::read(source, quiet)?;
        let cluster = rkube_sim::load::load_cluster_from(input.cluster())?;
        warn(quiet, &cluster);
        Ok((input, cluster))
    }

    fn cluster(&self) -> rkube_sim::load::ClusterInput<'_> {
        match &self.path {
            Some(p) => rkube_sim::load::ClusterInput::Path(p),
            None => rkube_sim::load::ClusterInput::Text {
                label: &self.label,
                text: &self.text,
            },
        }
    }

    /// For a live cluster: what its scheduler reported for `namespace/name`.
    fn observed(&self, key: &str) -> Option<rkube_sim::live::Observed> {
        let (ns, name) = key.split_once('/')?;
        self.items
            .iter()
            .find(|o| {
                o["kind"] == "Pod"
                    && o["metadata"]["namespace"] == ns
                    && o["metadata"]["name"] == name
            })
            .map(rkube_sim::live::Observed::from_pod)
    }
}

/// A Go duration flag value (`90s`, `10m`), within Go's range.
fn go_duration(s: &str) -> Result<std::time::Duration, String> {
    rkube_util::duration::parse(s).map_err(|e| e.to_string())
}

fn config_label(path: Option<&Path>) -> String {
    path.map_or_else(|| "<defaults>".to_string(), |p| p.display().to_string())
}

/// A KubeSchedulerConfiguration file (defaults without one) with the
/// command line's `--feature-gates`, checked as `rkube scheduler` checks
/// them; warnings go to stderr.
fn load_config(
    path: Option<&Path>,
    gates: Option<&str>,
) -> Result<rkube_config::KubeSchedulerConfiguration, SimError> {
    let gates = match gates {
        None => None,
        Some(list) => {
            let gates = rkube_scheduler::options::gate_list(list).map_err(SimError::Input)?;
            let g =
                rkube_scheduler::options::check_gates_for(&gates, true).map_err(SimError::Input)?;
            for w in &g.warnings {
                eprintln!("warning: {w}");
            }
            Some(g)
        }
    };
    let generic_workload = gates.as_ref().is_some_and(|g| g.generic_workload);
    let mut cfg = rkube_sim::load::load_config_gated(path, generic_workload)?;
    if let Some(g) = gates {
        cfg.disable_opportunistic_batching = !g.opportunistic_batching;
    }
    Ok(cfg)
}

fn run(cli: Cli) -> Result<Done, SimError> {
    let wrap = |e: anyhow::Error| SimError::Runtime(e.to_string());
    let quiet = cli.quiet;
    match cli.command {
        Command::Simulate {
            source,
            config,
            seed,
            feature_gates,
            explain,
            output,
        } => {
            let cfg = load_config(config.as_deref(), feature_gates.as_deref())?;
            let (input, cluster) = Input::load(source, quiet)?;
            let cluster_label = input.label.clone();
            let bar = progress::bar(quiet, "scheduling");
            let opts = SimulateOptions {
                seed,
                explain,
                progress: bar.as_ref().map(progress::callback),
            };
            let report = rkube_sim::simulate(&cluster, &cfg, &opts)?;
            if let Some(b) = bar {
                b.finish_and_clear();
            }
            emit(
                output,
                &report,
                || render::simulation(&report),
                || html::simulation(&report, &cluster_label, &config_label(config.as_deref())),
            )
            .map(Done::from)
            .map_err(wrap)
        }
        Command::Explain {
            source,
            pod,
            config,
            seed,
            feature_gates,
            output,
        } => {
            let cfg = load_config(config.as_deref(), feature_gates.as_deref())?;
            let (input, cluster) = Input::load(source, quiet)?;
            let cluster_label = input.label.clone();
            let mut e = rkube_sim::explain(&cluster, &cfg, &pod, seed)?;
            if let Some(observed) = input.observed(&pod) {
                e.live = Some(rkube_sim::live::compare(&e, observed));
            }
            emit(
                output,
                &e,
                || render::explanation(&e),
                || html::explanation(&e, &rkube_sim::cluster_nodes(&cluster), &cluster_label),
            )
            .map(Done::from)
            .map_err(wrap)
        }
        Command::Compare {
            source,
            configs,
            seed,
            feature_gates,
            output,
        } => {
            let (a, b) = match configs.as_slice() {
                [b] => (None, b.as_path()),
                [a, b] => (Some(a.as_path()), b.as_path()),
                _ => {
                    return Err(SimError::Input(format!(
                        "compare takes one or two --config (A then B), got {}",
                        configs.len()
                    )))
                }
            };
            let cfg_a = load_config(a, feature_gates.as_deref())?;
            let cfg_b = load_config(Some(b), feature_gates.as_deref())?;
            let (input, cluster) = Input::load(source, quiet)?;
            let cluster_label = input.label.clone();
            let la = config_label(a);
            let lb = config_label(Some(b));
            let c = rkube_sim::compare::compare(&cluster, (&la, &cfg_a), (&lb, &cfg_b), seed)?;
            emit(
                output,
                &c,
                || render::comparison(&c),
                || html::comparison(&c, &cluster_label),
            )
            .map(Done::from)
            .map_err(wrap)
        }
        Command::Config {
            command:
                ConfigCommand::Check {
                    file,
                    print_defaults,
                    output,
                },
        } => {
            let report = match &file {
                None => rkube_sim::check::check_defaults(),
                Some(p) => {
                    let text = rkube_util::file::read_text(p, rkube_util::file::CONFIG_MAX_BYTES)
                        .map_err(|e| SimError::Input(format!("{}: {e}", p.display())))?;
                    rkube_sim::check::check_str(&p.display().to_string(), &text)
                }
            };
            let code = if report.valid { 0 } else { 2 };
            let stdout = match output {
                CheckOutput::Json => {
                    #[derive(serde::Serialize)]
                    struct Json<'a> {
                        #[serde(flatten)]
                        report: &'a rkube_sim::check::CheckReport,
                        #[serde(skip_serializing_if = "Option::is_none")]
                        config: Option<&'a rkube_config::KubeSchedulerConfiguration>,
                    }
                    let v = Json {
                        report: &report,
                        config: report.config.as_ref().filter(|_| print_defaults),
                    };
                    let mut s = serde_json::to_string_pretty(&v).map_err(|e| wrap(e.into()))?;
                    s.push('\n');
                    s
                }
                CheckOutput::Text => {
                    eprint!("{}", render::check_findings(&report, quiet));
                    match (&report.config, print_defaults) {
                        (Some(cfg), true) => {
                            serde_yaml_ng::to_string(cfg).map_err(|e| wrap(e.into()))?
                        }
                        _ if report.valid => render::check_verdict(&report),
                        _ => {
                            eprint!("{}", render::check_verdict(&report));
                            String::new()
                        }
                    }
                }
            };
            Ok(Done { stdout, code })
        }
        Command::Timeline {
            pod,
            kubeconfig,
            output,
        } => {
            let (ns, name) = timeline::parse_pod(&pod).map_err(SimError::Input)?;
            let json = timeline::fetch(kubeconfig.as_deref(), &ns, &name)
                .map_err(|e| SimError::Runtime(format!("timeline: {e:#}")))?;
            let t: timeline::Timeline = serde_json::from_str(&json).map_err(|e| {
                SimError::Runtime(format!(
                    "timeline: the kubelet's answer is not a timeline: {e}"
                ))
            })?;
            let stdout = match output {
                CheckOutput::Json => {
                    let mut s = json;
                    s.push('\n');
                    s
                }
                CheckOutput::Text => timeline::render(&t),
            };
            Ok(stdout.into())
        }
        Command::Snapshot {
            kubeconfig,
            output,
            watch: _,
            out,
            for_,
            qps,
        } => {
            if let Some(dir) = out {
                let n = record::record(kubeconfig.as_deref(), &dir, for_)
                    .map_err(|e| SimError::Runtime(format!("snapshot --watch: {e:#}")))?;
                if !quiet {
                    eprintln!("recorded {n} changes to {}", dir.display());
                }
                return Ok(String::new().into());
            }
            let output = output.unwrap_or_default();
            let bar = progress::spinner(quiet);
            let text = snapshot::snapshot(kubeconfig.as_deref(), &output, qps, bar.as_ref())
                .map_err(|e| SimError::Runtime(format!("snapshot: {e:#}")))?;
            if let Some(b) = bar {
                b.finish_and_clear();
            }
            if output.as_os_str() == "-" {
                return Ok(text.into());
            }
            // Pod specs can carry literal env values: owner-only, as a secret.
            rkube_util::file::write_private(&output, text.as_bytes())
                .map_err(|e| SimError::Runtime(format!("writing {}: {e}", output.display())))?;
            Ok(String::new().into())
        }
        Command::Scheduler { .. } | Command::Kubelet { .. } => unreachable!("handled in main"),
        Command::Completions { shell } => {
            let mut buf = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "rkube", &mut buf);
            Ok(String::from_utf8_lossy(&buf).into_owned().into())
        }
        Command::Capacity {
            source,
            pods,
            config,
            max,
            seed,
            feature_gates,
            output,
        } => {
            if output == Output::Html {
                return Err(SimError::Input(
                    "capacity: -o html is not available; use table, json or yaml".into(),
                ));
            }
            let parsed = pods
                .iter()
                .map(|s| shape_arg(s.as_str()))
                .collect::<Result<Vec<_>, _>>()?;
            let cfg = load_config(config.as_deref(), feature_gates.as_deref())?;
            let files: Vec<PathBuf> = parsed.iter().map(|(p, _)| p.clone()).collect();
            let input = Input::read(source, quiet)?;
            let (cluster, shape_pods) =
                rkube_sim::load::load_cluster_and_shapes(input.cluster(), &files)?;
            warn(quiet, &cluster);
            let shapes: Vec<rkube_sim::capacity::Shape> = parsed
                .iter()
                .zip(shape_pods)
                .map(|((path, ratio), pod)| rkube_sim::capacity::Shape {
                    source: path.display().to_string(),
                    pod,
                    ratio: ratio.unwrap_or(1),
                })
                .collect();
            let opts = rkube_sim::capacity::CapacityOptions {
                seed,
                max,
                // Ratios given: interleave; none: fill in the order given.
                interleave: parsed.iter().any(|(_, r)| r.is_some()),
            };
            let r = rkube_sim::capacity::capacity(&cluster, &cfg, &shapes, &opts)?;
            emit(output, &r, || render::capacity(&r), String::new)
                .map(Done::from)
                .map_err(wrap)
        }
        Command::Drain {
            source,
            nodes,
            config,
            delete,
            force,
            delete_emptydir_data,
            seed,
            feature_gates,
            output,
        } => {
            let cfg = load_config(config.as_deref(), feature_gates.as_deref())?;
            let (input, cluster) = Input::load(source, quiet)?;
            let cluster_label = input.label.clone();
            let opts = rkube_sim::drain::DrainOptions {
                nodes,
                delete,
                force,
                delete_emptydir_data,
                seed,
            };
            let r = rkube_sim::drain::drain(&cluster, &cfg, &opts)?;
            emit(
                output,
                &r,
                || render::drain(&r),
                || html::drain(&r, &cluster_label),
            )
            .map(Done::from)
            .map_err(wrap)
        }
        Command::Replay {
            from,
            config,
            seed,
            feature_gates,
            output,
        } => {
            if output == Output::Html {
                return Err(SimError::Input(
                    "replay: -o html is not available; use table, json or yaml".into(),
                ));
            }
            let cfg = load_config(config.as_deref(), feature_gates.as_deref())?;
            let profiles = rkube_sim::profiles(&cfg)?;
            let rec = rkube_sim::replay::Recording::read(&from)?;
            let r =
                rkube_sim::replay::replay(&rec, &profiles, &config_label(config.as_deref()), seed)?;
            emit(output, &r, || render::replay(&r), String::new)
                .map(Done::from)
                .map_err(wrap)
        }
        Command::Version => Ok(format!("rkube {VERSION}\n").into()),
        Command::Man { out_dir } => {
            let cmd = Cli::command();
            match out_dir {
                Some(dir) => {
                    std::fs::create_dir_all(&dir)
                        .and_then(|_| clap_mangen::generate_to(cmd, &dir))
                        .map_err(|e| {
                            SimError::Runtime(format!(
                                "writing man pages to {}: {e}",
                                dir.display()
                            ))
                        })?;
                    Ok(String::new().into())
                }
                None => {
                    let mut buf = Vec::new();
                    clap_mangen::Man::new(cmd)
                        .render(&mut buf)
                        .map_err(|e| SimError::Runtime(format!("rendering man page: {e}")))?;
                    Ok(String::from_utf8_lossy(&buf).into_owned().into())
                }
            }
        }
    }
}

/// The daemon a program name stands for: `kubelet` and `kube-scheduler`
/// (rkube installed under upstream's names, as the package installs the
/// kubelet) run as `rkube kubelet` and `rkube scheduler`.
fn daemon_of(argv0: &std::ffi::OsStr) -> Option<&'static str> {
    match std::path::Path::new(argv0).file_name()?.to_str()? {
        "kubelet" => Some("kubelet"),
        "kube-scheduler" => Some("scheduler"),
        _ => None,
    }
}

fn main() -> ExitCode {
    let mut argv = std::env::args_os();
    if let Some(daemon) = argv.next().as_deref().and_then(daemon_of) {
        let args: Vec<String> = argv.map(|a| a.to_string_lossy().into_owned()).collect();
        let code = match daemon {
            "kubelet" => rkube_kubelet::main(args),
            _ => rkube_scheduler::main(args),
        };
        return ExitCode::from(code as u8);
    }
    let cli = Cli::parse();
    if let Command::Scheduler { args } = cli.command {
        return ExitCode::from(rkube_scheduler::main(args) as u8);
    }
    if let Command::Kubelet { args } = cli.command {
        return ExitCode::from(rkube_kubelet::main(args) as u8);
    }
    match run(cli) {
        Ok(Done { stdout: out, code }) => {
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
            ExitCode::from(code)
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(if e.is_input() { 2 } else { 1 })
        }
    }
}
