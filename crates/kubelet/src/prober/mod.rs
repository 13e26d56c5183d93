//! Container probes: liveness, readiness and startup, as upstream's
//! `pkg/kubelet/prober`.
//!
//! One task per (container, probe kind), owned by the [`ProbeManager`]
//! (the runtime starts them when it sees a container running and stops
//! them when the container id changes or the pod goes). Each task probes
//! at once and then every `periodSeconds`, skipping while the container is
//! younger than `initialDelaySeconds`; liveness and readiness wait until
//! the startup probe (if any) has succeeded, and the startup probe stops
//! after its first reported success. A [`Tracker`] applies the thresholds:
//! the reported result changes only after `successThreshold` consecutive
//! successes or `failureThreshold` consecutive failures. Initial results are
//! upstream's: readiness *failure*, liveness *success*, startup *unknown*.
//!
//! A liveness or startup failure marks the container for killing; the
//! runtime kills it on its next sync and restarts it per restartPolicy.
//!
//! Handlers: `exec` (CRI `ExecSync` with `timeoutSeconds`), `httpGet`
//! (HTTP/1.1 to `host` or the pod IP; 200–399 succeed; HTTPS without
//! verifying the certificate, as upstream; the path encoded and the headers
//! checked as Go's net/http does, [`crate::prober::request`]), `tcpSocket` (connect), `grpc`
//! (`grpc.health.v1.Health/Check`, `SERVING` succeeds).

pub mod metrics;
pub mod request;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, HTTPGetAction, Pod, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use rkube_cri::CriClient;

use crate::events::Recorder;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinHandle;

/// Which probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProbeKind {
    /// Restart the container when it fails.
    Liveness,
    /// Gate the container's `ready`.
    Readiness,
    /// Hold the other probes until it succeeds; restart when it fails.
    Startup,
}

impl ProbeKind {
    /// `Liveness`, `Readiness`, `Startup` (as upstream's messages).
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeKind::Liveness => "Liveness",
            ProbeKind::Readiness => "Readiness",
            ProbeKind::Startup => "Startup",
        }
    }
}

/// One probe outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Passed.
    Success,
    /// Passed, with a warning (upstream's `probe.Warning`: a redirect to
    /// another host), reported as a `ProbeWarning` Event.
    Warning(String),
    /// Failed, with the reason.
    Failure(String),
}

/// What a probe does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Run a command in the container.
    Exec(Vec<String>),
    /// HTTP GET.
    Http {
        /// `HTTP` or `HTTPS`.
        scheme: String,
        /// Host (empty: the pod IP).
        host: String,
        /// Port (named ports resolved).
        port: u16,
        /// Path with query.
        path: String,
        /// Extra headers.
        headers: Vec<(String, String)>,
    },
    /// TCP connect.
    Tcp {
        /// Host (empty: the pod IP).
        host: String,
        /// Port.
        port: u16,
    },
    /// gRPC health check.
    Grpc {
        /// Port.
        port: u16,
        /// The service name asked about.
        service: String,
    },
}

/// A probe with its timings, defaulted as upstream's API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeSpec {
    /// Which probe.
    pub kind: ProbeKind,
    /// What it does.
    pub action: Action,
    /// `initialDelaySeconds` (default 0).
    pub initial_delay: Duration,
    /// `periodSeconds` (default 10).
    pub period: Duration,
    /// `timeoutSeconds` (default 1).
    pub timeout: Duration,
    /// `successThreshold` (default 1; 1 for liveness and startup).
    pub success_threshold: u32,
    /// `failureThreshold` (default 3).
    pub failure_threshold: u32,
    /// The probe's `terminationGracePeriodSeconds`: the grace of a kill
    /// this (liveness or startup) probe causes, instead of the pod's.
    pub termination_grace: Option<i64>,
}

fn secs(v: Option<i32>, default: u64) -> Duration {
    Duration::from_secs(v.filter(|s| *s > 0).map(|s| s as u64).unwrap_or(default))
}

fn resolve_port(p: &IntOrString, c: &Container) -> Result<u16, String> {
    match p {
        IntOrString::Int(n) => u16::try_from(*n).map_err(|_| format!("invalid port {n}")),
        IntOrString::String(name) => {
            if let Ok(n) = name.parse::<u16>() {
                return Ok(n);
            }
            c.ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(name))
                .and_then(|p| u16::try_from(p.container_port).ok())
                .ok_or_else(|| format!("no container port named {name:?}"))
        }
    }
}

