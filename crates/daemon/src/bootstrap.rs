//! The part of `main` both daemons share once their flags and
//! configuration are checked: glibc arenas capped before any thread
//! starts, a multi-threaded tokio runtime, memory trimmed every minute,
//! the daemon run until SIGINT/SIGTERM, and its outcome as an exit code.

use std::fmt::Display;
use std::future::Future;
use std::pin::Pin;

/// Completes when the daemon is asked to stop (SIGINT or SIGTERM).
pub type Shutdown = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Runs `run(shutdown)` to completion and returns the exit code: 0 when
/// it stopped cleanly, 1 when it failed (the error on stderr, and blocking
/// tasks not waited for: a failed daemon lets go at once).
pub fn run<F, Fut, E>(run: F) -> i32
where
    F: FnOnce(Shutdown) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: Display,
{
    // Before the runtime's threads: each would otherwise get an arena.
    crate::memory::limit_arenas(crate::memory::ARENAS);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the runtime: {e}");
            return 1;
        }
    };
    rt.spawn(crate::memory::trim_every(crate::memory::TRIM_EVERY));
    match rt.block_on(run(Box::pin(crate::signal::shutdown_signal()))) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e:#}");
            rt.shutdown_background();
            1
        }
    }
}
