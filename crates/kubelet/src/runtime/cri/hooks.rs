//! Container lifecycle hooks (`postStart`, `preStop`) as upstream's
//! handler runner (`pkg/kubelet/lifecycle/handlers.go`):
//!
//! * `exec`: the command in the container (CRI `ExecSync`); a non-zero
//!   exit fails the hook, with the output in the message;
//! * `httpGet`: a GET to the pod IP (or `host`) as a probe's request,
//!   `User-Agent: kube-lifecycle/1.37`; like upstream, only a transport
//!   error fails it — any HTTP response, whatever its status, is a success;
//!   HTTPS skips certificate checks;
//! * `sleep`: waits `seconds`.
//!
//! `postStart` runs right after `StartContainer`; if it fails the
//! container is killed and restarted per `restartPolicy` (upstream's
//! `PostStartHookError`). `preStop` runs before `StopContainer` on every
//! kill (pod deletion, liveness failure), within the grace period, which
//! it uses up: the stop gets what is left, at least 2 s (upstream's
//! `minimumGracePeriodInSeconds`).
//!
//! Upstream gives `postStart` no time limit; rkube bounds it by
//! [`POST_START_LIMIT`] so that a hook that never returns cannot hold the
//! pod's worker forever (the container is then killed as for a failure).

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, LifecycleHandler, Pod};
use kube::ResourceExt;
use rkube_cri::CriClient;

use crate::prober::{self, Action, LIFECYCLE_AGENT};

/// The longest a `postStart` hook may run.
pub const POST_START_LIMIT: Duration = Duration::from_secs(120);

/// The least a container is given to stop after its `preStop` hook.
pub const MIN_STOP_GRACE: Duration = Duration::from_secs(2);

/// Which hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    /// `lifecycle.postStart`.
    PostStart,
    /// `lifecycle.preStop`.
    PreStop,
}

impl Hook {
    /// The handler of this hook in `c`, if any.
    pub fn of(self, c: &Container) -> Option<&LifecycleHandler> {
        let l = c.lifecycle.as_ref()?;
        match self {
            Hook::PostStart => l.post_start.as_ref(),
            Hook::PreStop => l.pre_stop.as_ref(),
        }
    }
}

/// Where the hook runs.
pub struct HookTarget<'a> {
    /// The CRI client.
    pub cri: &'a CriClient,
    /// The container's CRI id.
    pub container_id: &'a str,
    /// The pod IP (the default `httpGet` host).
    pub pod_ip: &'a str,
}

fn pod_ref(pod: &Pod) -> String {
    format!(
        "{}_{}({})",
        pod.name_any(),
        pod.namespace().unwrap_or_default(),
        pod.uid().unwrap_or_default()
    )
}

/// Runs `handler` of container `c` within `limit`; `Err` is upstream's
/// message for the failed hook.
pub async fn run(
    target: &HookTarget<'_>,
    pod: &Pod,
    c: &Container,
    handler: &LifecycleHandler,
    limit: Duration,
) -> Result<(), String> {
    let within = |what: String| format!("{what}: the hook did not finish within {limit:?}");
    if let Some(e) = &handler.exec {
        let cmd: Vec<String> = e.command.clone().unwrap_or_default();
        let args: Vec<&str> = cmd.iter().map(String::as_str).collect();
        let fail = |err: String, output: &[u8]| {
            format!(
                "Exec lifecycle hook ({cmd:?}) for Container {:?} in Pod {:?} failed - error: {err}, message: {:?}",
                c.name,
                pod_ref(pod),
                String::from_utf8_lossy(output)
            )
        };
        return match tokio::time::timeout(
            limit + Duration::from_secs(1),
            target.cri.exec_sync(target.container_id, &args, limit),
        )
        .await
        {
            Ok(Ok(out)) if out.exit_code == 0 => Ok(()),
            Ok(Ok(out)) => {
                let mut output = out.stdout;
                output.extend_from_slice(&out.stderr);
                Err(fail(
                    format!("command '{}' exited with {}", cmd.join(" "), out.exit_code),
                    &output,
                ))
            }
            Ok(Err(e)) => Err(fail(e.to_string(), &[])),
            Err(_) => Err(within(fail("timed out".into(), &[]))),
        };
    }
    if let Some(h) = &handler.http_get {
        let path = h.path.clone().unwrap_or_default();
        let fail = |err: String| {
            format!(
                "HTTP lifecycle hook ({path}) for Container {:?} in Pod {:?} failed - error: {err}",
                c.name,
                pod_ref(pod)
            )
        };
        let Action::Http {
            scheme,
            host,
            port,
            path: p,
            headers,
        } = prober::http_action(h, c).map_err(&fail)?
        else {
            return Err(fail("not an HTTP action".into()));
        };
        let host = if host.is_empty() {
            target.pod_ip.to_string()
        } else {
            host
        };
        if host.is_empty() {
            return Err(fail("failed to find networking container".into()));
        }
        let tls = scheme.eq_ignore_ascii_case("HTTPS");
        return match tokio::time::timeout(
            limit,
            prober::http_get(tls, &host, port, &p, &headers, LIFECYCLE_AGENT),
        )
        .await
        {
            Ok(Ok(_status)) => Ok(()),
            Ok(Err(e)) => Err(fail(e)),
            Err(_) => Err(within(fail("timed out".into()))),
        };
    }
    if let Some(s) = &handler.sleep {
        let secs = Duration::from_secs(s.seconds.max(0) as u64);
        if secs > limit {
            tokio::time::sleep(limit).await;
            return Err(format!(
                "Sleep lifecycle hook ({}) for Container {:?} in Pod {:?} failed - error: container terminated before sleep hook finished",
                s.seconds,
                c.name,
                pod_ref(pod)
            ));
        }
        tokio::time::sleep(secs).await;
        return Ok(());
    }
    Err("Cannot run handler: invalid handler".into())
}

