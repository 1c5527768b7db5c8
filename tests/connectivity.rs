//! Packets through the clusterset IP: the connectivity checks of the
//! KEP-1645 test plan, on three member clusters with a data plane
//! (`tests/dataplane`: pods in network namespaces, a real kube-proxy per
//! node, pod CIDRs routed between clusters, cluster DNS at the kube-dns
//! ClusterIP), and per cluster the controller, clusterset-dns and CoreDNS as
//! shipped. Clusters a and c are IPv4, b is dual-stack.
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

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clusterset::{
    CONVERGE, Clusterset, Dial, IDS, PORTS, assert_routed, export_yaml, namespace_everywhere,
    ready_pods, server_yaml, service_yaml,
};
use controlplane::ClusterSpec;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use libtest_mimic::{Arguments, Failed, Trial};

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
    let behaviours: Vec<(&str, Behaviour)> = vec![
        ("reach_and_route", |cs| Box::pin(reach_and_route(cs))),
        ("not_exported_not_reachable", |cs| {
            Box::pin(not_exported_not_reachable(cs))
        }),
        ("local_service_not_impacted", |cs| {
            Box::pin(local_service_not_impacted(cs))
        }),
        ("port_conflicts", |cs| Box::pin(port_conflicts(cs))),
        ("headless_per_pod_names", |cs| {
            Box::pin(headless_per_pod_names(cs))
        }),
        ("ports_kept_current", |cs| Box::pin(ports_kept_current(cs))),
        ("exec_and_dns_inside_pods", |cs| {
            Box::pin(exec_and_dns_inside_pods(cs))
        }),
        ("pod_commands_expand_like_the_kubelet", |cs| {
            Box::pin(pod_commands_expand_like_the_kubelet(cs))
        }),
        ("without_root_it_fails_saying_so", |cs| {
            Box::pin(without_root_it_fails_saying_so(cs))
        }),
        ("leftovers_of_a_killed_run_are_removed", |cs| {
            Box::pin(leftovers_of_a_killed_run_are_removed(cs))
        }),
        ("lost_cluster_failover", |cs| {
            Box::pin(lost_cluster_failover(cs))
        }),
    ];
    let selected: Vec<&str> = behaviours
        .iter()
        .map(|(name, _)| *name)
        .filter(|name| args.filter.as_deref().is_none_or(|f| name.contains(f)))
        .filter(|name| !args.skip.iter().any(|s| name.contains(s.as_str())))
        .collect();
    let host_before = dataplane::host_network_snapshot();
    let clusterset = if args.list || selected.is_empty() {
        None
    } else {
        Some(Arc::new(std::sync::Mutex::new(runtime.block_on(
            Clusterset::start(
                &[
                    ClusterSpec::member(0),
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

type Behaviour =
    for<'a> fn(&'a mut Clusterset) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + 'a>>;

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
                let list = slices
                    .list(
                        &ListParams::default()
                            .labels(&format!("multicluster.kubernetes.io/service-name={name}")),
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                let sources: BTreeSet<String> = list
                    .items
                    .iter()
                    .filter_map(|s| {
                        s.metadata
                            .labels
                            .as_ref()?
                            .get("multicluster.kubernetes.io/source-cluster")
                            .cloned()
                    })
                    .collect();
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
        let deadline = Instant::now() + CONVERGE;
        loop {
            let out = std::process::Command::new(controlplane::binary("kubectl"))
                .arg("--kubeconfig")
                .arg(&cs.cluster(i).admin_kubeconfig)
                .args([
                    "exec",
                    "-n",
                    ns,
                    "client",
                    "--",
                    "nslookup",
                    "hello.exec.svc.clusterset.local",
                ])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            if out.status.success() && text.contains("Address: 10.") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{}: nslookup from the pod: {text}",
                id
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    let local = cs.kubectl(1, &["exec", "-n", ns, "client", "--", "nslookup", "hello"]);
    assert!(
        local.contains("hello.exec.svc.cluster.local"),
        "search path: {local}"
    );
    // nc, as a user would: the server answers on connect.
    let reply = cs.kubectl(
        0,
        &[
            "exec",
            "-n",
            ns,
            "client",
            "--",
            "nc",
            "-w",
            "2",
            "hello.exec.svc.clusterset.local",
            "80",
        ],
    );
    let answer = clusterset::Answer::parse(reply.trim())
        .unwrap_or_else(|| panic!("nc from a's pod: unexpected reply {reply:?}"));
    assert_eq!(answer.cluster, IDS[1], "nc reached {answer:?}");
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
    while stopped.elapsed() < CONVERGE {
        let answers = cs.connect(0, ns, &Dial::new(name, "tcp", 4, 80), 10);
        failed.extend(answers.iter().filter_map(|a| a.as_ref().err().cloned()));
        if answers.iter().flatten().all(|a| a.cluster == IDS[1])
            && answers.iter().all(Result::is_ok)
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
