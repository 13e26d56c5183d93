//! rkube's kubelet installed on a node as an operator installs upstream's:
//!
//! * the Debian package (`hack/deb`) installs into a test root with `dpkg
//!   -i` and holds the binary, `/usr/bin/kubelet` and the unit, which
//!   `systemd-analyze verify` accepts with kubeadm's drop-in beside it (as
//!   kubeadm's package installs it); `kubelet --version` prints what
//!   kubeadm's preflight parses; `dpkg -r` removes it all;
//! * a node of `hack/cluster up --join kubeadm` — the package installed,
//!   the kubelet run from its unit and drop-in, upstream's `kubeadm join`
//!   with a bootstrap token — joins and goes Ready, with the flags of its
//!   `/etc/default/kubelet`, a client certificate from the TLS bootstrap,
//!   and runs a pod whose logs `kubectl logs` reads, which are in
//!   `/var/log/pods` and, through the API server, on the kubelet's `/logs/`;
//!   nothing of the host's
//!   `/etc`, `/var/lib` or `/var/log` is written, and `down` leaves no mount.
//!
//! Needs root, Go, dpkg and systemd-analyze; run by hack/test.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn run(cmd: &mut Command) -> Output {
    let o = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(o.status.success(), "{cmd:?}: {}", text(&o));
    o
}

fn stdout(cmd: &mut Command) -> String {
    String::from_utf8_lossy(&run(cmd).stdout).trim().to_string()
}

fn kubernetes_version() -> String {
    std::fs::read_to_string(repo("KUBERNETES_VERSION"))
        .unwrap()
        .trim()
        .to_string()
}

/// A scratch directory removed at the end (short: hack/cluster puts
/// containerd's socket under it).
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let p = std::env::temp_dir().join(format!("rk-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn build_package(out: &Path) -> PathBuf {
    PathBuf::from(stdout(
        Command::new(repo("hack/deb"))
            .arg("--binary")
            .arg(env!("CARGO_BIN_EXE_rkube"))
            .arg("--out")
            .arg(out)
            .stderr(Stdio::inherit()),
    ))
}

/// `dpkg --root ROOT ARGS` with maintainer scripts run outside a chroot
/// (they see DPKG_ROOT) and the root's missing libc6 forgiven.
fn dpkg(root: &Path, args: &[&str]) -> Output {
    for d in [
        "var/lib/dpkg/info",
        "var/lib/dpkg/updates",
        "var/lib/dpkg/triggers",
    ] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    let status = root.join("var/lib/dpkg/status");
    if !status.exists() {
        std::fs::write(&status, "").unwrap();
    }
    run(Command::new("dpkg")
        .arg(format!("--root={}", root.display()))
        .args(["--force-script-chrootless", "--force-depends"])
        .args(args))
}

#[test]
#[ignore = "needs dpkg and systemd-analyze; run by hack/test"]
fn the_package_installs_verifies_and_removes() {
    let tmp = Scratch::new("deb");
    let deb = build_package(&tmp.0.join("out"));
    let field = |f: &str| stdout(Command::new("dpkg-deb").arg("-f").arg(&deb).arg(f));
    assert_eq!(field("Package"), "rkube");
    assert_eq!(field("Version"), env!("CARGO_PKG_VERSION"));
    assert_eq!(
        field("Provides"),
        format!("kubelet (= {})", kubernetes_version())
    );
    assert_eq!(field("Conflicts"), "kubelet");
    assert!(
        field("Depends").starts_with("libc6 (>= 2."),
        "{}",
        field("Depends")
    );

    let root = tmp.0.join("root");
    dpkg(&root, &["-i", deb.to_str().unwrap()]);
    let unit = root.join("usr/lib/systemd/system/kubelet.service");
    for f in [&unit, &root.join("usr/share/doc/rkube/copyright")] {
        assert!(f.is_file(), "{} installed", f.display());
    }
    // kubeadm's package's drop-in is not rkube's to ship.
    let dropin = root.join("usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf");
    assert!(!dropin.exists());
    assert_eq!(
        std::fs::read_link(root.join("usr/bin/kubelet")).unwrap(),
        Path::new("rkube")
    );
    // Under upstream's name it is the kubelet: the version kubeadm's
    // preflight parses, upstream's refusal of an unknown flag.
    let kubelet = root.join("usr/bin/kubelet");
    assert_eq!(
        stdout(Command::new(&kubelet).arg("--version")),
        format!("Kubernetes v{}-rkube", kubernetes_version())
    );
    let o = Command::new(&kubelet)
        .arg("--pod-infra-container-image=pause")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("unknown flag: --pod-infra-container-image"));

    // systemd's own check of the unit, and of it with kubeadm's drop-in, in
    // the package's root.
    run(Command::new("systemd-analyze")
        .arg("verify")
        .arg(format!("--root={}", root.display()))
        .args(["--recursive-errors=no", "kubelet.service"]));
    std::fs::create_dir_all(dropin.parent().unwrap()).unwrap();
    std::fs::copy(repo("hack/testdata/kubeadm/10-kubeadm.conf"), &dropin).unwrap();
    run(Command::new("systemd-analyze")
        .arg("verify")
        .arg(format!("--root={}", root.display()))
        .args(["--recursive-errors=no", "kubelet.service"]));
    // The command line systemd runs: the drop-in's, kubeadm's variables
    // (empty until kubeadm writes its files) expanded.
    let argv = stdout(
        Command::new(repo("hack/systemd-unit-exec"))
            .arg("--root")
            .arg(&root)
            .args(["--print", "kubelet.service"]),
    );
    let argv: Vec<&str> = argv.lines().collect();
    assert_eq!(
        &argv[..4],
        [
            "/usr/bin/kubelet",
            "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
            "--kubeconfig=/etc/kubernetes/kubelet.conf",
            "--config=/var/lib/kubelet/config.yaml"
        ]
    );
    // A broken drop-in is caught by the same check.
    std::fs::write(
        root.join("usr/lib/systemd/system/kubelet.service.d/20-broken.conf"),
        "[Service]\nExecStartt=/usr/bin/kubelet\n",
    )
    .unwrap();
    let o = Command::new("systemd-analyze")
        .arg("verify")
        .arg(format!("--root={}", root.display()))
        .args(["--recursive-errors=no", "kubelet.service"])
        .output()
        .unwrap();
    assert!(!o.status.success(), "a bad key passes: {}", text(&o));
    std::fs::remove_file(root.join("usr/lib/systemd/system/kubelet.service.d/20-broken.conf"))
        .unwrap();

    dpkg(&root, &["-r", "rkube"]);
    for f in [&unit, &kubelet, &root.join("usr/bin/rkube")] {
        assert!(
            !f.exists() && f.symlink_metadata().is_err(),
            "{} removed",
            f.display()
        );
    }
}

