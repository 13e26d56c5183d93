//! `/exec`, `/attach` and `/portForward`, as upstream's kubelet serves
//! them with the CRI's streaming server (not redirected):
//!
//! | path | methods |
//! |---|---|
//! | `/exec/{ns}/{pod}[/{uid}]/{container}?command=…&input=1&output=1&error=1&tty=1` | GET, POST |
//! | `/attach/{ns}/{pod}[/{uid}]/{container}?input=1&output=1&error=1` | GET, POST |
//! | `/portForward/{ns}/{pod}[/{uid}]` (`port=…` for WebSocket clients) | GET, POST |
//!
//! The pod must be bound to this node, the container running (newest
//! instance) or, for port forwarding, the sandbox ready. The runtime's
//! `Exec` / `Attach` / `PortForward` gives a one-time URL of its streaming
//! server, to which the client's upgrade request is proxied ([`proxy`]):
//! the streams (SPDY/3.1 or WebSocket, whatever the API server and the
//! runtime agree on) pass through untouched.
//!
//! The node does not declare `ExtendWebSocketsToKubelet`, so the API
//! server translates `kubectl`'s WebSockets (v5 channels, port-forward
//! tunnelling) to SPDY itself; a tunnelling WebSocket sent here directly
//! is refused.

use std::sync::Arc;

use http::header;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use rkube_cri::v1;
use rkube_cri::CriError;
use rkube_daemon::server::{Request, Response};

use super::{proxy, text, ApiContext};
use crate::logs::unescape;
use crate::pod::mirror_of;

/// Which stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `/exec`: a new process in a container.
    Exec,
    /// `/attach`: the container's own process.
    Attach,
    /// `/portForward`: TCP ports of the pod's network namespace.
    PortForward,
}

/// A routed stream request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Which stream.
    pub kind: Kind,
    /// Namespace.
    pub namespace: String,
    /// Pod name.
    pub pod: String,
    /// The pod's uid, when the path names it.
    pub uid: Option<String>,
    /// The container (not for port forwarding).
    pub container: Option<String>,
}

/// Routes the `/`-separated parts of a path (the first one empty).
pub fn route(parts: &[&str]) -> Option<Target> {
    if parts.iter().skip(1).any(|p| p.is_empty()) {
        return None;
    }
    let s = |p: &&str| p.to_string();
    let (kind, rest) = match parts {
        ["", "exec", rest @ ..] => (Kind::Exec, rest),
        ["", "attach", rest @ ..] => (Kind::Attach, rest),
        ["", "portForward", rest @ ..] => (Kind::PortForward, rest),
        _ => return None,
    };
    let (ns, pod, uid, container) = match (kind, rest) {
        (Kind::PortForward, [ns, pod]) => (ns, pod, None, None),
        (Kind::PortForward, [ns, pod, uid]) => (ns, pod, Some(uid), None),
        (Kind::PortForward, _) => return None,
        (_, [ns, pod, c]) => (ns, pod, None, Some(c)),
        (_, [ns, pod, uid, c]) => (ns, pod, Some(uid), Some(c)),
        _ => return None,
    };
    Some(Target {
        kind,
        namespace: s(ns),
        pod: s(pod),
        uid: uid.map(s),
        container: container.map(s),
    })
}

/// The values of `key` in a query, in order, decoded.
fn values(query: &str, key: &str) -> Vec<String> {
    query
        .split('&')
        .filter_map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (unescape(k) == key).then(|| unescape(v))
        })
        .collect()
}

fn flag(query: &str, key: &str) -> bool {
    values(query, key)
        .first()
        .is_some_and(|v| v == "1" || v == "true")
}

/// The stream options of an exec or attach request (upstream's
/// `remotecommand.NewOptions`; the parameters are the API server's
/// `input`, `output`, `error`, `tty` and `command`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options {
    /// `command`, repeated (exec).
    pub command: Vec<String>,
    /// `input`: stdin.
    pub stdin: bool,
    /// `output`: stdout.
    pub stdout: bool,
    /// `error`: stderr (never with a TTY).
    pub stderr: bool,
    /// `tty`.
    pub tty: bool,
}

impl Options {
    /// Parses the query: flags are on as `1` (what the API server sends)
    /// or `true`; stderr is dropped with a TTY (it is merged into stdout);
    /// at least one stream is required.
    pub fn parse(query: &str) -> Result<Options, String> {
        let tty = flag(query, "tty");
        let o = Options {
            command: values(query, "command"),
            stdin: flag(query, "input"),
            stdout: flag(query, "output"),
            stderr: flag(query, "error") && !tty,
            tty,
        };
        if !o.stdin && !o.stdout && !o.stderr {
            return Err("you must specify at least 1 of stdin, stdout, stderr".into());
        }
        Ok(o)
    }
}

fn is_websocket(req: &Request) -> bool {
    proxy::is_upgrade(&req.headers)
        && req
            .headers
            .get(header::UPGRADE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("websocket"))
}

