//! Handing freed memory back to the kernel.
//!
//! glibc's allocator keeps the pages a program frees: a free page inside
//! the heap stays resident until something trims it. The daemons trim on a
//! timer (`rkube_daemon::memory`); the cluster-file loader trims while it
//! converts a large file, whose parsed form it frees object by object
//! (`rkube_model::load`). Other C libraries: nothing to do.
//!
//! The FFI call is the only unsafe code of this crate.

#![allow(unsafe_code)]

/// Hands the allocator's free pages back to the kernel now; true if any
/// were (always false where there is nothing to do).
pub fn trim() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes the arenas' locks itself; any thread may
    // call it at any time.
    unsafe {
        libc::malloc_trim(0) == 1
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    false
}
