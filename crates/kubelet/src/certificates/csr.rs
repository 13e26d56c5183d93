//! Certificate signing requests, as client-go's `util/certificate/csr`
//! and the kubelet's bootstrap: an ECDSA P-256 key (upstream's
//! `LoadOrGenerateKeyFile`), a PKCS#10 request for the subject, a
//! CertificateSigningRequest named by the digest of key, subject and usages
//! (`node-csr-…`), and a wait until the signer issues the certificate (or
//! the request is denied or fails).

use base64::Engine;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::ByteString;
use kube::api::{ObjectMeta, PostParams};
use kube::runtime::wait::await_condition;
use kube::{Api, Client};

/// `kubernetes.io/kube-apiserver-client-kubelet`.
pub const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// `kubernetes.io/kubelet-serving`.
pub const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";

/// The subject and names of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    /// Common name (`system:node:<name>`).
    pub common_name: String,
    /// Organizations (`system:nodes`).
    pub organizations: Vec<String>,
    /// DNS names (serving certificates).
    pub dns_names: Vec<String>,
    /// IP addresses (serving certificates).
    pub ips: Vec<std::net::IpAddr>,
}

impl Subject {
    /// The kubelet's client identity for Node `node`.
    pub fn node_client(node: &str) -> Subject {
        Subject {
            common_name: format!("system:node:{node}"),
            organizations: vec!["system:nodes".into()],
            dns_names: Vec::new(),
            ips: Vec::new(),
        }
    }

    /// The kubelet's serving identity for Node `node` with `addresses`
    /// (type, address) as upstream's template: host names and DNS
    /// addresses as DNS names, IP addresses (and host names that are IPs)
    /// as IPs, each once, sorted; `None` without an IP (upstream asks for
    /// no serving certificate then, `AllowDNSOnlyNodeCSR` being off).
    pub fn node_serving(node: &str, addresses: &[(&str, &str)]) -> Option<Subject> {
        let (dns_names, ips) = hostnames_and_ips(addresses);
        if ips.is_empty() {
            return None;
        }
        Some(Subject {
            dns_names,
            ips,
            ..Subject::node_client(node)
        })
    }
}

/// Upstream's `addressesToHostnamesAndIPs` over (type, address) pairs.
fn hostnames_and_ips(addresses: &[(&str, &str)]) -> (Vec<String>, Vec<std::net::IpAddr>) {
    {
        let mut dns = std::collections::BTreeSet::new();
        let mut ips = std::collections::BTreeMap::new();
        for (kind, address) in addresses {
            if address.is_empty() {
                continue;
            }
            let ip = address.parse::<std::net::IpAddr>().ok();
            match (*kind, ip) {
                ("Hostname" | "ExternalIP" | "InternalIP", Some(ip)) => {
                    ips.insert(ip.to_string(), ip);
                }
                // DNS addresses are names, even when they read as IPs.
                ("Hostname", None) | ("ExternalDNS" | "InternalDNS", _) => {
                    dns.insert(address.to_string());
                }
                _ => {}
            }
        }
        (dns.into_iter().collect(), ips.into_values().collect())
    }
}

/// A new private key (PKCS#8 PEM) as upstream generates one: ECDSA P-256.
pub fn generate_key() -> Result<String, String> {
    rcgen::KeyPair::generate()
        .map(|k| k.serialize_pem())
        .map_err(|e| format!("generating a private key: {e}"))
}

/// A PKCS#10 request (PEM) for `subject`, signed with `key_pem`; the
/// digested CertificateSigningRequest name for it and `usages`.
pub fn make_request(
    key_pem: &str,
    subject: &Subject,
    usages: &[&str],
) -> Result<(String, String), String> {
    let key = rcgen::KeyPair::from_pem(key_pem)
        .map_err(|e| format!("invalid private key for certificate request: {e}"))?;
    let mut params = rcgen::CertificateParams::default();
    let mut dn = rcgen::DistinguishedName::new();
    for o in &subject.organizations {
        dn.push(rcgen::DnType::OrganizationName, o.as_str());
    }
    dn.push(rcgen::DnType::CommonName, subject.common_name.as_str());
    params.distinguished_name = dn;
    for d in &subject.dns_names {
        params.subject_alt_names.push(rcgen::SanType::DnsName(
            d.as_str()
                .try_into()
                .map_err(|e| format!("invalid DNS name {d:?}: {e}"))?,
        ));
    }
    for ip in &subject.ips {
        params
            .subject_alt_names
            .push(rcgen::SanType::IpAddress(*ip));
    }
    let csr = params
        .serialize_request(&key)
        .and_then(|c| c.pem())
        .map_err(|e| format!("unable to generate certificate request: {e}"))?;
    use rcgen::PublicKeyData;
    let name = digested_name(&key.subject_public_key_info(), subject, usages);
    Ok((csr, name))
}

