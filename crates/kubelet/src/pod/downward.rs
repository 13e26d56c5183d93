//! The downward API (pure): pod fields (`fieldRef`) and container
//! resources (`resourceFieldRef`) as strings, for environment variables and
//! downwardAPI volume files alike, with upstream's formats:
//!
//! * `metadata.labels` / `metadata.annotations` (volumes only): one
//!   `key="value"` line per entry, keys sorted, values quoted as Go's
//!   `strconv.Quote`, no trailing newline;
//! * `resourceFieldRef`: the value divided by the divisor (default `1`),
//!   rounded up; CPU in thousandths; an unset limit reads as the node's
//!   allocatable (upstream's `MergeContainerResourceLimits`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, ResourceFieldSelector};
use kube::ResourceExt;
use rkube_model::quantity::Quantity;

use super::pod_namespace;

/// What the downward API resolves against besides the pod object.
#[derive(Debug, Clone, Default)]
pub struct DownwardContext {
    /// The pod IPs (first is `status.podIP`); empty before the sandbox has one.
    pub pod_ips: Vec<String>,
    /// The node's IPs (first is `status.hostIP`).
    pub host_ips: Vec<String>,
    /// The node's allocatable (`cpu`, `memory`, `ephemeral-storage`, ...),
    /// what an unset limit reads as.
    pub node_allocatable: BTreeMap<String, Quantity>,
}

/// Where a field reference is used: volumes also take the whole label and
/// annotation maps; environment variables also take IPs, node and
/// service-account names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Use {
    /// `env[].valueFrom.fieldRef`.
    Env,
    /// `downwardAPI.items[].fieldRef`.
    Volume,
}

