//! `rkube kubelet --runtime sim` against a genuine kube-apiserver and
//! kube-controller-manager v1.37 (rkube-testcp). One control plane, three
//! scenarios that overlap in time to keep the test short:
//!
//! (a) one node as `system:node:node-a` (least privilege): registers, goes
//!     Ready, renews its Lease; a pod bound to it goes Running with
//!     container statuses and a pod IP (checked with the real kubectl too),
//!     a restartPolicy Never pod goes Succeeded, a deleted pod disappears.
//! (b) 200 sim nodes in one process (admin identity: one identity cannot
//!     act for 200 nodes under the Node authorizer): all Ready, leases
//!     fresh after ~60 s, zero missed or late renewals.
//! (c) node-a's agent stops: kube-controller-manager marks it Unknown and
//!     taints it unreachable; restarted, it is Ready again and its pod is
//!     Running with the same container, not recreated.
//!
//! (d) a node joins as `kubeadm join` joins one: only a bootstrap token
//!     (`--bootstrap-kubeconfig`); its client certificate is requested,
//!     approved by kube-controller-manager and kept in
//!     `<cert-dir>/kubelet-client-current.pem`; restarted, it reuses it.
//!
//! Needs the binaries from hack/build-k8s, so it is ignored by default;
//! hack/test runs it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, PostParams};
use kube::Api;
use rkube_kubelet::metrics::Metrics;
use rkube_testcp::support::{client, free_port, wait_for};
use rkube_testcp::ControlPlane;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;

const SIM_NODES: usize = 200;

async fn http_get(port: u16, path: &str) -> String {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

struct Agent {
    stop: Option<oneshot::Sender<()>>,
    done: tokio::task::JoinHandle<anyhow::Result<()>>,
    metrics: Arc<Metrics>,
}

impl Agent {
    fn start(args: &[String]) -> Agent {
        let opts = rkube_kubelet::options::parse(args.iter().cloned()).unwrap();
        let metrics = Arc::new(Metrics::default());
        let (tx, rx) = oneshot::channel::<()>();
        let done = tokio::spawn(rkube_kubelet::run_with_metrics(
            opts,
            metrics.clone(),
            async move {
                let _ = rx.await;
            },
        ));
        Agent {
            stop: Some(tx),
            done,
            metrics,
        }
    }

    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.done.await.unwrap().unwrap();
    }
}

fn ready(n: &Node) -> Option<String> {
    n.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.clone())
}

fn pod(name: &str, node: &str, restart: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": node, "restartPolicy": restart,
                 "automountServiceAccountToken": false,
                 "terminationGracePeriodSeconds": 5,
                 "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]},
    }))
    .unwrap()
}

fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn container_id(p: &Pod) -> Option<String> {
    p.status.as_ref()?.container_statuses.as_ref()?[0]
        .container_id
        .clone()
}

#[test]
#[ignore = "needs hack/build-k8s; run by hack/test"]
fn kubelet_sim_against_a_real_control_plane() {
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
    rt.block_on(scenario(&cp));
}

