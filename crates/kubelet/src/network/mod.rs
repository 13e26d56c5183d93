//! The pod network's node side (upstream's `pkg/kubelet/network`):
//!
//! * [`dns`]: a pod's resolver configuration from its `dnsPolicy` and
//!   `dnsConfig` and the node's `clusterDNS`, `clusterDomain` and
//!   `resolvConf`.
//! * [`iptables`]: the kubelet's own iptables chains and rules
//!   (`makeIPTablesUtilChains`).

pub mod dns;
pub mod iptables;
