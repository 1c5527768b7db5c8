#!/usr/bin/env python3
"""Does a full manifest re-parse stall TCP DNS or the admin endpoint?
(issue 11, finding 1b; docs/robustness.md, "Manifest input").

    scripts/bench-reload-stall.py [--services 10000] [--rounds 2]
                                  [--binary target/release/clusterset-dns]

Generates the benchmark manifest (scripts/gen-bench-data.py, --services
ServiceImports with their slices), starts `clusterset-dns serve --file` on
it (loopback ports), and per round renames in a version of the file with a
comment added to every document (so the parser's per-document cache hits
nothing and the whole file is parsed again). From the rename until
`clusterset_dns_source_reloads_total{result="ok"}` moves, it sends one TCP
DNS query and one `GET /ready` every 20 ms, each on a new connection, and
prints how many probes ran and their p50 / p99 / max latency, with the
server's VmRSS and VmHWM before and after. Then SIGTERM, and how long the
server took to exit. Stdlib only; loopback only; bounded (each round stops
after --round-timeout seconds).
"""

import argparse
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dns_query(name):
    """A query for `name` A, RD set, no EDNS."""
    qname = b"".join(bytes([len(label)]) + label.encode() for label in name.split(".") if label)
    return struct.pack(">HHHHHH", 0x4242, 0x0100, 1, 0, 0, 0) + qname + b"\x00" + struct.pack(">HH", 1, 1)


def tcp_probe(port, query, timeout=5.0):
    """Seconds for one query over a new TCP connection; raises on failure."""
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(struct.pack(">H", len(query)) + query)
        head = s.recv(2, socket.MSG_WAITALL)
        (length,) = struct.unpack(">H", head)
        reply = s.recv(length, socket.MSG_WAITALL)
        if len(reply) != length or reply[:2] != query[:2]:
            raise RuntimeError("bad TCP reply")
        if reply[3] & 0x0F != 0:
            raise RuntimeError(f"rcode {reply[3] & 0x0F} for the probe name")
    return time.monotonic() - start


def http_get(port, path, timeout=5.0):
    start = time.monotonic()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
        body = r.read().decode()
        status = r.status
    return time.monotonic() - start, status, body


def reloads_ok(admin):
    _, _, body = http_get(admin, "/metrics")
    for line in body.splitlines():
        if line.startswith('clusterset_dns_source_reloads_total{result="ok"}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def memory_kib(pid):
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(rest.split()[0])
    return fields.get("VmRSS", 0), fields.get("VmHWM", 0)


def pct(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))]


def ms(seconds):
    return f"{seconds * 1000:.1f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--services", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--binary", default=str(REPO / "target/release/clusterset-dns"))
    parser.add_argument("--round-timeout", type=float, default=300.0)
    parser.add_argument("--interval", type=float, default=0.02)
    args = parser.parse_args()

    binary = Path(args.binary)
    if not binary.is_file():
        sys.exit(f"{binary} is missing: cargo build --release (or pass --binary)")
    work = Path(tempfile.mkdtemp(prefix="reload-stall-"))
    subprocess.run(
        [sys.executable, str(REPO / "scripts/gen-bench-data.py"), "--services", str(args.services),
         "--queries", "10", "--out", str(work / "data")],
        check=True, stdout=subprocess.DEVNULL)
    text = (work / "data/clusterset.yaml").read_text()
    probe_name = (work / "data/probe.txt").read_text().split()[0]
    manifest = work / "clusterset.yaml"
    manifest.write_text(text)
    size_mb = manifest.stat().st_size / 1e6

    dns, admin = free_port(), free_port()
    server = subprocess.Popen(
        [str(binary), "serve", "--file", str(manifest), "--dns-listen", f"127.0.0.1:{dns}",
         "--admin-listen", f"127.0.0.1:{admin}", "--log", "warn"],
        stdin=subprocess.DEVNULL)
    try:
        started = time.monotonic()
        while True:
            if server.poll() is not None:
                sys.exit(f"the server exited with {server.returncode}")
            try:
                if http_get(admin, "/ready", 2)[1] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() - started > args.round_timeout:
                sys.exit("the server was not ready in time")
            time.sleep(0.05)
        print(f"manifest: {args.services} services, {size_mb:.1f} MB; ready after "
              f"{time.monotonic() - started:.1f} s; VmRSS/VmHWM {memory_kib(server.pid)} KiB")
        query = dns_query(probe_name)
        for round_ in range(1, args.rounds + 1):
            before = reloads_ok(admin)
            # A comment in every document: no document is in the parse cache.
            changed = text.replace("\n---\n", f"\n---\n# round {round_}\n")
            staged = work / "staged.yaml"
            staged.write_text(changed)
            tcp, ready, failures = [], [], 0
            os.rename(staged, manifest)
            renamed = time.monotonic()
            while reloads_ok(admin) <= before:
                if time.monotonic() - renamed > args.round_timeout:
                    sys.exit(f"round {round_}: no reload within {args.round_timeout} s")
                try:
                    tcp.append(tcp_probe(dns, query))
                    seconds, status, _ = http_get(admin, "/ready")
                    if status != 200:
                        failures += 1
                    ready.append(seconds)
                except (OSError, RuntimeError) as error:
                    failures += 1
                    print(f"  probe failed: {error}")
                time.sleep(args.interval)
            reload_s = time.monotonic() - renamed
            rss, hwm = memory_kib(server.pid)
            print(f"round {round_}: reload {reload_s:.2f} s, {len(tcp)} probes, {failures} failed; "
                  f"TCP p50/p99/max {ms(pct(tcp, 50))}/{ms(pct(tcp, 99))}/{ms(max(tcp))} ms; "
                  f"/ready p50/p99/max {ms(pct(ready, 50))}/{ms(pct(ready, 99))}/{ms(max(ready))} ms; "
                  f"VmRSS {rss // 1024} MiB, VmHWM {hwm // 1024} MiB")
            if failures:
                print(f"FAIL: {failures} probes failed during round {round_}")
        stop = time.monotonic()
        server.send_signal(signal.SIGTERM)
        code = server.wait(timeout=60)
        print(f"SIGTERM: exit {code} after {time.monotonic() - stop:.2f} s (lame duck included)")
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        for path in sorted(work.rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        work.rmdir()


if __name__ == "__main__":
    main()
