//! Delegated authentication and authorization, as upstream's
//! `k8s.io/apiserver` delegating authenticator and authorizer (which
//! kube-scheduler's secure port and the kubelet API both use):
//!
//! * **x509**: a client certificate verified during the handshake against
//!   the client CA ([`crate::tls`]) is the user: its subject's CN is the
//!   name, its O values the groups. It wins over a token.
//! * **bearer tokens**: reviewed by the API server (`TokenReview`), behind a
//!   [`Cache`]; a token it does not authenticate, or a review that fails,
//!   is a 401.
//! * **anonymous**: no credentials at all is `system:anonymous` (group
//!   `system:unauthenticated`) when allowed, else a 401.
//! * **authorization**: `SubjectAccessReview` of the user and the request's
//!   [`Attributes`], behind a [`Cache`] of its own.
//!
//! The reviews are traits ([`TokenReviewer`], [`AccessReviewer`]) so the
//! servers can be tested without an API server; [`KubeReviewer`] is the
//! real one. Tokens never appear in a log line, an error or a response.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes as SarResourceAttributes, SubjectAccessReview,
    SubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};

use crate::cache::{Cache, Ttl, DEFAULT_CAPACITY};

/// A boxed, sendable future (what the review traits return).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
/// A TokenReview's answer: the user, `None` when not authenticated.
pub type TokenVerdict<'a> = BoxFuture<'a, Result<Option<User>, ReviewError>>;
/// A SubjectAccessReview's answer: allowed?
pub type AccessVerdict<'a> = BoxFuture<'a, Result<bool, ReviewError>>;

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct User {
    /// User name.
    pub name: String,
    /// UID (token users).
    pub uid: Option<String>,
    /// Groups.
    pub groups: Vec<String>,
    /// Extra attributes (token users).
    pub extra: BTreeMap<String, Vec<String>>,
}

impl User {
    /// `system:anonymous` in `system:unauthenticated`.
    pub fn anonymous() -> User {
        User {
            name: "system:anonymous".into(),
            groups: vec!["system:unauthenticated".into()],
            ..Default::default()
        }
    }
}

/// The user of a client certificate (DER): CN as the name, O as groups
/// (upstream's `CommonNameUserConversion`). `None` without a CN.
pub fn user_from_cert(der: &[u8]) -> Option<User> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let name = subject
        .iter_common_name()
        .next()
        .and_then(|a| a.as_str().ok())
        .filter(|n| !n.is_empty())?
        .to_string();
    let groups = subject
        .iter_organization()
        .filter_map(|a| a.as_str().ok().map(str::to_string))
        .collect();
    Some(User {
        name,
        groups,
        ..Default::default()
    })
}

/// The token of an `Authorization: Bearer <token>` header value; `None`
/// for another scheme or an empty or malformed token.
pub fn bearer_token(header: &str) -> Option<&str> {
    let (scheme, token) = header.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer")
        && !token.is_empty()
        && !token.contains(|c: char| c.is_ascii_whitespace()))
    .then_some(token)
}

/// The API verb of an HTTP method on a resource (upstream's mapping:
/// POST create, GET/HEAD get, PUT update, PATCH patch, DELETE delete;
/// others empty).
pub fn resource_verb(method: &str) -> &'static str {
    match method {
        "POST" => "create",
        "GET" | "HEAD" => "get",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        _ => "",
    }
}

/// What a request asks to do, as a SubjectAccessReview states it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attributes {
    /// A non-resource URL (the scheduler's `/metrics`): the verb is the
    /// lower-cased HTTP method.
    NonResource {
        /// `get`, `post`, ...
        verb: String,
        /// The URL path.
        path: String,
    },
    /// A resource (the kubelet's `nodes/<subresource>`).
    Resource(ResourceAttributes),
}

impl Attributes {
    /// A non-resource request: `method` on `path`.
    pub fn non_resource(method: &str, path: &str) -> Attributes {
        Attributes::NonResource {
            verb: method.to_ascii_lowercase(),
            path: path.to_string(),
        }
    }

    /// The verb.
    pub fn verb(&self) -> &str {
        match self {
            Attributes::NonResource { verb, .. } => verb,
            Attributes::Resource(r) => &r.verb,
        }
    }

