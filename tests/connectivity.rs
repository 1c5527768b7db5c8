//! Packets through the clusterset IP: the connectivity checks of the
//! KEP-1645 test plan, on three member clusters with a data plane
//! (`tests/dataplane`: pods in network namespaces, a real kube-proxy per
//! node, pod CIDRs routed between clusters, cluster DNS at the kube-dns
//! ClusterIP), and per cluster the controller, clusterset-dns and CoreDNS as
//! shipped. Clusters a and c are IPv4, b is dual-stack. Every cluster's
//! Nodes alternate between zones `zone-a` and `zone-b` (`kwok-node-0` in
//! zone-a, `kwok-node-1` in zone-b); a has a third, `kwok-node-2`, in
//! zone-a.
//!
//! Every connection is made from a client pod with `kubectl exec … -- sh -c
//! 'socat …'`: the name is resolved by the pod's resolver (kube-proxy →
//! CoreDNS → clusterset-dns), the clusterset IP is translated by kube-proxy,
//! and the answer names the pod and cluster that served it. The clusterset
//! starts once; each behaviour below is a named test in a namespace of its
//! own, run in order (the lost cluster last).

mod clusterset;
mod controlplane;
mod dataplane;
mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clusterset::{
    CONVERGE, Clusterset, Dial, IDS, PORTS, PodSet, assert_answered_by, assert_routed, export_yaml,
    namespace_everywhere, pod_set, ready_pods, server_yaml, server_yaml_with, service_yaml,
};
use controlplane::ClusterSpec;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use libtest_mimic::{Arguments, Failed, Trial};
use support::trials::{self, behaviours};

/// The peers' grace period: how long a lost cluster's endpoints stay.
const GRACE: &str = "10s";

fn main() {
    let args = Arguments::from_args();
    let runtime = Arc::new(
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap(),
    );
    // Behaviours share the clusterset and one runtime: one at a time.
    let args = Arguments {
        test_threads: Some(1),
        ..args
    };
    let behaviours = behaviours![
        reach_and_route,
        not_exported_not_reachable,
        local_service_not_impacted,
        port_conflicts,
        headless_per_pod_names,
        ports_kept_current,
        exec_and_dns_inside_pods,
        pod_commands_expand_like_the_kubelet,
        without_root_it_fails_saying_so,
        leftovers_of_a_killed_run_are_removed,
        local_first_failover_and_back,
        spread_without_traffic_distribution,
        headless_local_first,
        prefer_same_zone_in_cluster,
        prefer_same_node_in_cluster,
        lost_cluster_failover,
    ];
    let selected: Vec<&str> = behaviours
        .iter()
        .map(|(name, _)| *name)
        .filter(|name| trials::selected(&args, name))
        .collect();
    let host_before = dataplane::host_network_snapshot();
    let clusterset = if selected.is_empty() {
        None
    } else {
        Some(Arc::new(std::sync::Mutex::new(runtime.block_on(
            Clusterset::start(
                &[
                    // A third node in a: zone-a holds two nodes, so that
                    // node and zone locality differ there.
                    ClusterSpec {
                        nodes: 3,
                        ..ClusterSpec::member(0)
                    },
                    ClusterSpec::member_dual_stack(1),
                    ClusterSpec::member(2),
                ],
                GRACE,
            ),
        ))))
    };
    let trials = behaviours
        .into_iter()
        .map(|(name, behaviour)| {
            let (runtime, clusterset) = (runtime.clone(), clusterset.clone());
            Trial::test(name, move || {
                let cs = clusterset.expect("the clusterset is up for selected tests");
                // A failed behaviour poisons the lock; the next one still runs.
                let mut cs = cs.lock().unwrap_or_else(|e| e.into_inner());
                runtime.block_on(behaviour(&mut cs));
                Ok::<(), Failed>(())
            })
        })
        .collect();
    let conclusion = libtest_mimic::run(&args, trials);
    if conclusion.has_failed()
        && let Some(cs) = &clusterset
    {
        cs.lock().unwrap_or_else(|e| e.into_inner()).print_logs();
    }
    drop(clusterset);
    drop(runtime);
    // Hygiene: the data plane touched only what it made.
    let host_after = dataplane::host_network_snapshot();
    if host_after != host_before {
        eprintln!(
            "the host's network configuration changed during the run:\n--- before\n{host_before}\n--- after\n{host_after}"
        );
        std::process::exit(101);
    }
    let left: Vec<String> = std::fs::read_dir("/run/netns")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!("csd{}x", std::process::id())))
        .collect();
    if !left.is_empty() {
        eprintln!("network namespaces left behind: {left:?}");
        std::process::exit(101);
    }
    conclusion.exit();
}

// ---------------------------------------------------------------------------
// The behaviours.
// ---------------------------------------------------------------------------

/// KEP test 1: a service exported from a and b is reached from every
/// cluster through its clusterset IP, over TCP and UDP, and only the
/// exporting clusters' ready pods answer, each cluster at least once. A
/// dual-stack export from b alone is reached over IPv6 from b and over IPv4
/// from everywhere.
async fn reach_and_route(cs: &Clusterset) {
    let ns = "reach";
    namespace_everywhere(cs, ns).await;
    for i in [0, 1] {
        cs.deploy_server(i, ns, "web", 2, &service_yaml(ns, "web", PORTS, ""))
            .await;
        cs.apply(i, &export_yaml(ns, "web")).await;
    }
    cs.deploy_server(
        1,
        ns,
        "web6",
        2,
        &service_yaml(ns, "web6", PORTS, "  ipFamilyPolicy: RequireDualStack\n"),
    )
    .await;
    cs.apply(1, &export_yaml(ns, "web6")).await;
    let mut expected = BTreeMap::new();
    for i in [0, 1] {
        expected.insert(IDS[i].to_owned(), ready_pods(cs, i, ns, "web").await);
    }
    let name = "web.reach.svc.clusterset.local";
    for (client, id) in IDS.iter().enumerate() {
        for (proto, port) in [("tcp", 80), ("udp", 81)] {
            cs.wait_routed(client, ns, &Dial::new(name, proto, 4, port), &IDS[..2])
                .await;
            let answers = cs.connect(client, ns, &Dial::new(name, proto, 4, port), 20);
            assert_routed(
                &format!("{} → {name} {proto}/{port}", id),
                &answers,
                &expected,
                &IDS[..2],
            );
        }
    }
    let b_only: BTreeMap<_, _> = [(IDS[1].to_owned(), ready_pods(cs, 1, ns, "web6").await)].into();
    let name6 = "web6.reach.svc.clusterset.local";
    for (client, family) in [(0, 4), (1, 4), (1, 6), (2, 4)] {
        cs.wait_routed(client, ns, &Dial::new(name6, "tcp", family, 80), &IDS[1..2])
            .await;
        let answers = cs.connect(client, ns, &Dial::new(name6, "tcp", family, 80), 20);
        assert_routed(
            &format!("{} → {name6} tcp{family}/80", IDS[client]),
            &answers,
            &b_only,
            &IDS[1..2],
        );
    }
}

