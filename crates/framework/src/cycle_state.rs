//! Per-scheduling-cycle state: data plugins compute in PreFilter/PreScore and
//! read in Filter/Score, keyed by plugin name, plus the skip sets.
//!
//! Entries are shared (`Arc`), so cloning a state is cheap: preemption and
//! nominated-pod filtering clone the state and let PreFilter extensions
//! (`add_pod`/`remove_pod`) replace their entries in the clone, the way
//! upstream's `CycleState.Clone()` does.

use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// State for one pod's scheduling cycle.
#[derive(Default, Clone)]
pub struct CycleState {
    data: HashMap<&'static str, Arc<dyn Any + Send + Sync>>,
    /// Plugins whose PreFilter returned Skip (their Filter is not run).
    pub skip_filter: HashSet<&'static str>,
    /// Plugins whose PreScore returned Skip (their Score is not run).
    pub skip_score: HashSet<&'static str>,
}

impl CycleState {
    /// New empty state.
    pub fn new() -> Self {
        Self::default()
    }

    /// Stores (or replaces) a plugin's data.
    pub fn write<T: Any + Send + Sync>(&mut self, key: &'static str, value: T) {
        self.data.insert(key, Arc::new(value));
    }

    /// Reads a plugin's data.
    pub fn read<T: Any + Send + Sync>(&self, key: &'static str) -> Option<&T> {
        self.data.get(key).and_then(|b| b.downcast_ref::<T>())
    }

    /// Mutable access to a plugin's data; copies it first when the entry is
    /// shared with a clone of this state (copy on write).
    pub fn read_mut<T: Any + Send + Sync + Clone>(&mut self, key: &'static str) -> Option<&mut T> {
        let entry = self.data.get_mut(key)?;
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
    }
}
