//! `rkube snapshot`: read what scheduling depends on from a live cluster into
//! a cluster file (`kind: List`) that `simulate`, `explain` and `compare`
//! read, without the server-side noise (managedFields, resourceVersion,
//! kubectl's last-applied-configuration annotation).

use indicatif::ProgressBar;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
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
use kube::api::ListParams;
use kube::{Api, Client};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

/// Objects per list request (the rest follows with `continue`).
const PAGE: u32 = 500;

/// Client-side rate limit: at most `qps` requests per second.
struct Limiter {
    interval: Duration,
    next: Instant,
}

impl Limiter {
    fn new(qps: f64) -> Self {
        let qps = if qps.is_finite() && qps > 0.0 {
            qps
        } else {
            5.0
        };
        Limiter {
            interval: Duration::from_secs_f64(1.0 / qps),
            next: Instant::now(),
        }
    }

    async fn wait(&mut self) {
        let now = Instant::now();
        if self.next > now {
            tokio::time::sleep(self.next - now).await;
        }
        self.next = self.next.max(now) + self.interval;
    }
}

/// Drops what the API server adds and no scheduling decision reads.
pub fn strip(obj: &mut Value) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
    }
    strip_keeping_version(obj);
}

/// [`strip`], keeping `metadata.resourceVersion` (recordings order changes by it).
pub fn strip_keeping_version(obj: &mut Value) {
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    meta.remove("managedFields");
    meta.remove("selfLink");
    if let Some(ann) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
        ann.remove("kubectl.kubernetes.io/last-applied-configuration");
        if ann.is_empty() {
            meta.remove("annotations");
        }
    }
}

async fn list<K>(
    client: &Client,
    limiter: &mut Limiter,
    items: &mut Vec<Value>,
    bar: Option<&ProgressBar>,
) -> Result<()>
where
    K: kube::Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
    K::DynamicType: Default,
{
    list_or_absent::<K>(client, limiter, items, bar, false).await
}

/// Lists `K`; with `optional`, an API the server does not serve (404)
/// lists nothing (DRA objects on a cluster without `resource.k8s.io/v1`).
async fn list_or_absent<K>(
    client: &Client,
    limiter: &mut Limiter,
    items: &mut Vec<Value>,
    bar: Option<&ProgressBar>,
    optional: bool,
) -> Result<()>
where
    K: kube::Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::all(client.clone());
    let plural = K::plural(&Default::default()).into_owned();
    let mut params = ListParams::default().limit(PAGE);
    loop {
        limiter.wait().await;
        let page = match api.list(&params).await {
            Ok(p) => p,
            Err(kube::Error::Api(e)) if optional && e.code == 404 => return Ok(()),
            Err(e) => return Err(e).with_context(|| format!("listing {plural}")),
        };
        for obj in &page.items {
            let mut v = serde_json::to_value(obj)?;
            strip(&mut v);
            items.push(v);
        }
        if let Some(b) = bar {
            b.set_message(format!("listing {plural}: {} objects read", items.len()));
            b.tick();
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(()),
        }
    }
}

/// A `v1` `List`, fields in the order kubectl prints them.
#[derive(Serialize)]
struct List {
    #[serde(rename = "apiVersion")]
    api_version: &'static str,
    kind: &'static str,
    items: Vec<Value>,
}

