//! The upgrade-aware proxy behind `/exec`, `/attach` and `/portForward`
//! (upstream's `UpgradeAwareHandler` with `upgradeRequired`): the client's
//! HTTP/1.1 upgrade request is sent on to the runtime's streaming URL with
//! its headers (`Connection`, `Upgrade`, `X-Stream-Protocol-Version`,
//! `Sec-WebSocket-*`, …; the client's credentials stay here), and
//!
//! * a `101` answer is returned with the backend's headers, then the
//!   bytes the backend sent after its head, then both connections are
//!   copied into each other ([`pipe`]): whatever protocol the two ends
//!   agreed on (SPDY/3.1, WebSocket) passes through untouched;
//! * an answer of 400 or more is passed back (status, headers, the body up
//!   to [`MAX_ERROR_BODY`]);
//! * any other answer is a 500 `invalid upgrade response: status code N`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderMap, HeaderName, HeaderValue, Method, Uri};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use rkube_daemon::server::{self, Body, Response, StatusCode};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// Deadline for connecting to the streaming server and for its answer.
pub const BACKEND_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest response head read from the streaming server.
pub const MAX_HEAD: usize = 64 << 10;
/// Largest error body passed back.
pub const MAX_ERROR_BODY: usize = 64 << 10;
/// How long the backend's last output may take to reach the client once
/// the client's side has ended.
pub const DRAIN_GRACE: Duration = Duration::from_secs(30);

/// Request headers not sent on: the client's credentials for the kubelet,
/// the framing of a body already read, and what is rewritten.
const DROPPED: [HeaderName; 6] = [
    header::HOST,
    header::AUTHORIZATION,
    header::PROXY_AUTHORIZATION,
    header::CONTENT_LENGTH,
    header::TRANSFER_ENCODING,
    HeaderName::from_static("x-forwarded-for"),
];

/// Response headers of an error answer not passed back (the body is
/// re-framed).
const HOP: [HeaderName; 4] = [
    header::CONNECTION,
    header::CONTENT_LENGTH,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Is this an upgrade request (`Connection` lists `upgrade`)?
pub fn is_upgrade(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
}

/// Where the streaming server is: `host:port` and the request target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backend {
    /// `host:port`, for connecting and the `Host` header.
    pub authority: String,
    /// Path and query.
    pub target: String,
}

/// Parses a streaming URL (`http://127.0.0.1:PORT/exec/TOKEN`). Errors
/// never quote the URL: its path is a one-time token that runs a command
/// in a container, and errors are logged and answered to the client.
pub fn backend(url: &str) -> Result<Backend, String> {
    let uri: Uri = url
        .parse()
        .map_err(|e| format!("invalid streaming URL from the runtime: {e}"))?;
    if uri.scheme_str() != Some("http") {
        return Err(format!(
            "streaming URL with scheme {:?}: only http:// streaming servers are supported",
            uri.scheme_str().unwrap_or_default()
        ));
    }
    let Some(auth) = uri.authority() else {
        return Err("streaming URL from the runtime has no host".into());
    };
    let authority = match auth.port_u16() {
        Some(_) => auth.as_str().to_string(),
        None => format!("{}:80", auth.as_str()),
    };
    let target = uri
        .path_and_query()
        .map_or("/".to_string(), |p| p.as_str().to_string());
    Ok(Backend { authority, target })
}

