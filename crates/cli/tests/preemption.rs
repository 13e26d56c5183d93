//! `rkube simulate` on examples/preemption: a high-priority pending pod
//! evicts a lower-priority pod and is placed; a low-priority pending pod
//! cannot preempt and keeps upstream's FailedScheduling message.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn simulate(extra: &[&str]) -> Value {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut args = vec![
        "simulate",
        "--cluster",
        "examples/preemption/cluster.yaml",
        "-o",
        "json",
    ];
    args.extend_from_slice(extra);
    let out = Command::new(env!("CARGO_BIN_EXE_rkube"))
        .args(&args)
        .current_dir(root)
        .output()
        .expect("run rkube");
    assert!(
        out.status.success(),
        "rkube failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("valid JSON")
}

#[test]
fn preemptor_evicts_victim_and_is_placed() {
    let v = simulate(&[]);
    let preemptions = v["preemptions"].as_array().expect("preemptions array");
    assert_eq!(preemptions.len(), 1, "{v:#}");
    assert_eq!(preemptions[0]["preemptor"], "shop/payments");
    assert_eq!(preemptions[0]["node"], "node-a");
    assert_eq!(
        preemptions[0]["victims"],
        serde_json::json!(["jobs/batch-new"])
    );

    let placements = v["placements"].as_array().unwrap();
    let payments = placements
        .iter()
        .find(|p| p["pod"] == "shop/payments")
        .unwrap();
    assert_eq!(payments["node"], "node-a");
    assert_eq!(payments["message"], "");

    let report = placements
        .iter()
        .find(|p| p["pod"] == "jobs/report")
        .unwrap();
    assert!(report["node"].is_null());
    assert_eq!(
        report["message"],
        "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
    );

    // batch-new is gone from node-a; payments took its room.
    let node_a = v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "node-a")
        .unwrap();
    assert_eq!(node_a["pods"], 2);
    assert_eq!(node_a["requestedMilliCpu"], 4000);

    assert_eq!(v["summary"]["scheduled"], 1);
    assert_eq!(v["summary"]["unschedulable"], 1);
    assert_eq!(v["summary"]["evicted"], 0);
    assert_eq!(v["summary"]["preemptions"], 1);
}

#[test]
fn preemption_is_the_same_for_every_seed() {
    let a = simulate(&["--seed", "1"]);
    let b = simulate(&["--seed", "987654321"]);
    assert_eq!(a["preemptions"], b["preemptions"]);
    assert_eq!(a["placements"], b["placements"]);
}
