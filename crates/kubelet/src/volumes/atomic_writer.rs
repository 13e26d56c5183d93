//! Writes a volume [`Payload`] so a reader never sees a mix of old and new
//! files, as upstream's `AtomicWriter` (`pkg/volume/util/atomic_writer.go`):
//!
//! ```text
//! <target>/..2026_05_01_10_00_00.1234567   the files (a fresh dir per write)
//! <target>/..data -> ..2026_05_01_10_00_00.1234567
//! <target>/config.yaml -> ..data/config.yaml   (top-level entries only;
//! <target>/conf -> ..data/conf                  nested paths resolve through them)
//! ```
//!
//! A write builds the new timestamped directory completely, points a new
//! `..data_tmp` symlink at it and renames that over `..data` (one atomic
//! step), adds the user-visible symlinks that are missing, removes the
//! visible paths no longer in the payload and then the previous
//! timestamped directory (and any left behind by an interrupted write).
//! Nothing is rewritten when every file already has the payload's content,
//! mode and owner (not group) and no path has to go (upstream compares content only; a
//! changed `defaultMode` is applied here too).
//!
//! Files get exactly the payload's mode (set with `fchmod` after writing,
//! so the umask does not interfere), directories `0755`. With an `fsGroup`
//! the writer does what upstream's `SetVolumeOwnership` does for these
//! read-only volumes: every file and directory is given that group, files
//! gain `0440` and directories `0550` plus setgid (so a `0600` token becomes
//! `0640`); as upstream, a group change that fails is only logged. A
//! projection's `fs_user` makes it the file's owner (failure is an error).
//!
//! Defences, beyond upstream's: the target directory must not be a
//! symlink, `..data` must name a sibling `..` directory, files are created
//! with `O_EXCL | O_NOFOLLOW` in the fresh directory, existing entries are
//! inspected with `lstat` and never followed, a visible symlink pointing
//! anywhere but `..data/NAME` is replaced, and the payload is capped at
//! [`MAX_PAYLOAD_BYTES`].

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{fchown, lchown, symlink, DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use super::payload::{validate_path, FileProjection, Payload};

/// The largest payload one volume may hold: 16 MiB in all. (Upstream has
/// no such cap in the writer; the API server limits each ConfigMap and
/// Secret to 1 MiB, so this only stops a projected volume of many objects
/// from filling the node's memory-backed volume.)
pub const MAX_PAYLOAD_BYTES: usize = 16 << 20;

/// The symlink naming the current timestamped directory.
pub const DATA_DIR: &str = "..data";
/// The new `..data` before it is renamed into place.
const NEW_DATA_DIR: &str = "..data_tmp";
/// Directories' mode.
const DIR_MODE: u32 = 0o755;
/// What `fsGroup` adds to files of a read-only volume (upstream's `roMask`).
const FS_GROUP_FILE_BITS: u32 = 0o440;
/// ... and to directories (`roMask | execMask | setgid`).
const FS_GROUP_DIR_BITS: u32 = 0o440 | 0o110 | 0o2000;

/// Writes `payload` into `target_dir` (created if missing) atomically.
/// Returns whether anything changed (`false`: the payload equals what is
/// there and nothing was touched).
pub fn write(target_dir: &Path, payload: &Payload, fs_group: Option<i64>) -> Result<bool, String> {
    let files = clean_payload(payload)?;
    let gid = fs_group.map(|g| to_id(g, "fsGroup")).transpose()?;
    ensure_target(target_dir)?;
    let current = current_ts_dir(target_dir)?;
    let old = match &current {
        Some(name) => inventory(&target_dir.join(name))?,
        None => None,
    };
    let mut expected = BTreeSet::new();
    for path in files.keys() {
        let mut prefix = String::new();
        for comp in path.split('/') {
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(comp);
            expected.insert(prefix.clone());
        }
    }
    let stale: Vec<String> = old
        .iter()
        .flat_map(|o| o.keys())
        .filter(|p| !expected.contains(*p))
        .cloned()
        .collect();
    let unchanged = match (&current, &old) {
        (Some(ts), Some(old)) if stale.is_empty() => {
            let ts_dir = target_dir.join(ts);
            let mut same = true;
            for (path, f) in &files {
                if !same_file(&ts_dir, path, old.get(path.as_str()), f, gid)? {
                    same = false;
                    break;
                }
            }
            same
        }
        _ => false,
    };

    let mut changed = false;
    let mut new_ts = None;
    if !unchanged {
        if let Some(g) = gid {
            group_own(target_dir, g)?;
        }
        let ts = new_ts_dir(target_dir, gid)?;
        let res = write_files(&target_dir.join(&ts), &files, gid)
            .and_then(|()| swap_data_link(target_dir, &ts));
        if let Err(e) = res {
            let _ = fs::remove_dir_all(target_dir.join(&ts));
            return Err(e);
        }
        changed = true;
        new_ts = Some(ts);
    }
    changed |= link_visible(target_dir, &files, gid)?;
    changed |= unlink_removed(target_dir, &stale)?;
    if let Some(ts) = new_ts {
        remove_old_ts_dirs(target_dir, &ts)?;
    }
    Ok(changed)
}

/// The payload with every path validated and cleaned, its size capped and
/// no path both a file and a directory.
fn clean_payload(payload: &Payload) -> Result<BTreeMap<String, &FileProjection>, String> {
    let total: usize = payload.values().map(|f| f.data.len()).sum();
    if total > MAX_PAYLOAD_BYTES {
        return Err(format!(
            "volume payload of {total} bytes exceeds rkube's limit of {MAX_PAYLOAD_BYTES} bytes \
             (the API server limits each ConfigMap and Secret to 1 MiB)"
        ));
    }
    let mut files = BTreeMap::new();
    for (path, f) in payload {
        let clean = validate_path(path)?;
        if files.insert(clean.clone(), f).is_some() {
            return Err(format!("invalid payload: two paths name {clean:?}"));
        }
    }
    for path in files.keys() {
        let mut prefix = String::new();
        let comps: Vec<&str> = path.split('/').collect();
        for comp in &comps[..comps.len() - 1] {
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(comp);
            if files.contains_key(&prefix) {
                return Err(format!(
                    "invalid payload: {prefix:?} is both a file and a directory"
                ));
            }
        }
    }
    Ok(files)
}

fn to_id(id: i64, what: &str) -> Result<u32, String> {
    u32::try_from(id).map_err(|_| format!("invalid {what} {id}"))
}

fn io_err(what: &str, path: &Path, e: io::Error) -> String {
    format!("{what} {}: {e}", path.display())
}

/// The target directory exists and is a real directory.
fn ensure_target(target: &Path) -> Result<(), String> {
    match fs::symlink_metadata(target) {
        Ok(m) if m.file_type().is_symlink() => Err(format!(
            "refusing to write through symlink {}",
            target.display()
        )),
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(format!("{} is not a directory", target.display())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            DirBuilder::new()
                .recursive(true)
                .mode(DIR_MODE)
                .create(target)
                .map_err(|e| io_err("creating", target, e))?;
            fs::set_permissions(target, fs::Permissions::from_mode(DIR_MODE))
                .map_err(|e| io_err("chmod", target, e))
        }
        Err(e) => Err(io_err("inspecting", target, e)),
    }
}

/// The name of the timestamped directory `..data` points at, refusing a
/// link that leads anywhere but a sibling `..` directory.
fn current_ts_dir(target: &Path) -> Result<Option<String>, String> {
    let link = target.join(DATA_DIR);
    match fs::symlink_metadata(&link) {
        Ok(m) if m.file_type().is_symlink() => {}
        Ok(_) => return Err(format!("{} is not a symlink", link.display())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err("inspecting", &link, e)),
    }
    let dest = fs::read_link(&link).map_err(|e| io_err("reading link", &link, e))?;
    let name = dest.to_str().unwrap_or_default();
    let sibling = !name.contains('/')
        && name.starts_with("..")
        && name.len() > 2
        && name != DATA_DIR
        && name != NEW_DATA_DIR;
    if !sibling {
        return Err(format!(
            "refusing to write: {} points to {}, outside the volume",
            link.display(),
            dest.display()
        ));
    }
    Ok(Some(name.to_string()))
}

/// What a path in a timestamped directory is.
#[derive(Debug)]
enum Entry {
    Dir,
    File { mode: u32, uid: u32, len: u64 },
    Other,
}

/// Every path beneath `root` (relative, `/`-separated), found with `lstat`
/// and never following a symlink; `None` if `root` is gone.
fn inventory(root: &Path) -> Result<Option<BTreeMap<String, Entry>>, String> {
    match fs::symlink_metadata(root) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(format!("{} is not a directory", root.display())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err("inspecting", root, e)),
    }
    let mut out = BTreeMap::new();
    let mut todo: Vec<(PathBuf, String)> = vec![(root.to_path_buf(), String::new())];
    while let Some((dir, rel)) = todo.pop() {
        let entries = fs::read_dir(&dir).map_err(|e| io_err("reading", &dir, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| io_err("reading", &dir, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            let rel = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            let m = fs::symlink_metadata(&path).map_err(|e| io_err("inspecting", &path, e))?;
            let kind = if m.is_dir() {
                todo.push((path, rel.clone()));
                Entry::Dir
            } else if m.is_file() {
                Entry::File {
                    mode: m.mode() & 0o7777,
                    uid: m.uid(),
                    len: m.len(),
                }
            } else {
                Entry::Other
            };
            out.insert(rel, kind);
        }
    }
    Ok(Some(out))
}

/// The mode a file ends with.
fn final_mode(mode: u32, gid: Option<u32>) -> u32 {
    if gid.is_some() {
        mode | FS_GROUP_FILE_BITS
    } else {
        mode
    }
}

/// Whether `path` in the current timestamped directory already is `f`.
fn same_file(
    ts_dir: &Path,
    path: &str,
    entry: Option<&Entry>,
    f: &FileProjection,
    gid: Option<u32>,
) -> Result<bool, String> {
    let Some(Entry::File { mode, uid, len }) = entry else {
        return Ok(false);
    };
    // The group is not compared: a pod's fsGroup cannot change, and a
    // group change that failed (only logged, as upstream) must not make
    // every sync rewrite the volume.
    let owner_ok = f.fs_user.is_none_or(|u| i64::from(*uid) == u);
    if *mode != final_mode(f.mode, gid) || !owner_ok || *len != f.data.len() as u64 {
        return Ok(false);
    }
    let full = ts_dir.join(path);
    let mut file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&full)
        .map_err(|e| io_err("opening", &full, e))?;
    let mut on_disk = Vec::with_capacity(f.data.len());
    file.read_to_end(&mut on_disk)
        .map_err(|e| io_err("reading", &full, e))?;
    Ok(on_disk == f.data)
}

/// Gives a directory the `fsGroup` (best effort, as upstream) and its bits.
fn group_own(dir: &Path, gid: u32) -> Result<(), String> {
    let m = fs::symlink_metadata(dir).map_err(|e| io_err("inspecting", dir, e))?;
    if m.gid() != gid {
        if let Err(e) = lchown(dir, None, Some(gid)) {
            tracing::warn!(path = %dir.display(), error = %e, "setting the volume's fsGroup failed");
        }
    }
    let want = (m.mode() & 0o7777) | FS_GROUP_DIR_BITS;
    if m.mode() & 0o7777 != want {
        fs::set_permissions(dir, fs::Permissions::from_mode(want))
            .map_err(|e| io_err("chmod", dir, e))?;
    }
    Ok(())
}

/// Sets a freshly made directory's mode and group through a descriptor
/// opened without following symlinks.
fn finish_dir(dir: &Path, gid: Option<u32>) -> Result<(), String> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_DIRECTORY)
        .open(dir)
        .map_err(|e| io_err("opening", dir, e))?;
    let mut mode = DIR_MODE;
    if let Some(g) = gid {
        if let Err(e) = fchown(&f, None, Some(g)) {
            tracing::warn!(path = %dir.display(), error = %e, "setting the volume's fsGroup failed");
        }
        mode |= FS_GROUP_DIR_BITS;
    }
    f.set_permissions(fs::Permissions::from_mode(mode))
        .map_err(|e| io_err("chmod", dir, e))
}

