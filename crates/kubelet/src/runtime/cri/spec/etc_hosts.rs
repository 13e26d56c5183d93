//! The kubelet-managed `/etc/hosts` (upstream's `KubeletManagedEtcHosts`):
//! every container of a pod gets `pods/<uid>/etc-hosts` mounted at
//! `/etc/hosts` once the pod has an IP (or uses the host network), unless
//! it mounts something at `/etc/hosts` itself. On the pod network the file
//! names localhost, the pod's IPs with its hostname (and FQDN with a
//! `subdomain`) and the `hostAliases`; with the host network it is the
//! node's `/etc/hosts` with the aliases appended. Both start with
//! upstream's header, byte for byte.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use k8s_openapi::api::core::v1::{Container, HostAlias, Pod};
use kube::ResourceExt;
use rkube_cri::v1;

use crate::network::dns;
use crate::pod::{self, Dirs};

/// Where the file is mounted.
pub const ETC_HOSTS: &str = "/etc/hosts";
const HEADER: &str = "# Kubernetes-managed hosts file.\n";
const HEADER_HOST_NETWORK: &str = "# Kubernetes-managed hosts file (host network).\n";

fn aliases(host_aliases: &[HostAlias]) -> String {
    if host_aliases.is_empty() {
        return String::new();
    }
    let mut out = String::from("\n# Entries added by HostAliases.\n");
    for a in host_aliases {
        out += &format!(
            "{}\t{}\n",
            a.ip,
            a.hostnames.clone().unwrap_or_default().join("\t")
        );
    }
    out
}

/// The file for a pod on the pod network.
pub fn managed(
    pod_ips: &[String],
    hostname: &str,
    domain: &str,
    host_aliases: &[HostAlias],
) -> String {
    let mut out = String::from(HEADER);
    out += "127.0.0.1\tlocalhost\n";
    out += "::1\tlocalhost ip6-localhost ip6-loopback\n";
    out += "fe00::0\tip6-localnet\n";
    out += "fe00::0\tip6-mcastprefix\n";
    out += "fe00::1\tip6-allnodes\n";
    out += "fe00::2\tip6-allrouters\n";
    for ip in pod_ips {
        if domain.is_empty() {
            out += &format!("{ip}\t{hostname}\n");
        } else {
            out += &format!("{ip}\t{hostname}.{domain}\t{hostname}\n");
        }
    }
    out + &aliases(host_aliases)
}

/// The file for a pod on the host network: the node's file, with the
/// aliases.
pub fn host_network(node_hosts: &[u8], host_aliases: &[HostAlias]) -> Vec<u8> {
    let mut out = HEADER_HOST_NETWORK.as_bytes().to_vec();
    out.extend_from_slice(node_hosts);
    out.extend_from_slice(aliases(host_aliases).as_bytes());
    out
}

/// Writes the pod's file (again: IPs may have changed) and returns the
/// mount for `c`, or `None` when `c` gets none.
pub fn prepare(
    pod: &Pod,
    c: &Container,
    dirs: &Dirs,
    pod_ips: &[String],
    cluster_domain: &str,
) -> Result<Option<v1::Mount>, String> {
    let spec = pod.spec.clone().unwrap_or_default();
    let host_net = spec.host_network.unwrap_or(false);
    let mounts_own = c
        .volume_mounts
        .iter()
        .flatten()
        .any(|m| m.mount_path == ETC_HOSTS);
    if (pod_ips.is_empty() && !host_net) || mounts_own {
        return Ok(None);
    }
    let host_aliases = spec.host_aliases.unwrap_or_default();
    let content = if host_net {
        let node = std::fs::read(ETC_HOSTS).map_err(|e| format!("reading {ETC_HOSTS}: {e}"))?;
        host_network(&node, &host_aliases)
    } else {
        let hostname = pod::pod_hostname(pod);
        let domain = dns::pod_domain(pod, cluster_domain);
        managed(pod_ips, &hostname, &domain, &host_aliases).into_bytes()
    };
    let file = dirs
        .pod_dir(&pod.uid().unwrap_or_default())
        .join("etc-hosts");
    write(&file, &content).map_err(|e| format!("writing {}: {e}", file.display()))?;
    Ok(Some(v1::Mount {
        container_path: ETC_HOSTS.into(),
        host_path: file.display().to_string(),
        ..Default::default()
    }))
}

fn write(file: &Path, content: &[u8]) -> std::io::Result<()> {
    if let Some(d) = file.parent() {
        std::fs::create_dir_all(d)?;
    }
    std::fs::write(file, content)?;
    std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o644))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn alias(ip: &str, names: &[&str]) -> HostAlias {
        serde_json::from_value(json!({"ip": ip, "hostnames": names})).unwrap()
    }

    #[test]
    fn the_managed_file_is_upstreams() {
        let f = managed(
            &["10.0.0.5".into()],
            "web-0",
            "",
            &[alias("123.45.67.89", &["foo", "bar"])],
        );
        assert_eq!(
            f,
            "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n\
             fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n\
             10.0.0.5\tweb-0\n\n# Entries added by HostAliases.\n123.45.67.89\tfoo\tbar\n"
        );
        let f = managed(
            &["10.0.0.5".into()],
            "web-0",
            "svc.ns.svc.cluster.local",
            &[],
        );
        assert!(
            f.ends_with("10.0.0.5\tweb-0.svc.ns.svc.cluster.local\tweb-0\n"),
            "{f}"
        );
        let h = host_network(b"127.0.0.1 localhost\n", &[]);
        assert_eq!(
            h,
            b"# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n".to_vec()
        );
    }

    #[test]
    fn containers_mounting_etc_hosts_and_pods_without_an_ip_get_none() {
        let root = crate::scratch::Scratch::new("etc-hosts");
        let dirs = Dirs::under(root.path());
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"containers": [
                {"name": "a"},
                {"name": "b", "volumeMounts": [{"name": "v", "mountPath": "/etc/hosts"}]},
            ]},
        }))
        .unwrap();
        let cs = &pod.spec.as_ref().unwrap().containers;
        assert_eq!(
            prepare(&pod, &cs[0], &dirs, &[], "cluster.local").unwrap(),
            None
        );
        assert_eq!(
            prepare(&pod, &cs[1], &dirs, &["10.0.0.9".into()], "cluster.local").unwrap(),
            None
        );
        let m = prepare(&pod, &cs[0], &dirs, &["10.0.0.9".into()], "cluster.local")
            .unwrap()
            .unwrap();
        assert_eq!(m.container_path, "/etc/hosts");
        let text = std::fs::read_to_string(&m.host_path).unwrap();
        assert!(text.ends_with("10.0.0.9\tp\n"), "{text}");
        // With a subdomain the pod's FQDN is in the cluster's domain.
        let mut sub = pod.clone();
        sub.spec.as_mut().unwrap().subdomain = Some("s".into());
        let m = prepare(&sub, &cs[0], &dirs, &["10.0.0.9".into()], "cluster.local")
            .unwrap()
            .unwrap();
        let text = std::fs::read_to_string(&m.host_path).unwrap();
        assert!(
            text.ends_with("10.0.0.9\tp.s.ns.svc.cluster.local\tp\n"),
            "{text}"
        );
    }
}
