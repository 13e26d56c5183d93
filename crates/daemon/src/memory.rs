//! Freed memory goes back to the kernel.
//!
//! Under churn, glibc's allocator keeps what a daemon frees: each thread
//! that allocates gets an arena of its own (up to eight per core), and a
//! free page inside an arena stays resident until something trims it. In
//! the scheduler's soak, 23 minutes into churn, the allocator held 300 MB
//! from the kernel with 92 MB in use (`malloc_stats`), and resident memory
//! kept rising while the live heap did not. So both daemons cap the arenas
//! at start ([`limit_arenas`], unless `MALLOC_ARENA_MAX` says otherwise)
//! and hand free pages back every minute ([`trim_every`], glibc's
//! `malloc_trim`). Other C libraries: nothing to do, both are no-ops.
//!
//! The FFI call of `limit_arenas` is the only unsafe code of this crate
//! (`trim` is `rkube_util`'s).

#![allow(unsafe_code)]

use std::time::Duration;

/// Arenas the daemons allow (glibc's `M_ARENA_MAX`).
pub const ARENAS: i32 = 2;

/// How often free pages are handed back.
pub const TRIM_EVERY: Duration = Duration::from_secs(60);

/// Caps glibc's malloc arenas at `n`, unless `MALLOC_ARENA_MAX` is set (the
/// operator's choice wins). Call before the first thread is started.
pub fn limit_arenas(n: i32) {
    if std::env::var_os("MALLOC_ARENA_MAX").is_some() {
        return;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; M_ARENA_MAX takes
    // effect for arenas created afterwards.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, n.max(1));
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = n;
}

pub use rkube_util::memory::trim;

/// Trims every `every`, on a blocking thread (a trim walks the arenas'
/// free lists). Runs until the runtime stops.
pub async fn trim_every(every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let _ = tokio::task::spawn_blocking(trim).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Resident memory of this process, in KiB.
    fn rss_kib() -> u64 {
        std::fs::read_to_string("/proc/self/status")
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn freed_memory_returns_to_the_kernel() {
        // 64 MiB in blocks under the mmap threshold, so they live in an
        // arena; keep every 64th so the arena cannot simply shrink from
        // its top. Freed, the rest stays resident until trimmed.
        let blocks: Vec<Vec<u8>> = (0..64 * 1024)
            .map(|i| vec![(i % 251) as u8 + 1; 1000])
            .collect();
        let kept: Vec<Vec<u8>> = blocks
            .into_iter()
            .enumerate()
            .filter(|(i, _)| i % 64 == 0)
            .map(|(_, b)| b)
            .collect();
        let before = rss_kib();
        assert!(trim(), "there were free pages to hand back");
        let after = rss_kib();
        assert!(
            after + 16 * 1024 < before,
            "resident memory {before} KiB → {after} KiB after the trim"
        );
        assert!(kept.iter().all(|b| b[0] != 0));
    }
}
