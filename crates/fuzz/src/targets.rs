//! The byte-input targets of coverage-guided fuzzing (`fuzz/`, cargo-fuzz
//! on nightly) and of their regression tests on stable
//! (`crates/fuzz/tests/corpus.rs` replays every committed seed and crash).
//! Each takes any bytes and returns `Err` for a wrong answer; a panic is a
//! failure by itself. Inputs are capped so one case stays fast: a slow case
//! is a hang to libFuzzer.

use rkube_model::load::{build, parse_documents};
use rkube_model::Quantity;

/// The file name errors must start with.
pub const FILE: &str = "fuzz.yaml";

/// The largest input the targets read (libFuzzer's `-max_len` in
/// `hack/fuzz --cargo-fuzz` is the same).
pub const MAX_LEN: usize = 64 * 1024;

/// A target: any bytes in, `Err` for a wrong answer.
pub type Target = fn(&[u8]) -> Result<(), String>;

/// The targets by name (`fuzz/fuzz_targets/<name>.rs`, `fuzz/corpus/<name>/`).
pub const TARGETS: &[(&str, Target)] = &[
    ("quantity", quantity),
    ("selector", selector),
    ("cluster_file", cluster_file),
    ("scheduler_config", scheduler_config),
    ("kubelet_config", kubelet_config),
    ("simulate", simulate),
];

fn text(data: &[u8]) -> Option<&str> {
    if data.len() > MAX_LEN {
        return None;
    }
    std::str::from_utf8(data).ok()
}

fn named(e: impl std::fmt::Display) -> Result<(), String> {
    let e = e.to_string();
    if e.starts_with(FILE) {
        Ok(())
    } else {
        Err(format!("error does not name the file: {e}"))
    }
}

/// `Quantity::parse`, then everything a parsed quantity offers; a value's
/// canonical form must read back as the same value.
pub fn quantity(data: &[u8]) -> Result<(), String> {
    let Some(s) = text(data) else { return Ok(()) };
    let Ok(q) = Quantity::parse(s) else {
        return Ok(());
    };
    let _ = (q.value(), q.milli_value(), q.checked_add(&q));
    let canonical = q.to_string();
    match Quantity::parse(&canonical) {
        Ok(back) if back.milli_value() == q.milli_value() => Ok(()),
        Ok(back) => Err(format!(
            "{s:?} → {canonical:?} reads back as {}m, not {}m",
            back.milli_value(),
            q.milli_value()
        )),
        Err(e) => Err(format!("{s:?} → {canonical:?} does not parse: {e}")),
    }
}

/// The input as the label selector of a pod's affinity and topology spread
/// and as a node selector term, in a one-node cluster; then the scheduler
/// decides the pod.
pub fn selector(data: &[u8]) -> Result<(), String> {
    let Some(s) = text(data) else { return Ok(()) };
    let Ok(sel) = serde_yaml_ng::from_str::<serde_json::Value>(s) else {
        return Ok(());
    };
    let cluster = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Node",
         "metadata": {"name": "n", "labels": {"a": "b", "zone": "z"}},
         "status": {"allocatable": {"cpu": "1", "memory": "1Gi", "pods": "10"}}},
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "old", "namespace": "default", "labels": {"a": "b"}},
         "spec": {"nodeName": "n", "containers": [{"name": "c", "image": "i"}]}},
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "p", "namespace": "default", "labels": {"a": "b"}},
         "spec": {"containers": [{"name": "c", "image": "i"}],
                  "affinity": {
                      "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                          {"nodeSelectorTerms": [sel.clone()]}},
                      "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                          [{"topologyKey": "zone", "labelSelector": sel.clone()}]}},
                  "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                      "whenUnsatisfiable": "DoNotSchedule", "labelSelector": sel}]}}
    ]});
    decide(&cluster.to_string(), 1)
}

/// The cluster-file loader: any error names the file.
pub fn cluster_file(data: &[u8]) -> Result<(), String> {
    let Some(s) = text(data) else { return Ok(()) };
    match parse_documents(FILE, s).and_then(|o| build(&o, &mut |_| Ok(false))) {
        Ok(_) => Ok(()),
        Err(e) => named(e),
    }
}

/// The KubeSchedulerConfiguration decoder; a configuration it accepts
/// builds its profiles (errors allowed, panics not).
pub fn scheduler_config(data: &[u8]) -> Result<(), String> {
    let Some(s) = text(data) else { return Ok(()) };
    match rkube_config::load_str(FILE, s) {
        Ok(cfg) => {
            let _ = rkube_sim::profiles(&cfg);
            Ok(())
        }
        Err(e) => named(e),
    }
}

/// The KubeletConfiguration decoder.
pub fn kubelet_config(data: &[u8]) -> Result<(), String> {
    let Some(s) = text(data) else { return Ok(()) };
    match rkube_kubelet::config::load_str(FILE, s) {
        Ok(_) => Ok(()),
        Err(e) => named(e),
    }
}

/// A cluster file that loads is explained and simulated (small ones only:
/// a fuzzer's input must run in milliseconds).
pub fn simulate(data: &[u8]) -> Result<(), String> {
    let Some(s) = text(data) else { return Ok(()) };
    decide(s, 0)
}

fn decide(s: &str, seed: u64) -> Result<(), String> {
    let cluster = match parse_documents(FILE, s).and_then(|o| build(&o, &mut |_| Ok(false))) {
        Ok(c) => c,
        Err(e) => return named(e),
    };
    if cluster.nodes.len() > 64 || cluster.pods.len() > 128 {
        return Ok(());
    }
    let cfg = rkube_config::default_config();
    if let Some(p) = cluster.pods.iter().find(|p| p.node_name.is_empty()) {
        if let Err(rkube_sim::SimError::Runtime(e)) =
            rkube_sim::explain(&cluster, &cfg, &p.key(), seed)
        {
            return Err(format!("explain {}: runtime error: {e}", p.key()));
        }
    }
    let opts = rkube_sim::SimulateOptions {
        seed,
        explain: true,
        ..Default::default()
    };
    if let Err(rkube_sim::SimError::Runtime(e)) = rkube_sim::simulate(&cluster, &cfg, &opts) {
        return Err(format!("simulate: runtime error: {e}"));
    }
    Ok(())
}
