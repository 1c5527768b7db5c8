#!/usr/bin/env bash
# Benchmark response rate limiting (rrl_responses_per_second), loopback only,
# in one run:
#
#   scripts/bench-rrl.sh
#
# A. Cost. clusterset-dns pinned to CPU 0 (--udp-workers 1), dnsperf pinned
#    to CPU 1, alternating per round between RRL off and RRL on with a limit
#    no client reaches (BENCH_HIGH_LIMIT), on the fast path: QPS, lost
#    queries, server CPU time and server CPU µs per query.
# B. Protection. The same server; a noisy dnsperf from 127.0.0.1 keeping
#    BENCH_NOISY_OUTSTANDING queries in flight (far more than the server's
#    socket buffer holds, so in effect an open-loop flood at dnsperf's top
#    rate) and, from 1 s later, a quiet dnsperf from 127.0.1.1 (another /24)
#    at BENCH_QUIET_QPS; both on CPU 1. For the fast path and the hickory
#    path (--fast-path false), RRL off and RRL on (BENCH_LIMIT a second per
#    prefix, slip BENCH_SLIP): the quiet client's lost queries and latency,
#    the noisy client's queries sent and answered, and the server's
#    rrl_limited_total.
# C. The limiter alone: `cargo bench --bench rrl` (tests/bench/rrl.rs), the
#    nanoseconds RateLimiter::check adds per query, on one and two threads.
# Every row records the 1-minute load average when it started (other
# processes share the two cores; only the side-by-side within a run counts).
#
# Environment (all optional):
#   BENCH_DURATION=10          seconds per measured dnsperf run
#   BENCH_ROUNDS=2             rounds of part A (off and on alternate)
#   BENCH_DNSPERF="-c 8 -q 200"   dnsperf setting of part A
#   BENCH_HIGH_LIMIT=100000000 part A's limit (never reached)
#   BENCH_LIMIT=1000 BENCH_SLIP=2   part B's limit and slip
#   BENCH_QUIET_QPS=500        part B's quiet client rate (below the limit)
#   BENCH_NOISY_OUTSTANDING=20000   part B's noisy dnsperf -q
#   BENCH_PARTS="A B C"        which parts to run
#   BENCH_SERVER_CPU=0 BENCH_CLIENT_CPU=1   taskset CPU lists
#   BENCH_TIMEOUT=900          hard limit for everything after the build, s
#   CLUSTERSET_DNS_BIN=PATH    use this binary, skip cargo build --release
#
# Needs dnsperf, dig, taskset, python3, curl (apt-get install dnsperf
# bind9-dnsutils util-linux python3 curl). Every process started here is
# killed on exit.

set -euo pipefail

DURATION=${BENCH_DURATION:-10}
ROUNDS=${BENCH_ROUNDS:-2}
DNSPERF_A=${BENCH_DNSPERF:-"-c 8 -q 200"}
HIGH_LIMIT=${BENCH_HIGH_LIMIT:-100000000}
LIMIT=${BENCH_LIMIT:-1000}
SLIP=${BENCH_SLIP:-2}
QUIET_QPS=${BENCH_QUIET_QPS:-500}
NOISY_Q=${BENCH_NOISY_OUTSTANDING:-20000}
PARTS=${BENCH_PARTS:-"A B C"}
SERVER_CPU=${BENCH_SERVER_CPU:-0}
CLIENT_CPU=${BENCH_CLIENT_CPU:-1}
TIMEOUT=${BENCH_TIMEOUT:-900}

exec {LOGFD}>&2
log() { printf '[bench-rrl %(%H:%M:%S)T] %s\n' -1 "$*" >&"$LOGFD"; }
die() {
	log "ERROR: $*"
	exit 1
}

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
# shellcheck source=scripts/lib/bench.sh
source "$REPO/scripts/lib/bench.sh"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/bench-rrl.XXXXXX")
PIDS=()

bench_traps

for tool in dnsperf dig taskset python3 curl; do
	command -v "$tool" >/dev/null 2>&1 || die "$tool is required"
done
ip -4 addr show lo 2>/dev/null | grep -q '127.0.0.1/8' || log "WARNING: lo is not 127.0.0.1/8; 127.0.1.1 may not be bindable"

BIN=$(bench_binary)

