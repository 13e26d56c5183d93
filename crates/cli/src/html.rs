//! `-o html`: one self-contained page (inline CSS, SVG and a few lines of
//! JavaScript; nothing is fetched when it is viewed) for `simulate`, `explain`,
//! `compare` and `drain`. Pure data → string; every piece of text from the input is
//! escaped.
//!
//! Elements carry `data-*` attributes (node, resource, phase, pod, total) so
//! tests — and anyone scraping the page — can read the numbers back.

use std::fmt::Write;

use rkube_sim::compare::{Comparison, ConfigOutcome, NodeUsage};
use rkube_sim::drain::DrainReport;
use rkube_sim::stats::Stats;
use rkube_sim::{NodeSummary, PodExplanation, SimulationReport};

/// Escapes text for HTML element content and (double- or single-quoted)
/// attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const CSS: &str = r#"
:root{--fg:#1d2433;--muted:#667085;--line:#d0d5dd;--bg:#fff;--cpu:#2f6fdf;--mem:#9b51e0;--bad:#c0392b}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg);margin:0;padding:20px 28px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:26px 0 8px;border-bottom:1px solid var(--line);padding-bottom:4px}
h3{font-size:15px;margin:16px 0 6px}
.muted{color:var(--muted)}
table{border-collapse:collapse;margin:4px 0 8px}
th,td{border:1px solid var(--line);padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f2f4f7;font-weight:600}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.msg{max-width:900px;white-space:pre-wrap;word-break:break-word}
.legend span{display:inline-block;margin-right:14px}
.sw{display:inline-block;width:12px;height:12px;vertical-align:-1px;margin-right:4px;border-radius:2px}
svg.util{display:block;margin:6px 0;max-width:100%;height:auto}
svg.util text{font-size:12px;fill:var(--fg)}
svg.util .track{fill:#eef0f3}
svg.util .cap{stroke:#333;stroke-width:1;stroke-dasharray:3 2}
table.heatmap td.cell{min-width:62px;text-align:center;font-variant-numeric:tabular-nums;cursor:default}
table.heatmap td.infeasible{background:repeating-linear-gradient(45deg,#f4f4f4,#f4f4f4 4px,#e6e6e6 4px,#e6e6e6 8px);color:var(--bad)}
table.heatmap td.selected{outline:3px solid #111;outline-offset:-3px;font-weight:700}
table.heatmap th.pod{white-space:nowrap}
#detail{position:fixed;right:16px;bottom:16px;max-width:440px;background:#111827;color:#f9fafb;padding:8px 10px;border-radius:6px;font:12px/1.4 ui-monospace,monospace;white-space:pre-wrap;display:none;z-index:9}
.side{display:grid;grid-template-columns:1fr 1fr;gap:24px}
.side>section{min-width:0;overflow-x:auto}
.ok{color:#1a7f37}.bad{color:var(--bad)}
"#;

/// Shows a cell's `data-tip` in the corner panel on hover (the `title`
/// tooltip carries the same text for browsers without JavaScript), and marks
/// the page as rendered.
const JS: &str = r#"
(function(){
  var d=document.getElementById('detail');
  document.querySelectorAll('[data-tip]').forEach(function(el){
    el.addEventListener('mouseenter',function(){d.textContent=el.getAttribute('data-tip');d.style.display='block';});
    el.addEventListener('mouseleave',function(){d.style.display='none';});
  });
  document.body.setAttribute('data-ready','1');
})();
"#;

fn page(title: &str, subtitle: &str, body: &str) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{t}</title>\n<style>{CSS}</style>\n</head>\n<body>\n\
         <h1>{t}</h1>\n<p class=\"muted\">{s}</p>\n{body}\n<div id=\"detail\"></div>\n<script>{JS}</script>\n</body>\n</html>\n",
        t = esc(title),
        s = esc(subtitle),
    );
    out
}

fn fmt_cpu(milli: i64) -> String {
    if milli % 1000 == 0 {
        format!("{}", milli / 1000)
    } else {
        format!("{milli}m")
    }
}

fn fmt_mem(bytes: i64) -> String {
    const UNITS: [(&str, i64); 4] = [
        ("Ti", 1 << 40),
        ("Gi", 1 << 30),
        ("Mi", 1 << 20),
        ("Ki", 1 << 10),
    ];
    for (u, n) in UNITS {
        if bytes.abs() >= n {
            let v = bytes as f64 / n as f64;
            return if bytes % n == 0 {
                format!("{}{u}", bytes / n)
            } else {
                format!("{v:.1}{u}")
            };
        }
    }
    bytes.to_string()
}

fn ratio(num: i64, den: i64) -> f64 {
    if den <= 0 {
        0.0
    } else {
        num as f64 / den as f64
    }
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

/// Per-node CPU and memory bars: requested / allocatable, before (light) and
/// after (dark) the run. `before` may be empty (one phase only). `bar_w`:
/// the width of a 100% bar in pixels.
fn utilization(
    bar_w: f64,
    nodes: &[NodeSummary],
    before: &[NodeSummary],
    label_after: &str,
) -> String {
    if nodes.is_empty() {
        return "<p class=\"muted\">No nodes.</p>\n".into();
    }
    let phases: Vec<(&str, &[NodeSummary])> = if before.is_empty() {
        vec![(label_after, nodes)]
    } else {
        vec![("before", before), (label_after, nodes)]
    };
    // One row per node before (a node removed since has no "after" bar).
    let nodes = if before.is_empty() { nodes } else { before };
    const NAME_W: f64 = 170.0;
    const GAP: f64 = 130.0;
    const BAR_H: f64 = 12.0;
    let row_h = phases.len() as f64 * (BAR_H + 3.0) + 12.0;
    let width = NAME_W + 2.0 * (bar_w + GAP);
    let height = 22.0 + nodes.len() as f64 * row_h;
    let mut out = String::new();
    out.push_str("<p class=\"legend\">");
    for (i, (phase, _)) in phases.iter().enumerate() {
        let opacity = if i + 1 == phases.len() { 1.0 } else { 0.4 };
        let _ = write!(
            out,
            "<span><i class=\"sw\" style=\"background:var(--cpu);opacity:{opacity}\"></i><i class=\"sw\" style=\"background:var(--mem);opacity:{opacity}\"></i>{}</span>",
            esc(phase)
        );
    }
    out.push_str("<span class=\"muted\">dashed line: allocatable (100%)</span></p>\n");
    let _ = writeln!(
        out,
        "<svg class=\"util\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" role=\"img\" aria-label=\"requested / allocatable per node\">"
    );
    for (c, label) in [
        (0.0, "CPU requested / allocatable"),
        (1.0, "memory requested / allocatable"),
    ] {
        let _ = writeln!(
            out,
            "<text x=\"{}\" y=\"14\" font-weight=\"600\">{label}</text>",
            NAME_W + c * (bar_w + GAP)
        );
    }
    for (i, n) in nodes.iter().enumerate() {
        let y0 = 22.0 + i as f64 * row_h;
        let _ = writeln!(
            out,
            "<g class=\"node\" data-node=\"{name}\"><text x=\"0\" y=\"{ty}\">{name}</text>",
            name = esc(&n.name),
            ty = y0 + BAR_H,
        );
        for (c, resource) in ["cpu", "memory"].into_iter().enumerate() {
            let x0 = NAME_W + c as f64 * (bar_w + GAP);
            for (j, (phase, set)) in phases.iter().enumerate() {
                // Match by name: `before` and `after` list the same nodes.
                let Some(m) = set.iter().find(|m| m.name == n.name) else {
                    continue;
                };
                let (req, alloc, shown) = if resource == "cpu" {
                    (
                        m.requested_milli_cpu,
                        m.allocatable_milli_cpu,
                        format!(
                            "{}/{}",
                            fmt_cpu(m.requested_milli_cpu),
                            fmt_cpu(m.allocatable_milli_cpu)
                        ),
                    )
                } else {
                    (
                        m.requested_memory,
                        m.allocatable_memory,
                        format!(
                            "{}/{}",
                            fmt_mem(m.requested_memory),
                            fmt_mem(m.allocatable_memory)
                        ),
                    )
                };
                let r = ratio(req, alloc);
                let w = (r.clamp(0.0, 1.0) * bar_w).round();
                let y = y0 + j as f64 * (BAR_H + 3.0);
                let last = j + 1 == phases.len();
                let color = if resource == "cpu" { "--cpu" } else { "--mem" };
                let fill = if r > 1.0 {
                    "var(--bad)".to_string()
                } else {
                    format!("var({color})")
                };
                let opacity = if last { 1.0 } else { 0.4 };
                let tip = format!(
                    "{} {resource} {phase}: {shown} requested ({})",
                    n.name,
                    pct(r)
                );
                let _ = writeln!(
                    out,
                    "<rect class=\"track\" x=\"{x0}\" y=\"{y}\" width=\"{bar_w}\" height=\"{BAR_H}\"/>\
                     <rect class=\"bar\" data-node=\"{node}\" data-resource=\"{resource}\" data-phase=\"{phase}\" data-requested=\"{req}\" data-allocatable=\"{alloc}\" data-tip=\"{tip}\" x=\"{x0}\" y=\"{y}\" width=\"{w}\" height=\"{BAR_H}\" style=\"fill:{fill};opacity:{opacity}\"><title>{tip}</title></rect>\
                     <text x=\"{tx}\" y=\"{ty}\">{p} <tspan class=\"muted\" fill=\"#667085\">{shown}</tspan></text>",
                    node = esc(&n.name),
                    phase = esc(phase),
                    tip = esc(&tip),
                    tx = x0 + bar_w + 6.0,
                    ty = y + BAR_H - 1.5,
                    p = pct(r),
                    shown = esc(&shown),
                );
            }
            let _ = writeln!(
                out,
                "<line class=\"cap\" x1=\"{x}\" x2=\"{x}\" y1=\"{y1}\" y2=\"{y2}\"/>",
                x = x0 + bar_w,
                y1 = y0 - 2.0,
                y2 = y0 + phases.len() as f64 * (BAR_H + 3.0),
            );
        }
        out.push_str("</g>\n");
    }
    out.push_str("</svg>\n");
    out
}

/// Light (low) to dark (high) blue.
fn heat(t: f64) -> (String, &'static str) {
    let t = t.clamp(0.0, 1.0);
    let l = 95.0 - t * 55.0;
    let fg = if l < 60.0 { "#fff" } else { "#1d2433" };
    (format!("hsl(215,70%,{l:.0}%)"), fg)
}

/// Pod × node heatmap of total scores (colour scaled within each pod's row,
/// since totals only compare between the nodes of one pod), per-plugin
/// breakdown on hover, filter failures on infeasible cells.
fn heatmap(explanations: &[&PodExplanation]) -> String {
    let mut nodes: Vec<&str> = explanations
        .iter()
        .flat_map(|e| e.nodes.iter().map(|n| n.name.as_str()))
        .collect();
    nodes.sort();
    nodes.dedup();
    let mut out = String::new();
    out.push_str(
        "<p class=\"muted\">Total weighted score per feasible node (darker: higher within the pod's row); \
         the selected node is outlined; ✗ = filtered out. Hover a cell for the per-plugin breakdown.</p>\n",
    );
    out.push_str("<table class=\"heatmap\">\n<thead><tr><th>pod \\ node</th>");
    for n in &nodes {
        let _ = write!(out, "<th>{}</th>", esc(n));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for e in explanations {
        let feasible: Vec<i64> = e
            .nodes
            .iter()
            .filter(|n| n.feasible)
            .map(|n| n.total)
            .collect();
        let lo = feasible.iter().copied().min().unwrap_or(0);
        let hi = feasible.iter().copied().max().unwrap_or(0);
        let _ = write!(
            out,
            "<tr class=\"pod\" data-pod=\"{p}\"><th class=\"pod\">{p}</th>",
            p = esc(&e.pod)
        );
        for name in &nodes {
            let Some(n) = e.nodes.iter().find(|n| n.name == *name) else {
                out.push_str("<td class=\"cell missing\">–</td>");
                continue;
            };
            let selected = e.selected_node.as_deref() == Some(*name);
            let sel = if selected { " selected" } else { "" };
            if n.feasible {
                let mut tip = format!("{} on {}: total {}", e.pod, n.name, n.total);
                if selected {
                    tip.push_str(" (selected)");
                }
                for s in &n.scores {
                    let _ = write!(
                        tip,
                        "\n{}: raw {} → normalized {} × weight {} = {}",
                        s.plugin, s.raw, s.normalized, s.weight, s.weighted
                    );
                }
                let t = if hi > lo {
                    (n.total - lo) as f64 / (hi - lo) as f64
                } else {
                    1.0
                };
                let (bg, fg) = heat(t);
                let _ = write!(
                    out,
                    "<td class=\"cell feasible{sel}\" data-pod=\"{p}\" data-node=\"{node}\" data-total=\"{total}\" data-tip=\"{tip}\" title=\"{tip}\" style=\"background:{bg};color:{fg}\">{total}</td>",
                    p = esc(&e.pod),
                    node = esc(&n.name),
                    total = n.total,
                    tip = esc(&tip),
                );
            } else {
                let mut tip = format!("{} on {}: filtered out", e.pod, n.name);
                for f in n
                    .filters
                    .iter()
                    .filter(|f| f.code != "Success" && f.code != "Skip")
                {
                    let _ = write!(tip, "\n{} ({}): {}", f.plugin, f.code, f.reasons.join(", "));
                }
                let _ = write!(
                    out,
                    "<td class=\"cell infeasible\" data-pod=\"{p}\" data-node=\"{node}\" data-tip=\"{tip}\" title=\"{tip}\">✗</td>",
                    p = esc(&e.pod),
                    node = esc(&n.name),
                    tip = esc(&tip),
                );
            }
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody>\n</table>\n");
    out
}

/// Pods left pending, with their FailedScheduling messages.
fn unschedulable(rows: &[(&str, &str)]) -> String {
    if rows.is_empty() {
        return "<p class=\"ok\">Every pod was scheduled.</p>\n".into();
    }
    let mut out = String::from(
        "<table class=\"unschedulable\">\n<thead><tr><th>pod</th><th>FailedScheduling</th></tr></thead>\n<tbody>\n",
    );
    for (pod, msg) in rows {
        let _ = writeln!(
            out,
            "<tr class=\"unschedulable-pod\" data-pod=\"{p}\"><td>{p}</td><td class=\"msg\">{m}</td></tr>",
            p = esc(pod),
            m = esc(msg)
        );
    }
    out.push_str("</tbody>\n</table>\n");
    out
}

fn pending(r: &SimulationReport) -> Vec<(&str, &str)> {
    r.placements
        .iter()
        .filter(|p| p.node.is_none())
        .map(|p| (p.pod.as_str(), p.message.as_str()))
        .collect()
}

fn placements_table(r: &SimulationReport) -> String {
    if r.placements.is_empty() {
        return "<p class=\"muted\">No pending pods.</p>\n".into();
    }
    let mut out = String::from(
        "<table class=\"placements\">\n<thead><tr><th>pod</th><th>node</th><th>note</th></tr></thead>\n<tbody>\n",
    );
    for p in &r.placements {
        let note = match (&p.preempted_by, &p.nominated_node) {
            (Some(by), _) if p.evicted => format!("evicted by {by} (preemption)"),
            (_, Some(n)) => format!("nominated to {n}"),
            _ => String::new(),
        };
        let node = match &p.node {
            Some(n) => esc(n),
            None => "<span class=\"bad\">&lt;none&gt;</span>".into(),
        };
        let _ = writeln!(
            out,
            "<tr class=\"placement\" data-pod=\"{p}\"><td>{p}</td><td>{node}</td><td class=\"msg\">{n}</td></tr>",
            p = esc(&p.pod),
            n = esc(&note),
        );
    }
    out.push_str("</tbody>\n</table>\n");
    out
}

fn preemptions_table(r: &SimulationReport) -> String {
    let mut out = String::from(
        "<table class=\"preemptions\">\n<thead><tr><th>preemptor</th><th>node</th><th>victims</th></tr></thead>\n<tbody>\n",
    );
    for p in &r.preemptions {
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&p.preemptor),
            esc(&p.node),
            esc(&p.victims.join(", "))
        );
    }
    out.push_str("</tbody>\n</table>\n");
    out
}

/// Devices allocated to the placed pods' claims (DRA), by node.
fn devices_table(r: &SimulationReport) -> Option<String> {
    let mut by_node: std::collections::BTreeMap<&str, Vec<(&str, &rkube_sim::AllocatedDevice)>> =
        Default::default();
    for p in &r.placements {
        if let Some(n) = &p.node {
            for d in &p.devices {
                by_node.entry(n).or_default().push((&p.pod, d));
            }
        }
    }
    if by_node.is_empty() {
        return None;
    }
    let mut out = String::from(
        "<table class=\"devices\">\n<thead><tr><th>node</th><th>devices</th><th>pod</th><th>claim / request</th><th>device (driver/pool/device)</th></tr></thead>\n<tbody>\n",
    );
    for (node, rows) in &by_node {
        for (i, (pod, d)) in rows.iter().enumerate() {
            let head = if i == 0 {
                format!(
                    "<td rowspan=\"{n}\">{node}</td><td rowspan=\"{n}\" class=\"num\">{n}</td>",
                    n = rows.len(),
                    node = esc(node)
                )
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "<tr class=\"device\" data-node=\"{nd}\">{head}<td>{}</td><td>{} / {}</td><td>{}/{}/{}</td></tr>",
                esc(pod),
                esc(&d.claim),
                esc(&d.request),
                esc(&d.driver),
                esc(&d.pool),
                esc(&d.device),
                nd = esc(node),
            );
        }
    }
    out.push_str("</tbody>\n</table>\n");
    Some(out)
}

/// The body of a simulation report; `compact` for half-width columns.
fn simulation_body(r: &SimulationReport, compact: bool) -> String {
    let h = if compact { "h3" } else { "h2" };
    let mut out = String::new();
    let s = &r.summary;
    let _ = writeln!(
        out,
        "<p class=\"summary\"><b>{}</b> scheduled, <b class=\"{}\">{}</b> unschedulable, {} preemption(s), {} evicted</p>",
        s.scheduled,
        if s.unschedulable > 0 { "bad" } else { "ok" },
        s.unschedulable,
        s.preemptions,
        s.evicted
    );
    let _ = writeln!(out, "<{h}>Node utilization (requests)</{h}>");
    out.push_str(&utilization(
        if compact { 170.0 } else { 300.0 },
        &r.nodes,
        &r.nodes_before,
        "after",
    ));
    let _ = writeln!(out, "<{h}>Unschedulable pods</{h}>");
    out.push_str(&unschedulable(&pending(r)));
    let explained: Vec<&PodExplanation> = r
        .placements
        .iter()
        .filter_map(|p| p.explain.as_ref())
        .collect();
    if !explained.is_empty() {
        let _ = writeln!(out, "<{h}>Scores: pod × node</{h}>");
        out.push_str(&heatmap(&explained));
    }
    if let Some(t) = devices_table(r) {
        let _ = writeln!(out, "<{h}>Devices allocated (DRA), by node</{h}>");
        out.push_str(&t);
    }
    if !r.preemptions.is_empty() {
        let _ = writeln!(out, "<{h}>Preemptions</{h}>");
        out.push_str(&preemptions_table(r));
    }
    let _ = writeln!(out, "<{h}>Placements (queue order)</{h}>");
    out.push_str(&placements_table(r));
    out
}

/// `rkube simulate -o html`.
pub fn simulation(r: &SimulationReport, cluster: &str, config: &str) -> String {
    let mut body = simulation_body(r, false);
    if r.placements.iter().all(|p| p.explain.is_none()) && !r.placements.is_empty() {
        body.push_str(
            "<p class=\"muted\">Run with <code>--explain</code> for the pod × node score heatmap.</p>\n",
        );
    }
    page(
        "rkube simulate",
        &format!("cluster {cluster} · configuration {config}"),
        &body,
    )
}

/// `rkube explain -o html`; `nodes` is the cluster as the pod sees it.
pub fn explanation(e: &PodExplanation, nodes: &[NodeSummary], cluster: &str) -> String {
    let mut out = String::new();
    let feasible = e.nodes.iter().filter(|n| n.feasible).count();
    let verdict = match &e.selected_node {
        Some(n) => format!("<span class=\"ok\">selected node: <b>{}</b></span>", esc(n)),
        None => "<span class=\"bad\">no node selected</span>".into(),
    };
    let _ = writeln!(
        out,
        "<p class=\"summary\">profile {} · {feasible}/{} nodes feasible · {verdict}</p>",
        esc(&e.profile),
        e.nodes.len()
    );
    if let Some(err) = &e.error {
        out.push_str("<h2>Scheduling error</h2>\n");
        out.push_str(&unschedulable(&[(e.pod.as_str(), err.as_str())]));
    } else if e.selected_node.is_none() {
        out.push_str("<h2>Unschedulable</h2>\n");
        out.push_str(&unschedulable(&[(e.pod.as_str(), e.message.as_str())]));
    }
    if !e.nodes.is_empty() {
        out.push_str("<h2>Scores: pod × node</h2>\n");
        out.push_str(&heatmap(&[e]));
    }
    if let Some(g) = &e.pod_group {
        out.push_str(&group_tables(g));
    }
    out.push_str("<h2>Node utilization (requests, before this pod)</h2>\n");
    out.push_str(&utilization(300.0, nodes, &[], "current"));
    page(
        &format!("rkube explain {}", e.pod),
        &format!("cluster {cluster}"),
        &out,
    )
}

fn stats_row(label: &str, a: &Stats, b: &Stats, f: fn(f64) -> String) -> String {
    format!(
        "<tr><th>{}</th><td class=\"num\">{} / {} / {}</td><td class=\"num\">{} / {} / {}</td></tr>\n",
        esc(label),
        f(a.min),
        f(a.max),
        f(a.stddev),
        f(b.min),
        f(b.max),
        f(b.stddev)
    )
}

fn outcome_section(label: &str, o: &ConfigOutcome) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "<section class=\"config\" data-config=\"{l}\"><h2>{l}: {c}</h2>",
        l = esc(label),
        c = esc(&o.config)
    );
    out.push_str(&simulation_body(&o.report, true));
    if !o.workloads.is_empty() {
        out.push_str("<h3>Workload spread</h3>\n<table class=\"workloads\">\n<thead><tr><th>workload</th><th>pods</th><th>nodes</th><th>max/node</th></tr></thead>\n<tbody>\n");
        for w in &o.workloads {
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
                esc(&w.workload),
                w.pods,
                w.nodes_used,
                w.max_per_node
            );
        }
        out.push_str("</tbody>\n</table>\n");
    }
    out.push_str("</section>\n");
    out
}

/// `rkube compare -o html`: the two configurations side by side.
pub fn comparison(c: &Comparison, cluster: &str) -> String {
    let mut out = String::new();
    out.push_str("<h2>Pods that land elsewhere</h2>\n");
    if c.moved.is_empty() {
        out.push_str("<p class=\"ok\">Every pod lands on the same node under A and B.</p>\n");
    } else {
        out.push_str("<table class=\"moved\">\n<thead><tr><th>pod</th><th>node A</th><th>node B</th></tr></thead>\n<tbody>\n");
        let node = |n: &Option<String>| {
            n.as_deref()
                .map_or_else(|| "<span class=\"bad\">&lt;none&gt;</span>".into(), esc)
        };
        for m in &c.moved {
            let _ = writeln!(
                out,
                "<tr class=\"moved-pod\" data-pod=\"{p}\"><td>{p}</td><td>{}</td><td>{}</td></tr>",
                node(&m.node_a),
                node(&m.node_b),
                p = esc(&m.pod)
            );
        }
        out.push_str("</tbody>\n</table>\n");
    }
    out.push_str("<h2>Summary</h2>\n<table class=\"compare-summary\">\n<thead><tr><th></th><th>A</th><th>B</th></tr></thead>\n<tbody>\n");
    for (label, a, b) in [
        ("scheduled", c.a.scheduled, c.b.scheduled),
        ("unschedulable", c.a.unschedulable, c.b.unschedulable),
        ("preemptions", c.a.preemptions, c.b.preemptions),
        ("evicted", c.a.evicted, c.b.evicted),
    ] {
        let _ = writeln!(
            out,
            "<tr><th>{label}</th><td class=\"num\">{a}</td><td class=\"num\">{b}</td></tr>"
        );
    }
    out.push_str(&stats_row(
        "pods per node (min / max / stddev)",
        &c.a.pods_per_node,
        &c.b.pods_per_node,
        |x| format!("{x:.2}"),
    ));
    out.push_str(&stats_row(
        "CPU requested (min / max / stddev)",
        &c.a.cpu_utilization,
        &c.b.cpu_utilization,
        pct,
    ));
    out.push_str(&stats_row(
        "memory requested (min / max / stddev)",
        &c.a.memory_utilization,
        &c.b.memory_utilization,
        pct,
    ));
    out.push_str("</tbody>\n</table>\n<div class=\"side\">\n");
    out.push_str(&outcome_section("A", &c.a));
    out.push_str(&outcome_section("B", &c.b));
    out.push_str("</div>\n");
    page(
        "rkube compare",
        &format!(
            "cluster {cluster} · A: {} · B: {} · seed {}",
            c.a.config, c.b.config, c.seed
        ),
        &out,
    )
}

/// A node's usage as the utilization chart reads it.
fn summary_of(u: &NodeUsage) -> NodeSummary {
    NodeSummary {
        name: u.name.clone(),
        pods: u.pods,
        requested: Default::default(),
        allocatable: Default::default(),
        requested_milli_cpu: u.cpu_requested_milli,
        requested_memory: u.memory_requested_bytes,
        allocatable_milli_cpu: u.cpu_allocatable_milli,
        allocatable_memory: u.memory_allocatable_bytes,
    }
}

/// The pod-group cycle of `rkube explain -o html`: the members' turns, then
/// per node what was placed and rejected, then the verdict.
fn group_tables(g: &rkube_sim::GroupExplanation) -> String {
    let members: Vec<Vec<String>> = g
        .members
        .iter()
        .map(|m| {
            vec![
                m.pod.clone(),
                if m.tried { "yes" } else { "no" }.into(),
                m.fits_on.clone().unwrap_or_default(),
                match &m.node {
                    Some(n) => format!("bound to {n}"),
                    None => m.message.clone(),
                },
            ]
        })
        .collect();
    let nodes: Vec<Vec<String>> = g
        .nodes
        .iter()
        .filter(|n| !n.placed.is_empty() || !n.rejected.is_empty())
        .map(|n| {
            let rejected: Vec<String> = n
                .rejected
                .iter()
                .map(|r| format!("{} ({}: {})", r.pod, r.plugin, r.reasons.join(", ")))
                .collect();
            vec![n.name.clone(), n.placed.join(", "), rejected.join("; ")]
        })
        .collect();
    let mut out = pod_table(
        "group",
        &format!("Pod group {}", g.group),
        &["member", "tried", "picked", "result"],
        &members,
    );
    out.push_str(&pod_table(
        "group-nodes",
        "Pod group per node",
        &["node", "placed", "rejected (members that fit nowhere)"],
        &nodes,
    ));
    let verdict = rkube_sim::text::group_verdict(g);
    let _ = writeln!(out, "<p class=\"summary\">{}</p>", esc(&verdict));
    out
}

/// A table with a class, a header and escaped rows (`data-pod` from the
/// first cell); nothing when there are no rows.
fn pod_table(class: &str, title: &str, header: &[&str], rows: &[Vec<String>]) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "<h2>{}</h2>\n<table class=\"{class}\">\n<thead><tr>",
        esc(title)
    );
    for h in header {
        let _ = write!(out, "<th>{}</th>", esc(h));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for r in rows {
        let _ = write!(
            out,
            "<tr data-pod=\"{}\">",
            esc(r.first().map_or("", String::as_str))
        );
        for c in r {
            let _ = write!(out, "<td class=\"msg\">{}</td>", esc(c));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody>\n</table>\n");
    out
}

/// The per-pod tables of `rkube drain -o html`.
fn drain_tables(r: &DrainReport) -> String {
    let pending = |n: &Option<String>| n.clone().unwrap_or_else(|| "<pending>".into());
    let evicted: Vec<Vec<String>> = r
        .evicted
        .iter()
        .map(|e| {
            let (pod, from, to) = (e.pod.clone(), e.from_node.clone(), e.replacement.clone());
            vec![pod, from, to, pending(&e.node), e.message.clone()]
        })
        .collect();
    let blocked: Vec<Vec<String>> = r
        .blocked
        .iter()
        .map(|b| {
            let message = format!("{} {}", b.message, b.cause);
            vec![b.pod.clone(), b.node.clone(), b.pdb.clone(), message]
        })
        .collect();
    let triple = |a: &String, b: &String, c: &String| vec![a.clone(), b.clone(), c.clone()];
    let refused: Vec<Vec<String>> = r
        .refused
        .iter()
        .map(|x| triple(&x.pod, &x.node, &x.message))
        .collect();
    let deleted: Vec<Vec<String>> = r
        .deleted_not_recreated
        .iter()
        .map(|x| triple(&x.pod, &x.from_node, &x.reason))
        .collect();
    let skipped: Vec<Vec<String>> = r
        .skipped
        .iter()
        .map(|x| triple(&x.pod, &x.node, &x.reason))
        .collect();
    [
        pod_table(
            "evicted",
            "Evicted pods and their replacements",
            &["pod", "from", "replacement", "node", "message"],
            &evicted,
        ),
        pod_table(
            "blocked",
            "Blocked by a PodDisruptionBudget",
            &["pod", "node", "PDB", "message"],
            &blocked,
        ),
        pod_table("refused", "Refused", &["pod", "node", "message"], &refused),
        pod_table(
            "deleted",
            "Deleted, not recreated",
            &["pod", "from", "why"],
            &deleted,
        ),
        pod_table(
            "skipped",
            "Left in place",
            &["pod", "node", "why"],
            &skipped,
        ),
    ]
    .concat()
}

/// `rkube drain -o html`.
pub fn drain(r: &DrainReport, cluster: &str) -> String {
    let s = &r.summary;
    let mut out = format!(
        "<p class=\"summary\"><b>{}</b> evicted ({} rescheduled, <b class=\"{}\">{}</b> pending), <b class=\"{}\">{}</b> blocked, {} refused, {} deleted and not recreated, {} left in place</p>\n",
        s.evicted,
        s.rescheduled,
        if s.pending > 0 { "bad" } else { "ok" },
        s.pending,
        if s.blocked > 0 { "bad" } else { "ok" },
        s.blocked,
        s.refused,
        s.deleted_not_recreated,
        s.skipped
    );
    let nodes: Vec<Vec<String>> = r
        .drained_nodes
        .iter()
        .map(|n| vec![n.name.clone(), n.message.clone()])
        .collect();
    out.push_str(&pod_table(
        "drained-nodes",
        "Nodes",
        &["node", "result"],
        &nodes,
    ));
    out.push_str(&drain_tables(r));
    out.push_str("<h2>Node utilization (requests)</h2>\n");
    let before: Vec<NodeSummary> = r.nodes_before.iter().map(summary_of).collect();
    let after: Vec<NodeSummary> = r.nodes_after.iter().map(summary_of).collect();
    out.push_str(&utilization(300.0, &after, &before, "after"));
    let nodes: Vec<&str> = r.drained_nodes.iter().map(|n| n.name.as_str()).collect();
    page(
        &format!("rkube drain {}", nodes.join(" ")),
        &format!("cluster {cluster} · mode {}", r.mode),
        &out,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use rkube_sim::{NodeExplanation, Placement, ScoreResult, Summary};

    fn node(name: &str, req: i64) -> NodeSummary {
        NodeSummary {
            name: name.into(),
            pods: 1,
            requested: Default::default(),
            allocatable: Default::default(),
            requested_milli_cpu: req,
            requested_memory: 1 << 30,
            allocatable_milli_cpu: 4000,
            allocatable_memory: 4 << 30,
        }
    }

    fn report() -> SimulationReport {
        let explain = PodExplanation {
            pod: "ns/<img src=x onerror=alert(1)>".into(),
            profile: "default-scheduler".into(),
            nodes: vec![NodeExplanation {
                name: "n\"1".into(),
                feasible: true,
                filters: vec![],
                scores: vec![ScoreResult {
                    plugin: "Evil<b>".into(),
                    raw: 1,
                    normalized: 2,
                    weight: 3,
                    weighted: 6,
                }],
                total: 6,
                devices: vec![],
            }],
            selected_node: Some("n\"1".into()),
            top_nodes: vec![],
            message: String::new(),
            error: None,
            live: None,
            pod_group: None,
        };
        SimulationReport {
            placements: vec![
                Placement {
                    pod: "ns/<img src=x onerror=alert(1)>".into(),
                    node: Some("n\"1".into()),
                    message: String::new(),
                    nominated_node: None,
                    evicted: false,
                    preempted_by: None,
                    explain: Some(explain),
                    devices: ["gpu-0", "gpu-<1>"]
                        .into_iter()
                        .map(|d| rkube_sim::AllocatedDevice {
                            claim: "ns/c".into(),
                            request: "gpus".into(),
                            driver: "gpu.example.com".into(),
                            pool: "n\"1".into(),
                            device: d.into(),
                        })
                        .collect(),
                },
                Placement {
                    pod: "ns/p2".into(),
                    node: None,
                    message: "0/1 nodes are available: <script>alert('x')</script> & more".into(),
                    nominated_node: None,
                    evicted: false,
                    preempted_by: None,
                    explain: None,
                    devices: vec![],
                },
            ],
            preemptions: vec![],
            nodes: vec![node("n\"1", 5000)],
            nodes_before: vec![node("n\"1", 1000)],
            summary: Summary {
                scheduled: 1,
                unschedulable: 1,
                evicted: 0,
                preemptions: 0,
            },
            batched_pods: 0,
        }
    }

    #[test]
    fn escapes_every_input_string() {
        let html = simulation(&report(), "c<.yaml", "<defaults>");
        assert!(!html.contains("<img"), "{html}");
        assert!(!html.contains("<script>alert"), "{html}");
        assert!(!html.contains("Evil<b>"));
        assert!(!html.contains("n\"1"));
        assert!(html.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; more"));
        assert!(html.contains("data-node=\"n&quot;1\""));
        assert!(html.contains("c&lt;.yaml"));
        // Exactly the page's own script and no external resource.
        assert_eq!(html.matches("<script").count(), 1);
        assert!(!html.contains("src=\"http") && !html.contains("href=\"http"));
    }

    #[test]
    fn explain_page_shows_a_scheduling_error_escaped() {
        let mut e = report().placements[0].explain.clone().unwrap();
        e.selected_node = None;
        e.error = Some("running \"DynamicResources\" filter plugin: pool <p>".into());
        let html = explanation(&e, &[], "c.yaml");
        assert!(html.contains("<h2>Scheduling error</h2>"), "{html}");
        assert!(!html.contains("<h2>Unschedulable</h2>"), "{html}");
        assert!(html.contains("filter plugin: pool &lt;p&gt;"), "{html}");
    }

    #[test]
    fn bars_and_heatmap_carry_the_numbers() {
        let html = simulation(&report(), "c.yaml", "<defaults>");
        assert_eq!(html.matches("<rect class=\"bar\"").count(), 4);
        assert!(html.contains("data-resource=\"cpu\" data-phase=\"before\" data-requested=\"1000\" data-allocatable=\"4000\""));
        // Over-committed: the bar is clamped, coloured as an error, labelled 125%.
        assert!(html.contains("data-phase=\"after\" data-requested=\"5000\""));
        assert!(html.contains("125.0%"));
        assert_eq!(
            html.matches("<td class=\"cell feasible selected\"").count(),
            1
        );
        assert!(html.contains("raw 1 → normalized 2 × weight 3 = 6"));
        assert_eq!(html.matches("<tr class=\"unschedulable-pod\"").count(), 1);
        // Device use per node: one node, both devices, the count spans them.
        assert_eq!(
            html.matches("<tr class=\"device\" data-node=\"n&quot;1\"")
                .count(),
            2
        );
        assert!(html.contains("<td rowspan=\"2\" class=\"num\">2</td>"));
        assert!(html.contains("gpu.example.com/n&quot;1/gpu-&lt;1&gt;"));
    }

    #[test]
    fn drain_page_escapes_and_keeps_deleted_nodes() {
        use rkube_sim::drain::{DrainReport, DrainSummary, DrainedNode, EvictedPod};
        let usage = |name: &str| NodeUsage {
            name: name.into(),
            pods: 1,
            cpu_requested_milli: 1000,
            cpu_allocatable_milli: 4000,
            cpu_utilization: 0.25,
            memory_requested_bytes: 0,
            memory_allocatable_bytes: 1 << 30,
            memory_utilization: 0.0,
        };
        let r = DrainReport {
            mode: "delete".into(),
            drained_nodes: vec![DrainedNode {
                name: "gone<".into(),
                drained: true,
                cordoned_only: false,
                deleted: true,
                message: "cordoned, drained and deleted".into(),
            }],
            evicted: vec![EvictedPod {
                pod: "ns/<img src=x>".into(),
                from_node: "gone<".into(),
                replacement: "ns/r".into(),
                node: None,
                message: "0/1 nodes & <b>".into(),
                attempt: 1,
            }],
            skipped: vec![],
            refused: vec![],
            blocked: vec![],
            deleted_not_recreated: vec![],
            nodes_before: vec![usage("gone<"), usage("kept")],
            nodes_after: vec![usage("kept")],
            summary: DrainSummary::default(),
            complete: true,
        };
        let html = drain(&r, "c.yaml");
        assert!(!html.contains("<img") && !html.contains("& <b>") && !html.contains("gone<"));
        assert!(html.contains("0/1 nodes &amp; &lt;b&gt;"));
        assert!(html.contains("data-pod=\"ns/&lt;img src=x&gt;\""));
        assert!(html.contains("&lt;pending&gt;"));
        // The deleted node keeps its "before" bar; the kept node has both.
        assert_eq!(
            html.matches("data-node=\"gone&lt;\" data-resource").count(),
            2
        );
        assert_eq!(html.matches("data-node=\"kept\" data-resource").count(), 4);
        assert_eq!(html.matches("<script").count(), 1);
    }

    #[test]
    fn formats_quantities() {
        assert_eq!(fmt_cpu(2000), "2");
        assert_eq!(fmt_cpu(1500), "1500m");
        assert_eq!(fmt_mem(4 << 30), "4Gi");
        assert_eq!(fmt_mem(1536 << 20), "1.5Gi");
        assert_eq!(fmt_mem(100), "100");
    }
}
