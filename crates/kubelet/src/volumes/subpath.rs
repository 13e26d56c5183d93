//! A volumeMount's `subPath`, resolved beneath the volume root so that the
//! container cannot steer the kubelet out of it, and bind-mounted for the
//! runtime (the CVE-2017-1002101 class of host escapes).
//!
//! # The problem
//!
//! A container owns what is inside its volumes. Were the kubelet to hand the
//! runtime `root.join(sub)` as a string, the runtime would resolve it on the
//! host and follow whatever the container planted: after `ln -s / vol/x`, a
//! mount with `subPath: x` gets the host's `/` at the container's next start.
//!
//! # What [`prepare`] does
//!
//! 1. Checks the subPath as text: non-empty, relative, no `..` component, no
//!    NUL byte (upstream: `makeMounts` in `pkg/kubelet/kubelet_pods.go`).
//!    Empty and `.` components are dropped, as `filepath.Join` would.
//! 2. Opens the volume root (trusted: the kubelet made it) and resolves the
//!    subPath *from that file descriptor*:
//!    * first with `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`: the
//!      kernel refuses any resolution that would leave the root;
//!    * when that is not available (`ENOSYS`), or it failed (to say exactly
//!      why, or to create what is missing), by a walk (`walk`): one component
//!      at a time with `openat(O_PATH | O_NOFOLLOW)` relative to the parent's fd,
//!      each symlink read with `readlinkat` and expanded by the walk itself,
//!      so the kernel never follows one on the kubelet's behalf.
//!
//!    Directories the subPath names but that do not exist are created on the
//!    way, with the volume root's mode (`mkdirat`, reopened with
//!    `O_NOFOLLOW | O_DIRECTORY`, `fchmod`), as upstream's `SafeMakeDir`.
//!    Nothing is ever created through a symlink.
//! 3. Bind-mounts `/proc/self/fd/N` of the descriptor it just opened onto a
//!    kubelet-owned target ([`target_path`]; a directory for a directory, a
//!    file for anything else) and returns the target for the CRI. The kernel
//!    mounts exactly the object behind the descriptor: no path is resolved by
//!    name after the checks, so swapping a directory for a symlink between
//!    the check and the mount gains the container nothing.
//!
//! [`cleanup`] unmounts (detaching lazily) and removes every target of a pod.
//!
//! Upstream: `pkg/volume/util/subpath/subpath_linux.go` (`doBindSubPath`,
//! `doSafeOpen`, `doSafeMakeDir`, `doCleanSubPaths`).
//!
//! # Which symlinks are followed
//!
//! Those that stay beneath the volume root, as upstream does (it evaluates
//! the symlinks and requires the result to lie within the volume).
//! ConfigMap, Secret, downwardAPI and projected volumes consist of them
//! (`key -> ..data/key`), and the conformance tests `Subpath Atomic writer
//! volumes should support subpaths with …` mount such keys. Refused: an
//! absolute symlink (even one that would land inside: the container cannot
//! know where its volume lives on the host, and `RESOLVE_BENEATH` refuses
//! them too), a symlink whose `..` climbs above the root (even if the rest
//! would come back inside, as `RESOLVE_BENEATH` does), more than 40
//! symlinks on the way (the kernel's limit), and `/proc` magic links.
//!
//! # Limits
//!
//! * Linux only. Mounting needs euid 0 (the kubelet runs as root); [`prepare`]
//!   says so otherwise.
//! * Mount points beneath the volume root are crossed, as upstream: only the
//!   host can make them.
//! * [`target_path`] joins the volume and container names as they are: the
//!   API server validates both as DNS labels.
//! * [`prepare`] and [`cleanup`] for one pod must not run concurrently (the
//!   pod worker serialises them).

// Audited: the FFI calls of this module (openat, openat2, mkdirat, fchmod,
// fstat, readlinkat, mount, umount2, geteuid), each with a SAFETY note.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString, OsStr};
use std::fs;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// The directory of a pod's subPath targets, beneath the pod directory.
const SUBPATH_DIR: &str = "volume-subpaths";
/// Symlinks followed in one resolution at most (Linux's `MAXSYMLINKS`).
const MAX_SYMLINKS: usize = 40;
/// Mounts stacked on one target that are unmounted before giving up.
const MAX_STACKED: usize = 16;
/// Times a component that changes under the walk (created, then replaced)
/// is looked at again before giving up.
const MAX_RETRIES: usize = 8;
/// Depth of a target beneath `volume-subpaths` (`<volume>/<container>/<index>`).
const TARGET_DEPTH: usize = 3;

/// Where the bind mount for mount `index` (its position in the container's
/// `volumeMounts`) of `container` of volume `volume` goes, beneath the pod's
/// directory `pod_dir` (`<kubelet root>/pods/<uid>`):
/// `<pod_dir>/volume-subpaths/<volume>/<container>/<index>`.
pub fn target_path(pod_dir: &Path, volume: &str, container: &str, index: usize) -> PathBuf {
    pod_dir
        .join(SUBPATH_DIR)
        .join(volume)
        .join(container)
        .join(index.to_string())
}

