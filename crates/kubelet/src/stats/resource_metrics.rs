//! `/metrics/resource`: the node's, pods' and containers' CPU, memory and
//! swap from the Summary's CPU-and-memory view, as upstream's
//! `pkg/kubelet/metrics/collectors/resource_metrics.go` writes them (the
//! endpoint metrics-server scrapes): names, `[STABLE]`/`[ALPHA]` help,
//! types, labels and the figures' own timestamps. A figure the summary
//! lacks is not written; `resource_scrape_error` is 1 when the summary
//! could not be made.

use super::prom::{Families, Kind};
use super::summary::{ContainerStats, CpuStats, MemoryStats, PodStats, Summary, SwapStats};

const FAMILIES: [(&str, Kind, &str); 12] = [
    (
        "node_cpu_usage_seconds_total",
        Kind::Counter,
        "[STABLE] Cumulative cpu time consumed by the node in core-seconds",
    ),
    (
        "node_memory_working_set_bytes",
        Kind::Gauge,
        "[STABLE] Current working set of the node in bytes",
    ),
    (
        "node_swap_usage_bytes",
        Kind::Gauge,
        "[ALPHA] Current swap usage of the node in bytes. Reported only on non-windows systems",
    ),
    (
        "container_start_time_seconds",
        Kind::Gauge,
        "[STABLE] Start time of the container since unix epoch in seconds",
    ),
    (
        "container_cpu_usage_seconds_total",
        Kind::Counter,
        "[STABLE] Cumulative cpu time consumed by the container in core-seconds",
    ),
    (
        "container_memory_working_set_bytes",
        Kind::Gauge,
        "[STABLE] Current working set of the container in bytes",
    ),
    (
        "container_swap_usage_bytes",
        Kind::Gauge,
        "[ALPHA] Current amount of the container swap usage in bytes. Reported only on non-windows systems",
    ),
    (
        "container_swap_limit_bytes",
        Kind::Gauge,
        "[ALPHA] Current amount of the container swap limit in bytes. Reported only on non-windows systems",
    ),
    (
        "pod_cpu_usage_seconds_total",
        Kind::Counter,
        "[STABLE] Cumulative cpu time consumed by the pod in core-seconds",
    ),
    (
        "pod_memory_working_set_bytes",
        Kind::Gauge,
        "[STABLE] Current working set of the pod in bytes",
    ),
    (
        "pod_swap_usage_bytes",
        Kind::Gauge,
        "[ALPHA] Current amount of the pod swap usage in bytes. Reported only on non-windows systems",
    ),
    (
        "resource_scrape_error",
        Kind::Gauge,
        "[STABLE] 1 if there was an error while getting container metrics, 0 otherwise",
    ),
];

/// The CPU, working set and swap usage of one thing (node, pod or
/// container) as families `{prefix}_cpu_usage_seconds_total`,
/// `{prefix}_memory_working_set_bytes`, `{prefix}_swap_usage_bytes`, each at
/// its figure's own time.
fn usage(
    f: &mut Families,
    prefix: &str,
    labels: &[(&str, &str)],
    cpu: Option<&CpuStats>,
    memory: Option<&MemoryStats>,
    swap: Option<&SwapStats>,
) {
    if let Some((c, u)) = cpu.and_then(|c| Some((c, c.usage_core_nano_seconds?))) {
        let name = format!("{prefix}_cpu_usage_seconds_total");
        f.add(&name, labels, u as f64 / 1e9, Some(c.time.millis()));
    }
    if let Some((m, ws)) = memory.and_then(|m| Some((m, m.working_set_bytes?))) {
        let name = format!("{prefix}_memory_working_set_bytes");
        f.add(&name, labels, ws as f64, Some(m.time.millis()));
    }
    if let Some((s, u)) = swap.and_then(|s| Some((s, s.swap_usage_bytes?))) {
        let name = format!("{prefix}_swap_usage_bytes");
        f.add(&name, labels, u as f64, Some(s.time.millis()));
    }
}

