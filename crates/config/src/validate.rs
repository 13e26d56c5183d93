//! Upstream's `ValidateKubeSchedulerConfiguration` and the plugin-args
//! validations, with the same field paths and messages.

use std::collections::HashMap;
use std::time::Duration;

use crate::args::{self, *};
use crate::duration::parse_duration;
use crate::error::FieldErrors;
use crate::types::*;

/// Plugins removed from kube-scheduler, with what to use instead.
pub const REMOVED_PLUGINS: &[(&str, &str)] = &[
    ("NodeResourcesLeastAllocated", "NodeResourcesFit with pluginConfig args scoringStrategy.type: LeastAllocated"),
    ("NodeResourcesMostAllocated", "NodeResourcesFit with pluginConfig args scoringStrategy.type: MostAllocated"),
    ("RequestedToCapacityRatio", "NodeResourcesFit with pluginConfig args scoringStrategy.type: RequestedToCapacityRatio"),
    ("NodePreferAvoidPods", "nothing: it was removed in v1.24; use taints or node affinity"),
    ("NodeLabel", "NodeAffinity"),
    ("ServiceAffinity", "InterPodAffinity"),
    ("SelectorSpread", "PodTopologySpread (its System default constraints spread by Service/ReplicaSet/StatefulSet)"),
    ("DefaultPodTopologySpread", "PodTopologySpread with defaultingType: System"),
    ("NodeResourceLimits", "NodeResourcesFit"),
    ("AzureDiskLimits", "NodeVolumeLimits"),
    ("CinderLimits", "NodeVolumeLimits"),
    ("EBSLimits", "NodeVolumeLimits"),
    ("GCEPDLimits", "NodeVolumeLimits"),
    ("NodeResourcesLeastAllocatedArgs", "NodeResourcesFitArgs"),
];

/// What to use instead of a removed plugin name.
pub fn removed_plugin_hint(name: &str) -> Option<&'static str> {
    REMOVED_PLUGINS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, hint)| *hint)
}

const INVALID_IN_V1: [&str; 4] = [
    "AzureDiskLimits",
    "CinderLimits",
    "EBSLimits",
    "GCEPDLimits",
];

fn percentage(errs: &mut FieldErrors, path: &str, v: Option<i32>) {
    if let Some(v) = v {
        if !(0..=100).contains(&v) {
            errs.invalid(path, v, "not in valid range [0-100]");
        }
    }
}

