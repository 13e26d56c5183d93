//! The kubelet flags that set a KubeletConfiguration field (upstream's
//! `KubeletConfiguration` flags, most deprecated in favour of `--config`
//! but still what `kubeadm-flags.env`, `/etc/default/kubelet` and many
//! units pass). A flag's value is turned into the field's YAML value and
//! laid over the configuration file, so it is validated, honoured or
//! refused exactly as the same field in the file would be. As upstream, a
//! flag replaces the file's whole field; repeated map and list flags add up.

use serde_yaml_ng::{Mapping, Value};

use rkube_daemon::flags::{invalid, parse_bool, ParseError};

/// How a flag's text becomes the field's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Str,
    Bool,
    Int,
    /// A duration, kept as text (the configuration decoder parses it).
    Dur,
    /// `a,b,c` → a list (pflag's `StringSlice`).
    List,
    /// `k=v,k2=v2` → a map of strings.
    Map,
    /// `k=v` (no splitting on commas: the value may hold them).
    MapNoSplit,
    /// `k=true,k2=false` → a map of booleans (`--feature-gates`).
    MapBool,
    /// `k<v,k2<v2` → a map of strings (`--eviction-hard`/`--eviction-soft`).
    MapLangle,
    /// `k:v,k:v2` → a map of lists (`--manifest-url-header`).
    MapColonList,
    /// `key=value:Effect,...` → taints (`--register-with-taints`).
    Taints,
    /// `0:memory=1Gi,hugepages-1Gi=2Gi;1:memory=2Gi` → `reservedMemory`.
    ReservedMemory,
}

