//! Registry credentials from a pod's `imagePullSecrets`, as upstream's
//! kubelet finds them (`credentialprovider` and its `secrets` package):
//!
//! * a Secret counts when it is of type `kubernetes.io/dockerconfigjson`
//!   with a non-empty `.dockerconfigjson` (`{"auths": {...}}`) or of type
//!   `kubernetes.io/dockercfg` with a non-empty `.dockercfg` (the map
//!   itself); other Secrets are passed over. Malformed JSON in one that
//!   counts is an error (the pull fails with it), as upstream.
//! * each entry's key becomes a registry glob: a scheme is assumed
//!   (`https://`), a `/v1/` or `/v2/` path prefix is dropped, and the key
//!   is the host plus what path remains. An entry's `auth`
//!   (base64 `user:password`) overrides its `username`/`password`.
//! * an image is looked up by its repository as the runtime normalizes it
//!   (`busybox:1` is `docker.io/library/busybox`): every key whose host
//!   matches label by label (shell globs, the same number of labels, the
//!   same port) and whose path prefixes the repository's, the keys in
//!   reverse lexical order; with none, Docker Hub images fall back to the
//!   `index.docker.io` entry.
//!
//! The kubelet tries the credentials in that order until a pull succeeds;
//! with none it pulls anonymously.

use std::collections::{BTreeMap, HashSet};

use base64::Engine;
use k8s_openapi::api::core::v1::Secret;
use serde::Deserialize;

use super::pull_records::{login_hash, SecretId};

/// One registry login, and the Secret it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    /// The registry user.
    pub username: String,
    /// Its password (or token).
    pub password: String,
    /// The Secret it came from (with the login's hash), as the pull
    /// records know it.
    pub secret: SecretId,
}

/// The credentials of a set of pull Secrets, indexed by registry glob.
#[derive(Debug, Clone, Default)]
pub struct Keyring {
    creds: BTreeMap<String, Vec<Credential>>,
}

#[derive(Deserialize)]
struct DockerConfigJson {
    #[serde(default)]
    auths: BTreeMap<String, Entry>,
}

#[derive(Deserialize, Default)]
struct Entry {
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    auth: String,
}

const DOCKER_CONFIG_JSON: &str = "kubernetes.io/dockerconfigjson";
const DOCKERCFG: &str = "kubernetes.io/dockercfg";

impl Keyring {
    /// The keyring of `secrets` (those of a pull-secret type).
    pub fn from_secrets(secrets: &[Secret]) -> Result<Keyring, String> {
        let mut ring = Keyring::default();
        for s in secrets {
            let id = format!(
                "{}/{}",
                s.metadata.namespace.as_deref().unwrap_or_default(),
                s.metadata.name.as_deref().unwrap_or_default()
            );
            let data = |key: &str| {
                s.data
                    .as_ref()
                    .and_then(|d| d.get(key))
                    .map(|b| b.0.as_slice())
                    .filter(|b| !b.is_empty())
            };
            let entries = match s.type_.as_deref() {
                Some(DOCKER_CONFIG_JSON) => match data(".dockerconfigjson") {
                    Some(raw) => {
                        serde_json::from_slice::<DockerConfigJson>(raw)
                            .map_err(|e| format!("secret {id}: .dockerconfigjson: {e}"))?
                            .auths
                    }
                    None => continue,
                },
                Some(DOCKERCFG) => match data(".dockercfg") {
                    Some(raw) => serde_json::from_slice::<BTreeMap<String, Entry>>(raw)
                        .map_err(|e| format!("secret {id}: .dockercfg: {e}"))?,
                    None => continue,
                },
                _ => continue,
            };
            for (registry, entry) in entries {
                let (username, password) = if entry.auth.is_empty() {
                    (entry.username, entry.password)
                } else {
                    decode_auth(&entry.auth)
                        .ok_or_else(|| format!("secret {id}: the auth of {registry:?} is not base64(username:password)"))?
                };
                let Some(key) = registry_key(&registry) else {
                    tracing::warn!(secret = %id, %registry, "registry entry is not a URL; ignored");
                    continue;
                };
                let secret = SecretId {
                    uid: s.metadata.uid.clone().unwrap_or_default(),
                    namespace: s.metadata.namespace.clone().unwrap_or_default(),
                    name: s.metadata.name.clone().unwrap_or_default(),
                    hash: login_hash(&username, &password),
                };
                ring.creds.entry(key).or_default().push(Credential {
                    username,
                    password,
                    secret,
                });
            }
        }
        Ok(ring)
    }