static SEQ: AtomicU64 = AtomicU64::new(0);

/// Makes `..<UTC timestamp>.<suffix>` in `target` and returns its name.
fn new_ts_dir(target: &Path, gid: Option<u32>) -> Result<String, String> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let stamp = utc_stamp(now.as_secs());
    let mut last = None;
    for _ in 0..16 {
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let mix = u64::from(now.subsec_nanos())
            ^ (u64::from(std::process::id()) << 20)
            ^ seq.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let name = format!("..{stamp}.{}", mix % 10_000_000_000);
        let path = target.join(&name);
        match DirBuilder::new().mode(0o700).create(&path) {
            Ok(()) => {
                finish_dir(&path, gid)?;
                return Ok(name);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(io_err("creating", &path, e)),
        }
    }
    Err(format!(
        "creating a timestamped directory in {}: {}",
        target.display(),
        last.map(|e| e.to_string()).unwrap_or_default()
    ))
}

/// `2006_01_02_15_04_05` (Go's layout upstream uses) for `secs` since the
/// epoch, in UTC.
fn utc_stamp(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}_{month:02}_{day:02}_{:02}_{:02}_{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Whether `name` is a timestamped directory this writer (or upstream's)
/// made: `..YYYY_MM_DD_HH_MM_SS.<suffix>`.
fn is_ts_dir_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("..") else {
        return false;
    };
    let b = rest.as_bytes();
    if b.len() < 21 || b[19] != b'.' {
        return false;
    }
    b[..19].iter().enumerate().all(|(i, c)| match i {
        4 | 7 | 10 | 13 | 16 => *c == b'_',
        _ => c.is_ascii_digit(),
    })
}

/// Writes every file into the fresh directory `dir`.
fn write_files(
    dir: &Path,
    files: &BTreeMap<String, &FileProjection>,
    gid: Option<u32>,
) -> Result<(), String> {
    for (path, f) in files {
        let comps: Vec<&str> = path.split('/').collect();
        let mut parent = dir.to_path_buf();
        for comp in &comps[..comps.len() - 1] {
            parent.push(comp);
            match DirBuilder::new().mode(0o700).create(&parent) {
                Ok(()) => finish_dir(&parent, gid)?,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    let m = fs::symlink_metadata(&parent)
                        .map_err(|e| io_err("inspecting", &parent, e))?;
                    if !m.is_dir() {
                        return Err(format!("{} is not a directory", parent.display()));
                    }
                }
                Err(e) => return Err(io_err("creating", &parent, e)),
            }
        }
        let full = dir.join(path);
        write_file(&full, f, gid)?;
    }
    Ok(())
}