/// Flag name, field path, kind.
const TABLE: &[(&str, &[&str], Kind)] = &[
    ("enable-server", &["enableServer"], Kind::Bool),
    ("fail-swap-on", &["failSwapOn"], Kind::Bool),
    ("pod-manifest-path", &["staticPodPath"], Kind::Str),
    ("sync-frequency", &["syncFrequency"], Kind::Dur),
    ("file-check-frequency", &["fileCheckFrequency"], Kind::Dur),
    ("http-check-frequency", &["httpCheckFrequency"], Kind::Dur),
    ("manifest-url", &["staticPodURL"], Kind::Str),
    (
        "manifest-url-header",
        &["staticPodURLHeader"],
        Kind::MapColonList,
    ),
    ("address", &["address"], Kind::Str),
    ("port", &["port"], Kind::Int),
    ("read-only-port", &["readOnlyPort"], Kind::Int),
    ("fail-cgroupv1", &["failCgroupV1"], Kind::Bool),
    (
        "container-runtime-endpoint",
        &["containerRuntimeEndpoint"],
        Kind::Str,
    ),
    (
        "image-service-endpoint",
        &["imageServiceEndpoint"],
        Kind::Str,
    ),
    (
        "anonymous-auth",
        &["authentication", "anonymous", "enabled"],
        Kind::Bool,
    ),
    (
        "authentication-token-webhook",
        &["authentication", "webhook", "enabled"],
        Kind::Bool,
    ),
    (
        "authentication-token-webhook-cache-ttl",
        &["authentication", "webhook", "cacheTTL"],
        Kind::Dur,
    ),
    (
        "client-ca-file",
        &["authentication", "x509", "clientCAFile"],
        Kind::Str,
    ),
    ("authorization-mode", &["authorization", "mode"], Kind::Str),
    (
        "authorization-webhook-cache-authorized-ttl",
        &["authorization", "webhook", "cacheAuthorizedTTL"],
        Kind::Dur,
    ),
    (
        "authorization-webhook-cache-unauthorized-ttl",
        &["authorization", "webhook", "cacheUnauthorizedTTL"],
        Kind::Dur,
    ),
    ("tls-cert-file", &["tlsCertFile"], Kind::Str),
    ("tls-private-key-file", &["tlsPrivateKeyFile"], Kind::Str),
    (
        "rotate-server-certificates",
        &["serverTLSBootstrap"],
        Kind::Bool,
    ),
    ("tls-cipher-suites", &["tlsCipherSuites"], Kind::List),
    ("tls-min-version", &["tlsMinVersion"], Kind::Str),
    ("rotate-certificates", &["rotateCertificates"], Kind::Bool),
    ("registry-qps", &["registryPullQPS"], Kind::Int),
    ("registry-burst", &["registryBurst"], Kind::Int),
    ("event-qps", &["eventRecordQPS"], Kind::Int),
    ("event-burst", &["eventBurst"], Kind::Int),
    (
        "enable-debugging-handlers",
        &["enableDebuggingHandlers"],
        Kind::Bool,
    ),
    (
        "contention-profiling",
        &["enableContentionProfiling"],
        Kind::Bool,
    ),
    ("healthz-port", &["healthzPort"], Kind::Int),
    ("healthz-bind-address", &["healthzBindAddress"], Kind::Str),
    ("oom-score-adj", &["oomScoreAdj"], Kind::Int),
    ("cluster-domain", &["clusterDomain"], Kind::Str),
    ("volume-plugin-dir", &["volumePluginDir"], Kind::Str),
    ("cluster-dns", &["clusterDNS"], Kind::List),
    (
        "streaming-connection-idle-timeout",
        &["streamingConnectionIdleTimeout"],
        Kind::Dur,
    ),
    (
        "node-status-update-frequency",
        &["nodeStatusUpdateFrequency"],
        Kind::Dur,
    ),
    (
        "minimum-image-ttl-duration",
        &["imageMinimumGCAge"],
        Kind::Dur,
    ),
    (
        "image-gc-high-threshold",
        &["imageGCHighThresholdPercent"],
        Kind::Int,
    ),
    (
        "image-gc-low-threshold",
        &["imageGCLowThresholdPercent"],
        Kind::Int,
    ),
    (
        "volume-stats-agg-period",
        &["volumeStatsAggPeriod"],
        Kind::Dur,
    ),
    ("feature-gates", &["featureGates"], Kind::MapBool),
    ("kubelet-cgroups", &["kubeletCgroups"], Kind::Str),
    ("system-cgroups", &["systemCgroups"], Kind::Str),
    ("provider-id", &["providerID"], Kind::Str),
    ("cgroups-per-qos", &["cgroupsPerQOS"], Kind::Bool),
    ("cgroup-driver", &["cgroupDriver"], Kind::Str),
    ("cgroup-root", &["cgroupRoot"], Kind::Str),
    ("cpu-manager-policy", &["cpuManagerPolicy"], Kind::Str),
    (
        "cpu-manager-policy-options",
        &["cpuManagerPolicyOptions"],
        Kind::MapNoSplit,
    ),
    (
        "cpu-manager-reconcile-period",
        &["cpuManagerReconcilePeriod"],
        Kind::Dur,
    ),
    ("qos-reserved", &["qosReserved"], Kind::Map),
    (
        "topology-manager-policy",
        &["topologyManagerPolicy"],
        Kind::Str,
    ),
    (
        "runtime-request-timeout",
        &["runtimeRequestTimeout"],
        Kind::Dur,
    ),
    ("hairpin-mode", &["hairpinMode"], Kind::Str),
    ("max-pods", &["maxPods"], Kind::Int),
    ("pod-cidr", &["podCIDR"], Kind::Str),
    ("pod-max-pids", &["podPidsLimit"], Kind::Int),
    ("resolv-conf", &["resolvConf"], Kind::Str),
    ("runonce", &["runOnce"], Kind::Bool),
    ("cpu-cfs-quota", &["cpuCFSQuota"], Kind::Bool),
    ("cpu-cfs-quota-period", &["cpuCFSQuotaPeriod"], Kind::Dur),
    (
        "enable-controller-attach-detach",
        &["enableControllerAttachDetach"],
        Kind::Bool,
    ),
    (
        "make-iptables-util-chains",
        &["makeIPTablesUtilChains"],
        Kind::Bool,
    ),
    (
        "container-log-max-size",
        &["containerLogMaxSize"],
        Kind::Str,
    ),
    (
        "container-log-max-files",
        &["containerLogMaxFiles"],
        Kind::Int,
    ),
    (
        "allowed-unsafe-sysctls",
        &["allowedUnsafeSysctls"],
        Kind::List,
    ),
    (
        "node-status-max-images",
        &["nodeStatusMaxImages"],
        Kind::Int,
    ),
    (
        "kernel-memcg-notification",
        &["kernelMemcgNotification"],
        Kind::Bool,
    ),
    (
        "local-storage-capacity-isolation",
        &["localStorageCapacityIsolation"],
        Kind::Bool,
    ),
    ("max-open-files", &["maxOpenFiles"], Kind::Int),
    ("kube-api-content-type", &["contentType"], Kind::Str),
    ("kube-api-qps", &["kubeAPIQPS"], Kind::Int),
    ("kube-api-burst", &["kubeAPIBurst"], Kind::Int),
    (
        "serialize-image-pulls",
        &["serializeImagePulls"],
        Kind::Bool,
    ),
    ("eviction-hard", &["evictionHard"], Kind::MapLangle),
    ("eviction-soft", &["evictionSoft"], Kind::MapLangle),
    (
        "eviction-soft-grace-period",
        &["evictionSoftGracePeriod"],
        Kind::Map,
    ),
    (
        "eviction-pressure-transition-period",
        &["evictionPressureTransitionPeriod"],
        Kind::Dur,
    ),
    (
        "eviction-max-pod-grace-period",
        &["evictionMaxPodGracePeriod"],
        Kind::Int,
    ),
    (
        "eviction-minimum-reclaim",
        &["evictionMinimumReclaim"],
        Kind::Map,
    ),
    ("pods-per-core", &["podsPerCore"], Kind::Int),
    (
        "protect-kernel-defaults",
        &["protectKernelDefaults"],
        Kind::Bool,
    ),
    ("reserved-cpus", &["reservedSystemCPUs"], Kind::Str),
    (
        "topology-manager-scope",
        &["topologyManagerScope"],
        Kind::Str,
    ),
    (
        "topology-manager-policy-options",
        &["topologyManagerPolicyOptions"],
        Kind::Map,
    ),
    ("system-reserved", &["systemReserved"], Kind::Map),
    ("kube-reserved", &["kubeReserved"], Kind::Map),
    (
        "enforce-node-allocatable",
        &["enforceNodeAllocatable"],
        Kind::List,
    ),
    (
        "system-reserved-cgroup",
        &["systemReservedCgroup"],
        Kind::Str,
    ),
    ("kube-reserved-cgroup", &["kubeReservedCgroup"], Kind::Str),
    ("memory-manager-policy", &["memoryManagerPolicy"], Kind::Str),
    ("reserved-memory", &["reservedMemory"], Kind::ReservedMemory),
    ("register-node", &["registerNode"], Kind::Bool),
    (
        "register-with-taints",
        &["registerWithTaints"],
        Kind::Taints,
    ),
    ("seccomp-default", &["seccompDefault"], Kind::Bool),
    (
        "log-flush-frequency",
        &["logging", "flushFrequency"],
        Kind::Dur,
    ),
    ("logging-format", &["logging", "format"], Kind::Str),
    (
        "log-json-info-buffer-size",
        &["logging", "options", "json", "infoBufferSize"],
        Kind::Str,
    ),
    (
        "log-json-split-stream",
        &["logging", "options", "json", "splitStream"],
        Kind::Bool,
    ),
    (
        "log-text-info-buffer-size",
        &["logging", "options", "text", "infoBufferSize"],
        Kind::Str,
    ),
    (
        "log-text-split-stream",
        &["logging", "options", "text", "splitStream"],
        Kind::Bool,
    ),
];