/// Why a subPath was not prepared (or a pod's targets not cleaned up). The
/// messages name the subPath and the volume root, and say why; they include
/// host paths, so a pod's status should get a shorter message (upstream says
/// only "failed to prepare subPath for volumeMount …") and the log this one.
#[derive(Debug, thiserror::Error)]
pub enum SubPathError {
    /// The subPath is empty (an empty subPath means "no subPath": the caller
    /// mounts the volume root itself).
    #[error("subPath {sub:?} of volume root {}: must not be empty", root.display())]
    Empty {
        /// The subPath as given.
        sub: String,
        /// The volume root.
        root: PathBuf,
    },
    /// The subPath is an absolute path.
    #[error("subPath {sub:?} of volume root {}: must be a relative path, not an absolute one", root.display())]
    Absolute {
        /// The subPath as given.
        sub: String,
        /// The volume root.
        root: PathBuf,
    },
    /// The subPath has a `..` component.
    #[error("subPath {sub:?} of volume root {}: must not contain '..'", root.display())]
    Backstep {
        /// The subPath as given.
        sub: String,
        /// The volume root.
        root: PathBuf,
    },
    /// The subPath has a NUL byte, which no path can.
    #[error("subPath {sub:?} of volume root {}: contains a NUL byte", root.display())]
    Nul {
        /// The subPath as given.
        sub: String,
        /// The volume root.
        root: PathBuf,
    },
    /// Following a symlink would leave the volume root.
    #[error("subPath {sub:?} of volume root {}: {}; refusing to follow it", root.display(), describe_escape(component, link, target))]
    SymlinkEscapes {
        /// The subPath as given.
        sub: String,
        /// The volume root.
        root: PathBuf,
        /// The subPath's prefix up to the component that leads to the symlink.
        component: String,
        /// The symlink, as a path beneath the volume root.
        link: String,
        /// What the symlink points to.
        target: String,
    },
    /// More than 40 symlinks on the way (`MAX_SYMLINKS`, as Linux).
    #[error("subPath {sub:?} of volume root {}: component {component:?} leads through more than {MAX_SYMLINKS} symlinks", root.display())]
    TooManySymlinks {
        /// The subPath as given.
        sub: String,
        /// The volume root.
        root: PathBuf,
        /// The subPath's prefix up to the component being resolved.
        component: String,
    },
    /// A component that has more beneath it is not a directory.
    #[error("subPath {sub:?} of volume root {}: component {component:?} is not a directory, so nothing can be beneath it", root.display())]
    NotADirectory {
        /// The subPath as given.
        sub: String,
        /// The volume root.
        root: PathBuf,
        /// The subPath's prefix up to the offending component.
        component: String,
    },
    /// A component does not exist (and is not created: the caller asked not
    /// to, or it is named by a symlink).
    #[error("subPath {sub:?} of volume root {}: component {component:?} does not exist{}", root.display(), if *via_symlink { " (a symlink on the way points to nothing; directories are not created through symlinks)" } else { "" })]
    NotFound {
        /// The subPath as given.
        sub: String,
        /// The volume root.
        root: PathBuf,
        /// The subPath's prefix up to the missing component.
        component: String,
        /// Whether the missing name came from a symlink's target.
        via_symlink: bool,
    },
    /// What was opened does not lie beneath the volume root (a final check,
    /// after the resolution that should already have made sure).
    #[error("subPath {sub:?} of volume root {}: resolves to {}, which is not beneath the volume root", root.display(), resolved.display())]
    NotBeneath {
        /// The subPath as given.
        sub: String,
        /// The volume root.
        root: PathBuf,
        /// Where the opened file is.
        resolved: PathBuf,
    },
    /// The volume root cannot be opened as a directory.
    #[error("subPath {sub:?} of volume root {}: cannot open the volume root: {source}", root.display())]
    Root {
        /// The subPath as given.
        sub: String,
        /// The volume root.
        root: PathBuf,
        /// The error of `open(2)`.
        source: io::Error,
    },
    /// A system call on a component failed.
    #[error("subPath {sub:?} of volume root {}: {action} {component:?}: {source}", root.display())]
    Io {
        /// The subPath as given.
        sub: String,
        /// The volume root.
        root: PathBuf,
        /// What was being done ("opening", "creating directory", …).
        action: &'static str,
        /// The subPath's prefix up to the component concerned.
        component: String,
        /// The error of the system call.
        source: io::Error,
    },
    /// Mounting needs root.
    #[error("subPath {sub:?} of volume root {}: bind-mounting a subPath needs root (mount(2)); the kubelet runs as root, this process has euid {euid}", root.display())]
    NotRoot {
        /// The subPath as given.
        sub: String,
        /// The volume root.
        root: PathBuf,
        /// This process's effective uid.
        euid: u32,
    },
    /// Preparing, mounting or checking the target failed.
    #[error("subPath {sub:?} of volume root {}: {action} {}: {source}", root.display(), target.display())]
    Target {
        /// The subPath as given.
        sub: String,
        /// The volume root.
        root: PathBuf,
        /// The bind-mount target.
        target: PathBuf,
        /// What was being done ("bind-mounting onto", …).
        action: &'static str,
        /// The underlying error.
        source: io::Error,
    },
    /// Unmounting or removing a target failed (the first such failure;
    /// [`cleanup`] goes on with the others).
    #[error("cleaning up the subPath mounts of pod directory {}: {action} {}: {source}", pod_dir.display(), path.display())]
    Cleanup {
        /// The pod directory.
        pod_dir: PathBuf,
        /// The path concerned.
        path: PathBuf,
        /// What was being done ("unmounting", "removing", …).
        action: &'static str,
        /// The underlying error.
        source: io::Error,
    },
}

fn describe_escape(component: &str, link: &str, target: &str) -> String {
    let what = if link == component {
        format!("component {component:?} is a symlink to {target:?}")
    } else {
        format!("component {component:?} leads to the symlink {link:?} -> {target:?}")
    };
    let why = if target.starts_with('/') {
        "an absolute symlink, not followed"
    } else {
        "it climbs above the volume root"
    };
    format!("{what}: {why}")
}

/// Resolves `sub` beneath `volume_root` (see the module doc for which
/// symlinks are followed), creating the directories it names that are
/// missing, and bind-mounts the result at `target` (a target from
/// [`target_path`]). Idempotent: if `target` already has the same file
/// mounted, it is reused; if it has another one (the subPath now resolves
/// elsewhere), that one is detached first.
///
/// Returns the path to hand to the CRI (`target`).
pub fn prepare(volume_root: &Path, sub: &str, target: &Path) -> Result<PathBuf, SubPathError> {
    prepare_with(volume_root, sub, target, Strategy::Openat2First)
}

/// Opens `sub` beneath `volume_root` as [`prepare`] resolves it, without
/// mounting: an `O_PATH` descriptor (good for `fstat`, `*at` calls and
/// `/proc/self/fd/N`). With `create_missing`, the directories `sub` names
/// that do not exist are created as [`prepare`] creates them. Needs no root.
pub fn open_beneath(
    volume_root: &Path,
    sub: &str,
    create_missing: bool,
) -> Result<OwnedFd, SubPathError> {
    let names = validate(sub, volume_root)?;
    let cx = Cx {
        sub,
        root: volume_root,
        names: &names,
    };
    open_checked(&cx, create_missing, Strategy::Openat2First)
}

/// How the subPath is resolved: tests force the walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Strategy {
    /// `openat2` when the kernel has it, the walk otherwise or on failure.
    Openat2First,
    /// The walk only (what a kernel without `openat2` gets).
    #[cfg_attr(not(test), allow(dead_code))]
    WalkOnly,
}

/// Whether `openat2` may be tried: cleared at the first `ENOSYS`.
static OPENAT2: AtomicBool = AtomicBool::new(true);

/// What errors name: the subPath, the root and the subPath's components.
struct Cx<'a> {
    sub: &'a str,
    root: &'a Path,
    names: &'a [&'a str],
}

impl Cx<'_> {
    /// The subPath's prefix up to (and including) component `origin`.
    fn component(&self, origin: usize) -> String {
        let end = (origin + 1).min(self.names.len());
        self.names[..end].join("/")
    }

    fn io(&self, action: &'static str, origin: usize, source: io::Error) -> SubPathError {
        SubPathError::Io {
            sub: self.sub.to_string(),
            root: self.root.to_path_buf(),
            action,
            component: self.component(origin),
            source,
        }
    }

    fn target(&self, action: &'static str, target: &Path, source: io::Error) -> SubPathError {
        SubPathError::Target {
            sub: self.sub.to_string(),
            root: self.root.to_path_buf(),
            target: target.to_path_buf(),
            action,
            source,
        }
    }
}

/// The subPath's components, checked: relative, no `..`, no NUL; empty and
/// `.` components dropped (so `.` alone names the root itself).
fn validate<'a>(sub: &'a str, root: &Path) -> Result<Vec<&'a str>, SubPathError> {
    let (sub_s, root_p) = (sub.to_string(), root.to_path_buf());
    if sub.is_empty() {
        return Err(SubPathError::Empty {
            sub: sub_s,
            root: root_p,
        });
    }
    if sub.contains('\0') {
        return Err(SubPathError::Nul {
            sub: sub_s,
            root: root_p,
        });
    }
    if sub.starts_with('/') {
        return Err(SubPathError::Absolute {
            sub: sub_s,
            root: root_p,
        });
    }
    if sub.split('/').any(|c| c == "..") {
        return Err(SubPathError::Backstep {
            sub: sub_s,
            root: root_p,
        });
    }
    Ok(sub
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect())
}

