//! Random cluster generation for differential conformance against upstream
//! and for invariant (property) tests of the simulator.

pub mod gen;
pub mod gen_csi;
pub mod gen_dra;
pub mod rng;
