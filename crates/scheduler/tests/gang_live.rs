//! `rkube scheduler --feature-gates GenericWorkload=true` against a genuine
//! kube-apiserver v1.37 with the gate on and `scheduling.k8s.io/v1beta1`
//! served: a Job-style gang of three (a PodGroup with `minCount: 3`) on two
//! nodes that hold only two of its pods binds none of them, each member
//! gets upstream's message (the two that fit "pod group is unschedulable,
//! …", the third its own FailedScheduling message) and the PodGroup gets
//! `PodGroupInitiallyScheduled=False` (Unschedulable); a third node lets
//! all three bind at once, on three nodes, and the condition turns True.
//! A second gang of two that fits binds at once; a pending member whose
//! sibling arrives already bound is let in and bound. Last, a gang of
//! higher priority that fits only by preemption (workload-aware
//! preemption): its members are nominated, two of the first gang's pods get
//! `DisruptionTarget` and are deleted in the PodGroup's name, and once they
//! are gone the gang binds where it was nominated.
//!
//! Needs the binaries from hack/build-k8s, so it is ignored by default;
//! hack/test runs it.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use rkube_testcp::support::{client, wait_for};
use rkube_testcp::ControlPlane;
use serde_json::json;

async fn create_node(nodes: &Api<Node>, name: &str) {
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let res = json!({"cpu": "2", "memory": "4Gi", "pods": "110"});
    let status = json!({"status": {
        "capacity": res, "allocatable": res,
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "message": "fake node", "lastHeartbeatTime": now, "lastTransitionTime": now}],
    }});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

async fn create_group(groups: &Api<PodGroup>, name: &str, min: i32) {
    let g: PodGroup = serde_json::from_value(json!({
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min}}},
    }))
    .unwrap();
    groups.create(&PostParams::default(), &g).await.unwrap();
}

async fn create_member(pods: &Api<Pod>, name: &str, group: &str, cpu: &str) {
    let p: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "automountServiceAccountToken": false,
            "tolerations": [{"operator": "Exists"}],
            "schedulingGroup": {"podGroupName": group},
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": cpu}}}],
        },
    }))
    .unwrap();
    pods.create(&PostParams::default(), &p).await.unwrap();
}

/// The pod's PodScheduled=False message, once it has one.
fn unschedulable_message(p: &Pod) -> Option<String> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
        .and_then(|c| c.message.clone())
}

/// The group's PodGroupInitiallyScheduled (status, reason, message).
fn group_condition(g: &PodGroup) -> Option<(String, String, String)> {
    g.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodGroupInitiallyScheduled")
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

const GROUP_FAILED: &str = "pod group is unschedulable, minCount (3) cannot be satisfied: 2 scheduled, 0 remaining, pod group preemption: No preemption victims found for incoming preemptor";

#[test]
#[ignore = "needs hack/build-k8s; run by hack/test"]
fn a_gang_binds_all_or_nothing_on_a_real_api_server() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("warn,rkube_scheduler=info")
        .with_test_writer()
        .with_ansi(false)
        .try_init();
    let cp = ControlPlane::start_with(&[
        ("RKUBE_CP_FEATURE_GATES", "GenericWorkload=true"),
        ("RKUBE_CP_RUNTIME_CONFIG", "scheduling.k8s.io/v1beta1=true"),
    ])
    .expect("control plane starts");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(scenario(&cp));
}

