//! A container's environment (pure), as upstream's kubelet builds it
//! (`makeEnvironmentVariables` in `pkg/kubelet/kubelet_pods.go`, the
//! service links of `pkg/kubelet/envvars`, and the `$(VAR)` syntax of
//! `third_party/forked/golang/expansion`).
//!
//! Precedence, lowest first:
//!
//! 1. **service links**: the variables of the master service (`kubernetes`
//!    in `default`) always — even with `enableServiceLinks: false` — and,
//!    when `spec.enableServiceLinks` is true (the API's default; unset reads
//!    as true here), those of every Service of the pod's namespace; a
//!    namespace Service named like the master service replaces it. Only
//!    Services with a cluster IP (not `None`, not empty) count. These are
//!    the *fallback*: any variable the pod defines itself wins;
//! 2. **`envFrom`**, in order: every `data` key of the ConfigMap (or Secret)
//!    with the optional `prefix`; keys are taken as they are (v1.37 no longer
//!    skips keys that are not C identifiers, nor emits an event); a missing
//!    object is an error unless `optional: true`;
//! 3. **`env`**, in order: a non-empty `value` is `$(VAR)`-expanded against
//!    what is defined so far (envFrom and earlier `env` entries, then service
//!    links; undefined references stay as written); otherwise `valueFrom`:
//!    `fieldRef`, `resourceFieldRef` (unset limits read as the node's
//!    allocatable, or the pod-level limit when the pod sets one, as
//!    upstream's `defaultPodLimitsForDownwardAPI`), `configMapKeyRef`,
//!    `secretKeyRef` (a missing object or key is skipped when `optional`,
//!    else an error). Later definitions replace earlier ones.
//!
//! Order of the result: upstream returns its map in Go's random order; here
//! variables keep the position of their first definition, then the service
//! links the pod did not define (services by name, each in
//! `envvars.FromServices` order). Every name appears once.
//!
//! Errors are upstream's messages, for `CreateContainerConfigError`:
//! `configmap "x" not found`, `secret "s" not found` (the wording of the
//! kubelet's watch-based object manager), `couldn't find key k in ConfigMap
//! ns/x`, `couldn't find key k in Secret ns/s`, `container c not found`
//! (a `resourceFieldRef.containerName` naming no container).
//!
//! Not supported (refused, fail closed): `valueFrom.fileKeyRef` (EnvFiles,
//! beta in v1.37), which needs the host path of a pod volume.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{
    ConfigMap, Container, EnvVar, EnvVarSource, Pod, Secret, Service,
};
use kube::ResourceExt;
use rkube_model::quantity::Quantity;

use super::downward::{self, go_quote, DownwardContext, Use};
use super::pod_namespace;

/// The objects environment variables may read, fetched by the caller (by
/// name, in the pod's namespace; absent = not found). [`references`] says
/// which names to fetch.
#[derive(Debug, Clone, Copy)]
pub struct EnvSources<'a> {
    /// ConfigMaps of the pod's namespace by name.
    pub config_maps: &'a HashMap<String, ConfigMap>,
    /// Secrets of the pod's namespace by name.
    pub secrets: &'a HashMap<String, Secret>,
    /// The Services of the pod's namespace (objects of another namespace are
    /// ignored; one without a namespace counts as the pod's).
    pub services: &'a [Service],
    /// The master service (`kubernetes` in `default`), whose variables every
    /// pod gets whatever its `enableServiceLinks` says; `None` when the
    /// kubelet runs without an API server.
    pub master_service: Option<&'a Service>,
    /// What the downward API resolves against (pod and host IPs, node
    /// allocatable).
    pub downward: &'a DownwardContext,
}

/// The ConfigMaps and Secrets the environment of a pod's containers reads
/// (containers, init containers and ephemeral containers).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnvRefs {
    /// ConfigMap name → `true` when every reference to it is optional.
    pub config_maps: BTreeMap<String, bool>,
    /// Secret name → `true` when every reference to it is optional.
    pub secrets: BTreeMap<String, bool>,
}

/// Variables in first-definition order, later values replacing earlier.
#[derive(Default)]
struct OrderedEnv {
    vars: Vec<(String, String)>,
    index: HashMap<String, usize>,
    /// Bytes of every name and value.
    bytes: usize,
}

/// Most bytes a container's environment (names and values), or its
/// expanded command and args, may take: four times Linux's default
/// `ARG_MAX` (2 MiB), past which no exec could start the container anyway.
/// `$(VAR)` expansion can double a value per variable (`B=$(A)$(A)`,
/// `C=$(B)$(B)`, ...), so without a bound a 1 KiB pod spec could make the
/// kubelet allocate terabytes.
pub const MAX_EXPANDED_BYTES: usize = 8 << 20;

impl OrderedEnv {
    /// Sets `name`; `false` when the environment grows past
    /// [`MAX_EXPANDED_BYTES`].
    #[must_use]
    fn set(&mut self, name: String, value: String) -> bool {
        match self.index.get(&name) {
            Some(&i) => {
                self.bytes = self.bytes - self.vars[i].1.len() + value.len();
                self.vars[i].1 = value;
            }
            None => {
                self.bytes += name.len() + value.len();
                self.index.insert(name.clone(), self.vars.len());
                self.vars.push((name, value));
            }
        }
        self.bytes <= MAX_EXPANDED_BYTES
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.index.get(name).map(|&i| self.vars[i].1.as_str())
    }
}

/// upstream's `IsServiceIPSet`: a cluster IP that is neither empty nor `None`.
fn has_cluster_ip(s: &Service) -> bool {
    let ip = s
        .spec
        .as_ref()
        .and_then(|sp| sp.cluster_ip.as_deref())
        .unwrap_or("");
    !ip.is_empty() && ip != "None"
}

/// A Service name as a variable prefix: upper case, `-` → `_`.
fn var_name(s: &str) -> String {
    s.replace('-', "_").to_uppercase()
}

