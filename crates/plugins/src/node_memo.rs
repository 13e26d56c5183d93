//! Per-node walks kept across scheduling cycles.
//!
//! InterPodAffinity's PreFilter and PreScore fold something computed from
//! every node (its pods matching some terms, counted per topology pair) into
//! cluster-wide totals, and upstream redoes the walk for every pod. Between
//! two cycles only the nodes that changed (the one a pod was just assumed
//! on, in the common case) can change their part, so a [`NodeMemo`] keeps
//! each node's part with the node's [`NodeInfo::generation`] and the folded
//! total, and on the next cycle with an equal key takes back and recomputes
//! only the parts of nodes whose generation differs. The total is the same
//! fold over the same parts, so the results are the walk's. Which nodes to
//! look at comes from the snapshot's change log when the memo last saw the
//! same snapshot ([`Snapshot::change_log`]), else from comparing every
//! node's generation.

use std::sync::{Mutex, MutexGuard};

use rkube_framework::{NodeInfo, Snapshot};

use crate::helper::FastMap;
use crate::parallel::map_nodes;

/// A total that parts can be added to and taken back from.
pub(crate) trait Fold: Default + Clone {
    /// One node's part.
    type Part: Default + Send;
    /// Adds `part` (`sign` 1) or takes it back (`sign` -1).
    fn fold(&mut self, part: &Self::Part, sign: i64);
}

struct Entry<K, F: Fold> {
    key: K,
    /// Generation of each node's part (0: none yet).
    gens: Vec<u64>,
    /// The snapshot change log (epoch, length) when the parts were last
    /// brought up to date.
    synced: (u64, usize),
    parts: Vec<F::Part>,
    total: F,
    last_used: u64,
}

/// Up to `cap` keys' totals, the least recently used dropped first.
pub(crate) struct NodeMemo<K, F: Fold> {
    entries: Vec<Entry<K, F>>,
    clock: u64,
    cap: usize,
}

impl<K, F: Fold> NodeMemo<K, F> {
    pub(crate) fn new(cap: usize) -> Self {
        NodeMemo {
            entries: Vec::new(),
            clock: 0,
            cap: cap.max(1),
        }
    }

    /// The total of `part` over every node of `snapshot` for the key that
    /// `is_key` recognises (made by `make_key` the first time). `part` must
    /// depend only on the key and the node info.
    pub(crate) fn total<P>(
        &mut self,
        is_key: impl Fn(&K) -> bool,
        make_key: impl FnOnce() -> K,
        snapshot: &Snapshot,
        part: P,
    ) -> F
    where
        P: Fn(&NodeInfo) -> F::Part + Sync + Send,
    {
        self.clock += 1;
        let i = match self.entries.iter().position(|e| is_key(&e.key)) {
            Some(i) => i,
            None => {
                if self.entries.len() >= self.cap {
                    let oldest = (0..self.entries.len())
                        .min_by_key(|&i| self.entries[i].last_used)
                        .unwrap_or(0);
                    self.entries.swap_remove(oldest);
                }
                self.entries.push(Entry {
                    key: make_key(),
                    gens: Vec::new(),
                    synced: (0, 0),
                    parts: Vec::new(),
                    total: F::default(),
                    last_used: 0,
                });
                self.entries.len() - 1
            }
        };
        let e = &mut self.entries[i];
        e.last_used = self.clock;
        let nodes = &snapshot.nodes;
        if e.gens.len() != nodes.len() {
            e.synced = (0, 0);
            e.gens = vec![0; nodes.len()];
            e.parts = std::iter::repeat_with(F::Part::default)
                .take(nodes.len())
                .collect();
            e.total = F::default();
        }
        // The nodes whose part may be stale: those the snapshot logged
        // since the last sync when it is the same snapshot (its epoch),
        // else every node; then only those whose generation moved.
        let (epoch, log) = snapshot.change_log();
        let changed: Vec<usize> = if e.synced.0 == epoch && e.synced.1 <= log.len() {
            let mut c: Vec<usize> = log[e.synced.1..]
                .iter()
                .map(|&i| i as usize)
                .filter(|&i| i < nodes.len() && e.gens[i] != nodes[i].generation())
                .collect();
            c.sort_unstable();
            c.dedup();
            c
        } else {
            (0..nodes.len())
                .filter(|&i| e.gens[i] != nodes[i].generation())
                .collect()
        };
        if !changed.is_empty() {
            let infos: Vec<&NodeInfo> = changed.iter().map(|&i| &nodes[i]).collect();
            let fresh = map_nodes(&infos, part);
            for (i, p) in changed.into_iter().zip(fresh) {
                e.total.fold(&e.parts[i], -1);
                e.total.fold(&p, 1);
                e.parts[i] = p;
                e.gens[i] = nodes[i].generation();
            }
        }
        // Synced only once every part is up to date.
        e.synced = (epoch, log.len());
        e.total.clone()
    }
}