/// Validates a defaulted configuration.
pub fn validate(cfg: &KubeSchedulerConfiguration) -> Result<(), FieldErrors> {
    let mut errs = FieldErrors::default();
    let cc = &cfg.client_connection;
    if cc.burst < 0 {
        errs.invalid("clientConnection.burst", cc.burst, "must be non-negative");
    }
    let le = &cfg.leader_election;
    // metav1.Duration fields: kube-scheduler's decoder refuses what Go's
    // time.ParseDuration refuses, whether or not leader election is on.
    for (field, v) in [
        ("leaseDuration", &le.lease_duration),
        ("renewDeadline", &le.renew_deadline),
        ("retryPeriod", &le.retry_period),
    ] {
        if let Some(Err(e)) = v.as_deref().map(crate::duration::parse) {
            errs.invalid(
                format!("leaderElection.{field}"),
                rkube_util::quote(v.as_deref().unwrap_or_default()),
                &e.to_string(),
            );
        }
    }
    if le.leader_elect == Some(true) {
        let dur = |field: &str, v: &Option<String>, errs: &mut FieldErrors| match v
            .as_deref()
            .map(|s| (s, parse_duration(s)))
        {
            Some((_, Some(d))) if !d.is_zero() => Some(d),
            // Unparseable: reported above.
            Some((_, None)) => None,
            Some((s, _)) => {
                errs.invalid(
                    format!("leaderElection.{field}"),
                    s,
                    "must be greater than zero",
                );
                None
            }
            None => None,
        };
        let lease = dur("leaseDuration", &le.lease_duration, &mut errs);
        let renew = dur("renewDeadline", &le.renew_deadline, &mut errs);
        dur("retryPeriod", &le.retry_period, &mut errs);
        if let (Some(l), Some(r)) = (lease, renew) {
            if l <= r {
                errs.invalid(
                    "leaderElection.leaseDuration",
                    le.lease_duration.as_deref().unwrap_or(""),
                    "LeaseDuration must be greater than RenewDeadline",
                );
            }
        }
        if le.resource_lock != "leases" {
            errs.invalid(
                "leaderElection.resourceLock",
                &le.resource_lock,
                r#"resourceLock value must be "leases""#,
            );
        }
    }
    if cfg.parallelism.unwrap_or(16) <= 0 {
        errs.invalid(
            "parallelism",
            cfg.parallelism.unwrap_or(0),
            "should be an integer value greater than zero",
        );
    }
    if cfg.profiles.is_empty() {
        errs.required("profiles", "");
    }
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (i, prof) in cfg.profiles.iter().enumerate() {
        let path = format!("profiles[{i}]");
        let name = prof.scheduler_name.as_deref().unwrap_or("");
        if name.is_empty() {
            errs.required(format!("{path}.schedulerName"), "");
        }
        percentage(
            &mut errs,
            &format!("{path}.percentageOfNodesToScore"),
            prof.percentage_of_nodes_to_score,
        );
        if let Some(plugins) = &prof.plugins {
            for (point, set) in plugins.sets() {
                if point == "multiPoint"
                    || point == "placementGenerate"
                    || point == "placementScore"
                {
                    continue;
                }
                for (j, p) in set.enabled.iter().enumerate() {
                    if INVALID_IN_V1.contains(&p.name.as_str()) {
                        errs.invalid(
                            format!("{path}.plugins.{point}.enabled[{j}]"),
                            &p.name,
                            &format!(
                                "was invalid in version \"{API_VERSION}\" (KubeSchedulerConfiguration is version \"{API_VERSION}\")",
                                API_VERSION = crate::API_VERSION
                            ),
                        );
                    }
                }
            }
        }
        let mut seen_cfg = std::collections::HashSet::new();
        for (j, pc) in prof.plugin_config.iter().enumerate() {
            let pc_path = format!("{path}.pluginConfig[{j}]");
            if !seen_cfg.insert(pc.name.as_str()) {
                errs.duplicate(&pc_path, format!("{:?}", pc.name));
            }
            errs.extend(validate_plugin_args(
                &pc.name,
                &pc.args,
                &format!("{pc_path}.args"),
            ));
        }
        if let Some(&first) = seen.get(name) {
            errs.duplicate(
                format!("{path}.schedulerName"),
                format!("profiles[{first}].schedulerName"),
            );
        }
        seen.insert(name, i);
    }
    if let Some(first) = cfg.profiles.first() {
        let canon = first.plugins.as_ref().map(|p| &p.queue_sort);
        let qs_len = canon.map_or(0, |c| c.enabled.len());
        if qs_len > 1 {
            errs.invalid(
                "profiles[0].plugins.queueSort.Enabled",
                qs_len,
                "only one queue sort plugin can be enabled",
            );
        }
        for (i, prof) in cfg.profiles.iter().enumerate().skip(1) {
            let curr = prof.plugins.as_ref().map(|p| &p.queue_sort);
            if curr != canon {
                errs.invalid(
                    format!("profiles[{i}].plugins.queueSort"),
                    format!("{curr:?}"),
                    "must be the same for all profiles",
                );
            }
        }
    }
    percentage(
        &mut errs,
        "percentageOfNodesToScore",
        cfg.percentage_of_nodes_to_score,
    );
    let initial = cfg.pod_initial_backoff_seconds.unwrap_or(1);
    if initial <= 0 {
        errs.invalid(
            "podInitialBackoffSeconds",
            initial,
            "must be greater than 0",
        );
    }
    let max = cfg.pod_max_backoff_seconds.unwrap_or(10);
    if max < initial {
        errs.invalid(
            "podMaxBackoffSeconds",
            max,
            "must be greater than or equal to PodInitialBackoffSeconds",
        );
    }
    errs.into_result()
}

