//! `plugins/noderesources/fit_test.go` (Filter: TestEnoughRequests,
//! TestNotEnoughRequests, TestStorageRequests, TestRestartableInitContainers;
//! Score: TestFitScore), `least_allocated_test.go`, `most_allocated_test.go`
//! and `requested_to_capacity_ratio_test.go`.

use std::collections::HashSet;
use std::sync::Arc;

use rkube_framework::{Code, CycleState, Plugin, Snapshot, Status, MAX_NODE_SCORE};
use rkube_model::resources::ResourceList;
use rkube_model::{Node, Pod, Quantity};
use rkube_plugins::noderesources::fit::{broken_linear, fits_request};
use serde_json::{json, Value};

use crate::common::*;

const EXT_A: &str = "example.com/aaa";
const EXT_B: &str = "example.com/bbb";
const K8S_IO_A: &str = "kubernetes.io/something";
const K8S_IO_B: &str = "subdomain.kubernetes.io/something";
const HUGE_A: &str = "hugepages-2Mi";
const DRA_EXT: &str = "extended.resource.dra.io/something";
const EXTENDED_RES: &str = "abc.com/xyz";

/// Upstream's `framework.Resource` as the tests fill it.
#[derive(Clone, Default)]
struct Res {
    milli_cpu: i64,
    memory: i64,
    ephemeral: i64,
    scalars: Vec<(&'static str, i64)>,
}

fn r(milli_cpu: i64, memory: i64) -> Res {
    Res {
        milli_cpu,
        memory,
        ..Default::default()
    }
}

fn rs(milli_cpu: i64, memory: i64, scalars: &[(&'static str, i64)]) -> Res {
    Res {
        milli_cpu,
        memory,
        ephemeral: 0,
        scalars: scalars.to_vec(),
    }
}

/// The request list upstream's `newResourcePod` gives each container
/// (cpu, memory, pods and ephemeral-storage always set, even to zero).
fn res_list(u: &Res) -> ResourceList {
    let mut l = ResourceList::new();
    l.insert("cpu".into(), Quantity::from_milli(u.milli_cpu));
    l.insert("memory".into(), Quantity::from_units(u.memory));
    l.insert("pods".into(), Quantity::from_units(0));
    l.insert(
        "ephemeral-storage".into(),
        Quantity::from_units(u.ephemeral),
    );
    for (k, v) in &u.scalars {
        l.insert(k.to_string(), Quantity::from_units(*v));
    }
    l
}

/// Upstream's `newResourcePod(usage...)`: one container per entry.
fn nrp(usage: &[Res]) -> PodBuilder {
    usage.iter().fold(pod(), |p, u| p.req_list(res_list(u)))
}

/// Upstream's `newResourceInitPod(pod, usage...)`.
fn nrip(p: PodBuilder, usage: &[Res]) -> PodBuilder {
    usage.iter().fold(p, |p, u| p.init_req_list(res_list(u)))
}

/// Upstream's `makeAllocatableResources(milliCPU, memory, pods, extendedA, storage, hugePageA)`.
fn make_allocatable(
    cpu: i64,
    mem: i64,
    pods: i64,
    ext_a: i64,
    storage: i64,
    huge: i64,
) -> ResourceList {
    let mut l = ResourceList::new();
    l.insert("cpu".into(), Quantity::from_milli(cpu));
    l.insert("memory".into(), Quantity::from_units(mem));
    l.insert("pods".into(), Quantity::from_units(pods));
    l.insert(EXT_A.into(), Quantity::from_units(ext_a));
    l.insert("ephemeral-storage".into(), Quantity::from_units(storage));
    l.insert(HUGE_A.into(), Quantity::from_units(huge));
    l
}

/// NodeResourcesFitArgs with a scoring strategy.
fn fit_args(type_: &str, resources: &[(&str, i64)], shape: Option<&[(i32, i32)]>) -> Value {
    let mut s = json!({
        "type": type_,
        "resources": resources.iter().map(|(n, w)| json!({"name": n, "weight": w})).collect::<Vec<_>>(),
    });
    if let Some(shape) = shape {
        s["requestedToCapacityRatio"] = json!({
            "shape": shape.iter().map(|(u, sc)| json!({"utilization": u, "score": sc})).collect::<Vec<_>>()
        });
    }
    json!({ "scoringStrategy": s })
}

const DEFAULT_RESOURCES: &[(&str, i64)] = &[("cpu", 1), ("memory", 1)];
const EXTENDED_RESOURCE_SET: &[(&str, i64)] = &[("cpu", 1), ("memory", 1), (EXTENDED_RES, 1)];

fn default_args() -> Value {
    fit_args("LeastAllocated", DEFAULT_RESOURCES, None)
}

fn fit_plugin(args: &Value) -> Result<Arc<dyn Plugin>, String> {
    rkube_plugins::noderesources::fit::new(args, "NodeResourcesFitArgs")
}

fn insufficient(name: &str) -> String {
    format!("Insufficient {name}")
}

/// One expected `InsufficientResource`: (name, requested, used, capacity, unresolvable).
type Want = (&'static str, i64, i64, i64, bool);

struct EnoughCase {
    name: &'static str,
    pod: Pod,
    existing: Vec<Pod>,
    args: Value,
    want_status: Status,
    want_insufficient: Vec<Want>,
}

fn case(
    name: &'static str,
    pod: PodBuilder,
    existing: PodBuilder,
    want_status: Status,
    want: Vec<Want>,
) -> EnoughCase {
    EnoughCase {
        name,
        pod: pod.obj(),
        existing: vec![existing.obj()],
        args: default_args(),
        want_status,
        want_insufficient: want,
    }
}

fn unsched(names: &[&str]) -> Status {
    let reasons: Vec<String> = names.iter().map(|n| insufficient(n)).collect();
    Status::with_reasons(Code::Unschedulable, reasons)
}

fn unresolvable(names: &[&str]) -> Status {
    let reasons: Vec<String> = names.iter().map(|n| insufficient(n)).collect();
    Status::with_reasons(Code::UnschedulableAndUnresolvable, reasons)
}

#[test]
fn test_enough_requests() {
    let empty = || nrp(&[Res::default()]);
    let mut cases = vec![
        EnoughCase {
            name: "no resources requested always fits",
            pod: pod().obj(),
            existing: vec![nrp(&[r(10, 20)]).obj()],
            args: default_args(),
            want_status: success(),
            want_insufficient: vec![],
        },
        case(
            "too many resources fails",
            nrp(&[r(1, 1)]),
            nrp(&[r(10, 20)]),
            unsched(&["cpu", "memory"]),
            vec![("cpu", 1, 10, 10, false), ("memory", 1, 20, 20, false)],
        ),
        case(
            "too many resources fails due to init container cpu",
            nrip(nrp(&[r(1, 1)]), &[r(3, 1)]),
            nrp(&[r(8, 19)]),
            unsched(&["cpu"]),
            vec![("cpu", 3, 8, 10, false)],
        ),
        case(
            "too many resources fails due to highest init container cpu",
            nrip(nrp(&[r(1, 1)]), &[r(3, 1), r(2, 1)]),
            nrp(&[r(8, 19)]),
            unsched(&["cpu"]),
            vec![("cpu", 3, 8, 10, false)],
        ),
        case(
            "too many resources fails due to init container memory",
            nrip(nrp(&[r(1, 1)]), &[r(1, 3)]),
            nrp(&[r(9, 19)]),
            unsched(&["memory"]),
            vec![("memory", 3, 19, 20, false)],
        ),
        case(
            "too many resources fails due to highest init container memory",
            nrip(nrp(&[r(1, 1)]), &[r(1, 3), r(1, 2)]),
            nrp(&[r(9, 19)]),
            unsched(&["memory"]),
            vec![("memory", 3, 19, 20, false)],
        ),
        case(
            "init container fits because it's the max, not sum, of containers and init containers",
            nrip(nrp(&[r(1, 1)]), &[r(1, 1)]),
            nrp(&[r(9, 19)]),
            success(),
            vec![],
        ),
        case(
            "multiple init containers fit because it's the max, not sum, of containers and init containers",
            nrip(nrp(&[r(1, 1)]), &[r(1, 1), r(1, 1)]),
            nrp(&[r(9, 19)]),
            success(),
            vec![],
        ),
        case("both resources fit", nrp(&[r(1, 1)]), nrp(&[r(5, 5)]), success(), vec![]),
        case(
            "one resource memory fits",
            nrp(&[r(2, 1)]),
            nrp(&[r(9, 5)]),
            unsched(&["cpu"]),
            vec![("cpu", 2, 9, 10, false)],
        ),
        case(
            "one resource cpu fits",
            nrp(&[r(1, 2)]),
            nrp(&[r(5, 19)]),
            unsched(&["memory"]),
            vec![("memory", 2, 19, 20, false)],
        ),
        case("equal edge case", nrp(&[r(5, 1)]), nrp(&[r(5, 19)]), success(), vec![]),
        case(
            "equal edge case for init container",
            nrip(nrp(&[r(4, 1)]), &[r(5, 1)]),
            nrp(&[r(5, 19)]),
            success(),
            vec![],
        ),
        case(
            "extended resource fits",
            nrp(&[rs(0, 0, &[(EXT_A, 1)])]),
            empty(),
            success(),
            vec![],
        ),
        case(
            "extended resource fits for init container",
            nrip(empty(), &[rs(0, 0, &[(EXT_A, 1)])]),
            empty(),
            success(),
            vec![],
        ),
        case(
            "extended resource capacity enforced",
            nrp(&[rs(1, 1, &[(EXT_A, 10)])]),
            nrp(&[rs(0, 0, &[(EXT_A, 0)])]),
            unresolvable(&[EXT_A]),
            vec![(EXT_A, 10, 0, 5, true)],
        ),
        case(
            "extended resource capacity enforced for init container",
            nrip(empty(), &[rs(1, 1, &[(EXT_A, 10)])]),
            nrp(&[rs(0, 0, &[(EXT_A, 0)])]),
            unresolvable(&[EXT_A]),
            vec![(EXT_A, 10, 0, 5, true)],
        ),
        case(
            "extended resource allocatable enforced",
            nrp(&[rs(1, 1, &[(EXT_A, 1)])]),
            nrp(&[rs(0, 0, &[(EXT_A, 5)])]),
            unsched(&[EXT_A]),
            vec![(EXT_A, 1, 5, 5, false)],
        ),
        case(
            "extended resource allocatable enforced for init container",
            nrip(empty(), &[rs(1, 1, &[(EXT_A, 1)])]),
            nrp(&[rs(0, 0, &[(EXT_A, 5)])]),
            unsched(&[EXT_A]),
            vec![(EXT_A, 1, 5, 5, false)],
        ),
        case(
            "extended resource allocatable enforced for multiple containers",
            nrp(&[rs(1, 1, &[(EXT_A, 3)]), rs(1, 1, &[(EXT_A, 3)])]),
            nrp(&[rs(0, 0, &[(EXT_A, 2)])]),
            unresolvable(&[EXT_A]),
            vec![(EXT_A, 6, 2, 5, true)],
        ),
        case(
            "extended resource allocatable admits multiple init containers",
            nrip(empty(), &[rs(1, 1, &[(EXT_A, 3)]), rs(1, 1, &[(EXT_A, 3)])]),
            nrp(&[rs(0, 0, &[(EXT_A, 2)])]),
            success(),
            vec![],
        ),
        case(
            "extended resource allocatable enforced for multiple init containers",
            nrip(empty(), &[rs(1, 1, &[(EXT_A, 6)]), rs(1, 1, &[(EXT_A, 3)])]),
            nrp(&[rs(0, 0, &[(EXT_A, 2)])]),
            unresolvable(&[EXT_A]),
            vec![(EXT_A, 6, 2, 5, true)],
        ),
        case(
            "extended resource allocatable enforced for unknown resource",
            nrp(&[rs(1, 1, &[(EXT_B, 1)])]),
            nrp(&[r(0, 0)]),
            unresolvable(&[EXT_B]),
            vec![(EXT_B, 1, 0, 0, true)],
        ),
        case(
            "extended resource allocatable enforced for unknown resource for init container",
            nrip(empty(), &[rs(1, 1, &[(EXT_B, 1)])]),
            nrp(&[r(0, 0)]),
            unresolvable(&[EXT_B]),
            vec![(EXT_B, 1, 0, 0, true)],
        ),
        case(
            "kubernetes.io resource capacity enforced",
            nrp(&[rs(1, 1, &[(K8S_IO_A, 10)])]),
            nrp(&[r(0, 0)]),
            unresolvable(&[K8S_IO_A]),
            vec![(K8S_IO_A, 10, 0, 0, true)],
        ),
        case(
            "kubernetes.io resource capacity enforced for init container",
            nrip(empty(), &[rs(1, 1, &[(K8S_IO_B, 10)])]),
            nrp(&[r(0, 0)]),
            unresolvable(&[K8S_IO_B]),
            vec![(K8S_IO_B, 10, 0, 0, true)],
        ),
        case(
            "hugepages resource capacity enforced",
            nrp(&[rs(1, 1, &[(HUGE_A, 10)])]),
            nrp(&[rs(0, 0, &[(HUGE_A, 0)])]),
            unresolvable(&[HUGE_A]),
            vec![(HUGE_A, 10, 0, 5, true)],
        ),
        case(
            "hugepages resource capacity enforced for init container",
            nrip(empty(), &[rs(1, 1, &[(HUGE_A, 10)])]),
            nrp(&[rs(0, 0, &[(HUGE_A, 0)])]),
            unresolvable(&[HUGE_A]),
            vec![(HUGE_A, 10, 0, 5, true)],
        ),
        case(
            "hugepages resource allocatable enforced for multiple containers",
            nrp(&[rs(1, 1, &[(HUGE_A, 3)]), rs(1, 1, &[(HUGE_A, 3)])]),
            nrp(&[rs(0, 0, &[(HUGE_A, 2)])]),
            unresolvable(&[HUGE_A]),
            vec![(HUGE_A, 6, 2, 5, true)],
        ),
        EnoughCase {
            args: json!({"ignoredResources": [EXT_B], "scoringStrategy": default_args()["scoringStrategy"]}),
            ..case(
                "skip checking ignored extended resource",
                nrp(&[rs(1, 1, &[(EXT_B, 1)])]),
                nrp(&[r(0, 0)]),
                success(),
                vec![],
            )
        },
        case(
            "resources + pod overhead fits",
            nrp(&[r(1, 1)]).overhead(&[("cpu", "3m"), ("memory", "13")]),
            nrp(&[r(5, 5)]),
            success(),
            vec![],
        ),
        case(
            "requests + overhead does not fit for memory",
            nrp(&[r(1, 1)]).overhead(&[("cpu", "1m"), ("memory", "15")]),
            nrp(&[r(5, 5)]),
            unsched(&["memory"]),
            vec![("memory", 16, 5, 20, false)],
        ),
        EnoughCase {
            args: json!({"ignoredResourceGroups": ["example.com"], "scoringStrategy": default_args()["scoringStrategy"]}),
            ..case(
                "skip checking ignored extended resource via resource groups",
                nrp(&[rs(1, 1, &[(EXT_B, 1), (K8S_IO_A, 1)])]),
                nrp(&[r(0, 0)]),
                unresolvable(&[K8S_IO_A]),
                vec![(K8S_IO_A, 1, 0, 0, true)],
            )
        },
        case(
            "skip checking extended resource request with quantity zero via resource groups",
            nrp(&[rs(1, 1, &[(EXT_A, 0)])]),
            nrp(&[rs(0, 0, &[(EXT_A, 6)])]),
            success(),
            vec![],
        ),
        // podLevelResourcesEnabled: true (PodLevelResources is on in v1.37,
        // and rkube always honours pod-level requests).
        case(
            "skip checking resource request with quantity zero",
            nrp(&[rs(0, 0, &[(EXT_A, 1)])]),
            nrp(&[rs(20, 30, &[(EXT_A, 1)])]),
            success(),
            vec![],
        ),
        case(
            "both pod-level and container-level resources fit",
            nrp(&[r(1, 1)]).pod_requests(&[("cpu", "1m"), ("memory", "2")]),
            nrp(&[r(5, 5)]),
            success(),
            vec![],
        ),
        case(
            "pod-level cpu resource not fit",
            nrp(&[r(1, 1)]).pod_requests(&[("cpu", "7m"), ("memory", "2")]),
            nrp(&[r(5, 5)]),
            unsched(&["cpu"]),
            vec![("cpu", 7, 5, 10, false)],
        ),
        case(
            "pod-level memory resource not fit",
            nrp(&[r(1, 1)]).pod_requests(&[("cpu", "3m"), ("memory", "2")]),
            nrp(&[r(5, 19)]),
            unsched(&["memory"]),
            vec![("memory", 2, 19, 20, false)],
        ),
        EnoughCase {
            existing: vec![],
            ..case(
                "pod-level hugepages resource fit",
                nrp(&[]).pod_requests(&[("cpu", "3m"), ("memory", "2"), (HUGE_A, "5")]),
                pod(),
                success(),
                vec![],
            )
        },
        EnoughCase {
            existing: vec![],
            ..case(
                "both pod-level and container-level hugepages resource fit",
                nrp(&[rs(1, 1, &[(HUGE_A, 3)])]).pod_requests(&[("cpu", "3m"), ("memory", "2"), (HUGE_A, "5")]),
                pod(),
                success(),
                vec![],
            )
        },
        EnoughCase {
            existing: vec![],
            ..case(
                "pod-level hugepages resource not fit",
                nrp(&[]).pod_requests(&[("cpu", "3m"), ("memory", "2"), (HUGE_A, "10")]),
                pod(),
                unresolvable(&[HUGE_A]),
                vec![(HUGE_A, 10, 0, 5, true)],
            )
        },
        case(
            "one pod-level cpu resource fits and all init and non-init containers resources fit",
            nrip(nrp(&[r(1, 1)]).pod_requests(&[("cpu", "3m"), ("memory", "2")]), &[r(1, 1)]),
            nrp(&[r(5, 19)]),
            unsched(&["memory"]),
            vec![("memory", 2, 19, 20, false)],
        ),
        case(
            "extended resource backed by device plugin",
            nrp(&[rs(0, 0, &[(EXT_A, 1)])]),
            empty(),
            success(),
            vec![],
        ),
        // Skipped: "extended resource backed by DRA" (DRA extended resources).
        case(
            "extended resource backed by DRA, nil draManager",
            nrp(&[rs(1, 1, &[(EXT_A, 1)])]),
            nrp(&[r(0, 0)]),
            success(),
            vec![],
        ),
        case(
            "extended resource backed by DRA not enabled",
            nrp(&[rs(1, 1, &[(DRA_EXT, 1)])]),
            nrp(&[r(0, 0)]),
            unresolvable(&[DRA_EXT]),
            vec![(DRA_EXT, 1, 0, 0, true)],
        ),
        case(
            "extended resource NOT backed by DRA",
            nrp(&[rs(1, 1, &[(EXT_B, 1)])]),
            nrp(&[r(0, 0)]),
            unresolvable(&[EXT_B]),
            vec![(EXT_B, 1, 0, 0, true)],
        ),
        // Skipped: "extended resource was backed by Device Plugin (Allocatable: 0)" (DRA).
        case(
            "extended resource was backed by Device Plugin (Allocatable: 0), global cache",
            nrp(&[rs(0, 0, &[(EXT_A, 1)])]),
            nrp(&[rs(0, 0, &[(EXT_A, 0)])]),
            success(),
            vec![],
        ),
    ];
    assert_eq!(cases.len(), 47);
    let mut f = Failures::new();
    for c in cases.drain(..) {
        let n = node("n")
            .allocatable(make_allocatable(10, 20, 32, 5, 20, 5))
            .obj();
        let ni = node_info(n, c.existing);
        let p = fit_plugin(&c.args).expect("plugin builds");
        let mut state = CycleState::new();
        let (_, pre) = pre_filter(p.as_ref(), &mut state, &c.pod, &Snapshot::default());
        f.check(c.name, "prefilter status", pre, success());
        f.check(
            c.name,
            "filter status",
            filter(p.as_ref(), &state, &c.pod, &ni),
            c.want_status,
        );

        let ignored: HashSet<String> = strings(&c.args["ignoredResources"]);
        let groups: HashSet<String> = strings(&c.args["ignoredResourceGroups"]);
        let got: Vec<(String, String, i64, i64, i64, bool)> =
            fits_request(&c.pod, &ni, &ignored, &groups, None)
                .into_iter()
                .map(|ir| {
                    let (req, used, cap) = (
                        c.pod.requests.get(&ir.name),
                        ni.requested.get(&ir.name),
                        ni.allocatable.get(&ir.name),
                    );
                    (ir.name, ir.reason, req, used, cap, ir.unresolvable)
                })
                .collect();
        let want: Vec<(String, String, i64, i64, i64, bool)> = c
            .want_insufficient
            .iter()
            .map(|(n, req, used, cap, u)| (n.to_string(), insufficient(n), *req, *used, *cap, *u))
            .collect();
        f.check(c.name, "insufficient resources", got, want);
    }
    f.finish();
}

fn strings(v: &Value) -> HashSet<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn test_not_enough_requests() {
    let cases = vec![
        (
            "even without specified resources, predicate fails when there's no space for additional pod",
            pod(),
            nrp(&[r(10, 20)]),
        ),
        (
            "even if both resources fit, predicate fails when there's no space for additional pod",
            nrp(&[r(1, 1)]),
            nrp(&[r(5, 5)]),
        ),
        (
            "even for equal edge case, predicate fails when there's no space for additional pod",
            nrp(&[r(5, 1)]),
            nrp(&[r(5, 19)]),
        ),
        (
            "even for equal edge case, predicate fails when there's no space for additional pod due to init container",
            nrip(nrp(&[r(5, 1)]), &[r(5, 1)]),
            nrp(&[r(5, 19)]),
        ),
    ];
    let mut f = Failures::new();
    for (name, p, existing) in cases {
        let p = p.obj();
        let n = node("n")
            .allocatable(make_allocatable(10, 20, 1, 0, 0, 0))
            .obj();
        let ni = node_info(n, vec![existing.obj()]);
        let pl = fit_plugin(&default_args()).unwrap();
        let mut state = CycleState::new();
        let (_, pre) = pre_filter(pl.as_ref(), &mut state, &p, &Snapshot::default());
        f.check(name, "prefilter status", pre, success());
        f.check(
            name,
            "filter status",
            filter(pl.as_ref(), &state, &p, &ni),
            status(Code::Unschedulable, &["Too many pods"]),
        );
    }
    f.finish();
}

#[test]
fn test_storage_requests() {
    let eph = |e: i64| Res {
        ephemeral: e,
        ..Default::default()
    };
    let cases = vec![
        (
            "empty storage requested, and pod fits",
            nrp(&[r(1, 1)]),
            nrp(&[r(2, 10)]),
            success(),
        ),
        (
            "storage ephemeral local storage request exceeds allocatable",
            nrp(&[eph(25)]),
            nrp(&[r(2, 2)]),
            unresolvable(&["ephemeral-storage"]),
        ),
        (
            "ephemeral local storage is sufficient",
            nrip(nrp(&[eph(5)]), &[]),
            nrp(&[Res {
                milli_cpu: 2,
                memory: 2,
                ephemeral: 10,
                scalars: vec![],
            }]),
            success(),
        ),
        ("pod fits", nrp(&[eph(10)]), nrp(&[r(2, 2)]), success()),
    ];
    let mut f = Failures::new();
    for (name, p, existing, want) in cases {
        let p = p.obj();
        let n = node("n")
            .allocatable(make_allocatable(10, 20, 32, 5, 20, 5))
            .obj();
        let ni = node_info(n, vec![existing.obj()]);
        let pl = fit_plugin(&default_args()).unwrap();
        let mut state = CycleState::new();
        let (_, pre) = pre_filter(pl.as_ref(), &mut state, &p, &Snapshot::default());
        f.check(name, "prefilter status", pre, success());
        f.check(
            name,
            "filter status",
            filter(pl.as_ref(), &state, &p, &ni),
            want,
        );
    }
    f.finish();
}

#[test]
fn test_restartable_init_containers() {
    let new_pod = || pod().container("regular").obj();
    let with_sidecar = |request: Option<&str>, sidecar: Option<&str>| {
        let mut p = pod().req(&request.map(|c| vec![("cpu", c)]).unwrap_or_default());
        p = p.sidecar_req(&sidecar.map(|c| vec![("cpu", c)]).unwrap_or_default());
        p.obj()
    };
    let cases = vec![
        ("allow pod without restartable init containers", new_pod(), success()),
        ("allow pod with restartable init containers", with_sidecar(None, None), success()),
        (
            "allow pod if the total requested resources do not exceed the node's allocatable resources",
            with_sidecar(Some("1m"), Some("1m")),
            success(),
        ),
        (
            "not allow pod if the total requested resources do exceed the node's allocatable resources",
            with_sidecar(Some("1m"), Some("2m")),
            unresolvable(&["cpu"]),
        ),
    ];
    let mut f = Failures::new();
    for (name, p, want) in cases {
        let n = node("n")
            .allocatable(make_allocatable(2, 0, 1, 0, 0, 0))
            .obj();
        let ni = node_info(n, vec![]);
        let pl = fit_plugin(&default_args()).unwrap();
        let mut state = CycleState::new();
        let (_, pre) = pre_filter(pl.as_ref(), &mut state, &p, &Snapshot::default());
        f.check(name, "prefilter status", pre, success());
        f.check(
            name,
            "filter status",
            filter(pl.as_ref(), &state, &p, &ni),
            want,
        );
    }
    f.finish();
}

// ---------------------------------------------------------------- scoring

/// A node as upstream's `st.MakeNode().Name(n).Capacity(...)`.
fn cap_node(name: &str, pairs: &[(&str, &str)]) -> Node {
    node(name).capacity(pairs).obj()
}

/// `st.MakePod().Req(...)` chains.
fn req_pod(containers: &[&[(&str, &str)]]) -> PodBuilder {
    containers.iter().fold(pod(), |p, c| p.req(c))
}

struct ScoreCase {
    name: &'static str,
    pod: Pod,
    nodes: Vec<Node>,
    existing: Vec<Pod>,
    args: Value,
    run_pre_score: bool,
    /// `Err(field)`: building the plugin fails on that field.
    want: Result<Vec<i64>, &'static str>,
    want_code: Code,
}

impl Default for ScoreCase {
    fn default() -> Self {
        ScoreCase {
            name: "",
            pod: pod().obj(),
            nodes: vec![],
            existing: vec![],
            args: Value::Null,
            run_pre_score: true,
            want: Ok(vec![]),
            want_code: Code::Success,
        }
    }
}

fn run_score_cases(cases: Vec<ScoreCase>) {
    let mut f = Failures::new();
    for c in cases {
        let pl = match (fit_plugin(&c.args), &c.want) {
            (Ok(p), Ok(_)) => p,
            (Err(e), Err(field)) => {
                if !e.contains(field) {
                    f.fail(c.name, format!("error {e:?} does not name {field:?}"));
                }
                continue;
            }
            (Ok(_), Err(field)) => {
                f.fail(c.name, format!("plugin built; want an error on {field:?}"));
                continue;
            }
            (Err(e), Ok(_)) => {
                f.fail(c.name, format!("plugin failed to build: {e}"));
                continue;
            }
        };
        let snap = snapshot(c.nodes, c.existing);
        let run = score(pl.as_ref(), &c.pod, &snap, None, c.run_pre_score);
        f.check(c.name, "prescore status", run.pre_score.clone(), success());
        f.check(
            c.name,
            "score codes",
            run.codes(),
            vec![c.want_code; snap.len()],
        );
        f.check(c.name, "scores", run.raw_scores(), c.want.unwrap());
    }
    f.finish();
}

#[test]
fn test_fit_score() {
    let nodes46 = || {
        vec![
            cap_node("node1", &[("cpu", "4000"), ("memory", "10000")]),
            cap_node("node2", &[("cpu", "6000"), ("memory", "10000")]),
        ]
    };
    let existing = || {
        vec![
            pod()
                .node("node1")
                .req(&[("cpu", "2000"), ("memory", "4000")])
                .obj(),
            pod()
                .node("node2")
                .req(&[("cpu", "1000"), ("memory", "2000")])
                .obj(),
        ]
    };
    let p35 = || pod().req(&[("cpu", "3000"), ("memory", "5000")]).obj();
    let p12 = || pod().req(&[("cpu", "1000"), ("memory", "2000")]).obj();
    let rtcr1 = fit_args(
        "RequestedToCapacityRatio",
        DEFAULT_RESOURCES,
        Some(&[(0, 10), (100, 0)]),
    );
    let rtcr2 = fit_args(
        "RequestedToCapacityRatio",
        DEFAULT_RESOURCES,
        Some(&[(0, 0), (100, 10)]),
    );
    let most = fit_args("MostAllocated", DEFAULT_RESOURCES, None);
    let least = fit_args("LeastAllocated", DEFAULT_RESOURCES, None);
    let sidecar_nodes = || {
        vec![
            cap_node("node1", &[("cpu", "4000"), ("memory", "10000")]),
            cap_node("node2", &[("cpu", "4000"), ("memory", "10000")]),
        ]
    };
    let sidecar_existing = || {
        vec![
            pod()
                .node("node1")
                .req(&[("cpu", "1000"), ("memory", "2000")])
                .sidecar_req(&[("cpu", "1000"), ("memory", "2000")])
                .obj(),
            pod()
                .node("node2")
                .req(&[("cpu", "1000"), ("memory", "2000")])
                .obj(),
        ]
    };
    let cases = vec![
        ScoreCase {
            name: "test case for ScoringStrategy RequestedToCapacityRatio case1",
            pod: p35(),
            nodes: nodes46(),
            existing: existing(),
            args: rtcr1.clone(),
            want: Ok(vec![10, 32]),
            ..Default::default()
        },
        ScoreCase {
            name: "test case for ScoringStrategy RequestedToCapacityRatio case2",
            pod: p35(),
            nodes: nodes46(),
            existing: existing(),
            args: rtcr2,
            want: Ok(vec![95, 68]),
            ..Default::default()
        },
        ScoreCase {
            name: "test case for ScoringStrategy MostAllocated",
            pod: p12(),
            nodes: nodes46(),
            existing: existing(),
            args: most.clone(),
            want: Ok(vec![67, 36]),
            ..Default::default()
        },
        ScoreCase {
            name: "test case for ScoringStrategy LeastAllocated",
            pod: p12(),
            nodes: nodes46(),
            existing: existing(),
            args: least.clone(),
            want: Ok(vec![32, 63]),
            ..Default::default()
        },
        ScoreCase {
            name: "test case for ScoringStrategy RequestedToCapacityRatio case1 if PreScore is not called",
            pod: p35(),
            nodes: nodes46(),
            existing: existing(),
            args: rtcr1,
            want: Ok(vec![10, 32]),
            run_pre_score: false,
            ..Default::default()
        },
        ScoreCase {
            name: "test case for ScoringStrategy MostAllocated if PreScore is not called",
            pod: p12(),
            nodes: nodes46(),
            existing: existing(),
            args: most.clone(),
            want: Ok(vec![67, 36]),
            run_pre_score: false,
            ..Default::default()
        },
        ScoreCase {
            name: "test case for ScoringStrategy LeastAllocated if PreScore is not called",
            pod: p12(),
            nodes: nodes46(),
            existing: existing(),
            args: least.clone(),
            want: Ok(vec![32, 63]),
            run_pre_score: false,
            ..Default::default()
        },
        ScoreCase {
            name: "test case for ScoringStrategy MostAllocated with sidecar container",
            pod: p12(),
            nodes: sidecar_nodes(),
            existing: sidecar_existing(),
            args: most,
            want: Ok(vec![67, 45]),
            ..Default::default()
        },
        ScoreCase {
            name: "test case for ScoringStrategy LeastAllocated with sidecar container",
            pod: p12(),
            nodes: sidecar_nodes(),
            existing: sidecar_existing(),
            args: least,
            want: Ok(vec![32, 55]),
            ..Default::default()
        },
        // Skipped: "test case for ScoringStrategy LeastAllocated with Extended
        // resources" (+ "if PreScore is not called"): DRA-backed extended resources.
    ];
    run_score_cases(cases);
}

/// The pod most allocation tests request: two containers, 3000 cpu / 5000 memory in all.
fn p_1000_2000_2000_3000() -> Pod {
    req_pod(&[
        &[("cpu", "1000"), ("memory", "2000")],
        &[("cpu", "2000"), ("memory", "3000")],
    ])
    .obj()
}

fn cpu_mem_pod(node_name: &str, cpu: &str, mem: &str) -> Pod {
    pod().node(node_name).req(&cpu_mem(cpu, mem)).obj()
}

fn strategy_cases(strategy: &str, want: &StrategyWants) -> Vec<ScoreCase> {
    let args = |res: &[(&str, i64)]| fit_args(strategy, res, None);
    let n = |name: &str, cpu: &str, mem: &str| cap_node(name, &[("cpu", cpu), ("memory", mem)]);
    let nx = |name: &str, cpu: &str, mem: &str, x: &str| {
        cap_node(name, &[("cpu", cpu), ("memory", mem), (EXTENDED_RES, x)])
    };
    let mut cases = vec![
        ScoreCase {
            name: "nothing scheduled, nothing requested",
            nodes: vec![n("node1", "4000", "10000"), n("node2", "4000", "10000")],
            args: args(DEFAULT_RESOURCES),
            want: Ok(want.nothing_nothing.to_vec()),
            ..Default::default()
        },
        ScoreCase {
            name: "nothing scheduled, resources requested, differently sized nodes",
            pod: p_1000_2000_2000_3000(),
            nodes: vec![n("node1", "4000", "10000"), n("node2", "6000", "10000")],
            args: args(DEFAULT_RESOURCES),
            want: Ok(want.differently_sized.to_vec()),
            ..Default::default()
        },
        ScoreCase {
            name: "Resources not set, pods scheduled with error",
            pod: p_1000_2000_2000_3000(),
            nodes: vec![n("node1", "4000", "10000"), n("node2", "6000", "10000")],
            args: args(&[]),
            want: Ok(vec![0, 0]),
            want_code: Code::Error,
            ..Default::default()
        },
        ScoreCase {
            name: "no resources requested, pods scheduled with resources",
            nodes: vec![n("node1", "10000", "20000"), n("node2", "10000", "20000")],
            existing: vec![
                cpu_mem_pod("node1", "3000", "0"),
                cpu_mem_pod("node1", "3000", "0"),
                cpu_mem_pod("node2", "3000", "0"),
                cpu_mem_pod("node2", "3000", "5000"),
            ],
            args: args(DEFAULT_RESOURCES),
            want: Ok(want.no_req_scheduled_with_resources.to_vec()),
            ..Default::default()
        },
        ScoreCase {
            name: "resources requested, pods scheduled with resources",
            pod: p_1000_2000_2000_3000(),
            nodes: vec![n("node1", "10000", "20000"), n("node2", "10000", "20000")],
            existing: vec![
                cpu_mem_pod("node1", "3000", "0"),
                cpu_mem_pod("node2", "3000", "5000"),
            ],
            args: args(DEFAULT_RESOURCES),
            want: Ok(want.req_scheduled_with_resources.to_vec()),
            ..Default::default()
        },
        ScoreCase {
            name: "resource with negative weight",
            pod: p_1000_2000_2000_3000(),
            nodes: vec![n("node1", "4000", "10000")],
            args: args(&[("memory", -1), ("cpu", 1)]),
            want: Err("scoringStrategy.resources[0].weight"),
            ..Default::default()
        },
        ScoreCase {
            name: "resource with zero weight",
            pod: p_1000_2000_2000_3000(),
            nodes: vec![n("node1", "4000", "10000")],
            args: args(&[("memory", 1), ("cpu", 0)]),
            want: Err("scoringStrategy.resources[1].weight"),
            ..Default::default()
        },
        ScoreCase {
            name: "bypass extended resource if the pod does not request",
            pod: p_1000_2000_2000_3000(),
            nodes: vec![
                n("node1", "6000", "10000"),
                nx("node2", "6000", "10000", "4"),
            ],
            args: args(EXTENDED_RESOURCE_SET),
            want: Ok(vec![50, 50]),
            ..Default::default()
        },
        ScoreCase {
            name: "honor extended resource if the pod requests",
            pod: pod()
                .node("node1")
                .req(&[("cpu", "3000"), ("memory", "5000"), (EXTENDED_RES, "2")])
                .obj(),
            nodes: vec![
                nx("node1", "6000", "10000", "4"),
                nx("node2", "6000", "10000", "10"),
            ],
            args: args(EXTENDED_RESOURCE_SET),
            want: Ok(want.honor_extended.to_vec()),
            ..Default::default()
        },
        ScoreCase {
            name: "if the node doesn't have a resource",
            pod: pod()
                .node("node1")
                .req(&[("cpu", "3000"), ("memory", "4000")])
                .obj(),
            nodes: vec![
                n("node1", "6000", "10000"),
                nx("node2", "6000", "10000", "4"),
            ],
            args: args(&[(EXTENDED_RES, 2), ("cpu", 1), ("memory", 1)]),
            want: Ok(want.node_lacks_resource.to_vec()),
            ..Default::default()
        },
    ];
    // Weight above MaxNodeScore: upstream's two files use different lists.
    cases.push(ScoreCase {
        name: "resource weight larger than MaxNodeScore",
        pod: p_1000_2000_2000_3000(),
        nodes: vec![n("node1", "4000", "10000")],
        args: args(want.too_heavy.0),
        want: Err(want.too_heavy.1),
        ..Default::default()
    });
    cases
}

struct StrategyWants {
    nothing_nothing: [i64; 2],
    differently_sized: [i64; 2],
    no_req_scheduled_with_resources: [i64; 2],
    req_scheduled_with_resources: [i64; 2],
    honor_extended: [i64; 2],
    node_lacks_resource: [i64; 2],
    too_heavy: (&'static [(&'static str, i64)], &'static str),
}

#[test]
fn test_least_allocated_scoring_strategy() {
    let mut cases = strategy_cases(
        "LeastAllocated",
        &StrategyWants {
            nothing_nothing: [MAX_NODE_SCORE, MAX_NODE_SCORE],
            differently_sized: [37, 50],
            no_req_scheduled_with_resources: [70, 57],
            req_scheduled_with_resources: [57, 45],
            honor_extended: [50, 60],
            node_lacks_resource: [55, 55],
            too_heavy: (
                &[("memory", 1), ("cpu", 101)],
                "scoringStrategy.resources[1].weight",
            ),
        },
    );
    let args = fit_args("LeastAllocated", DEFAULT_RESOURCES, None);
    let n = |name: &str, cpu: &str, mem: &str| cap_node(name, &[("cpu", cpu), ("memory", mem)]);
    cases.extend([
        ScoreCase {
            name: "no resources requested, pods scheduled",
            nodes: vec![n("node1", "4000", "10000"), n("node2", "4000", "10000")],
            existing: vec![
                pod().node("node1").obj(),
                pod().node("node1").obj(),
                pod().node("node2").obj(),
                pod().node("node2").obj(),
            ],
            args: args.clone(),
            want: Ok(vec![MAX_NODE_SCORE, MAX_NODE_SCORE]),
            ..Default::default()
        },
        ScoreCase {
            name: "resources requested, pods scheduled with resources, differently sized nodes",
            pod: p_1000_2000_2000_3000(),
            nodes: vec![n("node1", "10000", "20000"), n("node2", "10000", "50000")],
            existing: vec![cpu_mem_pod("node1", "3000", "0"), cpu_mem_pod("node2", "3000", "5000")],
            args: args.clone(),
            want: Ok(vec![57, 60]),
            ..Default::default()
        },
        ScoreCase {
            name: "requested resources exceed node capacity",
            pod: pod().req(&[("cpu", "3000"), ("memory", "0")]).obj(),
            nodes: vec![n("node1", "4000", "10000"), n("node2", "4000", "10000")],
            existing: vec![cpu_mem_pod("node1", "3000", "0"), cpu_mem_pod("node2", "3000", "5000")],
            args: args.clone(),
            want: Ok(vec![50, 25]),
            ..Default::default()
        },
        ScoreCase {
            name: "zero node resources, pods scheduled with resources",
            nodes: vec![node("node1").obj(), node("node2").obj()],
            existing: vec![cpu_mem_pod("node1", "3000", "0"), cpu_mem_pod("node2", "3000", "5000")],
            args: args.clone(),
            want: Ok(vec![0, 0]),
            ..Default::default()
        },
        ScoreCase {
            name: "nothing scheduled, resources requested with different weight on CPU and memory, differently sized nodes",
            pod: req_pod(&[&[("cpu", "1000"), ("memory", "2000")], &[("cpu", "2000"), ("memory", "3000")]])
                .node("node1")
                .obj(),
            nodes: vec![n("node1", "4000", "10000"), n("node2", "6000", "10000")],
            args: fit_args("LeastAllocated", &[("memory", 2), ("cpu", 1)], None),
            want: Ok(vec![41, 50]),
            ..Default::default()
        },
    ]);
    assert_eq!(cases.len(), 16);
    run_score_cases(cases);
}

#[test]
fn test_most_allocated_scoring_strategy() {
    let mut cases = strategy_cases(
        "MostAllocated",
        &StrategyWants {
            nothing_nothing: [0, 0],
            differently_sized: [62, 50],
            no_req_scheduled_with_resources: [30, 42],
            req_scheduled_with_resources: [42, 55],
            honor_extended: [50, 40],
            node_lacks_resource: [45, 45],
            too_heavy: (&[("memory", 101)], "scoringStrategy.resources[0].weight"),
        },
    );
    let n = |name: &str, cpu: &str, mem: &str| cap_node(name, &[("cpu", cpu), ("memory", mem)]);
    cases.extend([
        ScoreCase {
            name: "resources requested equal node capacity",
            pod: req_pod(&[
                &[("cpu", "2000"), ("memory", "4000")],
                &[("cpu", "3000"), ("memory", "5000")],
            ])
            .obj(),
            nodes: vec![n("node1", "5000", "10000"), n("node2", "10000", "9000")],
            args: fit_args("MostAllocated", DEFAULT_RESOURCES, None),
            want: Ok(vec![95, 75]),
            ..Default::default()
        },
        ScoreCase {
            // Upstream reuses this name for the weighted variant.
            name: "nothing scheduled, resources requested, differently sized nodes",
            pod: p_1000_2000_2000_3000(),
            nodes: vec![n("node1", "4000", "10000"), n("node2", "6000", "10000")],
            args: fit_args("MostAllocated", &[("memory", 2), ("cpu", 1)], None),
            want: Ok(vec![58, 50]),
            ..Default::default()
        },
        ScoreCase {
            name: "no resources requested, pods scheduled, nonzero request for resource",
            pod: pod().container("container").obj(),
            nodes: vec![n("node1", "250m", "1000Mi"), n("node2", "250m", "1000Mi")],
            existing: vec![
                pod().node("node1").container("container").obj(),
                pod().node("node1").container("container").obj(),
            ],
            args: fit_args("MostAllocated", DEFAULT_RESOURCES, None),
            want: Ok(vec![80, 30]),
            ..Default::default()
        },
    ]);
    assert_eq!(cases.len(), 14);
    run_score_cases(cases);
}

#[test]
fn test_requested_to_capacity_ratio_scoring_strategy() {
    let shape: &[(i32, i32)] = &[(0, 10), (100, 0)];
    let args = fit_args("RequestedToCapacityRatio", DEFAULT_RESOURCES, Some(shape));
    let n = |name: &str, cpu: &str, mem: &str| cap_node(name, &[("cpu", cpu), ("memory", mem)]);
    let cases = vec![
        ScoreCase {
            name: "nothing scheduled, nothing requested (default - least requested nodes have priority)",
            nodes: vec![n("node1", "4000", "10000"), n("node2", "4000", "10000")],
            existing: vec![pod().node("node1").obj(), pod().node("node1").obj()],
            args: args.clone(),
            want: Ok(vec![MAX_NODE_SCORE, MAX_NODE_SCORE]),
            ..Default::default()
        },
        ScoreCase {
            name: "nothing scheduled, resources requested, differently sized nodes (default - least requested nodes have priority)",
            pod: p_1000_2000_2000_3000(),
            nodes: vec![n("node1", "4000", "10000"), n("node2", "6000", "10000")],
            existing: vec![pod().node("node1").obj(), pod().node("node1").obj()],
            args: args.clone(),
            want: Ok(vec![38, 50]),
            ..Default::default()
        },
        ScoreCase {
            name: "no resources requested, pods scheduled with resources (default - least requested nodes have priority)",
            nodes: vec![n("node1", "4000", "10000"), n("node2", "6000", "10000")],
            existing: vec![cpu_mem_pod("node1", "3000", "5000"), cpu_mem_pod("node2", "3000", "5000")],
            args,
            want: Ok(vec![38, 50]),
            ..Default::default()
        },
    ];
    run_score_cases(cases);
}

#[test]
fn test_broken_linear_function() {
    // (shape points, (p, f(p)) assertions)
    type Table = (&'static [(i64, i64)], &'static [(i64, i64)]);
    let tables: [Table; 3] = [
        (
            &[(10, 1), (90, 9)],
            &[
                (-10, 1),
                (0, 1),
                (9, 1),
                (10, 1),
                (15, 1),
                (19, 1),
                (20, 2),
                (89, 8),
                (90, 9),
                (99, 9),
                (100, 9),
                (110, 9),
            ],
        ),
        (
            &[(0, 2), (40, 10), (100, 0)],
            &[
                (-10, 2),
                (0, 2),
                (20, 6),
                (30, 8),
                (40, 10),
                (70, 5),
                (100, 0),
                (110, 0),
            ],
        ),
        (
            &[(0, 2), (40, 2), (100, 2)],
            &[
                (-10, 2),
                (0, 2),
                (20, 2),
                (30, 2),
                (40, 2),
                (70, 2),
                (100, 2),
                (110, 2),
            ],
        ),
    ];
    let mut f = Failures::new();
    for (i, (shape, assertions)) in tables.iter().enumerate() {
        for (p, want) in assertions.iter() {
            f.check(
                &format!("case_{i}"),
                &format!("f({p})"),
                broken_linear(shape, *p),
                *want,
            );
        }
    }
    f.finish();
}

fn bin_packing(
    resources: &[(&str, i64)],
    cases: Vec<(&'static str, Pod, Vec<Pod>, Vec<i64>)>,
    nodes: impl Fn() -> Vec<Node>,
) {
    let args = fit_args(
        "RequestedToCapacityRatio",
        resources,
        Some(&[(0, 0), (100, 1)]),
    );
    run_score_cases(
        cases
            .into_iter()
            .map(|(name, pod, existing, want)| ScoreCase {
                name,
                pod,
                nodes: nodes(),
                existing,
                args: args.clone(),
                want: Ok(want),
                ..Default::default()
            })
            .collect(),
    );
}

#[test]
fn test_resource_bin_packing_single_extended() {
    const FOO: &str = "intel.com/foo";
    let mem = 10000 * 1024 * 1024;
    let nodes = || {
        vec![
            make_node("node1", 4000, mem, &[(FOO, 8)]),
            make_node("node2", 4000, mem, &[(FOO, 4)]),
        ]
    };
    let cases = vec![
        ("nothing scheduled, nothing requested", pod().obj(), vec![], vec![0, 0]),
        (
            "resources requested, pods scheduled with less resources",
            pod().req(&[(FOO, "2")]).obj(),
            vec![pod().obj()],
            vec![2, 5],
        ),
        (
            "resources requested, pods scheduled with resources, on node with existing pod running ",
            pod().req(&[(FOO, "2")]).obj(),
            vec![pod().req(&[(FOO, "2")]).node("node2").obj()],
            vec![2, 10],
        ),
        (
            "resources requested, pods scheduled with more resources",
            pod().req(&[(FOO, "4")]).obj(),
            vec![pod().obj()],
            vec![5, 10],
        ),
    ];
    bin_packing(&[(FOO, 1)], cases, nodes);
}

#[test]
fn test_resource_bin_packing_multiple_extended() {
    const FOO: &str = "intel.com/foo";
    const BAR: &str = "intel.com/bar";
    let mem = 10000 * 1024 * 1024;
    let nodes = || {
        vec![
            make_node("node1", 4000, mem, &[(FOO, 8), (BAR, 4)]),
            make_node("node2", 4000, mem, &[(FOO, 4), (BAR, 8)]),
        ]
    };
    let pod1 = || pod().req(&[(FOO, "2"), (BAR, "2")]);
    let pod2 = || pod().req(&[(FOO, "4"), (BAR, "2")]);
    let cases = vec![
        ("nothing scheduled, nothing requested", pod().obj(), vec![], vec![0, 0]),
        (
            "resources requested, pods scheduled with less resources",
            pod1().obj(),
            vec![pod().obj()],
            vec![4, 3],
        ),
        (
            "resources requested, pods scheduled with resources, on node with existing pod running ",
            pod1().obj(),
            vec![pod2().node("node2").obj()],
            vec![4, 7],
        ),
        (
            "resources requested, pods scheduled with more resources",
            pod2().obj(),
            vec![pod().obj()],
            vec![5, 5],
        ),
    ];
    bin_packing(&[(FOO, 3), (BAR, 5)], cases, nodes);
}
