//! The DRA manager (upstream's `pkg/kubelet/cm/dra/manager.go`): the
//! claim info cache, `PrepareResources` before a pod's sandbox,
//! `UnprepareResources` once its containers stopped, the CDI devices a
//! container gets, and the reconcile loop for pods gone while their claims
//! were prepared.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::{Api, Client, ResourceExt};

use super::claims;
use super::plugins::Plugins;
use super::state::{self, ClaimState};
use super::v1::{Claim, NodePrepareResourcesRequest, NodeUnprepareResourcesRequest};

/// A cached claim.
#[derive(Debug, Clone)]
struct Entry {
    state: ClaimState,
    prepared: bool,
    unpreparing: bool,
}

#[derive(Default)]
struct Cache {
    /// `namespace/name` → claim.
    claims: BTreeMap<String, Entry>,
}

fn key(ns: &str, name: &str) -> String {
    format!("{ns}/{name}")
}

/// The DRA manager of one node.
pub struct Manager {
    client: Option<Client>,
    plugins: Arc<Plugins>,
    cache: Mutex<Cache>,
    /// The checkpoint (`None`: kept in memory only, for tests).
    path: Option<PathBuf>,
}

use rkube_cri::go_status as rpc_error;

/// The claim of `batch` a driver's answer for `uid` is about, or
/// upstream's error when the answer names a claim not asked for or
/// reports that claim's failure (`op` is the call).
fn answered<'a>(op: &str, batch: &'a [Claim], uid: &str, error: &str) -> Result<&'a Claim, String> {
    let Some(claim) = batch.iter().find(|c| c.uid == uid) else {
        return Err(format!("{op} returned result for unknown claim UID {uid}"));
    };
    if !error.is_empty() {
        return Err(format!(
            "{op} failed for ResourceClaim {}: {error}",
            claim.name
        ));
    }
    Ok(claim)
}

/// Upstream's error when a driver answered fewer claims than it was asked.
fn all_answered(op: &str, asked: usize, answers: usize) -> Result<(), String> {
    match asked.saturating_sub(answers) {
        0 => Ok(()),
        n => Err(format!("{op} skipped {n} ResourceClaims")),
    }
}

fn claim_ref(st: &ClaimState) -> Claim {
    Claim {
        namespace: st.namespace.clone(),
        uid: st.claim_uid.clone(),
        name: st.claim_name.clone(),
    }
}

