//! Dynamic Resource Allocation objects (`resource.k8s.io/v1`) as the
//! DynamicResources plugin and the structured allocator read them:
//! DeviceClasses, ResourceSlices, ResourceClaims and ResourceClaimTemplates.
//!
//! Converted once from the API types: attribute and capacity names are
//! fully qualified (`domain/name`, the driver's domain when the slice left
//! it out), quantities parsed, node selectors pre-parsed. CEL selectors are
//! kept as source here and compiled (once, cached) by `rkube-dra`.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::resource::v1 as api;

use crate::convert::{self, FieldError};
use crate::quantity::Quantity;
use crate::raw::{LoadError, RawObject};
use crate::selector::NodeSelector;

/// The finalizer the scheduler puts on a claim it allocated.
pub const DELETE_PROTECTION_FINALIZER: &str = "resource.kubernetes.io/delete-protection";
/// The annotation the resource-claim controller puts on claims it
/// generated from a template (value: the pod claim's name).
pub const POD_CLAIM_NAME_ANNOTATION: &str = "resource.kubernetes.io/pod-claim-name";

/// The annotation (value `"true"`) of the claim the scheduler creates for
/// a pod's extended resources backed by DRA.
pub const EXTENDED_RESOURCE_CLAIM_ANNOTATION: &str =
    "resource.kubernetes.io/extended-resource-claim";

/// The prefix of every DeviceClass's implicit extended resource name.
pub const DEVICE_CLASS_RESOURCE_PREFIX: &str = "deviceclass.resource.kubernetes.io/";

/// A resource name a DeviceClass may serve (upstream's
/// `IsDRAExtendedResourceName`): an extended resource name, or a class's
/// implicit one.
pub fn is_dra_extended_resource_name(name: &str) -> bool {
    crate::resources::is_extended_resource_name(name)
        || name.starts_with(DEVICE_CLASS_RESOURCE_PREFIX)
}

/// An attribute value of a device.
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    /// `int`.
    Int(i64),
    /// `bool`.
    Bool(bool),
    /// `string`.
    String(String),
    /// `version`: a semantic version string.
    Version(String),
}

/// A capacity of a device.
#[derive(Debug, Clone, PartialEq)]
pub struct Capacity {
    /// Its name as the slice gives it (`memory`, or `domain/memory`): what
    /// a claim's `capacity.requests` names it by (the map's key is
    /// qualified with the driver's domain, as CEL reads it).
    pub name: String,
    /// `value`.
    pub value: Quantity,
    /// `requestPolicy.default`.
    pub default: Option<Quantity>,
    /// `requestPolicy.validValues`, ascending as validation requires.
    pub valid_values: Vec<Quantity>,
    /// `requestPolicy.validRange` (min, max, step).
    pub valid_range: Option<(Quantity, Option<Quantity>, Option<Quantity>)>,
}

/// Where the devices of a slice (or one device, with per-device node
/// selection) can be used.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum NodeScope {
    /// `nodeName`: one node.
    Name(String),
    /// `nodeSelector`.
    Selector(NodeSelector),
    /// `allNodes: true`.
    #[default]
    All,
    /// `perDeviceNodeSelection: true` (slices only): each device says.
    PerDevice,
}

/// A device taint.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DeviceTaint {
    /// Key.
    pub key: String,
    /// Value.
    pub value: String,
    /// `NoSchedule`, `NoExecute` or `None`.
    pub effect: String,
}

/// A device toleration.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DeviceToleration {
    /// Key (empty: all keys, with `Exists`).
    pub key: String,
    /// `Equal` (default) or `Exists`.
    pub operator: String,
    /// Value.
    pub value: String,
    /// Effect (empty: all effects).
    pub effect: String,
    /// `tolerationSeconds`.
    pub toleration_seconds: Option<i64>,
}

impl DeviceToleration {
    /// Tolerates `t` (the core Toleration rules, with `None` as an effect).
    pub fn tolerates(&self, t: &DeviceTaint) -> bool {
        if !self.effect.is_empty() && self.effect != t.effect {
            return false;
        }
        if !self.key.is_empty() && self.key != t.key {
            return false;
        }
        match self.operator.as_str() {
            "Exists" => true,
            "" | "Equal" => self.value == t.value,
            _ => false,
        }
    }
}

/// Counters a device consumes from one of its slice's counter sets.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CounterConsumption {
    /// `counterSet`.
    pub counter_set: String,
    /// Counter name → amount.
    pub counters: BTreeMap<String, Quantity>,
}

/// A device in a slice.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Device {
    /// Name (unique in its pool).
    pub name: String,
    /// Attributes by fully qualified name.
    pub attributes: BTreeMap<String, AttrValue>,
    /// Capacities by fully qualified name.
    pub capacity: BTreeMap<String, Capacity>,
    /// `consumesCounters`.
    pub consumes_counters: Vec<CounterConsumption>,
    /// The device's own node scope, with `perDeviceNodeSelection`.
    pub node: Option<NodeScope>,
    /// Taints.
    pub taints: Vec<DeviceTaint>,
    /// `allowMultipleAllocations`.
    pub allow_multiple_allocations: bool,
    /// `bindsToNode`.
    pub binds_to_node: bool,
    /// `bindingConditions`.
    pub binding_conditions: Vec<String>,
    /// `bindingFailureConditions`.
    pub binding_failure_conditions: Vec<String>,
}