    fn key_parts(&self) -> Vec<&[u8]> {
        match self {
            Attributes::NonResource { verb, path } => {
                vec![b"nonresource", verb.as_bytes(), path.as_bytes()]
            }
            Attributes::Resource(r) => vec![
                b"resource",
                r.verb.as_bytes(),
                r.group.as_bytes(),
                r.version.as_bytes(),
                r.resource.as_bytes(),
                r.subresource.as_bytes(),
                r.namespace.as_bytes(),
                r.name.as_bytes(),
            ],
        }
    }
}

/// The resource attributes of a request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResourceAttributes {
    /// Verb ([`resource_verb`]).
    pub verb: String,
    /// API group (`""` for core).
    pub group: String,
    /// API version.
    pub version: String,
    /// Resource (`nodes`).
    pub resource: String,
    /// Subresource (`proxy`, `stats`, `log`, ...).
    pub subresource: String,
    /// Namespace (`""` for cluster-scoped).
    pub namespace: String,
    /// Object name.
    pub name: String,
}

/// A review the API server could not answer (no verdict).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct ReviewError(pub String);

/// Who a bearer token belongs to.
pub trait TokenReviewer: Send + Sync {
    /// The user, or `None` when the token is not authenticated.
    fn review_token<'a>(&'a self, token: &'a str) -> TokenVerdict<'a>;
}

/// May a user do something.
pub trait AccessReviewer: Send + Sync {
    /// Allowed?
    fn review_access<'a>(&'a self, user: &'a User, attrs: &'a Attributes) -> AccessVerdict<'a>;
}

/// The reviews against the API server: `TokenReview` and
/// `SubjectAccessReview`.
#[derive(Clone)]
pub struct KubeReviewer(pub Client);

impl TokenReviewer for KubeReviewer {
    fn review_token<'a>(&'a self, token: &'a str) -> TokenVerdict<'a> {
        Box::pin(async move {
            let review = TokenReview {
                spec: TokenReviewSpec {
                    token: token.to_string(),
                    ..Default::default()
                },
                ..Default::default()
            };
            let reviewed = Api::<TokenReview>::all(self.0.clone())
                .create(&PostParams::default(), &review)
                .await
                .map_err(|e| ReviewError(format!("token review: {e}")))?;
            let status = reviewed.status.unwrap_or_default();
            if status.authenticated != Some(true) {
                if let Some(e) = status.error.filter(|e| !e.is_empty()) {
                    tracing::debug!(error = %e, "token not authenticated");
                }
                return Ok(None);
            }
            let u = status.user.unwrap_or_default();
            Ok(Some(User {
                name: u.username.unwrap_or_default(),
                uid: u.uid,
                groups: u.groups.unwrap_or_default(),
                extra: u.extra.unwrap_or_default(),
            }))
        })
    }
}

impl AccessReviewer for KubeReviewer {
    fn review_access<'a>(&'a self, user: &'a User, attrs: &'a Attributes) -> AccessVerdict<'a> {
        Box::pin(async move {
            let (non_resource_attributes, resource_attributes) = match attrs {
                Attributes::NonResource { verb, path } => (
                    Some(NonResourceAttributes {
                        path: Some(path.clone()),
                        verb: Some(verb.clone()),
                    }),
                    None,
                ),
                Attributes::Resource(r) => (
                    None,
                    Some(SarResourceAttributes {
                        verb: Some(r.verb.clone()),
                        group: Some(r.group.clone()),
                        version: Some(r.version.clone()),
                        resource: Some(r.resource.clone()),
                        subresource: Some(r.subresource.clone()),
                        namespace: Some(r.namespace.clone()),
                        name: Some(r.name.clone()),
                        ..Default::default()
                    }),
                ),
            };
            let sar = SubjectAccessReview {
                spec: SubjectAccessReviewSpec {
                    user: Some(user.name.clone()),
                    uid: user.uid.clone(),
                    groups: Some(user.groups.clone()),
                    extra: (!user.extra.is_empty()).then(|| user.extra.clone()),
                    non_resource_attributes,
                    resource_attributes,
                },
                ..Default::default()
            };
            let decided = Api::<SubjectAccessReview>::all(self.0.clone())
                .create(&PostParams::default(), &sar)
                .await
                .map_err(|e| ReviewError(format!("subject access review: {e}")))?;
            Ok(decided.status.is_some_and(|s| s.allowed))
        })
    }
}

