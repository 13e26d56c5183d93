//! Upstream's GangScheduling tests (`gangscheduling_test.go`), the cases
//! without CompositePodGroup hierarchies (an alpha gate rkube does not
//! implement), under their upstream names.

use std::sync::Arc;
use std::time::Duration;

use rkube_framework::{
    Code, CycleState, EnqueueContext, EventObject, GangPermit, HintContext, PlacementProgress,
    PodGroupStates, QueueingHint, WaitingPod, WaitingPods,
};
use rkube_framework::{PermitPlugin, PlacementFeasiblePlugin, PreEnqueuePlugin};
use rkube_model::pod_groups::{PodGroup, PodGroups};
use rkube_model::Pod;
use rkube_plugins::gang_scheduling::{self, GangScheduling, PERMIT_TIMEOUT};

fn pod(name: &str, ns: &str, group: Option<&str>) -> Pod {
    Pod {
        namespace: ns.into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        pod_group: group.map(str::to_string),
        ..Default::default()
    }
}

fn group(name: &str, ns: &str, min_count: Option<i32>) -> PodGroup {
    PodGroup {
        namespace: ns.into(),
        name: name.into(),
        min_count,
        priority: 0,
        initially_scheduled: false,
        disruption_all: false,
    }
}

fn obj_pod(p: Pod) -> EventObject {
    EventObject::Pod(Arc::new(p))
}

fn obj_group(g: PodGroup) -> EventObject {
    EventObject::PodGroup(Arc::new(g))
}

#[test]
fn test_is_schedulable_after_pod_added() {
    let target = pod("p", "ns1", Some("pg1"));
    let cases = [
        (
            "add a newPod which matches the pod's scheduling group",
            pod("q", "ns1", Some("pg1")),
            QueueingHint::Queue,
        ),
        (
            "add a newPod with NodeName set which matches the pod's scheduling group",
            Pod {
                node_name: "n1".into(),
                ..pod("q", "ns1", Some("pg1"))
            },
            QueueingHint::Queue,
        ),
        (
            "add a newPod which doesn't match the pod's namespace",
            pod("q", "ns2", Some("pg1")),
            QueueingHint::QueueSkip,
        ),
        (
            "add a newPod which doesn't match the pod's pod group name",
            pod("q", "ns1", Some("pg2")),
            QueueingHint::QueueSkip,
        ),
    ];
    for (name, added, want) in cases {
        let got = gang_scheduling::is_schedulable_after_pod_added(
            &target,
            None,
            Some(&obj_pod(added)),
            &HintContext::empty(),
        );
        assert_eq!(got, Ok(want), "{name}");
    }
}

#[test]
fn test_is_schedulable_after_pod_group_added() {
    let target = pod("p", "ns1", Some("pg1"));
    let cases = [
        (
            "add a pod group which matches the pod's pod group name",
            group("pg1", "ns1", Some(2)),
            QueueingHint::Queue,
        ),
        (
            "add a pod group which doesn't match the pod's scheduling group name",
            group("pg2", "ns1", Some(2)),
            QueueingHint::QueueSkip,
        ),
        (
            "add a pod group which doesn't match the pod's scheduling group namespace",
            group("pg1", "ns2", Some(2)),
            QueueingHint::QueueSkip,
        ),
    ];
    for (name, added, want) in cases {
        let got = gang_scheduling::is_schedulable_after_pod_group_added(
            &target,
            None,
            Some(&obj_group(added)),
            &HintContext::empty(),
        );
        assert_eq!(got, Ok(want), "{name}");
    }
}

#[test]
fn test_is_schedulable_after_pod_group_updated() {
    let target = pod("p", "ns1", Some("pg1"));
    let cases = [
        (
            "minCount decreased matches target pod",
            &target,
            group("pg1", "ns1", Some(3)),
            group("pg1", "ns1", Some(2)),
            QueueingHint::Queue,
        ),
        (
            "update Basic policy",
            &target,
            group("pg1", "ns1", None),
            group("pg1", "ns1", None),
            QueueingHint::QueueSkip,
        ),
        (
            "minCount increased matches target pod",
            &target,
            group("pg1", "ns1", Some(2)),
            group("pg1", "ns1", Some(3)),
            QueueingHint::QueueSkip,
        ),
        (
            "minCount unchanged matches target pod",
            &target,
            group("pg1", "ns1", Some(2)),
            group("pg1", "ns1", Some(2)),
            QueueingHint::QueueSkip,
        ),
        (
            "minCount decreased but pod group name doesn't match target pod",
            &target,
            group("pg2", "ns1", Some(3)),
            group("pg2", "ns1", Some(2)),
            QueueingHint::QueueSkip,
        ),
        (
            "minCount decreased but pod group namespace doesn't match target pod",
            &target,
            group("pg1", "ns2", Some(3)),
            group("pg1", "ns2", Some(2)),
            QueueingHint::QueueSkip,
        ),
    ];
    for (name, p, old, new, want) in cases {
        let got = gang_scheduling::is_schedulable_after_pod_group_updated(
            p,
            Some(&obj_group(old)),
            Some(&obj_group(new)),
            &HintContext::empty(),
        );
        assert_eq!(got, Ok(want), "{name}");
    }
    let lone = pod("p", "ns1", None);
    let got = gang_scheduling::is_schedulable_after_pod_group_updated(
        &lone,
        Some(&obj_group(group("pg1", "ns1", Some(3)))),
        Some(&obj_group(group("pg1", "ns1", Some(2)))),
        &HintContext::empty(),
    );
    assert_eq!(
        got,
        Ok(QueueingHint::QueueSkip),
        "pod without a scheduling group is skipped"
    );
}

