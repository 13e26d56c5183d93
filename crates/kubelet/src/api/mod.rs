//! The kubelet API: HTTPS (HTTP/1.1) on `address:port` (10250), the part
//! of upstream's `pkg/kubelet/server` that `kubectl logs` and monitoring
//! use:
//!
//! | path | |
//! |---|---|
//! | `/healthz` | `ok` |
//! | `/pods` | `PodList` JSON of this node's pods (as the API server has them) |
//! | `/metrics` | the kubelet's counters (Prometheus text) |
//! | `/containerLogs/{ns}/{pod}/{container}` | the container's log ([`logs`]) |
//!
//! Every request is authenticated and authorized ([`auth`]): client
//! certificates signed by `authentication.x509.clientCAFile` (the API
//! server's kubelet client certificate), bearer tokens via TokenReview,
//! SubjectAccessReview on `nodes/{proxy,log,metrics,pods,...}`; no
//! credentials → 401.
//!
//! The serving certificate is `tlsCertFile`/`tlsPrivateKeyFile`, or a
//! self-signed one for the node name, host name, node IP and localhost,
//! kept in `<root-dir>/pki/kubelet.{crt,key}` (as upstream).
//!
//! Not served: `/exec`, `/attach`, `/portForward`, `/run`, `/stats`,
//! `/logs` (node logs), `/configz`, `/checkpoint` (404).

pub mod auth;
pub mod logs;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, Client};
use serde_yaml_ng::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{self, RootCertStore, ServerConfig};
use tokio_rustls::TlsAcceptor;

