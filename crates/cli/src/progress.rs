//! Progress bars for long runs, drawn on stderr only when it is a terminal
//! (never in pipes, files or CI logs) and not with `--quiet`.

use std::io::IsTerminal;
use std::sync::Arc;

use indicatif::{ProgressBar, ProgressStyle};

/// A progress bar, or `None` when nothing should be drawn.
pub fn bar(quiet: bool, what: &'static str) -> Option<ProgressBar> {
    if quiet || !std::io::stderr().is_terminal() {
        return None;
    }
    let b = ProgressBar::new(0);
    b.set_style(
        ProgressStyle::with_template("{msg} {bar:40} {pos}/{len} pods ({per_sec}, eta {eta})")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    b.set_message(what);
    Some(b)
}

/// A simulation progress callback feeding the bar.
pub fn callback(b: &ProgressBar) -> rkube_sim::Progress {
    let b = b.clone();
    Arc::new(move |done, total| {
        b.set_length(total as u64);
        b.set_position(done as u64);
    })
}

/// A spinner with a message (for work of unknown size, like a snapshot).
pub fn spinner(quiet: bool) -> Option<ProgressBar> {
    if quiet || !std::io::stderr().is_terminal() {
        return None;
    }
    let b = ProgressBar::new_spinner();
    b.set_message("connecting");
    Some(b)
}
