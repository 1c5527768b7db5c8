#!/usr/bin/env bash
# A local clusterset in one command: three member clusters on loopback (no
# kind, Docker or tmux), each with the MCS controller, clusterset-dns and a
# CoreDNS that forwards clusterset.local to it, plus a sample app. Run as
# root, it also starts a data plane, so connections reach the pods; without
# root, DNS and the API only.
#
#   scripts/demo.sh                 up, the walkthrough (show), then down
#   scripts/demo.sh up              start it and leave it running; prints the
#                                   kubeconfig and DNS addresses
#   scripts/demo.sh up --hub        the same, the clusters reading each other
#                                   through a hub (docs/hub.md) instead of as
#                                   a mesh; without --hub the hub runs beside,
#                                   unused (docs/tutorials/06-mesh-to-hub.md)
#   scripts/demo.sh env             the env file: source <(scripts/demo.sh env)
#   scripts/demo.sh show            the walkthrough, against a running demo
#   scripts/demo.sh status          what runs
#   scripts/demo.sh stop-cluster X  stop cluster X's kube-apiserver (X = a, b, c)
#   scripts/demo.sh start-cluster X start it again
#   scripts/demo.sh down            stop everything and remove the state dir
#
# Environment:
#   CLUSTERSET_DNS_DEMO_DIR    state dir (default ${XDG_RUNTIME_DIR:-/tmp}/clusterset-dns-demo):
#                              kubeconfig, env, logs (cluster-a/, ...), etcd data
#   CLUSTERSET_DNS_DEMO_GRACE  the controllers' --peer-grace-period (default 20s;
#                              production default 5m): how long a lost cluster's
#                              endpoints stay in the others' answers
#
# The clusters are the test harness's (tests/controlplane): etcd, and per
# cluster kube-apiserver, kube-controller-manager, kube-scheduler and kwok
# (fake nodes). Cluster b is dual-stack. As root, the data plane of
# tests/dataplane runs each pod's command in a network namespace of its own,
# kube-proxy on every node and routes between the clusters' pod ranges, with
# a toolbox pod per cluster to connect from (the walkthrough then shows
# connections too); otherwise pods get IPs but run nothing. The
# first run builds the binaries (scripts/testenv-build.sh, ~12 min; then the
# cargo build of clusterset-dns and tests/demo); later runs take seconds.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
state=${CLUSTERSET_DNS_DEMO_DIR:-${XDG_RUNTIME_DIR:-/tmp}/clusterset-dns-demo}
grace=${CLUSTERSET_DNS_DEMO_GRACE:-20s}
target=${CARGO_TARGET_DIR:-$repo/target}
demo_bin=$target/debug/examples/demo

say() { printf 'demo: %s\n' "$*" >&2; }
die() { say "ERROR: $*"; exit 1; }

running() {
	[ -f "$state/pid" ] && kill -0 "$(cat "$state/pid")" 2>/dev/null
}

build() {
	local bin
	if ! bin=$("$repo/scripts/testenv-build.sh" --check 2>/dev/null | tail -n1); then
		say "first run: building kube-apiserver, etcd, CoreDNS, kwok, kubectl ... from the Go module proxy"
		say "(scripts/testenv-build.sh: ~12 min on 2 cores, cached in ~/.cache/clusterset-dns/testenv)"
		bin=$("$repo/scripts/testenv-build.sh" | tail -n1)
	fi
	testenv_bin=$bin
	# Run from a `cargo test` (tests/tutorials.rs), the environment holds the
	# test crate's CARGO_PKG_*, CARGO_MANIFEST_* ... variables. Some build
	# scripts (ring's) track them: building with them would rebuild those
	# crates here, and every plain cargo build after it would rebuild them back.
	unset "${!CARGO_PKG_@}" "${!CARGO_MANIFEST_@}" "${!CARGO_BIN_@}" CARGO_CRATE_NAME \
		CARGO_PRIMARY_PACKAGE CARGO_TARGET_TMPDIR CARGO_RUSTC_CURRENT_DIR OUT_DIR
	if [ -x "$demo_bin" ] && [ -x "$target/debug/clusterset-dns" ]; then
		(cd "$repo" && cargo build --quiet --locked --features testenv --bin clusterset-dns --example demo)
	else
		say "first run: building clusterset-dns and the demo harness (cargo build; a few minutes)"
		(cd "$repo" && cargo build --locked --features testenv --bin clusterset-dns --example demo)
	fi
}

