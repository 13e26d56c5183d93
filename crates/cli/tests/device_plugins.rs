//! Upstream's sample device plugin (`test/images/sample-device-plugin` of
//! the Kubernetes module, built by `hack/cluster node-bin`) on an
//! `rkube kubelet --runtime cri` node with a real control plane and
//! containerd:
//!
//! * the plugin registers on `<root-dir>/device-plugins/kubelet.sock` (it
//!   runs in a mount namespace of its own where that directory is
//!   upstream's fixed `/var/lib/kubelet/device-plugins`, as a plugin
//!   DaemonSet's hostPath gives it) and the Node advertises
//!   `example.com/resource: 2`;
//! * a pod asking for 2 runs with both fake devices mounted (the plugin's
//!   `Allocate` answer), the pod-resources API reports them, the
//!   checkpoint holds them in upstream's format;
//! * a pod asking for one more is refused at admission with upstream's
//!   `UnexpectedAdmissionError`;
//! * after a kubelet restart the plugin registers again, the pod keeps its
//!   container and devices, and a new pod is still refused (no device
//!   assigned twice); once the pod is deleted a new one gets a device;
//! * when the plugin stops, allocatable drops to 0;
//! * with `CDI_ENABLED` the plugin also answers with CDI device names, which
//!   the containerd hack/containerd installs (1.6) ignores: the container is
//!   not created (`CreateContainerConfigError`).
//!
//! On containerd 2 (`hack/containerd2-build`), the plugin's CDI devices
//! reach the container: the spec's env var and device node.
//!
//! Registered through `plugins_registry` instead (upstream's plugin watcher
//! protocol: the plugin skips `Register` when `device-plugins/DEPRECATION`
//! exists), the plugin's devices reach a pod the same way.
//!
//! And across a switch between upstream's kubelet (built by `hack/cluster
//! node-bin kubelet`, its device plugin directory bound to this node's) and
//! rkube's, both ways: a pod holding both devices keeps its container, each
//! kubelet reads the other's checkpoint, and a pod asking for one more is
//! refused.
//!
//! Needs root, hack/build-k8s, hack/containerd; run by hack/test --full.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::{Api, ResourceExt};
use rkube_cri::CriClient;
use rkube_kubelet::podresources::v1 as podresources;
use rkube_testcp::support::{client, wait_for};

mod common;
use common::node_bench::{in_namespace, Bench};
use common::{built, runtime, Process};

const RESOURCE: &str = "example.com/resource";

impl Bench {
    fn plugin(&self, bin: &str, log: &str) -> Process {
        in_namespace(
            &self.root,
            Some(&self.cdi()),
            bin,
            &[],
            &self.work.join(log),
        )
    }

    /// The plugin announcing itself in `plugins_registry` (upstream's
    /// plugin watcher) instead of calling `Register`: it skips `Register`
    /// when `device-plugins/DEPRECATION` exists.
    fn registry_plugin(&self, bin: &str, log: &str) -> Process {
        std::fs::write(self.dir.join("DEPRECATION"), "").unwrap();
        let args = [
            "PLUGIN_SOCK_DIR=/var/lib/kubelet/plugins_registry/".to_string(),
            bin.to_string(),
        ];
        in_namespace(
            &self.root,
            Some(&self.cdi()),
            "env",
            &args,
            &self.work.join(log),
        )
    }

    /// The plugin answering with CDI device names too (`CDI_ENABLED`).
    fn cdi_plugin(&self, bin: &str, log: &str) -> Process {
        let args = ["CDI_ENABLED=1".to_string(), bin.to_string()];
        in_namespace(
            &self.root,
            Some(&self.cdi()),
            "env",
            &args,
            &self.work.join(log),
        )
    }
    async fn registration_socket(&self) {
        let socket = self.dir.join(rkube_kubelet::devices::SOCKET_NAME);
        wait_for(
            "the registration socket",
            Duration::from_secs(60),
            || async { socket.exists().then_some(()) },
        )
        .await;
    }

