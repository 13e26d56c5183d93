//! Scale: `rkube kubelet --runtime sim` hosting 2,000 nodes in one process
//! against a genuine control plane (rkube-testcp) stays Ready for 5 minutes
//! with no missed lease renewal, while a 5,000-replica Deployment (pods
//! made by kube-controller-manager's ReplicaSet controller, bound by
//! `rkube scheduler`) goes Running and Ready.
//!
//! `RKUBE_SCALE_NODES`, `RKUBE_SCALE_PODS` and `RKUBE_SCALE_SECONDS`
//! override 2000 / 5000 / 300 (`hack/test` runs 90 s, `hack/test --full`
//! the 5 minutes). The scheduler runs with
//! `--kube-api-qps=200 --kube-api-burst=400` (kube-scheduler's 50/100 would
//! make binding 5,000 pods alone take 100 s). Needs hack/build-k8s; run by
//! hack/test. It lives in the `rkube` crate, not the kubelet's, because it
//! runs the scheduler too.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, PostParams};
use kube::Api;
use rkube_kubelet::metrics::Metrics;
use rkube_testcp::support::client;
use rkube_testcp::ControlPlane;
use serde_json::json;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

async fn count_ready_nodes(nodes: &Api<Node>) -> usize {
    let mut n = 0;
    let mut token: Option<String> = None;
    loop {
        let mut lp = ListParams::default().limit(1000);
        if let Some(t) = &token {
            lp = lp.continue_token(t);
        }
        let Ok(page) = nodes.list(&lp).await else {
            return n;
        };
        n += page.items.iter().filter(|x| ready(x)).count();
        token = page.metadata.continue_.filter(|t| !t.is_empty());
        if token.is_none() {
            return n;
        }
    }
}

/// The agent's lease counters so far, for the log.
fn renewals(m: &Metrics) -> String {
    format!(
        "{} renewals, {} missed, {} late, {} errors, max gap {} ms",
        Metrics::get(&m.lease_renewals),
        Metrics::get(&m.lease_renewals_missed),
        Metrics::get(&m.lease_renewals_late),
        Metrics::get(&m.lease_renewal_errors),
        Metrics::get(&m.lease_max_gap_ms),
    )
}

async fn stale_leases(leases: &Api<Lease>, max_age: f64) -> (usize, usize) {
    let now = Timestamp::now();
    let all = leases.list(&Default::default()).await.unwrap();
    let mut total = 0;
    let mut stale = 0;
    for l in all.items.iter().filter(|l| {
        l.metadata
            .name
            .as_deref()
            .unwrap_or("")
            .starts_with("scale-")
    }) {
        total += 1;
        let renew = l.spec.as_ref().and_then(|s| s.renew_time.as_ref());
        let age = renew.map(|t| now.duration_since(t.0).as_secs_f64());
        if age.is_none_or(|a| a > max_age) {
            stale += 1;
        }
    }
    (total, stale)
}

#[test]
#[ignore = "needs hack/build-k8s; run by hack/test"]
fn two_thousand_sim_nodes_and_a_five_thousand_pod_deployment() {
    let cp = ControlPlane::start().expect("control plane");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(scenario(&cp));
}

