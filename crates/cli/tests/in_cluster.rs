//! rkube runs rkube: on a genuine control plane (rkube-testcp) with one
//! `rkube kubelet --runtime cri` node on a private containerd
//! (hack/containerd), the image `hack/image` builds is imported and
//! `deploy/second-scheduler/` and `deploy/sim-nodes/` are applied as they
//! are, with the real `kubectl`:
//!
//! - upstream kube-scheduler (the default scheduler) places both
//!   rkube-scheduler replicas and the sim-nodes pod on the rkube kubelet
//!   node; they run from the image as uid 65532 with the manifests'
//!   security contexts, their ConfigMap volume and the ServiceAccount token
//!   the kubelet requested through the TokenRequest API (the projected
//!   `kube-api-access-*` volume the ServiceAccount admission plugin adds),
//!   and turn Ready through their HTTPS (`/readyz`) and HTTP probes;
//! - the sim-nodes pod registers its 10 nodes; one rkube-scheduler replica
//!   wins the Lease rkube-system/rkube as its ServiceAccount (the pod holds
//!   no other credential than the token) and binds a `schedulerName: rkube`
//!   Deployment onto the sim nodes, where the pods run;
//! - deleting the leader pod hands the Lease to another replica (the
//!   standby or the ReplicaSet's replacement, whichever acquires it first),
//!   which schedules the Deployment's new replicas;
//! - an ordinary Deployment (the default ServiceAccount, a ConfigMap volume,
//!   `envFrom` a Secret, limits, `runAsNonRoot`) runs, and `kubectl exec`
//!   into it sees each of them; a ConfigMap update reaches the container.
//!
//! Pods reach the API server as in-cluster clients do, at the `kubernetes`
//! Service's ClusterIP (`KUBERNETES_SERVICE_HOST`, set by the kubelet).
//! With no kube-proxy here, the test stands in for it with one DNAT rule
//! (ClusterIP:443 → the API server on 127.0.0.1, `route_localnet`), removed
//! at the end.
//!
//! Needs root, hack/build-k8s and hack/containerd; run by hack/test.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rkube_testcp::support::free_port;
use rkube_testcp::ControlPlane;
use serde_json::Value;

mod common;
use common::containerd::Containerd;
use common::live::{apply, kubectl, try_kubectl};
use common::{is_root, run, Unmount};

/// A name the API server can dial for `kubectl exec` (it prefers the node's
/// Hostname address, and only loopback is reachable here).
const NODE: &str = "localhost";
const SERVICE_IP: &str = "10.96.0.1";

fn get_json(cp: &ControlPlane, args: &[&str]) -> Option<Value> {
    let mut a = vec!["get"];
    a.extend_from_slice(args);
    a.extend_from_slice(&["-o", "json"]);
    serde_json::from_str(&try_kubectl(cp, &a)?).ok()
}

fn wait<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// kube-proxy's part for the one Service in-cluster clients need: the
/// `kubernetes` ClusterIP forwarded to the API server on loopback.
struct ServiceNat {
    rule: Vec<String>,
    localnet_before: String,
}

const LOCALNET: &str = "/proc/sys/net/ipv4/conf/all/route_localnet";

impl ServiceNat {
    fn install(subnet: &str, apiserver_port: u16) -> ServiceNat {
        let rule: Vec<String> = [
            "PREROUTING",
            "-s",
            subnet,
            "-d",
            SERVICE_IP,
            "-p",
            "tcp",
            "--dport",
            "443",
            "-j",
            "DNAT",
            "--to-destination",
            &format!("127.0.0.1:{apiserver_port}"),
        ]
        .map(String::from)
        .to_vec();
        run(Command::new("iptables")
            .args(["-t", "nat", "-I"])
            .args(&rule));
        let localnet_before = std::fs::read_to_string(LOCALNET).unwrap_or_else(|_| "0".into());
        std::fs::write(LOCALNET, "1").expect("set route_localnet");
        ServiceNat {
            rule,
            localnet_before,
        }
    }
}

