//! Kubeconfigs: which cluster a context names (the admin kubeconfigs of
//! `clusterset-dns peer`, and a peer Secret's), and a peer Secret's
//! kubeconfig read, checked and turned into a client, as the controller
//! connects to the peer.

use std::path::PathBuf;

use data_encoding::BASE64;
use kube::Client;
use kube::config::{AuthInfo, Cluster, KubeConfigOptions, Kubeconfig};

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
    /// Not a kubeconfig in YAML: where the parser stopped, never the text
    /// around it nor the parser's message, which may quote the Secret
    /// ([`parse_error`]).
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
    /// A user or cluster entry (any, not only the current context's) has
    /// a field that would make the controller run a command, read one of
    /// its own files, or skip, redirect or go without TLS (a `server` that
    /// is not `https://`) ([`read`]): `field` is its path
    /// (`users[0].user.exec`), `why` says so.
    #[error("data.{KUBECONFIG_KEY}: {field}: {why}")]
    NotInline {
        /// The field's path in the kubeconfig.
        field: String,
        /// Why it is refused.
        why: &'static str,
    },
}

/// A field a peer kubeconfig may not have: its name, whether an entry of
/// type `T` has it, and why not.
type Refused<T> = (&'static str, fn(&T) -> bool, &'static str);

/// The fields of a `users[]` entry that a peer kubeconfig may not have,
/// and why: each runs a command or reads one of the controller's files.
const REFUSED_USER_FIELDS: [Refused<AuthInfo>; 5] = [
    (
        "exec",
        |u| u.exec.is_some(),
        "credential plugins are not allowed in a peer kubeconfig",
    ),
    (
        "auth-provider",
        |u| u.auth_provider.is_some(),
        "auth-provider plugins are not allowed in a peer kubeconfig",
    ),
    (
        "tokenFile",
        |u| u.token_file.is_some(),
        "token files are not allowed in a peer kubeconfig (put the token in token)",
    ),
    (
        "client-certificate",
        |u| u.client_certificate.is_some(),
        "certificate files are not allowed in a peer kubeconfig (use client-certificate-data)",
    ),
    (
        "client-key",
        |u| u.client_key.is_some(),
        "key files are not allowed in a peer kubeconfig (use client-key-data)",
    ),
];

/// The fields of a `clusters[]` entry that a peer kubeconfig may not have,
/// and why: a file read, or the credentials sent elsewhere, unchecked or
/// in clear.
const REFUSED_CLUSTER_FIELDS: [Refused<Cluster>; 4] = [
    (
        "certificate-authority",
        |c| c.certificate_authority.is_some(),
        "CA files are not allowed in a peer kubeconfig (use certificate-authority-data)",
    ),
    (
        "proxy-url",
        |c| c.proxy_url.is_some(),
        "proxies are not allowed in a peer kubeconfig",
    ),
    (
        "insecure-skip-tls-verify",
        |c| c.insecure_skip_tls_verify == Some(true),
        "skipping TLS verification is not allowed in a peer kubeconfig (use certificate-authority-data)",
    ),
    (
        "server",
        |c| {
            c.server
                .as_deref()
                .is_some_and(|s| !s.is_empty() && !is_https(s))
        },
        "only https:// servers are allowed in a peer kubeconfig: over anything else the token would travel in clear, and the peer's data could be altered on the way",
    ),
];

/// Whether `server` is an `https://` URL (the scheme is case-insensitive).
/// An empty one is [`KubeconfigError::Context`]'s to name.
fn is_https(server: &str) -> bool {
    server
        .get(..8)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("https://"))
}

/// The first field of `kubeconfig` that a peer Secret may not carry, in
/// any entry, used or not. Whoever may write Secrets in the controller's
/// namespace writes it, and the controller reads it with its own process
/// and files: credentials and CAs inline only (`token`, `username` and
/// `password`, the `*-data` fields, impersonation). The two tables are
/// every field of kube's `AuthInfo` and `Cluster` that runs, reads or
/// redirects something, and a `server` that is not `https://`; the others
/// are data.
fn not_inline(kubeconfig: &Kubeconfig) -> Option<KubeconfigError> {
    let refused =
        |field: String, why: &'static str| Some(KubeconfigError::NotInline { field, why });
    for (i, user) in kubeconfig.auth_infos.iter().enumerate() {
        if let Some(user) = &user.auth_info
            && let Some((field, _, why)) = REFUSED_USER_FIELDS.iter().find(|(_, has, _)| has(user))
        {
            return refused(format!("users[{i}].user.{field}"), why);
        }
    }
    for (i, cluster) in kubeconfig.clusters.iter().enumerate() {
        if let Some(cluster) = &cluster.cluster
            && let Some((field, _, why)) = REFUSED_CLUSTER_FIELDS
                .iter()
                .find(|(_, has, _)| has(cluster))
        {
            return refused(format!("clusters[{i}].cluster.{field}"), why);
        }
    }
    None
}