async fn scenario(cp: &ControlPlane) {
    let admin = client(cp.kubeconfig()).await;
    let nodes: Api<Node> = Api::all(admin.clone());
    let leases: Api<Lease> = Api::namespaced(admin.clone(), "kube-node-lease");
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    let started = Instant::now();

    // (b) starts first: it needs a minute of renewals.
    let sim_args: Vec<String> = [
        "--runtime=sim".to_string(),
        format!("--nodes={SIM_NODES}"),
        "--node-name-pattern=sim-b-{}".into(),
        format!("--kubeconfig={}", cp.kubeconfig().display()),
        "--api-concurrency=32".into(),
    ]
    .into();
    let dir = cp.dir().join("kubelet-test");
    std::fs::create_dir_all(&dir).unwrap();
    let sim_cfg = dir.join("sim-b.yaml");
    std::fs::write(
        &sim_cfg,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nhealthzPort: 0\n",
    )
    .unwrap();
    let mut sim_args = sim_args;
    sim_args.push(format!("--config={}", sim_cfg.display()));
    let sim_agent = Agent::start(&sim_args);
    let sim_started = Instant::now();

    // (a) one node with its own node identity.
    let node_kc = cp.node_kubeconfig("node-a").unwrap();
    let port = free_port();
    let cfg_a = dir.join("node-a.yaml");
    std::fs::write(
        &cfg_a,
        format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             healthzPort: {port}\nhealthzBindAddress: 127.0.0.1\nmaxPods: 50\n\
             registerWithTaints: [{{key: example.com/sim, value: 'yes', effect: PreferNoSchedule}}]\n"
        ),
    )
    .unwrap();
    let args_a: Vec<String> = [
        "--runtime=sim".to_string(),
        "--hostname-override=node-a".into(),
        format!("--kubeconfig={}", node_kc.display()),
        format!("--config={}", cfg_a.display()),
        "--node-labels=example.com/role=test".into(),
        "--node-ip=10.11.12.13".into(),
        "--pod-start-delay=1s".into(),
        "--pod-run-time=4s".into(),
        "--cgroup-driver=systemd".into(),
    ]
    .into();
    let agent_a = Agent::start(&args_a);

    let node = wait_for("node-a Ready", Duration::from_secs(60), || async {
        let n = nodes.get_opt("node-a").await.ok()??;
        (ready(&n).as_deref() == Some("True")).then_some(n)
    })
    .await;
    let labels = node.metadata.labels.clone().unwrap();
    assert_eq!(labels["kubernetes.io/hostname"], "node-a");
    assert_eq!(labels["example.com/role"], "test");
    assert_eq!(labels["kubernetes.io/os"], "linux");
    let st = node.status.clone().unwrap();
    assert_eq!(st.capacity.as_ref().unwrap()["pods"].0, "50");
    assert_eq!(st.capacity.as_ref().unwrap()["cpu"].0, "32");
    assert_eq!(st.allocatable.as_ref().unwrap()["memory"].0, "262044Mi");
    let addrs = st.addresses.unwrap();
    assert!(addrs
        .iter()
        .any(|a| a.type_ == "InternalIP" && a.address == "10.11.12.13"));
    let info = st.node_info.unwrap();
    assert!(
        info.kubelet_version.starts_with("v1.37."),
        "{}",
        info.kubelet_version
    );
    assert!(info.container_runtime_version.starts_with("sim://"));
    let ready_cond = st
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready_cond.reason.as_deref(), Some("KubeletReady"));
    assert_eq!(
        ready_cond.message.as_deref(),
        Some("kubelet is posting ready status")
    );
    assert!(node
        .spec
        .unwrap()
        .taints
        .unwrap_or_default()
        .iter()
        .any(|t| t.key == "example.com/sim" && t.effect == "PreferNoSchedule"));

    // An extended resource patched into status.capacity by another client
    // (as upstream's e2e "pod overhead ... resource limits" spec does)
    // becomes allocatable at the kubelet's next status update, keeping the
    // node's own reservations; removed, it leaves allocatable again.
    let patch = |v: serde_json::Value| {
        let nodes = nodes.clone();
        async move {
            nodes
                .patch_status(
                    "node-a",
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Strategic(&v),
                )
                .await
                .unwrap();
        }
    };
    patch(json!({"status": {"capacity": {"example.com/fakecpu": "1k"}}})).await;
    let n = wait_for(
        "example.com/fakecpu allocatable",
        Duration::from_secs(30),
        || async {
            let n = nodes.get("node-a").await.ok()?;
            let a = n.status.as_ref()?.allocatable.clone()?;
            (a.get("example.com/fakecpu").map(|q| q.0.as_str()) == Some("1k")).then_some(n)
        },
    )
    .await;
    let a = n.status.unwrap().allocatable.unwrap();
    assert_eq!(a["memory"].0, "262044Mi", "own reservations kept");
    patch(json!({"status": {"capacity": {"example.com/fakecpu": null}}})).await;
    wait_for(
        "example.com/fakecpu gone from allocatable",
        Duration::from_secs(30),
        || async {
            let n = nodes.get("node-a").await.ok()?;
            let a = n.status.as_ref()?.allocatable.clone()?;
            (!a.contains_key("example.com/fakecpu")).then_some(())
        },
    )
    .await;

    // The Lease: holder, owner, renewed.
    let lease = wait_for("node-a lease", Duration::from_secs(30), || async {
        leases.get_opt("node-a").await.ok()?
    })
    .await;
    let spec = lease.spec.clone().unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("node-a"));
    assert_eq!(spec.lease_duration_seconds, Some(40));
    let owner = &lease.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("Node", "node-a")
    );
    assert_eq!(Some(&owner.uid), node.metadata.uid.as_ref());
    let first_renew = spec.renew_time.unwrap().0;

    // Pods: a long-running one, a Job-like one, one to delete.
    for (name, restart) in [("web", "Always"), ("job", "Never"), ("del", "Always")] {
        pods.create(&PostParams::default(), &pod(name, "node-a", restart))
            .await
            .unwrap();
    }
    let web = wait_for("web Running", Duration::from_secs(30), || async {
        let p = pods.get("web").await.ok()?;
        (phase(&p) == "Running").then_some(p)
    })
    .await;
    let ws = web.status.clone().unwrap();
    let pod_ip = ws.pod_ip.clone().unwrap();
    assert!(pod_ip.starts_with("10.0.0."), "{pod_ip}");
    assert_eq!(ws.host_ip.as_deref(), Some("10.11.12.13"));
    assert!(ws.start_time.is_some());
    let cs = &ws.container_statuses.as_ref().unwrap()[0];
    assert!(cs.ready);
    assert_eq!(cs.started, Some(true));
    assert!(cs.container_id.as_deref().unwrap().starts_with("sim://"));
    assert!(cs.image_id.contains("@sha256:"));
    assert!(cs
        .state
        .as_ref()
        .unwrap()
        .running
        .as_ref()
        .unwrap()
        .started_at
        .is_some());
    let conds = ws.conditions.unwrap();
    for t in [
        "PodReadyToStartContainers",
        "Initialized",
        "ContainersReady",
        "Ready",
        "PodScheduled",
    ] {
        let c = conds
            .iter()
            .find(|c| c.type_ == t)
            .unwrap_or_else(|| panic!("no {t}"));
        assert_eq!(c.status, "True", "{t}");
    }
    let web_cid = container_id(&web).unwrap();

    let job = wait_for("job Succeeded", Duration::from_secs(30), || async {
        let p = pods.get("job").await.ok()?;
        (phase(&p) == "Succeeded").then_some(p)
    })
    .await;
    let term = job.status.unwrap().container_statuses.unwrap()[0]
        .state
        .clone()
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!(term.exit_code, 0);
    assert_eq!(term.reason.as_deref(), Some("Completed"));

    // Deleting a pod (graceful) is confirmed by the kubelet: it disappears.
    wait_for("del Running", Duration::from_secs(30), || async {
        let p = pods.get("del").await.ok()?;
        (phase(&p) == "Running").then_some(())
    })
    .await;
    pods.delete("del", &DeleteParams::default()).await.unwrap();
    wait_for("del gone", Duration::from_secs(30), || async {
        pods.get_opt("del").await.ok()?.is_none().then_some(())
    })
    .await;
    assert_eq!(Metrics::get(&agent_a.metrics.pods_deleted), 1);

    // The real kubectl shows the node and the pod IP.
    let out = cp
        .kubectl(&["get", "pods", "-o", "wide", "--no-headers"])
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("web "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        line.contains("Running") && line.contains("node-a") && line.contains(&pod_ip),
        "{line}"
    );

    // Renewal advances.
    wait_for("lease renewed", Duration::from_secs(20), || async {
        let l = leases.get("node-a").await.ok()?;
        (l.spec?.renew_time?.0 > first_renew).then_some(())
    })
    .await;
    let health = http_get(port, "/healthz").await;
    assert!(
        health.starts_with("HTTP/1.1 200") && health.ends_with("ok"),
        "{health}"
    );
    let m = http_get(port, "/metrics").await;
    assert!(
        m.contains("rkube_kubelet_lease_renewals_missed_total 0"),
        "{m}"
    );
    // Upstream's pod worker histograms: each pod started so far was
    // observed at its first sync and again when it turned Running.
    let count = |name: &str| {
        m.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    assert!(
        count("kubelet_pod_start_duration_seconds_count ").is_some_and(|n| n >= 2),
        "{m}"
    );
    assert!(
        count("kubelet_pod_worker_duration_seconds_count{operation_type=\"create\"} ")
            .is_some_and(|n| n >= 1),
        "{m}"
    );
    eprintln!("(a) done after {:?}", started.elapsed());

    // (c) stop node-a's agent: the node lifecycle controller notices.
    agent_a.stop().await;
    let stopped = Instant::now();
    wait_for(
        "node-a Unknown + unreachable taint",
        Duration::from_secs(120),
        || async {
            let n = nodes.get("node-a").await.ok()?;
            let unknown = ready(&n).as_deref() == Some("Unknown");
            let tainted = n
                .spec?
                .taints?
                .iter()
                .any(|t| t.key == "node.kubernetes.io/unreachable");
            (unknown && tainted).then_some(())
        },
    )
    .await;
    eprintln!(
        "(c) node-a Unknown + tainted {:?} after the agent stopped",
        stopped.elapsed()
    );

    // (b) meanwhile ran for a minute or more: every sim node Ready, every lease fresh.
    let wait_more = Duration::from_secs(60).saturating_sub(sim_started.elapsed());
    tokio::time::sleep(wait_more).await;
    let all = nodes.list(&Default::default()).await.unwrap();
    let sim_nodes: Vec<&Node> = all
        .items
        .iter()
        .filter(|n| {
            n.metadata
                .name
                .as_deref()
                .unwrap_or("")
                .starts_with("sim-b-")
        })
        .collect();
    assert_eq!(sim_nodes.len(), SIM_NODES);
    for n in &sim_nodes {
        assert_eq!(ready(n).as_deref(), Some("True"), "{:?}", n.metadata.name);
    }
    let now = Timestamp::now();
    let all_leases = leases.list(&Default::default()).await.unwrap();
    let mut fresh = 0;
    for l in all_leases.items.iter().filter(|l| {
        l.metadata
            .name
            .as_deref()
            .unwrap_or("")
            .starts_with("sim-b-")
    }) {
        let renew = l.spec.as_ref().unwrap().renew_time.as_ref().unwrap().0;
        let age = now.duration_since(renew).as_secs_f64();
        assert!(age < 15.0, "{:?} renewed {age:.1}s ago", l.metadata.name);
        fresh += 1;
    }
    assert_eq!(fresh, SIM_NODES);
    let sm = &sim_agent.metrics;
    let renewals = Metrics::get(&sm.lease_renewals);
    eprintln!(
        "(b) {SIM_NODES} nodes for {:?}: {renewals} renewals, {} missed, {} late, {} errors, max gap {} ms",
        sim_started.elapsed(),
        Metrics::get(&sm.lease_renewals_missed),
        Metrics::get(&sm.lease_renewals_late),
        Metrics::get(&sm.lease_renewal_errors),
        Metrics::get(&sm.lease_max_gap_ms),
    );
    assert!(renewals as usize >= SIM_NODES * 5, "{renewals}");
    assert_eq!(Metrics::get(&sm.lease_renewals_missed), 0);
    assert_eq!(Metrics::get(&sm.lease_renewals_late), 0);
    sim_agent.stop().await;

    // (c) restart node-a's agent: Ready again, the pod reconciled.
    let agent_a = Agent::start(&args_a);
    wait_for(
        "node-a Ready again, taint removed",
        Duration::from_secs(60),
        || async {
            let n = nodes.get("node-a").await.ok()?;
            let tainted = n
                .spec
                .as_ref()?
                .taints
                .iter()
                .flatten()
                .any(|t| t.key == "node.kubernetes.io/unreachable");
            (ready(&n).as_deref() == Some("True") && !tainted).then_some(())
        },
    )
    .await;
    let web2 = wait_for("web Running again", Duration::from_secs(30), || async {
        let p = pods.get("web").await.ok()?;
        let ready = p
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        (phase(&p) == "Running" && ready).then_some(p)
    })
    .await;
    assert_eq!(web2.metadata.uid, web.metadata.uid);
    assert_eq!(
        container_id(&web2).as_deref(),
        Some(web_cid.as_str()),
        "same container"
    );
    let ws2 = web2.status.unwrap();
    assert_eq!(ws2.pod_ip.as_deref(), Some(pod_ip.as_str()));
    assert_eq!(ws2.container_statuses.unwrap()[0].restart_count, 0);
    let on_a = pods
        .list(&kube::api::ListParams::default().fields("spec.nodeName=node-a"))
        .await
        .unwrap();
    let names: Vec<_> = on_a
        .items
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    agent_a.stop().await;
    eprintln!("(a)-(c) done after {:?}", started.elapsed());

    join_with_a_bootstrap_token(cp, &admin, &dir).await;
    eprintln!("all scenarios done after {:?}", started.elapsed());
}

