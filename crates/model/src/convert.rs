//! Conversion from k8s-openapi objects into the compact model, with API
//! defaults applied and every rejected value reported by its field path.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::policy::v1 as policy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::objects::*;
use crate::quantity::Quantity;
use crate::requests;
use crate::resources::{ResourceList, Resources};
use crate::selector::{LabelSelector, NodeSelector, NodeSelectorTerm, Operator, Requirement};
use crate::workloads::{IntOrPercent, PodDisruptionBudget};

/// A field that failed validation, with its path inside the object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct FieldError {
    /// Path like `spec.containers[0].resources.requests.cpu`.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

pub(crate) fn err(path: impl Into<String>, message: impl Into<String>) -> FieldError {
    FieldError {
        path: clip_message(path.into()),
        message: clip_message(message.into()),
    }
}

/// Bounds an error message: a hostile input (a 10 MB label value, quantity or
/// plugin name) must not turn into a 10 MB line on stderr. Keeps the head and
/// the tail (where serde puts "expected ...").
pub fn clip_message(s: String) -> String {
    const MAX: usize = 1024;
    if s.len() <= MAX {
        return s;
    }
    let mut head = 600;
    while !s.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = s.len() - 300;
    while !s.is_char_boundary(tail) {
        tail += 1;
    }
    format!(
        "{} ...[{} bytes elided]... {}",
        &s[..head],
        tail - head,
        &s[tail..]
    )
}

type Result<T> = std::result::Result<T, FieldError>;

/// Parses a resource list, naming the bad field.
pub fn resource_list(
    list: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
    path: &str,
) -> Result<ResourceList> {
    let mut out = ResourceList::new();
    for (name, q) in list.into_iter().flatten() {
        let parsed = Quantity::parse(&q.0)
            .map_err(|e| err(format!("{path}.{name}"), format!("{:?}: {e}", q.0)))?;
        // The API server's ValidateNonnegativeQuantity (requests, limits,
        // overhead, node capacity/allocatable, volume sizes).
        if parsed.is_negative() {
            return Err(err(
                format!("{path}.{name}"),
                format!(
                    "Invalid value: {:?}: must be greater than or equal to 0",
                    q.0
                ),
            ));
        }
        out.insert(name.clone(), parsed);
    }
    Ok(out)
}

fn operator(op: &str, path: &str, node: bool) -> Result<Operator> {
    Ok(match op {
        "In" => Operator::In,
        "NotIn" => Operator::NotIn,
        "Exists" => Operator::Exists,
        "DoesNotExist" => Operator::DoesNotExist,
        "Gt" if node => Operator::Gt,
        "Lt" if node => Operator::Lt,
        other => {
            return Err(err(
                format!("{path}.operator"),
                format!("{other:?} is not a valid selector operator"),
            ))
        }
    })
}

fn requirement(
    key: &str,
    op: &str,
    values: &[String],
    path: &str,
    node: bool,
) -> Result<Requirement> {
    let op = operator(op, path, node)?;
    match op {
        Operator::In | Operator::NotIn if values.is_empty() => Err(err(
            format!("{path}.values"),
            "must be specified when `operator` is 'In' or 'NotIn'",
        )),
        Operator::Exists | Operator::DoesNotExist if !values.is_empty() => Err(err(
            format!("{path}.values"),
            "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
        )),
        Operator::Gt | Operator::Lt if values.len() != 1 || values[0].parse::<i64>().is_err() => {
            Err(err(
                format!("{path}.values"),
                "must be a single integer when `operator` is 'Gt' or 'Lt'",
            ))
        }
        _ => {
            let mut values = values.to_vec();
            values.sort();
            Ok(Requirement {
                key: key.to_string(),
                op,
                values,
            })
        }
    }
}

/// Converts a `metav1.LabelSelector`.
pub fn label_selector(sel: &meta::LabelSelector, path: &str) -> Result<LabelSelector> {
    let mut requirements = Vec::new();
    for (k, v) in sel.match_labels.iter().flatten() {
        requirements.push(Requirement {
            key: k.clone(),
            op: Operator::In,
            values: vec![v.clone()],
        });
    }
    for (i, e) in sel.match_expressions.iter().flatten().enumerate() {
        requirements.push(requirement(
            &e.key,
            &e.operator,
            e.values.as_deref().unwrap_or_default(),
            &format!("{path}.matchExpressions[{i}]"),
            false,
        )?);
    }
    Ok(LabelSelector { requirements })
}

