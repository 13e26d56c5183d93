//! The device manager's state and decisions (upstream's `ManagerImpl`):
//! the plugins' endpoints and devices, which devices each container
//! holds, the allocation at admission, what a container is created with,
//! the node's capacity, and the checkpoint.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use tonic::transport::Channel;

use super::checkpoint::{self, Data};
use super::pod_devices::{Allocation, PodDevices, RunOptions, NO_TOPOLOGY};
use super::v1beta1::device_plugin_client::DevicePluginClient;
use super::v1beta1::{
    AllocateRequest, ContainerAllocateRequest, ContainerPreferredAllocationRequest, Device,
    DevicePluginOptions, PreStartContainerRequest, PreferredAllocationRequest,
};
use crate::pod::{is_sidecar, pod_key};

/// A plugin's health word for a usable device.
pub const HEALTHY: &str = "Healthy";

/// How long a resource whose last plugin went away stays on the node (at
/// its devices, all unhealthy) before it is reported removed
/// (`endpointStopGracePeriod`).
pub const STOP_GRACE: Duration = Duration::from_secs(5 * 60);

/// `PreStartContainer`'s deadline (`KubeletPreStartContainerRPCTimeoutInSecs`).
pub const PRE_START_TIMEOUT: Duration = Duration::from_secs(30);

/// The deadline of `Allocate` and `GetPreferredAllocation`. Upstream sets
/// none (a plugin that never answers holds the pod's admission forever);
/// rkube gives up after this and refuses the pod.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// One plugin's connection.
#[derive(Clone)]
pub(super) struct Endpoint {
    pub socket: PathBuf,
    /// `None` for a resource known only from the checkpoint.
    pub client: Option<DevicePluginClient<Channel>>,
    pub options: Option<DevicePluginOptions>,
    pub stopped: Option<Instant>,
}

impl Endpoint {
    fn expired(&self) -> bool {
        self.stopped.is_some_and(|t| t.elapsed() > STOP_GRACE)
    }
}

#[derive(Default)]
pub(super) struct State {
    /// resource → the endpoint calls go to.
    pub endpoints: HashMap<String, Endpoint>,
    /// resource → socket → every connected endpoint.
    pub store: HashMap<String, HashMap<PathBuf, Endpoint>>,
    /// resource → device ID → device, as last listed.
    pub all: HashMap<String, BTreeMap<String, Device>>,
    pub healthy: BTreeMap<String, BTreeSet<String>>,
    pub unhealthy: BTreeMap<String, BTreeSet<String>>,
    /// resource → devices held by containers.
    pub allocated: BTreeMap<String, BTreeSet<String>>,
    pub pods: PodDevices,
    /// The devices a pod's finished init containers leave to its next
    /// containers (one pod at a time, as admission goes).
    reuse: Option<(String, BTreeMap<String, BTreeSet<String>>)>,
    /// Resources reported removed, kept at zero (upstream keeps them in
    /// the Node's capacity so that they are known as device plugin
    /// resources).
    removed: BTreeSet<String>,
}

/// The device manager. Cheap to share; every method takes the lock for
/// its own bookkeeping only, never across a call to a plugin.
pub struct Manager {
    pub(super) dir: PathBuf,
    pub(super) state: Mutex<State>,
}

/// The limits of container `c` of `pod`, without the extended resources
/// the scheduler mapped to a DRA claim for it (upstream's
/// `isDRAExtendedResource`: those are DRA's, even when a device plugin
/// serves the same resource on the node).
fn container_limits(pod: &Pod, c: &Container) -> Vec<(String, i64)> {
    let backed_by_dra =
        |resource: &str| crate::dra::claims::is_dra_extended_resource(pod, &c.name, resource);
    c.resources
        .as_ref()
        .and_then(|r| r.limits.as_ref())
        .map(|l| {
            l.iter()
                .filter(|(k, _)| !backed_by_dra(k))
                .map(|(k, v)| (k.clone(), quantity_value(v)))
                .collect()
        })
        .unwrap_or_default()
}

