//! One checkpoint file's entries (upstream's `stateCheckpoint`): read at
//! start, held in memory, and the file rewritten, in one step, whenever a
//! change alters its checksum. Removing a pod changes only the memory, as
//! upstream: the next write drops it. Without a directory (the sim
//! runtime) nothing is read or written.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::checkpoint::{self, CheckpointError, Entries};
use super::{PodResourceInfo, Requirements};

/// Why a checkpoint file cannot be opened.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// It could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// It is not a valid checkpoint (upstream's advice follows).
    #[error("could not restore state from checkpoint {path}: {source}; drain this node and delete the file before restarting the kubelet")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        source: CheckpointError,
    },
}

/// The largest checkpoint read (about 10,000 pods of many containers).
const MAX_BYTES: u64 = 64 << 20;

#[derive(Default)]
struct Inner {
    entries: Entries,
    last_checksum: u64,
}

/// One file's entries.
#[derive(Default)]
pub struct State {
    path: Option<PathBuf>,
    inner: Mutex<Inner>,
}

impl State {
    /// Entries kept in memory only.
    pub fn in_memory() -> State {
        State::default()
    }

    /// The entries of `dir/name`, none when it does not exist yet.
    pub fn open(dir: &Path, name: &str) -> Result<State, StateError> {
        let path = dir.join(name);
        let (entries, last_checksum) = match rkube_util::file::read_text(&path, MAX_BYTES) {
            Ok(text) => {
                checkpoint::decode(text.as_bytes()).map_err(|source| StateError::Invalid {
                    path: path.clone(),
                    source,
                })?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (Entries::new(), 0),
            Err(source) => return Err(StateError::Read { path, source }),
        };
        Ok(State {
            path: Some(path),
            inner: Mutex::new(Inner {
                entries,
                last_checksum,
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes the file when the entries changed since it was last read or
    /// written. A failure is returned (and tried again with the next
    /// change), as upstream's.
    fn store(&self, inner: &mut Inner) -> std::io::Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let (bytes, sum) = checkpoint::encode(&inner.entries);
        if sum == inner.last_checksum {
            return Ok(());
        }
        rkube_util::file::replace_private(path, &bytes).map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("saving the checkpoint {}: {e}", path.display()),
            )
        })?;
        inner.last_checksum = sum;
        Ok(())
    }

    /// Pod `uid`'s entry.
    pub fn pod(&self, uid: &str) -> Option<PodResourceInfo> {
        self.lock().entries.get(uid).cloned()
    }

    /// Pod `uid`'s pod-level resources.
    pub fn pod_level(&self, uid: &str) -> Option<Requirements> {
        self.lock()
            .entries
            .get(uid)
            .and_then(|p| p.pod_level.clone())
    }

    /// Container `name` of pod `uid`.
    pub fn container(&self, uid: &str, name: &str) -> Option<Requirements> {
        self.lock()
            .entries
            .get(uid)
            .and_then(|p| p.containers.as_ref())
            .and_then(|m| m.get(name))
            .cloned()
    }

    /// Sets pod `uid`'s entry.
    pub fn set_pod(&self, uid: &str, info: PodResourceInfo) -> std::io::Result<()> {
        let mut inner = self.lock();
        inner.entries.insert(uid.to_string(), info);
        self.store(&mut inner)
    }

    /// Sets pod `uid`'s entry unless it has one.
    pub fn init_pod(
        &self,
        uid: &str,
        info: impl FnOnce() -> PodResourceInfo,
    ) -> std::io::Result<()> {
        let mut inner = self.lock();
        if inner.entries.contains_key(uid) {
            return Ok(());
        }
        inner.entries.insert(uid.to_string(), info());
        self.store(&mut inner)
    }

    /// Sets container `name` of pod `uid`.
    pub fn set_container(&self, uid: &str, name: &str, r: Requirements) -> std::io::Result<()> {
        let mut inner = self.lock();
        inner
            .entries
            .entry(uid.to_string())
            .or_default()
            .containers
            .get_or_insert_with(Default::default)
            .insert(name.to_string(), r);
        self.store(&mut inner)
    }

    /// Forgets pod `uid` (written with the next change).
    pub fn remove_pod(&self, uid: &str) {
        self.lock().entries.remove(uid);
    }

    /// Forgets every pod `keep` does not hold (written with the next
    /// change).
    pub fn remove_orphans(&self, keep: &dyn Fn(&str) -> bool) {
        self.lock().entries.retain(|uid, _| keep(uid));
    }

    /// The UIDs with an entry.
    pub fn uids(&self) -> Vec<String> {
        self.lock().entries.keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rkube-alloc-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn req(cpu: &str) -> Requirements {
        Requirements {
            requests: [("cpu".to_string(), cpu.to_string())].into(),
            ..Default::default()
        }
    }

    #[test]
    fn changes_are_written_and_read_back() {
        use std::os::unix::fs::PermissionsExt;
        let d = dir("rw");
        let s = State::open(&d, "allocated_pods_state").unwrap();
        assert!(s.pod("u").is_none());
        // Nothing written until something changes.
        assert!(!d.join("allocated_pods_state").exists());
        s.set_container("u", "c", req("100m")).unwrap();
        s.init_pod("v", PodResourceInfo::default).unwrap();
        s.init_pod("v", || unreachable!()).unwrap();
        let f = d.join("allocated_pods_state");
        let mode = std::fs::metadata(&f).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let again = State::open(&d, "allocated_pods_state").unwrap();
        assert_eq!(again.container("u", "c"), Some(req("100m")));
        assert_eq!(again.pod_level("u"), None);
        let m = State::in_memory();
        let with_pod_level = PodResourceInfo {
            pod_level: Some(req("2")),
            ..Default::default()
        };
        m.set_pod("w", with_pod_level).unwrap();
        assert_eq!(m.pod_level("w"), Some(req("2")));
        assert_eq!(again.uids(), ["u", "v"]);
        // A removal is written with the next change.
        again.remove_pod("v");
        assert_eq!(
            State::open(&d, "allocated_pods_state").unwrap().uids(),
            ["u", "v"]
        );
        again.set_container("u", "c", req("200m")).unwrap();
        let third = State::open(&d, "allocated_pods_state").unwrap();
        assert_eq!(third.uids(), ["u"]);
        assert_eq!(third.container("u", "c"), Some(req("200m")));
        third.remove_orphans(&|uid| uid != "u");
        assert!(third.uids().is_empty());
    }

    #[test]
    fn a_corrupt_or_unreadable_file_is_refused_with_its_name() {
        let d = dir("bad");
        let f = d.join("actuated_pods_state");
        std::fs::write(&f, "{\"data\":\"{}\",\"checksum\":1}").unwrap();
        let e = State::open(&d, "actuated_pods_state")
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("actuated_pods_state") && e.contains("corrupted"),
            "{e}"
        );
        std::fs::remove_file(&f).unwrap();
        std::fs::create_dir(&f).unwrap();
        let e = State::open(&d, "actuated_pods_state")
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("actuated_pods_state"), "{e}");
        // In memory: nothing on disk.
        let m = State::in_memory();
        m.set_container("u", "c", req("1")).unwrap();
        // A directory where the file goes: the write fails, and says so.
        let d2 = dir("unwritable");
        let s = State::open(&d2, "allocated_pods_state").unwrap();
        std::fs::create_dir_all(d2.join("allocated_pods_state/x")).unwrap();
        let e = s.set_container("u", "c", req("1")).unwrap_err().to_string();
        assert!(e.contains("allocated_pods_state"), "{e}");
        assert_eq!(m.container("u", "c"), Some(req("1")));
    }
}
