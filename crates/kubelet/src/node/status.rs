//! Node status computation (pure): allocatable from capacity, the four
//! kubelet conditions with upstream's reasons and messages, and whether a
//! new status must be posted (changed, or `nodeStatusReportFrequency`
//! elapsed), as upstream's `kubelet_node_status.go` decides.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{NodeCondition, NodeStatus};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use rkube_model::Quantity;

use crate::config::{parse_threshold, KubeletConfiguration};

pub use rkube_model::quantity::{format_bytes, format_milli as format_cpu};

fn is_bytes(resource: &str) -> bool {
    matches!(resource, "memory" | "ephemeral-storage") || resource.starts_with("hugepages-")
}

/// What is reserved of resource `name` (of capacity `cap`, in its unit:
/// millicores for CPU): systemReserved + kubeReserved + the hard eviction
/// threshold (memory.available for memory, nodefs.available for
/// ephemeral-storage).
fn reserved(name: &str, cap: i64, cfg: &KubeletConfiguration) -> i64 {
    let amount = |q: &Quantity| {
        if name == "cpu" {
            q.milli_value()
        } else {
            q.value()
        }
    };
    let mut reserved: i64 = 0;
    for r in [&cfg.system_reserved, &cfg.kube_reserved] {
        if let Some(q) = r.get(name).and_then(|v| Quantity::parse(v).ok()) {
            reserved = reserved.saturating_add(amount(&q));
        }
    }
    let signal = match name {
        "memory" => Some("memory.available"),
        "ephemeral-storage" => Some("nodefs.available"),
        _ => None,
    };
    if let Some(t) = signal
        .and_then(|s| cfg.eviction_hard.get(s))
        .and_then(|v| parse_threshold(v))
    {
        reserved = reserved.saturating_add(t.amount(cap));
    }
    reserved
}

/// Upstream's `validateNodeAllocatable`: no resource may have more
/// reserved (systemReserved + kubeReserved + the hard eviction threshold)
/// than its capacity.
pub fn validate_allocatable(
    capacity: &BTreeMap<String, Quantity>,
    cfg: &KubeletConfiguration,
) -> Result<(), String> {
    let mut errors = Vec::new();
    for (name, cap) in capacity {
        let milli = name == "cpu";
        let amount = |q: &Quantity| if milli { q.milli_value() } else { q.value() };
        let reserved = reserved(name, amount(cap), cfg);
        if reserved > amount(cap) {
            let show = |v: i64| {
                if milli {
                    format_cpu(v)
                } else if is_bytes(name) {
                    format_bytes(v)
                } else {
                    v.to_string()
                }
            };
            errors.push(format!(
                "Resource {name:?} has a reservation of {} but capacity of {}. Expected capacity >= reservation.",
                show(reserved),
                show(amount(cap))
            ));
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "invalid Node Allocatable configuration. {}",
            errors.join(" ")
        ))
    }
}

/// Allocatable = capacity − systemReserved − kubeReserved − the hard
/// eviction threshold (memory.available for memory, nodefs.available for
/// ephemeral-storage), never below zero — upstream's node allocatable.
pub fn allocatable(
    capacity: &BTreeMap<String, Quantity>,
    cfg: &KubeletConfiguration,
) -> BTreeMap<String, Quantity> {
    let mut out = BTreeMap::new();
    for (name, cap) in capacity {
        let milli = name == "cpu";
        let amount = |q: &Quantity| if milli { q.milli_value() } else { q.value() };
        let value = amount(cap)
            .saturating_sub(reserved(name, amount(cap), cfg))
            .max(0);
        out.insert(
            name.clone(),
            if milli {
                Quantity::from_milli(value)
            } else {
                Quantity::from_units(value)
            },
        );
    }
    out
}

/// A resource list as the API shows it.
pub fn to_resource_list(list: &BTreeMap<String, Quantity>) -> BTreeMap<String, KQuantity> {
    list.iter()
        .map(|(k, q)| {
            let s = if k == "cpu" {
                format_cpu(q.milli_value())
            } else if is_bytes(k) {
                format_bytes(q.value())
            } else {
                q.value().to_string()
            };
            (k.clone(), KQuantity(s))
        })
        .collect()
}

