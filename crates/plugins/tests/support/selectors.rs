//! Labels, label selectors, pod affinity terms and topology spread
//! constraints.

use rkube_model::selector::{Operator, Requirement};
use rkube_model::{LabelSelector, Labels, PodAffinityTerm, TopologySpreadConstraint};

/// Labels from `(key, value)` pairs.
pub fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A selector requirement `key op values`, values in the order given.
pub fn req(key: &str, op: Operator, values: &[&str]) -> Requirement {
    Requirement {
        key: key.into(),
        op,
        values: values.iter().map(|s| s.to_string()).collect(),
    }
}

/// [`req`] with the values sorted, as the loader stores them.
pub(super) fn sorted_req(key: &str, op: Operator, values: &[&str]) -> Requirement {
    let mut r = req(key, op, values);
    r.values.sort();
    r
}

/// A label selector builder.
#[derive(Default, Clone)]
pub struct Sel(LabelSelector);

/// Starts a label selector (empty: matches everything).
pub fn sel() -> Sel {
    Sel::default()
}

impl Sel {
    /// `k In (v)`, a `matchLabels` entry.
    pub fn label(self, k: &str, v: &str) -> Self {
        self.is(k, &[v])
    }
    /// `k In vals`.
    pub fn is(self, k: &str, vals: &[&str]) -> Self {
        self.with(k, Operator::In, vals)
    }
    /// `k NotIn vals`.
    pub fn not_in(self, k: &str, vals: &[&str]) -> Self {
        self.with(k, Operator::NotIn, vals)
    }
    /// `k Exists`.
    pub fn exists(self, k: &str) -> Self {
        self.with(k, Operator::Exists, &[])
    }
    /// `k DoesNotExist`.
    pub fn not_exists(self, k: &str) -> Self {
        self.with(k, Operator::DoesNotExist, &[])
    }
    fn with(mut self, k: &str, op: Operator, vals: &[&str]) -> Self {
        self.0.requirements.push(sorted_req(k, op, vals));
        self
    }
    /// The selector.
    pub fn obj(self) -> LabelSelector {
        self.0
    }
}

/// A pod affinity term builder.
pub struct TermB(PodAffinityTerm);

/// Starts a pod affinity term.
pub fn term(selector: Option<LabelSelector>, topology_key: &str) -> TermB {
    TermB(PodAffinityTerm {
        selector,
        topology_key: topology_key.into(),
        ..Default::default()
    })
}

/// Owned copies.
pub(super) fn strings(s: &[&str]) -> Vec<String> {
    s.iter().map(|s| s.to_string()).collect()
}

impl TermB {
    /// `namespaces`.
    pub fn namespaces(mut self, ns: &[&str]) -> Self {
        self.0.namespaces = strings(ns);
        self
    }
    /// `namespaceSelector`.
    pub fn ns_selector(mut self, s: LabelSelector) -> Self {
        self.0.namespace_selector = Some(s);
        self
    }
    /// `matchLabelKeys`.
    pub fn match_label_keys(mut self, keys: &[&str]) -> Self {
        self.0.match_label_keys = strings(keys);
        self
    }
    /// `mismatchLabelKeys`.
    pub fn mismatch_label_keys(mut self, keys: &[&str]) -> Self {
        self.0.mismatch_label_keys = strings(keys);
        self
    }
    /// The term.
    pub fn obj(self) -> PodAffinityTerm {
        self.0
    }
}

/// `st.PodAffinityKind`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Required,
    Preferred,
    RequiredPreferred,
}
pub use Kind::*;

/// `whenUnsatisfiable: DoNotSchedule`.
pub const DO_NOT_SCHEDULE: bool = true;
/// `whenUnsatisfiable: ScheduleAnyway`.
pub const SCHEDULE_ANYWAY: bool = false;

/// A topology spread constraint with no minDomains, the default policies
/// (nodeAffinityPolicy Honor, nodeTaintsPolicy Ignore) and no label keys.
pub fn spread_constraint(
    max_skew: i32,
    key: &str,
    do_not_schedule: bool,
    selector: Option<LabelSelector>,
) -> TopologySpreadConstraint {
    TopologySpreadConstraint {
        max_skew,
        topology_key: key.into(),
        do_not_schedule,
        selector,
        min_domains: None,
        node_affinity_honor: true,
        node_taints_honor: false,
        match_label_keys: Vec::new(),
    }
}

/// Upstream's `namespaces` fixture of the InterPodAffinity tests.
pub const TEAM_NAMESPACES: &[(&str, &[(&str, &str)])] = &[
    ("subteam1.team1", &[("team", "team1")]),
    ("subteam2.team1", &[("team", "team1")]),
    ("subteam1.team2", &[("team", "team2")]),
    ("subteam2.team2", &[("team", "team2")]),
];
