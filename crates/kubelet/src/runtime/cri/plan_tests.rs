//! The plan's table, after upstream's `TestComputePodActions`,
//! `TestComputePodActionsWithInitContainers` and
//! `TestComputePodActionsWithRestartableInitContainers`
//! (`pkg/kubelet/kuberuntime/kuberuntime_manager_test.go`): the same base
//! pod (three containers `foo1`..`foo3` running in ready sandbox `sb`,
//! attempt 0; the init variants add init containers), one change per
//! case, and upstream's expected actions. Where rkube's plan differs from
//! upstream's by design, the case says so.

use super::*;
use serde_json::json;

const SB: &str = "sb";

/// A pod with `containers`, `init` init containers (`{"name", "sidecar"?,
/// "startupProbe"?}` as JSON) and a restart policy.
fn pod_with(policy: &str, init: serde_json::Value, containers: &[&str]) -> Pod {
    let containers: Vec<_> = containers
        .iter()
        .map(|n| json!({"name": n, "image": "busybox"}))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": "foo", "namespace": "new", "uid": "12345678"},
        "spec": {"restartPolicy": policy, "initContainers": init, "containers": containers}
    }))
    .unwrap()
}

fn base_pod(policy: &str) -> Pod {
    pod_with(policy, json!([]), &["foo1", "foo2", "foo3"])
}

fn sandbox(id: &str, ready: bool, attempt: u32) -> SandboxSeen {
    SandboxSeen {
        id: id.into(),
        ready,
        attempt,
        created_at: attempt as i64,
    }
}

fn instance(name: &str, state: InstanceState) -> (String, InstanceSeen) {
    (
        name.to_string(),
        InstanceSeen {
            id: format!("id-{name}"),
            sandbox_id: SB.into(),
            attempt: 0,
            state,
            definition_changed: false,
            probe: None,
        },
    )
}

fn exited(code: i32) -> InstanceState {
    InstanceState::Exited {
        exit_code: code,
        finished_at: 1_000,
    }
}

/// Ready sandbox `sb`, every name running in it.
fn base_status(names: &[&str]) -> Observed {
    Observed {
        sandboxes: vec![sandbox(SB, true, 0)],
        containers: names
            .iter()
            .map(|n| instance(n, InstanceState::Running))
            .collect(),
    }
}

fn start(name: &str, role: Role, attempt: u32, restart: Option<Finished>) -> Step {
    Step::Start {
        name: name.into(),
        role,
        attempt,
        restart,
        gate: false,
    }
}

fn gated(name: &str, attempt: u32, restart: Option<Finished>) -> Step {
    Step::Start {
        name: name.into(),
        role: Role::Sidecar,
        attempt,
        restart,
        gate: true,
    }
}

fn kill(name: &str, message: Option<&str>, grace: Grace) -> Step {
    Step::Kill {
        name: name.into(),
        id: format!("id-{name}"),
        message: message.map(str::to_string),
        grace,
    }
}

