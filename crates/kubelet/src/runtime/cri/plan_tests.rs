//! Upstream's `computePodActions` tables, case for case
//! (`pkg/kubelet/kuberuntime/kuberuntime_manager_test.go`:
//! `TestComputePodActions`, `TestComputePodActionsWithInitContainers`,
//! `TestComputePodActionsWithRestartableInitContainers`,
//! `TestComputePodActionsWithInitAndEphemeralContainers`), with upstream's
//! bases and names. Upstream's actions map onto rkube's plan as:
//! `ContainersToStart`/`InitContainersToStart`/`EphemeralContainersToStart`
//! → `Step::Start` (with rkube's attempt and back-off origin),
//! `ContainersToKill` → `Step::Kill` (kills before starts, as upstream's
//! `SyncPod`), `CreateSandbox`/`Attempt` → `SandboxAction::Create`,
//! `KillPod` → `kill_pod` (rkube sets it only when something is left to
//! stop: a new pod's first sandbox kills nothing). Where rkube differs by
//! design the case says so. Not ported: "Kill pod and recreate all
//! containers if the PodSandbox does not have an IP" (rkube keeps a ready
//! sandbox whatever its IP) and the in-place resize cases.

use super::*;
use serde_json::{json, Value};

const SB: &str = "sandboxID";
const FINISHED: i128 = 1_000;

fn pod(policy: Option<&str>, init: Value, ephemeral: Value) -> Pod {
    let containers: Vec<Value> = ["foo1", "foo2", "foo3"]
        .iter()
        .map(|n| json!({"name": n, "image": "busybox"}))
        .collect();
    let mut spec = json!({"initContainers": init, "containers": containers,
        "ephemeralContainers": ephemeral});
    if let Some(p) = policy {
        spec["restartPolicy"] = json!(p);
    }
    serde_json::from_value(json!({
        "metadata": {"name": "foo", "namespace": "foo-ns", "uid": "12345678"},
        "spec": spec,
    }))
    .unwrap()
}

fn exited(code: i32) -> InstanceState {
    InstanceState::Exited {
        exit_code: code,
        finished_at: FINISHED,
    }
}

const RUNNING: InstanceState = InstanceState::Running;

/// Sandbox `sandboxID` (ready or not, `attempt`) and instances in it.
fn status(ready: bool, attempt: u32, instances: &[(&str, &str, InstanceState)]) -> Observed {
    Observed {
        sandboxes: vec![SandboxSeen {
            id: SB.into(),
            ready,
            attempt,
            created_at: 1,
        }],
        containers: instances
            .iter()
            .map(|(name, id, state)| {
                let x = InstanceSeen {
                    id: id.to_string(),
                    sandbox_id: SB.into(),
                    attempt: 0,
                    state: *state,
                    definition_changed: false,
                    probe: None,
                    resize: Resize::None,
                };
                (name.to_string(), x)
            })
            .collect(),
    }
}

#[test]
fn a_resize_updates_in_place_or_restarts_as_the_policy_says() {
    let pod = {
        let mut p = Pod::default();
        p.metadata.uid = Some("uid".into());
        p.spec = Some(k8s_openapi::api::core::v1::PodSpec {
            containers: vec![k8s_openapi::api::core::v1::Container {
                name: "c".into(),
                ..Default::default()
            }],
            ..Default::default()
        });
        p
    };
    let mut seen = status(true, 0, &[("c", "id1", RUNNING)]);
    assert!(compute(&pod, &seen, None).steps.is_empty());
    seen.containers.get_mut("c").unwrap().resize = Resize::Update;
    assert_eq!(
        compute(&pod, &seen, None).steps,
        vec![Step::UpdateResources {
            name: "c".into(),
            id: "id1".into()
        }]
    );
    seen.containers.get_mut("c").unwrap().resize = Resize::Restart;
    assert_eq!(
        compute(&pod, &seen, None).steps,
        vec![
            kill("c", "id1", "Container c resize requires restart"),
            start("c", Role::Container, 1, None)
        ]
    );
    // An exited container is not resized: it starts with its resources.
    set(&mut seen, "c", exited(1));
    let steps = compute(&pod, &seen, None).steps;
    assert!(
        !steps
            .iter()
            .any(|s| matches!(s, Step::UpdateResources { .. })),
        "{steps:?}"
    );
}

fn set(seen: &mut Observed, name: &str, state: InstanceState) {
    seen.containers.get_mut(name).unwrap().state = state;
}

fn probe(seen: &mut Observed, name: &str, started: bool, kill: Option<(&str, Option<i64>)>) {
    seen.containers.get_mut(name).unwrap().probe = Some(ProbeSeen {
        started,
        kill: kill.map(|(p, g)| ProbeKill {
            probe: p.into(),
            grace_seconds: g,
        }),
    });
}

