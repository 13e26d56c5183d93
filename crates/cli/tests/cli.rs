//! End-to-end tests of the `rkube` binary on the bundled examples and the
//! bad-input corpus.

mod common;
use common::{json, rkube, root};

use serde_json::Value;

const CLUSTER: &str = "examples/image-locality/cluster.yaml";

fn placements(config: Option<&str>) -> Vec<(String, String)> {
    let mut args = vec!["simulate", "--cluster", CLUSTER, "-o", "json"];
    if let Some(c) = config {
        args.extend(["--config", c]);
    }
    let v = json(&args);
    v["placements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["pod"].as_str().unwrap().to_string(),
                p["node"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

#[test]
fn image_locality_piles_replicas_and_weight_zero_does_not_disable_it() {
    let default = placements(None);
    assert_eq!(default.len(), 4);
    assert!(
        default.iter().all(|(_, n)| n == "node02"),
        "all replicas land on the node with the image: {default:?}"
    );
    let weight_zero = placements(Some("examples/image-locality/config-weight-zero.yaml"));
    assert_eq!(weight_zero, default, "weight 0 is treated as 1");
    let disabled = placements(Some(
        "examples/image-locality/config-disable-imagelocality.yaml",
    ));
    let on_node02 = disabled.iter().filter(|(_, n)| n == "node02").count();
    assert!(
        on_node02 <= 2,
        "replicas spread once ImageLocality is off: {disabled:?}"
    );
    let nodes: std::collections::BTreeSet<_> = disabled.iter().map(|(_, n)| n.clone()).collect();
    assert_eq!(nodes.len(), 3, "{disabled:?}");
}

#[test]
fn simulate_json_shape() {
    let v = json(&["simulate", "--cluster", CLUSTER, "-o", "json", "--explain"]);
    assert_eq!(v["summary"]["scheduled"], 4);
    assert_eq!(v["summary"]["unschedulable"], 0);
    let node02 = v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "node02")
        .unwrap();
    assert_eq!(node02["pods"], 4);
    assert_eq!(node02["requested"]["cpu"], "2");
    assert_eq!(node02["requested"]["memory"], "4Gi");
    assert_eq!(node02["allocatable"]["cpu"], "16");
    let first = &v["placements"][0];
    assert_eq!(first["message"], "");
    assert_eq!(first["explain"]["pod"], first["pod"]);
}

#[test]
fn explain_json_shape_and_arithmetic() {
    let v = json(&[
        "explain",
        "--cluster",
        CLUSTER,
        "--pod",
        "test-5/mysql-server-1",
        "-o",
        "json",
    ]);
    assert_eq!(v["pod"], "test-5/mysql-server-1");
    assert_eq!(v["profile"], "default-scheduler");
    assert_eq!(v["selectedNode"], "node02");
    assert_eq!(v["message"], "");
    let nodes = v["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 3);
    for n in nodes {
        assert_eq!(n["feasible"], true);
        let scores = n["scores"].as_array().unwrap();
        let sum: i64 = scores.iter().map(|s| s["weighted"].as_i64().unwrap()).sum();
        assert_eq!(sum, n["total"].as_i64().unwrap());
        for s in scores {
            assert_eq!(
                s["normalized"].as_i64().unwrap() * s["weight"].as_i64().unwrap(),
                s["weighted"].as_i64().unwrap()
            );
        }
        let plugins: Vec<&str> = scores
            .iter()
            .map(|s| s["plugin"].as_str().unwrap())
            .collect();
        // Skipped at PreScore: no entry.
        assert!(!plugins.contains(&"PodTopologySpread"), "{plugins:?}");
        assert!(plugins.contains(&"ImageLocality"));
        let filters = n["filters"].as_array().unwrap();
        assert!(filters
            .iter()
            .any(|f| f["plugin"] == "NodeResourcesFit" && f["code"] == "Success"));
        assert!(filters
            .iter()
            .any(|f| f["plugin"] == "NodePorts" && f["code"] == "Skip"));
    }
    let il = |name: &str| {
        nodes.iter().find(|n| n["name"] == name).unwrap()["scores"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["plugin"] == "ImageLocality")
            .unwrap()["raw"]
            .as_i64()
            .unwrap()
    };
    // 800MiB image on 1 of 3 nodes: 100 × (800/3 MiB − 23MiB) / (1000MiB − 23MiB) = 24.
    assert_eq!(il("node02"), 24);
    assert_eq!(il("node01"), 0);
}

#[test]
fn explain_table_lists_plugins() {
    let out = rkube(&[
        "explain",
        "--cluster",
        CLUSTER,
        "--pod",
        "test-5/mysql-server-1",
    ]);
    assert!(out.status.success());
    let s = String::from_utf8(out.stdout).unwrap();
    assert!(s.contains("Node node02: total"), "{s}");
    assert!(s.contains("ImageLocality"), "{s}");
    assert!(s.contains("Selected node: node02"), "{s}");
}

fn fails_with(args: &[&str], code: i32, needles: &[&str]) {
    let out = rkube(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "rkube {args:?}: {err}");
    assert!(out.stdout.is_empty(), "no partial output on error");
    for n in needles {
        assert!(err.contains(n), "stderr of {args:?} lacks {n:?}: {err}");
    }
    assert_eq!(err.lines().count(), 1, "one clear message: {err}");
}

#[test]
fn bad_input_exits_2_naming_file_object_field() {
    fails_with(
        &["simulate", "--cluster", "tests/bad-input/malformed.yaml"],
        2,
        &["tests/bad-input/malformed.yaml", "invalid YAML"],
    );
    fails_with(
        &["simulate", "--cluster", "tests/bad-input/bad-quantity.yaml"],
        2,
        &[
            "bad-quantity.yaml",
            "Pod shop/web",
            "spec.containers[0].resources.requests.memory",
            "quantities must match",
        ],
    );
    fails_with(
        &[
            "simulate",
            "--cluster",
            "tests/bad-input/missing-containers.yaml",
        ],
        2,
        &["missing-containers.yaml", "Pod shop/web", "containers"],
    );
    fails_with(
        &[
            "simulate",
            "--cluster",
            CLUSTER,
            "--config",
            "tests/bad-input/unknown-plugin.yaml",
        ],
        2,
        &[
            "profiles[0]",
            "plugins.score.enabled[0].name",
            "NodeResourcesLeastAllocated",
            "NodeResourcesFit with pluginConfig args scoringStrategy.type: LeastAllocated",
        ],
    );
    fails_with(
        &[
            "simulate",
            "--cluster",
            CLUSTER,
            "--config",
            "tests/bad-input/v1beta1.yaml",
        ],
        2,
        &[
            "v1beta1.yaml",
            "was removed",
            "kubescheduler.config.k8s.io/v1",
        ],
    );
    fails_with(
        &["explain", "--cluster", CLUSTER, "--pod", "test-5/nope"],
        2,
        &["test-5/nope", "not found"],
    );
    fails_with(
        &["simulate", "--cluster", "does/not/exist.yaml"],
        2,
        &["does/not/exist.yaml"],
    );
}

#[test]
fn failed_scheduling_message_is_upstreams() {
    let dir = std::env::temp_dir().join(format!("rkube-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("c.yaml");
    std::fs::write(
        &file,
        r#"
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Node, metadata: {name: a}, status: {allocatable: {cpu: "1", memory: 1Gi, pods: "10"}}}
- {apiVersion: v1, kind: Node, metadata: {name: b}, spec: {taints: [{key: dedicated, value: gpu, effect: NoSchedule}]}, status: {allocatable: {cpu: "8", memory: 8Gi, pods: "10"}}}
- {apiVersion: v1, kind: Node, metadata: {name: c}, status: {allocatable: {cpu: "1", memory: 1Gi, pods: "10"}}}
- {apiVersion: v1, kind: Pod, metadata: {name: small, namespace: d}, spec: {nodeName: c, containers: [{name: x, resources: {requests: {cpu: 800m}}}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: big, namespace: d}, spec: {containers: [{name: x, resources: {requests: {cpu: "2"}}}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: mid, namespace: d}, spec: {containers: [{name: x, resources: {requests: {cpu: 500m}}}]}}
"#,
    )
    .unwrap();
    let f = file.to_str().unwrap();
    let v = json(&["explain", "--cluster", f, "--pod", "d/big", "-o", "json"]);
    assert_eq!(v["selectedNode"], Value::Null);
    assert_eq!(
        v["message"],
        "0/3 nodes are available: 1 node(s) had untolerated taint(s), 2 Insufficient cpu. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
    );
    // "mid" fits only node a (c has 800m used of 1 core); after "big" fails, mid lands on a.
    let v = json(&["simulate", "--cluster", f, "-o", "json"]);
    let p: Vec<_> = v["placements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["pod"].clone(), p["node"].clone()))
        .collect();
    assert_eq!(p[0], (Value::from("d/big"), Value::Null));
    assert_eq!(p[1], (Value::from("d/mid"), Value::from("a")));
    let v = json(&["explain", "--cluster", f, "--pod", "d/mid", "-o", "json"]);
    let c = v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "c")
        .unwrap();
    assert_eq!(c["feasible"], false);
    let fit = c["filters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["plugin"] == "NodeResourcesFit")
        .unwrap();
    assert_eq!(fit["code"], "Unschedulable");
    assert_eq!(fit["reasons"][0], "Insufficient cpu");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn version_names_the_commit_and_the_kubernetes_release() {
    let kver = std::fs::read_to_string(root().join("KUBERNETES_VERSION")).unwrap();
    let want_k8s = format!("Kubernetes v{}", kver.trim());
    for args in [&["--version"][..], &["version"][..]] {
        let out = rkube(args);
        assert!(out.status.success(), "{args:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(
            text.starts_with(&format!("rkube {} (commit ", env!("CARGO_PKG_VERSION"))),
            "{text}"
        );
        assert!(text.contains(&want_k8s), "{text}");
        // A checkout's commit (12 hex digits), or "unknown" outside git.
        let commit = text
            .split("(commit ")
            .nth(1)
            .unwrap()
            .split(',')
            .next()
            .unwrap();
        assert!(
            commit == "unknown"
                || (commit.len() == 12 && commit.bytes().all(|b| b.is_ascii_hexdigit())),
            "{text}"
        );
    }
}

/// The offline commands take `--feature-gates` and check it as
/// `rkube scheduler` does: a scheduling gate rkube does not implement, set
/// away from its default, and an unknown gate exit 2 with upstream's words.
#[test]
fn feature_gates_are_checked_as_the_scheduler_checks_them() {
    let off = ["--feature-gates", "OpportunisticBatching=false"];
    for cmd in [
        vec!["simulate", "--cluster", CLUSTER],
        vec!["drain", "--cluster", CLUSTER, "--node", "node02"],
    ] {
        let out = rkube(&[cmd.as_slice(), off.as_slice()].concat());
        assert!(out.status.success(), "{cmd:?}: {out:?}");
        // GenericWorkload is implemented (gang scheduling).
        let out = rkube(&[cmd.as_slice(), &["--feature-gates", "GenericWorkload=true"]].concat());
        assert!(out.status.success(), "{cmd:?}: {out:?}");
        let out = rkube(
            &[
                cmd.as_slice(),
                &[
                    "--feature-gates",
                    "GenericWorkload=true,CompositePodGroup=true",
                ],
            ]
            .concat(),
        );
        assert_eq!(out.status.code(), Some(2), "{cmd:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(
                "feature gate CompositePodGroup=true is not implemented by rkube's offline commands"
            ),
            "{err}"
        );
    }
    let out = rkube(&[
        "explain",
        "--cluster",
        CLUSTER,
        "--pod",
        "kube-system/monitoring-agent",
        "--feature-gates",
        "NoSuchGate=true",
    ]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("unrecognized feature gate: NoSuchGate"));
}

/// `explain` on a gang member (examples/gang, GenericWorkload on) explains
/// the group's cycle in every output; without the gate the pod is
/// explained alone.
#[test]
fn explain_on_a_gang_member_explains_its_groups_cycle() {
    let args = [
        "explain",
        "--cluster",
        "examples/gang/cluster.yaml",
        "--pod",
        "ml/train-worker-3",
    ];
    let gate = ["--feature-gates", "GenericWorkload=true"];
    let out = rkube(&[args.as_slice(), &gate].concat());
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    for want in [
        "Not tried: its group's cycle stopped before its turn.",
        "No node selected: minCount (4) cannot be satisfied: 2 scheduled, 1 remaining",
        "Pod group ml/train (gang, minCount 4; 0 member(s) bound before)\n",
        "node-2  ml/train-worker-0  ml/train-worker-2 (NodeResourcesFit: Insufficient cpu)",
        "The group does not fit; it fits with 2 more node(s) like node-1.",
    ] {
        assert!(text.contains(want), "{want:?} missing from:\n{text}");
    }
    let v = json(&[args.as_slice(), &gate, &["-o", "json"]].concat());
    let g = &v["podGroup"];
    assert_eq!(g["group"], "ml/train");
    assert_eq!(g["scheduled"], false);
    assert_eq!(g["fitsWith"]["count"], 2);
    let tried: Vec<bool> = g["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["tried"].as_bool().unwrap())
        .collect();
    assert_eq!(tried, [true, true, true, false]);
    let out = rkube(&[args.as_slice(), &gate, &["-o", "html"]].concat());
    let html = String::from_utf8_lossy(&out.stdout);
    assert!(html.contains("Pod group ml/train"), "{html}");
    assert!(html.contains("fits with 2 more node(s) like node-1"));
    // Gate off: the pod alone fits on node-2.
    let v = json(&[args.as_slice(), &["-o", "json"]].concat());
    assert!(v.get("podGroup").is_none(), "{v}");
    assert_eq!(v["selectedNode"], "node-2");
}

/// examples/gang/urgent.yaml: the urgent gang preempts both batch pods as
/// one (upstream's loop places the workers on the same nodes and deletes the
/// same pods), `simulate` lists the preemption under the PodGroup and
/// `explain` names the victims and the nominations.
#[test]
fn an_urgent_gang_preempts_as_one() {
    let gate = ["--feature-gates", "GenericWorkload=true"];
    let v = json(
        &[
            ["simulate", "--cluster", "examples/gang/urgent.yaml"].as_slice(),
            &gate,
            &["-o", "json"],
        ]
        .concat(),
    );
    let placed: Vec<(&str, &str)> = v["placements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["pod"].as_str().unwrap(), p["node"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(
        placed,
        [
            ("ml/train-worker-0", "node-2"),
            ("ml/train-worker-1", "node-3"),
            ("ml/train-worker-2", "node-4"),
            ("ml/train-worker-3", "node-1"),
        ]
    );
    let p = &v["preemptions"][0];
    assert_eq!(p["preemptor"], "ml/train");
    assert_eq!(p["podGroup"], true);
    assert_eq!(
        p["victims"],
        serde_json::json!(["shop/batch-0", "shop/batch-1"])
    );
    let out = rkube(
        &[
            [
                "explain",
                "--cluster",
                "examples/gang/urgent.yaml",
                "--pod",
                "ml/train-worker-1",
            ]
            .as_slice(),
            &gate,
        ]
        .concat(),
    );
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Workload-aware preemption makes room now: it evicts shop/batch-0, shop/batch-1 and nominates ml/train-worker-0 to node-2"),
        "{text}"
    );
}

/// `capacity` under GenericWorkload refuses a shape that names a pod group
/// (its members are only scheduled together), naming the file, the pod and
/// the field; without the gate the field means nothing to the scheduler.
#[test]
fn capacity_refuses_a_pod_group_member_shape_under_the_gate() {
    let dir = std::env::temp_dir().join(format!("rkube-cap-gang-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let shape = dir.join("worker.yaml");
    std::fs::write(
        &shape,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: w, namespace: ml}\nspec:\n  schedulingGroup: {podGroupName: train}\n  containers: [{name: c, image: x, resources: {requests: {cpu: '1'}}}]\n",
    )
    .unwrap();
    let args = [
        "capacity",
        "--cluster",
        "examples/gang/cluster.yaml",
        "--pod",
        shape.to_str().unwrap(),
    ];
    let out = rkube(
        &[
            args.as_slice(),
            &["--feature-gates", "GenericWorkload=true"],
        ]
        .concat(),
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("worker.yaml: pod ml/w: spec.schedulingGroup.podGroupName \"train\""),
        "{err}"
    );
    let out = rkube(&args);
    assert!(out.status.success(), "{out:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