/// Adds (`sign` 1) or takes back (`sign` -1) one part's `count` at `value`
/// of a total kept as value → (sum, parts adding to it): a value stays
/// while some part adds to it, even when its sum is 0.
pub(crate) fn fold_counted(
    map: &mut FastMap<String, (i64, u32)>,
    value: &str,
    count: i64,
    sign: i64,
) {
    if sign > 0 {
        match map.get_mut(value) {
            Some(e) => *e = (e.0 + count, e.1 + 1),
            None => {
                map.insert(value.to_string(), (count, 1));
            }
        }
    } else if let Some(e) = map.get_mut(value) {
        *e = (e.0 - count, e.1 - 1);
        if e.1 == 0 {
            map.remove(value);
        }
    }
}

/// A [`NodeMemo`] behind a lock, shared by a plugin's clones (the plugin
/// runs on several threads; results do not depend on who filled it).
pub(crate) struct SharedMemo<K, F: Fold>(Mutex<NodeMemo<K, F>>);

impl<K, F: Fold> SharedMemo<K, F> {
    pub(crate) fn new(cap: usize) -> Self {
        SharedMemo(Mutex::new(NodeMemo::new(cap)))
    }

    /// The memo; a memo whose holder panicked mid-update is emptied.
    pub(crate) fn lock(&self) -> MutexGuard<'_, NodeMemo<K, F>> {
        match self.0.lock() {
            Ok(g) => g,
            Err(poisoned) => {
                let mut g = poisoned.into_inner();
                *g = NodeMemo::new(g.cap);
                self.0.clear_poison();
                g
            }
        }
    }
}

impl<K, F: Fold> std::fmt::Debug for SharedMemo<K, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedMemo")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rkube_model::{Node, Pod};
    use std::sync::Arc;

    /// Pods per node, summed.
    #[derive(Default, Clone)]
    struct Sum(i64);
    impl Fold for Sum {
        type Part = i64;
        fn fold(&mut self, part: &i64, sign: i64) {
            self.0 += sign * part;
        }
    }

    fn snapshot(n: usize) -> Snapshot {
        Snapshot::new(
            (0..n)
                .map(|i| {
                    Arc::new(Node {
                        name: format!("n{i}"),
                        ..Default::default()
                    })
                })
                .collect(),
        )
    }

    fn pod(uid: &str) -> Arc<Pod> {
        Arc::new(Pod {
            uid: uid.into(),
            ..Default::default()
        })
    }

    #[test]
    fn recomputes_only_changed_nodes_and_matches_a_full_walk() {
        let mut snap = snapshot(300);
        let mut memo: NodeMemo<&str, Sum> = NodeMemo::new(2);
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let count = |n: &NodeInfo| {
            calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            n.pods.len() as i64
        };
        assert_eq!(memo.total(|k| *k == "a", || "a", &snap, count).0, 0);
        assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 300);
        snap.assume(7, pod("p1"));
        snap.assume(7, pod("p2"));
        snap.assume(9, pod("p3"));
        assert_eq!(memo.total(|k| *k == "a", || "a", &snap, count).0, 3);
        assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 302);
        snap.remove(7, "p1");
        assert_eq!(memo.total(|k| *k == "a", || "a", &snap, count).0, 2);
        assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 303);
        // An unchanged snapshot walks nothing.
        assert_eq!(memo.total(|k| *k == "a", || "a", &snap, count).0, 2);
        assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 303);
        // Another snapshot of the same size (new generations) is walked whole.
        let other = snapshot(300);
        assert_eq!(memo.total(|k| *k == "a", || "a", &other, count).0, 0);
        assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 603);
        // A clone keeps the generations; a change to it is seen.
        let mut clone = snap.clone();
        clone.assume(0, pod("p4"));
        assert_eq!(memo.total(|k| *k == "a", || "a", &clone, count).0, 3);
        assert_eq!(memo.total(|k| *k == "a", || "a", &snap, count).0, 2);
    }

    #[test]
    fn follows_the_change_log_across_its_restarts() {
        // 3 nodes: the log restarts every 1,024 entries.
        let mut snap = snapshot(3);
        let mut kept: NodeMemo<(), Sum> = NodeMemo::new(1);
        let count = |n: &NodeInfo| n.pods.len() as i64;
        for i in 0..2500usize {
            snap.assume(i % 3, pod(&format!("p{i}")));
            if i % 7 == 0 {
                snap.remove((i + 1) % 3, &format!("p{}", i.saturating_sub(2)));
            }
            if i % 97 == 0 {
                let fresh = NodeMemo::<(), Sum>::new(1)
                    .total(|_| true, || (), &snap, count)
                    .0;
                assert_eq!(kept.total(|_| true, || (), &snap, count).0, fresh, "at {i}");
            }
        }
        let all: i64 = snap.nodes.iter().map(|n| n.pods.len() as i64).sum();
        assert_eq!(kept.total(|_| true, || (), &snap, count).0, all);
    }

    #[test]
    fn keeps_at_most_cap_keys() {
        let snap = snapshot(3);
        let mut memo: NodeMemo<u32, Sum> = NodeMemo::new(2);
        for k in [1, 2, 1, 3] {
            memo.total(|x| *x == k, || k, &snap, |_| 1);
        }
        let keys: Vec<u32> = memo.entries.iter().map(|e| e.key).collect();
        assert_eq!(keys.len(), 2);
        assert!(keys.contains(&1) && keys.contains(&3), "{keys:?}");
    }
}
