//! Cluster events and queueing hints (upstream's `fwk.ClusterEvent`,
//! `fwk.ActionType`, `fwk.QueueingHintFn` and the scheduling queue's
//! `isPodWorthRequeuing`), with no queue of their own: the live scheduler's
//! queue asks a [`QueueingHintMap`] whether an event may make a rejected pod
//! schedulable.
//!
//! The contract, as upstream v1.37 defines it:
//!
//! * Each plugin that can reject a pod (PreEnqueue, PreFilter, Filter,
//!   Reserve, Permit) declares with [`crate::Plugin::events_to_register`] the
//!   events that may undo its rejection, each with an optional hint function
//!   (no function: always [`QueueingHint::Queue`]). A plugin that does not
//!   declare anything (`None`) is interested in every event of every resource
//!   (upstream's `defaultEnqueueExtension`); one that declares an empty list
//!   is interested in none.
//! * A rejected pod remembers its rejector plugins. An event moves it only
//!   when one of them registered a matching event and its hint returns
//!   `Queue` (a hint's error counts as `Queue`). A pod without rejector
//!   plugins (an error, not a rejection) is moved by every event.
//! * An incoming event matches a registered one when its resource is the
//!   same (a registered `Pod` matches `AssignedPod`, `UnscheduledPod` and
//!   `TargetPod`; `*` matches all) and its action is the same or more specific
//!   (`UpdateNodeLabel` matches a registered `Update`, not the other way).
//!   The wildcard event (`*`/`All`, e.g. the unschedulable pool's timeout)
//!   moves every pod.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::BitOr;
use std::sync::Arc;

use rkube_model::volumes::{Pv, Pvc, StorageCapacity, StorageClass};
use rkube_model::workloads::WorkloadSelectors;
use rkube_model::{Node, Pod};

/// One kind of change of a resource (upstream's `fwk.ActionType`); bits
/// combine with `|`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ActionType(u32);

impl ActionType {
    /// Nothing (used internally).
    pub const NONE: ActionType = ActionType(0);
    /// Created.
    pub const ADD: ActionType = ActionType(1 << 0);
    /// Deleted.
    pub const DELETE: ActionType = ActionType(1 << 1);
    /// A node's `status.allocatable` changed.
    pub const UPDATE_NODE_ALLOCATABLE: ActionType = ActionType(1 << 2);
    /// A node's labels changed.
    pub const UPDATE_NODE_LABEL: ActionType = ActionType(1 << 3);
    /// A node's taints changed, or it became schedulable.
    pub const UPDATE_NODE_TAINT: ActionType = ActionType(1 << 4);
    /// A node condition's status changed.
    pub const UPDATE_NODE_CONDITION: ActionType = ActionType(1 << 5);
    /// A node's annotations changed.
    pub const UPDATE_NODE_ANNOTATION: ActionType = ActionType(1 << 6);
    /// A node's declared features changed.
    pub const UPDATE_NODE_DECLARED_FEATURE: ActionType = ActionType(1 << 7);
    /// A node's pod preemption policy changed.
    pub const UPDATE_NODE_PREEMPTION_POLICY: ActionType = ActionType(1 << 8);
    /// A pod's labels changed.
    pub const UPDATE_POD_LABEL: ActionType = ActionType(1 << 9);
    /// A pod's request of some resource went down (or was removed).
    pub const UPDATE_POD_SCALE_DOWN: ActionType = ActionType(1 << 10);
    /// A pod's request of some resource went up (or was added).
    pub const UPDATE_POD_SCALE_UP: ActionType = ActionType(1 << 11);
    /// A pod got a toleration (they can only be added).
    pub const UPDATE_POD_TOLERATION: ActionType = ActionType(1 << 12);
    /// A pod's last scheduling gate was removed.
    pub const UPDATE_POD_SCHEDULING_GATES_ELIMINATED: ActionType = ActionType(1 << 13);
    /// The ResourceClaims generated for a pod changed.
    pub const UPDATE_POD_GENERATED_RESOURCE_CLAIM: ActionType = ActionType(1 << 14);
    /// Every action.
    pub const ALL: ActionType = ActionType((1 << 15) - 1);
    /// Any update (every `Update*` bit).
    pub const UPDATE: ActionType = ActionType(Self::ALL.0 & !(Self::ADD.0 | Self::DELETE.0));

    /// The raw bits.
    pub fn bits(self) -> u32 {
        self.0
    }

    /// True when `self` and `other` share a bit.
    pub fn intersects(self, other: ActionType) -> bool {
        self.0 & other.0 != 0
    }