/// Upstream's `digestedName`: `node-csr-` and the unpadded base64url of
/// SHA-512/256 over the base64url of the public key's SubjectPublicKeyInfo,
/// the common name, each organization and each usage, each followed by `|`.
pub fn digested_name(spki_der: &[u8], subject: &Subject, usages: &[&str]) -> String {
    let enc = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA512_256);
    let mut write = |data: &[u8]| {
        ctx.update(enc(data).as_bytes());
        ctx.update(b"|");
    };
    write(spki_der);
    write(subject.common_name.as_bytes());
    for o in &subject.organizations {
        write(o.as_bytes());
    }
    for u in usages {
        write(u.as_bytes());
    }
    format!("node-csr-{}", enc(ctx.finish().as_ref()))
}

/// Who a request is for: its common names, organizations and public key
/// (SubjectPublicKeyInfo DER).
type RequestIdentity = (Vec<String>, Vec<String>, Vec<u8>);

/// The subject (CN, O) and public key of a PEM certification request.
fn request_identity(pem_text: &[u8]) -> Result<RequestIdentity, String> {
    use x509_parser::prelude::FromDer;
    let text = std::str::from_utf8(pem_text).map_err(|_| "not PEM".to_string())?;
    let block = pem::parse(text).map_err(|e| format!("not PEM: {e}"))?;
    let (_, req) =
        x509_parser::certification_request::X509CertificationRequest::from_der(block.contents())
            .map_err(|e| format!("not a certification request: {e}"))?;
    let info = &req.certification_request_info;
    let cn: Vec<String> = info
        .subject
        .iter_common_name()
        .filter_map(|a| a.as_str().ok().map(String::from))
        .collect();
    let o: Vec<String> = info
        .subject
        .iter_organization()
        .filter_map(|a| a.as_str().ok().map(String::from))
        .collect();
    let key = info.subject_pki.raw.to_vec();
    Ok((cn, o, key))
}

/// Upstream's `ensureCompatible`: a request found under the name of ours is
/// reused when it asks for the same subject, from the same signer, for the
/// same key, and what it was issued (if anything) has not expired.
fn compatible(
    existing: &CertificateSigningRequest,
    ours: &CertificateSigningRequest,
) -> Result<(), String> {
    let (cn0, o0, key0) = request_identity(&existing.spec.request.0)?;
    let (cn1, o1, key1) = request_identity(&ours.spec.request.0)?;
    if (cn0, o0) != (cn1, o1) {
        return Err("csr subjects differ".into());
    }
    if existing.spec.signer_name != ours.spec.signer_name {
        return Err(format!(
            "csr signerNames differ: new {:?}, orig: {:?}",
            existing.spec.signer_name, ours.spec.signer_name
        ));
    }
    if key0 != key1 {
        return Err("the existing csr is for another key".into());
    }
    let issued = existing
        .status
        .as_ref()
        .and_then(|s| s.certificate.as_ref())
        .map(|c| c.0.clone())
        .unwrap_or_default();
    let now = super::now_secs();
    if super::expiries(&String::from_utf8_lossy(&issued))
        .into_iter()
        .flatten()
        .any(|t| t < now)
    {
        return Err("one of the certificates for the CSR has expired".into());
    }
    Ok(())
}

/// Why no certificate came back.
#[derive(Debug, thiserror::Error)]
pub enum CsrError {
    /// The API refused or failed the request.
    #[error("cannot create certificate signing request: {0}")]
    Create(kube::Error),
    /// The request was denied or failed.
    #[error("certificate request was not signed: {0}")]
    NotSigned(String),
    /// Waiting failed (watch error or timeout).
    #[error("waiting for the certificate of {name}: {why}")]
    Wait {
        /// The request.
        name: String,
        /// What went wrong.
        why: String,
    },
}

