//! A profile's framework: the plugin instances for each extension point,
//! built from a defaulted profile the way upstream's `NewFramework` does
//! (explicit per-point plugins, then `multiPoint` expansion into every point
//! a plugin implements, weights with 0 → 1).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use rkube_config::{PluginSet, Profile};

use crate::events::{wildcard_registrations, QueueingHintMap};
use crate::fast_hash::FastMap;
use crate::plugin::Plugin;
use crate::score_memo::ScoreMemo;

/// Constructs a plugin from its (defaulted) args; `path` names the args for errors.
pub type Factory = fn(args: &serde_json::Value, path: &str) -> Result<Arc<dyn Plugin>, String>;

/// Plugin name → factory.
#[derive(Clone, Default)]
pub struct Registry {
    factories: BTreeMap<&'static str, Factory>,
}

impl Registry {
    /// Empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a plugin.
    pub fn register(&mut self, name: &'static str, f: Factory) {
        self.factories.insert(name, f);
    }

    /// Looks up a factory.
    pub fn get(&self, name: &str) -> Option<Factory> {
        self.factories.get(name).copied()
    }

    /// Registered names.
    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.factories.keys().copied()
    }
}

/// Why a profile could not be turned into a framework.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FrameworkError(pub String);

/// Extension points in framework order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Point {
    /// Gates a pod before it enters the active queue.
    PreEnqueue,
    /// Orders the queue.
    QueueSort,
    /// Computes per-cycle state; may restrict the nodes or skip filters.
    PreFilter,
    /// Decides whether a pod fits one node.
    Filter,
    /// Runs when no node fits (preemption).
    PostFilter,
    /// Runs when a pod group does not fit (workload-aware preemption).
    PodGroupPostFilter,
    /// Computes per-cycle state for scoring.
    PreScore,
    /// Scores a feasible node (with NormalizeScore).
    Score,
    /// Reserves resources on the chosen node (with Unreserve).
    Reserve,
    /// Approves, denies or delays the binding.
    Permit,
    /// Prepares the binding (volumes, devices).
    PreBind,
    /// Binds the pod to the node.
    Bind,
    /// Informational, after a successful binding.
    PostBind,
}

impl Point {
    const ALL: [Point; 13] = [
        Point::PreEnqueue,
        Point::QueueSort,
        Point::PreFilter,
        Point::Filter,
        Point::PostFilter,
        Point::PodGroupPostFilter,
        Point::PreScore,
        Point::Score,
        Point::Reserve,
        Point::Permit,
        Point::PreBind,
        Point::Bind,
        Point::PostBind,
    ];