/// The port-forward tunnelling sub-protocol (WebSocket carrying SPDY).
const TUNNELING: &str = "SPDY/3.1+portforward.k8s.io";

fn is_tunneling(req: &Request) -> bool {
    req.headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|p| p.trim() == TUNNELING)
}

/// The ports of a port-forward request: none for SPDY (they come in the
/// streams' headers); for WebSocket the `port` values (each may list
/// several, comma-separated), at least one (upstream's `NewV4Options`).
pub fn ports(query: &str, websocket: bool) -> Result<Vec<i32>, String> {
    if !websocket {
        return Ok(vec![]);
    }
    let given = values(query, "port");
    if given.is_empty() {
        return Err("query parameter \"port\" is required".into());
    }
    let mut out = Vec::new();
    for v in &given {
        if v.is_empty() {
            return Err("query parameter \"port\" cannot be empty".into());
        }
        for p in v.split(',') {
            let port: u16 = p
                .parse()
                .map_err(|e| format!("unable to parse {v:?} as a port: {e}"))?;
            if port == 0 {
                return Err(format!("port {v:?} must be > 0"));
            }
            out.push(i32::from(port));
        }
    }
    Ok(out)
}

/// A CRI error as upstream's streaming `WriteError` answers it.
fn cri_error(e: &CriError) -> Response {
    match e.code() {
        Some(tonic::Code::NotFound) => text(404, e.to_string()),
        Some(tonic::Code::ResourceExhausted) => {
            let mut r = text(429, e.to_string());
            r.headers_mut()
                .insert(header::RETRY_AFTER, http::HeaderValue::from_static("60"));
            r
        }
        _ => text(500, e.to_string()),
    }
}

/// Serves a stream request.
pub async fn serve(ctx: &Arc<ApiContext>, t: Target, req: Request) -> Response {
    let (opts, ports) = match t.kind {
        Kind::PortForward => {
            if is_websocket(&req) && is_tunneling(&req) {
                return text(
                    400,
                    format!("this kubelet does not serve port forwarding tunnelled over WebSockets ({TUNNELING})"),
                );
            }
            match ports(&req.query, is_websocket(&req)) {
                Ok(p) => (Options::default(), p),
                Err(e) => return text(400, e),
            }
        }
        _ => match Options::parse(&req.query) {
            Ok(o) => (o, vec![]),
            Err(e) => return text(400, e),
        },
    };
    let Some(rt) = &ctx.runtime else {
        return text(404, "streaming needs the CRI runtime");
    };
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &t.namespace);
    let pod = match api.get_opt(&t.pod).await {
        Ok(Some(p)) if p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&ctx.node) => p,
        Ok(_) => return text(404, "pod does not exist"),
        Err(e) => return text(500, format!("getting pod: {e}")),
    };
    let api_uid = pod.metadata.uid.clone().unwrap_or_default();
    let uid = mirror_of(&pod).unwrap_or_else(|| api_uid.clone());
    let uid_matches = t.uid.as_ref().is_none_or(|u| *u == api_uid || *u == uid);
    let full_name = format!("{}_{}", t.pod, t.namespace);
    let container = t.container.clone().unwrap_or_default();
    let cri = rt.client();
    let url = match t.kind {
        Kind::PortForward => {
            if !uid_matches {
                return text(404, "pod not found");
            }
            let sandbox = match rt.ready_sandbox_id(&uid).await {
                Ok(Some(id)) => id,
                Ok(None) => return text(404, format!("pod not found ({full_name:?})")),
                Err(e) => return text(500, e.to_string()),
            };
            if !proxy::is_upgrade(&req.headers) || req.upgrade.is_none() {
                return text(400, "Upgrade request required");
            }
            cri.port_forward(v1::PortForwardRequest {
                pod_sandbox_id: sandbox,
                port: ports,
            })
            .await
        }
        Kind::Exec | Kind::Attach => {
            let id = match rt.running_container_id(&uid, &container).await {
                Ok(Some(id)) if uid_matches => id,
                Ok(_) if t.kind == Kind::Exec => {
                    return text(404, format!("container not found ({container:?})"))
                }
                Ok(_) => {
                    return text(
                        404,
                        format!("container {container} not found in pod {full_name}"),
                    )
                }
                Err(e) => return text(500, e.to_string()),
            };
            if !proxy::is_upgrade(&req.headers) || req.upgrade.is_none() {
                return text(400, "Upgrade request required");
            }
            if t.kind == Kind::Exec {
                cri.exec(v1::ExecRequest {
                    container_id: id,
                    cmd: opts.command,
                    tty: opts.tty,
                    stdin: opts.stdin,
                    stdout: opts.stdout,
                    stderr: opts.stderr,
                })
                .await
            } else {
                // the TTY is the container's, fixed when it started
                let Some(tty) = spec_tty(&pod, &container) else {
                    return text(
                        404,
                        format!("container {container} not found in pod {full_name}"),
                    );
                };
                cri.attach(v1::AttachRequest {
                    container_id: id,
                    stdin: opts.stdin,
                    tty,
                    stdout: opts.stdout,
                    stderr: opts.stderr && !tty,
                })
                .await
            }
        }
    };
    let url = match url {
        Ok(u) => u,
        Err(e) => return cri_error(&e),
    };
    tracing::debug!(kind = ?t.kind, pod = %full_name, container = %container, "proxying a stream");
    proxy::upgrade(
        &url,
        &req.method,
        &req.headers,
        &req.body,
        req.peer.addr,
        req.upgrade,
    )
    .await
}

