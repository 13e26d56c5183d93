//! `statvfs(3)` of a path, for the `nodefs.*` and `imagefs.*` signals:
//! the crate's one audited `unsafe` (`libc::statvfs`), kept alone here so
//! that only this module needs `#[allow(unsafe_code)]`.
//!
//! Upstream: the filesystem stats come from cAdvisor (`fs.GetDirFsInfo`,
//! a `statfs`); the kubelet's own counterpart is `pkg/volume/util/fs`
//! (`Info`).

use std::path::Path;

/// `statvfs` of `path`: (available bytes, capacity bytes, free inodes, inodes).
pub fn statvfs(path: &Path) -> Option<(i64, i64, i64, i64)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: `libc::statvfs` is a plain C struct of integers, for which
    // all-zero bytes are a valid value.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path and `s` a writable statvfs.
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut s) };
    if rc != 0 {
        return None;
    }
    let frsize = s.f_frsize as i64;
    Some((
        s.f_bavail as i64 * frsize,
        s.f_blocks as i64 * frsize,
        s.f_favail as i64,
        s.f_files as i64,
    ))
}