/// A peer Secret's kubeconfig, read and checked: it parses, it carries
/// its credentials inline only, and its current context names a cluster
/// with a server.
#[derive(Debug, Clone)]
pub struct StoredKubeconfig {
    /// The kubeconfig.
    pub kubeconfig: Kubeconfig,
    /// The cluster its current context names.
    pub cluster: KubeconfigCluster,
}

/// Reads a peer Secret's `data.kubeconfig` (pure: nothing is contacted,
/// no file is read). Refuses a kubeconfig that is not inline
/// ([`KubeconfigError::NotInline`]) before anything else is made of it.
/// Only for peer Secrets: the admin kubeconfigs of `clusterset-dns peer`
/// are the operator's own and may use files and plugins.
pub fn read(data: &[u8]) -> Result<StoredKubeconfig, KubeconfigError> {
    if data.is_empty() {
        return Err(KubeconfigError::Missing);
    }
    let text = std::str::from_utf8(data).map_err(|_| KubeconfigError::NotUtf8)?;
    let kubeconfig = Kubeconfig::from_yaml(text).map_err(parse_error)?;
    if let Some(error) = not_inline(&kubeconfig) {
        return Err(error);
    }
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

/// Why a Secret's text is not a kubeconfig, without a word of the text:
/// the YAML parser's error shows a snippet of the input around the error,
/// and its message may quote a value (`invalid type: string "…"`), so a
/// token on the broken line would reach the Event, the log and `peer
/// list`. Only the line and column are kept.
fn parse_error(error: kube::config::KubeconfigError) -> KubeconfigError {
    use kube::config::KubeconfigError as Kube;
    let what = match &error {
        Kube::Parse(parse) => match parse.location() {
            Some(at) => format!(
                "it does not parse at line {}, column {} (the parser's message is not shown: it may quote the Secret)",
                at.line(),
                at.column()
            ),
            None => {
                "it does not parse (the parser's message is not shown: it may quote the Secret)"
                    .to_owned()
            }
        },
        // The documents of a multi-document kubeconfig that disagree
        // (kind, apiVersion): kube's fixed words, no input.
        other => Chain(other).to_string(),
    };
    KubeconfigError::NotAKubeconfig(what)
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
        // A peer's answers are bounded in size (issue 44, H2).
        let builder = crate::kube_http::builder(config)
            .map_err(|e| KubeconfigError::Client(Chain(&e).to_string()))?;
        Ok(builder
            .with_layer(&super::body_limit::BodyLimitLayer)
            .build())
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

    /// A self-signed CA (P-256, valid to 2126): kube parses the CA of the
    /// current context when it builds a client.
    const REAL_CA: &str = "-----BEGIN CERTIFICATE-----
MIIBmDCCAT+gAwIBAgIUd7E2KjpVKzFy8ZGYIF0qfqVH7SQwCgYIKoZIzj0EAwIw
ITEfMB0GA1UEAwwWY2x1c3RlcnNldC1kbnMtdGVzdC1jYTAgFw0yNjEyMDMxNTU0
NTFaGA8yMTI2MTEwOTE1NTQ1MVowITEfMB0GA1UEAwwWY2x1c3RlcnNldC1kbnMt
dGVzdC1jYTBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABN5jtzrR8glZMS08ZVcD
g3oyv8/uyhDmoJ0CQTPtsl1Da3jyOxMaGmnFpeXquqFrcHBm3GkZqSxFjeWomqDA
h1mjUzBRMB0GA1UdDgQWBBRvOzuxMfmYTDuM2jqNtJOz+9UIGzAfBgNVHSMEGDAW
gBRvOzuxMfmYTDuM2jqNtJOz+9UIGzAPBgNVHRMBAf8EBTADAQH/MAoGCCqGSM49
BAMCA0cAMEQCIFp1APm735ILgPQuh+qmXb4lk98fyfKO4GsDGG/y87TNAiAWEp8B
vXCx3BfiR7toLsC+Y0gOSwNooh1rCczDut1I/w==
-----END CERTIFICATE-----
";

    /// A peer kubeconfig with everything a peer Secret may hold inline, in
    /// a context that is not the current one too.
    fn peer() -> String {
        r#"
    apiVersion: v1
    kind: Config
    clusters:
    - name: a
      cluster:
        server: https://a.example:6443
        certificate-authority-data: CA_DATA
    - name: b
      cluster:
        server: https://127.0.0.1:4443
        certificate-authority-data: CA_DATA
        tls-server-name: b.internal
        insecure-skip-tls-verify: false
        disable-compression: true
    users:
    - name: reader
      user: {token: t}
    - name: other
      user:
        client-certificate-data: Y2VydA==
        client-key-data: a2V5
        username: u
        password: p
        as: someone
        as-uid: "1"
        as-groups: [g]
        as-user-extra: {k: [v]}
    contexts:
    - name: ctx-a
      context: {cluster: a, user: reader}
    - name: ctx-b
      context: {cluster: b, user: other}
    current-context: ctx-a
    "#
        .replace("CA_DATA", &BASE64.encode(REAL_CA.as_bytes()))
    }

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
        let stored = read(peer().as_bytes()).unwrap();
        assert_eq!(stored.cluster.context, "ctx-a");
        assert_eq!(stored.cluster.server, "https://a.example:6443");
        assert_eq!(
            stored.cluster.ca,
            Some(CaSource::Data(REAL_CA.as_bytes().to_vec()))
        );
    }

    #[test]
    fn an_inline_peer_kubeconfig_is_read_whatever_its_current_context() {
        let b = peer().replace("current-context: ctx-a", "current-context: ctx-b");
        let stored = read(b.as_bytes()).unwrap();
        assert_eq!(stored.cluster.server, "https://127.0.0.1:4443");
        assert_eq!(
            stored.cluster.tls_server_name.as_deref(),
            Some("b.internal")
        );
        assert!(!stored.cluster.insecure);
    }

    #[test]
    fn a_peer_kubeconfig_that_runs_reads_or_redirects_is_refused_in_any_entry() {
        // Each edit adds one field, to an entry of the current context or
        // to one no context uses.
        let user0 = "user: {token: t}";
        let user1 = "username: u";
        let cluster0 = "server: https://a.example:6443";
        let cluster1 = "tls-server-name: b.internal";
        let cases: [(&str, &str, &str); 11] = [
            (
                user0,
                "user: {token: t, exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, args: [-c, 'touch /tmp/x']}}",
                "users[0].user.exec: credential plugins are not allowed in a peer kubeconfig",
            ),
            (
                user1,
                "username: u\n        exec: {command: ./plugin}",
                "users[1].user.exec: credential plugins are not allowed in a peer kubeconfig",
            ),
            (
                user1,
                "username: u\n        auth-provider: {name: gcp, config: {cmd-path: /bin/true}}",
                "users[1].user.auth-provider: auth-provider plugins are not allowed in a peer kubeconfig",
            ),
            (
                user0,
                "user: {tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token}",
                "users[0].user.tokenFile: token files are not allowed in a peer kubeconfig (put the token in token)",
            ),
            (
                user1,
                "username: u\n        client-certificate: /etc/cert.pem",
                "users[1].user.client-certificate: certificate files are not allowed in a peer kubeconfig (use client-certificate-data)",
            ),
            (
                user1,
                "username: u\n        client-key: /etc/key.pem",
                "users[1].user.client-key: key files are not allowed in a peer kubeconfig (use client-key-data)",
            ),
            (
                cluster0,
                "server: https://a.example:6443\n        certificate-authority: /etc/ca.pem",
                "clusters[0].cluster.certificate-authority: CA files are not allowed in a peer kubeconfig (use certificate-authority-data)",
            ),
            (
                cluster1,
                "tls-server-name: b.internal\n        proxy-url: http://127.0.0.1:3128",
                "clusters[1].cluster.proxy-url: proxies are not allowed in a peer kubeconfig",
            ),
            (
                "insecure-skip-tls-verify: false",
                "insecure-skip-tls-verify: true",
                "clusters[1].cluster.insecure-skip-tls-verify: skipping TLS verification is not allowed in a peer kubeconfig (use certificate-authority-data)",
            ),
            (cluster0, "server: http://a.example:6443", HTTP_REFUSED_0),
            (
                "server: https://127.0.0.1:4443",
                "server: a.example:6443",
                "clusters[1].cluster.server: only https:// servers are allowed in a peer kubeconfig: over anything else the token would travel in clear, and the peer's data could be altered on the way",
            ),
        ];
        let peer = peer();
        for (from, to, expected) in cases {
            assert!(peer.contains(from), "{from}");
            let edited = peer.replacen(from, to, 1);
            let error = read(edited.as_bytes()).expect_err(expected);
            assert!(
                matches!(error, KubeconfigError::NotInline { .. }),
                "{error:?}"
            );
            assert_eq!(error.to_string(), format!("data.kubeconfig: {expected}"));
        }
    }

    const HTTP_REFUSED_0: &str = "clusters[0].cluster.server: only https:// servers are allowed in a peer kubeconfig: over anything else the token would travel in clear, and the peer's data could be altered on the way";

    /// Security review L1: the token is sent to `server`, so only over TLS.
    #[test]
    fn a_peer_kubeconfig_whose_server_is_not_https_is_refused() {
        let peer = peer();
        for server in [
            "http://a.example:6443",
            "HTTP://a.example",
            "ftp://a.example",
        ] {
            let edited = peer.replace("https://a.example:6443", server);
            let error = read(edited.as_bytes()).expect_err(server);
            assert_eq!(
                error.to_string(),
                format!("data.kubeconfig: {HTTP_REFUSED_0}"),
                "{server}"
            );
        }
        for server in ["HTTPS://a.example:6443", "https://[fd00::1]:6443"] {
            let edited = peer.replace("https://a.example:6443", server);
            assert_eq!(read(edited.as_bytes()).unwrap().cluster.server, server);
        }
    }

    /// Security review L2: a parse error names where, never what.
    #[test]
    fn a_kubeconfig_that_does_not_parse_is_reported_without_its_text() {
        let peer = peer();
        let cases = [
            // A syntax error on the token's line: the parser's snippet
            // would show it.
            ("user: {token: t}", "user: {token: {s3cr3t"),
            // A type error: the parser's message would quote the value.
            ("current-context: ctx-a", "current-context: [s3cr3t]"),
            ("users:\n", "users: s3cr3t\nx:\n"),
        ];
        for (from, to) in cases {
            assert!(peer.contains(from), "{from}");
            let edited = peer.replacen(from, to, 1);
            let error = read(edited.as_bytes()).expect_err(to);
            let text = error.to_string();
            assert!(
                matches!(error, KubeconfigError::NotAKubeconfig(_)),
                "{text}"
            );
            assert!(!text.contains("s3cr3t"), "{text}");
            assert!(!format!("{error:?}").contains("s3cr3t"), "{error:?}");
            assert!(
                text.starts_with("data.kubeconfig is not a kubeconfig: it does not parse at line "),
                "{text}"
            );
        }
        let error = read(b"a: 1\nb: {token: s3cr3t\n").unwrap_err().to_string();
        assert!(error.contains("line 2, column"), "{error}");
    }

    #[test]
    fn the_first_refused_field_is_named_users_before_clusters() {
        let both = peer()
            .replace(
                "insecure-skip-tls-verify: false",
                "insecure-skip-tls-verify: true",
            )
            .replace("user: {token: t}", "user: {tokenFile: /etc/token}");
        assert_eq!(
            read(both.as_bytes()).unwrap_err(),
            KubeconfigError::NotInline {
                field: "users[0].user.tokenFile".into(),
                why: "token files are not allowed in a peer kubeconfig (put the token in token)",
            }
        );
    }

    #[test]
    fn an_admin_kubeconfig_may_use_files_and_skip_tls() {
        // kubeconfig_cluster is also the `peer` CLI's reading of the
        // operator's own kubeconfigs: not restricted.
        let config = kubeconfig(
            &TWO_CONTEXTS.replace("user: {token: t}", "user: {exec: {command: gcloud}}"),
        );
        assert!(kubeconfig_cluster(&config, Some("ctx-b")).unwrap().insecure);
        assert!(matches!(
            read(TWO_CONTEXTS.as_bytes()),
            Err(KubeconfigError::NotInline { .. })
        ));
    }

    #[test]
    fn an_unusable_peer_kubeconfig_says_what_is_wrong() {
        let peer = peer();
        let edited = |from: &str, to: &str| peer.replace(from, to).into_bytes();
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
            // Where the YAML parser stopped follows the prefix.
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
        let (_, server) = client(peer().as_bytes()).await.unwrap();
        assert_eq!(server, "https://a.example:6443");
    }

    #[tokio::test]
    async fn a_refused_kubeconfig_builds_no_client() {
        let exec = peer().replace("user: {token: t}", "user: {exec: {command: /bin/false}}");
        assert!(matches!(
            client(exec.as_bytes()).await,
            Err(KubeconfigError::NotInline { .. })
        ));
    }
}
