//! `rkube config check`: everything kube-scheduler v1.37 would reject in a
//! `KubeSchedulerConfiguration` (strict decoding, defaulting, validation and
//! building every profile's framework with the in-tree registry), plus
//! warnings for settings that are accepted but do not do what they look like
//! (a score weight of 0, a disabled entry that disables nothing, plugin args
//! nobody reads, ...).
//!
//! The result is plain data ([`CheckReport`]); printing is the CLI's job.

use std::collections::BTreeMap;
use std::sync::Arc;

use rkube_config::validate::{removed_plugin_hint, REMOVED_PLUGINS};
use rkube_config::{
    ConfigError, FieldErrors, KubeSchedulerConfiguration, PluginSet, Plugins, Profile, API_VERSION,
};
use rkube_framework::{Framework, Plugin, Point, Registry};
use serde::Serialize;

/// One error or warning.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Finding {
    /// Field path in the file as written (`profiles[0].plugins.score.enabled[1].weight`);
    /// empty when the finding is about the whole file.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub field: String,
    /// What is wrong.
    pub message: String,
    /// What to write instead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

impl Finding {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Finding {
            field: field.into(),
            message: message.into(),
            hint: None,
        }
    }

    fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

/// `rkube config check -o json`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckReport {
    /// The file checked (`<defaults>` without one).
    pub file: String,
    /// kube-scheduler would start with this configuration.
    pub valid: bool,
    /// Why kube-scheduler would refuse it.
    pub errors: Vec<Finding>,
    /// Accepted, but probably not what was meant.
    pub warnings: Vec<Finding>,
    /// The fully defaulted configuration kube-scheduler would run (when valid).
    #[serde(skip)]
    pub config: Option<KubeSchedulerConfiguration>,
}

/// API versions kube-scheduler no longer serves.
const REMOVED_API_VERSIONS: [&str; 5] = [
    "kubescheduler.config.k8s.io/v1beta1",
    "kubescheduler.config.k8s.io/v1beta2",
    "kubescheduler.config.k8s.io/v1beta3",
    "kubescheduler.config.k8s.io/v1alpha1",
    "kubescheduler.config.k8s.io/v1alpha2",
];

/// Extension points the framework runs, with their configuration names.
const POINTS: [(&str, Point); 13] = [
    ("preEnqueue", Point::PreEnqueue),
    ("queueSort", Point::QueueSort),
    ("preFilter", Point::PreFilter),
    ("filter", Point::Filter),
    ("postFilter", Point::PostFilter),
    ("podGroupPostFilter", Point::PodGroupPostFilter),
    ("preScore", Point::PreScore),
    ("score", Point::Score),
    ("reserve", Point::Reserve),
    ("permit", Point::Permit),
    ("preBind", Point::PreBind),
    ("bind", Point::Bind),
    ("postBind", Point::PostBind),
];

fn point_of(name: &str) -> Option<Point> {
    POINTS.iter().find(|(n, _)| *n == name).map(|(_, p)| *p)
}

/// The in-tree plugins, instantiated with their default args, to ask which
/// extension points each implements.
pub(crate) struct Catalog {
    plugins: BTreeMap<&'static str, Arc<dyn Plugin>>,
}

impl Catalog {
    pub(crate) fn new(registry: &Registry) -> Self {
        let mut plugins = BTreeMap::new();
        for name in registry.names() {
            let args = rkube_config::args::default_args(name, &serde_json::Value::Null, "")
                .unwrap_or(serde_json::Value::Null);
            let factory = registry.get(name).expect("listed");
            if let Ok(p) = factory(&args, "") {
                plugins.insert(name, p);
            }
        }
        Catalog { plugins }
    }

    fn get(&self, name: &str) -> Option<&dyn Plugin> {
        self.plugins.get(name).map(|p| p.as_ref())
    }

    fn implements(&self, name: &str, point: Point) -> bool {
        self.get(name).is_some_and(|p| point.implemented_by(p))
    }

