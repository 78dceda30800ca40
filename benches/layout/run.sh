#!/usr/bin/env bash
# The least a plain job's FETCH + ACK costs Redis in key schema v2's layout (one MessagePack record
# per job), the same with numbers written as text (v2n), with the fields no FETCH or ACK reads packed
# into one (v2c), as a MessagePack array (v2a), and in a v3
# layout (a hash of system fields + the envelope as a string written once), and (real) our library's
# own FETCH and ACK the same way, one request per call (OJS_LAYOUT_SERVER names the server that writes
# the jobs and loads its library; default target/release/ojs-server), counted
# in instructions under callgrind (see floor.lua). One request per script call, no coalescing: the
# per-call costs (TIME, XADD, HINCRBY) are all in. Also prints memory per queued job of each layout.
#   benches/layout/run.sh [jobs=2000]
set -euo pipefail
cd "$(dirname "$0")/../.."
jobs="${1:-2000}"
. benches/common.sh
ensure_valgrind
work=$(mktemp -d)
cleanup() { kill "${spid:-}" "${rpid:-}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
mkdir -p target/bench
for layout in ${OJS_LAYOUTS:-v2 v2n v2c v2a v3 real}; do
  port=$(free_port)
  valgrind --tool=callgrind --callgrind-out-file="$work/cg.$layout" \
    "${OJS_BENCH_REDIS_SERVER:-$(command -v redis-server)}" --port "$port" --bind 127.0.0.1 --save '' \
    --appendonly no --dir "$work" --loglevel warning >>"$work/redis.log" 2>&1 & rpid=$!
  for _ in $(seq 300); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.2; done
  if [ "$layout" = real ]; then
    # Our server's own path: jobs enqueued through a server (which then stops), FETCH and ACK by FCALL.
    hport=$(free_port)
    OJS_REDIS_URL="redis://127.0.0.1:$port" OJS_LISTEN="127.0.0.1:$hport" RUST_LOG=warn \
      "${OJS_LAYOUT_SERVER:-./target/release/ojs-server}" >>"$work/server.log" 2>&1 & spid=$!
    for _ in $(seq 300); do curl -sf "http://127.0.0.1:$hport/ojs/v1/health" >/dev/null && break; sleep 0.2; done
    python3 - "$hport" "$jobs" <<'PY'
import json, sys, urllib.request
port, n = sys.argv[1], int(sys.argv[2])
doc = {"type": "noop", "queue": "bench", "args": [1234, "x" * 100], "priority": 3, "meta": {"trace": "abc"}}
for i in range(0, n, 500):
    body = json.dumps({"jobs": [dict(doc, args=[i + k, "x" * 100]) for k in range(min(500, n - i))]}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/ojs/v1/jobs/batch", body, {"content-type": "application/json"})
    urllib.request.urlopen(req).read()
PY
    kill "$spid"; wait "$spid" 2>/dev/null || true
    mem=0
  else
    python3 benches/layout/drive.py "$port" "$layout" "$jobs" setup
    mem=$(python3 benches/layout/drive.py "$port" "$layout" "$jobs" memory)
  fi
  callgrind_control -z "$rpid" >/dev/null 2>&1
  python3 benches/layout/drive.py "$port" "$layout" "$jobs" run
  callgrind_control -d "$rpid" >/dev/null 2>&1
  for _ in $(seq 50); do dump=$(ls "$work"/cg."$layout".* 2>/dev/null | head -1); [ -n "$dump" ] && break; sleep 0.2; done
  cp "$dump" "target/bench/layout-$layout.out"
  kill "$rpid"; wait "$rpid" 2>/dev/null || true
  echo "$layout $jobs $mem target/bench/layout-$layout.out" >>"$work/rows"
done
python3 - "$work/rows" <<'PY'
import sys
sys.path.insert(0, "benches")
from callgrind import Profile
print("| layout | memory per queued job (B) | Redis instructions per job (fetch + ack) | scripts | their commands | the rest |")
print("|---|---:|---:|---:|---:|---:|")
for layout, jobs, mem, path in (l.split() for l in open(sys.argv[1])):
    p, n = Profile(path), int(jobs)
    scripts = p.exact("fcallCommand")
    commands = sum(v for (a, b), v in p.edge.items() if a == "scriptCall" and b.split("'")[0] == "call")
    print(f"| {layout} | {float(mem):,.0f} | {p.total / n:,.0f} | {scripts / n:,.0f} | {commands / n:,.0f} | {(scripts - commands) / n:,.0f} |")
PY
