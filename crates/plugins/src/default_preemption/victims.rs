//! Preemption victims as upstream's `preemption.Victim` units: one running
//! pod, or — with GenericWorkload on — every scheduled pod of a PodGroup
//! whose `disruptionMode` is `all`, which are preempted together or not at
//! all. A unit's priority is its group's when the pod names a group the
//! scheduler knows, and units are ordered by upstream's
//! `MoreImportantVictim`.

use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use rkube_framework::Snapshot;
use rkube_model::pod_groups::PodGroups;
use rkube_model::workloads::PodDisruptionBudget;
use rkube_model::Pod;
use smallvec::SmallVec;

/// What kind of unit a victim is (upstream's entity key type).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum VictimKind {
    /// A pod outside any group (or any pod with GenericWorkload off).
    Pod,
    /// A pod that names a PodGroup, or a whole group with disruption mode
    /// `all`.
    PodGroup,
}

/// One preemption unit.
#[derive(Debug, Clone)]
pub struct Victim {
    /// Its pods, evicted together (one, without a group: kept inline).
    pub pods: SmallVec<[Arc<Pod>; 1]>,
    /// Its priority (the group's for a member of a known group).
    pub priority: i32,
    /// Pod or group.
    pub kind: VictimKind,
    /// The earliest start time of its pods ([`start_time`]).
    pub earliest_start: i128,
}

impl Victim {
    /// A unit of `pods` (at least one).
    pub fn new(pods: SmallVec<[Arc<Pod>; 1]>, priority: i32, kind: VictimKind) -> Self {
        let earliest_start = pods
            .iter()
            .map(|p| start_time(p))
            .min()
            .unwrap_or(i128::MAX);
        Victim {
            pods,
            priority,
            kind,
            earliest_start,
        }
    }

    /// Whether it stands for a group (upstream's `IsGroup`).
    pub fn is_group(&self) -> bool {
        self.kind == VictimKind::PodGroup
    }
}

/// Upstream's `GetPodPriority` without CompositePodGroups: the pod's group
/// priority when `groups` is given (GenericWorkload on) and knows the
/// group, else the pod's own.
pub fn pod_priority(p: &Pod, groups: Option<&PodGroups>) -> i32 {
    match (groups, p.pod_group.as_deref()) {
        (Some(g), Some(name)) => g.get(&p.namespace, name).map_or(p.priority, |g| g.priority),
        _ => p.priority,
    }
}

/// A single pod as a unit (upstream's `NewPodVictim`).
pub fn pod_victim(p: &Arc<Pod>, groups: Option<&PodGroups>) -> Victim {
    let kind = if groups.is_some() && p.pod_group.is_some() {
        VictimKind::PodGroup
    } else {
        VictimKind::Pod
    };
    Victim::new(
        smallvec::smallvec![p.clone()],
        pod_priority(p, groups),
        kind,
    )
}

/// The units the pods of `nodes` (snapshot indices, in order) form
/// (upstream's `getCrossNodesVictims`): with GenericWorkload on, a member
/// of a group with disruption mode `all` brings every scheduled member of
/// the group, wherever it runs, into one unit; any other pod is a unit of
/// its own.
pub fn victims_on_nodes(snapshot: &Snapshot, nodes: &[usize]) -> Vec<Victim> {
    let groups = snapshot.pod_groups.as_deref();
    let mut seen_groups: HashSet<(&str, &str)> = HashSet::new();
    let mut members: Option<GroupMembers> = None;
    let mut out = Vec::new();
    for &i in nodes {
        for p in &snapshot.nodes[i].pods {
            let all_group = match (groups, p.pod_group.as_deref()) {
                (Some(g), Some(name)) => g
                    .get(&p.namespace, name)
                    .filter(|g| g.disruption_all)
                    .map(|_| name),
                _ => None,
            };
            let Some(name) = all_group else {
                out.push(pod_victim(p, groups));
                continue;
            };
            if !seen_groups.insert((p.namespace.as_str(), name)) {
                continue;
            }
            let members = members.get_or_insert_with(|| scheduled_members(snapshot));
            let pods = members
                .get(&(p.namespace.clone(), name.to_string()))
                .map(|m| m.iter().cloned().collect())
                .unwrap_or_else(|| smallvec::smallvec![p.clone()]);
            out.push(Victim::new(
                pods,
                pod_priority(p, groups),
                VictimKind::PodGroup,
            ));
        }
    }
    out
}

/// Pods by `(namespace, group)`.
type GroupMembers = HashMap<(String, String), Vec<Arc<Pod>>>;

/// Every pod on the snapshot that names a group, by group: the groups'
/// scheduled (assumed and bound) members.
fn scheduled_members(snapshot: &Snapshot) -> GroupMembers {
    let mut m: GroupMembers = HashMap::new();
    for n in snapshot.nodes.iter() {
        for p in &n.pods {
            if let Some(g) = &p.pod_group {
                m.entry((p.namespace.clone(), g.clone()))
                    .or_default()
                    .push(p.clone());
            }
        }
    }
    m
}