fn prepare_with(
    volume_root: &Path,
    sub: &str,
    target: &Path,
    strategy: Strategy,
) -> Result<PathBuf, SubPathError> {
    let names = validate(sub, volume_root)?;
    let cx = Cx {
        sub,
        root: volume_root,
        names: &names,
    };
    let euid = geteuid();
    if euid != 0 {
        return Err(SubPathError::NotRoot {
            sub: sub.to_string(),
            root: volume_root.to_path_buf(),
            euid,
        });
    }
    let fd = open_checked(&cx, true, strategy)?;
    let st = fstat(fd.as_fd()).map_err(|e| cx.io("inspecting", names.len(), e))?;
    let want_dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR;
    let id = (st.st_dev, st.st_ino);

    // A target already mounted: reuse it if it shows the same file, detach
    // it otherwise (the subPath was changed under it, or it is stale).
    let mut mounted =
        is_mount_point(target).map_err(|e| cx.target("reading the mount table for", target, e))?;
    for _ in 0..MAX_STACKED {
        if !mounted {
            break;
        }
        if same_file(target, id) {
            return Ok(target.to_path_buf());
        }
        unmount_detach(target).map_err(|e| cx.target("detaching the stale mount at", target, e))?;
        mounted = is_mount_point(target)
            .map_err(|e| cx.target("reading the mount table for", target, e))?;
    }
    if mounted {
        return Err(cx.target(
            "detaching the stale mounts at",
            target,
            io::Error::other(format!("still mounted after {MAX_STACKED} unmounts")),
        ));
    }

    let created =
        make_target(target, want_dir).map_err(|e| cx.target("creating the target", target, e))?;
    // The source is the descriptor itself: the kernel mounts the object it
    // refers to, with no second resolution of any name beneath the root.
    let source = format!("/proc/self/fd/{}", fd.as_raw_fd());
    if let Err(e) = bind_mount(&source, target) {
        if created {
            let _ = remove_target(target);
        }
        return Err(cx.target("bind-mounting onto", target, e));
    }
    if !same_file(target, id) {
        let _ = unmount_detach(target);
        return Err(cx.target(
            "checking the bind mount at",
            target,
            io::Error::other("the target does not show the file that was opened"),
        ));
    }
    Ok(target.to_path_buf())
}

/// Opens the root, resolves the subPath beneath it and checks the result
/// really lies beneath the root.
fn open_checked(cx: &Cx<'_>, create: bool, strategy: Strategy) -> Result<OwnedFd, SubPathError> {
    let root = open_root(cx.root).map_err(|source| SubPathError::Root {
        sub: cx.sub.to_string(),
        root: cx.root.to_path_buf(),
        source,
    })?;
    let fd = resolve(root.as_fd(), cx, create, strategy)?;
    check_beneath(root.as_fd(), fd.as_fd(), cx)?;
    Ok(fd)
}

/// The volume root, as a directory descriptor. The root's own path is
/// trusted (the kubelet made it), so symlinks in it are followed.
fn open_root(root: &Path) -> io::Result<OwnedFd> {
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
        .open(root)?;
    Ok(OwnedFd::from(f))
}

fn resolve(
    root: BorrowedFd<'_>,
    cx: &Cx<'_>,
    create: bool,
    strategy: Strategy,
) -> Result<OwnedFd, SubPathError> {
    if strategy == Strategy::Openat2First && OPENAT2.load(Ordering::Relaxed) {
        match openat2_beneath(root, cx.names) {
            Ok(fd) => return Ok(fd),
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
                OPENAT2.store(false, Ordering::Relaxed);
            }
            // The walk says exactly why, or creates what is missing; it is
            // as safe on its own.
            Err(_) => {}
        }
    }
    let mode = if create {
        let st = fstat(root).map_err(|e| SubPathError::Root {
            sub: cx.sub.to_string(),
            root: cx.root.to_path_buf(),
            source: e,
        })?;
        Some(st.st_mode & 0o7777)
    } else {
        None
    };
    walk(root, cx, mode)
}

/// `openat2(root, sub, O_PATH, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`:
/// the kernel follows symlinks but fails (`EXDEV`) any resolution that
/// would leave `root`: absolute symlinks, `..` above it; and (`ELOOP`)
/// `/proc` magic links.
fn openat2_beneath(root: BorrowedFd<'_>, names: &[&str]) -> io::Result<OwnedFd> {
    let rel = if names.is_empty() {
        ".".to_string()
    } else {
        names.join("/")
    };
    let path = CString::new(rel)?;
    // SAFETY: `open_how` is three integers, for which all-zero bytes are a
    // valid value (and the kernel requires unused fields to be zero).
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_PATH | libc::O_CLOEXEC) as u64;
    how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: `path` is NUL-terminated and `how` a valid `open_how` of the
    // size passed; the kernel reads both during the call only.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root.as_raw_fd(),
            path.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    owned_fd(rc)
}

/// One name still to resolve, and where it came from.
struct Pending {
    name: Vec<u8>,
    /// Index of the subPath component it stands for (itself, or the one
    /// whose symlink it came from).
    origin: usize,
    /// The symlink it came from (index into the walk's list), if any.
    link: Option<usize>,
}

/// Resolves the subPath beneath `root` one component at a time, never
/// letting the kernel follow a symlink: each name is opened with
/// `openat(parent, name, O_PATH | O_NOFOLLOW)`; a symlink is read and its
/// target's names queued in its place (refused if absolute); `..` (only
/// from a symlink's target) goes back to the previous directory on the
/// walk's own stack of descriptors, refused above the root. With
/// `create_mode`, missing directories named by the subPath (not by a
/// symlink) are created with that mode.
///
/// Upstream's walk (`doSafeOpen`) refuses every symlink, after resolving
/// them with `EvalSymlinks` and checking the result is within the volume;
/// resolving them here, confined, gives the same answers without the race
/// between the two steps.
fn walk(
    root: BorrowedFd<'_>,
    cx: &Cx<'_>,
    create_mode: Option<libc::mode_t>,
) -> Result<OwnedFd, SubPathError> {
    // Directories entered so far beneath the root (the root itself is not
    // on the stack), with their names for messages.
    let mut dirs: Vec<(OwnedFd, Vec<u8>)> = Vec::new();
    // Symlinks followed: (path beneath the root, target).
    let mut links: Vec<(String, String)> = Vec::new();
    let mut pending: Vec<Pending> = cx
        .names
        .iter()
        .enumerate()
        .rev()
        .map(|(i, n)| Pending {
            name: n.as_bytes().to_vec(),
            origin: i,
            link: None,
        })
        .collect();
    let mut retries = 0;

    while let Some(p) = pending.pop() {
        if p.name == b".." {
            if dirs.pop().is_none() {
                return Err(escape(cx, p.origin, p.link.and_then(|i| links.get(i))));
            }
            continue;
        }
        let parent = dirs.last().map(|(fd, _)| fd.as_fd()).unwrap_or(root);
        let name = CString::new(p.name.clone()).map_err(|_| SubPathError::Nul {
            sub: cx.sub.to_string(),
            root: cx.root.to_path_buf(),
        })?;
        match openat(parent, &name, libc::O_PATH | libc::O_NOFOLLOW) {
            Ok(fd) => {
                let st = fstat(fd.as_fd()).map_err(|e| cx.io("inspecting", p.origin, e))?;
                match st.st_mode & libc::S_IFMT {
                    libc::S_IFLNK => {
                        if links.len() >= MAX_SYMLINKS {
                            return Err(SubPathError::TooManySymlinks {
                                sub: cx.sub.to_string(),
                                root: cx.root.to_path_buf(),
                                component: cx.component(p.origin),
                            });
                        }
                        let target = readlink_fd(fd.as_fd())
                            .map_err(|e| cx.io("reading the symlink", p.origin, e))?;
                        let mut here: Vec<&[u8]> = dirs.iter().map(|(_, n)| n.as_slice()).collect();
                        here.push(&p.name);
                        links.push((
                            String::from_utf8_lossy(&here.join(&b'/')).into_owned(),
                            String::from_utf8_lossy(&target).into_owned(),
                        ));
                        let link = links.len() - 1;
                        if target.first() == Some(&b'/') {
                            return Err(escape(cx, p.origin, links.get(link)));
                        }
                        for part in target.split(|b| *b == b'/').rev() {
                            if part.is_empty() || part == b"." {
                                continue;
                            }
                            pending.push(Pending {
                                name: part.to_vec(),
                                origin: p.origin,
                                link: Some(link),
                            });
                        }
                    }
                    libc::S_IFDIR => dirs.push((fd, p.name)),
                    _ if pending.is_empty() => return Ok(fd),
                    _ => {
                        return Err(SubPathError::NotADirectory {
                            sub: cx.sub.to_string(),
                            root: cx.root.to_path_buf(),
                            component: cx.component(p.origin),
                        });
                    }
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => match create_mode {
                Some(mode) if p.link.is_none() => {
                    match make_dir(parent, &name, mode).map_err(|(a, e)| cx.io(a, p.origin, e))? {
                        Some(fd) => dirs.push((fd, p.name)),
                        // It changed under us: look at it again.
                        None if retries < MAX_RETRIES => {
                            retries += 1;
                            pending.push(p);
                        }
                        None => {
                            return Err(cx.io(
                                "creating directory",
                                p.origin,
                                io::Error::other("it keeps being replaced"),
                            ));
                        }
                    }
                }
                _ => {
                    return Err(SubPathError::NotFound {
                        sub: cx.sub.to_string(),
                        root: cx.root.to_path_buf(),
                        component: cx.component(p.origin),
                        via_symlink: p.link.is_some(),
                    });
                }
            },
            Err(e) => return Err(cx.io("opening", p.origin, e)),
        }
    }
    match dirs.pop() {
        Some((fd, _)) => Ok(fd),
        None => root
            .try_clone_to_owned()
            .map_err(|e| cx.io("duplicating the root's descriptor", 0, e)),
    }
}

/// The error for leaving the root, at subPath component `origin`, by
/// `link` (path beneath the root, target).
fn escape(cx: &Cx<'_>, origin: usize, link: Option<&(String, String)>) -> SubPathError {
    let (link, target) = link
        .cloned()
        .unwrap_or_else(|| (cx.component(origin), String::from("..")));
    SubPathError::SymlinkEscapes {
        sub: cx.sub.to_string(),
        root: cx.root.to_path_buf(),
        component: cx.component(origin),
        link,
        target,
    }
}

/// Creates directory `name` in `parent` and opens it without following a
/// symlink. `Ok(None)` when something else took its place (the caller looks
/// at it again); the mode is set only on a directory this call created.
fn make_dir(
    parent: BorrowedFd<'_>,
    name: &CStr,
    mode: libc::mode_t,
) -> Result<Option<OwnedFd>, (&'static str, io::Error)> {
    let created = match mkdirat(parent, name, mode) {
        Ok(()) => true,
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => false,
        Err(e) => return Err(("creating directory", e)),
    };
    let fd = match openat(
        parent,
        name,
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
    ) {
        Ok(fd) => fd,
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::ELOOP | libc::ENOTDIR | libc::ENOENT)
            ) =>
        {
            return Ok(None);
        }
        Err(e) => return Err(("opening the directory just created", e)),
    };
    if !created {
        return Ok(None);
    }
    // mkdirat's mode went through the umask; the mode is set on the
    // descriptor, so it is the directory just created that gets it.
    fchmod(fd.as_fd(), mode).map_err(|e| ("setting the mode of", e))?;
    Ok(Some(fd))
}

