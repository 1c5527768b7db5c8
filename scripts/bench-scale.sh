#!/usr/bin/env bash
# The scaling curve of clusterset-dns: memory, ready time, cost of one
# change and CPU per query at several clusterset sizes, in one run, beside
# Knot DNS serving the same zone.
#
#   scripts/bench-scale.sh
#
# For each size (BENCH_SIZES services, ~10x as many endpoints):
# scripts/gen-bench-data.py generates the manifest; `clusterset-dns serve
# --file` serves it, pinned to CPU 0 (so the first zone is built on one
# core), and the script reports
#   ready      spawn -> /ready 200 on the admin endpoint;
#   memory     VmRSS and VmHWM once ready, and bytes per endpoint: VmRSS
#              above that of a server of an empty zone (measured first the
#              same way), divided by the ready endpoints the server indexed
#              (clusterset_dns_index_endpoints);
#   changes    BENCH_CHANGES one-service changes (scripts/lib/
#              scale_changes.py: the manifest rewritten and renamed into
#              place with one ClusterSetIP changed, until the server answers
#              the new address): p50 and max of the publish step alone
#              (clusterset_dns_zone_publish_duration_seconds: index update,
#              rebuild, swap; not the file's read and parse), services
#              rebuilt per change (must be 1), and rename -> new answer;
#   queries    dnsperf pinned to CPU 1 at a fixed offered rate (-Q
#              BENCH_RATE) for BENCH_DURATION s, BENCH_ROUNDS times: QPS,
#              lost queries, server CPU us per query (/proc ticks of the
#              server over the run); then one unthrottled run (the peak);
#   Knot DNS   the same manifest through `clusterset-dns dump-zone`, served
#              by knotd (configured as in bench-knot.sh, pinned to CPU 0):
#              spawn -> the probe name answered, VmRSS and VmHWM once it
#              answers, bytes per endpoint above a Knot of the empty zone
#              (the same endpoint count as ours), and the fixed-rate dnsperf
#              runs.
# Prints one table, one beside Knot, and writes a PNG plot (matplotlib) of
# the curve: sizes on a log x-axis; bytes/endpoint, ready time, publish time
# per change and CPU us/query as panels, Knot's beside ours.
#
# Environment (all optional):
#   BENCH_SIZES="1000 10000 100000"   services per size
#   BENCH_BACKENDS=3-5        gen-bench-data.py --backends-per-cluster (3-5:
#                             ~10.2 ready endpoints per service)
#   BENCH_CHANGES=20          one-service changes per size
#   BENCH_RATE=30000          dnsperf -Q, queries per second offered
#   BENCH_DURATION=10 BENCH_ROUNDS=2   seconds per dnsperf run, runs per size
#   BENCH_PEAK="-c 8 -q 200"  dnsperf setting of the unthrottled run; empty: none
#   BENCH_KNOT=1              0: leave Knot DNS out
#   BENCH_QUERIES=100000 BENCH_SEED=1  data set
#   BENCH_SERVER_CPU=0 BENCH_CLIENT_CPU=1
#   BENCH_MAX_BUSY=25 BENCH_LOAD_WAIT=60   before each size, wait up to
#                             BENCH_LOAD_WAIT s until other processes keep the
#                             CPUs less than BENCH_MAX_BUSY % busy (3 s sample);
#                             then go on with a warning
#   BENCH_QUIET=10            a dnsperf run is "quiet" when other processes
#                             took less than this % of the two cores during it
#   BENCH_READY_TIMEOUT=300   seconds a size may take to become ready
#   BENCH_TIMEOUT=900         hard limit for everything after the build, s
#   BENCH_PLOT=FILE           the PNG (default: scaling.png in the temp dir)
#   BENCH_RESULTS=FILE        also write the table's rows (TSV) to FILE
#   BENCH_BASELINE=FILE BENCH_BASELINE_LABEL=baseline
#                             the BENCH_RESULTS file of an earlier run (another
#                             build): its publish step per change is printed
#                             after the table and drawn in the plot beside
#                             this run's (log y-axis)
#   CLUSTERSET_DNS_BIN=PATH   use this binary, skip cargo build
#   KEEP_TMP=1                keep the temporary directory (path is printed)
#
# Every process started here is killed on exit (trap). Run it under the
# machine's benchmark lock: flock /tmp/bench.lock scripts/bench-scale.sh

set -euo pipefail

