//! `statvfs(3)` of a path: the filesystem figures of nodefs, imagefs and
//! volumes. The crate's one audited `unsafe` (`libc::statvfs`), kept
//! alone here so that only this module needs `#[allow(unsafe_code)]`.
//!
//! Upstream: cAdvisor's `fs.GetDirFsInfo` (a `statfs`) and the kubelet's
//! `pkg/volume/util/fs` (`Info`).

use std::path::Path;

/// A filesystem's size and what is left.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FsInfo {
    /// Bytes available to unprivileged users (`f_bavail`).
    pub available: u64,
    /// Size in bytes (`f_blocks`).
    pub capacity: u64,
    /// Bytes in use (`f_blocks − f_bfree`, what `df` shows).
    pub used: u64,
    /// Free inodes (`f_favail`).
    pub inodes_free: u64,
    /// Inodes (`f_files`).
    pub inodes: u64,
    /// The mount's flags (`f_flag`: `ST_RDONLY`, `ST_NOSUID`, …).
    pub flags: u64,
}

/// `statvfs` of `path` (`None` if it cannot be read).
pub fn statvfs(path: &Path) -> Option<FsInfo> {
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
    let frsize = s.f_frsize as u64;
    Some(FsInfo {
        available: (s.f_bavail as u64).saturating_mul(frsize),
        capacity: (s.f_blocks as u64).saturating_mul(frsize),
        used: (s.f_blocks as u64)
            .saturating_sub(s.f_bfree as u64)
            .saturating_mul(frsize),
        inodes_free: s.f_favail as u64,
        inodes: s.f_files as u64,
        flags: s.f_flag as u64,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_machines_root() {
        let f = super::statvfs(std::path::Path::new("/")).unwrap();
        assert!(f.capacity > 0 && f.available <= f.capacity && f.used <= f.capacity);
        assert!(super::statvfs(std::path::Path::new("/no/such/dir")).is_none());
    }
}
