//! A cluster of rkube nodes (`hack/cluster up --nodes 2`: rkube kubelet and
//! rkube scheduler, upstream's kube-proxy, CoreDNS): what a new user tries
//! first on a real cluster.
//!
//! * a pod resolves `kubernetes.default.svc.cluster.local` and a Service
//!   name of its namespace through the cluster DNS, and a headless
//!   Service's pod by its hostname and subdomain;
//! * a pod on node A reaches a pod on node B by pod IP, by ClusterIP and by
//!   NodePort on either node; the host reaches the NodePort too;
//! * `kubectl exec`, `logs` and `port-forward` work to pods on both nodes;
//! * pulls from the cluster's registries ([`pulls`]) and the ImageLocality
//!   field report on real nodes ([`image_locality`]);
//! * `kubectl top`, an HPA on CPU and the cAdvisor path through the node
//!   proxy, with metrics-server ([`metrics`]); the pod-resources socket
//!   with a Go client ([`pod_resources`]); every metrics endpoint through
//!   Prometheus' own parser, no series twice ([`exposition`]);
//! * `down` leaves nothing: no process, mount, network namespace, link,
//!   route or cgroup of the cluster.
//!
//! A second test (`--full` in hack/test) runs StatefulSets on real volumes
//! on such a cluster: dynamically provisioned CSI volumes with upstream's
//! external-provisioner, and local PersistentVolumes ([`storage`]).
//!
//! Needs root, Go and the package registries' caches; run by hack/test.

