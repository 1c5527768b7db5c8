//! The controller: shipped manifests, identity, peers and the process
//! (`clusterset-dns controller`, and `clusterset-dns serve`).

use super::*;

/// The namespace the shipped manifests (`deploy/controller.yaml`,
/// `deploy/peer-reader.yaml`) install into, where peer Secrets and Leases live.
pub(crate) const CONTROLLER_NAMESPACE: &str = clusterset_dns::cluster_args::DEFAULT_NAMESPACE;

/// The controller's ServiceAccount in `deploy/controller.yaml`.
pub(crate) const CONTROLLER_SA: &str = "clusterset-dns-controller";

/// The ServiceAccount of `deploy/peer-reader.yaml`, whose tokens peers use.
pub(crate) const PEER_READER_SA: &str = "clusterset-dns-peer-reader";

/// Label that makes a Secret in [`CONTROLLER_NAMESPACE`] a peer.
pub(crate) const PEER_LABEL: &str = clusterset_dns::peering::PEER_LABEL;

/// Creates or updates the two `about.k8s.io/v1beta1` ClusterProperties the
/// controller reads its identity from: `cluster.clusterset.k8s.io` =
/// `cluster_id` and `clusterset.k8s.io` = `clusterset`.
pub(crate) async fn set_cluster_properties(
    client: &kube::Client,
    cluster_id: &str,
    clusterset: &str,
) {
    use clusterset_dns::api::well_known::{CLUSTER_ID_PROPERTY, CLUSTERSET_PROPERTY};
    use clusterset_dns::api::{ClusterProperty, ClusterPropertySpec};
    use kube::api::{Api, Patch, PatchParams};
    let api: Api<ClusterProperty> = Api::all(client.clone());
    let params = PatchParams::apply(TEST_FIELD_MANAGER).force();
    for (name, value) in [
        (CLUSTER_ID_PROPERTY, cluster_id),
        (CLUSTERSET_PROPERTY, clusterset),
    ] {
        let property = ClusterProperty::new(
            name,
            ClusterPropertySpec {
                value: value.into(),
            },
        );
        api.patch(name, &params, &Patch::Apply(&property))
            .await
            .unwrap_or_else(|e| panic!("setting ClusterProperty {name}={value}: {e}"));
    }
}

/// The apiserver URL in `cluster`'s admin kubeconfig.
pub(crate) fn apiserver_url(cluster: &Cluster) -> String {
    let kubeconfig = kube::config::Kubeconfig::read_from(&cluster.admin_kubeconfig).unwrap();
    kubeconfig.clusters[0]
        .cluster
        .as_ref()
        .and_then(|c| c.server.clone())
        .expect("admin kubeconfig names its server")
}

/// A kubeconfig (YAML text) for ServiceAccount `namespace/service_account`
/// of `cluster`: a `TokenRequest` token valid for `ttl_seconds` (the
/// apiserver refuses less than 600), the apiserver's URL, and its CA inline
/// (`certificate-authority-data`, the CA of the apiserver's self-signed
/// serving certificate), so TLS is verified, unlike the admin kubeconfig.
/// Self-contained: fit for a peer Secret's `data.kubeconfig`. The
/// ServiceAccount must exist (the test apiservers run no ServiceAccount
/// controller, but the shipped manifests declare theirs).
pub(crate) async fn service_account_kubeconfig(
    cluster: &Cluster,
    namespace: &str,
    service_account: &str,
    ttl_seconds: i64,
) -> String {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    use kube::api::{Api, PostParams};
    let client = cluster.admin_client().await;
    let accounts: Api<ServiceAccount> = Api::namespaced(client, namespace);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: Vec::new(),
            expiration_seconds: Some(ttl_seconds),
            ..Default::default()
        },
        ..Default::default()
    };
    let token = accounts
        .create_token_request(service_account, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{}: TokenRequest for {namespace}/{service_account}: {e}",
                cluster.name
            )
        })
        .status
        .expect("TokenRequest answered with a status")
        .token;
    let ca = std::fs::read(write_root_ca(cluster)).unwrap();
    // ByteString serializes as base64, which spares a dependency.
    let ca = serde_json::to_value(k8s_openapi::ByteString(ca)).unwrap();
    let kubeconfig = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{
            "name": cluster.name,
            "cluster": {"server": apiserver_url(cluster), "certificate-authority-data": ca},
        }],
        "users": [{"name": service_account, "user": {"token": token}}],
        "contexts": [{
            "name": cluster.name,
            "context": {"cluster": cluster.name, "user": service_account},
        }],
        "current-context": cluster.name,
    });
    // JSON is YAML; a kubeconfig file may be either.
    serde_json::to_string_pretty(&kubeconfig).unwrap()
}

