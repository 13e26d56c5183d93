//! `/healthz` (and `/metrics`) in plain HTTP/1.1 on
//! `healthzBindAddress:healthzPort`, on the daemons' shared server
//! ([`rkube_daemon::server`], with its request-head deadline, size limits
//! and connection cap). The authenticated HTTPS kubelet API on `port` is
//! [`crate::server`].

use std::sync::Arc;

use rkube_daemon::server::{self, Body, Handler, Limits, Request, Response, StatusCode};
use tokio::net::TcpListener;

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

/// The healthz port's request handler.
struct Healthz(Arc<Metrics>);

impl Handler for Healthz {
    async fn handle(&self, req: Request) -> Response {
        let (code, ctype, body) = respond(&req.path, &self.0);
        let code = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        server::respond(code, ctype, Body::whole(body))
    }
}

/// Serves until the task is aborted.
pub async fn serve(listener: TcpListener, metrics: Arc<Metrics>) {
    server::serve(
        listener,
        None,
        Limits::default(),
        Arc::new(Healthz(metrics)),
    )
    .await
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

    #[tokio::test]
    async fn served_over_plain_http() {
        let healthz = Arc::new(Healthz(Arc::new(Metrics::default())));
        let addr = rkube_daemon::testing::start(None, Limits::default(), healthz).await;
        let get = |p: &'static str| rkube_daemon::testing::get(addr, None, p, None);
        assert_eq!(get("/healthz").await.unwrap(), (200, "ok".to_string()));
        assert_eq!(get("/nope").await.unwrap().0, 404);
        let (code, body) = get("/metrics").await.unwrap();
        assert_eq!(code, 200);
        assert!(body.contains("rkube_kubelet_lease_renewals_total 0"));
    }
}
