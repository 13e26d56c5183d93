//! Every call a [`crate::CriClient`] makes, seen by an [`Observer`]: the
//! operation under upstream's kubelet name (`run_podsandbox`,
//! `container_status`, ...), how long the runtime took to answer and
//! whether it answered with an error. The kubelet counts them as upstream's
//! `kubelet_runtime_operations_*` families.
//!
//! The observer sits on the gRPC channel, so the calls made through
//! [`crate::CriClient::runtime_service`] are seen too. A call's time is
//! until the runtime's response headers (a unary answer follows them at
//! once); its error is a transport error or a non-zero `grpc-status` in
//! those headers, which is how a runtime answers a failed unary call (a
//! status sent only after a message, as a stream may end, is not seen).

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tonic::body::Body;
use tonic::codegen::http;
use tonic::transport::Channel;

/// Told of every CRI call.
pub trait Observer: Send + Sync + Debug {
    /// One call of `operation` (upstream's name) answered after `elapsed`;
    /// `failed` when the answer was an error.
    fn observe(&self, operation: &'static str, elapsed: Duration, failed: bool);
}

/// Upstream's kubelet's operation names (its instrumented runtime and image
/// services), by gRPC method.
const OPERATIONS: &[(&str, &str)] = &[
    ("Version", "version"),
    ("Status", "status"),
    ("CreateContainer", "create_container"),
    ("StartContainer", "start_container"),
    ("StopContainer", "stop_container"),
    ("RemoveContainer", "remove_container"),
    ("ListContainers", "list_containers"),
    ("ContainerStatus", "container_status"),
    ("UpdateContainerResources", "update_container"),
    ("ReopenContainerLog", "reopen_container_log"),
    ("ExecSync", "exec_sync"),
    ("Exec", "exec"),
    ("Attach", "attach"),
    ("RunPodSandbox", "run_podsandbox"),
    ("StopPodSandbox", "stop_podsandbox"),
    ("RemovePodSandbox", "remove_podsandbox"),
    ("PodSandboxStatus", "podsandbox_status"),
    ("ListPodSandbox", "list_podsandbox"),
    ("ContainerStats", "container_stats"),
    ("ListContainerStats", "list_container_stats"),
    ("PodSandboxStats", "podsandbox_stats"),
    ("ListPodSandboxStats", "list_podsandbox_stats"),
    ("PortForward", "port_forward"),
    ("UpdatePodSandboxResources", "update_podsandbox_resources"),
    ("UpdateRuntimeConfig", "update_runtime_config"),
    ("ListImages", "list_images"),
    ("ImageStatus", "image_status"),
    ("PullImage", "pull_image"),
    ("RemoveImage", "remove_image"),
    ("ImageFsInfo", "image_fs_info"),
    ("CheckpointContainer", "checkpoint_container"),
    ("CheckpointPod", "checkpoint_pod"),
    ("RestorePod", "restore_pod"),
    ("GetContainerEvents", "get_container_events"),
    ("ListMetricDescriptors", "list_metric_descriptors"),
    ("ListPodSandboxMetrics", "list_podsandbox_metrics"),
    ("RuntimeConfig", "runtime_config"),
];

/// The operation of a gRPC path (`/runtime.v1.RuntimeService/RunPodSandbox`
/// → `run_podsandbox`); `other` for a method upstream does not name.
pub fn operation(path: &str) -> &'static str {
    let method = path.rsplit('/').next().unwrap_or_default();
    OPERATIONS
        .iter()
        .find(|(m, _)| *m == method)
        .map_or("other", |(_, op)| op)
}

/// A channel whose calls an [`Observer`] sees.
#[derive(Debug, Clone)]
pub struct Observed {
    inner: Channel,
    observer: Option<Arc<dyn Observer>>,
}

impl Observed {
    /// `inner`, seen by `observer` if there is one.
    pub fn new(inner: Channel, observer: Option<Arc<dyn Observer>>) -> Self {
        Observed { inner, observer }
    }
}

/// Whether a response is a failed call: a `grpc-status` other than `0` in
/// its headers.
fn failed(response: &http::Response<Body>) -> bool {
    response
        .headers()
        .get("grpc-status")
        .is_some_and(|s| s.as_bytes() != b"0")
}

type ResponseFuture =
    Pin<Box<dyn Future<Output = Result<http::Response<Body>, tonic::transport::Error>> + Send>>;

impl tower::Service<http::Request<Body>> for Observed {
    type Response = http::Response<Body>;
    type Error = tonic::transport::Error;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        tower::Service::poll_ready(&mut self.inner, cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let operation = operation(request.uri().path());
        let call = tower::Service::call(&mut self.inner, request);
        let Some(observer) = self.observer.clone() else {
            return Box::pin(call);
        };
        let start = Instant::now();
        Box::pin(async move {
            let answer = call.await;
            let bad = answer.as_ref().map_or(true, failed);
            observer.observe(operation, start.elapsed(), bad);
            answer
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_have_upstream_names() {
        for (path, want) in [
            ("/runtime.v1.RuntimeService/RunPodSandbox", "run_podsandbox"),
            (
                "/runtime.v1.RuntimeService/ContainerStatus",
                "container_status",
            ),
            (
                "/runtime.v1.RuntimeService/UpdateContainerResources",
                "update_container",
            ),
            ("/runtime.v1.ImageService/PullImage", "pull_image"),
            ("/runtime.v1.ImageService/ImageFsInfo", "image_fs_info"),
            ("/runtime.v1.RuntimeService/StreamContainers", "other"),
            ("", "other"),
        ] {
            assert_eq!(operation(path), want, "{path}");
        }
    }
}
