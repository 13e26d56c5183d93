//! A private image registry for end-to-end tests: the OCI Distribution
//! API's pull side (`/v2/`, manifests by tag or digest, blobs) over plain
//! HTTP on 127.0.0.1, every request behind one Basic login, serving one
//! image of an OCI image layout (what `hack/containerd` imports) under a
//! repository and tag of the test's choosing. It counts the requests that
//! came with the right login and those refused, so a test can tell whether
//! a kubelet pulled.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use base64::Engine;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A running registry; stopped when dropped.
pub struct Registry {
    /// Its port on 127.0.0.1 (images are `localhost:<port>/<repo>:<tag>`).
    pub port: u16,
    counts: Arc<Counts>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct Counts {
    authorized: AtomicUsize,
    refused: AtomicUsize,
}

struct Content {
    repo: String,
    tag: String,
    manifest: Vec<u8>,
    manifest_digest: String,
    blobs: HashMap<String, Vec<u8>>,
    login: String,
}

impl Registry {
    /// Serves the image named `image` in the OCI layout tar `layout_tar` as
    /// `repo:tag`, to clients that log in as `user`/`password`.
    pub async fn start(
        layout_tar: &Path,
        image: &str,
        repo: &str,
        tag: &str,
        user: &str,
        password: &str,
    ) -> Registry {
        let content = Arc::new(load(layout_tar, image, repo, tag, user, password));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let counts = Arc::new(Counts::default());
        let c = counts.clone();
        let task = tokio::spawn(async move {
            while let Ok((s, _)) = listener.accept().await {
                tokio::spawn(serve(s, content.clone(), c.clone()));
            }
        });
        Registry { port, counts, task }
    }

    /// Requests served with the right login so far.
    pub fn authorized(&self) -> usize {
        self.counts.authorized.load(Ordering::SeqCst)
    }

    /// Requests refused (no login or a wrong one) so far.
    pub fn refused(&self) -> usize {
        self.counts.refused.load(Ordering::SeqCst)
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The image's manifest and blobs, read from the layout tar.
fn load(tar: &Path, image: &str, repo: &str, tag: &str, user: &str, password: &str) -> Content {
    let dir = std::env::temp_dir().join(format!("rkube-registry-{}-{}", std::process::id(), tag));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    super::run(
        std::process::Command::new("tar")
            .arg("-xf")
            .arg(tar)
            .arg("-C")
            .arg(&dir),
    );
    let index: Value =
        serde_json::from_slice(&std::fs::read(dir.join("index.json")).unwrap()).unwrap();
    let entry = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["annotations"]["io.containerd.image.name"] == image)
        .unwrap_or_else(|| panic!("{image} is not in {}", tar.display()));
    let blob = |digest: &str| {
        let hex = digest.strip_prefix("sha256:").unwrap();
        std::fs::read(dir.join("blobs/sha256").join(hex)).unwrap()
    };
    let manifest_digest = entry["digest"].as_str().unwrap().to_string();
    let manifest = blob(&manifest_digest);
    let m: Value = serde_json::from_slice(&manifest).unwrap();
    let mut blobs = HashMap::new();
    for d in std::iter::once(&m["config"]).chain(m["layers"].as_array().unwrap()) {
        let d = d["digest"].as_str().unwrap();
        blobs.insert(d.to_string(), blob(d));
    }
    let _ = std::fs::remove_dir_all(&dir);
    Content {
        repo: repo.into(),
        tag: tag.into(),
        manifest,
        manifest_digest,
        blobs,
        login: format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
        ),
    }
}

/// One connection: requests one after another (keep-alive) until the
/// client closes it.
async fn serve(mut s: TcpStream, content: Arc<Content>, counts: Arc<Counts>) {
    let mut buf = Vec::new();
    loop {
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let mut chunk = [0u8; 4096];
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            if buf.len() > 64 * 1024 {
                return;
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        buf.drain(..head_end);
        let mut lines = head.split("\r\n");
        let mut first = lines.next().unwrap_or_default().split(' ');
        let (method, path) = (
            first.next().unwrap_or_default().to_string(),
            first.next().unwrap_or_default().to_string(),
        );
        let auth = lines
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.eq_ignore_ascii_case("authorization"))
            .map(|(_, v)| v.trim().to_string());
        let (status, headers, body) = if auth.as_deref() != Some(content.login.as_str()) {
            counts.refused.fetch_add(1, Ordering::SeqCst);
            (
                "401 Unauthorized",
                vec![("WWW-Authenticate", "Basic realm=\"rkube-test\"".to_string())],
                b"unauthorized\n".to_vec(),
            )
        } else {
            counts.authorized.fetch_add(1, Ordering::SeqCst);
            route(&content, &path)
        };
        let mut out = format!(
            "HTTP/1.1 {status}\r\nContent-Length: {}\r\nDocker-Distribution-Api-Version: registry/2.0\r\n",
            body.len()
        );
        for (k, v) in headers {
            out.push_str(&format!("{k}: {v}\r\n"));
        }
        out.push_str("\r\n");
        let mut bytes = out.into_bytes();
        if method != "HEAD" {
            bytes.extend_from_slice(&body);
        }
        if s.write_all(&bytes).await.is_err() {
            return;
        }
    }
}

fn route(content: &Content, path: &str) -> (&'static str, Vec<(&'static str, String)>, Vec<u8>) {
    let not_found = ("404 Not Found", Vec::new(), b"not found\n".to_vec());
    if path == "/v2/" {
        return ("200 OK", Vec::new(), b"{}".to_vec());
    }
    let Some(rest) = path.strip_prefix(&format!("/v2/{}/", content.repo)) else {
        return not_found;
    };
    if let Some(reference) = rest.strip_prefix("manifests/") {
        if reference != content.tag && reference != content.manifest_digest {
            return not_found;
        }
        return (
            "200 OK",
            vec![
                (
                    "Content-Type",
                    "application/vnd.oci.image.manifest.v1+json".to_string(),
                ),
                ("Docker-Content-Digest", content.manifest_digest.clone()),
            ],
            content.manifest.clone(),
        );
    }
    if let Some(digest) = rest.strip_prefix("blobs/") {
        if let Some(b) = content.blobs.get(digest) {
            return (
                "200 OK",
                vec![
                    ("Content-Type", "application/octet-stream".to_string()),
                    ("Docker-Content-Digest", digest.to_string()),
                ],
                b.clone(),
            );
        }
    }
    not_found
}
