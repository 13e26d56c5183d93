//! Upstream's DRA test driver (`test/e2e/dra/test-driver` of the
//! Kubernetes module, built by `hack/cluster node-bin dra-test-driver`)
//! as the kubelet plugin of an `rkube kubelet --runtime cri` node on
//! containerd 2 (which injects CDI devices), with a real control plane
//! (its resource-claim controller) and `rkube scheduler`:
//!
//! * the driver registers through `plugins_registry` and publishes its
//!   node's devices as a ResourceSlice;
//! * a pod whose claim comes from a ResourceClaimTemplate is scheduled, its
//!   claim allocated and reserved; the kubelet has the driver prepare it,
//!   and the container sees the CDI device's edits (the claim's
//!   configuration and the driver's `claim_<claim>_<request>` variable);
//!   `dra_manager_state` holds the claim for the pod and the pod-resources
//!   API reports the device for the container;
//! * after a kubelet restart the container is the same and the claim is
//!   still prepared; the node's ResourceSlices the kubelet deleted as it
//!   started are published again by the driver;
//! * deleting the pod unprepares the claim (the driver removes its CDI
//!   spec, the checkpoint forgets the claim) before the pod is gone;
//! * once the driver stops, its ResourceSlice is deleted by the kubelet
//!   after upstream's 30 s wiping delay.
//!
//! And across a switch between rkube's kubelet and upstream's (built by
//! `hack/cluster node-bin kubelet`), both ways: a pod whose claim one
//! prepared keeps its container under the other, which reads the first's
//! `dra_manager_state` and unprepares the claim when the pod is deleted.
//!
//! Needs root, hack/build-k8s, containerd 2 (hack/containerd2-build); run
//! by hack/test --full.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{
    DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, ResourceExt};
use rkube_cri::CriClient;
use rkube_kubelet::podresources::v1 as podresources;
use rkube_testcp::support::{client, wait_for};

mod common;
use common::node_bench::Bench;
use common::{built, runtime, Process};

const DRIVER: &str = "test-driver.cdi.k8s.io";

impl Bench {
    /// The driver's kubelet plugin for this node: its registration socket
    /// in the node's `plugins_registry`, its own under `plugins/`, its CDI
    /// specs where containerd reads them.
    fn dra_driver(&self, bin: &str, log: &str) -> Process {
        // As the plugin DaemonSet's hostPath (DirectoryOrCreate) makes it.
        std::fs::create_dir_all(self.root.join("plugins").join(DRIVER)).unwrap();
        let args = [
            format!("--kubeconfig={}", self.cp.kubeconfig().display()),
            "kubelet-plugin".into(),
            "--node-name=dp-node".into(),
            format!(
                "--plugin-registration-path={}",
                self.root.join("plugins_registry").display()
            ),
            format!("--datadir={}", self.root.join("plugins").display()),
            format!("--cdi-dir={}", self.cdi().display()),
        ];
        Process::start(bin, &args, &self.work.join(log))
    }

    /// `rkube scheduler` (the default scheduler's name).
    fn scheduler(&self, log: &str) -> Process {
        let args = [
            "scheduler".to_string(),
            format!("--kubeconfig={}", self.cp.scheduler_kubeconfig().display()),
            "--leader-elect=false".into(),
            "--secure-port=0".into(),
        ];
        Process::start(env!("CARGO_BIN_EXE_rkube"), &args, &self.work.join(log))
    }
}

fn object<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v).unwrap()
}

/// The claims `dra_manager_state` holds: (claim name, its pods).
fn checkpointed(root: &Path) -> Vec<(String, Vec<String>)> {
    let bytes = std::fs::read(root.join(rkube_kubelet::dra::state::FILE)).unwrap();
    rkube_kubelet::dra::state::decode(&bytes)
        .unwrap()
        .into_iter()
        .map(|c| (c.claim_name, c.pod_uids.into_iter().collect()))
        .collect()
}

