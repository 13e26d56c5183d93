//! Nominated pods (upstream's queue `nominator`): pods that preempted
//! others and wait for their victims to go, keyed by the node they were
//! nominated to. Filtering treats a node's nominated pods of equal or
//! higher priority as if they were already running there.
//!
//! The nominator is owned by whoever drives scheduling (the simulator, the
//! live scheduler) and passed to [`crate::Scheduler::schedule_with`].

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use rkube_model::Pod;

/// Node → pods nominated to it, in nomination order.
#[derive(Debug, Clone, Default)]
pub struct Nominator {
    by_node: BTreeMap<String, Vec<Arc<Pod>>>,
    node_of: HashMap<String, String>,
}

impl Nominator {
    /// No nominations.
    pub fn new() -> Self {
        Self::default()
    }

    /// Nominates `pod` to `node`, replacing any earlier nomination of the
    /// same pod (by UID). An empty `node` only clears the nomination.
    pub fn add(&mut self, pod: Arc<Pod>, node: &str) {
        self.delete(&pod.uid);
        if node.is_empty() {
            return;
        }
        self.node_of.insert(pod.uid.clone(), node.to_string());
        self.by_node.entry(node.to_string()).or_default().push(pod);
    }

    /// What a failed attempt does to the nominations, the same in the
    /// simulator and the live scheduler: when preemption chose a node
    /// (`preempting`), every lower-priority pod nominated to it loses its
    /// nomination (upstream's preemption executor; they are returned so the
    /// caller can clear their `status.nominatedNodeName`); then the pod's own
    /// nomination is set (`Some(node)`), cleared (`Some("")`) or left as it
    /// is (`None`), as `handleSchedulingFailure` does.
    pub fn record_failure(
        &mut self,
        pod: &Pod,
        nominated_node: Option<&str>,
        preempting: bool,
    ) -> Vec<Arc<Pod>> {
        let mut cleared = Vec::new();
        if let Some(target) = nominated_node.filter(|n| preempting && !n.is_empty()) {
            cleared = self
                .pods_for_node(target)
                .iter()
                .filter(|p| p.priority < pod.priority && p.uid != pod.uid)
                .cloned()
                .collect();
            for p in &cleared {
                self.delete(&p.uid);
            }
        }
        if let Some(n) = nominated_node {
            let mut p = pod.clone();
            p.nominated_node_name = n.to_string();
            self.add(Arc::new(p), n);
        }
        cleared
    }

    /// Removes a pod's nomination (by UID), if any.
    pub fn delete(&mut self, uid: &str) {
        let Some(node) = self.node_of.remove(uid) else {
            return;
        };
        if let Some(pods) = self.by_node.get_mut(&node) {
            pods.retain(|p| p.uid != uid);
            if pods.is_empty() {
                self.by_node.remove(&node);
            }
        }
    }

    /// Pods nominated to a node, in nomination order.
    pub fn pods_for_node(&self, node: &str) -> &[Arc<Pod>] {
        self.by_node.get(node).map(|v| v.as_slice()).unwrap_or(&[])
    }

    /// The node a pod is nominated to.
    pub fn node_of(&self, uid: &str) -> Option<&str> {
        self.node_of.get(uid).map(|s| s.as_str())
    }

    /// True when no pod is nominated.
    pub fn is_empty(&self) -> bool {
        self.node_of.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str) -> Arc<Pod> {
        Arc::new(Pod {
            uid: uid.into(),
            ..Default::default()
        })
    }

    #[test]
    fn add_replaces_and_clears() {
        let mut n = Nominator::new();
        n.add(pod("a"), "n1");
        n.add(pod("b"), "n1");
        n.add(pod("a"), "n2");
        assert_eq!(n.pods_for_node("n1").len(), 1);
        assert_eq!(n.node_of("a"), Some("n2"));
        n.add(pod("a"), "");
        assert_eq!(n.node_of("a"), None);
        assert!(n.pods_for_node("n2").is_empty());
        n.delete("b");
        assert!(n.is_empty());
    }
}
