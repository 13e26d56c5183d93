//! `explain` on a member of a pod group (GenericWorkload): the pod is not
//! scheduled on its own but in its group's cycle, so the explanation is
//! that cycle's, run as the simulator runs it ([`crate::queue::gang`]) on
//! the cluster as given:
//!
//! * each pending member's turn (the node the simulation pass picked, the
//!   node it is bound to, or its message), and the group's verdict;
//! * per node, the members placed there and why it rejected each member
//!   that fit nowhere (the first 16 of them; the per-node diagnosis
//!   upstream's FailedScheduling message folds into counts);
//! * the explained pod's own node table at its turn, earlier members
//!   assumed;
//! * when the group does not fit, the fewest copies of one existing node
//!   that make it fit (each node shape tried, found by bisection on the
//!   assumption that more copies never hurt), within a bounded amount of
//!   scheduling work.

use std::collections::{BTreeMap, HashMap};

use rkube_framework::{explain as explain_pod, Framework, PodGroupStates, Snapshot};
use rkube_model::{Cluster, Node, Pod, Resources};

use crate::queue::{Entity, Queue};
use crate::{
    pending_pods, GroupExplanation, GroupNode, GroupPreemption, MemberRejection, MemberVerdict,
    NodesToAdd, Nomination, PodExplanation, Profiles, SimError,
};

/// Most members that fit nowhere whose node tables are kept (and listed
/// per node).
const MAX_TABLES: usize = 16;

/// Most distinct node shapes tried for [`GroupExplanation::fits_with`].
const MAX_SHAPES: usize = 16;

/// A member's turn in the simulation pass: the node picked, and its node
/// table there when it is the explained pod or fit nowhere (the only
/// tables shown: a table costs a filter and score pass over every node).
struct Turn {
    explanation: Option<Result<PodExplanation, String>>,
    fits_on: Option<String>,
}

/// The group's pending members in the order the queue tries them, with the
/// queue that pops them; `None` when `pod` is not a pending member of a
/// known group.
fn group_members<'c>(
    cluster: &'c Cluster,
    profiles: &'c Profiles,
    groups: &PodGroupStates,
    pod: &Pod,
    seed: u64,
) -> Option<(Queue<'c>, Vec<&'c Pod>)> {
    groups.of(pod)?.group.as_ref()?;
    let pending = pending_pods(cluster, profiles);
    let mut queue = Queue::new(profiles, seed, &pending);
    queue.set_pod_groups(groups.clone());
    let members = queue.entities(&pending).into_iter().find_map(|e| match e {
        Entity::Group(m) if m.iter().any(|p| p.uid == pod.uid) => Some(m),
        _ => None,
    })?;
    Some((queue, members))
}

