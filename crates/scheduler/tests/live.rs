//! `rkube scheduler` against a genuine kube-apiserver v1.37 (rkube-testcp),
//! as `system:kube-scheduler`: 20 fake nodes and 200 pods all get bound
//! without overcommitting any node; a pod too big for every node gets the
//! FailedScheduling event and PodScheduled condition `rkube explain`
//! computes, and is bound within seconds of a fitting node appearing; pods
//! of another schedulerName are left alone.
//!
//! Every placement is replayed against upstream: in decision order, the
//! oracle (upstream's framework, from hack/k8s) must rank rkube's node among
//! its top-scoring nodes given the earlier placements. The scheduler runs
//! with leader election on (its Lease), serves HTTPS, and its `/metrics`
//! need a token allowed to read them.
//!
//! Needs the binaries from hack/build-k8s, so it is ignored by default;
//! hack/test runs it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use rkube_model::Quantity;
use rkube_testcp::support::{client, wait_for};
use rkube_testcp::ControlPlane;
use serde_json::json;

const NODES: usize = 20;
const PODS: usize = 200;

async fn create_node(nodes: &Api<Node>, name: &str, cpu: &str, memory: &str) {
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let status = json!({"status": {
        "capacity": {"cpu": cpu, "memory": memory, "pods": "110"},
        "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "message": "fake node", "lastHeartbeatTime": now, "lastTransitionTime": now}],
    }});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

fn pod(name: &str, cpu: &str, memory: &str, scheduler: Option<&str>) -> Pod {
    let mut spec = json!({
        "automountServiceAccountToken": false,
        // Fake nodes send no heartbeats: after the grace period the node
        // lifecycle controller taints them; the test pods do not care.
        "tolerations": [{"operator": "Exists"}],
        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
    });
    if let Some(s) = scheduler {
        spec["schedulerName"] = json!(s);
    }
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "load"}},
        "spec": spec,
    }))
    .unwrap()
}

/// GET over HTTPS with the real curl (the secure port's certificate is
/// self-signed): (status code, body).
fn https_get(port: u16, path: &str, token: Option<&str>) -> Option<(u16, String)> {
    let mut cmd = std::process::Command::new("curl");
    cmd.args(["-sk", "--max-time", "5", "-w", "\n%{http_code}"]);
    if let Some(t) = token {
        cmd.arg("-H").arg(format!("Authorization: Bearer {t}"));
    }
    let out = cmd
        .arg(format!("https://127.0.0.1:{port}{path}"))
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n')?;
    Some((code.trim().parse().ok()?, body.to_string()))
}

fn repo_root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Upstream's answer for a pod: (topNodes, message).
fn oracle(cluster: &std::path::Path, pod: &str) -> (Vec<String>, String) {
    let bin = repo_root().join("hack/k8s/_output/bin/oracle");
    let out = std::process::Command::new(&bin)
        .args(["explain", "--cluster"])
        .arg(cluster)
        .args(["--pod", pod])
        .output()
        .expect("running the oracle");
    assert!(
        out.status.success(),
        "oracle failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let top = v["topNodes"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|n| n.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    (top, v["message"].as_str().unwrap_or("").to_string())
}

fn requests(p: &Pod) -> (i64, i64) {
    let mut cpu = 0;
    let mut mem = 0;
    for c in &p.spec.as_ref().unwrap().containers {
        let r = c.resources.as_ref().unwrap().requests.as_ref().unwrap();
        cpu += Quantity::parse(&r["cpu"].0).unwrap().milli_value();
        mem += Quantity::parse(&r["memory"].0).unwrap().value();
    }
    (cpu, mem)
}

async fn events_for(events: &Api<Event>, pod: &str, reason: &str) -> Vec<Event> {
    events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason)
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(pod)
        })
        .collect()
}