/// The request sent to the streaming server.
pub fn backend_request(
    method: &Method,
    backend: &Backend,
    headers: &HeaderMap,
    body: &[u8],
    peer: SocketAddr,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(1024 + body.len());
    out.extend_from_slice(
        format!(
            "{method} {} HTTP/1.1\r\nHost: {}\r\n",
            backend.target, backend.authority
        )
        .as_bytes(),
    );
    for (name, value) in headers {
        if DROPPED.contains(name) {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    // upstream appends the client to X-Forwarded-For on the upgrade path
    let prior: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    let mut forwarded = prior.join(", ");
    if !forwarded.is_empty() {
        forwarded.push_str(", ");
    }
    forwarded.push_str(&peer.ip().to_string());
    out.extend_from_slice(format!("X-Forwarded-For: {forwarded}\r\n").as_bytes());
    if !body.is_empty() {
        out.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    out
}

/// A parsed response head and the bytes read past it.
#[derive(Debug)]
pub struct Head {
    /// Status code.
    pub status: u16,
    /// Headers.
    pub headers: HeaderMap,
    /// Bytes after the head (the start of the body or of the stream).
    pub rest: Vec<u8>,
}

/// Parses a response head out of `buf`: `None` while incomplete.
pub fn parse_head(buf: &[u8]) -> Result<Option<Head>, String> {
    let mut raw = [httparse::EMPTY_HEADER; 128];
    let mut resp = httparse::Response::new(&mut raw);
    let len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("reading the streaming server's response: {e}")),
    };
    let mut headers = HeaderMap::new();
    for h in resp.headers.iter() {
        let name = HeaderName::from_bytes(h.name.as_bytes());
        let value = HeaderValue::from_bytes(h.value);
        if let (Ok(n), Ok(v)) = (name, value) {
            headers.append(n, v);
        }
    }
    Ok(Some(Head {
        status: resp.code.unwrap_or(0),
        headers,
        rest: buf[len..].to_vec(),
    }))
}

async fn read_head<S: AsyncRead + Unpin>(s: &mut S) -> Result<Head, String> {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        let n = s
            .read(&mut chunk)
            .await
            .map_err(|e| format!("reading the streaming server's response: {e}"))?;
        if n == 0 {
            return Err("the streaming server closed the connection before answering".into());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(head) = parse_head(&buf)? {
            return Ok(head);
        }
        if buf.len() > MAX_HEAD {
            return Err("the streaming server's response head is too large".into());
        }
    }
}

/// The body of an error answer: `Content-Length` bytes, or up to EOF,
/// at most [`MAX_ERROR_BODY`].
async fn read_error_body(s: &mut TcpStream, head: &Head) -> Vec<u8> {
    let declared = head
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<usize>().ok());
    let want = declared.unwrap_or(MAX_ERROR_BODY).min(MAX_ERROR_BODY);
    let mut body = head.rest.clone();
    let mut chunk = [0u8; 4096];
    let read = async {
        while body.len() < want {
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => body.extend_from_slice(&chunk[..n]),
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(10), read).await;
    body.truncate(want);
    body
}

fn error(code: StatusCode, msg: impl Into<Bytes>) -> Response {
    server::text(code, msg)
}

/// Proxies an upgrade request to the streaming server at `url` (see the
/// module docs). `upgrade` is the client's connection once the returned
/// 101 is written.
pub async fn upgrade(
    url: &str,
    method: &Method,
    headers: &HeaderMap,
    body: &[u8],
    peer: SocketAddr,
    upgrade: Option<OnUpgrade>,
) -> Response {
    let Some(client) = upgrade.filter(|_| is_upgrade(headers)) else {
        return error(StatusCode::BAD_REQUEST, "Upgrade request required");
    };
    let internal = |e: String| {
        tracing::warn!(error = %e, "proxying a streaming request failed");
        error(StatusCode::INTERNAL_SERVER_ERROR, e)
    };
    let b = match backend(url) {
        Ok(b) => b,
        Err(e) => return internal(e),
    };
    let dial = async {
        let mut s = TcpStream::connect(&b.authority)
            .await
            .map_err(|e| format!("dialing the streaming server {}: {e}", b.authority))?;
        let _ = s.set_nodelay(true);
        s.write_all(&backend_request(method, &b, headers, body, peer))
            .await
            .map_err(|e| format!("writing to the streaming server: {e}"))?;
        let head = read_head(&mut s).await?;
        Ok::<_, String>((s, head))
    };
    let (mut sock, head) = match tokio::time::timeout(BACKEND_TIMEOUT, dial).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => return internal(e),
        Err(_) => return internal(format!("the streaming server {} timed out", b.authority)),
    };
    if head.status != 101 {
        if head.status < 400 {
            return internal(format!(
                "invalid upgrade response: status code {}",
                head.status
            ));
        }
        let body = read_error_body(&mut sock, &head).await;
        let mut r = http::Response::new(Body::whole(body));
        *r.status_mut() =
            StatusCode::from_u16(head.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        for (name, value) in &head.headers {
            if !HOP.contains(name) {
                r.headers_mut().append(name, value.clone());
            }
        }
        return r;
    }
    let Head { headers, rest, .. } = head;
    tokio::spawn(async move {
        let client = match client.await {
            Ok(u) => TokioIo::new(u),
            Err(e) => {
                tracing::debug!(error = %e, "the client's upgrade did not complete");
                return;
            }
        };
        pipe(client, sock, &rest).await;
    });
    let mut r = http::Response::new(Body::whole(Bytes::new()));
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    *r.headers_mut() = headers;
    r
}

/// Copies `early`, then the backend's bytes, to the client, and the
/// client's bytes to the backend; each side's end of input is passed on
/// as a half-close. The stream is over once the backend's output has all
/// been passed on (upstream's proxy also ends when either side does),
/// whether or not the client closes its side. The client's side ending
/// first does not cut the backend's remaining output short: it has
/// [`DRAIN_GRACE`] to arrive (a runtime that has stopped reading makes
/// the client's side fail while its last frames are still on the way).
pub async fn pipe<C>(client: C, backend: TcpStream, early: &[u8])
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    let (mut client_rd, mut client_wr) = tokio::io::split(client);
    let (mut backend_rd, mut backend_wr) = backend.into_split();
    let (sent_up, sent_down) = (AtomicU64::new(0), AtomicU64::new(0));
    let down = async {
        client_wr.write_all(early).await?;
        sent_down.fetch_add(early.len() as u64, Ordering::Relaxed);
        copy(&mut backend_rd, &mut client_wr, &sent_down).await?;
        let _ = client_wr.shutdown().await;
        Ok::<_, std::io::Error>(())
    };
    let up = async {
        let r = copy(&mut client_rd, &mut backend_wr, &sent_up).await;
        let _ = backend_wr.shutdown().await;
        r
    };
    tokio::pin!(down, up);
    let (result, client_first) = tokio::select! {
        d = &mut down => (d, false),
        u = &mut up => {
            if let Err(e) = u {
                tracing::debug!(error = %e, "the client's side of a stream failed");
            }
            match tokio::time::timeout(DRAIN_GRACE, down).await {
                Ok(d) => (d, true),
                Err(_) => (Err(std::io::ErrorKind::TimedOut.into()), true),
            }
        }
    };
    let (up, down) = (
        sent_up.load(Ordering::Relaxed),
        sent_down.load(Ordering::Relaxed),
    );
    match result {
        Ok(()) => tracing::debug!(up, down, client_first, "stream closed"),
        Err(e) => tracing::debug!(up, down, client_first, error = %e, "stream ended"),
    }
}

/// Copies `from` into `to` until EOF, counting in `sent`.
async fn copy<R, W>(from: &mut R, to: &mut W, sent: &AtomicU64) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 16 << 10];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        to.write_all(&buf[..n]).await?;
        to.flush().await?;
        sent.fetch_add(n as u64, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests;