/// A client from kubeconfig text (as [`service_account_kubeconfig`] returns).
pub(crate) async fn client_from_yaml(kubeconfig_yaml: &str) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(kubeconfig_yaml).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

/// Creates or replaces peer Secret `peer-<peer_id>` in [`CONTROLLER_NAMESPACE`]
/// of the local cluster, built as `peer add` builds it (labelled for the
/// default `--peer-selector`, no annotations): `data.kubeconfig` =
/// `kubeconfig_yaml` (a read-only kubeconfig of the peer, from
/// [`service_account_kubeconfig`] with [`PEER_READER_SA`]). Applying it
/// again with a new kubeconfig is a rotation.
pub(crate) async fn add_peer_secret(
    local_client: &kube::Client,
    peer_id: &str,
    kubeconfig_yaml: &str,
) {
    use clusterset_dns::label_selector::LabelSelector;
    use clusterset_dns::peering::{NewPeerSecret, PEER_SELECTOR};
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::{Api, Patch, PatchParams};
    let name = format!("peer-{peer_id}");
    let selector: LabelSelector = PEER_SELECTOR.parse().unwrap();
    let secret = NewPeerSecret {
        name: &name,
        namespace: CONTROLLER_NAMESPACE,
        labels: selector.labels_that_match().unwrap(),
        kubeconfig: kubeconfig_yaml.as_bytes(),
        ..NewPeerSecret::default()
    }
    .build();
    Api::<Secret>::namespaced(local_client.clone(), CONTROLLER_NAMESPACE)
        .patch(
            &name,
            &PatchParams::apply(TEST_FIELD_MANAGER).force(),
            &Patch::Apply(&secret),
        )
        .await
        .unwrap_or_else(|e| panic!("applying Secret {CONTROLLER_NAMESPACE}/{name}: {e}"));
}

/// Deletes peer Secret `peer-<peer_id>` from [`CONTROLLER_NAMESPACE`];
/// a missing one is fine.
pub(crate) async fn remove_peer_secret(local_client: &kube::Client, peer_id: &str) {
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::{Api, DeleteParams};
    let name = format!("peer-{peer_id}");
    match Api::<Secret>::namespaced(local_client.clone(), CONTROLLER_NAMESPACE)
        .delete(&name, &DeleteParams::default())
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => panic!("deleting Secret {CONTROLLER_NAMESPACE}/{name}: {e}"),
    }
}

/// Installs the controller's prerequisites into `cluster` exactly as shipped:
/// the CRDs, `deploy/controller.yaml` (namespace, local RBAC, Deployment) and
/// `deploy/peer-reader.yaml` (the role peers read this cluster with). Writes
/// `<cluster dir>/controller.kubeconfig`, a one-hour TokenRequest kubeconfig
/// of the `clusterset-dns-controller` ServiceAccount, and returns its path:
/// pass it to [`spawn_controller`] so the controller runs with exactly the
/// shipped local role. ClusterProperties are separate
/// ([`set_cluster_properties`]).
pub(crate) async fn install_controller(cluster: &Cluster) -> PathBuf {
    let client = cluster.admin_client().await;
    install_crds(&client).await;
    apply_file(&client, &deploy_file("controller.yaml")).await;
    apply_file(&client, &deploy_file("peer-reader.yaml")).await;
    let kubeconfig =
        service_account_kubeconfig(cluster, CONTROLLER_NAMESPACE, CONTROLLER_SA, 3600).await;
    let path = cluster.dir.join("controller.kubeconfig");
    std::fs::write(&path, kubeconfig).unwrap();
    path
}

/// A `clusterset-dns controller` process, killed on drop (its log tail is
/// printed then if the test is panicking).
pub(crate) struct ControllerProcess {
    child: Mutex<Child>,
    log: PathBuf,
    admin_port: u16,
    /// The arguments after the binary, for messages.
    pub args: Vec<String>,
}

impl ControllerProcess {
    /// Everything it has written to stdout and stderr so far.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its log file (in the cluster's directory).
    pub(crate) fn log_path(&self) -> &Path {
        &self.log
    }

    /// The loopback port of its admin server (`/ready`, `/health`, `/metrics`).
    pub(crate) fn admin_port(&self) -> u16 {
        self.admin_port
    }

