//! Score weights as upstream's NewFramework computes them: 0 → 1, explicit
//! `score` entries win over `multiPoint`, and a negative weight makes the
//! overflow check fail the way Go's wrapping int64 arithmetic does.

use rkube_framework::Framework;

fn build(plugins_yaml: &str) -> Result<Framework, String> {
    let text = format!(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: default-scheduler\n  plugins:\n{plugins_yaml}"
    );
    let cfg = rkube_config::load_str("c.yaml", &text).map_err(|e| e.to_string())?;
    Framework::new(&cfg.profiles[0], 0, &rkube_plugins::in_tree()).map_err(|e| e.0)
}

#[test]
fn weights() {
    let fw = build("    multiPoint:\n      enabled:\n      - {name: ImageLocality, weight: 0}\n")
        .unwrap();
    assert_eq!(fw.weight("ImageLocality"), 1);
    assert_eq!(fw.weight("TaintToleration"), 3);
    let fw = build("    score:\n      enabled:\n      - {name: TaintToleration}\n").unwrap();
    assert_eq!(
        fw.weight("TaintToleration"),
        1,
        "an explicit score entry without weight resets it"
    );
    let err = build("    score:\n      enabled:\n      - {name: ImageLocality, weight: -5}\n      - {name: TaintToleration, weight: 1}\n").unwrap_err();
    assert!(
        err.contains("total score of Score plugins could overflow"),
        "{err}"
    );
}
