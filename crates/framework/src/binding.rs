//! What happens once a node is chosen, as upstream's `schedule_one.go`
//! splits it: the end of the scheduling cycle (the pod is assumed on the
//! node by the caller, then Reserve and Permit run) and the binding cycle
//! (WaitOnPermit, PreBind, Bind, PostBind), with Unreserve on every failure.
//!
//! The framework does no I/O: the plugins reach the host through two
//! traits. [`AssumeCache`] is the host's cache as Reserve and Unreserve
//! change it (upstream's assume caches over the informers), [`ClusterApi`]
//! the API server as PreBind and Bind write to it (upstream's clientset).
//! The live scheduler implements them over the API server and runs the
//! binding cycle off the scheduling loop; the simulator implements them over
//! its snapshot ([`crate::in_memory`]) and runs everything in one go.
//!
//! Messages and codes are upstream's: a plugin's rejection is returned as
//! it is (with the plugin name), any other failure becomes an Error status
//! `running <Point> plugin "<name>": <message>`.

use std::sync::Arc;
use std::time::Duration;

use rkube_model::Pod;

use crate::cycle_state::CycleState;
use crate::diagnosis::{fit_error_message, Diagnosis};
use crate::framework::{Framework, Point};
pub use crate::host::{AssumeCache, Binder, ClaimApi, ClusterApi, HostClock, Listers, VolumeApi};
use crate::metrics;
use crate::status::{Code, Status};
use crate::waiting::{WaitingPod, WaitingPods};

/// The longest a Permit plugin may make a pod wait (upstream's
/// `maxTimeout`): longer timeouts are cut to it.
pub const MAX_PERMIT_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// One extension point's run, measured for the metrics recorder.
fn timed(fw: &Framework, point: Point, run: impl FnOnce() -> Status) -> Status {
    let t0 = metrics::start(&fw.recorder);
    let status = run();
    metrics::point_done(&fw.recorder, t0, &fw.profile_name, point.name(), &status);
    status
}

/// One plugin call, measured in sampled cycles.
fn call(
    fw: &Framework,
    sampled: bool,
    plugin: &'static str,
    point: Point,
    f: impl FnOnce() -> Status,
) -> Status {
    metrics::time_plugin(
        &fw.recorder,
        sampled,
        plugin,
        point.name(),
        Status::clone,
        f,
    )
}

fn failed(point: Point, plugin: &'static str, s: Status) -> Status {
    if s.is_rejected() {
        return s.with_plugin(plugin);
    }
    Status::error(format!(
        "running {} plugin {plugin:?}: {}",
        point.name(),
        s.message()
    ))
    .with_plugin(plugin)
}

/// Runs every Reserve plugin in order (upstream's
/// `RunReservePluginsReserve`). On the first failure every Reserve plugin's
/// Unreserve runs (in reverse order, as the scheduling cycle does right
/// after) and the failure is returned; the caller forgets the assumed pod.
pub fn reserve(
    fw: &Framework,
    state: &mut CycleState,
    pod: &Pod,
    node: &str,
    cache: &mut dyn AssumeCache,
) -> Status {
    let sampled = state.record_plugin_metrics;
    let status = timed(fw, Point::Reserve, || {
        for p in fw.plugins(Point::Reserve) {
            let r = p.as_reserve().expect("framework checked");
            let s = call(fw, sampled, p.name(), Point::Reserve, || {
                r.reserve(state, pod, node, cache)
            });
            if !s.is_success() {
                return failed(Point::Reserve, p.name(), s);
            }
        }
        Status::success()
    });
    if !status.is_success() {
        unreserve(fw, state, pod, node, cache);
    }
    status
}

/// The pod as the scheduler assumes it once a node is chosen: on `node`,
/// its nomination cleared (upstream's `assumedPod`).
pub fn assumed_pod(pod: &Pod, node: &str) -> Arc<Pod> {
    let mut assumed = pod.clone();
    assumed.node_name = node.to_string();
    assumed.nominated_node_name.clear();
    Arc::new(assumed)
}

