//! The whole scheduling attempt on an in-memory cluster: the scheduling
//! cycle, then assume, Reserve, Permit and the binding cycle against the
//! snapshot, with the host traits implemented over it ([`SnapshotHost`]).
//! `rkube simulate` and every offline driver place pods this way, so they
//! run the same binding cycle as the live scheduler; only the host differs.
//!
//! In memory the API server's controllers act at once: a volume bound by
//! PreBind is bound (the PV controller), a claim given a selected node gets
//! a provisioned volume (the provisioner), the Bind call has nothing left
//! to do (the pod was assumed on its node). Time is the host's own: a
//! Permit plugin that asks a pod to wait times out at once, since nothing
//! else runs in between to allow it.

use std::sync::Arc;
use std::time::Duration;

use rkube_model::dra::{generated_object_name, RequestMapping, ResourceClaim};
use rkube_model::volumes::{PodVolumes, Pv, Pvc};
use rkube_model::{Node, Pod};

use crate::binding::{self, AssumeCache, Binder, ClaimApi, HostClock, Listers, VolumeApi};
use crate::diagnosis::Diagnosis;
use crate::framework::Framework;
use crate::nominator::Nominator;
use crate::schedule_one::{Outcome, Scheduler};
use crate::snapshot::Snapshot;
use crate::status::{Code, Status};
use crate::waiting::WaitingPods;

/// The binding cycle's host over a snapshot.
pub struct SnapshotHost<'a> {
    snapshot: &'a mut Snapshot,
    clock: Duration,
    sleeps: u32,
}

impl<'a> SnapshotHost<'a> {
    /// A host over `snapshot`.
    pub fn new(snapshot: &'a mut Snapshot) -> Self {
        SnapshotHost {
            snapshot,
            clock: Duration::ZERO,
            sleeps: 0,
        }
    }
}

impl SnapshotHost<'_> {
    /// The snapshot's DRA objects, to change.
    fn dra_mut(&mut self) -> Result<&mut rkube_model::dra::Dra, String> {
        self.snapshot
            .dra
            .as_mut()
            .map(Arc::make_mut)
            .ok_or_else(|| "resourceclaims are not modelled by this host".to_string())
    }
}

impl AssumeCache for SnapshotHost<'_> {
    fn assume_volumes(&mut self, _: &Pod, node: &str, volumes: &PodVolumes) {
        Arc::make_mut(&mut self.snapshot.volumes).assume_bindings(volumes, node);
    }

    fn revert_volumes(&mut self, _: &Pod, volumes: &PodVolumes) {
        Arc::make_mut(&mut self.snapshot.volumes).revert_bindings(volumes);
    }

    fn assume_claim(&mut self, claim: &ResourceClaim) {
        if let Some(dra) = self.snapshot.dra.as_mut() {
            Arc::make_mut(dra)
                .claims
                .insert(Arc::new(claim.key()), Arc::new(claim.clone()));
        }
    }

    fn forget_claim(&mut self, namespace: &str, name: &str) {
        if let Some(dra) = self.snapshot.dra.as_mut() {
            Arc::make_mut(dra)
                .claims
                .remove(&(namespace.to_string(), name.to_string()));
        }
    }
}

impl Binder for SnapshotHost<'_> {
    fn bind(&mut self, _: &Pod, _: &str) -> Result<(), String> {
        Ok(())
    }

    /// No one reads events in memory.
    fn event(&mut self, _: &str, _: &str, _: &str) {}
}

impl VolumeApi for SnapshotHost<'_> {
    fn bind_pv(&mut self, pv: &Pv, pvc: &Pvc) -> Result<Pv, String> {
        let volumes = Arc::make_mut(&mut self.snapshot.volumes);
        volumes.complete_static_binding(pvc, &pv.name);
        volumes
            .pvs
            .get(&pv.name)
            .cloned()
            .ok_or_else(|| format!("persistentvolumes {:?} not found", pv.name))
    }

    fn select_node(&mut self, pvc: &Pvc, node: &str) -> Result<Pvc, String> {
        let n = self
            .node(node)
            .ok_or_else(|| format!("nodes {node:?} not found"))?;
        let volumes = Arc::make_mut(&mut self.snapshot.volumes);
        volumes.complete_provisioning(pvc, &n);
        volumes
            .pvc(&pvc.namespace, &pvc.name)
            .cloned()
            .ok_or_else(|| {
                format!(
                    "persistentvolumeclaims \"{}/{}\" not found",
                    pvc.namespace, pvc.name
                )
            })
    }

    fn pvc(&self, namespace: &str, name: &str) -> Option<Pvc> {
        self.snapshot.volumes.pvc(namespace, name).cloned()
    }

    fn pv(&self, name: &str) -> Option<Pv> {
        self.snapshot.volumes.pvs.get(name).cloned()
    }
}

