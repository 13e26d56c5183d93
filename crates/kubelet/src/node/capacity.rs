//! This process's Nodes as the API server stores them, followed through
//! one watch: the capacity other clients add (extended resources patched
//! into `status.capacity`) for the heartbeat, and the labels, taints and
//! allocatable the kubelet admits pods against ([`NodeBoard`]).
//!
//! [`NodeCapacity`] is a Node as the kubelet reads it: name,
//! resourceVersion, labels, taints, `status.capacity` and
//! `status.allocatable`, every other field skipped while parsing. A sim process hosting thousands of nodes sees every status
//! update of every one of them on that watch (and in every status PATCH
//! answer); decoding them as full Nodes (conditions, images,
//! managedFields) cost enough CPU to delay lease renewals past their 40 s
//! lease at 2,000 nodes.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client};
use serde::{Deserialize, Deserializer, Serialize};
use tokio::sync::mpsc;

/// A Node reduced to what the heartbeat and admission need.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct NodeCapacity {
    /// Name, resourceVersion (the watcher needs it) and labels only.
    #[serde(deserialize_with = "name_version_labels")]
    pub metadata: ObjectMeta,
    /// `spec.taints`.
    #[serde(default)]
    pub spec: Option<TaintsSpec>,
    /// `status.capacity` and `status.allocatable`.
    #[serde(default)]
    pub status: Option<CapacityStatus>,
}

/// `spec` with `taints` and `podCIDRs` alone.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct TaintsSpec {
    /// The Node's taints.
    #[serde(default)]
    pub taints: Option<Vec<Taint>>,
    /// The pod CIDRs the controller-manager gave the Node.
    #[serde(default, rename = "podCIDRs", skip_serializing_if = "Option::is_none")]
    pub pod_cidrs: Option<Vec<String>>,
}

/// `status` with `capacity` and `allocatable` alone.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct CapacityStatus {
    /// The Node's capacity as stored.
    #[serde(default)]
    pub capacity: Option<BTreeMap<String, KQuantity>>,
    /// The Node's allocatable as stored.
    #[serde(default)]
    pub allocatable: Option<BTreeMap<String, KQuantity>>,
}

impl NodeCapacity {
    /// The stored capacity, if the Node has a status.
    pub fn capacity(self) -> Option<BTreeMap<String, KQuantity>> {
        self.status.and_then(|s| s.capacity)
    }

    /// A Node with what was read (for the scheduler's predicates).
    pub fn to_node(&self) -> Node {
        Node {
            metadata: self.metadata.clone(),
            spec: Some(NodeSpec {
                taints: self.spec.as_ref().and_then(|s| s.taints.clone()),
                ..Default::default()
            }),
            status: Some(NodeStatus {
                capacity: self.status.as_ref().and_then(|s| s.capacity.clone()),
                allocatable: self.status.as_ref().and_then(|s| s.allocatable.clone()),
                ..Default::default()
            }),
        }
    }
}

fn name_version_labels<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Meta {
        #[serde(default)]
        name: Option<String>,
        #[serde(default)]
        resource_version: Option<String>,
        #[serde(default)]
        labels: Option<BTreeMap<String, String>>,
    }
    let m = Meta::deserialize(d)?;
    Ok(ObjectMeta {
        name: m.name,
        resource_version: m.resource_version,
        labels: m.labels,
        ..Default::default()
    })
}

/// The latest of each of this process's Nodes, as the watch saw them.
#[derive(Debug, Default)]
pub struct NodeBoard(RwLock<HashMap<String, Arc<NodeCapacity>>>);

impl NodeBoard {
    /// Node `name` as last seen (`None` before the watch saw it).
    pub fn get(&self, name: &str) -> Option<Arc<NodeCapacity>> {
        self.0
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    fn set(&self, name: &str, node: NodeCapacity) {
        self.0
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_string(), Arc::new(node));
    }
}

impl k8s_openapi::Resource for NodeCapacity {
    const API_VERSION: &'static str = "v1";
    const GROUP: &'static str = "";
    const KIND: &'static str = "Node";
    const VERSION: &'static str = "v1";
    const URL_PATH_SEGMENT: &'static str = "nodes";
    type Scope = k8s_openapi::ClusterResourceScope;
}

