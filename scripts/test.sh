#!/usr/bin/env bash
# Runs the whole test suite, both tiers (README.md, "Tests"), on a fresh
# machine:
#  1. installs the tools the tests drive when missing (dig, kdig, knotd, curl, openssl;
#     skopeo, umoci, python3 and strip for the image test, tests/image.rs; nft, ip,
#     socat and nc for the data plane, tests/connectivity.rs);
#  2. builds kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy, kubectl,
#     etcd, CoreDNS, kwok, helm and toxiproxy from the Go module proxy into
#     ~/.cache/clusterset-dns/testenv (first run only; later runs reuse the
#     cache) — see scripts/testenv-build.sh;
#  3. cargo test --features testenv: tier 1 (what plain `cargo test` runs)
#     plus the tests that start member clusters, CoreDNS, kubectl and helm,
#     the demo of the tutorials, and the image build.
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

exec cargo test --locked --features testenv "$@"
