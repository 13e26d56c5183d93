//! Which ResourceClaims a pod uses and what a container gets of them
//! (upstream's `k8s.io/dynamic-resource-allocation/resourceclaim` helpers
//! and the claim info of `pkg/kubelet/cm/dra/claiminfo.go`): pure.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Container, Pod, PodResourceClaim};
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::ResourceExt;

use super::state::{ClaimState, Device, DriverState};

/// The pod's `spec.resourceClaims`.
pub fn pod_resource_claims(pod: &Pod) -> &[PodResourceClaim] {
    pod.spec
        .as_ref()
        .and_then(|s| s.resource_claims.as_deref())
        .unwrap_or_default()
}

/// The claims (and requests) container `c` names in `resources.claims`.
pub fn container_claim_refs(c: &Container) -> &[k8s_openapi::api::core::v1::ResourceClaim] {
    c.resources
        .as_ref()
        .and_then(|r| r.claims.as_deref())
        .unwrap_or_default()
}

/// The name of the ResourceClaim a pod's claim `pc` stands for: `None`
/// when none was generated for it (nothing to prepare), and whether the
/// claim must be owned by the pod (made from a template).
pub fn claim_name(pod: &Pod, pc: &PodResourceClaim) -> Result<(Option<String>, bool), String> {
    if let Some(n) = &pc.resource_claim_name {
        return Ok((Some(n.clone()), false));
    }
    if pc.resource_claim_template_name.is_some() {
        let statuses = pod
            .status
            .as_ref()
            .and_then(|s| s.resource_claim_statuses.as_deref())
            .unwrap_or_default();
        return match statuses.iter().find(|s| s.name == pc.name) {
            Some(s) => Ok((s.resource_claim_name.clone(), true)),
            None => Err(format!(
                "pod \"{}/{}\": ResourceClaim not created yet",
                pod.namespace().unwrap_or_default(),
                pod.name_any()
            )),
        };
    }
    Err(format!(
        "pod \"{}/{}\", spec.resourceClaim {:?}: none of the supported fields are set",
        pod.namespace().unwrap_or_default(),
        pod.name_any(),
        pc.name
    ))
}

/// The pod's claims to prepare: its own (`spec.resourceClaims`), then the
/// one the scheduler made for its extended resources backed by DRA
/// (`status.extendedResourceClaimStatus`), each with whether the pod must
/// own it. Claims nothing was generated for are left out.
pub fn pod_claims(pod: &Pod) -> Result<Vec<(String, bool)>, String> {
    let mut out = Vec::new();
    for pc in pod_resource_claims(pod) {
        if let (Some(name), owned) = claim_name(pod, pc)? {
            out.push((name, owned));
        }
    }
    if let Some(ext) = extended_claim(pod) {
        out.push((ext.to_string(), false));
    }
    Ok(out)
}

/// The claim made for the pod's extended resources backed by DRA.
pub fn extended_claim(pod: &Pod) -> Option<&str> {
    pod.status
        .as_ref()?
        .extended_resource_claim_status
        .as_ref()
        .map(|s| s.resource_claim_name.as_str())
}

/// Whether the scheduler mapped `resource` of container `container` to
/// the pod's claim for extended resources backed by DRA (upstream's
/// `isDRAExtendedResource`): DRA's to serve, not a device plugin's nor the
/// node's capacity.
pub fn is_dra_extended_resource(pod: &Pod, container: &str, resource: &str) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.extended_resource_claim_status.as_ref())
        .is_some_and(|e| {
            e.request_mappings
                .iter()
                .any(|m| m.container_name == container && m.resource_name == resource)
        })
}

/// Whether `pod` uses any ResourceClaim (its own or one for extended
/// resources).
pub fn uses_claims(pod: &Pod) -> bool {
    let own = pod
        .spec
        .as_ref()
        .and_then(|s| s.resource_claims.as_ref())
        .is_some_and(|c| !c.is_empty());
    own || extended_claim(pod).is_some()
}

/// Upstream's `IsForPod`: a claim made from a template belongs to the pod.
pub fn is_for_pod(pod: &Pod, claim: &ResourceClaim) -> Result<(), String> {
    let (ns, name) = (pod.namespace().unwrap_or_default(), pod.name_any());
    let (cns, cname) = (claim.namespace().unwrap_or_default(), claim.name_any());
    if cns != ns {
        return Err(format!(
            "ResourceClaim {cns}/{cname} is not in the same namespace as Pod {ns}/{name}"
        ));
    }
    let uid = pod.uid().unwrap_or_default();
    let owned = claim
        .owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && o.uid == uid);
    if !owned {
        return Err(format!(
            "ResourceClaim {cns}/{cname} was not created for Pod {ns}/{name} (Pod is not owner)"
        ));
    }
    Ok(())
}

/// Upstream's `IsReservedForPod` (PodGroup reservations are behind the
/// `DRAWorkloadResourceClaims` gate, off by default).
pub fn is_reserved_for_pod(pod: &Pod, claim: &ResourceClaim) -> bool {
    let uid = pod.uid().unwrap_or_default();
    claim
        .status
        .as_ref()
        .and_then(|s| s.reserved_for.as_deref())
        .unwrap_or_default()
        .iter()
        .any(|r| r.uid == uid)
}

