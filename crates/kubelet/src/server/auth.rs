//! Authentication and authorization of the kubelet API, as upstream's
//! `pkg/kubelet/server/auth.go`, on the daemons' shared delegated
//! authenticator and authorizer ([`rkube_daemon::auth`]):
//!
//! * x509 client certificates verified against
//!   `authentication.x509.clientCAFile` (by rustls during the handshake):
//!   the user is the subject's CN, the groups its O values;
//! * bearer tokens reviewed by the API server (`TokenReview`) when
//!   `authentication.webhook.enabled` (default true), verdicts cached for
//!   `authentication.webhook.cacheTTL` (default 2m);
//! * neither: 401, unless `authentication.anonymous.enabled` (default
//!   false), then `system:anonymous`;
//! * `authorization.mode: Webhook` (default) asks the API server with a
//!   `SubjectAccessReview` on `nodes/<subresource>` of this node (verb from
//!   the HTTP method), verdicts cached for
//!   `authorization.webhook.cacheAuthorizedTTL` (5m) and
//!   `cacheUnauthorizedTTL` (30s); `AlwaysAllow` allows everything.

use std::sync::Arc;
use std::time::Duration;

use rkube_daemon::auth::{
    resource_verb, AccessReviewer, Attributes, Authenticator, Authorizer, ResourceAttributes,
    ReviewError, TokenReviewer, User,
};
use rkube_daemon::cache::Ttl;

fn is_subpath(path: &str, prefix: &str) -> bool {
    path == prefix || path.starts_with(&format!("{}/", prefix.trim_end_matches('/')))
}

/// The `nodes` subresources checked for `path`, in order (any allowing
/// one suffices): upstream's mapping with `KubeletFineGrainedAuthz` (on by
/// default in v1.37): `/pods`, `/runningpods` → `pods`, `/healthz` →
/// `healthz`, `/configz` → `configz`, each falling back to the coarse one
/// (`/stats` → `stats`, `/metrics` → `metrics`, `/logs` → `log`,
/// `/checkpoint` → `checkpoint`, anything else → `proxy`).
pub fn subresources(path: &str) -> Vec<&'static str> {
    let mut out = Vec::new();
    if is_subpath(path, "/pods") || is_subpath(path, "/runningpods") {
        out.push("pods");
    } else if is_subpath(path, "/healthz") {
        out.push("healthz");
    } else if is_subpath(path, "/configz") {
        out.push("configz");
    }
    out.push(if is_subpath(path, "/stats") {
        "stats"
    } else if is_subpath(path, "/metrics") {
        "metrics"
    } else if is_subpath(path, "/logs") {
        "log"
    } else if is_subpath(path, "/checkpoint") {
        "checkpoint"
    } else if is_subpath(path, "/statusz") {
        "statusz"
    } else if is_subpath(path, "/flagz") {
        "configz"
    } else {
        "proxy"
    });
    out
}

/// How requests are authenticated and authorized.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthConfig {
    /// `authentication.anonymous.enabled`.
    pub anonymous: bool,
    /// `authentication.webhook.enabled`.
    pub webhook_authn: bool,
    /// `authentication.webhook.cacheTTL`.
    pub authn_cache_ttl: Duration,
    /// `authorization.mode == Webhook` (else AlwaysAllow).
    pub webhook_authz: bool,
    /// `authorization.webhook.cacheAuthorizedTTL`.
    pub authorized_ttl: Duration,
    /// `authorization.webhook.cacheUnauthorizedTTL`.
    pub unauthorized_ttl: Duration,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            anonymous: false,
            webhook_authn: true,
            authn_cache_ttl: Duration::from_secs(120),
            webhook_authz: true,
            authorized_ttl: Duration::from_secs(300),
            unauthorized_ttl: Duration::from_secs(30),
        }
    }
}

/// A refusal: status code and message.
pub type Refusal = (u16, String);

/// The kubelet's authenticator and authorizer.
pub struct Auth {
    authn: Authenticator,
    authz: Option<Authorizer>,
}

impl Auth {
    /// As `cfg` says, with `tokens` and `access` as the reviews.
    pub fn new(
        cfg: &AuthConfig,
        tokens: Arc<dyn TokenReviewer>,
        access: Arc<dyn AccessReviewer>,
    ) -> Auth {
        let mut authn = Authenticator::new(cfg.anonymous);
        if cfg.webhook_authn {
            authn = authn.with_tokens(tokens, Ttl::both(cfg.authn_cache_ttl));
        }
        let ttl = Ttl {
            allowed: cfg.authorized_ttl,
            denied: cfg.unauthorized_ttl,
        };
        Auth {
            authn,
            authz: cfg.webhook_authz.then(|| Authorizer::new(access, ttl)),
        }
    }

    /// Who is calling: the certificate's user, else the token's, else
    /// anonymous (if allowed), else 401.
    pub async fn authenticate(
        &self,
        cert_user: Option<&User>,
        token: Option<&str>,
    ) -> Result<User, Refusal> {
        self.authn
            .authenticate(cert_user, token)
            .await
            .map_err(|_| (401, "Unauthorized".into()))
    }

