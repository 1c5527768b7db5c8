//! The key every part of the house names a service by.

use std::sync::Arc;

/// Identifies one imported service: `<name>.<namespace>`. Both parts are
/// shared strings: the index interns them, so the import, its slices, the
/// zone and the change sets that name one service hold one copy, and a
/// clone costs two reference counts.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServiceRef {
    /// Namespace, lower-case.
    pub namespace: Arc<str>,
    /// ServiceImport name, lower-case.
    pub name: Arc<str>,
}

impl ServiceRef {
    /// Builds a reference, lower-casing both parts (DNS matching is case-insensitive).
    pub fn new(namespace: &str, name: &str) -> Self {
        Self {
            namespace: namespace.to_ascii_lowercase().into(),
            name: name.to_ascii_lowercase().into(),
        }
    }
}

impl std::fmt::Display for ServiceRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}
