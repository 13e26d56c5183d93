//! Names as the API server's `generateName` and the controllers derive
//! them: deterministic here (seeded), so a cluster file expands the same
//! way every time.

const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

pub(crate) fn fnv32a(data: &[u8]) -> u32 {
    rkube_util::fast_hash::fnv1a_32(&[data])
}

/// Upstream's `SafeEncodeString` of a number: digits mapped onto consonants.
pub(crate) fn safe_encode(s: &str) -> String {
    s.bytes()
        .map(|b| ALPHANUMS[b as usize % ALPHANUMS.len()] as char)
        .collect()
}

/// The `i`th name `generateName: "<prefix>-"` would give, deterministic
/// for a seed (the controller's uid): `<prefix>-` and 5 characters.
pub fn generated_name(prefix: &str, seed: &str, i: usize) -> String {
    format!("{prefix}-{}", suffix(seed, i))
}

/// A deterministic 5-character suffix, as generateName would add.
fn suffix(seed: &str, i: usize) -> String {
    let h = fnv32a(format!("{seed}/{i}").as_bytes()) as usize;
    (0..5)
        .map(|k| ALPHANUMS[(h >> (k * 5)) % ALPHANUMS.len()] as char)
        .collect()
}
