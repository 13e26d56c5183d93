//! DeviceClasses, ResourceSlices and ResourceClaims as the informers send
//! them (upstream's DRA manager), with the claims Reserve allocated for
//! pods in their binding cycle layered on top (upstream's in-flight
//! allocations): such a claim counts as allocated until the informer sends
//! a version that carries an allocation (PreBind's status write landed) or
//! Unreserve gives it back. A newer version *without* an allocation — the
//! delete-protection finalizer PreBind writes first — does not end it:
//! otherwise the claim's devices would look free between PreBind's two
//! writes and a later pod could be given the same device (upstream's
//! `[DRA] control plane … uses all resources` e2e spec caught exactly
//! that).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::resource::v1 as api;
use kube::ResourceExt;
use rkube_framework::events::{ActionType, ClusterEvent, EventResource};
use rkube_framework::Profiles;
use rkube_model::dra::{
    self, ClaimKey, DeviceClass, DeviceTaintRule, Dra, ResourceClaim, ResourceSlice,
};

use super::{key_of, Change, State};

type Key = (String, String);

/// The DRA objects the scheduler reads.
#[derive(Default)]
pub(crate) struct DraCache {
    classes: Arc<BTreeMap<String, DeviceClass>>,
    slices: BTreeMap<String, ResourceSlice>,
    /// DeviceTaintRules by name.
    taint_rules: BTreeMap<String, DeviceTaintRule>,
    /// `slices` in name order with the taint rules applied (upstream's
    /// ResourceSlice tracker), shared by every view until a slice or a
    /// rule changes.
    slice_list: Arc<Vec<ResourceSlice>>,
    claims: BTreeMap<ClaimKey, Arc<ResourceClaim>>,
    /// Claims as Reserve left them (allocated for a pod in its binding
    /// cycle), over the informer's version, until the informer's version
    /// is allocated too or Unreserve restores the claim.
    assumed: HashMap<Key, Arc<ResourceClaim>>,
    /// The view handed to cycles, rebuilt after each change.
    built: Arc<Dra>,
}

impl DraCache {
    /// The objects as one [`Dra`] (assumed claims win).
    pub(crate) fn view(&self) -> Arc<Dra> {
        self.built.clone()
    }

    fn rebuild(&mut self) {
        let mut claims = self.claims.clone();
        for (k, c) in &self.assumed {
            claims.insert(Arc::new(k.clone()), c.clone());
        }
        self.built = Arc::new(Dra {
            classes: self.classes.clone(),
            slices: self.slice_list.clone(),
            claims,
            templates: BTreeMap::new(),
            taint_rules: self.taint_rules.values().cloned().collect(),
        });
    }

    /// Lists the slices again with the taint rules applied.
    fn relist_slices(&mut self) {
        let list: Vec<ResourceSlice> = self
            .slices
            .values()
            .map(|s| {
                let mut s = s.clone();
                for r in self.taint_rules.values() {
                    r.apply(&mut s);
                }
                s
            })
            .collect();
        self.slice_list = Arc::new(list);
    }

    /// The claim as the informer last sent it.
    pub(crate) fn informer_claim(&self, namespace: &str, name: &str) -> Option<ResourceClaim> {
        self.claims
            .get(&(namespace.to_string(), name.to_string()))
            .map(|c| (**c).clone())
    }

    fn set_claim(&mut self, c: Arc<ResourceClaim>) {
        let key = c.key();
        // The API server's allocation (PreBind's, or a conflicting one,
        // which PreBind will then report) replaces the in-flight one.
        if c.allocation.is_some() {
            self.assumed.remove(&key);
        }
        self.claims.insert(Arc::new(key), c);
    }

    fn remove_claim(&mut self, key: &Key) {
        self.claims.remove(key);
        self.assumed.remove(key);
    }

    /// Drops what was assumed for a claim (one that exists only in the
    /// scheduler's memory, or that was just deleted).
    pub(crate) fn forget(&mut self, key: &Key) {
        if self.assumed.remove(key).is_some() {
            self.rebuild();
        }
    }