/// A ResourceSlice.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ResourceSlice {
    /// Name.
    pub name: String,
    /// `spec.driver`.
    pub driver: String,
    /// `spec.pool.name`.
    pub pool: String,
    /// `spec.pool.generation`.
    pub generation: i64,
    /// `spec.pool.resourceSliceCount`.
    pub slice_count: i64,
    /// Where its devices can be used.
    pub node: NodeScope,
    /// `spec.sharedCounters`: counter set → counter → amount.
    pub shared_counters: BTreeMap<String, BTreeMap<String, Quantity>>,
    /// Devices.
    pub devices: Vec<Device>,
}

/// A DeviceTaintRule: one taint added to every device its selector
/// matches, as if the driver had published it in the slice.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DeviceTaintRule {
    /// Name.
    pub name: String,
    /// `spec.deviceSelector` (None: no device matches).
    pub selector: Option<DeviceTaintSelector>,
    /// `spec.taint`.
    pub taint: DeviceTaint,
}

/// `spec.deviceSelector` of a DeviceTaintRule: each part that is set must
/// match; the empty selector matches every device.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DeviceTaintSelector {
    /// `driver`.
    pub driver: Option<String>,
    /// `pool`.
    pub pool: Option<String>,
    /// `device` (the device's name).
    pub device: Option<String>,
}

impl DeviceTaintRule {
    /// Adds the taint to the devices of `slice` the selector matches
    /// (upstream's ResourceSlice tracker, `applyPatches`).
    pub fn apply(&self, slice: &mut ResourceSlice) {
        let Some(s) = &self.selector else {
            return;
        };
        if s.driver.as_ref().is_some_and(|d| *d != slice.driver)
            || s.pool.as_ref().is_some_and(|p| *p != slice.pool)
        {
            return;
        }
        for d in &mut slice.devices {
            if s.device.as_ref().is_none_or(|n| *n == d.name) {
                d.taints.push(self.taint.clone());
            }
        }
    }
}

/// A DeviceClass.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DeviceClass {
    /// Name.
    pub name: String,
    /// CEL selectors (all must be true).
    pub selectors: Vec<String>,
    /// Opaque configurations (driver, raw parameters as JSON).
    pub config: Vec<OpaqueConfig>,
    /// `spec.extendedResourceName`.
    pub extended_resource_name: Option<String>,
    /// `metadata.creationTimestamp` as RFC 3339 (empty when unset): among
    /// classes naming the same extended resource, the newest serves it.
    pub creation_timestamp: String,
}

/// An opaque device configuration.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct OpaqueConfig {
    /// Requests it applies to (empty: all).
    pub requests: Vec<String>,
    /// `opaque.driver`.
    pub driver: String,
    /// `opaque.parameters`.
    pub parameters: serde_json::Value,
}

/// How many devices a request wants.
#[derive(Debug, Clone, PartialEq)]
pub enum AllocationMode {
    /// `ExactCount` with `count`.
    ExactCount(i64),
    /// `All` matching devices.
    All,
}

/// One way to satisfy a request (the request itself, or one of its
/// `firstAvailable` subrequests).
#[derive(Debug, Clone, PartialEq)]
pub struct ExactRequest {
    /// The subrequest's name (empty for `exactly`).
    pub name: String,
    /// `deviceClassName`.
    pub device_class_name: String,
    /// CEL selectors.
    pub selectors: Vec<String>,
    /// Mode and count.
    pub mode: AllocationMode,
    /// `adminAccess`.
    pub admin_access: bool,
    /// `tolerations`.
    pub tolerations: Vec<DeviceToleration>,
    /// `capacity.requests` by fully qualified name.
    pub capacity: BTreeMap<String, Quantity>,
}

/// A device request of a claim.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceRequest {
    /// Name.
    pub name: String,
    /// `exactly`.
    pub exactly: Option<ExactRequest>,
    /// `firstAvailable`, in order of preference.
    pub first_available: Vec<ExactRequest>,
}

/// A claim constraint.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Constraint {
    /// Requests it covers (empty: all).
    pub requests: Vec<String>,
    /// `matchAttribute` (fully qualified).
    pub match_attribute: Option<String>,
    /// `distinctAttribute` (fully qualified).
    pub distinct_attribute: Option<String>,
}

/// The spec of a claim (or of a template's claims).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ClaimSpec {
    /// `devices.requests`.
    pub requests: Vec<DeviceRequest>,
    /// `devices.constraints`.
    pub constraints: Vec<Constraint>,
    /// `devices.config` (opaque ones).
    pub config: Vec<OpaqueConfig>,
}

/// One allocated device.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DeviceResult {
    /// The request (`request` or `request/subrequest`).
    pub request: String,
    /// Driver.
    pub driver: String,
    /// Pool.
    pub pool: String,
    /// Device.
    pub device: String,
    /// `adminAccess`.
    pub admin_access: bool,
    /// Tolerations the request had that tolerate the device's taints.
    pub tolerations: Vec<DeviceToleration>,
    /// `shareID`, for devices allowing multiple allocations.
    pub share_id: Option<String>,
    /// `consumedCapacity`.
    pub consumed_capacity: BTreeMap<String, Quantity>,
    /// `bindingConditions`.
    pub binding_conditions: Vec<String>,
    /// `bindingFailureConditions`.
    pub binding_failure_conditions: Vec<String>,
}

/// A configuration recorded in an allocation.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AllocatedConfig {
    /// `FromClass` or `FromClaim`.
    pub source: String,
    /// The configuration.
    pub config: OpaqueConfig,
}

/// `status.allocation`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Allocation {
    /// `devices.results`.
    pub devices: Vec<DeviceResult>,
    /// `devices.config`.
    pub config: Vec<AllocatedConfig>,
    /// `nodeSelector` (None: usable on every node).
    pub node_selector: Option<NodeSelector>,
}

