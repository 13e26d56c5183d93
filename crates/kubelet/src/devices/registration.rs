//! The device plugins' side of the manager (upstream's
//! `devicemanager/plugin/v1beta1` server and client): the `Registration`
//! service on `kubelet.sock`, and for each plugin that registers a
//! connection to its socket, its options, and its `ListAndWatch` stream
//! feeding the manager until the stream ends.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tonic::{Request, Response, Status};

use super::manager::{Endpoint, Manager};
use super::v1beta1::device_plugin_client::DevicePluginClient;
use super::v1beta1::registration_server::{Registration, RegistrationServer};
use super::v1beta1::{Empty, RegisterRequest};
use super::{checkpoint, SOCKET_NAME};

/// The API versions rkube speaks (`SupportedVersions`).
pub const SUPPORTED_VERSIONS: [&str; 1] = ["v1beta1"];

/// How long dialing a plugin's socket may take (upstream's `dial`).
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// Removes every socket of the directory `dir` (upstream's
/// `CleanupPluginDirectory`): plugins watch for the kubelet's socket to
/// come back and register again on new sockets of their own.
fn cleanup(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_name() == checkpoint::FILE {
            continue;
        }
        if entry.file_type()?.is_socket() {
            if let Err(e) = std::fs::remove_file(entry.path()) {
                tracing::warn!(path = %entry.path().display(), error = %e, "removing a stale device plugin socket");
            }
        }
    }
    Ok(())
}

/// Starts the registration service on `<dir>/kubelet.sock`.
pub async fn serve(manager: Arc<Manager>) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    use anyhow::Context;
    let dir = manager.dir.clone();
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("creating the device plugin directory {}", dir.display()))?;
    cleanup(&dir)
        .with_context(|| format!("cleaning the device plugin directory {}", dir.display()))?;
    let socket = dir.join(SOCKET_NAME);
    let listener = crate::socket::listen(&socket).with_context(|| {
        format!(
            "creating the device plugin registration socket {}",
            socket.display()
        )
    })?;
    let service = RegistrationServer::new(Service { manager });
    Ok(crate::socket::serve(
        listener,
        service,
        &socket,
        "device plugin registration",
    ))
}

struct Service {
    manager: Arc<Manager>,
}

/// Upstream's `IsExtendedResourceName`: a device plugin's resource.
fn valid_resource_name(name: &str) -> bool {
    rkube_model::resources::is_extended_resource_name(name)
        && rkube_model::convert::is_qualified_name(&format!("requests.{name}"))
}

/// Why a registration is refused, in upstream's words where it has them.
pub fn validate(req: &RegisterRequest) -> Result<(), String> {
    if !SUPPORTED_VERSIONS.contains(&req.version.as_str()) {
        return Err(format!(
            "requested API version {:?} is not supported by kubelet. Supported version is [{}]",
            req.version,
            SUPPORTED_VERSIONS.map(|v| format!("{v:?}")).join(" ")
        ));
    }
    if !valid_resource_name(&req.resource_name) {
        return Err(format!(
            "the ResourceName {:?} is invalid",
            req.resource_name
        ));
    }
    // A name in the plugin directory, never a path out of it.
    let plain = !req.endpoint.is_empty()
        && req.endpoint != "."
        && req.endpoint != ".."
        && !req.endpoint.contains('/')
        && req.endpoint != SOCKET_NAME;
    if !plain {
        return Err(format!(
            "the endpoint {:?} is not a socket name in the device plugin directory",
            req.endpoint
        ));
    }
    Ok(())
}

#[tonic::async_trait]
impl Registration for Service {
    async fn register(&self, req: Request<RegisterRequest>) -> Result<Response<Empty>, Status> {
        let req = req.into_inner();
        tracing::info!(resource = %req.resource_name, endpoint = %req.endpoint, "device plugin registration");
        if let Err(e) = validate(&req) {
            tracing::warn!(resource = %req.resource_name, error = %e, "bad device plugin registration");
            return Err(Status::unknown(e));
        }
        let socket = self.manager.dir.join(&req.endpoint);
        connect(self.manager.clone(), req.resource_name, socket)
            .await
            .map_err(|e| {
                tracing::warn!(error = %e, "connecting to a device plugin");
                Status::unknown(e)
            })?;
        Ok(Response::new(Empty {}))
    }
}

/// Device plugins registered through `plugins_registry` (upstream's
/// server as a `PluginHandler`): the plugin's name is its resource, its
/// endpoint the socket to dial.
pub struct WatcherHandler(pub Arc<Manager>);