fn start(name: &str, role: Role, attempt: u32, restart: Option<Finished>) -> Step {
    Step::Start {
        name: name.into(),
        role,
        attempt,
        restart,
    }
}

fn fresh(name: &str, role: Role) -> Step {
    start(name, role, 0, None)
}

fn again(name: &str, role: Role, from: Finished) -> Step {
    start(name, role, 1, Some(from))
}

fn kill(name: &str, id: &str, message: &str) -> Step {
    Step::Kill {
        name: name.into(),
        id: id.into(),
        message: Some(message.into()),
        grace: Grace::Pod,
    }
}

fn created(name: &str, id: &str) -> Step {
    Step::StartCreated {
        name: name.into(),
        id: id.into(),
    }
}

fn containers(role_from: Option<Finished>) -> Vec<Step> {
    ["foo1", "foo2", "foo3"]
        .iter()
        .map(|n| match role_from {
            None => fresh(n, Role::Container),
            Some(f) => again(n, Role::Container, f),
        })
        .collect()
}

fn create(attempt: u32) -> SandboxAction {
    SandboxAction::Create {
        attempt,
        stop: vec![SB.into()],
    }
}

fn use_sb() -> SandboxAction {
    SandboxAction::Use(SB.into())
}

struct Case {
    name: &'static str,
    pod: Pod,
    seen: Observed,
    sandbox: SandboxAction,
    kill_pod: bool,
    steps: Vec<Step>,
}

fn case(name: &'static str, pod: Pod, seen: Observed) -> Case {
    Case {
        name,
        pod,
        seen,
        sandbox: use_sb(),
        kill_pod: false,
        steps: Vec::new(),
    }
}

impl Case {
    fn sandbox(mut self, s: SandboxAction, kill_pod: bool) -> Case {
        self.sandbox = s;
        self.kill_pod = kill_pod;
        self
    }

    fn kill_pod(mut self) -> Case {
        self.kill_pod = true;
        self
    }

    fn steps(mut self, steps: Vec<Step>) -> Case {
        self.steps = steps;
        self
    }
}

fn check(cases: Vec<Case>) {
    for c in cases {
        let got = compute(&c.pod, &c.seen, None);
        assert_eq!(got.sandbox, c.sandbox, "{}: sandbox", c.name);
        assert_eq!(got.kill_pod, c.kill_pod, "{}: kill_pod", c.name);
        assert_eq!(got.steps, c.steps, "{}: steps", c.name);
        assert!(got.waiting.is_empty(), "{}: waiting", c.name);
    }
}

fn with(mut seen: Observed, f: impl FnOnce(&mut Observed)) -> Observed {
    f(&mut seen);
    seen
}

/// `makeBasePodAndStatus`: foo1..foo3 running in the ready sandbox.
fn base(policy: Option<&str>) -> (Pod, Observed) {
    let seen = status(
        true,
        0,
        &[
            ("foo1", "id1", RUNNING),
            ("foo2", "id2", RUNNING),
            ("foo3", "id3", RUNNING),
        ],
    );
    (pod(policy, json!([]), json!([])), seen)
}