/// Go's `net.JoinHostPort`: IPv6 hosts in brackets.
fn join_host_port(host: &str, port: i32) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The service-link variables of `services`, in order, exactly as
/// `envvars.FromServices`: `<NAME>_SERVICE_HOST`, `<NAME>_SERVICE_PORT`
/// (first port), `<NAME>_SERVICE_PORT_<PORTNAME>` for each named port, then
/// the Docker-link variables `<NAME>_PORT` (first port) and, per port,
/// `<NAME>_PORT_<port>_<PROTO>` with `_PROTO`, `_PORT` and `_ADDR`.
/// Services without a cluster IP (headless, `None`, empty) or without
/// ports are skipped.
pub fn service_env(services: &[&Service]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for s in services {
        if !has_cluster_ip(s) {
            continue;
        }
        let spec = s.spec.as_ref().expect("has_cluster_ip implies a spec");
        let ip = spec.cluster_ip.as_deref().unwrap_or_default();
        let ports = spec.ports.as_deref().unwrap_or_default();
        let Some(first) = ports.first() else {
            continue;
        };
        let prefix = var_name(&s.name_any());
        out.push((format!("{prefix}_SERVICE_HOST"), ip.to_string()));
        let port_var = format!("{prefix}_SERVICE_PORT");
        out.push((port_var.clone(), first.port.to_string()));
        for p in ports {
            if let Some(name) = p.name.as_deref().filter(|n| !n.is_empty()) {
                out.push((format!("{port_var}_{}", var_name(name)), p.port.to_string()));
            }
        }
        for (i, p) in ports.iter().enumerate() {
            let proto = p
                .protocol
                .as_deref()
                .filter(|p| !p.is_empty())
                .unwrap_or("TCP");
            let lower = proto.to_lowercase();
            let url = format!("{lower}://{}", join_host_port(ip, p.port));
            if i == 0 {
                // Docker special-cases the first port
                out.push((format!("{prefix}_PORT"), url.clone()));
            }
            let pp = format!("{prefix}_PORT_{}_{}", p.port, proto.to_uppercase());
            out.push((pp.clone(), url));
            out.push((format!("{pp}_PROTO"), lower));
            out.push((format!("{pp}_PORT"), p.port.to_string()));
            out.push((format!("{pp}_ADDR"), ip.to_string()));
        }
    }
    out
}

/// The service-link variables a pod in `namespace` sees (upstream's
/// `getServiceEnvVarMap`), services ordered by name.
fn pod_service_env(namespace: &str, links: bool, src: &EnvSources) -> Vec<(String, String)> {
    let mut by_name: BTreeMap<String, &Service> = BTreeMap::new();
    if let Some(m) = src.master_service.filter(|m| has_cluster_ip(m)) {
        by_name.insert(m.name_any(), m);
    }
    if links {
        for s in src.services {
            let ours = s
                .metadata
                .namespace
                .as_deref()
                .is_none_or(|n| n == namespace);
            if ours && has_cluster_ip(s) {
                by_name.insert(s.name_any(), s);
            }
        }
    }
    let services: Vec<&Service> = by_name.into_values().collect();
    service_env(&services)
}

/// Looks up a ConfigMap: `Ok(None)` when it is missing and `optional`.
fn config_map<'a>(
    src: &EnvSources<'a>,
    name: &str,
    optional: bool,
) -> Result<Option<&'a ConfigMap>, String> {
    match src.config_maps.get(name) {
        Some(cm) => Ok(Some(cm)),
        None if optional => Ok(None),
        None => Err(format!("configmap {} not found", go_quote(name))),
    }
}

/// Looks up a Secret: `Ok(None)` when it is missing and `optional`.
fn secret<'a>(
    src: &EnvSources<'a>,
    name: &str,
    optional: bool,
) -> Result<Option<&'a Secret>, String> {
    match src.secrets.get(name) {
        Some(s) => Ok(Some(s)),
        None if optional => Ok(None),
        None => Err(format!("secret {} not found", go_quote(name))),
    }
}

fn secret_text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Pod-level limits (cpu, memory) that are set and non-zero replace the
/// node's allocatable as what unset container limits read as (upstream's
/// `defaultPodLimitsForDownwardAPI`, PodLevelResources on by default).
fn downward_context_for(pod: &Pod, base: &DownwardContext) -> DownwardContext {
    let mut ctx = base.clone();
    let limits = pod
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.limits.as_ref());
    let Some(limits) = limits else {
        return ctx;
    };
    let pod_level_limits_set = limits
        .keys()
        .any(|k| k == "cpu" || k == "memory" || k.starts_with("hugepages-"));
    if !pod_level_limits_set {
        return ctx;
    }
    for name in ["cpu", "memory"] {
        let Some(q) = limits.get(name).and_then(|q| Quantity::parse(&q.0).ok()) else {
            continue;
        };
        if !q.is_zero() && ctx.node_allocatable.contains_key(name) {
            ctx.node_allocatable.insert(name.to_string(), q);
        }
    }
    ctx
}

/// The value of one `valueFrom`; `Ok(None)` when an optional source is
/// missing (the variable is then not set at all).
fn value_from(
    pod: &Pod,
    c: &Container,
    e: &EnvVar,
    from: &EnvVarSource,
    src: &EnvSources,
    namespace: &str,
) -> Result<Option<String>, String> {
    if let Some(f) = &from.field_ref {
        return downward::field_ref(pod, &f.field_path, src.downward, Use::Env).map(Some);
    }
    if let Some(r) = &from.resource_field_ref {
        let target = match r.container_name.as_deref().filter(|n| !n.is_empty()) {
            Some(name) => downward::find_container(pod, name)
                .ok_or_else(|| format!("container {name} not found"))?,
            None => c,
        };
        let ctx = downward_context_for(pod, src.downward);
        return downward::resource_field_ref(target, r, &ctx).map(Some);
    }
    if let Some(r) = &from.config_map_key_ref {
        let optional = r.optional.unwrap_or(false);
        let Some(cm) = config_map(src, &r.name, optional)? else {
            return Ok(None);
        };
        return match cm.data.as_ref().and_then(|d| d.get(&r.key)) {
            Some(v) => Ok(Some(v.clone())),
            None if optional => Ok(None),
            None => Err(format!(
                "couldn't find key {} in ConfigMap {namespace}/{}",
                r.key, r.name
            )),
        };
    }
    if let Some(r) = &from.secret_key_ref {
        let optional = r.optional.unwrap_or(false);
        let Some(s) = secret(src, &r.name, optional)? else {
            return Ok(None);
        };
        return match s.data.as_ref().and_then(|d| d.get(&r.key)) {
            Some(v) => Ok(Some(secret_text(&v.0))),
            None if optional => Ok(None),
            None => Err(format!(
                "couldn't find key {} in Secret {namespace}/{}",
                r.key, r.name
            )),
        };
    }
    if from.file_key_ref.is_some() {
        return Err(format!(
            "env {}: valueFrom.fileKeyRef is not supported by rkube",
            e.name
        ));
    }
    // A valueFrom naming no source: upstream leaves the value empty.
    Ok(Some(String::new()))
}

