//! What a ConfigMap, Secret, downwardAPI or projected volume holds (pure:
//! the objects come in already fetched, files go out), as upstream's
//! `pkg/volume/{configmap,secret,downwardapi,projected}` build them with
//! `MakePayload` / `CollectData` / `collectData`:
//!
//! * every file's mode is the item's `mode`, else the volume's
//!   `defaultMode`, else `0644` (the API server's default for all four);
//! * without `items` a ConfigMap gives one file per `data` and `binaryData`
//!   key (a Secret per `data` key); with `items` only the listed keys, each
//!   at its `path`. A listed key that is missing is an error
//!   (`configmap references non-existent config key: KEY`,
//!   `references non-existent secret key: KEY` — upstream's secret message
//!   has no `secret` prefix) unless the source is `optional`, when it is
//!   skipped;
//! * a missing object is `configmap "NAME" not found` /
//!   `secret "NAME" not found` (the kubelet's object managers' wording),
//!   unless `optional`: then the object counts as empty, and a plain
//!   configMap/secret volume is still mounted, empty;
//! * downwardAPI files are `fieldRef`s and `resourceFieldRef`s rendered by
//!   [`crate::pod::downward`]; an item naming neither is an empty file;
//!   failures of several items are reported together;
//! * projected sources are merged in order; a path given by two sources
//!   holds the later one (the API server rejects duplicate *explicit*
//!   paths, but a source without `items` can still collide). Errors of all
//!   sources are reported together, in upstream's aggregate form
//!   (`[first, second]`, duplicates once);
//! * a projected `serviceAccountToken` file reads the token the caller
//!   requested for its (`audience`, `expirationSeconds`, default 3600)
//!   ([`TokenKey`]). Its owner is upstream's `FsUserFrom(pod)`: the
//!   effective `runAsUser` shared by every init, app and ephemeral
//!   container (none if one has none or two differ). When that owner or the
//!   pod's `fsGroup` is set the file is `0600` (the writer then adds group
//!   read for `fsGroup`), else the volume's `defaultMode`;
//! * a `clusterTrustBundle` projection holds the certificates of the
//!   bundles it selects ([`super::trust_bundle`]); a `podCertificate`
//!   projection its key and issued chain ([`super::pod_certificate`]) at
//!   `credentialBundlePath` (key then chain), `keyPath` and
//!   `certificateChainPath`, `0600` when the volume has an owner or group
//!   (as a token), else `defaultMode`; until issued the volume fails.
//!
//! Every path is checked as upstream's atomic writer does ([`validate_path`])
//! and stored cleaned. The per-item and per-volume `user` / `defaultUser`
//! fields (`AtomicWriteVolumeUserFields`, alpha and off by default in v1.37)
//! are ignored, as upstream does with the gate off.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::certificates::v1::ClusterTrustBundle;
use k8s_openapi::api::core::v1::{
    ConfigMap, DownwardAPIVolumeFile, KeyToPath, Pod, Secret, ServiceAccountTokenProjection, Volume,
};

use super::atomic_writer::MAX_PAYLOAD_BYTES;
use super::pod_certificate::Credentials;
use crate::pod::downward::{field_ref, find_container, resource_field_ref, DownwardContext, Use};

/// The API server's `defaultMode` for all four volume types (`0644`).
pub const DEFAULT_MODE: u32 = 0o644;
/// A projected token's `expirationSeconds` when unset (the API default).
pub const DEFAULT_TOKEN_EXPIRATION_SECONDS: i64 = 3600;
/// The mode of a token file that has an owner or a group (upstream: "When
/// FsGroup is set, we depend on SetVolumeOwnership to change from 0600 to
/// 0640").
pub const OWNED_TOKEN_MODE: u32 = 0o600;

/// Upstream's longest path and file name in a volume.
const MAX_PATH_LENGTH: usize = 4096;
const MAX_FILE_NAME_LENGTH: usize = 255;

/// One file of a volume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileProjection {
    /// The file's content.
    pub data: Vec<u8>,
    /// Its permission bits (`0..=0o777`).
    pub mode: u32,
    /// Its owner, when not the kubelet's user (upstream's `FsUser`: the
    /// projected token's owner).
    pub fs_user: Option<i64>,
}

/// Relative path (validated: no absolute, no `..`, no empty components;
/// see [`validate_path`]) → file.
pub type Payload = BTreeMap<String, FileProjection>;

/// A ServiceAccount token as a projected volume asks for it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TokenKey {
    /// The audience; `""` is the API server's default.
    pub audience: String,
    /// The requested lifetime in seconds.
    pub expiration_seconds: i64,
}

/// The objects a pod's volumes may read, already fetched by the caller (by
/// name, in the pod's namespace; absent = not found).
pub struct Lookup<'a> {
    /// ConfigMaps by name.
    pub config_maps: &'a HashMap<String, ConfigMap>,
    /// Secrets by name.
    pub secrets: &'a HashMap<String, Secret>,
    /// ServiceAccount tokens already requested, keyed by (audience,
    /// expirationSeconds).
    pub tokens: &'a HashMap<TokenKey, String>,
    /// What the downward API resolves against besides the pod.
    pub downward: &'a DownwardContext,
    /// The cluster's ClusterTrustBundles (read only when a projection
    /// names them).
    pub trust_bundles: &'a [Arc<ClusterTrustBundle>],
    /// The credentials of `podCertificate` sources by (volume, source
    /// index), or why there are none yet.
    pub pod_certificates: &'a HashMap<(String, usize), Result<Credentials, String>>,
}

