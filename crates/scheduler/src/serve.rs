//! The secure port: `/healthz`, `/livez`, `/readyz` and `/metrics` over
//! HTTPS (HTTP/1.1), as kube-scheduler serves them on `--secure-port`.
//!
//! The certificate is `--tls-cert-file`/`--tls-private-key-file`, or a
//! self-signed one (written to `--cert-dir` when given, as upstream does).
//! Paths in `--authorization-always-allow-paths` (default `/healthz`,
//! `/readyz`, `/livez`) are open; any other path needs a bearer token the
//! API server accepts (TokenReview) and authorizes for `get` on the path
//! (SubjectAccessReview) — upstream's delegated authentication and
//! authorization, without client-certificate authentication.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{self, ServerConfig};
use tokio_rustls::TlsAcceptor;

use crate::Shared;

/// What the server needs besides the scheduler's state.
#[derive(Clone)]
pub struct ServeConfig {
    /// Paths served without authentication.
    pub always_allow: Vec<String>,
    /// Client for TokenReview and SubjectAccessReview.
    pub auth_client: Client,
}

/// A response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// HTTP status.
    pub code: u16,
    /// Content type.
    pub content_type: &'static str,
    /// Body.
    pub body: String,
}

fn text(code: u16, body: impl Into<String>) -> Response {
    Response {
        code,
        content_type: "text/plain; charset=utf-8",
        body: body.into(),
    }
}

/// The response for a health path, `None` for any other path.
pub fn health(path: &str, synced: bool) -> Option<Response> {
    match path.trim_end_matches('/') {
        "/healthz" | "/livez" => Some(text(200, "ok")),
        "/readyz" if synced => Some(text(200, "ok")),
        "/readyz" => Some(text(
            503,
            "[-]sched-handler-sync failed: caches not synced\nreadyz check failed",
        )),
        _ => None,
    }
}

/// Is `path` open to anyone? (upstream's always-allow paths; a trailing
/// `*` matches a prefix)
pub fn always_allowed(path: &str, allow: &[String]) -> bool {
    allow.iter().any(|a| match a.strip_suffix('*') {
        Some(prefix) => path.starts_with(prefix),
        None => a == path,
    })
}

/// Who may read `path`: `Ok(())`, or the response refusing them.
async fn authorize(cfg: &ServeConfig, token: Option<&str>, path: &str) -> Result<(), Response> {
    let forbidden = |user: &str| {
        text(
            403,
            format!("forbidden: User \"{user}\" cannot get path \"{path}\""),
        )
    };
    let Some(token) = token else {
        return Err(forbidden("system:anonymous"));
    };
    let review = TokenReview {
        spec: TokenReviewSpec {
            token: token.to_string(),
            ..Default::default()
        },
        ..Default::default()
    };
    let reviewed = Api::<TokenReview>::all(cfg.auth_client.clone())
        .create(&PostParams::default(), &review)
        .await
        .map_err(|e| text(500, format!("token review failed: {e}")))?;
    let status = reviewed.status.unwrap_or_default();
    if status.authenticated != Some(true) {
        return Err(text(401, "Unauthorized"));
    }
    let user = status.user.unwrap_or_default();
    let name = user.username.clone().unwrap_or_default();
    let sar = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: user.username,
            groups: user.groups,
            uid: user.uid,
            extra: user.extra,
            non_resource_attributes: Some(NonResourceAttributes {
                path: Some(path.to_string()),
                verb: Some("get".into()),
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let decided = Api::<SubjectAccessReview>::all(cfg.auth_client.clone())
        .create(&PostParams::default(), &sar)
        .await
        .map_err(|e| text(500, format!("subject access review failed: {e}")))?;
    if decided.status.is_some_and(|s| s.allowed) {
        Ok(())
    } else {
        Err(forbidden(&name))
    }
}

/// Reads the request head: (path, bearer token).
async fn read_head<S: AsyncRead + Unpin>(sock: &mut S) -> Option<(String, Option<String>)> {
    let mut buf = vec![0u8; 8192];
    let mut n = 0;
    while n < buf.len() {
        match sock.read(&mut buf[n..]).await {
            Ok(0) | Err(_) => break,
            Ok(k) => {
                n += k;
                if buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                    break;
                }
            }
        }
    }
    let head = String::from_utf8_lossy(&buf[..n]);
    let mut lines = head.lines();
    let path = lines.next()?.split_whitespace().nth(1)?.to_string();
    let token = lines.find_map(|l| {
        let (k, v) = l.split_once(':')?;
        if !k.trim().eq_ignore_ascii_case("authorization") {
            return None;
        }
        let v = v.trim();
        let (scheme, t) = v.split_once(' ')?;
        scheme
            .eq_ignore_ascii_case("bearer")
            .then(|| t.trim().to_string())
    });
    Some((path, token))
}

async fn handle<S: AsyncRead + AsyncWrite + Unpin>(
    mut sock: S,
    shared: Arc<Shared>,
    cfg: Arc<ServeConfig>,
) {
    let Some((target, token)) = read_head(&mut sock).await else {
        return;
    };
    let path = target.split('?').next().unwrap_or("").to_string();
    let resp = if always_allowed(&path, &cfg.always_allow) {
        health(&path, shared.is_synced()).unwrap_or_else(|| route(&path, &shared))
    } else {
        match authorize(&cfg, token.as_deref(), &path).await {
            Ok(()) => health(&path, shared.is_synced()).unwrap_or_else(|| route(&path, &shared)),
            Err(r) => r,
        }
    };
    let reason = match resp.code {
        200 => "OK",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        503 => "Service Unavailable",
        _ => "Internal Server Error",
    };
    let head = format!(
        "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nX-Content-Type-Options: nosniff\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        resp.code,
        resp.content_type,
        resp.body.len()
    );
    let _ = sock.write_all(head.as_bytes()).await;
    let _ = sock.write_all(resp.body.as_bytes()).await;
    let _ = sock.shutdown().await;
}

/// Non-health paths.
fn route(path: &str, shared: &Shared) -> Response {
    match path {
        "/metrics" => Response {
            code: 200,
            content_type: "application/openmetrics-text; version=1.0.0; charset=utf-8",
            body: shared.metrics.render(shared.pending()),
        },
        _ => text(404, "404 page not found"),
    }
}

/// Loads the configured certificate and key, or makes a self-signed pair
/// for `localhost`/`127.0.0.1` (saved in `cert_dir` when given).
pub fn tls_config(
    cert_file: Option<&Path>,
    key_file: Option<&Path>,
    cert_dir: Option<&Path>,
) -> Result<ServerConfig> {
    let (cert_pem, key_pem) = match (cert_file, key_file) {
        (Some(c), Some(k)) => (
            std::fs::read(c).with_context(|| format!("reading {}", c.display()))?,
            std::fs::read(k).with_context(|| format!("reading {}", k.display()))?,
        ),
        (None, None) => {
            let existing =
                cert_dir.map(|d| (d.join("kube-scheduler.crt"), d.join("kube-scheduler.key")));
            match existing {
                Some((c, k)) if c.exists() && k.exists() => {
                    (std::fs::read(&c)?, std::fs::read(&k)?)
                }
                _ => {
                    let host = crate::api::hostname();
                    let cert = rcgen::generate_simple_self_signed(vec![
                        "localhost".to_string(),
                        "127.0.0.1".to_string(),
                        host,
                    ])
                    .context("generating a self-signed certificate")?;
                    let (c, k) = (cert.cert.pem(), cert.signing_key.serialize_pem());
                    if let Some(d) = cert_dir {
                        std::fs::create_dir_all(d)
                            .with_context(|| format!("creating {}", d.display()))?;
                        std::fs::write(d.join("kube-scheduler.crt"), &c)?;
                        write_private(&d.join("kube-scheduler.key"), k.as_bytes())?;
                    }
                    (c.into_bytes(), k.into_bytes())
                }
            }
        }
        _ => anyhow::bail!("--tls-cert-file and --tls-private-key-file must be given together"),
    };
    let certs: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut cert_pem.as_slice())
        .collect::<Result<_, _>>()
        .context("reading the serving certificate")?;
    let key: PrivateKeyDer<'static> = rustls_pemfile::private_key(&mut key_pem.as_slice())
        .context("reading the serving key")?
        .context("no private key in the key file")?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS versions")?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .context("the serving certificate and key do not match")?;
    Ok(config)
}