/// The configuration flags upstream does not mark deprecated.
pub const NOT_DEPRECATED: &[&str] = &["log-flush-frequency", "provider-id", "fail-cgroupv1"];

/// A configuration field set by a flag.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigFlag {
    /// The flag, as `--name`.
    pub flag: String,
    /// The field's path in the KubeletConfiguration document.
    pub path: &'static [&'static str],
    /// Its value.
    pub value: Value,
}

/// Whether `name` is a configuration flag.
pub fn is_config_flag(name: &str) -> bool {
    TABLE.iter().any(|(n, _, _)| *n == name)
}

/// Whether configuration flag `name` is a boolean (true when given alone).
pub fn is_bool(name: &str) -> bool {
    TABLE.iter().any(|(n, _, k)| *n == name && *k == Kind::Bool)
}

/// Adds flag `name` (a configuration flag) with text `v` (for a boolean
/// given alone, `"true"`) to `out`: a repeated map or list flag adds to
/// the value of its earlier occurrences, any other replaces it.
pub fn set(out: &mut Vec<ConfigFlag>, name: &str, v: &str) -> Result<(), ParseError> {
    let Some((_, path, kind)) = TABLE.iter().find(|(n, _, _)| *n == name) else {
        return Err(ParseError::Invalid(format!("unknown flag: --{name}")));
    };
    let value = convert(name, *kind, v)?;
    match out.iter_mut().find(|f| f.path == *path) {
        // Upstream's taints flag keeps its last value.
        Some(prev) if *kind == Kind::Taints => prev.value = value,
        Some(prev) => match (&mut prev.value, value) {
            (Value::Mapping(m), Value::Mapping(add)) => m.extend(add),
            (Value::Sequence(s), Value::Sequence(add)) => s.extend(add),
            (old, new) => *old = new,
        },
        None => out.push(ConfigFlag {
            flag: format!("--{name}"),
            path,
            value,
        }),
    }
    Ok(())
}