#[test]
fn compute_pod_actions() {
    let b = |p| base(p);
    let exits = |s: &mut Observed| {
        set(s, "foo1", exited(0));
        set(s, "foo2", exited(111));
    };
    let dead = |s: &mut Observed| s.sandboxes[0].ready = false;
    let all_exited_0 = |s: &mut Observed| {
        dead(s);
        s.sandboxes[0].attempt = 1;
        for n in ["foo1", "foo2", "foo3"] {
            set(s, n, exited(0));
        }
    };
    let c = Role::Container;
    check(vec![
        case("everything is good; do nothing", b(None).0, b(None).1),
        case("start pod sandbox and all containers for a new pod", b(None).0, Observed::default())
            .sandbox(SandboxAction::Create { attempt: 0, stop: vec![] }, false)
            .steps(containers(None)),
        case(
            "restart exited containers if RestartPolicy == Always",
            b(Some("Always")).0,
            with(b(None).1, exits),
        )
        .steps(vec![again("foo1", c, Finished::At(FINISHED)), again("foo2", c, Finished::At(FINISHED))]),
        case(
            "restart failed containers if RestartPolicy == OnFailure",
            b(Some("OnFailure")).0,
            with(b(None).1, exits),
        )
        .steps(vec![again("foo2", c, Finished::At(FINISHED))]),
        // Upstream makes a new container; rkube starts the one created.
        case(
            "restart created but not started containers if RestartPolicy == OnFailure",
            b(Some("OnFailure")).0,
            with(b(None).1, |s| {
                set(s, "foo1", exited(0));
                set(s, "foo2", InstanceState::Created);
            }),
        )
        .steps(vec![created("foo2", "id2")]),
        case(
            "don't restart containers if RestartPolicy == Never",
            b(Some("Never")).0,
            with(b(None).1, exits),
        ),
        case(
            "Kill pod and recreate everything if the pod sandbox is dead, and RestartPolicy == Always",
            b(Some("Always")).0,
            with(b(None).1, dead),
        )
        .sandbox(create(1), true)
        .steps(containers(Some(Finished::Now))),
        case(
            "Kill pod and recreate all containers (except for the succeeded one) if the pod sandbox is dead, and RestartPolicy == OnFailure",
            b(Some("OnFailure")).0,
            with(b(None).1, |s| {
                dead(s);
                set(s, "foo2", exited(0));
            }),
        )
        .sandbox(create(1), true)
        .steps(vec![again("foo1", c, Finished::Now), again("foo3", c, Finished::Now)]),
        case(
            "Kill and recreate the container if the container's spec changed",
            b(Some("Always")).0,
            with(b(None).1, |s| {
                s.containers.get_mut("foo2").unwrap().definition_changed = true;
            }),
        )
        .steps(vec![
            kill("foo2", "id2", "Container foo2 definition changed, will be restarted"),
            again("foo2", c, Finished::Now),
        ]),
        case(
            "Kill and recreate the container if the liveness check has failed",
            b(Some("Always")).0,
            with(b(None).1, |s| probe(s, "foo2", true, Some(("liveness", None)))),
        )
        .steps(vec![
            kill("foo2", "id2", "Container foo2 failed liveness probe, will be restarted"),
            again("foo2", c, Finished::Now),
        ]),
        case(
            "Kill and recreate the container if the startup check has failed",
            b(Some("Always")).0,
            with(b(None).1, |s| probe(s, "foo2", false, Some(("startup", None)))),
        )
        .steps(vec![
            kill("foo2", "id2", "Container foo2 failed startup probe, will be restarted"),
            again("foo2", c, Finished::Now),
        ]),
        case(
            "Verify we do not create a pod sandbox if no ready sandbox for pod with RestartPolicy=Never and all containers exited",
            b(Some("Never")).0,
            with(b(None).1, all_exited_0),
        )
        .sandbox(SandboxAction::Finished(Some(SB.into())), false),
        case(
            "Verify we do not create a pod sandbox if no ready sandbox for pod with RestartPolicy=OnFailure and all containers succeeded",
            b(Some("OnFailure")).0,
            with(b(None).1, all_exited_0),
        )
        .sandbox(SandboxAction::Finished(Some(SB.into())), false),
        case(
            "Verify we create a pod sandbox if no ready sandbox for pod with RestartPolicy=Never and no containers have ever been created",
            b(Some("Never")).0,
            status(false, 2, &[]),
        )
        .sandbox(create(3), true)
        .steps(containers(None)),
        case(
            "Kill and recreate the container if the container is in unknown state",
            b(Some("Never")).0,
            with(b(None).1, |s| set(s, "foo2", InstanceState::Unknown)),
        )
        .steps(vec![
            kill("foo2", "id2", "Container foo2 is in unknown state, try killing it before restart"),
            again("foo2", c, Finished::Now),
        ]),
        // Upstream makes a new container; rkube starts the one created.
        case(
            "Restart the container if the container is in created state",
            b(Some("Never")).0,
            with(b(None).1, |s| set(s, "foo2", InstanceState::Created)),
        )
        .steps(vec![created("foo2", "id2")]),
        // Beyond upstream's table: a probe's own grace, and a liveness
        // failure under Never (killed, not restarted).
        case(
            "a probe's own terminationGracePeriodSeconds is the kill's grace",
            b(Some("Always")).0,
            with(b(None).1, |s| probe(s, "foo1", true, Some(("liveness", Some(7))))),
        )
        .steps(vec![
            Step::Kill {
                name: "foo1".into(),
                id: "id1".into(),
                message: Some("Container foo1 failed liveness probe, will be restarted".into()),
                grace: Grace::Seconds(7),
            },
            again("foo1", c, Finished::Now),
        ]),
        case(
            "a container failing its liveness probe under Never is killed, not restarted",
            b(Some("Never")).0,
            with(b(None).1, |s| probe(s, "foo3", true, Some(("liveness", None)))),
        )
        .steps(vec![kill("foo3", "id3", "Container foo3 failed liveness probe")]),
    ]);
}

/// `makeBasePodAndStatusWithInitContainers`: init1..init3 exited 0 in the
/// ready sandbox, no container made yet.
fn init_base(policy: Option<&str>) -> (Pod, Observed) {
    let init = json!([{"name": "init1", "image": "bar-image"},
        {"name": "init2", "image": "bar-image"}, {"name": "init3", "image": "bar-image"}]);
    let seen = status(
        true,
        0,
        &[
            ("init1", "initid1", exited(0)),
            ("init2", "initid2", exited(0)),
            ("init3", "initid3", exited(0)),
        ],
    );
    (pod(policy, init, json!([])), seen)
}

