//! `dra_manager_state`, upstream's checkpoint of the claim info cache
//! (`pkg/kubelet/cm/dra/state`): a JSON object `{"Data": …, "Checksum": …}`
//! whose `Data` is the JSON of the claims (kind `DRACheckpoint`, apiVersion
//! `checkpoint.dra.kubelet.k8s.io/v1`) and whose checksum is the CRC-32
//! (IEEE) of those bytes. Field names are Go's; a pod set is a JSON object
//! of empty objects, as Go's `sets.Set`.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::checkpoint::CheckpointError;

/// The file's name in the root directory.
pub const FILE: &str = "dra_manager_state";

/// The largest file read (a node's claims are a few KiB).
pub const MAX_BYTES: u64 = 16 << 20;

const KIND: &str = "DRACheckpoint";
const API_VERSION: &str = "checkpoint.dra.kubelet.k8s.io/v1";

/// One claim as checkpointed (upstream's `ClaimInfoState`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ClaimState {
    /// The claim's UID.
    #[serde(rename = "ClaimUID", default)]
    pub claim_uid: String,
    /// Its name.
    #[serde(rename = "ClaimName", default)]
    pub claim_name: String,
    /// Its namespace.
    #[serde(rename = "Namespace", default)]
    pub namespace: String,
    /// The pods that use it.
    #[serde(rename = "PodUIDs", default, with = "pod_set")]
    pub pod_uids: BTreeSet<String>,
    /// What each driver prepared (`None`: Go's nil map).
    #[serde(rename = "DriverState", default)]
    pub driver_state: Option<BTreeMap<String, DriverState>>,
}

/// One driver's share of a claim.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DriverState {
    /// The devices `NodePrepareResources` returned.
    #[serde(rename = "Devices", default)]
    pub devices: Option<Vec<Device>>,
    /// Node operations the allocation skips (`DRAOptionalNodeOperations`).
    #[serde(
        rename = "skipNodeOperations",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub skip_node_operations: Option<Vec<String>>,
}

/// A prepared device.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Device {
    /// Its pool.
    #[serde(rename = "PoolName", default)]
    pub pool_name: String,
    /// Its name.
    #[serde(rename = "DeviceName", default)]
    pub device_name: String,
    /// Its share of a device allocated more than once.
    #[serde(rename = "ShareID", default)]
    pub share_id: Option<String>,
    /// The claim's requests it serves (none: all of them).
    #[serde(rename = "RequestNames", default)]
    pub request_names: Option<Vec<String>>,
    /// Its CDI device IDs.
    #[serde(rename = "CDIDeviceIDs", default)]
    pub cdi_device_ids: Option<Vec<String>>,
}

#[derive(Serialize, Deserialize)]
struct Data {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    kind: String,
    #[serde(
        rename = "apiVersion",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    api_version: String,
    #[serde(rename = "ClaimInfoStateList", default)]
    claims: Option<Vec<ClaimState>>,
}

#[derive(Serialize, Deserialize)]
struct File {
    #[serde(rename = "Data")]
    data: String,
    #[serde(rename = "Checksum")]
    checksum: u32,
}

/// The file's bytes for `claims`.
pub fn encode(claims: &[ClaimState]) -> Vec<u8> {
    let data = rkube_util::go_json::marshal(&Data {
        kind: KIND.into(),
        api_version: API_VERSION.into(),
        claims: Some(claims.to_vec()),
    });
    let checksum = crc32fast::hash(data.as_bytes());
    rkube_util::go_json::marshal(&File { data, checksum }).into_bytes()
}

/// The claims of a file's bytes; a file whose checksum does not match its
/// data is refused (upstream's kubelet refuses to start on it).
pub fn decode(bytes: &[u8]) -> Result<Vec<ClaimState>, CheckpointError> {
    let file: File =
        serde_json::from_slice(bytes).map_err(|e| CheckpointError::Malformed(e.to_string()))?;
    let actual = crc32fast::hash(file.data.as_bytes());
    if actual != file.checksum {
        return Err(CheckpointError::Corrupt {
            expected: u64::from(file.checksum),
            actual: u64::from(actual),
        });
    }
    let data: Data =
        serde_json::from_str(&file.data).map_err(|e| CheckpointError::Malformed(e.to_string()))?;
    Ok(data.claims.unwrap_or_default())
}

