//! The table `hack/bench kubelet` prints, from the JSON lines its runs
//! wrote (one measurement a line, tagged with `kubelet` and `run`):
//!
//! * `{"kind":"startup","kubelet":K,"run":R,"pods":N,"latenciesMs":[…],"totalMs":T}`
//!   (K is `rkube`, `upstream` or `floor`, the same pods through CRI alone);
//! * `{"kind":"delete",…}` the same for deleting them (the floor's: its
//!   pods taken down through CRI);
//! * `{"kind":"footprint","state":"idle"|"churn","pods":N,"cpuCores":C,"rssBytes":B,"rssAnonBytes":A,"rssFileBytes":F,"threads":T,"fds":F,"requestsPerSecond":Q}`
//!   (the RSS split into anonymous memory and the pages of files, its
//!   binary's, from `/proc/PID/status`);
//! * `{"kind":"requests","pods":N,"requests":Q}`: the kubelet's API
//!   requests from the first create until its pods ran;
//! * `{"kind":"churn","pods":P,"seconds":S,"startupMs":[…],"deleteMs":[…]}`;
//! * `{"kind":"stages","pods":N,"fromSeenMs":{STAGE:[…]}}` (rkube's only:
//!   [`super::stages`]);
//! * `{"kind":"settle","pods":N,"seconds":S,"left":L}`: after the N pods
//!   were gone from the API, the time until the runtime held none of
//!   their sandboxes (L left when the wait timed out);
//! * `{"kind":"cpu","pods":N,"cpuSeconds":{PART:S},"machine":{"busySeconds":B,"cores":C}}`:
//!   the CPU time each part of the node (`kube-apiserver`, `etcd`,
//!   `kube-controller-manager`, `kubelet`, `containerd`, `shims`) and the
//!   whole machine spent while the N pods started, and how many cores were
//!   busy on average (the floor's: while its pods started);
//! * `{"kind":"cri","pods":N,"calls":{OPERATION:COUNT}}`: the CRI calls
//!   made while the N pods started, by upstream's operation names (a
//!   kubelet's `kubelet_runtime_operations_total`; the floor's own count).
//!
//! Each figure is computed per run (a percentile of that run's pods) and
//! the table shows its median over the runs.

use std::collections::BTreeSet;

use anyhow::{bail, Context, Result};
use serde_json::Value;

use super::stages::STAGES;
use super::stats::{median, percentile, ratio};

/// The node's parts whose CPU time a start is shown with: (row, part).
const CPU_PARTS: [(&str, &str); 6] = [
    (
        "CPU-seconds while starting: kube-apiserver",
        "kube-apiserver",
    ),
    ("CPU-seconds while starting: etcd", "etcd"),
    (
        "CPU-seconds while starting: kube-controller-manager",
        "kube-controller-manager",
    ),
    ("CPU-seconds while starting: kubelet", "kubelet"),
    ("CPU-seconds while starting: containerd", "containerd"),
    ("CPU-seconds while starting: containerd's shims", "shims"),
];

/// One measurement line.
#[derive(Debug, Clone)]
struct Line {
    kind: String,
    kubelet: String,
    state: String,
    pods: u64,
    v: Value,
}

fn parse(text: &str) -> Result<Vec<Line>> {
    let mut out = vec![];
    for (i, l) in text.lines().enumerate() {
        if l.trim().is_empty() {
            continue;
        }
        let v: Value =
            serde_json::from_str(l).with_context(|| format!("line {}: not JSON", i + 1))?;
        let field = |k: &str| v.get(k).and_then(Value::as_str).map(String::from);
        let (Some(kind), Some(kubelet)) = (field("kind"), field("kubelet")) else {
            bail!("line {}: needs \"kind\" and \"kubelet\"", i + 1);
        };
        let pods = v.get("pods").and_then(Value::as_u64).unwrap_or(0);
        let state = field("state").unwrap_or_else(|| "idle".into());
        out.push(Line {
            kind,
            kubelet,
            state,
            pods,
            v,
        });
    }
    Ok(out)
}

fn numbers(v: &Value, key: &str) -> Vec<f64> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default()
}

