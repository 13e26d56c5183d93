//! Devices of simulated nodes (`--sim-resource-slice FILE`): each sim node
//! publishes the ResourceSlice of FILE as its own, as a DRA driver's
//! kubelet plugin does for a real node — `spec.nodeName` is the node, the
//! pool is named after the node (generation 1, one slice), the slice is
//! `<node>-<driver>`. The scheduler's DynamicResources plugin then
//! allocates those devices to pods' ResourceClaims as on a GPU cluster.
//!
//! Slices are written by server-side apply (field manager `rkube-kubelet`),
//! so a restart rewrites the same objects; a failed write is retried until
//! it lands.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::resource::v1 as api;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};

/// Field manager of the slices' server-side apply.
const FIELD_MANAGER: &str = "rkube-kubelet";

/// A slice every sim node copies.
#[derive(Debug, Clone, PartialEq)]
pub struct SliceTemplate {
    /// The file it was read from.
    pub file: String,
    slice: api::ResourceSlice,
}

impl SliceTemplate {
    /// Reads and validates a ResourceSlice file (errors name the file and
    /// field, as for cluster files).
    pub fn load(path: &Path) -> Result<Self, String> {
        let file = path.display().to_string();
        let text = rkube_util::file::read_text(path, rkube_util::file::CONFIG_MAX_BYTES)
            .map_err(|e| format!("{file}: reading: {e}"))?;
        Self::parse(&file, &text)
    }

    /// Parses a ResourceSlice (YAML or JSON).
    pub fn parse(file: &str, text: &str) -> Result<Self, String> {
        let value: serde_json::Value = serde_yaml_ng::from_str(text)
            .map_err(|e| format!("{file}: not a ResourceSlice: {e}"))?;
        let kind = value.get("kind").and_then(|k| k.as_str()).unwrap_or("");
        let version = value
            .get("apiVersion")
            .and_then(|k| k.as_str())
            .unwrap_or("");
        if kind != "ResourceSlice" || version != "resource.k8s.io/v1" {
            return Err(format!(
                "{file}: kind/apiVersion: want ResourceSlice resource.k8s.io/v1, got {kind:?} {version:?}"
            ));
        }
        let slice: api::ResourceSlice = serde_json::from_value(value)
            .map_err(|e| format!("{file}: not a ResourceSlice: {e}"))?;
        let spec = &slice.spec;
        if spec.all_nodes.is_some()
            || spec.node_selector.is_some()
            || spec.per_device_node_selection.is_some()
        {
            return Err(format!(
                "{file}: spec: a sim node's slice belongs to the node (spec.nodeName is set per node); remove allNodes, nodeSelector and perDeviceNodeSelection"
            ));
        }
        if spec.devices.as_ref().is_none_or(|d| d.is_empty()) {
            return Err(format!(
                "{file}: spec.devices: Required value: the devices each node publishes"
            ));
        }
        let driver = &slice.spec.driver;
        if driver.is_empty()
            || driver.len() > 63
            || rkube_model::convert::validate_subdomain_name(driver, "spec.driver").is_err()
        {
            return Err(format!(
                "{file}: spec.driver: Invalid value: {driver:?}: a driver name is a lowercase DNS subdomain of at most 63 characters (e.g. gpu.example.com)"
            ));
        }
        let t = SliceTemplate {
            file: file.to_string(),
            slice,
        };
        // The same checks as a cluster file's slice, on a sample node.
        rkube_model::dra::resource_slice(&t.for_node("sim-node"))
            .map_err(|e| format!("{file}: {}: {}", e.path, e.message))?;
        Ok(t)
    }

    /// The slice node `node` publishes.
    pub fn for_node(&self, node: &str) -> api::ResourceSlice {
        let mut s = self.slice.clone();
        let driver = s.spec.driver.clone();
        s.metadata = Default::default();
        s.metadata.name = Some(slice_name(node, &driver));
        s.spec.node_name = Some(node.to_string());
        s.spec.pool = api::ResourcePool {
            name: node.to_string(),
            generation: 1,
            resource_slice_count: 1,
        };
        s
    }
}

/// `<node>-<driver>`, cut to the 253 characters of an object name.
fn slice_name(node: &str, driver: &str) -> String {
    let mut name = format!("{node}-{driver}");
    name.truncate(253);
    name.trim_end_matches(['-', '.']).to_string()
}

