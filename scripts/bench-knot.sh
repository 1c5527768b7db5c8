#!/usr/bin/env bash
# Benchmark clusterset-dns against Knot DNS on the same zone, in one run.
#
#   scripts/bench-knot.sh
#
# Steps: install missing tools (apt), `cargo build --release`, generate a
# data set with scripts/gen-bench-data.py, `clusterset-dns dump-zone` it into
# Knot's zone file, check that Knot and clusterset-dns give the same answers
# for a sample of queries, then for each server in turn: start it pinned to
# one CPU, wait until it answers, load it with dnsperf pinned to the other
# CPU, read its VmRSS, stop it. Prints one row per dnsperf run (QPS, latency,
# lost queries, VmRSS, CPU time of server and dnsperf) and a summary: per
# server the best dnsperf setting that lost no query, over the runs during
# which other processes left the CPUs alone, with the QPS ratio
# clusterset-dns / Knot.
#
# Servers (BENCH_SERVERS, in this order):
#   knot      knotd 3.x, udp-workers 1, tcp-workers 1, background-workers 1
#   fast      clusterset-dns serve --udp-workers 1            (UDP fast path)
#   hickory   clusterset-dns serve --udp-workers 1 --fast-path false
#   fast-base, hickory-base
#             the same with CLUSTERSET_DNS_BASELINE_BIN (an earlier build), for
#             before/after comparisons in one interleaved run, e.g.
#             BENCH_SERVERS="knot fast-base fast hickory-base hickory"
#
# Environment (all optional):
#   BENCH_DURATION=10          seconds of load per server and dnsperf setting
#   BENCH_ROUNDS=1             repeat all servers this many times (interleaved)
#   BENCH_DNSPERF="-c 8 -q 100;-c 8 -q 200;-c 16 -q 500"
#                              ';'-separated dnsperf settings; each is run
#                              against each server; the summary keeps, per
#                              server, the best setting that lost no query.
#                              A setting with a fixed rate (-Q N, below every
#                              server's ceiling) also gets a summary of CPU
#                              per query, the median over the rounds and its
#                              ratio to Knot's, e.g.
#                              BENCH_DNSPERF="-c 8 -q 100 -Q 50000" BENCH_ROUNDS=5
#   BENCH_WARMUP=2             seconds of unmeasured load after start
#   BENCH_SERVERS="knot fast hickory"
#   BENCH_SERVICES=10000 BENCH_QUERIES=100000 BENCH_SEED=1   data set
#   BENCH_SANITY=200           queries sampled from queries.txt for the answer
#                              comparison (plus the edge cases of
#                              sanity-extra.txt); 0 skips the comparison
#   BENCH_SANITY_ONLY=1        stop after the answer comparison
#   BENCH_SERVER_CPU=0 BENCH_CLIENT_CPU=1   taskset CPU lists
#   BENCH_MAX_LOAD=1.5 BENCH_MAX_BUSY=25 BENCH_LOAD_WAIT=60
#                              before starting, wait up to BENCH_LOAD_WAIT s
#                              for the 1-min load average to drop below
#                              BENCH_MAX_LOAD; before each server, wait up to
#                              BENCH_LOAD_WAIT s until other processes keep the
#                              CPUs less than BENCH_MAX_BUSY % busy (3 s
#                              sample). Then go on regardless, with a warning
#                              (the busy % is recorded with every run)
#   BENCH_NAMESERVER_ADDRESSES=ADDR[,ADDR]  pass --nameserver-addresses to serve
#                              and dump-zone (gives ns.dns.clusterset.local
#                              address records); unset: the flag is omitted
#   BENCH_QUIET=10             a run is "quiet" when other processes took less
#                              than this % of the two cores during it; the
#                              summary uses only quiet runs when every server
#                              has some
#   BENCH_NICE=0               run the measured servers and dnsperf with this
#                              nice value (e.g. -19, as root, on a machine
#                              shared with other work; 0 leaves it alone)
#   BENCH_TIMEOUT=1800         hard limit for everything after the build, s
#   BENCH_RESULTS=FILE         also write the per-run rows (TSV) to FILE
#   BENCH_PERF=DIR             after the measured rounds, one profile per
#                              server: under the first dnsperf setting, `perf
#                              record` (call graphs) of the server for
#                              BENCH_PERF_SECONDS (5) s into DIR/<server>.perf,
#                              then a split of its samples: kernel, the
#                              server's own code, libraries, and the largest
#                              kernel paths (system calls, waiting, waking the
#                              client) and user-space symbols. Profiled runs
#                              are not in the table (perf itself costs CPU)
#   CLUSTERSET_DNS_BIN=PATH    use this binary, skip cargo build
#   CLUSTERSET_DNS_BASELINE_BIN=PATH  the binary of the *-base servers
#   KEEP_TMP=1                 keep the temporary directory (path is printed)
#
# Every process started here is killed on exit (trap).

set -euo pipefail

