//! `rkube snapshot --watch --out DIR`: records a live cluster's changes for
//! `rkube replay`.
//!
//! - `DIR/base.json`: a `v1` `List` of every object scheduling reads, as the
//!   recording starts (what `rkube snapshot` writes, `resourceVersion` kept);
//! - `DIR/events.jsonl`: one line per change after that, in arrival order:
//!   `{"type":"ADDED"|"MODIFIED"|"DELETED","object":{...}}`.
//!
//! Compact: server noise is stripped as `snapshot` strips it, and an update
//! that changes nothing but `resourceVersion` or a heartbeat time is not
//! written. A watch that fails and relists (kube-runtime's watcher, after
//! 410 Gone) is written as the changes between the two lists. Both files
//! are owner-only: pod specs can hold literal environment values.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use futures::stream::{BoxStream, StreamExt};
use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, Service,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::resource::v1::{
    DeviceClass, DeviceTaintRule, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, CSIStorageCapacity, StorageClass};
use k8s_openapi::Resource as _;
use kube::api::ListParams;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

/// One watch event, tagged with its kind.
enum Rec {
    Init(&'static str),
    InitApply(&'static str, Value),
    InitDone(&'static str),
    Apply(&'static str, Value),
    Delete(&'static str, Value),
    Failed(&'static str, String),
}

fn watch<K>(client: &Client, kind: &'static str) -> BoxStream<'static, Rec>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Serialize
        + std::fmt::Debug
        + Send
        + 'static,
{
    let api: Api<K> = Api::all(client.clone());
    let value = |o: &K| {
        let mut v = serde_json::to_value(o).unwrap_or(Value::Null);
        crate::snapshot::strip_keeping_version(&mut v);
        v
    };
    watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .map(move |ev| match ev {
            Ok(Event::Init) => Rec::Init(kind),
            Ok(Event::InitApply(o)) => Rec::InitApply(kind, value(&o)),
            Ok(Event::InitDone) => Rec::InitDone(kind),
            Ok(Event::Apply(o)) => Rec::Apply(kind, value(&o)),
            Ok(Event::Delete(o)) => Rec::Delete(kind, value(&o)),
            Err(e) => Rec::Failed(kind, e.to_string()),
        })
        .boxed()
}

/// The kinds recorded, in the order `base.json` lists them: what `rkube
/// snapshot` lists.
const KINDS: [&str; 19] = rkube_sim::replay::KIND_ORDER;

/// Whether the API server serves the kind `K` (the DRA kinds of
/// `resource.k8s.io/v1` may be absent, as `rkube snapshot` allows).
async fn served<K>(client: &Client) -> Result<bool>
where
    K: kube::Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let api: Api<K> = Api::all(client.clone());
    match api.list_metadata(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
        Err(e) => Err(e).with_context(|| format!("listing {}", K::plural(&()))),
    }
}

/// A watch of every kind recorded (`KINDS`, each named by its own type),
/// and the optional kinds the API server does not serve.
async fn streams(client: &Client) -> Result<(Vec<BoxStream<'static, Rec>>, Vec<&'static str>)> {
    let mut all = vec![
        watch::<Namespace>(client, Namespace::KIND),
        watch::<PriorityClass>(client, PriorityClass::KIND),
        watch::<StorageClass>(client, StorageClass::KIND),
    ];
    let mut absent = Vec::new();
    macro_rules! optional {
        ($($t:ty),*) => {$(
            if served::<$t>(client).await? {
                all.push(watch::<$t>(client, <$t>::KIND));
            } else {
                absent.push(<$t>::KIND);
            }
        )*};
    }
    optional!(
        DeviceClass,
        ResourceSlice,
        ResourceClaimTemplate,
        ResourceClaim,
        DeviceTaintRule
    );
    all.extend([
        watch::<CSIDriver>(client, CSIDriver::KIND),
        watch::<CSIStorageCapacity>(client, CSIStorageCapacity::KIND),
        watch::<CSINode>(client, CSINode::KIND),
        watch::<PersistentVolume>(client, PersistentVolume::KIND),
        watch::<PersistentVolumeClaim>(client, PersistentVolumeClaim::KIND),
        watch::<Service>(client, Service::KIND),
        watch::<PodDisruptionBudget>(client, PodDisruptionBudget::KIND),
        watch::<ReplicaSet>(client, ReplicaSet::KIND),
        watch::<StatefulSet>(client, StatefulSet::KIND),
        watch::<Node>(client, Node::KIND),
        watch::<Pod>(client, Pod::KIND),
    ]);
    Ok((all, absent))
}

/// `namespace/name` (or `name`) of an object.
fn key(v: &Value) -> String {
    let m = &v["metadata"];
    match m["namespace"].as_str().filter(|s| !s.is_empty()) {
        Some(ns) => format!("{ns}/{}", m["name"].as_str().unwrap_or_default()),
        None => m["name"].as_str().unwrap_or_default().to_string(),
    }
}

/// What an object looks like for "did it change": without its
/// resourceVersion and the heartbeat times nodes renew.
fn fingerprint(v: &Value) -> u64 {
    let mut v = v.clone();
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
    }
    if let Some(conds) = v
        .pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut)
    {
        for c in conds.iter_mut().filter_map(Value::as_object_mut) {
            c.remove("lastHeartbeatTime");
        }
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    v.to_string().hash(&mut h);
    h.finish()
}

/// The recording's state: what was last written per object, and the
/// output files.
struct Recorder {
    dir: PathBuf,
    /// Fingerprint of the last version written, by (kind, key).
    seen: HashMap<(&'static str, String), u64>,
    /// Objects of the kinds whose first list is complete, until every kind's is.
    base: BTreeMap<usize, Vec<Value>>,
    /// The list a kind is (re)listing now.
    listing: HashMap<&'static str, Vec<Value>>,
    /// Changes seen before `base.json` could be written.
    early: Vec<String>,
    events: Option<std::io::BufWriter<std::fs::File>>,
    written: usize,
}

impl Recorder {
    fn new(dir: &Path) -> Result<Self> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("creating {}", dir.display()))?;
        Ok(Recorder {
            dir: dir.to_path_buf(),
            seen: HashMap::new(),
            base: BTreeMap::new(),
            listing: HashMap::new(),
            early: Vec::new(),
            events: None,
            written: 0,
        })
    }

    fn line(&mut self, kind: &'static str, ty: &str, object: Value) -> Result<()> {
        let k = (kind, key(&object));
        let fp = fingerprint(&object);
        match ty {
            "DELETED" => {
                self.seen.remove(&k);
            }
            _ => {
                if self.seen.insert(k, fp) == Some(fp) {
                    return Ok(());
                }
            }
        }
        let line = serde_json::to_string(&serde_json::json!({"type": ty, "object": object}))?;
        match &mut self.events {
            Some(w) => {
                writeln!(w, "{line}")?;
                self.written += 1;
            }
            None => self.early.push(line),
        }
        Ok(())
    }

    fn apply(&mut self, kind: &'static str, object: Value) -> Result<()> {
        let ty = if self.seen.contains_key(&(kind, key(&object))) {
            "MODIFIED"
        } else {
            "ADDED"
        };
        self.line(kind, ty, object)
    }

    /// A kind's (re)list is complete.
    fn listed(&mut self, kind: &'static str) -> Result<()> {
        let items = self.listing.remove(kind).unwrap_or_default();
        let Some(index) = KINDS.iter().position(|k| *k == kind) else {
            return Ok(());
        };
        if self.events.is_none() && !self.base.contains_key(&index) {
            for o in &items {
                self.seen.insert((kind, key(o)), fingerprint(o));
            }
            self.base.insert(index, items);
            if self.base.len() == KINDS.len() {
                self.write_base()?;
            }
            return Ok(());
        }
        // A relist: write what changed while the watch was down.
        let listed: HashSet<String> = items.iter().map(key).collect();
        let gone: Vec<String> = self
            .seen
            .keys()
            .filter(|(k, name)| *k == kind && !listed.contains(name))
            .map(|(_, name)| name.clone())
            .collect();
        for name in gone {
            let (ns, n) = name.split_once('/').unwrap_or(("", &name));
            let mut meta = serde_json::json!({"name": n});
            if !ns.is_empty() {
                meta["namespace"] = Value::String(ns.to_string());
            }
            self.line(
                kind,
                "DELETED",
                serde_json::json!({"kind": kind, "metadata": meta}),
            )?;
        }
        for o in items {
            self.apply(kind, o)?;
        }
        Ok(())
    }

    fn write_base(&mut self) -> Result<()> {
        let items: Vec<Value> = std::mem::take(&mut self.base)
            .into_values()
            .flatten()
            .collect();
        let text = crate::snapshot::list_text(items)?;
        let path = self.dir.join("base.json");
        rkube_util::file::write_private(&path, text.as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
        let path = self.dir.join("events.jsonl");
        let file = {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&path)
                .with_context(|| format!("creating {}", path.display()))?
        };
        let mut w = std::io::BufWriter::new(file);
        for line in std::mem::take(&mut self.early) {
            writeln!(w, "{line}")?;
            self.written += 1;
        }
        self.events = Some(w);
        Ok(())
    }

    fn handle(&mut self, rec: Rec) -> Result<()> {
        match rec {
            Rec::Init(kind) => {
                self.listing.insert(kind, Vec::new());
            }
            Rec::InitApply(kind, o) => self.listing.entry(kind).or_default().push(o),
            Rec::InitDone(kind) => self.listed(kind)?,
            Rec::Apply(kind, o) => self.apply(kind, o)?,
            Rec::Delete(kind, o) => self.line(kind, "DELETED", o)?,
            Rec::Failed(kind, e) => eprintln!("warning: watching {kind}: {e}; retrying"),
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        if let Some(w) = &mut self.events {
            w.flush()?;
        }
        Ok(())
    }
}

/// Records until `duration` has passed (forever when `None`) or SIGINT /
/// SIGTERM arrives. Returns how many changes were written.
pub fn record(kubeconfig: Option<&Path>, dir: &Path, duration: Option<Duration>) -> Result<usize> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async {
        let client = crate::snapshot::client(kubeconfig).await?;
        let mut rec = Recorder::new(dir)?;
        let (streams, absent) = streams(&client).await?;
        for kind in absent {
            // Listed, and empty: base.json has none of them.
            rec.handle(Rec::Init(kind))?;
            rec.handle(Rec::InitDone(kind))?;
        }
        let mut all = futures::stream::select_all(streams);
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .context("installing the SIGTERM handler")?;
        let deadline = duration.map(|d| tokio::time::Instant::now() + d);
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                ev = all.next() => match ev {
                    Some(ev) => rec.handle(ev)?,
                    None => break,
                },
                _ = tokio::signal::ctrl_c() => break,
                _ = term.recv() => break,
                _ = async {
                    match deadline {
                        Some(d) => tokio::time::sleep_until(d).await,
                        None => std::future::pending().await,
                    }
                } => break,
                _ = tick.tick() => rec.flush()?,
            }
        }
        if rec.events.is_none() {
            anyhow::bail!(
                "stopped before every kind was listed ({} of {}); nothing recorded",
                rec.base.len(),
                KINDS.len()
            );
        }
        rec.flush()?;
        Ok(rec.written)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(rv: &str, beat: &str, cpu: &str) -> Value {
        json!({"kind": "Node", "metadata": {"name": "n1", "resourceVersion": rv},
               "status": {"allocatable": {"cpu": cpu},
                          "conditions": [{"type": "Ready", "lastHeartbeatTime": beat}]}})
    }

    fn recorder() -> (tempdir::Dir, Recorder) {
        let d = tempdir::Dir::new();
        let r = Recorder::new(&d.0).unwrap();
        (d, r)
    }

    mod tempdir {
        pub struct Dir(pub std::path::PathBuf);
        impl Dir {
            pub fn new() -> Dir {
                let p = std::env::temp_dir().join(format!(
                    "rkube-record-{}-{:?}",
                    std::process::id(),
                    std::thread::current().id()
                ));
                let _ = std::fs::remove_dir_all(&p);
                Dir(p)
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    fn list_all(r: &mut Recorder, nodes: Vec<Value>) {
        for k in KINDS {
            r.handle(Rec::Init(k)).unwrap();
            if k == "Node" {
                for n in &nodes {
                    r.handle(Rec::InitApply(k, n.clone())).unwrap();
                }
            }
            r.handle(Rec::InitDone(k)).unwrap();
        }
    }

    fn events(r: &mut Recorder) -> Vec<Value> {
        r.flush().unwrap();
        std::fs::read_to_string(r.dir.join("events.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The watches name their kinds by their types; those are the kinds
    /// the recorder waits for, in `rkube snapshot`'s order.
    #[test]
    fn the_watched_types_are_the_recorded_kinds() {
        let watched = [
            Namespace::KIND,
            PriorityClass::KIND,
            StorageClass::KIND,
            DeviceClass::KIND,
            ResourceSlice::KIND,
            ResourceClaimTemplate::KIND,
            ResourceClaim::KIND,
            DeviceTaintRule::KIND,
            CSIDriver::KIND,
            CSIStorageCapacity::KIND,
            CSINode::KIND,
            PersistentVolume::KIND,
            PersistentVolumeClaim::KIND,
            Service::KIND,
            PodDisruptionBudget::KIND,
            ReplicaSet::KIND,
            StatefulSet::KIND,
            Node::KIND,
            Pod::KIND,
        ];
        assert_eq!(watched, KINDS);
    }

    #[test]
    fn heartbeats_alone_are_not_recorded_and_real_changes_are() {
        let (_d, mut r) = recorder();
        list_all(&mut r, vec![node("1", "t0", "4")]);
        let base: Value =
            serde_json::from_str(&std::fs::read_to_string(r.dir.join("base.json")).unwrap())
                .unwrap();
        assert_eq!(base["items"].as_array().unwrap().len(), 1);
        r.handle(Rec::Apply("Node", node("2", "t1", "4"))).unwrap();
        r.handle(Rec::Apply("Node", node("3", "t2", "8"))).unwrap();
        let ev = events(&mut r);
        assert_eq!(ev.len(), 1, "{ev:?}");
        assert_eq!(ev[0]["type"], "MODIFIED");
        assert_eq!(ev[0]["object"]["metadata"]["resourceVersion"], "3");
    }

    #[test]
    fn a_relist_writes_what_changed_while_the_watch_was_down() {
        let (_d, mut r) = recorder();
        let other = |name: &str| json!({"kind": "Node", "metadata": {"name": name, "resourceVersion": "5"}});
        list_all(&mut r, vec![node("1", "t0", "4"), other("gone")]);
        r.handle(Rec::Init("Node")).unwrap();
        r.handle(Rec::InitApply("Node", node("1", "t0", "4")))
            .unwrap();
        r.handle(Rec::InitApply("Node", other("new"))).unwrap();
        r.handle(Rec::InitDone("Node")).unwrap();
        let ev = events(&mut r);
        let got: Vec<(String, String)> = ev
            .iter()
            .map(|e| {
                (
                    e["type"].as_str().unwrap().to_string(),
                    e["object"]["metadata"]["name"]
                        .as_str()
                        .unwrap()
                        .to_string(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("DELETED".into(), "gone".into()),
                ("ADDED".into(), "new".into())
            ]
        );
    }

    #[test]
    fn changes_before_every_kind_is_listed_follow_the_base() {
        let (_d, mut r) = recorder();
        r.handle(Rec::Init("Node")).unwrap();
        r.handle(Rec::InitDone("Node")).unwrap();
        r.handle(Rec::Apply("Node", node("9", "t", "4"))).unwrap();
        assert!(r.events.is_none());
        for k in KINDS.iter().filter(|k| **k != "Node") {
            r.handle(Rec::Init(k)).unwrap();
            r.handle(Rec::InitDone(k)).unwrap();
        }
        let ev = events(&mut r);
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0]["type"], "ADDED");
    }
}
