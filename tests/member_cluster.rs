//! Member clusters that behave like real ones: each runs kube-apiserver,
//! kube-controller-manager, kube-scheduler and kwok (fake Nodes, no
//! kubelet), so a Deployment's pods are scheduled and become Running and
//! Ready with IPs from that cluster's pod CIDR, the in-tree EndpointSlice
//! controller writes slices for a Service, ClusterIPs come from that
//! cluster's service CIDRs (two families on the dual-stack cluster),
//! owner references are garbage-collected and namespaces finish deleting.
//!
//! Needs every binary of `scripts/testenv-build.sh` (kube-controller-manager,
//! kube-scheduler and kwok too); a missing one fails the test.

mod controlplane;
mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use controlplane::{Cluster, ControlPlane, cidr_contains};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service, ServiceAccount};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};

const NS: &str = "demo";
/// Per step; a normal run needs a few seconds per step.
const WAIT: Duration = Duration::from_secs(60);

/// Two member clusters, the second dual-stack, exercised in parallel.
#[tokio::test(flavor = "multi_thread")]
async fn member_clusters_run_real_controllers() {
    let t0 = Instant::now();
    let plane = ControlPlane::start_members(2, |i| i == 1).await;
    eprintln!(
        "2 member clusters with schedulable nodes in {:.1} s",
        t0.elapsed().as_secs_f64()
    );

    // Distinct address plans, so a pod or service IP names its cluster.
    let (a, b) = (&plane.clusters[0].spec, &plane.clusters[1].spec);
    assert_eq!(a.service_cidrs.len(), 1, "cluster0 is single-stack");
    assert_eq!(b.service_cidrs.len(), 2, "cluster1 is dual-stack");
    assert_eq!(b.pod_cidrs.len(), 2, "cluster1 is dual-stack");
    for (x, y) in [
        (&a.service_cidrs[0], &b.service_cidrs[0]),
        (&a.pod_cidrs[0], &b.pod_cidrs[0]),
    ] {
        let (net, _) = y.split_once('/').unwrap();
        assert!(!cidr_contains(x, net), "{x} and {y} overlap");
    }

    futures::future::join_all(plane.clusters.iter().map(exercise)).await;
    eprintln!("whole test in {:.1} s", t0.elapsed().as_secs_f64());
}

async fn exercise(cluster: &Cluster) {
    let t0 = Instant::now();
    let step = |what: String| {
        eprintln!(
            "{}: {what} at {:.1} s",
            cluster.name,
            t0.elapsed().as_secs_f64()
        )
    };
    let client = cluster.admin_client().await;
    let dual = cluster.spec.service_cidrs.len() == 2;
    let pp = PostParams::default();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(&pp, &json(serde_json::json!({"metadata": {"name": NS}})))
        .await
        .unwrap();

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    deployments
        .create(&pp, &json(deployment("web", 2)))
        .await
        .unwrap();
    let services: Api<Service> = Api::namespaced(client.clone(), NS);
    let mut service = serde_json::json!({
        "metadata": {"name": "web"},
        "spec": {
            "selector": {"app": "web"},
            "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}],
        },
    });
    if dual {
        service["spec"]["ipFamilyPolicy"] = "PreferDualStack".into();
    }
    let service = services.create(&pp, &json(service)).await.unwrap();

    // ClusterIPs come from this cluster's service CIDRs, one per family.
    let spec = service.spec.unwrap();
    let cluster_ips = spec.cluster_ips.unwrap_or_default();
    assert_eq!(
        cluster_ips.len(),
        cluster.spec.service_cidrs.len(),
        "{}: clusterIPs {cluster_ips:?}",
        cluster.name
    );
    for (ip, cidr) in cluster_ips.iter().zip(&cluster.spec.service_cidrs) {
        assert!(
            cidr_contains(cidr, ip),
            "{}: ClusterIP {ip} not in {cidr}",
            cluster.name
        );
    }
    assert_eq!(spec.cluster_ip.as_ref(), cluster_ips.first());

    // 2 Running+Ready pods, each with one IP per pod CIDR, on fake nodes.
    let pods = cluster.wait_deployment_ready(&client, NS, "web", 2).await;
    let ips = pod_ips(cluster, &pods);
    step(format!(
        "2 pods ready, IPs {ips:?}, ClusterIPs {cluster_ips:?}"
    ));
    wait_ready_endpoints(cluster, &client, &ips).await;
    step("EndpointSlices with 2 ready endpoints".into());

    // Scale to 3: a new pod, and the slices follow.
    deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    let pods = cluster.wait_deployment_ready(&client, NS, "web", 3).await;
    let ips = pod_ips(cluster, &pods);
    wait_ready_endpoints(cluster, &client, &ips).await;
    step(format!("scaled to 3 ({ips:?}), EndpointSlices follow"));

    garbage_collection(cluster, &client).await;
    step("token Secret filled, owned object collected".into());

    // Namespace deletion completes: the namespace controller empties it
    // (kwok finishes the pods' graceful deletion) and removes the finalizer.
    namespaces
        .delete(NS, &DeleteParams::default())
        .await
        .unwrap();
    cluster
        .wait_for("namespace deleted", WAIT, || {
            let namespaces = namespaces.clone();
            async move {
                match namespaces.get_opt(NS).await.map_err(|e| e.to_string())? {
                    None => Ok(()),
                    Some(ns) => Err(format!(
                        "still there: {:?}",
                        ns.status.and_then(|s| s.conditions)
                    )),
                }
            }
        })
        .await;
    step("namespace deleted".into());
}

