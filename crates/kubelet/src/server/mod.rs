//! The kubelet API: HTTPS (HTTP/1.1 and HTTP/2, on the daemons' shared
//! server [`rkube_daemon::server`] with its deadlines, size limits and
//! connection cap) on `address:port` (10250), the part of upstream's
//! `pkg/kubelet/server` that `kubectl logs`, `exec`, `attach`,
//! `port-forward` (and so `cp`) and monitoring use:
//!
//! | path | |
//! |---|---|
//! | `/healthz` | `ok` |
//! | `/pods` | `PodList` JSON of this node's pods (as the API server has them) |
//! | `/metrics` | the kubelet's counters and upstream's pod worker histograms ([`crate::metrics`]) |
//! | `/metrics/resource` | CPU, memory and swap of the node, pods and containers ([`crate::stats::resource_metrics`]; metrics-server reads it) |
//! | `/metrics/cadvisor` | cAdvisor's container metrics ([`crate::stats::cadvisor`]) |
//! | `/metrics/probes` | probe counts and durations ([`crate::prober::metrics`]) |
//! | `/stats/summary[?only_cpu_and_memory=true]` | the Summary API ([`crate::stats::summary`]) |
//! | `/configz` | the configuration in force ([`configz`]) |
//! | `/runningpods/` | `PodList` of the pods the runtime runs ([`running_pods`]) |
//! | `/timeline/{ns}/{pod}` | the pod's startup timeline, JSON ([`crate::timeline`]; `nodes/proxy`) |
//! | `/containerLogs/{ns}/{pod}/{container}` | the container's log ([`crate::logs`]) |
//! | `/exec/{ns}/{pod}[/{uid}]/{container}`, `/attach/…`, `/portForward/{ns}/{pod}[/{uid}]` | streams, GET or POST, proxied to the CRI streaming server ([`stream`]) |
//!
//! Every request is authenticated and authorized ([`auth`]): client
//! certificates signed by `authentication.x509.clientCAFile` (the API
//! server's kubelet client certificate), bearer tokens via TokenReview,
//! SubjectAccessReview on `nodes/{proxy,log,metrics,pods,...}`, both
//! reviews cached; no credentials → 401.
//!
//! The serving certificate is `tlsCertFile`/`tlsPrivateKeyFile`, or a
//! self-signed one for the node name, host name, node IP and localhost,
//! kept in `<root-dir>/pki/kubelet.{crt,key}` (as upstream).
//!
//! `/logs/` serves the node's `/var/log` ([`system_logs`]). Not served:
//! `/run`, `/checkpoint`, `/debug` (404).

pub mod auth;
pub mod configz;
pub mod healthz;
pub mod running_pods;

pub mod proxy;
pub mod stream;
pub mod system_logs;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, Client};
use rkube_daemon::auth::{AccessReviewer, KubeReviewer, TokenReviewer};
use rkube_daemon::server::{self, Body, Handler, Limits, Request, Response, StatusCode, TEXT};
use rkube_daemon::tls::{SelfSigned, ServingTls};
use serde_yaml_ng::Value;
use tokio::net::TcpListener;

use crate::config::KubeletConfiguration;
use crate::logs;
use crate::metrics::Metrics;
use crate::pod::mirror_of;
use crate::runtime::cri::CriRuntime;
use crate::stats::StatsProvider;
use auth::{Auth, AuthConfig};

/// The API settings of a KubeletConfiguration file (read leniently; the
/// strict decoder in [`crate::config`] validates the document).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ApiSettings {
    /// `tlsCertFile`.
    pub tls_cert_file: Option<PathBuf>,
    /// `tlsPrivateKeyFile`.
    pub tls_private_key_file: Option<PathBuf>,
    /// `authentication.x509.clientCAFile`.
    pub client_ca_file: Option<PathBuf>,
    /// Authentication and authorization modes.
    pub auth: AuthConfig,
}

impl ApiSettings {
    /// Reads the settings from KubeletConfiguration YAML text.
    pub fn parse(text: &str) -> Result<ApiSettings> {
        let v: Value =
            serde_yaml_ng::from_str(text).context("parsing the kubelet configuration")?;
        ApiSettings::from_document(&v)
    }

