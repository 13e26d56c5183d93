//! Pod and container security contexts → CRI (pure), as upstream's
//! kuberuntime builds them (`determineEffectiveSecurityContext` and
//! `convertToRuntimeSecurityContext` in `security_context.go`,
//! `generatePodSandboxLinuxConfig` in `kuberuntime_sandbox.go`,
//! `getSeccompProfile`/`getAppArmorProfile` in `helpers.go`,
//! `verifyRunAsNonRoot` in `security_context_others.go`,
//! `NamespacesForPod` in `kuberuntime/util`, `pkg/securitycontext` for the
//! merge and the masked/read-only paths, `pkg/kubelet/sysctl` for the
//! sysctl allowlist).
//!
//! The kubelet refuses to run what it cannot enforce: every `Err` is a
//! message for `CreateContainerConfigError` (or, for sysctls, upstream's
//! admission rejection `SysctlForbidden`).
//!
//! # Mapping
//!
//! * **merge**: `runAsUser`, `runAsGroup`, `runAsNonRoot`, `seLinuxOptions`
//!   and `windowsOptions` come from the pod and are overridden by the
//!   container; `capabilities`, `privileged`, `readOnlyRootFilesystem`,
//!   `allowPrivilegeEscalation` and `procMount` are the container's only;
//! * **user**: without a `runAsUser` the image's user is passed
//!   (`run_as_user` = its uid, `run_as_username` = its name), as upstream
//!   does — an image that names neither counts as uid 0 ([`ImageUser`]);
//! * **groups**: `fsGroup`, then `supplementalGroups`, of the pod;
//!   `supplementalGroupsPolicy` `Merge` (default) or `Strict` — the latter
//!   only when the runtime reports support (`RuntimeStatus.features.
//!   supplemental_groups_policy`; containerd ≥ 2.0), else refused with
//!   upstream's admission message;
//! * **no_new_privs** = `allowPrivilegeEscalation == false` (upstream's
//!   `AddNoNewPrivileges`; unset → not set);
//! * **seccomp**: the container's profile, else the pod's, else
//!   `RuntimeDefault` with `--seccomp-default` and `Unconfined` without;
//!   `Localhost` resolves `localhostProfile` under the seccomp root
//!   (`<root-dir>/seccomp`); absolute paths and `..` are refused. The
//!   sandbox always gets `RuntimeDefault`;
//! * **masked / read-only paths**: upstream's defaults for `procMount:
//!   Default` (plus the host's `cpu*/thermal_throttle` directories,
//!   [`host_thermal_throttle_paths`]);
//! * **namespaces**: network `NODE` with `hostNetwork` else `POD`; IPC `NODE`
//!   with `hostIPC` else `POD`; PID `NODE` with `hostPID`, `POD` with
//!   `shareProcessNamespace`, else `CONTAINER`; user namespace `NODE`;
//! * **AppArmor**: passed through (`RuntimeDefault`, `Unconfined`,
//!   `Localhost`, plus the deprecated string form) when the host has
//!   AppArmor; without it, anything but `Unconfined` is refused with
//!   upstream's admission message (`Cannot enforce AppArmor: AppArmor is not
//!   enabled on the host`);
//! * **sysctls** (sandbox): the pod's, names normalised to dots, each
//!   checked against upstream's safe set plus `allowedUnsafeSysctls`
//!   patterns, and refused when it belongs to a host namespace the pod
//!   shares.
//!
//! # Refused (fail closed)
//!
//! * `hostUsers: false` — rkube allocates no user-namespace mappings
//!   (upstream's message when the runtime cannot: ``can't set
//!   `spec.hostUsers: false`, runtime does not support user namespaces``);
//! * `procMount: Unmasked` — upstream requires `hostUsers: false`;
//! * non-empty `seLinuxOptions` on a host that enforces SELinux —
//!   containerd applies the labels only when its own config enables
//!   SELinux, which the kubelet cannot see, so a label could silently not
//!   apply. On a host without SELinux ([`detect_selinux`]) the options are
//!   accepted, as upstream's kubelet does: no pod there runs under SELinux,
//!   so the label confines nothing and weakens nothing (the suite's
//!   emptyDir specs all set `level: s0`);
//! * unknown seccomp / AppArmor profile types.
//!
//! `windowsOptions` (`hostProcess`, GMSA, `runAsUserName`) mean nothing to
//! a Linux container and are ignored, as upstream's kubelet does on Linux
//! (it builds the Windows part of the CRI config only on Windows); the
//! container runs as an ordinary Linux container, never as a host
//! process. Upstream's own registry pod for the image pull specs sets
//! `hostProcess: true` on Linux.
//!
//! Not covered: extra supplemental groups from volumes (upstream's
//! `GetExtraSupplementalGroupsForPod`, the `pv.beta.kubernetes.io/gid`
//! annotation: the caller appends them), `TARGET` PID namespaces of
//! ephemeral containers, the `DefaultPodSysctls` kubelet option (alpha).

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

use k8s_openapi::api::core::v1::{
    AppArmorProfile, Container, Pod, PodSecurityContext, SELinuxOptions, SeccompProfile,
    SecurityContext,
};
use kube::ResourceExt;
use rkube_cri::v1;
use v1::security_profile::ProfileType;

use crate::pod::downward::go_quote;

/// Upstream's admission reason for a pod with a forbidden sysctl.
pub const SYSCTL_FORBIDDEN_REASON: &str = "SysctlForbidden";
/// Upstream's admission reason for a pod whose AppArmor profile the node
/// cannot enforce.
pub const APPARMOR_NOT_ADMITTED_REASON: &str = "AppArmor";

/// The node's side of security contexts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecurityOptions {
    /// Where `Localhost` seccomp profiles live: `<root-dir>/seccomp`.
    pub seccomp_root: PathBuf,
    /// The kubelet's `seccompDefault`: an unset profile means
    /// `RuntimeDefault` instead of `Unconfined`.
    pub seccomp_default: bool,
    /// `allowedUnsafeSysctls`: names or `prefix*` patterns allowed on top of
    /// the safe set (check them at startup with
    /// [`validate_allowed_unsafe_sysctls`]).
    pub allowed_unsafe_sysctls: Vec<String>,
    /// Whether the host enforces AppArmor ([`detect_apparmor`]).
    pub apparmor_enabled: bool,
    /// Whether the host has SELinux ([`detect_selinux`]).
    pub selinux_enabled: bool,
    /// Whether the runtime supports `supplementalGroupsPolicy: Strict`
    /// (CRI `RuntimeStatus.features.supplemental_groups_policy`).
    pub supplemental_groups_policy_supported: bool,
    /// The host's `/sys/devices/system/cpu/cpu<N>/thermal_throttle`
    /// directories, masked by default as upstream does
    /// ([`host_thermal_throttle_paths`]).
    pub thermal_throttle_paths: Vec<String>,
}

impl SecurityOptions {
    /// Upstream's defaults for kubelet root `root_dir`: seccomp root
    /// `<root_dir>/seccomp`, no `seccompDefault`, no unsafe sysctls, and
    /// neither AppArmor nor Strict supplemental groups (set them from the
    /// host and the runtime).
    pub fn for_root(root_dir: &Path) -> Self {
        SecurityOptions {
            seccomp_root: root_dir.join("seccomp"),
            seccomp_default: false,
            allowed_unsafe_sysctls: Vec::new(),
            apparmor_enabled: false,
            // Refuse SELinux labels unless told the host has none.
            selinux_enabled: true,
            supplemental_groups_policy_supported: false,
            thermal_throttle_paths: Vec::new(),
        }
    }
}