/// pod-resources `List`: (claim, driver, device) of `pod`'s containers.
async fn listed(
    socket: &Path,
    pod: &str,
) -> Result<Vec<(String, String, String)>, Box<dyn std::error::Error>> {
    let mut c = podresources::pod_resources_lister_client::PodResourcesListerClient::new(
        rkube_cri::unix_channel(socket.to_path_buf(), Duration::from_secs(5)).await?,
    );
    let resp = c
        .list(podresources::ListPodResourcesRequest {})
        .await?
        .into_inner();
    Ok(resp
        .pod_resources
        .iter()
        .filter(|p| p.name == pod)
        .flat_map(|p| &p.containers)
        .flat_map(|c| &c.dynamic_resources)
        .flat_map(|d| {
            d.claim_resources.iter().map(|r| {
                (
                    d.claim_name.clone(),
                    r.driver_name.clone(),
                    r.device_name.clone(),
                )
            })
        })
        .collect())
}

async fn running(pods: &Api<Pod>, name: &str) -> Pod {
    wait_for(
        &format!("{name} Running"),
        Duration::from_secs(120),
        || async {
            let p = pods.get(name).await.ok()?;
            (p.status.as_ref()?.phase.as_deref() == Some("Running")).then_some(p)
        },
    )
    .await
}

fn container_id(p: &Pod) -> String {
    let st = p
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap();
    let id = st[0].container_id.clone().unwrap();
    id.rsplit("://").next().unwrap().to_string()
}

/// The class of the driver's devices and a template of one-device claims
/// (with a configuration the driver turns into an env var).
async fn classes(admin: &kube::Client) {
    Api::<DeviceClass>::all(admin.clone())
        .create(
            &PostParams::default(),
            &object(serde_json::json!({
                "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                "metadata": {"name": "test"},
                "spec": {"selectors": [{"cel": {"expression": format!("device.driver == \"{DRIVER}\"")}}]},
            })),
        )
        .await
        .unwrap();
    Api::<ResourceClaimTemplate>::namespaced(admin.clone(), "default")
        .create(
            &PostParams::default(),
            &object(serde_json::json!({
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": "gpu"},
                "spec": {"spec": {"devices": {
                    "requests": [{"name": "r", "exactly": {"deviceClassName": "test"}}],
                    "config": [{"requests": ["r"], "opaque": {"driver": DRIVER, "parameters": {"greeting": "hello"}}}],
                }}},
            })),
        )
        .await
        .unwrap();
}

/// A pod with a claim from the template, its container using it.
fn gpu_pod(name: &str) -> Pod {
    object(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"terminationGracePeriodSeconds": 1,
                 "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "gpu"}],
                 "containers": [{"name": "c", "image": "rkube.local/busybox:1",
                                 "command": ["sleep", "3600"],
                                 "resources": {"claims": [{"name": "gpu"}]}}]},
    }))
}

/// The claim generated for `pod`'s claim `gpu`.
fn claim_of(pod: &Pod) -> String {
    let st = pod.status.as_ref().unwrap();
    st.resource_claim_statuses.as_ref().unwrap()[0]
        .resource_claim_name
        .clone()
        .unwrap()
}

/// The driver's CDI spec of `pod`'s claim (the driver writes it when it
/// prepares the claim and removes it when it unprepares it).
async fn cdi_spec(bench: &Bench, claims: &Api<ResourceClaim>, pod: &Pod) -> std::path::PathBuf {
    let name = claim_of(pod);
    let claim = claims.get(&name).await.unwrap();
    bench
        .cdi()
        .join(format!("{DRIVER}-{}-r.json", claim.uid().unwrap()))
}

async fn gone(pods: &Api<Pod>, name: &str) {
    wait_for(&format!("{name} gone"), Duration::from_secs(90), || async {
        pods.get_opt(name).await.ok()?.is_none().then_some(())
    })
    .await;
}

