//! Leader election on a `coordination.k8s.io/v1` Lease, with client-go's
//! rules: a replica takes the lease when it is free or when its holder has
//! not renewed it for `leaseDuration` *as observed locally* (clocks of
//! different machines are never compared); the leader renews every
//! `retryPeriod` and gives up leadership when it could not renew for
//! `renewDeadline`. Every write is an update with the read
//! `resourceVersion`, so two replicas can never both win the same round.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::Api;

/// Lease settings (kube-scheduler's defaults: 15 s, 10 s, 2 s).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderConfig {
    /// Lease namespace (`kube-system`).
    pub namespace: String,
    /// Lease name (`kube-scheduler`).
    pub name: String,
    /// This replica's identity (`<hostname>_<random>`).
    pub identity: String,
    /// How long a lease is valid after its last renewal.
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it gives up.
    pub renew_deadline: Duration,
    /// Time between attempts.
    pub retry_period: Duration,
}

/// What a round found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Round {
    /// We hold the lease (acquired or renewed).
    Held,
    /// Someone else holds a lease that has not expired.
    HeldBy(String),
}

/// The lease holder's record, as compared between rounds.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Record {
    holder: String,
    duration: i32,
    acquire: Option<Timestamp>,
    renew: Option<Timestamp>,
    transitions: i32,
}

impl Record {
    fn of(spec: &LeaseSpec) -> Self {
        Record {
            holder: spec.holder_identity.clone().unwrap_or_default(),
            duration: spec.lease_duration_seconds.unwrap_or(0),
            acquire: spec.acquire_time.as_ref().map(|t| t.0),
            renew: spec.renew_time.as_ref().map(|t| t.0),
            transitions: spec.lease_transitions.unwrap_or(0),
        }
    }
}

/// A leader elector for one lease.
pub struct Elector {
    api: Api<Lease>,
    cfg: LeaderConfig,
    observed: Option<(Record, Instant)>,
}

/// Pure decision of one round: may we write the lease now? `observed_at`
/// is when we last saw the record change.
fn may_take(
    record: &Record,
    observed_at: Instant,
    now: Instant,
    me: &str,
    lease: Duration,
) -> bool {
    // The holder's announced duration counts (a released lease says 1 s).
    let valid = match record.duration {
        d if d > 0 => Duration::from_secs(d as u64),
        _ => lease,
    };
    record.holder.is_empty() || record.holder == me || observed_at + valid <= now
}

impl Elector {
    /// An elector using `api` (namespaced to the lease's namespace).
    pub fn new(client: kube::Client, cfg: LeaderConfig) -> Self {
        Elector {
            api: Api::namespaced(client, &cfg.namespace),
            cfg,
            observed: None,
        }
    }

    /// The settings.
    pub fn config(&self) -> &LeaderConfig {
        &self.cfg
    }

    fn spec(&self, acquire: Option<Timestamp>, transitions: i32) -> LeaseSpec {
        let now = Timestamp::now();
        LeaseSpec {
            holder_identity: Some(self.cfg.identity.clone()),
            lease_duration_seconds: Some(self.cfg.lease_duration.as_secs().max(1) as i32),
            acquire_time: Some(MicroTime(acquire.unwrap_or(now))),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(transitions),
            ..Default::default()
        }
    }

