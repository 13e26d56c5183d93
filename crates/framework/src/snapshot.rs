//! The cluster as one scheduling cycle sees it: every node's [`NodeInfo`],
//! namespaces (for namespace selectors), looked up by name.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use rkube_model::dra::Dra;
use rkube_model::pod_groups::PodGroups;
use rkube_model::volumes::Volumes;
use rkube_model::workloads::WorkloadSelectors;
use rkube_model::{Cluster, Labels, Pod};

use crate::node_info::{next_generation, ImageStateSummary, NodeInfo};

/// The node infos of a snapshot: read as a slice (`snapshot.nodes[i]`,
/// `snapshot.nodes.iter()`), changed only through the snapshot's methods,
/// which log every node they change ([`Snapshot::change_log`]).
#[derive(Debug)]
pub struct Nodes(Vec<NodeInfo>);

impl std::ops::Deref for Nodes {
    type Target = [NodeInfo];
    fn deref(&self) -> &[NodeInfo] {
        &self.0
    }
}

impl<'a> IntoIterator for &'a Nodes {
    type Item = &'a NodeInfo;
    type IntoIter = std::slice::Iter<'a, NodeInfo>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

/// A snapshot of nodes and the pods placed on them.
#[derive(Debug)]
pub struct Snapshot {
    /// Nodes, in a stable order (input order).
    pub nodes: Nodes,
    /// Identifies this snapshot's change log: new for every snapshot made
    /// or cloned, and when the log is restarted.
    epoch: u64,
    /// Indices of the nodes changed through [`Snapshot::assume`],
    /// [`Snapshot::remove`] and [`Snapshot::set_node`], in order.
    log: Vec<u32>,
    index: HashMap<String, usize>,
    /// The order filter passes walk the nodes: upstream's node tree
    /// (`backend/cache/node_tree.go`), see [`node_tree_order`].
    scan: Vec<usize>,
    /// Namespace labels by namespace name.
    pub namespaces: BTreeMap<String, Labels>,
    /// Service and controller selectors (PodTopologySpread's system defaults).
    pub workloads: Arc<WorkloadSelectors>,
    /// Volumes, claims and classes, with the bindings assumed so far.
    pub volumes: Arc<Volumes>,
    /// DeviceClasses, ResourceSlices and ResourceClaims, with the
    /// allocations assumed so far; `None` when the host does not watch
    /// them (DynamicResources then refuses pods with claims).
    pub dra: Option<Arc<Dra>>,
    /// PodGroup objects, with the GenericWorkload gate on (`None` off):
    /// DefaultPreemption reads a victim's group priority and disruption
    /// mode here, as upstream reads its snapshot's PodGroup lister.
    pub pod_groups: Option<Arc<PodGroups>>,
}

impl Clone for Snapshot {
    /// A copy with the same node infos (and generations) and a change log
    /// of its own.
    fn clone(&self) -> Self {
        Snapshot {
            nodes: Nodes(self.nodes.0.clone()),
            epoch: next_generation(),
            log: Vec::new(),
            index: self.index.clone(),
            scan: self.scan.clone(),
            namespaces: self.namespaces.clone(),
            workloads: self.workloads.clone(),
            volumes: self.volumes.clone(),
            dra: self.dra.clone(),
            pod_groups: self.pod_groups.clone(),
        }
    }
}

impl Default for Snapshot {
    fn default() -> Self {
        Snapshot::new(Vec::new())
    }
}

impl Snapshot {
    /// Builds the snapshot of a cluster: every node, and every non-terminated
    /// pod that has a `spec.nodeName` of a known node placed on it.
    pub fn from_cluster(cluster: &Cluster) -> Self {
        let mut snap = Snapshot::new(cluster.nodes.iter().cloned().map(Arc::new).collect());
        snap.workloads = Arc::new(cluster.workloads.clone());
        snap.volumes = Arc::new(cluster.volumes.clone());
        snap.dra = Some(Arc::new(cluster.dra.clone()));
        for ns in cluster.namespaces.values() {
            snap.namespaces.insert(ns.name.clone(), ns.labels.clone());
        }
        for pod in &cluster.pods {
            if !pod.node_name.is_empty() && !pod.terminated {
                if let Some(i) = snap.index.get(&pod.node_name).copied() {
                    snap.assume(i, Arc::new(pod.clone()));
                }
            }
        }
        snap
    }

