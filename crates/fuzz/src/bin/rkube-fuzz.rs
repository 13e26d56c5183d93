//! `rkube-fuzz --seconds S [--seed N]`: runs every target of the stable fuzz
//! harness round-robin for S seconds and prints `N passed, M failed`;
//! `--seed N --case I` replays one case. Exits 1 when a case failed.

use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let get = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .map(|v| {
                v.parse::<u64>().unwrap_or_else(|_| {
                    eprintln!("{flag}: not a number: {v}");
                    std::process::exit(2)
                })
            })
    };
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("usage: rkube-fuzz [--seconds S] [--seed N] [--case I] [--saturated]");
        println!("  --saturated  only the known-failing saturated-quantity explain target");
        return;
    }
    let seed = get("--seed").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let saturated: &[rkube_fuzz::Target] =
        &[("explain-saturated", rkube_fuzz::check_explain_saturated)];
    let targets = if args.iter().any(|a| a == "--saturated") {
        saturated
    } else {
        rkube_fuzz::TARGETS
    };
    if let Some(case) = get("--case") {
        // Replaying one case: keep the panic message and location (RUST_BACKTRACE=1 for more).
        match rkube_fuzz::run_case_of(targets, seed, case) {
            Ok(()) => println!("seed {seed} case {case}: passed"),
            Err(f) => {
                println!("{f}");
                std::process::exit(1);
            }
        }
        return;
    }
    rkube_fuzz::quiet_panics();
    let seconds = get("--seconds").unwrap_or(10);
    let deadline = Instant::now() + Duration::from_secs(seconds);
    println!("seed {seed}, {seconds}s");
    let (mut passed, mut failed) = (0u64, 0u64);
    let mut case = 0u64;
    while Instant::now() < deadline {
        match rkube_fuzz::run_case_of(targets, seed, case) {
            Ok(()) => passed += 1,
            Err(f) => {
                failed += 1;
                if failed <= 20 {
                    println!("FAILED {f}");
                }
            }
        }
        case += 1;
    }
    println!("{passed} passed, {failed} failed");
    if failed > 0 {
        std::process::exit(1);
    }
}
