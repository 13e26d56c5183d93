//! The claims of each container as the pod-resources API reports them
//! (upstream's `GetDynamicResources`), beside what another source (the
//! device manager) reports.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod};

use super::state::ClaimState;
use super::Manager;
use crate::podresources::v1;
use crate::podresources::{ContainerAssignment, PodAssignment, ResourcesSource};

/// `inner`'s answers with the containers' claims added.
pub struct WithClaims {
    /// What the other managers report.
    pub inner: Arc<dyn ResourcesSource>,
    /// The DRA manager.
    pub dra: Arc<Manager>,
}

/// One container claim's entry: a resource per prepared device, with the
/// CDI devices of that device and of the driver's devices before it in
/// the same claim, as upstream's list accumulates them.
pub fn dynamic_resource(st: &ClaimState) -> v1::DynamicResource {
    let mut claim_resources = Vec::new();
    for (driver, ds) in st.driver_state.iter().flatten() {
        let mut cdi = Vec::new();
        for d in ds.devices.iter().flatten() {
            cdi.extend(
                d.cdi_device_ids
                    .iter()
                    .flatten()
                    .map(|name| v1::CdiDevice { name: name.clone() }),
            );
            claim_resources.push(v1::ClaimResource {
                cdi_devices: cdi.clone(),
                driver_name: driver.clone(),
                pool_name: d.pool_name.clone(),
                device_name: d.device_name.clone(),
                share_id: d.share_id.clone(),
            });
        }
    }
    v1::DynamicResource {
        claim_name: st.claim_name.clone(),
        claim_namespace: st.namespace.clone(),
        claim_resources,
    }
}

impl ResourcesSource for WithClaims {
    fn update_allocated_devices(&self) {
        self.inner.update_allocated_devices();
    }

    fn container(&self, pod: &Pod, container: &Container) -> ContainerAssignment {
        let mut a = self.inner.container(pod, container);
        a.dynamic_resources = self
            .dra
            .container_claims(pod, container)
            .iter()
            .map(dynamic_resource)
            .collect();
        a
    }

    fn pod_level_resource_managers(&self) -> bool {
        self.inner.pod_level_resource_managers()
    }

    fn pod(&self, pod: &Pod) -> PodAssignment {
        self.inner.pod(pod)
    }

    fn allocatable(&self) -> v1::AllocatableResourcesResponse {
        self.inner.allocatable()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dra::state::{Device, DriverState};
    use std::collections::BTreeMap;

    #[test]
    fn each_device_is_a_resource_of_its_claim() {
        let dev = |name: &str, cdi: &str| Device {
            pool_name: "node-1".into(),
            device_name: name.into(),
            share_id: None,
            request_names: Some(vec!["r".into()]),
            cdi_device_ids: Some(vec![cdi.into()]),
        };
        let st = ClaimState {
            claim_name: "c".into(),
            namespace: "ns".into(),
            driver_state: Some(BTreeMap::from([(
                "gpu.example.com".to_string(),
                DriverState {
                    devices: Some(vec![dev("d0", "v/c=d0"), dev("d1", "v/c=d1")]),
                    skip_node_operations: None,
                },
            )])),
            ..Default::default()
        };
        let r = dynamic_resource(&st);
        assert_eq!(
            (r.claim_name.as_str(), r.claim_namespace.as_str()),
            ("c", "ns")
        );
        let names = |i: usize| -> Vec<String> {
            r.claim_resources[i]
                .cdi_devices
                .iter()
                .map(|c| c.name.clone())
                .collect()
        };
        assert_eq!(r.claim_resources.len(), 2);
        assert_eq!(r.claim_resources[1].device_name, "d1");
        assert_eq!(names(0), ["v/c=d0"]);
        assert_eq!(names(1), ["v/c=d0", "v/c=d1"]);
    }
}
