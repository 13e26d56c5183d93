//! Node-pressure eviction, `rkube kubelet --runtime sim --sim-signals FILE`
//! against a genuine kube-apiserver and kube-controller-manager v1.37
//! (rkube-testcp), as `system:node:evict-a`:
//!
//! the signals file drops memory.available below `evictionHard` (100Mi) →
//! the Node reports `MemoryPressure=True` (`KubeletHasInsufficientMemory`)
//! → kube-controller-manager's node lifecycle controller adds the
//! `node.kubernetes.io/memory-pressure:NoSchedule` taint → the BestEffort
//! pod is evicted first (Failed/Evicted, upstream's message, a
//! `DisruptionTarget` condition), the Burstable one a round later; the
//! signal recovers → the condition clears only after the (shortened, 20 s)
//! `evictionPressureTransitionPeriod`, and the taint goes.
//!
//! At the same time, on node `evict-soft`, `evictionSoft` (500Mi, 25 s
//! grace): MemoryPressure at once, the pod evicted only after the grace
//! period, with the soft threshold in its message.
//!
//! Needs the binaries from hack/build-k8s; run by hack/test.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::PostParams;
use kube::Api;
use rkube_testcp::support::{client, wait_for};
use rkube_testcp::ControlPlane;
use serde_json::json;
use tokio::sync::oneshot;

const NODE: &str = "evict-a";
const TRANSITION: Duration = Duration::from_secs(20);

fn node_condition(n: &Node, t: &str) -> Option<(String, String)> {
    let c = n
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == t)?;
    Some((c.status.clone(), c.reason.clone().unwrap_or_default()))
}

fn has_taint(n: &Node, key: &str) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == key && t.effect == "NoSchedule"))
}

fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn pod(name: &str, resources: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": NODE, "automountServiceAccountToken": false,
                 "terminationGracePeriodSeconds": 5,
                 "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                                 "resources": resources}]},
    }))
    .unwrap()
}

#[test]
#[ignore = "needs hack/build-k8s; run by hack/test"]
fn memory_pressure_evicts_best_effort_first_and_clears_after_transition() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("warn,rkube_kubelet=info")
        .with_test_writer()
        .with_ansi(false)
        .try_init();
    let cp = ControlPlane::start().expect("control plane starts");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async { tokio::join!(scenario(&cp), soft_scenario(&cp)) });
}

/// A sim node `node` with the KubeletConfiguration lines `config` and
/// its signals file: the file's path, the agent, its stop switch and its
/// counters.
fn start_node(
    cp: &ControlPlane,
    node: &str,
    config: &str,
) -> (
    std::path::PathBuf,
    tokio::task::JoinHandle<anyhow::Result<()>>,
    oneshot::Sender<()>,
    std::sync::Arc<rkube_kubelet::metrics::Metrics>,
) {
    let dir = cp.dir().join(format!("eviction-{node}"));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("kubelet.yaml");
    std::fs::write(
        &cfg,
        format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             healthzPort: 0\n{config}"
        ),
    )
    .unwrap();
    let signals = dir.join("signals.json");
    let kc = cp.node_kubeconfig(node).unwrap();
    let args: Vec<String> = [
        "--runtime=sim".to_string(),
        format!("--hostname-override={node}"),
        format!("--kubeconfig={}", kc.display()),
        format!("--config={}", cfg.display()),
        format!("--sim-signals={}", signals.display()),
        "--pod-start-delay=500ms".into(),
    ]
    .into();
    let opts = rkube_kubelet::options::parse(args).unwrap();
    let metrics = std::sync::Arc::new(rkube_kubelet::metrics::Metrics::default());
    let (stop, stopped) = oneshot::channel::<()>();
    let agent = tokio::spawn(rkube_kubelet::run_with_metrics(
        opts,
        metrics.clone(),
        async move {
            let _ = stopped.await;
        },
    ));
    (signals, agent, stop, metrics)
}

