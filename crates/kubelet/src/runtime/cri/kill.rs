//! Stopping and removing a pod (upstream's `KillPod` and the pod's
//! cleanup): regular containers at once, then sidecars last first within
//! the grace left, the sandbox stopped; reclaiming its cgroup and its
//! volumes' mounts (before the API server is told it is gone); on removal
//! every container and sandbox removed, then the pod's mounts and
//! directories and its logs.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};
use kube::ResourceExt;
use rkube_cri::v1;

use super::hooks;
use super::{err, latest, lock, CriRuntime};
use crate::pod::is_sidecar;
use crate::runtime::{PodObservation, RuntimeError};
use crate::volumes::{empty_dir, local, subpath};

impl CriRuntime {
    pub(super) async fn kill(
        &self,
        pod: &Pod,
        grace: Duration,
    ) -> Result<PodObservation, RuntimeError> {
        let uid = pod.uid().unwrap_or_default();
        self.probes.forget_pod(&uid);
        let spec = pod.spec.clone().unwrap_or_default();
        let running: HashMap<String, v1::Container> = latest(
            self.containers(&uid)
                .await?
                .into_iter()
                .filter(|c| c.state == v1::ContainerState::ContainerRunning as i32)
                .collect(),
        );
        let ips = match self.sandboxes(&uid).await?.into_iter().next() {
            Some(s) => self.sandbox_ips(&s.id, false).await,
            None => vec![],
        };
        let started = std::time::Instant::now();
        // Regular containers (and a running init container) first, all at
        // once; then the sidecars, last first, with the grace left (as
        // upstream's termination ordering).
        let (sidecars, others): (Vec<&Container>, Vec<&Container>) = spec
            .init_containers
            .iter()
            .flatten()
            .chain(&spec.containers)
            .partition(|c| is_sidecar(c));
        let stops = others.iter().filter_map(|c| {
            let x = running.get(&c.name)?;
            Some(self.stop_one(pod, c, &x.id, &ips, grace, None))
        });
        for r in futures::future::join_all(stops).await {
            r?;
        }
        for c in sidecars.iter().rev() {
            if let Some(x) = running.get(&c.name) {
                let left = hooks::stop_grace_after(grace, started.elapsed()).min(grace);
                self.stop_one(pod, c, &x.id, &ips, left, None).await?;
            }
        }
        // Anything else still running (not in the spec any more).
        let known: Vec<&str> = sidecars
            .iter()
            .chain(&others)
            .map(|c| c.name.as_str())
            .collect();
        for (name, x) in &running {
            if !known.contains(&name.as_str()) {
                match self.cri.stop_container(&x.id, grace).await {
                    Err(e) if !e.is_not_found() => return Err(err(e)),
                    _ => {}
                }
            }
        }
        for s in self.sandboxes(&uid).await? {
            self.cri.stop_pod_sandbox(&s.id).await.map_err(err)?;
        }
        // Its claims, once every container stopped and before the final
        // status (upstream's UnprepareDynamicResources); a failure fails
        // the kill, which is tried again. Only claims the cache holds for
        // the pod are unprepared (upstream's fallback to the pod's spec
        // finds nothing else to do).
        if let Some(d) = self.dra.as_ref().filter(|d| d.might_need_unprepare(&uid)) {
            d.unprepare(pod).await.map_err(err)?;
        }
        let mut obs = self.observe(pod, &HashMap::new(), None, None).await?;
        obs.resync_after = None;
        Ok(obs)
    }

    /// The pod's cgroup, then its mounts (its containers are stopped).
    /// The cgroup goes before the directory: a kubelet killed between the
    /// two leaves the directory, by which the next one finds the pod
    /// (CriRuntime::leftovers) and ends what is left of it.
    pub(super) async fn reclaim(&self, uid: &str) -> Result<(), RuntimeError> {
        self.remove_pod_cgroup(uid).await;
        // Mounts first: removing the directory through a subPath bind mount
        // of a hostPath would delete host files.
        let pod_dir = self.dirs.pod_dir(uid);
        subpath::cleanup(&pod_dir).map_err(err)?;
        empty_dir::cleanup(&pod_dir).map_err(err)?;
        local::cleanup(&pod_dir).map_err(err)?;
        if let Some(vm) = self.volumes.as_ref() {
            vm.tear_down_csi(&pod_dir).await.map_err(err)?;
        }
        // Something still mounted (not one of the kubelet's own volumes):
        // left in place, as upstream leaves an orphaned pod whose volumes
        // are not cleaned up, never deleted through.
        let left = subpath::mounts_under(&pod_dir).map_err(err)?;
        if let Some(m) = left.first() {
            return Err(err(format!(
                "pod {uid}: {} is still mounted; its directory {} is left in place",
                m.display(),
                pod_dir.display()
            )));
        }
        Ok(())
    }

    pub(super) async fn remove(&self, uid: &str) -> Result<(), RuntimeError> {
        self.probes.forget_pod(uid);
        lock(&self.backoff).forget_prefix(&format!("{uid}/"));
        for c in self.containers(uid).await? {
            let label = |k: &str| c.labels.get(k).cloned().unwrap_or_default();
            crate::logs::legacy::remove(
                &self.dirs.legacy_links,
                &crate::logs::legacy::link_name(
                    &label("io.kubernetes.pod.name"),
                    &label("io.kubernetes.pod.namespace"),
                    &label("io.kubernetes.container.name"),
                    &c.id,
                ),
                &self.dirs.logs,
            );
            match self.cri.remove_container(&c.id).await {
                Err(e) if !e.is_not_found() => return Err(err(e)),
                _ => {}
            }
        }
        for s in self.sandboxes(uid).await? {
            match self.cri.remove_pod_sandbox(&s.id).await {
                Err(e) if !e.is_not_found() => return Err(err(e)),
                _ => {}
            }
        }
        if let Some(vm) = self.volumes.as_ref() {
            vm.forget(uid);
        }
        // (Again: also for a pod found left over by a restarted kubelet.)
        self.reclaim(uid).await?;
        let _ = std::fs::remove_dir_all(self.dirs.pod_dir(uid));
        if let Ok(rd) = std::fs::read_dir(&self.dirs.logs) {
            for e in rd.flatten() {
                if e.file_name()
                    .to_string_lossy()
                    .ends_with(&format!("_{uid}"))
                {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        Ok(())
    }
}
