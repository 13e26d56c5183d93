//! Which images to remove: upstream's image garbage collection manager
//! (`pkg/kubelet/images/image_gc_manager.go`), pure.
//!
//! Every image the runtime lists gets a record: when it was first seen and
//! when a container (running or not yet removed) last used it. Images in
//! use and pinned images (the runtime pins its sandbox image) are never
//! candidates; the others go least recently used first (then first
//! detected). When the image filesystem is at or above the high threshold,
//! candidates are removed until usage is back at the low threshold,
//! skipping images first seen less than `imageMinimumGCAge` ago; with
//! `imageMaximumGCAge` set, images unused that long go whatever the disk
//! usage (once the kubelet itself has run that long).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// The image GC settings of the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// `imageGCHighThresholdPercent` (default 85).
    pub high_threshold_percent: i32,
    /// `imageGCLowThresholdPercent` (default 80).
    pub low_threshold_percent: i32,
    /// `imageMinimumGCAge` (default 2m).
    pub min_age: Duration,
    /// `imageMaximumGCAge` (default 0: off).
    pub max_age: Duration,
}

impl Policy {
    /// Upstream stubs the image GC out when nothing could trigger it.
    pub fn disabled(&self) -> bool {
        self.high_threshold_percent == 100 && self.max_age.is_zero()
    }
}

/// An image as the runtime lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageInfo {
    /// Image id (`sha256:...`).
    pub id: String,
    /// Size in bytes.
    pub size: u64,
    /// Pinned by the runtime: never removed.
    pub pinned: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Record {
    first_detected: i64,
    /// Zero when never seen in use (upstream's zero `time.Time`).
    last_used: i64,
    size: u64,
    pinned: bool,
}

/// A removal candidate, in eviction order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// Image id.
    pub id: String,
    /// Size in bytes.
    pub size: u64,
    /// When first seen (ns since the epoch).
    pub first_detected: i64,
    /// When last used (ns since the epoch; 0: never).
    pub last_used: i64,
}

/// The records of the images on the node (upstream's `imageRecords`).
#[derive(Debug, Default)]
pub struct ImageRecords {
    records: HashMap<String, Record>,
}

impl ImageRecords {
    /// Updates the records from the runtime's images and the ids the
    /// containers use: new images first seen at `detect_time`, images in
    /// use last used at `now`, vanished images forgotten.
    pub fn detect(
        &mut self,
        images: &[ImageInfo],
        in_use: &HashSet<String>,
        detect_time: i64,
        now: i64,
    ) {
        let mut current = HashSet::new();
        for i in images {
            current.insert(i.id.as_str());
            let r = self.records.entry(i.id.clone()).or_insert(Record {
                first_detected: detect_time,
                last_used: 0,
                size: 0,
                pinned: false,
            });
            if in_use.contains(&i.id) {
                r.last_used = now;
            }
            r.size = i.size;
            r.pinned = i.pinned;
        }
        self.records.retain(|id, _| current.contains(id.as_str()));
    }

    /// The unused, unpinned images, least recently used first (then first
    /// detected), as upstream's `imagesInEvictionOrder`.
    pub fn eviction_order(&self, in_use: &HashSet<String>) -> Vec<Candidate> {
        let mut out: Vec<Candidate> = self
            .records
            .iter()
            .filter(|(id, r)| !in_use.contains(*id) && !r.pinned)
            .map(|(id, r)| Candidate {
                id: id.clone(),
                size: r.size,
                first_detected: r.first_detected,
                last_used: r.last_used,
            })
            .collect();
        out.sort_by(|a, b| {
            (a.last_used, a.first_detected, &a.id).cmp(&(b.last_used, b.first_detected, &b.id))
        });
        out
    }

    /// Forgets a removed image.
    pub fn forget(&mut self, id: &str) {
        self.records.remove(id);
    }