#[test]
fn compute_pod_actions_with_init_containers() {
    let p = |policy| init_base(policy).0;
    let s = || init_base(None).1;
    let i = Role::Init;
    let dead = |s: &mut Observed| s.sandboxes[0].ready = false;
    let failed = |s: &mut Observed| set(s, "init3", exited(137));
    let unknown = |s: &mut Observed| set(s, "init3", InstanceState::Unknown);
    let unknown_kill = || {
        kill(
            "init3",
            "initid3",
            "Init container init3 is in unknown state, try killing it before restart",
        )
    };
    check(vec![
        case("initialization completed; start all containers", p(None), s())
            .steps(containers(None)),
        case("no init containers have been started; start the first one", p(None), status(true, 0, &[]))
            .steps(vec![fresh("init1", i)]),
        case(
            "initialization in progress; do nothing",
            p(Some("Always")),
            with(s(), |s| set(s, "init3", RUNNING)),
        ),
        case(
            "Kill pod and restart the first init container if the pod sandbox is dead",
            p(Some("Always")),
            with(s(), dead),
        )
        .sandbox(create(1), true)
        .steps(vec![again("init1", i, Finished::At(FINISHED))]),
        case(
            "initialization failed; restart the last init container if RestartPolicy == Always",
            p(Some("Always")),
            with(s(), failed),
        )
        .steps(vec![again("init3", i, Finished::At(FINISHED))]),
        case(
            "initialization failed; restart the last init container if RestartPolicy == OnFailure",
            p(Some("OnFailure")),
            with(s(), failed),
        )
        .steps(vec![again("init3", i, Finished::At(FINISHED))]),
        case("initialization failed; kill pod if RestartPolicy == Never", p(Some("Never")), with(s(), failed))
            .kill_pod(),
        case(
            "init container state unknown; kill and recreate the last init container if RestartPolicy == Always",
            p(Some("Always")),
            with(s(), unknown),
        )
        .steps(vec![unknown_kill(), again("init3", i, Finished::Now)]),
        case(
            "init container state unknown; kill and recreate the last init container if RestartPolicy == OnFailure",
            p(Some("OnFailure")),
            with(s(), unknown),
        )
        .steps(vec![unknown_kill(), again("init3", i, Finished::Now)]),
        case("init container state unknown; kill pod if RestartPolicy == Never", p(Some("Never")), with(s(), unknown))
            .kill_pod(),
        // Nothing runs in the dead sandbox: nothing is left to stop.
        case(
            "Pod sandbox not ready, init container failed, but RestartPolicy == Never; kill pod only",
            p(Some("Never")),
            with(s(), dead),
        )
        .sandbox(SandboxAction::Finished(Some(SB.into())), false),
        case(
            "Pod sandbox not ready, and RestartPolicy == Never, but no visible init containers;  create a new pod sandbox",
            p(Some("Never")),
            status(false, 0, &[]),
        )
        .sandbox(create(1), true)
        .steps(vec![fresh("init1", i)]),
        case(
            "Pod sandbox not ready, init container failed, and RestartPolicy == OnFailure; create a new pod sandbox",
            p(Some("OnFailure")),
            with(s(), |s| {
                dead(s);
                failed(s);
            }),
        )
        .sandbox(create(1), true)
        .steps(vec![again("init1", i, Finished::At(FINISHED))]),
        case(
            "some of the init container statuses are missing but the last init container is running, don't restart preceding ones",
            p(Some("Always")),
            status(true, 0, &[("init3", "initid3", RUNNING)]),
        ),
        // Upstream makes a new container; rkube starts the one created.
        case(
            "an init container is in the created state due to an unknown error when starting container; restart it",
            p(Some("Always")),
            with(s(), |s| set(s, "init3", InstanceState::Created)),
        )
        .steps(vec![created("init3", "initid3")]),
    ]);
}

/// `makeBasePodAndStatusWithRestartableInitContainers`: three sidecars
/// running in the ready sandbox (the second and third with liveness and
/// startup probes, both passing), no container made yet.
fn sidecar_base(policy: Option<&str>) -> (Pod, Observed) {
    let probe = json!({"exec": {"command": ["true"]}});
    let init = json!([
        {"name": "restartable-init-1", "image": "bar-image", "restartPolicy": "Always"},
        {"name": "restartable-init-2", "image": "bar-image", "restartPolicy": "Always",
         "livenessProbe": probe, "startupProbe": probe},
        {"name": "restartable-init-3", "image": "bar-image", "restartPolicy": "Always",
         "livenessProbe": probe, "startupProbe": probe},
    ]);
    let mut seen = status(
        true,
        0,
        &[
            ("restartable-init-1", "initid1", RUNNING),
            ("restartable-init-2", "initid2", RUNNING),
            ("restartable-init-3", "initid3", RUNNING),
        ],
    );
    probe_ok(&mut seen, "restartable-init-2");
    probe_ok(&mut seen, "restartable-init-3");
    (pod(policy, init, json!([])), seen)
}

