//! Command-line flags of `rkube scheduler`, spelled as kube-scheduler's
//! (`--flag=value`, `--flag value`, `-v=N`, `--v N`). kube-scheduler flags
//! rkube does not implement are accepted with a warning so an existing
//! manifest's command line keeps working.

use std::path::PathBuf;
use std::time::Duration;

/// Parsed flags. `Option` fields are the ones a `--config` file also
/// sets: given explicitly, the flag wins (kube-scheduler's
/// `ApplyLeaderElectionTo` and client-connection overrides).
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// `--kubeconfig`.
    pub kubeconfig: Option<PathBuf>,
    /// `--config` (a KubeSchedulerConfiguration file).
    pub config: Option<PathBuf>,
    /// `--leader-elect`.
    pub leader_elect: Option<bool>,
    /// `--leader-elect-lease-duration`.
    pub lease_duration: Option<Duration>,
    /// `--leader-elect-renew-deadline`.
    pub renew_deadline: Option<Duration>,
    /// `--leader-elect-retry-period`.
    pub retry_period: Option<Duration>,
    /// `--leader-elect-resource-lock` (only `leases`).
    pub resource_lock: Option<String>,
    /// `--leader-elect-resource-name`.
    pub resource_name: Option<String>,
    /// `--leader-elect-resource-namespace`.
    pub resource_namespace: Option<String>,
    /// `--kube-api-qps`.
    pub qps: Option<f32>,
    /// `--kube-api-burst`.
    pub burst: Option<i32>,
    /// `-v`/`--v` log verbosity.
    pub verbosity: u32,
    /// `--bind-address` of the secure port (default 127.0.0.1; upstream's is 0.0.0.0).
    pub bind_address: String,
    /// `--secure-port` (0 disables serving).
    pub secure_port: u16,
    /// `--authentication-kubeconfig` (TokenReview for `/metrics`).
    pub authentication_kubeconfig: Option<PathBuf>,
    /// `--authorization-kubeconfig` (SubjectAccessReview for `/metrics`).
    pub authorization_kubeconfig: Option<PathBuf>,
    /// `--authorization-always-allow-paths`.
    pub always_allow_paths: Vec<String>,
    /// `--tls-cert-file`.
    pub tls_cert_file: Option<PathBuf>,
    /// `--tls-private-key-file`.
    pub tls_private_key_file: Option<PathBuf>,
    /// `--cert-dir` (where the self-signed certificate is kept).
    pub cert_dir: Option<PathBuf>,
    /// `--client-ca-file`: client certificates signed by these CAs are
    /// authenticated on the secure port (user CN, groups O).
    pub client_ca_file: Option<PathBuf>,
    /// `--explain-scores` (rkube's own): log every pod's per-plugin score
    /// table, as `rkube explain` prints it (also at `-v=10`).
    pub explain_scores: bool,
    /// `--record-decisions` (rkube's own): each binding carries the
    /// annotation `scheduling.rkube.dev/decision` (what the cache had seen
    /// and the cycle's number), so `rkube replay` can replay a recording in
    /// decision order.
    pub record_decisions: bool,
    /// `--feature-gates OpportunisticBatching=...` (on by default, as in
    /// v1.37); every other scheduling gate is refused away from its
    /// default, and gates the scheduler does not read are accepted.
    pub opportunistic_batching: bool,
    /// `--feature-gates GenericWorkload=true` (off by default): PodGroups
    /// are watched and their members scheduled in pod-group cycles.
    pub generic_workload: bool,
    /// Warnings about ignored flags.
    pub warnings: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            kubeconfig: None,
            config: None,
            leader_elect: None,
            lease_duration: None,
            renew_deadline: None,
            retry_period: None,
            resource_lock: None,
            resource_name: None,
            resource_namespace: None,
            qps: None,
            burst: None,
            verbosity: 0,
            bind_address: "127.0.0.1".into(),
            secure_port: 10259,
            authentication_kubeconfig: None,
            authorization_kubeconfig: None,
            always_allow_paths: vec!["/healthz".into(), "/readyz".into(), "/livez".into()],
            tls_cert_file: None,
            tls_private_key_file: None,
            cert_dir: None,
            client_ca_file: None,
            explain_scores: false,
            opportunistic_batching: true,
            generic_workload: false,
            record_decisions: false,
            warnings: Vec::new(),
        }
    }
}

