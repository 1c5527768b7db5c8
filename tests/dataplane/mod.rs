//! A data plane for the member clusters of `tests/controlplane`: pods that
//! run and route, a real kube-proxy on every node, and cluster DNS at the
//! kube-dns ClusterIP, all in network namespaces of this host.
//!
//! ```text
//!  host: apiservers, CoreDNS, clusterset-dns, controllers on 10.250.S.1 (one veth end)
//!    │ csd<pid>x<k>  ⇄  host
//!  router namespace: a /32 (/128) route per node and per pod; masquerades towards the host
//!    │ c<i>n<j>  ⇄  eth0
//!  node namespace per kwok Node: kube-proxy (nftables), a /32 (/128) route per pod
//!    │ p<N>  ⇄  eth0
//!  pod namespace per Running pod: its IPs, default route to the node; its
//!  containers' commands run here as host processes
//! ```
//!
//! Every pod CIDR routes to every cluster through the router (the flat,
//! routed clusterset the MCS API assumes); service CIDRs stay inside each
//! node, where kube-proxy turns them into pod IPs. Nothing here is a CNI:
//! the routes are written by [`DataPlane`] as pods come and go.
//!
//! What runs: a pod's containers' `command` + `args` (with `$(VAR)`
//! expansion) as ordinary processes under `ip netns exec`, with the pod's
//! `env` (plain values and the `fieldRef`s [`field_ref`] knows). Images are
//! never pulled: a container without a `command`, or whose command is not on
//! this host, gets a network but runs nothing, and the test log says so.
//! `kubectl exec` runs in the pod's namespace with the cluster's DNS as its
//! resolver (kwok's exec, a per-pod `Exec` object and [`EXEC_COMMANDS`]
//! wrappers). No container isolation besides the network: processes share
//! the host's filesystem, users and hostname.
//!
//! Hygiene: only namespaces, links, addresses and routes made here (the
//! host gets one veth end and its /30); everything is removed on drop (also
//! when a test panics); a killed run's namespaces (`csd<pid>x…` of a process
//! that is gone) are removed, with their processes, by the next start.

#![allow(dead_code)] // each test binary uses a different part

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};

use crate::controlplane::{self, ClusterSpec, ControlPlane, CoreDns};

/// Commands `kubectl exec` runs inside the pod's network namespace (each a
/// wrapper first on kwok's `PATH`); any other command runs on the host.
pub(crate) const EXEC_COMMANDS: [&str; 18] = [
    "sh", "bash", "nslookup", "dig", "host", "nc", "curl", "socat", "ip", "ss", "cat", "env",
    "getent", "seq", "sleep", "echo", "true", "hostname",
];

/// The host's address on the data plane's veth is 10.250.<slot>.1/30.
const HOST_NET: [u8; 2] = [10, 250];
/// Node `j` of cluster `i` has 10.251.i.(j+1) (and fd00:251:i::(j+1)).
const NODE_NET: [u8; 2] = [10, 251];
/// kube-proxy's health port inside every node namespace.
const KUBE_PROXY_HEALTHZ: u16 = 10256;

/// Member clusters with a data plane. Drop order: pod processes, kube-proxy,
/// the control plane, then the namespaces.
pub(crate) struct DataPlane {
    runner: Option<PodRunner>,
    proxies: Vec<NodeProxy>,
    /// The clusters (apiservers on [`DataPlane::host_ip`]).
    pub plane: ControlPlane,
    /// The cluster DNS ClusterIP of each cluster (`kube-system/kube-dns`).
    pub dns_ips: Vec<IpAddr>,
    net: Links,
    dir: tempfile::TempDir,
}

/// kube-proxy in one node namespace.
struct NodeProxy {
    child: Mutex<Child>,
    log: PathBuf,
    netns: String,
}

impl Drop for NodeProxy {
    fn drop(&mut self) {
        let child = self.child.get_mut().unwrap();
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// One node namespace: where its pods attach and kube-proxy runs.
#[derive(Clone, Debug)]
pub(crate) struct NodeNet {
    /// Cluster index.
    pub cluster: usize,
    /// The kwok Node's name.
    pub name: String,
    /// Its network namespace.
    pub netns: String,
    /// Its link in the router namespace.
    router_link: String,
    /// Its addresses (IPv4, IPv6) on the link to the router.
    pub ipv4: Ipv4Addr,
    pub ipv6: std::net::Ipv6Addr,
}

impl Drop for DataPlane {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for p in &self.proxies {
                eprintln!(
                    "---- kube-proxy in {} ----\n{}",
                    p.netns,
                    controlplane::tail(&p.log)
                );
            }
        }
        drop(self.runner.take());
        self.proxies.clear();
        // The control plane goes with the struct's fields, then `net`,
        // whose Drop deletes the namespaces.
    }
}

impl DataPlane {
    /// Starts the clusters of `specs` (member clusters) with a data plane:
    /// apiservers on the host end of the data plane's veth, a namespace and
    /// a kube-proxy per Node, the `kube-dns` Service, and the pod runner.
    /// Panics, saying what is missing, without root or `ip`/`nft`.
    pub(crate) async fn start(specs: &[ClusterSpec]) -> Self {
        preflight();
        cleanup_leftovers();
        let dir = tempfile::tempdir().unwrap();
        let net = Links::create();
        let exec_path = dir.path().join("exec-bin");
        write_exec_wrappers(&exec_path);
        let plane = ControlPlane::start_networked(
            specs,
            &controlplane::Network {
                bind: Some(IpAddr::V4(net.host_ip)),
                exec_path: Some(exec_path),
            },
        )
        .await;
        let mut nodes = Vec::new();
        for cluster in &plane.clusters {
            let client = cluster.admin_client().await;
            let list = Api::<Node>::all(client)
                .list(&ListParams::default())
                .await
                .unwrap();
            let mut names: Vec<String> = list
                .items
                .iter()
                .filter_map(|n| n.metadata.name.clone())
                .collect();
            names.sort();
            for (j, name) in names.into_iter().enumerate() {
                nodes.push(net.add_node(cluster.index, j, name));
            }
        }
        let mut dns_ips = Vec::new();
        for cluster in &plane.clusters {
            dns_ips.push(create_dns_service(cluster).await);
        }
        let proxies: Vec<NodeProxy> = nodes
            .iter()
            .map(|node| start_kube_proxy(&plane.clusters[node.cluster], node))
            .collect();
        let deadline = Instant::now() + Duration::from_secs(60);
        for p in &proxies {
            wait_kube_proxy(p, deadline);
        }
        let runner = PodRunner::start(
            &plane,
            &nodes,
            &dns_ips,
            net.router.clone(),
            dir.path().join("pods"),
        );
        Self {
            runner: Some(runner),
            proxies,
            plane,
            dns_ips,
            net,
            dir,
        }
    }

