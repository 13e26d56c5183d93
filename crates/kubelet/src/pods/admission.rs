//! The kubelet's own admission of the pods bound to its node (upstream's
//! predicate admit handler, `pkg/kubelet/lifecycle/predicate.go`): before
//! its first sync a pod is checked against the node as the kubelet sees it
//! and the pods it already admitted, one pod at a time, with the
//! scheduler's general predicates:
//!
//! * resources: `Too many pods`, then cpu, memory, ephemeral-storage and
//!   the extended resources the node has (`OutOfcpu`, `OutOfmemory`, …,
//!   `Node didn't have enough resource: cpu, requested: 2000, used: 500,
//!   capacity: 1900`);
//! * `nodeSelector` and required node affinity (`NodeAffinity`; the Node is
//!   read again from the API server once before a pod is refused for its
//!   labels alone, as upstream does);
//! * `spec.nodeName` (`NodeName`), host ports (`NodePorts`);
//! * untolerated `NoExecute` taints (`TaintToleration`; not for static
//!   pods).
//!
//! The first failure names the rejection, as upstream's. A critical pod
//! refused for resources alone is admitted: upstream would make room by
//! evicting lower-priority pods, which rkube does not do yet.
//!
//! Before these, the eviction manager's check (upstream's
//! `managerImpl.Admit`): while the node reports a pressure condition, a
//! pod that is not critical is refused (`Evicted`, `The node had
//! condition: [DiskPressure]. `), except under memory pressure alone a pod
//! that is not BestEffort, or a BestEffort one tolerating the
//! `node.kubernetes.io/memory-pressure:NoSchedule` taint.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::{Api, Client, ResourceExt};
use rkube_model::convert::{self, PriorityClasses};
use rkube_model::objects::{Node as MNode, Pod as MPod, TaintEffect};
use rkube_model::resources::{is_extended_resource_name, Resources};

use crate::node::capacity::NodeBoard;
use crate::node::pressure::PressureBoard;
use crate::node::NodeDesc;
use crate::pod::{is_critical, is_static};
use crate::runtime::Rejection;

/// Why a predicate refused a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Not enough of `resource` left.
    Insufficient {
        /// `cpu`, `memory`, `pods`, an extended resource.
        resource: String,
        /// What the pod asks (millicores for cpu).
        requested: i64,
        /// What the admitted pods take.
        used: i64,
        /// The node's allocatable.
        capacity: i64,
    },
    /// Another predicate (`NodeAffinity`, `NodeName`, `NodePorts`,
    /// `TaintToleration`) with its reason.
    Predicate {
        /// The predicate.
        name: &'static str,
        /// Its reason.
        desc: &'static str,
    },
}

/// The reason of the NodeAffinity predicate.
pub const NODE_AFFINITY_REASON: &str = "node(s) didn't match Pod's node affinity/selector";

impl Failure {
    /// Upstream's rejection for this failure.
    pub fn rejection(&self) -> Rejection {
        match self {
            Failure::Insufficient {
                resource,
                requested,
                used,
                capacity,
            } => Rejection {
                reason: format!("OutOf{resource}"),
                message: format!(
                    "Node didn't have enough resource: {resource}, requested: {requested}, used: {used}, capacity: {capacity}"
                ),
            },
            Failure::Predicate { name, desc } => Rejection {
                reason: name.to_string(),
                message: format!("Predicate {name} failed: {desc}"),
            },
        }
    }

    fn is_affinity(&self) -> bool {
        matches!(
            self,
            Failure::Predicate {
                name: "NodeAffinity",
                ..
            }
        )
    }
}

/// `pod` without the extended resources its containers get through DRA
/// (the scheduler mapped them to requests of a claim,
/// `status.extendedResourceClaimStatus`): the node's capacity does not
/// count them (upstream's `removeMissingExtendedResources`, for
/// `DRAExtendedResource`).
pub fn without_dra_extended_resources(pod: &Pod) -> std::borrow::Cow<'_, Pod> {
    if crate::dra::claims::extended_claim(pod).is_none() {
        return std::borrow::Cow::Borrowed(pod);
    }
    let dra_name = |n: &str| {
        is_extended_resource_name(n) || n.starts_with("deviceclass.resource.kubernetes.io/")
    };
    let mut out = pod.clone();
    if let Some(spec) = out.spec.as_mut() {
        for c in spec
            .containers
            .iter_mut()
            .chain(spec.init_containers.iter_mut().flatten())
        {
            let backed = |n: &String| {
                dra_name(n) && crate::dra::claims::is_dra_extended_resource(pod, &c.name, n)
            };
            let drop: Vec<String> = c
                .resources
                .iter()
                .flat_map(|r| r.requests.iter().chain(r.limits.iter()).flatten())
                .map(|(n, _)| n.clone())
                .filter(|n| backed(n))
                .collect();
            if let Some(r) = c.resources.as_mut() {
                for n in &drop {
                    r.requests.as_mut().map(|m| m.remove(n));
                    r.limits.as_mut().map(|m| m.remove(n));
                }
            }
        }
    }
    std::borrow::Cow::Owned(out)
}