/// Explains `pod`'s pod-group cycle; `None` when the pod is not a pending
/// member of a known pod group (it is then explained on its own).
pub(crate) fn explain_group(
    cluster: &Cluster,
    profiles: &Profiles,
    fw: &Framework,
    groups: &PodGroupStates,
    pod: &Pod,
    seed: u64,
) -> Result<Option<PodExplanation>, SimError> {
    if !pod.node_name.is_empty() {
        return Ok(None);
    }
    let Some((mut queue, members)) = group_members(cluster, profiles, groups, pod, seed) else {
        return Ok(None);
    };
    let state = groups.of(pod).expect("group_members found it");
    let group = state.group.clone().expect("group_members found it");
    let mut turns: HashMap<String, Turn> = HashMap::new();
    let mut snapshot = crate::snapshot_of(cluster, profiles);
    let mut tables = 0;
    let attempt = queue.schedule_group(&mut snapshot, &members, &mut |sim, member, picked| {
        // A table costs a pass over every node: the explained pod's,
        // and those of the first members that fit nowhere.
        let wanted = member.uid == pod.uid || (picked.is_none() && tables < MAX_TABLES);
        if wanted && member.uid != pod.uid {
            tables += 1;
        }
        let explanation = wanted.then(|| {
            explain_pod(fw, sim, member)
                .map(|e| {
                    PodExplanation::from_framework(member, fw, sim, &e, picked.map(str::to_string))
                })
                .map_err(|s| s.message())
        });
        turns.insert(
            member.uid.clone(),
            Turn {
                explanation,
                fits_on: picked.map(str::to_string),
            },
        );
    })?;
    let placements = attempt.placements;
    let preemption = attempt.preemption.map(|pf| GroupPreemption {
        victims: pf.victims.iter().map(|v| v.key()).collect(),
        nominated: pf
            .nominations
            .iter()
            .map(|(i, node)| Nomination {
                pod: members[*i].key(),
                node: node.clone(),
            })
            .collect(),
    });
    let verdicts: Vec<MemberVerdict> = members
        .iter()
        .zip(&placements)
        .map(|(m, p)| MemberVerdict {
            pod: m.key(),
            tried: turns.contains_key(&m.uid),
            fits_on: turns.get(&m.uid).and_then(|t| t.fits_on.clone()),
            node: p.node.clone(),
            message: p.message.clone(),
        })
        .collect();
    let scheduled = placements.iter().any(|p| p.node.is_some());
    let nodes = per_node(&snapshot, &members, &turns);
    // No number of nodes helps a group that never reached its cycle (gated,
    // or refused by validation).
    // The members still missing (minCount less those already bound and
    // those the pass placed), and the requests of one that fit nowhere.
    let fitted = verdicts.iter().filter(|v| v.fits_on.is_some()).count();
    let short = group
        .needed()
        .saturating_sub(state.scheduled_pods() + fitted);
    let left = members
        .iter()
        .zip(&verdicts)
        .find(|(_, v)| v.tried && v.fits_on.is_none())
        .map_or(pod, |(m, _)| *m);
    let hint = (short > 0).then_some((short, &left.requests));
    let (fits_with, search_limited) = if scheduled || turns.is_empty() {
        (None, false)
    } else {
        nodes_to_add(cluster, profiles, pod, seed, hint)?
    };
    let mine = placements
        .iter()
        .zip(&members)
        .find(|(_, m)| m.uid == pod.uid)
        .map(|(p, _)| p.clone())
        .expect("the pod is a member");
    let mut explanation = match turns.remove(&pod.uid).and_then(|t| t.explanation) {
        Some(Ok(e)) => e,
        Some(Err(msg)) => {
            return Err(SimError::Runtime(format!(
                "explaining {}: {msg}",
                pod.key()
            )))
        }
        // Not tried: the pass stopped before its turn.
        None => PodExplanation {
            pod: pod.key(),
            profile: fw.profile_name.clone(),
            nodes: Vec::new(),
            selected_node: None,
            top_nodes: Vec::new(),
            message: String::new(),
            error: None,
            live: None,
            pod_group: None,
        },
    };
    explanation.selected_node = mine.node.clone();
    explanation.message = mine.message;
    if explanation.selected_node.is_some() {
        explanation.message.clear();
    }
    explanation.pod_group = Some(GroupExplanation {
        group: group.key(),
        min_count: group.min_count,
        scheduled_before: state.scheduled_pods(),
        scheduled,
        members: verdicts,
        nodes,
        fits_with,
        search_limited,
        preemption,
    });
    Ok(Some(explanation))
}

/// Per node: the members the pass placed there, and the first filter that
/// rejected each member that fit nowhere.
fn per_node(
    snapshot: &Snapshot,
    members: &[&Pod],
    turns: &HashMap<String, Turn>,
) -> Vec<GroupNode> {
    let mut nodes: BTreeMap<&str, GroupNode> = snapshot
        .nodes
        .iter()
        .map(|n| {
            (
                n.name(),
                GroupNode {
                    name: n.name().to_string(),
                    placed: Vec::new(),
                    rejected: Vec::new(),
                },
            )
        })
        .collect();
    for m in members {
        let Some(turn) = turns.get(&m.uid) else {
            continue;
        };
        if let Some(n) = turn.fits_on.as_deref().and_then(|n| nodes.get_mut(n)) {
            n.placed.push(m.key());
            continue;
        }
        let Some(Ok(e)) = &turn.explanation else {
            continue;
        };
        for ne in e.nodes.iter().filter(|n| !n.feasible) {
            let Some(f) = ne
                .filters
                .iter()
                .find(|f| f.code != "Success" && f.code != "Skip")
            else {
                continue;
            };
            if let Some(n) = nodes.get_mut(ne.name.as_str()) {
                n.rejected.push(MemberRejection {
                    pod: m.key(),
                    plugin: f.plugin.clone(),
                    reasons: f.reasons.clone(),
                });
            }
        }
    }
    nodes.into_values().collect()
}

/// Most member attempts the search for nodes to add spends (each try
/// schedules the group's pending members once), so that a huge gang or a
/// cluster of many shapes is answered in bounded time.
const SEARCH_BUDGET: usize = 100_000;

/// Most copies of a node the search adds.
const MAX_COPIES: usize = 5_000;

/// The fewest copies of one existing node (each distinct shape tried, in
/// name order) with which `pod`'s group is bound, and whether the search
/// stopped at its limits ([`SEARCH_BUDGET`], [`MAX_COPIES`]) before it
/// could say; `None` when no number it tried makes the group fit.
fn nodes_to_add(
    cluster: &Cluster,
    profiles: &Profiles,
    pod: &Pod,
    seed: u64,
    hint: Option<(usize, &Resources)>,
) -> Result<(Option<NodesToAdd>, bool), SimError> {
    nodes_to_add_within(
        cluster,
        profiles,
        pod,
        seed,
        hint,
        SEARCH_BUDGET,
        MAX_COPIES,
    )
}