/// What the node-level checks found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Health {
    /// `Some(error)` when the container runtime is down (or not checked
    /// yet: [`Health::unchecked`]), in the words of the Ready condition.
    pub runtime_error: Option<String>,
    /// `Some(error)` when the runtime's network is not ready (no CNI
    /// configuration yet).
    pub network_error: Option<String>,
    /// `Some("node is shutting down")` during a graceful node shutdown.
    pub shutdown_error: Option<String>,
    /// memory.available below its hard threshold.
    pub memory_pressure: bool,
    /// nodefs/imagefs below their hard thresholds.
    pub disk_pressure: bool,
    /// pid.available below its hard threshold.
    pub pid_pressure: bool,
    /// The runtime's handlers (`status.runtimeHandlers`; none reported
    /// means the field is left out, as upstream's empty list).
    pub runtime_handlers: Vec<k8s_openapi::api::core::v1::NodeRuntimeHandler>,
}

impl Health {
    /// Before the first check of the runtime: not Ready, as upstream.
    pub fn unchecked() -> Health {
        Health {
            runtime_error: Some("container runtime status check may not have completed yet".into()),
            ..Default::default()
        }
    }

    /// The runtime answered `error` (or nothing) and its network `network`.
    pub fn checked(error: Option<&str>, network: Option<String>) -> Health {
        Health {
            runtime_error: error.map(|e| format!("container runtime is down: {e}")),
            network_error: network,
            ..Default::default()
        }
    }
}

fn condition(
    previous: &[NodeCondition],
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> NodeCondition {
    let status = if status { "True" } else { "False" };
    let prev = previous.iter().find(|c| c.type_ == type_);
    // The transition time only moves when the status does.
    let transition = match prev {
        Some(p) if p.status == status => p.last_transition_time.clone(),
        _ => Some(Time(now)),
    };
    NodeCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_heartbeat_time: Some(Time(now)),
        last_transition_time: transition.or(Some(Time(now))),
    }
}

/// The four kubelet conditions (MemoryPressure, DiskPressure, PIDPressure,
/// Ready), with upstream's reasons and messages; `previous` supplies the
/// transition times of unchanged conditions.
pub fn conditions(previous: &[NodeCondition], h: &Health, now: Timestamp) -> Vec<NodeCondition> {
    let mem = if h.memory_pressure {
        (
            "KubeletHasInsufficientMemory",
            "kubelet has insufficient memory available",
        )
    } else {
        (
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
        )
    };
    let disk = if h.disk_pressure {
        ("KubeletHasDiskPressure", "kubelet has disk pressure")
    } else {
        ("KubeletHasNoDiskPressure", "kubelet has no disk pressure")
    };
    let pid = if h.pid_pressure {
        (
            "KubeletHasInsufficientPID",
            "kubelet has insufficient PID available",
        )
    } else {
        (
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
        )
    };
    let errors: Vec<String> = [
        h.runtime_error.clone(),
        h.network_error.clone(),
        h.shutdown_error.clone(),
    ]
    .into_iter()
    .flatten()
    .collect();
    let ready = match errors.as_slice() {
        [] => condition(
            previous,
            "Ready",
            true,
            "KubeletReady",
            "kubelet is posting ready status",
            now,
        ),
        // Several errors read as upstream's aggregate: "[a, b]".
        [one] => condition(previous, "Ready", false, "KubeletNotReady", one, now),
        many => condition(
            previous,
            "Ready",
            false,
            "KubeletNotReady",
            &format!("[{}]", many.join(", ")),
            now,
        ),
    };
    vec![
        condition(
            previous,
            "MemoryPressure",
            h.memory_pressure,
            mem.0,
            mem.1,
            now,
        ),
        condition(
            previous,
            "DiskPressure",
            h.disk_pressure,
            disk.0,
            disk.1,
            now,
        ),
        condition(previous, "PIDPressure", h.pid_pressure, pid.0, pid.1, now),
        ready,
    ]
}

