#!/usr/bin/env python3
"""Writes the seed inputs of the fuzz targets (docs/robustness.md, "Fuzzing")
into tests/fuzz/corpus/<target>/seed-* (the targets named as arguments, all
by default): DNS queries for the example
clusterset of config/ (every record type the server answers, with and
without EDNS, options, large answers that need TCP, and a few unusual
forms), and the manifests of config/ plus small variants. Standard library
only; scripts/fuzz.sh runs it before fuzzing, and the files it writes are
committed with the rest of the corpus. Deterministic: running it again
rewrites the same bytes."""

import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")

TYPES = {"A": 1, "NS": 2, "CNAME": 5, "SOA": 6, "PTR": 12, "MX": 15, "TXT": 16,
         "AAAA": 28, "SRV": 33, "OPT": 41, "DS": 43, "AXFR": 252, "ANY": 255,
         "CAA": 257}
NAMES = [
    "web.shop.svc.clusterset.local",
    "WeB.ShOp.svc.clusterset.local",
    "db.shop.svc.clusterset.local",
    "db-0.db.shop.svc.clusterset.local",
    "db-1.cluster-west.db.shop.svc.clusterset.local",
    "_http._tcp.web.shop.svc.clusterset.local",
    "_postgres._tcp.db.shop.svc.clusterset.local",
    "_memcache-udp._udp.cache.shop.svc.clusterset.local",
    "wide.shop.svc.clusterset.local",
    "h-7.wide.shop.svc.clusterset.local",
    "search.shop.svc.clusterset.local",
    "batch.jobs.svc.clusterset.local",
    "shop.svc.clusterset.local",
    "clusterset.local",
    "dns-version.clusterset.local",
    "nope.shop.svc.clusterset.local",
    "example.com",
    "",
]


def name(text):
    out = b""
    for label in filter(None, text.split(".")):
        out += bytes([len(label)]) + label.encode()
    return out + b"\x00"


def header(qid, flags, qd=1, an=0, ns=0, ar=0):
    return struct.pack(">HHHHHH", qid, flags, qd, an, ns, ar)


def question(qname, qtype, qclass=1):
    return name(qname) + struct.pack(">HH", qtype, qclass)


def opt(payload=1232, do=False, version=0, options=b""):
    flags = 0x8000 if do else 0
    return b"\x00" + struct.pack(">HHBBHH", 41, payload, 0, version, flags, len(options)) + options


def dns_seeds():
    seeds = {}
    qid = 0x1000
    for n in NAMES:
        for t in ("A", "AAAA", "SRV", "TXT", "ANY", "SOA", "NS", "PTR", "CAA"):
            qid += 1
            seeds[f"{t}-{n or 'root'}"] = header(qid, 0x0100) + question(n, TYPES[t])
    for n in ("web.shop.svc.clusterset.local", "wide.shop.svc.clusterset.local",
              "_http._tcp.wide.shop.svc.clusterset.local"):
        for payload in (512, 1232, 4096):
            for do in (False, True):
                qid += 1
                t = "SRV" if n.startswith("_") else "A"
                seeds[f"edns{payload}{'-do' if do else ''}-{t}-{n}"] = (
                    header(qid, 0x0100, ar=1) + question(n, TYPES[t]) + opt(payload, do))
    web = question("web.shop.svc.clusterset.local", 1)
    cookie = struct.pack(">HH", 10, 8) + b"abcdefgh"
    subnet = struct.pack(">HHHBB", 8, 7, 1, 24, 0) + b"\x0a\x01\x02"
    special = {
        "edns-cookie": header(1, 0x0100, ar=1) + web + opt(options=cookie),
        "edns-subnet": header(2, 0x0100, ar=1) + web + opt(options=subnet),
        "edns-version1": header(3, 0x0100, ar=1) + web + opt(version=1),
        "edns-bad-option": header(4, 0x0100, ar=1) + web + opt(options=b"\x00\x0a\x00\x09abc"),
        "two-opt": header(5, 0x0100, ar=2) + web + opt() + opt(),
        "two-questions": header(6, 0x0100, qd=2) + web + web,
        "no-question": header(7, 0x0100, qd=0),
        "compressed-question": header(8, 0x0100, qd=2) + web + b"\x03www\xc0\x0c\x00\x01\x00\x01",
        "pointer-loop": header(9, 0x0100) + b"\xc0\x0c\x00\x01\x00\x01",
        "class-chaos": header(10, 0x0100) + question("version.bind", 16, 3),
        "class-any": header(11, 0x0100) + question("web.shop.svc.clusterset.local", 1, 255),
        "axfr": header(12, 0x0000) + question("clusterset.local", TYPES["AXFR"]),
        "opcode-status": header(13, 0x1000) + web,
        "opcode-notify": header(14, 0x2000) + question("clusterset.local", TYPES["SOA"]),
        "opcode-update": header(15, 0x2800) + question("clusterset.local", TYPES["SOA"]),
        "response": header(16, 0x8180) + web,
        "short": header(17, 0x0100)[:11],
        "header-only": header(18, 0x0100, qd=0),
        "trailing-byte": header(19, 0x0100) + web + b"\x00",
        "cut-question": header(20, 0x0100) + web[:-2],
        "label-64": header(21, 0x0100) + b"\x40" + b"a" * 64 + b"\x00\x00\x01\x00\x01",
        "cd-ad-rd": header(22, 0x0130) + web,
        "answer-section": header(23, 0x0100, an=1) + web + name("x") + struct.pack(">HHIH", 1, 1, 60, 4) + b"\x7f\x00\x00\x01",
        "qtype-opt": header(24, 0x0100) + question("web.shop.svc.clusterset.local", TYPES["OPT"]),
        "ds": header(25, 0x0100) + question("shop.svc.clusterset.local", TYPES["DS"]),
    }
    seeds.update(special)
    return seeds