    /// Reads the settings from a KubeletConfiguration document (the one in
    /// effect: `--config` with the fields flags set).
    pub fn from_document(v: &Value) -> Result<ApiSettings> {
        let s = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(PathBuf::from);
        let get = |path: &[&str]| {
            path.iter()
                .try_fold(v, |v, k| v.get(*k))
                .filter(|v| !v.is_null())
        };
        let mut auth = AuthConfig::default();
        if let Some(b) = get(&["authentication", "anonymous", "enabled"]).and_then(Value::as_bool) {
            auth.anonymous = b;
        }
        if let Some(b) = get(&["authentication", "webhook", "enabled"]).and_then(Value::as_bool) {
            auth.webhook_authn = b;
        }
        let duration = |path: &[&str]| -> Result<Option<Duration>> {
            match get(path).and_then(Value::as_str) {
                Some(v) => rkube_util::duration::parse(v)
                    .map(Some)
                    .with_context(|| format!("{}: {v:?}", path.join("."))),
                None => Ok(None),
            }
        };
        if let Some(d) = duration(&["authentication", "webhook", "cacheTTL"])? {
            auth.authn_cache_ttl = d;
        }
        if let Some(d) = duration(&["authorization", "webhook", "cacheAuthorizedTTL"])? {
            auth.authorized_ttl = d;
        }
        if let Some(d) = duration(&["authorization", "webhook", "cacheUnauthorizedTTL"])? {
            auth.unauthorized_ttl = d;
        }
        if let Some(m) = get(&["authorization", "mode"]).and_then(Value::as_str) {
            auth.webhook_authz = match m {
                // "": upstream's default.
                "Webhook" | "" => true,
                "AlwaysAllow" => false,
                other => anyhow::bail!("authorization.mode {other:?}: want Webhook or AlwaysAllow"),
            };
        }
        Ok(ApiSettings {
            tls_cert_file: get(&["tlsCertFile"]).and_then(s),
            tls_private_key_file: get(&["tlsPrivateKeyFile"]).and_then(s),
            client_ca_file: get(&["authentication", "x509", "clientCAFile"]).and_then(s),
            auth,
        })
    }
}

/// Where the kubelet API's serving certificate comes from.
#[derive(Debug, Clone, Copy)]
pub enum Serving<'a> {
    /// `tlsCertFile`/`tlsPrivateKeyFile`, re-read when they change when
    /// `reload` (`ReloadKubeletServerCertificateFile`), or self-signed.
    Files {
        /// Re-read the given files when they change.
        reload: bool,
    },
    /// The certificate manager's store (`serverTLSBootstrap`): its
    /// `kubelet-server-current.pem`, served once issued.
    Store(&'a Path),
}

/// The serving certificate (given, or self-signed for `names`, localhost
/// and 127.0.0.1 and kept in `pki_dir/kubelet.{crt,key}`, or the rotated
/// one of `serving`) and the client CA (optional client certificates, so
/// token users can connect too).
pub fn tls_config(
    settings: &ApiSettings,
    pki_dir: &Path,
    names: &[String],
    serving: Serving<'_>,
) -> Result<ServingTls> {
    let files = (
        settings.tls_cert_file.as_deref(),
        settings.tls_private_key_file.as_deref(),
    );
    let tls = match (serving, files) {
        (Serving::Store(current), _) => ServingTls::from_resolver(
            rkube_daemon::serving_cert::ReloadingServingCert::new(current, current, true),
        ),
        (Serving::Files { reload: true }, (Some(c), Some(k))) => {
            // A pair that does not load stops the start, as upstream's.
            rkube_daemon::client_cert::load(c, k).map_err(|e| {
                anyhow::anyhow!(
                    "the kubelet API's certificate (tlsCertFile, tlsPrivateKeyFile): {e}"
                )
            })?;
            ServingTls::from_resolver(rkube_daemon::serving_cert::ReloadingServingCert::new(
                c, k, false,
            ))
        }
        (Serving::Files { .. }, (c, k)) => ServingTls::load_or_self_sign(
            c,
            k,
            SelfSigned {
                dir: Some(pki_dir),
                stem: "kubelet",
                hosts: names,
            },
        )
        .context("the kubelet API's certificate (tlsCertFile, tlsPrivateKeyFile)")?,
    }
    .with_client_ca(settings.client_ca_file.as_deref())
    .context("authentication.x509.clientCAFile")?;
    tls.server_config(true)
        .context("the kubelet API's TLS configuration")?;
    Ok(tls)
}

