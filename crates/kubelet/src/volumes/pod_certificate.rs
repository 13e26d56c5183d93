//! `podCertificate` projections (upstream's `pkg/kubelet/podcertificate`):
//! per projection (pod, volume, source) the kubelet makes a key of the
//! asked `keyType` ([`super::pod_key`]), asks the signer for a certificate
//! with a `PodCertificateRequest` (`req-` + a generated suffix, owned by the
//! pod, naming the pod, its ServiceAccount and the node with their UIDs,
//! `maxExpirationSeconds`, the user annotations and the stub request), and
//! waits for it to be `Issued` (or `Denied`/`Failed`, for good). The volume
//! is written once the chain is there; at `beginRefreshAt` (plus up to five
//! minutes of jitter) a new key and request are made while the old
//! credentials stay in place until the new ones are issued. A request the
//! API server no longer has after ten minutes is made again.
//!
//! The state moves when the pod's volumes are set up (every sync), not
//! from a watch: a pending request is read with a GET 1 s after it was
//! made, then at doubling intervals up to 30 s, until it is decided; nothing
//! is read once credentials are fresh.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::certificates::v1::{PodCertificateRequest, PodCertificateRequestSpec};
use k8s_openapi::api::core::v1::{Node, Pod, PodCertificateProjection, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use k8s_openapi::ByteString;
use kube::api::PostParams;
use kube::{Api, Client, ResourceExt};
use ring::rand::{SecureRandom, SystemRandom};

use super::{pem, pod_key};
use crate::pod::pod_namespace;

/// After this long a request the API server does not have is taken as
/// deleted and made again (upstream's `assumeDeletedThreshold`).
const ASSUME_DELETED: Duration = Duration::from_secs(10 * 60);

/// How often a pending request is read at most once it has waited a while
/// (from 1 s, doubling): without a watch, an unsigned request costs one GET
/// every 30 s, not one per pod sync.
const MAX_READ_INTERVAL: Duration = Duration::from_secs(30);

/// One projection: pod uid, volume, source index.
type Key = (String, String, usize);

/// Key PEM and certificate chain PEM.
pub type Credentials = (Vec<u8>, Vec<u8>);

#[derive(Clone)]
enum State {
    /// Request `pcr` made for `key`; taken as deleted after `abandon_at`;
    /// read again from `read_after`, then `interval` later (doubling up
    /// to [`MAX_READ_INTERVAL`]).
    Wait {
        key: Vec<u8>,
        pcr: String,
        abandon_at: Timestamp,
        read_after: Timestamp,
        interval: Duration,
    },
    /// Issued; renewed from `refresh_at`.
    Fresh {
        creds: Credentials,
        refresh_at: Timestamp,
    },
    /// Issued, and a renewal (`pcr` for `key`) is pending.
    WaitRefresh {
        creds: Credentials,
        refresh_at: Timestamp,
        key: Vec<u8>,
        pcr: String,
        abandon_at: Timestamp,
    },
    /// Denied or failed: for good.
    Final(String),
}

/// Names the state only: keys never reach a log.
impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            State::Wait { .. } => "Wait",
            State::Fresh { .. } => "Fresh",
            State::WaitRefresh { .. } => "WaitRefresh",
            State::Final(_) => "Final",
        })
    }
}

/// The node's `podCertificate` projections.
pub struct PodCertificates {
    client: Client,
    records: Mutex<HashMap<Key, State>>,
}

/// Up to five minutes, so projections made together do not renew together.
fn jitter() -> SignedDuration {
    let mut b = [0u8; 8];
    let _ = SystemRandom::new().fill(&mut b);
    SignedDuration::from_millis((u64::from_le_bytes(b) % 300_000) as i64)
}

fn later(d: Duration) -> Timestamp {
    Timestamp::now()
        .checked_add(SignedDuration::try_from(d).unwrap_or(SignedDuration::ZERO))
        .unwrap_or(Timestamp::MAX)
}

/// What a decided request says: issued credentials for `key` (with the
/// time to renew them), or why not. `None`: still pending.
fn decided(pcr: &PodCertificateRequest, key: &[u8]) -> Option<Result<State, String>> {
    let status = pcr.status.as_ref()?;
    let name = format!("{}/{}", pod_namespace_of(pcr), pcr.name_any());
    for c in status.conditions.iter().flatten() {
        match c.type_.as_str() {
            "Denied" => {
                return Some(Err(format!(
                    "PodCertificateRequest {name} was permanently denied: reason={:?} message={:?}",
                    c.reason, c.message
                )))
            }
            "Failed" => {
                return Some(Err(format!(
                    "PodCertificateRequest {name} was permanently failed: reason={:?} message={:?}",
                    c.reason, c.message
                )))
            }
            "Issued" => {
                let chain = clean_chain(status.certificate_chain.as_deref().unwrap_or_default());
                let refresh_at = status
                    .begin_refresh_at
                    .as_ref()
                    .map_or(Timestamp::MAX, |t| t.0.checked_add(jitter()).unwrap_or(t.0));
                return Some(Ok(State::Fresh {
                    creds: (key.to_vec(), chain),
                    refresh_at,
                }));
            }
            _ => {}
        }
    }
    None
}