/// The request carried no credentials accepted (a 401).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("Unauthorized")]
pub struct Unauthorized;

/// Token authentication: the reviewer and its verdicts.
struct TokenAuth {
    reviewer: Arc<dyn TokenReviewer>,
    cache: Cache<Option<User>>,
}

/// Authenticates requests: x509, then bearer tokens, then anonymous.
pub struct Authenticator {
    tokens: Option<TokenAuth>,
    anonymous: bool,
}

impl Authenticator {
    /// Client certificates only; `anonymous`: no credentials is
    /// `system:anonymous` rather than a 401.
    pub fn new(anonymous: bool) -> Authenticator {
        Authenticator {
            tokens: None,
            anonymous,
        }
    }

    /// Also bearer tokens, reviewed by `reviewer`, verdicts kept for `ttl`.
    pub fn with_tokens(mut self, reviewer: Arc<dyn TokenReviewer>, ttl: Ttl) -> Authenticator {
        self.tokens = Some(TokenAuth {
            reviewer,
            cache: Cache::new(ttl, DEFAULT_CAPACITY),
        });
        self
    }

    /// Who is calling: the certificate's user, else the token's, else
    /// anonymous if allowed. A token is not looked at when token
    /// authentication is off (as upstream, where no authenticator reads it).
    pub async fn authenticate(
        &self,
        cert_user: Option<&User>,
        token: Option<&str>,
    ) -> Result<User, Unauthorized> {
        if let Some(u) = cert_user {
            return Ok(u.clone());
        }
        if let (Some(token), Some(TokenAuth { reviewer, cache })) = (token, &self.tokens) {
            let verdict = cache
                .get_or_review(&[token.as_bytes()], Option::is_some, || {
                    reviewer.review_token(token)
                })
                .await;
            return match verdict {
                Ok(Some(u)) => Ok(u),
                Ok(None) => Err(Unauthorized),
                Err(e) => {
                    tracing::warn!(error = %e, "authenticating a bearer token failed");
                    Err(Unauthorized)
                }
            };
        }
        if self.anonymous {
            Ok(User::anonymous())
        } else {
            Err(Unauthorized)
        }
    }
}

/// Authorizes requests with SubjectAccessReviews, cached.
pub struct Authorizer {
    reviewer: Arc<dyn AccessReviewer>,
    cache: Cache<bool>,
}

impl Authorizer {
    /// Reviews by `reviewer`, verdicts kept for `ttl`.
    pub fn new(reviewer: Arc<dyn AccessReviewer>, ttl: Ttl) -> Authorizer {
        Authorizer {
            reviewer,
            cache: Cache::new(ttl, DEFAULT_CAPACITY),
        }
    }

    /// May `user` do what `attributes` say? An error when the API server
    /// could not be asked (a 500: no verdict).
    pub async fn allowed(&self, user: &User, attributes: &Attributes) -> Result<bool, ReviewError> {
        let mut parts: Vec<&[u8]> = vec![
            user.name.as_bytes(),
            user.uid.as_deref().unwrap_or("").as_bytes(),
        ];
        parts.push(b"groups");
        parts.extend(user.groups.iter().map(|g| g.as_bytes()));
        parts.push(b"extra");
        for (k, vs) in &user.extra {
            parts.push(k.as_bytes());
            parts.extend(vs.iter().map(|v| v.as_bytes()));
            parts.push(b"");
        }
        parts.extend(attributes.key_parts());
        self.cache
            .get_or_review(
                &parts,
                |allowed| *allowed,
                || self.reviewer.review_access(user, attributes),
            )
            .await
    }
}