fn container(f: &mut Families, pod: &PodStats, c: &ContainerStats) {
    let labels = [
        ("container", c.name.as_str()),
        ("pod", pod.pod_ref.name.as_str()),
        ("namespace", pod.pod_ref.namespace.as_str()),
    ];
    if c.start_time.0 > 0 {
        let t = c.start_time.seconds();
        f.add("container_start_time_seconds", &labels, t, None);
    }
    usage(
        f,
        "container",
        &labels,
        c.cpu.as_ref(),
        c.memory.as_ref(),
        c.swap.as_ref(),
    );
    // the limit: what is left plus what is used
    if let Some((s, a)) = c
        .swap
        .as_ref()
        .and_then(|s| Some((s, s.swap_available_bytes?)))
    {
        let limit = a.saturating_add(s.swap_usage_bytes.unwrap_or(0)) as f64;
        let t = Some(s.time.millis());
        f.add("container_swap_limit_bytes", &labels, limit, t);
    }
}

/// The `/metrics/resource` text for `summary` (`None`: it could not be
/// made, only `resource_scrape_error 1` is written).
pub fn render(summary: Option<&Summary>) -> String {
    let mut f = Families::default();
    for (name, kind, help) in FAMILIES {
        f.family(name, kind, help);
    }
    let Some(s) = summary else {
        f.add("resource_scrape_error", &[], 1.0, None);
        return f.render();
    };
    let n = &s.node;
    let swap = n.swap.as_ref();
    usage(&mut f, "node", &[], n.cpu.as_ref(), n.memory.as_ref(), swap);
    for pod in &s.pods {
        for c in &pod.containers {
            container(&mut f, pod, c);
        }
        let labels = [
            ("pod", pod.pod_ref.name.as_str()),
            ("namespace", pod.pod_ref.namespace.as_str()),
        ];
        let (cpu, mem) = (pod.cpu.as_ref(), pod.memory.as_ref());
        usage(&mut f, "pod", &labels, cpu, mem, pod.swap.as_ref());
    }
    f.add("resource_scrape_error", &[], 0.0, None);
    f.render()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::snapshot::tests::fixture;

    #[test]
    fn the_fixture_nodes_resource_metrics() {
        let text = render(Some(&fixture().summary().cpu_and_memory()));
        let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            lines,
            [
                "container_cpu_usage_seconds_total{container=\"app\",namespace=\"default\",pod=\"web\"} 6e-07 7000",
                "container_cpu_usage_seconds_total{container=\"side\",namespace=\"default\",pod=\"web\"} 4e-08 7000",
                "container_memory_working_set_bytes{container=\"app\",namespace=\"default\",pod=\"web\"} 1000 7000",
                "container_memory_working_set_bytes{container=\"side\",namespace=\"default\",pod=\"web\"} 90 7000",
                "container_start_time_seconds{container=\"app\",namespace=\"default\",pod=\"web\"} 5",
                "container_start_time_seconds{container=\"side\",namespace=\"default\",pod=\"web\"} 5",
                "node_cpu_usage_seconds_total 9e-06 8000",
                "node_memory_working_set_bytes 6000 8000",
                "node_swap_usage_bytes 0 8000",
                "pod_cpu_usage_seconds_total{namespace=\"default\",pod=\"web\"} 6.5e-07 8000",
                "pod_memory_working_set_bytes{namespace=\"default\",pod=\"web\"} 1100 8000",
                "resource_scrape_error 0",
            ]
        );
        assert!(text.contains(
            "# HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the node in core-seconds\n\
             # TYPE node_cpu_usage_seconds_total counter\n"
        ));
        assert_eq!(
            render(None),
            "# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise\n\
             # TYPE resource_scrape_error gauge\nresource_scrape_error 1\n"
        );
    }
}
