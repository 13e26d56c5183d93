//! The one HTTP(S) server of rkube's daemons: hyper's HTTP/1.1 and HTTP/2
//! connections behind the defences upstream's Go servers get from
//! `net/http` and `k8s.io/apiserver`:
//!
//! | defence | [`Limits`] field | default |
//! |---|---|---|
//! | connections at once (a semaphore: past it a new connection is accepted and closed at once; admitted ones are never affected) | `max_connections` | 1024 |
//! | TLS handshake deadline | `handshake_timeout` | 10 s |
//! | request-head deadline (slowloris; also closes an HTTP/1.1 connection idle between requests) | `header_read_timeout` | 32 s (upstream's `ReadHeaderTimeout`) |
//! | connection idle with no request in flight (HTTP/2, and HTTP/1.1 as a backstop) | `idle_timeout` | 90 s (upstream's `IdleTimeout`) |
//! | request head size (HTTP/1.1 start line and headers; the HTTP/2 header list) | `max_header_bytes` | 64 KiB |
//! | request body size (413 past it, read within `header_read_timeout`) | `max_body_bytes` | 64 KiB |
//! | HTTP/2 streams per connection | `max_concurrent_streams` | 100 |
//!
//! With TLS the protocol is the one ALPN agreed on (`h2` when
//! `http2`, else HTTP/1.1); without TLS (the kubelet's healthz port) it
//! is HTTP/1.1. A [`Handler`] sees a [`Request`] with its body read and
//! the verified client certificate's [`User`], and returns a [`Response`]
//! whose [`Body`] is either whole or streamed ([`Body::channel`]).
//! Authentication and authorization are the handler's, with
//! [`crate::auth`]; the responses for refusals are [`unauthorized`],
//! [`forbidden`] and [`internal_error`] (generic bodies, nothing of the
//! request echoed).
//!
//! HTTP/1.1 connections may be upgraded (`Connection: Upgrade`, as
//! `kubectl exec` and `port-forward` use): the handler takes the
//! request's [`Request::upgrade`], answers `101 Switching Protocols`, and
//! once the response is written the upgrade resolves to the raw
//! connection, which is then the handler's alone: no deadline or idle
//! timeout of this server applies to it any more, and it stays counted
//! against `max_connections` until dropped.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue};
use http_body::{Frame, SizeHint};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::TlsAcceptor;

use crate::auth::{bearer_token, user_from_cert, User};

pub use http::{Method, StatusCode};

/// The server's limits (see the module docs for each).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Connections served at once.
    pub max_connections: usize,
    /// Deadline for the TLS handshake.
    pub handshake_timeout: Duration,
    /// Deadline for a request head (and for reading its body).
    pub header_read_timeout: Duration,
    /// A connection with no request in flight this long is closed.
    pub idle_timeout: Duration,
    /// Largest request head.
    pub max_header_bytes: usize,
    /// Largest request body.
    pub max_body_bytes: usize,
    /// HTTP/2 streams per connection.
    pub max_concurrent_streams: u32,
    /// Offer HTTP/2 (ALPN `h2`) on TLS connections.
    pub http2: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 1024,
            handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(32),
            idle_timeout: Duration::from_secs(90),
            max_header_bytes: 64 << 10,
            max_body_bytes: 64 << 10,
            max_concurrent_streams: 100,
            http2: true,
        }
    }
}

/// Who is on the other end of a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// The remote address.
    pub addr: SocketAddr,
    /// The user of the client certificate, verified against the client CA
    /// during the handshake.
    pub cert_user: Option<User>,
}

/// A request as a [`Handler`] sees it.
#[derive(Debug)]
pub struct Request {
    /// Method.
    pub method: Method,
    /// The path, without the query.
    pub path: String,
    /// The query, without `?` (empty when none).
    pub query: String,
    /// Headers.
    pub headers: HeaderMap,
    /// The body (at most `max_body_bytes`).
    pub body: Bytes,
    /// The connection's peer.
    pub peer: Arc<Peer>,
    /// The connection after a `101 Switching Protocols` response: set for
    /// HTTP/1.1 requests asking for an upgrade (an `Upgrade` header).
    /// Await it (in a task of its own) after returning the 101 response.
    pub upgrade: Option<OnUpgrade>,
}

impl Request {
    /// The bearer token of the `Authorization` header, if any.
    pub fn bearer_token(&self) -> Option<&str> {
        self.headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer_token)
    }

    /// The verified client certificate's user.
    pub fn cert_user(&self) -> Option<&User> {
        self.peer.cert_user.as_ref()
    }
}

/// A response.
pub type Response = http::Response<Body>;

/// A response body: whole, or streamed from a channel.
#[derive(Debug)]
pub struct Body {
    kind: Kind,
    /// Keeps the request counted in flight until the body is done.
    in_flight: Option<InFlight>,
}

#[derive(Debug)]
enum Kind {
    Whole(Option<Bytes>),
    Stream(mpsc::Receiver<Bytes>),
}

