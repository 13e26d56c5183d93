//! The conformance generator's in-place resizes change decisions, so the
//! differential runs (CI's fixed seeds) compare upstream's way of counting
//! a pod mid-resize (the larger of its spec's and its status's requests,
//! the spec left out when the resize is infeasible) with rkube's: in some
//! cases the same cluster with the pods' status removed gives other
//! feasible nodes, and in some only other scores.

use rkube_conformance::gen;
use rkube_model::load::{build, parse_documents};
use serde_json::Value;

fn explain(cluster: &Value, pod: &str) -> Value {
    let text = serde_json::to_string(cluster).unwrap();
    let c = build(&parse_documents("gen.json", &text).unwrap(), &mut |_| {
        Ok(false)
    })
    .unwrap();
    let e = rkube_sim::explain(&c, &rkube_config::default_config(), pod, 0).unwrap();
    serde_json::to_value(&e).unwrap()
}

fn feasible(v: &Value) -> Vec<(String, bool)> {
    v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["name"].as_str().unwrap().to_string(),
                n["feasible"] == true,
            )
        })
        .collect()
}

#[test]
fn resizes_change_feasibility_and_scores() {
    let (mut resized, mut feasibility, mut scores) = (0, 0, 0);
    // CI's fixed seeds 1 and 2 (`hack/conformance --seed S --count 300`).
    let ci = |s: u64| (0..300).map(move |i| s * 1_000_003 + i);
    for seed in ci(1).chain(ci(2)) {
        let case = gen::case(seed);
        let mut stripped = case.cluster.clone();
        let mut any = false;
        for item in stripped["items"].as_array_mut().unwrap() {
            // Only the resize generator writes container statuses.
            if item["kind"] == "Pod" && item["status"]["containerStatuses"].is_array() {
                if let Some(o) = item.as_object_mut() {
                    any |= o.remove("status").is_some();
                }
            }
        }
        if !any {
            continue;
        }
        resized += 1;
        let (with, without) = (
            explain(&case.cluster, &case.pod),
            explain(&stripped, &case.pod),
        );
        if feasible(&with) != feasible(&without) {
            feasibility += 1;
        } else if with["nodes"] != without["nodes"] {
            scores += 1;
        }
    }
    assert!(resized >= 60, "{resized} cases with resizes");
    assert!(
        feasibility >= 3,
        "resizes changed feasible nodes in {feasibility} of {resized} cases"
    );
    assert!(
        scores >= 3,
        "resizes changed only scores in {scores} of {resized} cases"
    );
}
