//! Graceful node shutdown, as upstream's `pkg/kubelet/nodeshutdown`: with
//! `shutdownGracePeriod` (or `shutdownGracePeriodByPodPriority`) set, the
//! kubelet holds a systemd-logind `delay` inhibitor lock on shutdown
//! ([`logind`]), raising logind's `InhibitDelayMaxSec` first when it is
//! shorter than the periods (upstream's drop-in and reload). When logind
//! announces a shutdown (`PrepareForShutdown(true)`), the node reports
//! Ready=False "node is shutting down", new pods are refused
//! (`NodeShutdown`), and the pods are terminated class by class, lowest
//! priority first ([`groups`]), each within its class's period (or its own
//! shorter `terminationGracePeriodSeconds`), ending `Failed` with reason
//! `Terminated` and a `DisruptionTarget` condition; then the lock is
//! released and the machine goes down. A cancelled shutdown
//! (`PrepareForShutdown(false)`) takes the lock again and the node is
//! Ready again.
//!
//! Unlike upstream, which logs "Failed to start node shutdown manager" and
//! runs on without it, a kubelet asked for graceful shutdown that cannot
//! get logind's lock does not start: the setting is refused, not ignored.

pub mod groups;
pub mod logind;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use crate::config::ShutdownGracePeriodByPodPriority as Period;
use crate::events::Recorder;
use crate::node::pressure::PressureBoard;
use crate::pods::worker::{ActivePods, Disruption, EvictRequest};
use logind::{Logind, LogindError};

/// Upstream's message of a pod terminated at a node shutdown.
pub const MESSAGE: &str = "Pod was terminated in response to imminent node shutdown.";
/// How long after losing the bus the watch is started again.
const RECONNECT_PERIOD: Duration = Duration::from_secs(1);

/// The node's shutdown manager.
pub struct ShutdownManager {
    /// The node.
    pub node: String,
    /// The classes in force, lowest priority first ([`groups::classes`]).
    pub classes: Vec<Period>,
    /// The pods to terminate.
    pub active: Arc<ActivePods>,
    /// Where "shutting down" is told to the status setters and admission.
    pub board: Arc<PressureBoard>,
    /// The node's Events.
    pub events: Option<Recorder>,
    /// logind's drop-in directory (upstream's `/etc/systemd/logind.conf.d`).
    pub logind_conf_dir: PathBuf,
}

/// A watch in force: the bus, the lock, the signals.
pub struct Session {
    bus: Logind,
    lock: Option<zbus::zvariant::OwnedFd>,
    signals: std::pin::Pin<Box<dyn futures::Stream<Item = bool> + Send>>,
}

impl ShutdownManager {
    /// Upstream's `start`: logind's delay raised if need be, the lock
    /// taken, the signal watched.
    pub async fn start(&self) -> Result<Session, LogindError> {
        let bus = Logind::connect().await?;
        let requested = groups::period_requested(&self.classes);
        let current = bus.inhibit_delay().await?;
        if requested > current {
            logind::write_override(&self.logind_conf_dir, requested)?;
            bus.reload_logind_conf().await?;
            // Up to 5 reads 100 ms apart, doubling, as upstream.
            let mut updated = current;
            let mut wait = Duration::from_millis(100);
            for _ in 0..5 {
                tokio::time::sleep(wait).await;
                updated = bus.inhibit_delay().await?;
                if updated >= requested {
                    break;
                }
                wait *= 2;
            }
            if updated < requested {
                return Err(LogindError::Delay(zbus::Error::Failure(format!(
                    "node shutdown manager was timed out after 5 attempts waiting for logind InhibitDelayMaxSec to update to {requested:?} (ShutdownGracePeriod), current value is {updated:?}"
                ))));
            }
        }
        let lock = bus.inhibit_shutdown().await?;
        let signals = Box::pin(bus.prepare_for_shutdown().await?);
        tracing::info!(
            node = %self.node,
            shutdown_grace_period_requested = ?requested,
            classes = ?self.classes,
            "Creating node shutdown manager"
        );
        Ok(Session {
            bus,
            lock: Some(lock),
            signals,
        })
    }

