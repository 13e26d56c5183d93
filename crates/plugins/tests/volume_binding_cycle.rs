//! VolumeBinding's binding cycle through the framework's runners
//! (Reserve, PreBindPreFlight, PreBind, Unreserve) against a fake API
//! server whose PV controller binds a claim some seconds after the
//! scheduler's write, on the host's clock. Messages are upstream's
//! (`binder.go`'s `checkBindings`, the framework's `running PreBind plugin`).

use std::sync::Arc;
use std::time::Duration;

use rkube_framework::in_memory::SnapshotHost;
use rkube_framework::{
    binding, Binder, ClaimApi, Code, CycleState, Framework, HostClock, Listers, Nominator, Outcome,
    Scheduler, Snapshot, VolumeApi,
};
use rkube_model::load::{build, parse_documents};
use rkube_model::volumes::{Pv, Pvc, Volumes};
use rkube_model::{Cluster, Node, Pod};

const CLUSTER: &str = r#"apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Node, metadata: {name: a, labels: {kubernetes.io/hostname: a}}, status: {allocatable: {cpu: "4", memory: 8Gi, pods: "110"}}}
- {apiVersion: v1, kind: Node, metadata: {name: b, labels: {kubernetes.io/hostname: b}}, status: {allocatable: {cpu: "4", memory: 8Gi, pods: "110"}}}
- {apiVersion: storage.k8s.io/v1, kind: StorageClass, metadata: {name: local}, provisioner: kubernetes.io/no-provisioner, volumeBindingMode: WaitForFirstConsumer}
- {apiVersion: storage.k8s.io/v1, kind: StorageClass, metadata: {name: csi}, provisioner: example.com/csi, volumeBindingMode: WaitForFirstConsumer}
- {apiVersion: v1, kind: PersistentVolume, metadata: {name: l1, resourceVersion: "10"}, spec: {storageClassName: local, capacity: {storage: 10Gi}, accessModes: [ReadWriteOnce], local: {path: /d1}, nodeAffinity: {required: {nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [b]}]}]}}}}
- {apiVersion: v1, kind: PersistentVolumeClaim, metadata: {name: c1, namespace: ns, uid: u-c1, resourceVersion: "11"}, spec: {storageClassName: local, accessModes: [ReadWriteOnce], resources: {requests: {storage: 5Gi}}}}
- {apiVersion: v1, kind: PersistentVolumeClaim, metadata: {name: c2, namespace: ns, uid: u-c2, resourceVersion: "12"}, spec: {storageClassName: local, accessModes: [ReadWriteOnce], resources: {requests: {storage: 5Gi}}}}
- {apiVersion: v1, kind: PersistentVolumeClaim, metadata: {name: d1, namespace: ns, uid: u-d1, resourceVersion: "13"}, spec: {storageClassName: csi, accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}}
- {apiVersion: v1, kind: Pod, metadata: {name: p1, namespace: ns, uid: u-p1}, spec: {containers: [{name: c}], volumes: [{name: v, persistentVolumeClaim: {claimName: c1}}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: p2, namespace: ns, uid: u-p2}, spec: {containers: [{name: c}], volumes: [{name: v, persistentVolumeClaim: {claimName: c2}}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: dyn, namespace: ns, uid: u-dyn}, spec: {nodeSelector: {kubernetes.io/hostname: a}, containers: [{name: c}], volumes: [{name: v, persistentVolumeClaim: {claimName: d1}}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: plain, namespace: ns, uid: u-plain}, spec: {containers: [{name: c}]}}
"#;

fn cluster() -> Cluster {
    let objs = parse_documents("test.yaml", CLUSTER).unwrap();
    build(&objs, &mut |_| Ok(false)).unwrap()
}

fn framework(bind_timeout_seconds: i64) -> Framework {
    let cfg = rkube_config::load_str(
        "c.yaml",
        &format!(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- pluginConfig:\n  - name: VolumeBinding\n    args: {{bindTimeoutSeconds: {bind_timeout_seconds}}}\n"
        ),
    )
    .unwrap();
    Framework::new(&cfg.profiles[0], 0, &rkube_plugins::in_tree()).unwrap()
}

fn pod<'a>(c: &'a Cluster, name: &str) -> &'a Pod {
    c.pods.iter().find(|p| p.name == name).unwrap()
}

/// Schedules `pod` and returns the chosen node and the cycle state.
fn scheduled(fw: &Framework, snap: &Snapshot, pod: &Pod) -> (String, CycleState) {
    match Scheduler::new(0, 0).schedule_with(fw, snap, pod, &Nominator::new()) {
        Outcome::Scheduled { node, state, .. } => (snap.nodes[node].name().to_string(), state),
        other => panic!("{other:?}"),
    }
}

/// An API server whose PV controller (or provisioner) completes a
/// binding `bind_after` after the scheduler's write, on the host's clock.
struct FakeApi {
    volumes: Volumes,
    nodes: Vec<Arc<Node>>,
    clock: Duration,
    bind_after: Option<Duration>,
    written_at: Option<Duration>,
    writes: Vec<String>,
    /// Drop the volume's claimRef after the write (the PV controller's unbind).
    reset_claim_ref: bool,
    /// Remove the claim's selected node after the write (a failed provisioning).
    provisioning_fails: bool,
}

impl FakeApi {
    fn new(c: &Cluster, bind_after: Option<Duration>) -> Self {
        FakeApi {
            volumes: c.volumes.clone(),
            nodes: c.nodes.iter().cloned().map(Arc::new).collect(),
            clock: Duration::ZERO,
            bind_after,
            written_at: None,
            writes: Vec::new(),
            reset_claim_ref: false,
            provisioning_fails: false,
        }
    }

    fn controllers_done(&self) -> bool {
        match (self.bind_after, self.written_at) {
            (Some(after), Some(at)) => self.clock >= at + after,
            _ => false,
        }
    }
}

impl Binder for FakeApi {
    fn bind(&mut self, pod: &Pod, node: &str) -> Result<(), String> {
        self.writes.push(format!("bind {} {node}", pod.key()));
        Ok(())
    }

    fn event(&mut self, _: &str, _: &str, _: &str) {}
}

impl VolumeApi for FakeApi {
    fn bind_pv(&mut self, pv: &Pv, pvc: &Pvc) -> Result<Pv, String> {
        self.writes
            .push(format!("pv {} -> {}/{}", pv.name, pvc.namespace, pvc.name));
        self.written_at = Some(self.clock);
        let p = self.volumes.pvs.get_mut(&pv.name).unwrap();
        p.claim_ref = (!self.reset_claim_ref).then(|| pvc.key());
        p.resource_version = "20".into();
        Ok(p.clone())
    }

    fn select_node(&mut self, pvc: &Pvc, node: &str) -> Result<Pvc, String> {
        self.writes
            .push(format!("pvc {}/{} @ {node}", pvc.namespace, pvc.name));
        self.written_at = Some(self.clock);
        let c = self.volumes.pvcs.get_mut(&pvc.key()).unwrap();
        c.selected_node = if self.provisioning_fails {
            String::new()
        } else {
            node.to_string()
        };
        c.resource_version = "21".into();
        Ok(c.clone())
    }

    fn pvc(&self, namespace: &str, name: &str) -> Option<Pvc> {
        let mut c = self.volumes.pvc(namespace, name)?.clone();
        if self.controllers_done() {
            c.volume_name = if c.storage_class == "local" {
                "l1".into()
            } else {
                "provisioned".into()
            };
            c.bind_completed = true;
        }
        Some(c)
    }

    fn pv(&self, name: &str) -> Option<Pv> {
        if name == "provisioned" && self.controllers_done() {
            return Some(Pv {
                name: name.into(),
                ..Default::default()
            });
        }
        self.volumes.pvs.get(name).cloned()
    }
}

impl ClaimApi for FakeApi {
    fn update_claim_status(
        &mut self,
        _: &rkube_model::dra::ResourceClaim,
    ) -> Result<rkube_model::dra::ResourceClaim, String> {
        unreachable!("no DRA here")
    }

    fn resource_claim(&self, _: &str, _: &str) -> Option<rkube_model::dra::ResourceClaim> {
        None
    }

    fn create_claim(
        &mut self,
        _: &rkube_model::dra::ResourceClaim,
    ) -> Result<rkube_model::dra::ResourceClaim, String> {
        Err("no DRA here".into())
    }

    fn delete_claim(&mut self, _: &str, _: &str) -> Result<(), String> {
        Err("no DRA here".into())
    }

    fn set_extended_resource_claim_status(
        &mut self,
        _: &Pod,
        _: &str,
        _: &[rkube_model::dra::RequestMapping],
    ) -> Result<(), String> {
        Err("no DRA here".into())
    }
}

impl Listers for FakeApi {
    fn node(&self, name: &str) -> Option<Arc<Node>> {
        self.nodes.iter().find(|n| n.name == name).cloned()
    }

    fn pod_exists(&self, _: &Pod) -> bool {
        true
    }
}

impl HostClock for FakeApi {
    fn sleep(&mut self, d: Duration) {
        self.clock += d;
    }

    fn elapsed(&self) -> Duration {
        self.clock
    }
}

/// Reserve on an in-memory cache, then PreBindPreFlight and PreBind
/// against `api`: the PreBind status.
fn reserve_and_pre_bind(
    fw: &Framework,
    c: &Cluster,
    name: &str,
    api: &mut FakeApi,
) -> (String, rkube_framework::Status) {
    let mut snap = Snapshot::from_cluster(c);
    let p = pod(c, name);
    let (node, mut state) = scheduled(fw, &snap, p);
    let s = binding::reserve(fw, &mut state, p, &node, &mut SnapshotHost::new(&mut snap));
    assert!(s.is_success(), "{s}");
    assert!(binding::pre_bind_pre_flight(fw, &mut state, p, &node).is_success());
    (
        node.clone(),
        binding::pre_bind(fw, &mut state, p, &node, api),
    )
}

#[test]
fn pre_bind_writes_the_claim_ref_and_waits_for_the_pv_controller() {
    let c = cluster();
    let mut api = FakeApi::new(&c, Some(Duration::from_secs(3)));
    let (node, s) = reserve_and_pre_bind(&framework(600), &c, "p1", &mut api);
    assert_eq!(node, "b", "the only node with a matching volume");
    assert!(s.is_success(), "{s}");
    assert_eq!(api.writes, ["pv l1 -> ns/c1"]);
    // Polled once a second from the write until the controller had bound it.
    assert_eq!(api.clock, Duration::from_secs(3));
}

#[test]
fn pre_bind_times_out_with_upstreams_message() {
    let c = cluster();
    let mut api = FakeApi::new(&c, None);
    let (_, s) = reserve_and_pre_bind(&framework(5), &c, "p1", &mut api);
    assert_eq!(s.code, Code::Error);
    assert_eq!(
        s.message(),
        "running PreBind plugin \"VolumeBinding\": binding volumes: context deadline exceeded"
    );
    assert_eq!(
        api.clock,
        Duration::from_secs(5),
        "waited bindTimeoutSeconds"
    );
}

#[test]
fn a_reset_claim_ref_fails_the_binding() {
    let c = cluster();
    let mut api = FakeApi::new(&c, Some(Duration::from_secs(60)));
    api.reset_claim_ref = true;
    let (_, s) = reserve_and_pre_bind(&framework(600), &c, "p1", &mut api);
    assert_eq!(
        s.message(),
        "running PreBind plugin \"VolumeBinding\": binding volumes: ClaimRef got reset for pv \"l1\""
    );
    assert_eq!(
        api.clock,
        Duration::from_secs(1),
        "found at the first check"
    );
}

#[test]
fn provisioning_selects_the_node_and_fails_when_the_provisioner_gives_up() {
    let c = cluster();
    let mut api = FakeApi::new(&c, Some(Duration::from_secs(2)));
    let (node, s) = reserve_and_pre_bind(&framework(600), &c, "dyn", &mut api);
    assert!(s.is_success(), "{s}");
    assert_eq!(api.writes, [format!("pvc ns/d1 @ {node}")]);

    let mut api = FakeApi::new(&c, Some(Duration::from_secs(2)));
    api.provisioning_fails = true;
    let (_, s) = reserve_and_pre_bind(&framework(600), &c, "dyn", &mut api);
    assert_eq!(
        s.message(),
        "running PreBind plugin \"VolumeBinding\": binding volumes: provisioning failed for PVC \"d1\""
    );
}

#[test]
fn a_pod_without_claims_skips_pre_bind() {
    let c = cluster();
    let fw = framework(600);
    let mut snap = Snapshot::from_cluster(&c);
    let p = pod(&c, "plain");
    let (node, mut state) = scheduled(&fw, &snap, p);
    assert!(
        binding::reserve(&fw, &mut state, p, &node, &mut SnapshotHost::new(&mut snap)).is_success()
    );
    assert_eq!(
        binding::pre_bind_pre_flight(&fw, &mut state, p, &node).code,
        Code::Skip,
        "nothing to bind: no nominated-node write, no PreBind"
    );
    let mut api = FakeApi::new(&c, None);
    assert!(binding::pre_bind(&fw, &mut state, p, &node, &mut api).is_success());
    assert!(api.writes.is_empty());
}

#[test]
fn reserve_takes_the_volume_for_later_pods_and_unreserve_gives_it_back() {
    let c = cluster();
    let fw = framework(600);
    let mut snap = Snapshot::from_cluster(&c);
    let (p1, p2) = (pod(&c, "p1"), pod(&c, "p2"));
    let (node, mut state) = scheduled(&fw, &snap, p1);
    let s = binding::reserve(
        &fw,
        &mut state,
        p1,
        &node,
        &mut SnapshotHost::new(&mut snap),
    );
    assert!(s.is_success());
    assert_eq!(
        snap.volumes.pvs["l1"].claim_ref,
        Some(("ns".to_string(), "c1".to_string())),
        "assumed for c1"
    );
    // p2's claim finds no volume now: the only one is assumed for c1.
    let e = rkube_framework::explain(&fw, &snap, p2).unwrap();
    assert!(e.nodes.iter().all(|n| !n.feasible), "{:?}", e.message);
    binding::unreserve(
        &fw,
        &mut state,
        p1,
        &node,
        &mut SnapshotHost::new(&mut snap),
    );
    assert_eq!(snap.volumes.pvs["l1"].claim_ref, None, "restored");
    let (node2, _) = scheduled(&fw, &snap, p2);
    assert_eq!(node2, "b", "p2 can take it again");
}

#[test]
fn the_whole_attempt_in_memory_binds_and_later_pods_see_it() {
    let c = cluster();
    let fw = framework(600);
    let mut snap = Snapshot::from_cluster(&c);
    let mut sched = Scheduler::new(0, 0);
    let placed = sched.schedule_one(&fw, &mut snap, pod(&c, "p1"), &Nominator::new());
    assert!(matches!(placed, Outcome::Scheduled { .. }), "{placed:?}");
    assert!(snap.volumes.pvc("ns", "c1").unwrap().is_bound());
    match sched.schedule_one(&fw, &mut snap, pod(&c, "p2"), &Nominator::new()) {
        Outcome::Unschedulable { message, .. } => assert!(
            message.starts_with("0/2 nodes are available: 2 node(s) didn't find available persistent volumes to bind."),
            "{message}"
        ),
        other => panic!("{other:?}"),
    }
    // The dynamic claim was provisioned on the pod's node.
    assert!(matches!(
        sched.schedule_one(&fw, &mut snap, pod(&c, "dyn"), &Nominator::new()),
        Outcome::Scheduled { .. }
    ));
    let d1 = snap.volumes.pvc("ns", "d1").unwrap();
    assert!(d1.is_bound());
    assert_eq!(d1.volume_name, "pvc-u-d1");
}