    fn points(&self, name: &str) -> Vec<&'static str> {
        POINTS
            .iter()
            .filter(|(_, p)| self.implements(name, *p))
            .map(|(n, _)| *n)
            .collect()
    }

    /// The registered name closest to a misspelt one.
    fn suggest(&self, name: &str) -> Option<&'static str> {
        let lower = name.to_ascii_lowercase();
        self.plugins
            .keys()
            .map(|k| (levenshtein(&k.to_ascii_lowercase(), &lower), *k))
            .filter(|(d, _)| *d <= 3)
            .min()
            .map(|(_, k)| k)
    }

    /// "does not exist" plus the replacement or the closest name.
    fn unknown_hint(&self, name: &str) -> Option<String> {
        if let Some(h) = removed_plugin_hint(name) {
            return Some(format!("{name} was removed from kube-scheduler; use {h}"));
        }
        self.suggest(name).map(|s| format!("did you mean {s}?"))
    }
}

fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Checks the configuration kube-scheduler runs without `--config`.
pub fn check_defaults() -> CheckReport {
    let cfg = rkube_config::default_config();
    let mut report = CheckReport {
        file: "<defaults>".into(),
        valid: true,
        errors: Vec::new(),
        warnings: Vec::new(),
        config: None,
    };
    report.errors.extend(framework_errors(&cfg));
    report.valid = report.errors.is_empty();
    report.config = report.valid.then_some(cfg);
    report
}

/// Checks a configuration file's text.
pub fn check_str(file: &str, text: &str) -> CheckReport {
    let mut report = CheckReport {
        file: file.to_string(),
        valid: false,
        errors: Vec::new(),
        warnings: Vec::new(),
        config: None,
    };
    let catalog = Catalog::new(&rkube_plugins::in_tree());
    // The configuration as written (for warnings about what the user wrote).
    let raw = rkube_config::decode_str(file, text);
    if let Ok(raw) = &raw {
        report.warnings.extend(lint(raw, &catalog));
    }
    match rkube_config::load_str(file, text) {
        Err(e) => {
            let (errors, warnings) = config_errors(file, text, &e);
            report.errors.extend(errors);
            report.warnings.extend(warnings);
        }
        Ok(cfg) => {
            let raw = raw.expect("load_str decoded it");
            let unknown = unknown_plugins(&raw, &catalog);
            if unknown.is_empty() {
                report.errors.extend(framework_errors(&cfg));
            } else {
                report.errors.extend(unknown);
            }
            report.warnings.extend(lint_defaulted(&raw, &cfg));
            if report.errors.is_empty() {
                report.config = Some(cfg);
            }
        }
    }
    report.valid = report.errors.is_empty();
    report
}

fn field_findings(errors: &FieldErrors) -> Vec<Finding> {
    errors
        .0
        .iter()
        .map(|e| {
            let mut f = Finding::new(&e.field, &e.detail);
            if let Some((name, hint)) = REMOVED_PLUGINS
                .iter()
                .find(|(n, _)| e.detail.contains(&format!("{n}\"")) || e.detail.contains(&format!(": {n}:")))
            {
                f = f.hint(format!("{name} was removed from kube-scheduler; use {hint}"));
            } else if e.field.contains("percentageOfNodesToScore") {
                f = f.hint("use 0 (adaptive: 50% minus 1% per 125 nodes, at least 5%) or a percentage from 1 to 100");
            } else if e.field.contains("queueSort") {
                f = f.hint("all profiles share one scheduling queue: give every profile the same queueSort (leaving it unset everywhere uses PrioritySort)");
            }
            f
        })
        .collect()
}

