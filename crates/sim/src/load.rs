//! Reading cluster files and configuration files from disk.

use std::path::{Path, PathBuf};

use rkube_config::KubeSchedulerConfiguration;
use rkube_model::cluster::{build, parse_documents};
use rkube_model::{Cluster, LoadError};

use crate::SimError;

fn io_error(path: &Path, e: std::io::Error) -> SimError {
    SimError::Input(format!("{}: {e}", path.display()))
}

/// Files of a cluster path: the file itself, or the `*.yaml|*.yml|*.json`
/// files of a directory (recursively), sorted by name.
pub fn cluster_files(path: &Path) -> Result<Vec<PathBuf>, SimError> {
    let meta = std::fs::metadata(path).map_err(|e| io_error(path, e))?;
    if meta.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut out = Vec::new();
    let mut stack = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).map_err(|e| io_error(&dir, e))? {
            let p = entry.map_err(|e| io_error(&dir, e))?.path();
            if p.is_dir() {
                stack.push(p);
            } else if matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("yaml" | "yml" | "json")
            ) {
                out.push(p);
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

/// Loads a cluster from a file or directory.
pub fn load_cluster(path: &Path) -> Result<Cluster, SimError> {
    let mut objects = Vec::new();
    for f in cluster_files(path)? {
        let text = std::fs::read_to_string(&f).map_err(|e| io_error(&f, e))?;
        objects.extend(parse_documents(&f.display().to_string(), &text).map_err(SimError::Load)?);
    }
    build(&objects, &mut |_| Ok(false)).map_err(SimError::Load)
}

/// Loads a KubeSchedulerConfiguration, or the defaults when `path` is `None`.
pub fn load_config(path: Option<&Path>) -> Result<KubeSchedulerConfiguration, SimError> {
    match path {
        None => Ok(rkube_config::default_config()),
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|e| io_error(p, e))?;
            let cfg = rkube_config::load_str(&p.display().to_string(), &text)
                .map_err(SimError::Config)?;
            // Build the profiles once here too, so that plugin errors (unknown
            // or removed names, invalid args) name the file like other errors.
            crate::Profiles::new(&cfg).map_err(|e| match e {
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
