//! Upstream's container hash, `io.kubernetes.container.hash`
//! (`kubecontainer.HashContainer` of v1.37): FNV-1a (32 bits) over the
//! hash dump (`dump.ForHash`, spew's `%#v` of a byte slice:
//! `([]uint8)[123 34 …]`) of Go's `json.Marshal` of
//! `{"image": …, "name": …}` — the only two fields a change of which
//! restarts a container. Written in hex, unpadded. Checked against
//! upstream's own function on the table `hack/gen-container-hashes` makes.

use k8s_openapi::api::core::v1::Container;

/// The hash of `c`.
pub fn container_hash(c: &Container) -> u32 {
    let mut json = String::from("{\"image\":");
    super::go_json::string(c.image.as_deref().unwrap_or(""), &mut json);
    json.push_str(",\"name\":");
    super::go_json::string(&c.name, &mut json);
    json.push('}');
    let bytes: Vec<String> = json.bytes().map(|b| b.to_string()).collect();
    let dump = format!("([]uint8)[{}]", bytes.join(" "));
    rkube_util::fast_hash::fnv1a_32(&[dump.as_bytes()])
}

/// [`container_hash`] as the annotation writes it (lowercase hex).
pub fn container_hash_hex(c: &Container) -> String {
    format!("{:x}", container_hash(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_as_upstream_on_its_table() {
        let table = include_str!("testdata/container_hashes.jsonl");
        let mut n = 0;
        for line in table.lines().filter(|l| !l.trim().is_empty()) {
            let row: serde_json::Value = serde_json::from_str(line).unwrap();
            let c: Container = serde_json::from_value(row["container"].clone()).unwrap();
            assert_eq!(
                container_hash_hex(&c),
                row["hash"].as_str().unwrap(),
                "{}",
                row["container"]
            );
            n += 1;
        }
        assert!(n >= 30, "{n} specs");
    }

    #[test]
    fn only_name_and_image_count() {
        let base: Container =
            serde_json::from_value(serde_json::json!({"name": "c", "image": "busybox"})).unwrap();
        let mut other = base.clone();
        other.command = Some(vec!["sh".into()]);
        other.working_dir = Some("/w".into());
        assert_eq!(container_hash(&base), container_hash(&other));
        other.image = Some("busybox:1".into());
        assert_ne!(container_hash(&base), container_hash(&other));
    }
}
