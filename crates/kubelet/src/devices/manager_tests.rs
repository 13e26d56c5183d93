//! The manager against a device plugin served in the test (upstream's
//! sample plugin runs in the `device_plugins` integration test): init
//! containers' devices reused, the plugin's preferences, exhaustion, the
//! checkpoint read back, health and disconnection.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, UnixListenerStream};
use tonic::{Request, Response, Status};

use super::super::registration;
use super::super::v1beta1::device_plugin_server::{DevicePlugin, DevicePluginServer};
use super::super::v1beta1::*;
use super::*;

const GPU: &str = "example.com/gpu";

fn device(id: &str, health: &str) -> Device {
    Device {
        id: id.into(),
        health: health.into(),
        topology: None,
    }
}

/// Three devices; prefers `d3`, then `d2`, then `d1`; answers `Allocate`
/// with `DEVS` set to the devices asked for.
struct Fake {
    updates: std::sync::Mutex<Option<mpsc::Receiver<Vec<Device>>>>,
}

type Devices = Pin<Box<dyn futures::Stream<Item = Result<ListAndWatchResponse, Status>> + Send>>;

#[tonic::async_trait]
impl DevicePlugin for Fake {
    async fn get_device_plugin_options(
        &self,
        _: Request<Empty>,
    ) -> Result<Response<DevicePluginOptions>, Status> {
        Ok(Response::new(DevicePluginOptions {
            pre_start_required: false,
            get_preferred_allocation_available: true,
        }))
    }

    type ListAndWatchStream = Devices;

    async fn list_and_watch(&self, _: Request<Empty>) -> Result<Response<Devices>, Status> {
        let rx = self.updates.lock().unwrap().take().expect("one stream");
        let first = ["d1", "d2", "d3"].map(|d| device(d, HEALTHY)).to_vec();
        use futures::StreamExt;
        let stream = futures::stream::iter([first])
            .chain(ReceiverStream::new(rx))
            .map(|devices| Ok(ListAndWatchResponse { devices }));
        Ok(Response::new(Box::pin(stream)))
    }

    async fn get_preferred_allocation(
        &self,
        req: Request<PreferredAllocationRequest>,
    ) -> Result<Response<PreferredAllocationResponse>, Status> {
        let r = &req.into_inner().container_requests[0];
        let ids: Vec<String> = ["d3", "d2", "d1"]
            .iter()
            .map(|s| s.to_string())
            .filter(|d| r.available_device_i_ds.contains(d))
            .take(r.allocation_size as usize)
            .collect();
        Ok(Response::new(PreferredAllocationResponse {
            container_responses: vec![ContainerPreferredAllocationResponse { device_i_ds: ids }],
        }))
    }

    async fn allocate(
        &self,
        req: Request<AllocateRequest>,
    ) -> Result<Response<AllocateResponse>, Status> {
        let mut ids = req.into_inner().container_requests[0].devices_ids.clone();
        ids.sort();
        Ok(Response::new(AllocateResponse {
            container_responses: vec![ContainerAllocateResponse {
                envs: [("DEVS".to_string(), ids.join(","))].into(),
                ..Default::default()
            }],
        }))
    }

    async fn pre_start_container(
        &self,
        _: Request<PreStartContainerRequest>,
    ) -> Result<Response<PreStartContainerResponse>, Status> {
        Ok(Response::new(PreStartContainerResponse {}))
    }
}

fn pod(uid: &str, init: i64, app: i64) -> Pod {
    let c = |name: &str, n: i64| {
        serde_json::json!({"name": name, "image": "x",
                           "resources": {"limits": {GPU: n.to_string()}}})
    };
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": uid, "namespace": "default", "uid": uid},
        "spec": {"initContainers": [c("init", init)], "containers": [c("app", app)]},
    }))
    .unwrap()
}

fn held(m: &Manager, uid: &str, container: &str) -> Vec<String> {
    m.devices_of(uid, container)
        .get(GPU)
        .map(|d| d.keys().cloned().collect())
        .unwrap_or_default()
}

