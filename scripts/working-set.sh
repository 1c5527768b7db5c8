#!/usr/bin/env bash
# Which of a serving clusterset-dns's resident pages it uses: serves a
# manifest (file mode), waits until ready, clears the pages' referenced
# bits (/proc/PID/clear_refs), loads it with dnsperf for a while, then
# prints per mapping its size, Rss and Referenced (the part touched since
# the clear). With --pageout it first hands the binary's own pages back
# (process_madvise MADV_PAGEOUT, Linux 5.10+) and prints RssFile after the
# pageout, after dnsperf and after one /metrics scrape: what the paths the
# server runs pull back in.
#
#   scripts/working-set.sh BINARY MANIFEST QUERIES [--pageout]
#
# MANIFEST and QUERIES as scripts/gen-bench-data.py writes them
# (clusterset.yaml, queries.txt). Environment: WS_SECONDS=10 (dnsperf run),
# WS_RATE=50000 (queries per second offered), WS_DNS_PORT=15353,
# WS_ADMIN_PORT=19180. Needs root (clear_refs, process_madvise) and
# dnsperf. The server is killed on exit.

set -euo pipefail

if (($# < 3)); then
	sed -n '2,17p' "$0" >&2
	exit 2
fi
BINARY=$1 MANIFEST=$2 QUERIES=$3 PAGEOUT=${4:-}
SECONDS_=${WS_SECONDS:-10}
RATE=${WS_RATE:-50000}
DNS_PORT=${WS_DNS_PORT:-15353}
ADMIN_PORT=${WS_ADMIN_PORT:-19180}
LOG=$(mktemp)

"$BINARY" serve --file "$MANIFEST" --dns-listen "127.0.0.1:$DNS_PORT" \
	--admin-listen "127.0.0.1:$ADMIN_PORT" --udp-workers 1 >"$LOG" 2>&1 &
PID=$!
trap 'kill "$PID" 2>/dev/null; wait "$PID" 2>/dev/null; rm -f "$LOG"' EXIT

for _ in $(seq 1 600); do
	curl -sf "127.0.0.1:$ADMIN_PORT/ready" >/dev/null && break
	kill -0 "$PID" 2>/dev/null || { cat "$LOG" >&2; exit 1; }
	sleep 0.1
done
curl -sf "127.0.0.1:$ADMIN_PORT/ready" >/dev/null || { echo "not ready in 60 s" >&2; exit 1; }
sleep 3

rss() { grep -E '^(VmRSS|RssAnon|RssFile):' "/proc/$PID/status" | tr -s ' \t\n' ' '; echo; }
echo "ready:          $(rss)"
if [[ $PAGEOUT == --pageout ]]; then
	python3 - "$PID" <<'PY'
import ctypes, os, sys
pid = int(sys.argv[1])
exe = os.path.realpath(f"/proc/{pid}/exe")
libc = ctypes.CDLL(None, use_errno=True)
SYS_PIDFD_OPEN, SYS_PROCESS_MADVISE, MADV_PAGEOUT = 434, 440, 21
pidfd = libc.syscall(SYS_PIDFD_OPEN, pid, 0)
if pidfd < 0:
    sys.exit(f"pidfd_open: errno {ctypes.get_errno()}")
class IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
for line in open(f"/proc/{pid}/maps"):
    fields = line.split()
    if len(fields) > 5 and fields[5] == exe:
        start, end = (int(x, 16) for x in fields[0].split("-"))
        iov = IoVec(start, end - start)
        if libc.syscall(SYS_PROCESS_MADVISE, pidfd, ctypes.byref(iov), 1, MADV_PAGEOUT, 0) < 0:
            sys.exit(f"process_madvise: errno {ctypes.get_errno()}")
PY
	echo "paged out:      $(rss)"
fi
echo 1 >"/proc/$PID/clear_refs"
dnsperf -s 127.0.0.1 -p "$DNS_PORT" -d "$QUERIES" -l "$SECONDS_" -Q "$RATE" -c 8 -q 100 |
	grep -E 'Queries (sent|lost)|Queries per second'
echo "after dnsperf:  $(rss)"
curl -sf "127.0.0.1:$ADMIN_PORT/metrics" >/dev/null
echo "after /metrics: $(rss)"
python3 - "$PID" <<'PY'
import collections, re, sys
pid = sys.argv[1]
total = collections.defaultdict(lambda: [0, 0, 0])
current = None
for line in open(f"/proc/{pid}/smaps"):
    if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
        fields = line.split()
        path = fields[5] if len(fields) > 5 else "[anon]"
        start, end = (int(x, 16) for x in fields[0].split("-"))
        current = total[(path, fields[1])]
        current[0] += (end - start) // 1024
    elif line.startswith("Rss:"):
        current[1] += int(line.split()[1])
    elif line.startswith("Referenced:"):
        current[2] += int(line.split()[1])
print(f"{'mapping':50s} {'perms':5s} {'size KiB':>9s} {'Rss KiB':>8s} {'Referenced KiB':>15s}")
for (path, perms), (size, rss, referenced) in sorted(total.items(), key=lambda kv: -kv[1][1]):
    if rss >= 64:
        print(f"{path[-50:]:50s} {perms:5s} {size:9d} {rss:8d} {referenced:15d}")
PY