/// A service that is not exported has no clusterset name, and its
/// cluster.local name is answered only by the local cluster's pods, though
/// a same-named service runs in another cluster.
async fn not_exported_not_reachable(cs: &Clusterset) {
    let ns = "private";
    namespace_everywhere(cs, ns).await;
    for i in [0, 1] {
        cs.deploy_server(i, ns, "db", 2, &service_yaml(ns, "db", PORTS, ""))
            .await;
    }
    let local: BTreeMap<_, _> = [(IDS[0].to_owned(), ready_pods(cs, 0, ns, "db").await)].into();
    let answers = cs.connect(
        0,
        ns,
        &Dial::new("db.private.svc.cluster.local", "tcp", 4, 80),
        30,
    );
    assert_routed(
        "cluster-a → db.private.svc.cluster.local",
        &answers,
        &local,
        &IDS[..1],
    );
    // Not exported: no clusterset name anywhere, and nothing routes to b's pods.
    for (i, id) in IDS.iter().enumerate() {
        let answers = cs.connect(
            i,
            ns,
            &Dial::new("db.private.svc.clusterset.local", "tcp", 4, 80),
            2,
        );
        assert!(
            answers.iter().all(Result::is_err),
            "{id}: the unexported db.private answered through the clusterset: {answers:?}"
        );
    }
}

/// KEP test 2: `foo` runs in a and b, exported only from b: from a,
/// `foo.<ns>.svc.cluster.local` is a's pods 50 times in a row, and the
/// clusterset name reaches b; once a exports too, the clusterset name
/// reaches both and cluster.local is still a's alone, 50 times in a row.
async fn local_service_not_impacted(cs: &Clusterset) {
    let ns = "local";
    namespace_everywhere(cs, ns).await;
    for i in [0, 1] {
        cs.deploy_server(i, ns, "foo", 2, &service_yaml(ns, "foo", PORTS, ""))
            .await;
    }
    let a_only: BTreeMap<_, _> = [(IDS[0].to_owned(), ready_pods(cs, 0, ns, "foo").await)].into();
    let local = "foo.local.svc.cluster.local";
    let clusterset = "foo.local.svc.clusterset.local";
    cs.apply(1, &export_yaml(ns, "foo")).await;
    cs.wait_routed(0, ns, &Dial::new(clusterset, "tcp", 4, 80), &IDS[1..2])
        .await;
    let answers = cs.connect(0, ns, &Dial::new(local, "tcp", 4, 80), 50);
    assert_routed(
        "cluster-a → foo cluster.local (b exports)",
        &answers,
        &a_only,
        &IDS[..1],
    );

    cs.apply(0, &export_yaml(ns, "foo")).await;
    cs.wait_routed(0, ns, &Dial::new(clusterset, "tcp", 4, 80), &IDS[..2])
        .await;
    let answers = cs.connect(0, ns, &Dial::new(local, "tcp", 4, 80), 50);
    assert_routed(
        "cluster-a → foo cluster.local (a and b export)",
        &answers,
        &a_only,
        &IDS[..1],
    );
}

/// Port conflicts: `same` has port `tcp` as 80 in a (exported first) and 90
/// in b: port 80 routes only to a. `union` exposes port `px` (80) in a and
/// `py` (90) in b: each port routes only to the cluster that exposes it.
async fn port_conflicts(cs: &Clusterset) {
    let ns = "ports";
    namespace_everywhere(cs, ns).await;
    let tcp = |name: &str, port: u16| {
        format!("  - {{name: {name}, port: {port}, targetPort: 8080, protocol: TCP}}\n")
    };
    cs.deploy_server(
        0,
        ns,
        "same",
        2,
        &service_yaml(ns, "same", &tcp("tcp", 80), ""),
    )
    .await;
    cs.apply(0, &export_yaml(ns, "same")).await;
    // b exports later, so a's port wins the conflict.
    cs.wait_routed(
        2,
        ns,
        &Dial::new("same.ports.svc.clusterset.local", "tcp", 4, 80),
        &IDS[..1],
    )
    .await;
    cs.deploy_server(
        1,
        ns,
        "same",
        2,
        &service_yaml(ns, "same", &tcp("tcp", 90), ""),
    )
    .await;
    cs.apply(1, &export_yaml(ns, "same")).await;
    let a_pods: BTreeMap<_, _> = [(IDS[0].to_owned(), ready_pods(cs, 0, ns, "same").await)].into();
    // Both endpoints are in the import (b's without the conflicting port):
    // wait until b's slices reached c, then count.
    wait_import_clusters(cs, 2, ns, "same", 2).await;
    let answers = cs.connect(
        2,
        ns,
        &Dial::new("same.ports.svc.clusterset.local", "tcp", 4, 80),
        20,
    );
    assert_routed(
        "cluster-c → same:80 (a wins the port)",
        &answers,
        &a_pods,
        &IDS[..1],
    );
    let answers = cs.connect(
        2,
        ns,
        &Dial::new("same.ports.svc.clusterset.local", "tcp", 4, 90),
        2,
    );
    assert!(
        answers.iter().all(Result::is_err),
        "port 90 (the loser's) answered: {answers:?}"
    );

    cs.deploy_server(
        0,
        ns,
        "union",
        2,
        &service_yaml(ns, "union", &tcp("px", 80), ""),
    )
    .await;
    cs.deploy_server(
        1,
        ns,
        "union",
        2,
        &service_yaml(ns, "union", &tcp("py", 90), ""),
    )
    .await;
    for i in [0, 1] {
        cs.apply(i, &export_yaml(ns, "union")).await;
    }
    let mut by_cluster = BTreeMap::new();
    for i in [0, 1] {
        by_cluster.insert(IDS[i].to_owned(), ready_pods(cs, i, ns, "union").await);
    }
    let name = "union.ports.svc.clusterset.local";
    for (port, owner) in [(80, 0), (90, 1)] {
        cs.wait_routed(
            2,
            ns,
            &Dial::new(name, "tcp", 4, port),
            &IDS[owner..owner + 1],
        )
        .await;
        let answers = cs.connect(2, ns, &Dial::new(name, "tcp", 4, port), 20);
        let only: BTreeMap<_, _> = [(IDS[owner].to_owned(), by_cluster[IDS[owner]].clone())].into();
        assert_routed(
            &format!("cluster-c → union:{port}"),
            &answers,
            &only,
            &IDS[owner..owner + 1],
        );
    }
}

