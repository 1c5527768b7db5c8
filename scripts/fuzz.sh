#!/usr/bin/env bash
# Coverage-guided fuzzing of clusterset-dns on stable Rust (docs/robustness.md,
# "Fuzzing"):
#
#   scripts/fuzz.sh [--execs N] [--max-time S] [target...]
#
# Targets (tests/fuzz/fuzz_targets/, all by default): udp_fast_path,
# hickory_path, manifest. Each runs in one libFuzzer process (cargo-fuzz,
# `--sanitizer none`, debug assertions on) at nice 5 for N executions
# (default 10,000,000) or S seconds if that comes first (default: no time
# limit), one target after the other, starting from its saved
# corpus tests/fuzz/corpus/<target>/ (seeds from scripts/fuzz-seeds.py plus
# what earlier runs kept) and the inputs of past findings
# (tests/fuzz/regressions/<target>/). New inputs go to a scratch directory;
# at the end the saved corpus is replaced by the smallest set of its files
# and the new ones that keeps their coverage (libFuzzer -set_cover_merge=1).
# A crash, a timeout (10 s) or an out-of-memory (the memory ceilings below)
# stops that target and leaves the input in tests/fuzz/artifacts/<target>/.
# The timeout is wall-clock: never pause a running fuzzer (SIGSTOP) to
# quiet the machine for a benchmark, or the input it held is reported as a
# hang. Run it at nice 19 beside the benchmark instead.
#
# Prints per target: executions, wall time, executions per second, coverage
# (libFuzzer's `cov`: instrumented edges reached; `ft`: features, edges with
# hit-count buckets and compared values), corpus size, peak RSS, findings.
# Exits non-zero if any target found something.
#
# Installs cargo-fuzz (`cargo install --locked`) if it is missing. The
# instrumented build of the crate and its dependencies takes 10-20 minutes
# the first time on two cores.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
FUZZ_DIR="$ROOT/tests/fuzz"
EXECS=10000000
MAX_TIME=0
TARGETS=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --execs) EXECS="$2"; shift 2 ;;
        --max-time) MAX_TIME="$2"; shift 2 ;;
        -h|--help) sed -n '2,31p' "$0"; exit 0 ;;
        -*) echo "unknown option $1" >&2; exit 2 ;;
        *) TARGETS+=("$1"); shift ;;
    esac
done
if [[ ${#TARGETS[@]} -eq 0 ]]; then
    TARGETS=(udp_fast_path hickory_path manifest)
fi

# Per target: the longest input and the memory ceilings. A datagram is read
# into 4096 bytes (src/dns/udp.rs); the hickory path also serves TCP, whose
# messages may be longer. Manifests: 2 KiB holds several whole documents
# (an import with its slices is a few hundred bytes; the fuzzer splices
# them) and costs about half an execution at 4 KiB, where the target ran
# at about 1,100 a second (it parses each input twice); the parse budget keeps
# memory to a small multiple of the text's length, so no single allocation
# may pass 64 MiB.
max_len() {
    case "$1" in
        udp_fast_path) echo 4096 ;;
        hickory_path) echo 8192 ;;
        manifest) echo 2048 ;;
        *) echo "unknown target $1" >&2; exit 2 ;;
    esac
}
MEMORY=(-rss_limit_mb=1024 -malloc_limit_mb=64)
# What the minimized corpus keeps: every feature (edges and their hit-count
# buckets), except for the manifest, where that is some 2,600 files and
# 3 MB after 25 minutes: there every edge (-use_counters=0), about 500
# files and 0.5 MB.
merge_flags() {
    case "$1" in
        manifest) echo -use_counters=0 ;;
        *) ;;
    esac
}

if ! command -v cargo-fuzz >/dev/null; then
    echo "== installing cargo-fuzz"
    cargo install --locked cargo-fuzz
fi
echo "== $(rustc --version), $(cargo fuzz --version)"
python3 "$ROOT/scripts/fuzz-seeds.py" "${TARGETS[@]}"

# A fixed commit for build.rs: otherwise every commit made while the
# fuzzer runs would rebuild the instrumented crate (about 7 minutes),
# including before the final merge.
export CLUSTERSET_DNS_GIT_COMMIT=fuzzing
FUZZ=(cargo fuzz run --fuzz-dir "$FUZZ_DIR" --sanitizer none --debug-assertions)
echo "== building the targets (instrumented, release, debug assertions)"
nice -n 5 cargo fuzz build --fuzz-dir "$FUZZ_DIR" --sanitizer none --debug-assertions

SUMMARY=()
FOUND=0
for target in "${TARGETS[@]}"; do
    corpus="$FUZZ_DIR/corpus/$target"
    scratch="$FUZZ_DIR/work/$target"
    artifacts="$FUZZ_DIR/artifacts/$target"
    log="$FUZZ_DIR/work/$target.log"
    rm -rf "$scratch"
    mkdir -p "$scratch" "$artifacts" "$corpus"
    stamp="$FUZZ_DIR/work/$target.start"
    touch "$stamp"
    echo "== $target: $EXECS executions (log: $log)"
    start=$(date +%s)
    status=0
    regressions=()
    if [[ -d "$FUZZ_DIR/regressions/$target" ]]; then
        regressions=("$FUZZ_DIR/regressions/$target")
    fi
    nice -n 5 "${FUZZ[@]}" "$target" "$scratch" "$corpus" "${regressions[@]}" -- \
        -runs="$EXECS" -max_total_time="$MAX_TIME" -max_len="$(max_len "$target")" -timeout=10 "${MEMORY[@]}" \
        -artifact_prefix="$artifacts/" -print_final_stats=1 >"$log" 2>&1 || status=$?
    seconds=$(( $(date +%s) - start ))
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -1)
    # The last status line: `#N  DONE  cov: C ft: F corp: U/S ...`.
    last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
    findings=$(find "$artifacts" -type f -newer "$stamp" | wc -l)
    if [[ $status -ne 0 || $findings -gt 0 ]]; then
        FOUND=1
        echo "!! $target stopped (exit $status); the end of its log:"
        tail -40 "$log"
        find "$artifacts" -type f -newer "$stamp" -printf '   finding: %p\n'
    fi
    # The saved corpus becomes the smallest set of its files and the new
    # ones that reaches the same coverage, which keeps it small.
    minimized="$FUZZ_DIR/work/$target.min"
    rm -rf "$minimized" && mkdir -p "$minimized"
    nice -n 5 "${FUZZ[@]}" "$target" "$minimized" "$corpus" "$scratch" -- \
        -set_cover_merge=1 $(merge_flags "$target") -max_len="$(max_len "$target")" "${MEMORY[@]}" >"$log.merge" 2>&1
    rm -rf "$corpus" && mv "$minimized" "$corpus"
    files=$(find "$corpus" -type f | wc -l)
    bytes=$(du -sb "$corpus" | cut -f1)
    rate=$(( ${execs:-0} / (seconds > 0 ? seconds : 1) ))
    SUMMARY+=("| $target | ${execs:-?} | $seconds s | $rate | ${cov:-?} | ${ft:-?} | $files files, $bytes bytes | ${rss:-?} MB | $findings |")
done

echo
echo "== summary ($EXECS executions asked per target, time limit ${MAX_TIME}s; 0: none)"
echo "| target | executions | wall time | exec/s | cov (edges) | ft (features) | saved corpus | peak RSS | findings |"
echo "|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${SUMMARY[@]}"
exit $FOUND
