//! The `deploy/` manifests and the image `hack/image` builds, against a
//! genuine control plane (rkube-testcp) with the real `kubectl`:
//!
//! - `manifests_pass_server_side_dry_run`: every object of
//!   `deploy/second-scheduler/` and `deploy/sim-nodes/` passes
//!   `kubectl apply --dry-run=server` (strict field validation, admission),
//!   and so does the kubeadm static pod in kube-system; a misspelled field is
//!   refused the same way (the check can fail); the files agree with each
//!   other (the config path is the ConfigMap's mount, the Lease the Role
//!   grants is the one the config names, the PDB selects the Deployment's
//!   pods, the image is `rkube:<workspace version>`) and the static pod's
//!   command is the README's.
//! - `rbac_of_the_manifests_suffices`: with the manifests' RBAC and
//!   ServiceAccounts applied for real and a token minted for each
//!   ServiceAccount, `rkube kubelet` runs locally with the sim-nodes
//!   Deployment's flags and files and its nodes register, go Ready, renew
//!   their Leases and run and delete a pod; `rkube scheduler` runs with the
//!   second-scheduler Deployment's flags and ConfigMap, wins the
//!   rkube-system/rkube Lease, binds a `schedulerName: rkube` pod onto a sim
//!   node and serves /metrics to a token bound to the metrics-reader role
//!   only. Neither logs a `forbidden`. A ServiceAccount without the bindings
//!   registers no node (so the token really is what is tested).
//! - `image_archive_verifies_imports_and_runs`: `hack/image` packages the
//!   debug binary (CI builds no release binary): the archive is the same
//!   twice, its digests check out (`hack/image --verify`, and here
//!   independently), a tampered copy fails `--verify`, the layer holds
//!   what `ldd` lists; as root the layer's root filesystem runs
//!   `/rkube --version` as uid 65532 under chroot, and the image is imported
//!   into a private containerd (`hack/containerd`, installed with apt if
//!   missing) and run there by `ctr`. Not root: those two parts are skipped
//!   (the test says so on stderr).
//!
//! Needs hack/build-k8s; run by hack/test (`--test deploy_live -- --ignored`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use rkube_testcp::support::free_port;
use rkube_testcp::ControlPlane;
use serde::Deserialize;
use serde_json::{json, Value};

mod common;
use common::containerd::Containerd;
use common::live::*;
use common::{is_root, run};

const VERSION: &str = env!("CARGO_PKG_VERSION");
const NS: &str = "rkube-system";

// ------------------------------------------------------------------ manifests

fn deploy(rel: &str) -> PathBuf {
    common::root().join("deploy").join(rel)
}

/// The YAML documents of a file, as JSON values (empty documents dropped).
fn docs(file: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap_or_else(|e| panic!("{}: {e}", file.display())))
        .filter(|v| !v.is_null())
        .collect()
}

/// The `*.yaml` files of a directory, sorted (kubectl's order).
fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no manifests in {}", dir.display());
    files
}

fn dir_docs(dir: &Path) -> Vec<Value> {
    yaml_files(dir).iter().flat_map(|f| docs(f)).collect()
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in the manifests"))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|s| {
            s.as_str()
                .unwrap_or_else(|| panic!("not a string: {s}"))
                .to_string()
        })
        .collect()
}

/// The value of `--name=V` in a container's args.
fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let prefix = format!("--{name}=");
    args.iter().find_map(|a| a.strip_prefix(&prefix))
}

/// The args with `--name=V` replaced (or added).
fn with_flag(args: &[String], name: &str, value: &str) -> Vec<String> {
    let prefix = format!("--{name}=");
    let mut out: Vec<String> = args
        .iter()
        .filter(|a| !a.starts_with(&prefix))
        .cloned()
        .collect();
    out.push(format!("{prefix}{value}"));
    out
}

