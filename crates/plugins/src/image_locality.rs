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

/// PreScore state: the cluster's node count and the pod's image names,
/// normalized once per cycle instead of once per node.
struct PreScoreState {
    total_nodes: usize,
    images: Vec<String>,
}

impl Plugin for ImageLocality {
    fn as_sign(&self) -> Option<&dyn rkube_framework::SignPlugin> {
        Some(self)
    }
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

/// The pod's images (init containers, containers, image volumes), normalized.
fn normalized_images(pod: &Pod) -> Vec<String> {
    pod.init_containers
        .iter()
        .chain(pod.containers.iter())
        .map(|c| c.image.as_str())
        .chain(pod.image_volumes.iter().map(|s| s.as_str()))
        .map(normalized_image_name)
        .collect()
}

/// The raw score of a node for a pod, given the cluster's node count.
pub fn image_score(pod: &Pod, node: &NodeInfo, total_nodes: usize) -> i64 {
    normalized_images_score(&normalized_images(pod), node, total_nodes)
}

/// [`image_score`] of already normalized image names.
fn normalized_images_score(images: &[String], node: &NodeInfo, total_nodes: usize) -> i64 {
    let mut sum = 0;
    for image in images {
        if let Some(state) = node.image_states.get(image) {
            sum += scaled_image_score(state.size, state.num_nodes, total_nodes);
        }
    }
    calculate_priority(sum, images.len())
}

impl PreScorePlugin for ImageLocality {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        _: &[&NodeInfo],
        snapshot: &Snapshot,
    ) -> Status {
        state.write(
            NAME,
            PreScoreState {
                total_nodes: snapshot.len(),
                images: normalized_images(pod),
            },
        );
        Status::success()
    }
}

impl ScorePlugin for ImageLocality {
    fn score(&self, state: &CycleState, _: &Pod, node: &NodeInfo) -> Result<i64, Status> {
        let s = state
            .read::<PreScoreState>(NAME)
            .ok_or_else(|| Status::error("ImageLocality: node count not computed"))?;
        Ok(normalized_images_score(
            &s.images,
            node,
            s.total_nodes.max(1),
        ))
    }
}

/// The batching signature of this plugin (OpportunisticBatching).
impl rkube_framework::SignPlugin for ImageLocality {
    fn sign(
        &self,
        pod: &rkube_model::Pod,
        _: &rkube_framework::Snapshot,
    ) -> rkube_framework::Signed {
        crate::signers::fragments([image_names(pod)])
    }
}

/// Image names of containers and init containers, normalized, unique,
/// sorted (image volumes are not part of it, as upstream's).
fn image_names(pod: &rkube_model::Pod) -> (&'static str, serde_json::Value) {
    let names: std::collections::BTreeSet<String> = pod
        .containers
        .iter()
        .chain(&pod.init_containers)
        .map(|c| normalized_image_name(&c.image))
        .collect();
    (crate::signers::IMAGE_NAMES, serde_json::json!(names))
}