fn node_selector_term(t: &core::NodeSelectorTerm, path: &str) -> Result<NodeSelectorTerm> {
    let mut term = NodeSelectorTerm::default();
    for (i, e) in t.match_expressions.iter().flatten().enumerate() {
        term.match_expressions.push(requirement(
            &e.key,
            &e.operator,
            e.values.as_deref().unwrap_or_default(),
            &format!("{path}.matchExpressions[{i}]"),
            true,
        )?);
    }
    for (i, e) in t.match_fields.iter().flatten().enumerate() {
        let p = format!("{path}.matchFields[{i}]");
        if e.key != "metadata.name" {
            return Err(err(
                format!("{p}.key"),
                format!("{:?} is not a supported field selector key", e.key),
            ));
        }
        term.match_fields.push(requirement(
            &e.key,
            &e.operator,
            e.values.as_deref().unwrap_or_default(),
            &p,
            true,
        )?);
    }
    Ok(term)
}

/// Converts a `v1.NodeSelector`.
pub fn node_selector(s: &core::NodeSelector, path: &str) -> Result<NodeSelector> {
    let terms = s
        .node_selector_terms
        .iter()
        .enumerate()
        .map(|(i, t)| node_selector_term(t, &format!("{path}.nodeSelectorTerms[{i}]")))
        .collect::<Result<_>>()?;
    Ok(NodeSelector { terms })
}

fn taint(t: &core::Taint, path: &str) -> Result<Taint> {
    let effect = TaintEffect::parse(&t.effect).ok_or_else(|| {
        err(
            format!("{path}.effect"),
            format!(
                "{:?}: supported values: \"NoExecute\", \"NoSchedule\", \"PreferNoSchedule\"",
                t.effect
            ),
        )
    })?;
    Ok(Taint {
        key: t.key.clone(),
        value: t.value.clone().unwrap_or_default(),
        effect,
    })
}

fn dns1123_label_like(s: &str, max: usize) -> bool {
    // `(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?` of at most `max` bytes.
    s.len() <= max
        && (s.is_empty()
            || (s
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
                && s.as_bytes()[0].is_ascii_alphanumeric()
                && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric()))
}

fn dns1123_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

/// apimachinery's `IsQualifiedName`: an optional DNS subdomain prefix and
/// `/`, then a name of 1 to 63 alphanumerics, `-`, `_` or `.`, starting
/// and ending with an alphanumeric.
pub fn is_qualified_name(s: &str) -> bool {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    prefix.is_none_or(dns1123_subdomain) && !name.is_empty() && dns1123_label_like(name, 63)
}

/// The API server's `NameIsDNSSubdomain` (node and pod names), with its
/// messages.
pub fn validate_subdomain_name(name: &str, path: &str) -> Result<()> {
    validate_dns_name(
        name,
        path,
        253,
        dns1123_subdomain(name),
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
    )
}

/// The API server's `ValidateNamespaceName` (an RFC 1123 label), with its
/// messages.
pub fn validate_label_name(name: &str, path: &str) -> Result<()> {
    validate_dns_name(
        name,
        path,
        63,
        !name.contains('.') && dns1123_subdomain(name),
        "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
    )
}

/// A name's length first (the API server reports both; rkube the first),
/// then its form.
fn validate_dns_name(name: &str, path: &str, max: usize, valid: bool, rule: &str) -> Result<()> {
    let problem = if name.len() > max {
        format!("must be no more than {max} characters")
    } else if !valid {
        rule.to_string()
    } else {
        return Ok(());
    };
    Err(err(
        path,
        format!("Invalid value: {}: {problem}", truncate_for_message(name)),
    ))
}

fn truncate_for_message(s: &str) -> String {
    if s.len() <= 80 {
        return format!("{s:?}");
    }
    let mut end = 64;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{:?}... ({} bytes)", &s[..end], s.len())
}