    /// Upstream's name for the point (`Reserve`, `PreBind`, ...), as in
    /// messages and metrics labels.
    pub fn name(&self) -> &'static str {
        self.type_name().trim_end_matches("Plugin")
    }

    /// Upstream's interface name (used in error messages).
    pub fn type_name(&self) -> &'static str {
        match self {
            Point::PreEnqueue => "PreEnqueuePlugin",
            Point::QueueSort => "QueueSortPlugin",
            Point::PreFilter => "PreFilterPlugin",
            Point::Filter => "FilterPlugin",
            Point::PostFilter => "PostFilterPlugin",
            Point::PodGroupPostFilter => "PodGroupPostFilterPlugin",
            Point::PreScore => "PreScorePlugin",
            Point::Score => "ScorePlugin",
            Point::Reserve => "ReservePlugin",
            Point::Permit => "PermitPlugin",
            Point::PreBind => "PreBindPlugin",
            Point::Bind => "BindPlugin",
            Point::PostBind => "PostBindPlugin",
        }
    }

    /// Does the plugin implement this point?
    pub fn implemented_by(&self, p: &dyn Plugin) -> bool {
        match self {
            Point::PreEnqueue => p.as_pre_enqueue().is_some(),
            Point::QueueSort => p.as_queue_sort().is_some(),
            Point::PreFilter => p.as_pre_filter().is_some(),
            Point::Filter => p.as_filter().is_some(),
            Point::PostFilter => p.as_post_filter().is_some(),
            Point::PodGroupPostFilter => p.as_pod_group_post_filter().is_some(),
            Point::PreScore => p.as_pre_score().is_some(),
            Point::Score => p.as_score().is_some(),
            Point::Reserve => p.as_reserve().is_some(),
            Point::Permit => p.as_permit().is_some(),
            Point::PreBind => p.as_pre_bind().is_some(),
            Point::Bind => p.as_bind().is_some(),
            Point::PostBind => p.as_post_bind().is_some(),
        }
    }

    fn set<'a>(&self, plugins: &'a rkube_config::Plugins) -> &'a PluginSet {
        match self {
            Point::PreEnqueue => &plugins.pre_enqueue,
            Point::QueueSort => &plugins.queue_sort,
            Point::PreFilter => &plugins.pre_filter,
            Point::Filter => &plugins.filter,
            Point::PostFilter => &plugins.post_filter,
            Point::PodGroupPostFilter => &plugins.pod_group_post_filter,
            Point::PreScore => &plugins.pre_score,
            Point::Score => &plugins.score,
            Point::Reserve => &plugins.reserve,
            Point::Permit => &plugins.permit,
            Point::PreBind => &plugins.pre_bind,
            Point::Bind => &plugins.bind,
            Point::PostBind => &plugins.post_bind,
        }
    }
}

/// A built profile.
pub struct Framework {
    /// `schedulerName` of the profile.
    pub profile_name: String,
    /// Per-profile percentage of nodes to score.
    pub percentage_of_nodes_to_score: Option<i32>,
    points: FastMap<Point, Vec<Arc<dyn Plugin>>>,
    weights: FastMap<&'static str, i64>,
    /// Where extension-point and plugin durations go (none: not measured).
    pub recorder: Option<crate::metrics::Recorder>,
    /// The plugins that sign pods for OpportunisticBatching, or `None`
    /// when the profile signs none (see [`crate::batch`]).
    signers: Option<Vec<Arc<dyn Plugin>>>,
    /// Scores kept across cycles (see [`ScoreMemo`]).
    pub(crate) score_memo: ScoreMemo,
}

impl std::fmt::Debug for Framework {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Framework")
            .field("profile_name", &self.profile_name)
            .finish()
    }
}

