//! `/healthz`, `/livez` and `/readyz` in plain HTTP/1.1 (kube-scheduler
//! serves them over HTTPS on `--secure-port`; TLS serving comes later).
//! `/readyz` is ok once every informer has listed its kind.

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::Shared;

/// Status code and body for a request path.
pub fn respond(path: &str, synced: bool) -> (u16, &'static str) {
    let path = path.split('?').next().unwrap_or("");
    match path.trim_end_matches('/') {
        "/healthz" | "/livez" => (200, "ok"),
        "/readyz" if synced => (200, "ok"),
        "/readyz" => (
            503,
            "[-]sched-handler-sync failed: caches not synced\nreadyz check failed",
        ),
        _ => (404, "404 page not found"),
    }
}

async fn handle(mut sock: TcpStream, shared: Arc<Shared>) {
    let mut buf = vec![0u8; 4096];
    let mut n = 0;
    // Read the request head (the request line is all that matters).
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
    let (code, body) = respond(path, shared.is_synced());
    let text = match code {
        200 => "OK",
        503 => "Service Unavailable",
        _ => "Not Found",
    };
    let resp = format!(
        "HTTP/1.1 {code} {text}\r\nContent-Type: text/plain; charset=utf-8\r\nX-Content-Type-Options: nosniff\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = sock.write_all(resp.as_bytes()).await;
    let _ = sock.shutdown().await;
}

/// Serves health requests until the task is aborted.
pub async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        match listener.accept().await {
            Ok((sock, _)) => {
                tokio::spawn(handle(sock, shared.clone()));
            }
            Err(e) => {
                tracing::warn!(error = %e, "accepting a health connection failed");
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
        assert_eq!(respond("/healthz", false).0, 200);
        assert_eq!(respond("/readyz?verbose", false).0, 503);
        assert_eq!(respond("/readyz", true), (200, "ok"));
        assert_eq!(respond("/metrics", true).0, 404);
    }
}
