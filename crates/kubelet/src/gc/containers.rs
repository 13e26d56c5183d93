//! Which dead containers and sandboxes to remove: upstream's container
//! garbage collection (`pkg/kubelet/kuberuntime/kuberuntime_gc.go`), pure.
//!
//! Containers that are not running and older than `min_age` are grouped by
//! (pod uid, container name). All of a group are removed when the pod's
//! content may go (deleted or evicted pods); otherwise the newest
//! `max_per_pod_container` of each group are kept — the one before the
//! running instance is what `kubectl logs --previous` reads — and, when
//! `max_containers` is set, every group is cut to an equal share (at least
//! one) and then the oldest overall go. Sandboxes that are not ready and
//! hold no container go too, all of them for a pod whose content may go,
//! all but the newest for the others.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

/// Upstream's `GCPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Containers created less than this ago are kept.
    pub min_age: Duration,
    /// Dead instances kept per (pod, container name); negative: no limit.
    pub max_per_pod_container: i32,
    /// Dead containers kept on the node; negative: no limit.
    pub max_containers: i32,
}

/// The kubelet's policy: upstream's flag defaults
/// (`--minimum-container-ttl-duration=0`,
/// `--maximum-dead-containers-per-container=1`,
/// `--maximum-dead-containers=-1`).
pub const DEFAULT_POLICY: Policy = Policy {
    min_age: Duration::ZERO,
    max_per_pod_container: 1,
    max_containers: -1,
};

/// A container as the runtime lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerInfo {
    /// Runtime id.
    pub id: String,
    /// Its pod's uid (label `io.kubernetes.pod.uid`).
    pub pod_uid: String,
    /// Container name.
    pub name: String,
    /// The sandbox it belongs to.
    pub sandbox_id: String,
    /// Creation time, nanoseconds since the epoch.
    pub created_ns: i64,
    /// Running: never collected.
    pub running: bool,
    /// State unknown: stopped before it is removed.
    pub unknown: bool,
}

/// A sandbox as the runtime lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxInfo {
    /// Runtime id.
    pub id: String,
    /// Its pod's uid.
    pub pod_uid: String,
    /// Creation time, nanoseconds since the epoch.
    pub created_ns: i64,
    /// Ready sandboxes are never collected.
    pub ready: bool,
}

/// A container to remove.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removal {
    /// Runtime id.
    pub id: String,
    /// Stop it first (its state is unknown: it could be running).
    pub stop_first: bool,
}

/// Newest first, as upstream's `byCreated`.
fn newest_first(v: &mut [&ContainerInfo]) {
    v.sort_by_key(|c| std::cmp::Reverse(c.created_ns));
}

/// Removes the oldest `n` of `unit` (into `out`), returning the rest.
fn remove_oldest<'a>(
    mut unit: Vec<&'a ContainerInfo>,
    n: usize,
    out: &mut Vec<Removal>,
) -> Vec<&'a ContainerInfo> {
    let keep = unit.len().saturating_sub(n);
    if keep > 0 {
        newest_first(&mut unit);
    }
    for c in unit.drain(keep..).rev() {
        out.push(Removal {
            id: c.id.clone(),
            stop_first: c.unknown,
        });
    }
    unit
}

