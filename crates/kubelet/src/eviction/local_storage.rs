//! Eviction of a pod over its own local storage limits, whatever the
//! node's pressure (upstream's `localStorageEviction`, run every round
//! before the thresholds are acted on, as `localStorageCapacityIsolation`
//! is always on here): in this order, an `emptyDir` (not memory-backed)
//! using more than its `sizeLimit`; the pod's ephemeral storage in all
//! using more than its containers' `ephemeral-storage` limits together;
//! a container (or sidecar) whose logs, and writable layer unless images
//! have a filesystem of their own, use more than its limit.

use k8s_openapi::api::core::v1::{Container, Pod};
use rkube_model::quantity::Quantity;

use super::ranking::{format_decimal, format_quantity};
use super::signals::LocalStorage;
use crate::pod::is_sidecar;
use crate::runtime::cri::spec::resources::pod_limits;

const EPHEMERAL_STORAGE: &str = "ephemeral-storage";

/// A quantity as Go's `Quantity.String()` prints a byte amount: binary
/// suffixes when `spec` (the text it came from) has one (else decimal, as
/// Go falls back to), decimal ones otherwise.
fn go_string(bytes: i64, spec: &str) -> String {
    if spec.ends_with('i') {
        format_quantity(bytes)
    } else {
        format_decimal(bytes)
    }
}

fn limit_of(c: &Container) -> Option<(i64, &str)> {
    let text = &c
        .resources
        .as_ref()?
        .limits
        .as_ref()?
        .get(EPHEMERAL_STORAGE)?
        .0;
    let q = Quantity::parse(text).ok()?;
    (!q.is_zero()).then(|| (q.value(), text.as_str()))
}

