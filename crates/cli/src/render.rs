//! Human-readable output for `simulate`, `explain`, `compare`, `capacity`,
//! `drain` and `config check`.

use std::collections::BTreeSet;
use std::fmt::Write;

use rkube_sim::capacity::CapacityReport;
use rkube_sim::check::{CheckReport, Finding};
use rkube_sim::compare::{Comparison, ConfigOutcome, NodeUsage};
use rkube_sim::drain::DrainReport;
use rkube_sim::stats::Stats;
pub use rkube_sim::text::explanation;
use rkube_sim::text::table;
use rkube_sim::SimulationReport;

/// `rkube capacity` table: per shape the count and the message of the clone
/// that did not fit, then per node the clones placed and why the node stopped.
pub fn capacity(r: &CapacityReport) -> String {
    let mut rows = vec![vec![
        "SHAPE".to_string(),
        "POD".into(),
        "FIT".into(),
        "STOPPED BY".into(),
    ]];
    for s in &r.shapes {
        rows.push(vec![
            s.shape.clone(),
            s.pod.clone(),
            s.count.to_string(),
            match &s.stopped {
                Some(stop) => stop.message.clone(),
                None => format!("--max {} reached", r.total),
            },
        ]);
    }
    let mut out = table(&rows);
    for s in &r.shapes {
        let _ = writeln!(out, "\n{} ({}):", s.pod, s.shape);
        let mut rows = vec![vec![
            "NODE".to_string(),
            "PODS".into(),
            "WHY NO MORE".into(),
        ]];
        for n in &r.nodes {
            let why = s
                .stopped
                .as_ref()
                .and_then(|st| st.nodes.iter().find(|x| x.name == n.name))
                .map(|x| format!("{}: {}", x.plugin, x.reasons.join("; ")))
                .unwrap_or_default();
            rows.push(vec![
                n.name.clone(),
                s.per_node.get(&n.name).copied().unwrap_or(0).to_string(),
                why,
            ]);
        }
        out.push_str(&table(&rows));
    }
    out
}

/// A titled table, printed only when it has rows.
fn section(out: &mut String, title: &str, header: &[&str], rows: Vec<Vec<String>>) {
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(out, "\n{title}:");
    let mut all = vec![header.iter().map(|h| h.to_string()).collect::<Vec<_>>()];
    all.extend(rows);
    out.push_str(&table(&all));
}

/// `rkube drain` tables: what happened to each node, the evictions and
/// where the replacements went, what stayed and why, then node usage
/// before and after.
pub fn drain(r: &DrainReport) -> String {
    let mut out = String::new();
    let rows = r
        .drained_nodes
        .iter()
        .map(|n| vec![n.name.clone(), n.message.clone()])
        .collect();
    section(
        &mut out,
        &format!("Nodes ({})", r.mode),
        &["NODE", "RESULT"],
        rows,
    );
    if r.drained_nodes.iter().any(|n| n.cordoned_only) {
        out.push_str(
            "kubectl drain refuses the pods below, so it evicts nothing from their node: the node is only cordoned.\n",
        );
    }
    drain_pods(&mut out, r);
    drain_usage(&mut out, &r.nodes_before, &r.nodes_after);
    let s = &r.summary;
    let _ = writeln!(
        out,
        "\n{} evicted ({} rescheduled, {} pending), {} blocked, {} refused, {} deleted and not recreated, {} left in place",
        s.evicted, s.rescheduled, s.pending, s.blocked, s.refused, s.deleted_not_recreated, s.skipped
    );
    out.trim_start().to_string()
}

