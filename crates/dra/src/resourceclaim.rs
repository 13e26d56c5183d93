//! A pod's ResourceClaims, found as upstream's plugin finds them
//! (`foreachPodResourceClaim` with `resourceclaim.Name` and `IsForPod` of
//! `k8s.io/dynamic-resource-allocation/resourceclaim`):
//! in `spec.resourceClaims` order, a claim by name as it is, a template's
//! claim through `status.resourceClaimStatuses` and only if the pod
//! controls it. The first problem is the pod's status message.

use rkube_model::dra::{Dra, ResourceClaim};
use rkube_model::Pod;

/// The claims of `pod`, in order (claims the controller decided not to
/// create are left out), or upstream's message for the first problem.
pub fn pod_claims<'a>(pod: &Pod, dra: &'a Dra) -> Result<Vec<&'a ResourceClaim>, String> {
    let mut out = Vec::new();
    for pc in &pod.resource_claims {
        let (name, check_owner) = match (&pc.claim_name, &pc.template_name) {
            (Some(n), _) => (Some(n.clone()), false),
            (None, Some(_)) => match pod.claim_statuses.iter().find(|(n, _)| *n == pc.name) {
                Some((_, generated)) => (generated.clone(), true),
                None => {
                    return Err(format!(
                        "pod \"{}/{}\": ResourceClaim not created yet",
                        pod.namespace, pod.name
                    ))
                }
            },
            (None, None) => {
                return Err(format!(
                    "pod \"{}/{}\", spec.resourceClaim {:?}: none of the supported fields are set",
                    pod.namespace, pod.name, pc.name
                ))
            }
        };
        // Deliberately not generated (a null name in the status).
        let Some(name) = name else {
            continue;
        };
        let Some(claim) = dra.claim(&pod.namespace, &name) else {
            return Err(format!(
                "could not find ResourceClaim \"{}/{name}\"",
                pod.namespace
            ));
        };
        if claim.deleting {
            return Err(format!("resourceclaim {name:?} is being deleted"));
        }
        if check_owner && claim.owner_pod_uid.as_deref() != Some(pod.uid.as_str()) {
            return Err(format!(
                "ResourceClaim {}/{} was not created for Pod {}/{} (Pod is not owner)",
                claim.namespace, claim.name, pod.namespace, pod.name
            ));
        }
        out.push(claim);
    }
    Ok(out)
}