/// How many pods of `req` one copy of `template` holds by CPU, memory and
/// its pod count (at least 1: the search checks every guess).
fn per_copy(template: &Node, req: &Resources) -> usize {
    let alloc = &template.allocatable;
    let mut per = alloc.allowed_pod_number.max(1);
    if req.milli_cpu > 0 {
        per = per.min(alloc.milli_cpu / req.milli_cpu);
    }
    if req.memory > 0 {
        per = per.min(alloc.memory / req.memory);
    }
    usize::try_from(per).unwrap_or(1).max(1)
}

/// [`nodes_to_add`] with its limits given.
fn nodes_to_add_within(
    cluster: &Cluster,
    profiles: &Profiles,
    pod: &Pod,
    seed: u64,
    hint: Option<(usize, &Resources)>,
    budget: usize,
    max_copies: usize,
) -> Result<(Option<NodesToAdd>, bool), SimError> {
    let Some(groups) = crate::pod_group_states(cluster, profiles) else {
        return Ok((None, false));
    };
    let pending = match group_members(cluster, profiles, &groups, pod, seed) {
        Some((_, m)) => m.len(),
        None => return Ok((None, false)),
    };
    let mut budget = budget;
    let mut limited = pending > max_copies;
    let try_copies = |template: &Node, count: usize, budget: &mut usize| {
        if *budget < pending {
            return Ok(None);
        }
        *budget -= pending;
        fits_with_copies(cluster, profiles, pod, seed, template, count).map(Some)
    };
    let mut best: Option<NodesToAdd> = None;
    for template in shapes(&cluster.nodes) {
        let limit = best
            .as_ref()
            .map_or(pending.min(max_copies), |b| b.count - 1);
        if limit == 0 {
            continue;
        }
        // A first guess from the members still missing and how many fit on
        // one copy by their requests, checked with the guess and one less;
        // bisection otherwise. Either way the answer is a number of copies
        // that was tried and fits.
        let guess =
            hint.map(|(short, req)| short.div_ceil(per_copy(template, req)).clamp(1, limit));
        let mut known_fit = None;
        let mut lo = 1;
        if let Some(g) = guess {
            match try_copies(template, g, &mut budget)? {
                None => {
                    limited = true;
                    break;
                }
                Some(true) => known_fit = Some(g),
                Some(false) => lo = g + 1,
            }
        }
        let mut hi = match known_fit {
            Some(g) => g,
            None if lo > limit => continue,
            None => match try_copies(template, limit, &mut budget)? {
                None => {
                    limited = true;
                    break;
                }
                Some(false) => continue,
                Some(true) => limit,
            },
        };
        if known_fit.is_some() && hi > 1 {
            // One less: when it does not fit, the guess is the answer.
            match try_copies(template, hi - 1, &mut budget)? {
                None => limited = true,
                Some(false) => lo = hi,
                Some(true) => hi -= 1,
            }
        }
        // Bisect for the fewest copies that still fit (`hi` fits).
        while lo < hi && !limited {
            let mid = lo + (hi - lo) / 2;
            match try_copies(template, mid, &mut budget)? {
                None => limited = true,
                Some(true) => hi = mid,
                Some(false) => lo = mid + 1,
            }
        }
        best = Some(NodesToAdd {
            count: hi,
            like: template.name.clone(),
        });
        if limited {
            break;
        }
    }
    Ok((best, limited))
}

/// One node per distinct shape (labels other than the hostname, taints,
/// allocatable, declared features), schedulable ones only, by name.
fn shapes(nodes: &[Node]) -> Vec<&Node> {
    let mut sorted: Vec<&Node> = nodes.iter().filter(|n| !n.unschedulable).collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    let mut seen: Vec<&Node> = Vec::new();
    for n in sorted {
        if seen.len() == MAX_SHAPES {
            break;
        }
        if !seen.iter().any(|s| same_shape(s, n)) {
            seen.push(n);
        }
    }
    seen
}

fn same_shape(a: &Node, b: &Node) -> bool {
    let labels = |n: &Node| {
        let mut l = n.labels.clone();
        l.remove(HOSTNAME);
        l
    };
    a.allocatable == b.allocatable
        && a.taints == b.taints
        && a.declared_features == b.declared_features
        && labels(a) == labels(b)
}

const HOSTNAME: &str = "kubernetes.io/hostname";

