//! ConfigMaps and Secrets that pods use, kept from watches as upstream's
//! `configMapAndSecretChangeDetectionStrategy: Watch` does: the first pod
//! that reads an object starts a watch on that one object (a field
//! selector on its name, which is what the Node authorizer lets a node
//! read), later reads are answered from memory, and the watch stops when
//! the last pod that read it is removed, or once the object is seen
//! immutable (it can no longer change).
//!
//! A read waits at most [`SYNC_WAIT`] for the watch's first list and then
//! fails with upstream's words (`failed to sync configmap cache: timed out
//! waiting for the condition`); the pod's sync is retried.

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::sync::Mutex;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::NamespaceResourceScope;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How long a read waits for a new watch's first list (upstream's 1 s).
pub const SYNC_WAIT: Duration = Duration::from_secs(1);

/// A kind of object the cache can watch.
pub trait Watched:
    Resource<Scope = NamespaceResourceScope, DynamicType = ()>
    + Clone
    + DeserializeOwned
    + Debug
    + Send
    + Sync
    + 'static
{
    /// The resource in messages, as upstream's (`configmap`, `secret`).
    const RESOURCE: &'static str;
    /// Whether the object says it can never change.
    fn immutable(&self) -> bool;
}

impl Watched for ConfigMap {
    const RESOURCE: &'static str = "configmap";
    fn immutable(&self) -> bool {
        self.immutable == Some(true)
    }
}

impl Watched for Secret {
    const RESOURCE: &'static str = "secret";
    fn immutable(&self) -> bool {
        self.immutable == Some(true)
    }
}

/// What the watch of one object knows.
#[derive(Debug, Clone)]
enum State<K> {
    /// Its first list has not answered yet.
    Unsynced,
    /// It does not exist.
    Absent,
    /// It exists.
    Present(K),
}

/// One watched object.
struct Item<K> {
    /// The pods (by uid) that read it.
    users: HashSet<String>,
    state: watch::Receiver<State<K>>,
    /// The watch; `None` once stopped (the object is immutable).
    task: Option<JoinHandle<()>>,
}

