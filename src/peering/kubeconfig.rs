//! Kubeconfigs: which cluster a context names (the admin kubeconfigs of
//! `clusterset-dns peer`, and a peer Secret's), and a peer Secret's
//! kubeconfig read, checked and turned into a client, as the controller
//! connects to the peer.

use std::path::PathBuf;

use data_encoding::BASE64;
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};

use super::KUBECONFIG_KEY;
use crate::error::Chain;

/// The cluster a kubeconfig context points at, as far as a peer
/// kubeconfig needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeconfigCluster {
    /// The context used (the chosen one, else `current-context`).
    pub context: String,
    /// `server`.
    pub server: String,
    /// `certificate-authority-data` (decoded PEM) or `certificate-authority`.
    pub ca: Option<CaSource>,
    /// `insecure-skip-tls-verify`.
    pub insecure: bool,
    /// `tls-server-name`, carried into the peer kubeconfig.
    pub tls_server_name: Option<String>,
}

/// Where a kubeconfig keeps its CA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaSource {
    /// Inline PEM (`certificate-authority-data`, decoded).
    Data(Vec<u8>),
    /// A PEM file (`certificate-authority`, made absolute by kube).
    File(PathBuf),
}

/// The cluster of `context` (or the current context) in `kubeconfig`.
pub fn kubeconfig_cluster(
    kubeconfig: &Kubeconfig,
    context: Option<&str>,
) -> Result<KubeconfigCluster, String> {
    let context = match context {
        Some(context) => context.to_owned(),
        None => kubeconfig
            .current_context
            .clone()
            .filter(|c| !c.is_empty())
            .ok_or("no current-context (pass a context)")?,
    };
    let cluster_name = kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == context)
        .and_then(|c| c.context.as_ref())
        .map(|c| c.cluster.clone())
        .ok_or_else(|| format!("no context {context:?}"))?;
    let cluster = kubeconfig
        .clusters
        .iter()
        .find(|c| c.name == cluster_name)
        .and_then(|c| c.cluster.as_ref())
        .ok_or_else(|| {
            format!("context {context:?} names cluster {cluster_name:?}, which is not there")
        })?;
    let server = cluster
        .server
        .clone()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| format!("cluster {cluster_name:?} has no server"))?;
    let ca = match (
        &cluster.certificate_authority_data,
        &cluster.certificate_authority,
    ) {
        (Some(data), _) if !data.trim().is_empty() => {
            let compact: String = data.split_whitespace().collect();
            let pem = BASE64.decode(compact.as_bytes()).map_err(|e| {
                format!("cluster {cluster_name:?}: certificate-authority-data is not base64: {e}")
            })?;
            Some(CaSource::Data(pem))
        }
        (_, Some(file)) if !file.is_empty() => Some(CaSource::File(file.into())),
        _ => None,
    };
    Ok(KubeconfigCluster {
        context,
        server,
        ca,
        insecure: cluster.insecure_skip_tls_verify == Some(true),
        tls_server_name: cluster.tls_server_name.clone(),
    })
}

/// Why a peer Secret's kubeconfig cannot be used. Each message names
/// `data.kubeconfig`, so it reads on its own after `Secret <name>: `.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KubeconfigError {
    /// The Secret has no `data.kubeconfig`, or it is empty.
    #[error("no data.{KUBECONFIG_KEY}")]
    Missing,
    /// The bytes are not UTF-8.
    #[error("data.{KUBECONFIG_KEY} is not UTF-8")]
    NotUtf8,
    /// Not a kubeconfig in YAML.
    #[error("data.{KUBECONFIG_KEY} is not a kubeconfig: {0}")]
    NotAKubeconfig(String),
    /// No `current-context`: the controller has no way to pick a context.
    #[error(
        "data.{KUBECONFIG_KEY} has no current-context (the controller uses the current context)"
    )]
    NoCurrentContext,
    /// The current context names what is not there, or a cluster without
    /// a server.
    #[error("data.{KUBECONFIG_KEY}: {0}")]
    Context(String),
    /// kube refused the configuration (its credentials, its CA…).
    #[error("data.{KUBECONFIG_KEY}: {0}")]
    Config(String),
    /// The client could not be built from it.
    #[error("building a client from data.{KUBECONFIG_KEY}: {0}")]
    Client(String),
}

/// A peer Secret's kubeconfig, read and checked: it parses, and its
/// current context names a cluster with a server.
#[derive(Debug, Clone)]
pub struct StoredKubeconfig {
    /// The kubeconfig.
    pub kubeconfig: Kubeconfig,
    /// The cluster its current context names.
    pub cluster: KubeconfigCluster,
}

/// Reads a peer Secret's `data.kubeconfig` (pure: nothing is contacted).
pub fn read(data: &[u8]) -> Result<StoredKubeconfig, KubeconfigError> {
    if data.is_empty() {
        return Err(KubeconfigError::Missing);
    }
    let text = std::str::from_utf8(data).map_err(|_| KubeconfigError::NotUtf8)?;
    let kubeconfig = Kubeconfig::from_yaml(text)
        .map_err(|e| KubeconfigError::NotAKubeconfig(Chain(&e).to_string()))?;
    let context = kubeconfig
        .current_context
        .clone()
        .filter(|c| !c.is_empty())
        .ok_or(KubeconfigError::NoCurrentContext)?;
    let cluster =
        kubeconfig_cluster(&kubeconfig, Some(&context)).map_err(KubeconfigError::Context)?;
    Ok(StoredKubeconfig {
        kubeconfig,
        cluster,
    })
}

