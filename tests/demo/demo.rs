//! The local clusterset of `scripts/demo.sh`: three member clusters from the
//! test harness (`tests/controlplane`: etcd, and per cluster kube-apiserver,
//! kube-controller-manager, kube-scheduler and kwok; cluster b dual-stack),
//! with the data plane of `tests/dataplane` when running as root (pods in
//! network namespaces, kube-proxy per node, routed pod CIDRs, a `toolbox`
//! pod per cluster), and per cluster a `clusterset-dns controller`, a
//! `clusterset-dns serve` and a CoreDNS that forwards `clusterset.local` to
//! it. Beside them runs a hub (etcd, kube-apiserver and
//! kube-controller-manager, context `hub`): with `--hub` the members join
//! it (`clusterset-dns hub init`, `hub join`) and read each other there;
//! without, they peer as a mesh and the hub waits for a move to it
//! (docs/tutorials/06-mesh-to-hub.md).
//!
//! ```text
//! demo run STATE_DIR [--grace 20s] [--hub]
//!                                    start everything, deploy the sample app, write
//!                                    STATE_DIR/{env,kubeconfig,summary,ready}, run until
//!                                    SIGTERM/SIGINT (then stop everything)
//! demo ctl STATE_DIR REQUEST...      ask a running demo: stop-cluster X, start-cluster X, status
//! ```
//!
//! `scripts/demo.sh` builds this example and drives it; users never call it
//! directly. Every process it starts dies with it (`PR_SET_PDEATHSIG`), which
//! is what `scripts/demo.sh down` relies on.

#[path = "../controlplane/mod.rs"]
mod controlplane;
#[path = "../dataplane/mod.rs"]
mod dataplane;
#[path = "../support/mod.rs"]
mod support;

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use controlplane::{Cluster, ClusterSpec, ControlPlane, ControllerProcess, CoreDns, Serve};
use dataplane::DataPlane;
use hickory_proto::op::{Message, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};

/// The clusters' short names (kubectl contexts, `stop-cluster <name>`);
/// cluster `NAMES[i]` is the harness's cluster `i`. Cluster b is dual-stack.
const NAMES: [&str; 3] = ["a", "b", "c"];
/// The clusterset every cluster joins (ClusterProperty `clusterset.k8s.io`).
const CLUSTERSET: &str = "demo";
/// Lifetime of the tokens the demo hands out (controller, DNS server, peer
/// readers): long enough that a demo left `up` keeps working for a month.
const TOKEN_TTL_SECS: i64 = 30 * 24 * 3600;
/// How long the demo waits for the clusterset to converge at start.
const CONVERGE: Duration = Duration::from_secs(60);

/// The cluster id of cluster `name` (ClusterProperty
/// `cluster.clusterset.k8s.io`): the `<clusterid>` label of per-pod names.
fn cluster_id(name: &str) -> String {
    format!("cluster-{name}")
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("run") if args.len() >= 2 => {
            let state = PathBuf::from(&args[1]);
            let mut grace = "20s".to_owned();
            let mut hub = false;
            let mut rest = args[2..].iter();
            while let Some(arg) = rest.next() {
                match arg.as_str() {
                    "--hub" => hub = true,
                    "--grace" => grace = rest.next().unwrap_or_else(|| usage()).clone(),
                    _ => usage(),
                }
            }
            // One thread: the harness gives every child PR_SET_PDEATHSIG,
            // which fires when the *thread* that spawned it ends, so all
            // children are spawned from the main thread, which lives as long
            // as the process.
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a tokio runtime")
                .block_on(run(&state, &grace, hub));
        }
        Some("ctl") if args.len() >= 3 => {
            std::process::exit(ctl(Path::new(&args[1]), &args[2..].join(" ")));
        }
        _ => usage(),
    }
}

fn usage() -> ! {
    eprintln!(
        "usage: demo run STATE_DIR [--grace DURATION] [--hub] | demo ctl STATE_DIR REQUEST...\n\
         (scripts/demo.sh runs this; see its --help)"
    );
    std::process::exit(2);
}

