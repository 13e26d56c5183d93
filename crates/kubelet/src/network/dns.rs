//! A pod's resolver configuration (upstream's `pkg/kubelet/network/dns`):
//! what the runtime writes as the sandbox's `/etc/resolv.conf`, from the
//! pod's `dnsPolicy` and `dnsConfig` and the node's `clusterDNS`,
//! `clusterDomain` and `resolvConf`.
//!
//! * `ClusterFirst` (not on the host network) and `ClusterFirstWithHostNet`:
//!   the cluster DNS servers only, the search path `<ns>.svc.<domain>`,
//!   `svc.<domain>`, `<domain>` and then the host's, and `ndots:5`. With no
//!   `clusterDNS` the pod falls back to `Default`, with a
//!   `MissingClusterDNS` warning.
//! * `Default` (and `ClusterFirst` on the host network): the node's
//!   resolver file; with `resolvConf: ""` a local resolver (`127.0.0.1`, or
//!   `::1` on IPv6 nodes) and the search path `.`.
//! * `None`: nothing but the pod's `dnsConfig`.
//!
//! `dnsConfig` is then merged in (nameservers and searches appended without
//! duplicates, options overriding by name) and the result cut to the
//! resolver's limits — 3 nameservers, 32 search paths of at most 253
//! characters and 2,048 characters in all — with a `DNSConfigForming`
//! warning naming what was applied. Everything here is pure except
//! [`host_config`], which reads the node's file.

use std::net::IpAddr;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::{Pod, PodDNSConfig};
use kube::ResourceExt;

use crate::pod::{host_network, pod_namespace};

/// At most this many nameservers (upstream's `MaxDNSNameservers`).
pub const MAX_NAMESERVERS: usize = 3;
/// At most this many search paths (`MaxDNSSearchPaths`).
pub const MAX_SEARCH_PATHS: usize = 32;
/// The search line's length limit (`MaxDNSSearchListChars`).
pub const MAX_SEARCH_LIST_CHARS: usize = 2048;
/// A search path longer than this is dropped (some resolvers abort on it).
const MAX_SEARCH_PATH_CHARS: usize = 253;
/// The resolver file is read up to this size (upstream's 10 MB).
const MAX_RESOLV_CONF_BYTES: u64 = 10 << 20;
/// The options of `ClusterFirst` pods.
const CLUSTER_OPTIONS: &[&str] = &["ndots:5"];

/// The resolver configuration handed to the runtime (the CRI's DNSConfig).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DnsConfig {
    /// `nameserver` lines.
    pub servers: Vec<String>,
    /// The `search` line.
    pub searches: Vec<String>,
    /// The `options` line, each `name` or `name:value`.
    pub options: Vec<String>,
}

/// The node's DNS settings (KubeletConfiguration).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings {
    /// `clusterDNS`.
    pub cluster_dns: Vec<IpAddr>,
    /// `clusterDomain` (empty: none).
    pub cluster_domain: String,
    /// `resolvConf` (`None`: the empty string, no host resolver file).
    pub resolv_conf: Option<PathBuf>,
    /// The node's IPs (the local resolver's family without a file).
    pub node_ips: Vec<IpAddr>,
}

/// A warning Event on the pod: reason and message.
pub type Warning = (&'static str, String);

/// A resolver file's nameservers, search path and options, as upstream
/// reads it: nameservers accumulate, the last `search` line wins (a lone
/// `.` dropped, trailing dots trimmed), options override by name. A
/// `nameserver` line without an address is an error.
pub fn parse_resolv_conf(text: &str) -> Result<DnsConfig, String> {
    let mut out = DnsConfig::default();
    let mut empty_nameserver = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.first().copied() {
            Some("nameserver") => match fields.get(1) {
                Some(ip) => out.servers.push(ip.to_string()),
                None => empty_nameserver = true,
            },
            Some("search") => {
                out.searches = fields[1..]
                    .iter()
                    .filter(|s| **s != ".")
                    .map(|s| s.strip_suffix('.').unwrap_or(s).to_string())
                    .collect();
            }
            Some("options") => {
                for o in &fields[1..] {
                    set_option(&mut out.options, o);
                }
            }
            _ => {}
        }
    }
    if empty_nameserver {
        return Err("nameserver list is empty".into());
    }
    Ok(out)
}

