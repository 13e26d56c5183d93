//! The field report this project started from, on real nodes: an image
//! larger than ImageLocality's lower threshold, pulled from the registry by
//! one node only, draws the pending replicas there through the node's own
//! `status.images`; with the plugin disabled by `score.disabled`, its score
//! is gone and the replicas spread.

use std::process::Command;
use std::time::Duration;

use super::{text, Cluster};

/// A one-layer image `name` of about `mib` MiB (busybox's `sleep` and a
/// file of zeros), imported into node-1's containerd.
const BUILD: &str = r#"
set -euo pipefail
sock="$1" name="$2" mib="$3"
w="$(mktemp -d)"; trap 'rm -rf "$w"' EXIT
mkdir -p "$w/fs/bin" "$w/fs/data" "$w/l/blobs/sha256"
cp /bin/busybox "$w/fs/bin/busybox"; ln -s busybox "$w/fs/bin/sh"; ln -s busybox "$w/fs/bin/sleep"
head -c "${mib}M" /dev/zero > "$w/fs/data/blob"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$w/fs" -cf "$w/layer" .
blob() { local d; d=$(sha256sum "$1" | cut -d' ' -f1); mv "$1" "$w/l/blobs/sha256/$d"; echo "$d"; }
ls=$(stat -c %s "$w/layer"); ld=$(blob "$w/layer")
jq -cn --arg d "sha256:$ld" '{architecture:"amd64",os:"linux",config:{Cmd:["sleep","3600"]},rootfs:{type:"layers",diff_ids:[$d]}}' > "$w/c"
cs=$(stat -c %s "$w/c"); cd=$(blob "$w/c")
jq -cn --arg c "sha256:$cd" --argjson cs "$cs" --arg l "sha256:$ld" --argjson ls "$ls" '{schemaVersion:2,mediaType:"application/vnd.oci.image.manifest.v1+json",config:{mediaType:"application/vnd.oci.image.config.v1+json",digest:$c,size:$cs},layers:[{mediaType:"application/vnd.oci.image.layer.v1.tar",digest:$l,size:$ls}]}' > "$w/m"
ms=$(stat -c %s "$w/m"); md=$(blob "$w/m")
echo '{"imageLayoutVersion":"1.0.0"}' > "$w/l/oci-layout"
jq -cn --arg d "sha256:$md" --argjson s "$ms" --arg r "$name" '{schemaVersion:2,manifests:[{mediaType:"application/vnd.oci.image.manifest.v1+json",digest:$d,size:$s,annotations:{"io.containerd.image.name":$r}}]}' > "$w/l/index.json"
tar -C "$w/l" -cf "$w/img.tar" oci-layout index.json blobs
ctr --address "$sock" -n k8s.io images import "$w/img.tar" >/dev/null
"#;

const PROFILE: &str = "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: field-report
";

fn rkube(args: &[&str]) -> serde_json::Value {
    let o = Command::new(env!("CARGO_BIN_EXE_rkube"))
        .args(args)
        .args(["-o", "json", "-q"])
        .output()
        .expect("run rkube");
    assert!(o.status.success(), "rkube {args:?}: {}", text(&o));
    serde_json::from_slice(&o.stdout).expect("rkube's JSON")
}

/// ImageLocality's score per node in `rkube explain`'s JSON (None: the
/// plugin did not score).
fn image_locality(explain: &serde_json::Value, node: &str) -> Option<i64> {
    let n = explain["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == node)
        .expect("the node in explain");
    n["scores"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["plugin"] == "ImageLocality")
        .map(|s| s["normalized"].as_i64().unwrap())
}

fn placements(sim: &serde_json::Value) -> Vec<String> {
    sim["placements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["node"].as_str().unwrap_or("").to_string())
        .collect()
}

pub fn check(c: &Cluster, work: &std::path::Path) {
    // 500 MiB on one node of two: half of it counts, ~24 points.
    let o = Command::new("bash")
        .args(["-c", BUILD, "build"])
        .arg(c.dir.join("n1/c/containerd.sock"))
        .args(["rkube.local/field-report:1", "500"])
        .output()
        .unwrap();
    assert!(o.status.success(), "building the image: {}", text(&o));
    let image = c.push(false, "rkube.local/field-report:1");
    // Only node-2 gets it, by pulling it.
    c.ctr(1, &["images", "rm", "rkube.local/field-report:1"]);
    c.apply(&format!(
        "apiVersion: v1
kind: Pod
metadata: {{name: field-report-0}}
spec:
  nodeName: node-2
  terminationGracePeriodSeconds: 1
  containers: [{{name: app, image: \"{image}\"}}]
"
    ));
    c.wait_running("field-report-0", Duration::from_secs(120));
    // The kubelet lists its images every 30 s; the node status carries them.
    c.until(
        "node-2's status.images lists the image",
        Duration::from_secs(90),
        || {
            let names = c.ok(&[
                "get",
                "node",
                "node-2",
                "-o",
                "jsonpath={.status.images[*].names}",
            ]);
            names.contains(&image).then_some(())
        },
    );
    let names = c.ok(&[
        "get",
        "node",
        "node-1",
        "-o",
        "jsonpath={.status.images[*].names}",
    ]);
    assert!(!names.contains(&image), "node-1 must not have it: {names}");

    // Four replicas pending for a profile the live scheduler does not serve.
    for i in 1..=4 {
        c.apply(&format!(
            "apiVersion: v1
kind: Pod
metadata: {{name: field-report-{i}, labels: {{app: field-report}}}}
spec:
  schedulerName: field-report
  containers: [{{name: app, image: \"{image}\"}}]
"
        ));
    }
    let on = work.join("field-report.yaml");
    std::fs::write(&on, PROFILE).unwrap();
    let off = work.join("field-report-off.yaml");
    std::fs::write(
        &off,
        format!("{PROFILE}  plugins:\n    score:\n      disabled:\n      - name: ImageLocality\n"),
    )
    .unwrap();
    let kc = c.kubeconfig.as_str();
    let on = on.to_str().unwrap();
    let off = off.to_str().unwrap();

    let explain = |config: &str| {
        rkube(&[
            "explain",
            "--kubeconfig",
            kc,
            "--pod",
            "default/field-report-1",
            "--config",
            config,
        ])
    };
    let with = explain(on);
    let score = image_locality(&with, "node-2").expect("ImageLocality scores");
    assert!(score > 0, "node-2's ImageLocality score: {score}");
    assert_eq!(image_locality(&with, "node-1"), Some(0));
    let all = placements(&rkube(&["simulate", "--kubeconfig", kc, "--config", on]));
    assert_eq!(all, vec!["node-2"; 4], "with ImageLocality");

    let without = explain(off);
    assert_eq!(image_locality(&without, "node-2"), None);
    let spread = placements(&rkube(&["simulate", "--kubeconfig", kc, "--config", off]));
    assert!(
        spread.iter().any(|n| n == "node-1") && spread.iter().any(|n| n == "node-2"),
        "without ImageLocality the replicas spread: {spread:?}"
    );
}