/// A whole count of devices (`Quantity.Value()`, rounded up).
fn quantity_value(q: &Quantity) -> i64 {
    rkube_model::quantity::Quantity::parse(&q.0).map_or(0, |v| v.value())
}

impl Manager {
    /// A manager whose plugins register in `dir` (`<root-dir>/device-plugins`),
    /// with the checkpoint found there read back: what containers hold,
    /// and the resources registered before, at zero devices until their
    /// plugins register again.
    pub fn open(dir: &Path) -> Manager {
        let m = Manager {
            dir: dir.to_path_buf(),
            state: Mutex::new(State::default()),
        };
        let path = dir.join(checkpoint::FILE);
        match rkube_util::file::read_text(&path, checkpoint::MAX_BYTES) {
            Ok(text) => match checkpoint::decode(text.as_bytes()) {
                Ok(data) => m.restore(&data),
                // As upstream: the kubelet goes on without it.
                Err(e) => {
                    tracing::error!(file = %path.display(), error = %e, "device manager checkpoint unreadable; device allocations may not be up to date")
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::error!(file = %path.display(), error = %e, "reading the device manager checkpoint")
            }
        }
        m
    }

    fn restore(&self, data: &Data) {
        let (pods, skipped) = PodDevices::from_entries(data.entries.as_deref().unwrap_or_default());
        for s in skipped {
            tracing::error!(entry = %s, "device manager checkpoint entry unreadable; left out");
        }
        let mut st = self.lock();
        st.allocated = pods.devices();
        st.pods = pods;
        for r in data.registered.iter().flatten().map(|(r, _)| r) {
            st.healthy.insert(r.clone(), BTreeSet::new());
            st.unhealthy.insert(r.clone(), BTreeSet::new());
            st.endpoints.insert(
                r.clone(),
                Endpoint {
                    socket: PathBuf::new(),
                    client: None,
                    options: None,
                    stopped: Some(Instant::now()),
                },
            );
        }
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Frees the devices of pod `uid` (it ended: terminal, or deleted
    /// and its containers stopped), as upstream frees those of pods no
    /// longer active.
    pub fn release(&self, uid: &str) {
        self.retain(&|u| u != uid);
    }

    /// Frees the devices of every pod `keep` refuses (after the first pod
    /// list: pods the API no longer has).
    pub fn retain(&self, keep: &dyn Fn(&str) -> bool) {
        {
            let mut st = self.lock();
            let gone: Vec<String> = st.pods.pods().into_iter().filter(|u| !keep(u)).collect();
            if gone.is_empty() {
                return;
            }
            tracing::info!(pods = ?gone, "freeing the devices of pods that ended");
            st.pods.remove_pods(&gone);
            st.allocated = st.pods.devices();
        }
        if let Err(e) = self.write_checkpoint() {
            tracing::error!(error = %e, "writing the device manager checkpoint");
        }
    }

    fn checkpoint_data(st: &State) -> Data {
        let entries = st.pods.to_entries();
        Data {
            entries: (!entries.is_empty()).then_some(entries),
            registered: Some(
                st.healthy
                    .iter()
                    .map(|(r, d)| (r.clone(), Some(d.iter().cloned().collect())))
                    .collect(),
            ),
        }
    }

    /// Writes the checkpoint (`kubelet_internal_checkpoint`).
    pub(super) fn write_checkpoint(&self) -> Result<(), String> {
        let bytes = checkpoint::encode(&Self::checkpoint_data(&self.lock()));
        let path = self.dir.join(checkpoint::FILE);
        rkube_util::file::replace_private(&path, &bytes).map_err(|e| {
            format!(
                "failed to write checkpoint file {:?}: {e}",
                checkpoint::FILE
            )
        })
    }

    /// A plugin's new device list for `resource` (upstream's
    /// `genericDeviceUpdateCallback`).
    pub(super) fn devices_listed(&self, resource: &str, devices: Vec<Device>) {
        {
            let mut st = self.lock();
            let mut healthy = BTreeSet::new();
            let mut unhealthy = BTreeSet::new();
            let mut all = BTreeMap::new();
            for d in devices {
                if d.health == HEALTHY {
                    healthy.insert(d.id.clone());
                } else {
                    unhealthy.insert(d.id.clone());
                }
                all.insert(d.id.clone(), d);
            }
            tracing::info!(%resource, total = all.len(), healthy = healthy.len(), "device plugin listed its devices");
            st.healthy.insert(resource.to_string(), healthy);
            st.unhealthy.insert(resource.to_string(), unhealthy);
            st.all.insert(resource.to_string(), all);
            st.removed.remove(resource);
        }
        if let Err(e) = self.write_checkpoint() {
            tracing::error!(error = %e, "writing the device manager checkpoint");
        }
    }

    /// A plugin connected (upstream's `PluginConnected`).
    pub(super) fn connected(&self, resource: &str, e: Endpoint) -> Result<(), String> {
        let mut st = self.lock();
        let sockets = st.store.entry(resource.to_string()).or_default();
        if sockets.contains_key(&e.socket) {
            return Err(format!(
                "device plugin already connected: {}",
                e.socket.display()
            ));
        }
        sockets.insert(e.socket.clone(), e.clone());
        st.endpoints.insert(resource.to_string(), e);
        tracing::info!(%resource, "device plugin connected");
        Ok(())
    }

    /// A plugin's stream ended (upstream's `PluginDisconnected`): the
    /// resource's devices turn unhealthy when it was the last plugin.
    pub(super) fn disconnected(&self, resource: &str, socket: &Path) {
        let mut st = self.lock();
        let Some(sockets) = st.store.get_mut(resource) else {
            return;
        };
        if sockets.remove(socket).is_none() {
            return;
        }
        if let Some(e) = st
            .endpoints
            .get_mut(resource)
            .filter(|e| e.socket == socket)
        {
            e.stopped = Some(Instant::now());
        }
        let remaining = st
            .store
            .get(resource)
            .and_then(|s| s.values().next().cloned());
        match remaining {
            Some(other) => {
                st.endpoints.insert(resource.to_string(), other);
            }
            None => {
                st.store.remove(resource);
                let healthy = st.healthy.insert(resource.to_string(), BTreeSet::new());
                st.unhealthy
                    .entry(resource.to_string())
                    .or_default()
                    .extend(healthy.into_iter().flatten());
                tracing::info!(%resource, "last device plugin of the resource disconnected; its devices are unhealthy");
            }
        }
    }

    /// The node's device plugin resources (upstream's `GetCapacity`):
    /// capacity (healthy and unhealthy devices), allocatable (healthy), and
    /// the resources removed now (their plugin gone for [`STOP_GRACE`]),
    /// which stay at zero.
    pub fn capacity(&self) -> (BTreeMap<String, Quantity>, BTreeMap<String, Quantity>) {
        let count = |n: usize| Quantity(n.to_string());
        let mut capacity = BTreeMap::new();
        let mut allocatable = BTreeMap::new();
        let mut deleted = BTreeSet::new();
        let mut st = self.lock();
        let names: BTreeSet<String> = st
            .healthy
            .keys()
            .chain(st.unhealthy.keys())
            .cloned()
            .collect();
        for r in names {
            let live = st.endpoints.get(&r).is_some_and(|e| !e.expired());
            if !live {
                deleted.insert(r);
                continue;
            }
            let healthy = st.healthy.get(&r).map_or(0, BTreeSet::len);
            let unhealthy = st.unhealthy.get(&r).map_or(0, BTreeSet::len);
            capacity.insert(r.clone(), count(healthy + unhealthy));
            allocatable.insert(r, count(healthy));
        }
        for r in &deleted {
            st.endpoints.remove(r);
            st.healthy.remove(r);
            st.unhealthy.remove(r);
            tracing::info!(resource = %r, "device plugin resource removed; its capacity is 0");
        }
        st.removed.extend(deleted.iter().cloned());
        for r in &st.removed {
            capacity.insert(r.clone(), count(0));
            allocatable.insert(r.clone(), count(0));
        }
        drop(st);
        if !deleted.is_empty() {
            if let Err(e) = self.write_checkpoint() {
                tracing::error!(error = %e, "writing the device manager checkpoint");
            }
        }
        (capacity, allocatable)
    }

    /// Whether the node's `resource` is a device plugin resource (listed,
    /// held, or reported removed): the kubelet reports it, not another
    /// client.
    pub fn owns(&self, resource: &str) -> bool {
        let st = self.lock();
        st.healthy.contains_key(resource)
            || st.unhealthy.contains_key(resource)
            || st.allocated.contains_key(resource)
            || st.removed.contains(resource)
    }

    fn is_device_resource(&self, resource: &str) -> bool {
        let st = self.lock();
        st.healthy.contains_key(resource) || st.allocated.contains_key(resource)
    }

    /// Whether `pod` asks for a device plugin resource (only those pods
    /// need [`Manager::allocate_pod`]).
    pub fn wants_devices(&self, pod: &Pod) -> bool {
        all_containers(pod).iter().any(|c| {
            container_limits(pod, c)
                .iter()
                .any(|(r, _)| self.is_device_resource(r))
        })
    }

    /// Admission (upstream's resource allocation admit handler, before the
    /// predicates): devices for each init container, then each app
    /// container. `Err` is the message after "Allocate failed due to ".
    pub async fn allocate_pod(&self, pod: &Pod) -> Result<(), String> {
        let spec = pod.spec.as_ref();
        for c in spec
            .and_then(|s| s.init_containers.as_deref())
            .unwrap_or_default()
        {
            self.allocate(pod, c, Some(is_sidecar(c))).await?;
        }
        for c in spec.map(|s| s.containers.as_slice()).unwrap_or_default() {
            self.allocate(pod, c, None).await?;
        }
        Ok(())
    }

    /// Upstream's `Allocate` for one container (`init`: whether it is an
    /// init container, and if so whether it is a sidecar).
    async fn allocate(&self, pod: &Pod, c: &Container, init: Option<bool>) -> Result<(), String> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let mut reuse = {
            let mut st = self.lock();
            match st.reuse.take() {
                Some((u, r)) if u == uid => r,
                _ => BTreeMap::new(),
            }
        };
        let result = self.allocate_container(pod, c, &reuse).await;
        {
            let mut st = self.lock();
            if result.is_ok() {
                match init {
                    Some(false) => st.pods.add_reusable(&uid, &c.name, &mut reuse),
                    _ => st.pods.remove_reusable(&uid, &c.name, &mut reuse),
                }
            }
            st.reuse = Some((uid, reuse));
        }
        result
    }

    async fn allocate_container(
        &self,
        pod: &Pod,
        c: &Container,
        reuse: &BTreeMap<String, BTreeSet<String>>,
    ) -> Result<(), String> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let mut changed = false;
        for (resource, needed) in container_limits(pod, c) {
            if !self.is_device_resource(&resource) {
                continue;
            }
            let empty = BTreeSet::new();
            let reusable = reuse.get(&resource).unwrap_or(&empty);
            // What is in use, as the containers' records say (after a
            // failure that marked devices taken).
            let restore = || {
                let mut st = self.lock();
                st.allocated = st.pods.devices();
            };
            let devs = match self
                .devices_to_allocate(&uid, &c.name, &resource, needed, reusable)
                .await
            {
                Ok(Some(d)) => d,
                Ok(None) => continue,
                Err(e) => {
                    restore();
                    return Err(e);
                }
            };
            changed = true;
            let endpoint = self.lock().endpoints.get(&resource).cloned();
            let Some(ep) = endpoint else {
                restore();
                return Err(format!("unknown Device Plugin {resource}"));
            };
            let ids: Vec<String> = devs.iter().cloned().collect();
            tracing::info!(pod = %pod_key(pod), container = %c.name, %resource, devices = ?ids, "allocating devices");
            let resp = match call_allocate(&ep, ids).await {
                Ok(r) => r,
                Err(e) => {
                    restore();
                    return Err(e);
                }
            };
            let Some(first) = resp.container_responses.into_iter().next() else {
                restore();
                return Err("no containers return in allocation response".into());
            };
            let mut st = self.lock();
            let mut by_numa: BTreeMap<i64, Vec<String>> = BTreeMap::new();
            for d in &devs {
                let nodes: Vec<i64> = st
                    .all
                    .get(&resource)
                    .and_then(|a| a.get(d))
                    .and_then(|d| d.topology.as_ref())
                    .map(|t| t.nodes.iter().map(|n| n.id).collect())
                    .unwrap_or_default();
                if nodes.is_empty() {
                    by_numa.entry(NO_TOPOLOGY).or_default().push(d.clone());
                }
                for n in nodes {
                    by_numa.entry(n).or_default().push(d.clone());
                }
            }
            st.pods.insert(
                &uid,
                &c.name,
                &resource,
                Allocation {
                    ids: by_numa,
                    resp: first,
                },
            );
        }
        if changed {
            self.write_checkpoint()?;
        }
        Ok(())
    }

    /// Upstream's `devicesToAllocate`: the devices to ask the plugin for,
    /// `None` when the container holds what it needs already.
    async fn devices_to_allocate(
        &self,
        uid: &str,
        container: &str,
        resource: &str,
        required: i64,
        reusable: &BTreeSet<String>,
    ) -> Result<Option<BTreeSet<String>>, String> {
        let required = usize::try_from(required).unwrap_or(0);
        let mut needed = required;
        let mut allocated = BTreeSet::new();
        let (available, endpoint) = {
            let mut st = self.lock();
            let held = st.pods.container_devices(uid, container, resource);
            if let Some(h) = &held {
                if h.len() != required {
                    return Err(format!(
                        "pod {uid:?} container {container:?} changed request for resource {resource:?} from {} to {required}",
                        h.len()
                    ));
                }
                needed = 0;
            }
            let Some(healthy) = st.healthy.get(resource) else {
                return Err(format!("cannot allocate unregistered device {resource}"));
            };
            if healthy.is_empty() {
                return Err(format!(
                    "no healthy devices present; cannot allocate unhealthy devices {resource}"
                ));
            }
            if held.as_ref().is_some_and(|h| !h.is_subset(healthy)) {
                return Err(format!("previously allocated devices are no longer healthy; cannot allocate unhealthy devices {resource}"));
            }
            if needed == 0 {
                return Ok(None);
            }
            let in_use = st.allocated.entry(resource.to_string()).or_default();
            for d in reusable {
                if needed == 0 {
                    break;
                }
                if allocated.insert(d.clone()) {
                    in_use.insert(d.clone());
                    needed -= 1;
                }
            }
            if needed == 0 {
                return Ok(Some(allocated));
            }
            let in_use = st.allocated.get(resource).cloned().unwrap_or_default();
            let available: BTreeSet<String> = st
                .healthy
                .get(resource)
                .map(|h| h.difference(&in_use).cloned().collect())
                .unwrap_or_default();
            if available.len() < needed {
                return Err(format!(
                    "requested number of devices unavailable for {resource}. Requested: {needed}, Available: {}",
                    available.len()
                ));
            }
            (available, st.endpoints.get(resource).cloned())
        };
        // Without topology alignment (no topology manager policy), the
        // plugin may prefer some of the available devices, then any.
        let wants_preference = endpoint
            .as_ref()
            .and_then(|e| e.options.as_ref())
            .is_some_and(|o| o.get_preferred_allocation_available);
        let mut preferred = BTreeSet::new();
        if wants_preference {
            let Some(ep) = endpoint else {
                return Err(format!(
                    "endpoint not found in cache for a registered resource: {resource}"
                ));
            };
            let offered: Vec<String> = available.union(&allocated).cloned().collect();
            preferred =
                call_preferred(&ep, offered, allocated.iter().cloned().collect(), required).await?;
        }
        let mut st = self.lock();
        let in_use = st.allocated.entry(resource.to_string()).or_default();
        for d in preferred.intersection(&available).chain(available.iter()) {
            if needed == 0 {
                break;
            }
            if !in_use.contains(d) && allocated.insert(d.clone()) {
                in_use.insert(d.clone());
                needed -= 1;
            }
        }
        if needed > 0 {
            return Err(format!(
                "unexpectedly allocated less resources than required. Requested: {required}, Got: {}",
                required - needed
            ));
        }
        Ok(Some(allocated))
    }

    /// What container `c` of `pod` is created with for its devices
    /// (upstream's `GetDeviceRunContainerOptions`): `PreStartContainer`
    /// first where the plugin asks for it; devices allocated now if the
    /// container holds none yet (a pod admitted before the checkpoint had
    /// them).
    pub async fn run_options(
        &self,
        pod: &Pod,
        c: &Container,
    ) -> Result<Option<RunOptions>, String> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let mut reallocate = false;
        for (resource, n) in container_limits(pod, c) {
            if n == 0 || !self.is_device_resource(&resource) {
                continue;
            }
            let (ep, held) = {
                let st = self.lock();
                (
                    st.endpoints.get(&resource).cloned(),
                    st.pods.container_devices(&uid, &c.name, &resource),
                )
            };
            let Some(ep) = ep else {
                return Err(format!(
                    "endpoint not found in cache for a registered resource: {resource}"
                ));
            };
            if ep.options.as_ref().is_some_and(|o| o.pre_start_required) {
                let Some(devs) = &held else {
                    return Err(format!("no devices found allocated in local cache for pod {uid}, container {}, resource {resource}", c.name));
                };
                call_pre_start(&ep, devs.iter().cloned().collect())
                    .await
                    .map_err(|e| {
                        format!("device plugin PreStartContainer rpc failed with err: {e}")
                    })?;
            }
            if held.is_none() {
                reallocate = true;
            }
        }
        if reallocate {
            tracing::info!(pod = %pod_key(pod), container = %c.name, "re-allocating device plugin resources");
            let init = pod
                .spec
                .as_ref()
                .and_then(|s| s.init_containers.as_ref())
                .and_then(|i| i.iter().find(|i| i.name == c.name))
                .map(is_sidecar);
            self.allocate(pod, c, init).await?;
        }
        Ok(self.lock().pods.run_options(&uid, &c.name))
    }