/// The grace left for `StopContainer` after a `preStop` hook that took
/// `spent` of `grace` (at least [`MIN_STOP_GRACE`]).
pub fn stop_grace_after(grace: Duration, spent: Duration) -> Duration {
    grace.saturating_sub(spent).max(MIN_STOP_GRACE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn container(lifecycle: serde_json::Value) -> Container {
        serde_json::from_value(json!({"name": "c", "lifecycle": lifecycle})).unwrap()
    }

    #[test]
    fn hooks_are_found_by_kind() {
        let c = container(json!({"postStart": {"sleep": {"seconds": 1}}}));
        assert!(Hook::PostStart.of(&c).is_some());
        assert!(Hook::PreStop.of(&c).is_none());
        assert!(Hook::PreStop.of(&container(json!(null))).is_none());
    }

    #[test]
    fn the_stop_gets_what_the_hook_left_but_at_least_two_seconds() {
        let s = Duration::from_secs;
        assert_eq!(stop_grace_after(s(30), s(10)), s(20));
        assert_eq!(stop_grace_after(s(30), s(29)), s(2));
        assert_eq!(stop_grace_after(s(5), s(50)), s(2));
    }

    #[tokio::test]
    async fn http_hooks_succeed_on_any_response_and_fail_on_transport_errors() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = l.accept().await.unwrap();
                let mut buf = vec![0u8; 4096];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let _ = tx.send(String::from_utf8_lossy(&buf[..n]).into_owned());
                let _ = s
                    .write_all(b"HTTP/1.1 500 Oops\r\nContent-Length: 0\r\n\r\n")
                    .await;
            }
        });
        let pod: Pod = serde_json::from_value(
            json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u"}}),
        )
        .unwrap();
        let c = container(
            json!({"postStart": {"httpGet": {"path": "/echo?msg=poststart", "port": port}}}),
        );
        // A CRI client is not needed for HTTP hooks; any endpoint will do.
        let cri = CriClient::lazy("unix:///nonexistent.sock").unwrap();
        let target = HookTarget {
            cri: &cri,
            container_id: "x",
            pod_ip: "127.0.0.1",
        };
        let h = Hook::PostStart.of(&c).unwrap();
        run(&target, &pod, &c, h, Duration::from_secs(5))
            .await
            .expect("a 500 response is a success for a hook, as upstream");
        let req = rx.recv().await.unwrap();
        assert!(
            req.starts_with("GET /echo?msg=poststart HTTP/1.1\r\n"),
            "{req}"
        );
        assert!(req.contains("User-Agent: kube-lifecycle/1.37\r\n"), "{req}");

        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let c = container(json!({"preStop": {"httpGet": {"path": "/x", "port": closed}}}));
        let e = run(
            &target,
            &pod,
            &c,
            Hook::PreStop.of(&c).unwrap(),
            Duration::from_secs(5),
        )
        .await
        .unwrap_err();
        assert!(
            e.starts_with(
                "HTTP lifecycle hook (/x) for Container \"c\" in Pod \"p_ns(u)\" failed - error: "
            ),
            "{e}"
        );
    }

    #[tokio::test]
    async fn a_sleep_longer_than_the_grace_is_cut_short() {
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p"}})).unwrap();
        let c = container(json!({"preStop": {"sleep": {"seconds": 3600}}}));
        let cri = CriClient::lazy("unix:///nonexistent.sock").unwrap();
        let target = HookTarget {
            cri: &cri,
            container_id: "x",
            pod_ip: "",
        };
        let t = std::time::Instant::now();
        let e = run(
            &target,
            &pod,
            &c,
            Hook::PreStop.of(&c).unwrap(),
            Duration::from_millis(50),
        )
        .await
        .unwrap_err();
        assert!(t.elapsed() < Duration::from_secs(5));
        assert!(
            e.contains("container terminated before sleep hook finished"),
            "{e}"
        );
    }
}
