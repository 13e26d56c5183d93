//! A seeded generator of small random clusters, one pending pod and a
//! KubeSchedulerConfiguration, written as the JSON objects `kubectl` prints.
//! Every feature rkube implements is exercised: resources (incl. extended,
//! init containers, sidecars, overhead, missing and zero requests), labels,
//! taints and tolerations, node selectors and affinity, images, host ports,
//! pod (anti-)affinity, topology spread, priorities and plugin configs, and
//! (in about a third of the cases) Dynamic Resource Allocation
//! ([`crate::gen_dra`]).

use serde_json::{json, Value};

pub use crate::rng::Rng;

const ZONES: [&str; 3] = ["z1", "z2", "z3"];
const APPS: [&str; 3] = ["web", "db", "cache"];
const IMAGES: [(&str, i64); 5] = [
    ("registry.example.com/web:1.0", 300 << 20),
    ("registry.example.com/db:2.1", 900 << 20),
    ("registry.example.com/cache:7", 60 << 20),
    ("busybox:1.36", 4 << 20),
    ("registry.example.com/big-ml:3", 4000 << 20),
];
const GPU: &str = "example.com/gpu";

fn cpu(r: &mut Rng) -> String {
    r.pick(&["0", "50m", "100m", "250m", "500m", "1", "1500m", "2", "3"])
        .to_string()
}

fn mem(r: &mut Rng) -> String {
    r.pick(&["0", "64Mi", "128Mi", "256Mi", "512Mi", "1Gi", "2Gi", "3Gi"])
        .to_string()
}

fn requests(r: &mut Rng, gpu: bool) -> Value {
    let mut m = serde_json::Map::new();
    if r.chance(80) {
        m.insert("cpu".into(), json!(cpu(r)));
    }
    if r.chance(75) {
        m.insert("memory".into(), json!(mem(r)));
    }
    if gpu && r.chance(40) {
        m.insert(GPU.into(), json!(r.pick(&["1", "2"]).to_string()));
    }
    if r.chance(10) {
        m.insert(
            "ephemeral-storage".into(),
            json!(r.pick(&["1Gi", "10Gi"]).to_string()),
        );
    }
    Value::Object(m)
}

fn container(r: &mut Rng, name: &str, gpu: bool, ports: bool) -> Value {
    let mut c = json!({"name": name, "image": r.pick(&IMAGES).0});
    let reqs = requests(r, gpu);
    if r.chance(10) {
        c["resources"] = json!({"limits": reqs});
    } else if reqs.as_object().is_some_and(|m| !m.is_empty()) {
        c["resources"] = json!({"requests": reqs});
    }
    if ports && r.chance(25) {
        let mut p = json!({"containerPort": 8080, "hostPort": r.pick(&[80, 443, 8080])});
        if r.chance(30) {
            p["hostIP"] = json!(r.pick(&["127.0.0.1", "10.0.0.1"]));
        }
        if r.chance(20) {
            p["protocol"] = json!("UDP");
        }
        c["ports"] = json!([p]);
    }
    c
}

fn label_selector(r: &mut Rng) -> Value {
    let app = *r.pick(&APPS);
    match r.below(4) {
        0 => {
            json!({"matchExpressions": [{"key": "app", "operator": "In", "values": [app, *r.pick(&APPS)]}]})
        }
        1 => json!({"matchExpressions": [{"key": "app", "operator": "Exists"}]}),
        _ => json!({"matchLabels": {"app": app}}),
    }
}

fn pod_affinity_term(r: &mut Rng) -> Value {
    let mut t = json!({
        "labelSelector": label_selector(r),
        "topologyKey": r.pick(&["kubernetes.io/hostname", "topology.kubernetes.io/zone"]),
    });
    if r.chance(15) {
        t["namespaceSelector"] = json!({});
    } else if r.chance(15) {
        t["namespaces"] = json!(["default", "other"]);
    }
    t
}

