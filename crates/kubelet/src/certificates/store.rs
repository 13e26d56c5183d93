//! Upstream's certificate file store (client-go `util/certificate`
//! `fileStore`): a certificate and its key in one PEM file
//! `<dir>/<prefix>-<YYYY-MM-DD-hh-mm-ss>.pem` (mode 0600), the current one
//! named by the symlink `<prefix>-current.pem`, swapped atomically through
//! `<prefix>-updated.pem`.

use std::io::Write;
use std::path::{Path, PathBuf};

/// A store of certificate/key pairs named `prefix` in `dir`.
#[derive(Debug, Clone)]
pub struct FileStore {
    dir: PathBuf,
    prefix: String,
}

/// A certificate and key read from the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pair {
    /// The certificates' DER, leaf first.
    pub certs: Vec<Vec<u8>>,
    /// The key's PEM block.
    pub key_pem: String,
}

impl Pair {
    /// The leaf's validity (`notBefore`, `notAfter`, seconds since the
    /// epoch), if it parses.
    pub fn validity(&self) -> Option<(i64, i64)> {
        let (_, c) = x509_parser::parse_x509_certificate(self.certs.first()?).ok()?;
        Some((
            c.validity().not_before.timestamp(),
            c.validity().not_after.timestamp(),
        ))
    }
}

impl Pair {
    /// Upstream's `certSatisfiesTemplate`: the leaf has the subject's
    /// common name and at least its organizations, DNS names and IPs.
    pub fn satisfies(&self, subject: &super::csr::Subject) -> bool {
        use x509_parser::extensions::GeneralName;
        let Some(Ok((_, c))) = self
            .certs
            .first()
            .map(|d| x509_parser::parse_x509_certificate(d))
        else {
            return false;
        };
        let cn: Vec<&str> = c
            .subject()
            .iter_common_name()
            .filter_map(|a| a.as_str().ok())
            .collect();
        if cn != [subject.common_name.as_str()] {
            return false;
        }
        let orgs: Vec<&str> = c
            .subject()
            .iter_organization()
            .filter_map(|a| a.as_str().ok())
            .collect();
        let (mut dns, mut ips) = (Vec::new(), Vec::new());
        if let Ok(Some(san)) = c.subject_alternative_name() {
            for n in &san.value.general_names {
                match n {
                    GeneralName::DNSName(d) => dns.push(d.to_string()),
                    GeneralName::IPAddress(b) => {
                        let ip = match b.len() {
                            4 => <[u8; 4]>::try_from(*b).ok().map(std::net::IpAddr::from),
                            16 => <[u8; 16]>::try_from(*b).ok().map(std::net::IpAddr::from),
                            _ => None,
                        };
                        ips.extend(ip);
                    }
                    _ => {}
                }
            }
        }
        subject
            .organizations
            .iter()
            .all(|o| orgs.contains(&o.as_str()))
            && subject.dns_names.iter().all(|d| dns.contains(d))
            && subject.ips.iter().all(|i| ips.contains(i))
    }
}

fn pem_of(label: &str, der: &[u8]) -> String {
    pem::encode_config(
        &pem::Pem::new(label, der.to_vec()),
        pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF),
    )
}

/// Parses a PEM text holding certificates and one private key.
pub fn parse_pair(text: &str) -> Result<Pair, String> {
    let blocks = pem::parse_many(text).map_err(|e| format!("invalid PEM: {e}"))?;
    let mut certs = Vec::new();
    let mut key = None;
    for b in blocks {
        match b.tag() {
            "CERTIFICATE" => certs.push(b.contents().to_vec()),
            t if t.ends_with("PRIVATE KEY") && key.is_none() => key = Some(pem_of(t, b.contents())),
            _ => {}
        }
    }
    if certs.is_empty() {
        return Err("no certificate".into());
    }
    Ok(Pair {
        certs,
        key_pem: key.ok_or("no private key")?,
    })
}

impl FileStore {
    /// The store of `prefix` pairs in `dir` (`kubelet-client`,
    /// `kubelet-server`).
    pub fn new(dir: &Path, prefix: &str) -> FileStore {
        FileStore {
            dir: dir.to_path_buf(),
            prefix: prefix.to_string(),
        }
    }

    fn file(&self, qualifier: &str) -> PathBuf {
        self.dir.join(format!("{}-{qualifier}.pem", self.prefix))
    }

    /// `<dir>/<prefix>-current.pem`.
    pub fn current_path(&self) -> PathBuf {
        self.file("current")
    }

