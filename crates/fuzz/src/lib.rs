//! A stable-Rust fuzz harness (cargo-fuzz needs nightly and libFuzzer): a
//! tiny seeded generator builds random and structured inputs and drives the
//! parsers and the simulator, checking that nothing panics and that every
//! rejection is the right error type naming the right file.
//!
//! Every case is a pure function of `(seed, case)`, so a failure printed by
//! `hack/fuzz` replays with `rkube-fuzz --seed S --case I`.

pub mod targets;

use std::panic::{catch_unwind, AssertUnwindSafe};

use rkube_model::load::{build, parse_documents};
use rkube_model::Quantity;
use serde_json::{json, Map, Value};

/// splitmix64: small, fast, good enough to explore inputs.
pub struct Rng(u64);

impl Rng {
    /// A generator for one case.
    pub fn new(seed: u64, case: u64) -> Self {
        let mut r = Rng(seed ^ case.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        r.next_u64();
        r
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// True with probability 1/n.
    pub fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    /// One of the items.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

const NAMES: &[&str] = &[
    "n1",
    "a",
    "",
    "ünïcødé",
    "名前",
    "x-y.z",
    "-bad-",
    "very-long-name-very-long-name-very-long-name-very-long-name-very",
    "🙂",
    "default",
];
const KEYS: &[&str] = &[
    "zone",
    "app",
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone",
    "",
    "bad key",
    "a/b/c",
    "ünï",
];
const OPERATORS: &[&str] = &[
    "In",
    "NotIn",
    "Exists",
    "DoesNotExist",
    "Gt",
    "Lt",
    "",
    "Equals",
];
const EFFECTS: &[&str] = &[
    "NoSchedule",
    "PreferNoSchedule",
    "NoExecute",
    "",
    "Sometimes",
];
const RESOURCES: &[&str] = &[
    "cpu",
    "memory",
    "pods",
    "ephemeral-storage",
    "nvidia.com/gpu",
    "hugepages-2Mi",
];
const PLUGINS: &[&str] = &[
    "NodeResourcesFit",
    "NodeResourcesBalancedAllocation",
    "ImageLocality",
    "TaintToleration",
    "NodeAffinity",
    "PodTopologySpread",
    "InterPodAffinity",
    "DefaultPreemption",
    "PrioritySort",
    "NodeResourcesLeastAllocated",
    "Bogus",
    "*",
    "",
];

/// A quantity string: mostly well-formed, sometimes extreme or garbage.
pub fn quantity(r: &mut Rng) -> String {
    const ALPHABET: &[u8] = b"0123456789.+-eEinumkKMGTP ";
    const SUFFIXES: &[&str] = &[
        "",
        "m",
        "n",
        "u",
        "k",
        "M",
        "G",
        "T",
        "P",
        "E",
        "Ki",
        "Mi",
        "Gi",
        "Ti",
        "Pi",
        "Ei",
        "e3",
        "e-3",
        "e400",
        "E-400",
        "e99999999999999999999",
    ];
    match r.below(6) {
        0 => (0..r.below(30))
            .map(|_| *r.pick(ALPHABET) as char)
            .collect(),
        1 => format!("{}{}", "9".repeat(1 + r.below(60)), r.pick(SUFFIXES)),
        2 => format!("0.{}1{}", "0".repeat(r.below(40)), r.pick(SUFFIXES)),
        3 => format!("-{}{}", r.below(1000), r.pick(SUFFIXES)),
        _ => format!(
            "{}{}{}",
            r.next_u64() % 100_000,
            if r.one_in(3) { ".5" } else { "" },
            r.pick(SUFFIXES)
        ),
    }
}

fn name(r: &mut Rng) -> String {
    if r.one_in(8) {
        format!("p{}", r.next_u64())
    } else {
        r.pick(NAMES).to_string()
    }
}

fn labels(r: &mut Rng) -> Value {
    let mut m = Map::new();
    for _ in 0..r.below(4) {
        m.insert(r.pick(KEYS).to_string(), json!(name(r)));
    }
    Value::Object(m)
}

fn resources(r: &mut Rng) -> Value {
    let mut m = Map::new();
    for _ in 0..r.below(4) {
        m.insert(r.pick(RESOURCES).to_string(), json!(quantity(r)));
    }
    Value::Object(m)
}

fn requirement(r: &mut Rng) -> Value {
    let values: Vec<String> = (0..r.below(3))
        .map(|_| {
            if r.one_in(2) {
                (r.next_u64() as i64).to_string()
            } else {
                name(r)
            }
        })
        .collect();
    json!({"key": r.pick(KEYS), "operator": r.pick(OPERATORS), "values": values})
}

fn node(r: &mut Rng) -> Value {
    let taints: Vec<Value> = (0..r.below(3))
        .map(|_| json!({"key": r.pick(KEYS), "value": name(r), "effect": r.pick(EFFECTS)}))
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name(r), "labels": labels(r)},
        "spec": {"taints": taints, "unschedulable": r.one_in(5)},
        "status": {"allocatable": resources(r), "capacity": resources(r)},
    })
}

