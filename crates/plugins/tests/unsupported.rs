//! Pods using features rkube does not model are rejected explicitly, never
//! scheduled as if the feature were absent.

use rkube_framework::schedule::explain;
use rkube_framework::{Framework, Snapshot};
use rkube_model::load::{build, parse_documents};

#[test]
fn resource_claims_are_rejected_with_a_reason() {
    let yaml = r#"
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Node, metadata: {name: n1}, status: {allocatable: {cpu: "4", memory: 8Gi, pods: "10"}}}
- {apiVersion: v1, kind: Pod, metadata: {name: gpu, namespace: d}, spec: {containers: [{name: c}], resourceClaims: [{name: g, resourceClaimName: gpu-claim}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: plain, namespace: d}, spec: {containers: [{name: c}]}}
"#;
    let c = build(&parse_documents("t.yaml", yaml).unwrap(), &mut |_| {
        Ok(false)
    })
    .unwrap();
    let cfg = rkube_config::default_config();
    let fw = Framework::new(&cfg.profiles[0], 0, &rkube_plugins::in_tree()).unwrap();
    let snap = Snapshot::from_cluster(&c);
    let e = explain(&fw, &snap, &c.pods[0]).unwrap();
    assert!(e.message.starts_with(
        "0/1 nodes are available: rkube does not model DynamicResourceAllocation (ResourceClaims) yet."
    ));
    let e = explain(&fw, &snap, &c.pods[1]).unwrap();
    assert!(e.nodes[0].feasible);
    let dra = e.nodes[0]
        .filters
        .iter()
        .find(|f| f.plugin == "DynamicResources")
        .unwrap();
    assert_eq!(dra.code.as_str(), "Skip");
}