/// The API server's `ValidateLabels`: keys are qualified names (optional
/// DNS-subdomain prefix, `/`, a name of at most 63 characters), values at
/// most 63 characters of `[-A-Za-z0-9_.]`, alphanumeric at both ends.
pub fn validate_labels(labels: Option<&BTreeMap<String, String>>, path: &str) -> Result<()> {
    for (k, v) in labels.into_iter().flatten() {
        let (prefix, name) = match k.split_once('/') {
            Some((p, n)) => (Some(p), n),
            None => (None, k.as_str()),
        };
        let key_ok = !name.is_empty()
            && dns1123_label_like(name, 63)
            && prefix.is_none_or(dns1123_subdomain);
        if !key_ok {
            return Err(err(
                path,
                format!(
                    "Invalid value: {}: a label key must be a qualified name (an optional DNS subdomain prefix and '/', then at most 63 alphanumeric characters, '-', '_' or '.', starting and ending with an alphanumeric character)",
                    truncate_for_message(k)
                ),
            ));
        }
        if !dns1123_label_like(v, 63) {
            return Err(err(
                format!("{path}.{k}"),
                format!(
                    "Invalid value: {}: a label value must be empty or at most 63 alphanumeric characters, '-', '_' or '.', starting and ending with an alphanumeric character",
                    truncate_for_message(v)
                ),
            ));
        }
    }
    Ok(())
}

/// Converts a Node.
pub fn node(n: &core::Node) -> Result<Node> {
    let name = n
        .metadata
        .name
        .clone()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| err("metadata.name", "Required value"))?;
    validate_subdomain_name(&name, "metadata.name")?;
    validate_labels(n.metadata.labels.as_ref(), "metadata.labels")?;
    let spec = n.spec.clone().unwrap_or_default();
    let status = n.status.clone().unwrap_or_default();
    let taints = spec
        .taints
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, t)| taint(t, &format!("spec.taints[{i}]")))
        .collect::<Result<_>>()?;
    let allocatable = resource_list(status.allocatable.as_ref(), "status.allocatable")?;
    let images = status
        .images
        .iter()
        .flatten()
        .map(|img| ContainerImage {
            names: img.names.clone().unwrap_or_default(),
            size_bytes: img.size_bytes.unwrap_or(0),
        })
        .collect();
    Ok(Node {
        name,
        labels: n.metadata.labels.clone().unwrap_or_default(),
        taints,
        unschedulable: spec.unschedulable.unwrap_or(false),
        allocatable: Resources::from_list(&allocatable),
        images,
        declared_features: status.declared_features.clone().unwrap_or_default(),
    })
}

/// The node features a pod needs to be scheduled (upstream v1.37's
/// `k8s.io/component-helpers/nodedeclaredfeatures` registry: the three of
/// its features whose `InferForScheduling` can say yes), sorted by name.
pub fn required_node_features(spec: &core::PodSpec) -> Vec<&'static str> {
    let mut out = Vec::new();
    let restart_all = |rules: Option<&Vec<core::ContainerRestartRule>>| {
        rules
            .into_iter()
            .flatten()
            .any(|r| r.action == "RestartAllContainers")
    };
    if spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .any(|c| restart_all(c.restart_policy_rules.as_ref()))
    {
        out.push("RestartAllContainersOnContainerExits");
    }
    if spec.host_network == Some(true) && spec.host_users == Some(false) {
        out.push("UserNamespacesHostNetworkSupport");
    }
    let bind_options = |mounts: Option<&Vec<core::VolumeMount>>| {
        mounts
            .into_iter()
            .flatten()
            .any(|m| m.bind_mount_options.as_ref().is_some_and(|o| !o.is_empty()))
    };
    if spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .any(|c| bind_options(c.volume_mounts.as_ref()))
        || spec
            .ephemeral_containers
            .iter()
            .flatten()
            .any(|c| bind_options(c.volume_mounts.as_ref()))
    {
        out.push("VolumeBindMountOptions");
    }
    out.sort_unstable();
    out
}