/// The claim info of an allocated claim (upstream's
/// `newClaimInfoFromClaim`): one driver state per driver of its
/// allocation, no devices yet, no pods.
pub fn claim_state(claim: &ResourceClaim) -> Result<ClaimState, String> {
    let Some(alloc) = claim.status.as_ref().and_then(|s| s.allocation.as_ref()) else {
        return Err("not allocated".into());
    };
    let mut drivers: BTreeMap<String, DriverState> = BTreeMap::new();
    for r in alloc
        .devices
        .as_ref()
        .and_then(|d| d.results.as_deref())
        .unwrap_or_default()
    {
        // Skipping node operations is the `DRAOptionalNodeOperations`
        // gate's (alpha, off): with it off, upstream refuses such a claim.
        if r.skip_node_operations
            .as_ref()
            .is_some_and(|s| !s.is_empty())
        {
            return Err("DRAOptionalNodeOperations feature gate is disabled on kubelet".into());
        }
        drivers.entry(r.driver.clone()).or_default();
    }
    Ok(ClaimState {
        claim_uid: claim.uid().unwrap_or_default(),
        claim_name: claim.name_any(),
        namespace: claim.namespace().unwrap_or_default(),
        pod_uids: BTreeSet::new(),
        driver_state: Some(drivers),
    })
}

/// The CDI device IDs of `info`'s devices serving `request` (all of them
/// for an empty request name, or a device that names no request): the
/// claim info's `cdiDevicesAsList`.
pub fn cdi_devices(info: &ClaimState, request: &str) -> Vec<String> {
    let mut out = Vec::new();
    for d in info.driver_state.iter().flat_map(|m| m.values()) {
        for dev in d.devices.iter().flatten() {
            let names = dev.request_names.as_deref().unwrap_or_default();
            if request.is_empty() || names.is_empty() || names.iter().any(|n| n == request) {
                out.extend(dev.cdi_device_ids.iter().flatten().cloned());
            }
        }
    }
    out
}

/// The (claim, request) pairs container `c` of `pod` uses, in upstream's
/// order of `GetResources`: its `resources.claims` by the pod's claims,
/// then the requests the scheduler mapped to its extended resources.
/// Claims with nothing generated are left out.
pub fn container_requests(pod: &Pod, c: &Container) -> Result<Vec<(String, Vec<String>)>, String> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    let mut add = |claim: String, request: String| match out.iter_mut().find(|(n, _)| *n == claim) {
        Some((_, r)) => r.push(request),
        None => out.push((claim, vec![request])),
    };
    let wanted = container_claim_refs(c);
    for pc in pod_resource_claims(pod) {
        let requests: Vec<&str> = wanted
            .iter()
            .filter(|w| w.name == pc.name)
            .map(|w| w.request.as_deref().unwrap_or(""))
            .collect();
        if requests.is_empty() {
            continue;
        }
        if let (Some(name), _) = claim_name(pod, pc)? {
            for r in requests {
                add(name.clone(), r.to_string());
            }
        }
    }
    if let Some(ext) = pod
        .status
        .as_ref()
        .and_then(|s| s.extended_resource_claim_status.as_ref())
    {
        let asks = |resource: &str| {
            c.resources
                .as_ref()
                .and_then(|r| r.requests.as_ref())
                .and_then(|r| r.get(resource))
                .is_some_and(|q| !is_zero(&q.0))
        };
        for m in &ext.request_mappings {
            if m.container_name == c.name && asks(&m.resource_name) {
                add(ext.resource_claim_name.clone(), m.request_name.clone());
            }
        }
    }
    Ok(out)
}

/// Whether a quantity's text is zero (`0`, `0.0`, `0Gi`, …).
fn is_zero(q: &str) -> bool {
    let digits = q.trim_start_matches(['+', '-']);
    let end = digits
        .find(|ch: char| !(ch.is_ascii_digit() || ch == '.'))
        .unwrap_or(digits.len());
    digits[..end].chars().all(|ch| ch == '0' || ch == '.')
}

