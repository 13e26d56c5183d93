//! TLS bootstrap, as upstream's `pkg/kubelet/certificate/bootstrap`
//! (`LoadClientCert`): when `--kubeconfig` does not hold a certificate that
//! is still valid, the kubelet uses `--bootstrap-kubeconfig` (a bootstrap
//! token, as `kubeadm join` writes it) to request its client certificate,
//! keeps it in `<cert-dir>/kubelet-client-current.pem` and writes
//! `--kubeconfig` pointing to it. A restarted kubelet whose certificate is
//! still valid skips all of this; one whose kubeconfig is gone but whose
//! store holds a pair reuses that pair's key.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kube::config::Kubeconfig;

use super::csr::{self, Subject};
use super::store::{self, FileStore};

/// The key of a request in flight (upstream's `kubelet-client.key.tmp`).
const TMP_KEY: &str = "kubelet-client.key.tmp";
/// How long the kubelet waits for its certificate (upstream: an hour).
pub const WAIT: Duration = Duration::from_secs(3600);

/// The kubeconfig's cluster and user of its current context.
fn current(
    kc: &Kubeconfig,
) -> (
    Option<&kube::config::Cluster>,
    Option<&kube::config::AuthInfo>,
) {
    let ctx = kc
        .current_context
        .as_ref()
        .and_then(|n| kc.contexts.iter().find(|c| &c.name == n))
        .or_else(|| kc.contexts.first())
        .and_then(|c| c.context.as_ref());
    let cluster = ctx
        .and_then(|c| kc.clusters.iter().find(|x| x.name == c.cluster))
        .or_else(|| kc.clusters.first())
        .and_then(|c| c.cluster.as_ref());
    let user = ctx
        .and_then(|c| c.user.as_ref())
        .and_then(|u| kc.auth_infos.iter().find(|x| &x.name == u))
        .and_then(|u| u.auth_info.as_ref());
    (cluster, user)
}

/// Reads a kubeconfig (a regular file, at most the configuration size
/// limit: never a FIFO or an endless file), its relative paths resolved
/// against its directory as client-go resolves them.
pub fn read_kubeconfig(path: &Path) -> Result<Kubeconfig, String> {
    let text = rkube_util::file::read_text(path, rkube_util::file::CONFIG_MAX_BYTES)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let mut kc = Kubeconfig::from_yaml(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    for c in kc.clusters.iter_mut().filter_map(|c| c.cluster.as_mut()) {
        if let Some(f) = c.certificate_authority.as_mut() {
            *f = resolve(path, f).display().to_string();
        }
    }
    for u in kc
        .auth_infos
        .iter_mut()
        .filter_map(|u| u.auth_info.as_mut())
    {
        for f in [u.client_certificate.as_mut(), u.client_key.as_mut()]
            .into_iter()
            .flatten()
        {
            *f = resolve(path, f).display().to_string();
        }
    }
    Ok(kc)
}

/// `p` resolved against the directory of `file` when relative, as
/// client-go resolves a kubeconfig's paths.
fn resolve(file: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        file.parent().unwrap_or(Path::new(".")).join(p)
    }
}

/// The client certificate file of `kubeconfig`'s current user (resolved
/// against the kubeconfig's directory), if it names one.
pub fn client_certificate_path(kubeconfig: &Path) -> Option<PathBuf> {
    let kc = read_kubeconfig(kubeconfig).ok()?;
    let (_, user) = current(&kc);
    user?.client_certificate.as_ref().map(PathBuf::from)
}

