//! Label selectors (`metav1.LabelSelector`) and node selector terms
//! (`v1.NodeSelectorTerm`), pre-parsed for fast matching.

use std::collections::BTreeMap;

/// Labels of an object.
pub type Labels = BTreeMap<String, String>;

/// Operator of a label-selector requirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    /// Label value is one of the values.
    In,
    /// Label is absent or its value is none of the values.
    NotIn,
    /// Label is present.
    Exists,
    /// Label is absent.
    DoesNotExist,
    /// Label value, as an integer, is greater than the single value (node selectors only).
    Gt,
    /// Label value, as an integer, is less than the single value (node selectors only).
    Lt,
}

/// One requirement: `key op values`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    /// Label key.
    pub key: String,
    /// Operator.
    pub op: Operator,
    /// Values (sorted for `In`/`NotIn`).
    pub values: Vec<String>,
}

impl Requirement {
    /// Does the label set satisfy this requirement?
    pub fn matches(&self, labels: &Labels) -> bool {
        let value = labels.get(&self.key);
        match self.op {
            Operator::In => value.is_some_and(|v| self.values.iter().any(|x| x == v)),
            Operator::NotIn => value.is_none_or(|v| !self.values.iter().any(|x| x == v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::Gt | Operator::Lt => {
                let (Some(v), Some(bound)) = (value, self.values.first()) else {
                    return false;
                };
                let (Ok(v), Ok(bound)) = (v.parse::<i64>(), bound.parse::<i64>()) else {
                    return false;
                };
                if self.op == Operator::Gt {
                    v > bound
                } else {
                    v < bound
                }
            }
        }
    }
}

/// A label selector. `None` inside a pod term means "matches nothing"
/// upstream; an empty selector matches everything.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LabelSelector {
    /// All requirements, `matchLabels` first as `In` requirements.
    pub requirements: Vec<Requirement>,
}

impl LabelSelector {
    /// A selector that matches every label set.
    pub fn everything() -> Self {
        LabelSelector::default()
    }

    /// True when every requirement holds.
    pub fn matches(&self, labels: &Labels) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// True when the selector has no requirement (matches everything).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }
}

/// A node selector term: requirements on labels and on fields (`metadata.name`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeSelectorTerm {
    /// `matchExpressions`.
    pub match_expressions: Vec<Requirement>,
    /// `matchFields` (only `metadata.name` is supported upstream).
    pub match_fields: Vec<Requirement>,
    /// The term failed to parse (bad operator or value); it matches nothing.
    pub invalid: bool,
}

impl NodeSelectorTerm {
    /// Does a node with these labels and this name satisfy the term?
    /// A term with no requirement matches nothing, as upstream.
    pub fn matches(&self, node_name: &str, labels: &Labels) -> bool {
        if self.invalid || (self.match_expressions.is_empty() && self.match_fields.is_empty()) {
            return false;
        }
        if !self.match_expressions.iter().all(|r| r.matches(labels)) {
            return false;
        }
        if !self.match_fields.is_empty() {
            let mut fields = Labels::new();
            fields.insert("metadata.name".to_string(), node_name.to_string());
            if !self.match_fields.iter().all(|r| r.matches(&fields)) {
                return false;
            }
        }
        true
    }
}

/// A node selector: the terms are ORed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeSelector {
    /// Terms, any of which must match.
    pub terms: Vec<NodeSelectorTerm>,
}

impl NodeSelector {
    /// True when any term matches.
    pub fn matches(&self, node_name: &str, labels: &Labels) -> bool {
        self.terms.iter().any(|t| t.matches(node_name, labels))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn req(key: &str, op: Operator, values: &[&str]) -> Requirement {
        Requirement {
            key: key.into(),
            op,
            values: values.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn operators() {
        let l = labels(&[("zone", "a"), ("gpu", "4")]);
        assert!(req("zone", Operator::In, &["a", "b"]).matches(&l));
        assert!(!req("zone", Operator::NotIn, &["a"]).matches(&l));
        assert!(req("missing", Operator::NotIn, &["a"]).matches(&l));
        assert!(req("gpu", Operator::Gt, &["3"]).matches(&l));
        assert!(!req("gpu", Operator::Lt, &["3"]).matches(&l));
        assert!(!req("zone", Operator::Gt, &["3"]).matches(&l));
        assert!(req("missing", Operator::DoesNotExist, &[]).matches(&l));
    }

    #[test]
    fn empty_term_matches_nothing() {
        let l = labels(&[("zone", "a")]);
        assert!(!NodeSelectorTerm::default().matches("n1", &l));
        let t = NodeSelectorTerm {
            match_fields: vec![req("metadata.name", Operator::In, &["n1"])],
            ..Default::default()
        };
        assert!(t.matches("n1", &l));
        assert!(!t.matches("n2", &l));
    }
}
