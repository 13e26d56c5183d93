//! CSI drivers registered on the node, as upstream's CSI
//! `RegistrationHandler`: a `CSIPlugin` socket in `plugins_registry` that
//! names a driver speaking a CSI 1.x version is connected to, asked
//! `NodeGetInfo`, and added to the Node and its CSINode ([`super::node_info`]);
//! then volumes of that driver can be staged and published. A socket that
//! goes away removes the driver from both.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::Client;
use tonic::transport::Channel;

use super::node_info;
use super::v1;
use crate::pluginmanager::DIAL_TIMEOUT;

/// The deadline of a CSI call (upstream's `csiTimeout`).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(120);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The registered drivers, by name.
#[derive(Default)]
pub struct Drivers {
    map: Mutex<HashMap<String, (String, Channel)>>,
}

impl Drivers {
    /// A channel to driver `name`, in upstream's words when it is not
    /// registered.
    pub fn channel(&self, name: &str) -> Result<Channel, String> {
        lock(&self.map)
            .get(name)
            .map(|(_, c)| c.clone())
            .ok_or_else(|| {
                format!("driver name {name} not found in the list of registered CSI drivers")
            })
    }

    /// The names registered.
    pub fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = lock(&self.map).keys().cloned().collect();
        v.sort();
        v
    }
}

/// Runs a CSI call under [`CALL_TIMEOUT`], its error in upstream's words.
pub async fn call<T>(
    f: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, String> {
    match tokio::time::timeout(CALL_TIMEOUT, f).await {
        Ok(Ok(r)) => Ok(r.into_inner()),
        Ok(Err(s)) => Err(rkube_cri::go_status(&s)),
        Err(_) => Err("rpc error: code = DeadlineExceeded desc = context deadline exceeded".into()),
    }
}

/// Whether `versions` has a CSI 1.x version (upstream accepts only major
/// version 1).
pub fn check_versions(name: &str, versions: &[String]) -> Result<(), String> {
    if versions.is_empty() {
        return Err(format!(
            "kubernetes.io/csi: RegisterPlugin for CSI driver {name:?} failed. Plugin returned an empty list for supported versions"
        ));
    }
    let major_one = versions.iter().any(|v| {
        let v = v.trim_start_matches('v');
        v.split('.').next() == Some("1") && v.split('.').all(|p| p.parse::<u64>().is_ok())
    });
    if !major_one {
        return Err(format!(
            "kubernetes.io/csi: RegisterPlugin for CSI driver {name:?} failed. None of the versions specified {versions:?} are supported"
        ));
    }
    Ok(())
}

/// The plugin manager's handler of `CSIPlugin` sockets.
pub struct Handler {
    /// The registered drivers.
    pub drivers: Arc<Drivers>,
    /// The API client (the node's identity).
    pub client: Client,
    /// This node.
    pub node_name: String,
}

impl crate::pluginmanager::Handler for Handler {
    fn validate(&self, name: &str, endpoint: &str, versions: &[String]) -> Result<(), String> {
        super::paths::check_driver_name(name)
            .and_then(|_| check_versions(name, versions))
            .map_err(|e| {
                format!("validation failed for CSI Driver {name} at endpoint {endpoint}: {e}")
            })
    }

    fn register<'a>(
        &'a self,
        name: &'a str,
        endpoint: &'a str,
        versions: &'a [String],
    ) -> crate::BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            super::paths::check_driver_name(name)?;
            check_versions(name, versions)?;
            let channel = rkube_cri::unix_channel(PathBuf::from(endpoint), DIAL_TIMEOUT)
                .await
                .map_err(|e| format!("kubernetes.io/csi: {name}.RegisterPlugin failed: {e}"))?;
            let mut node = v1::node_client::NodeClient::new(channel.clone());
            let info = call(node.node_get_info(v1::NodeGetInfoRequest {}))
                .await
                .map_err(|e| format!("kubernetes.io/csi: {name}.NodeGetInfo failed: {e}"))?;
            let topology: BTreeMap<String, String> = info
                .accessible_topology
                .map(|t| t.segments.into_iter().collect())
                .unwrap_or_default();
            node_info::install(
                &self.client,
                &self.node_name,
                name,
                &info.node_id,
                info.max_volumes_per_node,
                &topology,
            )
            .await
            .map_err(|e| format!("kubernetes.io/csi: {name}.RegisterPlugin failed: {e}"))?;
            lock(&self.drivers.map).insert(name.to_string(), (endpoint.to_string(), channel));
            tracing::info!(driver = name, endpoint, node_id = %info.node_id, "CSI driver registered");
            Ok(())
        })
    }

    fn deregister(&self, name: &str, endpoint: &str) {
        let removed = {
            let mut m = lock(&self.drivers.map);
            match m.get(name) {
                Some((e, _)) if e == endpoint => m.remove(name).is_some(),
                _ => false,
            }
        };
        if !removed {
            return;
        }
        tracing::info!(driver = name, endpoint, "CSI driver deregistered");
        let (client, node, name) = (
            self.client.clone(),
            self.node_name.clone(),
            name.to_string(),
        );
        tokio::spawn(async move {
            if let Err(e) = node_info::uninstall(&client, &node, &name).await {
                tracing::warn!(driver = %name, error = %e, "removing the CSI driver from the node");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_csi_1_versions_register() {
        assert!(check_versions("d", &["1.0.0".into()]).is_ok());
        assert!(check_versions("d", &["0.3.0".into(), "v1.2.0".into()]).is_ok());
        assert!(check_versions("d", &["0.3.0".into()])
            .unwrap_err()
            .contains("None of the versions specified"));
        assert!(check_versions("d", &[]).unwrap_err().contains("empty list"));
        assert!(check_versions("d", &["1.x".into()]).is_err());
    }

    #[test]
    fn an_unregistered_driver_is_named() {
        assert_eq!(
            Drivers::default().channel("d.csi").unwrap_err(),
            "driver name d.csi not found in the list of registered CSI drivers"
        );
    }
}