    /// May `user` do `method path` on node `node`? One SubjectAccessReview
    /// per candidate subresource (each cached) until one allows.
    pub async fn authorize(
        &self,
        user: &User,
        node: &str,
        method: &str,
        path: &str,
    ) -> Result<(), Refusal> {
        let Some(authz) = &self.authz else {
            return Ok(());
        };
        let verb = resource_verb(method);
        let subs = subresources(path);
        for sub in &subs {
            let attributes = Attributes::Resource(ResourceAttributes {
                verb: verb.into(),
                version: "v1".into(),
                resource: "nodes".into(),
                subresource: sub.to_string(),
                name: node.into(),
                ..Default::default()
            });
            match authz.allowed(user, &attributes).await {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(ReviewError(e)) => {
                    tracing::warn!(error = %e, "authorizing a kubelet API request failed");
                    return Err((500, "Internal Server Error".into()));
                }
            }
        }
        Err((
            403,
            format!(
                "Forbidden (user={}, verb={verb}, resource=nodes, subresource(s)=[{}])",
                user.name,
                subs.join(" ")
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rkube_daemon::testing::{FakeAccess, FakeTokens};
    use std::sync::atomic::Ordering;

    #[test]
    fn paths_map_to_subresources() {
        for (path, want) in [
            ("/pods", vec!["pods", "proxy"]),
            ("/pods/", vec!["pods", "proxy"]),
            ("/runningpods/", vec!["pods", "proxy"]),
            ("/healthz", vec!["healthz", "proxy"]),
            ("/metrics", vec!["metrics"]),
            ("/metrics/cadvisor", vec!["metrics"]),
            ("/stats/summary", vec!["stats"]),
            ("/logs/syslog", vec!["log"]),
            ("/containerLogs/ns/p/c", vec!["proxy"]),
            ("/exec/ns/p/c", vec!["proxy"]),
            ("/timeline/ns/p", vec!["proxy"]),
            ("/podsx", vec!["proxy"]),
            ("/configz", vec!["configz", "proxy"]),
        ] {
            assert_eq!(subresources(path), want, "{path}");
        }
    }

    fn auth(cfg: &AuthConfig) -> (Auth, Arc<FakeTokens>, Arc<FakeAccess>) {
        let tokens = Arc::new(FakeTokens::new(&[("t", "alice")]));
        // alice may only use the fine-grained nodes/pods of node n
        let access = Arc::new(FakeAccess::allow(|u, a| {
            u.name == "alice"
                && matches!(a, Attributes::Resource(r)
                    if r.subresource == "pods" && r.name == "n" && r.verb == "get")
        }));
        (
            Auth::new(cfg, tokens.clone(), access.clone()),
            tokens,
            access,
        )
    }

    #[tokio::test]
    async fn no_credentials_is_401_unless_anonymous() {
        let (a, _, _) = auth(&AuthConfig::default());
        assert_eq!(a.authenticate(None, None).await.unwrap_err().0, 401);
        let (anon, _, _) = auth(&AuthConfig {
            anonymous: true,
            ..Default::default()
        });
        assert_eq!(
            anon.authenticate(None, None).await.unwrap().name,
            "system:anonymous"
        );
        let cert = User {
            name: "a".into(),
            ..Default::default()
        };
        assert_eq!(
            a.authenticate(Some(&cert), Some("t")).await.unwrap(),
            cert,
            "a verified certificate wins over a token"
        );
        let (no_webhook, tokens, _) = auth(&AuthConfig {
            webhook_authn: false,
            ..Default::default()
        });
        assert_eq!(
            no_webhook
                .authenticate(None, Some("t"))
                .await
                .unwrap_err()
                .0,
            401
        );
        assert_eq!(
            tokens.calls.load(Ordering::SeqCst),
            0,
            "webhook off: no TokenReview"
        );
    }

    #[tokio::test]
    async fn node_subresources_are_reviewed_in_order_and_cached() {
        let (a, _, access) = auth(&AuthConfig::default());
        let alice = a.authenticate(None, Some("t")).await.unwrap();
        for _ in 0..5 {
            assert!(a.authorize(&alice, "n", "GET", "/pods").await.is_ok());
        }
        assert_eq!(
            access.calls.load(Ordering::SeqCst),
            1,
            "nodes/pods allowed, cached"
        );
        let (code, msg) = a
            .authorize(&alice, "n", "GET", "/containerLogs/a/b/c")
            .await
            .unwrap_err();
        assert_eq!(code, 403);
        assert_eq!(
            msg,
            "Forbidden (user=alice, verb=get, resource=nodes, subresource(s)=[proxy])"
        );
        assert_eq!(
            a.authorize(&alice, "other", "GET", "/pods")
                .await
                .unwrap_err()
                .0,
            403
        );
        let second = access.seen.lock().unwrap()[1].1.clone();
        let Attributes::Resource(r) = &second else {
            panic!("resource attributes expected")
        };
        assert_eq!(
            (
                r.resource.as_str(),
                r.version.as_str(),
                r.subresource.as_str(),
                r.name.as_str()
            ),
            ("nodes", "v1", "proxy", "n")
        );
        let (always, _, access) = auth(&AuthConfig {
            webhook_authz: false,
            ..Default::default()
        });
        assert!(always
            .authorize(&User::anonymous(), "n", "POST", "/exec/a/b/c")
            .await
            .is_ok());
        assert_eq!(access.calls.load(Ordering::SeqCst), 0);
    }
}