    /// The loopback address of its admin server, for [`support::http_get`]
    /// and [`support::counter`].
    pub(crate) fn admin_addr(&self) -> std::net::SocketAddr {
        (std::net::Ipv4Addr::LOCALHOST, self.admin_port).into()
    }

    /// `http://127.0.0.1:<admin port><path>`.
    pub(crate) fn admin_url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.admin_port)
    }

    /// Its process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.lock().unwrap().id()
    }

    /// Its exit status if it has exited.
    pub(crate) fn exited(&self) -> Option<std::process::ExitStatus> {
        self.child.lock().unwrap().try_wait().ok().flatten()
    }

    /// Panics, with the log, if it has exited.
    pub(crate) fn assert_running(&self) {
        if let Some(status) = self.exited() {
            panic!(
                "clusterset-dns {} exited with {status}; log:\n{}",
                self.args.join(" "),
                self.log()
            );
        }
    }

    /// Waits until `GET /ready` on the admin port answers 200; panics with
    /// the log on timeout or if the process exits.
    pub(crate) fn wait_ready(&self, timeout: Duration) {
        wait_http_ok_while(
            &self.admin_url("/ready"),
            timeout,
            "controller",
            &self.log,
            || self.assert_running(),
        );
    }

    /// Kills it (SIGKILL) and waits for it; also what drop does.
    pub(crate) fn kill(&self) {
        stop(&mut self.child.lock().unwrap());
    }
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        stop(self.child.get_mut().unwrap());
        if std::thread::panicking() {
            eprintln!(
                "---- controller log {} ----\n{}",
                self.log.display(),
                tail(&self.log)
            );
        }
    }
}

/// Starts `clusterset-dns controller --leader-election=false --admin-listen
/// 127.0.0.1:<free port> <extra_args>` for `cluster` with `KUBECONFIG` =
/// `kubeconfig_path` (usually [`install_controller`]'s) and `POD_NAMESPACE`
/// unset (so `--namespace` defaults to `clusterset-dns` unless `extra_args`
/// says otherwise). Output goes to `<cluster dir>/controller-<n>.log`; `n`
/// counts up, so several controllers per cluster keep separate logs. Does not
/// wait: see [`ControllerProcess::wait_ready`]. `--leader-election=false` is
/// left out when `extra_args` sets `--leader-election=…` itself.
pub(crate) fn spawn_controller(
    cluster: &Cluster,
    kubeconfig_path: &Path,
    extra_args: &[&str],
) -> ControllerProcess {
    spawn_controller_binary(
        cluster,
        &clusterset_dns_binary(),
        kubeconfig_path,
        extra_args,
    )
}

/// [`spawn_controller`] with another build of `clusterset-dns` (a
/// previous release, for a mixed-version clusterset).
pub(crate) fn spawn_controller_binary(
    cluster: &Cluster,
    binary: &Path,
    kubeconfig_path: &Path,
    extra_args: &[&str],
) -> ControllerProcess {
    static COUNT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let admin_port = free_port();
    let mut args: Vec<String> = vec!["controller".into()];
    if !extra_args
        .iter()
        .any(|a| a.starts_with("--leader-election"))
    {
        args.push("--leader-election=false".into());
    }
    args.extend(["--admin-listen".into(), format!("127.0.0.1:{admin_port}")]);
    args.extend(extra_args.iter().map(|a| a.to_string()));
    let log = cluster.dir.join(format!("controller-{n}.log"));
    // A profiler to run the controller under (`heaptrack`, `valgrind
    // --tool=massif`…), for finding where memory goes; the pid is then the
    // wrapper's.
    let mut command = match std::env::var_os("CLUSTERSET_DNS_CONTROLLER_WRAPPER") {
        Some(wrapper) => {
            let mut command = Command::new(wrapper);
            command.arg(binary);
            command
        }
        None => Command::new(binary),
    };
    command
        .args(&args)
        .env("KUBECONFIG", kubeconfig_path)
        .env_remove("POD_NAMESPACE");
    let child = support::spawn_logged_command(&mut command, &log, false);
    ControllerProcess {
        child: Mutex::new(child),
        log,
        admin_port,
        args,
    }
}

/// A `clusterset-dns serve` process, killed on drop.
pub(crate) struct Serve {
    child: Child,
    /// Its DNS address (UDP and TCP).
    pub dns: std::net::SocketAddr,
    /// Its admin address (`/ready`, `/metrics`, `/explain`).
    pub admin: std::net::SocketAddr,
    log: PathBuf,
}

