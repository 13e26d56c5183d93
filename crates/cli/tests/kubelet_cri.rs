//! `rkube kubelet --runtime cri` on a real containerd (hack/containerd)
//! against a genuine control plane (rkube-testcp), with the node identity
//! (`system:node:<name>`, least privilege) and `rkube scheduler` in-process.
//!
//! (a) a Deployment of 3 busybox replicas is scheduled by rkube scheduler
//!     and reaches Running with bridge pod IPs; the real `kubectl logs`
//!     (API server → kubelet API with its client certificate) shows the
//!     line the container printed; `kubectl get pods -o wide` shows node
//!     and IP; the kubelet API refuses a request without credentials (401).
//! (b) a failing liveness probe restarts its container (restartCount
//!     rises); a readiness probe gates Ready (True, then False when the
//!     container removes the file the probe reads).
//! (c) a static pod file appears as a mirror pod (Running); removing the
//!     file deletes the mirror and the sandbox.
//! (d) the kubelet stops and starts again: the pods are adopted (same
//!     container ids, one sandbox per pod).
//! (e) streams through the kubelet API (API server → kubelet → containerd's
//!     streaming server): `kubectl exec` keeps stdout, stderr and the exit
//!     code apart and carries stdin; `kubectl cp` copies a binary file out
//!     of a pod byte for byte; `kubectl attach -i` talks to a
//!     container's own stdin and stdout; `kubectl port-forward` reaches an
//!     HTTP server in a pod through a local port.
//! (f) an ordinary Deployment (ServiceAccount token, ConfigMap volume,
//!     envFrom a Secret, limits, runAsNonRoot, fsGroup) seen through
//!     `kubectl exec`.
//! (g) a `hostPort` reaches the pod's server from the node (CNI portmap)
//!     and is closed once the pod is deleted.
//! (h) a private registry (common::registry, Basic login): a pod with a
//!     pull Secret runs its image; another Secret with the same login
//!     reuses the pulled image without pulling; a pod without a Secret is
//!     refused the image the first one pulled (`ErrImagePull`, and
//!     `ErrImageNeverPull` with `imagePullPolicy: Never`), as upstream's
//!     KubeletEnsureSecretPulledImages; then the startup timeline of a pod
//!     with an init container, a pull and a readiness probe lists its
//!     stages in a start's order and its startup SLI, and a
//!     ServiceAccount without `nodes/proxy` gets 403 from the kubelet.
//! (j) (last) disk pressure: unused images reclaimed before any eviction,
//!     the node's `EvictionThresholdMet` Event, and a new pod refused
//!     while the pressure lasts.
//! (l) (beside (b)–(k)) pods over their own local storage limits are
//!     evicted whatever the node's pressure, as upstream's eviction manager
//!     does: an `emptyDir` past its `sizeLimit`, a container whose logs
//!     pass its `ephemeral-storage` limit (`Failed`, reason
//!     `Evicted`, upstream's message, no `DisruptionTarget`, a Warning
//!     `Evicted` Event); a pod within its limits keeps running.
//! (m) (beside (b)–(d)) PersistentVolumeClaims: local and hostPath
//!     PersistentVolumes and a generic ephemeral volume mounted as upstream
//!     (fsGroup, read-only claims), a claim never bound waits with
//!     upstream's `FailedMount` words, the kubelet's restart keeps the
//!     container and its mount, and a pod deleted and made again finds its
//!     data (see `kubelet_cri/claims.rs`).
//! (n) (beside (m)) a CSI driver (`hack/csi`'s host-path driver) registers
//!     through `plugins_registry` and shows in the CSINode and the Node; a
//!     PersistentVolume of it is staged and published for a pod, kept across
//!     the kubelet's restart, and unpublished and unstaged after the pod
//!     (see `kubelet_cri/csi.rs`).
//! (k) (before (j)) `serverTLSBootstrap`: the kubelet API serves nothing until its
//!     `kubernetes.io/kubelet-serving` request is approved (`kubectl
//!     certificate approve`), then a certificate for the node's name and
//!     address that verifies against the cluster CA; with two-minute
//!     certificates it is renewed during the scenario
//!     (`RKUBE_SERVING_ROTATIONS` times, 2 unless set; hack/test's default
//!     tier sets 1), each new one served without a restart; the `kubectl logs`/`exec`/`port-forward`
//!     of (a)–(j) go through these certificates.
//!
//! Needs root, hack/build-k8s and hack/containerd; run by hack/test.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::net::ToSocketAddrs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use rkube_cri::{v1, CriClient};
use rkube_testcp::support::{client, free_port, wait_for};
use rkube_testcp::ControlPlane;
use tokio::sync::oneshot;

#[path = "kubelet_cri/claims.rs"]
mod claims;
mod common;
#[path = "kubelet_cri/csi.rs"]
mod csi;
use common::{built, runtime, Process, Unmount};

struct Containerd {
    dir: PathBuf,
    endpoint: String,
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../hack")
        .join(name)
}

impl Containerd {
    fn up() -> Containerd {
        let dir = std::env::temp_dir().join(format!("rk-kl-{}", std::process::id()));
        Containerd::up_in(&dir)
    }

    /// A private containerd whose root, state and socket are under `dir`.
    fn up_in(dir: &Path) -> Containerd {
        let dir = dir.to_path_buf();
        let _ = std::fs::remove_dir_all(&dir);
        let out = Command::new(script("containerd"))
            .args(["up", "--dir"])
            .arg(&dir)
            .output()
            .expect("run hack/containerd");
        let mut c = Containerd {
            dir,
            endpoint: String::new(),
        };
        assert!(
            out.status.success(),
            "hack/containerd up failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        c.endpoint = String::from_utf8_lossy(&out.stdout)
            .trim()
            .strip_prefix("export CONTAINER_RUNTIME_ENDPOINT=")
            .expect("export line")
            .to_string();
        c
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        let _ = Command::new(script("containerd"))
            .args(["down", "--dir"])
            .arg(&self.dir)
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A node name the API server can resolve (it dials the node's Hostname
/// address first): the host name if it resolves to loopback, else localhost.
fn node_name() -> String {
    let h = rkube_kubelet::node::machine::hostname().to_lowercase();
    let loopback = (h.as_str(), 0)
        .to_socket_addrs()
        .map(|mut a| a.any(|a| a.ip().is_loopback()))
        .unwrap_or(false);
    if loopback && !h.is_empty() {
        h
    } else {
        "localhost".into()
    }
}

struct Agent {
    stop: Option<oneshot::Sender<()>>,
    done: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Agent {
    fn start(args: &[String]) -> Agent {
        let opts = rkube_kubelet::options::parse(args.iter().cloned()).unwrap();
        let (tx, rx) = oneshot::channel::<()>();
        let done = tokio::spawn(rkube_kubelet::run(opts, async move {
            let _ = rx.await;
        }));
        Agent {
            stop: Some(tx),
            done,
        }
    }

    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.done.await.unwrap().unwrap();
    }
}

/// The KubeletConfiguration these tests share: the kubelet API on
/// `address:port`, evictionHard in absolute amounts (the test machines'
/// disk is often more than 90 % full, below the default percentages, and
/// the kubelet would rightly report DiskPressure and evict every pod), image
/// GC off (imageGCHighThresholdPercent 100: the sandbox image is imported,
/// not pullable, and containerd 1.6 does not pin it), the runtime at
/// `endpoint`; then the lines `extra`.
/// (`makeIPTablesUtilChains: false`: the kubelets of these tests run in the
/// host's network namespace, where their chains would stay.)
fn kubelet_yaml(address: &str, port: u16, endpoint: &str, logs: &Path, extra: &str) -> String {
    format!(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         address: {address}\nport: {port}\nhealthzPort: 0\n\
         evictionHard: {{memory.available: 100Mi, nodefs.available: 1Gi, imagefs.available: 1Gi}}\n\
         imageGCHighThresholdPercent: 100\ncontainerRuntimeEndpoint: {endpoint}\n\
         failCgroupV1: false\nmakeIPTablesUtilChains: false\npodLogsDir: {}\n{extra}",
        logs.display()
    )
}

/// Logs of the test (and of in-process kubelets) through `filter`.
/// The in-process kubelets' log: a file, not the test's captured output,
/// so that a failed test's output starts with its panic (CI shows the
/// beginning); the panic is followed by the log's last lines.
fn log_path() -> PathBuf {
    std::env::temp_dir().join(format!("rkube-kubelet-cri-{}.log", std::process::id()))
}

fn trace(filter: &str) {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let Ok(file) = std::fs::File::create(log_path()) else {
            return;
        };
        let file = std::sync::Mutex::new(file);
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(file)
            .with_ansi(false)
            .try_init();
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            default(info);
            let log = std::fs::read_to_string(log_path()).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(60)..];
            eprintln!(
                "the kubelet's log ({}), last {} lines:\n{}",
                log_path().display(),
                tail.len(),
                tail.join("\n")
            );
        }));
    });
}

/// The flags of an rkube kubelet on containerd for `node` of `cp`, at
/// 127.0.0.1, with its root directory `root` and configuration `cfg`.
fn cri_args(cp: &ControlPlane, node: &str, root: &Path, cfg: &Path) -> Vec<String> {
    vec![
        "--runtime=cri".into(),
        format!(
            "--kubeconfig={}",
            cp.node_kubeconfig(node).unwrap().display()
        ),
        format!("--hostname-override={node}"),
        "--node-ip=127.0.0.1".into(),
        format!("--root-dir={}", root.display()),
        format!("--config={}", cfg.display()),
    ]
}

fn kubectl(cp: &ControlPlane, args: &[&str]) -> String {
    let out = cp.kubectl(args).unwrap();
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn apply(cp: &ControlPlane, dir: &Path, name: &str, yaml: &str) {
    let f = dir.join(format!("{name}.yaml"));
    std::fs::write(&f, yaml).unwrap();
    kubectl(cp, &["apply", "-f", f.to_str().unwrap()]);
}

fn condition(p: &Pod, t: &str) -> Option<String> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == t)
        .map(|c| c.status.clone())
}

fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn restart_count(p: &Pod) -> i32 {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.first())
        .map(|c| c.restart_count)
        .unwrap_or(0)
}

fn container_ids(p: &Pod) -> Vec<String> {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map(|cs| cs.iter().filter_map(|c| c.container_id.clone()).collect())
        .unwrap_or_default()
}

/// The real `kubectl` as admin with `input` on its stdin, on a blocking
/// thread (the kubelet serves the streams on the runtime's threads).
async fn kubectl_io(cp: &ControlPlane, args: &[&str], input: &[u8]) -> Output {
    let kubeconfig = cp.kubeconfig().to_path_buf();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let input = input.to_vec();
    let run = tokio::task::spawn_blocking(move || {
        let mut child = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run kubectl");
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(&input).unwrap();
        if !input.is_empty() {
            // containerd 1.6 drops stdin that ends before the process has
            // read it (its shim closes the FIFO on the client's EOF):
            // the input ends a moment later, as a person's would
            std::thread::sleep(Duration::from_secs(1));
        }
        drop(stdin);
        child.wait_with_output().unwrap()
    });
    tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("kubectl hung")
        .unwrap()
}

async fn sandboxes_of(cri: &CriClient, uid: &str) -> Vec<v1::PodSandbox> {
    cri.list_pod_sandboxes(Some(v1::PodSandboxFilter {
        label_selector: [("io.kubernetes.pod.uid".to_string(), uid.to_string())].into(),
        ..Default::default()
    }))
    .await
    .unwrap()
}

const DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: hello, namespace: default}
spec:
  replicas: 3
  selector: {matchLabels: {app: hello}}
  template:
    metadata: {labels: {app: hello}}
    spec:
      automountServiceAccountToken: false
      terminationGracePeriodSeconds: 2
      containers:
      - name: main
        image: rkube.local/busybox:1
        imagePullPolicy: Never
        env:
        - {name: GREETING, value: hello-from}
        - name: POD_NAME
          valueFrom: {fieldRef: {fieldPath: metadata.name}}
        command: ["sh", "-c", "echo $GREETING $POD_NAME; exec sleep 3600"]
"#;

const PROBED: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: probed, namespace: default}
spec:
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  containers:
  - name: flip
    image: rkube.local/busybox:1
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "touch /tmp/ready; sleep 12; rm /tmp/ready; exec sleep 3600"]
    readinessProbe:
      exec: {command: ["cat", "/tmp/ready"]}
      periodSeconds: 1
      failureThreshold: 1
---
apiVersion: v1
kind: Pod
metadata: {name: liveness, namespace: default}
spec:
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: rkube.local/busybox:1
    imagePullPolicy: Never
    command: ["sh", "-c", "touch /tmp/alive; sleep 3; rm /tmp/alive; exec sleep 3600"]
    livenessProbe:
      exec: {command: ["test", "-f", "/tmp/alive"]}
      initialDelaySeconds: 1
      periodSeconds: 1
      failureThreshold: 2
"#;

const STATIC: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: static-web, labels: {tier: static}}
spec:
  # sh as PID 1 ignores SIGTERM: the kill waits the whole grace period.
  terminationGracePeriodSeconds: 2
  containers:
  - name: web
    image: rkube.local/busybox:1
    imagePullPolicy: Never
    command: ["sh", "-c", "echo static up; exec sleep 3600"]
"#;

const STREAMS: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default}
spec:
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  containers:
  - name: httpd
    image: rkube.local/busybox:1
    imagePullPolicy: Never
    command: ["sh", "-c", "mkdir -p /www && echo hi-from-httpd > /www/index.html && exec httpd -f -p 8080 -h /www"]
---
apiVersion: v1
kind: Pod
metadata: {name: attached, namespace: default}
spec:
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  restartPolicy: Never
  containers:
  - name: main
    image: rkube.local/busybox:1
    imagePullPolicy: Never
    stdin: true
    stdinOnce: true
    command: ["sh", "-c", "read line; echo got:$line"]
"#;

#[test]
#[ignore = "needs hack/build-k8s and hack/containerd; run by hack/test"]
fn kubelet_on_containerd_with_a_real_control_plane() {
    trace("warn,rkube_kubelet=info");
    // Two-minute certificates: the serving certificate rotates during the
    // scenario (k).
    let cp = ControlPlane::start_with(&[("RKUBE_CP_SIGNING_DURATION", "2m")])
        .expect("control plane starts");
    let ctrd = Containerd::up();
    let rt = runtime();
    rt.block_on(scenario(&cp, &ctrd));
}

