//! Every profile of a configuration, built with a plugin registry
//! (upstream's `profile.NewMap(cfg, registry)`): one framework per
//! `schedulerName`, all sharing one queue, so their QueueSort plugins and
//! args must agree. The live scheduler and the simulator build theirs here
//! with the in-tree registry (`rkube_plugins::profiles`).

use std::collections::HashMap;

use rkube_config::KubeSchedulerConfiguration;
use rkube_model::Pod;

use crate::framework::{Framework, FrameworkError, Point, Registry};

/// The frameworks of every profile, by scheduler name.
pub struct Profiles {
    frameworks: Vec<Framework>,
    by_name: HashMap<String, usize>,
    /// Global percentageOfNodesToScore.
    pub percentage_of_nodes_to_score: i32,
    /// The OpportunisticBatching gate (on unless the command line turned
    /// it off).
    pub opportunistic_batching: bool,
    /// The GenericWorkload gate: pods of a PodGroup are scheduled together.
    pub generic_workload: bool,
}

impl Profiles {
    /// Builds every profile of a configuration with `registry`'s plugins
    /// (upstream's `profile.NewMap`).
    pub fn new(
        cfg: &KubeSchedulerConfiguration,
        registry: &Registry,
    ) -> Result<Self, FrameworkError> {
        let mut frameworks = Vec::new();
        let mut by_name = HashMap::new();
        // profile.NewMap's cfgValidator: one scheduling queue, so every
        // profile must end up with the same QueueSort plugin and args.
        let mut queue_sort: Option<(&'static str, serde_json::Value)> = None;
        for (i, p) in cfg.profiles.iter().enumerate() {
            let mut fw = Framework::new(p, i, registry)?;
            // Upstream signs no pod when scheduler extenders are configured.
            if !cfg.extenders.is_empty() {
                fw.disable_signatures();
            }
            let qs = fw.queue_sort().name();
            let args = p.plugin_args(qs);
            match &queue_sort {
                None => queue_sort = Some((qs, args)),
                Some((first, _)) if *first != qs => {
                    return Err(FrameworkError(format!(
                        "different queue sort plugins for profile {:?}: {qs:?}, first: {first:?}",
                        fw.profile_name
                    )))
                }
                Some((_, first_args)) if *first_args != args => {
                    return Err(FrameworkError(format!(
                        "different queue sort plugin args for profile {:?}",
                        fw.profile_name
                    )))
                }
                Some(_) => {}
            }
            by_name.insert(fw.profile_name.clone(), i);
            frameworks.push(fw);
        }
        Ok(Profiles {
            frameworks,
            by_name,
            percentage_of_nodes_to_score: cfg.percentage_of_nodes_to_score.unwrap_or(0),
            opportunistic_batching: !cfg.disable_opportunistic_batching,
            generic_workload: cfg.generic_workload,
        })
    }

    /// Every profile's framework, in configuration order.
    pub fn frameworks(&self) -> &[Framework] {
        &self.frameworks
    }

    /// True when a profile schedules pods with this `schedulerName`.
    pub fn has_profile(&self, scheduler_name: &str) -> bool {
        self.by_name.contains_key(scheduler_name)
    }

    /// The framework for a pod's `schedulerName`.
    pub fn for_pod(&self, pod: &Pod) -> Option<&Framework> {
        self.by_name
            .get(&pod.scheduler_name)
            .map(|&i| &self.frameworks[i])
    }

    /// Sends every profile's extension-point and plugin durations to
    /// `recorder` (the live scheduler's metrics).
    pub fn set_recorder(&mut self, recorder: crate::metrics::Recorder) {
        for fw in &mut self.frameworks {
            fw.recorder = Some(recorder.clone());
        }
    }
}

/// The PreEnqueue verdict (upstream's `RunPreEnqueuePlugins`): the first
/// plugin's rejection message, if any plugin keeps the pod out of the
/// active queue.
pub fn pre_enqueue_rejection(
    fw: &Framework,
    pod: &Pod,
    dra: Option<&rkube_model::dra::Dra>,
) -> Option<String> {
    let ctx = crate::pod_group::EnqueueContext {
        dra,
        pod_groups: None,
    };
    pre_enqueue_rejection_in(fw, pod, &ctx)
}

/// [`pre_enqueue_rejection`] with everything the host knows (pod groups
/// included).
pub fn pre_enqueue_rejection_in(
    fw: &Framework,
    pod: &Pod,
    ctx: &crate::pod_group::EnqueueContext<'_>,
) -> Option<String> {
    fw.plugins(Point::PreEnqueue).iter().find_map(|p| {
        let s = p
            .as_pre_enqueue()
            .expect("framework checked")
            .pre_enqueue(pod, ctx);
        (!s.is_success()).then(|| s.message())
    })
}
