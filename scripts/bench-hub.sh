#!/usr/bin/env bash
# Benchmark mesh against hub, and a hub with simulated members (issue 46):
#
#   scripts/bench-hub.sh
#
# Steps: install missing tools (apt), find or build the testenv binaries
# (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok;
# scripts/testenv-build.sh), `cargo build --release`, compile the bench
# (tests/bench/hub.rs, release profile, behind the `testenv` cargo
# feature), wait until the machine is quiet, then run `cargo bench
# --features testenv --bench hub` under a hard time limit. While it runs,
# /tmp/bench-hub-running exists (other builds on this machine can wait for
# it to go). The bench prints a summary, also written to BENCH_HUB_RESULTS
# as markdown; the controllers' logs are copied beside it.
#
# Phases (BENCH_HUB_PHASES, both by default):
#   sim          a hub, 3 real members with release controllers, and
#                BENCH_HUB_K simulated members (each its own token,
#                connections, watches, publication, Lease and churn);
#                latency at the real members, hub and etcd cost, per
#                controller connections, CPU and VmHWM; a hub outage
#                (imports kept, reconnection spread from the hub's audit log)
#   mesh-vs-hub  for each N of BENCH_HUB_MESH_SIZES: N members as a mesh,
#                then the same through a hub, over an idle window
#
# Environment (all optional):
#   BENCH_TIMEOUT=1800         hard limit for the bench run, s (after the build)
#   BENCH_MAX_LOAD=1.5 BENCH_LOAD_WAIT=300
#                              before starting, wait up to BENCH_LOAD_WAIT s for
#                              the 1-min load average to drop below
#                              BENCH_MAX_LOAD (then go on, warning)
#   BENCH_HUB_RESULTS=target/bench-hub/results.md
#   BENCH_HUB_PHASES=sim,mesh-vs-hub
#   BENCH_HUB_K=47             simulated members (47 + 3 real = 50)
#   BENCH_HUB_EXPORTS=20       exports per member, simulated and real (sim)
#   BENCH_HUB_ENDPOINTS=10     endpoints per slice
#   BENCH_HUB_CHURN_MS=5000    one endpoint change per simulated member this
#                              often (0: none)
#   BENCH_HUB_SAMPLES=30       samples of each latency
#   BENCH_HUB_IDLE=60          measuring windows, s
#   BENCH_HUB_OUTAGE=60        how long the hub apiserver is down, s
#   BENCH_HUB_AFTER_OUTAGE=60  observed after the hub's restart, s
#   BENCH_HUB_WATCH_RAMP=30    the simulated members open their watches over
#                              this many s
#   BENCH_HUB_MESH_SIZES=3,10  members of the mesh-vs-hub phase
#   BENCH_HUB_MESH_EXPORTS=20  exports per member there
#   BENCH_HUB_CONCURRENCY=8    simulated members set up at once
#   BENCH_HUB_CONVERGE_TIMEOUT=600
#   CLUSTERSET_DNS_TESTENV_BIN=DIR             testenv binaries
#
# Every process the bench starts is killed when it ends (guards, and
# PR_SET_PDEATHSIG if the bench itself is killed).

set -euo pipefail

TIMEOUT=${BENCH_TIMEOUT:-1800}
MAX_LOAD=${BENCH_MAX_LOAD:-1.5}
LOAD_WAIT=${BENCH_LOAD_WAIT:-300}
RUNNING=/tmp/bench-hub-running

log() { printf '[bench-hub %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() {
	log "ERROR: $*"
	exit 1
}

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$REPO"

# ---- tools ----------------------------------------------------------------------
need_pkgs=()
command -v openssl >/dev/null 2>&1 || need_pkgs+=(openssl)
command -v curl >/dev/null 2>&1 || need_pkgs+=(curl)
command -v python3 >/dev/null 2>&1 || need_pkgs+=(python3)
if ((${#need_pkgs[@]})); then
	log "installing ${need_pkgs[*]}"
	SUDO=
	((EUID == 0)) || SUDO=sudo
	export DEBIAN_FRONTEND=noninteractive
	$SUDO apt-get update -qq
	$SUDO apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >&2
fi

# ---- testenv binaries -------------------------------------------------------------
if [[ -z ${CLUSTERSET_DNS_TESTENV_BIN:-} ]]; then
	for d in "$HOME"/.cache/clusterset-dns/testenv/bin/*/; do
		if [[ -x $d/kube-apiserver && -x $d/kwok && -x $d/kube-controller-manager ]]; then
			CLUSTERSET_DNS_TESTENV_BIN=$d
		fi
	done
	if [[ -z ${CLUSTERSET_DNS_TESTENV_BIN:-} ]]; then
		log "building the testenv binaries (scripts/testenv-build.sh)"
		CLUSTERSET_DNS_TESTENV_BIN=$(bash scripts/testenv-build.sh | tail -n 1)
	fi
fi
export CLUSTERSET_DNS_TESTENV_BIN
for b in etcd kube-apiserver kube-controller-manager kube-scheduler kwok; do
	[[ -x $CLUSTERSET_DNS_TESTENV_BIN/$b ]] || die "no $b in $CLUSTERSET_DNS_TESTENV_BIN"
done

# ---- build ----------------------------------------------------------------------
log "cargo build --release"
cargo build --release --quiet || die "cargo build --release failed"
log "cargo bench --features testenv --bench hub --no-run"
cargo bench --features testenv --bench hub --no-run --quiet || die "compiling the bench failed"

# ---- quiet machine --------------------------------------------------------------
deadline=$((SECONDS + LOAD_WAIT))
while :; do
	read -r load _ </proc/loadavg
	if python3 -c "import sys; sys.exit(not float('$load') < float('$MAX_LOAD'))"; then
		break
	fi
	if ((SECONDS >= deadline)); then
		log "WARNING: 1-min load average is $load (>= $MAX_LOAD) after ${LOAD_WAIT}s; running anyway, numbers may be low/noisy"
		break
	fi
	log "waiting for the load average to drop below $MAX_LOAD (now $load)"
	sleep 10
done
log "uptime: $(uptime)"

# ---- run ------------------------------------------------------------------------
# A simulated member holds about 6 connections to the hub, the hub as many.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
export BENCH_HUB_RESULTS=${BENCH_HUB_RESULTS:-$REPO/target/bench-hub/results.md}
log "cargo bench --features testenv --bench hub (limit ${TIMEOUT}s; $RUNNING meanwhile)"
printf '%s\n' "$$" >"$RUNNING"
trap 'rm -f "$RUNNING"' EXIT
# timeout signals its whole process group: cargo and the bench; the bench's
# children die with it (PR_SET_PDEATHSIG).
status=0
timeout --kill-after=15 "$TIMEOUT" cargo bench --features testenv --bench hub --quiet || status=$?
if ((status == 124)); then
	die "the bench did not finish within BENCH_TIMEOUT=${TIMEOUT}s"
elif ((status != 0)); then
	die "the bench failed (exit $status)"
fi
log "results: $BENCH_HUB_RESULTS"
