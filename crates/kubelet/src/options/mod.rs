//! Command-line flags of `rkube kubelet`, spelled as the kubelet's
//! (`--flag=value`, `--flag value`, `-v=N`), plus the sim runtime's own.
//! Every flag of upstream's kubelet v1.37 is known: the ones that set a
//! KubeletConfiguration field go through the configuration
//! ([`config_flags`]); a flag asking for what rkube does not do is
//! refused, and an unknown flag is an error, as upstream's.

mod config_flags;

use std::path::PathBuf;
use std::time::Duration;

pub use config_flags::{overlay, ConfigFlag};

/// `--version`'s forms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionFormat {
    /// `Kubernetes vX.Y.Z-rkube`, what kubeadm's preflight parses.
    Plain,
    /// `--version=raw`: the version details.
    Raw,
}

/// The container garbage collector's flags (upstream's `GCPolicy` from
/// `--minimum-container-ttl-duration`, `--maximum-dead-containers-per-container`
/// and `--maximum-dead-containers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContainerGcFlags {
    /// Containers created less than this ago are kept (default 0).
    pub min_age: Duration,
    /// Dead instances kept per container (default 1; negative: no limit).
    pub max_per_pod_container: i32,
    /// Dead containers kept on the node (default -1: no limit).
    pub max_containers: i32,
}

impl Default for ContainerGcFlags {
    fn default() -> Self {
        ContainerGcFlags {
            min_age: Duration::ZERO,
            max_per_pod_container: 1,
            max_containers: -1,
        }
    }
}

/// Which runtime runs the pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeKind {
    /// containerd over CRI (`crates/cri`, not wired yet).
    Cri,
    /// Simulated pods, nothing runs.
    Sim,
}

/// Parsed flags.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// `--config` (KubeletConfiguration file).
    pub config: Option<PathBuf>,
    /// `--kubeconfig`.
    pub kubeconfig: Option<PathBuf>,
    /// `--bootstrap-kubeconfig`: a bootstrap token's kubeconfig, used to
    /// request the client certificate when `--kubeconfig` holds no valid
    /// one (TLS bootstrap).
    pub bootstrap_kubeconfig: Option<PathBuf>,
    /// `--cert-dir` (default `<root-dir>/pki`).
    pub cert_dir: Option<PathBuf>,
    /// `--hostname-override` / `--node-name`.
    pub node_name: Option<String>,
    /// `--node-labels k=v,...`.
    pub node_labels: Vec<(String, String)>,
    /// `--node-ip`.
    pub node_ip: Option<String>,
    /// `--runtime cri|sim`.
    pub runtime: RuntimeKind,
    /// `--root-dir` (default `/var/lib/kubelet`): pod volumes, container
    /// logs (`pod-logs/`) and the self-signed serving certificate (`pki/`).
    pub root_dir: PathBuf,
    /// `--nodes N` (sim only).
    pub nodes: usize,
    /// `--node-name-pattern` (sim only; `{}` → the index, 5 digits).
    pub node_name_pattern: String,
    /// `--node-template FILE` (sim only).
    pub node_template: Option<PathBuf>,
    /// `--pod-start-delay` (sim): Pending → Running.
    pub pod_start_delay: Duration,
    /// `--pod-run-time` (sim): Running → Succeeded for restartPolicy Never/OnFailure.
    pub pod_run_time: Duration,
    /// `--sim-resource-slice FILE` (sim, repeatable): a ResourceSlice
    /// every sim node publishes as its own (a fake DRA driver's devices).
    pub sim_resource_slices: Vec<PathBuf>,
    /// `--sim-signals FILE` (sim): eviction signals and pod usage, a JSON
    /// file read every eviction round (see [`crate::eviction`]).
    pub sim_signals: Option<PathBuf>,
    /// `--api-concurrency`: most lease/status/registration requests in flight.
    pub api_concurrency: usize,
    /// `-v`/`--v` log verbosity (else the configuration's
    /// `logging.verbosity`).
    pub verbosity: Option<u32>,
    /// Fields of the configuration set by flags, laid over `--config`.
    pub config_flags: Vec<ConfigFlag>,
    /// `--minimum-container-ttl-duration`,
    /// `--maximum-dead-containers-per-container`, `--maximum-dead-containers`.
    pub container_gc: ContainerGcFlags,
    /// `--version`: what to print instead of running.
    pub version: Option<VersionFormat>,
    /// Deprecation warnings, in upstream's words.
    pub warnings: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            config: None,
            kubeconfig: None,
            node_name: None,
            node_labels: Vec::new(),
            node_ip: None,
            runtime: RuntimeKind::Cri,
            root_dir: PathBuf::from("/var/lib/kubelet"),
            nodes: 1,
            node_name_pattern: "sim-node-{}".into(),
            node_template: None,
            sim_resource_slices: Vec::new(),
            pod_start_delay: Duration::from_secs(1),
            pod_run_time: Duration::from_secs(10),
            sim_signals: None,
            api_concurrency: 64,
            verbosity: None,
            config_flags: Vec::new(),
            container_gc: ContainerGcFlags::default(),
            version: None,
            bootstrap_kubeconfig: None,
            cert_dir: None,
            warnings: Vec::new(),
        }
    }
}

