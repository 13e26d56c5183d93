//! The private control plane is a real one: readyz, RBAC for the scheduler
//! identity, the Node authorizer for node identities, and the controller
//! manager acting on a Deployment. Needs the binaries from hack/build-k8s,
//! so it is ignored by default; hack/test runs it after building them.

use rkube_testcp::ControlPlane;

fn stdout(o: std::process::Output) -> String {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

#[test]
#[ignore = "needs hack/build-k8s; run by hack/test"]
fn a_private_control_plane_is_real() {
    let cp = ControlPlane::start().expect("control plane starts");
    assert_eq!(
        stdout(cp.kubectl(&["get", "--raw", "/readyz"]).unwrap()).trim(),
        "ok"
    );
    assert!(
        stdout(cp.kubectl(&["get", "ns", "-o", "name"]).unwrap()).contains("namespace/kube-system")
    );

    // Least privilege: the scheduler may bind pods but not delete nodes.
    let sched = cp.scheduler_kubeconfig();
    let can = |args: &[&str]| {
        let o = cp.kubectl_as(&sched, args).unwrap();
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    assert_eq!(
        can(&["auth", "can-i", "create", "pods", "--subresource=binding"]),
        "yes"
    );
    assert_eq!(can(&["auth", "can-i", "delete", "nodes"]), "no");

    // A node identity is who it says it is.
    let node = cp.node_kubeconfig("n1").unwrap();
    let who = stdout(
        cp.kubectl_as(
            &node,
            &[
                "auth",
                "whoami",
                "-o",
                "jsonpath={.status.userInfo.username}",
            ],
        )
        .unwrap(),
    );
    assert_eq!(who, "system:node:n1");

    // The controller manager runs: a Deployment gets a ReplicaSet and pods.
    stdout(
        cp.kubectl(&[
            "create",
            "deployment",
            "web",
            "--image=registry.k8s.io/pause:3.10",
            "--replicas=2",
        ])
        .unwrap(),
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let pods = stdout(
            cp.kubectl(&["get", "pods", "-l", "app=web", "-o", "name"])
                .unwrap(),
        );
        if pods.lines().count() == 2 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "controller-manager created no pods"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    let dir = cp.dir().to_path_buf();
    drop(cp);
    assert!(!dir.exists(), "down removes the state");
}
