//! Workloads in cluster files: Deployments, ReplicaSets, ReplicationControllers,
//! StatefulSets, Jobs and DaemonSets are expanded into the pods their
//! controllers would create (names, labels, owner references, DaemonSet node
//! affinity per node), minus the pods that already exist. Services and
//! controllers also record their selectors for default topology spreading.

use std::collections::{BTreeMap, HashMap, HashSet};

use k8s_openapi::api::apps::v1 as apps;
use k8s_openapi::api::batch::v1 as batch;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;

use crate::cluster::Cluster;
use crate::convert::{self, PriorityClasses};
use crate::names::{fnv32a, generated_name, safe_encode};
use crate::objects::{Node, Pod};
use crate::raw::{LoadError, RawObject};
use crate::selector::Labels;

/// A stable pod-template-hash for a template.
fn template_hash(t: &core::PodTemplateSpec) -> String {
    let json = serde_json::to_vec(t).unwrap_or_default();
    safe_encode(&fnv32a(&json).to_string())
}

/// Pending work collected while reading objects.
#[derive(Default)]
pub(crate) struct Workloads {
    deployments: Vec<(RawObject, apps::Deployment)>,
    replica_sets: Vec<(RawObject, apps::ReplicaSet)>,
    controllers: Vec<(RawObject, core::ReplicationController)>,
    stateful_sets: Vec<(RawObject, apps::StatefulSet)>,
    jobs: Vec<(RawObject, batch::Job)>,
    daemon_sets: Vec<(RawObject, apps::DaemonSet)>,
}

