#!/usr/bin/env python3
"""Deterministic benchmark data for clusterset-dns (stdlib only).

    scripts/gen-bench-data.py [--services 10000] [--namespaces 100]
                              [--queries 100000] [--seed 1]
                              [--backends-per-cluster 2-4] --out DIR

Writes, into DIR:

  clusterset.yaml  multi-document YAML: ServiceImports (multicluster.x-k8s.io/
                   v1beta1) and the imported EndpointSlices (discovery.k8s.io/v1),
                   as the MCS controller would leave them in a member cluster.
  queries.txt      dnsperf input, one "name TYPE" per line, shuffled.
  sanity-extra.txt edge-case queries for the answer comparison (not benchmarked):
                   apex SOA/NS, dns-version TXT, empty non-terminals, not-ready
                   endpoints, non-existent namespaces, SRV at the bare name...
  probe.txt        "name TYPE expected-address" of one ClusterSetIP service, for
                   readiness checks (answered only once the whole zone is loaded).
  summary.txt      what was generated (counts per kind, query mix).

Data set (for --services N):

  * services spread round-robin over --namespaces namespaces;
  * 80% ClusterSetIP: half dual-stack (one IPv4 and one IPv6 ip), half IPv4
    only; each exported from 1-3 clusters, with one IPv4 EndpointSlice per
    cluster (and one IPv6 slice per cluster if dual-stack), 2-4 ready pod IPs
    per slice (--backends-per-cluster MIN-MAX); with the default 2-4 that
    makes 7.8 ready endpoints per service on average (IPv4 and IPv6
    endpoints counted apart, as their slices hold them), with 3-5 10.2;
  * 20% Headless: 3 ready endpoints with hostnames (StatefulSet pods
    <svc>-0..2) spread over 2 or 3 clusters, plus one not-ready endpoint
    (<svc>-3) in the first cluster;
  * every service has 1 or 2 named TCP ports.

Query mix (fractions of --queries, all lines shuffled with a fixed seed):

  30% A     ClusterSetIP service name                 (answer: 1 A)
  10% AAAA  ClusterSetIP service name, half on dual-stack services (1 AAAA),
            half on IPv4-only services (NODATA)
  15% SRV   _<port>._tcp.<svc>.<ns>.svc.clusterset.local, any service
  20% A     headless service name                     (answer: 3 A)
  10% A     per-endpoint name <host>.<cluster>.<svc>.<ns>.svc...  (1 A)
  15% A     non-existent service in an existing namespace (NXDOMAIN)

The same arguments always produce byte-identical files.
"""

import argparse
import ipaddress
import os
import random
import sys

ZONE = "clusterset.local"
CLUSTERS = ["cluster-east", "cluster-west", "cluster-eu"]

TEAMS = [
    "payments", "checkout", "catalog", "search", "identity", "billing",
    "shipping", "inventory", "orders", "ads", "analytics", "messaging",
    "notifications", "media", "profile", "reviews", "pricing", "fraud",
    "support", "platform",
]
ENVS = ["prod", "staging", "dev", "qa", "perf"]

WORDS = [
    "api", "web", "worker", "cache", "db", "gateway", "auth", "events",
    "queue", "store", "frontend", "backend", "indexer", "scheduler", "proxy",
    "metrics", "config", "session", "ledger", "router",
]

PORTS = [
    ("http", 80), ("https", 443), ("grpc", 9000), ("metrics", 9090),
    ("admin", 8081), ("postgres", 5432), ("redis", 6379), ("amqp", 5672),
]

# Query mix, in per-mille of the total.
MIX = [
    ("a_clusterset", 300),
    ("aaaa_dual", 50),
    ("aaaa_v4only", 50),
    ("srv", 150),
    ("a_headless", 200),
    ("a_endpoint", 100),
    ("nxdomain", 150),
]


