//! [`CriClient`]: the typed client over a unix socket.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::observe::{Observed, Observer};
use crate::v1;
use crate::v1::image_service_client::ImageServiceClient;
use crate::v1::runtime_service_client::RuntimeServiceClient;

/// The largest gRPC message accepted from the runtime (as the kubelet's
/// remote runtime: 16 MiB; `ListContainers` on a busy node is large).
pub const MAX_MESSAGE_SIZE: usize = 16 * 1024 * 1024;

/// Errors of [`CriClient`].
#[derive(Debug, thiserror::Error)]
pub enum CriError {
    /// The endpoint is not `unix:///path` (or an absolute path).
    #[error("invalid CRI endpoint {0:?}: want unix:///path/to/socket")]
    InvalidEndpoint(String),
    /// The socket could not be connected.
    #[error("connecting to {endpoint}: {source}")]
    Connect {
        /// The endpoint as given.
        endpoint: String,
        /// The transport error.
        #[source]
        source: tonic::transport::Error,
    },
    /// The runtime answered a call with an error status; written as the
    /// Go gRPC client writes it (`rpc error: code = NotFound desc = ...`),
    /// which is what upstream's kubelet puts in Events and statuses.
    #[error("rpc error: code = {} desc = {}", go_code(.status.code()), .status.message())]
    Status {
        /// The RPC, e.g. `RunPodSandbox`.
        method: &'static str,
        /// The gRPC status.
        status: tonic::Status,
    },
    /// The runtime's answer lacked a field the CRI requires.
    #[error("CRI {method}: response has no {field}")]
    MissingField {
        /// The RPC.
        method: &'static str,
        /// The missing field.
        field: &'static str,
    },
}

/// The name Go's `codes.Code` gives a gRPC status code.
fn go_code(c: tonic::Code) -> &'static str {
    use tonic::Code as C;
    match c {
        C::Ok => "OK",
        C::Cancelled => "Canceled",
        C::Unknown => "Unknown",
        C::InvalidArgument => "InvalidArgument",
        C::DeadlineExceeded => "DeadlineExceeded",
        C::NotFound => "NotFound",
        C::AlreadyExists => "AlreadyExists",
        C::PermissionDenied => "PermissionDenied",
        C::ResourceExhausted => "ResourceExhausted",
        C::FailedPrecondition => "FailedPrecondition",
        C::Aborted => "Aborted",
        C::OutOfRange => "OutOfRange",
        C::Unimplemented => "Unimplemented",
        C::Internal => "Internal",
        C::Unavailable => "Unavailable",
        C::DataLoss => "DataLoss",
        C::Unauthenticated => "Unauthenticated",
    }
}

impl CriError {
    /// The gRPC status code, if the runtime answered with an error.
    pub fn code(&self) -> Option<tonic::Code> {
        match self {
            CriError::Status { status, .. } => Some(status.code()),
            _ => None,
        }
    }

    /// `true` if the runtime said the object does not exist (`NotFound`).
    pub fn is_not_found(&self) -> bool {
        self.code() == Some(tonic::Code::NotFound)
    }
}

/// Result of [`CriClient`] calls.
pub type Result<T, E = CriError> = std::result::Result<T, E>;

/// Connection settings for [`CriClient::connect_with`].
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// Deadline of one call (the kubelet's `--runtime-request-timeout`,
    /// default 2 minutes). [`CriClient::exec_sync`] extends it by its own
    /// timeout.
    pub request_timeout: Duration,
    /// Deadline for connecting the socket.
    pub connect_timeout: Duration,
    /// Told of every call (the kubelet's `kubelet_runtime_operations_*`).
    pub observer: Option<Arc<dyn Observer>>,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            request_timeout: Duration::from_secs(120),
            connect_timeout: Duration::from_secs(10),
            observer: None,
        }
    }
}

/// Output of [`CriClient::exec_sync`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutput {
    /// What the command wrote to stdout.
    pub stdout: Vec<u8>,
    /// What the command wrote to stderr.
    pub stderr: Vec<u8>,
    /// The command's exit code.
    pub exit_code: i32,
}