/// Errors for a rejected file and, for a removed apiVersion, the warnings the
/// file gets once migrated.
fn config_errors(file: &str, text: &str, e: &ConfigError) -> (Vec<Finding>, Vec<Finding>) {
    match e {
        ConfigError::Syntax { message, .. } => (
            vec![Finding::new("", format!("invalid YAML: {message}"))],
            Vec::new(),
        ),
        ConfigError::Invalid { errors, .. } => (field_findings(errors), Vec::new()),
        ConfigError::Version { message, .. } => {
            let mut f = Finding::new("", message.clone());
            for field in ["apiVersion", "kind"] {
                if let Some(rest) = message.strip_prefix(&format!("{field}: ")) {
                    f = Finding::new(field, rest);
                }
            }
            if let Some(old) =
                api_version(text).filter(|v| REMOVED_API_VERSIONS.contains(&v.as_str()))
            {
                let mut out = Vec::new();
                // What else has to change once the apiVersion is v1.
                let migrated = text.replacen(&old, API_VERSION, 1);
                let again = check_str(file, &migrated);
                let hint = if again.errors.is_empty() {
                    format!("change apiVersion to {API_VERSION}; nothing else in this file needs to change")
                } else {
                    format!(
                        "change apiVersion to {API_VERSION}, then fix the {} error(s) listed after this one",
                        again.errors.len()
                    )
                };
                out.push(f.hint(hint));
                for mut m in again.errors {
                    m.message = format!("with apiVersion {API_VERSION}: {}", m.message);
                    out.push(m);
                }
                return (out, again.warnings);
            }
            (vec![f], Vec::new())
        }
    }
}

fn api_version(text: &str) -> Option<String> {
    let v: serde_json::Value = serde_yaml_ng::from_str(text).ok()?;
    v.get("apiVersion")?.as_str().map(str::to_string)
}

/// Enabled entries naming plugins the registry does not have (all of them,
/// with the replacement for removed ones; the framework stops at the first).
fn unknown_plugins(raw: &KubeSchedulerConfiguration, catalog: &Catalog) -> Vec<Finding> {
    let mut out = Vec::new();
    for (i, prof) in raw.profiles.iter().enumerate() {
        let Some(plugins) = &prof.plugins else {
            continue;
        };
        for (point, set) in plugins.sets() {
            for (j, p) in set.enabled.iter().enumerate() {
                let path = format!("profiles[{i}].plugins.{point}.enabled[{j}].name");
                if catalog.get(&p.name).is_none() {
                    let mut f = Finding::new(
                        path,
                        format!("plugin {:?} does not exist in kube-scheduler v1.37", p.name),
                    );
                    if let Some(h) = catalog.unknown_hint(&p.name) {
                        f = f.hint(h);
                    }
                    out.push(f);
                } else if let Some(pt) = point_of(point) {
                    if !catalog.implements(&p.name, pt) {
                        let implemented = catalog.points(&p.name);
                        out.push(
                            Finding::new(
                                path,
                                format!("plugin {:?} does not extend {} plugin", p.name, pt.type_name()),
                            )
                            .hint(format!(
                                "{} implements {}; list it under those extension points or under multiPoint (which enables each point the plugin implements)",
                                p.name,
                                implemented.join(", ")
                            )),
                        );
                    }
                }
            }
        }
    }
    out
}

/// Builds every profile as kube-scheduler does at start-up.
fn framework_errors(cfg: &KubeSchedulerConfiguration) -> Vec<Finding> {
    let registry = rkube_plugins::in_tree();
    let mut out = Vec::new();
    for (i, p) in cfg.profiles.iter().enumerate() {
        if let Err(e) = Framework::new(p, i, &registry) {
            let prefix = format!(
                "profiles[{i}] (schedulerName {:?}): ",
                p.scheduler_name.as_deref().unwrap_or("")
            );
            let message = e.0.strip_prefix(&prefix).unwrap_or(&e.0);
            let mut finding = Finding::new(format!("profiles[{i}]"), message);
            // The framework's overflow check (upstream's, in Go's wrapping
            // arithmetic) is what refuses negative weights.
            if message.ends_with("total score of Score plugins could overflow") {
                finding = finding.hint("a negative score weight makes kube-scheduler's overflow check fail once the running total of weights is negative; to turn a plugin's scoring off use `plugins.score.disabled: [{name: <plugin>}]`");
            }
            out.push(finding);
        }
    }
    if out.is_empty() {
        if let Err(e) = rkube_plugins::profiles(cfg).map_err(crate::SimError::from) {
            out.push(Finding::new("profiles", e.to_string()));
        }
    }
    out
}