/// The median over runs of `f` of each matching line.
fn med(
    lines: &[Line],
    kind: &str,
    kubelet: &str,
    pods: Option<u64>,
    state: &str,
    f: impl Fn(&Value) -> Option<f64>,
) -> Option<f64> {
    let per_run: Vec<f64> = lines
        .iter()
        .filter(|l| l.kind == kind && l.kubelet == kubelet && l.state == state)
        .filter(|l| pods.is_none_or(|p| l.pods == p))
        .filter_map(|l| f(&l.v))
        .collect();
    median(&per_run)
}

fn pct(key: &'static str, p: f64) -> impl Fn(&Value) -> Option<f64> {
    move |v| percentile(&numbers(v, key), p)
}

fn num(key: &'static str) -> impl Fn(&Value) -> Option<f64> {
    move |v| v.get(key).and_then(Value::as_f64)
}

fn fmt(x: Option<f64>, scale: f64, digits: usize) -> String {
    x.map_or("—".into(), |x| format!("{:.*}", digits, x / scale))
}

fn fmt_ratio(x: Option<f64>) -> String {
    x.map_or("—".into(), |x| format!("{x:.2}×"))
}

/// The number of runs each kubelet has startup lines for.
fn runs(lines: &[Line], kubelet: &str) -> usize {
    lines
        .iter()
        .filter(|l| l.kind == "startup" && l.kubelet == kubelet)
        .filter_map(|l| l.v.get("run").and_then(Value::as_u64))
        .collect::<BTreeSet<_>>()
        .len()
}