async fn advertised(m: &Manager, want: (&str, &str)) {
    for _ in 0..200 {
        let (c, a) = m.capacity();
        if c.get(GPU).map(|q| q.0.as_str()) == Some(want.0)
            && a.get(GPU).map(|q| q.0.as_str()) == Some(want.1)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("capacity/allocatable never {want:?}: {:?}", m.capacity());
}

#[tokio::test]
async fn allocates_as_upstream_and_keeps_it_in_the_checkpoint() {
    let dir = std::env::temp_dir().join(format!("rk-devmgr-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let m = Arc::new(Manager::open(&dir));
    let socket = dir.join("fake.sock");
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    let (tx, rx) = mpsc::channel(4);
    let fake = Fake {
        updates: std::sync::Mutex::new(Some(rx)),
    };
    let server = tokio::spawn(tonic::transport::Server::builder().serve_with_incoming(
        DevicePluginServer::new(fake),
        UnixListenerStream::new(listener),
    ));
    registration::connect(m.clone(), GPU.into(), socket.clone())
        .await
        .unwrap();
    assert_eq!(
        registration::connect(m.clone(), GPU.into(), socket.clone()).await,
        Err(format!(
            "device plugin already connected: {}",
            socket.display()
        ))
    );
    advertised(&m, ("3", "3")).await;

    // The init container gets the plugin's favourite; the app container
    // reuses it and takes the next one it prefers.
    let p = pod("p", 1, 2);
    assert!(m.wants_devices(&p));
    m.allocate_pod(&p).await.unwrap();
    assert_eq!(held(&m, "p", "init"), ["d3"]);
    assert_eq!(held(&m, "p", "app"), ["d2", "d3"]);
    let app = &p.spec.as_ref().unwrap().containers[0];
    let opts = m.run_options(&p, app).await.unwrap().unwrap();
    assert_eq!(opts.envs, [("DEVS".to_string(), "d2,d3".to_string())]);

    // One device is left: a pod asking for two is refused, and the
    // refusal marks nothing in use.
    let q = pod("q", 0, 2);
    let why =
        "requested number of devices unavailable for example.com/gpu. Requested: 2, Available: 1";
    assert_eq!(m.allocate_pod(&q).await.unwrap_err(), why);
    assert_eq!(m.allocate_pod(&q).await.unwrap_err(), why);

    // The same request mapped by the scheduler to a DRA claim (the
    // resource is also backed by DRA): not the device plugin's to serve.
    let mut dra = pod("dra", 0, 2);
    dra.status = Some(
        serde_json::from_value(serde_json::json!({"extendedResourceClaimStatus": {
            "resourceClaimName": "dra-extended-resources-x",
            "requestMappings": [{"containerName": "app", "resourceName": GPU,
                                 "requestName": "container-0-request-0"}]}}))
        .unwrap(),
    );
    // (One device is free; the two asked for are not the plugin's.)
    m.allocate_pod(&dra).await.unwrap();
    assert!(held(&m, "dra", "app").is_empty());
    let dra_app = &dra.spec.as_ref().unwrap().containers[0];
    assert!(m.run_options(&dra, dra_app).await.unwrap().is_none());

    // A restarted kubelet reads what containers hold; the resource is at
    // zero until its plugin registers again.
    let again = Manager::open(&dir);
    assert_eq!(held(&again, "p", "app"), ["d2", "d3"]);
    let (c, a) = again.capacity();
    assert_eq!((c[GPU].0.as_str(), a[GPU].0.as_str()), ("0", "0"));

    // Freed with its pod.
    m.release("p");
    m.allocate_pod(&q).await.unwrap();
    assert_eq!(held(&m, "q", "app"), ["d2", "d3"]);

    // An unhealthy device counts in capacity only; without its plugin
    // every device is unhealthy.
    tx.send(vec![
        device("d1", "Unhealthy"),
        device("d2", HEALTHY),
        device("d3", HEALTHY),
    ])
    .await
    .unwrap();
    advertised(&m, ("3", "2")).await;

    // The devices' health in the container's status: per resource, by
    // device ID, entries of others (DRA's) kept, its own replaced.
    let health = |m: &Manager| {
        let mut status: k8s_openapi::api::core::v1::PodStatus =
            serde_json::from_value(serde_json::json!({"containerStatuses": [
                {"name": "app", "image": "x", "imageID": "", "ready": true, "restartCount": 0,
                 "allocatedResourcesStatus": [
                     {"name": "claim:c", "resources": [{"resourceID": "cdi/x", "health": "Healthy"}]},
                     {"name": GPU, "resources": []}]},
                {"name": "other", "image": "x", "imageID": "", "ready": true, "restartCount": 0}]}))
            .unwrap();
        m.set_allocated_resources_status("q", &mut status);
        serde_json::to_value(status.container_statuses.unwrap()).unwrap()
    };
    let expect = |d2: &str| {
        serde_json::json!([
            {"name": "app", "image": "x", "imageID": "", "ready": true, "restartCount": 0,
             "allocatedResourcesStatus": [
                 {"name": "claim:c", "resources": [{"resourceID": "cdi/x", "health": "Healthy"}]},
                 {"name": GPU, "resources": [{"resourceID": "d2", "health": d2},
                                             {"resourceID": "d3", "health": "Healthy"}]}]},
            {"name": "other", "image": "x", "imageID": "", "ready": true, "restartCount": 0}])
    };
    assert_eq!(health(&m), expect("Healthy"));
    tx.send(vec![
        device("d1", HEALTHY),
        device("d2", "Unhealthy"),
        device("d3", HEALTHY),
    ])
    .await
    .unwrap();
    advertised(&m, ("3", "2")).await;
    for _ in 0..200 {
        if health(&m) == expect("Unhealthy") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(health(&m), expect("Unhealthy"));

    server.abort();
    drop(tx);
    advertised(&m, ("3", "0")).await;
    // As upstream: the plugin's last list still tells (its devices are
    // unschedulable, not reported otherwise).
    assert_eq!(health(&m), expect("Unhealthy"));
    let _ = std::fs::remove_dir_all(&dir);
}