/// Everything a pod's volumes reference, so the caller knows what to fetch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VolumeRefs {
    /// ConfigMap name → whether *every* reference to it is optional (only
    /// then may it be missing).
    pub config_maps: BTreeMap<String, bool>,
    /// Secret name → whether every reference to it is optional.
    pub secrets: BTreeMap<String, bool>,
    /// The tokens projected volumes need.
    pub tokens: BTreeSet<TokenKey>,
    /// A projected volume reads ClusterTrustBundles.
    pub trust_bundles: bool,
    /// A projected volume has a `podCertificate` source.
    pub pod_certificates: bool,
}

impl VolumeRefs {
    /// The ConfigMaps to fetch.
    pub fn config_map_names(&self) -> impl Iterator<Item = &str> {
        self.config_maps.keys().map(String::as_str)
    }

    /// The Secrets to fetch.
    pub fn secret_names(&self) -> impl Iterator<Item = &str> {
        self.secrets.keys().map(String::as_str)
    }

    /// The tokens to request.
    pub fn token_keys(&self) -> impl Iterator<Item = &TokenKey> {
        self.tokens.iter()
    }

    fn add(map: &mut BTreeMap<String, bool>, name: &str, optional: bool) {
        map.entry(name.to_string())
            .and_modify(|all| *all &= optional)
            .or_insert(optional);
    }
}

/// Which volume plugin, and so which directory name upstream uses under
/// `pods/<uid>/volumes/`; `None` for other volume types.
pub fn plugin_dir(volume: &Volume) -> Option<&'static str> {
    if volume.config_map.is_some() {
        Some("kubernetes.io~configmap")
    } else if volume.secret.is_some() {
        Some("kubernetes.io~secret")
    } else if volume.downward_api.is_some() {
        Some("kubernetes.io~downward-api")
    } else if volume.projected.is_some() {
        Some("kubernetes.io~projected")
    } else {
        None
    }
}

/// Whether the volume is written on a tmpfs: Secret, downwardAPI and
/// projected volumes (upstream wraps them in a memory-backed emptyDir;
/// ConfigMap volumes in a disk-backed one).
pub fn in_memory(volume: &Volume) -> bool {
    volume.secret.is_some() || volume.downward_api.is_some() || volume.projected.is_some()
}

/// Everything the pod's volumes reference: ConfigMap and Secret names
/// (with whether they are optional) and token keys.
pub fn references(pod: &Pod) -> VolumeRefs {
    let mut refs = VolumeRefs::default();
    let volumes = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_deref())
        .unwrap_or_default();
    for v in volumes {
        if let Some(cm) = &v.config_map {
            VolumeRefs::add(&mut refs.config_maps, &cm.name, cm.optional == Some(true));
        }
        if let Some(s) = &v.secret {
            let name = s.secret_name.as_deref().unwrap_or_default();
            VolumeRefs::add(&mut refs.secrets, name, s.optional == Some(true));
        }
        for src in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if let Some(s) = &src.secret {
                VolumeRefs::add(&mut refs.secrets, &s.name, s.optional == Some(true));
            } else if let Some(cm) = &src.config_map {
                VolumeRefs::add(&mut refs.config_maps, &cm.name, cm.optional == Some(true));
            } else if let Some(t) = &src.service_account_token {
                refs.tokens.insert(token_key(t));
            } else if src.cluster_trust_bundle.is_some() {
                refs.trust_bundles = true;
            } else if src.pod_certificate.is_some() {
                refs.pod_certificates = true;
            }
        }
    }
    refs
}

/// The tokens one volume needs (empty unless it is projected with
/// `serviceAccountToken` sources).
pub fn token_keys_of(volume: &Volume) -> Vec<TokenKey> {
    volume
        .projected
        .iter()
        .flat_map(|p| p.sources.iter().flatten())
        .filter(|s| s.secret.is_none() && s.config_map.is_none() && s.downward_api.is_none())
        .filter_map(|s| s.service_account_token.as_ref())
        .map(token_key)
        .collect()
}

fn token_key(t: &ServiceAccountTokenProjection) -> TokenKey {
    TokenKey {
        audience: t.audience.clone().unwrap_or_default(),
        expiration_seconds: t
            .expiration_seconds
            .unwrap_or(DEFAULT_TOKEN_EXPIRATION_SECONDS),
    }
}

/// Checks a volume file path as upstream's atomic writer does and returns
/// it cleaned (`./a//b/` → `a/b`). Upstream's messages:
/// `invalid path: must not be empty: ""`, `invalid path: must be relative
/// path: /x`, `invalid path: must not contain '..': a/../b`,
/// `invalid path: must not start with '..': ..x`, and the length limits.
/// Unlike upstream, a path that cleans to nothing (`.`) and one whose
/// *cleaned* first component starts with `..` (`./..data`) are refused too,
/// so no file can land on the writer's own `..data` entries.
pub fn validate_path(path: &str) -> Result<String, String> {
    if path.is_empty() {
        return Err(format!("invalid path: must not be empty: {path:?}"));
    }
    if path.starts_with('/') {
        return Err(format!("invalid path: must be relative path: {path}"));
    }
    if path.len() > MAX_PATH_LENGTH {
        return Err(format!(
            "invalid path: must be less than or equal to {MAX_PATH_LENGTH} characters"
        ));
    }
    let items: Vec<&str> = path.split('/').collect();
    for item in &items {
        if *item == ".." {
            return Err(format!("invalid path: must not contain '..': {path}"));
        }
        if item.len() > MAX_FILE_NAME_LENGTH {
            return Err(format!(
                "invalid path: filenames must be less than or equal to {MAX_FILE_NAME_LENGTH} characters"
            ));
        }
    }
    let clean: Vec<&str> = items
        .into_iter()
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    let Some(first) = clean.first() else {
        return Err(format!("invalid path: must not be empty: {path:?}"));
    };
    if first.starts_with("..") {
        return Err(format!("invalid path: must not start with '..': {path}"));
    }
    Ok(clean.join("/"))
}

