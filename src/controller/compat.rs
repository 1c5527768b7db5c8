//! What the controller needs of its cluster's Kubernetes, read from the
//! apiserver before anything is written (docs/compatibility.md).
//!
//! - The oldest Kubernetes it runs on is [`OLDEST_SUPPORTED`]: ServiceCIDRs
//!   (`networking.k8s.io/v1`, which the controller reads for the Service
//!   families) are served from 1.33, and k8s-openapi's `v1_33` is the API
//!   it is compiled against. On an older cluster it does not start its
//!   work: it stays up, not ready, `/ready` says why, and it reads
//!   `/version` again every [`RECHECK`] (an upgraded control plane is
//!   served without a restart; no crash loop).
//! - `trafficDistribution: PreferSameNode` is refused by an apiserver
//!   without the `PreferSameTrafficDistribution` feature (off by default
//!   before 1.34). Whether it is accepted is asked once, with a dry-run
//!   create ([`node_hints`]), so the plans never write what would be
//!   refused: zone hints (`PreferClose`) stand in for it.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Service, ServiceSpec};
use k8s_openapi::apimachinery::pkg::version::Info;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};

/// The oldest Kubernetes minor (`major`, `minor`) the controller runs on.
pub const OLDEST_SUPPORTED: (u32, u32) = (1, 33);

/// How often an unsupported apiserver's `/version` is read again.
pub const RECHECK: Duration = Duration::from_secs(60);

/// The Kubernetes an apiserver serves the API of: its emulated version
/// when it reports one (`--emulated-version`, 1.31 and later), else its
/// own. `None` when the numbers do not parse (a provider's odd
/// `minor`, such as `33+`, parses as 33).
pub fn served_version(info: &Info) -> Option<(u32, u32)> {
    let number = |text: &str| -> Option<u32> {
        let digits: String = text.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    };
    let (major, minor) = match (&info.emulation_major, &info.emulation_minor) {
        (Some(major), Some(minor)) if !major.is_empty() && !minor.is_empty() => (major, minor),
        _ => (&info.major, &info.minor),
    };
    Some((number(major)?, number(minor)?))
}

/// Why the apiserver that reported `info` is too old for the controller,
/// or `None` when it is not (or its version cannot be read: the watches
/// then say what fails).
pub fn unsupported(info: &Info) -> Option<String> {
    let (major, minor) = served_version(info)?;
    if (major, minor) >= OLDEST_SUPPORTED {
        return None;
    }
    let (oldest_major, oldest_minor) = OLDEST_SUPPORTED;
    Some(format!(
        "this cluster serves Kubernetes {major}.{minor} ({}); the controller needs \
         {oldest_major}.{oldest_minor} or later (networking.k8s.io/v1 ServiceCIDRs): \
         upgrade the control plane, or run a release that supports {major}.{minor}",
        info.git_version
    ))
}

/// Reads `/version` until the apiserver serves a supported Kubernetes,
/// telling `blocked` why it does not meanwhile. An apiserver that does
/// not answer is not held against it: the controller starts and its
/// watches report what fails.
pub async fn wait_until_supported(
    client: &Client,
    blocked: &tokio::sync::watch::Sender<Option<String>>,
) {
    loop {
        let why = match client.apiserver_version().await {
            Ok(info) => unsupported(&info),
            Err(error) => {
                tracing::warn!(error = %crate::error::Chain(&error), "cannot read the apiserver's version; starting");
                None
            }
        };
        let Some(why) = why else {
            blocked.send_replace(None);
            return;
        };
        if blocked.borrow().as_deref() != Some(why.as_str()) {
            tracing::error!(reason = %why, "not starting");
        }
        blocked.send_replace(Some(why));
        tokio::time::sleep(RECHECK).await;
    }
}

