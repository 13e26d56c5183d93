//! Pod and node builders, in the spirit of upstream's `st.MakePod()` /
//! `st.MakeNode()`, and the resource lists, taints, tolerations and host
//! ports they take.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};

use rkube_model::resources::ResourceList;
use rkube_model::selector::Operator;
use rkube_model::{
    Container, ContainerImage, HostPort, LabelSelector, Node, NodeAffinity, NodeSelector,
    NodeSelectorTerm, Pod, PodAffinity, PodAffinityTerm, Quantity, Resources, Taint, TaintEffect,
    Toleration, WeightedPodAffinityTerm,
};

use super::selectors::{
    labels, sel, sorted_req, spread_constraint, strings, term, Kind, Preferred, Required,
};

/// `1 MiB`, upstream's `mb` in the image-locality tests.
pub const MB: i64 = 1024 * 1024;

/// A resource list from `(name, quantity)` pairs.
pub fn rl(pairs: &[(&str, &str)]) -> ResourceList {
    pairs
        .iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                Quantity::parse(v).unwrap_or_else(|e| panic!("quantity {v:?}: {e}")),
            )
        })
        .collect()
}

/// `[("cpu", cpu), ("memory", memory)]`.
pub fn cpu_mem<'a>(cpu: &'a str, memory: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![("cpu", cpu), ("memory", memory)]
}

/// A node-name set, as upstream's `sets.New(...)`.
pub fn names(n: &[&str]) -> BTreeSet<String> {
    n.iter().map(|s| s.to_string()).collect()
}

/// A pod builder (upstream's `st.MakePod()`).
#[derive(Default)]
pub struct PodBuilder(Pod);

/// Starts a pod as upstream's `st.MakePod()` does: no namespace, the
/// default scheduler.
pub fn pod() -> PodBuilder {
    PodBuilder(Pod {
        scheduler_name: "default-scheduler".into(),
        ..Default::default()
    })
}

/// `pod().ns("default")`: how the `upstream` binary's pods start.
pub fn default_ns_pod() -> PodBuilder {
    pod().ns("default")
}

/// Unique UIDs for pods built without a name.
static UID: AtomicU64 = AtomicU64::new(0);

