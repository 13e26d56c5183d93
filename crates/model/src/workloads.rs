//! Selectors of the objects that "own" pods for default topology spreading
//! (upstream's `helper.DefaultSelector`): Services, ReplicationControllers,
//! ReplicaSets and StatefulSets, by namespace and name.

use std::collections::{BTreeMap, HashMap};

use crate::objects::Pod;
use crate::selector::{LabelSelector, Labels, Operator, Requirement};

/// An int-or-string field that is a count or a percentage
/// (`minAvailable`, `maxUnavailable`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntOrPercent {
    /// A count of pods.
    Int(i32),
    /// A percentage (`"25%"` is `Percent(25)`).
    Percent(i32),
}

impl IntOrPercent {
    /// Upstream's `intstr.GetScaledValueFromIntOrPercent`: a count as is, a
    /// percentage of `total`, rounded up or down.
    pub fn scaled(self, total: i32, round_up: bool) -> i32 {
        match self {
            IntOrPercent::Int(n) => n,
            IntOrPercent::Percent(p) => {
                let product = i64::from(p) * i64::from(total);
                let v = if round_up {
                    product.div_euclid(100) + i64::from(product.rem_euclid(100) != 0)
                } else {
                    product.div_euclid(100)
                };
                v.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32
            }
        }
    }
}

/// A PodDisruptionBudget, as preemption and eviction read it.
#[derive(Debug, Clone, Default)]
pub struct PodDisruptionBudget {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `spec.selector`; `None` selects no pod, an empty selector every pod of
    /// the namespace (for preemption; the eviction API ignores empty selectors).
    pub selector: Option<LabelSelector>,
    /// `spec.minAvailable`.
    pub min_available: Option<IntOrPercent>,
    /// `spec.maxUnavailable`.
    pub max_unavailable: Option<IntOrPercent>,
    /// `status.disruptionsAllowed` (0 when absent).
    pub disruptions_allowed: i32,
    /// `status.disruptionsAllowed` was present: the disruption controller has
    /// written a status, so `disruptions_allowed`, `current_healthy` and
    /// `desired_healthy` are its numbers.
    pub status_present: bool,
    /// `status.currentHealthy`.
    pub current_healthy: i32,
    /// `status.desiredHealthy`.
    pub desired_healthy: i32,
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