impl Workloads {
    /// Takes a workload or Service object; false for other kinds.
    pub(crate) fn take(&mut self, o: &RawObject, cluster: &mut Cluster) -> Result<bool, LoadError> {
        match o.kind.as_str() {
            "Deployment" => self.deployments.push((o.clone(), o.decode()?)),
            "ReplicaSet" => self.replica_sets.push((o.clone(), o.decode()?)),
            "ReplicationController" => self.controllers.push((o.clone(), o.decode()?)),
            "StatefulSet" => self.stateful_sets.push((o.clone(), o.decode()?)),
            "Job" => self.jobs.push((o.clone(), o.decode()?)),
            "DaemonSet" => self.daemon_sets.push((o.clone(), o.decode()?)),
            "PodDisruptionBudget" => {
                let pdb: k8s_openapi::api::policy::v1::PodDisruptionBudget = o.decode()?;
                let converted = convert::pdb(&pdb).map_err(|e| o.field_error(e))?;
                cluster.workloads.pdbs.push(converted);
            }
            "Service" => {
                let svc: core::Service = o.decode()?;
                if let Some(sel) = svc.spec.and_then(|s| s.selector) {
                    let ns = namespace(&svc.metadata);
                    cluster.workloads.services.entry(ns).or_default().push(sel);
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}

fn namespace(m: &meta::ObjectMeta) -> String {
    m.namespace
        .clone()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "default".to_string())
}

fn required<'a>(o: &RawObject, v: Option<&'a str>, field: &str) -> Result<&'a str, LoadError> {
    v.filter(|s| !s.is_empty()).ok_or_else(|| LoadError {
        file: o.file.clone(),
        object: Some(o.describe()),
        field: Some(field.to_string()),
        message: "Required value".into(),
    })
}

fn owner(api_version: &str, kind: &str, name: &str, uid: &str) -> meta::OwnerReference {
    meta::OwnerReference {
        api_version: api_version.into(),
        kind: kind.into(),
        name: name.into(),
        uid: uid.into(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// Most pods a cluster may hold once workloads are expanded: Kubernetes'
/// documented scalability limit ("no more than 150,000 total pods"). Guards
/// against `replicas: 2147483647` exhausting memory and time.
pub const MAX_PODS: usize = 150_000;

struct Builder<'a> {
    cluster: &'a mut Cluster,
    classes: &'a PriorityClasses,
    seq: &'a mut u64,
    /// `(namespace, name)` of every pod, for constant-time existence checks.
    names: HashSet<(String, String)>,
}

impl Builder<'_> {
    fn owned_count(&self, ns: &str, kind: &str, name: &str) -> usize {
        self.cluster
            .pods
            .iter()
            .filter(|p| {
                p.namespace == ns
                    && !p.terminated
                    && p.owners
                        .iter()
                        .any(|o| o.controller && o.kind == kind && o.name == name)
            })
            .count()
    }

    fn pod_exists(&self, ns: &str, name: &str) -> bool {
        self.names.contains(&(ns.to_string(), name.to_string()))
    }

    /// Refuses a workload that would create `want` more pods than [`MAX_PODS`] allows.
    fn check_room(
        &self,
        o: &RawObject,
        field: &str,
        count: i64,
        want: usize,
    ) -> Result<(), LoadError> {
        let total = self.cluster.pods.len().saturating_add(want);
        if total > MAX_PODS {
            return Err(LoadError {
                file: o.file.clone(),
                object: Some(o.describe()),
                field: Some(field.to_string()),
                message: format!(
                    "Invalid value: {count}: the cluster would hold {total} pods; rkube simulates at most {MAX_PODS} (Kubernetes' limit per cluster)"
                ),
            });
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn create(
        &mut self,
        o: &RawObject,
        template: &core::PodTemplateSpec,
        ns: &str,
        name: String,
        extra_labels: &Labels,
        owner_ref: meta::OwnerReference,
        edit: impl FnOnce(&mut core::PodSpec),
    ) -> Result<(), LoadError> {
        if self.cluster.pods.len() >= MAX_PODS {
            return Err(LoadError {
                file: o.file.clone(),
                object: Some(o.describe()),
                field: None,
                message: format!(
                    "expanding this workload would bring the cluster over {MAX_PODS} pods, the most rkube simulates (Kubernetes' limit per cluster)"
                ),
            });
        }
        let mut meta = template.metadata.clone().unwrap_or_default();
        convert::validate_labels(meta.labels.as_ref(), "spec.template.metadata.labels").map_err(
            |e| LoadError {
                file: o.file.clone(),
                object: Some(o.describe()),
                field: Some(e.path),
                message: e.message,
            },
        )?;
        let mut labels = meta.labels.take().unwrap_or_default();
        labels.extend(extra_labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        meta.labels = Some(labels);
        meta.name = Some(name.clone());
        meta.namespace = Some(ns.to_string());
        meta.owner_references = Some(vec![owner_ref]);
        meta.uid = Some(format!("{ns}/{name}"));
        let mut spec = template.spec.clone().ok_or_else(|| LoadError {
            file: o.file.clone(),
            object: Some(o.describe()),
            field: Some("spec.template.spec".into()),
            message: "Required value".into(),
        })?;
        edit(&mut spec);
        let pod = core::Pod {
            metadata: meta,
            spec: Some(spec),
            status: None,
        };
        let converted = convert::pod(&pod, *self.seq, self.classes).map_err(|e| LoadError {
            file: o.file.clone(),
            object: Some(o.describe()),
            field: Some(format!("spec.template.{}", e.path)),
            message: e.message,
        })?;
        *self.seq += 1;
        self.names
            .insert((converted.namespace.clone(), converted.name.clone()));
        self.cluster.pods.push(converted);
        Ok(())
    }

    fn replicas(
        &mut self,
        o: &RawObject,
        api_version: &str,
        kind: &str,
        meta: &meta::ObjectMeta,
        replicas: i32,
        template: &core::PodTemplateSpec,
    ) -> Result<(), LoadError> {
        let name = required(o, meta.name.as_deref(), "metadata.name")?.to_string();
        let ns = namespace(meta);
        let uid = meta.uid.clone().unwrap_or_else(|| format!("{ns}/{name}"));
        let have = self.owned_count(&ns, kind, &name);
        self.check_room(
            o,
            "spec.replicas",
            replicas as i64,
            (replicas.max(0) as usize).saturating_sub(have),
        )?;
        let mut i = 0;
        let mut made = have;
        while made < replicas.max(0) as usize {
            let pod_name = generated_name(&name, &uid, i);
            i += 1;
            if self.pod_exists(&ns, &pod_name) {
                continue;
            }
            self.create(
                o,
                template,
                &ns,
                pod_name,
                &Labels::new(),
                owner(api_version, kind, &name, &uid),
                |_| {},
            )?;
            made += 1;
        }
        Ok(())
    }
}

fn selector_of(o: &RawObject, s: &meta::LabelSelector) -> Result<crate::LabelSelector, LoadError> {
    convert::label_selector(s, "spec.selector").map_err(|e| LoadError {
        file: o.file.clone(),
        object: Some(o.describe()),
        field: Some(e.path),
        message: e.message,
    })
}

fn daemon_tolerations(spec: &mut core::PodSpec) {
    let mut add = |key: &str, effect: &str| {
        let tolerations = spec.tolerations.get_or_insert_with(Vec::new);
        if !tolerations
            .iter()
            .any(|t| t.key.as_deref() == Some(key) && t.effect.as_deref() == Some(effect))
        {
            tolerations.push(core::Toleration {
                key: Some(key.into()),
                operator: Some("Exists".into()),
                effect: Some(effect.into()),
                ..Default::default()
            });
        }
    };
    add("node.kubernetes.io/not-ready", "NoExecute");
    add("node.kubernetes.io/unreachable", "NoExecute");
    add("node.kubernetes.io/disk-pressure", "NoSchedule");
    add("node.kubernetes.io/memory-pressure", "NoSchedule");
    add("node.kubernetes.io/pid-pressure", "NoSchedule");
    add("node.kubernetes.io/unschedulable", "NoSchedule");
    if spec.host_network == Some(true) {
        add("node.kubernetes.io/network-unavailable", "NoSchedule");
    }
}

fn pin_to_node(spec: &mut core::PodSpec, node: &str) {
    let field = core::NodeSelectorRequirement {
        key: "metadata.name".into(),
        operator: "In".into(),
        values: Some(vec![node.to_string()]),
    };
    let affinity = spec.affinity.get_or_insert_with(Default::default);
    let na = affinity.node_affinity.get_or_insert_with(Default::default);
    match &mut na.required_during_scheduling_ignored_during_execution {
        Some(sel) if !sel.node_selector_terms.is_empty() => {
            for t in &mut sel.node_selector_terms {
                t.match_fields = Some(vec![field.clone()]);
            }
        }
        slot => {
            *slot = Some(core::NodeSelector {
                node_selector_terms: vec![core::NodeSelectorTerm {
                    match_fields: Some(vec![field]),
                    match_expressions: None,
                }],
            })
        }
    }
}

/// The node a DaemonSet pod is for: its `nodeName`, or the node its
/// `metadata.name` field affinity pins it to.
fn assigned_node(p: &Pod) -> String {
    if !p.node_name.is_empty() {
        return p.node_name.clone();
    }
    p.node_affinity
        .as_ref()
        .and_then(|a| a.required.as_ref())
        .and_then(|s| s.terms.first())
        .and_then(|t| t.match_fields.first())
        .and_then(|r| r.values.first())
        .cloned()
        .unwrap_or_default()
}

/// Would the DaemonSet controller run this (converted) pod on the node?
fn daemon_should_run(pod: &Pod, node: &Node) -> bool {
    let selector_ok = pod
        .node_selector
        .iter()
        .all(|(k, v)| node.labels.get(k) == Some(v));
    let affinity_ok = pod
        .node_affinity
        .as_ref()
        .and_then(|a| a.required.as_ref())
        .is_none_or(|s| s.matches(&node.name, &node.labels));
    let taints_ok = node.taints.iter().all(|t| {
        t.effect == crate::TaintEffect::PreferNoSchedule
            || pod.tolerations.iter().any(|tol| tol.tolerates(t))
    });
    selector_ok && affinity_ok && taints_ok
}

/// Expands every collected workload into pods (after Nodes and Pods are loaded).
pub(crate) fn expand(
    w: Workloads,
    cluster: &mut Cluster,
    classes: &PriorityClasses,
    seq: &mut u64,
) -> Result<(), LoadError> {
    let names = cluster
        .pods
        .iter()
        .map(|p| (p.namespace.clone(), p.name.clone()))
        .collect();
    let mut b = Builder {
        cluster,
        classes,
        seq,
        names,
    };
    // Deployments become ReplicaSets unless the file already has theirs.
    let mut replica_sets = w.replica_sets;
    for (o, d) in &w.deployments {
        let name = required(o, d.metadata.name.as_deref(), "metadata.name")?;
        let ns = namespace(&d.metadata);
        let spec = &d.spec;
        let has_rs =
            replica_sets.iter().any(|(_, rs)| {
                namespace(&rs.metadata) == ns
                    && rs.metadata.owner_references.iter().flatten().any(|r| {
                        r.kind == "Deployment" && r.name == name && r.controller == Some(true)
                    })
            });
        if has_rs {
            continue;
        }
        let hash = template_hash(&spec.template);
        let mut template = spec.template.clone();
        let tmeta = template.metadata.get_or_insert_with(Default::default);
        tmeta
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert("pod-template-hash".into(), hash.clone());
        let mut selector = spec.selector.clone();
        selector
            .match_labels
            .get_or_insert_with(BTreeMap::new)
            .insert("pod-template-hash".into(), hash.clone());
        let rs_name = format!("{name}-{hash}");
        let uid = d
            .metadata
            .uid
            .clone()
            .unwrap_or_else(|| format!("{ns}/{name}"));
        let rs = apps::ReplicaSet {
            metadata: meta::ObjectMeta {
                name: Some(rs_name.clone()),
                namespace: Some(ns.clone()),
                uid: Some(format!("{ns}/{rs_name}")),
                owner_references: Some(vec![owner("apps/v1", "Deployment", name, &uid)]),
                ..Default::default()
            },
            spec: apps::ReplicaSetSpec {
                replicas: Some(spec.replicas.unwrap_or(1)),
                selector,
                template: Some(template),
                min_ready_seconds: None,
            },
            status: None,
        };
        let mut raw = o.clone();
        raw.kind = "ReplicaSet".into();
        raw.display_name = format!("{ns}/{rs_name}");
        replica_sets.push((raw, rs));
    }
    for (o, rs) in &replica_sets {
        let name = required(o, rs.metadata.name.as_deref(), "metadata.name")?.to_string();
        let ns = namespace(&rs.metadata);
        let spec = &rs.spec;
        let sel = selector_of(o, &spec.selector)?;
        b.cluster
            .workloads
            .replica_sets
            .insert((ns.clone(), name.clone()), sel);
        if let Some(t) = &spec.template {
            b.replicas(
                o,
                "apps/v1",
                "ReplicaSet",
                &rs.metadata,
                spec.replicas.unwrap_or(1),
                t,
            )?;
        }
    }
    for (o, rc) in &w.controllers {
        let name = required(o, rc.metadata.name.as_deref(), "metadata.name")?.to_string();
        let ns = namespace(&rc.metadata);
        let Some(spec) = &rc.spec else { continue };
        if let Some(sel) = &spec.selector {
            b.cluster
                .workloads
                .replication_controllers
                .insert((ns.clone(), name.clone()), sel.clone());
        }
        if let Some(t) = &spec.template {
            b.replicas(
                o,
                "v1",
                "ReplicationController",
                &rc.metadata,
                spec.replicas.unwrap_or(1),
                t,
            )?;
        }
    }
    for (o, ss) in &w.stateful_sets {
        let name = required(o, ss.metadata.name.as_deref(), "metadata.name")?.to_string();
        let ns = namespace(&ss.metadata);
        let spec = &ss.spec;
        let sel = selector_of(o, &spec.selector)?;
        b.cluster
            .workloads
            .stateful_sets
            .insert((ns.clone(), name.clone()), sel);
        let uid = ss
            .metadata
            .uid
            .clone()
            .unwrap_or_else(|| format!("{ns}/{name}"));
        let replicas = spec.replicas.unwrap_or(1);
        b.check_room(
            o,
            "spec.replicas",
            replicas as i64,
            replicas.max(0) as usize,
        )?;
        for i in 0..replicas.max(0) {
            let pod_name = format!("{name}-{i}");
            if b.pod_exists(&ns, &pod_name) {
                continue;
            }
            let labels = Labels::from([
                (
                    "statefulset.kubernetes.io/pod-name".to_string(),
                    pod_name.clone(),
                ),
                ("apps.kubernetes.io/pod-index".to_string(), i.to_string()),
            ]);
            let claims: Vec<String> = spec
                .volume_claim_templates
                .iter()
                .flatten()
                .filter_map(|c| c.metadata.name.clone())
                .collect();
            let pod_name2 = pod_name.clone();
            b.create(
                o,
                &spec.template,
                &ns,
                pod_name,
                &labels,
                owner("apps/v1", "StatefulSet", &name, &uid),
                |s| {
                    for c in &claims {
                        s.volumes.get_or_insert_with(Vec::new).push(core::Volume {
                            name: c.clone(),
                            persistent_volume_claim: Some(
                                core::PersistentVolumeClaimVolumeSource {
                                    claim_name: format!("{c}-{pod_name2}"),
                                    read_only: None,
                                },
                            ),
                            ..Default::default()
                        });
                    }
                },
            )?;
        }
    }
    for (o, job) in &w.jobs {
        let name = required(o, job.metadata.name.as_deref(), "metadata.name")?.to_string();
        let ns = namespace(&job.metadata);
        let Some(spec) = &job.spec else { continue };
        if spec.suspend == Some(true) {
            continue;
        }
        let parallelism = spec.parallelism.unwrap_or(1).max(0) as usize;
        let want = spec
            .completions
            .map_or(parallelism, |c| parallelism.min(c.max(0) as usize));
        let uid = job
            .metadata
            .uid
            .clone()
            .unwrap_or_else(|| format!("{ns}/{name}"));
        let have = b.owned_count(&ns, "Job", &name);
        b.check_room(
            o,
            "spec.parallelism",
            want as i64,
            want.saturating_sub(have),
        )?;
        let labels = Labels::from([
            ("batch.kubernetes.io/job-name".to_string(), name.clone()),
            ("job-name".to_string(), name.clone()),
            (
                "batch.kubernetes.io/controller-uid".to_string(),
                uid.clone(),
            ),
            ("controller-uid".to_string(), uid.clone()),
        ]);
        for i in have..want {
            let pod_name = generated_name(&name, &uid, i);
            b.create(
                o,
                &spec.template,
                &ns,
                pod_name,
                &labels,
                owner("batch/v1", "Job", &name, &uid),
                |_| {},
            )?;
        }
    }
    for (o, ds) in &w.daemon_sets {
        let name = required(o, ds.metadata.name.as_deref(), "metadata.name")?.to_string();
        let ns = namespace(&ds.metadata);
        let spec = &ds.spec;
        let uid = ds
            .metadata
            .uid
            .clone()
            .unwrap_or_else(|| format!("{ns}/{name}"));
        // Convert the template once (with the controller's tolerations) to test eligibility.
        let mut probe_spec = spec.template.spec.clone().unwrap_or_default();
        daemon_tolerations(&mut probe_spec);
        let probe = convert::pod(
            &core::Pod {
                metadata: meta::ObjectMeta {
                    name: Some(name.clone()),
                    ..Default::default()
                },
                spec: Some(probe_spec),
                status: None,
            },
            0,
            b.classes,
        )
        .map_err(|e| LoadError {
            file: o.file.clone(),
            object: Some(o.describe()),
            field: Some(format!("spec.template.{}", e.path)),
            message: e.message,
        })?;
        let has_pod: HashMap<String, bool> = b
            .cluster
            .pods
            .iter()
            .filter(|p| {
                p.namespace == ns
                    && p.owners
                        .iter()
                        .any(|r| r.controller && r.kind == "DaemonSet" && r.name == name)
            })
            .map(|p| (assigned_node(p), true))
            .collect();
        let nodes: Vec<Node> = b.cluster.nodes.clone();
        for (i, node) in nodes.iter().enumerate() {
            if has_pod.contains_key(&node.name) || !daemon_should_run(&probe, node) {
                continue;
            }
            let pod_name = generated_name(&name, &uid, i);
            let node_name = node.name.clone();
            b.create(
                o,
                &spec.template,
                &ns,
                pod_name,
                &Labels::new(),
                owner("apps/v1", "DaemonSet", &name, &uid),
                |s| {
                    daemon_tolerations(s);
                    pin_to_node(s, &node_name);
                },
            )?;
        }
    }
    Ok(())
}
