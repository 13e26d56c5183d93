//! The DRA part of the conformance generator reaches every outcome of the
//! DynamicResources plugin, so that the differential runs (CI's fixed
//! seeds) compare each against upstream: nodes where the claims are
//! allocated, nodes where they cannot be, allocated claims unavailable on
//! a node, PreFilter rejections (a missing class), allocator errors that
//! end the cycle, and PostFilter's deallocation of an idle claim.

use std::collections::BTreeMap;

use rkube_conformance::gen;
use rkube_model::load::{build, parse_documents};

#[test]
fn the_generator_reaches_every_dynamic_resources_outcome() {
    let cfg = rkube_config::default_config();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut dra_cases = 0;
    // CI's fixed seeds 1 and 2 (`hack/conformance --seed S --count 300`).
    let ci = |s: u64| (0..300).map(move |i| s * 1_000_003 + i);
    for seed in ci(1).chain(ci(2)) {
        let case = gen::case(seed);
        let text = serde_json::to_string(&case.cluster).unwrap();
        let c = build(&parse_documents("gen.json", &text).unwrap(), &mut |_| {
            Ok(false)
        })
        .unwrap();
        if c.dra.is_empty() {
            continue;
        }
        dra_cases += 1;
        let e = match rkube_sim::explain(&c, &cfg, &case.pod, 0) {
            Ok(e) => e,
            Err(err) => {
                *seen
                    .entry(format!(
                        "error: {}",
                        err.to_string().split(':').next().unwrap_or("")
                    ))
                    .or_default() += 1;
                continue;
            }
        };
        let v = serde_json::to_value(&e).unwrap();
        if v["message"]
            .as_str()
            .is_some_and(|m| m.contains("deallocation of ResourceClaim completed"))
        {
            *seen.entry("PostFilter deallocation".into()).or_default() += 1;
        }
        if v["error"].is_string() {
            *seen.entry("scheduling error".into()).or_default() += 1;
        }
        for n in v["nodes"].as_array().unwrap() {
            for f in n["filters"].as_array().unwrap() {
                if f["plugin"] == "DynamicResources" {
                    let key = match f["reasons"].as_array().and_then(|r| r.first()) {
                        Some(r) => {
                            let r = r.as_str().unwrap_or("");
                            if r.contains("does not exist") {
                                "class does not exist".to_string()
                            } else {
                                r.to_string()
                            }
                        }
                        None => f["code"].as_str().unwrap_or("").to_string(),
                    };
                    *seen.entry(key).or_default() += 1;
                }
            }
        }
    }
    eprintln!("{dra_cases} DRA cases: {seen:#?}");
    assert!(
        dra_cases >= 120,
        "about a third of the cases carry DRA objects"
    );
    for want in [
        "Success",
        "cannot allocate all claims",
        "resourceclaim not available on the node",
        "class does not exist",
        "PostFilter deallocation",
        "scheduling error",
    ] {
        assert!(
            seen.get(want).copied().unwrap_or(0) > 0,
            "no {want:?} in {seen:?}"
        );
    }
}