/// A `status.reservedFor` entry.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Consumer {
    /// `apiGroup` (empty for pods).
    pub api_group: String,
    /// `resource` (`pods`).
    pub resource: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
}

/// A device's condition in a claim's `status.devices`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeviceCondition {
    /// `type`.
    pub type_: String,
    /// `status` (`True`, `False`, `Unknown`).
    pub status: String,
    /// `reason`.
    pub reason: String,
    /// `message`.
    pub message: String,
}

/// A claim's `status.devices` entry: what the driver reports for one
/// allocated device.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AllocatedDeviceStatus {
    /// Driver.
    pub driver: String,
    /// Pool.
    pub pool: String,
    /// Device.
    pub device: String,
    /// `conditions`.
    pub conditions: Vec<DeviceCondition>,
}

/// Which device request of a pod's extended-resource claim serves which
/// container's request (`status.extendedResourceClaimStatus.requestMappings`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestMapping {
    /// `containerName`.
    pub container_name: String,
    /// `resourceName`.
    pub resource_name: String,
    /// `requestName`.
    pub request_name: String,
}

/// A ResourceClaim.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ResourceClaim {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
    /// The owning pod's UID (controller owner reference of kind Pod).
    pub owner_pod_uid: Option<String>,
    /// The `resource.kubernetes.io/pod-claim-name` annotation.
    pub pod_claim_name: Option<String>,
    /// The owning pod's name (with [`ResourceClaim::owner_pod_uid`]).
    pub owner_pod_name: Option<String>,
    /// The scheduler's claim for the owning pod's extended resources
    /// backed by DRA (annotation `resource.kubernetes.io/extended-resource-claim: "true"`).
    pub extended_resource_claim: bool,
    /// `metadata.generateName` (set on a claim the scheduler has yet to
    /// create).
    pub generate_name: String,
    /// Spec.
    pub spec: ClaimSpec,
    /// `status.allocation`.
    pub allocation: Option<Allocation>,
    /// `status.reservedFor`.
    pub reserved_for: Vec<Consumer>,
    /// Being deleted.
    pub deleting: bool,
    /// Has the delete-protection finalizer.
    pub protected: bool,
    /// `metadata.resourceVersion` (empty in cluster files).
    pub resource_version: String,
    /// `status.allocation.allocationTimestamp` in Unix seconds.
    pub allocation_timestamp: Option<i64>,
    /// `status.devices`.
    pub device_statuses: Vec<AllocatedDeviceStatus>,
}

impl ResourceClaim {
    /// `namespace/name`.
    pub fn key(&self) -> (String, String) {
        (self.namespace.clone(), self.name.clone())
    }

    /// Reserved for the pod with this UID.
    pub fn is_reserved_for(&self, pod_uid: &str) -> bool {
        self.reserved_for
            .iter()
            .any(|c| c.resource == "pods" && c.api_group.is_empty() && c.uid == pod_uid)
    }
}

/// A ResourceClaimTemplate.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ResourceClaimTemplate {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `spec.spec`.
    pub spec: ClaimSpec,
}

/// A claim's (namespace, name), shared: copying a map of claims copies
/// no strings. Looked up by a plain `&(String, String)`.
pub type ClaimKey = Arc<(String, String)>;

/// The DRA objects of a cluster. Cheap to clone: classes and slices are
/// shared, claims and their keys are shared one by one (a scheduling cycle
/// that assumes one claim copies the map's nodes, not every claim, key and
/// device).
#[derive(Debug, Clone, Default)]
pub struct Dra {
    /// DeviceClasses by name.
    pub classes: Arc<BTreeMap<String, DeviceClass>>,
    /// ResourceSlices in input order.
    pub slices: Arc<Vec<ResourceSlice>>,
    /// Claims by (namespace, name).
    pub claims: BTreeMap<ClaimKey, Arc<ResourceClaim>>,
    /// Templates by (namespace, name).
    pub templates: BTreeMap<(String, String), ResourceClaimTemplate>,
    /// DeviceTaintRules, already applied to `slices`.
    pub taint_rules: Vec<DeviceTaintRule>,
}

impl Dra {
    /// The DeviceClass that serves extended resource `resource` (upstream's
    /// extended-resource cache, as filled by the informer's list, which
    /// comes in name order): `deviceclass.resource.kubernetes.io/<class>`
    /// names that class; an `extendedResourceName` names the newest class
    /// declaring it (ties: the first by name). A class that loses such a
    /// tie to a class listed before it gets no implicit name either, as
    /// upstream's cache skips it entirely.
    pub fn extended_resource_class(&self, resource: &str) -> Option<&DeviceClass> {
        if let Some(name) = resource.strip_prefix(DEVICE_CLASS_RESOURCE_PREFIX) {
            let class = self.classes.get(name)?;
            let shadowed = class.extended_resource_name.as_deref().is_some_and(|ext| {
                self.classes
                    .iter()
                    .take_while(|(n, _)| n.as_str() < name)
                    .any(|(_, c)| {
                        c.extended_resource_name.as_deref() == Some(ext)
                            && c.creation_timestamp >= class.creation_timestamp
                    })
            });
            return (!shadowed).then_some(class);
        }
        let mut winner: Option<&DeviceClass> = None;
        for c in self.classes.values() {
            if c.extended_resource_name.as_deref() != Some(resource) {
                continue;
            }
            if winner.is_none_or(|w| c.creation_timestamp > w.creation_timestamp) {
                winner = Some(c);
            }
        }
        winner
    }