/// The API server's defaulting: a container's requests default to its
/// limits, and with `hostNetwork` a port's `hostPort` defaults to its
/// `containerPort`.
fn container(c: &core::Container, path: &str, init: bool, host_network: bool) -> Result<Container> {
    let mut requests = resource_list(
        c.resources.as_ref().and_then(|r| r.requests.as_ref()),
        &format!("{path}.resources.requests"),
    )?;
    let limits = resource_list(
        c.resources.as_ref().and_then(|r| r.limits.as_ref()),
        &format!("{path}.resources.limits"),
    )?;
    for (k, v) in limits {
        requests.entry(k).or_insert(v);
    }
    let mut host_ports = Vec::new();
    for p in c.ports.iter().flatten() {
        let host_port = match p.host_port {
            None | Some(0) if host_network => Some(p.container_port),
            other => other,
        };
        if let Some(port) = host_port.filter(|&p| p > 0) {
            host_ports.push(HostPort {
                host_ip: p
                    .host_ip
                    .clone()
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| "0.0.0.0".to_string()),
                protocol: p
                    .protocol
                    .clone()
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| "TCP".to_string()),
                port,
            });
        }
    }
    Ok(Container {
        name: c.name.clone(),
        image: c.image.clone().unwrap_or_default(),
        requests,
        restartable: init && c.restart_policy.as_deref() == Some("Always"),
        host_ports,
    })
}

fn pod_affinity_term(t: &core::PodAffinityTerm, path: &str) -> Result<PodAffinityTerm> {
    Ok(PodAffinityTerm {
        selector: t
            .label_selector
            .as_ref()
            .map(|s| label_selector(s, &format!("{path}.labelSelector")))
            .transpose()?,
        namespaces: t.namespaces.clone().unwrap_or_default(),
        namespace_selector: t
            .namespace_selector
            .as_ref()
            .map(|s| label_selector(s, &format!("{path}.namespaceSelector")))
            .transpose()?,
        topology_key: t.topology_key.clone(),
        match_label_keys: t.match_label_keys.clone().unwrap_or_default(),
        mismatch_label_keys: t.mismatch_label_keys.clone().unwrap_or_default(),
    })
}

fn pod_affinity(
    required: Option<&Vec<core::PodAffinityTerm>>,
    preferred: Option<&Vec<core::WeightedPodAffinityTerm>>,
    path: &str,
) -> Result<PodAffinity> {
    let required = required
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, t)| {
            pod_affinity_term(
                t,
                &format!("{path}.requiredDuringSchedulingIgnoredDuringExecution[{i}]"),
            )
        })
        .collect::<Result<_>>()?;
    let preferred = preferred
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, t)| {
            Ok(WeightedPodAffinityTerm {
                weight: t.weight,
                term: pod_affinity_term(
                    &t.pod_affinity_term,
                    &format!(
                        "{path}.preferredDuringSchedulingIgnoredDuringExecution[{i}].podAffinityTerm"
                    ),
                )?,
            })
        })
        .collect::<Result<_>>()?;
    Ok(PodAffinity {
        required,
        preferred,
    })
}

fn spread_constraint(
    c: &core::TopologySpreadConstraint,
    path: &str,
) -> Result<TopologySpreadConstraint> {
    let do_not_schedule = match c.when_unsatisfiable.as_str() {
        "DoNotSchedule" => true,
        "ScheduleAnyway" => false,
        other => {
            return Err(err(
                format!("{path}.whenUnsatisfiable"),
                format!("{other:?}: supported values: \"DoNotSchedule\", \"ScheduleAnyway\""),
            ))
        }
    };
    if c.max_skew <= 0 {
        return Err(err(
            format!("{path}.maxSkew"),
            format!("{}: must be greater than zero", c.max_skew),
        ));
    }
    let policy = |v: &Option<String>, field: &str, default: bool| -> Result<bool> {
        match v.as_deref() {
            None => Ok(default),
            Some("Honor") => Ok(true),
            Some("Ignore") => Ok(false),
            Some(other) => Err(err(
                format!("{path}.{field}"),
                format!("{other:?}: supported values: \"Honor\", \"Ignore\""),
            )),
        }
    };
    Ok(TopologySpreadConstraint {
        max_skew: c.max_skew,
        topology_key: c.topology_key.clone(),
        do_not_schedule,
        selector: c
            .label_selector
            .as_ref()
            .map(|s| label_selector(s, &format!("{path}.labelSelector")))
            .transpose()?,
        min_domains: c.min_domains,
        node_affinity_honor: policy(&c.node_affinity_policy, "nodeAffinityPolicy", true)?,
        node_taints_honor: policy(&c.node_taints_policy, "nodeTaintsPolicy", false)?,
        match_label_keys: c.match_label_keys.clone().unwrap_or_default(),
    })
}

