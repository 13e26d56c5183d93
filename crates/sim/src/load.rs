//! Reading cluster files and configuration files from disk.

use std::path::{Path, PathBuf};

use rkube_config::KubeSchedulerConfiguration;
use rkube_model::load::{build_owned, parse_documents_noting, RawObject};
use rkube_model::raw::parse_json_reader_noting;
use rkube_model::{Cluster, LoadError};

use crate::SimError;

fn io_error(path: &Path, e: std::io::Error) -> SimError {
    SimError::Input(format!("{}: {e}", path.display()))
}

/// Most cluster files one directory tree may hold.
const MAX_FILES: usize = 100_000;

/// Files of a cluster path: the file itself, or the `*.yaml|*.yml|*.json`
/// files of a directory (recursively), sorted by name.
///
/// Symlinks are followed, but a directory is entered once (by device and
/// inode), so a symlink loop ends the walk instead of hanging it; entries
/// that are neither files nor directories (FIFOs, sockets, devices) are
/// refused by [`read_input`] when they carry a cluster-file extension.
pub fn cluster_files(path: &Path) -> Result<Vec<PathBuf>, SimError> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).map_err(|e| io_error(path, e))?;
    if !meta.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    seen.insert((meta.dev(), meta.ino()));
    let mut stack = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).map_err(|e| io_error(&dir, e))? {
            let p = entry.map_err(|e| io_error(&dir, e))?.path();
            // A dangling symlink has no metadata: skip it like any non-file.
            let Ok(m) = std::fs::metadata(&p) else {
                continue;
            };
            if m.is_dir() {
                if seen.insert((m.dev(), m.ino())) {
                    stack.push(p);
                }
            } else if matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("yaml" | "yml" | "json")
            ) {
                out.push(p);
                if out.len() > MAX_FILES {
                    return Err(SimError::Input(format!(
                        "{}: more than {MAX_FILES} cluster files in this directory tree",
                        path.display()
                    )));
                }
            }
        }
    }
    out.sort();
    if out.is_empty() {
        return Err(SimError::Input(format!(
            "{}: no .yaml, .yml or .json files in this directory",
            path.display()
        )));
    }
    Ok(out)
}

/// Reads one input file: a regular file of at most 1 GiB, as UTF-8.
pub fn read_input(path: &Path) -> Result<String, SimError> {
    rkube_util::file::read_text(path, rkube_util::file::DEFAULT_MAX_BYTES)
        .map_err(|e| io_error(path, e))
}

/// Where a cluster comes from.
#[derive(Debug, Clone, Copy)]
pub enum ClusterInput<'a> {
    /// A cluster file or a directory of them.
    Path(&'a Path),
    /// Objects already read, as one JSON or YAML text (a `List`, e.g. what
    /// `rkube snapshot` would write for a live cluster); `label` names it in
    /// messages.
    Text {
        /// What messages call the source (e.g. `kubeconfig admin.conf`).
        label: &'a str,
        /// The text.
        text: &'a str,
    },
}

impl ClusterInput<'_> {
    /// How messages and reports name the source.
    pub fn label(&self) -> String {
        match self {
            ClusterInput::Path(p) => p.display().to_string(),
            ClusterInput::Text { label, .. } => label.to_string(),
        }
    }
}

/// The objects of a cluster input, noting duplicate keys.
fn cluster_objects(
    input: ClusterInput<'_>,
    warnings: &mut Vec<String>,
) -> Result<Vec<RawObject>, SimError> {
    let path = match input {
        ClusterInput::Text { label, text } => {
            return parse_documents_noting(label, text, warnings).map_err(SimError::Load)
        }
        ClusterInput::Path(path) => path,
    };
    let mut objects = Vec::new();
    for f in cluster_files(path)? {
        objects.extend(file_objects(&f, warnings)?);
    }
    Ok(objects)
}

/// The objects of one file. A JSON file is parsed as it is read, so that a
/// large one is never held whole beside its parsed form; anything else (and
/// a file over the size limit, refused there) is read as text first.
fn file_objects(f: &Path, warnings: &mut Vec<String>) -> Result<Vec<RawObject>, SimError> {
    use std::io::{BufRead, BufReader, Read};
    let label = f.display().to_string();
    let max = rkube_util::file::DEFAULT_MAX_BYTES;
    let file = rkube_util::file::open_regular(f).map_err(|e| io_error(f, e))?;
    let small = file.metadata().map_err(|e| io_error(f, e))?.len() <= max;
    let mut reader = BufReader::with_capacity(1 << 20, file.take(max));
    // Skip leading whitespace up to the first byte: JSON starts with `{` or
    // `[` (what parse_documents_noting decides on for text).
    let json = small
        && loop {
            let buf = reader.fill_buf().map_err(|e| io_error(f, e))?;
            if buf.is_empty() {
                break false;
            }
            match buf.iter().position(|b| !b" \t\r\n".contains(b)) {
                Some(i) => {
                    let c = buf[i];
                    reader.consume(i);
                    break c == b'{' || c == b'[';
                }
                None => {
                    let n = buf.len();
                    reader.consume(n);
                }
            }
        };
    if json {
        return parse_json_reader_noting(&label, reader, warnings).map_err(SimError::Load);
    }
    let text = read_input(f)?;
    parse_documents_noting(&label, &text, warnings).map_err(SimError::Load)
}

