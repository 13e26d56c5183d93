//! A private, genuine Kubernetes control plane for integration tests.
//!
//! [`ControlPlane::start`] runs `hack/control-plane up --dir <tmp>` (etcd,
//! kube-apiserver and kube-controller-manager v1.37 built from the upstream Go
//! modules, on free loopback ports, TLS and RBAC) and stops it with `down`
//! when dropped, so every test binary gets its own cluster. No mock: tests
//! talk to it with the real `kubectl` or any client, using [`kubeconfig`]
//! (admin), [`scheduler_kubeconfig`] (`system:kube-scheduler`) or
//! [`ControlPlane::node_kubeconfig`] (`system:node:<name>`).
//!
//! [`kubeconfig`]: ControlPlane::kubeconfig
//! [`scheduler_kubeconfig`]: ControlPlane::scheduler_kubeconfig

pub mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{bail, Context, Result};

/// A running control plane; stopped on drop.
pub struct ControlPlane {
    root: PathBuf,
    dir: PathBuf,
    kubeconfig: PathBuf,
}

/// The checkout whose `hack/` scripts to run: the nearest ancestor of the
/// working directory that has `hack/control-plane` (tests and `hack/bench`
/// run from the checkout), else the one this crate was built from (a shared
/// target directory may hold a build from another clone).
fn repo_root() -> PathBuf {
    if let Ok(cwd) = std::env::current_dir() {
        if let Some(root) = cwd.ancestors().find(|d| script(d).is_file()) {
            return root.to_path_buf();
        }
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn script(root: &Path) -> PathBuf {
    root.join("hack/control-plane")
}

impl ControlPlane {
    /// Starts a control plane in a fresh directory under the system temp dir.
    pub fn start() -> Result<Self> {
        Self::start_with(&[])
    }

    /// [`ControlPlane::start`] with options of `hack/control-plane up`
    /// (`RKUBE_CP_APISERVER_IP`, `RKUBE_CP_AUDIT`: see its header).
    pub fn start_with(options: &[(&str, &str)]) -> Result<Self> {
        let root = repo_root().canonicalize()?;
        let dir = std::env::temp_dir().join(format!(
            "rkube-cp-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        ));
        let out = Command::new(script(&root))
            .args(["up", "--dir"])
            .arg(&dir)
            .envs(options.iter().copied())
            .output()
            .context("running hack/control-plane up")?;
        if !out.status.success() {
            bail!(
                "hack/control-plane up failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let kubeconfig = stdout
            .lines()
            .find_map(|l| l.strip_prefix("export KUBECONFIG="))
            .map(|p| PathBuf::from(p.trim()))
            .context("hack/control-plane up printed no export line")?;
        Ok(ControlPlane {
            root,
            dir,
            kubeconfig,
        })
    }

    /// The state directory (logs in `logs/`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Admin kubeconfig.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// Kubeconfig of `system:kube-scheduler`.
    pub fn scheduler_kubeconfig(&self) -> PathBuf {
        self.dir.join("scheduler.kubeconfig")
    }

    /// Mints a `system:node:<name>` identity and returns its kubeconfig.
    pub fn node_kubeconfig(&self, name: &str) -> Result<PathBuf> {
        let out = Command::new(script(&self.root))
            .args(["node-cert", "--dir"])
            .arg(&self.dir)
            .arg(name)
            .output()?;
        if !out.status.success() {
            bail!("node-cert failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
    }

    /// A bootstrap token as kubeadm makes one (with kubeadm's bindings for
    /// joining nodes); returns the path of a kubeconfig holding only it.
    pub fn bootstrap_kubeconfig(&self) -> Result<PathBuf> {
        let out = Command::new(script(&self.root))
            .args(["bootstrap-token", "--dir"])
            .arg(&self.dir)
            .output()?;
        if !out.status.success() {
            bail!(
                "bootstrap-token failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
    }

    fn script(&self, args: &[&str], env: &[(&str, String)]) -> Result<()> {
        let out = Command::new(script(&self.root))
            .args(args)
            .arg("--dir")
            .arg(&self.dir)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .output()?;
        if !out.status.success() {
            bail!(
                "hack/control-plane {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }

    /// Stops kube-apiserver (SIGKILL when `kill`, else SIGTERM), keeps it
    /// down for `down`, starts it again and waits until it is ready.
    pub fn restart_apiserver(&self, kill: bool, down: std::time::Duration) -> Result<()> {
        self.restart("restart-apiserver", kill, down)
    }

    /// The same for etcd (restarted on its data); returns once the API
    /// server is ready again.
    pub fn restart_etcd(&self, kill: bool, down: std::time::Duration) -> Result<()> {
        self.restart("restart-etcd", kill, down)
    }

    fn restart(&self, command: &str, kill: bool, down: std::time::Duration) -> Result<()> {
        self.script(
            &[command],
            &[
                (
                    "RESTART_SIGNAL",
                    if kill { "KILL" } else { "TERM" }.to_string(),
                ),
                ("DOWN_SECONDS", format!("{:.3}", down.as_secs_f64())),
            ],
        )
    }

    /// (Re)starts upstream kube-scheduler (leader election off) with an
    /// optional KubeSchedulerConfiguration and extra flags.
    pub fn start_upstream_scheduler(&self, config: Option<&Path>, extra: &[&str]) -> Result<()> {
        let mut cmd = Command::new(script(&self.root));
        cmd.arg("scheduler").arg("--dir").arg(&self.dir);
        if let Some(c) = config {
            cmd.arg("--config").arg(c);
        }
        if !extra.is_empty() {
            cmd.arg("--").args(extra);
        }
        let out = cmd.output()?;
        if !out.status.success() {
            bail!(
                "hack/control-plane scheduler failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }

    /// Stops upstream kube-scheduler.
    pub fn stop_upstream_scheduler(&self) -> Result<()> {
        self.script(&["stop-scheduler"], &[])
    }

    /// Runs the real `kubectl` with a kubeconfig.
    pub fn kubectl_as(&self, kubeconfig: &Path, args: &[&str]) -> Result<Output> {
        Ok(Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(args)
            .output()?)
    }

    /// Runs the real `kubectl` as admin.
    pub fn kubectl(&self, args: &[&str]) -> Result<Output> {
        self.kubectl_as(&self.kubeconfig, args)
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let _ = Command::new(script(&self.root))
            .args(["down", "--dir"])
            .arg(&self.dir)
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
