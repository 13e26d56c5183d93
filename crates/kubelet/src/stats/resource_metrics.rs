//! `/metrics/resource`: the node's, pods' and containers' CPU, memory and
//! swap from the Summary's CPU-and-memory view, as upstream's
//! `pkg/kubelet/metrics/collectors/resource_metrics.go` writes them (the
//! endpoint metrics-server scrapes): names, `[STABLE]`/`[ALPHA]` help,
//! types, labels and the figures' own timestamps. A figure the summary
//! lacks is not written; `resource_scrape_error` is 1 when the summary
//! could not be made.

use super::prom::{Families, Kind};
use super::summary::{ContainerStats, PodStats, Summary};

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

fn container(f: &mut Families, pod: &PodStats, c: &ContainerStats) {
    let labels = [
        ("container", c.name.as_str()),
        ("pod", pod.pod_ref.name.as_str()),
        ("namespace", pod.pod_ref.namespace.as_str()),
    ];
    if c.start_time.0 > 0 {
        f.add(
            "container_start_time_seconds",
            &labels,
            c.start_time.seconds(),
            None,
        );
    }
    if let Some((cpu, u)) = c
        .cpu
        .as_ref()
        .and_then(|x| Some((x, x.usage_core_nano_seconds?)))
    {
        f.add(
            "container_cpu_usage_seconds_total",
            &labels,
            u as f64 / 1e9,
            Some(cpu.time.millis()),
        );
    }
    if let Some((m, ws)) = c
        .memory
        .as_ref()
        .and_then(|x| Some((x, x.working_set_bytes?)))
    {
        f.add(
            "container_memory_working_set_bytes",
            &labels,
            ws as f64,
            Some(m.time.millis()),
        );
    }
    if let Some(s) = &c.swap {
        let usage = s.swap_usage_bytes.unwrap_or(0);
        if s.swap_usage_bytes.is_some() {
            f.add(
                "container_swap_usage_bytes",
                &labels,
                usage as f64,
                Some(s.time.millis()),
            );
        }
        if let Some(a) = s.swap_available_bytes {
            f.add(
                "container_swap_limit_bytes",
                &labels,
                (a + usage) as f64,
                Some(s.time.millis()),
            );
        }
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
    if let Some((c, u)) = n
        .cpu
        .as_ref()
        .and_then(|c| Some((c, c.usage_core_nano_seconds?)))
    {
        f.add(
            "node_cpu_usage_seconds_total",
            &[],
            u as f64 / 1e9,
            Some(c.time.millis()),
        );
    }
    if let Some((m, ws)) = n
        .memory
        .as_ref()
        .and_then(|m| Some((m, m.working_set_bytes?)))
    {
        f.add(
            "node_memory_working_set_bytes",
            &[],
            ws as f64,
            Some(m.time.millis()),
        );
    }
    if let Some((sw, u)) = n.swap.as_ref().and_then(|s| Some((s, s.swap_usage_bytes?))) {
        f.add(
            "node_swap_usage_bytes",
            &[],
            u as f64,
            Some(sw.time.millis()),
        );
    }
    for pod in &s.pods {
        for c in &pod.containers {
            container(&mut f, pod, c);
        }
        let labels = [
            ("pod", pod.pod_ref.name.as_str()),
            ("namespace", pod.pod_ref.namespace.as_str()),
        ];
        if let Some((c, u)) = pod
            .cpu
            .as_ref()
            .and_then(|c| Some((c, c.usage_core_nano_seconds?)))
        {
            f.add(
                "pod_cpu_usage_seconds_total",
                &labels,
                u as f64 / 1e9,
                Some(c.time.millis()),
            );
        }
        if let Some((m, ws)) = pod
            .memory
            .as_ref()
            .and_then(|m| Some((m, m.working_set_bytes?)))
        {
            f.add(
                "pod_memory_working_set_bytes",
                &labels,
                ws as f64,
                Some(m.time.millis()),
            );
        }
        if let Some((sw, u)) = pod
            .swap
            .as_ref()
            .and_then(|s| Some((s, s.swap_usage_bytes?)))
        {
            f.add(
                "pod_swap_usage_bytes",
                &labels,
                u as f64,
                Some(sw.time.millis()),
            );
        }
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
