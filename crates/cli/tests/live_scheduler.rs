//! `rkube scheduler` as real processes against a genuine control plane
//! (rkube-testcp), driven with the real `kubectl`:
//!
//! - two replicas with leader election (kube-scheduler's 15 s / 10 s / 2 s):
//!   the leader is killed mid-run, the standby takes over, no pod is lost
//!   or bound twice; SIGTERM releases the lease, so the next takeover is
//!   immediate;
//! - kube-apiserver is restarted N times mid-run (SIGTERM and SIGKILL in
//!   turn): rkube reconnects, relists after its watches expire, and binds
//!   every pod without restarting;
//! - the leader is SIGKILLed N times (short leases): every pod is bound
//!   exactly once;
//! - the leader's scheduling loop panics (a debug-build hook): the process
//!   exits 1 within a second and the standby takes over;
//! - upstream kube-scheduler and rkube run side by side with two
//!   schedulerNames: each schedules only its own pods;
//! - a pod that fails the same way on every retry gets one FailedScheduling
//!   Event whose `series` is written at the first repeat (client-go's
//!   aggregation: later repeats are counted in memory);
//! - `--client-ca-file`: a client certificate signed by that CA is the
//!   user on the secure port (`/metrics` allowed for the admin certificate,
//!   refused for an anonymous caller).
//!
//! N is `RKUBE_RESTART_ROUNDS` (`hack/test --full`, which runs these, sets 10,
//! the count RELIABILITY.md reports; 10 when unset).
//!
//! The numbers go to RELIABILITY.md. Needs hack/build-k8s; hack/test runs
//! these one at a time (`--ignored --test-threads=1`).

use std::collections::BTreeMap;

use std::time::{Duration, Instant};

use rkube_testcp::ControlPlane;
use serde_json::Value;

mod common;
use common::live::*;

/// Leader election with short leases (4 s / 3 s / 0.5 s), for tests that
/// wait for takeovers.
const SHORT_LEASE: [&str; 3] = [
    "--leader-elect-lease-duration=4s",
    "--leader-elect-renew-deadline=3s",
    "--leader-elect-retry-period=500ms",
];

/// How many apiserver restarts and leader kills to run (see the module doc).
fn restart_rounds() -> usize {
    common::env_count("RKUBE_RESTART_ROUNDS", 10)
}

/// pod name → (Scheduled events, their reporting controllers and instances).
fn scheduled_events(cp: &ControlPlane) -> BTreeMap<String, Vec<(String, String)>> {
    let out = kubectl(
        cp,
        &["get", "events.events.k8s.io", "-n", "default", "-o", "json"],
    );
    let v: Value = serde_json::from_str(&out).unwrap();
    let mut m: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for e in v["items"].as_array().unwrap() {
        if e["reason"] == "Scheduled" {
            m.entry(e["regarding"]["name"].as_str().unwrap().to_string())
                .or_default()
                .push((
                    e["reportingController"].as_str().unwrap_or("").to_string(),
                    e["reportingInstance"].as_str().unwrap_or("").to_string(),
                ));
        }
    }
    m
}

