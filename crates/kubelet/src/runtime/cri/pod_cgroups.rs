//! The pods' cgroups through the container manager ([`crate::cm`]), as
//! upstream's pod container manager: each pod's cgroup made with its
//! limits ([`resources::pod_cgroup_config`]) before its sandbox, after the
//! QoS cgroups are brought up to date; widened before an in-place resize
//! and set after it; removed (what still runs in it killed) with the pod.
//! The Burstable pods' CPU requests, summed, are the Burstable QoS
//! cgroup's shares.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use super::spec::resources::{self, QosClass, ResourceOptions};
use super::{err, lock, CriRuntime};
use crate::cm::ResourceConfig;
use crate::runtime::RuntimeError;

/// What the runtime knows of a pod's cgroup.
#[derive(Debug, Clone)]
pub(super) struct PodCgroup {
    /// Its name (`/kubepods/burstable/pod<uid>`).
    name: String,
    /// The pod's CPU request in millicores if it is Burstable, else 0.
    burstable_milli: i64,
    /// What was last written to it (none for a cgroup found made).
    applied: Option<ResourceConfig>,
}

/// The pod cgroups the runtime tracks, by pod uid.
pub(super) type PodCgroups = HashMap<String, PodCgroup>;

/// The container manager's form of the pod's cgroup limits.
pub(super) fn config_of(pod: &Pod, opts: &ResourceOptions) -> ResourceConfig {
    let c = resources::pod_cgroup_config(pod, opts);
    ResourceConfig {
        cpu_shares: Some(c.cpu_shares.max(0) as u64),
        // No limit is written as "unlimited": a resize may lift one.
        cpu_quota: Some(c.cpu_quota.filter(|q| *q > 0).unwrap_or(-1)),
        cpu_period: c.cpu_period.map(|p| p.max(0) as u64),
        memory: Some(c.memory.filter(|m| *m > 0).unwrap_or(-1)),
        pids_limit: None,
        hugepage_limits: c.hugepage_limits,
        unified: c.unified,
    }
}

/// The larger of each limit of `a` and `b` (unlimited is the largest): what
/// the pod's cgroup holds while its containers are resized.
pub(super) fn widen(a: &ResourceConfig, b: &ResourceConfig) -> ResourceConfig {
    let unlimited_max = |x: Option<i64>, y: Option<i64>| match (x, y) {
        (Some(x), Some(y)) if x > 0 && y > 0 => Some(x.max(y)),
        (Some(_), Some(_)) => Some(-1),
        (x, y) => x.or(y),
    };
    ResourceConfig {
        cpu_shares: a.cpu_shares.max(b.cpu_shares),
        cpu_quota: unlimited_max(a.cpu_quota, b.cpu_quota),
        cpu_period: b.cpu_period.or(a.cpu_period),
        memory: unlimited_max(a.memory, b.memory),
        pids_limit: b.pids_limit,
        hugepage_limits: b.hugepage_limits.clone(),
        unified: b.unified.clone(),
    }
}

impl CriRuntime {
    fn pod_cgroup_name(&self, pod: &Pod) -> String {
        resources::pod_cgroup_parent(pod, &self.resources.cgroup_root)
    }

    /// Notes `pod` (its cgroup, and its CPU request if Burstable) for the
    /// QoS cgroups.
    pub(super) fn track_pod_cgroup(&self, pod: &Pod) {
        if self.cgroups.is_none() {
            return;
        }
        let burstable_milli = match resources::qos_class(pod) {
            QosClass::Burstable => resources::pod_cpu_request_milli(pod),
            _ => 0,
        };
        let name = self.pod_cgroup_name(pod);
        let mut m = lock(&self.pod_cgroups);
        let e = m.entry(pod.uid().unwrap_or_default()).or_insert(PodCgroup {
            name: name.clone(),
            burstable_milli,
            applied: None,
        });
        e.name = name;
        e.burstable_milli = burstable_milli;
    }

    /// A pod being terminated: its requests stop counting.
    pub(super) fn untrack_pod_cgroup(&self, uid: &str) {
        if let Some(p) = lock(&self.pod_cgroups).get_mut(uid) {
            p.burstable_milli = 0;
        }
    }

    fn burstable_milli(&self) -> i64 {
        lock(&self.pod_cgroups)
            .values()
            .map(|p| p.burstable_milli)
            .fold(0i64, i64::saturating_add)
    }

