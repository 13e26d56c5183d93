//! PodGroups (GenericWorkload): the objects as the informer sends them and
//! every group's members with their state (unscheduled, assumed,
//! assigned), as upstream's scheduler cache keeps them, for GangScheduling's
//! PreEnqueue and Permit and the pod-group cycle. Off (no informer, no
//! state) without the gate.
//!
//! A member gated by GangScheduling ("waiting for minCount pods …", or for
//! its group to appear) is re-checked when another member arrives and when
//! its group's object does, as upstream's queue re-checks a gated group.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::scheduling::v1beta1 as api;
use kube::ResourceExt;
use rkube_framework::events::{self, ClusterEvent};
use rkube_framework::{EnqueueContext, PodGroupStates, Profiles};
use rkube_model::pod_groups::PodGroups;
use rkube_model::Pod;

use super::{key_of, Change, State};

/// The PodGroup objects and the members' states.
#[derive(Default)]
pub(crate) struct PodGroupCache {
    /// As the informer sent them (their status is patched from these).
    objects: HashMap<(String, String), Arc<api::PodGroup>>,
    /// Every group's members.
    pub(crate) states: PodGroupStates,
    /// Groups whose `PodGroupInitiallyScheduled` this scheduler set True:
    /// never written back to False, whatever the informer's copy says yet.
    scheduled: std::collections::HashSet<(String, String)>,
    /// The converted objects, as the snapshot carries them (preemption
    /// reads priorities and disruption modes there).
    model: Arc<PodGroups>,
}

impl State {
    /// Turns pod-group tracking on (GenericWorkload).
    pub fn enable_pod_groups(&mut self) {
        self.pod_groups = Some(PodGroupCache::default());
    }

    /// The PodGroup objects for the snapshot, when the gate is on.
    pub(super) fn pod_groups_view(&self) -> Option<Arc<PodGroups>> {
        self.pod_groups.as_ref().map(|g| g.model.clone())
    }

    /// The objects changed: the snapshot's copy follows (copy-on-write).
    fn set_snapshot_pod_groups(&mut self) {
        let Some(g) = self.pod_groups.as_mut() else {
            return;
        };
        let mut model = PodGroups::default();
        for (key, state) in g.states.group_keys().into_iter().filter_map(|k| {
            let st = g.states.get(&k.0, &k.1)?.group.clone()?;
            Some((k, st))
        }) {
            model.by_key.insert(key, state);
        }
        g.model = Arc::new(model);
        let view = g.model.clone();
        if let Some(s) = self.snap.as_mut() {
            Arc::make_mut(s).pod_groups = Some(view);
        }
    }

    /// Every group's members, when the gate is on.
    pub fn pod_group_states(&self) -> Option<&PodGroupStates> {
        self.pod_groups.as_ref().map(|g| &g.states)
    }

    /// Whether the group's `PodGroupInitiallyScheduled` may be written
    /// with `status` now (never back from True); a True is remembered.
    pub fn pod_group_condition_allowed(
        &mut self,
        namespace: &str,
        name: &str,
        status: &str,
    ) -> bool {
        let Some(g) = self.pod_groups.as_mut() else {
            return false;
        };
        let key = (namespace.to_string(), name.to_string());
        if status == "True" {
            g.scheduled.insert(key);
            true
        } else {
            !g.scheduled.contains(&key)
        }
    }