    /// The in-memory claim `old` was created as `created`: the created
    /// claim keeps `old`'s in-flight allocation.
    pub(crate) fn swap(&mut self, old: &ResourceClaim, created: &ResourceClaim) {
        let allocation = self
            .assumed
            .remove(&old.key())
            .and_then(|c| c.allocation.clone())
            .or_else(|| old.allocation.clone());
        if let Some(a) = allocation {
            let mut c = created.clone();
            c.allocation = Some(a);
            self.assumed.insert(c.key(), Arc::new(c));
        }
        self.rebuild();
    }

    /// Reserve's allocation, or Unreserve's restore (a claim without an
    /// allocation: the informer's version is the truth again).
    pub(crate) fn assume(&mut self, c: &ResourceClaim) {
        let key = c.key();
        if c.allocation.is_none() {
            self.assumed.remove(&key);
        } else {
            self.assumed.insert(key, Arc::new(c.clone()));
        }
        self.rebuild();
    }
}

fn warn(kind: &str, name: &str, e: impl std::fmt::Display) {
    tracing::warn!(kind, object = %name, error = %e, "ignoring object that cannot be converted");
}

/// Applies one informer change to a map of converted objects; returns
/// what happened to the map (for the queue's event).
fn apply<K, V, F>(
    map: &mut BTreeMap<Key, V>,
    change: Change<K>,
    kind: &str,
    convert: F,
) -> Vec<ActionType>
where
    K: kube::Resource,
    F: Fn(&K) -> Result<V, rkube_model::convert::FieldError>,
{
    let mut actions = Vec::new();
    let put = |map: &mut BTreeMap<Key, V>, o: &K, actions: &mut Vec<ActionType>| {
        let key = key_of(o);
        match convert(o) {
            Ok(v) => {
                let had = map.insert(key, v).is_some();
                actions.push(if had {
                    ActionType::UPDATE
                } else {
                    ActionType::ADD
                });
            }
            Err(e) => {
                warn(kind, &o.name_any(), format!("{}: {}", e.path, e.message));
                if map.remove(&key).is_some() {
                    actions.push(ActionType::DELETE);
                }
            }
        }
    };
    match change {
        Change::Apply(o) => put(map, &o, &mut actions),
        Change::Delete(o) => {
            if map.remove(&key_of(&o)).is_some() {
                actions.push(ActionType::DELETE);
            }
        }
        Change::Replace(list) => {
            let keep: std::collections::BTreeSet<Key> = list.iter().map(key_of).collect();
            let before = map.len();
            map.retain(|k, _| keep.contains(k));
            if map.len() != before {
                actions.push(ActionType::DELETE);
            }
            for o in &list {
                put(map, o, &mut actions);
            }
        }
    }
    actions
}

impl State {
    /// The DRA objects cycles see.
    pub(crate) fn dra_view(&self) -> Arc<Dra> {
        self.dra.view()
    }

    /// Reserve's allocation of a claim, or Unreserve's restore.
    pub(crate) fn assume_dra_claim(&mut self, c: &ResourceClaim) {
        self.dra.assume(c);
        self.set_snapshot_dra();
    }

    /// Forgets what was assumed for a claim (in-memory, or deleted).
    pub(crate) fn forget_dra_claim(&mut self, namespace: &str, name: &str) {
        self.dra.forget(&(namespace.to_string(), name.to_string()));
        self.set_snapshot_dra();
    }

    /// PreBind created the in-memory claim `old` as `created`.
    pub(crate) fn swap_assumed_claim(&mut self, old: &ResourceClaim, created: &ResourceClaim) {
        self.dra.swap(old, created);
        self.set_snapshot_dra();
    }

    /// The claim as the informer last sent it.
    pub fn informer_claim(&self, namespace: &str, name: &str) -> Option<ResourceClaim> {
        self.dra.informer_claim(namespace, name)
    }

