//! A binary heap of queued pods keyed by UID (upstream's `heap.Heap`):
//! O(log n) push, pop, update and removal by key, ordered by a `less`
//! function chosen when it is built.

use std::collections::HashMap;
use std::sync::Arc;

use super::QueuedPod;

/// True when `a` comes before `b`.
pub type Less = Arc<dyn Fn(&QueuedPod, &QueuedPod) -> bool + Send + Sync>;

/// The heap.
pub struct PodHeap {
    items: Vec<QueuedPod>,
    index: HashMap<String, usize>,
    less: Less,
}

impl std::fmt::Debug for PodHeap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodHeap")
            .field("len", &self.items.len())
            .finish()
    }
}

impl PodHeap {
    /// An empty heap ordered by `less`.
    pub fn new(less: Less) -> Self {
        PodHeap {
            items: Vec::new(),
            index: HashMap::new(),
            less,
        }
    }

    /// Number of pods.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// True when the pod is in the heap.
    pub fn contains(&self, uid: &str) -> bool {
        self.index.contains_key(uid)
    }

    /// The first pod.
    pub fn peek(&self) -> Option<&QueuedPod> {
        self.items.first()
    }

    /// Every pod, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &QueuedPod> {
        self.items.iter()
    }

    /// Adds a pod, or replaces the one with its UID (and reorders it).
    pub fn push(&mut self, qp: QueuedPod) {
        match self.index.get(&qp.pod.uid) {
            Some(&i) => {
                self.items[i] = qp;
                self.fix(i);
            }
            None => {
                let i = self.items.len();
                self.index.insert(qp.pod.uid.clone(), i);
                self.items.push(qp);
                self.up(i);
            }
        }
    }

    /// Removes and returns the first pod.
    pub fn pop(&mut self) -> Option<QueuedPod> {
        let uid = self.items.first()?.pod.uid.clone();
        self.remove(&uid)
    }

    /// Removes a pod by UID.
    pub fn remove(&mut self, uid: &str) -> Option<QueuedPod> {
        let i = self.index.remove(uid)?;
        let last = self.items.len() - 1;
        if i != last {
            self.items.swap(i, last);
            self.index.insert(self.items[i].pod.uid.clone(), i);
        }
        let qp = self.items.pop();
        if i < self.items.len() {
            self.fix(i);
        }
        qp
    }

    fn fix(&mut self, i: usize) {
        if !self.up(i) {
            self.down(i);
        }
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.items.swap(a, b);
        self.index.insert(self.items[a].pod.uid.clone(), a);
        self.index.insert(self.items[b].pod.uid.clone(), b);
    }

    /// Moves item `i` up while it comes before its parent; true if it moved.
    fn up(&mut self, mut i: usize) -> bool {
        let start = i;
        while i > 0 {
            let parent = (i - 1) / 2;
            if !(self.less)(&self.items[i], &self.items[parent]) {
                break;
            }
            self.swap(i, parent);
            i = parent;
        }
        i != start
    }

    fn down(&mut self, mut i: usize) {
        let n = self.items.len();
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut first = i;
            if l < n && (self.less)(&self.items[l], &self.items[first]) {
                first = l;
            }
            if r < n && (self.less)(&self.items[r], &self.items[first]) {
                first = r;
            }
            if first == i {
                return;
            }
            self.swap(i, first);
            i = first;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::time::Instant;

    use rkube_model::Pod;

    use super::*;

    fn qp(uid: &str, priority: i32, timestamp: u64) -> QueuedPod {
        QueuedPod {
            pod: Arc::new(Pod {
                uid: uid.into(),
                priority,
                ..Default::default()
            }),
            timestamp,
            attempts: 0,
            backoff_until: None,
            unschedulable_since: Instant::now(),
            gate: None,
            unschedulable_plugins: BTreeSet::new(),
        }
    }

    #[test]
    fn pops_in_order_with_updates_and_removals() {
        let less: Less = Arc::new(|a: &QueuedPod, b: &QueuedPod| {
            (std::cmp::Reverse(a.pod.priority), a.timestamp)
                < (std::cmp::Reverse(b.pod.priority), b.timestamp)
        });
        let mut h = PodHeap::new(less);
        // A pseudo-random mix, so every sift path runs.
        let mut x: u64 = 7;
        for i in 0..500u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            h.push(qp(&format!("p{i}"), (x >> 60) as i32, i));
        }
        for i in (0..500u64).step_by(7) {
            assert!(h.remove(&format!("p{i}")).is_some());
        }
        assert!(h.remove("p0").is_none());
        // Raise one pod to the top by an update.
        h.push(qp("p1", 100, 1));
        assert_eq!(h.peek().map(|q| q.pod.uid.as_str()), Some("p1"));
        let mut last: Option<(i32, u64)> = None;
        let mut n = 0;
        while let Some(q) = h.pop() {
            let key = (q.pod.priority, q.timestamp);
            if let Some((p, t)) = last {
                assert!(p > key.0 || (p == key.0 && t < key.1), "out of order");
            }
            last = Some(key);
            n += 1;
        }
        assert_eq!(n, 500 - 72);
        assert!(h.is_empty());
    }
}