    /// Upstream's `ActionType.String()`: the name of a single action, or
    /// of `All`/`Update`; empty for other combinations.
    pub fn as_str(self) -> &'static str {
        const NAMES: [(ActionType, &str); 17] = [
            (ActionType::ADD, "Add"),
            (ActionType::DELETE, "Delete"),
            (ActionType::UPDATE_NODE_ALLOCATABLE, "UpdateNodeAllocatable"),
            (ActionType::UPDATE_NODE_LABEL, "UpdateNodeLabel"),
            (ActionType::UPDATE_NODE_TAINT, "UpdateNodeTaint"),
            (ActionType::UPDATE_NODE_CONDITION, "UpdateNodeCondition"),
            (ActionType::UPDATE_NODE_ANNOTATION, "UpdateNodeAnnotation"),
            (
                ActionType::UPDATE_NODE_DECLARED_FEATURE,
                "UpdateNodeDeclaredFeature",
            ),
            (
                ActionType::UPDATE_NODE_PREEMPTION_POLICY,
                "UpdateNodePreemptionPolicy",
            ),
            (ActionType::UPDATE_POD_LABEL, "UpdatePodLabel"),
            (ActionType::UPDATE_POD_SCALE_DOWN, "UpdatePodScaleDown"),
            (ActionType::UPDATE_POD_SCALE_UP, "UpdatePodScaleUp"),
            (ActionType::UPDATE_POD_TOLERATION, "UpdatePodToleration"),
            (
                ActionType::UPDATE_POD_SCHEDULING_GATES_ELIMINATED,
                "UpdatePodSchedulingGatesEliminated",
            ),
            (
                ActionType::UPDATE_POD_GENERATED_RESOURCE_CLAIM,
                "UpdatePodGeneratedResourceClaim",
            ),
            (ActionType::ALL, "All"),
            (ActionType::UPDATE, "Update"),
        ];
        NAMES
            .iter()
            .find(|(a, _)| *a == self)
            .map_or("", |(_, n)| n)
    }
}

impl BitOr for ActionType {
    type Output = ActionType;
    fn bitor(self, rhs: ActionType) -> ActionType {
        ActionType(self.0 | rhs.0)
    }
}

impl fmt::Debug for ActionType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.as_str() {
            "" => write!(f, "ActionType({:#x})", self.0),
            s => f.write_str(s),
        }
    }
}

impl fmt::Display for ActionType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The resource an event is about (upstream's `fwk.EventResource`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventResource {
    /// Any pod: as a registration, matches the three below.
    Pod,
    /// A pod bound to a node (or assumed on one).
    AssignedPod,
    /// A pending pod other than the one being queued.
    UnscheduledPod,
    /// The queued pod itself.
    TargetPod,
    /// A node.
    Node,
    /// A PersistentVolume.
    PersistentVolume,
    /// A PersistentVolumeClaim.
    PersistentVolumeClaim,
    /// A CSINode.
    CsiNode,
    /// A CSIDriver.
    CsiDriver,
    /// A VolumeAttachment.
    VolumeAttachment,
    /// A CSIStorageCapacity.
    CsiStorageCapacity,
    /// A StorageClass.
    StorageClass,
    /// A ResourceClaim.
    ResourceClaim,
    /// A ResourceSlice.
    ResourceSlice,
    /// A DeviceClass.
    DeviceClass,
    /// A PodGroup.
    PodGroup,
    /// Every resource.
    WildCard,
}

impl EventResource {
    /// Upstream's spelling (`Node`, `storage.k8s.io/CSINode`, `*`).
    pub fn as_str(self) -> &'static str {
        match self {
            EventResource::Pod => "Pod",
            EventResource::AssignedPod => "AssignedPod",
            EventResource::UnscheduledPod => "UnscheduledPod",
            EventResource::TargetPod => "TargetPod",
            EventResource::Node => "Node",
            EventResource::PersistentVolume => "PersistentVolume",
            EventResource::PersistentVolumeClaim => "PersistentVolumeClaim",
            EventResource::CsiNode => "storage.k8s.io/CSINode",
            EventResource::CsiDriver => "storage.k8s.io/CSIDriver",
            EventResource::VolumeAttachment => "storage.k8s.io/VolumeAttachment",
            EventResource::CsiStorageCapacity => "storage.k8s.io/CSIStorageCapacity",
            EventResource::StorageClass => "storage.k8s.io/StorageClass",
            EventResource::ResourceClaim => "resource.k8s.io/ResourceClaim",
            EventResource::ResourceSlice => "resource.k8s.io/ResourceSlice",
            EventResource::DeviceClass => "resource.k8s.io/DeviceClass",
            EventResource::PodGroup => "scheduling.k8s.io/PodGroup",
            EventResource::WildCard => "*",
        }
    }

    /// Upstream's `matchEventResources`: does a registration for `self`
    /// cover an incoming event about `incoming`?
    fn covers(self, incoming: EventResource) -> bool {
        self == EventResource::WildCard
            || self == incoming
            || self == EventResource::Pod
                && matches!(
                    incoming,
                    EventResource::AssignedPod
                        | EventResource::UnscheduledPod
                        | EventResource::TargetPod
                )
    }
}

