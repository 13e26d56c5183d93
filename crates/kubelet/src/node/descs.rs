//! Building the [`NodeDesc`]s of the process: the real machine's node, or
//! N sim nodes shaped by `--node-template` (default 32 cpu, 256Gi memory,
//! 100Gi ephemeral-storage, maxPods pods; every kubelet reports
//! ephemeral-storage, so a template without it gets the default).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeSystemInfo};
use rkube_model::Quantity;

use crate::config::KubeletConfiguration;
use crate::node::machine;
use crate::node::{default_labels, NodeDesc};

const EPHEMERAL: &str = "ephemeral-storage";
use crate::node::status::allocatable;
use crate::options::{Options, RuntimeKind};
use crate::runtime::{sim, RuntimeVersion};

/// The shape every sim node copies.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Template {
    /// Capacity.
    pub capacity: BTreeMap<String, Quantity>,
    /// Allocatable as given (else computed from capacity).
    pub allocatable: Option<BTreeMap<String, Quantity>>,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Taints.
    pub taints: Vec<k8s_openapi::api::core::v1::Taint>,
}

fn quantities(
    list: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
    file: &str,
    field: &str,
) -> Result<Option<BTreeMap<String, Quantity>>, String> {
    let Some(list) = list else { return Ok(None) };
    let mut out = BTreeMap::new();
    for (k, v) in list {
        let q = Quantity::parse(&v.0)
            .map_err(|_| format!("{file}: {field}[{k}]: invalid quantity {:?}", v.0))?;
        out.insert(k.clone(), q);
    }
    Ok(Some(out))
}

impl Template {
    /// The default sim node: 32 cpu, 256Gi memory, 100Gi ephemeral-storage,
    /// `max_pods` pods.
    pub fn default_shape(max_pods: i32) -> Self {
        Template {
            capacity: [
                ("cpu".to_string(), Quantity::from_units(32)),
                ("memory".to_string(), Quantity::from_units(256 << 30)),
                (EPHEMERAL.to_string(), Quantity::from_units(100 << 30)),
                ("pods".to_string(), Quantity::from_units(max_pods as i64)),
            ]
            .into(),
            ..Default::default()
        }
    }

    /// Reads a Node YAML (or JSON) file.
    pub fn parse(file: &str, text: &str, max_pods: i32) -> Result<Self, String> {
        let node: Node =
            serde_yaml_ng::from_str(text).map_err(|e| format!("{file}: not a Node: {e}"))?;
        let status = node.status.as_ref();
        let mut t = Template::default_shape(max_pods);
        if let Some(cap) = quantities(
            status.and_then(|s| s.capacity.as_ref()),
            file,
            "status.capacity",
        )? {
            // A real kubelet always reports its root filesystem.
            let disk = t.capacity.get(EPHEMERAL).copied();
            t.capacity = cap;
            if let Some(d) = disk {
                t.capacity.entry(EPHEMERAL.to_string()).or_insert(d);
            }
        }
        t.allocatable = quantities(
            status.and_then(|s| s.allocatable.as_ref()),
            file,
            "status.allocatable",
        )?;
        t.labels = node.metadata.labels.clone().unwrap_or_default();
        t.taints = node.spec.and_then(|s| s.taints).unwrap_or_default();
        Ok(t)
    }
}

