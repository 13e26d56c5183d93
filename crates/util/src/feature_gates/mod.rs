//! Feature gates as upstream's components take them (`--feature-gates`,
//! a configuration's `featureGates`): every gate of the Kubernetes version
//! rkube follows, with its default ([`generated`]), and the checks
//! upstream's `SetFromMap` makes — an unknown gate and a locked gate set
//! away from its default are errors — plus rkube's own: a gate set away
//! from its default is refused unless the component implements that
//! position (never accepted and ignored).

pub mod generated;

use std::collections::BTreeMap;

/// A gate's maturity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Off by default, may change or go.
    Alpha,
    /// Usually on by default.
    Beta,
    /// Generally available.
    Ga,
    /// To be removed.
    Deprecated,
}

/// One gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gate {
    /// Its name.
    pub name: &'static str,
    /// Its default at this version.
    pub default: bool,
    /// Its stage.
    pub stage: Stage,
    /// It cannot be set away from its default.
    pub locked: bool,
}

/// The gate `name`, if this version has it.
pub fn lookup(name: &str) -> Option<&'static Gate> {
    generated::GATES
        .binary_search_by(|g| g.name.cmp(name))
        .ok()
        .map(|i| &generated::GATES[i])
}

/// Gates as set: each gate's value, defaults for those not set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FeatureGates {
    set: BTreeMap<String, bool>,
}

impl FeatureGates {
    /// Checks `requested` as upstream's `SetFromMap` and against what the
    /// component implements: `implemented(name, value)` says whether a gate
    /// set away from its default is honoured. Returns the gates and
    /// upstream's warnings (GA and deprecated gates set), or the first
    /// error in upstream's words.
    pub fn new(
        requested: &BTreeMap<String, bool>,
        implemented: &dyn Fn(&str, bool) -> bool,
        component: &str,
    ) -> Result<(FeatureGates, Vec<String>), String> {
        let mut warnings = Vec::new();
        for (name, &value) in requested {
            let Some(g) = lookup(name) else {
                return Err(format!("unrecognized feature gate: {name}"));
            };
            if g.locked && value != g.default {
                return Err(format!(
                    "cannot set feature gate {name} to {value}, feature is locked to {}",
                    g.default
                ));
            }
            if value != g.default && !implemented(name, value) {
                return Err(format!(
                    "feature gate {name}={value} is not implemented by {component}, which runs with its default ({name}={}); remove it or set it to {}",
                    g.default, g.default
                ));
            }
            match g.stage {
                Stage::Ga => warnings.push(format!(
                    "Setting GA feature gate {name}={value}. It will be removed in a future release."
                )),
                Stage::Deprecated => warnings.push(format!(
                    "Setting deprecated feature gate {name}={value}. It will be removed in a future release."
                )),
                _ => {}
            }
        }
        Ok((
            FeatureGates {
                set: requested.clone(),
            },
            warnings,
        ))
    }

    /// The gates set explicitly.
    pub fn set(&self) -> &BTreeMap<String, bool> {
        &self.set
    }

    /// Whether `name` is on (its default when not set; false for a gate
    /// this version does not have).
    pub fn enabled(&self, name: &str) -> bool {
        self.set
            .get(name)
            .copied()
            .or_else(|| lookup(name).map(|g| g.default))
            .unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(pairs: &[(&str, bool)]) -> BTreeMap<String, bool> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn the_table_is_upstreams() {
        assert!(generated::GATES.len() > 200);
        assert!(
            generated::GATES.windows(2).all(|w| w[0].name < w[1].name),
            "sorted"
        );
        // A few facts of v1.37.
        let g = lookup("MemoryQoS").unwrap();
        assert_eq!((g.default, g.stage, g.locked), (true, Stage::Beta, false));
        let g = lookup("NodeSwap").unwrap();
        assert_eq!((g.default, g.stage, g.locked), (true, Stage::Ga, true));
        assert_eq!(lookup("AllAlpha").map(|g| g.default), Some(false));
        assert!(lookup("NoSuchGate").is_none());
    }

    #[test]
    fn set_from_map_as_upstream() {
        let none = |_: &str, _: bool| false;
        let e =
            FeatureGates::new(&req(&[("NoSuchGate", true)]), &none, "rkube kubelet").unwrap_err();
        assert_eq!(e, "unrecognized feature gate: NoSuchGate");
        let e =
            FeatureGates::new(&req(&[("NodeSwap", false)]), &none, "rkube kubelet").unwrap_err();
        assert_eq!(
            e,
            "cannot set feature gate NodeSwap to false, feature is locked to true"
        );
        // At its default: accepted (with upstream's warning for a GA gate).
        let (g, w) =
            FeatureGates::new(&req(&[("NodeSwap", true), ("MemoryQoS", true)]), &none, "x")
                .unwrap();
        assert!(g.enabled("NodeSwap") && g.enabled("MemoryQoS"));
        assert_eq!(
            w,
            ["Setting GA feature gate NodeSwap=true. It will be removed in a future release."]
        );
        // Away from its default: only where implemented.
        let e =
            FeatureGates::new(&req(&[("MemoryQoS", false)]), &none, "rkube kubelet").unwrap_err();
        assert!(
            e.contains("feature gate MemoryQoS=false is not implemented by rkube kubelet"),
            "{e}"
        );
        let qos = |n: &str, _: bool| n == "MemoryQoS";
        let (g, _) =
            FeatureGates::new(&req(&[("MemoryQoS", false)]), &qos, "rkube kubelet").unwrap();
        assert!(!g.enabled("MemoryQoS"));
        assert!(FeatureGates::new(&req(&[("AllAlpha", true)]), &qos, "rkube kubelet").is_err());
        // Unset: the defaults.
        let d = FeatureGates::default();
        assert!(d.enabled("MemoryQoS") && !d.enabled("AllAlpha") && !d.enabled("NoSuchGate"));
    }
}
