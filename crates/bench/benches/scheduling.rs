//! Criterion micro-benchmarks of rkube's hot paths:
//! * `schedule/*`: one scheduling attempt (PreFilter, Filter, Score, select)
//!   of one pending pod over a 5,000-node snapshot (scheduler_perf shapes),
//! * `quantity/parse`: `Quantity::parse` over typical request strings,
//! * `snapshot/assume`: `Snapshot::assume` of one pod onto a node.
//!
//!   cargo bench -p rkube-bench --bench scheduling [-- FILTER]

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use rkube_bench::workload::Workload;
use rkube_framework::{Scheduler, Snapshot};
use rkube_model::{Cluster, Quantity};
use rkube_sim::pending_pods;

fn cluster(name: &str) -> Cluster {
    let text = serde_json::to_string(&Workload::parse(name).unwrap().generate()).unwrap();
    let objs = rkube_model::load::parse_documents("bench.json", &text).unwrap();
    rkube_model::load::build(&objs, &mut |_| Ok(false)).unwrap()
}

fn schedule(c: &mut Criterion) {
    let cfg = rkube_config::default_config();
    let profiles = rkube_sim::profiles(&cfg).unwrap();
    let mut group = c.benchmark_group("schedule");
    group.sample_size(30);
    for w in [
        "SchedulingBasic/5000Nodes_1Pods",
        "SchedulingPodAntiAffinity/5000Nodes_1Pods",
        "SchedulingPodAffinity/5000Nodes_1Pods",
        "TopologySpreading/5000Nodes_1Pods",
    ] {
        let cluster = cluster(w);
        let snapshot = Snapshot::from_cluster(&cluster);
        let pod = pending_pods(&cluster, &profiles)[0].clone();
        let fw = profiles.for_pod(&pod).unwrap();
        let mut scheduler = Scheduler::new(0, profiles.percentage_of_nodes_to_score);
        let label = w.split('/').next().unwrap();
        group.bench_function(format!("{label}/5000nodes"), |b| {
            b.iter(|| black_box(scheduler.schedule(fw, &snapshot, black_box(&pod))))
        });
    }
    group.finish();
}

fn quantity(c: &mut Criterion) {
    let inputs = [
        "100m", "500Mi", "4", "32Gi", "110", "3970m", "1.5", "2e3", "0.1", "1Ki", "900m", "16G",
    ];
    c.bench_function("quantity/parse", |b| {
        b.iter(|| {
            for s in inputs {
                black_box(Quantity::parse(black_box(s)).unwrap());
            }
        })
    });
}

fn assume(c: &mut Criterion) {
    // A 100-node snapshot is cloned for every iteration (untimed); assume
    // itself only touches the one node and the snapshot-wide indexes.
    let cluster = cluster("SchedulingBasic/100Nodes_200Pods");
    let snapshot = Snapshot::from_cluster(&cluster);
    let mut pod = pending_pods(
        &cluster,
        &rkube_sim::profiles(&rkube_config::default_config()).unwrap(),
    )[0]
    .clone();
    pod.node_name = snapshot.nodes[42].name().to_string();
    let pod = Arc::new(pod);
    c.bench_function("snapshot/assume", |b| {
        b.iter_batched(
            || snapshot.clone(),
            |mut s| {
                s.assume(42, black_box(pod.clone()));
                s
            },
            BatchSize::SmallInput,
        )
    });
}

// `criterion_group!` defines an undocumented `pub fn benches`.
mod group {
    #![allow(missing_docs)]
    use super::*;
    criterion_group!(benches, schedule, quantity, assume);
}
use group::benches;
criterion_main!(benches);
