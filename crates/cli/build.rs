//! Stamps the binary with what `rkube --version` prints: the git commit it
//! was built from (when built from a git checkout) and the Kubernetes version
//! it follows (the repository's `KUBERNETES_VERSION`, the one place it is
//! written).

use std::path::Path;
use std::process::Command;

fn main() {
    // Cargo's value when the script runs, not when it was compiled: one
    // target directory serves several checkouts (CI's clone, the working
    // tree), and a script compiled in a removed clone would look there.
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default();
    let root = Path::new(&manifest_dir).join("../..");
    let kver_file = root.join("KUBERNETES_VERSION");
    println!("cargo:rerun-if-changed={}", kver_file.display());
    let kver = std::fs::read_to_string(&kver_file)
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    println!("cargo:rustc-env=RKUBE_KUBERNETES_VERSION={kver}");

    let git = root.join(".git");
    for p in ["HEAD", "refs", "packed-refs"] {
        let p = git.join(p);
        if p.exists() {
            println!("cargo:rerun-if-changed={}", p.display());
        }
    }
    let commit = Command::new("git")
        .arg("-C")
        .arg(&root)
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=RKUBE_GIT_COMMIT={commit}");
}