# From here on, the whole run is bounded.
bench_watchdog bench-rrl "$TIMEOUT"
PIDS+=("$!")

MANIFEST=$REPO/config/example-clusterset.yaml
QUERIES=$TMP/queries.txt
cat >"$QUERIES" <<EOF
web.shop.svc.clusterset.local A
web.shop.svc.clusterset.local AAAA
nope.shop.svc.clusterset.local A
clusterset.local SOA
EOF

read -r PORT ADMIN < <(python3 - <<-'EOF'
	import socket
	out, keep = [], []
	while len(out) < 2:
	    t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
	    t.bind(("127.0.0.1", 0))
	    port = t.getsockname()[1]
	    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
	    try:
	        u.bind(("127.0.0.1", port))
	    except OSError:
	        t.close(); continue
	    keep += [t, u]; out.append(port)
	print(*out)
EOF
)

# start_server ARGS... -> SERVER_PID; answers before it returns.
start_server() {
	taskset -c "$SERVER_CPU" "$BIN" serve --file "$MANIFEST" \
		--dns-listen "127.0.0.1:$PORT" --admin-listen "127.0.0.1:$ADMIN" \
		--udp-workers 1 "$@" >"$TMP/server.log" 2>&1 &
	SERVER_PID=$!
	PIDS+=("$SERVER_PID")
	local deadline=$((SECONDS + 30))
	until dig +short +tries=1 +time=1 -p "$PORT" @127.0.0.1 web.shop.svc.clusterset.local A 2>/dev/null | grep -q .; do
		kill -0 "$SERVER_PID" 2>/dev/null || {
			cat "$TMP/server.log" >&2
			die "server exited"
		}
		((SECONDS < deadline)) || die "server did not answer within 30 s"
		sleep 0.2
	done
}

stop_server() {
	kill -TERM "$SERVER_PID" 2>/dev/null || true
	wait "$SERVER_PID" 2>/dev/null || true
	local keep=() p
	for p in "${PIDS[@]}"; do [[ $p == "$SERVER_PID" ]] || keep+=("$p"); done
	PIDS=("${keep[@]}")
}