impl Drop for ServiceNat {
    fn drop(&mut self) {
        let _ = Command::new("iptables")
            .args(["-t", "nat", "-D"])
            .args(&self.rule)
            .output();
        let _ = std::fs::write(LOCALNET, self.localnet_before.trim());
    }
}

/// A child process killed on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn apiserver_port(cp: &ControlPlane) -> u16 {
    let kc = std::fs::read_to_string(cp.kubeconfig()).unwrap();
    let server = kc
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .expect("server in the kubeconfig");
    server
        .rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches('/').parse().ok())
        .expect("a port in the server URL")
}

/// The image, built from the test's own binary (stripped: the debug info
/// is 400+ MB) and imported into `ctrd`.
fn import_image(work: &Path, ctrd: &Containerd) {
    let binary = work.join("rkube");
    let stripped = Command::new("strip")
        .arg("-o")
        .arg(&binary)
        .arg(env!("CARGO_BIN_EXE_rkube"))
        .status()
        .is_ok_and(|s| s.success());
    if !stripped {
        std::fs::copy(env!("CARGO_BIN_EXE_rkube"), &binary).unwrap();
    }
    run(Command::new(common::root().join("hack/image"))
        .arg("--binary")
        .arg(&binary)
        .arg("--out")
        .arg(work.join("rkube.tar"))
        .arg("--import")
        .arg("--containerd-dir")
        .arg(&ctrd.0));
}

fn kubelet(cp: &ControlPlane, work: &Path, ctrd: &Containerd) -> Proc {
    let cfg = work.join("kubelet.yaml");
    // evictionHard in absolute amounts: test machines' disks are often
    // fuller than the default percentages allow.
    // syncFrequency 20s: a ConfigMap update reaches the volume within 30 s.
    // Image GC off (imageGCHighThresholdPercent 100): the sandbox image is
    // imported, not pullable, and containerd 1.6 does not pin it.
    std::fs::write(
        &cfg,
        format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             address: 127.0.0.1\nport: {}\nhealthzPort: 0\n\
             evictionHard: {{memory.available: 100Mi, nodefs.available: 1Gi, imagefs.available: 1Gi}}\n\
             imageGCHighThresholdPercent: 100\nfailCgroupV1: false\nsyncFrequency: 20s\n\
             containerRuntimeEndpoint: {}\nmakeIPTablesUtilChains: false\npodLogsDir: {}\n\
             authentication: {{x509: {{clientCAFile: {}}}, webhook: {{enabled: true}}, anonymous: {{enabled: false}}}}\n\
             authorization: {{mode: Webhook}}\n",
            free_port(),
            ctrd.endpoint(),
            work.join("kubelet/pod-logs").display(),
            cp.dir().join("pki/ca.crt").display()
        ),
    )
    .unwrap();
    let log = std::fs::File::create(cp.dir().join("logs/rkube-kubelet-cri.log")).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_rkube"))
        .arg("kubelet")
        .arg("--runtime=cri")
        .arg(format!(
            "--kubeconfig={}",
            cp.node_kubeconfig(NODE).unwrap().display()
        ))
        .arg(format!("--hostname-override={NODE}"))
        .arg("--node-ip=127.0.0.1")
        .arg(format!("--root-dir={}", work.join("kubelet").display()))
        .arg(format!("--config={}", cfg.display()))
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start rkube kubelet");
    Proc(child)
}

fn pods(cp: &ControlPlane, ns: &str, selector: &str) -> Vec<Value> {
    get_json(cp, &["pods", "-n", ns, "-l", selector])
        .and_then(|v| v["items"].as_array().cloned())
        .unwrap_or_default()
}

