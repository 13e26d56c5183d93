//! Upstream's allocation checkpoint file (`allocation/state.Checkpoint`):
//! `{"data": D, "checksum": N}`, where `D` is Go's `json.Marshal` of
//! `{"entries": {uid: PodResourceInfo}}` (keys sorted, `<`, `>`, `&`,
//! U+2028 and U+2029 escaped as Go escapes them) and `N` the checkpoint
//! manager's checksum of `D`: FNV-1a (32 bits) over `dump.ForHash(D)`,
//! which for a string is `(string)` followed by the string itself.
//! Checked against upstream's own code on the table
//! `hack/gen-allocation-checkpoints` makes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::PodResourceInfo;

/// The entries, by pod UID.
pub type Entries = BTreeMap<String, PodResourceInfo>;

pub use crate::checkpoint::CheckpointError;

#[derive(Serialize, Deserialize)]
struct File {
    data: String,
    checksum: u64,
}

#[derive(Deserialize, Default)]
struct Info {
    #[serde(default)]
    entries: Entries,
}

#[derive(Serialize)]
struct InfoRef<'a> {
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    entries: &'a Entries,
}

use rkube_util::go_json::marshal;

/// The checkpoint manager's checksum of `data`.
pub fn checksum(data: &str) -> u64 {
    u64::from(rkube_util::fast_hash::fnv1a_32(&[
        b"(string)",
        data.as_bytes(),
    ]))
}

/// The file's bytes for `entries`, and their checksum.
pub fn encode(entries: &Entries) -> (Vec<u8>, u64) {
    let data = marshal(&InfoRef { entries });
    let checksum = checksum(&data);
    (marshal(&File { data, checksum }).into_bytes(), checksum)
}

/// The entries of a file's bytes, and its checksum, refusing a file whose
/// checksum does not match.
pub fn decode(bytes: &[u8]) -> Result<(Entries, u64), CheckpointError> {
    let file: File =
        serde_json::from_slice(bytes).map_err(|e| CheckpointError::Malformed(e.to_string()))?;
    let actual = checksum(&file.data);
    if actual != file.checksum {
        return Err(CheckpointError::Corrupt {
            expected: file.checksum,
            actual,
        });
    }
    let info: Info = serde_json::from_str(&file.data)
        .map_err(|e| CheckpointError::Malformed(format!("data: {e}")))?;
    Ok((info.entries, file.checksum))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;

    #[test]
    fn writes_and_reads_as_upstream_on_its_table() {
        let table = include_str!("testdata/checkpoints.jsonl");
        let mut n = 0;
        for line in table.lines().filter(|l| !l.trim().is_empty()) {
            let row: serde_json::Value = serde_json::from_str(line).unwrap();
            let pods: Vec<Pod> = serde_json::from_value(row["pods"].clone()).unwrap();
            let upstream = row["checkpoint"].as_str().unwrap();
            let entries: Entries = pods
                .iter()
                .map(|p| {
                    (
                        p.metadata.uid.clone().unwrap(),
                        super::super::info_for_pod(p),
                    )
                })
                .collect();
            let (bytes, _) = encode(&entries);
            assert_eq!(
                String::from_utf8(bytes).unwrap(),
                upstream,
                "{}",
                row["pods"]
            );
            let (back, _) = decode(upstream.as_bytes()).unwrap();
            assert_eq!(back, entries, "{}", row["pods"]);
            n += 1;
        }
        assert!(n >= 10, "{n} lists");
    }

    #[test]
    fn go_escapes_and_refuses_what_is_not_a_checkpoint() {
        let mut e = Entries::new();
        let info = PodResourceInfo {
            containers: Some([("a<b>&\u{2028}".to_string(), Default::default())].into()),
            ..Default::default()
        };
        e.insert("u".into(), info);
        let (bytes, sum) = encode(&e);
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(text.contains(r"a\\u003cb\\u003e\\u0026\\u2028"), "{text}");
        assert_eq!(decode(&bytes).unwrap(), (e, sum));
        // A changed byte in the data: the checksum refuses it.
        let tampered = text.replace("a\\\\u003cb", "a\\\\u003cc");
        assert!(matches!(
            decode(tampered.as_bytes()),
            Err(CheckpointError::Corrupt { .. })
        ));
        for bad in ["", "{}", "[1]", "{\"data\":\"x\",\"checksum\":1}", "\u{0}"] {
            assert!(decode(bad.as_bytes()).is_err(), "{bad:?}");
        }
        // The data must decode too, even with a matching checksum.
        let data = "not json";
        let f = format!("{{\"data\":\"{data}\",\"checksum\":{}}}", checksum(data));
        assert!(matches!(
            decode(f.as_bytes()),
            Err(CheckpointError::Malformed(_))
        ));
        // Empty: upstream writes `{}` as its data.
        let (bytes, _) = encode(&Entries::new());
        assert!(String::from_utf8(bytes)
            .unwrap()
            .starts_with("{\"data\":\"{}\""));
    }
}