/// Nodes, pods and namespaces as `kubectl get -o json` dumps them.
async fn dump(admin: &Client) -> (Vec<serde_json::Value>, Vec<Pod>, Vec<serde_json::Value>) {
    let mut nodes = Vec::new();
    for n in Api::<Node>::all(admin.clone())
        .list(&Default::default())
        .await
        .unwrap()
    {
        nodes.push(serde_json::to_value(n).unwrap());
    }
    let pods = Api::<Pod>::all(admin.clone())
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    let mut namespaces = Vec::new();
    for ns in Api::<Namespace>::all(admin.clone())
        .list(&Default::default())
        .await
        .unwrap()
    {
        namespaces.push(serde_json::to_value(ns).unwrap());
    }
    (nodes, pods, namespaces)
}

fn write_list(file: &std::path::Path, items: Vec<serde_json::Value>) {
    std::fs::write(
        file,
        serde_json::to_string(&json!({"apiVersion": "v1", "kind": "List", "items": items}))
            .unwrap(),
    )
    .unwrap();
}

/// The cluster as dumped now, explained by `rkube explain` and by the
/// upstream oracle: (rkube's message, upstream's message).
async fn explain_messages(admin: &Client, pod: &str) -> (String, String) {
    let (mut items, pods, namespaces) = dump(admin).await;
    items.extend(pods.into_iter().map(|p| serde_json::to_value(p).unwrap()));
    items.extend(namespaces);
    let dir = std::env::temp_dir().join(format!("rkube-live-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("cluster.json");
    write_list(&file, items);
    let cluster = rkube_sim::load::load_cluster(&file).unwrap();
    let e = rkube_sim::explain(&cluster, &rkube_config::default_config(), pod, 0).unwrap();
    let (_, upstream) = oracle(&file, pod);
    let _ = std::fs::remove_dir_all(&dir);
    (e.message, upstream)
}

/// Replays the decisions in order against the oracle: before decision k,
/// the pods of decisions 0..k are bound where rkube put them and later
/// ones are absent; rkube's node must be among upstream's top-scoring
/// nodes. Returns how many were checked.
async fn replay_against_upstream(admin: &Client, decisions: &[rkube_scheduler::Decision]) -> usize {
    let (nodes, pods, namespaces) = dump(admin).await;
    let by_key: std::collections::HashMap<String, &Pod> = pods
        .iter()
        .map(|p| {
            (
                format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any()),
                p,
            )
        })
        .collect();
    let dir = std::env::temp_dir().join(format!("rkube-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("cluster.json");
    let mut checked = 0;
    for (k, d) in decisions.iter().enumerate() {
        let mut items = nodes.clone();
        items.extend(namespaces.iter().cloned());
        for (j, earlier) in decisions[..=k].iter().enumerate() {
            let mut p = serde_json::to_value(by_key[&earlier.pod]).unwrap();
            p["spec"]["nodeName"] = if j == k {
                json!(null)
            } else {
                json!(earlier.node)
            };
            if j == k {
                p["status"] = json!({"phase": "Pending"});
            }
            items.push(p);
        }
        write_list(&file, items);
        let (top, message) = oracle(&file, &d.pod);
        assert!(
            top.contains(&d.node),
            "decision {k}: rkube put {} on {}, upstream's top-scoring nodes are {top:?} ({message})",
            d.pod,
            d.node
        );
        checked += 1;
    }
    let _ = std::fs::remove_dir_all(&dir);
    checked
}

#[test]
#[ignore = "needs hack/build-k8s; run by hack/test"]
fn schedules_200_pods_on_a_real_api_server() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("warn,rkube_scheduler=info")
        .with_test_writer()
        .with_ansi(false)
        .try_init();
    let cp = ControlPlane::start().expect("control plane starts");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(scenario(&cp));
}

async fn scenario(cp: &ControlPlane) {
    let admin = client(cp.kubeconfig()).await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cert_dir = std::env::temp_dir().join(format!("rkube-live-certs-{}", std::process::id()));
    let opts = rkube_scheduler::options::parse(
        [
            "--kubeconfig",
            cp.scheduler_kubeconfig().to_str().unwrap(),
            "--bind-address=127.0.0.1",
            &format!("--secure-port={port}"),
            &format!("--cert-dir={}", cert_dir.display()),
            "--profiling=false",
        ]
        .map(String::from),
    )
    .unwrap();
    assert_eq!(opts.warnings.len(), 1);
    let decisions = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let hooks = rkube_scheduler::Hooks {
        on_decision: Some(Box::new({
            let decisions = decisions.clone();
            move |d: &rkube_scheduler::Decision| decisions.lock().unwrap().push(d.clone())
        })),
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let sched = tokio::spawn(rkube_scheduler::run_with(
        opts,
        async {
            let _ = stopped.await;
        },
        hooks,
    ));

    wait_for("/readyz", Duration::from_secs(30), || async {
        https_get(port, "/readyz", None).filter(|(code, body)| *code == 200 && body == "ok")
    })
    .await;
    assert_eq!(https_get(port, "/healthz", None).unwrap().0, 200);
    assert!(cert_dir.join("kube-scheduler.crt").exists());
    // Leader election: the scheduler holds kube-system/kube-scheduler.
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(admin.clone(), "kube-system");
    let lease = wait_for("the leader lease", Duration::from_secs(20), || async {
        leases.get_opt("kube-scheduler").await.ok().flatten()
    })
    .await;
    let spec = lease.spec.unwrap();
    assert!(spec.holder_identity.unwrap_or_default().contains('_'));
    assert_eq!(spec.lease_duration_seconds, Some(15));

    let nodes: Api<Node> = Api::all(admin.clone());
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    let events: Api<Event> = Api::namespaced(admin.clone(), "default");
    for i in 0..NODES {
        create_node(&nodes, &format!("node-{i:02}"), "4", "8Gi").await;
    }
    let mut specs: Vec<Pod> = (0..PODS)
        .map(|i| {
            pod(
                &format!("load-{i:03}"),
                &format!("{}m", 150 + (i % 7) * 50),
                &format!("{}Mi", 256 + (i % 3) * 256),
                None,
            )
        })
        .collect();
    for i in 0..3 {
        specs.push(pod(
            &format!("other-{i}"),
            "100m",
            "64Mi",
            Some("other-scheduler"),
        ));
    }
    let started = Instant::now();
    futures::stream::iter(specs)
        .for_each_concurrent(16, |p| {
            let pods = pods.clone();
            async move {
                pods.create(&PostParams::default(), &p).await.unwrap();
            }
        })
        .await;

    // Every pod bound, none overcommitting its node.
    let bound = wait_for("200 bound pods", Duration::from_secs(120), || async {
        let list = pods
            .list(&ListParams::default().labels("app=load"))
            .await
            .ok()?;
        let bound: Vec<Pod> = list
            .items
            .into_iter()
            .filter(|p| p.name_any().starts_with("load-"))
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
            .collect();
        (bound.len() == PODS).then_some(bound)
    })
    .await;
    eprintln!("{PODS} pods bound in {:?}", started.elapsed());
    let mut per_node: BTreeMap<String, (i64, i64, usize)> = BTreeMap::new();
    for p in &bound {
        let node = p.spec.as_ref().unwrap().node_name.clone().unwrap();
        let (cpu, mem) = requests(p);
        let e = per_node.entry(node).or_default();
        e.0 += cpu;
        e.1 += mem;
        e.2 += 1;
    }
    for (node, (cpu, mem, n)) in &per_node {
        assert!(node.starts_with("node-"), "{node}");
        assert!(*cpu <= 4000, "{node}: {cpu}m CPU requested of 4000m");
        assert!(*mem <= 8 << 30, "{node}: {mem} bytes requested of 8Gi");
        assert!(*n <= 110, "{node}: {n} pods");
    }
    eprintln!("placements: {per_node:?}");

    // Every placement is one upstream could have made.
    let decided: Vec<rkube_scheduler::Decision> = decisions
        .lock()
        .unwrap()
        .iter()
        .filter(|d| d.pod.starts_with("default/load-"))
        .cloned()
        .collect();
    assert_eq!(decided.len(), PODS, "one decision per pod");
    let t = Instant::now();
    let checked = replay_against_upstream(&admin, &decided).await;
    assert_eq!(checked, PODS);
    eprintln!(
        "{checked} placements replayed against upstream in {:?}",
        t.elapsed()
    );

    // What users see: the Scheduled event, as kube-scheduler writes it.
    let first = &bound[0];
    let node = first.spec.as_ref().unwrap().node_name.clone().unwrap();
    let ev = wait_for("Scheduled event", Duration::from_secs(10), || async {
        events_for(&events, &first.name_any(), "Scheduled")
            .await
            .into_iter()
            .next()
    })
    .await;
    assert_eq!(
        ev.note.as_deref(),
        Some(
            format!(
                "Successfully assigned default/{} to {node}",
                first.name_any()
            )
            .as_str()
        )
    );
    assert_eq!(ev.type_.as_deref(), Some("Normal"));
    assert_eq!(ev.action.as_deref(), Some("Binding"));
    assert_eq!(
        ev.reporting_controller.as_deref(),
        Some("default-scheduler")
    );

    // A pod too big for every node: FailedScheduling with explain's message.
    pods.create(&PostParams::default(), &pod("big", "16", "1Gi", None))
        .await
        .unwrap();
    let failed = wait_for(
        "FailedScheduling event",
        Duration::from_secs(20),
        || async {
            events_for(&events, "big", "FailedScheduling")
                .await
                .into_iter()
                .next()
        },
    )
    .await;
    let note = failed.note.clone().unwrap();
    let (expected, upstream) = explain_messages(&admin, "default/big").await;
    assert_eq!(note, expected);
    assert_eq!(note, upstream, "the FailedScheduling message is upstream's");
    assert!(
        note.starts_with("0/20 nodes are available: 20 Insufficient cpu."),
        "{note}"
    );
    assert_eq!(failed.type_.as_deref(), Some("Warning"));
    assert_eq!(failed.action.as_deref(), Some("Scheduling"));
    let cond = wait_for("PodScheduled=False", Duration::from_secs(10), || async {
        let p = pods.get("big").await.ok()?;
        p.status?
            .conditions?
            .into_iter()
            .find(|c| c.type_ == "PodScheduled" && c.status == "False")
    })
    .await;
    assert_eq!(cond.reason.as_deref(), Some("Unschedulable"));
    assert_eq!(cond.message.as_deref(), Some(expected.as_str()));

    // A node it fits on appears: bound within seconds.
    let added = Instant::now();
    create_node(&nodes, "big-node", "32", "64Gi").await;
    let on = wait_for("big bound", Duration::from_secs(15), || async {
        pods.get("big").await.ok()?.spec?.node_name
    })
    .await;
    assert_eq!(on, "big-node");
    eprintln!("big bound {:?} after its node appeared", added.elapsed());

    // Pods of another scheduler are left alone.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for i in 0..3 {
        let name = format!("other-{i}");
        let p = pods.get(&name).await.unwrap();
        assert!(
            p.spec.as_ref().unwrap().node_name.is_none(),
            "{name} was bound"
        );
        assert!(events_for(&events, &name, "FailedScheduling")
            .await
            .is_empty());
        assert!(p
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .all(|c| c.type_ != "PodScheduled"));
    }

    // Preemption: a higher-priority pod that fits only once `big` is gone.
    let classes: Api<k8s_openapi::api::scheduling::v1::PriorityClass> = Api::all(admin.clone());
    classes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": "high"}, "value": 1000,
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let mut vip = pod("vip", "20", "1Gi", None);
    vip.spec.as_mut().unwrap().priority_class_name = Some("high".into());
    // The Priority admission plugin reads classes from its informer: right
    // after the create it may not know `high` yet (403 "no PriorityClass").
    wait_for("vip admitted", Duration::from_secs(20), || async {
        match pods.create(&PostParams::default(), &vip).await {
            Ok(_) => Some(()),
            Err(kube::Error::Api(e)) if e.code == 403 && e.message.contains("PriorityClass") => {
                None
            }
            Err(e) => panic!("creating vip: {e}"),
        }
    })
    .await;
    let nominated = wait_for("vip nominated", Duration::from_secs(20), || async {
        pods.get("vip").await.ok()?.status?.nominated_node_name
    })
    .await;
    assert_eq!(nominated, "big-node");
    // The victim is being deleted; no kubelet runs here, so finish the
    // graceful deletion as the kubelet would once its containers stopped.
    let victim = wait_for("victim terminating", Duration::from_secs(10), || async {
        pods.get("big")
            .await
            .ok()
            .filter(|p| p.metadata.deletion_timestamp.is_some())
    })
    .await;
    assert!(victim
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "DisruptionTarget"
            && c.reason.as_deref() == Some("PreemptionByScheduler")));
    pods.delete("big", &kube::api::DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    let on = wait_for("vip bound", Duration::from_secs(30), || async {
        pods.get("vip").await.ok()?.spec?.node_name
    })
    .await;
    assert_eq!(on, "big-node");
    assert!(
        pods.get_opt("big").await.unwrap().is_none(),
        "the victim is deleted"
    );
    let preempted = events_for(&events, "big", "Preempted").await;
    assert_eq!(preempted.len(), 1);
    assert!(events_for(&events, "vip", "FailedScheduling").await[0]
        .note
        .as_deref()
        .unwrap()
        .starts_with("0/21 nodes are available: 21 Insufficient cpu."),);

    // Metrics: upstream's names; a token allowed to get /metrics is needed.
    let (code, body) = https_get(port, "/metrics", None).unwrap();
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("system:anonymous"), "{body}");
    let token = metrics_token(cp);
    let (code, text) = https_get(port, "/metrics", Some(&token)).unwrap();
    assert_eq!(code, 200, "{text}");
    let scheduled = format!(
        "scheduler_schedule_attempts_total{{result=\"scheduled\",profile=\"default-scheduler\"}} {}",
        PODS + 2
    );
    for line in [
        scheduled.as_str(),
        "scheduler_preemption_attempts_total ",
        "scheduler_preemption_goroutines_execution_total{result=\"success\"} 1",
        "scheduler_preemption_execution_duration_seconds_count{preemptor=\"pod\",result=\"success\"} 1",
        "leader_election_master_status{name=\"kube-scheduler\"} 1",
        "scheduler_pending_pods{queue=\"active\"} 0",
        "scheduler_framework_extension_point_duration_seconds_count{extension_point=\"PreFilter\",status=\"Success\",profile=\"default-scheduler\"}",
        "scheduler_plugin_execution_duration_seconds_count{plugin=\"NodeResourcesFit\",extension_point=\"Filter\",status=\"Success\"}",
        "scheduler_framework_extension_point_duration_seconds_count{extension_point=\"Bind\",status=\"Success\",profile=\"default-scheduler\"}",
    ] {
        assert!(text.contains(line), "missing {line:?} in /metrics:\n{text}");
    }

    // VolumeLimitScaling, live: a CSIDriver with preventPodSchedulingIfMissing
    // keeps a pod with one of its volumes off every node until a CSINode
    // lists the driver; the new CSINode requeues the pod.
    const DRIVER: &str = "block.csi.example.com";
    let create = |kind: &'static str, v: serde_json::Value| {
        let admin = admin.clone();
        async move {
            let dyn_api = |plural: &str, group: &str, version: &str| {
                let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
                kube::api::ApiResource::from_gvk_with_plural(&gvk, plural)
            };
            let (ar, namespaced) = match kind {
                "CSIDriver" => (dyn_api("csidrivers", "storage.k8s.io", "v1"), false),
                "CSINode" => (dyn_api("csinodes", "storage.k8s.io", "v1"), false),
                "PersistentVolume" => (dyn_api("persistentvolumes", "", "v1"), false),
                _ => (dyn_api("persistentvolumeclaims", "", "v1"), true),
            };
            let api: Api<kube::api::DynamicObject> = if namespaced {
                Api::namespaced_with(admin, "default", &ar)
            } else {
                Api::all_with(admin, &ar)
            };
            api.create(&PostParams::default(), &serde_json::from_value(v).unwrap())
                .await
                .unwrap_or_else(|e| panic!("creating a {kind}: {e}"));
        }
    };
    create(
        "CSIDriver",
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
        "metadata": {"name": DRIVER}, "spec": {"preventPodSchedulingIfMissing": true}}),
    )
    .await;
    create(
        "PersistentVolume",
        json!({"apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": "csi-pv"},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
            "csi": {"driver": DRIVER, "volumeHandle": "vol-1"},
            "claimRef": {"namespace": "default", "name": "csi-claim"}}}),
    )
    .await;
    create(
        "PersistentVolumeClaim",
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "csi-claim", "namespace": "default",
            "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
        "spec": {"volumeName": "csi-pv", "accessModes": ["ReadWriteOnce"],
            "storageClassName": "", "resources": {"requests": {"storage": "1Gi"}}}}),
    )
    .await;
    // The scheduler's CSIDriver watch has no way to be waited on from
    // here; a quiet API server delivers the event well within this.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut user = pod("csi-user", "10m", "16Mi", None);
    user.spec.as_mut().unwrap().volumes = Some(vec![serde_json::from_value(json!(
        {"name": "data", "persistentVolumeClaim": {"claimName": "csi-claim"}}
    ))
    .unwrap()]);
    pods.create(&PostParams::default(), &user).await.unwrap();
    let refused = wait_for("csi-user refused", Duration::from_secs(20), || async {
        events_for(&events, "csi-user", "FailedScheduling")
            .await
            .into_iter()
            .find_map(|e| e.note)
    })
    .await;
    assert!(
        refused.starts_with(&format!(
            "0/21 nodes are available: 21 {DRIVER} CSI driver is not installed on the node."
        )),
        "{refused}"
    );
    create(
        "CSINode",
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
        "metadata": {"name": "node-05"},
        "spec": {"drivers": [{"name": DRIVER, "nodeID": "node-05"}]}}),
    )
    .await;
    let on = wait_for("csi-user bound", Duration::from_secs(30), || async {
        pods.get("csi-user").await.ok()?.spec?.node_name
    })
    .await;
    assert_eq!(
        on, "node-05",
        "the only node whose CSINode lists the driver"
    );

    // SIGTERM-like stop: the lease is released.
    let _ = stop.send(());
    sched.await.unwrap().unwrap();
    let spec = leases.get("kube-scheduler").await.unwrap().spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some(""), "lease released");
    let _ = std::fs::remove_dir_all(&cert_dir);
}

/// A ServiceAccount allowed to `get /metrics`, and a token for it.
fn metrics_token(cp: &ControlPlane) -> String {
    let manifest = r#"
apiVersion: v1
kind: ServiceAccount
metadata: {name: metrics-reader, namespace: default}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: metrics-reader}
rules: [{nonResourceURLs: ["/metrics"], verbs: ["get"]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: metrics-reader}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: metrics-reader}
subjects: [{kind: ServiceAccount, name: metrics-reader, namespace: default}]
"#;
    let file = cp.dir().join("metrics-reader.yaml");
    std::fs::write(&file, manifest).unwrap();
    let out = cp
        .kubectl(&["apply", "-f", file.to_str().unwrap()])
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = cp
        .kubectl(&["create", "token", "metrics-reader", "-n", "default"])
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}
