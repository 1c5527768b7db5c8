//! `clusterset-dns crds install`: server-side applies the CRDs of
//! [`crds::all`](super::crds::all), but never downgrades an mcs-api CRD
//! bundle already in the cluster.
//!
//! The MCS CRDs carry the mcs-api release they match
//! (`multicluster.x-k8s.io/release-version`, with
//! `multicluster.x-k8s.io/crd-schema-revision` within a release) as labels;
//! upstream tooling has used annotations too, so an annotation is read when
//! the label is missing. A CRD whose copy in the cluster is newer, or whose
//! release cannot be compared (not `vMAJOR.MINOR.PATCH`), is left alone and
//! reported. A copy without either key is treated as older and replaced.
//! `ClusterProperty` carries no release: it is always applied.
//!
//! Owns the comparison and the API calls; the command line is in `main.rs`.

use std::cmp::Ordering;
use std::fmt;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::wait::{await_condition, conditions};

use super::well_known::{LABEL_CRD_SCHEMA_REVISION, LABEL_RELEASE_VERSION};

/// Field manager of the server-side applies.
pub const FIELD_MANAGER: &str = "clusterset-dns-crds";

/// How long an applied CRD may take to become Established.
const ESTABLISH_TIMEOUT: Duration = Duration::from_secs(30);

/// What happened to one CRD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// It was not in the cluster and was created.
    Created,
    /// It was in the cluster (older or equal) and the apply changed it.
    Updated,
    /// The cluster's copy already matched: the apply changed nothing
    /// (same `resourceVersion`).
    Unchanged,
    /// The cluster's copy is from a newer mcs-api release (or schema
    /// revision), or from one this binary cannot compare, and was left as
    /// it is.
    KeptNewer {
        /// The cluster's `release-version` (and schema revision, if any).
        installed: String,
        /// Ours, the same way.
        ours: String,
    },
}

/// The result for one CRD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The CRD's name (`serviceimports.multicluster.x-k8s.io`).
    pub name: String,
    /// What was done.
    pub action: Action,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = &self.name;
        match &self.action {
            Action::Created => write!(f, "{name}: created"),
            Action::Updated => write!(f, "{name}: updated"),
            Action::Unchanged => write!(f, "{name}: unchanged"),
            Action::KeptNewer { installed, ours } => write!(
                f,
                "{name}: kept the cluster's {installed}, which is newer than ours ({ours}) \
                 or cannot be compared with it; not downgraded"
            ),
        }
    }
}

/// Why an install failed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// An API call failed.
    #[error("{action} CRD {name}")]
    Api {
        /// What was being done (`reading`, `applying`).
        action: &'static str,
        /// The CRD.
        name: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// An applied CRD did not become Established in time.
    #[error("CRD {name} was applied but not Established within {ESTABLISH_TIMEOUT:?}")]
    NotEstablished {
        /// The CRD.
        name: String,
    },
}

/// Applies every CRD of [`crds::all`](super::crds::all) that the cluster
/// does not hold in a newer release, waits until each applied one is
/// Established, and says what happened to each, in CRD name order.
pub async fn install(client: &Client) -> Result<Vec<Outcome>, InstallError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut outcomes = Vec::new();
    for crd in super::crds::all() {
        let name = crd
            .metadata
            .name
            .clone()
            .expect("every generated CRD has a name");
        let existing = api
            .get_opt(&name)
            .await
            .map_err(|source| InstallError::Api {
                action: "reading",
                name: name.clone(),
                source,
            })?;
        if let Some(existing) = &existing
            && let Some(ours) = Release::of(&crd)
            && let Some(installed) = Release::of(existing)
            && !matches!(
                installed.compare(&ours),
                Some(Ordering::Less | Ordering::Equal)
            )
        {
            outcomes.push(Outcome {
                name,
                action: Action::KeptNewer {
                    installed: installed.to_string(),
                    ours: ours.to_string(),
                },
            });
            continue;
        }
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let applied = api
            .patch(&name, &params, &Patch::Apply(&crd))
            .await
            .map_err(|source| InstallError::Api {
                action: "applying",
                name: name.clone(),
                source,
            })?;
        let action = match existing {
            None => Action::Created,
            Some(before)
                if before.metadata.resource_version == applied.metadata.resource_version =>
            {
                Action::Unchanged
            }
            Some(_) => Action::Updated,
        };
        tokio::time::timeout(
            ESTABLISH_TIMEOUT,
            await_condition(api.clone(), &name, conditions::is_crd_established()),
        )
        .await
        .map_err(|_| InstallError::NotEstablished { name: name.clone() })?
        .map_err(|_| InstallError::NotEstablished { name: name.clone() })?;
        outcomes.push(Outcome { name, action });
    }
    Ok(outcomes)
}