DURATION=${BENCH_DURATION:-10}
ROUNDS=${BENCH_ROUNDS:-1}
DNSPERF_SETTINGS=${BENCH_DNSPERF:-"-c 8 -q 100;-c 8 -q 200;-c 16 -q 500"}
WARMUP=${BENCH_WARMUP:-2}
SERVERS=${BENCH_SERVERS:-"knot fast hickory"}
SERVICES=${BENCH_SERVICES:-10000}
QUERIES=${BENCH_QUERIES:-100000}
SEED=${BENCH_SEED:-1}
SANITY=${BENCH_SANITY:-200}
SERVER_CPU=${BENCH_SERVER_CPU:-0}
CLIENT_CPU=${BENCH_CLIENT_CPU:-1}
MAX_LOAD=${BENCH_MAX_LOAD:-1.5}
MAX_BUSY=${BENCH_MAX_BUSY:-25}
QUIET_OTHER=${BENCH_QUIET:-10}
LOAD_WAIT=${BENCH_LOAD_WAIT:-60}
NS_ADDRS=${BENCH_NAMESERVER_ADDRESSES:-}
TIMEOUT=${BENCH_TIMEOUT:-1800}
NICE=${BENCH_NICE:-0}

# Log to the original stderr, also from a trap that runs while a redirection
# is in effect.
exec {LOGFD}>&2
log() { printf '[bench %(%H:%M:%S)T] %s\n' -1 "$*" >&"$LOGFD"; }
die() {
	log "ERROR: $*"
	exit 1
}

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
# shellcheck source=scripts/lib/bench.sh
source "$REPO/scripts/lib/bench.sh"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/bench-knot.XXXXXX")
PIDS=()

bench_traps

# ---- tools ----------------------------------------------------------------------
need_pkgs=()
command -v dnsperf >/dev/null 2>&1 || need_pkgs+=(dnsperf)
command -v knotd >/dev/null 2>&1 || [[ -x /usr/sbin/knotd ]] || need_pkgs+=(knot)
command -v kdig >/dev/null 2>&1 || need_pkgs+=(knot-dnsutils)
command -v dig >/dev/null 2>&1 || need_pkgs+=(bind9-dnsutils)
command -v taskset >/dev/null 2>&1 || need_pkgs+=(util-linux)
if ((${#need_pkgs[@]})); then
	log "installing ${need_pkgs[*]}"
	SUDO=
	((EUID == 0)) || SUDO=sudo
	export DEBIAN_FRONTEND=noninteractive
	$SUDO apt-get update -qq
	$SUDO apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >&2
fi
command -v python3 >/dev/null 2>&1 || die "python3 is required"
# knotd from the Debian package is in /usr/sbin, which may not be on PATH.
KNOTD=$(command -v knotd || echo /usr/sbin/knotd)
[[ -x $KNOTD ]] || die "knotd not found"

# ---- build ----------------------------------------------------------------------
BIN=$(bench_binary)

# From here on, the whole run is bounded.
bench_watchdog bench "$TIMEOUT"
WATCHDOG=$!
PIDS+=("$WATCHDOG")

# ---- data -----------------------------------------------------------------------
DATA=$TMP/data
log "generating $SERVICES services, $QUERIES queries into $DATA"
python3 "$REPO/scripts/gen-bench-data.py" --services "$SERVICES" --queries "$QUERIES" \
	--seed "$SEED" --out "$DATA" 2>"$TMP/gen.log" || {
	cat "$TMP/gen.log" >&2
	die "gen-bench-data.py failed"
}
read -r PROBE_NAME PROBE_TYPE PROBE_ADDR <"$DATA/probe.txt"

NS_FLAG=()
[[ -n $NS_ADDRS ]] && NS_FLAG=(--nameserver-addresses "$NS_ADDRS")

ZONEFILE=$TMP/knot/clusterset.local.zone
mkdir -p "$TMP/knot"
log "dump-zone"
"$BIN" dump-zone --file "$DATA/clusterset.yaml" "${NS_FLAG[@]}" >"$ZONEFILE" 2>"$TMP/dump-zone.err" || {
	cat "$TMP/dump-zone.err" >&2
	die "dump-zone failed"
}
ZONE_RECORDS=$(grep -cv '^\$' "$ZONEFILE" || true)

# ---- ports ----------------------------------------------------------------------
free_ports() { # N -> N ports free for both UDP and TCP on 127.0.0.1
	python3 - "$1" <<-'EOF'
		import socket, sys
		out, keep = [], []
		while len(out) < int(sys.argv[1]):
		    t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
		    t.bind(("127.0.0.1", 0))
		    port = t.getsockname()[1]
		    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
		    try:
		        u.bind(("127.0.0.1", port))
		    except OSError:
		        t.close(); continue
		    keep += [t, u]; out.append(port)
		print(" ".join(map(str, out)))
	EOF
}
read -r PORT_KNOT PORT_FAST PORT_HICKORY ADMIN_FAST ADMIN_HICKORY \
	PORT_FAST_BASE PORT_HICKORY_BASE ADMIN_FAST_BASE ADMIN_HICKORY_BASE < <(free_ports 9)
BASE_BIN=${CLUSTERSET_DNS_BASELINE_BIN:-}
if [[ " $SERVERS " == *-base* ]]; then
	[[ -x $BASE_BIN ]] || die "BENCH_SERVERS has *-base servers: set CLUSTERSET_DNS_BASELINE_BIN to an executable"
fi

knot_config "$TMP/knot" "$PORT_KNOT" "$ZONEFILE"

# ---- servers --------------------------------------------------------------------
port_of() {
	case $1 in
	knot) echo "$PORT_KNOT" ;;
	fast) echo "$PORT_FAST" ;;
	hickory) echo "$PORT_HICKORY" ;;
	fast-base) echo "$PORT_FAST_BASE" ;;
	hickory-base) echo "$PORT_HICKORY_BASE" ;;
	*) die "unknown server $1" ;;
	esac
}