async fn join_with_a_bootstrap_token(
    cp: &ControlPlane,
    admin: &kube::Client,
    dir: &std::path::Path,
) {
    use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
    use std::os::unix::fs::PermissionsExt;
    let boot = cp.bootstrap_kubeconfig().unwrap();
    let token_id = std::fs::read_to_string(&boot)
        .unwrap()
        .lines()
        .find_map(|l| l.trim().strip_prefix("token: ").map(|t| t[..6].to_string()))
        .expect("a token in the bootstrap kubeconfig");
    let root = dir.join("joiner");
    let kubeconfig = root.join("kubelet.conf");
    let cfg = dir.join("joiner.yaml");
    std::fs::write(
        &cfg,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nhealthzPort: 0\n",
    )
    .unwrap();
    let args: Vec<String> = vec![
        "--runtime=sim".into(),
        "--hostname-override=joiner".into(),
        format!("--bootstrap-kubeconfig={}", boot.display()),
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--root-dir={}", root.display()),
        format!("--config={}", cfg.display()),
    ];
    let agent = Agent::start(&args);
    let nodes: Api<Node> = Api::all(admin.clone());
    wait_for("the joined node Ready", Duration::from_secs(60), || async {
        let n = nodes.get("joiner").await.ok()?;
        (ready(&n).as_deref() == Some("True")).then_some(())
    })
    .await;
    // The request: from the bootstrap token's user, for the node's
    // identity, approved by kube-controller-manager's csrapproving.
    let csrs: Api<CertificateSigningRequest> = Api::all(admin.clone());
    let list = csrs.list(&Default::default()).await.unwrap().items;
    let mine: Vec<&CertificateSigningRequest> = list
        .iter()
        .filter(|c| c.spec.username.as_deref() == Some(&format!("system:bootstrap:{token_id}")))
        .collect();
    assert_eq!(mine.len(), 1, "one CSR from the bootstrap token");
    let csr = mine[0];
    assert!(csr
        .metadata
        .name
        .as_deref()
        .unwrap()
        .starts_with("node-csr-"));
    assert_eq!(
        csr.spec.signer_name,
        "kubernetes.io/kube-apiserver-client-kubelet"
    );
    let approved = csr
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == "Approved" && c.reason.as_deref() == Some("AutoApproved"))
        });
    assert!(approved, "auto-approved: {:?}", csr.status);
    // The files upstream writes, with upstream's modes.
    let pki = root.join("pki");
    let current = pki.join("kubelet-client-current.pem");
    let target = std::fs::read_link(&current).expect("kubelet-client-current.pem is a link");
    let name = target.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with("kubelet-client-2") && name.ends_with(".pem"),
        "{name}"
    );
    assert_eq!(
        std::fs::metadata(&target).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(
        std::fs::metadata(&kubeconfig).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(!pki.join("kubelet-client.key.tmp").exists());
    let out = std::process::Command::new("openssl")
        .args(["x509", "-noout", "-subject", "-issuer", "-in"])
        .arg(&current)
        .output()
        .expect("openssl");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("O = system:nodes, CN = system:node:joiner"),
        "openssl x509 shows the node's identity: {text}"
    );
    // Restarted, the kubelet reuses its certificate: no new request.
    agent.stop().await;
    let agent = Agent::start(&args);
    tokio::time::sleep(Duration::from_secs(3)).await;
    wait_for(
        "the joined node Ready after a restart",
        Duration::from_secs(30),
        || async {
            let n = nodes.get("joiner").await.ok()?;
            (ready(&n).as_deref() == Some("True")).then_some(())
        },
    )
    .await;
    let again = csrs.list(&Default::default()).await.unwrap().items;
    let count = again
        .iter()
        .filter(|c| c.spec.username.as_deref() == Some(&format!("system:bootstrap:{token_id}")))
        .count();
    assert_eq!(
        count, 1,
        "a restarted kubelet with a valid certificate requests none"
    );
    assert_eq!(std::fs::read_link(&current).unwrap(), target);
    agent.stop().await;
}
