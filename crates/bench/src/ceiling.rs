//! `hack/bench live --ceiling`: the most bindings per second the API server
//! takes, measured with no scheduler at all.
//!
//! Where each pending pod goes is decided before the run, by rkube's
//! simulator on the same workload ([`placements`]). `rkube-bench bind`
//! ([`bind`]) is then started in place of a scheduler: a process that makes
//! the scheduler's client (rkube-daemon's HTTP/2 connection, the scheduler's
//! kubeconfig and so its API Priority and Fairness flow), and POSTs one
//! Binding per pod through the same client-side token bucket (QPS/burst)
//! the schedulers run with. No informers, no cache sync, no scoring: its
//! wall time, measured by the same watch as theirs, bounds what any
//! scheduler can reach with that client and API server.
//!
//! Every scheduler also writes one `Scheduled` Event per pod (upstream's
//! events broadcaster, rkube's [`rkube_scheduler::events`]). With
//! `--events` the binder does too, through rkube's event writer with its
//! own token bucket at the same QPS/burst (as both schedulers' event
//! clients): the most a scheduler that records its bindings can reach.
//! Each pod's Event is sent together with its binding, from the same task,
//! so that Events and bindings reach the API server interleaved, as they
//! do from a scheduler binding pods one after another. Queued behind a
//! burst of 5,000 bindings (a first version queued them as each binding
//! returned, a second through the scheduler's event queue as each binding
//! was sent), most Events were written after the last binding and cost the
//! measured window little: the API server's profile showed 0.17 s of
//! Event creation per 1 s of bindings in that window, against 0.63 s in a
//! scheduler's run.

use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PostParams;
use kube::Api;
use rkube_daemon::ratelimit::RateLimiter;
use rkube_scheduler::events::{self, Pending};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One pod and the node it is bound to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// Namespace of the pod.
    pub namespace: String,
    /// Name of the pod.
    pub name: String,
    /// The node.
    pub node: String,
}

/// Where rkube's simulator places each pending pod of a workload's cluster
/// (default configuration, seed 0); pods it leaves pending are left out.
pub fn placements(cluster: &Value) -> Result<Vec<Placement>> {
    let text = serde_json::to_string(cluster)?;
    let objects = rkube_model::load::parse_documents("workload.json", &text)?;
    let cluster = rkube_model::load::build(&objects, &mut |_| Ok(false))?;
    let cfg = rkube_sim::load::load_config(None)?;
    let sim = rkube_sim::simulate(&cluster, &cfg, &rkube_sim::SimulateOptions::default())?;
    let mut out = Vec::with_capacity(sim.placements.len());
    for p in sim.placements.iter().filter(|p| !p.evicted) {
        let Some(node) = &p.node else { continue };
        let Some((namespace, name)) = p.pod.split_once('/') else {
            bail!("simulator placement {:?} is not namespace/name", p.pod);
        };
        out.push(Placement {
            namespace: namespace.into(),
            name: name.into(),
            node: node.clone(),
        });
    }
    Ok(out)
}

/// Options of `rkube-bench bind`.
#[derive(Debug, Clone)]
pub struct BindOptions {
    /// The scheduler's kubeconfig.
    pub kubeconfig: std::path::PathBuf,
    /// A JSON array of [`Placement`]s.
    pub placements: std::path::PathBuf,
    /// Client QPS.
    pub qps: f32,
    /// Client burst.
    pub burst: i32,
    /// Also write a `Scheduled` Event per binding.
    pub events: bool,
}

/// Reads a placements file written by [`write_placements`].
pub fn read_placements(path: &Path) -> Result<Vec<Placement>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text)
        .with_context(|| format!("{}: not a placements file", path.display()))
}

/// Writes `placements` for [`read_placements`].
pub fn write_placements(path: &Path, placements: &[Placement]) -> Result<()> {
    std::fs::write(path, serde_json::to_vec(placements)?)
        .with_context(|| format!("writing {}", path.display()))
}

fn binding(p: &Placement) -> Binding {
    Binding {
        metadata: ObjectMeta {
            name: Some(p.name.clone()),
            namespace: Some(p.namespace.clone()),
            ..Default::default()
        },
        target: ObjectReference {
            kind: Some("Node".into()),
            name: Some(p.node.clone()),
            ..Default::default()
        },
    }
}

/// The `Scheduled` Event a scheduler records for `p`'s binding.
fn scheduled(p: &Placement) -> Pending {
    Pending {
        scheduler_name: "default-scheduler".into(),
        regarding: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some(p.namespace.clone()),
            name: Some(p.name.clone()),
            ..Default::default()
        },
        related: None,
        warning: false,
        reason: "Scheduled".into(),
        action: "Binding".into(),
        note: format!(
            "Successfully assigned {}/{} to {}",
            p.namespace, p.name, p.node
        ),
    }
}

