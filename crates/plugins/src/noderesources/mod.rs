//! NodeResourcesFit and NodeResourcesBalancedAllocation, sharing the
//! resource-allocation scorer (upstream's `plugins/noderesources`).

pub mod balanced_allocation;
pub mod fit;
pub mod resource_allocation;
