//! `rkube capacity` on `examples/capacity/`: three 4-CPU / 8 GiB nodes, one
//! of them already running a 1-CPU / 2 GiB pod. The counts below are forced
//! by the requests (arithmetic in each test), and the single-shape count is
//! checked against `rkube simulate` placing the same pods.

mod common;
use common::{json, rkube, root};

use std::path::PathBuf;

use serde_json::Value;

const CLUSTER: &str = "examples/capacity/cluster.yaml";
const WEB: &str = "examples/capacity/web.yaml";
const WORKER: &str = "examples/capacity/worker.yaml";

fn per_node(shape: &Value) -> Vec<(String, u64)> {
    shape["perNode"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_u64().unwrap()))
        .collect()
}

fn stop_plugins(shape: &Value) -> Vec<(String, String, String)> {
    shape["stopped"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["name"].as_str().unwrap().to_string(),
                n["plugin"].as_str().unwrap().to_string(),
                n["reasons"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| r.as_str().unwrap())
                    .collect::<Vec<_>>()
                    .join("; "),
            )
        })
        .collect()
}

/// 1.5-CPU pods: node-a has 3 CPUs free (2 fit), node-b and node-c 4 (2 fit
/// each, 1 CPU left): 6, then every node is short of CPU.
#[test]
fn one_shape_fills_the_cluster_and_says_why_it_stopped() {
    let r = json(&["capacity", "--cluster", CLUSTER, "--pod", WEB, "-o", "json"]);
    let web = &r["shapes"][0];
    assert_eq!(web["count"], 6, "{r:#}");
    assert_eq!(r["total"], 6);
    assert_eq!(r["maxReached"], false);
    assert_eq!(
        per_node(web),
        [
            ("node-a".into(), 2),
            ("node-b".into(), 2),
            ("node-c".into(), 2)
        ]
    );
    let msg = web["stopped"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("0/3 nodes are available: 3 Insufficient cpu."),
        "{msg}"
    );
    assert_eq!(web["stopped"]["pod"], "shop/web-6");
    for (node, plugin, reasons) in stop_plugins(web) {
        assert_eq!(plugin, "NodeResourcesFit", "{node}");
        assert_eq!(reasons, "Insufficient cpu", "{node}");
    }
    assert_eq!(stop_plugins(web).len(), 3);
}

/// The same answer as `rkube simulate` on the cluster plus eight replicas of
/// the shape: the replicas placed before the first Pending one, node by node.
#[test]
fn capacity_equals_what_simulate_places_before_the_first_pending_pod() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("capacity-vs-simulate");
    std::fs::create_dir_all(&dir).unwrap();
    let shape = std::fs::read_to_string(root().join(WEB)).unwrap();
    let mut text = std::fs::read_to_string(root().join(CLUSTER)).unwrap();
    for i in 0..8 {
        text.push_str("\n---\n");
        text.push_str(&shape.replace("name: web,", &format!("name: web-{i},")));
    }
    let file = dir.join("cluster.yaml");
    std::fs::write(&file, text).unwrap();
    let sim = json(&[
        "simulate",
        "--cluster",
        file.to_str().unwrap(),
        "-o",
        "json",
    ]);
    let placements = sim["placements"].as_array().unwrap();
    let before_pending: Vec<&str> = placements
        .iter()
        .take_while(|p| p["node"].is_string())
        .map(|p| p["node"].as_str().unwrap())
        .collect();
    let cap = json(&["capacity", "--cluster", CLUSTER, "--pod", WEB, "-o", "json"]);
    assert_eq!(
        cap["shapes"][0]["count"].as_u64().unwrap() as usize,
        before_pending.len()
    );
    let mut counted = std::collections::BTreeMap::<String, u64>::new();
    for n in before_pending {
        *counted.entry(n.to_string()).or_default() += 1;
    }
    assert_eq!(
        per_node(&cap["shapes"][0]),
        counted.into_iter().collect::<Vec<_>>()
    );
}