/// The resources `others` request.
fn used(others: &[&MPod]) -> Resources {
    let mut r = Resources::default();
    for o in others {
        r.add(&o.requests);
    }
    r
}

fn resource_failures(pod: &MPod, node: &MNode, others: &[&MPod]) -> Vec<Failure> {
    let mut out = Vec::new();
    let alloc = &node.allocatable;
    let used = used(others);
    if others.len() as i64 + 1 > alloc.allowed_pod_number {
        out.push(Failure::Insufficient {
            resource: "pods".into(),
            requested: 1,
            used: others.len() as i64,
            capacity: alloc.allowed_pod_number,
        });
    }
    let req = &pod.requests;
    let mut check = |resource: &str, requested: i64, used: i64, capacity: i64| {
        if requested > 0 && requested > capacity - used {
            out.push(Failure::Insufficient {
                resource: resource.into(),
                requested,
                used,
                capacity,
            });
        }
    };
    check("cpu", req.milli_cpu, used.milli_cpu, alloc.milli_cpu);
    check("memory", req.memory, used.memory, alloc.memory);
    let eph = "ephemeral-storage";
    check(
        eph,
        req.ephemeral_storage,
        used.ephemeral_storage,
        alloc.ephemeral_storage,
    );
    for (name, &q) in &req.scalar {
        // Extended resources the node does not have are cluster-level
        // (or DRA-backed): not the kubelet's to check.
        if is_extended_resource_name(name) && !alloc.scalar.contains_key(name) {
            continue;
        }
        check(name, q, used.scalar(name), alloc.scalar(name));
    }
    out
}

fn affinity_matches(pod: &MPod, node: &MNode) -> bool {
    let selector = pod
        .node_selector
        .iter()
        .all(|(k, v)| node.labels.get(k) == Some(v));
    let required = pod
        .node_affinity
        .as_ref()
        .and_then(|a| a.required.as_ref())
        .is_none_or(|s| s.matches(&node.name, &node.labels));
    selector && required
}

fn ports_conflict(pod: &MPod, others: &[&MPod]) -> bool {
    let wild = |ip: &str| ip.is_empty() || ip == "0.0.0.0";
    pod.host_ports().any(|p| {
        others.iter().flat_map(|o| o.host_ports()).any(|q| {
            p.port == q.port
                && p.protocol == q.protocol
                && (p.host_ip == q.host_ip || wild(&p.host_ip) || wild(&q.host_ip))
        })
    })
}

/// Upstream's general predicates of `pod` on `node` beside `others` (the
/// pods admitted before it), every failure in upstream's order.
pub fn general_filter(
    pod: &MPod,
    node: &MNode,
    others: &[&MPod],
    static_pod: bool,
) -> Vec<Failure> {
    let mut out = resource_failures(pod, node, others);
    if !affinity_matches(pod, node) {
        out.push(Failure::Predicate {
            name: "NodeAffinity",
            desc: NODE_AFFINITY_REASON,
        });
    }
    if !pod.node_name.is_empty() && pod.node_name != node.name {
        out.push(Failure::Predicate {
            name: "NodeName",
            desc: "node(s) didn't match the requested node name",
        });
    }
    if ports_conflict(pod, others) {
        out.push(Failure::Predicate {
            name: "NodePorts",
            desc: "node(s) didn't have free ports for the requested pod ports",
        });
    }
    let untolerated = node
        .taints
        .iter()
        .filter(|t| t.effect == TaintEffect::NoExecute)
        .any(|t| !pod.tolerations.iter().any(|tol| tol.tolerates(t)));
    if !static_pod && untolerated {
        out.push(Failure::Predicate {
            name: "TaintToleration",
            desc: "node(s) had taints that the pod didn't tolerate",
        });
    }
    out
}

