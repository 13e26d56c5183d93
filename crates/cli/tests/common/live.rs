//! Helpers for end-to-end tests against a genuine control plane
//! (rkube-testcp): the real `kubectl`, fake nodes, `rkube scheduler`
//! processes.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rkube_testcp::support::free_port;
use rkube_testcp::ControlPlane;
use serde_json::Value;

pub fn kubectl(cp: &ControlPlane, args: &[&str]) -> String {
    let out = cp.kubectl(args).expect("kubectl runs");
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// kubectl that may fail (the API server may be restarting).
pub fn try_kubectl(cp: &ControlPlane, args: &[&str]) -> Option<String> {
    let out = cp.kubectl(args).ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

pub fn apply(cp: &ControlPlane, name: &str, yaml: &str) {
    let file = cp.dir().join(format!("{name}.yaml"));
    std::fs::write(&file, yaml).unwrap();
    // Retried: right after an API server restart a request can fail.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if try_kubectl(cp, &["apply", "-f", file.to_str().unwrap()]).is_some() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "kubectl apply {name} kept failing"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Waits until `n` nodes are Ready and untainted (a kubelet registers its
/// nodes one by one; the node lifecycle controller lifts its not-ready
/// taint shortly after).
pub fn wait_nodes_ready(cp: &ControlPlane, n: usize, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let nodes: Option<Value> = try_kubectl(cp, &["get", "nodes", "-o", "json"])
            .and_then(|out| serde_json::from_str(&out).ok());
        let ready = nodes
            .as_ref()
            .and_then(|v| v["items"].as_array())
            .map_or(0, |items| {
                items
                    .iter()
                    .filter(|n| {
                        let conditions = n["status"]["conditions"].as_array();
                        conditions.is_some_and(|cs| {
                            cs.iter()
                                .any(|c| c["type"] == "Ready" && c["status"] == "True")
                        }) && n["spec"]["taints"].as_array().is_none_or(|t| t.is_empty())
                    })
                    .count()
            });
        if ready == n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{ready} of {n} nodes Ready and untainted"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

pub fn create_nodes(cp: &ControlPlane, n: usize, cpu: &str) {
    let mut yaml = String::new();
    for i in 0..n {
        yaml.push_str(&format!(
            "apiVersion: v1\nkind: Node\nmetadata: {{name: node-{i:02}, labels: {{kubernetes.io/hostname: node-{i:02}}}}}\n---\n"
        ));
    }
    apply(cp, "nodes", &yaml);
    for i in 0..n {
        let status = format!(
            r#"{{"status":{{"capacity":{{"cpu":"{cpu}","memory":"64Gi","pods":"110"}},"allocatable":{{"cpu":"{cpu}","memory":"64Gi","pods":"110"}},"conditions":[{{"type":"Ready","status":"True","reason":"KubeletReady","message":"fake node","lastHeartbeatTime":null}}]}}}}"#
        );
        kubectl(
            cp,
            &[
                "patch",
                "node",
                &format!("node-{i:02}"),
                "--subresource=status",
                "--type=merge",
                "-p",
                &status,
            ],
        );
    }
}

/// `count` pods named `{prefix}-{i}` for `scheduler`.
pub fn create_pods(cp: &ControlPlane, prefix: &str, count: usize, scheduler: &str) {
    apply(cp, prefix, &pods_yaml(prefix, 0..count, scheduler));
}

/// [`create_pods`] for many pods: created by a client of the test's own,
/// 32 requests at a time (kubectl creates one at a time, about 20 a second
/// on this machine).
pub fn create_many_pods(cp: &ControlPlane, prefix: &str, count: usize, scheduler: &str) {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::Pod;
    let docs = pods_yaml(prefix, 0..count, scheduler);
    let pods: Vec<Pod> = docs
        .split("---\n")
        .filter(|d| !d.trim().is_empty())
        .map(|d| serde_yaml_ng::from_str(d).expect("a pod"))
        .collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = rkube_testcp::support::client(cp.kubeconfig()).await;
        let api: kube::Api<Pod> = kube::Api::namespaced(client, "default");
        let failed: Vec<String> = futures::stream::iter(pods)
            .map(|p| {
                let api = api.clone();
                async move { api.create(&Default::default(), &p).await.err() }
            })
            .buffer_unordered(32)
            .filter_map(|e| async move { e.map(|e| e.to_string()) })
            .collect()
            .await;
        assert!(failed.is_empty(), "creating pods: {failed:?}");
    });
}

fn pods_yaml(prefix: &str, range: std::ops::Range<usize>, scheduler: &str) -> String {
    let mut yaml = String::new();
    for i in range {
        yaml.push_str(&format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: {prefix}-{i:03}, namespace: default, labels: {{app: {prefix}}}}}
spec:
  schedulerName: {scheduler}
  automountServiceAccountToken: false
  tolerations: [{{operator: Exists}}]
  containers: [{{name: c, image: registry.k8s.io/pause:3.10, resources: {{requests: {{cpu: 100m, memory: 64Mi}}}}}}]
---
"#
        ));
    }
    yaml
}

