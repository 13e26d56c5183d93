//! Pods that a Permit plugin asked to wait (upstream's `waitingPodsMap`
//! and `waitingPod`): the binding cycle blocks on the pod until every
//! waiting plugin allows it, one rejects it, or the earliest timeout passes.
//! Plugins (e.g. gang scheduling) allow or reject waiting pods from other
//! cycles through [`WaitingPods`].

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rkube_model::Pod;

use crate::status::{Code, Status};

/// One waiting pod.
#[derive(Debug)]
pub struct WaitingPod {
    uid: String,
    /// `namespace/name`.
    pub pod: String,
    /// The node it was reserved on.
    pub node: String,
    inner: Mutex<Verdict>,
    decided: Condvar,
}

#[derive(Debug)]
struct Verdict {
    /// Plugins still to allow, with their deadlines.
    pending: Vec<(&'static str, Instant, Duration)>,
    status: Option<Status>,
}

impl WaitingPod {
    /// A pod waiting for `plugins` (name, timeout).
    pub fn new(pod: &Pod, node: &str, plugins: &[(&'static str, Duration)]) -> Self {
        let now = Instant::now();
        WaitingPod {
            uid: pod.uid.clone(),
            pod: pod.key(),
            node: node.to_string(),
            inner: Mutex::new(Verdict {
                pending: plugins
                    .iter()
                    .map(|&(p, t)| (p, now.checked_add(t).unwrap_or(now), t))
                    .collect(),
                status: None,
            }),
            decided: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Verdict> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The plugins that have not allowed the pod yet.
    pub fn pending_plugins(&self) -> Vec<&'static str> {
        self.lock().pending.iter().map(|p| p.0).collect()
    }

    /// `plugin` allows the pod; once every plugin has, it may bind.
    pub fn allow(&self, plugin: &str) {
        let mut v = self.lock();
        if v.status.is_some() {
            return;
        }
        v.pending.retain(|p| p.0 != plugin);
        if v.pending.is_empty() {
            v.status = Some(Status::success());
            self.decided.notify_all();
        }
    }

    /// `plugin` rejects the pod with `message` (Unschedulable).
    pub fn reject(&self, plugin: &'static str, message: &str) {
        let mut v = self.lock();
        if v.status.is_none() {
            v.status =
                Some(Status::new(Code::Unschedulable, message.to_string()).with_plugin(plugin));
            self.decided.notify_all();
        }
    }

    /// Preemption stops the pod's wait with an error (upstream's
    /// `Preempt`): returns `false` when it was already decided.
    pub fn preempt(&self, plugin: &'static str, message: &str) -> bool {
        let mut v = self.lock();
        if v.status.is_some() {
            return false;
        }
        v.status = Some(Status::new(Code::Error, message.to_string()).with_plugin(plugin));
        self.decided.notify_all();
        true
    }

    /// Decides now as if the earliest timeout had passed (a host whose
    /// clock does not run in between, such as the simulator).
    pub fn expire(&self) {
        let mut v = self.lock();
        if v.status.is_none() {
            v.status = Some(timed_out(&v));
            self.decided.notify_all();
        }
    }

    /// Blocks until the verdict: success, a rejection, or the rejection of
    /// the first plugin whose timeout passed.
    fn wait(&self) -> Status {
        let mut v = self.lock();
        loop {
            if let Some(s) = &v.status {
                return s.clone();
            }
            let Some(&(_, deadline, _)) = v.pending.iter().min_by_key(|p| p.1) else {
                return Status::success();
            };
            let now = Instant::now();
            if now >= deadline {
                let s = timed_out(&v);
                v.status = Some(s.clone());
                return s;
            }
            v = self
                .decided
                .wait_timeout(v, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// The rejection of the plugin whose timeout passes first.
fn timed_out(v: &Verdict) -> Status {
    match v.pending.iter().min_by_key(|p| p.1) {
        Some(&(plugin, _, timeout)) => Status::new(
            Code::Unschedulable,
            format!(
                "rejected due to timeout after waiting {} at plugin {plugin}",
                rkube_util::duration::format(timeout)
            ),
        )
        .with_plugin(plugin),
        None => Status::success(),
    }
}

/// Pods waiting on Permit, by UID; shared by the scheduling loop and the
/// binding cycles.
#[derive(Debug, Default, Clone)]
pub struct WaitingPods(Arc<Mutex<HashMap<String, Arc<WaitingPod>>>>);

impl WaitingPods {
    /// No waiting pods.
    pub fn new() -> Self {
        Self::default()
    }

    fn map(&self) -> MutexGuard<'_, HashMap<String, Arc<WaitingPod>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a waiting pod.
    pub fn add(&self, w: WaitingPod) {
        self.map().insert(w.uid.clone(), Arc::new(w));
    }

    /// The waiting pod with this UID.
    pub fn get(&self, uid: &str) -> Option<Arc<WaitingPod>> {
        self.map().get(uid).cloned()
    }

    /// Every waiting pod.
    pub fn all(&self) -> Vec<Arc<WaitingPod>> {
        self.map().values().cloned().collect()
    }

    /// Number of waiting pods.
    pub fn len(&self) -> usize {
        self.map().len()
    }

    /// True when no pod waits.
    pub fn is_empty(&self) -> bool {
        self.map().is_empty()
    }

    /// Upstream's `WaitOnPermit`: success at once for a pod that is not
    /// waiting; otherwise blocks for its verdict and forgets it.
    pub fn wait_on_permit(&self, uid: &str) -> Status {
        let Some(w) = self.get(uid) else {
            return Status::success();
        };
        let s = w.wait();
        self.map().remove(uid);
        s
    }

    /// Rejects a waiting pod (it was deleted, or preempted).
    pub fn reject(&self, uid: &str, plugin: &'static str, message: &str) -> bool {
        match self.get(uid) {
            Some(w) => {
                w.reject(plugin, message);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str) -> Pod {
        Pod {
            uid: uid.into(),
            namespace: "ns".into(),
            name: uid.into(),
            ..Default::default()
        }
    }

    #[test]
    fn not_waiting_is_success() {
        assert!(WaitingPods::new().wait_on_permit("u").is_success());
    }

    #[test]
    fn allowed_by_every_plugin_from_another_thread() {
        let w = WaitingPods::new();
        let long = Duration::from_secs(60);
        w.add(WaitingPod::new(
            &pod("u"),
            "n1",
            &[("A", long), ("B", long)],
        ));
        let other = w.clone();
        let t = std::thread::spawn(move || {
            let p = other.get("u").unwrap();
            p.allow("A");
            assert_eq!(p.pending_plugins(), ["B"]);
            p.allow("B");
        });
        let s = w.wait_on_permit("u");
        t.join().unwrap();
        assert!(s.is_success(), "{s}");
        assert!(w.is_empty(), "a decided pod is forgotten");
    }

    #[test]
    fn rejected_by_a_plugin() {
        let w = WaitingPods::new();
        w.add(WaitingPod::new(
            &pod("u"),
            "n1",
            &[("Gang", Duration::from_secs(60))],
        ));
        assert!(w.reject("u", "Gang", "the group did not fit"));
        let s = w.wait_on_permit("u");
        assert_eq!(s.code, Code::Unschedulable);
        assert_eq!(s.plugin, "Gang");
        assert_eq!(s.message(), "the group did not fit");
        assert!(!w.reject("u", "Gang", "again"), "no longer waiting");
    }

    #[test]
    fn the_earliest_timeout_rejects() {
        let w = WaitingPods::new();
        w.add(WaitingPod::new(
            &pod("u"),
            "n1",
            &[
                ("Slow", Duration::from_secs(60)),
                ("Fast", Duration::from_millis(30)),
            ],
        ));
        let t0 = Instant::now();
        let s = w.wait_on_permit("u");
        assert!(t0.elapsed() >= Duration::from_millis(30));
        assert!(t0.elapsed() < Duration::from_secs(30));
        assert_eq!(s.code, Code::Unschedulable);
        assert_eq!(s.plugin, "Fast");
        assert_eq!(
            s.message(),
            "rejected due to timeout after waiting 30ms at plugin Fast"
        );
    }
}
