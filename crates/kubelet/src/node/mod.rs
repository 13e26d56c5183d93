//! The node manager: what a node looks like ([`NodeDesc`], built by
//! [`descs`] from the machine ([`machine`], [`capacity`]) or a sim
//! template), the Node object the kubelet creates, and registration —
//! create, or on `AlreadyExists` reconcile the existing Node (keep it,
//! re-apply the labels the kubelet owns), as upstream's
//! `registerWithAPIServer` does. The [`heartbeat`] renews every [`lease`]
//! and posts node status built by the setters in [`status`] (with the
//! eviction manager's [`pressure`]), spread over the interval by
//! [`schedule`]; [`resource_slices`] publishes sim nodes' ResourceSlices.

pub mod capacity;
pub mod descs;
pub mod heartbeat;
pub mod lease;
pub mod machine;
pub mod pressure;
pub mod resource_slices;
pub mod schedule;
pub mod status;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeSpec, NodeStatus,
    NodeSystemInfo, Taint,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use rkube_model::Quantity;

use crate::node::status::to_resource_list;

/// Everything static about one node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeDesc {
    /// Node name.
    pub name: String,
    /// Labels (defaults + `--node-labels` + template).
    pub labels: BTreeMap<String, String>,
    /// `registerWithTaints` (+ template taints).
    pub taints: Vec<Taint>,
    /// Capacity.
    pub capacity: BTreeMap<String, Quantity>,
    /// Allocatable.
    pub allocatable: BTreeMap<String, Quantity>,
    /// InternalIP.
    pub ip: String,
    /// `spec.podCIDR` (empty: unset).
    pub pod_cidr: String,
    /// `spec.providerID` (empty: unset).
    pub provider_id: String,
    /// `status.nodeInfo`.
    pub node_info: NodeSystemInfo,
    /// Kubelet port for `daemonEndpoints`.
    pub port: u16,
}

/// The labels the kubelet sets on its own Node (upstream's default labels).
pub fn default_labels(name: &str, os: &str, arch: &str) -> BTreeMap<String, String> {
    [
        ("kubernetes.io/hostname", name),
        ("kubernetes.io/os", os),
        ("kubernetes.io/arch", arch),
        ("beta.kubernetes.io/os", os),
        ("beta.kubernetes.io/arch", arch),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

impl NodeDesc {
    /// The status fields that do not change (conditions are added by the
    /// status loop).
    pub fn base_status(&self) -> NodeStatus {
        NodeStatus {
            capacity: Some(to_resource_list(&self.capacity)),
            allocatable: Some(to_resource_list(&self.allocatable)),
            addresses: Some(vec![
                NodeAddress {
                    type_: "InternalIP".into(),
                    address: self.ip.clone(),
                },
                NodeAddress {
                    type_: "Hostname".into(),
                    address: self.name.clone(),
                },
            ]),
            daemon_endpoints: Some(NodeDaemonEndpoints {
                kubelet_endpoint: Some(DaemonEndpoint {
                    port: self.port as i32,
                }),
            }),
            node_info: Some(self.node_info.clone()),
            ..Default::default()
        }
    }

    /// The Node the kubelet creates.
    pub fn to_node(&self) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                labels: Some(self.labels.clone()),
                // Attach and detach are the controller's (upstream's
                // enableControllerAttachDetach, the only value accepted).
                annotations: Some(
                    [(
                        crate::volumes::csi::attach::CONTROLLER_MANAGED.to_string(),
                        "true".to_string(),
                    )]
                    .into(),
                ),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                taints: (!self.taints.is_empty()).then(|| self.taints.clone()),
                pod_cidr: (!self.pod_cidr.is_empty()).then(|| self.pod_cidr.clone()),
                pod_cidrs: (!self.pod_cidr.is_empty()).then(|| vec![self.pod_cidr.clone()]),
                provider_id: (!self.provider_id.is_empty()).then(|| self.provider_id.clone()),
                ..Default::default()
            }),
            status: Some(self.base_status()),
        }
    }
}

/// A registered node: its uid (for the Lease's ownerReference) and the
/// conditions it had (so transition times survive a restart).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Registered {
    /// `metadata.uid`.
    pub uid: String,
    /// `status.conditions` as found.
    pub conditions: Vec<NodeCondition>,
}

fn registered(n: Node) -> Registered {
    Registered {
        uid: n.metadata.uid.unwrap_or_default(),
        conditions: n.status.and_then(|s| s.conditions).unwrap_or_default(),
    }
}

/// Creates the Node, or reconciles the existing one (labels the kubelet
/// owns are re-applied with a strategic merge patch; everything else is
/// kept).
pub async fn register(client: &Client, desc: &NodeDesc) -> Result<Registered, kube::Error> {
    let api: Api<Node> = Api::all(client.clone());
    match api.create(&PostParams::default(), &desc.to_node()).await {
        Ok(n) => Ok(registered(n)),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let patch = serde_json::json!({"metadata": {
                "labels": desc.labels,
                "annotations": {crate::volumes::csi::attach::CONTROLLER_MANAGED: "true"},
            }});
            let n = api
                .patch(
                    &desc.name,
                    &PatchParams::default(),
                    &Patch::Strategic(&patch),
                )
                .await?;
            Ok(registered(n))
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_object() {
        let desc = NodeDesc {
            name: "n1".into(),
            labels: default_labels("n1", "linux", "amd64"),
            taints: vec![Taint {
                key: "k".into(),
                effect: "NoSchedule".into(),
                ..Default::default()
            }],
            capacity: [("cpu".to_string(), Quantity::from_units(4))].into(),
            allocatable: [("cpu".to_string(), Quantity::from_milli(3900))].into(),
            ip: "10.0.0.1".into(),
            pod_cidr: String::new(),
            provider_id: String::new(),
            node_info: NodeSystemInfo::default(),
            port: 10250,
        };
        let n = desc.to_node();
        let labels = n.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["kubernetes.io/hostname"], "n1");
        assert_eq!(
            n.metadata.annotations.as_ref().unwrap()
                ["volumes.kubernetes.io/controller-managed-attach-detach"],
            "true"
        );
        assert_eq!(labels["beta.kubernetes.io/arch"], "amd64");
        let spec = n.spec.unwrap();
        assert_eq!(spec.taints.unwrap()[0].key, "k");
        assert_eq!(spec.pod_cidr, None);
        let st = n.status.unwrap();
        assert_eq!(st.allocatable.unwrap()["cpu"].0, "3900m");
        let addrs = st.addresses.unwrap();
        assert_eq!(addrs[0].type_, "InternalIP");
        assert_eq!(addrs[1].address, "n1");
        assert_eq!(
            st.daemon_endpoints.unwrap().kubelet_endpoint.unwrap().port,
            10250
        );
    }
}
