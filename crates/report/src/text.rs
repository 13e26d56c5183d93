//! Plain-text tables shared by the CLI and the live scheduler's logs.

use std::fmt::Write;

use crate::{GroupExplanation, PodExplanation};

/// Widest a column is padded to: a longer cell is printed whole but does not
/// widen its column, so the output stays linear in the input whatever the
/// cells hold (a megabyte-long name must not pad every other row to it).
const MAX_COLUMN_WIDTH: usize = 100;

/// Left-aligned columns separated by two spaces; the last column is not padded.
pub fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(|r| r.len()).max().unwrap_or(0);
    let mut widths = vec![0; cols];
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count().min(MAX_COLUMN_WIDTH));
        }
    }
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate() {
            line.push_str(c);
            if i + 1 < r.len() {
                let pad = widths[i].saturating_sub(c.chars().count()) + 2;
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `rkube explain` table: filters per node, then per-plugin scores per feasible node.
pub fn explanation(e: &PodExplanation) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Pod {} (profile {})", e.pod, e.profile);
    let untried = e
        .pod_group
        .as_ref()
        .is_some_and(|g| g.members.iter().any(|m| m.pod == e.pod && !m.tried));
    if untried {
        let _ = writeln!(
            out,
            "Not tried: its group's cycle stopped before its turn.\n\nNo node selected: {}",
            e.message
        );
        if let Some(g) = &e.pod_group {
            out.push_str(&group(g, false));
        }
        return out;
    }
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
    let devices: Vec<_> = e.nodes.iter().filter(|n| !n.devices.is_empty()).collect();
    if !devices.is_empty() {
        let _ = writeln!(
            out,
            "\nDevices (why DynamicResources cannot allocate the claims; each request counted on its own)"
        );
        let mut rows = vec![vec![
            "  NODE".to_string(),
            "CLAIM".into(),
            "REQUEST".into(),
            "CLASS".into(),
            "WANTS".into(),
            "DEVICES".into(),
            "MATCHING".into(),
            "FREE".into(),
            "NOTE".into(),
        ]];
        for n in devices {
            for d in &n.devices {
                let note = match &d.error {
                    Some(e) => e.clone(),
                    None if d.tainted > 0 => format!("{} of the free ones tainted", d.tainted),
                    None => String::new(),
                };
                rows.push(vec![
                    format!("  {}", n.name),
                    d.claim.clone(),
                    d.request.clone(),
                    d.class.clone(),
                    d.wants.clone(),
                    d.devices.to_string(),
                    d.matching.to_string(),
                    d.free.to_string(),
                    note,
                ]);
            }
        }
        out.push_str(&table(&rows));
    }
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
        None => match &e.error {
            Some(err) => {
                let _ = writeln!(out, "No node selected: scheduling failed with an error (the scheduler retries the pod with back-off): {err}");
            }
            None => {
                let _ = writeln!(out, "No node selected: {}", e.message);
            }
        },
    }
    if let Some(g) = &e.pod_group {
        out.push_str(&group(g, true));
    }
    if let Some(live) = &e.live {
        let o = &live.observed;
        match (&o.node, &o.condition) {
            (Some(n), _) => {
                let _ = writeln!(out, "\nIn the cluster: bound to {n}");
            }
            (None, Some(c)) => {
                let _ = writeln!(
                    out,
                    "\nIn the cluster: PodScheduled={} {}: {}",
                    c.status, c.reason, c.message
                );
            }
            (None, None) => {
                let _ = writeln!(out, "\nIn the cluster: not scheduled yet");
            }
        }
        let verdict = match live.agrees {
            Some(true) => "rkube agrees",
            Some(false) => "rkube disagrees",
            None => "nothing to compare",
        };
        let _ = writeln!(out, "{verdict}: {}", live.note);
    }
    out
}

/// Most member names listed per rejection in the per-node table (the JSON
/// lists them all).
const MAX_NAMES: usize = 3;