/// An `httpGet` of container `c` (a probe's or a lifecycle hook's) as an
/// [`Action::Http`], its named port resolved.
pub fn http_action(h: &HTTPGetAction, c: &Container) -> Result<Action, String> {
    Ok(Action::Http {
        scheme: h.scheme.clone().unwrap_or_else(|| "HTTP".into()),
        host: h.host.clone().unwrap_or_default(),
        port: resolve_port(&h.port, c)?,
        path: h
            .path
            .clone()
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "/".into()),
        headers: h
            .http_headers
            .iter()
            .flatten()
            .map(|h| (h.name.clone(), h.value.clone()))
            .collect(),
    })
}

impl ProbeSpec {
    /// The spec of `probe` of container `c`.
    pub fn from_probe(kind: ProbeKind, probe: &Probe, c: &Container) -> Result<ProbeSpec, String> {
        let action = if let Some(e) = &probe.exec {
            Action::Exec(e.command.clone().unwrap_or_default())
        } else if let Some(h) = &probe.http_get {
            http_action(h, c)?
        } else if let Some(t) = &probe.tcp_socket {
            Action::Tcp {
                host: t.host.clone().unwrap_or_default(),
                port: resolve_port(&t.port, c)?,
            }
        } else if let Some(g) = &probe.grpc {
            Action::Grpc {
                port: u16::try_from(g.port).map_err(|_| format!("invalid port {}", g.port))?,
                service: g.service.clone().unwrap_or_default(),
            }
        } else {
            return Err("probe has no handler".into());
        };
        let success_threshold = match kind {
            ProbeKind::Readiness => probe.success_threshold.filter(|n| *n > 0).unwrap_or(1) as u32,
            _ => 1,
        };
        Ok(ProbeSpec {
            kind,
            action,
            initial_delay: Duration::from_secs(
                probe.initial_delay_seconds.unwrap_or(0).max(0) as u64
            ),
            period: secs(probe.period_seconds, 10),
            timeout: secs(probe.timeout_seconds, 1),
            success_threshold,
            failure_threshold: probe.failure_threshold.filter(|n| *n > 0).unwrap_or(3) as u32,
            termination_grace: probe.termination_grace_period_seconds,
        })
    }

    /// The probes of container `c` (invalid ones are skipped with a warning).
    pub fn of_container(c: &Container) -> Vec<ProbeSpec> {
        [
            (ProbeKind::Startup, &c.startup_probe),
            (ProbeKind::Liveness, &c.liveness_probe),
            (ProbeKind::Readiness, &c.readiness_probe),
        ]
        .into_iter()
        .filter_map(|(k, p)| {
            let p = p.as_ref()?;
            match ProbeSpec::from_probe(k, p, c) {
                Ok(s) => Some(s),
                Err(e) => {
                    tracing::warn!(container = %c.name, probe = k.as_str(), error = %e, "probe ignored");
                    None
                }
            }
        })
        .collect()
    }
}

/// The reported result of one probe worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reported {
    /// Not decided yet (startup before its first verdict).
    Unknown,
    /// Passing.
    Success,
    /// Failing.
    Failure,
}

/// Threshold bookkeeping of one probe worker (pure; upstream's
/// `worker.doProbe` after the probe ran).
#[derive(Debug, Clone)]
pub struct Tracker {
    kind: ProbeKind,
    success_threshold: u32,
    failure_threshold: u32,
    last: Option<bool>,
    run: u32,
    /// The result reported to the runtime.
    pub reported: Reported,
}

impl Tracker {
    /// A tracker with upstream's initial result for `spec.kind`.
    pub fn new(spec: &ProbeSpec) -> Tracker {
        Tracker {
            kind: spec.kind,
            success_threshold: spec.success_threshold.max(1),
            failure_threshold: spec.failure_threshold.max(1),
            last: None,
            run: 0,
            reported: match spec.kind {
                ProbeKind::Readiness => Reported::Failure,
                ProbeKind::Liveness => Reported::Success,
                ProbeKind::Startup => Reported::Unknown,
            },
        }
    }

    /// Feeds one outcome; returns `true` if the reported result changed.
    pub fn observe(&mut self, success: bool) -> bool {
        if self.last == Some(success) {
            self.run = self.run.saturating_add(1);
        } else {
            self.last = Some(success);
            self.run = 1;
        }
        let threshold = if success {
            self.success_threshold
        } else {
            self.failure_threshold
        };
        if self.run < threshold {
            return false;
        }
        let new = if success {
            Reported::Success
        } else {
            Reported::Failure
        };
        if !success && self.kind != ProbeKind::Readiness {
            // The container is going to be killed: start counting afresh.
            self.run = 0;
        }
        let changed = new != self.reported;
        self.reported = new;
        changed
    }
}