/// upstream kube-scheduler's `--authentication-token-webhook-cache-ttl`.
pub const SCHEDULER_TOKEN_TTL: Ttl = Ttl::both(Duration::from_secs(10));
/// upstream kube-scheduler's `--authorization-webhook-cache-authorized-ttl`
/// and `--authorization-webhook-cache-unauthorized-ttl`.
pub const SCHEDULER_ACCESS_TTL: Ttl = Ttl::both(Duration::from_secs(10));

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{Ca, FakeAccess, FakeTokens};
    use std::sync::atomic::Ordering;

    #[test]
    fn certificate_subjects() {
        let ca = Ca::new("test-ca");
        let (pem, _) = ca.issue("kube-apiserver-kubelet-client", &["system:masters", "ops"]);
        let der = rustls_pemfile::certs(&mut pem.as_bytes())
            .next()
            .unwrap()
            .unwrap();
        let u = user_from_cert(der.as_ref()).unwrap();
        assert_eq!(u.name, "kube-apiserver-kubelet-client");
        assert_eq!(u.groups, vec!["system:masters", "ops"]);
        assert_eq!(user_from_cert(b"junk"), None);
    }

    #[test]
    fn bearer_tokens() {
        assert_eq!(bearer_token("Bearer abc.def"), Some("abc.def"));
        assert_eq!(bearer_token("bearer  abc "), Some("abc"));
        assert_eq!(bearer_token("Basic xyz"), None);
        assert_eq!(bearer_token("Bearer "), None);
        assert_eq!(bearer_token("Bearer a b"), None);
        assert_eq!(bearer_token("Bearer"), None);
    }

    #[test]
    fn verbs() {
        assert_eq!(resource_verb("GET"), "get");
        assert_eq!(resource_verb("POST"), "create");
        assert_eq!(resource_verb("DELETE"), "delete");
        assert_eq!(resource_verb("BREW"), "");
        assert_eq!(Attributes::non_resource("GET", "/metrics").verb(), "get");
    }

    #[tokio::test]
    async fn certificates_win_then_tokens_then_anonymous() {
        let tokens = Arc::new(FakeTokens::new(&[("good", "alice")]));
        let authn = Authenticator::new(false).with_tokens(tokens.clone(), SCHEDULER_TOKEN_TTL);
        let cert = User {
            name: "cert-user".into(),
            ..Default::default()
        };
        assert_eq!(
            authn.authenticate(Some(&cert), Some("good")).await,
            Ok(cert)
        );
        assert_eq!(
            tokens.calls.load(Ordering::SeqCst),
            0,
            "no review with a certificate"
        );
        assert_eq!(
            authn.authenticate(None, Some("good")).await.unwrap().name,
            "alice"
        );
        assert_eq!(
            authn.authenticate(None, Some("bad")).await,
            Err(Unauthorized)
        );
        assert_eq!(authn.authenticate(None, None).await, Err(Unauthorized));
        let anon = Authenticator::new(true);
        assert_eq!(anon.authenticate(None, None).await, Ok(User::anonymous()));
        assert_eq!(
            anon.authenticate(None, Some("ignored")).await,
            Ok(User::anonymous()),
            "token authentication off: the token is not read"
        );
    }

    #[tokio::test]
    async fn failed_reviews_are_401_and_retried() {
        let tokens = Arc::new(FakeTokens::failing());
        let authn = Authenticator::new(true).with_tokens(tokens.clone(), SCHEDULER_TOKEN_TTL);
        for _ in 0..3 {
            assert_eq!(authn.authenticate(None, Some("t")).await, Err(Unauthorized));
        }
        assert_eq!(
            tokens.calls.load(Ordering::SeqCst),
            3,
            "errors are not cached"
        );
    }

    #[tokio::test]
    async fn access_verdicts_are_cached_per_user_and_attributes() {
        let access = Arc::new(FakeAccess::allow(|u, a| {
            u.name == "alice" && a == &Attributes::non_resource("GET", "/metrics")
        }));
        let authz = Authorizer::new(access.clone(), SCHEDULER_ACCESS_TTL);
        let alice = User {
            name: "alice".into(),
            ..Default::default()
        };
        let metrics = Attributes::non_resource("GET", "/metrics");
        for _ in 0..10 {
            assert!(authz.allowed(&alice, &metrics).await.unwrap());
            assert!(!authz.allowed(&User::anonymous(), &metrics).await.unwrap());
        }
        assert!(!authz
            .allowed(&alice, &Attributes::non_resource("GET", "/debug"))
            .await
            .unwrap());
        assert_eq!(access.calls.load(Ordering::SeqCst), 3);
        // another group is another key
        let admin = User {
            groups: vec!["system:masters".into()],
            ..alice.clone()
        };
        authz.allowed(&admin, &metrics).await.unwrap();
        assert_eq!(access.calls.load(Ordering::SeqCst), 4);
    }
}
