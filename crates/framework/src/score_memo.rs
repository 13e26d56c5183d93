//! Scores kept across cycles. A Score plugin whose score of a node depends
//! only on the node info's content and on a key it names for the cycle
//! ([`ScorePlugin::score_key`]: e.g. NodeResourcesFit's pod requests) is
//! not asked again for a node info it already scored under the same key.
//!
//! The scores live in the node info itself (a few atomic words, forgotten
//! with every change of its content), so a cycle reads them from the cache
//! lines its filters just read: a table beside the snapshot, looked up per
//! node, cost more than scoring at 50,000 nodes (BENCHMARKS.md, issue #18's
//! third and fourth rounds). This module names each (plugin, key) with an
//! id that is never reused, so a kept score is always the score the plugin
//! would compute.
//!
//! [`ScorePlugin::score_key`]: crate::plugin::ScorePlugin::score_key

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

/// The next id, for every framework of the process: node infos are shared
/// by profiles and by the configurations `compare` runs side by side,
/// whose plugins of the same name score differently, so no two frameworks
/// may hand out the same id.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// (plugin, key) pairs remembered; older ones get a new id when they come
/// back (their kept scores are then not found, only recomputed).
const REMEMBERED: usize = 64;

/// The remembered (plugin, key, id), most recently used first.
type Ids = Vec<(&'static str, Vec<i64>, u64)>;

/// One framework's ids of (plugin, key) pairs.
#[derive(Debug, Default)]
pub(crate) struct ScoreMemo {
    ids: Mutex<Ids>,
}

impl ScoreMemo {
    fn lock(&self) -> MutexGuard<'_, Ids> {
        // A panic elsewhere leaves the list whole: still valid.
        self.ids.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The id of `plugin`'s scores under `key`: the same while the pair is
    /// remembered, and never one another pair had. `None` once the ids
    /// run out (2^40 of them), when nothing is kept any more.
    pub(crate) fn id(&self, plugin: &'static str, key: Vec<i64>) -> Option<u64> {
        let mut ids = self.lock();
        if let Some(i) = ids.iter().position(|(p, k, _)| *p == plugin && *k == key) {
            let entry = ids.remove(i);
            let id = entry.2;
            ids.insert(0, entry);
            return Some(id);
        }
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        if id >= 1 << 40 {
            return None;
        }
        ids.insert(0, (plugin, key, id));
        ids.truncate(REMEMBERED);
        Some(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node_info::KeptScores;

    #[test]
    fn a_pair_keeps_its_id_and_no_other_pair_gets_it() {
        let memo = ScoreMemo::default();
        let a = memo.id("A", vec![1, 2]).unwrap();
        assert_eq!(memo.id("A", vec![1, 2]), Some(a));
        let other_key = memo.id("A", vec![1, 3]).unwrap();
        let other_plugin = memo.id("B", vec![1, 2]).unwrap();
        assert!(a != other_key && a != other_plugin && other_key != other_plugin);
        // Another framework (another profile, or the other configuration
        // of a comparison) never gets the same id for the same pair.
        let other = ScoreMemo::default();
        assert_ne!(other.id("A", vec![1, 2]), Some(a));
    }

    #[test]
    fn forgotten_pairs_come_back_with_new_ids() {
        let memo = ScoreMemo::default();
        let first = memo.id("A", vec![0]).unwrap();
        for k in 1..=REMEMBERED as i64 {
            memo.id("A", vec![k]);
        }
        assert_eq!(memo.lock().len(), REMEMBERED);
        let again = memo.id("A", vec![0]).unwrap();
        assert_ne!(again, first);
    }

    #[test]
    fn kept_scores_are_found_under_their_id_only() {
        let kept = KeptScores::default();
        assert_eq!(kept.get(1), None);
        kept.put(1, 42);
        kept.put(2, -7);
        assert_eq!(kept.get(1), Some(42));
        assert_eq!(kept.get(2), Some(-7));
        assert_eq!(kept.get(3), None);
        // A new score under the same id replaces the old one.
        kept.put(1, 0);
        assert_eq!(kept.get(1), Some(0));
        // Out of 24 bits, or id 0: not kept.
        kept.put(5, 1 << 23);
        kept.put(0, 1);
        assert_eq!(kept.get(5), None);
        assert_eq!(kept.get(0), None);
        // Past four ids, one is replaced; whatever is found is right.
        for id in 10..20 {
            kept.put(id, id as i64 * 3);
        }
        for id in 1..20u64 {
            if let Some(v) = kept.get(id) {
                assert_eq!(
                    v,
                    if id == 1 {
                        0
                    } else if id == 2 {
                        -7
                    } else {
                        id as i64 * 3
                    }
                );
            }
        }
        assert_eq!(kept.get(19), Some(57));
        // A copy keeps them (the same content).
        assert_eq!(kept.clone().get(19), Some(57));
    }
}
