//! ImageLocality: favours nodes that already have the pod's images, scaled by
//! how widely each image is spread across nodes (to avoid piling pods onto
//! the few nodes that have it), between 23MB and 1000MB per container.

use rkube_framework::{
    CycleState, NodeInfo, Plugin, PreScorePlugin, ScorePlugin, Snapshot, Status, MAX_NODE_SCORE,
};
use rkube_model::Pod;

/// Upstream name.
pub const NAME: &str = "ImageLocality";

const MB: i64 = 1024 * 1024;
const MIN_THRESHOLD: i64 = 23 * MB;
const MAX_CONTAINER_THRESHOLD: i64 = 1000 * MB;

/// The plugin.
pub struct ImageLocality;

struct TotalNodes(usize);

impl Plugin for ImageLocality {
    fn name(&self) -> &'static str {
        NAME
    }
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}

/// Appends `:latest` when the reference has no tag (upstream's `normalizedImageName`).
pub fn normalized_image_name(name: &str) -> String {
    let colon = name.rfind(':').map_or(-1, |i| i as isize);
    let slash = name.rfind('/').map_or(-1, |i| i as isize);
    if colon <= slash {
        format!("{name}:latest")
    } else {
        name.to_string()
    }
}

fn scaled_image_score(size: i64, num_nodes: usize, total: usize) -> i64 {
    let spread = num_nodes as f64 / total as f64;
    (size as f64 * spread) as i64
}

/// Upstream's `calculatePriority`.
pub fn calculate_priority(sum: i64, image_count: usize) -> i64 {
    let max_threshold = MAX_CONTAINER_THRESHOLD * image_count as i64;
    let sum = if sum < MIN_THRESHOLD {
        MIN_THRESHOLD
    } else if sum > max_threshold {
        max_threshold
    } else {
        sum
    };
    if max_threshold == MIN_THRESHOLD {
        return 0;
    }
    MAX_NODE_SCORE * (sum - MIN_THRESHOLD) / (max_threshold - MIN_THRESHOLD)
}

/// The raw score of a node for a pod, given the cluster's node count.
pub fn image_score(pod: &Pod, node: &NodeInfo, total_nodes: usize) -> i64 {
    let mut sum = 0;
    let mut count = 0;
    let images = pod
        .init_containers
        .iter()
        .chain(pod.containers.iter())
        .map(|c| c.image.as_str())
        .chain(pod.image_volumes.iter().map(|s| s.as_str()));
    for image in images {
        count += 1;
        if let Some(state) = node.image_states.get(&normalized_image_name(image)) {
            sum += scaled_image_score(state.size, state.num_nodes, total_nodes);
        }
    }
    calculate_priority(sum, count)
}

impl PreScorePlugin for ImageLocality {
    fn pre_score(
        &self,
        state: &mut CycleState,
        _: &Pod,
        _: &[&NodeInfo],
        snapshot: &Snapshot,
    ) -> Status {
        state.write(NAME, TotalNodes(snapshot.len()));
        Status::success()
    }
}

impl ScorePlugin for ImageLocality {
    fn score(&self, state: &CycleState, pod: &Pod, node: &NodeInfo) -> Result<i64, Status> {
        let total = state
            .read::<TotalNodes>(NAME)
            .map(|t| t.0)
            .ok_or_else(|| Status::error("ImageLocality: node count not computed"))?;
        Ok(image_score(pod, node, total.max(1)))
    }
}