    /// A snapshot of nodes without pods; image states are computed here.
    pub fn new(nodes: Vec<Arc<rkube_model::Node>>) -> Self {
        let mut existence: HashMap<&str, usize> = HashMap::new();
        for n in &nodes {
            let mut seen = std::collections::HashSet::new();
            for img in &n.images {
                for name in &img.names {
                    if seen.insert(name.as_str()) {
                        *existence.entry(name.as_str()).or_default() += 1;
                    }
                }
            }
        }
        let mut infos = Vec::with_capacity(nodes.len());
        let mut index = HashMap::with_capacity(nodes.len());
        for (i, n) in nodes.iter().enumerate() {
            let mut info = NodeInfo::new(n.clone());
            for img in &n.images {
                for name in &img.names {
                    info.image_states.insert(
                        name.clone(),
                        ImageStateSummary {
                            size: img.size_bytes,
                            num_nodes: existence.get(name.as_str()).copied().unwrap_or(0),
                        },
                    );
                }
            }
            index.insert(n.name.clone(), i);
            infos.push(info);
        }
        let scan = node_tree_order(&nodes);
        Snapshot {
            nodes: Nodes(infos),
            epoch: next_generation(),
            log: Vec::new(),
            index,
            scan,
            namespaces: BTreeMap::new(),
            workloads: Arc::default(),
            volumes: Arc::default(),
            dra: None,
            pod_groups: None,
        }
    }

    /// Node indices in the order a filter pass walks them (upstream's
    /// snapshot node list).
    pub fn scan_order(&self) -> &[usize] {
        &self.scan
    }

    /// Index of a node by name.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }

    /// A node by name.
    pub fn get(&self, name: &str) -> Option<&NodeInfo> {
        self.index_of(name).map(|i| &self.nodes[i])
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True when there is no node.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Places a pod on a node (upstream's `AssumePod`: the pod counts
    /// there from now on). Its volumes are the binding cycle's business
    /// ([`crate::Scheduler::schedule_one`]).
    pub fn assume(&mut self, node: usize, pod: Arc<Pod>) {
        self.nodes.0[node].add_pod(pod);
        self.logged(node);
    }

    /// Replaces a node's object (e.g. cordoned), keeping its pods.
    pub fn set_node(&mut self, node: usize, object: Arc<rkube_model::Node>) {
        self.nodes.0[node].set_node(object);
        self.logged(node);
    }

    /// Puts a node's earlier info back (a copy taken before changes that
    /// are to be undone exactly, pod order included).
    pub fn restore_node(&mut self, node: usize, info: NodeInfo) {
        self.nodes.0[node] = info;
        self.logged(node);
    }

    /// Notes that node `i` changed; a log longer than twice the nodes (at
    /// least 1,024 entries) is restarted under a new epoch, so that a
    /// snapshot kept for a long time (the live scheduler's) does not grow.
    fn logged(&mut self, i: usize) {
        if self.log.len() >= (2 * self.nodes.len()).max(1024) {
            self.log.clear();
            self.epoch = next_generation();
        }
        self.log.push(i as u32);
    }

    /// `(epoch, log)`: the nodes changed since this snapshot was made or
    /// cloned (or since its log restarted), in order, under an epoch that no
    /// other snapshot has. A reader that saw `(epoch, n)` before and sees the
    /// same epoch now knows every node changed since is in `log[n..]`.
    pub fn change_log(&self) -> (u64, &[u32]) {
        (self.epoch, &self.log)
    }

    /// Number of pods, on any node, that use the claim `namespace/name`.
    pub fn pvc_users(&self, key: &str) -> usize {
        self.nodes
            .iter()
            .map(|n| n.pvc_ref_counts.get(key).copied().unwrap_or(0))
            .sum()
    }

    /// Removes a pod from its node.
    pub fn remove(&mut self, node: usize, uid: &str) -> Option<Arc<Pod>> {
        let removed = self.nodes.0[node].remove_pod(uid);
        if removed.is_some() {
            self.logged(node);
        }
        removed
    }

    /// Labels of a namespace (empty when unknown).
    pub fn namespace_labels(&self, ns: &str) -> Option<&Labels> {
        self.namespaces.get(ns)
    }
}

/// Upstream's zone key of a node (`GetZoneKey`): the beta
/// `failure-domain` labels first, then the `topology.kubernetes.io` ones;
/// empty when the node has neither region nor zone.
fn zone_key(node: &rkube_model::Node) -> String {
    let get = |beta: &str, ga: &str| {
        node.labels
            .get(beta)
            .or_else(|| node.labels.get(ga))
            .map(String::as_str)
            .unwrap_or("")
    };
    let zone = get(
        "failure-domain.beta.kubernetes.io/zone",
        "topology.kubernetes.io/zone",
    );
    let region = get(
        "failure-domain.beta.kubernetes.io/region",
        "topology.kubernetes.io/region",
    );
    if zone.is_empty() && region.is_empty() {
        String::new()
    } else {
        format!("{region}:\0:{zone}")
    }
}

/// The order of upstream's node tree over `nodes` as an informer delivers
/// them from a list (by name, as the API server lists them): zones in the
/// order their first node arrives, then one node of each zone in turn.
/// Upstream's scheduling cycle walks its snapshot in this order, so the
/// rotating filter window and the heap's tie-break see the nodes as
/// upstream does. (Upstream appends a node added later to the end of its
/// zone; rkube orders by name at every snapshot.)
pub fn node_tree_order(nodes: &[Arc<rkube_model::Node>]) -> Vec<usize> {
    let mut by_name: Vec<usize> = (0..nodes.len()).collect();
    by_name.sort_by(|&a, &b| nodes[a].name.cmp(&nodes[b].name));
    let mut zones: Vec<String> = Vec::new();
    let mut members: HashMap<String, Vec<usize>> = HashMap::new();
    for i in by_name {
        let key = zone_key(&nodes[i]);
        members
            .entry(key.clone())
            .or_insert_with(|| {
                zones.push(key);
                Vec::new()
            })
            .push(i);
    }
    let mut out = Vec::with_capacity(nodes.len());
    let mut k = 0;
    while out.len() < nodes.len() {
        for z in &zones {
            if let Some(&i) = members[z].get(k) {
                out.push(i);
            }
        }
        k += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn change_log_names_every_changed_node_under_its_epoch() {
        use rkube_model::Node;
        let node = |n: &str| {
            Arc::new(Node {
                name: n.into(),
                ..Default::default()
            })
        };
        let pod = |uid: &str| {
            Arc::new(Pod {
                uid: uid.into(),
                ..Default::default()
            })
        };
        let mut s = Snapshot::new(vec![node("a"), node("b")]);
        let (e0, log) = s.change_log();
        assert!(log.is_empty());
        s.assume(1, pod("p"));
        assert!(s.remove(0, "absent").is_none());
        s.set_node(0, node("a"));
        assert_eq!(s.change_log(), (e0, &[1u32, 0][..]));
        let c = s.clone();
        assert_ne!(c.change_log().0, e0);
        assert!(c.change_log().1.is_empty());
        assert_eq!(c.nodes[1].generation(), s.nodes[1].generation());
        // The log restarts under a new epoch instead of growing.
        for i in 0..1024 {
            s.assume(0, pod(&format!("q{i}")));
        }
        let (e1, log) = s.change_log();
        assert_ne!(e1, e0);
        assert!(log.len() < 1024, "{}", log.len());
    }
}
