//! The node's images as `status.images` reports them (upstream's image
//! cache and `Images` status setter): the runtime's list is read every
//! [`REFRESH`], sorted largest first (ties by id, descending), cut to
//! `nodeStatusMaxImages` (-1: no cap), and each image named by its repo
//! digests then its tags, at most [`MAX_NAMES`] names.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::ContainerImage;
use rkube_cri::{v1, CriClient};

/// How often the runtime's image list is read (upstream's 30 s).
pub const REFRESH: Duration = Duration::from_secs(30);
/// Names reported per image (`MaxNamesPerImageInNodeStatus`).
pub const MAX_NAMES: usize = 5;

/// `status.images` from the runtime's `images`, at most `max` of them
/// (`max < 0`: all). `None` when there are none to report.
pub fn node_images(mut images: Vec<v1::Image>, max: i32) -> Option<Vec<ContainerImage>> {
    images.sort_by(|a, b| b.size.cmp(&a.size).then_with(|| b.id.cmp(&a.id)));
    if max >= 0 {
        images.truncate(max as usize);
    }
    let out: Vec<ContainerImage> = images
        .into_iter()
        .map(|i| {
            let mut names = i.repo_digests;
            names.extend(i.repo_tags);
            names.truncate(MAX_NAMES);
            ContainerImage {
                names: Some(names),
                size_bytes: Some(i.size.min(i64::MAX as u64) as i64),
            }
        })
        .collect();
    (!out.is_empty()).then_some(out)
}

/// The latest image list, shared with the node status loop.
#[derive(Debug, Default)]
pub struct ImageList(RwLock<Option<Vec<ContainerImage>>>);

impl ImageList {
    /// What `status.images` reports now.
    pub fn get(&self) -> Option<Vec<ContainerImage>> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set(&self, images: Option<Vec<ContainerImage>>) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = images;
    }
}

/// Keeps `list` at the runtime's images, read every [`REFRESH`] (a failed
/// read keeps the last list, as upstream's cache does).
pub async fn refresh(cri: CriClient, list: Arc<ImageList>, max: i32) {
    loop {
        match cri.list_images(None).await {
            Ok(images) => list.set(node_images(images, max)),
            Err(e) => tracing::info!(error = %e, "failed to update the image list"),
        }
        tokio::time::sleep(REFRESH).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(id: &str, size: u64, tags: &[&str], digests: &[&str]) -> v1::Image {
        v1::Image {
            id: id.into(),
            size,
            repo_tags: tags.iter().map(|s| s.to_string()).collect(),
            repo_digests: digests.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    fn names(l: &[ContainerImage]) -> Vec<Vec<String>> {
        l.iter().map(|i| i.names.clone().unwrap()).collect()
    }

    #[test]
    fn largest_first_cut_to_the_cap_digests_before_tags() {
        let list = vec![
            image("sha256:a", 10, &["a:1"], &["a@sha256:1"]),
            image("sha256:b", 300, &["b:1", "b:2"], &[]),
            image("sha256:c", 300, &["c:1"], &[]),
            image("sha256:d", 20, &[], &["d@sha256:4"]),
        ];
        let all = node_images(list.clone(), -1).unwrap();
        // Equal sizes: the larger id first.
        assert_eq!(
            names(&all),
            vec![
                vec!["c:1".to_string()],
                vec!["b:1".into(), "b:2".into()],
                vec!["d@sha256:4".into()],
                vec!["a@sha256:1".into(), "a:1".into()],
            ]
        );
        assert_eq!(all[0].size_bytes, Some(300));
        let two = node_images(list.clone(), 2).unwrap();
        assert_eq!(two.len(), 2);
        assert_eq!(node_images(list, 0), None);
        assert_eq!(node_images(vec![], 50), None);
    }

    #[test]
    fn at_most_five_names_per_image() {
        let tags: Vec<String> = (0..4).map(|i| format!("x:{i}")).collect();
        let tags: Vec<&str> = tags.iter().map(String::as_str).collect();
        let one = node_images(
            vec![image("i", 1, &tags, &["x@sha256:1", "x@sha256:2"])],
            50,
        )
        .unwrap();
        assert_eq!(
            names(&one)[0],
            vec!["x@sha256:1", "x@sha256:2", "x:0", "x:1", "x:2"]
        );
    }
}