fn create(attempt: u32, stop: &[&str]) -> SandboxAction {
    SandboxAction::Create {
        attempt,
        stop: stop.iter().map(|s| s.to_string()).collect(),
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
    steps: Vec<Step>,
}

fn check(cases: Vec<Case>) {
    for c in cases {
        let got = compute(&c.pod, &c.seen, None);
        assert_eq!(got.sandbox, c.sandbox, "{}: sandbox", c.name);
        assert_eq!(got.steps, c.steps, "{}: steps", c.name);
        assert!(got.waiting.is_empty(), "{}: waiting", c.name);
    }
}

fn with(mut seen: Observed, f: impl FnOnce(&mut Observed)) -> Observed {
    f(&mut seen);
    seen
}

fn set(seen: &mut Observed, name: &str, state: InstanceState) {
    seen.containers.get_mut(name).unwrap().state = state;
}

const FOO: [&str; 3] = ["foo1", "foo2", "foo3"];

#[test]
fn compute_pod_actions() {
    let ok = base_status(&FOO);
    let dead_sandbox = |s: &mut Observed| s.sandboxes[0].ready = false;
    check(vec![
        Case {
            name: "everything is good; do nothing",
            pod: base_pod("Always"),
            seen: ok.clone(),
            sandbox: use_sb(),
            steps: vec![],
        },
        Case {
            name: "start pod sandbox and all containers for a new pod",
            pod: base_pod("Always"),
            seen: Observed::default(),
            sandbox: create(0, &[]),
            steps: FOO.iter().map(|n| start(n, Role::Container, 0, None)).collect(),
        },
        Case {
            name: "restart exited containers if RestartPolicy == Always",
            pod: base_pod("Always"),
            seen: with(ok.clone(), |s| {
                set(s, "foo1", exited(0));
                set(s, "foo2", exited(1));
            }),
            sandbox: use_sb(),
            steps: vec![
                start("foo1", Role::Container, 1, Some(Finished::At(1_000))),
                start("foo2", Role::Container, 1, Some(Finished::At(1_000))),
            ],
        },
        Case {
            name: "restart failed containers if RestartPolicy == OnFailure",
            pod: base_pod("OnFailure"),
            seen: with(ok.clone(), |s| {
                set(s, "foo1", exited(0));
                set(s, "foo2", exited(1));
            }),
            sandbox: use_sb(),
            steps: vec![start("foo2", Role::Container, 1, Some(Finished::At(1_000)))],
        },
        Case {
            name: "don't restart containers if RestartPolicy == Never",
            pod: base_pod("Never"),
            seen: with(ok.clone(), |s| {
                set(s, "foo1", exited(0));
                set(s, "foo2", exited(1));
            }),
            sandbox: use_sb(),
            steps: vec![],
        },
        Case {
            // Upstream kills the pod first (KillPod); rkube stops the old
            // sandbox, which stops its containers.
            name: "Kill pod and recreate everything if the pod sandbox is dead, and RestartPolicy == Always",
            pod: base_pod("Always"),
            seen: with(ok.clone(), dead_sandbox),
            sandbox: create(1, &[SB]),
            steps: FOO
                .iter()
                .map(|n| start(n, Role::Container, 1, Some(Finished::Now)))
                .collect(),
        },
        Case {
            name: "Kill pod and recreate all containers (except for the succeeded one) if the pod sandbox is dead, and RestartPolicy == OnFailure",
            pod: base_pod("OnFailure"),
            seen: with(ok.clone(), |s| {
                dead_sandbox(s);
                set(s, "foo2", exited(0));
            }),
            sandbox: create(1, &[SB]),
            steps: vec![
                start("foo1", Role::Container, 1, Some(Finished::Now)),
                start("foo3", Role::Container, 1, Some(Finished::Now)),
            ],
        },
        Case {
            name: "Kill and recreate the container if the container's spec changed",
            pod: base_pod("Always"),
            seen: with(ok.clone(), |s| {
                s.containers.get_mut("foo2").unwrap().definition_changed = true;
            }),
            sandbox: use_sb(),
            steps: vec![
                kill(
                    "foo2",
                    Some("Container foo2 definition changed, will be restarted"),
                    Grace::Pod,
                ),
                start("foo2", Role::Container, 1, Some(Finished::Now)),
            ],
        },
        Case {
            // A new image restarts the container whatever the policy.
            name: "Kill and recreate the container if the container's spec changed, RestartPolicy == Never",
            pod: base_pod("Never"),
            seen: with(ok.clone(), |s| {
                s.containers.get_mut("foo1").unwrap().definition_changed = true;
            }),
            sandbox: use_sb(),
            steps: vec![
                kill(
                    "foo1",
                    Some("Container foo1 definition changed, will be restarted"),
                    Grace::Pod,
                ),
                start("foo1", Role::Container, 1, Some(Finished::Now)),
            ],
        },
        Case {
            name: "Kill and recreate the container if the liveness check has failed",
            pod: base_pod("Always"),
            seen: with(ok.clone(), |s| {
                s.containers.get_mut("foo1").unwrap().probe = Some(ProbeSeen {
                    started: true,
                    kill: Some(ProbeKill {
                        probe: "liveness".into(),
                        grace_seconds: None,
                    }),
                });
            }),
            sandbox: use_sb(),
            steps: vec![
                kill(
                    "foo1",
                    Some("Container foo1 failed liveness probe, will be restarted"),
                    Grace::Pod,
                ),
                start("foo1", Role::Container, 1, Some(Finished::Now)),
            ],
        },
        Case {
            name: "Kill and recreate the container if the startup check has failed",
            pod: base_pod("Always"),
            seen: with(ok.clone(), |s| {
                s.containers.get_mut("foo1").unwrap().probe = Some(ProbeSeen {
                    started: false,
                    kill: Some(ProbeKill {
                        probe: "startup".into(),
                        grace_seconds: Some(7),
                    }),
                });
            }),
            sandbox: use_sb(),
            steps: vec![
                kill(
                    "foo1",
                    Some("Container foo1 failed startup probe, will be restarted"),
                    Grace::Seconds(7),
                ),
                start("foo1", Role::Container, 1, Some(Finished::Now)),
            ],
        },
        Case {
            name: "Kill the container, without restarting it, if the liveness check has failed and RestartPolicy == Never",
            pod: base_pod("Never"),
            seen: with(ok.clone(), |s| {
                s.containers.get_mut("foo3").unwrap().probe = Some(ProbeSeen {
                    started: true,
                    kill: Some(ProbeKill {
                        probe: "liveness".into(),
                        grace_seconds: None,
                    }),
                });
            }),
            sandbox: use_sb(),
            steps: vec![kill(
                "foo3",
                Some("Container foo3 failed liveness probe"),
                Grace::Pod,
            )],
        },
        Case {
            name: "Kill and recreate the container if the container is in unknown state",
            pod: base_pod("Never"),
            seen: with(ok.clone(), |s| set(s, "foo1", InstanceState::Unknown)),
            sandbox: use_sb(),
            steps: vec![
                kill(
                    "foo1",
                    Some("Container foo1 is in unknown state, try killing it before restart"),
                    Grace::Pod,
                ),
                start("foo1", Role::Container, 1, Some(Finished::Now)),
            ],
        },
        Case {
            // Upstream makes a new container; rkube starts the one created.
            name: "Start a container that was created but not started",
            pod: base_pod("Always"),
            seen: with(ok.clone(), |s| set(s, "foo2", InstanceState::Created)),
            sandbox: use_sb(),
            steps: vec![Step::StartCreated {
                name: "foo2".into(),
                id: "id-foo2".into(),
                gate: false,
            }],
        },
        Case {
            name: "Verify we do not create a pod sandbox if no ready sandbox for pod with RestartPolicy=Never and all containers exited",
            pod: base_pod("Never"),
            seen: with(ok.clone(), |s| {
                dead_sandbox(s);
                for n in FOO {
                    set(s, n, exited(0));
                }
            }),
            sandbox: SandboxAction::Finished(Some(SB.into())),
            steps: vec![],
        },
        Case {
            name: "Verify we do not create a pod sandbox if no ready sandbox for pod with RestartPolicy=Never and containers ran",
            pod: base_pod("Never"),
            seen: with(ok.clone(), |s| {
                dead_sandbox(s);
                s.containers.remove("foo3");
            }),
            sandbox: SandboxAction::Finished(Some(SB.into())),
            steps: vec![],
        },
        Case {
            name: "Verify we create a pod sandbox if no ready sandbox for pod with RestartPolicy=Never and no containers have ever been created",
            pod: base_pod("Never"),
            seen: Observed {
                sandboxes: vec![sandbox(SB, false, 2)],
                containers: HashMap::new(),
            },
            sandbox: create(3, &[SB]),
            steps: FOO.iter().map(|n| start(n, Role::Container, 0, None)).collect(),
        },
        Case {
            name: "Create a new sandbox above the highest attempt of every old one",
            pod: base_pod("Always"),
            seen: Observed {
                sandboxes: vec![sandbox("a", false, 4), sandbox("b", false, 1)],
                containers: HashMap::new(),
            },
            sandbox: create(5, &["a", "b"]),
            steps: FOO.iter().map(|n| start(n, Role::Container, 0, None)).collect(),
        },
        Case {
            name: "Use the newest of several ready sandboxes",
            pod: base_pod("Always"),
            seen: Observed {
                sandboxes: vec![sandbox("old", true, 0), sandbox(SB, true, 1)],
                containers: base_status(&FOO).containers,
            },
            sandbox: use_sb(),
            steps: vec![],
        },
    ]);
}

fn init_pod(policy: &str) -> Pod {
    pod_with(
        policy,
        json!([{"name": "init1", "image": "busybox"}, {"name": "init2", "image": "busybox"}]),
        &["foo1", "foo2", "foo3"],
    )
}

/// Ready sandbox, both init containers completed, containers running.
fn init_status() -> Observed {
    with(
        base_status(&["init1", "init2", "foo1", "foo2", "foo3"]),
        |s| {
            set(s, "init1", exited(0));
            set(s, "init2", exited(0));
        },
    )
}

#[test]
fn compute_pod_actions_with_init_containers() {
    let no_containers = |s: &mut Observed| {
        for n in FOO {
            s.containers.remove(n);
        }
    };
    check(vec![
        Case {
            name: "initialization completed; start all containers",
            pod: init_pod("Always"),
            seen: with(init_status(), no_containers),
            sandbox: use_sb(),
            steps: FOO.iter().map(|n| start(n, Role::Container, 0, None)).collect(),
        },
        Case {
            name: "no init containers have been started; start the first one",
            pod: init_pod("Always"),
            seen: with(init_status(), |s| {
                no_containers(s);
                s.containers.remove("init1");
                s.containers.remove("init2");
            }),
            sandbox: use_sb(),
            steps: vec![start("init1", Role::Init, 0, None)],
        },
        Case {
            name: "initialization in progress; do nothing",
            pod: init_pod("Always"),
            seen: with(init_status(), |s| {
                no_containers(s);
                set(s, "init2", InstanceState::Running);
            }),
            sandbox: use_sb(),
            steps: vec![],
        },
        Case {
            name: "Kill pod and restart the first init container if the pod sandbox is dead",
            pod: init_pod("Always"),
            seen: with(init_status(), |s| s.sandboxes[0].ready = false),
            sandbox: create(1, &[SB]),
            steps: vec![start("init1", Role::Init, 1, None)],
        },
        Case {
            name: "initialization failed; restart the last init container if RestartPolicy == Always",
            pod: init_pod("Always"),
            seen: with(init_status(), |s| {
                no_containers(s);
                set(s, "init2", exited(137));
            }),
            sandbox: use_sb(),
            steps: vec![start("init2", Role::Init, 1, Some(Finished::At(1_000)))],
        },
        Case {
            name: "initialization failed; restart the last init container if RestartPolicy == OnFailure",
            pod: init_pod("OnFailure"),
            seen: with(init_status(), |s| {
                no_containers(s);
                set(s, "init2", exited(137));
            }),
            sandbox: use_sb(),
            steps: vec![start("init2", Role::Init, 1, Some(Finished::At(1_000)))],
        },
        Case {
            // Upstream also kills the pod; rkube starts nothing more and
            // reports the pod Failed.
            name: "initialization failed; kill pod if RestartPolicy == Never",
            pod: init_pod("Never"),
            seen: with(init_status(), |s| {
                no_containers(s);
                set(s, "init2", exited(137));
            }),
            sandbox: use_sb(),
            steps: vec![],
        },
        Case {
            name: "Pod sandbox not ready, init container failed, but RestartPolicy == Never; kill pod only",
            pod: init_pod("Never"),
            seen: with(init_status(), |s| {
                no_containers(s);
                set(s, "init2", exited(137));
                s.sandboxes[0].ready = false;
            }),
            sandbox: SandboxAction::Finished(Some(SB.into())),
            steps: vec![],
        },
        Case {
            name: "Pod sandbox not ready, and RestartPolicy == Never, but no visible init containers; create a new pod sandbox",
            pod: init_pod("Never"),
            seen: Observed {
                sandboxes: vec![sandbox(SB, false, 0)],
                containers: HashMap::new(),
            },
            sandbox: create(1, &[SB]),
            steps: vec![start("init1", Role::Init, 0, None)],
        },
        Case {
            name: "Some of the init container statuses are missing but the last init container is running, don't restart preceding ones",
            pod: init_pod("Always"),
            seen: with(init_status(), |s| {
                no_containers(s);
                s.containers.remove("init1");
                set(s, "init2", InstanceState::Running);
            }),
            // rkube runs init containers strictly in order: init1 has no
            // instance, so it is started (upstream trusts the running
            // init2 instead).
            sandbox: use_sb(),
            steps: vec![start("init1", Role::Init, 0, None)],
        },
    ]);
}

fn sidecar_pod(policy: &str, startup_probe: bool) -> Pod {
    let probe = json!({"exec": {"command": ["true"]}});
    let mut s1 =
        json!({"name": "restartable-init-1", "image": "busybox", "restartPolicy": "Always"});
    if startup_probe {
        s1["startupProbe"] = probe;
    }
    pod_with(
        policy,
        json!([s1, {"name": "init-2", "image": "busybox"},
               {"name": "restartable-init-3", "image": "busybox", "restartPolicy": "Always"}]),
        &["foo1", "foo2", "foo3"],
    )
}

/// Ready sandbox: the sidecars running, init-2 completed, containers
/// running.
fn sidecar_status() -> Observed {
    with(
        base_status(&[
            "restartable-init-1",
            "init-2",
            "restartable-init-3",
            "foo1",
            "foo2",
            "foo3",
        ]),
        |s| set(s, "init-2", exited(0)),
    )
}

#[test]
fn compute_pod_actions_with_restartable_init_containers() {
    let only_inits = |s: &mut Observed| {
        for n in FOO {
            s.containers.remove(n);
        }
    };
    check(vec![
        Case {
            name: "initialization completed; start all containers",
            pod: sidecar_pod("Always", false),
            seen: with(sidecar_status(), only_inits),
            sandbox: use_sb(),
            steps: FOO
                .iter()
                .map(|n| start(n, Role::Container, 0, None))
                .collect(),
        },
        Case {
            // Upstream starts the next one at the next sync; rkube gates:
            // once the sidecar runs (no startup probe), init-2 starts in the
            // same sync, and the plan stops at init-2.
            name: "no init containers have been started; start the first one",
            pod: sidecar_pod("Always", false),
            seen: Observed {
                sandboxes: vec![sandbox(SB, true, 0)],
                containers: HashMap::new(),
            },
            sandbox: use_sb(),
            steps: vec![
                gated("restartable-init-1", 0, None),
                start("init-2", Role::Init, 0, None),
            ],
        },
        Case {
            name: "a sidecar with a startup probe must have started before the next init container",
            pod: sidecar_pod("Always", true),
            seen: Observed {
                sandboxes: vec![sandbox(SB, true, 0)],
                containers: HashMap::new(),
            },
            sandbox: use_sb(),
            steps: vec![Step::Start {
                name: "restartable-init-1".into(),
                role: Role::Sidecar,
                attempt: 0,
                restart: None,
                gate: false,
            }],
        },
        Case {
            name: "startup probe passed: start the next init container",
            pod: sidecar_pod("Always", true),
            seen: Observed {
                sandboxes: vec![sandbox(SB, true, 0)],
                containers: [{
                    let mut x = instance("restartable-init-1", InstanceState::Running);
                    x.1.probe = Some(ProbeSeen {
                        started: true,
                        kill: None,
                    });
                    x
                }]
                .into(),
            },
            sandbox: use_sb(),
            steps: vec![start("init-2", Role::Init, 0, None)],
        },
        Case {
            name: "startup probe not passed yet: wait",
            pod: sidecar_pod("Always", true),
            seen: Observed {
                sandboxes: vec![sandbox(SB, true, 0)],
                containers: [instance("restartable-init-1", InstanceState::Running)].into(),
            },
            sandbox: use_sb(),
            steps: vec![],
        },
        Case {
            name: "livenessProbe has failed; kill and restart the restartable init container",
            pod: sidecar_pod("Always", false),
            seen: with(sidecar_status(), |s| {
                s.containers.get_mut("restartable-init-3").unwrap().probe = Some(ProbeSeen {
                    started: true,
                    kill: Some(ProbeKill {
                        probe: "liveness".into(),
                        grace_seconds: None,
                    }),
                });
            }),
            sandbox: use_sb(),
            steps: vec![
                kill(
                    "restartable-init-3",
                    Some("Container restartable-init-3 failed liveness probe, will be restarted"),
                    Grace::Pod,
                ),
                gated("restartable-init-3", 1, Some(Finished::Now)),
            ],
        },
        Case {
            name: "restartable init container exited; restart it even if RestartPolicy == Never",
            pod: sidecar_pod("Never", false),
            seen: with(sidecar_status(), |s| {
                set(s, "restartable-init-1", exited(1))
            }),
            sandbox: use_sb(),
            steps: vec![gated("restartable-init-1", 1, Some(Finished::At(1_000)))],
        },
        Case {
            name:
                "Pod sandbox not ready; restart the first restartable init container, then init-2",
            pod: sidecar_pod("Always", false),
            seen: with(sidecar_status(), |s| s.sandboxes[0].ready = false),
            sandbox: create(1, &[SB]),
            steps: vec![
                gated("restartable-init-1", 1, Some(Finished::Now)),
                start("init-2", Role::Init, 1, None),
            ],
        },
        Case {
            name: "every container finished for good: the sidecars are stopped, last first",
            pod: sidecar_pod("OnFailure", false),
            seen: with(sidecar_status(), |s| {
                for n in FOO {
                    set(s, n, exited(0));
                }
            }),
            sandbox: use_sb(),
            steps: vec![
                kill("restartable-init-3", None, Grace::Pod),
                kill("restartable-init-1", None, Grace::Pod),
            ],
        },
        Case {
            name: "every container finished for good: an exited sidecar is not restarted",
            pod: sidecar_pod("Never", false),
            seen: with(sidecar_status(), |s| {
                set(s, "restartable-init-1", exited(0));
                for n in FOO {
                    set(s, n, exited(1));
                }
            }),
            sandbox: use_sb(),
            steps: vec![kill("restartable-init-3", None, Grace::Pod)],
        },
    ]);
}

#[test]
fn ephemeral_containers_start_once_in_a_running_sandbox() {
    let mut pod = base_pod("Always");
    pod.spec.as_mut().unwrap().ephemeral_containers = Some(vec![serde_json::from_value(
        json!({"name": "debugger", "image": "busybox", "targetContainerName": "foo1"}),
    )
    .unwrap()]);
    let seen = base_status(&FOO);
    let got = compute(&pod, &seen, None);
    assert_eq!(got.steps, vec![start("debugger", Role::Ephemeral, 0, None)]);
    // Started once: an exited one is not restarted.
    let done = with(seen.clone(), |s| {
        s.containers.extend([instance("debugger", exited(0))]);
    });
    assert_eq!(compute(&pod, &done, None).steps, vec![]);
    // Not in a sandbox made by this sync.
    let dead = with(seen, |s| s.sandboxes[0].ready = false);
    let got = compute(&pod, &dead, None);
    assert!(matches!(got.sandbox, SandboxAction::Create { .. }));
    assert!(!got
        .steps
        .iter()
        .any(|s| matches!(s, Step::Start { name, .. } if name == "debugger")));
}

#[test]
fn a_blocked_pod_waits_with_the_reason_and_starts_nothing() {
    let pod = init_pod("Always");
    let seen = with(init_status(), |s| {
        s.containers.remove("foo2");
        s.containers.remove("foo3");
    });
    let got = compute(&pod, &seen, Some(("ContainerCreating", "no volume")));
    assert_eq!(got.sandbox, SandboxAction::Blocked);
    assert!(got.steps.is_empty());
    let names: Vec<&str> = got.waiting.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["foo2", "foo3"],
        "only containers without an instance"
    );
    assert!(got
        .waiting
        .iter()
        .all(|(_, r, m)| r == "ContainerCreating" && m == "no volume"));
    // A finished Never pod is not blocked: nothing would start anyway.
    let never = init_pod("Never");
    let finished = with(init_status(), |s| {
        for n in FOO {
            set(s, n, exited(0));
        }
    });
    let got = compute(&never, &finished, Some(("ContainerCreating", "no volume")));
    assert_eq!(got.sandbox, use_sb());
}

#[test]
fn restart_policies() {
    assert!(should_restart("Always", 0));
    assert!(should_restart("Always", 1));
    assert!(!should_restart("OnFailure", 0));
    assert!(should_restart("OnFailure", 137));
    assert!(!should_restart("Never", 1));
}