/// Allocatable as upstream's kubelet derives it from *every* key of the
/// Node's capacity: the node's own allocatable, plus each capacity key the
/// node does not report itself (an extended resource another client
/// patched into `status.capacity`, e.g. a device plugin or an operator) at
/// its capacity value — no reservation applies to those. Keys others
/// removed from capacity leave allocatable with them.
pub fn allocatable_with_foreign(
    own_capacity: &BTreeMap<String, KQuantity>,
    own_allocatable: &BTreeMap<String, KQuantity>,
    api_capacity: &BTreeMap<String, KQuantity>,
) -> BTreeMap<String, KQuantity> {
    let mut out = own_allocatable.clone();
    for (k, v) in api_capacity {
        if !own_capacity.contains_key(k) {
            out.insert(k.clone(), v.clone());
        }
    }
    out
}

/// True when `new` differs from `old` in anything but condition heartbeat
/// times (upstream's `nodeStatusHasChanged`).
pub fn status_changed(old: &NodeStatus, new: &NodeStatus) -> bool {
    let strip = |s: &NodeStatus| {
        let mut s = s.clone();
        for c in s.conditions.iter_mut().flatten() {
            c.last_heartbeat_time = None;
        }
        s
    };
    strip(old) != strip(new)
}

/// Whether to PATCH: never posted, changed, or `report_frequency` since the
/// last post.
pub fn should_report(
    last: Option<&NodeStatus>,
    new: &NodeStatus,
    since_last: Duration,
    report_frequency: Duration,
) -> bool {
    match last {
        None => true,
        Some(old) => status_changed(old, new) || since_last >= report_frequency,
    }
}