impl Drop for Serve {
    fn drop(&mut self) {
        stop(&mut self.child);
        if std::thread::panicking() {
            eprintln!(
                "---- serve log {} ----\n{}",
                self.log.display(),
                tail(&self.log)
            );
        }
    }
}

impl Serve {
    /// `clusterset-dns serve` for `cluster` with `kubeconfig` (the role of
    /// deploy/rbac.yaml), DNS and admin on free loopback ports, log
    /// `<cluster dir>/serve.log`. Does not wait: see [`Serve::wait_ready`].
    pub(crate) fn spawn(cluster: &Cluster, kubeconfig: &Path) -> Self {
        let dns: std::net::SocketAddr = ([127, 0, 0, 1], free_udp_and_tcp_port()).into();
        let admin: std::net::SocketAddr = ([127, 0, 0, 1], free_port()).into();
        let args: Vec<String> = vec![
            "serve".into(),
            "--kubeconfig".into(),
            kubeconfig.display().to_string(),
            "--dns-listen".into(),
            dns.to_string(),
            "--admin-listen".into(),
            admin.to_string(),
            "--udp-workers".into(),
            "1".into(),
        ];
        let log = cluster.dir.join("serve.log");
        let child = spawn(&clusterset_dns_binary(), &args, &log);
        Self {
            child,
            dns,
            admin,
            log,
        }
    }

    /// Waits until `/ready` answers 200.
    pub(crate) fn wait_ready(&self, timeout: Duration) {
        wait_http_ok(
            &format!("http://{}/ready", self.admin),
            timeout,
            "clusterset-dns serve",
            &self.log,
        );
    }
}

/// Writes `<cluster dir>/<file>.kubeconfig`: a TokenRequest kubeconfig of
/// ServiceAccount `clusterset-dns/<service_account>` valid `ttl_seconds`.
pub(crate) async fn write_token_kubeconfig(
    cluster: &Cluster,
    service_account: &str,
    file: &str,
    ttl_seconds: i64,
) -> PathBuf {
    let kubeconfig =
        service_account_kubeconfig(cluster, CONTROLLER_NAMESPACE, service_account, ttl_seconds)
            .await;
    let path = cluster.dir.join(format!("{file}.kubeconfig"));
    std::fs::write(&path, kubeconfig).unwrap();
    path
}

/// The arguments of `peer add` or `hub join` that record `cluster`'s pod
/// ranges: its spec's (kwok's `--cidr`, which the Nodes of a single-stack
/// cluster do not carry), or `--allow-any-endpoint` for a cluster without
/// pods (apiserver only).
pub(crate) fn endpoint_range_args(cluster: &Cluster) -> Vec<&str> {
    let mut args: Vec<&str> = Vec::new();
    for cidr in &cluster.spec.pod_cidrs {
        args.extend(["--endpoint-cidr", cidr]);
    }
    if args.is_empty() {
        args.push("--allow-any-endpoint");
    }
    args
}