/// Whether this cluster's apiserver accepts `trafficDistribution:
/// PreferSameNode`, asked with a dry-run create of a headless,
/// selector-less Service in `namespace` (nothing is stored or allocated).
/// Only a refusal that names the field counts as no: any other failure
/// keeps node hints (the writes then show what fails).
pub async fn node_hints(client: &Client, namespace: &str) -> NodeHints {
    let api: Api<Service> = Api::namespaced(client.clone(), namespace);
    let probe = Service {
        metadata: ObjectMeta {
            generate_name: Some("clusterset-dns-probe-".into()),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            traffic_distribution: Some("PreferSameNode".into()),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    };
    let params = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    match api.create(&params, &probe).await {
        Ok(_) => NodeHints::Accepted,
        Err(kube::Error::Api(status)) if refuses_traffic_distribution(&status) => {
            NodeHints::Refused(status.message.clone())
        }
        Err(error) => {
            tracing::warn!(error = %crate::error::Chain(&error), "cannot ask whether the apiserver accepts PreferSameNode; assuming it does");
            NodeHints::Accepted
        }
    }
}

/// Whether the apiserver's node hints (`PreferSameNode`) can be written.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum NodeHints {
    /// `PreferSameNode` and `hints.forNodes` are written as planned.
    #[default]
    Accepted,
    /// The apiserver refused `PreferSameNode` (its message): derived
    /// Services get `PreferClose` instead, and slices zone hints only.
    Refused(String),
}

impl NodeHints {
    /// Whether node hints may be written.
    pub fn accepted(&self) -> bool {
        matches!(self, Self::Accepted)
    }
}

/// A 422 whose causes (or message) name `spec.trafficDistribution`.
fn refuses_traffic_distribution(status: &kube::core::Status) -> bool {
    const FIELD: &str = "spec.trafficDistribution";
    status.code == 422
        && (status
            .details
            .as_ref()
            .is_some_and(|d| d.causes.iter().any(|c| c.field == FIELD))
            || status.message.contains(FIELD))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(major: &str, minor: &str, emulated: Option<(&str, &str)>) -> Info {
        Info {
            major: major.into(),
            minor: minor.into(),
            git_version: format!("v{major}.{minor}.0"),
            emulation_major: emulated.map(|e| e.0.into()),
            emulation_minor: emulated.map(|e| e.1.into()),
            ..Info::default()
        }
    }

    #[test]
    fn the_oldest_supported_and_newer_start_and_older_do_not() {
        assert_eq!(unsupported(&info("1", "33", None)), None);
        assert_eq!(unsupported(&info("1", "37", None)), None);
        assert_eq!(unsupported(&info("1", "33+", None)), None);
        let why = unsupported(&info("1", "32", None)).expect("1.32 is too old");
        assert!(
            why.contains("Kubernetes 1.32") && why.contains("1.33 or later"),
            "{why}"
        );
        assert!(unsupported(&info("1", "27", None)).is_some());
    }

    #[test]
    fn an_emulated_version_is_what_counts() {
        // A 1.33 binary run with --emulated-version=1.32 serves 1.32's API.
        assert!(unsupported(&info("1", "33", Some(("1", "32")))).is_some());
        assert_eq!(unsupported(&info("1", "37", Some(("1", "34")))), None);
        // Empty emulation fields (some providers) fall back to the binary's.
        assert_eq!(unsupported(&info("1", "33", Some(("", "")))), None);
    }

    #[test]
    fn a_version_that_does_not_parse_is_not_refused() {
        assert_eq!(unsupported(&info("", "", None)), None);
        assert_eq!(served_version(&info("x", "33", None)), None);
    }

    #[test]
    fn only_a_refusal_naming_the_field_turns_node_hints_off() {
        let mut status = kube::core::Status::failure(
            "Service \"x\" is invalid: spec.trafficDistribution: Unsupported value: \"PreferSameNode\"",
            "Invalid",
        );
        status.code = 422;
        assert!(refuses_traffic_distribution(&status));
        status.message = "Service \"x\" is invalid: spec.ports: Required value".into();
        assert!(!refuses_traffic_distribution(&status));
        status.code = 403;
        status.message = "spec.trafficDistribution".into();
        assert!(!refuses_traffic_distribution(&status));
    }
}
