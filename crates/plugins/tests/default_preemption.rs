//! Ports of upstream v1.37's `default_preemption_test.go` (plain pods, no
//! pod groups, no extenders): TestPostFilter, TestDryRunPreemption,
//! TestSelectBestCandidate, TestPodEligibleToPreemptOthers, plus the
//! framework's nominated-pod filtering and nominated-node evaluation.
//!
//! Upstream seeds `rand.NewSource(4)` for the dry-run offset (4, then 1,
//! then 3 on five nodes); rkube's offset comes from its own seeded
//! generator, so these tests pass upstream's offsets to
//! `dry_run_preemption` directly.

mod support;

use std::sync::Arc;

use rkube_config::{Plugin as PluginRef, PluginConfig, PluginSet, Plugins, Profile};
use rkube_framework::extension_points::{run_pre_filter, FrameworkHandle};
use rkube_framework::{
    Code, CycleState, Framework, NodeInfo, NodeToStatus, Nominator, Outcome, Plugin,
    PostFilterPlugin, PreFilterPlugin, PreFilterResult, Scheduler, Snapshot, Status,
};
use rkube_model::workloads::PodDisruptionBudget;
use rkube_model::{Container, Node, Pod, PodAffinity};
use rkube_plugins::default_preemption::{Candidate, DefaultPreemption};
use support::{cpu_mem, labels, rl, sel, spread_constraint, term, Failures, DO_NOT_SCHEDULE};

const NEG: i32 = -100;
const LOW: i32 = 0;
const MID: i32 = 100;
const HIGH: i32 = 1000;
const VERY_HIGH: i32 = 10000;

const SMALL: (&str, &str) = ("100m", "100");
const MEDIUM: (&str, &str) = ("200m", "200");
const LARGE: (&str, &str) = ("300m", "300");
const VERY_LARGE: (&str, &str) = ("500m", "500");

struct P(Pod);

fn pod(name: &str) -> P {
    P(Pod {
        namespace: "default".into(),
        name: name.into(),
        uid: name.into(),
        scheduler_name: "default-scheduler".into(),
        ..Default::default()
    })
}

impl P {
    fn priority(mut self, p: i32) -> Self {
        self.0.priority = p;
        self
    }
    fn node(mut self, n: &str) -> Self {
        self.0.node_name = n.into();
        self
    }
    fn req(mut self, (cpu, mem): (&str, &str)) -> Self {
        self.0.containers.push(Container {
            name: format!("c{}", self.0.containers.len()),
            requests: rl(&cpu_mem(cpu, mem)),
            ..Default::default()
        });
        self
    }
    fn label(mut self, k: &str, v: &str) -> Self {
        self.0.labels.insert(k.into(), v.into());
        self
    }
    /// `status.startTime` = epoch + `n` nanoseconds.
    fn start(mut self, n: u32) -> Self {
        self.0.start_time = format!("1970-01-01T00:00:00.{n:09}Z");
        self
    }
    fn nominated(mut self, n: &str) -> Self {
        self.0.nominated_node_name = n.into();
        self
    }
    fn never(mut self) -> Self {
        self.0.preemption_never = true;
        self
    }
    fn terminating(mut self) -> Self {
        self.0.terminating = true;
        self
    }
    fn preempted_by_scheduler(mut self) -> Self {
        self.0.terminating = true;
        self.0.terminating_by_preemption = true;
        self
    }
    /// Required anti-affinity to pods with label `key` (Exists) in `topology`.
    fn anti_affinity_exists(mut self, key: &str, topology: &str) -> Self {
        self.0.pod_anti_affinity = Some(PodAffinity {
            required: vec![term(Some(sel().exists(key).obj()), topology).obj()],
            preferred: Vec::new(),
        });
        self
    }
    /// A DoNotSchedule spread constraint selecting pods with label `key`.
    fn spread(mut self, max_skew: i32, topology: &str, key: &str) -> Self {
        self.0.topology_spread_constraints.push(spread_constraint(
            max_skew,
            topology,
            DO_NOT_SCHEDULE,
            Some(sel().exists(key).obj()),
        ));
        self
    }
    fn obj(mut self) -> Pod {
        if self.0.containers.is_empty() {
            self.0.containers.push(Container {
                name: "c0".into(),
                ..Default::default()
            });
        }
        rkube_model::requests::compute(&mut self.0);
        self.0
    }
}

/// Upstream's DryRun node names `name/zone`: labels `hostname` (and `zone`).
fn topo_node(spec: &str) -> Node {
    let mut parts = spec.split('/');
    let name = parts.next().expect("name");
    let mut n = node_cap(name, VERY_LARGE);
    n.labels.insert("hostname".into(), name.into());
    if let Some(zone) = parts.next() {
        n.labels.insert("zone".into(), zone.into());
    }
    n
}

/// `st.MakeNode().Name(name).Capacity(res)`: `pods: 32` plus `res`.
fn node(name: &str, res: &[(&str, &str)]) -> Node {
    support::node(name)
        .capacity(res)
        .label("kubernetes.io/hostname", name)
        .obj()
}

fn node_cap(name: &str, (cpu, mem): (&str, &str)) -> Node {
    node(name, &cpu_mem(cpu, mem))
}

fn snapshot(nodes: Vec<Node>, pods: Vec<Pod>, pdbs: Vec<PodDisruptionBudget>) -> Snapshot {
    let mut snap = support::snapshot(nodes, pods);
    let mut w = (*snap.workloads).clone();
    w.pdbs = pdbs;
    snap.workloads = Arc::new(w);
    snap
}