impl ClaimApi for SnapshotHost<'_> {
    /// The API server accepts the status at once: the claim in the
    /// snapshot becomes `claim`, finalizer included.
    fn update_claim_status(&mut self, claim: &ResourceClaim) -> Result<ResourceClaim, String> {
        let dra = self.dra_mut()?;
        let Some(stored) = dra.claims.get_mut(&claim.key()) else {
            return Err(format!(
                "resourceclaims.resource.k8s.io {:?} not found",
                claim.name
            ));
        };
        let mut written = claim.clone();
        written.protected = true;
        *stored = Arc::new(written.clone());
        Ok(written)
    }

    fn resource_claim(&self, namespace: &str, name: &str) -> Option<ResourceClaim> {
        self.snapshot.dra.as_ref()?.claim(namespace, name).cloned()
    }

    /// The claim gets the first free name its `generate_name` gives
    /// (seeded by its in-memory UID) and replaces the in-memory claim;
    /// it is created without a status, as through the API.
    fn create_claim(&mut self, claim: &ResourceClaim) -> Result<ResourceClaim, String> {
        let dra = self.dra_mut()?;
        let ns = claim.namespace.clone();
        let name = (0..)
            .map(|i| generated_object_name(&claim.generate_name, &claim.uid, i))
            .find(|n| !dra.claims.contains_key(&(ns.clone(), n.clone())))
            .unwrap_or_default();
        dra.claims.remove(&claim.key());
        let created = ResourceClaim {
            uid: format!("claim:{ns}/{name}"),
            name,
            generate_name: String::new(),
            allocation: None,
            reserved_for: Vec::new(),
            protected: false,
            ..claim.clone()
        };
        dra.claims
            .insert(Arc::new(created.key()), Arc::new(created.clone()));
        Ok(created)
    }

    fn delete_claim(&mut self, namespace: &str, name: &str) -> Result<(), String> {
        self.forget_claim(namespace, name);
        Ok(())
    }

    /// Nothing in memory reads it.
    fn set_extended_resource_claim_status(
        &mut self,
        _: &Pod,
        _: &str,
        _: &[RequestMapping],
    ) -> Result<(), String> {
        Ok(())
    }
}

impl Listers for SnapshotHost<'_> {
    fn node(&self, name: &str) -> Option<Arc<Node>> {
        self.snapshot.get(name).map(|i| i.node.clone())
    }

    fn pod_exists(&self, _: &Pod) -> bool {
        true
    }
}

impl HostClock for SnapshotHost<'_> {
    /// Nothing runs in memory between two polls, so what was not done
    /// after the first wait never will be: the second wait lasts forever
    /// (any timeout passes; a huge `bindTimeoutSeconds` cannot spin).
    fn sleep(&mut self, d: Duration) {
        self.sleeps += 1;
        self.clock = if self.sleeps > 1 {
            Duration::MAX
        } else {
            self.clock.saturating_add(d)
        };
    }

    fn elapsed(&self) -> Duration {
        self.clock
    }
}

/// A rejection at the end of the scheduling cycle (Reserve, Permit) as
/// upstream reports it: a FitError over the chosen node, the nomination
/// cleared.
pub fn rejected_after_filter(node: &str, status: Status) -> Outcome {
    let (diagnosis, message) = binding::fit_error(node, &status);
    Outcome::Unschedulable {
        message,
        diagnosis,
        nominated_node: Some(String::new()),
        victims: Vec::new(),
    }
}

/// A failed binding cycle: rejections keep their message (the pod is
/// unschedulable, the nomination cleared), anything else is an error.
pub fn binding_failed(status: Status) -> Outcome {
    if status.is_rejected() {
        Outcome::Unschedulable {
            message: status.message(),
            diagnosis: Diagnosis::default(),
            nominated_node: Some(String::new()),
            victims: Vec::new(),
        }
    } else {
        Outcome::Error(status)
    }
}

impl Scheduler {
    /// Schedules and binds one pod on the snapshot. On success the pod is
    /// on its node in the snapshot (with `node_name` set and its
    /// nomination cleared) and its volumes are bound; on any failure the
    /// snapshot is as it was.
    pub fn schedule_one(
        &mut self,
        fw: &Framework,
        snapshot: &mut Snapshot,
        pod: &Pod,
        nominator: &Nominator,
    ) -> Outcome {
        let outcome = self.schedule_with(fw, snapshot, pod, nominator);
        let Outcome::Scheduled {
            node,
            mut state,
            evaluated,
            feasible,
        } = outcome
        else {
            return outcome;
        };
        let name = snapshot.nodes[node].name().to_string();
        let placed = binding::assumed_pod(pod, &name);
        snapshot.assume(node, placed.clone());
        let waiting = WaitingPods::new();
        let mut host = SnapshotHost::new(snapshot);
        match binding::reserve_and_permit(fw, &mut state, &placed, &name, &mut host, &waiting) {
            // Nothing else runs in memory to allow it: the earliest timeout.
            Ok(s) if s.code == Code::Wait => {
                if let Some(w) = waiting.get(&placed.uid) {
                    w.expire();
                }
            }
            Ok(_) => {}
            Err(s) => {
                snapshot.remove(node, &placed.uid);
                return match s.is_rejected() {
                    true => rejected_after_filter(&name, s),
                    false => Outcome::Error(s),
                };
            }
        }
        let s = binding::binding_cycle(fw, &mut state, &placed, &name, &waiting, &mut host);
        if !s.is_success() {
            binding::unreserve(fw, &mut state, &placed, &name, &mut host);
            snapshot.remove(node, &placed.uid);
            return binding_failed(s);
        }
        Outcome::Scheduled {
            node,
            state,
            evaluated,
            feasible,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_second_wait_in_memory_outlasts_any_timeout() {
        let mut snap = Snapshot::default();
        let mut host = SnapshotHost::new(&mut snap);
        host.sleep(Duration::from_secs(1));
        assert_eq!(host.elapsed(), Duration::from_secs(1));
        host.sleep(Duration::from_secs(1));
        assert!(host.elapsed() >= rkube_util::duration::MAX);
    }
}
