#!/usr/bin/env bash
# The server's own cost per HTTP request, counted in instructions under valgrind's callgrind: a figure a
# busy shared machine does not blur (CPU time per request on this 2-core VM moves by ±30% between runs,
# instructions by well under 1%). Each scenario of benches/src/bin/http_load.rs runs once against a
# server under callgrind on a private redis-server; counting starts when the measured part begins
# (http_load runs OJS_BENCH_AT_BEGIN = callgrind_control -z), after a warm-up run of 500 jobs.
#   benches/server_cpu.sh [jobs=3000]
# OJS_BENCH_SCENARIOS (default "add process_split") picks the scenarios. With OJS_BASELINE_SERVER=<path
# to another ojs-server binary>, each scenario also runs against it, and the table gives the ratio.
# Prints instructions per request and the inclusive share of the server's main parts; the callgrind
# outputs stay in target/bench/ (callgrind_annotate reads them). Installs valgrind (apt) when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ensure-redis.sh
. benches/common.sh
ensure_redis_server
jobs="${1:-3000}"
ensure_valgrind
callgrind_runs
# one <label> <binary> <scenario>: a fresh Redis and server under callgrind, warm-up, the measured run.
one() {
  local rport hport out
  rport=$(free_port); hport=$(free_port)
  redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" --loglevel warning >/dev/null 2>&1 & rpid=$!
  OJS_REDIS_URL="redis://127.0.0.1:$rport" OJS_LISTEN="127.0.0.1:$hport" RUST_LOG=warn \
    valgrind --tool=callgrind --callgrind-out-file="$work/cg.$1.$3" "$2" >>"$work/server.log" 2>&1 & spid=$!
  for _ in $(seq 300); do curl -sf "http://127.0.0.1:$hport/ojs/v1/health" >/dev/null && break; sleep 0.2; done
  ./target/release/http_load "http://127.0.0.1:$hport" "redis://127.0.0.1:$rport" "$3" 500 >/dev/null
  redis-cli -p "$rport" FLUSHALL >/dev/null
  out=$(OJS_BENCH_AT_BEGIN="callgrind_control -z $spid >/dev/null 2>&1" \
    ./target/release/http_load "http://127.0.0.1:$hport" "redis://127.0.0.1:$rport" "$3" "$jobs")
  callgrind_control -d "$spid" >/dev/null 2>&1
  local dump
  for _ in $(seq 50); do dump=$(ls "$work"/cg."$1"."$3".* 2>/dev/null | head -1); [ -n "$dump" ] && break; sleep 0.2; done
  cp "$dump" "target/bench/callgrind-$1-$3.out"
  kill "$spid" "$rpid" 2>/dev/null || true; wait "$spid" "$rpid" 2>/dev/null || true
  echo "$1 $3 $(echo "$out" | python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["requests"])') target/bench/callgrind-$1-$3.out" >>"$rows"
  echo ">> $1 $3 done" >&2
}
for scenario in ${OJS_BENCH_SCENARIOS:-add process_split}; do
  one ours ./target/release/ojs-server "$scenario"
  [ -z "$baseline" ] || one baseline "$baseline" "$scenario"
done
python3 - "$rows" <<'PY'
import sys
sys.path.insert(0, "benches")
from callgrind import Profile
# Inclusive instructions of a function: its own plus those of the calls it makes to others.
PARTS = [("job views (ojs_core::job::job_view)", "ojs_core::job::job_view"),
         ("envelope parsing (ojs_core::envelope::parse)", "ojs_core::envelope::parse"),
         ("redis-rs reply parsing", "ValueCodec::decode_stream"),
         ("the events tail (events_hub::tail)", "ojs_server::events_hub::tail::{{closure}}"),
         ("the coalescer's script calls", "ojs_server::coalesce::Coalescer<R,O>::start::{{closure}}::{{closure}}"),
         ("hyper's request parsing", "as hyper::proto::h1::Http1Transaction>::parse"),
         ("metrics (ojs_server::metrics::job_event)", "ojs_server::metrics::job_event")]
rows = [l.split() for l in open(sys.argv[1])]
table = {}
for label, sc, req, path in rows:
    prof = Profile(path)
    total = prof.total
    parts = [(name, 100.0 * prof.inclusive(pat) / total if total else 0.0) for name, pat in PARTS]
    table[(label, sc)] = (total / int(req), int(req), parts)
print("| scenario | build | requests | instructions per request | vs baseline |")
print("|---|---|---:|---:|---:|")
for (label, sc), (ipr, req, _) in table.items():
    base = table.get(("baseline", sc))
    ratio = f"{ipr / base[0]:.2f}x" if base and label == "ours" else ""
    print(f"| {sc} | {label} | {req:,} | {ipr:,.0f} | {ratio} |")
for (label, sc), (_, _, parts) in table.items():
    print(f"\n{sc}, {label}: inclusive share of the server's instructions")
    for name, share in parts:
        print(f"  {share:5.1f}%  {name}")
PY
