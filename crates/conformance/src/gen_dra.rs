//! Random DRA objects for a generated case: DeviceClasses with CEL
//! selectors, ResourceSlices per node (attributes, capacities, taints,
//! split and incomplete pools, shared counters, network-attached slices),
//! claims already allocated to existing pods, and the incoming pod's claims
//! (counts, All, selectors, `firstAvailable`, constraints, tolerations,
//! admin access, a claim shared with a running pod), and DeviceTaintRules
//! tainting some of the devices.
//!
//! It draws from its own generator, so cases without DRA are the same as
//! before it existed.

use serde_json::{json, Value};

use crate::rng::Rng;

const DRIVER: &str = "gpu.example.com";
const NIC: &str = "nic.example.com";

fn classes() -> Vec<Value> {
    let class = |name: &str, exprs: &[&str]| {
        let selectors: Vec<Value> = exprs
            .iter()
            .map(|e| json!({"cel": {"expression": e}}))
            .collect();
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name}, "spec": {"selectors": selectors}})
    };
    vec![
        class("gpu", &[r#"device.driver == "gpu.example.com""#]),
        class(
            "big-gpu",
            &[
                r#"device.driver == "gpu.example.com""#,
                r#"device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0"#,
            ],
        ),
        class(
            "model-a",
            &[
                r#"device.driver == "gpu.example.com" && device.attributes["gpu.example.com"].model == "a""#,
            ],
        ),
        class(
            "new-driver",
            &[
                r#"device.driver == "gpu.example.com" && device.attributes["gpu.example.com"].driverVersion.isGreaterThan(semver("1.5.0"))"#,
            ],
        ),
        class("nic", &[r#"device.driver == "nic.example.com""#]),
    ]
}

/// A device of the GPU driver.
fn gpu(r: &mut Rng, name: &str, counters: Option<&str>) -> Value {
    let mut d = json!({
        "name": name,
        "attributes": {
            "model": {"string": r.pick(&["a", "b"])},
            "numa": {"int": r.below(2)},
            "driverVersion": {"version": r.pick(&["1.2.3", "2.0.0", "2.0.0-rc.1"])},
        },
        "capacity": {"memory": {"value": r.pick(&["16Gi", "40Gi", "80Gi"])}},
    });
    if r.chance(12) {
        d["taints"] = json!([{"key": "example.com/unhealthy", "value": "true", "effect": r.pick(&["NoSchedule", "NoExecute", "None"])}]);
    }
    if let Some(set) = counters {
        d["consumesCounters"] =
            json!([{"counterSet": set, "counters": {"mem": {"value": r.pick(&["4Gi", "8Gi"])}}}]);
    }
    d
}

fn slice(
    name: &str,
    driver: &str,
    scope: Value,
    pool: &str,
    count: u32,
    devices: Vec<Value>,
) -> Value {
    let mut spec = json!({"driver": driver, "pool": {"name": pool, "generation": 1, "resourceSliceCount": count}});
    for (k, v) in scope.as_object().expect("scope").iter() {
        spec[k] = v.clone();
    }
    if !devices.is_empty() {
        spec["devices"] = json!(devices);
    }
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name}, "spec": spec})
}

/// Devices by node, for allocations of existing claims: (pool, device).
type Inventory = Vec<Vec<(String, String)>>;