    /// The `allocatedResourcesStatus` of the containers of pod `uid` that
    /// hold devices (upstream's `UpdateAllocatedResourcesStatus` of the
    /// device manager, `ResourceHealthStatus`): per resource, each device
    /// the container holds with its health in the plugin's last list
    /// (`Healthy` when the plugin has not listed it), by device ID. An entry
    /// of the same name is replaced, others are kept.
    pub fn set_allocated_resources_status(
        &self,
        uid: &str,
        status: &mut k8s_openapi::api::core::v1::PodStatus,
    ) {
        use k8s_openapi::api::core::v1::{ResourceHealth, ResourceStatus};
        let st = self.lock();
        for cs in status.container_statuses.iter_mut().flatten() {
            for (resource, a) in st.pods.container(uid, &cs.name).into_iter().flatten() {
                let resources = a
                    .devices()
                    .into_iter()
                    .map(|id| {
                        let healthy = st
                            .all
                            .get(resource)
                            .and_then(|listed| listed.get(&id))
                            .is_none_or(|d| d.health == HEALTHY);
                        ResourceHealth {
                            health: Some(if healthy { "Healthy" } else { "Unhealthy" }.into()),
                            message: None,
                            resource_id: id,
                        }
                    })
                    .collect();
                let entry = ResourceStatus {
                    name: resource.clone(),
                    resources: Some(resources),
                };
                let list = cs.allocated_resources_status.get_or_insert_with(Vec::new);
                match list.iter_mut().find(|r| r.name == entry.name) {
                    Some(r) => *r = entry,
                    None => list.push(entry),
                }
            }
        }
    }

