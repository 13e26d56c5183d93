//! Upstream's device manager checkpoint, `kubelet_internal_checkpoint` in
//! the device-plugins directory (`devicemanager/checkpoint` of v1.37):
//!
//! ```text
//! {"Data":{"PodDeviceEntries":[{"PodUID":…,"ContainerName":…,"ResourceName":…,
//!   "DeviceIDs":{"-1":[…]},"AllocResp":"<base64 of the plugin's answer>"}],
//!  "RegisteredDevices":{"RESOURCE":[…]}},"Checksum":N}
//! ```
//!
//! `N` is the checkpoint manager's checksum of `Data`: FNV-1a (32 bits)
//! over `dump.ForHash(Data)`, spew's `%#v` of the Go struct, which this
//! module writes for this one shape. Go writes the entries and each
//! device list in map order (any order): the checksum is of the order
//! written, so a file is read back in its own order. Checked against
//! upstream's own writer on the table `hack/gen-device-checkpoints` makes.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use base64::Engine as _;
use serde::{Deserialize, Serialize};

/// The file's name in the device-plugins directory.
pub const FILE: &str = "kubelet_internal_checkpoint";

/// The largest checkpoint read (a node's allocations take kilobytes).
pub const MAX_BYTES: u64 = 64 << 20;

/// The devices of one container for one resource: upstream's
/// `PodDevicesEntry`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Entry {
    /// The pod's UID.
    pub pod_uid: String,
    /// The container's name.
    pub container: String,
    /// The extended resource.
    pub resource: String,
    /// Device IDs by NUMA node (`-1`: a device without topology); `None` is
    /// Go's nil map.
    pub device_ids: Option<BTreeMap<i64, Option<Vec<String>>>>,
    /// The plugin's `ContainerAllocateResponse`, protobuf-encoded; `None`
    /// is Go's nil slice.
    pub alloc_resp: Option<Vec<u8>>,
}

/// A checkpoint's data: upstream's `checkpointData`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Data {
    /// The containers' devices (`None`: Go's nil slice, written `null`).
    pub entries: Option<Vec<Entry>>,
    /// Each registered resource's healthy devices.
    pub registered: Option<BTreeMap<String, Option<Vec<String>>>>,
}

pub use crate::checkpoint::CheckpointError;

#[derive(Serialize, Deserialize)]
struct FileJson {
    #[serde(rename = "Data")]
    data: DataJson,
    #[serde(rename = "Checksum")]
    checksum: u64,
}

#[derive(Serialize, Deserialize, Default)]
struct DataJson {
    #[serde(rename = "PodDeviceEntries", default)]
    entries: Option<Vec<EntryJson>>,
    #[serde(rename = "RegisteredDevices", default)]
    registered: Option<BTreeMap<String, Option<Vec<String>>>>,
}

#[derive(Serialize, Deserialize)]
struct EntryJson {
    #[serde(rename = "PodUID", default)]
    pod_uid: String,
    #[serde(rename = "ContainerName", default)]
    container: String,
    #[serde(rename = "ResourceName", default)]
    resource: String,
    /// Go writes integer map keys as strings, sorted as strings.
    #[serde(rename = "DeviceIDs", default)]
    device_ids: Option<BTreeMap<String, Option<Vec<String>>>>,
    #[serde(rename = "AllocResp", default)]
    alloc_resp: Option<String>,
}

/// spew's `%#v` (the hash dump) of `data` as upstream's struct.
pub fn hash_dump(data: &Data) -> String {
    fn list(out: &mut String, l: Option<&Vec<String>>) {
        match l {
            None => out.push_str("<nil>"),
            Some(l) => {
                out.push('[');
                out.push_str(&l.join(" "));
                out.push(']');
            }
        }
    }
    let mut out =
        String::from("(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)");
    match &data.entries {
        None => out.push_str("<nil>"),
        Some(entries) => {
            out.push('[');
            for (i, e) in entries.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                let _ = write!(
                    out,
                    "{{PodUID:(string){} ContainerName:(string){} ResourceName:(string){} DeviceIDs:(checkpoint.DevicesPerNUMA)",
                    e.pod_uid, e.container, e.resource
                );
                match &e.device_ids {
                    None => out.push_str("<nil>"),
                    Some(ids) => {
                        out.push_str("map[");
                        for (j, (numa, devs)) in ids.iter().enumerate() {
                            if j > 0 {
                                out.push(' ');
                            }
                            let _ = write!(out, "{numa}:");
                            list(&mut out, devs.as_ref());
                        }
                        out.push(']');
                    }
                }
                out.push_str(" AllocResp:([]uint8)");
                match &e.alloc_resp {
                    None => out.push_str("<nil>"),
                    Some(b) => {
                        out.push('[');
                        for (j, byte) in b.iter().enumerate() {
                            if j > 0 {
                                out.push(' ');
                            }
                            let _ = write!(out, "{byte}");
                        }
                        out.push(']');
                    }
                }
                out.push('}');
            }
            out.push(']');
        }
    }
    out.push_str(" RegisteredDevices:(map[string][]string)");
    match &data.registered {
        None => out.push_str("<nil>"),
        Some(r) => {
            out.push_str("map[");
            for (i, (res, devs)) in r.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                let _ = write!(out, "{res}:");
                list(&mut out, devs.as_ref());
            }
            out.push(']');
        }
    }
    out.push('}');
    out
}