/// The Markdown tables and, last, one `SUMMARY kubelet N=…` line per pod
/// count.
pub fn render(text: &str) -> Result<String> {
    let lines = &parse(text)?;
    let counts: BTreeSet<u64> = lines
        .iter()
        .filter(|l| l.kind == "startup" && l.kubelet != "floor")
        .map(|l| l.pods)
        .collect();
    if counts.is_empty() {
        bail!("no startup measurements");
    }
    let mut out = String::new();
    let mut summary = String::new();
    out.push_str(&format!(
        "Medians of {} runs of rkube's kubelet and {} of upstream's, alternating; floor: the same pods started through CRI alone.\n",
        runs(lines, "rkube"),
        runs(lines, "upstream"),
    ));
    for &n in &counts {
        let row3 = |label: &str,
                    f: &dyn Fn(&str) -> Option<f64>,
                    scale: f64,
                    digits: usize,
                    floor: bool| {
            let (r, u) = (f("rkube"), f("upstream"));
            let fl = if floor { f("floor") } else { None };
            format!(
                "| {label} | {} | {} | {} | {} | {} |\n",
                fmt(r, scale, digits),
                fmt(u, scale, digits),
                if floor {
                    fmt(fl, scale, digits)
                } else {
                    String::new()
                },
                fmt_ratio(ratio(r, u)),
                if floor {
                    fmt_ratio(ratio(r, fl))
                } else {
                    String::new()
                },
            )
        };
        out.push_str(&format!(
            "\n**{n} pods**\n\n| | rkube | upstream | floor | rkube/upstream | rkube/floor |\n|---|---|---|---|---|---|\n"
        ));
        let startup = |p: f64| {
            move |k: &str| med(lines, "startup", k, Some(n), "idle", pct("latenciesMs", p))
        };
        for (label, p) in [
            ("startup p50, s", 50.0),
            ("startup p90, s", 90.0),
            ("startup p99, s", 99.0),
        ] {
            out.push_str(&row3(label, &startup(p), 1000.0, 2, true));
        }
        let total = |k: &str| med(lines, "startup", k, Some(n), "idle", num("totalMs"));
        out.push_str(&row3("all started, s", &total, 1000.0, 2, true));
        let delete =
            |p: f64| move |k: &str| med(lines, "delete", k, Some(n), "idle", pct("latenciesMs", p));
        for (label, p) in [
            ("delete to gone p50, s", 50.0),
            ("delete to gone p99, s", 99.0),
        ] {
            out.push_str(&row3(label, &delete(p), 1000.0, 2, true));
        }
        let settle = |k: &str| med(lines, "settle", k, Some(n), "idle", num("seconds"));
        out.push_str(&row3(
            "sandboxes removed after gone, s",
            &settle,
            1.0,
            2,
            false,
        ));
        let foot = |key: &'static str| {
            move |k: &str| med(lines, "footprint", k, Some(n), "idle", num(key))
        };
        out.push_str(&row3(
            "kubelet RSS, MiB",
            &foot("rssBytes"),
            1048576.0,
            1,
            false,
        ));
        for (label, key) in [
            ("kubelet RSS anonymous, MiB", "rssAnonBytes"),
            ("kubelet RSS file-backed, MiB", "rssFileBytes"),
        ] {
            out.push_str(&row3(label, &foot(key), 1048576.0, 1, false));
        }
        out.push_str(&row3(
            "kubelet CPU idle, cores",
            &foot("cpuCores"),
            1.0,
            3,
            false,
        ));
        out.push_str(&row3("kubelet threads", &foot("threads"), 1.0, 0, false));
        out.push_str(&row3("kubelet open fds", &foot("fds"), 1.0, 0, false));
        out.push_str(&row3(
            "API requests/s idle",
            &foot("requestsPerSecond"),
            1.0,
            2,
            false,
        ));
        for (label, part) in CPU_PARTS {
            let cpu = |k: &str| {
                med(lines, "cpu", k, Some(n), "idle", |v| {
                    v.get("cpuSeconds")?.get(part)?.as_f64()
                })
            };
            out.push_str(&row3(label, &cpu, 1.0, 1, true));
        }
        let node_cpu = |k: &str| {
            med(lines, "cpu", k, Some(n), "idle", |v| {
                let parts = v.get("cpuSeconds")?.as_object()?;
                Some(parts.values().filter_map(Value::as_f64).sum())
            })
        };
        out.push_str(&row3(
            "CPU-seconds while starting: the node's processes",
            &node_cpu,
            1.0,
            1,
            true,
        ));
        let machine = |key: &'static str| {
            move |k: &str| {
                med(lines, "cpu", k, Some(n), "idle", |v| {
                    v.get("machine")?.get(key)?.as_f64()
                })
            }
        };
        out.push_str(&row3(
            "CPU-seconds while starting: the whole machine",
            &machine("busySeconds"),
            1.0,
            1,
            true,
        ));
        out.push_str(&row3(
            "busy cores while starting (mean)",
            &machine("cores"),
            1.0,
            2,
            true,
        ));
        let calls = |k: &str| {
            med(lines, "cri", k, Some(n), "idle", |v| {
                let calls = v.get("calls")?.as_object()?;
                Some(calls.values().filter_map(Value::as_f64).sum::<f64>() / n as f64)
            })
        };
        out.push_str(&row3("CRI calls per pod started", &calls, 1.0, 1, true));
        let per_pod = |k: &str| {
            med(lines, "requests", k, Some(n), "idle", |v| {
                v.get("requests")
                    .and_then(Value::as_f64)
                    .map(|q| q / n as f64)
            })
        };
        out.push_str(&row3(
            "API requests per pod started",
            &per_pod,
            1.0,
            2,
            false,
        ));
        let p99 = startup(99.0);
        summary.push_str(&format!(
            "SUMMARY kubelet N={n}: startup p99 rkube/upstream {}, rkube/floor {}, RSS rkube/upstream {}, CPU rkube/upstream {}, API requests/pod rkube/upstream {}\n",
            x(ratio(p99("rkube"), p99("upstream"))),
            x(ratio(p99("rkube"), p99("floor"))),
            x(ratio(foot("rssBytes")("rkube"), foot("rssBytes")("upstream"))),
            x(ratio(foot("cpuCores")("rkube"), foot("cpuCores")("upstream"))),
            x(ratio(per_pod("rkube"), per_pod("upstream"))),
        ));
    }
    // No pods, and churn.
    let idle0 =
        |key: &'static str| move |k: &str| med(lines, "footprint", k, Some(0), "idle", num(key));
    let churn_foot =
        |key: &'static str| move |k: &str| med(lines, "footprint", k, None, "churn", num(key));
    let churn =
        |f: &dyn Fn(&Value) -> Option<f64>, k: &str| med(lines, "churn", k, None, "idle", f);
    let simple = |label: &str, f: &dyn Fn(&str) -> Option<f64>, scale: f64, digits: usize| {
        let (r, u) = (f("rkube"), f("upstream"));
        format!(
            "| {label} | {} | {} | {} |\n",
            fmt(r, scale, digits),
            fmt(u, scale, digits),
            fmt_ratio(ratio(r, u))
        )
    };
    out.push_str(
        "\n**no pods, and churn**\n\n| | rkube | upstream | rkube/upstream |\n|---|---|---|---|\n",
    );
    out.push_str(&simple(
        "RSS with no pods, MiB",
        &idle0("rssBytes"),
        1048576.0,
        1,
    ));
    out.push_str(&simple(
        "CPU with no pods, cores",
        &idle0("cpuCores"),
        1.0,
        3,
    ));
    out.push_str(&simple(
        "API requests/s with no pods",
        &idle0("requestsPerSecond"),
        1.0,
        2,
    ));
    let rate = |v: &Value| {
        ratio(
            v.get("pods").and_then(Value::as_f64),
            v.get("seconds").and_then(Value::as_f64),
        )
    };
    out.push_str(&simple("churn, pods/s", &|k| churn(&rate, k), 1.0, 2));
    let dp99 = pct("deleteMs", 99.0);
    out.push_str(&simple(
        "churn, delete to gone p99, s",
        &|k| churn(&dp99, k),
        1000.0,
        2,
    ));
    let sp99 = pct("startupMs", 99.0);
    out.push_str(&simple(
        "churn, startup p99, s",
        &|k| churn(&sp99, k),
        1000.0,
        2,
    ));
    out.push_str(&simple(
        "churn, kubelet CPU, cores",
        &churn_foot("cpuCores"),
        1.0,
        3,
    ));
    out.push_str(&simple(
        "churn, kubelet RSS, MiB",
        &churn_foot("rssBytes"),
        1048576.0,
        1,
    ));
    out.push_str(&stages_table(lines));
    out.push_str(&cri_table(lines));
    out.push('\n');
    out.push_str(&summary);
    Ok(out)
}