fn probe_ok(seen: &mut Observed, name: &str) {
    probe(seen, name, true, None);
}

fn only(mut seen: Observed, keep: &[&str]) -> Observed {
    seen.containers.retain(|k, _| keep.contains(&k.as_str()));
    seen
}

#[test]
fn compute_pod_actions_with_restartable_init_containers() {
    let p = |policy| sidecar_base(policy).0;
    let s = || sidecar_base(None).1;
    let sc = Role::Sidecar;
    let (r1, r2, r3) = (
        "restartable-init-1",
        "restartable-init-2",
        "restartable-init-3",
    );
    let first_two = || only(s(), &[r1, r2]);
    let dead = |s: &mut Observed| s.sandboxes[0].ready = false;
    let running_containers = |s: &mut Observed, state: InstanceState| {
        for (n, id) in [("foo1", "id1"), ("foo2", "id2"), ("foo3", "id3")] {
            let x = InstanceSeen {
                id: id.into(),
                sandbox_id: SB.into(),
                attempt: 0,
                state,
                definition_changed: false,
                probe: None,
                resize: Resize::None,
            };
            s.containers.insert(n.into(), x);
        }
    };
    let with_containers = |steps: Vec<Step>| steps.into_iter().chain(containers(None)).collect();
    check(vec![
        case("initialization completed; start all containers", p(None), s()).steps(containers(None)),
        case("no init containers have been started; start the first one", p(None), status(true, 0, &[]))
            .steps(vec![fresh(r1, sc)]),
        case(
            "an init container is stuck in the created state; restart it",
            p(Some("Always")),
            with(s(), |s| set(s, r3, InstanceState::Created)),
        )
        .steps(vec![created(r3, "initid3")]),
        case("restartable init container has started; start the next", p(Some("Always")), only(s(), &[r1]))
            .steps(vec![fresh(r2, sc)]),
        // rkube's prober does not tell a liveness result apart from none;
        // either way the startup probe passed and the next one starts.
        case("livenessProbe has not been run; start the nothing", p(Some("Always")), first_two())
            .steps(vec![fresh(r3, sc)]),
        case("livenessProbe in progress; start the next", p(Some("Always")), first_two())
            .steps(vec![fresh(r3, sc)]),
        case("livenessProbe has completed; start the next", p(Some("Always")), first_two())
            .steps(vec![fresh(r3, sc)]),
        case(
            "kill and recreate the restartable init container if the liveness check has failed",
            p(Some("Always")),
            with(s(), |s| probe(s, r3, true, Some(("liveness", None)))),
        )
        .steps(with_containers(vec![
            kill(r3, "initid3", "Init container restartable-init-3 failed liveness probe"),
            again(r3, sc, Finished::Now),
        ])),
        case(
            "startupProbe has not been run; do nothing",
            p(Some("Always")),
            with(first_two(), |s| s.containers.get_mut(r2).unwrap().probe = None),
        ),
        case(
            "startupProbe in progress; do nothing",
            p(Some("Always")),
            with(first_two(), |s| probe(s, r2, false, None)),
        ),
        case("startupProbe has completed; start the next", p(Some("Always")), first_two())
            .steps(vec![fresh(r3, sc)]),
        case(
            "kill and recreate the restartable init container if the startup check has failed",
            p(Some("Always")),
            with(s(), |s| probe(s, r3, false, Some(("startup", None)))),
        )
        .steps(vec![
            kill(r3, "initid3", "Init container restartable-init-3 failed startup probe"),
            again(r3, sc, Finished::Now),
        ]),
        case(
            "kill and recreate the restartable init container if the container definition changes",
            p(Some("Always")),
            with(s(), |s| s.containers.get_mut(r3).unwrap().definition_changed = true),
        )
        .steps(with_containers(vec![
            kill(r3, "initid3", "Init container restartable-init-3 definition changed"),
            again(r3, sc, Finished::Now),
        ])),
        case(
            "restart terminated restartable init container and next init container",
            p(Some("Always")),
            with(s(), |s| {
                set(s, r1, exited(0));
                set(s, r3, exited(0));
            }),
        )
        .steps(vec![again(r1, sc, Finished::At(FINISHED)), again(r3, sc, Finished::At(FINISHED))]),
        case(
            "restart terminated restartable init container and regular containers",
            p(Some("Always")),
            with(s(), |s| set(s, r1, exited(0))),
        )
        .steps(with_containers(vec![again(r1, sc, Finished::At(FINISHED))])),
        case(
            "Pod sandbox not ready, restartable init container failed, but RestartPolicy == Never; kill pod only",
            p(Some("Never")),
            with(s(), |s| {
                dead(s);
                set(s, r3, exited(137));
            }),
        )
        .sandbox(SandboxAction::Finished(Some(SB.into())), true),
        case(
            "Pod sandbox not ready, and RestartPolicy == Never, but no visible restartable init containers;  create a new pod sandbox",
            p(Some("Never")),
            status(false, 0, &[]),
        )
        .sandbox(create(1), true)
        .steps(vec![fresh(r1, sc)]),
        case(
            "Pod sandbox not ready, restartable init container failed, and RestartPolicy == OnFailure; create a new pod sandbox",
            p(Some("OnFailure")),
            with(s(), |s| {
                dead(s);
                set(s, r3, exited(137));
            }),
        )
        .sandbox(create(1), true)
        .steps(vec![again(r1, sc, Finished::Now)]),
        case(
            "Pod sandbox not ready, restartable init container failed, and RestartPolicy == Always; create a new pod sandbox",
            p(Some("Always")),
            with(s(), |s| {
                dead(s);
                set(s, r3, exited(137));
            }),
        )
        .sandbox(create(1), true)
        .steps(vec![again(r1, sc, Finished::Now)]),
        case(
            "initialization failed; restart the last restartable init container even if pod's RestartPolicy == Never",
            p(Some("Never")),
            with(s(), |s| set(s, r3, exited(137))),
        )
        .steps(vec![again(r3, sc, Finished::At(FINISHED))]),
        case(
            "restartable init container state unknown; kill and recreate the last restartable init container even if pod's RestartPolicy == Never",
            p(Some("Never")),
            with(s(), |s| set(s, r3, InstanceState::Unknown)),
        )
        .steps(vec![
            kill(
                r3,
                "initid3",
                "Init container restartable-init-3 is in unknown state, try killing it before restart",
            ),
            again(r3, sc, Finished::Now),
        ]),
        case(
            "restart restartable init container if regular containers are running even if pod's RestartPolicy == Never",
            p(Some("Never")),
            with(s(), |s| {
                set(s, r3, exited(137));
                running_containers(s, RUNNING);
            }),
        )
        .steps(vec![again(r3, sc, Finished::At(FINISHED))]),
        case(
            "kill the pod if all main containers succeeded if pod's RestartPolicy == Never",
            p(Some("Never")),
            with(s(), |s| running_containers(s, exited(0))),
        )
        .kill_pod(),
        case(
            "some of the init container statuses are missing but the last init container is running, restart restartable init and regular containers",
            p(Some("Always")),
            only(s(), &[r3]),
        )
        .steps(with_containers(vec![fresh(r1, sc), fresh(r2, sc)])),
    ]);
}