    /// The credentials for `image`, in the order to try them.
    pub fn lookup(&self, image: &str) -> Vec<Credential> {
        let repo = repository(image);
        let mut out = Vec::new();
        for (key, creds) in self.creds.iter().rev() {
            if urls_match(key, &repo) {
                out.extend(creds.iter().cloned());
            }
        }
        if out.is_empty() && is_docker_hub(&repo) {
            if let Some(c) = self.creds.get("index.docker.io") {
                out.extend(c.iter().cloned());
            }
        }
        out
    }
}

/// `base64(user:password)`, padded or not.
fn decode_auth(field: &str) -> Option<(String, String)> {
    let raw = if field.trim().ends_with('=') {
        base64::engine::general_purpose::STANDARD.decode(field)
    } else {
        base64::engine::general_purpose::STANDARD_NO_PAD.decode(field)
    }
    .ok()?;
    let text = String::from_utf8(raw).ok()?;
    let (u, p) = text.split_once(':')?;
    Some((u.to_string(), p.to_string()))
}

/// The index key of a config entry: host, plus the path beyond a
/// `/v1/`/`/v2/` prefix unless that is empty or `/`.
fn registry_key(registry: &str) -> Option<String> {
    let rest = registry
        .strip_prefix("https://")
        .or_else(|| registry.strip_prefix("http://"))
        .unwrap_or(registry);
    let (host, path) = split_host_path(rest);
    if host.contains(['?', '#', ' ']) {
        return None;
    }
    let path = match path.get(..4) {
        Some("/v1/") | Some("/v2/") => &path[3..],
        _ => path,
    };
    if path.is_empty() || path == "/" {
        Some(host.to_string())
    } else {
        Some(format!("{host}{path}"))
    }
}

/// `host[:port]` and `/path` (query and fragment dropped) of a schemeless URL.
fn split_host_path(s: &str) -> (&str, &str) {
    let s = s.split(['?', '#']).next().unwrap_or_default();
    match s.find('/') {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, ""),
    }
}

/// Docker's normalized repository of an image reference: tag and digest
/// dropped, `docker.io/` (and `library/` for one-part names) added when
/// the first part is not a registry host.
pub fn repository(image: &str) -> String {
    let no_digest = image.split('@').next().unwrap_or_default();
    let name = match no_digest.rfind(':') {
        Some(i) if !no_digest[i..].contains('/') => &no_digest[..i],
        _ => no_digest,
    };
    let (domain, path) = match name.split_once('/') {
        Some((first, rest))
            if first.contains(['.', ':'])
                || first == "localhost"
                || first.chars().any(|c| c.is_ascii_uppercase()) =>
        {
            (first, rest.to_string())
        }
        _ => ("docker.io", name.to_string()),
    };
    let domain = if domain == "index.docker.io" {
        "docker.io"
    } else {
        domain
    };
    if domain == "docker.io" && !path.contains('/') {
        format!("docker.io/library/{path}")
    } else {
        format!("{domain}/{path}")
    }
}

/// Upstream's `isDefaultRegistryMatch`.
fn is_docker_hub(repo: &str) -> bool {
    let mut parts = repo.splitn(2, '/');
    let first = parts.next().unwrap_or_default();
    if first.is_empty() {
        return false;
    }
    match parts.next() {
        None => true,
        Some(_) => {
            first == "docker.io" || first == "index.docker.io" || !first.contains(['.', ':'])
        }
    }
}

/// Upstream's `URLsMatchStr`: the glob's host labels match the target's
/// one by one (as many of them, same port) and its path prefixes the
/// target's.
fn urls_match(glob: &str, target: &str) -> bool {
    let (gh, gp) = split_host_path(glob);
    let (th, tp) = split_host_path(target);
    let (g_host, g_port) = split_port(gh);
    let (t_host, t_port) = split_port(th);
    if g_port != t_port || !tp.starts_with(gp) {
        return false;
    }
    let g: Vec<&str> = g_host.split('.').collect();
    let t: Vec<&str> = t_host.split('.').collect();
    g.len() == t.len()
        && g.iter()
            .zip(&t)
            .all(|(p, s)| glob_match(p.as_bytes(), s.as_bytes()))
}

/// `host` and `port` of `host:port` (`[v6]:port` too); no port: empty.
fn split_port(hp: &str) -> (&str, &str) {
    if let Some(rest) = hp.strip_prefix('[') {
        if let Some((h, p)) = rest.split_once("]:") {
            return (h, p);
        }
        return (hp, "");
    }
    match hp.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => (h, p),
        _ => (hp, ""),
    }
}

/// Go's `filepath.Match` on one label: `*`, `?`, `[...]` (with `^`
/// negation and ranges) and `\` escapes; a malformed pattern matches
/// nothing (upstream ignores the error).
fn glob_match(p: &[u8], s: &[u8]) -> bool {
    // Pattern and label both come from users (a pull Secret, an image
    // name): remembering the (pattern, label) suffixes that failed keeps
    // `*a*a*a…` against a long label polynomial, not exponential.
    glob_from(p, s, &mut HashSet::new())
}

