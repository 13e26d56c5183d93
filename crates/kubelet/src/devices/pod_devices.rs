//! Which devices each container holds, with the plugin's answer to their
//! `Allocate` (upstream's `podDevices`), to and from the checkpoint, and
//! what a container is run with for them.

use std::collections::{BTreeMap, BTreeSet};

use prost::Message as _;

use super::checkpoint::Entry;
use super::v1beta1::{ContainerAllocateResponse, DeviceSpec, Mount};

/// NUMA node of a device without topology.
pub const NO_TOPOLOGY: i64 = -1;

/// One container's devices of one resource.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Allocation {
    /// Device IDs by NUMA node.
    pub ids: BTreeMap<i64, Vec<String>>,
    /// The plugin's answer.
    pub resp: ContainerAllocateResponse,
}

impl Allocation {
    /// The device IDs, whatever their node.
    pub fn devices(&self) -> BTreeSet<String> {
        self.ids.values().flatten().cloned().collect()
    }
}

/// What a container is run with for its devices (upstream's
/// `DeviceRunContainerOptions`), merged over its resources: the first
/// setting of an env name, a container path or an annotation wins, as
/// upstream's merge keeps the first.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunOptions {
    /// Environment variables, before the container's own.
    pub envs: Vec<(String, String)>,
    /// Bind mounts, before the container's volumes.
    pub mounts: Vec<Mount>,
    /// Device nodes.
    pub devices: Vec<DeviceSpec>,
    /// Container annotations (the kubelet's own win over these).
    pub annotations: Vec<(String, String)>,
    /// Fully qualified CDI device names.
    pub cdi_devices: Vec<String>,
}

/// uid → container → resource → allocation.
#[derive(Debug, Clone, Default)]
pub struct PodDevices {
    pods: BTreeMap<String, BTreeMap<String, BTreeMap<String, Allocation>>>,
}

impl PodDevices {
    /// Records `container`'s devices of `resource`.
    pub fn insert(&mut self, uid: &str, container: &str, resource: &str, a: Allocation) {
        self.pods
            .entry(uid.to_string())
            .or_default()
            .entry(container.to_string())
            .or_default()
            .insert(resource.to_string(), a);
    }

    /// Whether pod `uid` holds anything.
    pub fn has_pod(&self, uid: &str) -> bool {
        self.pods.contains_key(uid)
    }

    /// The pods holding devices.
    pub fn pods(&self) -> BTreeSet<String> {
        self.pods.keys().cloned().collect()
    }