/// The payload of `volume` for `pod`, or `None` when the volume is not a
/// ConfigMap, Secret, downwardAPI or projected volume.
pub fn volume_payload(
    pod: &Pod,
    volume: &Volume,
    lookup: &Lookup,
) -> Result<Option<Payload>, String> {
    let mut out = Payload::new();
    let mut budget = Budget::new();
    if let Some(src) = &volume.config_map {
        let optional = src.optional == Some(true);
        let cm = config_map(lookup, &src.name, optional)?;
        let mode = default_mode(src.default_mode);
        config_map_files(
            &mut out,
            &mut budget,
            cm,
            src.items.as_deref(),
            mode,
            optional,
        )?;
    } else if let Some(src) = &volume.secret {
        let optional = src.optional == Some(true);
        let name = src.secret_name.as_deref().unwrap_or_default();
        let secret = secret(lookup, name, optional)?;
        let mode = default_mode(src.default_mode);
        secret_files(
            &mut out,
            &mut budget,
            secret,
            src.items.as_deref(),
            mode,
            optional,
        )?;
    } else if let Some(src) = &volume.downward_api {
        let mode = default_mode(src.default_mode);
        let errs = downward_files(
            &mut out,
            &mut budget,
            pod,
            src.items.as_deref(),
            mode,
            lookup.downward,
        );
        aggregate(errs)?;
    } else if let Some(src) = &volume.projected {
        let mode = default_mode(src.default_mode);
        let errs = projected_files(
            &mut out,
            &mut budget,
            pod,
            &volume.name,
            src.sources.as_deref(),
            mode,
            lookup,
        );
        aggregate(errs)?;
    } else {
        return Ok(None);
    }
    Ok(Some(out))
}

/// Merges the projected sources in order into `out`; returns the errors of
/// the sources that failed (upstream goes on with the next source).
fn projected_files(
    out: &mut Payload,
    budget: &mut Budget,
    pod: &Pod,
    volume: &str,
    sources: Option<&[k8s_openapi::api::core::v1::VolumeProjection]>,
    mode: u32,
    lookup: &Lookup,
) -> Vec<String> {
    let mut errs = Vec::new();
    let spec = pod.spec.as_ref();
    let fs_group = spec
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.fs_group);
    for (index, src) in sources.unwrap_or_default().iter().enumerate() {
        // Each source is built apart and merged only when it succeeded, as
        // upstream does.
        let mut part = Payload::new();
        let res: Result<(), String> = if let Some(s) = &src.secret {
            let optional = s.optional == Some(true);
            secret(lookup, &s.name, optional).and_then(|obj| {
                secret_files(&mut part, budget, obj, s.items.as_deref(), mode, optional)
            })
        } else if let Some(c) = &src.config_map {
            let optional = c.optional == Some(true);
            config_map(lookup, &c.name, optional).and_then(|obj| {
                config_map_files(&mut part, budget, obj, c.items.as_deref(), mode, optional)
            })
        } else if let Some(d) = &src.downward_api {
            let e = downward_files(
                &mut part,
                budget,
                pod,
                d.items.as_deref(),
                mode,
                lookup.downward,
            );
            aggregate(e)
        } else if let Some(t) = &src.service_account_token {
            let key = token_key(t);
            match lookup.tokens.get(&key) {
                Some(token) => {
                    let fs_user = fs_user_from(pod);
                    let mode = if fs_user.is_some() || fs_group.is_some() {
                        OWNED_TOKEN_MODE
                    } else {
                        mode
                    };
                    insert(
                        &mut part,
                        budget,
                        &t.path,
                        FileProjection {
                            data: token.clone().into_bytes(),
                            mode,
                            fs_user,
                        },
                    )
                }
                None => Err(format!(
                    "no service account token for audience {:?} and expirationSeconds {} (not requested)",
                    key.audience, key.expiration_seconds
                )),
            }
        } else if let Some(p) = &src.cluster_trust_bundle {
            super::trust_bundle::anchors(lookup.trust_bundles, p).and_then(|data| {
                insert(
                    &mut part,
                    budget,
                    &p.path,
                    FileProjection {
                        data,
                        mode,
                        fs_user: None,
                    },
                )
            })
        } else if let Some(pc) = &src.pod_certificate {
            match lookup.pod_certificates.get(&(volume.to_string(), index)) {
                Some(Ok((key, chain))) => {
                    let fs_user = fs_user_from(pod);
                    let mode = if fs_user.is_some() || fs_group.is_some() {
                        OWNED_TOKEN_MODE
                    } else {
                        mode
                    };
                    let file = |data: Vec<u8>| FileProjection {
                        data,
                        mode,
                        fs_user,
                    };
                    let mut r = Ok(());
                    if let Some(path) = pc
                        .credential_bundle_path
                        .as_deref()
                        .filter(|p| !p.is_empty())
                    {
                        r = r.and_then(|()| {
                            insert(
                                &mut part,
                                budget,
                                path,
                                file([key.as_slice(), chain].concat()),
                            )
                        });
                    }
                    if let Some(path) = pc.key_path.as_deref().filter(|p| !p.is_empty()) {
                        r = r.and_then(|()| insert(&mut part, budget, path, file(key.clone())));
                    }
                    if let Some(path) = pc
                        .certificate_chain_path
                        .as_deref()
                        .filter(|p| !p.is_empty())
                    {
                        r = r.and_then(|()| insert(&mut part, budget, path, file(chain.clone())));
                    }
                    r
                }
                Some(Err(e)) => Err(e.clone()),
                None => Err("credential bundle is not issued yet".to_string()),
            }
        } else {
            Ok(())
        };
        match res {
            Ok(()) => out.append(&mut part),
            Err(e) => errs.push(e),
        }
    }
    errs
}