fn write_file(full: &Path, f: &FileProjection, gid: Option<u32>) -> Result<(), String> {
    let mut file: File = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(full)
        .map_err(|e| io_err("creating", full, e))?;
    file.write_all(&f.data)
        .map_err(|e| io_err("writing", full, e))?;
    if let Some(u) = f.fs_user {
        let uid = to_id(u, "file owner")?;
        fchown(&file, Some(uid), None).map_err(|e| io_err("chown", full, e))?;
    }
    if let Some(g) = gid {
        if let Err(e) = fchown(&file, None, Some(g)) {
            tracing::warn!(path = %full.display(), error = %e, "setting the volume's fsGroup failed");
        }
    }
    file.set_permissions(fs::Permissions::from_mode(final_mode(f.mode, gid)))
        .map_err(|e| io_err("chmod", full, e))
}

/// Points `..data` at `ts` in one rename.
fn swap_data_link(target: &Path, ts: &str) -> Result<(), String> {
    let tmp = target.join(NEW_DATA_DIR);
    match fs::symlink_metadata(&tmp) {
        Ok(m) if m.file_type().is_symlink() => {
            fs::remove_file(&tmp).map_err(|e| io_err("removing", &tmp, e))?
        }
        Ok(_) => return Err(format!("{} is not a symlink", tmp.display())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err("inspecting", &tmp, e)),
    }
    symlink(ts, &tmp).map_err(|e| io_err("creating symlink", &tmp, e))?;
    let data = target.join(DATA_DIR);
    fs::rename(&tmp, &data).map_err(|e| {
        let _ = fs::remove_file(&tmp);
        io_err("renaming symlink to", &data, e)
    })
}

