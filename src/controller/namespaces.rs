//! Which namespaces services are imported into (issue 31): never a denied
//! one (`--deny-namespaces`, `kube-*` by default, and always the
//! controller's own), and, in the opt-in mode, only namespaces whose labels
//! match `--import-namespace-selector` (as Cilium's global services are
//! opted into).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// Why an export is not imported here (the reason of its Event and of
/// `peer_objects_rejected_total`).
pub mod reason {
    /// The namespace is denied.
    pub const NAMESPACE_DENIED: &str = "NamespaceDenied";
    /// The namespace does not match `--import-namespace-selector`.
    pub const NAMESPACE_NOT_SELECTED: &str = "NamespaceNotSelected";
}

/// Namespaces that are never imported into or exported from.
#[derive(Debug, Clone)]
pub struct NamespaceFilter {
    patterns: Vec<String>,
}

impl NamespaceFilter {
    /// Patterns are names, or prefixes ending in `*` (`kube-*`).
    pub fn new(patterns: impl IntoIterator<Item = String>) -> Self {
        Self {
            patterns: patterns.into_iter().filter(|p| !p.is_empty()).collect(),
        }
    }

    /// Whether `namespace` is denied.
    pub fn denies(&self, namespace: &str) -> bool {
        self.patterns
            .iter()
            .any(|pattern| match pattern.strip_suffix('*') {
                Some(prefix) => namespace.starts_with(prefix),
                None => namespace == pattern,
            })
    }
}

/// A Kubernetes label selector (`env=prod,team in (a,b),!legacy`): the
/// equality and set-based requirements, all of which must hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
    text: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// Why a selector does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("label selector {text:?}: {why}")]
pub struct SelectorError {
    text: String,
    why: String,
}

impl FromStr for LabelSelector {
    type Err = SelectorError;

    fn from_str(text: &str) -> Result<Self, SelectorError> {
        let error = |why: String| SelectorError {
            text: text.to_owned(),
            why,
        };
        let mut requirements = Vec::new();
        for part in split_top_level(text).map_err(error)? {
            requirements.push(Requirement::parse(part).map_err(error)?);
        }
        if requirements.is_empty() {
            return Err(error(
                "no requirement (an empty selector would select every namespace)".into(),
            ));
        }
        Ok(Self {
            requirements,
            text: text.trim().to_owned(),
        })
    }
}

impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl LabelSelector {
    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }
}

/// The comma-separated requirements, commas inside `( )` kept.
fn split_top_level(text: &str) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.checked_sub(1).ok_or("unbalanced ')'")?,
            ',' if depth == 0 => {
                parts.push(text[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unbalanced '('".into());
    }
    parts.push(text[start..].trim());
    if parts.len() > 1 && parts.iter().any(|p| p.is_empty()) {
        return Err("an empty requirement between commas".into());
    }
    Ok(parts.into_iter().filter(|p| !p.is_empty()).collect())
}

impl Requirement {
    fn parse(part: &str) -> Result<Self, String> {
        let key = |k: &str| -> Result<String, String> {
            let k = k.trim();
            let valid = !k.is_empty()
                && k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c));
            if valid {
                Ok(k.to_owned())
            } else {
                Err(format!("{k:?} is not a label key"))
            }
        };
        let value = |v: &str| -> Result<String, String> {
            let v = v.trim();
            if v.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            {
                Ok(v.to_owned())
            } else {
                Err(format!("{v:?} is not a label value"))
            }
        };
        if let Some(rest) = part.strip_prefix('!') {
            return Ok(Self::DoesNotExist(key(rest)?));
        }
        if let Some((k, v)) = part.split_once("!=") {
            return Ok(Self::NotEquals(key(k)?, value(v)?));
        }
        if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
            return Ok(Self::Equals(key(k)?, value(v)?));
        }
        for (operator, negated) in [(" notin ", true), (" in ", false)] {
            if let Some((k, set)) = part.split_once(operator) {
                let set = set
                    .trim()
                    .strip_prefix('(')
                    .and_then(|s| s.strip_suffix(')'))
                    .ok_or_else(|| format!("{part:?}: the set must be in parentheses"))?;
                let values = set.split(',').map(value).collect::<Result<Vec<_>, _>>()?;
                return Ok(if negated {
                    Self::NotIn(key(k)?, values)
                } else {
                    Self::In(key(k)?, values)
                });
            }
        }
        Ok(Self::Exists(key(part)?))
    }

    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Self::Equals(k, v) => labels.get(k) == Some(v),
            Self::NotEquals(k, v) => labels.get(k) != Some(v),
            Self::In(k, set) => labels.get(k).is_some_and(|v| set.contains(v)),
            Self::NotIn(k, set) => labels.get(k).is_none_or(|v| !set.contains(v)),
            Self::Exists(k) => labels.contains_key(k),
            Self::DoesNotExist(k) => !labels.contains_key(k),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn patterns_are_names_or_prefixes() {
        let deny = NamespaceFilter::new(["kube-*".to_owned(), "secret".to_owned()]);
        assert!(deny.denies("kube-system"));
        assert!(deny.denies("secret"));
        assert!(!deny.denies("secrets"));
        assert!(!NamespaceFilter::new([String::new()]).denies("demo"));
    }

    #[test]
    fn selectors_match_as_kubernetes_evaluates_them() {
        let prod = labels(&[("env", "prod"), ("team", "a"), ("mcs.example/opt-in", "")]);
        let dev = labels(&[("env", "dev"), ("legacy", "true")]);
        for (selector, on_prod, on_dev) in [
            ("env=prod", true, false),
            ("env==prod", true, false),
            ("env!=prod", false, true),
            ("team in (a, b)", true, false),
            ("team notin (a)", false, true),
            ("mcs.example/opt-in", true, false),
            ("!legacy", true, false),
            ("env in (prod,dev),!legacy", true, false),
            ("env, team", true, false),
        ] {
            let parsed: LabelSelector = selector.parse().unwrap();
            assert_eq!(parsed.matches(&prod), on_prod, "{selector} on prod");
            assert_eq!(parsed.matches(&dev), on_dev, "{selector} on dev");
        }
    }

    #[test]
    fn a_selector_that_does_not_parse_is_refused_by_name() {
        for bad in [
            "",
            " ",
            "env in prod",
            "team in (a",
            "a)",
            "env=pr od",
            "=x",
            "a,,b",
        ] {
            let error = bad.parse::<LabelSelector>().unwrap_err();
            assert!(
                error.to_string().starts_with("label selector"),
                "{bad}: {error}"
            );
        }
    }
}
