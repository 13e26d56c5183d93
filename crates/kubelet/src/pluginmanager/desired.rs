//! The sockets in the registration directory, as upstream's plugin watcher
//! finds them: every socket under it (its directories too), leaving out
//! names that start with `.`; each with its identity, so that a socket
//! made anew at the same path (a restarted plugin) is told apart.

use std::collections::BTreeMap;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// How deep directories are read, and how many entries at most: a
/// registration directory holds a few sockets.
const MAX_DEPTH: usize = 4;
const MAX_ENTRIES: usize = 4096;

/// A socket's identity: device, inode and change time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SocketId {
    dev: u64,
    ino: u64,
    ctime_ns: i128,
}

/// The sockets under `dir` (none if it cannot be read).
pub fn sockets(dir: &Path) -> BTreeMap<PathBuf, SocketId> {
    let mut out = BTreeMap::new();
    let mut seen = 0usize;
    walk(dir, 0, &mut seen, &mut out);
    out
}

fn walk(dir: &Path, depth: usize, seen: &mut usize, out: &mut BTreeMap<PathBuf, SocketId>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        *seen += 1;
        if *seen > MAX_ENTRIES {
            return;
        }
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        // Not followed: a symlink is neither a socket nor a directory here.
        let Ok(meta) = std::fs::symlink_metadata(entry.path()) else {
            continue;
        };
        let ft = meta.file_type();
        if ft.is_dir() && depth + 1 < MAX_DEPTH {
            walk(&entry.path(), depth + 1, seen, out);
        } else if ft.is_socket() {
            let id = SocketId {
                dev: meta.dev(),
                ino: meta.ino(),
                ctime_ns: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
            };
            out.insert(entry.path(), id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_sockets_in_directories_not_hidden_ones_or_files() {
        let dir = std::env::temp_dir().join(format!("rk-plugreg-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        let a = std::os::unix::net::UnixListener::bind(dir.join("a.sock")).unwrap();
        let _b = std::os::unix::net::UnixListener::bind(dir.join("sub/b.sock")).unwrap();
        let _h = std::os::unix::net::UnixListener::bind(dir.join(".hidden.sock")).unwrap();
        std::fs::write(dir.join("file"), "x").unwrap();
        std::os::unix::fs::symlink(dir.join("a.sock"), dir.join("link.sock")).unwrap();
        let found = sockets(&dir);
        let names: Vec<_> = found
            .keys()
            .map(|p| p.strip_prefix(&dir).unwrap().to_path_buf())
            .collect();
        assert_eq!(
            names,
            [PathBuf::from("a.sock"), PathBuf::from("sub/b.sock")]
        );
        // Made anew at the same path: another identity.
        let before = found[&dir.join("a.sock")];
        drop(a);
        std::fs::remove_file(dir.join("a.sock")).unwrap();
        let _a2 = std::os::unix::net::UnixListener::bind(dir.join("a.sock")).unwrap();
        assert_ne!(sockets(&dir)[&dir.join("a.sock")], before);
        assert!(sockets(&dir.join("missing")).is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