/// A `hack/cluster --join kubeadm` cluster, taken down when dropped.
struct Cluster {
    dir: PathBuf,
    kubeconfig: String,
}

impl Cluster {
    fn kubectl(&self, args: &[&str]) -> Output {
        Command::new(repo("hack/k8s/_output/bin/kubectl"))
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .output()
            .expect("run kubectl")
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = self.kubectl(args);
        assert!(o.status.success(), "kubectl {args:?}: {}", text(&o));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }

    fn until(&self, what: &str, within: Duration, f: impl Fn() -> bool) {
        let start = Instant::now();
        while !f() {
            assert!(
                start.elapsed() < within,
                "not within {within:?}: {what}\n{}",
                text(&self.kubectl(&["describe", "nodes"]))
            );
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    fn down(&self) -> Output {
        Command::new(repo("hack/cluster"))
            .args(["down", "--dir"])
            .arg(&self.dir)
            .output()
            .expect("run hack/cluster down")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.down();
    }
}

#[test]
#[ignore = "needs root, Go and containerd; run by hack/test"]
fn a_node_joins_with_kubeadm_join() {
    // Which of a node's paths the host has (the test must not add any).
    let host_has = || -> Vec<bool> {
        [
            "/etc/kubernetes",
            "/var/lib/kubelet",
            "/etc/default/kubelet",
        ]
        .iter()
        .map(|p| Path::new(p).symlink_metadata().is_ok())
        .collect()
    };
    let before = host_has();
    let tmp = Scratch::new("kadm");
    let out = Command::new(repo("hack/cluster"))
        .args(["up", "--nodes", "1", "--join", "kubeadm", "--dir"])
        .arg(&tmp.0)
        .env("RKUBE_BIN", env!("CARGO_BIN_EXE_rkube"))
        .stderr(Stdio::inherit())
        .output()
        .expect("run hack/cluster");
    let c = Cluster {
        dir: tmp.0.clone(),
        kubeconfig: String::from_utf8_lossy(&out.stdout)
            .trim()
            .strip_prefix("export KUBECONFIG=")
            .unwrap_or("")
            .to_string(),
    };
    assert!(
        out.status.success(),
        "hack/cluster up --join kubeadm failed"
    );
    let join = std::fs::read_to_string(c.dir.join("logs/kubeadm-join-1.log")).unwrap();
    assert!(join.contains("This node has joined the cluster"), "{join}");

    // Ready, as rkube's kubelet, at the address /etc/default/kubelet gave.
    let node = |path: &str| c.ok(&["get", "node", "node-1", "-o", &format!("jsonpath={path}")]);
    c.until("node-1 Ready", Duration::from_secs(60), || {
        node("{.status.conditions[?(@.type==\"Ready\")].status}") == "True"
    });
    assert_eq!(
        node("{.status.nodeInfo.kubeletVersion}"),
        format!("v{}-rkube", kubernetes_version())
    );
    let ov = c.dir.join("n1/ov");
    let defaults = std::fs::read_to_string(ov.join("etc/up/default/kubelet")).unwrap();
    let ip = node("{.status.addresses[?(@.type==\"InternalIP\")].address}");
    assert!(
        defaults.contains(&format!("--node-ip={ip} ")),
        "{defaults} / {ip}"
    );
    // kubeadm's files where a node has them (in the node's overlays), the
    // flags kubeadm wrote, the certificate of the TLS bootstrap.
    let flags = std::fs::read_to_string(ov.join("var-lib/up/kubelet/kubeadm-flags.env")).unwrap();
    assert_eq!(
        flags.trim(),
        "KUBELET_KUBEADM_ARGS=\"--hostname-override=node-1\""
    );
    assert!(ov.join("etc/up/kubernetes/kubelet.conf").is_file());
    // (The current pair is a link to an absolute path, the node's.)
    let pki = ov.join("var-lib/up/kubelet/pki");
    let current = std::fs::read_link(pki.join("kubelet-client-current.pem")).unwrap();
    assert!(
        current.starts_with("/var/lib/kubelet/pki"),
        "{}",
        current.display()
    );
    let subject = stdout(
        Command::new("openssl")
            .args(["x509", "-noout", "-subject", "-in"])
            .arg(pki.join(current.file_name().unwrap())),
    );
    assert!(subject.contains("CN = system:node:node-1"), "{subject}");
    // The cgroup root of --cgroup-root (KUBELET_EXTRA_ARGS) is the one used.
    let configz = c.ok(&["get", "--raw", "/api/v1/nodes/node-1/proxy/configz"]);
    let configz: serde_json::Value = serde_json::from_str(&configz).unwrap();
    let cgroup_root = configz["kubeletconfig"]["cgroupRoot"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        defaults.contains(&format!("--cgroup-root={cgroup_root}\"")),
        "{defaults}"
    );
    let kubepods = ["/sys/fs/cgroup", "/sys/fs/cgroup/memory"]
        .iter()
        .any(|h| Path::new(&format!("{h}{cgroup_root}/kubepods")).is_dir());
    assert!(kubepods, "no kubepods cgroup under {cgroup_root}");

    // A pod runs there, and its log is read back.
    let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: hello}\nspec:\n  restartPolicy: Never\n  containers:\n  - {name: c, image: rkube.local/busybox:1, command: [sh, -c, 'echo joined-by-kubeadm']}\n";
    let mut apply = Command::new(repo("hack/k8s/_output/bin/kubectl"))
        .arg("--kubeconfig")
        .arg(&c.kubeconfig)
        .args(["apply", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    use std::io::Write;
    apply
        .stdin
        .take()
        .unwrap()
        .write_all(pod.as_bytes())
        .unwrap();
    assert!(apply.wait().unwrap().success());
    c.until("pod hello Succeeded", Duration::from_secs(90), || {
        c.ok(&["get", "pod", "hello", "-o", "jsonpath={.status.phase}"]) == "Succeeded"
    });
    assert_eq!(c.ok(&["logs", "hello"]), "joined-by-kubeadm");
    // Its log where log agents look on a node: upstream's default
    // podLogsDir and the /var/log/containers link (in the node's /var/log).
    let uid = c.ok(&["get", "pod", "hello", "-o", "jsonpath={.metadata.uid}"]);
    let log = ov.join(format!("var-log/up/pods/default_hello_{uid}/c/0.log"));
    let lines = std::fs::read_to_string(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
    assert!(lines.contains(" stdout F joined-by-kubeadm"), "{lines}");
    let links: Vec<String> = std::fs::read_dir(ov.join("var-log/up/containers"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        links
            .iter()
            .any(|l| l.starts_with("hello_default_c-") && l.ends_with(".log")),
        "{links:?}"
    );
    // The node's /var/log through the API server (nodes/log), as upstream's
    // kubelet serves it with enableSystemLogHandler.
    let listing = c.ok(&["get", "--raw", "/api/v1/nodes/node-1/proxy/logs/"]);
    assert!(
        listing.contains("<a href=\"pods/\">pods/</a>")
            && listing.contains("<a href=\"containers/\">containers/</a>"),
        "{listing}"
    );
    let via_api = c.ok(&[
        "get",
        "--raw",
        &format!("/api/v1/nodes/node-1/proxy/logs/pods/default_hello_{uid}/c/0.log"),
    ]);
    assert!(via_api.contains(" stdout F joined-by-kubeadm"), "{via_api}");
    // And through its /var/log/containers link, an absolute symlink.
    let link = links
        .iter()
        .find(|l| l.starts_with("hello_default_c-"))
        .unwrap();
    let via_link = c.ok(&[
        "get",
        "--raw",
        &format!("/api/v1/nodes/node-1/proxy/logs/containers/{link}"),
    ]);
    assert_eq!(via_link, via_api);

    let down = c.down();
    assert!(down.status.success(), "down: {}", text(&down));
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.contains(tmp.0.to_str().unwrap()),
        "mounts left under {}",
        tmp.0.display()
    );
    assert_eq!(
        before,
        host_has(),
        "the host's /etc and /var/lib were written"
    );
}
