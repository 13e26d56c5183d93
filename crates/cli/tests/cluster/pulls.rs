//! Pulls from the cluster's registries, as a node pulls in production:
//! each `imagePullPolicy`, a private image with and without the right
//! `imagePullSecrets` (and the kubelet's check that an image pulled with a
//! Secret is not handed to a pod without it), upstream's reasons and
//! messages, and a pull interrupted by stopping the registry (back-off,
//! then success once it is back).

use std::time::Duration;

use super::{Cluster, Registry};

/// A pod on `node` running `image` with `policy`, and `extra` spec lines.
fn pod(name: &str, node: &str, image: &str, policy: &str, extra: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  nodeName: {node}
  terminationGracePeriodSeconds: 1
  {extra}
  containers:
  - name: c
    image: "{image}"
    imagePullPolicy: {policy}
    command: ["sleep", "3600"]
"#
    )
}

pub fn check(c: &Cluster, reg: &Registry) {
    let public = format!("{}/busybox:1", reg.registry);
    let private = format!("{}/busybox:1", reg.private);
    assert_eq!(c.push(false, "rkube.local/busybox:1"), public);
    assert_eq!(c.push(true, "rkube.local/busybox:1"), private);
    let minute = Duration::from_secs(60);

    // Always pulls (the node's own registry credentials); IfNotPresent then
    // uses the image the node has.
    c.apply(&pod("pull-always", "node-1", &public, "Always", ""));
    c.wait_running("pull-always", minute);
    let pulled = c.event_message("pull-always", "Pulled");
    let prefix = format!("Successfully pulled image \"{public}\" in ");
    assert!(
        pulled.starts_with(&prefix)
            && pulled.contains(" including waiting). Image size: ")
            && pulled.ends_with(" bytes."),
        "{pulled}"
    );
    c.apply(&pod("pull-present", "node-1", &public, "IfNotPresent", ""));
    c.wait_running("pull-present", minute);
    assert_eq!(
        c.event_message("pull-present", "Pulled"),
        format!("Container image \"{public}\" already present on machine and can be accessed by the pod")
    );

    // Never, on a node without the image.
    c.apply(&pod("pull-never", "node-2", &public, "Never", ""));
    let (reason, msg) = c.wait_waiting("pull-never", &["ErrImageNeverPull"], minute);
    assert_eq!(reason, "ErrImageNeverPull");
    assert_eq!(
        msg,
        format!("Container image \"{public}\" is not present with pull policy of Never")
    );

    // The private registry: no Secret, 401 from the registry in upstream's
    // words, then the back-off carrying that error.
    c.apply(&pod("private-none", "node-1", &private, "IfNotPresent", ""));
    c.wait_waiting("private-none", &["ImagePullBackOff"], minute);
    let failed = c.event_message("private-none", "Failed");
    let want = format!(
        "Failed to pull image \"{private}\": rpc error: code = Unknown desc = failed to pull and unpack image \"{private}\""
    );
    assert!(
        failed.starts_with(&want) && failed.contains("401 Unauthorized"),
        "{failed}"
    );
    let (_, msg) = c.wait_waiting("private-none", &["ImagePullBackOff"], minute);
    let want = format!(
        "Back-off pulling image \"{private}\": ErrImagePull: rpc error: code = Unknown desc = failed to pull and unpack image"
    );
    assert!(msg.starts_with(&want), "{msg}");

    // With the Secret it runs; a pod without it on the same node does not
    // get the image the Secret pulled (it pulls, and is refused).
    c.ok(&[
        "create",
        "secret",
        "docker-registry",
        "regcred",
        &format!("--docker-server={}", reg.private),
        &format!("--docker-username={}", reg.private_user),
        &format!("--docker-password={}", reg.private_password),
    ]);
    c.apply(&pod(
        "private-secret",
        "node-1",
        &private,
        "IfNotPresent",
        "imagePullSecrets: [{name: regcred}]",
    ));
    c.wait_running("private-secret", minute);
    c.apply(&pod(
        "private-reuse",
        "node-1",
        &private,
        "IfNotPresent",
        "",
    ));
    let (reason, _) = c.wait_waiting(
        "private-reuse",
        &["ErrImagePull", "ImagePullBackOff"],
        minute,
    );
    assert!(reason == "ErrImagePull" || reason == "ImagePullBackOff");

    // A pull while the registry is down fails and backs off; once the
    // registry is back a later attempt succeeds.
    c.ctr(
        1,
        &[
            "images",
            "tag",
            "rkube.local/busybox:1",
            "rkube.local/busybox:late",
        ],
    );
    let late = c.push(false, "rkube.local/busybox:late");
    c.cluster(&["registry", "stop"]);
    c.apply(&pod("late", "node-2", &late, "IfNotPresent", ""));
    let (_, msg) = c.wait_waiting("late", &["ErrImagePull", "ImagePullBackOff"], minute);
    assert!(msg.contains("connection refused"), "{msg}");
    c.cluster(&["registry", "start"]);
    c.wait_running("late", Duration::from_secs(90));
    assert!(
        c.event_count("late", "Failed") >= 1,
        "the pull failed while the registry was down"
    );
}