async fn scenario(cp: &ControlPlane, ctrd: &Containerd) {
    let started = Instant::now();
    let admin = client(cp.kubeconfig()).await;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    let cri = CriClient::connect(&ctrd.endpoint).await.unwrap();
    let node = node_name();
    let work = cp.dir().join("kubelet-cri");
    // The pods' volumes unmounted even when a check fails.
    let _unmount = Unmount(work.join("root"));
    let static_dir = work.join("manifests");
    std::fs::create_dir_all(&static_dir).unwrap();
    let port = free_port();
    let cfg = work.join("kubelet.yaml");
    std::fs::write(
        &cfg,
        kubelet_yaml(
            "127.0.0.1",
            port,
            &ctrd.endpoint,
            &work.join("root/pod-logs"),
            &format!(
                "containerLogMaxSize: 1Mi\ncontainerLogMaxFiles: 3\ncontainerLogMonitorInterval: 3s\n\
                 staticPodPath: {}\n\
                 authentication: {{x509: {{clientCAFile: {}}}, webhook: {{enabled: true}}, anonymous: {{enabled: false}}}}\n\
                 authorization: {{mode: Webhook}}\n\
                 clusterDNS: [10.96.0.10]\nclusterDomain: cluster.local\n\
                 serverTLSBootstrap: true\nsyncFrequency: 20s\n",
                static_dir.display(),
                cp.dir().join("pki/ca.crt").display()
            ),
        ),
    )
    .unwrap();
    let args = cri_args(cp, &node, &work.join("root"), &cfg);
    let agent = Agent::start(&args);
    // (k) begins: the serving certificate is requested from the cluster
    // and served once approved, as an operator (or an approver) does.
    let pki = work.join("root/pki");
    let approving = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let approver = tokio::spawn(approve_serving_csrs(
        approving.clone(),
        cp.kubeconfig().to_path_buf(),
        cp.dir().join("pki/ca.crt"),
        node.clone(),
        port,
    ));

    let sched_opts = rkube_scheduler::options::parse(
        [
            "--kubeconfig",
            cp.scheduler_kubeconfig().to_str().unwrap(),
            "--leader-elect=false",
            "--secure-port=0",
        ]
        .map(String::from),
    )
    .unwrap();
    let (sched_stop, sched_stopped) = oneshot::channel::<()>();
    let sched = tokio::spawn(rkube_scheduler::run(sched_opts, async {
        let _ = sched_stopped.await;
    }));

    // (a) a Deployment scheduled by rkube scheduler runs on containerd.
    apply(cp, &work, "deployment", DEPLOYMENT);
    let running = wait_for(
        "3 hello pods Running with IPs",
        Duration::from_secs(120),
        || async {
            let l = pods
                .list(&ListParams::default().labels("app=hello"))
                .await
                .ok()?;
            let ok: Vec<Pod> = l
                .items
                .into_iter()
                .filter(|p| phase(p) == "Running")
                .filter(|p| p.status.as_ref().and_then(|s| s.pod_ip.as_ref()).is_some())
                .collect();
            (ok.len() == 3).then_some(ok)
        },
    )
    .await;
    let mut ips: Vec<String> = Vec::new();
    for p in &running {
        let s = p.status.as_ref().unwrap();
        assert_eq!(
            p.spec.as_ref().unwrap().node_name.as_deref(),
            Some(node.as_str())
        );
        let ip = s.pod_ip.clone().unwrap();
        assert!(ip.starts_with("10.89."), "bridge IP, got {ip}");
        assert_ne!(ip, "127.0.0.1");
        assert_eq!(condition(p, "Ready").as_deref(), Some("True"));
        assert!(container_ids(p)[0].starts_with("containerd://"));
        ips.push(ip);
    }
    ips.sort();
    ips.dedup();
    assert_eq!(ips.len(), 3, "distinct pod IPs");
    // status.images lists the runtime's images with their sizes.
    let nodes: Api<Node> = Api::all(admin.clone());
    let busybox = wait_for(
        "busybox in the node's status.images",
        Duration::from_secs(90),
        || async {
            let n = nodes.get(&node).await.ok()?;
            n.status?.images?.into_iter().find(|i| {
                i.names
                    .iter()
                    .flatten()
                    .any(|n| n.contains("rkube.local/busybox:1"))
            })
        },
    )
    .await;
    assert!(busybox.size_bytes.unwrap_or(0) > 100_000, "{busybox:?}");
    let first = running[0].name_any();
    let logs = wait_for("kubectl logs", Duration::from_secs(30), || async {
        let out = cp.kubectl(&["logs", &first]).ok()?;
        let s = String::from_utf8_lossy(&out.stdout).into_owned();
        s.contains("hello-from").then_some(s)
    })
    .await;
    assert_eq!(
        logs.trim(),
        format!("hello-from {first}"),
        "env and fieldRef in the log line"
    );
    let ts = kubectl(cp, &["logs", &first, "--timestamps", "--tail=1"]);
    assert!(ts.starts_with("20") && ts.contains(" hello-from "), "{ts}");
    let wide = kubectl(cp, &["get", "pods", "-o", "wide", "-l", "app=hello"]);
    for p in &running {
        let ip = p.status.as_ref().unwrap().pod_ip.clone().unwrap();
        let line = wide
            .lines()
            .find(|l| l.starts_with(&p.name_any()))
            .unwrap_or_else(|| panic!("{wide}"));
        assert!(
            line.contains(&ip) && line.contains(&node) && line.contains("Running"),
            "{line}"
        );
    }
    // no credentials: 401; the API server's client certificate passed above.
    let code = Command::new("curl")
        .args(["-sk", "-o", "/dev/null", "-w", "%{http_code}"])
        .arg(format!("https://127.0.0.1:{port}/pods"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&code.stdout), "401");
    eprintln!(
        "(a) deployment running, logs via kubectl: {:?}",
        started.elapsed()
    );

    // (l) begins: its pods fill their storage while (b)–(k) run.
    apply(cp, &work, "spill", SPILL);
    // (m) begins: its claims bind while (b)–(c) run.
    let disks = claims::start(cp, &work, &node);
    // (n) begins: the CSI driver registers while (b)–(c) run.
    let csi_driver = csi::start(cp, &work, &node, &work.join("root"));

    // (b) probes.
    apply(cp, &work, "probed", PROBED);
    wait_for("probed Ready=True", Duration::from_secs(60), || async {
        let p = pods.get("probed").await.ok()?;
        (condition(&p, "Ready").as_deref() == Some("True")).then_some(())
    })
    .await;
    wait_for(
        "probed Ready=False after the file is removed",
        Duration::from_secs(60),
        || async {
            let p = pods.get("probed").await.ok()?;
            let ready = condition(&p, "Ready");
            (phase(&p) == "Running" && ready.as_deref() == Some("False")).then_some(())
        },
    )
    .await;
    let p = pods.get("probed").await.unwrap();
    assert_eq!(restart_count(&p), 0, "readiness never restarts");
    let live = wait_for("liveness restarts", Duration::from_secs(90), || async {
        let p = pods.get("liveness").await.ok()?;
        (restart_count(&p) >= 2).then_some(p)
    })
    .await;
    let sbs = sandboxes_of(&cri, &live.uid().unwrap()).await;
    assert_eq!(sbs.len(), 1, "a liveness restart keeps the sandbox");
    eprintln!("(b) probes: {:?}", started.elapsed());

    // (c) static pod → mirror pod.
    std::fs::write(static_dir.join("web.yaml"), STATIC).unwrap();
    let mirror_name = format!("static-web-{node}");
    let mirror = wait_for(
        "the mirror pod Running",
        Duration::from_secs(60),
        || async {
            let p = pods.get_opt(&mirror_name).await.ok()??;
            (phase(&p) == "Running").then_some(p)
        },
    )
    .await;
    let static_uid = mirror.annotations()["kubernetes.io/config.mirror"].clone();
    assert_eq!(mirror.annotations()["kubernetes.io/config.source"], "file");
    assert_ne!(mirror.uid().unwrap(), static_uid);
    let owner = &mirror.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("Node", node.as_str())
    );
    assert_eq!(sandboxes_of(&cri, &static_uid).await.len(), 1);
    let out = wait_for(
        "kubectl logs of the mirror pod",
        Duration::from_secs(30),
        || async {
            let out = cp.kubectl(&["logs", &mirror_name]).ok()?;
            let s = String::from_utf8_lossy(&out.stdout).into_owned();
            s.contains("static up").then_some(s)
        },
    )
    .await;
    assert_eq!(out.trim(), "static up");
    std::fs::remove_file(static_dir.join("web.yaml")).unwrap();
    wait_for(
        "the mirror pod deleted",
        Duration::from_secs(60),
        || async {
            pods.get_opt(&mirror_name)
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;
    wait_for(
        "the static sandbox removed",
        Duration::from_secs(30),
        || async {
            sandboxes_of(&cri, &static_uid)
                .await
                .is_empty()
                .then_some(())
        },
    )
    .await;
    eprintln!("(c) static pod: {:?}", started.elapsed());

    let claim_containers = claims::check_running(cp, &pods, &disks).await;
    eprintln!("(m) claims mounted: {:?}", started.elapsed());
    let csi_containers = csi::check_running(cp, &pods, &node, &csi_driver).await;
    eprintln!(
        "(n) CSI volume staged and published: {:?}",
        started.elapsed()
    );

    // (d) restart the kubelet: pods adopted.
    let before: HashMap<String, Vec<String>> = pods
        .list(&ListParams::default().labels("app=hello"))
        .await
        .unwrap()
        .items
        .iter()
        .map(|p| (p.uid().unwrap(), container_ids(p)))
        .collect();
    agent.stop().await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let agent = Agent::start(&args);
    // A fresh sync after the restart rewrites nothing if adopted; wait a few
    // resyncs, then compare.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let after = wait_for(
        "hello pods Running after restart",
        Duration::from_secs(60),
        || async {
            let l = pods
                .list(&ListParams::default().labels("app=hello"))
                .await
                .ok()?;
            let all_running = l.items.len() == 3 && l.items.iter().all(|p| phase(p) == "Running");
            all_running.then_some(l.items)
        },
    )
    .await;
    for p in &after {
        let uid = p.uid().unwrap();
        assert_eq!(
            before.get(&uid),
            Some(&container_ids(p)),
            "same containers for {}",
            p.name_any()
        );
        assert_eq!(restart_count(p), 0);
        assert_eq!(
            sandboxes_of(&cri, &uid).await.len(),
            1,
            "one sandbox for {}",
            p.name_any()
        );
    }
    let logs = kubectl(cp, &["logs", &after[0].name_any()]);
    assert_eq!(logs.lines().count(), 1, "not started twice: {logs}");
    eprintln!("(d) adopted after restart: {:?}", started.elapsed());
    claims::check_after_restart(cp, &pods, &work, &disks, &claim_containers).await;
    eprintln!(
        "(m) claims kept across the restart, data across the pod: {:?}",
        started.elapsed()
    );
    csi::check_after_restart(&pods, &csi_driver, &csi_containers).await;
    eprintln!(
        "(n) CSI volume kept across the restart, unpublished and unstaged after the pod: {:?}",
        started.elapsed()
    );

    // (e) exec, cp, attach, port-forward.
    streams(cp, &work, &after[0].name_any(), &pods).await;
    eprintln!(
        "(e) exec, cp, attach, port-forward: {:?}",
        started.elapsed()
    );

    // (f) an ordinary Deployment: its own ServiceAccount (token mounted),
    // a ConfigMap volume, envFrom a Secret, limits, runAsNonRoot; kubectl
    // exec into it sees each of them.
    ordinary_workload(cp, &work, &pods).await;
    eprintln!("(f) ordinary workload: {:?}", started.elapsed());

    // (g) hostPort: the node's port reaches the pod (CNI portmap), and is
    // closed again once the pod is gone.
    host_port(cp, &work, &pods).await;
    eprintln!("(g) hostPort: {:?}", started.elapsed());

    // (h) log rotation: a chatty container's log stays within
    // containerLogMaxSize × containerLogMaxFiles, rotated files compressed;
    // `kubectl logs -f` goes on across rotations without losing a line and
    // `--tail` reads the live file.
    log_rotation(cp, &work, &pods).await;
    eprintln!("(h) log rotation: {:?}", started.elapsed());

    // (i) image pull Secrets, and the pulled-image credential check (last:
    // the busybox image it pulls with a Secret is then the Secret's only).
    private_images(cp, &work, &pods, ctrd, port).await;
    eprintln!("(i) private images: {:?}", started.elapsed());

    // (k) the serving certificate: bootstrapped, served only once
    // approved, verified against the cluster CA under the node's name, and
    // rotated twice without a restart (each pair served as soon as it is
    // issued); `kubectl logs` goes through the current one.
    let served = serving_rotations(&pki, &cp.dir().join("pki/ca.crt"), &node, port).await;
    // The API server reaches the kubelet API through the current one.
    wait_for(
        "kubectl logs of a hello pod",
        Duration::from_secs(60),
        || async {
            let l = pods
                .list(&ListParams::default().labels("app=hello"))
                .await
                .ok()?;
            for p in l.items.iter().filter(|p| phase(p) == "Running") {
                let out = cp.kubectl(&["logs", &p.name_any()]).ok()?;
                if String::from_utf8_lossy(&out.stdout).contains("hello-from") {
                    return Some(());
                }
            }
            None
        },
    )
    .await;
    approving.store(false, std::sync::atomic::Ordering::Relaxed);
    let approved = approver.await.unwrap();
    assert!(approved >= served, "{approved} serving requests approved");
    eprintln!(
        "(k) serving certificate bootstrapped and rotated ({served} served): {:?}",
        started.elapsed()
    );

    local_storage_evictions(cp, &pods).await;
    eprintln!("(l) local storage limits: {:?}", started.elapsed());

    // (j) disk pressure: restarted with an imagefs threshold the disk
    // always meets, the kubelet reports DiskPressure and frees unused images
    // (the sandbox image containerd 1.6 does not pin) before it evicts;
    // an image a container uses stays.
    agent.stop().await;
    let pressured = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("imagefs.available: 1Gi", "imagefs.available: 99%")
        // The periodic image GC stays off: only the eviction manager's
        // reclaim can remove the image.
        .replace(
            "imageGCHighThresholdPercent: 100\n",
            "imageGCHighThresholdPercent: 100\nimageMinimumGCAge: 1s\n",
        );
    std::fs::write(&cfg, pressured).unwrap();
    let agent = Agent::start(&args);
    disk_pressure(cp, &cri, &node).await;
    eprintln!("(j) disk pressure: {:?}", started.elapsed());

    agent.stop().await;
    let _ = sched_stop.send(());
    let _ = sched.await;
}

/// The pairs the serving certificate store holds (`kubelet-server-<time>.pem`).
fn serving_pairs(pki: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(pki)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("kubelet-server-2") && n.ends_with(".pem"))
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The serial of the certificate the kubelet API serves on `port`, as
/// `openssl s_client` sees it verifying the chain against `ca` and the
/// name `node`; `None` when the handshake or the verification fails.
fn served_serial(port: u16, ca: &Path, node: &str) -> Option<String> {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "openssl s_client -connect 127.0.0.1:{port} -servername {node} -CAfile {} \
             -verify_hostname {node} -verify_return_error </dev/null 2>/dev/null \
             | openssl x509 -noout -serial",
            ca.display()
        ))
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let serial = text.trim().strip_prefix("serial=")?;
    (out.status.success() && !serial.is_empty()).then(|| serial.to_string())
}

/// The serial of a stored pair's certificate.
fn pair_serial(pair: &Path) -> String {
    let out = Command::new("openssl")
        .args(["x509", "-noout", "-serial", "-in"])
        .arg(pair)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .trim_start_matches("serial=")
        .to_string()
}

/// Approves the node's pending `kubernetes.io/kubelet-serving` requests
/// with `kubectl certificate approve` while `approving`; checks before the
/// first approval that nothing is served. Returns how many it approved.
async fn approve_serving_csrs(
    approving: std::sync::Arc<std::sync::atomic::AtomicBool>,
    kubeconfig: PathBuf,
    ca: PathBuf,
    node: String,
    port: u16,
) -> usize {
    use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
    let admin = client(&kubeconfig).await;
    let csrs: Api<CertificateSigningRequest> = Api::all(admin);
    let user = format!("system:node:{node}");
    let mut approved = Vec::new();
    while approving.load(std::sync::atomic::Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let Ok(list) = csrs.list(&Default::default()).await else {
            continue;
        };
        for c in list.items {
            let name = c.name_any();
            let decided = c
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|v| !v.is_empty());
            if c.spec.signer_name != "kubernetes.io/kubelet-serving" || decided {
                continue;
            }
            assert_eq!(c.spec.username.as_deref(), Some(user.as_str()), "{name}");
            assert!(name.starts_with("csr-"), "{name}");
            let mut usages = c.spec.usages.clone().unwrap_or_default();
            usages.sort();
            assert_eq!(usages, ["digital signature", "server auth"], "{name}");
            if approved.is_empty() {
                let (ca, node) = (ca.clone(), node.clone());
                let before = tokio::task::spawn_blocking(move || served_serial(port, &ca, &node))
                    .await
                    .unwrap();
                assert_eq!(before, None, "nothing served before the first approval");
            }
            let kc = kubeconfig.clone();
            let out = tokio::task::spawn_blocking(move || {
                Command::new("kubectl")
                    .arg(format!("--kubeconfig={}", kc.display()))
                    .args(["certificate", "approve", &name])
                    .output()
            })
            .await
            .unwrap()
            .unwrap();
            assert!(
                out.status.success(),
                "kubectl certificate approve: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            approved.push(c.name_any());
        }
    }
    approved.len()
}