/// The strategic merge patch body for a node status update: the whole
/// status the first time (or after [`should_report`] lost track), else only
/// the fields that differ from what was reported last, plus the conditions
/// (they carry the heartbeats; merged by `type`). Upstream's kubelet also
/// sends a two-way diff, though against the Node it reads back from the API
/// server, and computed field by field (this one compares top-level status
/// fields and sends a changed field whole); a full status every time makes
/// kube-apiserver merge every image and address of every node on each
/// report.
pub fn status_patch(last: Option<&NodeStatus>, new: &NodeStatus) -> serde_json::Value {
    let full = || serde_json::json!({ "status": new });
    let Some(last) = last else {
        return full();
    };
    let (Ok(serde_json::Value::Object(old)), Ok(serde_json::Value::Object(cur))) =
        (serde_json::to_value(last), serde_json::to_value(new))
    else {
        return full();
    };
    let mut out = serde_json::Map::new();
    for (k, v) in &cur {
        if k == "conditions" || old.get(k) != Some(v) {
            let mut v = v.clone();
            // A strategic merge patch merges maps key by key: a key gone
            // from capacity/allocatable must be sent as null.
            if let (Some(serde_json::Value::Object(was)), serde_json::Value::Object(now)) =
                (old.get(k), &mut v)
            {
                if k != "nodeInfo" && k != "daemonEndpoints" {
                    for gone in was
                        .keys()
                        .filter(|g| !now.contains_key(*g))
                        .cloned()
                        .collect::<Vec<_>>()
                    {
                        now.insert(gone, serde_json::Value::Null);
                    }
                }
            }
            out.insert(k.clone(), v);
        }
    }
    for k in old.keys() {
        if !cur.contains_key(k) {
            out.insert(k.clone(), serde_json::Value::Null);
        }
    }
    serde_json::json!({ "status": out })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_patch_sends_conditions_and_changes_only() {
        let status = |images: &[&str], hb: &str| -> NodeStatus {
            serde_json::from_value(serde_json::json!({
                "capacity": {"cpu": "4", "pods": "110"},
                "images": images.iter().map(|i| serde_json::json!({"names": [i], "sizeBytes": 1})).collect::<Vec<_>>(),
                "nodeInfo": {"machineID": "m", "systemUUID": "s", "bootID": "b", "kernelVersion": "k",
                    "osImage": "o", "containerRuntimeVersion": "c", "kubeletVersion": "v",
                    "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"},
                "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": hb}]
            }))
            .unwrap()
        };
        let a = status(&["busybox"], "2026-01-01T00:00:00Z");
        // First report: everything.
        let p = status_patch(None, &a);
        assert_eq!(p["status"]["capacity"]["cpu"], "4");
        assert!(p["status"]["nodeInfo"].is_object());
        // A heartbeat: the conditions only.
        let b = status(&["busybox"], "2026-01-01T00:05:00Z");
        let p = status_patch(Some(&a), &b);
        let keys: Vec<&String> = p["status"].as_object().unwrap().keys().collect();
        assert_eq!(keys, ["conditions"]);
        assert_eq!(
            p["status"]["conditions"][0]["lastHeartbeatTime"],
            "2026-01-01T00:05:00Z"
        );
        // A new image: conditions and images.
        let c = status(&["busybox", "pause"], "2026-01-01T00:05:00Z");
        let p = status_patch(Some(&b), &c);
        let mut keys: Vec<&String> = p["status"].as_object().unwrap().keys().collect();
        keys.sort();
        assert_eq!(keys, ["conditions", "images"]);
        assert_eq!(p["status"]["images"].as_array().unwrap().len(), 2);
        // A field that went away is deleted.
        let mut d = c.clone();
        d.images = None;
        let p = status_patch(Some(&c), &d);
        assert!(p["status"]["images"].is_null());
        assert!(p["status"].as_object().unwrap().contains_key("images"));
    }

    fn caps(list: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
        list.iter()
            .map(|(k, v)| (k.to_string(), Quantity::parse(v).unwrap()))
            .collect()
    }

    #[test]
    fn allocatable_subtracts_reservations_and_eviction() {
        let mut cfg = KubeletConfiguration::default();
        let cap = caps(&[
            ("cpu", "32"),
            ("memory", "256Gi"),
            ("pods", "110"),
            ("ephemeral-storage", "100Gi"),
        ]);
        let a = to_resource_list(&allocatable(&cap, &cfg));
        assert_eq!(a["cpu"].0, "32");
        // 256Gi − 100Mi (memory.available).
        assert_eq!(a["memory"].0, "262044Mi");
        // 100Gi − 10%.
        assert_eq!(a["ephemeral-storage"].0, format_bytes(96636764160));
        assert_eq!(a["pods"].0, "110");
        cfg.system_reserved.insert("cpu".into(), "500m".into());
        cfg.kube_reserved.insert("cpu".into(), "100m".into());
        cfg.kube_reserved.insert("memory".into(), "1Gi".into());
        let a = to_resource_list(&allocatable(&cap, &cfg));
        assert_eq!(a["cpu"].0, "31400m");
        assert_eq!(a["memory"].0, format_bytes((255 << 30) - (100 << 20)));
        let tiny = caps(&[("memory", "50Mi")]);
        assert_eq!(to_resource_list(&allocatable(&tiny, &cfg))["memory"].0, "0");
        // More reserved than there is: refused at start, as upstream.
        assert_eq!(validate_allocatable(&cap, &cfg), Ok(()));
        let e = validate_allocatable(&tiny, &cfg).unwrap_err();
        assert!(
            e.starts_with(
                "invalid Node Allocatable configuration. Resource \"memory\" has a reservation of "
            ) && e.ends_with("but capacity of 50Mi. Expected capacity >= reservation."),
            "{e}"
        );
    }

    #[test]
    fn capacity_others_added_becomes_allocatable_and_leaves_with_it() {
        let q = |v: &str| KQuantity(v.into());
        let own_cap: BTreeMap<String, KQuantity> =
            [("cpu".to_string(), q("4")), ("pods".to_string(), q("110"))].into();
        let own_alloc: BTreeMap<String, KQuantity> = [
            ("cpu".to_string(), q("3900m")),
            ("pods".to_string(), q("110")),
        ]
        .into();
        let mut api = own_cap.clone();
        api.insert("example.com/fakecpu".into(), q("1k"));
        let a = allocatable_with_foreign(&own_cap, &own_alloc, &api);
        assert_eq!(a["example.com/fakecpu"].0, "1k");
        assert_eq!(a["cpu"].0, "3900m", "own reservations kept");
        // Removed from capacity by its owner: the next patch nulls it.
        let before = NodeStatus {
            allocatable: Some(a),
            ..Default::default()
        };
        let after = NodeStatus {
            allocatable: Some(allocatable_with_foreign(&own_cap, &own_alloc, &own_cap)),
            ..Default::default()
        };
        let p = status_patch(Some(&before), &after);
        assert!(p["status"]["allocatable"]["example.com/fakecpu"].is_null());
        assert!(
            p["status"]["allocatable"]
                .as_object()
                .unwrap()
                .contains_key("example.com/fakecpu"),
            "{p}"
        );
        assert_eq!(p["status"]["allocatable"]["cpu"], "3900m");
    }

    #[test]
    fn formats() {
        assert_eq!(format_bytes(1 << 30), "1Gi");
        assert_eq!(format_bytes(1000), "1000");
        assert_eq!(format_cpu(1500), "1500m");
        assert_eq!(format_cpu(2000), "2");
    }

    #[test]
    fn conditions_reasons_and_transitions() {
        let t0 = Timestamp::from_second(1_700_000_000).unwrap();
        let t1 = Timestamp::from_second(1_700_000_010).unwrap();
        let c0 = conditions(&[], &Health::default(), t0);
        let types: Vec<_> = c0.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(
            types,
            ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]
        );
        assert_eq!(c0[3].status, "True");
        assert_eq!(c0[3].reason.as_deref(), Some("KubeletReady"));
        assert_eq!(
            c0[3].message.as_deref(),
            Some("kubelet is posting ready status")
        );
        assert_eq!(c0[0].status, "False");
        assert_eq!(c0[0].reason.as_deref(), Some("KubeletHasSufficientMemory"));
        assert_eq!(c0[1].reason.as_deref(), Some("KubeletHasNoDiskPressure"));
        assert_eq!(c0[2].reason.as_deref(), Some("KubeletHasSufficientPID"));
        // Same health later: heartbeat moves, transition stays.
        let c1 = conditions(&c0, &Health::default(), t1);
        assert_eq!(c1[3].last_heartbeat_time, Some(Time(t1)));
        assert_eq!(c1[3].last_transition_time, Some(Time(t0)));
        // Runtime down and memory pressure: both transition now.
        let bad = Health {
            memory_pressure: true,
            ..Health::checked(Some("connection refused"), None)
        };
        let c2 = conditions(&c1, &bad, t1);
        assert_eq!(
            c2[3].message.as_deref(),
            Some("container runtime is down: connection refused")
        );
        // No CNI configuration yet: not Ready, in upstream's words; with
        // the runtime down too, both as upstream's aggregate.
        let net = "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized";
        let no_net = Health {
            network_error: Some(net.into()),
            ..Default::default()
        };
        let c = conditions(&c1, &no_net, t1);
        assert_eq!(
            (c[3].status.as_str(), c[3].message.as_deref()),
            ("False", Some(net))
        );
        // Not checked yet: not Ready either.
        let c = conditions(&c1, &Health::unchecked(), t1);
        assert_eq!(
            (c[3].status.as_str(), c[3].message.as_deref()),
            (
                "False",
                Some("container runtime status check may not have completed yet")
            )
        );
        let both = Health {
            network_error: Some(net.into()),
            ..bad.clone()
        };
        let c = conditions(&c1, &both, t1);
        assert_eq!(
            c[3].message.as_deref().unwrap(),
            format!("[container runtime is down: connection refused, {net}]")
        );
        assert_eq!(c2[3].status, "False");
        assert_eq!(c2[3].reason.as_deref(), Some("KubeletNotReady"));
        assert_eq!(c2[3].last_transition_time, Some(Time(t1)));
        assert_eq!(c2[0].status, "True");
        assert_eq!(
            c2[0].reason.as_deref(),
            Some("KubeletHasInsufficientMemory")
        );
        assert_eq!(c2[1].last_transition_time, Some(Time(t0)));
    }

    #[test]
    fn report_only_when_changed_or_due() {
        let t0 = Timestamp::from_second(1_700_000_000).unwrap();
        let t1 = Timestamp::from_second(1_700_000_010).unwrap();
        let s = |c| NodeStatus {
            conditions: Some(c),
            ..Default::default()
        };
        let a = s(conditions(&[], &Health::default(), t0));
        let b = s(conditions(
            a.conditions.as_ref().unwrap(),
            &Health::default(),
            t1,
        ));
        let five_min = Duration::from_secs(300);
        assert!(should_report(None, &a, Duration::ZERO, five_min));
        assert!(!should_report(
            Some(&a),
            &b,
            Duration::from_secs(10),
            five_min
        ));
        assert!(should_report(Some(&a), &b, five_min, five_min));
        let mut c = b.clone();
        c.capacity = Some([("pods".to_string(), KQuantity("10".into()))].into());
        assert!(should_report(
            Some(&a),
            &c,
            Duration::from_secs(10),
            five_min
        ));
    }
}
