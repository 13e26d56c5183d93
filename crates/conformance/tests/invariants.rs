//! Property test: over many random clusters, `simulate` never violates a hard
//! constraint. Each placement is replayed against the cluster state at that
//! moment and checked with code written independently of the plugins:
//! resources, NoSchedule/NoExecute taints, unschedulable nodes, node selector
//! and required node affinity, host ports, required pod affinity and
//! anti-affinity (both directions), DoNotSchedule topology spread, and bound
//! volumes' zone and node affinity. Results must also be identical across runs.

use std::collections::{BTreeMap, BTreeSet};

use rkube_conformance::gen;
use rkube_model::load::{build, parse_documents};
use rkube_model::{Cluster, Node, Pod, PodAffinityTerm, TaintEffect};
use rkube_sim::{simulate, SimulateOptions};

fn load(seed: u64) -> Cluster {
    let text = serde_json::to_string(&gen::simulation_cluster(seed)).unwrap();
    let objs = parse_documents("gen.json", &text).unwrap();
    build(&objs, &mut |_| Ok(false)).unwrap()
}

/// Pods on each node as the replay goes.
struct State<'a> {
    nodes: &'a [Node],
    pods: BTreeMap<String, Vec<Pod>>,
    namespaces: BTreeMap<String, rkube_model::Labels>,
}

impl<'a> State<'a> {
    fn new(c: &'a Cluster) -> Self {
        let mut pods: BTreeMap<String, Vec<Pod>> =
            c.nodes.iter().map(|n| (n.name.clone(), vec![])).collect();
        for p in &c.pods {
            if !p.node_name.is_empty() && !p.terminated {
                if let Some(v) = pods.get_mut(&p.node_name) {
                    v.push(p.clone());
                }
            }
        }
        let namespaces = c
            .namespaces
            .iter()
            .map(|(k, v)| (k.clone(), v.labels.clone()))
            .collect();
        State {
            nodes: &c.nodes,
            pods,
            namespaces,
        }
    }

    fn node(&self, name: &str) -> &Node {
        self.nodes.iter().find(|n| n.name == name).unwrap()
    }

    fn all_pods(&self) -> impl Iterator<Item = (&Node, &Pod)> {
        self.pods
            .iter()
            .flat_map(move |(n, ps)| ps.iter().map(move |p| (self.node(n), p)))
    }
}

fn term_namespaces_match(
    term: &PodAffinityTerm,
    owner: &Pod,
    target: &Pod,
    ns: &BTreeMap<String, rkube_model::Labels>,
) -> bool {
    let listed = term.namespaces.contains(&target.namespace);
    match &term.namespace_selector {
        Some(sel) => listed || ns.get(&target.namespace).is_some_and(|l| sel.matches(l)),
        None if term.namespaces.is_empty() => target.namespace == owner.namespace,
        None => listed,
    }
}

fn term_matches(
    term: &PodAffinityTerm,
    owner: &Pod,
    target: &Pod,
    ns: &BTreeMap<String, rkube_model::Labels>,
) -> bool {
    term_namespaces_match(term, owner, target, ns)
        && term
            .selector
            .as_ref()
            .is_some_and(|s| s.matches(&target.labels))
}

fn same_domain(a: &Node, b: &Node, key: &str) -> bool {
    matches!((a.labels.get(key), b.labels.get(key)), (Some(x), Some(y)) if x == y)
}