/// A prepared device as checkpointed.
pub fn device(d: &super::v1::Device) -> Device {
    Device {
        pool_name: d.pool_name.clone(),
        device_name: d.device_name.clone(),
        share_id: d.share_id.clone(),
        request_names: Some(d.request_names.clone()),
        cdi_device_ids: Some(d.cdi_device_ids.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    fn claim(v: serde_json::Value) -> ResourceClaim {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn claim_names_follow_the_pod_status_for_templates() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"containers": [], "resourceClaims": [
                {"name": "a", "resourceClaimName": "shared"},
                {"name": "b", "resourceClaimTemplateName": "t"},
                {"name": "c", "resourceClaimTemplateName": "t"}]},
            "status": {"resourceClaimStatuses": [{"name": "b", "resourceClaimName": "p-b-x"}, {"name": "c"}]}}));
        assert_eq!(
            pod_claims(&p).unwrap(),
            vec![("shared".into(), false), ("p-b-x".into(), true)]
        );
        let mut not_yet = p.clone();
        not_yet.status = None;
        assert_eq!(
            pod_claims(&not_yet).unwrap_err(),
            r#"pod "ns/p": ResourceClaim not created yet"#
        );
    }

    #[test]
    fn ownership_and_reservation_are_checked() {
        let p = pod(
            serde_json::json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": {"containers": []}}),
        );
        let c = claim(serde_json::json!({
            "metadata": {"name": "c", "namespace": "ns", "uid": "cu",
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u", "controller": true}]},
            "spec": {},
            "status": {"reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}]}}));
        assert_eq!(is_for_pod(&p, &c), Ok(()));
        assert!(is_reserved_for_pod(&p, &c));
        let mut other = c.clone();
        other.metadata.owner_references.as_mut().unwrap()[0].uid = "v".into();
        other.status.as_mut().unwrap().reserved_for = None;
        assert_eq!(
            is_for_pod(&p, &other).unwrap_err(),
            "ResourceClaim ns/c was not created for Pod ns/p (Pod is not owner)"
        );
        assert!(!is_reserved_for_pod(&p, &other));
    }

    #[test]
    fn a_claim_state_has_one_entry_per_driver() {
        let c = claim(serde_json::json!({
            "metadata": {"name": "c", "namespace": "ns", "uid": "cu"},
            "spec": {},
            "status": {"allocation": {"devices": {"results": [
                {"request": "r", "driver": "a.example.com", "pool": "n", "device": "d0"},
                {"request": "r", "driver": "a.example.com", "pool": "n", "device": "d1"},
                {"request": "s", "driver": "b.example.com", "pool": "n", "device": "x"}]}}}}));
        let st = claim_state(&c).unwrap();
        let drivers: Vec<&String> = st.driver_state.as_ref().unwrap().keys().collect();
        assert_eq!(drivers, ["a.example.com", "b.example.com"]);
        let mut unallocated = c.clone();
        unallocated.status = None;
        assert_eq!(claim_state(&unallocated).unwrap_err(), "not allocated");
        let mut skips = c.clone();
        skips
            .status
            .as_mut()
            .unwrap()
            .allocation
            .as_mut()
            .unwrap()
            .devices
            .as_mut()
            .unwrap()
            .results
            .as_mut()
            .unwrap()[0]
            .skip_node_operations = Some(vec!["NodePrepareResources".into()]);
        assert!(claim_state(&skips)
            .unwrap_err()
            .contains("DRAOptionalNodeOperations"));
    }

    #[test]
    fn containers_get_the_cdi_devices_of_their_requests() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": "g"}, {"name": "nic", "resourceClaimName": "n"}],
                "containers": [
                    {"name": "all", "resources": {"claims": [{"name": "gpu"}]}},
                    {"name": "one", "resources": {"claims": [{"name": "gpu", "request": "b"}],
                                                  "requests": {"example.com/gpu": "1", "example.com/none": "0"}}},
                    {"name": "none"}]},
            "status": {"extendedResourceClaimStatus": {"resourceClaimName": "p-ext",
                "requestMappings": [
                    {"containerName": "one", "resourceName": "example.com/gpu", "requestName": "container-1-request-0"},
                    {"containerName": "one", "resourceName": "example.com/none", "requestName": "container-1-request-1"}]}}}));
        let c = |i: usize| p.spec.as_ref().unwrap().containers[i].clone();
        assert_eq!(
            container_requests(&p, &c(0)).unwrap(),
            vec![("g".to_string(), vec![String::new()])]
        );
        assert_eq!(
            container_requests(&p, &c(1)).unwrap(),
            vec![
                ("g".to_string(), vec!["b".to_string()]),
                (
                    "p-ext".to_string(),
                    vec!["container-1-request-0".to_string()]
                )
            ]
        );
        assert!(container_requests(&p, &c(2)).unwrap().is_empty());
        let dev = |name: &str, reqs: &[&str], cdi: &str| Device {
            pool_name: "n".into(),
            device_name: name.into(),
            share_id: None,
            request_names: Some(reqs.iter().map(|r| r.to_string()).collect()),
            cdi_device_ids: Some(vec![cdi.into()]),
        };
        let info = ClaimState {
            driver_state: Some(BTreeMap::from([(
                "d".to_string(),
                DriverState {
                    devices: Some(vec![
                        dev("d0", &["a"], "v/c=d0"),
                        dev("d1", &["b"], "v/c=d1"),
                        dev("d2", &[], "v/c=d2"),
                    ]),
                    skip_node_operations: None,
                },
            )])),
            ..Default::default()
        };
        assert_eq!(cdi_devices(&info, ""), ["v/c=d0", "v/c=d1", "v/c=d2"]);
        assert_eq!(cdi_devices(&info, "b"), ["v/c=d1", "v/c=d2"]);
        assert!(
            is_zero("0") && is_zero("0.0") && is_zero("0Gi") && !is_zero("1") && !is_zero("0.5")
        );
    }
}