fn convert(name: &str, kind: Kind, v: &str) -> Result<Value, ParseError> {
    let pairs = |sep: char| -> Result<Vec<(String, String)>, ParseError> {
        v.split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|p| match p.split_once(sep) {
                Some((k, val)) if !k.trim().is_empty() => {
                    Ok((k.trim().to_string(), val.trim().to_string()))
                }
                _ => Err(invalid(name, v, &format!("{p:?} is not key{sep}value"))),
            })
            .collect()
    };
    let map = |items: Vec<(String, Value)>| {
        Value::Mapping(
            items
                .into_iter()
                .map(|(k, v)| (Value::String(k), v))
                .collect(),
        )
    };
    Ok(match kind {
        Kind::Str | Kind::Dur => Value::String(v.to_string()),
        Kind::Bool => Value::Bool(parse_bool(name, v)?),
        Kind::Int => Value::Number(
            v.trim()
                .parse::<i64>()
                .map_err(|_| {
                    invalid(
                        name,
                        v,
                        &format!("strconv.ParseInt: parsing {v:?}: invalid syntax"),
                    )
                })?
                .into(),
        ),
        Kind::List => Value::Sequence(
            v.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| Value::String(s.to_string()))
                .collect(),
        ),
        Kind::Map => map(pairs('=')?
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect()),
        Kind::MapLangle => map(pairs('<')?
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect()),
        Kind::MapNoSplit => match v.split_once('=') {
            Some((k, val)) if !k.trim().is_empty() => map(vec![(
                k.trim().to_string(),
                Value::String(val.trim().to_string()),
            )]),
            _ => return Err(invalid(name, v, "not key=value")),
        },
        Kind::MapBool => map(pairs('=')?
            .into_iter()
            .map(|(k, b)| Ok((k, Value::Bool(parse_bool(name, &b)?))))
            .collect::<Result<_, ParseError>>()?),
        Kind::MapColonList => {
            let mut m = Mapping::new();
            for (k, val) in pairs(':')? {
                let entry = m
                    .entry(Value::String(k))
                    .or_insert_with(|| Value::Sequence(Vec::new()));
                if let Value::Sequence(s) = entry {
                    s.push(Value::String(val));
                }
            }
            Value::Mapping(m)
        }
        Kind::Taints => Value::Sequence(
            v.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|t| taint(name, v, t))
                .collect::<Result<_, _>>()?,
        ),
        Kind::ReservedMemory => Value::Sequence(
            v.split(';')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|r| reserved_memory(name, v, r))
                .collect::<Result<_, _>>()?,
        ),
    })
}