fn check(state: &State, pod: &Pod, node: &Node) -> Vec<String> {
    let mut v = Vec::new();
    let here = &state.pods[&node.name];
    // Resources.
    let mut used = rkube_model::Resources::default();
    for p in here {
        used.add(&p.requests);
    }
    let a = &node.allocatable;
    if here.len() as i64 + 1 > a.allowed_pod_number {
        v.push("too many pods".into());
    }
    let req = &pod.requests;
    for (name, want, alloc, have) in [
        ("cpu", req.milli_cpu, a.milli_cpu, used.milli_cpu),
        ("memory", req.memory, a.memory, used.memory),
        (
            "ephemeral-storage",
            req.ephemeral_storage,
            a.ephemeral_storage,
            used.ephemeral_storage,
        ),
    ] {
        if want > 0 && have + want > alloc {
            v.push(format!("overcommits {name}"));
        }
    }
    for (name, &want) in &req.scalar {
        if want > 0 && used.scalar(name) + want > a.scalar(name) {
            v.push(format!("overcommits {name}"));
        }
    }
    // Taints and unschedulable.
    for t in &node.taints {
        if matches!(t.effect, TaintEffect::NoSchedule | TaintEffect::NoExecute)
            && !pod.tolerations.iter().any(|tol| tol.tolerates(t))
        {
            v.push(format!("ignores taint {}", t.key));
        }
    }
    if node.unschedulable
        && !pod.tolerations.iter().any(|t| {
            t.tolerates(&rkube_model::Taint {
                key: "node.kubernetes.io/unschedulable".into(),
                value: String::new(),
                effect: TaintEffect::NoSchedule,
            })
        })
    {
        v.push("node is unschedulable".into());
    }
    // Node selector and required affinity.
    if !pod
        .node_selector
        .iter()
        .all(|(k, val)| node.labels.get(k) == Some(val))
    {
        v.push("nodeSelector".into());
    }
    if let Some(req) = pod.node_affinity.as_ref().and_then(|a| a.required.as_ref()) {
        if !req.matches(&node.name, &node.labels) {
            v.push("required node affinity".into());
        }
    }
    // Host ports.
    for want in pod.host_ports() {
        for p in here {
            for have in p.host_ports() {
                let ip_clash = want.host_ip == have.host_ip
                    || want.host_ip == "0.0.0.0"
                    || have.host_ip == "0.0.0.0";
                if ip_clash && want.protocol == have.protocol && want.port == have.port {
                    v.push(format!("host port {}", want.port));
                }
            }
        }
    }
    // Required anti-affinity, both directions.
    if let Some(anti) = &pod.pod_anti_affinity {
        for t in &anti.required {
            for (n, q) in state.all_pods() {
                if same_domain(n, node, &t.topology_key)
                    && term_matches(t, pod, q, &state.namespaces)
                {
                    v.push(format!("anti-affinity with {}", q.key()));
                }
            }
        }
    }
    for (n, q) in state.all_pods() {
        for t in q.pod_anti_affinity.iter().flat_map(|a| a.required.iter()) {
            if same_domain(n, node, &t.topology_key) && term_matches(t, q, pod, &state.namespaces) {
                v.push(format!("violates anti-affinity of {}", q.key()));
            }
        }
    }
    // Required affinity (with the first-pod-of-a-group exception).
    if let Some(aff) = &pod.pod_affinity {
        if !aff.required.is_empty() {
            let matches_all = |q: &Pod| {
                aff.required
                    .iter()
                    .all(|t| term_matches(t, pod, q, &state.namespaces))
            };
            let in_domain = aff.required.iter().all(|t| {
                state
                    .all_pods()
                    .any(|(n, q)| same_domain(n, node, &t.topology_key) && matches_all(q))
            });
            let anywhere = state.all_pods().any(|(_, q)| matches_all(q));
            let has_keys = aff
                .required
                .iter()
                .all(|t| node.labels.contains_key(&t.topology_key));
            if !(in_domain || (!anywhere && matches_all(pod) && has_keys)) {
                v.push("required pod affinity".into());
            }
        }
    }
    // DoNotSchedule topology spread. Only nodes that have the topology keys
    // of every hard constraint count towards any of them.
    let hard: Vec<_> = pod
        .topology_spread_constraints
        .iter()
        .filter(|c| c.do_not_schedule)
        .collect();
    for c in &hard {
        let Some(domain) = node.labels.get(&c.topology_key) else {
            v.push("spread: node lacks the topology key".into());
            continue;
        };
        let eligible: Vec<&Node> = state
            .nodes
            .iter()
            .filter(|n| hard.iter().all(|h| n.labels.contains_key(&h.topology_key)))
            .filter(|n| {
                !c.node_affinity_honor
                    || (pod
                        .node_selector
                        .iter()
                        .all(|(k, val)| n.labels.get(k) == Some(val))
                        && pod
                            .node_affinity
                            .as_ref()
                            .and_then(|a| a.required.as_ref())
                            .is_none_or(|s| s.matches(&n.name, &n.labels)))
            })
            .filter(|n| {
                !c.node_taints_honor
                    || n.taints.iter().all(|t| {
                        t.effect == TaintEffect::PreferNoSchedule
                            || pod.tolerations.iter().any(|tol| tol.tolerates(t))
                    })
            })
            .collect();
        let matching = |q: &Pod| {
            q.namespace == pod.namespace
                && !q.terminating
                && c.selector.as_ref().is_some_and(|s| s.matches(&q.labels))
        };
        let mut counts: BTreeMap<&str, i64> = BTreeMap::new();
        for n in &eligible {
            let d = n.labels[&c.topology_key].as_str();
            let k = state.pods[&n.name].iter().filter(|q| matching(q)).count() as i64;
            *counts.entry(d).or_default() += k;
        }
        let domains: BTreeSet<&str> = counts.keys().copied().collect();
        let mut min = counts.values().copied().min().unwrap_or(0);
        if c.min_domains.is_some_and(|m| (domains.len() as i32) < m) {
            min = 0;
        }
        let own = counts.get(domain.as_str()).copied().unwrap_or(0);
        let self_match = i64::from(matching(pod));
        if own + self_match - min > c.max_skew as i64 {
            v.push(format!(
                "spread on {} exceeds maxSkew {}",
                c.topology_key, c.max_skew
            ));
        }
    }
    v
}

