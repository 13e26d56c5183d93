//! A cluster-wide watch of one kind of object, started by its first reader
//! and shared by every reader after it (upstream's shared informers, for
//! the kinds the kubelet reads whole: Services for the pods' environment,
//! ClusterTrustBundles for projections). A read waits at most
//! [`SYNC_WAIT`] for the first list, then fails with upstream's words for
//! the kind; the pod's sync is retried.

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;

use futures::StreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

use crate::objects::SYNC_WAIT;

/// The objects of kind `K`, watched from first use.
pub struct Informer<K: Resource + 'static>
where
    K::DynamicType: Hash + Eq,
{
    client: Client,
    store: tokio::sync::OnceCell<Store<K>>,
    /// The error of a read before the first list.
    not_synced: &'static str,
}

impl<K> Informer<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Hash + Eq + Clone + Send + Sync,
{
    /// An informer over `client` (nothing is watched until read); a read
    /// before the first list fails with `not_synced`.
    pub fn new(client: Client, not_synced: &'static str) -> Informer<K> {
        Informer {
            client,
            store: tokio::sync::OnceCell::new(),
            not_synced,
        }
    }

    /// Every object, once the watch has listed them.
    pub async fn all(&self) -> Result<Vec<Arc<K>>, String> {
        let store = self
            .store
            .get_or_init(|| async {
                let (reader, writer) = reflector::store();
                let api = Api::<K>::all(self.client.clone());
                let stream = watcher(api, watcher::Config::default())
                    .default_backoff()
                    .reflect(writer)
                    .applied_objects();
                tokio::spawn(async move {
                    futures::pin_mut!(stream);
                    while let Some(r) = stream.next().await {
                        if let Err(e) = r {
                            tracing::debug!(error = %e, "informer watch");
                        }
                    }
                });
                reader
            })
            .await;
        match tokio::time::timeout(SYNC_WAIT, store.wait_until_ready()).await {
            Ok(Ok(())) => Ok(store.state()),
            _ => Err(self.not_synced.to_string()),
        }
    }
}
