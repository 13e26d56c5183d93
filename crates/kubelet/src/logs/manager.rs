//! The container log manager: every `containerLogMonitorInterval`, the
//! live log of each running container that reached `containerLogMaxSize`
//! is rotated ([`super::rotation`]) by up to `containerLogMaxWorkers`
//! workers at once: older rotated files pruned and compressed, the log
//! renamed with a timestamp, and the runtime asked to reopen it
//! (`ReopenContainerLog`; on failure the rename is undone). A running
//! container whose log file vanished gets it reopened.

use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use rkube_cri::v1;
use rkube_cri::CriClient;

use super::rotation::{self, with_suffix, COMPRESS_SUFFIX, TMP_SUFFIX};

/// The log rotation settings of the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// `containerLogMaxSize` in bytes.
    pub max_size: u64,
    /// `containerLogMaxFiles` (live log included).
    pub max_files: i32,
    /// `containerLogMaxWorkers`.
    pub workers: usize,
    /// `containerLogMonitorInterval`.
    pub interval: Duration,
}

/// Rotates the running containers' logs forever.
pub async fn run(cri: CriClient, policy: Policy) {
    tracing::info!(
        workers = policy.workers,
        monitor_period = ?policy.interval,
        "Initializing container log rotate workers"
    );
    let mut tick = tokio::time::interval(policy.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(e) = rotate_all(&cri, &policy).await {
            tracing::error!(error = %e, "Failed to rotate container logs");
        }
    }
}

/// One pass over the running containers.
pub async fn rotate_all(cri: &CriClient, policy: &Policy) -> Result<(), String> {
    let running = cri
        .list_containers(Some(v1::ContainerFilter {
            state: Some(v1::ContainerStateValue {
                state: v1::ContainerState::ContainerRunning as i32,
            }),
            ..Default::default()
        }))
        .await
        .map_err(|e| format!("failed to list containers: {e}"))?;
    futures::stream::iter(running)
        .for_each_concurrent(policy.workers.max(1), |c| async move {
            if let Err(e) = process(cri, policy, &c.id).await {
                tracing::error!(container_id = %c.id, error = %e, "Failed to rotate log for container");
            }
        })
        .await;
    Ok(())
}

async fn process(cri: &CriClient, policy: &Policy, id: &str) -> Result<(), String> {
    let status = cri
        .container_status(id)
        .await
        .map_err(|e| format!("failed to get container status: {e}"))?;
    let path = PathBuf::from(&status.log_path);
    if status.log_path.is_empty() || !path.is_absolute() {
        return Ok(());
    }
    let size = match std::fs::symlink_metadata(&path) {
        Ok(m) => m.len(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            cri.reopen_container_log(id).await.map_err(|e| {
                format!("Container log doesn't exist, reopen container log failed: {e}")
            })?;
            std::fs::symlink_metadata(&path)
                .map_err(|e| format!("failed to stat container log after reopen: {e}"))?
                .len()
        }
        Err(e) => {
            return Err(format!(
                "failed to stat container log {}: {e}",
                path.display()
            ))
        }
    };
    if size < policy.max_size {
        return Ok(());
    }
    let p = path.clone();
    let max_files = policy.max_files;
    tokio::task::spawn_blocking(move || prune_and_compress(&p, max_files))
        .await
        .map_err(|e| e.to_string())??;
    let rotated = rotation::rotated_name(&path, &rotation::local_now());
    std::fs::rename(&path, &rotated).map_err(|e| {
        format!(
            "failed to rotate log {:?} to {:?}: {e}",
            path.display(),
            rotated.display()
        )
    })?;
    if let Err(e) = cri.reopen_container_log(id).await {
        if let Err(re) = std::fs::rename(&rotated, &path) {
            tracing::error!(rotated_log = %rotated.display(), new_log = %path.display(), error = %re, "Failed to rename rotated log");
        }
        return Err(format!("failed to reopen container log {id:?}: {e}"));
    }
    Ok(())
}

/// The `<log>.*` files beside `log` (regular files only: no symlink is
/// followed or removed).
pub fn rotated_files(log: &Path) -> io::Result<Vec<PathBuf>> {
    let (Some(dir), Some(name)) = (log.parent(), log.file_name()) else {
        return Ok(Vec::new());
    };
    let prefix = format!("{}.", name.to_string_lossy());
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)?.flatten() {
        if e.file_name().to_string_lossy().starts_with(&prefix)
            && e.file_type().is_ok_and(|t| t.is_file())
        {
            out.push(e.path());
        }
    }
    Ok(out)
}

/// Removes and compresses the rotated files of `log` as [`rotation::plan`]
/// says.
fn prune_and_compress(log: &Path, max_files: i32) -> Result<(), String> {
    let files = rotated_files(log)
        .map_err(|e| format!("failed to list all log files of {}: {e}", log.display()))?;
    let plan = rotation::plan(&files, max_files);
    for f in &plan.remove {
        match std::fs::remove_file(f) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                return Err(format!("failed to remove log {:?}: {e}", f.display()));
            }
            _ => {}
        }
    }
    for f in &plan.compress {
        compress(f).map_err(|e| format!("failed to compress log {:?}: {e}", f.display()))?;
    }
    Ok(())
}

/// `file` → `file.gz` through `file.gz.tmp`, the plain file removed after.
fn compress(file: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let src = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(file)?;
    let mode = src.metadata()?.permissions().mode();
    let tmp = with_suffix(file, TMP_SUFFIX);
    let gz = with_suffix(file, COMPRESS_SUFFIX);
    let result = (|| {
        let out = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode & 0o7777)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        let mut w = flate2::write::GzEncoder::new(out, flate2::Compression::default());
        io::copy(&mut io::BufReader::new(&src), &mut w)?;
        w.finish()?.sync_all()?;
        std::fs::rename(&tmp, &gz)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result?;
    std::fs::remove_file(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn prune_and_compress_on_disk() {
        let dir = std::env::temp_dir().join(format!("rkube-logrot-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("0.log");
        std::fs::write(&log, b"live\n").unwrap();
        for (name, body) in [
            ("0.log.20261205-100000.gz", &b"x"[..]),
            ("0.log.20261205-100100.gz", b"y"),
            (
                "0.log.20261205-100200",
                b"2026-12-05T10:02:00Z stdout F hello\n",
            ),
            ("0.log.20261205-100200.gz.tmp", b"half"),
            ("1.log", b"other attempt"),
        ] {
            std::fs::write(dir.join(name), body).unwrap();
        }
        // A symlink named like a rotated file is neither followed nor
        // compressed.
        std::os::unix::fs::symlink("/etc/hostname", dir.join("0.log.20261205-100300")).unwrap();
        prune_and_compress(&log, 4).unwrap();
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "0.log",
                "0.log.20261205-100100.gz",
                "0.log.20261205-100200.gz",
                "0.log.20261205-100300",
                "1.log"
            ]
        );
        let mut text = String::new();
        flate2::read::GzDecoder::new(
            std::fs::File::open(dir.join("0.log.20261205-100200.gz")).unwrap(),
        )
        .read_to_string(&mut text)
        .unwrap();
        assert_eq!(text, "2026-12-05T10:02:00Z stdout F hello\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
