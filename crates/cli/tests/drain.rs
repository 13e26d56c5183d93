//! `rkube drain` end to end, on hand-made clusters whose outcome hard
//! constraints force: budgets that allow nothing, topology spread over
//! zones, required anti-affinity with one spare node, kubectl's filters.

mod common;
use common::{json, rkube};

use std::path::{Path, PathBuf};

use serde_json::Value;

/// Writes a cluster file for one test (named after it) and returns its path.
fn cluster(test: &str, items: &[String]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rkube-drain-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("cluster.yaml");
    let body: String = items.iter().map(|i| format!("- {i}\n")).collect();
    std::fs::write(&path, format!("apiVersion: v1\nkind: List\nitems:\n{body}")).unwrap();
    path
}

/// A 4-CPU / 8 GiB node in `zone`.
fn node(name: &str, zone: &str) -> String {
    format!(
        "{{apiVersion: v1, kind: Node, metadata: {{name: {name}, labels: {{kubernetes.io/hostname: {name}, topology.kubernetes.io/zone: {zone}}}}}, status: {{allocatable: {{cpu: '4', memory: 8Gi, pods: '110'}}}}}}"
    )
}

/// A bound 1-CPU pod in namespace `d` labelled `app`, owned by `owner`
/// (`Kind/name`, or "" for none), with extra `spec` fields.
fn pod(name: &str, app: &str, node: &str, owner: &str, spec: &str) -> String {
    let owners = match owner.split_once('/') {
        Some((kind, o)) => format!(
            ", ownerReferences: [{{apiVersion: apps/v1, kind: {kind}, name: {o}, uid: uid-{o}, controller: true}}]"
        ),
        None => String::new(),
    };
    format!(
        "{{apiVersion: v1, kind: Pod, metadata: {{name: {name}, namespace: d, labels: {{app: {app}}}{owners}}}, spec: {{nodeName: {node}, containers: [{{name: c, image: x, resources: {{requests: {{cpu: '1'}}}}}}]{spec}}}}}"
    )
}

/// Bound replicas `(name, node)` of one workload, as [`pod`] writes them.
fn replicas(app: &str, owner: &str, spec: &str, on: &[(&str, &str)]) -> Vec<String> {
    on.iter()
        .map(|(name, node)| pod(name, app, node, owner, spec))
        .collect()
}

/// A PodDisruptionBudget over `app=<app>` with one `spec` field.
fn pdb(name: &str, app: &str, field: &str) -> String {
    format!(
        "{{apiVersion: policy/v1, kind: PodDisruptionBudget, metadata: {{name: {name}, namespace: d}}, spec: {{{field}, selector: {{matchLabels: {{app: {app}}}}}}}}}"
    )
}

fn drain(path: &Path, extra: &[&str]) -> Value {
    let p = path.to_str().unwrap();
    let mut args = vec!["drain", "--cluster", p, "-o", "json"];
    args.extend_from_slice(extra);
    json(&args)
}

fn strings(v: &Value, field: &str) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x[field].as_str().unwrap().to_string())
        .collect()
}

fn pods_on(r: &Value, phase: &str, node: &str) -> Option<u64> {
    r[phase]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == node)
        .map(|n| n["pods"].as_u64().unwrap())
}

/// `maxUnavailable: 0` and no status: the disruption controller would
/// allow 0 disruptions, so the eviction is refused with a 429 and the pod
/// stays on its (cordoned) node.
#[test]
fn budget_with_no_room_blocks_the_eviction() {
    let path = cluster(
        "no-room",
        &[
            node("n1", "z"),
            node("n2", "z"),
            pod("web-a", "web", "n1", "ReplicaSet/web-1", ""),
            pdb("web-pdb", "web", "maxUnavailable: 0"),
        ],
    );
    let r = drain(&path, &["--node", "n1"]);
    assert_eq!(r["evicted"], serde_json::json!([]), "{r:#}");
    let blocked = &r["blocked"][0];
    assert_eq!(blocked["pod"], "d/web-a");
    assert_eq!(blocked["pdb"], "web-pdb");
    assert_eq!(
        blocked["message"],
        "Cannot evict pod as it would violate the pod's disruption budget."
    );
    assert_eq!(
        blocked["cause"],
        "The disruption budget web-pdb needs 1 healthy pods and has 1 currently"
    );
    assert_eq!(pods_on(&r, "nodesAfter", "n1"), Some(1));
    assert_eq!(r["drainedNodes"][0]["drained"], false);
    assert_eq!(r["complete"], false);
    assert_eq!(r["summary"]["blocked"], 1);
}

