//! What a registered CSI driver adds to the node, as upstream's
//! `nodeinfomanager`: the driver's node id in the Node's
//! `csi.volume.kubernetes.io/nodeid` annotation (a JSON map by driver), its
//! topology segments as Node labels (a value that differs from an existing
//! label is refused), and a `CSINode` entry (name, node id, sorted topology
//! keys, the attach limit as `allocatable.count`) in the `CSINode` named
//! after the node and owned by it.
//!
//! The changes are computed here (pure) and applied by [`install`] and
//! [`uninstall`].

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::{CSINode, CSINodeDriver, CSINodeSpec, VolumeNodeResources};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};

/// The Node annotation of the drivers' node ids.
pub const NODE_ID_ANNOTATION: &str = "csi.volume.kubernetes.io/nodeid";

/// The annotation with `driver` set to `node_id` (`None`: removed), from
/// the current one; `Ok(None)` when unchanged.
pub fn node_ids(
    current: Option<&str>,
    driver: &str,
    node_id: Option<&str>,
) -> Result<Option<String>, String> {
    let mut m: BTreeMap<String, String> = match current {
        Some(s) if !s.is_empty() => serde_json::from_str(s).map_err(|e| {
            format!("failed to parse node's {NODE_ID_ANNOTATION} annotation value ({s:?}) err={e}")
        })?,
        _ => BTreeMap::new(),
    };
    let before = m.clone();
    match node_id {
        Some(id) => {
            m.insert(driver.to_string(), id.to_string());
        }
        None => {
            m.remove(driver);
        }
    }
    if m == before {
        return Ok(None);
    }
    serde_json::to_string(&m)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// The labels to add for `topology`, refusing a collision with `labels`
/// (upstream's `updateTopologyLabels`).
pub fn topology_labels(
    labels: &BTreeMap<String, String>,
    topology: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, String> {
    let mut add = BTreeMap::new();
    for (k, v) in topology {
        match labels.get(k) {
            Some(cur) if cur == v => {}
            Some(cur) => {
                return Err(format!(
                    "detected topology value collision: driver reported {k:?}:{v:?} but existing label is {k:?}:{cur:?}"
                ))
            }
            None => {
                add.insert(k.clone(), v.clone());
            }
        }
    }
    Ok(add)
}

/// The CSINode's drivers with `driver` installed; `None` when it is
/// there already as it would be (upstream's `installDriverToCSINode`).
pub fn with_driver(
    drivers: &[CSINodeDriver],
    driver: &str,
    node_id: &str,
    max_volumes: i64,
    topology: &BTreeMap<String, String>,
) -> Option<Vec<CSINodeDriver>> {
    let keys: Vec<String> = topology.keys().cloned().collect();
    let count = (max_volumes > 0).then(|| max_volumes.min(i64::from(i32::MAX)) as i32);
    let want = CSINodeDriver {
        name: driver.to_string(),
        node_id: node_id.to_string(),
        topology_keys: Some(keys.clone()),
        allocatable: count.map(|c| VolumeNodeResources { count: Some(c) }),
    };
    let unchanged = drivers.iter().any(|d| {
        let mut have = d.topology_keys.clone().unwrap_or_default();
        have.sort();
        d.name == driver
            && d.node_id == node_id
            && have == keys
            && d.allocatable.as_ref().and_then(|a| a.count) == count
    });
    if unchanged {
        return None;
    }
    let mut out: Vec<CSINodeDriver> = drivers
        .iter()
        .filter(|d| d.name != driver)
        .cloned()
        .collect();
    out.push(want);
    Some(out)
}

fn not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// Adds the driver to the Node and its CSINode.
pub async fn install(
    client: &Client,
    node_name: &str,
    driver: &str,
    node_id: &str,
    max_volumes: i64,
    topology: &BTreeMap<String, String>,
) -> Result<(), String> {
    if node_id.is_empty() {
        return Err("error adding CSI driver node info: driverNodeID must not be empty".into());
    }
    let nodes: Api<Node> = Api::all(client.clone());
    let node = nodes.get(node_name).await.map_err(|e| {
        format!(
            "error updating Node object with CSI driver node info: {}",
            rkube_daemon::client::api_message(&e)
        )
    })?;
    let annotation = node_ids(
        node.annotations()
            .get(NODE_ID_ANNOTATION)
            .map(String::as_str),
        driver,
        Some(node_id),
    )
    .map_err(|e| format!("error updating Node object with CSI driver node info: {e}"))?;
    let labels = topology_labels(node.labels(), topology)
        .map_err(|e| format!("error updating Node object with CSI driver node info: {e}"))?;
    if annotation.is_some() || !labels.is_empty() {
        let mut meta = serde_json::Map::new();
        if let Some(a) = annotation {
            meta.insert(
                "annotations".into(),
                serde_json::json!({ NODE_ID_ANNOTATION: a }),
            );
        }
        if !labels.is_empty() {
            meta.insert(
                "labels".into(),
                serde_json::to_value(&labels).unwrap_or_default(),
            );
        }
        nodes
            .patch(
                node_name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({ "metadata": meta })),
            )
            .await
            .map_err(|e| {
                format!(
                    "error updating Node object with CSI driver node info: {}",
                    rkube_daemon::client::api_message(&e)
                )
            })?;
    }
    let csinode = ensure_csinode(client, &node).await?;
    let drivers = csinode.spec.drivers.clone();
    if let Some(new) = with_driver(&drivers, driver, node_id, max_volumes, topology) {
        let mut updated = csinode;
        updated.spec.drivers = new;
        Api::<CSINode>::all(client.clone())
            .replace(node_name, &PostParams::default(), &updated)
            .await
            .map_err(|e| {
                format!(
                    "error updating CSINode object with CSI driver node info: {}",
                    rkube_daemon::client::api_message(&e)
                )
            })?;
    }
    Ok(())
}

/// The node's CSINode, made (owned by the Node) when missing; one owned by
/// another Node of the same name is deleted (upstream's
/// `ensureNodeOwnsCSINode`).
pub async fn ensure_csinode(client: &Client, node: &Node) -> Result<CSINode, String> {
    let api: Api<CSINode> = Api::all(client.clone());
    let name = node.name_any();
    let uid = node.uid().unwrap_or_default();
    match api.get(&name).await {
        Ok(c) => {
            let owned = c
                .owner_references()
                .iter()
                .any(|o| o.kind == "Node" && o.uid == uid);
            if !owned && !c.owner_references().is_empty() {
                let _ = api.delete(&name, &Default::default()).await;
                return Err(format!(
                    "CSINode {name:?} was owned by a different node, deleted it"
                ));
            }
            Ok(c)
        }
        Err(e) if not_found(&e) => {
            let c = CSINode {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    owner_references: Some(vec![OwnerReference {
                        api_version: "v1".into(),
                        kind: "Node".into(),
                        name: name.clone(),
                        uid,
                        ..Default::default()
                    }]),
                    ..Default::default()
                },
                spec: CSINodeSpec { drivers: vec![] },
                ..Default::default()
            };
            api.create(&PostParams::default(), &c).await.map_err(|e| {
                format!(
                    "error creating CSINode {name}: {}",
                    rkube_daemon::client::api_message(&e)
                )
            })
        }
        Err(e) => Err(format!(
            "error getting CSINode {name}: {}",
            rkube_daemon::client::api_message(&e)
        )),
    }
}

