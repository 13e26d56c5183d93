//! `plugins/nodeports/node_ports_test.go`.

use rkube_framework::{Code, CycleState, Snapshot};
use rkube_model::{HostPort, Pod};
use rkube_plugins::node_ports::{NodePorts, ERR_REASON};

use crate::common::*;

/// Upstream's `newPod(host, "PROTO/IP/PORT"...)`.
fn new_pod(host: &str, ports: &[&str]) -> Pod {
    let ports: Vec<HostPort> = ports
        .iter()
        .map(|s| {
            let parts: Vec<&str> = s.split('/').collect();
            host_port(parts[0], parts[1], parts[2].parse().unwrap())
        })
        .collect();
    pod().node(host).container_ports(ports).obj()
}

/// Upstream's `newNodeInfo(...)`: a node info holding one pod with these ports.
fn ni_with(ports: &[&str]) -> rkube_framework::NodeInfo {
    node_info(node("n").obj(), vec![new_pod("m1", ports)])
}

fn unsched() -> rkube_framework::Status {
    status(Code::Unschedulable, &[ERR_REASON])
}

#[test]
fn test_node_ports() {
    // (name, pod, existing ports on the node, want PreFilter, want Filter)
    let sidecar_port = vec![host_port("TCP", "0.0.0.0", 8001)];
    let cases: Vec<(&str, Pod, Vec<&str>, _, _)> = vec![
        (
            "skip filter",
            pod().obj(),
            vec![],
            status(Code::Skip, &[]),
            success(),
        ),
        (
            "other port",
            new_pod("m1", &["UDP/127.0.0.1/8080"]),
            vec!["UDP/127.0.0.1/9090"],
            success(),
            success(),
        ),
        (
            "same udp port",
            new_pod("m1", &["UDP/127.0.0.1/8080"]),
            vec!["UDP/127.0.0.1/8080"],
            success(),
            unsched(),
        ),
        (
            "same tcp port",
            new_pod("m1", &["TCP/127.0.0.1/8080"]),
            vec!["TCP/127.0.0.1/8080"],
            success(),
            unsched(),
        ),
        (
            "different host ip",
            new_pod("m1", &["TCP/127.0.0.1/8080"]),
            vec!["TCP/127.0.0.2/8080"],
            success(),
            success(),
        ),
        (
            "different protocol",
            new_pod("m1", &["UDP/127.0.0.1/8080"]),
            vec!["TCP/127.0.0.1/8080"],
            success(),
            success(),
        ),
        (
            "second udp port conflict",
            new_pod("m1", &["UDP/127.0.0.1/8000", "UDP/127.0.0.1/8080"]),
            vec!["UDP/127.0.0.1/8080"],
            success(),
            unsched(),
        ),
        (
            "first tcp port conflict",
            new_pod("m1", &["TCP/127.0.0.1/8001", "UDP/127.0.0.1/8080"]),
            vec!["TCP/127.0.0.1/8001", "UDP/127.0.0.1/8081"],
            success(),
            unsched(),
        ),
        (
            "first tcp port conflict due to 0.0.0.0 hostIP",
            new_pod("m1", &["TCP/0.0.0.0/8001"]),
            vec!["TCP/127.0.0.1/8001"],
            success(),
            unsched(),
        ),
        (
            "TCP hostPort conflict due to 0.0.0.0 hostIP",
            new_pod("m1", &["TCP/10.0.10.10/8001", "TCP/0.0.0.0/8001"]),
            vec!["TCP/127.0.0.1/8001"],
            success(),
            unsched(),
        ),
        (
            "second tcp port conflict to 0.0.0.0 hostIP",
            new_pod("m1", &["TCP/127.0.0.1/8001"]),
            vec!["TCP/0.0.0.0/8001"],
            success(),
            unsched(),
        ),
        (
            "second different protocol",
            new_pod("m1", &["UDP/127.0.0.1/8001"]),
            vec!["TCP/0.0.0.0/8001"],
            success(),
            success(),
        ),
        (
            "UDP hostPort conflict due to 0.0.0.0 hostIP",
            new_pod("m1", &["UDP/127.0.0.1/8001"]),
            vec!["TCP/0.0.0.0/8001", "UDP/0.0.0.0/8001"],
            success(),
            unsched(),
        ),
        (
            "non-sidecar initContainer using hostPort",
            pod()
                .init_container_ports(false, sidecar_port.clone())
                .obj(),
            vec!["TCP/0.0.0.0/8001"],
            status(Code::Skip, &[]),
            success(),
        ),
        (
            "TCP hostPort conflict from sidecar initContainer",
            pod().init_container_ports(true, sidecar_port).obj(),
            vec!["TCP/0.0.0.0/8001"],
            success(),
            unsched(),
        ),
    ];
    let mut f = Failures::new();
    for (name, p, existing, want_pre, want_filter) in cases {
        let ni = if existing.is_empty() {
            node_info(node("n").obj(), vec![])
        } else {
            ni_with(&existing)
        };
        let mut state = CycleState::new();
        let (_, pre) = pre_filter(&NodePorts, &mut state, &p, &Snapshot::default());
        let skipped = pre.code == Code::Skip;
        f.check(name, "prefilter status", pre, want_pre);
        if skipped {
            continue;
        }
        f.check(
            name,
            "filter status",
            filter(&NodePorts, &state, &p, &ni),
            want_filter,
        );
    }
    f.finish();
}

/// Upstream's `TestFits` checks `Fits(pod, nodeInfo)`; rkube's Filter
/// without PreFilter state computes the same from the pod.
#[test]
fn test_fits() {
    let cases = vec![
        (
            "non-conflicting ports",
            new_pod("p", &["TCP/127.0.0.1/80"]),
            vec!["TCP/127.0.0.1/9090"],
            true,
        ),
        (
            "multiple non-conflicting ports",
            new_pod(
                "p",
                &[
                    "TCP/127.0.0.1/80",
                    "TCP/127.0.1.1/80",
                    "TCP/127.0.1.1/90",
                    "TCP/127.0.1.1/100",
                ],
            ),
            vec![
                "TCP/127.0.0.1/9090",
                "TCP/127.0.0.1/9191",
                "TCP/127.0.1.1/8080",
            ],
            true,
        ),
        (
            "same ports on different protocols",
            new_pod("m1", &["TCP/127.0.0.1/80"]),
            vec!["UDP/127.0.0.1/80"],
            true,
        ),
        (
            "conflicting ports",
            new_pod("m1", &["TCP/127.0.0.1/80"]),
            vec!["TCP/127.0.0.1/80"],
            false,
        ),
        (
            "multiple ports, some conflicting",
            new_pod(
                "p",
                &[
                    "TCP/127.0.0.1/80",
                    "TCP/127.0.1.1/80",
                    "TCP/127.0.1.1/90",
                    "TCP/127.0.1.1/100",
                ],
            ),
            vec![
                "TCP/127.0.0.1/9090",
                "TCP/127.0.1.1/90",
                "TCP/127.0.1.1/8080",
            ],
            false,
        ),
    ];
    let mut f = Failures::new();
    for (name, p, existing, want) in cases {
        let ni = ni_with(&existing);
        let got = filter(&NodePorts, &CycleState::new(), &p, &ni).is_success();
        f.check(name, "fits", got, want);
    }
    f.finish();
}