/// Sends one request line to the running demo's control socket and prints
/// the answer; the exit code is 0 when the answer starts with `ok`.
fn ctl(state: &Path, request: &str) -> i32 {
    let socket = state.join("control.sock");
    let mut stream = match std::os::unix::net::UnixStream::connect(&socket) {
        Ok(stream) => stream,
        Err(e) => {
            eprintln!(
                "no demo answers on {}: {e} (is it up? scripts/demo.sh up)",
                socket.display()
            );
            return 1;
        }
    };
    writeln!(stream, "{request}").expect("write to the control socket");
    let mut answer = String::new();
    BufReader::new(stream)
        .read_line(&mut answer)
        .expect("read from the control socket");
    let answer = answer.trim_end();
    if let Some(message) = answer.strip_prefix("ok") {
        println!("{}", message.trim_start());
        0
    } else {
        eprintln!("{answer}");
        1
    }
}

/// The demo's clusters: with a data plane when this process may build
/// network namespaces (root), else names only.
enum Clusters {
    Routed(Box<DataPlane>),
    Loopback(ControlPlane),
}

impl Clusters {
    fn plane(&self) -> &ControlPlane {
        match self {
            Self::Routed(dp) => &dp.plane,
            Self::Loopback(plane) => plane,
        }
    }

    fn plane_mut(&mut self) -> &mut ControlPlane {
        match self {
            Self::Routed(dp) => &mut dp.plane,
            Self::Loopback(plane) => plane,
        }
    }
}

/// One member cluster of the demo and the processes that serve it.
struct Member {
    name: &'static str,
    /// `clusterset-dns serve`, killed on drop.
    serve: Serve,
    /// CoreDNS forwarding `clusterset.local` to `serve`.
    coredns: CoreDns,
    controller: ControllerProcess,
}

