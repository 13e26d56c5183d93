//! The container manager's cgroups, as upstream's `pkg/kubelet/cm` under
//! the `cgroupfs` driver with `cgroupsPerQOS`: the node-allocatable cgroup
//! `<cgroupRoot>/kubepods` limited to what the pods may use
//! (`enforceNodeAllocatable: [pods]`: capacity − `systemReserved` −
//! `kubeReserved`; CPU as shares, memory, PIDs), `systemReserved` and
//! `kubeReserved` enforced on their own existing cgroups when asked; the
//! QoS cgroups `kubepods/burstable` (shares = the Burstable pods' CPU
//! requests, updated every minute and before each new pod) and
//! `kubepods/besteffort` (2 shares); and each pod's cgroup, made with its
//! limits before its sandbox, changed around an in-place resize, removed
//! (what still runs in it killed) when the pod is gone.

pub mod cgroups;

use std::collections::BTreeMap;

use rkube_model::Quantity;

pub use cgroups::{CgroupError, Cgroups, ResourceConfig};

/// Upstream's `MinShares`.
pub const MIN_SHARES: u64 = 2;
/// Upstream's `MaxShares`.
pub const MAX_SHARES: u64 = 262_144;
/// How often the QoS cgroups are brought up to date.
pub const QOS_UPDATE_PERIOD: std::time::Duration = std::time::Duration::from_secs(60);

/// Upstream's `MilliCPUToShares`.
pub fn milli_cpu_to_shares(milli: i64) -> u64 {
    if milli <= 0 {
        return MIN_SHARES;
    }
    ((milli as u64).saturating_mul(1024) / 1000).clamp(MIN_SHARES, MAX_SHARES)
}

/// What `enforceNodeAllocatable` asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Enforcement {
    /// `pods`: `kubepods` limited to capacity − reservations.
    pub pods: bool,
    /// `system-reserved` / `system-reserved-compressible` (CPU only): the
    /// `systemReservedCgroup` limited to `systemReserved`; `Some(true)`:
    /// compressible only.
    pub system_reserved: Option<bool>,
    /// The same for `kube-reserved` on `kubeReservedCgroup`.
    pub kube_reserved: Option<bool>,
}

impl Enforcement {
    /// From the configuration's list (validated already).
    pub fn of(list: &[String]) -> Enforcement {
        let has = |k: &str| list.iter().any(|v| v == k);
        let pick = |full: &str, compressible: &str| {
            if has(full) {
                Some(false)
            } else if has(compressible) {
                Some(true)
            } else {
                None
            }
        };
        Enforcement {
            pods: has("pods"),
            system_reserved: pick("system-reserved", "system-reserved-compressible"),
            kube_reserved: pick("kube-reserved", "kube-reserved-compressible"),
        }
    }
}

/// Upstream's `getCgroupConfig` of a resource list: CPU as shares (all
/// that a compressible-only config sets), memory, PIDs (`pid`), huge pages.
pub fn cgroup_config(list: &BTreeMap<String, Quantity>, compressible_only: bool) -> ResourceConfig {
    let mut rc = ResourceConfig {
        cpu_shares: list
            .get("cpu")
            .map(|q| milli_cpu_to_shares(q.milli_value())),
        ..Default::default()
    };
    if !compressible_only {
        // Zero is "unset" to upstream's cgroup library, never a limit.
        rc.memory = list.get("memory").map(Quantity::value).filter(|v| *v > 0);
        rc.pids_limit = list.get("pid").map(Quantity::value).filter(|v| *v > 0);
        for (k, q) in list {
            if let Some(size) = k
                .strip_prefix("hugepages-")
                .and_then(|s| Quantity::parse(s).ok())
            {
                rc.hugepage_limits.insert(size.value(), q.value());
            }
        }
    }
    rc
}

/// Upstream's `getNodeAllocatableAbsolute`: each capacity less the system
/// and kube reservations of that resource, never below zero.
pub fn allocatable_absolute(
    capacity: &BTreeMap<String, Quantity>,
    system: &BTreeMap<String, Quantity>,
    kube: &BTreeMap<String, Quantity>,
) -> BTreeMap<String, Quantity> {
    capacity
        .iter()
        .map(|(k, q)| {
            let scale = |q: &Quantity| {
                if k == "cpu" {
                    q.milli_value()
                } else {
                    q.value()
                }
            };
            let left = scale(q)
                .saturating_sub(system.get(k).map(scale).unwrap_or(0))
                .saturating_sub(kube.get(k).map(scale).unwrap_or(0))
                .max(0);
            let q = if k == "cpu" {
                Quantity::from_milli(left)
            } else {
                Quantity::from_units(left)
            };
            (k.clone(), q)
        })
        .collect()
}

