//! The Kubernetes release rkube follows, read from the repository's
//! `KUBERNETES_VERSION` file (the same file `hack/` builds upstream from).

/// Kubernetes version rkube follows, e.g. `1.37.2`.
pub const KUBERNETES_VERSION: &str = include_str!("../../../KUBERNETES_VERSION").trim_ascii();

#[cfg(test)]
mod tests {
    #[test]
    fn version_is_1_37() {
        assert!(super::KUBERNETES_VERSION.starts_with("1.37."));
    }
}