fn is_running_ready(p: &Value) -> bool {
    p["status"]["phase"] == "Running"
        && p["metadata"]["deletionTimestamp"].is_null()
        && p["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

fn name(p: &Value) -> String {
    p["metadata"]["name"].as_str().unwrap_or("").to_string()
}

fn lease_holder(cp: &ControlPlane) -> Option<String> {
    get_json(cp, &["lease", "-n", "rkube-system", "rkube"])?["spec"]["holderIdentity"]
        .as_str()
        .map(str::to_string)
}

/// The scheduler pod whose name the Lease's holder identity starts with.
fn leader_pod(cp: &ControlPlane, schedulers: &[String]) -> Option<String> {
    let holder = lease_holder(cp)?;
    schedulers
        .iter()
        .find(|p| holder.starts_with(p.as_str()))
        .cloned()
}

fn diagnostics(cp: &ControlPlane) -> String {
    let pods = try_kubectl(cp, &["get", "pods", "-A", "-o", "wide"]).unwrap_or_default();
    let events = try_kubectl(cp, &["get", "events", "-A"]).unwrap_or_default();
    let kubelet =
        std::fs::read_to_string(cp.dir().join("logs/rkube-kubelet-cri.log")).unwrap_or_default();
    let tail: Vec<&str> = kubelet.lines().rev().take(60).collect();
    format!(
        "pods:\n{pods}\nevents:\n{events}\nkubelet log (last lines):\n{}",
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    )
}

/// The runtime spec containerd made for the pod's container enforces the
/// manifest (uid 65532, no new privileges, read-only root, no
/// capabilities, RuntimeDefault seccomp, the 1Gi memory limit, read-only
/// volumes), and the token the kubelet wrote is a TokenRequest token of the
/// pod's ServiceAccount bound to this pod.
fn check_container(ctrd: &Containerd, work: &Path, p: &Value) {
    let pod = name(p);
    let id = p["status"]["containerStatuses"][0]["containerID"]
        .as_str()
        .and_then(|s| s.strip_prefix("containerd://"))
        .unwrap_or_else(|| panic!("{pod}: no containerd id"))
        .to_string();
    let out = run(Command::new("ctr")
        .arg("--address")
        .arg(ctrd.socket())
        .args(["-n", "k8s.io", "containers", "info", &id]));
    let info: Value = serde_json::from_slice(&out.stdout).unwrap();
    let spec = &info["Spec"];
    assert_eq!(spec["process"]["user"]["uid"], 65532, "{pod}");
    assert_eq!(spec["process"]["user"]["gid"], 65532, "{pod}");
    assert_eq!(spec["process"]["noNewPrivileges"], true, "{pod}");
    assert_eq!(spec["root"]["readonly"], true, "{pod}");
    let caps = &spec["process"]["capabilities"];
    for set in ["bounding", "effective", "permitted"] {
        assert!(
            caps[set].as_array().is_none_or(|c| c.is_empty()),
            "{pod}: capabilities {set} {caps}"
        );
    }
    assert!(
        !spec["linux"]["seccomp"].is_null(),
        "{pod}: RuntimeDefault seccomp"
    );
    assert_eq!(
        spec["linux"]["resources"]["memory"]["limit"],
        1 << 30,
        "{pod}: limits.memory"
    );
    let mounts = spec["mounts"].as_array().unwrap();
    for dest in [
        "/etc/rkube",
        "/var/run/secrets/kubernetes.io/serviceaccount",
    ] {
        let m = mounts
            .iter()
            .find(|m| m["destination"] == dest)
            .unwrap_or_else(|| panic!("{pod}: no mount at {dest}: {mounts:?}"));
        assert!(
            m["options"]
                .as_array()
                .is_some_and(|o| o.iter().any(|o| o == "ro")),
            "{pod}: {dest} read-only: {m}"
        );
    }
    let env: Vec<&str> = spec["process"]["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e.as_str())
        .collect();
    assert!(
        env.contains(&format!("KUBERNETES_SERVICE_HOST={SERVICE_IP}").as_str())
            && env.contains(&"KUBERNETES_SERVICE_PORT=443"),
        "{pod}: service env {env:?}"
    );
    // The token file: under the kubelet's root, in the atomic layout.
    let uid = p["metadata"]["uid"].as_str().unwrap();
    let projected = work
        .join("kubelet/pods")
        .join(uid)
        .join("volumes/kubernetes.io~projected");
    let vol = std::fs::read_dir(&projected)
        .unwrap_or_else(|e| panic!("{}: {e}", projected.display()))
        .filter_map(|e| e.ok())
        .find(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("kube-api-access-")
        })
        .expect("the token volume on disk")
        .path();
    assert!(vol.join("..data").is_symlink(), "atomic writer layout");
    let token = std::fs::read_to_string(vol.join("token")).unwrap();
    let claims = token.split('.').nth(1).expect("a JWT");
    let claims: Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(claims).expect("base64url")).unwrap();
    assert_eq!(
        claims["sub"], "system:serviceaccount:rkube-system:rkube-scheduler",
        "{claims}"
    );
    assert_eq!(
        claims["kubernetes.io"]["pod"]["name"],
        pod.as_str(),
        "{claims}"
    );
    assert_eq!(claims["kubernetes.io"]["pod"]["uid"], uid, "{claims}");
    assert!(
        std::fs::read_to_string(vol.join("ca.crt"))
            .unwrap()
            .contains("BEGIN CERTIFICATE"),
        "kube-root-ca.crt"
    );
    assert_eq!(
        std::fs::read_to_string(vol.join("namespace")).unwrap(),
        "rkube-system"
    );
}

const WORKLOAD: &str = "apiVersion: apps/v1
kind: Deployment
metadata: {name: whoami, namespace: default}
spec:
  replicas: 3
  selector: {matchLabels: {app: whoami}}
  template:
    metadata: {labels: {app: whoami}}
    spec:
      schedulerName: rkube
      nodeSelector: {rkube.dev/sim-node: \"true\"}
      tolerations: [{key: rkube.dev/sim-node, operator: Exists, effect: NoSchedule}]
      containers: [{name: c, image: sim, resources: {requests: {cpu: 100m}}}]
";

/// The `whoami` pods bound and Running on sim nodes, when there are `n`.
fn workload_running(cp: &ControlPlane, n: usize) -> Option<Vec<Value>> {
    let ps = pods(cp, "default", "app=whoami");
    let ok: Vec<Value> = ps
        .into_iter()
        .filter(|p| {
            p["spec"]["nodeName"]
                .as_str()
                .is_some_and(|n| n.starts_with("rkube-sim-"))
                && p["status"]["phase"] == "Running"
        })
        .collect();
    (ok.len() == n).then_some(ok)
}

#[test]
#[ignore = "needs root, hack/build-k8s and hack/containerd; run by hack/test"]
fn the_second_scheduler_runs_as_pods_on_rkube_kubelet() {
    if !is_root() {
        eprintln!("not root: rkube kubelet --runtime cri needs root; skipped");
        return;
    }
    let cp = ControlPlane::start().expect("control plane starts");
    let ctrd = Containerd::up("rkic");
    let work = cp.dir().join("in-cluster");
    std::fs::create_dir_all(&work).unwrap();
    import_image(&work, &ctrd);
    let _nat = ServiceNat::install(&ctrd.subnet(), apiserver_port(&cp));
    // dropped after the kubelet is killed
    let _mounts = Unmount(work.clone());
    let _kubelet = kubelet(&cp, &work, &ctrd);
    cp.start_upstream_scheduler(None, &[])
        .expect("kube-scheduler starts");
    wait("node localhost Ready", Duration::from_secs(60), || {
        let n = get_json(&cp, &["node", NODE])?;
        n["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
            .then_some(())
    });

    for dir in ["second-scheduler", "sim-nodes"] {
        kubectl(
            &cp,
            &[
                "apply",
                "-f",
                common::root().join("deploy").join(dir).to_str().unwrap(),
            ],
        );
    }

    // Both scheduler replicas and the sim-nodes pod run on rkube's kubelet.
    let schedulers: Vec<String> = {
        let found = (|| {
            let deadline = Instant::now() + Duration::from_secs(180);
            loop {
                let s = pods(
                    &cp,
                    "rkube-system",
                    "app.kubernetes.io/name=rkube-scheduler",
                );
                let sim = pods(
                    &cp,
                    "rkube-system",
                    "app.kubernetes.io/name=rkube-sim-nodes",
                );
                let ready: Vec<&Value> = s.iter().filter(|p| is_running_ready(p)).collect();
                if ready.len() == 2 && sim.iter().any(is_running_ready) {
                    return Some(s);
                }
                if Instant::now() > deadline {
                    return None;
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        })();
        let s = found.unwrap_or_else(|| {
            panic!(
                "the rkube pods did not all turn Running and Ready\n{}",
                diagnostics(&cp)
            )
        });
        for p in &s {
            assert_eq!(p["spec"]["nodeName"], NODE, "{}", name(p));
            assert_eq!(p["status"]["containerStatuses"][0]["restartCount"], 0);
            let volumes = p["spec"]["volumes"].as_array().unwrap();
            assert!(
                volumes.iter().any(|v| v["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("kube-api-access-"))
                    && v["projected"]["sources"]
                        .as_array()
                        .is_some_and(|s| s.iter().any(|s| !s["serviceAccountToken"].is_null()))),
                "the ServiceAccount admission plugin added the token volume: {volumes:?}"
            );
            check_container(&ctrd, &work, p);
        }
        s.iter().map(name).collect()
    };

    // The sim nodes registered from inside the pod.
    wait("10 sim nodes Ready", Duration::from_secs(90), || {
        let nodes = get_json(&cp, &["nodes", "-l", "rkube.dev/sim-node=true"])?;
        let ready = nodes["items"]
            .as_array()?
            .iter()
            .filter(|n| {
                n["status"]["conditions"].as_array().is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                })
            })
            .count();
        (ready == 10).then_some(())
    });

    // One replica leads, as its ServiceAccount, and schedules.
    let leader = wait(
        "a scheduler pod holding the Lease",
        Duration::from_secs(60),
        || leader_pod(&cp, &schedulers),
    );
    apply(&cp, "whoami", WORKLOAD);
    let placed = wait(
        "3 whoami pods Running on sim nodes",
        Duration::from_secs(90),
        || workload_running(&cp, 3),
    );
    let events = kubectl(
        &cp,
        &[
            "get",
            "events",
            "-n",
            "default",
            "--field-selector",
            "reason=Scheduled",
            "-o",
            "json",
        ],
    );
    let events: Value = serde_json::from_str(&events).unwrap();
    for p in &placed {
        let n = name(p);
        assert!(
            events["items"].as_array().unwrap().iter().any(|e| {
                e["involvedObject"]["name"] == n.as_str()
                    && (e["reportingComponent"] == "rkube" || e["source"]["component"] == "rkube")
            }),
            "no Scheduled event from the rkube profile for {n}: {events}"
        );
    }
    // Deleting the leader pod hands over to the other replica.
    kubectl(
        &cp,
        &[
            "delete",
            "pod",
            "-n",
            "rkube-system",
            &leader,
            "--wait=false",
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let new_leader = loop {
        // Another replica: the one that was standing by, or the ReplicaSet's
        // replacement, whichever acquires the released Lease first.
        let others: Vec<String> = pods(
            &cp,
            "rkube-system",
            "app.kubernetes.io/name=rkube-scheduler",
        )
        .iter()
        .map(name)
        .filter(|p| *p != leader)
        .collect();
        if let Some(l) = leader_pod(&cp, &others) {
            break l;
        }
        assert!(
            Instant::now() < deadline,
            "the other replica did not take the Lease (holder {:?})\n{}",
            lease_holder(&cp),
            diagnostics(&cp)
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_ne!(new_leader, leader);
    kubectl(
        &cp,
        &[
            "scale",
            "deployment",
            "whoami",
            "-n",
            "default",
            "--replicas=5",
        ],
    );
    wait(
        "5 whoami pods Running on sim nodes",
        Duration::from_secs(90),
        || workload_running(&cp, 5),
    );
    // The ReplicaSet replaced the deleted replica, on rkube's kubelet again.
    wait(
        "two rkube-scheduler pods Ready again",
        Duration::from_secs(120),
        || {
            let s = pods(
                &cp,
                "rkube-system",
                "app.kubernetes.io/name=rkube-scheduler",
            );
            (s.iter().filter(|p| is_running_ready(p)).count() == 2).then_some(())
        },
    );

    ordinary_deployment(&cp);
}

const APP: &str = "apiVersion: v1
kind: ConfigMap
metadata: {name: app-config, namespace: default}
data: {greeting: hello}
---
apiVersion: v1
kind: Secret
metadata: {name: app-secret, namespace: default}
stringData: {API_KEY: s3cr3t}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: app, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: app}}
  template:
    metadata: {labels: {app: app}}
    spec:
      securityContext: {runAsNonRoot: true, runAsUser: 1000, runAsGroup: 1000}
      containers:
      - name: app
        image: rkube.local/busybox:1
        imagePullPolicy: Never
        command: [sh, -c, 'echo started; sleep 3600']
        envFrom: [{secretRef: {name: app-secret}}]
        env: [{name: GREETING_FILE, value: /cfg/greeting}, {name: WHERE, value: 'key=$(API_KEY)'}]
        resources: {requests: {cpu: 50m, memory: 32Mi}, limits: {cpu: 200m, memory: 64Mi}}
        volumeMounts: [{name: cfg, mountPath: /cfg}]
      volumes: [{name: cfg, configMap: {name: app-config}}]
";

/// The issue's ordinary Deployment: a ServiceAccount (the default one), a
/// ConfigMap volume, `envFrom` a Secret, limits and `runAsNonRoot`; `kubectl
/// exec` into it sees all of them, and a ConfigMap update reaches the
/// running container.
fn ordinary_deployment(cp: &ControlPlane) {
    apply(cp, "app", APP);
    let pod = wait("the app pod Running", Duration::from_secs(90), || {
        pods(cp, "default", "app=app")
            .into_iter()
            .find(is_running_ready)
            .map(|p| name(&p))
    });
    let exec = |script: &str| -> String {
        kubectl(
            cp,
            &["exec", "-n", "default", &pod, "--", "sh", "-c", script],
        )
    };
    let out = exec(
        "id -u; id -g; echo $API_KEY; echo $WHERE; cat /cfg/greeting; echo; \
         cat /var/run/secrets/kubernetes.io/serviceaccount/namespace; echo; \
         test -s /var/run/secrets/kubernetes.io/serviceaccount/token && echo token; \
         cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max",
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            "1000",
            "1000",
            "s3cr3t",
            "key=s3cr3t",
            "hello",
            "default",
            "token",
            "67108864"
        ],
        "{out}"
    );
    // A write to the ConfigMap volume is refused (read-only).
    let out = cp
        .kubectl(&[
            "exec",
            "-n",
            "default",
            &pod,
            "--",
            "sh",
            "-c",
            "echo x > /cfg/new",
        ])
        .unwrap();
    assert!(!out.status.success(), "the ConfigMap volume is read-only");
    // The update reaches the running container (the kubelet rewrites the
    // volume at its next sync).
    kubectl(
        cp,
        &[
            "patch",
            "configmap",
            "app-config",
            "-n",
            "default",
            "-p",
            r#"{"data":{"greeting":"bonjour"}}"#,
        ],
    );
    wait(
        "the ConfigMap update in the volume",
        Duration::from_secs(60),
        || (exec("cat /cfg/greeting") == "bonjour").then_some(()),
    );
}
