//! Workload-aware preemption in the simulator (GenericWorkload on), on
//! cases whose outcome upstream's own loop gave (the oracle's `simulate
//! --placements --v 2`: the same placements, messages and deleted victims).
//!
//! Three 2-CPU nodes; n1 and n2 each run two 1-CPU pods of priority 0, and
//! a gang of priority 100 wants three 1.5-CPU members.

use rkube_model::load::{build, parse_documents};

const NODES: &str = "\
- {apiVersion: v1, kind: Node, metadata: {name: n1, labels: {kubernetes.io/hostname: n1}}, status: {allocatable: {cpu: '2', memory: 4Gi, pods: '110'}}}
- {apiVersion: v1, kind: Node, metadata: {name: n2, labels: {kubernetes.io/hostname: n2}}, status: {allocatable: {cpu: '2', memory: 4Gi, pods: '110'}}}
- {apiVersion: v1, kind: Node, metadata: {name: n3, labels: {kubernetes.io/hostname: n3}}, status: {allocatable: {cpu: '2', memory: 4Gi, pods: '110'}}}
";

/// The cluster: `class` is the gang's PriorityClass (value 100, with
/// `policy`), `running` the running pods' spec prefix, `p1_cpu` the second
/// member's request.
fn cluster(policy: &str, running: &str, p1_cpu: &str) -> rkube_model::Cluster {
    let mut t = String::from("apiVersion: v1\nkind: List\nitems:\n");
    t.push_str(&format!("- {{apiVersion: scheduling.k8s.io/v1, kind: PriorityClass, metadata: {{name: high}}, value: 100{policy}}}\n"));
    t.push_str(NODES);
    for (i, node) in [(1, "n1"), (2, "n1"), (3, "n2"), (4, "n2")] {
        t.push_str(&format!("- {{apiVersion: v1, kind: Pod, metadata: {{name: low{i}, namespace: default, creationTimestamp: '2026-01-01T00:00:0{i}Z'}}, spec: {{{running}nodeName: {node}, containers: [{{name: c, image: x, resources: {{requests: {{cpu: '1'}}}}}}]}}, status: {{startTime: '2026-01-01T00:00:0{i}Z'}}}}\n"));
    }
    t.push_str("- {apiVersion: scheduling.k8s.io/v1beta1, kind: PodGroup, metadata: {name: g, namespace: default}, spec: {schedulingPolicy: {gang: {minCount: 3}}, priorityClassName: high}}\n");
    for (p, cpu) in [("p0", "1500m"), ("p1", p1_cpu), ("p2", "1500m")] {
        t.push_str(&format!("- {{apiVersion: v1, kind: Pod, metadata: {{name: {p}, namespace: default, creationTimestamp: '2026-01-02T00:00:00Z'}}, spec: {{priorityClassName: high, schedulingGroup: {{podGroupName: g}}, containers: [{{name: c, image: x, resources: {{requests: {{cpu: {cpu}}}}}}}]}}}}\n"));
    }
    build(&parse_documents("t.yaml", &t).unwrap(), &mut |_| Ok(false)).unwrap()
}

fn simulate(c: &rkube_model::Cluster, gate: bool) -> rkube_sim::SimulationReport {
    let cfg = rkube_config::default_config_gated(gate);
    rkube_sim::simulate(c, &cfg, &rkube_sim::SimulateOptions::default()).unwrap()
}

fn outcome(r: &rkube_sim::SimulationReport) -> Vec<(String, String, String)> {
    r.placements
        .iter()
        .map(|p| {
            (
                p.pod.clone(),
                p.node.clone().unwrap_or_default(),
                p.message.clone(),
            )
        })
        .collect()
}

