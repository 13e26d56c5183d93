//! rkube's scheduling loop with a clock around it.
//!
//! [`run`] is `rkube_sim::simulate`'s loop (queue order, one attempt per pod,
//! each placement assumed into the snapshot, preemption: evict the victims,
//! nominate and retry at once) without the report building, so that only
//! scheduling is timed: loading the file, building the profiles and the
//! snapshot are not. `rkube-bench --verify` checks that it places every pod
//! exactly where `rkube_sim::simulate` does.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rkube_config::KubeSchedulerConfiguration;
use rkube_framework::{Nominator, Outcome, Scheduler, Snapshot};
use rkube_model::{Cluster, Pod};
use rkube_sim::{pending_pods, SimError};
use serde::Serialize;

/// Same most-preemptions-per-pod bound as the simulator.
const MAX_PREEMPTIONS_PER_POD: usize = 16;

/// What `rkube-bench simulate` prints (the same fields as `oracle simulate`).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunResult {
    /// Pending pods that were placed.
    pub scheduled: usize,
    /// Pending pods left pending.
    pub unschedulable: usize,
    /// Pending pods at the start.
    pub pending: usize,
    /// Scheduling attempts (a preemptor makes two or more).
    pub attempts: usize,
    /// Wall time of the scheduling loop.
    pub seconds: f64,
    /// scheduled / seconds.
    pub pods_per_second: f64,
    /// Median attempt latency.
    pub latency_p50_ms: f64,
    /// 99th percentile attempt latency.
    pub latency_p99_ms: f64,
    /// Peak resident set size of the process (VmHWM).
    pub peak_rss_bytes: u64,
    /// Every attempt's latency, when asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latencies_ms: Option<Vec<f64>>,
    /// (pod, node) per pending pod, in queue order (for `--verify`).
    #[serde(skip)]
    pub placements: Vec<(String, Option<String>)>,
}

/// Schedules every pending pod of `cluster`; times only the loop.
pub fn run(
    cluster: &Cluster,
    cfg: &KubeSchedulerConfiguration,
    seed: u64,
    keep_latencies: bool,
) -> Result<RunResult, SimError> {
    let profiles = rkube_sim::profiles(cfg)?;
    let mut snapshot = Snapshot::from_cluster(cluster);
    if profiles.generic_workload {
        // Pod groups: the simulator's own queue (group cycles included).
        let start = Instant::now();
        let done = rkube_sim::schedule_pending(cluster, &profiles, &mut snapshot, seed)?;
        let seconds = start.elapsed().as_secs_f64();
        return Ok(result(
            done.placements,
            done.latencies,
            seconds,
            keep_latencies,
        ));
    }
    let pending = pending_pods(cluster, &profiles);
    let mut nominator = Nominator::new();
    for p in &pending {
        if !p.nominated_node_name.is_empty() {
            nominator.add(Arc::new((*p).clone()), &p.nominated_node_name);
        }
    }
    let mut scheduler = Scheduler::new(seed, profiles.percentage_of_nodes_to_score);
    let mut cleared: HashSet<String> = HashSet::new();
    let mut evicted: HashSet<String> = HashSet::new();
    let mut placements: Vec<(String, Option<String>)> = Vec::with_capacity(pending.len());
    let mut latencies: Vec<Duration> = Vec::with_capacity(pending.len());

    let start = Instant::now();
    for pod in &pending {
        let fw = profiles
            .for_pod(pod)
            .expect("pending_pods filters by profile");
        let gated =
            rkube_framework::pre_enqueue_rejection(fw, pod, snapshot.dra.as_deref()).is_some();
        if gated {
            placements.push((pod.key(), None));
            continue;
        }
        let mut current: Pod = (*pod).clone();
        if cleared.contains(&current.uid) {
            current.nominated_node_name.clear();
        }
        let mut preempted = 0;
        loop {
            let t0 = Instant::now();
            let outcome = scheduler.schedule_one(fw, &mut snapshot, &current, &nominator);
            match outcome {
                Outcome::Scheduled { node, .. } => {
                    nominator.delete(&current.uid);
                    let name = snapshot.nodes[node].name().to_string();
                    let key = current.key();
                    latencies.push(t0.elapsed());
                    placements.push((key, Some(name)));
                    break;
                }
                Outcome::Unschedulable {
                    nominated_node,
                    victims,
                    ..
                } => {
                    let target = nominated_node.clone().unwrap_or_default();
                    let preempting = !victims.is_empty() && !target.is_empty();
                    if preempting {
                        let idx = snapshot.index_of(&target).ok_or_else(|| {
                            SimError::Runtime(format!("preemption nominated unknown node {target}"))
                        })?;
                        for v in &victims {
                            snapshot.remove(idx, &v.uid);
                            evicted.insert(v.key());
                        }
                    }
                    let lower =
                        nominator.record_failure(&current, nominated_node.as_deref(), preempting);
                    cleared.extend(lower.iter().map(|p| p.uid.clone()));
                    if let Some(n) = nominated_node {
                        current.nominated_node_name = n;
                    }
                    latencies.push(t0.elapsed());
                    if preempting && preempted < MAX_PREEMPTIONS_PER_POD {
                        preempted += 1;
                        continue;
                    }
                    placements.push((current.key(), None));
                    break;
                }
                Outcome::Error(s) => {
                    return Err(SimError::Runtime(format!(
                        "scheduling {}: {}",
                        current.key(),
                        s.message()
                    )))
                }
            }
        }
    }
    let seconds = start.elapsed().as_secs_f64();

    // Pods placed in this run and evicted later by a preemptor count as
    // unschedulable (the simulator's `evicted`).
    for (pod, node) in placements.iter_mut() {
        if node.is_some() && evicted.contains(pod.as_str()) {
            *node = None;
        }
    }
    Ok(result(placements, latencies, seconds, keep_latencies))
}

