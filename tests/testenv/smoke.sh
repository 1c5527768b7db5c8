#!/usr/bin/env bash
# Smoke test for the binaries built by scripts/testenv-build.sh:
#   1. etcd on loopback (temp data dir, --unsafe-no-fsync), wait for /readyz
#   2. kube-apiserver against it (token auth, RBAC, self-signed serving cert,
#      self-generated service-account keypair), wait for /readyz with the token
#   3. coredns -version, coredns -plugins | grep kubernetes, and coredns started
#      with a `kubernetes ... { multicluster clusterset.local }` Corefile
#      pointed at that apiserver (checks the option parses and the server runs)
# Everything is started on 127.0.0.1 and killed (by PID) on exit.
#
#   tests/testenv/smoke.sh [BIN_DIR]   # default: output of scripts/testenv-build.sh
#
# Note: kube-apiserver >= 1.37 (at least) refuses --advertise-address=127.0.0.1
# with the default lease endpoint reconciler ("cannot use public IP 127.0.0.1
# with endpoint reconciler ... may not be in the loopback range"), hence
# --endpoint-reconciler-type=none (no endpoints for default/kubernetes; fine here).
#
# Needs curl and openssl. Prints timings; exits non-zero on any failure.
set -euo pipefail

log() { printf 'smoke: %s\n' "$*"; }
die() { printf 'smoke: FAIL: %s\n' "$*" >&2; exit 1; }

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
BIN=${1:-${TESTENV_BIN:-}}
if [[ -z $BIN ]]; then
	BIN=$("$here/../../scripts/testenv-build.sh" | tail -n1)
fi
for b in kube-apiserver etcd coredns; do [[ -x $BIN/$b ]] || die "$BIN/$b missing"; done
command -v curl >/dev/null || die "curl not found"
command -v openssl >/dev/null || die "openssl not found"

D=$(mktemp -d "${TMPDIR:-/tmp}/clusterset-dns-smoke.XXXXXX")
pids=()
# stop PID: SIGTERM, then SIGKILL after 10 s.
stop() {
	local i
	kill "$1" 2>/dev/null || return 0
	for ((i = 0; i < 100; i++)); do
		kill -0 "$1" 2>/dev/null || break
		sleep 0.1
	done
	kill -9 "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
}
cleanup() {
	local i
	# Newest first: coredns, then kube-apiserver, then etcd.
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do stop "${pids[i]}"; done
	if [[ ${KEEP_SMOKE_DIR:-0} == 1 ]]; then log "kept $D"; else rm -rf "$D"; fi
}
trap cleanup EXIT

# free_port: a 127.0.0.1 TCP port nobody listens on (best effort; races are
# harmless here because every start is checked).
used_ports=" "
free_port() {
	local p
	while :; do
		p=$((20000 + RANDOM % 40000))
		[[ $used_ports == *" $p "* ]] && continue
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			used_ports+="$p "
			echo "$p"
			return
		fi
	done
}

ms() { date +%s%3N; }

# wait_for NAME PID TIMEOUT_S CMD...: poll CMD until it succeeds.
wait_for() {
	local name=$1 pid=$2 timeout=$3 deadline
	shift 3
	deadline=$(($(ms) + timeout * 1000))
	until "$@" >/dev/null 2>&1; do
		kill -0 "$pid" 2>/dev/null || die "$name exited early; log: $(tail -n 30 "$D/$name.log")"
		(($(ms) < deadline)) || die "$name not ready after ${timeout}s; log: $(tail -n 30 "$D/$name.log")"
		sleep 0.1
	done
}

log "binaries: $BIN"
[[ -f $BIN/VERSIONS ]] && sed 's/^/smoke:   /' "$BIN/VERSIONS"

# ---- etcd ---------------------------------------------------------------------------
E=$(free_port)
P=$(free_port)
"$BIN/etcd" --version | sed 's/^/smoke:   etcd --version: /'
t0=$(ms)
"$BIN/etcd" --name smoke --data-dir "$D/etcd" \
	--listen-client-urls "http://127.0.0.1:$E" --advertise-client-urls "http://127.0.0.1:$E" \
	--listen-peer-urls "http://127.0.0.1:$P" --initial-advertise-peer-urls "http://127.0.0.1:$P" \
	--initial-cluster "smoke=http://127.0.0.1:$P" \
	--unsafe-no-fsync --log-level warn >"$D/etcd.log" 2>&1 &