fn pod_affinity(r: &mut Rng) -> Value {
    let mut a = serde_json::Map::new();
    for kind in ["podAffinity", "podAntiAffinity"] {
        if !r.chance(35) {
            continue;
        }
        let mut x = serde_json::Map::new();
        if r.chance(50) {
            x.insert(
                "requiredDuringSchedulingIgnoredDuringExecution".into(),
                json!([pod_affinity_term(r)]),
            );
        }
        if r.chance(60) {
            x.insert(
                "preferredDuringSchedulingIgnoredDuringExecution".into(),
                json!([{"weight": 1 + r.below(100), "podAffinityTerm": pod_affinity_term(r)}]),
            );
        }
        a.insert(kind.into(), Value::Object(x));
    }
    Value::Object(a)
}

fn node_affinity(r: &mut Rng) -> Value {
    let mut na = serde_json::Map::new();
    if r.chance(50) {
        let term = match r.below(4) {
            0 => {
                json!({"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": [r.pick(&ZONES), r.pick(&ZONES)]}]})
            }
            1 => {
                json!({"matchExpressions": [{"key": "disk", "operator": "NotIn", "values": ["hdd"]}]})
            }
            2 => {
                json!({"matchExpressions": [{"key": "tier", "operator": "Gt", "values": [r.below(4).to_string()]}]})
            }
            _ => {
                json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": [format!("node-{}", r.below(6))]}]})
            }
        };
        na.insert(
            "requiredDuringSchedulingIgnoredDuringExecution".into(),
            json!({"nodeSelectorTerms": [term]}),
        );
    }
    if r.chance(60) {
        na.insert(
            "preferredDuringSchedulingIgnoredDuringExecution".into(),
            json!([
                {"weight": 1 + r.below(100), "preference": {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}},
                {"weight": 1 + r.below(100), "preference": {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": [r.pick(&ZONES)]}]}}
            ]),
        );
    }
    Value::Object(na)
}

fn tolerations(r: &mut Rng) -> Value {
    let mut t = Vec::new();
    if r.chance(40) {
        t.push(json!({"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}));
    }
    if r.chance(30) {
        t.push(json!({"key": "spot", "operator": "Exists"}));
    }
    if r.chance(15) {
        t.push(json!({"operator": "Exists"}));
    }
    if r.chance(20) {
        t.push(json!({"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}));
    }
    json!(t)
}

fn spread_constraints(r: &mut Rng) -> Value {
    let mut out = Vec::new();
    for key in ["kubernetes.io/hostname", "topology.kubernetes.io/zone"] {
        if !r.chance(35) {
            continue;
        }
        let mut c = json!({
            "maxSkew": 1 + r.below(2),
            "topologyKey": key,
            "whenUnsatisfiable": r.pick(&["DoNotSchedule", "ScheduleAnyway"]),
            "labelSelector": label_selector(r),
        });
        if r.chance(15) {
            c["minDomains"] = json!(1 + r.below(4));
            c["whenUnsatisfiable"] = json!("DoNotSchedule");
        }
        if r.chance(20) {
            c["nodeAffinityPolicy"] = json!(r.pick(&["Honor", "Ignore"]));
        }
        if r.chance(20) {
            c["nodeTaintsPolicy"] = json!(r.pick(&["Honor", "Ignore"]));
        }
        out.push(c);
    }
    json!(out)
}

fn node(r: &mut Rng, i: usize) -> Value {
    let name = format!("node-{i}");
    let zone = *r.pick(&ZONES);
    let mut labels = json!({
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "disk": r.pick(&["ssd", "hdd"]),
        "tier": r.below(6).to_string(),
    });
    if r.chance(90) {
        labels["topology.kubernetes.io/zone"] = json!(zone);
    }
    let mut alloc = json!({
        "cpu": r.pick(&["1", "2", "4", "8", "16"]),
        "memory": r.pick(&["2Gi", "4Gi", "8Gi", "16Gi", "32Gi"]),
        "pods": r.pick(&["3", "10", "110"]),
    });
    if r.chance(30) {
        alloc[GPU] = json!(r.pick(&["1", "2", "4"]));
    }
    if r.chance(20) {
        alloc["ephemeral-storage"] = json!("20Gi");
    }
    let mut taints = Vec::new();
    if r.chance(20) {
        taints.push(json!({"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}));
    }
    if r.chance(20) {
        taints.push(json!({"key": "spot", "value": "true", "effect": "PreferNoSchedule"}));
    }
    if r.chance(8) {
        taints.push(json!({"key": "maintenance", "effect": "NoExecute"}));
    }
    let images: Vec<Value> = IMAGES
        .iter()
        .filter(|_| r.chance(35))
        .map(|(n, s)| json!({"names": [n], "sizeBytes": s}))
        .collect();
    let mut spec = json!({});
    if r.chance(8) {
        spec["unschedulable"] = json!(true);
    }
    if !taints.is_empty() {
        spec["taints"] = json!(taints);
    }
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
        "status": {"allocatable": alloc.clone(), "capacity": alloc, "images": images},
    })
}

fn pod(r: &mut Rng, name: &str, ns: &str, node: Option<&str>, rich: bool) -> Value {
    let app = *r.pick(&APPS);
    let gpu = r.chance(30);
    let mut spec = json!({"containers": [container(r, "main", gpu, true)]});
    if r.chance(25) {
        spec["containers"]
            .as_array_mut()
            .expect("array")
            .push(container(r, "side", false, false));
    }
    if r.chance(20) {
        let mut init = container(r, "init", false, false);
        if r.chance(40) {
            init["restartPolicy"] = json!("Always");
        }
        spec["initContainers"] = json!([init]);
    }
    if r.chance(8) {
        spec["overhead"] = json!({"cpu": "100m", "memory": "64Mi"});
    }
    if let Some(n) = node {
        spec["nodeName"] = json!(n);
    }
    if let Some(class) = *r.pick(&[None, None, Some("low"), Some("high")]) {
        spec["priorityClassName"] = json!(class);
    }
    if rich || r.chance(40) {
        let aff = pod_affinity(r);
        let mut affinity = serde_json::Map::new();
        if let Some(m) = aff.as_object() {
            for (k, v) in m {
                affinity.insert(k.clone(), v.clone());
            }
        }
        if rich && r.chance(50) {
            affinity.insert("nodeAffinity".into(), node_affinity(r));
        }
        if !affinity.is_empty() {
            spec["affinity"] = Value::Object(affinity);
        }
    }
    if rich {
        if r.chance(30) {
            spec["nodeSelector"] = json!({"disk": r.pick(&["ssd", "hdd"])});
        }
        spec["tolerations"] = tolerations(r);
        let tsc = spread_constraints(r);
        if tsc.as_array().is_some_and(|a| !a.is_empty()) {
            spec["topologySpreadConstraints"] = tsc;
        }
        if r.chance(10) {
            spec["priorityClassName"] = json!("high-no-preempt");
        }
    } else if r.chance(30) {
        spec["tolerations"] = tolerations(r);
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": app}},
        "spec": spec,
    })
}

fn config(r: &mut Rng) -> Option<Value> {
    let head = json!({"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration"});
    let profile = match r.below(9) {
        0..=2 => return None,
        3 => {
            json!({"schedulerName": "default-scheduler", "pluginConfig": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "MostAllocated", "resources": [{"name": "cpu", "weight": 1 + r.below(5)}, {"name": "memory", "weight": 1}]}}}]})
        }
        4 => {
            json!({"schedulerName": "default-scheduler", "pluginConfig": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "RequestedToCapacityRatio", "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}, {"name": GPU, "weight": 2}], "requestedToCapacityRatio": {"shape": [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]}}}}]})
        }
        5 => {
            json!({"schedulerName": "default-scheduler", "plugins": {"score": {"disabled": [{"name": "ImageLocality"}]}, "multiPoint": {"enabled": [{"name": "NodeAffinity", "weight": 5}]}}})
        }
        6 => {
            json!({"schedulerName": "default-scheduler", "pluginConfig": [{"name": "InterPodAffinity", "args": {"hardPodAffinityWeight": r.below(10), "ignorePreferredTermsOfExistingPods": r.chance(50)}}]})
        }
        7 => {
            json!({"schedulerName": "default-scheduler", "pluginConfig": [{"name": "NodeAffinity", "args": {"addedAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 10, "preference": {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": [r.pick(&ZONES)]}]}}]}}}]})
        }
        _ => {
            json!({"schedulerName": "default-scheduler", "pluginConfig": [{"name": "PodTopologySpread", "args": {"defaultingType": "List", "defaultConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"}]}}]})
        }
    };
    let mut cfg = head;
    cfg["profiles"] = json!([profile]);
    Some(cfg)
}

