//! Which credentials pulled each image, so that a pod cannot use a private
//! image another pod's Secret pulled: upstream's image pull manager
//! (KubeletEnsureSecretPulledImages, on by default since v1.35).
//!
//! After a pull the kubelet records, per image ID (the runtime's ref) and
//! repository, the Secret that worked (namespace, name, UID and a hash of
//! the login), or that the pull needed none (then every pod may use it).
//! Before a pod uses an image already present, [`PullRecords::must_pull`]
//! says whether it has to pull it (again) with its own credentials:
//!
//! * `NeverVerify`: never.
//! * `NeverVerifyPreloadedImages` (the default): only for images the
//!   kubelet pulled (a record, or a pull started and never finished);
//!   images put on the node some other way are used freely.
//! * `AlwaysVerify`: every image without a record is pulled.
//!
//! With a record, the pod may use the image when it was pulled without
//! credentials, or when one of the pod's pull Secrets is the recorded one
//! (same coordinates) or holds the same login (same hash; then that Secret
//! is added to the record). Otherwise the pod pulls. Records live under
//! `<root-dir>/image_manager/` (0700) and survive kubelet restarts; a
//! record that cannot be read makes its image be verified again.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

pub use crate::config::VerifyPolicy;

/// What [`PullRecords::must_pull`] says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The pod may use the image on the node.
    Use,
    /// The pod must pull it with its own credentials.
    Pull,
    /// Ask again with the pod's pull Secrets.
    AskSecrets,
}

/// A pull Secret as the records know it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretId {
    /// The Secret's UID.
    pub uid: String,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// A hash of the login it holds.
    pub hash: String,
}

/// The credentials that pulled one repository's image.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Access {
    /// Pulled without credentials: any pod of the node may use it.
    #[serde(default)]
    anonymous: bool,
    #[serde(default)]
    secrets: Vec<SecretId>,
}

/// One image ID's record: repository → who pulled it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Record {
    image_ref: String,
    repos: BTreeMap<String, Access>,
}

/// Upstream stops adding Secrets to a record while matching past this.
const MAX_SECRETS_ADDED_WHILE_MATCHING: usize = 100;

/// The records of one kubelet.
pub struct PullRecords {
    policy: VerifyPolicy,
    dir: Option<PathBuf>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    pulled: HashMap<String, Record>,
    /// Images whose pull started and did not end (count per image).
    intents: HashMap<String, u32>,
}

impl PullRecords {
    /// Records kept in memory only (tests, the sim runtime).
    pub fn in_memory(policy: VerifyPolicy) -> PullRecords {
        PullRecords {
            policy,
            dir: None,
            state: Mutex::new(State::default()),
        }
    }