/// Whether the host enforces AppArmor, checked as upstream (reads
/// `/sys/kernel/security/apparmor` and `/sys/module/apparmor/parameters/enabled`).
/// Whether the host runs SELinux (selinuxfs is mounted).
pub fn detect_selinux() -> bool {
    Path::new("/sys/fs/selinux/enforce").exists()
}

/// Whether the host enforces AppArmor.
pub fn detect_apparmor() -> bool {
    Path::new("/sys/kernel/security/apparmor").exists()
        && std::fs::read("/sys/module/apparmor/parameters/enabled")
            .is_ok_and(|b| b.len() > 1 && b[0] == b'Y')
}

/// The `cpu<N>/thermal_throttle` directories of the host's possible CPUs
/// (reads `/sys/devices/system/cpu/possible` and stats each path), which
/// upstream adds to the default masked paths.
pub fn host_thermal_throttle_paths() -> Vec<String> {
    let cpus = std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .ok()
        .and_then(|s| parse_cpu_list(s.trim()))
        .unwrap_or_else(|| {
            (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect()
        });
    cpus.into_iter()
        .map(|cpu| format!("/sys/devices/system/cpu/cpu{cpu}/thermal_throttle"))
        .filter(|p| Path::new(p).exists())
        .collect()
}

/// `0-3,8` → `[0, 1, 2, 3, 8]`.
fn parse_cpu_list(s: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in s.split(',') {
        match part.split_once('-') {
            Some((a, b)) => out.extend(a.parse::<usize>().ok()?..=b.parse::<usize>().ok()?),
            None => out.push(part.parse().ok()?),
        }
    }
    Some(out)
}

/// Upstream's default masked paths (`procMount: Default`), before the
/// host's thermal-throttle directories.
pub const DEFAULT_MASKED_PATHS: &[&str] = &[
    "/proc/asound",
    "/proc/acpi",
    "/proc/interrupts",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];

/// Upstream's default read-only paths (`procMount: Default`).
pub const DEFAULT_READONLY_PATHS: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// The image's user as upstream's `getImageUser` reads CRI `ImageStatus`:
/// a uid when the image has one, else a user name, else root (uid 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageUser {
    /// Numeric uid (`None` with a non-numeric user name).
    pub uid: Option<i64>,
    /// The user name when the image's user is not numeric (empty otherwise).
    pub username: String,
}

impl ImageUser {
    /// From `ImageStatus.image.uid` / `.username`.
    pub fn from_status(uid: Option<i64>, username: &str) -> Self {
        match uid {
            Some(uid) => ImageUser {
                uid: Some(uid),
                username: String::new(),
            },
            None if !username.is_empty() => ImageUser {
                uid: None,
                username: username.to_string(),
            },
            None => ImageUser {
                uid: Some(0),
                username: String::new(),
            },
        }
    }
}

/// The security context in effect for a container: the pod's fields
/// overridden by the container's (upstream's
/// `DetermineEffectiveSecurityContext`).
fn effective(pod: &Pod, c: &Container) -> SecurityContext {
    let pod_sc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let mut eff = SecurityContext {
        se_linux_options: pod_sc.and_then(|p| p.se_linux_options.clone()),
        windows_options: pod_sc.and_then(|p| p.windows_options.clone()),
        run_as_user: pod_sc.and_then(|p| p.run_as_user),
        run_as_group: pod_sc.and_then(|p| p.run_as_group),
        run_as_non_root: pod_sc.and_then(|p| p.run_as_non_root),
        ..Default::default()
    };
    let Some(csc) = c.security_context.as_ref() else {
        return eff;
    };
    if csc.se_linux_options.is_some() {
        eff.se_linux_options = csc.se_linux_options.clone();
    }
    if let Some(cw) = &csc.windows_options {
        let w = eff.windows_options.get_or_insert_with(Default::default);
        if cw.gmsa_credential_spec_name.is_some() || cw.gmsa_credential_spec.is_some() {
            w.gmsa_credential_spec_name = cw.gmsa_credential_spec_name.clone();
            w.gmsa_credential_spec = cw.gmsa_credential_spec.clone();
        }
        if cw.run_as_user_name.is_some() {
            w.run_as_user_name = cw.run_as_user_name.clone();
        }
        if cw.host_process.is_some() {
            w.host_process = cw.host_process;
        }
    }
    eff.capabilities = csc.capabilities.clone();
    eff.privileged = csc.privileged;
    eff.read_only_root_filesystem = csc.read_only_root_filesystem;
    eff.allow_privilege_escalation = csc.allow_privilege_escalation;
    eff.proc_mount = csc.proc_mount.clone();
    if csc.run_as_user.is_some() {
        eff.run_as_user = csc.run_as_user;
    }
    if csc.run_as_group.is_some() {
        eff.run_as_group = csc.run_as_group;
    }
    if csc.run_as_non_root.is_some() {
        eff.run_as_non_root = csc.run_as_non_root;
    }
    eff
}

fn pod_sc(pod: &Pod) -> Option<&PodSecurityContext> {
    pod.spec.as_ref().and_then(|s| s.security_context.as_ref())
}

/// Upstream's `format.Pod`: `name_namespace(uid)`.
fn pod_desc(pod: &Pod) -> String {
    format!(
        "{}_{}({})",
        pod.name_any(),
        pod.namespace().unwrap_or_default(),
        pod.uid().unwrap_or_default()
    )
}

/// Upstream's `verifyRunAsNonRoot` with its messages, given the image's
/// user as CRI `ImageStatus` reports it (`uid`, `username`; an image with
/// neither runs as root, as upstream's `getImageUser` says).
pub fn verify_run_as_non_root(
    pod: &Pod,
    c: &Container,
    image_uid: Option<i64>,
    image_user: &str,
) -> Result<(), String> {
    let eff = effective(pod, c);
    if eff.run_as_non_root != Some(true) {
        return Ok(());
    }
    let who = format!("(pod: {}, container: {})", go_quote(&pod_desc(pod)), c.name);
    if let Some(uid) = eff.run_as_user {
        if uid == 0 {
            return Err(format!(
                "container's runAsUser breaks non-root policy {who}"
            ));
        }
        return Ok(());
    }
    let image = ImageUser::from_status(image_uid, image_user);
    match image.uid {
        None => Err(format!(
            "container has runAsNonRoot and image has non-numeric user ({}), cannot verify user is non-root {who}",
            image.username
        )),
        Some(0) => Err(format!(
            "container has runAsNonRoot and image will run as root {who}"
        )),
        Some(uid) if !(0..=i32::MAX as i64).contains(&uid) => Err(format!(
            "container has runAsNonRoot and image has an invalid user id ({uid}). (Must be 1-({})): must be between 0 and {}, inclusive {who}",
            i32::MAX,
            i32::MAX
        )),
        Some(_) => Ok(()),
    }
}

fn host_users_refusal(pod: &Pod) -> Result<(), String> {
    if pod.spec.as_ref().and_then(|s| s.host_users) == Some(false) {
        return Err(
            "can't set `spec.hostUsers: false`, runtime does not support user namespaces".into(),
        );
    }
    // A RuntimeClass names a sandbox (gVisor, Kata, ...) the pod relies
    // on for isolation; rkube runs every pod with the runtime's default
    // handler, so it refuses the pod rather than run it less isolated.
    if let Some(class) = pod
        .spec
        .as_ref()
        .and_then(|s| s.runtime_class_name.as_deref())
        .filter(|c| !c.is_empty())
    {
        return Err(format!(
            "RuntimeClass {class:?} is not supported by rkube kubelet (it runs pods with the runtime's default handler only)"
        ));
    }
    Ok(())
}