/// Upstream's `isClientConfigStillValid`: the kubeconfig exists and its
/// client certificates all are still valid at `now` (seconds).
pub fn client_config_still_valid(kubeconfig: &Path, now: i64) -> bool {
    if !kubeconfig.exists() {
        return false;
    }
    let Ok(kc) = read_kubeconfig(kubeconfig) else {
        tracing::warn!(path = %kubeconfig.display(), "unable to read existing bootstrap client config");
        return false;
    };
    let (_, Some(user)) = current(&kc) else {
        return false;
    };
    let pem_text = if let Some(data) = &user.client_certificate_data {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD
            .decode(data)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
    } else {
        // A pair in files must load: the certificate of that key.
        if let (Some(c), Some(k)) = (&user.client_certificate, &user.client_key) {
            if let Err(e) = rkube_daemon::client_cert::load(Path::new(c), Path::new(k)) {
                tracing::warn!(error = %e, "the kubeconfig's client certificate does not load");
                return false;
            }
        }
        user.client_certificate
            .as_ref()
            .and_then(|f| rkube_util::file::read_text(Path::new(f), 1 << 20).ok())
    };
    let Some(text) = pem_text else {
        return false;
    };
    let expiries = super::expiries(&text);
    !expiries.is_empty() && expiries.iter().all(|t| t.is_some_and(|t| t >= now))
}

fn write_private(path: &Path, body: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    rkube_util::file::replace_private(path, body.as_bytes())
}

/// The kubeconfig upstream writes after bootstrapping: the bootstrap
/// kubeconfig's cluster, the client certificate and key from `pem`.
pub fn kubeconfig_text(
    server: &str,
    ca_file: Option<&str>,
    ca_data: Option<&str>,
    insecure: bool,
    pem: &Path,
) -> String {
    let mut cluster = serde_json::json!({"server": server});
    if insecure {
        cluster["insecure-skip-tls-verify"] = true.into();
    }
    match (ca_file, ca_data) {
        (Some(f), _) => cluster["certificate-authority"] = f.into(),
        (None, Some(d)) => cluster["certificate-authority-data"] = d.into(),
        _ => {}
    }
    let pem = pem.display().to_string();
    let doc = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "default-cluster", "cluster": cluster}],
        "contexts": [{"name": "default-context", "context": {
            "cluster": "default-cluster", "namespace": "default", "user": "default-auth"}}],
        "current-context": "default-context",
        "preferences": {},
        "users": [{"name": "default-auth", "user": {
            "client-certificate": pem, "client-key": pem}}],
    });
    serde_yaml_ng::to_string(&doc).unwrap_or_default()
}

