//! The node Lease `kube-node-lease/<node>` (coordination.k8s.io/v1), as
//! upstream's node lease controller keeps it: holderIdentity = node name,
//! leaseDurationSeconds from the configuration, renewTime = now, an
//! ownerReference to the Node; renewed every quarter of the lease duration.
//!
//! A renewal is one request: a PUT of the Lease last seen (as upstream);
//! the first one after start creates the Lease (or reads the existing one).

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::{Api, Client};

/// Namespace of node leases.
pub const NAMESPACE: &str = "kube-node-lease";

/// Renew interval: a quarter of the lease duration (upstream's
/// `NodeLeaseRenewIntervalFraction` 0.25).
pub fn renew_interval(lease_duration_seconds: i32) -> Duration {
    Duration::from_millis(lease_duration_seconds.max(1) as u64 * 250)
}

fn owner(node: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: node.into(),
        uid: uid.into(),
        ..Default::default()
    }
}

/// The Lease object for `node`.
pub fn lease(node: &str, uid: &str, duration_seconds: i32, now: Timestamp) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(node.into()),
            namespace: Some(NAMESPACE.into()),
            owner_references: (!uid.is_empty()).then(|| vec![owner(node, uid)]),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(node.into()),
            lease_duration_seconds: Some(duration_seconds),
            renew_time: Some(MicroTime(now)),
            ..Default::default()
        }),
    }
}

/// Renews the lease as upstream's controller does: an update (PUT) of the
/// last Lease seen, with renewTime = now (one request, no patch to apply on
/// the server); without one, or on a conflict, the Lease is read (or
/// created) first. Returns the Lease as stored, for the next renewal.
pub async fn renew(
    client: &Client,
    node: &str,
    uid: &str,
    duration_seconds: i32,
    cached: Option<Lease>,
) -> Result<Lease, kube::Error> {
    let api: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    let mut current = match cached {
        Some(l) => l,
        None => {
            let fresh = lease(node, uid, duration_seconds, Timestamp::now());
            match api.create(&PostParams::default(), &fresh).await {
                Ok(l) => return Ok(l),
                Err(kube::Error::Api(s)) if s.code == 409 => api.get(node).await?,
                Err(e) => return Err(e),
            }
        }
    };
    for attempt in 0..2 {
        refresh(&mut current, node, uid, duration_seconds, Timestamp::now());
        match api.replace(node, &PostParams::default(), &current).await {
            Ok(l) => return Ok(l),
            Err(kube::Error::Api(s)) if s.code == 409 && attempt == 0 => {
                current = api.get(node).await?;
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {
                let fresh = lease(node, uid, duration_seconds, Timestamp::now());
                return api.create(&PostParams::default(), &fresh).await;
            }
            Err(e) => return Err(e),
        }
    }
    unreachable!("the loop returns on its second attempt")
}

/// Sets holder, duration, renewTime (and the ownerReference if missing).
pub fn refresh(l: &mut Lease, node: &str, uid: &str, duration_seconds: i32, now: Timestamp) {
    let spec = l.spec.get_or_insert_with(Default::default);
    spec.holder_identity = Some(node.into());
    spec.lease_duration_seconds = Some(duration_seconds);
    spec.renew_time = Some(MicroTime(now));
    let owners = l.metadata.owner_references.get_or_insert_with(Vec::new);
    if !uid.is_empty() && !owners.iter().any(|o| o.uid == uid) {
        owners.push(owner(node, uid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_shape() {
        let now = Timestamp::from_second(1_700_000_000).unwrap();
        let l = lease("n1", "u1", 40, now);
        assert_eq!(l.metadata.namespace.as_deref(), Some("kube-node-lease"));
        let o = &l.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (o.kind.as_str(), o.name.as_str(), o.uid.as_str()),
            ("Node", "n1", "u1")
        );
        let s = l.spec.unwrap();
        assert_eq!(s.holder_identity.as_deref(), Some("n1"));
        assert_eq!(s.lease_duration_seconds, Some(40));
        let json = serde_json::to_value(lease("n1", "", 40, now)).unwrap();
        assert_eq!(json["spec"]["renewTime"], "2023-11-14T22:13:20.000000Z");
        assert!(json["metadata"].get("ownerReferences").is_none());
        // Refreshing an adopted lease: new renewTime, holder, owner added once.
        let mut old = lease("someone-else", "", 15, now);
        let later = Timestamp::from_second(1_700_000_010).unwrap();
        refresh(&mut old, "n1", "u1", 40, later);
        refresh(&mut old, "n1", "u1", 40, later);
        let s = old.spec.as_ref().unwrap();
        assert_eq!(s.holder_identity.as_deref(), Some("n1"));
        assert_eq!(s.lease_duration_seconds, Some(40));
        assert_eq!(s.renew_time.as_ref().unwrap().0, later);
        assert_eq!(old.metadata.owner_references.as_ref().unwrap().len(), 1);
        assert_eq!(renew_interval(40), Duration::from_secs(10));
    }
}