/// The `tty` of container `name` in the pod's spec (containers, init and
/// ephemeral containers); `None` if the spec has no such container.
fn spec_tty(pod: &Pod, name: &str) -> Option<bool> {
    let spec = pod.spec.as_ref()?;
    let regular = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == name)
        .map(|c| c.tty);
    let ephemeral = || {
        spec.ephemeral_containers
            .iter()
            .flatten()
            .find(|c| c.name == name)
            .map(|c| c.tty)
    };
    regular.or_else(ephemeral).map(|t| t.unwrap_or(false))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(kind: Kind, uid: Option<&str>, container: Option<&str>) -> Option<Target> {
        Some(Target {
            kind,
            namespace: "ns".into(),
            pod: "p".into(),
            uid: uid.map(str::to_string),
            container: container.map(str::to_string),
        })
    }

    fn r(path: &str) -> Option<Target> {
        route(&path.split('/').collect::<Vec<_>>())
    }

    #[test]
    fn routes() {
        assert_eq!(r("/exec/ns/p/c"), target(Kind::Exec, None, Some("c")));
        assert_eq!(
            r("/exec/ns/p/u1/c"),
            target(Kind::Exec, Some("u1"), Some("c"))
        );
        assert_eq!(r("/attach/ns/p/c"), target(Kind::Attach, None, Some("c")));
        assert_eq!(
            r("/attach/ns/p/u1/c"),
            target(Kind::Attach, Some("u1"), Some("c"))
        );
        assert_eq!(
            r("/portForward/ns/p"),
            target(Kind::PortForward, None, None)
        );
        assert_eq!(
            r("/portForward/ns/p/u1"),
            target(Kind::PortForward, Some("u1"), None)
        );
        for bad in [
            "/exec/ns/p",
            "/exec/ns/p/u/c/x",
            "/exec/ns//c",
            "/attach/ns",
            "/portForward/ns",
            "/portForward/ns/p/u/x",
            "/portforward/ns/p",
            "/run/ns/p/c",
        ] {
            assert_eq!(r(bad), None, "{bad}");
        }
    }

    #[test]
    fn exec_options() {
        let o = Options::parse(
            "command=sh&command=-c&command=echo%20hi%3B%20exit%203&output=1&error=true",
        )
        .unwrap();
        assert_eq!(o.command, ["sh", "-c", "echo hi; exit 3"]);
        assert!(o.stdout && o.stderr && !o.stdin && !o.tty);
        // a TTY merges stderr into stdout
        let o = Options::parse("tty=1&input=1&error=1&command=sh").unwrap();
        assert!(o.tty && o.stdin && !o.stderr);
        // only "1" and "true" count
        assert_eq!(
            Options::parse("command=ls&output=0&error=yes&stdout=1"),
            Err("you must specify at least 1 of stdin, stdout, stderr".into())
        );
        assert!(Options::parse("").is_err());
        assert!(Options::parse("input=1").unwrap().command.is_empty());
    }

    #[test]
    fn port_forward_ports() {
        assert_eq!(ports("", false), Ok(vec![]));
        assert_eq!(
            ports("port=80", false),
            Ok(vec![]),
            "SPDY: from the streams"
        );
        assert_eq!(
            ports("port=80&port=8080,9090", true),
            Ok(vec![80, 8080, 9090])
        );
        assert_eq!(
            ports("", true),
            Err("query parameter \"port\" is required".into())
        );
        assert!(ports("port=", true).is_err());
        assert!(ports("port=0", true).unwrap_err().contains("must be > 0"));
        assert!(ports("port=70000", true).is_err());
        assert!(ports("port=http", true).is_err());
    }

    #[test]
    fn attach_takes_the_tty_from_the_spec() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {
                "containers": [{"name": "a", "tty": true}, {"name": "b"}],
                "initContainers": [{"name": "i", "tty": true}],
                "ephemeralContainers": [{"name": "e", "tty": true}],
            }
        }))
        .unwrap();
        assert_eq!(spec_tty(&pod, "a"), Some(true));
        assert_eq!(spec_tty(&pod, "b"), Some(false));
        assert_eq!(spec_tty(&pod, "i"), Some(true));
        assert_eq!(spec_tty(&pod, "e"), Some(true));
        assert_eq!(spec_tty(&pod, "x"), None);
    }
}