/// See [`Pod::volume_sources`].
fn volume_sources(volumes: &[core::Volume]) -> Vec<String> {
    let mut out: Vec<String> = volumes
        .iter()
        .filter(|v| v.config_map.is_none() && v.secret.is_none())
        .filter_map(|v| {
            let mut source = serde_json::to_value(v).ok()?;
            source.as_object_mut()?.remove("name");
            Some(source.to_string())
        })
        .collect();
    out.sort();
    out
}

fn volume(pod_name: &str, v: &core::Volume) -> Volume {
    if let Some(pvc) = &v.persistent_volume_claim {
        return Volume::Claim {
            claim: pvc.claim_name.clone(),
            read_only: pvc.read_only.unwrap_or(false),
            ephemeral: false,
        };
    }
    if v.ephemeral.is_some() {
        return Volume::Claim {
            claim: format!("{pod_name}-{}", v.name),
            read_only: false,
            ephemeral: true,
        };
    }
    if let Some(gce) = &v.gce_persistent_disk {
        return Volume::Disk(Disk::Gce {
            pd_name: gce.pd_name.clone(),
            read_only: gce.read_only.unwrap_or(false),
        });
    }
    if let Some(aws) = &v.aws_elastic_block_store {
        return Volume::Disk(Disk::Aws {
            volume_id: aws.volume_id.clone(),
        });
    }
    if let Some(rbd) = &v.rbd {
        return Volume::Disk(Disk::Rbd {
            monitors: rbd.monitors.clone(),
            pool: rbd.pool.clone().unwrap_or_else(|| "rbd".into()),
            image: rbd.image.clone(),
            read_only: rbd.read_only.unwrap_or(false),
        });
    }
    if let Some(iscsi) = &v.iscsi {
        return Volume::Disk(Disk::Iscsi {
            iqn: iscsi.iqn.clone(),
            read_only: iscsi.read_only.unwrap_or(false),
        });
    }
    if v.empty_dir.is_some() {
        return Volume::EmptyDir;
    }
    if let Some(csi) = &v.csi {
        return Volume::Csi {
            driver: csi.driver.clone(),
        };
    }
    Volume::Other
}

/// Priority classes known to the loader, to resolve `priorityClassName`.
#[derive(Debug, Clone, Default)]
pub struct PriorityClasses {
    /// Name → (value, preemptionPolicy Never).
    pub by_name: BTreeMap<String, (i32, bool)>,
    /// The `globalDefault` class, if any.
    pub global_default: Option<(i32, bool)>,
}

impl PriorityClasses {
    /// With the two built-in system classes.
    pub fn with_builtins() -> Self {
        let mut pc = PriorityClasses::default();
        pc.by_name
            .insert("system-node-critical".into(), (2_000_001_000, false));
        pc.by_name
            .insert("system-cluster-critical".into(), (2_000_000_000, false));
        pc
    }

    /// What the Priority admission plugin gives an object whose priority is
    /// unset: its `spec.priorityClassName`'s (value, preemptionPolicy
    /// Never), else the global default's, else (0, false).
    pub fn resolve(&self, class_name: Option<&str>) -> Result<(i32, bool)> {
        let class = match class_name.filter(|s| !s.is_empty()) {
            Some(name) => Some(*self.by_name.get(name).ok_or_else(|| {
                err(
                    "spec.priorityClassName",
                    format!("no PriorityClass with name {name} was found"),
                )
            })?),
            None => self.global_default,
        };
        Ok(class.unwrap_or((0, false)))
    }
}

