//! `rkube-bench kubelet SUB …`: each step `hack/bench-kubelet` runs, one
//! JSON line out (the script tags it with the kubelet and the run).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::json;

use super::{floor, pods, report, stages, stats};

/// The usage of `rkube-bench kubelet`.
pub const USAGE: &str = "  rkube-bench kubelet order --runs K
  rkube-bench kubelet start --kubeconfig FILE --node NODE --pods N [--image I] [--command 'CMD ARGS'] [--grace S] [--prefix P] [--timeout S]
  rkube-bench kubelet delete --kubeconfig FILE [--timeout S]
  rkube-bench kubelet churn --kubeconfig FILE --node NODE --seconds S [--wave N] [--image I] [--command 'CMD ARGS'] [--grace S] [--timeout S]
  rkube-bench kubelet stages --kubeconfig FILE --node NODE
  rkube-bench kubelet floor --endpoint unix:///SOCKET --pods N --log-dir DIR [--image I] [--command 'CMD ARGS'] [--hold FILE]
  rkube-bench kubelet settle --endpoint unix:///SOCKET --pods N [--timeout S]
  rkube-bench kubelet report --results FILE";

/// The image `hack/containerd` imports that exits on TERM, as pause does.
const PAUSE: &str = "rkube.local/pause:1";

#[derive(Debug)]
struct Args {
    kubeconfig: Option<PathBuf>,
    node: Option<String>,
    pods: Option<usize>,
    image: String,
    command: Vec<String>,
    grace: i64,
    prefix: String,
    timeout: Duration,
    seconds: Option<u64>,
    wave: usize,
    endpoint: Option<String>,
    log_dir: Option<String>,
    hold: Option<PathBuf>,
    results: Option<PathBuf>,
    runs: Option<usize>,
}

fn parse(args: &[String]) -> Result<Args> {
    let mut o = Args {
        kubeconfig: None,
        node: None,
        pods: None,
        image: PAUSE.into(),
        command: vec![],
        grace: 1,
        prefix: "p".into(),
        timeout: Duration::from_secs(600),
        seconds: None,
        wave: 100,
        endpoint: None,
        log_dir: None,
        hold: None,
        results: None,
        runs: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--kubeconfig" => o.kubeconfig = Some(PathBuf::from(val()?)),
            "--node" => o.node = Some(val()?.clone()),
            "--pods" => o.pods = Some(positive(a, val()?, 10_000)?),
            "--image" => o.image = val()?.clone(),
            "--command" => o.command = val()?.split_whitespace().map(String::from).collect(),
            "--grace" => o.grace = val()?.parse().context("--grace: seconds")?,
            "--prefix" => o.prefix = val()?.clone(),
            "--timeout" => o.timeout = Duration::from_secs(positive(a, val()?, 86_400)? as u64),
            "--seconds" => o.seconds = Some(positive(a, val()?, 86_400)? as u64),
            "--wave" => o.wave = positive(a, val()?, 10_000)?,
            "--endpoint" => o.endpoint = Some(val()?.clone()),
            "--log-dir" => o.log_dir = Some(val()?.clone()),
            "--hold" => o.hold = Some(PathBuf::from(val()?)),
            "--results" => o.results = Some(PathBuf::from(val()?)),
            "--runs" => o.runs = Some(positive(a, val()?, 1_000)?),
            other => bail!("unexpected argument {other:?}\n{USAGE}"),
        }
    }
    Ok(o)
}

fn positive(flag: &str, v: &str, max: usize) -> Result<usize> {
    match v.parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => bail!("{flag}: a whole number from 1 to {max}, not {v:?}"),
    }
}

fn need<T: Clone>(v: &Option<T>, what: &str, sub: &str) -> Result<T> {
    v.clone()
        .with_context(|| format!("kubelet {sub} needs {what}\n{USAGE}"))
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}

async fn client(path: &PathBuf) -> Result<kube::Client> {
    let kc = kube::config::Kubeconfig::read_from(path)
        .with_context(|| format!("{}: not a kubeconfig", path.display()))?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    Ok(kube::Client::try_from(cfg)?)
}

fn timed(kind: &str, t: &pods::Timed) -> serde_json::Value {
    json!({"kind": kind, "pods": t.latencies_ms.len(), "latenciesMs": t.latencies_ms, "totalMs": t.total_ms})
}