    /// Of `requests`' non-zero scalar resources, those a DeviceClass
    /// serves (resource → quantity).
    pub fn served_requests(&self, requests: &crate::Resources) -> BTreeMap<String, i64> {
        requests
            .scalar
            .iter()
            .filter(|(name, &want)| {
                want != 0
                    && is_dra_extended_resource_name(name)
                    && self.extended_resource_class(name).is_some()
            })
            .map(|(n, &q)| (n.clone(), q))
            .collect()
    }

    /// No DRA object at all.
    pub fn is_empty(&self) -> bool {
        self.classes.is_empty()
            && self.slices.is_empty()
            && self.claims.is_empty()
            && self.templates.is_empty()
    }

    /// Clears a claim's allocation and `reservedFor` (what the scheduler's
    /// PostFilter writes for an idle claim); false when the claim is
    /// unknown or was not allocated.
    pub fn deallocate(&mut self, namespace: &str, name: &str) -> bool {
        let Some(c) = self
            .claims
            .get_mut(&(namespace.to_string(), name.to_string()))
        else {
            return false;
        };
        if c.allocation.is_none() {
            return false;
        }
        let c = Arc::make_mut(c);
        c.allocation = None;
        c.allocation_timestamp = None;
        c.reserved_for.clear();
        c.device_statuses.clear();
        true
    }

    /// The claim `namespace/name`.
    pub fn claim(&self, namespace: &str, name: &str) -> Option<&ResourceClaim> {
        self.claims
            .get(&(namespace.to_string(), name.to_string()))
            .map(|c| &**c)
    }