/// `makeBasePodAndStatusWithInitAndEphemeralContainers`: foo1..foo3
/// running, init1 exited 0, the ephemeral container `debug` running.
fn ephemeral_base(policy: Option<&str>, ephemeral: Value) -> (Pod, Observed) {
    let init = json!([{"name": "init1", "image": "bar-image"}]);
    let seen = status(
        true,
        0,
        &[
            ("foo1", "id1", RUNNING),
            ("foo2", "id2", RUNNING),
            ("foo3", "id3", RUNNING),
            ("init1", "initid1", exited(0)),
            ("debug", "debug1", RUNNING),
        ],
    );
    (pod(policy, init, ephemeral), seen)
}

#[test]
fn compute_pod_actions_with_init_and_ephemeral_containers() {
    let debug = json!([{"name": "debug", "image": "busybox", "targetContainerName": "foo1"}]);
    let two =
        json!([{"name": "debug", "image": "busybox"}, {"name": "debug2", "image": "busybox"}]);
    let p = |policy| ephemeral_base(policy, debug.clone()).0;
    let s = || ephemeral_base(None, json!([])).1;
    let no_debug = || with(s(), |s| drop(s.containers.remove("debug")));
    let e = Role::Ephemeral;
    check(vec![
        case("steady state; do nothing; ignore ephemeral container", p(None), s()),
        case("No ephemeral containers running; start one", p(None), no_debug())
            .steps(vec![fresh("debug", e)]),
        case("Start second ephemeral container", ephemeral_base(None, two).0, s())
            .steps(vec![fresh("debug2", e)]),
        case(
            "Ephemeral container exited; do not restart",
            p(Some("Always")),
            with(s(), |s| set(s, "debug", exited(0))),
        ),
        case(
            "initialization in progress; start ephemeral container",
            p(None),
            with(no_debug(), |s| set(s, "init1", RUNNING)),
        )
        .steps(vec![fresh("debug", e)]),
        case(
            "Create a new pod sandbox if the pod sandbox is dead, init container failed and RestartPolicy == OnFailure",
            p(Some("OnFailure")),
            with(only(s(), &["init1", "debug"]), |s| {
                s.sandboxes[0].ready = false;
                set(s, "init1", exited(137));
            }),
        )
        .sandbox(create(1), true)
        .steps(vec![again("init1", Role::Init, Finished::At(FINISHED))]),
        case(
            "Kill pod and do not restart ephemeral container if the pod sandbox is dead",
            p(Some("Always")),
            with(s(), |s| s.sandboxes[0].ready = false),
        )
        .sandbox(create(1), true)
        .steps(vec![again("init1", Role::Init, Finished::At(FINISHED))]),
        case(
            "Kill pod if all containers exited except ephemeral container",
            p(Some("Never")),
            with(s(), |s| {
                for n in ["foo1", "foo2", "foo3"] {
                    set(s, n, exited(0));
                }
            }),
        )
        .kill_pod(),
        case(
            "Ephemeral container is in unknown state; leave it alone",
            p(Some("Never")),
            with(s(), |s| set(s, "debug", InstanceState::Unknown)),
        ),
    ]);
}

