//! PodGroups (`scheduling.k8s.io/v1beta1`, read by the scheduler when the
//! GenericWorkload gate is on): what the scheduler reads of them. Pods join
//! one through `spec.schedulingGroup.podGroupName` ([`crate::Pod::pod_group`]).
//! Workloads, which own PodGroups, are never read by the scheduler.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::scheduling::v1beta1 as api;

use crate::convert::{self, err, FieldError, PriorityClasses};
use crate::raw::{LoadError, RawObject};

/// A PodGroup as the scheduler sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodGroup {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `spec.schedulingPolicy.gang.minCount`; `None` for the basic policy.
    pub min_count: Option<i32>,
    /// `spec.priority`, as the Priority admission plugin resolves it from
    /// `spec.priorityClassName` when unset.
    pub priority: i32,
    /// `status.conditions[PodGroupInitiallyScheduled]` is True: the
    /// scheduler never sets it back to False.
    pub initially_scheduled: bool,
    /// `spec.disruptionMode.all`: the group's running pods are preempted
    /// together or not at all (the default, `single`, lets each go alone).
    pub disruption_all: bool,
}

impl PodGroup {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The number of pods the group needs placed together (upstream's
    /// `getMinCount`): the gang's `minCount`, 1 for the basic policy.
    pub fn needed(&self) -> usize {
        self.min_count.map_or(1, |m| m.max(1) as usize)
    }
}

/// The condition the scheduler writes on a PodGroup.
pub const INITIALLY_SCHEDULED: &str = "PodGroupInitiallyScheduled";

/// PodGroups by namespace and name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodGroups {
    /// `(namespace, name)` → group.
    pub by_key: BTreeMap<(String, String), Arc<PodGroup>>,
}