# start_server NAME [taskset-cpus] -> sets SERVER_PID
start_server() {
	local name=$1 cpus=${2:-} port pin=()
	port=$(port_of "$name")
	if [[ -n $cpus ]]; then
		pin=(taskset -c "$cpus")
		((NICE == 0)) || pin+=(nice -n "$NICE")
	fi
	local logf=$TMP/$name.log
	case $name in
	knot)
		"${pin[@]}" "$KNOTD" -c "$TMP/knot/knot.conf" >>"$logf" 2>&1 &
		;;
	fast | hickory | fast-base | hickory-base)
		local admin fp=() bin=$BIN
		case $name in
		fast) admin=$ADMIN_FAST ;;
		hickory) admin=$ADMIN_HICKORY fp=(--fast-path false) ;;
		fast-base) admin=$ADMIN_FAST_BASE bin=$BASE_BIN ;;
		hickory-base) admin=$ADMIN_HICKORY_BASE bin=$BASE_BIN fp=(--fast-path false) ;;
		esac
		"${pin[@]}" "$bin" serve --file "$DATA/clusterset.yaml" \
			--dns-listen "127.0.0.1:$port" --admin-listen "127.0.0.1:$admin" \
			--udp-workers 1 "${fp[@]}" "${NS_FLAG[@]}" >>"$logf" 2>&1 &
		;;
	esac
	SERVER_PID=$!
	PIDS+=("$SERVER_PID")
	# Ready = the probe name answers with its address (the zone is loaded).
	local deadline=$((SECONDS + 90)) got
	while :; do
		got=$(dig +short +tries=1 +time=1 -p "$port" @127.0.0.1 "$PROBE_NAME" "$PROBE_TYPE" 2>/dev/null || true)
		[[ $got == *"$PROBE_ADDR"* ]] && break
		if ! kill -0 "$SERVER_PID" 2>/dev/null; then
			tail -n 30 "$logf" >&2
			die "$name exited during startup (log above)"
		fi
		if ((SECONDS > deadline)); then
			tail -n 30 "$logf" >&2
			die "$name did not answer $PROBE_NAME $PROBE_TYPE within 90 s"
		fi
		sleep 0.2
	done
}

stop_server() {
	local pid=$1 name=$2
	if ! kill -0 "$pid" 2>/dev/null; then
		log "WARNING: $name (pid $pid) is no longer running"
		tail -n 30 "$TMP/$name.log" >&2
		return
	fi
	kill -TERM "$pid"
	for _ in $(seq 50); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	drop_pid "$pid"
}

