//! Garbage collection of dead containers, sandboxes and unused images, as
//! upstream's `StartGarbageCollection`: containers every minute
//! ([`containers`], `kuberuntime_gc.go`), images every five minutes
//! ([`images`], `image_gc_manager.go`). Both decide in pure functions; this
//! module lists what the runtime has, asks them, and removes.
//!
//! A removed container's log file goes with it (and its rotated files), as
//! upstream's `removeContainerLog`. Failures are logged and reported as
//! Node Events with upstream's reasons: `ContainerGCFailed`,
//! `ImageGCFailed` (only when image collection failed twice in a row, as
//! upstream), `FreeDiskSpaceFailed`, `InvalidDiskCapacity`.

pub mod containers;
pub mod images;

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rkube_cri::v1;
use rkube_cri::CriClient;

use crate::events::Recorder;
use crate::runtime::cri::spec::LABEL_POD_UID;
use crate::stats::StatsProvider;

/// Upstream's `ContainerGCPeriod`.
pub const CONTAINER_GC_PERIOD: Duration = Duration::from_secs(60);
/// Upstream's `ImageGCPeriod`.
pub const IMAGE_GC_PERIOD: Duration = Duration::from_secs(300);

/// The garbage collector of one node.
pub struct GarbageCollector {
    /// The runtime.
    pub cri: CriClient,
    /// The image filesystem's capacity and availability.
    pub stats: Arc<StatsProvider>,
    /// The node (Events are about it).
    pub node: String,
    /// Where Events go.
    pub events: Option<Recorder>,
    /// Dead containers kept.
    pub containers: containers::Policy,
    /// Image thresholds and ages.
    pub images: images::Policy,
    /// The image records (first seen, last used), shared by the periodic
    /// collection and the eviction manager's reclaim.
    pub records: tokio::sync::Mutex<images::ImageRecords>,
    /// When the collector started (ns; `imageMaximumGCAge` counts from it).
    pub began: i64,
    /// Which pods are terminated or evicted (from the pod workers).
    pub pods: Arc<crate::pods::worker::PodStates>,
}

fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .ok()
        .and_then(|d| i64::try_from(d.as_nanos()).ok())
        .unwrap_or(0)
}