/// Binds every pod of the placements file, in order, one rate-limit token
/// each; every binding runs as its own task once it has its token (as the
/// schedulers' binding cycles do); with `events`, the same task writes
/// the pod's `Scheduled` Event at the same moment. Returns how many pods
/// were bound (and their Events written); errors are counted, not retried.
pub async fn bind(o: &BindOptions) -> Result<(usize, usize)> {
    let placements = read_placements(&o.placements)?;
    let client = rkube_daemon::from_kubeconfig(Some(&o.kubeconfig)).await?;
    let limiter = RateLimiter::new(o.qps, o.burst);
    // The event client's own token bucket, as a scheduler's.
    let event_limiter = o.events.then(|| Arc::new(RateLimiter::new(o.qps, o.burst)));
    let mut tasks = tokio::task::JoinSet::new();
    for p in placements {
        limiter.acquire().await;
        let api: Api<Pod> = Api::namespaced(client.clone(), &p.namespace);
        let (client, event_limiter) = (client.clone(), event_limiter.clone());
        tasks.spawn(async move {
            let (pp, b) = (PostParams::default(), binding(&p));
            let bind = api.create_subresource::<_, Value>("binding", &p.name, &pp, &b);
            let event = async {
                match &event_limiter {
                    Some(l) => events::create_now(client, "rkube-bench", l, scheduled(&p))
                        .await
                        .map_err(|e| format!("{}/{}: its event: {e}", p.namespace, p.name)),
                    None => Ok(()),
                }
            };
            let (bound, written) = tokio::join!(bind, event);
            bound.map_err(|e| format!("{}/{}: {e}", p.namespace, p.name))?;
            written
        });
    }
    let (mut ok, mut failed) = (0, 0);
    while let Some(r) = tasks.join_next().await {
        match r? {
            Ok(_) => ok += 1,
            Err(e) => {
                failed += 1;
                if failed <= 5 {
                    eprintln!("binding {e}");
                }
            }
        }
    }
    Ok((ok, failed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Workload;

    /// The ceiling binds exactly the pods the simulator places, on its
    /// nodes, and a placements file reads back the same.
    #[test]
    fn placements_are_the_simulators() {
        for name in [
            "SchedulingWithMixedChurn/20Nodes_40Pods",
            "Unschedulable/20Nodes_40Pods",
        ] {
            check_placements(name);
        }
    }

    fn check_placements(name: &str) {
        let w = Workload::parse(name).unwrap();
        let cluster = w.generate();
        let got = placements(&cluster).unwrap();
        let nodes: std::collections::HashSet<&str> = cluster["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["kind"] == "Node")
            .filter_map(|i| i["metadata"]["name"].as_str())
            .collect();
        let pending: std::collections::HashSet<String> = cluster["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["kind"] == "Pod" && !i["spec"]["nodeName"].is_string())
            .filter_map(|i| i["metadata"]["name"].as_str().map(String::from))
            .collect();
        assert_eq!(got.len(), pending.len() - w.extra_unschedulable());
        for p in &got {
            assert!(nodes.contains(p.node.as_str()), "{p:?} on an unknown node");
            assert!(pending.contains(&p.name), "{p:?} is not a pending pod");
        }
        let dir = std::env::temp_dir().join(format!(
            "rkube-ceiling-{}-{}",
            std::process::id(),
            w.pending_pods()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("placements.json");
        write_placements(&file, &got).unwrap();
        assert_eq!(read_placements(&file).unwrap(), got);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_event_is_the_one_a_scheduler_records() {
        let e = scheduled(&Placement {
            namespace: "ns".into(),
            name: "p".into(),
            node: "n1".into(),
        });
        assert_eq!(e.reason, "Scheduled");
        assert_eq!(e.action, "Binding");
        assert!(!e.warning);
        assert_eq!(e.note, "Successfully assigned ns/p to n1");
        assert_eq!(e.regarding.kind.as_deref(), Some("Pod"));
        assert_eq!(e.regarding.namespace.as_deref(), Some("ns"));
        assert_eq!(e.regarding.name.as_deref(), Some("p"));
        assert_eq!(e.scheduler_name, "default-scheduler");
    }

    #[test]
    fn a_binding_names_the_pod_and_the_node() {
        let b = binding(&Placement {
            namespace: "ns".into(),
            name: "p".into(),
            node: "n1".into(),
        });
        assert_eq!(b.metadata.name.as_deref(), Some("p"));
        assert_eq!(b.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(b.target.kind.as_deref(), Some("Node"));
        assert_eq!(b.target.name.as_deref(), Some("n1"));
    }
}
