//! The pod-resources socket and its gRPC service (upstream's
//! `server.ListenAndServePodResources` with `CreateListener` of
//! `k8s.io/cri-client/pkg/util`): tonic's HTTP/2 server over a Unix
//! listener, one service (`v1.PodResourcesLister`) behind upstream's rate
//! limit; every call reads the pods source afresh and answers with
//! [`super::assemble`].
//!
//! The socket is made by [`crate::socket::listen`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use tonic::{Request, Response, Status};

use super::assemble::{self, NoResources, ResourcesSource};
use super::ratelimit::RateLimit;
use super::v1;
use super::v1::pod_resources_lister_server::{PodResourcesLister, PodResourcesListerServer};
use super::PodsSource;

/// The socket's directory under the kubelet's root directory (upstream's
/// `DefaultKubeletPodResourcesDirName`).
pub const SOCKET_DIR: &str = "pod-resources";
/// The socket's file name (upstream's `podresources.Socket` + `.sock`).
pub const SOCKET_NAME: &str = "kubelet.sock";

/// `<root_dir>/pod-resources/kubelet.sock`.
pub fn socket_path(root_dir: &Path) -> PathBuf {
    root_dir.join(SOCKET_DIR).join(SOCKET_NAME)
}

/// Serves the pod-resources API v1 on `socket` for the pods of `source`,
/// reporting no devices, CPUs, memory or claims ([`NoResources`]). The
/// socket is listening when this returns; the task serves until aborted
/// (it ends only if the server fails, which it logs).
pub async fn serve(
    socket: &Path,
    source: Arc<dyn PodsSource>,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    serve_with(socket, source, Arc::new(NoResources)).await
}

/// [`serve`] with what the resource managers assigned.
pub async fn serve_with(
    socket: &Path,
    pods: Arc<dyn PodsSource>,
    resources: Arc<dyn ResourcesSource>,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    serve_limited(socket, pods, resources, RateLimit::default()).await
}

/// [`serve_with`] behind `limit` (tests use a slower refill than
/// upstream's, to see the burst run out whatever the machine's speed).
async fn serve_limited(
    socket: &Path,
    pods: Arc<dyn PodsSource>,
    resources: Arc<dyn ResourcesSource>,
    limit: RateLimit,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let listener = crate::socket::listen(socket)
        .with_context(|| format!("creating the pod-resources socket {}", socket.display()))?;
    let service = PodResourcesListerServer::with_interceptor(Service { pods, resources }, limit);
    Ok(crate::socket::serve(
        listener,
        service,
        socket,
        "the pod-resources API",
    ))
}

/// The generated service's implementation: reads the pods at each call.
struct Service {
    pods: Arc<dyn PodsSource>,
    resources: Arc<dyn ResourcesSource>,
}

#[tonic::async_trait]
impl PodResourcesLister for Service {
    async fn list(
        &self,
        _: Request<v1::ListPodResourcesRequest>,
    ) -> Result<Response<v1::ListPodResourcesResponse>, Status> {
        self.resources.update_allocated_devices();
        let pods = self.pods.active_pods();
        Ok(Response::new(assemble::list(&pods, &*self.resources)))
    }

    async fn get_allocatable_resources(
        &self,
        _: Request<v1::AllocatableResourcesRequest>,
    ) -> Result<Response<v1::AllocatableResourcesResponse>, Status> {
        Ok(Response::new(assemble::allocatable(&*self.resources)))
    }

