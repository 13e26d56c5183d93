//! Plain-text tables (they live in `rkube-report`, shared with the live
//! scheduler's logs).

pub use rkube_report::text::*;
