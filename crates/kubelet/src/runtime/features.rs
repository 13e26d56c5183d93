//! The node features a pod may need (upstream's `nodedeclaredfeatures`
//! framework) and what rkube's kubelet makes of them. Upstream's kubelet
//! v1.37 declares, with its default gates, `ExtendWebSocketsToKubelet`,
//! `InPlacePodLevelResourcesVerticalScaling`,
//! `InPlacePodVerticalScalingInitContainers` and
//! `RestartAllContainersOnContainerExits` in `status.declaredFeatures`.
//! rkube's implements none of them (the API server translates WebSockets
//! to SPDY for it, and it refuses those resizes), so it declares none: the
//! API server refuses such resizes and the scheduler keeps pods needing
//! such a feature off its nodes, as for any node that does not declare it.
//!
//! A pod sent to the node anyway is refused at admission, as upstream's
//! `declaredFeaturesAdmitHandler` refuses a pod needing a feature its node
//! lacks. Container restart policies and rules (`ContainerRestartRules`)
//! are honoured ([`crate::pod::container_should_restart`]); only their
//! `RestartAllContainers` action needs the undeclared feature.

use k8s_openapi::api::core::v1::{Container, Pod};

use super::Rejection;

/// Upstream's admission reason for a pod needing an undeclared feature.
pub const FEATURE_UNSUPPORTED: &str = "PodFeatureUnsupported";

fn rules(c: &Container) -> impl Iterator<Item = &str> {
    c.restart_policy_rules
        .iter()
        .flatten()
        .map(|r| r.action.as_str())
}

/// Whether `pod` can run here: upstream's declared-features check (a
/// `RestartAllContainers` rule needs `RestartAllContainersOnContainerExits`).
pub fn admit(pod: &Pod) -> Result<(), Rejection> {
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(());
    };
    let mut all = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers);
    if all.any(|c| rules(c).any(|a| a == "RestartAllContainers")) {
        return Err(Rejection {
            reason: FEATURE_UNSUPPORTED.into(),
            message: "Pod requires node features that are not available: RestartAllContainersOnContainerExits".into(),
        });
    }
    Ok(())
}

/// The reason a pod with ResourceClaims is refused on a node with
/// containers.
pub const DYNAMIC_RESOURCES_UNSUPPORTED: &str = "DynamicResourcesUnsupported";

/// Whether `pod` can run on a CRI runtime made without a DRA manager
/// (`CriParts::bare`), which cannot prepare ResourceClaims: a pod with
/// claims — its own, or those generated for extended resources backed by
/// DRA — is refused rather than started without its devices. The kubelet's
/// own CRI runtime has the manager ([`crate::dra`]); simulated nodes run no
/// containers and admit such pods.
pub fn admit_without_claims(pod: &Pod) -> Result<(), Rejection> {
    let own = pod
        .spec
        .as_ref()
        .and_then(|s| s.resource_claims.as_ref())
        .is_some_and(|c| !c.is_empty());
    let extended = pod
        .status
        .as_ref()
        .and_then(|s| s.extended_resource_claim_status.as_ref())
        .is_some();
    if own || extended {
        return Err(Rejection {
            reason: DYNAMIC_RESOURCES_UNSUPPORTED.into(),
            message: "this runtime has no DRA manager and cannot prepare ResourceClaims: the pod would run without its devices".into(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({"spec": v})).unwrap()
    }

    #[test]
    fn refuses_what_it_cannot_honour_and_admits_the_rest() {
        let ok = [
            serde_json::json!({"containers": [{"name": "c"}]}),
            // A sidecar's restartPolicy is honoured.
            serde_json::json!({"initContainers": [{"name": "s", "restartPolicy": "Always"}],
                               "containers": [{"name": "c"}]}),
        ];
        for v in ok {
            assert_eq!(admit(&pod(v.clone())), Ok(()), "{v}");
        }
        let all = pod(
            serde_json::json!({"containers": [{"name": "c", "restartPolicy": "Never",
            "restartPolicyRules": [{"action": "RestartAllContainers",
                                    "exitCodes": {"operator": "In", "values": [42]}}]}]}),
        );
        let r = admit(&all).unwrap_err();
        assert_eq!(r.reason, "PodFeatureUnsupported");
        assert_eq!(
            r.message,
            "Pod requires node features that are not available: RestartAllContainersOnContainerExits"
        );
        // Container restart policies and rules are honoured: admitted.
        let honoured = [
            serde_json::json!({"containers": [{"name": "a"}, {"name": "b", "restartPolicy": "Never"}]}),
            serde_json::json!({"initContainers": [{"name": "i", "restartPolicy": "OnFailure"}],
                               "containers": [{"name": "c"}]}),
            serde_json::json!({"containers": [{"name": "r", "restartPolicy": "Never",
                "restartPolicyRules": [{"action": "Restart",
                                        "exitCodes": {"operator": "In", "values": [1]}}]}]}),
        ];
        for v in honoured {
            assert_eq!(admit(&pod(v.clone())), Ok(()), "{v}");
        }
    }

    #[test]
    fn pods_with_claims_are_refused_not_run_without_devices() {
        let plain = pod(serde_json::json!({"containers": [{"name": "c"}]}));
        assert_eq!(admit_without_claims(&plain), Ok(()));
        let empty = pod(serde_json::json!({"resourceClaims": [], "containers": [{"name": "c"}]}));
        assert_eq!(admit_without_claims(&empty), Ok(()));
        let claims = pod(serde_json::json!({
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}],
            "containers": [{"name": "c", "resources": {"claims": [{"name": "gpu"}]}}]}));
        let r = admit_without_claims(&claims).unwrap_err();
        assert_eq!(r.reason, "DynamicResourcesUnsupported");
        let mut extended = plain.clone();
        extended.status = Some(
            serde_json::from_value(serde_json::json!({"extendedResourceClaimStatus": {
                "resourceClaimName": "p-extended-resources-x",
                "requestMappings": [{"containerName": "c", "resourceName": "example.com/gpu",
                                     "requestName": "container-0-request-0"}]}}))
            .unwrap(),
        );
        assert_eq!(
            admit_without_claims(&extended).unwrap_err().reason,
            "DynamicResourcesUnsupported"
        );
    }
}