fn slices(r: &mut Rng, nodes: usize, items: &mut Vec<Value>) -> Inventory {
    let mut inv: Inventory = vec![Vec::new(); nodes];
    for (n, owned) in inv.iter_mut().enumerate() {
        if r.chance(25) {
            continue;
        }
        let node = format!("node-{n}");
        let pool = format!("{node}-gpus");
        let scope = json!({"nodeName": node});
        match r.below(10) {
            // Partitionable: a counter set and devices consuming it.
            0 => {
                items.push(slice(
                    &format!("{pool}-counters"),
                    DRIVER,
                    scope.clone(),
                    &pool,
                    2,
                    Vec::new(),
                ));
                let last = items.len() - 1;
                items[last]["spec"]["sharedCounters"] =
                    json!([{"name": "card", "counters": {"mem": {"value": "12Gi"}}}]);
                let devs: Vec<Value> = (0..3)
                    .map(|i| gpu(r, &format!("part-{i}"), Some("card")))
                    .collect();
                for i in 0..3 {
                    owned.push((pool.clone(), format!("part-{i}")));
                }
                items.push(slice(
                    &format!("{pool}-devices"),
                    DRIVER,
                    scope,
                    &pool,
                    2,
                    devs,
                ));
            }
            // A pool split in two slices (or one of two still missing).
            1 => {
                let missing = r.chance(40);
                for s in 0..2 {
                    if s == 1 && missing {
                        break;
                    }
                    let devs: Vec<Value> = (0..1 + r.below(2))
                        .map(|i| gpu(r, &format!("gpu-{s}{i}"), None))
                        .collect();
                    if !missing {
                        for d in &devs {
                            owned
                                .push((pool.clone(), d["name"].as_str().unwrap_or("").to_string()));
                        }
                    }
                    items.push(slice(
                        &format!("{pool}-{s}"),
                        DRIVER,
                        scope.clone(),
                        &pool,
                        2,
                        devs,
                    ));
                }
            }
            _ => {
                let devs: Vec<Value> = (0..r.below(5))
                    .map(|i| gpu(r, &format!("gpu-{i}"), None))
                    .collect();
                for d in &devs {
                    owned.push((pool.clone(), d["name"].as_str().unwrap_or("").to_string()));
                }
                items.push(slice(&pool, DRIVER, scope, &pool, 1, devs));
            }
        }
    }
    // Network-attached NICs: one zone, or every node.
    if r.chance(40) {
        let scope = if r.chance(50) {
            json!({"nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": [r.pick(&["z1", "z2"])]}]}]}})
        } else {
            json!({"allNodes": true})
        };
        let devs: Vec<Value> = (0..1 + r.below(3))
            .map(|i| json!({"name": format!("nic-{i}"), "attributes": {"speed": {"int": r.pick(&[10, 100])}}}))
            .collect();
        items.push(slice("fabric", NIC, scope, "fabric", 1, devs));
    }
    inv
}

fn request(r: &mut Rng, name: &str) -> Value {
    let class = *r.pick(&[
        "gpu",
        "gpu",
        "big-gpu",
        "model-a",
        "new-driver",
        "nic",
        "missing-class",
    ]);
    let class = if class == "missing-class" && !r.chance(30) {
        "gpu"
    } else {
        class
    };
    let mut exact = json!({"deviceClassName": class});
    match r.below(10) {
        0 => exact["allocationMode"] = json!("All"),
        1..=5 => {}
        _ => exact["count"] = json!(1 + r.below(3)),
    }
    if r.chance(25) && class != "nic" {
        exact["selectors"] = json!([{"cel": {"expression": r.pick(&[
            r#"device.attributes["gpu.example.com"].numa == 0"#,
            r#"device.attributes["gpu.example.com"].model != "b""#,
            r#"device.capacity["gpu.example.com"].memory.isGreaterThan(quantity("20Gi"))"#,
            r#"has(device.attributes["gpu.example.com"].missing) || true"#,
        ])}}]);
    }
    if r.chance(15) {
        exact["tolerations"] = json!([{"key": "example.com/unhealthy", "operator": "Exists"}]);
    }
    if r.chance(5) {
        exact["adminAccess"] = json!(true);
    }
    if r.chance(20) {
        let mut first = exact.clone();
        first["deviceClassName"] = json!("big-gpu");
        first["name"] = json!("big");
        let mut second = exact;
        second["name"] = json!("any");
        return json!({"name": name, "firstAvailable": [first, second]});
    }
    json!({"name": name, "exactly": exact})
}

fn claim(name: &str, ns: &str, requests: Vec<Value>, constraints: Vec<Value>) -> Value {
    let mut devices = json!({"requests": requests});
    if !constraints.is_empty() {
        devices["constraints"] = json!(constraints);
    }
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name, "namespace": ns}, "spec": {"devices": devices}})
}

