//! Container ports → the sandbox's CRI port mappings, as upstream's
//! `generatePodSandboxConfig`: every port of every regular container (init
//! containers' ports are not mapped, as upstream), in order, a repeated
//! port name within one container dropped. The runtime hands them to CNI's
//! `portMappings` capability (the `portmap` plugin), which makes `hostPort`
//! reachable; entries without a `hostPort` are ignored there.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::{Container, Pod};
use rkube_cri::v1;

/// The port mappings of `pod`'s sandbox.
pub fn port_mappings(pod: &Pod) -> Vec<v1::PortMapping> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    spec.containers
        .iter()
        .flat_map(container_mappings)
        .collect()
}

fn container_mappings(c: &Container) -> Vec<v1::PortMapping> {
    let mut names = HashSet::new();
    let mut out = Vec::new();
    for p in c.ports.iter().flatten() {
        let protocol = p.protocol.as_deref().unwrap_or("TCP");
        let host_ip = p.host_ip.clone().unwrap_or_default();
        let host_port = p.host_port.unwrap_or(0);
        // Upstream keys an unnamed port by family, protocol, host IP and
        // both ports, so the same port twice is mapped once.
        let name = match p.name.as_deref().filter(|n| !n.is_empty()) {
            Some(n) => n.to_string(),
            None => {
                let family = if host_ip.is_empty() {
                    "any"
                } else if host_ip.contains(':') {
                    "v6"
                } else {
                    "v4"
                };
                format!(
                    "{family}-{protocol}-{host_ip}:{}:{host_port}",
                    p.container_port
                )
            }
        };
        if !names.insert(name) {
            continue;
        }
        out.push(v1::PortMapping {
            protocol: runtime_protocol(protocol) as i32,
            container_port: p.container_port,
            host_port,
            host_ip,
        });
    }
    out
}

/// Upstream's `toRuntimeProtocol`: an unknown protocol maps to TCP.
fn runtime_protocol(p: &str) -> v1::Protocol {
    match p {
        "UDP" => v1::Protocol::Udp,
        "SCTP" => v1::Protocol::Sctp,
        _ => v1::Protocol::Tcp,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn host_ports_of_regular_containers_are_mapped_in_order() {
        let p = pod(json!({"spec": {
            "initContainers": [{"name": "i", "ports": [{"containerPort": 1, "hostPort": 1}]}],
            "containers": [
                {"name": "a", "ports": [
                    {"containerPort": 80, "hostPort": 8080},
                    {"containerPort": 53, "hostPort": 5353, "protocol": "UDP", "hostIP": "127.0.0.1"}]},
                {"name": "b", "ports": [{"containerPort": 9000, "protocol": "SCTP"}]}]}}));
        let m = port_mappings(&p);
        let got: Vec<_> = m
            .iter()
            .map(|m| {
                (
                    m.protocol,
                    m.container_port,
                    m.host_port,
                    m.host_ip.as_str(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (v1::Protocol::Tcp as i32, 80, 8080, ""),
                (v1::Protocol::Udp as i32, 53, 5353, "127.0.0.1"),
                (v1::Protocol::Sctp as i32, 9000, 0, ""),
            ]
        );
    }

    #[test]
    fn a_port_repeated_in_one_container_is_mapped_once() {
        let p = pod(json!({"spec": {"containers": [
            {"name": "a", "ports": [
                {"containerPort": 80, "hostPort": 8080},
                {"containerPort": 80, "hostPort": 8080},
                {"containerPort": 80, "hostPort": 8080, "hostIP": "10.0.0.1"},
                {"name": "web", "containerPort": 81},
                {"name": "web", "containerPort": 82}]},
            {"name": "b", "ports": [{"containerPort": 80, "hostPort": 8080}]}]}}));
        let ports: Vec<_> = port_mappings(&p)
            .iter()
            .map(|m| (m.container_port, m.host_ip.clone()))
            .collect();
        assert_eq!(
            ports,
            vec![
                (80, String::new()),
                (80, "10.0.0.1".to_string()),
                (81, String::new()),
                (80, String::new()),
            ]
        );
    }
}