/// Where rkube's kubelet spent the startup, per pod count measured: each
/// stage's time from the kubelet's first sight of a pod.
fn stages_table(lines: &[Line]) -> String {
    let counts: BTreeSet<u64> = lines
        .iter()
        .filter(|l| l.kind == "stages")
        .map(|l| l.pods)
        .collect();
    let mut out = String::new();
    for n in counts {
        out.push_str(&format!(
            "\n**rkube's kubelet, {n} pods: time from its first sight of a pod (`Seen`) to each stage**\n\n| stage | p50, s | p99, s |\n|---|---|---|\n"
        ));
        for stage in STAGES {
            let at = |p: f64| {
                med(lines, "stages", "rkube", Some(n), "idle", |v| {
                    percentile(&numbers(v.get("fromSeenMs")?, stage), p)
                })
            };
            out.push_str(&format!(
                "| {stage} | {} | {} |\n",
                fmt(at(50.0), 1000.0, 2),
                fmt(at(99.0), 1000.0, 2)
            ));
        }
    }
    out
}

/// The CRI calls per pod started, by operation, per pod count measured.
fn cri_table(lines: &[Line]) -> String {
    let counts: BTreeSet<u64> = lines
        .iter()
        .filter(|l| l.kind == "cri")
        .map(|l| l.pods)
        .collect();
    let mut out = String::new();
    for n in counts {
        let ops: BTreeSet<&str> = lines
            .iter()
            .filter(|l| l.kind == "cri" && l.pods == n)
            .filter_map(|l| l.v.get("calls")?.as_object())
            .flat_map(|c| c.keys().map(String::as_str))
            .collect();
        out.push_str(&format!(
            "\n**CRI calls per pod while {n} pods started, by operation**\n\n| operation | rkube | upstream | floor |\n|---|---|---|---|\n"
        ));
        for op in ops {
            let per_pod = |k: &str| {
                med(lines, "cri", k, Some(n), "idle", |v| {
                    let c = v.get("calls")?.as_object()?;
                    Some(c.get(op).and_then(Value::as_f64).unwrap_or(0.0) / n as f64)
                })
            };
            out.push_str(&format!(
                "| {op} | {} | {} | {} |\n",
                fmt(per_pod("rkube"), 1.0, 2),
                fmt(per_pod("upstream"), 1.0, 2),
                fmt(per_pod("floor"), 1.0, 2)
            ));
        }
    }
    out
}

