//! Test helpers for the servers built on [`crate::server`] (feature
//! `test-util`, and this crate's own tests): a server on an ephemeral
//! port, a certificate authority issuing client certificates, a TLS
//! client, a raw HTTP/1.1 GET, and fake
//! TokenReview / SubjectAccessReview backends that count their calls.
//! Panics on setup failures (they are test fixtures).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{self, RootCertStore, ServerConfig};
use tokio_rustls::TlsConnector;

/// The TLS client configuration [`client_config`] makes.
pub use tokio_rustls::rustls::ClientConfig;

use crate::auth::{
    AccessReviewer, AccessVerdict, Attributes, ReviewError, TokenReviewer, TokenVerdict, User,
};
use crate::server::{serve, Handler, Limits};

/// Serves `handler` on an ephemeral port of 127.0.0.1 (HTTPS with `tls`,
/// plain HTTP without) in a task of its own; its address.
pub async fn start<H: Handler>(
    tls: Option<Arc<ServerConfig>>,
    limits: Limits,
    handler: Arc<H>,
) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binding 127.0.0.1:0");
    let addr = listener.local_addr().expect("the bound address");
    tokio::spawn(serve(listener, tls, limits, handler));
    addr
}

/// A certificate authority for client certificates.
pub struct Ca {
    params: rcgen::CertificateParams,
    key: rcgen::KeyPair,
    pem: String,
}

impl Ca {
    /// A new self-signed CA named `cn`.
    pub fn new(cn: &str) -> Ca {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let key = rcgen::KeyPair::generate().expect("CA key");
        let pem = params.self_signed(&key).expect("CA certificate").pem();
        Ca { params, key, pem }
    }

    /// The CA certificate (PEM), for `--client-ca-file`.
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// A client certificate for user `cn` in groups `orgs` (at most two):
    /// (certificate PEM, key PEM).
    pub fn issue(&self, cn: &str, orgs: &[&str]) -> (String, String) {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        // rcgen keeps one value per attribute type: a second O goes in
        // under O's OID as a "custom" type, so the subject has both
        assert!(orgs.len() <= 2, "at most two O values");
        for (i, o) in orgs.iter().enumerate() {
            let t = match i {
                0 => rcgen::DnType::OrganizationName,
                _ => rcgen::DnType::CustomDnType(vec![2, 5, 4, 10]),
            };
            params.distinguished_name.push(t, *o);
        }
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let key = rcgen::KeyPair::generate().expect("client key");
        let issuer = rcgen::Issuer::from_params(&self.params, &self.key);
        let cert = params.signed_by(&key, &issuer).expect("client certificate");
        (cert.pem(), key.serialize_pem())
    }
}

/// A TLS client trusting `server_certs`, presenting `identity` (certificate
/// PEM, key PEM) when given, offering `alpn`.
pub fn client_config(
    server_certs: &[CertificateDer<'static>],
    identity: Option<(&str, &str)>,
    alpn: &[&[u8]],
) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for c in server_certs {
        roots
            .add(c.clone())
            .expect("trusting the server certificate");
    }
    let builder =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_root_certificates(roots);
    let mut cfg = match identity {
        Some((cert, key)) => {
            let certs = rustls_pemfile::certs(&mut cert.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .expect("client certificate PEM");
            let key = rustls_pemfile::private_key(&mut key.as_bytes())
                .expect("client key PEM")
                .expect("a client key");
            builder
                .with_client_auth_cert(certs, key)
                .expect("client identity")
        }
        None => builder.with_no_client_auth(),
    };
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(cfg)
}

/// A TLS connection to `addr` (server name `localhost`).
pub async fn connect_tls(
    addr: SocketAddr,
    client: Arc<ClientConfig>,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from("localhost").map_err(std::io::Error::other)?;
    TlsConnector::from(client).connect(name, tcp).await
}

/// `GET path` over HTTP/1.1 with `Connection: close` (TLS with `client`,
/// plain without), with a bearer token if given: (status, body).
pub async fn get(
    addr: SocketAddr,
    client: Option<Arc<ClientConfig>>,
    path: &str,
    token: Option<&str>,
) -> std::io::Result<(u16, String)> {
    match client {
        Some(c) => exchange(connect_tls(addr, c).await?, path, token).await,
        None => exchange(TcpStream::connect(addr).await?, path, token).await,
    }
}

/// One request on an open connection, read to its end.
pub async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    path: &str,
    token: Option<&str>,
) -> std::io::Result<(u16, String)> {
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{auth}Connection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await?;
    let mut raw = Vec::new();
    // a TLS peer closing without close_notify is an error after the data
    let _ = s.read_to_end(&mut raw).await;
    parse_response(&raw)
}

/// (status, body) of a raw HTTP/1.1 response, chunked bodies decoded.
pub fn parse_response(raw: &[u8]) -> std::io::Result<(u16, String)> {
    let bad = |m: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, m.to_string());
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| bad("no response head"))?;
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| bad("no status"))?;
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    if !chunked {
        return Ok((code, body.to_string()));
    }
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).map_err(|_| bad("chunk size"))?;
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
    Ok((code, out))
}

/// A TokenReview backend: known tokens map to users; counts reviews.
pub struct FakeTokens {
    users: HashMap<String, String>,
    fail: bool,
    /// Reviews made.
    pub calls: AtomicUsize,
}

impl FakeTokens {
    /// `(token, user name)` pairs authenticate; anything else does not.
    pub fn new(users: &[(&str, &str)]) -> FakeTokens {
        FakeTokens {
            users: users
                .iter()
                .map(|(t, u)| (t.to_string(), u.to_string()))
                .collect(),
            fail: false,
            calls: AtomicUsize::new(0),
        }
    }

    /// Every review fails (the API server unreachable).
    pub fn failing() -> FakeTokens {
        FakeTokens {
            fail: true,
            ..FakeTokens::new(&[])
        }
    }
}

impl TokenReviewer for FakeTokens {
    fn review_token<'a>(&'a self, token: &'a str) -> TokenVerdict<'a> {
        Box::pin(async move {
            self.calls.fetch_add(1, Ordering::SeqCst);
            // a review takes a while: concurrent requests overlap
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            if self.fail {
                return Err(ReviewError("connection refused".into()));
            }
            Ok(self.users.get(token).map(|name| User {
                name: name.clone(),
                groups: vec!["system:authenticated".into()],
                ..Default::default()
            }))
        })
    }
}

type Policy = Box<dyn Fn(&User, &Attributes) -> bool + Send + Sync>;

/// A SubjectAccessReview backend deciding by a function; counts reviews.
pub struct FakeAccess {
    policy: Policy,
    /// Reviews made.
    pub calls: AtomicUsize,
    /// The attributes reviewed, in order.
    pub seen: std::sync::Mutex<Vec<(String, Attributes)>>,
}

impl FakeAccess {
    /// Allows what `policy` allows.
    pub fn allow(
        policy: impl Fn(&User, &Attributes) -> bool + Send + Sync + 'static,
    ) -> FakeAccess {
        FakeAccess {
            policy: Box::new(policy),
            calls: AtomicUsize::new(0),
            seen: std::sync::Mutex::new(Vec::new()),
        }
    }
}

impl AccessReviewer for FakeAccess {
    fn review_access<'a>(&'a self, user: &'a User, attrs: &'a Attributes) -> AccessVerdict<'a> {
        Box::pin(async move {
            self.calls.fetch_add(1, Ordering::SeqCst);
            if let Ok(mut seen) = self.seen.lock() {
                seen.push((user.name.clone(), attrs.clone()));
            }
            Ok((self.policy)(user, attrs))
        })
    }
}