    /// Takes a DRA object; false for other kinds.
    pub fn take(&mut self, o: &RawObject) -> std::result::Result<bool, LoadError> {
        if !matches!(
            o.kind.as_str(),
            "DeviceClass"
                | "ResourceSlice"
                | "ResourceClaim"
                | "ResourceClaimTemplate"
                | "DeviceTaintRule"
        ) {
            return Ok(false);
        }
        let api_version = o
            .value
            .get("apiVersion")
            .and_then(|v| v.as_str())
            .unwrap_or("");
        if api_version != "resource.k8s.io/v1" {
            return Err(o.error(
                Some("apiVersion".into()),
                format!(
                    "Unsupported value: {api_version:?}: rkube reads {} as resource.k8s.io/v1 (what v1.37 serves and `kubectl get -o yaml` prints)",
                    o.kind
                ),
            ));
        }
        let fe = |e: FieldError| o.field_error(e);
        match o.kind.as_str() {
            "DeviceClass" => {
                let c: api::DeviceClass = o.decode()?;
                let class = device_class(&c).map_err(fe)?;
                Arc::make_mut(&mut self.classes).insert(class.name.clone(), class);
            }
            "ResourceSlice" => {
                let s: api::ResourceSlice = o.decode()?;
                let mut slice = resource_slice(&s).map_err(fe)?;
                for r in &self.taint_rules {
                    r.apply(&mut slice);
                }
                Arc::make_mut(&mut self.slices).push(slice);
            }
            "DeviceTaintRule" => {
                let r: api::DeviceTaintRule = o.decode()?;
                let rule = device_taint_rule(&r);
                for s in Arc::make_mut(&mut self.slices) {
                    rule.apply(s);
                }
                self.taint_rules.push(rule);
            }
            "ResourceClaim" => {
                let c: api::ResourceClaim = o.decode()?;
                let claim = resource_claim(&c).map_err(fe)?;
                self.claims.insert(Arc::new(claim.key()), Arc::new(claim));
            }
            "ResourceClaimTemplate" => {
                let t: api::ResourceClaimTemplate = o.decode()?;
                let namespace = namespace_of(&t.metadata);
                let name = t.metadata.name.clone().unwrap_or_default();
                convert::validate_subdomain_name(&name, "metadata.name").map_err(fe)?;
                let spec = claim_spec(
                    t.spec
                        .as_ref()
                        .and_then(|s| s.spec.as_ref())
                        .and_then(|s| s.devices.as_ref()),
                    "spec.spec.devices",
                )
                .map_err(fe)?;
                self.templates.insert(
                    (namespace.clone(), name.clone()),
                    ResourceClaimTemplate {
                        namespace,
                        name,
                        spec,
                    },
                );
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}

type Result<T> = std::result::Result<T, FieldError>;

fn ferr(path: impl Into<String>, message: impl Into<String>) -> FieldError {
    FieldError {
        path: path.into(),
        message: message.into(),
    }
}

/// An object's namespace, `default` when unset (as cluster files mean it).
pub(crate) fn namespace_of(
    m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> String {
    m.namespace
        .clone()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "default".into())
}

/// A quantity field, or the field error naming it.
pub(crate) fn quantity(
    q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity,
    path: &str,
) -> Result<Quantity> {
    Quantity::parse(&q.0).map_err(|e| ferr(path, format!("Invalid value: {:?}: {e}", q.0)))
}

/// `domain/name`, with the driver's domain when `name` has none.
pub fn qualify(name: &str, driver: &str) -> String {
    if name.contains('/') {
        name.to_string()
    } else {
        format!("{driver}/{name}")
    }
}

fn attribute(a: &api::DeviceAttribute, path: &str) -> Result<AttrValue> {
    let mut set = Vec::new();
    if let Some(v) = a.int {
        set.push(AttrValue::Int(v));
    }
    if let Some(v) = a.bool {
        set.push(AttrValue::Bool(v));
    }
    if let Some(v) = &a.string {
        set.push(AttrValue::String(v.clone()));
    }
    if let Some(v) = &a.version {
        set.push(AttrValue::Version(v.clone()));
    }
    if a.ints.is_some() || a.bools.is_some() || a.strings.is_some() || a.versions.is_some() {
        return Err(ferr(
            path,
            "Forbidden: list-type attributes need the DRAListTypeAttributes feature gate, off in v1.37",
        ));
    }
    match set.len() {
        1 => Ok(set.pop().expect("one value")),
        0 => Err(ferr(
            path,
            "Required value: exactly one value must be specified",
        )),
        _ => Err(ferr(
            path,
            "Invalid value: exactly one value must be specified",
        )),
    }
}

fn node_scope(
    name: Option<&String>,
    selector: Option<&k8s_openapi::api::core::v1::NodeSelector>,
    all: Option<bool>,
    per_device: Option<bool>,
    path: &str,
) -> Result<Option<NodeScope>> {
    let mut scopes = Vec::new();
    if let Some(n) = name.filter(|n| !n.is_empty()) {
        scopes.push(NodeScope::Name(n.clone()));
    }
    if let Some(s) = selector {
        scopes.push(NodeScope::Selector(convert::node_selector(
            s,
            &format!("{path}nodeSelector"),
        )?));
    }
    if all == Some(true) {
        scopes.push(NodeScope::All);
    }
    if per_device == Some(true) {
        scopes.push(NodeScope::PerDevice);
    }
    match scopes.len() {
        0 => Ok(None),
        1 => Ok(scopes.pop()),
        _ => Err(ferr(
            format!("{path}nodeName"),
            "Invalid value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required",
        )),
    }
}

fn counters(m: &BTreeMap<String, api::Counter>, path: &str) -> Result<BTreeMap<String, Quantity>> {
    m.iter()
        .map(|(k, c)| {
            Ok((
                k.clone(),
                quantity(&c.value, &format!("{path}[{k}].value"))?,
            ))
        })
        .collect()
}

fn taint(t: &api::DeviceTaint) -> DeviceTaint {
    DeviceTaint {
        key: t.key.clone(),
        value: t.value.clone().unwrap_or_default(),
        effect: t.effect.clone(),
    }
}

fn taints(ts: Option<&Vec<api::DeviceTaint>>) -> Vec<DeviceTaint> {
    ts.iter().flat_map(|v| v.iter()).map(taint).collect()
}

/// A DeviceTaintRule as the scheduler applies it.
pub fn device_taint_rule(r: &api::DeviceTaintRule) -> DeviceTaintRule {
    DeviceTaintRule {
        name: r.metadata.name.clone().unwrap_or_default(),
        selector: r
            .spec
            .device_selector
            .as_ref()
            .map(|s| DeviceTaintSelector {
                driver: s.driver.clone(),
                pool: s.pool.clone(),
                device: s.device.clone(),
            }),
        taint: taint(&r.spec.taint),
    }
}

fn device(d: &api::Device, driver: &str, per_device: bool, path: &str) -> Result<Device> {
    let mut attributes = BTreeMap::new();
    for (k, a) in d.attributes.iter().flatten() {
        attributes.insert(
            qualify(k, driver),
            attribute(a, &format!("{path}.attributes[{k}]"))?,
        );
    }
    let mut capacity = BTreeMap::new();
    for (k, c) in d.capacity.iter().flatten() {
        let p = format!("{path}.capacity[{k}]");
        let policy = c.request_policy.as_ref();
        let mut valid_values = Vec::new();
        for (i, v) in policy
            .and_then(|p| p.valid_values.as_ref())
            .into_iter()
            .flatten()
            .enumerate()
        {
            valid_values.push(quantity(v, &format!("{p}.requestPolicy.validValues[{i}]"))?);
        }
        let valid_range = match policy.and_then(|p| p.valid_range.as_ref()) {
            None => None,
            Some(r) => Some((
                quantity(&r.min, &format!("{p}.requestPolicy.validRange.min"))?,
                r.max
                    .as_ref()
                    .map(|q| quantity(q, &format!("{p}.requestPolicy.validRange.max")))
                    .transpose()?,
                r.step
                    .as_ref()
                    .map(|q| quantity(q, &format!("{p}.requestPolicy.validRange.step")))
                    .transpose()?,
            )),
        };
        capacity.insert(
            qualify(k, driver),
            Capacity {
                name: k.clone(),
                value: quantity(&c.value, &format!("{p}.value"))?,
                default: policy
                    .and_then(|p| p.default.as_ref())
                    .map(|q| quantity(q, &format!("{p}.requestPolicy.default")))
                    .transpose()?,
                valid_values,
                valid_range,
            },
        );
    }
    let mut consumes = Vec::new();
    for (i, c) in d.consumes_counters.iter().flatten().enumerate() {
        consumes.push(CounterConsumption {
            counter_set: c.counter_set.clone(),
            counters: counters(
                &c.counters,
                &format!("{path}.consumesCounters[{i}].counters"),
            )?,
        });
    }
    let node = node_scope(
        d.node_name.as_ref(),
        d.node_selector.as_ref(),
        d.all_nodes,
        None,
        &format!("{path}."),
    )?;
    if per_device && node.is_none() {
        return Err(ferr(
            format!("{path}.nodeName"),
            "Required value: exactly one of `nodeName`, `nodeSelector`, `allNodes` is required when `perDeviceNodeSelection` is set",
        ));
    }
    if !per_device && node.is_some() {
        return Err(ferr(
            format!("{path}.nodeName"),
            "Forbidden: node selection per device needs `perDeviceNodeSelection` on the slice",
        ));
    }
    Ok(Device {
        name: d.name.clone(),
        attributes,
        capacity,
        consumes_counters: consumes,
        node,
        taints: taints(d.taints.as_ref()),
        allow_multiple_allocations: d.allow_multiple_allocations == Some(true),
        binds_to_node: d.binds_to_node == Some(true),
        binding_conditions: d.binding_conditions.clone().unwrap_or_default(),
        binding_failure_conditions: d.binding_failure_conditions.clone().unwrap_or_default(),
    })
}

/// Converts a ResourceSlice.
pub fn resource_slice(s: &api::ResourceSlice) -> Result<ResourceSlice> {
    let name = s.metadata.name.clone().unwrap_or_default();
    convert::validate_subdomain_name(&name, "metadata.name")?;
    let spec = &s.spec;
    if spec.driver.is_empty() {
        return Err(ferr("spec.driver", "Required value"));
    }
    if spec.driver.len() > 63 {
        return Err(ferr(
            "spec.driver",
            "Too long: may not be more than 63 bytes",
        ));
    }
    convert::validate_subdomain_name(&spec.driver, "spec.driver")?;
    if spec.pool.name.is_empty() {
        return Err(ferr("spec.pool.name", "Required value"));
    }
    if spec.pool.resource_slice_count <= 0 {
        return Err(ferr(
            "spec.pool.resourceSliceCount",
            format!(
                "Invalid value: {}: must be greater than zero",
                spec.pool.resource_slice_count
            ),
        ));
    }
    let node = node_scope(
        spec.node_name.as_ref(),
        spec.node_selector.as_ref(),
        spec.all_nodes,
        spec.per_device_node_selection,
        "spec.",
    )?
    .ok_or_else(|| {
        ferr(
            "spec",
            "Required value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required",
        )
    })?;
    let per_device = node == NodeScope::PerDevice;
    let mut shared_counters = BTreeMap::new();
    for (i, cs) in spec.shared_counters.iter().flatten().enumerate() {
        shared_counters.insert(
            cs.name.clone(),
            counters(&cs.counters, &format!("spec.sharedCounters[{i}].counters"))?,
        );
    }
    let mut devices = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for (i, d) in spec.devices.iter().flatten().enumerate() {
        let path = format!("spec.devices[{i}]");
        if !seen.insert(d.name.as_str()) {
            return Err(ferr(
                format!("{path}.name"),
                format!("Duplicate value: {:?}", d.name),
            ));
        }
        devices.push(device(d, &spec.driver, per_device, &path)?);
    }
    Ok(ResourceSlice {
        name,
        driver: spec.driver.clone(),
        pool: spec.pool.name.clone(),
        generation: spec.pool.generation,
        slice_count: spec.pool.resource_slice_count,
        node,
        shared_counters,
        devices,
    })
}

fn selectors(s: Option<&Vec<api::DeviceSelector>>, path: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for (i, sel) in s.into_iter().flatten().enumerate() {
        match &sel.cel {
            Some(c) => out.push(c.expression.clone()),
            None => return Err(ferr(format!("{path}[{i}].cel"), "Required value")),
        }
    }
    Ok(out)
}

fn opaque_configs<'a>(
    items: impl Iterator<Item = (Vec<String>, Option<&'a api::OpaqueDeviceConfiguration>)>,
    path: &str,
) -> Result<Vec<OpaqueConfig>> {
    let mut out = Vec::new();
    for (i, (requests, opaque)) in items.enumerate() {
        let o = opaque.ok_or_else(|| ferr(format!("{path}[{i}].opaque"), "Required value"))?;
        out.push(OpaqueConfig {
            requests,
            driver: o.driver.clone(),
            parameters: o.parameters.0.clone(),
        });
    }
    Ok(out)
}

/// Converts a DeviceClass.
pub fn device_class(c: &api::DeviceClass) -> Result<DeviceClass> {
    let spec = c.spec.clone().unwrap_or_default();
    let name = c.metadata.name.clone().unwrap_or_default();
    convert::validate_subdomain_name(&name, "metadata.name")?;
    Ok(DeviceClass {
        name,
        selectors: selectors(spec.selectors.as_ref(), "spec.selectors")?,
        config: opaque_configs(
            spec.config
                .iter()
                .flatten()
                .map(|c| (Vec::new(), c.opaque.as_ref())),
            "spec.config",
        )?,
        extended_resource_name: spec.extended_resource_name.clone(),
        creation_timestamp: c
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.to_string())
            .unwrap_or_default(),
    })
}

fn tolerations(t: Option<&Vec<api::DeviceToleration>>) -> Vec<DeviceToleration> {
    t.iter()
        .flat_map(|v| v.iter())
        .map(|t| DeviceToleration {
            key: t.key.clone().unwrap_or_default(),
            operator: t.operator.clone().unwrap_or_else(|| "Equal".into()),
            value: t.value.clone().unwrap_or_default(),
            effect: t.effect.clone().unwrap_or_default(),
            toleration_seconds: t.toleration_seconds,
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn exact(
    name: &str,
    class: &str,
    sel: Option<&Vec<api::DeviceSelector>>,
    mode: Option<&String>,
    count: Option<i64>,
    admin_access: Option<bool>,
    tol: Option<&Vec<api::DeviceToleration>>,
    capacity: Option<&api::CapacityRequirements>,
    path: &str,
) -> Result<ExactRequest> {
    if class.is_empty() {
        return Err(ferr(format!("{path}.deviceClassName"), "Required value"));
    }
    let mode = match mode.map(String::as_str) {
        None | Some("ExactCount") => {
            let n = count.unwrap_or(1);
            if n <= 0 {
                return Err(ferr(
                    format!("{path}.count"),
                    format!("Invalid value: {n}: must be greater than zero"),
                ));
            }
            AllocationMode::ExactCount(n)
        }
        Some("All") => {
            if count.is_some_and(|c| c != 0) {
                return Err(ferr(
                    format!("{path}.count"),
                    "Invalid value: must not be specified when allocationMode is 'All'",
                ));
            }
            AllocationMode::All
        }
        Some(other) => {
            return Err(ferr(
                format!("{path}.allocationMode"),
                format!("Unsupported value: {other:?}: supported values: \"All\", \"ExactCount\""),
            ))
        }
    };
    let mut cap = BTreeMap::new();
    for (k, q) in capacity
        .and_then(|c| c.requests.as_ref())
        .into_iter()
        .flatten()
    {
        cap.insert(
            k.clone(),
            quantity(q, &format!("{path}.capacity.requests[{k}]"))?,
        );
    }
    Ok(ExactRequest {
        name: name.to_string(),
        device_class_name: class.to_string(),
        selectors: selectors(sel, &format!("{path}.selectors"))?,
        mode,
        admin_access: admin_access == Some(true),
        tolerations: tolerations(tol),
        capacity: cap,
    })
}

fn claim_spec(d: Option<&api::DeviceClaim>, path: &str) -> Result<ClaimSpec> {
    let Some(d) = d else {
        return Ok(ClaimSpec::default());
    };
    let mut requests = Vec::new();
    let mut names = std::collections::BTreeSet::new();
    for (i, r) in d.requests.iter().flatten().enumerate() {
        let p = format!("{path}.requests[{i}]");
        if !names.insert(r.name.as_str()) {
            return Err(ferr(
                format!("{p}.name"),
                format!("Duplicate value: {:?}", r.name),
            ));
        }
        let exactly = match &r.exactly {
            None => None,
            Some(e) => {
                if e.derived_attributes.as_ref().is_some_and(|v| !v.is_empty()) {
                    return Err(ferr(
                        format!("{p}.exactly.derivedAttributes"),
                        "Forbidden: derived attributes need the DRADerivedAttributes feature gate, off in v1.37",
                    ));
                }
                Some(exact(
                    "",
                    &e.device_class_name,
                    e.selectors.as_ref(),
                    e.allocation_mode.as_ref(),
                    e.count,
                    e.admin_access,
                    e.tolerations.as_ref(),
                    e.capacity.as_ref(),
                    &format!("{p}.exactly"),
                )?)
            }
        };
        let mut first_available = Vec::new();
        for (j, s) in r.first_available.iter().flatten().enumerate() {
            first_available.push(exact(
                &s.name,
                &s.device_class_name,
                s.selectors.as_ref(),
                s.allocation_mode.as_ref(),
                s.count,
                None,
                s.tolerations.as_ref(),
                s.capacity.as_ref(),
                &format!("{p}.firstAvailable[{j}]"),
            )?);
        }
        if exactly.is_some() != first_available.is_empty() {
            return Err(ferr(
                p,
                "Invalid value: exactly one of `exactly` or `firstAvailable` is required",
            ));
        }
        requests.push(DeviceRequest {
            name: r.name.clone(),
            exactly,
            first_available,
        });
    }
    let constraints = d
        .constraints
        .iter()
        .flatten()
        .map(|c| Constraint {
            requests: c.requests.clone().unwrap_or_default(),
            match_attribute: c.match_attribute.clone(),
            distinct_attribute: c.distinct_attribute.clone(),
        })
        .collect();
    let config = opaque_configs(
        d.config
            .iter()
            .flatten()
            .map(|c| (c.requests.clone().unwrap_or_default(), c.opaque.as_ref())),
        &format!("{path}.config"),
    )?;
    Ok(ClaimSpec {
        requests,
        constraints,
        config,
    })
}

fn allocation(a: &api::AllocationResult, path: &str) -> Result<Allocation> {
    let devices = a.devices.as_ref();
    let mut results = Vec::new();
    for (i, r) in devices
        .and_then(|d| d.results.as_ref())
        .into_iter()
        .flatten()
        .enumerate()
    {
        let mut consumed = BTreeMap::new();
        for (k, q) in r.consumed_capacity.iter().flatten() {
            consumed.insert(
                qualify(k, &r.driver),
                quantity(
                    q,
                    &format!("{path}.devices.results[{i}].consumedCapacity[{k}]"),
                )?,
            );
        }
        results.push(DeviceResult {
            request: r.request.clone(),
            driver: r.driver.clone(),
            pool: r.pool.clone(),
            device: r.device.clone(),
            admin_access: r.admin_access == Some(true),
            tolerations: tolerations(r.tolerations.as_ref()),
            share_id: r.share_id.clone(),
            consumed_capacity: consumed,
            binding_conditions: r.binding_conditions.clone().unwrap_or_default(),
            binding_failure_conditions: r.binding_failure_conditions.clone().unwrap_or_default(),
        });
    }
    let config = devices
        .and_then(|d| d.config.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|c| {
            c.opaque.as_ref().map(|o| AllocatedConfig {
                source: c.source.clone(),
                config: OpaqueConfig {
                    requests: c.requests.clone().unwrap_or_default(),
                    driver: o.driver.clone(),
                    parameters: o.parameters.0.clone(),
                },
            })
        })
        .collect();
    Ok(Allocation {
        devices: results,
        config,
        node_selector: a
            .node_selector
            .as_ref()
            .map(|s| convert::node_selector(s, &format!("{path}.nodeSelector")))
            .transpose()?,
    })
}

/// Converts a ResourceClaim.
pub fn resource_claim(c: &api::ResourceClaim) -> Result<ResourceClaim> {
    let namespace = namespace_of(&c.metadata);
    let name = c.metadata.name.clone().unwrap_or_default();
    convert::validate_subdomain_name(&name, "metadata.name")?;
    let status = c.status.as_ref();
    let owner = c
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true) && o.kind == "Pod" && o.api_version == "v1");
    Ok(ResourceClaim {
        uid: c
            .metadata
            .uid
            .clone()
            .unwrap_or_else(|| format!("claim:{namespace}/{name}")),
        owner_pod_uid: owner.map(|o| o.uid.clone()),
        owner_pod_name: owner.map(|o| o.name.clone()),
        extended_resource_claim: c
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(EXTENDED_RESOURCE_CLAIM_ANNOTATION))
            .is_some_and(|v| v == "true"),
        generate_name: String::new(),
        pod_claim_name: c
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(POD_CLAIM_NAME_ANNOTATION))
            .cloned(),
        spec: claim_spec(
            c.spec.as_ref().and_then(|s| s.devices.as_ref()),
            "spec.devices",
        )?,
        allocation: status
            .and_then(|s| s.allocation.as_ref())
            .map(|a| allocation(a, "status.allocation"))
            .transpose()?,
        reserved_for: status
            .and_then(|s| s.reserved_for.as_ref())
            .into_iter()
            .flatten()
            .map(|r| Consumer {
                api_group: r.api_group.clone().unwrap_or_default(),
                resource: r.resource.clone(),
                name: r.name.clone(),
                uid: r.uid.clone(),
            })
            .collect(),
        deleting: c.metadata.deletion_timestamp.is_some(),
        protected: c
            .metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == DELETE_PROTECTION_FINALIZER),
        resource_version: c.metadata.resource_version.clone().unwrap_or_default(),
        allocation_timestamp: status
            .and_then(|s| s.allocation.as_ref())
            .and_then(|a| a.allocation_timestamp.as_ref())
            .map(|t| t.0.as_second()),
        device_statuses: status
            .and_then(|s| s.devices.as_ref())
            .into_iter()
            .flatten()
            .map(|d| AllocatedDeviceStatus {
                driver: d.driver.clone(),
                pool: d.pool.clone(),
                device: d.device.clone(),
                conditions: d
                    .conditions
                    .iter()
                    .flatten()
                    .map(|c| DeviceCondition {
                        type_: c.type_.clone(),
                        status: c.status.clone(),
                        reason: c.reason.clone(),
                        message: c.message.clone(),
                    })
                    .collect(),
            })
            .collect(),
        namespace,
        name,
    })
}