/// The per-pod sections of `rkube drain`.
fn drain_pods(out: &mut String, r: &DrainReport) {
    let node = |n: &Option<String>| n.clone().unwrap_or_else(|| "<pending>".into());
    let rows = r
        .evicted
        .iter()
        .map(|e| {
            vec![
                e.pod.clone(),
                e.from_node.clone(),
                e.replacement.clone(),
                node(&e.node),
                e.message.clone(),
            ]
        })
        .collect();
    section(
        out,
        "Evicted, and where each replacement goes",
        &["POD", "FROM", "REPLACEMENT", "NODE", "MESSAGE"],
        rows,
    );
    let rows = r
        .blocked
        .iter()
        .map(|b| {
            vec![
                b.pod.clone(),
                b.node.clone(),
                b.pdb.clone(),
                format!("{} {}", b.message, b.cause),
            ]
        })
        .collect();
    section(
        out,
        "Blocked by a PodDisruptionBudget (still on its node)",
        &["POD", "NODE", "PDB", "MESSAGE"],
        rows,
    );
    let rows = r
        .refused
        .iter()
        .map(|x| vec![x.pod.clone(), x.node.clone(), x.message.clone()])
        .collect();
    section(out, "Refused", &["POD", "NODE", "MESSAGE"], rows);
    let rows = r
        .deleted_not_recreated
        .iter()
        .map(|x| vec![x.pod.clone(), x.from_node.clone(), x.reason.clone()])
        .collect();
    section(out, "Deleted, not recreated", &["POD", "FROM", "WHY"], rows);
    let rows = r
        .skipped
        .iter()
        .map(|x| {
            let mut why = x.reason.clone();
            if x.removed_with_node {
                why.push_str("; removed with the node");
            }
            vec![x.pod.clone(), x.node.clone(), why]
        })
        .collect();
    section(out, "Left in place", &["POD", "NODE", "WHY"], rows);
}

/// Pods and requested CPU / memory per node, before and after.
fn drain_usage(out: &mut String, before: &[NodeUsage], after: &[NodeUsage]) {
    let rows = before
        .iter()
        .map(|b| {
            let a = after.iter().find(|a| a.name == b.name);
            let get = |f: fn(&NodeUsage) -> String| a.map_or_else(|| "(deleted)".into(), f);
            vec![
                b.name.clone(),
                format!("{} → {}", b.pods, get(|a| a.pods.to_string())),
                format!(
                    "{} → {}",
                    pct(b.cpu_utilization),
                    get(|a| pct(a.cpu_utilization))
                ),
                format!(
                    "{} → {}",
                    pct(b.memory_utilization),
                    get(|a| pct(a.memory_utilization))
                ),
            ]
        })
        .collect();
    section(
        out,
        "Nodes before → after (requested / allocatable)",
        &["NODE", "PODS", "CPU", "MEMORY"],
        rows,
    );
}

/// `rkube simulate` table.
pub fn simulation(r: &SimulationReport) -> String {
    let mut rows = vec![vec!["POD".to_string(), "NODE".into(), "MESSAGE".into()]];
    for p in &r.placements {
        let message = match &p.preempted_by {
            Some(by) if p.evicted => format!("evicted by {by} (preemption)"),
            _ => p.message.clone(),
        };
        rows.push(vec![
            p.pod.clone(),
            p.node.clone().unwrap_or_else(|| "<none>".into()),
            message,
        ]);
    }
    let mut out = table(&rows);
    let mut devices = vec![vec![
        "POD".to_string(),
        "CLAIM".into(),
        "REQUEST".into(),
        "DEVICE (DRIVER/POOL/DEVICE)".into(),
    ]];
    for p in r.placements.iter().filter(|p| !p.evicted) {
        for d in &p.devices {
            devices.push(vec![
                p.pod.clone(),
                d.claim.clone(),
                d.request.clone(),
                format!("{}/{}/{}", d.driver, d.pool, d.device),
            ]);
        }
    }
    if devices.len() > 1 {
        out.push_str("\nDevices allocated (DRA)\n");
        out.push_str(&table(&devices));
    }
    out.push('\n');
    let mut rows = vec![vec![
        "NODE".to_string(),
        "PODS".into(),
        "CPU REQUESTED/ALLOCATABLE".into(),
        "MEMORY REQUESTED/ALLOCATABLE".into(),
    ]];
    for n in &r.nodes {
        let get = |m: &std::collections::BTreeMap<String, String>, k: &str| {
            m.get(k).cloned().unwrap_or_else(|| "0".into())
        };
        rows.push(vec![
            n.name.clone(),
            n.pods.to_string(),
            format!(
                "{}/{}",
                get(&n.requested, "cpu"),
                get(&n.allocatable, "cpu")
            ),
            format!(
                "{}/{}",
                get(&n.requested, "memory"),
                get(&n.allocatable, "memory")
            ),
        ]);
    }
    out.push_str(&table(&rows));
    if !r.preemptions.is_empty() {
        out.push('\n');
        let mut rows = vec![vec![
            "PREEMPTOR".to_string(),
            "NODE".into(),
            "VICTIMS".into(),
        ]];
        for p in &r.preemptions {
            rows.push(vec![
                p.preemptor.clone(),
                p.node.clone(),
                p.victims.join(", "),
            ]);
        }
        out.push_str(&table(&rows));
    }
    let _ = writeln!(
        out,
        "\n{} scheduled, {} unschedulable",
        r.summary.scheduled, r.summary.unschedulable
    );
    if r.summary.preemptions > 0 {
        let _ = writeln!(
            out,
            "{} preemption(s), {} pod(s) placed in this run evicted",
            r.summary.preemptions, r.summary.evicted
        );
    }
    for p in r.placements.iter().filter_map(|p| p.explain.as_ref()) {
        out.push('\n');
        out.push_str(&explanation(p));
    }
    out
}