/// Validates the args of one plugin (as `validatePluginConfig` does).
/// NodeResourcesFit's args are checked when the plugin is built, as upstream.
pub fn validate_plugin_args(name: &str, value: &serde_json::Value, path: &str) -> FieldErrors {
    let mut errs = FieldErrors::default();
    match name {
        "DefaultPreemption" => match args::decode::<DefaultPreemptionArgs>(value, path) {
            Ok(a) => {
                let pct = a.min_candidate_nodes_percentage.unwrap_or(10);
                let abs = a.min_candidate_nodes_absolute.unwrap_or(100);
                if !(0..=100).contains(&pct) {
                    errs.invalid(
                        format!("{path}.minCandidateNodesPercentage"),
                        pct,
                        "not in valid range [0, 100]",
                    );
                }
                if abs < 0 {
                    errs.invalid(
                        format!("{path}.minCandidateNodesAbsolute"),
                        abs,
                        "not in valid range [0, inf)",
                    );
                }
                if pct == 0 && abs == 0 {
                    errs.invalid(
                        format!("{path}.minCandidateNodesPercentage"),
                        pct,
                        "cannot be zero at the same time as minCandidateNodesAbsolute",
                    );
                    errs.invalid(
                        format!("{path}.minCandidateNodesAbsolute"),
                        abs,
                        "cannot be zero at the same time as minCandidateNodesPercentage",
                    );
                }
            }
            Err(e) => errs.extend(e),
        },
        "InterPodAffinity" => match args::decode::<InterPodAffinityArgs>(value, path) {
            Ok(a) => {
                let w = a.hard_pod_affinity_weight.unwrap_or(1);
                if !(0..=100).contains(&w) {
                    errs.invalid(
                        format!("{path}.hardPodAffinityWeight"),
                        w,
                        "not in valid range [0, 100]",
                    );
                }
            }
            Err(e) => errs.extend(e),
        },
        "NodeResourcesBalancedAllocation" => {
            match args::decode::<NodeResourcesBalancedAllocationArgs>(value, path) {
                Ok(a) => {
                    let mut seen = std::collections::HashSet::new();
                    for (i, r) in a.resources.iter().enumerate() {
                        if !seen.insert(r.name.clone()) {
                            errs.duplicate(
                                format!("{path}.resources[{i}].name"),
                                format!("{:?}", r.name),
                            );
                        }
                        if r.weight != 1 {
                            errs.invalid(
                                format!("{path}.resources[{i}].weight"),
                                r.weight,
                                "must be 1",
                            );
                        }
                    }
                }
                Err(e) => errs.extend(e),
            }
        }
        "PodTopologySpread" => match args::decode::<PodTopologySpreadArgs>(value, path) {
            Ok(a) => {
                match a.defaulting_type.as_str() {
                    "System" if !a.default_constraints.is_empty() => errs.invalid(
                        format!("{path}.defaultingType"),
                        "System",
                        "when .defaultConstraints are not empty",
                    ),
                    "System" | "List" | "" => {}
                    other => errs.not_supported(
                        format!("{path}.defaultingType"),
                        other,
                        &["List", "System"],
                    ),
                }
                for (i, c) in a.default_constraints.iter().enumerate() {
                    let p = format!("{path}.defaultConstraints[{i}]");
                    if c.max_skew <= 0 {
                        errs.invalid(
                            format!("{p}.maxSkew"),
                            c.max_skew,
                            "not in valid range (0, inf)",
                        );
                    }
                    if c.topology_key.is_empty() {
                        errs.required(format!("{p}.topologyKey"), "can not be empty");
                    }
                    match c.when_unsatisfiable.as_str() {
                        "DoNotSchedule" | "ScheduleAnyway" => {}
                        "" => errs.required(format!("{p}.whenUnsatisfiable"), "can not be empty"),
                        other => errs.not_supported(
                            format!("{p}.whenUnsatisfiable"),
                            other,
                            &["DoNotSchedule", "ScheduleAnyway"],
                        ),
                    }
                    if c.label_selector.is_some() {
                        errs.forbidden(
                            format!("{p}.labelSelector"),
                            "constraint must not define a selector, as they deduced for each pod",
                        );
                    }
                }
            }
            Err(e) => errs.extend(e),
        },
        "NodeResourcesFit" => {
            if let Err(e) = args::decode::<NodeResourcesFitArgs>(value, path) {
                errs.extend(e);
            }
        }
        "NodeAffinity" => {
            if let Err(e) = args::decode::<NodeAffinityArgs>(value, path) {
                errs.extend(e);
            }
        }
        "VolumeBinding" => {
            if let Err(e) = args::decode::<VolumeBindingArgs>(value, path) {
                errs.extend(e);
            }
        }
        "DynamicResources" => match args::decode::<DynamicResourcesArgs>(value, path) {
            Ok(a) => {
                let check = |errs: &mut FieldErrors, field: &str, v: &Option<String>, min| {
                    let Some(v) = v else { return };
                    let shown = format!("{v:?}");
                    match rkube_util::duration::parse(v) {
                        Err(e) if !v.trim_start().starts_with('-') => {
                            errs.invalid(format!("{path}.{field}"), shown, &e.to_string())
                        }
                        Ok(d) if d >= min => {}
                        _ if field == "filterTimeout" => errs.invalid(
                            format!("{path}.{field}"),
                            shown,
                            "must be zero or positive",
                        ),
                        _ => errs.invalid(
                            format!("{path}.{field}"),
                            shown,
                            "must be at least 1 second",
                        ),
                    }
                };
                check(
                    &mut errs,
                    "filterTimeout",
                    &a.filter_timeout,
                    Duration::ZERO,
                );
                check(
                    &mut errs,
                    "bindingTimeout",
                    &a.binding_timeout,
                    Duration::from_secs(1),
                );
            }
            Err(e) => errs.extend(e),
        },
        _ => {}
    }
    errs
}

