#!/usr/bin/env bash
# Runs the whole test suite, both tiers (README.md, "Tests"), on a fresh
# machine:
#  1. installs the tools the tests drive when missing (dig, kdig, knotd, curl, openssl;
#     skopeo, umoci, python3, strip, podman and runc for the image test, tests/image.rs;
#     nft, ip, socat and nc for the data plane, tests/connectivity.rs);
#  2. builds kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy, kubectl
#     (the newest and the oldest supported Kubernetes),
#     etcd, CoreDNS, kwok, helm and toxiproxy from the Go module proxy into
#     ~/.cache/clusterset-dns/testenv (first run only; later runs reuse the
#     cache) — see scripts/testenv-build.sh;
#  3. cargo test --features testenv: tier 1 (what plain `cargo test` runs)
#     plus the tests that start member clusters, CoreDNS, kubectl and helm,
#     the demo of the tutorials, and the image build;
#  4. without extra arguments, the set of docs/compatibility.md again on
#     the oldest supported Kubernetes (CLUSTERSET_DNS_KUBERNETES=oldest),
#     a line of output per test file naming the version;
#  5. without extra arguments, a sample of tier-2 trials each run alone
#     (`--exact <trial>`), as one reruns a failing trial: a trial must not
#     need what an earlier trial of its file left (issue 45).
# Extra arguments go to `cargo test` (e.g. `scripts/test.sh --test coredns`).
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v dig >/dev/null 2>&1 || missing+=(bind9-dnsutils)
command -v kdig >/dev/null 2>&1 || missing+=(knot-dnsutils)
# knotd (tests/answer_size.rs) lives in /usr/sbin, which may not be on PATH.
command -v knotd >/dev/null 2>&1 || [ -x /usr/sbin/knotd ] || missing+=(knot)
command -v curl >/dev/null 2>&1 || missing+=(curl)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
command -v skopeo >/dev/null 2>&1 || missing+=(skopeo)
command -v umoci >/dev/null 2>&1 || missing+=(umoci)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
command -v strip >/dev/null 2>&1 || missing+=(binutils)
# tests/image.rs runs the image in podman with runc: crun, podman's default
# where installed, refuses hosts whose cgroups are in hybrid mode.
command -v podman >/dev/null 2>&1 || missing+=(podman)
command -v runc >/dev/null 2>&1 || [ -x /usr/sbin/runc ] || missing+=(runc)
# The data plane (tests/dataplane, tests/connectivity.rs): kube-proxy's
# nftables mode runs nft; ip and ss wire and probe the namespaces; the test
# pods' servers and clients are socat, and `kubectl exec` users get nc.
command -v nft >/dev/null 2>&1 || [ -x /usr/sbin/nft ] || missing+=(nftables)
command -v ip >/dev/null 2>&1 || [ -x /usr/sbin/ip ] || missing+=(iproute2)
command -v socat >/dev/null 2>&1 || missing+=(socat)
command -v nc >/dev/null 2>&1 || missing+=(netcat-openbsd)
if ((${#missing[@]})); then
    sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    echo "installing ${missing[*]}" >&2
    $sudo apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ -z "${CLUSTERSET_DNS_TESTENV_BIN:-}" ]; then
    CLUSTERSET_DNS_TESTENV_BIN=$(scripts/testenv-build.sh | tail -n1)
    export CLUSTERSET_DNS_TESTENV_BIN
fi
# The oldest supported Kubernetes (docs/compatibility.md): its set below,
# and tests/oldest_kubernetes.rs in every run.
oldest_bin=$(CLUSTERSET_DNS_KUBERNETES=oldest scripts/testenv-build.sh | tail -n1)
# The Kubernetes version in a bin directory's name (k8s-<version>_etcd-…).
version_of() { local v=${1##*/k8s-}; echo "${v%%_*}"; }
oldest=$(version_of "$oldest_bin")

cargo test --locked --features testenv "$@"
[ $# -eq 0 ] || exit 0
echo "kubernetes $(version_of "$CLUSTERSET_DNS_TESTENV_BIN"): every test passed" >&2

# What differs between Kubernetes releases, run again on the oldest
# supported one: the data plane and local first through its kube-proxy,
# the install, the controller and the DNS server against its apiserver.
# A line each, naming the version; the first failure ends the run. The
# install's `kubectl apply -k deploy` trials are left out: 1.33 refuses
# the DNS Service's PreferSameNode, and docs/deploy.md gives it its own
# block, which tests/install.rs runs on both (docs/compatibility.md).
oldest_set=(
    "connectivity"
    "local_first"
    "install --skip kustomize_install"
    "controller"
    "kubernetes"
)
for entry in "${oldest_set[@]}"; do
    read -r target filters <<<"$entry"
    log=$(mktemp)
    start=$(date +%s)
    # shellcheck disable=SC2086 # filters: words for the test binary
    if ! CLUSTERSET_DNS_TESTENV_BIN=$oldest_bin cargo test --locked --features testenv --test "$target" -- $filters >"$log" 2>&1; then
        cat "$log" >&2
        echo "kubernetes $oldest: tests/$target.rs FAILED" >&2
        rm -f "$log"
        exit 1
    fi
    passed=$(grep -o 'test result: ok. [0-9]* passed' "$log" | awk '{ n += $4 } END { print n + 0 }')
    echo "kubernetes $oldest: tests/$target.rs${filters:+ ($filters)} ok, $passed passed in $(($(date +%s) - start)) s" >&2
    rm -f "$log"
done

# Trials that stand alone: each of these runs by itself, in binaries the run
# above built. Each must pass, and its filter must have selected exactly one
# trial (a renamed trial would otherwise pass as "0 passed"). Chosen for
# clusters that start in seconds, and for needing a scenario or a step of a
# sequence that other trials of their file also use: a ClusterSetIP export
# and a port conflict on three member clusters, the peer's share of
# clusterset IPs on two apiservers, the documented join of `peer add`.
alone=(
    "controller its_derived_service_is_selectorless_owned_and_holds_each_clusters_vip"
    "controller explain_names_the_exporters_the_winner_and_who_lost_the_port"
    "hostile_peer a_peer_past_its_share_of_clusterset_ips_gets_no_new_import"
    "peer_cli peer_list_shows_the_documented_table_and_json"
)
for entry in "${alone[@]}"; do
    read -r target trial <<<"$entry"
    echo "trial alone: --test $target -- --exact $trial" >&2
    log=$(mktemp)
    if ! cargo test --locked --features testenv --test "$target" -- --exact "$trial" >"$log" 2>&1; then
        cat "$log" >&2
        echo "trial $trial of tests/$target.rs fails when run alone" >&2
        rm -f "$log"
        exit 1
    fi
    if ! grep -q "test result: ok. 1 passed; 0 failed" "$log"; then
        cat "$log" >&2
        echo "--exact $trial selected no trial of tests/$target.rs (renamed?)" >&2
        rm -f "$log"
        exit 1
    fi
    rm -f "$log"
done
