//! The serving side of TLS, shared by the scheduler's secure port and the
//! kubelet API: the serving certificate (given as files, or self-signed
//! and kept beside the daemon's other state as upstream does) and the
//! optional client CA whose certificates [`crate::auth`] takes as users.
//!
//! Client certificates are *optional* when a client CA is set (rustls's
//! `WebPkiClientVerifier` with `allow_unauthenticated`), so bearer-token
//! callers still connect; a certificate that is presented must chain to
//! the CA, or the handshake fails. ALPN offers `h2` and `http/1.1`
//! ([`crate::server`] serves the protocol agreed on).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::{ResolvesServerCert, WebPkiClientVerifier};
use tokio_rustls::rustls::{self, RootCertStore, ServerConfig};

/// Why no TLS configuration could be made.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or written.
    #[error("{action} {path}: {source}")]
    File {
        /// What was being done ("reading", "writing", "creating").
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// Only one of the certificate and the key was given.
    #[error("the serving certificate and its private key must be given together")]
    Unpaired,
    /// A PEM file holds nothing usable.
    #[error("{0}")]
    Pem(String),
    /// The self-signed certificate could not be made.
    #[error("generating a self-signed certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// rustls refused the certificate, key or CA.
    #[error("{what}: {source}")]
    Rustls {
        /// What was being set up.
        what: &'static str,
        /// What went wrong.
        source: rustls::Error,
    },
    /// The client CA could not be turned into a verifier.
    #[error("the client certificate verifier: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::File {
        action: "reading",
        path: path.to_path_buf(),
        source,
    })
}

/// Where and under what names a self-signed serving certificate is made
/// when no certificate files are given.
#[derive(Debug, Clone, Copy)]
pub struct SelfSigned<'a> {
    /// Keep the pair in `<dir>/<stem>.crt` and `<dir>/<stem>.key` (reused
    /// on the next start, as upstream's `--cert-dir`); `None`: in memory.
    pub dir: Option<&'a Path>,
    /// The file stem (`kube-scheduler`, `kubelet`).
    pub stem: &'a str,
    /// Host names and addresses besides `localhost` and `127.0.0.1`.
    pub hosts: &'a [String],
}

/// A serving certificate chain and key, and the client CA if any.
#[derive(Debug)]
pub struct ServingTls {
    identity: Identity,
    client_ca: Option<Arc<RootCertStore>>,
}

/// Where the serving certificate comes from.
#[derive(Debug)]
enum Identity {
    /// One pair, for the daemon's life.
    Fixed {
        certs: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
    },
    /// Chosen at each handshake (a rotating or reloaded pair).
    Resolver(Arc<dyn ResolvesServerCert>),
}

impl ServingTls {
    /// The given certificate and key files, or (neither given) a
    /// self-signed pair as `self_signed` says.
    pub fn load_or_self_sign(
        cert_file: Option<&Path>,
        key_file: Option<&Path>,
        self_signed: SelfSigned<'_>,
    ) -> Result<ServingTls, TlsError> {
        match (cert_file, key_file) {
            (Some(c), Some(k)) => ServingTls::from_pem(&read(c)?, &read(k)?),
            (None, None) => {
                let (c, k) = self_sign(self_signed)?;
                ServingTls::from_pem(&c, &k)
            }
            _ => Err(TlsError::Unpaired),
        }
    }

    /// A certificate chain and key from PEM text.
    pub fn from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<ServingTls, TlsError> {
        let certs: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut &cert_pem[..])
            .collect::<Result<_, _>>()
            .map_err(|e| TlsError::Pem(format!("reading the serving certificate: {e}")))?;
        if certs.is_empty() {
            return Err(TlsError::Pem(
                "no certificate in the certificate file".into(),
            ));
        }
        let key = rustls_pemfile::private_key(&mut &key_pem[..])
            .map_err(|e| TlsError::Pem(format!("reading the serving key: {e}")))?
            .ok_or_else(|| TlsError::Pem("no private key in the key file".into()))?;
        Ok(ServingTls {
            identity: Identity::Fixed { certs, key },
            client_ca: None,
        })
    }

    /// A certificate chosen at each handshake by `resolver` (a handshake it
    /// has no certificate for fails).
    pub fn from_resolver(resolver: Arc<dyn ResolvesServerCert>) -> ServingTls {
        ServingTls {
            identity: Identity::Resolver(resolver),
            client_ca: None,
        }
    }

    /// Also accept client certificates signed by the CAs in `ca_file`
    /// (`--client-ca-file`, `authentication.x509.clientCAFile`); `None`
    /// leaves client certificates unrequested.
    pub fn with_client_ca(self, ca_file: Option<&Path>) -> Result<ServingTls, TlsError> {
        match ca_file {
            Some(p) => self.with_client_ca_pem(&read(p)?),
            None => Ok(self),
        }
    }

    /// [`ServingTls::with_client_ca`] from PEM text.
    pub fn with_client_ca_pem(mut self, pem: &[u8]) -> Result<ServingTls, TlsError> {
        let mut roots = RootCertStore::empty();
        for c in rustls_pemfile::certs(&mut &pem[..]) {
            let c = c.map_err(|e| TlsError::Pem(format!("reading the client CA: {e}")))?;
            roots.add(c).map_err(|source| TlsError::Rustls {
                what: "adding the client CA",
                source,
            })?;
        }
        if roots.is_empty() {
            return Err(TlsError::Pem("no certificate in the client CA file".into()));
        }
        self.client_ca = Some(Arc::new(roots));
        Ok(self)
    }

    /// Is a client CA set?
    pub fn has_client_ca(&self) -> bool {
        self.client_ca.is_some()
    }

    /// The serving certificate chain (e.g. for a test client to trust);
    /// empty when a resolver chooses it.
    pub fn certificates(&self) -> &[CertificateDer<'static>] {
        match &self.identity {
            Identity::Fixed { certs, .. } => certs,
            Identity::Resolver(_) => &[],
        }
    }

    /// The rustls configuration: TLS 1.2 and 1.3 with ring's defaults,
    /// optional client certificates verified against the client CA, ALPN
    /// `h2` (when `http2`) and `http/1.1`.
    pub fn server_config(&self, http2: bool) -> Result<Arc<ServerConfig>, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|source| TlsError::Rustls {
                what: "TLS versions",
                source,
            })?;
        let builder = match &self.client_ca {
            Some(roots) => builder.with_client_cert_verifier(
                WebPkiClientVerifier::builder_with_provider(roots.clone(), provider)
                    .allow_unauthenticated()
                    .build()?,
            ),
            None => builder.with_no_client_auth(),
        };
        let mut config = match &self.identity {
            Identity::Fixed { certs, key } => builder
                .with_single_cert(certs.clone(), key.clone_key())
                .map_err(|source| TlsError::Rustls {
                    what: "the serving certificate and key do not match",
                    source,
                })?,
            Identity::Resolver(r) => builder.with_cert_resolver(r.clone()),
        };
        config.alpn_protocols = if http2 {
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        } else {
            vec![b"http/1.1".to_vec()]
        };
        Ok(Arc::new(config))
    }
}