/// The PreEnqueue and Permit table (`TestGangSchedulingFlow`'s cases
/// without hierarchies): a pod group of minCount 3 and its members.
#[test]
fn test_gang_scheduling_flow() {
    let mut groups = PodGroups::default();
    for g in [group("gang", "ns1", Some(3)), group("basic", "ns1", None)] {
        groups
            .by_key
            .insert((g.namespace.clone(), g.name.clone()), Arc::new(g));
    }
    let (p1, p2, p3) = (
        pod("p1", "ns1", Some("gang")),
        pod("p2", "ns1", Some("gang")),
        pod("p3", "ns1", Some("gang")),
    );
    let pl = GangScheduling;
    let pre_enqueue = |pods: &[&Pod], p: &Pod| {
        let states = PodGroupStates::new(&groups, pods.iter().copied());
        pl.pre_enqueue(
            p,
            &EnqueueContext {
                dra: None,
                pod_groups: Some(&states),
            },
        )
    };
    // non-gang pod succeeds immediately
    let lone = pod("x", "ns1", None);
    assert!(pre_enqueue(&[&lone], &lone).is_success());
    // basic policy pod succeeds immediately
    let b = pod("b", "ns1", Some("basic"));
    assert!(pre_enqueue(&[&b], &b).is_success());
    // gang pod fails PreEnqueue when pod group is not yet created
    let orphan = pod("o", "ns1", Some("missing"));
    let s = pre_enqueue(&[&orphan], &orphan);
    assert_eq!(
        (s.code, s.message()),
        (
            Code::UnschedulableAndUnresolvable,
            "waiting for pods's pod group \"missing\" to appear in scheduling queue".to_string()
        )
    );
    // gang pod fails PreEnqueue when quorum is not met
    let s = pre_enqueue(&[&p1, &p2], &p1);
    assert_eq!(
        (s.code, s.message()),
        (
            Code::UnschedulableAndUnresolvable,
            "waiting for minCount pods from a gang to appear in scheduling queue".to_string()
        )
    );
    // gang pod passes PreEnqueue, but waits at Permit
    assert!(pre_enqueue(&[&p1, &p2, &p3], &p1).is_success());
    let g = groups.get("ns1", "gang").unwrap().clone();
    let waiting = WaitingPods::new();
    let permit = |p: &Pod, scheduled: usize, assumed: &[&Pod]| {
        let mut state = CycleState::new();
        state.write(
            GangPermit::KEY,
            GangPermit {
                group: g.clone(),
                scheduled,
                assumed: assumed.iter().map(|p| p.uid.clone()).collect(),
                waiting: waiting.clone(),
            },
        );
        pl.permit(&mut state, p, "n1")
    };
    for (p, n, assumed) in [(&p1, 1, vec![&p1]), (&p2, 2, vec![&p1, &p2])] {
        let (s, timeout) = permit(p, n, &assumed);
        assert_eq!(
            (s.code, s.message(), timeout),
            (
                Code::Wait,
                "waiting for minCount pods from a gang to be scheduled".to_string(),
                PERMIT_TIMEOUT
            )
        );
        waiting.add(WaitingPod::new(
            p,
            "n1",
            &[(gang_scheduling::NAME, timeout)],
        ));
    }
    // final gang pod arrives at Permit and allows all waiting pods from a gang
    let (s, timeout) = permit(&p3, 3, &[&p1, &p2, &p3]);
    assert_eq!((s.code, timeout), (Code::Success, Duration::ZERO));
    for p in [&p1, &p2] {
        assert!(
            waiting.wait_on_permit(&p.uid).is_success(),
            "{} allowed",
            p.name
        );
    }
}

#[test]
fn test_placement_feasible() {
    let pl = GangScheduling;
    let g = group("gang", "ns1", Some(3));
    let cases = [
        (
            0,
            2,
            Code::Unschedulable,
            "minCount (3) cannot be satisfied: 0 scheduled, 2 remaining",
        ),
        (
            1,
            2,
            Code::Wait,
            "minCount (3) is not yet satisfied: 1 scheduled, 2 remaining",
        ),
        (3, 0, Code::Success, ""),
        (4, 1, Code::Success, ""),
    ];
    for (scheduled, remaining, code, msg) in cases {
        let s = pl.placement_feasible(
            &g,
            PlacementProgress {
                remaining,
                scheduled,
            },
        );
        assert_eq!(
            (s.code, s.message().as_str()),
            (code, msg),
            "{scheduled} scheduled, {remaining} remaining"
        );
    }
    // The basic policy needs one pod.
    let basic = group("basic", "ns1", None);
    let s = pl.placement_feasible(
        &basic,
        PlacementProgress {
            remaining: 0,
            scheduled: 0,
        },
    );
    assert_eq!(
        s.message(),
        "minCount (1) cannot be satisfied: 0 scheduled, 0 remaining"
    );
}
