//! The node's pressure conditions (`MemoryPressure`, `DiskPressure`,
//! `PIDPressure`): set by the eviction manager, read by the node status
//! setters in the heartbeat.

use std::collections::HashMap;
use std::sync::RwLock;

/// The pressure conditions of a node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pressure {
    /// `MemoryPressure=True`.
    pub memory: bool,
    /// `DiskPressure=True`.
    pub disk: bool,
    /// `PIDPressure=True`.
    pub pid: bool,
}

/// The pressure of every node, read by the heartbeat; and whether the
/// node is shutting down (set by the shutdown manager: the Ready condition
/// turns False, new pods are refused).
#[derive(Debug, Default)]
pub struct PressureBoard {
    nodes: RwLock<HashMap<String, Pressure>>,
    shutting_down: std::sync::atomic::AtomicBool,
}

impl PressureBoard {
    /// Upstream's `ShutdownStatus`: `Some("node is shutting down")` while
    /// the node shuts down.
    pub fn shutdown_error(&self) -> Option<String> {
        self.shutting_down
            .load(std::sync::atomic::Ordering::Relaxed)
            .then(|| "node is shutting down".to_string())
    }

    /// Sets whether the node is shutting down.
    pub fn set_shutting_down(&self, now: bool) {
        self.shutting_down
            .store(now, std::sync::atomic::Ordering::Relaxed);
    }

    /// The pressure of `node` (none if never observed).
    pub fn get(&self, node: &str) -> Pressure {
        self.nodes
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(node)
            .copied()
            .unwrap_or_default()
    }

    /// Sets the pressure of `node`.
    pub fn set(&self, node: &str, p: Pressure) {
        let mut m = self.nodes.write().unwrap_or_else(|e| e.into_inner());
        if p == Pressure::default() {
            m.remove(node);
        } else {
            m.insert(node.to_string(), p);
        }
    }
}
