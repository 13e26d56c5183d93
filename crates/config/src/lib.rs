//! `KubeSchedulerConfiguration` (`kubescheduler.config.k8s.io/v1`): strict
//! decoding, upstream v1.37 defaulting (default plugins, weights, plugin
//! args), plugin-set merging and validation with upstream's field paths.
//!
//! ```
//! let cfg = rkube_config::load_str("cfg.yaml", "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n").unwrap();
//! assert_eq!(cfg.profiles[0].scheduler_name.as_deref(), Some("default-scheduler"));
//! ```

pub mod args;
pub mod defaults;
pub use rkube_util::duration;
pub mod error;
pub mod types;
pub mod validate;

pub use error::{FieldError, FieldErrors};
pub use types::*;

/// The only supported API version.
pub const API_VERSION: &str = "kubescheduler.config.k8s.io/v1";

/// Why a configuration was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// Not YAML/JSON at all.
    #[error("{file}: invalid YAML: {message}")]
    Syntax {
        /// File name.
        file: String,
        /// Parser message.
        message: String,
    },
    /// Wrong or removed apiVersion / kind.
    #[error("{file}: {message}")]
    Version {
        /// File name.
        file: String,
        /// What is wrong and what to use.
        message: String,
    },
    /// Field-level errors (decoding or validation).
    #[error("{file}: {errors}")]
    Invalid {
        /// File name.
        file: String,
        /// The errors.
        errors: FieldErrors,
    },
}

/// The configuration kube-scheduler runs without `--config`.
pub fn default_config() -> KubeSchedulerConfiguration {
    default_config_gated(false)
}

/// [`default_config`] with the GenericWorkload gate as given.
pub fn default_config_gated(generic_workload: bool) -> KubeSchedulerConfiguration {
    let mut cfg = KubeSchedulerConfiguration {
        api_version: API_VERSION.into(),
        kind: "KubeSchedulerConfiguration".into(),
        generic_workload,
        ..Default::default()
    };
    defaults::set_defaults(&mut cfg).expect("defaults of an empty config are valid");
    cfg
}

/// Decodes, defaults and validates a configuration file's text.
pub fn load_str(file: &str, text: &str) -> Result<KubeSchedulerConfiguration, ConfigError> {
    load_str_gated(file, text, false)
}

/// [`load_str`] with the GenericWorkload gate as given (it adds a default
/// plugin).
pub fn load_str_gated(
    file: &str,
    text: &str,
    generic_workload: bool,
) -> Result<KubeSchedulerConfiguration, ConfigError> {
    let mut cfg = decode_str(file, text)?;
    cfg.generic_workload = generic_workload;
    let invalid = |errors: FieldErrors| ConfigError::Invalid {
        file: file.into(),
        errors,
    };
    defaults::set_defaults(&mut cfg).map_err(invalid)?;
    validate::validate(&cfg).map_err(invalid)?;
    Ok(cfg)
}

/// Decodes a configuration file's text strictly (apiVersion, kind, unknown
/// fields), without defaulting or validating: the configuration as written.
pub fn decode_str(file: &str, text: &str) -> Result<KubeSchedulerConfiguration, ConfigError> {
    let strict = rkube_util::strict::from_yaml_str(text).map_err(|e| ConfigError::Syntax {
        file: file.into(),
        message: e.to_string(),
    })?;
    // kube-scheduler's strict decoder refuses a field written twice in one
    // mapping (YAMLToJSONStrict); a plain decode would keep the last.
    if let Some(path) = strict.duplicates.first() {
        let key = path.rsplit('.').next().unwrap_or(path);
        return Err(ConfigError::Invalid {
            file: file.into(),
            errors: FieldErrors::single(
                path.clone(),
                format!(
                    "strict decoding error: yaml: unmarshal errors: key {key:?} already set in map"
                ),
            ),
        });
    }
    let value = strict.value;
    let version_err = |message: String| ConfigError::Version {
        file: file.into(),
        message,
    };
    let obj = value
        .as_object()
        .ok_or_else(|| version_err("expected a KubeSchedulerConfiguration object".into()))?;
    let api_version = obj.get("apiVersion").and_then(|v| v.as_str()).unwrap_or("");
    let kind = obj.get("kind").and_then(|v| v.as_str()).unwrap_or("");
    match api_version {
        API_VERSION => {}
        "kubescheduler.config.k8s.io/v1beta1"
        | "kubescheduler.config.k8s.io/v1beta2"
        | "kubescheduler.config.k8s.io/v1beta3"
        | "kubescheduler.config.k8s.io/v1alpha1"
        | "kubescheduler.config.k8s.io/v1alpha2" => {
            return Err(version_err(format!(
                "apiVersion: {api_version} was removed from kube-scheduler (v1beta3 in v1.29, v1beta2 in v1.28, v1beta1 in v1.26); use apiVersion: {API_VERSION} (plugin names and pluginConfig args carry over; removed plugins such as NodeResourcesLeastAllocated must be replaced)"
            )))
        }
        "" => return Err(version_err("apiVersion: Required value".into())),
        other => {
            return Err(version_err(format!(
                "apiVersion: no kind \"{kind}\" is registered for version \"{other}\"; use apiVersion: {API_VERSION}"
            )))
        }
    }
    if kind != "KubeSchedulerConfiguration" {
        return Err(version_err(format!(
            "kind: {kind:?} is not KubeSchedulerConfiguration"
        )));
    }
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        ConfigError::Invalid {
            file: file.into(),
            errors: FieldErrors::single(path, format!("strict decoding error: {}", e.into_inner())),
        }
    })
}

impl Profile {
    /// The args JSON for a plugin (after defaulting), or `Null`.
    pub fn plugin_args(&self, name: &str) -> serde_json::Value {
        self.plugin_config
            .iter()
            .find(|pc| pc.name == name)
            .map(|pc| pc.args.clone())
            .unwrap_or(serde_json::Value::Null)
    }
}

#[cfg(test)]
mod tests;