/// pod name → node name ("" when pending).
pub fn placements(cp: &ControlPlane) -> Option<BTreeMap<String, String>> {
    let out = try_kubectl(cp, &["get", "pods", "-n", "default", "-o", "json"])?;
    let v: Value = serde_json::from_str(&out).ok()?;
    Some(
        v["items"]
            .as_array()?
            .iter()
            .map(|p| {
                (
                    p["metadata"]["name"].as_str().unwrap_or("").to_string(),
                    p["spec"]["nodeName"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect(),
    )
}

/// Waits until `expected` pods exist and all are bound.
pub fn wait_all_bound(
    cp: &ControlPlane,
    expected: usize,
    timeout: Duration,
) -> BTreeMap<String, String> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(p) = placements(cp) {
            if p.len() == expected && p.values().all(|n| !n.is_empty()) {
                return p;
            }
            if Instant::now() >= deadline {
                let pending: Vec<&String> = p
                    .iter()
                    .filter(|(_, n)| n.is_empty())
                    .map(|(k, _)| k)
                    .collect();
                panic!("timed out: {} pods, pending: {pending:?}", p.len());
            }
        }
        assert!(Instant::now() < deadline, "timed out listing pods");
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Upstream kube-scheduler (as `default-scheduler`) and an `rkube
/// scheduler` whose one profile is `rkube`, with a Lease of its own, side
/// by side on the control plane; `extra` flags for rkube.
pub fn rkube_beside_upstream(cp: &ControlPlane, name: &str, extra: &[&str]) -> Replica {
    cp.start_upstream_scheduler(None, &[])
        .expect("kube-scheduler starts");
    let config = cp.dir().join(format!("rkube-{name}-config.yaml"));
    std::fs::write(
        &config,
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nleaderElection:\n  resourceName: rkube\nprofiles:\n- schedulerName: rkube\n",
    )
    .unwrap();
    let mut args = vec!["--config", config.to_str().unwrap()];
    args.extend_from_slice(extra);
    Replica::start(cp, name, &args)
}

/// One `rkube scheduler` process.
pub struct Replica {
    /// The process.
    pub child: Child,
    /// Its secure port.
    pub port: u16,
    /// Its log file.
    pub log: PathBuf,
    /// The network namespace it runs in (`None`: the host's).
    pub netns: Option<String>,
}

impl Replica {
    pub fn start(cp: &ControlPlane, name: &str, extra: &[&str]) -> Replica {
        Replica::start_with_env(cp, name, extra, &[])
    }

    pub fn start_with_env(
        cp: &ControlPlane,
        name: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Replica {
        Replica::spawn(cp, name, &cp.scheduler_kubeconfig(), None, extra, env)
    }

    /// A replica in network namespace `netns` (`ip netns exec`, which execs
    /// rkube in place, so the child is rkube itself) with `kubeconfig`.
    pub fn start_in(
        cp: &ControlPlane,
        name: &str,
        netns: &str,
        kubeconfig: &std::path::Path,
        extra: &[&str],
    ) -> Replica {
        Replica::spawn(cp, name, kubeconfig, Some(netns), extra, &[])
    }

    fn spawn(
        cp: &ControlPlane,
        name: &str,
        kubeconfig: &std::path::Path,
        netns: Option<&str>,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Replica {
        let port = free_port();
        let log = cp.dir().join(format!("logs/rkube-{name}.log"));
        let file = std::fs::File::create(&log).unwrap();
        let mut cmd = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(super::rkube_bin());
                c
            }
            None => Command::new(super::rkube_bin()),
        };
        let child = cmd
            .arg("scheduler")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg(format!("--secure-port={port}"))
            .arg("--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics")
            .args(extra)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("start rkube scheduler");
        Replica {
            child,
            port,
            log,
            netns: netns.map(str::to_string),
        }
    }

    pub fn metrics(&self) -> Option<String> {
        let mut curl = match &self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, "curl"]);
                c
            }
            None => Command::new("curl"),
        };
        let out = curl
            .args(["-sk", "--max-time", "3"])
            .arg(format!("https://127.0.0.1:{}/metrics", self.port))
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    pub fn is_leader(&self) -> bool {
        self.metrics()
            .is_some_and(|m| m.contains("leader_election_master_status{name=\"kube-scheduler\"} 1"))
    }

    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then the exit code.
    pub fn terminate(&mut self) -> Option<i32> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                return st.code();
            }
            if Instant::now() > deadline {
                self.kill();
                return None;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A child process killed when the test ends, also when it fails (a
/// failed assertion must not leave a kubelet running after the test).
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
