//! rkube-cri against a real containerd started by `hack/containerd`.
//!
//! Each test starts its own containerd (`hack/containerd up --dir <tmp>`,
//! ~1 s) and stops it on drop. Needs root; run by `hack/test` with
//! `cargo test -p rkube-cri -- --ignored`. With `RKUBE_KEEP_CONTAINERD=1`
//! the containerds are left running for inspection (stop them with
//! `hack/containerd down --dir DIR`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rkube_cri::logs::{read_log_file, LogStream};
use rkube_cri::{v1, ContainerSpec, CriClient, SandboxSpec};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BUSYBOX: &str = "rkube.local/busybox:1";
const PAUSE: &str = "rkube.local/pause:1";

/// A private containerd; `down` and the directory removed on drop.
struct Containerd {
    dir: PathBuf,
    endpoint: String,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../hack/containerd")
}

impl Containerd {
    fn up(name: &str) -> Containerd {
        let dir = std::env::temp_dir().join(format!("rkube-cri-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let out = Command::new(script())
            .args(["up", "--dir"])
            .arg(&dir)
            .output()
            .expect("run hack/containerd");
        // from here on, drop cleans up even if the checks below fail
        let mut c = Containerd {
            dir,
            endpoint: String::new(),
        };
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "hack/containerd up failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        c.endpoint = stdout
            .trim()
            .strip_prefix("export CONTAINER_RUNTIME_ENDPOINT=")
            .unwrap_or_else(|| panic!("unexpected output {stdout:?}"))
            .to_string();
        c
    }

    async fn client(&self) -> CriClient {
        CriClient::connect(&self.endpoint).await.expect("connect")
    }

    /// The subnet of the CNI bridge network the script configured.
    fn subnet_prefix(&self) -> String {
        let conf = std::fs::read_to_string(self.dir.join("cni/net.d/10-rkube.conflist")).unwrap();
        let subnet = conf
            .split("\"subnet\": \"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .expect("subnet in conflist");
        // a /24: the first three octets
        let net = subnet.trim_end_matches("/24");
        net.rsplit_once('.').unwrap().0.to_string() + "."
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        if std::env::var_os("RKUBE_KEEP_CONTAINERD").is_some() {
            eprintln!("RKUBE_KEEP_CONTAINERD: left {} running", self.dir.display());
            return;
        }
        let _ = Command::new(script())
            .args(["down", "--dir"])
            .arg(&self.dir)
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn sandbox(c: &Containerd, name: &str, host_network: bool) -> SandboxSpec {
    let uid = format!("uid-{name}");
    SandboxSpec {
        name: name.into(),
        namespace: "default".into(),
        uid: uid.clone(),
        hostname: name.into(),
        log_directory: c
            .dir
            .join(format!("pods/default_{name}_{uid}"))
            .display()
            .to_string(),
        host_network,
        ..Default::default()
    }
}

fn container(name: &str, script: &str) -> ContainerSpec {
    ContainerSpec {
        name: name.into(),
        image: BUSYBOX.into(),
        command: vec!["sh".into(), "-c".into(), script.into()],
        log_path: format!("{name}/0.log"),
        ..Default::default()
    }
}

async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
#[ignore = "needs hack/containerd; run by hack/test"]
async fn runtime_and_images() {
    let cd = Containerd::up("rt");
    let cri = cd.client().await;

    let v = cri.version().await.unwrap();
    assert_eq!(v.runtime_name, "containerd");
    assert_eq!(v.runtime_api_version, "v1");
    eprintln!("version: {v:?}");

    let st = cri.status().await.unwrap();
    let ready = rkube_cri::condition(&st, "RuntimeReady").expect("RuntimeReady");
    assert!(ready.status, "{ready:?}");
    let net = rkube_cri::condition(&st, "NetworkReady").expect("NetworkReady");
    assert!(net.status, "CNI config should be loaded: {net:?}");

    let images = cri.list_images(None).await.unwrap();
    let tags: Vec<&str> = images
        .iter()
        .flat_map(|i| i.repo_tags.iter().map(String::as_str))
        .collect();
    assert!(tags.contains(&BUSYBOX), "{tags:?}");
    assert!(tags.contains(&PAUSE), "{tags:?}");

    let img = cri.image_status(BUSYBOX).await.unwrap().expect("busybox");
    assert!(img.id.starts_with("sha256:"), "{img:?}");
    assert!(img.size > 1_000_000, "busybox layer is ~2 MB: {}", img.size);
    assert!(cri
        .image_status("rkube.local/absent:1")
        .await
        .unwrap()
        .is_none());

    // No registry is reachable: a pull of even a present image fails
    // (containerd resolves the reference remotely first).
    let err = cri.pull_image(BUSYBOX, None, None).await.unwrap_err();
    eprintln!("pull of a local image without network: {err}");
    assert_eq!(err.code(), Some(tonic::Code::Unknown), "{err}");
}

#[tokio::test]
#[ignore = "needs hack/containerd; run by hack/test"]
async fn host_network_pod_lifecycle() {
    let cd = Containerd::up("pod");
    let cri = cd.client().await;

    let spec = sandbox(&cd, "hostnet", true);
    let sb_config = spec.to_config();
    let pod = cri.run_pod_sandbox(sb_config.clone(), "").await.unwrap();
    let sb = cri.pod_sandbox_status(&pod).await.unwrap();
    assert_eq!(sb.state, v1::PodSandboxState::SandboxReady as i32);
    assert_eq!(rkube_cri::pod_ip(&sb), None, "host network: no pod IP");

    // a long-running container whose log says hello
    let main = cri
        .create_container(
            &pod,
            container("main", "echo hello; echo oops >&2; sleep 3600").to_config(),
            sb_config.clone(),
        )
        .await
        .unwrap();
    cri.start_container(&main).await.unwrap();
    let st = cri.container_status(&main).await.unwrap();
    assert_eq!(st.state, v1::ContainerState::ContainerRunning as i32);
    assert_eq!(
        Path::new(&st.log_path),
        Path::new(&spec.log_directory).join("main/0.log")
    );
    let log_path = st.log_path.clone();
    let msgs = eventually("hello in the log", Duration::from_secs(10), || {
        let p = log_path.clone();
        async move {
            let m = read_log_file(&p).await.ok()?;
            (m.len() >= 2).then_some(m)
        }
    })
    .await;
    let out: Vec<(LogStream, String)> = msgs
        .iter()
        .map(|m| (m.stream, m.text().into_owned()))
        .collect();
    assert!(
        out.contains(&(LogStream::Stdout, "hello".into())),
        "{out:?}"
    );
    assert!(out.contains(&(LogStream::Stderr, "oops".into())), "{out:?}");

    // exec_sync, as exec probes use it
    let r = cri
        .exec_sync(&main, &["echo", "hi"], Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!((r.exit_code, r.stdout.as_slice()), (0, &b"hi\n"[..]));
    let r = cri
        .exec_sync(
            &main,
            &["sh", "-c", "echo bad >&2; exit 7"],
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    assert_eq!((r.exit_code, r.stderr.as_slice()), (7, &b"bad\n"[..]));

    // a container that exits 3
    let fail = cri
        .create_container(
            &pod,
            container("fail", "exit 3").to_config(),
            sb_config.clone(),
        )
        .await
        .unwrap();
    cri.start_container(&fail).await.unwrap();
    let st = eventually("fail to exit", Duration::from_secs(10), || {
        let cri = cri.clone();
        let id = fail.clone();
        async move {
            let st = cri.container_status(&id).await.unwrap();
            (st.state == v1::ContainerState::ContainerExited as i32).then_some(st)
        }
    })
    .await;
    assert_eq!(st.exit_code, 3);
    assert_eq!(st.reason, "Error");
    // (containerd may record a start time after a fast exit's finish time)
    assert!(st.started_at > 0 && st.finished_at > 0, "{st:?}");

    let in_pod = v1::ContainerFilter {
        pod_sandbox_id: pod.clone(),
        ..Default::default()
    };
    let listed = cri.list_containers(Some(in_pod.clone())).await.unwrap();
    let mut names: Vec<&str> = listed
        .iter()
        .map(|c| c.metadata.as_ref().unwrap().name.as_str())
        .collect();
    names.sort();
    assert_eq!(names, ["fail", "main"]);

    // stop one container, then the sandbox; remove everything
    cri.stop_container(&main, Duration::from_secs(1))
        .await
        .unwrap();
    let st = cri.container_status(&main).await.unwrap();
    assert_eq!(st.state, v1::ContainerState::ContainerExited as i32);
    cri.remove_container(&fail).await.unwrap();
    cri.remove_container(&fail).await.unwrap(); // idempotent
    let err = cri.container_status(&fail).await.unwrap_err();
    assert!(err.is_not_found(), "{err}");
    cri.stop_pod_sandbox(&pod).await.unwrap();
    cri.stop_pod_sandbox(&pod).await.unwrap(); // idempotent
    let sb = cri.pod_sandbox_status(&pod).await.unwrap();
    assert_eq!(sb.state, v1::PodSandboxState::SandboxNotready as i32);
    cri.remove_pod_sandbox(&pod).await.unwrap();
    assert!(cri.list_containers(Some(in_pod)).await.unwrap().is_empty());
    assert!(cri.list_pod_sandboxes(None).await.unwrap().is_empty());
    assert!(cri
        .pod_sandbox_status(&pod)
        .await
        .unwrap_err()
        .is_not_found());
}

#[tokio::test]
#[ignore = "needs hack/containerd; run by hack/test"]
async fn bridge_network_pod_gets_an_ip_and_serves() {
    let cd = Containerd::up("net");
    let cri = cd.client().await;
    let prefix = cd.subnet_prefix();

    let sb_config = sandbox(&cd, "bridged", false).to_config();
    let pod = cri.run_pod_sandbox(sb_config.clone(), "").await.unwrap();
    let sb = cri.pod_sandbox_status(&pod).await.unwrap();
    let ip = rkube_cri::pod_ip(&sb).expect("pod IP").to_string();
    assert!(ip.starts_with(&prefix), "{ip} not in {prefix}0/24");
    eprintln!("pod IP {ip}");

    let web = cri
        .create_container(
            &pod,
            container(
                "web",
                "mkdir -p /www && echo served-by-pod > /www/index.html && exec httpd -f -p 8080 -h /www",
            )
            .to_config(),
            sb_config,
        )
        .await
        .unwrap();
    cri.start_container(&web).await.unwrap();

    // the node reaches the pod over the bridge
    let body = eventually("HTTP from the pod", Duration::from_secs(10), || {
        let addr = format!("{ip}:8080");
        async move {
            let mut s = tokio::net::TcpStream::connect(&addr).await.ok()?;
            s.write_all(b"GET / HTTP/1.0\r\n\r\n").await.ok()?;
            let mut buf = String::new();
            s.read_to_string(&mut buf).await.ok()?;
            Some(buf)
        }
    })
    .await;
    assert!(body.contains("served-by-pod"), "{body}");

    // the pod has its own hostname and loopback
    let r = cri
        .exec_sync(
            &web,
            &["sh", "-c", "hostname; ip -o addr show lo"],
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    let out = String::from_utf8_lossy(&r.stdout);
    assert!(out.starts_with("bridged\n"), "{out}");
    assert!(out.contains("127.0.0.1"), "{out}");

    cri.stop_pod_sandbox(&pod).await.unwrap();
    cri.remove_pod_sandbox(&pod).await.unwrap();
    // the IP went back to host-local
    let ipam = cd.dir.join("cni/ipam");
    let held: Vec<String> =
        std::fs::read_dir(ipam.read_dir().unwrap().next().unwrap().unwrap().path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
    assert!(!held.contains(&ip), "{ip} still allocated: {held:?}");
}