impl PodBuilder {
    /// Name (and uid).
    pub fn name(mut self, n: &str) -> Self {
        self.0.name = n.into();
        self.0.uid = n.into();
        self
    }
    /// Namespace.
    pub fn ns(mut self, n: &str) -> Self {
        self.0.namespace = n.into();
        self
    }
    /// `spec.nodeName`.
    pub fn node(mut self, n: &str) -> Self {
        self.0.node_name = n.into();
        self
    }
    /// Labels (replacing any).
    pub fn labels(mut self, l: &[(&str, &str)]) -> Self {
        self.0.labels = labels(l);
        self
    }
    /// One more label.
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.0.labels.insert(k.into(), v.into());
        self
    }
    /// Being deleted.
    pub fn terminating(mut self) -> Self {
        self.0.terminating = true;
        self
    }

    /// Adds an app container named `con<index>`.
    fn app_container(mut self, c: Container) -> Self {
        let name = format!("con{}", self.0.containers.len());
        self.0.containers.push(Container { name, ..c });
        self
    }
    /// Adds an init container named `<prefix><index>`.
    fn init_container(mut self, prefix: &str, c: Container) -> Self {
        let name = format!("{prefix}{}", self.0.init_containers.len());
        self.0.init_containers.push(Container { name, ..c });
        self
    }
    /// Adds an app container with these requests.
    pub fn req(self, reqs: &[(&str, &str)]) -> Self {
        self.req_list(rl(reqs))
    }
    /// Adds an app container with a ready-made request list.
    pub fn req_list(self, requests: ResourceList) -> Self {
        self.app_container(Container {
            requests,
            ..Default::default()
        })
    }
    /// Adds an app container with no requests.
    pub fn container(mut self, name: &str) -> Self {
        self.0.containers.push(Container {
            name: name.into(),
            ..Default::default()
        });
        self
    }
    /// Adds an app container running an image.
    pub fn image(self, image: &str) -> Self {
        self.app_container(Container {
            image: image.into(),
            ..Default::default()
        })
    }
    /// Adds an app container using these host ports.
    pub fn container_ports(self, ports: Vec<HostPort>) -> Self {
        self.app_container(Container {
            host_ports: ports,
            ..Default::default()
        })
    }
    /// Adds an init container running an image.
    pub fn init_image(self, image: &str) -> Self {
        self.init_container(
            "init-con",
            Container {
                image: image.into(),
                ..Default::default()
            },
        )
    }
    /// Adds a (non-restartable) init container with a ready-made request list.
    pub fn init_req_list(self, requests: ResourceList) -> Self {
        self.init_container(
            "init-con",
            Container {
                requests,
                ..Default::default()
            },
        )
    }
    /// Adds an init container using these host ports.
    pub fn init_container_ports(self, sidecar: bool, ports: Vec<HostPort>) -> Self {
        self.init_container(
            "init-con",
            Container {
                host_ports: ports,
                restartable: sidecar,
                ..Default::default()
            },
        )
    }
    /// Adds a sidecar (restartable init container) with these requests.
    pub fn sidecar_req(self, reqs: &[(&str, &str)]) -> Self {
        self.init_container(
            "sidecar-con",
            Container {
                requests: rl(reqs),
                restartable: true,
                ..Default::default()
            },
        )
    }
    /// Adds an `image` volume.
    pub fn image_volume(mut self, reference: &str) -> Self {
        self.0.image_volumes.push(reference.into());
        self
    }
    /// `spec.overhead`.
    pub fn overhead(mut self, pairs: &[(&str, &str)]) -> Self {
        self.0.overhead = rl(pairs);
        self
    }
    /// Pod-level `spec.resources.requests`.
    pub fn pod_requests(mut self, pairs: &[(&str, &str)]) -> Self {
        self.0.pod_requests = rl(pairs);
        self
    }

    /// `spec.nodeSelector`.
    pub fn node_selector(mut self, pairs: &[(&str, &str)]) -> Self {
        self.0.node_selector = labels(pairs);
        self
    }
    /// Node affinity.
    pub fn node_affinity(mut self, a: NodeAffinity) -> Self {
        self.0.node_affinity = Some(a);
        self
    }
    /// `NodeAffinityIn(key, vals, NodeSelectorTypeMatchExpressions)`.
    pub fn node_affinity_in(self, key: &str, vals: &[&str]) -> Self {
        self.node_affinity_expression(key, Operator::In, vals)
    }
    /// `NodeAffinityNotIn(key, vals, NodeSelectorTypeMatchExpressions)`.
    pub fn node_affinity_not_in(self, key: &str, vals: &[&str]) -> Self {
        self.node_affinity_expression(key, Operator::NotIn, vals)
    }
    /// Adds `key op vals` to the first required node selector term.
    fn node_affinity_expression(mut self, key: &str, op: Operator, vals: &[&str]) -> Self {
        let a = self
            .0
            .node_affinity
            .get_or_insert_with(NodeAffinity::default);
        let sel = a.required.get_or_insert_with(NodeSelector::default);
        if sel.terms.is_empty() {
            sel.terms.push(NodeSelectorTerm::default());
        }
        sel.terms[0]
            .match_expressions
            .push(sorted_req(key, op, vals));
        self
    }

    /// Tolerations (replacing any).
    pub fn tolerations(mut self, t: Vec<Toleration>) -> Self {
        self.0.tolerations = t;
        self
    }
    /// `Toleration(key)`: `key Exists`, any effect.
    pub fn toleration(mut self, key: &str) -> Self {
        self.0.tolerations.push(tol_exists(key, None));
        self
    }

    fn add_term(mut self, anti: bool, t: PodAffinityTerm, kind: Kind, weight: i32) -> Self {
        let a = if anti {
            self.0
                .pod_anti_affinity
                .get_or_insert_with(PodAffinity::default)
        } else {
            self.0.pod_affinity.get_or_insert_with(PodAffinity::default)
        };
        if kind != Preferred {
            a.required.push(t.clone());
        }
        if kind != Required {
            a.preferred
                .push(WeightedPodAffinityTerm { weight, term: t });
        }
        self
    }
    /// A required term (or weighted preferred term with weight 1).
    pub fn affinity(self, t: PodAffinityTerm, kind: Kind) -> Self {
        self.add_term(false, t, kind, 1)
    }
    /// An anti-affinity [`affinity`](Self::affinity).
    pub fn anti_affinity(self, t: PodAffinityTerm, kind: Kind) -> Self {
        self.add_term(true, t, kind, 1)
    }
    /// A preferred term with `weight`.
    pub fn affinity_w(self, t: PodAffinityTerm, weight: i32) -> Self {
        self.add_term(false, t, Preferred, weight)
    }
    /// A preferred anti-affinity term with `weight`.
    pub fn anti_affinity_w(self, t: PodAffinityTerm, weight: i32) -> Self {
        self.add_term(true, t, Preferred, weight)
    }
    /// Sets empty pod affinity and anti-affinity (like
    /// `createPodWithAffinityTerms` with nil terms).
    pub fn empty_affinities(mut self) -> Self {
        self.0.pod_affinity.get_or_insert_with(PodAffinity::default);
        self.0
            .pod_anti_affinity
            .get_or_insert_with(PodAffinity::default);
        self
    }
    pub fn pod_affinity_in(self, key: &str, topo: &str, vals: &[&str], kind: Kind) -> Self {
        self.affinity(term(Some(sel().is(key, vals).obj()), topo).obj(), kind)
    }
    pub fn pod_affinity_not_in(self, key: &str, topo: &str, vals: &[&str], kind: Kind) -> Self {
        self.affinity(term(Some(sel().not_in(key, vals).obj()), topo).obj(), kind)
    }
    pub fn pod_affinity_exists(self, key: &str, topo: &str, kind: Kind) -> Self {
        self.affinity(term(Some(sel().exists(key).obj()), topo).obj(), kind)
    }
    pub fn pod_anti_affinity_in(self, key: &str, topo: &str, vals: &[&str], kind: Kind) -> Self {
        self.anti_affinity(term(Some(sel().is(key, vals).obj()), topo).obj(), kind)
    }
    pub fn pod_anti_affinity_not_in(
        self,
        key: &str,
        topo: &str,
        vals: &[&str],
        kind: Kind,
    ) -> Self {
        self.anti_affinity(term(Some(sel().not_in(key, vals).obj()), topo).obj(), kind)
    }
    pub fn pod_anti_affinity_exists(self, key: &str, topo: &str, kind: Kind) -> Self {
        self.anti_affinity(term(Some(sel().exists(key).obj()), topo).obj(), kind)
    }

    /// `SpreadConstraint(maxSkew, key, mode, selector, minDomains, nodeAffinityPolicy, nodeTaintsPolicy, matchLabelKeys)`;
    /// policies: `Some(true)` Honor, `Some(false)` Ignore.
    #[allow(clippy::too_many_arguments)]
    pub fn spread(
        mut self,
        max_skew: i32,
        key: &str,
        do_not_schedule: bool,
        selector: Option<LabelSelector>,
        min_domains: Option<i32>,
        affinity_policy: Option<bool>,
        taints_policy: Option<bool>,
        match_label_keys: &[&str],
    ) -> Self {
        let mut c = spread_constraint(max_skew, key, do_not_schedule, selector);
        c.min_domains = min_domains;
        c.node_affinity_honor = affinity_policy.unwrap_or(true);
        c.node_taints_honor = taints_policy.unwrap_or(false);
        c.match_label_keys = strings(match_label_keys);
        self.0.topology_spread_constraints.push(c);
        self
    }
    /// A plain constraint (see [`spread_constraint`]).
    pub fn spread_simple(
        mut self,
        max_skew: i32,
        key: &str,
        do_not_schedule: bool,
        selector: Option<LabelSelector>,
    ) -> Self {
        self.0.topology_spread_constraints.push(spread_constraint(
            max_skew,
            key,
            do_not_schedule,
            selector,
        ));
        self
    }

    /// Finishes the pod: a unique uid when it has no name, requests
    /// computed as the loader does.
    pub fn obj(mut self) -> Pod {
        if self.0.uid.is_empty() {
            self.0.uid = format!("uid-{}", UID.fetch_add(1, Ordering::Relaxed));
        }
        rkube_model::requests::compute(&mut self.0);
        self.0
    }
}