/// The end of a scheduling cycle once the pod is assumed on `node`
/// (upstream's `schedulingCycle` after `assume`): Reserve, then Permit;
/// on a Permit failure every Unreserve runs (a Reserve failure has run
/// them already). `Ok` with Permit's status (success, or Wait: the pod is
/// in `waiting`), or the failure, after which the caller forgets the
/// assumed pod and reports a rejection as upstream's FitError over the
/// chosen node ([`fit_error`]). The one sequence both the simulator and
/// the live scheduler execute.
pub fn reserve_and_permit(
    fw: &Framework,
    state: &mut CycleState,
    pod: &Pod,
    node: &str,
    cache: &mut dyn AssumeCache,
    waiting: &WaitingPods,
) -> Result<Status, Status> {
    let s = reserve(fw, state, pod, node, cache);
    let s = if s.is_success() {
        let s = permit(fw, state, pod, node, waiting);
        if !s.is_success() && s.code != Code::Wait {
            unreserve(fw, state, pod, node, cache);
        }
        s
    } else {
        s
    };
    if s.is_success() || s.code == Code::Wait {
        return Ok(s);
    }
    Err(s)
}

/// Runs every Reserve plugin's Unreserve in reverse order (upstream's
/// `RunReservePluginsUnreserve`; Unreserve cannot fail).
pub fn unreserve(
    fw: &Framework,
    state: &mut CycleState,
    pod: &Pod,
    node: &str,
    cache: &mut dyn AssumeCache,
) {
    let t0 = metrics::start(&fw.recorder);
    for p in fw.plugins(Point::Reserve).iter().rev() {
        p.as_reserve()
            .expect("framework checked")
            .unreserve(state, pod, node, cache);
    }
    metrics::point_done(
        &fw.recorder,
        t0,
        &fw.profile_name,
        "Unreserve",
        &Status::success(),
    );
}

