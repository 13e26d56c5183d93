//! The server's defences, each against a real listener on 127.0.0.1.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinSet;

use super::*;
use crate::auth::{Authenticator, SCHEDULER_TOKEN_TTL};
use crate::testing::{self, start, Ca, FakeTokens};
use crate::tls::{SelfSigned, ServingTls};

/// `/healthz`: ok; `/whoami`: the authenticated user (401 otherwise);
/// `/stream`: three chunks, streamed; `/echo`: the body's length;
/// `/upgrade`: 101, then echoes what the upgraded connection sends.
struct TestHandler {
    authn: Authenticator,
}

impl Handler for TestHandler {
    async fn handle(&self, req: Request) -> Response {
        match req.path.as_str() {
            "/healthz" => text(StatusCode::OK, "ok"),
            "/whoami" => match self
                .authn
                .authenticate(req.cert_user(), req.bearer_token())
                .await
            {
                Ok(u) => text(StatusCode::OK, format!("{} {:?}", u.name, u.groups)),
                Err(_) => unauthorized(),
            },
            "/stream" => {
                let (tx, body) = Body::channel(4);
                tokio::spawn(async move {
                    for c in ["one ", "two ", "three"] {
                        if tx.send(Bytes::from(c)).await.is_err() {
                            return;
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                });
                respond(StatusCode::OK, TEXT, body)
            }
            "/echo" => text(StatusCode::OK, req.body.len().to_string()),
            "/upgrade" => match req.upgrade {
                None => text(StatusCode::BAD_REQUEST, "Upgrade request required"),
                Some(upgrade) => {
                    tokio::spawn(async move {
                        let Ok(upgraded) = upgrade.await else {
                            return;
                        };
                        let mut io = TokioIo::new(upgraded);
                        let mut buf = [0u8; 1024];
                        while let Ok(n) = io.read(&mut buf).await {
                            if n == 0 || io.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    });
                    let mut r = http::Response::new(Body::whole(""));
                    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
                    let h = r.headers_mut();
                    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
                    h.insert(header::UPGRADE, HeaderValue::from_static("echo"));
                    r
                }
            },
            _ => text(StatusCode::NOT_FOUND, "404 page not found"),
        }
    }
}

fn handler() -> Arc<TestHandler> {
    Arc::new(TestHandler {
        authn: Authenticator::new(false),
    })
}

fn serving_tls() -> ServingTls {
    ServingTls::load_or_self_sign(
        None,
        None,
        SelfSigned {
            dir: None,
            stem: "test",
            hosts: &[],
        },
    )
    .unwrap()
}

/// Reads one HTTP/1.1 response with a Content-Length off a kept-alive
/// connection: (status, body).
async fn read_one<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> (u16, String) {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        assert_eq!(
            s.read(&mut byte).await.unwrap(),
            1,
            "connection closed mid-head"
        );
        buf.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&buf).to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map(|v| v.trim().parse().unwrap())
        .unwrap();
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).await.unwrap();
    let code = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (code, String::from_utf8(body).unwrap())
}

#[tokio::test]
async fn serves_plain_and_tls_requests_and_streams_bodies() {
    let plain = start(None, Limits::default(), handler()).await;
    assert_eq!(
        testing::get(plain, None, "/healthz?verbose", None)
            .await
            .unwrap(),
        (200, "ok".to_string())
    );
    let tls = serving_tls();
    let addr = start(
        Some(tls.server_config(true).unwrap()),
        Limits::default(),
        handler(),
    )
    .await;
    let client = testing::client_config(tls.certificates(), None, &[b"http/1.1"]);
    assert_eq!(
        testing::get(addr, Some(client.clone()), "/nope", None)
            .await
            .unwrap()
            .0,
        404
    );
    let (code, body) = testing::get(addr, Some(client), "/stream", None)
        .await
        .unwrap();
    assert_eq!((code, body.as_str()), (200, "one two three"));
}

#[tokio::test]
async fn http2_is_served_when_alpn_agrees_and_idle_connections_are_closed() {
    use http_body_util::Empty;
    let tls = serving_tls();
    let limits = Limits {
        idle_timeout: Duration::from_millis(500),
        ..Limits::default()
    };
    let addr = start(Some(tls.server_config(true).unwrap()), limits, handler()).await;
    let client = testing::client_config(tls.certificates(), None, &[b"h2"]);
    let stream = testing::connect_tls(addr, client).await.unwrap();
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    let conn = tokio::spawn(conn);
    let req = http::Request::get("https://localhost/healthz")
        .body(Empty::<Bytes>::new())
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.version(), http::Version::HTTP_2);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"ok");
    // no request in flight for idle_timeout: the server sends GOAWAY and
    // the connection ends
    let ended = tokio::time::timeout(Duration::from_secs(5), conn).await;
    assert!(ended.is_ok(), "an idle HTTP/2 connection was kept open");
}