/// Loads a cluster from a file or directory.
pub fn load_cluster(path: &Path) -> Result<Cluster, SimError> {
    load_cluster_from(ClusterInput::Path(path))
}

/// Compiles every CEL device selector of DeviceClasses, ResourceClaims and
/// ResourceClaimTemplates, as the API server does when they are created:
/// one that does not compile is refused, naming its file, object and field.
fn validate_selectors(objects: &[RawObject]) -> Result<(), LoadError> {
    fn check(o: &RawObject, selectors: &serde_json::Value, path: &str) -> Result<(), LoadError> {
        for (i, s) in selectors.as_array().into_iter().flatten().enumerate() {
            let Some(expr) = s["cel"]["expression"].as_str() else {
                continue;
            };
            if let Err(e) = rkube_dra::cel::Selector::compile(expr) {
                return Err(LoadError {
                    file: o.file.clone(),
                    object: Some(o.describe()),
                    field: Some(format!("{path}[{i}].cel.expression")),
                    message: rkube_model::convert::clip_message(format!(
                        "Invalid value: {expr:?}: {e}"
                    )),
                });
            }
        }
        Ok(())
    }
    fn requests(o: &RawObject, devices: &serde_json::Value, path: &str) -> Result<(), LoadError> {
        for (i, r) in devices["requests"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let p = format!("{path}.requests[{i}]");
            check(
                o,
                &r["exactly"]["selectors"],
                &format!("{p}.exactly.selectors"),
            )?;
            for (j, s) in r["firstAvailable"]
                .as_array()
                .into_iter()
                .flatten()
                .enumerate()
            {
                check(
                    o,
                    &s["selectors"],
                    &format!("{p}.firstAvailable[{j}].selectors"),
                )?;
            }
        }
        Ok(())
    }
    for o in objects {
        match o.kind.as_str() {
            "DeviceClass" => check(o, &o.value["spec"]["selectors"], "spec.selectors")?,
            "ResourceClaim" => requests(o, &o.value["spec"]["devices"], "spec.devices")?,
            "ResourceClaimTemplate" => {
                requests(o, &o.value["spec"]["spec"]["devices"], "spec.spec.devices")?
            }
            _ => {}
        }
    }
    Ok(())
}

/// Loads a cluster from any [`ClusterInput`].
pub fn load_cluster_from(input: ClusterInput<'_>) -> Result<Cluster, SimError> {
    let mut warnings = Vec::new();
    let objects = cluster_objects(input, &mut warnings)?;
    validate_selectors(&objects).map_err(SimError::Load)?;
    let mut cluster = build_owned(objects, &mut |_| Ok(false)).map_err(SimError::Load)?;
    warnings.append(&mut cluster.warnings);
    cluster.warnings = warnings;
    Ok(cluster)
}

