//! Gang scheduling in the simulator (`--feature-gates GenericWorkload=true`),
//! on a case whose outcome upstream's own loop gave (the oracle's `simulate
//! --placements`, same messages): a gang of three that only two nodes'
//! worth of CPU can hold fails as a whole, and a gang of two that fits is
//! placed. With the gate off, the same pods are scheduled one by one.

use rkube_model::load::{build, parse_documents};

fn cluster(extra: &str) -> rkube_model::Cluster {
    let mut text = String::from("apiVersion: v1\nkind: List\nitems:\n");
    for n in 1..=2 {
        text.push_str(&format!("- {{apiVersion: v1, kind: Node, metadata: {{name: n{n}}}, status: {{allocatable: {{cpu: '2', memory: 4Gi, pods: '110'}}}}}}\n"));
    }
    for (g, min) in [("g1", 3), ("g2", 2)] {
        text.push_str(&format!("- {{apiVersion: scheduling.k8s.io/v1beta1, kind: PodGroup, metadata: {{name: {g}, namespace: default}}, spec: {{schedulingPolicy: {{gang: {{minCount: {min}}}}}}}}}\n"));
    }
    for (name, group, cpu) in [
        ("a1", "g1", "1500m"),
        ("a2", "g1", "1500m"),
        ("a3", "g1", "1500m"),
        ("b1", "g2", "1"),
        ("b2", "g2", "1"),
    ] {
        text.push_str(&format!("- {{apiVersion: v1, kind: Pod, metadata: {{name: {name}, namespace: default}}, spec: {{schedulingGroup: {{podGroupName: {group}}}, containers: [{{name: c, image: x, resources: {{requests: {{cpu: '{cpu}'}}}}}}]}}}}\n"));
    }
    text.push_str(extra);
    build(&parse_documents("t.yaml", &text).unwrap(), &mut |_| {
        Ok(false)
    })
    .unwrap()
}

fn placements(
    c: &rkube_model::Cluster,
    generic_workload: bool,
) -> Result<Vec<(String, String, String)>, rkube_sim::SimError> {
    let cfg = rkube_config::default_config_gated(generic_workload);
    let r = rkube_sim::simulate(c, &cfg, &rkube_sim::SimulateOptions::default())?;
    Ok(r.placements
        .into_iter()
        .map(|p| (p.pod, p.node.unwrap_or_default(), p.message))
        .collect())
}

const GROUP_FAILED: &str = "pod group is unschedulable, minCount (3) cannot be satisfied: 2 scheduled, 0 remaining, pod group preemption: No preemption victims found for incoming preemptor";