# utime + stime of a process (all threads), in clock ticks.
proc_ticks() { sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | awk '{ print $12 + $13 }'; }
rss_kb() { awk '$1 == "VmRSS:" { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }
hwm_kb() { awk '$1 == "VmHWM:" { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }

# ---- answer comparison ------------------------------------------------------------
cat >"$TMP/compare.py" <<'EOF'
"""Send each query (UDP, RD set, no EDNS, like dnsperf; then again with EDNS
for the edge cases) to every server and compare rcode, flags, and the sorted
answer and authority sections and the additional records (as a set), TTLs
included, with the reference (first) server. Prints every difference; exit
status 1 if any (truncated answers that differ only in how much of the RRset
they keep are printed but not counted)."""
import random, socket, struct, sys

def qname_wire(name):
    out = b""
    for label in name.rstrip(".").split("."):
        out += bytes([len(label)]) + label.encode()
    return out + b"\0"

TYPES = {"A": 1, "NS": 2, "CNAME": 5, "SOA": 6, "PTR": 12, "MX": 15, "TXT": 16,
         "AAAA": 28, "SRV": 33, "OPT": 41, "ANY": 255}
TNAME = {v: k for k, v in TYPES.items()}
RCODES = ["NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED"]

def read_name(msg, off):
    labels, jumped, end = [], False, None
    for _ in range(128):
        n = msg[off]
        if n & 0xC0 == 0xC0:
            if not jumped:
                end = off + 2
            off = ((n & 0x3F) << 8) | msg[off + 1]
            jumped = True
            continue
        off += 1
        if n == 0:
            break
        labels.append(msg[off:off + n].decode("ascii", "replace").lower())
        off += n
    return ".".join(labels) + ".", (end if jumped else off)

def rdata_text(msg, t, off, ln):
    rd = msg[off:off + ln]
    if t == 1:
        return socket.inet_ntop(socket.AF_INET, rd)
    if t == 28:
        return socket.inet_ntop(socket.AF_INET6, rd)
    if t in (2, 5, 12):
        return read_name(msg, off)[0]
    if t == 33:
        pr, w, p = struct.unpack("!HHH", rd[:6])
        return f"{pr} {w} {p} {read_name(msg, off + 6)[0]}"
    if t == 15:
        return f"{struct.unpack('!H', rd[:2])[0]} {read_name(msg, off + 2)[0]}"
    if t == 6:
        m, o = read_name(msg, off)
        r, o = read_name(msg, o)
        return f"{m} {r} " + " ".join(map(str, struct.unpack("!IIIII", msg[o:o + 20])))
    if t == 16:
        parts, i = [], 0
        while i < len(rd):
            parts.append('"' + rd[i + 1:i + 1 + rd[i]].decode("ascii", "replace") + '"')
            i += 1 + rd[i]
        return " ".join(parts)
    return "\\# " + rd.hex()

def parse(msg):
    ident, flags, qd, an, ns, ar = struct.unpack("!HHHHHH", msg[:12])
    off = 12
    for _ in range(qd):
        _, off = read_name(msg, off)
        off += 4
    sections = []
    for count in (an, ns, ar):
        recs = []
        for _ in range(count):
            name, off = read_name(msg, off)
            t, c, ttl, ln = struct.unpack("!HHIH", msg[off:off + 10])
            off += 10
            if t == 41:
                recs.append(f"OPT payload={c} ext-rcode/flags={ttl:#x} rdlen={ln}")
            else:
                recs.append(f"{name} {ttl} {'IN' if c == 1 else c} {TNAME.get(t, t)} {rdata_text(msg, t, off, ln)}")
            off += ln
        sections.append(sorted(recs))
    rcode = flags & 0xF
    fl = [f for f, bit in (("qr", 15), ("aa", 10), ("tc", 9), ("rd", 8), ("ra", 7)) if flags >> bit & 1]
    return {"rcode": RCODES[rcode] if rcode < len(RCODES) else str(rcode),
            "flags": " ".join(fl), "answer": sections[0], "authority": sections[1],
            # As a set: Knot repeats a target's addresses once per SRV record
            # pointing at it; that is not a difference in content.
            "additional": sorted({r for r in sections[2] if not r.startswith("OPT ")}),
            "opt": [r for r in sections[2] if r.startswith("OPT ")]}

def ask(port, name, qtype, edns):
    ident = random.randrange(65536)
    q = struct.pack("!HHHHHH", ident, 0x0100, 1, 0, 0, 1 if edns else 0)
    q += qname_wire(name) + struct.pack("!HH", TYPES[qtype], 1)
    if edns:
        q += b"\0" + struct.pack("!HHIH", 41, 1232, 0, 0)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(2)
    try:
        for _ in range(3):
            s.sendto(q, ("127.0.0.1", port))
            try:
                while True:
                    msg, _ = s.recvfrom(65535)
                    if msg[:2] == q[:2]:
                        return parse(msg)
            except socket.timeout:
                continue
        return {"rcode": "TIMEOUT", "flags": "", "answer": [], "authority": [], "additional": [], "opt": []}
    finally:
        s.close()

def main():
    servers = [(a.split("=")[0], int(a.split("=")[1])) for a in sys.argv[3].split(",")]
    sample, extra = int(sys.argv[4]), sys.argv[2]
    lines = open(sys.argv[1]).read().split("\n")
    lines = [l for l in lines if l]
    step = max(1, len(lines) // max(sample, 1))
    queries = [(l, False) for l in lines[::step][:sample]] if sample else []
    ext = [l for l in open(extra).read().split("\n") if l]
    queries += [(l, False) for l in ext] + [(l, True) for l in ext]
    ref_name, ref_port = servers[0]
    serials = {}

    def normalize(resp, server):
        # The SOA serial is derived from the time the zone was built, so
        # dump-zone (Knot's file) and serve never agree on it: compare the
        # SOA without it, and report the serials once.
        def strip(rec):
            f = rec.split()
            if len(f) >= 7 and f[3] == "SOA":
                serials.setdefault(server, set()).add(f[6])
                f[6] = "<serial>"
                return " ".join(f)
            return rec
        for k in ("answer", "authority", "additional"):
            resp[k] = sorted(strip(r) for r in resp[k])
        return resp
    diffs = {name: {"answer": 0, "other": 0, "tc": 0} for name, _ in servers[1:]}
    rcodes = {}
    for line, edns in queries:
        name, qtype = line.split()
        ref = normalize(ask(ref_port, name, qtype, edns), ref_name)
        rcodes[ref["rcode"]] = rcodes.get(ref["rcode"], 0) + 1
        for sname, port in servers[1:]:
            got = normalize(ask(port, name, qtype, edns), sname)
            bad = [k for k in ("rcode", "flags", "answer", "authority", "additional")
                   if got[k] != ref[k]]
            if not bad:
                continue
            what = f"{sname} vs {ref_name}: {name} {qtype}{' +edns' if edns else ''}"
            if (bad == ["answer"] or bad == ["answer", "additional"]) and "tc" in ref["flags"].split():
                # Both truncated (TC): how much of the RRset a truncated UDP answer
                # keeps is up to the server (RFC 2181 9); clients retry over TCP.
                diffs[sname]["tc"] += 1
                print(f"TRUNCATED (both TC, partial answers differ; not a mismatch) {what}: "
                      f"{ref_name} {len(ref['answer'])} answer records, {sname} {len(got['answer'])}")
                continue
            core = any(k in ("rcode", "answer") for k in bad)
            diffs[sname]["answer" if core else "other"] += 1
            print(f"MISMATCH {'(rcode/answer)' if core else '(flags/authority/additional)'} {what}")
            if "flags" not in bad:
                print(f"  flags (same): {ref['flags']}")
            for k in bad:
                print(f"  {k}:")
                print(f"    {ref_name:8}: {ref[k]}")
                print(f"    {sname:8}: {got[k]}")
    print(f"compared {len(queries)} queries ({min(sample, len(lines))} sampled from "
          f"{sys.argv[1].rsplit('/', 1)[-1]} every {step} lines, {len(ext)} edge cases "
          f"without and with EDNS); {ref_name} rcodes: {rcodes}")
    print("  SOA serials seen (ignored in the comparison): "
          + ", ".join(f"{k} {sorted(v)}" for k, v in serials.items()))
    status = 0
    for sname, d in diffs.items():
        print(f"  {sname} vs {ref_name}: {d['answer']} rcode/answer mismatches, "
              f"{d['other']} flags/authority/additional-only mismatches, "
              f"{d['tc']} truncated answers that differ only in the partial RRset")
        status |= bool(d["answer"] or d["other"])
    sys.exit(status)

main()
EOF

# ---- summary --------------------------------------------------------------------
RESULTS=$TMP/results.tsv
printf 'round\tserver\tsetting\tqps\tavg_latency_ms\tlost\tsent\tcompleted\trcodes\tresponse_bytes\trss_kb\thwm_kb\tserver_cpu_pct\tdnsperf_cpu_pct\tserver_core_busy_pct\tclient_core_busy_pct\tbusy_before_pct\n' >"$RESULTS"

cat >"$TMP/summary.py" <<'EOF'
import csv, statistics, sys
QUIET = float(sys.argv[2])
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
label = {"knot": "Knot DNS", "fast": "clusterset-dns (fast path)",
         "hickory": "clusterset-dns (--fast-path false)"}
for r in rows:
    # CPU time other processes took on the two cores during the run: core busy
    # time not accounted to the server (core 0) or to dnsperf (core 1).
    r["other"] = max(float(r["server_core_busy_pct"]) - float(r["server_cpu_pct"]),
                     float(r["client_core_busy_pct"]) - float(r["dnsperf_cpu_pct"]), 0)
    r["us"] = float(r["server_cpu_pct"]) * 1e4 / max(float(r["qps"]), 1)
print("\nAll runs:")
fmt = "{:>5}  {:<36} {:<14} {:>8} {:>8} {:>6} {:>8} {:>6} {:>5} {:>5} {:>6} {:>6}  {}"
print(fmt.format("round", "server", "dnsperf", "QPS", "avg ms", "lost", "RSS MiB", "resp B",
                 "srv%", "cli%", "us/q", "other%", "rcodes"))
for r in rows:
    print(fmt.format(r["round"], label.get(r["server"], r["server"]), r["setting"],
                     f"{float(r['qps']):.0f}", r["avg_latency_ms"], r["lost"],
                     f"{int(r['rss_kb']) / 1024:.1f}", r["response_bytes"],
                     r["server_cpu_pct"], r["dnsperf_cpu_pct"], f"{r['us']:.1f}",
                     f"{r['other']:.0f}", r["rcodes"]))
print("(resp B: dnsperf's average response size; srv%/cli%: CPU time of the server process"
      " and of dnsperf, % of one core; us/q: server CPU microseconds per answered query;"
      f" other%: CPU other processes took on the two cores; runs with other% < {QUIET:g} are 'quiet')")
quiet = [r for r in rows if r["other"] < QUIET]
use = quiet if {r["server"] for r in quiet} == {r["server"] for r in rows} else rows
best = {}
for server in dict.fromkeys(r["server"] for r in rows):
    by_setting = {}
    for r in use:
        if r["server"] == server:
            by_setting.setdefault(r["setting"], []).append(r)
    def score(item):
        runs = item[1]
        return (all(int(r["lost"]) == 0 for r in runs), max(float(r["qps"]) for r in runs))
    best[server] = max(by_setting.items(), key=score)
knot = best.get("knot")
knot_best = max(float(r["qps"]) for r in knot[1]) if knot else None
scope = (f"quiet runs only, {len(use)} of {len(rows)}" if use is quiet
         else "all runs: not every server had a quiet run")
print(f"\nSummary ({scope}; per server the dnsperf setting with the highest QPS among those"
      " that lost no query; QPS of the best run, then median [min-max] and count of runs):")
fmt = "{:<36} {:<14} {:>8} {:>24} {:>8} {:>5} {:>8} {:>8} {:>5} {:>5} {:>6} {:>8}"
print(fmt.format("server", "dnsperf", "QPS", "(median [min-max], n)", "avg ms", "lost", "RSS MiB",
                 "HWM MiB", "srv%", "cli%", "us/q", "vs Knot"))
for server, (setting, runs) in best.items():
    top = max(runs, key=lambda r: float(r["qps"]))
    q = [float(r["qps"]) for r in runs]
    spread = f"({statistics.median(q):.0f} [{min(q):.0f}-{max(q):.0f}], {len(q)})"
    ratio = f"{float(top['qps']) / knot_best:.2f}x" if knot_best else "-"
    print(fmt.format(label.get(server, server), setting, f"{float(top['qps']):.0f}", spread,
                     top["avg_latency_ms"], sum(int(r["lost"]) for r in runs),
                     f"{int(top['rss_kb']) / 1024:.1f}", f"{int(top['hwm_kb']) / 1024:.1f}",
                     top["server_cpu_pct"], top["dnsperf_cpu_pct"], f"{top['us']:.1f}", ratio))
print("(avg ms, RSS, HWM, srv%, cli%, us/q: of the best run; lost: sum over the runs counted)")
# Settings with a fixed offered rate (dnsperf -Q): every server answers the
# same load, so server CPU per query compares their efficiency directly.
fixed = [r for r in use if "-Q" in r["setting"].split()]
if fixed:
    print(f"\nCPU per query at a fixed offered rate ({scope}; median [min-max] over the rounds"
          " of the server's CPU microseconds per answered query, and the ratio of the medians"
          " to Knot's; lower is better):")
    fmt = "{:<36} {:<22} {:>6} {:>16} {:>9} {:>5} {:>8}"
    print(fmt.format("server", "dnsperf", "runs", "us/q", "QPS", "lost", "vs Knot"))
    for setting in dict.fromkeys(r["setting"] for r in fixed):
        med = {}
        for server in dict.fromkeys(r["server"] for r in fixed):
            runs = [r for r in fixed if r["server"] == server and r["setting"] == setting]
            if runs:
                med[server] = (statistics.median(r["us"] for r in runs), runs)
        for server, (m, runs) in med.items():
            us = [r["us"] for r in runs]
            ratio = f"{m / med['knot'][0]:.2f}x" if "knot" in med else "-"
            print(fmt.format(label.get(server, server), setting, len(runs),
                             f"{m:.2f} [{min(us):.2f}-{max(us):.2f}]",
                             f"{statistics.median(float(r['qps']) for r in runs):.0f}",
                             sum(int(r["lost"]) for r in runs), ratio))
EOF

# timed OUT CMD...: run CMD with stdout+stderr to OUT and its wall, user and
# system seconds to OUT.time.
timed() {
	local out=$1 TIMEFORMAT='%R %U %S'
	shift
	{ time "$@" >"$out" 2>&1; } 2>"$out.time"
}

# run_dnsperf ROUND SERVER SETTING PID
run_dnsperf() {
	local round=$1 server=$2 setting=$3 pid=$4 port out
	port=$(port_of "$server")
	out=$TMP/dnsperf-$server-r$round-$(tr -c 'a-z0-9' '_' <<<"$setting").txt
	grep '^cpu[0-9]' /proc/stat >"$out.stat0"
	proc_ticks "$pid" >"$out.srv0"
	# shellcheck disable=SC2086 # the setting is a list of dnsperf flags
	run_waited timed "$out" timeout $((DURATION + 30)) taskset -c "$CLIENT_CPU" nice -n "$NICE" \
		dnsperf -s 127.0.0.1 -p "$port" -d "$DATA/queries.txt" -l "$DURATION" -T 1 $setting ||
		{
			cat "$out" >&2
			die "dnsperf failed against $server"
		}
	proc_ticks "$pid" >"$out.srv1"
	grep '^cpu[0-9]' /proc/stat >"$out.stat1"
	python3 - "$out" "$round" "$server" "$setting" "$(rss_kb "$pid")" "$(hwm_kb "$pid")" \
		"$SERVER_CPU" "$CLIENT_CPU" "$(getconf CLK_TCK)" "$QUIET_BUSY" >>"$RESULTS" <<-'EOF'
		import re, sys
		text = open(sys.argv[1]).read()
		def cpu_busy(cpu):
		    # % of the run the CPU was not idle (any process: server, dnsperf, others).
		    def read(path):
		        for line in open(path):
		            f = line.split()
		            if f[0] == f"cpu{cpu}":
		                v = list(map(int, f[1:]))
		                return sum(v[:8]), v[3] + v[4]
		        return 0, 0
		    (t0, i0), (t1, i1) = read(sys.argv[1] + ".stat0"), read(sys.argv[1] + ".stat1")
		    return f"{100 * (1 - (i1 - i0) / (t1 - t0)):.0f}" if t1 > t0 else "?"
		cpu0_busy, cpu1_busy = cpu_busy(sys.argv[7]), cpu_busy(sys.argv[8])
		# CPU time of the server process (all threads) and of dnsperf, as % of
		# the wall time of the dnsperf run.
		wall, user, system = map(float, open(sys.argv[1] + ".time").read().split()[-3:])
		ticks = [int(open(sys.argv[1] + f".srv{i}").read().strip() or 0) for i in (0, 1)]
		srv_cpu = f"{100 * (ticks[1] - ticks[0]) / int(sys.argv[9]) / wall:.1f}"
		cli_cpu = f"{100 * (user + system) / wall:.0f}"
		def num(pattern, cast=float):
		    m = re.search(pattern, text)
		    if not m:
		        sys.exit(f"dnsperf output lacks {pattern!r}:\n{text}")
		    return cast(m.group(1))
		qps = num(r"Queries per second:\s+([\d.]+)")
		lat = num(r"Average Latency \(s\):\s+([\d.]+)") * 1000
		lost = num(r"Queries lost:\s+(\d+)", int)
		sent = num(r"Queries sent:\s+(\d+)", int)
		done = num(r"Queries completed:\s+(\d+)", int)
		m = re.search(r"Response codes:\s+(.*)", text)
		rc = m.group(1).strip() if m else ""
		m = re.search(r"Average packet size:\s+request (\d+), response (\d+)", text)
		size = m.group(2) if m else ""
		print("\t".join(map(str, [sys.argv[2], sys.argv[3], sys.argv[4], f"{qps:.1f}", f"{lat:.3f}",
		                          lost, sent, done, rc, size, sys.argv[5], sys.argv[6],
		                          srv_cpu, cli_cpu, cpu0_busy, cpu1_busy, sys.argv[10]])))
	EOF
	tail -n 1 "$RESULTS" | awk -F'\t' '{ printf "    %-8s %-14s QPS %10s  avg %s ms  lost %s  CPU: server %s%% dnsperf %s%% (cores busy %s%%/%s%%)  (%s)\n", $2, $3, $4, $5, $6, $13, $14, $15, $16, $9 }' >&2
}

# Before each server: wait (up to BENCH_LOAD_WAIT s) until the machine is
# quiet: the CPUs were busy less than BENCH_MAX_BUSY % over 3 s (our own
# processes are idle at that moment). The 1-min load average is no use between
# runs, since it still counts our own previous run.
cpu_busy_pct() {
	python3 - <<-'EOF'
		import time
		def read():
		    f = open("/proc/stat").readline().split()
		    v = list(map(int, f[1:9]))
		    return sum(v), v[3] + v[4]
		t0, i0 = read(); time.sleep(3); t1, i1 = read()
		print(f"{100 * (1 - (i1 - i0) / max(t1 - t0, 1)):.0f}")
	EOF
}
wait_for_quiet() {
	local deadline=$((SECONDS + LOAD_WAIT)) busy
	while :; do
		busy=$(cpu_busy_pct)
		if ((busy < MAX_BUSY)); then
			QUIET_BUSY=$busy
			return
		fi
		if ((SECONDS >= deadline)); then
			log "WARNING: other processes keep the CPUs ${busy}% busy (>= ${MAX_BUSY}%) after waiting ${LOAD_WAIT}s; measuring anyway, numbers may be low/noisy"
			LOAD_WARNINGS+=("$busy%")
			QUIET_BUSY=$busy
			return
		fi
		sleep 2
	done
}
LOAD_WARNINGS=()
QUIET_BUSY=?

# ---- environment report ------------------------------------------------------------
{
	echo "== environment"
	echo "date:        $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "kernel:      $(uname -r)"
	echo "nproc:       $(nproc)"
	echo "cpu:         $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
	echo "knotd:       $("$KNOTD" -V 2>&1 | head -n1)"
	echo "dnsperf:     $(dnsperf -h 2>&1 | awk '/^Version/ { print $2; exit }')"
	echo "binary:      $BIN ($("$BIN" --version 2>&1), built $(date -u -r "$BIN" +%Y-%m-%dT%H:%M:%SZ), sha256 $(sha256sum "$BIN" | cut -c1-16))"
	if [[ -n $BASE_BIN ]]; then
		echo "baseline:    $BASE_BIN ($("$BASE_BIN" --version 2>&1), built $(date -u -r "$BASE_BIN" +%Y-%m-%dT%H:%M:%SZ), sha256 $(sha256sum "$BASE_BIN" | cut -c1-16))"
	fi
	echo "data:        $(tr '\n' ' ' <"$DATA/summary.txt")"
	echo "zone:        $ZONE_RECORDS records in the dump-zone master file"
	echo "servers on CPU $SERVER_CPU, dnsperf on CPU $CLIENT_CPU, nice $NICE; ${DURATION}s per run; settings: $DNSPERF_SETTINGS; rounds: $ROUNDS"
	echo "load:        $(cat /proc/loadavg)"
} >&2

# ---- wait for a quiet machine ------------------------------------------------------------
load_deadline=$((SECONDS + LOAD_WAIT))
while :; do
	read -r load _ </proc/loadavg
	python3 -c "import sys; sys.exit(not float('$load') < float('$MAX_LOAD'))" && break
	if ((SECONDS >= load_deadline)); then
		log "WARNING: 1-min load average $load >= $MAX_LOAD after waiting ${LOAD_WAIT}s; going on"
		LOAD_WARNINGS+=("load $load")
		break
	fi
	sleep 5
done

# ---- sanity: same answers ------------------------------------------------------------
sanity_status=0
if ((SANITY > 0)); then
	log "answer comparison: starting all servers (unpinned)"
	declare -A SANITY_PIDS=()
	compare_list=""
	for s in knot fast hickory fast-base hickory-base; do
		[[ " $SERVERS " == *" $s "* || $s == knot ]] || continue
		start_server "$s"
		SANITY_PIDS[$s]=$SERVER_PID
		compare_list+="${compare_list:+,}$s=$(port_of "$s")"
	done
	echo "== answer comparison (reference: knot)" >&2
	python3 "$TMP/compare.py" "$DATA/queries.txt" "$DATA/sanity-extra.txt" "$compare_list" "$SANITY" >&2 ||
		sanity_status=$?
	for s in "${!SANITY_PIDS[@]}"; do stop_server "${SANITY_PIDS[$s]}" "$s"; done
	((sanity_status == 0)) || log "WARNING: answers differ (see MISMATCH lines above); benchmarking anyway"
fi
if [[ ${BENCH_SANITY_ONLY:-0} == 1 ]]; then
	((sanity_status == 0)) || echo "NOTE: the answer comparison found differences (MISMATCH lines on stderr)"
	exit "$sanity_status"
fi

# ---- measure --------------------------------------------------------------------
IFS=';' read -r -a SETTINGS <<<"$DNSPERF_SETTINGS"
for ((round = 1; round <= ROUNDS; round++)); do
	for server in $SERVERS; do
		wait_for_quiet
		log "round $round/$ROUNDS: $server (CPUs ${QUIET_BUSY}% busy before start, load $(cut -d' ' -f1-3 /proc/loadavg))"
		start_server "$server" "$SERVER_CPU"
		pid=$SERVER_PID
		if ((WARMUP > 0)); then
			run_waited timed "$TMP/warmup.txt" timeout $((WARMUP + 30)) taskset -c "$CLIENT_CPU" \
				nice -n "$NICE" dnsperf -s 127.0.0.1 -p "$(port_of "$server")" \
				-d "$DATA/queries.txt" -l "$WARMUP" -T 1 -c 8 -q 100 || true
		fi
		for setting in "${SETTINGS[@]}"; do
			setting=$(xargs <<<"$setting")
			[[ -n $setting ]] || continue
			run_dnsperf "$round" "$server" "$setting" "$pid"
			kill -0 "$pid" 2>/dev/null || die "$server died under load; log: $(tail -n 20 "$TMP/$server.log")"
		done
		stop_server "$pid" "$server"
	done
done

# ---- profiles (optional) --------------------------------------------------------------
if [[ -n ${BENCH_PERF:-} ]]; then
	command -v perf >/dev/null 2>&1 || die "BENCH_PERF needs perf (apt-get install linux-perf)"
	mkdir -p "$BENCH_PERF"
	PERF_SECONDS=${BENCH_PERF_SECONDS:-5}
	setting=$(xargs <<<"${SETTINGS[0]}")
	for server in $SERVERS; do
		wait_for_quiet
		log "profile: $server under $setting, ${PERF_SECONDS}s of perf record"
		start_server "$server" "$SERVER_CPU"
		pid=$SERVER_PID
		# shellcheck disable=SC2086 # the setting is a list of dnsperf flags
		taskset -c "$CLIENT_CPU" nice -n "$NICE" dnsperf -s 127.0.0.1 -p "$(port_of "$server")" \
			-d "$DATA/queries.txt" -l $((PERF_SECONDS + 3)) -T 1 $setting >"$TMP/perf-dnsperf-$server.txt" 2>&1 &
		perf_client=$!
		PIDS+=("$perf_client")
		sleep 1
		perf record -q -F 999 -g -p "$pid" -o "$BENCH_PERF/$server.perf" -- sleep "$PERF_SECONDS" >/dev/null 2>&1 ||
			log "WARNING: perf record failed for $server"
		wait "$perf_client" || true
		drop_pid "$perf_client"
		stop_server "$pid" "$server"
	done
	echo
	echo "Profiles (perf record -g, ${PERF_SECONDS}s under $setting; % of the server's samples):"
	for server in $SERVERS; do
		[[ -s $BENCH_PERF/$server.perf ]] || continue
		perf report -i "$BENCH_PERF/$server.perf" --no-children --sort dso --stdio 2>/dev/null >"$TMP/perf-dso-$server.txt" || true
		perf report -i "$BENCH_PERF/$server.perf" --children --sort symbol --stdio -g none 2>/dev/null >"$TMP/perf-children-$server.txt" || true
		perf report -i "$BENCH_PERF/$server.perf" --no-children --sort dso,symbol --stdio -g none 2>/dev/null >"$TMP/perf-self-$server.txt" || true
		python3 - "$server" "$TMP/perf-dso-$server.txt" "$TMP/perf-children-$server.txt" "$TMP/perf-self-$server.txt" <<-'EOF'
			import re, sys
			server, dso_file, children_file, self_file = sys.argv[1:5]
			row = re.compile(r"^\s+([\d.]+)%\s+(?:([\d.]+)%\s+)?(.*?)\s*$")
			def rows(path):
			    for line in open(path, errors="replace"):
			        m = row.match(line)
			        if m:
			            pct, total, name = m.groups()
			            # Without hardware counters perf adds empty IPC columns.
			            yield pct, total, re.sub(r"(\s+-)+$", "", name)
			kernel = user = 0.0
			libs = {}
			for pct, _, name in rows(dso_file):
			    name = name.split()[0] if name else "?"
			    if name == "[kernel.kallsyms]":
			        kernel += float(pct)
			    else:
			        user += float(pct)
			        libs[name] = libs.get(name, 0.0) + float(pct)
			print(f"  {server}: kernel {kernel:.1f}%, user space {user:.1f}% ("
			      + ", ".join(f"{k} {v:.1f}%" for k, v in sorted(libs.items(), key=lambda kv: -kv[1])[:3]) + ")")
			# Kernel paths that tell where the system's share goes: the socket
			# calls, the waiting, and the client's wake-up that loopback delivery
			# runs in the sender's context.
			paths = {"[k] __sys_sendmmsg": "sendmmsg", "[k] do_recvmmsg": "recvmmsg",
			         "[k] do_epoll_wait": "epoll_wait", "[k] __schedule": "sleeping and waking (__schedule)",
			         "[k] sock_def_readable": "waking the receiver (sock_def_readable)"}
			found = {}
			for total, _, name in rows(children_file):
			    label = paths.get(name.strip())
			    if label and label not in found:
			        found[label] = float(total)
			print("    kernel paths (inclusive): " + ", ".join(f"{k} {v:.1f}%" for k, v in found.items()))
			top = [(float(p), n) for p, _, n in rows(self_file) if "[kernel" not in n][:5]
			print("    top user-space symbols (self): " + ", ".join(f"{' '.join(n.split()[2:])[:60]} {p:.1f}%" for p, n in top))
		EOF
	done
fi

python3 "$TMP/summary.py" "$RESULTS" "$QUIET_OTHER"
if [[ -n ${BENCH_RESULTS:-} ]]; then
	cp "$RESULTS" "$BENCH_RESULTS"
fi
if ((${#LOAD_WARNINGS[@]})); then
	echo "NOTE: measured on a busy machine (other processes): ${LOAD_WARNINGS[*]}"
fi
if ((sanity_status != 0)); then
	echo "NOTE: the answer comparison found differences (MISMATCH lines on stderr)"
fi