#[test]
fn instances_of_an_older_sandbox_are_of_the_past() {
    // The pod's containers ran in a sandbox that is gone; in the new one
    // nothing runs yet: each is started again, after its last attempt.
    let (p, mut seen) = base(Some("Always"));
    for x in seen.containers.values_mut() {
        x.sandbox_id = "old".into();
    }
    let got = compute(&p, &seen, None);
    assert_eq!(got.sandbox, use_sb());
    assert_eq!(got.steps, containers(Some(Finished::Now)));
}

#[test]
fn a_blocked_pod_waits_with_the_reason_and_starts_nothing() {
    let (p, seen) = init_base(Some("Always"));
    let seen = only(seen, &["init1", "init2", "init3"]);
    let got = compute(&p, &seen, Some(("ContainerCreating", "no volume")));
    assert_eq!(got.sandbox, SandboxAction::Blocked);
    assert!(got.steps.is_empty() && !got.kill_pod);
    let names: Vec<&str> = got.waiting.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["foo1", "foo2", "foo3"],
        "only containers without an instance"
    );
    assert!(got
        .waiting
        .iter()
        .all(|(_, r, m)| r == "ContainerCreating" && m == "no volume"));
    // A finished Never pod is not blocked: nothing would start anyway.
    let (never, seen) = base(Some("Never"));
    let finished = with(seen, |s| {
        for n in ["foo1", "foo2", "foo3"] {
            set(s, n, exited(0));
        }
    });
    let got = compute(&never, &finished, Some(("ContainerCreating", "no volume")));
    assert_eq!((got.sandbox, got.kill_pod), (use_sb(), true));
}

#[test]
fn no_state_of_the_runtime_makes_the_plan_panic_or_start_twice() {
    // Every pod shape of the tables, every policy, and a pseudo-random
    // walk over sandbox readiness and each container's state and probe.
    let shapes: Vec<Pod> = vec![
        base(None).0,
        init_base(None).0,
        sidecar_base(None).0,
        ephemeral_base(None, json!([{"name": "debug", "image": "busybox"}])).0,
        pod(None, json!([]), json!([])),
    ];
    let states = [
        None,
        Some(InstanceState::Created),
        Some(RUNNING),
        Some(exited(0)),
        Some(exited(1)),
        Some(InstanceState::Unknown),
    ];
    let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    for policy in [None, Some("Always"), Some("OnFailure"), Some("Never")] {
        for shape in &shapes {
            let mut p = shape.clone();
            p.spec.as_mut().unwrap().restart_policy = policy.map(String::from);
            let spec = p.spec.clone().unwrap();
            let names: Vec<String> = spec
                .init_containers
                .iter()
                .flatten()
                .chain(&spec.containers)
                .map(|c| c.name.clone())
                .chain(ephemeral_containers(&p).into_iter().map(|c| c.name))
                .collect();
            for _ in 0..400 {
                let mut seen = status(next(3) != 0, next(3) as u32, &[]);
                if next(5) == 0 {
                    seen.sandboxes.clear();
                }
                for n in &names {
                    let Some(state) = states[next(states.len())] else {
                        continue;
                    };
                    let probe = match next(4) {
                        0 => None,
                        1 => Some(ProbeSeen {
                            started: true,
                            kill: None,
                        }),
                        2 => Some(ProbeSeen {
                            started: false,
                            kill: None,
                        }),
                        _ => Some(ProbeSeen {
                            started: next(2) == 0,
                            kill: Some(ProbeKill {
                                probe: ["liveness", "startup"][next(2)].into(),
                                grace_seconds: None,
                            }),
                        }),
                    };
                    let x = InstanceSeen {
                        id: format!("id-{n}"),
                        sandbox_id: if next(6) == 0 {
                            "old".into()
                        } else {
                            SB.into()
                        },
                        attempt: next(3) as u32,
                        state,
                        definition_changed: next(8) == 0,
                        probe,
                        resize: [Resize::None, Resize::Update, Resize::Restart][next(3)],
                    };
                    seen.containers.insert(n.clone(), x);
                }
                let got = compute(&p, &seen, None);
                let mut started = std::collections::HashSet::new();
                for step in &got.steps {
                    if let Step::Start { name, .. } | Step::StartCreated { name, .. } = step {
                        assert!(
                            started.insert(name.clone()),
                            "{name} started twice: {got:?}"
                        );
                        assert!(names.contains(name), "{name} is not in the spec");
                    }
                }
                if got.kill_pod && matches!(got.sandbox, SandboxAction::Use(_)) {
                    assert!(
                        got.steps.is_empty(),
                        "a pod being killed starts nothing: {got:?}"
                    );
                }
            }
        }
    }
}