    /// Once the kubelet has the plugin's two devices (pod-resources
    /// `GetAllocatableResources`; either kubelet serves it).
    async fn plugin_registered(&self) {
        let pr = self.pod_resources();
        wait_for("the plugin registered", Duration::from_secs(90), || async {
            (allocatable(&pr).await.ok()? == ["Dev-1", "Dev-2"]).then_some(())
        })
        .await;
    }
}

fn devices_pod(name: &str, n: u32) -> Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"nodeName": "dp-node", "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "c", "image": "rkube.local/busybox:1",
                                 "command": ["sleep", "3600"],
                                 "resources": {"limits": {RESOURCE: n.to_string()}}}]},
    }))
    .unwrap()
}

/// The Node's (capacity, allocatable) of the plugin's resource.
async fn advertised(nodes: &Api<Node>) -> Option<(String, String)> {
    let st = nodes.get("dp-node").await.ok()?.status?;
    Some((
        st.capacity?.get(RESOURCE)?.0.clone(),
        st.allocatable?.get(RESOURCE)?.0.clone(),
    ))
}

async fn wait_advertised(nodes: &Api<Node>, want: (&str, &str), what: &str) {
    wait_for(what, Duration::from_secs(90), || async {
        let (c, a) = advertised(nodes).await?;
        (c == want.0 && a == want.1).then_some(())
    })
    .await;
}

async fn running(pods: &Api<Pod>, name: &str) -> Pod {
    wait_for(
        &format!("{name} Running"),
        Duration::from_secs(90),
        || async {
            let p = pods.get(name).await.ok()?;
            (p.status.as_ref()?.phase.as_deref() == Some("Running")).then_some(p)
        },
    )
    .await
}

async fn refused(pods: &Api<Pod>, name: &str) -> (String, String) {
    wait_for(
        &format!("{name} refused"),
        Duration::from_secs(60),
        || async {
            let st = pods.get(name).await.ok()?.status?;
            (st.phase.as_deref() == Some("Failed")).then_some((st.reason?, st.message?))
        },
    )
    .await
}

fn container_id(p: &Pod) -> String {
    let id = p
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0]
        .container_id
        .clone()
        .unwrap();
    id.rsplit("://").next().unwrap().to_string()
}

/// A pod-resources client on `socket`.
macro_rules! lister {
    ($socket:expr) => {
        podresources::pod_resources_lister_client::PodResourcesListerClient::new(
            rkube_cri::unix_channel($socket.to_path_buf(), Duration::from_secs(5)).await?,
        )
    };
}

type Answer = Result<Vec<String>, Box<dyn std::error::Error>>;

/// The devices the kubelet can hand out (pod-resources
/// `GetAllocatableResources`): what its plugins listed healthy (an error
/// while the kubelet restarts).
async fn allocatable(socket: &Path) -> Answer {
    let resp = lister!(socket)
        .get_allocatable_resources(podresources::AllocatableResourcesRequest {})
        .await?
        .into_inner();
    let mut ids: Vec<String> = resp
        .devices
        .into_iter()
        .flat_map(|d| d.device_ids)
        .collect();
    ids.sort();
    Ok(ids)
}

/// The devices pod-resources `List` reports for `pod`'s container.
async fn listed(socket: &Path, pod: &str) -> Answer {
    let resp = lister!(socket)
        .list(podresources::ListPodResourcesRequest {})
        .await?
        .into_inner();
    let mut ids: Vec<String> = resp
        .pod_resources
        .iter()
        .filter(|p| p.name == pod)
        .flat_map(|p| &p.containers)
        .flat_map(|c| &c.devices)
        .filter(|d| d.resource_name == RESOURCE)
        .flat_map(|d| d.device_ids.clone())
        .collect();
    ids.sort();
    Ok(ids)
}