/// The ConfigMap volumes a Deployment mounts: mount path → ConfigMap name.
fn configmap_mounts(deployment: &Value) -> BTreeMap<String, String> {
    let spec = &deployment["spec"]["template"]["spec"];
    let mut out = BTreeMap::new();
    for m in spec["containers"][0]["volumeMounts"].as_array().unwrap() {
        let vol = spec["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == m["name"])
            .unwrap_or_else(|| panic!("no volume for mount {m}"));
        if let Some(cm) = vol["configMap"]["name"].as_str() {
            out.insert(m["mountPath"].as_str().unwrap().to_string(), cm.to_string());
        }
    }
    out
}

/// The ConfigMap file the Deployment's container reads at `path`.
fn mounted_file(docs: &[Value], deployment: &Value, path: &str) -> String {
    let (dir, key) = path.rsplit_once('/').unwrap();
    let mounts = configmap_mounts(deployment);
    let cm = mounts
        .get(dir)
        .unwrap_or_else(|| panic!("{path}: {dir} is not a ConfigMap mount ({mounts:?})"));
    find(docs, "ConfigMap", cm)["data"][key]
        .as_str()
        .unwrap_or_else(|| panic!("{path}: ConfigMap {cm} has no key {key}"))
        .to_string()
}

fn container(deployment: &Value) -> &Value {
    &deployment["spec"]["template"]["spec"]["containers"][0]
}

// ------------------------------------------------------------------ cluster helpers

/// `kubectl` output (stdout, stderr, success) without asserting.
fn kubectl_out(cp: &ControlPlane, args: &[&str]) -> (String, String, bool) {
    let out = cp.kubectl(args).expect("kubectl runs");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.success(),
    )
}

fn get_json(cp: &ControlPlane, args: &[&str]) -> Option<Value> {
    let mut a = vec!["get"];
    a.extend_from_slice(args);
    a.extend_from_slice(&["-o", "json"]);
    try_kubectl(cp, &a).and_then(|s| serde_json::from_str(&s).ok())
}

/// Polls `f` every 300 ms until it returns `Some`.
fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// A kubeconfig for a ServiceAccount's token (`kubectl create token`), with
/// the admin kubeconfig's server and CA.
fn token_kubeconfig(cp: &ControlPlane, sa: &str) -> (PathBuf, String) {
    let token = kubectl(cp, &["create", "token", sa, "-n", NS, "--duration=1h"])
        .trim()
        .to_string();
    assert!(token.split('.').count() == 3, "not a JWT: {token}");
    let admin: Value =
        serde_json::from_str(&kubectl(cp, &["config", "view", "--raw", "-o", "json"])).unwrap();
    let cluster = &admin["clusters"][0]["cluster"];
    let kc = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "cp", "cluster": {
            "server": cluster["server"],
            "certificate-authority-data": cluster["certificate-authority-data"]}}],
        "users": [{"name": sa, "user": {"token": token}}],
        "contexts": [{"name": sa, "context": {"cluster": "cp", "user": sa}}],
        "current-context": sa,
    });
    let path = cp.dir().join(format!("{sa}.token.kubeconfig"));
    std::fs::write(&path, serde_json::to_string_pretty(&kc).unwrap()).unwrap();
    // The apiserver knows the token as the ServiceAccount.
    let who = cp
        .kubectl_as(
            &path,
            &[
                "auth",
                "whoami",
                "-o",
                "jsonpath={.status.userInfo.username}",
            ],
        )
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&who.stdout),
        format!("system:serviceaccount:{NS}:{sa}"),
        "{}",
        String::from_utf8_lossy(&who.stderr)
    );
    (path, token)
}

/// An `rkube` process, killed on drop.
struct Daemon {
    child: Child,
    log: PathBuf,
}