fn finding(out: &mut String, level: &str, f: &Finding) {
    if f.field.is_empty() {
        let _ = writeln!(out, "{level}: {}", f.message);
    } else {
        let _ = writeln!(out, "{level}: {}: {}", f.field, f.message);
    }
    if let Some(h) = &f.hint {
        let _ = writeln!(out, "  hint: {h}");
    }
}

/// `rkube config check` errors and (unless quiet) warnings, for stderr.
pub fn check_findings(r: &CheckReport, quiet: bool) -> String {
    let mut out = String::new();
    for e in &r.errors {
        finding(&mut out, "error", e);
    }
    if !quiet {
        for w in &r.warnings {
            finding(&mut out, "warning", w);
        }
    }
    out
}

/// `rkube config check` one-line verdict.
pub fn check_verdict(r: &CheckReport) -> String {
    let plural = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    if r.valid {
        format!(
            "{}: valid ({})\n",
            r.file,
            plural(r.warnings.len(), "warning")
        )
    } else {
        format!(
            "{}: invalid ({}, {}): kube-scheduler would refuse to start\n",
            r.file,
            plural(r.errors.len(), "error"),
            plural(r.warnings.len(), "warning")
        )
    }
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

fn stats_pct(s: &Stats) -> String {
    format!("{} / {} / {}", pct(s.min), pct(s.max), pct(s.stddev))
}

/// `rkube compare` tables.
pub fn comparison(c: &Comparison) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "A: {}\nB: {}\n", c.a.config, c.b.config);
    let node = |n: &Option<String>| n.clone().unwrap_or_else(|| "<none>".into());
    if c.moved.is_empty() {
        out.push_str("Every pod lands on the same node under A and B.\n");
    } else {
        let _ = writeln!(out, "{} pod(s) land elsewhere:", c.moved.len());
        let mut rows = vec![vec!["POD".to_string(), "NODE A".into(), "NODE B".into()]];
        for m in &c.moved {
            rows.push(vec![m.pod.clone(), node(&m.node_a), node(&m.node_b)]);
        }
        out.push_str(&table(&rows));
    }
    out.push('\n');
    let both = |f: &dyn Fn(&ConfigOutcome) -> String, label: &str| {
        vec![label.to_string(), f(&c.a), f(&c.b)]
    };
    let rows = vec![
        vec![String::new(), "A".into(), "B".into()],
        both(&|o| o.scheduled.to_string(), "scheduled"),
        both(&|o| o.unschedulable.to_string(), "unschedulable"),
        both(
            &|o| {
                let s = &o.pods_per_node;
                format!("{} / {} / {:.2}", s.min, s.max, s.stddev)
            },
            "pods per node (min / max / stddev)",
        ),
        both(
            &|o| stats_pct(&o.cpu_utilization),
            "CPU requested (min / max / stddev)",
        ),
        both(
            &|o| stats_pct(&o.memory_utilization),
            "memory requested (min / max / stddev)",
        ),
    ];
    out.push_str(&table(&rows));
    if c.a.preemptions + c.b.preemptions > 0 {
        let _ = writeln!(
            out,
            "preemptions: A {} (evicting {}), B {} (evicting {})",
            c.a.preemptions, c.a.evicted, c.b.preemptions, c.b.evicted
        );
    }
    out.push('\n');
    let mut rows = vec![vec![
        "NODE".to_string(),
        "PODS A".into(),
        "PODS B".into(),
        "CPU A".into(),
        "CPU B".into(),
        "MEMORY A".into(),
        "MEMORY B".into(),
    ]];
    let names: Vec<&str> =
        c.a.nodes
            .iter()
            .chain(&c.b.nodes)
            .map(|n| n.name.as_str())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
    for name in names {
        let a = c.a.nodes.iter().find(|n| n.name == name);
        let b = c.b.nodes.iter().find(|n| n.name == name);
        let get = |n: Option<&rkube_sim::compare::NodeUsage>,
                   f: fn(&rkube_sim::compare::NodeUsage) -> String| {
            n.map(f).unwrap_or_else(|| "-".into())
        };
        rows.push(vec![
            name.to_string(),
            get(a, |n| n.pods.to_string()),
            get(b, |n| n.pods.to_string()),
            get(a, |n| pct(n.cpu_utilization)),
            get(b, |n| pct(n.cpu_utilization)),
            get(a, |n| pct(n.memory_utilization)),
            get(b, |n| pct(n.memory_utilization)),
        ]);
    }
    out.push_str(&table(&rows));
    let workloads: BTreeSet<&str> =
        c.a.workloads
            .iter()
            .chain(&c.b.workloads)
            .map(|w| w.workload.as_str())
            .collect();
    if !workloads.is_empty() {
        out.push('\n');
        let mut rows = vec![vec![
            "WORKLOAD".to_string(),
            "PODS A".into(),
            "NODES A".into(),
            "MAX/NODE A".into(),
            "PODS B".into(),
            "NODES B".into(),
            "MAX/NODE B".into(),
        ]];
        for w in workloads {
            let mut row = vec![w.to_string()];
            for o in [&c.a, &c.b] {
                match o.workloads.iter().find(|x| x.workload == w) {
                    Some(x) => row.extend([
                        x.pods.to_string(),
                        x.nodes_used.to_string(),
                        x.max_per_node.to_string(),
                    ]),
                    None => row.extend(["0".into(), "0".into(), "0".into()]),
                }
            }
            rows.push(row);
        }
        out.push_str(&table(&rows));
    }
    out
}

/// `rkube replay` table: the totals, then every decision that differs from
/// the recording (all of them agree when the list is empty).
pub fn replay(r: &rkube_sim::replay::ReplayReport) -> String {
    let s = &r.summary;
    let mut out = format!(
        "Replayed {} changes from {} under {}\n{} pods decided: {} as recorded, {} on another node, {} pending only in the replay, {} bound only in the replay\n",
        r.changes,
        r.recording,
        r.config,
        s.decisions,
        s.same,
        s.moved,
        s.pending_only_in_replay,
        s.bound_only_in_replay
    );
    let differ: Vec<_> = r.decisions.iter().filter(|d| !d.same).collect();
    if differ.is_empty() {
        return out;
    }
    let node = |n: &Option<String>| n.clone().unwrap_or_else(|| "<pending>".into());
    let mut rows = vec![vec![
        "POD".to_string(),
        "RECORDED".into(),
        "REPLAY".into(),
        "MESSAGE".into(),
    ]];
    for d in differ {
        rows.push(vec![
            d.pod.clone(),
            node(&d.recorded_node),
            node(&d.replay_node),
            d.message.clone(),
        ]);
    }
    out.push('\n');
    out.push_str(&rkube_sim::text::table(&rows));
    out
}