/// Runs every Permit plugin (upstream's `RunPermitPlugins`). Success: bind.
/// Wait: some plugins asked to wait (each for its timeout, at most
/// [`MAX_PERMIT_TIMEOUT`]) and none rejected; the pod is now in `waiting`
/// and the binding cycle waits for it. Otherwise a rejection or error.
pub fn permit(
    fw: &Framework,
    state: &mut CycleState,
    pod: &Pod,
    node: &str,
    waiting: &WaitingPods,
) -> Status {
    let t0 = metrics::start(&fw.recorder);
    let mut waits: Vec<(&'static str, Duration)> = Vec::new();
    let mut status = Status::success();
    let sampled = state.record_plugin_metrics;
    for p in fw.plugins(Point::Permit) {
        let pp = p.as_permit().expect("framework checked");
        let (s, timeout) = metrics::time_plugin(
            &fw.recorder,
            sampled,
            p.name(),
            "Permit",
            |(s, _): &(Status, Duration)| s.clone(),
            || pp.permit(state, pod, node),
        );
        match s.code {
            Code::Success => {}
            Code::Wait => waits.push((p.name(), timeout.min(MAX_PERMIT_TIMEOUT))),
            _ => {
                status = failed(Point::Permit, p.name(), s);
                break;
            }
        }
    }
    if status.is_success() && !waits.is_empty() {
        waiting.add(WaitingPod::new(pod, node, &waits));
        status = Status::new(
            Code::Wait,
            format!(
                "one or more plugins asked to wait and no plugin rejected pod {:?}",
                pod.name
            ),
        );
    }
    metrics::point_done(&fw.recorder, t0, &fw.profile_name, "Permit", &status);
    status
}

/// Runs every PreBind plugin's PreBindPreFlight (upstream's
/// `RunPreBindPreFlights`): Success when some plugin has work to do in
/// PreBind, Skip when none has (their PreBind is then not run), or an
/// Error. With upstream's default `NominatedNodeNameForExpectation`, a
/// Success (or a pod waiting on Permit) makes the caller write the chosen
/// node as the pod's `status.nominatedNodeName` before PreBind.
pub fn pre_bind_pre_flight(
    fw: &Framework,
    state: &mut CycleState,
    pod: &Pod,
    node: &str,
) -> Status {
    let t0 = metrics::start(&fw.recorder);
    let mut status = Status::skip();
    let sampled = state.record_plugin_metrics;
    for p in fw.plugins(Point::PreBind) {
        let pb = p.as_pre_bind().expect("framework checked");
        let s = metrics::time_plugin(
            &fw.recorder,
            sampled,
            p.name(),
            "PreBindPreFlight",
            Status::clone,
            || pb.pre_bind_pre_flight(state, pod, node),
        );
        match s.code {
            Code::Success => status = Status::success(),
            Code::Skip => state.skip_pre_bind.insert(p.name()),
            Code::Error => {
                status = Status::error(format!(
                    "running PreBindPreFlight {:?}: {}",
                    p.name(),
                    s.message()
                ))
                .with_plugin(p.name());
                break;
            }
            code => {
                status = Status::error(format!(
                    "PreBindPreFlight {} returned {:?}, which is unsupported. It is supposed to return Success, Skip, or Error status",
                    p.name(),
                    code.as_str()
                ))
                .with_plugin(p.name());
                break;
            }
        }
    }
    metrics::point_done(
        &fw.recorder,
        t0,
        &fw.profile_name,
        "PreBindPreFlight",
        &status,
    );
    status
}

/// The binding cycle from WaitOnPermit on (upstream's `bindingCycle`
/// after the pre-flight, which the caller runs first with
/// [`pre_bind_pre_flight`] to write the nominated node): waits for the
/// pod's Permit verdict if it is waiting, then PreBind, Bind and PostBind.
/// A failure is returned for the caller's failure handling (Unreserve,
/// forget the assumed pod, requeue).
pub fn binding_cycle(
    fw: &Framework,
    state: &mut CycleState,
    pod: &Pod,
    node: &str,
    waiting: &WaitingPods,
    api: &mut dyn ClusterApi,
) -> Status {
    let s = waiting.wait_on_permit(&pod.uid);
    if !s.is_success() {
        return if s.is_rejected() {
            rejection_as_fit_error(node, s)
        } else {
            Status::error(format!("waiting on permit for pod: {}", s.message()))
                .with_plugin(s.plugin)
        };
    }
    let s = pre_bind(fw, state, pod, node, api);
    if !s.is_success() {
        return s;
    }
    let s = bind(fw, state, pod, node, api);
    if !s.is_success() {
        return s;
    }
    post_bind(fw, state, pod, node);
    Status::success()
}

/// Runs every PreBind plugin in order (upstream's `RunPreBindPlugins`).
pub fn pre_bind(
    fw: &Framework,
    state: &mut CycleState,
    pod: &Pod,
    node: &str,
    api: &mut dyn ClusterApi,
) -> Status {
    let sampled = state.record_plugin_metrics;
    timed(fw, Point::PreBind, || {
        for p in fw.plugins(Point::PreBind) {
            if state.skip_pre_bind.contains(p.name()) {
                continue;
            }
            let pb = p.as_pre_bind().expect("framework checked");
            let s = call(fw, sampled, p.name(), Point::PreBind, || {
                pb.pre_bind(state, pod, node, api)
            });
            if !s.is_success() && s.code != Code::Skip {
                return failed(Point::PreBind, p.name(), s);
            }
        }
        Status::success()
    })
}

/// Runs the Bind plugins until one does not skip (upstream's
/// `RunBindPlugins`); every plugin skipping is a Skip status, which the
/// binding cycle treats as a failure, as upstream does.
pub fn bind(
    fw: &Framework,
    state: &mut CycleState,
    pod: &Pod,
    node: &str,
    api: &mut dyn ClusterApi,
) -> Status {
    let sampled = state.record_plugin_metrics;
    timed(fw, Point::Bind, || {
        for p in fw.plugins(Point::Bind) {
            let b = p.as_bind().expect("framework checked");
            let s = call(fw, sampled, p.name(), Point::Bind, || {
                b.bind(state, pod, node, api)
            });
            match s.code {
                Code::Skip => continue,
                Code::Success => return s,
                _ => return failed(Point::Bind, p.name(), s),
            }
        }
        Status::skip()
    })
}

/// Runs every PostBind plugin (informational; cannot fail).
pub fn post_bind(fw: &Framework, state: &mut CycleState, pod: &Pod, node: &str) {
    let t0 = metrics::start(&fw.recorder);
    for p in fw.plugins(Point::PostBind) {
        p.as_post_bind()
            .expect("framework checked")
            .post_bind(state, pod, node);
    }
    metrics::point_done(
        &fw.recorder,
        t0,
        &fw.profile_name,
        "PostBind",
        &Status::success(),
    );
}

/// A rejection at Reserve, Permit or WaitOnPermit as upstream reports it:
/// a FitError over the one chosen node, whose status is the rejection
/// (`0/1 nodes are available: 1 <reason>.`), and its diagnosis.
pub fn fit_error(node: &str, status: &Status) -> (Diagnosis, String) {
    let mut diagnosis = Diagnosis::default();
    diagnosis.add_plugin_status(status);
    diagnosis
        .node_to_status
        .nodes
        .insert(std::sync::Arc::from(node), status.clone());
    let message = fit_error_message(1, &diagnosis);
    (diagnosis, message)
}

/// [`fit_error`] as a status: the rejection's code and plugin, the
/// FitError's message.
pub fn rejection_as_fit_error(node: &str, status: Status) -> Status {
    let (_, message) = fit_error(node, &status);
    Status::new(status.code, message).with_plugin(status.plugin)
}

/// The condition reason of a failed attempt (upstream's
/// `handleSchedulingFailure`): `Unschedulable` for a rejection,
/// `SchedulerError` for anything else.
pub fn failure_reason(status: &Status) -> &'static str {
    if status.is_rejected() {
        "Unschedulable"
    } else {
        "SchedulerError"
    }
}