up() {
	local hub_flag=
	[ "${1:-}" = --hub ] && hub_flag=--hub
	if running; then
		say "already up (scripts/demo.sh down stops it)"
		cat "$state/summary"
		return
	fi
	[ -e "$state" ] && rm -rf "$state"
	command -v curl >/dev/null || die "curl is needed (apt-get install curl)"
	command -v openssl >/dev/null || die "openssl is needed (apt-get install openssl)"
	build
	local start=$SECONDS pid
	mkdir -p "$state/tmp"
	# Detached (own session, no terminal): it runs until `down` signals it.
	# Everything it starts dies with it (PR_SET_PDEATHSIG).
	TMPDIR=$state/tmp CLUSTERSET_DNS_TESTENV_BIN=$testenv_bin \
		CLUSTERSET_DNS_BIN=$target/debug/clusterset-dns \
		setsid nohup "$demo_bin" run "$state" --grace "$grace" $hub_flag \
		>"$state/demo.log" 2>&1 </dev/null &
	pid=$!
	echo "$pid" >"$state/pid"
	say "starting 3 member clusters (log: $state/demo.log)"
	# Interrupted while starting: take it down again.
	trap 'echo >&2; down; exit 130' INT TERM
	local seen=0
	until [ -f "$state/ready" ]; do
		if ! kill -0 "$pid" 2>/dev/null; then
			say "the demo exited; its log:"
			tail -n 60 "$state/demo.log" >&2
			rm -rf "$state"
			exit 1
		fi
		if ((SECONDS - start > 240)); then
			say "not ready after 240 s; its log:"
			tail -n 60 "$state/demo.log" >&2
			down
			exit 1
		fi
		# Progress lines of the demo, as they come.
		local lines
		lines=$(grep -c '^demo:' "$state/demo.log" 2>/dev/null || true)
		if ((lines > seen)); then
			grep '^demo:' "$state/demo.log" | tail -n +$((seen + 1)) >&2
			seen=$lines
		fi
		sleep 0.2
	done
	trap - INT TERM
	grep '^demo:' "$state/demo.log" | tail -n +$((seen + 1)) >&2
	say "up in $((SECONDS - start)) s (scripts/demo.sh down stops it)"
	echo
	cat "$state/summary"
	[ "${1:-}" = quiet ] && return
	echo
	echo "Try:"
	echo "  source <(scripts/demo.sh env)     # KUBECONFIG, kubectl on PATH, \$DNS_A \$DNS_B \$DNS_C"
	echo "  dig +short @127.0.0.1 -p \$DNS_C web.shop.svc.clusterset.local"
	echo "  kubectl --context c get serviceimports -n shop"
	echo "  docs/tutorials/README.md          # the tutorials"
}

down() {
	if [ -f "$state/pid" ]; then
		local pid
		pid=$(cat "$state/pid")
		if kill -0 "$pid" 2>/dev/null; then
			kill -TERM "$pid" 2>/dev/null || true
			for _ in $(seq 100); do
				kill -0 "$pid" 2>/dev/null || break
				sleep 0.1
			done
			# Not gone in 10 s: kill it; its children die with it
			# (PR_SET_PDEATHSIG), and its process group (setsid) is ours.
			kill -KILL -- "-$pid" 2>/dev/null || true
		fi
	fi
	rm -rf "$state"
	say "down: processes stopped, $state removed"
}

need_up() {
	running || die "no demo is running (scripts/demo.sh up starts one)"
}

ctl() {
	need_up
	"$demo_bin" ctl "$state" "$@"
}

# ---- the walkthrough ---------------------------------------------------------

# Prints a command, then runs it.
run() {
	if [ -t 1 ]; then
		printf '\n\033[1m$ %s\033[0m\n' "$*"
	else
		printf '\n$ %s\n' "$*"
	fi
	bash -c "$*" || true
}

# Waits until `dig +short` of $2 through cluster $1's CoreDNS gives $3 lines;
# prints how long it took.
wait_answers() {
	local cluster=$1 name=$2 want=$3 start=$SECONDS port got
	port=$(port_of "$cluster")
	while :; do
		got=$(dig +short +tries=1 +time=1 @127.0.0.1 -p "$port" "$name" | grep -c . || true)
		[ "$got" = "$want" ] && break
		if ((SECONDS - start > 120)); then
			say "still $got answers for $name after 120 s (want $want)"
			return 1
		fi
		sleep 0.5
	done
	say "cluster $cluster answers $want record(s) for $name after $((SECONDS - start)) s"
}

# Waits until 20 requests from cluster $1's toolbox pod to $2 are all
# answered by pods whose IP starts with $3 (kube-proxy has caught up with
# the slices, not only DNS); prints how long it took.
wait_connections() {
	local cluster=$1 name=$2 prefix=$3 start=$SECONDS got
	while :; do
		got=$(kubectl --context "$cluster" exec toolbox -- sh -c \
			"for i in \$(seq 20); do curl -s --max-time 2 $name; done" 2>/dev/null |
			grep -c " from $prefix" || true)
		[ "$got" = 20 ] && break
		if ((SECONDS - start > 120)); then
			say "still $got of 20 connections to $name answered from $prefix* after 120 s"
			return 1
		fi
		sleep 1
	done
	say "cluster $cluster: every connection to $name answered from $prefix* after $((SECONDS - start)) s"
}

port_of() {
	local upper
	upper=$(tr '[:lower:]' '[:upper:]' <<<"$1")
	sed -n "s/^export DNS_$upper=\([0-9]*\).*/\1/p" "$state/env"
}

