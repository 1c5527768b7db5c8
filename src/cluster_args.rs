//! The options that every subcommand talking to a cluster spells the same
//! way (`serve`, `controller`, `crds install`, `peer add|list|remove`):
//! where the kubeconfig is, which namespace is the controller's, and which
//! Secrets are peers. Each is written once here, with its environment
//! variable, default and fallback order; `tests/cli.rs` checks every
//! `--help` against the same table.

use std::path::{Path, PathBuf};

use clap::Args;
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::error::Chain;
use crate::label_selector::LabelSelector;

/// Environment variable of `--kubeconfig`.
pub const KUBECONFIG_ENV: &str = "CLUSTERSET_DNS_KUBECONFIG";
/// Help of `--kubeconfig`, the fallback order [`client_config`] follows.
pub const KUBECONFIG_HELP: &str =
    "kubeconfig file [default: $KUBECONFIG, else ~/.kube/config, else the pod's service account]";

/// Environment variable of `--namespace`.
pub const NAMESPACE_ENV: &str = "CLUSTERSET_DNS_NAMESPACE";
/// The downward-API variable the shipped Deployments set to the pod's
/// namespace: `--namespace`'s default when set.
pub const POD_NAMESPACE_ENV: &str = "POD_NAMESPACE";
/// The namespace the shipped manifests install the controller into.
pub const DEFAULT_NAMESPACE: &str = "clusterset-dns";
/// Help of `--namespace`.
pub const NAMESPACE_HELP: &str = "The controller's namespace: its peer Secrets, Leases and publication [default: $POD_NAMESPACE, else clusterset-dns]";

/// Environment variable of `--peer-selector`.
pub const PEER_SELECTOR_ENV: &str = "CLUSTERSET_DNS_PEER_SELECTOR";
/// Help of `--peer-selector`.
pub const PEER_SELECTOR_HELP: &str = "Label selector of the Secrets in --namespace that name peers (each holds a kubeconfig under data.kubeconfig)";

/// `--kubeconfig`: which cluster to talk to.
#[derive(Args, Debug, Clone, Default)]
pub struct KubeconfigArgs {
    /// The kubeconfig file, when not found by the fallback order.
    #[arg(long, env = KUBECONFIG_ENV, help = KUBECONFIG_HELP)]
    pub kubeconfig: Option<PathBuf>,
}

/// `--namespace`: the controller's namespace.
#[derive(Args, Debug, Clone)]
pub struct NamespaceArgs {
    /// The namespace.
    #[arg(long, env = NAMESPACE_ENV, help = NAMESPACE_HELP, default_value_t = default_namespace(), hide_default_value = true)]
    pub namespace: String,
}

/// `--peer-selector`: which Secrets of the namespace are peers.
#[derive(Args, Debug, Clone)]
pub struct PeerSelectorArgs {
    /// The selector.
    #[arg(long, env = PEER_SELECTOR_ENV, help = PEER_SELECTOR_HELP, default_value = crate::peering::PEER_SELECTOR)]
    pub peer_selector: LabelSelector,
}

/// `--namespace`'s default: `$POD_NAMESPACE` (inside the shipped
/// Deployments), else [`DEFAULT_NAMESPACE`].
pub fn default_namespace() -> String {
    std::env::var(POD_NAMESPACE_ENV)
        .ok()
        .filter(|namespace| !namespace.is_empty())
        .unwrap_or_else(|| DEFAULT_NAMESPACE.to_owned())
}

/// A kubeconfig that could not be turned into a client configuration.
#[derive(Debug, thiserror::Error)]
#[error("{origin}: {why}")]
pub struct ClientConfigError {
    /// Where the configuration was looked for: the file, or "the
    /// environment".
    pub origin: String,
    /// Why it failed, with its causes.
    pub why: String,
}

/// Reads the kubeconfig file `path`, else `$KUBECONFIG`, else
/// `~/.kube/config`.
pub fn read_kubeconfig(path: Option<&Path>) -> Result<Kubeconfig, ClientConfigError> {
    match path {
        Some(path) => Kubeconfig::read_from(path).map_err(|e| ClientConfigError {
            origin: path.display().to_string(),
            why: Chain(&e).to_string(),
        }),
        None => Kubeconfig::read().map_err(|e| ClientConfigError {
            origin: "$KUBECONFIG or ~/.kube/config".into(),
            why: Chain(&e).to_string(),
        }),
    }
}

/// The client configuration of `--kubeconfig` in the order
/// [`KUBECONFIG_HELP`] gives: the file `path`, else `$KUBECONFIG`, else
/// `~/.kube/config`, else the pod's service account; `context` picks a
/// context other than the current one. Also returns where it came from,
/// for messages.
pub async fn client_config(
    path: Option<&Path>,
    context: Option<&str>,
) -> Result<(kube::Config, String), ClientConfigError> {
    if path.is_none() && context.is_none() {
        return kube::Config::infer()
            .await
            .map(|config| (config, "the environment".to_owned()))
            .map_err(|e| ClientConfigError {
                origin: "the environment ($KUBECONFIG, ~/.kube/config, the pod's service account)"
                    .into(),
                why: Chain(&e).to_string(),
            });
    }
    let kubeconfig = read_kubeconfig(path)?;
    let origin = path.map_or_else(
        || "$KUBECONFIG or ~/.kube/config".to_owned(),
        |p| p.display().to_string(),
    );
    let options = KubeConfigOptions {
        context: context.map(str::to_owned),
        ..KubeConfigOptions::default()
    };
    kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .map(|config| (config, origin.clone()))
        .map_err(|e| ClientConfigError {
            origin,
            why: Chain(&e).to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_kubeconfig_file_is_named_in_the_error() {
        let error = read_kubeconfig(Some(Path::new("/nonexistent/kubeconfig"))).unwrap_err();
        assert_eq!(error.origin, "/nonexistent/kubeconfig");
        assert!(!error.why.is_empty());
    }

    #[test]
    fn the_default_peer_selector_parses() {
        let parsed: LabelSelector = crate::peering::PEER_SELECTOR.parse().unwrap();
        assert_eq!(parsed.to_string(), crate::peering::PEER_SELECTOR);
    }
}