fn x(r: Option<f64>) -> String {
    r.map_or("—".into(), |r| format!("{r:.2}x"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two runs each, N = 10 (latencies 1..=10 s scaled per kubelet).
    fn trace() -> String {
        let mut t = String::new();
        for (k, scale, rss, cpu, req) in [
            ("rkube", 1.0, 30.0, 0.02, 30.0),
            ("upstream", 2.0, 120.0, 0.05, 40.0),
        ] {
            for run in [1, 2] {
                let lat: Vec<f64> = (1..=10)
                    .map(|i| f64::from(i) * 1000.0 * scale * f64::from(run))
                    .collect();
                t.push_str(&format!(
                    "{{\"kind\":\"startup\",\"kubelet\":\"{k}\",\"run\":{run},\"pods\":10,\"latenciesMs\":{lat:?},\"totalMs\":{}}}\n",
                    lat[9] + 100.0
                ));
                t.push_str(&format!(
                    "{{\"kind\":\"footprint\",\"kubelet\":\"{k}\",\"run\":{run},\"pods\":10,\"cpuCores\":{cpu},\"rssBytes\":{},\"threads\":9,\"fds\":40,\"requestsPerSecond\":0.5}}\n",
                    rss * 1048576.0
                ));
                t.push_str(&format!(
                    "{{\"kind\":\"settle\",\"kubelet\":\"{k}\",\"run\":{run},\"pods\":10,\"seconds\":{},\"left\":0}}\n",
                    scale * f64::from(run)
                ));
                t.push_str(&format!(
                    "{{\"kind\":\"cpu\",\"kubelet\":\"{k}\",\"run\":{run},\"pods\":10,\"cpuSeconds\":{{\"kube-apiserver\":{},\"kubelet\":1.5}},\"machine\":{{\"busySeconds\":{},\"cores\":1.5}}}}\n",
                    4.0 * scale * f64::from(run),
                    10.0 * scale * f64::from(run)
                ));
                t.push_str(&format!(
                    "{{\"kind\":\"cri\",\"kubelet\":\"{k}\",\"run\":{run},\"pods\":10,\"calls\":{{\"run_podsandbox\":10,\"container_status\":{}}}}}\n",
                    20.0 * scale * f64::from(run)
                ));
                t.push_str(&format!("{{\"kind\":\"requests\",\"kubelet\":\"{k}\",\"run\":{run},\"pods\":10,\"requests\":{req}}}\n"));
            }
        }
        t.push_str("{\"kind\":\"startup\",\"kubelet\":\"floor\",\"run\":1,\"pods\":10,\"latenciesMs\":[500,1000,2000,4000,5000],\"totalMs\":5000}\n");
        t.push_str("{\"kind\":\"cpu\",\"kubelet\":\"floor\",\"run\":1,\"pods\":10,\"cpuSeconds\":{\"kube-apiserver\":0.5,\"kubelet\":0},\"machine\":{\"busySeconds\":5,\"cores\":1.25}}\n");
        t.push_str("{\"kind\":\"cri\",\"kubelet\":\"floor\",\"run\":1,\"pods\":10,\"calls\":{\"run_podsandbox\":10,\"create_container\":10,\"start_container\":10}}\n");
        t.push_str("{\"kind\":\"churn\",\"kubelet\":\"rkube\",\"run\":1,\"pods\":200,\"seconds\":100,\"startupMs\":[1000],\"deleteMs\":[2000]}\n");
        // Two runs' stages: medians of 100/300 ms and of 1000/3000 ms.
        for (run, f) in [(1, 1.0), (2, 3.0)] {
            t.push_str(&format!(
                "{{\"kind\":\"stages\",\"kubelet\":\"rkube\",\"run\":{run},\"pods\":10,\"fromSeenMs\":{{\"Admitted\":[{}],\"ObservedRunning\":[{}]}}}}\n",
                100.0 * f,
                1000.0 * f
            ));
        }
        t
    }

    #[test]
    fn medians_of_run_percentiles_and_ratios() {
        let out = render(&trace()).unwrap();
        // rkube p99: run 1 → 10 s, run 2 → 20 s: median 15 s; upstream 30 s.
        assert!(
            out.contains("| startup p99, s | 15.00 | 30.00 | 5.00 | 0.50× | 3.00× |"),
            "{out}"
        );
        // p50: rkube 5 and 10 → 7.5; upstream 15.
        assert!(
            out.contains("| startup p50, s | 7.50 | 15.00 | 2.00 | 0.50× | 3.75× |"),
            "{out}"
        );
        assert!(
            out.contains("| kubelet RSS, MiB | 30.0 | 120.0 |  | 0.25× |  |"),
            "{out}"
        );
        assert!(
            out.contains("| API requests per pod started | 3.00 | 4.00 |  | 0.75× |  |"),
            "{out}"
        );
        // rkube 1 and 2 s → 1.5; upstream 2 and 4 → 3.
        assert!(
            out.contains("| sandboxes removed after gone, s | 1.50 | 3.00 |  | 0.50× |  |"),
            "{out}"
        );
        // rkube 4 and 8 → 6; upstream 8 and 16 → 12; etcd not measured.
        assert!(
            out.contains(
                "| CPU-seconds while starting: kube-apiserver | 6.0 | 12.0 | 0.5 | 0.50× | 12.00× |"
            ),
            "{out}"
        );
        assert!(
            out.contains("| CPU-seconds while starting: kubelet | 1.5 | 1.5 | 0.0 | 1.00× | — |"),
            "{out}"
        );
        assert!(
            out.contains("| CPU-seconds while starting: etcd | — | — | — | — | — |"),
            "{out}"
        );
        // The parts summed per run: rkube 5.5 and 9.5 → 7.5.
        for want in [
            "| CPU-seconds while starting: the node's processes | 7.5 | 13.5 | 0.5 | 0.56× | 15.00× |",
            "| CPU-seconds while starting: the whole machine | 15.0 | 30.0 | 5.0 | 0.50× | 3.00× |",
            "| busy cores while starting (mean) | 1.50 | 1.50 | 1.25 | 1.00× | 1.20× |",
            // rkube: 30 and 50 calls for 10 pods → 4; upstream 50 and 90 → 7.
            "| CRI calls per pod started | 4.0 | 7.0 | 3.0 | 0.57× | 1.33× |",
            "| container_status | 3.00 | 6.00 | 0.00 |",
            "| run_podsandbox | 1.00 | 1.00 | 1.00 |",
            "| start_container | 0.00 | 0.00 | 1.00 |",
        ] {
            assert!(out.contains(want), "{want} not in {out}");
        }
        assert!(out.contains("| churn, pods/s | 2.00 | — | — |"), "{out}");
        assert!(out.contains("| Admitted | 0.20 | 0.20 |"), "{out}");
        assert!(out.contains("| ObservedRunning | 2.00 | 2.00 |"), "{out}");
        assert!(out.contains("| SandboxCreated | — | — |"), "{out}");
        assert!(
            out.contains("Medians of 2 runs of rkube's kubelet and 2 of upstream's"),
            "{out}"
        );
        let last = out.trim_end().lines().last().unwrap();
        assert_eq!(
            last,
            "SUMMARY kubelet N=10: startup p99 rkube/upstream 0.50x, rkube/floor 3.00x, RSS rkube/upstream 0.25x, CPU rkube/upstream 0.40x, API requests/pod rkube/upstream 0.75x"
        );
    }

    /// The trace docs/benchmarks-history.md's a7dfbe7 kubelet table was
    /// printed from (three alternating runs of each kubelet at that
    /// commit): the same lines again.
    #[test]
    fn the_recorded_trace_gives_the_published_table() {
        let trace = include_str!("../../testdata/kubelet-a7dfbe7.jsonl");
        let out = render(trace).unwrap();
        assert!(
            out.starts_with("Medians of 3 runs of rkube's kubelet and 3 of upstream's"),
            "{out}"
        );
        assert!(
            out.contains("| startup p99, s | 13.23 | 16.70 | 10.28 | 0.79× | 1.29× |"),
            "{out}"
        );
        assert!(
            out.contains("| churn, kubelet CPU, cores | 0.058 | 0.230 | 0.25× |"),
            "{out}"
        );
        let summary: Vec<&str> = out.lines().filter(|l| l.starts_with("SUMMARY")).collect();
        assert_eq!(
            summary,
            [
                "SUMMARY kubelet N=10: startup p99 rkube/upstream 0.72x, rkube/floor 1.35x, RSS rkube/upstream 0.33x, CPU rkube/upstream 0.64x, API requests/pod rkube/upstream 0.44x",
                "SUMMARY kubelet N=30: startup p99 rkube/upstream 0.81x, rkube/floor 1.38x, RSS rkube/upstream 0.33x, CPU rkube/upstream 0.77x, API requests/pod rkube/upstream 0.45x",
                "SUMMARY kubelet N=105: startup p99 rkube/upstream 0.79x, rkube/floor 1.29x, RSS rkube/upstream 0.32x, CPU rkube/upstream 0.90x, API requests/pod rkube/upstream 0.44x",
            ]
        );
        // The runs alternate as `stats::order` says: each round's first
        // kubelet is the other one's in the next.
        let firsts: Vec<(u64, String)> = trace
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["kind"] == "footprint" && v["pods"] == 0)
            .map(|v| {
                (
                    v["run"].as_u64().unwrap(),
                    v["kubelet"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        let want: Vec<(u64, String)> = super::super::stats::order(3)
            .into_iter()
            .map(|(r, k)| (r as u64, k.to_string()))
            .collect();
        assert_eq!(firsts, want);
    }

    /// The trace BENCHMARKS.md's current kubelet table was printed from
    /// (three alternating runs of each kubelet at commit 7466704, with the
    /// settle step and the node's CPU): the same lines again.
    #[test]
    fn the_current_trace_gives_the_published_table() {
        let trace = include_str!("../../testdata/kubelet-7466704.jsonl");
        let out = render(trace).unwrap();
        for line in [
            "| startup p99, s | 27.86 | 34.66 | 20.87 | 0.80× | 1.33× |",
            "| delete to gone p99, s | 18.45 | 26.66 | 18.05 | 0.69× | 1.02× |",
            "| kubelet RSS anonymous, MiB | 13.9 | 58.4 |  | 0.24× |  |",
            "| CPU-seconds while starting: kubelet | 1.8 | 9.4 | — | 0.19× | — |",
            "| churn, pods/s | 2.36 | 1.63 | 1.45× |",
            "| SandboxCreated | 10.78 | 22.62 |",
        ] {
            assert!(out.contains(line), "{line} not in {out}");
        }
        let summary: Vec<&str> = out.lines().filter(|l| l.starts_with("SUMMARY")).collect();
        assert_eq!(
            summary,
            [
                "SUMMARY kubelet N=10: startup p99 rkube/upstream 0.79x, rkube/floor 1.31x, RSS rkube/upstream 0.32x, CPU rkube/upstream 0.19x, API requests/pod rkube/upstream 0.52x",
                "SUMMARY kubelet N=30: startup p99 rkube/upstream 0.83x, rkube/floor 1.40x, RSS rkube/upstream 0.32x, CPU rkube/upstream 0.22x, API requests/pod rkube/upstream 0.54x",
                "SUMMARY kubelet N=105: startup p99 rkube/upstream 0.80x, rkube/floor 1.33x, RSS rkube/upstream 0.32x, CPU rkube/upstream 0.23x, API requests/pod rkube/upstream 0.54x",
            ]
        );
    }

    /// The trace of BENCHMARKS.md's "where the gap to the floor goes"
    /// tables (three alternating runs of 105 pods at commit dc27590, with
    /// the machine's CPU, the floor's and the CRI calls): the same rows.
    #[test]
    fn the_gap_trace_gives_the_published_rows() {
        let out = render(include_str!("../../testdata/kubelet-dc27590.jsonl")).unwrap();
        for line in [
            "| startup p99, s | 22.39 | 27.76 | 20.09 | 0.81× | 1.11× |",
            "| delete to gone p99, s | 17.98 | 24.32 | 17.51 | 0.74× | 1.03× |",
            "| CPU-seconds while starting: kube-apiserver | 3.6 | 5.8 | 0.4 | 0.62× | 8.20× |",
            "| CPU-seconds while starting: containerd's shims | 14.0 | 13.9 | 15.4 | 1.01× | 0.91× |",
            "| CPU-seconds while starting: the whole machine | 43.6 | 53.7 | 38.9 | 0.81× | 1.12× |",
            "| busy cores while starting (mean) | 1.92 | 1.92 | 1.87 | 1.00× | 1.02× |",
            "| CRI calls per pod started | 28.6 | 13.2 | 3.0 | 2.16× | 9.52× |",
            "| list_containers | 8.15 | 1.15 | 0.00 |",
            "| podsandbox_status | 3.93 | 3.89 | 0.00 |",
        ] {
            assert!(out.contains(line), "{line} not in {out}");
        }
        assert!(out.contains(
            "SUMMARY kubelet N=105: startup p99 rkube/upstream 0.81x, rkube/floor 1.11x,"
        ));
    }

    #[test]
    fn bad_traces_are_refused() {
        assert!(render("").is_err());
        assert!(render("{").unwrap_err().to_string().contains("line 1"));
        assert!(render("{\"kind\":\"startup\"}")
            .unwrap_err()
            .to_string()
            .contains("kubelet"));
    }
}