fn option_name(o: &str) -> &str {
    o.split(':').next().unwrap_or(o)
}

/// Sets option `o`, replacing an earlier one of the same name in place.
fn set_option(options: &mut Vec<String>, o: &str) {
    match options
        .iter_mut()
        .find(|x| option_name(x) == option_name(o))
    {
        Some(x) => *x = o.to_string(),
        None => options.push(o.to_string()),
    }
}

/// The node's resolver file, parsed (empty without one).
pub fn host_config(settings: &Settings) -> Result<DnsConfig, String> {
    let Some(path) = &settings.resolv_conf else {
        return Ok(DnsConfig::default());
    };
    let text = rkube_util::file::read_text(path, MAX_RESOLV_CONF_BYTES)
        .map_err(|e| format!("reading the resolver file {}: {e}", path.display()))?;
    parse_resolv_conf(&text).map_err(|e| {
        format!(
            "Encountered error while parsing resolv conf file. Error: {e} ({})",
            path.display()
        )
    })
}

/// Which base a pod's resolver starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Base {
    Cluster,
    Host,
    None,
}

fn base(pod: &Pod) -> Base {
    let policy = pod.spec.as_ref().and_then(|s| s.dns_policy.as_deref());
    match policy {
        Some("None") => Base::None,
        Some("ClusterFirstWithHostNet") => Base::Cluster,
        Some("Default") => Base::Host,
        // ClusterFirst (the default), or a policy the API server would
        // have refused: cluster DNS, except on the host network.
        _ if host_network(pod) => Base::Host,
        _ => Base::Cluster,
    }
}

/// The cluster search path first, then the host's, without duplicates.
fn cluster_searches(ns: &str, domain: &str, host: Vec<String>) -> Vec<String> {
    if domain.is_empty() {
        return host;
    }
    let mut out = vec![
        format!("{ns}.svc.{domain}"),
        format!("svc.{domain}"),
        domain.to_string(),
    ];
    out.extend(host);
    dedup(out)
}

fn dedup(v: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    v.into_iter().filter(|s| seen.insert(s.clone())).collect()
}

/// `dnsConfig` merged into `config`.
fn merge(mut config: DnsConfig, pod: &PodDNSConfig) -> DnsConfig {
    config
        .servers
        .extend(pod.nameservers.iter().flatten().cloned());
    config.servers = dedup(config.servers);
    config
        .searches
        .extend(pod.searches.iter().flatten().cloned());
    config.searches = dedup(config.searches);
    for o in pod.options.iter().flatten() {
        let name = o.name.clone().unwrap_or_default();
        let opt = match o.value.as_deref() {
            Some(v) if !v.is_empty() => format!("{name}:{v}"),
            _ => name,
        };
        set_option(&mut config.options, &opt);
    }
    config
}

/// The search path cut to the resolver's limits; `Some(message)` when
/// anything was dropped.
fn fit_searches(mut searches: Vec<String>) -> (Vec<String>, Option<String>) {
    let mut cut = searches.len() > MAX_SEARCH_PATHS;
    searches.truncate(MAX_SEARCH_PATHS);
    let before = searches.len();
    searches.retain(|s| s.len() <= MAX_SEARCH_PATH_CHARS);
    cut |= searches.len() != before;
    while searches.join(" ").len() > MAX_SEARCH_LIST_CHARS {
        searches.pop();
        cut = true;
    }
    let msg = cut.then(|| {
        format!(
            "Search Line limits were exceeded, some search paths have been omitted, the applied search line is: {}",
            searches.join(" ")
        )
    });
    (searches, msg)
}

