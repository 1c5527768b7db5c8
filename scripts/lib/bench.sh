# Shared pieces of the DNS benchmark scripts (sourced by bench-knot.sh,
# bench-rrl.sh and bench-scale.sh, which define REPO, log and die first).

# Prints the clusterset-dns binary to measure: CLUSTERSET_DNS_BIN if set,
# else the release build of this checkout (built first).
bench_binary() {
	local bin
	if [[ -n ${CLUSTERSET_DNS_BIN:-} ]]; then
		bin=$CLUSTERSET_DNS_BIN
	else
		log "cargo build --release"
		(cd "$REPO" && cargo build --release --quiet) || die "cargo build --release failed"
		bin=$(cd "$REPO" && cargo metadata --format-version 1 --no-deps |
			python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/release/clusterset-dns
	fi
	[[ -x $bin ]] || die "no binary at $bin"
	printf '%s\n' "$bin"
}

# Bounds the rest of the run: after $2 seconds, says so as [$1] and sends
# SIGTERM to this script. Runs in the background; its pid is in $!.
bench_watchdog() {
	local tag=$1 timeout=$2
	(
		trap 'kill "$sleeper" 2>/dev/null; exit 0' TERM
		sleep "$timeout" &
		sleeper=$!
		wait "$sleeper"
		echo "[$tag] BENCH_TIMEOUT=${timeout}s reached, aborting" >&2
		kill -TERM $$ 2>/dev/null
	) &
}

# The processes a bench started (PIDS, which the script defines) are
# stopped on exit, and its temporary directory (TMP) removed unless
# KEEP_TMP=1. `bench_traps` installs this for EXIT, INT and TERM.

# Forgets a process that has been waited for.
drop_pid() {
	local keep=() p
	for p in "${PIDS[@]}"; do [[ $p == "$1" ]] || keep+=("$p"); done
	PIDS=("${keep[@]}")
}

# Runs "$@" in the background and waits for it, so that INT/TERM interrupt
# the wait at once; the trap then kills it (and its children) like every
# server.
run_waited() {
	local p rc=0
	"$@" &
	p=$!
	PIDS+=("$p")
	wait "$p" || rc=$?
	drop_pid "$p"
	return "$rc"
}

# On exit: TERM every process in PIDS (children first), KILL what is left
# after 2 s, remove TMP.
cleanup() {
	local rc=$? pid
	trap - EXIT INT TERM
	for pid in "${PIDS[@]}"; do
		pkill -TERM -P "$pid" 2>/dev/null || true
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in "${PIDS[@]}"; do
		for _ in 1 2 3 4 5 6 7 8 9 10; do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.2
		done
		kill -KILL "$pid" 2>/dev/null || true
	done
	if [[ ${KEEP_TMP:-0} == 1 ]]; then
		log "kept $TMP"
	else
		rm -rf "$TMP"
	fi
	exit "$rc"
}

# Writes DIR/knot.conf for one Knot DNS serving the zone file ZONEFILE as
# clusterset.local on 127.0.0.1@PORT (one UDP, one TCP and one background
# worker; the zone loaded whole, never written back, no journal), and checks
# it with `knotc conf-check` where knotc is installed. The benchmarks all
# configure Knot here, so its figures compare across scripts.
knot_config() { # DIR PORT ZONEFILE
	local dir=$1 port=$2 zonefile=$3 knotc
	mkdir -p "$dir/db" "$dir/run"
	cat >"$dir/knot.conf" <<-EOF
		server:
		    rundir: "$dir/run"
		    listen: 127.0.0.1@$port
		    udp-workers: 1
		    tcp-workers: 1
		    background-workers: 1

		database:
		    storage: "$dir/db"

		log:
		  - target: stderr
		    any: warning

		template:
		  - id: default
		    storage: "$dir"
		    zonefile-sync: -1
		    zonefile-load: whole
		    journal-content: none

		zone:
		  - domain: clusterset.local
		    file: "$zonefile"
	EOF
	knotc=$(command -v knotc || echo /usr/sbin/knotc)
	if [[ -x $knotc ]]; then
		"$knotc" -c "$dir/knot.conf" conf-check >"$dir/conf-check.log" 2>&1 || {
			cat "$dir/conf-check.log" >&2
			die "$dir/knot.conf rejected by knotc conf-check"
		}
	fi
}

bench_traps() {
	trap cleanup EXIT
	trap 'log "interrupted"; exit 130' INT TERM
}