/// One `key[=value]:Effect` of `--register-with-taints`.
fn taint(name: &str, all: &str, t: &str) -> Result<Value, ParseError> {
    let bad = || invalid(name, all, &format!("invalid taint spec: {t}"));
    let (kv, effect) = t.rsplit_once(':').ok_or_else(bad)?;
    let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
    if key.is_empty() || effect.is_empty() {
        return Err(bad());
    }
    let mut m = Mapping::new();
    m.insert("key".into(), key.into());
    if !value.is_empty() {
        m.insert("value".into(), value.into());
    }
    m.insert("effect".into(), effect.into());
    Ok(Value::Mapping(m))
}

/// One `NUMA:resource=quantity,...` of `--reserved-memory`.
fn reserved_memory(name: &str, all: &str, r: &str) -> Result<Value, ParseError> {
    let bad = |why: &str| invalid(name, all, why);
    let (numa, limits) = r
        .split_once(':')
        .ok_or_else(|| bad(&format!("{r:?} is not NUMA:resource=quantity,...")))?;
    let numa: i64 = numa
        .trim()
        .parse()
        .map_err(|_| bad(&format!("NUMA node {numa:?} is not a number")))?;
    let mut l = Mapping::new();
    for p in limits.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, q) = p
            .split_once('=')
            .ok_or_else(|| bad(&format!("{p:?} is not resource=quantity")))?;
        l.insert(k.trim().into(), q.trim().into());
    }
    let mut m = Mapping::new();
    m.insert("numaNode".into(), numa.into());
    m.insert("limits".into(), Value::Mapping(l));
    Ok(Value::Mapping(m))
}

