//! DefaultPreemption (PostFilter).

use std::sync::Arc;

use rkube_framework::{
    CycleState, NodeToStatus, Plugin, PostFilterPlugin, PostFilterResult, Snapshot, Status,
};
use rkube_model::Pod;

/// Upstream name.
pub const NAME: &str = "DefaultPreemption";

/// The plugin.
pub struct DefaultPreemption;

/// Builds the plugin.
pub fn new(_args: &serde_json::Value, _path: &str) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(DefaultPreemption))
}

impl Plugin for DefaultPreemption {
    fn name(&self) -> &'static str {
        NAME
    }
    fn as_post_filter(&self) -> Option<&dyn PostFilterPlugin> {
        Some(self)
    }
}

impl PostFilterPlugin for DefaultPreemption {
    fn post_filter(
        &self,
        _: &CycleState,
        _: &Pod,
        _: &Snapshot,
        _: &NodeToStatus,
    ) -> PostFilterResult {
        PostFilterResult {
            nominated_node: None,
            victims: Vec::new(),
            status: Status::with_reasons(rkube_framework::Code::Unschedulable, Vec::new()),
        }
    }
}
