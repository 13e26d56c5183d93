//! What the in-tree plugins sign pods with for OpportunisticBatching
//! (upstream's `SignPod` of each plugin and the shared signers of
//! `kube-scheduler/framework/signers.go`): the fragment keys are
//! upstream's; the values are canonical forms of the same fields, so two
//! pods get equal fragments exactly when upstream's would be equal (lists
//! upstream sorts are sorted, sets de-duplicated, absent and empty kept
//! apart where upstream keeps them apart).
//!
//! One deliberate difference: upstream sorts tolerations by key and value
//! only with an unstable sort, so two tolerations with the same key and
//! value may land in either order and make equal pods sign differently;
//! rkube sorts by the whole toleration.

use std::collections::BTreeSet;

use rkube_framework::Signed;
use rkube_model::selector::{NodeSelectorTerm, Requirement};
use rkube_model::Pod;
use serde_json::{json, Value};

pub(crate) const IMAGE_NAMES: &str = "v1.Pod.Spec.CanonicalImageNames()";
pub(crate) const LABELS: &str = "v1.Pod.Labels";
const NODE_NAME: &str = "v1.Pod.Spec.NodeName";
const NODE_AFFINITY: &str = "v1.Pod.Spec.Affinity.NodeAffinity";
const NODE_SELECTOR: &str = "v1.Pod.Spec.Affinity.NodeSelector";
const HOST_PORTS: &str = "v1.Pod.Spec.HostPorts()";
pub(crate) const RESOURCES: &str = "v1.Pod.Spec.ContainerRequestsAndOverheads()";
const TOLERATIONS: &str = "v1.Pod.Spec.Tolerations";
const VOLUMES: &str = "v1.Pod.Spec.Volumes.NonSyntheticSources()";
pub(crate) const FEATURES: &str = "v1.Pod.Spec.RequiredFeatures()";

pub(crate) fn node_name(pod: &Pod) -> (&'static str, Value) {
    (NODE_NAME, json!(pod.node_name))
}

pub(crate) fn tolerations(pod: &Pod) -> (&'static str, Value) {
    let mut t: Vec<String> = pod.tolerations.iter().map(|t| format!("{t:?}")).collect();
    t.sort();
    (TOLERATIONS, json!(t))
}

/// Unique non-zero host ports of containers and init containers, sorted
/// (protocol and host IP are not part of it, as upstream's).
pub(crate) fn host_ports(pod: &Pod) -> (&'static str, Value) {
    let ports: BTreeSet<i32> = pod
        .containers
        .iter()
        .chain(&pod.init_containers)
        .flat_map(|c| c.host_ports.iter().map(|p| p.port))
        .filter(|&p| p != 0)
        .collect();
    (HOST_PORTS, json!(ports))
}

pub(crate) fn volumes(pod: &Pod) -> (&'static str, Value) {
    (VOLUMES, json!(pod.volume_sources))
}

/// Requirements with their values sorted, then sorted.
fn requirements(reqs: &[Requirement]) -> Vec<String> {
    let mut out: Vec<String> = reqs
        .iter()
        .map(|r| {
            let mut values = r.values.clone();
            values.sort();
            format!("{:?}|{:?}|{:?}", r.key, r.op, values)
        })
        .collect();
    out.sort();
    out
}

fn term(t: &NodeSelectorTerm) -> String {
    format!(
        "{:?}|{:?}|{}",
        requirements(&t.match_expressions),
        requirements(&t.match_fields),
        t.invalid
    )
}