/// Where probes go: the container and the pod's address.
#[derive(Debug, Clone)]
pub struct Target {
    /// CRI client (exec probes).
    pub cri: CriClient,
    /// The container's CRI id (without `containerd://`).
    pub container_id: String,
    /// The pod IP (the node IP with host networking).
    pub pod_ip: String,
    /// When the container started.
    pub started_at: Timestamp,
    /// Where failed probes are reported as `Unhealthy` Events: the
    /// recorder, the pod and the container's name.
    pub events: Option<(Recorder, Arc<Pod>, String)>,
    /// The container, as the probe metrics name it.
    pub labels: metrics::ProbeLabels,
    /// The pod worker's wake-up: a verdict that changes syncs the pod.
    pub wake: Option<Arc<tokio::sync::Notify>>,
}

/// Runs one probe once.
pub async fn run_once(action: &Action, target: &Target, timeout: Duration) -> Outcome {
    let host = |h: &str| {
        if h.is_empty() {
            target.pod_ip.clone()
        } else {
            h.to_string()
        }
    };
    match action {
        Action::Exec(cmd) => {
            let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
            match tokio::time::timeout(
                timeout + Duration::from_secs(1),
                target.cri.exec_sync(&target.container_id, &cmd, timeout),
            )
            .await
            {
                Ok(Ok(out)) if out.exit_code == 0 => Outcome::Success,
                Ok(Ok(out)) => Outcome::Failure(format!(
                    "command {cmd:?} exited with {}: {}",
                    out.exit_code,
                    String::from_utf8_lossy(&out.stdout).trim()
                )),
                Ok(Err(e)) => Outcome::Failure(e.to_string()),
                Err(_) => Outcome::Failure(format!("command {cmd:?} timed out")),
            }
        }
        Action::Http {
            scheme,
            host: h,
            port,
            path,
            headers,
        } => {
            let tls = if scheme.eq_ignore_ascii_case("HTTPS") {
                true
            } else if scheme.eq_ignore_ascii_case("HTTP") {
                false
            } else {
                return Outcome::Failure(format!("unsupported scheme {scheme:?}"));
            };
            let host = host(h);
            match tokio::time::timeout(timeout, http_probe(tls, &host, *port, path, headers)).await
            {
                Ok(outcome) => outcome,
                Err(_) => Outcome::Failure("context deadline exceeded".into()),
            }
        }
        Action::Tcp { host: h, port } => {
            let addr = (host(h), *port);
            match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr.clone())).await
            {
                Ok(Ok(_)) => Outcome::Success,
                Ok(Err(e)) => Outcome::Failure(format!("dial tcp {}:{}: {e}", addr.0, addr.1)),
                Err(_) => Outcome::Failure(format!("dial tcp {}:{}: i/o timeout", addr.0, addr.1)),
            }
        }
        Action::Grpc { port, service } => {
            match tokio::time::timeout(timeout, grpc_check(&target.pod_ip, *port, service)).await {
                Ok(Ok(1)) => Outcome::Success,
                Ok(Ok(s)) => Outcome::Failure(format!("service unhealthy (responded with {s})")),
                Ok(Err(e)) => Outcome::Failure(e),
                Err(_) => Outcome::Failure("timeout: health rpc did not complete".into()),
            }
        }
    }
}

