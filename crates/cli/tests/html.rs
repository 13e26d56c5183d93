//! `-o html` in a real browser: headless Chromium loads the generated pages
//! (`--dump-dom` after the page's script ran, `--screenshot`), and the test
//! checks the charts are in the rendered DOM with the simulation's numbers.
//!
//! Without Chromium (`/usr/bin/chromium`, Debian package `chromium`, or
//! `$RKUBE_CHROMIUM`) the test prints why and passes, unless
//! `RKUBE_REQUIRE_BROWSER=1` (CI), where a missing browser fails it.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn rkube(args: &[&str]) -> Vec<u8> {
    let out = Command::new(env!("CARGO_BIN_EXE_rkube"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("run rkube");
    assert!(
        out.status.success(),
        "rkube {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn json(args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.extend(["-o", "json"]);
    serde_json::from_slice(&rkube(&args)).expect("valid JSON")
}

fn require_browser() -> bool {
    std::env::var("RKUBE_REQUIRE_BROWSER").is_ok_and(|v| !v.is_empty() && v != "0")
}

fn find_chromium() -> Option<PathBuf> {
    // An explicit path wins (one that does not exist means "no browser").
    if let Some(p) = std::env::var_os("RKUBE_CHROMIUM") {
        return Some(PathBuf::from(p)).filter(|p| p.is_file());
    }
    let mut candidates = vec![PathBuf::from("/usr/bin/chromium")];
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            candidates.push(dir.join("chromium"));
            candidates.push(dir.join("chromium-browser"));
        }
    }
    candidates.into_iter().find(|p| p.is_file())
}

/// A fresh scratch directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir =
            std::env::temp_dir().join(format!("rkube-html-{tag}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("keeping {} for inspection", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

struct Browser {
    exe: PathBuf,
    scratch: Scratch,
    runs: usize,
}

impl Browser {
    /// Runs headless Chromium on `page` with `extra` flags (fresh profile,
    /// no network services), returning stdout; fails after 120 s.
    fn run(&mut self, page: &Path, extra: &[String]) -> String {
        self.runs += 1;
        let profile = self.scratch.0.join(format!("profile-{}", self.runs));
        let mut child = Command::new(&self.exe)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--hide-scrollbars",
                "--window-size=1400,1200",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .args(extra)
            .arg(format!("file://{}", page.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", self.exe.display()));
        let mut stdout = child.stdout.take().unwrap();
        let mut stderr = child.stderr.take().unwrap();
        let out = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stdout.read_to_string(&mut s);
            s
        });
        let err = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s);
            s
        });
        let deadline = Instant::now() + Duration::from_secs(120);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("chromium timed out on {}", page.display());
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let (out, err) = (out.join().unwrap(), err.join().unwrap());
        assert!(
            status.success(),
            "chromium {extra:?} failed ({status}): {err}"
        );
        out
    }

    fn dump_dom(&mut self, page: &Path) -> String {
        let dom = self.run(page, &["--dump-dom".into()]);
        assert!(
            dom.contains("data-ready=\"1\""),
            "the page's script did not run: {}",
            &dom[..dom.len().min(2000)]
        );
        dom
    }
}

fn browser() -> Option<Browser> {
    match find_chromium() {
        Some(exe) => Some(Browser {
            exe,
            scratch: Scratch::new("browser"),
            runs: 0,
        }),
        None if require_browser() => panic!(
            "RKUBE_REQUIRE_BROWSER is set but chromium is missing \
             (apt-get install -y chromium, or set RKUBE_CHROMIUM)"
        ),
        None => {
            println!(
                "SKIPPED: chromium not found (/usr/bin/chromium, PATH, $RKUBE_CHROMIUM); \
                 install it with `apt-get install -y chromium` to check -o html in a browser \
                 (RKUBE_REQUIRE_BROWSER=1 makes this a failure)"
            );
            eprintln!("SKIPPED html browser test: chromium not found");
            None
        }
    }
}

fn write_page(b: &Browser, name: &str, html: &[u8]) -> PathBuf {
    let p = b.scratch.0.join(name);
    std::fs::write(&p, html).unwrap();
    p
}

fn count(dom: &str, needle: &str) -> usize {
    dom.matches(needle).count()
}

/// The bars of one node summary (`requestedMilliCpu`, ... as in `-o json`).
fn assert_bars(dom: &str, nodes: &Value, phase: &str) {
    for n in nodes.as_array().unwrap() {
        let name = n["name"].as_str().unwrap();
        for (resource, req, alloc) in [
            ("cpu", "requestedMilliCpu", "allocatableMilliCpu"),
            ("memory", "requestedMemoryBytes", "allocatableMemoryBytes"),
        ] {
            let attrs = format!(
                "data-node=\"{name}\" data-resource=\"{resource}\" data-phase=\"{phase}\" data-requested=\"{}\" data-allocatable=\"{}\"",
                n[req], n[alloc]
            );
            assert_eq!(count(dom, &attrs), 1, "bar {attrs}");
        }
    }
}

