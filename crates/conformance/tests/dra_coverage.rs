//! The DRA part of the conformance generator reaches every outcome of the
//! DynamicResources plugin, so that the differential runs (CI's fixed
//! seeds) compare each against upstream: nodes where the claims are
//! allocated, nodes where they cannot be, allocated claims unavailable on
//! a node, PreFilter rejections (a missing class), allocator errors that
//! end the cycle, PostFilter's deallocation of an idle claim, and extended
//! resources backed by DRA (served by devices, alone or with claims, or by
//! a device plugin), claims whose devices' binding conditions failed,
//! timed out, or hold, and devices a DeviceTaintRule keeps from a pod.

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
        if let Some(attached) = c.dra.claim("default", "attached") {
            // On the node it is allocated for, only its binding conditions
            // can make the claim unavailable.
            let home = &attached
                .allocation
                .as_ref()
                .unwrap()
                .node_selector
                .as_ref()
                .unwrap()
                .terms[0]
                .match_fields[0]
                .values[0];
            let n = v["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|n| n["name"] == home.as_str())
                .unwrap();
            let unavailable = n["filters"].as_array().unwrap().iter().any(|f| {
                f["plugin"] == "DynamicResources"
                    && f["reasons"][0] == "resourceclaim not available on the node"
            });
            let key = if unavailable {
                "binding conditions: claim unavailable"
            } else {
                "binding conditions: available"
            };
            *seen.entry(key.into()).or_default() += 1;
        }
        if v["error"].is_string() {
            *seen.entry("scheduling error".into()).or_default() += 1;
        }
        if !c.dra.taint_rules.is_empty() {
            // The same case without its DeviceTaintRules: a node's verdict
            // differs when a rule's taint decided it.
            let mut without = case.cluster.clone();
            without["items"]
                .as_array_mut()
                .unwrap()
                .retain(|i| i["kind"] != "DeviceTaintRule");
            let text = serde_json::to_string(&without).unwrap();
            let c2 = build(&parse_documents("gen.json", &text).unwrap(), &mut |_| {
                Ok(false)
            })
            .unwrap();
            let feasible = |v: &serde_json::Value| -> Vec<bool> {
                v["nodes"]
                    .as_array()
                    .map(|ns| ns.iter().map(|n| n["feasible"] == true).collect())
                    .unwrap_or_default()
            };
            if let Ok(e2) = rkube_sim::explain(&c2, &cfg, &case.pod, 0) {
                if feasible(&serde_json::to_value(&e2).unwrap()) != feasible(&v) {
                    *seen.entry("DeviceTaintRule decides".into()).or_default() += 1;
                }
            }
        }
        let pod = c.pods.iter().find(|p| p.key() == case.pod).unwrap();
        let ext = pod
            .requests
            .scalar
            .keys()
            .find(|k| c.dra.extended_resource_class(k).is_some());
        for n in v["nodes"].as_array().unwrap() {
            if let (Some(ext), true) = (ext, n["feasible"] == true) {
                let node = c
                    .nodes
                    .iter()
                    .find(|x| n["name"] == x.name.as_str())
                    .unwrap();
                if case
                    .config
                    .as_ref()
                    .is_some_and(|c| c.to_string().contains(ext.as_str()))
                {
                    *seen.entry("extended resource: scored".into()).or_default() += 1;
                }
                let key = if node.allocatable.scalar(ext) > 0 {
                    "extended resource: device plugin node"
                } else if pod.resource_claims.is_empty() {
                    "extended resource: devices allocated"
                } else {
                    "extended resource: devices allocated with claims"
                };
                *seen.entry(key.into()).or_default() += 1;
            }
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
        "extended resource: device plugin node",
        "extended resource: devices allocated",
        "extended resource: devices allocated with claims",
        "extended resource: scored",
        "binding conditions: claim unavailable",
        "binding conditions: available",
        "DeviceTaintRule decides",
    ] {
        assert!(
            seen.get(want).copied().unwrap_or(0) > 0,
            "no {want:?} in {seen:?}"
        );
    }
}
