//! Client certificate rotation (`rotateCertificates: true`) under a running
//! `rkube kubelet --runtime sim` against a genuine control plane whose
//! kube-controller-manager signs two-minute certificates: the node joins
//! with a bootstrap token, then renews its certificate (`RKUBE_CLIENT_ROTATIONS`
//! times, 2 unless set; `hack/test --full` runs it) with CSRs of its own
//! identity (auto-approved), without a restart, while pods keep being started
//! on it and its Lease keeps being renewed.
//!
//! Needs the binaries from hack/build-k8s, so it is ignored by default;
//! hack/test runs it.

use std::time::{Duration, Instant};

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::PostParams;
use kube::Api;
use rkube_kubelet::metrics::Metrics;
use rkube_testcp::support::{client, wait_for};
use rkube_testcp::ControlPlane;
use serde_json::json;
use tokio::sync::oneshot;

const NODE: &str = "rotor";

fn ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The pairs the store holds (`kubelet-client-<time>.pem`).
fn pairs(pki: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(pki)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("kubelet-client-2") && n.ends_with(".pem"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
#[ignore = "needs hack/build-k8s; run by hack/test"]
fn client_certificate_rotates_under_a_running_kubelet() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("warn,rkube_kubelet::certificates=info,rkube_daemon::client_cert=info")
        .with_test_writer()
        .with_ansi(false)
        .try_init();
    let cp = ControlPlane::start_with(&[("RKUBE_CP_SIGNING_DURATION", "2m")])
        .expect("control plane starts");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let admin = client(cp.kubeconfig()).await;
        let boot = cp.bootstrap_kubeconfig().unwrap();
        let dir = cp.dir().join("rotation");
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = dir.join("kubelet.yaml");
        std::fs::write(
            &cfg,
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             healthzPort: 0\nrotateCertificates: true\n",
        )
        .unwrap();
        let root = dir.join("root");
        let args: Vec<String> = vec![
            "--runtime=sim".into(),
            format!("--hostname-override={NODE}"),
            format!("--bootstrap-kubeconfig={}", boot.display()),
            format!("--kubeconfig={}", dir.join("kubelet.conf").display()),
            format!("--root-dir={}", root.display()),
            format!("--config={}", cfg.display()),
            "--pod-run-time=0s".into(),
        ];
        let opts = rkube_kubelet::options::parse(args).unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let metrics = std::sync::Arc::new(Metrics::default());
        let agent = tokio::spawn(rkube_kubelet::run_with_metrics(
            opts,
            metrics.clone(),
            async move {
                let _ = stopped.await;
            },
        ));
        let nodes: Api<Node> = Api::all(admin.clone());
        wait_for("the node Ready", Duration::from_secs(60), || async {
            nodes.get(NODE).await.ok().filter(ready).map(|_| ())
        })
        .await;
        let pki = root.join("pki");
        let first = pairs(&pki);
        assert_eq!(first.len(), 1, "the bootstrap pair: {first:?}");
        // Until the rotations happened: a pod every few seconds, each must
        // run (its status written by the kubelet through the rotations).
        let rotations = std::env::var("RKUBE_CLIENT_ROTATIONS")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|n| *n > 0)
            .unwrap_or(2);
        let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
        let started = Instant::now();
        let mut n = 0;
        while pairs(&pki).len() < rotations + 1 {
            assert!(
                started.elapsed() < Duration::from_secs(30 + 150 * rotations as u64),
                "{rotations} rotations of two-minute certificates not seen after {:?}: {:?}",
                started.elapsed(),
                pairs(&pki)
            );
            let name = format!("p-{n}");
            n += 1;
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "busybox"}]}
            }))
            .unwrap();
            pods.create(&PostParams::default(), &pod).await.unwrap();
            wait_for(
                &format!("{name} Running"),
                Duration::from_secs(30),
                || async {
                    let p = pods.get(&name).await.ok()?;
                    (p.status?.phase.as_deref() == Some("Running")).then_some(())
                },
            )
            .await;
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
        eprintln!(
            "{rotations} rotations after {:?}, {n} pods started meanwhile: {:?}",
            started.elapsed(),
            pairs(&pki)
        );
        // The renewals: CSRs of the node's own identity, approved.
        let csrs: Api<CertificateSigningRequest> = Api::all(admin.clone());
        let own: Vec<CertificateSigningRequest> = csrs
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|c| c.spec.username.as_deref() == Some(&format!("system:node:{NODE}")))
            .collect();
        assert!(
            own.len() >= rotations,
            "renewals requested as system:node:{NODE}: {}",
            own.len()
        );
        for c in &own {
            assert!(c.metadata.name.as_deref().unwrap().starts_with("csr-"));
            let approved = c
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|v| v.iter().any(|c| c.type_ == "Approved"));
            assert!(approved, "{:?}", c.status);
        }
        // The node still heartbeats once the bootstrap certificate has
        // expired: no connection (nor a resumed TLS session) presents it.
        let boot_pair = rkube_kubelet::certificates::store::parse_pair(
            &std::fs::read_to_string(pki.join(&first[0])).unwrap(),
        )
        .unwrap();
        let (_, expires) = boot_pair.validity().unwrap();
        let now = k8s_openapi::jiff::Timestamp::now().as_second();
        tokio::time::sleep(Duration::from_secs(
            expires.saturating_sub(now).max(0) as u64 + 15,
        ))
        .await;
        let leases: Api<Lease> = Api::namespaced(admin.clone(), "kube-node-lease");
        let renew = leases
            .get(NODE)
            .await
            .unwrap()
            .spec
            .unwrap()
            .renew_time
            .unwrap()
            .0;
        let age = k8s_openapi::jiff::Timestamp::now().duration_since(renew);
        assert!(age.as_secs() < 20, "the Lease was renewed {age:?} ago");
        assert!(ready(&nodes.get(NODE).await.unwrap()));
        // No request was refused on the way: every connection presented a
        // certificate that was valid.
        assert_eq!(
            Metrics::get(&metrics.lease_renewal_errors),
            0,
            "lease renewals refused"
        );
        assert_eq!(
            Metrics::get(&metrics.node_status_errors),
            0,
            "node status writes refused"
        );
        assert_eq!(
            Metrics::get(&metrics.pod_status_errors),
            0,
            "pod status writes refused"
        );
        let _ = stop.send(());
        agent.await.unwrap().unwrap();
    });
}