/// Runs `clusterset-dns <args>` (hub init, hub join); panics unless it
/// succeeds.
async fn clusterset_dns(args: &[&str]) {
    let output = tokio::process::Command::new(controlplane::clusterset_dns_binary())
        .args(args)
        .env_remove("KUBECONFIG")
        .output()
        .await
        .expect("run clusterset-dns");
    assert!(
        output.status.success(),
        "clusterset-dns {args:?}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

async fn run(state: &Path, grace: &str, through_hub: bool) {
    let t0 = Instant::now();
    let specs = [
        ClusterSpec::member(0),
        ClusterSpec::member_dual_stack(1),
        ClusterSpec::member(2),
    ];
    let clusters = match dataplane::missing_privileges() {
        None => {
            let dp = DataPlane::start(&specs).await;
            say(
                t0,
                "3 member clusters up (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, \
                 kwok) with a data plane (pods in network namespaces, kube-proxy on every node)",
            );
            Clusters::Routed(Box::new(dp))
        }
        Some(why) => {
            let plane = ControlPlane::start_with(&specs).await;
            say(
                t0,
                &format!(
                    "3 member clusters up, WITHOUT a data plane ({why}): names resolve, but pods \
                     run nothing and no connection can be made; run the demo as root for packets"
                ),
            );
            Clusters::Loopback(plane)
        }
    };
    let plane = clusters.plane();

    let mut controller_kubeconfigs = Vec::new();
    let mut serve_kubeconfigs = Vec::new();
    for (cluster, name) in plane.clusters.iter().zip(NAMES) {
        let client = cluster.admin_client().await;
        controlplane::set_cluster_properties(&client, &cluster_id(name), CLUSTERSET).await;
        // The CRDs and the shipped manifests; the harness's own controller
        // kubeconfig lasts an hour, so the demo asks for a longer one.
        controlplane::install_controller(cluster).await;
        controller_kubeconfigs.push(
            controlplane::write_token_kubeconfig(
                cluster,
                controlplane::CONTROLLER_SA,
                "controller-demo",
                TOKEN_TTL_SECS,
            )
            .await,
        );
        // The DNS server's role, exactly as deploy/rbac.yaml ships it.
        controlplane::apply_file(&client, &controlplane::deploy_file("rbac.yaml")).await;
        serve_kubeconfigs.push(
            controlplane::write_token_kubeconfig(
                cluster,
                "clusterset-dns",
                "serve",
                TOKEN_TTL_SECS,
            )
            .await,
        );
    }
    // The hub: a control plane of its own (its own etcd), no nodes.
    let hub = ControlPlane::start_with(&[ClusterSpec {
        crds: false,
        nodes: 0,
        ..ClusterSpec::member(3)
    }])
    .await;
    if through_hub {
        let hub_kubeconfig = hub.clusters[0].admin_kubeconfig.display().to_string();
        clusterset_dns(&["hub", "init", "--kubeconfig", &hub_kubeconfig]).await;
        for cluster in &plane.clusters {
            let member = cluster.admin_kubeconfig.display().to_string();
            let join = [
                &[
                    "hub",
                    "join",
                    "--kubeconfig",
                    &hub_kubeconfig,
                    "--member-kubeconfig",
                    &member,
                ][..],
                &controlplane::endpoint_range_args(cluster),
            ]
            .concat();
            clusterset_dns(&join).await;
        }
        say(t0, "a hub up; every cluster joined it (no peer Secret)");
    } else {
        controlplane::join_peers(&plane.clusters).await;
        say(
            t0,
            "a hub up beside them, unused: the clusters peer as a mesh",
        );
    }

    let mut members = Vec::new();
    for (i, name) in NAMES.into_iter().enumerate() {
        let cluster = &plane.clusters[i];
        let controller = controlplane::spawn_controller(
            cluster,
            &controller_kubeconfigs[i],
            &[
                "--peer-grace-period",
                grace,
                "--startup-sync-timeout",
                "10s",
            ],
        );
        let serve = Serve::spawn(cluster, &serve_kubeconfigs[i]);
        let coredns = match &clusters {
            Clusters::Routed(dp) => dp.start_cluster_dns(i, serve.dns).await,
            Clusters::Loopback(_) => CoreDns::start(&corefile(cluster, serve.dns)),
        };
        members.push(Member {
            name,
            serve,
            coredns,
            controller,
        });
    }
    for m in &members {
        m.controller.wait_ready(CONVERGE);
        m.serve.wait_ready(CONVERGE);
        wait_dns(m, "dns-version.clusterset.local.", RecordType::TXT, 1).await;
    }
    say(
        t0,
        "controllers, clusterset-dns and CoreDNS ready in every cluster",
    );

    deploy_sample_app(plane).await;
    for m in &members {
        wait_dns(m, "web.shop.svc.clusterset.local.", RecordType::A, 1).await;
        wait_dns(m, "db.shop.svc.clusterset.local.", RecordType::A, 4).await;
    }
    say(
        t0,
        "sample app shop/web and shop/db exported from a and b, resolvable everywhere",
    );
    if let Clusters::Routed(dp) = &clusters {
        deploy_toolboxes(dp).await;
        say(
            t0,
            "toolbox pods reach web.shop.svc.clusterset.local through the clusterset IP from every cluster",
        );
    }

    write_state(
        state,
        &clusters,
        &members,
        (grace, &hub.clusters[0], through_hub),
    );
    std::fs::write(state.join("ready"), format!("{}\n", std::process::id())).unwrap();
    say(t0, "ready");

    serve_control(state, clusters, members).await;
    drop(hub);
}

fn say(t0: Instant, what: &str) {
    eprintln!("demo: {:5.1} s  {what}", t0.elapsed().as_secs_f64());
}

/// The cluster DNS of `cluster` as a real cluster would run it: the
/// `kubernetes` plugin for `cluster.local` and the `clusterset.local` stub
/// domain forwarded to clusterset-dns (docs/deploy.md). `{port}` is filled
/// in by [`CoreDns::start`].
fn corefile(cluster: &Cluster, clusterset_dns: SocketAddr) -> String {
    format!(
        "cluster.local:{{port}} {{\n  bind 127.0.0.1\n  kubernetes cluster.local {{\n    kubeconfig {} {}\n  }}\n}}\n\
         clusterset.local:{{port}} {{\n  bind 127.0.0.1\n  forward . {clusterset_dns}\n}}\n",
        cluster.admin_kubeconfig.display(),
        cluster.name,
    )
}

/// The field manager of `kubectl apply --server-side`: the sample app is
/// applied as a user applies it, so the walkthrough's own re-apply of
/// tests/demo/db.yaml meets no conflict.
const KUBECTL: &str = "kubectl";

/// Namespace `shop` everywhere; `web` then `db` (tests/demo/*.yaml) in a
/// and b, one after the other so that pod IPs come out the same every run.
async fn deploy_sample_app(plane: &ControlPlane) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/demo");
    for cluster in &plane.clusters {
        let client = cluster.admin_client().await;
        controlplane::apply_file_as(&client, &dir.join("namespace.yaml"), KUBECTL).await;
    }
    for cluster in &plane.clusters[..2] {
        let client = cluster.admin_client().await;
        controlplane::apply_file_as(&client, &dir.join("web.yaml"), KUBECTL).await;
        cluster
            .wait_deployment_ready(&client, "shop", "web", 2)
            .await;
        controlplane::apply_file_as(&client, &dir.join("db.yaml"), KUBECTL).await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), "shop");
        cluster
            .wait_for("StatefulSet shop/db: 2 Ready pods", CONVERGE, || {
                let pods = pods.clone();
                async move {
                    let list = pods
                        .list(&ListParams::default().labels("app=db"))
                        .await
                        .map_err(|e| e.to_string())?;
                    let ready = list
                        .items
                        .iter()
                        .filter(|p| controlplane::pod_running_ready(p))
                        .count();
                    if ready == 2 {
                        Ok(())
                    } else {
                        Err(format!("{ready} of 2 ready"))
                    }
                }
            })
            .await;
    }
}

