//! The DRA drivers' kubelet plugins (upstream's `DRAPluginManager`): a
//! driver registers through [`crate::pluginmanager`] (type `DRAPlugin`),
//! naming the gRPC services it serves; the kubelet picks the first the
//! driver lists that it speaks (`v1.DRAPlugin`, `v1beta1.DRAPlugin`: the
//! same messages at two paths) and calls `NodePrepareResources` and
//! `NodeUnprepareResources` on the driver's socket.
//!
//! A driver that also serves `v1.DRAResourceHealth` is followed: its
//! `NodeWatchResources` stream feeds [`super::health::HealthCache`]
//! (tried again every 5 s while it fails; given up when the driver does
//! not implement it).
//!
//! The node's ResourceSlices belong to the drivers that run on it: at
//! start the kubelet deletes them all (a driver that still runs publishes
//! its own again), and 30 s after a driver's last plugin went away, those
//! of that driver, unless it came back (upstream's wiping delay).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Client};
use tonic::transport::Channel;

use super::health::{self, Health, HealthCache};
use super::health_v1::dra_resource_health_client::DraResourceHealthClient;
use super::health_v1::NodeWatchResourcesRequest;
use super::v1::{
    NodePrepareResourcesRequest, NodePrepareResourcesResponse, NodeUnprepareResourcesRequest,
    NodeUnprepareResourcesResponse,
};

/// The services the kubelet speaks, preferred first.
pub const SERVICES: [&str; 2] = ["v1.DRAPlugin", "v1beta1.DRAPlugin"];

/// A call's deadline (upstream's `defaultClientCallTimeout`).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(45);

/// How long a driver may be gone before its ResourceSlices are deleted.
pub const WIPING_DELAY: Duration = Duration::from_secs(30);

/// Dialing a driver's socket.
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// One registered plugin of a driver.
#[derive(Clone)]
pub struct Plugin {
    /// The driver's name.
    pub driver: String,
    /// Its socket.
    pub endpoint: String,
    /// The gRPC package of the service chosen (`k8s.io.kubelet.pkg.apis.dra.v1`).
    package: &'static str,
    channel: Channel,
    /// The task following its health stream.
    health: Option<tokio::task::AbortHandle>,
}

impl Plugin {
    async fn unary<Req, Resp>(&self, method: &str, req: Req) -> Result<Resp, tonic::Status>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let mut grpc = tonic::client::Grpc::new(self.channel.clone());
        grpc.ready()
            .await
            .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
        let path =
            http::uri::PathAndQuery::try_from(format!("/{}.DRAPlugin/{method}", self.package))
                .map_err(|e| tonic::Status::internal(e.to_string()))?;
        let mut request = tonic::Request::new(req);
        request.set_timeout(CALL_TIMEOUT);
        let call = grpc.unary(request, path, tonic_prost::ProstCodec::default());
        match tokio::time::timeout(CALL_TIMEOUT, call).await {
            Ok(r) => r.map(tonic::Response::into_inner),
            Err(_) => Err(tonic::Status::deadline_exceeded(
                "context deadline exceeded",
            )),
        }
    }

    /// `NodePrepareResources`.
    pub async fn prepare(
        &self,
        req: NodePrepareResourcesRequest,
    ) -> Result<NodePrepareResourcesResponse, tonic::Status> {
        self.unary("NodePrepareResources", req).await
    }

    /// `NodeUnprepareResources`.
    pub async fn unprepare(
        &self,
        req: NodeUnprepareResourcesRequest,
    ) -> Result<NodeUnprepareResourcesResponse, tonic::Status> {
        self.unary("NodeUnprepareResources", req).await
    }
}

/// Where the node's ResourceSlices are deleted (none on a node without an
/// API server).
#[derive(Clone)]
pub struct Slices {
    /// API client.
    pub client: Client,
    /// The node's name.
    pub node: String,
}

impl Slices {
    /// Deletes the node's slices of `driver` (all drivers: `None`),
    /// retrying with a growing wait as upstream (1 s doubling to 5 min).
    pub async fn wipe(&self, driver: Option<&str>) {
        let api: Api<ResourceSlice> = Api::all(self.client.clone());
        let mut fields = format!("spec.nodeName={}", self.node);
        if let Some(d) = driver {
            fields.push_str(&format!(",spec.driver={d}"));
        }
        let lp = ListParams::default().fields(&fields);
        let mut wait = Duration::from_secs(1);
        for _ in 0..100 {
            match api.delete_collection(&DeleteParams::default(), &lp).await {
                Ok(_) => {
                    tracing::info!(%fields, "deleted the node's ResourceSlices");
                    return;
                }
                Err(kube::Error::Api(s)) if s.code == 404 => return,
                Err(e) => {
                    tracing::debug!(%fields, error = %e, "deleting ResourceSlices failed; retrying");
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_secs(300));
                }
            }
        }
    }
}