fn pod_namespace_of(pcr: &PodCertificateRequest) -> String {
    pcr.namespace().unwrap_or_default()
}

/// The chain's PEM blocks only, each re-written as `CERTIFICATE` (what is
/// between and around the blocks is dropped, as upstream does).
fn clean_chain(chain: &str) -> Vec<u8> {
    pem::blocks(chain)
        .iter()
        .flat_map(|d| pem::encode("CERTIFICATE", d))
        .collect()
}

impl PodCertificates {
    /// Projections requested through `client`.
    pub fn new(client: Client) -> PodCertificates {
        PodCertificates {
            client,
            records: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, State>> {
        self.records.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The credentials of every `podCertificate` source of `pod`, keyed by
    /// (volume, source index), each moved one step on.
    pub async fn credentials(
        &self,
        pod: &Pod,
    ) -> HashMap<(String, usize), Result<Credentials, String>> {
        let mut out = HashMap::new();
        let uid = pod.uid().unwrap_or_default();
        let volumes = pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_deref())
            .unwrap_or_default();
        for v in volumes {
            let sources = v.projected.iter().flat_map(|p| p.sources.iter().flatten());
            for (i, src) in sources.enumerate() {
                let Some(p) = &src.pod_certificate else {
                    continue;
                };
                let key = (uid.clone(), v.name.clone(), i);
                let creds = self.step(pod, &key, p).await;
                out.insert((v.name.clone(), i), creds);
            }
        }
        out
    }

    /// Moves projection `key` on and returns what it serves now.
    async fn step(
        &self,
        pod: &Pod,
        key: &Key,
        p: &PodCertificateProjection,
    ) -> Result<Credentials, String> {
        let state = self.lock().get(key).cloned();
        let next = match state {
            None => {
                let (k, pcr) = self.request(pod, p).await?;
                let interval = Duration::from_secs(1);
                State::Wait {
                    key: k,
                    pcr,
                    abandon_at: later(ASSUME_DELETED),
                    read_after: later(interval),
                    interval,
                }
            }
            Some(State::Wait { read_after, .. }) if Timestamp::now() < read_after => {
                return Err("credential bundle is not issued yet".to_string());
            }
            Some(State::Wait {
                key: k,
                pcr,
                abandon_at,
                interval,
                ..
            }) => {
                let interval = (interval * 2).min(MAX_READ_INTERVAL);
                let pending = |key, pcr| State::Wait {
                    key,
                    pcr,
                    abandon_at,
                    read_after: later(interval),
                    interval,
                };
                match self.read(pod, &pcr).await? {
                    Some(r) => match decided(&r, &k) {
                        Some(Ok(s)) => s,
                        Some(Err(e)) => State::Final(e),
                        None => pending(k, pcr),
                    },
                    None if Timestamp::now() > abandon_at => {
                        self.lock().remove(key);
                        return Err(format!(
                            "PodCertificateRequest {pcr:?} appears to have been deleted"
                        ));
                    }
                    None => pending(k, pcr),
                }
            }
            Some(State::Fresh { creds, refresh_at }) if Timestamp::now() >= refresh_at => {
                match self.request(pod, p).await {
                    Ok((k, pcr)) => State::WaitRefresh {
                        creds,
                        refresh_at,
                        key: k,
                        pcr,
                        abandon_at: later(ASSUME_DELETED),
                    },
                    Err(e) => {
                        tracing::warn!(pod = %pod.name_any(), error = %e, "renewing a pod certificate");
                        State::Fresh { creds, refresh_at }
                    }
                }
            }
            Some(State::WaitRefresh {
                creds,
                refresh_at,
                key: k,
                pcr,
                abandon_at,
            }) => match self.read(pod, &pcr).await {
                Ok(Some(r)) => match decided(&r, &k) {
                    Some(Ok(s)) => s,
                    Some(Err(e)) => State::Final(e),
                    None => State::WaitRefresh {
                        creds,
                        refresh_at,
                        key: k,
                        pcr,
                        abandon_at,
                    },
                },
                Ok(None) if Timestamp::now() > abandon_at => State::Fresh { creds, refresh_at },
                _ => State::WaitRefresh {
                    creds,
                    refresh_at,
                    key: k,
                    pcr,
                    abandon_at,
                },
            },
            Some(s) => s,
        };
        let served = match &next {
            State::Wait { .. } => Err("credential bundle is not issued yet".to_string()),
            State::Fresh { creds, .. } | State::WaitRefresh { creds, .. } => Ok(creds.clone()),
            State::Final(e) => Err(e.clone()),
        };
        self.lock().insert(key.clone(), next);
        served
    }

    /// Reads request `name` of the pod's namespace (`None`: not found).
    async fn read(&self, pod: &Pod, name: &str) -> Result<Option<PodCertificateRequest>, String> {
        let api =
            Api::<PodCertificateRequest>::namespaced(self.client.clone(), &pod_namespace(pod));
        api.get_opt(name)
            .await
            .map_err(|e| format!("while getting PodCertificateRequest {name:?}: {e}"))
    }

    /// A new key and a request for it: (key PEM, request name).
    async fn request(
        &self,
        pod: &Pod,
        p: &PodCertificateProjection,
    ) -> Result<(Vec<u8>, String), String> {
        let ns = pod_namespace(pod);
        let spec = pod.spec.clone().unwrap_or_default();
        let sa_name = spec
            .service_account_name
            .clone()
            .unwrap_or_else(|| "default".into());
        let node_name = spec.node_name.clone().unwrap_or_default();
        let sa = Api::<ServiceAccount>::namespaced(self.client.clone(), &ns)
            .get(&sa_name)
            .await
            .map_err(|e| format!("while fetching service account: {e}"))?;
        let node = Api::<Node>::all(self.client.clone())
            .get(&node_name)
            .await
            .map_err(|e| format!("while getting node object: {e}"))?;
        let k =
            pod_key::generate(&p.key_type).map_err(|e| format!("while generating keypair: {e}"))?;
        let mut req = PodCertificateRequest {
            spec: PodCertificateRequestSpec {
                signer_name: p.signer_name.clone(),
                pod_name: pod.name_any(),
                pod_uid: pod.uid().unwrap_or_default(),
                service_account_name: sa_name,
                service_account_uid: sa.uid().unwrap_or_default(),
                node_name,
                node_uid: node.uid().unwrap_or_default(),
                max_expiration_seconds: p.max_expiration_seconds,
                stub_pkc_s10_request: ByteString(k.csr),
                unverified_user_annotations: p.user_annotations.clone(),
            },
            ..Default::default()
        };
        req.metadata.generate_name = Some("req-".into());
        req.metadata.namespace = Some(ns.clone());
        req.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: pod.name_any(),
            uid: pod.uid().unwrap_or_default(),
            ..Default::default()
        }]);
        let made = Api::<PodCertificateRequest>::namespaced(self.client.clone(), &ns)
            .create(&PostParams::default(), &req)
            .await
            .map_err(|e| format!("while creating PodCertificateRequest: {e}"))?;
        tracing::info!(pod = %pod.name_any(), request = %made.name_any(), signer = %p.signer_name, "PodCertificateRequest created");
        Ok((k.pem, made.name_any()))
    }

    /// Forgets the projections of pod `uid` (its keys with them).
    pub fn forget(&self, uid: &str) {
        self.lock().retain(|k, _| k.0 != uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::certificates::v1::PodCertificateRequestStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    fn pcr(
        cond: Option<(&str, &str)>,
        chain: &str,
        refresh: Option<Timestamp>,
    ) -> PodCertificateRequest {
        let mut r = PodCertificateRequest::default();
        r.metadata.name = Some("req-x".into());
        r.metadata.namespace = Some("ns".into());
        r.status = Some(PodCertificateRequestStatus {
            conditions: cond.map(|(t, reason)| {
                vec![Condition {
                    type_: t.into(),
                    reason: reason.into(),
                    message: "m".into(),
                    status: "True".into(),
                    last_transition_time: Time(Timestamp::UNIX_EPOCH),
                    observed_generation: None,
                }]
            }),
            certificate_chain: Some(chain.into()),
            begin_refresh_at: refresh.map(Time),
            ..Default::default()
        });
        r
    }

    #[test]
    fn requests_are_decided_as_upstream_reads_them() {
        assert!(decided(&pcr(None, "", None), b"k").is_none());
        let e = decided(&pcr(Some(("Denied", "NoWay")), "", None), b"k")
            .unwrap()
            .unwrap_err();
        assert_eq!(
            e,
            "PodCertificateRequest ns/req-x was permanently denied: reason=\"NoWay\" message=\"m\""
        );
        let chain = "junk\n-----BEGIN CERTIFICATE-----\nAQID\n-----END CERTIFICATE-----\ntrailer\n";
        let at = Timestamp::from_second(2_000_000_000).unwrap();
        match decided(&pcr(Some(("Issued", "Ok")), chain, Some(at)), b"KEY")
            .unwrap()
            .unwrap()
        {
            State::Fresh { creds, refresh_at } => {
                assert_eq!(creds.0, b"KEY");
                assert_eq!(
                    String::from_utf8(creds.1).unwrap(),
                    "-----BEGIN CERTIFICATE-----\nAQID\n-----END CERTIFICATE-----\n"
                );
                assert!(
                    refresh_at >= at
                        && refresh_at <= at.checked_add(SignedDuration::from_secs(300)).unwrap()
                );
            }
            _ => panic!("issued"),
        }
    }
}