/// Usage text.
pub const USAGE: &str = "\
Usage: rkube kubelet [flags]

Runs rkube as a node agent: registers the Node, renews its Lease in
kube-node-lease, reports node status and runs the pods bound to it.

Flags (spelled as the kubelet's). Every other flag of upstream's kubelet
that sets a KubeletConfiguration field (--max-pods, --cluster-dns,
--register-with-taints, ...) is read as that field and overrides --config;
a flag asking for what rkube does not do is refused.
      --config FILE               KubeletConfiguration (kubelet.config.k8s.io/v1beta1)
      --kubeconfig PATH           kubeconfig of the node identity (system:node:NAME)
      --bootstrap-kubeconfig PATH a bootstrap token's kubeconfig: when --kubeconfig
                                  holds no valid certificate, request one (TLS
                                  bootstrap) and write --kubeconfig pointing to it
      --cert-dir DIR              the node's certificates (default ROOT-DIR/pki)
      --hostname-override NAME    node name (default: the host name); also --node-name
      --node-labels k=v,...       labels added to the Node
      --node-ip IP                InternalIP of the node (default: detected)
      --runtime cri|sim           container runtime (default cri)
      --root-dir DIR              pod volumes, container logs and certificates
                                  (default /var/lib/kubelet)
      --fail-swap-on[=false]      refuse to start with swap on (overrides failSwapOn)
  -v, --v N                       log verbosity (2: debug, 6: trace; overrides
                                  logging.verbosity)
      --version[=raw]             print the Kubernetes version this kubelet follows
  -h, --help                      this text

Sim runtime (--runtime sim): nothing runs; one process hosts many nodes.
      --nodes N                   number of nodes (default 1: named like a real node;
                                  N > 1: named by --node-name-pattern)
      --node-name-pattern P       node names, {} = index zero-padded to 5 digits
                                  (default sim-node-{} → sim-node-00000 ...)
      --node-template FILE        Node YAML whose capacity/allocatable/labels/taints
                                  every sim node copies (default: 32 cpu, 256Gi,
                                  100Gi ephemeral-storage, 110 pods)
      --sim-resource-slice FILE   a ResourceSlice (resource.k8s.io/v1) each sim node
                                  publishes as its own: the driver and devices of FILE,
                                  nodeName and a one-slice pool named after the node
                                  (repeatable: one per driver)
      --pod-start-delay D         Pending → Running after D (default 1s)
      --pod-run-time D            pods with restartPolicy Never/OnFailure exit 0 D after
                                  starting → Succeeded (default 10s; 0: run until deleted)
      --sim-signals FILE          eviction signals and pod usage, a JSON file read every
                                  10s (signals / nodes / pods; see the eviction module
                                  docs); without it the sim has no eviction
      --api-concurrency N         most lease/status requests in flight (default 64)
";

pub use rkube_daemon::flags::ParseError;
use rkube_daemon::flags::{invalid, parse_bool, Flags};

/// Upstream's deprecation note of the configuration flags.
const CONFIG_FLAGS: &str = "This parameter should be set via the config file specified by the Kubelet's --config flag. See https://kubernetes.io/docs/tasks/administer-cluster/kubelet-config-file/ for more information.";
/// Upstream's deprecation note of the container GC flags.
const GC_FLAGS: &str =
    "Use --eviction-hard or --eviction-soft instead. Will be removed in a future version.";

/// pflag's warning for a deprecated flag.
fn deprecated(name: &str, note: &str) -> String {
    format!("Flag --{name} has been deprecated, {note}")
}

/// The refusal of an upstream flag whose value rkube does not honour.
fn not_honoured(name: &str, v: &str) -> ParseError {
    let what = match name {
        "vmodule" => "per-file log verbosity is not implemented",
        "config-dir" => "drop-in configuration directories are not implemented",
        "lock-file" | "exit-on-lock-contention" => "the kubelet lock file is not implemented",
        "experimental-mounter-path" => "a mounter binary other than mount(8) is not implemented",
        "experimental-allocatable-ignore-eviction" => {
            "leaving the hard eviction thresholds out of allocatable is not implemented"
        }
        "runtime-cgroups" => "moving the container runtime into a cgroup is not implemented",
        "image-credential-provider-config" | "image-credential-provider-bin-dir" => {
            "image credential provider plugins are not implemented"
        }
        "cloud-provider" => "cloud providers are not implemented (leave it empty)",
        _ => "not implemented",
    };
    invalid(
        name,
        v,
        &format!("{what}; rkube kubelet refuses to start rather than run without it"),
    )
}

fn parse_duration(name: &str, v: &str) -> Result<Duration, ParseError> {
    rkube_util::duration::parse(v).map_err(|e| {
        ParseError::Invalid(format!(
            "invalid argument for \"--{name}\" flag: {e} (e.g. 1s, 500ms, 2m)"
        ))
    })
}

/// Parses `k=v,k2=v2` (`--node-labels`).
pub fn parse_labels(v: &str) -> Result<Vec<(String, String)>, ParseError> {
    let mut out = Vec::new();
    for part in v.split(',').filter(|p| !p.trim().is_empty()) {
        let Some((k, val)) = part.split_once('=') else {
            return Err(invalid(
                "node-labels",
                v,
                &format!("{part:?} is not key=value"),
            ));
        };
        let k = k.trim();
        if k.is_empty() {
            return Err(invalid("node-labels", v, "empty label key"));
        }
        out.push((k.to_string(), val.trim().to_string()));
    }
    Ok(out)
}

/// Parses the arguments after `rkube kubelet`.
pub fn parse<I: IntoIterator<Item = String>>(args: I) -> Result<Options, ParseError> {
    let mut o = Options::default();
    let mut saw_sim_only = None;
    let mut flags = Flags::new(args, "the kubelet");
    while let Some(flag) = flags.next_flag() {
        let mut flag = flag?;
        // pflag's normaliser of upstream's kubelet: `--max_pods` is `--max-pods`.
        flag.name = flag.name.replace('_', "-");
        let name = flag.name.clone();
        let mut value = || flags.value(&flag);
        match name.as_str() {
            "h" | "help" => return Err(ParseError::Help),
            "config" => o.config = Some(PathBuf::from(value()?)),
            "kubeconfig" => o.kubeconfig = Some(PathBuf::from(value()?)),
            "bootstrap-kubeconfig" => o.bootstrap_kubeconfig = Some(PathBuf::from(value()?)),
            "cert-dir" => o.cert_dir = Some(PathBuf::from(value()?)),
            "root-dir" => o.root_dir = PathBuf::from(value()?),
            "hostname-override" | "node-name" => {
                let v = value()?;
                if v.is_empty() {
                    return Err(invalid(&name, &v, "empty node name"));
                }
                o.node_name = Some(v.to_lowercase());
            }
            "node-labels" => o.node_labels.extend(parse_labels(&value()?)?),
            "node-ip" => {
                let v = value()?;
                v.parse::<std::net::IpAddr>()
                    .map_err(|_| invalid(&name, &v, "not an IP address"))?;
                o.node_ip = Some(v);
            }
            "runtime" => {
                let v = value()?;
                o.runtime = match v.as_str() {
                    "cri" => RuntimeKind::Cri,
                    "sim" => RuntimeKind::Sim,
                    _ => return Err(invalid(&name, &v, "must be cri or sim")),
                };
            }
            "nodes" => {
                let v = value()?;
                o.nodes = v
                    .parse()
                    .ok()
                    .filter(|n| *n >= 1 && *n <= 1_000_000)
                    .ok_or_else(|| invalid(&name, &v, "must be a number from 1 to 1000000"))?;
                saw_sim_only.get_or_insert("--nodes");
            }
            "node-name-pattern" => {
                let v = value()?;
                if !v.contains("{}") {
                    return Err(invalid(&name, &v, "must contain {} (the node index)"));
                }
                o.node_name_pattern = v;
                saw_sim_only.get_or_insert("--node-name-pattern");
            }
            "node-template" => {
                o.node_template = Some(PathBuf::from(value()?));
                saw_sim_only.get_or_insert("--node-template");
            }
            "sim-resource-slice" => {
                o.sim_resource_slices.push(PathBuf::from(value()?));
                saw_sim_only.get_or_insert("--sim-resource-slice");
            }
            "sim-signals" => {
                o.sim_signals = Some(PathBuf::from(value()?));
                saw_sim_only.get_or_insert("--sim-signals");
            }
            "pod-start-delay" => o.pod_start_delay = parse_duration(&name, &value()?)?,
            "pod-run-time" => o.pod_run_time = parse_duration(&name, &value()?)?,
            "api-concurrency" => {
                let v = value()?;
                o.api_concurrency = v
                    .parse()
                    .ok()
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| invalid(&name, &v, "must be a positive number"))?;
            }
            "v" => {
                let v = value()?;
                o.verbosity = Some(v.parse().map_err(|_| {
                    ParseError::Invalid(format!("invalid argument {v:?} for \"-v\" flag"))
                })?);
            }
            "version" => {
                let v = flag.inline.clone().unwrap_or_else(|| "true".into());
                o.version = match v.as_str() {
                    "raw" => Some(VersionFormat::Raw),
                    _ if parse_bool(&name, &v)? => Some(VersionFormat::Plain),
                    _ => None,
                };
            }
            "seccomp-default" => {
                // Upstream ORs the flag (its last value) with the
                // configuration's field.
                o.config_flags.retain(|f| f.flag != "--seccomp-default");
                if flag.boolean()? {
                    config_flags::set(&mut o.config_flags, "seccomp-default", "true")?;
                }
            }
            "minimum-container-ttl-duration" => {
                o.container_gc.min_age = parse_duration(&name, &value()?)?;
                o.warnings.push(deprecated(&name, GC_FLAGS));
            }
            "maximum-dead-containers-per-container" | "maximum-dead-containers" => {
                let v = value()?;
                let n: i32 = v.parse().map_err(|_| {
                    invalid(
                        &name,
                        &v,
                        &format!("strconv.ParseInt: parsing {v:?}: invalid syntax"),
                    )
                })?;
                if name == "maximum-dead-containers" {
                    o.container_gc.max_containers = n;
                } else {
                    o.container_gc.max_per_pod_container = n;
                }
                o.warnings.push(deprecated(&name, GC_FLAGS));
            }
            "vmodule"
            | "config-dir"
            | "lock-file"
            | "experimental-mounter-path"
            | "runtime-cgroups"
            | "image-credential-provider-config"
            | "image-credential-provider-bin-dir" => {
                let v = value()?;
                if !v.is_empty() {
                    return Err(not_honoured(&name, &v));
                }
            }
            "cloud-provider" => {
                let v = value()?;
                if !v.is_empty() {
                    return Err(not_honoured(&name, &v));
                }
            }
            "exit-on-lock-contention" | "experimental-allocatable-ignore-eviction" => {
                if flag.boolean()? {
                    return Err(not_honoured(&name, "true"));
                }
            }
            n if config_flags::is_config_flag(n) => {
                let v = if config_flags::is_bool(n) {
                    flag.boolean()?.to_string()
                } else {
                    value()?
                };
                config_flags::set(&mut o.config_flags, n, &v)?;
                if !config_flags::NOT_DEPRECATED.contains(&n) {
                    o.warnings.push(deprecated(n, CONFIG_FLAGS));
                }
            }
            _ => return Err(ParseError::Invalid(format!("unknown flag: --{name}"))),
        }
    }
    if o.bootstrap_kubeconfig.is_some() {
        if o.kubeconfig.is_none() {
            return Err(ParseError::Invalid(
                "--bootstrap-kubeconfig needs --kubeconfig (where the kubelet writes the kubeconfig of its certificate)".into(),
            ));
        }
        if o.nodes > 1 {
            return Err(ParseError::Invalid(
                "--bootstrap-kubeconfig bootstraps one node's identity; it cannot be used with --nodes".into(),
            ));
        }
    }
    if let Some(flag) = saw_sim_only {
        if o.runtime != RuntimeKind::Sim {
            return Err(ParseError::Invalid(format!("{flag} needs --runtime sim")));
        }
    }
    Ok(o)
}

