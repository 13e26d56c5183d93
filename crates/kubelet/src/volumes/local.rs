//! Local persistent volumes on the node, as upstream's `local` volume
//! plugin: the volume's directory is bind-mounted on
//! `<root>/pods/<uid>/volumes/kubernetes.io~local-volume/<pv>` (read-only
//! when the claim is), the PV's mount options applied to that mount, and
//! the tree given to the pod's `fsGroup` when no other pod on the node has
//! it mounted; once the pod is gone, the mount is detached and its
//! directory removed, never what is beneath it.
//!
//! Set-up is idempotent: a mount already in place (a kubelet restarted
//! under a running pod) is kept as it is.

// Audited: the one FFI call of this module (the bind remount, `mount`),
// with its SAFETY note.
#![allow(unsafe_code)]

use std::path::{Path, PathBuf};

use super::ownership;
use super::persistent::LOCAL_PLUGIN_DIR;
use super::subpath::{bind_mount, cpath, is_mount_point, mounts_under, unmount_all};

/// One local volume to set up for a pod.
pub struct SetUp<'a> {
    /// The volume's directory on the node (the PV's `local.path`).
    pub source: &'a Path,
    /// The pod's mount point for it.
    pub dir: &'a Path,
    /// Mounted read-only (the claim is).
    pub read_only: bool,
    /// The PV's `mountOptions`.
    pub options: &'a [String],
    /// The pod's `fsGroup` and whether its policy is `OnRootMismatch`.
    pub fs_group: Option<(u32, bool)>,
    /// The kubelet's `pods/` directory (to find other pods' mounts).
    pub pods_dir: &'a Path,
    /// The PV's name.
    pub pv: &'a str,
}

/// What a set-up did, for events.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct SetUpOutcome {
    /// Upstream's `AlreadyMountedVolume` warning: the volume is shared with
    /// another pod and has another group than this pod's `fsGroup`.
    pub group_warning: Option<String>,
}

/// The mount flags of the PV mount options a bind mount can honour; any
/// other option is refused (it would be ignored).
fn option_flags(options: &[String]) -> Result<libc::c_ulong, String> {
    let mut flags = 0;
    for o in options {
        flags |= match o.as_str() {
            "bind" | "rw" | "defaults" => 0,
            "ro" => libc::MS_RDONLY,
            "noatime" => libc::MS_NOATIME,
            "nodiratime" => libc::MS_NODIRATIME,
            "relatime" => libc::MS_RELATIME,
            "strictatime" => libc::MS_STRICTATIME,
            "nosuid" => libc::MS_NOSUID,
            "nodev" => libc::MS_NODEV,
            "noexec" => libc::MS_NOEXEC,
            other => {
                return Err(format!(
                "mount option {other:?} cannot be applied to a local volume's bind mount by rkube"
            ))
            }
        };
    }
    Ok(flags)
}

/// The flags the source's own mount carries that a bind remount must keep
/// (the kernel refuses to drop locked ones).
fn kept_flags(source: &Path) -> libc::c_ulong {
    let Some(fs) = crate::stats::statvfs::statvfs(source) else {
        return 0;
    };
    [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_RDONLY, libc::MS_RDONLY),
    ]
    .into_iter()
    .filter(|(st, _)| fs.flags & *st != 0)
    .fold(0, |acc, (_, ms)| acc | ms)
}

/// The other pods' mounts of volume `pv` under `pods_dir` (upstream counts
/// the mount references inside the pods directory); one read of the mount
/// table.
pub fn other_pod_mounts(pods_dir: &Path, pv: &str, own: &Path) -> Vec<PathBuf> {
    let Ok(pods) = std::fs::canonicalize(pods_dir) else {
        return Vec::new();
    };
    let own_uid = own
        .strip_prefix(pods_dir)
        .ok()
        .and_then(|r| r.components().next())
        .map(|c| c.as_os_str().to_owned());
    mounts_under(&pods)
        .unwrap_or_default()
        .into_iter()
        .filter(|m| {
            let Ok(rel) = m.strip_prefix(&pods) else {
                return false;
            };
            let parts: Vec<&std::ffi::OsStr> = rel.components().map(|c| c.as_os_str()).collect();
            parts.len() == 4
                && parts[1] == "volumes"
                && parts[2] == LOCAL_PLUGIN_DIR
                && parts[3] == pv
                && Some(parts[0].to_os_string()) != own_uid
        })
        .collect()
}