    /// Forgets pods `uids`.
    pub fn remove_pods<'a>(&mut self, uids: impl IntoIterator<Item = &'a String>) {
        for u in uids {
            self.pods.remove(u);
        }
    }

    /// The devices `container` of `uid` holds of `resource`, if any.
    pub fn container_devices(
        &self,
        uid: &str,
        container: &str,
        resource: &str,
    ) -> Option<BTreeSet<String>> {
        self.pods
            .get(uid)?
            .get(container)?
            .get(resource)
            .map(Allocation::devices)
    }

    /// Every resource `container` of `uid` holds.
    pub fn container(&self, uid: &str, container: &str) -> Option<&BTreeMap<String, Allocation>> {
        self.pods.get(uid)?.get(container)
    }

    /// Every device held, by resource (upstream's `devices()`).
    pub fn devices(&self) -> BTreeMap<String, BTreeSet<String>> {
        let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for containers in self.pods.values() {
            for resources in containers.values() {
                for (r, a) in resources {
                    out.entry(r.clone()).or_default().extend(a.devices());
                }
            }
        }
        out
    }

    /// Upstream's `addContainerAllocatedResources`: what `container` (a
    /// finished init container) holds may be reused by the pod's next
    /// containers.
    pub fn add_reusable(
        &self,
        uid: &str,
        container: &str,
        reuse: &mut BTreeMap<String, BTreeSet<String>>,
    ) {
        if let Some(resources) = self.container(uid, container) {
            for (r, a) in resources {
                reuse.entry(r.clone()).or_default().extend(a.devices());
            }
        }
    }

    /// Upstream's `removeContainerAllocatedResources`: what `container`
    /// keeps is no longer reusable.
    pub fn remove_reusable(
        &self,
        uid: &str,
        container: &str,
        reuse: &mut BTreeMap<String, BTreeSet<String>>,
    ) {
        if let Some(resources) = self.container(uid, container) {
            for (r, a) in resources {
                if let Some(set) = reuse.get_mut(r) {
                    for d in a.devices() {
                        set.remove(&d);
                    }
                }
            }
        }
    }

    /// The checkpoint's entries.
    pub fn to_entries(&self) -> Vec<Entry> {
        let mut out = Vec::new();
        for (uid, containers) in &self.pods {
            for (container, resources) in containers {
                for (resource, a) in resources {
                    out.push(Entry {
                        pod_uid: uid.clone(),
                        container: container.clone(),
                        resource: resource.clone(),
                        device_ids: Some(
                            a.ids.iter().map(|(k, v)| (*k, Some(v.clone()))).collect(),
                        ),
                        alloc_resp: Some(a.resp.encode_to_vec()),
                    });
                }
            }
        }
        out
    }

    /// The store of a checkpoint's entries; an entry whose answer cannot
    /// be decoded is left out (as upstream does), with its reason.
    pub fn from_entries(entries: &[Entry]) -> (PodDevices, Vec<String>) {
        let mut out = PodDevices::default();
        let mut skipped = Vec::new();
        for e in entries {
            let bytes = e.alloc_resp.as_deref().unwrap_or_default();
            let resp = match ContainerAllocateResponse::decode(bytes) {
                Ok(r) => r,
                Err(err) => {
                    skipped.push(format!(
                        "pod {} container {} resource {}: {err}",
                        e.pod_uid, e.container, e.resource
                    ));
                    continue;
                }
            };
            let ids = e
                .device_ids
                .iter()
                .flatten()
                .map(|(k, v)| (*k, v.clone().unwrap_or_default()))
                .collect();
            out.insert(
                &e.pod_uid,
                &e.container,
                &e.resource,
                Allocation { ids, resp },
            );
        }
        (out, skipped)
    }

    /// What `container` of `uid` runs with for its devices, `None` when it
    /// holds none.
    pub fn run_options(&self, uid: &str, container: &str) -> Option<RunOptions> {
        let resources = self.container(uid, container)?;
        let mut opts = RunOptions::default();
        let mut envs = BTreeMap::new();
        let mut devs = BTreeMap::new();
        let mut mounts = BTreeMap::new();
        let mut annotations = BTreeMap::new();
        let mut cdi = BTreeSet::new();
        for (resource, a) in resources {
            let r = &a.resp;
            for (k, v) in &r.envs {
                if first(&mut envs, k, v, resource, "environment variable") {
                    opts.envs.push((k.clone(), v.clone()));
                }
            }
            for d in &r.devices {
                if first(
                    &mut devs,
                    &d.container_path,
                    &d.host_path,
                    resource,
                    "device",
                ) {
                    opts.devices.push(d.clone());
                }
            }
            for m in &r.mounts {
                if first(
                    &mut mounts,
                    &m.container_path,
                    &m.host_path,
                    resource,
                    "mount",
                ) {
                    opts.mounts.push(m.clone());
                }
            }
            for (k, v) in &r.annotations {
                if annotations.contains_key(k) {
                    continue;
                }
                annotations.insert(k.clone(), v.clone());
                opts.annotations.push((k.clone(), v.clone()));
            }
            for c in &r.cdi_devices {
                if cdi.insert(c.name.clone()) {
                    opts.cdi_devices.push(c.name.clone());
                }
            }
        }
        Some(opts)
    }
}

