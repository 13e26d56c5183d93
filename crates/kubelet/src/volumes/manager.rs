//! The volume manager of the CRI runtime: before a pod's sandbox and
//! containers are made (and again at every sync, so updates reach running
//! containers), it fetches what the pod's volumes reference from the API
//! server — ConfigMaps and Secrets of the pod's namespace, ServiceAccount
//! tokens through the TokenRequest API bound to the pod — and writes each
//! ConfigMap, Secret, downwardAPI and projected volume under
//! `<root>/pods/<uid>/volumes/<plugin>/<name>` with the atomic writer.
//!
//! Tokens are cached per pod, ServiceAccount, audience and expiry, and
//! requested again once 80 % of their lifetime has passed or they are a day
//! old, as upstream's token manager does; a failed refresh keeps the old
//! token while it is still valid.
//!
//! It also fetches what containers' environment references (ConfigMaps,
//! Secrets, the namespace's Services) when a container is about to be
//! created ([`VolumeManager::env_inputs`]).
//!
//! ConfigMaps and Secrets (of volumes, environments and image pulls) are
//! read from watches ([`crate::objects`]), not fetched at each sync; a
//! pod's watches end with [`VolumeManager::forget`].
//!
//! PersistentVolumeClaim and generic ephemeral volumes ([`persistent`]) are
//! resolved to their bound PersistentVolume once per pod and set up
//! (local volumes bind-mounted, [`local`]); what the containers mount is
//! then [`VolumeManager::claims`].
//!
//! A volume that cannot be set up fails the sync with upstream's wording,
//! `MountVolume.SetUp failed for volume "NAME" : REASON`; the pod's
//! containers then stay `ContainerCreating` and the sync is retried.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, Node, PersistentVolume, PersistentVolumeClaim, Pod, Secret, Service, ServiceAccount,
};
use kube::api::PostParams;
use kube::{Api, Client, ResourceExt};

use super::atomic_writer;
use super::empty_dir;
use super::local;
use super::payload::{self, Lookup, TokenKey};
use super::persistent::{self, Source};
use super::pod_certificate::PodCertificates;
use super::trust_bundle::TrustBundles;
use crate::informer::Informer;
use crate::objects::ObjectCache;
use crate::pod::downward::DownwardContext;
use crate::pod::env;
use crate::pod::{pod_namespace, Dirs};

/// A token is requested again after this share of its lifetime.
const REFRESH_AT: f64 = 0.8;
/// ... or when it is this old, whatever its expiry.
const MAX_AGE: Duration = Duration::from_secs(24 * 3600);

/// A token and when it was issued and expires.
#[derive(Clone)]
struct CachedToken {
    token: String,
    issued: SystemTime,
    expires: SystemTime,
}

impl CachedToken {
    fn needs_refresh(&self, now: SystemTime) -> bool {
        let life = self
            .expires
            .duration_since(self.issued)
            .unwrap_or(Duration::ZERO);
        let age = now.duration_since(self.issued).unwrap_or(Duration::ZERO);
        age >= life.mul_f64(REFRESH_AT) || age >= MAX_AGE
    }

    fn valid(&self, now: SystemTime) -> bool {
        now < self.expires
    }
}

/// (pod uid, ServiceAccount, audience and expiry).
type CacheKey = (String, String, TokenKey);

/// What container environments read (fetched before containers are made).
#[derive(Debug, Default, Clone)]
pub struct EnvInputs {
    /// ConfigMaps that exist, by name.
    pub config_maps: HashMap<String, ConfigMap>,
    /// Secrets that exist, by name.
    pub secrets: HashMap<String, Secret>,
    /// The Services of the pod's namespace.
    pub services: Vec<Service>,
    /// `default/kubernetes`.
    pub master_service: Option<Service>,
}

/// What a container mounts for a claim volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimMount {
    /// The directory on the node.
    pub host_path: PathBuf,
    /// The claim is read-only: so are the containers' mounts.
    pub read_only: bool,
    /// A supplemental group the PersistentVolume asks for.
    pub gid: Option<i64>,
}

