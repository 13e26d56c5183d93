//! A private containerd for end-to-end tests (`hack/containerd up --dir`),
//! stopped and its directory removed on drop.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

pub struct Containerd(pub PathBuf);

impl Containerd {
    /// Starts one in `/tmp/<prefix>-<pid>` (short: the socket path must fit
    /// in `sun_path`).
    pub fn up(prefix: &str) -> Containerd {
        Containerd::up_with(prefix, &[])
    }

    /// [`Containerd::up`] with hack/containerd's options `env`
    /// (`RKUBE_CONTAINERD_BIN`: containerd 2).
    pub fn up_with(prefix: &str, env: &[(&str, &str)]) -> Containerd {
        let dir = PathBuf::from(format!("/tmp/{prefix}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let c = Containerd(dir);
        super::run(
            Command::new(super::root().join("hack/containerd"))
                .args(["up", "--dir"])
                .arg(&c.0)
                .envs(env.iter().copied()),
        );
        c
    }

    /// Its socket.
    pub fn socket(&self) -> PathBuf {
        self.0.join("containerd.sock")
    }

    /// The CRI endpoint (`unix://...`).
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket().display())
    }

    /// The pod subnet hack/containerd gave its CNI bridge.
    pub fn subnet(&self) -> String {
        let conf = std::fs::read_dir(self.0.join("cni/net.d"))
            .unwrap()
            .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
            .next()
            .expect("a CNI config");
        let v: Value = serde_json::from_str(&conf).unwrap();
        v["plugins"]
            .as_array()
            .and_then(|ps| {
                ps.iter().find_map(|p| {
                    p["ipam"]["ranges"][0][0]["subnet"]
                        .as_str()
                        .or(p["ipam"]["subnet"].as_str())
                        .map(str::to_string)
                })
            })
            .expect("a subnet in the CNI config")
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        let _ = Command::new(super::root().join("hack/containerd"))
            .args(["down", "--dir"])
            .arg(&self.0)
            .output();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