/// A claim's allocation of device `free` (pool, device) on `node-{node}`
/// for its request `req`.
fn allocation(free: &(String, String), node: usize) -> Value {
    json!({
        "devices": {"results": [{"request": "req", "driver": DRIVER, "pool": free.0, "device": free.1}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [format!("node-{node}")]}]}]},
    })
}

/// Adds DRA objects to a case (about a third of cases): classes, slices,
/// allocated claims of some existing pods, and claims for `incoming`.
pub fn add(seed: u64, items: &mut Vec<Value>, nodes: usize, incoming: &mut Value) {
    let r = &mut Rng::new(seed ^ 0xD4A0_5EED_0000_0001);
    if !r.chance(35) {
        return;
    }
    items.extend(classes());
    let inv = slices(r, nodes, items);
    // Existing pods on a node with devices hold one each, allocated.
    let mut taken: Vec<(String, String)> = Vec::new();
    let mut shared = None;
    let existing: Vec<usize> = (0..items.len())
        .filter(|&i| items[i]["kind"] == "Pod" && items[i]["spec"]["nodeName"].is_string())
        .collect();
    for (k, i) in existing.into_iter().enumerate() {
        let node: usize = items[i]["spec"]["nodeName"]
            .as_str()
            .and_then(|n| n.strip_prefix("node-"))
            .and_then(|n| n.parse().ok())
            .unwrap_or(usize::MAX);
        let Some(free) = inv
            .get(node)
            .and_then(|devs| devs.iter().find(|d| !taken.contains(d)).cloned())
        else {
            continue;
        };
        if !r.chance(60) {
            continue;
        }
        taken.push(free.clone());
        let ns = items[i]["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default")
            .to_string();
        let pod = items[i]["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let name = format!("held-{k}");
        let mut c = claim(
            &name,
            &ns,
            vec![json!({"name": "req", "exactly": {"deviceClassName": "gpu"}})],
            Vec::new(),
        );
        c["status"] = json!({
            "allocation": allocation(&free, node),
            "reservedFor": [{"resource": "pods", "name": pod, "uid": format!("uid-{pod}")}],
        });
        items[i]["spec"]["resourceClaims"] = json!([{"name": "gpu", "resourceClaimName": name}]);
        if ns == "default" {
            shared = Some(name.clone());
        }
        items.push(c);
    }
    // The incoming pod's claims.
    let mut pod_claims = Vec::new();
    if let (Some(name), true) = (&shared, r.chance(20)) {
        pod_claims.push(json!({"name": "shared", "resourceClaimName": name}));
    }
    // An idle claim (allocated earlier on some node for a pod since gone,
    // reserved by nobody): where the pod cannot run, PostFilter deallocates
    // it. Drawn from its own stream so the other objects stay as they were.
    let idle_rng = &mut Rng::new(seed ^ 0x1D1E_C1A1_0000_0002);
    if idle_rng.chance(40) {
        let with_free: Vec<(usize, (String, String))> = inv
            .iter()
            .enumerate()
            .filter_map(|(n, devs)| {
                devs.iter()
                    .find(|d| !taken.contains(d))
                    .map(|d| (n, d.clone()))
            })
            .collect();
        if !with_free.is_empty() {
            let (node, free) = with_free[idle_rng.below(with_free.len())].clone();
            let mut c = claim(
                "idle",
                "default",
                vec![json!({"name": "req", "exactly": {"deviceClassName": "gpu"}})],
                Vec::new(),
            );
            c["status"] = json!({"allocation": allocation(&free, node)});
            items.push(c);
            pod_claims.push(json!({"name": "idle", "resourceClaimName": "idle"}));
        }
    }
    for c in 0..1 + r.below(2) {
        let requests: Vec<Value> = (0..1 + r.below(2))
            .map(|i| request(r, &format!("r{i}")))
            .collect();
        let mut constraints = Vec::new();
        if requests.len() > 1 && r.chance(40) {
            let attr = *r.pick(&["gpu.example.com/numa", "gpu.example.com/model"]);
            if r.chance(70) {
                constraints.push(json!({"matchAttribute": attr}));
            } else {
                constraints.push(json!({"distinctAttribute": attr}));
            }
        }
        let name = format!("incoming-{c}");
        items.push(claim(&name, "default", requests, constraints));
        pod_claims.push(json!({"name": format!("c{c}"), "resourceClaimName": name}));
    }
    let bind_rng = &mut Rng::new(seed ^ 0xB1D0_C0D5_0000_0004);
    if bind_rng.chance(25) {
        binding_conditions(bind_rng, items, nodes, &mut pod_claims);
    }
    let ext_rng = &mut Rng::new(seed ^ 0xE47E_4DED_0000_0003);
    let extended = ext_rng.chance(40);
    if extended {
        extended_resources(ext_rng, items, &mut pod_claims, incoming);
    }
    incoming["spec"]["resourceClaims"] = json!(pod_claims);
    let rule_rng = &mut Rng::new(seed ^ 0x7A17_5EED_0000_0005);
    // Not with extended resources: their rarer outcomes keep their cases.
    if !extended && rule_rng.chance(60) {
        taint_rules(rule_rng, items, nodes);
    }
}

/// DeviceTaintRules: no selector (matches nothing), the empty selector
/// (every device), or a driver, a pool, a device name or all three; a
/// taint some claims tolerate or one none does, with any effect.
fn taint_rules(r: &mut Rng, items: &mut Vec<Value>, nodes: usize) {
    for i in 0..1 + r.below(3) {
        let pool = format!("node-{}-gpus", r.below(nodes));
        let device = format!("gpu-{}", r.below(2));
        let selector = match r.below(6) {
            0 => Value::Null,
            1 => json!({}),
            2 => json!({"driver": r.pick(&[DRIVER, NIC])}),
            3 => json!({"pool": pool}),
            4 => json!({"device": device}),
            _ => json!({"driver": DRIVER, "pool": pool, "device": device}),
        };
        let key = *r.pick(&["example.com/unhealthy", "example.com/maintenance"]);
        let effect = *r.pick(&["NoSchedule", "NoSchedule", "NoExecute", "None"]);
        let mut spec = json!({"taint": {"key": key, "value": "true", "effect": effect}});
        if !selector.is_null() {
            spec["deviceSelector"] = selector;
        }
        items.push(
            json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
            "metadata": {"name": format!("rule-{i}")}, "spec": spec}),
        );
    }
}

