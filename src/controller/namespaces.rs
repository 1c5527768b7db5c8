//! Which namespaces services are imported into (issue 31): never a denied
//! one (`--deny-namespaces`, `kube-*` by default, and always the
//! controller's own), and, in the opt-in mode, only namespaces whose labels
//! match `--import-namespace-selector` (as Cilium's global services are
//! opted into).

/// Why an export is not imported here (the reason of its Event and of
/// `peer_objects_rejected_total`).
pub(super) mod reason {
    /// The namespace is denied.
    pub(crate) const NAMESPACE_DENIED: &str = "NamespaceDenied";
    /// The namespace does not match `--import-namespace-selector`.
    pub(crate) const NAMESPACE_NOT_SELECTED: &str = "NamespaceNotSelected";
}

/// Namespaces that are never imported into or exported from.
#[derive(Debug, Clone)]
pub(super) struct NamespaceFilter {
    patterns: Vec<String>,
}

impl NamespaceFilter {
    /// Patterns are names, or prefixes ending in `*` (`kube-*`).
    pub(super) fn new(patterns: impl IntoIterator<Item = String>) -> Self {
        Self {
            patterns: patterns.into_iter().filter(|p| !p.is_empty()).collect(),
        }
    }

    /// Whether `namespace` is denied.
    pub(super) fn denies(&self, namespace: &str) -> bool {
        self.patterns
            .iter()
            .any(|pattern| match pattern.strip_suffix('*') {
                Some(prefix) => namespace.starts_with(prefix),
                None => namespace == pattern,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_are_names_or_prefixes() {
        let deny = NamespaceFilter::new(["kube-*".to_owned(), "secret".to_owned()]);
        assert!(deny.denies("kube-system"));
        assert!(deny.denies("secret"));
        assert!(!deny.denies("secrets"));
        assert!(!NamespaceFilter::new([String::new()]).denies("demo"));
    }
}
