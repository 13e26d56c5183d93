//! Typed plugin arguments (`<Plugin>Args`) with upstream v1.37 defaults.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::FieldErrors;

/// A resource and its weight in a scoring strategy.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResourceSpec {
    /// Resource name.
    pub name: String,
    /// Weight (0 defaults to 1).
    #[serde(default)]
    pub weight: i64,
}

fn default_resources() -> Vec<ResourceSpec> {
    vec![
        ResourceSpec {
            name: "cpu".into(),
            weight: 1,
        },
        ResourceSpec {
            name: "memory".into(),
            weight: 1,
        },
    ]
}

/// A point of a RequestedToCapacityRatio shape.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UtilizationShapePoint {
    /// Utilization 0..100.
    pub utilization: i32,
    /// Score 0..10.
    pub score: i32,
}

/// `requestedToCapacityRatio`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RequestedToCapacityRatioParam {
    /// The shape.
    #[serde(default)]
    pub shape: Vec<UtilizationShapePoint>,
}

/// `scoringStrategy` of NodeResourcesFit.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScoringStrategy {
    /// `LeastAllocated`, `MostAllocated` or `RequestedToCapacityRatio`.
    #[serde(default, rename = "type")]
    pub type_: String,
    /// Resources and weights.
    #[serde(default)]
    pub resources: Vec<ResourceSpec>,
    /// Shape, for `RequestedToCapacityRatio`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_to_capacity_ratio: Option<RequestedToCapacityRatioParam>,
}

/// `NodeResourcesFitArgs`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeResourcesFitArgs {
    /// `apiVersion` of the args object, when written (`kubescheduler.config.k8s.io/v1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// `kind` of the args object, when written (the args type's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Resources the filter ignores.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignored_resources: Vec<String>,
    /// Resource groups (prefix before `/`) the filter ignores.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignored_resource_groups: Vec<String>,
    /// Scoring strategy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scoring_strategy: Option<ScoringStrategy>,
}

/// `NodeResourcesBalancedAllocationArgs`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeResourcesBalancedAllocationArgs {
    /// `apiVersion` of the args object, when written (`kubescheduler.config.k8s.io/v1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// `kind` of the args object, when written (the args type's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Resources to balance.
    #[serde(default)]
    pub resources: Vec<ResourceSpec>,
}

/// `InterPodAffinityArgs`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InterPodAffinityArgs {
    /// `apiVersion` of the args object, when written (`kubescheduler.config.k8s.io/v1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// `kind` of the args object, when written (the args type's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Weight of existing pods' required affinity terms in scoring. Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hard_pod_affinity_weight: Option<i32>,
    /// Ignore existing pods' preferred terms when scoring.
    #[serde(default)]
    pub ignore_preferred_terms_of_existing_pods: bool,
}

/// `NodeAffinityArgs`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeAffinityArgs {
    /// `apiVersion` of the args object, when written (`kubescheduler.config.k8s.io/v1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// `kind` of the args object, when written (the args type's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Node affinity added to every pod of the profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub added_affinity: Option<k8s_openapi::api::core::v1::NodeAffinity>,
}

/// `PodTopologySpreadArgs`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodTopologySpreadArgs {
    /// `apiVersion` of the args object, when written (`kubescheduler.config.k8s.io/v1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// `kind` of the args object, when written (the args type's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Cluster-level default constraints (with `List`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub default_constraints: Vec<k8s_openapi::api::core::v1::TopologySpreadConstraint>,
    /// `System` (default) or `List`.
    #[serde(default)]
    pub defaulting_type: String,
}

/// `DefaultPreemptionArgs`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DefaultPreemptionArgs {
    /// `apiVersion` of the args object, when written (`kubescheduler.config.k8s.io/v1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// `kind` of the args object, when written (the args type's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Default 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_candidate_nodes_percentage: Option<i32>,
    /// Default 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_candidate_nodes_absolute: Option<i32>,
}

/// `VolumeBindingArgs`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VolumeBindingArgs {
    /// `apiVersion` of the args object, when written (`kubescheduler.config.k8s.io/v1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// `kind` of the args object, when written (the args type's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Default 600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bind_timeout_seconds: Option<i64>,
    /// Storage-capacity scoring shape.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shape: Vec<UtilizationShapePoint>,
}