    /// Records under `root/image_manager`, loading what a previous run left.
    pub fn open(root: &Path, policy: VerifyPolicy) -> std::io::Result<PullRecords> {
        let dir = root.join("image_manager");
        for sub in ["pulled", "pulling"] {
            std::fs::create_dir_all(dir.join(sub))?;
        }
        set_private(&dir)?;
        let mut state = State::default();
        for entry in std::fs::read_dir(dir.join("pulled"))? {
            let path = entry?.path();
            if is_leftover(&path) {
                continue;
            }
            match std::fs::read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice::<Record>(&b).ok())
            {
                Some(r) => {
                    state.pulled.insert(r.image_ref.clone(), r);
                }
                None => {
                    // Unreadable: forget it, so the image is verified again.
                    tracing::warn!(path = %path.display(), "unreadable image pull record removed");
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        for entry in std::fs::read_dir(dir.join("pulling"))? {
            let path = entry?.path();
            if is_leftover(&path) {
                continue;
            }
            if let Ok(image) = std::fs::read_to_string(&path) {
                state.intents.insert(image, 1);
            }
        }
        Ok(PullRecords {
            policy,
            dir: Some(dir),
            state: Mutex::new(state),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a pod may use `image`, present as `image_ref`, or must pull
    /// it with its own credentials. `pod_secrets` are the pod's pull
    /// Secrets that match the image; `None` when not fetched yet, and then
    /// the answer may be [`Verdict::AskSecrets`].
    pub fn must_pull(
        &self,
        image: &str,
        image_ref: &str,
        pod_secrets: Option<&[SecretId]>,
    ) -> Verdict {
        if image_ref.is_empty() {
            return Verdict::Pull;
        }
        let repo = super::credentials::repository(image);
        let mut state = self.lock();
        let record = state.pulled.get(image_ref).cloned();
        let pulled_by_kubelet = record.is_some() || state.intents.contains_key(image);
        let verify = match self.policy {
            VerifyPolicy::NeverVerify => false,
            VerifyPolicy::NeverVerifyPreloadedImages => pulled_by_kubelet,
            VerifyPolicy::AlwaysVerify => true,
        };
        if !verify {
            return Verdict::Use;
        }
        let Some(access) = record.and_then(|r| r.repos.get(&repo).cloned()) else {
            return Verdict::Pull;
        };
        if access.anonymous {
            return Verdict::Use;
        }
        if access.secrets.is_empty() {
            return Verdict::Pull;
        }
        let Some(pod_secrets) = pod_secrets else {
            return Verdict::AskSecrets;
        };
        for mine in pod_secrets {
            for theirs in &access.secrets {
                let same_hash = !theirs.hash.is_empty() && mine.hash == theirs.hash;
                let same_secret = mine.uid == theirs.uid
                    && mine.namespace == theirs.namespace
                    && mine.name == theirs.name;
                if same_hash || same_secret {
                    // Remember this Secret too (a new one with the same
                    // login, or the recorded one with a rotated login).
                    if !(same_hash && same_secret)
                        && access.secrets.len() < MAX_SECRETS_ADDED_WHILE_MATCHING
                    {
                        self.add(&mut state, &repo, image_ref, Some(mine.clone()));
                    }
                    return Verdict::Use;
                }
            }
        }
        Verdict::Pull
    }

    /// A pull of `image` is about to start.
    pub fn pull_started(&self, image: &str) {
        let mut state = self.lock();
        let n = state.intents.entry(image.to_string()).or_insert(0);
        *n += 1;
        if *n == 1 {
            if let Some(dir) = &self.dir {
                let path = dir.join("pulling").join(file_name(image));
                if let Err(e) = write_private(&path, image.as_bytes()) {
                    tracing::warn!(error = %e, path = %path.display(), "writing an image pull intent");
                }
            }
        }
    }

    /// The pull of `image` ended: it gave `image_ref` with `secret` (or
    /// without credentials), or failed (`image_ref` `None`).
    pub fn pull_ended(&self, image: &str, image_ref: Option<&str>, secret: Option<SecretId>) {
        let mut state = self.lock();
        if let Some(image_ref) = image_ref {
            let repo = super::credentials::repository(image);
            self.add(&mut state, &repo, image_ref, secret.clone());
            if secret.is_none() {
                if let Some(r) = state.pulled.get_mut(image_ref) {
                    r.repos.entry(repo).or_default().anonymous = true;
                }
                self.persist(&state, image_ref);
            }
        }
        let done = match state.intents.get_mut(image) {
            Some(n) if *n > 1 => {
                *n -= 1;
                false
            }
            Some(_) => true,
            None => false,
        };
        if done {
            state.intents.remove(image);
            if let Some(dir) = &self.dir {
                let _ = std::fs::remove_file(dir.join("pulling").join(file_name(image)));
            }
        }
    }

    fn add(&self, state: &mut State, repo: &str, image_ref: &str, secret: Option<SecretId>) {
        let record = state
            .pulled
            .entry(image_ref.to_string())
            .or_insert_with(|| Record {
                image_ref: image_ref.to_string(),
                repos: BTreeMap::new(),
            });
        let access = record.repos.entry(repo.to_string()).or_default();
        if let Some(s) = secret {
            match access
                .secrets
                .iter_mut()
                .find(|t| t.uid == s.uid && t.namespace == s.namespace && t.name == s.name)
            {
                Some(t) => t.hash = s.hash,
                None => access.secrets.push(s),
            }
        }
        self.persist(state, image_ref);
    }

    fn persist(&self, state: &State, image_ref: &str) {
        let (Some(dir), Some(r)) = (&self.dir, state.pulled.get(image_ref)) else {
            return;
        };
        let path = dir.join("pulled").join(file_name(image_ref));
        let body = serde_json::to_vec(r).unwrap_or_default();
        if let Err(e) = write_private(&path, &body) {
            tracing::warn!(error = %e, path = %path.display(), "writing an image pull record");
        }
    }
}

/// A file name for `key`: its SHA-256 in hex.
fn file_name(key: &str) -> String {
    hex(ring::digest::digest(&ring::digest::SHA256, key.as_bytes()).as_ref())
}

/// The hash of a login recorded for a Secret.
pub fn login_hash(username: &str, password: &str) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(username.as_bytes());
    ctx.update(b"\0");
    ctx.update(password.as_bytes());
    hex(ctx.finish().as_ref())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn set_private(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// A temporary file a write interrupted by a crash left (its name starts
/// with a dot): removed, never read as a record.
fn is_leftover(path: &Path) -> bool {
    let dot = path
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with('.'));
    if dot {
        let _ = std::fs::remove_file(path);
    }
    dot
}

/// Writes `body` to `path` in one step, 0600.
fn write_private(path: &Path, body: &[u8]) -> std::io::Result<()> {
    rkube_util::file::replace_private(path, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(name: &str, login: &str) -> SecretId {
        SecretId {
            uid: format!("uid-{name}"),
            namespace: "ns".into(),
            name: name.into(),
            hash: login_hash(login, "pw"),
        }
    }

    const IMG: &str = "registry.example.com/team/app:1";
    const REF: &str = "sha256:aaaa";

    #[test]
    fn preloaded_images_are_used_freely_unless_always_verify() {
        let r = PullRecords::in_memory(VerifyPolicy::NeverVerifyPreloadedImages);
        assert_eq!(r.must_pull(IMG, REF, Some(&[])), Verdict::Use);
        let r = PullRecords::in_memory(VerifyPolicy::AlwaysVerify);
        assert_eq!(r.must_pull(IMG, REF, Some(&[])), Verdict::Pull);
        let r = PullRecords::in_memory(VerifyPolicy::NeverVerify);
        r.pull_started(IMG);
        r.pull_ended(IMG, Some(REF), Some(secret("a", "u")));
        assert_eq!(r.must_pull(IMG, REF, Some(&[])), Verdict::Use);
    }

    #[test]
    fn an_image_pulled_with_a_secret_needs_that_secret_or_the_same_login() {
        let r = PullRecords::in_memory(VerifyPolicy::NeverVerifyPreloadedImages);
        r.pull_started(IMG);
        r.pull_ended(IMG, Some(REF), Some(secret("a", "user1")));
        // the record has Secrets: the pod's are needed to decide
        assert_eq!(r.must_pull(IMG, REF, None), Verdict::AskSecrets);
        // no Secret, or another login: pull with your own
        assert_eq!(r.must_pull(IMG, REF, Some(&[])), Verdict::Pull);
        assert_eq!(
            r.must_pull(IMG, REF, Some(&[secret("b", "user2")])),
            Verdict::Pull
        );
        // the same Secret
        assert_eq!(
            r.must_pull(IMG, REF, Some(&[secret("a", "user1")])),
            Verdict::Use
        );
        // another Secret with the same login: allowed, and remembered
        assert_eq!(
            r.must_pull(IMG, REF, Some(&[secret("c", "user1")])),
            Verdict::Use
        );
        let rec = r.lock().pulled[REF].repos["registry.example.com/team/app"].clone();
        assert_eq!(
            rec.secrets
                .iter()
                .map(|s| s.name.as_str())
                .collect::<Vec<_>>(),
            ["a", "c"]
        );
        // the same image under another repository has no record: verify
        assert_eq!(
            r.must_pull(
                "registry.example.com/other/app:1",
                REF,
                Some(&[secret("a", "user1")])
            ),
            Verdict::Pull
        );
    }

    #[test]
    fn an_image_pulled_without_credentials_is_open_to_every_pod() {
        let r = PullRecords::in_memory(VerifyPolicy::AlwaysVerify);
        r.pull_started(IMG);
        r.pull_ended(IMG, Some(REF), None);
        assert_eq!(r.must_pull(IMG, REF, Some(&[])), Verdict::Use);
    }

    #[test]
    fn an_unfinished_pull_marks_the_image_as_the_kubelets() {
        let r = PullRecords::in_memory(VerifyPolicy::NeverVerifyPreloadedImages);
        r.pull_started(IMG);
        assert_eq!(r.must_pull(IMG, REF, Some(&[])), Verdict::Pull);
        r.pull_ended(IMG, None, None); // failed
        assert_eq!(r.must_pull(IMG, REF, Some(&[])), Verdict::Use);
    }

    #[test]
    fn records_and_intents_survive_a_restart_and_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let scratch = crate::scratch::Scratch::new("pull-records");
        let dir = scratch.path().to_path_buf();
        let r = PullRecords::open(&dir, VerifyPolicy::NeverVerifyPreloadedImages).unwrap();
        r.pull_started(IMG);
        r.pull_ended(IMG, Some(REF), Some(secret("a", "user1")));
        r.pull_started("other.example.com/x:1"); // the kubelet dies mid-pull
        drop(r);
        let mode = std::fs::metadata(dir.join("image_manager"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        std::fs::write(dir.join("image_manager/pulled/garbage"), b"{not json").unwrap();
        let r = PullRecords::open(&dir, VerifyPolicy::NeverVerifyPreloadedImages).unwrap();
        assert_eq!(r.must_pull(IMG, REF, Some(&[])), Verdict::Pull);
        assert_eq!(
            r.must_pull(IMG, REF, Some(&[secret("a", "user1")])),
            Verdict::Use
        );
        assert_eq!(
            r.must_pull("other.example.com/x:1", "sha256:bbbb", Some(&[])),
            Verdict::Pull
        );
        assert!(!dir.join("image_manager/pulled/garbage").exists());
    }

    #[test]
    fn policies_parse_and_the_allowlist_one_is_not_implemented() {
        assert_eq!(
            VerifyPolicy::parse(""),
            Some(VerifyPolicy::NeverVerifyPreloadedImages)
        );
        assert_eq!(
            VerifyPolicy::parse("AlwaysVerify"),
            Some(VerifyPolicy::AlwaysVerify)
        );
        assert_eq!(
            VerifyPolicy::parse("NeverVerify"),
            Some(VerifyPolicy::NeverVerify)
        );
        assert_eq!(VerifyPolicy::parse("NeverVerifyAllowlistedImages"), None);
    }
}