fn pod(r: &mut Rng) -> Value {
    let containers: Vec<Value> = (0..r.below(3))
        .map(|_| json!({"name": name(r), "image": name(r), "resources": {"requests": resources(r), "limits": resources(r)}}))
        .collect();
    let mut spec = json!({"containers": containers});
    if r.one_in(3) {
        spec["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
            {"nodeSelectorTerms": [{"matchExpressions": [requirement(r)]}]}}});
    }
    if r.one_in(3) {
        spec["affinity"]["podAntiAffinity"] = json!({"requiredDuringSchedulingIgnoredDuringExecution":
            [{"topologyKey": r.pick(KEYS), "labelSelector": {"matchExpressions": [requirement(r)], "matchLabels": labels(r)}}]});
    }
    if r.one_in(3) {
        spec["nodeName"] = json!(name(r));
    }
    if r.one_in(4) {
        spec["priority"] = json!(r.next_u64() as i32);
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name(r), "namespace": name(r), "labels": labels(r)},
        "spec": spec,
    })
}

fn workload(r: &mut Rng) -> Value {
    let kind = *r.pick(&[
        "Deployment",
        "ReplicaSet",
        "StatefulSet",
        "DaemonSet",
        "Job",
    ]);
    let replicas: i64 = *r.pick(&[0, 1, 3, -1, i32::MAX as i64, 200_000]);
    json!({
        "apiVersion": if kind == "Job" { "batch/v1" } else { "apps/v1" }, "kind": kind,
        "metadata": {"name": name(r), "namespace": "default"},
        "spec": {"replicas": replicas, "parallelism": replicas, "selector": {"matchLabels": {"app": "w"}},
                 "template": {"metadata": {"labels": {"app": "w"}}, "spec": pod(r)["spec"].clone()}},
    })
}

/// Random bytes edits: flip, delete, duplicate or truncate.
pub fn mutate(r: &mut Rng, text: &str) -> String {
    let mut b = text.as_bytes().to_vec();
    for _ in 0..1 + r.below(4) {
        if b.is_empty() {
            break;
        }
        let i = r.below(b.len());
        match r.below(5) {
            0 => b[i] = r.next_u64() as u8,
            1 => {
                b.remove(i);
            }
            2 => b.truncate(i),
            3 => b.insert(i, *r.pick(b"{}[]:-&*!|>'\"\n\t #,")),
            _ => {
                let end = (i + r.below(32)).min(b.len());
                let chunk = b[i..end].to_vec();
                b.splice(i..i, chunk);
            }
        }
    }
    String::from_utf8_lossy(&b).into_owned()
}

fn render(r: &mut Rng, docs: &[Value]) -> String {
    if r.one_in(2) {
        docs.iter()
            .map(|d| serde_json::to_string(d).unwrap())
            .collect::<Vec<_>>()
            .join("\n")
    } else if r.one_in(3) {
        serde_yaml_ng::to_string(&json!({"apiVersion": "v1", "kind": "List", "items": docs}))
            .unwrap()
    } else {
        docs.iter()
            .map(|d| serde_yaml_ng::to_string(d).unwrap())
            .collect::<Vec<_>>()
            .join("---\n")
    }
}