/// How long before a failed health stream is opened again.
const HEALTH_RETRY: Duration = Duration::from_secs(5);

/// Follows `plugin`'s health stream into `cache` until the driver says it
/// has none.
async fn follow_health(driver: String, channel: Channel, cache: Arc<HealthCache>) {
    loop {
        let mut client = DraResourceHealthClient::new(channel.clone());
        match client
            .node_watch_resources(NodeWatchResourcesRequest {})
            .await
        {
            Ok(resp) => {
                let mut stream = resp.into_inner();
                loop {
                    match stream.message().await {
                        Ok(Some(r)) => {
                            let devices = r
                                .devices
                                .into_iter()
                                .map(|d| {
                                    let id = d.device.unwrap_or_default();
                                    let timeout = match d.health_check_timeout_seconds {
                                        s if s > 0 => Duration::from_secs(s as u64),
                                        _ => health::DEFAULT_TIMEOUT,
                                    };
                                    (
                                        id.pool_name,
                                        id.device_name,
                                        Health::from_proto(d.health),
                                        health::truncate(&d.message),
                                        timeout,
                                    )
                                })
                                .collect();
                            if cache.update(&driver, devices, k8s_openapi::jiff::Timestamp::now()) {
                                tracing::info!(%driver, "device health changed");
                            }
                        }
                        Ok(None) => break,
                        Err(s) => {
                            tracing::debug!(%driver, error = %s.message(), "health stream ended");
                            break;
                        }
                    }
                }
                cache.clear(&driver);
            }
            Err(s) if s.code() == tonic::Code::Unimplemented => {
                tracing::info!(%driver, "the driver does not report device health");
                return;
            }
            Err(s) => {
                tracing::debug!(%driver, error = %s.message(), "opening the health stream failed; retrying");
            }
        }
        tokio::time::sleep(HEALTH_RETRY).await;
    }
}

#[derive(Default)]
struct Store {
    /// driver → its plugins, the latest last.
    plugins: HashMap<String, Vec<Plugin>>,
    /// driver → how often it was registered (a wipe waits for none more).
    generation: HashMap<String, u64>,
}

/// The registered plugins.
pub struct Plugins {
    store: Mutex<Store>,
    slices: Option<Slices>,
    health: Arc<HealthCache>,
}

impl Plugins {
    /// No plugins yet; `slices` is where a gone driver's slices are
    /// deleted, `health` where their devices' health is kept.
    pub fn new(slices: Option<Slices>, health: HealthCache) -> Arc<Plugins> {
        Arc::new(Plugins {
            store: Mutex::new(Store::default()),
            slices,
            health: Arc::new(health),
        })
    }