fn host_header(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The User-Agent of probe requests (upstream's `kube-probe/<major>.<minor>`).
pub const PROBE_AGENT: &str = "kube-probe/1.37";
/// The User-Agent of lifecycle hook requests.
pub const LIFECYCLE_AGENT: &str = "kube-lifecycle/1.37";

/// A minimal HTTP/1.1 GET (over TLS without certificate checks when
/// `tls`, as upstream's prober); returns the status code.
pub async fn http_get(
    tls: bool,
    host: &str,
    port: u16,
    path: &str,
    headers: &[(String, String)],
    agent: &str,
) -> Result<u16, String> {
    http_request(tls, host, port, path, headers, agent)
        .await
        .map(|r| r.code)
}

/// [`http_get`] with the response's `Location`.
async fn http_request(
    tls: bool,
    host: &str,
    port: u16,
    path: &str,
    headers: &[(String, String)],
    agent: &str,
) -> Result<HttpResponse, String> {
    let target = crate::prober::request::request_target(path);
    let url = format!(
        "{}://{}{target}",
        if tls { "https" } else { "http" },
        host_header(host, port)
    );
    let headers = crate::prober::request::request_headers(headers)
        .map_err(|e| format!("Get \"{url}\": {e}"))?;
    let tcp = tokio::net::TcpStream::connect((host, port))
        .await
        .map_err(|e| format!("Get \"{url}\": {e}"))?;
    if tls {
        let s = rkube_daemon::probe_tls::connect_unverified(tcp, host)
            .await
            .map_err(|e| format!("Get \"{url}\": {e}"))?;
        http_exchange(s, host, port, &target, &headers, agent).await
    } else {
        http_exchange(tcp, host, port, &target, &headers, agent).await
    }
}

/// Sends the GET for `target` (a well-formed request target, see
/// [`crate::prober::request`]) on `s` and reads the status line.
async fn http_exchange<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    mut s: S,
    host: &str,
    port: u16,
    target: &str,
    headers: &[(String, String)],
    agent: &str,
) -> Result<HttpResponse, String> {
    let mut req = format!("GET {target} HTTP/1.1\r\n");
    let has = |n: &str| headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(n));
    if !has("host") {
        req += &format!("Host: {}\r\n", host_header(host, port));
    }
    if !has("user-agent") {
        req += &format!("User-Agent: {agent}\r\n");
    }
    if !has("accept") {
        req += "Accept: */*\r\n";
    }
    for (k, v) in headers {
        req += &format!("{k}: {v}\r\n");
    }
    req += "Connection: close\r\n\r\n";
    s.write_all(req.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    // The status line and the headers (for a redirect's Location), at
    // most 8 KiB.
    let mut buf = Vec::with_capacity(256);
    let mut chunk = [0u8; 256];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 8192 {
        let n = s.read(&mut chunk).await.map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8_lossy(&buf);
    let status = text.split("\r\n").next().unwrap_or("");
    let code = status
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("malformed HTTP response: {status:?}"))?;
    let header = |name: &str| {
        text.split("\r\n")
            .skip(1)
            .take_while(|l| !l.is_empty())
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim().to_string())
    };
    let location = header("location");
    // A redirect's body (at most 10 KiB, as upstream's prober reads), for
    // the warning of a redirect that is not followed.
    let mut body = Vec::new();
    if (300..400).contains(&code) {
        let want = header("content-length")
            .and_then(|l| l.parse::<usize>().ok())
            .unwrap_or(MAX_BODY)
            .min(MAX_BODY);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            body.extend_from_slice(&buf[i + 4..]);
        }
        while body.len() < want {
            let n = s.read(&mut chunk).await.map_err(|e| e.to_string())?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
        body.truncate(want);
    }
    Ok(HttpResponse {
        code,
        location,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

/// The most of a response body the prober reads (upstream's 10 KiB).
const MAX_BODY: usize = 10 * 1024;

/// What a GET got back: the status code and a redirect's `Location`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpResponse {
    /// The status code.
    pub code: u16,
    /// The `Location` header, if any.
    pub location: Option<String>,
    /// A redirect's body (at most 10 KiB); empty otherwise.
    pub body: String,
}

/// Where a redirect from `host:port` over `tls` goes, when Go's prober
/// would follow it: a relative location, or an absolute one with the same
/// host name (the port may differ). `None`: not followed.
pub fn follow(
    location: &str,
    tls: bool,
    host: &str,
    port: u16,
) -> Option<(bool, String, u16, String)> {
    if location.starts_with('/') && !location.starts_with("//") {
        return Some((tls, host.to_string(), port, location.to_string()));
    }
    let (scheme, rest) = location.split_once("://")?;
    let tls = match scheme.to_ascii_lowercase().as_str() {
        "http" => false,
        "https" => true,
        _ => return None,
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].to_string()),
        None => (rest, "/".to_string()),
    };
    let (h, p) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || authority.starts_with('[') => {
            (h.trim_matches(|c| c == '[' || c == ']'), p.parse().ok()?)
        }
        _ => (authority, if tls { 443 } else { 80 }),
    };
    (h == host).then(|| (tls, h.to_string(), p, path))
}

