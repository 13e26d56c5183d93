//! DynamicResources' PodGroupPostFilter (GenericWorkload): after a failed
//! pod-group cycle, upstream deallocates, for each member whose filters
//! found a claim allocated where the member cannot run, one such claim that
//! no other pod has reserved (picked at random among them), and always
//! answers Unschedulable "deallocation and deletion of ResourceClaims
//! completed" — the reason DefaultPreemption's own Unschedulable reasons
//! are appended to.
//!
//! rkube gives that answer. The deallocation itself is not modelled: a
//! member with an allocated claim that no other pod has reserved is
//! reported as such ([`PodGroupPostFilterResult::not_modelled`]).

use rkube_framework::{
    Code, PodGroupPostFilterHandle, PodGroupPostFilterPlugin, PodGroupPostFilterResult, Status,
};
use rkube_model::pod_groups::PodGroup;
use rkube_model::Pod;

use super::DynamicResources;

/// Upstream's reason.
pub const COMPLETED: &str = "deallocation and deletion of ResourceClaims completed";

impl PodGroupPostFilterPlugin for DynamicResources {
    fn pod_group_post_filter(
        &self,
        group: &PodGroup,
        members: &[&Pod],
        handle: &mut dyn PodGroupPostFilterHandle,
    ) -> PodGroupPostFilterResult {
        let mut r = PodGroupPostFilterResult::status(Status::new(Code::Unschedulable, COMPLETED));
        let Some(dra) = handle.snapshot().dra.as_deref() else {
            return r;
        };
        let idle = members.iter().find_map(|m| {
            let claims = rkube_dra::resourceclaim::pod_claims(m, dra).ok()?;
            claims
                .into_iter()
                .find(|c| {
                    c.allocation.is_some()
                        && match c.reserved_for.as_slice() {
                            [] => true,
                            [only] => only.uid == m.uid,
                            _ => false,
                        }
                })
                .map(|c| (m.key(), format!("{}/{}", c.namespace, c.name)))
        });
        if let Some((pod, claim)) = idle {
            r.not_modelled = Some(format!(
                "pod group {} does not fit and its member {pod} has the allocated claim {claim}, which upstream's DynamicResources may deallocate (PodGroupPostFilter); rkube does not model that deallocation",
                group.key()
            ));
        }
        r
    }
}