/// Waits until cluster `i` holds imported EndpointSlices of `clusters`
/// distinct source clusters for `ns/name`.
async fn wait_import_clusters(cs: &Clusterset, i: usize, ns: &str, name: &str, clusters: usize) {
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    let slices: Api<EndpointSlice> = Api::namespaced(cs.client(i).await, ns);
    cs.cluster(i)
        .wait_for("imported slices of every exporter", CONVERGE, || {
            let slices = slices.clone();
            async move {
                let sources = clusterset::slice_sources(&slices, name).await?;
                if sources.len() >= clusters {
                    Ok(())
                } else {
                    Err(format!("slices from {sources:?}"))
                }
            }
        })
        .await;
}

/// Headless: a StatefulSet exported from a and b; a connection to each
/// `<hostname>.<clusterid>.db.hl.svc.clusterset.local` reaches that pod.
async fn headless_per_pod_names(cs: &Clusterset) {
    let ns = "hl";
    namespace_everywhere(cs, ns).await;
    for i in [0, 1] {
        let sts = server_yaml(ns, "db", 2, IDS[i])
            .replace("kind: Deployment", "kind: StatefulSet")
            .replace("  replicas: 2\n", "  replicas: 2\n  serviceName: db\n");
        cs.apply(i, &sts).await;
        cs.apply(i, &service_yaml(ns, "db", PORTS, "  clusterIP: None\n"))
            .await;
        cs.apply(i, &export_yaml(ns, "db")).await;
    }
    for i in [0, 1] {
        for pod in ["db-0", "db-1"] {
            cs.dp.wait_listening(i, ns, pod, "tcp", 8080);
        }
    }
    for client in [0, 2] {
        for i in [0, 1] {
            for pod in ["db-0", "db-1"] {
                let name = format!("{pod}.{}.db.hl.svc.clusterset.local", IDS[i]);
                let deadline = Instant::now() + CONVERGE;
                let answer = loop {
                    let answers = cs.connect(client, ns, &Dial::new(&name, "tcp", 4, 8080), 1);
                    match &answers[0] {
                        Ok(a) => break a.clone(),
                        Err(e) => {
                            assert!(Instant::now() < deadline, "{} → {name}: {e}", IDS[client])
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                };
                assert_eq!(
                    (answer.pod.as_str(), answer.cluster.as_str()),
                    (pod, IDS[i]),
                    "{} → {name} reached the wrong pod",
                    IDS[client]
                );
            }
        }
    }
}

/// A port added to an exported Service is reachable through the clusterset
/// IP within seconds (the reference controller never updates derived
/// ports, mcs-api #169).
async fn ports_kept_current(cs: &Clusterset) {
    let ns = "grow";
    namespace_everywhere(cs, ns).await;
    let one = "  - {name: tcp, port: 80, targetPort: 8080, protocol: TCP}\n";
    cs.deploy_server(0, ns, "api", 2, &service_yaml(ns, "api", one, ""))
        .await;
    cs.apply(0, &export_yaml(ns, "api")).await;
    let name = "api.grow.svc.clusterset.local";
    cs.wait_routed(1, ns, &Dial::new(name, "tcp", 4, 80), &IDS[..1])
        .await;
    let two = format!("{one}  - {{name: admin, port: 82, targetPort: 8082, protocol: TCP}}\n");
    cs.apply(0, &service_yaml(ns, "api", &two, "")).await;
    let added = Instant::now();
    cs.wait_routed(1, ns, &Dial::new(name, "tcp", 4, 82), &IDS[..1])
        .await;
    eprintln!(
        "ports_kept_current: the new port answered through the clusterset IP {:.1} s after it was added",
        added.elapsed().as_secs_f64()
    );
    assert!(added.elapsed() < Duration::from_secs(30));
}

/// `kubectl exec` runs in the pod: its network namespace (the pod's IP),
/// its cluster's DNS (`nslookup` of a clusterset name and, through the
/// search path, of a short cluster.local name).
async fn exec_and_dns_inside_pods(cs: &Clusterset) {
    let ns = "exec";
    namespace_everywhere(cs, ns).await;
    cs.deploy_server(1, ns, "hello", 1, &service_yaml(ns, "hello", PORTS, ""))
        .await;
    cs.apply(1, &export_yaml(ns, "hello")).await;
    for (i, id) in IDS.iter().enumerate() {
        let pod: Pod = Api::namespaced(cs.client(i).await, ns)
            .get("client")
            .await
            .unwrap();
        let pod_ip = pod.status.unwrap().pod_ip.unwrap();
        let addrs = cs.kubectl(
            i,
            &[
                "exec", "-n", ns, "client", "--", "ip", "-o", "addr", "show", "eth0",
            ],
        );
        assert!(
            addrs.contains(&format!("inet {pod_ip}/32")),
            "{}: exec ran outside the pod: {addrs}",
            id
        );
        exec_in_client_until(
            cs,
            i,
            ns,
            &["nslookup", "hello.exec.svc.clusterset.local"],
            |text| text.contains("Address: 10."),
        )
        .await;
    }
    let local = cs.kubectl(1, &["exec", "-n", ns, "client", "--", "nslookup", "hello"]);
    assert!(
        local.contains("hello.exec.svc.cluster.local"),
        "search path: {local}"
    );
    // nc, as a user would: the server answers on connect. The name
    // resolves as soon as the import is published, and kube-proxy
    // programs the clusterset IP up to a sync period later (longer on a
    // loaded machine: in one full test run the first nc got no
    // connection in its 2 s), so a user whose first try fails tries again.
    let reply = exec_in_client_until(
        cs,
        0,
        ns,
        &["nc", "-w", "2", "hello.exec.svc.clusterset.local", "80"],
        |_| true,
    )
    .await;
    let answer = clusterset::Answer::parse(reply.trim())
        .unwrap_or_else(|| panic!("nc from a's pod: unexpected reply {reply:?}"));
    assert_eq!(answer.cluster, IDS[1], "nc reached {answer:?}");
}

/// Runs `command` in pod `client` of `ns` in cluster `i` (`kubectl exec`)
/// every 500 ms until it succeeds with an output `accept` takes, for at
/// most `CONVERGE`; returns that output.
async fn exec_in_client_until(
    cs: &Clusterset,
    i: usize,
    ns: &str,
    command: &[&str],
    accept: impl Fn(&str) -> bool,
) -> String {
    let mut args = vec!["exec", "-n", ns, "client", "--"];
    args.extend_from_slice(command);
    let deadline = Instant::now() + CONVERGE;
    loop {
        let out = cs.try_kubectl(i, &args);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() && accept(&text) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "{}: {} from the pod: {text}{}",
            IDS[i],
            command.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The pod runner expands `$(VAR)` in commands and env values as the
/// kubelet does, and resolves the downward-API fields the tests use.
async fn pod_commands_expand_like_the_kubelet(_cs: &Clusterset) {
    use dataplane::expand_vars;
    let env = vec![
        ("POD_IP".to_owned(), "10.1.2.3".to_owned()),
        ("NAME".to_owned(), "web".to_owned()),
    ];
    assert_eq!(
        expand_vars("echo $(NAME) $(POD_IP)", &env),
        "echo web 10.1.2.3"
    );
    assert_eq!(expand_vars("$$(NAME) costs $$5", &env), "$(NAME) costs $5");
    assert_eq!(expand_vars("$(UNSET) $(NAME", &env), "$(UNSET) $(NAME");
    assert_eq!(expand_vars("$(printf %s x)", &env), "$(printf %s x)");
    assert_eq!(expand_vars("tail $", &env), "tail $");
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "p", "namespace": "n", "uid": "u"},
        "spec": {"nodeName": "kwok-node-0", "containers": []},
        "status": {"podIP": "10.1.2.3", "podIPs": [{"ip": "10.1.2.3"}, {"ip": "fd00::3"}]},
    }))
    .unwrap();
    for (path, want) in [
        ("metadata.name", Some("p")),
        ("metadata.namespace", Some("n")),
        ("spec.nodeName", Some("kwok-node-0")),
        ("status.podIP", Some("10.1.2.3")),
        ("status.podIPs", Some("10.1.2.3,fd00::3")),
        ("metadata.labels['x']", None),
    ] {
        assert_eq!(dataplane::field_ref(&pod, path).as_deref(), want, "{path}");
    }
}

