//! The API server client.
//!
//! kube-rs's default transport speaks HTTP/1.1 only: under load every
//! concurrent request opens its own TLS connection. A scheduler binding
//! thousands of pods at a high QPS (or a kubelet hosting thousands of sim
//! nodes) then makes the API server spend its CPU on handshakes. client-go
//! multiplexes all requests, watches included, over one HTTP/2 connection
//! with health pings (30 s read-idle, 15 s ping timeout); this client does
//! the same, keeping what kube-rs's default stack does around the
//! transport: the connect/read/write timeouts on the TLS connection, the
//! retry of 429/503/504 answers (with `Retry-After`), and the auth and
//! extra-header layers. Not kept: kube-rs's per-request tracing spans and
//! the expiry of exec-plugin credentials.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_timeout::TimeoutConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::retry::RetryPolicy;
use kube::client::{Body, ConfigExt};
use kube::{Client, Config};
use tower::retry::RetryLayer;
use tower::ServiceBuilder;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// client-go's HTTP/2 read-idle timeout (`HTTP2_READ_IDLE_TIMEOUT_SECONDS`).
const PING_INTERVAL: Duration = Duration::from_secs(30);
/// client-go's HTTP/2 ping timeout (`HTTP2_PING_TIMEOUT_SECONDS`).
const PING_TIMEOUT: Duration = Duration::from_secs(15);

/// Why no client could be made.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The kubeconfig file could not be read or parsed.
    #[error("reading kubeconfig {path}: {error}")]
    Read {
        /// The file.
        path: String,
        /// What went wrong.
        error: kube::config::KubeconfigError,
    },
    /// The kubeconfig does not make a usable configuration.
    #[error("loading kubeconfig {path}: {error}")]
    Load {
        /// The file.
        path: String,
        /// What went wrong.
        error: kube::config::KubeconfigError,
    },
    /// No kubeconfig was given and none could be inferred.
    #[error("no --kubeconfig given and no in-cluster or default kubeconfig found: {0}")]
    Infer(kube::config::InferConfigError),
    /// The client certificate files could not be read.
    #[error("loading the client certificate: {0}")]
    Identity(String),
    /// TLS or authentication settings could not be turned into a client.
    #[error("building the API client: {0}")]
    Build(kube::Error),
}

/// client-go's text of an API error: the API server's own message of an
/// error response (`persistentvolumeclaims "x" not found`), else the
/// error's.
pub fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    }
}

/// The configuration of `kubeconfig`, or in-cluster / `$KUBECONFIG` /
/// `~/.kube/config` without one.
pub async fn kube_config(kubeconfig: Option<&Path>) -> Result<Config, ClientError> {
    match kubeconfig {
        Some(p) => {
            let path = p.display().to_string();
            let kc = kube::config::Kubeconfig::read_from(p).map_err(|error| ClientError::Read {
                path: path.clone(),
                error,
            })?;
            Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|error| ClientError::Load { path, error })
        }
        None => Config::infer().await.map_err(ClientError::Infer),
    }
}

/// A client for `config` over HTTP/2 (HTTP/1.1 when the server does not
/// offer h2). Configurations this transport does not handle (a proxy, a
/// TLS server name override) get kube-rs's own HTTP/1.1 client.
pub fn client(config: Config) -> Result<Client, ClientError> {
    limited_client(config, None)
}