# CPU ticks (user + system) of a process.
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)
load1() { cut -d' ' -f1 /proc/loadavg; }
# dnsperf output field.
field() { sed -n "s/^ *$2: *\([0-9.]*\).*/\1/p" "$1" | head -1; }
metric() { curl -s "http://127.0.0.1:$ADMIN/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
# UDP responses counted by the server (answers of either path, not slips).
udp_responses() {
	curl -s "http://127.0.0.1:$ADMIN/metrics" |
		awk '/^clusterset_dns_responses_total\{.*transport="udp"/ {n += $2} END {printf "%d", n}'
}

# ---- A: cost ---------------------------------------------------------------------
if [[ " $PARTS " == *" A "* ]]; then
	log "A: cost of RRL on the fast path ($DNSPERF_A, ${DURATION}s, $ROUNDS rounds)"
	printf 'A\tround\trrl\tload1\tqps\tlost\tserver_cpu_s\tus_per_query\n'
	for round in $(seq "$ROUNDS"); do
		for mode in off on; do
			args=()
			[[ $mode == on ]] && args=(--rrl-responses-per-second "$HIGH_LIMIT")
			start_server "${args[@]}"
			load=$(load1)
			# Warm-up, not measured.
			timeout $((DURATION + 30)) taskset -c "$CLIENT_CPU" dnsperf -s 127.0.0.1 -p "$PORT" -d "$QUERIES" $DNSPERF_A -l 1 >/dev/null 2>&1 || true
			before=$(ticks "$SERVER_PID")
			timeout $((DURATION + 30)) taskset -c "$CLIENT_CPU" dnsperf -s 127.0.0.1 -p "$PORT" -d "$QUERIES" $DNSPERF_A \
				-l "$DURATION" >"$TMP/a.out" 2>&1 || die "dnsperf failed: $(cat "$TMP/a.out")"
			after=$(ticks "$SERVER_PID")
			qps=$(field "$TMP/a.out" "Queries per second")
			completed=$(field "$TMP/a.out" "Queries completed")
			lost=$(field "$TMP/a.out" "Queries lost")
			if [[ $mode == on ]]; then
				[[ $(metric 'clusterset_dns_rrl_limited_total{action="dropped"}') == 0 ]] ||
					die "BENCH_HIGH_LIMIT was reached: part A must not limit"
			fi
			python3 -c "import sys; t=(int(sys.argv[1])-int(sys.argv[2]))/int(sys.argv[3]); c=int(sys.argv[4]); \
print('A\t$round\t$mode\t$load\t$qps\t$lost\t%.2f\t%.2f' % (t, t * 1e6 / c))" \
				"$after" "$before" "$HZ" "$completed"
			stop_server
		done
	done
fi

# ---- B: protection ---------------------------------------------------------------
if [[ " $PARTS " == *" B "* ]]; then
	log "B: a noisy client (-q $NOISY_Q) and a quiet one ($QUIET_QPS qps) for ${DURATION}s; RRL $LIMIT/s, slip $SLIP"
	printf 'B\tpath\trrl\tload1\tquiet_sent\tquiet_lost\tquiet_lost_pct\tquiet_avg_ms\tquiet_max_ms\tnoisy_sent\tserver_udp_answers\trrl_dropped\trrl_slipped\n'
	for path in fast hickory; do
		for mode in off on; do
			args=()
			[[ $path == hickory ]] && args+=(--fast-path false)
			[[ $mode == on ]] && args+=(--rrl-responses-per-second "$LIMIT" --rrl-slip "$SLIP")
			start_server "${args[@]}"
			load=$(load1)
			# dnsperf at times keeps running past -l under heavy loss (and
			# then ignores SIGINT too): stopped by force after 4 s more; the
			# server's counters below do not depend on its report.
			timeout -s INT -k 2 $((DURATION + 4)) taskset -c "$CLIENT_CPU" dnsperf -a 127.0.0.1 -s 127.0.0.1 -p "$PORT" -d "$QUERIES" \
				-c 32 -q "$NOISY_Q" -t 0.5 -l $((DURATION + 2)) -O suppress=timeout,unexpected \
				>"$TMP/noisy.out" 2>&1 &
			noisy=$!
			PIDS+=("$noisy")
			sleep 1
			timeout $((DURATION + 30)) taskset -c "$CLIENT_CPU" dnsperf -a 127.0.1.1 -s 127.0.0.1 -p "$PORT" -d "$QUERIES" \
				-c 1 -q 100 -Q "$QUIET_QPS" -t 1 -l "$DURATION" -O suppress=timeout \
				>"$TMP/quiet.out" 2>&1 || die "quiet dnsperf failed: $(cat "$TMP/quiet.out")"
			wait "$noisy" || true
			sent=$(field "$TMP/quiet.out" "Queries sent")
			lost=$(field "$TMP/quiet.out" "Queries lost")
			avg=$(sed -n 's/^ *Average Latency (s): *\([0-9.]*\).*max \([0-9.]*\).*/\1 \2/p' "$TMP/quiet.out")
			nsent=$(field "$TMP/noisy.out" "Queries sent")
			nsent=${nsent:--}
			answers=$(udp_responses)
			dropped=$(metric 'clusterset_dns_rrl_limited_total{action="dropped"}')
			slipped=$(metric 'clusterset_dns_rrl_limited_total{action="slipped"}')
			python3 -c "import sys; s,l=int(sys.argv[1]),int(sys.argv[2]); a,m=map(float,sys.argv[3].split()); \
print('B\t$path\t$mode\t$load\t%d\t%d\t%.2f\t%.2f\t%.1f\t$nsent\t$answers\t$dropped\t$slipped' % (s, l, 100*l/s, a*1e3, m*1e3))" \
				"$sent" "$lost" "$avg"
			stop_server
		done
	done
fi
# ---- C: the limiter alone ---------------------------------------------------------
if [[ " $PARTS " == *" C "* ]]; then
	log "C: RateLimiter::check alone (cargo bench --bench rrl)"
	# Built first (release profile), unbounded like part A's build; the run
	# itself is bounded.
	(cd "$REPO" && cargo bench --quiet --bench rrl --no-run) || die "cargo bench --no-run failed"
	(cd "$REPO" && timeout 600 taskset -c "$SERVER_CPU,$CLIENT_CPU" cargo bench --quiet --bench rrl) |
		sed 's/^/C\t/' || die "cargo bench --bench rrl failed"
	log "C: load average $(cut -d' ' -f1-3 /proc/loadavg)"
fi
log "done"