/// Without the privileges for network namespaces, a data-plane test fails
/// and says what is missing (run here as the user `nobody`).
async fn without_root_it_fails_saying_so(_cs: &Clusterset) {
    use std::os::unix::fs::PermissionsExt;
    // A copy nobody can run wherever the checkout lives (under /root, say).
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = dir.path().join("connectivity");
    std::fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
        .arg(&exe)
        .arg("reach_and_route")
        .output()
        .expect("run setpriv (util-linux)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "as nobody the tests passed:\n{stderr}"
    );
    assert!(
        stderr.contains("needs root") && stderr.contains("network namespaces"),
        "as nobody, the failure does not say what is missing:\n{stderr}"
    );
}

/// How long a failover, a failback or a move within a cluster through the
/// clusterset IP may take: the source cluster's EndpointSlice controller,
/// the MCS controller's slices and hints, kube-proxy's next sync (at most
/// one a second), and a SYN to a just-programmed address sent again.
const SWITCH: Duration = Duration::from_secs(30);

/// A Service's `trafficDistribution: PreferClose` (a spec line).
const PREFER_CLOSE: &str = "  trafficDistribution: PreferClose\n";

/// Pod spec lines spreading the pods of `app` one per zone (hard), so that
/// a client's zone holds a server whichever node the client is on.
fn one_per_zone(app: &str) -> String {
    format!(
        "      topologySpreadConstraints:\n      - {{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, \
         whenUnsatisfiable: DoNotSchedule, labelSelector: {{matchLabels: {{app: {app}}}}}}}\n"
    )
}

