//! PrioritySort: higher priority first, then earlier queue time.

use rkube_framework::{Plugin, QueueSortPlugin, QueuedPodRef};

/// Upstream name.
pub const NAME: &str = "PrioritySort";

/// The plugin.
pub struct PrioritySort;

impl Plugin for PrioritySort {
    fn name(&self) -> &'static str {
        NAME
    }
    fn as_queue_sort(&self) -> Option<&dyn QueueSortPlugin> {
        Some(self)
    }
}

impl QueueSortPlugin for PrioritySort {
    fn less(&self, a: QueuedPodRef<'_>, b: QueuedPodRef<'_>) -> bool {
        a.pod.priority > b.pod.priority
            || (a.pod.priority == b.pod.priority && a.timestamp < b.timestamp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rkube_model::Pod;

    #[test]
    fn less() {
        // Upstream TestLess: priority first, then timestamp.
        let hi = Pod {
            priority: 100,
            ..Default::default()
        };
        let lo = Pod {
            priority: 10,
            ..Default::default()
        };
        let r = |pod, timestamp| QueuedPodRef { pod, timestamp };
        assert!(PrioritySort.less(r(&hi, 2), r(&lo, 1)));
        assert!(!PrioritySort.less(r(&lo, 1), r(&hi, 2)));
        assert!(PrioritySort.less(r(&lo, 1), r(&lo, 2)));
        assert!(!PrioritySort.less(r(&lo, 2), r(&lo, 1)));
    }
}