/// One generated case.
pub struct Case {
    /// The cluster as a `List`.
    pub cluster: Value,
    /// The configuration, or `None` for the defaults.
    pub config: Option<Value>,
    /// The pod to explain.
    pub pod: String,
}

/// Generates a case from a seed.
pub fn case(seed: u64) -> Case {
    let r = &mut Rng::new(seed);
    let n_nodes = 2 + r.below(7);
    let mut items: Vec<Value> = (0..n_nodes).map(|i| node(r, i)).collect();
    items.push(json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "low"}, "value": 100}));
    items.push(json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "high"}, "value": 1000}));
    items.push(json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "high-no-preempt"}, "value": 1000, "preemptionPolicy": "Never"}));
    items.push(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default", "labels": {"kubernetes.io/metadata.name": "default", "team": "a"}}}));
    items.push(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other", "labels": {"kubernetes.io/metadata.name": "other", "team": "b"}}}));
    let n_pods = r.below(13);
    for i in 0..n_pods {
        let node = format!("node-{}", r.below(n_nodes));
        let ns = if r.chance(80) { "default" } else { "other" };
        items.push(pod(r, &format!("existing-{i}"), ns, Some(&node), false));
    }
    let mut incoming = pod(r, "incoming", "default", None, true);
    let before = (items.len(), incoming.clone());
    crate::gen_dra::add(seed, &mut items, n_nodes, &mut incoming);
    // CSI volumes only where DRA added nothing: the DRA cases stay as they
    // were (their coverage test counts their outcomes).
    if before == (items.len(), incoming.clone()) {
        crate::gen_csi::add(seed, &mut items, n_nodes, &mut incoming);
        declared_features(seed, &mut items, &mut incoming);
        resizes(seed, &mut items, &mut incoming);
    }
    let mut config = config(r);
    crate::gen_dra::scoring_config(seed, &incoming, &mut config);
    items.push(incoming);
    Case {
        cluster: json!({"apiVersion": "v1", "kind": "List", "items": items}),
        config,
        pod: "default/incoming".into(),
    }
}

/// Node declared features: nodes declare some of the three features a pod
/// can be inferred to need (and one no pod needs), and the incoming pod
/// needs some of them (restart rules, a user namespace on the host
/// network, bind mount options). Its own generator, as gen_dra's.
fn declared_features(seed: u64, items: &mut [Value], incoming: &mut Value) {
    const FEATURES: [&str; 4] = [
        "RestartAllContainersOnContainerExits",
        "UserNamespacesHostNetworkSupport",
        "VolumeBindMountOptions",
        "DRANodeAllocatableResources",
    ];
    let r = &mut Rng::new(seed ^ 0xFEA7_5EED_0000_0006);
    if !r.chance(25) {
        return;
    }
    for node in items.iter_mut().filter(|i| i["kind"] == "Node") {
        let declared: Vec<&str> = FEATURES.iter().copied().filter(|_| r.chance(60)).collect();
        if !declared.is_empty() {
            node["status"]["declaredFeatures"] = json!(declared);
        }
    }
    let spec = &mut incoming["spec"];
    if r.chance(50) {
        spec["containers"][0]["restartPolicy"] = json!("Never");
        spec["containers"][0]["restartPolicyRules"] = json!([{"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [42]}}]);
    }
    if r.chance(40) {
        spec["hostUsers"] = json!(false);
        if r.chance(70) {
            spec["hostNetwork"] = json!(true);
        }
    }
    if r.chance(50) {
        spec["containers"][0]["volumeMounts"] =
            json!([{"name": "scratch", "mountPath": "/scratch", "bindMountOptions": ["nosuid"]}]);
        let volumes = spec
            .as_object_mut()
            .expect("pod spec")
            .entry("volumes")
            .or_insert_with(|| json!([]));
        if let Some(v) = volumes.as_array_mut() {
            v.push(json!({"name": "scratch", "emptyDir": {}}));
        }
    }
}

/// In-place resizes under way: some pods' status says what the kubelet
/// allocated and what the runtime applied, per container and (with
/// pod-level requests) for the pod, and sometimes that the resize is
/// infeasible or deferred. Bound pods mostly; the incoming pod rarely (the
/// filter reads its spec, the score its status). Its own generator, as
/// gen_dra's.
fn resizes(seed: u64, items: &mut [Value], incoming: &mut Value) {
    let r = &mut Rng::new(seed ^ 0x2E51_2E00_0000_0007);
    if !r.chance(30) {
        return;
    }
    let pods = items
        .iter_mut()
        .filter(|i| i["kind"] == "Pod")
        .chain(std::iter::once(incoming));
    for pod in pods {
        let bound = pod["spec"]["nodeName"].is_string();
        if !r.chance(if bound { 60 } else { 20 }) {
            continue;
        }
        let statuses = |list: &str, r: &mut Rng| -> Vec<Value> {
            let names: Vec<String> = pod["spec"][list]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["name"].as_str().map(String::from))
                .collect();
            let kept: Vec<String> = names.into_iter().filter(|_| r.chance(80)).collect();
            kept.into_iter()
                .map(|name| {
                    let mut cs = json!({"name": name, "image": "busybox:1.36", "imageID": "", "ready": true, "restartCount": 0});
                    if r.chance(70) {
                        // Half of them growing a lot: a resize up that
                        // the node may not have room for.
                        cs["allocatedResources"] = if r.chance(50) {
                            json!({"cpu": r.pick(&["2", "3", "4"]).to_string(), "memory": r.pick(&["2Gi", "4Gi"]).to_string()})
                        } else {
                            requests(r, false)
                        };
                    }
                    if r.chance(70) {
                        cs["resources"] = json!({"requests": requests(r, false)});
                    }
                    cs
                })
                .collect()
        };
        let containers = statuses("containers", r);
        let init = statuses("initContainers", r);
        let mut status = json!({"containerStatuses": containers});
        if !init.is_empty() {
            status["initContainerStatuses"] = json!(init);
        }
        if r.chance(35) {
            let reason = r.pick(&["Infeasible", "Deferred"]).to_string();
            status["conditions"] =
                json!([{"type": "PodResizePending", "status": "True", "reason": reason}]);
        }
        if r.chance(30) {
            pod["spec"]["resources"] = json!({"requests": {"cpu": cpu(r), "memory": mem(r)}});
            if r.chance(60) {
                status["allocatedResources"] = json!({"cpu": cpu(r), "memory": mem(r)});
            }
            if r.chance(60) {
                status["resources"] = json!({"requests": {"cpu": cpu(r)}});
            }
        }
        pod["status"] = status;
    }
}

/// A cluster with several pending pods (no priorities, so no preemption) and
/// claims bound to zonal or node-local volumes, for simulator invariants.
pub fn simulation_cluster(seed: u64) -> Value {
    let r = &mut Rng::new(seed ^ 0x005E_ED0F_1A7E);
    let n_nodes = 3 + r.below(8);
    let mut items: Vec<Value> = (0..n_nodes).map(|i| node(r, i)).collect();
    items.push(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default", "labels": {"kubernetes.io/metadata.name": "default", "team": "a"}}}));
    items.push(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other", "labels": {"kubernetes.io/metadata.name": "other", "team": "b"}}}));
    // Volumes: one per zone, and one local to node-0, each bound to a claim.
    let volumes = [
        (
            "pv-z1",
            json!({"topology.kubernetes.io/zone": "z1"}),
            Value::Null,
        ),
        (
            "pv-z2",
            json!({"topology.kubernetes.io/zone": "z2"}),
            Value::Null,
        ),
        (
            "pv-local",
            json!({}),
            json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-0"]}]}]}}),
        ),
    ];
    for (name, labels, affinity) in &volumes {
        let claim = format!("claim-{name}");
        let mut spec = json!({"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteMany"], "claimRef": {"namespace": "default", "name": claim}});
        if !affinity.is_null() {
            spec["nodeAffinity"] = affinity.clone();
        }
        items.push(json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name, "labels": labels}, "spec": spec, "status": {"phase": "Bound"}}));
        items.push(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": claim, "namespace": "default", "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
            "spec": {"volumeName": name, "accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}, "status": {"phase": "Bound"}}));
    }
    for i in 0..r.below(10) {
        let node = format!("node-{}", r.below(n_nodes));
        let ns = if r.chance(80) { "default" } else { "other" };
        let mut p = pod(r, &format!("existing-{i}"), ns, Some(&node), false);
        p["spec"]
            .as_object_mut()
            .expect("object")
            .remove("priorityClassName");
        items.push(p);
    }
    let mut previous: Option<Value> = None;
    for i in 0..(3 + r.below(15)) {
        // Zero-padded: upstream's informers list pods by name, and its
        // queue orders equal priorities by arrival; so does file order here.
        let name = format!("pending-{i:02}");
        // Replicas: the previous pod's template again (what
        // OpportunisticBatching batches), or a new pod, plain or rich.
        if let Some(prev) = previous.as_ref().filter(|_| r.chance(45)) {
            let mut p = prev.clone();
            p["metadata"]["name"] = json!(name);
            items.push(p);
            continue;
        }
        let rich = r.chance(60);
        let mut p = pod(r, &name, "default", None, rich);
        let spec = p["spec"].as_object_mut().expect("object");
        spec.remove("priorityClassName");
        if r.chance(25) {
            let (pv, _, _) = r.pick(&volumes);
            spec.insert(
                "volumes".into(),
                json!([{"name": "data", "persistentVolumeClaim": {"claimName": format!("claim-{pv}")}}]),
            );
        }
        previous = Some(p.clone());
        items.push(p);
    }
    json!({"apiVersion": "v1", "kind": "List", "items": items})
}

/// A [`simulation_cluster`] whose pending pods are partly members of
/// PodGroups (GenericWorkload): runs of consecutive pending pods form
/// groups with the gang policy (a `minCount` from 1 to the run's length)
/// or the basic policy; the other pods stay single. Members arrive
/// together: upstream's queue keeps a gang gated until its `minCount`-th
/// member arrives, and where it then sorts among pods that arrived in
/// between depends on timing. Every pod keeps priority 0, so a failed gang
/// has no victims ([`gang_preemption_cluster`] has some).
pub fn gang_cluster(seed: u64) -> Value {
    let mut cluster = simulation_cluster(seed);
    let r = &mut Rng::new(seed ^ 0x6A46_6C05);
    let mut sizes: Vec<usize> = Vec::new();
    let items = cluster["items"].as_array_mut().expect("a list");
    let mut run_left = 0;
    for it in items.iter_mut() {
        let pending = it["kind"] == "Pod"
            && it["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("pending-"));
        if !pending {
            continue;
        }
        if run_left == 0 {
            if !r.chance(45) {
                continue;
            }
            run_left = 2 + r.below(5);
            sizes.push(0);
        }
        run_left -= 1;
        let g = sizes.len() - 1;
        sizes[g] += 1;
        it["spec"]["schedulingGroup"] = json!({"podGroupName": format!("gang-{g}")});
    }
    for (g, &size) in sizes.iter().enumerate().filter(|(_, s)| **s > 0) {
        let policy = if r.chance(75) {
            // Bias towards whole gangs.
            let min = if r.chance(60) {
                size
            } else {
                1 + r.below(size)
            };
            json!({"gang": {"minCount": min}})
        } else {
            json!({"basic": {}})
        };
        items.push(json!({
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": format!("gang-{g}"), "namespace": "default"},
            "spec": {"schedulingPolicy": policy},
        }));
    }
    cluster
}

/// A cluster for workload-aware preemption (GenericWorkload): nodes
/// partly filled with running pods of low and middle priority — some of
/// them members of running PodGroups whose disruption mode is `single` or
/// `all`, some covered by PodDisruptionBudgets — and one pending gang of
/// high priority (sometimes with `preemptionPolicy: Never`), all or
/// nothing, that often fits only by preempting; one time in four, a single
/// pending pod of that priority instead. The preemptor is the only pending
/// entity: upstream retries a preemptor after a backoff while other pods go
/// on, which the simulator, retrying it at once, would not match.
pub fn gang_preemption_cluster(seed: u64) -> Value {
    let r = &mut Rng::new(seed ^ 0x0D15_4B7E);
    let n_nodes = 2 + r.below(5);
    let mut items: Vec<Value> = Vec::new();
    items.push(json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "low"}, "value": 0}));
    items.push(json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "mid"}, "value": 50}));
    items.push(json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "high"}, "value": 1000}));
    items.push(json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "high-never"}, "value": 1000, "preemptionPolicy": "Never"}));
    for i in 0..n_nodes {
        let name = format!("node-{i}");
        items.push(json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": ZONES[i % 2]}},
            "status": {"allocatable": {"cpu": r.pick(&["2", "4"]), "memory": "8Gi", "pods": "110"}}}));
    }
    // Running groups: their class, disruption mode and members' label.
    let n_groups = r.below(4);
    let mut groups: Vec<(&str, bool)> = Vec::new();
    for g in 0..n_groups {
        let class = *r.pick(&["low", "mid"]);
        let all = r.chance(50);
        let mode = if all {
            json!({"all": {}})
        } else {
            json!({"single": {}})
        };
        items.push(json!({"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": format!("run-{g}"), "namespace": "default"},
            "spec": {"schedulingPolicy": {"basic": {}}, "priorityClassName": class, "disruptionMode": mode}}));
        groups.push((class, all));
    }
    let mut n = 0;
    for i in 0..n_nodes {
        for _ in 0..(2 + r.below(4)) {
            let name = format!("running-{n:02}");
            let second = 10 + n;
            n += 1;
            let cpu = *r.pick(&["250m", "500m", "1", "1"]);
            let mut labels = json!({"app": r.pick(&["a", "b"])});
            let mut spec = json!({"nodeName": format!("node-{i}"),
                "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}]});
            let class = if !groups.is_empty() && r.chance(50) {
                let g = r.below(groups.len());
                spec["schedulingGroup"] = json!({"podGroupName": format!("run-{g}")});
                labels["group"] = json!(format!("run-{g}"));
                groups[g].0
            } else {
                *r.pick(&["low", "mid"])
            };
            spec["priorityClassName"] = json!(class);
            items.push(json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "default", "labels": labels,
                    "creationTimestamp": format!("2026-01-01T00:00:{second:02}Z")},
                "spec": spec,
                "status": {"phase": "Running", "startTime": format!("2026-01-01T00:00:{second:02}Z")}}));
        }
    }
    for (k, app) in ["a", "b"].iter().enumerate() {
        if r.chance(40) {
            items.push(json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": format!("pdb-{k}"), "namespace": "default"},
                "spec": {"selector": {"matchLabels": {"app": app}}},
                "status": {"disruptionsAllowed": r.below(3), "currentHealthy": 3, "desiredHealthy": 2, "expectedPods": 3, "observedGeneration": 1}}));
        }
    }
    // A whole gang: a group that may succeed with members left would try
    // them again in a cycle of their own, whose preemption upstream's loop
    // races with the end of its run (it stops once every pod has a first
    // outcome).
    let size = 1 + r.below(5);
    let policy = json!({"gang": {"minCount": size}});
    let class = if r.chance(10) { "high-never" } else { "high" };
    let cpu = *r.pick(&["1", "1500m", "2", "3"]);
    // One time in four the preemptor is a single pod outside any group:
    // DefaultPreemption's own PostFilter, whose victims are the same units
    // with the gate on (a group with disruption mode `all` goes whole).
    let single = r.chance(25);
    if !single {
        items.push(
            json!({"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": "gang", "namespace": "default"},
            "spec": {"schedulingPolicy": policy, "priorityClassName": class}}),
        );
    }
    for m in 0..(if single { 1 } else { size }) {
        let mut spec = json!({"priorityClassName": class,
            "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}]});
        if !single {
            spec["schedulingGroup"] = json!({"podGroupName": "gang"});
        }
        items.push(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("pending-{m:02}"), "namespace": "default",
                "creationTimestamp": "2026-01-02T00:00:00Z"},
            "spec": spec}));
    }
    json!({"apiVersion": "v1", "kind": "List", "items": items})
}