async fn scenario(cp: &ControlPlane) {
    let nodes_n = env_or("RKUBE_SCALE_NODES", 2000);
    let pods_n = env_or("RKUBE_SCALE_PODS", 5000);
    let seconds = env_or("RKUBE_SCALE_SECONDS", 300) as u64;
    let admin = client(cp.kubeconfig()).await;
    let nodes: Api<Node> = Api::all(admin.clone());
    let leases: Api<Lease> = Api::namespaced(admin.clone(), "kube-node-lease");

    // The sim agent: every node registered, leased, reporting.
    let cfg = cp.dir().join("scale-kubelet.yaml");
    std::fs::write(
        &cfg,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nhealthzPort: 0\n",
    )
    .unwrap();
    let opts = rkube_kubelet::options::parse([
        "--runtime=sim".to_string(),
        format!("--nodes={nodes_n}"),
        "--node-name-pattern=scale-{}".into(),
        format!("--kubeconfig={}", cp.kubeconfig().display()),
        format!("--config={}", cfg.display()),
        "--pod-start-delay=2s".into(),
    ])
    .unwrap();
    let metrics = Arc::new(Metrics::default());
    let (stop_kubelet, kubelet_stopped) = tokio::sync::oneshot::channel::<()>();
    let agent = tokio::spawn(rkube_kubelet::run_with_metrics(
        opts,
        metrics.clone(),
        async move {
            let _ = kubelet_stopped.await;
        },
    ));
    let t0 = Instant::now();
    loop {
        let n = count_ready_nodes(&nodes).await;
        if n == nodes_n {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(240),
            "only {n} of {nodes_n} nodes Ready after {:?}",
            t0.elapsed()
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let all_ready = Instant::now();
    eprintln!(
        "{nodes_n} sim nodes Ready after {:?} ({})",
        t0.elapsed(),
        renewals(&metrics)
    );

    // rkube scheduler binds the Deployment's pods.
    let sched_opts = rkube_scheduler::options::parse(
        [
            "--kubeconfig",
            cp.scheduler_kubeconfig().to_str().unwrap(),
            "--leader-elect=false",
            "--secure-port=0",
            "--kube-api-qps=200",
            "--kube-api-burst=400",
        ]
        .map(String::from),
    )
    .unwrap();
    // On a runtime (and threads) of its own, as in its own process: its
    // informers and bindings must not queue the agent's lease renewals
    // behind them on two shared workers.
    let (stop_sched, sched_stopped) = tokio::sync::oneshot::channel::<()>();
    let sched = std::thread::spawn(move || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
            .block_on(rkube_scheduler::run(sched_opts, async {
                let _ = sched_stopped.await;
            }))
    });
    let deployment: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "scale", "namespace": "default"},
        "spec": {
            "replicas": pods_n,
            "selector": {"matchLabels": {"app": "scale"}},
            "template": {
                "metadata": {"labels": {"app": "scale"}},
                "spec": {
                    "automountServiceAccountToken": false,
                    "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}],
                },
            },
        },
    }))
    .unwrap();
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), "default");
    let created = Instant::now();
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();
    let running_after = loop {
        let d = deployments.get("scale").await.unwrap();
        let ready = d
            .status
            .as_ref()
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0);
        if ready as usize == pods_n {
            break created.elapsed();
        }
        assert!(
            created.elapsed() < Duration::from_secs(seconds.max(240) + 120),
            "the Deployment has {ready} of {pods_n} ready after {:?}",
            created.elapsed()
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    eprintln!(
        "{pods_n}-replica Deployment Ready after {running_after:?} ({})",
        renewals(&metrics)
    );
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    let mut running = 0;
    let mut token: Option<String> = None;
    loop {
        let mut lp = ListParams::default().labels("app=scale").limit(1000);
        if let Some(t) = &token {
            lp = lp.continue_token(t);
        }
        let page = pods.list(&lp).await.unwrap();
        for p in &page.items {
            let st = p.status.as_ref().unwrap();
            assert_eq!(st.phase.as_deref(), Some("Running"));
            assert!(st.pod_ip.is_some(), "pod IP set");
            running += 1;
        }
        token = page.metadata.continue_.filter(|t| !t.is_empty());
        if token.is_none() {
            break;
        }
    }
    assert_eq!(running, pods_n);

    // The rest of the 5 minutes: every node stays Ready, no lease is missed.
    let left = Duration::from_secs(seconds).saturating_sub(all_ready.elapsed());
    tokio::time::sleep(left).await;
    assert_eq!(count_ready_nodes(&nodes).await, nodes_n);
    let (total, stale) = stale_leases(&leases, 40.0).await;
    assert_eq!(total, nodes_n);
    assert_eq!(stale, 0, "leases older than their 40 s duration");
    let missed = Metrics::get(&metrics.lease_renewals_missed);
    eprintln!(
        "{nodes_n} nodes for {:?}: {}",
        all_ready.elapsed(),
        renewals(&metrics)
    );
    assert_eq!(missed, 0, "missed lease renewals");
    let _ = stop_sched.send(());
    tokio::task::spawn_blocking(move || sched.join())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let _ = stop_kubelet.send(());
    agent.await.unwrap().unwrap();
}