fn checkpointed(dir: &Path, uid: &str) -> Vec<String> {
    let bytes = std::fs::read(dir.join(rkube_kubelet::devices::checkpoint::FILE)).unwrap();
    let data = rkube_kubelet::devices::checkpoint::decode(&bytes).unwrap();
    let mut ids: Vec<String> = data
        .entries
        .iter()
        .flatten()
        .filter(|e| e.pod_uid == uid && e.resource == RESOURCE)
        .flat_map(|e| {
            e.device_ids
                .iter()
                .flatten()
                .flat_map(|(_, d)| d.iter().flatten().cloned())
        })
        .collect();
    ids.sort();
    ids
}

#[test]
#[ignore = "needs root, hack/build-k8s, hack/containerd and upstream's sample device plugin; run by hack/test --full"]
fn sample_device_plugin_on_an_rkube_node() {
    let plugin_bin = built("cluster", &["node-bin", "sample-device-plugin"]);
    let bench = Bench::up();
    let (cp, dir) = (&bench.cp, &bench.dir);
    runtime().block_on(async {
        let admin = client(cp.kubeconfig()).await;
        let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
        let nodes: Api<Node> = Api::all(admin.clone());
        let cri = CriClient::connect(&bench.ctrd.endpoint()).await.unwrap();
        let mut rkube = bench.rkube("kubelet-1.log");
        bench.registration_socket().await;
        let sample = bench.plugin(&plugin_bin, "plugin.log");
        wait_advertised(&nodes, ("2", "2"), "example.com/resource advertised").await;

        // Two devices for one pod: mounted, listed, checkpointed.
        pods.create(&Default::default(), &devices_pod("two", 2)).await.unwrap();
        let two = running(&pods, "two").await;
        let id = container_id(&two);
        for dev in ["/tmp/Dev-1", "/tmp/Dev-2"] {
            let out = cri.exec_sync(&id, &["test", "-e", dev], Duration::from_secs(10)).await.unwrap();
            assert_eq!(out.exit_code, 0, "{dev} is in the container");
        }
        let pr = bench.pod_resources();
        assert_eq!(listed(&pr, "two").await.unwrap(), ["Dev-1", "Dev-2"]);
        let uid = two.uid().unwrap();
        assert_eq!(checkpointed(dir, &uid), ["Dev-1", "Dev-2"]);
        // Their health in the container's status (ResourceHealthStatus).
        let health = wait_for("allocatedResourcesStatus", Duration::from_secs(30), || async {
            let p = pods.get("two").await.ok()?;
            let cs = p.status?.container_statuses?.into_iter().next()?;
            cs.allocated_resources_status
        })
        .await;
        assert_eq!(
            serde_json::to_value(&health).unwrap(),
            serde_json::json!([{"name": RESOURCE, "resources": [
                {"resourceID": "Dev-1", "health": "Healthy"},
                {"resourceID": "Dev-2", "health": "Healthy"}]}])
        );

        // None left: refused as upstream refuses it.
        pods.create(&Default::default(), &devices_pod("three", 1)).await.unwrap();
        assert_eq!(
            refused(&pods, "three").await,
            (
                "UnexpectedAdmissionError".to_string(),
                "Pod was rejected: Allocate failed due to requested number of devices unavailable for example.com/resource. Requested: 1, Available: 0, which is unexpected".to_string()
            )
        );

        // A kubelet restart: the plugin registers again (it watches for the
        // kubelet's socket), the pod keeps its container and its devices.
        drop(rkube);
        rkube = bench.rkube("kubelet-2.log");
        bench.plugin_registered().await;
        wait_advertised(&nodes, ("2", "2"), "example.com/resource advertised again").await;
        let after = running(&pods, "two").await;
        assert_eq!(container_id(&after), id, "the container is not restarted");
        assert_eq!(checkpointed(dir, &uid), ["Dev-1", "Dev-2"]);
        pods.create(&Default::default(), &devices_pod("four", 1)).await.unwrap();
        assert!(
            refused(&pods, "four").await.1.contains("Requested: 1, Available: 0"),
            "both devices are still held"
        );

        // Freed with the pod.
        pods.delete("two", &Default::default()).await.unwrap();
        wait_for("two gone", Duration::from_secs(60), || async {
            pods.get_opt("two").await.ok()?.is_none().then_some(())
        })
        .await;
        pods.create(&Default::default(), &devices_pod("five", 1)).await.unwrap();
        running(&pods, "five").await;

        // The plugin gone: its devices are unhealthy, none allocatable.
        drop(sample);
        wait_advertised(&nodes, ("2", "0"), "no allocatable device without the plugin").await;

        // CDI devices on a containerd without CDI (Debian's 1.6, which
        // hack/containerd installs): the container is not started without
        // them.
        let runtime = cri.version().await.unwrap();
        assert!(runtime.runtime_version.starts_with("1.6."), "{runtime:?}: CDI needs a containerd configured for it");
        let _cdi = bench.cdi_plugin(&plugin_bin, "plugin-cdi.log");
        bench.plugin_registered().await;
        // Admission reads the Node as the API has it.
        wait_advertised(&nodes, ("2", "2"), "the CDI plugin's devices advertised").await;
        pods.create(&Default::default(), &devices_pod("six", 1)).await.unwrap();
        let message = wait_for("six waiting", Duration::from_secs(60), || async {
            let st = pods.get("six").await.ok()?.status?;
            let w = st.container_statuses?[0].state.clone()?.waiting?;
            (w.reason.as_deref() == Some("CreateContainerConfigError")).then_some(w.message?)
        })
        .await;
        assert!(message.contains("does not support CDI devices"), "{message}");
        drop(rkube);
    });
}

