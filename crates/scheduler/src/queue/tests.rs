//! The queue: order, backoff, the pool's flush, and queueing hints with the
//! default profile's plugins (which events move which rejected pods, how
//! many, and what `scheduler_queue_incoming_pods_total` says about it).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rkube_framework::events::{self, ActionType, ClusterEvent, EventObject, EventResource};
use rkube_model::selector::{Operator, Requirement};
use rkube_model::{Node, NodeAffinity, NodeSelector, NodeSelectorTerm, Pod};

use super::*;
use crate::metrics::Metrics;

fn pod(uid: &str, priority: i32) -> Arc<Pod> {
    Arc::new(Pod {
        uid: uid.into(),
        name: uid.into(),
        namespace: "default".into(),
        scheduler_name: "default-scheduler".into(),
        priority,
        ..Default::default()
    })
}

fn q() -> Queue {
    Queue::new(Duration::from_secs(1), Duration::from_secs(10))
}

/// A queue with the default profile's QueueSort and hints, counting into
/// `metrics`.
fn default_queue(metrics: &Arc<Metrics>) -> Queue {
    let profiles =
        rkube_plugins::profiles(&rkube_config::default_config()).expect("default profiles");
    q().with_profiles(&profiles).with_metrics(metrics.clone())
}

fn node_add(n: Node) -> (ClusterEvent, Option<EventObject>) {
    (events::NODE_ADD, Some(EventObject::Node(Arc::new(n))))
}

fn node(name: &str, milli_cpu: i64) -> Node {
    let mut n = Node {
        name: name.into(),
        ..Default::default()
    };
    n.allocatable.milli_cpu = milli_cpu;
    n.allocatable.memory = 64 << 30;
    n.allocatable.allowed_pod_number = 110;
    n
}