    /// Number of images recorded.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// True when no image is recorded.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}

fn nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// The candidates unused for longer than `imageMaximumGCAge` at
/// `free_time`; none until the kubelet (its GC, begun at `began_gc`) has
/// itself run that long.
pub fn too_old<'a>(
    candidates: &'a [Candidate],
    free_time: i64,
    began_gc: i64,
    policy: &Policy,
) -> Vec<&'a Candidate> {
    let max = nanos(policy.max_age);
    if max == 0 || free_time.saturating_sub(began_gc) <= max {
        return Vec::new();
    }
    candidates
        .iter()
        .filter(|c| free_time.saturating_sub(c.last_used) > max)
        .collect()
}

/// Disk usage of the image filesystem against the thresholds: `Some((usage
/// percent, bytes to free))` when usage is at or above the high threshold.
pub fn over_threshold(capacity: u64, available: u64, policy: &Policy) -> Option<(i64, i64)> {
    let capacity = i64::try_from(capacity).ok().filter(|c| *c > 0)?;
    let available = i64::try_from(available).unwrap_or(i64::MAX).min(capacity);
    let usage = 100 - i64::try_from(i128::from(available) * 100 / i128::from(capacity)).ok()?;
    if usage < i64::from(policy.high_threshold_percent) {
        return None;
    }
    let target = i128::from(capacity) * i128::from(100 - policy.low_threshold_percent) / 100;
    let amount = i64::try_from(target - i128::from(available)).unwrap_or(i64::MAX);
    Some((usage, amount))
}

/// The candidates upstream's `freeSpace` would try at `free_time`, in
/// order: images used at or after `free_time` and images first detected
/// less than `imageMinimumGCAge` ago are skipped. The caller removes them
/// one by one and stops once `bytes_to_free` were freed.
pub fn space_candidates<'a>(
    candidates: &'a [Candidate],
    free_time: i64,
    policy: &Policy,
) -> impl Iterator<Item = &'a Candidate> {
    let min = nanos(policy.min_age);
    candidates.iter().filter(move |c| {
        c.last_used < free_time && free_time.saturating_sub(c.first_detected) >= min
    })
}

