//! Reading input files that a user (or an attacker) names: regular files
//! only, opened without blocking (a FIFO would wait forever for a writer),
//! and never more than a cap (a symlink to `/dev/zero`, or a file growing
//! while read, must not exhaust memory).

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The default cap on one input file: large enough for a 50,000-node cluster
/// snapshot, small enough to refuse `/dev/zero` long before memory runs out.
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;

fn refuse(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}

/// The cap on a configuration file or manifest (KubeSchedulerConfiguration,
/// KubeletConfiguration, a static pod, a node template).
pub const CONFIG_MAX_BYTES: u64 = 16 << 20;

/// Opens `path` (following a symlink to its target) for reading and checks
/// that the target is a regular file.
pub fn open_regular(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        let what = if meta.is_dir() {
            "a directory"
        } else {
            "not a regular file (a FIFO, socket or device)"
        };
        return Err(refuse(format!("{what}: only regular files are read")));
    }
    Ok(file)
}

/// Reads a regular file as UTF-8 text, refusing anything larger than
/// `max_bytes`.
pub fn read_text(path: &Path, max_bytes: u64) -> io::Result<String> {
    let file = open_regular(path)?;
    let mut text = String::new();
    let read = file
        .take(max_bytes.saturating_add(1))
        .read_to_string(&mut text)?;
    if read as u64 > max_bytes {
        return Err(refuse(format!(
            "larger than {} MiB: refusing to read it",
            max_bytes >> 20
        )));
    }
    Ok(text)
}

/// Writes `bytes` to `path` readable by its owner only (mode 0600), also when
/// the file already existed with a wider mode: for files that may hold
/// secrets (a cluster snapshot carries pod specs with literal env values).
pub fn write_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    file.write_all(bytes)?;
    file.flush()
}

/// Replaces `path` with `bytes` as one step (a new temporary file beside
/// it, synced, then renamed over it), readable by its owner only: a crash
/// leaves the old content or the new, never half of it, and a link planted
/// where the temporary file goes is not followed.
pub fn replace_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = path.with_file_name(format!(".{name}.tmp-{}-{n}", std::process::id()));
    // One left by a crash of an earlier process with this pid.
    let _ = std::fs::remove_file(&tmp);
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)?;
    let written = file.write_all(bytes).and_then(|()| file.sync_all());
    if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, path)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("rkube-util-file-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn reads_regular_files_within_the_cap() {
        let d = tmp("ok");
        let f = d.join("a.yaml");
        std::fs::write(&f, "kind: Node\n").unwrap();
        assert_eq!(read_text(&f, 100).unwrap(), "kind: Node\n");
        let err = read_text(&f, 4).unwrap_err();
        assert!(err.to_string().contains("larger than"), "{err}");
    }

    #[test]
    fn replaced_files_are_whole_and_0600() {
        use std::os::unix::fs::PermissionsExt;
        let d = tmp("replace");
        let f = d.join("state");
        std::fs::write(&f, "old").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        replace_private(&f, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "new");
        let mode = std::fs::metadata(&f).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // Nothing left beside it, also after many writes.
        for i in 0..3 {
            replace_private(&f, format!("v{i}").as_bytes()).unwrap();
        }
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "v2");
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
        // A directory in the way: an error, and no temporary file left.
        let sub = d.join("sub");
        std::fs::create_dir(&sub).unwrap();
        std::fs::write(sub.join("x"), "x").unwrap();
        assert!(replace_private(&sub, b"y").is_err());
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 2);
    }

    #[test]
    fn private_files_are_0600_even_when_they_existed() {
        use std::os::unix::fs::PermissionsExt;
        let d = tmp("private");
        let f = d.join("snap.yaml");
        std::fs::write(&f, "old").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        write_private(&f, b"new").unwrap();
        let mode = std::fs::metadata(&f).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "new");
    }

    #[test]
    fn refuses_devices_fifos_and_directories_without_blocking() {
        let err = read_text(Path::new("/dev/zero"), 1 << 20).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
        let d = tmp("fifo");
        let fifo = d.join("f.yaml");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let err = read_text(&fifo, 1 << 20).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
        let err = read_text(&d, 1 << 20).unwrap_err();
        assert!(err.to_string().contains("a directory"), "{err}");
    }
}