#[tokio::test]
async fn a_slowloris_client_is_cut_at_the_header_deadline() {
    let deadline = Duration::from_secs(2);
    let limits = Limits {
        header_read_timeout: deadline,
        ..Limits::default()
    };
    let addr = start(None, limits, handler()).await;
    let mut sock = TcpStream::connect(addr).await.unwrap();
    let started = std::time::Instant::now();
    let request =
        b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    let (mut rd, mut wr) = sock.split();
    let mut sent = 0;
    let mut buf = [0u8; 512];
    // one header byte a second, watching for the server closing on us
    let closed = loop {
        tokio::select! {
            r = rd.read(&mut buf) => break r.map_or(true, |n| n == 0 || buf[..n].starts_with(b"HTTP/1.1 408")),
            _ = tokio::time::sleep(Duration::from_secs(1)) => {
                if wr.write_all(&request[sent..sent + 1]).await.is_err() {
                    break true;
                }
                sent += 1;
                assert!(sent < request.len(), "the whole slow request got through");
            }
        }
    };
    let took = started.elapsed();
    assert!(closed);
    assert!(
        took >= deadline - Duration::from_millis(100) && took < deadline + Duration::from_secs(2),
        "cut after {took:?}, deadline {deadline:?}"
    );
    assert!(sent <= 4, "{sent} bytes sent before the cut");
    // the server is still serving
    assert_eq!(
        testing::get(addr, None, "/healthz", None).await.unwrap().0,
        200
    );
}