    /// The devices `container` of pod `uid` holds: resource → device →
    /// its NUMA nodes (upstream's `GetDevices`).
    pub fn devices_of(
        &self,
        uid: &str,
        container: &str,
    ) -> BTreeMap<String, BTreeMap<String, Vec<i64>>> {
        let st = self.lock();
        let mut out: BTreeMap<String, BTreeMap<String, Vec<i64>>> = BTreeMap::new();
        for (r, a) in st.pods.container(uid, container).into_iter().flatten() {
            let devs = out.entry(r.clone()).or_default();
            for (numa, ids) in &a.ids {
                for id in ids {
                    let nodes = devs.entry(id.clone()).or_default();
                    if *numa != NO_TOPOLOGY {
                        nodes.push(*numa);
                    }
                }
            }
        }
        out
    }

    /// The healthy devices of every plugin: resource → device → its NUMA
    /// nodes (upstream's `GetAllocatableDevices`).
    pub fn allocatable_devices(&self) -> BTreeMap<String, BTreeMap<String, Vec<i64>>> {
        let st = self.lock();
        let mut out: BTreeMap<String, BTreeMap<String, Vec<i64>>> = BTreeMap::new();
        for (r, healthy) in &st.healthy {
            let Some(all) = st.all.get(r) else { continue };
            let devs = out.entry(r.clone()).or_default();
            for id in healthy {
                let nodes = all
                    .get(id)
                    .and_then(|d| d.topology.as_ref())
                    .map(|t| t.nodes.iter().map(|n| n.id).collect())
                    .unwrap_or_default();
                devs.insert(id.clone(), nodes);
            }
        }
        out
    }
}