/// The outcome of an HTTP probe, following redirects as Go's prober: up
/// to 10 to the same host name; a redirect elsewhere ends it with that
/// (3xx: successful) response and a warning.
pub async fn http_probe(
    tls: bool,
    host: &str,
    port: u16,
    path: &str,
    headers: &[(String, String)],
) -> Outcome {
    let (mut tls, mut host, mut port, mut path) = (tls, host.to_string(), port, path.to_string());
    for _ in 0..=10 {
        let r = match http_request(tls, &host, port, &path, headers, PROBE_AGENT).await {
            Ok(r) => r,
            Err(e) => return Outcome::Failure(e),
        };
        if !(300..400).contains(&r.code) {
            return if (200..400).contains(&r.code) {
                Outcome::Success
            } else {
                Outcome::Failure(format!("HTTP probe failed with statuscode: {}", r.code))
            };
        }
        let Some(loc) = r.location else {
            return Outcome::Success;
        };
        match follow(&loc, tls, &host, port) {
            Some(next) => (tls, host, port, path) = next,
            None => {
                return Outcome::Warning(format!(
                    "Probe terminated redirects, Response body: {}",
                    r.body
                ));
            }
        }
    }
    Outcome::Failure("stopped after 10 redirects".into())
}

/// `grpc.health.v1.HealthCheckRequest`.
#[derive(Clone, PartialEq, prost::Message)]
struct HealthCheckRequest {
    #[prost(string, tag = "1")]
    service: String,
}

/// `grpc.health.v1.HealthCheckResponse` (status 1 = SERVING).
#[derive(Clone, PartialEq, prost::Message)]
struct HealthCheckResponse {
    #[prost(int32, tag = "1")]
    status: i32,
}

async fn grpc_check(ip: &str, port: u16, service: &str) -> Result<i32, String> {
    let uri = format!("http://{}", host_header(ip, port));
    let channel = tonic::transport::Endpoint::from_shared(uri)
        .map_err(|e| e.to_string())?
        .connect()
        .await
        .map_err(|e| format!("failed to connect service {:?}: {e}", host_header(ip, port)))?;
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.map_err(|e| e.to_string())?;
    let path = tonic::codegen::http::uri::PathAndQuery::from_static("/grpc.health.v1.Health/Check");
    let resp: tonic::Response<HealthCheckResponse> = grpc
        .unary(
            tonic::Request::new(HealthCheckRequest {
                service: service.to_string(),
            }),
            path,
            tonic_prost::ProstCodec::default(),
        )
        .await
        .map_err(|s| format!("health rpc failed: {}: {}", s.code(), s.message()))?;
    Ok(resp.into_inner().status)
}

/// The shared state of one container's probes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerProbeState {
    /// Startup succeeded (or there is no startup probe).
    pub started: bool,
    /// Readiness passes (or there is no readiness probe).
    pub ready: bool,
    /// Set when liveness or startup failed: why the container must be killed.
    pub kill: Option<String>,
    /// The failed probe's `terminationGracePeriodSeconds`, if it has one.
    pub kill_grace: Option<i64>,
    /// Which probe failed (`liveness`, `startup`).
    pub kill_probe: Option<String>,
}

struct Entry {
    container_id: String,
    state: Arc<Mutex<ContainerProbeState>>,
    tasks: Vec<JoinHandle<()>>,
    metrics: Arc<metrics::ProbeMetrics>,
    labels: metrics::ProbeLabels,
    kinds: Vec<&'static str>,
}

impl Drop for Entry {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        for k in &self.kinds {
            self.metrics.forget(&self.labels, k);
        }
    }
}

