//! Pulling images as upstream's image manager (`pkg/kubelet/images`):
//! `imagePullPolicy` (`Never` and `IfNotPresent` use an image the runtime
//! has, `Always` pulls, and a failed pull is `ErrImagePull` even when the
//! image is present), the pod's pull Secrets tried in turn
//! ([`super::credentials`]; unreadable Secrets give a
//! `FailedToRetrieveImagePullSecret` Event), the pull records that decide
//! whether a pod may use an image another pod pulled
//! ([`super::pull_records`]), and the pull back-off (`ImagePullBackOff`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::jiff::Timestamp;
use rkube_cri::{v1, CriClient};
use rkube_daemon::ratelimit::RateLimiter;

use super::credentials::{Credential, Keyring};
use super::pull_records::{PullRecords, SecretId, Verdict};
use crate::backoff::Backoff;
use crate::events::Recorder;
use crate::volumes::manager::VolumeManager;

/// `imagePullPolicy`, defaulted as the API server does (`Always` for
/// `:latest` or an untagged image, else `IfNotPresent`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullPolicy {
    /// Pull every time a container is created (falls back to a present image).
    Always,
    /// Pull only if the runtime lacks the image.
    IfNotPresent,
    /// Never pull.
    Never,
}

/// The pull policy of a container.
pub fn pull_policy(c: &Container) -> PullPolicy {
    match c.image_pull_policy.as_deref() {
        Some("Always") => PullPolicy::Always,
        Some("Never") => PullPolicy::Never,
        Some("IfNotPresent") => PullPolicy::IfNotPresent,
        _ => {
            let image = c.image.as_deref().unwrap_or("");
            let last = image.rsplit('/').next().unwrap_or("");
            let name = last.split('@').next().unwrap_or("");
            match name.split_once(':') {
                _ if image.contains('@') => PullPolicy::IfNotPresent,
                Some((_, "latest")) | None => PullPolicy::Always,
                Some(_) => PullPolicy::IfNotPresent,
            }
        }
    }
}

/// Why a container's image cannot be used (upstream's image errors; the
/// reason is the container's waiting reason, the message its message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    /// The image is absent and the policy is `Never`.
    #[error("{0}")]
    NeverPull(String),
    /// A pull failed lately; the next waits out the back-off.
    #[error("{0}")]
    BackOff(String),
    /// The pull failed (or the pod's credentials could not be read).
    #[error("{0}")]
    Pull(String),
}

impl ImageError {
    /// The waiting reason upstream reports.
    pub fn reason(&self) -> &'static str {
        match self {
            ImageError::NeverPull(_) => "ErrImageNeverPull",
            ImageError::BackOff(_) => "ImagePullBackOff",
            ImageError::Pull(_) => "ErrImagePull",
        }
    }
}

/// Upstream's error for a pull over `registryPullQPS`.
pub const PULL_QPS_EXCEEDED: &str = "pull QPS exceeded";

/// The image manager of one node.
pub struct ImageManager {
    cri: CriClient,
    pulls: PullRecords,
    backoff: Mutex<Backoff>,
    /// The error of the last failed pull per back-off key, for the
    /// `ImagePullBackOff` message (as upstream's `prevPullErrMsg`).
    prev_errors: Mutex<HashMap<String, String>>,
    events: Option<Recorder>,
    volumes: Option<Arc<VolumeManager>>,
    /// `registryPullQPS`/`registryBurst` (none: no limit).
    limiter: Option<Arc<RateLimiter>>,
}

impl ImageManager {
    /// A manager pulling through `cri`, keeping `pulls`, recording Events
    /// through `events` and reading pull Secrets through `volumes`; a pull
    /// beyond `limiter`'s rate fails, as upstream's throttled image service
    /// fails it.
    pub fn new(
        cri: CriClient,
        pulls: PullRecords,
        events: Option<Recorder>,
        volumes: Option<Arc<VolumeManager>>,
        limiter: Option<Arc<RateLimiter>>,
    ) -> ImageManager {
        ImageManager {
            cri,
            pulls,
            backoff: Mutex::new(Backoff::default()),
            prev_errors: Mutex::new(HashMap::new()),
            events,
            volumes,
            limiter,
        }
    }

    fn event(&self, pod: &Pod, c: Option<&str>, warning: bool, reason: &str, msg: String) {
        if let Some(r) = &self.events {
            r.record(pod, c, warning, reason, msg);
        }
    }