/// Every container a pod's admission allocates for (init, then app).
fn all_containers(pod: &Pod) -> Vec<&Container> {
    let spec = pod.spec.as_ref();
    spec.and_then(|s| s.init_containers.as_deref())
        .unwrap_or_default()
        .iter()
        .chain(spec.map(|s| s.containers.as_slice()).unwrap_or_default())
        .collect()
}

fn stopped(ep: &Endpoint) -> Result<DevicePluginClient<Channel>, String> {
    match (&ep.client, ep.stopped) {
        (Some(c), None) => Ok(c.clone()),
        _ => Err(format!("endpoint {} has been stopped", ep.socket.display())),
    }
}

async fn call_allocate(
    ep: &Endpoint,
    ids: Vec<String>,
) -> Result<super::v1beta1::AllocateResponse, String> {
    let mut client = stopped(ep)?;
    let req = AllocateRequest {
        container_requests: vec![ContainerAllocateRequest { devices_ids: ids }],
    };
    match tokio::time::timeout(CALL_TIMEOUT, client.allocate(req)).await {
        Ok(Ok(r)) => Ok(r.into_inner()),
        Ok(Err(s)) => Err(rkube_cri::go_status(&s)),
        Err(_) => Err(format!(
            "device plugin Allocate took longer than {CALL_TIMEOUT:?}"
        )),
    }
}