/// Go's `strconv.Quote` for what labels and annotations hold: `"` and `\`
/// escaped, control characters and invalid text as escapes.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{07}' => out.push_str("\\a"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{0b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if c.is_control() => {
                let v = c as u32;
                if v <= 0xffff {
                    out.push_str(&format!("\\u{v:04x}"))
                } else {
                    out.push_str(&format!("\\U{v:08x}"))
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Upstream's `FormatMap`: sorted `key="value"` lines.
pub fn format_map(m: &BTreeMap<String, String>) -> String {
    m.iter()
        .map(|(k, v)| format!("{k}={}", go_quote(v)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `metadata.labels['key']` → (`metadata.labels`, `key`).
fn subscript(path: &str) -> Option<(&str, &str)> {
    let s = path.strip_suffix("']")?;
    let (base, key) = s.split_once("['")?;
    (!base.is_empty()).then_some((base, key))
}

/// The value of `fieldRef.fieldPath` for `pod`, or the reason it cannot be
/// resolved (upstream's wording: `unsupported fieldPath: ...`).
pub fn field_ref(
    pod: &Pod,
    path: &str,
    ctx: &DownwardContext,
    used: Use,
) -> Result<String, String> {
    if let Some((base, key)) = subscript(path) {
        return match base {
            "metadata.labels" => Ok(pod.labels().get(key).cloned().unwrap_or_default()),
            "metadata.annotations" => Ok(pod.annotations().get(key).cloned().unwrap_or_default()),
            _ => Err(format!("fieldPath {path:?} does not support subscript")),
        };
    }
    let spec = pod.spec.as_ref();
    let joined = |ips: &[String]| ips.join(",");
    Ok(match (path, used) {
        ("metadata.name", _) => pod.name_any(),
        ("metadata.namespace", _) => pod_namespace(pod),
        ("metadata.uid", _) => pod.uid().unwrap_or_default(),
        ("metadata.labels", Use::Volume) => format_map(pod.labels()),
        ("metadata.annotations", Use::Volume) => format_map(pod.annotations()),
        ("spec.nodeName", Use::Env) => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        ("spec.serviceAccountName", Use::Env) => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        ("status.podIP", Use::Env) => ctx.pod_ips.first().cloned().unwrap_or_default(),
        ("status.podIPs", Use::Env) => joined(&ctx.pod_ips),
        ("status.hostIP", Use::Env) => ctx.host_ips.first().cloned().unwrap_or_default(),
        ("status.hostIPs", Use::Env) => joined(&ctx.host_ips),
        _ => return Err(format!("unsupported fieldPath: {path}")),
    })
}

/// The container named `name` among the pod's containers and init
/// containers.
pub fn find_container<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    let spec = pod.spec.as_ref()?;
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == name)
}

/// The value of `resourceFieldRef` for container `c` (upstream's
/// `ExtractContainerResourceValue` after merging node allocatable into
/// unset limits).
pub fn resource_field_ref(
    c: &Container,
    sel: &ResourceFieldSelector,
    ctx: &DownwardContext,
) -> Result<String, String> {
    let divisor = match &sel.divisor {
        Some(d) => Quantity::parse(&d.0)
            .map_err(|e| format!("resourceFieldRef {}: divisor {:?}: {e}", sel.resource, d.0))?,
        None => Quantity::from_units(1),
    };
    let divisor = if divisor.is_zero() {
        Quantity::from_units(1)
    } else {
        divisor
    };
    let (kind, name) = sel
        .resource
        .split_once('.')
        .ok_or_else(|| format!("unsupported container resource : {}", sel.resource))?;
    let list = c.resources.as_ref().and_then(|r| match kind {
        "limits" => r.limits.as_ref(),
        "requests" => r.requests.as_ref(),
        _ => None,
    });
    let known =
        matches!(name, "cpu" | "memory" | "ephemeral-storage") || name.starts_with("hugepages-");
    if !matches!(kind, "limits" | "requests") || !known {
        return Err(format!("unsupported container resource : {}", sel.resource));
    }
    let set = list
        .and_then(|l| l.get(name))
        .map(|q| Quantity::parse(&q.0).map_err(|e| format!("{}: {:?}: {e}", sel.resource, q.0)))
        .transpose()?;
    let value = match set {
        Some(v) => v,
        None if kind == "limits" && !name.starts_with("hugepages-") => {
            ctx.node_allocatable.get(name).copied().unwrap_or_default()
        }
        None => Quantity::default(),
    };
    let ceil_div = |a: i64, b: i64| -> i64 {
        if b == 0 {
            return 0;
        }
        (a as f64 / b as f64).ceil() as i64
    };
    let out = if name == "cpu" {
        ceil_div(value.milli_value(), divisor.milli_value())
    } else {
        ceil_div(value.value(), divisor.value())
    };
    Ok(out.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "u1",
                         "labels": {"b": "2", "a": "x\"y"}, "annotations": {"k": "v"}},
            "spec": {"nodeName": "n1", "serviceAccountName": "sa", "containers": [
                {"name": "c", "image": "i", "resources": {
                    "requests": {"cpu": "250m", "memory": "64Mi"},
                    "limits": {"memory": "128Mi"}}}]}
        }))
        .unwrap()
    }

    fn ctx() -> DownwardContext {
        DownwardContext {
            pod_ips: vec!["10.0.0.5".into(), "fd00::5".into()],
            host_ips: vec!["192.168.1.1".into()],
            node_allocatable: [
                ("cpu".to_string(), Quantity::parse("2").unwrap()),
                ("memory".to_string(), Quantity::parse("4Gi").unwrap()),
            ]
            .into_iter()
            .collect(),
        }
    }

    #[test]
    fn field_refs_resolve_as_upstream() {
        let p = pod();
        let c = ctx();
        let f = |path, u| field_ref(&p, path, &c, u);
        assert_eq!(f("metadata.name", Use::Env).unwrap(), "web");
        assert_eq!(f("metadata.namespace", Use::Volume).unwrap(), "ns");
        assert_eq!(f("metadata.labels['a']", Use::Env).unwrap(), "x\"y");
        assert_eq!(f("metadata.labels['missing']", Use::Env).unwrap(), "");
        assert_eq!(
            f("metadata.labels", Use::Volume).unwrap(),
            "a=\"x\\\"y\"\nb=\"2\""
        );
        assert_eq!(f("metadata.annotations", Use::Volume).unwrap(), "k=\"v\"");
        assert_eq!(f("status.podIPs", Use::Env).unwrap(), "10.0.0.5,fd00::5");
        assert_eq!(f("status.hostIP", Use::Env).unwrap(), "192.168.1.1");
        assert_eq!(f("spec.serviceAccountName", Use::Env).unwrap(), "sa");
        assert_eq!(
            f("spec.nodeName", Use::Volume).unwrap_err(),
            "unsupported fieldPath: spec.nodeName"
        );
        assert_eq!(
            f("metadata.labels", Use::Env).unwrap_err(),
            "unsupported fieldPath: metadata.labels"
        );
        assert!(f("spec['x']", Use::Env)
            .unwrap_err()
            .contains("does not support subscript"));
    }

    #[test]
    fn go_quote_escapes_as_strconv_quote() {
        assert_eq!(go_quote("a\tb\u{1}é"), "\"a\\tb\\x01é\"");
        assert_eq!(go_quote("\u{85}"), "\"\\u0085\"");
    }

    #[test]
    fn resource_fields_divide_round_up_and_default_limits_to_allocatable() {
        let p = pod();
        let c = &p.spec.as_ref().unwrap().containers[0];
        let r = |res: &str, div: Option<&str>| {
            let sel = ResourceFieldSelector {
                resource: res.into(),
                divisor: div
                    .map(|d| k8s_openapi::apimachinery::pkg::api::resource::Quantity(d.into())),
                container_name: None,
            };
            resource_field_ref(c, &sel, &ctx())
        };
        assert_eq!(
            r("requests.cpu", None).unwrap(),
            "1",
            "250m rounds up to 1 core"
        );
        assert_eq!(r("requests.cpu", Some("1m")).unwrap(), "250");
        assert_eq!(
            r("limits.cpu", None).unwrap(),
            "2",
            "unset limit = allocatable"
        );
        assert_eq!(r("limits.memory", Some("1Mi")).unwrap(), "128");
        assert_eq!(
            r("requests.memory", None).unwrap(),
            (64 * 1024 * 1024).to_string()
        );
        assert_eq!(r("limits.ephemeral-storage", None).unwrap(), "0");
        assert_eq!(
            r("limits.gpu", None).unwrap_err(),
            "unsupported container resource : limits.gpu"
        );
    }
}