/// What the handlers use.
pub struct ApiContext {
    /// The node served.
    pub node: String,
    /// Client for reviews and pod lookups (the node identity).
    pub client: Client,
    /// Counters for `/metrics`.
    pub metrics: Arc<Metrics>,
    /// The CRI runtime (logs); `None` with the sim runtime.
    pub runtime: Option<Arc<CriRuntime>>,
    /// The node's figures (`/stats/summary`, `/metrics/resource`,
    /// `/metrics/cadvisor`); `None` with the sim runtime.
    pub stats: Option<Arc<StatsProvider>>,
    /// The configuration in force (`/configz`).
    pub config: Arc<KubeletConfiguration>,
    /// Authentication and authorization.
    pub auth: AuthConfig,
}

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `/healthz`.
    Healthz,
    /// `/pods`.
    Pods,
    /// `/metrics`.
    Metrics,
    /// `/metrics/resource`.
    ResourceMetrics,
    /// `/metrics/cadvisor`.
    CadvisorMetrics,
    /// `/metrics/probes`.
    ProbeMetrics,
    /// `/stats/summary`.
    Summary,
    /// `/configz`.
    Configz,
    /// `/runningpods/`.
    RunningPods,
    /// `/containerLogs/{ns}/{pod}/{container}`.
    ContainerLogs {
        /// Namespace.
        namespace: String,
        /// Pod name.
        pod: String,
        /// Container name.
        container: String,
    },
    /// `/timeline/{ns}/{pod}`: the pod's startup timeline
    /// ([`crate::timeline`]).
    Timeline {
        /// Namespace.
        namespace: String,
        /// Pod name.
        pod: String,
    },
    /// `/exec`, `/attach`, `/portForward` ([`stream`]).
    Stream(stream::Target),
    /// `/logs…`: the node's log files ([`system_logs`]); the rest of the
    /// path after `/logs`, as given.
    SystemLogs(String),
    /// Anything else (404).
    NotFound,
}

/// Routes a path.
pub fn route(path: &str) -> Route {
    if path == "/logs" || path.starts_with("/logs/") {
        return Route::SystemLogs(path["/logs".len()..].to_string());
    }
    let p = path.trim_end_matches('/');
    match p {
        "/healthz" => Route::Healthz,
        "/pods" => Route::Pods,
        "/metrics" => Route::Metrics,
        "/metrics/resource" => Route::ResourceMetrics,
        "/metrics/cadvisor" => Route::CadvisorMetrics,
        "/metrics/probes" => Route::ProbeMetrics,
        "/stats/summary" => Route::Summary,
        "/configz" => Route::Configz,
        "/runningpods" => Route::RunningPods,
        _ => {
            let parts: Vec<&str> = p.split('/').collect();
            match parts.as_slice() {
                ["", "containerLogs", ns, pod, c]
                    if !ns.is_empty() && !pod.is_empty() && !c.is_empty() =>
                {
                    Route::ContainerLogs {
                        namespace: ns.to_string(),
                        pod: pod.to_string(),
                        container: c.to_string(),
                    }
                }
                ["", "timeline", ns, pod] if !ns.is_empty() && !pod.is_empty() => Route::Timeline {
                    namespace: ns.to_string(),
                    pod: pod.to_string(),
                },
                _ => stream::route(&parts).map_or(Route::NotFound, Route::Stream),
            }
        }
    }
}