impl fmt::Display for EventResource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A change of the cluster (upstream's `fwk.ClusterEvent`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClusterEvent {
    /// What changed.
    pub resource: EventResource,
    /// How.
    pub action: ActionType,
    /// Overrides [`ClusterEvent::label`] (special events only).
    pub custom_label: Option<&'static str>,
}

impl ClusterEvent {
    /// An event without a custom label.
    pub const fn new(resource: EventResource, action: ActionType) -> Self {
        ClusterEvent {
            resource,
            action,
            custom_label: None,
        }
    }

    /// The label used in logs and metrics: the custom label, or the
    /// resource followed by the action (`NodeAdd`, `AssignedPodDelete`,
    /// `NodeUpdateNodeLabel`).
    pub fn label(&self) -> String {
        match self.custom_label {
            Some(l) => l.to_string(),
            None => format!("{}{}", self.resource, self.action),
        }
    }

    /// Upstream's `ClusterEventIsWildCard`.
    pub fn is_wildcard(&self) -> bool {
        self.resource == EventResource::WildCard && self.action == ActionType::ALL
    }

    /// Upstream's `MatchClusterEvents(self, incoming)`: does this
    /// (registered) event cover `incoming`? The incoming action must be the
    /// same as or more specific than the registered one.
    pub fn matches(&self, incoming: &ClusterEvent) -> bool {
        self.is_wildcard()
            || self.resource.covers(incoming.resource)
                && self.action.intersects(incoming.action)
                && incoming.action <= self.action
    }
}

/// An assigned pod was added (bound, or seen bound).
pub const ASSIGNED_POD_ADD: ClusterEvent =
    ClusterEvent::new(EventResource::AssignedPod, ActionType::ADD);
/// An assigned pod was deleted (or finished, or its assumption was forgotten).
pub const ASSIGNED_POD_DELETE: ClusterEvent =
    ClusterEvent::new(EventResource::AssignedPod, ActionType::DELETE);
/// An unscheduled pod was added.
pub const UNSCHEDULED_POD_ADD: ClusterEvent =
    ClusterEvent::new(EventResource::UnscheduledPod, ActionType::ADD);
/// A PodGroup was added (GenericWorkload).
pub const POD_GROUP_ADD: ClusterEvent = ClusterEvent::new(EventResource::PodGroup, ActionType::ADD);
/// A node was added.
pub const NODE_ADD: ClusterEvent = ClusterEvent::new(EventResource::Node, ActionType::ADD);
/// A node was deleted.
pub const NODE_DELETE: ClusterEvent = ClusterEvent::new(EventResource::Node, ActionType::DELETE);
/// A pod stayed in the unschedulable pool longer than the timeout.
pub const UNSCHEDULABLE_TIMEOUT: ClusterEvent = ClusterEvent {
    resource: EventResource::WildCard,
    action: ActionType::ALL,
    custom_label: Some("UnschedulableTimeout"),
};
/// A pod was moved on purpose (a plugin's Activate).
pub const FORCE_ACTIVATE: ClusterEvent = ClusterEvent {
    resource: EventResource::WildCard,
    action: ActionType::ALL,
    custom_label: Some("ForceActivate"),
};
/// Label of a pod that comes back after a failed attempt.
pub const SCHEDULE_ATTEMPT_FAILURE: &str = "ScheduleAttemptFailure";
/// Label of a pod whose backoff ended.
pub const BACKOFF_COMPLETE: &str = "BackoffComplete";
/// Label of a pod popped from the backoff queue because the active queue
/// was empty.
pub const POP_FROM_BACKOFF_Q: &str = "PopFromBackoffQ";

/// A hint's verdict (upstream's `fwk.QueueingHint`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueingHint {
    /// The event does not help the pod.
    QueueSkip,
    /// The event may make the pod schedulable.
    Queue,
}

