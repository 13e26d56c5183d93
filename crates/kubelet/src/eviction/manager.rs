//! The eviction manager: every [`MONITORING_PERIOD`] it observes the
//! signals, updates each node's pressure conditions and, for a node with a
//! threshold met, ranks its running pods and evicts at most one
//! ([`EvictionManager`]).
//!
//! Upstream: `pkg/kubelet/eviction/eviction_manager.go` (`managerImpl`,
//! `synchronize`, `evictPod`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::ranking::{message, pod_request, rank, Candidate};
use super::signals::{pod_key, Observations, Resource, Signal, SignalSource, Snapshot};
use super::thresholds::{
    all_thresholds, thresholds_met_with, to_reclaim, EvictionThreshold, Met, NodePressure,
    ThresholdState,
};
use crate::config::KubeletConfiguration;
use crate::node::pressure::PressureBoard;
use crate::node::NodeDesc;
use crate::pod::is_critical;
use crate::pods::worker::{ActivePod, ActivePods, Disruption, EvictRequest};

/// How often signals are observed (upstream's `evictionMonitoringPeriod`).
pub const MONITORING_PERIOD: Duration = Duration::from_secs(10);

/// Grace period of a hard-threshold eviction (upstream's
/// `immediateEvictionGracePeriodSeconds`).
pub const IMMEDIATE_GRACE: Duration = Duration::from_secs(1);

/// The grace period of a soft eviction (upstream's `synchronize`): the
/// pod's `terminationGracePeriodSeconds` (default 30) but at most
/// `evictionMaxPodGracePeriod`.
pub fn soft_grace(pod: &k8s_openapi::api::core::v1::Pod, max_seconds: i64) -> Duration {
    let pod_grace = pod
        .spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
        .unwrap_or(30);
    Duration::from_secs(u64::try_from(pod_grace.min(max_seconds)).unwrap_or(0))
}

/// The eviction loop of the process.
pub struct EvictionManager {
    /// The configuration (`evictionHard`, `evictionPressureTransitionPeriod`).
    pub config: Arc<KubeletConfiguration>,
    /// The nodes of the process.
    pub nodes: Vec<Arc<NodeDesc>>,
    /// Where signals come from.
    pub source: Arc<dyn SignalSource>,
    /// The pods the workers run.
    pub active: Arc<ActivePods>,
    /// Where the pressure conditions go (read by the heartbeat).
    pub pressure: Arc<PressureBoard>,
    /// Time between rounds ([`MONITORING_PERIOD`]).
    pub period: Duration,
    /// Node-level reclaim before evicting for disk pressure (CRI nodes).
    pub reclaim: Option<Reclaim>,
    /// Where the node's `EvictionThresholdMet` Events go.
    pub events: Option<crate::events::Recorder>,
    /// Pods are held to their own local storage limits every round
    /// ([`super::local_storage`]; upstream's `localStorageCapacityIsolation`,
    /// CRI nodes: the sim measures no local storage).
    pub local_storage: bool,
}

/// What the eviction manager frees on the node before it evicts a pod for
/// disk pressure (upstream's `buildSignalToNodeReclaimFuncs`): dead
/// containers, then unused images.
#[derive(Clone)]
pub struct Reclaim {
    /// The node's garbage collector.
    pub gc: Arc<crate::gc::GarbageCollector>,
    /// Whether the images live on a filesystem of their own (then nodefs
    /// pressure reclaims nothing at node level, as upstream).
    pub dedicated_imagefs: Arc<dyn Fn() -> bool + Send + Sync>,
}

/// Whether a met `signal` is first answered by freeing dead containers and
/// unused images, as upstream decides it with or without a dedicated
/// image filesystem.
pub fn reclaims_node_level(signal: Signal, dedicated_imagefs: bool) -> bool {
    match signal {
        Signal::ImageFsAvailable
        | Signal::ImageFsInodesFree
        | Signal::ContainerFsAvailable
        | Signal::ContainerFsInodesFree => true,
        Signal::NodeFsAvailable | Signal::NodeFsInodesFree => !dedicated_imagefs,
        _ => false,
    }
}