    async fn get(
        &self,
        req: Request<v1::GetPodResourcesRequest>,
    ) -> Result<Response<v1::GetPodResourcesResponse>, Status> {
        let req = req.into_inner();
        let pods = self.pods.active_pods();
        assemble::get(&pods, &req.pod_namespace, &req.pod_name, &*self.resources)
            .map(Response::new)
            // Upstream returns a plain error, which gRPC sends as Unknown.
            .map_err(|e| Status::unknown(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::podresources::ratelimit::{DEFAULT_BURST_TOKENS, LIMIT_EXCEEDED};
    use crate::podresources::v1::pod_resources_lister_client::PodResourcesListerClient;
    use crate::scratch::Scratch;
    use hyper_util::rt::TokioIo;
    use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::os::unix::fs::PermissionsExt;
    use std::sync::Mutex;
    use tonic::transport::{Channel, Endpoint, Uri};

    /// The kubelet's active pods, changed by the test as the pod workers
    /// would.
    #[derive(Default)]
    struct Pods(Mutex<Vec<Arc<Pod>>>);

    impl PodsSource for Pods {
        fn active_pods(&self) -> Vec<Arc<Pod>> {
            self.0.lock().unwrap().clone()
        }
    }

    fn pod(name: &str, init: &[(&str, Option<&str>)], apps: &[&str]) -> Arc<Pod> {
        let c = |n: &str| Container {
            name: n.into(),
            ..Default::default()
        };
        Arc::new(Pod {
            metadata: ObjectMeta {
                namespace: Some("default".into()),
                name: Some(name.into()),
                uid: Some(format!("uid-{name}")),
                ..Default::default()
            },
            spec: Some(PodSpec {
                init_containers: Some(
                    init.iter()
                        .map(|(n, policy)| Container {
                            restart_policy: policy.map(String::from),
                            ..c(n)
                        })
                        .collect(),
                ),
                containers: apps.iter().map(|n| c(n)).collect(),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    async fn client(socket: &Path) -> PodResourcesListerClient<Channel> {
        let path = socket.to_path_buf();
        let channel = Endpoint::from_static("http://podresources.invalid")
            .connect_with_connector(tower::service_fn(move |_: Uri| {
                let path = path.clone();
                async move {
                    tokio::net::UnixStream::connect(path)
                        .await
                        .map(TokioIo::new)
                }
            }))
            .await
            .expect("connecting to the pod-resources socket");
        PodResourcesListerClient::new(channel)
    }

    #[tokio::test]
    async fn serves_list_get_and_allocatable_over_the_socket() {
        let root = Scratch::new("podresources");
        let socket = socket_path(root.path());
        assert!(socket.ends_with("pod-resources/kubelet.sock"));
        let pods = Arc::new(Pods::default());
        *pods.0.lock().unwrap() = vec![
            pod(
                "web",
                &[("setup", None), ("proxy", Some("Always"))],
                &["app"],
            ),
            pod("db", &[], &["postgres", "backup"]),
        ];

        // A first server (a kubelet that exits) leaves its socket behind.
        let first = serve(&socket, pods.clone()).await.unwrap();
        let dir = socket.parent().unwrap();
        let dir_mode = std::fs::metadata(dir).unwrap().permissions().mode();
        assert_eq!(dir_mode & 0o027, 0, "directory made 0750: {dir_mode:o}");
        first.abort();
        let _ = first.await;

        // The next one replaces the stale socket.
        let task = serve(&socket, pods.clone()).await.unwrap();
        let meta = std::fs::symlink_metadata(&socket).unwrap();
        use std::os::unix::fs::FileTypeExt;
        assert!(meta.file_type().is_socket());
        let mode = meta.permissions().mode();
        assert_eq!(mode & 0o022, 0, "socket not group/world writable: {mode:o}");
        let entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(entries, [std::ffi::OsString::from("kubelet.sock")]);

        let mut c = client(&socket).await;
        let list = c
            .list(v1::ListPodResourcesRequest {})
            .await
            .unwrap()
            .into_inner();
        let got: Vec<(String, Vec<String>)> = list
            .pod_resources
            .iter()
            .map(|p| {
                (
                    format!("{}/{}", p.namespace, p.name),
                    p.containers.iter().map(|c| c.name.clone()).collect(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (
                    "default/web".to_string(),
                    vec!["proxy".to_string(), "app".to_string()]
                ),
                (
                    "default/db".to_string(),
                    vec!["postgres".to_string(), "backup".to_string()]
                ),
            ]
        );
        assert!(list.pod_resources.iter().all(|p| p.cpu_ids.is_empty()
            && p.memory.is_empty()
            && p.containers.iter().all(|c| c.devices.is_empty()
                && c.cpu_ids.is_empty()
                && c.memory.is_empty()
                && c.dynamic_resources.is_empty())));

        let got = c
            .get(v1::GetPodResourcesRequest {
                pod_name: "db".into(),
                pod_namespace: "default".into(),
            })
            .await
            .unwrap()
            .into_inner()
            .pod_resources
            .unwrap();
        assert_eq!(
            (got.namespace.as_str(), got.name.as_str()),
            ("default", "db")
        );
        assert_eq!(got.containers.len(), 2);

        // db terminates: the kubelet's active pods no longer have it.
        pods.0
            .lock()
            .unwrap()
            .retain(|p| p.metadata.name.as_deref() != Some("db"));
        let err = c
            .get(v1::GetPodResourcesRequest {
                pod_name: "db".into(),
                pod_namespace: "default".into(),
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::Unknown);
        assert_eq!(err.message(), "pod db in namespace default not found");

        let alloc = c
            .get_allocatable_resources(v1::AllocatableResourcesRequest {})
            .await
            .unwrap()
            .into_inner();
        assert_eq!(alloc, v1::AllocatableResourcesResponse::default());

        task.abort();
    }

    /// Burst + 1 rapid calls: the last is refused with upstream's status,
    /// whichever connection it comes on (the bucket is the server's). The
    /// bucket here has upstream's burst but refills once a second, so the
    /// burst runs out however slow the machine; upstream's 100 QPS refill is
    /// `ratelimit`'s unit tests'.
    #[tokio::test]
    async fn burst_plus_one_rapid_calls_are_refused() {
        let root = Scratch::new("podresources-limit");
        let socket = socket_path(root.path());
        let limit = RateLimit::new(1, DEFAULT_BURST_TOKENS);
        let task = serve_limited(
            &socket,
            Arc::new(Pods::default()),
            Arc::new(NoResources),
            limit,
        )
        .await
        .unwrap();
        let (mut a, mut b) = (client(&socket).await, client(&socket).await);
        let mut results = Vec::new();
        for i in 0..=DEFAULT_BURST_TOKENS {
            let r = if i % 2 == 0 {
                a.list(v1::ListPodResourcesRequest {}).await.map(|_| ())
            } else {
                b.get_allocatable_resources(v1::AllocatableResourcesRequest {})
                    .await
                    .map(|_| ())
            };
            results.push(r);
        }
        let (last, burst) = results.split_last().unwrap();
        assert!(burst.iter().all(|r| r.is_ok()), "{burst:?}");
        let err = last
            .as_ref()
            .expect_err("burst + 1 rapid calls were all served");
        assert_eq!(err.code(), tonic::Code::ResourceExhausted);
        assert_eq!(err.message(), LIMIT_EXCEEDED);
        task.abort();
    }

    #[tokio::test]
    async fn an_unusable_path_is_an_error() {
        let root = Scratch::new("podresources-bad");
        // A directory where the socket should be cannot be unlinked.
        let socket = socket_path(root.path());
        std::fs::create_dir_all(&socket).unwrap();
        let err = serve(&socket, Arc::new(Pods::default())).await.unwrap_err();
        assert!(
            format!("{err:#}").contains("creating the pod-resources socket"),
            "{err:#}"
        );
    }
}
