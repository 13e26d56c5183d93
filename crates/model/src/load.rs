//! Cluster files: what `kubectl get nodes,pods -A -o yaml` prints. Multi-document
//! YAML or JSON, single objects or `kind: List`, turned into a [`Cluster`].
//!
//! This module does no I/O: callers hand it each file's name and text.

use crate::cluster::{Cluster, Namespace};
use crate::convert::{self, PriorityClasses};
pub use crate::raw::{parse_documents, parse_documents_noting, LoadError, RawObject};
use crate::selector::Labels;

/// Kinds that exist in Kubernetes but do not affect scheduling: read and skipped.
const IGNORED_KINDS: &[&str] = &[
    "ConfigMap",
    "Secret",
    "ServiceAccount",
    "Endpoints",
    "EndpointSlice",
    "Event",
    "Lease",
    "Role",
    "RoleBinding",
    "ClusterRole",
    "ClusterRoleBinding",
    "ControllerRevision",
    "LimitRange",
    "ResourceQuota",
    "Ingress",
    "IngressClass",
    "NetworkPolicy",
    "HorizontalPodAutoscaler",
    "CustomResourceDefinition",
    "APIService",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "ComponentStatus",
    "CronJob",
    // Workloads own PodGroups; the scheduler reads only the PodGroups.
    "Workload",
];

/// Hook for kinds handled outside this module (workloads, volumes, ...): return
/// `Ok(true)` when the object was consumed.
pub type ExtraKinds<'a> = &'a mut dyn FnMut(&RawObject) -> Result<bool, LoadError>;

/// Builds a cluster from parsed objects.
pub fn build(objects: &[RawObject], extra: ExtraKinds<'_>) -> Result<Cluster, LoadError> {
    build_objects(&mut objects.to_vec(), extra)
}

/// [`build`] of objects it may consume: each Node's and Pod's parsed value
/// is dropped once it is converted, so a large file is not held whole
/// beside its model (what `rkube simulate` and the other commands load).
pub fn build_owned(
    mut objects: Vec<RawObject>,
    extra: ExtraKinds<'_>,
) -> Result<Cluster, LoadError> {
    build_objects(&mut objects, extra)
}

/// Nodes and Pods converted between two trims of the allocator.
const TRIM_EVERY_OBJECTS: usize = 50_000;