/// The pods admitted on each node of the process, and how the node looks.
pub struct Admission {
    client: Client,
    board: Arc<NodeBoard>,
    /// Whether the node is shutting down (the shutdown manager's admit
    /// handler, after the resource checks as upstream orders them).
    pressure: Arc<PressureBoard>,
    descs: HashMap<String, Arc<NodeDesc>>,
    /// Node → uid → the admitted pod.
    admitted: Mutex<HashMap<String, HashMap<String, MPod>>>,
    /// Held through a whole admission: pods are admitted one at a time.
    gate: tokio::sync::Mutex<()>,
    /// The pods whose in-place resize did not fit.
    deferred: Mutex<Deferred>,
}

/// The pods whose in-place resize was deferred for want of room: tried
/// again as soon as another pod gives its resources back, as upstream's
/// kubelet retries its pending resizes when pods are removed or terminate
/// (not only at each pod's periodic resync).
#[derive(Debug, Default)]
pub struct Deferred(BTreeSet<String>);

impl Deferred {
    /// `uid`'s resize did not fit (`true`) or was accepted (`false`).
    pub fn set(&mut self, uid: &str, deferred: bool) {
        match deferred {
            true => self.0.insert(uid.to_string()),
            false => self.0.remove(uid),
        };
    }

    /// The pod `uid` left; `freed`: it held resources until now. The pods
    /// to try again (none when nothing was freed).
    pub fn released(&mut self, uid: &str, freed: bool) -> Vec<String> {
        self.0.remove(uid);
        match freed {
            true => self.0.iter().cloned().collect(),
            false => Vec::new(),
        }
    }
}

fn node_of(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default()
}

/// The eviction manager's refusal of `pod` on a node under `pressure`
/// (upstream's `managerImpl.Admit`), if it refuses it.
pub fn under_pressure(
    pod: &Pod,
    mpod: &MPod,
    pressure: crate::node::pressure::Pressure,
) -> Option<Rejection> {
    let conditions: Vec<&str> = [
        (pressure.memory, "MemoryPressure"),
        (pressure.disk, "DiskPressure"),
        (pressure.pid, "PIDPressure"),
    ]
    .into_iter()
    .filter_map(|(on, c)| on.then_some(c))
    .collect();
    if conditions.is_empty() || is_critical(pod) {
        return None;
    }
    if conditions == ["MemoryPressure"] {
        use crate::runtime::cri::spec::resources::{qos_class, QosClass};
        let taint = rkube_model::objects::Taint {
            key: "node.kubernetes.io/memory-pressure".into(),
            value: String::new(),
            effect: TaintEffect::NoSchedule,
        };
        if qos_class(pod) != QosClass::BestEffort
            || mpod.tolerations.iter().any(|t| t.tolerates(&taint))
        {
            return None;
        }
    }
    Some(Rejection {
        reason: "Evicted".into(),
        message: format!("The node had condition: [{}]. ", conditions.join(" ")),
    })
}

