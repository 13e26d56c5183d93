//! The kubelet's Prometheus endpoints read by Prometheus' own text parser:
//! `hack/promcheck` (Go, built from `github.com/prometheus/common/expfmt`)
//! checks `/metrics`, `/metrics/resource`, `/metrics/cadvisor` and
//! `/metrics/probes` of both nodes, fetched through the API server's node
//! proxy: each parses, no series is there twice, no counter is negative,
//! every histogram bucket has `le`; `/metrics/resource` has the families
//! upstream's kubelet serves there (metrics-server reads four of them).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{hack, text, Cluster};

const PATHS: [&str; 4] = [
    "metrics",
    "metrics/resource",
    "metrics/cadvisor",
    "metrics/probes",
];

const RESOURCE_FAMILIES: [&str; 7] = [
    "node_cpu_usage_seconds_total",
    "node_memory_working_set_bytes",
    "container_cpu_usage_seconds_total",
    "container_memory_working_set_bytes",
    "pod_cpu_usage_seconds_total",
    "pod_memory_working_set_bytes",
    "resource_scrape_error",
];

/// Builds the checker (Go's build cache keeps it warm) into `dir`.
fn promcheck(dir: &Path) -> PathBuf {
    let out = dir.join("promcheck");
    let o = Command::new("go")
        .args(["build", "-trimpath", "-o"])
        .arg(&out)
        .arg(".")
        .current_dir(hack("promcheck"))
        .output()
        .expect("run go build");
    assert!(o.status.success(), "building hack/promcheck: {}", text(&o));
    out
}

pub fn check(c: &Cluster, dir: &Path) {
    let bin = promcheck(dir);
    let mut files = Vec::new();
    for node in ["node-1", "node-2"] {
        for path in PATHS {
            let url = format!("/api/v1/nodes/{node}/proxy/{path}");
            let o = c.kubectl(&["get", "--raw", &url]);
            assert!(o.status.success(), "kubectl get --raw {url}: {}", text(&o));
            if path == "metrics/resource" {
                let body = String::from_utf8_lossy(&o.stdout);
                for family in RESOURCE_FAMILIES {
                    let want = format!("# TYPE {family} ");
                    assert!(
                        body.lines().any(|l| l.starts_with(&want)),
                        "{url}: no `{want}` line:\n{body}"
                    );
                }
            }
            // the bytes as served: the parser checks their UTF-8 too
            let file = dir.join(format!("exposition-{node}-{}.txt", path.replace('/', "_")));
            std::fs::write(&file, &o.stdout)
                .unwrap_or_else(|e| panic!("write {}: {e}", file.display()));
            files.push(file);
        }
    }
    let o = Command::new(&bin)
        .args(&files)
        .output()
        .expect("run promcheck");
    assert!(o.status.success(), "promcheck: {}", text(&o));
    eprint!("{}", text(&o));
}