/// The self-signed pair (PEM certificate, PEM key): the kept one when both
/// files exist, else a new one (kept when a directory is given).
fn self_sign(s: SelfSigned<'_>) -> Result<(Vec<u8>, Vec<u8>), TlsError> {
    let files = s.dir.map(|d| {
        (
            d,
            d.join(format!("{}.crt", s.stem)),
            d.join(format!("{}.key", s.stem)),
        )
    });
    if let Some((_, c, k)) = &files {
        if c.exists() && k.exists() {
            return Ok((read(c)?, read(k)?));
        }
    }
    let mut sans: Vec<String> = s.hosts.iter().filter(|h| !h.is_empty()).cloned().collect();
    sans.extend(["localhost".to_string(), "127.0.0.1".to_string()]);
    sans.sort();
    sans.dedup();
    let made = rcgen::generate_simple_self_signed(sans)?;
    let (cert, key) = (made.cert.pem(), made.signing_key.serialize_pem());
    if let Some((dir, c, k)) = &files {
        std::fs::create_dir_all(dir).map_err(|source| TlsError::File {
            action: "creating",
            path: dir.to_path_buf(),
            source,
        })?;
        // the key first: a pair is reused only when both files exist
        write_private(k, key.as_bytes())?;
        std::fs::write(c, &cert).map_err(|source| TlsError::File {
            action: "writing",
            path: c.clone(),
            source,
        })?;
    }
    Ok((cert.into_bytes(), key.into_bytes()))
}

/// Writes `data` to `path` readable by its owner only (0600, also when
/// the file already existed with wider permissions).
pub fn write_private(path: &Path, data: &[u8]) -> Result<(), TlsError> {
    use std::io::Write;
    let err = |source| TlsError::File {
        action: "writing",
        path: path.to_path_buf(),
        source,
    };
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let mut f = opts.open(path).map_err(err)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(err)?;
    }
    f.write_all(data).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rkube-tls-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn self_signed_pairs_are_kept_private_and_reused() {
        let dir = temp("keep");
        let hosts = ["node-a".to_string()];
        let s = SelfSigned {
            dir: Some(&dir),
            stem: "kubelet",
            hosts: &hosts,
        };
        let a = ServingTls::load_or_self_sign(None, None, s).unwrap();
        let b = ServingTls::load_or_self_sign(None, None, s).unwrap();
        assert_eq!(
            a.certificates(),
            b.certificates(),
            "the kept pair is reused"
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.join("kubelet.key"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        // the SANs: the given host, localhost and 127.0.0.1
        let (_, x) = x509_parser::parse_x509_certificate(a.certificates()[0].as_ref()).unwrap();
        let san = format!("{:?}", x.subject_alternative_name().unwrap().unwrap().value);
        assert!(san.contains("node-a") && san.contains("localhost"), "{san}");
        a.server_config(true).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_existing_key_file_is_made_private() {
        let dir = temp("mode");
        std::fs::create_dir_all(&dir).unwrap();
        let k = dir.join("k");
        std::fs::write(&k, "old").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&k, std::fs::Permissions::from_mode(0o644)).unwrap();
            write_private(&k, b"new").unwrap();
            let mode = std::fs::metadata(&k).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn bad_inputs_are_errors() {
        let s = SelfSigned {
            dir: None,
            stem: "x",
            hosts: &[],
        };
        assert!(matches!(
            ServingTls::load_or_self_sign(Some(Path::new("/c")), None, s),
            Err(TlsError::Unpaired)
        ));
        assert!(ServingTls::from_pem(b"", b"").is_err());
        let ok = ServingTls::load_or_self_sign(None, None, s).unwrap();
        assert!(!ok.has_client_ca());
        assert!(ok.with_client_ca_pem(b"not a certificate").is_err());
        let missing = ServingTls::load_or_self_sign(None, None, s)
            .unwrap()
            .with_client_ca(Some(Path::new("/nonexistent/ca.crt")))
            .unwrap_err();
        assert!(
            missing.to_string().contains("/nonexistent/ca.crt"),
            "{missing}"
        );
    }
}
