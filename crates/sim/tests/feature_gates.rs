//! `--feature-gates OpportunisticBatching=false` reaches the simulator: with
//! PodTopologySpread's default constraints cleared (so that batching
//! applies), identical replicas are placed on batch hints with the gate on
//! and never with it off.

use rkube_model::load::{build, parse_documents};

const CONFIG: &str = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: default-scheduler\n  pluginConfig:\n  - name: PodTopologySpread\n    args: {defaultingType: List, defaultConstraints: []}\n";

fn cluster() -> rkube_model::Cluster {
    let mut text = String::from("apiVersion: v1\nkind: List\nitems:\n");
    for n in 0..4 {
        text.push_str(&format!("- {{apiVersion: v1, kind: Node, metadata: {{name: n{n}}}, status: {{allocatable: {{cpu: '8', memory: 16Gi, pods: '110'}}}}}}\n"));
    }
    for p in 0..12 {
        text.push_str(&format!("- {{apiVersion: v1, kind: Pod, metadata: {{name: r{p:02}, namespace: default}}, spec: {{containers: [{{name: c, image: app, resources: {{requests: {{cpu: 500m, memory: 1Gi}}}}}}]}}}}\n"));
    }
    build(&parse_documents("t.yaml", &text).unwrap(), &mut |_| {
        Ok(false)
    })
    .unwrap()
}

fn batched(disable: bool) -> (u64, usize) {
    let dir = std::env::temp_dir().join(format!("rkube-gates-{}-{disable}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("config.yaml");
    std::fs::write(&file, CONFIG).unwrap();
    let mut cfg = rkube_sim::load::load_config(Some(&file)).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    cfg.disable_opportunistic_batching = disable;
    let opts = rkube_sim::SimulateOptions {
        seed: 0,
        explain: false,
        progress: None,
    };
    let r = rkube_sim::simulate(&cluster(), &cfg, &opts).unwrap();
    (r.batched_pods, r.placements.len())
}

#[test]
fn the_gate_turns_batching_off_in_the_simulator() {
    let (on, placed_on) = batched(false);
    let (off, placed_off) = batched(true);
    assert_eq!((placed_on, placed_off), (12, 12));
    assert!(
        on > 0,
        "replicas are placed on batch hints with the gate on"
    );
    assert_eq!(off, 0, "and never with it off");
}