#[test]
fn a_gang_preempts_lower_priority_pods_across_the_cluster() {
    let r = simulate(&cluster("", "", "1500m"), true);
    let placed: Vec<(String, String)> = outcome(&r).into_iter().map(|(p, n, _)| (p, n)).collect();
    assert_eq!(
        placed,
        [
            ("default/p0".to_string(), "n1".to_string()),
            ("default/p1".into(), "n2".into()),
            ("default/p2".into(), "n3".into()),
        ]
    );
    assert_eq!(r.preemptions.len(), 1);
    let p = &r.preemptions[0];
    assert!(p.pod_group);
    assert_eq!(p.preemptor, "default/g");
    assert_eq!(p.node, "n1,n2,n3");
    let mut victims = p.victims.clone();
    victims.sort();
    assert_eq!(
        victims,
        [
            "default/low1",
            "default/low2",
            "default/low3",
            "default/low4"
        ]
    );
}

const FITS_THEN_FAILS: &str =
    "pod group is unschedulable, minCount (3) cannot be satisfied: 1 scheduled, 1 remaining";

#[test]
fn a_gang_that_cannot_preempt_gets_upstreams_messages() {
    // (case, PriorityClass policy, running pods' spec, p1's request, p0's message)
    let cases = [
        (
            "preemptionPolicy Never",
            ", preemptionPolicy: Never",
            "",
            "1500m",
            format!("{FITS_THEN_FAILS}, deallocation and deletion of ResourceClaims completed, pod group preemption: not eligible due to preemptionPolicy=Never."),
        ),
        (
            "the pass fails even without the victims",
            "",
            "",
            "2500m",
            format!("{FITS_THEN_FAILS}, deallocation and deletion of ResourceClaims completed, pod group preemption: minCount (3) cannot be satisfied: 1 scheduled, 1 remaining"),
        ),
        (
            "no victims",
            "",
            "priorityClassName: high, ",
            "1500m",
            format!("{FITS_THEN_FAILS}, pod group preemption: No preemption victims found for incoming preemptor"),
        ),
    ];
    for (name, policy, running, p1, p0_message) in cases {
        let r = simulate(&cluster(policy, running, p1), true);
        let got = outcome(&r);
        let want = [
            ("default/p0".to_string(), String::new(), p0_message),
            (
                "default/p1".into(),
                String::new(),
                "0/3 nodes are available: 3 Insufficient cpu.".into(),
            ),
            (
                "default/p2".into(),
                String::new(),
                "minCount (3) cannot be satisfied: 1 scheduled, 1 remaining".into(),
            ),
        ];
        assert_eq!(got, want, "{name}");
        assert!(r.preemptions.is_empty(), "{name}");
    }
}

/// Two 2-CPU nodes: the PodGroup `rg` (disruption mode `all`, priority 0)
/// runs r1 on n1 and r2 on n2; xx (n2) and yy (n1) run alone. `pending` is
/// what wants 1.5 CPU at priority 100.
fn group_victims(pending: &str) -> rkube_model::Cluster {
    let t = format!("apiVersion: v1\nkind: List\nitems:\n\
- {{apiVersion: scheduling.k8s.io/v1, kind: PriorityClass, metadata: {{name: high}}, value: 100}}\n\
- {{apiVersion: v1, kind: Node, metadata: {{name: n1, labels: {{kubernetes.io/hostname: n1}}}}, status: {{allocatable: {{cpu: '2', memory: 4Gi, pods: '110'}}}}}}\n\
- {{apiVersion: v1, kind: Node, metadata: {{name: n2, labels: {{kubernetes.io/hostname: n2}}}}, status: {{allocatable: {{cpu: '2', memory: 4Gi, pods: '110'}}}}}}\n\
- {{apiVersion: scheduling.k8s.io/v1beta1, kind: PodGroup, metadata: {{name: rg, namespace: default}}, spec: {{schedulingPolicy: {{basic: {{}}}}, disruptionMode: {{all: {{}}}}}}}}\n\
- {{apiVersion: v1, kind: Pod, metadata: {{name: r1, namespace: default}}, spec: {{nodeName: n1, schedulingGroup: {{podGroupName: rg}}, containers: [{{name: c, image: x, resources: {{requests: {{cpu: '1'}}}}}}]}}, status: {{startTime: '2026-01-01T00:00:01Z'}}}}\n\
- {{apiVersion: v1, kind: Pod, metadata: {{name: r2, namespace: default}}, spec: {{nodeName: n2, schedulingGroup: {{podGroupName: rg}}, containers: [{{name: c, image: x, resources: {{requests: {{cpu: '1'}}}}}}]}}, status: {{startTime: '2026-01-01T00:00:02Z'}}}}\n\
- {{apiVersion: v1, kind: Pod, metadata: {{name: xx, namespace: default}}, spec: {{nodeName: n2, containers: [{{name: c, image: x, resources: {{requests: {{cpu: '1'}}}}}}]}}, status: {{startTime: '2026-01-01T00:00:03Z'}}}}\n\
- {{apiVersion: v1, kind: Pod, metadata: {{name: yy, namespace: default}}, spec: {{nodeName: n1, containers: [{{name: c, image: x, resources: {{requests: {{cpu: '500m'}}}}}}]}}, status: {{startTime: '2026-01-01T00:00:04Z'}}}}\n\
{pending}");
    build(&parse_documents("t.yaml", &t).unwrap(), &mut |_| Ok(false)).unwrap()
}

