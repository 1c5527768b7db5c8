# Shared pieces of the DNS benchmark scripts (sourced by bench-knot.sh and
# bench-rrl.sh, which define REPO, log and die first).

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