/// Whether `pod`'s group is bound on the cluster with `count` copies of
/// `template` added.
fn fits_with_copies(
    cluster: &Cluster,
    profiles: &Profiles,
    pod: &Pod,
    seed: u64,
    template: &Node,
    count: usize,
) -> Result<bool, SimError> {
    let mut c = cluster.clone();
    let mut added = 0;
    let mut i = 0;
    while added < count {
        i += 1;
        let name = format!("{}-copy-{i}", template.name);
        if c.nodes.iter().any(|n| n.name == name) {
            continue;
        }
        let mut n = template.clone();
        n.images.clear();
        if n.labels.contains_key(HOSTNAME) {
            n.labels.insert(HOSTNAME.to_string(), name.clone());
        }
        n.name = name;
        c.nodes.push(n);
        added += 1;
    }
    let Some(groups) = crate::pod_group_states(&c, profiles) else {
        return Ok(false);
    };
    let Some((mut queue, members)) = group_members(&c, profiles, &groups, pod, seed) else {
        return Ok(false);
    };
    let mut snapshot = crate::snapshot_of(&c, profiles);
    let attempt = queue.schedule_group(&mut snapshot, &members, &mut |_, _, _| {})?;
    Ok(attempt.placements.iter().any(|p| p.node.is_some()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two 2-CPU nodes and a gang of four 1.5-CPU pods: two more nodes.
    fn cluster() -> Cluster {
        let mut text = String::from("apiVersion: v1\nkind: List\nitems:\n");
        for n in 1..=2 {
            text.push_str(&format!("- {{apiVersion: v1, kind: Node, metadata: {{name: n{n}}}, status: {{allocatable: {{cpu: '2', memory: 4Gi, pods: '110'}}}}}}\n"));
        }
        text.push_str("- {apiVersion: scheduling.k8s.io/v1beta1, kind: PodGroup, metadata: {name: g, namespace: default}, spec: {schedulingPolicy: {gang: {minCount: 4}}}}\n");
        for i in 0..4 {
            text.push_str(&format!("- {{apiVersion: v1, kind: Pod, metadata: {{name: p{i}, namespace: default}}, spec: {{schedulingGroup: {{podGroupName: g}}, containers: [{{name: c, image: x, resources: {{requests: {{cpu: 1500m}}}}}}]}}}}\n"));
        }
        let docs = rkube_model::load::parse_documents("t.yaml", &text).unwrap();
        rkube_model::load::build(&docs, &mut |_| Ok(false)).unwrap()
    }

    #[test]
    fn the_search_for_nodes_to_add_stays_within_its_limits() {
        let c = cluster();
        let profiles =
            crate::profiles(&rkube_config::default_config_gated(true)).expect("profiles");
        let pod = c.pods.iter().find(|p| p.name == "p0").unwrap();
        let count = |r: &(Option<NodesToAdd>, bool)| r.0.as_ref().map(|a| a.count);
        // Unlimited: exactly two, found.
        let r = nodes_to_add_within(&c, &profiles, pod, 0, None, usize::MAX, 100).unwrap();
        assert_eq!((count(&r), r.1), (Some(2), false));
        // Budget for one try (four pending members): four copies fit, and
        // the search says it could not look for fewer.
        let r = nodes_to_add_within(&c, &profiles, pod, 0, None, 4, 100).unwrap();
        assert_eq!((count(&r), r.1), (Some(4), true));
        // No budget at all: no answer, limited.
        let r = nodes_to_add_within(&c, &profiles, pod, 0, None, 3, 100).unwrap();
        assert_eq!((count(&r), r.1), (None, true));
        // A guess from what is missing (two members of 1.5 CPU, one per
        // 2-CPU copy) is checked with two tries: the guess fits, one less
        // does not. Without it, the same budget stops the bisection.
        let req = pod.requests.clone();
        let r = nodes_to_add_within(&c, &profiles, pod, 0, Some((2, &req)), 8, 100).unwrap();
        assert_eq!((count(&r), r.1), (Some(2), false));
        let r = nodes_to_add_within(&c, &profiles, pod, 0, None, 8, 100).unwrap();
        assert_eq!((count(&r), r.1), (Some(2), true));
        // A wrong guess (one copy) still ends at the fewest that fit.
        let r =
            nodes_to_add_within(&c, &profiles, pod, 0, Some((1, &req)), usize::MAX, 100).unwrap();
        assert_eq!((count(&r), r.1), (Some(2), false));
        // At most one copy: not enough, and it says the cap stopped it.
        let r = nodes_to_add_within(&c, &profiles, pod, 0, None, usize::MAX, 1).unwrap();
        assert_eq!((count(&r), r.1), (None, true));
    }
}