/// Adds (or repairs) `NAME -> ..data/NAME` for every top-level name;
/// returns whether one was made.
fn link_visible(
    target: &Path,
    files: &BTreeMap<String, &FileProjection>,
    gid: Option<u32>,
) -> Result<bool, String> {
    // Top-level name → the owner of the file it is (nested: none).
    let mut names: BTreeMap<&str, Option<i64>> = BTreeMap::new();
    for (path, f) in files {
        match path.split_once('/') {
            None => {
                names.insert(path, f.fs_user);
            }
            Some((top, _)) => {
                names.entry(top).or_insert(None);
            }
        }
    }
    let mut changed = false;
    for (name, owner) in names {
        let visible = target.join(name);
        let want = Path::new(DATA_DIR).join(name);
        match fs::symlink_metadata(&visible) {
            Ok(m) if m.file_type().is_symlink() => {
                let dest =
                    fs::read_link(&visible).map_err(|e| io_err("reading link", &visible, e))?;
                if dest == want {
                    continue;
                }
                fs::remove_file(&visible).map_err(|e| io_err("removing", &visible, e))?;
            }
            Ok(m) => {
                // A real file or directory (a nested volume's mount point,
                // say) is left alone, as upstream does.
                let kind = if m.is_dir() { "directory" } else { "file" };
                tracing::warn!(path = %visible.display(), kind, "not replacing an existing entry of a volume with its symlink");
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("inspecting", &visible, e)),
        }
        symlink(&want, &visible).map_err(|e| io_err("creating symlink", &visible, e))?;
        changed = true;
        if let Some(u) = owner {
            let uid = to_id(u, "file owner")?;
            lchown(&visible, Some(uid), None).map_err(|e| io_err("chown", &visible, e))?;
        }
        if let Some(g) = gid {
            if let Err(e) = lchown(&visible, None, Some(g)) {
                tracing::warn!(path = %visible.display(), error = %e, "setting the volume's fsGroup failed");
            }
        }
    }
    Ok(changed)
}

