#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine: installs the DNS tools the
# tests drive (dig, kdig) when they are missing, then `cargo test`.
# Extra arguments go to `cargo test` (e.g. `scripts/test.sh --test dns_cases`).
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v dig >/dev/null 2>&1 || missing+=(bind9-dnsutils)
command -v kdig >/dev/null 2>&1 || missing+=(knot-dnsutils)
if ((${#missing[@]})); then
    sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    echo "installing ${missing[*]}" >&2
    $sudo apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

exec cargo test --locked "$@"