/// Publishes every node's slices, retrying each until the API server takes
/// it; at most `concurrency` writes in flight. Then idles (the agent's
/// task set treats an ended task as a failure).
pub async fn publish(client: Client, slices: Vec<api::ResourceSlice>, concurrency: usize) {
    publish_all(client, slices, concurrency).await;
    std::future::pending::<()>().await
}

async fn publish_all(client: Client, slices: Vec<api::ResourceSlice>, concurrency: usize) {
    let api: Api<api::ResourceSlice> = Api::all(client);
    let limit = Arc::new(tokio::sync::Semaphore::new(concurrency.max(1)));
    let mut tasks = tokio::task::JoinSet::new();
    for slice in slices {
        let api = api.clone();
        let limit = limit.clone();
        tasks.spawn(async move {
            let name = slice.metadata.name.clone().unwrap_or_default();
            let params = PatchParams::apply(FIELD_MANAGER).force();
            let mut wait = Duration::from_millis(500);
            loop {
                let result = {
                    let _permit = limit.acquire().await;
                    api.patch(&name, &params, &Patch::Apply(&slice)).await
                };
                match result {
                    Ok(_) => {
                        tracing::debug!(slice = %name, "published ResourceSlice");
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(slice = %name, error = %e, "publishing ResourceSlice failed; retrying");
                        tokio::time::sleep(wait).await;
                        wait = (wait * 2).min(Duration::from_secs(30));
                    }
                }
            }
        });
    }
    while tasks.join_next().await.is_some() {}
}

#[cfg(test)]
mod tests {
    use super::*;

    const GPUS: &str = r#"
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: ignored}
spec:
  driver: gpu.example.com
  pool: {name: ignored, generation: 7, resourceSliceCount: 1}
  nodeName: ignored
  devices:
  - {name: gpu-0, attributes: {model: {string: h100}}, capacity: {memory: {value: 80Gi}}}
  - {name: gpu-1, attributes: {model: {string: h100}}, capacity: {memory: {value: 80Gi}}}
"#;

    #[test]
    fn each_node_publishes_its_own_pool() {
        let t = SliceTemplate::parse("gpus.yaml", GPUS).unwrap();
        let s = t.for_node("sim-node-00003");
        assert_eq!(
            s.metadata.name.as_deref(),
            Some("sim-node-00003-gpu.example.com")
        );
        assert_eq!(s.spec.node_name.as_deref(), Some("sim-node-00003"));
        assert_eq!(s.spec.pool.name, "sim-node-00003");
        assert_eq!(s.spec.pool.generation, 1);
        assert_eq!(s.spec.devices.as_ref().unwrap().len(), 2);
        let model = rkube_model::dra::resource_slice(&s).unwrap();
        assert_eq!(model.devices.len(), 2);
    }

    #[test]
    fn bad_slices_are_refused_naming_file_and_field() {
        for (text, needle) in [
            ("kind: Node\napiVersion: v1\n", "want ResourceSlice"),
            (
                "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {name: x}\nspec: {driver: d.example.com, pool: {name: p, generation: 1, resourceSliceCount: 1}, allNodes: true, devices: [{name: a}]}\n",
                "remove allNodes",
            ),
            (
                "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {name: x}\nspec: {driver: d.example.com, pool: {name: p, generation: 1, resourceSliceCount: 1}, nodeName: n}\n",
                "spec.devices: Required value",
            ),
            (
                "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {name: x}\nspec: {driver: 'not a driver', pool: {name: p, generation: 1, resourceSliceCount: 1}, nodeName: n, devices: [{name: a}]}\n",
                "spec.driver",
            ),
        ] {
            let e = SliceTemplate::parse("f.yaml", text).unwrap_err();
            assert!(e.starts_with("f.yaml: "), "{e}");
            assert!(e.contains(needle), "{e} lacks {needle}");
        }
    }

    #[test]
    fn names_fit_an_object_name() {
        let long = "n".repeat(250);
        let name = slice_name(&long, "gpu.example.com");
        assert!(name.len() <= 253);
        assert!(!name.ends_with('-') && !name.ends_with('.'));
    }
}
