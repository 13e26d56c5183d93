//! The layering rules of every crate of the workspace, read from the
//! source: a crate's top-level modules never import each other in a
//! circle, and in a crate with floors (the table below, kept with
//! CONTRIBUTING.md's "Where things live") no module imports a module of a
//! higher floor. References are `crate::module` paths (and `use crate::{…}`
//! groups) outside comments and test modules (`#[cfg(test)]` to the end of
//! a file, `tests.rs` and `*_tests.rs`: tests may use helpers that use the
//! module under test); a module is a `src/X.rs` file or a `src/X/` folder
//! with everything beneath it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Floors, lowest first, of the crates that have them. A module may use
/// modules of its own floor or lower ones (never in a circle).
const FLOORS: &[(&str, &[&[&str]])] = &[
    (
        "kubelet",
        &[
            // Base: configuration, flags, metrics, Events, container logs
            // (reading and rotating them), the crash-loop back-off, watched
            // ConfigMaps and Secrets, the shared cluster-wide watches
            // (informer), the node's certificates (bootstrap, rotation).
            &[
                "config",
                "options",
                "histogram",
                "timeline",
                "metrics",
                "events",
                "logs",
                "backoff",
                "scratch",
                "objects",
                "informer",
                "certificates",
                "checkpoint",
                "socket",
            ],
            // Pod-level facts every manager reads.
            &["pod"],
            // Managers that need no runtime; the node's figures (stats);
            // the pod-resources API (what it reports comes from below).
            &[
                "volumes",
                "images",
                "prober",
                "network",
                "stats",
                "podresources",
                "cm",
                "allocation",
                "devices",
                "dra",
                "pluginmanager",
            ],
            // The runtime: the trait, the sim, CRI (plan, execution, specs).
            &["runtime"],
            // Pods (dispatcher, workers, status), the relist that wakes
            // them (PLEG), the node (status, heartbeat, lease) and the
            // garbage collector of what they leave.
            &["pods", "pleg", "node", "gc"],
            // What watches pods and the node from outside: eviction, the
            // kubelet's HTTP(S) server (the kubelet API, /healthz), graceful
            // node shutdown.
            &["eviction", "server", "shutdown"],
        ],
    ),
    (
        "framework",
        &[
            // The data a cycle reads and writes, and the host's interfaces.
            &[
                "status",
                "cycle_state",
                "node_info",
                "snapshot",
                "nominator",
                "diagnosis",
                "metrics",
                "waiting",
                "pod_group",
                "sorted_nodes",
                "score_memo",
                "host",
            ],
            // What a plugin is: its extension points and cluster events.
            &["plugin", "events"],
            // A profile's plugins.
            &["framework", "profiles"],
            // Running them: the extension points, the binding cycle.
            &["extension_points", "binding"],
            // OpportunisticBatching over the scoring passes.
            &["batch"],
            // The algorithm (upstream's schedule_one.go).
            &["schedule_one"],
            // What drivers call: explanations, failures, the in-memory host.
            &["explain", "failure", "in_memory"],
            // The pod-group cycle's algorithm, over all of the above.
            &["pod_group_cycle"],
            // Its PodGroupPostFilter point, which reruns the pass.
            &["pod_group_post_filter"],
        ],
    ),
];

fn workspace_crates() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("crates/")
        .to_path_buf()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            // Test files of a folder module (`tests.rs`, `*_tests.rs`).
            let stem = p.file_stem().unwrap_or_default().to_string_lossy();
            if stem != "tests" && !stem.ends_with("_tests") {
                out.push(p);
            }
        }
    }
}

/// Module name → the text of every file of it.
fn modules(src: &Path) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    let Ok(rd) = std::fs::read_dir(src) else {
        return out;
    };
    for e in rd.flatten() {
        let p = e.path();
        let stem = p.file_stem().unwrap().to_string_lossy().into_owned();
        if p.is_dir() {
            let mut files = Vec::new();
            rust_files(&p, &mut files);
            let text = files
                .iter()
                .map(|f| std::fs::read_to_string(f).expect("read"))
                .collect::<Vec<_>>()
                .join(FILE_BREAK);
            out.entry(stem).or_default().push_str(&text);
        } else if p.extension().is_some_and(|x| x == "rs") && stem != "lib" && stem != "main" {
            let text = std::fs::read_to_string(&p).expect("read");
            out.entry(stem).or_default().push_str(&text);
        }
    }
    out
}

/// Between the files of a folder module in the text scanned.
const FILE_BREAK: &str = "\n//@ next file\n";

