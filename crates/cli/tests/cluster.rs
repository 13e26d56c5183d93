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
//! * `down` leaves nothing: no process, mount, network namespace, link,
//!   route or cgroup of the cluster.
//!
//! Needs root, Go and the package registries' caches; run by hack/test.

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
        if l.starts_with("10.244.") {
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

    // down leaves nothing behind. The cluster's links and namespaces are
    // named after its bridge, the one holding 10.201.N.1/24.
    let addrs = Command::new("ip")
        .args(["-o", "-4", "addr"])
        .output()
        .unwrap();
    let bridge = String::from_utf8_lossy(&addrs.stdout)
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let n = f.get(3)?.strip_prefix("10.201.")?.strip_suffix(".1/24")?;
            (f.get(1)? == &format!("rkc{n}")).then(|| f[1].to_string())
        })
        .expect("the cluster's bridge rkcN with 10.201.N.1/24");
    c.down();
    let left = leftovers(&dir, &bridge);
    assert!(left.is_empty(), "left behind by down: {left:#?}");
    let _ = std::fs::remove_dir_all(&dir);
}
