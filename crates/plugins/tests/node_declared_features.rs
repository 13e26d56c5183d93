//! NodeDeclaredFeatures through the default profile: the features a pod
//! needs are inferred from its spec, and only nodes declaring them all
//! fit. The verdicts were checked against upstream v1.37.2's scheduler
//! (`hack/k8s` oracle) on this cluster.

use rkube_framework::{explain, Framework, Snapshot};
use rkube_model::load::{build, parse_documents};

const CLUSTER: &str = r#"
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Node, metadata: {name: a}, status: {allocatable: {cpu: "4", memory: 8Gi, pods: "10"}, declaredFeatures: [RestartAllContainersOnContainerExits, VolumeBindMountOptions]}}
- {apiVersion: v1, kind: Node, metadata: {name: b}, status: {allocatable: {cpu: "4", memory: 8Gi, pods: "10"}, declaredFeatures: [UserNamespacesHostNetworkSupport, Unknown]}}
- {apiVersion: v1, kind: Node, metadata: {name: c}, status: {allocatable: {cpu: "4", memory: 8Gi, pods: "10"}}}
- {apiVersion: v1, kind: Pod, metadata: {name: bind, namespace: default}, spec: {containers: [{name: c, volumeMounts: [{name: v, mountPath: /v, bindMountOptions: [nosuid]}]}], volumes: [{name: v, emptyDir: {}}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: userns, namespace: default}, spec: {hostNetwork: true, hostUsers: false, containers: [{name: c}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: restart, namespace: default}, spec: {containers: [{name: c, restartPolicy: Never, restartPolicyRules: [{action: RestartAllContainers, exitCodes: {operator: In, values: [42]}}]}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: both, namespace: default}, spec: {hostNetwork: true, hostUsers: false, containers: [{name: c, volumeMounts: [{name: v, mountPath: /v, bindMountOptions: [nosuid]}]}], volumes: [{name: v, emptyDir: {}}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: plain, namespace: default}, spec: {hostUsers: false, containers: [{name: c}]}}
"#;

#[test]
fn pods_needing_node_features_fit_only_nodes_declaring_them() {
    let c = build(&parse_documents("t.yaml", CLUSTER).unwrap(), &mut |_| {
        Ok(false)
    })
    .unwrap();
    let cfg = rkube_config::default_config();
    let fw = Framework::new(&cfg.profiles[0], 0, &rkube_plugins::in_tree()).unwrap();
    let snap = Snapshot::from_cluster(&c);
    let feasible = |pod: &str| {
        let p = c.pods.iter().find(|p| p.name == pod).unwrap();
        let e = explain(&fw, &snap, p).unwrap();
        let nodes: Vec<String> = e
            .nodes
            .iter()
            .filter(|n| n.feasible)
            .map(|n| snap.nodes[n.node].name().to_string())
            .collect();
        (nodes, e.message)
    };
    assert_eq!(feasible("bind").0, ["a"]);
    assert_eq!(feasible("userns").0, ["b"]);
    assert_eq!(feasible("restart").0, ["a"]);
    assert_eq!(feasible("plain").0, ["a", "b", "c"]);
    let (nodes, message) = feasible("both");
    assert!(nodes.is_empty());
    assert!(
        message.starts_with(
            "0/3 nodes are available: 3 node(s) didn't match Pod's required features."
        ),
        "{message}"
    );
}