fn build_objects(objects: &mut [RawObject], extra: ExtraKinds<'_>) -> Result<Cluster, LoadError> {
    let mut cluster = Cluster::default();
    let mut classes = PriorityClasses::with_builtins();
    for o in objects.iter().filter(|o| o.kind == "PriorityClass") {
        let pc: k8s_openapi::api::scheduling::v1::PriorityClass = o.decode()?;
        let name = pc
            .metadata
            .name
            .clone()
            .ok_or_else(|| o.error(Some("metadata.name".into()), "Required value"))?;
        let entry = (
            pc.value.unwrap_or(0),
            pc.preemption_policy.as_deref() == Some("Never"),
        );
        if pc.global_default == Some(true) {
            classes.global_default = Some(entry);
        }
        classes.by_name.insert(name, entry);
    }
    let mut seq = 0u64;
    let mut workloads = crate::expand::Workloads::default();
    let mut converted = 0usize;
    for o in objects.iter_mut() {
        if matches!(o.kind.as_str(), "Node" | "Pod") {
            converted += 1;
            if converted.is_multiple_of(TRIM_EVERY_OBJECTS) {
                // The parsed values dropped so far (build_owned) are free
                // pages inside the heap: hand them back before the model
                // grows further, so that a large file's peak is its parse.
                rkube_util::memory::trim();
            }
        }
        match o.kind.as_str() {
            "PriorityClass" => {}
            "Node" => {
                let n: k8s_openapi::api::core::v1::Node = o.decode()?;
                let node = convert::node(&n).map_err(|e| o.field_error(e))?;
                if node.allocatable.milli_cpu == 0
                    && node.allocatable.memory == 0
                    && n.status.as_ref().is_some_and(|s| s.capacity.is_some())
                {
                    cluster.warnings.push(format!(
                        "{}: {}: status.allocatable is empty (only capacity is set); the scheduler uses allocatable, so no pod fits this node",
                        o.file,
                        o.describe()
                    ));
                }
                cluster.nodes.push(node);
                o.value = serde_json::Value::Null;
            }
            "Pod" => {
                let p: k8s_openapi::api::core::v1::Pod = o.decode()?;
                convert::validate_labels(p.metadata.labels.as_ref(), "metadata.labels")
                    .map_err(|e| o.field_error(e))?;
                let pod = convert::pod(&p, seq, &classes).map_err(|e| o.field_error(e))?;
                seq += 1;
                cluster.pods.push(pod);
                o.value = serde_json::Value::Null;
            }
            "Namespace" => {
                let ns: k8s_openapi::api::core::v1::Namespace = o.decode()?;
                let name = ns
                    .metadata
                    .name
                    .clone()
                    .ok_or_else(|| o.error(Some("metadata.name".into()), "Required value"))?;
                convert::validate_label_name(&name, "metadata.name")
                    .map_err(|e| o.field_error(e))?;
                convert::validate_labels(ns.metadata.labels.as_ref(), "metadata.labels")
                    .map_err(|e| o.field_error(e))?;
                cluster.namespaces.insert(
                    name.clone(),
                    Namespace {
                        name,
                        labels: ns.metadata.labels.clone().unwrap_or_default(),
                    },
                );
            }
            "PodGroup" => {
                cluster.pod_groups.take(o, &classes)?;
            }
            k if IGNORED_KINDS.contains(&k) => {}
            _ => {
                let o = &*o;
                if !workloads.take(o, &mut cluster)?
                    && !cluster.volumes.take(o)?
                    && !cluster.dra.take(o)?
                    && !extra(o)?
                {
                    return Err(o.error(
                        Some("kind".into()),
                        format!(
                            "unsupported kind {:?}: a cluster file holds Nodes, Pods, Namespaces, PriorityClasses, Services, storage objects (PersistentVolumes, PersistentVolumeClaims, StorageClasses, CSIDrivers, CSIStorageCapacities, CSINodes), DRA objects (DeviceClasses, ResourceSlices, ResourceClaims, ResourceClaimTemplates, DeviceTaintRules), PodGroups and workloads (Deployments, ReplicaSets, ReplicationControllers, StatefulSets, Jobs, DaemonSets)",
                            o.kind
                        ),
                    ));
                }
            }
        }
    }
    crate::expand::expand(workloads, &mut cluster, &classes, &mut seq)?;
    if converted >= TRIM_EVERY_OBJECTS {
        rkube_util::memory::trim();
    }
    crate::dra::generate_claims(&mut cluster.pods, &mut cluster.dra);
    let mut names = std::collections::HashSet::new();
    for n in &cluster.nodes {
        if !names.insert(n.name.as_str()) {
            return Err(LoadError {
                file: objects
                    .iter()
                    .find(|o| o.kind == "Node" && o.display_name == n.name)
                    // A name the decoder saw differently (a repeated key):
                    // still the file the Nodes came from.
                    .or_else(|| objects.iter().rfind(|o| o.kind == "Node"))
                    .map(|o| o.file.clone())
                    .unwrap_or_default(),
                object: Some(format!("Node {}", n.name)),
                field: Some("metadata.name".into()),
                message: "Duplicate value: a node with this name appears twice".into(),
            });
        }
    }
    let mut pod_keys = std::collections::HashSet::new();
    for p in &cluster.pods {
        if !pod_keys.insert((p.namespace.as_str(), p.name.as_str())) {
            return Err(LoadError {
                file: objects
                    .iter()
                    .find(|o| o.kind == "Pod" && o.display_name.ends_with(&p.name))
                    .or_else(|| objects.iter().rfind(|o| o.kind == "Pod"))
                    .map(|o| o.file.clone())
                    .unwrap_or_default(),
                object: Some(format!("Pod {}/{}", p.namespace, p.name)),
                field: Some("metadata.name".into()),
                message: "Duplicate value: a pod with this name appears twice".into(),
            });
        }
    }
    for p in &cluster.pods {
        cluster
            .namespaces
            .entry(p.namespace.clone())
            .or_insert_with(|| Namespace {
                name: p.namespace.clone(),
                labels: Labels::from([(
                    "kubernetes.io/metadata.name".to_string(),
                    p.namespace.clone(),
                )]),
            });
    }
    Ok(cluster)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::Pod;
    use crate::workloads::IntOrPercent;

    const LIST: &str = r#"
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: {name: n1, labels: {zone: a}}
  status:
    allocatable: {cpu: "4", memory: 8Gi, pods: "110"}
- apiVersion: v1
  kind: Pod
  metadata: {name: p1, namespace: default}
  spec:
    containers:
    - name: c
      image: nginx
      resources: {requests: {cpu: 500m}}
---
apiVersion: v1
kind: Pod
metadata: {name: p2}
spec:
  nodeName: n1
  containers: [{name: c, image: busybox}]
"#;

    fn load(text: &str) -> Result<Cluster, LoadError> {
        let objs = parse_documents("c.yaml", text)?;
        build(&objs, &mut |_| Ok(false))
    }

    /// PodDisruptionBudgets: spec fields as int or percent, validated as
    /// the API server does; whether the controller wrote a status.
    #[test]
    fn disruption_budgets() {
        let pdb = |spec: &str, status: &str| {
            format!("apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {{name: b, namespace: d}}\nspec: {spec}\n{status}")
        };
        let c = load(&pdb(
            "{maxUnavailable: '25%', selector: {matchLabels: {app: a}}}",
            "status: {disruptionsAllowed: 2, currentHealthy: 5, desiredHealthy: 3}",
        ))
        .unwrap();
        let b = &c.workloads.pdbs[0];
        assert_eq!(b.max_unavailable, Some(IntOrPercent::Percent(25)));
        assert_eq!(b.min_available, None);
        assert!(b.status_present);
        assert_eq!(
            (b.disruptions_allowed, b.current_healthy, b.desired_healthy),
            (2, 5, 3)
        );
        let c = load(&pdb("{minAvailable: 2}", "")).unwrap();
        let b = &c.workloads.pdbs[0];
        assert_eq!(b.min_available, Some(IntOrPercent::Int(2)));
        assert!(!b.status_present && b.selector.is_none());
        for (spec, field, message) in [
            (
                "{minAvailable: 1, maxUnavailable: 1}",
                "spec",
                "minAvailable and maxUnavailable cannot be both set",
            ),
            (
                "{minAvailable: -1}",
                "spec.minAvailable",
                "Invalid value: -1: must be greater than or equal to 0",
            ),
            (
                "{maxUnavailable: '101%'}",
                "spec.maxUnavailable",
                "Invalid value: \"101%\": must not be greater than 100%",
            ),
            (
                "{maxUnavailable: 'half'}",
                "spec.maxUnavailable",
                "must be an integer or percentage (e.g '5%')",
            ),
            (
                "{maxUnavailable: '5'}",
                "spec.maxUnavailable",
                "must be an integer or percentage (e.g '5%')",
            ),
        ] {
            let e = load(&pdb(spec, "")).unwrap_err();
            assert_eq!(e.field.as_deref(), Some(field), "{spec}");
            assert!(e.message.contains(message), "{spec}: {}", e.message);
        }
    }

    #[test]
    fn percentages_scale_as_upstream() {
        // intstr.GetScaledValueFromIntOrPercent
        assert_eq!(IntOrPercent::Percent(30).scaled(4, true), 2);
        assert_eq!(IntOrPercent::Percent(30).scaled(4, false), 1);
        assert_eq!(IntOrPercent::Percent(50).scaled(4, true), 2);
        assert_eq!(IntOrPercent::Percent(100).scaled(0, true), 0);
        assert_eq!(IntOrPercent::Int(3).scaled(10, true), 3);
    }

    #[test]
    fn empty_dir_and_mirror_pods() {
        let c = load(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p, annotations: {kubernetes.io/config.mirror: abc}}\nspec: {containers: [{name: c}], volumes: [{name: t, emptyDir: {}}, {name: s, secret: {secretName: x}}]}\n",
        )
        .unwrap();
        let p = &c.pods[0];
        assert!(p.mirror && p.has_local_storage());
        assert_eq!(
            p.volumes,
            [
                crate::objects::Volume::EmptyDir,
                crate::objects::Volume::Other
            ]
        );
        let c = load(LIST).unwrap();
        assert!(!c.pods[0].mirror && !c.pods[0].has_local_storage());
    }

    #[test]
    fn reads_lists_and_documents() {
        let c = load(LIST).unwrap();
        assert_eq!(c.nodes.len(), 1);
        assert_eq!(c.nodes[0].allocatable.milli_cpu, 4000);
        assert_eq!(c.pods.len(), 2);
        assert_eq!(c.pods[0].requests.milli_cpu, 500);
        assert_eq!(c.pods[1].namespace, "default");
        assert_eq!(c.pods[1].node_name, "n1");
    }

    #[test]
    fn errors_name_file_object_and_field() {
        let bad = LIST.replace("cpu: 500m", "cpu: 5x00m");
        let e = load(&bad).unwrap_err();
        assert_eq!(e.file, "c.yaml");
        assert_eq!(e.object.as_deref(), Some("Pod default/p1"));
        assert_eq!(
            e.field.as_deref(),
            Some("spec.containers[0].resources.requests.cpu")
        );

        let e = load("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {}\n").unwrap_err();
        assert_eq!(e.object.as_deref(), Some("Pod x"));
        assert!(e.to_string().contains("containers"), "{e}");

        let e = load("apiVersion: v1\nkind: Gizmo\nmetadata: {name: x}\n").unwrap_err();
        assert!(e.to_string().contains("unsupported kind \"Gizmo\""), "{e}");

        let e = load("kind: [").unwrap_err();
        assert!(e.to_string().starts_with("c.yaml: invalid YAML"), "{e}");

        let e = load("apiVersion: v1\nkind: Node\nmetadata: {name: n}\nspec: {taints: [{key: k, effect: Sometimes}]}\n").unwrap_err();
        assert_eq!(e.field.as_deref(), Some("spec.taints[0].effect"));
    }

    #[test]
    fn names_are_validated_as_the_api_server_does() {
        let long = "n".repeat(10 << 20);
        let e = load(&format!(
            "apiVersion: v1\nkind: Node\nmetadata: {{name: {long}}}\n"
        ))
        .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("metadata.name"));
        assert!(
            e.message.contains("must be no more than 253 characters"),
            "{e}"
        );
        assert!(e.to_string().len() < 2048, "{}", e.to_string().len());

        let e = load("apiVersion: v1\nkind: Node\nmetadata: {name: Node_1}\n").unwrap_err();
        assert!(e.message.contains("a lowercase RFC 1123 subdomain"), "{e}");

        let e = load("apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: a.b}\nspec: {containers: [{name: c, image: i}]}\n").unwrap_err();
        assert_eq!(e.field.as_deref(), Some("metadata.namespace"));
        assert!(e.message.contains("a lowercase RFC 1123 label"), "{e}");

        let e = load("apiVersion: v1\nkind: Namespace\nmetadata: {name: UPPER}\n").unwrap_err();
        assert_eq!(e.field.as_deref(), Some("metadata.name"));

        // Storage objects too (cargo-fuzz found a nameless PersistentVolume
        // that bound a claim whose binding then never completed).
        for doc in [
            "apiVersion: v1\nkind: PersistentVolume\nspec: {capacity: {storage: 1Gi}}\n",
            "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: \"\"}\nspec: {}\n",
            "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: Fast_SSD}\nprovisioner: p\n",
        ] {
            let e = load(doc).unwrap_err();
            assert_eq!(e.field.as_deref(), Some("metadata.name"), "{doc}: {e}");
        }
    }

    #[test]
    fn duplicate_keys_are_warnings() {
        let text = "apiVersion: v1\nkind: Node\nmetadata: {name: n1, name: n2}\n";
        let mut warnings = Vec::new();
        let objects = parse_documents_noting("c.yaml", text, &mut warnings).unwrap();
        assert_eq!(objects[0].display_name, "n2");
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].starts_with("c.yaml: document 1: metadata.name: duplicate key"),
            "{warnings:?}"
        );
    }

    #[test]
    fn json_and_duplicate_detection() {
        let json = r#"{"apiVersion":"v1","kind":"Node","metadata":{"name":"n1"}}
{"apiVersion":"v1","kind":"Node","metadata":{"name":"n1"}}"#;
        let e = load(json).unwrap_err();
        assert!(e.to_string().contains("Duplicate value"), "{e}");
    }

    #[test]
    fn priority_class_resolution() {
        let text = r#"
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
---
apiVersion: v1
kind: Pod
metadata: {name: p}
spec: {priorityClassName: high, containers: [{name: c}]}
---
apiVersion: v1
kind: Pod
metadata: {name: q}
spec: {priorityClassName: nope, containers: [{name: c}]}
"#;
        let e = load(text).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("spec.priorityClassName"));
        let ok = load(&text[..text.rfind("---").unwrap()]).unwrap();
        assert_eq!(ok.pods[0].priority, 1000);
    }

    const WORKLOADS: &str = r#"
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Node, metadata: {name: n1}}
- {apiVersion: v1, kind: Node, metadata: {name: n2}}
- {apiVersion: v1, kind: Node, metadata: {name: n3}, spec: {taints: [{key: gpu, effect: NoSchedule}]}}
- apiVersion: v1
  kind: Service
  metadata: {name: web, namespace: shop}
  spec: {selector: {app: web}}
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: web, namespace: shop}
  spec:
    replicas: 3
    selector: {matchLabels: {app: web}}
    template:
      metadata: {labels: {app: web}}
      spec: {containers: [{name: c, image: nginx, resources: {requests: {cpu: 100m}}}]}