/// Days since 1970-01-01 of a civil date (proleptic Gregorian).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Nanoseconds since the epoch of an RFC 3339 timestamp.
pub fn parse_rfc3339_nanos(s: &str) -> Option<i128> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> { s.get(r)?.parse().ok() };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, se) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let mut rest = &s[19..];
    let mut nanos: i128 = 0;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(|c| c.is_ascii_digit()).count();
        let mut f: String = frac[..digits].chars().take(9).collect();
        while f.len() < 9 {
            f.push('0');
        }
        nanos = f.parse().ok()?;
        rest = &frac[digits..];
    }
    let offset_secs: i64 = match rest {
        "Z" | "z" => 0,
        o if o.len() == 6 && (o.starts_with('+') || o.starts_with('-')) => {
            let oh: i64 = o[1..3].parse().ok()?;
            let om: i64 = o[4..6].parse().ok()?;
            let v = oh * 3600 + om * 60;
            if o.starts_with('-') {
                -v
            } else {
                v
            }
        }
        _ => return None,
    };
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + se - offset_secs;
    Some(secs as i128 * 1_000_000_000 + nanos)
}

/// A pod's start time for preemption ordering: `status.startTime`, else
/// `metadata.creationTimestamp`, else "now" (upstream uses now for pods that
/// have not started), which sorts after every real time.
pub fn start_time(p: &Pod) -> i128 {
    [&p.start_time, &p.creation_timestamp]
        .into_iter()
        .filter(|t| !t.is_empty())
        .find_map(|t| parse_rfc3339_nanos(t))
        .unwrap_or(i128::MAX)
}

/// Upstream's `MoreImportantVictim`: higher priority, then a group before
/// a pod, then more pods, then the earlier start. `Less` means `a` is more
/// important. With GenericWorkload off every unit is one pod, and this is
/// priority, then start time.
pub fn more_important(a: &Victim, b: &Victim) -> Ordering {
    b.priority
        .cmp(&a.priority)
        .then_with(|| b.kind.cmp(&a.kind))
        .then_with(|| b.pods.len().cmp(&a.pods.len()))
        .then_with(|| a.earliest_start.cmp(&b.earliest_start))
}

/// Upstream's `FilterVictimsWithPDBViolation`: splits units (in order)
/// into those with a pod whose eviction would exceed a PDB's allowed
/// disruptions — with how many such pods — and the others, by index. A PDB
/// with no or an empty selector matches no pod.
pub fn filter_victims_with_pdb_violation(
    victims: &[Victim],
    pdbs: &[PodDisruptionBudget],
) -> (Vec<(usize, i64)>, Vec<usize>) {
    let mut allowed: Vec<i64> = pdbs.iter().map(|p| p.disruptions_allowed as i64).collect();
    let mut is_violating = |v: &Pod| {
        if v.labels.is_empty() {
            return false;
        }
        for (i, pdb) in pdbs.iter().enumerate() {
            if pdb.namespace != v.namespace {
                continue;
            }
            let Some(sel) = &pdb.selector else { continue };
            if sel.is_empty() || !sel.matches(&v.labels) {
                continue;
            }
            if pdb.disrupted_pods.iter().any(|n| n == &v.name) {
                continue;
            }
            allowed[i] -= 1;
            if allowed[i] < 0 {
                return true;
            }
        }
        false
    };
    let mut violating = Vec::new();
    let mut non_violating = Vec::with_capacity(victims.len());
    for (i, v) in victims.iter().enumerate() {
        let n = v.pods.iter().filter(|p| is_violating(p)).count() as i64;
        if n > 0 {
            violating.push((i, n));
        } else {
            non_violating.push(i);
        }
    }
    (violating, non_violating)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339() {
        assert_eq!(parse_rfc3339_nanos("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339_nanos("1970-01-01T00:00:01.5Z"),
            Some(1_500_000_000)
        );
        assert_eq!(parse_rfc3339_nanos("1970-01-01T01:00:00+01:00"), Some(0));
        assert_eq!(
            parse_rfc3339_nanos("2024-03-01T00:00:00Z"),
            Some(1_709_251_200 * 1_000_000_000)
        );
        assert_eq!(parse_rfc3339_nanos("garbage"), None);
    }

    fn unit(priority: i32, kind: VictimKind, pods: usize, start: i128) -> Victim {
        let p = Arc::new(Pod::default());
        Victim {
            pods: std::iter::repeat_n(p, pods).collect(),
            priority,
            kind,
            earliest_start: start,
        }
    }

    /// Upstream's `TestMoreImportantVictim` rules: priority, then type,
    /// then size, then start time.
    #[test]
    fn more_important_victim() {
        use VictimKind::*;
        let cases = [
            (unit(2, Pod, 1, 9), unit(1, PodGroup, 5, 0), Ordering::Less),
            (unit(1, PodGroup, 1, 9), unit(1, Pod, 1, 0), Ordering::Less),
            (
                unit(1, PodGroup, 3, 9),
                unit(1, PodGroup, 2, 0),
                Ordering::Less,
            ),
            (
                unit(1, PodGroup, 2, 0),
                unit(1, PodGroup, 2, 9),
                Ordering::Less,
            ),
            (unit(1, Pod, 1, 9), unit(1, Pod, 1, 0), Ordering::Greater),
        ];
        for (a, b, want) in cases {
            assert_eq!(more_important(&a, &b), want, "{a:?} vs {b:?}");
        }
    }
}