fn pdb(match_labels: &[(&str, &str)], allowed: i32, disrupted: &[&str]) -> PodDisruptionBudget {
    let selector = labels(match_labels)
        .iter()
        .fold(sel(), |s, (k, v)| s.label(k, v))
        .obj();
    PodDisruptionBudget {
        namespace: "default".into(),
        name: "pdb".into(),
        selector: Some(selector),
        disruptions_allowed: allowed,
        disrupted_pods: disrupted.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

// ---- test plugins ----

/// Upstream's `TestPlugin`: a PreFilter whose AddPod/RemovePod fail on
/// nodes labelled `error=true`.
struct TestPlugin;

impl Plugin for TestPlugin {
    fn name(&self) -> &'static str {
        "test-plugin"
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
}

impl PreFilterPlugin for TestPlugin {
    fn pre_filter(&self, _: &mut CycleState, _: &Pod, _: &Snapshot) -> (PreFilterResult, Status) {
        (None, Status::success())
    }
    fn add_pod(&self, _: &mut CycleState, pod: &Pod, _: &Pod, node: &NodeInfo) -> Status {
        if node.node.labels.get("error").map(String::as_str) == Some("true") {
            return Status::error(format!("failed to add pod: {}", pod.name));
        }
        Status::success()
    }
    fn remove_pod(&self, _: &mut CycleState, pod: &Pod, _: &Pod, node: &NodeInfo) -> Status {
        if node.node.labels.get("error").map(String::as_str) == Some("true") {
            return Status::error(format!("failed to remove pod: {}", pod.name));
        }
        Status::success()
    }
}

/// Upstream's `FalseFilter` (and `FakeFilter` returning Unschedulable
/// everywhere).
struct FalseFilter;

impl Plugin for FalseFilter {
    fn name(&self) -> &'static str {
        "FalseFilter"
    }
    fn as_filter(&self) -> Option<&dyn rkube_framework::FilterPlugin> {
        Some(self)
    }
}

impl rkube_framework::FilterPlugin for FalseFilter {
    fn filter(&self, _: &CycleState, _: &Pod, _: &NodeInfo) -> Status {
        Status::new(Code::Unschedulable, "Nodes failed the predicate")
    }
}

fn set(names: &[&str]) -> PluginSet {
    PluginSet {
        enabled: names
            .iter()
            .map(|n| PluginRef {
                name: n.to_string(),
                weight: None,
            })
            .collect(),
        disabled: Vec::new(),
    }
}

/// A profile with PrioritySort, DefaultBinder, DefaultPreemption and the
/// given PreFilter/Filter/Score plugins.
fn framework(pre_filter: &[&str], filter: &[&str], score: &[&str]) -> Framework {
    let mut reg = rkube_plugins::in_tree();
    reg.register("test-plugin", |_, _| Ok(Arc::new(TestPlugin)));
    reg.register("FalseFilter", |_, _| Ok(Arc::new(FalseFilter)));
    let profile = Profile {
        scheduler_name: Some("default-scheduler".into()),
        percentage_of_nodes_to_score: None,
        plugins: Some(Plugins {
            queue_sort: set(&["PrioritySort"]),
            pre_filter: set(pre_filter),
            filter: set(filter),
            post_filter: set(&["DefaultPreemption"]),
            score: set(score),
            bind: set(&["DefaultBinder"]),
            ..Default::default()
        }),
        plugin_config: rkube_config::args::PLUGINS_WITH_ARGS
            .iter()
            .filter(|n| pre_filter.contains(n) || filter.contains(n) || score.contains(n))
            .map(|n| PluginConfig {
                name: n.to_string(),
                args: rkube_config::args::default_args(n, &serde_json::Value::Null, "args")
                    .expect("defaults"),
            })
            .collect(),
    };
    Framework::new(&profile, 0, &reg).expect("framework")
}

fn fit_framework() -> Framework {
    framework(&["NodeResourcesFit"], &["NodeResourcesFit"], &[])
}

fn pre_filtered(fw: &Framework, pod: &Pod, snap: &Snapshot) -> CycleState {
    let mut state = CycleState::new();
    run_pre_filter(fw, &mut state, pod, snap).expect("PreFilter succeeds");
    state
}

fn statuses(unschedulable: &[&str], unresolvable: &[&str]) -> NodeToStatus {
    let mut m = NodeToStatus::default();
    for n in unschedulable {
        m.nodes.insert(
            (*n).into(),
            Status::with_reasons(Code::Unschedulable, vec![]),
        );
    }
    for n in unresolvable {
        m.nodes.insert(
            (*n).into(),
            Status::with_reasons(Code::UnschedulableAndUnresolvable, vec![]),
        );
    }
    m
}

// ---- TestPostFilter ----

struct PostFilterCase {
    name: &'static str,
    pod: Pod,
    pods: Vec<Pod>,
    pdbs: Vec<PodDisruptionBudget>,
    nodes: Vec<Node>,
    statuses: NodeToStatus,
    want_node: Option<&'static str>,
    want_code: Code,
    want_msg: &'static str,
}

#[test]
fn post_filter() {
    let one_pod = &[("pods", "1")][..];
    let node_res = &[("cpu", "200m"), ("memory", "400")][..];
    let large_cap = &[("cpu", "300m"), ("memory", "300")][..];
    let cases = vec![
        PostFilterCase {
            name: "pod with higher priority can be made schedulable",
            pod: pod("p").priority(HIGH).obj(),
            pods: vec![pod("p1").node("node1").obj()],
            pdbs: vec![],
            nodes: vec![node("node1", one_pod)],
            statuses: statuses(&["node1"], &[]),
            want_node: Some("node1"),
            want_code: Code::Success,
            want_msg: "preemption: found a potential placement for pod on node node1, preempting 1 victims",
        },
        PostFilterCase {
            name: "pod with tied priority is still unschedulable",
            pod: pod("p").obj(),
            pods: vec![pod("p1").node("node1").obj()],
            pdbs: vec![],
            nodes: vec![node("node1", one_pod)],
            statuses: statuses(&["node1"], &[]),
            want_node: Some(""),
            want_code: Code::Unschedulable,
            want_msg: "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.",
        },
        PostFilterCase {
            name: "preemption should respect filteredNodesStatuses",
            pod: pod("p").priority(HIGH).obj(),
            pods: vec![pod("p1").node("node1").obj()],
            pdbs: vec![],
            nodes: vec![node("node1", one_pod)],
            statuses: statuses(&[], &["node1"]),
            want_node: Some(""),
            want_code: Code::Unschedulable,
            want_msg: "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.",
        },
        PostFilterCase {
            name: "preemption should respect absent NodeToStatusReader entry meaning UnschedulableAndUnresolvable",
            pod: pod("p").priority(HIGH).obj(),
            pods: vec![pod("p1").node("node1").obj()],
            pdbs: vec![],
            nodes: vec![node("node1", one_pod)],
            statuses: NodeToStatus::default(),
            want_node: Some(""),
            want_code: Code::Unschedulable,
            want_msg: "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.",
        },
        PostFilterCase {
            name: "pod can be made schedulable on one node",
            pod: pod("p").priority(MID).obj(),
            pods: vec![
                pod("p1").priority(HIGH).node("node1").obj(),
                pod("p2").priority(LOW).node("node2").obj(),
            ],
            pdbs: vec![],
            nodes: vec![node("node1", one_pod), node("node2", one_pod)],
            statuses: statuses(&["node1", "node2"], &[]),
            want_node: Some("node2"),
            want_code: Code::Success,
            want_msg: "preemption: found a potential placement for pod on node node2, preempting 1 victims",
        },
        PostFilterCase {
            name: "pod can be made schedulable on minHighestPriority node",
            pod: pod("p").priority(VERY_HIGH).obj(),
            pods: vec![
                pod("p1").label("is-violating-pdb", "no").priority(HIGH).node("node1").obj(),
                pod("p2").label("is-violating-pdb", "yes").priority(LOW).node("node1").obj(),
                pod("p3").label("is-violating-pdb", "yes").priority(MID).node("node2").obj(),
            ],
            pdbs: vec![
                pdb(&[("is-violating-pdb", "yes")], 0, &[]),
                pdb(&[("is-violating-pdb", "no")], i32::MAX, &[]),
            ],
            nodes: vec![node("node1", one_pod), node("node2", one_pod)],
            statuses: statuses(&["node1", "node2"], &[]),
            want_node: Some("node2"),
            want_code: Code::Success,
            want_msg: "preemption: found a potential placement for pod on node node2, preempting 1 victims",
        },
        PostFilterCase {
            name: "no candidate nodes found, no enough resource after removing low priority pods",
            pod: pod("p").priority(HIGH).req(LARGE).obj(),
            pods: vec![pod("p1").node("node1").obj(), pod("p2").node("node2").obj()],
            pdbs: vec![],
            nodes: vec![node("node1", node_res), node("node2", node_res)],
            statuses: statuses(&["node1", "node2"], &[]),
            want_node: Some(""),
            want_code: Code::Unschedulable,
            want_msg: "preemption: 0/2 nodes are available: 2 Insufficient cpu.",
        },
        PostFilterCase {
            name: "no candidate nodes found with mixed reasons, no lower priority pod and no enough CPU resource",
            pod: pod("p").priority(HIGH).req(LARGE).obj(),
            pods: vec![
                pod("p1").node("node1").priority(HIGH).obj(),
                pod("p2").node("node2").obj(),
                pod("p3").node("node3").priority(HIGH).obj(),
            ],
            pdbs: vec![],
            nodes: vec![
                node("node1", one_pod),
                node("node2", node_res),
                node("node3", one_pod),
            ],
            statuses: statuses(&["node1", "node2", "node3"], &[]),
            want_node: Some(""),
            want_code: Code::Unschedulable,
            want_msg: "preemption: 0/3 nodes are available: 1 Insufficient cpu, 2 No preemption victims found for incoming pod.",
        },
        PostFilterCase {
            name: "no candidate nodes found with mixed reason, 2 UnschedulableAndUnresolvable nodes and 2 nodes don't have enough CPU resource",
            pod: pod("p").priority(HIGH).req(LARGE).obj(),
            pods: vec![pod("p1").node("node1").obj(), pod("p2").node("node2").obj()],
            pdbs: vec![],
            nodes: vec![
                node("node1", node_res),
                node("node2", node_res),
                node("node3", node_res),
                node("node4", node_res),
            ],
            statuses: statuses(&["node1", "node2"], &["node4"]),
            want_node: Some(""),
            want_code: Code::Unschedulable,
            want_msg: "preemption: 0/4 nodes are available: 2 Insufficient cpu, 2 Preemption is not helpful for scheduling.",
        },
        PostFilterCase {
            name: "only one node but failed with TestPlugin",
            pod: pod("p").priority(HIGH).req(LARGE).obj(),
            pods: vec![pod("p1").node("node1").obj()],
            pdbs: vec![],
            nodes: vec![{
                let mut n = node("node1", large_cap);
                n.labels.insert("error".into(), "true".into());
                n
            }],
            statuses: statuses(&["node1"], &[]),
            want_node: None,
            want_code: Code::Error,
            want_msg: "preemption: running RemovePod on PreFilter plugin \"test-plugin\": failed to remove pod: p",
        },
        PostFilterCase {
            name: "one failed with TestPlugin and the other pass",
            pod: pod("p").priority(HIGH).req(LARGE).obj(),
            pods: vec![
                pod("p1").node("node1").obj(),
                pod("p2").node("node2").req(MEDIUM).obj(),
            ],
            pdbs: vec![],
            nodes: vec![
                {
                    let mut n = node("node1", large_cap);
                    n.labels.insert("error".into(), "true".into());
                    n
                },
                node("node2", large_cap),
            ],
            statuses: statuses(&["node1", "node2"], &[]),
            want_node: Some("node2"),
            want_code: Code::Success,
            want_msg: "preemption: found a potential placement for pod on node node2, preempting 1 victims",
        },
    ];
    let fw = framework(
        &["NodeResourcesFit", "test-plugin"],
        &["NodeResourcesFit"],
        &[],
    );
    let pl = DefaultPreemption::default();
    let nominator = Nominator::new();
    let mut f = Failures::new();
    for c in cases {
        let snap = snapshot(c.nodes, c.pods, c.pdbs);
        let state = pre_filtered(&fw, &c.pod, &snap);
        // Every potential node is dry-run (fewer than 100), so the offset
        // only orders the candidates; try several.
        for seed in [0, 1, 2, 3] {
            let handle = FrameworkHandle {
                fw: &fw,
                snapshot: &snap,
                nominator: &nominator,
                seed,
            };
            let r = pl.post_filter(&state, &c.pod, &c.statuses, &handle);
            let got = (
                r.nominated_node.as_deref(),
                r.status.code,
                r.status.message(),
            );
            let want = (c.want_node, c.want_code, c.want_msg.to_string());
            f.check(&format!("{} (seed {seed})", c.name), "result", got, want);
        }
    }
    f.finish();
}

// ---- TestDryRunPreemption ----

type Want = Vec<(&'static str, Vec<&'static str>, i64)>;

fn summarize(cands: &[Candidate]) -> Vec<(String, Vec<String>, i64)> {
    let mut out: Vec<(String, Vec<String>, i64)> = cands
        .iter()
        .map(|c| {
            let mut v: Vec<String> = c.victims.iter().map(|p| p.name.clone()).collect();
            v.sort();
            (c.node.clone(), v, c.num_pdb_violations)
        })
        .collect();
    out.sort();
    out
}

struct DryRunCase {
    name: &'static str,
    fw: Framework,
    args: Option<(i32, i32)>,
    nodes: Vec<&'static str>,
    test_pods: Vec<Pod>,
    init_pods: Vec<Pod>,
    pdbs: Vec<PodDisruptionBudget>,
    /// Upstream's offsets per cycle (rand.NewSource(4)).
    offsets: Vec<usize>,
    expected: Vec<Want>,
}

#[test]
fn dry_run_preemption() {
    let mk = |n: &str, prio: i32, node: &str, r: (&str, &str)| {
        pod(n).priority(prio).node(node).req(r).obj()
    };
    let cases = vec![
        DryRunCase {
            name: "a pod that does not fit on any node",
            fw: framework(&[], &["FalseFilter"], &[]),
            args: None,
            nodes: vec!["node1", "node2"],
            test_pods: vec![pod("p").priority(HIGH).obj()],
            init_pods: vec![
                pod("p1").node("node1").priority(MID).obj(),
                pod("p2").node("node2").priority(MID).obj(),
            ],
            pdbs: vec![],
            offsets: vec![0],
            expected: vec![vec![]],
        },
        DryRunCase {
            name: "a pod that fits on both nodes when lower priority pods are preempted",
            fw: fit_framework(),
            args: None,
            nodes: vec!["node1", "node2"],
            test_pods: vec![pod("p").priority(HIGH).req(LARGE).obj()],
            init_pods: vec![mk("p1", MID, "node1", LARGE), mk("p2", MID, "node2", LARGE)],
            pdbs: vec![],
            offsets: vec![0],
            expected: vec![vec![("node1", vec!["p1"], 0), ("node2", vec!["p2"], 0)]],
        },
        DryRunCase {
            name: "a pod that would fit on the nodes, but other pods running are higher priority, no preemption would happen",
            fw: fit_framework(),
            args: None,
            nodes: vec!["node1", "node2"],
            test_pods: vec![pod("p").priority(LOW).req(LARGE).obj()],
            init_pods: vec![mk("p1", MID, "node1", LARGE), mk("p2", MID, "node2", LARGE)],
            pdbs: vec![],
            offsets: vec![0],
            expected: vec![vec![]],
        },
        DryRunCase {
            name: "medium priority pod is preempted, but lower priority one stays as it is small",
            fw: fit_framework(),
            args: None,
            nodes: vec!["node1", "node2"],
            test_pods: vec![pod("p").priority(HIGH).req(LARGE).obj()],
            init_pods: vec![
                mk("p1.1", LOW, "node1", SMALL),
                mk("p1.2", MID, "node1", LARGE),
                mk("p2", MID, "node2", LARGE),
            ],
            pdbs: vec![],
            offsets: vec![0],
            expected: vec![vec![("node1", vec!["p1.2"], 0), ("node2", vec!["p2"], 0)]],
        },
        DryRunCase {
            name: "mixed priority pods are preempted",
            fw: fit_framework(),
            args: None,
            nodes: vec!["node1", "node2"],
            test_pods: vec![pod("p").priority(HIGH).req(LARGE).obj()],
            init_pods: vec![
                mk("p1.1", MID, "node1", SMALL),
                mk("p1.2", LOW, "node1", SMALL),
                mk("p1.3", MID, "node1", MEDIUM),
                mk("p1.4", HIGH, "node1", SMALL),
                mk("p2", HIGH, "node2", LARGE),
            ],
            pdbs: vec![],
            offsets: vec![0],
            expected: vec![vec![("node1", vec!["p1.2", "p1.3"], 0)]],
        },
        DryRunCase {
            name: "mixed priority pods are preempted, pick later StartTime one when priorities are equal",
            fw: fit_framework(),
            args: None,
            nodes: vec!["node1", "node2"],
            test_pods: vec![pod("p").priority(HIGH).req(LARGE).obj()],
            init_pods: vec![
                pod("p1.1").node("node1").priority(LOW).req(SMALL).start(5).obj(),
                pod("p1.2").node("node1").priority(LOW).req(SMALL).start(4).obj(),
                pod("p1.3").node("node1").priority(MID).req(MEDIUM).start(3).obj(),
                pod("p1.4").node("node1").priority(HIGH).req(SMALL).start(2).obj(),
                pod("p2").node("node2").priority(HIGH).req(LARGE).start(1).obj(),
            ],
            pdbs: vec![],
            offsets: vec![0],
            expected: vec![vec![("node1", vec!["p1.1", "p1.3"], 0)]],
        },
        DryRunCase {
            name: "pod with anti-affinity is preempted",
            fw: framework(
                &["NodeResourcesFit", "InterPodAffinity"],
                &["NodeResourcesFit", "InterPodAffinity"],
                &[],
            ),
            args: None,
            nodes: vec!["node1", "node2"],
            test_pods: vec![pod("p").label("foo", "").priority(HIGH).req(SMALL).obj()],
            init_pods: vec![
                pod("p1.1")
                    .node("node1")
                    .label("foo", "")
                    .priority(LOW)
                    .req(SMALL)
                    .anti_affinity_exists("foo", "hostname")
                    .obj(),
                mk("p1.2", MID, "node1", SMALL),
                mk("p1.3", HIGH, "node1", SMALL),
                mk("p2", HIGH, "node2", SMALL),
            ],
            pdbs: vec![],
            offsets: vec![0],
            expected: vec![vec![("node1", vec!["p1.1"], 0)]],
        },
        DryRunCase {
            name: "preemption to resolve pod topology spread filter failure",
            fw: framework(&["PodTopologySpread"], &["PodTopologySpread"], &[]),
            args: None,
            nodes: vec!["node-a/zone1", "node-b/zone1", "node-x/zone2"],
            test_pods: vec![pod("p")
                .label("foo", "")
                .priority(HIGH)
                .spread(1, "zone", "foo")
                .spread(1, "hostname", "foo")
                .obj()],
            init_pods: vec![
                pod("pod-a1").node("node-a").label("foo", "").priority(MID).obj(),
                pod("pod-a2").node("node-a").label("foo", "").priority(LOW).obj(),
                pod("pod-b1").node("node-b").label("foo", "").priority(LOW).obj(),
                pod("pod-x1").node("node-x").label("foo", "").priority(HIGH).obj(),
                pod("pod-x2").node("node-x").label("foo", "").priority(HIGH).obj(),
            ],
            pdbs: vec![],
            offsets: vec![0],
            expected: vec![vec![
                ("node-a", vec!["pod-a2"], 0),
                ("node-b", vec!["pod-b1"], 0),
            ]],
        },
        DryRunCase {
            name: "get Unschedulable in the preemption phase when the filter plugins filtering the nodes",
            fw: framework(&["NodeResourcesFit"], &["FalseFilter", "NodeResourcesFit"], &[]),
            args: None,
            nodes: vec!["node1", "node2"],
            test_pods: vec![pod("p").priority(HIGH).req(LARGE).obj()],
            init_pods: vec![mk("p1", MID, "node1", LARGE), mk("p2", MID, "node2", LARGE)],
            pdbs: vec![],
            offsets: vec![0],
            expected: vec![vec![]],
        },
        DryRunCase {
            name: "preemption with violation of same pdb",
            fw: fit_framework(),
            args: None,
            nodes: vec!["node1"],
            test_pods: vec![pod("p").priority(HIGH).req(VERY_LARGE).obj()],
            init_pods: vec![
                pod("p1.1").node("node1").label("app", "foo").priority(MID).req(MEDIUM).obj(),
                pod("p1.2").node("node1").label("app", "foo").priority(MID).req(MEDIUM).obj(),
            ],
            pdbs: vec![pdb(&[("app", "foo")], 1, &[])],
            offsets: vec![0],
            expected: vec![vec![("node1", vec!["p1.1", "p1.2"], 1)]],
        },
        DryRunCase {
            name: "preemption with violation of the pdb with pod whose eviction was processed, the victim doesn't belong to DisruptedPods",
            fw: fit_framework(),
            args: None,
            nodes: vec!["node1"],
            test_pods: vec![pod("p").priority(HIGH).req(VERY_LARGE).obj()],
            init_pods: vec![
                pod("p1.1").node("node1").label("app", "foo").priority(MID).req(MEDIUM).obj(),
                pod("p1.2").node("node1").label("app", "foo").priority(MID).req(MEDIUM).obj(),
            ],
            pdbs: vec![pdb(&[("app", "foo")], 1, &["p2"])],
            offsets: vec![0],
            expected: vec![vec![("node1", vec!["p1.1", "p1.2"], 1)]],
        },
        DryRunCase {
            name: "preemption with violation of the pdb with pod whose eviction was processed, the victim belongs to DisruptedPods",
            fw: fit_framework(),
            args: None,
            nodes: vec!["node1"],
            test_pods: vec![pod("p").priority(HIGH).req(VERY_LARGE).obj()],
            init_pods: vec![
                pod("p1.1").node("node1").label("app", "foo").priority(MID).req(MEDIUM).obj(),
                pod("p1.2").node("node1").label("app", "foo").priority(MID).req(MEDIUM).obj(),
            ],
            pdbs: vec![pdb(&[("app", "foo")], 1, &["p1.2"])],
            offsets: vec![0],
            expected: vec![vec![("node1", vec!["p1.1", "p1.2"], 0)]],
        },
        DryRunCase {
            name: "preemption with violation of the pdb with pod whose eviction was processed, the victim which belongs to DisruptedPods is treated as 'nonViolating'",
            fw: fit_framework(),
            args: None,
            nodes: vec!["node1"],
            test_pods: vec![pod("p").priority(HIGH).req(VERY_LARGE).obj()],
            init_pods: vec![
                pod("p1.1").node("node1").label("app", "foo").priority(MID).req(MEDIUM).obj(),
                pod("p1.2").node("node1").label("app", "foo").priority(MID).req(MEDIUM).obj(),
                pod("p1.3").node("node1").label("app", "foo").priority(MID).req(MEDIUM).obj(),
            ],
            pdbs: vec![pdb(&[("app", "foo")], 1, &["p1.3"])],
            offsets: vec![0],
            expected: vec![vec![("node1", vec!["p1.1", "p1.2", "p1.3"], 1)]],
        },
        DryRunCase {
            name: "all nodes are possible candidates, but DefaultPreemptionArgs limits to 2",
            fw: fit_framework(),
            args: Some((40, 1)),
            nodes: vec!["node1", "node2", "node3", "node4", "node5"],
            test_pods: vec![pod("p").priority(HIGH).req(LARGE).obj()],
            init_pods: (1..=5)
                .map(|i| {
                    pod(&format!("p{i}"))
                        .node(&format!("node{i}"))
                        .priority(MID)
                        .req(LARGE)
                        .obj()
                })
                .collect(),
            pdbs: vec![],
            offsets: vec![4],
            expected: vec![vec![("node1", vec!["p1"], 0), ("node5", vec!["p5"], 0)]],
        },
        DryRunCase {
            name: "some nodes are not possible candidates, DefaultPreemptionArgs limits to 2",
            fw: fit_framework(),
            args: Some((40, 1)),
            nodes: vec!["node1", "node2", "node3", "node4", "node5"],
            test_pods: vec![pod("p").priority(HIGH).req(LARGE).obj()],
            init_pods: vec![
                mk("p1", MID, "node1", LARGE),
                mk("p2", VERY_HIGH, "node2", LARGE),
                mk("p3", MID, "node3", LARGE),
                mk("p4", MID, "node4", LARGE),
                mk("p5", VERY_HIGH, "node5", LARGE),
            ],
            pdbs: vec![],
            offsets: vec![4],
            expected: vec![vec![("node1", vec!["p1"], 0), ("node3", vec!["p3"], 0)]],
        },
        DryRunCase {
            name: "preemption offset across multiple scheduling cycles and wrap around",
            fw: fit_framework(),
            args: Some((40, 1)),
            nodes: vec!["node1", "node2", "node3", "node4", "node5"],
            test_pods: ["tp1", "tp2", "tp3"]
                .iter()
                .map(|n| pod(n).priority(HIGH).req(LARGE).obj())
                .collect(),
            init_pods: (1..=5)
                .map(|i| {
                    pod(&format!("p{i}"))
                        .node(&format!("node{i}"))
                        .priority(MID)
                        .req(LARGE)
                        .obj()
                })
                .collect(),
            pdbs: vec![],
            offsets: vec![4, 1, 3],
            expected: vec![
                vec![("node1", vec!["p1"], 0), ("node5", vec!["p5"], 0)],
                vec![("node2", vec!["p2"], 0), ("node3", vec!["p3"], 0)],
                vec![("node4", vec!["p4"], 0), ("node5", vec!["p5"], 0)],
            ],
        },
        DryRunCase {
            name: "preemption looks past numCandidates until a non-PDB violating node is found",
            fw: fit_framework(),
            args: Some((40, 2)),
            nodes: vec!["node1", "node2", "node3", "node4", "node5"],
            test_pods: vec![pod("p").priority(HIGH).req(LARGE).obj()],
            init_pods: vec![
                pod("p1").node("node1").label("app", "foo").priority(MID).req(LARGE).obj(),
                pod("p2").node("node2").label("app", "foo").priority(MID).req(LARGE).obj(),
                mk("p3", MID, "node3", LARGE),
                mk("p4", MID, "node4", LARGE),
                pod("p5").node("node5").label("app", "foo").priority(MID).req(LARGE).obj(),
            ],
            pdbs: vec![pdb(&[("app", "foo")], 0, &[])],
            offsets: vec![4],
            expected: vec![vec![
                ("node1", vec!["p1"], 1),
                ("node3", vec!["p3"], 0),
                ("node5", vec!["p5"], 1),
            ]],
        },
    ];
    let nominator = Nominator::new();
    let mut f = Failures::new();
    for c in cases {
        let nodes: Vec<Node> = c.nodes.iter().map(|n| topo_node(n)).collect();
        let snap = snapshot(nodes, c.init_pods, c.pdbs.clone());
        let pl = match c.args {
            Some((pct, abs)) => DefaultPreemption::with_args(pct, abs),
            None => DefaultPreemption::default(),
        };
        let mut infos: Vec<&NodeInfo> = snap.nodes.iter().collect();
        infos.sort_by(|a, b| a.name().cmp(b.name()));
        let handle = FrameworkHandle {
            fw: &c.fw,
            snapshot: &snap,
            nominator: &nominator,
            seed: 0,
        };
        for (cycle, p) in c.test_pods.iter().enumerate() {
            let state = pre_filtered(&c.fw, p, &snap);
            let num = pl.calculate_num_candidates(infos.len());
            let got =
                pl.dry_run_preemption(&handle, &state, p, &infos, &c.pdbs, c.offsets[cycle], num);
            let got = summarize(&got.candidates);
            let want: Vec<(String, Vec<String>, i64)> = c.expected[cycle]
                .iter()
                .map(|(n, v, k)| (n.to_string(), v.iter().map(|s| s.to_string()).collect(), *k))
                .collect();
            f.check(
                &format!("{} (cycle {cycle})", c.name),
                "candidates",
                got,
                want,
            );
        }
    }
    f.finish();
}

// ---- TestSelectBestCandidate ----

/// (name, nodes, preemptor, pods, acceptable picks).
type BestCase = (
    &'static str,
    Vec<&'static str>,
    Pod,
    Vec<Pod>,
    Vec<&'static str>,
);

#[test]
fn select_best_candidate() {
    let e = 0u32;
    let p = |n: &str, node: &str, prio: i32, r: (&str, &str), t: u32| {
        pod(n).node(node).priority(prio).req(r).start(t).obj()
    };
    let cases: Vec<BestCase> = vec![
        (
            "a pod that fits on both nodes when lower priority pods are preempted",
            vec!["node1", "node2"],
            pod("p").priority(HIGH).req(LARGE).obj(),
            vec![
                p("p1", "node1", MID, LARGE, e),
                p("p2", "node2", MID, LARGE, e),
            ],
            vec!["node1", "node2"],
        ),
        (
            "node with min highest priority pod is picked",
            vec!["node1", "node2", "node3"],
            pod("p").priority(HIGH).req(VERY_LARGE).obj(),
            vec![
                p("p1.1", "node1", MID, MEDIUM, e),
                p("p1.2", "node1", MID, LARGE, e),
                p("p2.1", "node2", MID, MEDIUM, e),
                p("p2.2", "node2", LOW, MEDIUM, e),
                p("p3.1", "node3", LOW, MEDIUM, e),
                p("p3.2", "node3", LOW, MEDIUM, e),
            ],
            vec!["node3"],
        ),
        (
            "when highest priorities are the same, minimum sum of priorities is picked",
            vec!["node1", "node2", "node3"],
            pod("p").priority(HIGH).req(VERY_LARGE).obj(),
            vec![
                p("p1.1", "node1", MID, MEDIUM, e),
                p("p1.2", "node1", MID, LARGE, e),
                p("p2.1", "node2", MID, LARGE, e),
                p("p2.2", "node2", LOW, MEDIUM, e),
                p("p3.1", "node3", MID, MEDIUM, e),
                p("p3.2", "node3", MID, MEDIUM, e),
            ],
            vec!["node2"],
        ),
        (
            "when highest priority and sum are the same, minimum number of pods is picked",
            vec!["node1", "node2", "node3"],
            pod("p").priority(HIGH).req(VERY_LARGE).obj(),
            vec![
                p("p1.1", "node1", MID, SMALL, e),
                p("p1.2", "node1", NEG, SMALL, e),
                p("p1.3", "node1", MID, SMALL, e),
                p("p1.4", "node1", NEG, SMALL, e),
                p("p2.1", "node2", MID, LARGE, e),
                p("p2.2", "node2", NEG, MEDIUM, e),
                p("p3.1", "node3", MID, MEDIUM, e),
                p("p3.2", "node3", NEG, SMALL, e),
                p("p3.3", "node3", LOW, SMALL, e),
            ],
            vec!["node2"],
        ),
        (
            "sum of adjusted priorities is considered",
            vec!["node1", "node2", "node3"],
            pod("p").priority(HIGH).req(VERY_LARGE).obj(),
            vec![
                p("p1.1", "node1", MID, SMALL, e),
                p("p1.2", "node1", NEG, SMALL, e),
                p("p1.3", "node1", NEG, SMALL, e),
                p("p2.1", "node2", MID, LARGE, e),
                p("p2.2", "node2", NEG, MEDIUM, e),
                p("p3.1", "node3", MID, MEDIUM, e),
                p("p3.2", "node3", NEG, SMALL, e),
                p("p3.3", "node3", LOW, SMALL, e),
            ],
            vec!["node2"],
        ),
        (
            "non-overlapping lowest high priority, sum priorities, and number of pods",
            vec!["node1", "node2", "node3", "node4"],
            pod("p").priority(VERY_HIGH).req(VERY_LARGE).obj(),
            vec![
                p("p1.1", "node1", MID, SMALL, e),
                p("p1.2", "node1", LOW, SMALL, e),
                p("p1.3", "node1", LOW, SMALL, e),
                p("p2.1", "node2", HIGH, LARGE, e),
                p("p3.1", "node3", MID, MEDIUM, e),
                p("p3.2", "node3", LOW, SMALL, e),
                p("p3.3", "node3", LOW, SMALL, e),
                p("p3.4", "node3", LOW, MEDIUM, e),
                p("p4.1", "node4", MID, MEDIUM, e),
                p("p4.2", "node4", MID, SMALL, e),
                p("p4.3", "node4", MID, SMALL, e),
                p("p4.4", "node4", NEG, SMALL, e),
            ],
            vec!["node1"],
        ),
        (
            "same priority, same number of victims, different start time for each node's pod",
            vec!["node1", "node2", "node3"],
            pod("p").priority(HIGH).req(VERY_LARGE).obj(),
            vec![
                p("p1.1", "node1", MID, MEDIUM, 2),
                p("p1.2", "node1", MID, MEDIUM, 2),
                p("p2.1", "node2", MID, MEDIUM, 3),
                p("p2.2", "node2", MID, MEDIUM, 3),
                p("p3.1", "node3", MID, MEDIUM, 1),
                p("p3.2", "node3", MID, MEDIUM, 1),
            ],
            vec!["node2"],
        ),
        (
            "same priority, same number of victims, different start time for all pods",
            vec!["node1", "node2", "node3"],
            pod("p").priority(HIGH).req(VERY_LARGE).obj(),
            vec![
                p("p1.1", "node1", MID, MEDIUM, 4),
                p("p1.2", "node1", MID, MEDIUM, 2),
                p("p2.1", "node2", MID, MEDIUM, 5),
                p("p2.2", "node2", MID, MEDIUM, 1),
                p("p3.1", "node3", MID, MEDIUM, 3),
                p("p3.2", "node3", MID, MEDIUM, 6),
            ],
            vec!["node3"],
        ),
        (
            "different priority, same number of victims, different start time for all pods",
            vec!["node1", "node2", "node3"],
            pod("p").priority(HIGH).req(VERY_LARGE).obj(),
            vec![
                p("p1.1", "node1", LOW, MEDIUM, 4),
                p("p1.2", "node1", MID, MEDIUM, 2),
                p("p2.1", "node2", MID, MEDIUM, 6),
                p("p2.2", "node2", LOW, MEDIUM, 1),
                p("p3.1", "node3", LOW, MEDIUM, 3),
                p("p3.2", "node3", MID, MEDIUM, 5),
            ],
            vec!["node2"],
        ),
    ];
    let fw = fit_framework();
    let pl = DefaultPreemption::default();
    let nominator = Nominator::new();
    let mut f = Failures::new();
    for (name, nodes, preemptor, pods, expected) in cases {
        let nodes: Vec<Node> = nodes.iter().map(|n| node_cap(n, VERY_LARGE)).collect();
        let n = nodes.len();
        let snap = snapshot(nodes, pods, vec![]);
        let state = pre_filtered(&fw, &preemptor, &snap);
        let infos: Vec<&NodeInfo> = snap.nodes.iter().collect();
        let handle = FrameworkHandle {
            fw: &fw,
            snapshot: &snap,
            nominator: &nominator,
            seed: 0,
        };
        // Any offset must give an expected node.
        for offset in 0..n {
            let dry = pl.dry_run_preemption(
                &handle,
                &state,
                &preemptor,
                &infos,
                &[],
                offset,
                pl.calculate_num_candidates(n),
            );
            let got =
                rkube_plugins::default_preemption::pick_one_node_for_preemption(&dry.candidates)
                    .map(|i| dry.candidates[i].node.clone());
            if !got.as_deref().is_some_and(|g| expected.contains(&g)) {
                f.fail(
                    &format!("{name} (offset {offset})"),
                    format!("got {got:?}, want one of {expected:?}"),
                );
            }
        }
    }
    f.finish();
}

// ---- TestPodEligibleToPreemptOthers ----

/// (name, pod, pods, nodes, nominated node's status, eligible).
type EligibleCase = (&'static str, Pod, Vec<Pod>, Vec<&'static str>, Status, bool);

#[test]
fn pod_eligible_to_preempt_others() {
    let cases: Vec<EligibleCase> = vec![
        (
            "Pod with nominated node",
            pod("p_with_nominated_node").priority(HIGH).nominated("node1").obj(),
            vec![pod("p1").priority(LOW).node("node1").terminating().obj()],
            vec!["node1"],
            Status::new(
                Code::UnschedulableAndUnresolvable,
                "node(s) had untolerated taint(s)",
            ),
            true,
        ),
        (
            "Pod without nominated node",
            pod("p_without_nominated_node").priority(HIGH).obj(),
            vec![],
            vec![],
            Status::success(),
            true,
        ),
        (
            "Pod with 'PreemptNever' preemption policy",
            pod("p_with_preempt_never_policy").priority(HIGH).never().obj(),
            vec![],
            vec![],
            Status::success(),
            false,
        ),
        (
            "preemption victim pod terminating, as indicated by the dedicated DisruptionTarget condition",
            pod("p_with_nominated_node").priority(HIGH).nominated("node1").obj(),
            vec![pod("p1").priority(LOW).node("node1").preempted_by_scheduler().obj()],
            vec!["node1"],
            Status::success(),
            false,
        ),
        (
            "non-victim Pods terminating",
            pod("p_with_nominated_node").priority(HIGH).nominated("node1").obj(),
            vec![pod("p1").priority(LOW).node("node1").terminating().obj()],
            vec!["node1"],
            Status::success(),
            true,
        ),
    ];
    let pl = DefaultPreemption::default();
    for (name, p, pods, nodes, status, want) in cases {
        let snap = snapshot(nodes.iter().map(|n| node(n, &[])).collect(), pods, vec![]);
        let got = pl.pod_eligible_to_preempt_others(&p, &snap, &status);
        assert_eq!(got.is_ok(), want, "{name}: {got:?}");
    }
    let never = pod("p").priority(HIGH).never().obj();
    assert_eq!(
        pl.pod_eligible_to_preempt_others(&never, &Snapshot::default(), &Status::success()),
        Err("not eligible due to preemptionPolicy=Never.".to_string())
    );
}

// ---- framework: nominated pods and the nominated node ----

#[test]
fn nominated_pods_reserve_room_for_lower_or_equal_priority_pods() {
    let fw = fit_framework();
    let snap = snapshot(
        vec![node_cap("node1", LARGE), node_cap("node2", SMALL)],
        vec![],
        vec![],
    );
    // A high-priority pod nominated to node1 takes all of it.
    let nominated = pod("nominated")
        .priority(HIGH)
        .req(LARGE)
        .nominated("node1")
        .obj();
    let mut nominator = Nominator::new();
    nominator.add(Arc::new(nominated), "node1");
    let mut sched = Scheduler::new(0, 0);
    // Lower priority: node1 is reserved, node2 too small (its request
    // exceeds node2's allocatable: unresolvable, not a preemption target).
    let low = pod("low").priority(MID).req(MEDIUM).obj();
    match sched.schedule_with(&fw, &snap, &low, &nominator) {
        Outcome::Unschedulable { message, .. } => assert_eq!(
            message,
            "0/2 nodes are available: 2 Insufficient cpu, 2 Insufficient memory. preemption: 0/2 nodes are available: 1 No preemption victims found for incoming pod, 1 Preemption is not helpful for scheduling."
        ),
        o => panic!("unexpected {o:?}"),
    }
    // Equal priority yields too; higher priority does not see the nomination.
    let equal = pod("equal").priority(HIGH).req(MEDIUM).obj();
    assert!(matches!(
        sched.schedule_with(&fw, &snap, &equal, &nominator),
        Outcome::Unschedulable { .. }
    ));
    let higher = pod("higher").priority(VERY_HIGH).req(MEDIUM).obj();
    match sched.schedule_with(&fw, &snap, &higher, &nominator) {
        Outcome::Scheduled { node, .. } => assert_eq!(snap.nodes[node].name(), "node1"),
        o => panic!("unexpected {o:?}"),
    }
    // Without the nomination the low pod fits node1.
    match sched.schedule(&fw, &snap, &low) {
        Outcome::Scheduled { node, .. } => assert_eq!(snap.nodes[node].name(), "node1"),
        o => panic!("unexpected {o:?}"),
    }
}

#[test]
fn nominated_node_is_evaluated_first() {
    // Scoring would prefer the emptier node2; the nominated node1 wins
    // because it is checked first and fits.
    let fw = framework(
        &["NodeResourcesFit"],
        &["NodeResourcesFit"],
        &["NodeResourcesFit"],
    );
    let snap = snapshot(
        vec![node_cap("node1", VERY_LARGE), node_cap("node2", VERY_LARGE)],
        vec![pod("busy").node("node1").req(MEDIUM).obj()],
        vec![],
    );
    let p = pod("p").priority(HIGH).req(SMALL).obj();
    let mut sched = Scheduler::new(0, 0);
    match sched.schedule_with(&fw, &snap, &p, &Nominator::new()) {
        Outcome::Scheduled { node, .. } => assert_eq!(snap.nodes[node].name(), "node2"),
        o => panic!("unexpected {o:?}"),
    }
    let nominated = pod("p").priority(HIGH).req(SMALL).nominated("node1").obj();
    match sched.schedule_with(&fw, &snap, &nominated, &Nominator::new()) {
        Outcome::Scheduled {
            node,
            evaluated,
            feasible,
            ..
        } => {
            assert_eq!(snap.nodes[node].name(), "node1");
            assert_eq!((evaluated, feasible), (1, 1));
        }
        o => panic!("unexpected {o:?}"),
    }
}

#[test]
fn scheduler_returns_nomination_and_victims() {
    let fw = fit_framework();
    let snap = snapshot(
        vec![node_cap("node1", LARGE)],
        vec![pod("victim").node("node1").priority(LOW).req(LARGE).obj()],
        vec![],
    );
    let p = pod("p").priority(HIGH).req(LARGE).obj();
    let mut sched = Scheduler::new(7, 0);
    match sched.schedule_with(&fw, &snap, &p, &Nominator::new()) {
        Outcome::Unschedulable {
            message,
            nominated_node,
            victims,
            ..
        } => {
            assert_eq!(
                message,
                "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient memory. preemption: found a potential placement for pod on node node1, preempting 1 victims"
            );
            assert_eq!(nominated_node.as_deref(), Some("node1"));
            assert_eq!(victims.len(), 1);
            assert_eq!(victims[0].name, "victim");
        }
        o => panic!("unexpected {o:?}"),
    }
}