/// A pod's claim volumes set up, by pod volume name.
pub type Claims = HashMap<String, ClaimMount>;

/// The claim volumes of a pod, set up: what to mount, and warnings for the
/// pod's events.
#[derive(Debug, Clone, Default)]
pub struct ClaimsReady {
    /// What the containers mount.
    pub claims: Arc<Claims>,
    /// `(reason, message)` of Warning events (upstream's
    /// `AlreadyMountedVolume`).
    pub warnings: Vec<(&'static str, String)>,
}

/// Fetches volume sources and keeps pod volumes written.
pub struct VolumeManager {
    client: Client,
    dirs: Dirs,
    /// This node (the labels PersistentVolumes' node affinity is matched
    /// against).
    node_name: String,
    /// The claim volumes set up, by pod uid.
    claims: Mutex<HashMap<String, Arc<Claims>>>,
    /// CSI volumes (`None`: none can be published).
    csi: Option<Arc<super::csi::publish::Csi>>,
    tokens: Mutex<HashMap<CacheKey, CachedToken>>,
    config_maps: ObjectCache<ConfigMap>,
    secrets: ObjectCache<Secret>,
    trust_bundles: TrustBundles,
    pod_certificates: PodCertificates,
    /// Every Service (the pods' service-link variables).
    services: Informer<Service>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The failure of one volume, in upstream's words.
pub fn setup_failed(volume: &str, reason: &str) -> String {
    format!("MountVolume.SetUp failed for volume {volume:?} : {reason}")
}

impl VolumeManager {
    /// A manager over `client` writing under `dirs.root`.
    pub fn new(client: Client, dirs: Dirs, node_name: String) -> VolumeManager {
        VolumeManager {
            node_name,
            claims: Mutex::new(HashMap::new()),
            csi: None,
            config_maps: ObjectCache::new(client.clone()),
            secrets: ObjectCache::new(client.clone()),
            trust_bundles: TrustBundles::new(client.clone(), super::trust_bundle::NOT_SYNCED),
            services: Informer::new(
                client.clone(),
                "services have not yet been read at least once, cannot construct envvars",
            ),
            pod_certificates: PodCertificates::new(client.clone()),
            client,
            dirs,
            tokens: Mutex::new(HashMap::new()),
        }
    }

    /// Publishes CSI volumes through `csi`.
    pub fn with_csi(mut self, csi: Arc<super::csi::publish::Csi>) -> VolumeManager {
        self.csi = Some(csi);
        self
    }

    /// Unpublishes the CSI volumes of a pod directory (its pod is gone).
    pub async fn tear_down_csi(&self, pod_dir: &std::path::Path) -> Result<(), String> {
        match &self.csi {
            Some(c) => c.tear_down(pod_dir).await,
            None => Ok(()),
        }
    }

    /// ConfigMap `ns/name`, read for the pod `uid`.
    async fn config_map(
        &self,
        uid: &str,
        ns: &str,
        name: &str,
    ) -> Result<Option<ConfigMap>, String> {
        self.config_maps.get(uid, ns, name).await
    }

    /// Secret `ns/name`, read for the pod `uid`.
    async fn secret(&self, uid: &str, ns: &str, name: &str) -> Result<Option<Secret>, String> {
        self.secrets.get(uid, ns, name).await
    }

    /// The pod's image pull Secrets that exist, and the names of those that
    /// could not be read (upstream goes on without them).
    pub async fn pull_secrets(&self, pod: &Pod) -> (Vec<Secret>, Vec<String>) {
        let ns = pod_namespace(pod);
        let uid = pod.uid().unwrap_or_default();
        let (mut found, mut missing) = (Vec::new(), Vec::new());
        for name in crate::pod::pull_secret_names(pod) {
            match self.secret(&uid, &ns, &name).await {
                Ok(Some(s)) => found.push(s),
                Ok(None) => missing.push(name),
                Err(e) => {
                    tracing::info!(error = %e, "unable to retrieve pull secret, the image pull may not succeed");
                    missing.push(name)
                }
            }
        }
        (found, missing)
    }

