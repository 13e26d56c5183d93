//! Where rkube's kubelet spends a benchmark pod's startup: every pod's
//! startup timeline (`/timeline/{ns}/{pod}` on its kubelet, read through
//! the API server's node proxy), reduced to the time from the kubelet's
//! first sight of the pod (`Seen`) to each later stage, all on the
//! kubelet's clock. Upstream's kubelet has no such endpoint: the step is
//! run for rkube's only.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use serde_json::{json, Value};

use super::pods::{LABEL, NAMESPACE};

/// The stages reported, in the order a pod passes them. `Running` is the
/// first status write that reports the pod running.
pub const STAGES: [&str; 7] = [
    "Admitted",
    "SandboxCreated",
    "NetworkReady",
    "Created",
    "Started",
    "Running",
    "ObservedRunning",
];

/// Largest timeline read, bytes.
const MAX_BYTES: usize = 1 << 20;

/// Milliseconds from `Seen` to each of [`STAGES`] in one pod's timeline
/// (the kubelet's JSON answer); a stage the pod has not reached is left
/// out.
pub fn from_seen(timeline: &Value) -> BTreeMap<&'static str, f64> {
    let stages = timeline
        .get("stages")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let at = |s: &Value| {
        s.get("at")
            .and_then(Value::as_str)
            .and_then(|t| t.parse::<Timestamp>().ok())
    };
    fn name(s: &Value) -> &str {
        s.get("stage").and_then(Value::as_str).unwrap_or("")
    }
    let mut out = BTreeMap::new();
    let Some(seen) = stages.iter().find(|s| name(s) == "Seen").and_then(at) else {
        return out;
    };
    for want in STAGES {
        let first = stages.iter().find(|s| match want {
            "Running" => {
                name(s) == "StatusWritten"
                    && s.get("detail")
                        .and_then(Value::as_str)
                        .is_some_and(|d| d.starts_with("phase Running"))
            }
            _ => name(s) == want,
        });
        if let Some(t) = first.and_then(at) {
            let ms = t.duration_since(seen).as_secs_f64() * 1000.0;
            out.insert(want, ms);
        }
    }
    out
}

/// Reads every benchmark pod's timeline from its node: one JSON line,
/// `{"kind":"stages","pods":N,"fromSeenMs":{STAGE:[ms per pod…]}}`.
pub async fn run(c: &Client, node: &str) -> Result<Value> {
    let api: Api<Pod> = Api::namespaced(c.clone(), NAMESPACE);
    let pods = api
        .list(&ListParams::default().labels(&format!("{LABEL}=1")))
        .await
        .context("listing the benchmark pods")?;
    let mut per_stage: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for p in &pods.items {
        let path = format!(
            "/api/v1/nodes/{node}/proxy/timeline/{NAMESPACE}/{}",
            p.name_any()
        );
        let text = rkube_daemon::client::get_bounded(c, &path, MAX_BYTES)
            .await
            .with_context(|| format!("reading {path}"))?;
        let v: Value = serde_json::from_str(&text).with_context(|| format!("{path}: not JSON"))?;
        for (stage, ms) in from_seen(&v) {
            per_stage.entry(stage).or_default().push(ms);
        }
    }
    Ok(json!({"kind": "stages", "pods": pods.items.len(), "fromSeenMs": per_stage}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_count_from_the_kubelets_first_sight() {
        let tl = json!({"stages": [
            {"at": "2026-12-07T10:00:00Z", "stage": "PodCreated"},
            {"at": "2026-12-07T10:00:00.450Z", "stage": "Seen"},
            {"at": "2026-12-07T10:00:00.500Z", "stage": "Admitted"},
            {"at": "2026-12-07T10:00:01.000Z", "stage": "SandboxCreated"},
            {"at": "2026-12-07T10:00:01.200Z", "stage": "Started", "container": "main"},
            {"at": "2026-12-07T10:00:01.250Z", "stage": "StatusWritten", "detail": "phase Pending, 0/1 containers running"},
            {"at": "2026-12-07T10:00:01.300Z", "stage": "StatusWritten", "detail": "phase Running, 1/1 containers running"},
            {"at": "2026-12-07T10:00:01.400Z", "stage": "StatusWritten", "detail": "phase Running, 1/1 containers running"},
        ]});
        let got = from_seen(&tl);
        let ms = |s: &str| got.get(s).map(|v| v.round());
        assert_eq!(ms("Admitted"), Some(50.0));
        assert_eq!(ms("SandboxCreated"), Some(550.0));
        assert_eq!(ms("Started"), Some(750.0));
        assert_eq!(
            ms("Running"),
            Some(850.0),
            "the first write reporting it running"
        );
        assert_eq!(ms("ObservedRunning"), None, "not reached");
        assert!(from_seen(&json!({"stages": []})).is_empty());
        assert!(from_seen(&json!("garbage")).is_empty());
    }
}