def manifest_seeds():
    seeds = {}
    config = os.path.join(ROOT, "config")
    for entry in sorted(os.listdir(config)):
        if entry.endswith((".yaml", ".yml", ".json")):
            with open(os.path.join(config, entry), "rb") as f:
                seeds[entry] = f.read()
    seeds["import-v1alpha1.yaml"] = b"""apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceImport
metadata: {name: api, namespace: ns}
spec:
  type: ClusterSetIP
  ips: ["10.42.0.1"]
  ports: [{name: http, port: 80, protocol: TCP}]
"""
    seeds["list.json"] = b"""{"apiVersion": "v1", "kind": "List", "items": [
 {"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
  "metadata": {"name": "a", "namespace": "n"},
  "spec": {"type": "Headless", "ports": [{"port": 53, "protocol": "UDP", "name": "dns"}]}},
 {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
  "metadata": {"name": "a-1", "namespace": "n", "labels": {
    "multicluster.kubernetes.io/service-name": "a",
    "multicluster.kubernetes.io/source-cluster": "c1"}},
  "addressType": "IPv6", "ports": [{"port": 53, "protocol": "UDP", "name": "dns"}],
  "endpoints": [{"addresses": ["fd00::1"], "hostname": "x",
                 "conditions": {"ready": true}}]}]}
"""
    seeds["anchors.yaml"] = b"""%YAML 1.2
---
ports: &p [{name: http, port: 80, protocol: TCP}]
---
apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceImport
metadata: {name: b, namespace: "123"}
spec: {type: ClusterSetIP, ips: ["10.1.2.3"], ports: [{name: http, port: 80, protocol: TCP}]}
...
"""
    # A reload: the text before and after, split at a NUL (src/fuzzing.rs).
    # Both halves fit the 2 KiB the fuzzer reads (scripts/fuzz.sh).
    documents = []
    example = seeds.get("example-clusterset.yaml", b"")
    uncommented = b"\n".join(l for l in example.split(b"\n") if not l.lstrip().startswith(b"#"))
    for document in uncommented.split(b"\n---\n")[1:]:
        if sum(len(d) + 5 for d in documents) + len(document) > 1000:
            break
        documents.append(document)
    rotated = documents[1:] + documents[:1]
    seeds["reload-rotated.yaml"] = b"\n---\n".join(documents) + b"\0" + b"\n---\n".join(rotated)
    seeds["reload-dropped.yaml"] = seeds["anchors.yaml"] + b"\0" + seeds["anchors.yaml"].split(b"...")[0]
    seeds["skipped.yaml"] = b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, namespace: y}\ndata: {a: b}\n"
    return seeds


def write(target, seeds):
    directory = os.path.join(CORPUS, target)
    os.makedirs(directory, exist_ok=True)
    for key, data in seeds.items():
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in key)
        with open(os.path.join(directory, f"seed-{safe}"), "wb") as f:
            f.write(data)
    return len(seeds)


def main():
    targets = sys.argv[1:] or ["udp_fast_path", "hickory_path", "manifest"]
    counts = {}
    for target in targets:
        if target == "manifest":
            counts[target] = write(target, manifest_seeds())
        elif target in ("udp_fast_path", "hickory_path"):
            counts[target] = write(target, dns_seeds())
        else:
            print(f"unknown target {target}", file=sys.stderr)
            return 2
    for target, count in counts.items():
        print(f"{target}: {count} seeds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
