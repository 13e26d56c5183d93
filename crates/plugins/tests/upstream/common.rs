//! Fixtures for the ports of upstream's table-driven plugin tests: pod and
//! node builders in the spirit of upstream's `st.MakePod()`/`st.MakeNode()`,
//! snapshot and node-info helpers, plugin drivers, and a collector that
//! reports every failing case (by its upstream name) at once.

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::sync::Arc;

use rkube_framework::{
    Code, CycleState, NodeInfo, NodeScore, Plugin, PreFilterResult, Snapshot, Status,
};
use rkube_model::resources::ResourceList;
use rkube_model::{
    Container, ContainerImage, HostPort, Labels, Node, NodeAffinity, Pod, Quantity, Resources,
    Taint, TaintEffect, Toleration,
};

/// `1 MiB`, upstream's `mb` in the image-locality tests.
pub const MB: i64 = 1024 * 1024;

/// A resource list from `(name, quantity)` pairs.
pub fn rl(pairs: &[(&str, &str)]) -> ResourceList {
    pairs
        .iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                Quantity::parse(v).unwrap_or_else(|e| panic!("quantity {v:?}: {e}")),
            )
        })
        .collect()
}

/// Labels from `(key, value)` pairs.
pub fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A pod builder (upstream's `st.MakePod()`).
#[derive(Default)]
pub struct PodBuilder(Pod);

/// Starts a pod.
pub fn pod() -> PodBuilder {
    PodBuilder(Pod {
        namespace: "default".into(),
        scheduler_name: "default-scheduler".into(),
        ..Default::default()
    })
}

impl PodBuilder {
    /// Name (and uid).
    pub fn name(mut self, n: &str) -> Self {
        self.0.name = n.into();
        self.0.uid = n.into();
        self
    }
    /// `spec.nodeName`.
    pub fn node(mut self, n: &str) -> Self {
        self.0.node_name = n.into();
        self
    }
    /// Adds an app container with these requests.
    pub fn req(mut self, reqs: &[(&str, &str)]) -> Self {
        let name = format!("con{}", self.0.containers.len());
        self.0.containers.push(Container {
            name,
            requests: rl(reqs),
            ..Default::default()
        });
        self
    }
    /// Adds an app container with a ready-made request list.
    pub fn req_list(mut self, requests: ResourceList) -> Self {
        let name = format!("con{}", self.0.containers.len());
        self.0.containers.push(Container {
            name,
            requests,
            ..Default::default()
        });
        self
    }
    /// Adds an app container with no requests.
    pub fn container(mut self, name: &str) -> Self {
        self.0.containers.push(Container {
            name: name.into(),
            ..Default::default()
        });
        self
    }
    /// Adds an app container running an image.
    pub fn image(mut self, image: &str) -> Self {
        let name = format!("con{}", self.0.containers.len());
        self.0.containers.push(Container {
            name,
            image: image.into(),
            ..Default::default()
        });
        self
    }
    /// Adds an init container running an image.
    pub fn init_image(mut self, image: &str) -> Self {
        let name = format!("init-con{}", self.0.init_containers.len());
        self.0.init_containers.push(Container {
            name,
            image: image.into(),
            ..Default::default()
        });
        self
    }
    /// Adds an `image` volume.
    pub fn image_volume(mut self, reference: &str) -> Self {
        self.0.image_volumes.push(reference.into());
        self
    }
    /// Adds a (non-restartable) init container with a ready-made request list.
    pub fn init_req_list(mut self, requests: ResourceList) -> Self {
        let name = format!("init-con{}", self.0.init_containers.len());
        self.0.init_containers.push(Container {
            name,
            requests,
            ..Default::default()
        });
        self
    }
    /// Adds a sidecar (restartable init container) with these requests.
    pub fn sidecar_req(mut self, reqs: &[(&str, &str)]) -> Self {
        let name = format!("sidecar-con{}", self.0.init_containers.len());
        self.0.init_containers.push(Container {
            name,
            requests: rl(reqs),
            restartable: true,
            ..Default::default()
        });
        self
    }
    /// Adds an app container using these host ports.
    pub fn container_ports(mut self, ports: Vec<HostPort>) -> Self {
        let name = format!("con{}", self.0.containers.len());
        self.0.containers.push(Container {
            name,
            host_ports: ports,
            ..Default::default()
        });
        self
    }
    /// Adds an init container using these host ports.
    pub fn init_container_ports(mut self, sidecar: bool, ports: Vec<HostPort>) -> Self {
        let name = format!("init-con{}", self.0.init_containers.len());
        self.0.init_containers.push(Container {
            name,
            host_ports: ports,
            restartable: sidecar,
            ..Default::default()
        });
        self
    }
    /// `spec.overhead`.
    pub fn overhead(mut self, pairs: &[(&str, &str)]) -> Self {
        self.0.overhead = rl(pairs);
        self
    }
    /// Pod-level `spec.resources.requests`.
    pub fn pod_requests(mut self, pairs: &[(&str, &str)]) -> Self {
        self.0.pod_requests = rl(pairs);
        self
    }
    /// `spec.nodeSelector`.
    pub fn node_selector(mut self, pairs: &[(&str, &str)]) -> Self {
        self.0.node_selector = labels(pairs);
        self
    }
    /// Node affinity.
    pub fn node_affinity(mut self, a: NodeAffinity) -> Self {
        self.0.node_affinity = Some(a);
        self
    }
    /// Tolerations.
    pub fn tolerations(mut self, t: Vec<Toleration>) -> Self {
        self.0.tolerations = t;
        self
    }
    /// Finishes the pod, computing its requests as the loader does.
    pub fn obj(mut self) -> Pod {
        if self.0.uid.is_empty() {
            self.0.uid = format!(
                "uid-{}",
                UID.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            );
        }
        rkube_model::requests::compute(&mut self.0);
        self.0
    }
}

static UID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A node builder (upstream's `st.MakeNode()`).
pub struct NodeBuilder(Node);

/// Starts a node.
pub fn node(name: &str) -> NodeBuilder {
    NodeBuilder(Node {
        name: name.into(),
        ..Default::default()
    })
}

impl NodeBuilder {
    /// `status.allocatable` as upstream's `Capacity()` wrapper sets it
    /// (`pods: 32` plus the given resources).
    pub fn capacity(mut self, pairs: &[(&str, &str)]) -> Self {
        let mut list = rl(&[("pods", "32")]);
        list.extend(rl(pairs));
        self.0.allocatable = Resources::from_list(&list);
        self
    }
    /// `status.allocatable`, exactly.
    pub fn allocatable(mut self, list: ResourceList) -> Self {
        self.0.allocatable = Resources::from_list(&list);
        self
    }
    /// Labels.
    pub fn labels(mut self, pairs: &[(&str, &str)]) -> Self {
        self.0.labels = labels(pairs);
        self
    }
    /// Taints.
    pub fn taints(mut self, t: Vec<Taint>) -> Self {
        self.0.taints = t;
        self
    }
    /// `spec.unschedulable`.
    pub fn unschedulable(mut self, u: bool) -> Self {
        self.0.unschedulable = u;
        self
    }
    /// Images: each entry is (names, size in bytes).
    pub fn images(mut self, images: &[(&[&str], i64)]) -> Self {
        self.0.images = images
            .iter()
            .map(|(names, size)| ContainerImage {
                names: names.iter().map(|s| s.to_string()).collect(),
                size_bytes: *size,
            })
            .collect();
        self
    }
    /// The node.
    pub fn obj(self) -> Node {
        self.0
    }
}

/// A taint.
pub fn taint(key: &str, value: &str, effect: TaintEffect) -> Taint {
    Taint {
        key: key.into(),
        value: value.into(),
        effect,
    }
}

/// An `Equal` toleration (the default operator).
pub fn tol_equal(key: &str, value: &str, effect: Option<TaintEffect>) -> Toleration {
    Toleration {
        key: key.into(),
        exists: false,
        value: value.into(),
        effect,
    }
}

/// An `Exists` toleration.
pub fn tol_exists(key: &str, effect: Option<TaintEffect>) -> Toleration {
    Toleration {
        key: key.into(),
        exists: true,
        value: String::new(),
        effect,
    }
}

/// A host port.
pub fn host_port(protocol: &str, ip: &str, port: i32) -> HostPort {
    HostPort {
        host_ip: ip.into(),
        protocol: protocol.into(),
        port,
    }
}

/// A node info with these pods on it (upstream's `framework.NewNodeInfo(pods...)`
/// followed by `SetNode`).
pub fn node_info(node: Node, pods: Vec<Pod>) -> NodeInfo {
    let mut ni = NodeInfo::new(Arc::new(node));
    for p in pods {
        ni.add_pod(Arc::new(p));
    }
    ni
}

/// A snapshot of nodes with the pods whose `nodeName` names one of them
/// (upstream's `cache.NewSnapshot(pods, nodes)`).
pub fn snapshot(nodes: Vec<Node>, pods: Vec<Pod>) -> Snapshot {
    let mut snap = Snapshot::new(nodes.into_iter().map(Arc::new).collect());
    for p in pods {
        if let Some(i) = snap.index_of(&p.node_name) {
            snap.assume(i, Arc::new(p));
        }
    }
    snap
}

/// A status as upstream's `fwk.NewStatus(code, reasons...)`.
pub fn status(code: Code, reasons: &[&str]) -> Status {
    Status::with_reasons(code, reasons.iter().map(|s| s.to_string()).collect())
}

/// Runs a plugin's PreFilter.
pub fn pre_filter(
    p: &dyn Plugin,
    state: &mut CycleState,
    pod: &Pod,
    snap: &Snapshot,
) -> (PreFilterResult, Status) {
    p.as_pre_filter()
        .expect("plugin has PreFilter")
        .pre_filter(state, pod, snap)
}

/// Runs a plugin's Filter.
pub fn filter(p: &dyn Plugin, state: &CycleState, pod: &Pod, ni: &NodeInfo) -> Status {
    p.as_filter()
        .expect("plugin has Filter")
        .filter(state, pod, ni)
}

/// A node-name set, as upstream's `sets.New(...)`.
pub fn names(n: &[&str]) -> BTreeSet<String> {
    n.iter().map(|s| s.to_string()).collect()
}

/// What a score run produced.
#[derive(Debug)]
pub struct ScoreRun {
    /// PreScore's status (Success when PreScore was not run).
    pub pre_score: Status,
    /// Per node: `Ok(raw)` or the Score status.
    pub raw: Vec<Result<i64, Status>>,
    /// Per node after NormalizeScore (raw when the plugin has none; 0 for errors).
    pub normalized: Vec<i64>,
}

impl ScoreRun {
    /// Raw scores, with errors as 0 (upstream's score on error).
    pub fn raw_scores(&self) -> Vec<i64> {
        self.raw.iter().map(|r| *r.as_ref().unwrap_or(&0)).collect()
    }
    /// Codes of the Score calls.
    pub fn codes(&self) -> Vec<Code> {
        self.raw
            .iter()
            .map(|r| match r {
                Ok(_) => Code::Success,
                Err(s) => s.code,
            })
            .collect()
    }
}

/// Runs (optionally) PreScore over all nodes, then Score on each node in
/// snapshot order, then NormalizeScore when the plugin has it. Score is not
/// run when PreScore does not succeed.
pub fn score(p: &dyn Plugin, pod: &Pod, snap: &Snapshot, run_pre_score: bool) -> ScoreRun {
    let mut state = CycleState::new();
    let pre_score = if run_pre_score {
        let infos: Vec<&NodeInfo> = snap.nodes.iter().collect();
        p.as_pre_score()
            .expect("plugin has PreScore")
            .pre_score(&mut state, pod, &infos, snap)
    } else {
        Status::success()
    };
    if !pre_score.is_success() {
        return ScoreRun {
            pre_score,
            raw: Vec::new(),
            normalized: Vec::new(),
        };
    }
    let sp = p.as_score().expect("plugin has Score");
    let raw: Vec<Result<i64, Status>> = snap
        .nodes
        .iter()
        .map(|n| sp.score(&state, pod, n))
        .collect();
    let mut list: Vec<NodeScore> = snap
        .nodes
        .iter()
        .zip(&raw)
        .map(|(n, r)| NodeScore {
            name: n.name().into(),
            score: *r.as_ref().unwrap_or(&0),
        })
        .collect();
    if sp.has_normalize() {
        let s = sp.normalize(&state, pod, &mut list);
        assert!(s.is_success(), "normalize failed: {s}");
    }
    ScoreRun {
        pre_score,
        raw,
        normalized: list.into_iter().map(|s| s.score).collect(),
    }
}

/// Collects mismatches per upstream case and reports them all at the end.
#[derive(Default)]
pub struct Failures(Vec<String>);

impl Failures {
    /// New collector.
    pub fn new() -> Self {
        Self::default()
    }
    /// Records a mismatch of `what` in `case` unless `got == want`.
    pub fn check<T: PartialEq + Debug>(&mut self, case: &str, what: &str, got: T, want: T) {
        if got != want {
            self.0.push(format!(
                "[{case}] {what}:\n    got:  {got:?}\n    want: {want:?}"
            ));
        }
    }
    /// Records a free-form failure.
    pub fn fail(&mut self, case: &str, msg: impl Into<String>) {
        self.0.push(format!("[{case}] {}", msg.into()));
    }
    /// Panics listing every mismatch.
    pub fn finish(self) {
        if !self.0.is_empty() {
            panic!("{} mismatch(es):\n{}", self.0.len(), self.0.join("\n"));
        }
    }
}

/// Success (upstream's nil status).
pub fn success() -> Status {
    Status::success()
}

/// Skip.
pub fn skip() -> Status {
    Status::skip()
}