/// Builds the descriptions of every node of the process.
pub fn build(
    opts: &Options,
    cfg: &KubeletConfiguration,
    template: &Template,
    runtime: &RuntimeVersion,
) -> Vec<NodeDesc> {
    let os = std::env::consts::OS;
    let arch = machine::go_arch();
    let names = opts.node_names(&machine::hostname());
    let info = machine::os_info();
    let sim = opts.runtime == RuntimeKind::Sim;
    let capacity = if sim {
        template.capacity.clone()
    } else {
        machine::capacity(cfg.max_pods, &opts.root_dir)
    };
    let alloc = match (&template.allocatable, sim) {
        (Some(a), true) => a.clone(),
        _ => allocatable(&capacity, cfg),
    };
    let detected_ip = opts.node_ip.clone().unwrap_or_else(machine::detect_ip);
    names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let mut labels = if sim {
                template.labels.clone()
            } else {
                BTreeMap::new()
            };
            labels.extend(default_labels(name, os, arch));
            labels.extend(opts.node_labels.iter().cloned());
            let mut taints = cfg.register_with_taints.clone();
            if sim {
                taints.extend(template.taints.iter().cloned());
            }
            let (ip, pod_cidr) = if sim && names.len() > 1 {
                (sim::node_ip(i), sim::pod_cidr(i))
            } else if sim {
                (detected_ip.clone(), sim::pod_cidr(i))
            } else {
                (detected_ip.clone(), cfg.pod_cidr.clone())
            };
            NodeDesc {
                name: name.clone(),
                labels,
                taints,
                capacity: capacity.clone(),
                allocatable: alloc.clone(),
                ip,
                pod_cidr,
                provider_id: cfg.provider_id.clone(),
                node_info: NodeSystemInfo {
                    architecture: arch.into(),
                    operating_system: os.into(),
                    kubelet_version: machine::kubelet_version(),
                    container_runtime_version: format!(
                        "{}://{}",
                        runtime.runtime_name, runtime.runtime_version
                    ),
                    machine_id: info.machine_id.clone(),
                    system_uuid: info.system_uuid.clone(),
                    boot_id: info.boot_id.clone(),
                    kernel_version: info.kernel_version.clone(),
                    os_image: info.os_image.clone(),
                    ..Default::default()
                },
                port: cfg.port,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::parse;

    fn rv() -> RuntimeVersion {
        RuntimeVersion {
            runtime_name: "sim".into(),
            runtime_version: "0.1.0".into(),
        }
    }

    #[test]
    fn sim_nodes_from_default_template() {
        let opts = parse(["--runtime=sim", "--nodes=3", "--node-labels=zone=a"].map(String::from))
            .unwrap();
        let cfg = KubeletConfiguration::default();
        let nodes = build(&opts, &cfg, &Template::default_shape(110), &rv());
        assert_eq!(nodes.len(), 3);
        assert_eq!(nodes[2].name, "sim-node-00002");
        assert_eq!(nodes[2].ip, "172.16.0.3");
        assert_eq!(nodes[2].pod_cidr, "10.0.2.0/24");
        assert_eq!(nodes[0].labels["zone"], "a");
        assert_eq!(nodes[0].labels["kubernetes.io/hostname"], "sim-node-00000");
        assert_eq!(nodes[0].capacity["cpu"].value(), 32);
        // 256Gi − 100Mi eviction threshold.
        assert_eq!(
            nodes[0].allocatable["memory"].value(),
            (256 << 30) - (100 << 20)
        );
        // 100Gi − 10% (nodefs.available): what the e2e ephemeral-storage spec reads.
        assert_eq!(
            nodes[0].allocatable["ephemeral-storage"].value(),
            (100 << 30) - (100 << 30) / 10
        );
        assert_eq!(nodes[0].node_info.container_runtime_version, "sim://0.1.0");
        assert!(nodes[0].node_info.kubelet_version.starts_with("v1.37."));
    }

    #[test]
    fn template_file() {
        let t = Template::parse(
            "t.yaml",
            "apiVersion: v1\nkind: Node\nmetadata: {name: x, labels: {gpu: 'true'}}\n\
             spec: {taints: [{key: dedicated, value: gpu, effect: NoSchedule}]}\n\
             status: {capacity: {cpu: '8', memory: 16Gi, pods: '50', nvidia.com/gpu: '2'}}\n",
            110,
        )
        .unwrap();
        assert_eq!(t.capacity["nvidia.com/gpu"].value(), 2);
        assert_eq!(t.capacity["pods"].value(), 50);
        assert_eq!(
            t.capacity["ephemeral-storage"].value(),
            100 << 30,
            "the default disk when the template has none"
        );
        assert_eq!(t.labels["gpu"], "true");
        assert_eq!(t.taints[0].key, "dedicated");
        assert!(t.allocatable.is_none());
        let e = Template::parse("t.yaml", "status: {capacity: {cpu: lots}}\n", 110).unwrap_err();
        assert!(e.contains("t.yaml: status.capacity[cpu]"), "{e}");
    }
}