const POD: &str = "- {apiVersion: v1, kind: Pod, metadata: {name: p0, namespace: default}, spec: {priorityClassName: high, containers: [{name: c, image: x, resources: {requests: {cpu: '1500m'}}}]}}\n";

#[test]
fn a_group_with_disruption_mode_all_is_evicted_whole() {
    // A gang of one, then a single pod: both take n1 and evict r1 with r2,
    // which runs on n2.
    let gang = format!(
        "- {{apiVersion: scheduling.k8s.io/v1beta1, kind: PodGroup, metadata: {{name: g, namespace: default}}, spec: {{schedulingPolicy: {{gang: {{minCount: 1}}}}, priorityClassName: high}}}}\n{}",
        POD.replace("priorityClassName: high, ", "priorityClassName: high, schedulingGroup: {podGroupName: g}, ")
    );
    for (name, pending, preemptor) in [
        ("gang", gang.as_str(), "default/g"),
        ("pod", POD, "default/p0"),
    ] {
        let r = simulate(&group_victims(pending), true);
        assert_eq!(r.placements[0].node.as_deref(), Some("n1"), "{name}");
        assert_eq!(r.preemptions.len(), 1, "{name}");
        assert_eq!(r.preemptions[0].preemptor, preemptor, "{name}");
        assert_eq!(
            r.preemptions[0].victims,
            ["default/r1", "default/r2"],
            "{name}"
        );
    }
    // Without the gate each pod is its own victim.
    let r = simulate(&group_victims(POD), false);
    assert_eq!(r.preemptions[0].victims, ["default/r1"]);
}