fn default_mode(mode: Option<i32>) -> u32 {
    mode.map(to_mode).unwrap_or(DEFAULT_MODE)
}

/// The permission bits of an API mode (validation keeps it in `0..=0o777`;
/// anything else is masked, never passed on as setuid or sticky bits).
fn to_mode(mode: i32) -> u32 {
    (mode as u32) & 0o777
}

fn item_mode(item: Option<i32>, default: u32) -> u32 {
    item.map(to_mode).unwrap_or(default)
}

/// What is left of a volume's [`MAX_PAYLOAD_BYTES`] while its payload is
/// built. Every file counts as it is added, so a volume whose 50,000 items
/// all name one 1 MiB key fails at the 17th, not after 50 GiB were copied.
struct Budget {
    left: usize,
}

impl Budget {
    fn new() -> Self {
        Budget {
            left: MAX_PAYLOAD_BYTES,
        }
    }
}

/// Validates `path` and stores `file` at its cleaned form, within `budget`.
fn insert(
    out: &mut Payload,
    budget: &mut Budget,
    path: &str,
    file: FileProjection,
) -> Result<(), String> {
    let path = validate_path(path)?;
    // A path written again frees what it held.
    let freed = out.get(&path).map_or(0, |f| f.data.len());
    budget.left = (budget.left + freed)
        .checked_sub(file.data.len())
        .ok_or_else(|| {
            format!(
                "volume payload exceeds rkube's limit of {MAX_PAYLOAD_BYTES} bytes \
                 (the API server limits each ConfigMap and Secret to 1 MiB)"
            )
        })?;
    out.insert(path, file);
    Ok(())
}

fn config_map<'a>(
    lookup: &'a Lookup,
    name: &str,
    optional: bool,
) -> Result<Option<&'a ConfigMap>, String> {
    match lookup.config_maps.get(name) {
        Some(cm) => Ok(Some(cm)),
        None if optional => Ok(None),
        None => Err(format!("configmap {name:?} not found")),
    }
}

fn secret<'a>(
    lookup: &'a Lookup,
    name: &str,
    optional: bool,
) -> Result<Option<&'a Secret>, String> {
    match lookup.secrets.get(name) {
        Some(s) => Ok(Some(s)),
        None if optional => Ok(None),
        None => Err(format!("secret {name:?} not found")),
    }
}

/// Upstream's `configmap.MakePayload` (`cm` `None` = missing but optional).
fn config_map_files(
    out: &mut Payload,
    budget: &mut Budget,
    cm: Option<&ConfigMap>,
    items: Option<&[KeyToPath]>,
    mode: u32,
    optional: bool,
) -> Result<(), String> {
    let empty = BTreeMap::new();
    let empty_bin = BTreeMap::new();
    let data = cm.and_then(|c| c.data.as_ref()).unwrap_or(&empty);
    let binary = cm
        .and_then(|c| c.binary_data.as_ref())
        .unwrap_or(&empty_bin);
    let file = |data: Vec<u8>, mode| FileProjection {
        data,
        mode,
        fs_user: None,
    };
    match items {
        None | Some([]) => {
            // data first, then binaryData (which wins a key in both; the
            // API server forbids that).
            for (k, v) in data {
                insert(out, budget, k, file(v.clone().into_bytes(), mode))?;
            }
            for (k, v) in binary {
                insert(out, budget, k, file(v.0.clone(), mode))?;
            }
        }
        Some(items) => {
            for it in items {
                let bytes = match (data.get(&it.key), binary.get(&it.key)) {
                    (Some(s), _) => s.clone().into_bytes(),
                    (None, Some(b)) => b.0.clone(),
                    (None, None) if optional => continue,
                    (None, None) => {
                        return Err(format!(
                            "configmap references non-existent config key: {}",
                            it.key
                        ))
                    }
                };
                insert(out, budget, &it.path, file(bytes, item_mode(it.mode, mode)))?;
            }
        }
    }
    Ok(())
}

/// Upstream's `secret.MakePayload` (`secret` `None` = missing but optional).
fn secret_files(
    out: &mut Payload,
    budget: &mut Budget,
    secret: Option<&Secret>,
    items: Option<&[KeyToPath]>,
    mode: u32,
    optional: bool,
) -> Result<(), String> {
    let empty = BTreeMap::new();
    let data = secret.and_then(|s| s.data.as_ref()).unwrap_or(&empty);
    let file = |data: Vec<u8>, mode| FileProjection {
        data,
        mode,
        fs_user: None,
    };
    match items {
        None | Some([]) => {
            for (k, v) in data {
                insert(out, budget, k, file(v.0.clone(), mode))?;
            }
        }
        Some(items) => {
            for it in items {
                let Some(v) = data.get(&it.key) else {
                    if optional {
                        continue;
                    }
                    return Err(format!("references non-existent secret key: {}", it.key));
                };
                insert(
                    out,
                    budget,
                    &it.path,
                    file(v.0.clone(), item_mode(it.mode, mode)),
                )?;
            }
        }
    }
    Ok(())
}

/// Upstream's `downwardapi.CollectData`: every item is tried; the errors
/// are returned together.
fn downward_files(
    out: &mut Payload,
    budget: &mut Budget,
    pod: &Pod,
    items: Option<&[DownwardAPIVolumeFile]>,
    mode: u32,
    ctx: &DownwardContext,
) -> Vec<String> {
    let mut errs = Vec::new();
    for it in items.unwrap_or_default() {
        let value = if let Some(f) = &it.field_ref {
            field_ref(pod, &f.field_path, ctx, Use::Volume)
        } else if let Some(r) = &it.resource_field_ref {
            let name = r.container_name.as_deref().unwrap_or_default();
            match find_container(pod, name) {
                Some(c) => resource_field_ref(c, r, ctx),
                None => Err(format!("container {name} not found")),
            }
        } else {
            Ok(String::new())
        };
        let res = value.and_then(|v| {
            insert(
                out,
                budget,
                &it.path,
                FileProjection {
                    data: v.into_bytes(),
                    mode: item_mode(it.mode, mode),
                    fs_user: None,
                },
            )
        });
        if let Err(e) = res {
            errs.push(e);
        }
    }
    errs
}