/// The nameservers cut to the resolver's limit.
fn fit_servers(mut servers: Vec<String>) -> (Vec<String>, Option<String>) {
    if servers.len() <= MAX_NAMESERVERS {
        return (servers, None);
    }
    servers.truncate(MAX_NAMESERVERS);
    let msg = format!(
        "Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: {}",
        servers.join(" ")
    );
    (servers, Some(msg))
}

/// The resolver configuration of `pod`, from the node's `settings` and
/// its resolver file `host`, and the warnings to record on the pod.
pub fn pod_dns(settings: &Settings, host: DnsConfig, pod: &Pod) -> (DnsConfig, Vec<Warning>) {
    let mut warnings = Vec::new();
    let mut b = base(pod);
    if b == Base::Cluster && settings.cluster_dns.is_empty() {
        warnings.push((
            "MissingClusterDNS",
            format!(
                "pod: \"{}_{}({})\". kubelet does not have ClusterDNS IP configured and cannot create Pod using \"ClusterFirst\" policy. Falling back to \"Default\" policy.",
                pod.name_any(),
                pod_namespace(pod),
                pod.uid().unwrap_or_default()
            ),
        ));
        b = Base::Host;
    }
    let mut config = match b {
        Base::None => DnsConfig::default(),
        Base::Cluster => DnsConfig {
            servers: settings
                .cluster_dns
                .iter()
                .map(|ip| ip.to_string())
                .collect(),
            searches: cluster_searches(
                &pod_namespace(pod),
                &settings.cluster_domain,
                host.searches,
            ),
            options: CLUSTER_OPTIONS.iter().map(|s| s.to_string()).collect(),
        },
        Base::Host if settings.resolv_conf.is_none() => {
            let mut servers: Vec<String> = settings
                .node_ips
                .iter()
                .map(|ip| match ip {
                    IpAddr::V4(_) => "127.0.0.1".to_string(),
                    IpAddr::V6(_) => "::1".to_string(),
                })
                .collect();
            if servers.is_empty() {
                servers.push("127.0.0.1".into());
            }
            DnsConfig {
                servers,
                searches: vec![".".into()],
                options: host.options,
            }
        }
        Base::Host => host,
    };
    if let Some(d) = pod.spec.as_ref().and_then(|s| s.dns_config.as_ref()) {
        config = merge(config, d);
    }
    let (servers, m1) = fit_servers(config.servers);
    let (searches, m2) = fit_searches(config.searches);
    config.servers = servers;
    config.searches = searches;
    warnings.extend(
        [m1, m2]
            .into_iter()
            .flatten()
            .map(|m| ("DNSConfigForming", m)),
    );
    (config, warnings)
}

/// The pod's domain (`<subdomain>.<ns>.svc.<clusterDomain>`), empty without
/// a subdomain or with a `hostnameOverride`.
pub fn pod_domain(pod: &Pod, cluster_domain: &str) -> String {
    let spec = pod.spec.as_ref();
    if spec.is_some_and(|s| s.hostname_override.is_some()) {
        return String::new();
    }
    spec.and_then(|s| s.subdomain.as_deref())
        .filter(|s| !s.is_empty())
        .map(|sub| format!("{sub}.{}.svc.{cluster_domain}", pod_namespace(pod)))
        .unwrap_or_default()
}

/// The sandbox's kernel hostname: the pod's hostname, or its FQDN with
/// `setHostnameAsFQDN` (at most 64 characters, upstream's error past it).
pub fn kernel_hostname(pod: &Pod, hostname: &str, domain: &str) -> Result<String, String> {
    let as_fqdn = pod
        .spec
        .as_ref()
        .and_then(|s| s.set_hostname_as_fqdn)
        .unwrap_or(false);
    if !as_fqdn || domain.is_empty() {
        return Ok(hostname.to_string());
    }
    let fqdn = format!("{hostname}.{domain}");
    if fqdn.len() > 64 {
        return Err(format!(
            "failed to construct FQDN from pod hostname and cluster domain, FQDN {fqdn} is too long (64 characters is the max, {} characters requested)",
            fqdn.len()
        ));
    }
    Ok(fqdn)
}

#[cfg(test)]
#[path = "dns_tests.rs"]
mod tests;