SIZES=${BENCH_SIZES:-"1000 10000 100000"}
BACKENDS=${BENCH_BACKENDS:-3-5}
CHANGES=${BENCH_CHANGES:-20}
RATE=${BENCH_RATE:-30000}
DURATION=${BENCH_DURATION:-10}
ROUNDS=${BENCH_ROUNDS:-2}
PEAK=${BENCH_PEAK-"-c 8 -q 200"}
KNOT=${BENCH_KNOT:-1}
QUERIES=${BENCH_QUERIES:-100000}
SEED=${BENCH_SEED:-1}
SERVER_CPU=${BENCH_SERVER_CPU:-0}
CLIENT_CPU=${BENCH_CLIENT_CPU:-1}
MAX_BUSY=${BENCH_MAX_BUSY:-25}
LOAD_WAIT=${BENCH_LOAD_WAIT:-60}
QUIET_OTHER=${BENCH_QUIET:-10}
READY_TIMEOUT=${BENCH_READY_TIMEOUT:-300}
TIMEOUT=${BENCH_TIMEOUT:-900}

exec {LOGFD}>&2
log() { printf '[scale %(%H:%M:%S)T] %s\n' -1 "$*" >&"$LOGFD"; }
die() {
	log "ERROR: $*"
	exit 1
}

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
# shellcheck source=scripts/lib/bench.sh
source "$REPO/scripts/lib/bench.sh"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/bench-scale.XXXXXX")
PLOT=${BENCH_PLOT:-$TMP/scaling.png}
PIDS=()

bench_traps
# set -e ends the run at a failed command: say which.
trap 'log "ERROR: line $LINENO: \"$BASH_COMMAND\" failed"' ERR

# ---- tools ----------------------------------------------------------------------
SUDO=
((EUID == 0)) || SUDO=sudo
need_pkgs=()
command -v dnsperf >/dev/null 2>&1 || need_pkgs+=(dnsperf)
command -v taskset >/dev/null 2>&1 || need_pkgs+=(util-linux)
if [[ $KNOT == 1 ]]; then
	command -v knotd >/dev/null 2>&1 || [[ -x /usr/sbin/knotd ]] || need_pkgs+=(knot)