/// `pod` with foo1's own `restartPolicy` (and rules).
fn with_policy(mut p: Pod, policy: &str, rules: Value) -> Pod {
    let c = &mut p.spec.as_mut().unwrap().containers[0];
    c.restart_policy = Some(policy.into());
    c.restart_policy_rules = serde_json::from_value(rules).unwrap();
    p
}

/// Container restart policies and rules (upstream's `ContainerShouldRestart`
/// in `computePodActions`): the container's own policy, its first matching
/// rule, then the pod's.
#[test]
fn container_restart_policies_and_rules() {
    let on_42 = json!([{"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}]);
    let exits = |code: i32| {
        move |s: &mut Observed| {
            set(s, "foo1", exited(code));
        }
    };
    let (never_pod, seen) = base(Some("Never"));
    let (always_pod, _) = base(Some("Always"));
    check(vec![
        case(
            "a Never pod: foo1's rule restarts it on 42",
            with_policy(never_pod.clone(), "Never", on_42.clone()),
            with(seen.clone(), exits(42)),
        )
        .steps(vec![again("foo1", Role::Container, Finished::At(FINISHED))]),
        case(
            "a Never pod: foo1's rule does not match 1, its policy keeps it down",
            with_policy(never_pod.clone(), "Never", on_42.clone()),
            with(seen.clone(), exits(1)),
        ),
        case(
            "a Never pod: foo1's own Always restarts it",
            with_policy(never_pod.clone(), "Always", json!([])),
            with(seen.clone(), exits(0)),
        )
        .steps(vec![again("foo1", Role::Container, Finished::At(FINISHED))]),
        case(
            "an Always pod: foo1's own Never keeps it down",
            with_policy(always_pod.clone(), "Never", json!([])),
            with(seen.clone(), exits(1)),
        ),
        case(
            "an Always pod: foo1's own OnFailure restarts a failure",
            with_policy(always_pod.clone(), "OnFailure", json!([])),
            with(seen.clone(), exits(3)),
        )
        .steps(vec![again("foo1", Role::Container, Finished::At(FINISHED))]),
    ]);
    // A Never pod whose every container exited, foo1's rule matching: the
    // sandbox is still needed (foo1 runs again).
    let all = with(seen.clone(), |s| {
        set(s, "foo1", exited(42));
        set(s, "foo2", exited(0));
        set(s, "foo3", exited(0));
    });
    assert!(needs_sandbox(
        &with_policy(never_pod.clone(), "Never", on_42.clone()),
        &all
    ));
    assert!(!needs_sandbox(&never_pod, &all));
    // A regular init container failing under its own Never ends even an
    // Always pod (upstream's computeInitContainerActions).
    let (init_pod, init_seen) = init_base(Some("Always"));
    let mut init_pod = init_pod;
    let first = &mut init_pod
        .spec
        .as_mut()
        .unwrap()
        .init_containers
        .as_mut()
        .unwrap()[0];
    first.restart_policy = Some("Never".into());
    let name = first.name.clone();
    let failed = with(init_seen, |s| {
        s.containers.retain(|n, _| n == &name);
        set(s, &name, exited(1));
    });
    let got = compute(&init_pod, &failed, None);
    assert!(got.kill_pod && got.steps.is_empty(), "{got:?}");
    // An Always pod whose containers all stopped for good is done.
    let down = with(seen, |s| {
        set(s, "foo1", exited(1));
        set(s, "foo2", exited(1));
        set(s, "foo3", exited(1));
    });
    let mut p = always_pod;
    for c in &mut p.spec.as_mut().unwrap().containers {
        c.restart_policy = Some("Never".into());
    }
    let got = compute(&p, &down, None);
    assert!(got.kill_pod && got.steps.is_empty(), "{got:?}");
}
