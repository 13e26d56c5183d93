//! Test support shared by every plugin test binary: the `upstream` binary
//! (`#[path = "../support/mod.rs"]` in `upstream/main.rs`) and the files
//! beside this folder (`mod support;`).
//!
//! - [`selectors`]: labels, label selectors, pod affinity terms, topology
//!   spread constraints;
//! - [`builders`]: pods and nodes, in the spirit of upstream's
//!   `st.MakePod()` / `st.MakeNode()`, with resource lists, taints and
//!   tolerations;
//! - [`run`]: snapshots and node infos, statuses, plugin drivers
//!   (PreFilter/Filter, PreScore/Score/NormalizeScore), the default
//!   framework, and a collector that reports every failing case at once.

// Each test binary compiles its own copy of this module and uses only part
// of it, so what one binary leaves unused is not dead code.
#![allow(dead_code)]

pub mod builders;
pub mod run;
pub mod selectors;

pub use builders::*;
pub use run::*;
pub use selectors::*;
