//! Pod groups as the scheduler tracks them (GenericWorkload): each group's
//! object and the state of its member pods (upstream's `podGroupState` in
//! the scheduler cache), the progress a pod-group cycle reports to
//! PlacementFeasible plugins, and what a pod's cycle hands GangScheduling's
//! Permit. No I/O: drivers keep the states as they assume, bind, forget and
//! delete pods.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use rkube_model::pod_groups::{PodGroup, PodGroups};
use rkube_model::Pod;

use crate::waiting::WaitingPods;

/// Where a member pod stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Member {
    /// Pending, not assumed.
    Unscheduled,
    /// Assumed on a node in this scheduler's cache, not yet bound.
    Assumed,
    /// Bound (`spec.nodeName` set).
    Assigned,
}

/// One group: its object (absent until observed) and its members by UID,
/// with their names.
#[derive(Debug, Clone, Default)]
pub struct GroupState {
    /// The PodGroup object, once observed.
    pub group: Option<Arc<PodGroup>>,
    members: BTreeMap<String, (String, Member)>,
}

impl GroupState {
    /// Upstream's `AllPodsCount`: every member the scheduler knows.
    pub fn all_pods(&self) -> usize {
        self.members.len()
    }

    /// Upstream's `ScheduledPodsCount`: assumed and assigned members.
    pub fn scheduled_pods(&self) -> usize {
        self.members
            .values()
            .filter(|(_, m)| *m != Member::Unscheduled)
            .count()
    }

    /// UIDs of the assumed members.
    pub fn assumed(&self) -> Vec<String> {
        self.members
            .iter()
            .filter(|(_, (_, m))| *m == Member::Assumed)
            .map(|(uid, _)| uid.clone())
            .collect()
    }
}

/// Every group by `(namespace, name)`.
#[derive(Debug, Clone, Default)]
pub struct PodGroupStates {
    groups: HashMap<(String, String), GroupState>,
}

impl PodGroupStates {
    /// The states of `groups` and of every non-terminated pod naming one
    /// (pods that name a group not yet observed are kept too, as upstream's
    /// cache keeps them).
    pub fn new<'a>(groups: &PodGroups, pods: impl IntoIterator<Item = &'a Pod>) -> Self {
        let mut s = PodGroupStates::default();
        for ((ns, name), g) in &groups.by_key {
            s.groups
                .entry((ns.clone(), name.clone()))
                .or_default()
                .group = Some(g.clone());
        }
        for p in pods {
            if !p.terminated {
                s.add(p);
            }
        }
        s
    }

    /// The state of the group `name` in `namespace`.
    pub fn get(&self, namespace: &str, name: &str) -> Option<&GroupState> {
        self.groups.get(&(namespace.to_string(), name.to_string()))
    }

    /// The state of `pod`'s group.
    pub fn of(&self, pod: &Pod) -> Option<&GroupState> {
        self.get(&pod.namespace, pod.pod_group.as_deref()?)
    }

    fn member(&mut self, pod: &Pod) -> Option<&mut (String, Member)> {
        let name = pod.pod_group.as_ref()?;
        self.groups
            .get_mut(&(pod.namespace.clone(), name.clone()))?
            .members
            .get_mut(&pod.uid)
    }

    /// A copy holding only the group `name` in `namespace` (what one
    /// group's cycle reads and writes).
    pub fn only(&self, namespace: &str, name: &str) -> PodGroupStates {
        let key = (namespace.to_string(), name.to_string());
        PodGroupStates {
            groups: self
                .groups
                .get(&key)
                .map(|g| (key, g.clone()))
                .into_iter()
                .collect(),
        }
    }

    /// The PodGroup object was observed (added or updated).
    pub fn set_group(&mut self, group: Arc<PodGroup>) {
        let key = (group.namespace.clone(), group.name.clone());
        self.groups.entry(key).or_default().group = Some(group);
    }

    /// The PodGroup object was deleted; its members stay known.
    pub fn remove_group(&mut self, namespace: &str, name: &str) {
        let key = (namespace.to_string(), name.to_string());
        if let Some(g) = self.groups.get_mut(&key) {
            g.group = None;
            if g.members.is_empty() {
                self.groups.remove(&key);
            }
        }
    }

    /// Every group's object (for a relist).
    pub fn group_keys(&self) -> Vec<(String, String)> {
        self.groups
            .iter()
            .filter(|(_, g)| g.group.is_some())
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// A new version of a member pod: added when unknown, assigned once it
    /// has a node (an assumed member keeps its state while pending).
    pub fn upsert(&mut self, pod: &Pod) {
        match self.member(pod) {
            Some(m) if !pod.node_name.is_empty() => m.1 = Member::Assigned,
            Some(_) => {}
            None => self.add(pod),
        }
    }

    /// A member pod appears (assigned when it has a node).
    pub fn add(&mut self, pod: &Pod) {
        let Some(name) = &pod.pod_group else { return };
        let state = if pod.node_name.is_empty() {
            Member::Unscheduled
        } else {
            Member::Assigned
        };
        self.groups
            .entry((pod.namespace.clone(), name.clone()))
            .or_default()
            .members
            .insert(pod.uid.clone(), (pod.name.clone(), state));
    }

    /// The pod was assumed on a node.
    pub fn assume(&mut self, pod: &Pod) {
        if let Some(m) = self.member(pod) {
            if m.1 == Member::Unscheduled {
                m.1 = Member::Assumed;
            }
        }
    }

    /// An assumed pod was forgotten (its cycle failed or was reverted).
    pub fn forget(&mut self, pod: &Pod) {
        if let Some(m) = self.member(pod) {
            if m.1 == Member::Assumed {
                m.1 = Member::Unscheduled;
            }
        }
    }

    /// The pod was bound.
    pub fn bind(&mut self, pod: &Pod) {
        if let Some(m) = self.member(pod) {
            m.1 = Member::Assigned;
        }
    }

    /// The pod was deleted.
    pub fn delete(&mut self, pod: &Pod) {
        let Some(name) = &pod.pod_group else { return };
        let key = (pod.namespace.clone(), name.clone());
        if let Some(g) = self.groups.get_mut(&key) {
            g.members.remove(&pod.uid);
            if g.members.is_empty() && g.group.is_none() {
                self.groups.remove(&key);
            }
        }
    }
}