/// Checks that the descriptor's path (as the kernel tells it) is beneath
/// the root's: the last word, after a resolution that should ensure it.
fn check_beneath(
    root: BorrowedFd<'_>,
    fd: BorrowedFd<'_>,
    cx: &Cx<'_>,
) -> Result<(), SubPathError> {
    let root_path = fd_path(root).map_err(|e| cx.io("locating the volume root of", 0, e))?;
    let path = fd_path(fd).map_err(|e| cx.io("locating", cx.names.len(), e))?;
    if path.starts_with(&root_path) {
        Ok(())
    } else {
        Err(SubPathError::NotBeneath {
            sub: cx.sub.to_string(),
            root: cx.root.to_path_buf(),
            resolved: path,
        })
    }
}

fn fd_path(fd: BorrowedFd<'_>) -> io::Result<PathBuf> {
    fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// Whether `target` shows the file `id` (device, inode).
fn same_file(target: &Path, id: (u64, u64)) -> bool {
    fs::symlink_metadata(target).is_ok_and(|m| (m.dev(), m.ino()) == id)
}

/// Makes the target: a directory (mode 0750) for a directory, an empty file
/// (0640) for anything else, its parents 0750. A target of the other kind,
/// left from before, is removed first. Returns whether it was created.
fn make_target(target: &Path, want_dir: bool) -> io::Result<bool> {
    if let Some(parent) = target.parent() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o750)
            .create(parent)?;
    }
    match fs::symlink_metadata(target) {
        Ok(m) if m.is_dir() == want_dir && (want_dir || m.is_file()) => return Ok(false),
        Ok(_) => remove_target(target)?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    if want_dir {
        fs::DirBuilder::new().mode(0o750).create(target)?;
    } else {
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o640)
            .custom_flags(libc::O_NOFOLLOW)
            .open(target)?;
    }
    Ok(true)
}

/// Removes a target that is not mounted: an empty directory or a file,
/// never recursively (a directory still holding something is kept).
fn remove_target(path: &Path) -> io::Result<()> {
    if fs::symlink_metadata(path)?.is_dir() {
        fs::remove_dir(path)
    } else {
        fs::remove_file(path)
    }
}

/// Unmounts (detaches lazily) and removes every target under
/// `<pod_dir>/volume-subpaths`, then the directories up to it (included).
/// Nothing is removed recursively: a target that is not a mount point yet
/// holds something is left, and reported. Goes on past a failure and
/// returns the first. No `volume-subpaths` directory: nothing to do.
///
/// Call it with the same `pod_dir` as [`target_path`] was given, when no
/// container of the pod runs any more (upstream cleans a pod's subPaths
/// when it tears down its volumes).
pub fn cleanup(pod_dir: &Path) -> Result<(), SubPathError> {
    let err = |path: &Path, action, source| SubPathError::Cleanup {
        pod_dir: pod_dir.to_path_buf(),
        path: path.to_path_buf(),
        action,
        source,
    };
    let base = pod_dir.join(SUBPATH_DIR);
    match fs::symlink_metadata(&base) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(err(&base, "inspecting", e)),
        Ok(_) => {}
    }
    // Mount points are matched against canonical paths.
    let base = fs::canonicalize(&base).map_err(|e| err(&base, "resolving", e))?;
    let mut first = None;
    clean_entry(&base, 0, &mut |path, action, e| {
        if first.is_none() {
            first = Some(err(path, action, e));
        }
    });
    first.map_or(Ok(()), Err)
}

/// Unmounts `path`, then removes it (after its entries, down to the
/// targets' depth).
fn clean_entry(path: &Path, depth: usize, fail: &mut dyn FnMut(&Path, &'static str, io::Error)) {
    if let Err(e) = unmount_all(path) {
        return fail(path, "unmounting", e);
    }
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return,
        Err(e) => return fail(path, "inspecting", e),
    };
    if meta.is_dir() {
        if depth < TARGET_DEPTH {
            match fs::read_dir(path) {
                Ok(entries) => {
                    for entry in entries {
                        match entry {
                            Ok(entry) => clean_entry(&entry.path(), depth + 1, fail),
                            Err(e) => fail(path, "listing", e),
                        }
                    }
                }
                Err(e) => return fail(path, "listing", e),
            }
        }
        if let Err(e) = fs::remove_dir(path) {
            fail(path, "removing", e);
        }
    } else if let Err(e) = fs::remove_file(path) {
        fail(path, "removing", e);
    }
}