impl k8s_openapi::ListableResource for NodeCapacity {
    const LIST_KIND: &'static str = "NodeList";
}

impl k8s_openapi::Metadata for NodeCapacity {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Watches this process's Nodes (`names`: name → index), keeps `board` at
/// the latest of each and sends (index, capacity) whenever one changes, as
/// upstream's kubelet reads its Node before each status update.
pub async fn watch(
    client: Client,
    names: HashMap<String, usize>,
    board: Arc<NodeBoard>,
    tx: mpsc::Sender<(usize, BTreeMap<String, KQuantity>)>,
) {
    let api: Api<NodeCapacity> = Api::all(client);
    let cfg = match names.keys().next() {
        Some(only) if names.len() == 1 => {
            watcher::Config::default().fields(&format!("metadata.name={only}"))
        }
        _ => watcher::Config::default(),
    };
    let mut stream = watcher::watcher(api, cfg)
        .default_backoff()
        .applied_objects()
        .boxed();
    while let Some(ev) = stream.next().await {
        let Ok(node) = ev else { continue };
        let Some((name, &i)) = node
            .metadata
            .name
            .as_ref()
            .and_then(|n| names.get_key_value(n))
        else {
            continue;
        };
        board.set(name, node.clone());
        let Some(cap) = node.capacity() else {
            continue;
        };
        if tx.send((i, cap)).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_full_node_reads_as_name_version_and_capacity() {
        let node = json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {
                "name": "n1", "resourceVersion": "42", "uid": "u",
                "labels": {"kubernetes.io/hostname": "n1"},
                "managedFields": [{"manager": "kubelet", "operation": "Update",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}}],
            },
            "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}],
                     "podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24", "fd00::/64"]},
            "status": {
                "capacity": {"cpu": "4", "example.com/gpu": "2"},
                "allocatable": {"cpu": "3900m"},
                "conditions": [{"type": "Ready", "status": "True"}],
                "images": [{"names": ["a"], "sizeBytes": 1}],
            },
        });
        let n: NodeCapacity = serde_json::from_value(node).unwrap();
        assert_eq!(n.metadata.name.as_deref(), Some("n1"));
        assert_eq!(
            n.spec.as_ref().unwrap().pod_cidrs.as_deref(),
            Some(&["10.244.1.0/24".to_string(), "fd00::/64".to_string()][..])
        );
        assert_eq!(n.metadata.resource_version.as_deref(), Some("42"));
        assert!(n.metadata.uid.is_none());
        assert!(n.metadata.managed_fields.is_none());
        let full = n.to_node();
        assert_eq!(
            full.metadata.labels.as_ref().unwrap()["kubernetes.io/hostname"],
            "n1"
        );
        assert_eq!(
            full.spec.as_ref().unwrap().taints.as_ref().unwrap()[0].key,
            "k"
        );
        let status = full.status.unwrap();
        assert_eq!(
            status.allocatable.unwrap()["cpu"],
            KQuantity("3900m".into())
        );
        assert!(status.conditions.is_none() && status.images.is_none());
        let cap = n.capacity().unwrap();
        assert_eq!(cap.len(), 2);
        assert_eq!(cap["example.com/gpu"], KQuantity("2".into()));
    }

    #[test]
    fn a_node_without_status_has_no_capacity() {
        let n: NodeCapacity = serde_json::from_value(json!({"metadata": {"name": "n2"}})).unwrap();
        assert!(n.capacity().is_none());
        let n: NodeCapacity =
            serde_json::from_value(json!({"metadata": {"name": "n3"}, "status": {}})).unwrap();
        assert!(n.capacity().is_none());
    }

    #[test]
    fn the_api_path_is_the_nodes_collection() {
        use kube::Resource;
        assert_eq!(NodeCapacity::url_path(&(), None), "/api/v1/nodes");
        assert_eq!(NodeCapacity::kind(&()), "Node");
    }
}
