//! A fast hasher for the per-cycle maps keyed by node names, label values
//! and device names (the cluster's own, not untrusted input from outside
//! it): the scheduling framework's and plugins', and DRA's allocator.

/// FNV-1a (32 bits) over `parts` in order, as Go's `hash/fnv` `New32a`
/// computes it: the hash upstream's container hash, checkpoint checksums
/// and controller-generated names use.
pub fn fnv1a_32(parts: &[&[u8]]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in parts.iter().flat_map(|p| p.iter()) {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// A small, fast, non-cryptographic hasher (the multiply-rotate scheme of
/// rustc's `FxHasher`) for maps keyed by short strings hashed once per node
/// in a cycle: the per-cycle topology maps of InterPodAffinity and
/// PodTopologySpread (label values) and the statuses of rejected nodes
/// (node names), where SipHash dominated the lookup.
#[derive(Debug, Default, Clone, Copy)]
pub struct FxHasher {
    hash: u64,
}

const FX_SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(FX_SEED);
    }
}

impl std::hash::Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut buf = [0u8; 8];
            buf[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(buf) ^ ((rest.len() as u64) << 59));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.hash
    }
}

/// `BuildHasher` for [`FxHasher`].
pub type FxBuildHasher = std::hash::BuildHasherDefault<FxHasher>;

/// A `HashMap` hashed with [`FxHasher`].
pub type FastMap<K, V> = std::collections::HashMap<K, V, FxBuildHasher>;

/// A `HashSet` hashed with [`FxHasher`].
pub type FastSet<K> = std::collections::HashSet<K, FxBuildHasher>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_map_finds_strs() {
        let mut m: FastMap<String, i64> = FastMap::default();
        for i in 0..1000 {
            m.insert(format!("scheduler-perf-{i:05}"), i);
        }
        for i in 0..1000 {
            assert_eq!(m.get(format!("scheduler-perf-{i:05}").as_str()), Some(&i));
        }
        assert_eq!(m.get("zone"), None);
    }
}