impl EvictionManager {
    /// Runs forever: one round every `period`.
    pub async fn run(self) {
        let thresholds = all_thresholds(&self.config);
        if thresholds.is_empty() && !self.local_storage {
            tracing::info!("no eviction thresholds: eviction manager not started");
            return std::future::pending().await;
        }
        tracing::info!(hard = ?self.config.eviction_hard, soft = ?self.config.eviction_soft, "eviction manager: starting control loop");
        let mut state: HashMap<String, (NodePressure, ThresholdState)> = HashMap::new();
        let mut tick = tokio::time::interval(self.period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let snap = self.source.observe(&self.nodes).await;
            let now = Instant::now();
            let mut evictions = Vec::new();
            for desc in &self.nodes {
                let empty = Observations::new();
                let obs = snap.nodes.get(&desc.name).unwrap_or(&empty);
                let (pressure, th) = state.entry(desc.name.clone()).or_default();
                let round = th.round(&thresholds, obs, now);
                let p = pressure.update(
                    &round.met,
                    self.config.eviction_pressure_transition_period,
                    now,
                );
                let before = self.pressure.get(&desc.name);
                if before != p {
                    tracing::info!(node = %desc.name, pressure = ?p, "eviction manager: node conditions changed");
                }
                self.pressure.set(&desc.name, p);
                // A pod over its own limits is evicted first, and the
                // thresholds wait for the next round (upstream's
                // `synchronize`).
                if self.local_storage && self.evict_over_limits(&desc.name, &snap).await {
                    continue;
                }
                if let Some(m) = to_reclaim(&round.actionable) {
                    evictions.push(self.reclaim_or_evict(desc.clone(), m, &snap, &thresholds));
                }
            }
            futures::future::join_all(evictions).await;
        }
    }

    /// Upstream's reclaim step, then an eviction if it was not enough.
    async fn reclaim_or_evict(
        &self,
        desc: Arc<NodeDesc>,
        met: Met,
        snap: &Snapshot,
        thresholds: &[EvictionThreshold],
    ) {
        let r = met.signal.resource();
        tracing::info!(node = %desc.name, resource_name = r.name(), "Eviction manager: attempting to reclaim");
        if let Some(e) = &self.events {
            e.record_node(
                &desc.name,
                true,
                "EvictionThresholdMet",
                format!("Attempting to reclaim {}", r.name()),
            );
        }
        if let Some(rc) = &self.reclaim {
            if reclaims_node_level(met.signal, (rc.dedicated_imagefs)()) {
                match rc.gc.delete_all_unused_containers().await {
                    Ok(_) => {}
                    Err(e) => {
                        tracing::info!(resource_name = r.name(), error = %e, "Eviction manager: unexpected error when attempting to reduce resource pressure")
                    }
                }
                if let Err(e) = rc.gc.delete_unused_images().await {
                    tracing::info!(resource_name = r.name(), error = %e, "Eviction manager: unexpected error when attempting to reduce resource pressure");
                }
                let after = self.source.observe(std::slice::from_ref(&desc)).await;
                let empty = Observations::new();
                let obs = after.nodes.get(&desc.name).unwrap_or(&empty);
                if thresholds_met_with(thresholds, obs, true).is_empty() {
                    tracing::info!(
                        resource_name = r.name(),
                        "Eviction manager: able to reduce resource pressure without evicting pods."
                    );
                    return;
                }
            }
        }
        tracing::info!(
            resource_name = r.name(),
            "Eviction manager: must evict pod(s) to reclaim"
        );
        self.evict_one(&desc.name, met, snap).await;
    }

    /// Evicts every running pod of `node` over its own local storage
    /// limits (grace 1 s, upstream's message, no `DisruptionTarget`);
    /// whether any was.
    async fn evict_over_limits(&self, node: &str, snap: &Snapshot) -> bool {
        let dedicated = self
            .reclaim
            .as_ref()
            .is_some_and(|r| (r.dedicated_imagefs)());
        let mut evicted = false;
        for a in self.active.on_node(node).into_iter().filter(|a| a.running) {
            let Some(local) = snap
                .pods
                .get(&pod_key(&a.pod))
                .and_then(|u| u.local.as_ref())
            else {
                continue;
            };
            let Some(message) = super::local_storage::violation(&a.pod, local, dedicated) else {
                continue;
            };
            evicted |= self
                .evict(&a, Disruption::EvictedOverLimit, message, IMMEDIATE_GRACE)
                .await;
        }
        evicted
    }

