//! What `rkube scheduler` and `rkube kubelet` share and nothing else does:
//!
//! * [`client`]: the API server client. kube-rs's default transport speaks
//!   HTTP/1.1 only, so every concurrent request needs its own TLS
//!   connection (a handshake, with a client-certificate signature, each
//!   time the pool grows). client-go multiplexes everything over one
//!   HTTP/2 connection; so does this client.
//! * [`server`]: the one HTTP(S) server both daemons serve on (the
//!   scheduler's secure port, the kubelet API and the kubelet's healthz
//!   port): hyper with deadlines for the handshake and the request head,
//!   size limits and a connection cap; [`tls`] makes its certificates.
//! * [`auth`]: delegated authentication (x509 client certificates, bearer
//!   tokens via TokenReview) and authorization (SubjectAccessReview), each
//!   behind a bounded TTL [`cache`], as upstream's delegating
//!   authenticator and authorizer.
//! * [`logging`]: `-v` levels onto `tracing` filters, klog's line format.
//! * [`memory`]: freed memory handed back to the kernel (glibc arenas
//!   capped, trimmed every minute).
//! * [`ratelimit`]: client-go's token bucket, for the daemons' API clients.
//! * [`probe_tls`]: the kubelet's HTTPS probes (no certificate check, as
//!   upstream's prober).
//! * [`signal`]: SIGINT/SIGTERM as a future; [`systemd`]: readiness
//!   (`READY=1`) for a `Type=notify` unit.
//! * [`flags`]: the command line lexed as upstream's pflag;
//!   [`bootstrap`]: the runtime a daemon runs on, and its exit code.

// A daemon reports errors; it does not panic on them (tests may unwrap).
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

pub mod auth;
pub mod bootstrap;
pub mod cache;
pub mod client;
pub mod client_cert;
pub mod flags;
pub mod logging;
pub mod memory;
pub mod probe_tls;
pub mod ratelimit;
pub mod server;
pub mod serving_cert;
pub mod signal;
pub mod systemd;
#[cfg(any(test, feature = "test-util"))]
pub mod testing;
pub mod tls;

pub use client::{client, from_kubeconfig, kube_config, ClientError};