/// Joins every pair of clusters the supported way: `clusterset-dns peer add`
/// with the two admin kubeconfigs (docs/controller.md, "Joining clusters"),
/// which makes the peer-reader token in the peer and the peer Secret here.
/// The peer's pod ranges are recorded from its spec (kwok's `--cidr`,
/// which the Nodes of a single-stack cluster do not carry); a cluster
/// without pods (apiserver only) is joined with `--allow-any-endpoint`.
pub(crate) async fn join_peers(clusters: &[Cluster]) {
    let binary = clusterset_dns_binary();
    for local in clusters {
        for peer in clusters.iter().filter(|p| p.name != local.name) {
            let ranges = endpoint_range_args(peer);
            let output = tokio::process::Command::new(&binary)
                .arg("peer")
                .arg("add")
                .arg("--kubeconfig")
                .arg(&local.admin_kubeconfig)
                .arg("--peer-kubeconfig")
                .arg(&peer.admin_kubeconfig)
                .args(&ranges)
                .output()
                .await
                .expect("running clusterset-dns peer add");
            assert!(
                output.status.success(),
                "clusterset-dns peer add ({} reads {}) failed:\n{}{}",
                local.name,
                peer.name,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
    }
}

/// What a controller would publish of `ns/name` in `client`'s cluster,
/// written by hand (a hostile or hand-driven peer): a PublishedService
/// whose spec is `spec` over `{namespace, name, ipFamilies: [IPv4]}`, and
/// the ServiceExport peers watch beside it.
pub(crate) async fn publish_export(
    client: &kube::Client,
    ns: &str,
    name: &str,
    spec: serde_json::Value,
) {
    use kube::api::{Api, PostParams};
    let mut full = serde_json::json!({"namespace": ns, "name": name, "ipFamilies": ["IPv4"]});
    for (key, value) in spec.as_object().expect("a spec object") {
        full[key] = value.clone();
    }
    let published: clusterset_dns::api::PublishedService =
        serde_json::from_value(serde_json::json!({
            "apiVersion": "clusterset-dns.io/v1alpha1",
            "kind": "PublishedService",
            "metadata": {"name": format!("{ns}.{name}")},
            "spec": full,
        }))
        .unwrap();
    Api::<clusterset_dns::api::PublishedService>::namespaced(client.clone(), CONTROLLER_NAMESPACE)
        .create(&PostParams::default(), &published)
        .await
        .unwrap_or_else(|e| panic!("publishing {ns}/{name}: {e}"));
    let export: clusterset_dns::api::ServiceExport =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
    Api::<clusterset_dns::api::ServiceExport>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &export)
        .await
        .unwrap_or_else(|e| panic!("exporting {ns}/{name}: {e}"));
}

/// The slice name [`export_selectorless`] gives the endpoints of `name`.
pub(crate) fn source_slice_name(name: &str) -> String {
    format!("{name}-src")
}

/// Exports a Service that has no selector, as a cluster without pods
/// would: the Service `ns/name` with `ports` (no selector), the
/// EndpointSlice [`source_slice_name`] holding one ready endpoint per
/// address of `addresses` (none when empty) with a port 8080 for each
/// Service port, named and with the protocol alike, labelled as the
/// in-tree EndpointSlice controller labels its own; and the
/// ServiceExport. What exists already is kept: a trial may set up what an
/// earlier one did.
pub(crate) async fn export_selectorless(
    client: &kube::Client,
    ns: &str,
    name: &str,
    ports: serde_json::Value,
    addresses: &[&str],
) {
    use k8s_openapi::api::core::v1::Service;
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use kube::api::Api;
    use serde_json::json;
    support::create_if_absent(
        &Api::<Service>::namespaced(client.clone(), ns),
        &support::object(json!({"metadata": {"name": name}, "spec": {"ports": ports}})),
    )
    .await;
    if !addresses.is_empty() {
        let slice_ports: Vec<serde_json::Value> = ports
            .as_array()
            .expect("ports: an array")
            .iter()
            .map(|port| {
                let mut slice_port = json!({"port": 8080, "protocol": port.get("protocol").cloned().unwrap_or(json!("TCP"))});
                if let Some(port_name) = port.get("name") {
                    slice_port["name"] = port_name.clone();
                }
                slice_port
            })
            .collect();
        let endpoints: Vec<serde_json::Value> = addresses
            .iter()
            .map(|address| json!({"addresses": [address], "conditions": {"ready": true}}))
            .collect();
        support::create_if_absent(
            &Api::<EndpointSlice>::namespaced(client.clone(), ns),
            &support::object(json!({
                "metadata": {
                    "name": source_slice_name(name),
                    "labels": {
                        "kubernetes.io/service-name": name,
                        "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
                    },
                },
                "addressType": "IPv4",
                "endpoints": endpoints,
                "ports": slice_ports,
            })),
        )
        .await;
    }
    support::create_if_absent(
        &Api::<clusterset_dns::api::ServiceExport>::namespaced(client.clone(), ns),
        &support::object(json!({"metadata": {"name": name}})),
    )
    .await;
}

/// Waits until the controller of `client`'s cluster has written its
/// publication marker: its peers read its publication from then on.
pub(crate) async fn wait_publication_marker(client: &kube::Client, timeout: Duration) {
    use k8s_openapi::api::core::v1::ConfigMap;
    let markers: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone(), CONTROLLER_NAMESPACE);
    support::wait_for("the publication marker", timeout, || async {
        match markers
            .get_opt(clusterset_dns::peering::PUBLICATION_MARKER)
            .await
        {
            Ok(Some(_)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}

/// The notes of the `PeerRefused` Warning Events about peer Secret
/// `secret` of the controller's namespace.
pub(crate) async fn peer_refusal_notes(client: &kube::Client, secret: &str) -> Vec<String> {
    use k8s_openapi::api::events::v1::Event;
    kube::Api::<Event>::namespaced(client.clone(), CONTROLLER_NAMESPACE)
        .list(&kube::api::ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some("PeerRefused")
                && e.type_.as_deref() == Some("Warning")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(secret)
        })
        .filter_map(|e| e.note)
        .collect()
}