/// Runtime name and versions from [`CriClient::version`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeVersion {
    /// Version of the kubelet runtime API the runtime reports (`0.1.0`).
    pub version: String,
    /// The runtime's name, e.g. `containerd`.
    pub runtime_name: String,
    /// The runtime's own version, e.g. `1.6.20~ds1`.
    pub runtime_version: String,
    /// The CRI API version, e.g. `v1`.
    pub runtime_api_version: String,
}

/// A typed client of a CRI runtime (`runtime.v1` RuntimeService and
/// ImageService) over a unix socket. Cheap to clone: clones share one HTTP/2
/// connection, which reconnects if the runtime restarts.
#[derive(Debug, Clone)]
pub struct CriClient {
    endpoint: String,
    runtime: RuntimeServiceClient<Observed>,
    images: ImageServiceClient<Observed>,
    request_timeout: Duration,
}

/// A gRPC channel to the Unix socket `path` (another gRPC service the
/// kubelet calls on its node: a device plugin), connected now, within
/// `connect_timeout`; calls on it have no deadline of their own.
pub async fn unix_channel(
    path: PathBuf,
    connect_timeout: Duration,
) -> std::result::Result<Channel, tonic::transport::Error> {
    Endpoint::from_static("http://localhost")
        .connect_timeout(connect_timeout)
        .connect_with_connector(CriClient::dialer(path))
        .await
}

/// A gRPC channel to the Unix socket at `path` that connects when first
/// used (each attempt within `connect_timeout`), and again after its
/// connection drops: grpc-go's `NewClient`, which the kubelet uses for DRA
/// drivers (a driver registers even while its socket cannot be reached).
pub fn unix_channel_lazy(path: PathBuf, connect_timeout: Duration) -> Channel {
    Endpoint::from_static("http://localhost")
        .connect_timeout(connect_timeout)
        .connect_with_connector_lazy(CriClient::dialer(path))
}

/// Parses `unix:///path` (or a bare absolute path) into the socket path.
pub fn socket_path(endpoint: &str) -> Result<PathBuf> {
    let path = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
    if path.starts_with('/') && path.len() > 1 {
        Ok(PathBuf::from(path))
    } else {
        Err(CriError::InvalidEndpoint(endpoint.to_string()))
    }
}

fn status(method: &'static str) -> impl FnOnce(tonic::Status) -> CriError {
    move |status| CriError::Status { method, status }
}

fn missing(method: &'static str, field: &'static str) -> CriError {
    CriError::MissingField { method, field }
}

/// A streaming URL, which the CRI requires to be set.
fn non_empty(method: &'static str, url: String) -> Result<String> {
    if url.is_empty() {
        Err(missing(method, "url"))
    } else {
        Ok(url)
    }
}

impl CriClient {
    /// Connects to `endpoint` (`unix:///run/containerd/containerd.sock`)
    /// with default [`ConnectOptions`]; fails at once if nothing listens.
    pub async fn connect(endpoint: &str) -> Result<Self> {
        Self::connect_with(endpoint, ConnectOptions::default()).await
    }

    /// Connects with explicit options.
    pub async fn connect_with(endpoint: &str, options: ConnectOptions) -> Result<Self> {
        let path = socket_path(endpoint)?;
        // The URI is required by tonic but unused: the connector below
        // always dials the socket.
        let channel = Self::endpoint_of(&options)
            .connect_with_connector(Self::dialer(path))
            .await
            .map_err(|source| CriError::Connect {
                endpoint: endpoint.to_string(),
                source,
            })?;
        Ok(Self::over(endpoint, channel, &options))
    }

    /// A client that connects to `endpoint` at its first call, not now
    /// (for callers that may never need the runtime).
    pub fn lazy(endpoint: &str) -> Result<Self> {
        let path = socket_path(endpoint)?;
        let options = ConnectOptions::default();
        let channel = Self::endpoint_of(&options).connect_with_connector_lazy(Self::dialer(path));
        Ok(Self::over(endpoint, channel, &options))
    }

    fn endpoint_of(options: &ConnectOptions) -> Endpoint {
        Endpoint::from_static("http://cri.invalid")
            .connect_timeout(options.connect_timeout)
            .timeout(options.request_timeout)
    }