/// Waits until the serving store holds the bootstrap pair and
/// `RKUBE_SERVING_ROTATIONS` (default 2) rotations, checking that each
/// current pair is the one served, verified against the cluster CA;
/// returns how many distinct certificates were served.
async fn serving_rotations(pki: &Path, ca: &Path, node: &str, port: u16) -> usize {
    let rotations: usize = std::env::var("RKUBE_SERVING_ROTATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n >= 1)
        .unwrap_or(2);
    let mut seen = std::collections::BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(480);
    loop {
        let pairs = serving_pairs(pki);
        if let Some(current) = pairs.last() {
            let want = pair_serial(current);
            let (ca, node) = (ca.to_path_buf(), node.to_string());
            let got = tokio::task::spawn_blocking(move || served_serial(port, &ca, &node))
                .await
                .unwrap();
            // A handshake between the store's swap and the next one may
            // still see the previous pair (re-read at most once a second).
            if got.as_deref() == Some(want.as_str()) {
                seen.insert(want);
            }
            let mode = std::fs::metadata(current).unwrap().permissions();
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(mode.mode() & 0o777, 0o600, "the serving key is private");
        }
        if pairs.len() > rotations && seen.len() > rotations {
            return seen.len();
        }
        assert!(
            Instant::now() < deadline,
            "serving certificates: stored {pairs:?}, served {seen:?}"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

async fn disk_pressure(cp: &ControlPlane, cri: &CriClient, node: &str) {
    use k8s_openapi::api::core::v1::Event;
    let images = |tag: &'static str| async move {
        cri.list_images(None)
            .await
            .unwrap()
            .iter()
            .any(|i| i.repo_tags.iter().any(|t| t.ends_with(tag)))
    };
    assert!(images("pause:1").await && images("busybox:1").await);
    let admin = client(cp.kubeconfig()).await;
    let nodes: Api<Node> = Api::all(admin.clone());
    wait_for("DiskPressure=True", Duration::from_secs(60), || async {
        let n = nodes.get(node).await.ok()?;
        n.status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "DiskPressure" && c.status == "True")
            .then_some(())
    })
    .await;
    wait_for(
        "the unused sandbox image reclaimed",
        Duration::from_secs(60),
        || async { (!images("pause:1").await).then_some(()) },
    )
    .await;
    // A new pod is refused while the pressure lasts (upstream's eviction
    // admission), bound here past the scheduler's taint filter.
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    let late: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "late"},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "rkube.local/busybox:1",
                 "imagePullPolicy": "Never", "command": ["sleep", "60"]}]},
    }))
    .unwrap();
    pods.create(&Default::default(), &late).await.unwrap();
    let refused = wait_for("late refused", Duration::from_secs(30), || async {
        let p = pods.get("late").await.ok()?;
        (phase(&p) == "Failed").then_some(p.status?)
    })
    .await;
    assert_eq!(refused.reason.as_deref(), Some("Evicted"));
    assert_eq!(
        refused.message.as_deref(),
        Some("Pod was rejected: The node had condition: [DiskPressure]. ")
    );
    let events: Api<Event> = Api::namespaced(admin, "default");
    let reclaim = wait_for(
        "the EvictionThresholdMet Event",
        Duration::from_secs(30),
        || async {
            let l = events.list(&ListParams::default()).await.ok()?;
            l.items.into_iter().find(|e| {
                e.reason.as_deref() == Some("EvictionThresholdMet")
                    && e.involved_object.kind.as_deref() == Some("Node")
                    && e.involved_object.name.as_deref() == Some(node)
            })
        },
    )
    .await;
    assert_eq!(
        reclaim.message.as_deref(),
        Some("Attempting to reclaim ephemeral-storage")
    );
    assert_eq!(reclaim.type_.as_deref(), Some("Warning"));
}

/// Two pods that write past their local storage limits, and one that
/// stays within them.
const SPILL: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: spill-dir, namespace: default, labels: {spill: "1"}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: rkube.local/busybox:1
    imagePullPolicy: Never
    command: ["sh", "-c", "dd if=/dev/zero of=/data/f bs=1024 count=3072 && sleep 3600"]
    volumeMounts: [{name: data, mountPath: /data}]
  volumes:
  - name: data
    emptyDir: {sizeLimit: 1Mi}
---
apiVersion: v1
kind: Pod
metadata: {name: spill-layer, namespace: default, labels: {spill: "1"}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: rkube.local/busybox:1
    imagePullPolicy: Never
    # Its logs pass the limit on any node; its writable layer too where
    # the images share the node's filesystem.
    command: ["sh", "-c", "dd if=/dev/zero of=/f bs=1024 count=3072; head -c 2097152 /dev/urandom | od -An -tx1; sleep 3600"]
    resources: {limits: {ephemeral-storage: 1Mi}}
  # The pod's limit in all is 65Mi: only app's own is passed.
  - name: idle
    image: rkube.local/busybox:1
    imagePullPolicy: Never
    command: ["sleep", "3600"]
    resources: {limits: {ephemeral-storage: 64Mi}}
---
apiVersion: v1
kind: Pod
metadata: {name: spill-within, namespace: default, labels: {spill: "1"}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: rkube.local/busybox:1
    imagePullPolicy: Never
    command: ["sh", "-c", "dd if=/dev/zero of=/data/f bs=1024 count=512 && sleep 3600"]
    volumeMounts: [{name: data, mountPath: /data}]
    resources: {limits: {ephemeral-storage: 64Mi}}
  volumes:
  - name: data
    emptyDir: {sizeLimit: 1Mi}
"#;

/// The first Event of pod `name` (namespace default) with `reason`,
/// waited for at most `within`.
async fn event_of(
    cp: &ControlPlane,
    name: &str,
    reason: &str,
    within: Duration,
) -> k8s_openapi::api::core::v1::Event {
    use k8s_openapi::api::core::v1::Event;
    let events: Api<Event> = Api::namespaced(client(cp.kubeconfig()).await, "default");
    wait_for(&format!("{name}'s {reason} Event"), within, || async {
        events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.involved_object.name.as_deref() == Some(name)
            })
    })
    .await
}

/// (l): the spill pods evicted with upstream's messages, the one within
/// its limits still running.
async fn local_storage_evictions(cp: &ControlPlane, pods: &Api<Pod>) {
    for (name, want) in [
        (
            "spill-dir",
            "Usage of EmptyDir volume \"data\" exceeds the limit \"1Mi\". ",
        ),
        (
            "spill-layer",
            "Container app exceeded its local ephemeral storage limit \"1Mi\". ",
        ),
    ] {
        // The emptyDir's usage is measured once a volumeStatsAggPeriod
        // (a minute).
        let p = wait_for(
            &format!("{name} evicted"),
            Duration::from_secs(90),
            || async {
                let p = pods.get(name).await.ok()?;
                (phase(&p) == "Failed").then_some(p)
            },
        )
        .await;
        let s = p.status.as_ref().unwrap();
        assert_eq!(s.reason.as_deref(), Some("Evicted"), "{name}");
        assert_eq!(s.message.as_deref(), Some(want), "{name}");
        assert!(
            !s.conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "DisruptionTarget"),
            "{name}: {s:?}"
        );
        let e = event_of(cp, name, "Evicted", Duration::from_secs(30)).await;
        assert_eq!(e.type_.as_deref(), Some("Warning"));
        assert_eq!(e.message.as_deref(), Some(want));
    }
    let within = pods.get("spill-within").await.unwrap();
    assert_eq!(phase(&within), "Running", "{:?}", within.status);
    pods.delete_collection(
        &Default::default(),
        &ListParams::default().labels("spill=1"),
    )
    .await
    .unwrap();
}

const CHATTY: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: chatty, namespace: default}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: rkube.local/busybox:1
    imagePullPolicy: Never
    command: ["sh", "-c", "i=0; while true; do seq $i $((i+3999)); i=$((i+4000)); sleep 0.5; done"]
"#;

/// Consecutive integers, one per line (the chatty pod's output).
fn consecutive(text: &str) -> (usize, Option<String>) {
    let mut prev: Option<u64> = None;
    let mut n = 0;
    for line in text.lines() {
        let Ok(v) = line.trim().parse::<u64>() else {
            return (n, Some(format!("line {n}: {line:?} is not a number")));
        };
        if let Some(p) = prev {
            if v != p + 1 {
                return (n, Some(format!("line {n}: {v} after {p}")));
            }
        }
        prev = Some(v);
        n += 1;
    }
    (n, None)
}

async fn log_rotation(cp: &ControlPlane, work: &Path, pods: &Api<Pod>) {
    apply(cp, work, "chatty", CHATTY);
    let deadline = Instant::now() + Duration::from_secs(60);
    let pod = loop {
        let p = pods.get("chatty").await.unwrap();
        if phase(&p) == "Running" {
            break p;
        }
        assert!(
            Instant::now() < deadline,
            "the chatty pod is not Running: {:?}",
            p.status
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let uid = pod.uid().unwrap();
    let dir = work
        .join("root/pod-logs")
        .join(format!("default_chatty_{uid}"))
        .join("app");
    // Follow for 15 s: several rotations happen meanwhile.
    let mut follow = Command::new("kubectl")
        .args(["--kubeconfig", cp.kubeconfig().to_str().unwrap()])
        .args(["logs", "-f", "chatty"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl logs -f");
    let mut out = follow.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut out, &mut s);
        s
    });
    let mut max_files = 0;
    let mut max_bytes = 0;
    let mut compressed = std::collections::BTreeSet::new();
    let until = Instant::now() + Duration::from_secs(15);
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let files: Vec<(String, u64)> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| {
                (
                    e.file_name().to_string_lossy().into_owned(),
                    e.metadata().unwrap().len(),
                )
            })
            .filter(|(n, _)| !n.ends_with(".tmp"))
            .collect();
        max_files = max_files.max(files.len());
        max_bytes = max_bytes.max(files.iter().map(|(_, l)| *l).sum::<u64>());
        compressed.extend(
            files
                .iter()
                .filter(|(n, _)| n.ends_with(".gz"))
                .map(|(n, _)| n.clone()),
        );
    }
    let _ = follow.kill();
    let _ = follow.wait();
    let followed = reader.join().unwrap();
    // Upstream's bound: the live log and maxFiles − 1 rotated files; each
    // rotated file about containerLogMaxSize plus what one monitor
    // interval adds (the pod writes about 0.3 MB/s).
    assert!(
        max_files <= 3,
        "at most containerLogMaxFiles files, saw {max_files}"
    );
    assert!(
        max_bytes < 8 << 20,
        "the logs stay bounded on disk: {max_bytes} bytes"
    );
    assert!(
        compressed.len() >= 2,
        "rotated files compressed: {compressed:?}"
    );
    let (lines, gap) = consecutive(&followed);
    assert!(
        gap.is_none(),
        "kubectl logs -f lost or repeated a line: {gap:?}"
    );
    assert!(
        lines > 40_000,
        "kubectl logs -f went on across rotations: {lines} lines"
    );
    // Just after a rotation the live file is empty until the pod's next
    // burst (half a second): read again until it has lines, as upstream's
    // kubelet, which reads the live file too, would need.
    let mut tail = String::new();
    for _ in 0..20 {
        tail = kubectl(cp, &["logs", "--tail", "5", "chatty"]);
        if tail.lines().count() >= 5 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let (n, gap) = consecutive(&tail);
    assert_eq!((n, gap), (5, None), "kubectl logs --tail 5: {tail:?}");
    // The follow was still reading the live file when it was stopped (a
    // follow stuck on a rotated file would lag by the rest of the 15 s).
    let last = |t: &str| {
        t.lines()
            .last()
            .and_then(|l| l.trim().parse::<u64>().ok())
            .unwrap()
    };
    let lag = last(&tail).saturating_sub(last(&followed));
    assert!(
        lag < 24_000,
        "kubectl logs -f lagged {lag} lines behind the live log"
    );
    kubectl(cp, &["delete", "pod", "chatty", "--wait=false"]);
}

const ORDINARY: &str = r#"
apiVersion: v1
kind: ServiceAccount
metadata: {name: app, namespace: default}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: app-config, namespace: default}
data: {greeting.txt: "hello from a ConfigMap"}
---
apiVersion: v1
kind: Secret
metadata: {name: app-secret, namespace: default}
stringData: {DB_PASSWORD: s3cr3t-value}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: ordinary, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: ordinary}}
  template:
    metadata: {labels: {app: ordinary}}
    spec:
      serviceAccountName: app
      terminationGracePeriodSeconds: 2
      securityContext: {runAsNonRoot: true, runAsUser: 1000, runAsGroup: 1000, fsGroup: 2000}
      containers:
      - name: app
        image: rkube.local/busybox:1
        imagePullPolicy: Never
        command: ["sh", "-c", "exec sleep 3600"]
        envFrom: [{secretRef: {name: app-secret}}]
        resources:
          requests: {cpu: 50m, memory: 32Mi}
          limits: {cpu: 200m, memory: 64Mi}
        securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
        volumeMounts: [{name: config, mountPath: /etc/app}]
      volumes:
      - name: config
        configMap: {name: app-config}
"#;

async fn ordinary_workload(cp: &ControlPlane, work: &Path, pods: &Api<Pod>) {
    apply(cp, work, "ordinary", ORDINARY);
    let pod = wait_for(
        "the ordinary Deployment's pod Running and Ready",
        Duration::from_secs(120),
        || async {
            let l = pods
                .list(&ListParams::default().labels("app=ordinary"))
                .await
                .ok()?;
            l.items
                .into_iter()
                .find(|p| phase(p) == "Running" && condition(p, "Ready").as_deref() == Some("True"))
        },
    )
    .await;
    let script = "id -u; id -G; echo \"$DB_PASSWORD\"; cat /etc/app/greeting.txt; echo; \
                  test -s /var/run/secrets/kubernetes.io/serviceaccount/token && echo token; \
                  cat /var/run/secrets/kubernetes.io/serviceaccount/namespace; echo; \
                  cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes";
    let out = kubectl_io(
        cp,
        &["exec", &pod.name_any(), "--", "sh", "-c", script],
        b"",
    )
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "exec: {stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "1000", "runAsUser: {stdout}");
    assert!(
        lines[1].split(' ').any(|g| g == "2000"),
        "fsGroup: {stdout}"
    );
    assert_eq!(lines[2], "s3cr3t-value", "envFrom the Secret: {stdout}");
    assert_eq!(
        lines[3], "hello from a ConfigMap",
        "ConfigMap volume: {stdout}"
    );
    assert_eq!(lines[4], "token", "ServiceAccount token: {stdout}");
    assert_eq!(lines[5], "default", "token namespace: {stdout}");
    assert_eq!(
        lines[6],
        (64 * 1024 * 1024).to_string(),
        "memory limit: {stdout}"
    );
    // ClusterFirst: the cluster's resolver (clusterDNS, clusterDomain).
    let out = kubectl_io(
        cp,
        &["exec", &pod.name_any(), "--", "cat", "/etc/resolv.conf"],
        b"",
    )
    .await;
    let resolv = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = resolv.lines().map(str::trim).collect();
    assert!(lines.contains(&"nameserver 10.96.0.10"), "{resolv}");
    assert!(
        lines
            .iter()
            .any(|l| l
                .starts_with("search default.svc.cluster.local svc.cluster.local cluster.local")),
        "{resolv}"
    );
    assert!(lines.contains(&"options ndots:5"), "{resolv}");
    assert_eq!(
        lines.iter().filter(|l| l.starts_with("nameserver")).count(),
        1,
        "{resolv}"
    );
    // The Secret's value reaches the container, never the pod object.
    let yaml = kubectl(cp, &["get", "pod", &pod.name_any(), "-o", "yaml"]);
    assert!(!yaml.contains("s3cr3t-value"));
    // ConfigMaps and Secrets are watched, not read again at each sync
    // (every pod syncs at least every 30 s: syncFrequency 20s).
    let before = config_reads(cp);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let after = config_reads(cp);
    assert!(
        after - before <= 1.0,
        "GET or LIST of configmaps and secrets in 10 s with the pods idle: {}",
        after - before
    );
    // ... and a change reaches the running container through the watch at
    // the pod's next resync (20 to 30 s).
    kubectl(
        cp,
        &[
            "patch",
            "configmap",
            "app-config",
            "-p",
            r#"{"data":{"greeting.txt":"changed"}}"#,
        ],
    );
    wait_for(
        "the ConfigMap's change in the container's file",
        Duration::from_secs(60),
        || async {
            let out = kubectl_io(
                cp,
                &[
                    "exec",
                    &pod.name_any(),
                    "--",
                    "cat",
                    "/etc/app/greeting.txt",
                ],
                b"",
            )
            .await;
            (out.stdout == b"changed").then_some(())
        },
    )
    .await;
    kubectl(cp, &["delete", "deployment", "ordinary", "--wait=false"]);
}