fn json<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> T {
    serde_json::from_value(value).unwrap()
}

fn deployment(name: &str, replicas: i32) -> serde_json::Value {
    serde_json::json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    // No kubelet needs time to stop anything.
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{
                        "name": name,
                        // Never pulled: kwok runs no containers.
                        "image": "registry.invalid/web:1",
                        "ports": [{"containerPort": 8080, "name": "http"}],
                    }],
                },
            },
        },
    })
}

/// Pod IPs per address family ("IPv4", "IPv6"), after checking that every
/// pod has one IP from each of the cluster's pod CIDRs, all distinct, and
/// runs on a kwok node.
fn pod_ips(
    cluster: &Cluster,
    pods: &[k8s_openapi::api::core::v1::Pod],
) -> Vec<(&'static str, BTreeSet<String>)> {
    let cidrs = &cluster.spec.pod_cidrs;
    let mut by_family: Vec<(&'static str, BTreeSet<String>)> = cidrs
        .iter()
        .map(|c| {
            (
                if c.contains(':') { "IPv6" } else { "IPv4" },
                BTreeSet::new(),
            )
        })
        .collect();
    for pod in pods {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
        assert!(
            node.as_deref().is_some_and(|n| n.starts_with("kwok-node-")),
            "{}: pod {name} on node {node:?}",
            cluster.name
        );
        let status = pod.status.as_ref().unwrap();
        let ips: Vec<String> = status
            .pod_ips
            .iter()
            .flatten()
            .map(|p| p.ip.clone())
            .collect();
        assert_eq!(
            ips.len(),
            cidrs.len(),
            "{}: pod {name} has IPs {ips:?}, expected one from each of {cidrs:?}",
            cluster.name
        );
        assert_eq!(status.pod_ip.as_ref(), ips.first());
        for ((ip, cidr), (_, set)) in ips.iter().zip(cidrs).zip(&mut by_family) {
            assert!(
                cidr_contains(cidr, ip),
                "{}: pod {name} IP {ip} not in {cidr}",
                cluster.name
            );
            assert!(
                set.insert(ip.clone()),
                "{}: pod IP {ip} twice",
                cluster.name
            );
        }
    }
    by_family
}

/// Waits until the EndpointSlices of Service `web` written by the in-tree
/// controller hold exactly `want` as ready endpoints, per address family.
async fn wait_ready_endpoints(
    cluster: &Cluster,
    client: &Client,
    want: &[(&'static str, BTreeSet<String>)],
) {
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), NS);
    let selector = "kubernetes.io/service-name=web,\
                    endpointslice.kubernetes.io/managed-by=endpointslice-controller.k8s.io";
    let what = format!("EndpointSlices of web with ready endpoints {want:?}");
    cluster
        .wait_for(&what, WAIT, || {
            let slices = slices.clone();
            async move {
                let list = slices
                    .list(&ListParams::default().labels(selector))
                    .await
                    .map_err(|e| e.to_string())?;
                let mut got = Vec::new();
                for (family, _) in want {
                    let mut ready = BTreeSet::new();
                    for slice in list.items.iter().filter(|s| s.address_type == *family) {
                        for ep in &slice.endpoints {
                            let is_ready = ep
                                .conditions
                                .as_ref()
                                .and_then(|c| c.ready)
                                .unwrap_or(false);
                            if is_ready {
                                ready.extend(ep.addresses.iter().cloned());
                            }
                        }
                        let port = slice.ports.iter().flatten().next();
                        if !slice.endpoints.is_empty() && port.and_then(|p| p.port) != Some(8080) {
                            return Err(format!("slice ports {:?}", slice.ports));
                        }
                    }
                    got.push((*family, ready));
                }
                if got == want {
                    Ok(())
                } else {
                    Err(format!("{} slices, ready: {got:?}", list.items.len()))
                }
            }
        })
        .await
}

/// The ServiceAccount token controller fills a token Secret (signed with the
/// apiserver's key), and deleting the ServiceAccount removes both that
/// Secret (token controller) and a ConfigMap whose ownerReference points at
/// the ServiceAccount (garbage collector).
async fn garbage_collection(cluster: &Cluster, client: &Client) {
    let pp = PostParams::default();
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), NS);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let account = accounts
        .create(
            &pp,
            &json(serde_json::json!({"metadata": {"name": "robot"}})),
        )
        .await
        .unwrap();
    secrets
        .create(
            &pp,
            &json(serde_json::json!({
                "metadata": {
                    "name": "robot-token",
                    "annotations": {"kubernetes.io/service-account.name": "robot"},
                },
                "type": "kubernetes.io/service-account-token",
            })),
        )
        .await
        .unwrap();
    config_maps
        .create(
            &pp,
            &json(serde_json::json!({
                "metadata": {
                    "name": "robot-owned",
                    "ownerReferences": [{
                        "apiVersion": "v1",
                        "kind": "ServiceAccount",
                        "name": "robot",
                        "uid": account.metadata.uid.unwrap(),
                    }],
                },
                "data": {"k": "v"},
            })),
        )
        .await
        .unwrap();
    cluster
        .wait_for("token Secret filled", WAIT, || {
            let secrets = secrets.clone();
            async move {
                let s = secrets
                    .get("robot-token")
                    .await
                    .map_err(|e| e.to_string())?;
                let data = s.data.unwrap_or_default();
                let token = data.get("token").map(|t| t.0.clone()).unwrap_or_default();
                // A JWT: three base64url parts.
                if token.split(|b| *b == b'.').count() == 3 && data.contains_key("ca.crt") {
                    Ok(())
                } else {
                    Err(format!("data keys {:?}", data.keys().collect::<Vec<_>>()))
                }
            }
        })
        .await;

    accounts
        .delete("robot", &DeleteParams::default())
        .await
        .unwrap();
    cluster
        .wait_for("token Secret and owned ConfigMap gone", WAIT, || {
            let (secrets, config_maps) = (secrets.clone(), config_maps.clone());
            async move {
                let secret = secrets
                    .get_opt("robot-token")
                    .await
                    .map_err(|e| e.to_string())?;
                let cm = config_maps
                    .get_opt("robot-owned")
                    .await
                    .map_err(|e| e.to_string())?;
                match (secret, cm) {
                    (None, None) => Ok(()),
                    (s, c) => Err(format!(
                        "secret present: {}, configmap present: {}",
                        s.is_some(),
                        c.is_some()
                    )),
                }
            }
        })
        .await;
}
