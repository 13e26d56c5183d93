//! The proxy against a fake streaming server on 127.0.0.1, through the
//! daemons' real server (so the upgrade is hyper's).

use std::sync::Arc;

use rkube_daemon::server::{Handler, Limits, Request};
use rkube_daemon::testing;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use super::*;

/// Proxies every request to `url`.
struct ToBackend {
    url: String,
}

impl Handler for ToBackend {
    async fn handle(&self, req: Request) -> Response {
        upgrade(
            &self.url,
            &req.method,
            &req.headers,
            &req.body,
            req.peer.addr,
            req.upgrade,
        )
        .await
    }
}

/// A streaming server answering one request with `answer`, then (after a
/// 101) echoing; the request head it got.
async fn backend(answer: &'static str) -> (String, oneshot::Receiver<String>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/exec/tok3n", l.local_addr().unwrap());
    let (tx, rx) = oneshot::channel();
    tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let head = read_until_blank(&mut s).await;
        let _ = tx.send(head);
        s.write_all(answer.as_bytes()).await.unwrap();
        let mut buf = [0u8; 1024];
        while let Ok(n) = s.read(&mut buf).await {
            if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
    });
    (url, rx)
}

async fn read_until_blank<S: AsyncRead + Unpin>(s: &mut S) -> String {
    let mut buf = Vec::new();
    let mut b = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut b).await.unwrap(), 1, "closed mid-head");
        buf.push(b[0]);
    }
    String::from_utf8(buf).unwrap()
}

async fn kubelet(url: String) -> SocketAddr {
    testing::start(None, Limits::default(), Arc::new(ToBackend { url })).await
}

const UPGRADE: &str = "POST /exec/ns/p/c?command=sh&output=1 HTTP/1.1\r\nHost: kubelet\r\n\
Authorization: Bearer secret\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\
X-Stream-Protocol-Version: v4.channel.k8s.io\r\nX-Stream-Protocol-Version: v3.channel.k8s.io\r\n\r\n";

#[tokio::test]
async fn a_101_is_returned_and_bytes_flow_both_ways_early_ones_first() {
    let (url, got) = backend(
        "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\
X-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\nearly",
    )
    .await;
    let addr = kubelet(url.clone()).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(UPGRADE.as_bytes()).await.unwrap();
    let head = read_until_blank(&mut s).await.to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 101"), "{head}");
    assert!(
        head.contains("x-stream-protocol-version: v4.channel.k8s.io"),
        "{head}"
    );
    assert!(head.contains("upgrade: spdy/3.1"), "{head}");
    let mut early = [0u8; 5];
    s.read_exact(&mut early).await.unwrap();
    assert_eq!(&early, b"early");
    s.write_all(b"ping").await.unwrap();
    let mut pong = [0u8; 4];
    s.read_exact(&mut pong).await.unwrap();
    assert_eq!(&pong, b"ping");

    // what the streaming server was sent: its own path and host, the
    // client's protocol headers, not the client's credentials
    let sent = got.await.unwrap();
    let b = super::backend(&url).unwrap();
    assert!(sent.starts_with("POST /exec/tok3n HTTP/1.1\r\n"), "{sent}");
    let lower = sent.to_ascii_lowercase();
    assert!(
        lower.contains(&format!("host: {}\r\n", b.authority)),
        "{sent}"
    );
    assert!(!lower.contains("host: kubelet"), "{sent}");
    assert!(lower.contains("connection: upgrade\r\n"), "{sent}");
    assert!(lower.contains("upgrade: spdy/3.1\r\n"), "{sent}");
    assert!(
        lower.contains("x-stream-protocol-version: v4.channel.k8s.io\r\n")
            && lower.contains("x-stream-protocol-version: v3.channel.k8s.io\r\n"),
        "{sent}"
    );
    assert!(lower.contains("x-forwarded-for: 127.0.0.1\r\n"), "{sent}");
    assert!(!lower.contains("authorization"), "{sent}");
}

#[tokio::test]
async fn the_backend_closing_closes_the_client() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/attach/x", l.local_addr().unwrap());
    tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        read_until_blank(&mut s).await;
        s.write_all(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\nbye")
            .await
            .unwrap();
    });
    let addr = kubelet(url).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(UPGRADE.as_bytes()).await.unwrap();
    read_until_blank(&mut s).await;
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut rest))
        .await
        .expect("the client connection was kept open")
        .unwrap();
    assert_eq!(rest, b"bye");
}

#[tokio::test]
async fn error_answers_are_passed_back_and_others_refused() {
    let (url, _) = backend(
        "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nX-Why: gone\r\nContent-Length: 8\r\n\r\nnot here",
    )
    .await;
    let addr = kubelet(url).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(UPGRADE.as_bytes()).await.unwrap();
    let head = read_until_blank(&mut s).await.to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 404"), "{head}");
    assert!(head.contains("x-why: gone"), "{head}");
    let mut body = [0u8; 8];
    s.read_exact(&mut body).await.unwrap();
    assert_eq!(&body, b"not here");

    let (url, _) = backend("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").await;
    let addr = kubelet(url).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(UPGRADE.as_bytes()).await.unwrap();
    let head = read_until_blank(&mut s).await;
    assert!(head.starts_with("HTTP/1.1 500"), "{head}");
    let len: usize = head
        .to_ascii_lowercase()
        .lines()
        .find_map(|l| {
            l.strip_prefix("content-length:")
                .map(|v| v.trim().parse().unwrap())
        })
        .unwrap();
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).await.unwrap();
    assert_eq!(body, b"invalid upgrade response: status code 200");
}

