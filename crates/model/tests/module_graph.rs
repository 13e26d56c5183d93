//! The model crate's modules must not import each other in a circle: a
//! loader of one kind (`expand`, `volumes`) depends on `raw` and `cluster`,
//! never on `load`, which drives them all. This reads the crate's own source
//! and fails on any cycle among `crate::module` references (comments are
//! skipped, test modules included).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

fn references(text: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let code = line.trim_start();
        if code.starts_with("//") {
            continue;
        }
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if modules.contains(&name) {
                out.insert(name);
            }
        }
        // `use crate::{a, b::C}` groups.
        if let Some(group) = code.strip_prefix("use crate::{") {
            for part in group.split([',', '}']) {
                let name = part.trim().split("::").next().unwrap_or("").to_string();
                if modules.contains(&name) {
                    out.insert(name);
                }
            }
        }
    }
    out
}

fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
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
            if next != node {
                if let Some(c) = visit(next, graph, state, path) {
                    return Some(c);
                }
            }
        }
        path.pop();
        state.insert(node.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for node in graph.keys() {
        if let Some(c) = visit(node, graph, &mut state, &mut Vec::new()) {
            return Some(c);
        }
    }
    None
}

#[test]
fn model_modules_form_no_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut texts = BTreeMap::new();
    for entry in std::fs::read_dir(&src).expect("read src") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "rs") {
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            if name != "lib" {
                texts.insert(name, std::fs::read_to_string(&path).expect("read"));
            }
        }
    }
    assert!(texts.len() > 5, "found only {:?}", texts.keys());
    let modules: BTreeSet<String> = texts.keys().cloned().collect();
    let graph: BTreeMap<String, BTreeSet<String>> = texts
        .iter()
        .map(|(name, text)| (name.clone(), references(text, &modules)))
        .collect();
    assert!(
        graph["load"].contains("expand") && graph["expand"].contains("raw"),
        "the reference scan found too little: {graph:?}"
    );
    if let Some(cycle) = find_cycle(&graph) {
        panic!(
            "model modules import each other in a circle: {}",
            cycle.join(" -> ")
        );
    }
}

#[test]
fn the_cycle_finder_finds_cycles() {
    let graph: BTreeMap<String, BTreeSet<String>> =
        [("a", vec!["b"]), ("b", vec!["c"]), ("c", vec!["a"])]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
            .collect();
    assert_eq!(
        find_cycle(&graph),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
}