/// The API server's count of GET and LIST requests on ConfigMaps and
/// Secrets so far.
fn config_reads(cp: &ControlPlane) -> f64 {
    kubectl(cp, &["get", "--raw", "/metrics"])
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
        .filter(|l| l.contains(r#"resource="configmaps""#) || l.contains(r#"resource="secrets""#))
        .filter(|l| l.contains(r#"verb="GET""#) || l.contains(r#"verb="LIST""#))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

const HOST_PORT: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: hostport, namespace: default}
spec:
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  containers:
  - name: httpd
    image: rkube.local/busybox:1
    imagePullPolicy: Never
    command: ["sh", "-c", "mkdir -p /www && echo hi-from-hostport > /www/index.html && exec httpd -f -p 8080 -h /www"]
    ports: [{containerPort: 8080, hostPort: HOSTPORT}]
"#;

async fn host_port(cp: &ControlPlane, work: &Path, pods: &Api<Pod>) {
    let hp = free_port();
    apply(
        cp,
        work,
        "hostport",
        &HOST_PORT.replace("HOSTPORT", &hp.to_string()),
    );
    wait_for(
        "the hostport pod Running",
        Duration::from_secs(60),
        || async {
            let p = pods.get("hostport").await.ok()?;
            (phase(&p) == "Running").then_some(())
        },
    )
    .await;
    let page = http_get(hp, Duration::from_secs(30))
        .await
        .unwrap_or_else(|| panic!("nothing answers on the node's port {hp}"));
    assert!(
        page.starts_with("HTTP/1.") && page.lines().next().is_some_and(|l| l.contains(" 200 ")),
        "{page}"
    );
    assert!(page.ends_with("hi-from-hostport\n"), "{page}");
    kubectl(cp, &["delete", "pod", "hostport", "--wait=true"]);
    assert_eq!(
        http_get(hp, Duration::from_secs(2)).await,
        None,
        "the node's port {hp} still answers after the pod is gone"
    );
}

/// The waiting reason of the pod's first container, if any.
fn waiting_reason(p: &Pod) -> Option<String> {
    p.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .first()?
        .state
        .as_ref()?
        .waiting
        .as_ref()?
        .reason
        .clone()
}

fn private_pod(name: &str, image: &str, secret: Option<&str>, policy: &str) -> String {
    let secrets = secret
        .map(|s| format!("  imagePullSecrets: [{{name: {s}}}]\n"))
        .unwrap_or_default();
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec:\n\
         \x20 automountServiceAccountToken: false\n  terminationGracePeriodSeconds: 1\n{secrets}\
         \x20 containers:\n  - name: main\n    image: {image}\n    imagePullPolicy: {policy}\n\
         \x20   command: [sh, -c, 'exec sleep 3600']\n"
    )
}

async fn private_images(
    cp: &ControlPlane,
    work: &Path,
    pods: &Api<Pod>,
    ctrd: &Containerd,
    port: u16,
) {
    let reg = common::registry::Registry::start(
        &ctrd.dir.join("images/rkube-images.oci.tar"),
        "rkube.local/busybox:1",
        "private/busybox",
        "1",
        "puller",
        "pull-pw",
    )
    .await;
    let image = format!("localhost:{}/private/busybox:1", reg.port);
    let auth = {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode("puller:pull-pw")
    };
    let config = serde_json::json!({"auths": {format!("localhost:{}", reg.port): {"auth": auth}}});
    let secret = |name: &str| {
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: default}}\n\
             type: kubernetes.io/dockerconfigjson\nstringData: {{.dockerconfigjson: '{config}'}}\n"
        )
    };
    apply(cp, work, "regcred", &secret("regcred"));
    apply(cp, work, "regcred-copy", &secret("regcred-copy"));
    let running = |name: &'static str| async move {
        wait_for(
            &format!("{name} Running"),
            Duration::from_secs(90),
            || async {
                let p = pods.get(name).await.ok()?;
                (phase(&p) == "Running").then_some(())
            },
        )
        .await
    };
    let waiting = |name: &'static str, reasons: &'static [&'static str]| async move {
        wait_for(
            &format!("{name} waiting with one of {reasons:?}"),
            Duration::from_secs(60),
            || async {
                let p = pods.get(name).await.ok()?;
                assert_ne!(phase(&p), "Running", "{name} must not run the image");
                waiting_reason(&p).filter(|r| reasons.contains(&r.as_str()))
            },
        )
        .await
    };

    // With the Secret: pulled and running.
    apply(
        cp,
        work,
        "with-secret",
        &private_pod("with-secret", &image, Some("regcred"), "IfNotPresent"),
    );
    running("with-secret").await;
    assert!(
        reg.authorized() > 0,
        "the kubelet pulled with the Secret's login"
    );
    // Another Secret holding the same login: the image on the node is
    // used as it is (no request reaches the registry).
    let seen = reg.authorized() + reg.refused();
    apply(
        cp,
        work,
        "same-login",
        &private_pod("same-login", &image, Some("regcred-copy"), "IfNotPresent"),
    );
    running("same-login").await;
    assert_eq!(
        reg.authorized() + reg.refused(),
        seen,
        "same login: no pull"
    );
    // No Secret: the image is on the node, but this pod must pull it
    // with its own (no) credentials, and the registry refuses.
    apply(
        cp,
        work,
        "no-secret",
        &private_pod("no-secret", &image, None, "IfNotPresent"),
    );
    waiting("no-secret", &["ErrImagePull", "ImagePullBackOff"]).await;
    assert!(reg.refused() > 0);
    apply(
        cp,
        work,
        "never-pull",
        &private_pod("never-pull", &image, None, "Never"),
    );
    waiting("never-pull", &["ErrImageNeverPull"]).await;
    timeline(cp, work, pods, &image, port).await;
    kubectl(
        cp,
        &[
            "delete",
            "pod",
            "with-secret",
            "same-login",
            "no-secret",
            "never-pull",
            "timed",
            "--wait=false",
        ],
    );
}

/// The startup timeline of a pod with an init container, an image to pull
/// (`Always`, from the private registry) and a readiness probe: every
/// stage in the order a start goes, the pull's size and time, the
/// startup SLI observed (and on `/metrics`, which promcheck parses); a
/// caller without `nodes/proxy` is refused by the kubelet itself.
async fn timeline(cp: &ControlPlane, work: &Path, pods: &Api<Pod>, image: &str, port: u16) {
    let yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: timed, namespace: default}}\nspec:\n\
         \x20 automountServiceAccountToken: false\n  terminationGracePeriodSeconds: 1\n\
         \x20 imagePullSecrets: [{{name: regcred}}]\n\
         \x20 initContainers:\n  - name: init\n    image: {image}\n    imagePullPolicy: IfNotPresent\n\
         \x20   command: [sh, -c, 'sleep 0.3']\n\
         \x20 containers:\n  - name: main\n    image: {image}\n    imagePullPolicy: Always\n\
         \x20   command: [sh, -c, 'exec sleep 3600']\n\
         \x20   readinessProbe: {{exec: {{command: ['true']}}, periodSeconds: 1}}\n"
    );
    apply(cp, work, "timed", &yaml);
    wait_for("timed Ready", Duration::from_secs(90), || async {
        let p = pods.get("timed").await.ok()?;
        (condition(&p, "Ready").as_deref() == Some("True")).then_some(())
    })
    .await;
    // Straight from the kubelet API with the admin's certificate (the API
    // server's node proxy refuses a node at a loopback address; the
    // cluster test reads it through the proxy with `rkube timeline`).
    let pki = cp.dir().join("pki");
    let get = |path: &str| {
        let out = Command::new("curl")
            .args(["-sk", "--fail", "--cert"])
            .arg(pki.join("admin.crt"))
            .arg("--key")
            .arg(pki.join("admin.key"))
            .arg(format!("https://127.0.0.1:{port}{path}"))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let t: serde_json::Value = wait_for(
        "the timeline's start observed",
        Duration::from_secs(30),
        || async {
            let t: serde_json::Value =
                serde_json::from_str(&get("/timeline/default/timed")).ok()?;
            t.get("sliSeconds").is_some().then_some(t)
        },
    )
    .await;
    let stages = t["stages"].as_array().unwrap();
    let at = |i: usize| {
        stages[i]["at"]
            .as_str()
            .unwrap()
            .parse::<k8s_openapi::jiff::Timestamp>()
            .unwrap()
    };
    for i in 1..stages.len() {
        assert!(at(i - 1) <= at(i), "stages out of order: {t:#}");
    }
    let find = |stage: &str, container: Option<&str>| {
        stages
            .iter()
            .position(|s| s["stage"] == stage && s["container"].as_str() == container)
            .unwrap_or_else(|| panic!("no {stage} {container:?} in {t:#}"))
    };
    let order = [
        find("PodCreated", None),
        find("Seen", None),
        find("Admitted", None),
        find("VolumesReady", None),
        find("SandboxCreated", None),
        find("NetworkReady", None),
        find("Created", Some("init")),
        find("Started", Some("init")),
        find("InitContainerDone", Some("init")),
        find("Pulling", Some("main")),
        find("Pulled", Some("main")),
        find("Created", Some("main")),
        find("Started", Some("main")),
        find("ProbeSucceeded", Some("main")),
        find("Ready", None),
    ];
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "stages not in a start's order {order:?}: {t:#}"
    );
    assert!(find("ObservedRunning", None) > find("Started", Some("main")));
    let pulled = stages[find("Pulled", Some("main"))]["detail"]
        .as_str()
        .unwrap();
    assert!(
        pulled.contains("Successfully pulled") && pulled.contains("Image size:"),
        "{pulled}"
    );
    let (sli, e2e, pull) = (
        t["sliSeconds"].as_f64().unwrap(),
        t["e2eSeconds"].as_f64().unwrap(),
        t["imagePullSeconds"].as_f64().unwrap(),
    );
    assert!(
        pull > 0.0 && t["initContainerSeconds"].as_f64().unwrap() >= 0.25,
        "{t:#}"
    );
    assert!(sli >= 0.0 && sli <= e2e - pull + 1e-6, "{t:#}");
    // The SLI histograms on the kubelet's /metrics (the cluster test runs
    // Prometheus' parser over every kubelet's /metrics).
    let metrics = get("/metrics");
    for family in [
        "kubelet_pod_start_sli_duration_seconds_count",
        "kubelet_pod_start_total_duration_seconds_count",
        "# TYPE kubelet_pod_start_sli_duration_seconds histogram",
    ] {
        assert!(metrics.contains(family), "{family} in {metrics}");
    }
    // Every CRI call is counted under upstream's operation names: this
    // pod's sandbox, its image pull and its two containers' starts at
    // least.
    let calls = |op: &str| -> u64 {
        let series = format!("kubelet_runtime_operations_total{{operation_type=\"{op}\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(series.as_str()))
            .map_or(0, |v| v.parse().unwrap())
    };
    assert!(calls("run_podsandbox") >= 1, "{metrics}");
    assert!(calls("pull_image") >= 1, "{metrics}");
    assert!(calls("start_container") >= 2, "{metrics}");
    assert!(
        metrics.contains("kubelet_runtime_operations_duration_seconds_bucket{operation_type=\"run_podsandbox\",le=\"0.005\"}"),
        "{metrics}"
    );
    // A ServiceAccount may not read it: the kubelet asks the API server
    // (SubjectAccessReview on nodes/proxy) and refuses.
    kubectl(cp, &["create", "serviceaccount", "nosy"]);
    let token = kubectl(cp, &["create", "token", "nosy"]);
    let code = Command::new("curl")
        .args(["-sk", "-o", "/dev/null", "-w", "%{http_code}", "-H"])
        .arg(format!("Authorization: Bearer {}", token.trim()))
        .arg(format!("https://127.0.0.1:{port}/timeline/default/timed"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&code.stdout), "403");
}

