//! Writes the invariant test's generated cluster for a seed to stdout:
//! `cargo run -p rkube-conformance --example dump_sim_case -- SEED > cluster.json`.
fn main() {
    let seed: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    println!(
        "{}",
        serde_json::to_string_pretty(&rkube_conformance::gen::simulation_cluster(seed)).unwrap()
    );
}