def namespaces(count):
    names = []
    for i in range(count):
        team = TEAMS[i % len(TEAMS)]
        env = ENVS[(i // len(TEAMS)) % len(ENVS)]
        cycle = i // (len(TEAMS) * len(ENVS))
        names.append(f"{team}-{env}" if cycle == 0 else f"{team}-{env}-{cycle}")
    return names


class Service:
    __slots__ = ("name", "namespace", "kind", "ips", "ports", "clusters",
                 "endpoints", "index")


def build_services(n_services, n_namespaces, rng, backends=(2, 4)):
    ns_names = namespaces(n_namespaces)
    services = []
    v4_base = int(ipaddress.IPv4Address("10.96.0.0"))  # ClusterSetIPs 10.96.0.0/12
    v6_base = int(ipaddress.IPv6Address("fd00:10:96::"))
    pod_counter = [0] * len(CLUSTERS)  # per-cluster pod IP allocator

    def pod_ip(cluster_idx, family):
        pod_counter[cluster_idx] += 1
        n = pod_counter[cluster_idx]
        if family == 4:
            # 10.128.0.0/12, 10.144.0.0/12, 10.160.0.0/12: one per cluster
            base = int(ipaddress.IPv4Address(f"10.{128 + cluster_idx * 16}.0.0"))
            return str(ipaddress.IPv4Address(base + n))
        base = int(ipaddress.IPv6Address(f"fd00:{cluster_idx + 1}::"))
        return str(ipaddress.IPv6Address(base + n))

    for i in range(n_services):
        s = Service()
        s.index = i
        s.namespace = ns_names[i % n_namespaces]
        s.name = f"{WORDS[(i // n_namespaces) % len(WORDS)]}-{i:05d}"
        # 20% headless: i % 10 in {3, 7}; of the rest, alternate dual-stack / v4.
        r = i % 10
        if r in (3, 7):
            s.kind = "Headless"
        elif (i // 10 + r) % 2 == 0:
            s.kind = "Dual"
        else:
            s.kind = "V4"
        nports = 1 + rng.randrange(2)
        first = rng.randrange(len(PORTS))
        s.ports = [PORTS[(first + k) % len(PORTS)] for k in range(nports)]
        if s.kind == "Headless":
            nclusters = 2 + rng.randrange(2)
            start = rng.randrange(len(CLUSTERS))
            s.clusters = [(start + k) % len(CLUSTERS) for k in range(nclusters)]
            # (hostname, cluster_idx, ip, ready)
            s.endpoints = []
            for h in range(3):
                c = s.clusters[h % nclusters]
                s.endpoints.append((f"{s.name}-{h}", c, pod_ip(c, 4), True))
            c0 = s.clusters[0]
            s.endpoints.append((f"{s.name}-3", c0, pod_ip(c0, 4), False))
            s.ips = []
        else:
            nclusters = 1 + rng.randrange(3)
            start = rng.randrange(len(CLUSTERS))
            s.clusters = [(start + k) % len(CLUSTERS) for k in range(nclusters)]
            s.ips = [str(ipaddress.IPv4Address(v4_base + 10 + i))]
            if s.kind == "Dual":
                s.ips.append(str(ipaddress.IPv6Address(v6_base + 10 + i)))
            s.endpoints = []
            for c in s.clusters:
                for _ in range(backends[0] + rng.randrange(backends[1] - backends[0] + 1)):
                    v4 = pod_ip(c, 4)
                    v6 = pod_ip(c, 6) if s.kind == "Dual" else None
                    s.endpoints.append((None, c, (v4, v6), True))
        services.append(s)
    return services


def flow_ports(ports, target_offset=0):
    return "[" + ", ".join(
        f"{{name: {name}, protocol: TCP, port: {port + target_offset}}}"
        for name, port in ports) + "]"


def slice_doc(s, cluster, family, endpoints, ports_line, suffix):
    lines = [
        "apiVersion: discovery.k8s.io/v1",
        "kind: EndpointSlice",
        "metadata:",
        f"  name: imported-{s.name}-{cluster}-{suffix}",
        f"  namespace: {s.namespace}",
        "  labels:",
        f"    multicluster.kubernetes.io/service-name: {s.name}",
        f"    multicluster.kubernetes.io/source-cluster: {cluster}",
        "    endpointslice.kubernetes.io/managed-by: clusterset-dns-controller",
        f"addressType: {family}",
        f"ports: {ports_line}",
        "endpoints:",
    ]
    for hostname, addr, ready in endpoints:
        quoted = f'"{addr}"' if ":" in addr else addr
        lines.append(f"- addresses: [{quoted}]")
        if hostname:
            lines.append(f"  hostname: {hostname}")
        lines.append(f"  conditions: {{ready: {'true' if ready else 'false'}}}")
    return "\n".join(lines)


def write_manifest(services, path):
    docs = []
    for s in services:
        clusters = [CLUSTERS[c] for c in s.clusters]
        status = "status:\n  clusters: [" + ", ".join(
            f"{{cluster: {c}}}" for c in clusters) + "]"
        if s.kind == "Headless":
            spec = ["spec:", "  type: Headless", "  ipFamilies: [IPv4]",
                    f"  ports: {flow_ports(s.ports)}"]
        else:
            ips = ", ".join(f'"{ip}"' if ":" in ip else ip for ip in s.ips)
            fams = "[IPv4, IPv6]" if s.kind == "Dual" else "[IPv4]"
            spec = ["spec:", "  type: ClusterSetIP", f"  ips: [{ips}]",
                    f"  ipFamilies: {fams}", f"  ports: {flow_ports(s.ports)}"]
        docs.append("\n".join([
            "apiVersion: multicluster.x-k8s.io/v1beta1",
            "kind: ServiceImport",
            "metadata:",
            f"  name: {s.name}",
            f"  namespace: {s.namespace}",
            *spec,
            status,
        ]))
        # Headless pods listen on the service port; ClusterSetIP backends on
        # port+8000 (target ports differ from service ports, as usual).
        ports_line = flow_ports(s.ports, 0 if s.kind == "Headless" else 8000)
        for c in s.clusters:
            cluster = CLUSTERS[c]
            if s.kind == "Headless":
                eps = [(h, ip, ready) for h, ci, ip, ready in s.endpoints if ci == c]
                docs.append(slice_doc(s, cluster, "IPv4", eps, ports_line, "ipv4"))
            else:
                mine = [ips for _, ci, ips, _ in s.endpoints if ci == c]
                docs.append(slice_doc(s, cluster, "IPv4",
                                      [(None, v4, True) for v4, _ in mine],
                                      ports_line, "ipv4"))
                if s.kind == "Dual":
                    docs.append(slice_doc(s, cluster, "IPv6",
                                          [(None, v6, True) for _, v6 in mine],
                                          ports_line, "ipv6"))
    with open(path, "w", encoding="ascii", newline="\n") as f:
        f.write("# Generated by scripts/gen-bench-data.py; do not edit.\n")
        f.write("\n---\n".join(docs))
        f.write("\n")


def fqdn(*labels):
    return ".".join(labels) + f".svc.{ZONE}."


def make_queries(services, n_queries, rng, ns_names):
    by_kind = {"Headless": [], "Dual": [], "V4": []}
    for s in services:
        by_kind[s.kind].append(s)
    clusterset = by_kind["Dual"] + by_kind["V4"]
    clusterset.sort(key=lambda s: s.index)
    existing = {(s.name, s.namespace) for s in services}

    def nxdomain():
        while True:
            ns = ns_names[rng.randrange(len(ns_names))]
            name = f"{WORDS[rng.randrange(len(WORDS))]}-{rng.randrange(100000, 999999)}"
            if (name, ns) not in existing:
                return f"{fqdn(name, ns)} A"

    def pick(kind):
        return rng.choice(by_kind[kind])

    def a_endpoint():
        s = pick("Headless")
        host, cluster, _, _ = rng.choice([e for e in s.endpoints if e[3]])
        return f"{host}.{CLUSTERS[cluster]}.{fqdn(s.name, s.namespace)} A"

    def srv():
        s = rng.choice(services)
        return f"_{rng.choice(s.ports)[0]}._tcp.{fqdn(s.name, s.namespace)} SRV"

    def named(s, rtype):
        return f"{fqdn(s.name, s.namespace)} {rtype}"

    gens = {
        "a_clusterset": lambda: named(rng.choice(clusterset), "A"),
        "aaaa_dual": lambda: named(pick("Dual"), "AAAA"),
        "aaaa_v4only": lambda: named(pick("V4"), "AAAA"),
        "srv": srv,
        "a_headless": lambda: named(pick("Headless"), "A"),
        "a_endpoint": a_endpoint,
        "nxdomain": nxdomain,
    }
    lines = []
    counts = {}
    total_weight = sum(w for _, w in MIX)
    for i, (kind, weight) in enumerate(MIX):
        n = n_queries * weight // total_weight
        if i == len(MIX) - 1:
            n = n_queries - len(lines)
        counts[kind] = n
        lines.extend(gens[kind]() for _ in range(n))
    rng.shuffle(lines)
    return lines, counts


def sanity_extra(services, ns_names):
    """Edge cases: a few of each, picked deterministically."""
    head = [s for s in services if s.kind == "Headless"][:3]
    dual = [s for s in services if s.kind == "Dual"][:2]
    v4 = [s for s in services if s.kind == "V4"][:2]
    q = [
        f"{ZONE}. SOA", f"{ZONE}. NS", f"{ZONE}. A", f"dns-version.{ZONE}. TXT",
        f"svc.{ZONE}. A", f"{ns_names[0]}.svc.{ZONE}. A",
        f"no-such-namespace.svc.{ZONE}. A", f"nope.{ZONE}. A",
        f"ns.dns.{ZONE}. A", f"dns.{ZONE}. A",
    ]
    for s in head:
        base = fqdn(s.name, s.namespace)
        notready = [e for e in s.endpoints if not e[3]][0]
        ready = [e for e in s.endpoints if e[3]][0]
        q += [
            f"{base} A", f"{base} AAAA", f"{base} SRV", f"{base} TXT",
            f"_{s.ports[0][0]}._tcp.{base} SRV", f"_tcp.{base} SRV",
            f"_{s.ports[0][0]}._udp.{base} SRV",
            f"{ready[0]}.{CLUSTERS[ready[1]]}.{base} A",
            f"{ready[0]}.{CLUSTERS[ready[1]]}.{base} AAAA",
            f"{CLUSTERS[ready[1]]}.{base} A",
            f"{notready[0]}.{CLUSTERS[notready[1]]}.{base} A",
            f"{ready[0]}.{CLUSTERS[(ready[1] + 1) % 3]}.{base} A"
            if (ready[1] + 1) % 3 not in s.clusters else f"x.{base} A",
        ]
    for s in dual + v4:
        base = fqdn(s.name, s.namespace)
        q += [f"{base} A", f"{base} AAAA", f"{base} SRV", f"{base} MX",
              f"_{s.ports[0][0]}._tcp.{base} SRV", f"_tcp.{base} A",
              f"sub.{base} A", f"{base.upper()} A"]
    return q


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--services", type=int, default=10000)
    p.add_argument("--namespaces", type=int, default=100)
    p.add_argument("--queries", type=int, default=100000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--backends-per-cluster", default="2-4", metavar="MIN-MAX",
                   help="ready pod IPs per ClusterSetIP slice (default 2-4)")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    if a.services < 10 or a.namespaces < 1 or a.queries < 1:
        p.error("need --services >= 10, --namespaces >= 1, --queries >= 1")
    try:
        backends = tuple(int(x) for x in a.backends_per_cluster.split("-"))
        if len(backends) != 2 or not 1 <= backends[0] <= backends[1]:
            raise ValueError
    except ValueError:
        p.error("--backends-per-cluster takes MIN-MAX with 1 <= MIN <= MAX, e.g. 2-4")
    os.makedirs(a.out, exist_ok=True)
    rng = random.Random(a.seed)
    services = build_services(a.services, a.namespaces, rng, backends)
    write_manifest(services, os.path.join(a.out, "clusterset.yaml"))
    ns_names = namespaces(a.namespaces)
    lines, counts = make_queries(services, a.queries, random.Random(a.seed + 1), ns_names)
    with open(os.path.join(a.out, "queries.txt"), "w", encoding="ascii", newline="\n") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(a.out, "sanity-extra.txt"), "w", encoding="ascii", newline="\n") as f:
        f.write("\n".join(sanity_extra(services, ns_names)) + "\n")
    first = next(s for s in services if s.kind != "Headless")
    with open(os.path.join(a.out, "probe.txt"), "w", encoding="ascii", newline="\n") as f:
        f.write(f"{fqdn(first.name, first.namespace)} A {first.ips[0]}\n")
    kinds = {}
    for s in services:
        kinds[s.kind] = kinds.get(s.kind, 0) + 1
    slices = sum(len(s.clusters) * (2 if s.kind == "Dual" else 1) for s in services)
    # Endpoints as the slices hold them: a dual-stack backend is one IPv4
    # and one IPv6 endpoint, in two slices.
    ready = sum(len(s.endpoints) * (2 if s.kind == "Dual" else 1)
                for s in services if s.kind != "Headless")
    ready += sum(e[3] for s in services if s.kind == "Headless" for e in s.endpoints)
    not_ready = sum(not e[3] for s in services if s.kind == "Headless" for e in s.endpoints)
    summary = [
        f"services={a.services} namespaces={a.namespaces} seed={a.seed}",
        f"clusterset_ip_dual_stack={kinds.get('Dual', 0)} "
        f"clusterset_ip_ipv4_only={kinds.get('V4', 0)} headless={kinds.get('Headless', 0)}",
        f"endpoint_slices={slices} endpoints_ready={ready} endpoints_not_ready={not_ready} "
        f"backends_per_cluster={backends[0]}-{backends[1]}",
        f"queries={len(lines)} " + " ".join(f"{k}={v}" for k, v in counts.items()),
    ]
    with open(os.path.join(a.out, "summary.txt"), "w", encoding="ascii", newline="\n") as f:
        f.write("\n".join(summary) + "\n")
    print("\n".join(summary), file=sys.stderr)


if __name__ == "__main__":
    main()
