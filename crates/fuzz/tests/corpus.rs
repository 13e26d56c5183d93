//! The coverage-guided fuzzing targets (`rkube_fuzz::targets`) on stable:
//! every committed seed (`fuzz/corpus/<target>/`) and every minimized
//! crash kept from fuzzing (`fuzz/regressions/<target>/`) is run again, so a
//! fixed crash stays fixed without nightly.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;

use rkube_fuzz::targets::TARGETS;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

#[test]
fn every_seed_and_kept_crash_passes() {
    rkube_fuzz::quiet_panics();
    let mut ran = 0;
    let mut failures = Vec::new();
    for (name, target) in TARGETS {
        let mut seen = 0;
        for dir in ["corpus", "regressions"] {
            let Ok(entries) = std::fs::read_dir(root().join(dir).join(name)) else {
                continue;
            };
            for e in entries {
                let path = e.unwrap().path();
                let data = std::fs::read(&path).unwrap();
                seen += 1;
                match catch_unwind(AssertUnwindSafe(|| target(&data))) {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => failures.push(format!("{}: {e}", path.display())),
                    Err(_) => failures.push(format!("{}: panicked", path.display())),
                }
            }
        }
        assert!(seen > 0, "target {name} has no seed in fuzz/corpus/{name}/");
        ran += seen;
    }
    assert!(
        failures.is_empty(),
        "{} of {ran} inputs failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn every_target_has_a_cargo_fuzz_entry() {
    for (name, _) in TARGETS {
        let file = root().join("fuzz_targets").join(format!("{name}.rs"));
        let text =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        assert!(
            text.contains(&format!("rkube_fuzz::targets::{name}(")),
            "{} does not call rkube_fuzz::targets::{name}",
            file.display()
        );
    }
}