fn glob_from(p: &[u8], s: &[u8], failed: &mut HashSet<(usize, usize)>) -> bool {
    let key = (p.len(), s.len());
    if failed.contains(&key) {
        return false;
    }
    let hit = match p.split_first() {
        None => s.is_empty(),
        Some((b'*', rest)) => (0..=s.len()).any(|i| glob_from(rest, &s[i..], failed)),
        Some((b'?', rest)) => !s.is_empty() && glob_from(rest, &s[1..], failed),
        Some((b'[', rest)) => match (
            s.split_first(),
            s.first().and_then(|&c| class_match(rest, c)),
        ) {
            (Some((_, s_rest)), Some((true, after))) => glob_from(after, s_rest, failed),
            _ => false,
        },
        Some((b'\\', rest)) => match (rest.split_first(), s.split_first()) {
            (Some((pc, pr)), Some((sc, sr))) => pc == sc && glob_from(pr, sr, failed),
            _ => false,
        },
        Some((pc, rest)) => s.first() == Some(pc) && glob_from(rest, &s[1..], failed),
    };
    if !hit {
        failed.insert(key);
    }
    hit
}

/// A `[...]` class after its `[`: whether `c` is in it, and the pattern
/// after its `]`; `None` when malformed.
fn class_match(p: &[u8], c: u8) -> Option<(bool, &[u8])> {
    let (negate, mut p) = match p.first() {
        Some(b'^') => (true, &p[1..]),
        _ => (false, p),
    };
    let mut hit = false;
    let mut first = true;
    loop {
        match p.first() {
            None => return None,
            Some(b']') if !first => return Some((hit != negate, &p[1..])),
            _ => {}
        }
        first = false;
        let (lo, rest) = class_char(p)?;
        p = rest;
        let hi = if p.first() == Some(&b'-') && p.get(1).is_some_and(|&b| b != b']') {
            let (hi, rest) = class_char(&p[1..])?;
            p = rest;
            hi
        } else {
            lo
        };
        if lo <= c && c <= hi {
            hit = true;
        }
    }
}