async fn call_preferred(
    ep: &Endpoint,
    available: Vec<String>,
    must_include: Vec<String>,
    size: usize,
) -> Result<BTreeSet<String>, String> {
    let mut client = stopped(ep)?;
    let req = PreferredAllocationRequest {
        container_requests: vec![ContainerPreferredAllocationRequest {
            available_device_i_ds: available,
            must_include_device_i_ds: must_include,
            allocation_size: i32::try_from(size).unwrap_or(i32::MAX),
        }],
    };
    match tokio::time::timeout(CALL_TIMEOUT, client.get_preferred_allocation(req)).await {
        Ok(Ok(r)) => Ok(r
            .into_inner()
            .container_responses
            .into_iter()
            .next()
            .map(|c| c.device_i_ds.into_iter().collect())
            .unwrap_or_default()),
        Ok(Err(s)) => Err(format!(
            "device plugin GetPreferredAllocation rpc failed with err: {}",
            rkube_cri::go_status(&s)
        )),
        Err(_) => Err(format!(
            "device plugin GetPreferredAllocation took longer than {CALL_TIMEOUT:?}"
        )),
    }
}

async fn call_pre_start(ep: &Endpoint, ids: Vec<String>) -> Result<(), String> {
    let mut client = stopped(ep)?;
    let req = PreStartContainerRequest { devices_ids: ids };
    match tokio::time::timeout(PRE_START_TIMEOUT, client.pre_start_container(req)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(s)) => Err(rkube_cri::go_status(&s)),
        Err(_) => Err("context deadline exceeded".into()),
    }
}

#[cfg(test)]
#[path = "manager_tests.rs"]
mod tests;