async fn streams(cp: &ControlPlane, work: &Path, pod: &str, pods: &Api<Pod>) {
    apply(cp, work, "streams", STREAMS);
    // exec: the streams stay apart, the exit code comes back
    let out = kubectl_io(
        cp,
        &[
            "exec",
            pod,
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2; exit 3",
        ],
        b"",
    )
    .await;
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(
        out.status.code(),
        Some(3),
        "stdout {stdout:?} stderr {stderr:?}"
    );
    assert_eq!(stdout, "out\n");
    assert!(stderr.lines().any(|l| l == "err"), "{stderr:?}");
    assert!(!stderr.contains("out"), "{stderr:?}");
    // exec -i: stdin reaches the command
    let out = kubectl_io(cp, &["exec", "-i", pod, "--", "cat"], b"ping").await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, b"ping");

    // cp out of the pod: binary data, byte for byte as `cat` streams it
    let out = kubectl_io(
        cp,
        &[
            "exec",
            pod,
            "--",
            "dd",
            "if=/dev/urandom",
            "of=/tmp/data.bin",
            "bs=1024",
            "count=64",
        ],
        b"",
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = kubectl_io(cp, &["exec", pod, "--", "cat", "/tmp/data.bin"], b"").await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let data = out.stdout;
    assert_eq!(data.len(), 65_536, "exec stdout carries binary data whole");
    let local = work.join("data.bin");
    let from = format!("default/{pod}:/tmp/data.bin");
    let out = kubectl_io(cp, &["cp", &from, local.to_str().unwrap()], b"").await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        std::fs::read(&local).unwrap() == data,
        "kubectl cp changed the bytes"
    );

    // attach -i: the container's own stdin and stdout
    wait_for(
        "web and attached Running",
        Duration::from_secs(60),
        || async {
            let w = pods.get("web").await.ok()?;
            let a = pods.get("attached").await.ok()?;
            (phase(&w) == "Running" && phase(&a) == "Running").then_some(())
        },
    )
    .await;
    let out = kubectl_io(cp, &["attach", "-i", "attached"], b"hello\n").await;
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("got:hello"),
        "stdout {:?} stderr {:?}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // port-forward: a local port reaches httpd in the pod
    let local_port = free_port();
    let mut pf = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(cp.kubeconfig())
        .args(["port-forward", "pod/web", &format!("{local_port}:8080")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run kubectl port-forward");
    // its stdout is read to the end: kubectl dies of SIGPIPE writing to a
    // closed pipe ("Handling connection for 8080")
    let stdout = pf.stdout.take().unwrap();
    let (first_tx, first_rx) = oneshot::channel();
    std::thread::spawn(move || {
        let mut lines = std::io::BufReader::new(stdout).lines();
        let _ = first_tx.send(lines.next().and_then(Result::ok).unwrap_or_default());
        lines.for_each(drop);
    });
    let line = tokio::time::timeout(Duration::from_secs(30), first_rx)
        .await
        .expect("port-forward did not start")
        .unwrap();
    assert!(line.starts_with("Forwarding from 127.0.0.1:"), "{line:?}");
    let page = http_get(local_port, Duration::from_secs(30)).await;
    let _ = pf.kill();
    let out = pf.wait_with_output().unwrap();
    let Some(page) = page else {
        panic!(
            "no page through kubectl port-forward: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    assert!(
        page.starts_with("HTTP/1.0 200") || page.starts_with("HTTP/1.1 200"),
        "{page}"
    );
    assert!(page.ends_with("hi-from-httpd\n"), "{page}");
}

/// `GET /index.html` on 127.0.0.1:`port`, retried until an HTTP answer
/// comes back or `within` ends.
async fn http_get(port: u16, within: Duration) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let deadline = Instant::now() + within;
    loop {
        let attempt = async {
            let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .ok()?;
            s.write_all(b"GET /index.html HTTP/1.0\r\nHost: web\r\n\r\n")
                .await
                .ok()?;
            let mut raw = Vec::new();
            tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut raw))
                .await
                .ok()?
                .ok()?;
            let text = String::from_utf8_lossy(&raw).into_owned();
            text.starts_with("HTTP/1.").then_some(text)
        };
        if let Some(page) = attempt.await {
            return Some(page);
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The ids of the images the runtime has.
async fn image_ids(cri: &CriClient) -> Vec<String> {
    cri.list_images(None)
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.id)
        .collect()
}

/// A host-network sandbox config for pod `uid`, logs under `logs`.
fn gc_sandbox_config(uid: &str, attempt: u32, logs: &Path) -> v1::PodSandboxConfig {
    v1::PodSandboxConfig {
        metadata: Some(v1::PodSandboxMetadata {
            name: "gc".into(),
            uid: uid.into(),
            namespace: "default".into(),
            attempt,
        }),
        labels: [("io.kubernetes.pod.uid".to_string(), uid.to_string())].into(),
        log_directory: logs.display().to_string(),
        linux: Some(v1::LinuxPodSandboxConfig {
            security_context: Some(v1::LinuxSandboxSecurityContext {
                namespace_options: Some(v1::NamespaceOption {
                    network: v1::NamespaceMode::Node as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The kubelet's garbage collector against a real containerd: dead
/// instances of a container beyond the newest go with their logs, a dead
/// sandbox beyond the newest goes, and under disk pressure unused images
/// go while an image a container uses stays (upstream's
/// `kuberuntime_gc.go` and `image_gc_manager.go`).
#[test]
#[ignore = "needs root, containerd (hack/containerd); run by hack/test"]
fn garbage_collection_on_containerd() {
    let ctrd = Containerd::up();
    let rt = runtime();
    rt.block_on(async {
        use rkube_kubelet::gc;
        let cri = CriClient::connect(&ctrd.endpoint).await.unwrap();
        let root = ctrd.dir.join("gc-root");
        let logs = root.join("pod-logs/default_gc_uid-gc");
        std::fs::create_dir_all(&logs).unwrap();
        let uid = "uid-gc";
        // A first sandbox, stopped: a dead one the newer sandbox replaces.
        let old = cri
            .run_pod_sandbox(gc_sandbox_config(uid, 0, &logs), "")
            .await
            .unwrap();
        cri.stop_pod_sandbox(&old).await.unwrap();
        let sb_config = gc_sandbox_config(uid, 1, &logs);
        let sandbox = cri.run_pod_sandbox(sb_config.clone(), "").await.unwrap();
        // Three dead instances of container "app", each with its log.
        let mut ids = Vec::new();
        for attempt in 0..3u32 {
            let config = v1::ContainerConfig {
                metadata: Some(v1::ContainerMetadata {
                    name: "app".into(),
                    attempt,
                }),
                image: Some(v1::ImageSpec {
                    image: "rkube.local/busybox:1".into(),
                    ..Default::default()
                }),
                command: vec!["sh".into(), "-c".into(), format!("echo attempt {attempt}")],
                labels: [("io.kubernetes.pod.uid".to_string(), uid.to_string())].into(),
                log_path: format!("app/{attempt}.log"),
                ..Default::default()
            };
            let id = cri
                .create_container(&sandbox, config, sb_config.clone())
                .await
                .unwrap();
            cri.start_container(&id).await.unwrap();
            ids.push(id);
            // Distinct creation times.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        wait_for(
            "the three instances exited",
            Duration::from_secs(30),
            || async {
                let all = cri.list_containers(None).await.ok()?;
                all.iter()
                    .all(|c| c.state == v1::ContainerState::ContainerExited as i32)
                    .then_some(())
            },
        )
        .await;
        // A rotated file of the oldest instance goes with it.
        std::fs::write(logs.join("app/0.log.20261205-120000.gz"), b"old").unwrap();
        for a in 0..3 {
            assert!(
                logs.join(format!("app/{a}.log")).exists(),
                "log of attempt {a}"
            );
        }
        let stats = std::sync::Arc::new(rkube_kubelet::stats::StatsProvider::new(
            cri.clone(),
            rkube_kubelet::pod::Dirs::under(&root),
            "gc-node",
            "",
        ));
        let pod_states = std::sync::Arc::new(rkube_kubelet::pods::worker::PodStates::default());
        let collector = gc::GarbageCollector::new(
            cri.clone(),
            stats,
            "gc-node".into(),
            None,
            gc::containers::DEFAULT_POLICY,
            gc::images::Policy {
                high_threshold_percent: 1,
                low_threshold_percent: 0,
                min_age: Duration::from_secs(1),
                max_age: Duration::ZERO,
            },
            pod_states.clone(),
        );
        let (containers, sandboxes) = collector.collect_containers().await.unwrap();
        assert_eq!(
            (containers, sandboxes),
            (2, 1),
            "two dead instances, one sandbox"
        );
        let left: Vec<String> = cri
            .list_containers(None)
            .await
            .unwrap()
            .into_iter()
            .map(|c| c.id)
            .collect();
        assert_eq!(left, vec![ids[2].clone()], "the newest instance stays");
        let sandboxes: Vec<String> = cri
            .list_pod_sandboxes(None)
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.id)
            .collect();
        assert_eq!(sandboxes, vec![sandbox.clone()], "the newest sandbox stays");
        let mut files: Vec<String> = std::fs::read_dir(logs.join("app"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        files.sort();
        assert_eq!(files, ["2.log"], "removed instances' logs are gone");
        // A second pass has nothing left to do.
        assert_eq!(collector.collect_containers().await.unwrap(), (0, 0));
        // Terminated (not evicted): the last instance stays, except for the
        // eviction manager's reclaim.
        pod_states.set(uid, true, false);
        assert_eq!(collector.collect_containers().await.unwrap(), (0, 0));

        // Images: every byte is "over" a 1 % threshold, so the collector
        // removes every unused image it may and reports it could not free
        // enough. The image the remaining container uses stays; the
        // sandbox image goes unless the runtime pinned it (containerd
        // 1.7+ does), as upstream.
        let images = cri.list_images(None).await.unwrap();
        let id_of = |tag: &str| {
            images
                .iter()
                .find(|i| i.repo_tags.iter().any(|t| t.ends_with(tag)))
                .map(|i| (i.id.clone(), i.pinned))
                .unwrap_or_else(|| panic!("image {tag} listed"))
        };
        let (busybox, _) = id_of("busybox:1");
        let (pause, pause_pinned) = id_of("pause:1");
        // First pass: the images are first seen now, younger than
        // imageMinimumGCAge: nothing may go yet.
        let err = collector.collect_images().await.unwrap_err();
        assert!(
            err.contains(
                "Failed to free sufficient space by deleting unused images (freed 0 bytes)"
            ),
            "{err}"
        );
        assert_eq!(cri.list_images(None).await.unwrap().len(), images.len());
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let err = collector.collect_images().await.unwrap_err();
        assert!(
            err.starts_with("Insufficient free disk space on the node's image filesystem ("),
            "{err}"
        );
        let now = image_ids(&cri).await;
        assert!(now.contains(&busybox), "the image in use stays");
        assert_eq!(
            now.contains(&pause),
            pause_pinned,
            "the sandbox image goes unless pinned"
        );
        // Evicted: its content goes whole (the ready sandbox stays until
        // its worker stops it).
        pod_states.set(uid, true, true);
        assert_eq!(collector.collect_containers().await.unwrap(), (1, 0));
        assert!(cri.list_containers(None).await.unwrap().is_empty());
        // Its last container is gone: the image goes too.
        let _ = collector.collect_images().await;
        let now = image_ids(&cri).await;
        assert!(!now.contains(&busybox), "an unused image goes");
        let _ = cri.stop_pod_sandbox(&sandbox).await;
        let _ = cri.remove_pod_sandbox(&sandbox).await;
    });
}

/// Swap on for as long as it lives (a swap file), off again when dropped.
struct SwapFile(PathBuf);

impl SwapFile {
    fn on() -> SwapFile {
        let f = std::env::temp_dir().join(format!("rk-swap-{}", std::process::id()));
        let ok = |c: &mut Command| c.status().map(|s| s.success()).unwrap_or(false);
        assert!(ok(Command::new("fallocate").args(["-l", "16M"]).arg(&f)));
        std::fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        assert!(ok(Command::new("mkswap").arg(&f).stdout(Stdio::null())));
        let swap = SwapFile(f);
        assert!(ok(Command::new("swapon").arg(&swap.0)), "swapon");
        swap
    }
}

impl Drop for SwapFile {
    fn drop(&mut self) {
        let _ = Command::new("swapoff").arg(&self.0).status();
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `failCgroupV1` (the default) on a host using cgroup v1, and
/// `failSwapOn` (the default) on a host with swap on: the kubelet refuses
/// to start with upstream's message (exit 1); `--fail-cgroupv1=false` and
/// `--fail-swap-on=false` let it past those checks.
#[test]
#[ignore = "needs root (swapon); run by hack/test"]
fn swap_on_refuses_to_start() {
    let swap = SwapFile::on();
    assert!(std::fs::read_to_string("/proc/swaps")
        .unwrap()
        .contains(swap.0.to_str().unwrap()));
    let dir = std::env::temp_dir().join(format!("rk-swap-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("kubelet.yaml");
    std::fs::write(
        &cfg,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nhealthzPort: 0\n\
         containerRuntimeEndpoint: unix:///nonexistent/containerd.sock\n",
    )
    .unwrap();
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_rkube"))
            .args([
                "kubelet",
                "--runtime=cri",
                "--kubeconfig=/nonexistent/kubeconfig",
            ])
            .arg(format!("--config={}", cfg.display()))
            .arg(format!("--root-dir={}", dir.join("root").display()))
            .args(extra)
            .output()
            .unwrap()
    };
    const V1: &str = "kubelet is configured to not run on a host using cgroup v1. cgroup v1 support is unsupported and will be removed in a future release";
    let cgroup_v1 = !Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    let by_default = run(&[]);
    let stderr = String::from_utf8_lossy(&by_default.stderr);
    assert_eq!(stderr.contains(V1), cgroup_v1, "{stderr}");
    assert_eq!(by_default.status.code(), Some(1), "{stderr}");
    let refused = run(&["--fail-cgroupv1=false"]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains(V1), "{stderr}");
    assert!(
        stderr.contains(
            "running with swap on is not supported, please disable swap or set --fail-swap-on flag to false"
        ),
        "{stderr}"
    );
    let allowed = run(&["--fail-cgroupv1=false", "--fail-swap-on=false"]);
    let stderr = String::from_utf8_lossy(&allowed.stderr);
    assert!(!stderr.contains("swap on is not supported"), "{stderr}");
    assert!(stderr.contains("connecting to the CRI runtime"), "{stderr}");
    drop(swap);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The checks of the node's cgroups (see
/// [`node_cgroups_and_graceful_shutdown_on_containerd`]).
async fn node_cgroups(cg: &CgroupRoot, node: &Node, admin: &kube::Client) {
    let capacity = node.status.as_ref().unwrap().capacity.clone().unwrap();
    let q = |k: &str| rkube_model::Quantity::parse(&capacity[k].0).unwrap();
    let mem = q("memory").value() - (256 << 20);
    assert_eq!(
        cg.read("memory", "kubepods", "memory.limit_in_bytes"),
        Some(mem.to_string()),
        "kubepods limited to capacity - kubeReserved"
    );
    let shares = (q("cpu").milli_value() - 100) * 1024 / 1000;
    assert_eq!(
        cg.read("cpu", "kubepods", "cpu.shares"),
        Some(shares.to_string())
    );
    let pid_max: i64 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let threads: i64 = std::fs::read_to_string("/proc/sys/kernel/threads-max")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(
        cg.read("pids", "kubepods", "pids.max"),
        Some((pid_max.min(threads) - 1000).to_string())
    );
    assert_eq!(
        cg.read("cpu", "kubepods/besteffort", "cpu.shares"),
        Some("2".into())
    );
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "burst", "namespace": "default"},
        "spec": {"nodeName": node.metadata.name, "automountServiceAccountToken": false,
                 "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "app", "image": "rkube.local/busybox:1",
                                 "command": ["sleep", "3600"],
                                 "resources": {"requests": {"cpu": "250m", "memory": "32Mi"},
                                               "limits": {"memory": "64Mi"}}}]},
    }))
    .unwrap();
    let uid = pods
        .create(&Default::default(), &pod)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    wait_for("burst Running", Duration::from_secs(60), || async {
        (phase(&pods.get("burst").await.ok()?) == "Running").then_some(())
    })
    .await;
    let dir = format!("kubepods/burstable/pod{uid}");
    assert_eq!(
        cg.read("memory", &dir, "memory.limit_in_bytes"),
        Some((64u64 << 20).to_string()),
        "the pod's cgroup carries its memory limit"
    );
    assert_eq!(cg.read("cpu", &dir, "cpu.shares"), Some("256".into()));
    assert_eq!(
        cg.read("cpu", "kubepods/burstable", "cpu.shares"),
        Some("256".into())
    );
    // The container's processes are in the pod's cgroup.
    let procs = std::fs::read_dir(format!("/sys/fs/cgroup/memory/{}/{dir}", cg.0))
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .filter_map(|e| std::fs::read_to_string(e.path().join("cgroup.procs")).ok())
        .filter(|p| !p.trim().is_empty())
        .count();
    assert!(procs >= 1, "the container runs under the pod's cgroup");
    // The link log agents read, to the container's log file.
    let running = pods.get("burst").await.unwrap();
    let id = pod_state(&running).0[0]
        .1
        .trim_start_matches("containerd://")
        .to_string();
    let link = Path::new("/var/log/containers").join(format!("burst_default_app-{id}.log"));
    let target = std::fs::read_link(&link).unwrap_or_else(|e| panic!("{}: {e}", link.display()));
    assert!(target.ends_with("app/0.log"), "{}", target.display());
    assert!(target.exists());
    pods.delete("burst", &Default::default()).await.unwrap();
    wait_for(
        "burst gone with its cgroup",
        Duration::from_secs(60),
        || async {
            let gone = pods.get_opt("burst").await.ok()?.is_none();
            (gone && cg.read("memory", &dir, "memory.limit_in_bytes").is_none()).then_some(())
        },
    )
    .await;
    // The container (and its link) is removed after the deletion is
    // confirmed, as upstream's garbage collector removes it.
    wait_for(
        "the link gone with the container",
        Duration::from_secs(30),
        || async { std::fs::symlink_metadata(&link).is_err().then_some(()) },
    )
    .await;
    assert_eq!(
        cg.read("cpu", "kubepods/burstable", "cpu.shares"),
        Some("2".into())
    );
}

/// A private system bus with the machine's systemd-logind (hack/logind).
struct LogindBus {
    dir: PathBuf,
    address: String,
}

impl LogindBus {
    fn up(dir: &Path) -> LogindBus {
        let out = Command::new(script("logind"))
            .args(["up", "--dir"])
            .arg(dir)
            .output()
            .expect("run hack/logind");
        assert!(
            out.status.success(),
            "hack/logind up failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let address = String::from_utf8_lossy(&out.stdout)
            .trim()
            .strip_prefix("export DBUS_SYSTEM_BUS_ADDRESS=")
            .expect("export line")
            .to_string();
        LogindBus {
            dir: dir.to_path_buf(),
            address,
        }
    }

    /// `(who, what, mode)` of logind's inhibitor locks.
    fn inhibitors(&self) -> String {
        let out = Command::new("busctl")
            .arg(format!("--address={}", self.address))
            .args([
                "call",
                "org.freedesktop.login1",
                "/org/freedesktop/login1",
                "org.freedesktop.login1.Manager",
                "ListInhibitors",
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Announces a shutdown (`true`) or its cancellation, as logind does.
    fn prepare_for_shutdown(&self, now: bool) {
        let st = Command::new("dbus-send")
            .arg(format!("--bus={}", self.address))
            .args([
                "--type=signal",
                "/org/freedesktop/login1",
                "org.freedesktop.login1.Manager.PrepareForShutdown",
                &format!("boolean:{now}"),
            ])
            .status()
            .unwrap();
        assert!(st.success());
    }
}

impl Drop for LogindBus {
    fn drop(&mut self) {
        let _ = Command::new(script("logind"))
            .args(["down", "--dir"])
            .arg(&self.dir)
            .status();
    }
}

fn node_ready(n: &Node) -> Option<(String, String)> {
    let c = n
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")?;
    Some((c.status.clone(), c.message.clone().unwrap_or_default()))
}

fn finished_at(p: &Pod) -> Option<k8s_openapi::jiff::Timestamp> {
    let st = p.status.as_ref()?.container_statuses.as_ref()?.first()?;
    Some(
        st.state
            .as_ref()?
            .terminated
            .as_ref()?
            .finished_at
            .as_ref()?
            .0,
    )
}

/// A cgroup root (`cgroupRoot`) in every v1 hierarchy, removed (empty
/// cgroups, deepest first) on drop.
struct CgroupRoot(String);

impl CgroupRoot {
    fn make(name: &str) -> CgroupRoot {
        for h in ["cpu", "memory", "pids"] {
            std::fs::create_dir_all(format!("/sys/fs/cgroup/{h}/{name}")).unwrap();
        }
        CgroupRoot(name.to_string())
    }

    fn read(&self, controller: &str, rel: &str, file: &str) -> Option<String> {
        std::fs::read_to_string(format!(
            "/sys/fs/cgroup/{controller}/{}/{rel}/{file}",
            self.0
        ))
        .ok()
        .map(|s| s.trim().to_string())
    }
}

impl Drop for CgroupRoot {
    fn drop(&mut self) {
        for h in ["cpu", "memory", "pids"] {
            let _ = Command::new("find")
                .arg(format!("/sys/fs/cgroup/{h}/{}", self.0))
                .args(["-depth", "-type", "d", "-exec", "rmdir", "{}", ";"])
                .status();
        }
    }
}

/// The node's cgroups and graceful node shutdown, on a real containerd.
///
/// Cgroups (`cgroupRoot` of the test's own, `kubeReserved`, the default
/// `enforceNodeAllocatable: [pods]`): `<root>/kubepods` is limited to
/// capacity − kubeReserved (memory, CPU shares, PIDs); a Burstable pod's
/// cgroup carries its memory limit and the Burstable QoS cgroup its CPU
/// request as shares, BestEffort 2; the pod's containers run in it; it is
/// gone once the pod is deleted.
///
/// Graceful node shutdown against the machine's systemd-logind on a
/// private bus (hack/logind) and a real containerd: without logind the
/// kubelet refuses to start; with it, the kubelet holds a `delay` lock;
/// on `PrepareForShutdown(true)` the node turns NotReady ("node is
/// shutting down"), new pods are refused (`NodeShutdown`), the ordinary
/// pod (which ignores SIGTERM) is killed at its class's 20 s and the
/// critical one only after it, at its class's 10 s, both `Failed`/`Terminated` with upstream's message and a
/// `DisruptionTarget` condition, and the lock is released; a cancellation
/// takes the lock again and the node is Ready.
#[test]
#[ignore = "needs root, containerd (hack/containerd), systemd-logind (hack/logind); run by hack/test"]
fn node_cgroups_and_graceful_shutdown_on_containerd() {
    // A second logind (hack/logind) would share the state of the one
    // systemd runs, and a PrepareForShutdown on the real system bus reaches
    // every program listening: not on such a machine.
    if Path::new("/run/systemd/system").exists() {
        eprintln!("skipped: systemd runs this machine (hack/logind refuses to run beside it)");
        return;
    }
    trace("warn,rkube_kubelet::shutdown=info");
    let cp = ControlPlane::start().expect("control plane starts");
    let ctrd = Containerd::up();
    let node = node_name();
    let work = cp.dir().join("shutdown");
    let _unmount = Unmount(work.join("root"));
    std::fs::create_dir_all(&work).unwrap();
    let cgroups = CgroupRoot::make(&format!("rk-test-{}", std::process::id()));
    let port = free_port();
    let cfg = work.join("kubelet.yaml");
    std::fs::write(
        &cfg,
        kubelet_yaml(
            "127.0.0.1",
            port,
            &ctrd.endpoint,
            &work.join("root/pod-logs"),
            &format!(
                "cgroupRoot: /{}\nkubeReserved: {{cpu: 100m, memory: 256Mi, pid: \"1000\"}}\n\
                 shutdownGracePeriod: 30s\nshutdownGracePeriodCriticalPods: 10s\n",
                cgroups.0
            ),
        ),
    )
    .unwrap();
    let args = cri_args(&cp, &node, &work.join("root"), &cfg);
    // No logind on the bus: refused, not ignored.
    let refused = Command::new(env!("CARGO_BIN_EXE_rkube"))
        .arg("kubelet")
        .args(&args)
        .env("DBUS_SYSTEM_BUS_ADDRESS", "unix:path=/nonexistent/bus")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("failed to start node shutdown manager"),
        "{stderr}"
    );
    // containerd 1.6 does not report its cgroup driver: the configuration's
    // is used, and systemd is refused.
    let systemd_cfg = work.join("systemd.yaml");
    std::fs::write(
        &systemd_cfg,
        std::fs::read_to_string(&cfg).unwrap() + "cgroupDriver: systemd\n",
    )
    .unwrap();
    let systemd_args: Vec<String> = args
        .iter()
        .map(|a| match a.starts_with("--config=") {
            true => format!("--config={}", systemd_cfg.display()),
            false => a.clone(),
        })
        .collect();
    let refused = Command::new(env!("CARGO_BIN_EXE_rkube"))
        .arg("kubelet")
        .args(&systemd_args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cgroup driver systemd: rkube kubelet implements the cgroupfs driver only"),
        "{stderr}"
    );

    let bus = LogindBus::up(&work.join("logind"));
    std::env::set_var("DBUS_SYSTEM_BUS_ADDRESS", &bus.address);
    let rt = runtime();
    rt.block_on(async {
        let admin = client(cp.kubeconfig()).await;
        let agent = Agent::start(&args);
        let nodes: Api<Node> = Api::all(admin.clone());
        wait_for("the node Ready", Duration::from_secs(60), || async {
            let n = nodes.get(&node).await.ok()?;
            (node_ready(&n)?.0 == "True").then_some(())
        })
        .await;
        node_cgroups(&cgroups, &nodes.get(&node).await.unwrap(), &admin).await;
        let locks = bus.inhibitors();
        assert!(
            locks.contains(
                "\"shutdown\" \"kubelet\" \"Kubelet needs time to handle node shutdown\" \"delay\""
            ),
            "{locks}"
        );
        // Pods that ignore SIGTERM (a minute to stop, 30 s of grace): the
        // class's period (20 s ordinary, 10 s critical) is what they get.
        let stopper = "trap 'sleep 60' TERM; while true; do sleep 1; done";
        let pod = |ns: &str, name: &str, class: Option<&str>| -> Pod {
            let mut spec = serde_json::json!({
                "nodeName": node, "automountServiceAccountToken": false,
                "terminationGracePeriodSeconds": 30,
                "containers": [{"name": "app", "image": "rkube.local/busybox:1",
                                "command": ["sh", "-c", stopper]}],
            });
            if let Some(c) = class {
                spec["priorityClassName"] = c.into();
            }
            serde_json::from_value(serde_json::json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": ns}, "spec": spec,
            }))
            .unwrap()
        };
        let default: Api<Pod> = Api::namespaced(admin.clone(), "default");
        let system: Api<Pod> = Api::namespaced(admin.clone(), "kube-system");
        let pp = kube::api::PostParams::default();
        default
            .create(&pp, &pod("default", "ordinary", None))
            .await
            .unwrap();
        system
            .create(
                &pp,
                &pod("kube-system", "critical", Some("system-node-critical")),
            )
            .await
            .unwrap();
        for (api, name) in [(&default, "ordinary"), (&system, "critical")] {
            wait_for(
                &format!("{name} Running"),
                Duration::from_secs(60),
                || async { (phase(&api.get(name).await.ok()?) == "Running").then_some(()) },
            )
            .await;
        }

        let announced = k8s_openapi::jiff::Timestamp::now();
        bus.prepare_for_shutdown(true);
        wait_for(
            "the node NotReady, shutting down",
            Duration::from_secs(30),
            || async {
                let (status, message) = node_ready(&nodes.get(&node).await.ok()?)?;
                (status == "False" && message.contains("node is shutting down")).then_some(())
            },
        )
        .await;
        // New pods are refused.
        default
            .create(&pp, &pod("default", "late", None))
            .await
            .unwrap();
        let late = wait_for("the late pod refused", Duration::from_secs(30), || async {
            let p = default.get("late").await.ok()?;
            (phase(&p) == "Failed").then_some(p)
        })
        .await;
        let st = late.status.unwrap();
        assert_eq!(st.reason.as_deref(), Some("NodeShutdown"));
        assert_eq!(
            st.message.as_deref(),
            Some("Pod was rejected: Pod was rejected as the node is shutting down.")
        );
        let mut ended = Vec::new();
        for (api, name) in [(&default, "ordinary"), (&system, "critical")] {
            let p = wait_for(
                &format!("{name} terminated by the shutdown"),
                Duration::from_secs(60),
                || async {
                    let p = api.get(name).await.ok()?;
                    (phase(&p) == "Failed" && finished_at(&p).is_some()).then_some(p)
                },
            )
            .await;
            let st = p.status.as_ref().unwrap();
            assert_eq!(st.reason.as_deref(), Some("Terminated"), "{name}");
            assert_eq!(
                st.message.as_deref(),
                Some("Pod was terminated in response to imminent node shutdown."),
                "{name}"
            );
            let target = st
                .conditions
                .iter()
                .flatten()
                .find(|c| c.type_ == "DisruptionTarget")
                .unwrap_or_else(|| panic!("{name}: no DisruptionTarget"));
            assert_eq!(
                (target.status.as_str(), target.reason.as_deref()),
                ("True", Some("TerminationByKubelet"))
            );
            ended.push(finished_at(&p).unwrap());
        }
        // The ordinary pod was killed at its class's 20 s (not its own
        // 30 s); the critical one only after it, at its class's 10 s.
        let took = ended[0].duration_since(announced).as_secs();
        assert!(
            (18..=25).contains(&took),
            "ordinary pod stopped after {took} s"
        );
        let after = ended[1].duration_since(ended[0]).as_secs();
        assert!(
            (8..=14).contains(&after),
            "critical pod stopped {after} s after the ordinary one"
        );
        eprintln!("ordinary pod stopped {took} s after the announcement; ended at {ended:?}");
        wait_for("the lock released", Duration::from_secs(30), || async {
            (!bus.inhibitors().contains("\"kubelet\"")).then_some(())
        })
        .await;

        // Cancelled: the lock again, the node Ready again.
        bus.prepare_for_shutdown(false);
        wait_for("the lock taken again", Duration::from_secs(30), || async {
            bus.inhibitors().contains("\"kubelet\"").then_some(())
        })
        .await;
        wait_for("the node Ready again", Duration::from_secs(30), || async {
            let n = nodes.get(&node).await.ok()?;
            (node_ready(&n)?.0 == "True").then_some(())
        })
        .await;
        agent.stop().await;
    });
    std::env::remove_var("DBUS_SYSTEM_BUS_ADDRESS");
}

/// An ext4 filesystem of `mib` MiB in a file, loop-mounted; unmounted and
/// removed on drop.
struct LoopFs {
    dir: PathBuf,
    mnt: PathBuf,
}

impl LoopFs {
    fn mount(dir: &Path, mib: u64) -> LoopFs {
        let _ = Command::new("umount").arg(dir.join("mnt")).status();
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir.join("mnt")).unwrap();
        let img = dir.join("fs.img");
        let run = |cmd: &mut Command| {
            let out = cmd.output().unwrap();
            assert!(
                out.status.success(),
                "{cmd:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        run(Command::new("truncate").arg(format!("-s{mib}M")).arg(&img));
        run(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&img));
        run(Command::new("mount")
            .args(["-o", "loop"])
            .arg(&img)
            .arg(dir.join("mnt")));
        LoopFs {
            dir: dir.to_path_buf(),
            mnt: dir.join("mnt"),
        }
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mnt).status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Builds `n` images `rkube.local/filler-<i>:1`, each one layer holding
/// `mib` MiB of random bytes, as one OCI archive at `out`.
fn filler_images(out: &Path, n: u32, mib: u32) {
    let script = r#"
set -euo pipefail
out="$1" n="$2" mib="$3"
L="$(mktemp -d)"; mkdir -p "$L/blobs/sha256"
blob() { local d; d="$(sha256sum "$1" | cut -d' ' -f1)"; mv "$1" "$L/blobs/sha256/$d"; echo "$d"; }
manifests='[]'
for i in $(seq 1 "$n"); do
  r="$(mktemp -d)"; head -c "${mib}M" /dev/urandom > "$r/filler"
  tar --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$r" -cf "$L/layer.tar" filler; rm -rf "$r"
  ls_="$(stat -c %s "$L/layer.tar")"; ld="$(blob "$L/layer.tar")"
  jq -cn --arg d "sha256:$ld" '{architecture: "amd64", os: "linux", config: {Cmd: ["/filler"]},
    rootfs: {type: "layers", diff_ids: [$d]}}' > "$L/c.json"
  cs="$(stat -c %s "$L/c.json")"; cd_="$(blob "$L/c.json")"
  jq -cn --arg c "sha256:$cd_" --argjson cs "$cs" --arg l "sha256:$ld" --argjson ls "$ls_" '{schemaVersion: 2,
    mediaType: "application/vnd.oci.image.manifest.v1+json",
    config: {mediaType: "application/vnd.oci.image.config.v1+json", digest: $c, size: $cs},
    layers: [{mediaType: "application/vnd.oci.image.layer.v1.tar", digest: $l, size: $ls}]}' > "$L/m.json"
  ms="$(stat -c %s "$L/m.json")"; md="$(blob "$L/m.json")"
  manifests="$(jq -c --arg d "sha256:$md" --argjson s "$ms" --arg r "rkube.local/filler-$i:1"     '. + [{mediaType: "application/vnd.oci.image.manifest.v1+json", digest: $d, size: $s,
      platform: {architecture: "amd64", os: "linux"},
      annotations: {"io.containerd.image.name": $r, "org.opencontainers.image.ref.name": "1"}}]' <<<"$manifests")"
done
echo '{"imageLayoutVersion":"1.0.0"}' > "$L/oci-layout"
jq -n --argjson m "$manifests" '{schemaVersion: 2, manifests: $m}' > "$L/index.json"
tar -C "$L" -cf "$out" oci-layout index.json blobs
rm -rf "$L"
"#;
    let out_ = Command::new("bash")
        .args(["-c", script, "filler"])
        .arg(out)
        .args([n.to_string(), mib.to_string()])
        .output()
        .unwrap();
    assert!(
        out_.status.success(),
        "{}",
        String::from_utf8_lossy(&out_.stderr)
    );
}

/// Image garbage collection on a small image filesystem (upstream's
/// `image_gc_manager.go` against a real containerd whose root is a 512 MiB
/// loop-mounted ext4): four 40 MiB images fill it past the high threshold;
/// the collector frees down to the low threshold, least recently used
/// first — the never-used images, then the one used first — and keeps the
/// one used last (the sandbox image stays only if the runtime pins it). The
/// thresholds are set from the filesystem's measured usage so that exactly
/// three of the four images must go.
#[test]
#[ignore = "needs root, containerd (hack/containerd), loop devices; run by hack/test"]
fn image_gc_on_a_small_image_filesystem() {
    let base = std::env::temp_dir().join(format!("rk-imgfs-{}", std::process::id()));
    let fs = LoopFs::mount(&base.join("fs"), 512);
    let ctrd = Containerd::up_in(&fs.mnt.join("c"));
    let archive = base.join("fillers.tar");
    filler_images(&archive, 4, 40);
    let sock = ctrd.endpoint.trim_start_matches("unix://").to_string();
    let out = Command::new("ctr")
        .args([
            "--address",
            &sock,
            "--namespace",
            "k8s.io",
            "images",
            "import",
        ])
        .args(["--snapshotter", "overlayfs"])
        .arg(&archive)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_file(&archive);
    let rt = runtime();
    rt.block_on(async {
        use rkube_kubelet::gc;
        let cri = CriClient::connect(&ctrd.endpoint).await.unwrap();
        let images = cri.list_images(None).await.unwrap();
        let filler = |i: u32| {
            images
                .iter()
                .find(|im| im.repo_tags.iter().any(|t| t.ends_with(&format!("filler-{i}:1"))))
                .map(|im| (im.id.clone(), im.size))
                .unwrap_or_else(|| panic!("filler-{i} imported"))
        };
        let size = filler(1).1;
        assert!(size >= 40 << 20, "{size}");
        let root = base.join("root");
        let logs = root.join("pod-logs/default_gc_uid-imgfs");
        std::fs::create_dir_all(&logs).unwrap();
        let sb_config = gc_sandbox_config("uid-imgfs", 0, &logs);
        let sandbox = cri.run_pod_sandbox(sb_config.clone(), "").await.unwrap();
        let stats = std::sync::Arc::new(rkube_kubelet::stats::StatsProvider::new(
            cri.clone(),
            rkube_kubelet::pod::Dirs::under(&root),
            "imgfs-node",
            "",
        ));
        let image_fs = |s: &rkube_kubelet::stats::summary::Summary| {
            let fs = s.node.runtime.as_ref().unwrap().image_fs.as_ref().unwrap();
            (fs.capacity_bytes.unwrap(), fs.available_bytes.unwrap())
        };
        let (capacity, available) = image_fs(&stats.summary_for_eviction().await.unwrap());
        let used_percent = 100 - available * 100 / capacity;
        // Low threshold: 2.5 images' worth to free (the GC counts the
        // images' own sizes), so exactly three must go.
        let target_available = available + size * 5 / 2;
        let low = 100 - (target_available * 100 / capacity);
        let high = used_percent;
        assert!(
            low >= 1 && high > low + 10,
            "the fillers use too little of the filesystem: {used_percent} % used, low {low}"
        );
        let collector = gc::GarbageCollector::new(
            cri.clone(),
            stats.clone(),
            "imgfs-node".into(),
            None,
            gc::containers::DEFAULT_POLICY,
            gc::images::Policy {
                high_threshold_percent: high as i32,
                low_threshold_percent: low as i32,
                min_age: Duration::from_secs(6),
                max_age: Duration::ZERO,
            },
            std::sync::Arc::new(rkube_kubelet::pods::worker::PodStates::default()),
        );
        // filler-3 used now, filler-4 a little later; 1 and 2 never.
        let use_image = |i: u32| {
            let config = v1::ContainerConfig {
                metadata: Some(v1::ContainerMetadata {
                    name: format!("use-{i}"),
                    attempt: 0,
                }),
                image: Some(v1::ImageSpec {
                    image: format!("rkube.local/filler-{i}:1"),
                    ..Default::default()
                }),
                command: vec!["/filler".into()],
                labels: [("io.kubernetes.pod.uid".to_string(), "uid-imgfs".to_string())].into(),
                log_path: format!("use-{i}.log"),
                ..Default::default()
            };
            cri.create_container(&sandbox, config, sb_config.clone())
        };
        let c3 = use_image(3).await.unwrap();
        // Too young to go: nothing is removed yet, and the collector says
        // it could not free enough.
        let err = collector.collect_images().await.unwrap_err();
        assert!(err.contains("freed 0 bytes"), "{err}");
        cri.remove_container(&c3).await.unwrap();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let c4 = use_image(4).await.unwrap();
        let err = collector.collect_images().await.unwrap_err();
        assert!(err.contains("freed 0 bytes"), "{err}");
        cri.remove_container(&c4).await.unwrap();
        tokio::time::sleep(Duration::from_secs(6)).await;
        collector.collect_images().await.unwrap();
        let now = image_ids(&cri).await;
        for i in 1..=3 {
            assert!(!now.contains(&filler(i).0), "filler-{i} goes (least recently used)");
        }
        assert!(now.contains(&filler(4).0), "filler-4, used last, stays");
        // The sandbox image is the runtime's to pin (containerd 1.7+ does,
        // 1.6 does not), as upstream leaves it.
        let pause = images
            .iter()
            .find(|im| im.repo_tags.iter().any(|t| t.ends_with("pause:1")))
            .unwrap();
        assert_eq!(now.contains(&pause.id), pause.pinned, "the sandbox image goes unless pinned");
        // A fresh read (the provider reuses one for a second).
        tokio::time::sleep(rkube_kubelet::stats::REUSE + Duration::from_millis(200)).await;
        let (capacity, available) = image_fs(&stats.summary_for_eviction().await.unwrap());
        let used = 100 - available * 100 / capacity;
        eprintln!("image filesystem {used_percent} % used before, {used} % after (high {high}, low {low})");
        assert!(used <= low, "down to the low threshold: {used} % > {low} %");
        let _ = cri.stop_pod_sandbox(&sandbox).await;
        let _ = cri.remove_pod_sandbox(&sandbox).await;
    });
    drop(ctrd);
    drop(fs);
    let _ = std::fs::remove_dir_all(&base);
}

/// The host's own IPv4 address (upstream's kubelet refuses a loopback
/// node IP).
fn host_ip() -> String {
    let out = Command::new("ip")
        .args(["-4", "route", "get", "1.1.1.1"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .skip_while(|w| *w != "src")
        .nth(1)
        .expect("a source address")
        .to_string()
}

/// A kubelet running as a child process; killed on drop.
/// What a pod runs, as the API reports it: (container name, container id,
/// restart count) of every container and init container, and Ready.
type PodRun = (Vec<(String, String, i32)>, bool);

/// Every pod's [`PodRun`], by name.
type NodeRun = Vec<(String, PodRun)>;

fn pod_state(p: &Pod) -> PodRun {
    let st = p.status.as_ref().unwrap();
    let mut v: Vec<(String, String, i32)> = st
        .init_container_statuses
        .iter()
        .flatten()
        .chain(st.container_statuses.iter().flatten())
        .map(|c| {
            (
                c.name.clone(),
                c.container_id.clone().unwrap_or_default(),
                c.restart_count,
            )
        })
        .collect();
    v.sort();
    (v, condition(p, "Ready").as_deref() == Some("True"))
}

/// Upstream's kubelet v1.37 and rkube's replace each other on a running
/// node (same root directory, configuration and containerd): 50 pods, each
/// with an init container and two containers (one of them restarted once),
/// and a pod being deleted, run under upstream's kubelet; rkube's takes
/// over — no container restarted, every container id and restart count
/// unchanged, every pod still Ready, no extra sandbox, `kubectl logs` and
/// `exec` work, the deleted pod finishes terminating and is not started
/// again — and upstream's takes the node back, likewise. A pod whose image
/// is changed through the API restarts that container only, under either
/// kubelet. A pod resized in place under each kubelet (cpu in place under
/// upstream's, memory with a restart under rkube's) is not resized or
/// restarted again by the next: both read the allocation checkpoints the
/// other wrote.
#[test]
#[ignore = "needs root, containerd (hack/containerd), upstream's kubelet (hack/cluster node-bin); run by hack/test"]
fn handover_between_upstream_and_rkube_kubelets() {
    trace("warn");
    let upstream_bin = built("cluster", &["node-bin", "kubelet"]);
    let cp = ControlPlane::start().expect("control plane starts");
    let ctrd = Containerd::up();
    let node = node_name();
    let work = cp.dir().join("handover");
    std::fs::create_dir_all(work.join("pod-logs")).unwrap();
    let port = free_port();
    let cfg = work.join("kubelet.yaml");
    std::fs::write(
        &cfg,
        kubelet_yaml(
            "0.0.0.0",
            port,
            &ctrd.endpoint,
            &work.join("pod-logs"),
            &format!(
                "readOnlyPort: 0\nimageGCLowThresholdPercent: 99\n\
                 cgroupDriver: cgroupfs\nfailSwapOn: false\n\
                 authentication: {{x509: {{clientCAFile: {}}}, webhook: {{enabled: true}}, anonymous: {{enabled: false}}}}\n\
                 authorization: {{mode: Webhook}}\n",
                cp.dir().join("pki/ca.crt").display()
            ),
        ),
    )
    .unwrap();
    let node_kc = cp.node_kubeconfig(&node).unwrap();
    let root = work.join("root");
    // Upstream's kubelet bind-mounts its root directory on itself and
    // leaves the pods' volumes mounted when it stops: all of it unmounted
    // once the kubelets are gone (they are dropped before this).
    let _unmount = Unmount(root.clone());
    let common = [
        format!("--kubeconfig={}", node_kc.display()),
        format!("--hostname-override={node}"),
        format!("--node-ip={}", host_ip()),
        format!("--root-dir={}", root.display()),
        format!("--config={}", cfg.display()),
    ];
    let upstream_args: Vec<String> = common
        .iter()
        .cloned()
        .chain([
            format!("--cert-dir={}", root.join("pki").display()),
            "--v=2".into(),
        ])
        .collect();
    let rkube_args: Vec<String> = ["kubelet".to_string(), "--runtime=cri".into()]
        .into_iter()
        .chain(common.iter().cloned())
        .collect();
    let rt = runtime();
    rt.block_on(async {
        let admin = client(cp.kubeconfig()).await;
        let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
        let nodes: Api<Node> = Api::all(admin.clone());
        let cri = CriClient::connect(&ctrd.endpoint).await.unwrap();
        let ready_node = || async {
            wait_for("the node Ready", Duration::from_secs(90), || async {
                let n = nodes.get(&node).await.ok()?;
                (node_ready(&n)?.0 == "True").then_some(())
            })
            .await
        };
        let upstream = Process::start(&upstream_bin, &upstream_args, &work.join("upstream-1.log"));
        ready_node().await;
        const N: usize = 50;
        // h-2's app can be resized: cpu in place, memory with a restart.
        let resizable = serde_json::json!({
            "resources": {"requests": {"cpu": "50m", "memory": "32Mi"},
                          "limits": {"cpu": "200m", "memory": "64Mi"}},
            "resizePolicy": [{"resourceName": "cpu", "restartPolicy": "NotRequired"},
                             {"resourceName": "memory", "restartPolicy": "RestartContainer"}]});
        for i in 0..N {
            let mut pod: Pod = serde_json::from_value(serde_json::json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("h-{i}"), "labels": {"app": "handover"}},
                "spec": {"nodeName": node, "terminationGracePeriodSeconds": 2,
                         "volumes": [{"name": "d", "emptyDir": {}}],
                         "initContainers": [{"name": "init", "image": "rkube.local/busybox:1",
                                             "command": ["sh", "-c", "echo init > /d/init"],
                                             "volumeMounts": [{"name": "d", "mountPath": "/d"}]}],
                         "containers": [
                            {"name": "app", "image": "rkube.local/busybox:1",
                             "command": ["sh", "-c", "echo hello-$HOSTNAME; exec sleep 3600"]},
                            {"name": "once", "image": "rkube.local/busybox:1",
                             "command": ["sh", "-c", "test -f /d/once || { touch /d/once; exit 1; }; exec sleep 3600"],
                             "volumeMounts": [{"name": "d", "mountPath": "/d"}]}]},
            }))
            .unwrap();
            if i == 2 {
                let app = &mut pod.spec.as_mut().unwrap().containers[0];
                app.resources = serde_json::from_value(resizable["resources"].clone()).unwrap();
                app.resize_policy =
                    serde_json::from_value(resizable["resizePolicy"].clone()).unwrap();
            }
            pods.create(&Default::default(), &pod).await.unwrap();
        }
        // A pod that takes 20 s to stop, deleted just before the switch.
        let term: Pod = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "term", "labels": {"app": "term"}},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 60,
                     "containers": [{"name": "slow", "image": "rkube.local/busybox:1",
                                     "command": ["sh", "-c", "trap 'sleep 20; exit 0' TERM; sleep 3600 & wait; sleep 20"]}]},
        }))
        .unwrap();
        let term_uid = pods.create(&Default::default(), &term).await.unwrap().uid().unwrap();
        // A pod holding most of the node's cpu, so that a resize of h-2
        // fits the node but not what is left of it (deferred).
        let filler: Pod = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "filler", "labels": {"app": "filler"}},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "pause", "image": "rkube.local/pause:1",
                                     "resources": {"requests": {"cpu": "1500m"}}}]},
        }))
        .unwrap();
        pods.create(&Default::default(), &filler).await.unwrap();
        let of_term = |labels: &HashMap<String, String>| {
            labels.get("io.kubernetes.pod.uid") == Some(&term_uid)
        };
        let settled = || async {
            wait_for("every pod Ready, each 'once' restarted once", Duration::from_secs(120), || async {
                let l = pods.list(&ListParams::default().labels("app=handover")).await.ok()?;
                let ok = l.items.len() == N
                    && l.items.iter().all(|p| {
                        let (cs, ready) = pod_state(p);
                        ready && cs.iter().any(|(n, _, r)| n == "once" && *r == 1)
                    });
                ok.then(|| {
                    let mut m: NodeRun =
                        l.items.iter().map(|p| (p.name_any(), pod_state(p))).collect();
                    m.sort();
                    m
                })
            })
            .await
        };
        let sandboxes = || async {
            let mut v: Vec<String> = cri
                .list_pod_sandboxes(None)
                .await
                .unwrap()
                .into_iter()
                .filter(|s| !of_term(&s.labels))
                .map(|s| s.id)
                .collect();
            v.sort();
            v
        };
        // What runs, seen by the runtime: every container's id and attempt
        // (the deleted pod's apart).
        let containers = || async {
            let mut v: Vec<(String, u32)> = cri
                .list_containers(None)
                .await
                .unwrap()
                .into_iter()
                .filter(|c| !of_term(&c.labels))
                .map(|c| (c.id, c.metadata.map(|m| m.attempt).unwrap_or(0)))
                .collect();
            v.sort();
            v
        };
        // The node's Lease renewed after `since`: the new kubelet is up.
        let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
            Api::namespaced(admin.clone(), "kube-node-lease");
        let fresh_heartbeat = |since: k8s_openapi::jiff::Timestamp| {
            let (leases, node) = (leases.clone(), node.clone());
            async move {
                wait_for("a Lease renewal by the new kubelet", Duration::from_secs(90), || async {
                    let l = leases.get(&node).await.ok()?;
                    (l.spec?.renew_time?.0 > since).then_some(())
                })
                .await
            }
        };
        settled().await;
        wait_for("the slow pod running", Duration::from_secs(60), || async {
            (phase(&pods.get("term").await.ok()?) == "Running").then_some(())
        })
        .await;
        // Under upstream's: h-2's cpu resized in place, then a resize the
        // node fits but not beside the filler pod, which it defers: the
        // allocation stays.
        resize(&pods, "h-2", serde_json::json!({"requests": {"cpu": "100m"}}), 0).await;
        wait_for("the filler pod Running", Duration::from_secs(60), || async {
            (phase(&pods.get("filler").await.ok()?) == "Running").then_some(())
        })
        .await;
        let huge = serde_json::json!({"requests": {"cpu": "1"}, "limits": {"cpu": "1"}});
        patch_resize(&pods, "h-2", &huge).await;
        deferred(&pods, "h-2", "100m").await;
        let before = settled().await;
        let sandboxes_before = sandboxes().await;
        let containers_before = containers().await;
        assert_eq!(sandboxes_before.len(), N + 1, "one sandbox a pod (and the filler's)");

        // Each handover: once the new kubelet reports, and has synced every
        // pod (a few periods), nothing has changed, as the API and as the
        // runtime see it.
        let check = |phase: &'static str, api: NodeRun, sbs: Vec<String>, ctrs: Vec<(String, u32)>| {
            let (pods, cp) = (pods.clone(), &cp);
            let (sandboxes, containers) = (&sandboxes, &containers);
            async move {
                tokio::time::sleep(Duration::from_secs(25)).await;
                assert_eq!(containers().await, ctrs, "{phase}: no container made or removed");
                assert_eq!(sandboxes().await, sbs, "{phase}: no sandbox made or removed");
                let l = pods.list(&ListParams::default().labels("app=handover")).await.unwrap();
                let mut now: NodeRun =
                    l.items.iter().map(|p| (p.name_any(), pod_state(p))).collect();
                now.sort();
                assert_eq!(now, api, "{phase}: container ids, restart counts and readiness unchanged");
                let logs = kubectl(cp, &["logs", "h-3", "-c", "app"]);
                assert!(logs.contains("hello-h-3"), "{phase}: kubectl logs: {logs}");
                let out = kubectl(cp, &["exec", "h-3", "-c", "app", "--", "cat", "/proc/1/cmdline"]);
                assert!(out.contains("sleep"), "{phase}: kubectl exec: {out}");
            }
        };
        // The slow pod deleted: upstream's kubelet starts stopping it.
        // The deleted pod's containers, as the runtime holds them.
        let slow = || async {
            let all = cri.list_containers(None).await.unwrap();
            all.into_iter()
                .filter(|c| of_term(&c.labels))
                .map(|c| c.id)
                .collect::<Vec<String>>()
        };
        let slow_before = slow().await;
        pods.delete("term", &Default::default()).await.unwrap();
        tokio::time::sleep(Duration::from_secs(3)).await;
        drop(upstream);
        let switched = k8s_openapi::jiff::Timestamp::now();
        let rkube = Process::start(env!("CARGO_BIN_EXE_rkube"), &rkube_args, &work.join("rkube.log"));
        fresh_heartbeat(switched).await;
        check("upstream → rkube", before, sandboxes_before.clone(), containers_before).await;
        // rkube's read upstream's allocation: the deferred resize is still
        // deferred, at the resources upstream allocated; taken back, the
        // pod has nothing pending.
        deferred(&pods, "h-2", "100m").await;
        resize(
            &pods,
            "h-2",
            serde_json::json!({"requests": {"cpu": "100m"}, "limits": {"cpu": "200m"}}),
            0,
        )
        .await;
        // The slow pod finished terminating, and was never started again.
        wait_for("the deleted pod gone", Duration::from_secs(90), || async {
            pods.get_opt("term").await.ok()?.is_none().then_some(())
        })
        .await;
        let slow_after = slow().await;
        assert!(
            slow_after.iter().all(|id| slow_before.contains(id)),
            "no new container for the deleted pod: {slow_before:?} → {slow_after:?}"
        );
        // A container rkube made (h-0's new app), for upstream to adopt.
        image_change(&pods, "h-0", &cp).await;
        // Under rkube's: h-2's memory resized, which restarts its app.
        resize(&pods, "h-2", serde_json::json!({"limits": {"memory": "96Mi"}}), 1).await;
        let mid = settled().await;
        let containers_mid = containers().await;
        drop(rkube);
        // rkube's checkpoints, in upstream's format, hold the resize.
        let h2 = pods.get("h-2").await.unwrap().uid().unwrap();
        for file in ["allocated_pods_state", "actuated_pods_state"] {
            let text = std::fs::read_to_string(root.join(file)).unwrap();
            let outer: serde_json::Value = serde_json::from_str(&text).unwrap();
            let data: serde_json::Value =
                serde_json::from_str(outer["data"].as_str().unwrap()).unwrap();
            let app = &data["entries"][&h2]["ContainerResources"]["app"];
            assert_eq!(app["limits"]["memory"], "96Mi", "{file}: {text}");
            assert_eq!(app["requests"]["cpu"], "100m", "{file}: {text}");
        }
        let switched = k8s_openapi::jiff::Timestamp::now();
        let _upstream =
            Process::start(&upstream_bin, &upstream_args, &work.join("upstream-2.log"));
        fresh_heartbeat(switched).await;
        check("rkube → upstream", mid, sandboxes_before, containers_mid).await;
        let log = std::fs::read_to_string(work.join("upstream-2.log")).unwrap();
        for never in ["Missing actuated resource record", "definition changed", "could not restore state"] {
            assert!(!log.contains(never), "upstream's kubelet logged {never:?}");
        }
        image_change(&pods, "h-1", &cp).await;
    });
}