/// The annotation the kubelet puts on a static pod's mirror
/// (`corev1.MirrorPodAnnotationKey`).
pub const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// Converts a Pod; `seq` is its position in the input.
pub fn pod(p: &core::Pod, seq: u64, classes: &PriorityClasses) -> Result<Pod> {
    let name = p
        .metadata
        .name
        .clone()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| err("metadata.name", "Required value"))?;
    validate_subdomain_name(&name, "metadata.name")?;
    let namespace = p
        .metadata
        .namespace
        .clone()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "default".to_string());
    validate_label_name(&namespace, "metadata.namespace")?;
    let spec = p
        .spec
        .as_ref()
        .ok_or_else(|| err("spec", "Required value"))?;
    if spec.containers.is_empty() {
        return Err(err("spec.containers", "Required value"));
    }
    let host_network = spec.host_network.unwrap_or(false);
    let containers = spec
        .containers
        .iter()
        .enumerate()
        .map(|(i, c)| container(c, &format!("spec.containers[{i}]"), false, host_network))
        .collect::<Result<_>>()?;
    let init_containers = spec
        .init_containers
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, c)| container(c, &format!("spec.initContainers[{i}]"), true, host_network))
        .collect::<Result<_>>()?;
    let tolerations = spec
        .tolerations
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, t)| {
            let path = format!("spec.tolerations[{i}]");
            let exists = match t.operator.as_deref() {
                None | Some("") | Some("Equal") => false,
                Some("Exists") => true,
                Some(other) => {
                    return Err(err(
                        format!("{path}.operator"),
                        format!("{other:?}: supported values: \"Equal\", \"Exists\""),
                    ))
                }
            };
            let effect = match t.effect.as_deref() {
                None | Some("") => None,
                Some(e) => Some(TaintEffect::parse(e).ok_or_else(|| {
                    err(
                        format!("{path}.effect"),
                        format!("{e:?}: unsupported effect"),
                    )
                })?),
            };
            Ok(Toleration {
                key: t.key.clone().unwrap_or_default(),
                exists,
                value: t.value.clone().unwrap_or_default(),
                effect,
            })
        })
        .collect::<Result<_>>()?;
    let affinity = spec.affinity.as_ref();
    let node_affinity = affinity
        .and_then(|a| a.node_affinity.as_ref())
        .map(|na| -> Result<NodeAffinity> {
            let path = "spec.affinity.nodeAffinity";
            Ok(NodeAffinity {
                required: na
                    .required_during_scheduling_ignored_during_execution
                    .as_ref()
                    .map(|s| {
                        node_selector(
                            s,
                            &format!("{path}.requiredDuringSchedulingIgnoredDuringExecution"),
                        )
                    })
                    .transpose()?,
                preferred: na
                    .preferred_during_scheduling_ignored_during_execution
                    .iter()
                    .flatten()
                    .enumerate()
                    .map(|(i, t)| {
                        Ok(PreferredSchedulingTerm {
                            weight: t.weight,
                            term: node_selector_term(
                                &t.preference,
                                &format!("{path}.preferredDuringSchedulingIgnoredDuringExecution[{i}].preference"),
                            )?,
                        })
                    })
                    .collect::<Result<_>>()?,
            })
        })
        .transpose()?;
    let pod_affinity_v = affinity
        .and_then(|a| a.pod_affinity.as_ref())
        .map(|a| {
            pod_affinity(
                a.required_during_scheduling_ignored_during_execution
                    .as_ref(),
                a.preferred_during_scheduling_ignored_during_execution
                    .as_ref(),
                "spec.affinity.podAffinity",
            )
        })
        .transpose()?;
    let pod_anti_affinity = affinity
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .map(|a| {
            pod_affinity(
                a.required_during_scheduling_ignored_during_execution
                    .as_ref(),
                a.preferred_during_scheduling_ignored_during_execution
                    .as_ref(),
                "spec.affinity.podAntiAffinity",
            )
        })
        .transpose()?;
    let topology_spread_constraints = spec
        .topology_spread_constraints
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, c)| spread_constraint(c, &format!("spec.topologySpreadConstraints[{i}]")))
        .collect::<Result<_>>()?;
    let (priority, preemption_never) = match spec.priority {
        Some(v) => (v, spec.preemption_policy.as_deref() == Some("Never")),
        None => {
            let (v, never) = classes.resolve(spec.priority_class_name.as_deref())?;
            (
                v,
                spec.preemption_policy
                    .as_deref()
                    .map_or(never, |p| p == "Never"),
            )
        }
    };
    let status = p.status.as_ref();
    let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("");
    let mut out = Pod {
        uid: p
            .metadata
            .uid
            .clone()
            .unwrap_or_else(|| format!("{namespace}/{name}")),
        labels: p.metadata.labels.clone().unwrap_or_default(),
        owners: p
            .metadata
            .owner_references
            .iter()
            .flatten()
            .map(|o| OwnerRef {
                api_version: o.api_version.clone(),
                kind: o.kind.clone(),
                name: o.name.clone(),
                uid: o.uid.clone(),
                controller: o.controller.unwrap_or(false),
            })
            .collect(),
        creation_timestamp: p
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.to_string())
            .unwrap_or_default(),
        seq,
        node_name: spec.node_name.clone().unwrap_or_default(),
        nominated_node_name: status
            .and_then(|s| s.nominated_node_name.clone())
            .unwrap_or_default(),
        scheduler_name: spec
            .scheduler_name
            .clone()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "default-scheduler".to_string()),
        priority,
        preemption_never,
        node_selector: spec.node_selector.clone().unwrap_or_default(),
        node_affinity,
        pod_affinity: pod_affinity_v,
        pod_anti_affinity,
        tolerations,
        containers,
        init_containers,
        overhead: resource_list(spec.overhead.as_ref(), "spec.overhead")?,
        pod_requests: resource_list(
            spec.resources.as_ref().and_then(|r| r.requests.as_ref()),
            "spec.resources.requests",
        )?,
        scheduling_gates: spec
            .scheduling_gates
            .iter()
            .flatten()
            .map(|g| g.name.clone())
            .collect(),
        pod_group: match &spec.scheduling_group {
            None => None,
            Some(g) => {
                let name = g.pod_group_name.clone().ok_or_else(|| {
                    err(
                        "spec.schedulingGroup.podGroupName",
                        "Invalid value: null: must specify one of: `podGroupName`",
                    )
                })?;
                validate_subdomain_name(&name, "spec.schedulingGroup.podGroupName")?;
                Some(name)
            }
        },
        topology_spread_constraints,
        volumes: spec
            .volumes
            .iter()
            .flatten()
            .map(|v| volume(&name, v))
            .collect(),
        volume_sources: volume_sources(spec.volumes.as_deref().unwrap_or_default()),
        image_volumes: spec
            .volumes
            .iter()
            .flatten()
            .filter_map(|v| v.image.as_ref().and_then(|i| i.reference.clone()))
            .collect(),
        resource_claims: spec
            .resource_claims
            .iter()
            .flatten()
            .map(|c| PodResourceClaim {
                name: c.name.clone(),
                claim_name: c.resource_claim_name.clone(),
                template_name: c.resource_claim_template_name.clone(),
            })
            .collect(),
        required_features: required_node_features(spec),
        claim_statuses: status
            .and_then(|s| s.resource_claim_statuses.as_ref())
            .into_iter()
            .flatten()
            .map(|s| (s.name.clone(), s.resource_claim_name.clone()))
            .collect(),
        terminated: phase == "Succeeded" || phase == "Failed",
        mirror: p
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(MIRROR_POD_ANNOTATION)),
        terminating: p.metadata.deletion_timestamp.is_some(),
        terminating_by_preemption: p.metadata.deletion_timestamp.is_some()
            && status
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == "DisruptionTarget"))
                .is_some_and(|c| {
                    c.status == "True" && c.reason.as_deref() == Some("PreemptionByScheduler")
                }),
        status_resources: status
            .map(status_resources)
            .transpose()?
            .flatten()
            .map(Box::new),
        start_time: status
            .and_then(|s| s.start_time.as_ref())
            .map(|t| t.0.to_string())
            .unwrap_or_default(),
        namespace,
        name,
        ..Default::default()
    };
    requests::compute(&mut out);
    Ok(out)
}

