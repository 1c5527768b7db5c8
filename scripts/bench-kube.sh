#!/usr/bin/env bash
# Benchmark clusterset-dns against CoreDNS (kubernetes … { multicluster }) on a
# real kube-apiserver holding a large ClusterSet, in one run:
#
#   scripts/bench-kube.sh
#
# Steps: install missing tools (apt), find or build the testenv binaries
# (etcd, kube-apiserver, coredns; scripts/testenv-build.sh), `cargo build
# --release`, compile the bench (tests/bench/kube.rs, release profile; it is
# behind the `testenv` cargo feature), wait until the machine is quiet, then
# run `cargo bench --features testenv --bench kube` under a hard time limit.
# The bench itself starts the control plane, loads
# 10,000 ServiceImports / 100,000 endpoints, starts both servers pinned to
# CPU 0, loads each with dnsperf pinned to CPU 1 (3 interleaved rounds),
# times 200 EndpointSlice changes end to end per server, and prints a
# summary (also written to BENCH_KUBE_RESULTS as markdown).
#
# Environment (all optional; the bench's own knobs are documented in
# Settings::from_env in tests/bench/kube.rs):
#   BENCH_TIMEOUT=600          hard limit for the bench run, s (after the build)
#   BENCH_MAX_LOAD=2 BENCH_LOAD_WAIT=300
#                              before starting, wait up to BENCH_LOAD_WAIT s for
#                              the 1-min load average to drop below
#                              BENCH_MAX_LOAD (then go on, warning)
#   BENCH_KUBE_RESULTS=target/bench-kube/results.md
#   BENCH_SERVICES=10000 BENCH_NAMESPACES=100 BENCH_ENDPOINTS=100000
#   BENCH_CONCURRENCY=32 BENCH_DURATION=10 BENCH_WARMUP=2 BENCH_QUERIES=100000
#   BENCH_ROUNDS=3             throughput rounds, servers interleaved; medians
#   BENCH_DNSPERF="-c 8 -q 200"   ';'-separated dnsperf settings tried per
#                              server and round (the best lossless one counts)
#   BENCH_CHANGES=200 BENCH_COREDNS_PROPAGATION=1
#   BENCH_FLOOR_RUNS=3         list-floor runs, each followed by a start of
#                              clusterset-dns (medians compared)
#   BENCH_OUTAGE=5             seconds the apiserver stays down before the
#                              relist whose peak memory is measured
#   BENCH_OURS_PERF=FILE       profile the kept clusterset-dns (perf record -g)
#   CLUSTERSET_DNS_BASELINE_BIN=PATH           another build started after each
#                              list-floor run too (start-up A/B in one run)
#   BENCH_SERVER_CPU=0 BENCH_CLIENT_CPU=1
#   BENCH_MAX_BUSY=15 BENCH_QUIET_WAIT=90 BENCH_QUIET_BUDGET=180
#                              quiet checks inside the bench (per check / in all)
#   CLUSTERSET_DNS_TESTENV_BIN=DIR             testenv binaries
#   CLUSTERSET_DNS_BIN=PATH                    clusterset-dns binary to test
#
# Every process the bench starts is killed when it ends (guards, and
# PR_SET_PDEATHSIG if the bench itself is killed).

set -euo pipefail

TIMEOUT=${BENCH_TIMEOUT:-600}
MAX_LOAD=${BENCH_MAX_LOAD:-2}
LOAD_WAIT=${BENCH_LOAD_WAIT:-300}

log() { printf '[bench-kube %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() {
	log "ERROR: $*"
	exit 1
}

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$REPO"

# ---- tools ----------------------------------------------------------------------
need_pkgs=()
command -v dnsperf >/dev/null 2>&1 || need_pkgs+=(dnsperf)
command -v taskset >/dev/null 2>&1 || need_pkgs+=(util-linux)
command -v openssl >/dev/null 2>&1 || need_pkgs+=(openssl)
command -v curl >/dev/null 2>&1 || need_pkgs+=(curl)
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
	cached=("$HOME"/.cache/clusterset-dns/testenv/bin/*/)
	if [[ ${#cached[@]} -eq 1 && -x ${cached[0]}/kube-apiserver ]]; then
		CLUSTERSET_DNS_TESTENV_BIN=${cached[0]}
	else
		log "building the testenv binaries (scripts/testenv-build.sh)"
		CLUSTERSET_DNS_TESTENV_BIN=$(bash scripts/testenv-build.sh | tail -n 1)
	fi
fi
export CLUSTERSET_DNS_TESTENV_BIN
for b in etcd kube-apiserver coredns; do
	[[ -x $CLUSTERSET_DNS_TESTENV_BIN/$b ]] || die "no $b in $CLUSTERSET_DNS_TESTENV_BIN"
done

# ---- build ----------------------------------------------------------------------
log "cargo build --release"
cargo build --release --quiet || die "cargo build --release failed"
log "cargo bench --features testenv --bench kube --no-run"
cargo bench --features testenv --bench kube --no-run --quiet || die "compiling the bench failed"

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
export BENCH_KUBE_RESULTS=${BENCH_KUBE_RESULTS:-$REPO/target/bench-kube/results.md}
log "cargo bench --features testenv --bench kube (limit ${TIMEOUT}s)"
# timeout signals its whole process group: cargo and the bench; the bench's
# children die with it (PR_SET_PDEATHSIG).
status=0
timeout --kill-after=15 "$TIMEOUT" cargo bench --features testenv --bench kube --quiet || status=$?
if ((status == 124)); then
	die "the bench did not finish within BENCH_TIMEOUT=${TIMEOUT}s"
elif ((status != 0)); then
	die "the bench failed (exit $status)"
fi
log "results: $BENCH_KUBE_RESULTS"