fn wait_leader(replicas: &[&Replica], timeout: Duration) -> usize {
    let deadline = Instant::now() + timeout;
    loop {
        let leaders: Vec<usize> = (0..replicas.len())
            .filter(|&i| replicas[i].is_leader())
            .collect();
        assert!(leaders.len() <= 1, "two leaders at once: {leaders:?}");
        if let Some(&i) = leaders.first() {
            return i;
        }
        assert!(Instant::now() < deadline, "no leader elected");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn lease_holder(cp: &ControlPlane) -> String {
    kubectl(
        cp,
        &[
            "get",
            "lease",
            "-n",
            "kube-system",
            "kube-scheduler",
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ],
    )
}

fn assert_bound_once(cp: &ControlPlane, placed: &BTreeMap<String, String>) -> usize {
    let events = scheduled_events(cp);
    for (pod, evs) in &events {
        assert!(
            evs.len() <= 1,
            "{pod} has {} Scheduled events: {evs:?}",
            evs.len()
        );
    }
    placed.keys().filter(|p| events.contains_key(*p)).count()
}

fn no_panic(r: &Replica) {
    let log = r.log_text();
    assert!(!log.contains("panicked"), "rkube panicked:\n{log}");
}

#[test]
#[ignore = "needs hack/build-k8s; run by hack/test"]
fn leader_failover_with_upstream_defaults_and_lease_release() {
    let cp = ControlPlane::start().expect("control plane");
    create_nodes(&cp, 10, "32");
    let mut a = Replica::start(&cp, "a", &[]);
    let mut b = Replica::start(&cp, "b", &[]);
    let leader = wait_leader(&[&a, &b], Duration::from_secs(30));
    create_pods(&cp, "first", 60, "default-scheduler");
    wait_all_bound(&cp, 60, Duration::from_secs(60));

    // Kill the leader mid-run: pods keep arriving.
    create_pods(&cp, "second", 60, "default-scheduler");
    std::thread::sleep(Duration::from_millis(300));
    let killed = Instant::now();
    let (dead, standby) = if leader == 0 {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    dead.kill();
    create_pods(&cp, "third", 60, "default-scheduler");
    let placed = wait_all_bound(&cp, 180, Duration::from_secs(90));
    let takeover = killed.elapsed();
    assert!(standby.is_leader(), "the standby leads");
    assert!(standby.alive());
    // kube-scheduler's 15 s lease: the standby waits it out, not much more.
    assert!(takeover < Duration::from_secs(40), "{takeover:?}");
    let with_events = assert_bound_once(&cp, &placed);
    eprintln!(
        "failover: all 180 bound {takeover:?} after the kill; {with_events} with a Scheduled event"
    );

    // SIGTERM: the lease is released (empty holder), so a new replica
    // takes over at once instead of after 15 s.
    let c = Replica::start(&cp, "c", &[]);
    std::thread::sleep(Duration::from_secs(3));
    assert!(!c.is_leader());
    let holder_before = lease_holder(&cp);
    assert!(!holder_before.is_empty());
    let stopped = Instant::now();
    assert_eq!(standby.terminate(), Some(0), "clean exit on SIGTERM");
    let log = standby.log_text();
    assert!(log.contains("released the lease"), "{log}");
    wait_leader(&[&c], Duration::from_secs(8));
    let handover = stopped.elapsed();
    assert!(handover < Duration::from_secs(8), "{handover:?}");
    assert_ne!(lease_holder(&cp), holder_before);
    create_pods(&cp, "fourth", 20, "default-scheduler");
    wait_all_bound(&cp, 200, Duration::from_secs(60));
    no_panic(&c);
    no_panic(standby);
    eprintln!("SIGTERM handover took {handover:?}");
}

/// Pods arrive while `component` is restarted `restart_rounds()` times
/// (SIGTERM and SIGKILL in turn, 0.5 s down): the same rkube process binds
/// every pod once. Returns the replica's log.
fn survives_restarts(component: &str) -> String {
    let rounds = restart_rounds();
    const PER_ROUND: usize = 20;
    let cp = ControlPlane::start().expect("control plane");
    create_nodes(&cp, 10, "64");
    // A lease long enough to outlive a restart: this test is about
    // reconnecting, not about losing leadership.
    let mut r = Replica::start(
        &cp,
        component,
        &[
            "--leader-elect-lease-duration=90s",
            "--leader-elect-renew-deadline=60s",
            "-v=2",
        ],
    );
    wait_leader(&[&r], Duration::from_secs(30));
    let t0 = Instant::now();
    for round in 0..rounds {
        create_pods(&cp, &format!("r{round}"), PER_ROUND, "default-scheduler");
        std::thread::sleep(Duration::from_millis(200 * (round as u64 % 3)));
        let (kill, down) = (round % 2 == 1, Duration::from_millis(500));
        match component {
            "etcd" => cp.restart_etcd(kill, down),
            _ => cp.restart_apiserver(kill, down),
        }
        .unwrap_or_else(|e| panic!("restart {component}: {e}"));
        assert!(
            r.alive(),
            "rkube exited after {component} restart {round}:\n{}",
            r.log_text()
        );
    }
    let placed = wait_all_bound(&cp, rounds * PER_ROUND, Duration::from_secs(120));
    assert!(r.alive(), "rkube kept running");
    let with_events = assert_bound_once(&cp, &placed);
    no_panic(&r);
    eprintln!(
        "{component} restarts: {rounds} restarts, {} pods bound, 0 lost, {with_events} with a Scheduled event, {:?}",
        placed.len(),
        t0.elapsed()
    );
    r.log_text()
}

#[test]
#[ignore = "needs hack/build-k8s; run by hack/test"]
fn survives_apiserver_restarts() {
    let log = survives_restarts("kube-apiserver");
    let relists = log.matches("informer relisted").count();
    assert!(
        relists > 0,
        "watches were re-established by relisting:\n{log}"
    );
    eprintln!("{relists} relists");
}

/// etcd restarted under the API server while pods arrive: the API server's
/// watch cache and the scheduler's watches ride it out.
#[test]
#[ignore = "needs hack/build-k8s; run by hack/test"]
fn survives_etcd_restarts() {
    survives_restarts("etcd");
}

/// The scheduling loop panics (a debug-build hook) in the leader: the process
/// exits 1 within a second instead of keeping the lease while scheduling
/// nothing, the standby takes the lease, and every pod is bound once.
#[test]
#[ignore = "needs hack/build-k8s; run by hack/test"]
fn a_dead_scheduling_loop_ends_the_process() {
    a_panic_ends_the_process(
        "RKUBE_TEST_PANIC_SCHEDULE_LOOP_AFTER",
        "the scheduling loop failed",
        "dead scheduling loop",
    );
}

/// A binding cycle panics (a debug-build hook) on its thread: as a
/// goroutine's panic ends kube-scheduler, the process exits 1 instead of
/// leaving the pod assumed and in flight for ever.
#[test]
#[ignore = "needs hack/build-k8s; run by hack/test"]
fn a_panicking_binding_cycle_ends_the_process() {
    a_panic_ends_the_process(
        "RKUBE_TEST_PANIC_BINDING_AFTER",
        "a binding cycle panicked",
        "panicking binding cycle",
    );
}

/// The leader panics where `hook` says after 5 pods; it must exit 1 with
/// `failure` in its log, and the standby bind every pod once.
fn a_panic_ends_the_process(hook: &str, failure: &str, what: &str) {
    let cp = ControlPlane::start().expect("control plane");
    create_nodes(&cp, 10, "64");
    let short = SHORT_LEASE;
    let mut a = Replica::start_with_env(
        &cp,
        "loop-a",
        &short,
        // No backtrace: symbolizing one from a debug binary took seconds
        // once (RUST_BACKTRACE=1 in CI's environment), and the panic is
        // injected on purpose.
        &[(hook, "5"), ("RUST_BACKTRACE", "0")],
    );
    wait_leader(&[&a], Duration::from_secs(30));
    let mut b = Replica::start(&cp, "loop-b", &short);
    std::thread::sleep(Duration::from_secs(1));
    assert!(!b.is_leader());
    create_pods(&cp, "loop", 20, "default-scheduler");
    let deadline = Instant::now() + Duration::from_secs(60);
    let panicked_at = loop {
        if a.log_text().contains("injected panic") {
            break Instant::now();
        }
        assert!(
            Instant::now() < deadline,
            "no injected panic:\n{}",
            a.log_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let code = loop {
        if let Ok(Some(st)) = a.child.try_wait() {
            break st.code();
        }
        assert!(
            panicked_at.elapsed() < Duration::from_secs(5),
            "still running 5 s after the loop died:\n{}",
            a.log_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let exit_after = panicked_at.elapsed();
    assert_eq!(code, Some(1), "{}", a.log_text());
    // Well inside the 4 s lease: the dead leader stops renewing at once.
    assert!(
        exit_after < Duration::from_secs(2),
        "exit took {exit_after:?}"
    );
    assert!(a.log_text().contains(failure), "{}", a.log_text());
    wait_leader(&[&b], Duration::from_secs(30));
    let placed = wait_all_bound(&cp, 20, Duration::from_secs(60));
    let with_events = assert_bound_once(&cp, &placed);
    assert!(b.alive());
    no_panic(&b);
    eprintln!(
        "{what}: exit 1 {exit_after:?} after the panic; standby took over; {} pods bound, 0 lost, {with_events} with a Scheduled event",
        placed.len()
    );
}

#[test]
#[ignore = "needs hack/build-k8s; run by hack/test"]
fn leader_killed_repeatedly() {
    let kills = restart_rounds();
    const PER_ROUND: usize = 20;
    let cp = ControlPlane::start().expect("control plane");
    create_nodes(&cp, 10, "64");
    let short = SHORT_LEASE;
    let mut replicas: Vec<Replica> = (0..2)
        .map(|i| Replica::start(&cp, &format!("k{i}"), &short))
        .collect();
    let mut takeovers = Vec::new();
    for round in 0..kills {
        let leader = wait_leader(
            &replicas.iter().collect::<Vec<_>>(),
            Duration::from_secs(30),
        );
        create_pods(&cp, &format!("k{round}"), PER_ROUND, "default-scheduler");
        std::thread::sleep(Duration::from_millis(100 * (round as u64 % 4)));
        let t = Instant::now();
        let mut dead = replicas.remove(leader);
        no_panic(&dead);
        dead.kill();
        // Keep two replicas: a new one replaces the killed one.
        replicas.push(Replica::start(&cp, &format!("k{}", round + 2), &short));
        wait_leader(
            &replicas.iter().collect::<Vec<_>>(),
            Duration::from_secs(30),
        );
        takeovers.push(t.elapsed());
    }
    let placed = wait_all_bound(&cp, kills * PER_ROUND, Duration::from_secs(90));
    let with_events = assert_bound_once(&cp, &placed);
    for r in &mut replicas {
        assert!(r.alive());
        no_panic(r);
    }
    eprintln!(
        "leader kills: {kills} kills, {} pods bound, 0 lost, 0 double-bound, {with_events} with a Scheduled event, takeovers {takeovers:?}",
        placed.len()
    );
}

#[test]
#[ignore = "needs hack/build-k8s; run by hack/test"]
fn side_by_side_with_upstream_kube_scheduler() {
    let cp = ControlPlane::start().expect("control plane");
    create_nodes(&cp, 6, "32");
    // -v=10: the most verbose logs, with every pod's score table.
    let r = rkube_beside_upstream(&cp, "side", &["-v=10"]);
    wait_leader_named(&r, "rkube");
    create_pods(&cp, "up", 20, "default-scheduler");
    create_pods(&cp, "rk", 20, "rkube");
    let placed = wait_all_bound(&cp, 40, Duration::from_secs(60));
    assert_bound_once(&cp, &placed);
    let events = scheduled_events(&cp);
    for (pod, evs) in &events {
        let (controller, instance) = &evs[0];
        if pod.starts_with("rk-") {
            assert_eq!(controller, "rkube", "{pod}");
            assert!(instance.starts_with("rkube-"), "{pod}: {instance}");
        } else {
            assert_eq!(controller, "default-scheduler", "{pod}");
        }
    }
    let m = r.metrics().unwrap();
    assert!(
        m.contains("scheduler_schedule_attempts_total{result=\"scheduled\",profile=\"rkube\"} 20"),
        "{m}"
    );
    assert!(
        !m.contains("profile=\"default-scheduler\""),
        "rkube touched no default-scheduler pod"
    );
    // Upstream's own log shows it bound only its pods.
    let upstream_log = std::fs::read_to_string(cp.dir().join("logs/kube-scheduler.log")).unwrap();
    assert!(
        !upstream_log.contains("pod=\"default/rk-"),
        "upstream touched an rkube pod"
    );
    no_panic(&r);
    let log = r.log_text();
    assert!(
        log.contains("Selected node: node-"),
        "score tables at -v=10"
    );
    assert_no_secrets(&cp, &log);
}

/// No credential of the scheduler's kubeconfig appears in a log, even at -v=10.
fn assert_no_secrets(cp: &ControlPlane, log: &str) {
    let kubeconfig = std::fs::read_to_string(cp.scheduler_kubeconfig()).unwrap();
    assert!(!log.contains("PRIVATE KEY") && !log.contains("BEGIN CERTIFICATE"));
    for line in kubeconfig.lines() {
        let line = line.trim();
        for field in ["client-key-data:", "client-certificate-data:", "token:"] {
            if let Some(v) = line.strip_prefix(field) {
                let v = v.trim();
                // Any 40-character piece of the secret would be a leak.
                for chunk in v.as_bytes().chunks(40).filter(|c| c.len() == 40) {
                    let piece = std::str::from_utf8(chunk).unwrap();
                    assert!(!log.contains(piece), "{field} material in the log");
                }
            }
        }
    }
}

fn wait_leader_named(r: &Replica, lease: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let want = format!("leader_election_master_status{{name=\"{lease}\"}} 1");
    while !r.metrics().is_some_and(|m| m.contains(&want)) {
        assert!(Instant::now() < deadline, "rkube never led {lease}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The FailedScheduling events about one pod.
fn failed_scheduling_events(cp: &ControlPlane, pod: &str) -> Vec<Value> {
    let out = kubectl(
        cp,
        &["get", "events.events.k8s.io", "-n", "default", "-o", "json"],
    );
    let v: Value = serde_json::from_str(&out).unwrap();
    v["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["reason"] == "FailedScheduling" && e["regarding"]["name"] == pod)
        .cloned()
        .collect()
}

#[test]
#[ignore = "needs hack/build-k8s; run by hack/test"]
fn repeated_failures_are_counted_in_an_event_series() {
    let cp = ControlPlane::start().expect("control plane");
    create_nodes(&cp, 1, "4");
    let r = Replica::start(&cp, "series", &[]);
    wait_leader(&[&r], Duration::from_secs(30));
    apply(
        &cp,
        "big",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: big, namespace: default}\nspec:\n  automountServiceAccountToken: false\n  tolerations: [{operator: Exists}]\n  containers: [{name: c, image: registry.k8s.io/pause:3.10, resources: {requests: {cpu: \"8\"}}}]\n",
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while failed_scheduling_events(&cp, "big").is_empty() {
        assert!(Instant::now() < deadline, "no FailedScheduling event");
        std::thread::sleep(Duration::from_millis(300));
    }
    // Each deletion of an assigned pod that requested CPU may make room, so
    // the pending pod is retried (and fails the same way) each time.
    for i in 0..3 {
        let filler = format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: filler-{i}, namespace: default}}\nspec:\n  nodeName: node-00\n  automountServiceAccountToken: false\n  tolerations: [{{operator: Exists}}]\n  containers: [{{name: c, image: registry.k8s.io/pause:3.10, resources: {{requests: {{cpu: 100m}}}}}}]\n"
        );
        apply(&cp, &format!("filler-{i}"), &filler);
        kubectl(
            &cp,
            &[
                "delete",
                "pod",
                &format!("filler-{i}"),
                "--grace-period=0",
                "--force",
            ],
        );
        std::thread::sleep(Duration::from_secs(11));
    }
    let events = failed_scheduling_events(&cp, "big");
    let m = r.metrics().unwrap();
    let attempts: i64 = m
        .lines()
        .find(|l| l.starts_with("scheduler_schedule_attempts_total{result=\"unschedulable\""))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse::<f64>().ok())
        .unwrap_or(0.0) as i64;
    // The first event names the pod before its PodScheduled condition was
    // written (another resourceVersion, so another event, as in client-go).
    // As client-go's events broadcaster: the first repeat of an event is
    // written at once as its series of 2; later repeats are counted in
    // memory and written every 30 minutes, or when the series ends (6
    // minutes unseen), so the API shows a count of 2 at most here.
    assert!(attempts >= 4, "{attempts} attempts");
    assert!(events.len() <= 2, "repeats aggregated: {events:#?}");
    let counts: Vec<i64> = events
        .iter()
        .map(|e| e["series"]["count"].as_i64().unwrap_or(1))
        .collect();
    assert!(
        counts.contains(&2),
        "the first repeat is written: {events:#?}"
    );
    assert!(
        counts.iter().all(|&c| c <= 2),
        "later repeats are not written at once: {events:#?}"
    );
    for e in &events {
        assert!(
            e["note"]
                .as_str()
                .unwrap()
                .starts_with("0/1 nodes are available: 1 Insufficient cpu."),
            "{e:#?}"
        );
    }
    no_panic(&r);
}

/// `curl` of the replica's `/metrics` with optional client credentials:
/// the HTTP status code.
fn metrics_status(r: &Replica, cert: Option<(&std::path::Path, &std::path::Path)>) -> String {
    let mut cmd = std::process::Command::new("curl");
    cmd.args([
        "-sk",
        "--max-time",
        "5",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
    ]);
    if let Some((crt, key)) = cert {
        cmd.arg("--cert").arg(crt).arg("--key").arg(key);
    }
    let out = cmd
        .arg(format!("https://127.0.0.1:{}/metrics", r.port))
        .output()
        .expect("curl runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
#[ignore = "needs hack/build-k8s; run by hack/test"]
fn client_certificates_signed_by_the_client_ca_are_authenticated() {
    let cp = ControlPlane::start().expect("control plane");
    let pki = cp.dir().join("pki");
    let ca = pki.join("ca.crt");
    let r = Replica::start(
        &cp,
        "client-ca",
        &[
            "--authorization-always-allow-paths=/healthz",
            &format!("--client-ca-file={}", ca.display()),
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    // Anonymous: the API server's SubjectAccessReview denies system:anonymous.
    let anonymous = loop {
        let code = metrics_status(&r, None);
        if code != "000" || Instant::now() > deadline {
            break code;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(anonymous, "403", "anonymous callers are refused");
    // The control plane's admin certificate (O=system:masters), signed by
    // the client CA: authenticated as that user, and allowed.
    let admin = metrics_status(&r, Some((&pki.join("admin.crt"), &pki.join("admin.key"))));
    assert_eq!(
        admin, "200",
        "a client certificate of the client CA is authenticated"
    );
    no_panic(&r);
}

/// API Priority and Fairness that admits the scheduler's bindings one at a
/// time and answers the rest `429 Too Many Requests` (with `Retry-After`):
/// a priority level with no seats of its own, none to borrow, and Reject.
const THROTTLE_BINDINGS: &str = r#"apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: rkube-throttled}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 0
    lendablePercent: 0
    borrowingLimitPercent: 0
    limitResponse: {type: Reject}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: rkube-throttle-bindings}
spec:
  priorityLevelConfiguration: {name: rkube-throttled}
  matchingPrecedence: 50
  distinguisherMethod: {type: ByUser}
  rules:
  - subjects: [{kind: User, user: {name: "system:kube-scheduler"}}]
    resourceRules:
    - verbs: [create]
      apiGroups: [""]
      resources: [pods/binding]
      namespaces: ["*"]
"#;

/// The sum of the API server's `metric` samples whose labels contain `label`.
fn apiserver_metric(cp: &ControlPlane, metric: &str, label: &str) -> f64 {
    kubectl(cp, &["get", "--raw", "/metrics"])
        .lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
#[ignore = "needs hack/build-k8s; run by hack/test"]
fn bindings_refused_by_priority_and_fairness_are_retried_after_retry_after() {
    const PODS: usize = 100;
    const THROTTLED: Duration = Duration::from_secs(10);
    let cp = ControlPlane::start().expect("control plane");
    create_nodes(&cp, 10, "64");
    apply(&cp, "apf", THROTTLE_BINDINGS);
    // The API server's flow-control configuration follows its watch.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !kubectl(&cp, &["get", "--raw", "/metrics"])
        .contains("priority_level=\"rkube-throttled\"")
    {
        assert!(
            Instant::now() < deadline,
            "the priority level never appeared"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // All pods wait before the scheduler starts, so it binds many at once
    // (pods created one by one arrive slower than it binds them).
    create_pods(&cp, "apf", PODS, "default-scheduler");
    let r = Replica::start(&cp, "apf", &[]);
    wait_leader(&[&r], Duration::from_secs(30));
    let throttled_at = Instant::now();
    std::thread::sleep(THROTTLED.saturating_sub(throttled_at.elapsed()));
    let bound_while_throttled = placements(&cp)
        .unwrap()
        .values()
        .filter(|n| !n.is_empty())
        .count();
    kubectl(&cp, &["delete", "flowschema", "rkube-throttle-bindings"]);
    let lifted = Instant::now();
    let placed = wait_all_bound(&cp, PODS, Duration::from_secs(120));
    let rest_after = lifted.elapsed();
    assert_bound_once(&cp, &placed);
    let rejected = apiserver_metric(
        &cp,
        "apiserver_flowcontrol_rejected_requests_total",
        "flow_schema=\"rkube-throttle-bindings\"",
    );
    let dispatched = apiserver_metric(
        &cp,
        "apiserver_flowcontrol_dispatched_requests_total",
        "flow_schema=\"rkube-throttle-bindings\"",
    );
    assert!(rejected > 0.0, "the API server refused no binding");
    // Retry-After honoured (1 s and up): a pod's binding is tried about
    // once a second while refused, not in a tight loop.
    let per_pod_second = rejected / (PODS as f64 * THROTTLED.as_secs_f64());
    assert!(
        per_pod_second <= 2.0,
        "{rejected} refusals for {PODS} pods in {THROTTLED:?}: no backoff"
    );
    assert!(r.metrics().is_some(), "the replica still serves");
    no_panic(&r);
    eprintln!(
        "APF 429: {rejected} bindings refused, {dispatched} admitted while throttled ({bound_while_throttled}/{PODS} pods bound in {THROTTLED:?}); \
         all {PODS} bound {rest_after:.1?} after the flow schema was deleted; 0 lost, 0 double-bound; {per_pod_second:.2} refusals per pod-second"
    );
}