#[cfg(test)]
mod tests {
    //! The runners driven by one configurable fake plugin: its behaviour at
    //! each point comes from its args (`reserve`, `permit`, `preBind`,
    //! `bind`: "ok", "reject", "error", "skip", "wait"), and every call is
    //! logged in a thread-local journal.

    use std::cell::RefCell;

    use rkube_config::{PluginConfig, PluginSet, Plugins, Profile};
    use serde_json::{json, Value};

    use super::*;
    use crate::framework::Registry;
    use crate::in_memory::SnapshotHost;
    use crate::plugin::{
        BindPlugin, Plugin, PostBindPlugin, PreBindPlugin, QueueSortPlugin, QueuedPodRef,
        ReservePlugin,
    };
    use crate::snapshot::Snapshot;

    thread_local! {
        static JOURNAL: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
    }

    fn log(entry: String) {
        JOURNAL.with(|j| j.borrow_mut().push(entry));
    }

    fn journal() -> Vec<String> {
        JOURNAL.with(|j| std::mem::take(&mut *j.borrow_mut()))
    }

    struct Fake {
        name: &'static str,
        args: Value,
    }

    impl Fake {
        fn verdict(&self, point: &str) -> Status {
            log(format!("{} {}", point, self.name));
            match self.args[point].as_str().unwrap_or("ok") {
                "reject" => Status::new(Code::Unschedulable, format!("{} says no", self.name)),
                "error" => Status::error("boom"),
                "skip" => Status::skip(),
                "wait" => Status::new(Code::Wait, ""),
                _ => Status::success(),
            }
        }
    }

