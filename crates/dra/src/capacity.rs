//! Consumable capacity (DRAConsumableCapacity, beta and on in v1.37): how
//! much of each capacity a request takes from a device, rounded up to the
//! device's request policy, and whether it still fits beside what others
//! hold (upstream's `CmpRequestOverCapacity`).

use std::collections::BTreeMap;

use rkube_model::dra::Capacity;
use rkube_model::Quantity;

fn from_milli(m: i128) -> Quantity {
    Quantity::from_milli(m.clamp(i64::MIN as i128, i64::MAX as i128) as i64)
}

/// Milli arithmetic applies when every bound of the range is a whole
/// number of thousandths (FractionalCapacityRange, on in v1.37) and the
/// step is at least one thousandth.
fn use_milli(min: &Quantity, max: Option<&Quantity>, step: &Quantity) -> bool {
    [Some(min), max, Some(step)]
        .into_iter()
        .flatten()
        .all(|q| q.cmp_value(&from_milli(q.milli_value() as i128)).is_eq())
        && step.milli_value() >= 1
}

/// What a request of `requested` (None: not named by the request) takes
/// from a capacity: the default or the whole value when not requested,
/// else rounded up to the policy's range step or next valid value.
pub fn consumed(requested: Option<&Quantity>, cap: &Capacity) -> Result<Quantity, String> {
    let Some(req) = requested else {
        return Ok(cap.default.unwrap_or(cap.value));
    };
    if let Some((min, max, step)) = &cap.valid_range {
        if req < min {
            return Ok(*min);
        }
        let Some(step) = step else {
            return Ok(*req);
        };
        if use_milli(min, max.as_ref(), step) {
            let (r, s, m) = (
                req.milli_value() as i128,
                step.milli_value() as i128,
                min.milli_value() as i128,
            );
            let added = r - m;
            let mut n = added / s;
            if added % s != 0 {
                n += 1;
            }
            let v = m + s * n;
            if v > i64::MAX as i128 {
                return Err(format!(
                    "capacity request cannot be represented in the device's range arithmetic: rounding request {req} up to the next step passes the milli-value range"
                ));
            }
            return Ok(from_milli(v));
        }
        let (r, s, m) = (
            req.value() as i128,
            step.value().max(1) as i128,
            min.value() as i128,
        );
        let added = r - m;
        let mut n = added / s;
        if added % s != 0 {
            n += 1;
        }
        let v = m + s * n;
        if v > i64::MAX as i128 {
            return Err(format!(
                "capacity request cannot be represented in the device's range arithmetic: rounding request {req} up to the next step passes MaxInt64"
            ));
        }
        return Ok(Quantity::from_units(v as i64));
    }
    if !cap.valid_values.is_empty() {
        for v in &cap.valid_values {
            if req <= v {
                return Ok(*v);
            }
        }
    }
    Ok(*req)
}

fn violates_policy(val: &Quantity, cap: &Capacity) -> bool {
    if cap.default.is_some_and(|d| d == *val) {
        return false;
    }
    if let Some((min, max, step)) = &cap.valid_range {
        if max.is_some_and(|m| *val > m) {
            return true;
        }
        if let Some(step) = step {
            let (r, s, m) = if use_milli(min, max.as_ref(), step) {
                if val
                    .cmp_value(&from_milli(val.milli_value() as i128))
                    .is_ne()
                {
                    return true;
                }
                (
                    val.milli_value() as i128,
                    step.milli_value() as i128,
                    min.milli_value() as i128,
                )
            } else {
                (
                    val.value() as i128,
                    step.value() as i128,
                    min.value() as i128,
                )
            };
            if s != 0 && (r - m) % s != 0 {
                return true;
            }
        }
        return false;
    }
    if !cap.valid_values.is_empty() {
        return !cap.valid_values.contains(val);
    }
    false
}

/// What a request asks of capacity `cap`: the value it names `cap` by,
/// the slice's own name (upstream compares the names as written:
/// `memory` is not `gpu.example.com/memory`).
fn asked<'a>(requests: &'a BTreeMap<String, Quantity>, cap: &Capacity) -> Option<&'a Quantity> {
    requests.get(&cap.name)
}