/// What a pod's status says of its resources during an in-place resize;
/// `None` when it says nothing (no allocated or actuated resources, no
/// infeasible resize).
fn status_resources(s: &core::PodStatus) -> Result<Option<StatusResources>> {
    let containers = s
        .container_statuses
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, c)| ("containerStatuses", i, c))
        .chain(
            s.init_container_statuses
                .iter()
                .flatten()
                .enumerate()
                .map(|(i, c)| ("initContainerStatuses", i, c)),
        )
        .filter(|(_, _, c)| {
            c.allocated_resources.is_some()
                || c.resources.as_ref().is_some_and(|r| r.requests.is_some())
        })
        .map(|(list, i, c)| {
            let path = format!("status.{list}[{i}]");
            Ok(ContainerStatusResources {
                name: c.name.clone(),
                allocated: c
                    .allocated_resources
                    .as_ref()
                    .map(|r| resource_list(Some(r), &format!("{path}.allocatedResources")))
                    .transpose()?,
                actuated: c
                    .resources
                    .as_ref()
                    .and_then(|r| r.requests.as_ref())
                    .map(|r| resource_list(Some(r), &format!("{path}.resources.requests")))
                    .transpose()?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    // Upstream reads the first PodResizePending condition.
    let resize_infeasible = s
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "PodResizePending")
        .is_some_and(|c| c.reason.as_deref() == Some("Infeasible"));
    let pod_allocated = s
        .allocated_resources
        .as_ref()
        .map(|r| resource_list(Some(r), "status.allocatedResources"))
        .transpose()?;
    let pod_actuated = s
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .map(|r| resource_list(Some(r), "status.resources.requests"))
        .transpose()?;
    let out = StatusResources {
        resize_infeasible,
        containers,
        pod_allocated,
        pod_resources_set: s.resources.is_some(),
        pod_actuated,
    };
    Ok((out != StatusResources::default()).then_some(out))
}

/// `minAvailable` / `maxUnavailable`, validated as the API server does
/// (`ValidatePositiveIntOrPercent`, `IsNotMoreThan100Percent`).
fn int_or_percent(v: &IntOrString, path: &str) -> Result<IntOrPercent> {
    let invalid =
        |shown: String, detail: &str| err(path, format!("Invalid value: {shown}: {detail}"));
    let parsed = match v {
        IntOrString::Int(n) => IntOrPercent::Int(*n),
        IntOrString::String(s) => {
            let digits = s
                .strip_suffix('%')
                .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()));
            let Some(p) = digits.and_then(|d| d.parse::<i32>().ok()) else {
                return Err(invalid(
                    format!("{s:?}"),
                    "must be an integer or percentage (e.g '5%')",
                ));
            };
            IntOrPercent::Percent(p)
        }
    };
    match parsed {
        IntOrPercent::Int(n) if n < 0 => {
            Err(invalid(n.to_string(), "must be greater than or equal to 0"))
        }
        IntOrPercent::Percent(p) if p > 100 => Err(invalid(
            format!("\"{p}%\""),
            "must not be greater than 100%",
        )),
        ok => Ok(ok),
    }
}

