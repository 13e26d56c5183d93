//! Upstream v1.37 defaults: the default plugin set (with the plugins that
//! v1.37's default-on feature gates add) and the merge of a user's plugin
//! sets into it.

use std::collections::{HashMap, HashSet};

use crate::args;
use crate::error::FieldErrors;
use crate::types::*;

fn p(name: &str, weight: Option<i32>) -> Plugin {
    Plugin {
        name: name.to_string(),
        weight,
    }
}

/// The default `multiPoint` plugins of kube-scheduler v1.37, in order.
///
/// The 18 classic defaults, with `DynamicResources` (weight 2) inserted before
/// `DefaultPreemption` (DynamicResourceAllocation is GA) and
/// `NodeDeclaredFeatures` appended (GA). `GangScheduling` is appended when
/// the GenericWorkload gate (beta, off by default in v1.37) is on.
pub fn default_plugins() -> Plugins {
    default_plugins_gated(false)
}

/// [`default_plugins`] with GenericWorkload as given.
pub fn default_plugins_gated(generic_workload: bool) -> Plugins {
    let enabled = vec![
        p("SchedulingGates", None),
        p("PrioritySort", None),
        p("NodeName", None),
        p("NodeUnschedulable", None),
        p("TaintToleration", Some(3)),
        p("NodeAffinity", Some(2)),
        p("NodePorts", None),
        p("NodeResourcesFit", Some(1)),
        p("VolumeRestrictions", None),
        p("NodeVolumeLimits", None),
        p("VolumeBinding", None),
        p("VolumeZone", None),
        p("PodTopologySpread", Some(2)),
        p("InterPodAffinity", Some(2)),
        p("DynamicResources", Some(2)),
        p("DefaultPreemption", None),
        p("NodeResourcesBalancedAllocation", Some(1)),
        p("ImageLocality", Some(1)),
        p("DefaultBinder", None),
        p("NodeDeclaredFeatures", None),
    ];
    let mut enabled = enabled;
    if generic_workload {
        enabled.push(p("GangScheduling", None));
    }
    Plugins {
        multi_point: PluginSet {
            enabled,
            disabled: vec![],
        },
        ..Default::default()
    }
}

/// Upstream's `mergePluginSet`: custom disabled entries remove defaults (`*`
/// removes all), a custom entry with a default's name replaces it in place,
/// other custom entries are appended.
pub fn merge_plugin_set(default: &PluginSet, custom: &PluginSet) -> PluginSet {
    let mut disabled: Vec<Plugin> = Vec::new();
    let mut disabled_names = HashSet::new();
    for d in custom.disabled.iter().chain(default.disabled.iter()) {
        disabled.push(Plugin {
            name: d.name.clone(),
            weight: None,
        });
        disabled_names.insert(d.name.clone());
    }
    let custom_index: HashMap<&str, usize> = custom
        .enabled
        .iter()
        .enumerate()
        .map(|(i, p)| (p.name.as_str(), i))
        .collect();
    let mut replaced = HashSet::new();
    let mut enabled = Vec::new();
    if !disabled_names.contains("*") {
        for d in &default.enabled {
            if disabled_names.contains(&d.name) {
                continue;
            }
            match custom_index.get(d.name.as_str()) {
                Some(&i) => {
                    enabled.push(custom.enabled[i].clone());
                    replaced.insert(i);
                }
                None => enabled.push(d.clone()),
            }
        }
    }
    for (i, c) in custom.enabled.iter().enumerate() {
        if !replaced.contains(&i) {
            enabled.push(c.clone());
        }
    }
    PluginSet { enabled, disabled }
}

fn merge_plugins(custom: Option<&Plugins>, generic_workload: bool) -> Plugins {
    let mut merged = default_plugins_gated(generic_workload);
    let Some(custom) = custom else {
        return merged;
    };
    let customs = custom.sets();
    for (i, set) in merged.sets_mut().into_iter().enumerate() {
        *set = merge_plugin_set(set, customs[i].1);
    }
    merged
}

/// Applies `SetDefaults_KubeSchedulerConfiguration`.
pub fn set_defaults(cfg: &mut KubeSchedulerConfiguration) -> Result<(), FieldErrors> {
    cfg.parallelism.get_or_insert(16);
    if cfg.profiles.is_empty() {
        cfg.profiles.push(Profile::default());
    }
    if cfg.profiles.len() == 1 && cfg.profiles[0].scheduler_name.is_none() {
        cfg.profiles[0].scheduler_name = Some("default-scheduler".into());
    }
    let mut errs = FieldErrors::default();
    for (i, prof) in cfg.profiles.iter_mut().enumerate() {
        let plugins = merge_plugins(prof.plugins.as_ref(), cfg.generic_workload);
        let mut existing = HashSet::new();
        for (j, pc) in prof.plugin_config.iter_mut().enumerate() {
            existing.insert(pc.name.clone());
            if args::PLUGINS_WITH_ARGS.contains(&pc.name.as_str()) {
                let path = format!("profiles[{i}].pluginConfig[{j}].args");
                match args::default_args(&pc.name, &pc.args, &path) {
                    Ok(v) => pc.args = v,
                    Err(e) => errs.extend(e),
                }
            }
        }
        let mut names: Vec<&str> = plugins
            .sets()
            .iter()
            .flat_map(|(_, s)| s.enabled.iter().map(|p| p.name.as_str()))
            .collect();
        names.sort();
        names.dedup();
        for name in names {
            if existing.contains(name) || !args::PLUGINS_WITH_ARGS.contains(&name) {
                continue;
            }
            let v = args::default_args(name, &serde_json::Value::Null, "")?;
            prof.plugin_config.push(PluginConfig {
                name: name.to_string(),
                args: v,
            });
        }
        prof.plugins = Some(plugins);
    }
    cfg.percentage_of_nodes_to_score.get_or_insert(0);
    let le = &mut cfg.leader_election;
    if le.resource_lock.is_empty() {
        le.resource_lock = "leases".into();
    }
    if le.resource_namespace.is_empty() {
        le.resource_namespace = "kube-system".into();
    }
    if le.resource_name.is_empty() {
        le.resource_name = "kube-scheduler".into();
    }
    le.leader_elect.get_or_insert(true);
    le.lease_duration.get_or_insert_with(|| "15s".into());
    le.renew_deadline.get_or_insert_with(|| "10s".into());
    le.retry_period.get_or_insert_with(|| "2s".into());
    let cc = &mut cfg.client_connection;
    if cc.content_type.is_empty() {
        cc.content_type = "application/vnd.kubernetes.protobuf".into();
    }
    if cc.qps == 0.0 {
        cc.qps = 50.0;
    }
    if cc.burst == 0 {
        cc.burst = 100;
    }
    cfg.pod_initial_backoff_seconds.get_or_insert(1);
    cfg.pod_max_backoff_seconds.get_or_insert(10);
    let profiling = *cfg.enable_profiling.get_or_insert(true);
    if profiling {
        cfg.enable_contention_profiling.get_or_insert(true);
    }
    errs.into_result()
}