/// The resource-claim controller, acting at once as the simulator's other
/// controllers do: every pod claim naming a template gets its claim,
/// created from the template with the pod as controlling owner and named as
/// the controller names it (`<pod>-<claim>-` and five characters, both
/// parts shortened in proportion past 57 characters), and the pod's
/// `status.resourceClaimStatuses` entry. Pod claims whose template does
/// not exist are left alone: the plugin keeps such pods waiting.
pub fn generate_claims(pods: &mut [crate::objects::Pod], dra: &mut Dra) {
    for pod in pods.iter_mut() {
        for pc in pod.resource_claims.clone() {
            let Some(template) = &pc.template_name else {
                continue;
            };
            if pod.claim_statuses.iter().any(|(n, _)| *n == pc.name) {
                continue;
            }
            let Some(t) = dra
                .templates
                .get(&(pod.namespace.clone(), template.clone()))
            else {
                continue;
            };
            let name = claim_name_for(&pod.name, &pc.name, &pod.uid);
            let claim = ResourceClaim {
                namespace: pod.namespace.clone(),
                uid: format!("claim:{}/{name}", pod.namespace),
                name: name.clone(),
                owner_pod_uid: Some(pod.uid.clone()),
                owner_pod_name: Some(pod.name.clone()),
                pod_claim_name: Some(pc.name.clone()),
                spec: t.spec.clone(),
                ..Default::default()
            };
            dra.claims.insert(Arc::new(claim.key()), Arc::new(claim));
            pod.claim_statuses.push((pc.name.clone(), Some(name)));
        }
    }
}