impl Daemon {
    fn start(cp: &ControlPlane, name: &str, args: &[String]) -> Daemon {
        let log = cp.dir().join(format!("logs/deploy-{name}.log"));
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_rkube"))
            .args(args)
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("start rkube");
        Daemon { child, log }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn assert_alive(&mut self) {
        assert!(
            matches!(self.child.try_wait(), Ok(None)),
            "rkube exited:\n{}",
            self.log_text()
        );
    }

    /// No request was refused by RBAC.
    fn assert_never_forbidden(&self) {
        let log = self.log_text();
        assert!(
            !log.to_lowercase().contains("forbidden"),
            "{}: a request was forbidden:\n{log}",
            self.log.display()
        );
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `curl -k` GET: (HTTP status, body).
fn https_get(url: &str, token: Option<&str>) -> Option<(u16, String)> {
    let mut cmd = Command::new("curl");
    cmd.args(["-sk", "--max-time", "5", "-w", "\n%{http_code}"]);
    if let Some(t) = token {
        cmd.arg("-H").arg(format!("Authorization: Bearer {t}"));
    }
    let out = cmd.arg(url).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n')?;
    Some((code.trim().parse().ok()?, body.to_string()))
}

fn pod(name: &str, extra_spec: Value) -> String {
    let mut spec = json!({
        "automountServiceAccountToken": false,
        "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}],
    });
    spec.as_object_mut()
        .unwrap()
        .extend(extra_spec.as_object().unwrap().clone());
    serde_json::to_string(&json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }))
    .unwrap()
}

fn sim_toleration() -> Value {
    json!([{"key": "rkube.dev/sim-node", "operator": "Exists", "effect": "NoSchedule"}])
}

fn pod_phase(cp: &ControlPlane, name: &str) -> Option<(String, String)> {
    let p = get_json(cp, &["pod", "-n", "default", name])?;
    Some((
        p["spec"]["nodeName"].as_str().unwrap_or("").to_string(),
        p["status"]["phase"].as_str().unwrap_or("").to_string(),
    ))
}

// ------------------------------------------------------------------ tests

#[test]
#[ignore = "needs hack/build-k8s; run by hack/test"]
fn manifests_pass_server_side_dry_run() {
    let sched_dir = deploy("second-scheduler");
    let sim_dir = deploy("sim-nodes");
    let static_pod = deploy("kube-scheduler-static-pod.yaml");

    // Every file says at its top which permissions it grants and why.
    for f in yaml_files(&sched_dir)
        .into_iter()
        .chain(yaml_files(&sim_dir))
        .chain([static_pod.clone()])
    {
        let text = std::fs::read_to_string(&f).unwrap();
        assert!(
            text.starts_with("# ") && text.to_lowercase().contains("permission"),
            "{} does not start with a comment about its permissions",
            f.display()
        );
    }

    // --- the files agree with each other
    let sched = dir_docs(&sched_dir);
    let dep = find(&sched, "Deployment", "rkube-scheduler");
    let image = format!("rkube:{VERSION}");
    assert_eq!(dep["spec"]["replicas"], 2);
    let c = container(dep);
    assert_eq!(c["image"], image.as_str());
    let args = strings(&c["args"]);
    assert_eq!(args[0], "scheduler");
    assert_eq!(flag(&args, "leader-elect"), Some("true"));
    assert_eq!(flag(&args, "bind-address"), Some("0.0.0.0"));
    for (probe, path) in [
        ("startupProbe", "/livez"),
        ("livenessProbe", "/livez"),
        ("readinessProbe", "/readyz"),
    ] {
        let get = &c[probe]["httpGet"];
        assert_eq!(get["path"], path, "{probe}");
        assert_eq!(get["scheme"], "HTTPS", "{probe}");
        assert_eq!(get["port"], 10259, "{probe}");
    }
    let sc = &c["securityContext"];
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["runAsNonRoot"], true);
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
    assert!(c["resources"]["requests"]["cpu"].is_string());
    let anti = &dep["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"];
    assert!(!anti.is_null(), "replicas are not spread");
    let config_text = mounted_file(&sched, dep, flag(&args, "config").expect("--config"));
    let config: Value = serde_yaml_ng::from_str(&config_text).unwrap();
    assert_eq!(config["profiles"][0]["schedulerName"], "rkube");
    let le = &config["leaderElection"];
    let lease = le["resourceName"].as_str().unwrap();
    assert_eq!(lease, "rkube");
    assert_eq!(le["resourceNamespace"], NS);
    // The Role in that namespace grants get+update on that Lease name (and
    // system:kube-scheduler only names its own Lease).
    let role = sched
        .iter()
        .find(|d| d["kind"] == "Role" && d["metadata"]["namespace"] == NS)
        .expect("a Role for the Lease");
    let grants = |verb: &str| {
        role["rules"].as_array().unwrap().iter().any(|r| {
            strings(&r["resources"]).contains(&"leases".to_string())
                && strings(&r["verbs"]).contains(&verb.to_string())
                && (r["resourceNames"].is_null()
                    || strings(&r["resourceNames"]).contains(&lease.to_string()))
        })
    };
    for verb in ["get", "update", "create"] {
        assert!(
            grants(verb),
            "the Role does not grant {verb} on Lease {lease}"
        );
    }
    let config_file =
        std::env::temp_dir().join(format!("rkube-deploy-config-{}.yaml", std::process::id()));
    std::fs::write(&config_file, &config_text).unwrap();
    let check = common::rkube(&["config", "check", config_file.to_str().unwrap()]);
    let _ = std::fs::remove_file(&config_file);
    assert!(
        check.status.success(),
        "rkube config check: {}",
        String::from_utf8_lossy(&check.stderr)
    );
    let pdb = find(&sched, "PodDisruptionBudget", "rkube-scheduler");
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    let labels = dep["spec"]["template"]["metadata"]["labels"]
        .as_object()
        .unwrap();
    for (k, v) in pdb["spec"]["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(
            labels.get(k),
            Some(v),
            "the PDB does not select the scheduler's pods"
        );
    }

    let sim = dir_docs(&sim_dir);
    let sim_dep = find(&sim, "Deployment", "rkube-sim-nodes");
    assert_eq!(sim_dep["spec"]["replicas"], 1);
    assert_eq!(sim_dep["spec"]["strategy"]["type"], "Recreate");
    assert_eq!(container(sim_dep)["image"], image.as_str());
    let sim_args = strings(&container(sim_dep)["args"]);
    assert_eq!(sim_args[0], "kubelet");
    assert_eq!(flag(&sim_args, "runtime"), Some("sim"));
    for f in ["node-template", "config"] {
        mounted_file(&sim, sim_dep, flag(&sim_args, f).unwrap());
    }

    // The static pod is the README's edit of kubeadm's.
    let pod_doc = &docs(&static_pod)[0];
    let sp = &pod_doc["spec"]["containers"][0];
    assert_eq!(sp["image"], image.as_str());
    let readme = std::fs::read_to_string(common::root().join("README.md")).unwrap();
    let from = readme
        .find("As the cluster's scheduler")
        .expect("README: 'As the cluster's scheduler'");
    let block = readme[from..]
        .split("```yaml\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("README: the static pod's yaml block");
    let readme_pod: Value = serde_yaml_ng::from_str(block).unwrap();
    assert_eq!(
        sp["command"], readme_pod["spec"]["containers"][0]["command"],
        "deploy/kube-scheduler-static-pod.yaml and the README differ"
    );

    // --- the API server accepts every object
    let cp = ControlPlane::start().expect("control plane");
    // A dry run creates nothing, so the namespaced objects need their
    // Namespace to exist first.
    kubectl(
        &cp,
        &[
            "apply",
            "-f",
            deploy("second-scheduler/00-namespace.yaml")
                .to_str()
                .unwrap(),
        ],
    );
    let (out, err, ok) = kubectl_out(
        &cp,
        &[
            "apply",
            "--dry-run=server",
            "-f",
            sched_dir.to_str().unwrap(),
            "-f",
            sim_dir.to_str().unwrap(),
        ],
    );
    assert!(ok, "kubectl apply --dry-run=server: {err}\n{out}");
    let accepted = out
        .lines()
        .filter(|l| l.ends_with("(server dry run)"))
        .count();
    assert_eq!(accepted, sched.len() + sim.len(), "{out}");
    // Nothing was created.
    let deployments = get_json(&cp, &["deployments", "-n", NS]).unwrap();
    assert_eq!(deployments["items"], json!([]));
    let (out, err, ok) = kubectl_out(
        &cp,
        &[
            "apply",
            "--dry-run=server",
            "-n",
            "kube-system",
            "-f",
            static_pod.to_str().unwrap(),
        ],
    );
    assert!(
        ok && out.contains("pod/kube-scheduler created (server dry run)"),
        "{err}\n{out}"
    );

    // The same dry run refuses a misspelled field (strict validation), so
    // the passes above mean something.
    let broken = cp.dir().join("broken-deployment.yaml");
    let text = std::fs::read_to_string(sched_dir.join("30-deployment.yaml")).unwrap();
    std::fs::write(&broken, text.replace("readinessProbe:", "readinessProbes:")).unwrap();
    let (_, err, ok) = kubectl_out(
        &cp,
        &["apply", "--dry-run=server", "-f", broken.to_str().unwrap()],
    );
    assert!(
        !ok && err.contains("readinessProbes"),
        "a misspelled field passed: {err}"
    );
}