/// Upstream's size format in the `FreeDiskSpaceFailed` message
/// (`formatSize`: binary units up to TiB, one decimal).
pub fn format_size(bytes: i64) -> String {
    const KIB: f64 = 1024.0;
    let v = bytes as f64;
    if v < KIB {
        return format!("{bytes} B");
    }
    let (div, unit) = if v < KIB * KIB {
        (KIB, "KiB")
    } else if v < KIB * KIB * KIB {
        (KIB * KIB, "MiB")
    } else if v < KIB * KIB * KIB * KIB {
        (KIB * KIB * KIB, "GiB")
    } else {
        (KIB * KIB * KIB * KIB, "TiB")
    };
    format!("{:.1} {unit}", v / div)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = 60_000_000_000;

    fn img(id: &str, size: u64) -> ImageInfo {
        ImageInfo {
            id: id.into(),
            size,
            pinned: false,
        }
    }

    fn used(ids: &[&str]) -> HashSet<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    fn policy() -> Policy {
        Policy {
            high_threshold_percent: 90,
            low_threshold_percent: 80,
            min_age: Duration::ZERO,
            max_age: Duration::ZERO,
        }
    }

    #[test]
    fn detect_tracks_first_seen_and_last_use() {
        let mut r = ImageRecords::default();
        r.detect(&[img("a", 1), img("b", 2)], &used(&["a"]), 0, MIN);
        r.detect(
            &[img("a", 1), img("b", 2), img("c", 3)],
            &used(&[]),
            5 * MIN,
            5 * MIN,
        );
        let order = r.eviction_order(&used(&[]));
        // b never used (last use 0) goes before c (never used, seen later),
        // then a (used at 1 min).
        let ids: Vec<&str> = order.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["b", "c", "a"]);
        assert_eq!(order[2].last_used, MIN);
        assert_eq!(order[1].first_detected, 5 * MIN);
        // A vanished image is forgotten.
        r.detect(&[img("a", 1)], &used(&[]), 6 * MIN, 6 * MIN);
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn images_in_use_and_pinned_are_never_candidates() {
        let mut r = ImageRecords::default();
        let mut pause = img("pause", 1);
        pause.pinned = true;
        r.detect(&[img("a", 1), img("b", 1), pause], &used(&["a"]), 0, 0);
        let ids: Vec<String> = r
            .eviction_order(&used(&["a"]))
            .into_iter()
            .map(|c| c.id)
            .collect();
        assert_eq!(ids, ["b"]);
    }

    #[test]
    fn least_recently_used_first() {
        // Upstream's TestFreeSpaceRemoveByLeastRecentlyUsed: the image used
        // longer ago goes first.
        let mut r = ImageRecords::default();
        r.detect(
            &[img("old", 1024), img("new", 2048)],
            &used(&["old", "new"]),
            0,
            MIN,
        );
        r.detect(
            &[img("old", 1024), img("new", 2048)],
            &used(&["new"]),
            2 * MIN,
            2 * MIN,
        );
        let order = r.eviction_order(&used(&[]));
        let first = space_candidates(&order, 3 * MIN, &policy()).next().unwrap();
        assert_eq!(first.id, "old");
    }

    #[test]
    fn minimum_age_protects_new_images() {
        let mut r = ImageRecords::default();
        r.detect(&[img("a", 1)], &used(&[]), 10 * MIN, 10 * MIN);
        let order = r.eviction_order(&used(&[]));
        let p = Policy {
            min_age: Duration::from_secs(120),
            ..policy()
        };
        assert_eq!(space_candidates(&order, 11 * MIN, &p).count(), 0);
        assert_eq!(space_candidates(&order, 12 * MIN, &p).count(), 1);
        // Used at the very time of the collection: skipped.
        let mut r = ImageRecords::default();
        r.detect(&[img("a", 1)], &used(&["a"]), 0, 10 * MIN);
        let order = r.eviction_order(&used(&[]));
        assert_eq!(space_candidates(&order, 10 * MIN, &policy()).count(), 0);
    }

    #[test]
    fn maximum_age() {
        let mut r = ImageRecords::default();
        r.detect(&[img("a", 1), img("b", 1)], &used(&["a"]), 0, 50 * MIN);
        let order = r.eviction_order(&used(&[]));
        let p = Policy {
            max_age: Duration::from_secs(3600),
            ..policy()
        };
        // The kubelet has not run an hour yet: nothing.
        assert!(too_old(&order, 59 * MIN, 0, &p).is_empty());
        // b was never used; a was used at 50 min.
        let old: Vec<&str> = too_old(&order, 61 * MIN, 0, &p)
            .iter()
            .map(|c| c.id.as_str())
            .collect();
        assert_eq!(old, ["b"]);
        let old = too_old(&order, 111 * MIN, 0, &p);
        assert_eq!(old.len(), 2);
        assert!(too_old(&order, 200 * MIN, 0, &policy()).is_empty());
    }

    #[test]
    fn thresholds_as_upstream() {
        // Upstream's TestGarbageCollectBelowLowThreshold / ...CadvisorFailure
        // arithmetic: 95 % used of 1000 with high 90, low 80 frees down to
        // 80 % used: 1000*20/100 - 50 = 150 bytes.
        assert_eq!(over_threshold(1000, 50, &policy()), Some((95, 150)));
        // Exactly at the high threshold counts.
        assert_eq!(over_threshold(1000, 100, &policy()), Some((90, 100)));
        // Integer percent, as upstream: 10.1 % available is 90 % used.
        assert_eq!(over_threshold(1000, 101, &policy()), Some((90, 99)));
        assert_eq!(over_threshold(1000, 110, &policy()), None);
        // Capacity 0 is an error upstream, never a division here.
        assert_eq!(over_threshold(0, 0, &policy()), None);
        // Available above capacity is clamped.
        assert_eq!(over_threshold(1000, 5000, &policy()), None);
        let never = Policy {
            high_threshold_percent: 100,
            ..policy()
        };
        assert!(never.disabled());
        assert_eq!(over_threshold(1000, 0, &never), Some((100, 200)));
    }

    #[test]
    fn sizes_as_upstream_formats_them() {
        assert_eq!(format_size(512), "512 B");
        assert_eq!(format_size(10 * 1024 * 1024 * 1024), "10.0 GiB");
        assert_eq!(format_size(1536), "1.5 KiB");
        assert_eq!(format_size(3 << 50), "3072.0 TiB");
    }
}
