#![no_main]
//! cargo-fuzz target: `rkube_fuzz::targets::selector` (see its doc).

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(e) = rkube_fuzz::targets::selector(data) {
        panic!("{e}");
    }
});