    fn dialer(
        path: PathBuf,
    ) -> impl tower::Service<
        Uri,
        Response = TokioIo<UnixStream>,
        Error = std::io::Error,
        Future = impl std::future::Future<Output = std::io::Result<TokioIo<UnixStream>>> + Send,
    > + Clone
           + Send {
        tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move { UnixStream::connect(path).await.map(TokioIo::new) }
        })
    }

    fn over(endpoint: &str, channel: Channel, options: &ConnectOptions) -> Self {
        let channel = Observed::new(channel, options.observer.clone());
        CriClient {
            endpoint: endpoint.to_string(),
            runtime: RuntimeServiceClient::new(channel.clone())
                .max_decoding_message_size(MAX_MESSAGE_SIZE),
            images: ImageServiceClient::new(channel).max_decoding_message_size(MAX_MESSAGE_SIZE),
            request_timeout: options.request_timeout,
        }
    }

    /// The endpoint this client was connected to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The generated RuntimeService client, for calls without a wrapper.
    pub fn runtime_service(&self) -> RuntimeServiceClient<Observed> {
        self.runtime.clone()
    }

    /// The generated ImageService client, for calls without a wrapper.
    pub fn image_service(&self) -> ImageServiceClient<Observed> {
        self.images.clone()
    }

    // ---------------------------------------------------------- runtime

    /// `Version`: the runtime's name and versions.
    pub async fn version(&self) -> Result<RuntimeVersion> {
        let r = self
            .runtime
            .clone()
            .version(v1::VersionRequest {
                version: "v1".into(),
            })
            .await
            .map_err(status("Version"))?
            .into_inner();
        Ok(RuntimeVersion {
            version: r.version,
            runtime_name: r.runtime_name,
            runtime_version: r.runtime_version,
            runtime_api_version: r.runtime_api_version,
        })
    }

    /// `Status`: the runtime's conditions (`RuntimeReady`, `NetworkReady`).
    pub async fn status(&self) -> Result<v1::RuntimeStatus> {
        self.status_response()
            .await?
            .status
            .ok_or_else(|| missing("Status", "status"))
    }

    /// `RuntimeConfig`: the runtime's cgroup driver (`None` when the
    /// runtime does not implement the call, as containerd before 2.0).
    pub async fn cgroup_driver(&self) -> Result<Option<v1::CgroupDriver>> {
        match self
            .runtime
            .clone()
            .runtime_config(v1::RuntimeConfigRequest {})
            .await
        {
            Ok(r) => Ok(r
                .into_inner()
                .linux
                .and_then(|l| v1::CgroupDriver::try_from(l.cgroup_driver).ok())),
            Err(s) if s.code() == tonic::Code::Unimplemented => Ok(None),
            Err(s) => Err(status("RuntimeConfig")(s)),
        }
    }

    /// `UpdateRuntimeConfig` with the node's pod CIDRs (comma-separated), as
    /// the kubelet hands them to the runtime once the Node has them.
    pub async fn update_pod_cidr(&self, pod_cidr: &str) -> Result<()> {
        self.runtime
            .clone()
            .update_runtime_config(v1::UpdateRuntimeConfigRequest {
                runtime_config: Some(v1::RuntimeConfig {
                    network_config: Some(v1::NetworkConfig {
                        pod_cidr: pod_cidr.into(),
                    }),
                }),
            })
            .await
            .map_err(status("UpdateRuntimeConfig"))?;
        Ok(())
    }

    /// `Status` whole: the conditions and the runtime handlers with their
    /// features.
    pub async fn status_response(&self) -> Result<v1::StatusResponse> {
        Ok(self
            .runtime
            .clone()
            .status(v1::StatusRequest { verbose: false })
            .await
            .map_err(status("Status"))?
            .into_inner())
    }

    /// `RunPodSandbox`: creates and starts a sandbox; returns its id.
    /// `runtime_handler` empty means the runtime's default.
    pub async fn run_pod_sandbox(
        &self,
        config: v1::PodSandboxConfig,
        runtime_handler: &str,
    ) -> Result<String> {
        Ok(self
            .runtime
            .clone()
            .run_pod_sandbox(v1::RunPodSandboxRequest {
                config: Some(config),
                runtime_handler: runtime_handler.into(),
            })
            .await
            .map_err(status("RunPodSandbox"))?
            .into_inner()
            .pod_sandbox_id)
    }

    /// `StopPodSandbox`: stops the sandbox and its containers, releases its
    /// network. Idempotent.
    pub async fn stop_pod_sandbox(&self, id: &str) -> Result<()> {
        self.runtime
            .clone()
            .stop_pod_sandbox(v1::StopPodSandboxRequest {
                pod_sandbox_id: id.into(),
            })
            .await
            .map_err(status("StopPodSandbox"))?;
        Ok(())
    }

    /// `RemovePodSandbox`: removes a sandbox and its containers. Idempotent.
    pub async fn remove_pod_sandbox(&self, id: &str) -> Result<()> {
        self.runtime
            .clone()
            .remove_pod_sandbox(v1::RemovePodSandboxRequest {
                pod_sandbox_id: id.into(),
            })
            .await
            .map_err(status("RemovePodSandbox"))?;
        Ok(())
    }

    /// `PodSandboxStatus`: state, creation time and network (see
    /// [`pod_ip`]).
    pub async fn pod_sandbox_status(&self, id: &str) -> Result<v1::PodSandboxStatus> {
        self.runtime
            .clone()
            .pod_sandbox_status(v1::PodSandboxStatusRequest {
                pod_sandbox_id: id.into(),
                verbose: false,
            })
            .await
            .map_err(status("PodSandboxStatus"))?
            .into_inner()
            .status
            .ok_or_else(|| missing("PodSandboxStatus", "status"))
    }

    /// `ListPodSandbox`, optionally filtered.
    pub async fn list_pod_sandboxes(
        &self,
        filter: Option<v1::PodSandboxFilter>,
    ) -> Result<Vec<v1::PodSandbox>> {
        Ok(self
            .runtime
            .clone()
            .list_pod_sandbox(v1::ListPodSandboxRequest { filter })
            .await
            .map_err(status("ListPodSandbox"))?
            .into_inner()
            .items)
    }

    /// `CreateContainer` in a sandbox (whose config is passed again, as the
    /// CRI requires); returns the container id.
    pub async fn create_container(
        &self,
        pod_sandbox_id: &str,
        config: v1::ContainerConfig,
        sandbox_config: v1::PodSandboxConfig,
    ) -> Result<String> {
        Ok(self
            .runtime
            .clone()
            .create_container(v1::CreateContainerRequest {
                pod_sandbox_id: pod_sandbox_id.into(),
                config: Some(config),
                sandbox_config: Some(sandbox_config),
            })
            .await
            .map_err(status("CreateContainer"))?
            .into_inner()
            .container_id)
    }

    /// `StartContainer`.
    pub async fn start_container(&self, id: &str) -> Result<()> {
        self.runtime
            .clone()
            .start_container(v1::StartContainerRequest {
                container_id: id.into(),
            })
            .await
            .map_err(status("StartContainer"))?;
        Ok(())
    }

    /// `StopContainer`: the stop signal, then SIGKILL after `timeout`.
    pub async fn stop_container(&self, id: &str, timeout: Duration) -> Result<()> {
        let mut req = tonic::Request::new(v1::StopContainerRequest {
            container_id: id.into(),
            timeout: timeout.as_secs() as i64,
        });
        req.set_timeout(self.request_timeout + timeout);
        self.runtime
            .clone()
            .stop_container(req)
            .await
            .map_err(status("StopContainer"))?;
        Ok(())
    }

    /// `RemoveContainer` (stopping it first if needed). Idempotent.
    pub async fn remove_container(&self, id: &str) -> Result<()> {
        self.runtime
            .clone()
            .remove_container(v1::RemoveContainerRequest {
                container_id: id.into(),
            })
            .await
            .map_err(status("RemoveContainer"))?;
        Ok(())
    }

    /// `ReopenContainerLog`: the runtime reopens the container's log file
    /// (after the kubelet renamed it, rotating it).
    pub async fn reopen_container_log(&self, id: &str) -> Result<()> {
        self.runtime
            .clone()
            .reopen_container_log(v1::ReopenContainerLogRequest {
                container_id: id.into(),
            })
            .await
            .map_err(status("ReopenContainerLog"))?;
        Ok(())
    }

    /// `UpdateContainerResources`: new Linux resources for a running
    /// container (an in-place resize).
    pub async fn update_container_resources(
        &self,
        id: &str,
        linux: v1::LinuxContainerResources,
    ) -> Result<()> {
        self.runtime
            .clone()
            .update_container_resources(v1::UpdateContainerResourcesRequest {
                container_id: id.into(),
                linux: Some(linux),
                ..Default::default()
            })
            .await
            .map_err(status("UpdateContainerResources"))?;
        Ok(())
    }

    /// `ContainerStatus`: state, exit code, reason, log path, …
    pub async fn container_status(&self, id: &str) -> Result<v1::ContainerStatus> {
        self.runtime
            .clone()
            .container_status(v1::ContainerStatusRequest {
                container_id: id.into(),
                verbose: false,
            })
            .await
            .map_err(status("ContainerStatus"))?
            .into_inner()
            .status
            .ok_or_else(|| missing("ContainerStatus", "status"))
    }

    /// `ListContainers`, optionally filtered (by sandbox, state, labels).
    pub async fn list_containers(
        &self,
        filter: Option<v1::ContainerFilter>,
    ) -> Result<Vec<v1::Container>> {
        Ok(self
            .runtime
            .clone()
            .list_containers(v1::ListContainersRequest { filter })
            .await
            .map_err(status("ListContainers"))?
            .into_inner()
            .containers)
    }

    /// `ExecSync`: runs `cmd` in a running container and waits up to
    /// `timeout` (zero: no limit) for it, as exec probes do.
    pub async fn exec_sync(
        &self,
        container_id: &str,
        cmd: &[&str],
        timeout: Duration,
    ) -> Result<ExecOutput> {
        let mut req = tonic::Request::new(v1::ExecSyncRequest {
            container_id: container_id.into(),
            cmd: cmd.iter().map(|s| s.to_string()).collect(),
            timeout: timeout.as_secs() as i64,
        });
        req.set_timeout(self.request_timeout + timeout);
        let r = self
            .runtime
            .clone()
            .exec_sync(req)
            .await
            .map_err(status("ExecSync"))?
            .into_inner();
        Ok(ExecOutput {
            stdout: r.stdout,
            stderr: r.stderr,
            exit_code: r.exit_code,
        })
    }

    /// `Exec`: the URL of the runtime's streaming server that runs the
    /// request's command (as `kubectl exec`), for the kubelet to proxy.
    pub async fn exec(&self, req: v1::ExecRequest) -> Result<String> {
        let url = self
            .runtime
            .clone()
            .exec(req)
            .await
            .map_err(status("Exec"))?
            .into_inner()
            .url;
        non_empty("Exec", url)
    }

    /// `Attach`: the streaming URL attaching to a running container's
    /// streams (as `kubectl attach`).
    pub async fn attach(&self, req: v1::AttachRequest) -> Result<String> {
        let url = self
            .runtime
            .clone()
            .attach(req)
            .await
            .map_err(status("Attach"))?
            .into_inner()
            .url;
        non_empty("Attach", url)
    }

    /// `PortForward`: the streaming URL forwarding to ports in a pod
    /// sandbox's network namespace (as `kubectl port-forward`).
    pub async fn port_forward(&self, req: v1::PortForwardRequest) -> Result<String> {
        let url = self
            .runtime
            .clone()
            .port_forward(req)
            .await
            .map_err(status("PortForward"))?
            .into_inner()
            .url;
        non_empty("PortForward", url)
    }

    // ---------------------------------------------------------- images

    /// `ListImages`, optionally filtered.
    pub async fn list_images(&self, filter: Option<v1::ImageFilter>) -> Result<Vec<v1::Image>> {
        Ok(self
            .images
            .clone()
            .list_images(v1::ListImagesRequest { filter })
            .await
            .map_err(status("ListImages"))?
            .into_inner()
            .images)
    }

    /// `ImageStatus`: the image, or `None` if the runtime does not have it.
    pub async fn image_status(&self, image: &str) -> Result<Option<v1::Image>> {
        Ok(self
            .images
            .clone()
            .image_status(v1::ImageStatusRequest {
                image: Some(image_spec(image)),
                verbose: false,
            })
            .await
            .map_err(status("ImageStatus"))?
            .into_inner()
            .image)
    }

    /// `PullImage`: pulls `image` (with `auth`, the registry login, if
    /// any) and returns the image reference the runtime resolved it to.
    /// Pulling always contacts the registry, even for an image the runtime
    /// has: callers honouring `IfNotPresent` check
    /// [`image_status`](Self::image_status) first.
    pub async fn pull_image(
        &self,
        image: &str,
        auth: Option<v1::AuthConfig>,
        sandbox_config: Option<v1::PodSandboxConfig>,
    ) -> Result<String> {
        Ok(self
            .images
            .clone()
            .pull_image(v1::PullImageRequest {
                image: Some(image_spec(image)),
                auth,
                sandbox_config,
            })
            .await
            .map_err(status("PullImage"))?
            .into_inner()
            .image_ref)
    }

    /// `RemoveImage`. Idempotent.
    pub async fn remove_image(&self, image: &str) -> Result<()> {
        self.images
            .clone()
            .remove_image(v1::RemoveImageRequest {
                image: Some(image_spec(image)),
            })
            .await
            .map_err(status("RemoveImage"))?;
        Ok(())
    }
}

