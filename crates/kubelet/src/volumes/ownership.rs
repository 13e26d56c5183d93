//! A volume given to the pod's `fsGroup`, as upstream's
//! `VolumeOwnership.ChangePermissions` does for volumes that support
//! ownership management (local persistent volumes here): every file and
//! directory beneath the root gets the group, group read and write (read
//! only for a read-only volume), directories also group execute and the
//! setgid bit. Symlinks get the group only.
//!
//! With `fsGroupChangePolicy: OnRootMismatch`, nothing is changed when the
//! root already has the group, the permissions and the setgid bit.
//!
//! The walk never follows a symlink: each entry is opened beneath its
//! directory's descriptor with `O_NOFOLLOW`, and changed through that
//! descriptor, so a container that swaps a directory for a link while the
//! walk runs cannot make it change a file outside the volume.

// Audited: the FFI calls of this module (open, fchownat, chmod), each with
// a SAFETY note.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::rc::Rc;

use super::subpath::{cpath, fchmod, fstat, openat};

const RW: u32 = 0o660;
const RO: u32 = 0o440;
const EXEC: u32 = 0o110;
const SETGID: u32 = 0o2000;
/// The deepest directory nesting walked (each level holds a descriptor
/// while its subdirectories wait).
pub const MAX_DEPTH: usize = 512;

/// Whether the root needs the walk under `OnRootMismatch` (upstream's
/// `requiresPermissionChange`).
pub fn root_mismatch(root: &Path, gid: u32, read_only: bool) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = std::fs::metadata(root) else {
        return true;
    };
    if m.gid() != gid || !m.is_dir() {
        return true;
    }
    let want = if read_only { RO } else { RW } | EXEC;
    m.mode() & want != want || m.mode() & SETGID == 0
}

/// Gives the tree at `root` to group `gid` (see the module's words).
pub fn change(root: &Path, gid: u32, read_only: bool, on_root_mismatch: bool) -> io::Result<()> {
    if on_root_mismatch && !root_mismatch(root, gid, read_only) {
        return Ok(());
    }
    let c = cpath(root)?;
    // SAFETY: a NUL-terminated path read during the call.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just returned, owned by nobody else.
    let root_fd: OwnedFd = unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) };
    let mask = if read_only { RO } else { RW };
    // Directories still to walk: (their parent, their name, their depth).
    // A directory's descriptor lives while its subdirectories wait, so
    // open descriptors stay within the depth.
    let mut stack: Vec<(Rc<OwnedFd>, CString, usize)> = Vec::new();
    let mut next = Some(Rc::new(root_fd));
    let mut depth = 0;
    loop {
        let dir = match next.take() {
            Some(d) => d,
            None => {
                let Some((parent, name, d)) = stack.pop() else {
                    break;
                };
                depth = d;
                match openat(
                    parent.as_fd(),
                    &name,
                    libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
                ) {
                    Ok(f) => Rc::new(f),
                    // Removed, or swapped for a link, meanwhile: skipped.
                    Err(e)
                        if matches!(
                            e.raw_os_error(),
                            Some(libc::ENOENT | libc::ELOOP | libc::ENOTDIR)
                        ) =>
                    {
                        continue
                    }
                    Err(e) => return Err(e),
                }
            }
        };
        if depth > MAX_DEPTH {
            return Err(io::Error::other(format!(
                "{}: directories nested deeper than {MAX_DEPTH}",
                root.display()
            )));
        }
        for name in names(dir.as_fd())? {
            let c = CString::new(name.as_bytes()).map_err(io::Error::other)?;
            let entry = match openat(dir.as_fd(), &c, libc::O_PATH | libc::O_NOFOLLOW) {
                Ok(f) => f,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
                Err(e) => return Err(e),
            };
            let st = fstat(entry.as_fd())?;
            match st.st_mode & libc::S_IFMT {
                libc::S_IFLNK => chgrp(entry.as_fd(), gid)?,
                libc::S_IFDIR => stack.push((dir.clone(), c, depth + 1)),
                _ => {
                    chgrp(entry.as_fd(), gid)?;
                    chmod_path_fd(entry.as_fd(), st.st_mode & 0o7777 | mask)?;
                }
            }
        }
        let st = fstat(dir.as_fd())?;
        chgrp(dir.as_fd(), gid)?;
        fchmod(dir.as_fd(), st.st_mode & 0o7777 | mask | EXEC | SETGID)?;
    }
    Ok(())
}