/// Upstream's `ValidateNodeResourcesFitArgs`.
pub fn validate_fit_args(a: &NodeResourcesFitArgs, path: &str) -> Result<(), FieldErrors> {
    let mut errs = FieldErrors::default();
    for (i, g) in a.ignored_resource_groups.iter().enumerate() {
        if g.contains('/') {
            errs.invalid(
                format!("{path}.ignoredResourceGroups[{i}]"),
                g,
                "resource group name can't contain '/'",
            );
        }
    }
    let sp = format!("{path}.scoringStrategy");
    match &a.scoring_strategy {
        None => errs.required(&sp, "ScoringStrategy field is required"),
        Some(s) => {
            const TYPES: [&str; 3] = [
                "LeastAllocated",
                "MostAllocated",
                "RequestedToCapacityRatio",
            ];
            if !TYPES.contains(&s.type_.as_str()) {
                errs.not_supported(format!("{sp}.type"), &s.type_, &TYPES);
            }
            for (i, r) in s.resources.iter().enumerate() {
                if r.weight <= 0 || r.weight > 100 {
                    errs.invalid(
                        format!("{sp}.resources[{i}].weight"),
                        r.weight,
                        &format!("resource weight of {} not in valid range (0, 100]", r.name),
                    );
                }
            }
            if s.type_ == "RequestedToCapacityRatio" {
                match &s.requested_to_capacity_ratio {
                    None => errs.required(
                        format!("{sp}.requestedToCapacityRatio"),
                        "must be specified when type is RequestedToCapacityRatio",
                    ),
                    Some(r) => {
                        let shape_path = format!("{sp}.requestedToCapacityRatio.shape");
                        if r.shape.is_empty() {
                            errs.required(&shape_path, "at least one point must be specified");
                        }
                        for i in 1..r.shape.len() {
                            if r.shape[i - 1].utilization >= r.shape[i].utilization {
                                errs.invalid(
                                    format!("{shape_path}[{i}].utilization"),
                                    r.shape[i].utilization,
                                    "values must be sorted in increasing order",
                                );
                                break;
                            }
                        }
                        for (i, pt) in r.shape.iter().enumerate() {
                            if !(0..=100).contains(&pt.utilization) {
                                errs.invalid(
                                    format!("{shape_path}[{i}].utilization"),
                                    pt.utilization,
                                    "not in valid range [0, 100]",
                                );
                            }
                            if !(0..=10).contains(&pt.score) {
                                errs.invalid(
                                    format!("{shape_path}[{i}].score"),
                                    pt.score,
                                    "not in valid range [0, 10]",
                                );
                            }
                        }
                    }
                }
            } else if s.requested_to_capacity_ratio.is_some() {
                errs.forbidden(
                    format!("{sp}.requestedToCapacityRatio"),
                    "must be nil when type is not RequestedToCapacityRatio",
                );
            }
        }
    }
    errs.into_result()
}