/// The `i`th name the API server could give an object created with
/// `generateName: base` (deterministic for `seed`): `base`, cut to 58
/// characters, and five more.
pub fn generated_object_name(base: &str, seed: &str, i: usize) -> String {
    let mut cut = base.len().min(58);
    while !base.is_char_boundary(cut) {
        cut -= 1;
    }
    let random = &crate::names::generated_name("", seed, i)[1..];
    format!("{}{random}", &base[..cut])
}

/// The name the resource-claim controller gives pod `pod`'s claim `claim`
/// (the random part derived from `seed`).
pub fn claim_name_for(pod: &str, claim: &str, seed: &str) -> String {
    const MAX_BASE: usize = 57;
    let random = &crate::names::generated_name("", &format!("{seed}/{claim}"), 0)[1..];
    let base = format!("{pod}-{claim}-");
    if base.len() <= MAX_BASE {
        return format!("{base}{random}");
    }
    // Both parts shortened in proportion; no trailing hyphen, the random
    // part follows directly (as generateName without one).
    let total = base.len();
    format!(
        "{}-{}{random}",
        prefix(pod, pod.len() * MAX_BASE / total),
        prefix(claim, claim.len() * MAX_BASE / total)
    )
}

/// The first `n` bytes of `s`, backed off to a character boundary.
fn prefix(s: &str, mut n: usize) -> &str {
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    &s[..n]
}