#[test]
#[ignore = "needs root, hack/build-k8s, hack/containerd, upstream's kubelet and sample device plugin; run by hack/test --full"]
fn device_pods_survive_a_switch_between_upstream_and_rkube_kubelets() {
    let plugin_bin = built("cluster", &["node-bin", "sample-device-plugin"]);
    let upstream_bin = built("cluster", &["node-bin", "kubelet"]);
    let bench = Bench::up();
    runtime().block_on(async {
        let admin = client(bench.cp.kubeconfig()).await;
        let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
        let pr = bench.pod_resources();

        // Under upstream's kubelet: a pod holding both devices, in
        // upstream's checkpoint.
        let upstream = bench.upstream(&upstream_bin, "upstream-1.log");
        bench.registration_socket().await;
        let sample = bench.plugin(&plugin_bin, "plugin.log");
        bench.plugin_registered().await;
        pods.create(&Default::default(), &devices_pod("two", 2))
            .await
            .unwrap();
        let two = running(&pods, "two").await;
        let (id, uid) = (container_id(&two), two.uid().unwrap());
        assert_eq!(checkpointed(&bench.dir, &uid), ["Dev-1", "Dev-2"]);

        // rkube's kubelet reads upstream's checkpoint: the pod keeps its
        // container and devices, none is handed out again.
        drop(upstream);
        let rkube = bench.rkube("rkube.log");
        bench.plugin_registered().await;
        assert_eq!(listed(&pr, "two").await.unwrap(), ["Dev-1", "Dev-2"]);
        assert_eq!(container_id(&running(&pods, "two").await), id);
        pods.create(&Default::default(), &devices_pod("three", 1))
            .await
            .unwrap();
        assert!(refused(&pods, "three")
            .await
            .1
            .contains("Requested: 1, Available: 0"));

        // And back: upstream's kubelet reads rkube's checkpoint the same way.
        drop(rkube);
        let _upstream = bench.upstream(&upstream_bin, "upstream-2.log");
        bench.plugin_registered().await;
        assert_eq!(listed(&pr, "two").await.unwrap(), ["Dev-1", "Dev-2"]);
        pods.create(&Default::default(), &devices_pod("four", 1))
            .await
            .unwrap();
        let (reason, message) = refused(&pods, "four").await;
        assert_eq!(reason, "UnexpectedAdmissionError");
        assert!(message.contains("Requested: 1, Available: 0"), "{message}");
        assert_eq!(container_id(&running(&pods, "two").await), id);
        drop(sample);
    });
}