/// Resizes container `app` of `name` in place to `resources` (merged into
/// its own) through the `resize` subresource: the pod reports them, Ready,
/// with `restarts` more restarts of `app` and its other containers
/// untouched.
async fn resize(pods: &Api<Pod>, name: &str, resources: serde_json::Value, restarts: i32) {
    let before = pod_state(&pods.get(name).await.unwrap()).0;
    patch_resize(pods, name, &resources).await;
    let wanted = |have: Option<
        &std::collections::BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        >,
    >,
                  want: &serde_json::Value| {
        want.as_object()
            .into_iter()
            .flatten()
            .all(|(k, v)| have.and_then(|m| m.get(k)).map(|q| q.0.as_str()) == v.as_str())
    };
    let after = wait_for(
        &format!("{name}'s app resized"),
        Duration::from_secs(90),
        || async {
            let p = pods.get(name).await.ok()?;
            let st = p.status.as_ref()?;
            let app = st
                .container_statuses
                .iter()
                .flatten()
                .find(|c| c.name == "app")?;
            let r = app.resources.as_ref()?;
            let done = wanted(r.requests.as_ref(), &resources["requests"])
                && wanted(r.limits.as_ref(), &resources["limits"])
                && !st
                    .conditions
                    .iter()
                    .flatten()
                    .any(|c| c.type_.starts_with("PodResize"));
            let (cs, ready) = pod_state(&p);
            (done && ready).then_some(cs)
        },
    )
    .await;
    for (b, a) in before.iter().zip(&after) {
        if b.0 == "app" {
            assert_eq!(
                a.2,
                b.2 + restarts,
                "{name}: app restarted {restarts} times"
            );
        } else {
            assert_eq!(a, b, "{name}: {} untouched", b.0);
        }
    }
}