fn class_char(p: &[u8]) -> Option<(u8, &[u8])> {
    match p {
        [b'\\', c, rest @ ..] => Some((*c, rest)),
        [b'\\'] | [] => None,
        [c, rest @ ..] => Some((*c, rest)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use serde_json::json;

    fn secret(name: &str, type_: &str, key: &str, value: serde_json::Value) -> Secret {
        let mut data = BTreeMap::new();
        data.insert(key.to_string(), ByteString(value.to_string().into_bytes()));
        Secret {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            type_: Some(type_.into()),
            data: Some(data),
            ..Default::default()
        }
    }

    fn json_secret(name: &str, auths: serde_json::Value) -> Secret {
        secret(
            name,
            DOCKER_CONFIG_JSON,
            ".dockerconfigjson",
            json!({ "auths": auths }),
        )
    }

    fn users(ring: &Keyring, image: &str) -> Vec<String> {
        ring.lookup(image).into_iter().map(|c| c.username).collect()
    }

    #[test]
    fn repositories_are_normalized_as_the_runtime_does() {
        for (image, repo) in [
            ("busybox", "docker.io/library/busybox"),
            ("busybox:1.36", "docker.io/library/busybox"),
            ("library/busybox@sha256:abcd", "docker.io/library/busybox"),
            ("foo/bar:1", "docker.io/foo/bar"),
            ("localhost:5000/pause:testing", "localhost:5000/pause"),
            ("localhost/pause", "localhost/pause"),
            (
                "registry.k8s.io/e2e-test-images/agnhost:2.59",
                "registry.k8s.io/e2e-test-images/agnhost",
            ),
            ("gcr.io/p/i:t@sha256:ff", "gcr.io/p/i"),
            ("index.docker.io/busybox", "docker.io/library/busybox"),
        ] {
            assert_eq!(repository(image), repo, "{image}");
        }
    }

    #[test]
    fn the_auth_field_overrides_username_and_password() {
        // "user1:pass1", padded; "u:p" unpadded (dTpw).
        let ring = Keyring::from_secrets(&[json_secret(
            "a",
            json!({
                "localhost:5000": {"username": "x", "password": "y", "auth": "dXNlcjE6cGFzczE="},
                "example.com": {"auth": "dTpw"},
                "plain.example.com": {"username": "pu", "password": "pp"}
            }),
        )])
        .unwrap();
        let c = &ring.lookup("localhost:5000/pause:testing")[0];
        assert_eq!(
            (c.username.as_str(), c.password.as_str()),
            ("user1", "pass1")
        );
        assert_eq!(
            (c.secret.namespace.as_str(), c.secret.name.as_str()),
            ("ns", "a")
        );
        assert_eq!(c.secret.hash, login_hash("user1", "pass1"));
        let c = &ring.lookup("example.com/app")[0];
        assert_eq!((c.username.as_str(), c.password.as_str()), ("u", "p"));
        assert_eq!(users(&ring, "plain.example.com/x"), ["pu"]);
    }

    #[test]
    fn hosts_match_label_by_label_with_globs_and_ports() {
        let ring = Keyring::from_secrets(&[json_secret(
            "a",
            json!({
                "*.example.com": {"username": "star"},
                "https://registry.example.com/v2/": {"username": "v2"},
                "registry.example.com/team": {"username": "team"},
                "registry.example.com:8443": {"username": "port"},
                "reg[0-9].example.org": {"username": "class"}
            }),
        )])
        .unwrap();
        // reverse key order: registry.example.com/team, registry.example.com, *.example.com
        assert_eq!(
            users(&ring, "registry.example.com/team/app:1"),
            ["team", "v2", "star"]
        );
        assert_eq!(
            users(&ring, "registry.example.com/other/app"),
            ["v2", "star"]
        );
        assert_eq!(users(&ring, "registry.example.com:8443/app"), ["port"]);
        // a glob label matches one label, not several
        assert_eq!(users(&ring, "a.b.example.com/app"), Vec::<String>::new());
        assert_eq!(users(&ring, "reg7.example.org/app"), ["class"]);
        assert_eq!(users(&ring, "regx.example.org/app"), Vec::<String>::new());
        // an image without a registry host is Docker Hub's
        assert_eq!(users(&ring, "app"), Vec::<String>::new());
    }

    #[test]
    fn docker_hub_images_fall_back_to_the_index_entry() {
        let ring = Keyring::from_secrets(&[secret(
            "old",
            DOCKERCFG,
            ".dockercfg",
            json!({"https://index.docker.io/v1/": {"username": "hub", "password": "p"}}),
        )])
        .unwrap();
        assert_eq!(users(&ring, "busybox"), ["hub"]);
        assert_eq!(users(&ring, "docker.io/foo/bar"), ["hub"]);
        assert_eq!(users(&ring, "quay.io/foo/bar"), Vec::<String>::new());
    }

    #[test]
    fn secrets_of_other_types_or_empty_data_are_passed_over_and_bad_json_is_an_error() {
        let opaque = secret(
            "o",
            "Opaque",
            ".dockerconfigjson",
            json!({"auths": {"x.io": {"username": "u"}}}),
        );
        let wrong_key = secret(
            "w",
            DOCKER_CONFIG_JSON,
            ".dockercfg",
            json!({"x.io": {"username": "u"}}),
        );
        let ring = Keyring::from_secrets(&[opaque, wrong_key]).unwrap();
        assert!(ring.lookup("x.io/a").is_empty());
        let mut bad = json_secret("bad", json!({}));
        bad.data.as_mut().unwrap().insert(
            ".dockerconfigjson".into(),
            ByteString(b"{not json".to_vec()),
        );
        let err = Keyring::from_secrets(&[bad]).unwrap_err();
        assert!(err.contains("secret ns/bad: .dockerconfigjson"), "{err}");
        let bad_auth = json_secret("ba", json!({"x.io": {"auth": "bm9jb2xvbg=="}})); // "nocolon"
        assert!(Keyring::from_secrets(&[bad_auth])
            .unwrap_err()
            .contains("auth"));
    }

    #[test]
    fn glob_matching_follows_go_filepath_match() {
        for (p, s, want) in [
            ("abc", "abc", true),
            ("a*", "abc", true),
            ("a*c", "ac", true),
            ("a?c", "abc", true),
            ("a?c", "ac", false),
            ("[a-c]x", "bx", true),
            ("[^a-c]x", "bx", false),
            ("[^a-c]x", "dx", true),
            ("a\\*", "a*", true),
            ("a\\*", "ab", false),
            ("[", "a", false),
            ("[a-", "a", false),
        ] {
            assert_eq!(glob_match(p.as_bytes(), s.as_bytes()), want, "{p} ~ {s}");
        }
    }

    #[test]
    fn a_hostile_glob_does_not_backtrack_exponentially() {
        // 30 stars against a 63-character label: without the memo this
        // explores about C(63, 30) splits and never returns.
        let p = format!("{}b", "*a".repeat(30));
        let s = "a".repeat(63);
        assert!(!glob_match(p.as_bytes(), s.as_bytes()));
        assert!(glob_match(p.as_bytes(), format!("{s}b").as_bytes()));
    }
}