/// Mounts the volume for the pod (see the module's words).
pub fn set_up(s: &SetUp<'_>) -> Result<SetUpOutcome, String> {
    let mut out = SetUpOutcome::default();
    if is_mount_point(s.dir).map_err(|e| format!("checking {}: {e}", s.dir.display()))? {
        return Ok(out);
    }
    let flags = option_flags(s.options)?;
    let shared = other_pod_mounts(s.pods_dir, s.pv, s.dir);
    if let (Some((gid, _)), false) = (s.fs_group, shared.is_empty()) {
        use std::os::unix::fs::MetadataExt;
        let old = std::fs::metadata(s.source)
            .map_err(|e| format!("failed to check fsGroup for {} ({e})", s.source.display()))?
            .gid();
        if old != gid {
            out.group_warning = Some(format!(
                "The requested fsGroup is {gid}, but the volume {} has GID {old}. The volume may not be shareable.",
                s.pv
            ));
        }
    }
    std::fs::create_dir_all(s.dir).map_err(|e| format!("mkdir {}: {e}", s.dir.display()))?;
    let source = s
        .source
        .to_str()
        .ok_or_else(|| format!("{}: not UTF-8", s.source.display()))?;
    if let Err(e) = bind_mount(source, s.dir) {
        let _ = std::fs::remove_dir(s.dir);
        return Err(format!(
            "mount of {} on {} failed: {e}",
            s.source.display(),
            s.dir.display()
        ));
    }
    let ro = if s.read_only { libc::MS_RDONLY } else { 0 };
    if flags | ro != 0 {
        if let Err(e) = remount(s.dir, flags | ro | kept_flags(s.source)) {
            let _ = unmount_all(s.dir);
            let _ = std::fs::remove_dir(s.dir);
            return Err(format!(
                "applying mount options to {}: {e}",
                s.dir.display()
            ));
        }
    }
    if let (Some((gid, on_root_mismatch)), false) = (s.fs_group, s.read_only) {
        if shared.is_empty() {
            ownership::change(s.dir, gid, false, on_root_mismatch)
                .map_err(|e| format!("setting the volume's group to {gid}: {e}"))?;
        }
    }
    Ok(out)
}

/// `mount(MS_REMOUNT | MS_BIND | flags)` on `dir`.
fn remount(dir: &Path, flags: libc::c_ulong) -> std::io::Result<()> {
    let c = cpath(dir)?;
    // SAFETY: a NUL-terminated target; a bind remount takes no source,
    // type or data.
    let rc = unsafe {
        libc::mount(
            std::ptr::null(),
            c.as_ptr(),
            std::ptr::null(),
            libc::MS_REMOUNT | libc::MS_BIND | flags,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Detaches every local volume mount of the pod directory `pod_dir` and
/// removes the emptied mount points.
pub fn cleanup(pod_dir: &Path) -> Result<(), String> {
    let Ok(rd) = std::fs::read_dir(pod_dir.join("volumes").join(LOCAL_PLUGIN_DIR)) else {
        return Ok(());
    };
    for e in rd.flatten() {
        let p = e.path();
        unmount_all(&p).map_err(|e| format!("unmounting {}: {e}", p.display()))?;
        // Only an empty directory goes: a mount point never held files.
        if let Err(e) = std::fs::remove_dir(&p) {
            if e.kind() != std::io::ErrorKind::NotFound {
                return Err(format!("removing {}: {e}", p.display()));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_options_a_bind_mount_cannot_honour_are_refused() {
        assert_eq!(
            option_flags(&["noatime".into(), "ro".into()]).unwrap(),
            libc::MS_NOATIME | libc::MS_RDONLY
        );
        assert!(option_flags(&["discard".into()])
            .unwrap_err()
            .contains("\"discard\" cannot be applied"));
    }

    #[test]
    fn a_volume_is_bind_mounted_once_shared_and_cleaned_up_without_its_data() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("not root: skipping the local volume mount test");
            return;
        }
        let base = std::env::temp_dir().join(format!("rkube-local-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let disk = base.join("disk");
        std::fs::create_dir_all(&disk).unwrap();
        std::fs::write(disk.join("kept"), "data").unwrap();
        let pods = base.join("pods");
        let dir_of = |uid: &str| {
            pods.join(uid)
                .join("volumes")
                .join(LOCAL_PLUGIN_DIR)
                .join("pv1")
        };
        let (a, b) = (dir_of("a"), dir_of("b"));
        fn up(
            disk: &Path,
            dir: &Path,
            pods: &Path,
            ro: bool,
            group: u32,
        ) -> Result<SetUpOutcome, String> {
            set_up(&SetUp {
                source: disk,
                dir,
                read_only: ro,
                options: &[],
                fs_group: Some((group, false)),
                pods_dir: pods,
                pv: "pv1",
            })
        }
        assert_eq!(
            up(&disk, &a, &pods, false, 2000).unwrap(),
            SetUpOutcome::default()
        );
        assert_eq!(std::fs::read_to_string(a.join("kept")).unwrap(), "data");
        use std::os::unix::fs::MetadataExt;
        assert_eq!(std::fs::metadata(&disk).unwrap().gid(), 2000);
        // Again (a restarted kubelet): one mount, still.
        up(&disk, &a, &pods, false, 2000).unwrap();
        assert_eq!(other_pod_mounts(&pods, "pv1", &b), vec![a.clone()]);
        // A second pod with another group: warned, not regrouped; read-only.
        let out = up(&disk, &b, &pods, true, 3000).unwrap();
        assert_eq!(
            out.group_warning.as_deref(),
            Some("The requested fsGroup is 3000, but the volume pv1 has GID 2000. The volume may not be shareable.")
        );
        assert_eq!(std::fs::metadata(&disk).unwrap().gid(), 2000);
        assert!(std::fs::write(b.join("new"), "x").is_err(), "read-only");
        std::fs::write(a.join("new"), "x").unwrap();
        // Cleanup detaches and removes the mount points, never the data.
        cleanup(&pods.join("a")).unwrap();
        cleanup(&pods.join("b")).unwrap();
        assert!(!a.exists() && !b.exists());
        assert_eq!(std::fs::read_to_string(disk.join("new")).unwrap(), "x");
        assert_eq!(std::fs::read_to_string(disk.join("kept")).unwrap(), "data");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