/// One replica per zone with `maxSkew: 1` on zones (DoNotSchedule). The
/// cordoned zone-c node still counts as a domain with 0 replicas, so a
/// replacement in zone a or b would make the skew 2: it stays pending.
/// Deleted, zone c is no domain any more and the replacement fits.
#[test]
fn zone_spread_replacement_waits_for_the_cordoned_zone_unless_it_is_deleted() {
    let spread = ", topologySpreadConstraints: [{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: web}}}]";
    let on = [
        ("web-a", "node-a"),
        ("web-b", "node-b"),
        ("web-c", "node-c"),
    ];
    let mut items: Vec<String> = ["a", "b", "c"]
        .iter()
        .map(|z| node(&format!("node-{z}"), &format!("zone-{z}")))
        .collect();
    items.extend(replicas("web", "ReplicaSet/web-1", spread, &on));
    let path = cluster("spread", &items);
    let r = drain(&path, &["--node", "node-c"]);
    let e = &r["evicted"][0];
    assert_eq!(e["pod"], "d/web-c", "{r:#}");
    assert_eq!(e["fromNode"], "node-c");
    assert_eq!(e["node"], Value::Null);
    assert_eq!(
        e["message"],
        "0/3 nodes are available: 1 node(s) were unschedulable, 2 node(s) didn't match pod topology spread constraints. preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, 2 No preemption victims found for incoming pod."
    );
    assert_eq!(r["summary"]["pending"], 1);
    assert_eq!(r["drainedNodes"][0]["drained"], true);
    assert_eq!(r["drainedNodes"][0]["deleted"], false);

    let r = drain(&path, &["--node", "node-c", "--delete"]);
    let e = &r["evicted"][0];
    let landed = e["node"].as_str().unwrap_or_default();
    assert!(landed == "node-a" || landed == "node-b", "{r:#}");
    assert_eq!(e["message"], "");
    assert_eq!(r["drainedNodes"][0]["deleted"], true);
    assert_eq!(pods_on(&r, "nodesAfter", "node-c"), None);
    assert_eq!(pods_on(&r, "nodesBefore", "node-c"), Some(1));
    assert_eq!(r["complete"], true);
}

/// Three StatefulSet replicas with required anti-affinity on hostname, on
/// three of four nodes: the evicted replica can only go to the spare node,
/// under its own name.
#[test]
fn anti_affinity_statefulset_replica_moves_to_the_spare_node() {
    let anti = ", affinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: db}}}]}}";
    let on = [("db-0", "n1"), ("db-1", "n2"), ("db-2", "n3")];
    let mut items: Vec<String> = ["n1", "n2", "n3", "spare"]
        .iter()
        .map(|n| node(n, "z"))
        .collect();
    items.extend(replicas("db", "StatefulSet/db", anti, &on));
    let path = cluster("anti", &items);
    let r = drain(&path, &["--node", "n3"]);
    let e = &r["evicted"][0];
    assert_eq!(e["pod"], "d/db-2", "{r:#}");
    assert_eq!(e["replacement"], "d/db-2");
    assert_eq!(e["node"], "spare");
    assert_eq!(r["evicted"].as_array().unwrap().len(), 1);
    assert_eq!(pods_on(&r, "nodesAfter", "spare"), Some(1));
    assert_eq!(pods_on(&r, "nodesAfter", "n3"), Some(0));
}

/// kubectl's filters on one node: a DaemonSet pod, a bare pod, a pod with
/// an emptyDir volume and a ReplicaSet pod.
fn filters_cluster() -> PathBuf {
    cluster(
        "filters",
        &[
            node("n1", "z"),
            node("n2", "z"),
            pod("agent-n1", "agent", "n1", "DaemonSet/agent", ""),
            pod(
                "scratch-x",
                "scratch",
                "n1",
                "ReplicaSet/scratch-1",
                ", volumes: [{name: tmp, emptyDir: {}}]",
            ),
            pod("solo", "solo", "n1", "", ""),
            pod("web-x", "web", "n1", "ReplicaSet/web-1", ""),
        ],
    )
}

#[test]
fn any_refused_pod_means_nothing_is_evicted() {
    let path = filters_cluster();
    let r = drain(&path, &["--node", "n1"]);
    assert_eq!(
        strings(&r["refused"], "pod"),
        ["d/scratch-x", "d/solo"],
        "{r:#}"
    );
    assert_eq!(
        strings(&r["refused"], "message"),
        [
            "cannot delete Pods with local storage (use --delete-emptydir-data to override)",
            "cannot delete Pods that declare no controller (use --force to override)"
        ]
    );
    assert_eq!(r["evicted"], serde_json::json!([]));
    assert_eq!(r["drainedNodes"][0]["cordonedOnly"], true);
    assert_eq!(strings(&r["skipped"], "pod"), ["d/agent-n1"]);
    assert_eq!(
        strings(&r["skipped"], "reason"),
        ["ignored: DaemonSet-managed"]
    );
    assert_eq!(pods_on(&r, "nodesAfter", "n1"), Some(4));

    // --force lets the bare pod go, but the emptyDir pod still stops the drain.
    let r = drain(&path, &["--node", "n1", "--force"]);
    assert_eq!(strings(&r["refused"], "pod"), ["d/scratch-x"]);
    assert_eq!(r["evicted"], serde_json::json!([]));

    let out = rkube(&["drain", "--cluster", path.to_str().unwrap(), "--node", "n1"]);
    assert!(out.status.success());
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("cordoned only"), "{table}");
    assert!(
        table.contains("so it evicts nothing from their node"),
        "{table}"
    );
}