impl PodGroups {
    /// The group `name` in `namespace`.
    pub fn get(&self, namespace: &str, name: &str) -> Option<&Arc<PodGroup>> {
        self.by_key.get(&(namespace.to_string(), name.to_string()))
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// Reads a `PodGroup` object; `Ok(false)` for other kinds.
    pub fn take(&mut self, o: &RawObject, classes: &PriorityClasses) -> Result<bool, LoadError> {
        if o.kind != "PodGroup" {
            return Ok(false);
        }
        let api_version = o.value["apiVersion"].as_str().unwrap_or("");
        if api_version != "scheduling.k8s.io/v1beta1" {
            return Err(o.error(
                Some("apiVersion".into()),
                format!("unsupported apiVersion {api_version:?} for a PodGroup: rkube reads scheduling.k8s.io/v1beta1 (CompositePodGroup hierarchies of v1alpha3 need the alpha CompositePodGroup gate, which rkube does not implement)"),
            ));
        }
        let pg: api::PodGroup = o.decode()?;
        let group = pod_group(&pg, classes).map_err(|e| o.field_error(e))?;
        let key = (group.namespace.clone(), group.name.clone());
        if self.by_key.contains_key(&key) {
            return Err(o.error(
                Some("metadata.name".into()),
                "Duplicate value: a PodGroup with this name appears twice",
            ));
        }
        self.by_key.insert(key, Arc::new(group));
        Ok(true)
    }
}

/// Converts and validates one PodGroup.
pub fn pod_group(pg: &api::PodGroup, classes: &PriorityClasses) -> Result<PodGroup, FieldError> {
    let name = pg
        .metadata
        .name
        .clone()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| err("metadata.name", "Required value"))?;
    convert::validate_subdomain_name(&name, "metadata.name")?;
    let namespace = pg
        .metadata
        .namespace
        .clone()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "default".to_string());
    convert::validate_label_name(&namespace, "metadata.namespace")?;
    let spec = &pg.spec;
    let policy = &spec.scheduling_policy;
    let min_count = match (&policy.basic, &policy.gang) {
        (Some(_), None) => None,
        (None, Some(g)) if g.min_count >= 1 => Some(g.min_count),
        (None, Some(g)) => {
            return Err(err(
                "spec.schedulingPolicy.gang.minCount",
                format!(
                    "Invalid value: {}: must be greater than or equal to 1",
                    g.min_count
                ),
            ))
        }
        _ => {
            return Err(err(
                "spec.schedulingPolicy",
                "Invalid value: must specify exactly one of: `basic`, `gang`",
            ))
        }
    };
    if spec.resource_claims.as_ref().is_some_and(|c| !c.is_empty()) {
        return Err(err(
            "spec.resourceClaims",
            "Forbidden: pod group resource claims need the DRAWorkloadResourceClaims gate (beta, off by default), which rkube does not implement",
        ));
    }
    let priority = match spec.priority {
        Some(p) => p,
        None => classes.resolve(spec.priority_class_name.as_deref())?.0,
    };
    let disruption_all = match &spec.disruption_mode {
        None => false,
        Some(m) => match (&m.single, &m.all) {
            (Some(_), None) => false,
            (None, Some(_)) => true,
            _ => {
                return Err(err(
                    "spec.disruptionMode",
                    "Invalid value: must specify exactly one of: `single`, `all`",
                ))
            }
        },
    };
    let initially_scheduled = pg
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == INITIALLY_SCHEDULED && c.status == "True");
    Ok(PodGroup {
        namespace,
        name,
        min_count,
        priority,
        initially_scheduled,
        disruption_all,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raw::parse_documents;

    fn load(text: &str) -> Result<PodGroups, LoadError> {
        let mut groups = PodGroups::default();
        let classes = {
            let mut c = PriorityClasses::with_builtins();
            c.by_name.insert("high".into(), (1000, false));
            c
        };
        for o in parse_documents("f.yaml", text)? {
            assert!(groups.take(&o, &classes)?);
        }
        Ok(groups)
    }

    const HEAD: &str = "apiVersion: scheduling.k8s.io/v1beta1\nkind: PodGroup\nmetadata: {name: g, namespace: ns}\n";

    #[test]
    fn gang_and_basic_policies_and_priority() {
        let g = load(&format!(
            "{HEAD}spec: {{schedulingPolicy: {{gang: {{minCount: 3}}}}, priorityClassName: high}}"
        ))
        .unwrap();
        let g = g.get("ns", "g").unwrap();
        assert_eq!((g.min_count, g.needed(), g.priority), (Some(3), 3, 1000));
        let b = load(&format!(
            "{HEAD}spec: {{schedulingPolicy: {{basic: {{}}}}, priority: 7}}"
        ))
        .unwrap();
        let b = b.get("ns", "g").unwrap();
        assert_eq!((b.min_count, b.needed(), b.priority), (None, 1, 7));
        assert!(!b.disruption_all);
        let a = load(&format!(
            "{HEAD}spec: {{schedulingPolicy: {{basic: {{}}}}, disruptionMode: {{all: {{}}}}}}"
        ))
        .unwrap();
        assert!(a.get("ns", "g").unwrap().disruption_all);
    }

    #[test]
    fn invalid_groups_name_the_field() {
        let e = load(&format!(
            "{HEAD}spec: {{schedulingPolicy: {{gang: {{minCount: 0}}}}}}"
        ))
        .unwrap_err();
        assert_eq!(
            e.field.as_deref(),
            Some("spec.schedulingPolicy.gang.minCount")
        );
        let e = load(&format!(
            "{HEAD}spec: {{schedulingPolicy: {{basic: {{}}}}, disruptionMode: {{all: {{}}, single: {{}}}}}}"
        ))
        .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("spec.disruptionMode"));
        let e = load(&format!("{HEAD}spec: {{schedulingPolicy: {{}}}}")).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("spec.schedulingPolicy"));
        let e = load(&format!(
            "{HEAD}spec: {{schedulingPolicy: {{basic: {{}}}}, priorityClassName: nope}}"
        ))
        .unwrap_err();
        assert!(e.message.contains("no PriorityClass with name nope"), "{e}");
        let e = load(&format!("{HEAD}spec: {{schedulingPolicy: {{basic: {{}}}}}}\n---\n{HEAD}spec: {{schedulingPolicy: {{basic: {{}}}}}}")).unwrap_err();
        assert!(e.message.contains("appears twice"), "{e}");
        let e = load("apiVersion: scheduling.k8s.io/v1alpha3\nkind: PodGroup\nmetadata: {name: g}\nspec: {schedulingPolicy: {basic: {}}}").unwrap_err();
        assert_eq!(e.field.as_deref(), Some("apiVersion"));
    }

    #[test]
    fn the_initially_scheduled_condition_is_read() {
        let g = load(&format!("{HEAD}spec: {{schedulingPolicy: {{basic: {{}}}}}}\nstatus: {{conditions: [{{type: PodGroupInitiallyScheduled, status: 'True', reason: Scheduled, message: '', lastTransitionTime: '2026-01-01T00:00:00Z'}}]}}")).unwrap();
        assert!(g.get("ns", "g").unwrap().initially_scheduled);
    }
}