const FILE: &str = "fuzz.yaml";

fn check_quantity(r: &mut Rng) -> Result<(), String> {
    let s = quantity(r);
    if let Ok(q) = Quantity::parse(&s) {
        let _ = (q.value(), q.milli_value(), q.to_string(), q.checked_add(&q));
    }
    // Exact round trip of in-range values.
    let v = (r.next_u64() >> 2) as i64 % 1_000_000_000_000;
    let q = Quantity::parse(&format!("{v}m")).map_err(|e| format!("{v}m: {e}"))?;
    if q.milli_value() != v {
        return Err(format!("{v}m read back as {}m", q.milli_value()));
    }
    Ok(())
}

fn check_cluster(r: &mut Rng) -> Result<(), String> {
    let mut docs = Vec::new();
    for _ in 0..r.below(6) {
        docs.push(match r.below(5) {
            0 | 1 => node(r),
            2 | 3 => pod(r),
            _ => workload(r),
        });
    }
    let mut text = render(r, &docs);
    if r.one_in(2) {
        text = mutate(r, &text);
    }
    let result = parse_documents(FILE, &text).and_then(|objs| build(&objs, &mut |_| Ok(false)));
    match result {
        Err(e) if e.file != FILE => Err(format!("error names file {:?}: {e}", e.file)),
        Err(e) if !e.to_string().starts_with(FILE) => {
            Err(format!("error does not start with the file: {e}"))
        }
        Err(e) if e.to_string().len() > 8192 => {
            Err(format!("error of {} bytes", e.to_string().len()))
        }
        _ => Ok(()),
    }
}

fn config_value(r: &mut Rng) -> Value {
    let mut profiles = Vec::new();
    for i in 0..r.below(3) {
        let mut set = Map::new();
        for ext in ["score", "filter", "preFilter", "multiPoint", "queueSort"] {
            if r.one_in(3) {
                let enabled: Vec<Value> = (0..r.below(3))
                    .map(|_| json!({"name": r.pick(PLUGINS), "weight": *r.pick(&[0i64, 1, 5, -1, 100, i32::MAX as i64])}))
                    .collect();
                let disabled: Vec<Value> = (0..r.below(2))
                    .map(|_| json!({"name": r.pick(PLUGINS)}))
                    .collect();
                set.insert(
                    ext.into(),
                    json!({"enabled": enabled, "disabled": disabled}),
                );
            }
        }
        let mut args = Vec::new();
        if r.one_in(2) {
            args.push(json!({"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": r.pick(&["LeastAllocated", "MostAllocated", "RequestedToCapacityRatio", "Bogus"]),
                "resources": [{"name": r.pick(RESOURCES), "weight": *r.pick(&[0i64, 1, 100, -5])}]}}}));
        }
        if r.one_in(3) {
            args.push(json!({"name": "PodTopologySpread", "args": {"defaultingType": r.pick(&["List", "System", ""]),
                "defaultConstraints": [{"maxSkew": *r.pick(&[0i64, 1, -1]), "topologyKey": r.pick(KEYS), "whenUnsatisfiable": r.pick(&["DoNotSchedule", "ScheduleAnyway", "x"])}]}}));
        }
        profiles.push(json!({
            "schedulerName": if i == 0 { "default-scheduler".to_string() } else { name(r) },
            "percentageOfNodesToScore": *r.pick(&[0i64, 50, 100, 101, -1]),
            "plugins": set, "pluginConfig": args,
        }));
    }
    json!({
        "apiVersion": if r.one_in(10) { "kubescheduler.config.k8s.io/v1beta3" } else { rkube_config::API_VERSION },
        "kind": "KubeSchedulerConfiguration",
        "percentageOfNodesToScore": *r.pick(&[0i64, 10, 100, 150, -3]),
        "podInitialBackoffSeconds": *r.pick(&[1i64, 0, 10, -1]),
        "profiles": profiles,
    })
}

