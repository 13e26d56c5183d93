//! The `/var/log/containers` links upstream's kubelet keeps for log agents
//! (`legacyLogSymlink` in `kuberuntime_container.go`): one symbolic link a
//! container, `<pod>_<namespace>_<container>-<container id>.log` (cut to
//! ext4's 255 bytes), to the container's CRI log file under the pod log
//! directory; made once the container started (only if its log file is
//! there), removed with the container, and links left dangling removed by
//! the container garbage collector (when the runtime no longer reports
//! their container running).

use std::path::{Path, PathBuf};

/// Upstream's `legacyContainerLogsDir`.
pub const DIR: &str = "/var/log/containers";
const SUFFIX: &str = ".log";
const EXT4_MAX_FILE_NAME: usize = 255;

/// The link's name for a container (upstream's `logSymlink`).
pub fn link_name(pod: &str, namespace: &str, container: &str, id: &str) -> String {
    let mut name = format!("{pod}_{namespace}_{container}-{id}");
    let max = EXT4_MAX_FILE_NAME - SUFFIX.len();
    if name.len() > max {
        let mut cut = max;
        while !name.is_char_boundary(cut) {
            cut -= 1;
        }
        name.truncate(cut);
    }
    name + SUFFIX
}

/// The container id a link names (upstream's
/// `getContainerIDFromLegacyLogSymlink`): what follows the last `-` before
/// `.log`.
pub fn container_id(link: &str) -> Option<&str> {
    let stem = link.strip_suffix(SUFFIX)?;
    let (_, id) = stem.rsplit_once('-')?;
    (!id.is_empty()).then_some(id)
}

/// A link name that stays one entry of the directory.
fn plain(name: &str) -> bool {
    !name.is_empty() && !name.contains('/') && name != "." && name != ".."
}

/// Links `dir/<name>` to `target` when `target` exists (upstream does not
/// make a dangling link); an existing entry is left alone (upstream's
/// `symlink` fails on it too). Failures are logged, as upstream's.
pub fn create(dir: &Path, name: &str, target: &Path) {
    if !plain(name) || std::fs::symlink_metadata(target).is_err() {
        return;
    }
    let link = dir.join(name);
    if let Err(e) =
        std::fs::create_dir_all(dir).and_then(|()| std::os::unix::fs::symlink(target, &link))
    {
        tracing::error!(path = %link.display(), error = %e, "Failed to create legacy symbolic link");
    }
}

/// Removes the link `dir/<name>` if it is one to a file under `logs`
/// (this kubelet's pod logs: another kubelet's links on the machine stay).
pub fn remove(dir: &Path, name: &str, logs: &Path) {
    if !plain(name) {
        return;
    }
    let link = dir.join(name);
    if std::fs::read_link(&link).is_ok_and(|t| t.starts_with(logs)) {
        let _ = std::fs::remove_file(&link);
    }
}

/// Every `*.log` entry of `dir`.
pub fn links(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "log"))
                .collect()
        })
        .unwrap_or_default()
}

/// The links of `dir` to files under `logs` (this kubelet's) whose target
/// is gone, with the container id each names (the garbage collector asks
/// the runtime before removing one).
pub fn dangling(dir: &Path, logs: &Path) -> Vec<(PathBuf, Option<String>)> {
    links(dir)
        .into_iter()
        .filter(|l| std::fs::metadata(l).is_err())
        .filter(|l| std::fs::read_link(l).is_ok_and(|t| t.starts_with(logs)))
        .map(|l| {
            let id = l
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(container_id)
                .map(String::from);
            (l, id)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_as_upstream() {
        assert_eq!(
            link_name("web-1", "default", "app", "0123abc"),
            "web-1_default_app-0123abc.log"
        );
        assert_eq!(
            container_id("web-1_default_app-0123abc.log"),
            Some("0123abc")
        );
        assert_eq!(
            container_id("web-1_default_my-app-0123abc.log"),
            Some("0123abc")
        );
        assert_eq!(container_id("nolog"), None);
        let long = link_name(&"p".repeat(200), "ns", &"c".repeat(60), &"f".repeat(64));
        assert_eq!(long.len(), 255);
        assert!(long.ends_with(".log"));
    }

    #[test]
    fn made_removed_and_found_dangling() {
        let dir = std::env::temp_dir().join(format!("rkube-legacy-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let logs = dir.join("pods");
        std::fs::create_dir_all(&logs).unwrap();
        let target = logs.join("0.log");
        let links = dir.join("containers");
        create(&links, "p_ns_c-id1.log", &logs.join("missing.log"));
        assert!(super::links(&links).is_empty(), "no dangling link is made");
        std::fs::write(&target, "x").unwrap();
        create(&links, "p_ns_c-id1.log", &target);
        assert_eq!(
            std::fs::read_link(links.join("p_ns_c-id1.log")).unwrap(),
            target
        );
        create(&links, "../escape.log", &target);
        assert!(
            !dir.join("escape.log").exists(),
            "a name stays in the directory"
        );
        // Another kubelet's link (to its own logs) is never this one's.
        let theirs = links.join("q_ns_c-id2.log");
        std::os::unix::fs::symlink(dir.join("elsewhere/0.log"), &theirs).unwrap();
        assert!(dangling(&links, &logs).is_empty());
        std::fs::remove_file(&target).unwrap();
        assert_eq!(
            dangling(&links, &logs),
            vec![(links.join("p_ns_c-id1.log"), Some("id1".to_string()))]
        );
        remove(&links, "q_ns_c-id2.log", &logs);
        assert!(theirs.symlink_metadata().is_ok(), "not under our logs");
        remove(&links, "p_ns_c-id1.log", &logs);
        assert!(links.join("p_ns_c-id1.log").symlink_metadata().is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