impl Manager {
    /// The manager with the claims of `<root_dir>/dra_manager_state`; a
    /// checkpoint that cannot be read stops the kubelet, as upstream's.
    pub fn open(
        root_dir: &std::path::Path,
        client: Option<Client>,
        plugins: Arc<Plugins>,
    ) -> Result<Manager, String> {
        // As upstream's checkpoint manager, which makes its directory.
        std::fs::create_dir_all(root_dir)
            .map_err(|e| format!("creating {}: {e}", root_dir.display()))?;
        let path = root_dir.join(state::FILE);
        let claims = match rkube_util::file::read_text(&path, state::MAX_BYTES) {
            Ok(text) => state::decode(text.as_bytes()).map_err(|e| {
                format!(
                    "could not initialize checkpoint manager, please drain node and remove DRA state file {}: {e}",
                    path.display()
                )
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => vec![],
            Err(e) => return Err(format!("reading {}: {e}", path.display())),
        };
        let m = Manager::in_memory(client, plugins);
        {
            let mut c = m.lock();
            for st in claims {
                let entry = Entry {
                    state: st,
                    prepared: false,
                    unpreparing: false,
                };
                c.claims
                    .insert(key(&entry.state.namespace, &entry.state.claim_name), entry);
            }
        }
        let m = Manager {
            path: Some(path),
            ..m
        };
        m.store(&m.lock())?;
        Ok(m)
    }

    /// A manager without a checkpoint file.
    pub fn in_memory(client: Option<Client>, plugins: Arc<Plugins>) -> Manager {
        Manager {
            client,
            plugins,
            cache: Mutex::new(Cache::default()),
            path: None,
        }
    }

    /// The drivers' plugins.
    pub fn plugins(&self) -> &Arc<Plugins> {
        &self.plugins
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn store(&self, c: &Cache) -> Result<(), String> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let list: Vec<ClaimState> = c.claims.values().map(|e| e.state.clone()).collect();
        rkube_util::file::replace_private(path, &state::encode(&list))
            .map_err(|e| format!("could not save checkpoint {}: {e}", state::FILE))
    }

    /// Prepares the claims of `pod` (upstream's `PrepareResources`).
    pub async fn prepare(&self, pod: &Pod) -> Result<(), String> {
        self.prepare_inner(pod)
            .await
            .map_err(|e| format!("prepare dynamic resources: {e}"))
    }

    async fn prepare_inner(&self, pod: &Pod) -> Result<(), String> {
        let mut fetched = Vec::new();
        for (name, must_own) in claims::pod_claims(pod)? {
            fetched.push((self.fetch(pod, &name).await?, must_own));
        }
        self.prepare_claims(pod, fetched).await
    }

    /// [`Manager::prepare`] with the pod's claims as read from the API
    /// (each with whether the pod must own it).
    pub async fn prepare_claims(
        &self,
        pod: &Pod,
        fetched: Vec<(ResourceClaim, bool)>,
    ) -> Result<(), String> {
        // Checked first, without touching the cache: a pod that fails here
        // can be deleted without anything to unprepare.
        let mut infos: Vec<ClaimState> = Vec::new();
        for (claim, must_own) in fetched {
            let name = claim.name_any();
            if must_own {
                claims::is_for_pod(pod, &claim)?;
            }
            if !claims::is_reserved_for_pod(pod, &claim) {
                return Err(format!(
                    "pod {} ({}) is not allowed to use ResourceClaim {} ({})",
                    pod.name_any(),
                    pod.uid().unwrap_or_default(),
                    name,
                    claim.uid().unwrap_or_default()
                ));
            }
            let info =
                claims::claim_state(&claim).map_err(|e| format!("ResourceClaim {name}: {e}"))?;
            for driver in info.driver_state.iter().flat_map(|d| d.keys()) {
                self.plugins.get(driver)?;
            }
            infos.push(info);
        }
        let uid = pod.uid().unwrap_or_default();
        // driver → claims to prepare.
        let mut batches: BTreeMap<String, Vec<Claim>> = BTreeMap::new();
        {
            let mut c = self.lock();
            for info in infos {
                let k = key(&info.namespace, &info.claim_name);
                let entry = c.claims.entry(k).or_insert_with(|| Entry {
                    state: info.clone(),
                    prepared: false,
                    unpreparing: false,
                });
                if entry.state.claim_uid != info.claim_uid {
                    return Err(format!(
                        "old ResourceClaim with same name {} and different UID {} still exists (previous pod force-deleted?!)",
                        info.claim_name, entry.state.claim_uid
                    ));
                }
                if entry.unpreparing {
                    return Err(format!(
                        "ResourceClaim {} is being unprepared",
                        info.claim_name
                    ));
                }
                entry.state.pod_uids.insert(uid.clone());
                let (prepared, st) = (entry.prepared, entry.state.clone());
                self.store(&c)
                    .map_err(|e| format!("checkpoint ResourceClaim cache: {e}"))?;
                if prepared {
                    continue;
                }
                for driver in st.driver_state.iter().flat_map(|d| d.keys()) {
                    batches
                        .entry(driver.clone())
                        .or_default()
                        .push(claim_ref(&st));
                }
            }
        }
        let mut done: Vec<String> = Vec::new();
        for (driver, batch) in batches {
            let plugin = self.plugins.get(&driver)?;
            let asked = batch.len();
            let resp = plugin
                .prepare(NodePrepareResourcesRequest {
                    claims: batch.clone(),
                })
                .await
                .map_err(|s| format!("NodePrepareResources: {}", rpc_error(&s)))?;
            for (claim_uid, result) in &resp.claims {
                let asked_for = answered("NodePrepareResources", &batch, claim_uid, &result.error)?;
                let mut c = self.lock();
                let k = key(&asked_for.namespace, &asked_for.name);
                let Some(entry) = c.claims.get_mut(&k) else {
                    return Err(format!(
                        "internal error: unable to get claim info for ResourceClaim {} in namespace {}",
                        asked_for.name, asked_for.namespace
                    ));
                };
                // The driver's answer replaces what it gave before (a
                // retry after a partial success).
                let ds = entry
                    .state
                    .driver_state
                    .get_or_insert_with(BTreeMap::new)
                    .entry(driver.clone())
                    .or_default();
                let devices: Vec<state::Device> =
                    result.devices.iter().map(claims::device).collect();
                ds.devices = (!devices.is_empty()).then_some(devices);
                done.push(k);
            }
            all_answered("NodePrepareResources", asked, resp.claims.len())?;
        }
        let mut c = self.lock();
        for k in done {
            if let Some(e) = c.claims.get_mut(&k) {
                e.prepared = true;
            }
        }
        self.store(&c)
            .map_err(|e| format!("checkpoint ResourceClaim state: {e}"))
    }

    async fn fetch(&self, pod: &Pod, name: &str) -> Result<ResourceClaim, String> {
        let Some(client) = &self.client else {
            return Err(format!(
                "fetch ResourceClaim {name}: the kubelet has no API server"
            ));
        };
        let api: Api<ResourceClaim> =
            Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default());
        api.get(name).await.map_err(|e| {
            format!(
                "fetch ResourceClaim {name}: {}",
                rkube_daemon::client::api_message(&e)
            )
        })
    }

    /// Unprepares the claims of `pod` no other pod uses (upstream's
    /// `UnprepareResources`): idempotent.
    pub async fn unprepare(&self, pod: &Pod) -> Result<(), String> {
        let uid = pod.uid().unwrap_or_default();
        let mut names = self.claims_of(&uid);
        // Not in the cache (its checkpoint removed): the pod's own claims.
        if names.is_empty() {
            names = claims::pod_claims(pod)
                .map_err(|e| format!("unprepare dynamic resources: {e}"))?
                .into_iter()
                .map(|(n, _)| n)
                .collect();
        }
        self.unprepare_claims(&uid, &pod.namespace().unwrap_or_default(), &names)
            .await
            .map_err(|e| format!("unprepare dynamic resources: {e}"))
    }

    fn claims_of(&self, uid: &str) -> Vec<String> {
        self.lock()
            .claims
            .values()
            .filter(|e| e.state.pod_uids.contains(uid))
            .map(|e| e.state.claim_name.clone())
            .collect()
    }

    async fn unprepare_claims(&self, uid: &str, ns: &str, names: &[String]) -> Result<(), String> {
        let mut batches: BTreeMap<String, Vec<Claim>> = BTreeMap::new();
        let mut gone: Vec<String> = Vec::new();
        {
            let mut c = self.lock();
            for name in names {
                let k = key(ns, name);
                let Some(entry) = c.claims.get_mut(&k) else {
                    continue;
                };
                if !entry.state.pod_uids.contains(uid) {
                    continue;
                }
                if entry.state.pod_uids.len() > 1 {
                    entry.state.pod_uids.remove(uid);
                    continue;
                }
                entry.unpreparing = true;
                for driver in entry.state.driver_state.iter().flat_map(|d| d.keys()) {
                    batches
                        .entry(driver.clone())
                        .or_default()
                        .push(claim_ref(&entry.state));
                }
                gone.push(k);
            }
        }
        for (driver, batch) in batches {
            let plugin = self.plugins.get(&driver)?;
            let asked = batch.len();
            let resp = plugin
                .unprepare(NodeUnprepareResourcesRequest {
                    claims: batch.clone(),
                })
                .await
                .map_err(|s| format!("NodeUnprepareResources: {}", rpc_error(&s)))?;
            for (claim_uid, result) in &resp.claims {
                answered("NodeUnprepareResources", &batch, claim_uid, &result.error)?;
            }
            all_answered("NodeUnprepareResources", asked, resp.claims.len())?;
        }
        let mut c = self.lock();
        for k in gone {
            c.claims.remove(&k);
        }
        self.store(&c)
            .map_err(|e| format!("checkpoint ResourceClaim state: {e}"))
    }

    /// Whether pod `uid` still holds a claim to unprepare (its deletion
    /// waits for it).
    pub fn might_need_unprepare(&self, uid: &str) -> bool {
        self.lock()
            .claims
            .values()
            .any(|e| e.state.pod_uids.contains(uid))
    }

    /// The CDI devices container `c` of `pod` gets from its claims
    /// (upstream's `GetResources`).
    pub fn cdi_devices(&self, pod: &Pod, c: &Container) -> Result<Vec<String>, String> {
        let ns = pod.namespace().unwrap_or_default();
        let cache = self.lock();
        let mut out = Vec::new();
        for (claim, requests) in claims::container_requests(pod, c)? {
            let Some(entry) = cache.claims.get(&key(&ns, &claim)) else {
                return Err(format!(
                    "internal error: unable to get claim info for ResourceClaim {claim} in namespace {ns}"
                ));
            };
            for r in requests {
                out.extend(claims::cdi_devices(&entry.state, &r));
            }
        }
        Ok(out)
    }

    /// The claims container `c` uses, as cached (upstream's
    /// `GetContainerClaimInfos`): for the pod-resources API.
    pub fn container_claims(&self, pod: &Pod, c: &Container) -> Vec<ClaimState> {
        let ns = pod.namespace().unwrap_or_default();
        let mut names: Vec<String> = Vec::new();
        let wanted = claims::container_claim_refs(c);
        for pc in claims::pod_resource_claims(pod) {
            if !wanted.iter().any(|w| w.name == pc.name) {
                continue;
            }
            match claims::claim_name(pod, pc) {
                Ok((Some(n), _)) => names.push(n),
                Ok((None, _)) => {}
                Err(_) => return vec![],
            }
        }
        if let Some(ext) = pod
            .status
            .as_ref()
            .and_then(|s| s.extended_resource_claim_status.as_ref())
        {
            if ext
                .request_mappings
                .iter()
                .any(|m| m.container_name == c.name)
            {
                names.push(ext.resource_claim_name.clone());
            }
        }
        let cache = self.lock();
        let mut out = Vec::new();
        for n in names {
            match cache.claims.get(&key(&ns, &n)) {
                Some(e) => out.push(e.state.clone()),
                None => return vec![],
            }
        }
        out
    }

    /// The `allocatedResourcesStatus` of each container of `status` that
    /// uses claims (upstream's `UpdateAllocatedResourcesStatus`): per claim
    /// (`claim:<name>`, or `claim:<name>/<request>`), the health of each
    /// of its devices, by the device's first CDI ID (else
    /// `<driver>/<pool>/<device>`), with the driver's message. A claim
    /// the cache does not hold, or with no device, is left out.
    pub fn set_allocated_resources_status(
        &self,
        pod: &Pod,
        status: &mut k8s_openapi::api::core::v1::PodStatus,
    ) {
        use k8s_openapi::api::core::v1::{ResourceHealth, ResourceStatus};
        let ns = pod.namespace().unwrap_or_default();
        let now = k8s_openapi::jiff::Timestamp::now();
        let health = self.plugins.health();
        let spec = pod.spec.as_ref();
        let cache = self.lock();
        for cs in status.container_statuses.iter_mut().flatten() {
            let Some(c) = spec
                .into_iter()
                .flat_map(|s| &s.containers)
                .find(|c| c.name == cs.name)
            else {
                continue;
            };
            let wanted = claims::container_claim_refs(c);
            if wanted.is_empty() {
                continue;
            }
            // Entries of others (the device plugins') are kept.
            let mut out: Vec<ResourceStatus> = cs
                .allocated_resources_status
                .take()
                .unwrap_or_default()
                .into_iter()
                .filter(|r| !r.name.starts_with("claim:"))
                .collect();
            for w in wanted {
                let Some(pc) = claims::pod_resource_claims(pod)
                    .iter()
                    .find(|pc| pc.name == w.name)
                else {
                    continue;
                };
                let Ok((Some(name), _)) = claims::claim_name(pod, pc) else {
                    continue;
                };
                let Some(entry) = cache.claims.get(&key(&ns, &name)) else {
                    continue;
                };
                let request = w.request.as_deref().unwrap_or("");
                let base = request.split('/').next().unwrap_or("");
                let mut resources: Vec<ResourceHealth> = Vec::new();
                for (driver, ds) in entry.state.driver_state.iter().flatten() {
                    for d in ds.devices.iter().flatten() {
                        let names = d.request_names.as_deref().unwrap_or_default();
                        if !request.is_empty()
                            && !names.is_empty()
                            && !names.iter().any(|n| n == base)
                        {
                            continue;
                        }
                        let id = match d.cdi_device_ids.as_deref().and_then(|c| c.first()) {
                            Some(cdi) => cdi.clone(),
                            None => format!("{driver}/{}/{}", d.pool_name, d.device_name),
                        };
                        if resources.iter().any(|r| r.resource_id == id) {
                            continue;
                        }
                        let (h, message) = health.get(driver, &d.pool_name, &d.device_name, now);
                        resources.push(ResourceHealth {
                            health: Some(h.as_str().to_string()),
                            message: (!message.is_empty()).then_some(message),
                            resource_id: id,
                        });
                    }
                }
                if resources.is_empty() {
                    continue;
                }
                let rname = match request {
                    "" => format!("claim:{}", w.name),
                    r => format!("claim:{}/{r}", w.name),
                };
                out.push(ResourceStatus {
                    name: rname,
                    resources: Some(resources),
                });
            }
            cs.allocated_resources_status = (!out.is_empty()).then_some(out);
        }
    }

    /// Unprepares the claims of pods that are no longer active
    /// (`is_active` says which are): upstream's reconcile loop.
    pub async fn reconcile(&self, is_active: &(dyn Fn(&str) -> bool + Send + Sync)) {
        let mut inactive: HashMap<String, (String, Vec<String>)> = HashMap::new();
        for e in self.lock().claims.values() {
            for uid in &e.state.pod_uids {
                if is_active(uid) {
                    continue;
                }
                inactive
                    .entry(uid.clone())
                    .or_insert_with(|| (e.state.namespace.clone(), vec![]))
                    .1
                    .push(e.state.claim_name.clone());
            }
        }
        for (uid, (ns, names)) in inactive {
            if let Err(e) = self.unprepare_claims(&uid, &ns, &names).await {
                tracing::info!(pod_uid = %uid, error = %e, "Unpreparing pod resources in reconcile loop failed, will retry");
            }
        }
    }
}

#[cfg(test)]
#[path = "manager_tests.rs"]
mod tests;
