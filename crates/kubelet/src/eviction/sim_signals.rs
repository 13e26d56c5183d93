//! Signals for `--runtime sim` (`--sim-signals FILE`): the JSON file
//! (format in the [`crate::eviction`] module docs) parsed into a
//! [`Snapshot`] ([`parse_sim_signals`]) and read every round
//! ([`SimSource`]).
//!
//! Upstream: none; it stands in for the stats the summary provider
//! (`pkg/kubelet/server/stats`) gives upstream's eviction manager.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use rkube_model::Quantity;
use serde_json::Value;

use super::signals::{
    pod_key, Observation, Observations, PodUsage, Resource, Signal, SignalSource, Snapshot,
};
use crate::node::NodeDesc;
use crate::pods::worker::ActivePods;
use crate::BoxFuture;

/// Signals for `--runtime sim` from a JSON file read every round (format
/// in the [`crate::eviction`] module docs).
pub struct SimSignals {
    /// The file (`--sim-signals`).
    pub path: PathBuf,
}

fn quantity_of(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => Quantity::parse(s).ok().map(|q| q.value()),
        _ => None,
    }
}

fn node_capacity(desc: &NodeDesc, s: Signal) -> Option<i64> {
    let key = match s.resource() {
        Resource::Memory => "memory",
        Resource::EphemeralStorage => "ephemeral-storage",
        _ => return None,
    };
    desc.capacity.get(key).map(|q| q.value())
}

/// Parses a sim signals document for `nodes` (errors name the field).
pub fn parse_sim_signals(doc: &Value, nodes: &[Arc<NodeDesc>]) -> Result<Snapshot, String> {
    let obj = doc.as_object().ok_or("not a JSON object")?;
    let signals = |v: Option<&Value>, what: &str| -> Result<Vec<(Signal, Value)>, String> {
        let Some(v) = v else { return Ok(Vec::new()) };
        let m = v.as_object().ok_or(format!("{what}: not an object"))?;
        m.iter()
            .map(|(k, v)| {
                Signal::parse(k)
                    .map(|s| (s, v.clone()))
                    .ok_or(format!("{what}: unknown signal {k:?}"))
            })
            .collect()
    };
    let common = signals(obj.get("signals"), "signals")?;
    let per_node: HashMap<String, Vec<(Signal, Value)>> = match obj.get("nodes") {
        None => HashMap::new(),
        Some(v) => v
            .as_object()
            .ok_or("nodes: not an object")?
            .iter()
            .map(|(n, v)| Ok((n.clone(), signals(Some(v), &format!("nodes.{n}"))?)))
            .collect::<Result<_, String>>()?,
    };
    let mut snap = Snapshot::default();
    for desc in nodes {
        let mut obs = Observations::new();
        let own = per_node.get(&desc.name).map(Vec::as_slice).unwrap_or(&[]);
        for (s, v) in common.iter().chain(own) {
            let (available, capacity) = match v {
                Value::Object(o) => (
                    o.get("available").and_then(quantity_of),
                    o.get("capacity").and_then(quantity_of),
                ),
                v => (quantity_of(v), None),
            };
            let available =
                available.ok_or(format!("{}: invalid available amount {v}", s.name()))?;
            let capacity = capacity
                .or_else(|| node_capacity(desc, *s))
                .unwrap_or(available);
            obs.insert(
                *s,
                Observation {
                    available,
                    capacity,
                },
            );
        }
        snap.nodes.insert(desc.name.clone(), obs);
    }
    if let Some(pods) = obj.get("pods") {
        for (key, v) in pods.as_object().ok_or("pods: not an object")? {
            let o = v.as_object().ok_or(format!("pods.{key}: not an object"))?;
            let amount = |k: &str| -> Result<Option<i64>, String> {
                o.get(k)
                    .map(|v| quantity_of(v).ok_or(format!("pods.{key}.{k}: invalid amount {v}")))
                    .transpose()
            };
            // Attributed to the first container; the container name is
            // filled in when the pod is known (see `attribute`).
            let mut u = PodUsage::default();
            if let Some(m) = amount("memory")? {
                u.memory.insert(String::new(), m);
            }
            if let Some(d) = amount("ephemeral-storage")? {
                u.ephemeral_storage.insert(String::new(), d);
            }
            u.pids = amount("pids")?;
            snap.pods.insert(key.clone(), u);
        }
    }
    Ok(snap)
}

