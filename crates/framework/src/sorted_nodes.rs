//! Host selection as upstream v1.37 does it (`framework/sorted_nodes.go`):
//! the scored feasible nodes, in the order the filter pass found them, are
//! made into a max-heap by total score with Go's `container/heap`, and the
//! host is the heap's top. Without scheduler extenders every node's
//! `Randomizer` is 0, so among equal totals the heap's layout decides;
//! these functions reproduce Go's sift-down exactly, so the same input
//! order gives the same host. What is left of the heap after the host is
//! popped is the list OpportunisticBatching keeps (see [`crate::batch`]).

/// Go's `heap.Init`: heapify `h` so that `h[0]` is the greatest under
/// `less` (where `less(a, b)` means `a` sorts before `b`).
pub(crate) fn init<T>(h: &mut [T], less: &impl Fn(&T, &T) -> bool) {
    let n = h.len();
    for i in (0..n / 2).rev() {
        down(h, i, n, less);
    }
}

/// Go's `heap.Pop`: removes and returns the top.
pub(crate) fn pop<T>(h: &mut Vec<T>, less: &impl Fn(&T, &T) -> bool) -> Option<T> {
    let n = h.len().checked_sub(1)?;
    h.swap(0, n);
    down(h, 0, n, less);
    h.pop()
}

/// Go's `heap.down` over the first `n` elements.
fn down<T>(h: &mut [T], i0: usize, n: usize, less: &impl Fn(&T, &T) -> bool) {
    let mut i = i0;
    loop {
        let j1 = 2 * i + 1;
        if j1 >= n {
            break;
        }
        let mut j = j1;
        if j1 + 1 < n && less(&h[j1 + 1], &h[j1]) {
            j = j1 + 1;
        }
        if !less(&h[j], &h[i]) {
            break;
        }
        h.swap(i, j);
        i = j;
    }
}

/// Upstream's `nodeScoreHeap.Less` with every `Randomizer` 0: a higher
/// total sorts first.
pub(crate) fn higher_total<T>(total: impl Fn(&T) -> i64) -> impl Fn(&T, &T) -> bool {
    move |a, b| total(a) > total(b)
}

/// The host upstream's `NewSortedScoredNodes(list).Pop()` returns for
/// `(node, total)` pairs in feasible-list order.
pub(crate) fn top(pairs: impl Iterator<Item = (usize, i64)>) -> Option<usize> {
    let mut h: Vec<(usize, i64)> = pairs.collect();
    let less = higher_total(|p: &(usize, i64)| p.1);
    init(&mut h, &less);
    h.first().map(|p| p.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pop_order(totals: &[i64]) -> Vec<usize> {
        let mut h: Vec<(usize, i64)> = totals.iter().copied().enumerate().collect();
        let less = higher_total(|p: &(usize, i64)| p.1);
        init(&mut h, &less);
        std::iter::from_fn(|| pop(&mut h, &less).map(|p| p.0)).collect()
    }

    /// Upstream's TestSortedScoredNodes_Pop: scores {1, 3, 2} pop as 3, 2, 1.
    #[test]
    fn pops_highest_first() {
        assert_eq!(pop_order(&[1, 3, 2]), vec![1, 2, 0]);
    }

    /// Equal totals: the order is Go's heap layout, not input order. Five
    /// equal nodes: Init moves nothing, each Pop swaps the last element to
    /// the top and sifts it down (never, all being equal), so after the
    /// first pop the last node comes next — what Go's container/heap gives.
    #[test]
    fn equal_totals_follow_go_heap_layout() {
        assert_eq!(pop_order(&[5, 5, 5, 5, 5]), vec![0, 4, 3, 2, 1]);
        // A tie below the top: 7 first, then the 5s in heap order.
        assert_eq!(pop_order(&[5, 7, 5, 5]), vec![1, 3, 2, 0]);
        assert_eq!(top([(10, 3), (11, 9), (12, 9)].into_iter()), Some(11));
        assert_eq!(top(std::iter::empty()), None);
    }
}