/// The checkpoint manager's checksum of `data`.
pub fn checksum(data: &Data) -> u64 {
    u64::from(rkube_util::fast_hash::fnv1a_32(&[
        hash_dump(data).as_bytes()
    ]))
}

/// The file's bytes for `data`.
pub fn encode(data: &Data) -> Vec<u8> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let json = FileJson {
        data: DataJson {
            entries: data.entries.as_ref().map(|entries| {
                entries
                    .iter()
                    .map(|e| EntryJson {
                        pod_uid: e.pod_uid.clone(),
                        container: e.container.clone(),
                        resource: e.resource.clone(),
                        device_ids: e.device_ids.as_ref().map(|ids| {
                            ids.iter()
                                .map(|(k, v)| (k.to_string(), v.clone()))
                                .collect()
                        }),
                        alloc_resp: e.alloc_resp.as_ref().map(|b| b64.encode(b)),
                    })
                    .collect()
            }),
            registered: data.registered.clone(),
        },
        checksum: checksum(data),
    };
    rkube_util::go_json::marshal(&json).into_bytes()
}

/// The data of a file's bytes, refusing a file whose checksum does not
/// match.
pub fn decode(bytes: &[u8]) -> Result<Data, CheckpointError> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let file: FileJson =
        serde_json::from_slice(bytes).map_err(|e| CheckpointError::Malformed(e.to_string()))?;
    let mut entries = None;
    if let Some(list) = file.data.entries {
        let mut out = Vec::with_capacity(list.len());
        for e in list {
            let device_ids = match e.device_ids {
                None => None,
                Some(ids) => {
                    let mut m = BTreeMap::new();
                    for (k, v) in ids {
                        let numa = k.parse::<i64>().map_err(|_| {
                            CheckpointError::Malformed(format!("NUMA node {k:?} is not an integer"))
                        })?;
                        m.insert(numa, v);
                    }
                    Some(m)
                }
            };
            let alloc_resp = match e.alloc_resp {
                None => None,
                Some(s) => Some(b64.decode(s.as_bytes()).map_err(|err| {
                    CheckpointError::Malformed(format!("AllocResp is not base64: {err}"))
                })?),
            };
            out.push(Entry {
                pod_uid: e.pod_uid,
                container: e.container,
                resource: e.resource,
                device_ids,
                alloc_resp,
            });
        }
        entries = Some(out);
    }
    let data = Data {
        entries,
        registered: file.data.registered,
    };
    let actual = checksum(&data);
    if actual != file.checksum {
        return Err(CheckpointError::Corrupt {
            expected: file.checksum,
            actual,
        });
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Vec<(serde_json::Value, String)> {
        include_str!("testdata/checkpoints.jsonl")
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                let row: serde_json::Value = serde_json::from_str(l).unwrap();
                (
                    row["case"].clone(),
                    row["checkpoint"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    #[test]
    fn reads_and_writes_upstreams_files() {
        let rows = table();
        assert!(rows.len() >= 5, "{} cases", rows.len());
        for (case, file) in rows {
            let data = decode(file.as_bytes()).unwrap_or_else(|e| panic!("{case}: {e}"));
            assert_eq!(String::from_utf8(encode(&data)).unwrap(), file, "{case}");
            let n = case["entries"].as_array().map_or(0, Vec::len);
            assert_eq!(data.entries.as_ref().map_or(0, Vec::len), n, "{case}");
        }
    }

    #[test]
    fn a_changed_file_is_refused() {
        let (_, file) = table().into_iter().nth(2).unwrap();
        let tampered = file.replace("Dev-2", "Dev-9");
        assert!(matches!(
            decode(tampered.as_bytes()),
            Err(CheckpointError::Corrupt { .. })
        ));
        assert!(matches!(
            decode(b"{\"Data\": 3}"),
            Err(CheckpointError::Malformed(_))
        ));
        let bad_numa = file.replace("\"-1\"", "\"x\"");
        assert!(matches!(
            decode(bad_numa.as_bytes()),
            Err(CheckpointError::Malformed(m)) if m.contains("NUMA")
        ));
    }

    #[test]
    fn dump_matches_spew_for_nil_and_empty() {
        let d = Data {
            entries: Some(vec![Entry {
                pod_uid: "u".into(),
                device_ids: Some(BTreeMap::from([
                    (1, Some(vec!["b".into(), "a".into()])),
                    (-1, Some(vec!["x".into()])),
                    (0, None),
                ])),
                alloc_resp: Some(vec![1, 2, 250]),
                ..Entry::default()
            }]),
            registered: Some(BTreeMap::from([
                ("z".into(), Some(vec![])),
                ("n".into(), None),
            ])),
        };
        // spew's output for the same values (dump.ForHash).
        assert_eq!(
            hash_dump(&d),
            "(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)[{PodUID:(string)u ContainerName:(string) ResourceName:(string) DeviceIDs:(checkpoint.DevicesPerNUMA)map[-1:[x] 0:<nil> 1:[b a]] AllocResp:([]uint8)[1 2 250]}] RegisteredDevices:(map[string][]string)map[n:<nil> z:[]]}"
        );
    }
}