async fn scenario(cp: &ControlPlane) {
    let admin = client(cp.kubeconfig()).await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cert_dir = std::env::temp_dir().join(format!("rkube-gang-certs-{}", std::process::id()));
    let opts = rkube_scheduler::options::parse(
        [
            "--kubeconfig",
            cp.scheduler_kubeconfig().to_str().unwrap(),
            "--bind-address=127.0.0.1",
            &format!("--secure-port={port}"),
            &format!("--cert-dir={}", cert_dir.display()),
            "--leader-elect=false",
            "--feature-gates=GenericWorkload=true",
        ]
        .map(String::from),
    )
    .unwrap();
    assert!(opts.generic_workload);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let sched = tokio::spawn(rkube_scheduler::run_with(
        opts,
        async {
            let _ = stopped.await;
        },
        rkube_scheduler::Hooks::default(),
    ));

    let nodes: Api<Node> = Api::all(admin.clone());
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    let groups: Api<PodGroup> = Api::namespaced(admin.clone(), "default");
    create_node(&nodes, "node-a").await;
    create_node(&nodes, "node-b").await;
    create_group(&groups, "train", 3).await;
    for i in 0..3 {
        create_member(&pods, &format!("train-{i}"), "train", "1500m").await;
    }

    // Two of the three fit: none binds, each says why.
    let messages = wait_for(
        "the gang's FailedScheduling messages",
        Duration::from_secs(60),
        || async {
            let mut out = Vec::new();
            for i in 0..3 {
                let p = pods.get(&format!("train-{i}")).await.ok()?;
                assert!(
                    p.spec.as_ref().and_then(|s| s.node_name.clone()).is_none(),
                    "a member of a gang that does not fit was bound: {}",
                    p.name_any()
                );
                out.push(unschedulable_message(&p)?);
            }
            Some(out)
        },
    )
    .await;
    let mut sorted = messages.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        [
            "0/2 nodes are available: 2 Insufficient cpu.".to_string(),
            GROUP_FAILED.to_string(),
            GROUP_FAILED.to_string(),
        ],
        "{messages:?}"
    );
    let (status, reason, message) =
        wait_for("the group's condition", Duration::from_secs(20), || async {
            group_condition(&groups.get("train").await.ok()?)
        })
        .await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "Unschedulable")
    );
    assert!(
        message.starts_with("pod group is unschedulable, minCount (3)"),
        "{message}"
    );

    // A third node: all three bind, one per node.
    create_node(&nodes, "node-c").await;
    let placed = wait_for("the gang bound", Duration::from_secs(60), || async {
        let mut out = Vec::new();
        for i in 0..3 {
            let p = pods.get(&format!("train-{i}")).await.ok()?;
            out.push(p.spec.and_then(|s| s.node_name)?);
        }
        Some(out)
    })
    .await;
    let mut distinct = placed.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 3, "{placed:?}");
    let (status, reason, _) = wait_for(
        "the group's condition turns True",
        Duration::from_secs(20),
        || async { group_condition(&groups.get("train").await.ok()?).filter(|c| c.0 == "True") },
    )
    .await;
    assert_eq!((status.as_str(), reason.as_str()), ("True", "Scheduled"));

    // A gang that fits binds at once; a pod of a group that does not exist
    // waits with upstream's message.
    create_group(&groups, "pair", 2).await;
    create_member(&pods, "pair-0", "pair", "100m").await;
    create_member(&pods, "pair-1", "pair", "100m").await;
    create_member(&pods, "orphan", "nowhere", "100m").await;
    wait_for("the pair bound", Duration::from_secs(60), || async {
        let mut n = 0;
        for name in ["pair-0", "pair-1"] {
            let p = pods.get(name).await.ok()?;
            p.spec.and_then(|s| s.node_name)?;
            n += 1;
        }
        (n == 2).then_some(())
    })
    .await;
    let orphan = pods.get("orphan").await.unwrap();
    assert!(orphan.spec.and_then(|s| s.node_name).is_none());

    // A gang of two whose second member arrives already bound (a member
    // running since before a restart, say): the pending one waits for it,
    // then joins it.
    create_group(&groups, "late", 2).await;
    create_member(&pods, "late-0", "late", "100m").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let waiting = pods.get("late-0").await.unwrap();
    assert!(waiting
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .is_none());
    let bound: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "late-1", "namespace": "default"},
        "spec": {
            "nodeName": "node-c",
            "automountServiceAccountToken": false,
            "tolerations": [{"operator": "Exists"}],
            "schedulingGroup": {"podGroupName": "late"},
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": "100m"}}}],
        },
    }))
    .unwrap();
    pods.create(&PostParams::default(), &bound).await.unwrap();
    wait_for(
        "the pending member of the late gang bound",
        Duration::from_secs(30),
        || async { pods.get("late-0").await.ok()?.spec?.node_name },
    )
    .await;

    preemption(&admin, &pods).await;

    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(30), sched)
        .await
        .expect("scheduler stops")
        .unwrap()
        .unwrap();
}

