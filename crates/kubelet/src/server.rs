//! `/healthz` (and `/metrics`) in plain HTTP/1.1 on
//! `healthzBindAddress:healthzPort`, hand-rolled on tokio like the
//! scheduler's health endpoints. The authenticated HTTPS kubelet API on
//! `port` is [`crate::api`].

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::metrics::Metrics;

/// Status code, content type and body for a request path.
pub fn respond(path: &str, metrics: &Metrics) -> (u16, &'static str, String) {
    let path = path.split('?').next().unwrap_or("");
    match path.trim_end_matches('/') {
        "/healthz" => (200, "text/plain; charset=utf-8", "ok".into()),
        "/metrics" => (
            200,
            "text/plain; version=0.0.4; charset=utf-8",
            metrics.render(),
        ),
        _ => (
            404,
            "text/plain; charset=utf-8",
            "404 page not found".into(),
        ),
    }
}

async fn handle(mut sock: TcpStream, metrics: Arc<Metrics>) {
    let mut buf = vec![0u8; 4096];
    let mut n = 0;
    while n < buf.len() {
        match sock.read(&mut buf[n..]).await {
            Ok(0) | Err(_) => break,
            Ok(k) => {
                n += k;
                if buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                    break;
                }
            }
        }
    }
    let head = String::from_utf8_lossy(&buf[..n]);
    let path = head
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or("/");
    let (code, ctype, body) = respond(path, &metrics);
    let text = if code == 200 { "OK" } else { "Not Found" };
    let resp = format!(
        "HTTP/1.1 {code} {text}\r\nContent-Type: {ctype}\r\nX-Content-Type-Options: nosniff\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = sock.write_all(resp.as_bytes()).await;
    let _ = sock.shutdown().await;
}

/// Serves until the task is aborted.
pub async fn serve(listener: TcpListener, metrics: Arc<Metrics>) {
    loop {
        match listener.accept().await {
            Ok((sock, _)) => {
                tokio::spawn(handle(sock, metrics.clone()));
            }
            Err(e) => {
                tracing::warn!(error = %e, "accepting a healthz connection failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        let m = Metrics::default();
        assert_eq!(respond("/healthz", &m).2, "ok");
        assert_eq!(respond("/healthz?verbose", &m).0, 200);
        assert!(respond("/metrics", &m)
            .2
            .contains("rkube_kubelet_lease_renewals_total 0"));
        assert_eq!(respond("/pods", &m).0, 404);
    }
}
