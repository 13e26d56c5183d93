//! The answers of the pod-resources API as pure functions of the active
//! pods and a [`ResourcesSource`] (upstream's `v1PodResourcesServer` with
//! its providers: `server_v1.go`, `types.go`). No I/O, no clock: the server
//! ([`super::server`]) only reads the pods and calls these.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod};

use super::v1;
use crate::pod::is_sidecar;

/// What the resource managers assigned to one container (upstream's
/// `DevicesProvider.GetDevices`, `CPUsProvider.GetCPUs`,
/// `MemoryProvider.GetMemory`, `DynamicResourcesProvider.GetDynamicResources`).
/// Empty is the answer of a node without device plugins, with the CPU
/// manager's `none` and the memory manager's `None` policy, and without
/// prepared ResourceClaims.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContainerAssignment {
    /// Devices from device plugins, per resource name.
    pub devices: Vec<v1::ContainerDevices>,
    /// Exclusive CPUs (the CPU manager's `static` policy; containers on the
    /// shared pool have none).
    pub cpu_ids: Vec<i64>,
    /// Memory and hugepages pinned to NUMA nodes (the memory manager's
    /// `Static` policy).
    pub memory: Vec<v1::ContainerMemory>,
    /// Devices of the container's prepared ResourceClaims (DRA).
    pub dynamic_resources: Vec<v1::DynamicResource>,
}

/// What the resource managers assigned to a pod as a whole (upstream's
/// `GetPodCPUs`, `GetPodMemory`; reported only with
/// `PodLevelResourceManagers`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodAssignment {
    /// Exclusive CPUs of the pod, including its containers' own.
    pub cpu_ids: Vec<i64>,
    /// Memory blocks of the pod, including its containers' own.
    pub memory: Vec<v1::ContainerMemory>,
}

/// The resource managers as the API reads them (upstream's
/// `PodResourcesProviders` minus the pods). Every method has the answer of
/// a node without them, so the device plugin manager, the CPU and memory
/// managers and DRA fill in only what they own.
pub trait ResourcesSource: Send + Sync + 'static {
    /// Called once before each `List` (upstream's
    /// `DevicesProvider.UpdateAllocatedDevices`: frees the devices of
    /// terminated pods, so they are not reported).
    fn update_allocated_devices(&self) {}

    /// What `container` of `pod` holds.
    fn container(&self, pod: &Pod, container: &Container) -> ContainerAssignment {
        let _ = (pod, container);
        ContainerAssignment::default()
    }

    /// Whether the `PodLevelResourceManagers` gate is on (beta, off by
    /// default in v1.37): only then are [`ResourcesSource::pod`]'s CPUs and
    /// memory reported at the pod level.
    fn pod_level_resource_managers(&self) -> bool {
        false
    }

    /// What `pod` holds as a whole.
    fn pod(&self, pod: &Pod) -> PodAssignment {
        let _ = pod;
        PodAssignment::default()
    }

    /// Everything the managers could assign (upstream's
    /// `GetAllocatableDevices`, `GetAllocatableCPUs`,
    /// `GetAllocatableMemory`): a capacity, not what is still free.
    fn allocatable(&self) -> v1::AllocatableResourcesResponse {
        v1::AllocatableResourcesResponse::default()
    }
}

/// A node without device plugins, DRA, or CPU and memory managers beyond
/// their `none` policies: rkube today.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoResources;

impl ResourcesSource for NoResources {}

/// `Get` found no active pod of that name: upstream's plain error, which
/// gRPC reports with code `Unknown` and this text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pod {name} in namespace {namespace} not found")]
pub struct NotFound {
    /// The namespace asked for.
    pub namespace: String,
    /// The pod name asked for.
    pub name: String,
}

/// `List`: every active pod, in the order given.
pub fn list(pods: &[Arc<Pod>], resources: &dyn ResourcesSource) -> v1::ListPodResourcesResponse {
    v1::ListPodResourcesResponse {
        pod_resources: pods.iter().map(|p| pod_resources(p, resources)).collect(),
    }
}

