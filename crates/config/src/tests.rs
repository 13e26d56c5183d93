use super::*;

const HEAD: &str = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n";

fn load(body: &str) -> Result<KubeSchedulerConfiguration, ConfigError> {
    load_str("c.yaml", &format!("{HEAD}{body}"))
}

fn names(set: &PluginSet) -> Vec<(String, Option<i32>)> {
    set.enabled
        .iter()
        .map(|p| (p.name.clone(), p.weight))
        .collect()
}

#[test]
fn defaults_match_upstream() {
    let cfg = load("").unwrap();
    assert_eq!(cfg.parallelism, Some(16));
    assert_eq!(cfg.percentage_of_nodes_to_score, Some(0));
    assert_eq!(cfg.pod_initial_backoff_seconds, Some(1));
    assert_eq!(cfg.pod_max_backoff_seconds, Some(10));
    let prof = &cfg.profiles[0];
    assert_eq!(prof.scheduler_name.as_deref(), Some("default-scheduler"));
    let mp = names(&prof.plugins.as_ref().unwrap().multi_point);
    let weight = |n: &str| mp.iter().find(|(x, _)| x == n).unwrap().1;
    assert_eq!(weight("TaintToleration"), Some(3));
    assert_eq!(weight("NodeAffinity"), Some(2));
    assert_eq!(weight("PodTopologySpread"), Some(2));
    assert_eq!(weight("InterPodAffinity"), Some(2));
    assert_eq!(weight("NodeResourcesFit"), Some(1));
    assert_eq!(weight("NodeResourcesBalancedAllocation"), Some(1));
    assert_eq!(weight("ImageLocality"), Some(1));
    assert_eq!(mp.len(), 20);
    // Default args are filled in for every plugin with args, sorted by name.
    let cfgs: Vec<&str> = prof.plugin_config.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        cfgs,
        [
            "DefaultPreemption",
            "DynamicResources",
            "InterPodAffinity",
            "NodeAffinity",
            "NodeResourcesBalancedAllocation",
            "NodeResourcesFit",
            "PodTopologySpread",
            "VolumeBinding"
        ]
    );
    let fit = prof.plugin_args("NodeResourcesFit");
    assert_eq!(fit["scoringStrategy"]["type"], "LeastAllocated");
    assert_eq!(
        prof.plugin_args("InterPodAffinity")["hardPodAffinityWeight"],
        1
    );
}

#[test]
fn multipoint_weight_zero_replaces_in_place() {
    let cfg = load(
        "profiles:\n- schedulerName: default-scheduler\n  plugins:\n    multiPoint:\n      enabled:\n      - name: ImageLocality\n        weight: 0\n",
    )
    .unwrap();
    let mp = names(&cfg.profiles[0].plugins.as_ref().unwrap().multi_point);
    let pos = mp.iter().position(|(n, _)| n == "ImageLocality").unwrap();
    assert_eq!(pos, 17, "stays at its default position");
    assert_eq!(mp[pos].1, Some(0));
    assert_eq!(mp.len(), 20);
}

#[test]
fn merge_plugin_set_cases() {
    // Cases from upstream's TestMergePlugins.
    let d = PluginSet {
        enabled: vec![
            Plugin {
                name: "DefaultPlugin1".into(),
                weight: None,
            },
            Plugin {
                name: "DefaultPlugin2".into(),
                weight: None,
            },
        ],
        disabled: vec![],
    };
    let c = PluginSet {
        enabled: vec![Plugin {
            name: "CustomPlugin".into(),
            weight: None,
        }],
        disabled: vec![Plugin {
            name: "DefaultPlugin1".into(),
            weight: None,
        }],
    };
    let m = defaults::merge_plugin_set(&d, &c);
    assert_eq!(
        names(&m),
        [
            ("DefaultPlugin2".into(), None),
            ("CustomPlugin".into(), None)
        ]
    );
    let star = PluginSet {
        enabled: vec![Plugin {
            name: "DefaultPlugin2".into(),
            weight: Some(2),
        }],
        disabled: vec![Plugin {
            name: "*".into(),
            weight: None,
        }],
    };
    let m = defaults::merge_plugin_set(&d, &star);
    assert_eq!(names(&m), [("DefaultPlugin2".into(), Some(2))]);
    let reorder = PluginSet {
        enabled: vec![
            Plugin {
                name: "DefaultPlugin2".into(),
                weight: Some(2),
            },
            Plugin {
                name: "DefaultPlugin1".into(),
                weight: None,
            },
        ],
        disabled: vec![],
    };
    let m = defaults::merge_plugin_set(&d, &reorder);
    assert_eq!(
        names(&m),
        [
            ("DefaultPlugin1".into(), None),
            ("DefaultPlugin2".into(), Some(2))
        ]
    );
}

#[test]
fn rejects_removed_versions_and_unknown_fields() {
    let e = load_str(
        "old.yaml",
        "apiVersion: kubescheduler.config.k8s.io/v1beta1\nkind: KubeSchedulerConfiguration\n",
    )
    .unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.starts_with("old.yaml: apiVersion: kubescheduler.config.k8s.io/v1beta1 was removed"),
        "{msg}"
    );
    assert!(
        msg.contains("use apiVersion: kubescheduler.config.k8s.io/v1"),
        "{msg}"
    );

    let e = load("profiles:\n- schedulerName: x\n  plugins:\n    score:\n      disabld: []\n")
        .unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("profiles[0].plugins.score"), "{msg}");
    assert!(msg.contains("unknown field `disabld`"), "{msg}");
}

