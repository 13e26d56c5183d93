//! Client certificate rotation (`rotateCertificates`), as client-go's
//! certificate manager: the current certificate is renewed at a jittered
//! 70–90 % of its validity (upstream's `nextRotationDeadline`) with a new
//! key and a `csr-…` CertificateSigningRequest made with the node's own
//! identity (kube-controller-manager approves it for `system:nodes`); the
//! new pair goes into the store, whose `kubelet-client-current.pem` the
//! API clients re-read ([`rkube_daemon::client_cert`]): their connections
//! are closed and made again with the new certificate, no restart.

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

/// Rotates the client certificate of Node `node` kept in `store`.
pub struct ClientRotation {
    /// The kubelet's own client (its current identity).
    pub client: Client,
    /// `<cert-dir>`, prefix `kubelet-client`.
    pub store: FileStore,
    /// The node.
    pub node: String,
}

impl ClientRotation {
    /// Renews the certificate until it has expired without a renewal (then
    /// it returns and the kubelet exits, as upstream's).
    pub async fn run(self) {
        let mut backoff = Duration::from_secs(2);
        loop {
            let validity = self.store.current().ok().and_then(|p| p.validity());
            let Some((not_before, not_after)) = validity else {
                tracing::error!(store = %self.store.current_path().display(), "no client certificate to rotate");
                tokio::time::sleep(Duration::from_secs(60)).await;
                continue;
            };
            if super::now_secs() >= not_after {
                // Upstream exits too, so that a restart bootstraps again.
                tracing::error!(
                    expiration = %rfc3339(not_after),
                    "The currently active client certificate has expired, exiting"
                );
                return;
            }
            let at = deadline(not_before, not_after, jitter());
            tracing::info!(
                expiration = %rfc3339(not_after),
                rotation_deadline = %rfc3339(at),
                "Certificate expiration is"
            );
            let wait = at.saturating_sub(super::now_secs());
            if wait > 0 {
                tracing::info!(duration = ?Duration::from_secs(wait as u64), "Waiting for next certificate rotation");
                tokio::time::sleep(Duration::from_secs(wait as u64)).await;
            }
            tracing::info!("Rotating certificates");
            match self.rotate().await {
                Ok(path) => {
                    tracing::info!(path = %path.display(), "Rotated the client certificate");
                    backoff = Duration::from_secs(2);
                }
                Err(e) => {
                    tracing::error!(error = %e, "Failed while requesting a signed certificate from the control plane");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }

    async fn rotate(&self) -> Result<std::path::PathBuf, String> {
        let key = csr::generate_key()?;
        let usages = ["digital signature", "client auth"];
        let (request, _) = csr::make_request(&key, &Subject::node_client(&self.node), &usages)?;
        let cert = csr::request_certificate(
            &self.client,
            &request,
            None,
            csr::CLIENT_SIGNER,
            &usages,
            WAIT,
        )
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
        assert_eq!(
            deadline(i64::MIN, i64::MAX, 0.5),
            deadline(i64::MIN, i64::MAX, 0.5)
        );
    }
}
