//! DefaultPreemption (PostFilter): when no node fits, find nodes where
//! evicting lower-priority pods would let the pod fit.
//!
//! This version decides *whether* preemption can help and reports it with
//! upstream's messages ("Preemption is not helpful for scheduling", "No
//! preemption victims found for incoming pod", "not eligible due to
//! preemptionPolicy=Never."). Choosing victims and nominating a node is not
//! simulated yet: when preemption would help, the pod is reported as such.

use std::collections::BTreeMap;
use std::sync::Arc;

use rkube_framework::{
    fit_error_message, Code, CycleState, Diagnosis, NodeInfo, NodeToStatus, Plugin,
    PostFilterPlugin, PostFilterResult, Snapshot, Status,
};
use rkube_model::Pod;

/// Upstream name.
pub const NAME: &str = "DefaultPreemption";

/// The plugin.
pub struct DefaultPreemption;

/// Builds the plugin (args are validated by the config crate).
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

fn result(code: Code, msg: String) -> PostFilterResult {
    PostFilterResult {
        nominated_node: None,
        victims: Vec::new(),
        status: Status::new(code, format!("preemption: {msg}")),
    }
}

impl PostFilterPlugin for DefaultPreemption {
    fn post_filter(
        &self,
        _: &CycleState,
        pod: &Pod,
        snapshot: &Snapshot,
        statuses: &NodeToStatus,
        filters: &dyn Fn(&NodeInfo) -> Status,
    ) -> PostFilterResult {
        if pod.preemption_never {
            return result(
                Code::Unschedulable,
                "not eligible due to preemptionPolicy=Never.".into(),
            );
        }
        // Nodes whose rejection preemption might resolve.
        let potential: Vec<&NodeInfo> = snapshot
            .nodes
            .iter()
            .filter(|n| {
                statuses
                    .nodes
                    .get(n.name())
                    .unwrap_or(&statuses.absent)
                    .code
                    == Code::Unschedulable
            })
            .collect();
        let mut dry_run: BTreeMap<String, Status> = BTreeMap::new();
        let mut helps = false;
        for node in potential {
            let mut trimmed = node.clone();
            let lower: Vec<String> = node
                .pods
                .iter()
                .filter(|p| p.priority < pod.priority)
                .map(|p| p.uid.clone())
                .collect();
            for uid in &lower {
                trimmed.remove_pod(uid);
            }
            if !lower.is_empty() && filters(&trimmed).is_success() {
                helps = true;
            } else {
                dry_run.insert(
                    node.name().to_string(),
                    Status::new(
                        Code::UnschedulableAndUnresolvable,
                        "No preemption victims found for incoming pod",
                    ),
                );
            }
        }
        if helps {
            return result(
                Code::Unschedulable,
                "evicting lower-priority pods would make the pod fit; rkube does not simulate victim selection yet".into(),
            );
        }
        let d = Diagnosis {
            node_to_status: NodeToStatus {
                nodes: dry_run,
                absent: Status::new(
                    Code::UnschedulableAndUnresolvable,
                    "Preemption is not helpful for scheduling",
                ),
            },
            ..Default::default()
        };
        result(Code::Unschedulable, fit_error_message(snapshot.len(), &d))
    }
}
