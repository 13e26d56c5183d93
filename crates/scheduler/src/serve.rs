//! The secure port: `/healthz`, `/livez`, `/readyz` and `/metrics` over
//! HTTPS, as kube-scheduler serves them on `--secure-port`, on the
//! daemons' shared server ([`rkube_daemon::server`]: HTTP/1.1 and HTTP/2,
//! handshake and request-head deadlines, size limits, a connection cap).
//!
//! The certificate is `--tls-cert-file`/`--tls-private-key-file`, or a
//! self-signed one (kept in `--cert-dir` when given, as upstream does).
//! Paths in `--authorization-always-allow-paths` (default `/healthz`,
//! `/readyz`, `/livez`) are open; any other path is upstream's delegated
//! authentication and authorization ([`rkube_daemon::auth`]):
//!
//! * a client certificate signed by `--client-ca-file` is the user (CN,
//!   groups from O); else a bearer token the API server accepts
//!   (TokenReview; a token it rejects is a 401); else `system:anonymous`;
//! * the user must be allowed the request's verb on the path
//!   (SubjectAccessReview with non-resource attributes), else a 403
//!   `forbidden: User "<name>" cannot get path "<path>"`.
//!
//! Verdicts are cached for upstream kube-scheduler's defaults: 10 s for
//! tokens (`--authentication-token-webhook-cache-ttl`) and 10 s for
//! allowed and denied access (`--authorization-webhook-cache-*-ttl`).

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use kube::Client;
use rkube_daemon::auth::{
    AccessReviewer, Attributes, Authenticator, Authorizer, KubeReviewer, TokenReviewer,
    SCHEDULER_ACCESS_TTL, SCHEDULER_TOKEN_TTL,
};
use rkube_daemon::server::{self, Handler, Limits, Request, Response, StatusCode};
use rkube_daemon::tls::SelfSigned;
pub use rkube_daemon::tls::ServingTls;
use tokio::net::TcpListener;

use crate::Shared;

/// What the server needs besides the scheduler's state.
#[derive(Clone)]
pub struct ServeConfig {
    /// Paths served without authentication.
    pub always_allow: Vec<String>,
    /// Client for TokenReview and SubjectAccessReview.
    pub auth_client: Client,
}

/// What the secure port reports about the scheduler.
pub trait Status: Send + Sync + 'static {
    /// Have the informers listed every kind (`/readyz`)?
    fn synced(&self) -> bool;
    /// The `/metrics` text (OpenMetrics).
    fn metrics(&self) -> String;
}

impl Status for Shared {
    fn synced(&self) -> bool {
        self.is_synced()
    }

    fn metrics(&self) -> String {
        self.metrics.render(&self.gauges())
    }
}

