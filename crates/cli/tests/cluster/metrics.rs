//! Node observability with its real clients: metrics-server (the
//! cluster's add-on) scrapes every rkube node's `/metrics/resource`, so
//! `kubectl top node` and `kubectl top pod` print every node and pod, a
//! pod burning a core shows about 1000m, and a HorizontalPodAutoscaler on
//! CPU scales a Deployment up under load and back down after it; the
//! kubelet's own path to cAdvisor's metrics (`kubectl get --raw
//! /api/v1/nodes/NODE/proxy/metrics/cadvisor`, as through `kubectl
//! proxy`) names each running container.

use std::time::Duration;

use super::Cluster;

/// The images come from the cluster's registry (`IMAGE`): after the
/// pulls earlier in the test, the kubelet's pull records make the
/// preloaded `rkube.local/busybox:1` (the same image) a pulled image that
/// a `Never` pod may not use, as upstream's credential checks do.
const BURN: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: burn}
spec:
  nodeName: node-2
  terminationGracePeriodSeconds: 1
  containers:
  - name: burn
    image: IMAGE
    command: ["sh", "-c", "while :; do :; done"]
    resources: {requests: {cpu: 100m}}
"#;

/// Each replica burns a core while `/tmp/load` exists in it; the first
/// one starts with it.
const SCALED: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: scaled}
spec:
  replicas: 1
  selector: {matchLabels: {app: scaled}}
  template:
    metadata: {labels: {app: scaled}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: work
        image: IMAGE
        command: ["sh", "-c", "while :; do if [ -e /tmp/load ]; then :; else sleep 1; fi; done"]
        resources: {requests: {cpu: 100m}}
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: scaled}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: scaled}
  minReplicas: 1
  maxReplicas: 3
  metrics:
  - type: Resource
    resource: {name: cpu, target: {type: Utilization, averageUtilization: 50}}
  behavior:
    scaleDown: {stabilizationWindowSeconds: 0}
"#;

/// `kubectl top …` rows (header skipped), when it succeeds.
fn top(c: &Cluster, args: &[&str]) -> Option<Vec<Vec<String>>> {
    let mut all = vec!["top"];
    all.extend_from_slice(args);
    all.push("--no-headers");
    let o = c.kubectl(&all);
    o.status.success().then(|| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(|l| l.split_whitespace().map(str::to_string).collect())
            .collect()
    })
}

/// Millicores of a `kubectl top` CPU column (`1003m`, `2`).
fn millis(v: &str) -> i64 {
    match v.strip_suffix('m') {
        Some(m) => m.parse().unwrap_or(-1),
        None => v.parse::<i64>().map_or(-1, |c| c * 1000),
    }
}

fn replicas(c: &Cluster) -> i64 {
    c.ok(&[
        "get",
        "deploy",
        "scaled",
        "-o",
        "jsonpath={.status.replicas}",
    ])
    .trim()
    .parse()
    .unwrap_or(0)
}