/// Detaches every mount stacked on `path`.
pub(crate) fn unmount_all(path: &Path) -> io::Result<()> {
    for _ in 0..MAX_STACKED {
        if !is_mount_point(path)? {
            return Ok(());
        }
        unmount_detach(path)?;
    }
    if is_mount_point(path)? {
        return Err(io::Error::other(format!(
            "still mounted after {MAX_STACKED} unmounts"
        )));
    }
    Ok(())
}

/// Whether something is mounted at `path`, by `/proc/self/mountinfo` (a
/// bind mount from the same filesystem has the same device as its parent,
/// so comparing devices would not tell).
pub(crate) fn is_mount_point(path: &Path) -> io::Result<bool> {
    let (parent, Some(name)) = (path.parent(), path.file_name()) else {
        return Ok(true); // `/`
    };
    let parent = match parent {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let key = match fs::canonicalize(parent) {
        Ok(p) => p.join(name),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    Ok(mount_points()?.contains(&key))
}

/// The mount points strictly under the directory `dir` (its canonical
/// path) in this mount namespace: what a pod directory must not hold when
/// it is removed (upstream removes a pod's directory only once its volumes
/// are unmounted). `dir` missing: none.
pub fn mounts_under(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let dir = match fs::canonicalize(dir) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    Ok(mount_points()?
        .into_iter()
        .filter(|m| m != &dir && m.starts_with(&dir))
        .collect())
}

/// The mount points of this mount namespace.
fn mount_points() -> io::Result<Vec<PathBuf>> {
    let table = fs::read("/proc/self/mountinfo")?;
    Ok(table
        .split(|b| *b == b'\n')
        .filter_map(|line| line.split(|b| *b == b' ').nth(4))
        .map(|field| PathBuf::from(OsStr::from_bytes(&unescape_mountinfo(field))))
        .collect())
}

/// Undoes mountinfo's octal escapes (`\040` for a space, …).
fn unescape_mountinfo(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        if field[i] == b'\\' {
            let digits = field.get(i + 1..i + 4).unwrap_or_default();
            if digits.len() == 3 && digits.iter().all(|d| (b'0'..=b'7').contains(d)) {
                let v = digits
                    .iter()
                    .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'));
                if let Ok(b) = u8::try_from(v) {
                    out.push(b);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(field[i]);
        i += 1;
    }
    out
}

// ---- system calls -------------------------------------------------------

pub(crate) fn cpath(path: &Path) -> io::Result<CString> {
    Ok(CString::new(path.as_os_str().as_bytes())?)
}

/// Takes ownership of a descriptor a system call just returned.
fn owned_fd(rc: impl TryInto<RawFd>) -> io::Result<OwnedFd> {
    let fd: RawFd = rc
        .try_into()
        .map_err(|_| io::Error::other("descriptor out of range"))?;
    if fd < 0 {
        return Err(io::Error::other("negative descriptor"));
    }
    // SAFETY: `fd` was just returned by the kernel as a new descriptor, which
    // nothing else owns or will close.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub(crate) fn openat(dir: BorrowedFd<'_>, name: &CStr, flags: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: `name` is NUL-terminated and only read during the call; no
    // O_CREAT, so no mode argument is read.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    owned_fd(fd)
}

fn mkdirat(dir: BorrowedFd<'_>, name: &CStr, mode: libc::mode_t) -> io::Result<()> {
    // SAFETY: `name` is NUL-terminated and only read during the call.
    if unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub(crate) fn fchmod(fd: BorrowedFd<'_>, mode: libc::mode_t) -> io::Result<()> {
    // SAFETY: a plain system call on a descriptor we hold.
    if unsafe { libc::fchmod(fd.as_raw_fd(), mode) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub(crate) fn fstat(fd: BorrowedFd<'_>) -> io::Result<libc::stat> {
    // SAFETY: `libc::stat` is a plain C struct of integers, for which
    // all-zero bytes are a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a writable `stat` the call fills in.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

/// The target of the symlink `fd` (opened with `O_PATH | O_NOFOLLOW`).
fn readlink_fd(fd: BorrowedFd<'_>) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; 256];
    loop {
        // SAFETY: the path is the empty C string (the descriptor itself) and
        // `buf` is writable for the length passed.
        let n = unsafe {
            libc::readlinkat(
                fd.as_raw_fd(),
                c"".as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        let n = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
        if n < buf.len() {
            buf.truncate(n);
            return Ok(buf);
        }
        if buf.len() >= 1 << 16 {
            return Err(io::Error::other("symlink target too long"));
        }
        buf.resize(buf.len() * 2, 0);
    }
}

pub(crate) fn bind_mount(source: &str, target: &Path) -> io::Result<()> {
    let source = CString::new(source)?;
    let target = cpath(target)?;
    // SAFETY: both paths are NUL-terminated and only read during the call;
    // a bind mount takes no filesystem type and no data.
    let rc = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `umount2(path, MNT_DETACH | UMOUNT_NOFOLLOW)`; not mounted is fine.
fn unmount_detach(path: &Path) -> io::Result<()> {
    let c = cpath(path)?;
    // SAFETY: `c` is NUL-terminated and only read during the call.
    if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH | libc::UMOUNT_NOFOLLOW) } < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINVAL) {
            return Err(e);
        }
    }
    Ok(())
}

fn geteuid() -> u32 {
    // SAFETY: geteuid has no arguments and cannot fail.
    unsafe { libc::geteuid() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    static SEQ: AtomicUsize = AtomicUsize::new(0);

    macro_rules! require_root {
        ($test:expr) => {
            if geteuid() != 0 {
                eprintln!("skipping {}: needs root (mount(2))", $test);
                return;
            }
        };
    }

    /// A scratch directory: `vol/` (the volume root), `pod/` (the pod
    /// directory) and `outside/` (host files the container must not reach,
    /// with `outside/b/SECRET`). Dropping it detaches whatever is mounted
    /// beneath it before removing anything.
    struct Scratch {
        dir: PathBuf,
    }

    impl Scratch {
        fn new(tag: &str) -> Scratch {
            let tmp = fs::canonicalize(std::env::temp_dir()).expect("temp dir");
            let dir = tmp.join(format!(
                "rkube-subpath-{tag}-{}-{}",
                std::process::id(),
                SEQ.fetch_add(1, Ordering::Relaxed)
            ));
            fs::create_dir_all(dir.join("vol")).expect("vol");
            fs::create_dir_all(dir.join("pod")).expect("pod");
            fs::create_dir_all(dir.join("outside/b")).expect("outside");
            fs::write(dir.join("outside/b/SECRET"), "host secret").expect("secret");
            Scratch { dir }
        }
        fn vol(&self) -> PathBuf {
            self.dir.join("vol")
        }
        fn pod(&self) -> PathBuf {
            self.dir.join("pod")
        }
        fn outside(&self) -> PathBuf {
            self.dir.join("outside")
        }
        fn target(&self, index: usize) -> PathBuf {
            target_path(&self.pod(), "data", "app", index)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = cleanup(&self.pod());
            let under = |dir: &Path| -> Vec<PathBuf> {
                mount_points()
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|m| m.starts_with(dir))
                    .collect()
            };
            for m in under(&self.dir).iter().rev() {
                let _ = unmount_detach(m);
            }
            if under(&self.dir).is_empty() {
                let _ = fs::remove_dir_all(&self.dir);
            } else {
                eprintln!(
                    "leaving {} behind: still mounted beneath it",
                    self.dir.display()
                );
            }
        }
    }

    /// How many mounts `/proc/self/mountinfo` lists at `path` (read here
    /// independently of the module's parser).
    fn mount_count(path: &Path) -> usize {
        let table = fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
        let want = path.to_str().expect("utf-8 path");
        table
            .lines()
            .filter(|l| l.split(' ').nth(4) == Some(want))
            .count()
    }

    fn symlink(target: impl AsRef<Path>, link: impl AsRef<Path>) {
        std::os::unix::fs::symlink(target, link).expect("symlink");
    }

    fn open_with(
        root: &Path,
        sub: &str,
        create: bool,
        strategy: Strategy,
    ) -> Result<OwnedFd, SubPathError> {
        let names = validate(sub, root)?;
        let cx = Cx {
            sub,
            root,
            names: &names,
        };
        open_checked(&cx, create, strategy)
    }

    const BOTH: [Strategy; 2] = [Strategy::Openat2First, Strategy::WalkOnly];

    fn ino_of_fd(fd: &OwnedFd) -> u64 {
        fstat(fd.as_fd()).expect("fstat").st_ino
    }

    fn ino(path: &Path) -> u64 {
        fs::symlink_metadata(path).expect("stat").ino()
    }

    #[test]
    fn target_path_is_volume_container_index_beneath_volume_subpaths() {
        assert_eq!(
            target_path(Path::new("/var/lib/kubelet/pods/u1"), "data", "app", 2),
            PathBuf::from("/var/lib/kubelet/pods/u1/volume-subpaths/data/app/2")
        );
    }

    #[test]
    fn invalid_subpaths_are_refused_before_anything_is_touched() {
        let s = Scratch::new("invalid");
        type Is = fn(&SubPathError) -> bool;
        let cases: &[(&str, &str, Is)] = &[
            ("", "must not be empty", |e| {
                matches!(e, SubPathError::Empty { .. })
            }),
            ("/etc", "must be a relative path", |e| {
                matches!(e, SubPathError::Absolute { .. })
            }),
            ("/", "must be a relative path", |e| {
                matches!(e, SubPathError::Absolute { .. })
            }),
            ("..", "must not contain '..'", |e| {
                matches!(e, SubPathError::Backstep { .. })
            }),
            ("../x", "must not contain '..'", |e| {
                matches!(e, SubPathError::Backstep { .. })
            }),
            ("a/../b", "must not contain '..'", |e| {
                matches!(e, SubPathError::Backstep { .. })
            }),
            ("a/..", "must not contain '..'", |e| {
                matches!(e, SubPathError::Backstep { .. })
            }),
            ("a\0b", "NUL", |e| matches!(e, SubPathError::Nul { .. })),
        ];
        for (sub, why, is) in cases {
            let e = prepare(&s.vol(), sub, &s.target(0)).expect_err(sub);
            assert!(is(&e), "{sub:?}: {e:?}");
            let msg = e.to_string();
            assert!(msg.contains(&format!("subPath {sub:?}")), "{sub:?}: {msg}");
            assert!(msg.contains(why), "{sub:?}: {msg}");
            for st in BOTH {
                assert!(is(&open_with(&s.vol(), sub, true, st).expect_err(sub)));
            }
        }
        assert!(!s.pod().join(SUBPATH_DIR).exists());
    }

    #[test]
    fn symlink_to_host_root_as_the_subpath_is_refused() {
        let s = Scratch::new("root-link");
        symlink("/", s.vol().join("x"));
        for sub in ["x", "x/etc", "./x/"] {
            for st in BOTH {
                let e = open_with(&s.vol(), sub, true, st).expect_err(sub);
                let SubPathError::SymlinkEscapes {
                    component,
                    link,
                    target,
                    ..
                } = &e
                else {
                    panic!("{sub} {st:?}: {e:?}");
                };
                assert_eq!(
                    (component.as_str(), link.as_str(), target.as_str()),
                    ("x", "x", "/")
                );
                let msg = e.to_string();
                assert!(
                    msg.contains(r#"component "x" is a symlink to "/""#)
                        && msg.contains("refusing to follow it"),
                    "{msg}"
                );
            }
        }
        require_root!("symlink_to_host_root_as_the_subpath_is_refused (mount part)");
        for st in BOTH {
            let e = prepare_with(&s.vol(), "x", &s.target(0), st).expect_err("mounted /");
            assert!(matches!(e, SubPathError::SymlinkEscapes { .. }), "{e:?}");
            assert_eq!(mount_count(&s.target(0)), 0);
            assert!(!s.target(0).exists());
        }
    }

    #[test]
    fn intermediate_symlink_out_of_the_volume_is_refused() {
        let s = Scratch::new("mid-link");
        symlink(s.outside(), s.vol().join("a"));
        symlink("../outside", s.vol().join("up"));
        fs::create_dir(s.vol().join("d")).expect("d");
        symlink("../../outside", s.vol().join("d/up2"));
        // Inside, then out: `d/l` -> `..` (the root) -> `..` (above it).
        symlink("../..", s.vol().join("d/l"));
        let cases = [
            ("a/b", "a", "a", "an absolute symlink"),
            ("a/b/SECRET", "a", "a", "an absolute symlink"),
            ("up/b", "up", "up", "climbs above the volume root"),
            ("d/up2/b", "d/up2", "d/up2", "climbs above the volume root"),
            (
                "d/l/outside/b",
                "d/l",
                "d/l",
                "climbs above the volume root",
            ),
        ];
        for (sub, want_component, want_link, why) in cases {
            for st in BOTH {
                let e = open_with(&s.vol(), sub, true, st).expect_err(sub);
                let SubPathError::SymlinkEscapes {
                    component, link, ..
                } = &e
                else {
                    panic!("{sub} {st:?}: {e:?}");
                };
                assert_eq!(
                    (component.as_str(), link.as_str()),
                    (want_component, want_link),
                    "{sub}"
                );
                assert!(e.to_string().contains(why), "{e}");
            }
        }
        // Nothing was created outside on the way.
        assert_eq!(fs::read_dir(s.outside()).expect("outside").count(), 1);
    }

    #[test]
    fn final_symlink_out_of_the_volume_is_refused_and_nothing_is_created_through_it() {
        let s = Scratch::new("final-link");
        symlink("/etc/hostname", s.vol().join("f"));
        symlink(s.outside().join("nothere"), s.vol().join("g"));
        symlink("nothere/deeper", s.vol().join("dangling"));
        for st in BOTH {
            for sub in ["f", "g"] {
                let e = open_with(&s.vol(), sub, true, st).expect_err(sub);
                assert!(matches!(e, SubPathError::SymlinkEscapes { .. }), "{e:?}");
            }
            // A dangling symlink inside the volume: not created through.
            let e = open_with(&s.vol(), "dangling", true, st).expect_err("dangling");
            assert!(
                matches!(&e, SubPathError::NotFound { component, via_symlink: true, .. } if component == "dangling"),
                "{e:?}"
            );
        }
        assert!(!s.outside().join("nothere").exists());
        assert!(!s.vol().join("nothere").exists());
    }

    #[test]
    fn symlinks_that_stay_beneath_the_root_are_followed() {
        // The atomic writer's layout (ConfigMap, Secret, downwardAPI, projected).
        let s = Scratch::new("inside-link");
        let v = s.vol();
        fs::create_dir_all(v.join("..2026_01_01/downward")).expect("ts");
        fs::write(v.join("..2026_01_01/key"), "value").expect("key");
        fs::write(v.join("..2026_01_01/downward/podname"), "pod").expect("podname");
        symlink("..2026_01_01", v.join("..data"));
        symlink("..data/key", v.join("key"));
        symlink("..data/downward", v.join("downward"));
        fs::create_dir(v.join("dir")).expect("dir");
        symlink("../..data", v.join("dir/back"));
        let cases = [
            ("key", v.join("..2026_01_01/key")),
            ("downward/podname", v.join("..2026_01_01/downward/podname")),
            ("dir/back/key", v.join("..2026_01_01/key")),
            ("..data", v.join("..2026_01_01")),
            (".", v.clone()),
        ];
        for (sub, real) in cases {
            for st in BOTH {
                let fd =
                    open_with(&v, sub, false, st).unwrap_or_else(|e| panic!("{sub} {st:?}: {e}"));
                assert_eq!(ino_of_fd(&fd), ino(&real), "{sub} {st:?}");
            }
        }
        assert!(open_beneath(&v, "key", false).is_ok());
    }

    #[test]
    fn symlink_loops_are_refused() {
        let s = Scratch::new("loop");
        symlink("b", s.vol().join("a"));
        symlink("a", s.vol().join("b"));
        for st in BOTH {
            let e = open_with(&s.vol(), "a", true, st).expect_err("loop");
            assert!(
                matches!(e, SubPathError::TooManySymlinks { .. }),
                "{st:?}: {e:?}"
            );
        }
    }

    #[test]
    fn walk_creates_missing_nested_directories_with_the_root_mode() {
        let s = Scratch::new("mkdir");
        let mode = 0o2775;
        fs::set_permissions(s.vol(), std::os::unix::fs::PermissionsExt::from_mode(mode))
            .expect("chmod");
        fs::create_dir(s.vol().join("a")).expect("a");
        for (sub, st) in [
            ("a/b/c", Strategy::WalkOnly),
            ("x/y//z/.", Strategy::Openat2First),
        ] {
            let fd = open_with(&s.vol(), sub, true, st).unwrap_or_else(|e| panic!("{sub}: {e}"));
            let real = s.vol().join(sub);
            assert_eq!(ino_of_fd(&fd), ino(&real), "{sub}");
            assert!(real.is_dir());
        }
        for created in ["a/b", "a/b/c", "x", "x/y", "x/y/z"] {
            let m = fs::symlink_metadata(s.vol().join(created)).expect("created");
            assert_eq!(m.mode() & 0o7777, mode, "{created}");
        }
        // `a` existed: its mode is not touched.
        assert_ne!(
            fs::symlink_metadata(s.vol().join("a")).expect("a").mode() & 0o7777,
            mode
        );
    }

    #[test]
    fn a_file_on_the_way_is_not_a_directory_and_missing_is_not_found_without_create() {
        let s = Scratch::new("notdir");
        fs::write(s.vol().join("f"), "x").expect("f");
        for st in BOTH {
            for create in [true, false] {
                let e = open_with(&s.vol(), "f/x", create, st).expect_err("f/x");
                assert!(
                    matches!(&e, SubPathError::NotADirectory { component, .. } if component == "f"),
                    "{e:?}"
                );
            }
            let e = open_with(&s.vol(), "m/n", false, st).expect_err("m/n");
            assert!(
                matches!(&e, SubPathError::NotFound { component, via_symlink: false, .. } if component == "m"),
                "{e:?}"
            );
            assert!(
                e.to_string().contains(r#"component "m" does not exist"#),
                "{e}"
            );
        }
        assert!(!s.vol().join("m").exists());
    }

    #[test]
    fn openat2_itself_refuses_what_leaves_the_root() {
        let s = Scratch::new("openat2");
        let root = open_root(&s.vol()).expect("root");
        symlink("/", s.vol().join("x"));
        symlink("..", s.vol().join("up"));
        fs::create_dir(s.vol().join("d")).expect("d");
        symlink("d/../d", s.vol().join("in"));
        // Above the root and back: refused all the same.
        symlink("../vol/d", s.vol().join("back"));
        match openat2_beneath(root.as_fd(), &["d"]) {
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
                eprintln!("skipping openat2_itself_refuses_what_leaves_the_root: no openat2 here");
                return;
            }
            r => assert_eq!(ino_of_fd(&r.expect("d")), ino(&s.vol().join("d"))),
        }
        // The walk gives the same answers.
        let walk_ok = open_with(&s.vol(), "in", false, Strategy::WalkOnly).expect("walk in");
        assert_eq!(ino_of_fd(&walk_ok), ino(&s.vol().join("d")));
        let e = open_with(&s.vol(), "back", false, Strategy::WalkOnly).expect_err("walk back");
        assert!(matches!(e, SubPathError::SymlinkEscapes { .. }), "{e:?}");
        assert_eq!(
            ino_of_fd(&openat2_beneath(root.as_fd(), &["in"]).expect("in")),
            ino(&s.vol().join("d"))
        );
        for names in [
            &["x"][..],
            &["x", "etc"],
            &["up"],
            &["up", "outside"],
            &["back"],
        ] {
            let e = openat2_beneath(root.as_fd(), names).expect_err("escape");
            assert_eq!(e.raw_os_error(), Some(libc::EXDEV), "{names:?}");
        }
        // Magic links (/proc/self/fd/N) are refused too.
        let proc_root = open_root(Path::new("/proc/self")).expect("/proc/self");
        let e = openat2_beneath(proc_root.as_fd(), &["cwd"]).expect_err("magic link");
        assert_eq!(e.raw_os_error(), Some(libc::ELOOP));
    }

    #[test]
    fn check_beneath_refuses_a_descriptor_outside_the_root() {
        let s = Scratch::new("beneath");
        let root = open_root(&s.vol()).expect("root");
        let out = open_root(&s.outside()).expect("outside");
        let cx = Cx {
            sub: "x",
            root: &s.vol(),
            names: &["x"],
        };
        let e = check_beneath(root.as_fd(), out.as_fd(), &cx).expect_err("outside");
        assert!(matches!(e, SubPathError::NotBeneath { .. }), "{e:?}");
        // `vol2` is not beneath `vol`, though its name starts with it.
        fs::create_dir(s.dir.join("vol2")).expect("vol2");
        let sibling = open_root(&s.dir.join("vol2")).expect("vol2");
        assert!(check_beneath(root.as_fd(), sibling.as_fd(), &cx).is_err());
        let inside = open_root(&s.vol()).expect("vol");
        assert!(check_beneath(root.as_fd(), inside.as_fd(), &cx).is_ok());
    }

    #[test]
    fn mounts_under_lists_only_what_is_below() {
        let dir = std::env::temp_dir().join(format!("rkube-mounts-under-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("a/b")).unwrap();
        assert_eq!(mounts_under(&dir).unwrap(), Vec::<PathBuf>::new());
        assert_eq!(
            mounts_under(&dir.join("missing")).unwrap(),
            Vec::<PathBuf>::new()
        );
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            let target = dir.join("a/b");
            let (src, dst) = (cpath(&dir.join("a")).unwrap(), cpath(&target).unwrap());
            // SAFETY: valid NUL-terminated paths.
            let rc = unsafe {
                libc::mount(
                    src.as_ptr(),
                    dst.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND,
                    std::ptr::null(),
                )
            };
            assert_eq!(rc, 0, "bind mount: {}", io::Error::last_os_error());
            let found = mounts_under(&dir);
            // SAFETY: as above.
            unsafe { libc::umount2(dst.as_ptr(), libc::MNT_DETACH) };
            let canonical = fs::canonicalize(&target).unwrap();
            assert_eq!(found.unwrap(), vec![canonical]);
            assert_eq!(
                mounts_under(&target).unwrap(),
                Vec::<PathBuf>::new(),
                "not itself"
            );
        }
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(
            unescape_mountinfo(br"/a\040b\011c\134d"),
            b"/a b\tc\\d".to_vec()
        );
        assert_eq!(unescape_mountinfo(br"/x\04"), br"/x\04".to_vec());
        assert_eq!(unescape_mountinfo(br"\"), br"\".to_vec());
    }

    #[test]
    fn not_root_is_a_clear_error() {
        if geteuid() == 0 {
            eprintln!("skipping not_root_is_a_clear_error: running as root");
            return;
        }
        let s = Scratch::new("notroot");
        let e = prepare(&s.vol(), "a", &s.target(0)).expect_err("not root");
        assert!(matches!(e, SubPathError::NotRoot { .. }), "{e:?}");
        assert!(e.to_string().contains("needs root"), "{e}");
        assert!(!s.vol().join("a").exists());
    }

    #[test]
    fn prepare_creates_a_missing_nested_directory_and_mounts_it() {
        require_root!("prepare_creates_a_missing_nested_directory_and_mounts_it");
        let s = Scratch::new("mount-dir");
        for (i, st) in BOTH.into_iter().enumerate() {
            let sub = format!("a{i}/b/c");
            let target = s.target(i);
            let got = prepare_with(&s.vol(), &sub, &target, st).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(got, target);
            assert!(fs::symlink_metadata(&target).expect("target").is_dir());
            assert_eq!(mount_count(&target), 1);
            fs::write(target.join("hello"), "through the mount").expect("write");
            assert_eq!(
                fs::read_to_string(s.vol().join(&sub).join("hello")).expect("read"),
                "through the mount"
            );
        }
    }

    #[test]
    fn prepare_mounts_a_regular_file_as_a_file() {
        require_root!("prepare_mounts_a_regular_file_as_a_file");
        let s = Scratch::new("mount-file");
        fs::create_dir(s.vol().join("etc")).expect("etc");
        fs::write(s.vol().join("etc/conf.txt"), "v1").expect("conf");
        let target = s.target(0);
        prepare(&s.vol(), "etc/conf.txt", &target).expect("prepare");
        assert!(fs::symlink_metadata(&target).expect("target").is_file());
        assert_eq!(mount_count(&target), 1);
        assert_eq!(fs::read_to_string(&target).expect("read"), "v1");
        fs::write(&target, "v2").expect("write");
        assert_eq!(
            fs::read_to_string(s.vol().join("etc/conf.txt")).expect("read"),
            "v2"
        );
    }

    #[test]
    fn prepare_twice_is_idempotent_and_a_stale_mount_is_replaced() {
        require_root!("prepare_twice_is_idempotent_and_a_stale_mount_is_replaced");
        let s = Scratch::new("idem");
        fs::create_dir(s.vol().join("one")).expect("one");
        fs::write(s.vol().join("one/marker"), "one").expect("marker");
        fs::create_dir(s.vol().join("two")).expect("two");
        fs::write(s.vol().join("two/marker"), "two").expect("marker");
        let target = s.target(0);
        for _ in 0..2 {
            assert_eq!(prepare(&s.vol(), "one", &target).expect("prepare"), target);
            assert_eq!(mount_count(&target), 1);
        }
        // Same target, another subPath (the spec changed, or a stale mount).
        prepare(&s.vol(), "two", &target).expect("prepare two");
        assert_eq!(mount_count(&target), 1);
        assert_eq!(
            fs::read_to_string(target.join("marker")).expect("marker"),
            "two"
        );
        // From a directory to a file on the same target.
        prepare(&s.vol(), "two/marker", &target).expect("prepare file");
        assert_eq!(mount_count(&target), 1);
        assert!(fs::symlink_metadata(&target).expect("target").is_file());
    }

    #[test]
    fn cleanup_unmounts_and_removes_every_target_and_keeps_the_volume() {
        require_root!("cleanup_unmounts_and_removes_every_target_and_keeps_the_volume");
        let s = Scratch::new("cleanup");
        fs::write(s.vol().join("conf"), "keep me").expect("conf");
        let targets = [
            target_path(&s.pod(), "data", "app", 0),
            target_path(&s.pod(), "data", "app", 3),
            target_path(&s.pod(), "data", "sidecar", 1),
            target_path(&s.pod(), "other", "app", 0),
        ];
        let subs = ["dir/a", "conf", "dir", "."];
        for (t, sub) in targets.iter().zip(subs) {
            prepare(&s.vol(), sub, t).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(mount_count(t), 1);
        }
        fs::write(targets[0].join("data"), "in the volume").expect("write");
        // A second mount stacked on one target goes too.
        prepare_with(&s.vol(), "dir", &targets[2], Strategy::WalkOnly).expect("again");
        bind_mount(s.vol().to_str().expect("utf-8"), &targets[2]).expect("stack");
        assert_eq!(mount_count(&targets[2]), 2);

        cleanup(&s.pod()).expect("cleanup");
        for t in &targets {
            assert_eq!(mount_count(t), 0, "{}", t.display());
        }
        assert!(!s.pod().join(SUBPATH_DIR).exists());
        assert!(s.pod().exists());
        assert_eq!(
            fs::read_to_string(s.vol().join("conf")).expect("conf"),
            "keep me"
        );
        assert_eq!(
            fs::read_to_string(s.vol().join("dir/a/data")).expect("data"),
            "in the volume"
        );
        // Nothing left: nothing to do.
        cleanup(&s.pod()).expect("cleanup again");
    }

    #[test]
    fn cleanup_never_removes_recursively() {
        let s = Scratch::new("cleanup-keep");
        let t = target_path(&s.pod(), "data", "app", 0);
        fs::create_dir_all(&t).expect("target");
        fs::write(t.join("precious"), "x").expect("precious");
        let other = target_path(&s.pod(), "data", "app", 1);
        fs::write(&other, "").expect("file target");
        let e = cleanup(&s.pod()).expect_err("not empty");
        assert!(matches!(e, SubPathError::Cleanup { .. }), "{e:?}");
        assert!(t.join("precious").exists());
        // The others were still cleaned.
        assert!(!other.exists());
    }

    #[test]
    fn swapping_a_directory_for_a_symlink_during_prepare_never_mounts_outside() {
        require_root!("swapping_a_directory_for_a_symlink_during_prepare_never_mounts_outside");
        let s = Scratch::new("race");
        fs::create_dir_all(s.vol().join("a/b")).expect("a/b");
        fs::write(s.vol().join("a/b/inside"), "inside").expect("inside");
        symlink(s.outside(), s.vol().join("alt"));
        let stop = Arc::new(AtomicBool::new(false));
        let swapper = {
            let stop = Arc::clone(&stop);
            let a = cpath(&s.vol().join("a")).expect("a");
            let alt = cpath(&s.vol().join("alt")).expect("alt");
            std::thread::spawn(move || {
                let mut swaps = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    // SAFETY: both paths are NUL-terminated.
                    let rc = unsafe {
                        libc::renameat2(
                            libc::AT_FDCWD,
                            a.as_ptr(),
                            libc::AT_FDCWD,
                            alt.as_ptr(),
                            libc::RENAME_EXCHANGE,
                        )
                    };
                    assert_eq!(rc, 0, "renameat2: {}", io::Error::last_os_error());
                    swaps += 1;
                }
                swaps
            })
        };
        let target = s.target(0);
        let (mut mounted, mut refused) = (0, 0);
        for i in 0..400 {
            let st = BOTH[i % 2];
            match prepare_with(&s.vol(), "a/b", &target, st) {
                Ok(t) => {
                    mounted += 1;
                    assert!(!t.join("SECRET").exists(), "mounted the host's directory");
                    assert!(t.join("inside").exists());
                    unmount_detach(&t).expect("unmount");
                }
                Err(SubPathError::SymlinkEscapes { .. }) => refused += 1,
                Err(e) => panic!("{e}"),
            }
        }
        stop.store(true, Ordering::Relaxed);
        let swaps = swapper.join().expect("swapper");
        eprintln!("race: {mounted} mounted, {refused} refused, {swaps} swaps");
        assert_eq!(mount_count(&target), 0);
    }
}
