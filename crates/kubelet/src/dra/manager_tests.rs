//! The manager against a DRA driver served in the test (upstream's DRA
//! test driver runs in the `dra_driver` integration test): a claim two
//! pods share prepared once and unprepared after its last pod, a driver's
//! failure for one claim, an unregistered driver, the checkpoint read back
//! by a restarted manager, and the reconcile loop.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status};

use super::super::plugins::Plugins;
use super::super::v1::dra_plugin_server::{DraPlugin, DraPluginServer};
use super::super::v1::*;
use super::*;

const DRIVER: &str = "gpu.example.com";

/// Prepares each claim with one device `dev-<claim name>` and its CDI
/// ID; fails claims named `bad-*`; counts the calls.
#[derive(Default)]
struct Fake {
    prepared: Mutex<Vec<String>>,
    unprepared: Mutex<Vec<String>>,
}

#[tonic::async_trait]
impl DraPlugin for Fake {
    async fn node_prepare_resources(
        &self,
        req: Request<NodePrepareResourcesRequest>,
    ) -> Result<Response<NodePrepareResourcesResponse>, Status> {
        let mut claims = HashMap::new();
        for c in req.into_inner().claims {
            self.prepared.lock().unwrap().push(c.name.clone());
            let answer = match c.name.starts_with("bad-") {
                true => NodePrepareResourceResponse {
                    devices: vec![],
                    error: "no such device".into(),
                },
                false => NodePrepareResourceResponse {
                    devices: vec![Device {
                        request_names: vec!["r".into()],
                        pool_name: "node-1".into(),
                        device_name: format!("dev-{}", c.name),
                        cdi_device_ids: vec![format!("{DRIVER}/gpu=dev-{}", c.name)],
                        share_id: None,
                    }],
                    error: String::new(),
                },
            };
            claims.insert(c.uid, answer);
        }
        Ok(Response::new(NodePrepareResourcesResponse { claims }))
    }

    async fn node_unprepare_resources(
        &self,
        req: Request<NodeUnprepareResourcesRequest>,
    ) -> Result<Response<NodeUnprepareResourcesResponse>, Status> {
        let mut claims = HashMap::new();
        for c in req.into_inner().claims {
            self.unprepared.lock().unwrap().push(c.name.clone());
            claims.insert(c.uid, NodeUnprepareResourceResponse::default());
        }
        Ok(Response::new(NodeUnprepareResourcesResponse { claims }))
    }
}

fn pod(name: &str, uid: &str, claims: &[&str]) -> Pod {
    let pcs: Vec<_> = claims
        .iter()
        .map(|c| serde_json::json!({"name": c, "resourceClaimName": c}))
        .collect();
    let refs: Vec<_> = claims
        .iter()
        .map(|c| serde_json::json!({"name": c}))
        .collect();
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "ns", "uid": uid},
        "spec": {"resourceClaims": pcs,
                 "containers": [{"name": "c", "resources": {"claims": refs}}]},
    }))
    .unwrap()
}

/// Claim `name` allocated from `driver`, reserved for the pods `uids`.
fn claim(name: &str, driver: &str, uids: &[&str]) -> (ResourceClaim, bool) {
    let reserved: Vec<_> = uids
        .iter()
        .map(|u| serde_json::json!({"resource": "pods", "name": "p", "uid": u}))
        .collect();
    let c = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}")},
        "spec": {},
        "status": {"allocation": {"devices": {"results": [
            {"request": "r", "driver": driver, "pool": "node-1", "device": format!("dev-{name}")}]}},
                   "reservedFor": reserved},
    }))
    .unwrap();
    (c, false)
}