fn check_volumes(c: &Cluster, pod: &Pod, node: &Node) -> Vec<String> {
    let mut v = Vec::new();
    for claim in pod.claim_names() {
        let Some(pvc) = c.volumes.pvc(&pod.namespace, claim) else {
            continue;
        };
        let Some(pv) = c.volumes.pvs.get(&pvc.volume_name) else {
            continue;
        };
        if let Some(aff) = &pv.node_affinity {
            if !aff.matches(&node.name, &node.labels) {
                v.push(format!("volume {} node affinity", pv.name));
            }
        }
        if let Some(zone) = pv.labels.get("topology.kubernetes.io/zone") {
            if node
                .labels
                .get("topology.kubernetes.io/zone")
                .is_some_and(|z| z != zone)
            {
                v.push(format!("volume {} zone", pv.name));
            }
        }
    }
    v
}

#[test]
fn simulate_never_violates_hard_constraints() {
    let cfg = rkube_config::default_config();
    let mut placed_total = 0;
    let mut rejected_total = 0;
    for seed in 0..400u64 {
        let c = load(seed);
        let report = simulate(
            &c,
            &cfg,
            &SimulateOptions {
                seed,
                explain: false,
                ..Default::default()
            },
        )
        .unwrap();
        assert!(
            report.preemptions.is_empty(),
            "seed {seed}: no priorities, no preemption"
        );
        let mut state = State::new(&c);
        for p in &report.placements {
            let pod = c.pods.iter().find(|q| q.key() == p.pod).unwrap();
            let Some(node_name) = &p.node else {
                rejected_total += 1;
                assert!(
                    p.message.starts_with("0/"),
                    "seed {seed}: {} has a FailedScheduling message",
                    p.pod
                );
                continue;
            };
            placed_total += 1;
            let node = state.node(node_name).clone();
            let mut problems = check(&state, pod, &node);
            problems.extend(check_volumes(&c, pod, &node));
            assert!(
                problems.is_empty(),
                "seed {seed}: {} on {node_name}: {problems:?}",
                p.pod
            );
            let mut placed = pod.clone();
            placed.node_name = node_name.clone();
            state.pods.get_mut(node_name).unwrap().push(placed);
        }
        // Same seed, same result.
        let again = simulate(
            &c,
            &cfg,
            &SimulateOptions {
                seed,
                explain: false,
                ..Default::default()
            },
        )
        .unwrap();
        let a: Vec<_> = report
            .placements
            .iter()
            .map(|p| (&p.pod, &p.node))
            .collect();
        let b: Vec<_> = again.placements.iter().map(|p| (&p.pod, &p.node)).collect();
        assert_eq!(a, b, "seed {seed}: simulate is deterministic");
    }
    // The generator must exercise both outcomes, or the test proves little.
    assert!(placed_total > 1000, "placed {placed_total}");
    assert!(rejected_total > 100, "rejected {rejected_total}");
}