/// The modules of `names` that `text` refers to as `crate::module`.
fn references(text: &str, names: &BTreeSet<String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut in_tests = false;
    for line in text.lines() {
        let code = line.trim_start();
        if code == FILE_BREAK.trim() {
            in_tests = false;
        }
        // A file's test module (at its end, by convention) may use test
        // helpers that use the module under test.
        if code.starts_with("#[cfg(test)]") {
            in_tests = true;
        }
        if in_tests || code.starts_with("//") {
            continue;
        }
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let before = &code[..code.len() - rest.len() + at];
            rest = &rest[at + "crate::".len()..];
            // `rkube_model::…` is another crate; `$crate::` a macro's own.
            if before.ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == '$') {
                continue;
            }
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if names.contains(&name) {
                out.insert(name);
            }
            if let Some(group) = rest.strip_prefix('{') {
                for part in group.split([',', '}']) {
                    let n = part.trim().split("::").next().unwrap_or("").to_string();
                    if names.contains(&n) {
                        out.insert(n);
                    }
                }
            }
        }
    }
    out
}

type Graph = BTreeMap<String, BTreeSet<String>>;

fn graph_of(mods: &BTreeMap<String, String>) -> Graph {
    let names: BTreeSet<String> = mods.keys().cloned().collect();
    mods.iter()
        .map(|(n, text)| {
            let mut refs = references(text, &names);
            refs.remove(n);
            (n.clone(), refs)
        })
        .collect()
}

fn find_cycle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &Graph,
        state: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match state.get(node) {
            Some(2) => return None,
            Some(1) => {
                let start = path.iter().position(|p| p == node).unwrap_or(0);
                let mut cycle = path[start..].to_vec();
                cycle.push(node.to_string());
                return Some(cycle);
            }
            _ => {}
        }
        state.insert(node.to_string(), 1);
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, graph, state, path) {
                return Some(c);
            }
        }
        path.pop();
        state.insert(node.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut state, &mut Vec::new()))
}

/// Every breach of `floors` in `graph`: unknown modules and upward imports.
fn breaches(graph: &Graph, floors: &[&[&str]]) -> Vec<String> {
    let floor = |m: &str| floors.iter().position(|f| f.contains(&m));
    let mut out = Vec::new();
    for (m, refs) in graph {
        let Some(fm) = floor(m) else {
            out.push(format!("module `{m}` has no floor in FLOORS"));
            continue;
        };
        for r in refs {
            match floor(r) {
                Some(fr) if fr > fm => out.push(format!(
                    "`{m}` (floor {fm}) imports `{r}` (floor {fr}), a higher floor"
                )),
                _ => {}
            }
        }
    }
    out
}

#[test]
fn every_crate_keeps_its_layering() {
    let root = workspace_crates();
    let mut checked = 0;
    let mut problems = Vec::new();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .expect("crates/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("src").is_dir())
        .collect();
    dirs.sort();
    for dir in dirs {
        let krate = dir.file_name().unwrap().to_string_lossy().into_owned();
        let graph = graph_of(&modules(&dir.join("src")));
        if let Some(cycle) = find_cycle(&graph) {
            problems.push(format!("{krate}: a circle: {}", cycle.join(" -> ")));
        }
        if let Some((_, floors)) = FLOORS.iter().find(|(k, _)| *k == krate) {
            for b in breaches(&graph, floors) {
                problems.push(format!("{krate}: {b}"));
            }
        }
        checked += 1;
    }
    assert!(checked >= 10, "found only {checked} crates under {root:?}");
    assert!(
        problems.is_empty(),
        "layering broken:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_scan_sees_the_kubelets_imports() {
    let graph = graph_of(&modules(&workspace_crates().join("kubelet/src")));
    assert!(
        graph["runtime"].contains("volumes") && graph["pods"].contains("runtime"),
        "the reference scan found too little: {graph:?}"
    );
    assert!(graph["eviction"].contains("node"), "{graph:?}");
    let model = graph_of(&modules(&workspace_crates().join("model/src")));
    assert!(
        model["load"].contains("expand") && model["expand"].contains("raw"),
        "{model:?}"
    );
}

#[test]
fn a_planted_upward_import_and_a_circle_are_found() {
    let mods: BTreeMap<String, String> = [
        ("pod", "use crate::runtime::Runtime; // planted upward import"),
        ("runtime", "use crate::{pod::Dirs, volumes};"),
        ("volumes", "fn f() { crate::pod::pod_namespace(p); }"),
        (
            "other",
            "use rkube_model::crate_like; // another crate\n// use crate::pod;\n#[cfg(test)]\nuse crate::runtime;",
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let graph = graph_of(&mods);
    assert!(graph["other"].is_empty(), "{graph:?}");
    let floors: &[&[&str]] = &[&["pod"], &["volumes"], &["runtime", "other"]];
    assert_eq!(
        breaches(&graph, floors),
        ["`pod` (floor 0) imports `runtime` (floor 2), a higher floor"]
    );
    assert_eq!(
        find_cycle(&graph),
        Some(vec!["pod".into(), "runtime".into(), "pod".into()])
    );
    let unknown: &[&[&str]] = &[&["pod", "volumes"]];
    assert!(breaches(&graph, unknown)
        .iter()
        .any(|b| b.contains("`runtime` has no floor")));
}