    fn backoff(&self) -> std::sync::MutexGuard<'_, Backoff> {
        self.backoff.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn prev_errors(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.prev_errors.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes sure the image of `c` may be used by `pod` (pulling it as
    /// its policy says); `key` names the container's back-off.
    /// The image ref, or why the image cannot be used.
    pub async fn ensure_image(
        &self,
        pod: &Pod,
        key: &str,
        c: &Container,
        sandbox: &v1::PodSandboxConfig,
    ) -> Result<String, ImageError> {
        let image = c.image.clone().unwrap_or_default();
        let present = self.cri.image_status(&image).await.ok().flatten();
        let policy = pull_policy(c);
        let name = Some(c.name.as_str());
        // The pod's logins for the image, looked up at most once.
        let mut creds: Option<Vec<Credential>> = None;
        if let (PullPolicy::Never | PullPolicy::IfNotPresent, Some(img)) = (policy, &present) {
            // An image the kubelet pulled with a Secret is the pod's only
            // with that Secret (or the same login); else it pulls.
            let mut verdict = self.pulls.must_pull(&image, &img.id, None);
            if verdict == Verdict::AskSecrets {
                let mine = self
                    .pull_credentials(pod, &image)
                    .await
                    .map_err(ImageError::Pull)?;
                let ids: Vec<SecretId> = mine.iter().map(|c| c.secret.clone()).collect();
                verdict = self.pulls.must_pull(&image, &img.id, Some(&ids));
                creds = Some(mine);
            }
            if verdict == Verdict::Use {
                self.event(
                    pod,
                    name,
                    false,
                    "Pulled",
                    format!(
                        "Container image \"{image}\" already present on machine and can be accessed by the pod"
                    ),
                );
                return Ok(img.id.clone());
            }
        }
        if policy == PullPolicy::Never {
            let msg =
                format!("Container image \"{image}\" is not present with pull policy of Never");
            self.event(pod, name, true, "ErrImageNeverPull", msg.clone());
            return Err(ImageError::NeverPull(msg));
        }
        let pull_key = format!("{key}/pull");
        let now = Timestamp::now().as_nanosecond();
        if self.backoff().in_backoff_since_update(&pull_key, now) {
            let msg = format!("Back-off pulling image \"{image}\"");
            self.event(pod, name, false, "BackOff", msg.clone());
            return Err(ImageError::BackOff(
                match self.prev_errors().get(&pull_key) {
                    Some(prev) => format!("{msg}: ErrImagePull: {prev}"),
                    None => msg,
                },
            ));
        }
        self.prev_errors().remove(&pull_key);
        self.event(
            pod,
            name,
            false,
            "Pulling",
            format!("Pulling image \"{image}\""),
        );
        let t = std::time::Instant::now();
        let creds = match creds {
            Some(c) => Ok(c),
            None => self.pull_credentials(pod, &image).await,
        };
        self.pulls.pull_started(&image);
        let timeline = self.events.as_ref().and_then(Recorder::timeline);
        if let Some(t) = timeline {
            t.pull_started(pod);
        }
        let t_pull = std::time::Instant::now();
        let pulled = match creds {
            Ok(creds) => self.pull(&image, &creds, sandbox).await,
            Err(e) => Err(e),
        };
        if let Some(t) = timeline {
            t.pull_finished(pod);
        }
        // As upstream: the image's size (0 when unknown) is read as part
        // of the pull.
        let size = match &pulled {
            Ok((r, _)) => self
                .cri
                .image_status(r)
                .await
                .ok()
                .flatten()
                .map_or(0, |i| i.size),
            Err(_) => 0,
        };
        let pull_time = t_pull.elapsed();
        match &pulled {
            Ok((r, secret)) => self.pulls.pull_ended(&image, Some(r), secret.clone()),
            Err(_) => self.pulls.pull_ended(&image, None, None),
        }
        match pulled {
            Ok((r, _)) => {
                self.event(
                    pod,
                    name,
                    false,
                    "Pulled",
                    format!(
                        "Successfully pulled image \"{image}\" in {} ({} including waiting). Image size: {size} bytes.",
                        go_duration(pull_time),
                        go_duration(t.elapsed())
                    ),
                );
                Ok(r)
            }
            Err(e) => {
                self.backoff().next(&pull_key, now);
                {
                    // Kept only while its back-off lasts (bounded by the
                    // keys with a live window).
                    let backoff = self.backoff();
                    let mut prev = self.prev_errors();
                    prev.retain(|k, _| backoff.in_backoff_since_update(k, now));
                    prev.insert(pull_key.clone(), e.clone());
                }
                self.event(
                    pod,
                    name,
                    true,
                    "Failed",
                    format!("Failed to pull image \"{image}\": {e}"),
                );
                self.event(pod, name, true, "Failed", "Error: ErrImagePull".into());
                Err(ImageError::Pull(e))
            }
        }
    }

    /// The logins of the pod's pull Secrets for `image`, in the order to
    /// try them; Secrets that cannot be read are reported in an event.
    async fn pull_credentials(&self, pod: &Pod, image: &str) -> Result<Vec<Credential>, String> {
        let Some(vm) = self.volumes.as_ref() else {
            return Ok(Vec::new());
        };
        let (secrets, missing) = vm.pull_secrets(pod).await;
        if !missing.is_empty() {
            self.event(
                pod,
                None,
                true,
                "FailedToRetrieveImagePullSecret",
                format!(
                    "Unable to retrieve some image pull secrets ({}); attempting to pull the image may not succeed.",
                    missing.join(", ")
                ),
            );
        }
        Ok(Keyring::from_secrets(&secrets)?.lookup(image))
    }

    /// `PullImage` anonymously, or with each login in turn until one
    /// works (the image ref and the Secret that worked); the errors of all
    /// attempts otherwise.
    async fn pull(
        &self,
        image: &str,
        creds: &[Credential],
        sandbox: &v1::PodSandboxConfig,
    ) -> Result<(String, Option<SecretId>), String> {
        if let Some(l) = &self.limiter {
            if !l.try_acquire() {
                return Err(PULL_QPS_EXCEEDED.into());
            }
        }
        if creds.is_empty() {
            return self
                .cri
                .pull_image(image, None, Some(sandbox.clone()))
                .await
                .map(|r| (r, None))
                .map_err(|e| e.to_string());
        }
        let mut errors = Vec::new();
        for c in creds {
            let auth = v1::AuthConfig {
                username: c.username.clone(),
                password: c.password.clone(),
                ..Default::default()
            };
            match self
                .cri
                .pull_image(image, Some(auth), Some(sandbox.clone()))
                .await
            {
                Ok(r) => return Ok((r, Some(c.secret.clone()))),
                Err(e) => errors.push(e.to_string()),
            }
        }
        Err(if errors.len() == 1 {
            errors.remove(0)
        } else {
            format!("[{}]", errors.join(", "))
        })
    }
}

/// `d` truncated to milliseconds, written as Go's `time.Duration` does
/// (`132ms`, `1.5s`, `2m0.25s`, `1h0m0s`), as upstream rounds pull times.
fn go_duration(d: std::time::Duration) -> String {
    rkube_util::duration::format(std::time::Duration::from_millis(d.as_millis() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_go_writes_them() {
        use std::time::Duration;
        for (ms, want) in [
            (0, "0s"),
            (132, "132ms"),
            (1000, "1s"),
            (1500, "1.5s"),
            (60_250, "1m0.25s"),
            (3_600_000, "1h0m0s"),
            (3_723_004, "1h2m3.004s"),
        ] {
            assert_eq!(go_duration(Duration::from_millis(ms)), want, "{ms}");
        }
        assert_eq!(go_duration(Duration::from_micros(132_999)), "132ms");
    }

    fn container(image: &str, policy: Option<&str>) -> Container {
        Container {
            name: "c".into(),
            image: Some(image.into()),
            image_pull_policy: policy.map(str::to_string),
            ..Default::default()
        }
    }

    #[test]
    fn pull_policy_defaults_like_the_api_server() {
        for (image, want) in [
            ("busybox", PullPolicy::Always),
            ("busybox:latest", PullPolicy::Always),
            ("busybox:1", PullPolicy::IfNotPresent),
            ("localhost:5000/busybox", PullPolicy::Always),
            ("localhost:5000/busybox:1", PullPolicy::IfNotPresent),
            ("busybox@sha256:abcd", PullPolicy::IfNotPresent),
        ] {
            assert_eq!(pull_policy(&container(image, None)), want, "{image}");
        }
        assert_eq!(
            pull_policy(&container("busybox", Some("Never"))),
            PullPolicy::Never
        );
    }
}