/// Records `key` → `value` unless `key` is set already (upstream's merge
/// keeps the first setting, and logs a conflicting one): whether it is new.
fn first(
    seen: &mut BTreeMap<String, String>,
    key: &str,
    value: &str,
    resource: &str,
    what: &str,
) -> bool {
    match seen.get(key) {
        Some(old) => {
            if old != value {
                tracing::warn!(%resource, %key, "device plugins set a {what} differently; the first is kept");
            }
            false
        }
        None => {
            seen.insert(key.to_string(), value.to_string());
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::v1beta1::CdiDevice;
    use super::*;

    fn alloc(
        ids: &[&str],
        env: &[(&str, &str)],
        mount: &[(&str, &str)],
        cdi: &[&str],
    ) -> Allocation {
        Allocation {
            ids: BTreeMap::from([(NO_TOPOLOGY, ids.iter().map(|s| s.to_string()).collect())]),
            resp: ContainerAllocateResponse {
                envs: env
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                mounts: mount
                    .iter()
                    .map(|(c, h)| Mount {
                        container_path: c.to_string(),
                        host_path: h.to_string(),
                        read_only: false,
                    })
                    .collect(),
                cdi_devices: cdi
                    .iter()
                    .map(|n| CdiDevice {
                        name: n.to_string(),
                    })
                    .collect(),
                ..Default::default()
            },
        }
    }

    #[test]
    fn run_options_merge_resources_first_setting_wins() {
        let mut p = PodDevices::default();
        p.insert(
            "u",
            "c",
            "a.io/x",
            alloc(&["x1"], &[("K", "1")], &[("/d", "/h1")], &["a.io/x=1"]),
        );
        p.insert(
            "u",
            "c",
            "b.io/y",
            alloc(
                &["y1"],
                &[("K", "2"), ("L", "3")],
                &[("/d", "/h2"), ("/e", "/h3")],
                &["a.io/x=1", "b.io/y=1"],
            ),
        );
        let o = p.run_options("u", "c").unwrap();
        assert_eq!(
            o.envs,
            vec![("K".into(), "1".into()), ("L".into(), "3".into())]
        );
        let paths: Vec<_> = o
            .mounts
            .iter()
            .map(|m| (m.container_path.as_str(), m.host_path.as_str()))
            .collect();
        assert_eq!(paths, vec![("/d", "/h1"), ("/e", "/h3")]);
        assert_eq!(
            o.cdi_devices,
            vec!["a.io/x=1".to_string(), "b.io/y=1".to_string()]
        );
        assert!(p.run_options("u", "other").is_none());
    }

    #[test]
    fn entries_round_trip_and_devices_are_counted_once() {
        let mut p = PodDevices::default();
        p.insert(
            "u1",
            "c",
            "r",
            alloc(&["d1", "d2"], &[("A", "1")], &[], &[]),
        );
        p.insert("u2", "c", "r", alloc(&["d3"], &[], &[], &[]));
        let (back, skipped) = PodDevices::from_entries(&p.to_entries());
        assert!(skipped.is_empty());
        assert_eq!(back.devices(), p.devices());
        assert_eq!(back.devices()["r"].len(), 3);
        assert_eq!(back.run_options("u1", "c"), p.run_options("u1", "c"));
        let mut bad = p.to_entries();
        bad[0].alloc_resp = Some(vec![0xff, 0xff]);
        let (back, skipped) = PodDevices::from_entries(&bad);
        assert_eq!(skipped.len(), 1);
        assert!(!back.has_pod("u1"));
    }

    #[test]
    fn init_container_devices_are_reused_unless_kept() {
        let mut p = PodDevices::default();
        p.insert("u", "init", "r", alloc(&["d1"], &[], &[], &[]));
        let mut reuse = BTreeMap::new();
        p.add_reusable("u", "init", &mut reuse);
        assert_eq!(reuse["r"], BTreeSet::from(["d1".to_string()]));
        p.insert("u", "main", "r", alloc(&["d1"], &[], &[], &[]));
        p.remove_reusable("u", "main", &mut reuse);
        assert!(reuse["r"].is_empty());
    }
}