/// The mcs-api release a CRD says it matches: the raw `release-version`
/// and `crd-schema-revision` values, from labels or else annotations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    /// `release-version`, e.g. `v0.5.0`.
    pub version: String,
    /// `crd-schema-revision`, e.g. `0`; absent counts as 0.
    pub revision: Option<String>,
}

impl Release {
    /// The release of `crd`, or `None` when it names none.
    pub fn of(crd: &CustomResourceDefinition) -> Option<Self> {
        let meta = &crd.metadata;
        let read = |key: &str| {
            meta.labels
                .as_ref()
                .and_then(|l| l.get(key))
                .or_else(|| meta.annotations.as_ref().and_then(|a| a.get(key)))
                .map(|v| v.trim().to_owned())
        };
        Some(Self {
            version: read(LABEL_RELEASE_VERSION)?,
            revision: read(LABEL_CRD_SCHEMA_REVISION),
        })
    }

    /// How `self` compares with `other`: by semantic version, then by
    /// schema revision. `None` when either cannot be parsed.
    pub fn compare(&self, other: &Self) -> Option<Ordering> {
        let revision = |r: &Option<String>| match r {
            None => Some(0u64),
            Some(r) => r.parse().ok(),
        };
        let ordering = compare_versions(&self.version, &other.version)?;
        Some(ordering.then(revision(&self.revision)?.cmp(&revision(&other.revision)?)))
    }
}

impl fmt::Display for Release {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.revision {
            Some(revision) => write!(f, "{} (schema revision {revision})", self.version),
            None => write!(f, "{}", self.version),
        }
    }
}

/// Compares `vMAJOR.MINOR.PATCH[-PRE]` versions (the `v` optional); a
/// pre-release sorts before its release, pre-releases by their text.
/// `None` when either is not such a version.
pub fn compare_versions(a: &str, b: &str) -> Option<Ordering> {
    fn parse(version: &str) -> Option<([u64; 3], Option<&str>)> {
        let version = version.strip_prefix('v').unwrap_or(version);
        let (core, pre) = match version.split_once('-') {
            Some((core, pre)) => (core, Some(pre)),
            None => (version, None),
        };
        let mut parts = core.split('.').map(|p| p.parse::<u64>().ok());
        let numbers = [parts.next()??, parts.next()??, parts.next()??];
        parts.next().is_none().then_some((numbers, pre))
    }
    let (a_core, a_pre) = parse(a)?;
    let (b_core, b_pre) = parse(b)?;
    Some(a_core.cmp(&b_core).then(match (a_pre, b_pre) {
        (None, None) => Ordering::Equal,
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (Some(a), Some(b)) => a.cmp(b),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn release(version: &str, revision: Option<&str>) -> Release {
        Release {
            version: version.into(),
            revision: revision.map(Into::into),
        }
    }

    #[test]
    fn versions_compare_numerically_with_pre_releases_first() {
        use Ordering::*;
        for (a, b, expected) in [
            ("v0.5.0", "v0.5.0", Some(Equal)),
            ("v0.10.0", "v0.9.9", Some(Greater)),
            ("0.5.1", "v0.5.0", Some(Greater)),
            ("v1.0.0-rc.1", "v1.0.0", Some(Less)),
            ("v1.0.0-rc.2", "v1.0.0-rc.1", Some(Greater)),
            ("v0.4.0", "v0.5.0", Some(Less)),
            ("main", "v0.5.0", None),
            ("v0.5", "v0.5.0", None),
            ("v0.5.0.1", "v0.5.0", None),
        ] {
            assert_eq!(compare_versions(a, b), expected, "{a} vs {b}");
        }
    }

    #[test]
    fn schema_revision_breaks_ties_and_defaults_to_zero() {
        let ours = release("v0.5.0", Some("0"));
        assert_eq!(
            release("v0.5.0", Some("1")).compare(&ours),
            Some(Ordering::Greater)
        );
        assert_eq!(
            release("v0.5.0", None).compare(&ours),
            Some(Ordering::Equal)
        );
        assert_eq!(
            release("v0.6.0", Some("0")).compare(&release("v0.5.0", Some("3"))),
            Some(Ordering::Greater)
        );
        assert_eq!(release("v0.5.0", Some("x")).compare(&ours), None);
    }

    #[test]
    fn release_is_read_from_labels_then_annotations() {
        let mut crd = super::super::crds::service_import();
        assert_eq!(Release::of(&crd), Some(release("v0.5.0", Some("0"))));
        let labels = crd.metadata.labels.take().unwrap();
        assert_eq!(Release::of(&crd), None);
        crd.metadata.annotations = Some(labels);
        assert_eq!(Release::of(&crd), Some(release("v0.5.0", Some("0"))));
        assert_eq!(Release::of(&super::super::crds::cluster_property()), None);
    }
}
