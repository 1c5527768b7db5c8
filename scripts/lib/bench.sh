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

bench_traps() {
	trap cleanup EXIT
	trap 'log "interrupted"; exit 130' INT TERM
}
