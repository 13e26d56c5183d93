//! The what-if commands against a genuine control plane (rkube-testcp)
//! under `rkube scheduler`, driven with the real `kubectl`:
//!
//! - `rkube explain --kubeconfig` reaches the FailedScheduling message the
//!   live scheduler wrote into the pod's `PodScheduled` condition, and says
//!   it agrees; for a bound pod, that its node is among rkube's best;
//! - `rkube snapshot --watch` records a run of `RKUBE_REPLAY_SECONDS`
//!   (hack/test: 40 s; `--full`: 600 s) of pods arriving in bursts, pods
//!   deleted, nodes added, an unschedulable pod that a later node lets in;
//!   `rkube replay` with the same configuration reproduces every binding
//!   the scheduler made (`--record-decisions`: the recording shows the
//!   order the scheduler decided pods in and what it had seen);
//! - `rkube drain` predicts, from a snapshot taken just before, where the
//!   real `kubectl drain` sends a Deployment's evicted pods (three
//!   `rkube kubelet --runtime sim` nodes, a PodDisruptionBudget allowing
//!   one disruption at a time), and `--kubeconfig` reads the same cluster.
//!
//! Needs hack/build-k8s; hack/test runs these (`--ignored`).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rkube_testcp::ControlPlane;
use serde_json::Value;

mod common;
use common::live::*;

fn rkube_json(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_rkube"))
        .args(args)
        .output()
        .expect("run rkube");
    assert!(
        out.status.success(),
        "rkube {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

fn pod_yaml(name: &str, cpu: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default, labels: {{app: {name}}}}}
spec:
  automountServiceAccountToken: false
  tolerations: [{{operator: Exists}}]
  containers: [{{name: c, image: registry.k8s.io/pause:3.10, resources: {{requests: {{cpu: "{cpu}", memory: 64Mi}}}}}}]
---
"#
    )
}

