//! Small pure helpers shared by crates that must not depend on each other
//! (the scheduler's configuration and the kubelet's): Go durations as
//! Kubernetes configurations and flags write them, bounded reading of input
//! files, quoting of hostile values in messages, and handing freed memory
//! back to the kernel.

pub mod duration;
pub mod fast_hash;
pub mod feature_gates;
pub mod file;
pub mod go_json;
pub mod memory;
pub mod strict;

/// `s` quoted for a message, as Go's `%q` would (control characters
/// escaped), clipped to 64 characters so a hostile value cannot flood a
/// terminal or a log line.
pub fn quote(s: &str) -> String {
    let mut shown: String = s.chars().take(64).collect();
    if shown.len() < s.len() {
        shown.push('…');
    }
    format!("{shown:?}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn quote_escapes_and_clips() {
        assert_eq!(super::quote("a\u{1b}b"), "\"a\\u{1b}b\"");
        let q = super::quote(&"x".repeat(1000));
        assert_eq!(q.chars().count(), 64 + 3);
        assert!(q.ends_with("…\""));
    }
}