fn disable_hint(name: &str, catalog: &Catalog) -> String {
    let others: Vec<&str> = catalog
        .points(name)
        .into_iter()
        .filter(|p| *p != "score" && *p != "preScore")
        .collect();
    let keep = if others.is_empty() {
        String::new()
    } else {
        format!(" (its {} keep running)", others.join(", "))
    };
    format!(
        "to disable {name}'s scoring use `plugins.score.disabled: [{{name: {name}}}]` in this profile{keep}; to make it count less, raise the other score plugins' weights instead"
    )
}

/// NodeResourcesBalancedAllocation told to score an extended resource: if
/// a DeviceClass serves it, kube-scheduler v1.37.2 crashes scoring a node
/// without a device plugin for it (its scorer has no CEL cache; see
/// CONFORMANCE.md). rkube scores it by the node's devices.
fn balanced_allocation_dra_crash(
    profile: usize,
    configs: &[rkube_config::types::PluginConfig],
) -> Vec<Finding> {
    let mut out = Vec::new();
    for (j, c) in configs.iter().enumerate() {
        if c.name != "NodeResourcesBalancedAllocation" {
            continue;
        }
        let resources = c.args["resources"].as_array().into_iter().flatten();
        for (k, r) in resources.enumerate() {
            let Some(name) = r["name"].as_str() else {
                continue;
            };
            if !rkube_model::dra::is_dra_extended_resource_name(name) {
                continue;
            }
            out.push(
                Finding::new(
                    format!("profiles[{profile}].pluginConfig[{j}].args.resources[{k}].name"),
                    format!("kube-scheduler v1.37.2 crashes (nil pointer in deviceMatchesClass) when NodeResourcesBalancedAllocation scores {name} on a node without a device plugin for it while a DeviceClass with selectors serves it (extendedResourceName, or deviceclass.resource.kubernetes.io/<class>); rkube scores it by the node's devices of the class"),
                )
                .hint(format!("score {name} through NodeResourcesFit's scoringStrategy.resources instead, or make sure no DeviceClass declares it")),
            );
        }
    }
    out
}