/// A node builder (upstream's `st.MakeNode()`).
pub struct NodeBuilder(Node);

/// Starts a node as upstream's `st.MakeNode().Name(name)` does: nothing
/// allocatable.
pub fn node(name: &str) -> NodeBuilder {
    NodeBuilder(Node {
        name: name.into(),
        ..Default::default()
    })
}

/// A node with room for the pods of the InterPodAffinity and
/// PodTopologySpread tests (4 CPUs, 16 GiB, 110 pods allocatable), so that
/// their whole-profile scenarios get past NodeResourcesFit.
pub fn roomy_node(name: &str) -> NodeBuilder {
    let mut n = node(name);
    n.0.allocatable = Resources {
        milli_cpu: 4000,
        memory: 16 << 30,
        allowed_pod_number: 110,
        ..Default::default()
    };
    n
}

/// Upstream's `makeNode(name, milliCPU, memory, extended)` in the
/// noderesources tests (no pod count).
pub fn make_node(name: &str, milli_cpu: i64, memory: i64, extended: &[(&str, i64)]) -> Node {
    let mut l = ResourceList::new();
    l.insert("cpu".into(), Quantity::from_milli(milli_cpu));
    l.insert("memory".into(), Quantity::from_units(memory));
    for (k, v) in extended {
        l.insert(k.to_string(), Quantity::from_units(*v));
    }
    node(name).allocatable(l).obj()
}

