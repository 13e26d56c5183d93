//! Termination messages, as upstream's kubelet: each container instance
//! gets an empty host file, mode 0666 (a non-root user may write it),
//! bind-mounted at its `terminationMessagePath`; when the container has
//! exited, the last 4 KiB of that file are its `terminated.message`. With
//! `terminationMessagePolicy: FallbackToLogsOnError`, a container that
//! failed (non-zero exit) and left the file empty gets the tail of its log
//! instead: the last 80 lines, at most their last 2 KiB.

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Container;
use rkube_cri::v1;

use crate::logs::{render, LogQuery};
use crate::pod::Dirs;

/// Upstream's `MaxContainerTerminationMessageLength`.
pub const MAX_MESSAGE_BYTES: u64 = 4096;
/// Upstream's `MaxContainerTerminationMessageLogLines`.
pub const LOG_LINES: usize = 80;
/// Upstream's `MaxContainerTerminationMessageLogLength`.
pub const LOG_BYTES: usize = 2048;
/// How much of a log's end is read for the fallback (80 CRI lines of at
/// most 16 KiB of content each, with their prefixes).
const LOG_READ: u64 = 80 * 17 * 1024;

/// The host file of attempt `attempt` of container `name` of pod `uid`.
pub fn host_file(dirs: &Dirs, uid: &str, name: &str, attempt: u32) -> PathBuf {
    dirs.pod_dir(uid)
        .join("containers")
        .join(name)
        .join(format!("termination-{attempt}"))
}

/// Creates the (empty, 0666) host file and returns the mount of it at
/// `c`'s `terminationMessagePath`; `None` without a path.
pub fn prepare(c: &Container, file: &Path) -> Result<Option<v1::Mount>, String> {
    let Some(path) = c
        .termination_message_path
        .as_deref()
        .filter(|p| !p.is_empty())
    else {
        return Ok(None);
    };
    let fail = |e: std::io::Error| format!("termination message file {}: {e}", file.display());
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir).map_err(fail)?;
    }
    std::fs::File::create(file).map_err(fail)?;
    std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o666)).map_err(fail)?;
    Ok(Some(v1::Mount {
        container_path: path.to_string(),
        host_path: file.display().to_string(),
        ..Default::default()
    }))
}

/// The last `max` bytes of `file`.
fn tail(file: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    let mut f = std::fs::File::open(file)?;
    let len = f.metadata()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(max)))?;
    let mut out = Vec::new();
    f.take(max).read_to_end(&mut out)?;
    Ok(out)
}

/// The tail of a CRI log for the fallback (upstream's
/// `readLastStringFromContainerLogs`).
pub fn log_tail(log: &Path) -> String {
    match tail(log, LOG_READ) {
        Ok(bytes) => {
            // A read that starts mid-file starts mid-line: drop that line.
            let start = if bytes.len() as u64 == LOG_READ {
                bytes.iter().position(|b| *b == b'\n').map_or(0, |i| i + 1)
            } else {
                0
            };
            let q = LogQuery {
                tail_lines: Some(LOG_LINES),
                ..Default::default()
            };
            let (out, _) = render(&bytes[start..], &q, 0);
            let keep = out.len().saturating_sub(LOG_BYTES);
            String::from_utf8_lossy(&out[keep..]).into_owned()
        }
        Err(e) => format!("Error on reading termination message from logs: {e}"),
    }
}