    /// The current pair, if there is one that parses.
    pub fn current(&self) -> Result<Pair, String> {
        let path = self.current_path();
        let text = rkube_util::file::read_text(&path, 1 << 20)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        parse_pair(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Upstream's store given `tlsCertFile`/`tlsPrivateKeyFile`: with no
    /// current pair yet, that pair is the current one (copied in, so that
    /// it is served and rotated as an issued one would be).
    pub fn adopt(&self, cert: &Path, key: &Path) -> Result<(), String> {
        if self.current().is_ok() {
            return Ok(());
        }
        let read = |p: &Path| {
            rkube_util::file::read_text(p, 1 << 20).map_err(|e| format!("{}: {e}", p.display()))
        };
        self.update(&read(cert)?, &read(key)?, &timestamp())
            .map(|_| ())
    }

    /// Writes a new pair (the certificates of `cert_pem`, the key block of
    /// `key_pem`) at `time` (`YYYY-MM-DD-hh-mm-ss`) and makes it current.
    pub fn update(&self, cert_pem: &str, key_pem: &str, time: &str) -> Result<PathBuf, String> {
        let mut certs = Vec::new();
        for b in pem::parse_many(cert_pem).map_err(|e| format!("invalid certificate data: {e}"))? {
            if b.tag() == "CERTIFICATE" {
                x509_parser::parse_x509_certificate(b.contents())
                    .map_err(|e| format!("invalid certificate data: {e}"))?;
                certs.push(pem_of("CERTIFICATE", b.contents()));
            }
        }
        if certs.is_empty() {
            return Err("invalid certificate data: no certificate".into());
        }
        let key = pem::parse(key_pem).map_err(|_| "invalid key data".to_string())?;
        std::fs::create_dir_all(&self.dir).map_err(|e| {
            format!(
                "could not create directory {:?} to store certificates: {e}",
                self.dir.display()
            )
        })?;
        let path = self.file(time);
        let mut f = super::private_file(&path)
            .map_err(|e| format!("could not open {:?}: {e}", path.display()))?;
        let body = certs.concat() + &pem_of(key.tag(), key.contents());
        f.write_all(body.as_bytes())
            .and_then(|()| f.sync_all())
            .map_err(|e| {
                format!(
                    "failed to sync certificate data to disk: {e} (file: {:?})",
                    path.display()
                )
            })?;
        // As upstream's Update: the new pair must load (the certificate of
        // that key) before it becomes current.
        if let Err(e) = rkube_daemon::client_cert::load(&path, &path) {
            let _ = std::fs::remove_file(&path);
            return Err(format!(
                "the new certificate and key do not make a pair: {e}"
            ));
        }
        self.update_symlink(&path)?;
        Ok(path)
    }

    fn update_symlink(&self, target: &Path) -> Result<(), String> {
        let current = self.current_path();
        let updated = self.file("updated");
        let is_link = |p: &Path| -> Result<bool, String> {
            match std::fs::symlink_metadata(p) {
                Ok(m) if m.file_type().is_symlink() => Ok(true),
                Ok(_) => Err(format!(
                    "expected {:?} to be a symlink but it is a file",
                    p.display()
                )),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
                Err(e) => Err(e.to_string()),
            }
        };
        is_link(&current)?;
        if is_link(&updated)? {
            std::fs::remove_file(&updated)
                .map_err(|e| format!("unable to remove {:?}: {e}", updated.display()))?;
        }
        let target = std::path::absolute(target).map_err(|e| e.to_string())?;
        std::os::unix::fs::symlink(&target, &updated).map_err(|e| {
            format!(
                "unable to create a symlink from {:?} to {:?}: {e}",
                updated.display(),
                target.display()
            )
        })?;
        // rename(2) replaces the link atomically.
        std::fs::rename(&updated, &current).map_err(|e| {
            format!(
                "unable to rename {:?} to {:?}: {e}",
                updated.display(),
                current.display()
            )
        })
    }
}

/// Go's `2006-01-02-15-04-05` of the local time now.
pub fn timestamp() -> String {
    let t = crate::logs::rotation::local_now();
    format!(
        "{:04}-{:02}-{:02}-{:02}-{:02}-{:02}",
        t.tm_year + 1900,
        t.tm_mon + 1,
        t.tm_mday,
        t.tm_hour,
        t.tm_min,
        t.tm_sec
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn self_signed() -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["n1".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    }

    #[test]
    fn pairs_written_and_swapped_as_upstream() {
        let dir = std::env::temp_dir().join(format!("rkube-certstore-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = FileStore::new(&dir, "kubelet-client");
        assert!(store.current().is_err());
        let (cert, key) = self_signed();
        let first = store.update(&cert, &key, "2026-12-05-10-00-00").unwrap();
        assert_eq!(first, dir.join("kubelet-client-2026-12-05-10-00-00.pem"));
        let mode = std::fs::metadata(&first).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the key never world-readable");
        assert_eq!(std::fs::read_link(store.current_path()).unwrap(), first);
        let pair = store.current().unwrap();
        assert_eq!(pair.certs.len(), 1);
        assert!(pair.key_pem.starts_with("-----BEGIN PRIVATE KEY-----"));
        let (nb, na) = pair.validity().unwrap();
        assert!(na > nb);
        let (cert2, key2) = self_signed();
        let second = store.update(&cert2, &key2, "2026-12-05-11-00-00").unwrap();
        assert_eq!(std::fs::read_link(store.current_path()).unwrap(), second);
        assert!(first.exists(), "the old pair stays, as upstream");
        assert!(!dir.join("kubelet-client-updated.pem").exists());
        // A certificate with another key is refused, the current pair untouched.
        let e = store
            .update(&cert2, &key, "2026-12-05-11-30-00")
            .unwrap_err();
        assert!(e.contains("do not make a pair"), "{e}");
        assert!(!dir.join("kubelet-client-2026-12-05-11-30-00.pem").exists());
        // Garbage is refused, the current pair untouched.
        assert!(store.update("junk", &key, "2026-12-05-12-00-00").is_err());
        assert!(store.update(&cert, "junk", "2026-12-05-12-00-00").is_err());
        assert_eq!(std::fs::read_link(store.current_path()).unwrap(), second);
        // A regular file where the link belongs is an error, never replaced.
        std::fs::remove_file(store.current_path()).unwrap();
        std::fs::write(store.current_path(), "x").unwrap();
        let e = store
            .update(&cert, &key, "2026-12-05-13-00-00")
            .unwrap_err();
        assert!(e.contains("to be a symlink but it is a file"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn signed_for(names: Vec<rcgen::SanType>, cn: &str, orgs: &[&str]) -> Pair {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::default();
        p.subject_alt_names = names;
        let mut dn = rcgen::DistinguishedName::new();
        for o in orgs {
            dn.push(rcgen::DnType::OrganizationName, *o);
        }
        dn.push(rcgen::DnType::CommonName, cn);
        p.distinguished_name = dn;
        let cert = p.self_signed(&key).unwrap();
        parse_pair(&format!("{}{}", cert.pem(), key.serialize_pem())).unwrap()
    }

    #[test]
    fn a_pair_satisfies_the_names_it_carries_as_upstream() {
        use super::super::csr::Subject;
        let want =
            Subject::node_serving("n", &[("InternalIP", "10.0.0.1"), ("Hostname", "n")]).unwrap();
        let dns = |d: &str| rcgen::SanType::DnsName(d.try_into().unwrap());
        let ip = |i: &str| rcgen::SanType::IpAddress(i.parse().unwrap());
        let full = signed_for(
            vec![dns("n"), dns("extra"), ip("10.0.0.1")],
            "system:node:n",
            &["system:nodes"],
        );
        assert!(full.satisfies(&want), "a superset satisfies");
        let no_ip = signed_for(vec![dns("n")], "system:node:n", &["system:nodes"]);
        assert!(!no_ip.satisfies(&want));
        let moved = signed_for(
            vec![dns("n"), ip("10.0.0.2")],
            "system:node:n",
            &["system:nodes"],
        );
        assert!(!moved.satisfies(&want), "the node's address changed");
        let other = signed_for(
            vec![dns("n"), ip("10.0.0.1")],
            "system:node:m",
            &["system:nodes"],
        );
        assert!(!other.satisfies(&want));
        let no_org = signed_for(vec![dns("n"), ip("10.0.0.1")], "system:node:n", &[]);
        assert!(!no_org.satisfies(&want));
        assert!(no_org.satisfies(&Subject {
            organizations: vec![],
            ..want.clone()
        }));
    }

    #[test]
    fn given_files_become_the_first_current_pair() {
        let dir = std::env::temp_dir().join(format!("rkube-certadopt-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (cert, key) = self_signed();
        let (c, k) = (dir.join("given.crt"), dir.join("given.key"));
        std::fs::write(&c, &cert).unwrap();
        std::fs::write(&k, &key).unwrap();
        let store = FileStore::new(&dir, "kubelet-server");
        store.adopt(&c, &k).unwrap();
        let first = std::fs::read_link(store.current_path()).unwrap();
        // Once there is a current pair, the files are not taken again.
        let (cert2, key2) = self_signed();
        std::fs::write(&c, &cert2).unwrap();
        std::fs::write(&k, &key2).unwrap();
        store.adopt(&c, &k).unwrap();
        assert_eq!(std::fs::read_link(store.current_path()).unwrap(), first);
        // With a current pair, missing files are not even read.
        assert!(store.adopt(&dir.join("none"), &k).is_ok());
        let fresh = FileStore::new(&dir.join("sub"), "kubelet-server");
        assert!(fresh.adopt(&dir.join("none"), &k).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
