//! A client certificate that rotates under a running client, as client-go's
//! kubelet transport (`pkg/kubelet/certificate/transport.go`): the identity
//! is read from its files (the kubelet's `kubelet-client-current.pem`
//! link), checked every [`CHECK_PERIOD`] and at every TLS handshake; when
//! the files change, every request in flight on the old connections
//! (watches included) is ended and new requests go over new connections
//! that present the new certificate.

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::watch;
use tokio_rustls::rustls;
use tokio_rustls::rustls::client::ResolvesClientCert;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::sign::CertifiedKey;

/// How often the files are checked for a new certificate.
pub const CHECK_PERIOD: Duration = Duration::from_secs(10);

/// The identity of a pair of files (device, inode, mtime, size of each).
pub(crate) type FileId = [(u64, u64, i64, i64, u64); 2];

/// The identity of the certificate and key files (through links): a
/// rotation changes one of them.
pub(crate) fn file_id(cert: &Path, key: &Path) -> Option<FileId> {
    use std::os::unix::fs::MetadataExt;
    let one = |p: &Path| {
        let m = std::fs::metadata(p).ok()?;
        Some((m.dev(), m.ino(), m.mtime(), m.mtime_nsec(), m.size()))
    };
    Some([one(cert)?, one(key)?])
}

/// Reads a certificate chain and its key (they may share one file).
pub fn load(cert: &Path, key: &Path) -> Result<CertifiedKey, String> {
    let read = |p: &Path| {
        rkube_util::file::read_text(p, 1 << 20).map_err(|e| format!("{}: {e}", p.display()))
    };
    let cert_text = read(cert)?;
    let certs: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut cert_text.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {e}", cert.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate", cert.display()));
    }
    let key_text = read(key)?;
    let key_der: PrivateKeyDer<'static> = rustls_pemfile::private_key(&mut key_text.as_bytes())
        .map_err(|e| format!("{}: {e}", key.display()))?
        .ok_or_else(|| format!("{}: no private key", key.display()))?;
    let signer = rustls::crypto::ring::sign::any_supported_type(&key_der)
        .map_err(|e| format!("{}: {e}", key.display()))?;
    let ck = CertifiedKey::new(certs, signer);
    ck.keys_match().map_err(|e| {
        format!(
            "{}: the certificate does not belong to the key {}: {e}",
            cert.display(),
            key.display()
        )
    })?;
    Ok(ck)
}

/// The client identity of a kubeconfig's certificate files, re-read when
/// they change.
#[derive(Debug)]
pub struct ReloadingCert {
    cert: PathBuf,
    key: PathBuf,
    state: Mutex<(Option<FileId>, Arc<CertifiedKey>)>,
    generation: watch::Sender<u64>,
}

impl ReloadingCert {
    /// The identity in `cert` and `key` (absolute paths).
    pub fn new(cert: &Path, key: &Path) -> Result<Arc<ReloadingCert>, String> {
        let id = file_id(cert, key);
        let ck = load(cert, key)?;
        Ok(Arc::new(ReloadingCert {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            state: Mutex::new((id, Arc::new(ck))),
            generation: watch::channel(0).0,
        }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (Option<FileId>, Arc<CertifiedKey>)> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Re-reads the files if they changed; true when the identity did.
    pub fn check(&self) -> bool {
        let id = file_id(&self.cert, &self.key);
        if id.is_none() || id == self.lock().0 {
            return false;
        }
        match load(&self.cert, &self.key) {
            Ok(ck) => {
                *self.lock() = (id, Arc::new(ck));
                tracing::info!(
                    "Certificate rotation detected, shutting down client connections to start using new credentials"
                );
                self.generation.send_modify(|g| *g += 1);
                true
            }
            // Half-written files: tried again at the next check.
            Err(e) => {
                tracing::debug!(error = %e, "the rotated client certificate does not load yet");
                false
            }
        }
    }

    /// Bumped at each rotation.
    pub fn generation(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }

    /// Checks the files every [`CHECK_PERIOD`] while `self` is alive
    /// elsewhere.
    pub fn watch(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        if tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(CHECK_PERIOD).await;
                let Some(me) = weak.upgrade() else { return };
                me.check();
            }
        });
    }
}

