//! Logging: klog-style `-v` levels onto `tracing` filters, and lines in
//! klog's text format (`I1205 22:40:16.123456   12345 file.rs:42] "msg"
//! key="value"`) on stderr, the format journald and log tooling expect of
//! a Kubernetes daemon.

use std::fmt::{self, Write as _};

use k8s_openapi::jiff::Timestamp;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::registry::LookupSpan;

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

/// Installs the stderr subscriber writing klog's text format. A second
/// call is a no-op.
pub fn init_tracing(verbosity: u32, crates: &[&str]) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(filter(verbosity, crates)));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .event_format(Klog)
        .try_init();
}

/// klog's text format: `Lmmdd hh:mm:ss.uuuuuu PID file:line] "msg" k=v`,
/// severity `I`, `W` or `E` (debug and trace lines are `I`, as klog's
/// `V(n)` lines), the time in UTC, the message quoted as klog's
/// structured lines quote it.
pub struct Klog;

impl<S, N> FormatEvent<S, N> for Klog
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let mut fields = KlogFields::default();
        event.record(&mut fields);
        w.write_str(&klog_line(
            *meta.level(),
            Timestamp::now(),
            std::process::id(),
            meta.file().unwrap_or(meta.target()),
            meta.line().unwrap_or(0),
            &fields.message,
            &fields.rest,
        ))?;
        writeln!(w)
    }
}

/// One klog line (without its newline).
fn klog_line(
    level: Level,
    at: Timestamp,
    pid: u32,
    file: &str,
    line: u32,
    message: &str,
    rest: &str,
) -> String {
    let severity = match level {
        Level::ERROR => 'E',
        Level::WARN => 'W',
        _ => 'I',
    };
    let file = file.rsplit('/').next().unwrap_or(file);
    format!(
        "{severity}{} {pid:>7} {file}:{line}] {}{rest}",
        at.strftime("%m%d %H:%M:%S%.6f"),
        quote(message)
    )
}

/// Go's `%q` for the text klog quotes (Rust's escapes match it for the
/// characters log lines hold).
fn quote(s: &str) -> String {
    format!("{s:?}")
}

/// The message and the other fields, as ` key=value`.
#[derive(Default)]
struct KlogFields {
    message: String,
    rest: String,
}

impl Visit for KlogFields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_string();
        } else {
            let _ = write!(self.rest, " {}={}", field.name(), quote(value));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let text = format!("{value:?}");
        if field.name() == "message" {
            self.message = text;
        } else if text.is_empty() || text.contains([' ', '"', '=', '\n']) {
            let _ = write!(self.rest, " {}={}", field.name(), quote(&text));
        } else {
            let _ = write!(self.rest, " {}={text}", field.name());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels() {
        assert_eq!(filter(0, &["a"]), "warn,a=info");
        assert_eq!(filter(2, &["a", "b"]), "warn,a=debug,b=debug");
        assert_eq!(filter(5, &["a"]), "warn,a=debug");
        assert_eq!(filter(6, &["a"]), "debug,a=trace");
        assert_eq!(filter(10, &[]), "debug");
    }

    #[test]
    fn klog_lines() {
        let at: Timestamp = "2026-12-05T22:40:16.123456789Z".parse().unwrap();
        assert_eq!(
            klog_line(
                Level::INFO,
                at,
                4242,
                "crates/kubelet/src/node/mod.rs",
                87,
                "Successfully registered node",
                " node=\"n1\"",
            ),
            "I1205 22:40:16.123456    4242 mod.rs:87] \"Successfully registered node\" node=\"n1\""
        );
        assert!(klog_line(Level::WARN, at, 1, "a.rs", 1, "x", "").starts_with("W1205 "));
        assert!(klog_line(Level::ERROR, at, 1, "a.rs", 1, "x", "").starts_with("E1205 "));
        assert!(klog_line(Level::DEBUG, at, 1, "a.rs", 1, "x", "").starts_with("I1205 "));
        assert!(klog_line(Level::INFO, at, 1, "a.rs", 1, "say \"hi\"\n", "")
            .ends_with("] \"say \\\"hi\\\"\\n\""));
    }

    #[test]
    fn klog_fields_from_events() {
        use std::sync::{Arc, Mutex};
        #[derive(Clone, Default)]
        struct Buf(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf::default();
        let out = buf.clone();
        let sub = tracing_subscriber::fmt()
            .with_writer(move || buf.clone())
            .with_ansi(false)
            .event_format(Klog)
            .finish();
        let at = line!() + 2;
        tracing::subscriber::with_default(sub, || {
            tracing::warn!(pod = "ns/p", restarts = 3, why = ?"no space", "Killing container");
        });
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        let (head, tail) = text.split_once("] ").unwrap();
        assert!(
            head.starts_with('W') && head.ends_with(&format!("logging.rs:{at}")),
            "{head}"
        );
        assert_eq!(
            tail,
            "\"Killing container\" pod=\"ns/p\" restarts=3 why=\"\\\"no space\\\"\"\n"
        );
    }
}