#[test]
#[ignore = "needs root, hack/build-k8s, containerd 2 (hack/containerd2-build) and upstream's DRA test driver; run by hack/test --full"]
fn dra_test_driver_prepares_claims_on_an_rkube_node() {
    let driver_bin = built("cluster", &["node-bin", "dra-test-driver"]);
    let bench = Bench::up_containerd2();
    runtime().block_on(async {
        let admin = client(bench.cp.kubeconfig()).await;
        let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
        let claims: Api<ResourceClaim> = Api::namespaced(admin.clone(), "default");
        let slices: Api<ResourceSlice> = Api::all(admin.clone());
        let cri = CriClient::connect(&bench.ctrd.endpoint()).await.unwrap();
        let mut kubelet = Some(bench.rkube("kubelet.log"));
        let _scheduler = bench.scheduler("scheduler.log");
        let mut driver = Some(bench.dra_driver(&driver_bin, "driver.log"));
        let node_slices = ListParams::default().fields("spec.nodeName=dp-node");
        let published = || async {
            wait_for(
                "the driver's ResourceSlice",
                Duration::from_secs(90),
                || async {
                    let l = slices.list(&node_slices).await.ok()?;
                    l.items
                        .iter()
                        .any(|s| {
                            s.spec.driver == DRIVER
                                && s.spec.devices.as_ref().is_some_and(|d| d.len() == 4)
                        })
                        .then_some(())
                },
            )
            .await
        };
        published().await;

        classes(&admin).await;
        pods.create(&PostParams::default(), &gpu_pod("gpu-pod"))
            .await
            .unwrap();
        let pod = running(&pods, "gpu-pod").await;
        let uid = pod.uid().unwrap();
        let claim_name = claim_of(&pod);
        let claim = claims.get(&claim_name).await.unwrap();
        let results = claim
            .status
            .as_ref()
            .unwrap()
            .allocation
            .as_ref()
            .unwrap()
            .devices
            .as_ref()
            .unwrap()
            .results
            .clone()
            .unwrap();
        assert_eq!(results.len(), 1);
        assert_eq!(
            (results[0].driver.as_str(), results[0].pool.as_str()),
            (DRIVER, "dp-node")
        );
        let device = results[0].device.clone();

        // The CDI device's edits reach the container.
        let id = container_id(&pod);
        let out = cri
            .exec_sync(&id, &["env"], Duration::from_secs(10))
            .await
            .unwrap();
        let env = String::from_utf8_lossy(&out.stdout).to_string();
        let marker = format!(
            "claim_{}_r=true",
            claim_name.replace(|c: char| !c.is_ascii_alphanumeric(), "_")
        );
        assert!(env.lines().any(|l| l == "user_greeting=hello"), "{env}");
        assert!(env.lines().any(|l| l == marker), "{marker} in {env}");
        let spec = bench
            .cdi()
            .join(format!("{DRIVER}-{}-r.json", claim.uid().unwrap()));
        assert!(spec.exists(), "the driver wrote {}", spec.display());
        assert_eq!(
            checkpointed(&bench.root),
            vec![(claim_name.clone(), vec![uid.clone()])]
        );
        let pr = bench.pod_resources();
        assert_eq!(
            listed(&pr, "gpu-pod").await.unwrap(),
            vec![(claim_name.clone(), DRIVER.to_string(), device.clone())]
        );

        // A kubelet restart keeps the container and the claim.
        drop(kubelet.take());
        kubelet = Some(bench.rkube("kubelet-2.log"));
        wait_for(
            "pod-resources after the restart",
            Duration::from_secs(90),
            || async { (listed(&pr, "gpu-pod").await.ok()?.len() == 1).then_some(()) },
        )
        .await;
        let again = running(&pods, "gpu-pod").await;
        assert_eq!(container_id(&again), id, "the container was not restarted");
        assert_eq!(
            checkpointed(&bench.root),
            vec![(claim_name.clone(), vec![uid.clone()])]
        );
        // The kubelet deleted the node's slices as it started; the driver,
        // which runs, published its own again.
        published().await;

        // Deleting the pod unprepares the claim before the pod is gone.
        pods.delete("gpu-pod", &DeleteParams::default())
            .await
            .unwrap();
        gone(&pods, "gpu-pod").await;
        assert!(!spec.exists(), "the driver removed {}", spec.display());
        assert_eq!(checkpointed(&bench.root), vec![]);

        // The driver stops (SIGTERM: it removes its sockets): its slice
        // goes 30 s later.
        let mut d = driver.take().unwrap();
        let pid = d.0.id().to_string();
        assert!(std::process::Command::new("kill")
            .arg(&pid)
            .status()
            .unwrap()
            .success());
        let _ = d.0.wait();
        let gone = std::time::Instant::now();
        wait_for(
            "the driver's ResourceSlice deleted",
            Duration::from_secs(90),
            || async {
                let l = slices.list(&node_slices).await.ok()?;
                l.items.is_empty().then_some(())
            },
        )
        .await;
        assert!(
            gone.elapsed() >= Duration::from_secs(25),
            "deleted after {:?}, before the wiping delay",
            gone.elapsed()
        );
        drop(kubelet);
    });
}

