#![no_main]
//! cargo-fuzz target: `rkube_fuzz::targets::kubelet_config` (see its doc).

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(e) = rkube_fuzz::targets::kubelet_config(data) {
        panic!("{e}");
    }
});
