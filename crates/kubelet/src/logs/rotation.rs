//! What a log rotation does to a container's rotated files, as upstream's
//! container log manager (`pkg/kubelet/logs/container_log_manager.go`),
//! pure: the files `<log>.*` beside the live log are sorted out into those
//! to remove (temporary files, plain copies whose compressed copy exists,
//! and the oldest beyond `containerLogMaxFiles − 2`) and those to compress;
//! then the live log is renamed `<log>.<YYYYMMDD-hhmmss>` and the runtime
//! reopens it.

use std::path::{Path, PathBuf};

/// Suffix of compressed rotated logs.
pub const COMPRESS_SUFFIX: &str = ".gz";
/// Suffix of a compression in progress.
pub const TMP_SUFFIX: &str = ".tmp";

/// What to do with the rotated files before the live log is rotated.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Removed.
    pub remove: Vec<PathBuf>,
    /// Compressed to `<file>.gz` (then removed).
    pub compress: Vec<PathBuf>,
}

fn ends(p: &Path, suffix: &str) -> bool {
    p.as_os_str().to_string_lossy().ends_with(suffix)
}

/// `p` with `suffix` appended to its file name (`0.log` → `0.log.gz`).
pub fn with_suffix(p: &Path, suffix: &str) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// Upstream's `isInUse`: temporary files are not; compressed files are;
/// a plain file is unless its compressed copy exists (a compression that
/// was cut short before the plain file was removed).
fn in_use(p: &Path, all: &[PathBuf]) -> bool {
    if ends(p, TMP_SUFFIX) {
        return false;
    }
    if ends(p, COMPRESS_SUFFIX) {
        return true;
    }
    let gz = with_suffix(p, COMPRESS_SUFFIX);
    !all.contains(&gz)
}

/// The plan for the rotated files `rotated` (the `<log>.*` files) under
/// `containerLogMaxFiles` = `max_files`.
pub fn plan(rotated: &[PathBuf], max_files: i32) -> Plan {
    let mut out = Plan::default();
    let mut kept: Vec<PathBuf> = Vec::new();
    for p in rotated {
        if in_use(p, rotated) {
            kept.push(p.clone());
        } else {
            out.remove.push(p.clone());
        }
    }
    kept.sort();
    let max_rotated = usize::try_from(max_files.saturating_sub(2)).unwrap_or(0);
    let excess = kept.len().saturating_sub(max_rotated);
    out.remove.extend(kept.drain(..excess));
    out.compress = kept
        .into_iter()
        .filter(|p| !ends(p, COMPRESS_SUFFIX))
        .collect();
    out
}

/// The rotated name of `log` at local time `tm` (`<log>.YYYYMMDD-hhmmss`,
/// Go's `20060102-150405`).
pub fn rotated_name(log: &Path, tm: &libc::tm) -> PathBuf {
    with_suffix(
        log,
        &format!(
            ".{:04}{:02}{:02}-{:02}{:02}{:02}",
            tm.tm_year + 1900,
            tm.tm_mon + 1,
            tm.tm_mday,
            tm.tm_hour,
            tm.tm_min,
            tm.tm_sec
        ),
    )
}

/// The local time now, as Go's `time.Now()` formats it.
#[allow(unsafe_code)]
pub fn local_now() -> libc::tm {
    // SAFETY: time(NULL) and localtime_r write only into `tm`, which is a
    // plain C struct any bit pattern of which is valid.
    unsafe {
        let t = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&t, &mut tm);
        tm
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(names: &[&str]) -> Vec<PathBuf> {
        names.iter().map(|n| PathBuf::from("/l").join(n)).collect()
    }

    #[test]
    fn upstream_cleanup_unused_log() {
        // TestCleanupUnusedLog: the temporary file and the plain copy of a
        // compressed file go; the rest stays.
        let p = plan(
            &paths(&[
                "test-log-1",
                "test-log-1.tmp",
                "test-log-2",
                "test-log-2.gz",
            ]),
            10,
        );
        let mut removed = p.remove.clone();
        removed.sort();
        assert_eq!(removed, paths(&["test-log-1.tmp", "test-log-2"]));
        assert_eq!(p.compress, paths(&["test-log-1"]));
    }

    #[test]
    fn upstream_remove_excess_log() {
        // TestRemoveExcessLog: of four rotated files, max-2 newest stay.
        let logs = paths(&["test-log-3", "test-log-1", "test-log-2", "test-log-4"]);
        for (max, kept) in [
            (2, vec![]),
            (3, vec!["test-log-4"]),
            (
                6,
                vec!["test-log-1", "test-log-2", "test-log-3", "test-log-4"],
            ),
        ] {
            let p = plan(&logs, max);
            assert_eq!(p.compress, paths(&kept), "max {max}");
            assert_eq!(p.remove.len(), 4 - kept.len(), "max {max}");
        }
    }

    #[test]
    fn compressed_files_count_and_stay_compressed() {
        // containerLogMaxFiles 3: one rotated file besides the live log and
        // the one being rotated now; the oldest compressed one goes.
        let p = plan(
            &paths(&[
                "0.log.20261205-100000.gz",
                "0.log.20261205-100100.gz",
                "0.log.20261205-100200",
            ]),
            4,
        );
        assert_eq!(p.remove, paths(&["0.log.20261205-100000.gz"]));
        assert_eq!(p.compress, paths(&["0.log.20261205-100200"]));
    }

    #[test]
    fn rotated_names_as_go_formats_them() {
        let tm = libc::tm {
            tm_year: 126,
            tm_mon: 11,
            tm_mday: 5,
            tm_hour: 9,
            tm_min: 7,
            tm_sec: 3,
            tm_wday: 6,
            tm_yday: 338,
            tm_isdst: 0,
            tm_gmtoff: 0,
            tm_zone: std::ptr::null(),
        };
        assert_eq!(
            rotated_name(Path::new("/p/app/0.log"), &tm),
            PathBuf::from("/p/app/0.log.20261205-090703")
        );
    }
}