/// Why `pod` must be evicted for its local storage (upstream's message),
/// `None` when it is within its limits. `dedicated_imagefs`: images (and
/// so the writable layers) have a filesystem of their own.
pub fn violation(pod: &Pod, used: &LocalStorage, dedicated_imagefs: bool) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    for v in spec.volumes.iter().flatten() {
        let Some(dir) = &v.empty_dir else { continue };
        if dir.medium.as_deref() == Some("Memory") {
            // tmpfs: the kernel holds it to its size.
            continue;
        }
        let Some(limit) = &dir.size_limit else {
            continue;
        };
        let Ok(size) = Quantity::parse(&limit.0) else {
            continue;
        };
        if let Some(&u) = used.volumes.get(&v.name) {
            if size.value() > 0 && i128::from(u) > i128::from(size.value()) {
                return Some(format!(
                    "Usage of EmptyDir volume {:?} exceeds the limit {:?}. ",
                    v.name,
                    go_string(size.value(), &limit.0)
                ));
            }
        }
    }
    if let Some(limit) = pod_limits(pod).get(EPHEMERAL_STORAGE) {
        let total = used.total.unwrap_or(0);
        if i128::from(total) > i128::from(limit.value()) {
            // Go's sum keeps the format of the first limit it adds: the
            // containers' before the init containers'.
            let first = spec
                .containers
                .iter()
                .chain(spec.init_containers.iter().flatten())
                .find_map(limit_of)
                .map_or("", |(_, t)| t);
            return Some(format!(
                "Pod ephemeral local storage usage exceeds the total limit of containers {}. ",
                go_string(limit.value(), first)
            ));
        }
    }
    let limited = spec.containers.iter().chain(
        spec.init_containers
            .iter()
            .flatten()
            .filter(|c| is_sidecar(c)),
    );
    for c in limited {
        let Some((limit, text)) = limit_of(c) else {
            continue;
        };
        let Some(&(logs, rootfs)) = used.containers.get(&c.name) else {
            continue;
        };
        let mut u = u128::from(logs);
        if !dedicated_imagefs {
            u += u128::from(rootfs);
        }
        if u > u128::try_from(limit).unwrap_or(0) {
            return Some(format!(
                "Container {} exceeded its local ephemeral storage limit {:?}. ",
                c.name,
                go_string(limit, text)
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap()
    }

    fn used(
        volumes: &[(&str, u64)],
        total: Option<u64>,
        containers: &[(&str, u64, u64)],
    ) -> LocalStorage {
        LocalStorage {
            volumes: volumes.iter().map(|(n, b)| (n.to_string(), *b)).collect(),
            total,
            containers: containers
                .iter()
                .map(|(n, l, r)| (n.to_string(), (*l, *r)))
                .collect(),
        }
    }

    fn limited(limit: &str) -> serde_json::Value {
        json!({"resources": {"limits": {"ephemeral-storage": limit}}})
    }

    /// Upstream's cases (eviction_manager_test.go's local storage tests
    /// and the e2e LocalStorageCapacityIsolationEviction specs): each
    /// limit alone, in upstream's order and wording.
    #[test]
    fn each_limit_in_upstreams_order_and_words() {
        let empty_dir = pod(json!({
            "containers": [{"name": "c", "image": "i"}],
            "volumes": [{"name": "data", "emptyDir": {"sizeLimit": "1Mi"}}]
        }));
        assert_eq!(
            violation(
                &empty_dir,
                &used(&[("data", 2 << 20)], Some(3 << 20), &[]),
                false
            )
            .as_deref(),
            Some("Usage of EmptyDir volume \"data\" exceeds the limit \"1Mi\". ")
        );
        // At the limit is within it.
        assert_eq!(
            violation(&empty_dir, &used(&[("data", 1 << 20)], None, &[]), false),
            None
        );
        // tmpfs is held to its size by the kernel.
        let memory = pod(json!({
            "containers": [{"name": "c", "image": "i"}],
            "volumes": [{"name": "data", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}]
        }));
        assert_eq!(
            violation(&memory, &used(&[("data", 2 << 20)], None, &[]), false),
            None
        );

        // Two containers of 1G each: the pod may use 2G in all.
        let mut c1 = limited("1G");
        c1["name"] = json!("a");
        c1["image"] = json!("i");
        let mut c2 = limited("1G");
        c2["name"] = json!("b");
        c2["image"] = json!("i");
        let two = pod(json!({"containers": [c1, c2]}));
        assert_eq!(
            violation(&two, &used(&[], Some(2_000_000_001), &[]), false).as_deref(),
            Some("Pod ephemeral local storage usage exceeds the total limit of containers 2G. ")
        );
        assert_eq!(
            violation(&two, &used(&[], Some(2_000_000_000), &[]), false),
            None
        );

        // One container over its own limit while the pod's total is not
        // known: its logs and writable layer, the layer only without an
        // image filesystem of its own.
        let mut c = limited("100Ki");
        c["name"] = json!("c");
        c["image"] = json!("i");
        let one = pod(json!({"containers": [c]}));
        let u = used(&[], None, &[("c", 60 << 10, 60 << 10)]);
        assert_eq!(
            violation(&one, &u, false).as_deref(),
            Some("Container c exceeded its local ephemeral storage limit \"100Ki\". ")
        );
        assert_eq!(
            violation(&one, &u, true),
            None,
            "the layer is on the imagefs"
        );

        // A sidecar's limit counts; a plain init container's does not.
        let sidecar = pod(json!({
            "initContainers": [
                {"name": "s", "image": "i", "restartPolicy": "Always", "resources": {"limits": {"ephemeral-storage": "1Ki"}}},
                {"name": "init", "image": "i", "resources": {"limits": {"ephemeral-storage": "1Ki"}}}
            ],
            "containers": [{"name": "c", "image": "i"}]
        }));
        let u = used(&[], None, &[("s", 4096, 0)]);
        assert_eq!(
            violation(&sidecar, &u, false).as_deref(),
            Some("Container s exceeded its local ephemeral storage limit \"1Ki\". ")
        );
        let u = used(&[], None, &[("init", 4096, 0)]);
        assert_eq!(violation(&sidecar, &u, false), None);

        // No limits: nothing to hold the pod to.
        let free = pod(json!({"containers": [{"name": "c", "image": "i"}]}));
        assert_eq!(
            violation(
                &free,
                &used(&[], Some(u64::MAX), &[("c", u64::MAX, u64::MAX)]),
                false
            ),
            None
        );
    }

    #[test]
    fn quantities_print_as_go_prints_them() {
        assert_eq!(go_string(1 << 20, "1Mi"), "1Mi");
        assert_eq!(go_string(1 << 20, "1048576"), "1048576");
        assert_eq!(go_string(2_000_000_000, "1G"), "2G");
        assert_eq!(go_string(1_500_000, "1500k"), "1500k");
        assert_eq!(go_string(1_500_000, "1.5Mi"), "1500k");
    }
}