pub fn check(c: &Cluster) {
    // metrics-server is an add-on of the cluster; its API answers once it
    // has scraped the nodes.
    c.until(
        "the metrics API (v1beta1.metrics.k8s.io) Available",
        Duration::from_secs(180),
        || {
            let o = c.kubectl(&[
                "get",
                "apiservice",
                "v1beta1.metrics.k8s.io",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Available\")].status}",
            ]);
            (String::from_utf8_lossy(&o.stdout) == "True").then_some(())
        },
    );
    let image = c.push(false, "rkube.local/busybox:1");
    c.apply(&BURN.replace("IMAGE", &image));
    c.until("pod burn Running", Duration::from_secs(60), || {
        let o = c.kubectl(&["get", "pod", "burn", "-o", "jsonpath={.status.phase}"]);
        let phase = String::from_utf8_lossy(&o.stdout).to_string();
        if phase == "Failed" || phase == "Succeeded" {
            panic!("burn: {}", c.ok(&["get", "pod", "burn", "-o", "yaml"]));
        }
        (phase == "Running").then_some(())
    });

    // kubectl top node: every node, with figures
    let nodes = c.until(
        "kubectl top node for both nodes",
        Duration::from_secs(90),
        || top(c, &["node"]).filter(|rows| rows.len() == 2),
    );
    for row in &nodes {
        assert!(row.len() >= 5 && millis(&row[1]) > 0, "{nodes:?}");
        assert!(
            row[3].ends_with("Mi") || row[3].ends_with("Gi"),
            "{nodes:?}"
        );
    }
    // kubectl top pod: every running pod, and the burner near one core
    // within two scrape intervals (15 s each) of having metrics
    let burn = c.until("burn at 900–1100m", Duration::from_secs(90), || {
        let rows = top(c, &["pod", "burn"])?;
        let m = millis(rows.first()?.get(1)?);
        (900..=1100).contains(&m).then_some(m)
    });
    let running = c.ok(&[
        "get",
        "pods",
        "-A",
        "--field-selector=status.phase=Running",
        "--no-headers",
        "-o",
        "custom-columns=NS:.metadata.namespace,N:.metadata.name",
    ]);
    let pods = c.until(
        "kubectl top pod -A lists every running pod",
        Duration::from_secs(60),
        || {
            let rows = top(c, &["pod", "-A"])?;
            running
                .lines()
                .all(|l| {
                    let mut it = l.split_whitespace();
                    let (ns, name) = (it.next().unwrap_or(""), it.next().unwrap_or(""));
                    rows.iter()
                        .any(|r| r.len() >= 4 && r[0] == ns && r[1] == name)
                })
                .then_some(rows)
        },
    );
    assert!(pods.len() >= 3, "{pods:?}");
    c.ok(&["delete", "pod", "burn", "--wait=false"]);

    // The cAdvisor path of the kubelet's documentation, through the API
    // server's node proxy: cAdvisor's format, each running container named.
    let cadvisor = c.ok(&[
        "get",
        "--raw",
        "/api/v1/nodes/node-1/proxy/metrics/cadvisor",
    ]);
    assert!(cadvisor.contains("# TYPE container_cpu_usage_seconds_total counter"));
    let coredns = c.ok(&[
        "get",
        "pods",
        "-n",
        "kube-system",
        "-l",
        "k8s-app=kube-dns",
        "--field-selector=spec.nodeName=node-1",
        "-o",
        "jsonpath={.items[*].metadata.name}",
    ]);
    for pod in coredns.split_whitespace() {
        assert!(
            cadvisor
                .lines()
                .any(|l| l.starts_with("container_memory_working_set_bytes{")
                    && l.contains("container=\"coredns\",")
                    && l.contains(&format!("pod=\"{pod}\""))),
            "no working set of {pod}'s coredns container in /metrics/cadvisor"
        );
    }

    // An HPA on CPU: up to 3 replicas under load, back to 1 after it.
    c.apply(&SCALED.replace("IMAGE", &image));
    c.ok(&["rollout", "status", "deploy/scaled", "--timeout=60s"]);
    c.ok(&["exec", "deploy/scaled", "--", "touch", "/tmp/load"]);
    c.until(
        "the HPA scales to 3 replicas under load",
        Duration::from_secs(180),
        || (replicas(c) >= 3).then_some(()),
    );
    for pod in c
        .ok(&[
            "get",
            "pods",
            "-l",
            "app=scaled",
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ])
        .split_whitespace()
    {
        let _ = c.kubectl(&["exec", pod, "--", "rm", "-f", "/tmp/load"]);
    }
    c.until(
        "the HPA scales back to 1 replica",
        Duration::from_secs(180),
        || (replicas(c) == 1).then_some(()),
    );
    eprintln!("metrics: burn at {burn}m; the HPA scaled 1 → 3 → 1");
    c.ok(&["delete", "deploy/scaled", "hpa/scaled", "--wait=false"]);
}