#[test]
#[ignore = "needs root, hack/build-k8s, hack/containerd and upstream's sample device plugin; run by hack/test --full"]
fn sample_device_plugin_registers_through_plugins_registry() {
    let plugin_bin = built("cluster", &["node-bin", "sample-device-plugin"]);
    let bench = Bench::up();
    runtime().block_on(async {
        let admin = client(bench.cp.kubeconfig()).await;
        let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
        let nodes: Api<Node> = Api::all(admin.clone());
        let _rkube = bench.rkube("kubelet.log");
        bench.registration_socket().await;
        let sample = bench.registry_plugin(&plugin_bin, "plugin.log");
        bench.plugin_registered().await;
        let registered = std::fs::read_dir(bench.root.join(rkube_kubelet::pluginmanager::DIR))
            .unwrap()
            .count();
        assert_eq!(registered, 1, "the plugin's socket is in plugins_registry");
        let log = std::fs::read_to_string(bench.work.join("plugin.log")).unwrap();
        assert!(
            log.contains("Deprecation file found. Skip registration"),
            "the plugin did not call Register: {log}"
        );
        wait_advertised(&nodes, ("2", "2"), "example.com/resource advertised").await;
        pods.create(&Default::default(), &devices_pod("one", 1))
            .await
            .unwrap();
        running(&pods, "one").await;
        assert_eq!(
            listed(&bench.pod_resources(), "one").await.unwrap().len(),
            1
        );
        drop(sample);
        wait_advertised(
            &nodes,
            ("2", "0"),
            "no allocatable device without the plugin",
        )
        .await;
    });
}

#[test]
#[ignore = "needs root, hack/build-k8s, containerd 2 (hack/containerd2-build) and upstream's sample device plugin; run by hack/test --full"]
fn cdi_devices_reach_containers_on_containerd_2() {
    let plugin_bin = built("cluster", &["node-bin", "sample-device-plugin"]);
    let bench = Bench::up_containerd2();
    runtime().block_on(async {
        let admin = client(bench.cp.kubeconfig()).await;
        let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
        let nodes: Api<Node> = Api::all(admin.clone());
        let cri = CriClient::connect(&bench.ctrd.endpoint()).await.unwrap();
        let _rkube = bench.rkube("kubelet.log");
        bench.registration_socket().await;
        let _cdi = bench.cdi_plugin(&plugin_bin, "plugin.log");
        wait_advertised(&nodes, ("2", "2"), "example.com/resource advertised").await;
        assert!(
            bench.cdi().join("example.com.json").exists(),
            "the plugin wrote its CDI spec"
        );
        pods.create(&Default::default(), &devices_pod("one", 1))
            .await
            .unwrap();
        let one = running(&pods, "one").await;
        let id = container_id(&one);
        // The spec's edits for the device: an env var and a device node.
        let env = cri
            .exec_sync(
                &id,
                &["sh", "-c", "echo $CDI_DEVICE"],
                Duration::from_secs(10),
            )
            .await
            .unwrap();
        let name = String::from_utf8_lossy(&env.stdout).trim().to_string();
        assert!(
            ["CDI-Dev-1", "CDI-Dev-2"].contains(&name.as_str()),
            "CDI_DEVICE={name:?}"
        );
        let node = format!("/tmp/{name}");
        let out = cri
            .exec_sync(&id, &["test", "-b", &node], Duration::from_secs(10))
            .await
            .unwrap();
        assert_eq!(
            out.exit_code, 0,
            "{node} is a block device in the container"
        );
    });
}
