//! Network partitions between rkube and a genuine API server, made in
//! network namespaces by the test itself (`common::netns`: iptables DROP
//! inside the namespace, so packets vanish and TCP retransmits, as on a
//! real network; loopback only).
//!
//! - **Split brain.** Two `rkube scheduler` replicas with leader election,
//!   each in its own namespace; pods arrive all the time. The leader is cut
//!   off from the API server for longer than the lease, then the cut heals.
//!   The old leader must stop binding before the standby can start (its
//!   renew deadline is shorter than the lease): checked from the API
//!   server's audit log, where every successful binding must lie inside its
//!   client's tenure as the Lease's writer, by the server's own clock. No
//!   pod may be lost or bound twice.
//!
//! - **A lossy, slow link.** One replica in a namespace whose packets to
//!   and from the API server are dropped at random (iptables `statistic`,
//!   5 %) and delayed (a relay adding 20 ms each way: this kernel has no
//!   `tc netem`), during a run of `RKUBE_LOSSY_PODS` pods (5,000 when
//!   unset) on 100 nodes: every pod bound once, the leader never lost.
//!
//! Rounds: `RKUBE_RESTART_ROUNDS` (hack/test 2, `--full` 10). Needs root
//! and hack/build-k8s; hack/test runs these one at a time.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rkube_testcp::ControlPlane;

mod common;
use common::audit;
use common::live::*;
use common::netns::{Lan, Space};
use common::relay::Relay;

/// 6 s lease, 4 s renew deadline, 0.5 s retry: short, yet with room for a
/// renewal delayed by a loaded 2-core machine (with the leader tests'
/// 4 s/3 s a replica that was never cut off exited once in CI, most likely
/// a renewal missed under load; its log was not kept then, it is now).
const SHORT_LEASE: [&str; 3] = [
    "--leader-elect-lease-duration=6s",
    "--leader-elect-renew-deadline=4s",
    "--leader-elect-retry-period=500ms",
];

/// Pods created right before each cut.
const BURST: usize = 60;

/// Sets its flag when dropped, by the end of a scope or by a panic.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// How long a partition lasts: longer than the lease.
const PARTITION: Duration = Duration::from_secs(10);

fn rounds() -> usize {
    common::env_count("RKUBE_RESTART_ROUNDS", 10)
}