fn check_config(r: &mut Rng) -> Result<(), String> {
    let v = config_value(r);
    let mut text = if r.one_in(2) {
        serde_json::to_string(&v).unwrap()
    } else {
        serde_yaml_ng::to_string(&v).unwrap()
    };
    if r.one_in(3) {
        text = mutate(r, &text);
    }
    match rkube_config::load_str(FILE, &text) {
        Ok(cfg) => {
            // What `simulate` does next: build every profile (errors allowed, panics not).
            let _ = rkube_sim::profiles(&cfg);
            let _ = rkube_sim::check::check_str(FILE, &text);
            Ok(())
        }
        Err(e) if !e.to_string().starts_with(FILE) => {
            Err(format!("config error does not start with the file: {e}"))
        }
        Err(_) => Ok(()),
    }
}

/// Odd-but-valid clusters: 0 and maximal quantities, unicode names, many
/// pods, then `explain` and `simulate`.
fn check_explain(r: &mut Rng) -> Result<(), String> {
    // Up to 9e13 (cores or bytes): beyond ~9.2e16 milli-CPU or bytes upstream's own int64 score
    // arithmetic overflows (see `check_explain_saturated`).
    explain_with(
        r,
        &["0", "1n", "90T", "1Ti", "0.0000000001m", "110", "1e-400"],
        false,
    )
}

/// Saturated quantities (`8Ei`, `1e400`), run separately
/// (`rkube-fuzz --saturated`): NodeResourcesFit's scores multiply before
/// dividing, like upstream's int64 code; rkube wraps as Go does instead of
/// panicking (this target found the overflow). Bound pods' requests summed
/// past 2^63 on one node wrap too (found by cargo-fuzz), and a node's
/// wrapped, negative total then makes NodeResourcesFit score outside
/// [0, 100]: upstream's framework refuses that score ("returns an invalid
/// score") and so does rkube's, a runtime error this check accepts.
pub fn check_explain_saturated(r: &mut Rng) -> Result<(), String> {
    explain_with(
        r,
        &[
            "0",
            "1n",
            "8Ei",
            "99999999999999999999Ei",
            "1e400",
            "0.0000000001m",
            "110",
        ],
        true,
    )
}

/// Upstream's own error for a score out of range (see
/// [`check_explain_saturated`]).
fn upstream_invalid_score(e: &str) -> bool {
    e.contains("returns an invalid score")
}

fn explain_with(r: &mut Rng, extremes: &[&str], wrapped_totals: bool) -> Result<(), String> {
    let mut docs = Vec::new();
    let nodes = 1 + r.below(20);
    let mut names = Vec::new();
    for i in 0..nodes {
        let q = |r: &mut Rng| r.pick(extremes).to_string();
        let name = format!("{}-{i}", r.pick(&["n", "x.y-z", "9"]));
        names.push(name.clone());
        docs.push(json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"zone": r.pick(&["a", "b", ""])}},
            "status": {"allocatable": {"cpu": q(r), "memory": q(r), "pods": q(r)}}}));
    }
    let max_pods = if r.one_in(10) { 300 } else { 20 };
    let pods = 1 + r.below(max_pods);
    for i in 0..pods {
        let q = |r: &mut Rng| r.pick(extremes).to_string();
        // A third already bound: their requests are summed per node (two
        // `8Ei` pods on one node overflow int64, which upstream wraps).
        let node = if r.one_in(3) {
            json!(r.pick(&names))
        } else {
            json!(null)
        };
        docs.push(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("p{i}"), "namespace": "default", "labels": {"app": r.pick(&["a", "b", ""])}},
            "spec": {"nodeName": node, "containers": [{"name": "", "image": "", "resources": {"requests": {"cpu": q(r), "memory": q(r)}}}],
                     "priority": *r.pick(&[0i64, i32::MAX as i64, i32::MIN as i64]),
                     "topologySpreadConstraints": if r.one_in(3) { json!([{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "a"}}}]) } else { json!([]) }}}));
    }
    let text =
        serde_json::to_string(&json!({"apiVersion": "v1", "kind": "List", "items": docs})).unwrap();
    let cluster = parse_documents(FILE, &text)
        .and_then(|o| build(&o, &mut |_| Ok(false)))
        .map_err(|e| format!("valid cluster rejected: {e}"))?;
    let cfg = rkube_config::default_config();
    let seed = r.next_u64();
    let pod = format!("default/p{}", r.below(pods));
    let expected = |e: &str| wrapped_totals && upstream_invalid_score(e);
    if let Err(rkube_sim::SimError::Runtime(e)) = rkube_sim::explain(&cluster, &cfg, &pod, seed) {
        if !expected(&e) {
            return Err(format!("explain {pod}: runtime error: {e}"));
        }
    }
    let opts = rkube_sim::SimulateOptions {
        seed,
        explain: r.one_in(4),
        ..Default::default()
    };
    if let Err(rkube_sim::SimError::Runtime(e)) = rkube_sim::simulate(&cluster, &cfg, &opts) {
        if !expected(&e) {
            return Err(format!("simulate: runtime error: {e}"));
        }
    }
    Ok(())
}