    /// Asks `a`'s worker to kill it with `grace` and report it `why`, and
    /// waits for that; false when the pod was not evicted (a critical pod,
    /// a worker gone). A failed kill counts as evicted, as upstream.
    async fn evict(
        &self,
        a: &ActivePod,
        why: Disruption,
        message: String,
        grace: Duration,
    ) -> bool {
        if is_critical(&a.pod) {
            tracing::warn!(pod = %pod_key(&a.pod), "eviction manager: cannot evict a critical pod");
            return false;
        }
        if let Some(e) = &self.events {
            e.record(&a.pod, None, true, "Evicted", message.clone());
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let req = EvictRequest {
            reason: why,
            message,
            grace,
            done: tx,
        };
        if a.evict.send(req).await.is_err() {
            return false;
        }
        match tokio::time::timeout(grace + Duration::from_secs(30), rx).await {
            Ok(Ok(true)) => {
                tracing::info!(pod = %pod_key(&a.pod), "eviction manager: pod is evicted successfully");
            }
            _ => tracing::warn!(pod = %pod_key(&a.pod), "eviction manager: pod failed to evict"),
        }
        true
    }

    /// Ranks the node's running pods for `met` and evicts the first that
    /// can be evicted (one pod per round, as upstream).
    async fn evict_one(&self, node: &str, met: Met, snap: &Snapshot) {
        let r = met.signal.resource();
        tracing::debug!(%node, signal = met.signal.name(), quantity = met.quantity, available = met.available, "eviction manager: threshold to reclaim");
        let pods: Vec<ActivePod> = self
            .active
            .on_node(node)
            .into_iter()
            .filter(|a| a.running)
            .collect();
        if pods.is_empty() {
            tracing::warn!(%node, "eviction manager: thresholds met, but no pods are active to evict");
            return;
        }
        let mut cands: Vec<Candidate> = pods
            .iter()
            .enumerate()
            .map(|(index, a)| Candidate {
                index,
                priority: a.pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0),
                request: match r {
                    Resource::Memory | Resource::EphemeralStorage => pod_request(&a.pod, r),
                    _ => 0,
                },
                usage: snap.pods.get(&pod_key(&a.pod)).and_then(|u| u.total(r)),
            })
            .collect();
        rank(r, &mut cands);
        let order: Vec<String> = cands.iter().map(|c| pod_key(&pods[c.index].pod)).collect();
        tracing::info!(%node, pods = ?order, "eviction manager: pods ranked for eviction");
        for c in &cands {
            let a = &pods[c.index];
            let msg = message(&met, &a.pod, snap.pods.get(&pod_key(&a.pod)));
            let grace = if met.hard {
                IMMEDIATE_GRACE
            } else {
                soft_grace(&a.pod, self.config.eviction_max_pod_grace_period)
            };
            // One pod a round, as upstream.
            if self.evict(a, Disruption::Evicted, msg, grace).await {
                return;
            }
        }
        tracing::warn!(%node, "eviction manager: unable to evict any pods from the node");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_level_reclaim_as_upstream_maps_the_signals() {
        // Images on the node's filesystem: every disk signal frees dead
        // containers and unused images first.
        for s in [
            Signal::NodeFsAvailable,
            Signal::NodeFsInodesFree,
            Signal::ImageFsAvailable,
            Signal::ImageFsInodesFree,
        ] {
            assert!(reclaims_node_level(s, false), "{s:?}");
        }
        // A dedicated image filesystem: nodefs pressure has nothing to free
        // at node level; imagefs pressure does.
        assert!(!reclaims_node_level(Signal::NodeFsAvailable, true));
        assert!(reclaims_node_level(Signal::ImageFsAvailable, true));
        assert!(!reclaims_node_level(Signal::MemoryAvailable, false));
        assert!(!reclaims_node_level(Signal::PidAvailable, false));
    }

    #[test]
    fn soft_evictions_give_the_pods_grace_up_to_the_maximum() {
        let pod = |tgps: Option<i64>| -> k8s_openapi::api::core::v1::Pod {
            serde_json::from_value(serde_json::json!({
                "spec": {"containers": [], "terminationGracePeriodSeconds": tgps}
            }))
            .unwrap()
        };
        assert_eq!(soft_grace(&pod(Some(10)), 60), Duration::from_secs(10));
        assert_eq!(soft_grace(&pod(Some(120)), 60), Duration::from_secs(60));
        // Upstream's default evictionMaxPodGracePeriod is 0.
        assert_eq!(soft_grace(&pod(Some(30)), 0), Duration::ZERO);
        assert_eq!(soft_grace(&pod(None), 45), Duration::from_secs(30));
    }
}