/// In order: six web pods, then 0.5-CPU / 3 GiB workers in what is left —
/// none on node-a (no CPU left), two each on node-b and node-c (1 CPU and
/// 8 GiB - 2 × 1 GiB = 6 GiB left: two workers use both up). Upstream's
/// message sorts its "N reason" strings, so "2 Insufficient memory" first.
#[test]
fn shapes_in_order_fill_what_the_previous_ones_left() {
    let r = json(&[
        "capacity",
        "--cluster",
        CLUSTER,
        "--pod",
        WEB,
        "--pod",
        WORKER,
        "-o",
        "json",
    ]);
    assert_eq!(r["shapes"][0]["count"], 6, "{r:#}");
    let worker = &r["shapes"][1];
    assert_eq!(worker["count"], 4, "{r:#}");
    assert_eq!(
        per_node(worker),
        [("node-b".into(), 2), ("node-c".into(), 2)]
    );
    let msg = worker["stopped"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("0/3 nodes are available: 2 Insufficient memory, 3 Insufficient cpu."),
        "{msg}"
    );
    assert_eq!(r["total"], 10);
}

/// Interleaved 1:1, the shapes share the cluster: both get pods, both stop
/// on resources, and what they placed fits the nodes' free CPU.
#[test]
fn interleaved_shapes_share_the_cluster() {
    let r = json(&[
        "capacity",
        "--cluster",
        CLUSTER,
        "--pod",
        &format!("{WEB}:1"),
        "--pod",
        &format!("{WORKER}:1"),
        "-o",
        "json",
    ]);
    let (web, worker) = (
        r["shapes"][0]["count"].as_u64().unwrap(),
        r["shapes"][1]["count"].as_u64().unwrap(),
    );
    assert!(web >= 1 && worker >= 1, "{r:#}");
    // 11 CPUs free in all, 1.5 and 0.5 each.
    assert!(web * 1500 + worker * 500 <= 11_000, "{r:#}");
    for s in r["shapes"].as_array().unwrap() {
        assert!(s["stopped"]["message"]
            .as_str()
            .unwrap()
            .starts_with("0/3 nodes are available"));
    }
}

#[test]
fn max_bounds_the_run() {
    let r = json(&[
        "capacity",
        "--cluster",
        CLUSTER,
        "--pod",
        WEB,
        "--max",
        "4",
        "-o",
        "json",
    ]);
    assert_eq!(r["shapes"][0]["count"], 4);
    assert_eq!(r["maxReached"], true);
    assert!(r["shapes"][0]["stopped"].is_null());
}

#[test]
fn table_names_the_stop_reason_per_node() {
    let out = rkube(&["capacity", "--cluster", CLUSTER, "--pod", WEB]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("0/3 nodes are available: 3 Insufficient cpu."),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("node-b") && l.contains("NodeResourcesFit: Insufficient cpu")),
        "{text}"
    );
}

#[test]
fn bad_shapes_are_usage_errors() {
    for (args, needle) in [
        (vec!["--pod", "examples/capacity/web.yaml:0"], "ratio"),
        (vec!["--pod", CLUSTER], "exactly one Pod"),
        (
            vec!["--pod", "examples/capacity/missing.yaml"],
            "missing.yaml",
        ),
    ] {
        let mut all = vec!["capacity", "--cluster", CLUSTER];
        all.extend(args);
        let out = rkube(&all);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{all:?}: {err}");
        assert!(err.contains(needle), "{all:?}: {err}");
        assert!(out.stdout.is_empty());
    }
}

/// cluster-capacity's own README example, cluster and shape written here
/// from its description: 4 nodes of 2 CPUs / 4 GB, a 150m / 100Mi pod. Its
/// documented output is 52 instances, 13 on each node, and every node
/// failing with "Insufficient cpu".
#[test]
fn cluster_capacity_readme_example_gives_its_documented_answer() {
    let dir = "examples/capacity/cluster-capacity-readme";
    let v = json(&[
        "capacity",
        "--cluster",
        &format!("{dir}/cluster.yaml"),
        "--pod",
        &format!("{dir}/small-pod.yaml"),
        "-o",
        "json",
    ]);
    let shape = &v["shapes"][0];
    assert_eq!(shape["count"], 52, "{v:#}");
    let expected: Vec<(String, u64)> = (1..=4).map(|i| (format!("kube-node-{i}"), 13)).collect();
    assert_eq!(per_node(shape), expected);
    for (node, plugin, reasons) in stop_plugins(shape) {
        assert_eq!(
            (plugin.as_str(), reasons.as_str()),
            ("NodeResourcesFit", "Insufficient cpu"),
            "{node}"
        );
    }
    assert!(
        shape["stopped"]["message"]
            .as_str()
            .unwrap()
            .starts_with("0/4 nodes are available: 4 Insufficient cpu."),
        "{v:#}"
    );
}