/// Every heatmap cell of one explanation: totals on feasible nodes, ✗ on
/// the others, the selected node outlined.
fn assert_heatmap_row(dom: &str, e: &Value) {
    let pod = e["pod"].as_str().unwrap();
    for n in e["nodes"].as_array().unwrap() {
        let node = n["name"].as_str().unwrap();
        let cell = if n["feasible"].as_bool().unwrap() {
            let selected = if e["selectedNode"].as_str() == Some(node) {
                " selected"
            } else {
                ""
            };
            format!(
                "<td class=\"cell feasible{selected}\" data-pod=\"{pod}\" data-node=\"{node}\" data-total=\"{}\"",
                n["total"]
            )
        } else {
            format!("<td class=\"cell infeasible\" data-pod=\"{pod}\" data-node=\"{node}\"")
        };
        assert_eq!(count(dom, &cell), 1, "heatmap cell {cell}");
    }
}

fn assert_png(path: &Path) {
    let png = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n"),
        "not a PNG: {}",
        path.display()
    );
    let w = u32::from_be_bytes(png[16..20].try_into().unwrap());
    let h = u32::from_be_bytes(png[20..24].try_into().unwrap());
    assert_eq!((w, h), (1400, 1200), "screenshot size");
    // A blank page compresses to a few KB; the rendered report is ~100 KB.
    assert!(
        png.len() > 20_000,
        "screenshot looks blank: {} bytes",
        png.len()
    );
}

#[test]
fn html_reports_render_in_chromium() {
    let Some(mut b) = browser() else {
        return;
    };

    // simulate --explain: bars before/after, one heatmap row per pod,
    // the unschedulable pod with its FailedScheduling message.
    let args = [
        "simulate",
        "--cluster",
        "examples/preemption/cluster.yaml",
        "--explain",
    ];
    let report = json(&args);
    let page = write_page(
        &b,
        "simulate.html",
        &rkube(&[&args[..], &["-o", "html"]].concat()),
    );
    let dom = b.dump_dom(&page);
    let nodes = report["nodes"].as_array().unwrap().len();
    assert_eq!(count(&dom, "<rect class=\"bar\""), nodes * 2 * 2);
    assert_bars(&dom, &report["nodes"], "after");
    let placements = report["placements"].as_array().unwrap();
    assert_eq!(count(&dom, "<tr class=\"pod\""), placements.len());
    assert_eq!(
        count(&dom, "<td class=\"cell "),
        placements.len() * nodes,
        "one heatmap cell per pod and node"
    );
    for p in placements {
        assert_heatmap_row(&dom, &p["explain"]);
    }
    let pending: Vec<&Value> = placements.iter().filter(|p| p["node"].is_null()).collect();
    assert!(!pending.is_empty(), "the example leaves a pod pending");
    assert_eq!(
        count(&dom, "<tr class=\"unschedulable-pod\""),
        pending.len()
    );
    for p in pending {
        let msg = p["message"].as_str().unwrap();
        assert!(msg.starts_with("0/"), "{msg}");
        assert!(dom.contains(msg), "FailedScheduling message shown: {msg}");
    }
    // Before the run (not in -o json): a bar per node and resource.
    assert_eq!(count(&dom, "data-phase=\"before\""), nodes * 2);
    let shot = b.scratch.0.join("simulate.png");
    b.run(&page, &[format!("--screenshot={}", shot.display())]);
    assert_png(&shot);

    // simulate without --explain: bars, no heatmap.
    let cluster = "examples/image-locality/cluster.yaml";
    let page = write_page(
        &b,
        "plain.html",
        &rkube(&["simulate", "--cluster", cluster, "-o", "html"]),
    );
    let dom = b.dump_dom(&page);
    let report = json(&["simulate", "--cluster", cluster]);
    assert_bars(&dom, &report["nodes"], "after");
    assert_eq!(count(&dom, "<td class=\"cell "), 0);
    assert!(dom.contains("Every pod was scheduled."));

    // explain: one heatmap row, the cluster's current requests.
    let args = [
        "explain",
        "--cluster",
        cluster,
        "--pod",
        "test-5/mysql-server-1",
    ];
    let e = json(&args);
    let page = write_page(
        &b,
        "explain.html",
        &rkube(&[&args[..], &["-o", "html"]].concat()),
    );
    let dom = b.dump_dom(&page);
    assert_eq!(count(&dom, "<tr class=\"pod\""), 1);
    assert_heatmap_row(&dom, &e);
    assert_eq!(count(&dom, "<td class=\"cell feasible selected\""), 1);
    assert_eq!(
        count(&dom, "<rect class=\"bar\""),
        e["nodes"].as_array().unwrap().len() * 2
    );

    // compare: both configurations side by side, the moved pods listed.
    let args = [
        "compare",
        "--cluster",
        cluster,
        "--config",
        "examples/image-locality/config-disable-imagelocality.yaml",
    ];
    let c = json(&args);
    let page = write_page(
        &b,
        "compare.html",
        &rkube(&[&args[..], &["-o", "html"]].concat()),
    );
    let dom = b.dump_dom(&page);
    assert_eq!(count(&dom, "<section class=\"config\""), 2);
    assert!(dom.contains("<section class=\"config\" data-config=\"A\""));
    assert!(dom.contains("<section class=\"config\" data-config=\"B\""));
    let moved = c["moved"].as_array().unwrap();
    assert!(!moved.is_empty());
    assert_eq!(count(&dom, "<tr class=\"moved-pod\""), moved.len());
    let nodes = c["a"]["nodes"].as_array().unwrap().len();
    assert_eq!(count(&dom, "<rect class=\"bar\""), 2 * nodes * 2 * 2);
    let shot = b.scratch.0.join("compare.png");
    b.run(&page, &[format!("--screenshot={}", shot.display())]);
    assert_png(&shot);
}