/// A CSINode as the hints read it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CsiNode {
    /// Name (the node's).
    pub name: String,
    /// Drivers with `allocatable.count` (0 when unset).
    pub drivers: BTreeMap<String, i32>,
    /// The `storage.alpha.kubernetes.io/migrated-plugins` annotation.
    pub migrated_plugins: String,
}

/// A CSIDriver as the hints read it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CsiDriver {
    /// Name (the driver's).
    pub name: String,
    /// `spec.storageCapacity`.
    pub storage_capacity: bool,
}

/// The object an event carries (the old or the new version).
#[derive(Debug, Clone)]
pub enum EventObject {
    /// A pod.
    Pod(Arc<Pod>),
    /// A node.
    Node(Arc<Node>),
    /// A PersistentVolume.
    PersistentVolume(Arc<Pv>),
    /// A PersistentVolumeClaim.
    PersistentVolumeClaim(Arc<Pvc>),
    /// A StorageClass.
    StorageClass(Arc<StorageClass>),
    /// A CSINode.
    CsiNode(Arc<CsiNode>),
    /// A CSIDriver.
    CsiDriver(Arc<CsiDriver>),
    /// A CSIStorageCapacity.
    CsiStorageCapacity(Arc<StorageCapacity>),
    /// A PodGroup.
    PodGroup(Arc<rkube_model::pod_groups::PodGroup>),
}

/// Converts an [`EventObject`] to the type a hint expects.
pub trait FromEventObject {
    /// Upstream's type name, for errors.
    const KIND: &'static str;
    /// The object, if it is of this type.
    fn from_object(o: &EventObject) -> Option<&Self>;
}

macro_rules! from_event_object {
    ($t:ty, $variant:ident, $kind:literal) => {
        impl FromEventObject for $t {
            const KIND: &'static str = $kind;
            fn from_object(o: &EventObject) -> Option<&Self> {
                match o {
                    EventObject::$variant(x) => Some(x),
                    _ => None,
                }
            }
        }
    };
}
from_event_object!(Pod, Pod, "*v1.Pod");
from_event_object!(
    rkube_model::pod_groups::PodGroup,
    PodGroup,
    "*v1beta1.PodGroup"
);
from_event_object!(Node, Node, "*v1.Node");
from_event_object!(Pv, PersistentVolume, "*v1.PersistentVolume");
from_event_object!(Pvc, PersistentVolumeClaim, "*v1.PersistentVolumeClaim");
from_event_object!(StorageClass, StorageClass, "*v1.StorageClass");
from_event_object!(CsiNode, CsiNode, "*v1.CSINode");
from_event_object!(CsiDriver, CsiDriver, "*v1.CSIDriver");
from_event_object!(
    StorageCapacity,
    CsiStorageCapacity,
    "*v1.CSIStorageCapacity"
);

/// Upstream's `util.As[T](oldObj, newObj)`: both objects as `T` (absent
/// ones as `None`), or an error when one is of another type.
pub fn objects_as<'a, T: FromEventObject>(
    old: Option<&'a EventObject>,
    new: Option<&'a EventObject>,
) -> Result<(Option<&'a T>, Option<&'a T>), String> {
    let one = |o: Option<&'a EventObject>| match o {
        None => Ok(None),
        Some(o) => T::from_object(o)
            .map(Some)
            .ok_or_else(|| format!("unexpected object type: want {}, got {o:?}", T::KIND)),
    };
    Ok((one(old)?, one(new)?))
}

/// What a hint may read besides the event's objects (upstream's hints read
/// informer listers; PodTopologySpread's default constraints need the
/// workloads that select a pod).
#[derive(Debug, Clone, Copy)]
pub struct HintContext<'a> {
    /// Services, ReplicaSets, StatefulSets and ReplicationControllers.
    pub workloads: &'a WorkloadSelectors,
    /// The DRA objects (DeviceClasses serving extended resources), when
    /// the host has them.
    pub dra: Option<&'a rkube_model::dra::Dra>,
}

impl HintContext<'static> {
    /// A context with no workloads.
    pub fn empty() -> Self {
        static EMPTY: std::sync::OnceLock<WorkloadSelectors> = std::sync::OnceLock::new();
        HintContext {
            workloads: EMPTY.get_or_init(WorkloadSelectors::default),
            dra: None,
        }
    }
}

/// What a hint function returns: a hint, or an error (treated as `Queue`).
pub type HintResult = Result<QueueingHint, String>;

