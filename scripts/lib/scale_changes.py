#!/usr/bin/env python3
"""One-service changes against a running `clusterset-dns serve --file`, for
scripts/bench-scale.sh (stdlib only).

    scale_changes.py MANIFEST DNS_PORT ADMIN_PORT SERVICES CHANGES TIMEOUT_S

Each change rewrites MANIFEST (a temporary file in the same directory,
then an atomic rename) with the ClusterSetIP of one service changed, and
waits until the server answers the service's A query with the new address.
The services changed are spread over the file (one near the start, one near
the end, ...); the changes accumulate, so each file differs from the one
before in exactly one service. Around every change the admin endpoint's
/metrics is read: the change must publish exactly once, and its
`clusterset_dns_zone_publish_duration_seconds` and
`clusterset_dns_zone_services_rebuilt` come from the differences of the
histograms' sums.

Prints one TSV row per change on stdout:
  change service write_ms visible_ms publish_ms rebuilt latency_ms
write_ms: writing and renaming the file; visible_ms: rename -> first
answer with the new address (file poll and settle, read, parse, publish);
publish_ms: the publish step alone (index update, rebuild, swap);
latency_ms: the server's own zone_publish_latency_seconds for the change.
"""

import http.client
import ipaddress
import os
import random
import re
import socket
import struct
import sys
import time

ZONE = "svc.clusterset.local"
WORDS = [
    "api", "web", "worker", "cache", "db", "gateway", "auth", "events",
    "queue", "store", "frontend", "backend", "indexer", "scheduler", "proxy",
    "metrics", "config", "session", "ledger", "router",
]
NAMESPACES = 100  # gen-bench-data.py's default


def metrics(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    values = {}
    for line in text.splitlines():
        m = re.match(r"(clusterset_dns_zone_(?:publish_duration_seconds|services_rebuilt|"
                     r"publish_latency_seconds)_(?:sum|count)) (\S+)$", line)
        if m:
            values[m.group(1)] = float(m.group(2))
    return values


def query_a(port, name):
    """The A addresses the server answers for `name` (UDP, one try)."""
    qid = random.randrange(65536)
    wire = b"".join(bytes([len(l)]) + l.encode() for l in name.rstrip(".").split(".")) + b"\0"
    msg = struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0) + wire + struct.pack("!HH", 1, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(0.5)
        s.sendto(msg, ("127.0.0.1", port))
        try:
            data = s.recv(4096)
        except socket.timeout:
            return []
    an = struct.unpack("!H", data[6:8])[0]
    off = 12 + len(wire) + 4
    out = []
    for _ in range(an):
        while True:  # owner name: a pointer or labels
            n = data[off]
            if n & 0xC0 == 0xC0:
                off += 2
                break
            off += 1 + n
            if n == 0:
                break
        rtype, _, _, rdlen = struct.unpack("!HHIH", data[off:off + 10])
        off += 10
        if rtype == 1:
            out.append(socket.inet_ntoa(data[off:off + rdlen]))
        off += rdlen
    return out


def main():
    path, dns_port, admin_port, services, changes, timeout = sys.argv[1:7]
    dns_port, admin_port, services = int(dns_port), int(admin_port), int(services)
    changes, timeout = int(changes), float(timeout)
    text = open(path, encoding="ascii").read()
    tmp = path + ".next"
    base = int(ipaddress.IPv4Address("10.96.0.0"))
    for k in range(changes):
        # Spread over the file; ClusterSetIP services only (i % 10 not 3 or 7).
        i = (k * services) // changes + (services // (2 * changes))
        while i % 10 in (3, 7):
            i += 1
        i = min(i, services - 1)
        while i % 10 in (3, 7):
            i -= 1
        name = f"{WORDS[(i // NAMESPACES) % len(WORDS)]}-{i:05d}"
        old_ip = str(ipaddress.IPv4Address(base + 10 + i))
        new_ip = f"10.250.{k // 250}.{k % 250 + 1}"
        # The ServiceImport's `ips: [<v4>` line; unique (only it holds the ClusterSetIP).
        needle = f"\n  name: {name}\n"
        at = text.index(needle)
        old_line = f"  ips: [{old_ip}"
        line_at = text.index(old_line, at)
        text = text[:line_at] + f"  ips: [{new_ip}" + text[line_at + len(old_line):]
        namespace = re.search(r"\n  namespace: (\S+)\n", text[at:]).group(1)
        fqdn = f"{name}.{namespace}.{ZONE}."
        before = metrics(admin_port)
        t0 = time.monotonic()
        with open(tmp, "w", encoding="ascii", newline="\n") as f:
            f.write(text)
        os.replace(tmp, path)
        t1 = time.monotonic()
        deadline = t1 + timeout
        while new_ip not in query_a(dns_port, fqdn):
            if time.monotonic() > deadline:
                sys.exit(f"change {k + 1}: {fqdn} did not answer {new_ip} within {timeout} s")
            time.sleep(0.002)
        t2 = time.monotonic()
        # The duration is observed just after the swap: wait for the count.
        count = "clusterset_dns_zone_publish_duration_seconds_count"
        while True:
            after = metrics(admin_port)
            if after.get(count, 0) > before.get(count, 0):
                break
            if time.monotonic() > deadline:
                sys.exit(f"change {k + 1}: no publish counted in /metrics")
            time.sleep(0.01)
        time.sleep(0.05)
        after = metrics(admin_port)

        def delta(key):
            return after.get(key, 0) - before.get(key, 0)

        publishes = delta(count)
        if publishes != 1:
            sys.exit(f"change {k + 1}: {publishes:g} publishes counted, expected 1")
        print("\t".join(map(str, [
            k + 1, f"{namespace}/{name}", f"{(t1 - t0) * 1000:.1f}", f"{(t2 - t1) * 1000:.1f}",
            f"{delta('clusterset_dns_zone_publish_duration_seconds_sum') * 1000:.3f}",
            f"{delta('clusterset_dns_zone_services_rebuilt_sum'):g}",
            f"{delta('clusterset_dns_zone_publish_latency_seconds_sum') * 1000:.1f}",
        ])), flush=True)


if __name__ == "__main__":
    main()