impl NodeBuilder {
    /// `status.allocatable` as upstream's `Capacity()` wrapper sets it
    /// (`pods: 32` plus the given resources).
    pub fn capacity(mut self, pairs: &[(&str, &str)]) -> Self {
        let mut list = rl(&[("pods", "32")]);
        list.extend(rl(pairs));
        self.0.allocatable = Resources::from_list(&list);
        self
    }
    /// `status.allocatable`, exactly.
    pub fn allocatable(mut self, list: ResourceList) -> Self {
        self.0.allocatable = Resources::from_list(&list);
        self
    }
    /// Labels (replacing any).
    pub fn labels(mut self, pairs: &[(&str, &str)]) -> Self {
        self.0.labels = labels(pairs);
        self
    }
    /// One more label.
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.0.labels.insert(k.into(), v.into());
        self
    }
    /// Taints (replacing any).
    pub fn taints(mut self, t: Vec<Taint>) -> Self {
        self.0.taints = t;
        self
    }
    /// One more taint.
    pub fn taint(mut self, key: &str, value: &str, effect: TaintEffect) -> Self {
        self.0.taints.push(taint(key, value, effect));
        self
    }
    /// `spec.unschedulable`.
    pub fn unschedulable(mut self, u: bool) -> Self {
        self.0.unschedulable = u;
        self
    }
    /// Images: each entry is (names, size in bytes).
    pub fn images(mut self, images: &[(&[&str], i64)]) -> Self {
        self.0.images = images
            .iter()
            .map(|(names, size)| ContainerImage {
                names: strings(names),
                size_bytes: *size,
            })
            .collect();
        self
    }
    /// The node.
    pub fn obj(self) -> Node {
        self.0
    }
}

/// A taint.
pub fn taint(key: &str, value: &str, effect: TaintEffect) -> Taint {
    Taint {
        key: key.into(),
        value: value.into(),
        effect,
    }
}

/// An `Equal` toleration (the default operator).
pub fn tol_equal(key: &str, value: &str, effect: Option<TaintEffect>) -> Toleration {
    Toleration {
        key: key.into(),
        exists: false,
        value: value.into(),
        effect,
    }
}

/// An `Exists` toleration.
pub fn tol_exists(key: &str, effect: Option<TaintEffect>) -> Toleration {
    Toleration {
        key: key.into(),
        exists: true,
        value: String::new(),
        effect,
    }
}

/// A host port.
pub fn host_port(protocol: &str, ip: &str, port: i32) -> HostPort {
    HostPort {
        host_ip: ip.into(),
        protocol: protocol.into(),
        port,
    }
}