struct Bench {
    dir: std::path::PathBuf,
    fake: Arc<Fake>,
    plugins: Arc<Plugins>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Bench {
    fn drop(&mut self) {
        self.server.abort();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn bench(tag: &str) -> Bench {
    let dir = std::env::temp_dir().join(format!("rk-dramgr-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("dra.sock");
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    let fake = Arc::new(Fake::default());
    let svc = DraPluginServer::from_arc(fake.clone());
    let server = tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .serve_with_incoming(svc, UnixListenerStream::new(listener))
            .await;
    });
    let plugins = Plugins::new(None, Default::default());
    let handler = super::super::plugins::Handler(plugins.clone());
    crate::pluginmanager::Handler::register(
        &handler,
        DRIVER,
        socket.to_str().unwrap(),
        &["v1.DRAPlugin".to_string()],
    )
    .await
    .unwrap();
    Bench {
        dir,
        fake,
        plugins,
        server,
    }
}

fn names(l: &Mutex<Vec<String>>) -> Vec<String> {
    l.lock().unwrap().clone()
}

#[tokio::test]
async fn a_shared_claim_is_prepared_once_and_unprepared_after_its_last_pod() {
    let b = bench("shared").await;
    let m = Manager::open(&b.dir, None, b.plugins.clone()).unwrap();
    let (p1, p2) = (pod("p1", "u1", &["shared"]), pod("p2", "u2", &["shared"]));
    let shared = || vec![claim("shared", DRIVER, &["u1", "u2"])];
    m.prepare_claims(&p1, shared()).await.unwrap();
    m.prepare_claims(&p2, shared()).await.unwrap();
    assert_eq!(names(&b.fake.prepared), ["shared"], "prepared once");
    let c = &p1.spec.as_ref().unwrap().containers[0];
    assert_eq!(
        m.cdi_devices(&p2, c).unwrap(),
        [format!("{DRIVER}/gpu=dev-shared")]
    );
    // The checkpoint has the claim, both pods and the device.
    let file = std::fs::read(b.dir.join(state::FILE)).unwrap();
    let saved = state::decode(&file).unwrap();
    assert_eq!(saved.len(), 1);
    assert_eq!(saved[0].pod_uids.iter().collect::<Vec<_>>(), ["u1", "u2"]);
    // A restarted manager knows the claim (a container restart gets its
    // devices) and that both pods hold it.
    let again = Manager::open(&b.dir, None, b.plugins.clone()).unwrap();
    assert_eq!(
        again.cdi_devices(&p1, c).unwrap(),
        [format!("{DRIVER}/gpu=dev-shared")]
    );
    assert!(again.might_need_unprepare("u1") && again.might_need_unprepare("u2"));
    again.unprepare(&p1).await.unwrap();
    assert!(names(&b.fake.unprepared).is_empty(), "p2 still uses it");
    assert!(!again.might_need_unprepare("u1"));
    again.unprepare(&p2).await.unwrap();
    assert_eq!(names(&b.fake.unprepared), ["shared"]);
    assert!(!again.might_need_unprepare("u2"));
    assert!(
        state::decode(&std::fs::read(b.dir.join(state::FILE)).unwrap())
            .unwrap()
            .is_empty()
    );
    // Idempotent.
    again.unprepare(&p2).await.unwrap();
    assert_eq!(names(&b.fake.unprepared), ["shared"]);
}

#[tokio::test]
async fn failures_keep_the_pod_from_starting_with_upstreams_words() {
    let b = bench("fail").await;
    let m = Manager::in_memory(None, b.plugins.clone());
    let p = pod("p", "u", &["bad-one"]);
    let err = m
        .prepare_claims(&p, vec![claim("bad-one", DRIVER, &["u"])])
        .await
        .unwrap_err();
    assert_eq!(
        err,
        "NodePrepareResources failed for ResourceClaim bad-one: no such device"
    );
    // Tracked for the pod (its deletion unprepares it), not prepared: the
    // next sync asks the driver again.
    assert!(m.might_need_unprepare("u"));
    let _ = m
        .prepare_claims(&p, vec![claim("bad-one", DRIVER, &["u"])])
        .await;
    assert_eq!(names(&b.fake.prepared), ["bad-one", "bad-one"]);

    // Checked before the cache is touched: nothing to unprepare after.
    let q = pod("q", "v", &["gpu"]);
    let err = m
        .prepare_claims(&q, vec![claim("gpu", "other.example.com", &["v"])])
        .await
        .unwrap_err();
    assert_eq!(err, "DRA driver other.example.com is not registered");
    let err = m
        .prepare_claims(&q, vec![claim("gpu", DRIVER, &["someone-else"])])
        .await
        .unwrap_err();
    assert_eq!(
        err,
        "pod q (v) is not allowed to use ResourceClaim gpu (uid-gpu)"
    );
    let (mut unallocated, _) = claim("gpu", DRIVER, &["v"]);
    unallocated.status.as_mut().unwrap().allocation = None;
    let err = m
        .prepare_claims(&q, vec![(unallocated, false)])
        .await
        .unwrap_err();
    assert_eq!(err, "ResourceClaim gpu: not allocated");
    assert!(!m.might_need_unprepare("v"));
    // A claim made from a template must be the pod's own.
    let (not_owned, _) = claim("gpu", DRIVER, &["v"]);
    let err = m
        .prepare_claims(&q, vec![(not_owned, true)])
        .await
        .unwrap_err();
    assert!(err.ends_with("(Pod is not owner)"), "{err}");
}

#[tokio::test]
async fn the_reconcile_loop_unprepares_claims_of_pods_that_are_gone() {
    let b = bench("reconcile").await;
    let m = Manager::in_memory(None, b.plugins.clone());
    m.prepare_claims(&pod("a", "ua", &["ca"]), vec![claim("ca", DRIVER, &["ua"])])
        .await
        .unwrap();
    m.prepare_claims(&pod("b", "ub", &["cb"]), vec![claim("cb", DRIVER, &["ub"])])
        .await
        .unwrap();
    m.reconcile(&|uid| uid == "ua").await;
    assert_eq!(names(&b.fake.unprepared), ["cb"]);
    assert!(m.might_need_unprepare("ua") && !m.might_need_unprepare("ub"));
    // Its driver gone, a claim stays until the driver is back.
    b.plugins
        .remove(DRIVER, b.dir.join("dra.sock").to_str().unwrap());
    let err = m.unprepare(&pod("a", "ua", &["ca"])).await.unwrap_err();
    assert_eq!(
        err,
        "unprepare dynamic resources: DRA driver gpu.example.com is not registered"
    );
    assert!(m.might_need_unprepare("ua"));
}

#[tokio::test]
async fn containers_report_the_health_of_their_claims_devices() {
    let b = bench("health").await;
    let m = Manager::in_memory(None, b.plugins.clone());
    let p = pod("p", "u", &["gpu"]);
    m.prepare_claims(&p, vec![claim("gpu", DRIVER, &["u"])])
        .await
        .unwrap();
    let mut status: k8s_openapi::api::core::v1::PodStatus =
        serde_json::from_value(serde_json::json!({"containerStatuses": [
            {"name": "c", "image": "i", "imageID": "", "ready": true, "restartCount": 0}]}))
        .unwrap();
    let report = |st: &k8s_openapi::api::core::v1::PodStatus| {
        let rs = st.container_statuses.as_ref().unwrap()[0]
            .allocated_resources_status
            .clone()
            .unwrap();
        assert_eq!(rs.len(), 1);
        assert_eq!(rs[0].name, "claim:gpu");
        let h = &rs[0].resources.as_ref().unwrap()[0];
        assert_eq!(h.resource_id, format!("{DRIVER}/gpu=dev-gpu"));
        (h.health.clone().unwrap(), h.message.clone())
    };
    // Not reported by the driver: Unknown.
    m.set_allocated_resources_status(&p, &mut status);
    assert_eq!(report(&status), ("Unknown".to_string(), None));
    b.plugins.health().update(
        DRIVER,
        vec![(
            "node-1".into(),
            "dev-gpu".into(),
            super::super::health::Health::Unhealthy,
            "ECC errors".into(),
            std::time::Duration::from_secs(30),
        )],
        k8s_openapi::jiff::Timestamp::now(),
    );
    m.set_allocated_resources_status(&p, &mut status);
    assert_eq!(
        report(&status),
        ("Unhealthy".to_string(), Some("ECC errors".to_string()))
    );
}