impl Admission {
    /// Admission for the nodes `descs`, reading their Nodes from `board`
    /// (and once more from the API server through `client` before an
    /// affinity refusal).
    pub fn new(
        client: Client,
        board: Arc<NodeBoard>,
        pressure: Arc<PressureBoard>,
        descs: &[Arc<NodeDesc>],
    ) -> Admission {
        Admission {
            client,
            board,
            pressure,
            descs: descs.iter().map(|d| (d.name.clone(), d.clone())).collect(),
            admitted: Mutex::new(HashMap::new()),
            gate: tokio::sync::Mutex::new(()),
            deferred: Mutex::new(Deferred::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, HashMap<String, MPod>>> {
        self.admitted.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The Node as the kubelet knows it: from the watch, else as it
    /// registers it.
    fn node(&self, name: &str) -> Option<Node> {
        if let Some(n) = self.board.get(name) {
            return Some(n.to_node());
        }
        self.descs.get(name).map(|d| d.to_node())
    }

    /// Checks `pod` and, when it fits, counts it on its node. A pod the
    /// model cannot read is admitted (the API server validated it).
    pub async fn admit(&self, pod: &Pod) -> Result<(), Rejection> {
        let _one_at_a_time = self.gate.lock().await;
        let name = node_of(pod);
        let static_pod = is_static(pod);
        let checked = without_dra_extended_resources(pod);
        let Ok(mpod) = convert::pod(&checked, 0, &PriorityClasses::default()) else {
            self.count(pod);
            return Ok(());
        };
        if let Some(refused) = under_pressure(pod, &mpod, self.pressure.get(&name)) {
            return Err(refused);
        }
        let Some(node) = self.node(&name) else {
            return Err(Rejection {
                reason: "InvalidNodeInfo".into(),
                message: "Kubelet cannot get node info.".into(),
            });
        };
        let mut failures = self.check(&mpod, &node, static_pod);
        if !failures.is_empty() && failures.iter().all(Failure::is_affinity) {
            // Refused for its labels alone: read the Node again.
            if let Ok(fresh) = Api::<Node>::all(self.client.clone()).get(&name).await {
                failures = self.check(&mpod, &fresh, static_pod);
            }
        }
        let resources_only = failures
            .iter()
            .all(|f| matches!(f, Failure::Insufficient { .. }));
        if !failures.is_empty() && resources_only && is_critical(pod) {
            tracing::warn!(pod = %pod.name_any(), reason = %failures[0].rejection().message, "admitting a critical pod beyond the node's resources (no preemption)");
            failures.clear();
        }
        match failures.first() {
            Some(f) => Err(f.rejection()),
            None if self.pressure.shutdown_error().is_some() => Err(Rejection {
                reason: "NodeShutdown".into(),
                message: "Pod was rejected as the node is shutting down.".into(),
            }),
            None => {
                self.lock()
                    .entry(name)
                    .or_default()
                    .insert(mpod.uid.clone(), mpod);
                Ok(())
            }
        }
    }

    /// The failures of `pod` on `node` beside the pods admitted there.
    fn check(&self, pod: &MPod, node: &Node, static_pod: bool) -> Vec<Failure> {
        let Ok(mnode) = convert::node(node) else {
            return Vec::new();
        };
        let admitted = self.lock();
        let others: Vec<&MPod> = admitted
            .get(&mnode.name)
            .into_iter()
            .flat_map(|m| m.values())
            .filter(|o| o.uid != pod.uid)
            .collect();
        general_filter(pod, &mnode, &others, static_pod)
    }

    /// An in-place resize of an admitted pod: `desired` (its new
    /// resources) is checked against the node and the other pods as at
    /// admission and, when it fits, counted in place of what it had.
    /// Upstream defers a resize that does not fit (the scheduler may make
    /// room): the rejection says why.
    pub async fn resize(&self, desired: &Pod) -> Result<(), Rejection> {
        let _one_at_a_time = self.gate.lock().await;
        let verdict = self.fits(desired);
        self.deferred
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .set(&desired.uid().unwrap_or_default(), verdict.is_err());
        verdict
    }

    fn fits(&self, desired: &Pod) -> Result<(), Rejection> {
        let name = node_of(desired);
        let Ok(mpod) = convert::pod(desired, 0, &PriorityClasses::default()) else {
            return Ok(());
        };
        let Some(node) = self.node(&name) else {
            return Err(Rejection {
                reason: "InvalidNodeInfo".into(),
                message: "Kubelet cannot get node info.".into(),
            });
        };
        let failures = self.check(&mpod, &node, is_static(desired));
        if let Some(f) = failures.first() {
            return Err(f.rejection());
        }
        self.lock()
            .entry(name)
            .or_default()
            .insert(mpod.uid.clone(), mpod);
        Ok(())
    }

    /// Counts a pod admitted before (running when the kubelet started).
    pub fn count(&self, pod: &Pod) {
        let counted = without_dra_extended_resources(pod);
        if let Ok(m) = convert::pod(&counted, 0, &PriorityClasses::default()) {
            self.lock()
                .entry(node_of(pod))
                .or_default()
                .insert(m.uid.clone(), m);
        }
    }

    /// The pod `uid` no longer holds resources (terminal, or gone).
    /// Returns the pods whose deferred resize may fit now ([`Deferred`]).
    pub fn release(&self, uid: &str) -> Vec<String> {
        let mut freed = false;
        for pods in self.lock().values_mut() {
            freed |= pods.remove(uid).is_some();
        }
        self.deferred
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .released(uid, freed)
    }
}

#[cfg(test)]
#[path = "admission_tests.rs"]
mod tests;
