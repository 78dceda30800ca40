#!/usr/bin/env bash
# Shards on a Redis Cluster (issue 13): the same load on a local 3-primary cluster, with three queues
# on one primary (--shards 1) and with each queue on a shard of its own whose tag lives on its own
# primary (--shards 3 --queue-shard q0=0,q1=1,q2=2), alternately (A B A B …), every primary flushed and
# the server restarted between runs; then a table of medians and ratios: jobs/s, Redis CPU per job on
# all primaries together, and on the busiest primary (the one that caps a deployment's throughput).
#   benches/shards.sh [rounds=3] [jobs=20000]
# OJS_BENCH_SCENARIOS="add process" (default) picks the scenarios of http_load (see benches/src/bin).
# BullMQ is not in this run: the claim here is how this server scales over primaries; its ratios to
# BullMQ come from benches/compare.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ensure-redis.sh
. scripts/stack.sh
rounds="${1:-3}"
jobs="${2:-20000}"
cargo build --release --quiet -p ojs-server -p ojs-bench
OJS_STACK_CLUSTER=1 stack_start_redis
IFS=, read -r -a seeds <<<"$STACK_REDIS_CLUSTER"
ports=("${seeds[@]##*:}")
urls=$(printf 'redis://%s,' "${seeds[@]}")
urls="${urls%,}"

# The primary (port) that holds `key`.
owner_port() {
  redis-cli -c -p "${ports[0]}" set "$1" 1 >/dev/null
  for p in "${ports[@]}"; do
    if [ "$(redis-cli -p "$p" exists "$1")" = 1 ]; then redis-cli -p "$p" del "$1" >/dev/null; echo "$p"; fi
  done
}
# A namespace whose three shard tags live on three different primaries.
ns=""
for i in $(seq 1 500); do
  a=$(owner_port "ojs:{b$i}:probe"); b=$(owner_port "ojs:{b$i.1}:probe"); c=$(owner_port "ojs:{b$i.2}:probe")
  if [ "$a" != "$b" ] && [ "$a" != "$c" ] && [ "$b" != "$c" ]; then ns="b$i"; break; fi
done
[ -n "$ns" ] || { echo "!! no namespace spreads its three shards over the three primaries" >&2; exit 1; }
echo ">> namespace $ns: shards 0, 1, 2 on primaries $a, $b, $c" >&2

results="$STACK_WORK/results.jsonl"
STACK_SERVER_BIN="$PWD/target/release/ojs-server"
# run <label> <scenario> <server flags...>
run() {
  local label=$1 scenario=$2
  shift 2
  for p in "${ports[@]}"; do redis-cli -p "$p" FLUSHALL >/dev/null; done
  stack_start_server --namespace "$ns" "$@"
  OJS_BENCH_PEER=$label OJS_BENCH_SERVER_PID=$stack_spid OJS_BENCH_QUEUES=q0,q1,q2 \
    ./target/release/http_load "$STACK_URL" "$urls" "$scenario" "$jobs" >>"$results"
  kill "$stack_spid" 2>/dev/null && wait "$stack_spid" 2>/dev/null || true
  stack_spid=""
}
for round in $(seq "$rounds"); do
  for scenario in ${OJS_BENCH_SCENARIOS:-add process}; do
    run one "$scenario" --shards 1
    run three "$scenario" --shards 3 --queue-shard q0=0,q1=1,q2=2
  done
  echo ">> round $round of $rounds done" >&2
done

python3 - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
def med(peer, sc, key, per_job=False):
    v = [r[key] / (r["jobs"] if per_job else 1) for r in rows if r["peer"] == peer and r["scenario"] == sc]
    return statistics.median(v) if v else float("nan")
names = {"add": "add (1 job per request, 64 in flight)", "bulk": "bulk (1,000 per request)",
         "process": "process, ack-and-fetch-next (50 workers)",
         "process_split": "process, separate fetch + ack (50 workers)"}
print("| scenario (3 queues) | 1 primary | 3 primaries | ratio | Redis CPU µs/job, all primaries: 1 | 3 | busiest primary µs/job: 1 | 3 | ratio |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for sc in [s for s in names if any(r["scenario"] == s for r in rows)]:
    o, t = med("one", sc, "jobs_per_s"), med("three", sc, "jobs_per_s")
    oc, tc = med("one", sc, "redis_cpu_us", True), med("three", sc, "redis_cpu_us", True)
    ob, tb = med("one", sc, "redis_cpu_us_busiest_node", True), med("three", sc, "redis_cpu_us_busiest_node", True)
    print(f"| {names[sc]} | {o:,.0f} jobs/s | {t:,.0f} jobs/s | {t/o:.2f}x | {oc:.1f} | {tc:.1f} | {ob:.1f} | {tb:.1f} | {tb/ob:.2f}x |")
PY