use crate::metrics::Metrics;
use crate::runtime::cri::{mirror_of, CriRuntime};
use auth::{AuthConfig, User};

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
        let s = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(PathBuf::from);
        let get = |path: &[&str]| {
            path.iter()
                .try_fold(&v, |v, k| v.get(*k))
                .filter(|v| !v.is_null())
        };
        let mut auth = AuthConfig::default();
        if let Some(b) = get(&["authentication", "anonymous", "enabled"]).and_then(Value::as_bool) {
            auth.anonymous = b;
        }
        if let Some(b) = get(&["authentication", "webhook", "enabled"]).and_then(Value::as_bool) {
            auth.webhook_authn = b;
        }
        if let Some(m) = get(&["authorization", "mode"]).and_then(Value::as_str) {
            auth.webhook_authz = match m {
                "Webhook" => true,
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

    /// Reads the settings of `--config` (defaults without one).
    pub fn load(config: Option<&Path>) -> Result<ApiSettings> {
        match config {
            Some(p) => ApiSettings::parse(
                &rkube_util::file::read_text(p, rkube_util::file::CONFIG_MAX_BYTES)
                    .with_context(|| format!("reading {}", p.display()))?,
            ),
            None => Ok(ApiSettings::default()),
        }
    }
}

/// The TLS config: the serving certificate (given or self-signed in
/// `pki_dir`) and the client-certificate verifier (optional client auth,
/// so token users can connect too).
pub fn tls_config(
    settings: &ApiSettings,
    pki_dir: &Path,
    names: &[String],
) -> Result<ServerConfig> {
    let (cert_pem, key_pem) = match (&settings.tls_cert_file, &settings.tls_private_key_file) {
        (Some(c), Some(k)) => (
            std::fs::read(c).with_context(|| format!("reading {}", c.display()))?,
            std::fs::read(k).with_context(|| format!("reading {}", k.display()))?,
        ),
        (None, None) => self_signed(pki_dir, names)?,
        _ => anyhow::bail!("tlsCertFile and tlsPrivateKeyFile must be given together"),
    };
    let certs: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut cert_pem.as_slice())
        .collect::<Result<_, _>>()
        .context("reading the serving certificate")?;
    let key: PrivateKeyDer<'static> = rustls_pemfile::private_key(&mut key_pem.as_slice())
        .context("reading the serving key")?
        .context("no private key in the key file")?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .context("TLS versions")?;
    let builder = match &settings.client_ca_file {
        Some(ca) => {
            let pem = std::fs::read(ca).with_context(|| format!("reading {}", ca.display()))?;
            let mut roots = RootCertStore::empty();
            for c in rustls_pemfile::certs(&mut pem.as_slice()) {
                roots
                    .add(c.context("reading the client CA")?)
                    .context("adding the client CA")?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .context("client certificate verifier")?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    builder
        .with_single_cert(certs, key)
        .context("the serving certificate and key do not match")
}

fn self_signed(dir: &Path, names: &[String]) -> Result<(Vec<u8>, Vec<u8>)> {
    let (c, k) = (dir.join("kubelet.crt"), dir.join("kubelet.key"));
    if c.exists() && k.exists() {
        return Ok((std::fs::read(&c)?, std::fs::read(&k)?));
    }
    let mut sans: Vec<String> = names.iter().filter(|n| !n.is_empty()).cloned().collect();
    sans.extend(["localhost".to_string(), "127.0.0.1".to_string()]);
    sans.sort();
    sans.dedup();
    let cert =
        rcgen::generate_simple_self_signed(sans).context("generating a self-signed certificate")?;
    let (cp, kp) = (cert.cert.pem(), cert.signing_key.serialize_pem());
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::write(&c, &cp)?;
    write_private(&k, kp.as_bytes())?;
    Ok((cp.into_bytes(), kp.into_bytes()))
}

fn write_private(path: &Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    opts.open(path)?.write_all(data)
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
    /// Authentication and authorization.
    pub auth: AuthConfig,
}

/// A parsed request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// Method.
    pub method: String,
    /// Path without the query.
    pub path: String,
    /// The query (without `?`).
    pub query: String,
    /// Bearer token, if any.
    pub token: Option<String>,
}

/// Parses the request head text.
pub fn parse_head(text: &str) -> Option<Head> {
    let mut lines = text.lines();
    let mut first = lines.next()?.split_whitespace();
    let method = first.next()?.to_string();
    let target = first.next()?;
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let token = lines.find_map(|l| {
        let (k, v) = l.split_once(':')?;
        if !k.trim().eq_ignore_ascii_case("authorization") {
            return None;
        }
        let (scheme, t) = v.trim().split_once(' ')?;
        scheme
            .eq_ignore_ascii_case("bearer")
            .then(|| t.trim().to_string())
    });
    Some(Head {
        method,
        path: path.to_string(),
        query: query.to_string(),
        token,
    })
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
    /// `/containerLogs/{ns}/{pod}/{container}`.
    ContainerLogs {
        /// Namespace.
        namespace: String,
        /// Pod name.
        pod: String,
        /// Container name.
        container: String,
    },
    /// Anything else (404).
    NotFound,
}

/// Routes a path.
pub fn route(path: &str) -> Route {
    let p = path.trim_end_matches('/');
    match p {
        "/healthz" => Route::Healthz,
        "/pods" => Route::Pods,
        "/metrics" => Route::Metrics,
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
                _ => Route::NotFound,
            }
        }
    }
}

async fn read_head<S: AsyncRead + Unpin>(sock: &mut S) -> Option<Head> {
    let mut buf = vec![0u8; 16384];
    let mut n = 0;
    while n < buf.len() {
        match tokio::time::timeout(Duration::from_secs(30), sock.read(&mut buf[n..])).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
            Ok(Ok(k)) => {
                n += k;
                if buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                    break;
                }
            }
        }
    }
    parse_head(&String::from_utf8_lossy(&buf[..n]))
}

fn reason(code: u16) -> &'static str {
    match code {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        _ => "Internal Server Error",
    }
}

async fn respond<S: AsyncWrite + Unpin>(sock: &mut S, code: u16, ctype: &str, body: &[u8]) {
    let head = format!(
        "HTTP/1.1 {code} {}\r\nContent-Type: {ctype}\r\nX-Content-Type-Options: nosniff\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        reason(code),
        body.len()
    );
    let _ = sock.write_all(head.as_bytes()).await;
    let _ = sock.write_all(body).await;
    let _ = sock.shutdown().await;
}

const TEXT: &str = "text/plain; charset=utf-8";

