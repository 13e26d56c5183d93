//! Crash-loop back-off for container restarts, as upstream's
//! `flowcontrol.Backoff` used by `kuberuntime.doBackOff`:
//!
//! * the first restart after a container exits happens at once and arms the
//!   back-off at 10 s for that container;
//! * an exit within the back-off window of the previous restart waits out
//!   the window (reported as `CrashLoopBackOff`), then restarts and doubles
//!   the window, up to 300 s;
//! * a container that ran longer than twice the maximum (10 min) since the
//!   last restart starts over at 10 s.
//!
//! Pure: times are passed in (nanoseconds since the epoch), so it is tested
//! without sleeping.

use std::collections::HashMap;
use std::time::Duration;

/// Initial back-off (upstream `initialBackOff`).
pub const INITIAL: Duration = Duration::from_secs(10);
/// Maximum back-off (upstream `MaxContainerBackOff`).
pub const MAX: Duration = Duration::from_secs(300);

#[derive(Debug, Clone, Copy)]
struct Entry {
    backoff: Duration,
    /// When the window was last armed (the exit time it was armed for).
    last_update_ns: i128,
}

/// Per-key back-off windows (key: pod uid + container name).
#[derive(Debug, Default)]
pub struct Backoff {
    entries: HashMap<String, Entry>,
}

fn since(now_ns: i128, t_ns: i128) -> Duration {
    Duration::from_nanos((now_ns - t_ns).max(0) as u64)
}

impl Backoff {
    /// How long `key` must still wait before restarting a container that
    /// exited at `finished_ns`; `None` means restart now (then call
    /// [`Backoff::next`]).
    pub fn remaining(&self, key: &str, finished_ns: i128, now_ns: i128) -> Option<Duration> {
        let e = self.entries.get(key)?;
        if since(finished_ns, e.last_update_ns) > 2 * MAX {
            return None;
        }
        let elapsed = since(now_ns, finished_ns);
        (elapsed < e.backoff).then(|| e.backoff - elapsed)
    }

    /// Records a restart of `key` for an exit at `finished_ns`: arms the
    /// window at 10 s the first time (or after a long run), else doubles it
    /// up to 300 s.
    pub fn next(&mut self, key: &str, finished_ns: i128) {
        let fresh = Entry {
            backoff: INITIAL,
            last_update_ns: finished_ns,
        };
        match self.entries.get_mut(key) {
            Some(e) if since(finished_ns, e.last_update_ns) <= 2 * MAX => {
                e.backoff = (e.backoff * 2).min(MAX);
                e.last_update_ns = finished_ns;
            }
            _ => {
                self.entries.insert(key.to_string(), fresh);
            }
        }
    }

    /// `true` while `now_ns` is within the window armed by the last
    /// [`Backoff::next`] of `key` (upstream's `IsInBackOffSinceUpdate`:
    /// the image pull back-off, counted from the failed pull).
    pub fn in_backoff_since_update(&self, key: &str, now_ns: i128) -> bool {
        self.entries
            .get(key)
            .is_some_and(|e| since(now_ns, e.last_update_ns) < e.backoff)
    }

    /// The current window of `key` (for messages), if armed.
    pub fn window(&self, key: &str) -> Option<Duration> {
        self.entries.get(key).map(|e| e.backoff)
    }

    /// Forgets every key starting with `prefix` (a removed pod).
    pub fn forget_prefix(&mut self, prefix: &str) {
        self.entries.retain(|k, _| !k.starts_with(prefix));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i128 = 1_000_000_000;

    #[test]
    fn pull_back_off_counts_from_the_failed_pull() {
        let mut b = Backoff::default();
        let k = "uid_img";
        assert!(!b.in_backoff_since_update(k, 100 * S));
        b.next(k, 100 * S);
        assert!(b.in_backoff_since_update(k, 109 * S));
        assert!(!b.in_backoff_since_update(k, 110 * S));
        // the second failure (at 110 s) doubles the window to 20 s
        b.next(k, 110 * S);
        assert!(b.in_backoff_since_update(k, 129 * S));
        assert!(!b.in_backoff_since_update(k, 130 * S));
    }

    #[test]
    fn first_restart_is_immediate_then_doubles_to_the_cap() {
        let mut b = Backoff::default();
        let k = "uid/app";
        // exit at t=100: no window yet → restart now
        assert_eq!(b.remaining(k, 100 * S, 100 * S), None);
        b.next(k, 100 * S);
        assert_eq!(b.window(k), Some(INITIAL));
        // exits again 1 s later: wait the remaining 9 s
        assert_eq!(
            b.remaining(k, 101 * S, 102 * S),
            Some(Duration::from_secs(9))
        );
        assert_eq!(b.remaining(k, 101 * S, 111 * S), None);
        b.next(k, 101 * S);
        assert_eq!(b.window(k), Some(Duration::from_secs(20)));
        let mut t = 101;
        for want in [40, 80, 160, 300, 300] {
            t += 1;
            b.next(k, t * S);
            assert_eq!(b.window(k), Some(Duration::from_secs(want)));
        }
    }

    #[test]
    fn a_long_run_resets_the_window() {
        let mut b = Backoff::default();
        let k = "uid/app";
        b.next(k, 0);
        b.next(k, S);
        assert_eq!(b.window(k), Some(Duration::from_secs(20)));
        // ran 11 minutes before exiting: no back-off, and the window restarts at 10 s
        let exit = 661 * S;
        assert_eq!(b.remaining(k, exit, exit), None);
        b.next(k, exit);
        assert_eq!(b.window(k), Some(INITIAL));
    }

    #[test]
    fn forget_by_pod() {
        let mut b = Backoff::default();
        b.next("u1/a", 0);
        b.next("u2/a", 0);
        b.forget_prefix("u1/");
        assert_eq!(b.window("u1/a"), None);
        assert!(b.window("u2/a").is_some());
    }
}
