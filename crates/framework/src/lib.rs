//! rkube's scheduling framework: upstream kube-scheduler's extension points
//! as Rust traits, the per-cycle state, the node snapshot, the scheduling
//! algorithm and the FailedScheduling diagnosis. Pure: no files, no network,
//! no async — the offline simulator and the live scheduler drive the same code.

pub mod batch;
pub mod binding;
pub mod cycle_state;
pub mod diagnosis;
pub mod events;
pub mod explain;
pub mod extension_points;
pub mod failure;
pub mod framework;
pub mod host;
pub use rkube_util::fast_hash;
pub mod in_memory;
pub mod metrics;
pub mod node_info;
pub mod nominator;
pub mod plugin;
pub mod pod_group;
pub mod pod_group_cycle;
pub mod pod_group_post_filter;
pub mod profiles;
pub mod schedule_one;
mod score_memo;
pub mod snapshot;
mod sorted_nodes;
pub mod status;
pub mod waiting;

pub use batch::{Batch, BatchClock, BatchStats, SignPlugin, Signature, Signed};
pub use cycle_state::CycleState;
pub use diagnosis::{fit_error_message, Diagnosis, NodeToStatus};
pub use events::{
    ActionType, ClusterEvent, ClusterEventWithHint, EventObject, EventResource, HintContext,
    HintResult, QueueingHint, QueueingHintFn, QueueingHintMap,
};
pub use explain::{explain, Explanation};
pub use extension_points::FrameworkHandle;
pub use failure::Failure;
pub use framework::{Factory, Framework, FrameworkError, Point, Registry};
pub use metrics::{MetricsRecorder, Recorder};
pub use node_info::{HostPortInfo, ImageStateSummary, NodeInfo};
pub use nominator::Nominator;
pub use plugin::*;
pub use pod_group::{EnqueueContext, GangPermit, PlacementProgress, PodGroupStates};
pub use profiles::{pre_enqueue_rejection, pre_enqueue_rejection_in, Profiles};
pub use schedule_one::{Outcome, Scheduler};
pub use snapshot::Snapshot;
pub use status::{Code, Reasons, Status};
pub use waiting::{WaitingPod, WaitingPods};