/// `rpc error: ...` of a CRI call, as one line.
fn text(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Removes a container's log file and its rotated files
/// (`<path>.<timestamp>[.gz]`), never following a symlink.
fn remove_logs(path: &Path) {
    if path.as_os_str().is_empty() || !path.is_absolute() {
        return;
    }
    let _ = std::fs::remove_file(path);
    for f in crate::logs::manager::rotated_files(path).unwrap_or_default() {
        let _ = std::fs::remove_file(f);
    }
}

impl GarbageCollector {
    /// A collector with empty image records, begun now.
    pub fn new(
        cri: CriClient,
        stats: Arc<StatsProvider>,
        node: String,
        events: Option<Recorder>,
        containers: containers::Policy,
        images: images::Policy,
        pods: Arc<crate::pods::worker::PodStates>,
    ) -> GarbageCollector {
        GarbageCollector {
            cri,
            stats,
            node,
            events,
            containers,
            images,
            records: tokio::sync::Mutex::new(images::ImageRecords::default()),
            began: now_ns(),
            pods,
        }
    }

    /// Collects forever: containers every minute, images every five
    /// (unless the image policy can never trigger, as upstream: then the
    /// images are only watched, for the eviction manager's reclaim).
    pub async fn run(self: Arc<Self>) {
        tokio::join!(self.clone().image_loop(), self.container_loop());
    }

    async fn container_loop(self: Arc<Self>) {
        let me = self;
        let mut tick = tokio::time::interval(CONTAINER_GC_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            match me.collect_containers().await {
                Ok((c, s)) if c + s > 0 => {
                    tracing::info!(
                        containers = c,
                        sandboxes = s,
                        "container garbage collection removed dead containers"
                    )
                }
                Ok(_) => tracing::debug!("container garbage collection succeeded"),
                Err(e) => {
                    tracing::error!(error = %e, "Container garbage collection failed");
                    self_event(&me, "ContainerGCFailed", e);
                }
            }
        }
    }

    async fn image_loop(self: Arc<Self>) {
        let mut failed_before = false;
        let mut tick = tokio::time::interval(IMAGE_GC_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        if self.images.disabled() {
            tracing::info!("imageGCHighThresholdPercent is 100 and imageMaximumGCAge is 0: image garbage collection disabled");
            // Upstream's image manager still records the images (first
            // seen, last used) every five minutes.
            loop {
                tick.tick().await;
                let mut records = self.records.lock().await;
                if let Err(e) = self.detect(&mut records, now_ns()).await {
                    tracing::info!(error = %e, "Failed to monitor images");
                }
            }
        }
        loop {
            tick.tick().await;
            match self.collect_images().await {
                Ok(()) => {
                    if failed_before {
                        tracing::info!("Image garbage collection succeeded");
                    }
                    failed_before = false;
                }
                Err(e) => {
                    if failed_before {
                        tracing::error!(error = %e, "Image garbage collection failed multiple times in a row");
                        self_event(&self, "ImageGCFailed", e);
                    } else {
                        tracing::error!(error = %e, "Image garbage collection failed once. Stats initialization may not have completed yet");
                    }
                    failed_before = true;
                }
            }
        }
    }

    async fn all_containers(&self) -> Result<Vec<v1::Container>, String> {
        self.cri.list_containers(None).await.map_err(text)
    }

    /// One container collection: the numbers of containers and sandboxes
    /// removed.
    pub async fn collect_containers(&self) -> Result<(usize, usize), String> {
        self.collect_containers_of(false).await
    }

    /// Upstream's `DeleteAllUnusedContainers` (the eviction manager's
    /// reclaim): also every dead container of the terminated pods.
    pub async fn delete_all_unused_containers(&self) -> Result<(usize, usize), String> {
        self.collect_containers_of(true).await
    }

    /// Upstream's "Remove dead container log symlinks": a link whose log
    /// file is gone goes, unless its container still runs (its log was
    /// rotated, a new one comes).
    async fn remove_dangling_links(&self) {
        use rkube_cri::v1::ContainerState;
        let dirs = self.stats.dirs();
        for (link, id) in crate::logs::legacy::dangling(&dirs.legacy_links, &dirs.logs) {
            if let Some(id) = id {
                if let Ok(s) = self.cri.container_status(&id).await {
                    if s.state != ContainerState::ContainerExited as i32 {
                        continue;
                    }
                }
            }
            if let Err(e) = std::fs::remove_file(&link) {
                tracing::error!(path = %link.display(), error = %e, "Failed to remove container log dead symlink");
            }
        }
    }

    async fn collect_containers_of(&self, terminated_too: bool) -> Result<(usize, usize), String> {
        // Evicted pods' content goes whole; with `terminated_too`, that of
        // every terminated pod (upstream's evictNonDeletedPods). Pods the
        // API no longer has are removed whole by their workers (and at
        // start).
        let pods = self.pods.clone();
        let removable = move |uid: &str| {
            pods.content_removable(uid) || (terminated_too && pods.runtime_removable(uid))
        };
        let listed = self.all_containers().await?;
        let infos: Vec<containers::ContainerInfo> = listed
            .iter()
            .map(|c| containers::ContainerInfo {
                id: c.id.clone(),
                pod_uid: c.labels.get(LABEL_POD_UID).cloned().unwrap_or_default(),
                name: c
                    .metadata
                    .as_ref()
                    .map(|m| m.name.clone())
                    .unwrap_or_default(),
                sandbox_id: c.pod_sandbox_id.clone(),
                created_ns: c.created_at,
                running: c.state == v1::ContainerState::ContainerRunning as i32,
                unknown: c.state == v1::ContainerState::ContainerUnknown as i32,
            })
            .collect();
        let removals =
            containers::containers_to_remove(&infos, now_ns(), self.containers, true, &removable);
        let mut errors = Vec::new();
        let mut removed = HashSet::new();
        for r in &removals {
            if r.stop_first {
                if let Err(e) = self.cri.stop_container(&r.id, Duration::ZERO).await {
                    tracing::error!(container = %r.id, error = %e, "Failed to stop container");
                    continue;
                }
            }
            let (log, link) = match self.cri.container_status(&r.id).await {
                Ok(s) => {
                    let label = |k: &str| s.labels.get(k).cloned().unwrap_or_default();
                    let link = crate::logs::legacy::link_name(
                        &label("io.kubernetes.pod.name"),
                        &label("io.kubernetes.pod.namespace"),
                        &label("io.kubernetes.container.name"),
                        &r.id,
                    );
                    (s.log_path, Some(link))
                }
                Err(e) if e.is_not_found() => {
                    removed.insert(r.id.clone());
                    continue;
                }
                Err(_) => (String::new(), None),
            };
            remove_logs(Path::new(&log));
            if let Some(name) = link {
                let dirs = self.stats.dirs();
                crate::logs::legacy::remove(&dirs.legacy_links, &name, &dirs.logs);
            }
            match self.cri.remove_container(&r.id).await {
                Ok(()) => {
                    removed.insert(r.id.clone());
                }
                Err(e) if e.is_not_found() => {
                    removed.insert(r.id.clone());
                }
                Err(e) => {
                    tracing::error!(container = %r.id, error = %e, "Failed to remove container");
                    errors.push(format!("removing container {}: {e}", r.id));
                }
            }
        }
        self.remove_dangling_links().await;
        let remaining: Vec<containers::ContainerInfo> = infos
            .into_iter()
            .filter(|c| !removed.contains(&c.id))
            .collect();
        let sandboxes: Vec<containers::SandboxInfo> = self
            .cri
            .list_pod_sandboxes(None)
            .await
            .map_err(text)?
            .into_iter()
            .map(|s| containers::SandboxInfo {
                pod_uid: s
                    .metadata
                    .as_ref()
                    .map(|m| m.uid.clone())
                    .unwrap_or_default(),
                created_ns: s.created_at,
                ready: s.state == v1::PodSandboxState::SandboxReady as i32,
                id: s.id,
            })
            .collect();
        let mut sandboxes_removed = 0;
        for id in containers::sandboxes_to_remove(&sandboxes, &remaining, &removable) {
            if let Err(e) = self.cri.stop_pod_sandbox(&id).await {
                if !e.is_not_found() {
                    tracing::error!(sandbox = %id, error = %e, "Failed to stop sandbox before removing");
                }
            }
            match self.cri.remove_pod_sandbox(&id).await {
                Ok(()) => sandboxes_removed += 1,
                Err(e) if e.is_not_found() => {}
                Err(e) => {
                    tracing::error!(sandbox = %id, error = %e, "Failed to remove sandbox");
                    errors.push(format!("removing sandbox {id}: {e}"));
                }
            }
        }
        if errors.is_empty() {
            Ok((removed.len(), sandboxes_removed))
        } else {
            Err(errors.join("; "))
        }
    }

    async fn remove_image(
        &self,
        records: &mut images::ImageRecords,
        c: &images::Candidate,
    ) -> Result<(), String> {
        tracing::info!(image_id = %c.id, size = c.size, "Removing image to free bytes");
        self.cri.remove_image(&c.id).await.map_err(text)?;
        records.forget(&c.id);
        Ok(())
    }

    /// The image records updated from the runtime at `free_time`, and the
    /// unused images in eviction order.
    async fn detect(
        &self,
        records: &mut images::ImageRecords,
        free_time: i64,
    ) -> Result<Vec<images::Candidate>, String> {
        let listed = self.cri.list_images(None).await.map_err(text)?;
        let in_use: HashSet<String> = self
            .all_containers()
            .await?
            .into_iter()
            .flat_map(|c| {
                let spec = c.image.map(|i| i.image).unwrap_or_default();
                [c.image_ref, spec]
            })
            .filter(|s| !s.is_empty())
            .collect();
        let infos: Vec<images::ImageInfo> = listed
            .into_iter()
            .map(|i| images::ImageInfo {
                id: i.id,
                size: i.size,
                pinned: i.pinned,
            })
            .collect();
        records.detect(&infos, &in_use, free_time, now_ns());
        Ok(records.eviction_order(&in_use))
    }

    /// Upstream's `DeleteUnusedImages` (the eviction manager's reclaim):
    /// every unused image that may go (`imageMinimumGCAge`), whatever the
    /// disk usage; the bytes freed.
    pub async fn delete_unused_images(&self) -> Result<u64, String> {
        tracing::info!("Attempting to delete unused images");
        let mut records = self.records.lock().await;
        let free_time = now_ns();
        let candidates = self.detect(&mut records, free_time).await?;
        let mut freed = 0u64;
        let mut errors = Vec::new();
        for c in images::space_candidates(&candidates, free_time, &self.images) {
            match self.remove_image(&mut records, c).await {
                Ok(()) => freed = freed.saturating_add(c.size),
                Err(e) => errors.push(e),
            }
        }
        if errors.is_empty() {
            Ok(freed)
        } else {
            Err(format!(
                "wanted to free all unused images, but freed {freed} bytes space with errors in image deletion: {}",
                errors.join(", ")
            ))
        }
    }

    /// One image collection (upstream's `GarbageCollect`).
    pub async fn collect_images(&self) -> Result<(), String> {
        let mut guard = self.records.lock().await;
        let records = &mut *guard;
        let began = self.began;
        let free_time = now_ns();
        let candidates = self.detect(records, free_time).await?;
        let mut gone = HashSet::new();
        let mut errors = Vec::new();
        for c in images::too_old(&candidates, free_time, began, &self.images) {
            match self.remove_image(records, c).await {
                Ok(()) => {
                    gone.insert(c.id.clone());
                }
                Err(e) => errors.push(e),
            }
        }
        if !errors.is_empty() {
            return Err(format!(
                "wanted to free images older than {:?}, encountered errors in image deletion: {}",
                self.images.max_age,
                errors.join(", ")
            ));
        }
        let summary = self.stats.summary_for_eviction().await.map_err(text)?;
        let fs = summary
            .node
            .runtime
            .as_ref()
            .and_then(|r| r.image_fs.as_ref())
            .ok_or("the image filesystem's usage is not known")?;
        let capacity = fs.capacity_bytes.unwrap_or(0);
        let available = fs.available_bytes.unwrap_or(0);
        if capacity == 0 {
            let msg = "invalid capacity 0 on image filesystem".to_string();
            self_event(self, "InvalidDiskCapacity", msg.clone());
            return Err(msg);
        }
        let Some((usage, amount)) = images::over_threshold(capacity, available, &self.images)
        else {
            return Ok(());
        };
        tracing::info!(
            usage,
            high_threshold = self.images.high_threshold_percent,
            amount_to_free = amount,
            low_threshold = self.images.low_threshold_percent,
            "Disk usage on image filesystem is over the high threshold, trying to free bytes down to the low threshold"
        );
        let mut freed: i64 = 0;
        let mut errors = Vec::new();
        let remaining: Vec<images::Candidate> = candidates
            .into_iter()
            .filter(|c| !gone.contains(&c.id))
            .collect();
        for c in images::space_candidates(&remaining, free_time, &self.images) {
            match self.remove_image(records, c).await {
                Ok(()) => freed = freed.saturating_add(i64::try_from(c.size).unwrap_or(i64::MAX)),
                Err(e) => {
                    errors.push(e);
                    continue;
                }
            }
            if freed >= amount {
                break;
            }
        }
        if !errors.is_empty() {
            return Err(format!(
                "wanted to free {amount} bytes, but freed {freed} bytes space with errors in image deletion: {}",
                errors.join(", ")
            ));
        }
        if freed < amount {
            let message = format!(
                "Insufficient free disk space on the node's image filesystem ({usage}% of {} used). Failed to free sufficient space by deleting unused images (freed {freed} bytes). Investigate disk usage, as it could be used by active images, logs, volumes, or other data.",
                images::format_size(i64::try_from(capacity).unwrap_or(i64::MAX))
            );
            self_event(self, "FreeDiskSpaceFailed", message.clone());
            return Err(message);
        }
        Ok(())
    }
}

fn self_event(gc: &GarbageCollector, reason: &str, message: String) {
    if let Some(r) = &gc.events {
        r.record_node(&gc.node, true, reason, message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_removed_containers_logs_go_with_it() {
        let dir = std::env::temp_dir().join(format!("rkube-gc-logs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("app")).unwrap();
        let log = dir.join("app/0.log");
        for f in [
            "app/0.log",
            "app/0.log.20261205-101010",
            "app/0.log.20261205-101011.gz",
            "app/1.log",
        ] {
            std::fs::write(dir.join(f), b"x").unwrap();
        }
        remove_logs(&log);
        let left: Vec<String> = std::fs::read_dir(dir.join("app"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left, ["1.log"]);
        // A relative or empty path removes nothing.
        remove_logs(Path::new("app/1.log"));
        remove_logs(Path::new(""));
        assert!(dir.join("app/1.log").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