/// Waits until one of `replicas` leads (by its metrics) and returns its index.
fn wait_for_leader(replicas: &[(Replica, Space)], timeout: Duration) -> usize {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(i) = replicas.iter().position(|(r, _)| r.is_leader()) {
            return i;
        }
        assert!(Instant::now() < deadline, "no leader within {timeout:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
#[ignore = "needs root and hack/build-k8s; run by hack/test"]
fn a_partitioned_leader_stops_binding_before_its_successor_starts() {
    const TAG: u8 = 1;
    let rounds = rounds();
    let host = Lan::host_ip_for(TAG);
    let cp = ControlPlane::start_with(&[
        ("RKUBE_CP_APISERVER_IP", host.as_str()),
        ("RKUBE_CP_AUDIT", "1"),
    ])
    .expect("control plane");
    let mut lan = Lan::new(TAG);
    let kubeconfig = cp.dir().join("scheduler-lan.kubeconfig");
    lan.kubeconfig(&cp.scheduler_kubeconfig(), &kubeconfig);
    create_nodes(&cp, 10, "64");

    let mut started = 0;
    let mut start = |lan: &mut Lan| {
        let space = lan.space();
        started += 1;
        let r = Replica::start_in(
            &cp,
            &format!("p{started}"),
            &space.name,
            &kubeconfig,
            &SHORT_LEASE,
        );
        (r, space)
    };
    let mut replicas = vec![start(&mut lan), start(&mut lan)];

    let created = AtomicUsize::new(0);
    // The address of each round's partitioned leader.
    let mut leaders = Vec::new();
    let done = AtomicBool::new(false);
    let mut report = Vec::new();
    std::thread::scope(|s| {
        // A failed assertion below must stop the pod creator too, or the
        // scope would wait for it for ever.
        let _stop = StopOnDrop(&done);
        // Pods arrive all the time, so the leader has bindings in flight
        // when it is cut off.
        s.spawn(|| {
            let mut batch = 0;
            while !done.load(Ordering::Relaxed) {
                create_pods(&cp, &format!("b{batch:03}"), 5, "default-scheduler");
                created.fetch_add(5, Ordering::Relaxed);
                batch += 1;
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        for round in 0..rounds {
            let leader = wait_for_leader(&replicas, Duration::from_secs(30));
            std::thread::sleep(Duration::from_millis(500));
            // A burst, cut while it arrives: the leader has pods queued
            // and bindings on the wire.
            let (cp, created) = (&cp, &created);
            let burst = s.spawn(move || {
                create_pods(cp, &format!("burst{round:02}"), BURST, "default-scheduler");
                created.fetch_add(BURST, Ordering::Relaxed);
            });
            // Cut once the first of them is bound.
            let label = format!("app=burst{round:02}");
            let seen = Instant::now();
            while try_kubectl(
                cp,
                &[
                    "get",
                    "pods",
                    "-l",
                    &label,
                    "-o",
                    "jsonpath={.items[*].spec.nodeName}",
                ],
            )
            .is_none_or(|nodes| nodes.trim().is_empty())
            {
                assert!(
                    seen.elapsed() < Duration::from_secs(30),
                    "burst {round} not bound"
                );
                // Each poll is a kubectl process: poll gently, the 2-core
                // machine also runs the API server and both replicas.
                std::thread::sleep(Duration::from_millis(100));
            }
            let (mut old, space) = replicas.remove(leader);
            let cut = Instant::now();
            lan.partition(&space);
            burst.join().unwrap();
            leaders.push(space.ip.clone());
            // The old leader gives up when it cannot renew for the renew
            // deadline (4 s) and exits 1, as kube-scheduler does.
            let deadline = cut + Duration::from_secs(8);
            while old.alive() {
                assert!(
                    Instant::now() < deadline,
                    "the partitioned leader still runs {:?} after the cut",
                    cut.elapsed()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
            let gave_up = cut.elapsed();
            assert_eq!(old.child.wait().unwrap().code(), Some(1));
            let log = old.log_text();
            assert!(log.contains("leader election lost"), "{log}");
            assert!(!log.contains("panicked"), "{log}");
            let next = wait_for_leader(&replicas, Duration::from_secs(30));
            let took_over = cut.elapsed();
            if let Some(left) = PARTITION.checked_sub(cut.elapsed()) {
                std::thread::sleep(left);
            }
            lan.heal(&space);
            report.push(format!(
                "round {round}: old leader exited {gave_up:.1?} after the cut, {} took over after {took_over:.1?}, healed after {:.1?}",
                replicas[next].0.log.display(),
                cut.elapsed()
            ));
            // The healed namespace stays, with the old leader's sockets.
            replicas.push(start(&mut lan));
        }
        done.store(true, Ordering::Relaxed);
    });
    let total = created.load(Ordering::Relaxed);
    let placed = wait_all_bound(&cp, total, Duration::from_secs(120));
    // Late retransmissions from a healed namespace would show up here too.
    std::thread::sleep(Duration::from_secs(3));
    let writes = audit::writes(
        &cp.dir().join("logs/audit.log"),
        "kube-system",
        "kube-scheduler",
    );
    let per_client = audit::assert_one_binder_at_a_time(&writes);
    let tenures = audit::tenures(&writes);
    let late = audit::late_binding_attempts(&writes);
    assert!(
        late.iter().all(|w| !w.succeeded()),
        "a former leader's binding succeeded: {late:#?}"
    );
    assert!(
        tenures.len() > rounds,
        "expected a new leader per round: {tenures:#?}"
    );
    assert_eq!(
        per_client.values().sum::<usize>(),
        placed.len(),
        "every pod bound exactly once, all through the audited clients"
    );
    for (r, _) in &mut replicas {
        assert!(
            r.alive(),
            "{} exited although never cut off:\n{}",
            r.log.display(),
            r.log_text()
        );
        assert!(!r.log_text().contains("panicked"));
    }
    // How each burst was split between the partitioned leader and its
    // successor: both sides non-empty means the cut fell inside it.
    let mut split_bursts = 0;
    for (round, old) in leaders.iter().enumerate() {
        let prefix = format!("burst{round:02}-");
        let (by_old, by_others) = writes
            .iter()
            .filter(|w| w.succeeded() && w.pod.as_ref().is_some_and(|p| p.starts_with(&prefix)))
            .fold((0, 0), |(o, n), w| {
                if w.source == *old {
                    (o + 1, n)
                } else {
                    (o, n + 1)
                }
            });
        report[round].push_str(&format!(
            "; burst: {by_old} bound before the cut, {by_others} by the successor"
        ));
        if by_old > 0 && by_others > 0 {
            split_bursts += 1;
        }
    }
    assert!(
        split_bursts > 0,
        "no cut fell inside a burst, so no binding was in flight at a cut: {report:#?}"
    );
    for line in &report {
        eprintln!("{line}");
    }
    eprintln!(
        "partitions: {rounds} rounds ({split_bursts} cut inside a burst), {} pods bound, 0 lost, 0 double-bound, {} tenures, bindings per replica {per_client:?}; {} binding requests of former leaders arrived late, all refused: {:?}",
        placed.len(),
        tenures.len(),
        late.len(),
        late.iter().map(|w| w.code).collect::<Vec<_>>()
    );
}

#[test]
#[ignore = "needs root and hack/build-k8s; run by hack/test"]
fn a_lossy_slow_link_loses_no_pod() {
    const TAG: u8 = 4;
    const LOSS: f64 = 0.05;
    const DELAY: Duration = Duration::from_millis(20);
    let pods = common::env_count("RKUBE_LOSSY_PODS", 5000);
    let host = Lan::host_ip_for(TAG);
    let cp = ControlPlane::start_with(&[("RKUBE_CP_APISERVER_IP", host.as_str())])
        .expect("control plane");
    let mut lan = Lan::new(TAG);
    let space = lan.space();
    let api = std::net::SocketAddr::from(([127, 0, 0, 1], Lan::api_port(cp.kubeconfig())));
    let relay = Relay::start(&format!("{host}:0"), api, DELAY);
    let kubeconfig = cp.dir().join("scheduler-lossy.kubeconfig");
    lan.kubeconfig_at(
        &cp.scheduler_kubeconfig(),
        &kubeconfig,
        Some(relay.addr.port()),
    );
    create_nodes(&cp, 100, "64");
    lan.lose(&space, LOSS);
    let mut r = Replica::start_in(&cp, "lossy", &space.name, &kubeconfig, &[]);
    let t = Instant::now();
    while !r.is_leader() {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "no leader over the lossy link"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let started = Instant::now();
    create_many_pods(&cp, "lossy", pods, "default-scheduler");
    let created = started.elapsed();
    let placed = wait_all_bound(&cp, pods, Duration::from_secs(900));
    let all_bound = started.elapsed();
    let events = {
        let out = kubectl(
            &cp,
            &[
                "get",
                "events",
                "-n",
                "default",
                "--field-selector",
                "reason=Scheduled",
                "-o",
                "jsonpath={range .items[*]}{.involvedObject.name}{\"\\n\"}{end}",
            ],
        );
        let mut per_pod = std::collections::BTreeMap::<String, usize>::new();
        for p in out.lines() {
            *per_pod.entry(p.to_string()).or_default() += 1;
        }
        per_pod
    };
    assert!(
        events.values().all(|&n| n == 1),
        "a pod with more than one Scheduled event"
    );
    assert!(r.alive(), "the replica runs");
    let log = r.log_text();
    assert!(!log.contains("panicked"), "{log}");
    assert!(!log.contains("leader election lost"), "{log}");
    eprintln!(
        "lossy link ({:.0} % loss, +{DELAY:?} each way): {} pods created in {created:.1?}, all bound {all_bound:.1?} after the first ({:.0} pods/s), 0 lost, 0 double-bound ({} with a Scheduled event)",
        LOSS * 100.0,
        placed.len(),
        placed.len() as f64 / all_bound.as_secs_f64(),
        events.len()
    );
}