/// A basic group whose first member fits and whose second does not: the
/// group succeeds, and the member left is tried again in a cycle of its own
/// (upstream's `AddAttemptedPodGroupIfNeeded`), which preempts for it. The
/// oracle's run ends at the first cycle's outcome, so this follows
/// upstream's code: that second cycle is an ordinary pod-group cycle, with
/// PodGroupPostFilter.
#[test]
fn the_members_left_by_a_group_that_succeeded_may_preempt() {
    let t = "apiVersion: v1\nkind: List\nitems:\n\
- {apiVersion: scheduling.k8s.io/v1, kind: PriorityClass, metadata: {name: high}, value: 100}\n\
- {apiVersion: v1, kind: Node, metadata: {name: n1, labels: {kubernetes.io/hostname: n1}}, status: {allocatable: {cpu: '2', memory: 4Gi, pods: '110'}}}\n\
- {apiVersion: v1, kind: Node, metadata: {name: n2, labels: {kubernetes.io/hostname: n2}}, status: {allocatable: {cpu: '2', memory: 4Gi, pods: '110'}}}\n\
- {apiVersion: v1, kind: Pod, metadata: {name: a, namespace: default}, spec: {nodeName: n2, containers: [{name: c, image: x, resources: {requests: {cpu: '1'}}}]}}\n\
- {apiVersion: v1, kind: Pod, metadata: {name: b, namespace: default}, spec: {nodeName: n2, containers: [{name: c, image: x, resources: {requests: {cpu: '1'}}}]}}\n\
- {apiVersion: scheduling.k8s.io/v1beta1, kind: PodGroup, metadata: {name: g, namespace: default}, spec: {schedulingPolicy: {basic: {}}, priorityClassName: high}}\n\
- {apiVersion: v1, kind: Pod, metadata: {name: p0, namespace: default}, spec: {priorityClassName: high, schedulingGroup: {podGroupName: g}, containers: [{name: c, image: x, resources: {requests: {cpu: '2'}}}]}}\n\
- {apiVersion: v1, kind: Pod, metadata: {name: p1, namespace: default}, spec: {priorityClassName: high, schedulingGroup: {podGroupName: g}, containers: [{name: c, image: x, resources: {requests: {cpu: '2'}}}]}}\n";
    let c = build(&parse_documents("t.yaml", t).unwrap(), &mut |_| Ok(false)).unwrap();
    let r = simulate(&c, true);
    let placed: Vec<Option<&str>> = r.placements.iter().map(|p| p.node.as_deref()).collect();
    assert_eq!(placed, [Some("n1"), Some("n2")]);
    assert_eq!(r.preemptions.len(), 1);
    assert_eq!(r.preemptions[0].victims, ["default/a", "default/b"]);
}

/// A running pod for [`select_victims_on_domain`]: name, node, priority,
/// CPU ("size" in upstream's table), group, start second, labels.
type Running<'a> = (&'a str, &'a str, i32, u32, Option<&'a str>, u32, &'a str);