#[test]
fn forced_drain_deletes_the_bare_pod_and_keeps_the_daemonset_pod() {
    let path = filters_cluster();
    let r = drain(
        &path,
        &["--node", "n1", "--force", "--delete-emptydir-data"],
    );
    assert_eq!(r["refused"], serde_json::json!([]), "{r:#}");
    assert_eq!(strings(&r["evicted"], "pod"), ["d/scratch-x", "d/web-x"]);
    assert_eq!(strings(&r["evicted"], "node"), ["n2", "n2"]);
    assert!(r["evicted"][1]["replacement"]
        .as_str()
        .unwrap()
        .starts_with("d/web-1-"));
    assert_eq!(strings(&r["deletedNotRecreated"], "pod"), ["d/solo"]);
    assert_eq!(strings(&r["skipped"], "pod"), ["d/agent-n1"]);
    assert_eq!(pods_on(&r, "nodesAfter", "n1"), Some(1));
    assert_eq!(pods_on(&r, "nodesAfter", "n2"), Some(2));
    assert_eq!(r["complete"], true);

    // Deleting the node takes the DaemonSet pod with it.
    let r = drain(
        &path,
        &[
            "--node",
            "n1",
            "--force",
            "--delete-emptydir-data",
            "--delete",
        ],
    );
    assert_eq!(r["skipped"][0]["removedWithNode"], true);
    assert_eq!(pods_on(&r, "nodesAfter", "n1"), None);
}

/// `maxUnavailable: 1` over three replicas on the drained node: one
/// eviction at a time, each after the previous replacement is running.
#[test]
fn budget_retries_evict_the_replicas_one_after_another() {
    let on = [("web-a", "n1"), ("web-b", "n1"), ("web-c", "n1")];
    let mut items = vec![node("n1", "z"), node("n2", "z")];
    items.extend(replicas("web", "ReplicaSet/web-1", "", &on));
    items.push(pdb("web-pdb", "web", "maxUnavailable: 1"));
    let path = cluster("retry", &items);
    let r = drain(&path, &["--node", "n1"]);
    assert_eq!(r["blocked"], serde_json::json!([]), "{r:#}");
    assert_eq!(
        strings(&r["evicted"], "pod"),
        ["d/web-a", "d/web-b", "d/web-c"]
    );
    let attempts: Vec<u64> = r["evicted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["attempt"].as_u64().unwrap())
        .collect();
    assert_eq!(attempts, [1, 2, 3]);
    assert_eq!(strings(&r["evicted"], "node"), ["n2", "n2", "n2"]);
    assert_eq!(r["summary"]["rescheduled"], 3);
    assert_eq!(r["drainedNodes"][0]["drained"], true);
}

#[test]
fn unknown_node_is_an_input_error() {
    let out = rkube(&[
        "drain",
        "--cluster",
        "examples/drain/cluster.yaml",
        "--node",
        "node-z",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("node-z"), "{err}");
}

/// The example of the README: one replica rescheduled, the cache blocked.
#[test]
fn example_shape_and_outcome() {
    let r = json(&[
        "drain",
        "--cluster",
        "examples/drain/cluster.yaml",
        "--node",
        "node-c",
        "-o",
        "json",
    ]);
    for field in [
        "mode",
        "drainedNodes",
        "evicted",
        "skipped",
        "refused",
        "blocked",
        "deletedNotRecreated",
        "nodesBefore",
        "nodesAfter",
        "summary",
        "complete",
    ] {
        assert!(r.get(field).is_some(), "missing {field}: {r:#}");
    }
    for field in [
        "pod",
        "fromNode",
        "replacement",
        "node",
        "message",
        "attempt",
    ] {
        assert!(r["evicted"][0].get(field).is_some(), "evicted.{field}");
    }
    for field in ["evicted", "rescheduled", "pending", "blocked", "refused"] {
        assert!(r["summary"][field].is_u64(), "summary.{field}");
    }
    assert_eq!(strings(&r["evicted"], "pod"), ["shop/web-6b8f7-k2x9p"]);
    assert!(r["evicted"][0]["node"].is_string());
    assert_eq!(strings(&r["blocked"], "pod"), ["shop/cache-0"]);
    assert_eq!(strings(&r["blocked"], "pdb"), ["cache"]);
    assert_eq!(
        strings(&r["skipped"], "pod"),
        ["monitoring/node-exporter-c"]
    );
    assert_eq!(
        r["nodesBefore"][0].as_object().unwrap().len(),
        8,
        "compare's NodeUsage"
    );
}

#[test]
fn html_is_a_full_page() {
    let out = rkube(&[
        "drain",
        "--cluster",
        "examples/drain/cluster.yaml",
        "--node",
        "node-c",
        "-o",
        "html",
    ]);
    assert!(out.status.success());
    let html = String::from_utf8_lossy(&out.stdout);
    assert!(html.starts_with("<!DOCTYPE html>"), "{html}");
    assert!(html.trim_end().ends_with("</html>"));
    assert!(html.contains("<table class=\"evicted\">"));
    assert!(html.contains("data-pod=\"shop/cache-0\""));
    assert!(html.contains("data-phase=\"before\""));
}
