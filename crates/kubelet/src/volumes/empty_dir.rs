//! `emptyDir` with `medium: Memory`: a tmpfs on the volume's directory
//! (sized by `sizeLimit`, as upstream's `size=` option; without one the
//! kernel's default, half of RAM), mounted once and unmounted before the
//! pod's directory is removed. Secret, downwardAPI and projected volumes
//! are written on one too, as upstream wraps them in a memory emptyDir:
//! their contents never touch the disk.

// Audited: mount(2)/umount2(2) with checked C strings.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Whether `dir` is a mount point of a tmpfs (from /proc/self/mountinfo,
/// which names mount points by their canonical paths).
fn is_tmpfs_mount(dir: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let Ok(dir) = dir.canonicalize() else {
        return false;
    };
    let want = dir.to_string_lossy();
    info.lines().any(|l| {
        let mut f = l.split(' ');
        let point = f.nth(4);
        let fstype = l.split(" - ").nth(1).and_then(|r| r.split(' ').next());
        point.is_some_and(|p| unescape(p) == want) && fstype == Some("tmpfs")
    })
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape(s: &str) -> String {
    s.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

fn cstr(p: &Path) -> Result<CString, String> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| format!("{}: NUL in path", p.display()))
}

/// Mounts a tmpfs of `size` bytes (`None`: the kernel's default) on `dir`
/// unless one is there already. Needs root.
pub fn mount_tmpfs(dir: &Path, size: Option<i64>) -> Result<(), String> {
    if is_tmpfs_mount(dir) {
        return Ok(());
    }
    let target = cstr(dir)?;
    // No mode: a tmpfs root is 1777 (sticky), which upstream keeps.
    let opts = match size {
        Some(s) if s > 0 => format!("size={s}"),
        _ => String::new(),
    };
    let opts = CString::new(opts).map_err(|e| e.to_string())?;
    let fstype = c"tmpfs";
    // SAFETY: all pointers are valid NUL-terminated strings for the call.
    let rc = unsafe {
        libc::mount(
            fstype.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            opts.as_ptr().cast(),
        )
    };
    if rc != 0 {
        return Err(format!(
            "mounting a tmpfs on {}: {}",
            dir.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// Unmounts every tmpfs volume of the pod directory `pod_dir` (emptyDirs
/// of medium Memory; Secret, downwardAPI and projected volumes).
pub fn cleanup(pod_dir: &Path) -> Result<(), String> {
    let Ok(plugins) = std::fs::read_dir(pod_dir.join("volumes")) else {
        return Ok(());
    };
    let volumes = plugins
        .flatten()
        .filter_map(|plugin| std::fs::read_dir(plugin.path()).ok())
        .flat_map(|rd| rd.flatten());
    for e in volumes {
        let p = e.path();
        while is_tmpfs_mount(&p) {
            let target = cstr(&p)?;
            // SAFETY: a valid NUL-terminated path.
            if unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) } != 0 {
                return Err(format!(
                    "unmounting {}: {}",
                    p.display(),
                    std::io::Error::last_os_error()
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_empty_dirs_are_sized_tmpfs_mounts_removed_by_cleanup() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("not root: skipping the tmpfs mount test");
            return;
        }
        let pod = std::env::temp_dir().join(format!("rkube-emptydir-{}", std::process::id()));
        let dir = pod.join("volumes/kubernetes.io~empty-dir/mem");
        std::fs::create_dir_all(&dir).unwrap();
        mount_tmpfs(&dir, Some(1 << 20)).unwrap();
        mount_tmpfs(&dir, Some(1 << 20)).unwrap();
        assert!(is_tmpfs_mount(&dir));
        let stacked = std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .filter(|l| l.split(' ').nth(4) == Some(dir.to_str().unwrap()))
            .count();
        assert_eq!(stacked, 1, "mounted once");
        // sizeLimit holds: 2 MiB do not fit in a 1 MiB tmpfs.
        let big = vec![0u8; 2 << 20];
        assert!(std::fs::write(dir.join("big"), &big).is_err());
        cleanup(&pod).unwrap();
        assert!(!is_tmpfs_mount(&dir));
        std::fs::remove_dir_all(&pod).unwrap();
    }
}