    /// A token for the pod's ServiceAccount (cached, refreshed at 80 %).
    async fn token(&self, pod: &Pod, key: &TokenKey) -> Result<String, String> {
        let ns = pod_namespace(pod);
        let uid = pod.uid().unwrap_or_default();
        let sa = pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "default".into());
        let cache_key = (uid.clone(), sa.clone(), key.clone());
        let now = SystemTime::now();
        let cached = lock(&self.tokens).get(&cache_key).cloned();
        if let Some(c) = &cached {
            if !c.needs_refresh(now) {
                return Ok(c.token.clone());
            }
        }
        let req = TokenRequest {
            spec: Some(TokenRequestSpec {
                audiences: (!key.audience.is_empty()).then(|| vec![key.audience.clone()]),
                expiration_seconds: Some(key.expiration_seconds),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: Some(pod.name_any()),
                    uid: Some(uid.clone()),
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), &ns);
        let fetched = api
            .create_subresource::<TokenRequest, TokenRequest>(
                "token",
                &sa,
                &PostParams::default(),
                &req,
            )
            .await;
        match fetched {
            Ok(tr) => {
                let status = tr
                    .status
                    .ok_or_else(|| format!("token request for {ns}/{sa}: no status"))?;
                let token = status
                    .token
                    .filter(|t| !t.is_empty())
                    .ok_or_else(|| format!("token request for {ns}/{sa}: no token"))?;
                // Without an expiry in the answer, the requested lifetime.
                let expires = match status.expiration_timestamp {
                    Some(t) => {
                        SystemTime::UNIX_EPOCH + Duration::from_secs(t.0.as_second().max(0) as u64)
                    }
                    None => now + Duration::from_secs(key.expiration_seconds.max(0) as u64),
                };
                let t = CachedToken {
                    token,
                    issued: now,
                    expires,
                };
                lock(&self.tokens).insert(cache_key, t.clone());
                tracing::debug!(namespace = %ns, serviceaccount = %sa, pod = %pod.name_any(), "service account token requested");
                Ok(t.token)
            }
            Err(e) => match cached {
                // Keep a still-valid token rather than fail the pod.
                Some(c) if c.valid(now) => {
                    tracing::warn!(namespace = %ns, serviceaccount = %sa, error = %e, "refreshing the service account token failed; keeping the current one");
                    Ok(c.token)
                }
                _ => Err(format!(
                    "failed to fetch token: {}",
                    rkube_daemon::client::api_message(&e)
                )),
            },
        }
    }