#[tokio::test]
async fn a_silent_tls_client_is_cut_at_the_handshake_deadline() {
    let tls = serving_tls();
    let limits = Limits {
        handshake_timeout: Duration::from_millis(500),
        ..Limits::default()
    };
    let addr = start(Some(tls.server_config(false).unwrap()), limits, handler()).await;
    let mut sock = TcpStream::connect(addr).await.unwrap();
    let mut buf = [0u8; 16];
    let r = tokio::time::timeout(Duration::from_secs(3), sock.read(&mut buf)).await;
    assert!(
        matches!(r, Ok(Ok(0)) | Ok(Err(_))),
        "the connection was not closed: {r:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_cap_are_closed_without_affecting_admitted_ones() {
    const CAP: usize = 8;
    const FLOOD: usize = 1000;
    let tls = serving_tls();
    let limits = Limits {
        max_connections: CAP,
        handshake_timeout: Duration::from_secs(60),
        ..Limits::default()
    };
    let addr = start(Some(tls.server_config(false).unwrap()), limits, handler()).await;
    let client = testing::client_config(tls.certificates(), None, &[b"http/1.1"]);
    // an admitted, kept-alive connection
    let mut admitted = testing::connect_tls(addr, client.clone()).await.unwrap();
    let keep_alive = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n";
    admitted.write_all(keep_alive).await.unwrap();
    assert_eq!(read_one(&mut admitted).await, (200, "ok".into()));

    // the flood: connections that never start their handshake
    let mut flood = Vec::with_capacity(FLOOD);
    for _ in 0..FLOOD {
        flood.push(TcpStream::connect(addr).await.unwrap());
    }
    // refused ones read EOF at once; the admitted ones wait in their
    // handshake (5 s leaves a loaded machine time to accept the rest)
    let mut probes = JoinSet::new();
    for mut s in flood {
        probes.spawn(async move {
            let mut b = [0u8; 1];
            let closed = matches!(
                tokio::time::timeout(Duration::from_secs(5), s.read(&mut b)).await,
                Ok(Ok(0)) | Ok(Err(_))
            );
            (closed, s)
        });
    }
    let mut still_open = Vec::new();
    let mut closed = 0;
    while let Some(r) = probes.join_next().await {
        let (was_closed, s) = r.unwrap();
        if was_closed {
            closed += 1;
        } else {
            still_open.push(s);
        }
    }
    assert!(
        closed >= FLOOD - (CAP - 1),
        "{closed} of {FLOOD} closed with a cap of {CAP}"
    );
    assert_eq!(
        still_open.len(),
        CAP - 1,
        "admitted besides the kept-alive one"
    );

    // the admitted connection still works while the cap is full
    admitted.write_all(keep_alive).await.unwrap();
    assert_eq!(read_one(&mut admitted).await, (200, "ok".into()));

    // once they go away, a fresh connection is served
    drop(still_open);
    drop(admitted);
    let mut served = None;
    for _ in 0..40 {
        if let Ok(r) = testing::get(addr, Some(client.clone()), "/healthz", None).await {
            served = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(served, Some((200, "ok".to_string())));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_requests_with_one_bad_token_cost_a_handful_of_reviews() {
    let tokens = Arc::new(FakeTokens::new(&[("good-token", "alice")]));
    let h = Arc::new(TestHandler {
        authn: Authenticator::new(false).with_tokens(tokens.clone(), SCHEDULER_TOKEN_TTL),
    });
    let addr = start(None, Limits::default(), h).await;
    let bad = "not-a-valid-token-0123456789";
    let mut round = JoinSet::new();
    for _ in 0..1000 {
        round.spawn(async move { testing::get(addr, None, "/whoami", Some(bad)).await });
        if round.len() >= 50 {
            let (code, body) = round.join_next().await.unwrap().unwrap().unwrap();
            assert_eq!((code, body.as_str()), (401, "Unauthorized"));
        }
    }
    while let Some(r) = round.join_next().await {
        let (code, body) = r.unwrap().unwrap();
        assert_eq!((code, body.as_str()), (401, "Unauthorized"));
        assert!(!body.contains(bad));
    }
    let reviews = tokens.calls.load(Ordering::SeqCst);
    assert!(reviews <= 3, "{reviews} TokenReviews for one bad token");
    // a good token is still reviewed and accepted
    let (code, body) = testing::get(addr, None, "/whoami", Some("good-token"))
        .await
        .unwrap();
    assert_eq!(
        (code, body.as_str()),
        (200, "alice [\"system:authenticated\"]")
    );
}

#[tokio::test]
async fn a_client_certificate_signed_by_the_client_ca_is_the_user() {
    let ca = Ca::new("client-ca");
    let tls = serving_tls()
        .with_client_ca_pem(ca.pem().as_bytes())
        .unwrap();
    let addr = start(
        Some(tls.server_config(true).unwrap()),
        Limits::default(),
        handler(),
    )
    .await;
    let (cert, key) = ca.issue("alice", &["ops", "system:monitoring"]);
    let with_cert = testing::client_config(tls.certificates(), Some((&cert, &key)), &[b"http/1.1"]);
    assert_eq!(
        testing::get(addr, Some(with_cert), "/whoami", None)
            .await
            .unwrap(),
        (200, "alice [\"ops\", \"system:monitoring\"]".to_string())
    );
    // no certificate: the handshake succeeds, the request is not authenticated
    let without = testing::client_config(tls.certificates(), None, &[b"http/1.1"]);
    assert_eq!(
        testing::get(addr, Some(without), "/whoami", None)
            .await
            .unwrap(),
        (401, "Unauthorized".to_string())
    );
    // a certificate from another CA: refused in the handshake
    let rogue = Ca::new("client-ca");
    let (cert, key) = rogue.issue("alice", &["system:masters"]);
    let forged = testing::client_config(tls.certificates(), Some((&cert, &key)), &[b"http/1.1"]);
    let r = testing::get(addr, Some(forged), "/whoami", None).await;
    assert!(
        r.as_ref().map_or(true, |(code, _)| *code != 200),
        "a certificate of another CA was accepted: {r:?}"
    );
    assert!(r.is_err(), "{r:?}");
}

#[tokio::test]
async fn oversized_heads_and_bodies_are_refused() {
    let limits = Limits {
        max_header_bytes: 8 << 10,
        max_body_bytes: 1024,
        ..Limits::default()
    };
    let addr = start(None, limits, handler()).await;
    let big = "a".repeat(16 << 10);
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: {big}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw).await;
    assert!(
        raw.starts_with(b"HTTP/1.1 431"),
        "{:?}",
        String::from_utf8_lossy(&raw[..raw.len().min(80)])
    );
    let post = |len: usize, declared: usize| async move {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let body = "b".repeat(len);
        let req = format!(
            "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: {declared}\r\nConnection: close\r\n\r\n{body}"
        );
        let _ = s.write_all(req.as_bytes()).await;
        let mut raw = Vec::new();
        let _ = s.read_to_end(&mut raw).await;
        testing::parse_response(&raw).unwrap()
    };
    assert_eq!(post(10, 10).await, (200, "10".into()));
    assert_eq!(post(2000, 2000).await.0, 413, "declared too large");
    // chunked, so only counting the bytes finds it too large
    let mut s = TcpStream::connect(addr).await.unwrap();
    let chunk = "c".repeat(1500);
    let req = format!(
        "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n{:x}\r\n{chunk}\r\n0\r\n\r\n",
        chunk.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw).await;
    assert_eq!(testing::parse_response(&raw).unwrap().0, 413);
}

/// Reads a response head (through the blank line).
async fn read_head<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> String {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut byte).await.unwrap(), 1, "closed mid-head");
        buf.push(byte[0]);
    }
    String::from_utf8(buf).unwrap()
}