impl ResolvesClientCert for ReloadingCert {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        self.check();
        Some(self.lock().1.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// A response body ended (with an error) once the identity rotated after
/// its request was sent.
pub struct Cut<B> {
    inner: B,
    rotated: Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
}

impl<B> Cut<B> {
    /// `inner`, ended once `generation` differs from `sent` (its value
    /// when the request was sent: a rotation between sending and the
    /// answer cuts it too).
    pub fn new(inner: B, mut generation: watch::Receiver<u64>, sent: u64) -> Cut<B> {
        Cut {
            inner,
            rotated: Box::pin(async move {
                loop {
                    if *generation.borrow_and_update() != sent {
                        return;
                    }
                    if generation.changed().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
            }),
        }
    }
}

/// The error a cut body ends with.
#[derive(Debug, thiserror::Error)]
#[error("the client certificate rotated: connection closed to use the new credentials")]
pub struct Rotated;

impl<B> http_body::Body for Cut<B>
where
    B: http_body::Body + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = B::Data;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        if self.rotated.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(Box::new(Rotated))));
        }
        Pin::new(&mut self.inner)
            .poll_frame(cx)
            .map(|f| f.map(|r| r.map_err(Into::into)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    fn pair(dir: &Path, name: &str) -> PathBuf {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![name.to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let p = dir.join(format!("{name}.pem"));
        std::fs::write(&p, format!("{}{}", cert.pem(), key.serialize_pem())).unwrap();
        p
    }

    #[test]
    fn a_new_pair_behind_the_link_is_picked_up() {
        let dir = std::env::temp_dir().join(format!("rkube-clientcert-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let a = pair(&dir, "a");
        let b = pair(&dir, "b");
        let link = dir.join("current.pem");
        std::os::unix::fs::symlink(&a, &link).unwrap();
        let r = ReloadingCert::new(&link, &link).unwrap();
        let gen = r.generation();
        let first = r.resolve(&[], &[]).unwrap().cert[0].clone();
        assert!(!r.check(), "nothing changed");
        let tmp = dir.join("updated.pem");
        std::os::unix::fs::symlink(&b, &tmp).unwrap();
        std::fs::rename(&tmp, &link).unwrap();
        assert!(r.check());
        assert_eq!(*gen.borrow(), 1);
        let second = r.resolve(&[], &[]).unwrap().cert[0].clone();
        assert_ne!(first, second);
        // A broken file keeps the identity in use.
        std::fs::write(dir.join("bad.pem"), "junk").unwrap();
        std::fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink(dir.join("bad.pem"), &link).unwrap();
        assert!(!r.check());
        assert_eq!(r.resolve(&[], &[]).unwrap().cert[0], second);
        assert!(ReloadingCert::new(&dir.join("bad.pem"), &dir.join("bad.pem")).is_err());
        // A certificate with another pair's key is refused.
        let e = load(&a, &b).unwrap_err();
        assert!(e.contains("does not belong to the key"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// One frame, then pending forever (a watch that gets no event).
    struct OneThenPending(bool);

    impl http_body::Body for OneThenPending {
        type Data = bytes::Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<http_body::Frame<bytes::Bytes>, Self::Error>>> {
            if self.0 {
                return Poll::Pending;
            }
            self.0 = true;
            Poll::Ready(Some(Ok(http_body::Frame::data(bytes::Bytes::from_static(
                b"x",
            )))))
        }
    }

    #[tokio::test]
    async fn bodies_end_when_the_identity_rotates() {
        let (tx, rx) = watch::channel(0u64);
        let mut cut = Cut::new(OneThenPending(false), rx, 0);
        let f = cut.frame().await.unwrap().unwrap();
        assert_eq!(f.into_data().unwrap(), "x");
        let waiting = tokio::time::timeout(Duration::from_millis(50), cut.frame()).await;
        assert!(waiting.is_err(), "no rotation: the body waits");
        tx.send_modify(|g| *g += 1);
        let end = cut.frame().await.unwrap();
        assert!(end
            .unwrap_err()
            .to_string()
            .contains("client certificate rotated"));
        // Without a rotation source the body is never cut.
        let (tx, rx) = watch::channel(0u64);
        drop(tx);
        let mut never = Cut::new(OneThenPending(true), rx, 0);
        assert!(
            tokio::time::timeout(Duration::from_millis(50), never.frame())
                .await
                .is_err()
        );
    }
}
