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
            if existing.spec.request.0 != obj.spec.request.0 {
                return Err(CsrError::NotSigned(format!(
                    "retrieved csr {name:?} is not the one requested"
                )));
            }
            name.to_string()
        }
        (Err(e), _) => return Err(CsrError::Create(e)),
    };
    let name = name.as_str();
    tracing::info!(csr = %name, signer, "Waiting for client certificate to be issued");
    let done = |c: Option<&CertificateSigningRequest>| {
        let Some(st) = c.and_then(|c| c.status.as_ref()) else {
            return false;
        };
        let cond = |t: &str| {
            st.conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == t && c.status == "True")
        };
        cond("Denied") || cond("Failed") || st.certificate.as_ref().is_some_and(|c| !c.0.is_empty())
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
            why: "the request was deleted".into(),
        })?;
    let st = got.status.unwrap_or_default();
    for c in st.conditions.iter().flatten() {
        if (c.type_ == "Denied" || c.type_ == "Failed") && c.status == "True" {
            return Err(CsrError::NotSigned(format!(
                "certificate signing request is {}, reason: {}, message: {}",
                if c.type_ == "Denied" {
                    "denied"
                } else {
                    "failed"
                },
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default()
            )));
        }
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