/// A client for `--kubeconfig`, or in-cluster / `$KUBECONFIG` / `~/.kube/config`.
pub async fn client(kubeconfig: Option<&Path>) -> Result<Client> {
    let config = match kubeconfig {
        Some(p) => {
            let kc = kube::config::Kubeconfig::read_from(p)
                .with_context(|| format!("reading kubeconfig {}", p.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .with_context(|| format!("loading kubeconfig {}", p.display()))?
        }
        None => kube::Config::infer()
            .await
            .context("no --kubeconfig given and no in-cluster or default kubeconfig found")?,
    };
    Ok(Client::try_from(config)?)
}

/// Every object scheduling reads, stripped of server noise, in the order
/// `rkube snapshot` writes them.
pub async fn collect(client: &Client, qps: f64, bar: Option<&ProgressBar>) -> Result<Vec<Value>> {
    let client = client.clone();
    let mut limiter = Limiter::new(qps);
    let mut items = Vec::new();
    let l = &mut limiter;
    let it = &mut items;
    list::<Namespace>(&client, l, it, bar).await?;
    list::<PriorityClass>(&client, l, it, bar).await?;
    list::<StorageClass>(&client, l, it, bar).await?;
    list_or_absent::<DeviceClass>(&client, l, it, bar, true).await?;
    list_or_absent::<ResourceSlice>(&client, l, it, bar, true).await?;
    list_or_absent::<ResourceClaimTemplate>(&client, l, it, bar, true).await?;
    list_or_absent::<ResourceClaim>(&client, l, it, bar, true).await?;
    list_or_absent::<DeviceTaintRule>(&client, l, it, bar, true).await?;
    list::<CSIDriver>(&client, l, it, bar).await?;
    list::<CSIStorageCapacity>(&client, l, it, bar).await?;
    list::<CSINode>(&client, l, it, bar).await?;
    list::<PersistentVolume>(&client, l, it, bar).await?;
    list::<PersistentVolumeClaim>(&client, l, it, bar).await?;
    list::<Service>(&client, l, it, bar).await?;
    list::<PodDisruptionBudget>(&client, l, it, bar).await?;
    list::<ReplicaSet>(&client, l, it, bar).await?;
    list::<StatefulSet>(&client, l, it, bar).await?;
    list::<Node>(&client, l, it, bar).await?;
    list::<Pod>(&client, l, it, bar).await?;
    Ok(items)
}

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// Reads a live cluster in memory as one JSON `List` (what `snapshot` would
/// write), for commands given `--kubeconfig` instead of `--cluster`.
pub fn read_live(kubeconfig: &Path, qps: f64, bar: Option<&ProgressBar>) -> Result<Vec<Value>> {
    runtime()?.block_on(async {
        let client = client(Some(kubeconfig)).await?;
        collect(&client, qps, bar).await
    })
}

/// The items as the text of one `v1` `List`.
pub fn list_text(items: Vec<Value>) -> Result<String> {
    Ok(serde_json::to_string(&List {
        api_version: "v1",
        kind: "List",
        items,
    })?)
}

/// Reads the cluster and renders the `List` as YAML when `out` ends in
/// `.yaml`/`.yml`, else JSON.
pub fn snapshot(
    kubeconfig: Option<&Path>,
    out: &Path,
    qps: f64,
    bar: Option<&ProgressBar>,
) -> Result<String> {
    let items = runtime()?.block_on(async {
        let client = client(kubeconfig).await?;
        collect(&client, qps, bar).await
    })?;
    let list = List {
        api_version: "v1",
        kind: "List",
        items,
    };
    let yaml = out
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("yaml") || e.eq_ignore_ascii_case("yml"));
    Ok(if yaml {
        serde_yaml_ng::to_string(&list)?
    } else {
        let mut s = serde_json::to_string_pretty(&list)?;
        s.push('\n');
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strips_server_noise_and_keeps_the_rest() {
        let mut v = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": "p", "namespace": "d", "uid": "u", "resourceVersion": "7",
            "managedFields": [{"manager": "kubectl"}],
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
            "labels": {"app": "x"}}, "spec": {"nodeName": "n"}});
        strip(&mut v);
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": "p", "namespace": "d", "uid": "u", "labels": {"app": "x"}},
                "spec": {"nodeName": "n"}})
        );
        let mut v = json!({"metadata": {"annotations": {"a": "b",
            "kubectl.kubernetes.io/last-applied-configuration": "{}"}}});
        strip(&mut v);
        assert_eq!(v, json!({"metadata": {"annotations": {"a": "b"}}}));
    }
}