impl Framework {
    /// Builds a framework for a defaulted profile (`profile_index` names it in errors).
    pub fn new(
        profile: &Profile,
        profile_index: usize,
        registry: &Registry,
    ) -> Result<Self, FrameworkError> {
        let name = profile.scheduler_name.clone().unwrap_or_default();
        let plugins = profile.plugins.clone().unwrap_or_default();
        let ctx = |m: String| {
            FrameworkError(format!(
                "profiles[{profile_index}] (schedulerName {name:?}): {m}"
            ))
        };
        // Instantiate every plugin named anywhere.
        let mut needed: Vec<&str> = plugins
            .sets()
            .iter()
            .flat_map(|(_, s)| s.enabled.iter().map(|p| p.name.as_str()))
            .collect();
        needed.sort();
        needed.dedup();
        let mut seen_cfg = HashSet::new();
        for pc in &profile.plugin_config {
            if !seen_cfg.insert(pc.name.as_str()) {
                return Err(ctx(format!("repeated config for plugin {}", pc.name)));
            }
        }
        let mut instances: HashMap<String, Arc<dyn Plugin>> = HashMap::new();
        for (point, set) in plugins.sets() {
            for (j, p) in set.enabled.iter().enumerate() {
                if registry.get(&p.name).is_none() {
                    let hint = rkube_config::validate::removed_plugin_hint(&p.name)
                        .map(|h| format!("; it was removed from kube-scheduler, use {h}"))
                        .unwrap_or_else(|| "; not a kube-scheduler v1.37 plugin".to_string());
                    return Err(ctx(format!(
                        "plugins.{point}.enabled[{j}].name: plugin {:?} does not exist{hint}",
                        p.name
                    )));
                }
            }
        }
        for n in needed {
            let factory = registry.get(n).expect("checked above");
            let (args, path) = match profile.plugin_config.iter().position(|pc| pc.name == n) {
                Some(i) => (
                    profile.plugin_config[i].args.clone(),
                    format!("profiles[{profile_index}].pluginConfig[{i}].args"),
                ),
                None => (serde_json::Value::Null, format!("{n}Args")),
            };
            let inst = factory(&args, &path)
                .map_err(|e| ctx(format!("initializing plugin {n:?}: {e}")))?;
            instances.insert(n.to_string(), inst);
        }
        let mut points: FastMap<Point, Vec<Arc<dyn Plugin>>> = FastMap::default();
        for point in Point::ALL {
            let set = point.set(&plugins);
            let mut list: Vec<Arc<dyn Plugin>> = Vec::new();
            let mut enabled_names: Vec<&str> = Vec::new();
            for p in &set.enabled {
                let inst = &instances[&p.name];
                if !point.implemented_by(inst.as_ref()) {
                    return Err(ctx(format!(
                        "plugin {:?} does not extend {} plugin",
                        p.name,
                        point.type_name()
                    )));
                }
                if enabled_names.contains(&p.name.as_str()) {
                    return Err(ctx(format!(
                        "plugin {:?} already registered as {:?}",
                        p.name,
                        point.type_name()
                    )));
                }
                enabled_names.push(&p.name);
            }
            let disabled: HashSet<&str> = set.disabled.iter().map(|p| p.name.as_str()).collect();
            if !plugins.multi_point.enabled.is_empty() && !disabled.contains("*") {
                let mut multi: Vec<&str> = Vec::new();
                let mut overrides: HashSet<&str> = HashSet::new();
                for ep in &plugins.multi_point.enabled {
                    let inst = &instances[&ep.name];
                    if !point.implemented_by(inst.as_ref()) || disabled.contains(ep.name.as_str()) {
                        continue;
                    }
                    if enabled_names.contains(&ep.name.as_str()) {
                        overrides.insert(ep.name.as_str());
                        continue;
                    }
                    if multi.contains(&ep.name.as_str()) {
                        return Err(ctx(format!(
                            "plugin {:?} already registered as {:?}",
                            ep.name,
                            point.type_name()
                        )));
                    }
                    multi.push(&ep.name);
                }
                let mut ordered: Vec<&str> = Vec::new();
                ordered.extend(enabled_names.iter().filter(|n| overrides.contains(*n)));
                ordered.extend(multi.iter());
                ordered.extend(enabled_names.iter().filter(|n| !overrides.contains(*n)));
                enabled_names = ordered;
            }
            for n in enabled_names {
                list.push(instances[n].clone());
            }
            points.insert(point, list);
        }
        if points[&Point::QueueSort].len() != 1 {
            return Err(ctx(format!(
                "only one queue sort plugin required for profile with scheduler name {name:?}, but got {}",
                points[&Point::QueueSort].len()
            )));
        }
        if points[&Point::Bind].is_empty() {
            return Err(ctx(format!(
                "at least one bind plugin is needed for profile with scheduler name {name:?}"
            )));
        }
        // Weights: explicit score entries take precedence over multiPoint; 0 → 1.
        let mut weights: FastMap<&'static str, i64> = FastMap::default();
        let mut total: i64 = 0;
        for p in plugins
            .score
            .enabled
            .iter()
            .chain(plugins.multi_point.enabled.iter())
        {
            let inst = &instances[&p.name];
            if inst.as_score().is_none() || weights.contains_key(inst.name()) {
                continue;
            }
            let w = match p.weight.unwrap_or(0) {
                0 => 1,
                w => w as i64,
            };
            // Go's int64 arithmetic wraps; a negative weight therefore makes
            // the next check fail exactly as upstream's does.
            if w.wrapping_mul(100) > i64::MAX.wrapping_sub(total) {
                return Err(ctx(
                    "score plugins: total score of Score plugins could overflow".into(),
                ));
            }
            total = total.wrapping_add(w.wrapping_mul(100));
            weights.insert(inst.name(), w);
        }
        for p in &points[&Point::Score] {
            if !weights.contains_key(p.name()) {
                return Err(ctx(format!(
                    "score plugin {:?} is not configured with weight",
                    p.name()
                )));
            }
        }
        let signers = signers(&|p| points.get(&p).cloned().unwrap_or_default());
        Ok(Framework {
            profile_name: name,
            percentage_of_nodes_to_score: profile.percentage_of_nodes_to_score,
            points,
            weights,
            recorder: None,
            signers,
            score_memo: ScoreMemo::default(),
        })
    }

