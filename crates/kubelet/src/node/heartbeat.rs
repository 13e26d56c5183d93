//! The node lifecycle loop for every node of the process: ONE task with a
//! [`Timetable`] issues lease renewals (every leaseDuration/4) and status
//! updates (every nodeStatusUpdateFrequency; PATCHed only when changed or
//! nodeStatusReportFrequency elapsed), spread evenly over the interval,
//! with at most `concurrency` requests in flight. No timer per node.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use futures::stream::FuturesUnordered;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{NodeCondition, NodeStatus};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KQuantity;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use tokio::sync::mpsc;

use crate::config::KubeletConfiguration;
use crate::images::list::ImageList;
use crate::metrics::Metrics;
use crate::node::capacity::{self, NodeBoard, NodeCapacity};
use crate::node::lease;
use crate::node::pressure::PressureBoard;
use crate::node::schedule::{Job, Timetable};
use crate::node::status::{
    allocatable_with_foreign, conditions, should_report, status_patch, Health,
};
use crate::node::{self, NodeDesc, Registered};
use crate::BoxFuture;

/// One node's lifecycle state.
pub struct NodeState {
    /// What the node is.
    pub desc: Arc<NodeDesc>,
    /// Its uid and the conditions found at registration (`None` until
    /// registered).
    pub registered: Option<Registered>,
    base: NodeStatus,
    conditions: Vec<NodeCondition>,
    last_reported: Option<NodeStatus>,
    /// Bumped when `last_reported` is dropped (after a long silence), so a
    /// status patch in flight at that moment does not restore it.
    report_epoch: u64,
    last_report_at: Option<Instant>,
    last_renew: Option<Instant>,
    /// The Lease as last stored (the next renewal updates it).
    lease: Option<Box<Lease>>,
    lease_failures: u32,
}

impl NodeState {
    /// A node already registered (or one not to register: `registerNode:
    /// false`, with an empty uid).
    pub fn new(desc: Arc<NodeDesc>, registered: Registered) -> Self {
        let mut n = Self::unregistered(desc);
        n.conditions = registered.conditions.clone();
        n.registered = Some(registered);
        n
    }

    /// A node the loop registers first.
    pub fn unregistered(desc: Arc<NodeDesc>) -> Self {
        NodeState {
            base: desc.base_status(),
            conditions: Vec::new(),
            desc,
            registered: None,
            last_reported: None,
            report_epoch: 0,
            last_report_at: None,
            last_renew: None,
            lease: None,
            lease_failures: 0,
        }
    }
}

impl NodeState {
    /// Takes the Node's capacity as stored in the API into allocatable
    /// (keys other clients added, see [`allocatable_with_foreign`]); the
    /// next status update reports a change. The device plugins' resources
    /// are the kubelet's own (`devices`), not another client's.
    fn follow_capacity(
        &mut self,
        api_capacity: &BTreeMap<String, KQuantity>,
        devices: Option<&crate::devices::Manager>,
    ) {
        let mut api_capacity = api_capacity.clone();
        if let Some(d) = devices {
            api_capacity.retain(|k, _| !d.owns(k));
        }
        let api_capacity = &api_capacity;
        let own = self.desc.base_status();
        let alloc = allocatable_with_foreign(
            &own.capacity.unwrap_or_default(),
            &own.allocatable.unwrap_or_default(),
            api_capacity,
        );
        if self.base.allocatable.as_ref() != Some(&alloc) {
            tracing::info!(node = %self.desc.name, "capacity changed by another client; allocatable follows");
            self.base.allocatable = Some(alloc);
        }
    }
}

enum Done {
    Register {
        node: usize,
        result: Result<Registered, kube::Error>,
    },
    Lease {
        node: usize,
        started: Instant,
        result: Result<Box<Lease>, kube::Error>,
    },
    Status {
        node: usize,
        due: Instant,
        epoch: u64,
        status: Box<NodeStatus>,
        /// The Node's capacity as the API server stored it.
        result: Result<Option<BTreeMap<String, KQuantity>>, kube::Error>,
    },
}