    /// Watches `session`, and a new one whenever the bus goes away.
    pub async fn run(self, mut session: Session) {
        loop {
            while let Some(shutting_down) = session.signals.next().await {
                self.on_event(&mut session, shutting_down).await;
            }
            tracing::error!("Ended to watching the node for shutdown events");
            session = loop {
                tokio::time::sleep(RECONNECT_PERIOD).await;
                tracing::info!("Restarting watch for node shutdown events");
                match self.start().await {
                    Ok(s) => break s,
                    Err(e) => {
                        tracing::error!(error = %e, "Unable to watch the node for shutdown events")
                    }
                }
            };
        }
    }

    async fn on_event(&self, session: &mut Session, shutting_down: bool) {
        let what = if shutting_down {
            "Shutdown manager detected shutdown event"
        } else {
            "Shutdown manager detected shutdown cancellation"
        };
        tracing::info!(node = %self.node, event = shutting_down, "{what}");
        if let Some(e) = &self.events {
            e.record_node(&self.node, false, "Shutdown", what);
        }
        self.board.set_shutting_down(shutting_down);
        if shutting_down {
            self.kill_pods().await;
            // Released: logind may go on with the shutdown.
            session.lock = None;
            tracing::info!(
                "Shutdown manager completed processing shutdown event, node will shutdown shortly"
            );
        } else {
            match session.bus.inhibit_shutdown().await {
                Ok(l) => session.lock = Some(l),
                Err(e) => tracing::error!(error = %e, "taking the shutdown inhibitor lock again"),
            }
        }
    }

    /// Terminates the node's pods class by class, each class within its
    /// period (upstream's `killPods`).
    async fn kill_pods(&self) {
        let pods = self.active.on_node(&self.node);
        let priorities: Vec<i32> = pods
            .iter()
            .map(|a| a.pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0))
            .collect();
        let grouped = groups::group_by_priority(&self.classes, &priorities);
        for (class, members) in self.classes.iter().zip(grouped) {
            if members.is_empty() {
                continue;
            }
            let period = class.shutdown_grace_period_seconds.max(0);
            let limit = Duration::from_secs(period as u64);
            // One kill per pod, all at once (upstream's goroutine per pod):
            // a worker whose queue is full holds up only its own pod.
            let kills = members.into_iter().map(|i| {
                let a = &pods[i];
                let own = a
                    .pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.termination_grace_period_seconds)
                    .filter(|&g| g <= period);
                let grace = Duration::from_secs(own.unwrap_or(period).max(0) as u64);
                let meta = &a.pod.metadata;
                tracing::info!(
                    pod = %format!("{}/{}", meta.namespace.as_deref().unwrap_or(""), meta.name.as_deref().unwrap_or("")),
                    grace_period = ?grace,
                    "Shutdown manager killing pod with gracePeriod"
                );
                let evict = a.evict.clone();
                async move {
                    let (tx, rx) = tokio::sync::oneshot::channel();
                    let req = EvictRequest {
                        reason: Disruption::NodeShutdown,
                        message: MESSAGE.into(),
                        grace,
                        done: tx,
                    };
                    if evict.send(req).await.is_ok() {
                        let _ = rx.await;
                    }
                }
            });
            // Tasks of their own: a kill goes on past the class's period.
            let tasks: Vec<_> = kills.map(tokio::spawn).collect();
            let group = futures::future::join_all(tasks);
            // The sends too: a worker busy with an eviction must not hold
            // the shutdown past the class's period.
            match tokio::time::timeout(limit, group).await {
                Ok(_) => tracing::info!(
                    grace_period = period,
                    priority = class.priority,
                    "Done waiting for all pods in group to terminate"
                ),
                Err(_) => tracing::info!(
                    grace_period = period,
                    priority = class.priority,
                    "Shutdown manager pod killing time out"
                ),
            }
        }
    }
}