- apiVersion: apps/v1
  kind: StatefulSet
  metadata: {name: db, namespace: shop}
  spec:
    replicas: 2
    serviceName: db
    selector: {matchLabels: {app: db}}
    template:
      metadata: {labels: {app: db}}
      spec: {containers: [{name: c, image: mysql}]}
- apiVersion: v1
  kind: Pod
  metadata: {name: db-0, namespace: shop, labels: {app: db}}
  spec: {nodeName: n1, containers: [{name: c, image: mysql}]}
- apiVersion: batch/v1
  kind: Job
  metadata: {name: batch, namespace: shop}
  spec:
    parallelism: 2
    completions: 5
    template:
      spec: {restartPolicy: Never, containers: [{name: c, image: busybox}]}
- apiVersion: apps/v1
  kind: DaemonSet
  metadata: {name: agent, namespace: kube-system}
  spec:
    selector: {matchLabels: {app: agent}}
    template:
      metadata: {labels: {app: agent}}
      spec: {containers: [{name: c, image: agent}]}
"#;

    #[test]
    fn workloads_expand_into_pods() {
        let c = load(WORKLOADS).unwrap();
        let web: Vec<&Pod> = c
            .pods
            .iter()
            .filter(|p| p.labels.get("app").map(String::as_str) == Some("web"))
            .collect();
        assert_eq!(web.len(), 3);
        let hash = web[0].labels.get("pod-template-hash").unwrap().clone();
        for p in &web {
            assert!(p.node_name.is_empty());
            assert_eq!(p.owners[0].kind, "ReplicaSet");
            assert_eq!(p.owners[0].name, format!("web-{hash}"));
            assert!(p.name.starts_with(&format!("web-{hash}-")));
        }
        // Default spreading selector: the Service's and the ReplicaSet's.
        let sel = c.workloads.default_selector(web[0]);
        assert!(sel.matches(&web[0].labels));
        assert!(sel
            .requirements
            .iter()
            .any(|r| r.key == "pod-template-hash"));
        // StatefulSet: db-0 exists, db-1 is created.
        let db: Vec<&str> = c
            .pods
            .iter()
            .filter(|p| p.name.starts_with("db-"))
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(db, ["db-0", "db-1"]);
        // Job: min(parallelism, completions) pods.
        assert_eq!(
            c.pods
                .iter()
                .filter(|p| p.name.starts_with("batch-"))
                .count(),
            2
        );
        // DaemonSet: one pod per node whose taints it tolerates, pinned by node affinity.
        let agents: Vec<&Pod> = c
            .pods
            .iter()
            .filter(|p| p.namespace == "kube-system")
            .collect();
        assert_eq!(agents.len(), 2);
        let pinned: Vec<String> = agents
            .iter()
            .map(|p| {
                p.node_affinity
                    .as_ref()
                    .unwrap()
                    .required
                    .as_ref()
                    .unwrap()
                    .terms[0]
                    .match_fields[0]
                    .values[0]
                    .clone()
            })
            .collect();
        assert_eq!(pinned, ["n1", "n2"]);
        assert!(agents[0]
            .tolerations
            .iter()
            .any(|t| t.key == "node.kubernetes.io/unreachable"));
    }
}