impl Body {
    /// A whole body.
    pub fn whole(data: impl Into<Bytes>) -> Body {
        Body {
            kind: Kind::Whole(Some(data.into())),
            in_flight: None,
        }
    }

    /// A streamed body: each chunk sent is written (and flushed) as it
    /// comes; the body ends when the sender is dropped. Sending fails once
    /// the client has gone away.
    pub fn channel(buffer: usize) -> (mpsc::Sender<Bytes>, Body) {
        let (tx, rx) = mpsc::channel(buffer.max(1));
        (
            tx,
            Body {
                kind: Kind::Stream(rx),
                in_flight: None,
            },
        )
    }
}

impl http_body::Body for Body {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match &mut self.kind {
            Kind::Whole(b) => Poll::Ready(
                b.take()
                    .filter(|b| !b.is_empty())
                    .map(|b| Ok(Frame::data(b))),
            ),
            Kind::Stream(rx) => rx.poll_recv(cx).map(|c| c.map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Whole(b) => b.as_ref().is_none_or(Bytes::is_empty),
            Kind::Stream(_) => false,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Whole(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            Kind::Stream(_) => SizeHint::default(),
        }
    }
}

/// `text/plain; charset=utf-8`.
pub const TEXT: &str = "text/plain; charset=utf-8";

/// A response with a content type (and `X-Content-Type-Options: nosniff`).
pub fn respond(status: StatusCode, content_type: &str, body: Body) -> Response {
    let mut r = http::Response::new(body);
    *r.status_mut() = status;
    let h = r.headers_mut();
    if let Ok(v) = HeaderValue::from_str(content_type) {
        h.insert(header::CONTENT_TYPE, v);
    }
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    r
}

/// A plain-text response.
pub fn text(status: StatusCode, body: impl Into<Bytes>) -> Response {
    respond(status, TEXT, Body::whole(body))
}

/// 401 `Unauthorized` (nothing of the request echoed).
pub fn unauthorized() -> Response {
    text(StatusCode::UNAUTHORIZED, "Unauthorized")
}

/// 403 with the given reason (upstream's `forbidden: User "u" cannot ...`).
pub fn forbidden(reason: impl Into<Bytes>) -> Response {
    text(StatusCode::FORBIDDEN, reason)
}

/// 500 `Internal Server Error`, the cause logged, not sent.
pub fn internal_error(cause: &dyn std::fmt::Display) -> Response {
    tracing::warn!(error = %cause, "request failed");
    text(StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error")
}

/// What serves requests.
pub trait Handler: Send + Sync + 'static {
    /// The response to `req`.
    fn handle(&self, req: Request) -> impl Future<Output = Response> + Send;
}

/// Requests in flight on a connection and when the last one ended.
#[derive(Debug)]
struct Activity {
    in_flight: AtomicUsize,
    last: Mutex<Instant>,
}

impl Activity {
    fn start(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(self.clone())
    }

    /// When the connection counts as idle if nothing starts before.
    fn idle_at(&self, idle: Duration) -> Instant {
        if self.in_flight.load(Ordering::SeqCst) > 0 {
            Instant::now() + idle
        } else {
            *self.last.lock().unwrap_or_else(|e| e.into_inner()) + idle
        }
    }
}

/// A request in flight, until its response body is dropped.
#[derive(Debug)]
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        *self.0.last.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How long a connection told to shut down (idle) may take to finish.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

struct Server<H> {
    handler: Arc<H>,
    limits: Limits,
    tls: Option<TlsAcceptor>,
    h1: auto::Builder<TokioExecutor>,
    h2: auto::Builder<TokioExecutor>,
    refused: AtomicU64,
}

fn builder(limits: &Limits, h2: bool) -> auto::Builder<TokioExecutor> {
    let mut b = auto::Builder::new(TokioExecutor::new());
    b.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        // the read buffer bounds the head (hyper's floor is 8 KiB)
        .max_buf_size(limits.max_header_bytes.max(8192));
    b.http2()
        .timer(TokioTimer::new())
        .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX))
        .max_concurrent_streams(limits.max_concurrent_streams);
    if h2 {
        b.http2_only()
    } else {
        b.http1_only()
    }
}

/// Serves `listener` until the task is aborted: HTTPS with `tls`, plain
/// HTTP/1.1 without.
pub async fn serve<H: Handler>(
    listener: TcpListener,
    tls: Option<Arc<ServerConfig>>,
    limits: Limits,
    handler: Arc<H>,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let server = Arc::new(Server {
        handler,
        h1: builder(&limits, false),
        h2: builder(&limits, true),
        tls: tls.map(TlsAcceptor::from),
        limits,
        refused: AtomicU64::new(0),
    });
    loop {
        let (sock, addr) = match listener.accept().await {
            Ok(a) => a,
            Err(e) => {
                // e.g. out of file descriptors: back off instead of spinning
                tracing::warn!(error = %e, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            let n = server.refused.fetch_add(1, Ordering::Relaxed) + 1;
            if n.is_power_of_two() {
                tracing::warn!(
                    refused = n,
                    max = server.limits.max_connections,
                    "connection limit reached: closing new connections"
                );
            }
            drop(sock);
            continue;
        };
        let server = server.clone();
        // the permit goes with the socket: an upgraded connection, handed
        // to a handler, stays counted until the handler drops it
        tokio::spawn(async move {
            server
                .connection(
                    Counted {
                        sock,
                        _permit: permit,
                    },
                    addr,
                )
                .await
        });
    }
}

/// A socket holding its connection permit.
struct Counted {
    sock: TcpStream,
    _permit: OwnedSemaphorePermit,
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.sock).poll_read(cx, buf)
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.sock).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.sock).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.sock).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.sock).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.sock.is_write_vectored()
    }
}

