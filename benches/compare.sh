#!/usr/bin/env bash
# Side by side with BullMQ on one fresh redis-server: ours (through HTTP) and BullMQ (directly on Redis),
# alternately (A B A B …), FLUSHALL between runs, then a table of medians and ratios.
#   benches/compare.sh [rounds=3] [jobs=20000]
# With OJS_BASELINE_SERVER=<path to another ojs-server binary> (an earlier commit's release build), every
# scenario also runs against that binary, alternating with this build's, and a second table prints this
# build against the baseline: what a change bought, measured in one run.
# With OJS_BENCH_VARIANT="VAR=value …" (values without spaces), every scenario also runs against this build
# started and driven with those environment words (the server and http_load both get them), alternating
# with the plain runs, and the second table prints the plain runs against the variant: what a setting
# costs, e.g. OJS_BENCH_VARIANT='OJS_BENCH_QUEUE_RETENTION={"keep_last":0}' (no ended-job index) or
# OJS_BENCH_VARIANT='OJS_OTLP_ENDPOINT={otlp}' (traces exported; `{otlp}` becomes a stand-in collector,
# benches/otlp_sink.py, started here).
# OJS_BENCH_SCENARIOS="add bulk" runs only those scenarios (default: add bulk process process_split
# latency); the table then shows only them.
# Beside the table it prints where Redis' time goes per job (INFO commandstats, reset when each run's
# measured part begins): script calls, other commands (those the scripts call), their µs, and the
# difference, which is Lua and the calls themselves; and the server's CPU per request.
# It also profiles the server with perf (Debian's linux-perf, cpu-clock samples with call graphs) during
# the first round's process_split run and prints the top entries (the whole report stays in
# target/bench/perf-process_split.txt); OJS_BENCH_PERF=0 skips it, and so does a machine without perf.
# Installs what it needs: redis-server (apt), BullMQ (npm, pinned in benches/peers/bullmq), linux-perf (apt).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ensure-redis.sh
ensure_redis_server
rounds="${1:-3}"
jobs="${2:-20000}"
(cd benches/peers/bullmq && [ -d node_modules/bullmq ] || npm install --no-audit --no-fund --silent)
cargo build --release --quiet -p ojs-server -p ojs-bench