/// A hint function (upstream's `fwk.QueueingHintFn`): may the change from
/// `old` to `new` make `pod`, rejected by the plugin, schedulable? `old` is
/// `None` for an addition, `new` for a deletion. An error counts as `Queue`.
pub type QueueingHintFn = Arc<
    dyn Fn(
            &Pod,
            Option<&EventObject>,
            Option<&EventObject>,
            &HintContext<'_>,
        ) -> Result<QueueingHint, String>
        + Send
        + Sync,
>;

/// One registration (upstream's `fwk.ClusterEventWithHint`).
#[derive(Clone)]
pub struct ClusterEventWithHint {
    /// The event.
    pub event: ClusterEvent,
    /// The hint; `None` always queues.
    pub hint: Option<QueueingHintFn>,
}

impl fmt::Debug for ClusterEventWithHint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterEventWithHint")
            .field("event", &self.event)
            .field("hint", &self.hint.is_some())
            .finish()
    }
}

impl ClusterEventWithHint {
    /// A registration that always queues.
    pub fn always(resource: EventResource, action: ActionType) -> Self {
        ClusterEventWithHint {
            event: ClusterEvent::new(resource, action),
            hint: None,
        }
    }

    /// A registration with a hint.
    pub fn with_hint(
        resource: EventResource,
        action: ActionType,
        hint: impl Fn(
                &Pod,
                Option<&EventObject>,
                Option<&EventObject>,
                &HintContext<'_>,
            ) -> Result<QueueingHint, String>
            + Send
            + Sync
            + 'static,
    ) -> Self {
        ClusterEventWithHint {
            event: ClusterEvent::new(resource, action),
            hint: Some(Arc::new(hint)),
        }
    }
}

/// Upstream's `UnrollWildCardResource`: what a plugin without
/// `events_to_register` is registered for.
pub fn wildcard_registrations() -> Vec<ClusterEventWithHint> {
    use EventResource::*;
    [
        AssignedPod,
        UnscheduledPod,
        TargetPod,
        Node,
        PersistentVolume,
        PersistentVolumeClaim,
        CsiNode,
        CsiDriver,
        CsiStorageCapacity,
        StorageClass,
        ResourceClaim,
        DeviceClass,
    ]
    .into_iter()
    .map(|r| ClusterEventWithHint::always(r, ActionType::ALL))
    .collect()
}

/// Upstream's `PodSchedulingPropertiesChange`: the events an update of a
/// pod from `old` to `new` makes, for the pod as `AssignedPod` (bound),
/// `TargetPod` (`target`: the queued pod itself) or `UnscheduledPod`. A
/// change none of the specific actions describes is a plain `Update`.
pub fn pod_scheduling_properties_change(new: &Pod, old: &Pod, target: bool) -> Vec<ClusterEvent> {
    let resource = if !new.node_name.is_empty() {
        EventResource::AssignedPod
    } else if target {
        EventResource::TargetPod
    } else {
        EventResource::UnscheduledPod
    };
    let (o, n) = (&old.requests, &new.requests);
    let pairs = [
        (o.milli_cpu, n.milli_cpu),
        (o.memory, n.memory),
        (o.ephemeral_storage, n.ephemeral_storage),
    ];
    let scalar = |a: &BTreeMap<String, i64>, k: &str| a.get(k).copied().unwrap_or(0);
    let scaled_down =
        pairs.iter().any(|(a, b)| a > b) || o.scalar.iter().any(|(k, &v)| v > scalar(&n.scalar, k));
    let scaled_up =
        pairs.iter().any(|(a, b)| b > a) || n.scalar.iter().any(|(k, &v)| v > scalar(&o.scalar, k));
    let mut events = Vec::new();
    let mut push = |yes: bool, action: ActionType| {
        if yes {
            events.push(ClusterEvent::new(resource, action));
        }
    };
    push(new.labels != old.labels, ActionType::UPDATE_POD_LABEL);
    push(scaled_down, ActionType::UPDATE_POD_SCALE_DOWN);
    push(scaled_up, ActionType::UPDATE_POD_SCALE_UP);
    push(
        new.scheduling_gates.is_empty() && !old.scheduling_gates.is_empty(),
        ActionType::UPDATE_POD_SCHEDULING_GATES_ELIMINATED,
    );
    push(
        new.tolerations.len() != old.tolerations.len(),
        ActionType::UPDATE_POD_TOLERATION,
    );
    if events.is_empty() {
        events.push(ClusterEvent::new(resource, ActionType::UPDATE));
    }
    events
}