/// `DynamicResourcesArgs`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DynamicResourcesArgs {
    /// `apiVersion` of the args object, when written (`kubescheduler.config.k8s.io/v1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// `kind` of the args object, when written (the args type's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Filter timeout. Default `10s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter_timeout: Option<String>,
    /// Binding timeout. Default `10m0s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binding_timeout: Option<String>,
}

/// Plugins that take arguments, in upstream's naming (`<name>Args`).
pub const PLUGINS_WITH_ARGS: [&str; 8] = [
    "DefaultPreemption",
    "DynamicResources",
    "InterPodAffinity",
    "NodeAffinity",
    "NodeResourcesBalancedAllocation",
    "NodeResourcesFit",
    "PodTopologySpread",
    "VolumeBinding",
];

/// Decodes `args` strictly; `path` names the field for errors.
pub fn decode<T: DeserializeOwned + Default>(args: &Value, path: &str) -> Result<T, FieldErrors> {
    if args.is_null() {
        return Ok(T::default());
    }
    serde_path_to_error::deserialize(args.clone()).map_err(|e| {
        let p = e.path().to_string();
        let field = if p == "." {
            path.to_string()
        } else {
            format!("{path}.{p}")
        };
        FieldErrors::single(field, format!("strict decoding error: {}", e.into_inner()))
    })
}

/// Applies upstream's defaults to a plugin's args (JSON in, JSON out).
pub fn default_args(plugin: &str, args: &Value, path: &str) -> Result<Value, FieldErrors> {
    fn to_value<T: Serialize>(plugin: &str, v: T) -> Value {
        let mut v = serde_json::to_value(v).unwrap_or(Value::Null);
        if let Value::Object(m) = &mut v {
            m.insert(
                "apiVersion".into(),
                Value::String(crate::API_VERSION.into()),
            );
            m.insert("kind".into(), Value::String(format!("{plugin}Args")));
        }
        v
    }
    Ok(match plugin {
        "NodeResourcesFit" => {
            let mut a: NodeResourcesFitArgs = decode(args, path)?;
            let s = a.scoring_strategy.get_or_insert_with(|| ScoringStrategy {
                type_: "LeastAllocated".into(),
                resources: default_resources(),
                requested_to_capacity_ratio: None,
            });
            if s.resources.is_empty() {
                s.resources = default_resources();
            }
            for r in &mut s.resources {
                if r.weight == 0 {
                    r.weight = 1;
                }
            }
            to_value(plugin, a)
        }
        "NodeResourcesBalancedAllocation" => {
            let mut a: NodeResourcesBalancedAllocationArgs = decode(args, path)?;
            if a.resources.is_empty() {
                a.resources = default_resources();
            }
            for r in &mut a.resources {
                if r.weight == 0 {
                    r.weight = 1;
                }
            }
            to_value(plugin, a)
        }
        "InterPodAffinity" => {
            let mut a: InterPodAffinityArgs = decode(args, path)?;
            a.hard_pod_affinity_weight.get_or_insert(1);
            to_value(plugin, a)
        }
        "NodeAffinity" => to_value(plugin, decode::<NodeAffinityArgs>(args, path)?),
        "PodTopologySpread" => {
            let mut a: PodTopologySpreadArgs = decode(args, path)?;
            if a.defaulting_type.is_empty() {
                a.defaulting_type = "System".into();
            }
            to_value(plugin, a)
        }
        "DefaultPreemption" => {
            let mut a: DefaultPreemptionArgs = decode(args, path)?;
            a.min_candidate_nodes_percentage.get_or_insert(10);
            a.min_candidate_nodes_absolute.get_or_insert(100);
            to_value(plugin, a)
        }
        "VolumeBinding" => {
            let mut a: VolumeBindingArgs = decode(args, path)?;
            a.bind_timeout_seconds.get_or_insert(600);
            if a.shape.is_empty() {
                a.shape = vec![
                    UtilizationShapePoint {
                        utilization: 0,
                        score: 10,
                    },
                    UtilizationShapePoint {
                        utilization: 100,
                        score: 0,
                    },
                ];
            }
            to_value(plugin, a)
        }
        "DynamicResources" => {
            let mut a: DynamicResourcesArgs = decode(args, path)?;
            a.filter_timeout.get_or_insert_with(|| "10s".into());
            a.binding_timeout.get_or_insert_with(|| "10m0s".into());
            to_value(plugin, a)
        }
        _ => args.clone(),
    })
}
