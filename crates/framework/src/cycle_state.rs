//! Per-scheduling-cycle state: data plugins compute in PreFilter/PreScore and
//! read in Filter/Score, keyed by plugin name, plus the skip sets.
//!
//! Entries are shared (`Arc`), so cloning a state is cheap: preemption and
//! nominated-pod filtering clone the state and let PreFilter extensions
//! (`add_pod`/`remove_pod`) replace their entries in the clone, the way
//! upstream's `CycleState.Clone()` does.

use std::any::Any;
use std::sync::Arc;

/// Keys are plugin names, a handful per cycle, looked up per node per plugin
/// on the hot path: a short list compared by pointer first beats hashing.
/// Lengths first: most keys differ in length, and a miss scans every entry.
#[inline]
fn same(a: &'static str, b: &str) -> bool {
    a.len() == b.len() && (std::ptr::eq(a.as_ptr(), b.as_ptr()) || a == b)
}

/// A small set of plugin names.
#[derive(Debug, Default, Clone)]
pub struct NameSet(Vec<&'static str>);

impl NameSet {
    /// Adds a name.
    pub fn insert(&mut self, name: &'static str) {
        if !self.contains(name) {
            self.0.push(name);
        }
    }

    /// Is the name in the set?
    pub fn contains(&self, name: &str) -> bool {
        self.0.iter().any(|n| same(n, name))
    }

    /// Number of names.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

type Entry = (&'static str, Arc<dyn Any + Send + Sync>);

/// State for one pod's scheduling cycle.
#[derive(Default, Clone)]
pub struct CycleState {
    data: Vec<Entry>,
    /// Plugins whose PreFilter returned Skip (their Filter is not run).
    pub skip_filter: NameSet,
    /// Plugins whose PreScore returned Skip (their Score is not run).
    pub skip_score: NameSet,
    /// Plugins whose PreBindPreFlight returned Skip (their PreBind is not run).
    pub skip_pre_bind: NameSet,
    /// Time each plugin call in this cycle for the metrics recorder
    /// (upstream's `recordPluginMetrics`, set for a sample of cycles).
    pub record_plugin_metrics: bool,
}

impl std::fmt::Debug for CycleState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CycleState")
            .field(
                "keys",
                &self.data.iter().map(|(k, _)| *k).collect::<Vec<_>>(),
            )
            .field("skip_filter", &self.skip_filter)
            .field("skip_score", &self.skip_score)
            .finish()
    }
}

impl CycleState {
    /// New empty state.
    pub fn new() -> Self {
        Self::default()
    }

    /// Stores (or replaces) a plugin's data.
    pub fn write<T: Any + Send + Sync>(&mut self, key: &'static str, value: T) {
        match self.entry_mut(key) {
            Some(e) => *e = Arc::new(value),
            None => self.data.push((key, Arc::new(value))),
        }
    }

    fn entry_mut(&mut self, key: &str) -> Option<&mut Arc<dyn Any + Send + Sync>> {
        self.data
            .iter_mut()
            .find(|(k, _)| same(k, key))
            .map(|(_, v)| v)
    }

    /// Reads a plugin's data.
    pub fn read<T: Any + Send + Sync>(&self, key: &'static str) -> Option<&T> {
        self.data
            .iter()
            .find(|(k, _)| same(k, key))
            .and_then(|(_, b)| b.downcast_ref::<T>())
    }

    /// Mutable access to a plugin's data; copies it first when the entry is
    /// shared with a clone of this state (copy on write).
    pub fn read_mut<T: Any + Send + Sync + Clone>(&mut self, key: &'static str) -> Option<&mut T> {
        let entry = self.entry_mut(key)?;
        if Arc::get_mut(entry).is_none() {
            let copy: T = entry.downcast_ref::<T>()?.clone();
            *entry = Arc::new(copy);
        }
        Arc::get_mut(entry)?.downcast_mut::<T>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clone_is_copy_on_write() {
        let mut a = CycleState::new();
        a.write("k", vec![1, 2]);
        let mut b = a.clone();
        b.read_mut::<Vec<i32>>("k").unwrap().push(3);
        assert_eq!(a.read::<Vec<i32>>("k").unwrap(), &vec![1, 2]);
        assert_eq!(b.read::<Vec<i32>>("k").unwrap(), &vec![1, 2, 3]);
        assert!(b.read_mut::<String>("k").is_none());
        b.write("k", 7u8);
        assert_eq!(b.read::<u8>("k"), Some(&7));
        assert_eq!(a.read::<Vec<i32>>("k").unwrap(), &vec![1, 2]);
    }

    #[test]
    fn name_set() {
        let mut s = NameSet::default();
        s.insert("NodePorts");
        s.insert("NodePorts");
        let owned = String::from("NodePorts");
        assert!(s.contains(&owned));
        assert!(!s.contains("NodeAffinity"));
        assert_eq!(s.len(), 1);
    }
}