fn namespace_options(pod: &Pod) -> v1::NamespaceOption {
    use v1::NamespaceMode;
    let spec = pod.spec.as_ref();
    let flag = |f: fn(&k8s_openapi::api::core::v1::PodSpec) -> Option<bool>| {
        spec.and_then(f).unwrap_or(false)
    };
    let mode = |node: bool, otherwise: NamespaceMode| {
        if node {
            NamespaceMode::Node
        } else {
            otherwise
        }
    };
    let pid = if flag(|s| s.host_pid) {
        NamespaceMode::Node
    } else if flag(|s| s.share_process_namespace) {
        NamespaceMode::Pod
    } else {
        NamespaceMode::Container
    };
    v1::NamespaceOption {
        network: mode(flag(|s| s.host_network), NamespaceMode::Pod) as i32,
        pid: pid as i32,
        ipc: mode(flag(|s| s.host_ipc), NamespaceMode::Pod) as i32,
        target_id: String::new(),
        userns_options: Some(v1::UserNamespace {
            mode: NamespaceMode::Node as i32,
            uids: Vec::new(),
            gids: Vec::new(),
        }),
    }
}

fn supplemental_groups_policy(pod: &Pod, opts: &SecurityOptions) -> Result<i32, String> {
    match pod_sc(pod).and_then(|s| s.supplemental_groups_policy.as_deref()) {
        None | Some("Merge") => Ok(v1::SupplementalGroupsPolicy::Merge as i32),
        Some("Strict") if opts.supplemental_groups_policy_supported => {
            Ok(v1::SupplementalGroupsPolicy::Strict as i32)
        }
        Some("Strict") => {
            Err("SupplementalGroupsPolicy=Strict is not supported in this node".into())
        }
        Some(other) => Err(format!("unsupported supplementalGroupsPolicy: {other}")),
    }
}

fn selinux_refusal(o: Option<&SELinuxOptions>, opts: &SecurityOptions) -> Result<(), String> {
    let Some(o) = o.filter(|_| opts.selinux_enabled) else {
        return Ok(());
    };
    let set = |f: &Option<String>| f.as_deref().is_some_and(|v| !v.is_empty());
    if set(&o.user) || set(&o.role) || set(&o.type_) || set(&o.level) {
        return Err(
            "seLinuxOptions are not supported by rkube: the kubelet cannot verify that the runtime applies SELinux labels on this node".into(),
        );
    }
    Ok(())
}

/// A `Localhost` profile path under `root`; absolute paths and `..` are
/// refused (they would name a file outside the kubelet's seccomp root).
fn localhost_seccomp_path(root: &Path, profile: &str) -> Result<String, String> {
    let rel = Path::new(profile);
    let escapes = rel
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir));
    if escapes {
        return Err(format!(
            "seccomp localhostProfile {} must be a relative path within {}",
            go_quote(profile),
            root.display()
        ));
    }
    Ok(root.join(rel).display().to_string())
}

fn seccomp_of(p: &SeccompProfile, opts: &SecurityOptions) -> Result<v1::SecurityProfile, String> {
    let profile = |t: ProfileType, r: String| v1::SecurityProfile {
        profile_type: t as i32,
        localhost_ref: r,
    };
    match p.type_.as_str() {
        "RuntimeDefault" => Ok(profile(ProfileType::RuntimeDefault, String::new())),
        "Unconfined" => Ok(profile(ProfileType::Unconfined, String::new())),
        "Localhost" => match p.localhost_profile.as_deref().filter(|s| !s.is_empty()) {
            Some(name) => Ok(profile(
                ProfileType::Localhost,
                localhost_seccomp_path(&opts.seccomp_root, name)?,
            )),
            None => Err("localhostProfile must be set if seccompProfile type is Localhost.".into()),
        },
        other => Err(format!(
            "unsupported seccompProfile type: {}",
            go_quote(other)
        )),
    }
}

/// Upstream's `getSeccompProfile`: the container's, else the pod's, else
/// the kubelet's default.
fn seccomp(
    pod: &Pod,
    c: &Container,
    opts: &SecurityOptions,
) -> Result<v1::SecurityProfile, String> {
    let chosen = c
        .security_context
        .as_ref()
        .and_then(|s| s.seccomp_profile.as_ref())
        .or_else(|| pod_sc(pod).and_then(|s| s.seccomp_profile.as_ref()));
    match chosen {
        Some(p) => seccomp_of(p, opts),
        None => Ok(v1::SecurityProfile {
            profile_type: if opts.seccomp_default {
                ProfileType::RuntimeDefault
            } else {
                ProfileType::Unconfined
            } as i32,
            localhost_ref: String::new(),
        }),
    }
}

const APPARMOR_ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";

/// The AppArmor profile of a container (upstream's `apparmor.GetProfile`):
/// its field, else the deprecated per-container annotation, else the pod's
/// field.
fn apparmor_profile(pod: &Pod, c: &Container) -> Option<AppArmorProfile> {
    if let Some(p) = c
        .security_context
        .as_ref()
        .and_then(|s| s.app_armor_profile.clone())
    {
        return Some(p);
    }
    if let Some(v) = pod
        .annotations()
        .get(&format!("{APPARMOR_ANNOTATION_PREFIX}{}", c.name))
    {
        let p = |t: &str, l: Option<String>| AppArmorProfile {
            type_: t.to_string(),
            localhost_profile: l,
        };
        match v.as_str() {
            "runtime/default" => return Some(p("RuntimeDefault", None)),
            "unconfined" => return Some(p("Unconfined", None)),
            v => {
                if let Some(name) = v.strip_prefix("localhost/") {
                    return Some(p("Localhost", Some(name.to_string())));
                }
            }
        }
    }
    pod_sc(pod).and_then(|s| s.app_armor_profile.clone())
}

/// CRI AppArmor profile plus the deprecated string form, for one container.
fn apparmor(
    pod: &Pod,
    c: &Container,
    opts: &SecurityOptions,
) -> Result<(Option<v1::SecurityProfile>, String), String> {
    let Some(p) = apparmor_profile(pod, c) else {
        return Ok((None, String::new()));
    };
    if p.type_ != "Unconfined" && !opts.apparmor_enabled {
        return Err("Cannot enforce AppArmor: AppArmor is not enabled on the host".into());
    }
    let profile = |t: ProfileType, r: &str| v1::SecurityProfile {
        profile_type: t as i32,
        localhost_ref: r.to_string(),
    };
    match p.type_.as_str() {
        "RuntimeDefault" => Ok((
            Some(profile(ProfileType::RuntimeDefault, "")),
            "runtime/default".into(),
        )),
        "Unconfined" => Ok((
            Some(profile(ProfileType::Unconfined, "")),
            "unconfined".into(),
        )),
        "Localhost" => match p.localhost_profile.as_deref() {
            Some(name) if !name.trim().is_empty() => Ok((
                Some(profile(ProfileType::Localhost, name)),
                format!("localhost/{name}"),
            )),
            Some(name) => Err(format!(
                "invalid empty AppArmor profile name: {}",
                go_quote(name)
            )),
            None => Err("missing localhost apparmor profile name".into()),
        },
        other => Err(format!(
            "unknown apparmor profile type: {}",
            go_quote(other)
        )),
    }
}