    /// The drivers' device health.
    pub fn health(&self) -> &Arc<HealthCache> {
        &self.health
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The plugin to call for `driver` (its latest), or upstream's error.
    pub fn get(&self, driver: &str) -> Result<Plugin, String> {
        if driver.is_empty() {
            return Err("DRA driver name is empty".into());
        }
        self.lock()
            .plugins
            .get(driver)
            .and_then(|p| p.last().cloned())
            .ok_or_else(|| format!("DRA driver {driver} is not registered"))
    }

    /// The registered drivers.
    pub fn drivers(&self) -> Vec<String> {
        let mut out: Vec<String> = self.lock().plugins.keys().cloned().collect();
        out.sort();
        out
    }

    /// Records a connected plugin (tests and [`Handler`]); with
    /// `watch_health`, follows its health stream.
    pub fn add(
        &self,
        driver: &str,
        endpoint: &str,
        package: &'static str,
        channel: Channel,
        watch_health: bool,
    ) -> Result<(), String> {
        let mut st = self.lock();
        let list = st.plugins.entry(driver.to_string()).or_default();
        if list.iter().any(|p| p.endpoint == endpoint) {
            return Err(format!(
                "endpoint {endpoint} already registered for DRA driver plugin {driver}"
            ));
        }
        let health = watch_health.then(|| {
            tokio::spawn(follow_health(
                driver.to_string(),
                channel.clone(),
                self.health.clone(),
            ))
            .abort_handle()
        });
        list.push(Plugin {
            driver: driver.to_string(),
            endpoint: endpoint.to_string(),
            package,
            channel,
            health,
        });
        *st.generation.entry(driver.to_string()).or_default() += 1;
        tracing::info!(%driver, %endpoint, package, "registered DRA plugin");
        Ok(())
    }

    /// Forgets a plugin; when it was its driver's last, the driver's
    /// slices are deleted after [`WIPING_DELAY`] unless it registers again.
    pub fn remove(self: &Arc<Self>, driver: &str, endpoint: &str) {
        let generation = {
            let mut st = self.lock();
            let Some(list) = st.plugins.get_mut(driver) else {
                return;
            };
            list.retain(|p| {
                let gone = p.endpoint == endpoint;
                if let Some(h) = p.health.as_ref().filter(|_| gone) {
                    h.abort();
                }
                !gone
            });
            if !list.is_empty() {
                return;
            }
            st.plugins.remove(driver);
            st.generation.get(driver).copied().unwrap_or_default()
        };
        tracing::info!(%driver, %endpoint, "unregistered DRA plugin");
        let Some(slices) = self.slices.clone() else {
            return;
        };
        let me = self.clone();
        let driver = driver.to_string();
        tokio::spawn(async move {
            tokio::time::sleep(WIPING_DELAY).await;
            let back = {
                let st = me.lock();
                st.plugins.contains_key(&driver)
                    || st.generation.get(&driver).copied().unwrap_or_default() != generation
            };
            if !back {
                slices.wipe(Some(&driver)).await;
            }
        });
    }
}

/// The service `versions` offers that the kubelet speaks first, as
/// upstream picks it: the plugin's order.
pub fn choose_service(versions: &[String]) -> Result<&'static str, String> {
    if versions.is_empty() {
        return Err("empty list of supported gRPC services (aka supported versions)".into());
    }
    for v in versions {
        if let Some(s) = SERVICES.iter().find(|s| **s == v.as_str()) {
            return Ok(s);
        }
    }
    Err(format!(
        "none of services supported by the plugin ({}) are supported by the kubelet ({})",
        go_quoted(versions.iter().map(String::as_str)),
        go_quoted(SERVICES.iter().copied())
    ))
}

/// Go's `%q` of a string slice: `["a" "b"]`.
fn go_quoted<'a>(items: impl Iterator<Item = &'a str>) -> String {
    let parts: Vec<String> = items.map(|s| format!("{s:?}")).collect();
    format!("[{}]", parts.join(" "))
}

fn package_of(service: &str) -> &'static str {
    match service {
        "v1beta1.DRAPlugin" => "k8s.io.kubelet.pkg.apis.dra.v1beta1",
        _ => "k8s.io.kubelet.pkg.apis.dra.v1",
    }
}

/// DRA drivers registered through `plugins_registry`.
pub struct Handler(pub Arc<Plugins>);

impl crate::pluginmanager::Handler for Handler {
    fn validate(&self, name: &str, endpoint: &str, versions: &[String]) -> Result<(), String> {
        choose_service(versions).map(|_| ()).map_err(|e| {
            format!("invalid supported gRPC versions of DRA driver plugin {name} at endpoint {endpoint}: {e}")
        })
    }

    fn register<'a>(
        &'a self,
        name: &'a str,
        endpoint: &'a str,
        versions: &'a [String],
    ) -> crate::BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            self.validate(name, endpoint, versions)?;
            let service = choose_service(versions)?;
            // Connected on first use, as upstream's (grpc-go's NewClient):
            // a driver whose socket cannot be reached yet still registers,
            // and its calls fail until it can.
            let channel = rkube_cri::unix_channel_lazy(PathBuf::from(endpoint), DIAL_TIMEOUT);
            let watch_health = versions.iter().any(|v| v == health::SERVICE);
            self.0
                .add(name, endpoint, package_of(service), channel, watch_health)
        })
    }

    fn deregister(&self, name: &str, endpoint: &str) {
        self.0.remove(name, endpoint);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_service_is_the_first_the_plugin_lists_that_the_kubelet_speaks() {
        let v = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            choose_service(&v(&["v1beta1.DRAPlugin", "v1.DRAPlugin"])),
            Ok("v1beta1.DRAPlugin")
        );
        assert_eq!(
            choose_service(&v(&["v9", "v1.DRAPlugin"])),
            Ok("v1.DRAPlugin")
        );
        assert_eq!(
            choose_service(&v(&["1.0.0"])).unwrap_err(),
            r#"none of services supported by the plugin (["1.0.0"]) are supported by the kubelet (["v1.DRAPlugin" "v1beta1.DRAPlugin"])"#
        );
        assert!(choose_service(&[]).unwrap_err().starts_with("empty list"));
        assert_eq!(
            package_of("v1beta1.DRAPlugin"),
            "k8s.io.kubelet.pkg.apis.dra.v1beta1"
        );
    }
}