    /// The PodGroup object `namespace/name` as last seen.
    pub fn pod_group_object(&self, namespace: &str, name: &str) -> Option<Arc<api::PodGroup>> {
        self.pod_groups
            .as_ref()?
            .objects
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// A member pod's new version (or a new member), pending or bound. When
    /// it is the member that brings its gang to `minCount`, the gated
    /// members are re-checked (GangScheduling's PreEnqueue waits for
    /// exactly that; any other count changes nothing for them).
    pub(super) fn pod_group_member_changed(
        &mut self,
        profiles: &Profiles,
        old: Option<&Pod>,
        pod: &Pod,
        now: Instant,
    ) {
        let Some(g) = self.pod_groups.as_mut() else {
            return;
        };
        let moved = old.is_some_and(|o| o.pod_group != pod.pod_group);
        if let Some(o) = old.filter(|_| moved) {
            g.states.delete(o);
        }
        if pod.terminated {
            g.states.delete(pod);
            return;
        }
        let was_counted = old.is_some_and(|o| !moved && !o.terminated);
        g.states.upsert(pod);
        let Some(name) = pod.pod_group.as_deref() else {
            return;
        };
        let reached = g.states.of(pod).is_some_and(|s| {
            s.group
                .as_ref()
                .is_some_and(|grp| grp.min_count.is_some() && s.all_pods() == grp.needed())
        });
        if reached && !was_counted {
            let ns = pod.namespace.clone();
            self.recheck_group(profiles, &ns, name, &events::UNSCHEDULED_POD_ADD, now);
        }
    }

    /// A member pod is gone.
    pub(super) fn pod_group_member_deleted(&mut self, pod: &Pod) {
        if let Some(g) = self.pod_groups.as_mut() {
            g.states.delete(pod);
        }
    }

    /// The pod was assumed on a node (`true`) or forgotten.
    pub(super) fn pod_group_member_assumed(&mut self, pod: &Pod, assumed: bool) {
        if let Some(g) = self.pod_groups.as_mut() {
            match assumed {
                true => g.states.assume(pod),
                false => g.states.forget(pod),
            }
        }
    }

    /// Re-runs PreEnqueue on the gated members of `namespace/group` after
    /// `event` (a member added, the group's object observed).
    pub(super) fn recheck_group(
        &mut self,
        profiles: &Profiles,
        namespace: &str,
        group: &str,
        event: &ClusterEvent,
        now: Instant,
    ) {
        let Some(g) = self.pod_groups.as_ref() else {
            return;
        };
        let dra = self.dra_view();
        let ctx = EnqueueContext {
            dra: Some(&dra),
            pod_groups: Some(&g.states),
        };
        self.queue.recheck_gated(
            event,
            |p: &Pod| p.namespace == namespace && p.pod_group.as_deref() == Some(group),
            |p: &Pod| {
                profiles.for_pod(p).is_none_or(|fw| {
                    rkube_framework::pre_enqueue_rejection_in(fw, p, &ctx).is_some()
                })
            },
            now,
        );
    }

    /// Applies a PodGroup watch event.
    pub fn pod_groups_changed(
        &mut self,
        profiles: &Profiles,
        change: Change<api::PodGroup>,
        now: Instant,
    ) {
        if self.pod_groups.is_none() {
            return;
        }
        let touched: Vec<(String, String)> = match change {
            Change::Apply(o) => self.apply_pod_group(o).into_iter().collect(),
            Change::Delete(o) => {
                let (ns, name) = key_of(&o);
                self.forget_pod_group(&ns, &name);
                Vec::new()
            }
            Change::Replace(list) => {
                let keep: std::collections::HashSet<(String, String)> =
                    list.iter().map(key_of).collect();
                let gone: Vec<(String, String)> = self
                    .pod_groups
                    .as_ref()
                    .map(|g| g.objects.keys().cloned().collect())
                    .unwrap_or_default();
                for (ns, name) in gone.into_iter().filter(|k| !keep.contains(k)) {
                    self.forget_pod_group(&ns, &name);
                }
                list.into_iter()
                    .filter_map(|o| self.apply_pod_group(o))
                    .collect()
            }
        };
        self.set_snapshot_pod_groups();
        for (ns, name) in touched {
            self.recheck_group(profiles, &ns, &name, &events::POD_GROUP_ADD, now);
        }
    }

    /// Stores and converts one PodGroup; `Some(key)` when it converted.
    fn apply_pod_group(&mut self, o: api::PodGroup) -> Option<(String, String)> {
        let key = key_of(&o);
        let converted = rkube_model::pod_groups::pod_group(&o, &self.classes);
        let g = self.pod_groups.as_mut()?;
        match converted {
            Ok(model) => {
                g.states.set_group(Arc::new(model));
                g.objects.insert(key.clone(), Arc::new(o));
                Some(key)
            }
            Err(e) => {
                // Its members keep waiting for a group rkube can read.
                tracing::warn!(pod_group = %format!("{}/{}", key.0, o.name_any()), field = %e.path, error = %e.message, "ignoring a PodGroup that cannot be converted");
                g.states.remove_group(&key.0, &key.1);
                g.objects.remove(&key);
                None
            }
        }
    }

    fn forget_pod_group(&mut self, namespace: &str, name: &str) {
        if let Some(g) = self.pod_groups.as_mut() {
            let key = (namespace.to_string(), name.to_string());
            g.states.remove_group(namespace, name);
            g.objects.remove(&key);
            g.scheduled.remove(&key);
        }
    }
}
