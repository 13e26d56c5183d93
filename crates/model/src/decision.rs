//! The decision mark `rkube scheduler --record-decisions` writes on the pods
//! it binds, and `rkube replay` reads back.
//!
//! A recording (`rkube snapshot --watch`) shows the order in which bindings
//! were *written*; concurrent binding cycles, backoff and informer lag make
//! that differ from the order in which the scheduler *decided* them and
//! from the state it decided each on. The mark records both:
//!
//! - the order: the scheduler's leadership term (the wall-clock
//!   millisecond its scheduling loop started; terms of successive leaders
//!   are a lease duration apart) and the cycle's number within it;
//! - the state: per watched kind, the resourceVersion of the last change
//!   its informer had applied when the cycle took its snapshot. Each watch
//!   delivers its kind's changes in resourceVersion order, so the cache held
//!   exactly that kind's changes up to that version. (One number for all
//!   kinds would not do: the informers are independent streams, and a pod
//!   can arrive before a node added just before it.)
//!
//! The Binding carries the mark as an annotation, which the API server
//! copies onto the pod:
//! `scheduling.rkube.dev/decision: <termMs>/<cycle>/Node=120,Pod=131,...`.

use std::collections::BTreeMap;

/// The annotation's key.
pub const ANNOTATION: &str = "scheduling.rkube.dev/decision";

/// Longest annotation value [`DecisionMark::parse`] reads (a mark of every
/// watched kind is about 250 bytes).
const MAX_VALUE_LEN: usize = 1024;

/// Where a scheduling cycle stood.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DecisionMark {
    /// The leadership term: when the scheduling loop started (ms since the
    /// Unix epoch).
    pub term_ms: u64,
    /// The cycle's number (1, 2, ...) in the term.
    pub cycle: u64,
    /// Per kind (`Pod`, `Node`, ...), the resourceVersion of the last
    /// change the cache had applied; a kind not listed had applied none.
    pub seen: BTreeMap<String, u64>,
}

impl DecisionMark {
    /// The annotation's value: `<termMs>/<cycle>/<Kind>=<rv>,...`.
    pub fn value(&self) -> String {
        let seen: Vec<String> = self
            .seen
            .iter()
            .map(|(k, rv)| format!("{k}={rv}"))
            .collect();
        format!("{}/{}/{}", self.term_ms, self.cycle, seen.join(","))
    }

    /// Parses [`DecisionMark::value`]'s form; anything else is `None`.
    pub fn parse(value: &str) -> Option<DecisionMark> {
        if value.len() > MAX_VALUE_LEN {
            return None;
        }
        let mut parts = value.splitn(3, '/');
        let term_ms = number(parts.next()?)?;
        let cycle = number(parts.next()?)?;
        let mut seen = BTreeMap::new();
        for entry in parts.next()?.split(',').filter(|e| !e.is_empty()) {
            let (kind, rv) = entry.split_once('=')?;
            if kind.is_empty() || !kind.bytes().all(|b| b.is_ascii_alphabetic()) {
                return None;
            }
            if seen.insert(kind.to_string(), number(rv)?).is_some() {
                return None;
            }
        }
        Some(DecisionMark {
            term_ms,
            cycle,
            seen,
        })
    }

    /// What the cache had applied of `kind`: `None` when the mark does not
    /// speak of that kind (the scheduler does not watch it).
    pub fn seen(&self, kind: &str) -> Option<u64> {
        self.seen.get(kind).copied()
    }

    /// The order of decisions: by term, then cycle.
    pub fn order(&self) -> (u64, u64) {
        (self.term_ms, self.cycle)
    }
}

fn number(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_value_round_trips_and_malformed_values_are_none() {
        let m = DecisionMark {
            term_ms: 1_700_000_000_123,
            cycle: 7,
            seen: [("Node".to_string(), 120), ("Pod".to_string(), 131)]
                .into_iter()
                .collect(),
        };
        assert_eq!(m.value(), "1700000000123/7/Node=120,Pod=131");
        assert_eq!(DecisionMark::parse(&m.value()), Some(m.clone()));
        assert_eq!(m.seen("Pod"), Some(131));
        assert_eq!(m.seen("PriorityClass"), None);
        let empty = DecisionMark::parse("5/1/").unwrap();
        assert!(empty.seen.is_empty());
        for bad in [
            "",
            "1234",
            "1/2",
            "/7/Pod=1",
            "a/1/Pod=1",
            "1/-1/Pod=1",
            "+1/2/Pod=1",
            "1/2/Pod",
            "1/2/Pod=x",
            "1/2/=3",
            "1/2/Po d=3",
            "1/2/Pod=1,Pod=2",
            "99999999999999999999999/1/Pod=1",
        ] {
            assert_eq!(DecisionMark::parse(bad), None, "{bad:?}");
        }
        assert_eq!(DecisionMark::parse(&"1/2/".repeat(400)), None, "too long");
        // Ordered by term, then cycle: a later leader's first cycle comes
        // after the earlier leader's last.
        let a = DecisionMark::parse("100/900/Pod=5").unwrap();
        let b = DecisionMark::parse("200/1/Pod=5").unwrap();
        assert!(a.order() < b.order());
    }
}
