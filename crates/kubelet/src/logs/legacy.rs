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

/// Links `dir/<name>` to `target` when `target` exists (upstream does not
/// make a dangling link); failures are logged, as upstream's.
pub fn create(dir: &Path, name: &str, target: &Path) {
    if std::fs::symlink_metadata(target).is_err() {
        return;
    }
    let link = dir.join(name);
    if let Err(e) = std::fs::create_dir_all(dir).and_then(|()| {
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(target, &link)
    }) {
        tracing::error!(path = %link.display(), error = %e, "Failed to create legacy symbolic link");
    }
}

/// Removes the link of container `id` (any name with `-<id>.log`).
pub fn remove(dir: &Path, id: &str) {
    let tail = format!("-{id}{SUFFIX}");
    for link in links(dir) {
        if link
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.ends_with(&tail))
        {
            let _ = std::fs::remove_file(&link);
        }
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

/// The links of `dir` whose target is gone, with the container id each
/// names (the garbage collector asks the runtime before removing one).
pub fn dangling(dir: &Path) -> Vec<(PathBuf, Option<String>)> {
    links(dir)
        .into_iter()
        .filter(|l| std::fs::metadata(l).is_err() && std::fs::symlink_metadata(l).is_ok())
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
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("0.log");
        let links = dir.join("containers");
        create(&links, "p_ns_c-id1.log", &dir.join("missing.log"));
        assert!(super::links(&links).is_empty(), "no dangling link is made");
        std::fs::write(&target, "x").unwrap();
        create(&links, "p_ns_c-id1.log", &target);
        assert_eq!(
            std::fs::read_link(links.join("p_ns_c-id1.log")).unwrap(),
            target
        );
        assert!(dangling(&links).is_empty());
        std::fs::remove_file(&target).unwrap();
        assert_eq!(
            dangling(&links),
            vec![(links.join("p_ns_c-id1.log"), Some("id1".to_string()))]
        );
        remove(&links, "id1");
        assert!(super::links(&links).is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