fn masked_and_readonly(
    proc_mount: Option<&str>,
    opts: &SecurityOptions,
) -> Result<(Vec<String>, Vec<String>), String> {
    match proc_mount {
        None | Some("Default") => {
            let mut masked: Vec<String> = DEFAULT_MASKED_PATHS.iter().map(|s| s.to_string()).collect();
            masked.extend(opts.thermal_throttle_paths.iter().cloned());
            let ro = DEFAULT_READONLY_PATHS.iter().map(|s| s.to_string()).collect();
            Ok((masked, ro))
        }
        Some("Unmasked") => Err(
            "procMount: Unmasked is not supported: `hostUsers` must be false to use `Unmasked`, and rkube does not support user namespaces".into(),
        ),
        Some(other) => Err(format!("unsupported procMount: {}", go_quote(other))),
    }
}

/// The CRI security context of container `c`, as upstream's
/// `determineEffectiveSecurityContext` builds it (see the module docs),
/// with `image` the image's user for a container without `runAsUser`.
pub fn container_security(
    pod: &Pod,
    c: &Container,
    image: &ImageUser,
    opts: &SecurityOptions,
) -> Result<v1::LinuxContainerSecurityContext, String> {
    host_users_refusal(pod)?;
    let eff = effective(pod, c);
    selinux_refusal(eff.se_linux_options.as_ref(), opts)?;
    let (masked_paths, readonly_paths) = masked_and_readonly(eff.proc_mount.as_deref(), opts)?;
    let (apparmor, apparmor_profile) = apparmor(pod, c, opts)?;

    let mut groups = Vec::new();
    if let Some(p) = pod_sc(pod) {
        groups.extend(p.fs_group);
        groups.extend(p.supplemental_groups.iter().flatten());
    }
    let (run_as_user, run_as_username) = match eff.run_as_user {
        Some(uid) => (Some(uid), String::new()),
        None => (image.uid, image.username.clone()),
    };
    #[allow(deprecated)]
    let sc = v1::LinuxContainerSecurityContext {
        capabilities: eff.capabilities.as_ref().map(|caps| v1::Capability {
            add_capabilities: caps.add.clone().unwrap_or_default(),
            drop_capabilities: caps.drop.clone().unwrap_or_default(),
            add_ambient_capabilities: Vec::new(),
        }),
        privileged: eff.privileged.unwrap_or(false),
        namespace_options: Some(namespace_options(pod)),
        selinux_options: None,
        run_as_user: run_as_user.map(|value| v1::Int64Value { value }),
        run_as_group: eff.run_as_group.map(|value| v1::Int64Value { value }),
        run_as_username,
        readonly_rootfs: eff.read_only_root_filesystem.unwrap_or(false),
        supplemental_groups: groups,
        supplemental_groups_policy: supplemental_groups_policy(pod, opts)?,
        no_new_privs: eff.allow_privilege_escalation == Some(false),
        masked_paths,
        readonly_paths,
        seccomp: Some(seccomp(pod, c, opts)?),
        apparmor,
        apparmor_profile,
        ..Default::default()
    };
    Ok(sc)
}

/// The CRI security context of the pod's sandbox and its sysctls, as
/// upstream's `generatePodSandboxLinuxConfig` (plus the checks upstream
/// makes at admission: sysctls, AppArmor, `Strict` supplemental groups).
pub fn sandbox_security(
    pod: &Pod,
    opts: &SecurityOptions,
) -> Result<(v1::LinuxSandboxSecurityContext, HashMap<String, String>), String> {
    host_users_refusal(pod)?;
    admit_sysctls(pod, &opts.allowed_unsafe_sysctls)?;
    admit_apparmor(pod, opts)?;
    let psc = pod_sc(pod);
    selinux_refusal(psc.and_then(|p| p.se_linux_options.as_ref()), opts)?;

    let mut groups = Vec::new();
    if let Some(p) = psc {
        groups.extend(p.fs_group);
        groups.extend(p.supplemental_groups.iter().flatten());
    }
    #[allow(deprecated)]
    let sc = v1::LinuxSandboxSecurityContext {
        namespace_options: Some(namespace_options(pod)),
        selinux_options: None,
        run_as_user: psc
            .and_then(|p| p.run_as_user)
            .map(|value| v1::Int64Value { value }),
        run_as_group: psc
            .and_then(|p| p.run_as_group)
            .map(|value| v1::Int64Value { value }),
        readonly_rootfs: false,
        supplemental_groups: groups,
        supplemental_groups_policy: supplemental_groups_policy(pod, opts)?,
        privileged: has_privileged_container(pod),
        seccomp: Some(v1::SecurityProfile {
            profile_type: ProfileType::RuntimeDefault as i32,
            localhost_ref: String::new(),
        }),
        apparmor: None,
        seccomp_profile_path: String::new(),
    };
    let sysctls = psc
        .and_then(|p| p.sysctls.as_ref())
        .into_iter()
        .flatten()
        .map(|s| (normalize_sysctl(&s.name), s.value.clone()))
        .collect();
    Ok((sc, sysctls))
}

/// Any container (init, regular, ephemeral) asks for `privileged`.
fn has_privileged_container(pod: &Pod) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return false;
    };
    let priv_of = |sc: Option<&SecurityContext>| sc.and_then(|s| s.privileged).unwrap_or(false);
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .any(|c| priv_of(c.security_context.as_ref()))
        || spec
            .ephemeral_containers
            .iter()
            .flatten()
            .any(|c| priv_of(c.security_context.as_ref()))
}

/// Upstream's AppArmor admission: a pod that asks for any profile but
/// `Unconfined` (pod field, container field or deprecated annotation) needs
/// AppArmor on the host. `Err` carries upstream's message (reason
/// [`APPARMOR_NOT_ADMITTED_REASON`]).
pub fn admit_apparmor(pod: &Pod, opts: &SecurityOptions) -> Result<(), String> {
    if opts.apparmor_enabled {
        return Ok(());
    }
    let confined = |p: Option<&AppArmorProfile>| p.is_some_and(|p| p.type_ != "Unconfined");
    let spec = pod.spec.as_ref();
    let mut required = confined(pod_sc(pod).and_then(|s| s.app_armor_profile.as_ref()));
    if let Some(spec) = spec {
        required |= spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
            .any(|c| {
                confined(
                    c.security_context
                        .as_ref()
                        .and_then(|s| s.app_armor_profile.as_ref()),
                )
            })
            || spec.ephemeral_containers.iter().flatten().any(|c| {
                confined(
                    c.security_context
                        .as_ref()
                        .and_then(|s| s.app_armor_profile.as_ref()),
                )
            });
    }
    required |= pod
        .annotations()
        .iter()
        .any(|(k, v)| k.starts_with(APPARMOR_ANNOTATION_PREFIX) && v != "unconfined");
    if required {
        return Err("Cannot enforce AppArmor: AppArmor is not enabled on the host".into());
    }
    Ok(())
}

// ---- sysctls (pkg/kubelet/sysctl, component-helpers/node/util/sysctl) ----

/// Upstream's safe sysctls (v1.37), all namespaced on kernels ≥ 4.15.
pub const SAFE_SYSCTLS: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
    "net.ipv4.tcp_slow_start_after_idle",
    "net.ipv4.tcp_notsent_lowat",
];

/// The kernel namespace a sysctl belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SysctlNs {
    Ipc,
    Net,
    Uts,
    User,
}

impl SysctlNs {
    fn name(self) -> &'static str {
        match self {
            SysctlNs::Ipc => "IPC",
            SysctlNs::Net => "Net",
            SysctlNs::Uts => "UTS",
            SysctlNs::User => "User",
        }
    }
}

/// Upstream's `NormalizeName`: `net/ipv4/conf/eno2.100/rp_filter` →
/// `net.ipv4.conf.eno2/100.rp_filter` (a name whose first separator is `/`
/// has its `.` and `/` swapped).
pub fn normalize_sysctl(name: &str) -> String {
    match name.find(['.', '/']) {
        Some(i) if name.as_bytes()[i] == b'/' => name
            .chars()
            .map(|c| match c {
                '.' => '/',
                '/' => '.',
                c => c,
            })
            .collect(),
        _ => name.to_string(),
    }
}