/// Upstream's `PlacementProgress`: members of the cycle still to try, and
/// members scheduled (including those scheduled before the cycle).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlacementProgress {
    /// Members not tried yet.
    pub remaining: usize,
    /// Members assumed or assigned.
    pub scheduled: usize,
}

/// What a pod-group cycle writes into each member's cycle state for
/// GangScheduling's Permit (the part of upstream's framework handle and
/// pod group manager that Permit reads): the group, how many of its members
/// are scheduled with this pod assumed, the members assumed so far, and
/// the waiting pods to allow.
#[derive(Debug, Clone)]
pub struct GangPermit {
    /// The pod's group.
    pub group: Arc<PodGroup>,
    /// Assumed and assigned members, this pod included.
    pub scheduled: usize,
    /// UIDs of the members assumed, this pod included.
    pub assumed: Vec<String>,
    /// The waiting pods of this scheduler.
    pub waiting: WaitingPods,
}

impl GangPermit {
    /// The cycle-state key.
    pub const KEY: &'static str = "GangScheduling/permit";
}

/// What PreEnqueue plugins may read besides the pod.
#[derive(Debug, Clone, Copy, Default)]
pub struct EnqueueContext<'a> {
    /// The host's DRA objects (`None` when it does not watch them), which
    /// DynamicResources looks up a pod's claims in.
    pub dra: Option<&'a rkube_model::dra::Dra>,
    /// Pod groups and their members (`None` when GenericWorkload is off).
    pub pod_groups: Option<&'a PodGroupStates>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, group: &str, node: &str) -> Pod {
        Pod {
            namespace: "ns".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            pod_group: Some(group.into()),
            node_name: node.into(),
            ..Default::default()
        }
    }

    #[test]
    fn members_move_between_states_as_upstreams_cache_moves_them() {
        let (a, b, c) = (pod("a", "g", ""), pod("b", "g", ""), pod("c", "g", "n1"));
        let mut s = PodGroupStates::new(&PodGroups::default(), [&a, &b, &c]);
        let g = |s: &PodGroupStates| {
            let g = s.get("ns", "g").unwrap();
            (g.all_pods(), g.scheduled_pods(), g.assumed())
        };
        assert_eq!(g(&s), (3, 1, vec![]));
        s.assume(&a);
        assert_eq!(g(&s), (3, 2, vec!["uid-a".to_string()]));
        s.forget(&a);
        assert_eq!(g(&s), (3, 1, vec![]));
        s.assume(&b);
        s.bind(&b);
        // Forgetting a bound pod leaves it assigned.
        s.forget(&b);
        assert_eq!(g(&s), (3, 2, vec![]));
        s.delete(&c);
        assert_eq!(g(&s), (2, 1, vec![]));
        assert!(s.get("ns", "other").is_none());
    }
}