/// The extended resource a generated class declares.
const EXT: &str = "example.com/dra-gpu";

/// Extended resources backed by DRA: a class declaring [`EXT`] (sometimes
/// two, the newer one serving it), and the incoming pod asking for it or
/// for the implicit `deviceclass.resource.kubernetes.io/gpu`, in one or two
/// containers. The pod may keep its claims or not; some nodes may get the
/// resource from a device plugin.
fn extended_resources(
    r: &mut Rng,
    items: &mut Vec<Value>,
    pod_claims: &mut Vec<Value>,
    incoming: &mut Value,
) {
    let selectors = json!([{"cel": {"expression": r#"device.driver == "gpu.example.com""#}}]);
    items.push(
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": "ext-gpu", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"extendedResourceName": EXT, "selectors": selectors}}),
    );
    if r.chance(30) {
        // A newer class for the same name, selecting only model "a".
        items.push(json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": "ext-gpu-a", "creationTimestamp": "2026-02-01T00:00:00Z"},
            "spec": {"extendedResourceName": EXT, "selectors": [{"cel": {"expression":
                r#"device.driver == "gpu.example.com" && device.attributes["gpu.example.com"].model == "a""#}}]}}));
    }
    let res = if r.chance(70) {
        EXT
    } else {
        "deviceclass.resource.kubernetes.io/gpu"
    };
    let containers = incoming["spec"]["containers"]
        .as_array()
        .map_or(0, |c| c.len());
    let n = 1 + r.below(2);
    for i in 0..containers.min(n) {
        let want = json!(r.pick(&["1", "2"]).to_string());
        let c = &mut incoming["spec"]["containers"][i];
        // Limits alone stand for the requests too: keep it that way.
        let parts: &[&str] =
            if c["resources"]["limits"].is_object() && !c["resources"]["requests"].is_object() {
                &["limits"]
            } else {
                &["requests", "limits"]
            };
        for part in parts {
            if !c["resources"][*part].is_object() {
                c["resources"][*part] = json!({});
            }
            c["resources"][*part][res] = want.clone();
        }
    }
    if r.chance(50) {
        pod_claims.clear();
    }
    if r.chance(50) {
        for item in items.iter_mut().filter(|i| i["kind"] == "Node") {
            if r.chance(40) {
                item["status"]["allocatable"][res] = json!(r.pick(&["1", "4"]).to_string());
                item["status"]["capacity"][res] = item["status"]["allocatable"][res].clone();
            }
        }
    }
}

/// A fabric-attached device with binding conditions on one node, and a
/// claim of the incoming pod allocated to it whose device status is one of:
/// failed (a failure condition true), ready (its condition true), waiting
/// past `bindingTimeout`, or waiting within it. Filter finds the first and
/// third unavailable everywhere.
fn binding_conditions(
    r: &mut Rng,
    items: &mut Vec<Value>,
    nodes: usize,
    pod_claims: &mut Vec<Value>,
) {
    let node = r.below(nodes);
    let pool = format!("node-{node}-fabric");
    items.push(json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": "fabric"},
        "spec": {"selectors": [{"cel": {"expression": r#"device.driver == "fabric.example.com""#}}]}}));
    items.push(json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": pool},
        "spec": {"driver": "fabric.example.com", "nodeName": format!("node-{node}"),
            "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "attach-0", "bindingConditions": ["Attached"], "bindingFailureConditions": ["AttachFailed"]}]}}));
    let (stamp, condition) = match r.below(4) {
        0 => ("2026-01-01T00:00:00Z", Some(("AttachFailed", "True"))),
        1 => ("2026-01-01T00:00:00Z", Some(("Attached", "True"))),
        2 => ("2026-01-01T00:00:00Z", Some(("Attached", "False"))),
        _ => ("2099-01-01T00:00:00Z", None),
    };
    let mut c = claim(
        "attached",
        "default",
        vec![json!({"name": "req", "exactly": {"deviceClassName": "fabric"}})],
        Vec::new(),
    );
    c["status"] = json!({"allocation": {
        "allocationTimestamp": stamp,
        "devices": {"results": [{"request": "req", "driver": "fabric.example.com", "pool": pool, "device": "attach-0",
            "bindingConditions": ["Attached"], "bindingFailureConditions": ["AttachFailed"]}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [format!("node-{node}")]}]}]},
    }});
    if let Some((t, status)) = condition {
        c["status"]["devices"] = json!([{"driver": "fabric.example.com", "pool": pool, "device": "attach-0",
            "conditions": [{"type": t, "status": status, "reason": "Driver", "message": "reported", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}]);
    }
    items.push(c);
    pod_claims.push(json!({"name": "attached", "resourceClaimName": "attached"}));
}

/// For half the pods asking for [`EXT`], a configuration that scores it:
/// NodeResourcesFit (MostAllocated) over cpu and [`EXT`], which on nodes
/// without a device plugin counts the node's devices of the class and those
/// allocated. (Not NodeResourcesBalancedAllocation: v1.37.2's crashes
/// there, its CEL cache never being made — see CONFORMANCE.md.)
pub fn scoring_config(seed: u64, incoming: &Value, config: &mut Option<Value>) {
    let asks = incoming["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["resources"]["limits"][EXT].is_string());
    let r = &mut Rng::new(seed ^ 0x5C0E_0D4A_0000_0005);
    if !asks || !r.chance(50) {
        return;
    }
    let resources = json!([{"name": "cpu", "weight": 1}, {"name": EXT, "weight": 1 + r.below(3)}]);
    *config = Some(
        json!({"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "profiles": [{"schedulerName": "default-scheduler", "pluginConfig": [
            {"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "MostAllocated", "resources": resources}}},
        ]}]}),
    );
}