    /// The plugins that sign pods, or `None` when this profile signs none.
    pub fn signers(&self) -> Option<&[Arc<dyn Plugin>]> {
        self.signers.as_deref()
    }

    /// Signs no pod from now on (upstream disables signatures for every
    /// profile when scheduler extenders are configured).
    pub fn disable_signatures(&mut self) {
        self.signers = None;
    }

    /// Plugins at an extension point, in order.
    pub fn plugins(&self, point: Point) -> &[Arc<dyn Plugin>] {
        self.points.get(&point).map(|v| v.as_slice()).unwrap_or(&[])
    }

    /// The score weight of a plugin.
    pub fn weight(&self, plugin: &str) -> i64 {
        self.weights.get(plugin).copied().unwrap_or(1)
    }

    /// The queue sort plugin.
    pub fn queue_sort(&self) -> &Arc<dyn Plugin> {
        &self.plugins(Point::QueueSort)[0]
    }
}

/// The plugins whose signatures make up a profile's, or `None` when the
/// profile signs no pod: every PreFilter, Filter, PreScore and Score plugin
/// once, in that order (upstream's `computeBatchablePlugins`).
pub(crate) fn signers(
    points: &dyn Fn(Point) -> Vec<Arc<dyn Plugin>>,
) -> Option<Vec<Arc<dyn Plugin>>> {
    let mut out: Vec<Arc<dyn Plugin>> = Vec::new();
    for point in [
        Point::PreFilter,
        Point::Filter,
        Point::PreScore,
        Point::Score,
    ] {
        for p in points(point) {
            if out.iter().any(|q| q.name() == p.name()) {
                continue;
            }
            match p.as_sign() {
                Some(s) if !s.refuses_every_pod() => out.push(p),
                _ => return None,
            }
        }
    }
    Some(out)
}

/// The points whose plugins can reject a pod and so register events
/// (upstream's `shouldHaveEnqueueExtensions`).
const REJECTING_POINTS: [Point; 5] = [
    Point::PreEnqueue,
    Point::PreFilter,
    Point::Filter,
    Point::Reserve,
    Point::Permit,
];

impl QueueingHintMap {
    /// The map of a profile: every plugin at PreEnqueue, PreFilter, Filter,
    /// Reserve or Permit, once; and DefaultPreemption when it is enabled,
    /// whose PreEnqueue (the gate of an asynchronous preemption) the live
    /// scheduler's queue runs rather than the framework, as it reads the
    /// preemptions in progress.
    pub fn for_framework(fw: &Framework) -> Self {
        let mut map = QueueingHintMap::default();
        let mut seen = BTreeSet::new();
        for point in REJECTING_POINTS {
            for p in fw.plugins(point) {
                if seen.insert(p.name()) {
                    let events = p
                        .events_to_register()
                        .unwrap_or_else(wildcard_registrations);
                    map.register(p.name(), events);
                }
            }
        }
        for p in fw.plugins(Point::PostFilter) {
            if p.name() == "DefaultPreemption" && seen.insert(p.name()) {
                if let Some(events) = p.events_to_register() {
                    map.register(p.name(), events);
                }
            }
        }
        map
    }
}