    fn set_snapshot_dra(&mut self) {
        let view = self.dra.view();
        self.queue.set_dra(view.clone());
        if let Some(s) = self.snap.as_mut() {
            Arc::make_mut(s).dra = Some(view);
        }
    }

    /// After a DRA change: the snapshot's view is replaced (copy-on-write),
    /// pods the event may help are moved, gated pods re-run PreEnqueue.
    fn dra_changed(
        &mut self,
        profiles: &Profiles,
        resource: EventResource,
        actions: Vec<ActionType>,
        now: Instant,
    ) {
        self.dra.rebuild();
        self.set_snapshot_dra();
        let view = self.dra.view();
        let distinct: std::collections::BTreeSet<ActionType> = actions.into_iter().collect();
        for action in distinct {
            let event = ClusterEvent::new(resource, action);
            self.move_pods(&event, None, None, None, now);
            let moved = self.queue.recheck_gated(
                &event,
                |p| p.has_resource_claims(),
                |p| {
                    profiles.for_pod(p).is_none_or(|fw| {
                        rkube_framework::pre_enqueue_rejection(fw, p, Some(&view)).is_some()
                    })
                },
                now,
            );
            if moved > 0 {
                tracing::debug!(event = %event.label(), moved, "PreEnqueue admits pods now");
            }
        }
    }

    /// Applies a DeviceClass watch event.
    pub fn device_classes_changed(
        &mut self,
        profiles: &Profiles,
        change: Change<api::DeviceClass>,
        now: Instant,
    ) {
        let mut keyed: BTreeMap<Key, DeviceClass> = self
            .dra
            .classes
            .iter()
            .map(|(k, v)| ((String::new(), k.clone()), v.clone()))
            .collect();
        let actions = apply(&mut keyed, change, "DeviceClass", dra::device_class);
        self.dra.classes = Arc::new(keyed.into_iter().map(|((_, k), v)| (k, v)).collect());
        self.dra_changed(profiles, EventResource::DeviceClass, actions, now);
    }

    /// Applies a ResourceSlice watch event.
    pub fn resource_slices_changed(
        &mut self,
        profiles: &Profiles,
        change: Change<api::ResourceSlice>,
        now: Instant,
    ) {
        let mut keyed: BTreeMap<Key, ResourceSlice> = std::mem::take(&mut self.dra.slices)
            .into_iter()
            .map(|(k, v)| ((String::new(), k), v))
            .collect();
        let actions = apply(&mut keyed, change, "ResourceSlice", dra::resource_slice);
        self.dra.slices = keyed.into_iter().map(|((_, k), v)| (k, v)).collect();
        self.dra.relist_slices();
        self.dra_changed(profiles, EventResource::ResourceSlice, actions, now);
    }

    /// Applies a DeviceTaintRule watch event. As upstream's tracker, a
    /// rule is no event of its own: the slices whose devices it taints or
    /// untaints are updated.
    pub fn device_taint_rules_changed(
        &mut self,
        profiles: &Profiles,
        change: Change<api::DeviceTaintRule>,
        now: Instant,
    ) {
        let mut keyed: BTreeMap<Key, DeviceTaintRule> = std::mem::take(&mut self.dra.taint_rules)
            .into_iter()
            .map(|(k, v)| ((String::new(), k), v))
            .collect();
        apply(&mut keyed, change, "DeviceTaintRule", |r| {
            Ok(dra::device_taint_rule(r))
        });
        self.dra.taint_rules = keyed.into_iter().map(|((_, k), v)| (k, v)).collect();
        // Only a rule change pays for the comparison: slices changed when
        // the rule tainted or untainted a device.
        let before = self.dra.slice_list.clone();
        self.dra.relist_slices();
        let actions = if *before != *self.dra.slice_list {
            vec![ActionType::UPDATE]
        } else {
            Vec::new()
        };
        self.dra_changed(profiles, EventResource::ResourceSlice, actions, now);
    }