/// The pod-group part of `rkube explain`: each member's turn, the nodes,
/// the verdict and the nodes to add.
/// `tried`: the explained pod had a turn, whose node table precedes this.
fn group(g: &GroupExplanation, tried: bool) -> String {
    let mut out = String::new();
    let policy = match g.min_count {
        Some(n) => format!("gang, minCount {n}"),
        None => "basic".to_string(),
    };
    let _ = write!(
        out,
        "\nPod group {} ({policy}; {} member(s) bound before)",
        g.group, g.scheduled_before
    );
    let _ = writeln!(
        out,
        "{}",
        if tried {
            ": the node table above is this pod's turn in the group's cycle"
        } else {
            ""
        }
    );
    let mut rows = vec![vec![
        "  MEMBER".to_string(),
        "TRIED".into(),
        "PICKED".into(),
        "RESULT".into(),
    ]];
    for m in &g.members {
        rows.push(vec![
            format!("  {}", m.pod),
            if m.tried { "yes" } else { "no" }.into(),
            m.fits_on.clone().unwrap_or_else(|| "-".into()),
            match &m.node {
                Some(n) => format!("bound to {n}"),
                None => m.message.clone(),
            },
        ]);
    }
    out.push_str(&table(&rows));
    let mut rows = vec![vec![
        "  NODE".to_string(),
        "PLACED".into(),
        "REJECTED (members that fit nowhere)".into(),
    ]];
    for n in &g.nodes {
        // Members rejected for the same reasons are listed together.
        let mut why: Vec<(String, Vec<&str>)> = Vec::new();
        for r in &n.rejected {
            let reason = format!("{}: {}", r.plugin, r.reasons.join(", "));
            match why.iter_mut().find(|(w, _)| *w == reason) {
                Some((_, pods)) => pods.push(&r.pod),
                None => why.push((reason, vec![&r.pod])),
            }
        }
        let rejected: Vec<String> = why
            .iter()
            .map(|(reason, pods)| {
                let mut names = pods[..pods.len().min(MAX_NAMES)].join(", ");
                if pods.len() > MAX_NAMES {
                    let _ = write!(names, " and {} more", pods.len() - MAX_NAMES);
                }
                format!("{names} ({reason})")
            })
            .collect();
        if n.placed.is_empty() && rejected.is_empty() {
            continue;
        }
        rows.push(vec![
            format!("  {}", n.name),
            if n.placed.is_empty() {
                "-".to_string()
            } else {
                n.placed.join(", ")
            },
            rejected.join("; "),
        ]);
    }
    if rows.len() > 1 {
        out.push('\n');
        out.push_str(&table(&rows));
    }
    out.push('\n');
    out.push_str(&group_verdict(g));
    out.push('\n');
    out
}

/// The last line of a pod group's explanation: scheduled, or how many
/// nodes would make it fit.
pub fn group_verdict(g: &GroupExplanation) -> String {
    if g.scheduled {
        return "The group is scheduled.".to_string();
    }
    let verdict = nodes_verdict(g);
    match &g.preemption {
        Some(p) => format!(
            "{verdict} Workload-aware preemption makes room now: it evicts {} and nominates {}.",
            p.victims.join(", "),
            p.nominated
                .iter()
                .map(|n| format!("{} to {}", n.pod, n.node))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        None => verdict,
    }
}

fn nodes_verdict(g: &GroupExplanation) -> String {
    match &g.fits_with {
        Some(a) => format!(
            "The group does not fit; it fits with {} more node(s) like {}{}.",
            a.count,
            a.like,
            if g.search_limited {
                " (the search stopped at its limit: fewer may do)"
            } else {
                ""
            }
        ),
        None if g.search_limited => "The group does not fit; the search for nodes to add stopped at its limit without an answer.".to_string(),
        None => "The group does not fit, and no number of copies of an existing node (up to one per pending member) makes it fit.".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::{table, MAX_COLUMN_WIDTH};

    #[test]
    fn columns_are_aligned() {
        let rows = vec![
            vec!["NAME".to_string(), "NODE".to_string()],
            vec!["a".to_string(), "n1".to_string()],
        ];
        assert_eq!(table(&rows), "NAME  NODE\na     n1\n");
    }

    #[test]
    fn a_huge_cell_neither_panics_nor_pads_other_rows() {
        let huge = "x".repeat(10 << 20);
        let rows = vec![
            vec![huge.clone(), "n1".to_string()],
            vec!["b".to_string(), "n2".to_string()],
        ];
        let out = table(&rows);
        assert!(out.len() < huge.len() + 200, "{}", out.len());
        assert!(out.ends_with(&format!("b{}n2\n", " ".repeat(MAX_COLUMN_WIDTH + 1))));
    }
}
