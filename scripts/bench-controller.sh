#!/usr/bin/env bash
# Benchmark the MCS controller (issue 9) on three member clusters, in one run:
#
#   scripts/bench-controller.sh
#
# Steps: install missing tools (apt; the same as scripts/bench-kube.sh), find
# or build the testenv binaries (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kwok; scripts/testenv-build.sh),
# `cargo build --release`, compile the bench (tests/bench/controller.rs,
# release profile, behind the `testenv` cargo feature), wait until the
# machine is quiet, then run `cargo bench --features testenv --bench
# controller` under a hard time limit. The bench starts three member
# clusters, loads BENCH_SERVICES exported Services per cluster, starts one
# release controller per cluster (pinned with taskset) and measures cold
# convergence, idle writes, watches per peer, warm convergence, pod Ready →
# DNS answer latency through `clusterset-dns serve` and the controllers'
# VmHWM; it prints a summary (also written to BENCH_CONTROLLER_RESULTS as
# markdown; the controllers' and serve's logs are copied beside it).
#
# Environment (all optional; the bench's own knobs are documented in
# Settings::from_env in tests/bench/controller.rs):
#   BENCH_TIMEOUT=900          hard limit for the bench run, s (after the build)
#   BENCH_MAX_LOAD=1.5 BENCH_LOAD_WAIT=300
#                              before starting, wait up to BENCH_LOAD_WAIT s for
#                              the 1-min load average to drop below
#                              BENCH_MAX_LOAD (then go on, warning)
#   BENCH_CONTROLLER_RESULTS=target/bench-controller/results.md
#   BENCH_SERVICES=2000 BENCH_WARM_SERVICES=200 BENCH_NAMESPACES=20
#   BENCH_SAMPLES=50 BENCH_CONCURRENCY=32 BENCH_IDLE=60 BENCH_POLL_MS=2
#   BENCH_CONVERGE_TIMEOUT=600 BENCH_CONTROLLER_CPU=0 BENCH_DNS_CPU=1
#   BENCH_MAX_BUSY=35 BENCH_QUIET_WAIT=90 BENCH_FLOOR_UNITS=1000
#   CLUSTERSET_DNS_LOG         passed to the controllers (e.g. clusterset_dns=debug)
#   BENCH_HEAPTRACK=DIR        run each controller under heaptrack (Debian
#                              package heaptrack, installed if missing), traces
#                              in DIR, and print each trace's peak and
#                              remaining heap at the end; the VmHWM figures
#                              then include heaptrack's own memory. The
#                              bench does not end by itself then (each
#                              controller is heaptrack's child, not the
#                              bench's): after its summary, end them with
#                              pkill -TERM -f 'clusterset-dns controller'
#                              (which completes the traces), then stop
#                              the script (Ctrl-C); the summary is written
#   CLUSTERSET_DNS_TESTENV_BIN=DIR             testenv binaries
#
# Every process the bench starts is killed when it ends (guards, and
# PR_SET_PDEATHSIG if the bench itself is killed).

set -euo pipefail

TIMEOUT=${BENCH_TIMEOUT:-900}
MAX_LOAD=${BENCH_MAX_LOAD:-1.5}
LOAD_WAIT=${BENCH_LOAD_WAIT:-300}

log() { printf '[bench-controller %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() {
	log "ERROR: $*"
	exit 1
}

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$REPO"

# ---- tools ----------------------------------------------------------------------
need_pkgs=()
command -v taskset >/dev/null 2>&1 || need_pkgs+=(util-linux)
command -v openssl >/dev/null 2>&1 || need_pkgs+=(openssl)
command -v curl >/dev/null 2>&1 || need_pkgs+=(curl)
if [[ -n ${BENCH_HEAPTRACK:-} ]]; then
	command -v heaptrack >/dev/null 2>&1 || need_pkgs+=(heaptrack)
fi
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
	# A cached directory with the member binaries (kwok etc.), if any.
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
log "cargo bench --features testenv --bench controller --no-run"
cargo bench --features testenv --bench controller --no-run --quiet || die "compiling the bench failed"

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

# ---- heap profile (optional) ----------------------------------------------------
if [[ -n ${BENCH_HEAPTRACK:-} ]]; then
	mkdir -p "$BENCH_HEAPTRACK"
	BENCH_HEAPTRACK=$(cd "$BENCH_HEAPTRACK" && pwd -P)
	rm -f "$BENCH_HEAPTRACK"/controller.*.zst
	wrapper=$BENCH_HEAPTRACK/heaptrack-wrapper.sh
	printf '#!/bin/sh\nexec heaptrack -o %s/controller.$$ "$@"\n' "$BENCH_HEAPTRACK" >"$wrapper"
	chmod +x "$wrapper"
	# tests/controlplane starts each controller through it.
	export CLUSTERSET_DNS_CONTROLLER_WRAPPER=$wrapper
	log "heaptrack traces go to $BENCH_HEAPTRACK"
fi

# ---- run ------------------------------------------------------------------------
export BENCH_CONTROLLER_RESULTS=${BENCH_CONTROLLER_RESULTS:-$REPO/target/bench-controller/results.md}
log "cargo bench --features testenv --bench controller (limit ${TIMEOUT}s)"
# timeout signals its whole process group: cargo and the bench; the bench's
# children die with it (PR_SET_PDEATHSIG).
status=0
timeout --kill-after=15 "$TIMEOUT" cargo bench --features testenv --bench controller --quiet || status=$?
if ((status == 124)); then
	die "the bench did not finish within BENCH_TIMEOUT=${TIMEOUT}s"
elif ((status != 0)); then
	die "the bench failed (exit $status)"
fi
log "results: $BENCH_CONTROLLER_RESULTS"
if [[ -n ${BENCH_HEAPTRACK:-} ]]; then
	for trace in "$BENCH_HEAPTRACK"/controller.*.zst; do
		summary=$(heaptrack_print -f "$trace" --print-peaks 0 --print-allocators 0 \
			--print-temporary 0 --print-leaks 0 2>/dev/null |
			grep -E 'total runtime|peak heap memory|total memory leaked' | tr '\n' ' ')
		log "heaptrack $(basename "$trace"): $summary"
	done
fi
