//! The pod network's node side (upstream's `pkg/kubelet/network`):
//!
//! * [`dns`]: a pod's resolver configuration from its `dnsPolicy` and
//!   `dnsConfig` and the node's `clusterDNS`, `clusterDomain` and
//!   `resolvConf`.

pub mod dns;