#[tokio::test]
async fn no_upgrade_or_no_backend_is_an_error() {
    // nothing listens there
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gone = format!("http://{}/exec/x", l.local_addr().unwrap());
    drop(l);
    let addr = kubelet(gone).await;
    let (code, body) = testing::get(addr, None, "/exec/a/b/c", None).await.unwrap();
    assert_eq!((code, body.as_str()), (400, "Upgrade request required"));
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(UPGRADE.as_bytes()).await.unwrap();
    let head = read_until_blank(&mut s).await;
    assert!(head.starts_with("HTTP/1.1 500"), "{head}");
}

#[test]
fn streaming_urls_and_requests() {
    assert_eq!(
        super::backend("http://127.0.0.1:4321/exec/AbC?x=1").unwrap(),
        Backend {
            authority: "127.0.0.1:4321".into(),
            target: "/exec/AbC?x=1".into()
        }
    );
    assert_eq!(
        super::backend("http://[::1]/portforward/t")
            .unwrap()
            .authority,
        "[::1]:80"
    );
    for bad in [
        "https://127.0.0.1:1/exec/SECRET",
        "not a url SECRET",
        "/exec/SECRET",
    ] {
        let e = super::backend(bad).unwrap_err();
        assert!(!e.contains("SECRET"), "the token is not repeated: {e}");
    }

    let mut h = HeaderMap::new();
    h.insert(
        header::CONNECTION,
        HeaderValue::from_static("keep-alive, Upgrade"),
    );
    assert!(is_upgrade(&h));
    h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    assert!(!is_upgrade(&h));
    h.insert("x-forwarded-for", HeaderValue::from_static("10.0.0.1"));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("99"));
    let b = super::backend("http://127.0.0.1:1/x").unwrap();
    let peer: SocketAddr = "192.0.2.7:5555".parse().unwrap();
    let req = String::from_utf8(backend_request(&Method::GET, &b, &h, b"body", peer)).unwrap();
    assert!(
        req.starts_with("GET /x HTTP/1.1\r\nHost: 127.0.0.1:1\r\n"),
        "{req}"
    );
    assert!(
        req.contains("x-forwarded-for: 10.0.0.1, 192.0.2.7\r\n")
            || req.contains("X-Forwarded-For: 10.0.0.1, 192.0.2.7\r\n"),
        "{req}"
    );
    assert!(
        req.contains("Content-Length: 4\r\n") && !req.contains("99"),
        "{req}"
    );
    assert!(req.ends_with("\r\n\r\nbody"), "{req}");

    assert!(parse_head(b"HTTP/1.1 101 Switching").unwrap().is_none());
    let h = parse_head(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: SPDY/3.1\r\n\r\nxyz")
        .unwrap()
        .unwrap();
    assert_eq!((h.status, h.rest.as_slice()), (101, &b"xyz"[..]));
    assert_eq!(h.headers[header::UPGRADE], "SPDY/3.1");
    assert!(parse_head(b"garbage\r\n\r\n").is_err());
}

/// A runtime on 127.0.0.1 running `serve` on its one connection.
async fn runtime<F, Fut>(serve: F) -> TcpStream
where
    F: FnOnce(TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        let (s, _) = l.accept().await.unwrap();
        serve(s).await;
    });
    TcpStream::connect(addr).await.unwrap()
}

#[tokio::test]
async fn the_stream_is_over_when_the_runtime_is_done() {
    // the runtime answers and closes; the client never closes its side
    let backend = runtime(|mut s| async move {
        s.write_all(b"exit status 0").await.unwrap();
    })
    .await;
    let (proxy_side, mut client) = tokio::io::duplex(4096);
    let piped = tokio::spawn(async move { pipe(proxy_side, backend, b"early ").await });
    let mut got = Vec::new();
    client.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"early exit status 0");
    tokio::time::timeout(Duration::from_secs(2), piped)
        .await
        .expect("the stream outlived the runtime's connection")
        .unwrap();
    drop(client);
}

#[tokio::test]
async fn the_clients_end_of_input_reaches_the_runtime_which_may_still_answer() {
    let backend = runtime(|mut s| async move {
        let mut input = Vec::new();
        s.read_to_end(&mut input).await.unwrap();
        s.write_all(format!("read {} bytes", input.len()).as_bytes())
            .await
            .unwrap();
    })
    .await;
    let (proxy_side, mut client) = tokio::io::duplex(4096);
    let piped = tokio::spawn(async move { pipe(proxy_side, backend, b"").await });
    client.write_all(&[1u8; 10_000]).await.unwrap();
    client.shutdown().await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut got))
        .await
        .expect("no answer after the client's end of input")
        .unwrap();
    assert_eq!(got, b"read 10000 bytes");
    piped.await.unwrap();
}