/// Loads a cluster together with pod shapes for `rkube capacity`: each
/// shape file holds one Pod, decoded with the cluster's objects (so its
/// PriorityClass and namespace resolve as they would in the cluster) and
/// then taken out of the cluster. Returns the cluster and, per shape file,
/// the pod.
pub fn load_cluster_and_shapes(
    input: ClusterInput<'_>,
    shapes: &[PathBuf],
) -> Result<(Cluster, Vec<rkube_model::Pod>), SimError> {
    let mut warnings = Vec::new();
    let mut objects = cluster_objects(input, &mut warnings)?;
    let mut keys = Vec::with_capacity(shapes.len());
    for f in shapes {
        let file = f.display().to_string();
        let text = read_input(f)?;
        let objs = parse_documents_noting(&file, &text, &mut warnings).map_err(SimError::Load)?;
        let [obj] = objs.as_slice() else {
            return Err(SimError::Input(format!(
                "{file}: a pod shape file holds exactly one Pod, found {} objects",
                objs.len()
            )));
        };
        if obj.kind != "Pod" {
            return Err(SimError::Input(format!(
                "{file}: {}: kind: a pod shape file holds one Pod",
                obj.describe()
            )));
        }
        let meta = &obj.value["metadata"];
        let ns = meta["namespace"]
            .as_str()
            .filter(|s| !s.is_empty())
            .unwrap_or("default");
        let name = meta["name"].as_str().unwrap_or("");
        keys.push((file, format!("{ns}/{name}")));
        objects.push(obj.clone());
    }
    validate_selectors(&objects).map_err(SimError::Load)?;
    let mut cluster = build_owned(objects, &mut |_| Ok(false)).map_err(SimError::Load)?;
    let mut pods = Vec::with_capacity(keys.len());
    for (file, key) in keys {
        let i = cluster
            .pods
            .iter()
            .position(|p| p.key() == key)
            .ok_or_else(|| {
                SimError::Input(format!("{file}: Pod {key}: not found after loading"))
            })?;
        let pod = cluster.pods.remove(i);
        if !pod.node_name.is_empty() {
            return Err(SimError::Input(format!(
                "{file}: Pod {key}: spec.nodeName: a pod shape must be pending (no nodeName)"
            )));
        }
        pods.push(pod);
    }
    warnings.append(&mut cluster.warnings);
    cluster.warnings = warnings;
    Ok((cluster, pods))
}

/// Loads a KubeSchedulerConfiguration, or the defaults when `path` is `None`.
pub fn load_config(path: Option<&Path>) -> Result<KubeSchedulerConfiguration, SimError> {
    load_config_gated(path, false)
}

/// [`load_config`] with the GenericWorkload gate as given.
pub fn load_config_gated(
    path: Option<&Path>,
    generic_workload: bool,
) -> Result<KubeSchedulerConfiguration, SimError> {
    match path {
        None => Ok(rkube_config::default_config_gated(generic_workload)),
        Some(p) => {
            let text = read_input(p)?;
            let cfg =
                rkube_config::load_str_gated(&p.display().to_string(), &text, generic_workload)
                    .map_err(SimError::Config)?;
            // Build the profiles once here too, so that plugin errors (unknown
            // or removed names, invalid args) name the file like other errors.
            rkube_plugins::profiles(&cfg)
                .map_err(SimError::from)
                .map_err(|e| match e {
                    SimError::Framework(m) => SimError::Framework(format!("{}: {m}", p.display())),
                    other => other,
                })?;
            Ok(cfg)
        }
    }
}

impl From<LoadError> for SimError {
    fn from(e: LoadError) -> Self {
        SimError::Load(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(name: &str, text: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rkube-load-{}-{name}", std::process::id()));
        std::fs::write(&d, text).unwrap();
        d
    }

    /// A JSON file parsed as it is read gives what its text gives: the same
    /// objects, the same duplicate-key warnings, and errors naming the file.
    #[test]
    fn json_read_as_parsed_matches_the_text() {
        let text = r#"
  {"apiVersion": "v1", "kind": "List", "items": [
    {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "name": "n2"},
     "status": {"allocatable": {"cpu": "4", "pods": "10"}}},
    {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "a"},
     "spec": {"containers": [{"name": "c", "image": "i"}]}}]}
  {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}}"#;
        let f = write("ok.json", text);
        let label = f.display().to_string();
        let (mut w_file, mut w_text) = (Vec::new(), Vec::new());
        let from_file = file_objects(&f, &mut w_file).unwrap();
        let from_text = parse_documents_noting(&label, text, &mut w_text).unwrap();
        let shape = |o: &[RawObject]| -> Vec<(String, String, String, serde_json::Value)> {
            o.iter()
                .map(|o| {
                    let v = o.value.clone();
                    (o.file.clone(), o.kind.clone(), o.display_name.clone(), v)
                })
                .collect()
        };
        assert_eq!(from_file.len(), 3);
        assert_eq!(shape(&from_file), shape(&from_text));
        assert_eq!(w_file, w_text);
        assert_eq!(w_file.len(), 1, "{w_file:?}");

        let bad = write("bad.json", "{\"apiVersion\": \"v1\", \"kind\": ");
        let e = match file_objects(&bad, &mut Vec::new()) {
            Err(SimError::Load(e)) => e,
            other => panic!("{other:?}"),
        };
        assert_eq!(e.file, bad.display().to_string());
        assert!(e.message.starts_with("invalid JSON: "), "{}", e.message);

        // Not JSON: read as text (YAML), as before.
        let yaml = write(
            "ok.yaml",
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: b}\n",
        );
        let objs = file_objects(&yaml, &mut Vec::new()).unwrap();
        assert_eq!(objs[0].display_name, "b");
        for p in [f, bad, yaml] {
            let _ = std::fs::remove_file(p);
        }
    }
}