/// The containers to remove at `now_ns`. `content_removable(uid)` is
/// upstream's `ShouldPodContentBeRemoved` (asked only once every pod
/// source is ready, `sources_ready`).
pub fn containers_to_remove(
    containers: &[ContainerInfo],
    now_ns: i64,
    policy: Policy,
    sources_ready: bool,
    content_removable: &dyn Fn(&str) -> bool,
) -> Vec<Removal> {
    let newest_gc =
        now_ns.saturating_sub(i64::try_from(policy.min_age.as_nanos()).unwrap_or(i64::MAX));
    let mut units: BTreeMap<(&str, &str), Vec<&ContainerInfo>> = BTreeMap::new();
    for c in containers {
        if c.running || c.created_ns > newest_gc {
            continue;
        }
        units
            .entry((c.pod_uid.as_str(), c.name.as_str()))
            .or_default()
            .push(c);
    }
    let mut out = Vec::new();
    if sources_ready {
        units.retain(|(uid, _), unit| {
            if content_removable(uid) {
                let all = unit.len();
                remove_oldest(std::mem::take(unit), all, &mut out);
                false
            } else {
                true
            }
        });
    }
    let per_unit = |units: &mut BTreeMap<(&str, &str), Vec<&ContainerInfo>>,
                    max: usize,
                    out: &mut Vec<Removal>| {
        for unit in units.values_mut() {
            if unit.len() > max {
                let n = unit.len() - max;
                *unit = remove_oldest(std::mem::take(unit), n, out);
            }
        }
    };
    if let Ok(max) = usize::try_from(policy.max_per_pod_container) {
        per_unit(&mut units, max, &mut out);
    }
    if let Ok(max) = usize::try_from(policy.max_containers) {
        let count = |u: &BTreeMap<_, Vec<&ContainerInfo>>| u.values().map(Vec::len).sum::<usize>();
        if count(&units) > max {
            let share = (max / units.len().max(1)).max(1);
            per_unit(&mut units, share, &mut out);
            let total = count(&units);
            if total > max {
                let flat: Vec<&ContainerInfo> = units.into_values().flatten().collect();
                remove_oldest(flat, total - max, &mut out);
            }
        }
    }
    out
}

