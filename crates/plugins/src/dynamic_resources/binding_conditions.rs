//! Binding conditions (`DRADeviceBindingConditions` with
//! `DRAResourceClaimDeviceStatus`, both beta and on in v1.37): a device
//! may list conditions its driver must report true in the claim's
//! `status.devices` before the pod may be bound (e.g. a fabric-attached
//! GPU being attached to the node), and failure conditions that abandon
//! the allocation.
//!
//! - Filter: an allocated claim whose devices failed, or that waited
//!   longer than `bindingTimeout` since its allocation, is unavailable on
//!   every node (PostFilter may then deallocate it).
//! - PreBind, after writing the claims: while some allocated device has
//!   binding conditions, the claims are re-read every 5 s until all
//!   conditions are true (bind), a failure condition is true, or
//!   `bindingTimeout` passes (an error: the pod is retried, and Filter
//!   finds the claim unavailable).

use std::time::Duration;

use rkube_model::dra::{DeviceResult, ResourceClaim};

/// How often PreBind re-reads the claims.
pub const POLL: Duration = Duration::from_secs(5);

/// Upstream's `DynamicResourcesBindingTimeoutDefault`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

fn condition_is_true(claim: &ResourceClaim, d: &DeviceResult, type_: &str) -> Option<bool> {
    let status = claim
        .device_statuses
        .iter()
        .find(|s| s.device == d.device && s.driver == d.driver && s.pool == d.pool)?;
    Some(
        status
            .conditions
            .iter()
            .any(|c| c.type_ == type_ && c.status == "True"),
    )
}

/// Upstream's `isClaimReadyForBinding`: `Ok(true)` when every binding
/// condition of every allocated device is true (or there are none), `Err`
/// with upstream's message when a failure condition is true.
pub fn ready(claim: &ResourceClaim) -> Result<bool, String> {
    let Some(a) = &claim.allocation else {
        return Ok(false);
    };
    for d in a
        .devices
        .iter()
        .filter(|d| !d.binding_conditions.is_empty())
    {
        let Some(status) = claim
            .device_statuses
            .iter()
            .find(|s| s.device == d.device && s.driver == d.driver && s.pool == d.pool)
        else {
            return Ok(false);
        };
        for f in &d.binding_failure_conditions {
            if let Some(c) = status
                .conditions
                .iter()
                .find(|c| &c.type_ == f && c.status == "True")
            {
                return Err(format!(
                    "device binding failed: claim={}, reason={}, message={:?}",
                    claim.name, c.reason, c.message
                ));
            }
        }
        for want in &d.binding_conditions {
            if condition_is_true(claim, d, want) != Some(true) {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// Upstream's `isClaimTimeout`: the claim's devices have binding
/// conditions and its allocation is older than `timeout` at `now` (Unix
/// seconds).
pub fn timed_out(claim: &ResourceClaim, timeout: Duration, now: i64) -> bool {
    let (Some(a), Some(at)) = (&claim.allocation, claim.allocation_timestamp) else {
        return false;
    };
    let deadline = at.saturating_add(i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX));
    a.devices.iter().any(|d| !d.binding_conditions.is_empty()) && deadline < now
}

/// Some allocated device of `claim` has binding conditions.
pub fn has_any(claim: &ResourceClaim) -> bool {
    claim
        .allocation
        .iter()
        .flat_map(|a| &a.devices)
        .any(|d| !d.binding_conditions.is_empty())
}

/// The wall clock in Unix seconds.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use rkube_model::dra::{AllocatedDeviceStatus, Allocation, DeviceCondition};

    use super::*;

    fn claim(conditions: &[(&str, &str)]) -> ResourceClaim {
        ResourceClaim {
            name: "c".into(),
            allocation: Some(Allocation {
                devices: vec![DeviceResult {
                    driver: "d".into(),
                    pool: "p".into(),
                    device: "gpu-0".into(),
                    binding_conditions: vec!["Attached".into()],
                    binding_failure_conditions: vec!["AttachFailed".into()],
                    ..Default::default()
                }],
                ..Default::default()
            }),
            allocation_timestamp: Some(1_000),
            device_statuses: vec![AllocatedDeviceStatus {
                driver: "d".into(),
                pool: "p".into(),
                device: "gpu-0".into(),
                conditions: conditions
                    .iter()
                    .map(|(t, s)| DeviceCondition {
                        type_: t.to_string(),
                        status: s.to_string(),
                        reason: "Why".into(),
                        message: "it broke".into(),
                    })
                    .collect(),
            }],
            ..Default::default()
        }
    }

    #[test]
    fn conditions_decide_readiness() {
        assert_eq!(ready(&claim(&[])), Ok(false));
        assert_eq!(ready(&claim(&[("Attached", "False")])), Ok(false));
        assert_eq!(ready(&claim(&[("Attached", "True")])), Ok(true));
        assert_eq!(
            ready(&claim(&[("Attached", "True"), ("AttachFailed", "True")])),
            Err("device binding failed: claim=c, reason=Why, message=\"it broke\"".into())
        );
        let mut none = claim(&[]);
        none.device_statuses.clear();
        assert_eq!(ready(&none), Ok(false));
        none.allocation.as_mut().unwrap().devices[0]
            .binding_conditions
            .clear();
        assert_eq!(ready(&none), Ok(true));
        assert!(!has_any(&none));
    }

    #[test]
    fn the_timeout_counts_from_the_allocation() {
        let c = claim(&[]);
        let t = Duration::from_secs(600);
        assert!(!timed_out(&c, t, 1_600));
        assert!(timed_out(&c, t, 1_601));
        let mut untimed = c.clone();
        untimed.allocation_timestamp = None;
        assert!(!timed_out(&untimed, t, i64::MAX));
    }
}
