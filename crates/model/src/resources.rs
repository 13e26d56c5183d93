//! Resource vectors as the scheduler counts them (upstream's `framework.Resource`):
//! milli-CPU, bytes of memory and ephemeral storage, pod slots, and scalar
//! resources (extended, hugepages, attachable volumes), all as integers.

use std::collections::BTreeMap;

use crate::quantity::{format_bytes, format_milli, Quantity};

/// CPU request the scheduler assumes for a container that sets none (100m).
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
/// Memory request the scheduler assumes for a container that sets none (200Mi).
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// Well-known resource names.
pub mod names {
    /// `cpu`
    pub const CPU: &str = "cpu";
    /// `memory`
    pub const MEMORY: &str = "memory";
    /// `ephemeral-storage`
    pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
    /// `pods`
    pub const PODS: &str = "pods";
}

/// A raw resource list as written in a manifest: name → parsed quantity.
pub type ResourceList = BTreeMap<String, Quantity>;

/// True for names upstream treats as scalar resources: extended resources,
/// `hugepages-*`, `attachable-volumes-*` and `*kubernetes.io/*` prefixed names.
pub fn is_scalar_resource_name(name: &str) -> bool {
    is_extended_resource_name(name)
        || name.starts_with("hugepages-")
        || name.starts_with("attachable-volumes-")
        || is_prefixed_native_resource(name)
}

/// Upstream's `IsPrefixedNativeResource`: the name is in the `kubernetes.io/` domain.
pub fn is_prefixed_native_resource(name: &str) -> bool {
    name.contains("kubernetes.io/")
}

/// Upstream's `IsExtendedResourceName`: a domain-prefixed name outside
/// `kubernetes.io/` that is not a quota `requests.` name.
pub fn is_extended_resource_name(name: &str) -> bool {
    let native = !name.contains('/') || is_prefixed_native_resource(name);
    !native && !name.starts_with("requests.")
}

/// An aggregated resource vector.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resources {
    /// CPU in thousandths of a core.
    pub milli_cpu: i64,
    /// Memory in bytes.
    pub memory: i64,
    /// Ephemeral storage in bytes.
    pub ephemeral_storage: i64,
    /// Number of pods allowed (only meaningful for allocatable).
    pub allowed_pod_number: i64,
    /// Scalar resources by name.
    pub scalar: BTreeMap<String, i64>,
}

impl Resources {
    /// Builds a vector from a resource list, as upstream's `NewResource`.
    pub fn from_list(list: &ResourceList) -> Self {
        let mut r = Resources::default();
        r.add_list(list);
        r
    }

    /// Adds a resource list (upstream's `Resource.Add`). Sums wrap as Go's
    /// int64 does: quantities near 2^63 (`64Ei`) are valid, and two of them
    /// on one node must not panic.
    pub fn add_list(&mut self, list: &ResourceList) {
        for (name, q) in list {
            let (field, amount) = match name.as_str() {
                names::CPU => (&mut self.milli_cpu, q.milli_value()),
                names::MEMORY => (&mut self.memory, q.value()),
                names::PODS => (&mut self.allowed_pod_number, q.value()),
                names::EPHEMERAL_STORAGE => (&mut self.ephemeral_storage, q.value()),
                other if is_scalar_resource_name(other) => {
                    (self.scalar.entry(other.to_string()).or_default(), q.value())
                }
                _ => continue,
            };
            *field = field.wrapping_add(amount);
        }
    }

    /// Adds another vector (all fields but `allowed_pod_number`, like NodeInfo.update).
    pub fn add(&mut self, other: &Resources) {
        self.add_signed(other, 1);
    }

    /// Subtracts another vector.
    pub fn sub(&mut self, other: &Resources) {
        self.add_signed(other, -1);
    }

    /// `self += sign × other`, wrapping as Go's int64 (NodeInfo.update).
    fn add_signed(&mut self, other: &Resources, sign: i64) {
        let add = |a: &mut i64, b: i64| *a = a.wrapping_add(sign.wrapping_mul(b));
        add(&mut self.milli_cpu, other.milli_cpu);
        add(&mut self.memory, other.memory);
        add(&mut self.ephemeral_storage, other.ephemeral_storage);
        for (k, v) in &other.scalar {
            add(self.scalar.entry(k.clone()).or_default(), *v);
        }
    }

    /// A scalar resource's amount (0 when absent).
    pub fn scalar(&self, name: &str) -> i64 {
        self.scalar.get(name).copied().unwrap_or(0)
    }

    /// The amount of a resource by name (cpu in milli-units).
    pub fn get(&self, name: &str) -> i64 {
        match name {
            names::CPU => self.milli_cpu,
            names::MEMORY => self.memory,
            names::EPHEMERAL_STORAGE => self.ephemeral_storage,
            names::PODS => self.allowed_pod_number,
            other => self.scalar(other),
        }
    }

    /// Renders as a Kubernetes-style resource map (`cpu: 3200m`, `memory: 4Gi`).
    pub fn to_display_map(&self) -> BTreeMap<String, String> {
        let mut m = BTreeMap::new();
        m.insert(names::CPU.into(), format_milli(self.milli_cpu));
        m.insert(names::MEMORY.into(), format_bytes(self.memory));
        if self.ephemeral_storage != 0 {
            m.insert(
                names::EPHEMERAL_STORAGE.into(),
                format_bytes(self.ephemeral_storage),
            );
        }
        if self.allowed_pod_number != 0 {
            m.insert(names::PODS.into(), self.allowed_pod_number.to_string());
        }
        for (k, v) in &self.scalar {
            m.insert(k.clone(), v.to_string());
        }
        m
    }
}

/// Adds `add` into `into`, name by name (upstream's `addResourceList`).
pub fn add_resource_list(into: &mut BTreeMap<String, Quantity>, add: &ResourceList) {
    for (name, q) in add {
        let sum = match into.get(name) {
            Some(existing) => existing.checked_add(q),
            None => *q,
        };
        into.insert(name.clone(), sum);
    }
}

/// Sets each entry of `into` to the max with `other` (upstream's `maxResourceList`).
pub fn max_resource_list(into: &mut ResourceList, other: &ResourceList) {
    for (name, q) in other {
        match into.get(name) {
            Some(existing) if existing.cmp_value(q).is_ge() => {}
            _ => {
                into.insert(name.clone(), *q);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalar_names() {
        assert!(is_scalar_resource_name("nvidia.com/gpu"));
        assert!(is_scalar_resource_name("hugepages-2Mi"));
        assert!(is_scalar_resource_name("attachable-volumes-csi-x"));
        assert!(is_scalar_resource_name("kubernetes.io/something"));
        assert!(!is_scalar_resource_name("foo"));
        assert!(!is_scalar_resource_name("requests.example.com/foo"));
    }

    #[test]
    fn from_list_ignores_unknown_native_names() {
        let mut l = ResourceList::new();
        l.insert("cpu".into(), Quantity::parse("1500m").unwrap());
        l.insert("memory".into(), Quantity::parse("1Gi").unwrap());
        l.insert("pods".into(), Quantity::parse("110").unwrap());
        l.insert("foo".into(), Quantity::parse("3").unwrap());
        l.insert("example.com/bar".into(), Quantity::parse("2").unwrap());
        let r = Resources::from_list(&l);
        assert_eq!(r.milli_cpu, 1500);
        assert_eq!(r.memory, 1 << 30);
        assert_eq!(r.allowed_pod_number, 110);
        assert_eq!(r.scalar("example.com/bar"), 2);
        assert_eq!(r.scalar.len(), 1);
    }
}