fn write_private(path: &Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    opts.open(path)?.write_all(data)
}

/// Serves HTTPS until the task is aborted.
pub async fn serve(
    listener: TcpListener,
    tls: ServerConfig,
    shared: Arc<Shared>,
    cfg: ServeConfig,
) {
    let acceptor = TlsAcceptor::from(Arc::new(tls));
    let cfg = Arc::new(cfg);
    loop {
        match listener.accept().await {
            Ok((sock, _)) => {
                let acceptor = acceptor.clone();
                let shared = shared.clone();
                let cfg = cfg.clone();
                tokio::spawn(async move {
                    let handshake = tokio::time::timeout(
                        std::time::Duration::from_secs(10),
                        acceptor.accept(sock),
                    );
                    if let Ok(Ok(tls)) = handshake.await {
                        handle(tls, shared, cfg).await;
                    }
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "accepting a connection on the secure port failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_paths() {
        assert_eq!(health("/healthz", false).unwrap().code, 200);
        assert_eq!(health("/readyz", false).unwrap().code, 503);
        assert_eq!(health("/readyz", true).unwrap().body, "ok");
        assert!(health("/metrics", true).is_none());
    }

    #[test]
    fn always_allow_paths() {
        let allow: Vec<String> = ["/healthz", "/readyz", "/livez", "/debug/*"]
            .map(String::from)
            .to_vec();
        assert!(always_allowed("/healthz", &allow));
        assert!(always_allowed("/debug/pprof", &allow));
        assert!(!always_allowed("/metrics", &allow));
        assert!(!always_allowed("/healthzz", &allow));
    }

    #[tokio::test]
    async fn reads_bearer_tokens() {
        let req = b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nauthorization: Bearer abc.def\r\n\r\n";
        let (path, token) = read_head(&mut &req[..]).await.unwrap();
        assert_eq!(path, "/metrics?x=1");
        assert_eq!(token.as_deref(), Some("abc.def"));
        let req = b"GET /healthz HTTP/1.1\r\nAuthorization: Basic xyz\r\n\r\n";
        assert_eq!(read_head(&mut &req[..]).await.unwrap().1, None);
    }

    #[test]
    fn self_signed_certificate_is_saved_and_reused() {
        let dir = std::env::temp_dir().join(format!("rkube-certs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        tls_config(None, None, Some(&dir)).unwrap();
        let first = std::fs::read(dir.join("kube-scheduler.crt")).unwrap();
        tls_config(None, None, Some(&dir)).unwrap();
        assert_eq!(
            std::fs::read(dir.join("kube-scheduler.crt")).unwrap(),
            first
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.join("kube-scheduler.key"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o077, 0, "the key is private");
        }
        assert!(tls_config(Some(&dir.join("kube-scheduler.crt")), None, None).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
