//! The API server's audit log (`RKUBE_CP_AUDIT=1`): who wrote the
//! scheduler's Lease and who bound which pod, with the server's own
//! timestamps, to check that two schedulers never bind at the same time.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

/// A write the audit log recorded.
#[derive(Debug, Clone)]
pub struct Write {
    /// When the server received the request (`requestReceivedTimestamp`,
    /// RFC 3339 with microseconds: compares as a string).
    pub received: String,
    /// When the response was complete (`stageTimestamp`).
    pub completed: String,
    /// The client's address.
    pub source: String,
    /// The bound pod, or `None` for a write of the Lease.
    pub pod: Option<String>,
    /// The response's status code.
    pub code: u64,
}

impl Write {
    pub fn succeeded(&self) -> bool {
        (200..300).contains(&self.code)
    }
}

/// One replica's time as leader, as the server saw it.
#[derive(Debug, Clone)]
pub struct Tenure {
    pub source: String,
    /// The completion of its first Lease write after another's.
    pub start: String,
    /// The arrival of the next replica's first Lease write, if any.
    pub end: Option<String>,
}

/// The writes of pod bindings and of Lease `namespace/name`, in the order
/// they completed.
pub fn writes(log: &Path, lease_namespace: &str, lease: &str) -> Vec<Write> {
    let text = std::fs::read_to_string(log).expect("read the audit log");
    let mut out = Vec::new();
    for line in text.lines() {
        let e: Value = serde_json::from_str(line).expect("an audit event per line");
        if e["stage"] != "ResponseComplete" {
            continue;
        }
        let code = e["responseStatus"]["code"].as_u64().unwrap_or(0);
        let r = &e["objectRef"];
        let pod = if r["resource"] == "pods" && r["subresource"] == "binding" {
            Some(r["name"].as_str().unwrap_or("").to_string())
        } else if r["resource"] == "leases"
            && r["namespace"] == lease_namespace
            && r["name"] == lease
        {
            None
        } else {
            continue;
        };
        let ts = |k: &str| {
            let t = e[k].as_str().unwrap_or("").to_string();
            assert_eq!(t.len(), 27, "{k} is not RFC 3339 with microseconds: {t}");
            t
        };
        out.push(Write {
            received: ts("requestReceivedTimestamp"),
            completed: ts("stageTimestamp"),
            source: e["sourceIPs"][0].as_str().unwrap_or("").to_string(),
            pod,
            code,
        });
    }
    out.sort_by(|a, b| a.completed.cmp(&b.completed));
    out
}

/// The leaders' tenures: a new one starts with each Lease write by a
/// different client than the previous write's.
pub fn tenures(writes: &[Write]) -> Vec<Tenure> {
    let mut t: Vec<Tenure> = Vec::new();
    for w in writes.iter().filter(|w| w.pod.is_none() && w.succeeded()) {
        if t.last().is_some_and(|l| l.source == w.source) {
            continue;
        }
        if let Some(l) = t.last_mut() {
            l.end = Some(w.received.clone());
        }
        t.push(Tenure {
            source: w.source.clone(),
            start: w.completed.clone(),
            end: None,
        });
    }
    t
}

/// Checks that every binding ran entirely inside its client's tenure
/// (received after the tenure began, complete before the next leader's
/// first Lease write arrived) and that no pod was bound twice; returns the
/// number of bindings per client.
pub fn assert_one_binder_at_a_time(writes: &[Write]) -> BTreeMap<String, usize> {
    let tenures = tenures(writes);
    let mut per_client = BTreeMap::new();
    let mut bound = BTreeMap::new();
    for w in writes.iter().filter(|w| w.succeeded()) {
        let Some(pod) = &w.pod else { continue };
        let inside = tenures.iter().any(|t| {
            t.source == w.source
                && t.start <= w.received
                && t.end.as_ref().is_none_or(|end| w.completed <= *end)
        });
        assert!(
            inside,
            "pod {pod} was bound by {} ({} … {}) outside its tenures as leader: {tenures:#?}",
            w.source, w.received, w.completed
        );
        if let Some(first) = bound.insert(pod.clone(), w.clone()) {
            panic!("pod {pod} was bound twice: {first:?} and {w:?}");
        }
        *per_client.entry(w.source.clone()).or_insert(0) += 1;
    }
    per_client
}

/// Binding requests (refused ones too) that reached the server after their
/// client's last tenure had ended: late arrivals from a former leader.
pub fn late_binding_attempts(writes: &[Write]) -> Vec<Write> {
    let tenures = tenures(writes);
    writes
        .iter()
        .filter(|w| w.pod.is_some())
        .filter(|w| {
            let last = tenures.iter().rev().find(|t| t.source == w.source);
            last.and_then(|t| t.end.as_ref())
                .is_some_and(|end| w.received >= *end)
        })
        .cloned()
        .collect()
}