/// Lays `flags` over the document `doc` (the configuration file's
/// mapping): each flag's field replaces the file's, creating the objects
/// on its path; but `--feature-gates` adds its gates to the file's, as
/// upstream keeps the file's gates the flag does not name.
pub fn overlay(doc: &mut Mapping, flags: &[ConfigFlag]) {
    for f in flags {
        let mut m = &mut *doc;
        let (last, parents) = f.path.split_last().expect("paths are not empty");
        for p in parents {
            let slot = m
                .entry(Value::String((*p).into()))
                .or_insert_with(|| Value::Mapping(Mapping::new()));
            if !matches!(slot, Value::Mapping(_)) {
                *slot = Value::Mapping(Mapping::new());
            }
            let Value::Mapping(next) = slot else {
                unreachable!("made a mapping above")
            };
            m = next;
        }
        let key = Value::String((*last).into());
        match (m.get_mut(&key), &f.value) {
            (Some(Value::Mapping(old)), Value::Mapping(new)) if f.path == ["featureGates"] => {
                old.extend(new.clone());
            }
            _ => {
                m.insert(key, f.value.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(name: &str, v: &str) -> Value {
        let mut out = Vec::new();
        set(&mut out, name, v).unwrap();
        out.remove(0).value
    }

    fn yaml(s: &str) -> Value {
        serde_yaml_ng::from_str(s).unwrap()
    }

    #[test]
    fn kinds() {
        assert_eq!(one("max-pods", "17"), yaml("17"));
        assert_eq!(one("fail-swap-on", "false"), yaml("false"));
        assert_eq!(one("sync-frequency", "1m"), yaml("'1m'"));
        assert_eq!(
            one("cluster-dns", "10.0.0.10, fd00::a"),
            yaml("[10.0.0.10, 'fd00::a']")
        );
        assert_eq!(
            one("system-reserved", "cpu=100m,memory=1Gi"),
            yaml("{cpu: 100m, memory: 1Gi}")
        );
        assert_eq!(
            one(
                "eviction-hard",
                "memory.available<100Mi,nodefs.available<10%"
            ),
            yaml("{memory.available: 100Mi, nodefs.available: 10%}")
        );
        assert_eq!(
            one("feature-gates", "MemoryQoS=true,Foo=false"),
            yaml("{MemoryQoS: true, Foo: false}")
        );
        assert_eq!(
            one("cpu-manager-policy-options", "a=b,c"),
            yaml("{a: 'b,c'}")
        );
        assert_eq!(
            one("manifest-url-header", "a:x,a:y,b:z"),
            yaml("{a: [x, y], b: [z]}")
        );
        assert_eq!(
            one("register-with-taints", "node-role.kubernetes.io/control-plane:NoSchedule,k=v:NoExecute"),
            yaml("[{key: node-role.kubernetes.io/control-plane, effect: NoSchedule}, {key: k, value: v, effect: NoExecute}]")
        );
        assert_eq!(
            one("reserved-memory", "0:memory=1Gi,hugepages-1Gi=2Gi;1:memory=2Gi"),
            yaml("[{numaNode: 0, limits: {memory: 1Gi, hugepages-1Gi: 2Gi}}, {numaNode: 1, limits: {memory: 2Gi}}]")
        );
    }

    #[test]
    fn repeats_add_up_or_replace() {
        let mut out = Vec::new();
        set(&mut out, "node-status-max-images", "5").unwrap();
        set(&mut out, "node-status-max-images", "7").unwrap();
        set(&mut out, "kube-reserved", "cpu=1").unwrap();
        set(&mut out, "kube-reserved", "memory=1Gi").unwrap();
        set(&mut out, "cluster-dns", "10.0.0.10").unwrap();
        set(&mut out, "cluster-dns", "10.0.0.11").unwrap();
        set(&mut out, "register-with-taints", "a=b:NoSchedule").unwrap();
        set(&mut out, "register-with-taints", "c:NoExecute").unwrap();
        assert_eq!(out.len(), 4);
        assert_eq!(
            out[3].value,
            yaml("[{key: c, effect: NoExecute}]"),
            "the last wins"
        );
        assert_eq!(out[0].value, yaml("7"));
        assert_eq!(out[1].value, yaml("{cpu: '1', memory: 1Gi}"));
        assert_eq!(out[2].value, yaml("[10.0.0.10, 10.0.0.11]"));
    }

    #[test]
    fn bad_values_name_the_flag() {
        for (name, v) in [
            ("max-pods", "many"),
            ("fail-swap-on", "maybe"),
            ("system-reserved", "cpu"),
            ("eviction-hard", "memory.available=1Gi"),
            ("feature-gates", "A=yes"),
            ("register-with-taints", "novalue"),
            ("register-with-taints", ":NoSchedule"),
            ("reserved-memory", "x:memory=1Gi"),
            ("reserved-memory", "0:memory"),
        ] {
            let Err(ParseError::Invalid(m)) = set(&mut Vec::new(), name, v) else {
                panic!("{name}={v} accepted")
            };
            assert!(m.contains(&format!("\"--{name}\"")), "{m}");
        }
        assert!(!is_config_flag("not-a-flag"));
    }

    #[test]
    fn overlay_replaces_fields_and_makes_paths() {
        let mut doc = match yaml(
            "maxPods: 10\nauthentication: {anonymous: {enabled: true}, x509: {clientCAFile: /a}}\nevictionHard: {memory.available: 1Gi, nodefs.available: 5%}\n",
        ) {
            Value::Mapping(m) => m,
            _ => unreachable!(),
        };
        doc.insert("featureGates".into(), yaml("{A: true, B: true}"));
        let mut flags = Vec::new();
        set(&mut flags, "feature-gates", "B=false,C=true").unwrap();
        set(&mut flags, "max-pods", "20").unwrap();
        set(&mut flags, "anonymous-auth", "false").unwrap();
        set(&mut flags, "authorization-mode", "Webhook").unwrap();
        set(&mut flags, "eviction-hard", "memory.available<2Gi").unwrap();
        overlay(&mut doc, &flags);
        assert_eq!(
            Value::Mapping(doc),
            yaml("maxPods: 20\nauthentication: {anonymous: {enabled: false}, x509: {clientCAFile: /a}}\nevictionHard: {memory.available: 2Gi}\nfeatureGates: {A: true, B: false, C: true}\nauthorization: {mode: Webhook}\n")
        );
    }
}