#[test]
fn validation_messages() {
    let e = load("percentageOfNodesToScore: 150\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        "c.yaml: percentageOfNodesToScore: Invalid value: 150: not in valid range [0-100]"
    );
    let e = load("profiles:\n- schedulerName: a\n- schedulerName: a\n").unwrap_err();
    assert!(
        e.to_string()
            .contains("profiles[1].schedulerName: Duplicate value"),
        "{e}"
    );
    let e = load("podInitialBackoffSeconds: 20\n").unwrap_err();
    assert!(e.to_string().contains("podMaxBackoffSeconds: Invalid value: 10: must be greater than or equal to PodInitialBackoffSeconds"), "{e}");
    let e = load(
        "profiles:\n- schedulerName: a\n  pluginConfig:\n  - name: InterPodAffinity\n    args:\n      hardPodAffinityWeight: 101\n",
    )
    .unwrap_err();
    assert!(e.to_string().contains("profiles[0].pluginConfig[0].args.hardPodAffinityWeight: Invalid value: 101: not in valid range [0, 100]"), "{e}");
    let e = load(
        "profiles:\n- schedulerName: a\n  pluginConfig:\n  - name: DefaultPreemption\n    args:\n      minCandidateNodesPercentage: 0\n      minCandidateNodesAbsolute: 0\n",
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("cannot be zero at the same time"),
        "{e}"
    );
    let dra = |args: &str| {
        load(&format!("profiles:\n- schedulerName: a\n  pluginConfig:\n  - name: DynamicResources\n    args: {{{args}}}\n"))
    };
    let e = dra("bindingTimeout: 500ms").unwrap_err();
    assert!(e.to_string().contains("profiles[0].pluginConfig[0].args.bindingTimeout: Invalid value: \"500ms\": must be at least 1 second"), "{e}");
    let e = dra("filterTimeout: -1s").unwrap_err();
    assert!(
        e.to_string()
            .contains("args.filterTimeout: Invalid value: \"-1s\": must be zero or positive"),
        "{e}"
    );
    assert!(dra("bindingTimeout: 1s, filterTimeout: 0s").is_ok());
    let e = load("profiles:\n- schedulerName: a\n  plugins:\n    filter:\n      enabled:\n      - name: EBSLimits\n").unwrap_err();
    assert!(e.to_string().contains("profiles[0].plugins.filter.enabled[0]: Invalid value: EBSLimits: was invalid in version"), "{e}");
}

#[test]
fn fit_args_validation() {
    let mut a: args::NodeResourcesFitArgs = args::decode(
        &serde_json::json!({"scoringStrategy": {"type": "Bogus", "resources": [{"name": "cpu", "weight": 101}]}}),
        "args",
    )
    .unwrap();
    let e = validate::validate_fit_args(&a, "args")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("args.scoringStrategy.type: Unsupported value: \"Bogus\""),
        "{e}"
    );
    assert!(
        e.contains("resource weight of cpu not in valid range (0, 100]"),
        "{e}"
    );
    a.scoring_strategy = None;
    assert!(validate::validate_fit_args(&a, "args").is_err());
}

#[test]
fn rejects_duplicate_fields_as_strict_decoding_does() {
    let msg = load("percentageOfNodesToScore: 10\npercentageOfNodesToScore: 50\n")
        .unwrap_err()
        .to_string();
    assert_eq!(
        msg,
        "c.yaml: percentageOfNodesToScore: strict decoding error: yaml: unmarshal errors: key \"percentageOfNodesToScore\" already set in map"
    );
    let msg = load("profiles:\n- schedulerName: a\n  schedulerName: b\n")
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("profiles[0].schedulerName: strict decoding error"),
        "{msg}"
    );
}

#[test]
fn huge_backoff_seconds_are_accepted_as_upstream_does() {
    // kube-scheduler validates only > 0 and max >= initial; the queue caps
    // what a Go duration cannot hold (see rkube-scheduler's queue tests).
    let cfg = load("podInitialBackoffSeconds: 9223372036854775807\npodMaxBackoffSeconds: 9223372036854775807\n")
        .unwrap();
    assert_eq!(cfg.pod_initial_backoff_seconds, Some(i64::MAX));
    let msg = load("podInitialBackoffSeconds: 0\n")
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("podInitialBackoffSeconds: Invalid value: 0: must be greater than 0"),
        "{msg}"
    );
}

#[test]
fn durations_out_of_go_range_are_refused_not_panics() {
    let msg =
        load("leaderElection:\n  leaderElect: false\n  leaseDuration: 99999999999999999999s\n")
            .unwrap_err()
            .to_string();
    assert!(
        msg.contains("leaderElection.leaseDuration: Invalid value: \"99999999999999999999s\": time: invalid duration"),
        "{msg}"
    );
}