#[test]
#[ignore = "needs root, hack/build-k8s, containerd 2 (hack/containerd2-build), upstream's DRA test driver and kubelet; run by hack/test --full"]
fn claims_survive_a_switch_between_rkube_and_upstream_kubelets() {
    let driver_bin = built("cluster", &["node-bin", "dra-test-driver"]);
    let upstream_bin = built("cluster", &["node-bin", "kubelet"]);
    let bench = Bench::up_containerd2();
    runtime().block_on(async {
        let admin = client(bench.cp.kubeconfig()).await;
        let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
        let claims: Api<ResourceClaim> = Api::namespaced(admin.clone(), "default");
        let _scheduler = bench.scheduler("scheduler.log");
        let _driver = bench.dra_driver(&driver_bin, "driver.log");
        classes(&admin).await;

        // rkube's kubelet prepares a claim; upstream's reads its
        // checkpoint, keeps the container, and unprepares the claim when
        // the pod is deleted.
        let rkube = bench.rkube("rkube-1.log");
        pods.create(&PostParams::default(), &gpu_pod("a"))
            .await
            .unwrap();
        let a = running(&pods, "a").await;
        let spec_a = cdi_spec(&bench, &claims, &a).await;
        assert!(spec_a.exists(), "rkube's kubelet had the claim prepared");
        drop(rkube);
        let upstream = bench.upstream(&upstream_bin, "upstream.log");
        // Its pod-resources API reports the claim from rkube's checkpoint.
        wait_for(
            "the claim in upstream's pod-resources",
            Duration::from_secs(90),
            || async { (listed(&bench.pod_resources(), "a").await.ok()?.len() == 1).then_some(()) },
        )
        .await;
        assert_eq!(container_id(&running(&pods, "a").await), container_id(&a));
        // (Upstream's kubelet runs in a mount namespace of its own here,
        // where it cannot tear down the volumes rkube's mounted: the pod's
        // deletion waits for rkube's kubelet below. The claim is
        // unprepared once the containers stopped, before that.)
        pods.delete("a", &DeleteParams::default()).await.unwrap();
        wait_for(
            "the claim of a unprepared",
            Duration::from_secs(90),
            || async { (!spec_a.exists() && checkpointed(&bench.root).is_empty()).then_some(()) },
        )
        .await;

        // And back: upstream's kubelet prepares one, rkube's unprepares it.
        pods.create(&PostParams::default(), &gpu_pod("b"))
            .await
            .unwrap();
        let b = running(&pods, "b").await;
        let spec_b = cdi_spec(&bench, &claims, &b).await;
        assert!(spec_b.exists(), "upstream's kubelet had the claim prepared");
        let (b_uid, b_id) = (b.uid().unwrap(), container_id(&b));
        drop(upstream);
        let claim_b = claim_of(&b);
        assert_eq!(
            checkpointed(&bench.root),
            vec![(claim_b, vec![b_uid])],
            "upstream's checkpoint, read by rkube's decoder"
        );
        let _rkube = bench.rkube("rkube-2.log");
        wait_for(
            "pod-resources of rkube's kubelet",
            Duration::from_secs(90),
            || async { (listed(&bench.pod_resources(), "b").await.ok()?.len() == 1).then_some(()) },
        )
        .await;
        assert_eq!(container_id(&running(&pods, "b").await), b_id);
        pods.delete("b", &DeleteParams::default()).await.unwrap();
        gone(&pods, "b").await;
        assert!(
            !spec_b.exists(),
            "rkube's kubelet unprepared the claim upstream's prepared"
        );
        assert_eq!(checkpointed(&bench.root), vec![]);
        gone(&pods, "a").await;
    });
}
