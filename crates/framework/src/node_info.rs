//! Per-node aggregated state (upstream's `framework.NodeInfo`): the node,
//! its pods, requested and non-zero-requested resources, used host ports and
//! image states.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rkube_model::{HostPort, Node, Pod, Resources};

/// An image on a node, with how many nodes in the cluster have it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageStateSummary {
    /// Size in bytes.
    pub size: i64,
    /// Number of nodes that have an image with this name.
    pub num_nodes: usize,
}

/// Host ports in use on a node: host IP → {(protocol, port)}.
#[derive(Debug, Clone, Default)]
pub struct HostPortInfo(HashMap<String, HashSet<(String, i32)>>);

const ANY_IP: &str = "0.0.0.0";

impl HostPortInfo {
    /// Marks a port used.
    pub fn add(&mut self, p: &HostPort) {
        self.0
            .entry(p.host_ip.clone())
            .or_default()
            .insert((p.protocol.clone(), p.port));
    }

    /// Releases a port.
    pub fn remove(&mut self, p: &HostPort) {
        if let Some(set) = self.0.get_mut(&p.host_ip) {
            set.remove(&(p.protocol.clone(), p.port));
            if set.is_empty() {
                self.0.remove(&p.host_ip);
            }
        }
    }

    /// Upstream's `CheckConflict`: `0.0.0.0` conflicts with every IP.
    pub fn conflicts(&self, p: &HostPort) -> bool {
        let key = (p.protocol.clone(), p.port);
        if p.host_ip == ANY_IP {
            return self.0.values().any(|set| set.contains(&key));
        }
        [p.host_ip.as_str(), ANY_IP]
            .iter()
            .any(|ip| self.0.get(*ip).is_some_and(|set| set.contains(&key)))
    }

    /// Number of used (ip, protocol, port) entries.
    pub fn len(&self) -> usize {
        self.0.values().map(|s| s.len()).sum()
    }

    /// True when no port is used.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A node with everything scheduled on it.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    /// The node.
    pub node: Arc<Node>,
    /// The node's name, shared (score lists hold it without copying).
    name: Arc<str>,
    /// Pods on the node (bound or assumed).
    pub pods: Vec<Arc<Pod>>,
    /// Pods with pod affinity or anti-affinity.
    pub pods_with_affinity: Vec<Arc<Pod>>,
    /// Pods with required anti-affinity.
    pub pods_with_required_anti_affinity: Vec<Arc<Pod>>,
    /// Sum of pod requests.
    pub requested: Resources,
    /// Sum of non-zero CPU/memory requests (for scoring).
    pub non_zero_requested: Resources,
    /// Allocatable resources of the node.
    pub allocatable: Resources,
    /// Used host ports.
    pub used_ports: HostPortInfo,
    /// Images on the node by name.
    pub image_states: HashMap<String, ImageStateSummary>,
    /// PVC keys (`ns/name`) in use by pods on this node, with counts.
    pub pvc_ref_counts: HashMap<String, usize>,
    /// Upstream's `NodeInfo.Generation`: unique in the process for every
    /// content a node info has had (a clone keeps it, every change through
    /// [`NodeInfo::add_pod`], [`NodeInfo::remove_pod`] or
    /// [`NodeInfo::set_node`] takes a new one), so plugins may keep results
    /// per node across cycles keyed by it. The node and pod fields are public
    /// for reading; change them only through those methods.
    generation: u64,
    /// Scores Score plugins computed for this content (see
    /// `score_memo`); every change above forgets them.
    kept: KeptScores,
}

/// Scores kept with a node info's content: up to [`KEPT`], each a key id
/// (the upper 40 bits, never 0) and a score (the lower 24, signed) in one
/// atomic word, so that cycles scoring the node side by side each read a
/// whole entry. Kept beside the node's data, they are read from the cache
/// lines the filters just read.
#[derive(Debug, Default)]
pub(crate) struct KeptScores([AtomicU64; KEPT]);

/// Scores kept per node info.
const KEPT: usize = 4;

/// Bits of a kept score.
const SCORE_BITS: u32 = 24;

impl Clone for KeptScores {
    fn clone(&self) -> Self {
        KeptScores(std::array::from_fn(|i| {
            AtomicU64::new(self.0[i].load(Ordering::Relaxed))
        }))
    }
}

impl KeptScores {
    /// The score kept under key `id`.
    pub(crate) fn get(&self, id: u64) -> Option<i64> {
        if id == 0 {
            return None;
        }
        self.0.iter().find_map(|slot| {
            let word = slot.load(Ordering::Relaxed);
            // The low 24 bits, sign-extended.
            (word >> SCORE_BITS == id)
                .then_some(((word << (64 - SCORE_BITS)) as i64) >> (64 - SCORE_BITS))
        })
    }

    /// Keeps `score` under key `id` (ids fit 40 bits, are never 0); a
    /// score out of 24 bits is not kept.
    pub(crate) fn put(&self, id: u64, score: i64) {
        let limit = 1i64 << (SCORE_BITS - 1);
        if id == 0 || id >> (64 - SCORE_BITS) != 0 || !(-limit..limit).contains(&score) {
            return;
        }
        let word = (id << SCORE_BITS) | (score as u64 & ((1 << SCORE_BITS) - 1));
        let slot = self
            .0
            .iter()
            .position(|s| {
                let w = s.load(Ordering::Relaxed);
                w == 0 || w >> SCORE_BITS == id
            })
            .unwrap_or((id % KEPT as u64) as usize);
        self.0[slot].store(word, Ordering::Relaxed);
    }
}

