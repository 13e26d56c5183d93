//! Per-scheduling-cycle state: data plugins compute in PreFilter/PreScore and
//! read in Filter/Score, keyed by plugin name, plus the skip sets.

use std::any::Any;
use std::collections::{HashMap, HashSet};

/// State for one pod's scheduling cycle.
#[derive(Default)]
pub struct CycleState {
    data: HashMap<&'static str, Box<dyn Any + Send + Sync>>,
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

    /// Stores a plugin's data.
    pub fn write<T: Any + Send + Sync>(&mut self, key: &'static str, value: T) {
        self.data.insert(key, Box::new(value));
    }

    /// Reads a plugin's data.
    pub fn read<T: Any + Send + Sync>(&self, key: &'static str) -> Option<&T> {
        self.data.get(key).and_then(|b| b.downcast_ref::<T>())
    }
}