/// A gang of priority 1000 (two 1.5-CPU members) on three 2-CPU nodes that
/// each run a 1.5-CPU member of `train` (priority 0).
async fn preemption(admin: &kube::Client, pods: &Api<Pod>) {
    use k8s_openapi::api::scheduling::v1::PriorityClass;
    let classes: Api<PriorityClass> = Api::all(admin.clone());
    let class: PriorityClass = serde_json::from_value(json!({
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": "urgent"}, "value": 1000,
    }))
    .unwrap();
    classes
        .create(&PostParams::default(), &class)
        .await
        .unwrap();
    let groups: Api<PodGroup> = Api::namespaced(admin.clone(), "default");
    let g: PodGroup = serde_json::from_value(json!({
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
        "metadata": {"name": "urgent", "namespace": "default"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}, "priorityClassName": "urgent"},
    }))
    .unwrap();
    // The Priority admission plugin reads classes from its informer: right
    // after the create it may not know the class yet (403).
    wait_for(
        "the urgent group admitted",
        Duration::from_secs(20),
        || async {
            match groups.create(&PostParams::default(), &g).await {
                Ok(_) => Some(()),
                Err(kube::Error::Api(e)) if e.code == 403 => None,
                Err(e) => panic!("creating the group: {e}"),
            }
        },
    )
    .await;
    for i in 0..2 {
        let p: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("urgent-{i}"), "namespace": "default"},
            "spec": {
                "priorityClassName": "urgent",
                "automountServiceAccountToken": false,
                "tolerations": [{"operator": "Exists"}],
                "schedulingGroup": {"podGroupName": "urgent"},
                "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                "resources": {"requests": {"cpu": "1500m"}}}],
            },
        }))
        .unwrap();
        pods.create(&PostParams::default(), &p).await.unwrap();
    }
    let nominated = wait_for(
        "the urgent gang nominated",
        Duration::from_secs(60),
        || async {
            let mut out = Vec::new();
            for i in 0..2 {
                let p = pods.get(&format!("urgent-{i}")).await.ok()?;
                out.push(p.status?.nominated_node_name?);
            }
            Some(out)
        },
    )
    .await;
    assert_ne!(nominated[0], nominated[1], "{nominated:?}");
    // Two of train's pods are being deleted, with upstream's condition; no
    // kubelet runs here, so finish their graceful deletion as one would.
    let victims = wait_for(
        "two victims terminating",
        Duration::from_secs(20),
        || async {
            let mut out = Vec::new();
            for i in 0..3 {
                let p = pods.get(&format!("train-{i}")).await.ok()?;
                if p.metadata.deletion_timestamp.is_some() {
                    out.push(p);
                }
            }
            (out.len() == 2).then_some(out)
        },
    )
    .await;
    for v in &victims {
        let condition = v
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == "DisruptionTarget")
            .expect("a DisruptionTarget condition");
        assert_eq!(condition.reason.as_deref(), Some("PreemptionByScheduler"));
        assert_eq!(
            condition.message.as_deref(),
            Some("default-scheduler: preempting to accommodate a higher priority podgroup")
        );
        let node = v.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap();
        assert!(
            nominated.contains(&node),
            "victim on {node}, nominated {nominated:?}"
        );
        pods.delete(
            &v.name_any(),
            &kube::api::DeleteParams::default().grace_period(0),
        )
        .await
        .unwrap();
    }
    let placed = wait_for("the urgent gang bound", Duration::from_secs(60), || async {
        let mut out = Vec::new();
        for i in 0..2 {
            out.push(
                pods.get(&format!("urgent-{i}"))
                    .await
                    .ok()?
                    .spec?
                    .node_name?,
            );
        }
        Some(out)
    })
    .await;
    assert_eq!(placed, nominated);
}
