//! A serving certificate read from files and re-read when they change, as
//! upstream's kubelet serves the pair its certificate manager keeps
//! (`serverTLSBootstrap`: `kubelet-server-current.pem`) or the files it is
//! given (`tlsCertFile`, reloaded under `ReloadKubeletServerCertificateFile`):
//! the files are looked at (one `stat` each) at every TLS handshake, at
//! most once a second; a pair that is missing, does not load or has expired
//! is not served, and the handshake fails as upstream's does with "no
//! serving certificate available for the kubelet".

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;

use crate::client_cert::{file_id, load, FileId};

/// How often the files may be looked at.
const CHECK_EVERY: Duration = Duration::from_secs(1);

#[derive(Debug, Default)]
struct State {
    checked: Option<Instant>,
    id: Option<FileId>,
    /// The pair and its leaf's `notAfter` (seconds since the epoch).
    current: Option<(Arc<CertifiedKey>, i64)>,
    /// A failed handshake was logged since the last change.
    warned: bool,
}

/// The serving pair in `cert` and `key` (they may be one file).
#[derive(Debug)]
pub struct ReloadingServingCert {
    cert: PathBuf,
    key: PathBuf,
    /// An expired pair is not served (a certificate manager's pair); a
    /// given file's is, as upstream's dynamic file manager serves it.
    refuse_expired: bool,
    state: Mutex<State>,
}

fn not_after(ck: &CertifiedKey) -> Option<i64> {
    let leaf = ck.cert.first()?;
    let (_, c) = x509_parser::parse_x509_certificate(leaf.as_ref()).ok()?;
    Some(c.validity().not_after.timestamp())
}

fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

impl ReloadingServingCert {
    /// Serves the pair in `cert` and `key` whenever it loads (and, with
    /// `refuse_expired`, has not expired).
    pub fn new(cert: &Path, key: &Path, refuse_expired: bool) -> Arc<ReloadingServingCert> {
        let me = Arc::new(ReloadingServingCert {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            refuse_expired,
            state: Mutex::new(State::default()),
        });
        me.check(true);
        me
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Re-reads the files if they changed (and `force` or a second passed).
    fn check(&self, force: bool) {
        let mut st = self.lock();
        if !force && st.checked.is_some_and(|t| t.elapsed() < CHECK_EVERY) {
            return;
        }
        st.checked = Some(Instant::now());
        let id = file_id(&self.cert, &self.key);
        if id.is_some() && id == st.id {
            return;
        }
        match load(&self.cert, &self.key) {
            Ok(ck) => {
                let expires = not_after(&ck).unwrap_or(i64::MAX);
                if st.current.is_some() {
                    tracing::info!(cert = %self.cert.display(), "Loaded a new serving certificate");
                }
                st.current = Some((Arc::new(ck), expires));
                st.id = id;
                st.warned = false;
            }
            // Not there yet (bootstrap), or half-written: the current pair
            // stays until a new one loads.
            Err(e) => tracing::debug!(error = %e, "the serving certificate does not load"),
        }
    }

    /// The pair served now, if any (none before the first one is issued,
    /// nor after it expired).
    pub fn current(&self) -> Option<Arc<CertifiedKey>> {
        self.check(false);
        let mut st = self.lock();
        let served = st
            .current
            .as_ref()
            .filter(|(_, expires)| !self.refuse_expired || now_secs() < *expires)
            .map(|(ck, _)| ck.clone());
        if served.is_none() && !st.warned {
            st.warned = true;
            tracing::warn!(
                cert = %self.cert.display(),
                "TLS handshake refused: no serving certificate available for the kubelet"
            );
        }
        served
    }
}

impl ResolvesServerCert for ReloadingServingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(name: &str) -> (String, String) {
        let made = rcgen::generate_simple_self_signed(vec![name.to_string()]).unwrap();
        (made.cert.pem(), made.signing_key.serialize_pem())
    }

    #[test]
    fn serves_the_pair_once_it_exists_and_each_new_one() {
        let dir = std::env::temp_dir().join(format!("rkube-serving-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("kubelet-server-current.pem");
        let s = ReloadingServingCert::new(&file, &file, true);
        assert!(s.current().is_none(), "no pair yet");
        let (c, k) = pair("a");
        std::fs::write(&file, format!("{c}{k}")).unwrap();
        s.check(true);
        let first = s.current().expect("served once written");
        let (c2, k2) = pair("b");
        // A torn write keeps the last good pair.
        std::fs::write(&file, &c2).unwrap();
        s.check(true);
        assert_eq!(s.current().unwrap().cert, first.cert);
        std::fs::write(&file, format!("{c2}{k2}")).unwrap();
        s.check(true);
        assert_ne!(
            s.current().unwrap().cert,
            first.cert,
            "the new pair is served"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_expired_pair_is_not_served() {
        let dir = std::env::temp_dir().join(format!("rkube-serving-exp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["n".to_string()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2000, 1, 1);
        params.not_after = rcgen::date_time_ymd(2001, 1, 1);
        let cert = params.self_signed(&key).unwrap();
        let file = dir.join("old.pem");
        std::fs::write(&file, format!("{}{}", cert.pem(), key.serialize_pem())).unwrap();
        assert!(ReloadingServingCert::new(&file, &file, true)
            .current()
            .is_none());
        // A given file is served expired, as upstream serves it.
        assert!(ReloadingServingCert::new(&file, &file, false)
            .current()
            .is_some());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