/// Upstream's `LoadClientCert` for Node `node`.
pub async fn load_client_cert(
    kubeconfig: &Path,
    bootstrap: &Path,
    cert_dir: &Path,
    node: &str,
) -> anyhow::Result<()> {
    use anyhow::Context as _;
    if client_config_still_valid(kubeconfig, super::now_secs()) {
        tracing::info!(path = %kubeconfig.display(), "Kubeconfig exists and is valid, skipping bootstrap");
        return Ok(());
    }
    tracing::info!(
        "Using bootstrap kubeconfig to generate TLS client cert, key and kubeconfig file"
    );
    let boot = read_kubeconfig(bootstrap)
        .map_err(|e| anyhow::anyhow!("unable to load bootstrap kubeconfig: {e}"))?;
    let (Some(cluster), _) = current(&boot) else {
        anyhow::bail!(
            "unable to load bootstrap kubeconfig {}: no cluster",
            bootstrap.display()
        );
    };
    let server = cluster.server.clone().with_context(|| {
        format!(
            "bootstrap kubeconfig {}: the cluster has no server",
            bootstrap.display()
        )
    })?;
    let client = rkube_daemon::from_kubeconfig(Some(bootstrap))
        .await
        .context("unable to create certificates signing request client")?;
    // Absolute: the kubeconfig written below names the pair by this path.
    let cert_dir = std::path::absolute(cert_dir)
        .with_context(|| format!("--cert-dir {}", cert_dir.display()))?;
    let cert_dir = cert_dir.as_path();
    let store = FileStore::new(cert_dir, "kubelet-client");
    let tmp_key = cert_dir.join(TMP_KEY);
    // A pair in the store keeps its key; else a key of an earlier attempt,
    // else a new one.
    let key = match store.current() {
        Ok(pair) => pair.key_pem,
        Err(_) => match rkube_util::file::read_text(&tmp_key, 1 << 16) {
            Ok(k) if rcgen::KeyPair::from_pem(&k).is_ok() => k,
            _ => {
                let k = csr::generate_key().map_err(anyhow::Error::msg)?;
                write_private(&tmp_key, &k)
                    .with_context(|| format!("writing {}", tmp_key.display()))?;
                k
            }
        },
    };
    let usages = ["digital signature", "client auth"];
    let (request, name) = csr::make_request(&key, &Subject::node_client(node), &usages)
        .map_err(anyhow::Error::msg)?;
    // Upstream waits up to a minute for the API server to answer first.
    let mut tries = 0;
    let cert = loop {
        match csr::request_certificate(
            &client,
            &request,
            Some(&name),
            csr::CLIENT_SIGNER,
            &usages,
            WAIT,
        )
        .await
        {
            Ok(c) => break c,
            Err(csr::CsrError::Create(e)) if tries < 30 && !matches!(e, kube::Error::Api(_)) => {
                tries += 1;
                tracing::info!(error = %e, "Error waiting for apiserver to come up");
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            Err(e) => return Err(e.into()),
        }
    };
    store
        .update(&cert, &key, &store::timestamp())
        .map_err(anyhow::Error::msg)?;
    if let Err(e) = std::fs::remove_file(&tmp_key) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::info!(path = %tmp_key.display(), error = %e, "Failed cleaning up private key file");
        }
    }
    let ca_file = cluster.certificate_authority.clone();
    let text = kubeconfig_text(
        &server,
        ca_file.as_deref(),
        cluster.certificate_authority_data.as_deref(),
        cluster.insecure_skip_tls_verify.unwrap_or(false),
        &store.current_path(),
    );
    write_private(kubeconfig, &text)
        .with_context(|| format!("writing kubeconfig {}", kubeconfig.display()))?;
    tracing::info!(path = %kubeconfig.display(), "wrote the kubelet's kubeconfig from the bootstrap certificate");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed certificate and its key, valid until 1 January of
    /// `year`.
    fn cert_until(year: i32) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.not_before = rcgen::date_time_ymd(2020, 1, 1);
        p.not_after = rcgen::date_time_ymd(year, 1, 1);
        (p.self_signed(&key).unwrap().pem(), key.serialize_pem())
    }

    #[test]
    fn a_valid_kubeconfig_skips_bootstrap_an_expired_one_does_not() {
        let dir = std::env::temp_dir().join(format!("rkube-bootstrap-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("pki")).unwrap();
        let kc = dir.join("kubelet.conf");
        assert!(!client_config_still_valid(&kc, 1_800_000_000), "no file");
        // 1_800_000_000 s is in 2027.
        for (year, valid) in [(2099, true), (2021, false)] {
            let (cert, key) = cert_until(year);
            let pem = dir.join("pki/kubelet-client-current.pem");
            std::fs::write(&pem, format!("{cert}{key}")).unwrap();
            std::fs::write(
                &kc,
                kubeconfig_text("https://127.0.0.1:6443", Some("/ca.crt"), None, false, &pem),
            )
            .unwrap();
            assert_eq!(
                client_config_still_valid(&kc, 1_800_000_000),
                valid,
                "until {year}"
            );
        }
        // A token kubeconfig has no certificate: bootstrap again, as upstream.
        std::fs::write(
            &kc,
            "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://x'}}]\n\
             users: [{name: u, user: {token: abc}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n\
             current-context: x\n",
        )
        .unwrap();
        assert!(!client_config_still_valid(&kc, 1_800_000_000));
        std::fs::write(&kc, "not: [a kubeconfig").unwrap();
        assert!(!client_config_still_valid(&kc, 1_800_000_000));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_written_kubeconfig_as_upstream_writes_it() {
        let text = kubeconfig_text(
            "https://10.0.0.1:6443",
            None,
            Some("Q0E="),
            false,
            Path::new("/var/lib/kubelet/pki/kubelet-client-current.pem"),
        );
        let v: serde_json::Value = serde_yaml_ng::from_str(&text).unwrap();
        assert_eq!(v["current-context"], "default-context");
        assert_eq!(
            v["clusters"][0]["cluster"]["certificate-authority-data"],
            "Q0E="
        );
        assert_eq!(
            v["users"][0]["user"]["client-key"],
            "/var/lib/kubelet/pki/kubelet-client-current.pem"
        );
        assert_eq!(v["contexts"][0]["context"]["user"], "default-auth");
    }
}