/// [`client`] whose every request first waits for a token of `limiter`
/// (a REST client of client-go with its QPS and burst).
pub fn limited_client(
    config: Config,
    limiter: Option<Arc<crate::ratelimit::RateLimiter>>,
) -> Result<Client, ClientError> {
    if config.proxy_url.is_some() || config.tls_server_name.is_some() {
        tracing::debug!("proxy or TLS server name configured: using an HTTP/1.1 client");
        let builder = kube::client::ClientBuilder::try_from(config).map_err(ClientError::Build)?;
        return Ok(match limiter {
            Some(l) => builder.with_layer(&crate::ratelimit::LimitLayer(l)).build(),
            None => builder.build(),
        });
    }
    let mut tls = config.rustls_client_config().map_err(ClientError::Build)?;
    // A client certificate in files (the kubelet's rotating
    // kubelet-client-current.pem): re-read when it changes, and the
    // connections made with the old one closed.
    let reloading = match (
        &config.auth_info.client_certificate,
        &config.auth_info.client_key,
    ) {
        (Some(c), Some(k)) if Path::new(c).is_absolute() && Path::new(k).is_absolute() => {
            let r = crate::client_cert::ReloadingCert::new(Path::new(c), Path::new(k))
                .map_err(ClientError::Identity)?;
            tls.client_auth_cert_resolver = r.clone();
            // No TLS session resumption: a resumed session would present
            // the identity of its first handshake, the old certificate.
            tls.resumption = tokio_rustls::rustls::client::Resumption::disabled();
            r.watch();
            Some(r)
        }
        _ => None,
    };
    let timeouts = (
        config.connect_timeout,
        config.read_timeout,
        config.write_timeout,
    );
    let make = move || {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls.clone())
            .https_or_http()
            .enable_all_versions()
            .wrap_connector(http);
        let mut https = TimeoutConnector::new(https);
        https.set_connect_timeout(timeouts.0);
        https.set_read_timeout(timeouts.1);
        https.set_write_timeout(timeouts.2);
        let client: hyper_util::client::legacy::Client<_, Body> =
            hyper_util::client::legacy::Client::builder(TokioExecutor::new())
                .timer(TokioTimer::new())
                .pool_timer(TokioTimer::new())
                .http2_keep_alive_interval(PING_INTERVAL)
                .http2_keep_alive_timeout(PING_TIMEOUT)
                .http2_keep_alive_while_idle(true)
                .build(https);
        client
    };
    let generation = match &reloading {
        Some(r) => r.generation(),
        // Never rotates: the sender is gone at once.
        None => tokio::sync::watch::channel(0).1,
    };
    let now = *generation.borrow();
    let transport = Rotating {
        current: Arc::new(Mutex::new((now, make()))),
        make: Arc::new(make),
        generation,
        _identity: reloading,
    };
    let service = ServiceBuilder::new()
        .option_layer(limiter.map(crate::ratelimit::LimitLayer))
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| RetryLayer::new(RetryPolicy::server_retry())),
        )
        .option_layer(config.auth_layer().map_err(ClientError::Build)?)
        .layer(config.extra_headers_layer().map_err(ClientError::Build)?)
        .map_err(|e: hyper_util::client::legacy::Error| -> BoxError { Box::new(e) })
        .service(transport);
    Ok(Client::new(service, config.default_namespace))
}

/// The transport: a hyper client, replaced by a fresh one (new
/// connections, the new certificate) when the client identity rotates;
/// responses of the old one end then ([`crate::client_cert::Cut`]).
#[derive(Clone)]
struct Rotating<C> {
    current: Arc<Mutex<(u64, C)>>,
    make: Arc<dyn Fn() -> C + Send + Sync>,
    generation: tokio::sync::watch::Receiver<u64>,
    _identity: Option<Arc<crate::client_cert::ReloadingCert>>,
}

impl<C> tower::Service<http::Request<Body>> for Rotating<C>
where
    C: tower::Service<http::Request<Body>, Response = http::Response<hyper::body::Incoming>>
        + Clone
        + Send
        + 'static,
    C::Future: Send + 'static,
{
    type Response = http::Response<crate::client_cert::Cut<hyper::body::Incoming>>;
    type Error = C::Error;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, C::Error>> + Send>,
    >;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // hyper's client is always ready; a fresh one is taken per call.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let now = *self.generation.borrow();
        let mut client = {
            let mut cur = self.current.lock().unwrap_or_else(|e| e.into_inner());
            if cur.0 != now {
                *cur = (now, (self.make)());
            }
            cur.1.clone()
        };
        let rx = self.generation.clone();
        Box::pin(async move {
            let resp = tower::Service::call(&mut client, req).await?;
            Ok(resp.map(|b| crate::client_cert::Cut::new(b, rx, now)))
        })
    }
}

/// [`kube_config`] then [`limited_client`].
pub async fn limited_from_kubeconfig(
    kubeconfig: Option<&Path>,
    limiter: Option<Arc<crate::ratelimit::RateLimiter>>,
) -> Result<Client, ClientError> {
    limited_client(kube_config(kubeconfig).await?, limiter)
}