/// Serves HTTPS until the task is aborted.
pub async fn serve(listener: TcpListener, tls: ServerConfig, ctx: Arc<ApiContext>) {
    let acceptor = TlsAcceptor::from(Arc::new(tls));
    loop {
        match listener.accept().await {
            Ok((sock, _)) => {
                let acceptor = acceptor.clone();
                let ctx = ctx.clone();
                tokio::spawn(async move {
                    let hs = tokio::time::timeout(Duration::from_secs(10), acceptor.accept(sock));
                    if let Ok(Ok(tls)) = hs.await {
                        let user = tls
                            .get_ref()
                            .1
                            .peer_certificates()
                            .and_then(|c| c.first())
                            .and_then(|c| auth::user_from_cert(c.as_ref()));
                        handle(tls, user, ctx).await;
                    }
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "accepting a kubelet API connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn handle<S: AsyncRead + AsyncWrite + Unpin>(
    mut sock: S,
    cert_user: Option<User>,
    ctx: Arc<ApiContext>,
) {
    let Some(head) = read_head(&mut sock).await else {
        return;
    };
    let user =
        match auth::authenticate(&ctx.auth, &ctx.client, cert_user, head.token.as_deref()).await {
            Ok(u) => u,
            Err((code, msg)) => return respond(&mut sock, code, TEXT, msg.as_bytes()).await,
        };
    if let Err((code, msg)) = auth::authorize(
        &ctx.auth,
        &ctx.client,
        &user,
        &ctx.node,
        &head.method,
        &head.path,
    )
    .await
    {
        return respond(&mut sock, code, TEXT, msg.as_bytes()).await;
    }
    tracing::debug!(user = %user.name, method = %head.method, path = %head.path, "kubelet API request");
    if head.method != "GET" && head.method != "HEAD" {
        return respond(&mut sock, 405, TEXT, b"405 method not allowed").await;
    }
    match route(&head.path) {
        Route::Healthz => respond(&mut sock, 200, TEXT, b"ok").await,
        Route::Metrics => {
            let body = ctx.metrics.render();
            respond(
                &mut sock,
                200,
                "text/plain; version=0.0.4; charset=utf-8",
                body.as_bytes(),
            )
            .await
        }
        Route::Pods => {
            let api: Api<Pod> = Api::all(ctx.client.clone());
            let lp = ListParams::default().fields(&format!("spec.nodeName={}", ctx.node));
            match api.list(&lp).await {
                Ok(list) => {
                    let body = serde_json::json!({
                        "kind": "PodList", "apiVersion": "v1", "metadata": {},
                        "items": list.items,
                    });
                    respond(
                        &mut sock,
                        200,
                        "application/json",
                        body.to_string().as_bytes(),
                    )
                    .await
                }
                Err(e) => {
                    respond(
                        &mut sock,
                        500,
                        TEXT,
                        format!("listing pods: {e}").as_bytes(),
                    )
                    .await
                }
            }
        }
        Route::ContainerLogs {
            namespace,
            pod,
            container,
        } => container_logs(&mut sock, &ctx, &namespace, &pod, &container, &head.query).await,
        Route::NotFound => respond(&mut sock, 404, TEXT, b"404 page not found").await,
    }
}

async fn container_logs<S: AsyncWrite + Unpin>(
    sock: &mut S,
    ctx: &ApiContext,
    ns: &str,
    name: &str,
    container: &str,
    query: &str,
) {
    let q = match logs::LogQuery::parse(query) {
        Ok(q) => q,
        Err(e) => return respond(sock, 400, TEXT, e.as_bytes()).await,
    };
    let Some(rt) = &ctx.runtime else {
        return respond(sock, 404, TEXT, b"container logs need the CRI runtime").await;
    };
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let pod = match api.get_opt(name).await {
        Ok(Some(p)) => p,
        Ok(None) => {
            return respond(
                sock,
                404,
                TEXT,
                format!("pod {ns}/{name} not found").as_bytes(),
            )
            .await
        }
        Err(e) => return respond(sock, 500, TEXT, format!("getting pod: {e}").as_bytes()).await,
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
        return respond(sock, 400, TEXT, msg.as_bytes()).await;
    };
    let bytes = match tokio::fs::read(&file).await {
        Ok(b) => b,
        Err(e) => return respond(sock, 500, TEXT, format!("reading logs: {e}").as_bytes()).await,
    };
    let now = k8s_openapi::jiff::Timestamp::now().as_nanosecond();
    let (out, mut offset) = logs::render(&bytes, &q, now);
    if !q.follow {
        return respond(sock, 200, TEXT, &out).await;
    }
    // follow: chunked, until the container stops or the client goes away
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {TEXT}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    );
    if sock.write_all(head.as_bytes()).await.is_err() || !write_chunk(sock, &out).await {
        return;
    }
    let follow_q = logs::LogQuery {
        timestamps: q.timestamps,
        ..Default::default()
    };
    let mut idle_checks = 0u32;
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let bytes = tokio::fs::read(&file).await.unwrap_or_default();
        if bytes.len() > offset {
            let (out, used) = logs::render(&bytes[offset..], &follow_q, now);
            offset += used;
            if !out.is_empty() && !write_chunk(sock, &out).await {
                return;
            }
            continue;
        }
        // about every 1.2 s of silence: is the container still running?
        idle_checks += 1;
        if idle_checks >= 4 {
            idle_checks = 0;
            if rt.container_running(&uid, container).await != Some(true) {
                break;
            }
        }
        // a newer attempt started: this instance is done
        if logs::pick(&dir, false).as_ref() != Some(&file) {
            break;
        }
    }
    let _ = sock.write_all(b"0\r\n\r\n").await;
    let _ = sock.shutdown().await;
}

async fn write_chunk<S: AsyncWrite + Unpin>(sock: &mut S, data: &[u8]) -> bool {
    if data.is_empty() {
        return true;
    }
    let mut buf = format!("{:x}\r\n", data.len()).into_bytes();
    buf.extend_from_slice(data);
    buf.extend_from_slice(b"\r\n");
    sock.write_all(&buf).await.is_ok() && sock.flush().await.is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        assert_eq!(route("/healthz"), Route::Healthz);
        assert_eq!(route("/pods/"), Route::Pods);
        assert_eq!(route("/metrics"), Route::Metrics);
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
        assert_eq!(route("/exec/default/p/c"), Route::NotFound);
    }

    #[test]
    fn heads() {
        let h = parse_head(
            "GET /containerLogs/a/b/c?tailLines=1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer abc\r\n\r\n",
        )
        .unwrap();
        assert_eq!(h.method, "GET");
        assert_eq!(h.path, "/containerLogs/a/b/c");
        assert_eq!(h.query, "tailLines=1");
        assert_eq!(h.token.as_deref(), Some("abc"));
        assert_eq!(parse_head(""), None);
    }

    #[test]
    fn settings_from_a_kubelet_configuration() {
        let s = ApiSettings::parse(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             tlsCertFile: /a.crt\ntlsPrivateKeyFile: /a.key\n\
             authentication: {x509: {clientCAFile: /ca.crt}, webhook: {enabled: false}, anonymous: {enabled: true}}\n\
             authorization: {mode: AlwaysAllow}\n",
        )
        .unwrap();
        assert_eq!(s.tls_cert_file, Some(PathBuf::from("/a.crt")));
        assert_eq!(s.client_ca_file, Some(PathBuf::from("/ca.crt")));
        assert!(s.auth.anonymous && !s.auth.webhook_authn && !s.auth.webhook_authz);
        let d = ApiSettings::parse("kind: KubeletConfiguration\n").unwrap();
        assert_eq!(d, ApiSettings::default());
        assert!(d.auth.webhook_authz && d.auth.webhook_authn && !d.auth.anonymous);
        assert!(ApiSettings::parse("authorization: {mode: Magic}\n").is_err());
    }

    #[test]
    fn self_signed_certificates_are_kept() {
        let dir = std::env::temp_dir().join(format!("rkube-kubelet-pki-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let a = tls_config(&ApiSettings::default(), &dir, &["node-a".into()]);
        assert!(a.is_ok());
        let first = std::fs::read(dir.join("kubelet.crt")).unwrap();
        tls_config(&ApiSettings::default(), &dir, &["node-a".into()]).unwrap();
        assert_eq!(std::fs::read(dir.join("kubelet.crt")).unwrap(), first);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