/// Runs `rkube-bench kubelet SUB …`.
pub fn main(args: &[String]) -> Result<()> {
    let Some(sub) = args.first() else {
        bail!("{USAGE}")
    };
    if matches!(sub.as_str(), "-h" | "--help") {
        println!("{USAGE}");
        return Ok(());
    }
    let o = parse(&args[1..])?;
    let spec = |o: &Args, sub: &str| -> Result<pods::Spec> {
        Ok(pods::Spec {
            node: need(&o.node, "--node", sub)?,
            image: o.image.clone(),
            command: o.command.clone(),
            grace_seconds: o.grace,
        })
    };
    let line = match sub.as_str() {
        "order" => {
            for (run, kubelet) in stats::order(need(&o.runs, "--runs", sub)?) {
                println!("{run} {kubelet}");
            }
            return Ok(());
        }
        "report" => {
            let path = need(&o.results, "--results", sub)?;
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            print!(
                "{}",
                report::render(&text).with_context(|| path.display().to_string())?
            );
            return Ok(());
        }
        "start" => {
            let (kc, n, spec) = (
                need(&o.kubeconfig, "--kubeconfig", sub)?,
                need(&o.pods, "--pods", sub)?,
                spec(&o, sub)?,
            );
            runtime()?.block_on(async {
                let c = client(&kc).await?;
                pods::ensure_namespace(&c).await?;
                let t = pods::start(&c, &spec, n, &o.prefix, o.timeout).await?;
                Ok::<_, anyhow::Error>(timed("startup", &t))
            })?
        }
        "delete" => {
            let kc = need(&o.kubeconfig, "--kubeconfig", sub)?;
            runtime()?.block_on(async {
                let c = client(&kc).await?;
                let t = pods::delete_all(&c, o.timeout).await?;
                Ok::<_, anyhow::Error>(timed("delete", &t))
            })?
        }
        "churn" => {
            let (kc, secs, spec) = (
                need(&o.kubeconfig, "--kubeconfig", sub)?,
                need(&o.seconds, "--seconds", sub)?,
                spec(&o, sub)?,
            );
            runtime()?.block_on(async {
                let c = client(&kc).await?;
                pods::ensure_namespace(&c).await?;
                let ch = pods::churn(&c, &spec, secs, o.wave, o.timeout).await?;
                Ok::<_, anyhow::Error>(json!({
                    "kind": "churn", "pods": ch.pods, "seconds": ch.seconds,
                    "startupMs": ch.startup_ms, "deleteMs": ch.delete_ms,
                }))
            })?
        }
        "stages" => {
            let (kc, node) = (
                need(&o.kubeconfig, "--kubeconfig", sub)?,
                need(&o.node, "--node", sub)?,
            );
            runtime()?.block_on(async {
                let c = client(&kc).await?;
                stages::run(&c, &node).await
            })?
        }
        // After a delete: until the runtime holds no sandbox (tagged with
        // the pods just deleted).
        "settle" => {
            let (endpoint, n) = (
                need(&o.endpoint, "--endpoint", sub)?,
                need(&o.pods, "--pods", sub)?,
            );
            let (seconds, left) = runtime()?.block_on(floor::empty(&endpoint, o.timeout))?;
            json!({"kind": "settle", "pods": n, "seconds": seconds, "left": left})
        }
        "floor" => {
            let f = floor::Options {
                endpoint: need(&o.endpoint, "--endpoint", sub)?,
                pods: need(&o.pods, "--pods", sub)?,
                image: o.image.clone(),
                command: o.command.clone(),
                log_dir: need(&o.log_dir, "--log-dir", sub)?,
                hold: o.hold.clone(),
            };
            // Three lines: the startup and the CRI calls it took, as soon
            // as the pods started (a caller holding them reads them then),
            // then the delete.
            let (_, down) = runtime()?.block_on(floor::run(&f, |up, calls| {
                use std::io::Write;
                println!("{}", timed("startup", up));
                println!(
                    "{}",
                    json!({"kind": "cri", "pods": up.latencies_ms.len(), "calls": calls})
                );
                let _ = std::io::stdout().flush();
            }))?;
            timed("delete", &down)
        }
        other => bail!("unknown kubelet step {other:?}\n{USAGE}"),
    };
    println!("{line}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn flags() {
        let o = parse(&s(&[
            "--pods",
            "105",
            "--command",
            "sleep 60",
            "--timeout",
            "30",
        ]))
        .unwrap();
        assert_eq!(o.pods, Some(105));
        assert_eq!(o.command, ["sleep", "60"]);
        assert_eq!(o.timeout, Duration::from_secs(30));
        assert_eq!(o.image, PAUSE);
        for bad in [
            &["--pods", "0"][..],
            &["--pods", "x"],
            &["--pods"],
            &["--what"],
            &["--runs", "99999"],
        ] {
            assert!(parse(&s(bad)).is_err(), "{bad:?}");
        }
        assert!(main(&s(&["start", "--pods", "3"]))
            .unwrap_err()
            .to_string()
            .contains("--kubeconfig"));
        assert!(main(&s(&["nope"])).is_err());
    }
}