pids+=($!)
wait_for etcd "${pids[-1]}" 30 curl -fsS "http://127.0.0.1:$E/readyz"
t1=$(ms)
log "etcd ready on 127.0.0.1:$E in $((t1 - t0)) ms"

# ---- kube-apiserver -------------------------------------------------------------------
A=$(free_port)
TOKEN=smoke-admin-token
openssl genrsa -out "$D/sa.key" 2048 2>/dev/null
openssl rsa -in "$D/sa.key" -pubout -out "$D/sa.pub" 2>/dev/null
echo "$TOKEN,admin,admin,\"system:masters\"" >"$D/tokens.csv"
t2=$(ms)
"$BIN/kube-apiserver" \
	--etcd-servers="http://127.0.0.1:$E" \
	--bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$A" \
	--endpoint-reconciler-type=none \
	--cert-dir="$D/pki" \
	--service-account-issuer="https://127.0.0.1:$A" \
	--service-account-key-file="$D/sa.pub" --service-account-signing-key-file="$D/sa.key" \
	--service-cluster-ip-range=10.0.0.0/24 \
	--authorization-mode=RBAC \
	--token-auth-file="$D/tokens.csv" \
	--disable-admission-plugins=ServiceAccount \
	--allow-privileged=true --profiling=false >"$D/kube-apiserver.log" 2>&1 &
pids+=($!)
wait_for kube-apiserver "${pids[-1]}" 120 \
	curl -kfsS -H "Authorization: Bearer $TOKEN" "https://127.0.0.1:$A/readyz"
t3=$(ms)
log "kube-apiserver ready on 127.0.0.1:$A in $((t3 - t2)) ms (start -> /readyz 200)"
version=$(curl -kfsS -H "Authorization: Bearer $TOKEN" "https://127.0.0.1:$A/version")
log "/version gitVersion: $(printf '%s' "$version" | sed -n 's/.*"gitVersion": *"\([^"]*\)".*/\1/p')"
code=$(curl -ks -o /dev/null -w '%{http_code}' "https://127.0.0.1:$A/api/v1/namespaces")
[[ $code == 401 || $code == 403 ]] || die "anonymous GET /api/v1/namespaces gave $code, want 401/403"
curl -kfsS -H "Authorization: Bearer $TOKEN" "https://127.0.0.1:$A/api/v1/namespaces/kube-system" >/dev/null ||
	die "GET namespace kube-system with the admin token failed"
curl -kfsS -H "Authorization: Bearer $TOKEN" "https://127.0.0.1:$A/apis/discovery.k8s.io/v1" | grep -q '"endpointslices"' ||
	die "discovery.k8s.io/v1 does not serve endpointslices"
log "authn/authz ok (anonymous $code, admin token reads kube-system, EndpointSlice API served)"

# ---- coredns --------------------------------------------------------------------------
cv=$("$BIN/coredns" -version)
log "coredns -version: $(printf '%s' "$cv" | tr '\n' ' ')"
kp=$("$BIN/coredns" -plugins | grep kubernetes) || die "coredns -plugins has no kubernetes plugin"
log "coredns -plugins | grep kubernetes: $(printf '%s' "$kp" | tr -d ' \n')"

cat >"$D/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: smoke
  cluster:
    server: https://127.0.0.1:$A
    insecure-skip-tls-verify: true
users:
- name: admin
  user:
    token: $TOKEN
contexts:
- name: smoke
  context: {cluster: smoke, user: admin}
current-context: smoke
EOF
DNS=$(free_port)
H=$(free_port)
cat >"$D/Corefile" <<EOF
.:$DNS {
    bind 127.0.0.1
    health 127.0.0.1:$H
    kubernetes cluster.local clusterset.local {
        kubeconfig $D/kubeconfig smoke
        multicluster clusterset.local
    }
}
EOF
t4=$(ms)
"$BIN/coredns" -conf "$D/Corefile" >"$D/coredns.log" 2>&1 &
pids+=($!)
wait_for coredns "${pids[-1]}" 30 curl -fsS "http://127.0.0.1:$H/health"
t5=$(ms)
log "coredns with 'multicluster clusterset.local' serving on 127.0.0.1:$DNS, /health OK in $((t5 - t4)) ms"

log "PASS"