#[test]
#[ignore = "needs hack/build-k8s; run by hack/test"]
fn rbac_of_the_manifests_suffices() {
    let cp = ControlPlane::start().expect("control plane");
    let sched_dir = deploy("second-scheduler");
    let sim_dir = deploy("sim-nodes");
    let sim = dir_docs(&sim_dir);
    let sched = dir_docs(&sched_dir);
    // Everything but the Deployments (nothing here runs containers).
    for f in [
        "second-scheduler/00-namespace.yaml",
        "second-scheduler/10-rbac.yaml",
        "second-scheduler/20-config.yaml",
        "second-scheduler/40-pdb.yaml",
        "sim-nodes/10-rbac.yaml",
        "sim-nodes/20-config.yaml",
    ] {
        kubectl(&cp, &["apply", "-f", deploy(f).to_str().unwrap()]);
    }
    kubectl(&cp, &["create", "serviceaccount", "-n", NS, "unbound"]);
    let (unbound_kc, unbound_token) = token_kubeconfig(&cp, "unbound");

    // --- rkube kubelet with the sim-nodes Deployment's flags and files
    let sim_dep = find(&sim, "Deployment", "rkube-sim-nodes");
    let deploy_args = strings(&container(sim_dep)["args"]);
    let nodes: usize = flag(&deploy_args, "nodes").unwrap().parse().unwrap();
    let pattern = flag(&deploy_args, "node-name-pattern").unwrap().to_string();
    let node_names: Vec<String> = (0..nodes)
        .map(|i| pattern.replace("{}", &format!("{i:05}")))
        .collect();
    let files = cp.dir().join("sim-nodes-files");
    std::fs::create_dir_all(&files).unwrap();
    let healthz_port = free_port();
    let local = |args: &[String], flag_name: &str, edit: &dyn Fn(String) -> String| {
        let path = flag(args, flag_name).unwrap();
        let text = edit(mounted_file(&sim, sim_dep, path));
        let file = files.join(path.rsplit('/').next().unwrap());
        std::fs::write(&file, text).unwrap();
        with_flag(args, flag_name, file.to_str().unwrap())
    };
    let mut args = local(&deploy_args, "node-template", &|t| t);
    // The kubelet in a pod serves /healthz on 0.0.0.0:10248; here on a free
    // loopback port (other kubelets may run on this machine).
    args = local(&args, "config", &|t| {
        let mut v: Value = serde_yaml_ng::from_str(&t).unwrap();
        assert_eq!(v["healthzPort"], 10248);
        v["healthzPort"] = json!(healthz_port);
        v["healthzBindAddress"] = json!("127.0.0.1");
        serde_yaml_ng::to_string(&v).unwrap()
    });

    // A ServiceAccount without the bindings gets nowhere: the token is what
    // decides.
    {
        let mut a = with_flag(&args, "kubeconfig", unbound_kc.to_str().unwrap());
        a = with_flag(&a, "node-name-pattern", "rkube-unbound-{}");
        a = with_flag(
            &a,
            "config",
            files.join("unbound-kubelet.yaml").to_str().unwrap(),
        );
        std::fs::write(
            files.join("unbound-kubelet.yaml"),
            format!("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nhealthzPort: {}\nhealthzBindAddress: 127.0.0.1\n", free_port()),
        )
        .unwrap();
        let denied = Daemon::start(&cp, "kubelet-unbound", &a);
        wait_for(
            "the unbound kubelet to be refused",
            Duration::from_secs(30),
            || {
                denied
                    .log_text()
                    .to_lowercase()
                    .contains("forbidden")
                    .then_some(())
            },
        );
        let all = get_json(&cp, &["nodes"]).unwrap();
        assert_eq!(
            all["items"],
            json!([]),
            "an unbound ServiceAccount registered a node"
        );
    }

    let (sim_kc, _) = token_kubeconfig(&cp, "rkube-sim-nodes");
    let mut kubelet = Daemon::start(
        &cp,
        "kubelet",
        &with_flag(&args, "kubeconfig", sim_kc.to_str().unwrap()),
    );
    let template: Value = serde_yaml_ng::from_str(&mounted_file(
        &sim,
        sim_dep,
        flag(&deploy_args, "node-template").unwrap(),
    ))
    .unwrap();
    let ready_nodes = wait_for("every sim node Ready", Duration::from_secs(90), || {
        let list = get_json(&cp, &["nodes"])?;
        let ready: Vec<Value> = list["items"]
            .as_array()?
            .iter()
            .filter(|n| {
                n["status"]["conditions"].as_array().is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                })
            })
            .cloned()
            .collect();
        (ready.len() == nodes).then_some(ready)
    });
    let mut names: Vec<String> = ready_nodes
        .iter()
        .map(|n| n["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    assert_eq!(names, node_names);
    for n in &ready_nodes {
        // The template's label and taint are on every node.
        for (k, v) in template["metadata"]["labels"].as_object().unwrap() {
            assert_eq!(&n["metadata"]["labels"][k], v, "{}", n["metadata"]["name"]);
        }
        // The template's taints are on the node (the node lifecycle
        // controller may still hold its not-ready taint for a moment after
        // the node turned Ready).
        let taints = n["spec"]["taints"].as_array().cloned().unwrap_or_default();
        for t in template["spec"]["taints"].as_array().unwrap() {
            assert!(
                taints.contains(t),
                "{}: {t} missing in {taints:?}",
                n["metadata"]["name"]
            );
        }
    }
    // Each node's Lease is held by it and renewed.
    let renew_times = |cp: &ControlPlane| -> BTreeMap<String, String> {
        get_json(cp, &["leases", "-n", "kube-node-lease"]).unwrap()["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| {
                assert_eq!(l["spec"]["holderIdentity"], l["metadata"]["name"]);
                (
                    l["metadata"]["name"].as_str().unwrap().to_string(),
                    l["spec"]["renewTime"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect()
    };
    let first = renew_times(&cp);
    assert_eq!(first.keys().cloned().collect::<Vec<_>>(), node_names);
    wait_for("every node Lease renewed", Duration::from_secs(30), || {
        let now = renew_times(&cp);
        now.iter()
            .all(|(k, t)| first.get(k) != Some(t))
            .then_some(())
    });
    let (code, body) = https_get(&format!("http://127.0.0.1:{healthz_port}/healthz"), None)
        .expect("healthz answers");
    assert_eq!((code, body.as_str()), (200, "ok"));

    // A pod bound to a sim node directly runs (pods/status) and its deletion
    // is confirmed by the kubelet (pods delete).
    let pinned = &node_names[1];
    apply(
        &cp,
        "pinned",
        &pod(
            "pinned",
            json!({"nodeName": pinned, "tolerations": sim_toleration()}),
        ),
    );
    wait_for("the pinned pod Running", Duration::from_secs(30), || {
        (pod_phase(&cp, "pinned")? == (pinned.clone(), "Running".into())).then_some(())
    });
    kubectl(
        &cp,
        &["delete", "pod", "-n", "default", "pinned", "--wait=false"],
    );
    wait_for("the pinned pod gone", Duration::from_secs(30), || {
        pod_phase(&cp, "pinned").is_none().then_some(())
    });

    // --- rkube scheduler with the second-scheduler Deployment's flags and ConfigMap
    let dep = find(&sched, "Deployment", "rkube-scheduler");
    let deploy_args = strings(&container(dep)["args"]);
    let config_path = flag(&deploy_args, "config").unwrap();
    let config_text = mounted_file(&sched, dep, config_path);
    let config_file = cp.dir().join("rkube-scheduler-config.yaml");
    std::fs::write(&config_file, &config_text).unwrap();
    let port = free_port();
    let (sched_kc, _) = token_kubeconfig(&cp, "rkube-scheduler");
    let mut a = with_flag(&deploy_args, "config", config_file.to_str().unwrap());
    a = with_flag(&a, "secure-port", &port.to_string());
    a = with_flag(&a, "kubeconfig", sched_kc.to_str().unwrap());
    let mut scheduler = Daemon::start(&cp, "scheduler", &a);
    let base = format!("https://127.0.0.1:{port}");
    wait_for("/readyz ok", Duration::from_secs(60), || {
        (https_get(&format!("{base}/readyz"), None)?.0 == 200).then_some(())
    });
    assert_eq!(https_get(&format!("{base}/livez"), None).unwrap().0, 200);
    let holder = wait_for("the rkube Lease held", Duration::from_secs(60), || {
        let l = get_json(&cp, &["lease", "-n", NS, "rkube"])?;
        let h = l["spec"]["holderIdentity"].as_str()?.to_string();
        (!h.is_empty()).then_some(h)
    });
    let log = scheduler.log_text();
    assert!(
        log.contains("successfully acquired lease") && log.contains(&holder),
        "the Lease holder {holder} is not this scheduler:\n{log}"
    );

    // /metrics: a token bound to the metrics-reader role reads it (the
    // scheduler's own TokenReview and SubjectAccessReview work); one
    // without is refused.
    kubectl(&cp, &["create", "serviceaccount", "-n", NS, "scraper"]);
    kubectl(
        &cp,
        &[
            "create",
            "clusterrolebinding",
            "scraper-metrics",
            "--clusterrole=rkube-scheduler-metrics-reader",
            &format!("--serviceaccount={NS}:scraper"),
        ],
    );
    let (_, scraper) = token_kubeconfig(&cp, "scraper");
    let metrics = wait_for("/metrics for the scraper", Duration::from_secs(30), || {
        let (code, body) = https_get(&format!("{base}/metrics"), Some(&scraper))?;
        (code == 200).then_some(body)
    });
    assert!(
        metrics.contains("leader_election_master_status{name=\"rkube\"} 1"),
        "not the leader per /metrics"
    );
    assert_eq!(
        https_get(&format!("{base}/metrics"), Some(&unbound_token))
            .unwrap()
            .0,
        403
    );

    // A pod for the `rkube` profile is bound to a sim node and runs; one
    // that does not tolerate the sim nodes' taint is not bound.
    apply(
        &cp,
        "sched",
        &pod(
            "by-rkube",
            json!({"schedulerName": "rkube", "tolerations": sim_toleration()}),
        ),
    );
    apply(
        &cp,
        "untolerated",
        &pod("untolerated", json!({"schedulerName": "rkube"})),
    );
    let node = wait_for(
        "by-rkube Running on a sim node",
        Duration::from_secs(60),
        || {
            let (node, phase) = pod_phase(&cp, "by-rkube")?;
            (phase == "Running").then_some(node)
        },
    );
    assert!(node_names.contains(&node), "bound to {node}");
    let has_event = |pod: &str, reason: &str, text: &str| -> Option<()> {
        let events = get_json(&cp, &["events", "-n", "default"])?;
        events["items"]
            .as_array()?
            .iter()
            .any(|e| {
                e["involvedObject"]["name"] == pod
                    && e["reason"] == reason
                    && e["message"].as_str().unwrap_or("").contains(text)
            })
            .then_some(())
    };
    wait_for(
        "a Scheduled event for by-rkube",
        Duration::from_secs(30),
        || has_event("by-rkube", "Scheduled", &node),
    );
    wait_for(
        "FailedScheduling for the untolerated pod",
        Duration::from_secs(30),
        || has_event("untolerated", "FailedScheduling", "untolerated taint"),
    );
    let (unbound_node, _) = pod_phase(&cp, "untolerated").unwrap();
    assert_eq!(
        unbound_node, "",
        "a pod not tolerating the sim taint was bound"
    );

    kubelet.assert_alive();
    scheduler.assert_alive();
    kubelet.assert_never_forbidden();
    scheduler.assert_never_forbidden();
}

// ------------------------------------------------------------------ image

fn sha256_file(path: &Path) -> String {
    let out = run(Command::new("sha256sum").arg(path));
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// `hack/image` output lines `key: value`.
fn image_build(args: &[&str]) -> BTreeMap<String, String> {
    let out = run(Command::new(common::root().join("hack/image")).args(args));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
#[ignore = "needs hack/build-k8s; run by hack/test"]
fn image_archive_verifies_imports_and_runs() {
    let work = std::env::temp_dir().join(format!("rkube-image-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();
    // The debug binary without its debug info (400+ MB otherwise).
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
    let b = binary.to_str().unwrap();
    let a_tar = work.join("a.tar");
    let built = image_build(&["--binary", b, "--out", a_tar.to_str().unwrap()]);
    assert_eq!(built["image"], format!("rkube:{VERSION}"));
    assert_eq!(Path::new(&built["archive"]), a_tar);
    // Reproducible: the same binary gives the same bytes.
    let b_tar = work.join("b.tar");
    let again = image_build(&["--binary", b, "--out", b_tar.to_str().unwrap()]);
    assert_eq!(again["manifest"], built["manifest"]);
    assert!(
        std::fs::read(&a_tar).unwrap() == std::fs::read(&b_tar).unwrap(),
        "two builds of the same binary differ"
    );

    // The digests, checked here too (not only by the script).
    let x = work.join("x");
    std::fs::create_dir_all(&x).unwrap();
    run(Command::new("tar").arg("-xf").arg(&a_tar).arg("-C").arg(&x));
    let read = |p: &Path| -> Value { serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap() };
    let blob = |digest: &Value| {
        x.join("blobs/sha256")
            .join(digest.as_str().unwrap().trim_start_matches("sha256:"))
    };
    let check = |desc: &Value| {
        let f = blob(&desc["digest"]);
        assert_eq!(
            format!("sha256:{}", sha256_file(&f)),
            desc["digest"].as_str().unwrap()
        );
        assert_eq!(
            std::fs::metadata(&f).unwrap().len(),
            desc["size"].as_u64().unwrap()
        );
    };
    assert_eq!(read(&x.join("oci-layout"))["imageLayoutVersion"], "1.0.0");
    let index = read(&x.join("index.json"));
    let m = &index["manifests"][0];
    assert_eq!(m["digest"].as_str(), Some(built["manifest"].as_str()));
    assert_eq!(
        m["annotations"]["org.opencontainers.image.ref.name"],
        VERSION
    );
    assert_eq!(
        m["annotations"]["io.containerd.image.name"],
        format!("docker.io/library/rkube:{VERSION}")
    );
    check(m);
    let manifest = read(&blob(&m["digest"]));
    check(&manifest["config"]);
    check(&manifest["layers"][0]);
    let config = read(&blob(&manifest["config"]["digest"]));
    assert_eq!(config["config"]["User"], "65532:65532");
    assert_eq!(config["config"]["Entrypoint"], json!(["/rkube"]));
    let layer = blob(&manifest["layers"][0]["digest"]);
    let diff = run(Command::new("sh")
        .arg("-c")
        .arg(format!("gzip -dc '{}' | sha256sum", layer.display())));
    let diff = String::from_utf8_lossy(&diff.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    assert_eq!(config["rootfs"]["diff_ids"][0], format!("sha256:{diff}"));
    let docker = read(&x.join("manifest.json"));
    assert_eq!(docker[0]["RepoTags"], json!([format!("rkube:{VERSION}")]));
    assert_eq!(
        docker[0]["Config"].as_str().unwrap(),
        format!(
            "blobs/sha256/{}",
            manifest["config"]["digest"]
                .as_str()
                .unwrap()
                .trim_start_matches("sha256:")
        )
    );

    // What the layer holds: the binary, what ldd lists, the CA bundle, the user.
    let listing = run(Command::new("tar").arg("-tzf").arg(&layer));
    let listing = String::from_utf8_lossy(&listing.stdout).into_owned();
    let ldd = Command::new("ldd").arg(&binary).output().unwrap();
    let mut want = vec![
        "./rkube".to_string(),
        "./usr/local/bin/rkube".to_string(),
        "./etc/ssl/certs/ca-certificates.crt".to_string(),
        "./etc/passwd".to_string(),
    ];
    for lib in String::from_utf8_lossy(&ldd.stdout)
        .split_whitespace()
        .filter(|w| w.starts_with('/'))
    {
        want.push(format!(".{lib}"));
    }
    for w in &want {
        assert!(
            listing.lines().any(|l| l == w),
            "{w} is not in the layer:\n{listing}"
        );
    }
    let rootfs = work.join("rootfs");
    std::fs::create_dir_all(&rootfs).unwrap();
    run(Command::new("tar")
        .arg("-xzf")
        .arg(&layer)
        .arg("-C")
        .arg(&rootfs));
    let passwd = std::fs::read_to_string(rootfs.join("etc/passwd")).unwrap();
    assert!(passwd.contains("nonroot:x:65532:65532:"), "{passwd}");

    // --verify passes the archive and fails a tampered copy.
    let image = common::root().join("hack/image");
    run(Command::new(&image).arg("--verify").arg(&a_tar));
    let cfg_file = blob(&manifest["config"]["digest"]);
    let text = std::fs::read_to_string(&cfg_file).unwrap();
    std::fs::write(&cfg_file, text.replace("65532:65532", "0:0")).unwrap();
    let bad = work.join("bad.tar");
    run(Command::new("tar")
        .arg("-cf")
        .arg(&bad)
        .arg("-C")
        .arg(&x)
        .args(["oci-layout", "index.json", "manifest.json", "blobs"]));
    let out = Command::new(&image)
        .arg("--verify")
        .arg(&bad)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("failed verification") && err.contains("User"),
        "{err}"
    );

    if !is_root() {
        eprintln!("not root: skipping the chroot run and the containerd import");
        let _ = std::fs::remove_dir_all(&work);
        return;
    }
    // The root filesystem is complete: the binary runs in it, as nonroot.
    let out = run(Command::new("chroot")
        .arg("--userspec=65532:65532")
        .arg(&rootfs)
        .args(["/rkube", "--version"]));
    let v = String::from_utf8_lossy(&out.stdout);
    assert!(v.starts_with(&format!("rkube {VERSION} ")), "{v}");

    // Imported into a private containerd, where the CRI plugin finds
    // `rkube:VERSION`, and run by it as the image's user.
    let cd = Containerd::up("rkimg");
    let imported = image_build(&[
        "--binary",
        b,
        "--out",
        a_tar.to_str().unwrap(),
        "--import",
        "--containerd-dir",
        cd.0.to_str().unwrap(),
    ]);
    assert_eq!(imported["manifest"], built["manifest"]);
    let sock = cd.socket();
    let ctr = |args: &[&str]| -> Output {
        run(Command::new("ctr")
            .arg("--address")
            .arg(&sock)
            .args(["-n", "k8s.io"])
            .args(args))
    };
    let full = format!("docker.io/library/rkube:{VERSION}");
    let ls = ctr(&["images", "ls"]);
    let ls = String::from_utf8_lossy(&ls.stdout);
    assert!(
        ls.lines()
            .any(|l| l.starts_with(&format!("{full} ")) && l.contains(&built["manifest"])),
        "{ls}"
    );
    let id = format!("rkube-image-test-{}", std::process::id());
    let out = ctr(&["run", "--net-host", &full, &id, "rkube", "--version"]);
    let v = String::from_utf8_lossy(&out.stdout);
    assert!(v.starts_with(&format!("rkube {VERSION} ")), "{v}");
    let info: Value = serde_json::from_slice(&ctr(&["containers", "info", &id]).stdout).unwrap();
    assert_eq!(info["Spec"]["process"]["user"]["uid"], 65532);
    assert_eq!(info["Spec"]["process"]["user"]["gid"], 65532);
    ctr(&["containers", "rm", &id]);
    drop(cd);
    let _ = std::fs::remove_dir_all(&work);
}