    /// Fetches what the pod's volumes need and writes every ConfigMap,
    /// Secret, downwardAPI and projected volume. `Err` is the first
    /// failure, as [`setup_failed`] words it.
    pub async fn prepare(&self, pod: &Pod, downward: &DownwardContext) -> Result<(), String> {
        let spec = match &pod.spec {
            Some(s) => s,
            None => return Ok(()),
        };
        let volumes = spec.volumes.as_deref().unwrap_or_default();
        if volumes.iter().all(|v| payload::plugin_dir(v).is_none()) {
            return Ok(());
        }
        let ns = pod_namespace(pod);
        let uid = pod.uid().unwrap_or_default();
        let refs = payload::references(pod);
        let mut config_maps = HashMap::new();
        for name in refs.config_map_names() {
            if let Some(cm) = self.config_map(&uid, &ns, name).await? {
                config_maps.insert(name.to_string(), cm);
            }
        }
        let mut secrets = HashMap::new();
        for name in refs.secret_names() {
            if let Some(s) = self.secret(&uid, &ns, name).await? {
                secrets.insert(name.to_string(), s);
            }
        }
        let mut tokens = HashMap::new();
        let mut token_errors: HashMap<TokenKey, String> = HashMap::new();
        for key in refs.token_keys() {
            match self.token(pod, key).await {
                Ok(t) => {
                    tokens.insert(key.clone(), t);
                }
                Err(e) => {
                    token_errors.insert(key.clone(), e);
                }
            }
        }
        let trust_bundles = match refs.trust_bundles {
            true => self
                .trust_bundles
                .all()
                .await
                .map_err(|e| format!("reading ClusterTrustBundles: {e}"))?,
            false => Vec::new(),
        };
        let pod_certificates = match refs.pod_certificates {
            true => self.pod_certificates.credentials(pod).await,
            false => HashMap::new(),
        };
        let lookup = Lookup {
            config_maps: &config_maps,
            secrets: &secrets,
            tokens: &tokens,
            downward,
            trust_bundles: &trust_bundles,
            pod_certificates: &pod_certificates,
        };
        let fs_group = spec.security_context.as_ref().and_then(|s| s.fs_group);
        std::fs::create_dir_all(self.dirs.pod_dir(&uid))
            .map_err(|e| format!("creating the pod directory: {e}"))?;
        restrict(&self.dirs.root.join("pods"))?;
        for v in volumes {
            let Some(plugin) = payload::plugin_dir(v) else {
                continue;
            };
            if let Some(e) = payload::token_keys_of(v)
                .iter()
                .find_map(|k| token_errors.get(k))
            {
                return Err(setup_failed(&v.name, e));
            }
            let files = match payload::volume_payload(pod, v, &lookup) {
                Ok(Some(p)) => p,
                Ok(None) => continue,
                Err(e) => return Err(setup_failed(&v.name, &e)),
            };
            let dir = self.dirs.volume_dir(&uid, plugin, &v.name);
            std::fs::create_dir_all(&dir)
                .map_err(|e| setup_failed(&v.name, &format!("creating {}: {e}", dir.display())))?;
            if payload::in_memory(v) {
                // Room for the payload twice: the atomic writer keeps the
                // old version until the new one is in place.
                let size = 2 * atomic_writer::MAX_PAYLOAD_BYTES as i64 + (1 << 20);
                empty_dir::mount_tmpfs(&dir, Some(size)).map_err(|e| setup_failed(&v.name, &e))?;
            }
            match atomic_writer::write(&dir, &files, fs_group) {
                Ok(true) => {
                    tracing::debug!(pod = %pod.name_any(), volume = %v.name, "volume written")
                }
                Ok(false) => {}
                Err(e) => return Err(setup_failed(&v.name, &e)),
            }
        }
        Ok(())
    }