/// Usage text.
pub const USAGE: &str = "\
Usage: rkube scheduler [flags]

Runs rkube as the cluster's scheduler: watches the API server, schedules
pending pods of its profiles' schedulerNames and binds them.

Flags (spelled as kube-scheduler's; other kube-scheduler flags are accepted
and ignored with a warning). Flags also set in --config win when given.
      --kubeconfig PATH                  kubeconfig of the scheduler's identity
      --config FILE                      KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1);
                                         its clientConnection.kubeconfig wins over --kubeconfig
      --leader-elect[=BOOL]              leader election on a Lease (default true)
      --leader-elect-lease-duration D    default 15s
      --leader-elect-renew-deadline D    default 10s
      --leader-elect-retry-period D      default 2s
      --leader-elect-resource-lock leases
      --leader-elect-resource-name NAME  default kube-scheduler
      --leader-elect-resource-namespace NS  default kube-system
      --kube-api-qps N                   client QPS for API writes (default 50)
      --kube-api-burst N                 client burst (default 100)
  -v, --v N                              log verbosity (2: each placement, 4: debug, 10: score tables)
      --explain-scores                   log each pod's per-plugin score table (as rkube explain)
      --record-decisions                 annotate each bound pod with scheduling.rkube.dev/decision
                                         (term, cycle, what the cache had seen), for rkube replay
      --feature-gates K=V,...            OpportunisticBatching either way; other scheduling gates
                                         only at their v1.37 defaults (refused otherwise)
      --bind-address IP                  address of the secure port (default 127.0.0.1)
      --secure-port PORT                 HTTPS /healthz /livez /readyz /metrics (default 10259, 0 disables)
      --tls-cert-file FILE               serving certificate (default: self-signed)
      --tls-private-key-file FILE        its key
      --cert-dir DIR                     where the self-signed certificate is kept
      --client-ca-file FILE              CAs whose client certificates authenticate (user CN, groups O)
      --authentication-kubeconfig PATH   client for TokenReview (default: the scheduler's)
      --authorization-kubeconfig PATH    client for SubjectAccessReview (default: the scheduler's)
      --authorization-always-allow-paths P,...  served without auth (default /healthz,/readyz,/livez)
  -h, --help                             this text
";

pub use rkube_daemon::flags::ParseError;
use rkube_daemon::flags::{parse_bool, Flags};

/// Parses the arguments after `rkube scheduler`.
pub fn parse<I: IntoIterator<Item = String>>(args: I) -> Result<Options, ParseError> {
    let mut o = Options::default();
    let mut gates = std::collections::BTreeMap::new();
    let mut flags = Flags::new(args, "kube-scheduler");
    while let Some(flag) = flags.next_flag() {
        let flag = flag?;
        let name = flag.name.clone();
        let mut value = || flags.value(&flag);
        let duration = |v: String| {
            rkube_util::duration::parse(&v).map_err(|e| {
                ParseError::Invalid(format!(
                    "invalid argument {} for \"--{name}\" flag: {e}",
                    rkube_util::quote(&v)
                ))
            })
        };
        let number =
            |v: &str| ParseError::Invalid(format!("invalid argument {v:?} for \"--{name}\" flag"));
        match name.as_str() {
            "h" | "help" => return Err(ParseError::Help),
            "kubeconfig" => o.kubeconfig = Some(PathBuf::from(value()?)),
            "config" => o.config = Some(PathBuf::from(value()?)),
            "v" => {
                let v = value()?;
                o.verbosity = v.parse().map_err(|_| number(&v))?;
            }
            "bind-address" => {
                let v = value()?;
                v.parse::<std::net::IpAddr>().map_err(|_| number(&v))?;
                o.bind_address = v;
            }
            "secure-port" => {
                let v = value()?;
                o.secure_port = v.parse().map_err(|_| number(&v))?;
            }
            "leader-elect" => o.leader_elect = Some(flag.boolean()?),
            "explain-scores" => o.explain_scores = flag.boolean()?,
            "record-decisions" => o.record_decisions = flag.boolean()?,
            "leader-elect-lease-duration" => o.lease_duration = Some(duration(value()?)?),
            "leader-elect-renew-deadline" => o.renew_deadline = Some(duration(value()?)?),
            "leader-elect-retry-period" => o.retry_period = Some(duration(value()?)?),
            "leader-elect-resource-lock" => {
                let v = value()?;
                if v != "leases" {
                    return Err(ParseError::Invalid(format!(
                        "--leader-elect-resource-lock={v:?}: only \"leases\" is supported (as in kube-scheduler v1.37)"
                    )));
                }
                o.resource_lock = Some(v);
            }
            "leader-elect-resource-name" => o.resource_name = Some(value()?),
            "leader-elect-resource-namespace" => o.resource_namespace = Some(value()?),
            "kube-api-qps" => {
                let v = value()?;
                o.qps = Some(v.parse().map_err(|_| number(&v))?);
            }
            "kube-api-burst" => {
                let v = value()?;
                o.burst = Some(v.parse().map_err(|_| number(&v))?);
            }
            "authentication-kubeconfig" => {
                o.authentication_kubeconfig = Some(PathBuf::from(value()?))
            }
            "authorization-kubeconfig" => {
                o.authorization_kubeconfig = Some(PathBuf::from(value()?))
            }
            "authorization-always-allow-paths" => {
                o.always_allow_paths = value()?
                    .split(',')
                    .map(str::trim)
                    .filter(|p| !p.is_empty())
                    .map(String::from)
                    .collect()
            }
            "tls-cert-file" => o.tls_cert_file = Some(PathBuf::from(value()?)),
            "tls-private-key-file" => o.tls_private_key_file = Some(PathBuf::from(value()?)),
            "cert-dir" => o.cert_dir = Some(PathBuf::from(value()?)),
            "client-ca-file" => o.client_ca_file = Some(PathBuf::from(value()?)),
            "feature-gates" => {
                gates.extend(gate_list(&value()?).map_err(ParseError::Invalid)?);
            }
            _ => {
                // An unknown flag: its value is the next argument unless that
                // is a flag too (kube-scheduler takes no positional arguments).
                let shown = flags.take_unknown(&flag);
                o.warnings.push(format!(
                    "flag {shown} is not implemented by rkube scheduler and is ignored"
                ));
            }
        }
    }
    let g = check_gates_for(&gates, false).map_err(ParseError::Invalid)?;
    o.warnings.extend(g.warnings);
    o.opportunistic_batching = g.opportunistic_batching;
    o.generic_workload = g.generic_workload;
    Ok(o)
}

/// A `--feature-gates` value (`K=V,...`) as a map, in pflag's words when
/// an entry is not `name=bool`.
pub fn gate_list(list: &str) -> Result<std::collections::BTreeMap<String, bool>, String> {
    let mut gates = std::collections::BTreeMap::new();
    for gate in list.split(',').map(str::trim).filter(|g| !g.is_empty()) {
        let (k, v) = gate.split_once('=').ok_or_else(|| {
            format!(
                "invalid argument {gate:?} for \"--feature-gates\" flag: missing bool value for {gate}"
            )
        })?;
        let on = parse_bool("feature-gates", v.trim()).map_err(|e| match e {
            ParseError::Invalid(m) => m,
            other => format!("{other:?}"),
        })?;
        gates.insert(k.trim().to_string(), on);
    }
    Ok(gates)
}

/// Checks gates as the scheduler takes them: every gate upstream knows is
/// accepted at its default, and a gate kube-scheduler does not read in any
/// position (kubeadm passes one list to every component). A scheduling
/// gate rkube does not implement is refused away from its default, never
/// ignored. Returns OpportunisticBatching's value and upstream's warnings.
pub fn check_gates(
    gates: &std::collections::BTreeMap<String, bool>,
) -> Result<(bool, Vec<String>), String> {
    let g = check_gates_for(gates, false)?;
    Ok((g.opportunistic_batching, g.warnings))
}

/// The scheduling gates a command runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gates {
    /// OpportunisticBatching (on by default).
    pub opportunistic_batching: bool,
    /// GenericWorkload (off by default): gang scheduling of PodGroups.
    pub generic_workload: bool,
    /// Upstream's warnings (GA and deprecated gates set).
    pub warnings: Vec<String>,
}

/// [`check_gates`] for the live scheduler (`offline` false) or the offline
/// commands (`simulate`, `explain`, ...); both implement GenericWorkload.
pub fn check_gates_for(
    gates: &std::collections::BTreeMap<String, bool>,
    offline: bool,
) -> Result<Gates, String> {
    let implemented = |name: &str, _: bool| {
        name == "OpportunisticBatching"
            || name == "GenericWorkload"
            || !SCHEDULER_GATES.contains(&name)
    };
    let component = if offline {
        "rkube's offline commands"
    } else {
        "rkube scheduler"
    };
    let (_, warnings) =
        rkube_util::feature_gates::FeatureGates::new(gates, &implemented, component)
            .map_err(|e| format!("--feature-gates: {e}"))?;
    Ok(Gates {
        opportunistic_batching: gates.get("OpportunisticBatching").copied().unwrap_or(true),
        generic_workload: gates.get("GenericWorkload").copied().unwrap_or(false),
        warnings,
    })
}

/// The gates kube-scheduler v1.37.2 reads (`pkg/scheduler`,
/// `cmd/kube-scheduler`).
pub const SCHEDULER_GATES: &[&str] = &[
    "CompositePodGroup",
    "CoordinatedLeaderElection",
    "DRAAdminAccess",
    "DRAConsumableCapacity",
    "DRADerivedAttributes",
    "DRADeviceBindingConditions",
    "DRADeviceCompatibilityGroups",
    "DRADeviceTaintRules",
    "DRADeviceTaints",
    "DRAExtendedResource",
    "DRAFractionalCapacityRange",
    "DRAListTypeAttributes",
    "DRANodeAllocatableResources",
    "DRAOptionalNodeOperations",
    "DRAPartitionableDevices",
    "DRAPrioritizedList",
    "DRAResourceClaimDeviceStatus",
    "DRASchedulerFilterTimeout",
    "DRAWorkloadResourceClaims",
    "DynamicResourceAllocation",
    "GenericWorkload",
    "InPlacePodLevelResourcesVerticalScaling",
    "InPlacePodVerticalScaling",
    "InPlacePodVerticalScalingSchedulerPreemption",
    "InterPodAffinityHostnameFastPath",
    "MatchLabelKeysInPodTopologySpread",
    "NodeDeclaredFeatures",
    "NodeInclusionPolicyInPodTopologySpread",
    "NominatedNodeNameForExpectation",
    "OpportunisticBatching",
    "PodGroupPreemptionPolicy",
    "PodLevelResources",
    "SchedulerAsyncAPICalls",
    "SchedulerAsyncPreemption",
    "SchedulerPopFromBackoffQ",
    "SchedulerPreQueueingHints",
    "StorageCapacityScoring",
    "TaintTolerationComparisonOperators",
    "TopologyAwareWorkloadScheduling",
    "VolumeAttributesClass",
    "VolumeLimitScaling",
];

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Options, ParseError> {
        parse(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn feature_gates() {
        assert!(p(&[]).unwrap().opportunistic_batching);
        // A gate only other components read, a scheduling gate at its
        // default, and GA ones (upstream's warning).
        let o = p(&["--feature-gates=OpportunisticBatching=false,SchedulerAsyncAPICalls=false,APIServingWithRoutine=true,VolumeLimitScaling=true,DRADeviceTaintRules=true"])
            .unwrap();
        assert!(!o.opportunistic_batching);
        assert_eq!(
            o.warnings,
            ["Setting GA feature gate DRADeviceTaintRules=true. It will be removed in a future release."]
        );
        // A scheduling gate rkube does not implement, away from its default.
        let e = p(&["--feature-gates=SchedulerAsyncAPICalls=true"]).unwrap_err();
        assert!(
            format!("{e:?}").contains(
                "feature gate SchedulerAsyncAPICalls=true is not implemented by rkube scheduler"
            ),
            "{e:?}"
        );
        // Gang scheduling.
        assert!(
            p(&["--feature-gates=GenericWorkload=true"])
                .unwrap()
                .generic_workload
        );
        assert!(!p(&[]).unwrap().generic_workload);
        // Unknown and locked gates, as upstream refuses them.
        let e = p(&["--feature-gates=NoSuchGate=true"]).unwrap_err();
        assert!(
            format!("{e:?}").contains("unrecognized feature gate: NoSuchGate"),
            "{e:?}"
        );
        let e = p(&["--feature-gates=NodeDeclaredFeatures=false"]).unwrap_err();
        assert!(
            format!("{e:?}").contains("feature is locked to true"),
            "{e:?}"
        );
        for g in SCHEDULER_GATES {
            assert!(
                rkube_util::feature_gates::generated::GATES
                    .iter()
                    .any(|x| x.name == *g),
                "{g} is one of v1.37.2's gates"
            );
        }
        assert!(
            p(&["--feature-gates", "OpportunisticBatching=true"])
                .unwrap()
                .opportunistic_batching
        );
        assert!(p(&["--feature-gates=OpportunisticBatching"]).is_err());
        assert!(p(&["--feature-gates=OpportunisticBatching=maybe"]).is_err());
    }

    #[test]
    fn known_flags_both_spellings() {
        let o = p(&[
            "--kubeconfig=/k",
            "--config",
            "/c.yaml",
            "--leader-elect=false",
            "-v=4",
            "--bind-address",
            "127.0.0.1",
            "--secure-port=0",
            "--leader-elect-lease-duration=20s",
            "--leader-elect-renew-deadline",
            "12s",
            "--leader-elect-retry-period=500ms",
            "--leader-elect-resource-name=rk",
            "--leader-elect-resource-namespace=ns",
            "--leader-elect-resource-lock=leases",
            "--kube-api-qps=200",
            "--kube-api-burst=400",
            "--authorization-always-allow-paths=/healthz,/metrics",
            "--authentication-kubeconfig=/a",
            "--tls-cert-file=/t.crt",
            "--tls-private-key-file=/t.key",
            "--cert-dir=/certs",
            "--client-ca-file",
            "/ca.crt",
        ])
        .unwrap();
        assert_eq!(o.kubeconfig, Some(PathBuf::from("/k")));
        assert_eq!(o.config, Some(PathBuf::from("/c.yaml")));
        assert_eq!(o.leader_elect, Some(false));
        assert_eq!(o.verbosity, 4);
        assert_eq!(o.bind_address, "127.0.0.1");
        assert_eq!(o.secure_port, 0);
        assert_eq!(o.lease_duration, Some(Duration::from_secs(20)));
        assert_eq!(o.renew_deadline, Some(Duration::from_secs(12)));
        assert_eq!(o.retry_period, Some(Duration::from_millis(500)));
        assert_eq!(o.resource_name.as_deref(), Some("rk"));
        assert_eq!(o.resource_namespace.as_deref(), Some("ns"));
        assert_eq!(o.qps, Some(200.0));
        assert_eq!(o.burst, Some(400));
        assert_eq!(o.always_allow_paths, vec!["/healthz", "/metrics"]);
        assert_eq!(o.authentication_kubeconfig, Some(PathBuf::from("/a")));
        assert_eq!(o.cert_dir, Some(PathBuf::from("/certs")));
        assert_eq!(o.client_ca_file, Some(PathBuf::from("/ca.crt")));
        assert!(o.warnings.is_empty(), "{:?}", o.warnings);
        assert_eq!(p(&["--v", "2"]).unwrap().verbosity, 2);
        assert_eq!(p(&["--leader-elect"]).unwrap().leader_elect, Some(true));
        assert_eq!(p(&[]).unwrap().leader_elect, None);
        assert_eq!(p(&[]).unwrap().bind_address, "127.0.0.1");
        assert!(p(&["--explain-scores"]).unwrap().explain_scores);
        assert!(p(&["--record-decisions"]).unwrap().record_decisions);
        assert!(!p(&["--record-decisions=false"]).unwrap().record_decisions);
        assert!(!p(&[]).unwrap().record_decisions);
    }

    #[test]
    fn unknown_flags_warn_and_errors() {
        let o = p(&[
            "--profiling=false",
            "--kube-api-content-type",
            "application/json",
            "--leader-elect=false",
        ])
        .unwrap();
        assert_eq!(o.warnings.len(), 2);
        assert!(o.warnings[1].contains("--kube-api-content-type application/json"));
        assert_eq!(o.leader_elect, Some(false));
        assert_eq!(p(&["--help"]), Err(ParseError::Help));
        for bad in [
            "--leader-elect=maybe",
            "--secure-port=x",
            "--bind-address=localhost:1",
            "--leader-elect-lease-duration=15",
            "--leader-elect-resource-lock=endpoints",
            "--kube-api-qps=fast",
            "stray",
        ] {
            assert!(
                matches!(p(&[bad]), Err(ParseError::Invalid(_))),
                "{bad} accepted"
            );
        }
    }
}