show() {
	need_up
	command -v dig >/dev/null || die "dig is needed (apt-get install bind9-dnsutils)"
	# shellcheck disable=SC1091
	source "$state/env"
	echo "The sample app: shop/web (Deployment + Service + ServiceExport) and shop/db"
	echo "(headless StatefulSet), both in clusters a and b; cluster c only imports."
	for c in a b c; do
		run "kubectl --context $c get serviceexports,serviceimports -n shop -o name"
	done
	echo
	echo "== The ClusterSetIP name, through each cluster's CoreDNS: each cluster has its own clusterset IP"
	for c in a b c; do
		run "dig +short @127.0.0.1 -p \$DNS_${c^^} web.shop.svc.clusterset.local"
	done
	run "kubectl --context c get endpointslices -n shop -l multicluster.kubernetes.io/service-name=web -o custom-columns='SOURCE:.metadata.labels.multicluster\\.kubernetes\\.io/source-cluster,ADDRESSES:.endpoints[*].addresses[0]'"
	run "dig +short @127.0.0.1 -p \$DNS_C _http._tcp.web.shop.svc.clusterset.local SRV"
	if [[ -n ${DEMO_DATA_PLANE:-} ]]; then
		echo
		echo "== Connections through the clusterset IP: from each cluster's toolbox pod, 20 requests;"
		echo "   each answer names the pod IP that served it (10.200.x: cluster a, 10.201.x: cluster b)"
		for c in a b c; do
			run "kubectl --context $c exec toolbox -- sh -c 'for i in \$(seq 20); do curl -s web.shop.svc.clusterset.local; done' | sort | uniq -c"
		done
	fi
	echo
	echo "== The headless name: every ready pod of both clusters, and one name per pod"
	run "dig +short @127.0.0.1 -p \$DNS_C db.shop.svc.clusterset.local | sort"
	run "dig +short @127.0.0.1 -p \$DNS_C db-0.cluster-a.db.shop.svc.clusterset.local"
	run "dig +short @127.0.0.1 -p \$DNS_A db-1.cluster-b.db.shop.svc.clusterset.local"
	run "dig +noall +answer @127.0.0.1 -p \$DNS_A _postgres._tcp.db.shop.svc.clusterset.local SRV | sort"
	echo
	echo "== Cluster b unexports db: its pods leave every cluster's answers"
	run "kubectl --context b delete serviceexport db -n shop"
	wait_answers c db.shop.svc.clusterset.local 2
	run "dig +short @127.0.0.1 -p \$DNS_C db.shop.svc.clusterset.local | sort"
	run "dig @127.0.0.1 -p \$DNS_C db-0.cluster-b.db.shop.svc.clusterset.local | grep status:"
	run "kubectl --context b apply --server-side -f tests/demo/db.yaml"
	wait_answers c db.shop.svc.clusterset.local 4
	echo
	echo "== Cluster a goes away (its kube-apiserver stops): the others keep its pods for the"
	echo "   peer grace period ($DEMO_GRACE_PERIOD here; 5 m by default), then drop them"
	run "scripts/demo.sh stop-cluster a"
	run "dig +short @127.0.0.1 -p \$DNS_C db.shop.svc.clusterset.local | sort    # within grace: still 4"
	wait_answers c db.shop.svc.clusterset.local 2
	run "dig +short @127.0.0.1 -p \$DNS_C db.shop.svc.clusterset.local | sort"
	run "kubectl --context c get serviceimport web -n shop -o jsonpath='{.status.clusters[*].cluster}{\"\\n\"}'"
	if [[ -n ${DEMO_DATA_PLANE:-} ]]; then
		wait_connections c web.shop.svc.clusterset.local 10.201.
		run "kubectl --context c exec toolbox -- sh -c 'for i in \$(seq 20); do curl -s web.shop.svc.clusterset.local; done' | sort | uniq -c    # only b now"
	fi
	echo
	echo "== Cluster a comes back: its pods return to the answers"
	run "scripts/demo.sh start-cluster a"
	wait_answers c db.shop.svc.clusterset.local 4
	run "dig +short @127.0.0.1 -p \$DNS_C db.shop.svc.clusterset.local | sort"
	run "kubectl --context c get serviceimport web -n shop -o jsonpath='{.status.clusters[*].cluster}{\"\\n\"}'"
	echo
	echo "More: docs/tutorials/README.md"
}

# ---- main ----------------------------------------------------------------------

cd "$repo"
case ${1:-all} in
all)
	running && die "a demo is already up at $state: scripts/demo.sh show, or scripts/demo.sh down first"
	up quiet
	trap down EXIT
	show
	;;
up)
	[ $# -le 2 ] && [ "${2:---hub}" = --hub ] || die "usage: scripts/demo.sh up [--hub]"
	up "${2:-}"
	;;
down) down ;;
env)
	need_up
	cat "$state/env"
	;;
show) show ;;
status)
	need_up
	ctl status
	cat "$state/summary"
	;;
stop-cluster | start-cluster)
	[ $# = 2 ] || die "usage: scripts/demo.sh $1 a|b|c"
	ctl "$1" "$2"
	;;
-h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}" ;;
*) die "unknown command $1 (try --help)" ;;
esac
