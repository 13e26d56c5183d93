//! `rkube scheduler` against a genuine kube-apiserver v1.37 (rkube-testcp),
//! as `system:kube-scheduler`: 20 fake nodes and 200 pods all get bound
//! without overcommitting any node; a pod too big for every node gets the
//! FailedScheduling event and PodScheduled condition `rkube explain`
//! computes, and is bound within seconds of a fitting node appearing; pods
//! of another schedulerName are left alone.
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
use rkube_testcp::ControlPlane;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const NODES: usize = 20;
const PODS: usize = 200;

async fn client(path: &std::path::Path) -> Client {
    let kc = kube::config::Kubeconfig::read_from(path).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    Client::try_from(cfg).unwrap()
}

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

async fn http_get(port: u16, path: &str) -> Option<String> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).await.ok()?;
    Some(out)
}

async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
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

/// The cluster as `kubectl get nodes,pods,namespaces -o yaml` would dump it,
/// explained by `rkube explain`.
async fn explain_message(admin: &Client, pod: &str) -> String {
    let mut items = Vec::new();
    for n in Api::<Node>::all(admin.clone())
        .list(&Default::default())
        .await
        .unwrap()
    {
        items.push(serde_json::to_value(n).unwrap());
    }
    for p in Api::<Pod>::all(admin.clone())
        .list(&Default::default())
        .await
        .unwrap()
    {
        items.push(serde_json::to_value(p).unwrap());
    }
    for ns in Api::<Namespace>::all(admin.clone())
        .list(&Default::default())
        .await
        .unwrap()
    {
        items.push(serde_json::to_value(ns).unwrap());
    }
    let dir = std::env::temp_dir().join(format!("rkube-live-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("cluster.json");
    std::fs::write(
        &file,
        serde_json::to_string(&json!({"apiVersion": "v1", "kind": "List", "items": items}))
            .unwrap(),
    )
    .unwrap();
    let cluster = rkube_sim::load::load_cluster(&file).unwrap();
    let e = rkube_sim::explain(&cluster, &rkube_config::default_config(), pod, 0).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    e.message
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
    let opts = rkube_scheduler::options::parse(
        [
            "--kubeconfig",
            cp.scheduler_kubeconfig().to_str().unwrap(),
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            &format!("--secure-port={port}"),
            "--authorization-kubeconfig=/ignored",
        ]
        .map(String::from),
    )
    .unwrap();
    assert_eq!(opts.warnings.len(), 1);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let sched = tokio::spawn(rkube_scheduler::run(opts, async {
        let _ = stopped.await;
    }));

    wait_for("/readyz", Duration::from_secs(30), || async {
        http_get(port, "/readyz")
            .await
            .filter(|r| r.starts_with("HTTP/1.1 200") && r.ends_with("ok"))
    })
    .await;
    assert!(http_get(port, "/healthz")
        .await
        .unwrap()
        .starts_with("HTTP/1.1 200"));

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
    let expected = explain_message(&admin, "default/big").await;
    assert_eq!(note, expected);
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
    pods.create(&PostParams::default(), &vip).await.unwrap();
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

    let _ = stop.send(());
    sched.await.unwrap().unwrap();
}