/// Upstream's `utilerrors.NewAggregate(..).Error()`: one error as itself,
/// several as `[a, b]` with repeats once.
fn aggregate(errs: Vec<String>) -> Result<(), String> {
    match errs.len() {
        0 => Ok(()),
        1 => Err(errs.into_iter().next().unwrap_or_default()),
        _ => {
            let mut seen = BTreeSet::new();
            let unique: Vec<String> = errs
                .into_iter()
                .filter(|e| seen.insert(e.clone()))
                .collect();
            if unique.len() == 1 {
                Err(unique.into_iter().next().unwrap_or_default())
            } else {
                Err(format!("[{}]", unique.join(", ")))
            }
        }
    }
}

/// Upstream's `FsUserFrom`: the effective `runAsUser` (container's, else
/// the pod's) when every init, app and ephemeral container has one and
/// they are all the same.
pub fn fs_user_from(pod: &Pod) -> Option<i64> {
    let spec = pod.spec.as_ref()?;
    let pod_user = spec.security_context.as_ref().and_then(|s| s.run_as_user);
    let container_users = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .map(|c| c.security_context.as_ref().and_then(|s| s.run_as_user))
        .chain(
            spec.ephemeral_containers
                .iter()
                .flatten()
                .map(|c| c.security_context.as_ref().and_then(|s| s.run_as_user)),
        );
    let mut user = None;
    for u in container_users {
        let effective = u.or(pod_user)?;
        match user {
            None => user = Some(effective),
            Some(prev) if prev != effective => return None,
            Some(_) => {}
        }
    }
    user
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use rkube_model::quantity::Quantity;
    use serde_json::{json, Value};

    fn pod_with(volumes: Value, extra_spec: Value) -> Pod {
        let mut spec = json!({
            "containers": [{"name": "app", "image": "i", "resources": {
                "requests": {"cpu": "250m", "memory": "32Mi"},
                "limits": {"memory": "64Mi"}}}],
            "volumes": volumes,
        });
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra_spec.as_object()) {
            for (k, v) in e {
                s.insert(k.clone(), v.clone());
            }
        }
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "team", "uid": "uid-1",
                         "labels": {"app": "web", "tier": "front"},
                         "annotations": {"note": "a \"quoted\" value"}},
            "spec": spec,
        }))
        .unwrap()
    }

    fn pod(volumes: Value) -> Pod {
        pod_with(volumes, json!({}))
    }

    fn cm(name: &str, data: Value, binary: Value) -> ConfigMap {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "team"},
            "data": data, "binaryData": binary,
        }))
        .unwrap()
    }

    fn secret_obj(name: &str, data: &[(&str, &[u8])]) -> Secret {
        Secret {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.to_vec())))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    struct Objects {
        cms: HashMap<String, ConfigMap>,
        secrets: HashMap<String, Secret>,
        tokens: HashMap<TokenKey, String>,
        ctx: DownwardContext,
        pod_certs:
            HashMap<(String, usize), Result<super::super::pod_certificate::Credentials, String>>,
    }

    impl Objects {
        fn new() -> Self {
            let mut cms = HashMap::new();
            cms.insert(
                "conf".into(),
                cm(
                    "conf",
                    json!({"app.properties": "a=1", "log.level": "debug"}),
                    // "\x00\x01" in base64
                    json!({"blob.bin": "AAE="}),
                ),
            );
            cms.insert(
                "kube-root-ca.crt".into(),
                cm(
                    "kube-root-ca.crt",
                    json!({"ca.crt": "-----CA-----"}),
                    json!({}),
                ),
            );
            let mut secrets = HashMap::new();
            secrets.insert(
                "creds".into(),
                secret_obj("creds", &[("user", b"admin"), ("pass", b"\xff\x00s3")]),
            );
            let mut tokens = HashMap::new();
            tokens.insert(
                TokenKey {
                    audience: String::new(),
                    expiration_seconds: 3607,
                },
                "tok-default".into(),
            );
            tokens.insert(
                TokenKey {
                    audience: "vault".into(),
                    expiration_seconds: 3600,
                },
                "tok-vault".into(),
            );
            let ctx = DownwardContext {
                node_allocatable: [("cpu".to_string(), Quantity::parse("4").unwrap())]
                    .into_iter()
                    .collect(),
                ..Default::default()
            };
            let pod_certs = [(
                ("w".to_string(), 1),
                Ok((b"KEY".to_vec(), b"CHAIN".to_vec())),
            )]
            .into();
            Objects {
                cms,
                secrets,
                tokens,
                ctx,
                pod_certs,
            }
        }

        fn payload(&self, pod: &Pod) -> Result<Option<Payload>, String> {
            let lookup = Lookup {
                config_maps: &self.cms,
                secrets: &self.secrets,
                tokens: &self.tokens,
                downward: &self.ctx,
                trust_bundles: &[],
                pod_certificates: &self.pod_certs,
            };
            let v = &pod.spec.as_ref().unwrap().volumes.as_ref().unwrap()[0];
            volume_payload(pod, v, &lookup)
        }
    }

    fn files(p: &Payload) -> Vec<(&str, &[u8], u32)> {
        p.iter()
            .map(|(k, f)| (k.as_str(), f.data.as_slice(), f.mode))
            .collect()
    }

    #[test]
    fn items_repeating_a_big_key_stop_at_the_volume_limit_before_copying_it_all() {
        let mut o = Objects::new();
        o.cms.insert(
            "big".into(),
            cm("big", json!({"k": "x".repeat(1 << 20)}), json!({})),
        );
        // 50,000 copies of 1 MiB would be 50 GiB; the 17th is refused.
        let items: Vec<Value> = (0..50_000)
            .map(|i| json!({"key": "k", "path": format!("f{i}")}))
            .collect();
        for volume in [
            json!({"name": "v", "configMap": {"name": "big", "items": items}}),
            json!({"name": "v", "projected": {"sources": [
                {"configMap": {"name": "big", "items": items[..8]}},
                {"configMap": {"name": "big", "items": items[8..]}}]}}),
        ] {
            let e = o.payload(&pod(json!([volume]))).unwrap_err();
            assert!(e.contains("exceeds rkube's limit of 16777216 bytes"), "{e}");
        }
        // Sixteen copies fit; a path written twice counts once.
        let mut items: Vec<Value> = items[..16].to_vec();
        items.push(json!({"key": "k", "path": "f0"}));
        let p = o
            .payload(&pod(
                json!([{"name": "v", "configMap": {"name": "big", "items": items}}]),
            ))
            .unwrap()
            .unwrap();
        assert_eq!(p.len(), 16);
    }

    #[test]
    fn config_map_without_items_has_every_data_and_binary_key() {
        let o = Objects::new();
        let p = o
            .payload(&pod(json!([{"name": "v", "configMap": {"name": "conf"}}])))
            .unwrap()
            .unwrap();
        assert_eq!(
            files(&p),
            vec![
                ("app.properties", &b"a=1"[..], 0o644),
                ("blob.bin", &[0u8, 1][..], 0o644),
                ("log.level", &b"debug"[..], 0o644),
            ]
        );
        assert!(p.values().all(|f| f.fs_user.is_none()));
    }

    #[test]
    fn config_map_items_select_keys_with_paths_and_modes() {
        let o = Objects::new();
        let p = o
            .payload(&pod(json!([{"name": "v", "configMap": {
            "name": "conf", "defaultMode": 0o400,
            "items": [
                {"key": "log.level", "path": "conf/level"},
                {"key": "blob.bin", "path": "bin/./blob", "mode": 0o755},
            ]}}])))
            .unwrap()
            .unwrap();
        assert_eq!(
            files(&p),
            vec![
                ("bin/blob", &[0u8, 1][..], 0o755),
                ("conf/level", &b"debug"[..], 0o400),
            ]
        );
    }

    #[test]
    fn config_map_missing_key_or_object_fails_unless_optional() {
        let o = Objects::new();
        let with = |optional: bool, name: &str| {
            o.payload(&pod(json!([{"name": "v", "configMap": {
                "name": name, "optional": optional,
                "items": [{"key": "nope", "path": "n"}, {"key": "log.level", "path": "l"}]}}])))
        };
        assert_eq!(
            with(false, "conf").unwrap_err(),
            "configmap references non-existent config key: nope"
        );
        assert_eq!(
            files(&with(true, "conf").unwrap().unwrap()),
            vec![("l", &b"debug"[..], 0o644)]
        );
        assert_eq!(
            with(false, "gone").unwrap_err(),
            "configmap \"gone\" not found"
        );
        assert_eq!(
            with(true, "gone").unwrap(),
            Some(Payload::new()),
            "an optional missing configMap still mounts, empty"
        );
    }

    #[test]
    fn secret_volume_as_upstream() {
        let o = Objects::new();
        let all = o
            .payload(&pod(
                json!([{"name": "v", "secret": {"secretName": "creds", "defaultMode": 0o440}}]),
            ))
            .unwrap()
            .unwrap();
        assert_eq!(
            files(&all),
            vec![
                ("pass", &b"\xff\x00s3"[..], 0o440),
                ("user", &b"admin"[..], 0o440)
            ]
        );
        let with = |optional: bool, name: &str| {
            o.payload(&pod(json!([{"name": "v", "secret": {
                "secretName": name, "optional": optional,
                "items": [{"key": "user", "path": "u", "mode": 0o600}, {"key": "token", "path": "t"}]}}])))
        };
        assert_eq!(
            with(false, "creds").unwrap_err(),
            "references non-existent secret key: token"
        );
        assert_eq!(
            files(&with(true, "creds").unwrap().unwrap()),
            vec![("u", &b"admin"[..], 0o600)]
        );
        assert_eq!(
            with(false, "nope").unwrap_err(),
            "secret \"nope\" not found"
        );
        assert_eq!(with(true, "nope").unwrap(), Some(Payload::new()));
    }

    #[test]
    fn downward_api_files() {
        let o = Objects::new();
        let p = o
            .payload(&pod(json!([{"name": "v", "downwardAPI": {"items": [
                {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}, "mode": 0o600},
                {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
                {"path": "app", "fieldRef": {"fieldPath": "metadata.labels['app']"}},
                {"path": "res/cpu_limit", "resourceFieldRef":
                    {"containerName": "app", "resource": "limits.cpu", "divisor": "1m"}},
                {"path": "res/mem_request", "resourceFieldRef":
                    {"containerName": "app", "resource": "requests.memory", "divisor": "1Mi"}},
            ]}}])))
            .unwrap()
            .unwrap();
        assert_eq!(
            files(&p),
            vec![
                (
                    "annotations",
                    &b"note=\"a \\\"quoted\\\" value\""[..],
                    0o600
                ),
                ("app", &b"web"[..], 0o644),
                ("labels", &b"app=\"web\"\ntier=\"front\""[..], 0o644),
                ("name", &b"web"[..], 0o644),
                ("res/cpu_limit", &b"4000"[..], 0o644),
                ("res/mem_request", &b"32"[..], 0o644),
            ]
        );
    }

    #[test]
    fn downward_api_errors_are_aggregated() {
        let o = Objects::new();
        let err = o
            .payload(&pod(json!([{"name": "v", "downwardAPI": {"items": [
                {"path": "node", "fieldRef": {"fieldPath": "spec.nodeName"}},
                {"path": "ok", "fieldRef": {"fieldPath": "metadata.uid"}},
                {"path": "mem", "resourceFieldRef": {"containerName": "sidecar", "resource": "limits.memory"}},
            ]}}])))
            .unwrap_err();
        assert_eq!(
            err,
            "[unsupported fieldPath: spec.nodeName, container sidecar not found]"
        );
    }

    /// The volume the ServiceAccount admission plugin injects.
    fn kube_api_access() -> Value {
        json!([{"name": "kube-api-access-x7k2p", "projected": {
        "defaultMode": 420,
        "sources": [
            {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace",
                "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
        ]}}])
    }

    #[test]
    fn kube_api_access_volume() {
        let o = Objects::new();
        let p = o.payload(&pod(kube_api_access())).unwrap().unwrap();
        assert_eq!(
            files(&p),
            vec![
                ("ca.crt", &b"-----CA-----"[..], 0o644),
                ("namespace", &b"team"[..], 0o644),
                ("token", &b"tok-default"[..], 0o644),
            ]
        );
        assert!(p.values().all(|f| f.fs_user.is_none()));
        let refs = references(&pod(kube_api_access()));
        assert_eq!(
            refs.config_map_names().collect::<Vec<_>>(),
            ["kube-root-ca.crt"]
        );
        assert_eq!(
            refs.token_keys().cloned().collect::<Vec<_>>(),
            vec![TokenKey {
                audience: String::new(),
                expiration_seconds: 3607
            }]
        );
    }

    #[test]
    fn token_owner_and_mode_follow_fs_user_from() {
        let o = Objects::new();
        let token = |extra: Value| {
            let p = o
                .payload(&pod_with(kube_api_access(), extra))
                .unwrap()
                .unwrap();
            let t = &p["token"];
            // The other files keep defaultMode and no owner.
            assert_eq!(p["ca.crt"].mode, 0o644);
            assert_eq!(p["ca.crt"].fs_user, None);
            (t.mode, t.fs_user)
        };
        // Pod-level runAsUser covers every container.
        assert_eq!(
            token(json!({"securityContext": {"runAsUser": 1000}})),
            (0o600, Some(1000))
        );
        // Container-level, all the same, init containers included.
        assert_eq!(
            token(json!({
                "initContainers": [{"name": "init", "image": "i", "securityContext": {"runAsUser": 7}}],
                "containers": [{"name": "app", "image": "i", "securityContext": {"runAsUser": 7}}],
            })),
            (0o600, Some(7))
        );
        // Two users: no owner, defaultMode.
        assert_eq!(
            token(json!({
                "securityContext": {"runAsUser": 1000},
                "containers": [
                    {"name": "a", "image": "i"},
                    {"name": "b", "image": "i", "securityContext": {"runAsUser": 2000}}],
            })),
            (0o644, None)
        );
        // One container without a user: no owner.
        assert_eq!(
            token(json!({
                "initContainers": [{"name": "init", "image": "i"}],
                "containers": [{"name": "app", "image": "i", "securityContext": {"runAsUser": 7}}],
            })),
            (0o644, None)
        );
        // An ephemeral container with another user counts too.
        assert_eq!(
            token(json!({
                "securityContext": {"runAsUser": 1000},
                "ephemeralContainers": [{"name": "dbg", "image": "i", "securityContext": {"runAsUser": 0}}],
            })),
            (0o644, None)
        );
        // fsGroup alone: 0600 (the writer makes it 0640), no owner.
        assert_eq!(
            token(json!({"securityContext": {"fsGroup": 2000}})),
            (0o600, None)
        );
        // fsGroup and one user: both.
        assert_eq!(
            token(json!({"securityContext": {"fsGroup": 2000, "runAsUser": 1000}})),
            (0o600, Some(1000))
        );
    }

    #[test]
    fn projected_sources_merge_in_order_later_wins() {
        let o = Objects::new();
        let p = o
            .payload(&pod(json!([{"name": "v", "projected": {"defaultMode": 0o440, "sources": [
                {"configMap": {"name": "conf", "items": [{"key": "log.level", "path": "shared"}]}},
                {"secret": {"name": "creds", "items": [{"key": "user", "path": "shared"}]}},
                {"serviceAccountToken": {"path": "vault/token", "audience": "vault"}},
                {"secret": {"name": "missing", "optional": true}},
            ]}}])))
            .unwrap()
            .unwrap();
        assert_eq!(
            files(&p),
            vec![
                ("shared", &b"admin"[..], 0o440),
                ("vault/token", &b"tok-vault"[..], 0o440)
            ]
        );
    }

    #[test]
    fn projected_errors_are_aggregated_and_unsupported_sources_fail_closed() {
        let o = Objects::new();
        let err = o
            .payload(&pod(json!([{"name": "v", "projected": {"sources": [
                {"configMap": {"name": "gone"}},
                {"secret": {"name": "creds", "items": [{"key": "x", "path": "x"}]}},
                {"clusterTrustBundle": {"signerName": "example.com/s", "path": "ca.pem"}},
                {"serviceAccountToken": {"path": "t", "audience": "other"}},
            ]}}])))
            .unwrap_err();
        assert_eq!(
            err,
            "[configmap \"gone\" not found, references non-existent secret key: x, \
             combination of signerName and labelSelector matched zero ClusterTrustBundles, \
             no service account token for audience \"other\" and expirationSeconds 3600 (not requested)]"
        );
        let one = o
            .payload(&pod(json!([{"name": "v", "projected": {"sources": [
                {"podCertificate": {"signerName": "example.com/s", "keyType": "ED25519", "credentialBundlePath": "c.pem"}}]}}])))
            .unwrap_err();
        assert_eq!(one, "credential bundle is not issued yet");
        let issued = o
            .payload(&pod(json!([{"name": "w", "projected": {"defaultMode": 0o440, "sources": [
                {"configMap": {"name": "conf"}},
                {"podCertificate": {"signerName": "example.com/s", "keyType": "ED25519",
                  "credentialBundlePath": "b.pem", "keyPath": "k.pem", "certificateChainPath": "c.pem"}}]}}])))
            .unwrap()
            .unwrap();
        let f: Vec<_> = files(&issued)
            .into_iter()
            .filter(|(p, _, _)| p.ends_with(".pem"))
            .collect();
        assert_eq!(
            f,
            vec![
                ("b.pem", &b"KEYCHAIN"[..], 0o440),
                ("c.pem", &b"CHAIN"[..], 0o440),
                ("k.pem", &b"KEY"[..], 0o440)
            ]
        );
    }

    #[test]
    fn other_volume_types_have_no_payload() {
        let o = Objects::new();
        let v = json!([{"name": "scratch", "emptyDir": {}}]);
        assert_eq!(o.payload(&pod(v.clone())).unwrap(), None);
        let p = pod(v);
        assert_eq!(plugin_dir(&p.spec.unwrap().volumes.unwrap()[0]), None);
        let dirs: Vec<_> = [
            json!({"name": "a", "configMap": {"name": "x"}}),
            json!({"name": "b", "secret": {"secretName": "x"}}),
            json!({"name": "c", "downwardAPI": {}}),
            json!({"name": "d", "projected": {"sources": []}}),
        ]
        .into_iter()
        .map(|v| {
            let v: Volume = serde_json::from_value(v).unwrap();
            (plugin_dir(&v), in_memory(&v))
        })
        .collect();
        assert_eq!(
            dirs,
            [
                (Some("kubernetes.io~configmap"), false),
                (Some("kubernetes.io~secret"), true),
                (Some("kubernetes.io~downward-api"), true),
                (Some("kubernetes.io~projected"), true)
            ],
            "directory, and whether on a tmpfs (as upstream's wrapped emptyDirs)"
        );
    }

    #[test]
    fn references_collect_names_optionality_and_tokens() {
        let p = pod(json!([
            {"name": "a", "configMap": {"name": "conf", "optional": true}},
            {"name": "b", "secret": {"secretName": "creds", "optional": true}},
            {"name": "c", "projected": {"sources": [
                {"configMap": {"name": "conf"}},
                {"configMap": {"name": "extra", "optional": true}},
                {"secret": {"name": "creds", "optional": true}},
                {"serviceAccountToken": {"path": "t1"}},
                {"serviceAccountToken": {"path": "t2", "audience": "vault", "expirationSeconds": 600}},
            ]}},
            {"name": "d", "emptyDir": {}},
        ]));
        let refs = references(&p);
        assert_eq!(
            refs.config_maps,
            [("conf".to_string(), false), ("extra".to_string(), true)]
                .into_iter()
                .collect(),
            "conf is required by the projected volume"
        );
        assert_eq!(
            refs.secrets,
            [("creds".to_string(), true)].into_iter().collect()
        );
        assert_eq!(
            refs.tokens,
            [
                TokenKey {
                    audience: String::new(),
                    expiration_seconds: 3600
                },
                TokenKey {
                    audience: "vault".into(),
                    expiration_seconds: 600
                },
            ]
            .into_iter()
            .collect()
        );
        let vols = p.spec.unwrap().volumes.unwrap();
        assert_eq!(token_keys_of(&vols[0]), vec![]);
        assert_eq!(token_keys_of(&vols[2]).len(), 2);
    }

    #[test]
    fn paths_are_validated_as_upstream() {
        assert_eq!(
            validate_path("").unwrap_err(),
            "invalid path: must not be empty: \"\""
        );
        assert_eq!(
            validate_path("/etc/passwd").unwrap_err(),
            "invalid path: must be relative path: /etc/passwd"
        );
        assert_eq!(
            validate_path("a/../../b").unwrap_err(),
            "invalid path: must not contain '..': a/../../b"
        );
        assert_eq!(
            validate_path("..data").unwrap_err(),
            "invalid path: must not start with '..': ..data"
        );
        assert_eq!(
            validate_path("./..data/x").unwrap_err(),
            "invalid path: must not start with '..': ./..data/x"
        );
        assert_eq!(
            validate_path("./").unwrap_err(),
            "invalid path: must not be empty: \"./\""
        );
        assert_eq!(
            validate_path(&"a".repeat(256)).unwrap_err(),
            "invalid path: filenames must be less than or equal to 255 characters"
        );
        assert_eq!(
            validate_path(&"a/".repeat(2049)).unwrap_err(),
            "invalid path: must be less than or equal to 4096 characters"
        );
        assert_eq!(validate_path("a/..b/c..").unwrap(), "a/..b/c..");
        assert_eq!(validate_path("./a//b/").unwrap(), "a/b");
        // In a volume: the item's path is checked.
        let o = Objects::new();
        let err = o
            .payload(&pod(json!([{"name": "v", "configMap": {"name": "conf",
                "items": [{"key": "log.level", "path": "../escape"}]}}])))
            .unwrap_err();
        assert_eq!(err, "invalid path: must not contain '..': ../escape");
    }
}
