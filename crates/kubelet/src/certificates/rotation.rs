//! Certificate rotation, as client-go's certificate manager: the
//! kubelet's client certificate (`rotateCertificates`) and its serving
//! certificate (`serverTLSBootstrap`). The current pair is renewed at a
//! jittered 70–90 % of its validity (upstream's `nextRotationDeadline`),
//! or at once when there is none, it has expired (serving) or it no longer
//! names what the node is (`certSatisfiesTemplate`), with a new key and a
//! `csr-…` CertificateSigningRequest made with the node's own identity:
//! kube-controller-manager approves client renewals for `system:nodes`;
//! serving requests (`kubernetes.io/kubelet-serving`, the node's addresses
//! as SANs) wait for an approver (`kubectl certificate approve`). The new
//! pair goes into the store, whose `-current.pem` the API clients
//! ([`rkube_daemon::client_cert`]) and the kubelet API's TLS
//! ([`rkube_daemon::serving_cert`]) re-read: no restart.

use std::time::Duration;

use kube::Client;

use super::csr::{self, Subject};
use super::store::{self, FileStore};
/// Upstream's wait for a rotation's certificate (`certificateWaitTimeout`).
pub const WAIT: Duration = Duration::from_secs(15 * 60);
/// The longest wait between failed attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// When to rotate a certificate valid from `not_before` to `not_after`
/// (seconds): at `0.7 + 0.2 × jitter` of its validity, `jitter` in [0, 1).
pub fn deadline(not_before: i64, not_after: i64, jitter: f64) -> i64 {
    let total = not_after.saturating_sub(not_before).max(0) as f64;
    not_before.saturating_add((total * (0.7 + 0.2 * jitter.clamp(0.0, 1.0))) as i64)
}

fn jitter() -> f64 {
    use ring::rand::SecureRandom;
    let mut b = [0u8; 4];
    let _ = ring::rand::SystemRandom::new().fill(&mut b);
    f64::from(u32::from_le_bytes(b)) / (f64::from(u32::MAX) + 1.0)
}

fn rfc3339(secs: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_second(secs)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// Which of the kubelet's certificates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// The client certificate (`kubelet-client`); the kubelet exits when
    /// it expires unrenewed, as upstream's (a restart bootstraps again).
    Client,
    /// The serving certificate (`kubelet-server`) for these names; `None`:
    /// the node has no IP address yet, nothing to ask for.
    Serving(Option<Subject>),
}

/// Rotates one of Node `node`'s certificates kept in `store`.
pub struct Rotation {
    /// The kubelet's own client (its current identity).
    pub client: Client,
    /// `<cert-dir>`, prefix `kubelet-client` or `kubelet-server`.
    pub store: FileStore,
    /// The node.
    pub node: String,
    /// Which certificate.
    pub role: Role,
}

impl Rotation {
    fn template(&self) -> Option<Subject> {
        match &self.role {
            Role::Client => Some(Subject::node_client(&self.node)),
            Role::Serving(s) => s.clone(),
        }
    }

    fn signer(&self) -> &'static str {
        match self.role {
            Role::Client => csr::CLIENT_SIGNER,
            Role::Serving(_) => csr::SERVING_SIGNER,
        }
    }

    /// Keeps the certificate renewed. Returns only for the client role,
    /// once its certificate has expired without a renewal.
    pub async fn run(self) {
        let signer = self.signer();
        let Some(template) = self.template() else {
            // Upstream's getTemplate returns nil: no request is ever made.
            tracing::warn!(logger = signer, node = %self.node, "no IP address for the node: no serving certificate is requested");
            return std::future::pending().await;
        };
        let mut backoff = Duration::from_secs(2);
        loop {
            let pair = self.store.current().ok();
            let validity = pair.as_ref().and_then(|p| p.validity());
            let now = super::now_secs();
            let at = match (&self.role, validity) {
                (Role::Client, None) => {
                    tracing::error!(store = %self.store.current_path().display(), "no client certificate to rotate");
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    continue;
                }
                (Role::Client, Some((_, not_after))) if now >= not_after => {
                    tracing::error!(
                        expiration = %rfc3339(not_after),
                        "The currently active client certificate has expired, exiting"
                    );
                    return;
                }
                (_, Some((not_before, not_after)))
                    if pair.as_ref().is_some_and(|p| p.satisfies(&template)) =>
                {
                    let at = deadline(not_before, not_after, jitter());
                    tracing::info!(
                        logger = signer,
                        expiration = %rfc3339(not_after),
                        rotation_deadline = %rfc3339(at),
                        "Certificate expiration is"
                    );
                    at
                }
                (_, Some(_)) => {
                    tracing::info!(
                        logger = signer,
                        "Current certificate does not name the node as requested: rotating it now"
                    );
                    now
                }
                (Role::Serving(_), None) => now,
            };
            let wait = at.saturating_sub(now);
            if wait > 0 {
                tracing::info!(logger = signer, duration = ?Duration::from_secs(wait as u64), "Waiting for next certificate rotation");
                tokio::time::sleep(Duration::from_secs(wait as u64)).await;
            }
            tracing::info!(logger = signer, "Rotating certificates");
            match self.rotate(&template).await {
                Ok(path) => {
                    tracing::info!(logger = signer, path = %path.display(), "Rotated the certificate");
                    backoff = Duration::from_secs(2);
                }
                Err(e) => {
                    tracing::error!(logger = signer, error = %e, "Failed while requesting a signed certificate from the control plane");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }

    async fn rotate(&self, template: &Subject) -> Result<std::path::PathBuf, String> {
        let key = csr::generate_key()?;
        // An ECDSA key: no key encipherment (upstream's usages for it).
        let usages: &[&str] = match self.role {
            Role::Client => &["digital signature", "client auth"],
            Role::Serving(_) => &["digital signature", "server auth"],
        };
        let (request, _) = csr::make_request(&key, template, usages)?;
        let cert =
            csr::request_certificate(&self.client, &request, None, self.signer(), usages, WAIT)
                .await
                .map_err(|e| e.to_string())?;
        self.store.update(&cert, &key, &store::timestamp())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_at_70_to_90_percent_as_upstream() {
        // A year-long certificate (upstream's TestSetRotationDeadline).
        let (nb, na) = (0, 365 * 86_400);
        let near = |a: i64, b: f64| (a as f64 - b).abs() <= 1.0;
        assert!(near(deadline(nb, na, 0.0), 365.0 * 86_400.0 * 0.7));
        assert!(near(deadline(nb, na, 1.0), 365.0 * 86_400.0 * 0.9));
        for _ in 0..100 {
            let d = deadline(1000, 2000, jitter());
            assert!((1700..1900).contains(&d), "{d}");
        }
        // Nonsense validity: rotate at once, never panic.
        assert_eq!(deadline(2000, 1000, 0.5), 2000);
        let d = deadline(i64::MIN, i64::MAX, 0.5);
        assert!(d > i64::MIN, "{d}");
    }
}