impl crate::pluginmanager::Handler for WatcherHandler {
    fn validate(&self, name: &str, _endpoint: &str, versions: &[String]) -> Result<(), String> {
        if !versions
            .iter()
            .any(|v| SUPPORTED_VERSIONS.contains(&v.as_str()))
        {
            return Err(format!(
                "manager version, {}, is not among plugin supported versions [{}]",
                SUPPORTED_VERSIONS[0],
                versions.join(" ")
            ));
        }
        if !valid_resource_name(name) {
            return Err(format!(
                "invalid name of device plugin socket: the ResourceName {name:?} is invalid"
            ));
        }
        Ok(())
    }

    fn register<'a>(
        &'a self,
        name: &'a str,
        endpoint: &'a str,
        _versions: &'a [String],
    ) -> crate::BoxFuture<'a, Result<(), String>> {
        Box::pin(connect(
            self.0.clone(),
            name.to_string(),
            PathBuf::from(endpoint),
        ))
    }

    fn deregister(&self, name: &str, endpoint: &str) {
        self.0.disconnected(name, Path::new(endpoint));
    }
}

/// Dials the plugin of `resource` at `socket`, reads its options, records
/// it, and follows its `ListAndWatch` stream in a task of its own.
pub async fn connect(
    manager: Arc<Manager>,
    resource: String,
    socket: PathBuf,
) -> Result<(), String> {
    let channel = rkube_cri::unix_channel(socket.clone(), DIAL_TIMEOUT)
        .await
        .map_err(|e| format!("failed to dial device plugin: {e}"))?;
    let mut client = DevicePluginClient::new(channel);
    let options = tokio::time::timeout(DIAL_TIMEOUT, client.get_device_plugin_options(Empty {}))
        .await
        .map_err(|_| "failed to get device plugin options: timed out".to_string())?
        .map_err(|s| format!("failed to get device plugin options: {}", s.message()))?
        .into_inner();
    manager.connected(
        &resource,
        Endpoint {
            socket: socket.clone(),
            client: Some(client.clone()),
            options: Some(options),
            stopped: None,
        },
    )?;
    tokio::spawn(async move {
        follow(&manager, &resource, client).await;
        manager.disconnected(&resource, &socket);
    });
    Ok(())
}

async fn follow(
    manager: &Manager,
    resource: &str,
    mut client: DevicePluginClient<tonic::transport::Channel>,
) {
    let mut stream = match client.list_and_watch(Empty {}).await {
        Ok(s) => s.into_inner(),
        Err(s) => {
            tracing::warn!(%resource, error = %s.message(), "ListAndWatch ended unexpectedly for device plugin");
            return;
        }
    };
    loop {
        match stream.message().await {
            Ok(Some(resp)) => manager.devices_listed(resource, resp.devices),
            Ok(None) => {
                tracing::info!(%resource, "ListAndWatch ended for device plugin");
                return;
            }
            Err(s) => {
                tracing::warn!(%resource, error = %s.message(), "ListAndWatch ended unexpectedly for device plugin");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(version: &str, resource: &str, endpoint: &str) -> RegisterRequest {
        RegisterRequest {
            version: version.into(),
            endpoint: endpoint.into(),
            resource_name: resource.into(),
            options: None,
        }
    }

    #[test]
    fn watcher_registrations_are_validated_as_upstream() {
        use crate::pluginmanager::Handler;
        let h = WatcherHandler(Arc::new(Manager::open(Path::new("/nonexistent"))));
        let v = |s: &[&str]| s.iter().map(|v| v.to_string()).collect::<Vec<_>>();
        assert_eq!(
            h.validate("example.com/r", "/s", &v(&["v1alpha", "v1beta1"])),
            Ok(())
        );
        assert_eq!(
            h.validate("example.com/r", "/s", &v(&["v1alpha", "v2"]))
                .unwrap_err(),
            "manager version, v1beta1, is not among plugin supported versions [v1alpha v2]"
        );
        assert_eq!(
            h.validate("cpu", "/s", &v(&["v1beta1"])).unwrap_err(),
            "invalid name of device plugin socket: the ResourceName \"cpu\" is invalid"
        );
    }

    #[test]
    fn registrations_are_validated_as_upstream() {
        assert_eq!(
            validate(&req("v1beta1", "example.com/resource", "dp.1")),
            Ok(())
        );
        assert_eq!(
            validate(&req("v1alpha", "example.com/resource", "dp.1")).unwrap_err(),
            "requested API version \"v1alpha\" is not supported by kubelet. Supported version is [\"v1beta1\"]"
        );
        for bad in [
            "cpu",
            "kubernetes.io/gpu",
            "example.com/",
            "example.com/a b",
            "",
        ] {
            assert_eq!(
                validate(&req("v1beta1", bad, "dp.1")).unwrap_err(),
                format!("the ResourceName {bad:?} is invalid")
            );
        }
        for bad in ["", "..", "../x", "a/b", "kubelet.sock"] {
            assert!(
                validate(&req("v1beta1", "example.com/r", bad)).is_err(),
                "{bad}"
            );
        }
    }
}