    /// One acquire-or-renew round (client-go's `tryAcquireOrRenew`).
    pub async fn try_acquire_or_renew(&mut self) -> kube::Result<Round> {
        let now = Instant::now();
        let Some(mut lease) = self.api.get_opt(&self.cfg.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.cfg.name.clone()),
                    namespace: Some(self.cfg.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(self.spec(None, 0)),
            };
            let created = self.api.create(&PostParams::default(), &lease).await?;
            self.observe(created.spec.as_ref(), now);
            return Ok(Round::Held);
        };
        let record = lease.spec.as_ref().map(Record::of).unwrap_or_default();
        let observed_at = match &self.observed {
            Some((r, at)) if *r == record => *at,
            _ => {
                self.observed = Some((record.clone(), now));
                now
            }
        };
        if !may_take(
            &record,
            observed_at,
            now,
            &self.cfg.identity,
            self.cfg.lease_duration,
        ) {
            return Ok(Round::HeldBy(record.holder));
        }
        let spec = if record.holder == self.cfg.identity {
            self.spec(record.acquire, record.transitions)
        } else {
            self.spec(None, record.transitions + 1)
        };
        lease.spec = Some(spec);
        // resourceVersion from the GET: a concurrent writer makes this a 409.
        let updated = self
            .api
            .replace(&self.cfg.name, &PostParams::default(), &lease)
            .await?;
        self.observe(updated.spec.as_ref(), Instant::now());
        Ok(Round::Held)
    }

    fn observe(&mut self, spec: Option<&LeaseSpec>, at: Instant) {
        self.observed = Some((spec.map(Record::of).unwrap_or_default(), at));
    }

    /// Blocks until this replica holds the lease.
    pub async fn acquire(&mut self) {
        let mut last_holder = String::new();
        loop {
            match self.try_acquire_or_renew().await {
                Ok(Round::Held) => {
                    tracing::info!(lease = %format!("{}/{}", self.cfg.namespace, self.cfg.name), identity = %self.cfg.identity, "successfully acquired lease");
                    return;
                }
                Ok(Round::HeldBy(h)) => {
                    if h != last_holder {
                        tracing::info!(holder = %h, "lease is held by another replica; waiting");
                        last_holder = h;
                    }
                }
                Err(e) => tracing::warn!(error = %e, "error retrieving or updating the lease"),
            }
            tokio::time::sleep(jittered(self.cfg.retry_period)).await;
        }
    }

    /// Renews every `retryPeriod` until a renewal has not succeeded for
    /// `renewDeadline` (or another replica took the lease); then returns.
    pub async fn hold(&mut self) {
        let mut last_renew = Instant::now();
        loop {
            tokio::time::sleep(self.cfg.retry_period).await;
            // Each attempt must finish within what is left of the deadline.
            let left = self.cfg.renew_deadline.saturating_sub(last_renew.elapsed());
            let attempt = tokio::time::timeout(left, self.try_acquire_or_renew()).await;
            match attempt {
                Ok(Ok(Round::Held)) => last_renew = Instant::now(),
                Ok(Ok(Round::HeldBy(h))) => {
                    tracing::error!(holder = %h, "the lease was taken by another replica");
                    return;
                }
                Ok(Err(e)) => tracing::warn!(error = %e, "failed to renew the lease"),
                Err(_) => tracing::warn!("renewing the lease timed out"),
            }
            if last_renew.elapsed() >= self.cfg.renew_deadline {
                tracing::error!(
                    "failed to renew the lease within the renew deadline ({:?})",
                    self.cfg.renew_deadline
                );
                return;
            }
        }
    }

    /// Gives the lease up (client-go's `ReleaseOnCancel`): empty holder,
    /// 1 s duration, so a standby takes over at once.
    pub async fn release(&mut self) -> kube::Result<()> {
        let Some(mut lease) = self.api.get_opt(&self.cfg.name).await? else {
            return Ok(());
        };
        let record = lease.spec.as_ref().map(Record::of).unwrap_or_default();
        if record.holder != self.cfg.identity {
            return Ok(());
        }
        let now = Timestamp::now();
        lease.spec = Some(LeaseSpec {
            holder_identity: Some(String::new()),
            lease_duration_seconds: Some(1),
            acquire_time: Some(MicroTime(now)),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(record.transitions),
            ..Default::default()
        });
        self.api
            .replace(&self.cfg.name, &PostParams::default(), &lease)
            .await?;
        tracing::info!("released the lease");
        Ok(())
    }
}

/// `d` stretched by up to 20% (client-go's JitterFactor 1.2), so replicas
/// do not retry in lockstep.
fn jittered(d: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|t| t.subsec_nanos())
        .unwrap_or(0);
    d + d.mul_f64(0.2 * f64::from(nanos % 1000) / 1000.0)
}

/// `<hostname>_<random>`, as kube-scheduler names its replicas.
pub fn identity(hostname: &str) -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let x = (t as u64) ^ (u64::from(std::process::id()) << 40) ^ 0x9E37_79B9_7F4A_7C15;
    format!("{hostname}_{x:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(holder: &str, duration: i32) -> Record {
        Record {
            holder: holder.into(),
            duration,
            ..Default::default()
        }
    }

    #[test]
    fn takes_free_own_or_expired_leases_only() {
        let t0 = Instant::now();
        let lease = Duration::from_secs(15);
        assert!(may_take(&rec("", 15), t0, t0, "me", lease));
        assert!(may_take(&rec("me", 15), t0, t0, "me", lease));
        assert!(!may_take(&rec("other", 15), t0, t0, "me", lease));
        assert!(!may_take(
            &rec("other", 15),
            t0,
            t0 + Duration::from_secs(14),
            "me",
            lease
        ));
        assert!(may_take(
            &rec("other", 15),
            t0,
            t0 + Duration::from_secs(15),
            "me",
            lease
        ));
        // The holder's announced duration counts, longer or shorter.
        assert!(!may_take(
            &rec("other", 60),
            t0,
            t0 + Duration::from_secs(30),
            "me",
            lease
        ));
        assert!(may_take(
            &rec("other", 1),
            t0,
            t0 + Duration::from_secs(1),
            "me",
            lease
        ));
    }

    #[test]
    fn identities_are_distinct_and_named() {
        let a = identity("host");
        std::thread::sleep(Duration::from_millis(1));
        let b = identity("host");
        assert!(a.starts_with("host_"));
        assert_ne!(a, b);
        let j = jittered(Duration::from_secs(2));
        assert!(j >= Duration::from_secs(2) && j <= Duration::from_millis(2400));
    }
}