/// The node's cgroups.
#[derive(Debug, Clone)]
pub struct ContainerManager {
    cgroups: Cgroups,
    /// `<cgroupRoot>/kubepods`.
    kubepods: String,
}

impl ContainerManager {
    /// The cgroups under `cgroup_root` (`cgroupRoot`, `/` by default),
    /// which must exist, as upstream checks.
    pub fn new(cgroups: Cgroups, cgroup_root: &str) -> Result<ContainerManager, String> {
        let root = format!("/{}", cgroup_root.trim_matches('/'));
        if root != "/" && !cgroups.exists(&root) {
            return Err(format!(
                "invalid configuration: cgroup-root {root:?} doesn't exist"
            ));
        }
        let kubepods = if root == "/" {
            "/kubepods".to_string()
        } else {
            format!("{root}/kubepods")
        };
        Ok(ContainerManager { cgroups, kubepods })
    }

    /// `<cgroupRoot>/kubepods`.
    pub fn kubepods(&self) -> &str {
        &self.kubepods
    }

    /// The node-allocatable cgroup made with `config` if it is not there
    /// (upstream's `createNodeAllocatableCgroups`), then the QoS cgroups.
    pub fn setup_node(&self, kubepods: &ResourceConfig) -> Result<(), CgroupError> {
        if !self.cgroups.exists(&self.kubepods) {
            self.cgroups.create(&self.kubepods, kubepods)?;
        }
        for (qos, shares) in [("burstable", None), ("besteffort", Some(MIN_SHARES))] {
            let name = format!("{}/{qos}", self.kubepods);
            let mut config = ResourceConfig {
                cpu_shares: shares,
                ..Default::default()
            };
            if self.cgroups.v2() && qos == "burstable" {
                config.unified.insert("memory.low".into(), "0".into());
            }
            if self.cgroups.exists(&name) {
                self.cgroups.update(&name, &config)?;
            } else {
                self.cgroups.create(&name, &config)?;
            }
        }
        Ok(())
    }

    /// Gives the node-allocatable cgroup `config` (upstream's
    /// `enforceNodeAllocatableCgroups`; it fails, for one, when the pods
    /// already use more memory than the new limit).
    pub fn enforce_node_allocatable(&self, kubepods: &ResourceConfig) -> Result<(), CgroupError> {
        self.cgroups.update(&self.kubepods, kubepods)
    }

    /// Limits an existing cgroup (`systemReservedCgroup`,
    /// `kubeReservedCgroup`) to `config`; an error if it does not exist.
    pub fn enforce_existing(&self, name: &str, config: &ResourceConfig) -> Result<(), String> {
        if !self.cgroups.exists(name) {
            return Err(format!("cgroup {name:?} does not exist"));
        }
        self.cgroups.update(name, config).map_err(|e| e.to_string())
    }

    /// The Burstable QoS cgroup's shares for the Burstable pods' summed
    /// CPU requests (upstream's `setCPUCgroupConfig`), BestEffort's 2.
    pub fn update_qos(&self, burstable_cpu_milli: i64) -> Result<(), CgroupError> {
        let burstable = ResourceConfig {
            cpu_shares: Some(milli_cpu_to_shares(burstable_cpu_milli)),
            ..Default::default()
        };
        self.cgroups
            .update(&format!("{}/burstable", self.kubepods), &burstable)?;
        let besteffort = ResourceConfig {
            cpu_shares: Some(MIN_SHARES),
            ..Default::default()
        };
        self.cgroups
            .update(&format!("{}/besteffort", self.kubepods), &besteffort)
    }

    /// Does the pod cgroup `name` exist?
    pub fn pod_exists(&self, name: &str) -> bool {
        self.cgroups.exists(name)
    }

    /// Makes the pod cgroup `name` with `config` if it is not there.
    pub fn ensure_pod(&self, name: &str, config: &ResourceConfig) -> Result<(), CgroupError> {
        if self.cgroups.exists(name) {
            return Ok(());
        }
        self.cgroups.create(name, config)
    }