impl<H: Handler> Server<H> {
    async fn connection(&self, sock: Counted, addr: SocketAddr) {
        let _ = sock.sock.set_nodelay(true);
        let Some(acceptor) = &self.tls else {
            let peer = Peer {
                addr,
                cert_user: None,
            };
            return self.drive(TokioIo::new(sock), peer, false).await;
        };
        let stream = match tokio::time::timeout(
            self.limits.handshake_timeout,
            acceptor.accept(sock),
        )
        .await
        {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                tracing::debug!(%addr, error = %e, "TLS handshake failed");
                return;
            }
            Err(_) => {
                tracing::debug!(%addr, "TLS handshake timed out");
                return;
            }
        };
        let (_, conn) = stream.get_ref();
        let h2 = self.limits.http2 && conn.alpn_protocol() == Some(b"h2");
        let cert_user = conn
            .peer_certificates()
            .and_then(|c| c.first())
            .and_then(|c| user_from_cert(c.as_ref()));
        self.drive(TokioIo::new(stream), Peer { addr, cert_user }, h2)
            .await
    }

    async fn drive<I>(&self, io: I, peer: Peer, h2: bool)
    where
        I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    {
        let peer = Arc::new(peer);
        let activity = Arc::new(Activity {
            in_flight: AtomicUsize::new(0),
            last: Mutex::new(Instant::now()),
        });
        let svc = {
            let (handler, limits, peer, activity) = (
                self.handler.clone(),
                self.limits.clone(),
                peer.clone(),
                activity.clone(),
            );
            service_fn(move |req: http::Request<Incoming>| {
                let in_flight = activity.start();
                let (handler, limits, peer) = (handler.clone(), limits.clone(), peer.clone());
                async move {
                    let mut resp = request(req, &*handler, &limits, peer).await;
                    resp.body_mut().in_flight = Some(in_flight);
                    Ok::<_, Infallible>(resp)
                }
            })
        };
        let builder = if h2 { &self.h2 } else { &self.h1 };
        // An upgrade ends this future once the 101 is written: the IO then
        // belongs to the handler's `OnUpgrade`, beyond the loop below (a
        // request in flight, the upgrading one included, is never idle).
        let conn = builder.serve_connection_with_upgrades(io, svc);
        tokio::pin!(conn);
        let mut closing_by: Option<Instant> = None;
        loop {
            let wake = closing_by.unwrap_or_else(|| activity.idle_at(self.limits.idle_timeout));
            tokio::select! {
                done = conn.as_mut() => {
                    if let Err(e) = done {
                        tracing::debug!(addr = %peer.addr, error = %e, "connection ended");
                    }
                    return;
                }
                _ = tokio::time::sleep_until(wake) => {
                    if closing_by.is_some() {
                        return; // the grace is over: drop the connection
                    }
                    if activity.idle_at(self.limits.idle_timeout) <= Instant::now() {
                        conn.as_mut().graceful_shutdown();
                        closing_by = Some(Instant::now() + SHUTDOWN_GRACE);
                    }
                }
            }
        }
    }
}

/// Reads the body within the limits and calls the handler.
async fn request<H: Handler>(
    req: http::Request<Incoming>,
    handler: &H,
    limits: &Limits,
    peer: Arc<Peer>,
) -> Response {
    let (mut parts, body) = req.into_parts();
    let upgrade = parts.extensions.remove::<OnUpgrade>();
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limits.max_body_bytes as u64) {
        return text(StatusCode::PAYLOAD_TOO_LARGE, "request body too large");
    }
    let read = Limited::new(body, limits.max_body_bytes).collect();
    let body = match tokio::time::timeout(limits.header_read_timeout, read).await {
        Ok(Ok(b)) => b.to_bytes(),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            return text(StatusCode::PAYLOAD_TOO_LARGE, "request body too large")
        }
        Ok(Err(_)) => return text(StatusCode::BAD_REQUEST, "reading the request body failed"),
        Err(_) => return text(StatusCode::REQUEST_TIMEOUT, "request body timeout"),
    };
    let (path, query) = match parts.uri.path_and_query() {
        Some(pq) => (pq.path().to_string(), pq.query().unwrap_or("").to_string()),
        None => ("/".to_string(), String::new()),
    };
    handler
        .handle(Request {
            method: parts.method,
            path,
            query,
            headers: parts.headers,
            body,
            peer,
            upgrade,
        })
        .await
}

#[cfg(test)]
mod tests;