/// Converts a PodDisruptionBudget (spec validated as the API server does).
pub fn pdb(p: &policy::PodDisruptionBudget) -> Result<PodDisruptionBudget> {
    let spec = p.spec.clone().unwrap_or_default();
    if spec.min_available.is_some() && spec.max_unavailable.is_some() {
        return Err(err(
            "spec",
            "Invalid value: minAvailable and maxUnavailable cannot be both set",
        ));
    }
    let selector = spec
        .selector
        .as_ref()
        .map(|s| label_selector(s, "spec.selector"))
        .transpose()?;
    let field = |v: &Option<IntOrString>, path: &str| {
        v.as_ref().map(|v| int_or_percent(v, path)).transpose()
    };
    let status = p.status.clone().unwrap_or_default();
    Ok(PodDisruptionBudget {
        namespace: p
            .metadata
            .namespace
            .clone()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "default".to_string()),
        name: p.metadata.name.clone().unwrap_or_default(),
        selector,
        min_available: field(&spec.min_available, "spec.minAvailable")?,
        max_unavailable: field(&spec.max_unavailable, "spec.maxUnavailable")?,
        disruptions_allowed: status.disruptions_allowed.unwrap_or(0),
        status_present: status.disruptions_allowed.is_some(),
        current_healthy: status.current_healthy.unwrap_or(0),
        desired_healthy: status.desired_healthy.unwrap_or(0),
        disrupted_pods: status
            .disrupted_pods
            .unwrap_or_default()
            .into_keys()
            .collect(),
    })
}