    impl Plugin for Fake {
        fn name(&self) -> &'static str {
            self.name
        }
        fn as_queue_sort(&self) -> Option<&dyn QueueSortPlugin> {
            Some(self)
        }
        fn as_reserve(&self) -> Option<&dyn ReservePlugin> {
            Some(self)
        }
        fn as_permit(&self) -> Option<&dyn crate::plugin::PermitPlugin> {
            Some(self)
        }
        fn as_pre_bind(&self) -> Option<&dyn PreBindPlugin> {
            Some(self)
        }
        fn as_bind(&self) -> Option<&dyn BindPlugin> {
            Some(self)
        }
        fn as_post_bind(&self) -> Option<&dyn PostBindPlugin> {
            Some(self)
        }
    }

    impl QueueSortPlugin for Fake {
        fn less(&self, _: QueuedPodRef<'_>, _: QueuedPodRef<'_>) -> bool {
            false
        }
    }

    impl ReservePlugin for Fake {
        fn reserve(&self, _: &mut CycleState, _: &Pod, _: &str, _: &mut dyn AssumeCache) -> Status {
            self.verdict("reserve")
        }
        fn unreserve(&self, _: &mut CycleState, _: &Pod, _: &str, _: &mut dyn AssumeCache) {
            log(format!("unreserve {}", self.name));
        }
    }

    impl crate::plugin::PermitPlugin for Fake {
        fn permit(&self, _: &mut CycleState, _: &Pod, _: &str) -> (Status, Duration) {
            let wait = self.args["timeoutMs"].as_u64().unwrap_or(3_600_000);
            (self.verdict("permit"), Duration::from_millis(wait))
        }
    }

    impl PreBindPlugin for Fake {
        fn pre_bind(&self, _: &mut CycleState, _: &Pod, _: &str, _: &mut dyn ClusterApi) -> Status {
            self.verdict("preBind")
        }
    }

    impl BindPlugin for Fake {
        fn bind(&self, _: &mut CycleState, _: &Pod, _: &str, _: &mut dyn ClusterApi) -> Status {
            self.verdict("bind")
        }
    }

    impl PostBindPlugin for Fake {
        fn post_bind(&self, _: &mut CycleState, _: &Pod, _: &str) {
            log(format!("postBind {}", self.name));
        }
    }

    fn registry() -> Registry {
        let mut r = Registry::new();
        r.register("A", |a, _| {
            Ok(Arc::new(Fake {
                name: "A",
                args: a.clone(),
            }))
        });
        r.register("B", |a, _| {
            Ok(Arc::new(Fake {
                name: "B",
                args: a.clone(),
            }))
        });
        r.register("C", |a, _| {
            Ok(Arc::new(Fake {
                name: "C",
                args: a.clone(),
            }))
        });
        r
    }

    fn set(names: &[&str]) -> PluginSet {
        PluginSet {
            enabled: names
                .iter()
                .map(|n| rkube_config::Plugin {
                    name: n.to_string(),
                    weight: None,
                })
                .collect(),
            disabled: Vec::new(),
        }
    }

    /// A, B and C at every binding-cycle point, in that order.
    fn framework(args: &[(&str, Value)]) -> Framework {
        let all = ["A", "B", "C"];
        let profile = Profile {
            scheduler_name: Some("fake".into()),
            plugins: Some(Plugins {
                queue_sort: set(&["A"]),
                reserve: set(&all),
                permit: set(&all),
                pre_bind: set(&all),
                bind: set(&all),
                post_bind: set(&all),
                ..Default::default()
            }),
            plugin_config: args
                .iter()
                .map(|(n, a)| PluginConfig {
                    name: n.to_string(),
                    args: a.clone(),
                })
                .collect(),
            ..Default::default()
        };
        Framework::new(&profile, 0, &registry()).unwrap()
    }

    fn pod() -> Pod {
        Pod {
            uid: "u1".into(),
            namespace: "ns".into(),
            name: "p".into(),
            ..Default::default()
        }
    }

    fn run_reserve(fw: &Framework) -> Status {
        let mut snap = Snapshot::default();
        reserve(
            fw,
            &mut CycleState::new(),
            &pod(),
            "n1",
            &mut SnapshotHost::new(&mut snap),
        )
    }

    fn run_binding(fw: &Framework, waiting: &WaitingPods) -> Status {
        let mut snap = Snapshot::default();
        binding_cycle(
            fw,
            &mut CycleState::new(),
            &pod(),
            "n1",
            waiting,
            &mut SnapshotHost::new(&mut snap),
        )
    }

    #[test]
    fn a_reserve_rejection_unreserves_every_plugin_in_reverse() {
        let fw = framework(&[("B", json!({"reserve": "reject"}))]);
        let s = run_reserve(&fw);
        assert_eq!(s.code, Code::Unschedulable);
        assert_eq!(s.plugin, "B");
        assert_eq!(
            journal(),
            [
                "reserve A",
                "reserve B",
                "unreserve C",
                "unreserve B",
                "unreserve A"
            ],
            "C never reserved, but is unreserved too, as upstream does"
        );
        let (_, message) = fit_error("n1", &s);
        assert_eq!(message, "0/1 nodes are available: 1 B says no.");
        assert_eq!(failure_reason(&s), "Unschedulable");
    }

    #[test]
    fn a_reserve_error_is_wrapped_with_the_plugin_name() {
        let fw = framework(&[("A", json!({"reserve": "error"}))]);
        let s = run_reserve(&fw);
        assert_eq!(s.code, Code::Error);
        assert_eq!(s.message(), "running Reserve plugin \"A\": boom");
        assert_eq!(failure_reason(&s), "SchedulerError");
        assert_eq!(journal()[0], "reserve A");
    }

    #[test]
    fn permit_wait_then_allowed_binds() {
        let fw = framework(&[
            ("A", json!({"permit": "wait"})),
            ("C", json!({"permit": "wait"})),
        ]);
        let waiting = WaitingPods::new();
        let s = permit(&fw, &mut CycleState::new(), &pod(), "n1", &waiting);
        assert_eq!(s.code, Code::Wait);
        assert_eq!(
            s.message(),
            "one or more plugins asked to wait and no plugin rejected pod \"p\""
        );
        let w = waiting.get("u1").expect("waiting");
        assert_eq!(w.pending_plugins(), ["A", "C"]);
        let other = waiting.clone();
        let t = std::thread::spawn(move || {
            let w = other.get("u1").unwrap();
            w.allow("C");
            w.allow("A");
        });
        journal();
        let s = run_binding(&fw, &waiting);
        t.join().unwrap();
        assert!(s.is_success(), "{s}");
        assert_eq!(
            journal(),
            [
                "preBind A",
                "preBind B",
                "preBind C",
                "bind A",
                "postBind A",
                "postBind B",
                "postBind C"
            ],
            "the first Bind plugin that does not skip binds"
        );
    }

    #[test]
    fn a_permit_timeout_is_a_rejection_at_the_plugin() {
        let fw = framework(&[("B", json!({"permit": "wait", "timeoutMs": 20}))]);
        let waiting = WaitingPods::new();
        let s = permit(&fw, &mut CycleState::new(), &pod(), "n1", &waiting);
        assert_eq!(s.code, Code::Wait);
        journal();
        let s = run_binding(&fw, &waiting);
        assert_eq!(s.code, Code::Unschedulable);
        assert_eq!(s.plugin, "B");
        assert_eq!(
            s.message(),
            "0/1 nodes are available: 1 rejected due to timeout after waiting 20ms at plugin B."
        );
        assert!(journal().is_empty(), "no PreBind after a rejection");
    }

    #[test]
    fn pre_bind_and_bind_failures() {
        let waiting = WaitingPods::new();
        let fw = framework(&[("B", json!({"preBind": "error"}))]);
        let s = run_binding(&fw, &waiting);
        assert_eq!(s.message(), "running PreBind plugin \"B\": boom");
        assert_eq!(journal(), ["preBind A", "preBind B"]);

        let fw = framework(&[("A", json!({"preBind": "reject"}))]);
        let s = run_binding(&fw, &waiting);
        assert_eq!(s.code, Code::Unschedulable, "a rejection passes through");
        assert_eq!((s.plugin, s.message()), ("A", "A says no".to_string()));
        journal();

        let fw = framework(&[
            ("A", json!({"bind": "skip"})),
            ("B", json!({"bind": "error"})),
        ]);
        let s = run_binding(&fw, &waiting);
        assert_eq!(s.message(), "running Bind plugin \"B\": boom");
        journal();

        let fw = framework(&[
            ("A", json!({"bind": "skip"})),
            ("B", json!({"bind": "skip"})),
            ("C", json!({"bind": "skip"})),
        ]);
        let s = run_binding(&fw, &waiting);
        assert_eq!(s.code, Code::Skip, "every Bind plugin skipped: not bound");
        assert!(!journal().iter().any(|e| e.starts_with("postBind")));
    }

    #[test]
    fn pre_flight_skips_pre_bind_of_plugins_with_nothing_to_do() {
        // The fake's pre-flight is the trait default (Success): none skipped.
        let fw = framework(&[]);
        let mut state = CycleState::new();
        assert!(pre_bind_pre_flight(&fw, &mut state, &pod(), "n1").is_success());
        assert!(state.skip_pre_bind.is_empty());
        state.skip_pre_bind.insert("B");
        let mut snap = Snapshot::default();
        let s = pre_bind(
            &fw,
            &mut state,
            &pod(),
            "n1",
            &mut SnapshotHost::new(&mut snap),
        );
        assert!(s.is_success());
        assert_eq!(journal(), ["preBind A", "preBind C"]);
    }
}