/// Gives the pod-level sim usage (key `""`) to the pod's first container.
fn attribute(snap: &mut Snapshot, active: &ActivePods, nodes: &[Arc<NodeDesc>]) {
    for desc in nodes {
        for a in active.on_node(&desc.name) {
            let Some(u) = snap.pods.get_mut(&pod_key(&a.pod)) else {
                continue;
            };
            let Some(first) = a.pod.spec.as_ref().and_then(|s| s.containers.first()) else {
                continue;
            };
            for m in [&mut u.memory, &mut u.ephemeral_storage] {
                if let Some(v) = m.remove("") {
                    m.insert(first.name.clone(), v);
                }
            }
        }
    }
}

/// [`SimSignals`] with the active pods (to name containers in messages).
pub struct SimSource {
    /// The file.
    pub signals: SimSignals,
    /// The active pods.
    pub active: Arc<ActivePods>,
}

impl SignalSource for SimSource {
    fn observe<'a>(&'a self, nodes: &'a [Arc<NodeDesc>]) -> BoxFuture<'a, Snapshot> {
        Box::pin(async move {
            let path = &self.signals.path;
            let text = match tokio::fs::read_to_string(path).await {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Snapshot::default(),
                Err(e) => {
                    tracing::warn!(file = %path.display(), error = %e, "reading sim signals");
                    return Snapshot::default();
                }
            };
            let parsed = serde_json::from_str::<Value>(&text)
                .map_err(|e| e.to_string())
                .and_then(|doc| parse_sim_signals(&doc, nodes));
            match parsed {
                Ok(mut snap) => {
                    attribute(&mut snap, &self.active, nodes);
                    snap
                }
                Err(e) => {
                    tracing::warn!(file = %path.display(), error = %e, "invalid sim signals; ignored");
                    Snapshot::default()
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const MI: i64 = 1 << 20;
    const GI: i64 = 1 << 30;

    fn desc(name: &str) -> Arc<NodeDesc> {
        Arc::new(NodeDesc {
            name: name.into(),
            labels: Default::default(),
            taints: Vec::new(),
            capacity: [("memory".to_string(), Quantity::from_units(GI))].into(),
            allocatable: Default::default(),
            ip: "10.0.0.1".into(),
            pod_cidr: String::new(),
            provider_id: String::new(),
            node_info: Default::default(),
            port: 10250,
        })
    }

    #[test]
    fn sim_signals_file() {
        let nodes = [desc("a"), desc("b")];
        let doc = json!({
            "signals": {"memory.available": "50Mi",
                        "nodefs.available": {"available": "1Gi", "capacity": "100Gi"}},
            "nodes": {"b": {"memory.available": "2Gi", "pid.available": 10}},
            "pods": {"default/web": {"memory": "300Mi", "pids": 12}}
        });
        let s = parse_sim_signals(&doc, &nodes).unwrap();
        let a = &s.nodes["a"];
        assert_eq!(
            a[&Signal::MemoryAvailable],
            Observation {
                available: 50 * MI,
                capacity: GI
            }
        );
        assert_eq!(a[&Signal::NodeFsAvailable].capacity, 100 * GI);
        assert!(!a.contains_key(&Signal::PidAvailable));
        let b = &s.nodes["b"];
        assert_eq!(b[&Signal::MemoryAvailable].available, 2 * GI);
        assert_eq!(
            b[&Signal::PidAvailable],
            Observation {
                available: 10,
                capacity: 10
            }
        );
        let web = &s.pods["default/web"];
        assert_eq!(web.total(Resource::Memory), Some(300 * MI));
        assert_eq!(web.total(Resource::Pids), Some(12));
        for bad in [
            json!([]),
            json!({"signals": {"memory.free": "1Gi"}}),
            json!({"signals": {"memory.available": "lots"}}),
            json!({"pods": {"default/x": {"memory": "?"}}}),
        ] {
            assert!(parse_sim_signals(&bad, &nodes).is_err(), "{bad}");
        }
    }
}
