//! `rkube replay` on `examples/replay/`: the ImageLocality example's four
//! mysql replicas, recorded as kube-scheduler's defaults bound them (all on
//! node02, the node with the image). Replayed under the defaults, every
//! binding is reproduced; with ImageLocality disabled, the replicas spread
//! over every node.

mod common;
use common::{json, rkube};

const FROM: &str = "examples/replay";
const DISABLE: &str = "examples/image-locality/config-disable-imagelocality.yaml";

#[test]
fn the_same_configuration_reproduces_every_binding() {
    let v = json(&["replay", "--from", FROM, "-o", "json"]);
    assert_eq!(v["changes"], 8);
    assert_eq!(v["summary"]["decisions"], 4);
    assert_eq!(v["summary"]["same"], 4, "{v:#}");
    for d in v["decisions"].as_array().unwrap() {
        assert_eq!(d["recordedNode"], "node02");
        assert_eq!(d["replayNode"], "node02");
    }
    let out = rkube(&["replay", "--from", FROM]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("4 pods decided: 4 as recorded"), "{text}");
}

#[test]
fn a_configuration_change_plays_out_over_the_history() {
    let v = json(&["replay", "--from", FROM, "--config", DISABLE, "-o", "json"]);
    let replayed: Vec<&str> = v["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["replayNode"].as_str().unwrap())
        .collect();
    // The first replica: node02 and node03 tie without ImageLocality, and a
    // tie is resolved as recorded. The others follow LeastAllocated and
    // BalancedAllocation as `simulate` does from that state.
    assert_eq!(replayed[0], "node02", "{v:#}");
    let distinct: std::collections::BTreeSet<&str> = replayed.iter().copied().collect();
    assert_eq!(distinct.len(), 3, "spread over every node: {replayed:?}");
    assert_eq!(v["summary"]["moved"], 3);
    let out = rkube(&["replay", "--from", FROM, "--config", DISABLE]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("RECORDED  REPLAY"), "{text}");
}

#[test]
fn a_missing_or_broken_recording_is_a_usage_error() {
    let out = rkube(&["replay", "--from", "examples/no-such-recording"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("examples/no-such-recording/base.json"),
        "{err}"
    );
    let out = rkube(&["replay", "--from", FROM, "-o", "html"]);
    assert_eq!(out.status.code(), Some(2));
}