/// Go's `sets.Set[string]` in JSON: `{"a":{},"b":{}}`, `null` when nil.
mod pod_set {
    use std::collections::{BTreeMap, BTreeSet};

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    struct Empty {}

    pub fn serialize<S: Serializer>(set: &BTreeSet<String>, s: S) -> Result<S::Ok, S::Error> {
        let m: BTreeMap<&str, Empty> = set.iter().map(|k| (k.as_str(), Empty {})).collect();
        m.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeSet<String>, D::Error> {
        let m: Option<BTreeMap<String, serde::de::IgnoredAny>> = Option::deserialize(d)?;
        Ok(m.unwrap_or_default().into_keys().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Files upstream's checkpointer wrote (its own test table,
    /// `pkg/kubelet/cm/dra/state/checkpointer_test.go` of v1.37).
    const UPSTREAM: [&str; 4] = [
        r#"{"Data":"{\"kind\":\"DRACheckpoint\",\"apiVersion\":\"checkpoint.dra.kubelet.k8s.io/v1\",\"ClaimInfoStateList\":[{\"ClaimUID\":\"067798be-454e-4be4-9047-1aa06aea63f7\",\"ClaimName\":\"example\",\"Namespace\":\"default\",\"PodUIDs\":{\"139cdb46-f989-4f17-9561-ca10cfb509a6\":{}},\"DriverState\":{\"test-driver.cdi.k8s.io\":{\"Devices\":[{\"PoolName\":\"worker-1\",\"DeviceName\":\"dev-1\",\"ShareID\":null,\"RequestNames\":[\"test request\"],\"CDIDeviceIDs\":[\"example.com/example=cdi-example\"]}]}}}]}","Checksum":2570581864}"#,
        r#"{"Data":"{\"kind\":\"DRACheckpoint\",\"apiVersion\":\"checkpoint.dra.kubelet.k8s.io/v1\",\"ClaimInfoStateList\":[{\"ClaimUID\":\"067798be-454e-4be4-9047-1aa06aea63f7\",\"ClaimName\":\"example\",\"Namespace\":\"default\",\"PodUIDs\":{\"139cdb46-f989-4f17-9561-ca10cfb509a6\":{}},\"DriverState\":{\"test-driver.cdi.k8s.io\":{\"Devices\":[{\"PoolName\":\"worker-1\",\"DeviceName\":\"dev-1\",\"ShareID\":\"aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa\",\"RequestNames\":[\"test request\"],\"CDIDeviceIDs\":[\"example.com/example=cdi-example\"]}]}}}]}","Checksum":736302156}"#,
        r#"{"Data":"{\"kind\":\"DRACheckpoint\",\"apiVersion\":\"checkpoint.dra.kubelet.k8s.io/v1\",\"ClaimInfoStateList\":[{\"ClaimUID\":\"067798be-454e-4be4-9047-1aa06aea63f7\",\"ClaimName\":\"example\",\"Namespace\":\"default\",\"PodUIDs\":{\"139cdb46-f989-4f17-9561-ca10cfb509a6\":{}},\"DriverState\":{\"test-driver.cdi.k8s.io\":{\"Devices\":[{\"PoolName\":\"worker-1\",\"DeviceName\":\"dev-1\",\"ShareID\":null,\"RequestNames\":[\"test request\"],\"CDIDeviceIDs\":[\"example.com/example=cdi-example\"]},{\"PoolName\":\"worker-1\",\"DeviceName\":\"dev-2\",\"ShareID\":null,\"RequestNames\":[\"test request\"],\"CDIDeviceIDs\":[\"example.com/example=cdi-example\"]}]}}}]}","Checksum":1223221469}"#,
        r#"{"Data":"{\"kind\":\"DRACheckpoint\",\"apiVersion\":\"checkpoint.dra.kubelet.k8s.io/v1\",\"ClaimInfoStateList\":[{\"ClaimUID\":\"067798be-454e-4be4-9047-1aa06aea63f7\",\"ClaimName\":\"example-1\",\"Namespace\":\"default\",\"PodUIDs\":{\"139cdb46-f989-4f17-9561-ca10cfb509a6\":{}},\"DriverState\":{\"test-driver.cdi.k8s.io\":{\"Devices\":[{\"PoolName\":\"worker-1\",\"DeviceName\":\"dev-1\",\"ShareID\":null,\"RequestNames\":[\"test request\"],\"CDIDeviceIDs\":[\"example.com/example=cdi-example\"]}]}}},{\"ClaimUID\":\"4cf8db2d-06c0-7d70-1a51-e59b25b2c16c\",\"ClaimName\":\"example-2\",\"Namespace\":\"default\",\"PodUIDs\":{\"139cdb46-f989-4f17-9561-ca10cfb509a6\":{}},\"DriverState\":{\"test-driver.cdi.k8s.io\":{\"Devices\":[{\"PoolName\":\"worker-1\",\"DeviceName\":\"dev-2\",\"ShareID\":null,\"RequestNames\":null,\"CDIDeviceIDs\":null}]}}}]}","Checksum":2820117767}"#,
    ];

    #[test]
    fn reads_and_writes_upstreams_files_byte_for_byte() {
        for file in UPSTREAM {
            let claims = decode(file.as_bytes()).unwrap();
            assert_eq!(String::from_utf8(encode(&claims)).unwrap(), file);
        }
        let claims = decode(UPSTREAM[3].as_bytes()).unwrap();
        assert_eq!(claims.len(), 2);
        let dev = &claims[1].driver_state.as_ref().unwrap()["test-driver.cdi.k8s.io"]
            .devices
            .as_ref()
            .unwrap()[0];
        assert_eq!(
            (dev.device_name.as_str(), &dev.cdi_device_ids),
            ("dev-2", &None)
        );
        assert!(claims[0]
            .pod_uids
            .contains("139cdb46-f989-4f17-9561-ca10cfb509a6"));
    }

    #[test]
    fn older_files_are_read_and_changed_ones_refused() {
        // Upstream's "upgraded-structure-and-version": no RequestNames nor
        // ShareID, apiVersion v0.
        let old = r#"{"Data":"{\"kind\":\"DRACheckpoint\",\"apiVersion\":\"checkpoint.dra.kubelet.k8s.io/v0\",\"ClaimInfoStateList\":[{\"ClaimUID\":\"067798be-454e-4be4-9047-1aa06aea63f7\",\"ClaimName\":\"example\",\"Namespace\":\"default\",\"PodUIDs\":{\"139cdb46-f989-4f17-9561-ca10cfb509a6\":{}},\"DriverState\":{\"test-driver.cdi.k8s.io\":{\"Devices\":[{\"PoolName\":\"worker-1\",\"DeviceName\":\"dev-1\",\"CDIDeviceIDs\":[\"example.com/example=cdi-example\"]}]}}}]}","Checksum":1284376732}"#;
        let claims = decode(old.as_bytes()).unwrap();
        let dev = &claims[0].driver_state.as_ref().unwrap()["test-driver.cdi.k8s.io"]
            .devices
            .as_ref()
            .unwrap()[0];
        assert_eq!(dev.request_names, None);
        let changed = UPSTREAM[0].replace("dev-1", "dev-9");
        assert!(matches!(
            decode(changed.as_bytes()),
            Err(CheckpointError::Corrupt {
                expected: 2570581864,
                ..
            })
        ));
        assert!(matches!(decode(b"{"), Err(CheckpointError::Malformed(_))));
        // An empty cache is an empty list, as upstream's syncToCheckpoint.
        assert!(String::from_utf8(encode(&[]))
            .unwrap()
            .contains(r#"\"ClaimInfoStateList\":[]"#));
        assert_eq!(decode(&encode(&[])).unwrap(), vec![]);
    }
}
