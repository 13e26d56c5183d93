//! Documents of a cluster file before conversion: one file's text split into
//! [`RawObject`]s (multi-document YAML, JSON, `List`s flattened), and the
//! [`LoadError`] every loader returns.
//!
//! This module does no I/O: callers hand it each file's name and text. It
//! imports nothing else from the crate but `convert`'s message clipping, so
//! the loaders of each kind (`load`, `expand`, `volumes`) can all depend on
//! it without depending on each other.

use serde::de::DeserializeOwned;
use serde_json::Value;

use rkube_util::strict::StrictValue;

use crate::convert::{self, FieldError};

/// Why a cluster file was rejected. Always names the file; names the object
/// and the field when the problem is inside one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.render())]
pub struct LoadError {
    /// File name as given.
    pub file: String,
    /// `Kind namespace/name` of the object, when known.
    pub object: Option<String>,
    /// Field path inside the object, when known.
    pub field: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl LoadError {
    fn render(&self) -> String {
        let mut s = self.file.clone();
        if let Some(o) = &self.object {
            s.push_str(": ");
            s.push_str(o);
        }
        if let Some(f) = &self.field {
            s.push_str(": ");
            s.push_str(f);
        }
        s.push_str(": ");
        s.push_str(&self.message);
        s
    }
}

/// A document taken from a file, before conversion.
#[derive(Debug, Clone)]
pub struct RawObject {
    /// File it came from.
    pub file: String,
    /// `kind`.
    pub kind: String,
    /// `metadata.namespace/metadata.name` or `metadata.name`.
    pub display_name: String,
    /// The object.
    pub value: Value,
}

impl RawObject {
    /// `Kind ns/name`.
    pub fn describe(&self) -> String {
        format!("{} {}", self.kind, self.display_name)
    }

    pub(crate) fn error(&self, field: Option<String>, message: impl Into<String>) -> LoadError {
        LoadError {
            file: self.file.clone(),
            object: Some(convert::clip_message(self.describe())),
            field: field.map(convert::clip_message),
            message: convert::clip_message(message.into()),
        }
    }

    pub(crate) fn field_error(&self, e: FieldError) -> LoadError {
        self.error(Some(e.path), e.message)
    }

    /// Deserializes into a k8s-openapi type, naming the field on failure.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, LoadError> {
        serde_path_to_error::deserialize(&self.value).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner().to_string();
            self.error((path != ".").then_some(path), inner)
        })
    }
}

/// Splits one file's text into objects (YAML multi-doc, JSON, `List`s flattened).
pub fn parse_documents(file: &str, text: &str) -> Result<Vec<RawObject>, LoadError> {
    parse_documents_noting(file, text, &mut Vec::new())
}

/// [`parse_documents`], adding a warning to `warnings` for every key written
/// twice in one mapping (the last value is used, as a plain decode would).
pub fn parse_documents_noting(
    file: &str,
    text: &str,
    warnings: &mut Vec<String>,
) -> Result<Vec<RawObject>, LoadError> {
    let file_err = |message: String| file_error(file, message);
    let mut docs: Vec<StrictValue> = Vec::new();
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        let stream = serde_json::Deserializer::from_str(text).into_iter::<StrictValue>();
        for v in stream {
            docs.push(v.map_err(|e| file_err(format!("invalid JSON: {e}")))?);
        }
    } else {
        for doc in serde_yaml_ng::Deserializer::from_str(text) {
            let v: StrictValue = serde::Deserialize::deserialize(doc)
                .map_err(|e| file_err(format!("invalid YAML: {e}")))?;
            docs.push(v);
        }
    }
    objects_of(file, docs, warnings)
}

/// [`parse_documents_noting`] of a file known to be JSON (one or more
/// documents), read from `reader` as it is parsed: the text is never held
/// whole beside its parsed form (how large cluster files are loaded).
pub fn parse_json_reader_noting(
    file: &str,
    reader: impl std::io::Read,
    warnings: &mut Vec<String>,
) -> Result<Vec<RawObject>, LoadError> {
    let mut docs: Vec<StrictValue> = Vec::new();
    for v in serde_json::Deserializer::from_reader(reader).into_iter::<StrictValue>() {
        docs.push(v.map_err(|e| {
            file_error(
                file,
                if e.is_io() {
                    format!("reading failed: {e}")
                } else {
                    format!("invalid JSON: {e}")
                },
            )
        })?);
    }
    objects_of(file, docs, warnings)
}

fn file_error(file: &str, message: String) -> LoadError {
    LoadError {
        file: file.to_string(),
        object: None,
        field: None,
        message,
    }
}

/// The objects of a file's parsed documents, with a warning per duplicate
/// key.
fn objects_of(
    file: &str,
    docs: Vec<StrictValue>,
    warnings: &mut Vec<String>,
) -> Result<Vec<RawObject>, LoadError> {
    let mut out = Vec::new();
    for (i, doc) in docs.into_iter().enumerate() {
        let at = format!("document {}", i + 1);
        for path in &doc.duplicates {
            warnings.push(convert::clip_message(format!(
                "{file}: {at}: {path}: duplicate key, the last value is used (the API server's strict field validation, kubectl's default, refuses duplicate fields)"
            )));
        }
        flatten(file, doc.value, &at, &mut out)?;
    }
    Ok(out)
}

fn flatten(file: &str, doc: Value, at: &str, out: &mut Vec<RawObject>) -> Result<(), LoadError> {
    let file_err = |message: String| LoadError {
        file: file.to_string(),
        object: Some(at.to_string()),
        field: None,
        message,
    };
    let mut obj = match doc {
        Value::Null => return Ok(()),
        Value::Array(items) => {
            for (i, item) in items.into_iter().enumerate() {
                flatten(file, item, &format!("{at} item {i}"), out)?;
            }
            return Ok(());
        }
        Value::Object(o) => o,
        other => {
            return Err(file_err(format!(
                "expected a Kubernetes object, found {}",
                type_name(&other)
            )))
        }
    };
    let kind = match obj.get("kind") {
        Some(Value::String(k)) if !k.is_empty() => k.clone(),
        _ => return Err(file_err("kind: Required value".to_string())),
    };
    if !matches!(obj.get("apiVersion"), Some(Value::String(v)) if !v.is_empty()) {
        return Err(file_err(format!("{kind}: apiVersion: Required value")));
    }
    if kind == "List" || kind.ends_with("List") {
        // Moved out, not copied: a list is most of a large file.
        let items = match obj.remove("items") {
            Some(Value::Array(items)) => items,
            Some(Value::Null) | None => Vec::new(),
            Some(_) => return Err(file_err(format!("{kind}: items: must be a list"))),
        };
        drop(obj);
        for (i, item) in items.into_iter().enumerate() {
            flatten(file, item, &format!("{at} items[{i}]"), out)?;
        }
        return Ok(());
    }
    let meta = obj.get("metadata");
    let name = meta
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let ns = meta
        .and_then(|m| m.get("namespace"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let display_name = if name.is_empty() {
        format!("({at})")
    } else if ns.is_empty() {
        name.to_string()
    } else {
        format!("{ns}/{name}")
    };
    out.push(RawObject {
        file: file.to_string(),
        kind,
        display_name,
        value: Value::Object(obj),
    });
    Ok(())
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}