impl<K> Drop for Item<K> {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

/// (namespace, name).
type Key = (String, String);

/// The watched objects of one kind.
pub struct ObjectCache<K: Watched> {
    client: Client,
    items: Mutex<HashMap<Key, Item<K>>>,
    sync_wait: Duration,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<K: Watched> ObjectCache<K> {
    /// An empty cache reading through `client`.
    pub fn new(client: Client) -> ObjectCache<K> {
        ObjectCache {
            client,
            items: Mutex::new(HashMap::new()),
            sync_wait: SYNC_WAIT,
        }
    }

    /// `ns/name` as the cache knows it (`None`: it does not exist), read
    /// for the pod `user`, which keeps it watched until [`Self::release`].
    pub async fn get(&self, user: &str, ns: &str, name: &str) -> Result<Option<K>, String> {
        let mut rx = {
            let mut items = lock(&self.items);
            let item = items
                .entry((ns.to_string(), name.to_string()))
                .or_insert_with(|| self.start(ns, name));
            if !item.users.contains(user) {
                item.users.insert(user.to_string());
            }
            item.state.clone()
        };
        let state = match tokio::time::timeout(
            self.sync_wait,
            rx.wait_for(|s| !matches!(s, State::Unsynced)),
        )
        .await
        {
            Ok(Ok(s)) => s.clone(),
            Ok(Err(_)) | Err(_) => {
                return Err(format!(
                    "failed to sync {} cache: timed out waiting for the condition",
                    K::RESOURCE
                ))
            }
        };
        match state {
            State::Present(obj) => {
                if obj.immutable() {
                    self.stop(ns, name);
                }
                Ok(Some(obj))
            }
            _ => Ok(None),
        }
    }

    /// The pod `user` is gone: objects no other pod reads stop being
    /// watched.
    pub fn release(&self, user: &str) {
        lock(&self.items).retain(|_, item| {
            item.users.remove(user);
            !item.users.is_empty()
        });
    }

    /// How many objects are watched now (their watches running).
    pub fn watching(&self) -> usize {
        lock(&self.items)
            .values()
            .filter(|i| i.task.is_some())
            .count()
    }

    fn start(&self, ns: &str, name: &str) -> Item<K> {
        let (tx, rx) = watch::channel(State::Unsynced);
        let api: Api<K> = Api::namespaced(self.client.clone(), ns);
        let task = tokio::spawn(follow(api, name.to_string(), tx));
        Item {
            users: HashSet::new(),
            state: rx,
            task: Some(task),
        }
    }

    /// Stops the watch of an immutable object; what it saw stays.
    fn stop(&self, ns: &str, name: &str) {
        let mut items = lock(&self.items);
        if let Some(item) = items.get_mut(&(ns.to_string(), name.to_string())) {
            if let Some(t) = item.task.take() {
                t.abort();
                tracing::debug!(
                    resource = K::RESOURCE,
                    namespace = ns,
                    name,
                    "stopped watching: the object is immutable"
                );
            }
        }
    }
}

/// Keeps `tx` at what the API server says of the one object `name`.
async fn follow<K: Watched>(api: Api<K>, name: String, tx: watch::Sender<State<K>>) {
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut stream = watcher::watcher(api, cfg).default_backoff().boxed();
    let mut listed: Option<K> = None;
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(Event::Init) => listed = None,
            Ok(Event::InitApply(o)) => listed = Some(o),
            Ok(Event::InitDone) => {
                tx.send_replace(listed.take().map_or(State::Absent, State::Present));
            }
            Ok(Event::Apply(o)) => {
                tx.send_replace(State::Present(o));
            }
            Ok(Event::Delete(_)) => {
                tx.send_replace(State::Absent);
            }
            Err(e) => {
                tracing::debug!(resource = K::RESOURCE, name = %name, error = %e, "watch failed; retrying")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http_body_util::StreamBody;
    use hyper::body::Frame;
    use std::convert::Infallible;
    use std::sync::Arc;
    use tokio::sync::mpsc;

    type Chunk = Result<Frame<Bytes>, Infallible>;

    /// A fake API server: one namespace's ConfigMaps, counted lists and
    /// watches, and a channel into each open watch.
    #[derive(Default)]
    struct Fake {
        objects: HashMap<String, serde_json::Value>,
        lists: usize,
        watches: Vec<(String, mpsc::UnboundedSender<Chunk>)>,
        /// Lists never answer.
        hang: bool,
    }

    fn cm_json(name: &str, value: &str, immutable: bool) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": "2"},
            "data": {"k": value},
            "immutable": immutable,
        })
    }

    fn selected(query: &str) -> String {
        let q = query.replace("%3D", "=");
        q.split('&')
            .find_map(|kv| kv.strip_prefix("fieldSelector=metadata.name="))
            .unwrap_or_default()
            .to_string()
    }