/// Asks for container `app` of `name` to have `resources` (merged into its
/// own) through the `resize` subresource.
async fn patch_resize(pods: &Api<Pod>, name: &str, resources: &serde_json::Value) {
    let patch =
        serde_json::json!({"spec": {"containers": [{"name": "app", "resources": resources}]}});
    pods.patch_subresource(
        "resize",
        name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Strategic(&patch),
    )
    .await
    .unwrap();
}

/// Waits until `name`'s resize is `Deferred` (PodResizePending), its app
/// still allocated `cpu` (the resize not taken as allocated) and Ready.
async fn deferred(pods: &Api<Pod>, name: &str, cpu: &str) {
    wait_for(
        &format!("{name}'s resize deferred"),
        Duration::from_secs(60),
        || async {
            let p = pods.get(name).await.ok()?;
            let st = p.status.as_ref()?;
            let pending =
                st.conditions.iter().flatten().any(|c| {
                    c.type_ == "PodResizePending" && c.reason.as_deref() == Some("Deferred")
                });
            let app = st
                .container_statuses
                .iter()
                .flatten()
                .find(|c| c.name == "app")?;
            let allocated = app.allocated_resources.as_ref()?.get("cpu")?.0.clone();
            (pending && allocated == cpu && pod_state(&p).1).then_some(())
        },
    )
    .await;
}

