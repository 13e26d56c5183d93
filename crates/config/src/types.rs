//! The `kubescheduler.config.k8s.io/v1` types, decoded strictly (unknown
//! fields are errors, as kube-scheduler's strict decoder makes them).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `KubeSchedulerConfiguration`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeSchedulerConfiguration {
    /// `--feature-gates OpportunisticBatching=false` (not a field of the
    /// file: the gate as the command line set it).
    #[serde(skip)]
    pub disable_opportunistic_batching: bool,
    /// `--feature-gates GenericWorkload=true` (not a field of the file):
    /// the default plugins gain GangScheduling, and pods of a PodGroup are
    /// scheduled together.
    #[serde(skip)]
    pub generic_workload: bool,
    /// `kubescheduler.config.k8s.io/v1`.
    #[serde(default)]
    pub api_version: String,
    /// `KubeSchedulerConfiguration`.
    #[serde(default)]
    pub kind: String,
    /// Goroutines (here: threads) for filtering and scoring. Default 16.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallelism: Option<i32>,
    /// Leader election settings.
    #[serde(default)]
    pub leader_election: LeaderElection,
    /// API client settings.
    #[serde(default)]
    pub client_connection: ClientConnection,
    /// Enable profiling endpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_profiling: Option<bool>,
    /// Enable lock contention profiling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_contention_profiling: Option<bool>,
    /// Global percentage of nodes to score (0 = adaptive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percentage_of_nodes_to_score: Option<i32>,
    /// Initial back-off for unschedulable pods. Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_initial_backoff_seconds: Option<i64>,
    /// Maximum back-off. Default 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_max_backoff_seconds: Option<i64>,
    /// Scheduling profiles.
    #[serde(default)]
    pub profiles: Vec<Profile>,
    /// Scheduler extenders (accepted, not supported by rkube).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extenders: Vec<Value>,
    /// Wait for leadership before filling caches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_cache_until_active: Option<bool>,
}

/// `leaderElection` (component-base `LeaderElectionConfiguration`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LeaderElection {
    /// Enable leader election.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_elect: Option<bool>,
    /// Lease duration, e.g. `15s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_duration: Option<String>,
    /// Renew deadline, e.g. `10s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew_deadline: Option<String>,
    /// Retry period, e.g. `2s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_period: Option<String>,
    /// Lock type (`leases`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource_lock: String,
    /// Lease name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource_name: String,
    /// Lease namespace.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource_namespace: String,
}

/// `clientConnection`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClientConnection {
    /// Path to a kubeconfig.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kubeconfig: String,
    /// Accept header.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub accept_content_types: String,
    /// Content type.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub content_type: String,
    /// Client QPS. Default 50.
    #[serde(default)]
    pub qps: f32,
    /// Client burst. Default 100.
    #[serde(default)]
    pub burst: i32,
}

/// A scheduling profile.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Profile {
    /// `schedulerName` pods select this profile with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_name: Option<String>,
    /// Per-profile percentage of nodes to score.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percentage_of_nodes_to_score: Option<i32>,
    /// Plugins per extension point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugins: Option<Plugins>,
    /// Plugin arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plugin_config: Vec<PluginConfig>,
}

/// Enabled/disabled plugins for one extension point.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginSet {
    /// Enabled plugins, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub enabled: Vec<Plugin>,
    /// Disabled plugins (`*` disables all defaults).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disabled: Vec<Plugin>,
}

/// A plugin reference.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Plugin {
    /// Plugin name.
    pub name: String,
    /// Score weight (0 or absent means 1 at run time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
}

/// The names of the extension points, in the order upstream lists them.
pub const EXTENSION_POINTS: [&str; 16] = [
    "preEnqueue",
    "queueSort",
    "preFilter",
    "filter",
    "postFilter",
    "preScore",
    "score",
    "reserve",
    "permit",
    "preBind",
    "bind",
    "postBind",
    "multiPoint",
    "placementGenerate",
    "placementScore",
    "podGroupPostFilter",
];