/// The figures of a run from its placements and attempt latencies.
fn result(
    placements: Vec<(String, Option<String>)>,
    latencies: Vec<Duration>,
    seconds: f64,
    keep_latencies: bool,
) -> RunResult {
    let scheduled = placements.iter().filter(|p| p.1.is_some()).count();
    let mut ms: Vec<f64> = latencies
        .iter()
        .map(|d| d.as_nanos() as f64 / 1e6)
        .collect();
    let attempts = ms.len();
    let keep = keep_latencies.then(|| ms.clone());
    ms.sort_by(f64::total_cmp);
    RunResult {
        scheduled,
        unschedulable: placements.len() - scheduled,
        pending: placements.len(),
        attempts,
        seconds,
        pods_per_second: if seconds > 0.0 {
            scheduled as f64 / seconds
        } else {
            0.0
        },
        latency_p50_ms: percentile(&ms, 50),
        latency_p99_ms: percentile(&ms, 99),
        peak_rss_bytes: peak_rss_bytes(),
        latencies_ms: keep,
        placements,
    }
}

/// Nearest-rank percentile of sorted values (as the oracle computes it).
pub fn percentile(sorted: &[f64], p: usize) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = (sorted.len() * p).div_ceil(100).max(1);
    sorted[i - 1]
}

/// Peak RSS of this process (`VmHWM` in /proc/self/status), 0 if unknown.
pub fn peak_rss_bytes() -> u64 {
    let Ok(s) = std::fs::read_to_string("/proc/self/status") else {
        return 0;
    };
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Workload;

    fn cluster(w: &str) -> Cluster {
        let text = serde_json::to_string(&Workload::parse(w).unwrap().generate()).unwrap();
        let objs = rkube_model::load::parse_documents("w.json", &text).unwrap();
        rkube_model::load::build(&objs, &mut |_| Ok(false)).unwrap()
    }

    /// The timed loop places every pod where the simulator does.
    #[test]
    fn same_placements_as_the_simulator() {
        for w in [
            "SchedulingBasic/20Nodes_40Pods",
            "SchedulingPodAntiAffinity/20Nodes_15Pods",
            "TopologySpreading/20Nodes_40Pods",
            "Unschedulable/10Nodes_40Pods",
            "PreemptionBasic/5Nodes",
        ] {
            let c = cluster(w);
            let cfg = rkube_config::default_config();
            let r = run(&c, &cfg, 0, false).unwrap();
            let sim =
                rkube_sim::simulate(&c, &cfg, &rkube_sim::SimulateOptions::default()).unwrap();
            let want: Vec<(String, Option<String>)> = sim
                .placements
                .iter()
                .map(|p| (p.pod.clone(), if p.evicted { None } else { p.node.clone() }))
                .collect();
            assert_eq!(r.placements, want, "{w}");
            assert_eq!(r.scheduled, sim.summary.scheduled, "{w}");
        }
    }

    #[test]
    fn percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50), 50.0);
        assert_eq!(percentile(&v, 99), 99.0);
        assert_eq!(percentile(&[3.0], 99), 3.0);
        assert_eq!(percentile(&[], 50), 0.0);
    }
}