fn namespace_of(name: &str) -> Option<SysctlNs> {
    const EXACT: &[(&str, SysctlNs)] = &[
        ("kernel.domainname", SysctlNs::Uts),
        ("kernel.sem", SysctlNs::Ipc),
        ("kernel.shmall", SysctlNs::Ipc),
        ("kernel.shmmax", SysctlNs::Ipc),
        ("kernel.shmmni", SysctlNs::Ipc),
        ("kernel.shm_rmid_forced", SysctlNs::Ipc),
        ("kernel.shm", SysctlNs::Ipc),
        ("kernel.msgmax", SysctlNs::Ipc),
        ("kernel.msgmnb", SysctlNs::Ipc),
        ("kernel.msgmni", SysctlNs::Ipc),
        ("kernel.msg", SysctlNs::Ipc),
    ];
    const PREFIX: &[(&str, SysctlNs)] = &[
        ("net", SysctlNs::Net),
        ("fs.mqueue", SysctlNs::Ipc),
        ("user", SysctlNs::User),
    ];
    if let Some((_, ns)) = EXACT.iter().find(|(n, _)| *n == name) {
        return Some(*ns);
    }
    PREFIX
        .iter()
        .find(|(p, _)| name.strip_prefix(p).is_some_and(|r| r.starts_with('.')))
        .map(|(_, ns)| *ns)
}

fn is_segment(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && alnum(b[0])
        && alnum(b[b.len() - 1])
        && b.iter().all(|&c| alnum(c) || c == b'-' || c == b'_')
}

fn is_pattern_segment(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    match b.split_last() {
        None => false,
        Some((&last, rest)) => {
            (alnum(last) || last == b'*')
                && (rest.is_empty()
                    || (alnum(rest[0]) && rest.iter().all(|&c| alnum(c) || c == b'-' || c == b'_')))
        }
    }
}

/// upstream's `IsValidSysctlPattern`: at most 253 characters, segments
/// separated by `.` or `/`, a `*` only at the very end.
fn is_valid_sysctl_pattern(p: &str) -> bool {
    if p.len() > 253 {
        return false;
    }
    let segs: Vec<&str> = p.split(['.', '/']).collect();
    let (last, init) = segs.split_last().expect("split yields one piece at least");
    init.iter().all(|s| is_segment(s)) && is_pattern_segment(last)
}

/// One compiled allowlist entry: an exact name or a prefix.
struct AllowEntry {
    name_or_prefix: String,
    prefixed: bool,
    ns: SysctlNs,
}

fn compile_pattern(p: &str) -> Result<AllowEntry, String> {
    if !is_valid_sysctl_pattern(p) {
        return Err(format!(
            "sysctl {} must have at most 253 characters and match regex ([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\\./])*([a-z0-9][-_a-z0-9]*)?[a-z0-9*]",
            go_quote(p)
        ));
    }
    let mut s = normalize_sysctl(p);
    let prefixed = match s.find('*') {
        Some(i) => {
            s.truncate(i);
            true
        }
        None => false,
    };
    let ns = namespace_of(&s).ok_or_else(|| {
        format!(
            "the sysctls {} are not known to be namespaced",
            go_quote(&s)
        )
    })?;
    Ok(AllowEntry {
        name_or_prefix: s,
        prefixed,
        ns,
    })
}

/// Checks `allowedUnsafeSysctls` as upstream's kubelet does at startup
/// (valid pattern, known to be namespaced), with its messages.
pub fn validate_allowed_unsafe_sysctls(patterns: &[String]) -> Result<(), String> {
    patterns
        .iter()
        .try_for_each(|p| compile_pattern(p).map(|_| ()))
}

fn allowlist(allowed_unsafe: &[String]) -> (Vec<AllowEntry>, Vec<AllowEntry>) {
    let (mut exact, mut prefixes) = (Vec::new(), Vec::new());
    let all = SAFE_SYSCTLS
        .iter()
        .map(|s| s.to_string())
        .chain(allowed_unsafe.iter().cloned());
    // invalid patterns are refused at startup (validate_allowed_unsafe_sysctls);
    // here they simply allow nothing
    for e in all.filter_map(|p| compile_pattern(&p).ok()) {
        if e.prefixed {
            prefixes.push(e);
        } else {
            exact.push(e);
        }
    }
    (exact, prefixes)
}

fn validate_sysctl(
    name: &str,
    host_net: bool,
    host_ipc: bool,
    host_users: bool,
    (exact, prefixes): &(Vec<AllowEntry>, Vec<AllowEntry>),
) -> Result<(), String> {
    let name = normalize_sysctl(name);
    let shared = |ns: SysctlNs| match ns {
        SysctlNs::Ipc => host_ipc,
        SysctlNs::Net => host_net,
        SysctlNs::User => host_users,
        SysctlNs::Uts => false,
    };
    let found = exact.iter().find(|e| e.name_or_prefix == name).or_else(|| {
        prefixes
            .iter()
            .find(|e| name.starts_with(&e.name_or_prefix))
    });
    match found {
        Some(e) if shared(e.ns) => Err(format!(
            "{} not allowed with host {} enabled",
            go_quote(&name),
            e.ns.name()
        )),
        Some(_) => Ok(()),
        None => Err(format!("{} not allowlisted", go_quote(&name))),
    }
}