    /// The CPU and memory limits the pod cgroup `name` holds now.
    pub fn pod_limits(&self, name: &str) -> Option<ResourceConfig> {
        self.cgroups.read_limits(name)
    }

    /// Gives the pod cgroup `name` `config` (an in-place resize).
    pub fn update_pod(&self, name: &str, config: &ResourceConfig) -> Result<(), CgroupError> {
        self.cgroups.update(name, config)
    }

    /// Is something of pod cgroup `name` left in any hierarchy (upstream
    /// deletes a pod cgroup found in even one)?
    pub fn pod_left_anywhere(&self, name: &str) -> bool {
        self.cgroups.exists_anywhere(name)
    }

    /// Removes the pod cgroup `name`, killing what still runs in it.
    pub fn destroy_pod(&self, name: &str) -> Result<(), CgroupError> {
        self.cgroups.destroy(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(items: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
        items
            .iter()
            .map(|(k, v)| (k.to_string(), Quantity::parse(v).unwrap()))
            .collect()
    }

    #[test]
    fn shares_as_upstream() {
        assert_eq!(milli_cpu_to_shares(0), 2);
        assert_eq!(milli_cpu_to_shares(1), 2);
        assert_eq!(milli_cpu_to_shares(100), 102);
        assert_eq!(milli_cpu_to_shares(1000), 1024);
        assert_eq!(milli_cpu_to_shares(1_000_000), MAX_SHARES);
    }

    #[test]
    fn allocatable_and_its_cgroup_as_upstream() {
        // Upstream's TestNodeAllocatableForEnforcement-style case: 10 CPUs,
        // 10Gi, 1 CPU and 1Gi reserved in all.
        let cap = list(&[("cpu", "10"), ("memory", "10Gi"), ("pid", "4194304")]);
        let alloc = allocatable_absolute(
            &cap,
            &list(&[("cpu", "500m"), ("memory", "512Mi")]),
            &list(&[("cpu", "500m"), ("memory", "512Mi"), ("pid", "1000")]),
        );
        assert_eq!(alloc["cpu"].milli_value(), 9000);
        assert_eq!(alloc["memory"].value(), 9 << 30);
        assert_eq!(alloc["pid"].value(), 4_193_304);
        let rc = cgroup_config(&alloc, false);
        assert_eq!(rc.cpu_shares, Some(9216));
        assert_eq!(rc.memory, Some(9 << 30));
        assert_eq!(rc.pids_limit, Some(4_193_304));
        let cpu_only = cgroup_config(&alloc, true);
        assert_eq!((cpu_only.cpu_shares, cpu_only.memory), (Some(9216), None));
        // Reserved beyond capacity: zero, never negative.
        let none = allocatable_absolute(
            &list(&[("memory", "1Gi")]),
            &list(&[("memory", "2Gi")]),
            &BTreeMap::new(),
        );
        assert_eq!(none["memory"].value(), 0);
        assert_eq!(
            cgroup_config(&none, false).memory,
            None,
            "0 is unset, never a limit"
        );
        let huge = cgroup_config(&list(&[("hugepages-2Mi", "4Mi")]), false);
        assert_eq!(huge.hugepage_limits, [(2 << 20, 4 << 20)].into());
    }

    #[test]
    fn enforcement_keys() {
        let e = Enforcement::of(&[
            "pods".into(),
            "system-reserved-compressible".into(),
            "kube-reserved".into(),
        ]);
        assert_eq!(
            e,
            Enforcement {
                pods: true,
                system_reserved: Some(true),
                kube_reserved: Some(false)
            }
        );
        assert_eq!(Enforcement::of(&["none".into()]), Enforcement::default());
    }

    #[test]
    fn the_root_must_exist() {
        let c = Cgroups::at(std::path::Path::new("/nonexistent"), true);
        assert_eq!(
            ContainerManager::new(c.clone(), "/").unwrap().kubepods(),
            "/kubepods"
        );
        assert_eq!(
            ContainerManager::new(c.clone(), "").unwrap().kubepods(),
            "/kubepods"
        );
        let e = ContainerManager::new(c, "/rk").unwrap_err();
        assert!(e.contains("cgroup-root \"/rk\" doesn't exist"), "{e}");
    }
}