    /// The pod's cgroup, made with its limits if it is not there, after
    /// the QoS cgroups are brought up to date (upstream's order).
    pub(super) fn ensure_pod_cgroup(&self, pod: &Pod) -> Result<(), RuntimeError> {
        let Some(cm) = &self.cgroups else {
            return Ok(());
        };
        // (The sync that makes the sandbox tracked the pod already.)
        let name = self.pod_cgroup_name(pod);
        if cm.pod_exists(&name) {
            return Ok(());
        }
        if let Err(e) = cm.update_qos(self.burstable_milli()) {
            tracing::warn!(error = %e, "updating the QoS cgroups");
        }
        let config = config_of(pod, &self.resources);
        cm.ensure_pod(&name, &config).map_err(|e| {
            err(format!(
                "failed to ensure that the pod: {} cgroups exist and are correctly applied: {e}",
                pod.uid().unwrap_or_default()
            ))
        })?;
        if let Some(p) = lock(&self.pod_cgroups).get_mut(&pod.uid().unwrap_or_default()) {
            p.applied = Some(config);
        }
        Ok(())
    }

    /// Around an in-place resize: `before` widens the pod's cgroup to hold
    /// both the old and the new limits; after, it gets the new ones.
    pub(super) fn resize_pod_cgroup(&self, pod: &Pod, before: bool) {
        let Some(cm) = &self.cgroups else {
            return;
        };
        let uid = pod.uid().unwrap_or_default();
        let new = config_of(pod, &self.resources);
        let old = lock(&self.pod_cgroups)
            .get(&uid)
            .and_then(|p| p.applied.clone());
        let name = self.pod_cgroup_name(pod);
        // A cgroup found made (after a restart, or made by another
        // kubelet): what it holds is read, as upstream reads it.
        let old = old.or_else(|| cm.pod_limits(&name));
        let write = match (before, &old) {
            (true, Some(old)) => widen(old, &new),
            (true, None) => return,
            (false, _) => new.clone(),
        };
        match cm.update_pod(&name, &write) {
            Ok(()) if !before => {
                if let Some(p) = lock(&self.pod_cgroups).get_mut(&uid) {
                    p.applied = Some(new);
                }
            }
            Ok(()) => {}
            Err(e) => {
                tracing::warn!(pod = %pod.name_any(), error = %e, "resizing the pod's cgroup")
            }
        }
    }

    /// Removes the cgroup of pod `uid` (wherever its QoS class put it) and
    /// forgets it; the QoS cgroups follow. The removal (which may wait for
    /// killed processes) runs off the async workers.
    pub(super) async fn remove_pod_cgroup(&self, uid: &str) {
        let Some(cm) = self.cgroups.clone() else {
            return;
        };
        let known = lock(&self.pod_cgroups).remove(uid).map(|p| p.name);
        let base = cm.kubepods();
        let candidates = known.into_iter().chain([
            format!("{base}/pod{uid}"),
            format!("{base}/burstable/pod{uid}"),
            format!("{base}/besteffort/pod{uid}"),
        ]);
        let names: Vec<String> = candidates.collect();
        let manager = cm.clone();
        let removed = tokio::task::spawn_blocking(move || {
            for name in names {
                if manager.pod_left_anywhere(&name) {
                    if let Err(e) = manager.destroy_pod(&name) {
                        tracing::warn!(cgroup = %name, error = %e, "removing the pod's cgroup");
                    }
                }
            }
        });
        let _ = removed.await;
        if let Err(e) = cm.update_qos(self.burstable_milli()) {
            tracing::warn!(error = %e, "updating the QoS cgroups");
        }
    }

    /// Brings the QoS cgroups up to date (every minute, as upstream).
    pub fn update_qos_cgroups(&self) {
        if let Some(cm) = &self.cgroups {
            if let Err(e) = cm.update_qos(self.burstable_milli()) {
                tracing::info!(error = %e, "Failed to reserve QoS requests");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widened_to_hold_both() {
        let small = ResourceConfig {
            cpu_shares: Some(100),
            cpu_quota: Some(10_000),
            cpu_period: Some(100_000),
            memory: Some(1 << 20),
            ..Default::default()
        };
        let big = ResourceConfig {
            cpu_shares: Some(200),
            cpu_quota: Some(20_000),
            cpu_period: Some(100_000),
            memory: Some(2 << 20),
            ..Default::default()
        };
        let w = widen(&big, &small);
        assert_eq!(
            (w.cpu_shares, w.cpu_quota, w.memory),
            (Some(200), Some(20_000), Some(2 << 20))
        );
        let unlimited = ResourceConfig {
            cpu_quota: Some(-1),
            memory: Some(-1),
            ..small.clone()
        };
        let w = widen(&unlimited, &small);
        assert_eq!((w.cpu_quota, w.memory), (Some(-1), Some(-1)));
    }
}