fn status(code: u16) -> StatusCode {
    StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

fn text(code: u16, body: impl Into<bytes::Bytes>) -> Response {
    server::text(status(code), body)
}

fn prometheus(body: String) -> Response {
    server::respond(
        StatusCode::OK,
        "text/plain; version=0.0.4; charset=utf-8",
        Body::whole(body),
    )
}

fn json_response<T: serde::Serialize>(v: &T) -> Response {
    match serde_json::to_vec(v) {
        Ok(b) => server::respond(StatusCode::OK, "application/json", Body::whole(b)),
        Err(e) => text(500, format!("encoding: {e}")),
    }
}

/// The kubelet API's request handler.
pub struct KubeletApi {
    ctx: Arc<ApiContext>,
    auth: Auth,
}

impl KubeletApi {
    /// Serves `ctx`, reviewing tokens with `tokens` and access with
    /// `access` as `ctx.auth` says.
    pub fn new(
        ctx: Arc<ApiContext>,
        tokens: Arc<dyn TokenReviewer>,
        access: Arc<dyn AccessReviewer>,
    ) -> KubeletApi {
        let auth = Auth::new(&ctx.auth, tokens, access);
        KubeletApi { ctx, auth }
    }
}

impl Handler for KubeletApi {
    async fn handle(&self, req: Request) -> Response {
        let ctx = &self.ctx;
        let user = match self
            .auth
            .authenticate(req.cert_user(), req.bearer_token())
            .await
        {
            Ok(u) => u,
            Err((code, msg)) => return text(code, msg),
        };
        let method = req.method.as_str();
        if let Err((code, msg)) = self
            .auth
            .authorize(&user, &ctx.node, method, &req.path)
            .await
        {
            return text(code, msg);
        }
        tracing::debug!(user = %user.name, %method, path = %req.path, "kubelet API request");
        let route = route(&req.path);
        let allowed: &[&str] = match route {
            // upgrade requests come as either (kubectl posts them)
            Route::Stream(_) => &["GET", "POST"],
            _ => &["GET", "HEAD"],
        };
        if !allowed.contains(&method) {
            return text(405, "405 method not allowed");
        }
        match route {
            Route::Healthz => text(200, "ok"),
            Route::Metrics => prometheus(ctx.metrics.render()),
            Route::ResourceMetrics => {
                let Some(stats) = &ctx.stats else {
                    return text(404, "404 page not found");
                };
                let summary = stats.summary(true).await;
                if let Err(e) = &summary {
                    tracing::warn!(error = %e, "the node's stats for /metrics/resource");
                }
                prometheus(crate::stats::resource_metrics::render(
                    summary.ok().as_ref(),
                ))
            }
            Route::CadvisorMetrics => {
                let Some(stats) = &ctx.stats else {
                    return text(404, "404 page not found");
                };
                match stats.collect(true).await {
                    Ok(s) => {
                        let (nodefs, imagefs) = stats.devices();
                        prometheus(crate::stats::cadvisor::render(&s, &nodefs, &imagefs))
                    }
                    Err(e) => text(500, format!("collecting the node's stats: {e}")),
                }
            }
            Route::ProbeMetrics => {
                let Some(rt) = &ctx.runtime else {
                    return text(404, "404 page not found");
                };
                prometheus(
                    rt.probe_metrics()
                        .render(crate::stats::procfs::process_start()),
                )
            }
            Route::Summary => {
                let Some(stats) = &ctx.stats else {
                    return text(404, "404 page not found");
                };
                let only = req
                    .query
                    .split('&')
                    .any(|kv| kv == "only_cpu_and_memory=true");
                match stats.summary(only).await {
                    Ok(s) => json_response(&s),
                    Err(e) => text(500, format!("Internal Error: failed to get node info: {e}")),
                }
            }
            Route::Configz => json_response(&configz::document(&ctx.config)),
            Route::Timeline { namespace, pod } => {
                match ctx.metrics.startup.timeline(&namespace, &pod) {
                    Some(t) => json_response(&t),
                    None => text(
                        404,
                        format!("no startup timeline for pod {namespace}/{pod} on this node"),
                    ),
                }
            }
            Route::RunningPods => match &ctx.runtime {
                Some(rt) => match running_pods::list(rt.client()).await {
                    Ok(v) => json_response(&v),
                    Err(e) => text(500, format!("listing running pods: {e}")),
                },
                None => text(404, "404 page not found"),
            },
            Route::Pods => {
                let api: Api<Pod> = Api::all(ctx.client.clone());
                let lp = ListParams::default().fields(&format!("spec.nodeName={}", ctx.node));
                match api.list(&lp).await {
                    Ok(list) => {
                        let body = serde_json::json!({
                            "kind": "PodList", "apiVersion": "v1", "metadata": {},
                            "items": list.items,
                        });
                        server::respond(
                            StatusCode::OK,
                            "application/json",
                            Body::whole(body.to_string()),
                        )
                    }
                    Err(e) => text(500, format!("listing pods: {e}")),
                }
            }
            Route::ContainerLogs {
                namespace,
                pod,
                container,
            } => container_logs(ctx, &namespace, &pod, &container, &req.query).await,
            Route::Stream(t) => stream::serve(ctx, t, req).await,
            // Upstream registers it with the debugging handlers, which
            // rkube always serves, when enableSystemLogHandler is on.
            Route::SystemLogs(rel) if ctx.config.enable_system_log_handler => {
                system_logs::serve(Path::new(system_logs::ROOT), &rel).await
            }
            Route::SystemLogs(_) => text(405, "logs endpoint is disabled."),
            Route::NotFound => text(404, "404 page not found"),
        }
    }
}

/// Serves HTTPS until the task is aborted (it ends only if the TLS
/// configuration cannot be built, which [`tls_config`] already checked).
pub async fn serve(listener: TcpListener, tls: ServingTls, ctx: Arc<ApiContext>) {
    let reviewer = Arc::new(KubeReviewer(ctx.client.clone()));
    let api = KubeletApi::new(ctx, reviewer.clone(), reviewer);
    let limits = Limits::default();
    match tls.server_config(limits.http2) {
        Ok(config) => server::serve(listener, Some(config), limits, Arc::new(api)).await,
        Err(e) => tracing::error!(error = %e, "the kubelet API's TLS configuration"),
    }
}

async fn container_logs(
    ctx: &Arc<ApiContext>,
    ns: &str,
    name: &str,
    container: &str,
    query: &str,
) -> Response {
    let q = match logs::LogQuery::parse(query) {
        Ok(q) => q,
        Err(e) => return text(400, e),
    };
    let Some(rt) = &ctx.runtime else {
        return text(404, "container logs need the CRI runtime");
    };
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let pod = match api.get_opt(name).await {
        Ok(Some(p)) => p,
        Ok(None) => return text(404, format!("pod {ns}/{name} not found")),
        Err(e) => return text(500, format!("getting pod: {e}")),
    };
    let uid = mirror_of(&pod).unwrap_or_else(|| pod.metadata.uid.clone().unwrap_or_default());
    let dir = rt.dirs().pod_logs(ns, name, &uid).join(container);
    let Some(file) = logs::pick(&dir, q.previous) else {
        let msg = format!(
            "{}container \"{container}\" in pod \"{name}\" has no logs",
            if q.previous {
                "previous terminated "
            } else {
                ""
            }
        );
        return text(400, msg);
    };
    // One open file for the read and the follow: a rotation in between
    // cannot make the follow start in the wrong file.
    let mut handle = match tokio::fs::File::open(&file).await {
        Ok(h) => h,
        Err(e) => return text(500, format!("reading logs: {e}")),
    };
    let bytes = match logs::read_at(&mut handle, 0, usize::MAX).await {
        Ok(b) => b,
        Err(e) => return text(500, format!("reading logs: {e}")),
    };
    let now = k8s_openapi::jiff::Timestamp::now().as_nanosecond();
    let (out, offset) = logs::render(&bytes, &q, now);
    if !q.follow {
        return text(200, out);
    }
    // follow: streamed until the container stops or the client goes away
    let (tx, body) = Body::channel(16);
    let follow = Follow {
        runtime: rt.clone(),
        dir,
        file,
        handle,
        uid,
        container: container.to_string(),
        timestamps: q.timestamps,
        offset,
        now,
    };
    tokio::spawn(async move {
        if out.is_empty() || tx.send(out.into()).await.is_ok() {
            follow.run(tx).await;
        }
    });
    server::respond(StatusCode::OK, TEXT, body)
}

/// A followed container log.
struct Follow {
    runtime: Arc<CriRuntime>,
    dir: PathBuf,
    file: PathBuf,
    /// The file being read: after a rotation renamed it, it is read to its
    /// end before the new file at `file` is opened.
    handle: tokio::fs::File,
    uid: String,
    container: String,
    timestamps: bool,
    offset: usize,
    now: i128,
}

impl Follow {
    /// The log was rotated: `file` is no longer the file being read.
    async fn rotated(&self) -> bool {
        use std::os::unix::fs::MetadataExt;
        let (Ok(now), Ok(reading)) = (
            tokio::fs::metadata(&self.file).await,
            self.handle.metadata().await,
        ) else {
            return false;
        };
        (now.dev(), now.ino()) != (reading.dev(), reading.ino())
    }

    /// Sends what the file gains until the container stops, a newer
    /// attempt starts or the client goes away; across log rotations.
    async fn run(mut self, tx: tokio::sync::mpsc::Sender<bytes::Bytes>) {
        let q = logs::LogQuery {
            timestamps: self.timestamps,
            ..Default::default()
        };
        let mut idle_checks = 0u32;
        loop {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let bytes = logs::read_at(&mut self.handle, self.offset, logs::FOLLOW_CHUNK)
                .await
                .unwrap_or_default();
            if !bytes.is_empty() {
                let (out, used) = logs::render(&bytes, &q, self.now);
                // A chunk without a newline (a line longer than the chunk,
                // which CRI logs never hold) is skipped, not waited on.
                self.offset += if used == 0 && bytes.len() == logs::FOLLOW_CHUNK {
                    bytes.len()
                } else {
                    used
                };
                if !out.is_empty() && tx.send(out.into()).await.is_err() {
                    return;
                }
                if used > 0 {
                    continue;
                }
            }
            if tx.is_closed() {
                return;
            }
            // The old file is read to its end: go on in the new one.
            if self.rotated().await {
                if let Ok(h) = tokio::fs::File::open(&self.file).await {
                    self.handle = h;
                    self.offset = 0;
                    continue;
                }
            }
            // about every 1.2 s of silence: is the container still running?
            idle_checks += 1;
            if idle_checks >= 4 {
                idle_checks = 0;
                if self
                    .runtime
                    .container_running(&self.uid, &self.container)
                    .await
                    != Some(true)
                {
                    return;
                }
            }
            // a newer attempt started: this instance is done (the live file
            // missing for a moment during a rotation is not that)
            if logs::newer_attempt(&self.dir, &self.file) {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rkube_daemon::testing::{self, Ca, ClientConfig, FakeAccess, FakeTokens};

    #[test]
    fn routes() {
        assert_eq!(route("/healthz"), Route::Healthz);
        assert_eq!(route("/pods/"), Route::Pods);
        assert_eq!(route("/metrics"), Route::Metrics);
        assert_eq!(route("/metrics/resource"), Route::ResourceMetrics);
        assert_eq!(route("/metrics/cadvisor/"), Route::CadvisorMetrics);
        assert_eq!(route("/metrics/probes"), Route::ProbeMetrics);
        assert_eq!(route("/stats/summary"), Route::Summary);
        assert_eq!(route("/stats"), Route::NotFound);
        assert_eq!(route("/configz"), Route::Configz);
        assert_eq!(route("/logs"), Route::SystemLogs(String::new()));
        assert_eq!(route("/logs/"), Route::SystemLogs("/".into()));
        assert_eq!(route("/logs/pods/"), Route::SystemLogs("/pods/".into()));
        assert_eq!(route("/logsx"), Route::NotFound);
        assert_eq!(route("/runningpods/"), Route::RunningPods);
        assert_eq!(
            route("/timeline/default/web"),
            Route::Timeline {
                namespace: "default".into(),
                pod: "web".into()
            }
        );
        assert_eq!(route("/timeline/default"), Route::NotFound);
        assert_eq!(route("/timeline//web"), Route::NotFound);
        assert_eq!(
            route("/containerLogs/default/web-1/app"),
            Route::ContainerLogs {
                namespace: "default".into(),
                pod: "web-1".into(),
                container: "app".into()
            }
        );
        assert_eq!(route("/containerLogs/default/web-1"), Route::NotFound);
        assert_eq!(route("/containerLogs/default//app"), Route::NotFound);
        assert_eq!(
            route("/exec/default/p/c"),
            Route::Stream(stream::Target {
                kind: stream::Kind::Exec,
                namespace: "default".into(),
                pod: "p".into(),
                uid: None,
                container: Some("c".into()),
            })
        );
        assert!(matches!(
            route("/portForward/default/p/"),
            Route::Stream(stream::Target {
                kind: stream::Kind::PortForward,
                container: None,
                ..
            })
        ));
        assert_eq!(route("/exec/default/p"), Route::NotFound);
    }

    /// The API on 127.0.0.1 with a client CA: token `t` is `alice`; the
    /// API server's client certificate user may use `nodes/proxy` and
    /// `nodes/healthz` of node `n`, alice only `nodes/healthz`.
    async fn start(auth: AuthConfig) -> (std::net::SocketAddr, ServingTls, Ca, Arc<FakeAccess>) {
        let ca = Ca::new("kubelet-client-ca");
        let dir = std::env::temp_dir().join(format!(
            "rkube-kubelet-api-{}-{}",
            std::process::id(),
            auth.anonymous
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("ca.crt"), ca.pem()).unwrap();
        let settings = ApiSettings {
            client_ca_file: Some(dir.join("ca.crt")),
            auth: auth.clone(),
            ..Default::default()
        };
        let tls = tls_config(
            &settings,
            &dir,
            &["n".into()],
            Serving::Files { reload: false },
        )
        .unwrap();
        assert!(tls.has_client_ca());
        let client =
            Client::try_from(kube::Config::new("https://127.0.0.1:1".parse().unwrap())).unwrap();
        let ctx = Arc::new(ApiContext {
            node: "n".into(),
            client,
            metrics: Arc::new(Metrics::default()),
            runtime: None,
            stats: None,
            config: Arc::new(KubeletConfiguration::default()),
            auth,
        });
        let access = Arc::new(FakeAccess::allow(|u, a| {
            let rkube_daemon::auth::Attributes::Resource(r) = a else {
                return false;
            };
            r.name == "n"
                && match u.name.as_str() {
                    "kube-apiserver-kubelet-client" => {
                        ["proxy", "healthz"].contains(&r.subresource.as_str())
                    }
                    "alice" => r.subresource == "healthz",
                    _ => false,
                }
        }));
        let api = KubeletApi::new(
            ctx,
            Arc::new(FakeTokens::new(&[("t", "alice")])),
            access.clone(),
        );
        let config = tls.server_config(true).unwrap();
        let addr = testing::start(Some(config), Limits::default(), Arc::new(api)).await;
        let _ = std::fs::remove_dir_all(&dir);
        (addr, tls, ca, access)
    }

    #[tokio::test]
    async fn requests_are_authenticated_authorized_and_routed() {
        let (addr, tls, ca, access) = start(AuthConfig::default()).await;
        let (cert, key) = ca.issue("kube-apiserver-kubelet-client", &["system:masters"]);
        let apiserver =
            testing::client_config(tls.certificates(), Some((&cert, &key)), &[b"http/1.1"]);
        let plain = testing::client_config(tls.certificates(), None, &[b"http/1.1"]);
        let get = |c: &Arc<ClientConfig>, path: &'static str, token: Option<&'static str>| {
            let c = c.clone();
            async move { testing::get(addr, Some(c), path, token).await.unwrap() }
        };
        assert_eq!(get(&apiserver, "/healthz", None).await, (200, "ok".into()));
        let (code, body) = get(&apiserver, "/metrics", None).await;
        assert_eq!(code, 403, "nodes/metrics is not allowed: {body}");
        assert_eq!(
            get(&apiserver, "/exec/a/b/c?output=1", None).await,
            (404, "streaming needs the CRI runtime".into()),
            "allowed (proxy), routed, no CRI runtime here"
        );
        assert_eq!(
            get(&apiserver, "/exec/a/b/c", None).await,
            (
                400,
                "you must specify at least 1 of stdin, stdout, stderr".into()
            )
        );
        // POST: for the streams only
        let send = |method: &'static str, path: &'static str| {
            let c = apiserver.clone();
            async move {
                let mut s = testing::connect_tls(addr, c).await.unwrap();
                let req = format!(
                    "{method} {path} HTTP/1.1\r\nHost: n\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                );
                tokio::io::AsyncWriteExt::write_all(&mut s, req.as_bytes())
                    .await
                    .unwrap();
                let mut raw = Vec::new();
                let _ = tokio::io::AsyncReadExt::read_to_end(&mut s, &mut raw).await;
                testing::parse_response(&raw).unwrap().0
            }
        };
        assert_eq!(send("POST", "/portForward/a/b").await, 404);
        assert_eq!(send("POST", "/healthz").await, 405);
        assert_eq!(send("PUT", "/exec/a/b/c?input=1").await, 405);
        assert_eq!(
            get(&plain, "/healthz", None).await,
            (401, "Unauthorized".into())
        );
        assert_eq!(
            get(&plain, "/healthz", Some("wrong")).await,
            (401, "Unauthorized".into())
        );
        assert_eq!(get(&plain, "/healthz", Some("t")).await, (200, "ok".into()));
        assert_eq!(
            get(&plain, "/containerLogs/a/b/c", Some("t")).await,
            (
                403,
                "Forbidden (user=alice, verb=get, resource=nodes, subresource(s)=[proxy])".into()
            )
        );
        // the same question twice is one review
        let before = access.calls.load(std::sync::atomic::Ordering::SeqCst);
        get(&apiserver, "/healthz", None).await;
        assert_eq!(
            access.calls.load(std::sync::atomic::Ordering::SeqCst),
            before
        );
    }

    #[tokio::test]
    async fn anonymous_requests_when_enabled() {
        let (addr, tls, _, _) = start(AuthConfig {
            anonymous: true,
            ..AuthConfig::default()
        })
        .await;
        let plain = testing::client_config(tls.certificates(), None, &[b"http/1.1"]);
        // system:anonymous is authenticated, then refused by the authorizer
        let (code, body) = testing::get(addr, Some(plain), "/healthz", None)
            .await
            .unwrap();
        assert_eq!(code, 403);
        assert!(body.contains("user=system:anonymous"), "{body}");
    }

    #[test]
    fn settings_from_a_kubelet_configuration() {
        let s = ApiSettings::parse(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             tlsCertFile: /a.crt\ntlsPrivateKeyFile: /a.key\n\
             authentication: {x509: {clientCAFile: /ca.crt}, webhook: {enabled: false, cacheTTL: 10s}, anonymous: {enabled: true}}\n\
             authorization: {mode: AlwaysAllow, webhook: {cacheAuthorizedTTL: 1m, cacheUnauthorizedTTL: 0s}}\n",
        )
        .unwrap();
        assert_eq!(s.tls_cert_file, Some(PathBuf::from("/a.crt")));
        assert_eq!(s.client_ca_file, Some(PathBuf::from("/ca.crt")));
        assert!(s.auth.anonymous && !s.auth.webhook_authn && !s.auth.webhook_authz);
        assert_eq!(s.auth.authn_cache_ttl, Duration::from_secs(10));
        assert_eq!(s.auth.authorized_ttl, Duration::from_secs(60));
        assert_eq!(s.auth.unauthorized_ttl, Duration::ZERO);
        assert!(ApiSettings::parse("authentication: {webhook: {cacheTTL: soon}}\n").is_err());
        let d = ApiSettings::parse("kind: KubeletConfiguration\n").unwrap();
        assert_eq!(d, ApiSettings::default());
        assert!(d.auth.webhook_authz && d.auth.webhook_authn && !d.auth.anonymous);
        assert!(ApiSettings::parse("authorization: {mode: Magic}\n").is_err());
    }

    #[test]
    fn self_signed_certificates_are_kept() {
        let dir = std::env::temp_dir().join(format!("rkube-kubelet-pki-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let a = tls_config(
            &ApiSettings::default(),
            &dir,
            &["node-a".into()],
            Serving::Files { reload: false },
        );
        assert!(a.is_ok());
        let first = std::fs::read(dir.join("kubelet.crt")).unwrap();
        tls_config(
            &ApiSettings::default(),
            &dir,
            &["node-a".into()],
            Serving::Files { reload: false },
        )
        .unwrap();
        assert_eq!(std::fs::read(dir.join("kubelet.crt")).unwrap(), first);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