fi
if ((${#need_pkgs[@]})); then
	log "installing ${need_pkgs[*]}"
	export DEBIAN_FRONTEND=noninteractive
	$SUDO apt-get update -qq
	$SUDO apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >&2
fi
command -v python3 >/dev/null 2>&1 || die "python3 is required"
# knotd from the Debian package is in /usr/sbin, which may not be on PATH.
KNOTD=$(command -v knotd || echo /usr/sbin/knotd)
[[ $KNOT != 1 || -x $KNOTD ]] || die "knotd not found"
# A Python with matplotlib for the plot: python3 on PATH, the system one, or
# the Debian package installed for the system one, or pip's.
PLOT_PY=
for py in python3 /usr/bin/python3; do
	if "$py" -c 'import matplotlib' 2>/dev/null; then
		PLOT_PY=$py
		break
	fi
done
if [[ -z $PLOT_PY ]]; then
	log "installing python3-matplotlib"
	if DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
		python3-matplotlib >&2 && /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
		PLOT_PY=/usr/bin/python3
	elif python3 -m pip install --quiet --user matplotlib >&2; then
		PLOT_PY=python3
	else
		die "matplotlib could not be installed (apt python3-matplotlib, or pip)"
	fi
fi

# ---- build ----------------------------------------------------------------------
BIN=$(bench_binary)

bench_watchdog scale "$TIMEOUT"
PIDS+=("$!")

read -r DNS_PORT ADMIN_PORT KNOT_PORT < <(python3 - <<-'EOF'
	import socket
	out, keep = [], []
	while len(out) < 3:
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
)

proc_ticks() { sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | awk '{ print $12 + $13 }'; }
status_kb() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }
metric() { # ADMIN_PORT NAME -> value
	local text
	text=$(curl -sf "http://127.0.0.1:$1/metrics") || die "GET /metrics failed"
	awk -v n="$2" '$1 == n { print $2; exit }' <<<"$text"
}

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
LOAD_WARNINGS=()
wait_for_quiet() {
	local deadline=$((SECONDS + LOAD_WAIT)) busy
	while :; do
		busy=$(cpu_busy_pct)
		((busy < MAX_BUSY)) && {
			QUIET_BUSY=$busy
			return
		}
		if ((SECONDS >= deadline)); then
			log "WARNING: other processes keep the CPUs ${busy}% busy (>= ${MAX_BUSY}%) after ${LOAD_WAIT}s; measuring anyway"
			LOAD_WARNINGS+=("$busy%")
			QUIET_BUSY=$busy
			return
		fi
		sleep 2
	done
}

# ready_ms PID T0 CHECK... -> milliseconds from T0 (ns) until CHECK holds,
# polled every 5 ms; fails when PID exits or READY_TIMEOUT passes. CHECK is
#   http PORT            GET /ready on 127.0.0.1:PORT answers 200
#   dns PORT PROBE_FILE  the "name TYPE" of PROBE_FILE answers NOERROR with an
#                        answer from 127.0.0.1:PORT (the zone is loaded)
ready_ms() {
	python3 - "$READY_TIMEOUT" "$@" <<-'EOF'
		import http.client, os, socket, struct, sys, time
		limit, pid, t0, check, port = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
		if check == "http":
		    def ready():
		        c = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
		        c.request("GET", "/ready")
		        return c.getresponse().status == 200
		else:
		    name, qtype = open(sys.argv[6]).read().split()[:2]
		    codes = {"A": 1, "SOA": 6, "AAAA": 28, "SRV": 33}
		    qname = b"".join(bytes([len(l)]) + l.encode() for l in name.rstrip(".").split(".")) + b"\0"
		    query = struct.pack(">HHHHHH", 0x5ca1, 0x0100, 1, 0, 0, 0) + qname + struct.pack(">HH", codes[qtype], 1)
		    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
		    s.settimeout(0.05)
		    def ready():
		        s.sendto(query, ("127.0.0.1", port))
		        ident, flags, _, ancount = struct.unpack(">HHHH", s.recv(4096)[:8])
		        return ident == 0x5ca1 and flags & 0xF == 0 and ancount > 0
		while True:
		    try:
		        if ready():
		            print(f"{(time.time_ns() - t0) / 1e6:.1f}")
		            break
		    except OSError:
		        pass
		    if (time.time_ns() - t0) / 1e9 > limit:
		        sys.exit(f"not ready within {limit} s")
		    try:
		        os.kill(pid, 0)
		    except ProcessLookupError:
		        sys.exit("the server exited during start-up")
		    time.sleep(0.005)
	EOF
}

# start_server MANIFEST MAX_BYTES LOG -> SERVER_PID, READY_MS (spawn -> /ready 200)
start_server() {
	local manifest=$1 max=$2 logf=$3 t0
	t0=$(date +%s%N)
	taskset -c "$SERVER_CPU" "$BIN" serve --file "$manifest" --file-max-bytes "$max" \
		--dns-listen "127.0.0.1:$DNS_PORT" --admin-listen "127.0.0.1:$ADMIN_PORT" \
		--udp-workers 1 --lame-duck 0s >"$logf" 2>&1 &
	SERVER_PID=$!
	PIDS+=("$SERVER_PID")
	READY_MS=$(ready_ms "$SERVER_PID" "$t0" http "$ADMIN_PORT") || {
		tail -n 30 "$logf" >&2
		die "clusterset-dns did not become ready ($manifest)"
	}
}

# start_knot ZONEFILE DIR PROBE_FILE -> SERVER_PID, READY_MS (spawn -> the
# probe name answered)
start_knot() {
	local zonefile=$1 dir=$2 probe=$3 t0
	rm -rf "$dir"
	knot_config "$dir" "$KNOT_PORT" "$zonefile"
	t0=$(date +%s%N)
	taskset -c "$SERVER_CPU" "$KNOTD" -c "$dir/knot.conf" >"$dir/knotd.log" 2>&1 &
	SERVER_PID=$!
	PIDS+=("$SERVER_PID")
	READY_MS=$(ready_ms "$SERVER_PID" "$t0" dns "$KNOT_PORT" "$probe") || {
		tail -n 30 "$dir/knotd.log" >&2
		die "knotd did not become ready ($zonefile)"
	}
}

stop_server() {
	local pid=$1
	kill -TERM "$pid" 2>/dev/null || true
	# Gone, or a zombie (exited, not yet waited for).
	for _ in $(seq 100); do
		[[ $(awk '{ print $3 }' "/proc/$pid/stat" 2>/dev/null || echo Z) == Z ]] && break
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	drop_pid "$pid"
}

# run_dnsperf SERVER SIZE ROUND SETTING DATA PID -> a row in $QPS_ROWS
# (SERVER: ours or knot)
QPS_ROWS=$TMP/qps.tsv
run_dnsperf() {
	local server=$1 size=$2 round=$3 setting=$4 data=$5 pid=$6 out port=$DNS_PORT
	[[ $server != knot ]] || port=$KNOT_PORT
	out=$TMP/dnsperf-$server-$size-$round.txt
	grep '^cpu[0-9]' /proc/stat >"$out.stat0"
	proc_ticks "$pid" >"$out.srv0"
	local t0 t1
	t0=$(date +%s%N)
	# shellcheck disable=SC2086 # the setting is a list of dnsperf flags
	run_waited timeout $((DURATION + 30)) taskset -c "$CLIENT_CPU" \
		dnsperf -s 127.0.0.1 -p "$port" -d "$data/queries.txt" -l "$DURATION" -T 1 $setting \
		>"$out" 2>&1 || {
		cat "$out" >&2
		die "dnsperf failed"
	}
	t1=$(date +%s%N)
	proc_ticks "$pid" >"$out.srv1"
	grep '^cpu[0-9]' /proc/stat >"$out.stat1"
	python3 - "$out" "$server" "$size" "$round" "$setting" "$(((t1 - t0) / 1000))" "$(getconf CLK_TCK)" \
		"$SERVER_CPU" "$CLIENT_CPU" >>"$QPS_ROWS" <<-'EOF'
		import re, sys
		out, server, size, rnd, setting, wall_us, tck, scpu, ccpu = sys.argv[1:10]
		text = open(out).read()
		def num(p, cast=float):
		    m = re.search(p, text)
		    if not m:
		        sys.exit(f"dnsperf output lacks {p!r}:\n{text}")
		    return cast(m.group(1))
		def busy(cpu):
		    def read(path):
		        for line in open(path):
		            f = line.split()
		            if f[0] == f"cpu{cpu}":
		                v = list(map(int, f[1:]))
		                return sum(v[:8]), v[3] + v[4]
		    (a0, i0), (a1, i1) = read(out + ".stat0"), read(out + ".stat1")
		    return 100 * (1 - (i1 - i0) / max(a1 - a0, 1))
		ticks = [int(open(f"{out}.srv{i}").read().strip() or 0) for i in (0, 1)]
		cpu_s = (ticks[1] - ticks[0]) / int(tck)
		wall = int(wall_us) / 1e6
		qps = num(r"Queries per second:\s+([\d.]+)")
		done = num(r"Queries completed:\s+(\d+)", int)
		lost = num(r"Queries lost:\s+(\d+)", int)
		srv_pct = 100 * cpu_s / wall
		# Other processes on the server's core: busy time not the server's.
		other = max(busy(scpu) - srv_pct, 0)
		us = cpu_s * 1e6 / max(done, 1)
		print("\t".join(map(str, [server, size, rnd, setting, f"{qps:.0f}", lost, f"{srv_pct:.0f}",
		                          f"{us:.2f}", f"{other:.0f}"])))
	EOF
	tail -n 1 "$QPS_ROWS" | awk -F'\t' '{ printf "    %-4s dnsperf %-16s QPS %7s lost %s server CPU %s%% = %s us/query (others on its core %s%%)\n", $1, $4, $5, $6, $7, $8, $9 }' >&2
}

# ---- environment ------------------------------------------------------------------
{
	echo "== environment"
	echo "date:        $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "kernel:      $(uname -r)"
	echo "nproc:       $(nproc)"
	echo "cpu:         $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
	echo "memory:      $(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)"
	echo "dnsperf:     $(dnsperf -h 2>&1 | awk '/^Version/ { print $2; exit }')"
	[[ $KNOT != 1 ]] || echo "knotd:       $("$KNOTD" -V 2>&1 | head -n1)"
	echo "binary:      $BIN ($("$BIN" version 2>&1 | awk '/^commit:/ { print "commit " $2 }'), built $(date -u -r "$BIN" +%Y-%m-%dT%H:%M:%SZ), sha256 $(sha256sum "$BIN" | cut -c1-16))"
	echo "sizes:       $SIZES services; backends per cluster $BACKENDS; $CHANGES changes per size"
	echo "dnsperf:     -Q $RATE for ${DURATION}s x $ROUNDS, then '${PEAK:-none}' for ${DURATION}s; server on CPU $SERVER_CPU, dnsperf on CPU $CLIENT_CPU"
	echo "load:        $(cat /proc/loadavg)"
} >&2

# ---- the empty zone ---------------------------------------------------------------
mkdir -p "$TMP/empty"
echo "# no services" >"$TMP/empty/clusterset.yaml"
wait_for_quiet
start_server "$TMP/empty/clusterset.yaml" 1024 "$TMP/empty.log"
sleep 1
EMPTY_RSS=$(status_kb "$SERVER_PID" VmRSS)
log "empty zone: ready in ${READY_MS} ms, VmRSS ${EMPTY_RSS} kB"
stop_server "$SERVER_PID"
KNOT_EMPTY_RSS=0
if [[ $KNOT == 1 ]]; then
	# The empty zone's apex answers SOA: the probe of Knot's start.
	echo "clusterset.local SOA -" >"$TMP/empty/probe.txt"
	"$BIN" dump-zone --file "$TMP/empty/clusterset.yaml" >"$TMP/empty/clusterset.local.zone" ||
		die "dump-zone of the empty zone failed"
	start_knot "$TMP/empty/clusterset.local.zone" "$TMP/knot-empty" "$TMP/empty/probe.txt"
	sleep 1
	KNOT_EMPTY_RSS=$(status_kb "$SERVER_PID" VmRSS)
	log "Knot, empty zone: ready in ${READY_MS} ms, VmRSS ${KNOT_EMPTY_RSS} kB"
	stop_server "$SERVER_PID"
fi

# ---- sizes ------------------------------------------------------------------------
ROWS=$TMP/rows.tsv
printf 'services\tendpoints\tslices\tmanifest_mb\tready_ms\trss_kb\thwm_kb\tbytes_per_endpoint\tpublish_p50_ms\tpublish_max_ms\trebuilt\tvisible_p50_ms\tvisible_max_ms\tqps\tlost\tus_per_query\tpeak_qps\tpeak_us_per_query\tother_pct\tbusy_before_pct\tzone_records\tknot_ready_ms\tknot_rss_kb\tknot_hwm_kb\tknot_bytes_per_endpoint\tknot_qps\tknot_lost\tknot_us_per_query\n' >"$ROWS"
for size in $SIZES; do
	data=$TMP/data-$size
	log "size $size: generating"
	gen0=$SECONDS
	python3 "$REPO/scripts/gen-bench-data.py" --services "$size" --queries "$QUERIES" \
		--seed "$SEED" --backends-per-cluster "$BACKENDS" --out "$data" 2>"$TMP/gen-$size.log" || {
		cat "$TMP/gen-$size.log" >&2
		die "gen-bench-data.py failed"
	}
	bytes=$(stat -c %s "$data/clusterset.yaml")
	log "size $size: $(tr '\n' ' ' <"$data/summary.txt" | cut -d' ' -f1-8) ($((bytes / 1048576)) MiB, $((SECONDS - gen0)) s)"
	if [[ $KNOT == 1 ]]; then
		# Knot's copy of the zone, before the changes below rewrite the manifest.
		"$BIN" dump-zone --file "$data/clusterset.yaml" --file-max-bytes $((bytes + 1)) \
			>"$data/clusterset.local.zone" \
			2>"$TMP/dump-zone-$size.err" || {
			cat "$TMP/dump-zone-$size.err" >&2
			die "dump-zone failed at $size services"
		}
	fi
	wait_for_quiet
	busy_before=$QUIET_BUSY
	# Room for the file to grow a little with the changes.
	start_server "$data/clusterset.yaml" $((bytes * 2 + 1048576)) "$TMP/serve-$size.log"
	pid=$SERVER_PID
	ready_ms=$READY_MS
	sleep 1
	rss=$(status_kb "$pid" VmRSS)
	hwm=$(status_kb "$pid" VmHWM)
	endpoints=$(metric "$ADMIN_PORT" clusterset_dns_index_endpoints)
	slices=$(metric "$ADMIN_PORT" clusterset_dns_index_endpoint_slices)
	log "size $size: ready in $ready_ms ms; VmRSS $rss kB, VmHWM $hwm kB; $endpoints endpoints in $slices slices"

	log "size $size: $CHANGES one-service changes"
	run_waited taskset -c "$CLIENT_CPU" python3 "$REPO/scripts/lib/scale_changes.py" \
		"$data/clusterset.yaml" "$DNS_PORT" "$ADMIN_PORT" "$size" "$CHANGES" 120 \
		>"$TMP/changes-$size.tsv" || die "the changes failed at $size services"
	awk -F'\t' '{ printf "    change %2s %-34s write %7s ms  visible %8s ms  publish %8s ms  rebuilt %s\n", $1, $2, $3, $4, $5, $6 }' \
		"$TMP/changes-$size.tsv" >&2

	for ((round = 1; round <= ROUNDS; round++)); do
		run_dnsperf ours "$size" "$round" "-Q $RATE -c 8 -q 200" "$data" "$pid"
	done
	if [[ -n $PEAK ]]; then
		run_dnsperf ours "$size" peak "$PEAK" "$data" "$pid"
	fi
	kill -0 "$pid" 2>/dev/null || die "the server died at $size services"
	stop_server "$pid"

	# Knot DNS on the zone dumped before the changes.
	zone_records=0 knot_ready= knot_rss=0 knot_hwm=0
	if [[ $KNOT == 1 ]]; then
		zone_records=$(grep -cv '^\$' "$data/clusterset.local.zone" || true)
		wait_for_quiet
		start_knot "$data/clusterset.local.zone" "$TMP/knot-$size" "$data/probe.txt"
		knot_ready=$READY_MS
		sleep 1
		knot_rss=$(status_kb "$SERVER_PID" VmRSS)
		knot_hwm=$(status_kb "$SERVER_PID" VmHWM)
		log "size $size: Knot ($zone_records records) answers in $knot_ready ms; VmRSS $knot_rss kB, VmHWM $knot_hwm kB"
		for ((round = 1; round <= ROUNDS; round++)); do
			run_dnsperf knot "$size" "$round" "-Q $RATE -c 8 -q 200" "$data" "$SERVER_PID"
		done
		kill -0 "$SERVER_PID" 2>/dev/null || die "knotd died at $size services"
		stop_server "$SERVER_PID"
		rm -rf "$data/clusterset.local.zone" "$TMP/knot-$size"
	fi

	python3 - "$size" "$endpoints" "$slices" "$bytes" "$ready_ms" "$rss" "$hwm" "$EMPTY_RSS" \
		"$TMP/changes-$size.tsv" "$QPS_ROWS" "$busy_before" "$zone_records" "$knot_ready" \
		"$knot_rss" "$knot_hwm" "$KNOT_EMPTY_RSS" >>"$ROWS" <<-'EOF'
		import statistics, sys
		size, endpoints, slices, nbytes, ready, rss, hwm, empty, changes, qps, busy = sys.argv[1:12]
		records, k_ready, k_rss, k_hwm, k_empty = sys.argv[12:17]
		endpoints = int(float(endpoints))
		ch = [l.rstrip("\n").split("\t") for l in open(changes) if l.strip()]
		pub = [float(c[4]) for c in ch]
		vis = [float(c[3]) for c in ch]
		rebuilt = sorted({c[5] for c in ch})
		# server size round setting qps lost srv% us other
		runs = [l.rstrip("\n").split("\t")[1:] for l in open(qps) if l.split("\t")[1] == size]
		servers = [l.split("\t")[0] for l in open(qps) if l.split("\t")[1] == size]
		ours = [r for r, s in zip(runs, servers) if s == "ours"]
		knot = [r for r, s in zip(runs, servers) if s == "knot"]
		fixed = [r for r in ours if r[1] != "peak"]
		peak = [r for r in ours if r[1] == "peak"]
		bpe = (int(rss) - int(empty)) * 1024 / max(endpoints, 1)
		k_bpe = (int(k_rss) - int(k_empty)) * 1024 / max(endpoints, 1) if k_ready else None
		print("\t".join(map(str, [
		    size, endpoints, int(float(slices)), f"{int(nbytes) / 1e6:.1f}", ready, rss, hwm,
		    f"{bpe:.0f}", f"{statistics.median(pub):.3f}", f"{max(pub):.3f}", ",".join(rebuilt),
		    f"{statistics.median(vis):.0f}", f"{max(vis):.0f}",
		    f"{statistics.median(float(r[3]) for r in fixed):.0f}", sum(int(r[4]) for r in fixed),
		    f"{statistics.median(float(r[6]) for r in fixed):.2f}",
		    peak[0][3] if peak else "", peak[0][6] if peak else "",
		    f"{max(float(r[7]) for r in runs):.0f}", busy, records, k_ready, k_rss, k_hwm,
		    f"{k_bpe:.0f}" if knot else "",
		    f"{statistics.median(float(r[3]) for r in knot):.0f}" if knot else "",
		    sum(int(r[4]) for r in knot) if knot else "",
		    f"{statistics.median(float(r[6]) for r in knot):.2f}" if knot else ""])))
	EOF
	rm -f "$data/clusterset.yaml"
done

# ---- table and plot -------------------------------------------------------------------
BASELINE=${BENCH_BASELINE:-}
BASELINE_LABEL=${BENCH_BASELINE_LABEL:-baseline}
[[ -z $BASELINE || -r $BASELINE ]] || die "BENCH_BASELINE=$BASELINE is not readable"
python3 - "$ROWS" "$EMPTY_RSS" "$RATE" "$QUIET_OTHER" "$BASELINE" "$BASELINE_LABEL" "$KNOT_EMPTY_RSS" <<-'EOF'
	import csv, sys
	rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
	empty, rate, quiet = int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
	k_empty = int(sys.argv[7])
	print(f"\nScaling curve (empty-zone server: VmRSS {empty / 1024:.1f} MiB):\n")
	head = ["services", "endpoints", "manifest MB", "ready s", "VmRSS MiB", "VmHWM MiB",
	        "B/endpoint", "publish p50 ms", "publish max ms", "rebuilt/change",
	        "rename->answer p50 ms", f"QPS at -Q {rate}", "lost", "CPU us/query",
	        "peak QPS", "peak us/query", "others %"]
	print("| " + " | ".join(head) + " |")
	print("|" + "|".join(["---:"] * len(head)) + "|")
	for r in rows:
	    cells = [f"{int(r['services']):,}", f"{int(r['endpoints']):,}", r["manifest_mb"],
	             f"{float(r['ready_ms']) / 1000:.2f}", f"{int(r['rss_kb']) / 1024:.1f}",
	             f"{int(r['hwm_kb']) / 1024:.1f}", r["bytes_per_endpoint"], r["publish_p50_ms"],
	             r["publish_max_ms"], r["rebuilt"], r["visible_p50_ms"], r["qps"], r["lost"],
	             r["us_per_query"], r["peak_qps"] or "-", r["peak_us_per_query"] or "-",
	             r["other_pct"]]
	    print("| " + " | ".join(cells) + " |")
	print(f"\n(publish: clusterset_dns_zone_publish_duration_seconds per change, index update +"
	      f" rebuild + swap; rename->answer: the manifest renamed into place -> the new address"
	      f" answered, including the 250 ms poll/settle, read and parse; others %: the most CPU"
	      f" other processes took on the server's core during a dnsperf run, quiet below {quiet:g})")
	if any(r["knot_ready_ms"] for r in rows):
	    print(f"\nBeside Knot DNS on the same zone (dump-zone; empty-zone Knot: VmRSS"
	          f" {k_empty / 1024:.1f} MiB):\n")
	    head = ["services", "endpoints", "zone records", "VmRSS MiB ours / Knot",
	            "VmHWM MiB ours / Knot", "B/endpoint ours / Knot", "VmRSS ours/Knot",
	            "ready s ours / Knot", f"CPU us/query at -Q {rate} ours / Knot",
	            "lost ours / Knot"]
	    print("| " + " | ".join(head) + " |")
	    print("|" + "|".join(["---:"] * len(head)) + "|")
	    for r in rows:
	        if not r["knot_ready_ms"]:
	            continue
	        cells = [f"{int(r['services']):,}", f"{int(r['endpoints']):,}",
	                 f"{int(r['zone_records']):,}",
	                 f"{int(r['rss_kb']) / 1024:.1f} / {int(r['knot_rss_kb']) / 1024:.1f}",
	                 f"{int(r['hwm_kb']) / 1024:.1f} / {int(r['knot_hwm_kb']) / 1024:.1f}",
	                 f"{r['bytes_per_endpoint']} / {r['knot_bytes_per_endpoint']}",
	                 f"{int(r['rss_kb']) / int(r['knot_rss_kb']):.2f}x",
	                 f"{float(r['ready_ms']) / 1000:.2f} / {float(r['knot_ready_ms']) / 1000:.2f}",
	                 f"{r['us_per_query']} / {r['knot_us_per_query']}",
	                 f"{r['lost']} / {r['knot_lost']}"]
	        print("| " + " | ".join(cells) + " |")
	    print("\n(ready: ours spawn -> /ready 200, Knot's spawn -> the probe name answered;"
	          " B/endpoint: VmRSS above each server's empty zone per ready endpoint)")
	if sys.argv[5]:
	    print(f"\n{sys.argv[6]} ({sys.argv[5]}): publish step per change, p50 / max ms;"
	          " rename->answer p50 ms; services rebuilt per change")
	    for r in csv.DictReader(open(sys.argv[5]), delimiter="\t"):
	        print(f"  {int(r['services']):>7,} services: {r['publish_p50_ms']} / {r['publish_max_ms']}"
	              f"; {r['visible_p50_ms']}; {r['rebuilt']}")
	noisy = [r["services"] for r in rows if float(r["other_pct"]) >= quiet]
	if noisy:
	    print(f"NOTE: dnsperf runs at {', '.join(noisy)} services were not quiet")
EOF
"$PLOT_PY" - "$ROWS" "$PLOT" "$BASELINE" "$BASELINE_LABEL" <<-'EOF'
	import csv, sys
	import matplotlib
	matplotlib.use("Agg")
	import matplotlib.pyplot as plt
	rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
	base = list(csv.DictReader(open(sys.argv[3]), delimiter="\t")) if sys.argv[3] else []
	x = [int(r["services"]) for r in rows]
	knot = all(r["knot_ready_ms"] for r in rows)
	def with_knot(ours, field, scale=1.0):
	    """Our series, and Knot's beside it when this run measured Knot."""
	    return [("clusterset-dns" if knot else "", ours)] + (
	        [("Knot DNS", [float(r[field]) * scale for r in rows])] if knot else [])
	panels = [
	    ("memory: bytes per endpoint", "bytes (VmRSS above an empty zone)",
	     with_knot([float(r["bytes_per_endpoint"]) for r in rows], "knot_bytes_per_endpoint")),
	    ("ready: spawn -> ready / answering", "seconds",
	     with_knot([float(r["ready_ms"]) / 1000 for r in rows], "knot_ready_ms", 1 / 1000)),
	    ("one change: publish step", "milliseconds",
	     [("p50", [float(r["publish_p50_ms"]) for r in rows]),
	      ("max", [float(r["publish_max_ms"]) for r in rows])]
	     + [(f"{sys.argv[4]} p50", [float(r["publish_p50_ms"]) for r in base],
	         [int(r["services"]) for r in base]),
	        (f"{sys.argv[4]} max", [float(r["publish_max_ms"]) for r in base],
	         [int(r["services"]) for r in base])] * bool(base)),
	    ("server CPU per query", "microseconds",
	     [("fixed rate", [float(r["us_per_query"]) for r in rows])]
	     + ([("peak", [float(r["peak_us_per_query"]) for r in rows])]
	        if all(r["peak_us_per_query"] for r in rows) else [])
	     + ([("Knot DNS, fixed rate", [float(r["knot_us_per_query"]) for r in rows])]
	        if knot else [])),
	]
	fig, axes = plt.subplots(2, 2, figsize=(10, 7))
	for ax, (title, ylabel, series) in zip(axes.flat, panels):
	    for label, y, *bx in series:
	        ax.plot(bx[0] if bx else x, y, marker="o", linestyle="--" if bx else "-",
	                label=label or None)
	    ax.set_xscale("log")
	    ax.set_xticks(x)
	    ax.set_xticklabels([f"{v:,}" for v in x])
	    ax.set_title(title)
	    ax.set_xlabel("services (~10x endpoints)")
	    ax.set_ylabel(ylabel)
	    if any(bx for _, _, *bx in series):
	        ax.set_yscale("log")
	    else:
	        ax.set_ylim(bottom=0)
	    ax.grid(True, which="both", alpha=0.3)
	    if any(label for label, *_ in series):
	        ax.legend()
	fig.suptitle("clusterset-dns scaling curve (scripts/bench-scale.sh)")
	fig.tight_layout()
	fig.savefig(sys.argv[2], dpi=100)
EOF
log "plot written to $PLOT"
if [[ -n ${BENCH_RESULTS:-} ]]; then
	cp "$ROWS" "$BENCH_RESULTS"
fi
if ((${#LOAD_WARNINGS[@]})); then
	echo "NOTE: measured on a busy machine (other processes): ${LOAD_WARNINGS[*]}"
fi