/// Issue 22, local first by connections: `web` is exported from a and b,
/// both Services with `trafficDistribution: PreferClose` (their pods one
/// per zone). From a, every connection to the clusterset IP lands on a's
/// pods; a's Deployment scaled to 0, every one lands on b within
/// [`SWITCH`], none failing after the switch, and on both of b's pods;
/// scaled back, every one returns to a. The same from b. From c, which
/// does not export, connections spread over a and b.
async fn local_first_failover_and_back(cs: &Clusterset) {
    let ns = "lfirst";
    namespace_everywhere(cs, ns).await;
    for i in [0, 1] {
        cs.apply(
            i,
            &server_yaml_with(ns, "web", "web", 2, IDS[i], &one_per_zone("web")),
        )
        .await;
        cs.apply(i, &service_yaml(ns, "web", PORTS, PREFER_CLOSE))
            .await;
        cs.wait_serving(i, ns, "web", 2).await;
        cs.apply(i, &export_yaml(ns, "web")).await;
    }
    for i in 0..3 {
        cs.wait_import(i, ns, "web", &IDS[..2], Some("PreferClose"))
            .await;
    }
    let dial = Dial::new("web.lfirst.svc.clusterset.local", "tcp", 4, 80);
    let mut both = BTreeMap::new();
    for i in [0, 1] {
        both.insert(IDS[i].to_owned(), ready_pods(cs, i, ns, "web").await);
    }
    cs.wait_routed(2, ns, &dial, &IDS[..2]).await;
    let answers = cs.connect(2, ns, &dial, 30);
    assert_routed(
        "cluster-c (exports nothing) → web, PreferClose",
        &answers,
        &both,
        &IDS[..2],
    );

    for (local, remote) in [(0, 1), (1, 0)] {
        let (here, there) = (IDS[local], IDS[remote]);
        let local_pods = pod_set(local, &cs.wait_serving(local, ns, "web", 2).await);
        let remote_pods = pod_set(remote, &cs.wait_serving(remote, ns, "web", 2).await);
        cs.wait_answered_by(
            local,
            ns,
            "client",
            &dial,
            &local_pods,
            10,
            CONVERGE,
            &format!("{here} → web, local first"),
        )
        .await;
        let answers = cs.connect(local, ns, &dial, 30);
        assert_answered_by(
            &format!("{here} → web while {here} has ready pods"),
            &answers,
            &local_pods,
            false,
        );

        cs.scale(local, ns, "deployment/web", 0);
        let (switched, failed) = cs
            .wait_answered_by(
                local,
                ns,
                "client",
                &dial,
                &remote_pods,
                5,
                SWITCH,
                &format!("{here} → web after {here} was scaled to 0"),
            )
            .await;
        eprintln!(
            "local_first_failover_and_back: {here} scaled to 0 → every connection from {here} \
             on {there} {:.1} s later ({} failed on the way)",
            switched.as_secs_f64(),
            failed.len()
        );
        let answers = cs.connect(local, ns, &dial, 30);
        assert_answered_by(
            &format!("{here} → web after the switch to {there}"),
            &answers,
            &remote_pods,
            true,
        );

        cs.scale(local, ns, "deployment/web", 2);
        let scaled = Instant::now();
        let local_pods = pod_set(local, &cs.wait_serving(local, ns, "web", 2).await);
        let serving = scaled.elapsed();
        let (returned, _) = cs
            .wait_answered_by(
                local,
                ns,
                "client",
                &dial,
                &local_pods,
                5,
                SWITCH,
                &format!("{here} → web after {here} was scaled back"),
            )
            .await;
        eprintln!(
            "local_first_failover_and_back: {here} scaled back → its pods serving {:.1} s later, \
             every connection from {here} on {here} again {:.1} s after that",
            serving.as_secs_f64(),
            returned.as_secs_f64()
        );
        let answers = cs.connect(local, ns, &dial, 30);
        assert_answered_by(
            &format!("{here} → web after {here} came back"),
            &answers,
            &local_pods,
            false,
        );
    }
}

/// Without `trafficDistribution` nothing changes: from a and from b,
/// connections through the clusterset IP land on both exporting clusters.
async fn spread_without_traffic_distribution(cs: &Clusterset) {
    let ns = "spread";
    namespace_everywhere(cs, ns).await;
    for i in [0, 1] {
        cs.deploy_server(i, ns, "web", 2, &service_yaml(ns, "web", PORTS, ""))
            .await;
        cs.apply(i, &export_yaml(ns, "web")).await;
    }
    let mut both = BTreeMap::new();
    for i in [0, 1] {
        cs.wait_import(i, ns, "web", &IDS[..2], None).await;
        both.insert(IDS[i].to_owned(), ready_pods(cs, i, ns, "web").await);
    }
    let dial = Dial::new("web.spread.svc.clusterset.local", "tcp", 4, 80);
    for client in [0, 1] {
        cs.wait_routed(client, ns, &dial, &IDS[..2]).await;
        let answers = cs.connect(client, ns, &dial, 30);
        assert_routed(
            &format!("{} → web, no trafficDistribution", IDS[client]),
            &answers,
            &both,
            &IDS[..2],
        );
    }
}