/// `evictionSoft` on another node, at the same time: the pressure is
/// reported at once, the pod evicted only once the threshold has been met
/// for its grace period, with its own grace up to
/// `evictionMaxPodGracePeriod`.
async fn soft_scenario(cp: &ControlPlane) {
    const SOFT_NODE: &str = "evict-soft";
    const GRACE: Duration = Duration::from_secs(25);
    let admin = client(cp.kubeconfig()).await;
    let nodes: Api<Node> = Api::all(admin.clone());
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    let (signals, agent, stop, _) = start_node(
        cp,
        SOFT_NODE,
        &format!(
            "evictionHard: {{memory.available: 10Mi}}\n\
             evictionSoft: {{memory.available: 500Mi}}\n\
             evictionSoftGracePeriod: {{memory.available: {}s}}\n\
             evictionMaxPodGracePeriod: 3\nevictionPressureTransitionPeriod: 20s\n",
            GRACE.as_secs()
        ),
    );
    wait_for("soft node Ready", Duration::from_secs(60), || async {
        let n = nodes.get_opt(SOFT_NODE).await.ok()??;
        (node_condition(&n, "Ready")?.0 == "True").then_some(())
    })
    .await;
    let mut p = pod("soft-victim", json!({}));
    p.spec.as_mut().unwrap().node_name = Some(SOFT_NODE.into());
    pods.create(&PostParams::default(), &p).await.unwrap();
    wait_for("soft-victim Running", Duration::from_secs(30), || async {
        (phase(&pods.get("soft-victim").await.ok()?) == "Running").then_some(())
    })
    .await;
    // Below the soft threshold, above the hard one.
    std::fs::write(
        &signals,
        json!({"signals": {"memory.available": "300Mi"},
               "pods": {"default/soft-victim": {"memory": "50Mi"}}})
        .to_string(),
    )
    .unwrap();
    let low_at = Instant::now();
    wait_for(
        "soft MemoryPressure=True",
        Duration::from_secs(30),
        || async {
            let n = nodes.get(SOFT_NODE).await.ok()?;
            (node_condition(&n, "MemoryPressure")?.0 == "True").then_some(())
        },
    )
    .await;
    let pressure_after = low_at.elapsed();
    assert!(
        pressure_after < GRACE,
        "the condition does not wait for the grace period"
    );
    assert_eq!(
        phase(&pods.get("soft-victim").await.unwrap()),
        "Running",
        "evicted before the soft grace period"
    );
    let evicted = wait_for(
        "soft-victim evicted",
        GRACE + Duration::from_secs(40),
        || async {
            let p = pods.get("soft-victim").await.ok()?;
            (phase(&p) == "Failed").then_some(p)
        },
    )
    .await;
    let evicted_after = low_at.elapsed();
    assert!(
        evicted_after >= GRACE,
        "evicted {evicted_after:?} after the threshold was met, before its {GRACE:?} grace period"
    );
    let st = evicted.status.unwrap();
    assert_eq!(st.reason.as_deref(), Some("Evicted"));
    assert!(st.message.unwrap_or_default().starts_with(
        "The node was low on resource: memory. Threshold quantity: 500Mi, available: 300Mi."
    ),);
    eprintln!("soft eviction: MemoryPressure after {pressure_after:?}, evicted after {evicted_after:?} (grace {GRACE:?})");
    let _ = stop.send(());
    agent.await.unwrap().unwrap();
}