#[tokio::test]
async fn an_upgraded_connection_is_the_handlers_past_every_deadline() {
    let limits = Limits {
        max_connections: 1,
        header_read_timeout: Duration::from_millis(300),
        idle_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let addr = start(None, limits, handler()).await;
    // without an Upgrade header there is nothing to take over
    let plain = b"GET /upgrade HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(plain).await.unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.unwrap();
    assert_eq!(
        testing::parse_response(&raw).unwrap(),
        (400, "Upgrade request required".into())
    );
    drop(s);

    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(
        b"GET /upgrade HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n",
    )
    .await
    .unwrap();
    let head = read_head(&mut s).await.to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 101"), "{head}");
    assert!(head.contains("upgrade: echo"), "{head}");
    assert!(!head.contains("content-length"), "{head}");
    for round in 0..3 {
        let msg = format!("ping {round}");
        s.write_all(msg.as_bytes()).await.unwrap();
        let mut got = vec![0u8; msg.len()];
        tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut got))
            .await
            .expect("no echo")
            .unwrap();
        assert_eq!(got, msg.as_bytes());
        // past the head deadline and the idle timeout: still upgraded
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    // the upgraded connection still holds the one connection slot
    let mut other = TcpStream::connect(addr).await.unwrap();
    let mut b = [0u8; 1];
    let r = tokio::time::timeout(Duration::from_secs(3), other.read(&mut b)).await;
    assert!(
        matches!(r, Ok(Ok(0)) | Ok(Err(_))),
        "admitted past the cap: {r:?}"
    );
    drop(s);
    let mut served = None;
    for _ in 0..40 {
        if let Ok(r) = testing::get(addr, None, "/healthz", None).await {
            served = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(served, Some((200, "ok".to_string())));
}