mod common;
#[path = "cluster/exposition.rs"]
mod exposition;
#[path = "cluster/image_locality.rs"]
mod image_locality;
#[path = "cluster/metrics.rs"]
mod metrics;
#[path = "cluster/pod_resources.rs"]
mod pod_resources;
#[path = "cluster/pulls.rs"]
mod pulls;
#[path = "cluster/storage.rs"]
mod storage;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn hack(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../hack")
        .join(name)
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

struct Cluster {
    dir: PathBuf,
    kubeconfig: String,
    down: bool,
}

/// The cluster's registries and the private one's login
/// (DIR/registry/credentials.env).
struct Registry {
    registry: String,
    private: String,
    private_user: String,
    private_password: String,
}

impl Registry {
    fn read(dir: &Path) -> Registry {
        let env =
            std::fs::read_to_string(dir.join("registry/credentials.env")).expect("credentials.env");
        let get = |k: &str| {
            env.lines()
                .find_map(|l| l.strip_prefix(&format!("{k}=")))
                .unwrap_or_else(|| panic!("{k} in credentials.env"))
                .to_string()
        };
        Registry {
            registry: get("REGISTRY"),
            private: get("PRIVATE_REGISTRY"),
            private_user: get("PRIVATE_USER"),
            private_password: get("PRIVATE_PASSWORD"),
        }
    }
}

impl Cluster {
    fn up(dir: &Path) -> Cluster {
        let out = Command::new(hack("cluster"))
            .args(["up", "--nodes", "2", "--dir"])
            .arg(dir)
            .stderr(Stdio::inherit())
            .output()
            .expect("run hack/cluster");
        assert!(out.status.success(), "hack/cluster up failed");
        let kubeconfig = String::from_utf8_lossy(&out.stdout)
            .trim()
            .strip_prefix("export KUBECONFIG=")
            .expect("the export line")
            .to_string();
        Cluster {
            dir: dir.to_path_buf(),
            kubeconfig,
            down: false,
        }
    }

    /// kubectl with the cluster's kubeconfig and `args`, not started.
    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(hack("k8s/_output/bin/kubectl"));
        c.arg("--kubeconfig").arg(&self.kubeconfig).args(args);
        c
    }

    fn kubectl(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run kubectl")
    }

    /// kubectl's stdout; panics with its output when it fails.
    fn ok(&self, args: &[&str]) -> String {
        let o = self.kubectl(args);
        assert!(o.status.success(), "kubectl {args:?}: {}", text(&o));
        String::from_utf8_lossy(&o.stdout).to_string()
    }

    fn apply(&self, yaml: &str) {
        let mut child = self
            .command(&["apply", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("run kubectl apply");
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(yaml.as_bytes())
            .unwrap();
        assert!(child.wait().unwrap().success(), "kubectl apply");
    }

    /// `sh -c script` in pod `pod`: stdout when it succeeds within `within`
    /// (retried: Services and DNS records settle after the pods do).
    fn exec_until(&self, pod: &str, script: &str, want: &str, within: Duration) -> String {
        let start = Instant::now();
        loop {
            let o = self.kubectl(&["exec", pod, "--", "sh", "-c", script]);
            let out = String::from_utf8_lossy(&o.stdout).to_string();
            if o.status.success() && out.contains(want) {
                return out;
            }
            assert!(
                start.elapsed() < within,
                "{pod}: `{script}` did not print {want:?} within {within:?}; last: {}",
                text(&o)
            );
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    /// `hack/cluster ARGS --dir DIR`: stdout; panics when it fails.
    fn cluster(&self, args: &[&str]) -> String {
        let o = Command::new(hack("cluster"))
            .args(args)
            .arg("--dir")
            .arg(&self.dir)
            .output()
            .expect("run hack/cluster");
        assert!(o.status.success(), "hack/cluster {args:?}: {}", text(&o));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }

    /// Pushes `image` from node-1 to a registry of the cluster: its name there.
    fn push(&self, private: bool, image: &str) -> String {
        let mut args = vec!["push", image];
        if private {
            args.push("--private");
        }
        self.cluster(&args)
    }

    /// `ctr` on node `i`'s containerd (k8s.io namespace).
    fn ctr(&self, i: usize, args: &[&str]) {
        let o = Command::new("ctr")
            .arg("--address")
            .arg(self.dir.join(format!("n{i}/c/containerd.sock")))
            .args(["--namespace", "k8s.io"])
            .args(args)
            .output()
            .expect("run ctr");
        assert!(o.status.success(), "ctr {args:?}: {}", text(&o));
    }

    /// Polls `f` every second until it gives a value, for at most `within`.
    fn until<T>(&self, what: &str, within: Duration, f: impl Fn() -> Option<T>) -> T {
        let start = Instant::now();
        loop {
            if let Some(v) = f() {
                return v;
            }
            if start.elapsed() >= within {
                let pods = self.kubectl(&["get", "pods", "-A", "-o", "wide"]);
                let nodes = self.kubectl(&["describe", "nodes"]);
                panic!(
                    "not within {within:?}: {what}\n{}\n{}",
                    text(&pods),
                    text(&nodes)
                );
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    fn wait_running(&self, pod: &str, within: Duration) {
        self.until(&format!("pod {pod} Running"), within, || {
            let o = self.kubectl(&["get", "pod", pod, "-o", "jsonpath={.status.phase}"]);
            (String::from_utf8_lossy(&o.stdout) == "Running").then_some(())
        });
    }

    /// Waits until the container of `pod` waits for one of `reasons`:
    /// (reason, message).
    fn wait_waiting(&self, pod: &str, reasons: &[&str], within: Duration) -> (String, String) {
        self.until(&format!("pod {pod} waiting with {reasons:?}"), within, || {
            let o = self.kubectl(&[
                "get",
                "pod",
                pod,
                "-o",
                "jsonpath={.status.containerStatuses[0].state.waiting.reason}|{.status.containerStatuses[0].state.waiting.message}",
            ]);
            let out = String::from_utf8_lossy(&o.stdout).to_string();
            let (reason, msg) = out.split_once('|')?;
            reasons
                .contains(&reason)
                .then(|| (reason.to_string(), msg.to_string()))
        })
    }

    /// The messages of `pod`'s Events with `reason`.
    fn events(&self, pod: &str, reason: &str) -> Vec<String> {
        let out = self.ok(&[
            "get",
            "events",
            "--field-selector",
            &format!("involvedObject.name={pod},reason={reason}"),
            "-o",
            "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}",
        ]);
        out.lines().map(str::to_string).collect()
    }

    fn event_message(&self, pod: &str, reason: &str) -> String {
        self.until(
            &format!("a {reason} Event of {pod}"),
            Duration::from_secs(30),
            || self.events(pod, reason).into_iter().next(),
        )
    }

    fn event_count(&self, pod: &str, reason: &str) -> usize {
        self.events(pod, reason).len()
    }

    fn down(&mut self) {
        self.down = true;
        let s = Command::new(hack("cluster"))
            .args(["down", "--dir"])
            .arg(&self.dir)
            .status()
            .expect("run hack/cluster down");
        assert!(s.success(), "hack/cluster down");
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.down {
            return;
        }
        let _ = Command::new(hack("cluster"))
            .args(["down", "--dir"])
            .arg(&self.dir)
            .status();
    }
}

const WORKLOAD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: web, labels: {app: web}}
spec:
  nodeName: node-2
  hostname: web-0
  subdomain: webs
  terminationGracePeriodSeconds: 1
  containers:
  - name: httpd
    image: rkube.local/busybox:1
    imagePullPolicy: Never
    command: ["sh", "-c", "mkdir -p /www && echo hello-from-$(hostname) > /www/index.html && echo serving && exec httpd -f -p 8080 -h /www"]
    ports: [{containerPort: 8080}]
---
apiVersion: v1
kind: Pod
metadata: {name: client}
spec:
  nodeName: node-1
  terminationGracePeriodSeconds: 1
  containers:
  - name: sh
    image: rkube.local/busybox:1
    imagePullPolicy: Never
    command: ["sh", "-c", "echo client-up && exec sleep 3600"]
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  type: NodePort
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: webs}
spec:
  clusterIP: None
  selector: {app: web}
  ports: [{port: 8080}]
"#;

/// An HTTP GET with busybox's nc (its static wget cannot look up the
/// `http` service name).
fn get(host: &str, port: &str) -> String {
    format!("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 5 {host} {port}")
}

/// An HTTP GET from the host.
fn host_get(host: &str, port: &str) -> String {
    let o = Command::new("curl")
        .args(["-s", "-m", "5", &format!("http://{host}:{port}/")])
        .output()
        .expect("run curl");
    text(&o)
}

fn leftovers(dir: &Path, id_prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    let d = dir.display().to_string();
    let run = |cmd: &str, args: &[&str]| {
        Command::new(cmd)
            .args(args)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
            .unwrap_or_default()
    };
    for l in run("findmnt", &["-rn", "-o", "TARGET"]).lines() {
        if l.contains(&d) {
            out.push(format!("mount {l}"));
        }
    }
    for l in run("ip", &["netns", "list"]).lines() {
        if l.starts_with(&format!("{id_prefix}-")) {
            out.push(format!("netns {l}"));
        }
    }
    for l in run("ip", &["-o", "link"]).lines() {
        if l.contains(&format!(" {id_prefix}:")) || l.contains(&format!(" {id_prefix}-")) {
            out.push(format!("link {l}"));
        }
    }
    for l in run("ip", &["route"]).lines() {
        if l.contains(&format!(" dev {id_prefix} ")) || l.ends_with(&format!(" dev {id_prefix}")) {
            out.push(format!("route {l}"));
        }
    }
    for l in run("iptables-save", &[]).lines() {
        if l.starts_with(":KUBE-") {
            out.push(format!("iptables chain {l}"));
        }
    }
    for p in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        if let Ok(cmd) = std::fs::read(p.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(&d) {
                out.push(format!("process {cmd}"));
            }
        }
    }
    out
}

#[test]
#[ignore = "needs root, hack/cluster's builds and the CSI sidecar's; run by hack/test --full"]
fn statefulsets_on_csi_and_local_volumes() {
    let dir = std::env::temp_dir().join(format!("rks{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut c = Cluster::up(&dir);
    storage::check(&c, &dir);
    c.down();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore = "needs root and hack/cluster's builds; run by hack/test"]
fn a_two_node_cluster_of_rkube_nodes() {
    let dir = std::env::temp_dir().join(format!("rkc{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut c = Cluster::up(&dir);
    c.apply(WORKLOAD);
    c.ok(&[
        "wait",
        "--for=condition=Ready",
        "pod/web",
        "pod/client",
        "--timeout=120s",
    ]);
    let web_ip = c.ok(&["get", "pod", "web", "-o", "jsonpath={.status.podIP}"]);
    let cluster_ip = c.ok(&["get", "svc", "web", "-o", "jsonpath={.spec.clusterIP}"]);
    let node_port = c.ok(&[
        "get",
        "svc",
        "web",
        "-o",
        "jsonpath={.spec.ports[0].nodePort}",
    ]);
    let node_ips = c.ok(&[
        "get",
        "nodes",
        "-o",
        "jsonpath={.items[*].status.addresses[?(@.type==\"InternalIP\")].address}",
    ]);
    let node_ips: Vec<&str> = node_ips.split_whitespace().collect();
    assert_eq!(node_ips.len(), 2, "{node_ips:?}");
    let dns = Duration::from_secs(60);

    // `rkube timeline` through the API server's node proxy: the pod's
    // stages, each line's step adding up to its time since creation.
    let tl = Command::new(env!("CARGO_BIN_EXE_rkube"))
        .args(["timeline", "default/web", "--kubeconfig", &c.kubeconfig])
        .output()
        .unwrap();
    assert!(tl.status.success(), "rkube timeline: {}", text(&tl));
    let tl = String::from_utf8_lossy(&tl.stdout).into_owned();
    let mut sum = 0.0;
    let mut stages = vec![];
    for l in tl
        .lines()
        .skip(2)
        .filter(|l| l.trim_start().starts_with(char::is_numeric))
    {
        let f: Vec<&str> = l.split_whitespace().collect();
        let secs = |x: &str| x.trim_end_matches('s').parse::<f64>().unwrap();
        sum += secs(f[1]);
        assert!((sum - secs(f[0])).abs() < 0.0005, "{l}\n{tl}");
        stages.push(f[2].to_string());
    }
    let at = |s: &str| {
        stages
            .iter()
            .position(|x| x == s)
            .unwrap_or_else(|| panic!("no {s}: {tl}"))
    };
    let order = [
        at("PodCreated"),
        at("Seen"),
        at("Admitted"),
        at("SandboxCreated"),
        at("NetworkReady"),
        at("Started"),
        at("Ready"),
    ];
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{tl}");
    assert!(tl.contains("started in "), "{tl}");

    // Each kubelet made its own iptables chains and rule in its node's
    // network namespace (makeIPTablesUtilChains, on by default).
    for node in ["node-1", "node-2"] {
        let mangle = c.cluster(&["exec", node, "iptables", "-w", "5", "-t", "mangle", "-S"]);
        for chain in ["KUBE-IPTABLES-HINT", "KUBE-KUBELET-CANARY"] {
            assert!(mangle.contains(&format!("-N {chain}")), "{node}: {mangle}");
        }
        let filter = c.cluster(&["exec", node, "iptables", "-w", "5", "-t", "filter", "-S"]);
        assert!(
            filter.contains("-A INPUT -j KUBE-FIREWALL")
                && filter.contains("\"block incoming localnet connections\""),
            "{node}: {filter}"
        );
    }

    // Cluster DNS: ClusterFirst pods ask CoreDNS at 10.96.0.10.
    let resolv = c.ok(&["exec", "client", "--", "cat", "/etc/resolv.conf"]);
    assert!(resolv.contains("nameserver 10.96.0.10"), "{resolv}");
    let out = c.exec_until(
        "client",
        "nslookup kubernetes.default.svc.cluster.local",
        "Address: 10.96.0.1",
        dns,
    );
    assert!(out.contains("10.96.0.1"), "{out}");
    c.exec_until(
        "client",
        "nslookup web.default.svc.cluster.local",
        &format!("Address: {cluster_ip}"),
        dns,
    );
    c.exec_until(
        "client",
        "nslookup web-0.webs.default.svc.cluster.local",
        &format!("Address: {web_ip}"),
        dns,
    );

    // Across nodes: pod IP, ClusterIP, NodePort on both nodes.
    let hello = "hello-from-web-0";
    c.exec_until("client", &get(&web_ip, "8080"), hello, dns);
    c.exec_until("client", &get(&cluster_ip, "80"), hello, dns);
    for ip in &node_ips {
        c.exec_until("client", &get(ip, &node_port), hello, dns);
    }
    let from_host = host_get(node_ips[0], &node_port);
    assert!(from_host.contains(hello), "{from_host}");

    // kubectl exec, logs and port-forward to pods on both nodes.
    for (pod, line) in [("web", "serving"), ("client", "client-up")] {
        assert_eq!(
            c.ok(&["exec", pod, "--", "echo", "exec-ok"]).trim(),
            "exec-ok"
        );
        assert!(c.ok(&["logs", pod]).contains(line), "{pod} logs");
    }
    let mut pf = c
        .command(&["port-forward", "pod/web", "18181:8080"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let forwarded = loop {
        let o = host_get("127.0.0.1", "18181");
        if o.contains(hello) || start.elapsed() > Duration::from_secs(30) {
            break o;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let _ = pf.kill();
    let _ = pf.wait();
    assert!(forwarded.contains(hello), "port-forward: {forwarded}");

    let reg = Registry::read(&dir);
    pulls::check(&c, &reg);
    image_locality::check(&c, &dir);
    metrics::check(&c);
    pod_resources::check(&c, &dir);
    exposition::check(&c, &dir);

    // down leaves nothing behind. The cluster's links and namespaces are
    // named after its bridge rkcN, the one of the registry's 10.201.N.1.
    let n = reg
        .registry
        .strip_prefix("10.201.")
        .and_then(|r| r.strip_suffix(".1:5000"))
        .expect("the registry on 10.201.N.1:5000");
    let bridge = format!("rkc{n}");
    c.down();
    let left = leftovers(&dir, &bridge);
    assert!(left.is_empty(), "left behind by down: {left:#?}");
    let _ = std::fs::remove_dir_all(&dir);
}
