//! Network namespaces made by a test, for network faults between rkube and
//! the API server.
//!
//! A [`Lan`] is a bridge in the host namespace holding one address, the
//! address the API server is also served at (`RKUBE_CP_APISERVER_IP`, see
//! `hack/control-plane`), and one namespace per process, each joined to the
//! bridge by a veth pair. A partition is a pair of iptables DROP rules inside
//! the process's namespace (to and from the bridge address): the kernel
//! drops the packets and TCP retransmits as on a real network, nothing is
//! refused or reset. Drops at random are the `statistic` match. Nothing is
//! routed off the machine. Needs root (CAP_NET_ADMIN); everything is
//! removed on drop.

use std::path::Path;
use std::process::Command;

/// A bridge and the namespaces joined to it.
pub struct Lan {
    subnet: String,
    bridge: String,
    tag: u8,
    spaces: Vec<String>,
}

/// One namespace of a [`Lan`].
#[derive(Clone, Debug)]
pub struct Space {
    /// The namespace's name (`ip netns exec <name> …`).
    pub name: String,
    /// Its address on the bridge.
    pub ip: String,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn in_space(space: &str, args: &[&str]) -> std::process::Output {
    Command::new("ip")
        .args(["netns", "exec", space])
        .args(args)
        .output()
        .expect("run ip netns exec")
}

impl Lan {
    /// The subnet this process and `tag` use: `10.<200 + pid % 50>.<tag>.0/24`
    /// (tests that run at the same time pass different tags).
    fn subnet_of(tag: u8) -> String {
        format!("10.{}.{tag}", 200 + std::process::id() % 50)
    }

    /// The bridge address for `tag`, known before the Lan exists (the API
    /// server is started with it).
    pub fn host_ip_for(tag: u8) -> String {
        format!("{}.1", Self::subnet_of(tag))
    }

    pub fn new(tag: u8) -> Lan {
        let bridge = format!("rkb{:x}t{tag}", std::process::id());
        let lan = Lan {
            subnet: Self::subnet_of(tag),
            bridge,
            tag,
            spaces: Vec::new(),
        };
        ip(&["link", "add", &lan.bridge, "type", "bridge"]);
        ip(&[
            "addr",
            "add",
            &format!("{}/24", lan.host_ip()),
            "dev",
            &lan.bridge,
        ]);
        ip(&["link", "set", &lan.bridge, "up"]);
        lan
    }

    /// The bridge's address (the API server's address for the namespaces).
    pub fn host_ip(&self) -> String {
        format!("{}.1", self.subnet)
    }

    /// A new namespace joined to the bridge, with loopback up.
    pub fn space(&mut self) -> Space {
        let i = self.spaces.len() + 2;
        assert!(i < 250, "too many namespaces on one Lan");
        let name = format!("rkube-{}-{}-{i}", std::process::id(), self.tag);
        let host_end = format!("rk{:x}t{}v{i}", std::process::id(), self.tag);
        ip(&["netns", "add", &name]);
        self.spaces.push(name.clone());
        ip(&[
            "link", "add", &host_end, "type", "veth", "peer", "name", "eth0", "netns", &name,
        ]);
        ip(&["link", "set", &host_end, "master", &self.bridge, "up"]);
        let addr = format!("{}.{i}", self.subnet);
        ip(&[
            "-n",
            &name,
            "addr",
            "add",
            &format!("{addr}/24"),
            "dev",
            "eth0",
        ]);
        ip(&["-n", &name, "link", "set", "eth0", "up"]);
        ip(&["-n", &name, "link", "set", "lo", "up"]);
        Space { name, ip: addr }
    }

    fn iptables(&self, space: &Space, op: &str, rule: &[&str]) {
        for chain in [["OUTPUT", "-d"], ["INPUT", "-s"]] {
            let host = self.host_ip();
            let mut args = vec!["iptables", op, chain[0], chain[1], &host];
            args.extend_from_slice(rule);
            let out = in_space(&space.name, &args);
            assert!(
                out.status.success(),
                "{}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    /// Cuts `space` off the API server: every packet between them is dropped.
    pub fn partition(&self, space: &Space) {
        self.iptables(space, "-I", &["-j", "DROP"]);
    }

    /// Undoes [`Lan::partition`].
    pub fn heal(&self, space: &Space) {
        self.iptables(space, "-D", &["-j", "DROP"]);
    }

    /// Drops each packet between `space` and the API server with
    /// `probability` (0 < p < 1), in both directions.
    pub fn lose(&self, space: &Space, probability: f64) {
        let p = format!("{probability}");
        self.iptables(
            space,
            "-I",
            &[
                "-m",
                "statistic",
                "--mode",
                "random",
                "--probability",
                &p,
                "-j",
                "DROP",
            ],
        );
    }

    /// A copy of `kubeconfig` whose server is the bridge address (same
    /// port), written to `to`.
    pub fn kubeconfig(&self, kubeconfig: &Path, to: &Path) {
        self.kubeconfig_at(kubeconfig, to, None);
    }

    /// [`Lan::kubeconfig`] with another port (a relay's) when given.
    pub fn kubeconfig_at(&self, kubeconfig: &Path, to: &Path, port: Option<u16>) {
        let text = std::fs::read_to_string(kubeconfig).expect("read kubeconfig");
        let moved: Vec<String> = text
            .lines()
            .map(|l| match l.split_once("server: https://127.0.0.1:") {
                Some((indent, old)) => format!(
                    "{indent}server: https://{}:{}",
                    self.host_ip(),
                    port.map_or(old.to_string(), |p| p.to_string())
                ),
                None => l.to_string(),
            })
            .collect();
        let moved = moved.join("\n") + "\n";
        assert_ne!(moved, text, "kubeconfig has no 127.0.0.1 server");
        std::fs::write(to, moved).expect("write kubeconfig");
    }

    /// The API server's port in `kubeconfig` (its 127.0.0.1 server).
    pub fn api_port(kubeconfig: &Path) -> u16 {
        let text = std::fs::read_to_string(kubeconfig).expect("read kubeconfig");
        text.lines()
            .find_map(|l| l.split_once("server: https://127.0.0.1:"))
            .and_then(|(_, p)| p.trim().parse().ok())
            .expect("a 127.0.0.1 server in the kubeconfig")
    }
}

impl Drop for Lan {
    fn drop(&mut self) {
        // Deleting a namespace deletes its veth end and so the pair.
        for s in &self.spaces {
            let _ = Command::new("ip").args(["netns", "del", s]).output();
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.bridge])
            .output();
    }
}