. benches/common.sh
rport=$(free_port); hport=$(free_port); work=$(mktemp -d)
cleanup() { kill "${spid:-}" "${rpid:-}" "${opid:-}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" --loglevel warning & rpid=$!
redis_url="redis://127.0.0.1:$rport"
baseline="${OJS_BASELINE_SERVER:-}"
[ -z "$baseline" ] || [ -x "$baseline" ] || { echo "!! OJS_BASELINE_SERVER=$baseline is not an executable" >&2; exit 2; }
variant="${OJS_BENCH_VARIANT:-}"
[ -z "$baseline" ] || [ -z "$variant" ] || { echo "!! give OJS_BASELINE_SERVER or OJS_BENCH_VARIANT, not both" >&2; exit 2; }
if [[ "$variant" == *"{otlp}"* ]]; then
  oport=$(free_port)
  python3 benches/otlp_sink.py "$oport" & opid=$!
  variant="${variant//\{otlp\}/http://127.0.0.1:$oport}"
fi
# start_server <binary> [VAR=value …]: one server at a time, so an idle one's timers never load Redis during a run.
start_server() {
  local bin=$1
  shift
  kill "${spid:-}" 2>/dev/null && wait "$spid" 2>/dev/null || true
  env "$@" OJS_REDIS_URL="$redis_url" OJS_LISTEN="127.0.0.1:$hport" RUST_LOG=warn "$bin" >>"$work/server.log" 2>&1 & spid=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$hport/ojs/v1/health" >/dev/null && break; sleep 0.1; done
}
# run_ours <peer label> <scenario> <jobs> [VAR=value …]
run_ours() {
  local peer=$1 scenario=$2 n=$3
  shift 3
  redis-cli -p "$rport" FLUSHALL >/dev/null
  env "$@" OJS_BENCH_PEER="$peer" OJS_BENCH_SERVER_PID=$spid ./target/release/http_load "http://127.0.0.1:$hport" "$redis_url" "$scenario" "$n" >>"$results"
}
results="$work/results.jsonl"
start_server ./target/release/ojs-server
perf_on="${OJS_BENCH_PERF:-1}"
if [ "$perf_on" = 1 ] && ! command -v perf >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    echo ">> installing linux-perf for the server profile" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq linux-perf >/dev/null 2>&1 ||
      { DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq linux-perf >/dev/null 2>&1; } || true
  fi
  command -v perf >/dev/null 2>&1 || { echo ">> no perf on this machine: no server profile" >&2; perf_on=0; }
fi
mkdir -p target/bench
# profiled <scenario> <jobs>: run_ours ojs under perf record (cpu-clock, call graphs), then the report.
profiled() {
  perf record -q -e cpu-clock -F 499 --call-graph dwarf,16384 -p "$spid" -o "$work/perf.data" 2>>"$work/perf.log" & ppid=$!
  sleep 0.2
  run_ours ojs "$1" "$2"
  kill -INT "$ppid" 2>/dev/null || true
  wait "$ppid" 2>/dev/null || true
  if perf report -i "$work/perf.data" --stdio --no-children --sort symbol --percent-limit 0.5 \
    >"target/bench/perf-$1.txt" 2>>"$work/perf.log" &&
    perf report -i "$work/perf.data" --stdio --children --sort symbol -g none --percent-limit 2 \
      >"target/bench/perf-$1-inclusive.txt" 2>>"$work/perf.log"; then
    echo ">> server profile during $1, self time (whole report with call graphs: target/bench/perf-$1.txt):" >&2
    # (sed -n, not head: head would close the pipe early, and pipefail would end the script)
    grep -E '^ +[0-9.]+%' "target/bench/perf-$1.txt" | sed -E 's/ +-? +-? *$//' | sed -n '1,20p' >&2 || true
    echo ">> and inclusive time of the server's own code, redis-rs, serde_json and hyper (children counted;" \
      "every entry: target/bench/perf-$1-inclusive.txt):" >&2
    grep -E '^ +[0-9.]+%' "target/bench/perf-$1-inclusive.txt" | grep -E 'ojs_|redis::|serde_json::|hyper::' |
      sed -E 's/ +-? +-? *$//' | sed -n '1,30p' >&2 || true
  else
    echo ">> perf report failed: $(tail -1 "$work/perf.log")" >&2
  fi
}

for round in $(seq "$rounds"); do
  for scenario in ${OJS_BENCH_SCENARIOS:-add bulk process process_split latency}; do
    n=$jobs; [ "$scenario" = latency ] && n=$((jobs / 10))
    if [ "$perf_on" = 1 ] && [ "$round" = 1 ] && [ "$scenario" = process_split ]; then
      profiled "$scenario" "$n"
    else
      run_ours ojs "$scenario" "$n"
    fi
    if [ -n "$baseline" ]; then
      start_server "$baseline"
      run_ours ojs-baseline "$scenario" "$n"
      start_server ./target/release/ojs-server
    fi
    if [ -n "$variant" ]; then
      # shellcheck disable=SC2086 # the variant's words
      start_server ./target/release/ojs-server $variant
      # shellcheck disable=SC2086
      run_ours ojs-variant "$scenario" "$n" $variant
      start_server ./target/release/ojs-server
    fi
    redis-cli -p "$rport" FLUSHALL >/dev/null
    node benches/peers/bullmq/bench.mjs "$redis_url" "$scenario" "$n" >>"$results"
  done
  echo ">> round $round of $rounds done" >&2
done

python3 - "$results" "$variant" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
def med(peer, sc, key):
    v = [r[key] for r in rows if r["peer"] == peer and r["scenario"] == sc and r.get(key) is not None]
    return statistics.median(v) if v else float("nan")
names = {"add": "add (1 job per request, 64 in flight)", "bulk": "bulk (1,000 per request)",
         "process": "process, ack-and-fetch-next (50 workers)",
         "process_split": "process, separate fetch + ack (50 workers, as the SDKs)",
         "latency": "latency (500 jobs/s)"}
names = {k: v for k, v in names.items() if any(r["scenario"] == k for r in rows)}
print("| scenario | ours (median) | BullMQ (median) | ratio | Redis CPU µs/job ours | BullMQ | ratio | server CPU µs/request |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for sc in names:
    o, b = med("ojs", sc, "jobs_per_s"), med("bullmq", sc, "jobs_per_s")
    jobs = next(r["jobs"] for r in rows if r["scenario"] == sc)
    oc, bc = med("ojs", sc, "redis_cpu_us") / jobs, med("bullmq", sc, "redis_cpu_us") / jobs
    sv = [r["server_cpu_us"] / r["requests"] for r in rows
          if r["peer"] == "ojs" and r["scenario"] == sc and r.get("server_cpu_us") is not None and r.get("requests")]
    scpu = f"{statistics.median(sv):.1f}" if sv else "n/a"
    print(f"| {names[sc]} | {o:,.0f} jobs/s | {b:,.0f} jobs/s | {o/b:.2f}x | {oc:.1f} | {bc:.1f} | {oc/bc:.2f}x | {scpu} |")
for k in ["fetched_p50_ms", "fetched_p99_ms", "acked_p50_ms", "acked_p99_ms"] if "latency" in names else []:
    print(f"| latency {k} | {med('ojs','latency',k):.1f} ms | {med('bullmq','latency',k):.1f} ms | | | | | |")
if "process" in names:
    mo, mb = med("ojs", "process", "memory_per_queued_job"), med("bullmq", "process", "memory_per_queued_job")
    print(f"| Redis memory per queued job (~100-byte payload) | {mo:,.0f} B | {mb:,.0f} B | {mo/mb:.2f}x | | | | |")
# Where Redis' time goes, per job (medians over the rounds): INFO commandstats since the run's start.
peers = [p for p in ["ojs", "ojs-baseline", "ojs-variant", "bullmq"] if any(r["peer"] == p and "script_us" in r for r in rows)]
if peers:
    print()
    print("| scenario | peer | script calls/job | other commands/job | script µs/job | their commands µs/job | Lua and call overhead µs/job | overhead share | blocking reads µs/job | server CPU µs/request |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for sc in names:
        for p in peers:
            rs = [r for r in rows if r["peer"] == p and r["scenario"] == sc and "script_us" in r]
            if not rs:
                continue
            per = lambda k: statistics.median([r[k] / r["jobs"] for r in rs])
            sc_us, cm_us = per("script_us"), per("command_us")
            over = sc_us - cm_us
            sv = [r["server_cpu_us"] / r["requests"] for r in rs if r.get("server_cpu_us") is not None and r.get("requests")]
            scpu = f"{statistics.median(sv):.1f}" if sv else ""
            share = f"{100 * over / sc_us:.0f}%" if sc_us > 0 else ""
            bl = statistics.median([r.get("blocking_us", 0) / r["jobs"] for r in rs])
            print(f"| {names[sc]} | {p} | {per('script_calls'):.2f} | {per('command_calls'):.2f} | {sc_us:.1f} | {cm_us:.1f} | {over:.1f} | {share} | {bl:.1f} | {scpu} |")
    print()
    print("(Blocking reads (XREAD, BZPOPMIN, ...) cannot run in a script: ours is the events tail, BullMQ's its workers' wait."
          " BullMQ also sends other commands outside its scripts, so not all its 'other commands' are inside them and its overhead is understated.)")
other = next((p for p in ["ojs-baseline", "ojs-variant"] if any(r["peer"] == p for r in rows)), None)
if other:
    label = "baseline" if other == "ojs-baseline" else "variant"
    if other == "ojs-variant":
        print()
        print(f"(variant: {sys.argv[2]})")
    def server_us(peer, sc):
        v = [r["server_cpu_us"] / r["requests"] for r in rows
             if r["peer"] == peer and r["scenario"] == sc and r.get("server_cpu_us") is not None and r.get("requests")]
        return statistics.median(v) if v else float("nan")
    print()
    print(f"| scenario | this build | {label} | ratio | Redis CPU µs/job this | {label} | ratio | server CPU µs/request this | {label} |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for sc in names:
        o, b = med("ojs", sc, "jobs_per_s"), med(other, sc, "jobs_per_s")
        jobs = next(r["jobs"] for r in rows if r["scenario"] == sc)
        oc, bc = med("ojs", sc, "redis_cpu_us") / jobs, med(other, sc, "redis_cpu_us") / jobs
        print(f"| {names[sc]} | {o:,.0f} jobs/s | {b:,.0f} jobs/s | {o/b:.2f}x | {oc:.1f} | {bc:.1f} | {oc/bc:.2f}x | {server_us('ojs', sc):.1f} | {server_us(other, sc):.1f} |")
    for k in ["fetched_p99_ms", "acked_p99_ms"] if "latency" in names else []:
        print(f"| latency {k} | {med('ojs','latency',k):.1f} ms | {med(other,'latency',k):.1f} ms | | | | | | |")
    if "process" in names:
        mo, mb = med("ojs", "process", "memory_per_queued_job"), med(other, "process", "memory_per_queued_job")
        print(f"| Redis memory per queued job (~100-byte payload) | {mo:,.0f} B | {mb:,.0f} B | {mo/mb:.2f}x | | | | | |")
PY