/// Waits until `ns/app` of cluster `i` has `count` Running and Ready pods
/// (any workload); returns name → IPs.
async fn wait_ready_pods(
    cs: &Clusterset,
    i: usize,
    ns: &str,
    app: &str,
    count: usize,
) -> BTreeMap<String, Vec<String>> {
    let deadline = Instant::now() + CONVERGE;
    loop {
        let pods = ready_pods(cs, i, ns, app).await;
        if pods.len() == count {
            return pods;
        }
        assert!(
            Instant::now() < deadline,
            "{}: {ns}/{app}: {} ready pods after {CONVERGE:?}, want {count}: {pods:?}",
            IDS[i],
            pods.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The IPv4 addresses of `pods`, sorted (what an A query answers).
fn ipv4s<'a>(pods: impl IntoIterator<Item = &'a Vec<String>>) -> Vec<String> {
    let mut ips: Vec<String> = pods
        .into_iter()
        .flatten()
        .filter(|ip| ip.contains('.'))
        .cloned()
        .collect();
    ips.sort();
    ips
}

/// Polls `dig +short NAME TYPE` from pod `ns/client` of cluster `i` every
/// 200 ms until the answer is `want` (sorted lines); returns how long it
/// took. Panics after `within`, saying `what`, with the last answer.
#[allow(clippy::too_many_arguments)]
async fn wait_dig(
    cs: &Clusterset,
    i: usize,
    ns: &str,
    name: &str,
    qtype: &str,
    want: &[String],
    within: Duration,
    what: &str,
) -> Duration {
    let started = Instant::now();
    loop {
        let got = cs.dig_in_pod(i, ns, "client", name, qtype);
        if got == want {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "{what}: {} `dig {name} {qtype}` from {ns}/client: want {want:?}, still {got:?} \
             after {within:?}",
            IDS[i]
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The SRV targets (last field of each `dig +short` line), sorted.
fn srv_targets(lines: &[String]) -> Vec<String> {
    let mut targets: Vec<String> = lines
        .iter()
        .filter_map(|l| l.split_whitespace().last().map(str::to_owned))
        .collect();
    targets.sort();
    targets
}

/// Issue 22, headless: the StatefulSet `db` is exported from a and b, both
/// headless Services with `trafficDistribution: PreferClose`. Through each
/// client pod's resolver (CoreDNS → clusterset-dns), a's apex name answers
/// a's ready pods only, b's b's, and c's (exporting nothing) both; SRV and
/// b's per-pod names keep answering for every cluster. With a's pods not
/// ready (Ready=False; they keep running) a's apex answers b's pods, and
/// b's per-pod names still resolve; ready again, a's apex is a's again.
async fn headless_local_first(cs: &Clusterset) {
    let ns = "hlfirst";
    namespace_everywhere(cs, ns).await;
    for i in [0, 1] {
        let sts = server_yaml(ns, "db", 2, IDS[i])
            .replace("kind: Deployment", "kind: StatefulSet")
            .replace("  replicas: 2\n", "  replicas: 2\n  serviceName: db\n");
        cs.apply(i, &sts).await;
        cs.apply(
            i,
            &service_yaml(
                ns,
                "db",
                PORTS,
                &format!("  clusterIP: None\n{PREFER_CLOSE}"),
            ),
        )
        .await;
        cs.apply(i, &export_yaml(ns, "db")).await;
    }
    let mut ips = Vec::new();
    for i in [0, 1] {
        ips.push(ipv4s(wait_ready_pods(cs, i, ns, "db", 2).await.values()));
    }
    for i in 0..3 {
        cs.wait_import(i, ns, "db", &IDS[..2], Some("PreferClose"))
            .await;
    }
    let apex = "db.hlfirst.svc.clusterset.local";
    let srv = "_tcp._tcp.db.hlfirst.svc.clusterset.local";
    let per_pod = |pod: &str, i: usize| format!("{pod}.{}.{apex}", IDS[i]);
    let b_pods = ready_pods(cs, 1, ns, "db").await;
    let mut every_target: Vec<String> = (0..2)
        .flat_map(|i| ["db-0", "db-1"].map(|pod| format!("{}.", per_pod(pod, i))))
        .collect();
    every_target.sort();
    let mut all = [ips[0].clone(), ips[1].clone()].concat();
    all.sort();

    // b's per-pod names answer from a: a's clusterset-dns holds b's
    // endpoints, so an apex answer without them is the locality rule.
    for (pod, pod_ips) in &b_pods {
        let what = format!("b's per-pod name {pod}, from a");
        wait_dig(
            cs,
            0,
            ns,
            &per_pod(pod, 1),
            "A",
            &ipv4s([pod_ips]),
            CONVERGE,
            &what,
        )
        .await;
    }
    let b_per_pod_names_answer = |phase: &str| {
        for (pod, pod_ips) in &b_pods {
            let got = cs.dig_in_pod(0, ns, "client", &per_pod(pod, 1), "A");
            assert_eq!(
                got,
                ipv4s([pod_ips]),
                "cluster-a: {} ({phase})",
                per_pod(pod, 1)
            );
        }
    };
    let apex_stays = |i: usize, want: &[String], phase: &str| {
        for _ in 0..5 {
            let got = cs.dig_in_pod(i, ns, "client", apex, "A");
            assert_eq!(got, want, "{}: {apex} A ({phase})", IDS[i]);
        }
    };
    let srv_every_cluster = |phase: &str| {
        let got = srv_targets(&cs.dig_in_pod(0, ns, "client", srv, "SRV"));
        assert_eq!(got, every_target, "cluster-a: {srv} SRV ({phase})");
    };
    let what = "a's apex, while a has ready pods";
    wait_dig(cs, 0, ns, apex, "A", &ips[0], CONVERGE, what).await;
    apex_stays(0, &ips[0], what);
    srv_every_cluster(what);
    let what = "b's apex, while b has ready pods";
    wait_dig(cs, 1, ns, apex, "A", &ips[1], CONVERGE, what).await;
    apex_stays(1, &ips[1], what);
    let what = "c's apex (c exports nothing)";
    wait_dig(cs, 2, ns, apex, "A", &all, CONVERGE, what).await;
    apex_stays(2, &all, what);

    for pod in ["db-0", "db-1"] {
        cs.set_pod_ready(0, ns, pod, false).await;
    }
    let what = "a's apex, a's pods not ready";
    let switched = wait_dig(cs, 0, ns, apex, "A", &ips[1], SWITCH, what).await;
    eprintln!(
        "headless_local_first: a's pods not ready → a's apex answered b's pods {:.1} s later",
        switched.as_secs_f64()
    );
    apex_stays(0, &ips[1], what);
    b_per_pod_names_answer(what);

    for pod in ["db-0", "db-1"] {
        cs.set_pod_ready(0, ns, pod, true).await;
    }
    let what = "a's apex, a's pods ready again";
    let returned = wait_dig(cs, 0, ns, apex, "A", &ips[0], SWITCH, what).await;
    eprintln!(
        "headless_local_first: a's pods ready again → a's apex answered a's pods {:.1} s later",
        returned.as_secs_f64()
    );
    apex_stays(0, &ips[0], what);
    srv_every_cluster(what);
    b_per_pod_names_answer(what);
}

/// In-cluster locality, shared by the zone and node behaviours: in a, one
/// single-pod Deployment `<app>-<n>` pinned to each `kwok-node-<n>` (zone-a
/// holds nodes 0 and 2, zone-b node 1), all behind Service `<app>` with
/// `trafficDistribution` `td_a`; in b, two pods behind `<app>` with `td_b`;
/// both exported, the import's merged value `merged`. Client pods
/// `client-0` on kwok-node-0 (zone-a) and `client-1` on kwok-node-1
/// (zone-b) in a. Returns a's pod on each node.
async fn per_node_servers(
    cs: &Clusterset,
    ns: &str,
    app: &str,
    td: [&str; 2],
    merged: &str,
) -> Vec<PodSet> {
    namespace_everywhere(cs, ns).await;
    for n in 0..3 {
        let pin = format!("      nodeSelector: {{kubernetes.io/hostname: kwok-node-{n}}}\n");
        cs.apply(
            0,
            &server_yaml_with(ns, &format!("{app}-{n}"), app, 1, IDS[0], &pin),
        )
        .await;
    }
    for (i, td) in td.iter().enumerate() {
        let spec = format!("  trafficDistribution: {td}\n");
        if i == 0 {
            cs.apply(0, &service_yaml(ns, app, PORTS, &spec)).await;
        } else {
            cs.deploy_server(1, ns, app, 2, &service_yaml(ns, app, PORTS, &spec))
                .await;
        }
    }
    let mut on_node = Vec::new();
    for n in 0..3 {
        let pods = cs.wait_serving(0, ns, &format!("{app}-{n}"), 1).await;
        let node = pods[0].spec.as_ref().and_then(|s| s.node_name.clone());
        assert_eq!(
            node.as_deref(),
            Some(format!("kwok-node-{n}").as_str()),
            "{app}-{n}'s pod is not on its node"
        );
        on_node.push(pod_set(0, &pods));
    }
    for i in [0, 1] {
        cs.apply(i, &export_yaml(ns, app)).await;
    }
    for i in 0..3 {
        cs.wait_import(i, ns, app, &IDS[..2], Some(merged)).await;
    }
    for n in 0..2 {
        let node = format!("kwok-node-{n}");
        cs.client_pod_on(0, ns, &format!("client-{n}"), Some(&node))
            .await;
    }
    on_node
}

/// Whether the apiserver accepts `PreferSameZone` and `PreferSameNode`
/// (1.34 and later; 1.33 with a feature gate the tests leave off).
fn node_hints_served() -> bool {
    controlplane::kubernetes_version() >= (1, 34)
}

/// Connections from `client` (in a) land on `want` alone, each of its
/// pods answering, within [`CONVERGE`] and then 30 in a row.
async fn lands_on(
    cs: &Clusterset,
    ns: &str,
    client: &str,
    dial: &Dial<'_>,
    want: &PodSet,
    what: &str,
) {
    cs.wait_answered_by(0, ns, client, dial, want, 10, CONVERGE, what)
        .await;
    let answers = cs.connect_from(0, ns, client, dial, 30);
    assert_answered_by(what, &answers, want, true);
}

/// Issue 22, `PreferSameZone` inside a cluster: `zs` exported from a
/// (`PreferSameZone`) and b (`PreferClose`, the same value). From a's
/// client in zone-a, connections land on a's two zone-a pods (nodes 0 and
/// 2), each of them, never zone-b's or b's; from a's client in zone-b, on
/// a's zone-b pod alone. With zone-b's pod scaled away, zone-b's client
/// stays in a, on zone-a's pods (this cluster first, then the others);
/// scaled back, it returns to its zone's pod.
async fn prefer_same_zone_in_cluster(cs: &Clusterset) {
    let ns = "zonal";
    // Before 1.34 the apiserver knows only the older spelling.
    let td = if node_hints_served() {
        ["PreferSameZone", "PreferClose"]
    } else {
        ["PreferClose", "PreferClose"]
    };
    let on_node = per_node_servers(cs, ns, "zs", td, "PreferClose").await;
    let dial = Dial::new("zs.zonal.svc.clusterset.local", "tcp", 4, 80);
    let zone_a: PodSet = on_node[0].union(&on_node[2]).cloned().collect();
    lands_on(cs, ns, "client-0", &dial, &zone_a, "a's zone-a client → zs").await;
    lands_on(
        cs,
        ns,
        "client-1",
        &dial,
        &on_node[1],
        "a's zone-b client → zs",
    )
    .await;

    cs.scale(0, ns, "deployment/zs-1", 0);
    let what = "a's zone-b client → zs, zone-b's pod scaled away";
    let (moved, failed) = cs
        .wait_answered_by(0, ns, "client-1", &dial, &zone_a, 5, SWITCH, what)
        .await;
    eprintln!(
        "prefer_same_zone_in_cluster: zone-b's pod scaled away → zone-b's client on zone-a's \
         pods {:.1} s later ({} failed on the way)",
        moved.as_secs_f64(),
        failed.len()
    );
    let answers = cs.connect_from(0, ns, "client-1", &dial, 30);
    assert_answered_by(what, &answers, &zone_a, true);
    let answers = cs.connect_from(0, ns, "client-0", &dial, 30);
    assert_answered_by(
        "a's zone-a client → zs, zone-b's pod scaled away",
        &answers,
        &zone_a,
        true,
    );

    cs.scale(0, ns, "deployment/zs-1", 1);
    let zone_b = pod_set(0, &cs.wait_serving(0, ns, "zs-1", 1).await);
    let what = "a's zone-b client → zs, zone-b's pod back";
    let (returned, _) = cs
        .wait_answered_by(0, ns, "client-1", &dial, &zone_b, 5, SWITCH, what)
        .await;
    eprintln!(
        "prefer_same_zone_in_cluster: zone-b's pod serving again → zone-b's client on it {:.1} s \
         later",
        returned.as_secs_f64()
    );
    let answers = cs.connect_from(0, ns, "client-1", &dial, 30);
    assert_answered_by(what, &answers, &zone_b, true);
}

/// Issue 22, `PreferSameNode` inside a cluster: `zn` exported from a and b
/// with `PreferSameNode`. A client on kwok-node-0 lands on a's pod there
/// alone, not on node 2's in the same zone; a client on kwok-node-1 on
/// node 1's. With node 0's pod scaled away, node 0's client lands on its
/// zone's other pod (node 2's) alone; scaled back, on node 0's again.
async fn prefer_same_node_in_cluster(cs: &Clusterset) {
    let ns = "nodal";
    if !node_hints_served() {
        // Kubernetes 1.33: no Service can ask for it (what the controller
        // does with another cluster's is tests/oldest_kubernetes.rs).
        namespace_everywhere(cs, ns).await;
        let spec = "  trafficDistribution: PreferSameNode\n";
        let refused =
            controlplane::apply_yaml(&cs.client(0).await, &service_yaml(ns, "zn", PORTS, spec))
                .await
                .expect_err("PreferSameNode refused before 1.34");
        assert!(
            refused.to_string().contains("spec.trafficDistribution"),
            "{refused}"
        );
        eprintln!(
            "prefer_same_node_in_cluster: Kubernetes {:?} refuses PreferSameNode, as docs/compatibility.md says",
            controlplane::kubernetes_version()
        );
        return;
    }
    let on_node = per_node_servers(
        cs,
        ns,
        "zn",
        ["PreferSameNode", "PreferSameNode"],
        "PreferSameNode",
    )
    .await;
    let dial = Dial::new("zn.nodal.svc.clusterset.local", "tcp", 4, 80);
    lands_on(
        cs,
        ns,
        "client-0",
        &dial,
        &on_node[0],
        "a's node-0 client → zn",
    )
    .await;
    lands_on(
        cs,
        ns,
        "client-1",
        &dial,
        &on_node[1],
        "a's node-1 client → zn",
    )
    .await;

    cs.scale(0, ns, "deployment/zn-0", 0);
    let what = "a's node-0 client → zn, node 0's pod scaled away";
    let (moved, failed) = cs
        .wait_answered_by(0, ns, "client-0", &dial, &on_node[2], 5, SWITCH, what)
        .await;
    eprintln!(
        "prefer_same_node_in_cluster: node 0's pod scaled away → node 0's client on node 2's \
         (same zone) {:.1} s later ({} failed on the way)",
        moved.as_secs_f64(),
        failed.len()
    );
    let answers = cs.connect_from(0, ns, "client-0", &dial, 30);
    assert_answered_by(what, &answers, &on_node[2], true);

    cs.scale(0, ns, "deployment/zn-0", 1);
    let back = pod_set(0, &cs.wait_serving(0, ns, "zn-0", 1).await);
    let what = "a's node-0 client → zn, node 0's pod back";
    let (returned, _) = cs
        .wait_answered_by(0, ns, "client-0", &dial, &back, 5, SWITCH, what)
        .await;
    eprintln!(
        "prefer_same_node_in_cluster: node 0's pod serving again → node 0's client on it {:.1} s \
         later",
        returned.as_secs_f64()
    );
    let answers = cs.connect_from(0, ns, "client-0", &dial, 30);
    assert_answered_by(what, &answers, &back, true);
}

/// A lost cluster: `lose` is exported from b and c; c's apiserver stops.
/// Connections from a keep succeeding throughout, and after the grace
/// period every one lands on b; when c returns, on both again.
async fn lost_cluster_failover(cs: &mut Clusterset) {
    let ns = "lose";
    namespace_everywhere(cs, ns).await;
    for i in [1, 2] {
        cs.deploy_server(i, ns, "svc", 2, &service_yaml(ns, "svc", PORTS, ""))
            .await;
        cs.apply(i, &export_yaml(ns, "svc")).await;
    }
    let name = "svc.lose.svc.clusterset.local";
    cs.wait_routed(0, ns, &Dial::new(name, "tcp", 4, 80), &IDS[1..])
        .await;
    let mut b_only = BTreeMap::new();
    b_only.insert(IDS[1].to_owned(), ready_pods(cs, 1, ns, "svc").await);
    cs.dp.plane.apiservers[2].stop();
    let stopped = Instant::now();
    let mut failed = Vec::new();
    let mut switched = None;
    // c's pods keep serving (only its apiserver stopped), so a batch may
    // land on b alone by chance while c's endpoints are still imported
    // within grace: the switch counts once a's copies of c's slices are gone.
    let slices: Api<k8s_openapi::api::discovery::v1::EndpointSlice> =
        Api::namespaced(cs.client(0).await, ns);
    while stopped.elapsed() < CONVERGE {
        let answers = cs.connect(0, ns, &Dial::new(name, "tcp", 4, 80), 10);
        failed.extend(answers.iter().filter_map(|a| a.as_ref().err().cloned()));
        if answers.iter().flatten().all(|a| a.cluster == IDS[1])
            && answers.iter().all(Result::is_ok)
            && clusterset::slice_sources(&slices, "svc")
                .await
                .is_ok_and(|sources| !sources.contains(IDS[2]))
        {
            switched = Some(stopped.elapsed());
            break;
        }
    }
    let switched = switched.unwrap_or_else(|| {
        panic!("connections from a still reach c {CONVERGE:?} after c was lost")
    });
    eprintln!(
        "lost_cluster_failover: all connections on b {:.1} s after c's apiserver stopped (grace {GRACE})",
        switched.as_secs_f64()
    );
    assert!(
        failed.is_empty(),
        "connections failed while c was being dropped: {failed:?}"
    );
    let answers = cs.connect(0, ns, &Dial::new(name, "tcp", 4, 80), 30);
    assert_routed(
        "cluster-a → svc after c was lost",
        &answers,
        &b_only,
        &IDS[1..2],
    );
    cs.dp.plane.apiservers[2].start();
    cs.wait_routed(0, ns, &Dial::new(name, "tcp", 4, 80), &IDS[1..])
        .await;
}

/// A killed run's namespaces (named after a process that is gone) are
/// removed with their processes and `/etc/netns` entries by the next start;
/// this run's own namespaces are left alone.
async fn leftovers_of_a_killed_run_are_removed(cs: &Clusterset) {
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    gone.wait().unwrap();
    let netns = format!("csd{}x0-r", gone.id());
    let ok = std::process::Command::new("ip")
        .args(["netns", "add", &netns])
        .status()
        .unwrap();
    assert!(ok.success(), "ip netns add {netns}");
    std::fs::create_dir_all(format!("/etc/netns/{netns}")).unwrap();
    std::fs::write(
        format!("/etc/netns/{netns}/resolv.conf"),
        "nameserver 10.0.0.10\n",
    )
    .unwrap();
    // A process that outlived its run (a pod's server whose test was killed).
    let mut orphan = std::process::Command::new("ip")
        .args(["netns", "exec", &netns, "sleep", "600"])
        .spawn()
        .unwrap();
    // Only once it has entered the namespace does the namespace hold it:
    // `ip netns exec` joins it before it runs `sleep`, under load later
    // than the next line.
    let orphan_pid = orphan.id().to_string();
    let entered = (0..100).any(|_| {
        let pids = std::process::Command::new("ip")
            .args(["netns", "pids", &netns])
            .output()
            .unwrap();
        let entered = String::from_utf8_lossy(&pids.stdout)
            .split_whitespace()
            .any(|pid| pid == orphan_pid);
        if !entered {
            std::thread::sleep(Duration::from_millis(100));
        }
        entered
    });
    if !entered {
        let _ = orphan.kill();
        panic!("the leftover process did not enter {netns} within 10 s");
    }
    dataplane::cleanup_leftovers();
    let status = orphan.try_wait().unwrap();
    let status = match status {
        Some(status) => status,
        None => {
            tokio::time::sleep(Duration::from_millis(500)).await;
            orphan.try_wait().unwrap().unwrap_or_else(|| {
                let _ = orphan.kill();
                panic!("the leftover namespace's process still runs")
            })
        }
    };
    assert!(
        !status.success(),
        "the leftover process was killed: {status}"
    );
    assert!(
        !std::path::Path::new(&format!("/run/netns/{netns}")).exists(),
        "{netns} still exists"
    );
    assert!(
        !std::path::Path::new(&format!("/etc/netns/{netns}")).exists(),
        "/etc/netns/{netns} still exists"
    );
    // Ours are untouched.
    let _ = cs;
    let ours = format!("csd{}x", std::process::id());
    let still: Vec<String> = std::fs::read_dir("/run/netns")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&ours))
        .collect();
    assert!(
        still.len() >= 7,
        "cleanup removed namespaces of this run: {still:?} are left"
    );
}
