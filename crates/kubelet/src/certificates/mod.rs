//! The kubelet's certificates, as upstream's `pkg/kubelet/certificate`
//! and client-go's `util/certificate`: TLS bootstrap with a bootstrap
//! token (`--bootstrap-kubeconfig`, [`bootstrap`]) — a key made on the
//! node, a `kubernetes.io/kube-apiserver-client-kubelet` CertificateSigningRequest
//! for `system:node:<name>` ([`csr`]), the issued certificate kept as
//! upstream's file store keeps it ([`store`]: `<cert-dir>/kubelet-client-<time>.pem`
//! with the `kubelet-client-current.pem` link) and a kubeconfig at
//! `--kubeconfig` that points to it; with `rotateCertificates`, the
//! certificate renewed before it expires ([`rotation`]).

pub mod bootstrap;
pub mod csr;
pub mod rotation;
pub mod store;

/// Now, in seconds since the epoch (certificate validity is in seconds).
pub(crate) fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// The `notAfter` (seconds) of each certificate in a PEM text; `None` for
/// one that does not parse.
pub(crate) fn expiries(pem_text: &str) -> Vec<Option<i64>> {
    pem::parse_many(pem_text)
        .unwrap_or_default()
        .into_iter()
        .filter(|b| b.tag() == "CERTIFICATE")
        .map(|b| {
            x509_parser::parse_x509_certificate(b.contents())
                .ok()
                .map(|(_, c)| c.validity().not_after.timestamp())
        })
        .collect()
}

/// Creates (or truncates) `path` for writing, mode 0600, never through a
/// symlink: certificates' keys are never world-readable.
pub(crate) fn private_file(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::fs::PermissionsExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    // A file that was there keeps its mode through open(2): narrow it.
    f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    Ok(f)
}