impl Options {
    /// `--cert-dir`, else `<root-dir>/pki`.
    pub fn cert_dir(&self) -> PathBuf {
        self.cert_dir
            .clone()
            .unwrap_or_else(|| self.root_dir.join("pki"))
    }

    /// The names of the nodes this process hosts: one node named by
    /// `--hostname-override` (else the host name) unless `--nodes N > 1`,
    /// then the pattern with indices `0..N`.
    pub fn node_names(&self, hostname: &str) -> Vec<String> {
        if self.nodes <= 1 {
            let name = self
                .node_name
                .clone()
                .unwrap_or_else(|| hostname.to_lowercase());
            return vec![name];
        }
        (0..self.nodes)
            .map(|i| self.node_name_pattern.replace("{}", &format!("{i:05}")))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Options, ParseError> {
        parse(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn known_flags() {
        let o = p(&[
            "--config=/c.yaml",
            "--kubeconfig",
            "/k",
            "--hostname-override=Node-A",
            "--node-labels=a=1,b/c=2",
            "--node-labels",
            "d=",
            "--node-ip=10.0.0.5",
            "--runtime",
            "sim",
            "--nodes=3",
            "--node-name-pattern=n-{}",
            "--pod-start-delay=500ms",
            "--pod-run-time",
            "2m",
            "--sim-signals=/s.json",
            "-v=4",
        ])
        .unwrap();
        assert_eq!(o.config, Some(PathBuf::from("/c.yaml")));
        assert_eq!(o.kubeconfig, Some(PathBuf::from("/k")));
        assert_eq!(o.node_name.as_deref(), Some("node-a"));
        assert_eq!(
            o.node_labels,
            vec![
                ("a".into(), "1".into()),
                ("b/c".into(), "2".into()),
                ("d".into(), "".into())
            ]
        );
        assert_eq!(o.node_ip.as_deref(), Some("10.0.0.5"));
        assert_eq!(o.runtime, RuntimeKind::Sim);
        assert_eq!(o.pod_start_delay, Duration::from_millis(500));
        assert_eq!(o.pod_run_time, Duration::from_secs(120));
        assert_eq!(o.verbosity, Some(4));
        assert_eq!(o.sim_signals, Some(PathBuf::from("/s.json")));
        assert_eq!(o.node_names("h"), vec!["n-00000", "n-00001", "n-00002"]);
        assert!(o.warnings.is_empty());
    }

    #[test]
    fn defaults_and_single_node_names() {
        let o = p(&[]).unwrap();
        assert_eq!(o.runtime, RuntimeKind::Cri);
        assert_eq!(o.nodes, 1);
        assert_eq!(o.node_names("MyHost"), vec!["myhost"]);
        let o = p(&["--node-name", "x1"]).unwrap();
        assert_eq!(o.node_names("MyHost"), vec!["x1"]);
    }

    #[test]
    fn configuration_flags() {
        let o = p(&[
            "--cgroup-driver",
            "cgroupfs",
            "--fail-swap-on=false",
            "--rotate-certificates",
            "--provider-id=x",
            "--seccomp-default=false",
        ])
        .unwrap();
        let set: Vec<(&str, String)> = o
            .config_flags
            .iter()
            .map(|f| (f.flag.as_str(), serde_yaml_ng::to_string(&f.value).unwrap()))
            .collect();
        assert_eq!(
            set,
            vec![
                ("--cgroup-driver", "cgroupfs\n".to_string()),
                ("--fail-swap-on", "false\n".into()),
                ("--rotate-certificates", "true\n".into()),
                ("--provider-id", "x\n".into()),
            ]
        );
        // Deprecated as upstream's, but --provider-id is not.
        assert_eq!(o.warnings.len(), 3);
        assert!(o.warnings[0].starts_with(
            "Flag --cgroup-driver has been deprecated, This parameter should be set via the config file"
        ));
        assert!(p(&["--fail-swap-on=maybe"]).is_err());
        assert_eq!(
            p(&["--max_pods=7"]).unwrap().config_flags[0].flag,
            "--max-pods"
        );
        assert!(p(&["--seccomp-default", "--seccomp-default=false"])
            .unwrap()
            .config_flags
            .is_empty());
        let o = p(&[
            "--maximum-dead-containers=3",
            "--minimum-container-ttl-duration=1m",
        ])
        .unwrap();
        assert_eq!(o.container_gc.max_containers, 3);
        assert_eq!(o.container_gc.min_age, Duration::from_secs(60));
        assert_eq!(o.container_gc.max_per_pod_container, 1);
        assert_eq!(
            p(&["--version"]).unwrap().version,
            Some(VersionFormat::Plain)
        );
        assert_eq!(
            p(&["--version=raw"]).unwrap().version,
            Some(VersionFormat::Raw)
        );
        assert_eq!(p(&["--version=false"]).unwrap().version, None);
        // Empty values of flags rkube does not implement ask for nothing.
        assert!(p(&[
            "--cloud-provider=",
            "--lock-file=",
            "--exit-on-lock-contention=false"
        ])
        .is_ok());
    }

    #[test]
    fn unknown_and_unhonoured_flags_are_refused() {
        for (args, want) in [
            (&["--no-such-flag"][..], "unknown flag: --no-such-flag"),
            (
                &["--pod-infra-container-image=pause"],
                "unknown flag: --pod-infra-container-image",
            ),
            (
                &["--cloud-provider=external"],
                "cloud providers are not implemented",
            ),
            (
                &["--config-dir=/etc/kubelet.conf.d"],
                "drop-in configuration directories",
            ),
            (&["--exit-on-lock-contention"], "lock file"),
            (&["--vmodule=a=2"], "per-file log verbosity"),
            (
                &["--image-credential-provider-config=/c"],
                "credential provider",
            ),
            (&["--max-pods=lots"], "\"--max-pods\" flag"),
        ] {
            let Err(ParseError::Invalid(m)) = p(args) else {
                panic!("{args:?} accepted")
            };
            assert!(m.contains(want), "{args:?}: {m}");
        }
    }

    #[test]
    fn bad_flags() {
        for bad in [
            &["--runtime=docker"][..],
            &["--nodes=0"],
            &["--nodes=2"],
            &["--runtime=sim", "--nodes=x"],
            &["--sim-signals=/s.json"],
            &["--node-ip=abc"],
            &["--node-labels=novalue"],
            &["--runtime=sim", "--node-name-pattern=nope"],
            &["--pod-run-time=5 parsecs"],
            &["--kubeconfig"],
            &["--bootstrap-kubeconfig=/b.conf"],
            &[
                "--bootstrap-kubeconfig=/b.conf",
                "--kubeconfig=/k",
                "--runtime=sim",
                "--nodes=2",
            ],
            &["stray"],
            &["-v=high"],
        ] {
            assert!(matches!(p(bad), Err(ParseError::Invalid(_))), "{bad:?}");
        }
        assert_eq!(p(&["-h"]), Err(ParseError::Help));
        let Err(ParseError::Invalid(m)) = p(&["--nodes=2"]) else {
            unreachable!()
        };
        assert_eq!(m, "--nodes needs --runtime sim");
    }
}