/// Warnings about what the user wrote (before defaulting).
fn lint(raw: &KubeSchedulerConfiguration, catalog: &Catalog) -> Vec<Finding> {
    let mut out = Vec::new();
    let defaults = rkube_config::defaults::default_plugins();
    let default_weight = |name: &str| {
        defaults
            .multi_point
            .enabled
            .iter()
            .find(|p| p.name == name)
            .and_then(|p| p.weight)
    };
    for (i, prof) in raw.profiles.iter().enumerate() {
        out.extend(balanced_allocation_dra_crash(i, &prof.plugin_config));
        let Some(plugins) = &prof.plugins else {
            continue;
        };
        let base = format!("profiles[{i}].plugins");
        // Weights.
        for (point, set) in plugins.sets() {
            for (j, p) in set.enabled.iter().enumerate() {
                let Some(w) = p.weight else { continue };
                let path = format!("{base}.{point}.enabled[{j}].weight");
                let is_score = catalog.implements(&p.name, Point::Score);
                if catalog.get(&p.name).is_none() {
                    continue;
                }
                if point != "score" && point != "multiPoint" {
                    out.push(
                        Finding::new(
                            path,
                            format!("weight {w} is ignored: kube-scheduler reads score weights only from plugins.score and plugins.multiPoint"),
                        )
                        .hint(if is_score {
                            format!("set the weight under plugins.score.enabled or plugins.multiPoint.enabled for {}", p.name)
                        } else {
                            format!("{} is not a score plugin; remove the weight", p.name)
                        }),
                    );
                    continue;
                }
                if !is_score {
                    out.push(
                        Finding::new(
                            path,
                            format!("weight {w} is ignored: {} is not a score plugin (it implements {})", p.name, catalog.points(&p.name).join(", ")),
                        )
                        .hint("remove the weight"),
                    );
                    continue;
                }
                if point == "multiPoint" {
                    if let Some((k, s)) = plugins
                        .score
                        .enabled
                        .iter()
                        .enumerate()
                        .find(|(_, s)| s.name == p.name)
                    {
                        let effective = s.weight.filter(|w| *w != 0).unwrap_or(1);
                        if effective != w {
                            out.push(
                                Finding::new(
                                    path,
                                    format!(
                                        "weight {w} is ignored: {base}.score.enabled[{k}] also enables {} and its weight ({effective}) takes precedence",
                                        p.name
                                    ),
                                )
                                .hint("set the weight in one place only"),
                            );
                            continue;
                        }
                    }
                }
                if w == 0 {
                    out.push(
                        Finding::new(
                            path,
                            format!(
                                "weight 0 is treated as 1 by kube-scheduler: {} still scores nodes exactly as with weight 1 (a weight cannot turn a score plugin off)",
                                p.name
                            ),
                        )
                        .hint(disable_hint(&p.name, catalog)),
                    );
                } else if w < 0 {
                    out.push(
                        Finding::new(
                            path,
                            format!(
                                "negative weight {w}: {}'s preference is inverted (the nodes it prefers lose points), and kube-scheduler refuses the profile if the running total of score weights turns negative",
                                p.name
                            ),
                        )
                        .hint(disable_hint(&p.name, catalog)),
                    );
                }
            }
        }
        for (j, p) in plugins.score.enabled.iter().enumerate() {
            if p.weight.is_some() || !catalog.implements(&p.name, Point::Score) {
                continue;
            }
            if let Some(dw) = default_weight(&p.name).filter(|w| *w != 1) {
                out.push(
                    Finding::new(
                        format!("{base}.score.enabled[{j}]"),
                        format!(
                            "{} is enabled at score without a weight, so kube-scheduler uses weight 1, not its default weight {dw}",
                            p.name
                        ),
                    )
                    .hint(format!("add `weight: {dw}` to keep the default")),
                );
            }
        }
        // Disabled entries that disable nothing.
        for (point, set) in plugins.sets() {
            for (j, d) in set.disabled.iter().enumerate() {
                if d.name == "*" {
                    continue;
                }
                let path = format!("{base}.{point}.disabled[{j}].name");
                if catalog.get(&d.name).is_none() {
                    let mut f = Finding::new(
                        path,
                        format!(
                            "plugin {:?} does not exist, so this entry disables nothing (kube-scheduler ignores unknown names here)",
                            d.name
                        ),
                    );
                    if let Some(h) = catalog.unknown_hint(&d.name) {
                        f = f.hint(h);
                    }
                    out.push(f);
                    continue;
                }
                if let Some(pt) = point_of(point) {
                    if !catalog.implements(&d.name, pt) {
                        out.push(
                            Finding::new(
                                path,
                                format!(
                                    "{} is not a {} plugin (it implements {}), so disabling it here changes nothing",
                                    d.name,
                                    pt.type_name(),
                                    catalog.points(&d.name).join(", ")
                                ),
                            )
                            .hint(format!(
                                "to turn {} off entirely use `plugins.multiPoint.disabled: [{{name: {}}}]`",
                                d.name, d.name
                            )),
                        );
                        continue;
                    }
                }
                if set.enabled.iter().any(|e| e.name == d.name) {
                    out.push(
                        Finding::new(
                            path,
                            format!(
                                "{} is both enabled and disabled at {point}; the enabled entry wins",
                                d.name
                            ),
                        )
                        .hint("remove one of the two entries"),
                    );
                    continue;
                }
                if point == "multiPoint"
                    && !defaults
                        .multi_point
                        .enabled
                        .iter()
                        .any(|e| e.name == d.name)
                {
                    out.push(
                        Finding::new(
                            path,
                            format!(
                                "{} is not a default plugin, so disabling it at multiPoint changes nothing (multiPoint.disabled only removes defaults)",
                                d.name
                            ),
                        ),
                    );
                }
            }
        }
        for point in ["placementGenerate", "placementScore"] {
            let set = plugin_set(plugins, point);
            if !set.enabled.is_empty() {
                out.push(Finding::new(
                    format!("{base}.{point}"),
                    format!("rkube does not simulate the {point} extension point (workload scheduling); these entries are ignored by `rkube simulate`"),
                ));
            }
        }
    }
    if !raw.extenders.is_empty() {
        out.push(Finding::new(
            "extenders",
            "scheduler extenders are not simulated: `rkube simulate` and `rkube explain` decide as if they were absent",
        ));
    }
    out
}