/// An [`v1::ImageSpec`] naming `image`.
pub fn image_spec(image: &str) -> v1::ImageSpec {
    v1::ImageSpec {
        image: image.into(),
        ..Default::default()
    }
}

/// The primary IP of a sandbox (empty for host-network sandboxes and
/// runtimes without networking: `None`).
pub fn pod_ip(status: &v1::PodSandboxStatus) -> Option<&str> {
    status
        .network
        .as_ref()
        .map(|n| n.ip.as_str())
        .filter(|ip| !ip.is_empty())
}

/// The condition `kind` (e.g. `RuntimeReady`) of a runtime status, if the
/// runtime reports it.
pub fn condition<'a>(
    status: &'a v1::RuntimeStatus,
    kind: &str,
) -> Option<&'a v1::RuntimeCondition> {
    status.conditions.iter().find(|c| c.r#type == kind)
}

/// What a pod sandbox should be: the fields rkube's kubelet sets. Convert
/// with [`SandboxSpec::to_config`]; set anything else on the result.
#[derive(Debug, Clone, Default)]
pub struct SandboxSpec {
    /// Pod name.
    pub name: String,
    /// Pod namespace.
    pub namespace: String,
    /// Pod UID.
    pub uid: String,
    /// How many sandboxes this pod had before (0 for the first).
    pub attempt: u32,
    /// Hostname inside the sandbox (empty: the runtime's choice; ignored
    /// with host networking).
    pub hostname: String,
    /// Directory (absolute) where the runtime writes the containers' logs.
    pub log_directory: String,
    /// Share the node's network namespace instead of one from CNI.
    pub host_network: bool,
    /// Parent cgroup (cgroupfs path), empty for the runtime's default.
    pub cgroup_parent: String,
    /// Labels (rkube's own plus the pod's).
    pub labels: HashMap<String, String>,
    /// Annotations.
    pub annotations: HashMap<String, String>,
}

