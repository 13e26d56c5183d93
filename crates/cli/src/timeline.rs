//! `rkube timeline NAMESPACE/POD`: the pod's startup timeline, read from
//! its node's kubelet through the API server's node proxy
//! (`/api/v1/nodes/{node}/proxy/timeline/{ns}/{pod}`, which needs
//! `nodes/proxy`), printed as one line per stage with the time since the
//! pod's creation and since the stage before.

use std::path::Path;

use anyhow::{bail, Context, Result};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;

/// Largest answer read, bytes (a timeline is bounded well below this).
const MAX_BYTES: usize = 4 << 20;

pub use rkube_kubelet::timeline::Timeline;

/// Splits `NAMESPACE/POD` (a bare name is in `default`).
pub fn parse_pod(arg: &str) -> Result<(String, String), String> {
    let (ns, name) = arg.split_once('/').unwrap_or(("default", arg));
    let ok = |s: &str| {
        !s.is_empty()
            && s.len() <= 253
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    };
    if !ok(ns) || !ok(name) {
        return Err(format!(
            "pod {arg:?}: expected NAMESPACE/NAME (lowercase letters, digits, '-' and '.')"
        ));
    }
    Ok((ns.to_string(), name.to_string()))
}

/// Fetches the timeline's JSON: the pod's node from the API server, then
/// the kubelet's answer through the node proxy.
pub fn fetch(kubeconfig: Option<&Path>, namespace: &str, name: &str) -> Result<String> {
    crate::snapshot::runtime()?.block_on(async {
        let client = crate::snapshot::client(kubeconfig).await?;
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let pod = pods
            .get_opt(name)
            .await
            .with_context(|| format!("reading pod {namespace}/{name}"))?
            .with_context(|| format!("pod {namespace}/{name} not found"))?;
        let Some(node) = pod.spec.and_then(|s| s.node_name).filter(|n| !n.is_empty()) else {
            bail!("pod {namespace}/{name} is not bound to a node yet (`rkube explain` says why)");
        };
        let path = format!("/api/v1/nodes/{node}/proxy/timeline/{namespace}/{name}");
        rkube_daemon::client::get_bounded(&client, &path, MAX_BYTES)
            .await
            .with_context(|| format!("reading the timeline from node {node} ({path})"))
    })
}

fn seconds(t: &k8s_openapi::jiff::Timestamp) -> f64 {
    t.as_nanosecond() as f64 / 1e9
}

/// The table: one line per stage, then the totals.
pub fn render(t: &Timeline) -> String {
    let mut out = format!("pod {}/{} (uid {})\n", t.namespace, t.name, t.uid);
    // Whole milliseconds since the first stage, so that the steps of the
    // lines add up to each line's time exactly.
    let start = t.stages.first().map(|s| seconds(&s.at)).unwrap_or(0.0);
    let ms = |at: f64| ((at - start) * 1000.0).round() as i64;
    let shown = |ms: i64| format!("{:.3}s", ms as f64 / 1000.0);
    let mut prev = 0;
    out.push_str(&format!(
        "{:>10} {:>9}  {:<18} {:<14} {}\n",
        "+CREATED", "STEP", "STAGE", "CONTAINER", "DETAIL"
    ));
    for s in &t.stages {
        let at = ms(seconds(&s.at));
        let (since, step) = (shown(at), shown(at - prev));
        prev = at;
        out.push_str(&format!(
            "{since:>10} {step:>9}  {:<18} {:<14} {}\n",
            s.stage,
            s.container.as_deref().unwrap_or("-"),
            s.detail.replace('\n', " ")
        ));
    }
    if t.dropped > 0 {
        out.push_str(&format!("({} later stages not kept)\n", t.dropped));
    }
    match (t.e2e_seconds, t.sli_seconds) {
        (Some(e2e), Some(sli)) => out.push_str(&format!(
            "started in {e2e:.3}s from creation to every container running on the watch; {sli:.3}s without pulling images ({:.3}s) and init containers ({:.3}s), as kubelet_pod_start_sli_duration_seconds counts it\n",
            t.image_pull_seconds, t.init_container_seconds
        )),
        _ => out.push_str("not started yet (or started before this kubelet saw it)\n"),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_arguments() {
        assert_eq!(
            parse_pod("kube-system/dns-1").unwrap(),
            ("kube-system".into(), "dns-1".into())
        );
        assert_eq!(parse_pod("web").unwrap(), ("default".into(), "web".into()));
        for bad in ["", "/", "a/", "/b", "A/b", "a/b/c", "a b"] {
            assert!(parse_pod(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn renders_steps_and_totals() {
        let t: Timeline = serde_json::from_str(
            r#"{"namespace":"default","name":"web","uid":"u","stages":[
                {"at":"2026-01-01T00:00:00Z","stage":"PodCreated"},
                {"at":"2026-01-01T00:00:00.250Z","stage":"Seen"},
                {"at":"2026-01-01T00:00:01.750Z","stage":"Pulled","container":"main","detail":"Successfully pulled"}],
                "sliSeconds":0.5,"e2eSeconds":2.0,"imagePullSeconds":1.5,"initContainerSeconds":0}"#,
        )
        .unwrap();
        let out = render(&t);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "pod default/web (uid u)");
        assert!(lines[3].contains("0.250s    0.250s  Seen"), "{out}");
        assert!(lines[4].contains("1.750s    1.500s  Pulled"), "{out}");
        assert!(
            lines[4].ends_with("main           Successfully pulled"),
            "{out}"
        );
        assert!(out.contains("started in 2.000s"), "{out}");
        assert!(
            out.contains("0.500s without pulling images (1.500s)"),
            "{out}"
        );
    }
}