fn plugin_set<'a>(plugins: &'a Plugins, point: &str) -> &'a PluginSet {
    plugins
        .sets()
        .into_iter()
        .find(|(n, _)| *n == point)
        .map(|(_, s)| s)
        .expect("known point")
}

fn enabled_anywhere(p: &Profile, name: &str) -> bool {
    p.plugins.as_ref().is_some_and(|pl| {
        pl.sets()
            .iter()
            .any(|(_, s)| s.enabled.iter().any(|e| e.name == name))
    })
}

fn percentage_warning(field: String, v: i32, global: bool) -> Option<Finding> {
    if !(1..100).contains(&v) {
        return None;
    }
    let scope = if global {
        "every profile that does not set its own"
    } else {
        "this profile (overriding the global value)"
    };
    Some(Finding::new(
        field,
        format!(
            "percentageOfNodesToScore {v} applies to {scope} but only in clusters of more than 100 nodes: kube-scheduler stops looking after max(100, {v}% of the nodes) feasible nodes, so smaller clusters are always searched in full"
        ),
    ))
}

/// Warnings that need the defaulted configuration (what kube-scheduler runs).
fn lint_defaulted(
    raw: &KubeSchedulerConfiguration,
    cfg: &KubeSchedulerConfiguration,
) -> Vec<Finding> {
    let mut out = Vec::new();
    for (i, (rp, dp)) in raw.profiles.iter().zip(&cfg.profiles).enumerate() {
        for (j, pc) in rp.plugin_config.iter().enumerate() {
            if !enabled_anywhere(dp, &pc.name) {
                let mut f = Finding::new(
                    format!("profiles[{i}].pluginConfig[{j}]"),
                    format!(
                        "args for {} are ignored: the plugin is not enabled in profile {:?}",
                        pc.name,
                        dp.scheduler_name.as_deref().unwrap_or("")
                    ),
                );
                if let Some(h) = removed_plugin_hint(&pc.name) {
                    f = f.hint(format!(
                        "{} was removed from kube-scheduler; use {h}",
                        pc.name
                    ));
                }
                out.push(f);
            }
        }
        if let Some(v) = rp.percentage_of_nodes_to_score {
            out.extend(percentage_warning(
                format!("profiles[{i}].percentageOfNodesToScore"),
                v,
                false,
            ));
        }
    }
    if let Some(v) = raw.percentage_of_nodes_to_score {
        out.extend(percentage_warning(
            "percentageOfNodesToScore".into(),
            v,
            true,
        ));
    }
    if !cfg
        .profiles
        .iter()
        .any(|p| p.scheduler_name.as_deref() == Some("default-scheduler"))
    {
        out.push(
            Finding::new(
                "profiles",
                "no profile is named default-scheduler: pods that do not set spec.schedulerName will not be scheduled by this scheduler",
            )
            .hint("name one profile `schedulerName: default-scheduler` unless another scheduler serves those pods"),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(yaml: &str) -> CheckReport {
        check_str("t.yaml", yaml)
    }

    const HEAD: &str =
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n";

    #[test]
    fn defaults_are_valid_without_warnings() {
        let r = check(HEAD);
        assert!(r.valid, "{r:?}");
        assert!(r.warnings.is_empty(), "{r:?}");
        assert_eq!(r.config, Some(rkube_config::default_config()));
        let d = check_defaults();
        assert!(d.valid && d.warnings.is_empty());
    }

    #[test]
    fn balanced_allocation_on_an_extended_resource_warns_of_upstreams_crash() {
        let r = check(&format!(
            "{HEAD}profiles:\n- pluginConfig:\n  - name: NodeResourcesBalancedAllocation\n    args: {{resources: [{{name: cpu, weight: 1}}, {{name: example.com/gpu, weight: 1}}]}}\n"
        ));
        assert!(r.valid, "{r:?}");
        assert_eq!(r.warnings.len(), 1, "{r:?}");
        let w = &r.warnings[0];
        assert_eq!(
            w.field,
            "profiles[0].pluginConfig[0].args.resources[1].name"
        );
        assert!(
            w.message.contains("kube-scheduler v1.37.2 crashes"),
            "{w:?}"
        );
        assert!(w.hint.as_ref().unwrap().contains("NodeResourcesFit"));
    }

    #[test]
    fn weight_zero_warns_with_the_disable_recipe() {
        let r = check(&format!(
            "{HEAD}profiles:\n- plugins:\n    multiPoint:\n      enabled:\n      - {{name: ImageLocality, weight: 0}}\n"
        ));
        assert!(r.valid);
        assert_eq!(r.warnings.len(), 1, "{r:?}");
        let w = &r.warnings[0];
        assert_eq!(w.field, "profiles[0].plugins.multiPoint.enabled[0].weight");
        assert!(w.message.contains("treated as 1"));
        assert!(w
            .hint
            .as_ref()
            .unwrap()
            .contains("use `plugins.score.disabled: [{name: ImageLocality}]`"));
    }

    #[test]
    fn unknown_and_removed_plugins_are_errors_with_hints() {
        let r = check(&format!(
            "{HEAD}profiles:\n- plugins:\n    score:\n      enabled:\n      - {{name: NodeResourcesLeastAllocated}}\n      - {{name: ImageLocalty}}\n"
        ));
        assert!(!r.valid);
        assert_eq!(r.errors.len(), 2, "{r:?}");
        assert_eq!(
            r.errors[0].field,
            "profiles[0].plugins.score.enabled[0].name"
        );
        assert!(r.errors[0]
            .hint
            .as_ref()
            .unwrap()
            .contains("scoringStrategy.type: LeastAllocated"));
        assert_eq!(
            r.errors[1].hint.as_deref(),
            Some("did you mean ImageLocality?")
        );
    }

    #[test]
    fn explicit_point_not_implemented_is_an_error_multipoint_weight_a_warning() {
        let r = check(&format!(
            "{HEAD}profiles:\n- plugins:\n    filter:\n      enabled:\n      - {{name: ImageLocality}}\n"
        ));
        assert!(!r.valid);
        assert!(
            r.errors[0].message.contains("does not extend FilterPlugin"),
            "{r:?}"
        );
        let r = check(&format!(
            "{HEAD}profiles:\n- plugins:\n    multiPoint:\n      enabled:\n      - {{name: NodePorts, weight: 5}}\n"
        ));
        assert!(r.valid, "{r:?}");
        assert!(
            r.warnings[0].message.contains("not a score plugin"),
            "{r:?}"
        );
    }

    #[test]
    fn disabled_entries_that_disable_nothing() {
        let r = check(&format!(
            "{HEAD}profiles:\n- plugins:\n    score:\n      disabled:\n      - {{name: NodePorts}}\n      - {{name: SelectorSpread}}\n"
        ));
        assert!(r.valid, "{r:?}");
        assert_eq!(r.warnings.len(), 2, "{r:?}");
        assert!(r.warnings[0].message.contains("not a ScorePlugin"));
        assert!(r.warnings[1]
            .hint
            .as_ref()
            .unwrap()
            .contains("PodTopologySpread"));
    }

    #[test]
    fn score_entry_without_weight_loses_the_default_weight() {
        let r = check(&format!(
            "{HEAD}profiles:\n- plugins:\n    score:\n      enabled:\n      - {{name: TaintToleration}}\n"
        ));
        assert!(r.valid, "{r:?}");
        assert_eq!(r.warnings.len(), 1, "{r:?}");
        assert!(r.warnings[0].message.contains("default weight 3"));
    }

    #[test]
    fn removed_api_version_is_an_error_with_migration() {
        let r = check(
            "apiVersion: kubescheduler.config.k8s.io/v1beta2\nkind: KubeSchedulerConfiguration\nprofiles:\n- plugins:\n    score:\n      enabled:\n      - {name: NodeResourcesMostAllocated}\n",
        );
        assert!(!r.valid);
        assert_eq!(r.errors.len(), 2, "{r:?}");
        assert!(r.errors[0]
            .hint
            .as_ref()
            .unwrap()
            .contains("change apiVersion to kubescheduler.config.k8s.io/v1"));
        assert!(r.errors[1]
            .hint
            .as_ref()
            .unwrap()
            .contains("scoringStrategy.type: MostAllocated"));
    }

    #[test]
    fn percentage_and_queue_sort() {
        let r = check(&format!("{HEAD}percentageOfNodesToScore: 150\n"));
        assert!(!r.valid);
        assert!(r.errors[0].hint.is_some());
        let r = check(&format!("{HEAD}percentageOfNodesToScore: 10\n"));
        assert!(r.valid);
        assert!(
            r.warnings[0].message.contains("more than 100 nodes"),
            "{r:?}"
        );
        let r = check(&format!(
            "{HEAD}profiles:\n- schedulerName: a\n- schedulerName: b\n  plugins:\n    queueSort:\n      enabled: [{{name: PrioritySort}}]\n"
        ));
        assert!(!r.valid);
        assert!(
            r.errors
                .iter()
                .any(|e| e.field == "profiles[1].plugins.queueSort"),
            "{r:?}"
        );
    }

    #[test]
    fn negative_weights_follow_upstreams_overflow_check() {
        // Processed first (score entries come before multiPoint): the running
        // total turns negative and the next plugin's check wraps.
        let r = check(&format!(
            "{HEAD}profiles:\n- plugins:\n    score:\n      enabled:\n      - {{name: NodeAffinity, weight: -2}}\n"
        ));
        assert!(!r.valid, "{r:?}");
        assert!(r.errors[0].message.contains("could overflow"), "{r:?}");
        assert!(
            r.errors[0]
                .hint
                .as_deref()
                .is_some_and(|h| h.contains("negative score weight")),
            "{r:?}"
        );
        assert_eq!(r.errors.len(), 1, "reported once: {r:?}");
        assert!(r
            .warnings
            .iter()
            .any(|w| w.message.contains("negative weight -2")));
        // `simulate` refuses it the same way (instead of overflowing).
        let cfg = rkube_config::load_str(
            "t.yaml",
            &format!("{HEAD}profiles:\n- plugins:\n    score:\n      enabled:\n      - {{name: NodeAffinity, weight: -2}}\n"),
        )
        .unwrap();
        let err = rkube_plugins::profiles(&cfg)
            .map_err(crate::SimError::from)
            .err()
            .expect("refused");
        assert!(err.to_string().contains("could overflow"), "{err}");
        // Processed last with a positive total before it: accepted.
        let r = check(&format!(
            "{HEAD}profiles:\n- plugins:\n    multiPoint:\n      enabled:\n      - {{name: ImageLocality, weight: -1}}\n"
        ));
        assert!(r.valid, "{r:?}");
        assert!(
            r.warnings[0].message.contains("negative weight -1"),
            "{r:?}"
        );
    }

    #[test]
    fn levenshtein_distance() {
        assert_eq!(levenshtein("kitten", "sitting"), 3);
        assert_eq!(levenshtein("", "abc"), 3);
        assert_eq!(levenshtein("same", "same"), 0);
    }
}