impl SandboxSpec {
    /// The CRI `PodSandboxConfig`.
    pub fn to_config(&self) -> v1::PodSandboxConfig {
        let network = if self.host_network {
            v1::NamespaceMode::Node
        } else {
            v1::NamespaceMode::Pod
        };
        v1::PodSandboxConfig {
            metadata: Some(v1::PodSandboxMetadata {
                name: self.name.clone(),
                uid: self.uid.clone(),
                namespace: self.namespace.clone(),
                attempt: self.attempt,
            }),
            hostname: if self.host_network {
                String::new()
            } else {
                self.hostname.clone()
            },
            log_directory: self.log_directory.clone(),
            labels: self.labels.clone(),
            annotations: self.annotations.clone(),
            linux: Some(v1::LinuxPodSandboxConfig {
                cgroup_parent: self.cgroup_parent.clone(),
                security_context: Some(v1::LinuxSandboxSecurityContext {
                    namespace_options: Some(v1::NamespaceOption {
                        network: network as i32,
                        pid: v1::NamespaceMode::Pod as i32,
                        ipc: v1::NamespaceMode::Pod as i32,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }
}

/// What a container should be. Convert with [`ContainerSpec::to_config`].
#[derive(Debug, Clone, Default)]
pub struct ContainerSpec {
    /// Container name (unique in the pod).
    pub name: String,
    /// How many times this container was created in this sandbox before.
    pub attempt: u32,
    /// Image reference, e.g. `rkube.local/busybox:1`.
    pub image: String,
    /// Entrypoint override (`command` in a Pod); empty: the image's.
    pub command: Vec<String>,
    /// Arguments (`args` in a Pod); empty: the image's.
    pub args: Vec<String>,
    /// Working directory; empty: the image's.
    pub working_dir: String,
    /// Environment variables, in order.
    pub env: Vec<(String, String)>,
    /// Log file path relative to the sandbox's `log_directory`, e.g.
    /// `NAME/0.log`.
    pub log_path: String,
    /// Labels.
    pub labels: HashMap<String, String>,
    /// Annotations.
    pub annotations: HashMap<String, String>,
}

impl ContainerSpec {
    /// The CRI `ContainerConfig`.
    pub fn to_config(&self) -> v1::ContainerConfig {
        v1::ContainerConfig {
            metadata: Some(v1::ContainerMetadata {
                name: self.name.clone(),
                attempt: self.attempt,
            }),
            image: Some(image_spec(&self.image)),
            command: self.command.clone(),
            args: self.args.clone(),
            working_dir: self.working_dir.clone(),
            envs: self
                .env
                .iter()
                .map(|(key, value)| v1::KeyValue {
                    key: key.clone(),
                    value: value.clone().into_bytes(),
                })
                .collect(),
            log_path: self.log_path.clone(),
            labels: self.labels.clone(),
            annotations: self.annotations.clone(),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        assert_eq!(
            socket_path("unix:///run/containerd/containerd.sock").unwrap(),
            PathBuf::from("/run/containerd/containerd.sock")
        );
        assert_eq!(socket_path("/x.sock").unwrap(), PathBuf::from("/x.sock"));
        for bad in [
            "",
            "unix://",
            "unix://rel.sock",
            "tcp://1.2.3.4:5",
            "rel.sock",
            "/",
        ] {
            assert!(
                matches!(socket_path(bad), Err(CriError::InvalidEndpoint(_))),
                "{bad}"
            );
        }
    }

    #[tokio::test]
    async fn connect_fails_fast_without_a_socket() {
        let err = CriClient::connect("unix:///nonexistent/rkube-cri-test.sock")
            .await
            .unwrap_err();
        assert!(matches!(err, CriError::Connect { .. }), "{err}");
    }

    #[test]
    fn sandbox_spec_sets_namespaces() {
        let spec = SandboxSpec {
            name: "p".into(),
            namespace: "ns".into(),
            uid: "u".into(),
            hostname: "h".into(),
            host_network: true,
            ..Default::default()
        };
        let c = spec.to_config();
        let ns = c
            .linux
            .unwrap()
            .security_context
            .unwrap()
            .namespace_options
            .unwrap();
        assert_eq!(ns.network, v1::NamespaceMode::Node as i32);
        assert_eq!(c.hostname, "", "host network keeps the node's hostname");
        let c = SandboxSpec {
            host_network: false,
            ..spec
        }
        .to_config();
        assert_eq!(c.hostname, "h");
        let ns = c
            .linux
            .unwrap()
            .security_context
            .unwrap()
            .namespace_options
            .unwrap();
        assert_eq!(ns.network, v1::NamespaceMode::Pod as i32);
        assert_eq!(c.metadata.unwrap().namespace, "ns");
    }

    #[test]
    fn status_errors() {
        let e = CriError::Status {
            method: "ContainerStatus",
            status: tonic::Status::not_found("no such container"),
        };
        assert!(e.is_not_found());
        assert_eq!(
            e.to_string(),
            "rpc error: code = NotFound desc = no such container"
        );
        assert!(!missing("Status", "status").is_not_found());
    }

    #[test]
    fn pod_ip_is_none_when_empty() {
        let mut s = v1::PodSandboxStatus::default();
        assert_eq!(pod_ip(&s), None);
        s.network = Some(v1::PodSandboxNetworkStatus::default());
        assert_eq!(pod_ip(&s), None);
        s.network.as_mut().unwrap().ip = "10.0.0.2".into();
        assert_eq!(pod_ip(&s), Some("10.0.0.2"));
    }
}
