//! A node on a real control plane and containerd for the device tests
//! (`device_plugins`, `dra_driver`): the node's root directory and
//! configuration, `rkube kubelet --runtime cri` or upstream's kubelet on
//! it, and the private mount namespace in which a plugin (or upstream's
//! kubelet) finds that root directory at `/var/lib/kubelet`.

use std::path::{Path, PathBuf};

use rkube_testcp::support::free_port;
use rkube_testcp::ControlPlane;

use super::containerd::Containerd;
use super::{built, Process, Unmount};

/// `bin ARGS` in a private mount namespace where the node's root directory
/// `root` is `/var/lib/kubelet` (on a tmpfs over `/var/lib`, so the host's
/// is untouched): where a plugin DaemonSet's hostPath finds
/// `device-plugins` and `plugins_registry`, and where upstream's kubelet
/// keeps `device-plugins` whatever its `--root-dir`.
/// With `private_run`, `/run` is a tmpfs of its own too, its `cdi` (where
/// a plugin writes its CDI specs) the containerd's.
pub fn in_namespace(
    root: &Path,
    private_run: Option<&Path>,
    bin: &str,
    args: &[String],
    log: &Path,
) -> Process {
    let run = match private_run {
        Some(cdi) => format!(
            "mount -t tmpfs none /run && mkdir -p /run/cdi && mount --bind {} /run/cdi && ",
            cdi.display()
        ),
        None => String::new(),
    };
    let script = format!(
        "{run}mount -t tmpfs none /var/lib && mkdir -p /var/lib/kubelet && \
         mount --bind {} /var/lib/kubelet && exec \"$0\" \"$@\"",
        root.display()
    );
    let mut argv: Vec<String> = ["-m", "--propagation", "private", "sh", "-c"]
        .map(String::from)
        .to_vec();
    argv.push(script);
    argv.push(bin.to_string());
    argv.extend(args.iter().cloned());
    Process::start("unshare", &argv, log)
}

/// A control plane, a containerd, and a node's directories and
/// configuration (both kubelets read it). Fields drop in order: mounts
/// first, then the work directory (kept when the test fails: the
/// kubelets' and the plugin's logs), containerd, the control plane.
pub struct Bench {
    pub root: PathBuf,
    pub dir: PathBuf,
    pub cfg: PathBuf,
    pub work: PathBuf,
    pub _unmount: Unmount,
    pub _cleanup: Cleanup,
    pub ctrd: Containerd,
    pub cp: ControlPlane,
}

pub struct Cleanup(pub PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        // The plugin's fake devices are files it creates in /tmp.
        for d in ["/tmp/Dev-1", "/tmp/Dev-2"] {
            let _ = std::fs::remove_file(d);
        }
        if std::thread::panicking() {
            eprintln!("logs kept in {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

impl Bench {
    pub fn up() -> Bench {
        Bench::on(Containerd::up("rk-dp"))
    }

    /// On containerd 2 (hack/containerd2-build), which injects CDI devices.
    pub fn up_containerd2() -> Bench {
        let bin = built("containerd2-build", &[]);
        Bench::on(Containerd::up_with(
            "rk-dp",
            &[("RKUBE_CONTAINERD_BIN", &bin)],
        ))
    }

    pub fn on(ctrd: Containerd) -> Bench {
        let cp = ControlPlane::start().expect("control plane starts");
        // One directory per bench (a test binary may hold several).
        static BENCHES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = BENCHES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let work = std::env::temp_dir().join(format!("rk-dp-work-{}-{n}", std::process::id()));
        let root = work.join("root");
        std::fs::create_dir_all(work.join("pod-logs")).unwrap();
        // Bound into the namespaces before a kubelet makes them.
        for d in [
            rkube_kubelet::devices::DIR,
            rkube_kubelet::pluginmanager::DIR,
        ] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        let cfg = work.join("kubelet.yaml");
        // makeIPTablesUtilChains: false: upstream's kubelet runs in the
        // host's network namespace here.
        std::fs::write(
            &cfg,
            format!(
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
                 address: 127.0.0.1\nport: {}\nhealthzPort: 0\nreadOnlyPort: 0\n\
                 evictionHard: {{memory.available: 100Mi, nodefs.available: 1Gi, imagefs.available: 1Gi}}\n\
                 imageGCHighThresholdPercent: 100\nimageGCLowThresholdPercent: 99\n\
                 containerRuntimeEndpoint: {}\nfailCgroupV1: false\nfailSwapOn: false\n\
                 cgroupDriver: cgroupfs\nmakeIPTablesUtilChains: false\npodLogsDir: {}\n",
                free_port(),
                ctrd.endpoint(),
                work.join("pod-logs").display()
            ),
        )
        .unwrap();
        Bench {
            dir: root.join(rkube_kubelet::devices::DIR),
            _unmount: Unmount(root.clone()),
            _cleanup: Cleanup(work.clone()),
            root,
            cfg,
            work,
            ctrd,
            cp,
        }
    }

    pub fn common_args(&self) -> Vec<String> {
        vec![
            format!(
                "--kubeconfig={}",
                self.cp.node_kubeconfig("dp-node").unwrap().display()
            ),
            "--hostname-override=dp-node".into(),
            "--node-ip=127.0.0.1".into(),
            format!("--root-dir={}", self.root.display()),
            format!("--config={}", self.cfg.display()),
        ]
    }

    pub fn rkube(&self, log: &str) -> Process {
        let mut args = vec!["kubelet".to_string(), "--runtime=cri".into()];
        args.extend(self.common_args());
        Process::start(env!("CARGO_BIN_EXE_rkube"), &args, &self.work.join(log))
    }

    /// Upstream's kubelet, its device plugin directory this node's.
    pub fn upstream(&self, bin: &str, log: &str) -> Process {
        let mut args = self.common_args();
        args.push(format!("--cert-dir={}", self.root.join("pki").display()));
        args.push("--v=2".into());
        in_namespace(&self.root, None, bin, &args, &self.work.join(log))
    }

    /// Where containerd 2 reads CDI specs (hack/containerd's `DIR/cdi`).
    pub fn cdi(&self) -> PathBuf {
        let d = self.ctrd.0.join("cdi");
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    pub fn pod_resources(&self) -> PathBuf {
        self.root.join("pod-resources/kubelet.sock")
    }
}