    /// Applies a ResourceClaim watch event.
    pub fn resource_claims_changed(
        &mut self,
        profiles: &Profiles,
        change: Change<api::ResourceClaim>,
        now: Instant,
    ) {
        let mut actions = Vec::new();
        let put = |cache: &mut DraCache, o: &api::ResourceClaim, actions: &mut Vec<ActionType>| {
            match dra::resource_claim(o) {
                Ok(c) => {
                    let had = cache.claims.contains_key(&c.key());
                    cache.set_claim(Arc::new(c));
                    actions.push(if had {
                        ActionType::UPDATE
                    } else {
                        ActionType::ADD
                    });
                }
                Err(e) => {
                    warn(
                        "ResourceClaim",
                        &o.name_any(),
                        format!("{}: {}", e.path, e.message),
                    );
                    if cache.claims.contains_key(&key_of(o)) {
                        cache.remove_claim(&key_of(o));
                        actions.push(ActionType::DELETE);
                    }
                }
            }
        };
        match change {
            Change::Apply(o) => put(&mut self.dra, &o, &mut actions),
            Change::Delete(o) => {
                if self.dra.claims.contains_key(&key_of(&o)) {
                    self.dra.remove_claim(&key_of(&o));
                    actions.push(ActionType::DELETE);
                }
            }
            Change::Replace(list) => {
                let keep: std::collections::BTreeSet<Key> = list.iter().map(key_of).collect();
                let gone: Vec<Key> = self
                    .dra
                    .claims
                    .keys()
                    .filter(|k| !keep.contains(&***k))
                    .map(|k| (**k).clone())
                    .collect();
                for k in &gone {
                    self.dra.remove_claim(k);
                }
                if !gone.is_empty() {
                    actions.push(ActionType::DELETE);
                }
                for o in &list {
                    put(&mut self.dra, o, &mut actions);
                }
            }
        }
        self.dra_changed(profiles, EventResource::ResourceClaim, actions, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rkube_model::dra::{Allocation, DeviceResult};

    fn claim(rv: &str, allocated: bool, protected: bool) -> ResourceClaim {
        ResourceClaim {
            namespace: "ml".into(),
            name: "c".into(),
            resource_version: rv.into(),
            protected,
            allocation: allocated.then(|| Allocation {
                devices: vec![DeviceResult {
                    request: "gpus".into(),
                    driver: "gpu.example.com".into(),
                    pool: "n1".into(),
                    device: "gpu-0".into(),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn allocated_in_view(cache: &DraCache) -> bool {
        cache.view().claim("ml", "c").unwrap().allocation.is_some()
    }

    #[test]
    fn an_in_flight_allocation_outlives_the_finalizer_write() {
        let mut cache = DraCache::default();
        cache.set_claim(Arc::new(claim("1", false, false)));
        cache.rebuild();
        // Reserve allocates.
        cache.assume(&claim("1", true, true));
        assert!(allocated_in_view(&cache));
        // PreBind's finalizer update comes back first: still allocated.
        cache.set_claim(Arc::new(claim("2", false, true)));
        cache.rebuild();
        assert!(allocated_in_view(&cache), "devices must not look free");
        // The status write lands: the informer's version takes over.
        cache.set_claim(Arc::new(claim("3", true, true)));
        cache.rebuild();
        assert!(allocated_in_view(&cache));
        assert!(cache.assumed.is_empty());
    }

    #[test]
    fn unreserve_gives_the_devices_back() {
        let mut cache = DraCache::default();
        cache.set_claim(Arc::new(claim("1", false, false)));
        cache.assume(&claim("1", true, true));
        cache.set_claim(Arc::new(claim("2", false, true)));
        // The binding cycle failed: Unreserve restores the claim as it was.
        cache.assume(&claim("1", false, false));
        assert!(!allocated_in_view(&cache));
        assert!(cache.assumed.is_empty());
        // The view is the informer's version (with the finalizer).
        assert_eq!(cache.view().claim("ml", "c").unwrap().resource_version, "2");
    }
}