/// Node affinity (terms normalized and sorted; none is null) and the
/// node selector map.
pub(crate) fn node_affinity(pod: &Pod) -> [(&'static str, Value); 2] {
    let affinity = pod.node_affinity.as_ref().map_or(Value::Null, |a| {
        let mut required: Vec<String> = a
            .required
            .iter()
            .flat_map(|s| s.terms.iter().map(term))
            .collect();
        required.sort();
        let mut preferred: Vec<String> = a
            .preferred
            .iter()
            .map(|p| format!("{}|{}", p.weight, term(&p.term)))
            .collect();
        preferred.sort();
        json!({"Required": required, "Preferred": preferred})
    });
    [
        (NODE_AFFINITY, affinity),
        (NODE_SELECTOR, json!(pod.node_selector)),
    ]
}

pub(crate) fn fragments(f: impl IntoIterator<Item = (&'static str, Value)>) -> Signed {
    Signed::Fragments(f.into_iter().collect())
}

#[cfg(test)]
mod tests {
    //! Upstream's signer tests (`TestSignatures`, `TestPodTopoSignatures`,
    //! `TestPodAffinitySignature`, `TestImageSignature`, `TestFitSignPod`)
    //! as equalities between pods, through the profiles that sign them.

    use rkube_config::KubeSchedulerConfiguration;
    use rkube_framework::batch::sign_pod;
    use rkube_framework::{Framework, Profiles, Signature, Snapshot};
    use rkube_model::raw::parse_documents;

    /// The default profile with PodTopologySpread's defaults cleared, as
    /// upstream's batching tests configure it.
    fn batching_profile() -> Profiles {
        let cfg: KubeSchedulerConfiguration = rkube_config::load_str(
            "c.yaml",
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: default-scheduler\n  pluginConfig:\n  - name: PodTopologySpread\n    args: {defaultingType: List, defaultConstraints: []}\n",
        )
        .expect("config");
        crate::profiles(&cfg).expect("profiles")
    }

    fn pod(spec: &str) -> rkube_model::Pod {
        let text = format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: p, namespace: default, labels: {{app: a}}}}\nspec: {spec}\n"
        );
        let objs = parse_documents("p.yaml", &text).expect("yaml");
        let c = rkube_model::load::build(&objs, &mut |_| Ok(false)).expect("pod");
        c.pods[0].clone()
    }

    fn sig(fw: &Framework, spec: &str) -> Option<Signature> {
        sign_pod(fw, &pod(spec), &Snapshot::default())
    }

    const BASE: &str = "{containers: [{name: c, image: nginx, resources: {requests: {cpu: 100m}}}]";

    fn with(extra: &str) -> String {
        format!("{BASE}{extra}}}")
    }

    #[test]
    fn the_default_profile_signs_no_pod() {
        let profiles = crate::profiles(&rkube_config::default_config()).expect("defaults");
        let fw = &profiles.frameworks()[0];
        assert!(
            fw.signers().is_none(),
            "PodTopologySpread's system defaults"
        );
        assert!(sign_pod(fw, &pod(&with("")), &Snapshot::default()).is_none());
    }

    #[test]
    fn equal_pods_sign_equal_and_each_field_counts() {
        let profiles = batching_profile();
        let fw = &profiles.frameworks()[0];
        let base = sig(fw, &with("")).expect("signable");
        // Container names, configMap/secret volumes and the order of
        // tolerations or node-selector terms do not count.
        for same in [
            "{containers: [{name: other, image: nginx, resources: {requests: {cpu: 100m}}}]}"
                .to_string(),
            with(
                ", volumes: [{name: s, secret: {secretName: x}}, {name: c, configMap: {name: y}}]",
            ),
        ] {
            assert_eq!(sig(fw, &same).as_ref(), Some(&base), "{same}");
        }
        let t1 = sig(
            fw,
            &with(", tolerations: [{key: a, operator: Exists}, {key: b, operator: Exists}]"),
        );
        let t2 = sig(
            fw,
            &with(", tolerations: [{key: b, operator: Exists}, {key: a, operator: Exists}]"),
        );
        assert_eq!(t1, t2);
        let a1 = sig(fw, &with(", affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: z, operator: In, values: [b, a]}]}, {matchExpressions: [{key: y, operator: Exists}]}]}}}"));
        let a2 = sig(fw, &with(", affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: y, operator: Exists}]}, {matchExpressions: [{key: z, operator: In, values: [a, b]}]}]}}}"));
        assert_eq!(a1, a2);
        // Every signed field tells pods apart.
        for differs in [
            "{containers: [{name: c, image: nginx, resources: {requests: {cpu: 200m}}}]}".to_string(),
            "{containers: [{name: c, image: redis, resources: {requests: {cpu: 100m}}}]}".to_string(),
            with(", nodeSelector: {disk: ssd}"),
            with(", nodeName: n1"),
            with(", tolerations: [{key: a, operator: Exists}]"),
            with(", volumes: [{name: d, emptyDir: {}}]"),
            with(", affinity: {nodeAffinity: {}}"),
            with(", schedulerName: other"),
            "{containers: [{name: c, image: nginx, resources: {requests: {cpu: 100m}}, ports: [{containerPort: 80, hostPort: 8080}]}]}".to_string(),
        ] {
            assert_ne!(sig(fw, &differs).as_ref(), Some(&base), "{differs}");
        }
        assert_ne!(t1.as_ref(), Some(&base));
        assert_ne!(a1.as_ref(), Some(&base));
    }

    #[test]
    fn refusals() {
        let profiles = batching_profile();
        let fw = &profiles.frameworks()[0];
        for refused in [
            with(", topologySpreadConstraints: [{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: a}}}]"),
            with(", affinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{topologyKey: zone, labelSelector: {matchLabels: {app: a}}}]}}"),
            with(", affinity: {podAffinity: {preferredDuringSchedulingIgnoredDuringExecution: [{weight: 1, podAffinityTerm: {topologyKey: zone, labelSelector: {matchLabels: {app: a}}}}]}}"),
            with(", resourceClaims: [{name: gpu, resourceClaimName: c}]"),
        ] {
            assert!(sig(fw, &refused).is_none(), "{refused}");
        }
    }

    /// Labels count (existing pods' terms may select the pod) unless
    /// InterPodAffinity ignores existing pods' preferred terms.
    #[test]
    fn labels_count_unless_ignored() {
        let profiles = batching_profile();
        let fw = &profiles.frameworks()[0];
        let mut a = pod(&with(""));
        let s1 = sign_pod(fw, &a, &Snapshot::default());
        a.labels.insert("pod-index".into(), "1".into());
        let s2 = sign_pod(fw, &a, &Snapshot::default());
        assert_ne!(s1, s2);
        let ipa = crate::inter_pod_affinity::InterPodAffinity::with_args(1, true);
        match rkube_framework::SignPlugin::sign(&ipa, &a, &Snapshot::default()) {
            rkube_framework::Signed::Fragments(f) => assert!(f.is_empty()),
            _ => panic!("signs"),
        }
    }
}
