//! The pod-resources API with a real client: `hack/podresources` (Go,
//! built from `k8s.io/kubelet`'s generated client) lists through node-1's
//! `<root-dir>/pod-resources/kubelet.sock` every pod the node runs, with
//! its containers, and gets one of them by name.

use std::path::Path;
use std::process::Command;

use super::{hack, text, Cluster};

/// Builds the client (Go's build cache keeps it warm) into `dir`.
fn client(dir: &Path) -> std::path::PathBuf {
    let out = dir.join("podresources-client");
    let o = Command::new("go")
        .args(["build", "-trimpath", "-o"])
        .arg(&out)
        .arg(".")
        .current_dir(hack("podresources"))
        .output()
        .expect("run go build");
    assert!(
        o.status.success(),
        "building hack/podresources: {}",
        text(&o)
    );
    out
}

pub fn check(c: &Cluster, dir: &Path) {
    let bin = client(dir);
    let socket = dir.join("n1/kubelet/pod-resources/kubelet.sock");
    let call = |args: &[&str]| -> serde_json::Value {
        let o = Command::new(&bin)
            .arg("--socket")
            .arg(&socket)
            .args(args)
            .output()
            .expect("run the pod-resources client");
        assert!(o.status.success(), "podresources {args:?}: {}", text(&o));
        serde_json::from_slice(&o.stdout).expect("the client's JSON")
    };
    let running = c.ok(&[
        "get",
        "pods",
        "-A",
        "--field-selector=spec.nodeName=node-1,status.phase=Running",
        "-o",
        "jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name}/{.spec.containers[*].name}/{.metadata.deletionTimestamp}{\"\\n\"}{end}",
    ]);
    // pods already being deleted are left out (the kubelet's active pods)
    let running: String = running
        .lines()
        .filter_map(|l| l.rsplit_once('/'))
        .filter(|(_, deleted)| deleted.is_empty())
        .map(|(pod, _)| format!("{pod}\n"))
        .collect();
    assert!(!running.trim().is_empty(), "no pod runs on node-1");
    let list = call(&["list"]);
    let listed = list["podResources"].as_array().cloned().unwrap_or_default();
    for line in running.lines() {
        let mut it = line.splitn(3, '/');
        let (ns, name, containers) = (it.next().unwrap(), it.next().unwrap(), it.next().unwrap());
        let pod = listed
            .iter()
            .find(|p| p["namespace"] == ns && p["name"] == name)
            .unwrap_or_else(|| panic!("{ns}/{name} not in the pod-resources list: {list}"));
        let names: Vec<&str> = pod["containers"]
            .as_array()
            .map(|cs| cs.iter().filter_map(|c| c["name"].as_str()).collect())
            .unwrap_or_default();
        for want in containers.split_whitespace() {
            assert!(
                names.contains(&want),
                "{ns}/{name}: {want} not in {names:?}"
            );
        }
    }
    let (ns, name) = {
        let mut it = running.lines().next().unwrap().splitn(3, '/');
        (
            it.next().unwrap().to_string(),
            it.next().unwrap().to_string(),
        )
    };
    let got = call(&["get", &ns, &name]);
    assert_eq!(got["podResources"]["name"], name.as_str(), "{got}");
    // nothing allocatable without devices, CPU or memory managers
    let alloc = call(&["allocatable"]);
    assert!(
        alloc.get("devices").is_none() && alloc.get("cpuIds").is_none(),
        "{alloc}"
    );
    let o = Command::new(&bin)
        .arg("--socket")
        .arg(&socket)
        .args(["get", "default", "no-such-pod"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o).contains("pod no-such-pod in namespace default not found"),
        "{}",
        text(&o)
    );
}
