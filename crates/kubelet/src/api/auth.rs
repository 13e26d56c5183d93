//! Authentication and authorization of the kubelet API, as upstream's
//! `pkg/kubelet/server/auth.go`:
//!
//! * x509 client certificates verified against
//!   `authentication.x509.clientCAFile` (by rustls during the handshake):
//!   the user is the subject's CN, the groups its O values;
//! * bearer tokens reviewed by the API server (`TokenReview`) when
//!   `authentication.webhook.enabled` (default true);
//! * neither: 401, unless `authentication.anonymous.enabled` (default
//!   false), then `system:anonymous`;
//! * `authorization.mode: Webhook` (default) asks the API server with a
//!   `SubjectAccessReview` on `nodes/<subresource>` of this node (verb from
//!   the HTTP method); `AlwaysAllow` allows everything.

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct User {
    /// User name.
    pub name: String,
    /// Groups.
    pub groups: Vec<String>,
    /// UID (token users).
    pub uid: Option<String>,
}

/// The subject of a client certificate (DER): CN as the user, O as groups.
pub fn user_from_cert(der: &[u8]) -> Option<User> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let name = subject
        .iter_common_name()
        .next()
        .and_then(|a| a.as_str().ok())?
        .to_string();
    let groups = subject
        .iter_organization()
        .filter_map(|a| a.as_str().ok().map(str::to_string))
        .collect();
    Some(User {
        name,
        groups,
        uid: None,
    })
}

/// The verb of an HTTP method (upstream's mapping; others: empty).
pub fn verb(method: &str) -> &'static str {
    match method {
        "POST" => "create",
        "GET" | "HEAD" => "get",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        _ => "",
    }
}

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
    /// `authorization.mode == Webhook` (else AlwaysAllow).
    pub webhook_authz: bool,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            anonymous: false,
            webhook_authn: true,
            webhook_authz: true,
        }
    }
}

/// A refusal: status code and message.
pub type Refusal = (u16, String);

/// Who is calling: the certificate's user, else the token's, else
/// anonymous (if allowed), else 401.
pub async fn authenticate(
    cfg: &AuthConfig,
    client: &Client,
    cert_user: Option<User>,
    token: Option<&str>,
) -> Result<User, Refusal> {
    if let Some(u) = cert_user {
        return Ok(u);
    }
    if let (Some(token), true) = (token, cfg.webhook_authn) {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_string(),
                ..Default::default()
            },
            ..Default::default()
        };
        let reviewed = Api::<TokenReview>::all(client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| (500, format!("token review failed: {e}")))?;
        let status = reviewed.status.unwrap_or_default();
        if status.authenticated == Some(true) {
            let u = status.user.unwrap_or_default();
            return Ok(User {
                name: u.username.unwrap_or_default(),
                groups: u.groups.unwrap_or_default(),
                uid: u.uid,
            });
        }
        return Err((401, "Unauthorized".into()));
    }
    if cfg.anonymous {
        return Ok(User {
            name: "system:anonymous".into(),
            groups: vec!["system:unauthenticated".into()],
            uid: None,
        });
    }
    Err((401, "Unauthorized".into()))
}

/// May `user` do `method path` on node `node`? One SubjectAccessReview
/// per candidate subresource until one allows.
pub async fn authorize(
    cfg: &AuthConfig,
    client: &Client,
    user: &User,
    node: &str,
    method: &str,
    path: &str,
) -> Result<(), Refusal> {
    if !cfg.webhook_authz {
        return Ok(());
    }
    let verb = verb(method);
    let subs = subresources(path);
    for sub in &subs {
        let sar = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                groups: Some(user.groups.clone()),
                uid: user.uid.clone(),
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(verb.into()),
                    group: Some(String::new()),
                    version: Some("v1".into()),
                    resource: Some("nodes".into()),
                    subresource: Some(sub.to_string()),
                    name: Some(node.into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let decided = Api::<SubjectAccessReview>::all(client.clone())
            .create(&PostParams::default(), &sar)
            .await
            .map_err(|e| (500, format!("subject access review failed: {e}")))?;
        if decided.status.is_some_and(|s| s.allowed) {
            return Ok(());
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

#[cfg(test)]
mod tests {
    use super::*;

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
            ("/podsx", vec!["proxy"]),
            ("/configz", vec!["configz", "proxy"]),
        ] {
            assert_eq!(subresources(path), want, "{path}");
        }
    }

    #[test]
    fn verbs() {
        assert_eq!(verb("GET"), "get");
        assert_eq!(verb("POST"), "create");
        assert_eq!(verb("DELETE"), "delete");
        assert_eq!(verb("BREW"), "");
    }

    #[test]
    fn certificate_subjects() {
        let mut params = rcgen::CertificateParams::new(vec!["x".to_string()]).unwrap();
        let mut dn = rcgen::DistinguishedName::new();
        dn.push(rcgen::DnType::CommonName, "kube-apiserver-kubelet-client");
        dn.push(rcgen::DnType::OrganizationName, "system:masters");
        params.distinguished_name = dn;
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let u = user_from_cert(cert.der()).unwrap();
        assert_eq!(u.name, "kube-apiserver-kubelet-client");
        assert_eq!(u.groups, vec!["system:masters"]);
        assert_eq!(user_from_cert(b"junk"), None);
    }

    #[tokio::test]
    async fn no_credentials_is_401_unless_anonymous() {
        // A client that is never used: no certificate, no token.
        let cfg = kube::Config::new("https://127.0.0.1:1".parse().unwrap());
        let client = Client::try_from(cfg).unwrap();
        let r = authenticate(&AuthConfig::default(), &client, None, None).await;
        assert_eq!(r.unwrap_err().0, 401);
        let anon = AuthConfig {
            anonymous: true,
            ..Default::default()
        };
        let u = authenticate(&anon, &client, None, None).await.unwrap();
        assert_eq!(u.name, "system:anonymous");
        let cert = User {
            name: "a".into(),
            ..Default::default()
        };
        let u = authenticate(
            &AuthConfig::default(),
            &client,
            Some(cert.clone()),
            Some("t"),
        )
        .await
        .unwrap();
        assert_eq!(u, cert, "a verified certificate wins over a token");
        let allow = AuthConfig {
            webhook_authz: false,
            ..Default::default()
        };
        assert!(authorize(&allow, &client, &cert, "n", "GET", "/pods")
            .await
            .is_ok());
    }
}