/// Upstream's `TestPodGroupEvaluator_SelectVictimsOnDomain` cases that do
/// not depend on its mock placement function, run through the whole
/// simulator: a node's "capacity" is its CPU and a pod's "size" its CPU
/// request; the preemptor is a gang of one 1-CPU member per name. Low,
/// middle and high priority are 0, 100 and 1000.
#[test]
fn select_victims_on_domain() {
    struct Case<'a> {
        name: &'a str,
        nodes: &'a [(&'a str, u32)],
        pods: &'a [Running<'a>],
        /// (name, priority, disruption mode all)
        groups: &'a [(&'a str, i32, bool)],
        /// A PDB with `disruptionsAllowed: 0` over `app: foo`.
        pdb: bool,
        preemptor_priority: i32,
        /// The victims; `None`: upstream's UnschedulableAndUnresolvable
        /// (no victims), the member stays pending.
        want: Option<&'a [&'a str]>,
    }
    let cases = [
        Case {
            name: "Priority: mix of no groups and pod groups",
            nodes: &[("node1", 2)],
            pods: &[
                ("p1", "node1", 0, 1, None, 0, ""),
                ("p2", "node1", 0, 1, Some("pg1"), 0, ""),
            ],
            groups: &[("pg1", 0, false)],
            pdb: false,
            preemptor_priority: 1000,
            want: Some(&["p1"]),
        },
        Case {
            name: "Priority: StartTime of pods from same group with disruption mode single",
            nodes: &[("node1", 2)],
            pods: &[
                ("p1", "node1", 0, 1, Some("pg1"), 1, ""),
                ("p2", "node1", 0, 1, Some("pg1"), 0, ""),
            ],
            groups: &[("pg1", 0, false)],
            pdb: false,
            preemptor_priority: 1000,
            want: Some(&["p1"]),
        },
        Case {
            name: "Pod group with disruption mode group not reprieved",
            nodes: &[("node1", 1), ("node2", 1)],
            pods: &[
                ("p1", "node1", 0, 1, Some("pg1"), 0, ""),
                ("p2", "node2", 0, 1, Some("pg1"), 0, ""),
            ],
            groups: &[("pg1", 0, true)],
            pdb: false,
            preemptor_priority: 1000,
            want: Some(&["p1", "p2"]),
        },
        Case {
            name: "PDB: Mixed groups",
            nodes: &[("node1", 2)],
            pods: &[
                ("victim-pdb", "node1", 0, 1, Some("pg1"), 0, "foo"),
                ("victim-no-pdb", "node1", 0, 1, Some("pg1"), 0, ""),
            ],
            groups: &[],
            pdb: true,
            preemptor_priority: 1000,
            want: Some(&["victim-no-pdb"]),
        },
        Case {
            name: "PodGroup: Prefer single pod over podGroup for preemption candidate",
            nodes: &[("node1", 3)],
            pods: &[
                ("p1", "node1", 0, 1, None, 0, ""),
                ("g1-1", "node1", 0, 1, Some("pg1"), 0, ""),
                ("g1-2", "node1", 0, 1, Some("pg1"), 0, ""),
            ],
            groups: &[("pg1", 0, true)],
            pdb: false,
            preemptor_priority: 1000,
            want: Some(&["p1"]),
        },
        Case {
            name: "PodGroup: Preempt group as a whole on single node",
            nodes: &[("node1", 3)],
            pods: &[
                ("g1-1", "node1", 0, 1, Some("pg1"), 0, ""),
                ("g1-2", "node1", 0, 1, Some("pg1"), 0, ""),
                ("p1", "node1", 100, 1, None, 0, ""),
            ],
            groups: &[("pg1", 0, true)],
            pdb: false,
            preemptor_priority: 1000,
            want: Some(&["g1-1", "g1-2"]),
        },
        Case {
            name: "PDB: Unit violation if any member violates",
            nodes: &[("node1", 3)],
            pods: &[
                ("g1-1", "node1", 0, 1, Some("pg1"), 0, "foo"),
                ("g1-2", "node1", 0, 1, Some("pg1"), 0, ""),
                ("p1", "node1", 0, 1, None, 0, ""),
            ],
            groups: &[("pg1", 0, true)],
            pdb: true,
            preemptor_priority: 1000,
            want: Some(&["p1"]),
        },
        Case {
            name: "Failure: Cannot preempt the victim with higher priority",
            nodes: &[("node1", 1)],
            pods: &[("p1", "node1", 1000, 1, None, 0, "")],
            groups: &[],
            pdb: false,
            preemptor_priority: 100,
            want: None,
        },
        Case {
            name: "Failure: Cannot preempt the victim with equal priority",
            nodes: &[("node1", 1)],
            pods: &[("p1", "node1", 100, 1, None, 0, "")],
            groups: &[],
            pdb: false,
            preemptor_priority: 100,
            want: None,
        },
        Case {
            name: "Priority divergence: candidate victim PodGroup has lower priority than the Pods from that group",
            nodes: &[("node1", 1), ("node2", 1)],
            pods: &[
                ("p1", "node1", 1000, 1, Some("pg1"), 0, ""),
                ("p2", "node2", 1000, 1, Some("pg1"), 0, ""),
            ],
            groups: &[("pg1", 100, true)],
            pdb: false,
            preemptor_priority: 1000,
            want: Some(&["p1", "p2"]),
        },
        Case {
            name: "Priority divergence: candidate victim PodGroup has higher priority than the Pods from that group",
            nodes: &[("node1", 1), ("node2", 1)],
            pods: &[
                ("p1", "node1", 0, 1, Some("pg1"), 0, ""),
                ("p2", "node2", 0, 1, Some("pg1"), 0, ""),
            ],
            groups: &[("pg1", 100, true)],
            pdb: false,
            preemptor_priority: 100,
            want: None,
        },
    ];
    for c in cases {
        let mut t = String::from("apiVersion: v1\nkind: List\nitems:\n");
        for (n, cpu) in c.nodes {
            t.push_str(&format!("- {{apiVersion: v1, kind: Node, metadata: {{name: {n}, labels: {{kubernetes.io/hostname: {n}}}}}, status: {{allocatable: {{cpu: '{cpu}', memory: 4Gi, pods: '110'}}}}}}\n"));
        }
        for (g, priority, all) in c.groups {
            let mode = if *all { "all" } else { "single" };
            t.push_str(&format!("- {{apiVersion: scheduling.k8s.io/v1beta1, kind: PodGroup, metadata: {{name: {g}, namespace: default}}, spec: {{schedulingPolicy: {{basic: {{}}}}, priority: {priority}, disruptionMode: {{{mode}: {{}}}}}}}}\n"));
        }
        for (name, node, priority, cpu, group, start, app) in c.pods {
            let group = group.map_or(String::new(), |g| {
                format!("schedulingGroup: {{podGroupName: {g}}}, ")
            });
            let labels = if app.is_empty() {
                String::new()
            } else {
                format!(", labels: {{app: {app}}}")
            };
            t.push_str(&format!("- {{apiVersion: v1, kind: Pod, metadata: {{name: {name}, namespace: default{labels}}}, spec: {{nodeName: {node}, priority: {priority}, {group}containers: [{{name: c, image: x, resources: {{requests: {{cpu: '{cpu}'}}}}}}]}}, status: {{startTime: '2026-01-01T00:00:{start:02}Z'}}}}\n"));
        }
        if c.pdb {
            t.push_str("- {apiVersion: policy/v1, kind: PodDisruptionBudget, metadata: {name: foo, namespace: default}, spec: {selector: {matchLabels: {app: foo}}}, status: {disruptionsAllowed: 0, currentHealthy: 1, desiredHealthy: 1, expectedPods: 1}}\n");
        }
        let p = c.preemptor_priority;
        t.push_str(&format!("- {{apiVersion: scheduling.k8s.io/v1beta1, kind: PodGroup, metadata: {{name: preemptor-pg, namespace: default}}, spec: {{schedulingPolicy: {{gang: {{minCount: 1}}}}, priority: {p}}}}}\n"));
        t.push_str(&format!("- {{apiVersion: v1, kind: Pod, metadata: {{name: p, namespace: default}}, spec: {{priority: {p}, schedulingGroup: {{podGroupName: preemptor-pg}}, containers: [{{name: c, image: x, resources: {{requests: {{cpu: '1'}}}}}}]}}}}\n"));
        let cluster = build(&parse_documents("t.yaml", &t).unwrap(), &mut |_| Ok(false))
            .unwrap_or_else(|e| panic!("{}: {e}", c.name));
        let r = simulate(&cluster, true);
        match c.want {
            Some(want) => {
                let mut got: Vec<String> = r
                    .preemptions
                    .iter()
                    .flat_map(|p| {
                        p.victims
                            .iter()
                            .map(|v| v.trim_start_matches("default/").to_string())
                    })
                    .collect();
                got.sort();
                let mut want: Vec<&str> = want.to_vec();
                want.sort();
                assert_eq!(got, want, "{}", c.name);
                assert!(r.placements[0].node.is_some(), "{}", c.name);
            }
            None => {
                assert!(r.preemptions.is_empty(), "{}", c.name);
                assert!(r.placements[0].node.is_none(), "{}", c.name);
            }
        }
    }
}

/// A member nominated to a node where a pod of lower priority is still
/// terminating by preemption: upstream's PodGroupPostFilter answers
/// "ongoing preemption on nominated nodes" and evicts nothing more (the
/// oracle gives p1's and p2's messages and keeps p0 waiting, nominated).
#[test]
fn a_preemption_under_way_is_waited_for() {
    let mut c = cluster("", "", "1500m");
    for p in &mut c.pods {
        match p.name.as_str() {
            "low1" => p.terminating_by_preemption = true,
            "p0" => p.nominated_node_name = "n1".into(),
            _ => {}
        }
    }
    let r = simulate(&c, true);
    assert!(r.preemptions.is_empty());
    assert_eq!(
        outcome(&r)[0],
        (
            "default/p0".to_string(),
            String::new(),
            format!(
                "{FITS_THEN_FAILS}, pod group preemption: ongoing preemption on nominated nodes"
            )
        )
    );
}