async fn scenario(cp: &ControlPlane) {
    let started = Instant::now();
    let admin = client(cp.kubeconfig()).await;
    let nodes: Api<Node> = Api::all(admin.clone());
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    let (signals, agent, stop, metrics) = start_node(
        cp,
        NODE,
        &format!(
            "evictionHard: {{memory.available: 100Mi}}\nevictionPressureTransitionPeriod: {}s\n",
            TRANSITION.as_secs()
        ),
    );

    wait_for("node Ready", Duration::from_secs(60), || async {
        let n = nodes.get_opt(NODE).await.ok()??;
        (node_condition(&n, "Ready")?.0 == "True").then_some(())
    })
    .await;
    let n = nodes.get(NODE).await.unwrap();
    assert_eq!(
        node_condition(&n, "MemoryPressure"),
        Some(("False".into(), "KubeletHasSufficientMemory".into()))
    );
    assert!(!has_taint(&n, "node.kubernetes.io/memory-pressure"));

    // A Burstable pod created first, then a BestEffort one.
    let burstable = pod(
        "burstable",
        json!({"requests": {"memory": "100Mi"}, "limits": {"memory": "200Mi"}}),
    );
    pods.create(&PostParams::default(), &burstable)
        .await
        .unwrap();
    pods.create(&PostParams::default(), &pod("best-effort", json!({})))
        .await
        .unwrap();
    for name in ["burstable", "best-effort"] {
        wait_for(
            &format!("{name} Running"),
            Duration::from_secs(30),
            || async { (phase(&pods.get(name).await.ok()?) == "Running").then_some(()) },
        )
        .await;
    }
    let qos = pods
        .get("best-effort")
        .await
        .unwrap()
        .status
        .unwrap()
        .qos_class;
    assert_eq!(qos.as_deref(), Some("BestEffort"));

    // Memory runs low: 50Mi available, the threshold is 100Mi.
    std::fs::write(
        &signals,
        json!({"signals": {"memory.available": "50Mi"},
               "pods": {"default/best-effort": {"memory": "20Mi"},
                        "default/burstable": {"memory": "60Mi"}}})
        .to_string(),
    )
    .unwrap();
    let low_at = Instant::now();
    wait_for("MemoryPressure=True", Duration::from_secs(40), || async {
        let n = nodes.get(NODE).await.ok()?;
        (node_condition(&n, "MemoryPressure")?
            == ("True".into(), "KubeletHasInsufficientMemory".into()))
            .then_some(())
    })
    .await;
    let pressure_after = low_at.elapsed();
    wait_for(
        "kube-controller-manager's memory-pressure taint",
        Duration::from_secs(30),
        || async {
            let n = nodes.get(NODE).await.ok()?;
            has_taint(&n, "node.kubernetes.io/memory-pressure").then_some(())
        },
    )
    .await;
    let taint_after = low_at.elapsed();

    let be = wait_for("best-effort evicted", Duration::from_secs(40), || async {
        let p = pods.get("best-effort").await.ok()?;
        (phase(&p) == "Failed").then_some(p)
    })
    .await;
    let be_evicted_after = low_at.elapsed();
    // The Burstable pod is still running when the BestEffort one is evicted.
    let b = pods.get("burstable").await.unwrap();
    assert_eq!(phase(&b), "Running", "burstable evicted before best-effort");
    let st = be.status.clone().unwrap();
    assert_eq!(st.reason.as_deref(), Some("Evicted"));
    let msg = st.message.clone().unwrap();
    assert_eq!(
        msg,
        "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. \
         Container app was using 20Mi, request is 0, has larger consumption of memory. "
    );
    let dt = st
        .conditions
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.type_ == "DisruptionTarget")
        .expect("DisruptionTarget condition")
        .clone();
    assert_eq!(dt.status, "True");
    assert_eq!(dt.reason.as_deref(), Some("TerminationByKubelet"));
    let term = st.container_statuses.unwrap()[0]
        .state
        .clone()
        .unwrap()
        .terminated
        .expect("container terminated");
    assert_ne!(term.exit_code, 0);

    // Still low: one more pod per round, the Burstable one next.
    let b = wait_for("burstable evicted", Duration::from_secs(40), || async {
        let p = pods.get("burstable").await.ok()?;
        (phase(&p) == "Failed").then_some(p)
    })
    .await;
    let b_evicted_after = low_at.elapsed();
    let bst = b.status.unwrap();
    assert_eq!(bst.reason.as_deref(), Some("Evicted"));
    // Under its request: no container is blamed.
    assert_eq!(
        bst.message.as_deref(),
        Some("The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. ")
    );
    assert_eq!(
        rkube_kubelet::metrics::Metrics::get(&metrics.pods_evicted),
        2
    );

    // Memory recovers; the condition stays True for the transition period.
    std::fs::write(
        &signals,
        json!({"signals": {"memory.available": "2Gi"}}).to_string(),
    )
    .unwrap();
    let ok_at = Instant::now();
    tokio::time::sleep(TRANSITION / 2).await;
    let n = nodes.get(NODE).await.unwrap();
    assert_eq!(
        node_condition(&n, "MemoryPressure").map(|c| c.0).as_deref(),
        Some("True"),
        "cleared before the transition period"
    );
    wait_for(
        "MemoryPressure=False and taint removed",
        TRANSITION + Duration::from_secs(45),
        || async {
            let n = nodes.get(NODE).await.ok()?;
            let cond = node_condition(&n, "MemoryPressure")?;
            (cond == ("False".into(), "KubeletHasSufficientMemory".into())
                && !has_taint(&n, "node.kubernetes.io/memory-pressure"))
            .then_some(())
        },
    )
    .await;
    let cleared_after = ok_at.elapsed();
    // The evicted pods stay Failed (not restarted).
    for name in ["best-effort", "burstable"] {
        assert_eq!(phase(&pods.get(name).await.unwrap()), "Failed");
    }
    eprintln!(
        "eviction: MemoryPressure after {pressure_after:?}, taint after {taint_after:?}, \
         best-effort evicted after {be_evicted_after:?}, burstable after {b_evicted_after:?}; \
         cleared {cleared_after:?} after recovery (transition {TRANSITION:?}); total {:?}",
        started.elapsed()
    );
    assert!(cleared_after >= TRANSITION / 2);
    let _ = stop.send(());
    agent.await.unwrap().unwrap();
}