/// Whether a request for `requests` fits a device with `capacity`,
/// beside `held` (allocated before) and `allocating` (this attempt).
pub fn fits(
    requests: &BTreeMap<String, Quantity>,
    capacity: &BTreeMap<String, Capacity>,
    held: Option<&BTreeMap<String, Quantity>>,
    allocating: Option<&BTreeMap<String, Quantity>>,
) -> Result<bool, String> {
    if requests
        .keys()
        .any(|k| !capacity.values().any(|c| &c.name == k))
    {
        return Ok(false);
    }
    for (name, cap) in capacity {
        let c =
            consumed(asked(requests, cap), cap).map_err(|e| format!("capacity {name:?}: {e}"))?;
        if c.is_negative() {
            return Err(format!("capacity {name:?}: capacity value is negative"));
        }
        if violates_policy(&c, cap) {
            return Ok(false);
        }
        let mut total = c;
        if let Some(h) = held.and_then(|h| h.get(name)) {
            total = total.checked_add(h);
        }
        if let Some(a) = allocating.and_then(|a| a.get(name)) {
            total = total.checked_add(a);
        }
        if total > cap.value {
            return Ok(false);
        }
    }
    Ok(true)
}

/// What a request takes from each capacity of a shared device.
pub fn consumed_all(
    requests: &BTreeMap<String, Quantity>,
    capacity: &BTreeMap<String, Capacity>,
) -> Result<BTreeMap<String, Quantity>, String> {
    capacity
        .iter()
        .map(|(name, cap)| {
            consumed(asked(requests, cap), cap)
                .map(|q| (name.clone(), q))
                .map_err(|e| format!("capacity {name:?}: {e}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap()
    }

    fn cap(value: &str) -> Capacity {
        Capacity {
            name: "memory".into(),
            value: q(value),
            default: None,
            valid_values: Vec::new(),
            valid_range: None,
        }
    }

    #[test]
    fn unrequested_capacity_takes_the_default_or_everything() {
        assert_eq!(consumed(None, &cap("40Gi")), Ok(q("40Gi")));
        let mut c = cap("40Gi");
        c.default = Some(q("1Gi"));
        assert_eq!(consumed(None, &c), Ok(q("1Gi")));
    }

    #[test]
    fn requests_round_up_to_the_policy() {
        let mut c = cap("10");
        c.valid_range = Some((q("1"), Some(q("8")), Some(q("2"))));
        assert_eq!(consumed(Some(&q("0")), &c), Ok(q("1")));
        assert_eq!(consumed(Some(&q("4")), &c), Ok(q("5")));
        assert!(violates_policy(&q("9"), &c), "past max");
        assert!(!violates_policy(&q("7"), &c));
        let mut c = cap("100Gi");
        c.valid_values = vec![q("10Gi"), q("20Gi"), q("50Gi")];
        assert_eq!(consumed(Some(&q("15Gi")), &c), Ok(q("20Gi")));
        assert!(violates_policy(&q("60Gi"), &c));
        // Fractional steps (FractionalCapacityRange).
        let mut c = cap("4");
        c.valid_range = Some((q("100m"), None, Some(q("250m"))));
        assert_eq!(consumed(Some(&q("200m")), &c), Ok(q("350m")));
    }

    #[test]
    fn shares_must_fit_beside_others() {
        let mut capacity = BTreeMap::new();
        capacity.insert("d/memory".to_string(), cap("40Gi"));
        // A claim names the capacity as the slice does (`memory`); the
        // device's map keeps it qualified with its driver's domain. A
        // qualified name the slice did not use matches nothing, as upstream.
        let mut r = BTreeMap::new();
        r.insert("memory".to_string(), q("30Gi"));
        assert_eq!(fits(&r, &capacity, None, None), Ok(true));
        let mut held = BTreeMap::new();
        held.insert("d/memory".to_string(), q("20Gi"));
        assert_eq!(fits(&r, &capacity, Some(&held), None), Ok(false));
        let mut unknown = BTreeMap::new();
        unknown.insert("cores".to_string(), q("1"));
        assert_eq!(fits(&unknown, &capacity, None, None), Ok(false));
        let mut qualified = BTreeMap::new();
        qualified.insert("d/memory".to_string(), q("1Gi"));
        assert_eq!(fits(&qualified, &capacity, None, None), Ok(false));
        assert_eq!(consumed_all(&r, &capacity).unwrap()["d/memory"], q("30Gi"));
    }
}
