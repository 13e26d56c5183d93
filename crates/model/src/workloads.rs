//! Selectors of the objects that "own" pods for default topology spreading
//! (upstream's `helper.DefaultSelector`): Services, ReplicationControllers,
//! ReplicaSets and StatefulSets, by namespace and name.

use std::collections::{BTreeMap, HashMap};

use crate::objects::Pod;
use crate::selector::{LabelSelector, Labels, Operator, Requirement};

/// A PodDisruptionBudget, as preemption reads it.
#[derive(Debug, Clone, Default)]
pub struct PodDisruptionBudget {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `spec.selector`; `None` selects no pod, an empty selector every pod of the namespace.
    pub selector: Option<LabelSelector>,
    /// `status.disruptionsAllowed`.
    pub disruptions_allowed: i32,
    /// Names of pods in `status.disruptedPods`.
    pub disrupted_pods: Vec<String>,
}

/// Selectors by namespace/name.
#[derive(Debug, Clone, Default)]
pub struct WorkloadSelectors {
    /// `spec.selector` of each Service (only Services that have one), per namespace, in input order.
    pub services: BTreeMap<String, Vec<Labels>>,
    /// ReplicationController selectors by (namespace, name).
    pub replication_controllers: HashMap<(String, String), Labels>,
    /// ReplicaSet selectors by (namespace, name).
    pub replica_sets: HashMap<(String, String), LabelSelector>,
    /// StatefulSet selectors by (namespace, name).
    pub stateful_sets: HashMap<(String, String), LabelSelector>,
    /// PodDisruptionBudgets, in input order.
    pub pdbs: Vec<PodDisruptionBudget>,
}

fn set_selector(labels: &Labels) -> Vec<Requirement> {
    labels
        .iter()
        .map(|(k, v)| Requirement {
            key: k.clone(),
            op: Operator::In,
            values: vec![v.clone()],
        })
        .collect()
}

impl WorkloadSelectors {
    /// True when nothing is known (no Service or controller selector).
    pub fn is_empty(&self) -> bool {
        self.services.is_empty()
            && self.replication_controllers.is_empty()
            && self.replica_sets.is_empty()
            && self.stateful_sets.is_empty()
    }

    /// Upstream's `DefaultSelector`: the merged selectors of the Services
    /// selecting the pod, plus its controller's selector.
    pub fn default_selector(&self, pod: &Pod) -> LabelSelector {
        let mut set = Labels::new();
        for sel in self.services.get(&pod.namespace).into_iter().flatten() {
            if sel.iter().all(|(k, v)| pod.labels.get(k) == Some(v)) {
                for (k, v) in sel {
                    set.insert(k.clone(), v.clone());
                }
            }
        }
        let mut requirements = set_selector(&set);
        let Some(owner) = pod.owners.iter().find(|o| o.controller) else {
            return LabelSelector { requirements };
        };
        let key = (pod.namespace.clone(), owner.name.clone());
        match (owner.api_version.as_str(), owner.kind.as_str()) {
            ("v1", "ReplicationController") => {
                if let Some(rc) = self.replication_controllers.get(&key) {
                    for (k, v) in rc {
                        set.insert(k.clone(), v.clone());
                    }
                    requirements = set_selector(&set);
                }
            }
            ("apps/v1", "ReplicaSet") => {
                if let Some(rs) = self.replica_sets.get(&key) {
                    requirements.extend(rs.requirements.iter().cloned());
                }
            }
            ("apps/v1", "StatefulSet") => {
                if let Some(ss) = self.stateful_sets.get(&key) {
                    requirements.extend(ss.requirements.iter().cloned());
                }
            }
            _ => {}
        }
        LabelSelector { requirements }
    }
}