/// The pod's PodScheduled condition message, once the scheduler set one.
fn wait_condition(cp: &ControlPlane, pod: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(m) = try_kubectl(
            cp,
            &[
                "get",
                "pod",
                pod,
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"PodScheduled\")].message}",
            ],
        )
        .filter(|m| !m.is_empty())
        {
            return m;
        }
        assert!(
            Instant::now() < deadline,
            "{pod}: no PodScheduled condition"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
#[ignore = "needs hack/build-k8s; run by hack/test"]
fn live_explain_agrees_with_the_running_scheduler() {
    let cp = ControlPlane::start().expect("control plane starts");
    create_nodes(&cp, 3, "2");
    let sched = Replica::start(&cp, "explain", &["--leader-elect=false"]);
    let mut yaml = pod_yaml("fits", "1500m");
    yaml.push_str(&pod_yaml("too-big", "3"));
    apply(&cp, "explain-pods", &yaml);
    let message = wait_condition(&cp, "too-big");
    wait_all_bound_but(&cp, &["too-big"]);
    let kc = cp.kubeconfig().to_str().unwrap();

    let e = rkube_json(&[
        "explain",
        "--kubeconfig",
        kc,
        "--pod",
        "default/too-big",
        "-o",
        "json",
    ]);
    assert_eq!(
        e["live"]["observed"]["condition"]["message"],
        message.as_str()
    );
    assert_eq!(e["message"], message.as_str(), "rkube's own message");
    assert_eq!(e["live"]["agrees"], true, "{e:#}");
    assert!(message.starts_with("0/3 nodes are available: 3 Insufficient cpu."));

    let e = rkube_json(&[
        "explain",
        "--kubeconfig",
        kc,
        "--pod",
        "default/fits",
        "-o",
        "json",
    ]);
    assert_eq!(e["live"]["agrees"], true, "{e:#}");
    assert!(e["live"]["observed"]["node"].is_string());

    let table = Command::new(env!("CARGO_BIN_EXE_rkube"))
        .args(["explain", "--kubeconfig", kc, "--pod", "default/too-big"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        text.contains("rkube agrees: pending with the same message"),
        "{text}"
    );

    // simulate and capacity read the same live cluster.
    let s = rkube_json(&["simulate", "--kubeconfig", kc, "-o", "json"]);
    assert_eq!(s["summary"]["unschedulable"], 1, "{s:#}");
    drop(sched);
}

/// Waits until every pod but `except` is bound.
fn wait_all_bound_but(cp: &ControlPlane, except: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(p) = placements(cp) {
            if p.iter()
                .all(|(k, n)| !n.is_empty() || except.contains(&k.as_str()))
            {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "pods left pending: {:?}",
            placements(cp).map(|p| p
                .into_iter()
                .filter(|(_, n)| n.is_empty())
                .collect::<Vec<_>>())
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn replay_seconds() -> u64 {
    common::env_count("RKUBE_REPLAY_SECONDS", 600) as u64
}

fn add_node(cp: &ControlPlane, name: &str, cpu: &str) {
    apply(
        cp,
        name,
        &format!(
            "apiVersion: v1\nkind: Node\nmetadata: {{name: {name}, labels: {{kubernetes.io/hostname: {name}}}}}\n"
        ),
    );
    let status = format!(
        r#"{{"status":{{"capacity":{{"cpu":"{cpu}","memory":"64Gi","pods":"110"}},"allocatable":{{"cpu":"{cpu}","memory":"64Gi","pods":"110"}},"conditions":[{{"type":"Ready","status":"True","reason":"KubeletReady","message":"fake node"}}]}}}}"#
    );
    kubectl(
        cp,
        &[
            "patch",
            "node",
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
            &status,
        ],
    );
}

/// A 6-CPU pod for the next 8-CPU node (pinned by hostname, so the small
/// pods the other nodes take cannot leave it without room).
fn big_pod(round: usize, node: usize) -> String {
    pod_yaml(&format!("big-{round:03}"), "6").replace(
        "  containers:",
        &format!("  nodeSelector: {{kubernetes.io/hostname: extra-{node:02}}}\n  containers:"),
    )
}

/// Pods created in bursts of mixed sizes and spreading rules.
fn burst(cp: &ControlPlane, round: usize) {
    let mut yaml = String::new();
    for i in 0..(3 + round % 4) {
        let cpu = ["100m", "250m", "500m", "700m"][(round + i) % 4];
        let name = format!("r{round:03}-{i}");
        if i % 3 == 2 {
            // Spread a workload across hostnames (PodTopologySpread scoring).
            yaml.push_str(&format!(
                r#"apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default, labels: {{app: spread}}}}
spec:
  automountServiceAccountToken: false
  tolerations: [{{operator: Exists}}]
  topologySpreadConstraints:
  - {{maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: ScheduleAnyway, labelSelector: {{matchLabels: {{app: spread}}}}}}
  containers: [{{name: c, image: registry.k8s.io/pause:3.10, resources: {{requests: {{cpu: "{cpu}", memory: 128Mi}}}}}}]
---
"#
            ));
        } else {
            yaml.push_str(&pod_yaml(&name, cpu));
        }
    }
    apply(cp, &format!("burst-{round}"), &yaml);
}

#[test]
#[ignore = "needs hack/build-k8s; run by hack/test"]
fn replay_of_a_recorded_run_reproduces_every_binding() {
    let seconds = replay_seconds();
    let cp = ControlPlane::start().expect("control plane starts");
    create_nodes(&cp, 4, "4");
    let sched = Replica::start(
        &cp,
        "replay",
        &["--leader-elect=false", "--record-decisions"],
    );
    let dir = cp.dir().join("recording");
    let log = std::fs::File::create(cp.dir().join("logs/rkube-record.log")).unwrap();
    let mut recorder = Command::new(env!("CARGO_BIN_EXE_rkube"))
        .args(["snapshot", "--watch", "--out"])
        .arg(&dir)
        .arg("--kubeconfig")
        .arg(cp.kubeconfig())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start the recorder");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !dir.join("events.jsonl").exists() {
        assert!(Instant::now() < deadline, "the recorder wrote no base");
        std::thread::sleep(Duration::from_millis(200));
    }

    let start = Instant::now();
    let mut round = 0;
    let mut extra_nodes = 0;
    // A big pod whose node has not been added yet stays pending.
    let mut waiting_big: Option<String> = None;
    while start.elapsed() < Duration::from_secs(seconds) {
        burst(&cp, round);
        if round >= 3 {
            // Delete the burst of three rounds ago: room frees up.
            let old = round - 3;
            for i in 0..(3 + old % 4) {
                let _ = try_kubectl(
                    &cp,
                    &[
                        "delete",
                        "pod",
                        &format!("r{old:03}-{i}"),
                        "--grace-period=0",
                        "--force",
                        "--wait=false",
                    ],
                );
            }
        }
        match round % 7 {
            // A pod nothing fits until the next node arrives...
            3 => {
                apply(&cp, "big", &big_pod(round, extra_nodes + 1));
                waiting_big = Some(format!("big-{round:03}"));
            }
            5 => {
                extra_nodes += 1;
                waiting_big = None;
                add_node(&cp, &format!("extra-{extra_nodes:02}"), "8");
            }
            // ... and it goes again before the next one.
            1 if round > 7 => {
                let _ = try_kubectl(
                    &cp,
                    &[
                        "delete",
                        "pod",
                        &format!("big-{:03}", round - 5),
                        "--grace-period=0",
                        "--force",
                        "--wait=false",
                    ],
                );
            }
            _ => {}
        }
        round += 1;
        std::thread::sleep(Duration::from_secs(2));
    }
    wait_all_bound_but(
        &cp,
        &waiting_big.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    std::thread::sleep(Duration::from_secs(3));
    let _ = Command::new("kill")
        .args(["-TERM", &recorder.id().to_string()])
        .status();
    let status = recorder.wait().unwrap();
    assert!(status.success(), "recorder exited {status}");
    drop(sched);

    let bound = placements(&cp).unwrap();
    // Every pod the scheduler bound carries its decision mark.
    let pods: Value = serde_json::from_str(&kubectl(&cp, &["get", "pods", "-o", "json"])).unwrap();
    for p in pods["items"].as_array().unwrap() {
        if p["spec"]["nodeName"].is_string() {
            let mark = &p["metadata"]["annotations"]["scheduling.rkube.dev/decision"];
            let parsed = mark
                .as_str()
                .and_then(rkube_model::decision::DecisionMark::parse);
            assert!(
                parsed.is_some_and(|m| m.seen("Pod").is_some() && m.seen("Node").is_some()),
                "{} has no decision mark: {mark}",
                p["metadata"]["name"]
            );
        }
    }
    let r = rkube_json(&["replay", "--from", dir.to_str().unwrap(), "-o", "json"]);
    let decisions = r["decisions"].as_array().unwrap();
    let differ: Vec<&Value> = decisions.iter().filter(|d| d["same"] != true).collect();
    if !differ.is_empty() {
        // Keep the recording for a look (the control plane's directory goes).
        let keep = std::env::temp_dir().join("rkube-replay-failed");
        let _ = std::fs::remove_dir_all(&keep);
        let _ = std::fs::create_dir_all(&keep);
        for f in ["base.json", "events.jsonl"] {
            let _ = std::fs::copy(dir.join(f), keep.join(f));
        }
    }
    assert!(
        differ.is_empty(),
        "replay differs from the recording: {differ:#?}"
    );
    // Every pod still there was bound by the scheduler and replayed to the
    // same node; the big pod still waiting for its node (when the run ended
    // between its creation and the node's) is pending in both.
    for (pod, node) in &bound {
        let d = decisions
            .iter()
            .find(|d| d["pod"] == format!("default/{pod}").as_str());
        if node.is_empty() {
            assert!(
                waiting_big.as_deref() == Some(pod.as_str()),
                "{pod} was never bound"
            );
            if let Some(d) = d {
                assert_eq!(d["recordedNode"], Value::Null, "{d}");
                assert_eq!(d["replayNode"], Value::Null, "{d}");
            }
            continue;
        }
        let d = d.unwrap_or_else(|| panic!("default/{pod} not replayed"));
        assert_eq!(d["recordedNode"], node.as_str());
        assert_eq!(d["replayNode"], node.as_str());
    }
    assert!(
        decisions.len() >= 30 && !bound.is_empty(),
        "{} decisions",
        decisions.len()
    );
    eprintln!(
        "replayed {} changes, {} decisions, all as recorded ({} rounds in {} s)",
        r["changes"],
        decisions.len(),
        round,
        seconds
    );
    assert_private(&dir);
}

fn assert_private(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    for f in ["base.json", "events.jsonl"] {
        let mode = std::fs::metadata(dir.join(f)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{f}");
    }
}

/// Three sim nodes of 4 CPUs from one `rkube kubelet --runtime sim`.
fn sim_nodes(cp: &ControlPlane) -> Killed {
    let cfg = cp.dir().join("drain-kubelet.yaml");
    std::fs::write(
        &cfg,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nhealthzPort: 0\n",
    )
    .unwrap();
    let template = cp.dir().join("drain-node.yaml");
    std::fs::write(
        &template,
        "apiVersion: v1\nkind: Node\nmetadata: {name: t}\nstatus:\n  capacity: {cpu: \"4\", memory: 16Gi, pods: \"110\"}\n  allocatable: {cpu: \"4\", memory: 16Gi, pods: \"110\"}\n",
    )
    .unwrap();
    let log = std::fs::File::create(cp.dir().join("logs/rkube-kubelet-sim.log")).unwrap();
    Command::new(env!("CARGO_BIN_EXE_rkube"))
        .args([
            "kubelet",
            "--runtime=sim",
            "--nodes=3",
            "--node-name-pattern=drain-{}",
        ])
        .arg(format!("--kubeconfig={}", cp.kubeconfig().display()))
        .arg(format!("--config={}", cfg.display()))
        .arg(format!("--node-template={}", template.display()))
        .arg(format!(
            "--root-dir={}",
            cp.dir().join("kubelet-root").display()
        ))
        .args(["--pod-start-delay=200ms", "--pod-run-time=0"])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map(Killed)
        .expect("start the sim kubelet")
}

/// `web` pods: name → node.
fn web_pods(cp: &ControlPlane) -> std::collections::BTreeMap<String, String> {
    placements(cp)
        .unwrap_or_default()
        .into_iter()
        .filter(|(name, _)| name.starts_with("web-"))
        .collect()
}

fn wait_web_running(cp: &ControlPlane, n: usize) -> std::collections::BTreeMap<String, String> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let out = try_kubectl(
            cp,
            &[
                "get",
                "pods",
                "-l",
                "app=web",
                "--field-selector=status.phase=Running",
                "-o",
                "name",
            ],
        )
        .unwrap_or_default();
        let running = out.lines().count();
        let pods = web_pods(cp);
        if running == n && pods.len() == n && pods.values().all(|v| !v.is_empty()) {
            return pods;
        }
        assert!(
            Instant::now() < deadline,
            "web: {running} of {n} Running: {pods:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

const WEB: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 4
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      automountServiceAccountToken: false
      terminationGracePeriodSeconds: 0
      containers: [{name: c, image: registry.k8s.io/pause:3.10, resources: {requests: {cpu: 1500m, memory: 64Mi}}}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: default}
spec:
  maxUnavailable: 1
  selector: {matchLabels: {app: web}}
"#;

#[test]
#[ignore = "needs hack/build-k8s; run by hack/test"]
fn drain_predicts_where_kubectl_drain_sends_the_pods() {
    let cp = ControlPlane::start().expect("control plane starts");
    let kubelet = sim_nodes(&cp);
    // All three first: a node registered after the Deployment was placed
    // (or after the snapshot) changes the forced outcome below.
    wait_nodes_ready(&cp, 3, Duration::from_secs(90));
    let sched = Replica::start(&cp, "drain", &["--leader-elect=false"]);
    apply(&cp, "web", WEB);
    // 1.5 CPU each on 4-CPU nodes: two fit a node, and LeastAllocated
    // spreads four as 2/1/1. Draining the node with two leaves exactly one
    // free slot on each other node: the outcome is forced.
    let before = wait_web_running(&cp, 4);
    let mut per_node: std::collections::BTreeMap<&str, usize> = Default::default();
    for n in before.values() {
        *per_node.entry(n).or_default() += 1;
    }
    let (target, _) = per_node
        .iter()
        .find(|(_, c)| **c == 2)
        .expect("a node with two web pods");
    let target = target.to_string();

    // The PDB's status is written by the disruption controller: wait for it.
    let deadline = Instant::now() + Duration::from_secs(60);
    while try_kubectl(
        &cp,
        &[
            "get",
            "pdb",
            "web",
            "-o",
            "jsonpath={.status.disruptionsAllowed}",
        ],
    )
    .as_deref()
        != Some("1")
    {
        assert!(
            Instant::now() < deadline,
            "the PDB never allowed a disruption"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let snap = cp.dir().join("before-drain.json");
    let kc = cp.kubeconfig().to_str().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rkube"))
        .args(["snapshot", "--kubeconfig", kc, "-o"])
        .arg(&snap)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let predicted = rkube_json(&[
        "drain",
        "--cluster",
        snap.to_str().unwrap(),
        "--node",
        &target,
        "-o",
        "json",
    ]);
    let live = rkube_json(&["drain", "--kubeconfig", kc, "--node", &target, "-o", "json"]);
    assert_eq!(
        predicted["evicted"], live["evicted"],
        "--cluster and --kubeconfig differ"
    );
    assert_eq!(predicted["summary"]["evicted"], 2, "{predicted:#}");
    assert_eq!(predicted["summary"]["blocked"], 0, "{predicted:#}");
    let mut want: Vec<String> = predicted["evicted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["node"].as_str().unwrap_or("<pending>").to_string())
        .collect();
    want.sort();

    let out = cp
        .kubectl(&["drain", &target, "--ignore-daemonsets", "--timeout=120s"])
        .unwrap();
    assert!(
        out.status.success(),
        "kubectl drain: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = wait_web_running(&cp, 4);
    let mut got: Vec<String> = after
        .iter()
        .filter(|(name, _)| !before.contains_key(*name))
        .map(|(_, node)| node.clone())
        .collect();
    got.sort();
    assert_eq!(
        got, want,
        "rkube drain predicted {want:?}, kubectl drain gave {got:?}"
    );
    assert!(!got.contains(&target));
    eprintln!("drained {target}: replacements on {got:?}, as predicted");
    drop(sched);
    drop(kubelet);
}