/// [`kube_config`] then [`client`].
pub async fn from_kubeconfig(kubeconfig: Option<&Path>) -> Result<Client, ClientError> {
    client(kube_config(kubeconfig).await?)
}

/// Why [`get_bounded`] failed.
#[derive(Debug, thiserror::Error)]
pub enum GetError {
    /// The path does not make a request.
    #[error("{0:?} is not a request path")]
    BadPath(String),
    /// No answer came.
    #[error(transparent)]
    Request(#[from] kube::Error),
    /// The answer was longer than the caller reads.
    #[error("the answer is larger than {0} bytes")]
    TooLarge(usize),
    /// The answer broke off.
    #[error("reading the answer: {0}")]
    Body(BoxError),
    /// The answer is not text.
    #[error("the answer is not UTF-8")]
    NotUtf8,
    /// The API server (or the node behind its proxy) refused; its
    /// `Status` message, else the answer's text.
    #[error("HTTP {code}: {message}")]
    Status {
        /// The HTTP status code.
        code: u16,
        /// What the answer said.
        message: String,
    },
}

/// GETs `path` from the API server as text, reading at most `max` bytes
/// of the answer: a longer one is an error, and is not read on (a node's
/// answer through the API server's proxy is not bounded by the API
/// server).
pub async fn get_bounded(client: &Client, path: &str, max: usize) -> Result<String, GetError> {
    use http_body_util::BodyExt;
    let request = http::Request::get(path)
        .body(Body::empty())
        .map_err(|_| GetError::BadPath(path.to_string()))?;
    let answer = client.send(request).await?;
    let code = answer.status();
    let bytes = match http_body_util::Limited::new(answer.into_body(), max)
        .collect()
        .await
    {
        Ok(body) => body.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            return Err(GetError::TooLarge(max))
        }
        Err(e) => return Err(GetError::Body(e)),
    };
    let text = String::from_utf8(bytes.to_vec()).map_err(|_| GetError::NotUtf8)?;
    if !code.is_success() {
        let message = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v.get("message")?.as_str().map(String::from))
            .unwrap_or_else(|| text.trim().to_string());
        return Err(GetError::Status {
            code: code.as_u16(),
            message,
        });
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An HTTP/1.1 server answering every request with `status` and
    /// `body`; its URL.
    async fn answering(status: &'static str, body: String) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let mut buf = [0; 4096];
                let _ = conn.read(&mut buf).await;
                let answer = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(answer.as_bytes()).await;
            }
        });
        url
    }

    async fn get(status: &'static str, body: String, max: usize) -> Result<String, GetError> {
        let url = answering(status, body).await;
        let client = Client::try_from(Config::new(url.parse().unwrap())).unwrap();
        get_bounded(&client, "/api/v1/nodes/n/proxy/timeline/a/b", max).await
    }

    #[tokio::test]
    async fn bounded_reads_stop_at_the_limit() {
        assert_eq!(
            get("200 OK", "{\"a\":1}".into(), 100).await.unwrap(),
            "{\"a\":1}"
        );
        let long = format!("\"{}\"", "x".repeat(200));
        let e = get("200 OK", long, 100).await.unwrap_err();
        assert!(matches!(e, GetError::TooLarge(100)), "{e}");
        let refused = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"nodes \"n\" is forbidden","reason":"Forbidden","code":403}"#;
        let e = get("403 Forbidden", refused.into(), 1000)
            .await
            .unwrap_err();
        assert_eq!(e.to_string(), "HTTP 403: nodes \"n\" is forbidden");
        let e = get("502 Bad Gateway", "no route\n".into(), 1000)
            .await
            .unwrap_err();
        assert_eq!(e.to_string(), "HTTP 502: no route");
    }

    #[tokio::test]
    async fn unreadable_kubeconfig_names_the_file() {
        let e = kube_config(Some(Path::new("/nonexistent/kubeconfig")))
            .await
            .unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with("reading kubeconfig /nonexistent/kubeconfig: "),
            "{msg}"
        );
    }
}