#[test]
fn a_gang_is_placed_all_or_nothing_as_upstreams_loop_places_it() {
    let got = placements(&cluster(""), true).unwrap();
    let want = [
        ("default/a1", "", GROUP_FAILED),
        ("default/a2", "", GROUP_FAILED),
        (
            "default/a3",
            "",
            "0/2 nodes are available: 2 Insufficient cpu.",
        ),
        ("default/b1", "n1", ""),
        ("default/b2", "n2", ""),
    ];
    let got: Vec<(&str, &str, &str)> = got
        .iter()
        .map(|(a, b, c)| (a.as_str(), b.as_str(), c.as_str()))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn without_the_gate_members_are_scheduled_one_by_one() {
    let got = placements(&cluster(""), false).unwrap();
    let placed: Vec<&str> = got
        .iter()
        .filter(|p| !p.1.is_empty())
        .map(|p| p.0.as_str())
        .collect();
    assert_eq!(placed, ["default/a1", "default/a2"]);
}

#[test]
fn a_gang_short_of_members_waits_and_an_orphan_waits_for_its_group() {
    let extra = "- {apiVersion: scheduling.k8s.io/v1beta1, kind: PodGroup, metadata: {name: big, namespace: default}, spec: {schedulingPolicy: {gang: {minCount: 4}}}}\n\
- {apiVersion: v1, kind: Pod, metadata: {name: c1, namespace: default}, spec: {schedulingGroup: {podGroupName: big}, containers: [{name: c, image: x}]}}\n\
- {apiVersion: v1, kind: Pod, metadata: {name: o1, namespace: default}, spec: {schedulingGroup: {podGroupName: nowhere}, containers: [{name: c, image: x}]}}\n";
    let got = placements(&cluster(extra), true).unwrap();
    let of = |pod: &str| got.iter().find(|p| p.0 == pod).cloned().unwrap();
    assert_eq!(
        of("default/c1").2,
        "waiting for minCount pods from a gang to appear in scheduling queue"
    );
    assert_eq!(
        of("default/o1").2,
        "waiting for pods's pod group \"nowhere\" to appear in scheduling queue"
    );
}

#[test]
fn members_must_share_the_groups_priority() {
    let extra = "- {apiVersion: scheduling.k8s.io/v1beta1, kind: PodGroup, metadata: {name: mixed, namespace: default}, spec: {schedulingPolicy: {basic: {}}}}\n\
- {apiVersion: v1, kind: Pod, metadata: {name: m1, namespace: default}, spec: {priority: 5, schedulingGroup: {podGroupName: mixed}, containers: [{name: c, image: x}]}}\n";
    let got = placements(&cluster(extra), true).unwrap();
    let m1 = got.iter().find(|p| p.0 == "default/m1").unwrap();
    assert_eq!((m1.1.as_str(), m1.2.as_str()), ("", "all pods in a single pod group should have the same priority as the pod group's priority, got 5 and 0"));
}

#[test]
fn explain_lets_a_gang_member_in_with_the_gate_on() {
    let c = cluster("");
    let profiles = rkube_sim::profiles(&rkube_config::default_config_gated(true)).unwrap();
    let e = rkube_sim::explain_with_profiles(&c, &profiles, "default/b1", 0).unwrap();
    assert!(
        e.message.is_empty() || !e.message.contains("waiting for"),
        "{}",
        e.message
    );
    assert!(e.selected_node.is_some(), "{e:?}");
}

/// (pod, tried, fits on, bound to, message) of a member.
type MemberRow<'a> = (&'a str, bool, Option<&'a str>, Option<&'a str>, &'a str);

fn explain_gated(c: &rkube_model::Cluster, pod: &str) -> rkube_sim::PodExplanation {
    let profiles = rkube_sim::profiles(&rkube_config::default_config_gated(true)).unwrap();
    rkube_sim::explain_with_profiles(c, &profiles, pod, 0).unwrap()
}

#[test]
fn explain_gives_the_gangs_verdict_per_member_and_per_node() {
    let e = explain_gated(&cluster(""), "default/a3");
    // Its own node table is its turn: a1 and a2 are assumed on n1 and n2.
    assert_eq!(e.selected_node, None);
    assert_eq!(e.message, "0/2 nodes are available: 2 Insufficient cpu.");
    assert!(e.nodes.iter().all(|n| !n.feasible), "{e:?}");
    let g = e
        .pod_group
        .expect("a gang member's explanation has its group");
    assert_eq!((g.group.as_str(), g.min_count), ("default/g1", Some(3)));
    assert!(!g.scheduled);
    let members: Vec<MemberRow> = g
        .members
        .iter()
        .map(|m| {
            (
                m.pod.as_str(),
                m.tried,
                m.fits_on.as_deref(),
                m.node.as_deref(),
                m.message.as_str(),
            )
        })
        .collect();
    assert_eq!(
        members,
        [
            ("default/a1", true, Some("n1"), None, GROUP_FAILED),
            ("default/a2", true, Some("n2"), None, GROUP_FAILED),
            (
                "default/a3",
                true,
                None,
                None,
                "0/2 nodes are available: 2 Insufficient cpu."
            ),
        ]
    );
    for (node, placed) in [("n1", "default/a1"), ("n2", "default/a2")] {
        let n = g.nodes.iter().find(|n| n.name == node).unwrap();
        assert_eq!(n.placed, [placed]);
        assert_eq!(n.rejected.len(), 1);
        assert_eq!(
            (n.rejected[0].pod.as_str(), n.rejected[0].plugin.as_str()),
            ("default/a3", "NodeResourcesFit")
        );
        assert_eq!(n.rejected[0].reasons, ["Insufficient cpu"]);
    }
    // One more 2-CPU node holds the third 1.5-CPU member.
    let add = g.fits_with.expect("a copy of n1 makes it fit");
    assert_eq!((add.count, add.like.as_str()), (1, "n1"));
}

#[test]
fn explain_finds_the_fewest_nodes_to_add_or_says_none_do() {
    // Four members of 1.5 CPU: two fit, so two more nodes are needed.
    let extra = "- {apiVersion: scheduling.k8s.io/v1beta1, kind: PodGroup, metadata: {name: four, namespace: default}, spec: {schedulingPolicy: {gang: {minCount: 4}}}}\n\
- {apiVersion: v1, kind: Pod, metadata: {name: f1, namespace: default}, spec: {schedulingGroup: {podGroupName: four}, containers: [{name: c, image: x, resources: {requests: {cpu: 1500m}}}]}}\n\
- {apiVersion: v1, kind: Pod, metadata: {name: f2, namespace: default}, spec: {schedulingGroup: {podGroupName: four}, containers: [{name: c, image: x, resources: {requests: {cpu: 1500m}}}]}}\n\
- {apiVersion: v1, kind: Pod, metadata: {name: f3, namespace: default}, spec: {schedulingGroup: {podGroupName: four}, containers: [{name: c, image: x, resources: {requests: {cpu: 1500m}}}]}}\n\
- {apiVersion: v1, kind: Pod, metadata: {name: f4, namespace: default}, spec: {schedulingGroup: {podGroupName: four}, containers: [{name: c, image: x, resources: {requests: {cpu: 1500m}}}]}}\n\
- {apiVersion: scheduling.k8s.io/v1beta1, kind: PodGroup, metadata: {name: huge, namespace: default}, spec: {schedulingPolicy: {gang: {minCount: 1}}}}\n\
- {apiVersion: v1, kind: Pod, metadata: {name: h1, namespace: default}, spec: {schedulingGroup: {podGroupName: huge}, containers: [{name: c, image: x, resources: {requests: {cpu: '3'}}}]}}\n";
    let c = cluster(extra);
    let g = explain_gated(&c, "default/f2").pod_group.unwrap();
    assert!(!g.scheduled);
    let add = g.fits_with.expect("copies of n1 make it fit");
    assert_eq!((add.count, add.like.as_str()), (2, "n1"));
    // No node is big enough for h1: no number of copies helps.
    let g = explain_gated(&c, "default/h1").pod_group.unwrap();
    assert!(!g.scheduled);
    assert_eq!(g.fits_with, None);
    assert_eq!(
        g.members[0].message,
        "0/2 nodes are available: 2 Insufficient cpu."
    );
}

/// `drain` with the gate on: a gang's bound members count for their group,
/// so the Job's replacement of an evicted member is scheduled (the gang's
/// `minCount` is still met by the members that kept running), and a pending
/// gang is placed in the steady state first, as `simulate` places it.
#[test]
fn drain_reschedules_an_evicted_gang_member() {
    let job = "ownerReferences: [{apiVersion: batch/v1, kind: Job, name: train, uid: j1, controller: true}]";
    let extra = format!("- {{apiVersion: v1, kind: Node, metadata: {{name: n3}}, status: {{allocatable: {{cpu: '2', memory: 4Gi, pods: '110'}}}}}}\n\
- {{apiVersion: scheduling.k8s.io/v1beta1, kind: PodGroup, metadata: {{name: run, namespace: default}}, spec: {{schedulingPolicy: {{gang: {{minCount: 2}}}}}}}}\n\
- {{apiVersion: v1, kind: Pod, metadata: {{name: r1, namespace: default, {job}}}, spec: {{nodeName: n1, schedulingGroup: {{podGroupName: run}}, containers: [{{name: c, image: x, resources: {{requests: {{cpu: '1'}}}}}}]}}}}\n\
- {{apiVersion: v1, kind: Pod, metadata: {{name: r2, namespace: default, {job}}}, spec: {{nodeName: n2, schedulingGroup: {{podGroupName: run}}, containers: [{{name: c, image: x, resources: {{requests: {{cpu: '1'}}}}}}]}}}}\n");
    let c = cluster(&extra);
    let cfg = rkube_config::default_config_gated(true);
    let r = rkube_sim::drain::drain(
        &c,
        &cfg,
        &rkube_sim::drain::DrainOptions {
            nodes: vec!["n1".into()],
            delete: false,
            // The steady state puts b2 (no controller) on n1.
            force: true,
            delete_emptydir_data: false,
            seed: 0,
        },
    )
    .unwrap();
    let r1 = r
        .evicted
        .iter()
        .find(|e| e.pod == "default/r1")
        .unwrap_or_else(|| panic!("r1 is evicted: {r:#?}"));
    assert_eq!(r1.message, "");
    assert!(r1.node.is_some(), "{r1:?}");
    assert_ne!(r1.node.as_deref(), Some("n1"));
}

/// A group that succeeds with members left is tried again at once with
/// them (upstream's `AddAttemptedPodGroupIfNeeded` requeues it straight to
/// the active queue): here `a` needs a pod of its sibling's label on its
/// node, which exists only once `b` is placed by the first cycle.
#[test]
fn members_left_by_a_successful_cycle_are_tried_again_at_once() {
    let extra = "- {apiVersion: scheduling.k8s.io/v1beta1, kind: PodGroup, metadata: {name: duo, namespace: default}, spec: {schedulingPolicy: {gang: {minCount: 1}}}}\n\
- {apiVersion: v1, kind: Pod, metadata: {name: a, namespace: default, creationTimestamp: '2026-01-01T00:00:00Z'}, spec: {schedulingGroup: {podGroupName: duo}, affinity: {podAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{labelSelector: {matchLabels: {app: b}}, topologyKey: kubernetes.io/hostname}]}}, containers: [{name: c, image: x}]}}\n\
- {apiVersion: v1, kind: Pod, metadata: {name: b, namespace: default, creationTimestamp: '2026-01-01T00:00:01Z', labels: {app: b}}, spec: {schedulingGroup: {podGroupName: duo}, containers: [{name: c, image: x}]}}\n";
    let mut text = String::from("apiVersion: v1\nkind: List\nitems:\n");
    for n in 1..=2 {
        text.push_str(&format!("- {{apiVersion: v1, kind: Node, metadata: {{name: n{n}, labels: {{kubernetes.io/hostname: n{n}}}}}, status: {{allocatable: {{cpu: '2', memory: 4Gi, pods: '110'}}}}}}\n"));
    }
    text.push_str(extra);
    let c = build(&parse_documents("t.yaml", &text).unwrap(), &mut |_| {
        Ok(false)
    })
    .unwrap();
    let got = placements(&c, true).unwrap();
    let of = |pod: &str| got.iter().find(|p| p.0 == pod).cloned().unwrap();
    let b = of("default/b");
    assert!(!b.1.is_empty(), "{b:?}");
    assert_eq!(of("default/a").1, b.1, "a joins b on its node: {got:?}");
}