/// Creates the CertificateSigningRequest `name` for `csr_pem` (reusing
/// one of that name holding the same request, as upstream; without a name
/// one is generated, `csr-…`, as for rotations) and waits up to `timeout`
/// for its certificate (PEM).
pub async fn request_certificate(
    client: &Client,
    csr_pem: &str,
    name: Option<&str>,
    signer: &str,
    usages: &[&str],
    timeout: std::time::Duration,
) -> Result<String, CsrError> {
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    let obj = CertificateSigningRequest {
        metadata: ObjectMeta {
            name: name.map(String::from),
            generate_name: name.is_none().then(|| "csr-".to_string()),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(csr_pem.as_bytes().to_vec()),
            signer_name: signer.into(),
            usages: Some(usages.iter().map(|u| u.to_string()).collect()),
            ..Default::default()
        },
        status: None,
    };
    let name: String = match (api.create(&PostParams::default(), &obj).await, name) {
        (Ok(created), _) => created.metadata.name.unwrap_or_default(),
        (Err(kube::Error::Api(s)), Some(name)) if s.code == 409 => {
            // The same key, subject and usages make the same name: an
            // earlier attempt's request, reused if it asks for the same.
            let existing = api.get(name).await.map_err(CsrError::Create)?;
            if let Err(why) = compatible(&existing, &obj) {
                return Err(CsrError::NotSigned(format!(
                    "retrieved csr {name:?} is not compatible: {why}"
                )));
            }
            name.to_string()
        }
        (Err(e), _) => return Err(CsrError::Create(e)),
    };
    let name = name.as_str();
    tracing::info!(csr = %name, signer, "Waiting for client certificate to be issued");
    // Upstream's WaitForCertificate: a Denied or Failed condition ends the
    // wait with an error; an Approved one with a certificate ends it.
    let has = |st: &k8s_openapi::api::certificates::v1::CertificateSigningRequestStatus,
               t: &str| {
        st.conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == t)
            .cloned()
    };
    let done = |c: Option<&CertificateSigningRequest>| {
        let Some(st) = c.and_then(|c| c.status.as_ref()) else {
            return false;
        };
        has(st, "Denied").is_some()
            || has(st, "Failed").is_some()
            || (has(st, "Approved").is_some()
                && st.certificate.as_ref().is_some_and(|c| !c.0.is_empty()))
    };
    let got = tokio::time::timeout(timeout, await_condition(api, name, done))
        .await
        .map_err(|_| CsrError::Wait {
            name: name.into(),
            why: "timed out".into(),
        })?
        .map_err(|e| CsrError::Wait {
            name: name.into(),
            why: e.to_string(),
        })?
        .ok_or_else(|| CsrError::Wait {
            name: name.into(),
            why: format!("csr {name:?} was deleted"),
        })?;
    let st = got.status.unwrap_or_default();
    if let Some(c) = has(&st, "Denied") {
        return Err(CsrError::NotSigned(format!(
            "certificate signing request is denied, reason: {}, message: {}",
            c.reason.unwrap_or_default(),
            c.message.unwrap_or_default()
        )));
    }
    if let Some(c) = has(&st, "Failed") {
        return Err(CsrError::NotSigned(format!(
            "certificate signing request failed, reason: {}, message: {}",
            c.reason.unwrap_or_default(),
            c.message.unwrap_or_default()
        )));
    }
    let cert = st.certificate.map(|c| c.0).unwrap_or_default();
    String::from_utf8(cert)
        .map_err(|_| CsrError::NotSigned("the issued certificate is not PEM".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_carry_the_subject_and_names() {
        let key = generate_key().unwrap();
        assert!(key.starts_with("-----BEGIN PRIVATE KEY-----"));
        let subject = Subject {
            dns_names: vec!["node-1".into()],
            ips: vec!["10.0.0.5".parse().unwrap()],
            ..Subject::node_client("node-1")
        };
        let (csr, name) =
            make_request(&key, &subject, &["digital signature", "client auth"]).unwrap();
        let der = pem::parse(&csr).unwrap();
        assert_eq!(der.tag(), "CERTIFICATE REQUEST");
        use x509_parser::prelude::FromDer;
        let (_, req) =
            x509_parser::certification_request::X509CertificationRequest::from_der(der.contents())
                .unwrap();
        let info = &req.certification_request_info;
        let cn: Vec<&str> = info
            .subject
            .iter_common_name()
            .filter_map(|a| a.as_str().ok())
            .collect();
        let o: Vec<&str> = info
            .subject
            .iter_organization()
            .filter_map(|a| a.as_str().ok())
            .collect();
        assert_eq!((cn, o), (vec!["system:node:node-1"], vec!["system:nodes"]));
        assert!(
            name.starts_with("node-csr-") && name.len() == "node-csr-".len() + 43,
            "{name}"
        );
        // The same key, subject and usages give the same name; any change
        // gives another.
        let (_, again) =
            make_request(&key, &subject, &["digital signature", "client auth"]).unwrap();
        assert_eq!(name, again);
        let (_, other) = make_request(&key, &subject, &["client auth"]).unwrap();
        assert_ne!(name, other);
        assert!(make_request("junk", &subject, &[]).is_err());
    }

    fn csr_object(key: &str, node: &str, signer: &str) -> CertificateSigningRequest {
        let (pem_text, _) =
            make_request(key, &Subject::node_client(node), &["client auth"]).unwrap();
        CertificateSigningRequest {
            metadata: Default::default(),
            spec: CertificateSigningRequestSpec {
                request: ByteString(pem_text.into_bytes()),
                signer_name: signer.into(),
                ..Default::default()
            },
            status: None,
        }
    }

    #[test]
    fn serving_names_from_node_addresses_as_upstream() {
        // Upstream's TestAddressesToHostnamesAndIPs.
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        let split = |a: &[(&str, &str)]| hostnames_and_ips(a);
        assert_eq!(split(&[]), (vec![], vec![]));
        assert_eq!(split(&[("Hostname", "")]), (vec![], vec![]));
        assert_eq!(
            split(&[("InternalIP", "1.2"), ("ExternalIP", "3.4")]),
            (vec![], vec![])
        );
        assert_eq!(
            split(&[
                ("Hostname", "hostname"),
                ("ExternalDNS", "hostname"),
                ("InternalDNS", "hostname"),
                ("InternalIP", "1.1.1.1"),
                ("ExternalIP", "1.1.1.1"),
            ]),
            (vec!["hostname".to_string()], vec![ip("1.1.1.1")])
        );
        assert_eq!(
            split(&[
                ("Hostname", "hostname-2"),
                ("ExternalDNS", "hostname-1"),
                ("InternalDNS", "hostname-3"),
                ("InternalIP", "2.2.2.2"),
                ("ExternalIP", "1.1.1.1"),
                ("InternalIP", "3.3.3.3"),
            ]),
            (
                vec![
                    "hostname-1".into(),
                    "hostname-2".into(),
                    "hostname-3".into()
                ],
                vec![ip("1.1.1.1"), ip("2.2.2.2"), ip("3.3.3.3")]
            )
        );
        assert_eq!(
            split(&[("Hostname", "hostname"), ("Hostname", "1.1.1.1")]),
            (vec!["hostname".to_string()], vec![ip("1.1.1.1")])
        );
        // No IP: no serving certificate asked for.
        assert_eq!(Subject::node_serving("n", &[("Hostname", "n")]), None);
        let s =
            Subject::node_serving("n", &[("InternalIP", "10.0.0.1"), ("Hostname", "n")]).unwrap();
        assert_eq!(s.common_name, "system:node:n");
        assert_eq!(
            (s.dns_names, s.ips),
            (vec!["n".to_string()], vec![ip("10.0.0.1")])
        );
    }

    #[test]
    fn an_earlier_request_for_the_same_key_is_reused() {
        // ECDSA signatures differ each time: the bytes never match, the
        // request still is the same one (upstream's ensureCompatible).
        let key = generate_key().unwrap();
        let ours = csr_object(&key, "n1", CLIENT_SIGNER);
        let earlier = csr_object(&key, "n1", CLIENT_SIGNER);
        assert_ne!(ours.spec.request.0, earlier.spec.request.0);
        assert_eq!(compatible(&earlier, &ours), Ok(()));
        let other_key = csr_object(&generate_key().unwrap(), "n1", CLIENT_SIGNER);
        assert!(compatible(&other_key, &ours).is_err());
        assert!(compatible(&csr_object(&key, "n2", CLIENT_SIGNER), &ours).is_err());
        assert!(compatible(&csr_object(&key, "n1", SERVING_SIGNER), &ours).is_err());
        let mut junk = earlier.clone();
        junk.spec.request = ByteString(b"junk".to_vec());
        assert!(compatible(&junk, &ours).is_err());
    }

    #[test]
    fn digested_name_as_upstream_computes_it() {
        // sha512/256 over "AQID|YQ|Yg|Yw|" (base64url of [1,2,3], "a", "b", "c").
        let subject = Subject {
            common_name: "a".into(),
            organizations: vec!["b".into()],
            dns_names: vec![],
            ips: vec![],
        };
        let want = {
            let d = ring::digest::digest(&ring::digest::SHA512_256, b"AQID|YQ|Yg|Yw|");
            format!(
                "node-csr-{}",
                base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(d.as_ref())
            )
        };
        assert_eq!(digested_name(&[1, 2, 3], &subject, &["c"]), want);
    }
}
