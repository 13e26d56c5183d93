//! The device manager as the pod-resources API reads it (upstream's
//! `containerDevicesFromResourceDeviceInstances`): one entry per device,
//! and per NUMA node of a device that has a topology.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};

use super::Manager;
use crate::podresources::v1;
use crate::podresources::{ContainerAssignment, ResourcesSource};

fn entries(devices: BTreeMap<String, BTreeMap<String, Vec<i64>>>) -> Vec<v1::ContainerDevices> {
    let mut out = Vec::new();
    for (resource, devs) in devices {
        for (id, nodes) in devs {
            if nodes.is_empty() {
                out.push(v1::ContainerDevices {
                    resource_name: resource.clone(),
                    device_ids: vec![id],
                    topology: None,
                });
                continue;
            }
            for n in nodes {
                out.push(v1::ContainerDevices {
                    resource_name: resource.clone(),
                    device_ids: vec![id.clone()],
                    topology: Some(v1::TopologyInfo {
                        nodes: vec![v1::NumaNode { id: n }],
                    }),
                });
            }
        }
    }
    out
}

impl ResourcesSource for Manager {
    fn container(&self, pod: &Pod, container: &Container) -> ContainerAssignment {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        ContainerAssignment {
            devices: entries(self.devices_of(uid, &container.name)),
            ..ContainerAssignment::default()
        }
    }

    fn allocatable(&self) -> v1::AllocatableResourcesResponse {
        v1::AllocatableResourcesResponse {
            devices: entries(self.allocatable_devices()),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_entry_per_device_and_numa_node() {
        let devs = BTreeMap::from([(
            "example.com/r".to_string(),
            BTreeMap::from([("a".to_string(), vec![]), ("b".to_string(), vec![0, 1])]),
        )]);
        let e = entries(devs);
        assert_eq!(e.len(), 3);
        assert_eq!(e[0].device_ids, vec!["a".to_string()]);
        assert!(e[0].topology.is_none());
        assert_eq!(e[2].topology.as_ref().unwrap().nodes[0].id, 1);
    }
}