/// Upstream's `NodeSchedulingPropertiesChange`: the events an update of a
/// node makes (none when nothing the scheduler reads changed). Conditions,
/// annotations, declared features and the preemption policy are not in
/// rkube's node model, so their events never arise.
pub fn node_scheduling_properties_change(new: &Node, old: &Node) -> Vec<ClusterEvent> {
    let mut events = Vec::new();
    let mut push = |yes: bool, action: ActionType| {
        if yes {
            events.push(ClusterEvent::new(EventResource::Node, action));
        }
    };
    // Becoming schedulable counts as a taint update (upstream's TODO).
    push(
        new.unschedulable != old.unschedulable && !new.unschedulable,
        ActionType::UPDATE_NODE_TAINT,
    );
    push(
        new.allocatable != old.allocatable,
        ActionType::UPDATE_NODE_ALLOCATABLE,
    );
    push(new.labels != old.labels, ActionType::UPDATE_NODE_LABEL);
    push(new.taints != old.taints, ActionType::UPDATE_NODE_TAINT);
    push(
        new.declared_features != old.declared_features,
        ActionType::UPDATE_NODE_DECLARED_FEATURE,
    );
    events
}

/// One plugin's hint for one registered event.
#[derive(Clone)]
struct HintEntry {
    plugin: &'static str,
    hint: Option<QueueingHintFn>,
}

/// Whether and how a rejected pod goes back to the queue after an event
/// (upstream's `queueingStrategy`, without `queueImmediately`, which only
/// Pending plugins produce and no rkube plugin returns Pending).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requeue {
    /// Stays where it is.
    Skip,
    /// To the active queue, or the backoff queue while its backoff lasts.
    AfterBackoff,
}

/// A profile's registered events and hints (upstream's `QueueingHintMap`),
/// built from the plugins at the points that can reject a pod.
#[derive(Clone, Default)]
pub struct QueueingHintMap {
    /// Registered event → the plugins' hints (`Pod` unrolled into its
    /// three kinds, as upstream's `buildQueueingHintMap`).
    entries: Vec<(ClusterEvent, Vec<HintEntry>)>,
}

impl fmt::Debug for QueueingHintMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut m = f.debug_map();
        for (e, hints) in &self.entries {
            m.entry(
                &e.label(),
                &hints.iter().map(|h| h.plugin).collect::<Vec<_>>(),
            );
        }
        m.finish()
    }
}

impl QueueingHintMap {
    /// Adds a plugin's registrations.
    pub fn register(&mut self, plugin: &'static str, events: Vec<ClusterEventWithHint>) {
        for e in events {
            let unrolled = if e.event.resource == EventResource::Pod {
                [
                    EventResource::AssignedPod,
                    EventResource::UnscheduledPod,
                    EventResource::TargetPod,
                ]
                .map(|r| ClusterEvent::new(r, e.event.action))
                .to_vec()
            } else {
                vec![e.event]
            };
            for ev in unrolled {
                let entry = HintEntry {
                    plugin,
                    hint: e.hint.clone(),
                };
                match self.entries.iter_mut().find(|(k, _)| *k == ev) {
                    Some((_, v)) => v.push(entry),
                    None => self.entries.push((ev, vec![entry])),
                }
            }
        }
    }

    /// The events a plugin registered (after unrolling).
    pub fn events_of(&self, plugin: &str) -> Vec<ClusterEvent> {
        self.entries
            .iter()
            .filter(|(_, v)| v.iter().any(|h| h.plugin == plugin))
            .map(|(e, _)| *e)
            .collect()
    }

