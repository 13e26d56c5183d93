//! Logging: klog-style `-v` levels onto `tracing` filters.

/// The filter for verbosity `v`: rkube's own `crates` at info (`v` ≤ 1),
/// debug (2–5) or trace (6+); dependencies at warn, or debug from 6.
/// `RUST_LOG`, when set, wins.
pub fn filter(verbosity: u32, crates: &[&str]) -> String {
    let level = match verbosity {
        0..=1 => "info",
        2..=5 => "debug",
        _ => "trace",
    };
    let deps = if verbosity >= 6 { "debug" } else { "warn" };
    let mut f = deps.to_string();
    for c in crates {
        f.push_str(&format!(",{c}={level}"));
    }
    f
}

/// Installs the stderr subscriber (colours on a terminal only). A second
/// call is a no-op.
pub fn init_tracing(verbosity: u32, crates: &[&str]) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(filter(verbosity, crates)));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::filter;

    #[test]
    fn levels() {
        assert_eq!(filter(0, &["a"]), "warn,a=info");
        assert_eq!(filter(2, &["a", "b"]), "warn,a=debug,b=debug");
        assert_eq!(filter(5, &["a"]), "warn,a=debug");
        assert_eq!(filter(6, &["a"]), "debug,a=trace");
        assert_eq!(filter(10, &[]), "debug");
    }
}
