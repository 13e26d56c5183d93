//! The model's DRA results back in `resource.k8s.io/v1` form: what the live
//! scheduler's PreBind writes to a ResourceClaim's status.

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::resource::v1 as api;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;

use crate::dra::{Allocation, Consumer, DeviceToleration};
use crate::selector::{NodeSelector, Operator, Requirement};

/// `status.allocation` as the API server takes it.
pub fn allocation(a: &Allocation) -> api::AllocationResult {
    let results = a
        .devices
        .iter()
        .map(|r| api::DeviceRequestAllocationResult {
            request: r.request.clone(),
            driver: r.driver.clone(),
            pool: r.pool.clone(),
            device: r.device.clone(),
            admin_access: r.admin_access.then_some(true),
            tolerations: non_empty(r.tolerations.iter().map(toleration).collect()),
            share_id: r.share_id.clone(),
            consumed_capacity: (!r.consumed_capacity.is_empty()).then(|| {
                let prefix = format!("{}/", r.driver);
                r.consumed_capacity
                    .iter()
                    .map(|(k, q)| {
                        let name = k.strip_prefix(&prefix).unwrap_or(k);
                        (name.to_string(), ApiQuantity(q.to_string()))
                    })
                    .collect()
            }),
            binding_conditions: non_empty(r.binding_conditions.clone()),
            binding_failure_conditions: non_empty(r.binding_failure_conditions.clone()),
            skip_node_operations: None,
        })
        .collect();
    let config = a
        .config
        .iter()
        .map(|c| api::DeviceAllocationConfiguration {
            source: c.source.clone(),
            requests: non_empty(c.config.requests.clone()),
            opaque: Some(api::OpaqueDeviceConfiguration {
                driver: c.config.driver.clone(),
                parameters: RawExtension(c.config.parameters.clone()),
            }),
        })
        .collect();
    api::AllocationResult {
        allocation_timestamp: None,
        devices: Some(api::DeviceAllocationResult {
            results: non_empty(results),
            config: non_empty(config),
        }),
        node_selector: a.node_selector.as_ref().map(node_selector),
    }
}

/// A `status.reservedFor` entry.
pub fn consumer(c: &Consumer) -> api::ResourceClaimConsumerReference {
    api::ResourceClaimConsumerReference {
        api_group: (!c.api_group.is_empty()).then(|| c.api_group.clone()),
        resource: c.resource.clone(),
        name: c.name.clone(),
        uid: c.uid.clone(),
    }
}

fn non_empty<T>(v: Vec<T>) -> Option<Vec<T>> {
    (!v.is_empty()).then_some(v)
}

fn toleration(t: &DeviceToleration) -> api::DeviceToleration {
    let opt = |s: &str| (!s.is_empty()).then(|| s.to_string());
    api::DeviceToleration {
        key: opt(&t.key),
        operator: opt(&t.operator),
        value: opt(&t.value),
        effect: opt(&t.effect),
        toleration_seconds: t.toleration_seconds,
    }
}

fn node_selector(s: &NodeSelector) -> core::NodeSelector {
    let reqs = |rs: &[Requirement]| non_empty(rs.iter().map(requirement).collect());
    core::NodeSelector {
        node_selector_terms: s
            .terms
            .iter()
            .map(|t| core::NodeSelectorTerm {
                match_expressions: reqs(&t.match_expressions),
                match_fields: reqs(&t.match_fields),
            })
            .collect(),
    }
}

fn requirement(r: &Requirement) -> core::NodeSelectorRequirement {
    let op = match r.op {
        Operator::In => "In",
        Operator::NotIn => "NotIn",
        Operator::Exists => "Exists",
        Operator::DoesNotExist => "DoesNotExist",
        Operator::Gt => "Gt",
        Operator::Lt => "Lt",
    };
    core::NodeSelectorRequirement {
        key: r.key.clone(),
        operator: op.into(),
        values: non_empty(r.values.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dra::DeviceResult;
    use crate::selector::NodeSelectorTerm;

    /// What PreBind writes converts back to the allocation it came from.
    #[test]
    fn allocation_round_trips_through_the_api_form() {
        let a = Allocation {
            devices: vec![DeviceResult {
                request: "gpus/large".into(),
                driver: "gpu.example.com".into(),
                pool: "node-1".into(),
                device: "gpu-3".into(),
                admin_access: true,
                consumed_capacity: [(
                    "gpu.example.com/memory".to_string(),
                    "40Gi".parse().unwrap(),
                )]
                .into(),
                ..Default::default()
            }],
            config: vec![],
            node_selector: Some(NodeSelector {
                terms: vec![NodeSelectorTerm {
                    match_fields: vec![Requirement {
                        key: "metadata.name".into(),
                        op: Operator::In,
                        values: vec!["node-1".into()],
                    }],
                    ..Default::default()
                }],
            }),
        };
        let api = allocation(&a);
        let json = serde_json::to_value(&api).unwrap();
        let memory = json["devices"]["results"][0]["consumedCapacity"]["memory"]
            .as_str()
            .unwrap();
        assert_eq!(
            crate::Quantity::parse(memory).unwrap(),
            crate::Quantity::parse("40Gi").unwrap(),
            "the capacity is the driver-less name's: {json}"
        );
        assert_eq!(
            json["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["operator"],
            "In"
        );
        let claim = serde_json::json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": {"devices": {"requests": [{"name": "gpus", "firstAvailable": [
                {"name": "large", "deviceClassName": "gpu"}]}]}},
            "status": {"allocation": json},
        });
        let claim: api::ResourceClaim = serde_json::from_value(claim).unwrap();
        let back = crate::dra::resource_claim(&claim).unwrap();
        assert_eq!(back.allocation, Some(a));
    }
}