/// The environment of container `c` of `pod`, with upstream's precedence
/// (see the module docs). `Err` is the `CreateContainerConfigError`
/// message.
pub fn container_env(
    pod: &Pod,
    c: &Container,
    src: &EnvSources,
) -> Result<Vec<(String, String)>, String> {
    let namespace = pod_namespace(pod);
    let links = pod
        .spec
        .as_ref()
        .and_then(|s| s.enable_service_links)
        .unwrap_or(true);
    let services = pod_service_env(&namespace, links, src);
    let service_index: HashMap<&str, &str> = services
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();

    let too_big = || {
        format!(
            "the environment of container {} is larger than {} MiB",
            c.name,
            MAX_EXPANDED_BYTES >> 20
        )
    };
    let mut env = OrderedEnv::default();
    for from in c.env_from.iter().flatten() {
        let prefix = from.prefix.as_deref().unwrap_or("");
        if let Some(r) = &from.config_map_ref {
            if let Some(cm) = config_map(src, &r.name, r.optional.unwrap_or(false))? {
                for (k, v) in cm.data.iter().flatten() {
                    if !env.set(format!("{prefix}{k}"), v.clone()) {
                        return Err(too_big());
                    }
                }
            }
        } else if let Some(r) = &from.secret_ref {
            if let Some(s) = secret(src, &r.name, r.optional.unwrap_or(false))? {
                for (k, v) in s.data.iter().flatten() {
                    if !env.set(format!("{prefix}{k}"), secret_text(&v.0)) {
                        return Err(too_big());
                    }
                }
            }
        }
    }

    for e in c.env.iter().flatten() {
        let value = match (e.value.as_deref(), &e.value_from) {
            (Some(v), _) if !v.is_empty() => {
                let room = MAX_EXPANDED_BYTES.saturating_sub(env.bytes);
                let lookup = |name: &str| {
                    env.get(name)
                        .or_else(|| service_index.get(name).copied())
                        .map(str::to_string)
                };
                expand(v, lookup, room).ok_or_else(too_big)?
            }
            (_, Some(from)) => match value_from(pod, c, e, from, src, &namespace)? {
                Some(v) => v,
                None => continue,
            },
            _ => String::new(),
        };
        if !env.set(e.name.clone(), value) {
            return Err(too_big());
        }
    }

    let mut out = std::mem::take(&mut env.vars);
    for (k, v) in services {
        if !env.index.contains_key(&k) {
            out.push((k, v));
        }
    }
    Ok(out)
}

/// upstream's `ExpandContainerCommandAndArgs`: `$(VAR)` in `command` and
/// `args` replaced from the final environment (the last definition of a
/// name wins); undefined references stay as written.
pub fn expand_command_and_args(
    c: &Container,
    env: &[(String, String)],
) -> Result<(Vec<String>, Vec<String>), String> {
    let map: HashMap<&str, &str> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let lookup = |name: &str| map.get(name).map(|v| v.to_string());
    let mut used = 0usize;
    let mut expand_all = |list: &Option<Vec<String>>| -> Result<Vec<String>, String> {
        let mut out = Vec::new();
        for s in list.iter().flatten() {
            let v = expand(s, lookup, MAX_EXPANDED_BYTES - used).ok_or_else(|| {
                format!(
                    "the command and args of container {} are larger than {} MiB",
                    c.name,
                    MAX_EXPANDED_BYTES >> 20
                )
            })?;
            used += v.len();
            out.push(v);
        }
        Ok(out)
    };
    let command = expand_all(&c.command)?;
    let args = expand_all(&c.args)?;
    Ok((command, args))
}

/// upstream's `expansion.Expand`: `$(NAME)` is replaced by `lookup(NAME)`
/// when that is defined and kept as written otherwise; `$$` is an escaped
/// `$`; a `$(` without a closing `)` is kept; `$` before anything else
/// (or at the end) is kept. Names are not nested: the reference ends at the
/// first `)`. `None` when the result would be longer than `limit` bytes.
pub fn expand(
    input: &str,
    lookup: impl Fn(&str) -> Option<String>,
    limit: usize,
) -> Option<String> {
    let bytes = input.as_bytes();
    let mut out = String::with_capacity(input.len());
    let mut checkpoint = 0;
    let mut cursor = 0;
    while cursor < bytes.len() {
        if bytes[cursor] == b'$' && cursor + 1 < bytes.len() {
            out.push_str(&input[checkpoint..cursor]);
            let rest = &input[cursor + 1..];
            // How many bytes after the `$` the operator consumed.
            let consumed = match rest.as_bytes()[0] {
                b'$' => {
                    out.push('$');
                    1
                }
                b'(' => match rest[1..].find(')') {
                    Some(end) => {
                        let name = &rest[1..1 + end];
                        match lookup(name) {
                            Some(v) => out.push_str(&v),
                            None => {
                                out.push_str("$(");
                                out.push_str(name);
                                out.push(')');
                            }
                        }
                        end + 2
                    }
                    None => {
                        out.push_str("$(");
                        1
                    }
                },
                _ => {
                    let ch = rest.chars().next().expect("rest is not empty");
                    out.push('$');
                    out.push(ch);
                    ch.len_utf8()
                }
            };
            cursor += consumed;
            checkpoint = cursor + 1;
            if out.len() > limit {
                return None;
            }
        }
        cursor += 1;
    }
    out.push_str(&input[checkpoint..]);
    (out.len() <= limit).then_some(out)
}

fn note(map: &mut BTreeMap<String, bool>, name: &str, optional: bool) {
    map.entry(name.to_string())
        .and_modify(|all_optional| *all_optional &= optional)
        .or_insert(optional);
}