    /// The pod's claim volumes, set up (once; again after a restart, where
    /// a mount already in place is kept). `Err` is the pod's `FailedMount`
    /// message in upstream's words: `Unable to attach or mount volumes: …`
    /// when a claim or its volume cannot be used yet,
    /// `MountVolume.… failed for volume "PV" : …` when it cannot be mounted.
    pub async fn claims(&self, pod: &Pod) -> Result<ClaimsReady, String> {
        let uid = pod.uid().unwrap_or_default();
        if let Some(c) = lock(&self.claims).get(&uid) {
            return Ok(ClaimsReady {
                claims: c.clone(),
                warnings: Vec::new(),
            });
        }
        let volumes = pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.clone())
            .unwrap_or_default();
        let wanted: Vec<_> = volumes
            .iter()
            .filter_map(|v| persistent::claim_of(pod, v).map(|c| (v.name.clone(), c)))
            .collect();
        if wanted.is_empty() {
            return Ok(ClaimsReady::default());
        }
        let ns = pod_namespace(pod);
        let (mounts, devices) = persistent::used_volumes(pod);
        let mut resolved = Vec::new();
        let mut failed = Vec::new();
        let mut why = Vec::new();
        let mut node_labels = None;
        for (name, claim) in &wanted {
            let r = self
                .resolve(pod, &ns, name, claim, &mounts, &devices, &mut node_labels)
                .await;
            match r {
                Ok(r) => resolved.push((name.clone(), r)),
                Err(Failure::Process(e)) => {
                    failed.push(name.clone());
                    why.push(e);
                }
                Err(Failure::Mount(e)) => return Err(e),
            }
        }
        if !failed.is_empty() {
            let unmounted: Vec<String> = mounts
                .iter()
                .chain(devices.iter())
                .filter(|v| failed.contains(v))
                .cloned()
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            return Err(persistent::unable_to_mount(
                &unmounted,
                &failed,
                &why.join("; "),
            ));
        }
        let fs_group = pod
            .spec
            .as_ref()
            .and_then(|s| s.security_context.as_ref())
            .and_then(|s| {
                let on_root_mismatch =
                    s.fs_group_change_policy.as_deref() == Some("OnRootMismatch");
                s.fs_group.map(|g| (g, on_root_mismatch))
            });
        let fs_group = match fs_group {
            Some((g, p)) => Some((
                u32::try_from(g).map_err(|_| format!("invalid fsGroup {g}"))?,
                p,
            )),
            None => None,
        };
        let mut out = Claims::new();
        let mut warnings = Vec::new();
        for (name, r) in resolved {
            let host_path = match &r.source {
                Source::HostPath { path, type_ } => {
                    let p = PathBuf::from(path);
                    super::host_path::check_host_path_type(&p, type_)
                        .map_err(|e| setup_failed(&r.pv, &e))?;
                    p
                }
                Source::Csi(source) => {
                    let Some(csi) = &self.csi else {
                        return Err(setup_failed(&r.pv, "CSI volumes need the API server"));
                    };
                    csi.set_up(&super::csi::publish::Publish {
                        pod,
                        pv: &r.pv,
                        source,
                        claim_read_only: r.read_only,
                        mount_options: &r.mount_options,
                        fs_group,
                    })
                    .await?
                }
                Source::Local { path } => {
                    let dir = self
                        .dirs
                        .volume_dir(&uid, persistent::LOCAL_PLUGIN_DIR, &r.pv);
                    let done = local::set_up(&local::SetUp {
                        source: std::path::Path::new(path),
                        dir: &dir,
                        read_only: r.read_only,
                        options: &r.mount_options,
                        fs_group,
                        pods_dir: &self.dirs.root.join("pods"),
                        pv: &r.pv,
                    })
                    .map_err(|e| setup_failed(&r.pv, &e))?;
                    warnings.extend(done.group_warning.map(|w| ("AlreadyMountedVolume", w)));
                    dir
                }
            };
            out.insert(
                name,
                ClaimMount {
                    host_path,
                    read_only: r.read_only,
                    gid: r.gid,
                },
            );
        }
        let out = Arc::new(out);
        lock(&self.claims).insert(uid, out.clone());
        Ok(ClaimsReady {
            claims: out,
            warnings,
        })
    }

    /// One claim volume resolved to its PersistentVolume.
    #[allow(clippy::too_many_arguments)]
    async fn resolve(
        &self,
        pod: &Pod,
        ns: &str,
        volume: &str,
        claim: &persistent::ClaimRef,
        mounts: &[String],
        devices: &[String],
        node_labels: &mut Option<rkube_model::selector::Labels>,
    ) -> Result<persistent::Resolved, Failure> {
        let processing =
            |e: String| Failure::Process(format!("error processing PVC {ns}/{}: {e}", claim.name));
        let pvc = Api::<PersistentVolumeClaim>::namespaced(self.client.clone(), ns)
            .get(&claim.name)
            .await
            .map_err(|e| {
                processing(format!(
                    "failed to fetch PVC from API server: {}",
                    rkube_daemon::client::api_message(&e)
                ))
            })?;
        if claim.ephemeral {
            persistent::claim_is_for_pod(pod, &pvc).map_err(Failure::Process)?;
        }
        let pv_name = persistent::bound_volume(&pvc).map_err(processing)?;
        let pv = Api::<PersistentVolume>::all(self.client.clone())
            .get(pv_name)
            .await
            .map_err(|e| {
                processing(format!(
                    "failed to fetch PV {pv_name} from API server: {}",
                    rkube_daemon::client::api_message(&e)
                ))
            })?;
        persistent::check_claim_ref(&pv, &pvc.uid().unwrap_or_default()).map_err(processing)?;
        if node_labels.is_none() {
            let node = Api::<Node>::all(self.client.clone())
                .get(&self.node_name)
                .await
                .map_err(|e| {
                    Failure::Mount(format!(
                        "MountVolume.NodeAffinity check failed for volume {pv_name:?} : reading node {}: {}",
                        self.node_name,
                        rkube_daemon::client::api_message(&e)
                    ))
                })?;
            *node_labels = Some(node.labels().clone().into_iter().collect());
        }
        let labels = node_labels.as_ref().cloned().unwrap_or_default();
        persistent::resolve(
            volume,
            &pv,
            claim.read_only,
            mounts.iter().any(|m| m == volume),
            devices.iter().any(|d| d == volume),
            &labels,
        )
        .map_err(|c| match c.prefix {
            // Upstream's volume mode mismatch is not wrapped.
            "" => Failure::Process(c.message),
            p => Failure::Mount(format!("{p} for volume {pv_name:?} : {}", c.message)),
        })
    }

