//! The resources each pod was admitted (allocated) and started or resized
//! (actuated) with, kept across restarts in upstream's two checkpoint
//! files under the root directory, `allocated_pods_state` (upstream's
//! allocation manager) and `actuated_pods_state` (its runtime manager), in
//! upstream's format, so that either kubelet can follow the other on a
//! node without re-admitting a pod at resources it was never given or
//! resizing (or restarting) a container that already has them.
//!
//! * [`checkpoint`]: the file format (JSON with a checksum), pure;
//! * [`state`]: one file's entries in memory, written when they change.

pub mod checkpoint;
pub mod state;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::{Deserialize, Serialize};

pub use state::State;

/// The file the allocated resources are kept in.
pub const ALLOCATED_FILE: &str = "allocated_pods_state";
/// The file the actuated resources are kept in.
pub const ACTUATED_FILE: &str = "actuated_pods_state";

/// A container's (or the pod's) resources as upstream's checkpoint holds
/// them: `v1.ResourceRequirements` in Go's field order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Requirements {
    /// `limits`, by resource name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub limits: BTreeMap<String, String>,
    /// `requests`, by resource name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub requests: BTreeMap<String, String>,
    /// `claims`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claims: Vec<Claim>,
}

/// One of [`Requirements::claims`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    /// `name`.
    pub name: String,
    /// `request`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub request: String,
}

/// One pod's entry (upstream's `state.PodResourceInfo`; its fields carry
/// no JSON tags, so they are written under their Go names).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodResourceInfo {
    /// The resizable containers' resources, by container name.
    #[serde(rename = "ContainerResources", default)]
    pub containers: Option<BTreeMap<String, Requirements>>,
    /// `spec.resources`, when the pod has them.
    #[serde(rename = "PodLevelResources", default)]
    pub pod_level: Option<Requirements>,
    /// The memory-backed emptyDirs' size limits (upstream records them only
    /// with an alpha gate, which is off).
    #[serde(rename = "EmptyDirVolumeLimits", default)]
    pub empty_dir_limits: Option<BTreeMap<String, Option<String>>>,
}

impl Requirements {
    /// `r` as the checkpoint holds it.
    pub fn of(r: Option<&ResourceRequirements>) -> Requirements {
        let list = |m: Option<&BTreeMap<String, Quantity>>| {
            m.into_iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.0.clone()))
                .collect()
        };
        Requirements {
            limits: list(r.and_then(|r| r.limits.as_ref())),
            requests: list(r.and_then(|r| r.requests.as_ref())),
            claims: r
                .and_then(|r| r.claims.as_ref())
                .into_iter()
                .flatten()
                .map(|c| Claim {
                    name: c.name.clone(),
                    request: c.request.clone().unwrap_or_default(),
                })
                .collect(),
        }
    }

    /// Back as the API's type.
    pub fn to_api(&self) -> ResourceRequirements {
        let list = |m: &BTreeMap<String, String>| {
            (!m.is_empty()).then(|| {
                m.iter()
                    .map(|(k, v)| (k.clone(), Quantity(v.clone())))
                    .collect()
            })
        };
        ResourceRequirements {
            limits: list(&self.limits),
            requests: list(&self.requests),
            claims: (!self.claims.is_empty()).then(|| {
                self.claims
                    .iter()
                    .map(|c| k8s_openapi::api::core::v1::ResourceClaim {
                        name: c.name.clone(),
                        request: (!c.request.is_empty()).then(|| c.request.clone()),
                    })
                    .collect()
            }),
        }
    }
}

/// What upstream records of `pod` (`allocation.ResourceInfoForPod` with
/// v1.37's default gates): every init container's (the gate letting init
/// containers resize is locked on) and container's resources, and the
/// pod-level resources; ephemeral containers are not recorded.
pub fn info_for_pod(pod: &Pod) -> PodResourceInfo {
    let spec = pod.spec.as_ref();
    let containers = spec
        .into_iter()
        .flat_map(|s| s.init_containers.iter().flatten().chain(&s.containers))
        .map(|c: &Container| (c.name.clone(), Requirements::of(c.resources.as_ref())))
        .collect();
    PodResourceInfo {
        containers: Some(containers),
        pod_level: spec
            .and_then(|s| s.resources.as_ref())
            .map(|r| Requirements::of(Some(r))),
        empty_dir_limits: None,
    }
}

/// `pod` with the resources `info` records (the pod as allocated): each
/// recorded container's, and the pod-level ones when recorded. Containers
/// the record does not name keep the spec's.
pub fn with_info(pod: &Pod, info: &PodResourceInfo) -> Pod {
    let mut pod = pod.clone();
    let Some(spec) = pod.spec.as_mut() else {
        return pod;
    };
    let recorded = info.containers.as_ref();
    for c in spec
        .init_containers
        .iter_mut()
        .flatten()
        .chain(spec.containers.iter_mut())
    {
        if let Some(r) = recorded.and_then(|m| m.get(&c.name)) {
            if Requirements::of(c.resources.as_ref()) != *r {
                c.resources = Some(r.to_api());
            }
        }
    }
    if let Some(p) = &info.pod_level {
        if Requirements::of(spec.resources.as_ref()) != *p {
            spec.resources = Some(p.to_api());
        }
    }
    pod
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_pod_round_trips_through_its_record() {
        let p = pod(serde_json::json!({
            "metadata": {"uid": "u"},
            "spec": {
                "resources": {"limits": {"cpu": "2"}},
                "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "1"}}}],
                "containers": [
                    {"name": "c", "resources": {"limits": {"memory": "1Gi"}, "claims": [{"name": "g", "request": "r"}]}},
                    {"name": "plain"}
                ],
                "ephemeralContainers": [{"name": "dbg", "resources": {"limits": {"cpu": "1"}}}]
            }
        }));
        let info = info_for_pod(&p);
        let names: Vec<_> = info.containers.as_ref().unwrap().keys().cloned().collect();
        assert_eq!(names, ["c", "i", "plain"]);
        assert_eq!(info.pod_level.as_ref().unwrap().limits["cpu"], "2");
        // A resize in the spec; the record puts the allocation back.
        let mut resized = p.clone();
        let spec = resized.spec.as_mut().unwrap();
        spec.containers[0].resources = Some(ResourceRequirements {
            limits: Some([("memory".to_string(), Quantity("2Gi".into()))].into()),
            ..Default::default()
        });
        spec.resources = None;
        let back = with_info(&resized, &info);
        assert_eq!(back.spec, p.spec);
        assert_eq!(info_for_pod(&back), info);
    }
}