/// `Get`: the active pod `namespace`/`name`. A pod that is not active
/// (terminal, or fully terminated) is not among `pods`, so it is
/// [`NotFound`] like a missing one, as upstream.
pub fn get(
    pods: &[Arc<Pod>],
    namespace: &str,
    name: &str,
    resources: &dyn ResourcesSource,
) -> Result<v1::GetPodResourcesResponse, NotFound> {
    let pod = pods
        .iter()
        .find(|p| {
            p.metadata.namespace.as_deref().unwrap_or_default() == namespace
                && p.metadata.name.as_deref().unwrap_or_default() == name
        })
        .ok_or_else(|| NotFound {
            namespace: namespace.to_string(),
            name: name.to_string(),
        })?;
    Ok(v1::GetPodResourcesResponse {
        pod_resources: Some(pod_resources(pod, resources)),
    })
}

/// `GetAllocatableResources`.
pub fn allocatable(resources: &dyn ResourcesSource) -> v1::AllocatableResourcesResponse {
    resources.allocatable()
}

/// One pod: its restartable init containers (sidecars) in spec order, then
/// its app containers; init containers that run to completion hold
/// nothing once the pod runs and are left out. Ephemeral containers are
/// never reported.
fn pod_resources(pod: &Pod, resources: &dyn ResourcesSource) -> v1::PodResources {
    let spec = pod.spec.as_ref();
    let sidecars = spec
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or_default()
        .iter()
        .filter(|c| is_sidecar(c));
    let apps = spec.map(|s| s.containers.as_slice()).unwrap_or_default();
    let containers = sidecars
        .chain(apps)
        .map(|c| {
            let a = resources.container(pod, c);
            v1::ContainerResources {
                name: c.name.clone(),
                devices: a.devices,
                cpu_ids: a.cpu_ids,
                memory: a.memory,
                dynamic_resources: a.dynamic_resources,
            }
        })
        .collect();
    let PodAssignment { cpu_ids, memory } = if resources.pod_level_resource_managers() {
        resources.pod(pod)
    } else {
        PodAssignment::default()
    };
    v1::PodResources {
        name: pod.metadata.name.clone().unwrap_or_default(),
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        containers,
        cpu_ids,
        memory,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn container(name: &str) -> Container {
        Container {
            name: name.into(),
            ..Default::default()
        }
    }

    fn sidecar(name: &str) -> Container {
        Container {
            restart_policy: Some("Always".into()),
            ..container(name)
        }
    }

    fn pod(ns: &str, name: &str, init: Vec<Container>, apps: Vec<Container>) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                uid: Some(format!("{ns}-{name}-uid")),
                ..Default::default()
            },
            spec: Some(PodSpec {
                init_containers: (!init.is_empty()).then_some(init),
                containers: apps,
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    /// Like upstream's `makePod(i)`: pod `pod-i` with one container
    /// `cnt-i` (here all in namespace `ns`).
    fn make_pod(i: usize) -> Arc<Pod> {
        pod(
            "ns",
            &format!("pod-{i}"),
            vec![],
            vec![container(&format!("cnt-{i}"))],
        )
    }

    fn empty(name: &str) -> v1::ContainerResources {
        v1::ContainerResources {
            name: name.into(),
            ..Default::default()
        }
    }

    fn names(r: &v1::ListPodResourcesResponse) -> Vec<(String, Vec<String>)> {
        r.pod_resources
            .iter()
            .map(|p| {
                (
                    format!("{}/{}", p.namespace, p.name),
                    p.containers.iter().map(|c| c.name.clone()).collect(),
                )
            })
            .collect()
    }

    /// A source that hands every container the same things (as upstream's
    /// mocks do), to show where its answers go.
    struct Fixed {
        pod_level: bool,
    }

    fn devices() -> Vec<v1::ContainerDevices> {
        vec![v1::ContainerDevices {
            resource_name: "resource".into(),
            device_ids: vec!["dev0".into(), "dev1".into()],
            topology: Some(v1::TopologyInfo {
                nodes: vec![v1::NumaNode { id: 0 }],
            }),
        }]
    }

    fn memory(size: u64) -> Vec<v1::ContainerMemory> {
        vec![v1::ContainerMemory {
            memory_type: "memory".into(),
            size,
            topology: Some(v1::TopologyInfo {
                nodes: vec![v1::NumaNode { id: 0 }],
            }),
        }]
    }

    impl ResourcesSource for Fixed {
        fn container(&self, pod: &Pod, c: &Container) -> ContainerAssignment {
            ContainerAssignment {
                devices: devices(),
                cpu_ids: vec![12, 23, 30],
                memory: memory(1 << 30),
                dynamic_resources: vec![v1::DynamicResource {
                    claim_name: format!("{}-{}", pod.metadata.name.as_deref().unwrap(), c.name),
                    claim_namespace: "ns".into(),
                    claim_resources: vec![],
                }],
            }
        }
        fn pod_level_resource_managers(&self) -> bool {
            self.pod_level
        }
        fn pod(&self, _: &Pod) -> PodAssignment {
            PodAssignment {
                cpu_ids: vec![12, 23, 30, 31],
                memory: memory(2 << 30),
            }
        }
        fn allocatable(&self) -> v1::AllocatableResourcesResponse {
            v1::AllocatableResourcesResponse {
                devices: devices(),
                cpu_ids: vec![1, 2, 3],
                memory: memory(4 << 30),
            }
        }
    }

    #[test]
    fn list_no_pods() {
        let r = list(&[], &NoResources);
        assert!(r.pod_resources.is_empty());
    }

    #[test]
    fn list_pod_without_devices() {
        let pods = [pod(
            "pod-namespace",
            "pod-name",
            vec![],
            vec![container("container-name")],
        )];
        let r = list(&pods, &NoResources);
        assert_eq!(
            r,
            v1::ListPodResourcesResponse {
                pod_resources: vec![v1::PodResources {
                    name: "pod-name".into(),
                    namespace: "pod-namespace".into(),
                    containers: vec![empty("container-name")],
                    cpu_ids: vec![],
                    memory: vec![],
                }],
            }
        );
    }

    /// Upstream's "pod having an init container" and "pod having a
    /// restartable init container", and both in one pod with several app
    /// containers: sidecars first (spec order), then app containers.
    #[test]
    fn list_init_and_sidecar_containers() {
        let pods = [
            pod(
                "ns",
                "with-init",
                vec![container("init")],
                vec![container("app")],
            ),
            pod(
                "ns",
                "with-sidecar",
                vec![sidecar("sidecar")],
                vec![container("app")],
            ),
            pod(
                "ns",
                "mixed",
                vec![
                    container("init-1"),
                    sidecar("sidecar-1"),
                    container("init-2"),
                    sidecar("sidecar-2"),
                ],
                vec![container("app-1"), container("app-2")],
            ),
            pod(
                "ns",
                "explicit-policies",
                vec![Container {
                    restart_policy: Some("OnFailure".into()),
                    ..container("init")
                }],
                vec![Container {
                    // An app container's own restartPolicy changes nothing.
                    restart_policy: Some("Never".into()),
                    ..container("app")
                }],
            ),
        ];
        let r = list(&pods, &NoResources);
        let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            names(&r),
            vec![
                ("ns/with-init".into(), s(&["app"])),
                ("ns/with-sidecar".into(), s(&["sidecar", "app"])),
                (
                    "ns/mixed".into(),
                    s(&["sidecar-1", "sidecar-2", "app-1", "app-2"])
                ),
                ("ns/explicit-policies".into(), s(&["app"])),
            ]
        );
        assert!(r.pod_resources[2]
            .containers
            .iter()
            .all(|c| *c == empty(&c.name)));
    }

    /// Upstream's TestListPodResourcesUsesOnlyActivePodsV1 "some
    /// terminated pods": the list is exactly the active pods given.
    #[test]
    fn list_reports_the_active_pods_in_order() {
        let active: Vec<_> = [1, 3, 4, 5, 6].into_iter().map(make_pod).collect();
        let r = list(&active, &NoResources);
        let got: Vec<_> = names(&r).into_iter().map(|(n, _)| n).collect();
        assert_eq!(
            got,
            ["ns/pod-1", "ns/pod-3", "ns/pod-4", "ns/pod-5", "ns/pod-6"]
        );
    }

    #[test]
    fn a_source_fills_containers_and_pod_level_only_with_the_gate() {
        let pods = [pod("ns", "p", vec![sidecar("sc")], vec![container("app")])];
        let r = list(&pods, &Fixed { pod_level: false });
        let p = &r.pod_resources[0];
        assert!(
            p.cpu_ids.is_empty() && p.memory.is_empty(),
            "gate off: {p:?}"
        );
        assert_eq!(p.containers.len(), 2);
        for c in &p.containers {
            assert_eq!(c.devices, devices());
            assert_eq!(c.cpu_ids, [12, 23, 30]);
            assert_eq!(c.memory, memory(1 << 30));
            assert_eq!(c.dynamic_resources[0].claim_name, format!("p-{}", c.name));
        }
        let r = list(&pods, &Fixed { pod_level: true });
        assert_eq!(r.pod_resources[0].cpu_ids, [12, 23, 30, 31]);
        assert_eq!(r.pod_resources[0].memory, memory(2 << 30));
    }

    #[test]
    fn get_found() {
        let pods = [
            pod("other", "pod-name", vec![], vec![container("x")]),
            pod(
                "pod-namespace",
                "pod-name",
                vec![sidecar("sc"), container("init")],
                vec![container("container-name")],
            ),
        ];
        let r = get(&pods, "pod-namespace", "pod-name", &NoResources).unwrap();
        assert_eq!(
            r.pod_resources,
            Some(v1::PodResources {
                name: "pod-name".into(),
                namespace: "pod-namespace".into(),
                containers: vec![empty("sc"), empty("container-name")],
                cpu_ids: vec![],
                memory: vec![],
            })
        );
    }

    /// Upstream's "pod not exist", and a pod that has terminated (no longer
    /// among the active pods): the same error, word for word.
    #[test]
    fn get_missing_or_terminated() {
        let pods = [make_pod(1)];
        let err = get(&pods, "pod-namespace", "pod-name", &NoResources).unwrap_err();
        assert_eq!(
            err.to_string(),
            "pod pod-name in namespace pod-namespace not found"
        );
        // pod-2 ran on the node and has terminated: the pods source (the
        // kubelet's active pods) no longer has it.
        let err = get(&pods, "ns", "pod-2", &NoResources).unwrap_err();
        assert_eq!(err.to_string(), "pod pod-2 in namespace ns not found");
        // Names are matched exactly, namespace included.
        assert!(get(&pods, "", "pod-1", &NoResources).is_err());
        assert!(get(&pods, "ns", "pod-1", &NoResources).is_ok());
    }

    /// Upstream's TestAllocatableResources "no devices, no CPUs" (the
    /// `none` policies), and a source's answer passed through as is.
    #[test]
    fn allocatable_resources() {
        assert_eq!(
            allocatable(&NoResources),
            v1::AllocatableResourcesResponse {
                devices: vec![],
                cpu_ids: vec![],
                memory: vec![],
            }
        );
        let r = allocatable(&Fixed { pod_level: false });
        assert_eq!(r.cpu_ids, [1, 2, 3]);
        assert_eq!(r.devices, devices());
        assert_eq!(r.memory, memory(4 << 30));
    }
}