/// `plugins`: one [`PluginSet`] per extension point.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Plugins {
    /// `preEnqueue`: plugins of the PreEnqueue extension point.
    #[serde(default, skip_serializing_if = "is_empty_set")]
    pub pre_enqueue: PluginSet,
    /// `queueSort`: plugins of the QueueSort extension point.
    #[serde(default, skip_serializing_if = "is_empty_set")]
    pub queue_sort: PluginSet,
    /// `preFilter`: plugins of the PreFilter extension point.
    #[serde(default, skip_serializing_if = "is_empty_set")]
    pub pre_filter: PluginSet,
    /// `filter`: plugins of the Filter extension point.
    #[serde(default, skip_serializing_if = "is_empty_set")]
    pub filter: PluginSet,
    /// `postFilter`: plugins of the PostFilter extension point.
    #[serde(default, skip_serializing_if = "is_empty_set")]
    pub post_filter: PluginSet,
    /// `preScore`: plugins of the PreScore extension point.
    #[serde(default, skip_serializing_if = "is_empty_set")]
    pub pre_score: PluginSet,
    /// `score`: plugins of the Score extension point.
    #[serde(default, skip_serializing_if = "is_empty_set")]
    pub score: PluginSet,
    /// `reserve`: plugins of the Reserve extension point.
    #[serde(default, skip_serializing_if = "is_empty_set")]
    pub reserve: PluginSet,
    /// `permit`: plugins of the Permit extension point.
    #[serde(default, skip_serializing_if = "is_empty_set")]
    pub permit: PluginSet,
    /// `preBind`: plugins of the PreBind extension point.
    #[serde(default, skip_serializing_if = "is_empty_set")]
    pub pre_bind: PluginSet,
    /// `bind`: plugins of the Bind extension point.
    #[serde(default, skip_serializing_if = "is_empty_set")]
    pub bind: PluginSet,
    /// `postBind`: plugins of the PostBind extension point.
    #[serde(default, skip_serializing_if = "is_empty_set")]
    pub post_bind: PluginSet,
    /// `multiPoint`: plugins of the MultiPoint (every extension point a plugin implements) extension point.
    #[serde(default, skip_serializing_if = "is_empty_set")]
    pub multi_point: PluginSet,
    /// `placementGenerate`: plugins of the PlacementGenerate (workload-aware scheduling; accepted as upstream, no v1.37 plugin uses it by default) extension point.
    #[serde(default, skip_serializing_if = "is_empty_set")]
    pub placement_generate: PluginSet,
    /// `placementScore`: plugins of the PlacementScore (workload-aware scheduling; accepted as upstream) extension point.
    #[serde(default, skip_serializing_if = "is_empty_set")]
    pub placement_score: PluginSet,
    /// `podGroupPostFilter`: plugins of the PodGroupPostFilter (workload-aware scheduling; accepted as upstream) extension point.
    #[serde(default, skip_serializing_if = "is_empty_set")]
    pub pod_group_post_filter: PluginSet,
}

fn is_empty_set(s: &PluginSet) -> bool {
    s.enabled.is_empty() && s.disabled.is_empty()
}

impl Plugins {
    /// Every extension point's set with its camelCase name.
    pub fn sets(&self) -> [(&'static str, &PluginSet); 16] {
        [
            ("preEnqueue", &self.pre_enqueue),
            ("queueSort", &self.queue_sort),
            ("preFilter", &self.pre_filter),
            ("filter", &self.filter),
            ("postFilter", &self.post_filter),
            ("preScore", &self.pre_score),
            ("score", &self.score),
            ("reserve", &self.reserve),
            ("permit", &self.permit),
            ("preBind", &self.pre_bind),
            ("bind", &self.bind),
            ("postBind", &self.post_bind),
            ("multiPoint", &self.multi_point),
            ("placementGenerate", &self.placement_generate),
            ("placementScore", &self.placement_score),
            ("podGroupPostFilter", &self.pod_group_post_filter),
        ]
    }

    /// Mutable access to every set.
    pub fn sets_mut(&mut self) -> [&mut PluginSet; 16] {
        [
            &mut self.pre_enqueue,
            &mut self.queue_sort,
            &mut self.pre_filter,
            &mut self.filter,
            &mut self.post_filter,
            &mut self.pre_score,
            &mut self.score,
            &mut self.reserve,
            &mut self.permit,
            &mut self.pre_bind,
            &mut self.bind,
            &mut self.post_bind,
            &mut self.multi_point,
            &mut self.placement_generate,
            &mut self.placement_score,
            &mut self.pod_group_post_filter,
        ]
    }
}

/// Arguments for one plugin.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginConfig {
    /// Plugin name.
    pub name: String,
    /// Typed arguments (`kind: <Plugin>Args`), kept as JSON until the plugin decodes them.
    #[serde(default)]
    pub args: Value,
}