/// Changes container `app` of `name` to another image through the API:
/// only that container restarts (a new id, one more restart), the pod's
/// other containers keep theirs.
async fn image_change(pods: &Api<Pod>, name: &str, _cp: &ControlPlane) {
    let before = pod_state(&pods.get(name).await.unwrap()).0;
    let patch = serde_json::json!({"spec": {"containers": [{"name": "app", "image": "rkube.local/pause:1"}]}});
    pods.patch(
        name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Strategic(patch),
    )
    .await
    .unwrap();
    let after = wait_for(
        &format!("{name}'s app restarted with the new image"),
        Duration::from_secs(90),
        || async {
            let p = pods.get(name).await.ok()?;
            let (cs, ready) = pod_state(&p);
            let app = cs.iter().find(|(n, _, _)| n == "app")?;
            let old = before.iter().find(|(n, _, _)| n == "app")?;
            (ready && app.1 != old.1 && !app.1.is_empty()).then_some(cs)
        },
    )
    .await;
    for (b, a) in before.iter().zip(&after) {
        if b.0 == "app" {
            assert_eq!(a.2, b.2 + 1, "app restarted once");
        } else {
            assert_eq!(a, b, "{name}: {} untouched", b.0);
        }
    }
}

/// The pod the log agent reads: a chatty container (numbered lines on
/// stdout, padded so that its log rotates several times, and fewer on
/// stderr, then one line longer than containerd's 16 KiB line limit, which
/// it writes as partial lines), and a container that fails once and
/// prints again when restarted.
const LOG_AGENT_POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: agent-demo, namespace: logs}
spec:
  terminationGracePeriodSeconds: 1
  volumes: [{name: d, emptyDir: {}}]
  containers:
  - name: chatty
    image: rkube.local/busybox:1
    imagePullPolicy: Never
    command: ["sh", "-c", "pad=$(printf '%0200d' 0); n=0; b=0; while [ $b -lt 60 ]; do i=0; while [ $i -lt 300 ]; do echo \"out $n $pad\"; n=$((n+1)); i=$((i+1)); done; echo \"err $b\" >&2; b=$((b+1)); sleep 0.25; done; head -c 20000 /dev/zero | tr '\\0' x; echo; echo done; exec sleep 3600"]
  - name: twice
    image: rkube.local/busybox:1
    imagePullPolicy: Never
    volumeMounts: [{name: d, mountPath: /d}]
    command: ["sh", "-c", "test -f /d/ran || { touch /d/ran; echo first run; exit 1; }; echo second run; exec sleep 3600"]
"#;

/// A real log agent, the OpenTelemetry Collector's filelog receiver with
/// its container parser (built by hack/otelcol-build), reads an rkube
/// node's pod logs where every agent looks for them (`podLogsDir`): every
/// line of every container arrives exactly once across several rotations,
/// partial lines joined, with the pod, namespace, UID, container and
/// restart count it parses from the path, and the stream; `kubectl logs`
/// (`--tail`, `--previous`) reads the same files.
#[test]
#[ignore = "needs root, containerd (hack/containerd), Go (hack/otelcol-build); run by hack/test --full"]
fn log_agent_collects_every_line_across_rotations() {
    trace("warn,rkube_kubelet=info");
    let otelcol = built("otelcol-build", &[]);
    let cp = ControlPlane::start().expect("control plane starts");
    let ctrd = Containerd::up();
    let node = node_name();
    let work = cp.dir().join("log-agent");
    // The pod's volumes unmounted once the kubelet is gone.
    let _unmount = Unmount(work.join("root"));
    let logs = work.join("pod-logs");
    std::fs::create_dir_all(&logs).unwrap();
    let cfg = work.join("kubelet.yaml");
    std::fs::write(
        &cfg,
        kubelet_yaml(
            "127.0.0.1",
            free_port(),
            &ctrd.endpoint,
            &logs,
            &format!(
                "containerLogMaxSize: 1Mi\ncontainerLogMaxFiles: 3\ncontainerLogMonitorInterval: 3s\n\
                 authentication: {{x509: {{clientCAFile: {}}}, webhook: {{enabled: true}}, anonymous: {{enabled: false}}}}\n\
                 authorization: {{mode: Webhook}}\n",
                cp.dir().join("pki/ca.crt").display()
            ),
        ),
    )
    .unwrap();
    // The collector, following podLogsDir from the start.
    let out = work.join("otel.json");
    let otel_cfg = work.join("otelcol.yaml");
    std::fs::write(
        &otel_cfg,
        format!(
            "receivers:\n  file_log:\n    include: [\"{}/*/*/*.log\"]\n    start_at: beginning\n    \
             include_file_path: true\n    poll_interval: 200ms\n    preserve_trailing_whitespaces: true\n    \
             operators: [{{type: container, format: containerd}}]\n\
             exporters:\n  file:\n    path: {}\n    format: json\n    flush_interval: 100ms\n\
             service:\n  telemetry: {{metrics: {{level: none}}}}\n  \
             pipelines: {{logs: {{receivers: [file_log], exporters: [file]}}}}\n",
            logs.display(),
            out.display()
        ),
    )
    .unwrap();
    let _collector = Process::start(
        &otelcol,
        &[format!("--config={}", otel_cfg.display())],
        &work.join("otelcol.log"),
    );
    let args = cri_args(&cp, &node, &work.join("root"), &cfg);
    let rt = runtime();
    rt.block_on(async {
        let admin = client(cp.kubeconfig()).await;
        let agent = Agent::start(&args);
        kubectl(&cp, &["create", "namespace", "logs"]);
        let yaml = LOG_AGENT_POD.replace("spec:\n", &format!("spec:\n  nodeName: {node}\n"));
        apply(&cp, &work, "agent-demo", &yaml);
        let pods: Api<Pod> = Api::namespaced(admin.clone(), "logs");
        let uid = wait_for("agent-demo Running", Duration::from_secs(90), || async {
            let p = pods.get("agent-demo").await.ok()?;
            (phase(&p) == "Running").then(|| p.uid())?
        })
        .await;
        let pod_dir = logs.join(format!("logs_agent-demo_{uid}/chatty"));
        // Until the chatty container is done; its rotated files counted.
        let rotated = std::cell::RefCell::new(std::collections::BTreeSet::new());
        wait_for("the chatty container done", Duration::from_secs(180), || async {
            for e in std::fs::read_dir(&pod_dir).into_iter().flatten().flatten() {
                let n = e.file_name().to_string_lossy().into_owned();
                if n.starts_with("0.log.") {
                    rotated.borrow_mut().insert(n.trim_end_matches(".gz").to_string());
                }
            }
            // The last line, in the live file.
            let live = std::fs::read_to_string(pod_dir.join("0.log")).ok()?;
            live.ends_with(" stdout F done\n").then_some(())
        })
        .await;
        let rotated = rotated.into_inner();
        assert!(rotated.len() >= 2, "the log rotated several times: {rotated:?}");
        // What the collector exported: (container, restart, stream, body).
        let records = || {
            let text = std::fs::read_to_string(&out).unwrap_or_default();
            let mut v: Vec<(String, String, String, String)> = vec![];
            for line in text.lines() {
                let Ok(doc) = serde_json::from_str::<serde_json::Value>(line) else {
                    continue;
                };
                for rl in doc["resourceLogs"].as_array().into_iter().flatten() {
                    let attr = |list: &serde_json::Value, k: &str| {
                        list.as_array()
                            .into_iter()
                            .flatten()
                            .find(|a| a["key"] == k)
                            .and_then(|a| a["value"]["stringValue"].as_str())
                            .unwrap_or("")
                            .to_string()
                    };
                    let res = &rl["resource"]["attributes"];
                    assert_eq!(attr(res, "k8s.namespace.name"), "logs");
                    assert_eq!(attr(res, "k8s.pod.name"), "agent-demo");
                    assert_eq!(attr(res, "k8s.pod.uid"), uid);
                    for sl in rl["scopeLogs"].as_array().into_iter().flatten() {
                        for r in sl["logRecords"].as_array().into_iter().flatten() {
                            v.push((
                                attr(res, "k8s.container.name"),
                                attr(res, "k8s.container.restart_count"),
                                attr(&r["attributes"], "log.iostream"),
                                r["body"]["stringValue"].as_str().unwrap_or("").to_string(),
                            ));
                        }
                    }
                }
            }
            v
        };
        let pad = "0".repeat(200);
        let mut expected: Vec<(String, String, String, String)> = vec![];
        let rec = |c: &str, r: &str, s: &str, b: String| (c.into(), r.into(), s.into(), b);
        for n in 0..18_000 {
            expected.push(rec("chatty", "0", "stdout", format!("out {n} {pad}")));
        }
        for b in 0..60 {
            expected.push(rec("chatty", "0", "stderr", format!("err {b}")));
        }
        expected.push(rec("chatty", "0", "stdout", "x".repeat(20_000)));
        expected.push(rec("chatty", "0", "stdout", "done".into()));
        expected.push(rec("twice", "0", "stdout", "first run".into()));
        expected.push(rec("twice", "1", "stdout", "second run".into()));
        expected.sort();
        let got = wait_for("every line collected", Duration::from_secs(60), || async {
            let mut got = records();
            got.sort();
            (got.len() >= expected.len()).then_some(got)
        })
        .await;
        // kubectl reads the same files: the last records after the
        // rotations (the long line's two parts, joined, then `done`), and
        // the restarted container's previous run.
        let tail = kubectl(&cp, &["-n", "logs", "logs", "agent-demo", "-c", "chatty", "--tail", "3"]);
        let want = format!("{}\ndone\n", "x".repeat(20_000));
        assert!(tail == want, "kubectl logs --tail 3: {:?}", tail.get(..200));
        let previous = kubectl(&cp, &["-n", "logs", "logs", "agent-demo", "-c", "twice", "--previous"]);
        assert_eq!(previous, "first run\n");
        let current = kubectl(&cp, &["-n", "logs", "logs", "agent-demo", "-c", "twice"]);
        assert_eq!(current, "second run\n");
        if got != expected {
            let missing: Vec<_> = expected.iter().filter(|e| !got.contains(e)).take(5).collect();
            let extra: Vec<_> = got.iter().filter(|g| !expected.contains(g)).take(5).collect();
            panic!(
                "the collector's lines differ ({} collected, {} written): missing {missing:?}, unexpected {extra:?}",
                got.len(),
                expected.len()
            );
        }
        agent.stop().await;
    });
}
