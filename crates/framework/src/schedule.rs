//! The scheduling algorithm's former single module, kept so that existing
//! paths (`rkube_framework::schedule::explain`, `schedule::Outcome`,
//! `schedule::run_pre_filter`, ...) still resolve. The code lives in
//! [`crate::algorithm`] (upstream's `schedule_one.go`), [`crate::run`]
//! (upstream's `framework/runtime/framework.go`) and
//! [`crate::explain`](mod@crate::explain).

pub use crate::algorithm::{num_feasible_nodes_to_find, Outcome, Scheduler};
pub use crate::explain::{explain, Explanation, FilterVerdict, NodeExplanation};
pub use crate::run::{
    run_filters, run_filters_with_nominated_pods, run_pre_filter, run_pre_filter_extension_add_pod,
    run_pre_filter_extension_remove_pod, run_score, FrameworkHandle, NodeScores, PluginScore,
};
