//! Human-readable tables for `simulate` and `explain`.

use std::fmt::Write;

use rkube_sim::{PodExplanation, SimulationReport};

fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(|r| r.len()).max().unwrap_or(0);
    let mut widths = vec![0; cols];
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate() {
            if i + 1 == r.len() {
                line.push_str(c);
            } else {
                let _ = write!(line, "{c:<w$}  ", w = widths[i]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
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

/// `rkube explain` table: filters per node, then per-plugin scores per feasible node.
pub fn explanation(e: &PodExplanation) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Pod {} (profile {})", e.pod, e.profile);
    let feasible = e.nodes.iter().filter(|n| n.feasible).count();
    let _ = writeln!(out, "{feasible}/{} nodes feasible\n", e.nodes.len());
    let mut rows = vec![vec![
        "NODE".to_string(),
        "FEASIBLE".into(),
        "FILTER FAILURES".into(),
    ]];
    for n in &e.nodes {
        let failures: Vec<String> = n
            .filters
            .iter()
            .filter(|f| f.code != "Success" && f.code != "Skip")
            .map(|f| format!("{}: {}", f.plugin, f.reasons.join(", ")))
            .collect();
        rows.push(vec![
            n.name.clone(),
            if n.feasible { "yes" } else { "no" }.into(),
            failures.join("; "),
        ]);
    }
    out.push_str(&table(&rows));
    let mut scored: Vec<_> = e.nodes.iter().filter(|n| n.feasible).collect();
    scored.sort_by(|a, b| b.total.cmp(&a.total).then(a.name.cmp(&b.name)));
    for n in scored {
        let _ = writeln!(out, "\nNode {}: total {}", n.name, n.total);
        let mut rows = vec![vec![
            "  PLUGIN".to_string(),
            "RAW".into(),
            "NORMALIZED".into(),
            "WEIGHT".into(),
            "WEIGHTED".into(),
        ]];
        for s in &n.scores {
            rows.push(vec![
                format!("  {}", s.plugin),
                s.raw.to_string(),
                s.normalized.to_string(),
                s.weight.to_string(),
                s.weighted.to_string(),
            ]);
        }
        out.push_str(&table(&rows));
    }
    out.push('\n');
    match &e.selected_node {
        Some(n) => {
            let _ = writeln!(out, "Selected node: {n}");
        }
        None => {
            let _ = writeln!(out, "No node selected: {}", e.message);
        }
    }
    out
}