/// Probe workers of every container, keyed by (pod uid, container name).
#[derive(Default)]
pub struct ProbeManager {
    entries: Mutex<HashMap<(String, String), Entry>>,
    metrics: Arc<metrics::ProbeMetrics>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl ProbeManager {
    /// Makes sure container `name` of pod `uid`, running as `target`, has
    /// workers for `specs` (restarting them if the container id changed).
    /// A no-op without probes.
    pub fn ensure(&self, uid: &str, name: &str, specs: Vec<ProbeSpec>, target: Target) {
        let key = (uid.to_string(), name.to_string());
        let mut entries = lock(&self.entries);
        if entries
            .get(&key)
            .is_some_and(|e| e.container_id == target.container_id)
        {
            return;
        }
        entries.remove(&key);
        if specs.is_empty() {
            return;
        }
        let has = |k| specs.iter().any(|s| s.kind == k);
        let state = Arc::new(Mutex::new(ContainerProbeState {
            started: !has(ProbeKind::Startup),
            ready: !has(ProbeKind::Readiness),
            kill: None,
            kill_grace: None,
            kill_probe: None,
        }));
        let started = Arc::new(tokio::sync::Notify::new());
        let kinds = specs.iter().map(|s| s.kind.as_str()).collect();
        let tasks = specs
            .into_iter()
            .map(|s| {
                tokio::spawn(worker(
                    s,
                    target.clone(),
                    state.clone(),
                    started.clone(),
                    self.metrics.clone(),
                ))
            })
            .collect();
        entries.insert(
            key,
            Entry {
                container_id: target.container_id,
                state,
                tasks,
                metrics: self.metrics.clone(),
                labels: target.labels,
                kinds,
            },
        );
    }

    /// The probe counters (`/metrics/probes`).
    pub fn metrics(&self) -> &Arc<metrics::ProbeMetrics> {
        &self.metrics
    }

    /// The probe state of container `name` of pod `uid` if it runs as
    /// `container_id` and has probes.
    pub fn state(&self, uid: &str, name: &str, container_id: &str) -> Option<ContainerProbeState> {
        let entries = lock(&self.entries);
        let e = entries.get(&(uid.to_string(), name.to_string()))?;
        (e.container_id == container_id).then(|| lock(&e.state).clone())
    }

    /// Stops the workers of one container.
    pub fn remove(&self, uid: &str, name: &str) {
        lock(&self.entries).remove(&(uid.to_string(), name.to_string()));
    }

    /// Stops every worker of pod `uid`.
    pub fn forget_pod(&self, uid: &str) {
        lock(&self.entries).retain(|(u, _), _| u != uid);
    }

    /// Number of containers with probe workers.
    pub fn len(&self) -> usize {
        lock(&self.entries).len()
    }

    /// True with no workers.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One probe's loop. `started` wakes the readiness and liveness workers
/// the moment the startup probe succeeds (as upstream, a readiness probe
/// runs right after startup, not a period later).
async fn worker(
    spec: ProbeSpec,
    target: Target,
    state: Arc<Mutex<ContainerProbeState>>,
    started: Arc<tokio::sync::Notify>,
    metrics: Arc<metrics::ProbeMetrics>,
) {
    let mut tracker = Tracker::new(&spec);
    // The first success is a stage of the pod's startup timeline.
    let mut succeeded = false;
    let mut ticker = tokio::time::interval(spec.period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = started.notified(), if spec.kind != ProbeKind::Startup => {}
        }
        let age = Timestamp::now().duration_since(target.started_at);
        if age.as_secs() < spec.initial_delay.as_secs() as i64 {
            continue;
        }
        {
            let st = lock(&state);
            if st.kill.is_some() {
                // On hold until the container is replaced (and this task with it).
                continue;
            }
            match spec.kind {
                ProbeKind::Startup if st.started => return,
                ProbeKind::Liveness | ProbeKind::Readiness if !st.started => continue,
                _ => {}
            }
        }
        let began = std::time::Instant::now();
        let outcome = run_once(&spec.action, &target, spec.timeout).await;
        let ok = matches!(outcome, Outcome::Success | Outcome::Warning(_));
        metrics.observe(
            &target.labels,
            spec.kind.as_str(),
            if ok {
                metrics::ProbeResult::Successful
            } else {
                metrics::ProbeResult::Failed
            },
            began.elapsed().as_secs_f64(),
        );
        if let (true, false, Some((rec, pod, name))) = (ok, succeeded, &target.events) {
            succeeded = true;
            rec.stage(
                pod,
                "ProbeSucceeded",
                Some(name),
                format!("{} probe", spec.kind.as_str()),
            );
        }
        if let (Outcome::Warning(w), Some((rec, pod, name))) = (&outcome, &target.events) {
            rec.record(
                pod,
                Some(name),
                true,
                "ProbeWarning",
                format!("{} probe warning: {w}", spec.kind.as_str()),
            );
        }
        if let Outcome::Failure(why) = &outcome {
            tracing::debug!(container = %target.container_id, probe = spec.kind.as_str(), %why, "probe failed");
            if let Some((rec, pod, name)) = &target.events {
                rec.record(
                    pod,
                    Some(name),
                    true,
                    "Unhealthy",
                    format!("{} probe failed: {why}", spec.kind.as_str()),
                );
            }
        }
        let changed = tracker.observe(ok);
        let mut st = lock(&state);
        match (spec.kind, tracker.reported) {
            (ProbeKind::Readiness, r) => st.ready = r == Reported::Success,
            (ProbeKind::Startup, Reported::Success) => {
                st.started = true;
                started.notify_waiters();
            }
            (_, Reported::Failure) => {
                let why = match &outcome {
                    Outcome::Failure(w) => w.clone(),
                    Outcome::Success | Outcome::Warning(_) => String::new(),
                };
                tracing::info!(container = %target.container_id, probe = spec.kind.as_str(), %why,
                    "probe failed; the container will be restarted");
                st.kill = Some(format!(
                    "Container failed {} probe, will be restarted: {why}",
                    spec.kind.as_str().to_lowercase()
                ));
                st.kill_grace = spec.termination_grace;
                st.kill_probe = Some(spec.kind.as_str().to_lowercase());
            }
            _ => {}
        }
        drop(st);
        // A new verdict is synced at once (readiness into the status, a
        // failed liveness or startup probe into a restart), as upstream's
        // result managers start a sync of the pod.
        if let (true, Some(w)) = (changed, &target.wake) {
            w.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn redirects_are_followed_to_the_same_host_name_only() {
        assert_eq!(
            follow("/healthz", false, "10.0.0.1", 8080),
            Some((false, "10.0.0.1".into(), 8080, "/healthz".into()))
        );
        assert_eq!(
            follow("http://10.0.0.1:9090/x?y=1", false, "10.0.0.1", 8080),
            Some((false, "10.0.0.1".into(), 9090, "/x?y=1".into()))
        );
        assert_eq!(
            follow("https://10.0.0.1", false, "10.0.0.1", 8080),
            Some((true, "10.0.0.1".into(), 443, "/".into()))
        );
        assert_eq!(follow("http://0.0.0.0/", false, "10.0.0.1", 8080), None);
        assert_eq!(follow("//elsewhere/x", false, "10.0.0.1", 8080), None);
    }

    /// A loopback HTTP server answering each request with `respond(the
    /// request's text)`; returns its port.
    async fn serve(respond: fn(&str) -> String) -> u16 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = l.accept().await.unwrap();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 2048];
                    let n = s.read(&mut buf).await.unwrap_or(0);
                    let resp = respond(&String::from_utf8_lossy(&buf[..n]));
                    let _ = s.write_all(resp.as_bytes()).await;
                });
            }
        });
        port
    }

    #[tokio::test]
    async fn a_local_redirect_is_followed_and_a_foreign_one_ends_the_probe() {
        let port = serve(|req| {
            if req.starts_with("GET /local ") {
                "HTTP/1.1 302 Found\r\nLocation: /bad\r\nContent-Length: 0\r\n\r\n"
            } else if req.starts_with("GET /foreign ") {
                "HTTP/1.1 302 Found\r\nLocation: http://192.0.2.1/bad\r\nContent-Length: 43\r\n\r\n<a href=\"http://192.0.2.1/bad\">Found</a>.\n\n"
            } else if req.starts_with("GET /loop ") {
                "HTTP/1.1 302 Found\r\nLocation: /loop\r\nContent-Length: 0\r\n\r\n"
            } else {
                "HTTP/1.1 500 Bad\r\nContent-Length: 0\r\n\r\n"
            }
            .to_string()
        })
        .await;
        assert_eq!(
            http_probe(false, "127.0.0.1", port, "/local", &[]).await,
            Outcome::Failure("HTTP probe failed with statuscode: 500".into())
        );
        assert_eq!(
            http_probe(false, "127.0.0.1", port, "/foreign", &[]).await,
            Outcome::Warning(
                "Probe terminated redirects, Response body: <a href=\"http://192.0.2.1/bad\">Found</a>.\n\n"
                    .into()
            )
        );
        assert_eq!(
            http_probe(false, "127.0.0.1", port, "/loop", &[]).await,
            Outcome::Failure("stopped after 10 redirects".into())
        );
    }

    fn spec(kind: ProbeKind, success: u32, failure: u32) -> ProbeSpec {
        ProbeSpec {
            kind,
            action: Action::Exec(vec!["true".into()]),
            initial_delay: Duration::ZERO,
            period: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            success_threshold: success,
            failure_threshold: failure,
            termination_grace: None,
        }
    }

    #[test]
    fn initial_results_are_upstreams() {
        assert_eq!(
            Tracker::new(&spec(ProbeKind::Readiness, 1, 3)).reported,
            Reported::Failure
        );
        assert_eq!(
            Tracker::new(&spec(ProbeKind::Liveness, 1, 3)).reported,
            Reported::Success
        );
        assert_eq!(
            Tracker::new(&spec(ProbeKind::Startup, 1, 3)).reported,
            Reported::Unknown
        );
    }

    #[test]
    fn thresholds_need_consecutive_results() {
        let mut t = Tracker::new(&spec(ProbeKind::Readiness, 2, 3));
        assert!(
            !t.observe(true),
            "one success is not enough with successThreshold 2"
        );
        assert_eq!(t.reported, Reported::Failure);
        assert!(t.observe(true));
        assert_eq!(t.reported, Reported::Success);
        // two failures, a success in between resets the run
        t.observe(false);
        t.observe(false);
        t.observe(true);
        t.observe(false);
        t.observe(false);
        assert_eq!(t.reported, Reported::Success);
        assert!(t.observe(false), "third consecutive failure flips it");
        assert_eq!(t.reported, Reported::Failure);
    }

    #[test]
    fn liveness_failure_restarts_the_count() {
        let mut t = Tracker::new(&spec(ProbeKind::Liveness, 1, 2));
        t.observe(false);
        assert_eq!(t.reported, Reported::Success);
        t.observe(false);
        assert_eq!(t.reported, Reported::Failure);
        // counting starts again after the kill
        t.observe(false);
        assert_eq!(t.run, 1);
    }

    #[test]
    fn specs_default_and_resolve_named_ports() {
        let c: Container = serde_json::from_value(json!({
            "name": "c", "image": "i",
            "ports": [{"name": "http", "containerPort": 8080}],
            "readinessProbe": {"httpGet": {"port": "http", "path": "/ready"}, "successThreshold": 2},
            "livenessProbe": {"tcpSocket": {"port": 80}, "periodSeconds": 3,
                              "successThreshold": 5, "initialDelaySeconds": 7},
            "startupProbe": {"exec": {"command": ["cat", "/tmp/ok"]}, "failureThreshold": 30}
        }))
        .unwrap();
        let specs = ProbeSpec::of_container(&c);
        assert_eq!(specs.len(), 3);
        let startup = &specs[0];
        assert_eq!(startup.kind, ProbeKind::Startup);
        assert_eq!(startup.failure_threshold, 30);
        assert_eq!(startup.period, Duration::from_secs(10));
        assert_eq!(startup.timeout, Duration::from_secs(1));
        let live = &specs[1];
        assert_eq!(live.period, Duration::from_secs(3));
        assert_eq!(
            live.success_threshold, 1,
            "liveness successThreshold is always 1"
        );
        assert_eq!(live.initial_delay, Duration::from_secs(7));
        let ready = &specs[2];
        assert_eq!(ready.success_threshold, 2);
        match &ready.action {
            Action::Http { port, path, .. } => {
                assert_eq!(*port, 8080);
                assert_eq!(path, "/ready");
            }
            a => panic!("{a:?}"),
        }
        let bad: Container = serde_json::from_value(json!({
            "name": "c", "readinessProbe": {"httpGet": {"port": "nope"}}}))
        .unwrap();
        assert!(ProbeSpec::of_container(&bad).is_empty());
    }

    #[tokio::test]
    async fn http_and_tcp_probes_against_a_local_server() {
        let port = serve(|req| {
            let code = if req.starts_with("GET /ok ") {
                200
            } else {
                503
            };
            format!("HTTP/1.1 {code} X\r\nContent-Length: 0\r\n\r\n")
        })
        .await;
        assert_eq!(
            http_get(false, "127.0.0.1", port, "/ok", &[], PROBE_AGENT).await,
            Ok(200)
        );
        assert_eq!(
            http_get(false, "127.0.0.1", port, "/bad", &[], PROBE_AGENT).await,
            Ok(503)
        );
        // A path cannot split the request line; a header cannot be smuggled.
        assert_eq!(
            http_get(
                false,
                "127.0.0.1",
                port,
                "/ok HTTP/1.1\r\nX-Injected: 1",
                &[],
                PROBE_AGENT
            )
            .await,
            Ok(503)
        );
        let e = http_get(
            false,
            "127.0.0.1",
            port,
            "/ok",
            &[("X-A".into(), "v\r\nHost: evil".into())],
            PROBE_AGENT,
        )
        .await
        .unwrap_err();
        assert_eq!(
            e,
            format!("Get \"http://127.0.0.1:{port}/ok\": net/http: invalid header field value for \"X-A\"")
        );
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        assert!(http_get(false, "127.0.0.1", closed, "/", &[], PROBE_AGENT)
            .await
            .is_err());
        let t = tokio::time::timeout(
            Duration::from_secs(1),
            tokio::net::TcpStream::connect(("127.0.0.1", port)),
        )
        .await;
        assert!(matches!(t, Ok(Ok(_))));
    }
}