/// The ConfigMaps and Secrets the environment of every container of `pod`
/// (`envFrom` and `valueFrom` key references) names, so the caller can
/// fetch them before [`container_env`].
pub fn references(pod: &Pod) -> EnvRefs {
    let mut refs = EnvRefs::default();
    let Some(spec) = pod.spec.as_ref() else {
        return refs;
    };
    let containers = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .map(|c| (c.env.as_deref(), c.env_from.as_deref()));
    let ephemeral = spec
        .ephemeral_containers
        .iter()
        .flatten()
        .map(|c| (c.env.as_deref(), c.env_from.as_deref()));
    for (env, env_from) in containers.chain(ephemeral) {
        for from in env_from.unwrap_or_default() {
            if let Some(r) = &from.config_map_ref {
                note(&mut refs.config_maps, &r.name, r.optional.unwrap_or(false));
            }
            if let Some(r) = &from.secret_ref {
                note(&mut refs.secrets, &r.name, r.optional.unwrap_or(false));
            }
        }
        for e in env.unwrap_or_default() {
            let Some(from) = &e.value_from else { continue };
            if let Some(r) = &from.config_map_key_ref {
                note(&mut refs.config_maps, &r.name, r.optional.unwrap_or(false));
            }
            if let Some(r) = &from.secret_key_ref {
                note(&mut refs.secrets, &r.name, r.optional.unwrap_or(false));
            }
        }
    }
    refs
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use serde_json::json;

    // ---- third_party/forked/golang/expansion/expand_test.go ----

    fn mapping(ctx: &[&HashMap<&str, &str>], name: &str) -> Option<String> {
        ctx.iter().find_map(|m| m.get(name).map(|v| v.to_string()))
    }

    fn expansion_cases() -> Vec<(&'static str, &'static str, &'static str)> {
        vec![
            ("whole string", "$(VAR_A)", "A"),
            ("repeat", "$(VAR_A)-$(VAR_A)", "A-A"),
            ("beginning", "$(VAR_A)-1", "A-1"),
            ("middle", "___$(VAR_B)___", "___B___"),
            ("end", "___$(VAR_C)", "___C"),
            ("compound", "$(VAR_A)_$(VAR_B)_$(VAR_C)", "A_B_C"),
            ("escape & expand", "$$(VAR_B)_$(VAR_A)", "$(VAR_B)_A"),
            (
                "compound escape",
                "$$(VAR_A)_$$(VAR_B)",
                "$(VAR_A)_$(VAR_B)",
            ),
            ("mixed in escapes", "f000-$$VAR_A", "f000-$VAR_A"),
            ("backslash escape ignored", "foo\\$(VAR_C)bar", "foo\\Cbar"),
            (
                "backslash escape ignored",
                "foo\\\\$(VAR_C)bar",
                "foo\\\\Cbar",
            ),
            (
                "lots of backslashes",
                "foo\\\\\\\\$(VAR_A)bar",
                "foo\\\\\\\\Abar",
            ),
            (
                "nested var references",
                "$(VAR_A$(VAR_B))",
                "$(VAR_A$(VAR_B))",
            ),
            (
                "nested var references second type",
                "$(VAR_A$(VAR_B)",
                "$(VAR_A$(VAR_B)",
            ),
            ("value is a reference", "$(VAR_REF)", "$(VAR_A)"),
            (
                "value is a reference x 2",
                "%%$(VAR_REF)--$(VAR_REF)%%",
                "%%$(VAR_A)--$(VAR_A)%%",
            ),
            ("empty var", "foo$(VAR_EMPTY)bar", "foobar"),
            (
                "unterminated expression",
                "foo$(VAR_Awhoops!",
                "foo$(VAR_Awhoops!",
            ),
            (
                "expression without operator",
                "f00__(VAR_A)__",
                "f00__(VAR_A)__",
            ),
            ("shell special vars pass through", "$?_boo_$!", "$?_boo_$!"),
            ("bare operators are ignored", "$VAR_A", "$VAR_A"),
            (
                "undefined vars are passed through",
                "$(VAR_DNE)",
                "$(VAR_DNE)",
            ),
            (
                "multiple (even) operators, var undefined",
                "$$$$$$(BIG_MONEY)",
                "$$$(BIG_MONEY)",
            ),
            (
                "multiple (even) operators, var defined",
                "$$$$$$(VAR_A)",
                "$$$(VAR_A)",
            ),
            (
                "multiple (odd) operators, var undefined",
                "$$$$$$$(GOOD_ODDS)",
                "$$$$(GOOD_ODDS)",
            ),
            (
                "multiple (odd) operators, var defined",
                "$$$$$$$(VAR_A)",
                "$$$A",
            ),
            ("missing open expression", "$VAR_A)", "$VAR_A)"),
            ("shell syntax ignored", "${VAR_A}", "${VAR_A}"),
            (
                "trailing incomplete expression not consumed",
                "$(VAR_B)_______$(A",
                "B_______$(A",
            ),
            (
                "trailing incomplete expression, no content, is not consumed",
                "$(VAR_C)_______$(",
                "C_______$(",
            ),
            (
                "operator at end of input string is preserved",
                "$(VAR_A)foobarzab$",
                "Afoobarzab$",
            ),
            (
                "shell escaped incomplete expr",
                "foo-\\$(VAR_A",
                "foo-\\$(VAR_A",
            ),
            ("lots of $( in middle", "--$($($($($--", "--$($($($($--"),
            (
                "lots of $( in beginning",
                "$($($($($--foo$(",
                "$($($($($--foo$(",
            ),
            ("lots of $( at end", "foo0--$($($($(", "foo0--$($($($("),
            (
                "escaped operators in variable names are not escaped",
                "$(foo$$var)",
                "$(foo$$var)",
            ),
            ("newline not expanded", "\n", "\n"),
            (
                "dollar sign followed by non-ASCII UTF-8 character",
                "$£FOO",
                "$£FOO",
            ),
            (
                "dollar sign followed by multi-byte UTF-8 character in middle",
                "prefix-$€-suffix",
                "prefix-$€-suffix",
            ),
            (
                "dollar sign followed by Chinese character",
                "$中文",
                "$中文",
            ),
        ]
    }

    #[test]
    fn expansion_table_single_and_dual_context() {
        let single: HashMap<&str, &str> = [
            ("VAR_A", "A"),
            ("VAR_B", "B"),
            ("VAR_C", "C"),
            ("VAR_REF", "$(VAR_A)"),
            ("VAR_EMPTY", ""),
        ]
        .into_iter()
        .collect();
        let first: HashMap<&str, &str> = [("VAR_A", "A"), ("VAR_EMPTY", "")].into_iter().collect();
        let second: HashMap<&str, &str> = [("VAR_B", "B"), ("VAR_C", "C"), ("VAR_REF", "$(VAR_A)")]
            .into_iter()
            .collect();
        for contexts in [vec![&single], vec![&first, &second]] {
            for (name, input, want) in expansion_cases() {
                let got = expand(input, |n| mapping(&contexts, n), usize::MAX).unwrap();
                assert_eq!(got, want, "{name}: {input:?}");
            }
        }
    }

    #[test]
    fn expansion_map_reference_sees_earlier_results() {
        // TestMapReference: each value expands against what was declared before.
        let mut declared: HashMap<String, String> =
            [("FOO", "bar"), ("ZOO", "$(FOO)-1"), ("BLU", "$(ZOO)-2")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        for (name, value) in [("FOO", "bar"), ("ZOO", "$(FOO)-1"), ("BLU", "$(ZOO)-2")] {
            let v = expand(value, |n| declared.get(n).cloned(), usize::MAX).unwrap();
            declared.insert(name.to_string(), v);
        }
        assert_eq!(declared["FOO"], "bar");
        assert_eq!(declared["ZOO"], "bar-1");
        assert_eq!(declared["BLU"], "bar-1-2");
    }

    // ---- pkg/kubelet/envvars/envvars_test.go ----

    fn svc(name: &str, ns: &str, ip: &str, ports: serde_json::Value) -> Service {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns},
            "spec": {"selector": {"bar": "baz"}, "clusterIP": ip, "ports": ports}
        }))
        .unwrap()
    }

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn service_env_as_envvars_from_services() {
        let list = [
            svc(
                "foo-bar",
                "",
                "1.2.3.4",
                json!([{"port": 8080, "protocol": "TCP"}]),
            ),
            svc(
                "abc-123",
                "",
                "5.6.7.8",
                json!([{"name": "u-d-p", "port": 8081, "protocol": "UDP"},
                       {"name": "t-c-p", "port": 8081, "protocol": "TCP"}]),
            ),
            svc(
                "q-u-u-x",
                "",
                "9.8.7.6",
                json!([{"port": 8082, "protocol": "TCP"}, {"name": "8083", "port": 8083, "protocol": "TCP"}]),
            ),
            svc(
                "svrc-clusterip-none",
                "",
                "None",
                json!([{"port": 8082, "protocol": "TCP"}]),
            ),
            svc(
                "svrc-clusterip-empty",
                "",
                "",
                json!([{"port": 8082, "protocol": "TCP"}]),
            ),
            svc(
                "super-ipv6",
                "",
                "2001:DB8::",
                json!([{"name": "u-d-p", "port": 8084, "protocol": "UDP"},
                       {"name": "t-c-p", "port": 8084, "protocol": "TCP"}]),
            ),
            svc(
                "sctp-1",
                "",
                "1.2.3.4",
                json!([{"port": 777, "protocol": "SCTP"}]),
            ),
        ];
        let refs: Vec<&Service> = list.iter().collect();
        let want = pairs(&[
            ("FOO_BAR_SERVICE_HOST", "1.2.3.4"),
            ("FOO_BAR_SERVICE_PORT", "8080"),
            ("FOO_BAR_PORT", "tcp://1.2.3.4:8080"),
            ("FOO_BAR_PORT_8080_TCP", "tcp://1.2.3.4:8080"),
            ("FOO_BAR_PORT_8080_TCP_PROTO", "tcp"),
            ("FOO_BAR_PORT_8080_TCP_PORT", "8080"),
            ("FOO_BAR_PORT_8080_TCP_ADDR", "1.2.3.4"),
            ("ABC_123_SERVICE_HOST", "5.6.7.8"),
            ("ABC_123_SERVICE_PORT", "8081"),
            ("ABC_123_SERVICE_PORT_U_D_P", "8081"),
            ("ABC_123_SERVICE_PORT_T_C_P", "8081"),
            ("ABC_123_PORT", "udp://5.6.7.8:8081"),
            ("ABC_123_PORT_8081_UDP", "udp://5.6.7.8:8081"),
            ("ABC_123_PORT_8081_UDP_PROTO", "udp"),
            ("ABC_123_PORT_8081_UDP_PORT", "8081"),
            ("ABC_123_PORT_8081_UDP_ADDR", "5.6.7.8"),
            ("ABC_123_PORT_8081_TCP", "tcp://5.6.7.8:8081"),
            ("ABC_123_PORT_8081_TCP_PROTO", "tcp"),
            ("ABC_123_PORT_8081_TCP_PORT", "8081"),
            ("ABC_123_PORT_8081_TCP_ADDR", "5.6.7.8"),
            ("Q_U_U_X_SERVICE_HOST", "9.8.7.6"),
            ("Q_U_U_X_SERVICE_PORT", "8082"),
            ("Q_U_U_X_SERVICE_PORT_8083", "8083"),
            ("Q_U_U_X_PORT", "tcp://9.8.7.6:8082"),
            ("Q_U_U_X_PORT_8082_TCP", "tcp://9.8.7.6:8082"),
            ("Q_U_U_X_PORT_8082_TCP_PROTO", "tcp"),
            ("Q_U_U_X_PORT_8082_TCP_PORT", "8082"),
            ("Q_U_U_X_PORT_8082_TCP_ADDR", "9.8.7.6"),
            ("Q_U_U_X_PORT_8083_TCP", "tcp://9.8.7.6:8083"),
            ("Q_U_U_X_PORT_8083_TCP_PROTO", "tcp"),
            ("Q_U_U_X_PORT_8083_TCP_PORT", "8083"),
            ("Q_U_U_X_PORT_8083_TCP_ADDR", "9.8.7.6"),
            ("SUPER_IPV6_SERVICE_HOST", "2001:DB8::"),
            ("SUPER_IPV6_SERVICE_PORT", "8084"),
            ("SUPER_IPV6_SERVICE_PORT_U_D_P", "8084"),
            ("SUPER_IPV6_SERVICE_PORT_T_C_P", "8084"),
            ("SUPER_IPV6_PORT", "udp://[2001:DB8::]:8084"),
            ("SUPER_IPV6_PORT_8084_UDP", "udp://[2001:DB8::]:8084"),
            ("SUPER_IPV6_PORT_8084_UDP_PROTO", "udp"),
            ("SUPER_IPV6_PORT_8084_UDP_PORT", "8084"),
            ("SUPER_IPV6_PORT_8084_UDP_ADDR", "2001:DB8::"),
            ("SUPER_IPV6_PORT_8084_TCP", "tcp://[2001:DB8::]:8084"),
            ("SUPER_IPV6_PORT_8084_TCP_PROTO", "tcp"),
            ("SUPER_IPV6_PORT_8084_TCP_PORT", "8084"),
            ("SUPER_IPV6_PORT_8084_TCP_ADDR", "2001:DB8::"),
            ("SCTP_1_SERVICE_HOST", "1.2.3.4"),
            ("SCTP_1_SERVICE_PORT", "777"),
            ("SCTP_1_PORT", "sctp://1.2.3.4:777"),
            ("SCTP_1_PORT_777_SCTP", "sctp://1.2.3.4:777"),
            ("SCTP_1_PORT_777_SCTP_PROTO", "sctp"),
            ("SCTP_1_PORT_777_SCTP_PORT", "777"),
            ("SCTP_1_PORT_777_SCTP_ADDR", "1.2.3.4"),
        ]);
        assert_eq!(service_env(&refs), want);
    }

    // ---- pkg/kubelet/kubelet_pods_test.go TestMakeEnvironmentVariables ----

    struct World {
        services: Vec<Service>,
        master: Service,
        config_maps: HashMap<String, ConfigMap>,
        secrets: HashMap<String, Secret>,
        downward: DownwardContext,
    }

    fn one_port(name: &str, ns: &str, ip: &str, port: i32) -> Service {
        svc(name, ns, ip, json!([{"protocol": "TCP", "port": port}]))
    }

    fn world() -> World {
        // upstream's service list, as a lister would return it; the caller
        // passes the pod namespace's services and the master service.
        let services = vec![
            one_port("kubernetes", "default", "1.2.3.1", 8081),
            one_port("test", "test1", "1.2.3.3", 8083),
            one_port("kubernetes", "test2", "1.2.3.4", 8084),
            one_port("test", "test2", "1.2.3.5", 8085),
            one_port("test", "test2", "None", 8085),
            one_port("test", "test2", "", 8085),
            one_port("not-special", "default", "1.2.3.8", 8088),
            one_port("not-special", "default", "None", 8088),
            one_port("not-special", "default", "", 8088),
        ];
        World {
            master: services[0].clone(),
            services,
            config_maps: HashMap::new(),
            secrets: HashMap::new(),
            downward: DownwardContext::default(),
        }
    }

    fn pod(ns: &str, links: Option<bool>, container: serde_json::Value) -> (Pod, Container) {
        let mut spec = json!({"serviceAccountName": "special", "nodeName": "node-name",
                              "containers": [container]});
        if let Some(l) = links {
            spec["enableServiceLinks"] = json!(l);
        }
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "dapi-test-pod-name", "namespace": ns},
            "spec": spec
        }))
        .unwrap();
        let c = p.spec.as_ref().unwrap().containers[0].clone();
        (p, c)
    }

    fn run(w: &World, p: &Pod, c: &Container) -> Result<Vec<(String, String)>, String> {
        let src = EnvSources {
            config_maps: &w.config_maps,
            secrets: &w.secrets,
            services: &w.services,
            master_service: Some(&w.master),
            downward: &w.downward,
        };
        container_env(p, c, &src)
    }

    fn sorted(mut v: Vec<(String, String)>) -> Vec<(String, String)> {
        v.sort();
        v
    }

    fn kubernetes_vars(ip: &str, port: &str) -> Vec<(String, String)> {
        let url = format!("tcp://{ip}:{port}");
        pairs(&[
            ("KUBERNETES_SERVICE_HOST", ip),
            ("KUBERNETES_SERVICE_PORT", port),
            ("KUBERNETES_PORT", &url),
            (&format!("KUBERNETES_PORT_{port}_TCP"), &url),
            (&format!("KUBERNETES_PORT_{port}_TCP_PROTO"), "tcp"),
            (&format!("KUBERNETES_PORT_{port}_TCP_PORT"), port),
            (&format!("KUBERNETES_PORT_{port}_TCP_ADDR"), ip),
        ])
    }

    fn test_vars(ip: &str, port: &str) -> Vec<(String, String)> {
        let url = format!("tcp://{ip}:{port}");
        pairs(&[
            ("TEST_SERVICE_HOST", ip),
            ("TEST_SERVICE_PORT", port),
            ("TEST_PORT", &url),
            (&format!("TEST_PORT_{port}_TCP"), &url),
            (&format!("TEST_PORT_{port}_TCP_PROTO"), "tcp"),
            (&format!("TEST_PORT_{port}_TCP_PORT"), port),
            (&format!("TEST_PORT_{port}_TCP_ADDR"), ip),
        ])
    }

    #[test]
    fn service_links_master_always_namespace_when_enabled() {
        let w = world();
        let c = json!({"name": "c", "env": [{"name": "FOO", "value": "BAZ"}]});

        // "api server = N; kubelet = Y": links off → master service only.
        let (p, ct) = pod("test1", Some(false), c.clone());
        let mut want = pairs(&[("FOO", "BAZ")]);
        want.extend(kubernetes_vars("1.2.3.1", "8081"));
        assert_eq!(sorted(run(&w, &p, &ct).unwrap()), sorted(want.clone()));

        // "...; service env vars": links on → the namespace's services too.
        let (p, ct) = pod("test1", Some(true), c.clone());
        want.extend(test_vars("1.2.3.3", "8083"));
        assert_eq!(sorted(run(&w, &p, &ct).unwrap()), sorted(want));

        // Unset enableServiceLinks reads as the API default, true.
        let (p, ct) = pod("test1", None, c.clone());
        assert!(run(&w, &p, &ct)
            .unwrap()
            .iter()
            .any(|(k, _)| k == "TEST_SERVICE_HOST"));

        // "master service in pod ns": links off → the default namespace's master.
        let (p, ct) = pod("test2", Some(false), c.clone());
        let mut want = pairs(&[("FOO", "BAZ")]);
        want.extend(kubernetes_vars("1.2.3.1", "8081"));
        assert_eq!(sorted(run(&w, &p, &ct).unwrap()), sorted(want));

        // "master service in pod ns, service env vars": the namespace's own
        // `kubernetes` replaces the master; headless/empty-IP `test` skipped.
        let (p, ct) = pod("test2", Some(true), c.clone());
        let mut want = pairs(&[("FOO", "BAZ")]);
        want.extend(test_vars("1.2.3.5", "8085"));
        want.extend(kubernetes_vars("1.2.3.4", "8084"));
        assert_eq!(sorted(run(&w, &p, &ct).unwrap()), sorted(want));

        // "pod in master service ns, service env vars".
        let (p, ct) = pod("default", Some(true), json!({"name": "c"}));
        let mut want = kubernetes_vars("1.2.3.1", "8081");
        let url = "tcp://1.2.3.8:8088";
        want.extend(pairs(&[
            ("NOT_SPECIAL_SERVICE_HOST", "1.2.3.8"),
            ("NOT_SPECIAL_SERVICE_PORT", "8088"),
            ("NOT_SPECIAL_PORT", url),
            ("NOT_SPECIAL_PORT_8088_TCP", url),
            ("NOT_SPECIAL_PORT_8088_TCP_PROTO", "tcp"),
            ("NOT_SPECIAL_PORT_8088_TCP_PORT", "8088"),
            ("NOT_SPECIAL_PORT_8088_TCP_ADDR", "1.2.3.8"),
        ]));
        assert_eq!(sorted(run(&w, &p, &ct).unwrap()), sorted(want));

        // "api server = Y, kubelet = Y": the pod's own values win, no duplicates.
        let (p, ct) = pod(
            "test1",
            Some(false),
            json!({"name": "c", "env": [{"name": "KUBERNETES_SERVICE_HOST", "value": "9.9.9.9"}]}),
        );
        let got = run(&w, &p, &ct).unwrap();
        let hosts: Vec<_> = got
            .iter()
            .filter(|(k, _)| k == "KUBERNETES_SERVICE_HOST")
            .collect();
        assert_eq!(hosts.len(), 1);
        assert_eq!(hosts[0].1, "9.9.9.9");
        assert_eq!(
            got[0].0, "KUBERNETES_SERVICE_HOST",
            "the pod's own come first"
        );
    }

    #[test]
    fn env_expansion_case() {
        let mut w = world();
        w.downward.pod_ips = vec!["1.2.3.4".into()];
        let env = json!([
            {"name": "TEST_LITERAL", "value": "test-test-test"},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
            {"name": "OUT_OF_ORDER_TEST", "value": "$(OUT_OF_ORDER_TARGET)"},
            {"name": "OUT_OF_ORDER_TARGET", "value": "FOO"},
            {"name": "EMPTY_VAR"},
            {"name": "EMPTY_TEST", "value": "foo-$(EMPTY_VAR)"},
            {"name": "POD_NAME_TEST2", "value": "test2-$(POD_NAME)"},
            {"name": "POD_NAME_TEST3", "value": "$(POD_NAME_TEST2)-3"},
            {"name": "LITERAL_TEST", "value": "literal-$(TEST_LITERAL)"},
            {"name": "SERVICE_VAR_TEST", "value": "$(TEST_SERVICE_HOST):$(TEST_SERVICE_PORT)"},
            {"name": "TEST_UNDEFINED", "value": "$(UNDEFINED_VAR)"}
        ]);
        let mine = pairs(&[
            ("TEST_LITERAL", "test-test-test"),
            ("POD_NAME", "dapi-test-pod-name"),
            ("OUT_OF_ORDER_TEST", "$(OUT_OF_ORDER_TARGET)"),
            ("OUT_OF_ORDER_TARGET", "FOO"),
            ("EMPTY_VAR", ""),
            ("EMPTY_TEST", "foo-"),
            ("POD_NAME_TEST2", "test2-dapi-test-pod-name"),
            ("POD_NAME_TEST3", "test2-dapi-test-pod-name-3"),
            ("LITERAL_TEST", "literal-test-test-test"),
        ]);

        // "env expansion, service env vars"
        let (p, c) = pod("test1", Some(true), json!({"name": "c", "env": env}));
        let got = run(&w, &p, &c).unwrap();
        let mut want = mine.clone();
        want.extend(pairs(&[
            ("SERVICE_VAR_TEST", "1.2.3.3:8083"),
            ("TEST_UNDEFINED", "$(UNDEFINED_VAR)"),
        ]));
        assert_eq!(got[..want.len()], want[..], "spec order, expanded");
        let mut all = want;
        all.extend(test_vars("1.2.3.3", "8083"));
        all.extend(kubernetes_vars("1.2.3.1", "8081"));
        assert_eq!(sorted(got), sorted(all));

        // "env expansion" (links off): the namespace service is not there to expand.
        let (p, c) = pod("test1", Some(false), json!({"name": "c", "env": env}));
        let got = run(&w, &p, &c).unwrap();
        let svc_test = got.iter().find(|(k, _)| k == "SERVICE_VAR_TEST").unwrap();
        assert_eq!(svc_test.1, "$(TEST_SERVICE_HOST):$(TEST_SERVICE_PORT)");
    }

    fn with_config_map(w: &mut World, name: &str, data: serde_json::Value) {
        let cm: ConfigMap = serde_json::from_value(
            json!({"metadata": {"name": name, "namespace": "test1"}, "data": data}),
        )
        .unwrap();
        w.config_maps.insert(name.to_string(), cm);
    }

    fn with_secret(w: &mut World, name: &str, data: &[(&str, &str)]) {
        let mut s = Secret::default();
        s.metadata.name = Some(name.into());
        s.data = Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        );
        w.secrets.insert(name.to_string(), s);
    }

    #[test]
    fn env_from_with_prefix_and_env_override() {
        // upstream's "configmap" and "secret" cases.
        for kind in ["configMapRef", "secretRef"] {
            let mut w = world();
            with_config_map(
                &mut w,
                "test-config-map",
                json!({"REPLACE_ME": "FROM_CONFIG_MAP", "DUPE_TEST": "CONFIG_MAP"}),
            );
            with_secret(
                &mut w,
                "test-config-map",
                &[
                    ("REPLACE_ME", "FROM_CONFIG_MAP"),
                    ("DUPE_TEST", "CONFIG_MAP"),
                ],
            );
            let (p, c) = pod(
                "test1",
                Some(false),
                json!({"name": "c",
                    "envFrom": [{kind: {"name": "test-config-map"}},
                                {"prefix": "p_", kind: {"name": "test-config-map"}}],
                    "env": [{"name": "TEST_LITERAL", "value": "test-test-test"},
                            {"name": "EXPANSION_TEST", "value": "$(REPLACE_ME)"},
                            {"name": "DUPE_TEST", "value": "ENV_VAR"}]}),
            );
            let mut want = pairs(&[
                ("TEST_LITERAL", "test-test-test"),
                ("REPLACE_ME", "FROM_CONFIG_MAP"),
                ("EXPANSION_TEST", "FROM_CONFIG_MAP"),
                ("DUPE_TEST", "ENV_VAR"),
                ("p_REPLACE_ME", "FROM_CONFIG_MAP"),
                ("p_DUPE_TEST", "CONFIG_MAP"),
            ]);
            want.extend(kubernetes_vars("1.2.3.1", "8081"));
            assert_eq!(sorted(run(&w, &p, &c).unwrap()), sorted(want), "{kind}");
        }
    }

    #[test]
    fn env_from_keys_are_taken_as_they_are() {
        // "configmap allow prefix to start with a digital",
        // "configmap_invalid_keys_valid", "secret_invalid_keys_valid".
        let mut w = world();
        with_config_map(&mut w, "test-config-map", json!({"1234": "abc"}));
        with_secret(&mut w, "test-secret", &[("1234.name", "abc")]);
        let (p, c) = pod(
            "test1",
            Some(false),
            json!({"name": "c", "envFrom": [
                {"prefix": "p_", "configMapRef": {"name": "test-config-map"}},
                {"prefix": "1_", "configMapRef": {"name": "test-config-map"}},
                {"prefix": "p_", "secretRef": {"name": "test-secret"}}]}),
        );
        let got = run(&w, &p, &c).unwrap();
        assert_eq!(
            got[..3],
            pairs(&[("p_1234", "abc"), ("1_1234", "abc"), ("p_1234.name", "abc")])[..]
        );
    }

    #[test]
    fn missing_sources_error_unless_optional() {
        let mut w = world();
        with_config_map(&mut w, "test-config-map", json!({"a": "b"}));
        with_secret(&mut w, "test-secret", &[("a", "b")]);
        let err = |c: serde_json::Value| {
            let (p, c) = pod("test1", Some(false), c);
            run(&w, &p, &c).unwrap_err()
        };
        let only_master = |c: serde_json::Value| {
            let (p, c) = pod("test1", Some(false), c);
            sorted(run(&w, &p, &c).unwrap())
        };
        let master = sorted(kubernetes_vars("1.2.3.1", "8081"));

        // configmap_missing / secret_missing
        assert_eq!(
            err(json!({"name": "c", "envFrom": [{"configMapRef": {"name": "nope"}}]})),
            "configmap \"nope\" not found"
        );
        assert_eq!(
            err(json!({"name": "c", "envFrom": [{"secretRef": {"name": "nope"}}]})),
            "secret \"nope\" not found"
        );
        // configmap_missing_optional / secret_missing_optional
        assert_eq!(
            only_master(
                json!({"name": "c", "envFrom": [{"configMapRef": {"name": "nope", "optional": true}}]})
            ),
            master
        );
        assert_eq!(
            only_master(
                json!({"name": "c", "envFrom": [{"secretRef": {"name": "nope", "optional": true}}]})
            ),
            master
        );
        // key references
        let key_ref = |kind: &str, name: &str, key: &str, optional: bool| {
            json!({"name": "c", "env": [{"name": "POD_NAME", "valueFrom":
                {kind: {"name": name, "key": key, "optional": optional}}}]})
        };
        assert_eq!(
            err(key_ref(
                "configMapKeyRef",
                "missing-config-map",
                "key",
                false
            )),
            "configmap \"missing-config-map\" not found"
        );
        assert_eq!(
            err(key_ref("configMapKeyRef", "test-config-map", "key", false)),
            "couldn't find key key in ConfigMap test1/test-config-map"
        );
        assert_eq!(
            err(key_ref("secretKeyRef", "missing-secret", "key", false)),
            "secret \"missing-secret\" not found"
        );
        assert_eq!(
            err(key_ref("secretKeyRef", "test-secret", "key", false)),
            "couldn't find key key in Secret test1/test-secret"
        );
        // configmapkeyref_missing_optional, configmapkeyref_missing_key_optional,
        // secretkeyref_missing_optional, secretkeyref_missing_key_optional:
        // the variable is not set at all.
        for (kind, name) in [
            ("configMapKeyRef", "missing-config-map"),
            ("configMapKeyRef", "test-config-map"),
            ("secretKeyRef", "missing-secret"),
            ("secretKeyRef", "test-secret"),
        ] {
            assert_eq!(
                only_master(key_ref(kind, name, "key", true)),
                master,
                "{kind} {name}"
            );
        }
        // present keys resolve
        let (p, c) = pod(
            "test1",
            Some(false),
            key_ref("secretKeyRef", "test-secret", "a", false),
        );
        assert_eq!(run(&w, &p, &c).unwrap()[0], ("POD_NAME".into(), "b".into()));
        // fileKeyRef is refused, not silently empty
        let e = err(json!({"name": "c", "env": [{"name": "F", "valueFrom":
            {"fileKeyRef": {"volumeName": "v", "path": "p", "key": "k"}}}]}));
        assert!(e.contains("fileKeyRef"), "{e}");
    }

    #[test]
    fn downward_values_and_pod_level_limits() {
        let mut w = world();
        w.downward = DownwardContext {
            pod_ips: vec!["1.2.3.4".into(), "fd00::4".into()],
            host_ips: vec!["10.0.0.1".into()],
            node_allocatable: [
                ("cpu".to_string(), Quantity::parse("4").unwrap()),
                ("memory".to_string(), Quantity::parse("8Gi").unwrap()),
            ]
            .into_iter()
            .collect(),
        };
        let env = json!([
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "POD_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "POD_SERVICE_ACCOUNT_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "POD_IPS", "valueFrom": {"fieldRef": {"fieldPath": "status.podIPs"}}},
            {"name": "HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
            {"name": "CPU_LIMIT", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
            {"name": "MEM_LIMIT", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
            {"name": "OTHER", "valueFrom": {"resourceFieldRef": {"containerName": "ghost", "resource": "limits.cpu"}}}
        ]);
        let (p, c) = pod(
            "downward-api",
            Some(false),
            json!({"name": "c", "env": env}),
        );
        assert_eq!(run(&w, &p, &c).unwrap_err(), "container ghost not found");
        let mut c2 = c.clone();
        c2.env.as_mut().unwrap().pop();
        let got = run(&w, &p, &c2).unwrap();
        assert_eq!(
            got[..9],
            pairs(&[
                ("POD_NAME", "dapi-test-pod-name"),
                ("POD_NAMESPACE", "downward-api"),
                ("POD_NODE_NAME", "node-name"),
                ("POD_SERVICE_ACCOUNT_NAME", "special"),
                ("POD_IP", "1.2.3.4"),
                ("POD_IPS", "1.2.3.4,fd00::4"),
                ("HOST_IP", "10.0.0.1"),
                ("CPU_LIMIT", "4"),
                ("MEM_LIMIT", "8192"),
            ])[..]
        );
        // pod-level limits replace allocatable for unset container limits
        let mut p2 = p.clone();
        p2.spec.as_mut().unwrap().resources =
            Some(serde_json::from_value(json!({"limits": {"cpu": "2", "memory": "1Gi"}})).unwrap());
        let got = run(&w, &p2, &c2).unwrap();
        assert_eq!(got[7], ("CPU_LIMIT".into(), "2".into()));
        assert_eq!(got[8], ("MEM_LIMIT".into(), "1024".into()));
    }

    #[test]
    fn command_and_args_expand_against_the_final_env() {
        let c: Container = serde_json::from_value(json!({"name": "c",
            "command": ["/bin/$(CMD)", "$$(CMD)"], "args": ["--v=$(LEVEL)", "$(NOPE)"]}))
        .unwrap();
        let env = pairs(&[("CMD", "sh"), ("LEVEL", "1"), ("LEVEL", "2")]);
        let (cmd, args) = expand_command_and_args(&c, &env).unwrap();
        assert_eq!(cmd, vec!["/bin/sh", "$(CMD)"]);
        assert_eq!(args, vec!["--v=2", "$(NOPE)"]);
    }

    #[test]
    fn doubling_expansions_are_refused_not_allocated() {
        // Each variable doubles the one before: 1 KiB × 2^40 unbounded.
        let mut env = vec![json!({"name": "V0", "value": "x".repeat(1024)})];
        for i in 1..=40 {
            env.push(
                json!({"name": format!("V{i}"), "value": format!("$(V{})$(V{})", i - 1, i - 1)}),
            );
        }
        let p: Pod = serde_json::from_value(json!({"metadata": {"name": "p", "namespace": "ns"},
            "spec": {"enableServiceLinks": false,
                     "containers": [{"name": "c", "image": "i", "env": env}]}}))
        .unwrap();
        let c = &p.spec.as_ref().unwrap().containers[0];
        let downward = DownwardContext::default();
        let (cms, secrets) = (HashMap::new(), HashMap::new());
        let src = EnvSources {
            config_maps: &cms,
            secrets: &secrets,
            services: &[],
            master_service: None,
            downward: &downward,
        };
        let e = container_env(&p, c, &src).unwrap_err();
        assert_eq!(e, "the environment of container c is larger than 8 MiB");
        // The same through command and args.
        let c: Container = serde_json::from_value(json!({"name": "c",
            "args": vec!["$(BIG)$(BIG)$(BIG)$(BIG)"; 3]}))
        .unwrap();
        let big = pairs(&[("BIG", &"y".repeat(1 << 20))]);
        let e = expand_command_and_args(&c, &big).unwrap_err();
        assert!(e.contains("larger than 8 MiB"), "{e}");
        // Below the bound, the same shape expands.
        let small = pairs(&[("BIG", "y")]);
        assert_eq!(expand_command_and_args(&c, &small).unwrap().1[0], "yyyy");
        assert_eq!(expand("$(A)$(A)", |_| Some("ab".into()), 3), None);
        assert_eq!(
            expand("$(A)$(A)", |_| Some("ab".into()), 4).as_deref(),
            Some("abab")
        );
    }

    #[test]
    fn references_collect_names_and_optionality() {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {
                "initContainers": [{"name": "i", "envFrom": [{"configMapRef": {"name": "a", "optional": true}}]}],
                "containers": [{"name": "c",
                    "envFrom": [{"secretRef": {"name": "s"}}],
                    "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "a", "key": "k"}}},
                            {"name": "Y", "valueFrom": {"configMapKeyRef": {"name": "b", "key": "k", "optional": true}}},
                            {"name": "Z", "valueFrom": {"secretKeyRef": {"name": "t", "key": "k", "optional": true}}}]}],
                "ephemeralContainers": [{"name": "e", "envFrom": [{"secretRef": {"name": "u"}}]}]
            }
        }))
        .unwrap();
        let r = references(&p);
        assert_eq!(
            r.config_maps,
            [("a".to_string(), false), ("b".to_string(), true)]
                .into_iter()
                .collect()
        );
        assert_eq!(
            r.secrets,
            [
                ("s".to_string(), false),
                ("t".to_string(), true),
                ("u".to_string(), false)
            ]
            .into_iter()
            .collect()
        );
    }
}