/// Adds, pops and rejects a pod with `rejectors`.
fn reject(q: &mut Queue, p: Arc<Pod>, rejectors: &[&'static str], now: Instant) {
    q.upsert(None, p.clone(), false, now);
    let popped = q.pop(now).expect("active");
    assert_eq!(popped.pod.uid, p.uid);
    q.requeue_unschedulable(p, rejectors.iter().copied().collect(), now);
}

fn count(q: &Queue, place: Place, uids: impl Iterator<Item = String>) -> usize {
    uids.filter(|u| q.place(u) == Some(place)).count()
}

#[test]
fn pops_by_priority_then_time() {
    let now = Instant::now();
    let mut q = q();
    q.upsert(None, pod("a", 0), false, now);
    q.upsert(None, pod("b", 10), false, now);
    q.upsert(None, pod("c", 0), false, now);
    let order: Vec<String> = std::iter::from_fn(|| q.pop(now))
        .map(|p| p.pod.uid.clone())
        .collect();
    assert_eq!(order, ["b", "a", "c"]);
    assert_eq!(q.place("a"), Some(Place::InFlight));
}

#[test]
fn the_profiles_queue_sort_orders_the_heap() {
    let m = Arc::new(Metrics::new());
    let mut q = default_queue(&m);
    let now = Instant::now();
    for i in 0..200 {
        q.upsert(None, pod(&format!("p{i:03}"), (i * 7) % 13), false, now);
    }
    let popped: Vec<(i32, u64)> = std::iter::from_fn(|| q.pop(now))
        .map(|p| (p.pod.priority, p.timestamp))
        .collect();
    assert_eq!(popped.len(), 200);
    for w in popped.windows(2) {
        assert!(
            w[0].0 > w[1].0 || (w[0].0 == w[1].0 && w[0].1 < w[1].1),
            "{w:?}"
        );
    }
    assert_eq!(
        m.incoming_pods_count("active", "UnscheduledPodAdd"),
        200,
        "each new pod counts once"
    );
}

#[test]
fn backoff_doubles_and_caps() {
    let q = q();
    let secs: Vec<u64> = (1..=6).map(|a| q.backoff_duration(a).as_secs()).collect();
    assert_eq!(secs, [1, 2, 4, 8, 10, 10]);
}

#[test]
fn huge_backoffs_do_not_overflow_the_clock() {
    let t0 = Instant::now();
    let mut q = Queue::new(Duration::MAX, Duration::MAX);
    q.upsert(None, pod("a", 0), false, t0);
    let p = q.pop(t0).unwrap();
    // An error: its backoff is waited out, however long.
    q.requeue_backoff(p.pod.clone(), t0);
    assert!(q.pop(t0 + Duration::from_secs(3600)).is_none());
    assert!(q.next_wakeup().unwrap() > t0 + Duration::from_secs(3600 * 24 * 365));
    assert_eq!(q.backoff_duration(200), rkube_util::duration::MAX);
}

#[test]
fn without_hints_every_event_moves_and_backoff_is_respected() {
    let t0 = Instant::now();
    let mut q = q();
    reject(&mut q, pod("a", 0), &["X"], t0);
    assert_eq!(q.place("a"), Some(Place::Unschedulable));
    // Nothing happens by itself before the flush interval.
    assert!(q.pop(t0 + Duration::from_secs(30)).is_none());
    // An event while still backing off: to the backoff queue.
    q.move_pods(
        &events::NODE_ADD,
        None,
        None,
        None,
        t0 + Duration::from_millis(100),
    );
    assert_eq!(q.place("a"), Some(Place::Backoff));
    // Another pod active: it goes first.
    q.upsert(None, pod("b", 0), false, t0 + Duration::from_millis(200));
    let b = q.pop(t0 + Duration::from_millis(500)).unwrap();
    assert_eq!(b.pod.uid, "b");
    q.done("b");
    // Nothing else active: the pod backing off is tried at once.
    let p = q.pop(t0 + Duration::from_millis(500)).unwrap();
    assert_eq!((p.pod.uid.as_str(), p.attempts), ("a", 2));
    // A move during the attempt: straight to backoff, not the pool.
    q.move_pods(
        &events::NODE_ADD,
        None,
        None,
        None,
        t0 + Duration::from_secs(1),
    );
    q.requeue_unschedulable(
        p.pod.clone(),
        BTreeSet::from(["X"]),
        t0 + Duration::from_secs(1),
    );
    assert_eq!(q.place("a"), Some(Place::Backoff));
    assert!(q.pop(t0 + Duration::from_secs(2)).is_some());
}

#[test]
fn flushed_after_five_minutes_and_gates() {
    let m = Arc::new(Metrics::new());
    let t0 = Instant::now();
    let mut q = default_queue(&m);
    reject(&mut q, pod("a", 0), &["NodeResourcesFit"], t0);
    assert_eq!(q.next_wakeup(), Some(t0 + MAX_IN_UNSCHEDULABLE));
    assert!(q.pop(t0 + Duration::from_secs(299)).is_none());
    assert!(q.pop(t0 + MAX_IN_UNSCHEDULABLE).is_some());
    assert_eq!(m.incoming_pods_count("active", "UnschedulableTimeout"), 1);

    let mut gated = (*pod("g", 0)).clone();
    gated.scheduling_gates = vec!["example.com/gate".into()];
    q.upsert(None, Arc::new(gated.clone()), true, t0);
    assert_eq!(q.place("g"), Some(Place::Unschedulable));
    assert_eq!(q.pending().gated, 1);
    assert_eq!(
        m.incoming_pods_count("unschedulable", "UnscheduledPodAdd"),
        1
    );
    q.move_pods(&events::NODE_ADD, None, None, None, t0);
    assert!(q.pop(t0 + Duration::from_secs(600)).is_none());
    // A status-only update keeps it gated; removing the gate lets it in.
    q.upsert(Some(&gated), Arc::new(gated.clone()), true, t0);
    assert_eq!(q.place("g"), Some(Place::Unschedulable));
    q.upsert(Some(&gated), pod("g", 0), false, t0);
    assert_eq!(q.place("g"), Some(Place::Active));
    assert_eq!(
        m.incoming_pods_count("active", "TargetPodUpdatePodSchedulingGatesEliminated"),
        1
    );
}

#[test]
fn updates_of_a_rejected_pod_go_through_its_hints() {
    let m = Arc::new(Metrics::new());
    let t0 = Instant::now();
    let mut q = default_queue(&m);
    let mut big = (*pod("a", 0)).clone();
    big.requests.milli_cpu = 4000;
    reject(&mut q, Arc::new(big.clone()), &["NodeResourcesFit"], t0);
    // A status-only update, then a label change: Fit registered neither.
    q.upsert(Some(&big), Arc::new(big.clone()), false, t0);
    let mut relabelled = big.clone();
    relabelled.labels.insert("k".into(), "v".into());
    q.upsert(Some(&big), Arc::new(relabelled.clone()), false, t0);
    assert_eq!(q.place("a"), Some(Place::Unschedulable));
    // Smaller requests: TargetPod/UpdatePodScaleDown, which Fit queues.
    let mut smaller = relabelled.clone();
    smaller.requests.milli_cpu = 500;
    q.upsert(
        Some(&relabelled),
        Arc::new(smaller),
        false,
        t0 + Duration::from_secs(2),
    );
    assert_eq!(q.place("a"), Some(Place::Active));
    assert_eq!(
        m.incoming_pods_count("active", "TargetPodUpdatePodScaleDown"),
        1
    );
    q.delete("a");
    assert!(q.is_empty());
}

#[test]
fn a_pod_without_rejectors_backs_off_and_every_event_moves_it() {
    let m = Arc::new(Metrics::new());
    let t0 = Instant::now();
    let mut q = default_queue(&m).with_window_start(t0);
    q.upsert(None, pod("e", 0), false, t0);
    let p = q.pop(t0).unwrap();
    q.requeue_backoff(p.pod.clone(), t0);
    assert_eq!(q.place("e"), Some(Place::Backoff));
    assert_eq!(
        m.incoming_pods_count("backoff", "ScheduleAttemptFailure"),
        1
    );
    // Its backoff ends with the second [1 s, 2 s).
    assert!(q.pop(t0 + Duration::from_millis(1999)).is_none());
    let p = q.pop(t0 + Duration::from_secs(2)).unwrap();
    assert_eq!(m.incoming_pods_count("active", "BackoffComplete"), 1);
    // No rejectors after an unschedulable attempt (no node at all): backoff.
    q.requeue_unschedulable(p.pod.clone(), BTreeSet::new(), t0 + Duration::from_secs(1));
    assert_eq!(q.place("e"), Some(Place::Backoff));
}

#[test]
fn events_during_an_attempt_count_when_the_pod_comes_back() {
    let m = Arc::new(Metrics::new());
    let t0 = Instant::now();
    let mut q = default_queue(&m);
    let mut big = (*pod("a", 0)).clone();
    big.requests.milli_cpu = 4000;
    let big = Arc::new(big);
    let fit = BTreeSet::from(["NodeResourcesFit"]);

    // An event that does not help, while in flight: back to the pool.
    q.upsert(None, big.clone(), false, t0);
    let p = q.pop(t0).unwrap();
    let (e, n) = node_add(node("small", 1000));
    q.move_pods(&e, None, n.as_ref(), None, t0);
    q.requeue_unschedulable(p.pod.clone(), fit.clone(), t0);
    assert_eq!(q.place("a"), Some(Place::Unschedulable));
    assert!(q.in_flight_events.is_empty(), "nothing left in flight");

    // A node big enough, added while in flight: to backoff, not the pool.
    let p = q.pop(t0 + MAX_IN_UNSCHEDULABLE).unwrap();
    let t1 = t0 + MAX_IN_UNSCHEDULABLE;
    let (e, n) = node_add(node("big", 8000));
    q.move_pods(&e, None, n.as_ref(), None, t1);
    q.requeue_unschedulable(p.pod.clone(), fit.clone(), t1);
    assert_eq!(q.place("a"), Some(Place::Backoff));

    // An event before the pop does not count for it.
    let p = q.pop(t1 + Duration::from_secs(10)).unwrap();
    assert_eq!(p.attempts, 3);
    q.upsert(None, pod("other", 0), false, t1);
    let other = q.pop(t1 + Duration::from_secs(10)).unwrap();
    let (e, n) = node_add(node("big2", 8000));
    q.move_pods(&e, None, n.as_ref(), None, t1);
    assert_eq!(
        q.inflight_events(),
        [("NodeAdd".to_string(), 1), ("PodPopped".to_string(), 2)]
    );
    // "other" was popped before the event, "a" too: both see it.
    q.requeue_unschedulable(p.pod.clone(), fit.clone(), t1 + Duration::from_secs(10));
    assert_eq!(q.place("a"), Some(Place::Backoff));
    let p = q.pop(t1 + Duration::from_secs(60)).unwrap();
    // Popped after the event: it does not see it.
    q.requeue_unschedulable(p.pod.clone(), fit.clone(), t1 + Duration::from_secs(60));
    assert_eq!(q.place("a"), Some(Place::Unschedulable));
    q.done(&other.pod.uid);
    assert!(q.in_flight.is_empty() && q.in_flight_events.is_empty());
    assert_eq!(q.inflight_events(), [("PodPopped".to_string(), 0)]);
}

/// 5,000 pods asking for 100m..5000m of CPU, all rejected by
/// NodeResourcesFit. Events that help none move none; a new node of 1000m
/// moves exactly the 1,000 pods that fit it.
#[test]
fn five_thousand_rejected_pods_move_only_when_a_node_fits_them() {
    let m = Arc::new(Metrics::new());
    let mut q = default_queue(&m);
    let t0 = Instant::now();
    let uids: Vec<String> = (0..5000).map(|i| format!("p{i:04}")).collect();
    for (i, uid) in uids.iter().enumerate() {
        let mut p = (*pod(uid, 0)).clone();
        p.requests.milli_cpu = (i as i64 % 50 + 1) * 100;
        reject(&mut q, Arc::new(p), &["NodeResourcesFit"], t0);
    }
    assert_eq!(q.pending().unschedulable, 5000);
    assert_eq!(
        m.incoming_pods_count("unschedulable", "ScheduleAttemptFailure"),
        5000
    );
    let after_backoff = t0 + Duration::from_secs(2);

    // A label change on an existing node: Fit did not register it.
    let old = node("n1", 8000);
    let mut relabelled = old.clone();
    relabelled.labels.insert("team".into(), "a".into());
    let label_events = events::node_scheduling_properties_change(&relabelled, &old);
    assert_eq!(label_events.len(), 1);
    let moved = q.move_pods(
        &label_events[0],
        Some(&EventObject::Node(Arc::new(old))),
        Some(&EventObject::Node(Arc::new(relabelled))),
        None,
        after_backoff,
    );
    assert_eq!(moved, 0);
    // A node too small for every pod.
    let (e, n) = node_add(node("tiny", 50));
    assert_eq!(q.move_pods(&e, None, n.as_ref(), None, after_backoff), 0);
    // A node deleted: Fit did not register it.
    let gone = EventObject::Node(Arc::new(node("n1", 8000)));
    assert_eq!(
        q.move_pods(&events::NODE_DELETE, Some(&gone), None, None, after_backoff),
        0
    );
    assert_eq!(count(&q, Place::Unschedulable, uids.iter().cloned()), 5000);
    assert_eq!(m.incoming_pods_count("active", "NodeUpdateNodeLabel"), 0);
    assert_eq!(m.incoming_pods_count("backoff", "NodeAdd"), 0);

    // A node of 1000m: the pods asking for 100m..1000m (10 of every 50).
    let (e, n) = node_add(node("medium", 1000));
    assert_eq!(q.move_pods(&e, None, n.as_ref(), None, after_backoff), 1000);
    let fits = |i: usize| (i % 50 + 1) * 100 <= 1000;
    for (i, uid) in uids.iter().enumerate() {
        let want = if fits(i) {
            Place::Active
        } else {
            Place::Unschedulable
        };
        assert_eq!(q.place(uid), Some(want), "{uid}");
    }
    assert_eq!(q.pending().active, 1000);
    assert_eq!(q.pending().unschedulable, 4000);
    assert_eq!(m.incoming_pods_count("active", "NodeAdd"), 1000);
    assert_eq!(m.incoming_pods_count("backoff", "NodeAdd"), 0);
    let text = m.render(&crate::metrics::Gauges {
        pending: q.pending(),
        ..Default::default()
    });
    assert!(
        text.contains(
            "scheduler_queue_incoming_pods_total{queue=\"active\",event=\"NodeAdd\"} 1000"
        ),
        "{text}"
    );

    // The same node again while the others still back off: to backoff.
    let mut q2 = default_queue(&Arc::new(Metrics::new()));
    let mut p = (*pod("x", 0)).clone();
    p.requests.milli_cpu = 500;
    reject(&mut q2, Arc::new(p), &["NodeResourcesFit"], t0);
    let (e, n) = node_add(node("medium", 1000));
    q2.move_pods(&e, None, n.as_ref(), None, t0 + Duration::from_millis(10));
    assert_eq!(q2.place("x"), Some(Place::Backoff));
}

/// Pods rejected by NodeAffinity: a label only some of them select moves
/// only those.
#[test]
fn a_node_label_moves_only_the_pods_that_select_it() {
    let m = Arc::new(Metrics::new());
    let mut q = default_queue(&m);
    let t0 = Instant::now();
    let zones = ["a", "b", "c", "d", "e"];
    let uids: Vec<String> = (0..5000).map(|i| format!("p{i:04}")).collect();
    for (i, uid) in uids.iter().enumerate() {
        let mut p = (*pod(uid, 0)).clone();
        p.node_affinity = Some(NodeAffinity {
            required: Some(NodeSelector {
                terms: vec![NodeSelectorTerm {
                    match_expressions: vec![Requirement {
                        key: "zone".into(),
                        op: Operator::In,
                        values: vec![zones[i % 5].to_string()],
                    }],
                    ..Default::default()
                }],
            }),
            preferred: Vec::new(),
        });
        reject(&mut q, Arc::new(p), &["NodeAffinity"], t0);
    }
    let old = node("n1", 8000);
    let mut labelled = old.clone();
    labelled.labels.insert("zone".into(), "c".into());
    let event = ClusterEvent::new(EventResource::Node, ActionType::UPDATE_NODE_LABEL);
    let moved = q.move_pods(
        &event,
        Some(&EventObject::Node(Arc::new(old))),
        Some(&EventObject::Node(Arc::new(labelled.clone()))),
        None,
        t0 + Duration::from_secs(5),
    );
    assert_eq!(moved, 1000);
    for (i, uid) in uids.iter().enumerate() {
        let want = if i % 5 == 2 {
            Place::Active
        } else {
            Place::Unschedulable
        };
        assert_eq!(q.place(uid), Some(want), "{uid}");
    }
    assert_eq!(m.incoming_pods_count("active", "NodeUpdateNodeLabel"), 1000);
    // The same label again (an unrelated change on a matching node) moves none.
    let mut again = labelled.clone();
    again.labels.insert("other".into(), "x".into());
    assert_eq!(
        q.move_pods(
            &event,
            Some(&EventObject::Node(Arc::new(labelled))),
            Some(&EventObject::Node(Arc::new(again))),
            None,
            t0 + Duration::from_secs(5),
        ),
        0
    );
    // Allocatable changes are not NodeAffinity's: none.
    let bigger = EventObject::Node(Arc::new(node("n2", 9000)));
    let smaller = EventObject::Node(Arc::new(node("n2", 1000)));
    let alloc = ClusterEvent::new(EventResource::Node, ActionType::UPDATE_NODE_ALLOCATABLE);
    assert_eq!(
        q.move_pods(&alloc, Some(&smaller), Some(&bigger), None, t0),
        0
    );
    assert_eq!(q.pending().unschedulable, 4000);
}

#[test]
fn pre_check_and_gated_pods_are_left_alone() {
    let m = Arc::new(Metrics::new());
    let mut q = default_queue(&m);
    let t0 = Instant::now();
    reject(&mut q, pod("low", 0), &["NodeResourcesFit"], t0);
    reject(&mut q, pod("high", 100), &["NodeResourcesFit"], t0);
    let deleted = {
        let mut p = (*pod("victim", 10)).clone();
        p.node_name = "n1".into();
        EventObject::Pod(Arc::new(p))
    };
    let le10 = |p: &Pod| p.priority <= 10;
    let moved = q.move_pods(
        &events::ASSIGNED_POD_DELETE,
        Some(&deleted),
        None,
        Some(&le10),
        t0 + Duration::from_secs(2),
    );
    assert_eq!(moved, 1);
    assert_eq!(q.place("low"), Some(Place::Active));
    assert_eq!(q.place("high"), Some(Place::Unschedulable));
    assert_eq!(m.incoming_pods_count("active", "AssignedPodDelete"), 1);
}

/// Upstream's SchedulerPopFromBackoffQ: with the active queue empty, a pod
/// backing off after a rejection is popped at once; one backing off after
/// an error is not.
#[test]
fn pops_from_backoff_when_the_active_queue_is_empty() {
    let m = Arc::new(Metrics::new());
    let t0 = Instant::now();
    let mut q = default_queue(&m).with_window_start(t0);
    reject(&mut q, pod("a", 0), &["NodeResourcesFit"], t0);
    let (e, n) = node_add(node("big", 8000));
    let t1 = t0 + Duration::from_millis(100);
    assert_eq!(q.move_pods(&e, None, n.as_ref(), None, t1), 1);
    assert_eq!(q.place("a"), Some(Place::Backoff));
    assert!(q.has_active());
    let p = q.pop(t1).expect("popped from backoff");
    assert_eq!((p.pod.uid.as_str(), p.attempts), ("a", 2));
    assert_eq!(m.incoming_pods_count("active", "PopFromBackoffQ"), 1);

    // An error: the error backoff is waited out.
    q.requeue_backoff(p.pod.clone(), t1);
    assert_eq!(q.place("a"), Some(Place::Backoff));
    assert!(!q.has_active());
    assert!(q.pop(t1).is_none());
    assert_eq!(m.incoming_pods_count("active", "PopFromBackoffQ"), 1);
}

/// A backoff ends with the whole second its end falls in; the pods of
/// one second come out in QueueSort order, not by when they entered.
#[test]
fn backoffs_end_on_whole_seconds_in_queue_sort_order() {
    let m = Arc::new(Metrics::new());
    let t0 = Instant::now();
    let mut q = default_queue(&m).with_window_start(t0);
    // Errors (no rejectors), so nothing is popped early: 1 s of backoff
    // from 0.3 s or 0.8 s ends with the second [1 s, 2 s), and both come
    // out at 2 s.
    let t = |ms: u64| t0 + Duration::from_millis(ms);
    for (uid, prio, at) in [("low", 0, 300), ("high", 100, 800)] {
        q.upsert(None, pod(uid, prio), false, t(at));
        let p = q.pop(t(at)).unwrap();
        q.requeue_backoff(p.pod.clone(), t(at));
    }
    assert_eq!(q.next_wakeup(), Some(t(2000)));
    assert!(q.pop(t(1999)).is_none());
    assert_eq!(q.pop(t(2000)).unwrap().pod.uid, "high");
    assert_eq!(q.pop(t(2000)).unwrap().pod.uid, "low");

    // Rejected pods: the same second, higher priority first.
    let mut q = default_queue(&m).with_window_start(t0);
    for (uid, prio, at) in [("low", 0, 300), ("high", 100, 800)] {
        reject(&mut q, pod(uid, prio), &["NodeResourcesFit"], t(at));
    }
    let (e, n) = node_add(node("big", 8000));
    assert_eq!(q.move_pods(&e, None, n.as_ref(), None, t(900)), 2);
    assert_eq!(q.pop(t(900)).unwrap().pod.uid, "high");
    assert_eq!(q.pop(t(900)).unwrap().pod.uid, "low");
}

fn assigned_delete(name: &str, priority: i32) -> EventObject {
    let mut p = (*pod(name, priority)).clone();
    p.node_name = "n1".into();
    p.requests.milli_cpu = 1000;
    EventObject::Pod(Arc::new(p))
}

/// A queue whose pod `vip`, rejected by NodeResourcesFit, is preempting.
fn preempting_vip() -> (Arc<Metrics>, Instant, Queue) {
    let m = Arc::new(Metrics::new());
    let t0 = Instant::now();
    let mut q = default_queue(&m).with_window_start(t0);
    q.upsert(None, pod("vip", 100), false, t0);
    q.pop(t0).expect("active");
    q.set_running_preemption("vip", true);
    q.requeue_unschedulable(pod("vip", 100), BTreeSet::from(["NodeResourcesFit"]), t0);
    (m, t0, q)
}

/// Upstream's SchedulerAsyncPreemption: while a pod's preemption deletes
/// its victims, an event that would move it parks it gated by
/// DefaultPreemption; only DefaultPreemption's events (an assigned pod's
/// deletion) and wildcard events look at it again, and move it only when
/// its rejectors' hints say so and the preemption is over.
#[test]
fn a_pod_whose_preemption_runs_is_gated_until_it_ends() {
    let (m, t0, mut q) = preempting_vip();
    // Not gated yet: the pool, as any rejected pod (no PreEnqueue there).
    assert_eq!(q.place("vip"), Some(Place::Unschedulable));
    assert_eq!(q.pending().gated, 0);

    // A victim's deletion would move it: the gate parks it instead.
    let t1 = t0 + Duration::from_secs(20);
    let victim = assigned_delete("v1", 0);
    let ev = events::ASSIGNED_POD_DELETE;
    assert_eq!(q.move_pods(&ev, Some(&victim), None, None, t1), 0);
    assert_eq!(q.place("vip"), Some(Place::Unschedulable));
    assert_eq!(q.pending().gated, 1);
    let qp = q.get("vip").unwrap();
    assert_eq!(qp.gate, Some(Gate::Preemption));
    assert!(qp.unschedulable_plugins.contains("DefaultPreemption"));
    assert_eq!(
        m.incoming_pods_count("unschedulable", "AssignedPodDelete"),
        1
    );

    // Over: a node's addition is not one of DefaultPreemption's events,
    // so it does not look at the gated pod even though Fit would queue.
    q.set_running_preemption("vip", false);
    let (e, n) = node_add(node("big", 8000));
    assert_eq!(q.move_pods(&e, None, n.as_ref(), None, t1), 0);
    assert_eq!(q.place("vip"), Some(Place::Unschedulable));
    // The next victim's deletion does, and Fit's hint lets it go.
    assert_eq!(q.move_pods(&ev, Some(&victim), None, None, t1), 1);
    assert_eq!(q.place("vip"), Some(Place::Active));
    assert_eq!(q.get("vip").unwrap().gate, None);
    assert_eq!(q.pending().gated, 0);
}

/// A gated pod's own status update does not let it in (its events go
/// through the hints as any rejected pod's), the 5-minute flush re-checks
/// it, and Activate after a failed preemption moves it straight to the
/// active queue.
#[test]
fn a_preemption_gate_is_rechecked_by_the_flush_and_activate() {
    let (m, t0, mut q) = preempting_vip();
    let t1 = t0 + Duration::from_secs(20);
    q.move_pods(
        &events::ASSIGNED_POD_DELETE,
        Some(&assigned_delete("v1", 0)),
        None,
        None,
        t1,
    );
    assert_eq!(q.get("vip").unwrap().gate, Some(Gate::Preemption));
    q.set_running_preemption("vip", false);
    let old = pod("vip", 100);
    let mut status_only = (*old).clone();
    status_only.nominated_node_name = "n1".into();
    q.upsert(Some(&old), Arc::new(status_only), false, t1);
    assert_eq!(q.place("vip"), Some(Place::Unschedulable));

    // Still running at the flush: parked gated again.
    q.set_running_preemption("vip", true);
    q.flush(t0 + MAX_IN_UNSCHEDULABLE + Duration::from_secs(1));
    assert_eq!(q.get("vip").unwrap().gate, Some(Gate::Preemption));
    // Activate while it runs: gated; once over: active at once.
    let gated_in = m.incoming_pods_count("unschedulable", "ForceActivate");
    assert!(!q.force_activate("vip"));
    assert_eq!(q.get("vip").unwrap().gate, Some(Gate::Preemption));
    assert_eq!(
        m.incoming_pods_count("unschedulable", "ForceActivate"),
        gated_in,
        "gated where it was"
    );
    q.set_running_preemption("vip", false);
    assert!(q.force_activate("vip"));
    assert_eq!(q.place("vip"), Some(Place::Active));
    assert_eq!(m.incoming_pods_count("active", "ForceActivate"), 1);
}

/// GenericWorkload: the member popped first takes the other members of its
/// group from the active queue, the backoff queue and the pool (not gated
/// ones), in queue order, marked in flight; other groups' pods stay.
#[test]
fn a_popped_member_takes_its_queued_group_along() {
    let now = Instant::now();
    let mut q = q();
    let member = |uid: &str, group: &str| {
        let mut p = (*pod(uid, 0)).clone();
        p.pod_group = Some(group.into());
        Arc::new(p)
    };
    // m2 was rejected (unschedulable pool), m1 and m3 are active, m4 gated,
    // o1 belongs to another group.
    reject(&mut q, member("m2", "g"), &["NodeResourcesFit"], now);
    q.upsert(None, member("m1", "g"), false, now);
    q.upsert(None, member("m3", "g"), false, now);
    q.upsert(None, member("m4", "g"), true, now);
    q.upsert(None, member("o1", "other"), false, now);
    let first = q.pop(now).expect("active");
    assert_eq!(first.pod.uid, "m1");
    let taken: Vec<String> = q
        .take_group_members(&first.pod)
        .iter()
        .map(|qp| qp.pod.uid.clone())
        .collect();
    // m2 entered the queue first.
    assert_eq!(taken, ["m2", "m3"]);
    for uid in ["m1", "m2", "m3"] {
        assert_eq!(q.place(uid), Some(Place::InFlight), "{uid}");
    }
    assert_eq!(q.place("m4"), Some(Place::Unschedulable));
    assert_eq!(q.place("o1"), Some(Place::Active));
    // A pod of no group takes nothing.
    let lone = q.pop(now).expect("o1");
    assert!(q.take_group_members(&pod("x", 0)).is_empty());
    assert_eq!(lone.pod.uid, "o1");
}

/// A member left by a pod-group cycle that succeeded goes back to the
/// active queue at once, ahead of pods that came after it.
#[test]
fn a_group_leftover_is_active_again_with_its_queue_time() {
    let now = Instant::now();
    let mut q = q();
    reject(&mut q, pod("left", 0), &["InterPodAffinity"], now);
    q.upsert(None, pod("later", 0), false, now);
    assert_eq!(q.place("left"), Some(Place::Unschedulable));
    assert!(q.requeue_group_leftover("left"));
    assert_eq!(q.place("left"), Some(Place::Active));
    assert_eq!(q.pop(now).expect("active").pod.uid, "left");
    assert!(!q.requeue_group_leftover("nobody"));
}
