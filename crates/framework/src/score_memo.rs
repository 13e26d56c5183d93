//! Scores kept across cycles. A Score plugin whose score of a node depends
//! only on the node info's content and on a key it names for the cycle
//! ([`ScorePlugin::score_key`]: e.g. NodeResourcesFit's pod requests) is
//! not asked again for a node whose generation it already scored under the
//! same key. Generations are unique per content in the process, so a kept
//! score is the score the plugin would compute.
//!
//! [`ScorePlugin::score_key`]: crate::plugin::ScorePlugin::score_key

use std::sync::{Mutex, MutexGuard};

use crate::fast_hash::FastMap;

/// Keys kept per plugin (pods of a few shapes alternate in most queues).
const KEYS: usize = 4;

/// One plugin's scores under one key, by node-info generation.
#[derive(Debug, Default)]
pub(crate) struct Table {
    plugin: &'static str,
    key: Vec<i64>,
    scores: FastMap<u64, i64>,
}

impl Table {
    /// The kept score of a node-info generation.
    pub(crate) fn get(&self, generation: u64) -> Option<i64> {
        self.scores.get(&generation).copied()
    }
}

/// The framework's kept scores: per plugin, up to [`KEYS`] tables, most
/// recently used first.
#[derive(Debug, Default)]
pub(crate) struct ScoreMemo {
    tables: Mutex<Vec<Table>>,
}

impl ScoreMemo {
    fn lock(&self) -> MutexGuard<'_, Vec<Table>> {
        // A panic elsewhere leaves whole tables behind (or none): still valid.
        self.tables.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes out the table of each `(plugin, key)` (an empty one when none
    /// is kept; `None` where the plugin has no key). A cycle running
    /// beside this one meanwhile finds no table and scores every node.
    pub(crate) fn take(&self, wanted: Vec<(&'static str, Option<Vec<i64>>)>) -> Vec<Option<Table>> {
        if wanted.iter().all(|(_, k)| k.is_none()) {
            return wanted.iter().map(|_| None).collect();
        }
        let mut tables = self.lock();
        wanted
            .into_iter()
            .map(|(plugin, key)| {
                let key = key?;
                let found = tables
                    .iter()
                    .position(|t| t.plugin == plugin && t.key == key);
                Some(match found {
                    Some(i) => tables.remove(i),
                    None => Table {
                        plugin,
                        key,
                        scores: FastMap::default(),
                    },
                })
            })
            .collect()
    }

    /// Puts tables back with the scores computed this cycle. A table past
    /// `cap` entries (generations of contents no node has any more pile up,
    /// one or so per cycle) starts over.
    pub(crate) fn put_back(
        &self,
        taken: Vec<Option<Table>>,
        computed: impl IntoIterator<Item = (usize, u64, i64)>,
        cap: usize,
    ) {
        let mut taken = taken;
        for (k, generation, score) in computed {
            if let Some(Some(t)) = taken.get_mut(k) {
                t.scores.insert(generation, score);
            }
        }
        let mut tables = self.lock();
        for mut t in taken.into_iter().flatten() {
            if t.scores.len() > cap {
                t.scores = FastMap::default();
            }
            let plugin = t.plugin;
            tables.insert(0, t);
            let mut seen = 0;
            tables.retain(|x| {
                if x.plugin != plugin {
                    return true;
                }
                seen += 1;
                seen <= KEYS
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_comes_back_under_its_key_only() {
        let memo = ScoreMemo::default();
        let t = memo.take(vec![("A", Some(vec![1, 2])), ("B", None)]);
        assert!(t[0].as_ref().unwrap().get(7).is_none());
        assert!(t[1].is_none());
        memo.put_back(t, [(0, 7, 42), (1, 7, 9)], 100);
        let t = memo.take(vec![("A", Some(vec![1, 2]))]);
        assert_eq!(t[0].as_ref().unwrap().get(7), Some(42));
        assert_eq!(t[0].as_ref().unwrap().get(8), None);
        memo.put_back(t, [], 100);
        // Another key, or another plugin with the same key, sees nothing.
        let t = memo.take(vec![("A", Some(vec![1, 3])), ("B", Some(vec![1, 2]))]);
        assert_eq!(t[0].as_ref().unwrap().get(7), None);
        assert_eq!(t[1].as_ref().unwrap().get(7), None);
        // While taken, a second taker gets empty tables.
        let again = memo.take(vec![("A", Some(vec![1, 2]))]);
        assert_eq!(again[0].as_ref().unwrap().get(7), Some(42));
        let empty = memo.take(vec![("A", Some(vec![1, 2]))]);
        assert_eq!(empty[0].as_ref().unwrap().get(7), None);
    }

    #[test]
    fn keys_are_bounded_and_full_tables_start_over() {
        let memo = ScoreMemo::default();
        for k in 0..(KEYS as i64 + 2) {
            let t = memo.take(vec![("A", Some(vec![k]))]);
            memo.put_back(t, [(0, 1, k)], 100);
        }
        assert_eq!(memo.lock().len(), KEYS);
        // The oldest keys went first.
        let t = memo.take(vec![("A", Some(vec![0]))]);
        assert_eq!(t[0].as_ref().unwrap().get(1), None);
        memo.put_back(t, [], 100);
        let last = KEYS as i64 + 1;
        let t = memo.take(vec![("A", Some(vec![last]))]);
        assert_eq!(t[0].as_ref().unwrap().get(1), Some(last));
        memo.put_back(t, (0..10).map(|g| (0, 100 + g, 5)), 4);
        let t = memo.take(vec![("A", Some(vec![last]))]);
        assert_eq!(t[0].as_ref().unwrap().get(100), None);
    }
}