    /// The host's address on the data plane: where the apiservers listen
    /// and where cluster DNS (CoreDNS) must bind to be reachable from pods.
    pub(crate) fn host_ip(&self) -> IpAddr {
        IpAddr::V4(self.net.host_ip)
    }

    /// Starts cluster `i`'s DNS the way a real cluster runs it: CoreDNS
    /// (`kubernetes` plugin for `cluster.local`, the `clusterset.local`
    /// stub domain forwarded to `clusterset_dns`) on [`DataPlane::host_ip`],
    /// behind the `kube-dns` ClusterIP that pods' `resolv.conf` names (a
    /// selector-less EndpointSlice points at it; kube-proxy does the rest).
    /// It also listens on 127.0.0.1 (its `addr`), for `dig` on the host.
    pub(crate) async fn start_cluster_dns(&self, i: usize, clusterset_dns: SocketAddr) -> CoreDns {
        let cluster = &self.plane.clusters[i];
        let corefile = format!(
            "cluster.local:{{port}} {{\n  bind 127.0.0.1 {host}\n  kubernetes cluster.local {{\n    kubeconfig {} {}\n  }}\n}}\n\
             clusterset.local:{{port}} {{\n  bind 127.0.0.1 {host}\n  forward . {clusterset_dns}\n}}\n",
            cluster.admin_kubeconfig.display(),
            cluster.name,
            host = self.host_ip(),
        );
        let coredns = CoreDns::start(&corefile);
        let client = cluster.admin_client().await;
        let slice = serde_json::json!({
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": "kube-dns-host",
                "namespace": "kube-system",
                "labels": {
                    "kubernetes.io/service-name": "kube-dns",
                    "endpointslice.kubernetes.io/managed-by": controlplane::TEST_FIELD_MANAGER,
                },
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [self.host_ip().to_string()], "conditions": {"ready": true}}],
            "ports": [
                {"name": "dns", "protocol": "UDP", "port": coredns.addr.port()},
                {"name": "dns-tcp", "protocol": "TCP", "port": coredns.addr.port()},
            ],
        });
        let api: Api<kube::api::DynamicObject> = Api::namespaced_with(
            client,
            "kube-system",
            &kube::api::ApiResource::erase::<k8s_openapi::api::discovery::v1::EndpointSlice>(&()),
        );
        let _ = api.delete("kube-dns-host", &Default::default()).await;
        api.create(&Default::default(), &serde_json::from_value(slice).unwrap())
            .await
            .unwrap_or_else(|e| {
                panic!("{}: creating the kube-dns EndpointSlice: {e}", cluster.name)
            });
        coredns
    }

    /// The network namespace of pod `ns/name` of cluster `i`, once it runs.
    pub(crate) fn pod_netns(&self, i: usize, ns: &str, name: &str) -> Option<String> {
        self.runner.as_ref()?.netns_of(i, ns, name)
    }

    /// Waits until pod `ns/name` of cluster `i` has its namespace and
    /// something listens on `port` (`tcp` or `udp`) inside it; returns the
    /// namespace. Panics with the pod runner's notes on timeout.
    pub(crate) fn wait_listening(
        &self,
        i: usize,
        ns: &str,
        name: &str,
        proto: &str,
        port: u16,
    ) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            self.assert_healthy();
            if let Some(netns) = self.pod_netns(i, ns, name) {
                let flag = if proto == "udp" { "-Hlun" } else { "-Hltn" };
                let out = Command::new("ip")
                    .args(["netns", "exec", &netns, "ss", flag])
                    .arg(format!("sport = :{port}"))
                    .output()
                    .expect("run ss");
                if !String::from_utf8_lossy(&out.stdout).trim().is_empty() {
                    return netns;
                }
            }
            assert!(
                Instant::now() < deadline,
                "cluster{i} pod {ns}/{name}: nothing listens on {proto}/{port} after 30 s \
                 (namespace {:?}); pod runner notes:\n{}",
                self.pod_netns(i, ns, name),
                self.notes().join("\n")
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Runs `sh -c script` inside pod `ns/name` of cluster `i` (its network
    /// namespace and resolv.conf), as `kubectl exec` does but without the
    /// apiserver; returns stdout, panics with stderr on failure.
    pub(crate) fn sh_in_pod(&self, i: usize, ns: &str, name: &str, script: &str) -> String {
        let netns = self
            .pod_netns(i, ns, name)
            .unwrap_or_else(|| panic!("cluster{i} pod {ns}/{name} has no network namespace"));
        let out = Command::new("ip")
            .args(["netns", "exec", &netns, "sh", "-c", script])
            .stdin(Stdio::null())
            .output()
            .expect("run ip netns exec");
        assert!(
            out.status.success(),
            "cluster{i} pod {ns}/{name}: `{script}` failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// What the pod runner noticed: containers it could not run, processes
    /// that exited, API errors.
    pub(crate) fn notes(&self) -> Vec<String> {
        self.runner
            .as_ref()
            .map(|r| r.state.lock().unwrap().notes.clone())
            .unwrap_or_default()
    }

    /// Panics if a kube-proxy exited or the pod runner hit an error it
    /// cannot recover from.
    pub(crate) fn assert_healthy(&self) {
        for p in &self.proxies {
            let exited = p.child.lock().unwrap().try_wait().ok().flatten();
            assert!(
                exited.is_none(),
                "kube-proxy in {} exited; log:\n{}",
                p.netns,
                controlplane::tail(&p.log)
            );
        }
        if let Some(runner) = &self.runner {
            let state = runner.state.lock().unwrap();
            assert!(
                state.fatal.is_none(),
                "pod runner failed: {}",
                state.fatal.as_deref().unwrap_or_default()
            );
        }
    }

    /// A scratch directory that lives as long as the data plane (pod logs
    /// are under `pods/`).
    pub(crate) fn dir(&self) -> &Path {
        self.dir.path()
    }
}

// ---------------------------------------------------------------------------
// Links and namespaces.
// ---------------------------------------------------------------------------

/// The namespaces and links of one data plane; deleting the router takes
/// the host's veth end with it.
struct Links {
    /// `csd<pid>x<k>`: prefix of every namespace, and the host veth's name.
    prefix: String,
    host_ip: Ipv4Addr,
    router: String,
    /// Every namespace made (router first), deleted in reverse on drop.
    namespaces: Mutex<Vec<String>>,
}

impl Links {
    /// The router namespace and the host's veth to it.
    fn create() -> Self {
        use std::sync::atomic::{AtomicU32, Ordering};
        static COUNT: AtomicU32 = AtomicU32::new(0);
        let k = COUNT.fetch_add(1, Ordering::Relaxed);
        let prefix = format!("csd{}x{k}", std::process::id());
        let slot = free_slot();
        let host_ip = Ipv4Addr::new(HOST_NET[0], HOST_NET[1], slot, 1);
        let router_ip = Ipv4Addr::new(HOST_NET[0], HOST_NET[1], slot, 2);
        let router = format!("{prefix}-r");
        let links = Self {
            prefix: prefix.clone(),
            host_ip,
            router: router.clone(),
            namespaces: Mutex::new(Vec::new()),
        };
        links.add_netns(&router);
        ip(&format!(
            "link add {prefix} type veth peer name host netns {router}"
        ));
        ip(&format!("addr add {host_ip}/30 dev {prefix}"));
        ip(&format!("link set {prefix} up"));
        ip_in(&router, &format!("addr add {router_ip}/30 dev host"));
        ip_in(&router, "link set host up");
        forwarding(&router);
        // Replies from the host must come back here without any route on
        // the host: everything leaving towards it takes the router's address.
        nft_in(
            &router,
            "table ip csd-router {\n  chain post {\n    type nat hook postrouting priority srcnat; policy accept;\n    oifname \"host\" masquerade\n  }\n}\n",
        );
        links
    }

    fn add_netns(&self, name: &str) {
        ip(&format!("netns add {name}"));
        self.namespaces.lock().unwrap().push(name.to_owned());
        ip_in(name, "link set lo up");
    }

    /// Node `j` of cluster `i`: its namespace, linked to the router.
    fn add_node(&self, i: usize, j: usize, name: String) -> NodeNet {
        let netns = format!("{}-c{i}n{j}", self.prefix);
        let router_link = format!("c{i}n{j}");
        let ipv4 = Ipv4Addr::new(NODE_NET[0], NODE_NET[1], i as u8, j as u8 + 1);
        let ipv6: std::net::Ipv6Addr = format!("fd00:251:{i:x}::{:x}", j + 1).parse().unwrap();
        self.add_netns(&netns);
        // The router's end is the node's gateway (169.254.0.1, fe80::1);
        // the node's own end is fe80::2, the next hop of its routes there.
        veth(&self.router, &router_link, &netns, "169.254.0.1", "fe80::1");
        ip_in(&netns, &format!("addr add {ipv4}/32 dev eth0"));
        ip_in(&netns, "addr add fe80::2/64 dev eth0 nodad");
        ip_in(&netns, &format!("addr add {ipv6}/128 dev eth0 nodad"));
        default_routes(&netns, "169.254.0.1", true);
        ip_in(
            &self.router,
            &format!("route add {ipv4}/32 dev {router_link}"),
        );
        ip_in(
            &self.router,
            &format!("-6 route add {ipv6}/128 via fe80::2 dev {router_link}"),
        );
        forwarding(&netns);
        NodeNet {
            cluster: i,
            name,
            netns,
            router_link,
            ipv4,
            ipv6,
        }
    }
}

/// A veth pair: `link` in `netns` (holding the gateway addresses `gw4` and
/// `gw6` of the other end, up) and `eth0` in `peer` (up, no address yet).
fn veth(netns: &str, link: &str, peer: &str, gw4: &str, gw6: &str) {
    ip_in(
        netns,
        &format!("link add {link} type veth peer name eth0 netns {peer}"),
    );
    ip_in(netns, &format!("addr add {gw4}/32 dev {link}"));
    ip_in(netns, &format!("addr add {gw6}/64 dev {link} nodad"));
    ip_in(netns, &format!("link set {link} up"));
    ip_in(peer, "link set eth0 up");
}

/// Default routes of `netns` out of `eth0`: IPv4 via `gw4` (an on-link
/// address: every address here is a /32), IPv6 via fe80::1 when `v6`.
fn default_routes(netns: &str, gw4: &str, v6: bool) {
    ip_in(netns, &format!("route add {gw4} dev eth0 scope link"));
    ip_in(netns, &format!("route add default via {gw4} dev eth0"));
    if v6 {
        ip_in(netns, "-6 route add default via fe80::1 dev eth0");
    }
}

impl Drop for Links {
    fn drop(&mut self) {
        let namespaces = std::mem::take(&mut *self.namespaces.lock().unwrap());
        for netns in namespaces.iter().rev() {
            remove_netns(netns);
        }
        // A namespace is destroyed asynchronously, and its veth ends with
        // it; the host's end goes now.
        let _ = Command::new("ip")
            .args(["link", "delete", &self.prefix])
            .stderr(Stdio::null())
            .status();
    }
}

/// IP forwarding on, reverse-path filtering off (pods answer from
/// addresses the node has only a /32 route for).
fn forwarding(netns: &str) {
    sh_in(
        netns,
        "echo 1 > /proc/sys/net/ipv4/ip_forward && \
         echo 1 > /proc/sys/net/ipv6/conf/all/forwarding && \
         echo 0 > /proc/sys/net/ipv4/conf/all/rp_filter && \
         echo 0 > /proc/sys/net/ipv4/conf/default/rp_filter",
    );
}

/// A /30 in 10.250.0.0/16 that no host address or route (other than the
/// default route) covers, so that the host's own routing is untouched.
fn free_slot() -> u8 {
    let start = (std::process::id() % 256) as u16;
    for offset in 0..256u16 {
        let slot = ((start + offset) % 256) as u8;
        let host = format!("{}.{}.{slot}.1", HOST_NET[0], HOST_NET[1]);
        let routes = Command::new("ip")
            .args(["-4", "-o", "route", "show", "table", "all", "match", &host])
            .output()
            .expect("run ip route");
        let covered = String::from_utf8_lossy(&routes.stdout).lines().any(|l| {
            !l.starts_with("default") && !l.starts_with("broadcast") && !l.trim().is_empty()
        });
        if !covered {
            return slot;
        }
    }
    panic!("no free /30 in 10.250.0.0/16 for the data plane's host link");
}

/// Fails (never skips) when this process cannot build network namespaces.
fn preflight() {
    if let Some(why) = missing_privileges() {
        panic!("{why}");
    }
}

/// Why this process cannot build a data plane (no root, a tool missing,
/// namespaces refused), or `None` when it can.
pub(crate) fn missing_privileges() -> Option<String> {
    #[allow(unsafe_code)]
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        return Some(format!(
            "the data plane creates network namespaces, veth pairs and nftables rules inside \
             them, which needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN); this process runs as uid \
             {euid}. Run scripts/test.sh as root (CI does)"
        ));
    }
    for (tool, package) in [("ip", "iproute2"), ("nft", "nftables"), ("ss", "iproute2")] {
        let found = Command::new(tool)
            .arg("-V")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok();
        if !found {
            return Some(format!(
                "`{tool}` not found: the data plane needs it (kube-proxy's nftables mode runs \
                 `nft`); `apt-get install {package}` (scripts/test.sh installs it)"
            ));
        }
    }
    let probe = format!("csd{}probe", std::process::id());
    let made = Command::new("ip")
        .args(["netns", "add", &probe])
        .stderr(Stdio::piped())
        .output()
        .expect("run ip netns add");
    if !made.status.success() {
        return Some(format!(
            "cannot create a network namespace (`ip netns add`): {}",
            String::from_utf8_lossy(&made.stderr).trim()
        ));
    }
    let _ = Command::new("ip")
        .args(["netns", "delete", &probe])
        .status();
    None
}

/// Removes the namespaces (and their processes) a killed run left: names
/// `csd<pid>x…` whose process is gone. [`DataPlane::start`] calls it.
pub(crate) fn cleanup_leftovers() {
    let Ok(entries) = std::fs::read_dir("/run/netns") else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix("csd") else {
            continue;
        };
        let pid: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let Ok(pid) = pid.parse::<u32>() else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        eprintln!("dataplane: removing {name}, left by process {pid}, which is gone");
        remove_netns(&name);
    }
}

/// The host's own network configuration, for checking that a data plane
/// left it as it was: links (name, state, address), IPv4 and IPv6 routes of
/// every table (without the lifetimes of autoconfigured ones) and the
/// nftables ruleset.
pub(crate) fn host_network_snapshot() -> String {
    let run = |args: &[&str]| {
        let out = Command::new(args[0]).args(&args[1..]).output();
        out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_else(|e| format!("{args:?}: {e}"))
    };
    let routes = |family: &str| {
        run(&["ip", family, "route", "show", "table", "all"])
            .lines()
            .map(|l| {
                let words: Vec<&str> = l.split_whitespace().collect();
                let mut kept = Vec::new();
                let mut skip = false;
                for w in words {
                    if skip {
                        skip = false;
                    } else if w == "expires" {
                        skip = true;
                    } else {
                        kept.push(w);
                    }
                }
                kept.join(" ") + "\n"
            })
            .collect::<String>()
    };
    let snapshot = format!(
        "links:\n{}\nIPv4 routes:\n{}\nIPv6 routes:\n{}\nnftables:\n{}",
        run(&["ip", "-br", "link", "show"]),
        routes("-4"),
        routes("-6"),
        run(&["nft", "list", "ruleset"])
    );
    // Another run's host veth ends (a second test process on the machine)
    // come and go on their own: they are not this run's to keep or remove.
    snapshot
        .lines()
        .filter(|line| !line.split_whitespace().any(of_another_run))
        .map(|line| format!("{line}\n"))
        .collect()
}

/// Whether `word` names a device of another run: `csd<pid>x…` or
/// `csd<pid>probe` (the names this module gives its host-side devices) with
/// a pid not ours.
fn of_another_run(word: &str) -> bool {
    let Some(rest) = word.strip_prefix("csd") else {
        return false;
    };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    !digits.is_empty()
        && (rest[digits.len()..].starts_with('x') || rest[digits.len()..].starts_with("probe"))
        && digits != std::process::id().to_string()
}

/// Runs `f` on a thread that has entered network namespace `netns`
/// (`setns`): sockets it opens are the pod's or node's, as for a process
/// inside it, without a process per connection. The host's resolver is not
/// the pod's: resolve through the cluster DNS address explicitly.
pub(crate) fn in_netns<T: Send>(netns: &str, f: impl FnOnce() -> T + Send) -> T {
    use std::os::fd::AsRawFd;
    let file = std::fs::File::open(format!("/run/netns/{netns}"))
        .unwrap_or_else(|e| panic!("opening network namespace {netns}: {e}"));
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                #[allow(unsafe_code)]
                // SAFETY: setns on this thread only; the fd is open for the call.
                let entered = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
                assert_eq!(
                    entered,
                    0,
                    "setns into {netns}: {}",
                    std::io::Error::last_os_error()
                );
                f()
            })
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// Kills every process in `netns`, deletes it and its `/etc/netns` entry.
fn remove_netns(netns: &str) {
    for _ in 0..10 {
        let pids = Command::new("ip")
            .args(["netns", "pids", netns])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        let pids: Vec<i32> = pids
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
        if pids.is_empty() {
            break;
        }
        for pid in pids {
            #[allow(unsafe_code)]
            // SAFETY: kill has no memory-safety preconditions.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = Command::new("ip")
        .args(["netns", "delete", netns])
        .stderr(Stdio::null())
        .status();
    let _ = std::fs::remove_dir_all(format!("/etc/netns/{netns}"));
}

fn run(program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {program}: {e}"));
    assert!(
        out.status.success(),
        "`{program} {}` failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

/// `ip COMMAND` on the host (only for the data plane's own link and
/// namespaces); `command` is split at whitespace (no argument here has any).
fn ip(command: &str) {
    run("ip", &command.split_whitespace().collect::<Vec<_>>());
}

/// `ip -n NETNS COMMAND`.
fn ip_in(netns: &str, command: &str) {
    ip(&format!("-n {netns} {command}"));
}

/// `sh -c SCRIPT` inside `netns`.
fn sh_in(netns: &str, script: &str) {
    run("ip", &["netns", "exec", netns, "sh", "-c", script]);
}

/// Loads an nftables ruleset inside `netns`.
fn nft_in(netns: &str, ruleset: &str) {
    use std::io::Write;
    let mut child = Command::new("ip")
        .args(["netns", "exec", netns, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run nft");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(ruleset.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "nft in {netns} failed: {}\n{ruleset}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Starts `program args` inside `netns` in a process group of its own
/// (killed with it), dying with this thread (`PR_SET_PDEATHSIG`).
fn spawn_in(
    netns: &str,
    program: &Path,
    args: &[String],
    env: Option<&[(String, String)]>,
    log: &Path,
) -> Child {
    let mut command = Command::new("ip");
    command
        .args(["netns", "exec", netns])
        .arg(program)
        .args(args);
    if let Some(env) = env {
        command.env_clear().envs(env.iter().map(|(k, v)| (k, v)));
    }
    crate::support::spawn_logged_command(&mut command, log, true)
}

/// Kills `child`'s process group and reaps it.
fn kill_group(child: &mut Child) {
    #[allow(unsafe_code)]
    // SAFETY: kill has no memory-safety preconditions.
    unsafe {
        libc::kill(-(child.id() as i32), libc::SIGKILL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The `kubectl exec` wrappers: one script, linked under every name of
/// [`EXEC_COMMANDS`], that runs the real command inside `$POD_NETNS` (set
/// by the pod's kwok `Exec` object) with its own directory off `PATH`.
fn write_exec_wrappers(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).unwrap();
    let script = dir.join("pod-exec");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n\
             # kubectl exec into a data-plane test pod: run the command inside the\n\
             # pod's network namespace (ip netns exec also mounts its resolv.conf).\n\
             name=${{0##*/}}\n\
             PATH=$(printf %s \"$PATH\" | sed 's|^{dir}:||')\n\
             export PATH\n\
             real=$(command -v \"$name\") || {{ echo \"$name: not found on this host\" >&2; exit 127; }}\n\
             if [ -n \"$POD_NETNS\" ]; then exec ip netns exec \"$POD_NETNS\" \"$real\" \"$@\"; fi\n\
             exec \"$real\" \"$@\"\n",
            dir = dir.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    for name in EXEC_COMMANDS {
        std::os::unix::fs::symlink("pod-exec", dir.join(name)).unwrap();
    }
}

// ---------------------------------------------------------------------------
// kube-proxy and the cluster DNS Service.
// ---------------------------------------------------------------------------

/// kube-proxy for `node`, in nftables mode (the mode upstream recommends
/// for new clusters; iptables mode would need the legacy/nft iptables
/// binaries as well, and these kernels run nftables underneath anyway).
fn start_kube_proxy(cluster: &controlplane::Cluster, node: &NodeNet) -> NodeProxy {
    let log = cluster.dir.join(format!("kube-proxy-{}.log", node.name));
    let mut args = vec![
        format!("--kubeconfig={}", cluster.admin_kubeconfig.display()),
        format!("--hostname-override={}", node.name),
        "--proxy-mode=nftables".into(),
        format!("--cluster-cidr={}", cluster.spec.pod_cidrs.join(",")),
        // 0 = leave the (host-wide) conntrack table size alone.
        "--conntrack-max-per-core=0".into(),
        "--metrics-bind-address=127.0.0.1:10249".into(),
        format!("--healthz-bind-address=127.0.0.1:{KUBE_PROXY_HEALTHZ}"),
        // Its node IP: kwok reports 127.0.0.1 for every Node (the kubelet
        // API the apiserver's exec goes to), which is not this namespace's.
        format!("--bind-address={}", node.ipv4),
    ];
    // Extra flags for experiments (say `--iptables-min-sync-period=0`, which
    // nftables mode honours too); the tests run kube-proxy's defaults.
    if let Ok(extra) = std::env::var("CLUSTERSET_DNS_KUBE_PROXY_ARGS") {
        args.extend(extra.split_whitespace().map(str::to_owned));
    }
    let child = spawn_in(
        &node.netns,
        &controlplane::binary("kube-proxy"),
        &args,
        None,
        &log,
    );
    NodeProxy {
        child: Mutex::new(child),
        log,
        netns: node.netns.clone(),
    }
}

/// Waits until kube-proxy's `/healthz` answers 200 (its first sync is done).
fn wait_kube_proxy(p: &NodeProxy, deadline: Instant) {
    loop {
        let code = Command::new("ip")
            .args([
                "netns",
                "exec",
                &p.netns,
                "curl",
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
            ])
            .arg(format!("http://127.0.0.1:{KUBE_PROXY_HEALTHZ}/healthz"))
            .output()
            .map(|o| o.stdout)
            .unwrap_or_default();
        if code == b"200" {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "kube-proxy in {} not healthy in time; log:\n{}",
            p.netns,
            controlplane::tail(&p.log)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `kube-system/kube-dns`: ports 53/UDP and 53/TCP at the 10th address of
/// the cluster's first service CIDR, no selector (its EndpointSlice comes
/// from [`DataPlane::start_cluster_dns`]). Returns the ClusterIP.
async fn create_dns_service(cluster: &controlplane::Cluster) -> IpAddr {
    let cidr = &cluster.spec.service_cidrs[0];
    let base: IpAddr = cidr.split('/').next().unwrap().parse().unwrap();
    let ip = match base {
        IpAddr::V4(v4) => IpAddr::V4(Ipv4Addr::from(u32::from(v4) + 10)),
        IpAddr::V6(v6) => IpAddr::V6(std::net::Ipv6Addr::from(u128::from(v6) + 10)),
    };
    let client = cluster.admin_client().await;
    controlplane::apply_yaml(
        &client,
        &format!(
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: kube-dns\n  namespace: kube-system\n  labels:\n    k8s-app: kube-dns\n\
             spec:\n  clusterIP: {ip}\n  ports:\n  - name: dns\n    protocol: UDP\n    port: 53\n  - name: dns-tcp\n    protocol: TCP\n    port: 53\n"
        ),
    )
    .await
    .unwrap_or_else(|e| panic!("{}: creating kube-system/kube-dns: {e}", cluster.name));
    ip
}

// ---------------------------------------------------------------------------
// The pod runner.
// ---------------------------------------------------------------------------

/// Watches every cluster's Pods on a thread of its own (children get
/// `PR_SET_PDEATHSIG`, which fires when the spawning *thread* ends) and
/// gives each Running pod a namespace, routes and its processes.
struct PodRunner {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    state: Arc<Mutex<RunnerState>>,
}

#[derive(Default)]
struct RunnerState {
    /// (cluster, namespace, name) → network namespace, of running pods.
    netns: HashMap<(usize, String, String), String>,
    /// Everything worth a line in the test log, in order.
    notes: Vec<String>,
    /// Set when the runner cannot go on.
    fatal: Option<String>,
}

impl RunnerState {
    fn note(&mut self, line: String) {
        eprintln!("dataplane: {line}");
        self.notes.push(line);
    }
}

/// A pod the runner set up.
struct RunningPod {
    key: (usize, String, String),
    netns: String,
    /// Its addresses and node, whose routes in the router go with it.
    routes: Option<(Vec<IpAddr>, NodeNet)>,
    /// (container name, process).
    processes: Vec<(String, Child, PathBuf)>,
}

impl Drop for PodRunner {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl PodRunner {
    fn start(
        plane: &ControlPlane,
        nodes: &[NodeNet],
        dns_ips: &[IpAddr],
        router: String,
        log_dir: PathBuf,
    ) -> Self {
        std::fs::create_dir_all(&log_dir).unwrap();
        let state = Arc::new(Mutex::new(RunnerState::default()));
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let ctx = RunnerContext {
            kubeconfigs: plane
                .clusters
                .iter()
                .map(|c| c.admin_kubeconfig.clone())
                .collect(),
            cluster_names: plane.clusters.iter().map(|c| c.name.clone()).collect(),
            nodes: nodes.to_vec(),
            dns_ips: dns_ips.to_vec(),
            router,
            log_dir,
            state: state.clone(),
            next: 0,
        };
        let thread = std::thread::Builder::new()
            .name("pod-runner".into())
            .spawn(move || {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap()
                    .block_on(ctx.run(stopped));
            })
            .unwrap();
        Self {
            stop: Some(stop),
            thread: Some(thread),
            state,
        }
    }

    fn netns_of(&self, i: usize, ns: &str, name: &str) -> Option<String> {
        self.state
            .lock()
            .unwrap()
            .netns
            .get(&(i, ns.to_owned(), name.to_owned()))
            .cloned()
    }
}

struct RunnerContext {
    kubeconfigs: Vec<PathBuf>,
    cluster_names: Vec<String>,
    nodes: Vec<NodeNet>,
    dns_ips: Vec<IpAddr>,
    router: String,
    log_dir: PathBuf,
    state: Arc<Mutex<RunnerState>>,
    /// Counter for pod namespace and link names.
    next: u32,
}

impl RunnerContext {
    async fn run(mut self, mut stopped: tokio::sync::oneshot::Receiver<()>) {
        use kube::runtime::WatchStreamExt;
        use kube::runtime::watcher::{self, Event};
        let mut clients = Vec::new();
        let mut streams = Vec::new();
        for (i, kubeconfig) in self.kubeconfigs.iter().enumerate() {
            let client = controlplane::client_from(kubeconfig).await;
            let pods: Api<Pod> = Api::all(client.clone());
            streams.push(
                watcher::watcher(pods, watcher::Config::default())
                    .default_backoff()
                    .map(move |event| (i, event))
                    .boxed(),
            );
            clients.push(client);
        }
        let mut events = futures::stream::select_all(streams);
        let mut running: HashMap<String, RunningPod> = HashMap::new();
        let mut relisting: HashMap<usize, HashSet<String>> = HashMap::new();
        let mut reap = tokio::time::interval(Duration::from_millis(500));
        loop {
            let (i, event) = tokio::select! {
                _ = &mut stopped => break,
                _ = reap.tick() => {
                    self.reap(&mut running);
                    continue;
                }
                next = events.next() => match next {
                    Some(next) => next,
                    None => break,
                },
            };
            match event {
                Ok(Event::Init) => {
                    relisting.insert(i, HashSet::new());
                }
                Ok(Event::InitApply(pod)) => {
                    if let Some(seen) = relisting.get_mut(&i) {
                        seen.insert(pod.metadata.uid.clone().unwrap_or_default());
                    }
                    self.reconcile(i, &clients[i], pod, &mut running).await;
                }
                Ok(Event::InitDone) => {
                    let seen = relisting.remove(&i).unwrap_or_default();
                    let gone: Vec<String> = running
                        .iter()
                        .filter(|(uid, p)| p.key.0 == i && !seen.contains(*uid))
                        .map(|(uid, _)| uid.clone())
                        .collect();
                    for uid in gone {
                        let pod = running.remove(&uid).unwrap();
                        self.teardown(pod);
                    }
                }
                Ok(Event::Apply(pod)) => self.reconcile(i, &clients[i], pod, &mut running).await,
                Ok(Event::Delete(pod)) => {
                    if let Some(p) = running.remove(&pod.metadata.uid.clone().unwrap_or_default()) {
                        self.teardown(p);
                    }
                }
                Err(e) => self.state.lock().unwrap().note(format!(
                    "{}: watching pods: {e} (retrying)",
                    self.cluster_names[i]
                )),
            }
        }
        for (_, pod) in running.drain() {
            self.teardown(pod);
        }
    }

    /// Sets up a pod that runs and is not set up, tears down one that no
    /// longer runs.
    async fn reconcile(
        &mut self,
        i: usize,
        client: &kube::Client,
        pod: Pod,
        running: &mut HashMap<String, RunningPod>,
    ) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let status = pod.status.clone().unwrap_or_default();
        let spec = pod.spec.clone().unwrap_or_default();
        let runs = pod.metadata.deletion_timestamp.is_none()
            && status.phase.as_deref() == Some("Running")
            && status.pod_ip.as_deref().is_some_and(|ip| !ip.is_empty())
            && spec.node_name.is_some()
            && spec.host_network != Some(true);
        match (runs, running.contains_key(&uid)) {
            (true, false) => {
                if let Some(p) = self.setup(i, client, &pod).await {
                    running.insert(uid, p);
                }
            }
            (false, true) => {
                let p = running.remove(&uid).unwrap();
                self.teardown(p);
            }
            _ => {}
        }
    }

    async fn setup(&mut self, i: usize, client: &kube::Client, pod: &Pod) -> Option<RunningPod> {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let spec = pod.spec.clone().unwrap_or_default();
        let status = pod.status.clone().unwrap_or_default();
        let cluster = self.cluster_names[i].clone();
        let node_name = spec.node_name.clone().unwrap_or_default();
        let Some(node) = self
            .nodes
            .iter()
            .find(|n| n.cluster == i && n.name == node_name)
            .cloned()
        else {
            self.state.lock().unwrap().note(format!(
                "{cluster}: pod {ns}/{name} is on node {node_name}, which has no namespace; not run"
            ));
            return None;
        };
        let ips: Vec<IpAddr> = status
            .pod_ips
            .clone()
            .unwrap_or_default()
            .iter()
            .filter_map(|p| p.ip.parse().ok())
            .collect();
        let n = self.next;
        self.next += 1;
        let prefix = node.netns.split("-c").next().unwrap_or("csd").to_owned();
        let netns = format!("{prefix}-p{n}");
        let link = format!("p{n}");
        let mut p = RunningPod {
            key: (i, ns.clone(), name.clone()),
            netns: netns.clone(),
            routes: None,
            processes: Vec::new(),
        };
        // The namespace and its wiring; a failure here is a bug of the harness.
        let wired = std::panic::catch_unwind(|| {
            ip(&format!("netns add {netns}"));
            ip_in(&netns, "link set lo up");
            // The node's end is the pod's gateway: 169.254.1.1 and fe80::1.
            veth(&node.netns, &link, &netns, "169.254.1.1", "fe80::1");
            for address in &ips {
                let (host, family) = match address {
                    IpAddr::V4(_) => (format!("{address}/32"), "-4"),
                    IpAddr::V6(_) => (format!("{address}/128"), "-6"),
                };
                let nodad = if address.is_ipv6() { " nodad" } else { "" };
                ip_in(&netns, &format!("addr add {host} dev eth0{nodad}"));
                ip_in(
                    &node.netns,
                    &format!("{family} route replace {host} dev {link}"),
                );
                let via = match address {
                    IpAddr::V4(_) => format!("via {} dev {} onlink", node.ipv4, node.router_link),
                    IpAddr::V6(_) => format!("via fe80::2 dev {}", node.router_link),
                };
                // Replace: a newer pod may take an address an older one
                // had, before the older one's deletion is seen.
                ip_in(
                    &self.router,
                    &format!("{family} route replace {host} {via}"),
                );
            }
            default_routes(&netns, "169.254.1.1", ips.iter().any(IpAddr::is_ipv6));
        });
        if let Err(panic) = wired {
            let why = panic
                .downcast_ref::<String>()
                .cloned()
                .unwrap_or_else(|| "wiring failed".into());
            let mut state = self.state.lock().unwrap();
            state.note(format!("{cluster}: pod {ns}/{name}: {why}"));
            state.fatal = Some(format!("{cluster}: pod {ns}/{name}: {why}"));
            drop(state);
            self.unroute(&ips, &node);
            remove_netns(&netns);
            return None;
        }
        p.routes = Some((ips.clone(), node.clone()));
        // The pod's resolver: its cluster's DNS, its namespace's search path.
        let etc = PathBuf::from(format!("/etc/netns/{netns}"));
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::write(
            etc.join("resolv.conf"),
            format!(
                "nameserver {}\nsearch {ns}.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n",
                self.dns_ips[i]
            ),
        )
        .unwrap();
        self.state
            .lock()
            .unwrap()
            .netns
            .insert(p.key.clone(), netns.clone());
        if let Err(e) = create_exec(client, pod, &netns).await {
            self.state.lock().unwrap().note(format!(
                "{cluster}: pod {ns}/{name}: creating its kwok Exec: {e} (kubectl exec would run on the host)"
            ));
        }
        for container in &spec.containers {
            let env = container_env(pod, container);
            let expand = |s: &String| expand_vars(s, &env);
            let mut argv: Vec<String> = container.command.iter().flatten().map(expand).collect();
            if argv.is_empty() {
                self.state.lock().unwrap().note(format!(
                    "{cluster}: pod {ns}/{name} container {}: no command (an image's entrypoint \
                     cannot run on this host); it has a network but runs nothing",
                    container.name
                ));
                continue;
            }
            argv.extend(container.args.iter().flatten().map(expand));
            let program = which(&argv[0]);
            let Some(program) = program else {
                self.state.lock().unwrap().note(format!(
                    "{cluster}: pod {ns}/{name} container {}: `{}` is not on this host; not run",
                    container.name, argv[0]
                ));
                continue;
            };
            let mut full_env = vec![
                (
                    "PATH".to_owned(),
                    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_owned(),
                ),
                ("HOSTNAME".to_owned(), name.clone()),
                ("HOME".to_owned(), "/root".to_owned()),
            ];
            full_env.extend(env);
            let log = self
                .log_dir
                .join(format!("{cluster}_{ns}_{name}_{}.log", container.name));
            let child = spawn_in(&netns, &program, &argv[1..], Some(&full_env), &log);
            p.processes.push((container.name.clone(), child, log));
        }
        Some(p)
    }

    /// Logs containers that exited (no restarts: a test pod's server runs
    /// until its pod goes away).
    fn reap(&self, running: &mut HashMap<String, RunningPod>) {
        for pod in running.values_mut() {
            let (i, ns, name) = &pod.key;
            let mut exited = Vec::new();
            pod.processes.retain_mut(|(container, child, log)| {
                match child.try_wait() {
                    Ok(Some(status)) => {
                        exited.push(format!(
                            "{}: pod {ns}/{name} container {container} exited with {status}; log:\n{}",
                            self.cluster_names[*i],
                            controlplane::tail(log)
                        ));
                        false
                    }
                    _ => true,
                }
            });
            let mut state = self.state.lock().unwrap();
            for line in exited {
                state.note(line);
            }
        }
    }

    fn teardown(&self, mut pod: RunningPod) {
        for (_, child, _) in &mut pod.processes {
            kill_group(child);
        }
        remove_netns(&pod.netns);
        if let Some((ips, node)) = &pod.routes {
            self.unroute(ips, node);
        }
        self.state.lock().unwrap().netns.remove(&pod.key);
    }

    /// Deletes the router's routes to `ips` through `node`; a route that a
    /// newer pod on another node took over stays.
    fn unroute(&self, ips: &[IpAddr], node: &NodeNet) {
        for address in ips {
            let route = match address {
                IpAddr::V4(_) => format!(
                    "-4 route del {address}/32 via {} dev {} onlink",
                    node.ipv4, node.router_link
                ),
                IpAddr::V6(_) => format!(
                    "-6 route del {address}/128 via fe80::2 dev {}",
                    node.router_link
                ),
            };
            let mut args = vec!["-n", self.router.as_str()];
            args.extend(route.split_whitespace());
            let _ = Command::new("ip")
                .args(&args)
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// A per-pod kwok `Exec` (owned by the pod, so it goes with it): exec into
/// the pod runs with `POD_NETNS` set, which the wrappers enter.
async fn create_exec(client: &kube::Client, pod: &Pod, netns: &str) -> Result<(), kube::Error> {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kwok.x-k8s.io", "v1alpha1", "Exec"),
        "execs",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource);
    let exec = serde_json::json!({
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Exec",
        "metadata": {
            "name": name,
            "namespace": ns,
            "ownerReferences": [{
                "apiVersion": "v1",
                "kind": "Pod",
                "name": name,
                "uid": pod.metadata.uid.clone().unwrap_or_default(),
            }],
        },
        "spec": {"execs": [{"local": {"envs": [{"name": "POD_NETNS", "value": netns}]}}]},
    });
    api.patch(
        &name,
        &PatchParams::apply(controlplane::TEST_FIELD_MANAGER).force(),
        &Patch::Apply(exec),
    )
    .await
    .map(|_| ())
}

/// A container's environment: plain `value`s and the `fieldRef`s
/// [`field_ref`] resolves (others are noted and left out).
fn container_env(
    pod: &Pod,
    container: &k8s_openapi::api::core::v1::Container,
) -> Vec<(String, String)> {
    let mut env = Vec::new();
    for var in container.env.iter().flatten() {
        if let Some(value) = &var.value {
            env.push((var.name.clone(), expand_vars(value, &env)));
        } else if let Some(field) = var
            .value_from
            .as_ref()
            .and_then(|v| v.field_ref.as_ref())
            .and_then(|f| field_ref(pod, &f.field_path))
        {
            env.push((var.name.clone(), field));
        } else {
            env.push((var.name.clone(), String::new()));
            eprintln!(
                "dataplane: pod {}: env {} has a source the data plane does not resolve; empty",
                pod.metadata.name.as_deref().unwrap_or_default(),
                var.name
            );
        }
    }
    env
}

/// The downward-API fields test pods use.
pub(crate) fn field_ref(pod: &Pod, path: &str) -> Option<String> {
    let status = pod.status.as_ref();
    let spec = pod.spec.as_ref();
    match path {
        "metadata.name" => pod.metadata.name.clone(),
        "metadata.namespace" => pod.metadata.namespace.clone(),
        "metadata.uid" => pod.metadata.uid.clone(),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()),
        "spec.serviceAccountName" => spec.and_then(|s| s.service_account_name.clone()),
        "status.podIP" => status.and_then(|s| s.pod_ip.clone()),
        "status.hostIP" => status.and_then(|s| s.host_ip.clone()),
        "status.podIPs" => status.and_then(|s| s.pod_ips.as_ref()).map(|ips| {
            ips.iter()
                .map(|p| p.ip.clone())
                .collect::<Vec<_>>()
                .join(",")
        }),
        _ => None,
    }
}

/// Kubernetes' `$(VAR)` expansion of command, args and env values: a
/// defined variable is replaced, `$$` is a literal `$`, anything else stays.
pub(crate) fn expand_vars(text: &str, env: &[(String, String)]) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(stripped) = after.strip_prefix('$') {
            out.push('$');
            rest = stripped;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
            && let Some((_, value)) = env.iter().rev().find(|(k, _)| *k == inner[..end])
        {
            out.push_str(value);
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// `program` as found on this host's standard `PATH` (or as given, when it
/// is a path).
fn which(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        return Path::new(program).is_file().then(|| PathBuf::from(program));
    }
    [
        "/usr/local/sbin",
        "/usr/local/bin",
        "/usr/sbin",
        "/usr/bin",
        "/sbin",
        "/bin",
    ]
    .iter()
    .map(|dir| Path::new(dir).join(program))
    .find(|p| p.is_file())
}