/// The loop's inputs.
pub struct Heartbeat {
    /// API client.
    pub client: Client,
    /// The configuration.
    pub config: Arc<KubeletConfiguration>,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// Latest node-level health (shared by all nodes of the process).
    pub health: Arc<RwLock<Health>>,
    /// Per-node pressure conditions from the eviction manager.
    pub pressure: Arc<PressureBoard>,
    /// The Nodes as the watch sees them (kept here for pod admission).
    pub nodes: Arc<NodeBoard>,
    /// The runtime's images (`status.images`; none on simulated nodes).
    pub images: Option<Arc<ImageList>>,
    /// Most requests in flight.
    pub concurrency: usize,
    /// The device plugins' resources (none on simulated nodes).
    pub devices: Option<Arc<crate::devices::Manager>>,
    /// The attachable volumes the node's pods use (`status.volumesInUse`;
    /// none on simulated nodes).
    pub volumes_in_use: Option<Arc<crate::volumes::csi::publish::Csi>>,
}

impl Heartbeat {
    /// Runs forever.
    pub async fn run(self, mut nodes: Vec<NodeState>) {
        let lease_secs = self.config.node_lease_duration_seconds;
        let interval = lease::renew_interval(lease_secs);
        let lease_duration = Duration::from_secs(lease_secs as u64);
        let status_every = self.config.node_status_update_frequency;
        let report_every = self.config.node_status_report_frequency;
        let mut table = Timetable::new();
        let start = Instant::now();
        let n = nodes.len().max(1);
        for (i, node) in nodes.iter().enumerate() {
            let offset = |every: Duration| every.mul_f64(i as f64 / n as f64);
            if node.registered.is_some() {
                table.push(start + offset(interval), i, Job::Lease);
                table.push(start + offset(status_every), i, Job::Status);
            } else {
                // Registrations spread over one renew interval; each node's
                // renewals start as soon as it is registered.
                table.push(start + offset(interval), i, Job::Register);
            }
        }
        let (capacity_tx, mut capacity_rx) = mpsc::channel(256);
        let names: HashMap<String, usize> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.desc.name.clone(), i))
            .collect();
        let watch = tokio::spawn(capacity::watch(
            self.client.clone(),
            names,
            self.nodes.clone(),
            capacity_tx,
        ));
        let _stop_watch = AbortOnDrop(watch);
        let mut unregistered = nodes.iter().filter(|n| n.registered.is_none()).count();
        let mut inflight: FuturesUnordered<BoxFuture<'static, Done>> = FuturesUnordered::new();
        let mut retry_soon: VecDeque<(Instant, usize, Job)> = VecDeque::new();
        // Status PATCHes are big; they get at most a quarter of the slots
        // so that lease renewals (what keeps nodes alive) never queue
        // behind them. Status jobs over the cap wait here, in due order.
        // Registrations get at most half.
        let cap = |job: Job| match job {
            Job::Lease => usize::MAX,
            Job::Status => (self.concurrency / 4).max(1),
            Job::Register => (self.concurrency / 2).max(1),
        };
        let slot = |job: Job| job as usize;
        let mut busy = [0usize; 3];
        let mut deferred: [VecDeque<(Instant, usize)>; 3] = Default::default();
        loop {
            let now = Instant::now();
            while let Some(e) = retry_soon.pop_front() {
                table.push(e.0, e.1, e.2);
            }
            while inflight.len() < self.concurrency {
                let waiting = [Job::Status, Job::Register]
                    .into_iter()
                    .find(|j| busy[slot(*j)] < cap(*j) && !deferred[slot(*j)].is_empty());
                let next = match waiting {
                    Some(j) => deferred[slot(j)].pop_front().map(|(due, i)| (due, i, j)),
                    None => table.pop_due(now),
                };
                let Some((due, i, job)) = next else {
                    break;
                };
                if busy[slot(job)] >= cap(job) {
                    deferred[slot(job)].push_back((due, i));
                    continue;
                }
                let n = &nodes[i];
                match job {
                    Job::Register => {
                        let client = self.client.clone();
                        let desc = n.desc.clone();
                        busy[slot(job)] += 1;
                        inflight.push(Box::pin(async move {
                            let result = node::register(&client, &desc).await;
                            Done::Register { node: i, result }
                        }));
                    }
                    Job::Lease => {
                        let client = self.client.clone();
                        let name = n.desc.name.clone();
                        let uid = n
                            .registered
                            .as_ref()
                            .map(|r| r.uid.clone())
                            .unwrap_or_default();
                        let cached = n.lease.as_deref().cloned();
                        inflight.push(Box::pin(async move {
                            let started = Instant::now();
                            let result = lease::renew(&client, &name, &uid, lease_secs, cached)
                                .await
                                .map(Box::new);
                            Done::Lease {
                                node: i,
                                started,
                                result,
                            }
                        }));
                    }
                    Job::Status => {
                        let mut health = self
                            .health
                            .read()
                            .unwrap_or_else(|e| e.into_inner())
                            .clone();
                        let p = self.pressure.get(&n.desc.name);
                        health.memory_pressure |= p.memory;
                        health.disk_pressure |= p.disk;
                        health.pid_pressure |= p.pid;
                        health.shutdown_error = self.pressure.shutdown_error();
                        let mut status = n.base.clone();
                        status.conditions =
                            Some(conditions(&n.conditions, &health, Timestamp::now()));
                        if let Some(images) = &self.images {
                            status.images = images.get();
                        }
                        if let Some(v) = &self.volumes_in_use {
                            let in_use = v.in_use();
                            status.volumes_in_use = (!in_use.is_empty()).then_some(in_use);
                        }
                        if let Some(d) = &self.devices {
                            // Upstream's MachineInfo setter: the plugins'
                            // capacity and allocatable over the node's.
                            let (capacity, allocatable) = d.capacity();
                            status
                                .capacity
                                .get_or_insert_with(Default::default)
                                .extend(capacity);
                            status
                                .allocatable
                                .get_or_insert_with(Default::default)
                                .extend(allocatable);
                        }
                        if !health.runtime_handlers.is_empty() {
                            status.runtime_handlers = Some(health.runtime_handlers.clone());
                        }
                        let since = n.last_report_at.map(|t| now - t).unwrap_or(Duration::MAX);
                        if !should_report(n.last_reported.as_ref(), &status, since, report_every) {
                            table.push(due + status_every, i, Job::Status);
                            continue;
                        }
                        let client = self.client.clone();
                        let name = n.desc.name.clone();
                        let body = status_patch(n.last_reported.as_ref(), &status);
                        let epoch = n.report_epoch;
                        busy[slot(job)] += 1;
                        inflight.push(Box::pin(async move {
                            // The answer read as name and capacity only.
                            let api: Api<NodeCapacity> = Api::all(client);
                            let result = api
                                .patch_status(
                                    &name,
                                    &PatchParams::default(),
                                    &Patch::Strategic(&body),
                                )
                                .await
                                .map(NodeCapacity::capacity);
                            Done::Status {
                                node: i,
                                due,
                                epoch,
                                status: Box::new(status),
                                result,
                            }
                        }));
                    }
                }
            }
            let wake = if inflight.len() < self.concurrency {
                table.next_due()
            } else {
                None
            };
            let sleep = async {
                match wake {
                    Some(t) => tokio::time::sleep_until(t.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                Some(done) = inflight.next(), if !inflight.is_empty() => {
                    let now = Instant::now();
                    match done {
                        Done::Register { node, result } => {
                            busy[slot(Job::Register)] -= 1;
                            let n = &mut nodes[node];
                            match result {
                                Ok(r) => {
                                    n.conditions = r.conditions.clone();
                                    n.registered = Some(r);
                                    n.lease_failures = 0;
                                    self.metrics.nodes_registered.fetch_add(1, Ordering::Relaxed);
                                    table.push(now, node, Job::Lease);
                                    table.push(now, node, Job::Status);
                                    unregistered -= 1;
                                    if unregistered == 0 {
                                        tracing::info!(nodes = nodes.len(), took = ?start.elapsed(), "nodes registered");
                                    }
                                }
                                Err(e) => {
                                    n.lease_failures += 1;
                                    let backoff = Duration::from_millis(200)
                                        .saturating_mul(1 << n.lease_failures.min(6))
                                        .min(Duration::from_secs(7));
                                    tracing::warn!(node = %n.desc.name, error = %e, ?backoff, "registering node failed; retrying");
                                    retry_soon.push_back((now + backoff, node, Job::Register));
                                }
                            }
                        }
                        Done::Lease { node, started, result } => {
                            let n = &mut nodes[node];
                            match result {
                                Ok(stored) => {
                                    let gap = n.last_renew.map(|p| started - p);
                                    self.metrics.record_renewal(gap, interval, lease_duration);
                                    if gap.is_some_and(|g| g > lease_duration) {
                                        tracing::warn!(node = %n.desc.name, gap = ?gap, "lease renewal missed: the lease had expired");
                                    }
                                    // After a long silence (process stopped, apiserver
                                    // unreachable) kube-controller-manager may have set
                                    // the node's conditions to Unknown: post the status
                                    // at the next update instead of trusting what was
                                    // reported last (upstream compares with the Node in
                                    // the API on every update).
                                    if gap.is_some_and(|g| g > 2 * interval) {
                                        n.last_reported = None;
                                        n.report_epoch += 1;
                                    }
                                    n.last_renew = Some(started);
                                    n.lease = Some(stored);
                                    n.lease_failures = 0;
                                    table.push(started + interval, node, Job::Lease);
                                }
                                Err(e) => {
                                    self.metrics.lease_renewal_errors.fetch_add(1, Ordering::Relaxed);
                                    n.lease_failures += 1;
                                    let backoff = Duration::from_millis(200)
                                        .saturating_mul(1 << n.lease_failures.min(6))
                                        .min(Duration::from_secs(7));
                                    tracing::warn!(node = %n.desc.name, error = %e, ?backoff, "renewing lease failed; retrying");
                                    retry_soon.push_back((now + backoff, node, Job::Lease));
                                }
                            }
                        }
                        Done::Status { node, due, epoch, status, result } => {
                            busy[slot(Job::Status)] -= 1;
                            let n = &mut nodes[node];
                            match result {
                                Ok(api_capacity) => {
                                    self.metrics.node_status_patches.fetch_add(1, Ordering::Relaxed);
                                    // Capacity others added is allocatable too, as
                                    // upstream's kubelet derives it: report it at once.
                                    if let Some(c) = api_capacity {
                                        n.follow_capacity(&c, self.devices.as_deref());
                                    }
                                    n.conditions = status.conditions.clone().unwrap_or_default();
                                    // Reported in use: such volumes may be mounted now.
                                    if let Some(v) = &self.volumes_in_use {
                                        v.mark_reported(status.volumes_in_use.as_deref().unwrap_or_default());
                                    }
                                    // Dropped meanwhile: the next report is a full one.
                                    if epoch == n.report_epoch {
                                        n.last_reported = Some(*status);
                                    }
                                    n.last_report_at = Some(now);
                                    table.push((due + status_every).max(now), node, Job::Status);
                                }
                                Err(e) => {
                                    self.metrics.node_status_errors.fetch_add(1, Ordering::Relaxed);
                                    tracing::warn!(node = %n.desc.name, error = %e, "updating node status failed; retrying");
                                    retry_soon.push_back((now + Duration::from_secs(1), node, Job::Status));
                                }
                            }
                        }
                    }
                }
                Some((i, cap)) = capacity_rx.recv() => {
                    if let Some(n) = nodes.get_mut(i) {
                        n.follow_capacity(&cap, self.devices.as_deref());
                    }
                }
                _ = sleep => {}
            }
        }
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
