//! The decision mark `rkube scheduler --record-decisions` writes on the pods
//! it binds, and `rkube replay` reads back.
//!
//! A recording (`rkube snapshot --watch`) shows the order in which bindings
//! were *written*; concurrent binding cycles, backoff and informer lag make
//! that differ from the order in which the scheduler *decided* them and
//! from the state it decided each on. The mark records both: the highest
//! resourceVersion the scheduler's cache had applied when the cycle took
//! its snapshot, and the cycle's number in the scheduler process. The
//! Binding carries it as an annotation, which the API server copies onto
//! the pod.

/// The annotation's key.
pub const ANNOTATION: &str = "scheduling.rkube.dev/decision";

/// Where a scheduling cycle stood.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct DecisionMark {
    /// The highest resourceVersion (etcd revision) the cache had applied.
    pub observed_rv: u64,
    /// The cycle's number (1, 2, ...) in the scheduler process.
    pub cycle: u64,
}

impl DecisionMark {
    /// The annotation's value: `<observedRV>/<cycle>`.
    pub fn value(&self) -> String {
        format!("{}/{}", self.observed_rv, self.cycle)
    }

    /// Parses [`DecisionMark::value`]'s form; anything else is `None`.
    pub fn parse(value: &str) -> Option<DecisionMark> {
        let (rv, cycle) = value.split_once('/')?;
        let digits =
            |s: &str| !s.is_empty() && s.len() <= 20 && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(rv) || !digits(cycle) {
            return None;
        }
        Some(DecisionMark {
            observed_rv: rv.parse().ok()?,
            cycle: cycle.parse().ok()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_value_round_trips_and_malformed_values_are_none() {
        let m = DecisionMark {
            observed_rv: 1234,
            cycle: 7,
        };
        assert_eq!(m.value(), "1234/7");
        assert_eq!(DecisionMark::parse("1234/7"), Some(m));
        for bad in [
            "",
            "1234",
            "/7",
            "12/",
            "a/1",
            "1/-1",
            "+1/2",
            "1/2/3",
            "99999999999999999999999/1",
        ] {
            assert_eq!(DecisionMark::parse(bad), None, "{bad:?}");
        }
        // Ordered by what the cache had seen, then by cycle.
        assert!(DecisionMark::parse("10/9").unwrap() < DecisionMark::parse("11/1").unwrap());
    }
}