/// A pod for [`check_drain`]: on a random node (or pending), with a random
/// controller, budget labels, emptyDir, mirror annotation, phase and
/// deletion.
fn drain_pod(r: &mut Rng, i: usize, nodes: usize) -> Value {
    let kind = *r.pick(&[
        "ReplicaSet",
        "StatefulSet",
        "DaemonSet",
        "Job",
        "Rollout",
        "",
    ]);
    let owners = if kind.is_empty() {
        json!([])
    } else {
        json!([{"apiVersion": "apps/v1", "kind": kind, "name": "o", "uid": "u", "controller": true}])
    };
    let mut meta = json!({"name": format!("p{i}"), "namespace": "default",
        "labels": {"app": r.pick(&["a", "b"])}, "ownerReferences": owners});
    if r.one_in(8) {
        meta["annotations"] = json!({"kubernetes.io/config.mirror": "x"});
    }
    if r.one_in(8) {
        meta["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
    }
    let mut spec = json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": r.pick(&["0", "1", "3"])}}}]});
    if !r.one_in(4) {
        spec["nodeName"] = json!(format!("n{}", r.below(nodes)));
    }
    if r.one_in(4) {
        spec["volumes"] = json!([{"name": "t", "emptyDir": {}}]);
    }
    if r.one_in(3) {
        spec["topologySpreadConstraints"] = json!([{"maxSkew": 1, "topologyKey": "zone",
            "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "a"}}}]);
    }
    let phase = *r.pick(&["Running", "Running", "Succeeded", "Failed"]);
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": phase}})
}

/// A PodDisruptionBudget for [`check_drain`], with odd numbers.
fn drain_pdb(r: &mut Rng, i: usize) -> Value {
    let n = |r: &mut Rng| json!(*r.pick(&[0i64, 1, 2, i32::MAX as i64]));
    let amount = if r.one_in(2) {
        n(r)
    } else {
        json!(r.pick(&["0%", "50%", "100%"]))
    };
    let mut spec = json!({"selector": if r.one_in(6) { json!({}) } else { json!({"matchLabels": {"app": r.pick(&["a", "b"])}}) }});
    match r.below(3) {
        0 => spec["minAvailable"] = amount,
        1 => spec["maxUnavailable"] = amount,
        _ => {}
    }
    let mut pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": format!("b{i}"), "namespace": "default"}, "spec": spec});
    if r.one_in(2) {
        let extreme =
            |r: &mut Rng| json!(*r.pick(&[0i64, 1, -1, i32::MAX as i64, i32::MIN as i64]));
        pdb["status"] = json!({"disruptionsAllowed": extreme(r), "currentHealthy": extreme(r),
            "desiredHealthy": extreme(r), "expectedPods": 0, "observedGeneration": 0});
    }
    pdb
}

/// `rkube drain` on random clusters: every controller kind, budgets with
/// extreme numbers, finished, mirror and terminating pods, random flags.
/// Nothing may panic or fail at run time, and the counts must add up.
fn check_drain(r: &mut Rng) -> Result<(), String> {
    let nodes = 1 + r.below(5);
    let mut docs: Vec<Value> = (0..nodes)
        .map(|i| {
            json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": format!("n{i}"), "labels": {"zone": r.pick(&["a", "b", "c"])}},
            "status": {"allocatable": {"cpu": r.pick(&["4", "1", "0"]), "pods": "110"}}})
        })
        .collect();
    for i in 0..r.below(25) {
        docs.push(drain_pod(r, i, nodes));
    }
    for i in 0..r.below(4) {
        docs.push(drain_pdb(r, i));
    }
    let text =
        serde_json::to_string(&json!({"apiVersion": "v1", "kind": "List", "items": docs})).unwrap();
    let cluster = parse_documents(FILE, &text)
        .and_then(|o| build(&o, &mut |_| Ok(false)))
        .map_err(|e| format!("valid cluster rejected: {e}"))?;
    let opts = rkube_sim::drain::DrainOptions {
        nodes: (0..1 + r.below(2))
            .map(|_| format!("n{}", r.below(nodes)))
            .collect(),
        delete: r.one_in(2),
        force: r.one_in(2),
        delete_emptydir_data: r.one_in(2),
        seed: r.next_u64(),
    };
    let report = rkube_sim::drain::drain(&cluster, &rkube_config::default_config(), &opts)
        .map_err(|e| format!("drain {opts:?}: {e}"))?;
    let s = &report.summary;
    if s.rescheduled + s.pending != s.evicted || s.evicted != report.evicted.len() {
        return Err(format!("drain {opts:?}: counts do not add up: {s:?}"));
    }
    Ok(())
}

/// Generates one field's value.
type FieldGen = dyn Fn(&mut Rng) -> Value;

/// KubeletConfiguration documents: valid fields with odd values, unknown
/// and misspelt fields, wrong types, then byte-level mutations. Errors must
/// name the file; nothing may panic.
fn check_kubelet_config(r: &mut Rng) -> Result<(), String> {
    let mut m = Map::new();
    m.insert(
        "apiVersion".into(),
        json!(if r.one_in(10) {
            "kubelet.config.k8s.io/v1"
        } else {
            "kubelet.config.k8s.io/v1beta1"
        }),
    );
    m.insert(
        "kind".into(),
        json!(if r.one_in(10) {
            "KubeSchedulerConfiguration"
        } else {
            "KubeletConfiguration"
        }),
    );
    const DURATIONS: [&str; 8] = ["10s", "0s", "1m30s", "-5s", "1h", "forever", "", "5"];
    let fields: &[(&str, &FieldGen)] = &[
        ("port", &|r| {
            json!(*r.pick(&[10250i64, 0, -1, 65536, i64::MAX]))
        }),
        ("healthzPort", &|r| json!(*r.pick(&[10248i64, 0, 70000]))),
        ("address", &|r| {
            json!(r.pick(&["127.0.0.1", "0.0.0.0", "::1", "not-an-ip", ""]))
        }),
        ("healthzBindAddress", &|r| {
            json!(r.pick(&["127.0.0.1", "x", ""]))
        }),
        ("maxPods", &|r| {
            json!(*r.pick(&[110i64, 0, -3, i32::MAX as i64]))
        }),
        ("nodeStatusUpdateFrequency", &|r| json!(r.pick(&DURATIONS))),
        ("nodeStatusReportFrequency", &|r| json!(r.pick(&DURATIONS))),
        ("nodeLeaseDurationSeconds", &|r| {
            json!(*r.pick(&[40i64, 0, -1, i32::MAX as i64]))
        }),
        ("evictionHard", &|r| {
            json!({ *r.pick(&["memory.available", "nodefs.available", "imagefs.available", "pid.available", "bogus.signal"]):
                    r.pick(&["100Mi", "10%", "0%", "101%", "-1Gi", "1e400", "abc", ""]) })
        }),
        (
            "registerWithTaints",
            &|r| json!([{"key": r.pick(&["a", "", "node.kubernetes.io/x"]), "effect": r.pick(&["NoSchedule", "NoExecute", "Bogus", ""])}]),
        ),
        (
            "systemReserved",
            &|r| json!({"cpu": quantity(r), "memory": quantity(r)}),
        ),
        ("staticPodPath", &|r| {
            json!(r.pick(&["/etc/kubernetes/manifests", "", "relative/path"]))
        }),
        ("serializeImagePulls", &|r| {
            json!(*r.pick(&[json!(true), json!("yes"), json!(1)]))
        }),
        ("containerRuntimeEndpoint", &|r| {
            json!(r.pick(&["unix:///run/containerd/containerd.sock", "tcp://x", ""]))
        }),
        ("cgroupDriver", &|r| json!(r.pick(&["systemd", "cgroupfs"]))),
        ("enforceNodeAllocatable", &|r| {
            json!([r.pick(&[
                "pods",
                "none",
                "system-reserved",
                "kube-reserved-compressible",
                "x"
            ])])
        }),
        ("shutdownGracePeriod", &|r| json!(r.pick(&DURATIONS))),
        (
            "shutdownGracePeriodByPodPriority",
            &|r| json!([{"priority": *r.pick(&[0i64, -1, i32::MAX as i64, i64::MAX]), "shutdownGracePeriodSeconds": *r.pick(&[0i64, -5, 30, i64::MAX])}]),
        ),
        ("cpuCFSQuotaPeriod", &|r| json!(r.pick(&DURATIONS))),
        ("memoryThrottlingFactor", &|r| {
            json!(*r.pick(&[0.0f64, 0.9, 1.5, -1.0, f64::MAX]))
        }),
        (
            "userNamespaces",
            &|r| json!({"idsPerPod": *r.pick(&[65536i64, 0, -1, i64::MAX])}),
        ),
        ("oomScoreAdj", &|r| {
            json!(*r.pick(&[-999i64, 5000, i64::MIN]))
        }),
        ("bogusField", &|_| json!(1)),
    ];
    for _ in 0..r.below(8) {
        let (k, f) = r.pick(fields);
        m.insert((*k).into(), f(r));
    }
    let v = Value::Object(m);
    let mut text = if r.one_in(2) {
        serde_json::to_string(&v).unwrap()
    } else {
        serde_yaml_ng::to_string(&v).unwrap()
    };
    if r.one_in(3) {
        text = mutate(r, &text);
    }
    match rkube_kubelet::config::load_str(FILE, &text) {
        Ok(_) => Ok(()),
        Err(e) if !e.to_string().starts_with(FILE) => Err(format!(
            "kubelet config error does not start with the file: {e}"
        )),
        Err(_) => Ok(()),
    }
}

/// A fuzz target: one case from a generator.
pub type Target = (&'static str, fn(&mut Rng) -> Result<(), String>);

/// The targets, run round-robin.
pub const TARGETS: &[Target] = &[
    ("quantity", check_quantity),
    ("cluster", check_cluster),
    ("config", check_config),
    ("explain", check_explain),
    ("kubelet-config", check_kubelet_config),
    ("drain", check_drain),
];

/// Silences the default panic message (failures are reported by `run_case`).
pub fn quiet_panics() {
    std::panic::set_hook(Box::new(|_| {}));
}

/// Runs case `case` of seed `seed`: `Err` describes a panic or a wrong error.
pub fn run_case(seed: u64, case: u64) -> Result<(), String> {
    run_case_of(TARGETS, seed, case)
}

/// [`run_case`] over a chosen target list.
pub fn run_case_of(targets: &[Target], seed: u64, case: u64) -> Result<(), String> {
    let (target, f) = targets[(case % targets.len() as u64) as usize];
    let mut r = Rng::new(seed, case);
    match catch_unwind(AssertUnwindSafe(|| f(&mut r))) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("{target} (--seed {seed} --case {case}): {e}")),
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Err(format!(
                "{target} (--seed {seed} --case {case}): panicked: {msg}"
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn fixed_seed_short_pass() {
        let failures: Vec<String> = (0..400)
            .filter_map(|c| super::run_case(1, c).err())
            .collect();
        assert!(failures.is_empty(), "{failures:#?}");
    }
}