/// Upstream's sysctl admission: every `spec.securityContext.sysctls` name
/// must be in the safe set or `allowed_unsafe`, and must not belong to a
/// host namespace the pod shares (`hostNetwork`, `hostIPC`, host users).
/// `Err` is upstream's message (`forbidden sysctl: "x" not allowlisted`),
/// reason [`SYSCTL_FORBIDDEN_REASON`].
pub fn admit_sysctls(pod: &Pod, allowed_unsafe: &[String]) -> Result<(), String> {
    let Some(sysctls) = pod_sc(pod)
        .and_then(|s| s.sysctls.as_ref())
        .filter(|s| !s.is_empty())
    else {
        return Ok(());
    };
    let spec = pod.spec.as_ref();
    let host_net = spec.and_then(|s| s.host_network).unwrap_or(false);
    let host_ipc = spec.and_then(|s| s.host_ipc).unwrap_or(false);
    let host_users = spec.and_then(|s| s.host_users).unwrap_or(true);
    let list = allowlist(allowed_unsafe);
    for s in sysctls {
        validate_sysctl(&s.name, host_net, host_ipc, host_users, &list)
            .map_err(|e| format!("forbidden sysctl: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(pod_sc: serde_json::Value, c_sc: serde_json::Value) -> (Pod, Container) {
        let mut c = json!({"name": "foo", "image": "busybox"});
        if !c_sc.is_null() {
            c["securityContext"] = c_sc;
        }
        let mut spec = json!({"containers": [c]});
        if !pod_sc.is_null() {
            spec["securityContext"] = pod_sc;
        }
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "bar", "namespace": "new", "uid": "12345678"},
            "spec": spec
        }))
        .unwrap();
        let c = p.spec.as_ref().unwrap().containers[0].clone();
        (p, c)
    }

    fn opts() -> SecurityOptions {
        SecurityOptions::for_root(Path::new("/var/lib/kubelet"))
    }

    fn root_image() -> ImageUser {
        ImageUser::from_status(None, "")
    }

    // ---- security_context_others_test.go TestVerifyRunAsNonRoot ----

    #[test]
    fn verify_run_as_non_root_cases() {
        let who = "(pod: \"bar_new(12345678)\", container: foo)";
        // (description, container securityContext, image uid, image user, error)
        type Case = (
            &'static str,
            serde_json::Value,
            Option<i64>,
            &'static str,
            Option<String>,
        );
        let cases: Vec<Case> = vec![
            ("Pass if SecurityContext is not set", json!(null), Some(0), "", None),
            (
                "Pass if RunAsUser is non-root and RunAsNonRoot is true",
                json!({"runAsNonRoot": true, "runAsUser": 1000}),
                None,
                "",
                None,
            ),
            ("Pass if RunAsNonRoot is not set", json!({"runAsUser": 0}), Some(0), "", None),
            (
                "Pass if RunAsNonRoot is false (image user is root)",
                json!({"runAsNonRoot": false}),
                Some(0),
                "",
                None,
            ),
            (
                "Pass if RunAsNonRoot is false (RunAsUser is root)",
                json!({"runAsNonRoot": false, "runAsUser": 0}),
                Some(0),
                "",
                None,
            ),
            (
                "Fail if container's RunAsUser is root and RunAsNonRoot is true",
                json!({"runAsNonRoot": true, "runAsUser": 0}),
                Some(0),
                "",
                Some(format!("container's runAsUser breaks non-root policy {who}")),
            ),
            (
                "Fail if image's user is root and RunAsNonRoot is true",
                json!({"runAsNonRoot": true}),
                Some(0),
                "",
                Some(format!("container has runAsNonRoot and image will run as root {who}")),
            ),
            (
                "Fail if image's username is set and RunAsNonRoot is true",
                json!({"runAsNonRoot": true}),
                None,
                "test",
                Some(format!(
                    "container has runAsNonRoot and image has non-numeric user (test), cannot verify user is non-root {who}"
                )),
            ),
            (
                "Pass if image's user is non-root and RunAsNonRoot is true",
                json!({"runAsNonRoot": true}),
                Some(1000),
                "",
                None,
            ),
            (
                // upstream's verifyRunAsNonRoot passes (nil, "") through, but
                // its caller's getImageUser has already turned an image
                // without any user into uid 0: the kubelet refuses it.
                "Fail if neither container's nor image's user is set and RunAsNonRoot is true",
                json!({"runAsNonRoot": true}),
                None,
                "",
                Some(format!("container has runAsNonRoot and image will run as root {who}")),
            ),
            (
                "Fail if image's user is invalid and RunAsNonRoot is true",
                json!({"runAsNonRoot": true}),
                Some(2147483648),
                "",
                Some(format!(
                    "container has runAsNonRoot and image has an invalid user id (2147483648). (Must be 1-(2147483647)): must be between 0 and 2147483647, inclusive {who}"
                )),
            ),
            (
                "Fail if image's user is negative and RunAsNonRoot is true",
                json!({"runAsNonRoot": true}),
                Some(-1000),
                "",
                Some(format!(
                    "container has runAsNonRoot and image has an invalid user id (-1000). (Must be 1-(2147483647)): must be between 0 and 2147483647, inclusive {who}"
                )),
            ),
            (
                "Pass if image's user is math.MaxInt32 and RunAsNonRoot is true",
                json!({"runAsNonRoot": true}),
                Some(i32::MAX as i64),
                "",
                None,
            ),
        ];
        for (desc, sc, uid, user, want) in cases {
            let (p, c) = pod(json!(null), sc);
            assert_eq!(
                verify_run_as_non_root(&p, &c, uid, user).err(),
                want,
                "{desc}"
            );
        }
        // the pod's runAsNonRoot applies when the container says nothing
        let (p, c) = pod(json!({"runAsNonRoot": true}), json!(null));
        assert!(verify_run_as_non_root(&p, &c, Some(0), "").is_err());
        let (p, c) = pod(
            json!({"runAsNonRoot": true}),
            json!({"runAsNonRoot": false}),
        );
        assert!(verify_run_as_non_root(&p, &c, Some(0), "").is_ok());
    }

    #[test]
    fn image_user_as_get_image_user() {
        // helpers_test.go TestGetImageUser
        assert_eq!(
            ImageUser::from_status(None, ""),
            ImageUser {
                uid: Some(0),
                username: "".into()
            }
        );
        assert_eq!(
            ImageUser::from_status(None, "testUser"),
            ImageUser {
                uid: None,
                username: "testUser".into()
            }
        );
        assert_eq!(
            ImageUser::from_status(Some(2), "whatever"),
            ImageUser {
                uid: Some(2),
                username: "".into()
            }
        );
    }

    // ---- mapping ----

    #[test]
    fn container_settings_map_and_override_pod_settings() {
        let (p, c) = pod(
            json!({"runAsUser": 1000, "runAsGroup": 2000, "fsGroup": 3000, "supplementalGroups": [4000, 4001]}),
            json!({"runAsUser": 1001, "capabilities": {"add": ["NET_ADMIN"], "drop": ["ALL"]},
                   "readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false}),
        );
        let sc = container_security(&p, &c, &root_image(), &opts()).unwrap();
        assert_eq!(sc.run_as_user, Some(v1::Int64Value { value: 1001 }));
        assert_eq!(sc.run_as_username, "");
        assert_eq!(sc.run_as_group, Some(v1::Int64Value { value: 2000 }));
        assert_eq!(
            sc.supplemental_groups,
            vec![3000, 4000, 4001],
            "fsGroup first"
        );
        assert_eq!(
            sc.supplemental_groups_policy,
            v1::SupplementalGroupsPolicy::Merge as i32
        );
        let caps = sc.capabilities.unwrap();
        assert_eq!(caps.drop_capabilities, vec!["ALL"]);
        assert_eq!(caps.add_capabilities, vec!["NET_ADMIN"]);
        assert!(sc.readonly_rootfs);
        assert!(sc.no_new_privs);
        assert!(!sc.privileged);
        assert_eq!(
            sc.masked_paths,
            DEFAULT_MASKED_PATHS
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
        );
        assert_eq!(
            sc.readonly_paths,
            DEFAULT_READONLY_PATHS
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
        );
        let ns = sc.namespace_options.unwrap();
        assert_eq!(ns.network, v1::NamespaceMode::Pod as i32);
        assert_eq!(ns.ipc, v1::NamespaceMode::Pod as i32);
        assert_eq!(ns.pid, v1::NamespaceMode::Container as i32);
        assert_eq!(
            ns.userns_options.unwrap().mode,
            v1::NamespaceMode::Node as i32
        );
        assert_eq!(
            sc.seccomp.unwrap().profile_type,
            ProfileType::Unconfined as i32
        );
        assert!(sc.apparmor.is_none());
    }

    #[test]
    fn no_new_privs_follows_allow_privilege_escalation_only() {
        for (sc, want) in [
            (json!(null), false),
            (json!({"allowPrivilegeEscalation": true}), false),
            (json!({"allowPrivilegeEscalation": false}), true),
            (json!({"privileged": true}), false),
        ] {
            let (p, c) = pod(json!(null), sc.clone());
            assert_eq!(
                container_security(&p, &c, &root_image(), &opts())
                    .unwrap()
                    .no_new_privs,
                want,
                "{sc}"
            );
        }
    }

    #[test]
    fn image_user_fills_in_without_run_as_user() {
        let (p, c) = pod(json!(null), json!({"runAsGroup": 5}));
        let sc =
            container_security(&p, &c, &ImageUser::from_status(None, "nginx"), &opts()).unwrap();
        assert_eq!(sc.run_as_user, None);
        assert_eq!(sc.run_as_username, "nginx");
        assert_eq!(sc.run_as_group, Some(v1::Int64Value { value: 5 }));
        let sc = container_security(&p, &c, &root_image(), &opts()).unwrap();
        assert_eq!(sc.run_as_user, Some(v1::Int64Value { value: 0 }));
    }

    #[test]
    fn namespaces_follow_host_flags() {
        let mut p: Pod = serde_json::from_value(json!({"metadata": {"name": "p"},
            "spec": {"hostNetwork": true, "hostIPC": true, "hostPID": true, "containers": [{"name": "c"}]}}))
        .unwrap();
        let ns = namespace_options(&p);
        assert_eq!(
            (ns.network, ns.ipc, ns.pid),
            (
                v1::NamespaceMode::Node as i32,
                v1::NamespaceMode::Node as i32,
                v1::NamespaceMode::Node as i32
            )
        );
        let spec = p.spec.as_mut().unwrap();
        spec.host_pid = None;
        spec.share_process_namespace = Some(true);
        assert_eq!(namespace_options(&p).pid, v1::NamespaceMode::Pod as i32);
    }

    // ---- helpers_linux_test.go TestGetSeccompProfile(+DefaultSeccomp) ----

    #[test]
    fn seccomp_profiles() {
        let o = opts();
        let with_default = SecurityOptions {
            seccomp_default: true,
            ..opts()
        };
        let t = |pod_sc: serde_json::Value, c_sc: serde_json::Value, o: &SecurityOptions| {
            let (p, c) = pod(pod_sc, c_sc);
            container_security(&p, &c, &root_image(), o).map(|sc| {
                let s = sc.seccomp.unwrap();
                (
                    ProfileType::try_from(s.profile_type).unwrap(),
                    s.localhost_ref,
                )
            })
        };
        let unconfined = Ok((ProfileType::Unconfined, String::new()));
        let default = Ok((ProfileType::RuntimeDefault, String::new()));
        let local = |f: &str| {
            Ok((
                ProfileType::Localhost,
                format!("/var/lib/kubelet/seccomp/{f}"),
            ))
        };
        let sp = |t: &str| json!({"seccompProfile": {"type": t}});
        let lp = |f: &str| json!({"seccompProfile": {"type": "Localhost", "localhostProfile": f}});

        assert_eq!(
            t(json!(null), json!(null), &o),
            unconfined,
            "no seccomp should return unconfined"
        );
        assert_eq!(
            t(json!(null), json!(null), &with_default),
            default,
            "no seccomp, SeccompDefault"
        );
        assert_eq!(t(sp("Unconfined"), json!(null), &o), unconfined);
        assert_eq!(t(sp("Unconfined"), json!(null), &with_default), unconfined);
        assert_eq!(t(json!(null), sp("Unconfined"), &o), unconfined);
        assert_eq!(t(sp("RuntimeDefault"), json!(null), &o), default);
        assert_eq!(t(json!(null), sp("RuntimeDefault"), &o), default);
        assert_eq!(t(lp("filename"), json!(null), &o), local("filename"));
        assert_eq!(t(json!(null), lp("filename2"), &o), local("filename2"));
        assert_eq!(
            t(json!(null), lp("sub/dir/p.json"), &o),
            local("sub/dir/p.json")
        );
        let empty =
            Err("localhostProfile must be set if seccompProfile type is Localhost.".to_string());
        assert_eq!(t(sp("Localhost"), json!(null), &o), empty);
        assert_eq!(t(json!(null), sp("Localhost"), &o), empty);
        assert_eq!(
            t(sp("Unconfined"), sp("RuntimeDefault"), &o),
            default,
            "container over pod"
        );
        assert_eq!(
            t(
                lp("field-pod-profile.json"),
                lp("field-cont-profile.json"),
                &o
            ),
            local("field-cont-profile.json")
        );
        // escaping the seccomp root is refused
        for bad in ["../etc/profile.json", "/etc/profile.json", "a/../../b"] {
            let e = t(lp(bad), json!(null), &o).unwrap_err();
            assert!(
                e.contains("must be a relative path within /var/lib/kubelet/seccomp"),
                "{e}"
            );
        }
        assert!(t(sp("Bogus"), json!(null), &o).is_err());
    }

    // ---- helpers_test.go TestGetAppArmorProfile + admission ----

    #[test]
    #[allow(deprecated)] // the deprecated string form is part of the mapping
    fn apparmor_profiles() {
        let on = SecurityOptions {
            apparmor_enabled: true,
            ..opts()
        };
        let t = |profile: serde_json::Value, o: &SecurityOptions| {
            let (p, c) = pod(json!({"appArmorProfile": profile}), json!(null));
            container_security(&p, &c, &root_image(), o).map(|sc| {
                (
                    sc.apparmor.map(|a| (a.profile_type, a.localhost_ref)),
                    sc.apparmor_profile,
                )
            })
        };
        assert_eq!(
            t(json!({"type": "RuntimeDefault"}), &on),
            Ok((
                Some((ProfileType::RuntimeDefault as i32, String::new())),
                "runtime/default".into()
            ))
        );
        assert_eq!(
            t(json!({"type": "Unconfined"}), &on),
            Ok((
                Some((ProfileType::Unconfined as i32, String::new())),
                "unconfined".into()
            ))
        );
        assert_eq!(
            t(
                json!({"type": "Localhost", "localhostProfile": "test"}),
                &on
            ),
            Ok((
                Some((ProfileType::Localhost as i32, "test".into())),
                "localhost/test".into()
            ))
        );
        assert!(
            t(json!({"type": "Localhost"}), &on).is_err(),
            "invalid localhost"
        );
        assert!(t(json!({"type": "foo"}), &on).is_err(), "invalid type");
        // without AppArmor on the host only Unconfined is satisfiable
        let off = opts();
        assert!(t(json!({"type": "Unconfined"}), &off).is_ok());
        assert_eq!(
            t(json!({"type": "RuntimeDefault"}), &off).unwrap_err(),
            "Cannot enforce AppArmor: AppArmor is not enabled on the host"
        );
        let (mut p, _) = pod(json!(null), json!(null));
        p.metadata.annotations = Some(
            [(
                format!("{APPARMOR_ANNOTATION_PREFIX}foo"),
                "runtime/default".to_string(),
            )]
            .into_iter()
            .collect(),
        );
        assert!(
            sandbox_security(&p, &off).is_err(),
            "the deprecated annotation counts"
        );
        assert!(sandbox_security(&p, &on).is_ok());
    }

    #[test]
    fn refusals() {
        let o = opts();
        let refuse = |pod_sc: serde_json::Value, c_sc: serde_json::Value| {
            let (p, c) = pod(pod_sc, c_sc);
            container_security(&p, &c, &root_image(), &o).unwrap_err()
        };
        assert!(refuse(json!(null), json!({"procMount": "Unmasked"}))
            .contains("`hostUsers` must be false"));
        assert!(refuse(
            json!({"seLinuxOptions": {"level": "s0:c1,c2"}}),
            json!(null)
        )
        .contains("seLinuxOptions"));
        assert!(
            refuse(json!(null), json!({"seLinuxOptions": {"type": "spc_t"}}))
                .contains("seLinuxOptions")
        );
        // windowsOptions are ignored on Linux, as upstream: no host process.
        let (p, c) = pod(
            json!({"windowsOptions": {"runAsUserName": "x"}}),
            json!({"windowsOptions": {"hostProcess": true}, "runAsUser": 5123}),
        );
        let sc = container_security(&p, &c, &root_image(), &o).unwrap();
        assert!(!sc.privileged);
        assert_eq!(sc.run_as_user.map(|u| u.value), Some(5123));
        assert_eq!(
            refuse(json!({"supplementalGroupsPolicy": "Strict"}), json!(null)),
            "SupplementalGroupsPolicy=Strict is not supported in this node"
        );
        // On a host without SELinux the labels are accepted (no pod there
        // runs under SELinux), as upstream.
        let no_selinux = SecurityOptions {
            selinux_enabled: false,
            ..o.clone()
        };
        let (p, c) = pod(json!({"seLinuxOptions": {"level": "s0"}}), json!(null));
        assert!(container_security(&p, &c, &root_image(), &no_selinux).is_ok());
        assert!(sandbox_security(&p, &no_selinux).is_ok());
        // empty seLinuxOptions and procMount Default are satisfiable
        let (p, c) = pod(
            json!({"seLinuxOptions": {}}),
            json!({"procMount": "Default"}),
        );
        assert!(container_security(&p, &c, &root_image(), &o).is_ok());
        // Strict where the runtime supports it
        let strict_ok = SecurityOptions {
            supplemental_groups_policy_supported: true,
            ..opts()
        };
        let (p, c) = pod(json!({"supplementalGroupsPolicy": "Strict"}), json!(null));
        let sc = container_security(&p, &c, &root_image(), &strict_ok).unwrap();
        assert_eq!(
            sc.supplemental_groups_policy,
            v1::SupplementalGroupsPolicy::Strict as i32
        );
        // hostUsers: false
        let (mut p, c) = pod(json!(null), json!(null));
        p.spec.as_mut().unwrap().host_users = Some(false);
        assert_eq!(
            container_security(&p, &c, &root_image(), &o).unwrap_err(),
            "can't set `spec.hostUsers: false`, runtime does not support user namespaces"
        );
        assert!(sandbox_security(&p, &o).is_err());
        // a RuntimeClass (a sandbox rkube does not run)
        let (mut p, c) = pod(json!(null), json!(null));
        p.spec.as_mut().unwrap().runtime_class_name = Some("gvisor".into());
        assert!(container_security(&p, &c, &root_image(), &o)
            .unwrap_err()
            .contains("RuntimeClass \"gvisor\" is not supported"));
        assert!(sandbox_security(&p, &o).is_err());
        p.spec.as_mut().unwrap().runtime_class_name = Some(String::new());
        assert!(sandbox_security(&p, &o).is_ok());
    }

    #[test]
    fn thermal_throttle_paths_are_masked_too() {
        let o = SecurityOptions {
            thermal_throttle_paths: vec!["/sys/devices/system/cpu/cpu0/thermal_throttle".into()],
            ..opts()
        };
        let (p, c) = pod(json!(null), json!(null));
        let sc = container_security(&p, &c, &root_image(), &o).unwrap();
        assert_eq!(sc.masked_paths.len(), DEFAULT_MASKED_PATHS.len() + 1);
        assert_eq!(parse_cpu_list("0-2,5"), Some(vec![0, 1, 2, 5]));
        assert_eq!(parse_cpu_list("x"), None);
    }

    #[test]
    fn sandbox_context() {
        let p: Pod = serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {
            "securityContext": {"runAsUser": 1, "runAsGroup": 2, "fsGroup": 3, "supplementalGroups": [4],
                                "sysctls": [{"name": "net/ipv4/ip_local_port_range", "value": "1024 65000"},
                                            {"name": "kernel.shm_rmid_forced", "value": "1"}]},
            "initContainers": [{"name": "i", "securityContext": {"privileged": true}}],
            "containers": [{"name": "c"}]}}))
        .unwrap();
        let (sc, sysctls) = sandbox_security(&p, &opts()).unwrap();
        assert!(sc.privileged, "an init container is privileged");
        assert_eq!(sc.run_as_user, Some(v1::Int64Value { value: 1 }));
        assert_eq!(sc.run_as_group, Some(v1::Int64Value { value: 2 }));
        assert_eq!(sc.supplemental_groups, vec![3, 4]);
        assert_eq!(
            sc.seccomp.unwrap().profile_type,
            ProfileType::RuntimeDefault as i32
        );
        assert_eq!(sysctls["net.ipv4.ip_local_port_range"], "1024 65000");
        assert_eq!(sysctls["kernel.shm_rmid_forced"], "1");
    }

    // ---- pkg/kubelet/sysctl allowlist_test.go ----

    #[test]
    fn allowlist_patterns_as_new_allowlist() {
        let ok = |v: &[&str]| {
            validate_allowed_unsafe_sysctls(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        };
        assert!(ok(&["kernel.msg*", "kernel.sem"]).is_ok());
        assert!(ok(&["kernel/msg*", "kernel/sem"]).is_ok());
        for bad in [
            " kernel.msg*",
            "kernel.msg* ",
            "net.-",
            "net.*.foo",
            "net.*/foo",
            "foo",
            "foo*",
        ] {
            assert!(ok(&[bad]).is_err(), "{bad:?}");
        }
        assert_eq!(
            ok(&["foo"]).unwrap_err(),
            "the sysctls \"foo\" are not known to be namespaced"
        );
    }

    #[test]
    fn allowlist_cases() {
        let unsafe_ = ["kernel.msg*", "kernel.sem", "net.b.*", "user.*"].map(String::from);
        let list = allowlist(&unsafe_);
        let v = |name: &str, net: bool, ipc: bool, users: bool| {
            validate_sysctl(name, net, ipc, users, &list)
        };
        for (name, net, ipc, users) in [
            ("kernel.shm_rmid_forced", false, false, false),
            ("kernel/shm_rmid_forced", false, false, false),
            ("net.ipv4.ip_local_port_range", false, false, false),
            ("kernel.msgmax", false, false, false),
            ("kernel.sem", false, false, false),
            ("kernel/sem", false, false, false),
            ("user.max_user_namespaces", false, false, false),
        ] {
            assert_eq!(v(name, net, ipc, users), Ok(()), "{name}");
        }
        for (name, net, ipc, users) in [
            ("kernel.shm_rmid_forced", false, true, false),
            ("net.ipv4.ip_local_port_range", true, false, false),
            ("user.max_user_namespaces", false, false, true),
            ("foo", false, false, false),
            ("net.a.b.c", false, false, false),
            ("net.ipv4.ip_local_port_range.a.b.c", false, false, false),
            ("kernel.msgmax", false, true, false),
            ("kernel.sem", false, true, false),
            ("net.b.c", true, false, false),
        ] {
            assert!(v(name, net, ipc, users).is_err(), "{name}");
        }
        assert_eq!(
            v("net.ipv4.ip_local_port_range", true, false, false).unwrap_err(),
            "\"net.ipv4.ip_local_port_range\" not allowed with host Net enabled"
        );

        // admission messages
        let p: Pod = serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {
            "securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]},
            "containers": [{"name": "c"}]}}))
        .unwrap();
        assert_eq!(
            admit_sysctls(&p, &[]).unwrap_err(),
            "forbidden sysctl: \"kernel.msgmax\" not allowlisted"
        );
        assert!(admit_sysctls(&p, &unsafe_).is_ok());
        assert!(sandbox_security(&p, &opts())
            .unwrap_err()
            .starts_with("forbidden sysctl"));
        assert_eq!(
            normalize_sysctl("net/ipv4/conf/eno2.100/rp_filter"),
            "net.ipv4.conf.eno2/100.rp_filter"
        );
        assert_eq!(
            normalize_sysctl("net.ipv4.conf.eno2/100.rp_filter"),
            "net.ipv4.conf.eno2/100.rp_filter"
        );
    }
}
