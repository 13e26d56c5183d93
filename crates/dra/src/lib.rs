//! Dynamic Resource Allocation as v1.37's `k8s.io/dynamic-resource-allocation`
//! does it: CEL device selectors ([`cel`]) and semantic versions
//! ([`semver`]) for the structured allocator.

pub mod allocator;
pub mod capacity;
pub mod cel;
pub mod cel_cost;
pub mod diagnose;
pub mod pools;
pub mod resourceclaim;
pub mod semver;
pub mod totals;