/// The names in directory `dir` (read through its descriptor).
fn names(dir: BorrowedFd<'_>) -> io::Result<Vec<std::ffi::OsString>> {
    let path = format!("/proc/self/fd/{}", dir.as_raw_fd());
    std::fs::read_dir(path)?
        .map(|e| e.map(|e| e.file_name()))
        .collect()
}

/// The group of what `fd` (any kind of descriptor) names becomes `gid`.
fn chgrp(fd: BorrowedFd<'_>, gid: u32) -> io::Result<()> {
    // SAFETY: the empty path with AT_EMPTY_PATH acts on the descriptor
    // itself; uid -1 keeps the owner.
    let rc = unsafe {
        libc::fchownat(
            fd.as_raw_fd(),
            c"".as_ptr(),
            u32::MAX,
            gid,
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// chmod of what an `O_PATH` descriptor names, through its `/proc` link
/// (which names the opened inode, never a path looked up again).
fn chmod_path_fd(fd: BorrowedFd<'_>, mode: u32) -> io::Result<()> {
    let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
    let c = CString::new(path).map_err(io::Error::other)?;
    // SAFETY: a NUL-terminated path read during the call.
    if unsafe { libc::chmod(c.as_ptr(), mode) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn tmp(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("rkube-own-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn the_tree_gets_the_group_and_modes_without_following_links() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("not root: skipping the ownership test");
            return;
        }
        let root = tmp("tree");
        let outside = tmp("outside");
        let secret = outside.join("host-file");
        std::fs::write(&secret, "x").unwrap();
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("a/b/f"), "data").unwrap();
        std::fs::set_permissions(root.join("a/b/f"), std::fs::Permissions::from_mode(0o600))
            .unwrap();
        std::os::unix::fs::symlink(&secret, root.join("link")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("a/dirlink")).unwrap();
        change(&root, 4321, false, false).unwrap();
        let m = |p: &Path| std::fs::symlink_metadata(p).unwrap();
        assert_eq!(m(&root.join("a/b/f")).gid(), 4321);
        assert_eq!(m(&root.join("a/b/f")).mode() & 0o7777, 0o660);
        assert_eq!(m(&root.join("a/b")).mode() & 0o2770, 0o2770);
        assert_eq!(m(&root).gid(), 4321);
        // The links got the group; what they point to did not change.
        assert_eq!(m(&root.join("link")).gid(), 4321);
        assert_eq!(m(&secret).gid(), 0);
        assert_eq!(m(&secret).mode() & 0o7777, 0o600);
        assert_eq!(m(&outside).gid(), 0);
        // OnRootMismatch with a matching root: nothing changes.
        std::fs::set_permissions(root.join("a/b/f"), std::fs::Permissions::from_mode(0o600))
            .unwrap();
        change(&root, 4321, false, true).unwrap();
        assert_eq!(m(&root.join("a/b/f")).mode() & 0o7777, 0o600);
        // ... a different group at the root: the walk runs.
        change(&root, 999, false, true).unwrap();
        assert_eq!(m(&root.join("a/b/f")).gid(), 999);
        std::fs::remove_dir_all(&root).unwrap();
        std::fs::remove_dir_all(&outside).unwrap();
    }

    #[test]
    fn a_root_matches_only_with_group_modes_and_setgid() {
        let root = tmp("mismatch");
        // SAFETY: getegid has no preconditions.
        let gid = unsafe { libc::getegid() };
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o770)).unwrap();
        assert!(root_mismatch(&root, gid, false), "no setgid bit");
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o2770)).unwrap();
        assert!(!root_mismatch(&root, gid, false));
        assert!(root_mismatch(&root, gid.wrapping_add(1), false));
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o2550)).unwrap();
        assert!(root_mismatch(&root, gid, false), "not group-writable");
        assert!(!root_mismatch(&root, gid, true));
        assert!(root_mismatch(&root.join("missing"), gid, false));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