/// The `default/toolbox` pod in every cluster (tests/demo/toolbox.yaml), and
/// a wait until a connection from each reaches `shop/web` of both a and b
/// through the clusterset IP.
async fn deploy_toolboxes(dp: &DataPlane) {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/demo/toolbox.yaml");
    for cluster in &dp.plane.clusters {
        controlplane::apply_file(&cluster.admin_client().await, &manifest).await;
    }
    for (i, name) in NAMES.iter().enumerate() {
        let deadline = Instant::now() + CONVERGE;
        let mut seen = std::collections::BTreeSet::new();
        loop {
            if dp.pod_netns(i, "default", "toolbox").is_some() {
                let out = dp.sh_in_pod(
                    i,
                    "default",
                    "toolbox",
                    "for n in 1 2 3 4 5 6; do curl -s --max-time 2 web.shop.svc.clusterset.local || true; done",
                );
                for line in out.lines() {
                    if let Some(ip) = line.strip_prefix("web from 10.") {
                        seen.insert(ip.split('.').next().unwrap_or_default().to_owned());
                    }
                }
                if seen.contains("200") && seen.contains("201") {
                    break;
                }
            }
            assert!(
                Instant::now() < deadline,
                "cluster {name}: the toolbox pod does not reach shop/web in a and b (pod ranges \
                 seen: {seen:?}); data plane notes:\n{}",
                dp.notes().join("\n")
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// Waits until `m`'s CoreDNS answers `name` `rtype` with exactly `count`
/// records; exits the demo (dropping everything) when it does not in time.
async fn wait_dns(m: &Member, name: &str, rtype: RecordType, count: usize) {
    let deadline = Instant::now() + CONVERGE;
    loop {
        let got = lookup(m.coredns.addr, name, rtype).await;
        if matches!(&got, Ok(records) if records.len() == count) {
            return;
        }
        if Instant::now() > deadline {
            panic!(
                "cluster {}: {name} {rtype} through CoreDNS {}: want {count} records, got {got:?}; \
                 clusterset-dns log:\n{}\ncontroller log:\n{}",
                m.name,
                m.coredns.addr,
                std::fs::read_to_string(m.controller.log_path().with_file_name("serve.log"))
                    .unwrap_or_default(),
                m.controller.log()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One UDP query: the answer's records as text (addresses for A/AAAA), or
/// why there is none.
async fn lookup(server: SocketAddr, name: &str, rtype: RecordType) -> Result<Vec<String>, String> {
    let mut query = Message::query();
    query.metadata.recursion_desired = true;
    query.add_query(Query::query(Name::from_ascii(name).unwrap(), rtype));
    let bytes = query.to_vec().map_err(|e| e.to_string())?;
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    socket.connect(server).await.map_err(|e| e.to_string())?;
    socket.send(&bytes).await.map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; 65535];
    let n = tokio::time::timeout(Duration::from_secs(1), socket.recv(&mut buf))
        .await
        .map_err(|_| "no answer within 1 s".to_owned())?
        .map_err(|e| e.to_string())?;
    let response = Message::from_vec(&buf[..n]).map_err(|e| e.to_string())?;
    if response.metadata.response_code != ResponseCode::NoError {
        return Err(response.metadata.response_code.to_string());
    }
    Ok(response
        .answers
        .iter()
        .map(|r| match &r.data {
            RData::A(a) => a.0.to_string(),
            RData::AAAA(a) => a.0.to_string(),
            other => other.to_string(),
        })
        .collect())
}

/// Writes what users need into the state directory: `kubeconfig` (contexts
/// a, b, c with the admin token), `bin/kubectl`, `cluster-<x>` links to each
/// cluster's logs, `env` (for `source`) and `summary` (what `up` prints).
fn write_state(
    state: &Path,
    clusters: &Clusters,
    members: &[Member],
    (grace, hub, through_hub): (&str, &Cluster, bool),
) {
    let plane = clusters.plane();
    let data_plane = match clusters {
        Clusters::Routed(_) => "1",
        Clusters::Loopback(_) => "",
    };
    let mut clusters = String::new();
    let mut contexts = String::new();
    for (cluster, m) in plane.clusters.iter().zip(members) {
        let server = controlplane::apiserver_url(cluster);
        clusters += &format!(
            "- name: {0}\n  cluster:\n    server: {server}\n    insecure-skip-tls-verify: true\n",
            m.name
        );
        contexts += &format!(
            "- name: {0}\n  context:\n    cluster: {0}\n    user: admin\n",
            m.name
        );
        let link = state.join(format!("cluster-{}", m.name));
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&cluster.dir, &link).unwrap();
    }
    // The hub, as context `hub`, with its CA: `hub join` hands it on to
    // the members' controllers.
    let hub_kubeconfig = kube::config::Kubeconfig::read_from(&hub.admin_kubeconfig).unwrap();
    let hub_cluster = hub_kubeconfig.clusters[0].cluster.clone().unwrap();
    clusters += &format!(
        "- name: hub\n  cluster:\n    server: {}\n{}",
        hub_cluster.server.unwrap_or_default(),
        match hub_cluster.certificate_authority_data {
            Some(ca) => format!("    certificate-authority-data: {ca}\n"),
            None => "    insecure-skip-tls-verify: true\n".to_owned(),
        }
    );
    contexts += "- name: hub\n  context:\n    cluster: hub\n    user: admin\n";
    let link = state.join("hub");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&hub.dir, &link).unwrap();
    let kubeconfig = state.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n{clusters}users:\n- name: admin\n  user:\n    token: {}\n\
             contexts:\n{contexts}current-context: a\n",
            controlplane::ADMIN_TOKEN
        ),
    )
    .unwrap();
    let bin = state.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let kubectl = bin.join("kubectl");
    let _ = std::fs::remove_file(&kubectl);
    std::os::unix::fs::symlink(controlplane::binary("kubectl"), &kubectl).unwrap();
    let cli = bin.join("clusterset-dns");
    let _ = std::fs::remove_file(&cli);
    std::os::unix::fs::symlink(controlplane::clusterset_dns_binary(), &cli).unwrap();

    let (mode, mode_line) = if through_hub {
        ("hub", "through the hub (context hub): no peer Secret")
    } else {
        (
            "mesh",
            "a mesh (peer Secrets); a hub runs beside it, unused (context hub)",
        )
    };
    let mut env = format!(
        "# The clusterset-dns demo (scripts/demo.sh). Use: source <(scripts/demo.sh env)\n\
         export CLUSTERSET_DNS_DEMO_DIR='{}'\nexport KUBECONFIG='{}'\nexport PATH='{}':\"$PATH\"\n\
         export DEMO_GRACE_PERIOD='{grace}'\nexport DEMO_DATA_PLANE='{data_plane}'\n\
         export DEMO_MODE='{mode}'\n",
        state.display(),
        kubeconfig.display(),
        bin.display()
    );
    let data_plane_line = if data_plane.is_empty() {
        "none (not root): names only, pods run nothing"
    } else {
        "pods run; kubectl --context c exec toolbox -- curl -s web.shop.svc.clusterset.local"
    };
    let mut summary = format!(
        "kubeconfig  {}   (contexts a, b, c and hub; kubectl --context b ...)\n\
         kubectl     {}\npeer grace  {grace}   (a lost cluster's endpoints are dropped after this)\n\
         data plane  {data_plane_line}\n\
         clusterset  {mode_line}\n\n\
         cluster  id         apiserver                CoreDNS (dig -p)  clusterset-dns    logs\n",
        kubeconfig.display(),
        kubectl.display()
    );
    for (cluster, m) in plane.clusters.iter().zip(members) {
        let upper = m.name.to_uppercase();
        env += &format!(
            "export DNS_{upper}={}   # cluster {}'s CoreDNS: dig @127.0.0.1 -p $DNS_{upper}\n",
            m.coredns.addr.port(),
            m.name
        );
        summary += &format!(
            "{:<8} {:<10} {:<24} {:<17} {:<17} {}\n",
            m.name,
            cluster_id(m.name),
            controlplane::apiserver_url(cluster),
            m.coredns.addr,
            m.serve.dns,
            state.join(format!("cluster-{}", m.name)).display()
        );
    }
    std::fs::write(state.join("env"), env).unwrap();
    std::fs::write(state.join("summary"), summary).unwrap();
}

/// Answers control requests until SIGTERM or SIGINT, then drops everything
/// (processes first, then the clusters).
async fn serve_control(state: &Path, mut clusters: Clusters, members: Vec<Member>) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    use tokio::signal::unix::{SignalKind, signal};
    let socket = state.join("control.sock");
    let _ = std::fs::remove_file(&socket);
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    let mut term = signal(SignalKind::terminate()).unwrap();
    let mut int = signal(SignalKind::interrupt()).unwrap();
    loop {
        let stream = tokio::select! {
            _ = term.recv() => break,
            _ = int.recv() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => continue,
            },
        };
        let (read, mut write) = stream.into_split();
        let mut line = String::new();
        if tokio::io::BufReader::new(read)
            .read_line(&mut line)
            .await
            .is_err()
        {
            continue;
        }
        let answer = control(clusters.plane_mut(), line.trim());
        let _ = write.write_all(format!("{answer}\n").as_bytes()).await;
    }
    eprintln!("demo: stopping");
    drop(members);
    drop(clusters);
}

/// One control request: `stop-cluster X`, `start-cluster X`, `status`.
fn control(plane: &mut ControlPlane, request: &str) -> String {
    let words: Vec<&str> = request.split_whitespace().collect();
    let index = |name: &str| {
        let name = name.strip_prefix("cluster-").unwrap_or(name);
        NAMES.iter().position(|n| *n == name)
    };
    match words.as_slice() {
        ["stop-cluster", name] => match index(name) {
            Some(i) if plane.apiservers[i].pid().is_none() => {
                format!("ok cluster {} is already stopped", NAMES[i])
            }
            Some(i) => {
                plane.apiservers[i].stop();
                format!(
                    "ok cluster {}: kube-apiserver stopped (its other processes keep running)",
                    NAMES[i]
                )
            }
            None => format!("error: no cluster {name:?} (a, b or c)"),
        },
        ["start-cluster", name] => match index(name) {
            Some(i) if plane.apiservers[i].pid().is_some() => {
                format!("ok cluster {} is already running", NAMES[i])
            }
            Some(i) => {
                plane.apiservers[i].start();
                format!("ok cluster {}: kube-apiserver ready again", NAMES[i])
            }
            None => format!("error: no cluster {name:?} (a, b or c)"),
        },
        ["status"] => {
            let states: Vec<String> = NAMES
                .iter()
                .enumerate()
                .map(|(i, n)| {
                    let up = plane.apiservers[i].pid().is_some();
                    format!("{n}={}", if up { "running" } else { "stopped" })
                })
                .collect();
            format!("ok {}", states.join(" "))
        }
        _ => {
            format!("error: unknown request {request:?} (stop-cluster X, start-cluster X, status)")
        }
    }
}
