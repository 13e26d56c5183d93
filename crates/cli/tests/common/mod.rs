//! Helpers the `rkube` binary's end-to-end test files share (each test
//! binary compiles its own copy and uses part of it).
#![allow(dead_code)]

pub mod audit;
pub mod containerd;
pub mod live;
pub mod netns;
pub mod node_bench;
pub mod registry;
pub mod relay;

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

/// Unmounts, when dropped, everything mounted at and under a directory (a
/// kubelet's root directory: upstream's bind-mounts it on itself, and the
/// pods' volumes stay mounted when a kubelet stops or is killed), deepest
/// first, so the directory can be removed.
pub struct Unmount(pub PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mut points: Vec<&str> = info
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .filter(|p| std::path::Path::new(p).starts_with(&self.0))
            .collect();
        points.sort_by_key(|p| std::cmp::Reverse(p.len()));
        for p in points {
            let _ = Command::new("umount").args(["-l", p]).output();
        }
    }
}

/// A daemon the test runs (a kubelet, a device plugin, a log agent), its
/// output in a file; killed when dropped.
pub struct Process(pub std::process::Child);

impl Process {
    /// Starts `bin ARGS`, stdout and stderr to `log`.
    pub fn start(bin: &str, args: &[String], log: &std::path::Path) -> Process {
        let f = std::fs::File::create(log).unwrap();
        let child = Command::new(bin)
            .args(args)
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .unwrap();
        Process(child)
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The tests' async runtime: two worker threads, as the machine has cores.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The repository root (examples and the bad-input corpus are relative to it).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A positive count from the environment variable `name`, else `default`
/// (how hack/test sizes the long suites per tier).
pub fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(default)
}

/// The `rkube` binary daemons are started from: `RKUBE_TEST_BIN` when set
/// (hack/soak runs a copy, so rebuilding meanwhile changes nothing), else
/// the one built with the tests.
pub fn rkube_bin() -> PathBuf {
    std::env::var_os("RKUBE_TEST_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_rkube")))
}

/// Runs the built `rkube` in the repository root.
pub fn rkube(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rkube"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("run rkube")
}

/// Runs `rkube`, asserts success and parses stdout as JSON.
pub fn json(args: &[&str]) -> Value {
    let out = rkube(args);
    assert!(
        out.status.success(),
        "rkube {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("valid JSON")
}

/// Runs `cmd`, asserting success (stdout and stderr in the message).
pub fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    out
}

/// Runs `hack/SCRIPT ARGS`, which builds (or finds cached) a binary and
/// prints its path; the path.
pub fn built(script: &str, args: &[&str]) -> String {
    let out = run(Command::new(root().join("hack").join(script)).args(args));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Whether the tests run as root (containerd, mounts, iptables).
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// The mount points of this mount namespace whose path starts with `dir`
/// (as `/proc/self/mountinfo` writes them).
pub fn mount_points_under(dir: &std::path::Path) -> Vec<String> {
    let d = dir.display().to_string();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|m| m.starts_with(&d))
        .map(str::to_string)
        .collect()
}
