//! Kubernetes label selectors (`env=prod,team in (a,b),!legacy`), parsed
//! once and evaluated here: `--import-namespace-selector` on namespaces,
//! `--peer-selector` on peer Secrets, and the labels `peer add` gives a
//! peer Secret so that the selector picks it.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

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
                "no requirement (an empty selector would select everything)".into(),
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

    /// The fewest labels that make a new object match: each `key=value`
    /// and `key in (value, ...)` (its first value) as given, each bare
    /// `key` as `key=true`; the negative requirements hold without a label.
    /// `None` when no labels can (`a=x,a=y`, `a,!a`).
    pub fn labels_that_match(&self) -> Option<BTreeMap<String, String>> {
        let mut labels = BTreeMap::new();
        for requirement in &self.requirements {
            let (key, value) = match requirement {
                Requirement::Equals(key, value) => (key, value.as_str()),
                Requirement::In(key, values) => (key, values.first()?.as_str()),
                Requirement::Exists(key) => (key, "true"),
                Requirement::NotEquals(..)
                | Requirement::NotIn(..)
                | Requirement::DoesNotExist(_) => {
                    continue;
                }
            };
            labels
                .entry(key.clone())
                .or_insert_with(|| value.to_owned());
        }
        self.matches(&labels).then_some(labels)
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
    fn the_labels_that_match_a_selector_are_built_from_its_positive_terms() {
        for (selector, expected) in [
            (
                "clusterset-dns.io/peer=true",
                Some(&[("clusterset-dns.io/peer", "true")][..]),
            ),
            ("team in (a,b),!legacy,env!=dev", Some(&[("team", "a")][..])),
            ("peer", Some(&[("peer", "true")][..])),
            ("a=x,b==y", Some(&[("a", "x"), ("b", "y")][..])),
            ("a=x,a=y", None),
            ("a,!a", None),
            ("a notin (true),a", None),
        ] {
            let parsed: LabelSelector = selector.parse().unwrap();
            let built = parsed.labels_that_match();
            assert_eq!(built, expected.map(labels), "{selector}");
            if let Some(built) = built {
                assert!(parsed.matches(&built), "{selector}");
            }
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