impl StoredKubeconfig {
    /// A client for the current context.
    pub async fn client(self) -> Result<Client, KubeconfigError> {
        let options = KubeConfigOptions {
            context: Some(self.cluster.context),
            ..KubeConfigOptions::default()
        };
        let config = kube::Config::from_custom_kubeconfig(self.kubeconfig, &options)
            .await
            .map_err(|e| KubeconfigError::Config(Chain(&e).to_string()))?;
        Client::try_from(config).map_err(|e| KubeconfigError::Client(Chain(&e).to_string()))
    }
}

/// A client from a peer Secret's `data.kubeconfig`, and the server it
/// names: how the controller reaches a peer.
pub async fn client(data: &[u8]) -> Result<(Client, String), KubeconfigError> {
    let stored = read(data)?;
    let server = stored.cluster.server.clone();
    Ok((stored.client().await?, server))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

    fn kubeconfig(yaml: &str) -> Kubeconfig {
        Kubeconfig::from_yaml(yaml).unwrap()
    }

    const TWO_CONTEXTS: &str = r#"
    apiVersion: v1
    kind: Config
    clusters:
    - name: a
      cluster:
        server: https://a.example:6443
        certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUIKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo=
    - name: b
      cluster:
        server: https://127.0.0.1:4443
        insecure-skip-tls-verify: true
        tls-server-name: b.internal
    users:
    - name: admin
      user: {token: t}
    contexts:
    - name: ctx-a
      context: {cluster: a, user: admin}
    - name: ctx-b
      context: {cluster: b, user: admin}
    current-context: ctx-a
    "#;

    #[test]
    fn the_current_context_names_the_cluster_and_its_inline_ca() {
        let cluster = kubeconfig_cluster(&kubeconfig(TWO_CONTEXTS), None).unwrap();
        assert_eq!(cluster.context, "ctx-a");
        assert_eq!(cluster.server, "https://a.example:6443");
        assert_eq!(cluster.ca, Some(CaSource::Data(CA.as_bytes().to_vec())));
        assert!(!cluster.insecure);
    }

    #[test]
    fn a_chosen_context_wins_and_keeps_insecure_and_server_name() {
        let cluster = kubeconfig_cluster(&kubeconfig(TWO_CONTEXTS), Some("ctx-b")).unwrap();
        assert_eq!(cluster.server, "https://127.0.0.1:4443");
        assert_eq!(cluster.ca, None);
        assert!(cluster.insecure);
        assert_eq!(cluster.tls_server_name.as_deref(), Some("b.internal"));
    }

    #[test]
    fn missing_contexts_and_clusters_are_named() {
        let config = kubeconfig(TWO_CONTEXTS);
        assert_eq!(
            kubeconfig_cluster(&config, Some("nope")).unwrap_err(),
            "no context \"nope\""
        );
        let mut config = config;
        config.clusters.retain(|c| c.name != "a");
        assert!(
            kubeconfig_cluster(&config, None)
                .unwrap_err()
                .contains("names cluster \"a\", which is not there")
        );
        config.current_context = None;
        assert!(
            kubeconfig_cluster(&config, None)
                .unwrap_err()
                .contains("no current-context")
        );
    }

    #[test]
    fn a_ca_file_is_kept_as_a_path() {
        let config = kubeconfig(
            "clusters:\n- name: a\n  cluster: {server: 'https://a:1', certificate-authority: /etc/ca.pem}\ncontexts:\n- name: a\n  context: {cluster: a, user: u}\ncurrent-context: a\n",
        );
        assert_eq!(
            kubeconfig_cluster(&config, None).unwrap().ca,
            Some(CaSource::File("/etc/ca.pem".into()))
        );
    }

    #[test]
    fn a_peer_secrets_kubeconfig_is_read_at_its_current_context() {
        let stored = read(TWO_CONTEXTS.as_bytes()).unwrap();
        assert_eq!(stored.cluster.context, "ctx-a");
        assert_eq!(stored.cluster.server, "https://a.example:6443");
    }

    #[test]
    fn an_unusable_peer_kubeconfig_says_what_is_wrong() {
        let edited = |from: &str, to: &str| TWO_CONTEXTS.replace(from, to).into_bytes();
        let cases: [(&str, Vec<u8>, &str); 7] = [
            ("missing", Vec::new(), "no data.kubeconfig"),
            (
                "binary",
                b"\xff\xfe".to_vec(),
                "data.kubeconfig is not UTF-8",
            ),
            (
                "bad YAML",
                b"clusters: [unterminated".to_vec(),
                "data.kubeconfig is not a kubeconfig: ",
            ),
            (
                "a YAML string",
                b"this is not a kubeconfig".to_vec(),
                "data.kubeconfig is not a kubeconfig: ",
            ),
            (
                "no current context",
                edited("current-context: ctx-a", ""),
                "data.kubeconfig has no current-context (the controller uses the current context)",
            ),
            (
                "a dangling context",
                edited("current-context: ctx-a", "current-context: gone"),
                "data.kubeconfig: no context \"gone\"",
            ),
            (
                "no server",
                edited("server: https://a.example:6443", "server: ''"),
                "data.kubeconfig: cluster \"a\" has no server",
            ),
        ];
        for (what, data, expected) in cases {
            let error = read(&data).expect_err(what).to_string();
            // The YAML parser's own words follow the prefix.
            if expected.ends_with(": ") {
                assert!(error.len() > expected.len(), "{what}: {error}");
                assert!(error.starts_with(expected), "{what}: {error}");
            } else {
                assert_eq!(error, expected, "{what}");
            }
        }
    }

    #[tokio::test]
    async fn a_checked_kubeconfig_builds_a_client_without_contacting_the_server() {
        let insecure = TWO_CONTEXTS.replace("current-context: ctx-a", "current-context: ctx-b");
        let (_, server) = client(insecure.as_bytes()).await.unwrap();
        assert_eq!(server, "https://127.0.0.1:4443");
    }
}
