//! `plugins/noderesources/balanced_allocation_test.go` (v1.37: the score
//! compares balance with and without the pod, on actual requests;
//! best-effort pods are skipped in PreScore).

use rkube_framework::Code;
use rkube_model::{Node, Pod};
use serde_json::{json, Value};

use crate::common::*;

const GPU: &str = "nvidia.com/gpu";

fn cpu_only(c: &str) -> Vec<(&str, &str)> {
    vec![("cpu", c)]
}
fn cpu_mem_gpu<'a>(c: &'a str, m: &'a str, g: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![("cpu", c), ("memory", m), (GPU, g)]
}

fn args(resources: &[(&str, i64)]) -> Value {
    json!({"resources": resources.iter().map(|(n, w)| json!({"name": n, "weight": w})).collect::<Vec<_>>()})
}

#[test]
fn test_node_resources_balanced_allocation() {
    let default_set = args(&[("cpu", 1), ("memory", 1)]);
    let gpu_set = args(&[("cpu", 1), ("memory", 1), (GPU, 1)]);
    let p_3000_5000 = || {
        pod()
            .req(&cpu_mem("1000m", "2000"))
            .req(&cpu_mem("2000m", "3000"))
            .obj()
    };
    let existing_std = || {
        vec![
            pod()
                .node("node1")
                .req(&cpu_only("1000m"))
                .req(&cpu_only("2000m"))
                .obj(),
            pod()
                .node("node2")
                .req(&cpu_mem("1000m", "2000"))
                .req(&cpu_mem("2000m", "3000"))
                .obj(),
        ]
    };
    // (name, pod, nodes, existing, want scores, args, run PreScore, want PreScore code)
    type Case = (
        &'static str,
        Pod,
        Vec<Node>,
        Vec<Pod>,
        Vec<i64>,
        Value,
        bool,
        Code,
    );
    let cases: Vec<Case> = vec![
        (
            "nothing scheduled, nothing requested, skip in PreScore",
            pod().obj(),
            vec![make_node("node1", 4000, 10000, &[]), make_node("node2", 4000, 10000, &[])],
            vec![],
            vec![],
            default_set.clone(),
            true,
            Code::Skip,
        ),
        (
            "nothing scheduled, resources requested, differently sized nodes",
            p_3000_5000(),
            vec![make_node("node1", 4000, 10000, &[]), make_node("node2", 6000, 10000, &[])],
            vec![],
            vec![68, 75],
            default_set.clone(),
            true,
            Code::Success,
        ),
        (
            "resources requested, pods scheduled with resources",
            p_3000_5000(),
            vec![make_node("node1", 10000, 20000, &[]), make_node("node2", 10000, 20000, &[])],
            existing_std(),
            vec![73, 74],
            default_set.clone(),
            true,
            Code::Success,
        ),
        (
            "resources requested, pods scheduled with resources, differently sized nodes",
            p_3000_5000(),
            vec![make_node("node1", 10000, 20000, &[]), make_node("node2", 10000, 50000, &[])],
            existing_std(),
            vec![73, 70],
            default_set.clone(),
            true,
            Code::Success,
        ),
        (
            "resources requested, pods scheduled with resources, nodes to reach min/max score",
            pod().req(&[("memory", "2000")]).req(&[("memory", "3000")]).obj(),
            vec![make_node("node1", 3000, 5000, &[]), make_node("node2", 3000, 5000, &[])],
            vec![pod().node("node1").req(&cpu_only("1000m")).req(&cpu_only("2000m")).obj()],
            vec![100, 50],
            default_set.clone(),
            true,
            Code::Success,
        ),
        (
            "requested resources at node capacity",
            pod().req(&cpu_only("1000m")).req(&cpu_only("2000m")).obj(),
            vec![make_node("node1", 6000, 10000, &[]), make_node("node2", 6000, 10000, &[])],
            existing_std(),
            vec![62, 62],
            default_set.clone(),
            true,
            Code::Success,
        ),
        (
            "scalar resource is included in the score computation if pod requests the scalar resource",
            pod().req(&cpu_mem_gpu("0", "0", "1")).obj(),
            vec![make_node("node1", 3500, 40000, &[(GPU, 8)]), make_node("node2", 3500, 40000, &[(GPU, 8)])],
            vec![
                pod()
                    .node("node1")
                    .req(&cpu_mem("1000m", "2000"))
                    .req(&cpu_mem_gpu("2000m", "3000", "3"))
                    .obj(),
                pod()
                    .node("node2")
                    .req(&cpu_mem("1000m", "2000"))
                    .req(&cpu_mem("2000m", "3000"))
                    .obj(),
            ],
            vec![75, 76],
            gpu_set.clone(),
            true,
            Code::Success,
        ),
        (
            "scalar resource is not included in the score computation if pod doesn't request the scalar resource",
            p_3000_5000(),
            vec![make_node("node1", 3500, 40000, &[(GPU, 8)]), make_node("node2", 3500, 40000, &[])],
            vec![],
            vec![56, 56],
            gpu_set,
            true,
            Code::Success,
        ),
        (
            "resources requested, pods scheduled with resources if PreScore not called",
            p_3000_5000(),
            vec![make_node("node1", 10000, 20000, &[]), make_node("node2", 10000, 20000, &[])],
            existing_std(),
            vec![73, 74],
            default_set,
            false,
            Code::Success,
        ),
        // Skipped: "include DRA resource on a node for balanced resource
        // allocation" (+ "if PreScore not called"): DRA-backed extended resources.
    ];
    let mut f = Failures::new();
    for (name, p, nodes, existing, want, args, run_pre_score, want_pre) in cases {
        let pl = rkube_plugins::noderesources::balanced_allocation::new(
            &args,
            "NodeResourcesBalancedAllocationArgs",
        )
        .expect("plugin builds");
        let snap = snapshot(nodes, existing);
        let run = score(pl.as_ref(), &p, &snap, None, run_pre_score);
        f.check(name, "prescore code", run.pre_score.code, want_pre);
        if want_pre == Code::Skip {
            continue;
        }
        f.check(
            name,
            "score codes",
            run.codes(),
            vec![Code::Success; snap.len()],
        );
        f.check(name, "scores", run.raw_scores(), want);
    }
    f.finish();
}