/// The `terminated.message` of an exited container (`status` from CRI,
/// `c` its spec): the runtime's message, then `": "` and the termination
/// message when there is one (upstream's `convertToKubeContainerStatus`).
pub fn message(status: &v1::ContainerStatus, c: &Container) -> String {
    let fallback = c.termination_message_policy.as_deref() == Some("FallbackToLogsOnError")
        && status.exit_code != 0
        && status.reason != "ContainerCannotRun";
    let path = c.termination_message_path.as_deref().unwrap_or("");
    let mount = (!path.is_empty())
        .then(|| status.mounts.iter().find(|m| m.container_path == path))
        .flatten();
    let (mut text, check_logs) = match mount {
        None => (String::new(), fallback),
        Some(m) => match tail(Path::new(&m.host_path), MAX_MESSAGE_BYTES) {
            Ok(data) => (
                String::from_utf8_lossy(&data).into_owned(),
                fallback && data.is_empty(),
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (String::new(), fallback),
            Err(e) => (
                format!("Error on reading termination log {}: {e}", m.host_path),
                false,
            ),
        },
    };
    if check_logs {
        text = log_tail(Path::new(&status.log_path));
    }
    let mut out = status.message.clone();
    if !text.is_empty() {
        if !out.is_empty() {
            out += ": ";
        }
        out += &text;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scratch::Scratch;
    use serde_json::json;

    fn container(policy: &str) -> Container {
        serde_json::from_value(json!({
            "name": "c",
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": policy,
        }))
        .unwrap()
    }

    fn exited(code: i32, file: &Path, log: &Path) -> v1::ContainerStatus {
        v1::ContainerStatus {
            state: v1::ContainerState::ContainerExited as i32,
            exit_code: code,
            mounts: vec![v1::Mount {
                container_path: "/dev/termination-log".into(),
                host_path: file.display().to_string(),
                ..Default::default()
            }],
            log_path: log.display().to_string(),
            ..Default::default()
        }
    }

    #[test]
    fn the_file_is_world_writable_and_its_tail_is_the_message() {
        let dir = Scratch::new("termination");
        let dirs = Dirs::under(dir.path());
        let c = container("File");
        let file = host_file(&dirs, "u", "c", 2);
        let m = prepare(&c, &file).unwrap().unwrap();
        assert_eq!(m.container_path, "/dev/termination-log");
        assert_eq!(
            std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
            0o666
        );
        let log = dir.path().join("0.log");
        std::fs::write(&file, "DONE").unwrap();
        assert_eq!(message(&exited(0, &file, &log), &c), "DONE");
        // Only the last 4 KiB.
        let big = format!("{}END", "x".repeat(5000));
        std::fs::write(&file, &big).unwrap();
        let msg = message(&exited(0, &file, &log), &c);
        assert_eq!(msg.len(), 4096);
        assert!(msg.ends_with("END"));
    }

    #[test]
    fn fallback_to_logs_only_on_failure_with_an_empty_file() {
        let dir = Scratch::new("termination");
        let file = dir.path().join("t");
        std::fs::write(&file, "").unwrap();
        let log = dir.path().join("0.log");
        let mut lines = String::new();
        for i in 0..100 {
            lines += &format!("2026-12-03T10:00:00.000000000Z stdout F line {i}\n");
        }
        std::fs::write(&log, &lines).unwrap();
        let c = container("FallbackToLogsOnError");
        let msg = message(&exited(1, &file, &log), &c);
        assert!(msg.starts_with("line 20\n"), "the last 80 lines: {msg:?}");
        assert!(msg.ends_with("line 99\n"));
        // Success: no fallback.
        assert_eq!(message(&exited(0, &file, &log), &c), "");
        // A written file wins over the log.
        std::fs::write(&file, "from file").unwrap();
        assert_eq!(message(&exited(1, &file, &log), &c), "from file");
        // The policy File never reads the log.
        std::fs::write(&file, "").unwrap();
        assert_eq!(message(&exited(1, &file, &log), &container("File")), "");
    }

    #[test]
    fn the_log_fallback_keeps_the_last_two_kib() {
        let dir = Scratch::new("termination");
        let log = dir.path().join("0.log");
        let long = "y".repeat(1500);
        let text =
            format!("2026-12-03T10:00:00Z stdout F {long}\n2026-12-03T10:00:01Z stderr F {long}\n");
        std::fs::write(&log, text).unwrap();
        let t = log_tail(&log);
        assert_eq!(t.len(), LOG_BYTES);
        assert!(t.ends_with("y\n"));
    }
}