/// The next [`NodeInfo`] generation (0 is never handed out); snapshots
/// take their change-log epochs from the same counter.
pub(crate) fn next_generation() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl NodeInfo {
    /// A node with no pods.
    pub fn new(node: Arc<Node>) -> Self {
        NodeInfo {
            allocatable: node.allocatable.clone(),
            name: Arc::from(node.name.as_str()),
            node,
            pods: Vec::new(),
            pods_with_affinity: Vec::new(),
            pods_with_required_anti_affinity: Vec::new(),
            requested: Resources::default(),
            non_zero_requested: Resources::default(),
            used_ports: HostPortInfo::default(),
            image_states: HashMap::new(),
            pvc_ref_counts: HashMap::new(),
            generation: next_generation(),
            kept: KeptScores::default(),
        }
    }

    /// The score kept for this content under key `id` (see `score_memo`).
    pub(crate) fn kept_score(&self, id: u64) -> Option<i64> {
        self.kept.get(id)
    }

    /// Keeps a score for this content under key `id`.
    pub(crate) fn keep_score(&self, id: u64, score: i64) {
        self.kept.put(id, score);
    }

    /// This content's generation (see the field).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Replaces the node object (e.g. cordoned), keeping the pods.
    pub fn set_node(&mut self, node: Arc<Node>) {
        self.allocatable = node.allocatable.clone();
        self.name = Arc::from(node.name.as_str());
        self.node = node;
        self.generation = next_generation();
        self.kept = KeptScores::default();
    }

    /// The node's name.
    pub fn name(&self) -> &str {
        &self.node.name
    }

    /// The node's name as a shared string (a reference-count increment).
    pub fn name_shared(&self) -> Arc<str> {
        self.name.clone()
    }

    /// Adds a pod (upstream's `AddPodInfo`).
    pub fn add_pod(&mut self, pod: Arc<Pod>) {
        if pod.has_pod_affinity() {
            self.pods_with_affinity.push(pod.clone());
        }
        if pod.has_required_anti_affinity() {
            self.pods_with_required_anti_affinity.push(pod.clone());
        }
        self.update(&pod, 1);
        self.pods.push(pod);
        self.generation = next_generation();
        self.kept = KeptScores::default();
    }

    /// Removes a pod by UID; returns it when found.
    pub fn remove_pod(&mut self, uid: &str) -> Option<Arc<Pod>> {
        let idx = self.pods.iter().position(|p| p.uid == uid)?;
        let pod = self.pods.swap_remove(idx);
        self.pods_with_affinity.retain(|p| p.uid != uid);
        self.pods_with_required_anti_affinity
            .retain(|p| p.uid != uid);
        self.update(&pod, -1);
        self.generation = next_generation();
        self.kept = KeptScores::default();
        Some(pod)
    }

    fn update(&mut self, pod: &Pod, sign: i64) {
        if sign > 0 {
            self.requested.add(&pod.requests);
        } else {
            self.requested.sub(&pod.requests);
        }
        let nz = &mut self.non_zero_requested;
        nz.milli_cpu = nz
            .milli_cpu
            .wrapping_add(sign.wrapping_mul(pod.non_zero_milli_cpu));
        nz.memory = nz
            .memory
            .wrapping_add(sign.wrapping_mul(pod.non_zero_memory));
        for p in pod.host_ports() {
            if sign > 0 {
                self.used_ports.add(p);
            } else {
                self.used_ports.remove(p);
            }
        }
        for v in &pod.volumes {
            if let rkube_model::Volume::Claim { claim, .. } = v {
                let key = format!("{}/{}", pod.namespace, claim);
                if sign > 0 {
                    *self.pvc_ref_counts.entry(key).or_default() += 1;
                } else if let Some(c) = self.pvc_ref_counts.get_mut(&key) {
                    *c -= 1;
                    if *c == 0 {
                        self.pvc_ref_counts.remove(&key);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hp(ip: &str, proto: &str, port: i32) -> HostPort {
        HostPort {
            host_ip: ip.into(),
            protocol: proto.into(),
            port,
        }
    }

    #[test]
    fn host_port_conflicts() {
        // Cases from upstream's TestHostPortInfo_Check.
        let mut used = HostPortInfo::default();
        used.add(&hp("127.0.0.1", "TCP", 80));
        assert!(used.conflicts(&hp("127.0.0.1", "TCP", 80)));
        assert!(!used.conflicts(&hp("127.0.0.2", "TCP", 80)));
        assert!(!used.conflicts(&hp("127.0.0.1", "UDP", 80)));
        assert!(used.conflicts(&hp("0.0.0.0", "TCP", 80)));
        let mut any = HostPortInfo::default();
        any.add(&hp("0.0.0.0", "TCP", 80));
        assert!(any.conflicts(&hp("127.0.0.1", "TCP", 80)));
        assert!(!any.conflicts(&hp("127.0.0.1", "TCP", 81)));
        any.remove(&hp("0.0.0.0", "TCP", 80));
        assert!(any.is_empty());
    }
}
