//! What `rkube scheduler` and `rkube kubelet` share and nothing else does:
//!
//! * [`client`]: the API server client. kube-rs's default transport speaks
//!   HTTP/1.1 only, so every concurrent request needs its own TLS
//!   connection (a handshake, with a client-certificate signature, each
//!   time the pool grows). client-go multiplexes everything over one
//!   HTTP/2 connection; so does this client.
//! * [`logging`]: `-v` levels onto `tracing` filters.
//! * [`signal`]: SIGINT/SIGTERM as a future.

// A daemon reports errors; it does not panic on them (tests may unwrap).
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

pub mod client;
pub mod logging;
pub mod signal;

pub use client::{client, from_kubeconfig, kube_config, ClientError};