    /// The plugins with a registration.
    pub fn plugins(&self) -> BTreeSet<&'static str> {
        self.entries
            .iter()
            .flat_map(|(_, v)| v.iter().map(|h| h.plugin))
            .collect()
    }

    /// Upstream's `isEventOfInterest` for one profile: does any plugin
    /// registration cover the event?
    pub fn is_event_of_interest(&self, event: &ClusterEvent) -> bool {
        event.is_wildcard() || self.entries.iter().any(|(e, _)| e.matches(event))
    }

    /// Upstream's `isPodWorthRequeuing`: may `event` make `pod`, rejected by
    /// `rejectors`, schedulable?
    pub fn requeue(
        &self,
        pod: &Pod,
        rejectors: &BTreeSet<&'static str>,
        event: &ClusterEvent,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
        cx: &HintContext<'_>,
    ) -> Requeue {
        if rejectors.is_empty() {
            return Requeue::AfterBackoff;
        }
        if event.is_wildcard() {
            // A wildcard event that carries an object is for that pod only
            // (e.g. ForceActivate of one pod).
            match new {
                Some(EventObject::Pod(p)) if p.uid == pod.uid => {}
                Some(_) => return Requeue::Skip,
                None => {}
            }
            return Requeue::AfterBackoff;
        }
        for (registered, hints) in &self.entries {
            if !registered.matches(event) {
                continue;
            }
            for h in hints.iter().filter(|h| rejectors.contains(h.plugin)) {
                let hint = match &h.hint {
                    None => QueueingHint::Queue,
                    Some(f) => f(pod, old, new, cx).unwrap_or(QueueingHint::Queue),
                };
                if hint == QueueingHint::Queue {
                    return Requeue::AfterBackoff;
                }
            }
        }
        Requeue::Skip
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(r: EventResource, a: ActionType) -> ClusterEvent {
        ClusterEvent::new(r, a)
    }

    #[test]
    fn labels_as_upstream() {
        assert_eq!(NODE_ADD.label(), "NodeAdd");
        assert_eq!(ASSIGNED_POD_DELETE.label(), "AssignedPodDelete");
        assert_eq!(
            ev(EventResource::Node, ActionType::UPDATE_NODE_LABEL).label(),
            "NodeUpdateNodeLabel"
        );
        assert_eq!(
            ev(EventResource::CsiNode, ActionType::UPDATE).label(),
            "storage.k8s.io/CSINodeUpdate"
        );
        assert_eq!(UNSCHEDULABLE_TIMEOUT.label(), "UnschedulableTimeout");
        assert_eq!((ActionType::ADD | ActionType::DELETE).as_str(), "");
        assert_eq!(
            ActionType::UPDATE | ActionType::ADD | ActionType::DELETE,
            ActionType::ALL
        );
    }

    #[test]
    fn match_cluster_events_table() {
        // Upstream's TestMatchClusterEvents cases.
        use ActionType as A;
        use EventResource as R;
        let cases = [
            // registered, incoming, want
            (ev(R::Pod, A::ALL), ev(R::AssignedPod, A::ADD), true),
            (
                ev(R::Pod, A::ALL),
                ev(R::TargetPod, A::UPDATE_POD_LABEL),
                true,
            ),
            (
                ev(R::Node, A::UPDATE),
                ev(R::Node, A::UPDATE_NODE_LABEL),
                true,
            ),
            (
                ev(R::Node, A::UPDATE_NODE_LABEL),
                ev(R::Node, A::UPDATE),
                false,
            ),
            (
                ev(R::Node, A::ADD),
                ev(R::Node, A::UPDATE_NODE_LABEL),
                false,
            ),
            (
                ev(R::Node, A::ADD | A::UPDATE_NODE_LABEL),
                ev(R::Node, A::UPDATE_NODE_LABEL),
                true,
            ),
            (ev(R::WildCard, A::ALL), ev(R::Node, A::ADD), true),
            (ev(R::Node, A::ALL), UNSCHEDULABLE_TIMEOUT, false),
            (ev(R::AssignedPod, A::ADD), ev(R::TargetPod, A::ADD), false),
            (
                ev(R::WildCard, A::ADD),
                ev(R::PersistentVolume, A::ADD),
                true,
            ),
        ];
        for (i, (registered, incoming, want)) in cases.iter().enumerate() {
            assert_eq!(registered.matches(incoming), *want, "case {i}");
        }
    }

    fn pod(f: impl FnOnce(&mut Pod)) -> Pod {
        let mut p = Pod {
            uid: "u".into(),
            ..Default::default()
        };
        f(&mut p);
        p
    }

    #[test]
    fn pod_changes() {
        let old = pod(|_| {});
        let relabelled = pod(|p| {
            p.labels.insert("a".into(), "b".into());
        });
        assert_eq!(
            pod_scheduling_properties_change(&relabelled, &old, true),
            [ev(EventResource::TargetPod, ActionType::UPDATE_POD_LABEL)]
        );
        let bound = pod(|p| {
            p.node_name = "n".into();
            p.requests.milli_cpu = 100;
        });
        let smaller = pod(|p| {
            p.node_name = "n".into();
            p.requests.milli_cpu = 50;
        });
        assert_eq!(
            pod_scheduling_properties_change(&smaller, &bound, false),
            [ev(
                EventResource::AssignedPod,
                ActionType::UPDATE_POD_SCALE_DOWN
            )]
        );
        assert_eq!(
            pod_scheduling_properties_change(&bound, &smaller, false),
            [ev(
                EventResource::AssignedPod,
                ActionType::UPDATE_POD_SCALE_UP
            )]
        );
        let gated = pod(|p| p.scheduling_gates = vec!["g".into()]);
        assert_eq!(
            pod_scheduling_properties_change(&old, &gated, true),
            [ev(
                EventResource::TargetPod,
                ActionType::UPDATE_POD_SCHEDULING_GATES_ELIMINATED
            )]
        );
        assert_eq!(
            pod_scheduling_properties_change(&old, &old, false),
            [ev(EventResource::UnscheduledPod, ActionType::UPDATE)]
        );
    }

    #[test]
    fn node_changes() {
        let old = Node {
            name: "n".into(),
            unschedulable: true,
            ..Default::default()
        };
        let mut new = old.clone();
        new.unschedulable = false;
        new.labels.insert("k".into(), "v".into());
        let got: Vec<String> = node_scheduling_properties_change(&new, &old)
            .iter()
            .map(ClusterEvent::label)
            .collect();
        assert_eq!(got, ["NodeUpdateNodeTaint", "NodeUpdateNodeLabel"]);
        // Becoming unschedulable is not an event by itself.
        assert!(node_scheduling_properties_change(&old, &new)
            .iter()
            .all(|e| e.action == ActionType::UPDATE_NODE_LABEL));
        assert!(node_scheduling_properties_change(&old, &old).is_empty());
    }

    fn skip_unless_label(
        pod: &Pod,
        _: Option<&EventObject>,
        new: Option<&EventObject>,
        _: &HintContext<'_>,
    ) -> Result<QueueingHint, String> {
        let (_, n) = objects_as::<Node>(None, new)?;
        Ok(match n.and_then(|n| n.labels.get("fits")) {
            Some(v) if *v == pod.name => QueueingHint::Queue,
            _ => QueueingHint::QueueSkip,
        })
    }

    #[test]
    fn requeue_asks_only_the_rejectors() {
        let mut map = QueueingHintMap::default();
        map.register(
            "A",
            vec![ClusterEventWithHint::with_hint(
                EventResource::Node,
                ActionType::ADD,
                skip_unless_label,
            )],
        );
        map.register(
            "B",
            vec![ClusterEventWithHint::always(
                EventResource::Pod,
                ActionType::DELETE,
            )],
        );
        let cx = HintContext::empty();
        let p = pod(|p| p.name = "p".into());
        let mut n = Node::default();
        n.labels.insert("fits".into(), "p".into());
        let node = EventObject::Node(Arc::new(n));
        let other = EventObject::Node(Arc::new(Node::default()));
        let a = BTreeSet::from(["A"]);
        let b = BTreeSet::from(["B"]);
        assert_eq!(
            map.requeue(&p, &a, &NODE_ADD, None, Some(&node), &cx),
            Requeue::AfterBackoff
        );
        assert_eq!(
            map.requeue(&p, &a, &NODE_ADD, None, Some(&other), &cx),
            Requeue::Skip
        );
        assert_eq!(
            map.requeue(&p, &b, &NODE_ADD, None, Some(&node), &cx),
            Requeue::Skip
        );
        assert_eq!(
            map.requeue(&p, &b, &ASSIGNED_POD_DELETE, None, None, &cx),
            Requeue::AfterBackoff
        );
        // No rejectors: always; the wildcard: always; a hint error: Queue.
        assert_eq!(
            map.requeue(&p, &BTreeSet::new(), &NODE_DELETE, None, None, &cx),
            Requeue::AfterBackoff
        );
        assert_eq!(
            map.requeue(&p, &a, &UNSCHEDULABLE_TIMEOUT, None, None, &cx),
            Requeue::AfterBackoff
        );
        let wrong = EventObject::Pod(Arc::new(Pod::default()));
        assert_eq!(
            map.requeue(&p, &a, &NODE_ADD, None, Some(&wrong), &cx),
            Requeue::AfterBackoff
        );
        assert!(map.is_event_of_interest(&NODE_ADD));
        assert!(map.is_event_of_interest(&ASSIGNED_POD_DELETE));
        assert!(!map.is_event_of_interest(&NODE_DELETE));
        assert_eq!(
            map.events_of("B")
                .iter()
                .map(ClusterEvent::label)
                .collect::<Vec<_>>(),
            [
                "AssignedPodDelete",
                "UnscheduledPodDelete",
                "TargetPodDelete"
            ]
        );
    }
}