/// Removes the driver from the CSINode and the Node's annotation.
pub async fn uninstall(client: &Client, node_name: &str, driver: &str) -> Result<(), String> {
    let api: Api<CSINode> = Api::all(client.clone());
    match api.get(node_name).await {
        Ok(mut c) if c.spec.drivers.iter().any(|d| d.name == driver) => {
            c.spec.drivers.retain(|d| d.name != driver);
            api.replace(node_name, &PostParams::default(), &c)
                .await
                .map_err(|e| {
                    format!(
                        "error uninstalling CSI driver from CSINode object {}",
                        rkube_daemon::client::api_message(&e)
                    )
                })?;
        }
        Ok(_) => {}
        Err(e) if not_found(&e) => {}
        Err(e) => return Err(rkube_daemon::client::api_message(&e)),
    }
    let nodes: Api<Node> = Api::all(client.clone());
    let node = nodes
        .get(node_name)
        .await
        .map_err(|e| rkube_daemon::client::api_message(&e))?;
    if let Some(a) = node_ids(
        node.annotations()
            .get(NODE_ID_ANNOTATION)
            .map(String::as_str),
        driver,
        None,
    )? {
        let value = if a == "{}" {
            serde_json::Value::Null
        } else {
            a.into()
        };
        nodes
            .patch(
                node_name,
                &PatchParams::default(),
                &Patch::Merge(
                    serde_json::json!({"metadata": {"annotations": { NODE_ID_ANNOTATION: value }}}),
                ),
            )
            .await
            .map_err(|e| {
                format!(
                    "error removing CSI driver node info from Node object {}",
                    rkube_daemon::client::api_message(&e)
                )
            })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn node_ids_are_one_json_map_by_driver() {
        assert_eq!(
            node_ids(None, "a.csi", Some("n1")).unwrap().as_deref(),
            Some(r#"{"a.csi":"n1"}"#)
        );
        assert_eq!(
            node_ids(Some(r#"{"a.csi":"n1"}"#), "b.csi", Some("x"))
                .unwrap()
                .as_deref(),
            Some(r#"{"a.csi":"n1","b.csi":"x"}"#)
        );
        assert_eq!(
            node_ids(Some(r#"{"a.csi":"n1"}"#), "a.csi", Some("n1")).unwrap(),
            None
        );
        assert_eq!(
            node_ids(Some(r#"{"a.csi":"n1"}"#), "a.csi", None)
                .unwrap()
                .as_deref(),
            Some("{}")
        );
        assert!(node_ids(Some("not json"), "a", Some("n"))
            .unwrap_err()
            .contains("failed to parse"));
    }

    #[test]
    fn topology_labels_never_overwrite_another_value() {
        let labels = map(&[("topology.x/zone", "z1")]);
        assert_eq!(
            topology_labels(
                &labels,
                &map(&[("topology.x/zone", "z1"), ("topology.x/node", "n1")])
            )
            .unwrap(),
            map(&[("topology.x/node", "n1")])
        );
        assert_eq!(
            topology_labels(&labels, &map(&[("topology.x/zone", "z2")])).unwrap_err(),
            r#"detected topology value collision: driver reported "topology.x/zone":"z2" but existing label is "topology.x/zone":"z1""#
        );
    }

    #[test]
    fn the_csinode_entry_is_replaced_only_when_it_differs() {
        let topo = map(&[("b", "2"), ("a", "1")]);
        let first = with_driver(&[], "d", "n1", 0, &topo).unwrap();
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].topology_keys, Some(vec!["a".into(), "b".into()]));
        assert_eq!(first[0].allocatable, None);
        assert_eq!(with_driver(&first, "d", "n1", 0, &topo), None);
        let limited = with_driver(&first, "d", "n1", 5, &topo).unwrap();
        assert_eq!(limited.len(), 1);
        assert_eq!(limited[0].allocatable.as_ref().unwrap().count, Some(5));
        let other = with_driver(&limited, "e", "id", 0, &BTreeMap::new()).unwrap();
        assert_eq!(other.len(), 2);
    }
}