    fn fake_client(fake: Arc<Mutex<Fake>>) -> Client {
        let svc = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let fake = fake.clone();
            async move {
                let query = req.uri().query().unwrap_or_default().to_string();
                let name = selected(&query);
                let (tx, rx) = mpsc::unbounded_channel::<Chunk>();
                let hang = {
                    let mut f = lock(&fake);
                    if query.contains("watch=true") {
                        f.watches.push((name.clone(), tx.clone()));
                        false
                    } else {
                        f.lists += 1;
                        let items: Vec<_> = f.objects.get(&name).cloned().into_iter().collect();
                        let list = serde_json::json!({
                            "apiVersion": "v1", "kind": "ConfigMapList",
                            "metadata": {"resourceVersion": "2"}, "items": items,
                        });
                        let _ = tx.send(Ok(Frame::data(Bytes::from(list.to_string()))));
                        f.hang
                    }
                };
                if hang {
                    std::future::pending::<()>().await;
                }
                if !query.contains("watch=true") {
                    drop(tx);
                }
                let body = StreamBody::new(tokio_stream_of(rx));
                Ok::<_, Infallible>(http::Response::new(body))
            }
        });
        Client::new(svc, "ns")
    }

    fn tokio_stream_of(
        mut rx: mpsc::UnboundedReceiver<Chunk>,
    ) -> impl futures::Stream<Item = Chunk> + Send {
        futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
    }

    fn data(cm: &Option<ConfigMap>) -> Option<String> {
        cm.as_ref()?.data.as_ref()?.get("k").cloned()
    }

    /// Sends a watch event to the watches of `name`.
    fn push(fake: &Mutex<Fake>, name: &str, kind: &str, object: serde_json::Value) {
        let ev = serde_json::json!({"type": kind, "object": object});
        for (n, tx) in &lock(fake).watches {
            if n == name {
                let _ = tx.send(Ok(Frame::data(Bytes::from(format!("{ev}\n")))));
            }
        }
    }

    /// Reads `name` (as pod1) until its data is `want`, for at most 2 s;
    /// the last read.
    async fn read_until(
        cache: &ObjectCache<ConfigMap>,
        name: &str,
        want: Option<&str>,
    ) -> Option<String> {
        let mut seen = None;
        for _ in 0..200 {
            seen = data(&cache.get("pod1", "ns", name).await.unwrap());
            if seen.as_deref() == want {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        seen
    }

    async fn eventually(mut f: impl FnMut() -> bool) {
        for _ in 0..200 {
            if f() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("condition not reached in 2 s");
    }

    #[tokio::test]
    async fn reads_are_answered_from_one_watch_per_object_and_follow_it() {
        let fake = Arc::new(Mutex::new(Fake::default()));
        lock(&fake)
            .objects
            .insert("a".into(), cm_json("a", "one", false));
        let cache: ObjectCache<ConfigMap> = ObjectCache::new(fake_client(fake.clone()));

        let first = cache.get("pod1", "ns", "a").await.unwrap();
        assert_eq!(data(&first).as_deref(), Some("one"));
        for _ in 0..20 {
            let again = cache.get("pod2", "ns", "a").await.unwrap();
            assert_eq!(data(&again).as_deref(), Some("one"));
        }
        assert_eq!(lock(&fake).lists, 1, "one list for 21 reads");
        assert_eq!(cache.get("pod1", "ns", "b").await.unwrap(), None);
        assert_eq!(lock(&fake).lists, 2);
        assert_eq!(cache.watching(), 2);

        // A change and a deletion arrive through the watch.
        eventually(|| lock(&fake).watches.iter().any(|(n, _)| n == "a")).await;
        push(&fake, "a", "MODIFIED", cm_json("a", "two", false));
        let seen = read_until(&cache, "a", Some("two")).await;
        assert_eq!(seen.as_deref(), Some("two"));
        push(&fake, "a", "DELETED", cm_json("a", "two", false));
        let seen = read_until(&cache, "a", None).await;
        assert_eq!(seen, None, "a deletion reaches the cache");
        assert_eq!(lock(&fake).lists, 2, "no list after the first ones");

        // The watch ends with the last pod that read the object.
        cache.release("pod1");
        assert_eq!(cache.watching(), 1, "pod2 still reads a");
        cache.release("pod2");
        assert_eq!(cache.watching(), 0);
        eventually(|| lock(&fake).watches.iter().all(|(_, tx)| tx.is_closed())).await;
    }

    #[tokio::test]
    async fn an_immutable_object_is_no_longer_watched_but_still_read() {
        let fake = Arc::new(Mutex::new(Fake::default()));
        lock(&fake)
            .objects
            .insert("frozen".into(), cm_json("frozen", "v", true));
        let cache: ObjectCache<ConfigMap> = ObjectCache::new(fake_client(fake.clone()));
        let got = cache.get("pod", "ns", "frozen").await.unwrap();
        assert_eq!(data(&got).as_deref(), Some("v"));
        assert_eq!(cache.watching(), 0);
        let again = cache.get("pod", "ns", "frozen").await.unwrap();
        assert_eq!(data(&again).as_deref(), Some("v"));
        assert_eq!(lock(&fake).lists, 1);
    }

    #[tokio::test]
    async fn a_read_gives_up_with_upstreams_words_when_the_list_does_not_answer() {
        let fake = Arc::new(Mutex::new(Fake {
            hang: true,
            ..Default::default()
        }));
        let mut cache: ObjectCache<Secret> = ObjectCache::new(fake_client(fake));
        cache.sync_wait = Duration::from_millis(50);
        let err = cache.get("pod", "ns", "s").await.unwrap_err();
        assert_eq!(
            err,
            "failed to sync secret cache: timed out waiting for the condition"
        );
    }

    #[test]
    fn only_objects_marked_immutable_are_immutable() {
        let cm = |immutable| ConfigMap {
            immutable,
            ..Default::default()
        };
        assert!(cm(Some(true)).immutable());
        assert!(!cm(Some(false)).immutable());
        assert!(!cm(None).immutable());
        let s = Secret {
            immutable: Some(true),
            ..Default::default()
        };
        assert!(s.immutable());
    }
}
