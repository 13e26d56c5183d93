//! End-to-end tests of the operator tools: `config check`, `compare`,
//! `completions`, `man`.

mod common;
use common::{rkube, root};

use serde_json::Value;

fn text(b: &[u8]) -> String {
    String::from_utf8(b.to_vec()).expect("UTF-8 output")
}

const WEIGHT_ZERO: &str = "examples/image-locality/config-weight-zero.yaml";
const DISABLE: &str = "examples/image-locality/config-disable-imagelocality.yaml";
const CLUSTER: &str = "examples/image-locality/cluster.yaml";

#[test]
fn config_check_weight_zero_warns_how_to_disable() {
    let out = rkube(&["config", "check", WEIGHT_ZERO]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(stdout, format!("{WEIGHT_ZERO}: valid (1 warning)\n"));
    assert!(
        stderr.starts_with("warning: profiles[0].plugins.multiPoint.enabled[0].weight: weight 0 is treated as 1 by kube-scheduler"),
        "{stderr}"
    );
    assert!(
        stderr.contains("  hint: to disable ImageLocality's scoring use `plugins.score.disabled: [{name: ImageLocality}]`"),
        "{stderr}"
    );

    // --quiet drops the warning, not the verdict.
    let out = rkube(&["config", "check", WEIGHT_ZERO, "--quiet"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("valid"));

    // JSON: the warning is in the array, nothing on stderr.
    let out = rkube(&["config", "check", WEIGHT_ZERO, "-o", "json"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stderr.is_empty());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["valid"], true);
    assert_eq!(v["errors"], Value::Array(vec![]));
    let w = v["warnings"].as_array().unwrap();
    assert_eq!(w.len(), 1);
    assert_eq!(
        w[0]["field"],
        "profiles[0].plugins.multiPoint.enabled[0].weight"
    );
    assert!(w[0]["hint"]
        .as_str()
        .unwrap()
        .contains("plugins.score.disabled"));
    assert!(v.get("config").is_none(), "only with --print-defaults");

    // The fix the hint describes checks clean.
    let out = rkube(&["config", "check", DISABLE]);
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!("{DISABLE}: valid (0 warnings)\n")
    );
}

#[test]
fn config_check_removed_plugin_exits_2_with_replacement() {
    let out = rkube(&["config", "check", "tests/bad-input/unknown-plugin.yaml"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(out.stdout.is_empty());
    assert!(
        stderr.contains("error: profiles[0].plugins.score.enabled[0].name: plugin \"NodeResourcesLeastAllocated\" does not exist"),
        "{stderr}"
    );
    assert!(
        stderr.contains("hint: NodeResourcesLeastAllocated was removed from kube-scheduler; use NodeResourcesFit with pluginConfig args scoringStrategy.type: LeastAllocated"),
        "{stderr}"
    );
    assert!(stderr.contains("invalid (1 error, 0 warnings)"), "{stderr}");

    let out = rkube(&[
        "config",
        "check",
        "tests/bad-input/unknown-plugin.yaml",
        "-o",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["valid"], false);
    assert_eq!(v["errors"].as_array().unwrap().len(), 1);
}

#[test]
fn config_check_removed_api_version_exits_2_with_migration() {
    let out = rkube(&["config", "check", "tests/bad-input/v1beta1.yaml"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(out.stdout.is_empty());
    assert!(
        stderr.contains("error: apiVersion: kubescheduler.config.k8s.io/v1beta1 was removed"),
        "{stderr}"
    );
    assert!(
        stderr.contains("hint: change apiVersion to kubescheduler.config.k8s.io/v1; nothing else in this file needs to change"),
        "{stderr}"
    );

    // A v1beta2 file that also uses a removed plugin: both hints.
    let dir = std::env::temp_dir().join(format!("rkube-tools-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("old.yaml");
    std::fs::write(
        &f,
        "apiVersion: kubescheduler.config.k8s.io/v1beta2\nkind: KubeSchedulerConfiguration\nprofiles:\n- plugins:\n    score:\n      enabled:\n      - {name: NodeResourcesMostAllocated, weight: 1}\n",
    )
    .unwrap();
    let out = rkube(&["config", "check", f.to_str().unwrap()]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("then fix the 1 error(s) listed after this one"),
        "{stderr}"
    );
    assert!(
        stderr.contains("scoringStrategy.type: MostAllocated"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

fn print_defaults(file: Option<&str>) -> String {
    let mut args = vec!["config", "check", "--print-defaults"];
    args.extend(file);
    let out = rkube(&args);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    text(&out.stdout)
}

#[test]
fn print_defaults_reloads_to_the_same_configuration() {
    let yaml = print_defaults(None);
    let reloaded = rkube_config::load_str("printed.yaml", &yaml).expect("printed defaults load");
    assert_eq!(reloaded, rkube_config::default_config());
    assert!(yaml.contains("multiPoint:") && yaml.contains("DefaultPreemption"));
    assert!(
        yaml.contains("scoringStrategy:"),
        "plugin args are defaulted too"
    );

    for file in [WEIGHT_ZERO, DISABLE] {
        let yaml = print_defaults(Some(file));
        let original = std::fs::read_to_string(root().join(file)).unwrap();
        let expected = rkube_config::load_str(file, &original).unwrap();
        let reloaded = rkube_config::load_str("printed.yaml", &yaml).unwrap();
        assert_eq!(reloaded, expected, "{file}");
    }
    let yaml = print_defaults(Some(DISABLE));
    assert!(
        yaml.contains("score:\n      disabled:\n      - name: ImageLocality"),
        "{yaml}"
    );

    // JSON carries the same configuration under "config".
    let out = rkube(&["config", "check", "--print-defaults", "-o", "json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let cfg: rkube_config::KubeSchedulerConfiguration =
        serde_json::from_value(v["config"].clone()).unwrap();
    assert_eq!(cfg, rkube_config::default_config());
}

#[test]
fn compare_image_locality_default_versus_disabled() {
    let out = rkube(&[
        "compare",
        "--cluster",
        CLUSTER,
        "--config",
        DISABLE,
        "-o",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["a"]["config"], "<defaults>");
    assert_eq!(v["b"]["config"], DISABLE);
    let moved = v["moved"].as_array().unwrap();
    assert!(moved.len() >= 2, "{moved:?}");
    for m in moved {
        assert!(m["pod"]
            .as_str()
            .unwrap()
            .starts_with("test-5/mysql-server-"));
        assert_eq!(
            m["nodeA"], "node02",
            "all replicas pile on node02 by default"
        );
        assert_ne!(m["nodeB"], "node02");
        assert!(m["nodeB"].is_string());
    }
    let mysql = |side: &str| {
        v[side]["workloads"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["workload"] == "test-5/app=mysql-server")
            .unwrap_or_else(|| panic!("no mysql workload under {side}: {v}"))
            .clone()
    };
    let (a, b) = (mysql("a"), mysql("b"));
    assert_eq!(a["pods"], 4);
    assert_eq!(a["maxPerNode"], 4);
    assert_eq!(a["nodesUsed"], 1);
    assert_eq!(b["pods"], 4);
    assert!(b["maxPerNode"].as_u64().unwrap() <= 2, "{b}");
    assert_eq!(b["nodesUsed"], 3);
    for side in ["a", "b"] {
        assert_eq!(v[side]["unschedulable"], 0);
        assert_eq!(v[side]["scheduled"], 4);
        let nodes = v[side]["nodes"].as_array().unwrap();
        assert_eq!(nodes.len(), 3);
        let pods: u64 = nodes.iter().map(|n| n["pods"].as_u64().unwrap()).sum();
        assert_eq!(pods, 5, "4 replicas and the monitoring agent");
    }
    // Spreading lowers the per-node spread of pods and CPU.
    let sd = |side: &str, k: &str| v[side][k]["stddev"].as_f64().unwrap();
    assert!(sd("b", "podsPerNode") < sd("a", "podsPerNode"));
    assert!(sd("b", "cpuUtilization") < sd("a", "cpuUtilization"));
    let node02 = &v["a"]["nodes"][1];
    assert_eq!(node02["name"], "node02");
    assert_eq!(node02["cpuUtilization"], 0.125, "2 of 16 cores");

    // Two explicit configs: the same comparison (the weight-0 config is the default).
    let two = rkube(&[
        "compare",
        "--cluster",
        CLUSTER,
        "--config",
        WEIGHT_ZERO,
        "--config",
        DISABLE,
        "-o",
        "json",
    ]);
    assert_eq!(two.status.code(), Some(0));
    let w: Value = serde_json::from_slice(&two.stdout).unwrap();
    assert_eq!(w["moved"], v["moved"]);
    assert_eq!(w["a"]["config"], WEIGHT_ZERO);

    let table = rkube(&["compare", "--cluster", CLUSTER, "--config", DISABLE]);
    let s = text(&table.stdout);
    assert!(
        s.contains(&format!("{} pod(s) land elsewhere", moved.len())),
        "{s}"
    );
    assert!(s.contains("test-5/app=mysql-server"), "{s}");
    let row = s
        .lines()
        .find(|l| l.starts_with("test-5/app=mysql-server"))
        .unwrap();
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols[1..4], ["4", "1", "4"], "{row}");
}

#[test]
fn compare_rejects_bad_input_with_2() {
    let out = rkube(&[
        "compare",
        "--cluster",
        CLUSTER,
        "--config",
        DISABLE,
        "--config",
        DISABLE,
        "--config",
        DISABLE,
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("one or two --config"));
    let out = rkube(&[
        "compare",
        "--cluster",
        CLUSTER,
        "--config",
        "tests/bad-input/unknown-plugin.yaml",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
}

#[test]
fn completions_and_man_page() {
    for shell in ["bash", "zsh", "fish"] {
        let out = rkube(&["completions", shell]);
        assert_eq!(out.status.code(), Some(0));
        let s = text(&out.stdout);
        assert!(s.len() > 200, "{shell}: {s}");
        assert!(
            s.contains("simulate") && s.contains("compare") && s.contains("capacity"),
            "{shell}"
        );
        for what in [
            "drain",
            "replay",
            "--kubeconfig",
            "--watch",
            "--delete-emptydir-data",
        ] {
            assert!(s.contains(what), "{shell}: no {what}");
        }
    }
    let out = rkube(&["man"]);
    assert_eq!(out.status.code(), Some(0));
    let s = text(&out.stdout);
    assert!(s.contains(".TH rkube 1"), "{s}");
    assert!(s.contains("Exit status"), "{s}");

    let dir = std::env::temp_dir().join(format!("rkube-man-{}", std::process::id()));
    let out = rkube(&["man", "--out-dir", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    for page in [
        "rkube.1",
        "rkube-simulate.1",
        "rkube-compare.1",
        "rkube-capacity.1",
        "rkube-drain.1",
        "rkube-replay.1",
        "rkube-snapshot.1",
        "rkube-config-check.1",
    ] {
        assert!(dir.join(page).is_file(), "{page}");
    }
    std::fs::remove_dir_all(&dir).ok();

    let help = text(&rkube(&["--help"]).stdout);
    assert!(
        help.contains("Exit status:") && help.contains("2  invalid input"),
        "{help}"
    );
    let help = text(&rkube(&["config", "check", "--help"]).stdout);
    assert!(
        help.contains("--print-defaults") && help.contains("Exit status:"),
        "{help}"
    );
}