/// Removes the visible symlinks of top-level paths no longer in the
/// payload (only our own `..data/NAME` links).
fn unlink_removed(target: &Path, stale: &[String]) -> Result<bool, String> {
    let mut changed = false;
    for name in stale.iter().filter(|p| !p.contains('/')) {
        let visible = target.join(name);
        let ours = fs::symlink_metadata(&visible)
            .map(|m| m.file_type().is_symlink())
            .unwrap_or(false)
            && fs::read_link(&visible).ok().as_deref() == Some(&Path::new(DATA_DIR).join(name));
        if ours {
            fs::remove_file(&visible).map_err(|e| io_err("removing", &visible, e))?;
            changed = true;
        }
    }
    Ok(changed)
}

/// Removes every timestamped directory but `keep` (the previous one and
/// any an interrupted write left).
fn remove_old_ts_dirs(target: &Path, keep: &str) -> Result<(), String> {
    let entries = fs::read_dir(target).map_err(|e| io_err("reading", target, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| io_err("reading", target, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name == keep || !is_ts_dir_name(name) {
            continue;
        }
        let path = entry.path();
        let m = fs::symlink_metadata(&path).map_err(|e| io_err("inspecting", &path, e))?;
        let res = if m.is_dir() {
            fs::remove_dir_all(&path)
        } else if m.file_type().is_symlink() || m.is_file() || m.file_type().is_fifo() {
            fs::remove_file(&path)
        } else {
            continue;
        };
        res.map_err(|e| io_err("removing", &path, e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Scratch(crate::scratch::Scratch);

    impl Scratch {
        fn new() -> Self {
            Scratch(crate::scratch::Scratch::new("atomic-writer"))
        }
        fn vol(&self) -> PathBuf {
            self.0.path().join("vol")
        }
    }

    fn file(data: &str, mode: u32) -> FileProjection {
        FileProjection {
            data: data.as_bytes().to_vec(),
            mode,
            fs_user: None,
        }
    }

    fn payload(files: &[(&str, &str, u32)]) -> Payload {
        files
            .iter()
            .map(|(p, d, m)| (p.to_string(), file(d, *m)))
            .collect()
    }

    fn listing(dir: &Path) -> BTreeSet<String> {
        fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    }

    fn data_target(dir: &Path) -> String {
        fs::read_link(dir.join(DATA_DIR))
            .unwrap()
            .to_string_lossy()
            .into_owned()
    }

    fn mode_of(p: &Path) -> u32 {
        fs::metadata(p).unwrap().mode() & 0o7777
    }

    #[test]
    fn first_write_makes_data_link_symlinks_contents_and_exact_modes() {
        let s = Scratch::new();
        let dir = s.vol();
        let p = payload(&[
            ("config.yaml", "a: 1", 0o644),
            ("secret", "s3", 0o400),
            // A umask of 022 would turn these into 0755 / 0644.
            ("run.sh", "#!/bin/sh", 0o777),
            ("shared", "rw", 0o666),
        ]);
        assert!(write(&dir, &p, None).unwrap());
        let ts = data_target(&dir);
        assert!(is_ts_dir_name(&ts), "{ts}");
        assert_eq!(
            listing(&dir),
            [
                DATA_DIR,
                ts.as_str(),
                "config.yaml",
                "run.sh",
                "secret",
                "shared"
            ]
            .into_iter()
            .map(String::from)
            .collect()
        );
        for (name, content, mode) in [
            ("config.yaml", "a: 1", 0o644),
            ("secret", "s3", 0o400),
            ("run.sh", "#!/bin/sh", 0o777),
            ("shared", "rw", 0o666),
        ] {
            let visible = dir.join(name);
            assert!(fs::symlink_metadata(&visible)
                .unwrap()
                .file_type()
                .is_symlink());
            assert_eq!(
                fs::read_link(&visible).unwrap(),
                Path::new("..data").join(name)
            );
            assert_eq!(fs::read_to_string(&visible).unwrap(), content);
            assert_eq!(mode_of(&visible), mode, "{name}");
            assert!(fs::symlink_metadata(dir.join(&ts).join(name))
                .unwrap()
                .is_file());
        }
        assert_eq!(mode_of(&dir.join(&ts)), 0o755);
    }

    #[test]
    fn update_swaps_content_removes_deleted_keys_and_old_dir() {
        let s = Scratch::new();
        let dir = s.vol();
        write(
            &dir,
            &payload(&[("a", "one", 0o644), ("b", "bee", 0o644)]),
            None,
        )
        .unwrap();
        let first = data_target(&dir);
        // Held open across the update: a reader of the old dir keeps a
        // consistent old view until it reopens.
        let old_a = dir.join(&first).join("a");
        assert_eq!(fs::read_to_string(&old_a).unwrap(), "one");

        let changed = write(
            &dir,
            &payload(&[("a", "two", 0o644), ("c", "sea", 0o600)]),
            None,
        )
        .unwrap();
        assert!(changed);
        let second = data_target(&dir);
        assert_ne!(first, second);
        assert_eq!(fs::read_to_string(dir.join("a")).unwrap(), "two");
        assert_eq!(fs::read_to_string(dir.join("c")).unwrap(), "sea");
        assert_eq!(mode_of(&dir.join("c")), 0o600);
        assert!(fs::symlink_metadata(dir.join("b")).is_err(), "b removed");
        assert!(!dir.join(&first).exists(), "old timestamped dir removed");
        assert_eq!(
            listing(&dir),
            [DATA_DIR, second.as_str(), "a", "c"]
                .into_iter()
                .map(String::from)
                .collect()
        );
    }

    #[test]
    fn unchanged_payload_is_not_rewritten() {
        let s = Scratch::new();
        let dir = s.vol();
        let p = payload(&[("a", "one", 0o644), ("d/e", "deep", 0o600)]);
        assert!(write(&dir, &p, None).unwrap());
        let ts = data_target(&dir);
        let inode = |p: &Path| fs::symlink_metadata(p).unwrap().ino();
        let before = (
            listing(&dir),
            inode(&dir.join(&ts)),
            inode(&dir.join(&ts).join("a")),
            inode(&dir.join(DATA_DIR)),
            fs::symlink_metadata(&dir).unwrap().mtime_nsec(),
        );
        assert!(!write(&dir, &p, None).unwrap());
        let after = (
            listing(&dir),
            inode(&dir.join(&ts)),
            inode(&dir.join(&ts).join("a")),
            inode(&dir.join(DATA_DIR)),
            fs::symlink_metadata(&dir).unwrap().mtime_nsec(),
        );
        assert_eq!(before, after);
        // A changed mode alone is a change.
        let p2 = payload(&[("a", "one", 0o640), ("d/e", "deep", 0o600)]);
        assert!(write(&dir, &p2, None).unwrap());
        assert_eq!(mode_of(&dir.join("a")), 0o640);
        assert_ne!(data_target(&dir), ts);
        // So is a missing visible symlink (restored without a rewrite).
        let ts2 = data_target(&dir);
        fs::remove_file(dir.join("a")).unwrap();
        assert!(write(&dir, &p2, None).unwrap());
        assert_eq!(data_target(&dir), ts2);
        assert_eq!(fs::read_to_string(dir.join("a")).unwrap(), "one");
    }

    #[test]
    fn nested_paths_resolve_through_top_level_links() {
        let s = Scratch::new();
        let dir = s.vol();
        let p = payload(&[
            ("a/b/c", "deep", 0o600),
            ("a/x", "1", 0o644),
            ("top", "t", 0o644),
        ]);
        assert!(write(&dir, &p, None).unwrap());
        let ts = data_target(&dir);
        assert_eq!(fs::read_link(dir.join("a")).unwrap(), Path::new("..data/a"));
        assert_eq!(fs::read_to_string(dir.join("a/b/c")).unwrap(), "deep");
        assert_eq!(mode_of(&dir.join("a/b/c")), 0o600);
        assert_eq!(mode_of(&dir.join(&ts).join("a")), 0o755);
        assert_eq!(mode_of(&dir.join(&ts).join("a/b")), 0o755);
        assert!(!dir.join("b").exists(), "only top-level links");

        // Dropping a/x keeps a (still a directory of the payload).
        let p2 = payload(&[("a/b/c", "deep", 0o600), ("top", "t", 0o644)]);
        assert!(write(&dir, &p2, None).unwrap());
        assert!(!dir.join("a/x").exists());
        assert_eq!(fs::read_to_string(dir.join("a/b/c")).unwrap(), "deep");
        // Dropping every file under a removes its link.
        assert!(write(&dir, &payload(&[("top", "t", 0o644)]), None).unwrap());
        assert!(fs::symlink_metadata(dir.join("a")).is_err());
    }

    #[test]
    fn leftover_timestamped_dirs_and_tmp_link_are_cleaned() {
        let s = Scratch::new();
        let dir = s.vol();
        fs::create_dir_all(dir.join("..2020_01_02_03_04_05.42/sub")).unwrap();
        symlink("..2020_01_02_03_04_05.42", dir.join(NEW_DATA_DIR)).unwrap();
        // Not ours: kept.
        fs::create_dir(dir.join("..mine")).unwrap();
        assert!(write(&dir, &payload(&[("a", "1", 0o644)]), None).unwrap());
        let ts = data_target(&dir);
        assert_eq!(
            listing(&dir),
            [DATA_DIR, ts.as_str(), "..mine", "a"]
                .into_iter()
                .map(String::from)
                .collect()
        );
    }

    #[test]
    fn empty_payload_still_makes_the_data_dir() {
        let s = Scratch::new();
        let dir = s.vol();
        assert!(write(&dir, &Payload::new(), None).unwrap());
        let ts = data_target(&dir);
        assert_eq!(fs::read_dir(dir.join(&ts)).unwrap().count(), 0);
        assert!(!write(&dir, &Payload::new(), None).unwrap());
    }

    #[test]
    fn symlinks_out_of_the_volume_are_refused_or_replaced() {
        let s = Scratch::new();
        let outside = s.0.path().join("outside");
        fs::create_dir(&outside).unwrap();
        fs::write(outside.join("a"), "theirs").unwrap();

        // The target itself a symlink.
        let link_target = s.0.path().join("linked");
        symlink(&outside, &link_target).unwrap();
        let err = write(&link_target, &payload(&[("a", "1", 0o644)]), None).unwrap_err();
        assert!(err.contains("refusing to write through symlink"), "{err}");
        assert_eq!(fs::read_to_string(outside.join("a")).unwrap(), "theirs");

        // ..data leading out.
        let dir = s.vol();
        fs::create_dir(&dir).unwrap();
        symlink(&outside, dir.join(DATA_DIR)).unwrap();
        let err = write(&dir, &payload(&[("a", "1", 0o644)]), None).unwrap_err();
        assert!(err.contains("outside the volume"), "{err}");
        fs::remove_file(dir.join(DATA_DIR)).unwrap();

        // A visible entry pointing out is replaced by ours.
        symlink(outside.join("a"), dir.join("a")).unwrap();
        assert!(write(&dir, &payload(&[("a", "1", 0o644)]), None).unwrap());
        assert_eq!(fs::read_link(dir.join("a")).unwrap(), Path::new("..data/a"));
        assert_eq!(fs::read_to_string(dir.join("a")).unwrap(), "1");
        assert_eq!(fs::read_to_string(outside.join("a")).unwrap(), "theirs");
    }

    #[test]
    fn fs_group_and_fs_user_set_ownership_as_upstream() {
        let s = Scratch::new();
        let me = fs::metadata(s.0.path()).unwrap();
        // As root, other ids prove the chown happened; else only our own
        // ids are ours to give.
        let (uid, gid) = if me.uid() == 0 {
            (12_345, 23_456)
        } else {
            (me.uid(), me.gid())
        };
        let dir = s.vol();
        let mut p = payload(&[("ca.crt", "ca", 0o644), ("sub/x", "x", 0o600)]);
        p.insert(
            "token".into(),
            FileProjection {
                data: b"tok".to_vec(),
                mode: 0o600,
                fs_user: Some(i64::from(uid)),
            },
        );
        assert!(write(&dir, &p, Some(i64::from(gid))).unwrap());
        let ts = data_target(&dir);
        let meta = |rel: &str| fs::metadata(dir.join(rel)).unwrap();
        assert_eq!(meta("token").mode() & 0o7777, 0o640, "0600 + group read");
        assert_eq!(meta("token").uid(), uid);
        assert_eq!(meta("token").gid(), gid);
        assert_eq!(meta("ca.crt").mode() & 0o7777, 0o644);
        assert_eq!(meta("sub/x").mode() & 0o7777, 0o640);
        assert_eq!(meta(&ts).mode() & 0o7777, 0o2755);
        assert_eq!(meta(&format!("{ts}/sub")).mode() & 0o7777, 0o2755);
        assert_eq!(meta("").mode() & 0o2000, 0o2000, "target dir setgid");
        // Same payload and group: nothing to do.
        assert!(!write(&dir, &p, Some(i64::from(gid))).unwrap());
        // Without the group the modes are the payload's again.
        assert!(write(&dir, &p, None).unwrap());
        assert_eq!(meta("token").mode() & 0o7777, 0o600);
    }

    #[test]
    fn invalid_and_oversized_payloads_are_refused() {
        let s = Scratch::new();
        let dir = s.vol();
        let err = write(&dir, &payload(&[("../x", "1", 0o644)]), None).unwrap_err();
        assert_eq!(err, "invalid path: must not contain '..': ../x");
        let err = write(
            &dir,
            &payload(&[("a", "1", 0o644), ("a/b", "2", 0o644)]),
            None,
        )
        .unwrap_err();
        assert_eq!(err, "invalid payload: \"a\" is both a file and a directory");
        let err = write(
            &dir,
            &payload(&[("a", "1", 0o644), ("./a", "2", 0o644)]),
            None,
        )
        .unwrap_err();
        assert_eq!(err, "invalid payload: two paths name \"a\"");
        let mut big = Payload::new();
        big.insert(
            "big".into(),
            FileProjection {
                data: vec![0; MAX_PAYLOAD_BYTES + 1],
                mode: 0o644,
                fs_user: None,
            },
        );
        let err = write(&dir, &big, None).unwrap_err();
        assert!(err.contains("exceeds") && err.contains("1 MiB"), "{err}");
        assert!(!dir.join(DATA_DIR).exists(), "nothing written");
    }

    #[test]
    fn timestamps_are_utc_in_gos_layout() {
        assert_eq!(utc_stamp(0), "1970_01_01_00_00_00");
        assert_eq!(utc_stamp(1_609_459_200 + 3661), "2021_01_01_01_01_01");
        assert_eq!(utc_stamp(951_825_600), "2000_02_29_12_00_00");
        assert!(is_ts_dir_name("..2021_01_01_01_01_01.123"));
        assert!(!is_ts_dir_name("..data"));
        assert!(!is_ts_dir_name("..2021_01_01_01_01_01."));
        assert!(!is_ts_dir_name("..2021-01-01_01_01_01.1"));
    }
}