/// The sandboxes to remove: not ready and holding no container (in
/// `containers`), all of a pod whose content may go, all but the newest
/// otherwise.
pub fn sandboxes_to_remove(
    sandboxes: &[SandboxInfo],
    containers: &[ContainerInfo],
    content_removable: &dyn Fn(&str) -> bool,
) -> Vec<String> {
    let in_use: HashSet<&str> = containers.iter().map(|c| c.sandbox_id.as_str()).collect();
    let mut by_pod: BTreeMap<&str, Vec<&SandboxInfo>> = BTreeMap::new();
    for s in sandboxes {
        by_pod.entry(s.pod_uid.as_str()).or_default().push(s);
    }
    let mut out = Vec::new();
    for (uid, mut list) in by_pod {
        let remove = if content_removable(uid) {
            list.len()
        } else {
            list.len() - 1
        };
        let keep = list.len() - remove;
        if keep > 0 {
            list.sort_by_key(|s| std::cmp::Reverse(s.created_ns));
        }
        for s in list[keep..].iter().rev() {
            if !s.ready && !in_use.contains(s.id.as_str()) {
                out.push(s.id.clone());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: i64 = 3_600_000_000_000;

    /// Upstream's `makeGCContainer(pod, name, attempt, createdAt, state)`:
    /// the pod's uid is its name.
    fn c(pod: &str, name: &str, attempt: u32, created: i64, running: bool) -> ContainerInfo {
        ContainerInfo {
            id: format!("{pod}-{name}-{attempt}"),
            pod_uid: pod.into(),
            name: name.into(),
            sandbox_id: format!("{pod}-sandbox"),
            created_ns: created,
            running,
            unknown: false,
        }
    }

    fn exited(pod: &str, name: &str, attempt: u32, created: i64) -> ContainerInfo {
        c(pod, name, attempt, created, false)
    }

    /// Runs a case of upstream's `TestContainerGC` and returns the indexes
    /// of the containers that remain.
    fn remain(
        list: &[ContainerInfo],
        policy: Option<Policy>,
        evict_terminating: bool,
        sources_ready: bool,
        now: i64,
    ) -> Vec<usize> {
        // Upstream's default policy of the test.
        let policy = policy.unwrap_or(Policy {
            min_age: Duration::from_secs(3600),
            max_per_pod_container: 2,
            max_containers: 6,
        });
        // "deleted" pods' content may go; with evictTerminatingPods every
        // pod that is not running (the fake's terminated set holds all of
        // them but "running").
        let removable = |uid: &str| uid == "deleted" || (evict_terminating && uid != "running");
        let gone: HashSet<String> =
            containers_to_remove(list, now, policy, sources_ready, &removable)
                .into_iter()
                .map(|r| r.id)
                .collect();
        (0..list.len())
            .filter(|i| !gone.contains(&list[*i].id))
            .collect()
    }

    #[test]
    fn upstream_container_gc_table() {
        let now = 10 * HOUR;
        let min = |m, p, c| {
            Some(Policy {
                min_age: Duration::from_secs(m),
                max_per_pod_container: p,
                max_containers: c,
            })
        };
        // all containers should be removed when max container limit is 0
        assert_eq!(
            remain(
                &[exited("foo", "bar", 0, 0)],
                min(60, 1, 0),
                false,
                true,
                now
            ),
            Vec::<usize>::new()
        );
        // max containers should be complied when no max per pod container limit is set
        let five: Vec<_> = (0..5)
            .rev()
            .map(|i| exited("foo", "bar", i, i as i64))
            .collect();
        assert_eq!(
            remain(&five, min(60, -1, 4), false, true, now),
            vec![0, 1, 2, 3]
        );
        // no containers should be removed if both limits are not set
        assert_eq!(
            remain(&five[2..], min(60, -1, -1), false, true, now),
            vec![0, 1, 2]
        );
        // recently started containers should not be removed
        let recent: Vec<_> = (0..3).rev().map(|i| exited("foo", "bar", i, now)).collect();
        assert_eq!(remain(&recent, None, false, true, now), vec![0, 1, 2]);
        // oldest containers should be removed when per pod container limit exceeded
        let three: Vec<_> = (0..3)
            .rev()
            .map(|i| exited("foo", "bar", i, i as i64))
            .collect();
        assert_eq!(remain(&three, None, false, true, now), vec![0, 1]);
        // running containers should not be removed
        let mut with_running = three.clone();
        with_running[2].running = true;
        assert_eq!(remain(&with_running, None, false, true, now), vec![0, 1, 2]);
        // no containers should be removed when limits are not exceeded
        assert_eq!(remain(&three[1..], None, false, true, now), vec![0, 1]);
        // max container count should apply per (UID, container) pair
        let pairs: Vec<_> = [("foo", "bar"), ("foo1", "baz"), ("foo2", "bar")]
            .iter()
            .flat_map(|(p, n)| (0..3).rev().map(move |i| exited(p, n, i, i as i64)))
            .collect();
        assert_eq!(
            remain(&pairs, None, false, true, now),
            vec![0, 1, 3, 4, 6, 7]
        );
        // max limit should apply and try to keep from every pod
        let five_pods: Vec<_> = (0..5)
            .flat_map(|p| {
                let (pod, name) = if p == 0 {
                    ("foo".to_string(), "bar".to_string())
                } else {
                    (format!("foo{p}"), format!("bar{p}"))
                };
                (0..2).rev().map(move |i| exited(&pod, &name, i, i as i64))
            })
            .collect();
        assert_eq!(
            remain(&five_pods, None, false, true, now),
            vec![0, 2, 4, 6, 8]
        );
        // oldest pods should be removed if limit exceeded
        let oldest = vec![
            exited("foo", "bar", 2, 2),
            exited("foo", "bar", 1, 1),
            exited("foo1", "bar1", 2, 2),
            exited("foo1", "bar1", 1, 1),
            exited("foo2", "bar2", 1, 1),
            exited("foo3", "bar3", 0, 0),
            exited("foo4", "bar4", 1, 1),
            exited("foo5", "bar5", 0, 0),
            exited("foo6", "bar6", 2, 2),
            exited("foo7", "bar7", 1, 1),
        ];
        assert_eq!(
            remain(&oldest, None, false, true, now),
            vec![0, 2, 4, 6, 8, 9]
        );
        // all non-running containers should be removed when evictTerminatingPods is set
        let terminating = vec![
            exited("foo", "bar", 2, 2),
            exited("foo", "bar", 1, 1),
            exited("foo1", "bar1", 2, 2),
            exited("foo1", "bar1", 1, 1),
            exited("running", "bar2", 1, 1),
            c("foo3", "bar3", 0, 0, true),
        ];
        assert_eq!(remain(&terminating, None, true, true, now), vec![4, 5]);
        // containers for deleted pods should be removed (still respecting MinAge)
        let deleted = vec![
            exited("foo", "bar", 1, 1),
            exited("foo", "bar", 0, 0),
            exited("deleted", "bar1", 2, now),
            exited("deleted", "bar1", 1, 1),
            exited("deleted", "bar1", 0, 0),
        ];
        assert_eq!(remain(&deleted, None, false, true, now), vec![0, 1, 2]);
        // containers for deleted pods may not be removed if sources are not ready
        assert_eq!(
            remain(&[exited("deleted", "bar1", 0, 0)], None, true, false, now),
            vec![0]
        );
    }

    #[test]
    fn the_kubelet_keeps_one_dead_instance_per_container() {
        // A crash-looping container: four dead instances and the running
        // one; the newest dead one stays for `kubectl logs --previous`.
        let mut list: Vec<_> = (0..4)
            .map(|i| exited("p", "app", i, i as i64 + 1))
            .collect();
        list.push(c("p", "app", 4, 10, true));
        let out = containers_to_remove(&list, 100, DEFAULT_POLICY, true, &|_| false);
        let ids: Vec<&str> = out.iter().map(|r| r.id.as_str()).collect();
        // Oldest removed last-to-first, as upstream walks them.
        assert_eq!(ids, ["p-app-0", "p-app-1", "p-app-2"]);
        let mut unknown = list.clone();
        unknown[0].unknown = true;
        let out = containers_to_remove(&unknown, 100, DEFAULT_POLICY, true, &|_| false);
        assert!(out.iter().any(|r| r.id == "p-app-0" && r.stop_first));
    }

    fn sb(pod: &str, id: &str, created: i64, ready: bool) -> SandboxInfo {
        SandboxInfo {
            id: id.into(),
            pod_uid: pod.into(),
            created_ns: created,
            ready,
        }
    }

    /// Upstream's `TestSandboxGC` cases: which sandboxes remain.
    #[test]
    fn upstream_sandbox_gc_table() {
        let run = |sandboxes: &[SandboxInfo], containers: &[ContainerInfo], deleted: &[&str]| {
            let gone = sandboxes_to_remove(sandboxes, containers, &|u| deleted.contains(&u));
            sandboxes
                .iter()
                .filter(|s| !gone.contains(&s.id))
                .map(|s| s.id.clone())
                .collect::<Vec<String>>()
        };
        let with_container = |sandbox: &str| {
            let mut x = exited("foo", "bar", 0, 0);
            x.sandbox_id = sandbox.into();
            x
        };
        // notready sandboxes without containers for deleted pods are collected
        assert!(run(&[sb("foo", "s1", 0, false)], &[], &["foo"]).is_empty());
        // ready sandboxes without containers for deleted pods are not
        assert_eq!(run(&[sb("foo", "s1", 0, true)], &[], &["foo"]), ["s1"]);
        // sandboxes for existing pods are not
        assert_eq!(
            run(
                &[sb("foo", "s1", 0, true), sb("foo1", "s2", 0, false)],
                &[],
                &[]
            )
            .len(),
            2
        );
        // older exited sandboxes without containers of existing pods are, beyond the newest
        assert_eq!(
            run(
                &[sb("foo", "s1", 1, false), sb("foo", "s2", 0, false)],
                &[],
                &[]
            ),
            ["s1"]
        );
        // ...but not those with containers
        assert_eq!(
            run(
                &[sb("foo", "s1", 1, false), sb("foo", "s2", 0, false)],
                &[with_container("s2")],
                &[]
            ),
            ["s1", "s2"]
        );
        // sandbox with containers of a deleted pod stays
        assert_eq!(
            run(
                &[sb("foo", "s1", 0, false)],
                &[with_container("s1")],
                &["foo"]
            ),
            ["s1"]
        );
        // multiple sandboxes should be handled properly
        let mut in_s3 = with_container("s3");
        in_s3.pod_uid = "foo1".into();
        assert_eq!(
            run(
                &[
                    sb("foo", "s1", 1, true),
                    sb("foo", "s2", 0, false),
                    sb("foo1", "s3", 1, false),
                    sb("foo1", "s4", 0, false),
                    sb("deleted", "s5", 0, false),
                ],
                &[in_s3],
                &["deleted"]
            ),
            ["s1", "s3"]
        );
    }
}