    /// What the pod's containers' environments read: the ConfigMaps and
    /// Secrets they name (absent ones left out: the env code words the
    /// error) and, with service links, the namespace's Services.
    pub async fn env_inputs(&self, pod: &Pod) -> Result<EnvInputs, String> {
        let ns = pod_namespace(pod);
        let uid = pod.uid().unwrap_or_default();
        let refs = env::references(pod);
        let mut out = EnvInputs::default();
        for name in refs.config_maps.keys() {
            if let Some(cm) = self.config_map(&uid, &ns, name).await? {
                out.config_maps.insert(name.to_string(), cm);
            }
        }
        for name in refs.secrets.keys() {
            if let Some(s) = self.secret(&uid, &ns, name).await? {
                out.secrets.insert(name.to_string(), s);
            }
        }
        let links = pod
            .spec
            .as_ref()
            .and_then(|s| s.enable_service_links)
            .unwrap_or(true);
        let services = self.services.all().await?;
        let in_ns = |s: &Service, n: &str| s.metadata.namespace.as_deref() == Some(n);
        if links {
            out.services = services
                .iter()
                .filter(|s| in_ns(s, &ns))
                .map(|s| s.as_ref().clone())
                .collect();
        }
        out.master_service = services
            .iter()
            .find(|s| in_ns(s, "default") && s.metadata.name.as_deref() == Some("kubernetes"))
            .map(|s| s.as_ref().clone());
        Ok(out)
    }

    /// Forgets the pod's tokens and ends the watches only it needed (its
    /// directory goes with the runtime's removal of the pod).
    pub fn forget(&self, uid: &str) {
        lock(&self.tokens).retain(|(u, _, _), _| u != uid);
        lock(&self.claims).remove(uid);
        if let Some(c) = &self.csi {
            c.forget(uid);
        }
        self.config_maps.release(uid);
        self.secrets.release(uid);
        self.pod_certificates.forget(uid);
    }
}

/// Why a claim volume is not ready.
enum Failure {
    /// It cannot be processed (upstream's populator errors).
    Process(String),
    /// Its volume cannot be mounted (already in upstream's event words).
    Mount(String),
}

/// `pods/` is kubelet-only (0750, as upstream's): volume files are only
/// reachable through the containers' bind mounts. A failure fails the
/// volumes' setup rather than leave them readable by others.
fn restrict(dir: &std::path::Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o750))
        .map_err(|e| format!("restricting {} to 0750: {e}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(s)
    }

    #[test]
    fn tokens_are_refreshed_at_80_percent_or_after_a_day() {
        let t = CachedToken {
            token: "x".into(),
            issued: at(1000),
            expires: at(1000 + 3600),
        };
        assert!(!t.needs_refresh(at(1000 + 2879)));
        assert!(t.needs_refresh(at(1000 + 2880)));
        assert!(t.valid(at(1000 + 3599)));
        assert!(!t.valid(at(1000 + 3600)));
        let year = CachedToken {
            token: "x".into(),
            issued: at(0),
            expires: at(365 * 86400),
        };
        assert!(!year.needs_refresh(at(86399)));
        assert!(year.needs_refresh(at(86400)));
    }

    #[test]
    fn setup_failures_read_as_upstream() {
        assert_eq!(
            setup_failed("cfg", "configmap \"x\" not found"),
            "MountVolume.SetUp failed for volume \"cfg\" : configmap \"x\" not found"
        );
    }
}