/// The response for a health path, `None` for any other path.
pub fn health(path: &str, synced: bool) -> Option<Response> {
    match path.trim_end_matches('/') {
        "/healthz" | "/livez" => Some(server::text(StatusCode::OK, "ok")),
        "/readyz" if synced => Some(server::text(StatusCode::OK, "ok")),
        "/readyz" => Some(server::text(
            StatusCode::SERVICE_UNAVAILABLE,
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

/// The serving certificate: the given files, or a self-signed pair for
/// `localhost`, `127.0.0.1` and the host name (kept in `cert_dir` as
/// `kube-scheduler.{crt,key}` when given). `--client-ca-file` is added by
/// [`with_client_ca`].
pub fn tls_config(
    cert_file: Option<&Path>,
    key_file: Option<&Path>,
    cert_dir: Option<&Path>,
) -> Result<ServingTls> {
    let hosts = [crate::api::hostname()];
    let tls = ServingTls::load_or_self_sign(
        cert_file,
        key_file,
        SelfSigned {
            dir: cert_dir,
            stem: "kube-scheduler",
            hosts: &hosts,
        },
    )
    .context("the secure port's certificate (--tls-cert-file, --tls-private-key-file)")?;
    tls.server_config(true)
        .context("the secure port's TLS configuration")?;
    Ok(tls)
}

/// `tls` also accepting client certificates signed by the CAs in
/// `--client-ca-file` (`None`: client certificates are not asked for).
pub fn with_client_ca(tls: ServingTls, client_ca_file: Option<&Path>) -> Result<ServingTls> {
    let tls = tls
        .with_client_ca(client_ca_file)
        .context("--client-ca-file")?;
    tls.server_config(true).context("--client-ca-file")?;
    Ok(tls)
}

/// The secure port's request handler.
pub struct SecurePort<S> {
    status: Arc<S>,
    always_allow: Vec<String>,
    authn: Authenticator,
    authz: Authorizer,
}

impl<S: Status> SecurePort<S> {
    /// Serves `status`, authenticating tokens with `tokens` and
    /// authorizing with `access` (certificates are verified by TLS).
    pub fn new(
        status: Arc<S>,
        always_allow: Vec<String>,
        tokens: Arc<dyn TokenReviewer>,
        access: Arc<dyn AccessReviewer>,
    ) -> SecurePort<S> {
        SecurePort {
            status,
            always_allow,
            // upstream's delegating authenticator: anonymous requests
            // reach the authorizer as system:anonymous
            authn: Authenticator::new(true).with_tokens(tokens, SCHEDULER_TOKEN_TTL),
            authz: Authorizer::new(access, SCHEDULER_ACCESS_TTL),
        }
    }

    /// `None` when `req` may go on, else the refusal.
    async fn refusal(&self, req: &Request) -> Option<Response> {
        if always_allowed(&req.path, &self.always_allow) {
            return None;
        }
        let Ok(user) = self
            .authn
            .authenticate(req.cert_user(), req.bearer_token())
            .await
        else {
            return Some(server::unauthorized());
        };
        let attributes = Attributes::non_resource(req.method.as_str(), &req.path);
        match self.authz.allowed(&user, &attributes).await {
            Ok(true) => None,
            Ok(false) => Some(server::forbidden(format!(
                "forbidden: User \"{}\" cannot {} path \"{}\"",
                user.name,
                attributes.verb(),
                req.path
            ))),
            Err(e) => Some(server::internal_error(&e)),
        }
    }
}

impl<S: Status> Handler for SecurePort<S> {
    async fn handle(&self, req: Request) -> Response {
        if let Some(refused) = self.refusal(&req).await {
            return refused;
        }
        if let Some(r) = health(&req.path, self.status.synced()) {
            return r;
        }
        match req.path.as_str() {
            "/metrics" => server::respond(
                StatusCode::OK,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                server::Body::whole(self.status.metrics()),
            ),
            _ => server::text(StatusCode::NOT_FOUND, "404 page not found"),
        }
    }
}

/// Serves HTTPS until the task is aborted (it ends only if the TLS
/// configuration cannot be built, which [`tls_config`] already checked).
pub async fn serve(listener: TcpListener, tls: ServingTls, shared: Arc<Shared>, cfg: ServeConfig) {
    let reviewer = Arc::new(KubeReviewer(cfg.auth_client));
    let port = SecurePort::new(shared, cfg.always_allow, reviewer.clone(), reviewer);
    serve_port(listener, &tls, port).await
}

/// Serves `port` with `tls` on the shared server's default limits.
pub async fn serve_port<S: Status>(listener: TcpListener, tls: &ServingTls, port: SecurePort<S>) {
    let limits = Limits::default();
    match tls.server_config(limits.http2) {
        Ok(config) => server::serve(listener, Some(config), limits, Arc::new(port)).await,
        Err(e) => tracing::error!(error = %e, "the secure port's TLS configuration"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rkube_daemon::testing::{self, Ca, FakeAccess, FakeTokens};
    use std::sync::atomic::Ordering;

    struct FakeStatus;

    impl Status for FakeStatus {
        fn synced(&self) -> bool {
            true
        }
        fn metrics(&self) -> String {
            "scheduler_pending_pods 0\n# EOF\n".into()
        }
    }

    #[test]
    fn health_paths() {
        assert_eq!(health("/healthz", false).unwrap().status(), 200);
        assert_eq!(health("/livez/", false).unwrap().status(), 200);
        assert_eq!(health("/readyz", false).unwrap().status(), 503);
        assert_eq!(health("/readyz", true).unwrap().status(), 200);
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

    /// The port on 127.0.0.1 with `tls`: token `metrics-token` is user
    /// `reader`; `reader` and certificate user `prometheus` may get
    /// `/metrics`.
    async fn start(tls: &ServingTls) -> (std::net::SocketAddr, Arc<FakeTokens>, Arc<FakeAccess>) {
        let tokens = Arc::new(FakeTokens::new(&[("metrics-token", "reader")]));
        let access = Arc::new(FakeAccess::allow(|u, a| {
            ["reader", "prometheus"].contains(&u.name.as_str())
                && a == &Attributes::non_resource("GET", "/metrics")
        }));
        let always = ["/healthz", "/readyz", "/livez"].map(String::from).to_vec();
        let port = SecurePort::new(Arc::new(FakeStatus), always, tokens.clone(), access.clone());
        let config = tls.server_config(true).unwrap();
        let addr = testing::start(Some(config), Limits::default(), Arc::new(port)).await;
        (addr, tokens, access)
    }

    #[tokio::test]
    async fn metrics_need_an_allowed_token_or_client_certificate() {
        let ca = Ca::new("scheduler-client-ca");
        let dir = std::env::temp_dir().join(format!("rkube-client-ca-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca_file = dir.join("ca.crt");
        std::fs::write(&ca_file, ca.pem()).unwrap();
        // what `run` does with the flags
        let opts = crate::options::Options {
            client_ca_file: Some(ca_file.clone()),
            ..Default::default()
        };
        let tls = tls_config(
            opts.tls_cert_file.as_deref(),
            opts.tls_private_key_file.as_deref(),
            opts.cert_dir.as_deref(),
        )
        .unwrap();
        let tls = with_client_ca(tls, opts.client_ca_file.as_deref()).unwrap();
        assert!(tls.has_client_ca());
        let _ = std::fs::remove_dir_all(&dir);
        let missing = with_client_ca(tls_config(None, None, None).unwrap(), Some(&ca_file));
        assert!(format!("{:#}", missing.unwrap_err()).contains("--client-ca-file"));
        let (addr, tokens, access) = start(&tls).await;
        let plain = testing::client_config(tls.certificates(), None, &[b"http/1.1"]);
        let get = |path: &'static str, token: Option<&'static str>| {
            let c = plain.clone();
            async move { testing::get(addr, Some(c), path, token).await.unwrap() }
        };
        // open paths: no review at all
        assert_eq!(get("/healthz", None).await, (200, "ok".into()));
        assert_eq!(get("/readyz", Some("junk")).await.0, 200);
        assert_eq!(access.calls.load(Ordering::SeqCst), 0);
        // anonymous: reviewed, forbidden with upstream's message
        assert_eq!(
            get("/metrics", None).await,
            (
                403,
                "forbidden: User \"system:anonymous\" cannot get path \"/metrics\"".into()
            )
        );
        // a rejected token: 401, nothing echoed
        let (code, body) = get("/metrics", Some("stolen-token-xyz")).await;
        assert_eq!((code, body.as_str()), (401, "Unauthorized"));
        // an allowed token
        let (code, body) = get("/metrics", Some("metrics-token")).await;
        assert_eq!(code, 200, "{body}");
        assert!(body.contains("scheduler_pending_pods 0"));
        // allowed but not on another path
        assert_eq!(get("/debug/pprof", Some("metrics-token")).await.0, 403);
        assert_eq!(tokens.calls.load(Ordering::SeqCst), 2, "cached per token");

        // a client certificate signed by --client-ca-file is the user
        let (cert, key) = ca.issue("prometheus", &["monitoring"]);
        let with_cert =
            testing::client_config(tls.certificates(), Some((&cert, &key)), &[b"http/1.1"]);
        let (code, body) = testing::get(addr, Some(with_cert.clone()), "/metrics", None)
            .await
            .unwrap();
        assert_eq!(code, 200, "{body}");
        assert!(access
            .seen
            .lock()
            .unwrap()
            .iter()
            .any(|(user, _)| user == "prometheus"));
        // another certificate user is authenticated but not authorized
        let (cert, key) = ca.issue("someone-else", &[]);
        let other = testing::client_config(tls.certificates(), Some((&cert, &key)), &[b"http/1.1"]);
        assert_eq!(
            testing::get(addr, Some(other), "/metrics", None)
                .await
                .unwrap(),
            (
                403,
                "forbidden: User \"someone-else\" cannot get path \"/metrics\"".into()
            )
        );
        assert_eq!(
            tokens.calls.load(Ordering::SeqCst),
            2,
            "certificates need no TokenReview"
        );
    }

    #[tokio::test]
    async fn without_a_client_ca_certificates_are_not_asked_for() {
        let tls = tls_config(None, None, None).unwrap();
        assert!(!tls.has_client_ca());
        let (addr, _, _) = start(&tls).await;
        let ca = Ca::new("unknown");
        let (cert, key) = ca.issue("prometheus", &[]);
        let c = testing::client_config(tls.certificates(), Some((&cert, &key)), &[b"http/1.1"]);
        // the certificate is never requested, so it does not authenticate
        assert_eq!(
            testing::get(addr, Some(c), "/metrics", None)
                .await
                .unwrap()
                .0,
            403
        );
    }
}
