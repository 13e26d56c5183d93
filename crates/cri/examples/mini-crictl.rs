//! A tiny crictl: `mini-crictl ENDPOINT version|images|ps|pods|runp NAME [--host-network]|rmp ID`.
//!
//! ```text
//! eval "$(hack/containerd up)"
//! cargo run -p rkube-cri --example mini-crictl -- "$CONTAINER_RUNTIME_ENDPOINT" images
//! ```

use rkube_cri::{CriClient, SandboxSpec};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [endpoint, cmd, rest @ ..] = args.as_slice() else {
        eprintln!(
            "usage: mini-crictl ENDPOINT version|images|ps|pods|runp NAME [--host-network]|rmp ID"
        );
        std::process::exit(2);
    };
    let cri = CriClient::connect(endpoint).await?;
    match cmd.as_str() {
        "version" => println!("{:?}", cri.version().await?),
        "images" => {
            for i in cri.list_images(None).await? {
                println!("{}\t{}\t{}", i.id, i.repo_tags.join(","), i.size);
            }
        }
        "pods" => {
            for p in cri.list_pod_sandboxes(None).await? {
                let m = p.metadata.unwrap_or_default();
                println!("{}\t{}/{}\tstate={}", p.id, m.namespace, m.name, p.state);
            }
        }
        "ps" => {
            for c in cri.list_containers(None).await? {
                let m = c.metadata.unwrap_or_default();
                println!(
                    "{}\t{}\tpod={}\tstate={}",
                    c.id, m.name, c.pod_sandbox_id, c.state
                );
            }
        }
        "runp" => {
            let name = rest.first().ok_or("runp NAME")?;
            let spec = SandboxSpec {
                name: name.clone(),
                namespace: "default".into(),
                uid: format!("uid-{name}"),
                hostname: name.clone(),
                host_network: rest.iter().any(|a| a == "--host-network"),
                ..Default::default()
            };
            let id = cri.run_pod_sandbox(spec.to_config(), "").await?;
            let st = cri.pod_sandbox_status(&id).await?;
            println!("{id}\tip={}", rkube_cri::pod_ip(&st).unwrap_or("-"));
        }
        "rmp" => {
            let id = rest.first().ok_or("rmp ID")?;
            cri.stop_pod_sandbox(id).await?;
            cri.remove_pod_sandbox(id).await?;
        }
        other => {
            eprintln!("unknown command {other}");
            std::process::exit(2);
        }
    }
    Ok(())
}
